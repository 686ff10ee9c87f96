/* convert.h - pn-convert's job: a Hugging Face folder written as the GGUF
 * that convert_hf_to_gguf.py writes from it (hf/hf.h), one file or a split
 * set (io/outset.h). */
#ifndef PN_CONVERT_H
#define PN_CONVERT_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "gguf/gguf_split.h"
#include "hf/hf.h"

/* Called after each chunk written: tensor `tensor` of n_tensors (its GGUF
 * name), `done` of `total` tensor bytes written so far. */
typedef void (*pn_convert_progress_fn)(void *user, size_t tensor, size_t n_tensors,
                                       const char *name, uint64_t done, uint64_t total);

typedef struct pn_convert_opts {
    gguf_split_limit split; /* GGUF_SPLIT_NONE: one file */
    bool force;             /* replace an existing target (never a file of SRC) */
    bool dry_run;           /* plan the set and check its targets; open and write nothing */
    bool no_header_hash;    /* write exactly the converter's keys: no pn.header.* record
                             * (docs/format.md#the-header-hash) */
    pn_convert_progress_fn progress; /* may be NULL */
    void *user;
    volatile sig_atomic_t *cancel; /* non-zero: stop (PN_ERR_INTERRUPTED), checked per chunk */
} pn_convert_opts;

/* What the job wrote (or, on a dry run, would write). */
typedef struct pn_convert_result {
    size_t n_files;      /* files of the set */
    uint64_t file_bytes; /* bytes of all of them */
} pn_convert_result;

/* Writes the opened folder m, read from src (the path it was opened by), at
 * dst (a split set: dst's split names beside it). Before anything is
 * written every target is checked: none is a file of src, whatever force
 * says (PN_ERR_USAGE), none is a directory, none exists without force.
 * Each file is read back as a GGUF before all are put in place together; on
 * any failure, and when *cancel becomes non-zero, nothing is left at the
 * targets and what was there is as it was. On a dry run the job stops
 * after the targets' check, whose refusal (PN_ERR_EXISTS: a target exists
 * without force) it returns as the real run would. *res (may be NULL): the
 * set written or planned. */
pn_status pn_convert(const pn_hf_model *m, const char *src, const char *dst,
                     const pn_convert_opts *o, pn_convert_result *res, pn_error *err);

#endif
