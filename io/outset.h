/* outset.h - a job's output: one GGUF file or a split set (docs/split.md).
 *
 * A job builds one *model* writer, holding every key and tensor of its
 * output as for one file, and makes the output set from it: the plan (which
 * tensors go to which file, gguf-split's rules, gguf/gguf_split.h), one
 * writer per split (gguf_writer_new_split: split 0 has every key, each split
 * its own cut of the per-tensor keys, the split keys when there are two or
 * more) and their targets: DST itself for a plan of one, else
 * NAME-0000K-of-0000N.gguf beside DST. Then:
 *
 *   pn_outset_check_targets   before any work: no target is a file of the
 *                             input, none exists without force;
 *   pn_outset_begin           begins the first split written (its errors and
 *                             its note come before the work);
 *   pn_outset_write           the bytes of tensor i, in tensor order: each
 *                             split is begun when its first tensor arrives and
 *                             closed after its last (its per-tensor keys patched
 *                             from the caller's values first), so one write
 *                             buffer is live at a time, whatever the number of
 *                             splits;
 *   pn_outset_close           closes what is left;
 *   pn_outset_settled,        during the writing, with drop_behind_bytes:
 *   pn_outset_open_settled    how much of the open split is on the device,
 *                             and a reader to read that part back;
 *   pn_outset_open_written    a reader of a written split (for validation),
 *                             whose split keys are checked against the plan;
 *   pn_outset_commit          every written split at once, the first split
 *                             last (gguf_writer_commit_set): an interrupted
 *                             run never leaves a loadable partial set;
 *   pn_outset_free            aborts whatever is not committed.
 *
 * One split per process (`only`): the whole set is planned, with every
 * split's keys, but only split `only` is begun, written and committed, under
 * the name it has in a full run; its bytes are those of the full run.
 *
 * All calls on one set come from one thread at a time (the write calls may
 * come from a writer thread while the caller waits). No printing, no global
 * state.
 */
#ifndef PN_PIPELINE_OUTSET_H
#define PN_PIPELINE_OUTSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "gguf/gguf.h"
#include "gguf/gguf_split.h"

#define PN_OUTSET_MAX_PER_TENSOR 4

typedef struct pn_outset_opts {
    gguf_split_limit limit;        /* GGUF_SPLIT_NONE: one file (unless keep_split) */
    const gguf_reader *keep_split; /* not NULL: the splits of this source (--keep-split) */
    /* With keep_split: the source as this run reads it when that holds
     * fewer tensors than the set (its MTP layer dropped), in the set's
     * order; each tensor goes to the split of the set its name is in, and a
     * split left with none is not written (pn_outset_plan_note names it).
     * NULL: the output's tensors are the set's. */
    const gguf_reader *keep_split_view;
    long only;  /* -1: every split; else write this split alone */
    bool force; /* replace existing targets */
    /* Per-tensor array keys of the model (pn.tensor_crc32, pn.source.*)
     * that each split records for its own tensors, and for each the values
     * it is patched with when a split is closed: per_tensor_values[k][i]
     * for model tensor i, final by the time the last byte of tensor i is
     * written; a NULL values pointer keeps the model's own values (cut).
     * Keys the model lacks are left out. */
    size_t n_per_tensor;
    const char *per_tensor_key[PN_OUTSET_MAX_PER_TENSOR];
    const uint32_t *per_tensor_values[PN_OUTSET_MAX_PER_TENSOR];
    /* Ask the kernel to start writing back every this many bytes written
     * (so that the final fsync has little left to do); 0: never. */
    uint64_t writeback_bytes;
    /* With writeback_bytes: the data written more than this many bytes
     * ago is waited for on the device and dropped from the page cache, so
     * a run that writes many GB holds about this much of its output in
     * memory: its pages are used again (fresh pages cost far more than a
     * copy on a virtual machine), and the rest of the system's cache is
     * kept. Reading the output back then reads the device. Each split's
     * file is then given its final size when begun, so that the part on
     * the device can be read back while the rest is written
     * (pn_outset_open_settled). 0: keep all. */
    uint64_t drop_behind_bytes;
} pn_outset_opts;

void pn_outset_opts_init(pn_outset_opts *o);

typedef struct pn_outset pn_outset;

/* Plans the set for `model` (not begun; it is only read and must outlive
 * the set) and makes its split writers (the model's output options, force
 * from o). dst may be NULL for a plan that is only shown (no paths then).
 * PN_ERR_USAGE for a limit the plan refuses (naming the option), and for
 * `only` outside the plan ("--split-index 3: the plan has 3 splits, 0 to
 * 2"). */
pn_status pn_outset_make(const gguf_writer *model, const char *dst, const pn_outset_opts *o,
                         pn_outset **out, pn_error *err);
void pn_outset_free(pn_outset *os);

size_t pn_outset_n_splits(const pn_outset *os);
const gguf_split_plan *pn_outset_plan(const pn_outset *os);
/* Split s's target (NULL without a dst), its file size (header and padded
 * data: exact), whether this run writes it. */
const char *pn_outset_path(const pn_outset *os, size_t s);
uint64_t pn_outset_split_bytes(const pn_outset *os, size_t s);
bool pn_outset_writes(const pn_outset *os, size_t s);
/* The split holding tensor i; whether this run writes tensor i. */
size_t pn_outset_split_of(const pn_outset *os, size_t i);
bool pn_outset_writes_tensor(const pn_outset *os, size_t i);
/* The file sizes of every split of the set, and of those this run writes. */
uint64_t pn_outset_total_bytes(const pn_outset *os);
uint64_t pn_outset_written_bytes(const pn_outset *os);

/* Refuses, before anything is written: a target that is a file of `input`
 * (any split of it; PN_ERR_USAGE), a directory (PN_ERR_IO), an existing
 * target without force (PN_ERR_EXISTS, "use --force"). Each message starts
 * with the target. input may be NULL. */
pn_status pn_outset_check_targets(const pn_outset *os, const gguf_reader *input, pn_error *err);

pn_status pn_outset_begin(pn_outset *os, pn_error *err);
/* Stale temporary files of the targets begun so far ("TARGET: stale
 * temporary files from an earlier run: ..."), one line per target that has
 * some; NULL if none. Raw bytes: print with pn_fput_safe. Lives until the
 * next begin or free. */
const char *pn_outset_notes(const pn_outset *os);
/* What the plan left out that the user asked for: with keep_split_view,
 * the source's splits that hold none of the output's tensors ("--keep-split:
 * split 4 of 4 of the source, m-00004-of-00004.gguf, holds only tensors
 * this run leaves out: the output has 3 splits"); NULL if none. */
const char *pn_outset_plan_note(const pn_outset *os);

/* Appends n bytes of tensor i (tensors in order, each in one or more calls).
 * PN_ERR_USAGE for a tensor this run does not write or out of order; the
 * writer's errors. */
pn_status pn_outset_write(pn_outset *os, size_t i, const void *data, size_t n, pn_error *err);
/* The same with n bytes copied from file descriptor fd at offset `at`
 * (gguf_writer_copy_from; `from` names that file in errors). */
pn_status pn_outset_copy_from(pn_outset *os, size_t i, int fd, uint64_t at, size_t n,
                              const char *from, pn_error *err);
pn_status pn_outset_close(pn_outset *os, pn_error *err);

/* The split being written and, in *bytes, how much of its file is settled:
 * bytes [0, *bytes) are handed to the file, on the device and no longer
 * written (everything the writer writes later lies after them). SIZE_MAX
 * (and 0) when no split is open, or without drop_behind_bytes and
 * writeback_bytes, or where the file could not be given its size. Called
 * from the thread that writes. */
size_t pn_outset_settled(const pn_outset *os, uint64_t *bytes);
/* A reader of open split s for reading back its settled bytes (header as
 * begun: the per-tensor keys not yet patched; the data past the settled
 * part not yet written; it holds its own descriptor). PN_ERR_USAGE while
 * the header is not settled. Called from the thread that writes. */
pn_status pn_outset_open_settled(const pn_outset *os, size_t s, gguf_reader **r, pn_error *err);

/* A reader of written split s (closed, not committed), for validation; its
 * tensor count and split keys are checked against the plan (PN_ERR_MISMATCH
 * naming the target). Its tensor j is model tensor first[s] + j. */
pn_status pn_outset_open_written(const pn_outset *os, size_t s, gguf_reader **r, pn_error *err);

pn_status pn_outset_commit(pn_outset *os, pn_error *err);
void pn_outset_abort(pn_outset *os);

#endif
