/* tensor_job.h - quantizing one tensor of a mapped source, in row chunks.
 *
 * Shared by pn-quantize's writer loop and its promotion measurement. The
 * caller owns the buffers of a pn_row_chunk; rows are processed in place:
 * widened from the source type to float, rotated when rot_block > 0, then
 * quantized to the target type. Results never depend on the thread count:
 * every row is a pure function of its source row, and per-row error sums are
 * added in row order.
 */
#ifndef PN_PIPELINE_TENSOR_JOB_H
#define PN_PIPELINE_TENSOR_JOB_H

#include <stdint.h>

#include "common/pn_error.h"

/* Per-phase wall seconds, accumulated over calls. */
typedef struct pn_phase_times {
    double read, rotate, quantize, error;
} pn_phase_times;

typedef struct pn_row_chunk {
    int64_t K;            /* row length */
    int64_t max_rows;     /* capacity of the buffers, in rows */
    float *rows;          /* max_rows * K floats */
    double *row_err;      /* max_rows: sum (w - dq)^2 per row */
    double *row_norm;     /* max_rows: sum w^2 per row */
    int64_t *bad_col;     /* max_rows: first bad column or -1 */
    int *row_status;      /* max_rows */
    float *scratch;       /* threads * K floats for dequantization */
    int threads;
} pn_row_chunk;

/* Allocates buffers for rows of K weights: as many rows as fit in about
 * chunk_weights weights (at least one). */
pn_status pn_row_chunk_init(pn_row_chunk *c, int64_t K, int64_t chunk_weights, int threads);
void pn_row_chunk_free(pn_row_chunk *c);

/* Widens rows [0, n) from src (n rows of src_row_bytes) into c->rows and
 * checks every weight is finite. On a NaN/Inf returns PN_ERR_NONFINITE with
 * *bad_row (chunk-relative) and *bad_col of the first one in row order. */
pn_status pn_chunk_widen(pn_row_chunk *c, int src_type, const uint8_t *src, int64_t n,
                         int64_t *bad_row, int64_t *bad_col, pn_phase_times *t);

/* Rotates rows [0, n) with block B (B > 1). */
void pn_chunk_rotate(pn_row_chunk *c, int64_t n, int B, pn_phase_times *t);

/* Quantizes rows [0, n) to `type` into out (n * row_bytes). When err_num is
 * not NULL, the squared error and squared norm of the chunk are added to
 * *err_num and *err_den (in row order). On failure the first failing row and
 * its column are returned as by the row quantizers. */
pn_status pn_chunk_quantize(pn_row_chunk *c, int type, int64_t n, uint8_t *out,
                            double *err_num, double *err_den, int64_t *bad_row,
                            int64_t *bad_col, pn_phase_times *t);

/* Adds the squared error of n quantized rows (blocks) against c->rows, and
 * their squared norm, to *err_num / *err_den in row order (the figures of
 * the report; per row four interleaved partial sums, so deterministic). */
void pn_chunk_error(pn_row_chunk *c, int type, int64_t n, const uint8_t *blocks,
                    double *err_num, double *err_den, pn_phase_times *t);

/* The row quantizer and decoder for any type a mix writes. */
pn_status pn_quantize_row_any(int type, const float *x, int64_t n, uint8_t *out,
                              int64_t *bad_col);
void pn_dequantize_row_any(int type, const uint8_t *in, float *y, int64_t n);

double pn_now_seconds(void);

/* Drops the pages of a read-only file mapping from this process (they stay in
 * the page cache), so resident memory does not grow with the model. Only
 * whole pages inside [p, p+n) are dropped. */
void pn_release_mapped(const uint8_t *p, uint64_t n);

#endif
