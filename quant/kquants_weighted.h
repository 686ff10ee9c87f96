/* kquants_weighted.h - q4_K and q3_K encoded for the least weighted error
 * sum_j v_j (w_j - dq(w)_j)^2, v the importance of each column (llama.cpp's
 * imatrix, mix/imatrix.h), with the layouts and decoders of kquants.h.
 *
 * One scalar path (double sums), the definition: the same bytes on every
 * machine, path and thread count. Per super-block of 256 weights it runs a
 * search of its own on the weighted error (kquants_weighted.c says how),
 * scores the unweighted reference encoding of the block with the same
 * weights too, and keeps the one with the smaller weighted error (the
 * search's on a tie), so it is never worse than the unweighted encoder by
 * the measure it is asked for. Weights must be finite and >= 0 (the imatrix
 * reader checks); where they are all 0 in a block the unweighted encoding
 * is kept. Errors and bad_col as the reference encoders (kquants.h): a
 * NaN or infinite weight, an fp16 scale overflow, n not a multiple of 256.
 */
#ifndef PN_QUANT_KQUANTS_WEIGHTED_H
#define PN_QUANT_KQUANTS_WEIGHTED_H

#include <stdint.h>

#include "common/pn_error.h"

pn_status pn_quantize_row_q4_K_weighted(const float *x, int64_t n, const float *v, uint8_t *out,
                                        int64_t *bad_col);
pn_status pn_quantize_row_q3_K_weighted(const float *x, int64_t n, const float *v, uint8_t *out,
                                        int64_t *bad_col);
/* The weighted encoder the type table (quant/types.h) gives a type id
 * (q4_K, q3_K); PN_ERR_TYPE (*bad_col = -1) for a type that has none. */
pn_status pn_quantize_row_kquant_weighted(int type, const float *x, int64_t n, const float *v,
                                          uint8_t *out, int64_t *bad_col);

#endif
