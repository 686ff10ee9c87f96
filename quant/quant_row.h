/* quant_row.h - the one row entry point for every type a mix writes: pn3t,
 * pn4t, q8_0, q4_K, q3_K, f32, f16, bf16 (the type table's PN_CAN_WRITE
 * entries, quant/types.h). It quantizes on a chosen CPU path and, in the
 * same pass, gives the error sums the report needs; it decodes them.
 *
 * Paths: the ids of quant/pn_fast.h (PN_PATH_REF, _SCALAR_FAST, _AVX2,
 * _AVX512); one id picks the path for every type (q8_0 and the plain types
 * have one implementation, the same on every path). Every path writes the
 * same bytes, returns the same status and the same *bad_col, and gives the
 * same sums, bit for bit, for every input.
 *
 * The sums. A row is cut into sum blocks of pn_sum_block_weights(type)
 * weights: the type's block (pn3t 80, pn4t 64, q8_0 32, q4_K and q3_K 256),
 * and 256 for f32, f16 and bf16, whose last sum block of a row may be
 * shorter. For sum block b:
 *   blk_err[b]  = sum over its elements e, in element order, starting from
 *                 +0.0, of ((double)x[e] - (double)dq[e])^2,
 *   blk_norm[b] = the same sum of (double)x[e] * (double)x[e],
 * where dq[e] is exactly the float the type's decoder
 * (pn_dequantize_row_type) gives for the stored bytes; double arithmetic,
 * no fused multiply-add. The order is fixed by the data alone: no thread
 * count, chunk size or path can change a bit. A caller adds the blocks of a
 * tensor in its own fixed order (for example block by block, row by row).
 *
 * How each type gets them in the quantizer's pass: pn3t/pn4t take the
 * winner's error from the scale search, which sums exactly these terms in
 * this order (the decoded value d * (n - z) is exact in float and equals the
 * search's s * (n - z)), and a zero group's error is its norm (it decodes to
 * zeros); q8_0 and the plain types compute dq as their decoder does, element
 * by element, while encoding; the fast q4_K and q3_K encoders compute dq
 * from their final codes with the decoder's operations and sum eight
 * super-blocks at a time (the reference path sums as pn_row_sums_ref does).
 *
 * Nothing here allocates, prints, reads the environment or keeps state; all
 * functions are thread-safe.
 */
#ifndef PN_QUANT_QUANT_ROW_H
#define PN_QUANT_QUANT_ROW_H

#include <stdint.h>

#include "common/pn_error.h"

/* The sum-block size of a type (above); 0 for a type this entry point does
 * not write. */
int64_t pn_sum_block_weights(int type);

/* The number of sum blocks of a row of n weights: ceil(n / block); 0 for an
 * unsupported type or n <= 0. */
int64_t pn_row_sum_blocks(int type, int64_t n);

/* Quantizes n weights to `type` on CPU path `path` into out
 * (pn_type_row_bytes(type, n) bytes, any alignment). When blk_err and
 * blk_norm are both non-NULL (pn_row_sum_blocks(type, n) doubles each), they
 * receive the sums above; pass both NULL for none.
 * Returns PN_OK; PN_ERR_TYPE for a type not listed above; PN_ERR_USAGE when
 * the path is unknown or unavailable (pn_path_available), n is negative or
 * not a multiple of the type's block (*bad_col = -1); PN_ERR_NONFINITE (a
 * NaN or infinity: *bad_col its column, the first in the row) or
 * PN_ERR_SCALE_OVERFLOW (*bad_col the first column of the block whose scale
 * does not fit an fp16, or for f16/bf16 the weight that does not fit).
 * bad_col may be NULL. After an error out and the sums are unspecified. */
pn_status pn_quantize_row_sums(int type, int path, const float *x, int64_t n, uint8_t *out,
                               int64_t *bad_col, double *blk_err, double *blk_norm);

/* A stock type (PN_CAN_STOCK: f32, f16, bf16, q8_0, q3_K, q4_K) on
 * pn_cpu_path_best(), without sums; PN_ERR_TYPE (*bad_col = -1) for any
 * other type, else as pn_quantize_row_sums. */
pn_status pn_quantize_row_stock(int type, const float *x, int64_t n, uint8_t *out,
                                int64_t *bad_col);

/* The reference for the sums: decodes q (n weights of `type`, as
 * pn_quantize_row_sums wrote them) with pn_dequantize_row_type and sums, in
 * a separate pass, each sum block as defined above. PN_ERR_TYPE or
 * PN_ERR_USAGE (nothing written) as pn_dequantize_row_type. */
pn_status pn_row_sums_ref(int type, const float *x, const uint8_t *q, int64_t n, double *blk_err,
                          double *blk_norm);

/* Decodes n weights of any type above into y. PN_ERR_TYPE for another type,
 * PN_ERR_USAGE when n is negative or not a multiple of its block (y
 * untouched then). */
pn_status pn_dequantize_row_type(int type, const uint8_t *in, float *y, int64_t n);

#endif
