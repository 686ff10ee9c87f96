#include "quant/widen.h"

#include <math.h>
#include <string.h>

#include "quant/fp16.h"
#include "quant/types.h"

pn_status pn_widen_row(int src_type, const uint8_t *src, float *dst, int64_t n)
{
    switch (src_type) {
    case PN_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float)); /* host is little-endian */
        return PN_OK;
    case PN_TYPE_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = pn_fp16_to_float(pn_load_u16le(src + 2 * i));
        return PN_OK;
    case PN_TYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = pn_bf16_to_float(pn_load_u16le(src + 2 * i));
        return PN_OK;
    default:
        return PN_ERR_TYPE;
    }
}

int64_t pn_find_nonfinite(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return i;
    return -1;
}
