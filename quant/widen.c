/* widen.c - widening source rows (F32, F16, BF16) to float, with the
 * finiteness check on a chosen path (see widen.h). */
#include "quant/widen.h"

#include <math.h>
#include <string.h>

#include "quant/fp16.h"
#include "quant/pn_fast.h"
#include "quant/types.h"

/* The portable path: widen_simd.h at 4 lanes, the f16 conversion in
 * integer lanes. */
#define WD_W 4
#define WD_SUFFIX scalar
#include "quant/widen_simd.h"
#undef WD_W
#undef WD_SUFFIX

/* widen_avx2.c, widen_avx512.c: the same at 8 and 16 lanes, vcvtph2ps for
 * f16. Called only where pn_path_available says so. */
int64_t pn_widen_check_avx2(int type, const uint8_t *src, float *dst, int64_t n);
int64_t pn_widen_check_avx512(int type, const uint8_t *src, float *dst, int64_t n);

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
    default: return PN_ERR_TYPE;
    }
}

int64_t pn_find_nonfinite(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return i;
    return -1;
}

pn_status pn_widen_row_checked(int path, int src_type, const uint8_t *src, float *dst, int64_t n,
                               int64_t *bad_col)
{
    if (bad_col)
        *bad_col = -1;
    if (src_type != PN_TYPE_F32 && src_type != PN_TYPE_F16 && src_type != PN_TYPE_BF16)
        return PN_ERR_TYPE;
    if (!pn_path_available(path))
        return PN_ERR_USAGE;
    int64_t bad;
    switch (path) {
    case PN_PATH_REF:
        pn_widen_row(src_type, src, dst, n);
        bad = pn_find_nonfinite(dst, n);
        break;
    case PN_PATH_AVX2: bad = pn_widen_check_avx2(src_type, src, dst, n); break;
    case PN_PATH_AVX512: bad = pn_widen_check_avx512(src_type, src, dst, n); break;
    default: bad = pn_widen_check_scalar(src_type, src, dst, n); break;
    }
    if (bad < 0)
        return PN_OK;
    if (bad_col)
        *bad_col = bad;
    return PN_ERR_NONFINITE;
}
