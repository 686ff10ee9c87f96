/* tensor_job.h - how one tensor is cut into chunks, and the work on a chunk.
 *
 * Chunks are ranges of whole blocks: a chunk is either whole rows (when a
 * row of K weights fits the chunk size) or, for longer rows, a column range
 * of one row whose ends are multiples of the unit u = lcm(block of the
 * output type, rotation block, block of the error sums) (the row's end
 * excepted). So every chunk can be rotated, quantized and summed on its own,
 * and a chunk never holds more than max(chunk_weights, u) weights whatever
 * K is (u is at most 20480).
 *
 * The work on a chunk is split into items (about 64 K weights each: a few
 * rows, or a column range) that the OpenMP team takes in any order; every
 * item is a pure function of its weights. The in-order parts (adding the
 * per-block error sums, combining the per-item CRC-32s with
 * crc32_combine) follow the data's order, so bytes, CRCs and error figures
 * never depend on the thread count or the chunk size.
 */
#ifndef PN_PIPELINE_TENSOR_JOB_H
#define PN_PIPELINE_TENSOR_JOB_H

#include <stdbool.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "pipeline/stream.h"

/* What every stage of a job runs with, resolved once from the options. */
typedef struct pn_job_env {
    int threads;           /* >= 1 */
    int cpu_path;          /* PN_PATH_* */
    int64_t chunk_weights; /* chunk size, weights */
} pn_job_env;

/* One tensor of a job, as the chunking and the kernels see it. */
typedef struct pn_job_tensor {
    size_t index; /* source tensor index */
    const char *name;
    int64_t K, rows;
    int src_type, type;
    int rot_block;          /* > 1: rotated with this Hadamard block */
    int64_t sum_block;      /* pn_sum_block_weights(type) */
    int64_t blocks_per_row; /* ceil(K / sum_block) */
    int64_t unit;           /* lcm(type's block, rot_block, sum_block) */
    int64_t rows_per_chunk; /* whole-row chunks: rows each; else 1 */
    int64_t cols_per_chunk; /* K for whole-row chunks; else a multiple of unit */
    /* q3_K/q4_K with an imatrix entry: the column weights, K per matrix
     * (an expert tensor's experts one after the other); the tensor is then
     * encoded by quant/kquants_weighted.h (one scalar path). NULL: the
     * unweighted encoders. qweights_rows: the rows of one matrix (ne[1]),
     * so row r takes matrix r / qweights_rows. Set by the job after
     * pn_job_tensor_init. */
    const float *qweights;
    int64_t qweights_rows;
} pn_job_tensor;

/* Fills t's chunking for chunks of about chunk_weights weights and at most
 * max_blocks sum blocks. PN_ERR_USAGE naming the tensor when the type's
 * block does not divide K. */
pn_status pn_job_tensor_init(pn_job_tensor *t, size_t index, const char *name, int64_t K,
                             int64_t rows, int src_type, int type, int rot_block,
                             int64_t chunk_weights, int64_t max_blocks, pn_error *err);

/* What a tensor's chunks need at most: weights, output bytes, sum blocks. */
void pn_job_tensor_needs(const pn_job_tensor *t, int64_t *weights, uint64_t *out_bytes,
                         int64_t *blocks);

/* Walks the chunks of a list of tensors in order. */
typedef struct pn_job_cursor {
    size_t i;
    int64_t row, col;
} pn_job_cursor;

/* Describes the next chunk into c (tensor, rows, columns, first/last of its
 * tensor); c->tag is the position in `tensors`. false at the end. */
bool pn_job_cursor_next(pn_job_cursor *cur, const pn_job_tensor *tensors, size_t n, pn_chunk *c);

/* Number of sum blocks of a chunk of t. */
int64_t pn_job_chunk_blocks(const pn_job_tensor *t, const pn_chunk *c);
/* Output bytes of a chunk of t. */
uint64_t pn_job_chunk_out_bytes(const pn_job_tensor *t, const pn_chunk *c);

/* Per-thread scratch of the kernels, reused over chunks. */
typedef struct pn_job_kernels {
    int threads;
    int path; /* PN_PATH_* */
    int64_t cap_items;
    pn_status *item_st;
    int64_t *item_row, *item_col;
    uint32_t *item_crc;
    uint64_t *item_len;
    double *thread_times; /* threads x 8 (padded): rotate, quantize, error, crc */
} pn_job_kernels;

pn_status pn_job_kernels_init(pn_job_kernels *k, int threads, int path);
void pn_job_kernels_free(pn_job_kernels *k);

enum {
    PN_JOB_ROTATE = 1,   /* rotate the chunk's weights in place (rot_block > 1) */
    PN_JOB_QUANTIZE = 2, /* quantize into c->out with the fused sums */
    PN_JOB_SUMS_REF = 4, /* sums of c->out against the weights (a separate pass) */
    PN_JOB_CRC = 8,      /* CRC-32 of c->out */
};

/* The work `what` (PN_JOB_* flags) on chunk c of tensor t, in parallel.
 * With PN_JOB_CRC, *crc receives the CRC-32 of the chunk's output bytes
 * (crc32 from 0), which the caller combines in order. On a quantizer error
 * the first failing item's row and column (in the tensor) are in the
 * message, which names file and tensor. Thread-seconds of each part are
 * added to the kernels' counters. */
pn_status pn_job_chunk_work(pn_job_kernels *k, const pn_job_tensor *t, pn_chunk *c, int what,
                            uint32_t *crc, const char *file, pn_error *err);

/* Stage seconds of the kernels so far (thread-seconds / threads). */
void pn_job_kernels_times(const pn_job_kernels *k, double *rotate, double *quantize, double *error,
                          double *crc);

/* The message for a quantizer error at (row, col) of a tensor. */
pn_status pn_job_row_error(pn_status st, const char *file, const char *tensor, int64_t row,
                           int64_t col, pn_error *err);

/* The best CPU path this machine runs (PN_PATH_*). */
int pn_job_best_cpu_path(void);

#endif
