/* quant_row_standin.h - the row API with fused error sums (quant/quant_row.h,
 * being written on the quant branch), declared here with exactly its
 * signatures until that header exists. When quant/quant_row.h is in the
 * tree it is used instead, and the stand-in definitions in
 * pipeline/tensor_job.c compile to nothing; this file can then go.
 *
 * Contract (the quant branch's):
 *   pn_sum_block_weights(type): the block the sums are per: pn3t 80, pn4t
 *     64, q8_0 32, q4_K and q3_K 256, and 256 for f32/f16/bf16; blocks never
 *     cross a row, so the last one of a row may be shorter.
 *   pn_quantize_row_sums: quantizes a row of n weights on CPU path `path`
 *     (PN_PATH_*), and, when blk_err / blk_norm are not NULL, gives for each
 *     block b the sum over its elements, in element order from +0.0, of
 *     ((double)x - (double)dq)^2 with dq exactly what the decoder gives
 *     (blk_err[b]) and of (double)x * (double)x (blk_norm[b]).
 *   pn_row_sums_ref: the same sums from x and the encoded row q, in a
 *     separate decode pass (the reference the fused sums must equal).
 */
#ifndef PN_PIPELINE_QUANT_ROW_STANDIN_H
#define PN_PIPELINE_QUANT_ROW_STANDIN_H

#if defined(__has_include)
#if __has_include("quant/quant_row.h")
#include "quant/quant_row.h"
#define PN_HAVE_QUANT_ROW_H 1
#endif
#endif

#ifndef PN_HAVE_QUANT_ROW_H
#include <stdint.h>

#include "common/pn_error.h"

int64_t pn_sum_block_weights(int type);
pn_status pn_quantize_row_sums(int type, int path, const float *x, int64_t n, uint8_t *out,
                               int64_t *bad_col, double *blk_err, double *blk_norm);
void pn_row_sums_ref(int type, const float *x, const uint8_t *q, int64_t n, double *blk_err,
                     double *blk_norm);
#endif

#endif
