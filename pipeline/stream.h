/* stream.h - reading, computing and writing chunks at the same time.
 *
 * A stream is a sequence of chunks (pieces of source tensors, whole blocks of
 * whatever the consumer computes) that pass through three stages:
 *   reader   a helper thread: describes chunk k (ops.next) and reads its
 *            raw source bytes with pread (file order, read-ahead advice)
 *            or, with cfg.direct_io, around the page cache (gguf/gguf.h,
 *            direct reads: the ring of slots is the read-ahead): an f32
 *            chunk into its float buffer, an f16/bf16 chunk into one of
 *            two raw buffers; with cfg.direct_io a chunk of whole
 *            f16/bf16 rows is read straight into its raw buffer, no copy,
 *            by the reader and a second thread at once (two reads in
 *            flight, gguf_direct_read_tensor_into);
 *   compute  the calling thread, with its OpenMP team of cfg.threads: first
 *            the team widens the chunk to float and checks that every
 *            weight is finite, in one pass on cfg.cpu_path
 *            (pn_widen_row_checked), and computes ops.source_crcs of the
 *            raw bytes, in slices combined in order (so no figure depends
 *            on the thread count or the chunk size); then ops.compute (the
 *            parallel work), then ops.finish (the in-order part: sums, CRCs,
 *            progress), always in chunk order;
 *   writer   a helper thread (only when ops.write is set): ops.write, in
 *            chunk order.
 * The three work on different chunks at once, over a fixed ring of
 * cfg.n_slots chunk buffers, so memory is n_slots buffers whatever the
 * model, and no stage waits at a tensor boundary: chunk k+1 may belong to
 * the next tensor while chunk k is computed.
 *
 * Deferral: ops.compute may set c->deferred (e.g. a GPU is still working on
 * it). The stream then calls ops.compute for the next chunk first and
 * ops.finish for the deferred one right after, before finishing the next:
 * finish stays in chunk order, and the GPU's work overlaps the CPU's.
 *
 * Errors: a stage that fails records the error with its chunk number. A read
 * error (or a non-finite weight) at chunk k ends the stream at k: the chunks
 * before it are still computed and written, so an error in one of them is
 * the one reported. A compute or write error stops every stage at once. The
 * stream returns the error of the earliest failing chunk. *cfg.cancel
 * becoming non-zero stops every stage within a chunk (PN_ERR_INTERRUPTED).
 * Chunks the stream never finished are not finished afterwards: a deferred
 * chunk is still passed to ops.finish (so a GPU slot is never left busy)
 * with c->abandoned set.
 *
 * Only the calling thread calls compute and finish, so those may call the
 * caller's callbacks (progress) and use OpenMP. next runs on the reader
 * thread and write on the writer thread, each always on the same one;
 * source_crcs runs on the team's threads, on slices in any order.
 *
 * A chunk of no rows (n_rows 0) reads nothing: its bytes come from
 * elsewhere (a tensor copied from another file), and compute, finish and
 * write are called for it as for any chunk.
 */
#ifndef PN_PIPELINE_STREAM_H
#define PN_PIPELINE_STREAM_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/clock.h" /* pn_now_seconds, the clock of the stage times */
#include "common/pn_error.h"
#include "gguf/gguf.h"

/* CRC-32s an op keeps of the source bytes (e.g. of all of them, and of
 * those of sampled rows). */
#define PN_STREAM_CRCS 2

/* The CRC-32 (zlib's, from 0) of len bytes: pieces in order are joined with
 * crc32_combine(a.crc, b.crc, b.len). */
typedef struct pn_crc_part {
    uint32_t crc;
    uint64_t len;
} pn_crc_part;

typedef struct pn_chunk {
    /* set by ops.next */
    size_t tensor;        /* source tensor index */
    int64_t K;            /* its row length */
    int src_type;         /* its source type */
    int64_t row0, n_rows; /* rows [row0, row0 + n_rows), unless rows is used */
    bool use_rows;        /* the rows are rows[0..n_rows), e.g. a sample */
    int64_t col0, n_cols; /* of each row, columns [col0, col0 + n_cols) */
    bool first_of_tensor, last_of_tensor;
    int64_t tag; /* free for the ops */

    /* set by the stream */
    int64_t seq; /* position in the stream, from 0 */
    float *x;    /* n_rows * n_cols floats, widened (row after row) */
    /* ops.source_crcs of the chunk's source bytes, its slices joined in
     * order: set before ops.compute (len 0 when nothing was read) */
    pn_crc_part src_crc[PN_STREAM_CRCS];

    /* buffers of the slot, for the ops (capacities from the config) */
    int64_t *rows; /* cfg.slot_rows entries */
    uint8_t *out;  /* cfg.slot_out_bytes */
    size_t out_len;
    double *blk_err, *blk_norm; /* cfg.slot_blocks each */

    bool deferred;  /* set by compute: finish later */
    bool abandoned; /* set by the stream: finish only to release */
    int gpu_slot;   /* free for the ops */
    uint32_t crc;   /* free for the ops */
    double t0;      /* free for the ops */
} pn_chunk;

typedef struct pn_stream_ops {
    void *ctx;
    /* Describes chunk c->seq; returns false when there is none. The slot's
     * rows buffer may be filled when use_rows. Reader thread. */
    bool (*next)(void *ctx, pn_chunk *c);
    /* The chunk's parallel work. Calling thread. */
    pn_status (*compute)(void *ctx, pn_chunk *c, pn_error *err);
    /* The in-order part; also called for an abandoned deferred chunk.
     * Calling thread; may be NULL. */
    pn_status (*finish)(void *ctx, pn_chunk *c, pn_error *err);
    /* Writer thread; NULL: no writer stage. */
    pn_status (*write)(void *ctx, pn_chunk *c, pn_error *err);
    /* The CRC-32s of a slice of chunk c's source bytes, as read, before
     * they are widened: elements [elem_at, elem_at + n_elems) of its tensor
     * (row-major; a slice never crosses the end of one of the chunk's
     * rows unless the chunk is whole consecutive rows). part[j] (zeroed
     * before) receives the CRC-32 from 0 of the bytes CRC j covers in the
     * slice, and their number. A pure function of its arguments: the team
     * calls it on the slices in any order and at once; the stream joins
     * the slices in order into c->src_crc. May be NULL. */
    void (*source_crcs)(void *ctx, const pn_chunk *c, int64_t elem_at, const uint8_t *bytes,
                        int64_t n_elems, pn_crc_part part[PN_STREAM_CRCS]);
} pn_stream_ops;

typedef struct pn_stream_cfg {
    const gguf_reader *src;
    int n_slots;          /* >= 2 */
    int64_t slot_weights; /* floats per chunk buffer */
    int64_t slot_rows;    /* entries of c->rows */
    size_t slot_out_bytes;
    int64_t slot_blocks;
    uint64_t readahead_bytes;        /* advice ahead of contiguous reads; 0: none */
    int cpu_path;                    /* PN_PATH_* of the widening (quant/widen.h) */
    int threads;                     /* the team that widens (>= 1; < 1: 1) */
    bool direct_io;                  /* read around the page cache (gguf_direct_*; for a
                               * file read once in order); then no advice */
    const char *src_path;            /* for messages */
    const char *const *tensor_names; /* for messages (source order) */
    volatile sig_atomic_t *cancel;
} pn_stream_cfg;

/* Seconds each stage spent: reading (pread, reader thread); waiting for a
 * free buffer (reader); widening and in ops.source_crcs (the team:
 * thread-seconds / threads, that stage's share of wall time); waiting for
 * a chunk to compute (calling thread); writing and waiting for a chunk to
 * write (writer). */
typedef struct pn_stream_times {
    double read, widen, wait_output, wait_input, write, wait_write;
    double source_crcs;
} pn_stream_times;

pn_status pn_stream_run(const pn_stream_cfg *cfg, const pn_stream_ops *ops, pn_stream_times *t,
                        pn_error *err);

#endif
