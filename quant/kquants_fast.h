/* kquants_fast.h - the fast q4_K and q3_K row encoders, one per vector width
 * (private to quant/: the type table, types.c, names them per path).
 *
 * The kernels are written once, in kquants_simd.h, for a vector of KQ_W
 * float lanes, and compiled three times: kquants_fast.c at 4 lanes with no
 * instruction-set flags (the portable path, PN_PATH_SCALAR_FAST),
 * kquants_avx2.c at 8 (PN_PATH_AVX2) and kquants_avx512.c at 16
 * (PN_PATH_AVX512). The three differ only in the width: the lane layout,
 * the unit of two super-blocks, every loop and every decision are the same
 * source, so what the tests prove on the widths a machine runs holds for the
 * logic of the one it lacks.
 *
 * Contract of every function below: n >= 0 a multiple of 256 (the caller
 * checks); the bytes, the status and *bad_col (may be NULL) are those of
 * pn_quantize_row_q4_K_ref / _q3_K_ref for every input. When blk_err and
 * blk_norm are not NULL (both or neither), they receive per super-block
 * sum ((double)x - (double)dq)^2 and sum (double)x * (double)x in element
 * order from +0.0, dq being the decoder's float (quant/quant_row.h); after
 * an error they are unspecified.
 */
#ifndef PN_QUANT_KQUANTS_FAST_H
#define PN_QUANT_KQUANTS_FAST_H

#include <stdint.h>

#include "common/pn_error.h"

pn_status pn_kq_q4_K_row_w4(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                            double *blk_err, double *blk_norm);
pn_status pn_kq_q4_K_row_avx2(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                              double *blk_err, double *blk_norm);
pn_status pn_kq_q4_K_row_avx512(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                                double *blk_err, double *blk_norm);

pn_status pn_kq_q3_K_row_w4(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                            double *blk_err, double *blk_norm);
pn_status pn_kq_q3_K_row_avx2(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                              double *blk_err, double *blk_norm);
pn_status pn_kq_q3_K_row_avx512(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                                double *blk_err, double *blk_norm);

/* q8_0 (one encoder for every path) with its per-block sums computed from
 * dq = (float)code * d as the decoder does, block by block (blk_err and
 * blk_norm both NULL for none). n a multiple of 32, checked by the caller. */
pn_status pn_q8_0_row_sums(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                           double *blk_err, double *blk_norm);


#endif
