/* measure.h - measuring what promotion to pn4t buys, and keeping the result.
 *
 * For every promotion candidate (mix/plan.h) the pipeline reads a sample of
 * rows, rotates them as they will be stored, and hands them to
 * pn_measure_rows. The relative error of a type is
 *   E = sum (w - dq(w))^2 / sum w^2
 * over the sampled rows of the rotated tensor, where dq is quantize-then-
 * decode with pn_quantize_row / pn_dequantize_row (quant/pn.h). E3 is the
 * pn3t error, E4 the pn4t error; promoting a tensor gains E3 - E4.
 *
 * Sampling rule "evenly-spaced" (pn_sample_rows): with R rows and a maximum
 * of M (default 256), when R <= M every row 0..R-1 is taken; otherwise the
 * rows floor(i * R / M) for i = 0..M-1 (exact integer arithmetic), which are
 * distinct, ascending, start at row 0 and spread over the whole tensor.
 *
 * Summation order (part of the contract, so a saved measurement reloads to
 * the same decisions): per row, the three sums (pn3t error, pn4t error,
 * sum w^2) are accumulated in double over columns 0..K-1 in order; the row
 * sums are then added into the tensor's accumulator in the order of the
 * sampled rows. A pipeline that measures rows in parallel computes row sums
 * with pn_measure_row and adds them in row order with pn_measure_acc_add.
 * A tensor whose sampled rows are all zero has E3 = E4 = 0.
 *
 * Measurement file (text, UTF-8, '\n' line ends, fields separated by one tab):
 *   pn-measure	1
 *   source	<identity>             who was measured (pn_source_identity)
 *   sample	evenly-spaced	<M>        the sampling rule and its maximum
 *   candidates	<count>
 *   <name>	<E3>	<E4>               count lines, tensor order, %.17g
 *   end
 * Loading checks every line and refuses, with the expected and found
 * identity, a file measured on another source (PN_ERR_MISMATCH).
 *
 * Ownership: a pn_measurement owns its strings; free with pn_measurement_free.
 */
#ifndef PN_MIX_MEASURE_H
#define PN_MIX_MEASURE_H

#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "mix/plan.h"

#define PN_SAMPLE_ROWS_DEFAULT 256
#define PN_MEASURE_IDENTITY_MAX 512   /* bytes, with the terminator */

/* Writes the sampled row numbers (ascending) to out, which must hold
 * min(n_rows, max_rows) entries; returns how many. 0 if n_rows < 1 or
 * max_rows < 1. */
int64_t pn_sample_rows(int64_t n_rows, int64_t max_rows, int64_t *out);

typedef struct pn_measure_acc {
    double err3;     /* sum (w - dq3(w))^2 */
    double err4;     /* sum (w - dq4(w))^2 */
    double norm;     /* sum w^2 */
    int64_t rows;    /* rows added */
} pn_measure_acc;

/* The three sums of one rotated row of K weights (K a multiple of 80 and of
 * 64). scratch must hold pn_measure_scratch_bytes(K) bytes, aligned for a
 * float. pn_measure_scratch_bytes is a multiple of _Alignof(max_align_t), so
 * per-thread slices scratch + t * pn_measure_scratch_bytes(K) of one malloc'd
 * buffer are aligned. On a quantizer error (non-finite weight, scale
 * overflow) the column is in the message. */
size_t pn_measure_scratch_bytes(int64_t K);
pn_status pn_measure_row(const float *row, int64_t K, void *scratch, double *err3,
                         double *err4, double *norm, pn_error *err);
void pn_measure_acc_add(pn_measure_acc *acc, double err3, double err4, double norm);

/* Adds n_rows consecutive rotated rows of K weights to acc, in order
 * (allocates its own scratch). Errors name the row (0-based within this
 * call) and column. */
pn_status pn_measure_rows(pn_measure_acc *acc, const float *rotated_rows, int64_t n_rows,
                          int64_t K, pn_error *err);
/* E3 and E4 from an accumulator (0 when the norm is 0). */
void pn_measure_acc_result(const pn_measure_acc *acc, double *e3, double *e4);

/* One line of identity for a source: its file size, tensor count and a
 * 64-bit FNV-1a hash of every tensor's name, n_dims, ne and source type, e.g.
 * "bytes=53805120512 tensors=851 fnv1a64=0123456789abcdef". */
void pn_source_identity(const pn_tensor_desc *tensors, size_t n, uint64_t file_size,
                        char *buf, size_t size);

typedef struct pn_measure_entry {
    char *name;
    double e3, e4;
} pn_measure_entry;

typedef struct pn_measurement {
    char *identity;
    int64_t sample_max_rows;
    size_t n;
    pn_measure_entry *entries;   /* the plan's candidates, in tensor order */
} pn_measurement;

/* A measurement with one entry per candidate of the plan (E3 = E4 = 0 until
 * set). identity must be one line (no '\n', '\r' or tab) shorter than
 * PN_MEASURE_IDENTITY_MAX. */
pn_status pn_measurement_new(const pn_plan *plan, const char *identity, int64_t sample_max_rows,
                             pn_measurement **out, pn_error *err);
void pn_measurement_free(pn_measurement *m);
/* Index of the entry for name, or -1. */
long pn_measurement_find(const pn_measurement *m, const char *name);

/* Writes the file through common/outfile.h: an earlier file at path is
 * replaced atomically, a directory or FIFO is refused. Every
 * E must be finite and >= 0 and no name may hold a tab or line break. */
pn_status pn_measurement_save(const pn_measurement *m, const char *path, pn_error *err);
/* Reads a file; when expected_identity is not NULL the file's identity must
 * equal it. */
pn_status pn_measurement_load(const char *path, const char *expected_identity,
                              pn_measurement **out, pn_error *err);

#endif
