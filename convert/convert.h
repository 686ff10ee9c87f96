/* convert.h - pn-convert's job: a Hugging Face folder written as the GGUF
 * that convert_hf_to_gguf.py writes from it (hf/hf.h), one file or a split
 * set (io/outset.h). */
#ifndef PN_CONVERT_H
#define PN_CONVERT_H

#include <stdbool.h>
#include <stddef.h>

#include "common/pn_error.h"
#include "gguf/gguf_split.h"
#include "hf/hf.h"

typedef struct pn_convert_opts {
    gguf_split_limit split; /* GGUF_SPLIT_NONE: one file */
    bool force;             /* replace an existing target (never a file of SRC) */
} pn_convert_opts;

/* Writes the opened folder m, read from src (the path it was opened by), at
 * dst (a split set: dst's split names beside it). Before anything is
 * written every target is checked: none is a file of src, whatever force
 * says (PN_ERR_USAGE), none is a directory, none exists without force.
 * Each file is read back as a GGUF before all are put in place together; on
 * any failure nothing is left at the targets. *n_files (may be NULL): how
 * many were written. */
pn_status pn_convert(const pn_hf_model *m, const char *src, const char *dst,
                     const pn_convert_opts *o, size_t *n_files, pn_error *err);

#endif
