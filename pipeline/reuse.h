/* reuse.h - pn-quantize --reuse PREV: which output tensors can be copied
 * from an earlier output instead of being quantized (docs/reuse.md).
 *
 * Steps, each called by the job (pipeline/quantize.c) in this order:
 *   pn_reuse_open      PREV must be a PN file pn-quantize wrote: a missing
 *                      file, a FIFO or other non-regular file, a file that
 *                      is not GGUF and a GGUF without the pn.* keys
 *                      (pn.format, pn.tensor_crc32, pn.quantizer) are
 *                      errors naming PREV, before anything is written;
 *   pn_reuse_match     per output tensor: copied when PREV made it from a
 *                      source of the same header hash and has a tensor of
 *                      that name with the same type, shape, rotation block,
 *                      source type and sampled-rows CRC-32, by the same
 *                      quantizer (pn.quantizer) with the same rotation
 *                      (pn.rotation.*). A file-level difference reuses
 *                      nothing and says why;
 *   pn_reuse_verify    with --reuse-verify: the whole-tensor CRC-32 of the
 *                      source (read now) must equal PREV's
 *                      pn.source.tensor_crc32 too;
 *   pn_reuse_check_prev  PREV's bytes of every tensor still to be copied
 *                      against PREV's pn.tensor_crc32; one that fails is
 *                      quantized again, with a note naming it.
 * Notes go through o->note. Nothing here writes: the copy itself is the
 * stream's writer (gguf_writer_copy_from from fd[i] at offset[i]).
 *
 * PREV may be a split set (any of its files named): each tensor is copied
 * from the file that holds it.
 *
 * Ownership: a pn_reuse owns its reader; free with
 * pn_reuse_free.
 */
#ifndef PN_PIPELINE_REUSE_H
#define PN_PIPELINE_REUSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "gguf/gguf.h"
#include "mix/imatrix.h"
#include "mix/plan.h"
#include "pipeline/quantize.h"
#include "io/source_id.h"

typedef struct pn_reuse {
    char *path;
    gguf_reader *prev;      /* PREV (a split set: all its files) */
    uint32_t *prev_crc;     /* PREV's pn.tensor_crc32, per PREV tensor */
    pn_recorded_source rec; /* PREV's pn.source.*, when usable */
    bool have_rec;
    char rec_problem[PN_ERROR_MSG_MAX]; /* why rec is unusable, or "" */
    /* per output tensor (plan order), after pn_reuse_match */
    size_t n;
    long *from;             /* PREV's tensor to copy, or -1 */
    const char **why;       /* when not copied: a short reason (static text) */
    uint32_t *crc32;        /* PREV's pn.tensor_crc32 of it */
    uint32_t *source_crc32; /* PREV's pn.source.tensor_crc32 of it */
    uint64_t *offset;       /* its data's offset in PREV's file that holds it */
    int *fd;                /* that file's descriptor (PREV's reader's; read-only) */
    size_t n_copy;
    uint64_t copy_bytes;
    char none_why[PN_ERROR_MSG_MAX]; /* why nothing is reused, or "" */
} pn_reuse;

pn_status pn_reuse_open(const char *path, pn_reuse **out, pn_error *err);
void pn_reuse_free(pn_reuse *ru);

/* Decides from the keys and sid's sampled rows (which must be known). */
pn_status pn_reuse_match(pn_reuse *ru, const pn_plan *plan, const pn_source_id *sid,
                         const char *quantizer, const pn_quantize_opts *o, pn_error *err);
/* After pn_reuse_match, with this run's imatrix (NULL: none) and
 * pn_imatrix_hash_used of it: when PREV records another imatrix
 * (pn.mix.imatrix.entries_fnv1a64, or none where this run has one, or one
 * where this run has none), no tensor whose bytes depend on the imatrix is
 * copied: a q3_K or q4_K tensor with an entry in this run's imatrix, and
 * when PREV had one every q3_K and q4_K tensor (it may have been weighted).
 * pn3t/pn4t bytes never depend on it (the promotions do, and the type is
 * compared already). A note names how many were dropped. */
void pn_reuse_drop_imatrix(pn_reuse *ru, const pn_plan *plan, const pn_imatrix *im,
                           uint64_t im_hash, const pn_quantize_opts *o);
/* Reads the whole source tensor of every tensor still to be copied into
 * sid->tensor_crc and drops those whose CRC differs from PREV's record. */
pn_status pn_reuse_verify(pn_reuse *ru, const pn_plan *plan, const gguf_reader *src,
                          pn_source_id *sid, int threads, const pn_quantize_opts *o, pn_error *err);
/* Reads PREV's bytes of every tensor still to be copied; drops those whose
 * CRC-32 is not PREV's pn.tensor_crc32 entry. */
pn_status pn_reuse_check_prev(pn_reuse *ru, const pn_plan *plan, int threads,
                              const pn_quantize_opts *o, pn_error *err);

/* A note of the quantize job (o->note, when set): printf-formatted, at most
 * 2047 bytes. Shared by the job and its reuse steps. */
void pn_quantize_note(const pn_quantize_opts *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Stops copying tensor i (it is quantized), recording why. */
void pn_reuse_drop(pn_reuse *ru, const pn_plan *plan, size_t i, const char *why);

#endif
