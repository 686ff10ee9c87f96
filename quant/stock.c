/* stock.c - every non-PN type a mix stores (f32, f16, bf16, q8_0, q3_K,
 * q4_K) on the best path, through quant/quant_row.h, and their decoding. */
#include <string.h>

#include "quant/fp16.h"
#include "quant/kquants.h"
#include "quant/pn_fast.h"
#include "quant/quant_row.h"
#include "quant/types.h"

bool pn_stock_type_supported(int type)
{
    switch (type) {
    case PN_TYPE_F32:
    case PN_TYPE_F16:
    case PN_TYPE_BF16:
    case PN_TYPE_Q8_0:
    case PN_TYPE_Q3_K:
    case PN_TYPE_Q4_K: return true;
    default: return false;
    }
}

pn_status pn_quantize_row_stock(int type, const float *x, int64_t n, uint8_t *out, int64_t *bad_col)
{
    if (!pn_stock_type_supported(type)) {
        if (bad_col)
            *bad_col = -1;
        return PN_ERR_TYPE;
    }
    return pn_quantize_row_sums(type, pn_cpu_path_best(), x, n, out, bad_col, NULL, NULL);
}

pn_status pn_dequantize_row_stock(int type, const uint8_t *in, float *y, int64_t n)
{
    if (!pn_stock_type_supported(type))
        return PN_ERR_TYPE;
    if (pn_type_row_bytes(type, n) < 0)
        return PN_ERR_USAGE;
    switch (type) {
    case PN_TYPE_Q8_0: pn_dequantize_row_q8_0(in, y, n); break;
    case PN_TYPE_Q4_K: pn_dequantize_row_q4_K(in, y, n); break;
    case PN_TYPE_Q3_K: pn_dequantize_row_q3_K(in, y, n); break;
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
