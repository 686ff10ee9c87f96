/* stock.c - one entry point for every non-PN type a mix stores, so the
 * pipeline needs no switch of its own: f32, f16, bf16, q8_0, q3_K, q4_K. */
#include <string.h>

#include "quant/fp16.h"
#include "quant/kquants.h"
#include "quant/kquants_impl.h"
#include "quant/types.h"

bool pn_stock_type_supported(int type)
{
    switch (type) {
    case PN_TYPE_F32:
    case PN_TYPE_F16:
    case PN_TYPE_BF16:
    case PN_TYPE_Q8_0:
    case PN_TYPE_Q3_K:
    case PN_TYPE_Q4_K:
        return true;
    default:
        return false;
    }
}

static pn_status stock_fail(int64_t *bad_col, int64_t col, pn_status st)
{
    if (bad_col)
        *bad_col = col;
    return st;
}

/* f32, f16, bf16: element by element; a NaN or infinity in the input is an
 * error for these types as for the others, and so is a finite weight that
 * the narrower type would turn into an infinity. */
static pn_status stock_plain(int type, const float *x, int64_t n, uint8_t *out, int64_t *bad_col)
{
    for (int64_t i = 0; i < n; i++) {
        if (!kq_is_finite(x[i]))
            return stock_fail(bad_col, i, PN_ERR_NONFINITE);
        if (type == PN_TYPE_F32) {
            uint32_t u;
            memcpy(&u, &x[i], sizeof u);
            pn_store_u32le(out + 4 * i, u);
        } else {
            uint16_t h = type == PN_TYPE_F16 ? pn_fp16_from_float(x[i]) : pn_bf16_from_float(x[i]);
            uint16_t inf_exp = type == PN_TYPE_F16 ? 0x7c00u : 0x7f80u;
            if ((h & inf_exp) == inf_exp)
                return stock_fail(bad_col, i, PN_ERR_SCALE_OVERFLOW);
            pn_store_u16le(out + 2 * i, h);
        }
    }
    return PN_OK;
}

pn_status pn_quantize_row_stock(int type, const float *x, int64_t n, uint8_t *out,
                                int64_t *bad_col)
{
    if (!pn_stock_type_supported(type))
        return stock_fail(bad_col, -1, PN_ERR_TYPE);
    if (n < 0)
        return stock_fail(bad_col, -1, PN_ERR_USAGE);
    switch (type) {
    case PN_TYPE_Q8_0:
        return pn_quantize_row_q8_0(x, n, out, bad_col);
    case PN_TYPE_Q4_K:
        return pn_quantize_row_q4_K(x, n, out, bad_col);
    case PN_TYPE_Q3_K:
        return pn_quantize_row_q3_K(x, n, out, bad_col);
    default:
        return stock_plain(type, x, n, out, bad_col);
    }
}

pn_status pn_dequantize_row_stock(int type, const uint8_t *in, float *y, int64_t n)
{
    if (!pn_stock_type_supported(type))
        return PN_ERR_TYPE;
    if (pn_type_row_bytes(type, n) < 0)
        return PN_ERR_USAGE;
    switch (type) {
    case PN_TYPE_Q8_0:
        pn_dequantize_row_q8_0(in, y, n);
        break;
    case PN_TYPE_Q4_K:
        pn_dequantize_row_q4_K(in, y, n);
        break;
    case PN_TYPE_Q3_K:
        pn_dequantize_row_q3_K(in, y, n);
        break;
    case PN_TYPE_F32:
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = pn_load_u32le(in + 4 * i);
            memcpy(&y[i], &u, sizeof u);
        }
        break;
    case PN_TYPE_F16:
        for (int64_t i = 0; i < n; i++)
            y[i] = pn_fp16_to_float(pn_load_u16le(in + 2 * i));
        break;
    default: /* PN_TYPE_BF16 */
        for (int64_t i = 0; i < n; i++)
            y[i] = pn_bf16_to_float(pn_load_u16le(in + 2 * i));
        break;
    }
    return PN_OK;
}
