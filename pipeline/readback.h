/* readback.h - pn-quantize's check of what it wrote: every tensor of the
 * output read back from the device and compared with what was computed.
 *
 * Each tensor's bytes are read around the page cache (gguf_direct), so the
 * stored bytes are checked, not a cached copy: their CRC-32 must be the one
 * computed while writing, and every PN block must be valid
 * (pn_validate_row). This happens in two places:
 *
 *   pn_readback_behind   called by the writer thread after each write: reads
 *                        back the tensors of the open split that are settled
 *                        (on the device, never written again:
 *                        pn_outset_settled), one piece at a time, while the
 *                        team computes; a tensor that passes is marked, and
 *                        the first one that does not stops it (the check at
 *                        the end then names the problem);
 *   pn_readback_split    after the split is closed: its header and tensor
 *                        list against the plan, then, in parallel, every
 *                        tensor not marked; the first problem in file order
 *                        is reported, naming the file, tensor, row and block.
 *
 * The output's bytes are the same either way; reading behind the writer only
 * moves the reading from after the run into it. Memory: one piece buffer for
 * the writer thread, one a thread at the end. Only the writer thread calls
 * pn_readback_behind, and pn_readback_split comes after it has finished.
 * No printing.
 */
#ifndef PN_PIPELINE_READBACK_H
#define PN_PIPELINE_READBACK_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "gguf/gguf.h"
#include "io/outset.h"
#include "mix/plan.h"

typedef struct pn_readback {
    pn_outset *out;
    const pn_plan_tensor *t; /* the plan's tensors, in file order */
    const uint32_t *crcs;    /* per tensor, computed while writing; final by the
                              * time its last byte is written */
    size_t n;
    int threads; /* at the end */
    volatile sig_atomic_t *cancel;
    bool *verified; /* per tensor: read back behind the writer and found good */
    /* behind the writer */
    size_t split, next; /* the split being read back, its next tensor */
    gguf_reader *r;     /* of that split, opened once its header is settled */
    gguf_direct *d;
    uint8_t *buf;
    bool stopped;   /* a problem or an error: the end checks the rest */
    double seconds; /* spent reading behind the writer */
    uint64_t bytes; /* read back behind the writer */
} pn_readback;

/* No work and no memory beyond the per-tensor marks; PN_ERR_NOMEM only. */
pn_status pn_readback_init(pn_readback *b, pn_outset *out, const pn_plan_tensor *t,
                           const uint32_t *crcs, size_t n, int threads,
                           volatile sig_atomic_t *cancel, pn_error *err);
void pn_readback_free(pn_readback *b);

/* Reads back what has settled since the last call (nothing when the split
 * cannot be read while written). Never fails: a problem stops it, and the
 * end finds the problem again. */
void pn_readback_behind(pn_readback *b);

/* Checks written split s (closed): keys and tensors against the plan, and
 * the data of every tensor not read back behind the writer. */
pn_status pn_readback_split(pn_readback *b, size_t s, pn_error *err);

#endif
