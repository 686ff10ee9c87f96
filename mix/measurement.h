/* measurement.h - measuring what promotion to pn4t buys, and keeping the result.
 *
 * For every promotion candidate (mix/plan.h) the pipeline reads a sample of
 * rows, rotates them as they will be stored, and hands them to
 * pn_measure_rows. The relative error of a type is
 *   E = sum (w - dq(w))^2 / sum w^2
 * over the sampled rows of the rotated tensor, where dq is quantize-then-
 * decode with pn_quantize_row / pn_dequantize_row (quant/pn.h). E3 is the
 * pn3t error, E4 the pn4t error; promoting a tensor gains E3 - E4.
 *
 * Sampling rule "evenly-spaced" (pn_sample_row): with R rows and a maximum
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
 * Weighted by an importance matrix (mix/imatrix.h; docs/format.md#imatrix):
 * v_j the weight of original column j. The rows measured are rotated
 * (x' = H x block by block, hadamard.h); the pn3t/pn4t error of a row is
 * e'_j = (double)x'_j - (double)dq(x')_j, taken back to the original
 * columns with the rotation's own butterflies in double
 * (hadamard/hadamard_double.h: e = H e', no rounding), so that
 *   err = sum_j v_j * e_j^2        norm = sum_j v_j * x_j^2
 * with x the row before rotation (the widened source floats), each product
 * (double)v_j * (e_j * e_j) added in double over columns 0..K-1 in order;
 * rows are added as above. Without rotation e = e'. A candidate without an
 * entry is measured unweighted (v_j = 1 everywhere, the sums above) only
 * with --imatrix-missing unweighted.
 *
 * Measurement file, format 2 (text, UTF-8, '\n' line ends, fields
 * separated by one tab):
 *   pn-measure	2
 *   source	header-fnv1a64	<16 hex digits>   the source's header hash
 *   quantizer	<text>                  pn.quantizer of the run that measured
 *   rotation	hadamard	<cap>            or: rotation	none
 *   sample	evenly-spaced	<M>           the sampling rule and its maximum
 *   imatrix	entries-fnv1a64	<16 hex digits>	<missing>   only when weighted: the
 *                                      hash of the imatrix entries used
 *                                      (pn_imatrix_hash_used) and how a
 *                                      candidate without one was measured
 *                                      ("error": none was; "unweighted")
 *   candidates	<count>
 *   <name>	<E3>	<E4>	<crc>              count lines, tensor order, %.17g;
 *                                      crc: 8 hex digits, the CRC-32 of the
 *                                      source bytes of the rows measured,
 *                                      concatenated in row order
 *   end
 * The figures depend on exactly these: the rows' bytes, the rotation, M and
 * the quantizer (pn3t/pn4t). pn_measurement_check_params and
 * pn_measurement_check_rows say, naming the part (and the tensor), when a
 * measurement is not the one a run would make; the run then measures
 * again. A file of format 1 (which records none of this) is refused by
 * pn_measurement_load with PN_ERR_VERSION and a message to measure again.
 *
 * Ownership: a pn_measurement owns its strings; free with pn_measurement_free.
 */
#ifndef PN_MIX_MEASURE_H
#define PN_MIX_MEASURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "mix/plan.h"

#define PN_SAMPLE_ROWS_DEFAULT 256
#define PN_MEASURE_FORMAT_VERSION 2
#define PN_MEASURE_TEXT_MAX 256 /* bytes of the quantizer text, with the terminator */

/* How many rows the sample of a tensor of n_rows rows holds:
 * min(n_rows, max_rows); 0 if n_rows < 1 or max_rows < 1. */
int64_t pn_sample_count(int64_t n_rows, int64_t max_rows);

/* Row i (0 <= i < pn_sample_count) of that sample, ascending in i. One row
 * at a time, so that no array of the sample's size is ever needed; the one
 * definition of the rule, used by the measurement and the source identity. */
int64_t pn_sample_row(int64_t n_rows, int64_t max_rows, int64_t i);

typedef struct pn_measure_acc {
    double err3;  /* sum (w - dq3(w))^2 */
    double err4;  /* sum (w - dq4(w))^2 */
    double norm;  /* sum w^2 */
    int64_t rows; /* rows added */
} pn_measure_acc;

/* The three sums of one rotated row of K weights (K a multiple of 80 and of
 * 64). scratch must hold pn_measure_scratch_bytes(K) bytes, aligned for a
 * float. pn_measure_scratch_bytes is a multiple of _Alignof(max_align_t), so
 * per-thread slices scratch + t * pn_measure_scratch_bytes(K) of one malloc'd
 * buffer are aligned. On a quantizer error (non-finite weight, scale
 * overflow) the column is in the message. */
size_t pn_measure_scratch_bytes(int64_t K);
pn_status pn_measure_row(const float *row, int64_t K, void *scratch, double *err3, double *err4,
                         double *norm, pn_error *err);
void pn_measure_acc_add(pn_measure_acc *acc, double err3, double err4, double norm);
/* The pieces of pn_measure_row's sums, continued from a carried sum (a row
 * measured in pieces): sum + sum_j (x_j - y_j)^2 and sum + sum_j x_j^2 over
 * n columns, in column order, in double. */
double pn_error_sum(const float *x, const float *y, int64_t n, double sum);
double pn_norm_sum(const float *x, int64_t n, double sum);

/* The weighted sums of one row (the rule above): orig the K floats before
 * rotation, rotated the same row rotated with block B (B <= 1: not rotated,
 * rotated == orig), v the K column weights. scratch must hold
 * pn_measure_weighted_scratch_bytes(K) bytes (a multiple of
 * _Alignof(max_align_t)). */
size_t pn_measure_weighted_scratch_bytes(int64_t K);
pn_status pn_measure_row_weighted(const float *orig, const float *rotated, int64_t K, int B,
                                  const float *v, void *scratch, double *err3, double *err4,
                                  double *norm, pn_error *err);
/* The pieces of the rule, continued from a carried sum (a row measured in
 * pieces, each a whole number of rotation blocks): sum + sum_j v_j e_j^2 for
 * e = H(x' - y') over n columns (tmp: n doubles), and sum + sum_j v_j x_j^2. */
double pn_weighted_error_sum(const float *x_rot, const float *y_rot, int64_t n, int B,
                             const float *v, double *tmp, double sum);
double pn_weighted_norm_sum(const float *x, int64_t n, const float *v, double sum);

/* E3 and E4 from an accumulator (0 when the norm is 0). */
void pn_measure_acc_result(const pn_measure_acc *acc, double *e3, double *e4);

/* What a measurement's figures depend on besides its rows' bytes. */
typedef struct pn_measure_params {
    uint64_t source_header_hash;         /* io/source_id.h */
    char quantizer[PN_MEASURE_TEXT_MAX]; /* pn.quantizer: one line, no tab */
    int rotation_cap;                    /* 0: none; else the Hadamard cap */
    int64_t sample_max_rows;             /* M, >= 1 */
    bool weighted;                       /* by an imatrix */
    uint64_t imatrix_hash;               /* pn_imatrix_hash_used, when weighted */
    bool missing_unweighted;             /* --imatrix-missing unweighted */
} pn_measure_params;

typedef struct pn_measure_entry {
    char *name;
    double e3, e4;
    uint32_t rows_crc32; /* of the source bytes of the rows measured */
    double gain;         /* with by_gain: what promoting it buys (a KL gain) */
} pn_measure_entry;

typedef struct pn_measurement {
    pn_measure_params params;
    size_t n;
    pn_measure_entry *entries; /* the plan's candidates, in tensor order */
    /* Promotions ordered by each entry's gain (a KL measurement made in
     * compare/kl_measure.h, never saved in this format) instead of E3 - E4. */
    bool by_gain;
    /* A KL measurement's gains: a size target (--target-size) never
     * promotes a candidate whose gain is zero or below (measured to buy
     * nothing for its bytes); --promote N still takes the N largest. */
    bool positive_only;
} pn_measurement;

/* A measurement with one entry per candidate of the plan (E3 = E4 = 0 and
 * CRC 0 until set). params->quantizer must be one line without a tab. */
pn_status pn_measurement_new(const pn_plan *plan, const pn_measure_params *params,
                             pn_measurement **out, pn_error *err);
void pn_measurement_free(pn_measurement *m);
/* Index of the entry for name, or -1. */
long pn_measurement_find(const pn_measurement *m, const char *name);

/* Writes the file through common/outfile.h: an earlier file at path is
 * replaced atomically, a directory or FIFO is refused. Every
 * E must be finite and >= 0 and no name may hold a tab or line break. */
pn_status pn_measurement_save(const pn_measurement *m, const char *path, pn_error *err);
/* Reads a file. *version (may be NULL) receives the format version of its
 * first line (0 when it has none); a version other than
 * PN_MEASURE_FORMAT_VERSION is PN_ERR_VERSION, whose message for an older
 * one says to measure again. */
pn_status pn_measurement_load(const char *path, pn_measurement **out, int *version, pn_error *err);

/* Whether m was measured with `want` on the candidates of `plan`: the
 * source's header, the quantizer, the rotation, the rows sampled, then the
 * candidate set (every candidate measured, nothing else). PN_ERR_MISMATCH
 * with a message naming the part that differs, both values, and for the
 * candidate set the first tensor. path names m in the message. */
pn_status pn_measurement_check_params(const pn_measurement *m, const char *path,
                                      const pn_measure_params *want, const pn_plan *plan,
                                      pn_error *err);
/* Whether the rows m measured hold the bytes they held: rows_crc[i] is the
 * CRC-32 of the sampled rows (m's rule) of plan tensor i, read for every
 * candidate. PN_ERR_MISMATCH naming the first candidate that differs and
 * both CRCs. Call after pn_measurement_check_params. */
pn_status pn_measurement_check_rows(const pn_measurement *m, const char *path, const pn_plan *plan,
                                    const uint32_t *rows_crc, pn_error *err);

#endif
