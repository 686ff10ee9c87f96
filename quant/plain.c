/* plain.c - the plain types a mix writes (f32, f16, bf16): rows encoded,
 * with the per-block sums of quant/quant_row.h, and decoded (kquants.h). */
#include <string.h>

#include "quant/fp16.h"
#include "quant/kquants.h"
#include "quant/kquants_impl.h"
#include "quant/types.h"

/* The sum block of the plain types (their types.c entry says the same). */
#define PLAIN_SUM_BLOCK 256

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

pn_status pn_quantize_row_f32_sums(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                                   double *blk_err, double *blk_norm)
{
    return plain_row(PN_TYPE_F32, x, n, out, bad_col, blk_err, blk_norm);
}

pn_status pn_quantize_row_f16_sums(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                                   double *blk_err, double *blk_norm)
{
    return plain_row(PN_TYPE_F16, x, n, out, bad_col, blk_err, blk_norm);
}

pn_status pn_quantize_row_bf16_sums(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                                    double *blk_err, double *blk_norm)
{
    return plain_row(PN_TYPE_BF16, x, n, out, bad_col, blk_err, blk_norm);
}

void pn_dequantize_row_f32(const uint8_t *in, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = pn_load_u32le(in + 4 * i);
        memcpy(&y[i], &u, sizeof u);
    }
}

void pn_dequantize_row_f16(const uint8_t *in, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = pn_fp16_to_float(pn_load_u16le(in + 2 * i));
}

void pn_dequantize_row_bf16(const uint8_t *in, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = pn_bf16_to_float(pn_load_u16le(in + 2 * i));
}
