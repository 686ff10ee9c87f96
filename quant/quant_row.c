/* quant_row.c - the row entry point for every type a mix writes, with the
 * per-block error sums of the quantizer's pass (contract: quant_row.h). */
#include "quant/quant_row.h"

#include <string.h>

#include "quant/fp16.h"
#include "quant/kquants.h"
#include "quant/kquants_fast.h"
#include "quant/kquants_impl.h"
#include "quant/pn.h"
#include "quant/pn_fast.h"
#include "quant/types.h"

#define PLAIN_SUM_BLOCK 256

int64_t pn_sum_block_weights(int type)
{
    switch (type) {
    case PN_TYPE_PN3T:
    case PN_TYPE_PN4T:
    case PN_TYPE_Q8_0:
    case PN_TYPE_Q4_K:
    case PN_TYPE_Q3_K: return pn_type_traits_get(type)->block_weights;
    case PN_TYPE_F32:
    case PN_TYPE_F16:
    case PN_TYPE_BF16: return PLAIN_SUM_BLOCK;
    default: return 0;
    }
}

int64_t pn_row_sum_blocks(int type, int64_t n)
{
    const int64_t bw = pn_sum_block_weights(type);
    return bw > 0 && n > 0 ? (n + bw - 1) / bw : 0;
}

static pn_status fail(int64_t *bad_col, int64_t col, pn_status st)
{
    if (bad_col)
        *bad_col = col;
    return st;
}

/* f32 (a copy), f16 and bf16 (round to nearest even), element by element; a
 * NaN or infinity is an error, and so is a finite weight that the narrower
 * type would turn into an infinity. dq is what the decoder gives back. */
static pn_status plain_row(int type, const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                           double *blk_err, double *blk_norm)
{
    double err = 0.0, norm = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (!kq_is_finite(x[i]))
            return fail(bad_col, i, PN_ERR_NONFINITE);
        float dq;
        if (type == PN_TYPE_F32) {
            uint32_t u;
            memcpy(&u, &x[i], sizeof u);
            pn_store_u32le(out + 4 * i, u);
            dq = x[i];
        } else {
            const int f16 = type == PN_TYPE_F16;
            const uint16_t h = f16 ? pn_fp16_from_float(x[i]) : pn_bf16_from_float(x[i]);
            const uint16_t inf_exp = f16 ? 0x7c00u : 0x7f80u;
            if ((h & inf_exp) == inf_exp)
                return fail(bad_col, i, PN_ERR_SCALE_OVERFLOW);
            pn_store_u16le(out + 2 * i, h);
            dq = f16 ? pn_fp16_to_float(h) : pn_bf16_to_float(h);
        }
        if (blk_err) {
            const double d = (double)x[i] - (double)dq;
            err = err + d * d;
            norm = norm + (double)x[i] * (double)x[i];
            if ((i + 1) % PLAIN_SUM_BLOCK == 0 || i + 1 == n) {
                blk_err[i / PLAIN_SUM_BLOCK] = err;
                blk_norm[i / PLAIN_SUM_BLOCK] = norm;
                err = norm = 0.0;
            }
        }
    }
    return PN_OK;
}

/* q4_K and q3_K: the path's encoder with its fused sums; the reference path
 * encodes with the reference and sums as pn_row_sums_ref does. */
static pn_status kquant_row(int type, int path, const float *x, int64_t n, uint8_t *out,
                            int64_t *bad_col, double *blk_err, double *blk_norm)
{
    const int q4 = type == PN_TYPE_Q4_K;
    switch (path) {
    case PN_PATH_SCALAR_FAST:
        return (q4 ? pn_kq_q4_K_row_w4 : pn_kq_q3_K_row_w4)(x, n, out, bad_col, blk_err, blk_norm);
    case PN_PATH_AVX2:
        return (q4 ? pn_kq_q4_K_row_avx2 : pn_kq_q3_K_row_avx2)(x, n, out, bad_col, blk_err,
                                                                blk_norm);
    case PN_PATH_AVX512:
        return (q4 ? pn_kq_q4_K_row_avx512 : pn_kq_q3_K_row_avx512)(x, n, out, bad_col, blk_err,
                                                                    blk_norm);
    default: {
        pn_status st =
            (q4 ? pn_quantize_row_q4_K_ref : pn_quantize_row_q3_K_ref)(x, n, out, bad_col);
        if (st == PN_OK && blk_err)
            st = pn_row_sums_ref(type, x, out, n, blk_err, blk_norm);
        return st;
    }
    }
}

pn_status pn_quantize_row_sums(int type, int path, const float *x, int64_t n, uint8_t *out,
                               int64_t *bad_col, double *blk_err, double *blk_norm)
{
    const int64_t bw = pn_sum_block_weights(type);
    if (bw == 0)
        return fail(bad_col, -1, PN_ERR_TYPE);
    const int64_t block = pn_type_traits_get(type)->block_weights;
    if (!pn_path_available(path) || n < 0 || n % block != 0)
        return fail(bad_col, -1, PN_ERR_USAGE);
    if (!blk_err || !blk_norm)
        blk_err = blk_norm = NULL;
    switch (type) {
    case PN_TYPE_PN3T:
    case PN_TYPE_PN4T:
        return pn_quantize_row_path_sums(path, type, x, n, out, bad_col, blk_err, blk_norm);
    case PN_TYPE_Q8_0: return pn_q8_0_row_sums(x, n, out, bad_col, blk_err, blk_norm);
    case PN_TYPE_Q4_K:
    case PN_TYPE_Q3_K: return kquant_row(type, path, x, n, out, bad_col, blk_err, blk_norm);
    default: return plain_row(type, x, n, out, bad_col, blk_err, blk_norm);
    }
}

pn_status pn_dequantize_row_type(int type, const uint8_t *in, float *y, int64_t n)
{
    if (pn_sum_block_weights(type) == 0)
        return PN_ERR_TYPE;
    if (pn_type_row_bytes(type, n) < 0)
        return PN_ERR_USAGE;
    if (pn_type_is_pn(type)) {
        pn_dequantize_row(type, in, y, n);
        return PN_OK;
    }
    return pn_dequantize_row_stock(type, in, y, n);
}

pn_status pn_row_sums_ref(int type, const float *x, const uint8_t *q, int64_t n, double *blk_err,
                          double *blk_norm)
{
    const int64_t bw = pn_sum_block_weights(type);
    if (bw == 0)
        return PN_ERR_TYPE;
    if (pn_type_row_bytes(type, n) < 0)
        return PN_ERR_USAGE;
    float y[PN_QK_K];
    for (int64_t b = 0; b * bw < n; b++) {
        const int64_t start = b * bw, cnt = n - start < bw ? n - start : bw;
        pn_status st = pn_dequantize_row_type(type, q + pn_type_row_bytes(type, start), y, cnt);
        if (st != PN_OK)
            return st;
        double err = 0.0, norm = 0.0;
        for (int64_t i = 0; i < cnt; i++) {
            const double d = (double)x[start + i] - (double)y[i];
            err = err + d * d;
            norm = norm + (double)x[start + i] * (double)x[start + i];
        }
        blk_err[b] = err;
        blk_norm[b] = norm;
    }
    return PN_OK;
}
