/* hf_convert.h - pn-convert's job: a Hugging Face folder written as the GGUF
 * that convert_hf_to_gguf.py writes (hf.h), one file or a split set. */
#ifndef PN_HF_CONVERT_H
#define PN_HF_CONVERT_H

#include <stdbool.h>
#include <stddef.h>

#include "gguf/gguf_split.h"
#include "hf/hf.h"

typedef struct pn_hf_convert_opts {
    gguf_split_limit split;      /* GGUF_SPLIT_NONE: one file */
    bool force;                  /* replace an existing target */
} pn_hf_convert_opts;

/* Writes m at out_path (a split set: out_path's split names). Each file is
 * read back as a GGUF before all are put in place together; on any failure
 * nothing is left at the targets. *n_files: how many were written. */
pn_status pn_hf_convert(const pn_hf_model *m, const char *out_path,
                        const pn_hf_convert_opts *o, size_t *n_files, pn_error *err);

#endif
