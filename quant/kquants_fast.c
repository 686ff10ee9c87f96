/* The portable fast q4_K and q3_K encoders (kquants_simd.h at 4 lanes, no
 * instruction-set flags: SSE2 on x86-64, plain C elsewhere), and the k-quant
 * row calls of quant/kquants.h on a chosen path (the type table's). */
#if defined(__SSE2__)
#include <emmintrin.h>
#define KQ_MAXF(a, b) ((kvf)_mm_max_ps((__m128)(a), (__m128)(b)))
#define KQ_MINF(a, b) ((kvf)_mm_min_ps((__m128)(a), (__m128)(b)))
#define KQ_ANYD(m) (_mm_movemask_pd((__m128d)(m)) != 0)
#define KQ_WIDEN_LO(a) ((kvdh)_mm_cvtps_pd((__m128)(a)))
#define KQ_WIDEN_HI(a) ((kvdh)_mm_cvtps_pd(_mm_movehl_ps((__m128)(a), (__m128)(a))))
#define KQ_NARROW(lo, hi) _mm_movelh_ps(_mm_cvtpd_ps((__m128d)(lo)), _mm_cvtpd_ps((__m128d)(hi)))
#define KQ_MASK32(lo, hi) _mm_shuffle_ps((__m128)(lo), (__m128)(hi), 0x88)
#endif
#define KQ_W 4
#define KQ_SUFFIX w4
#include "quant/kquants_simd.h"

#include "quant/pn_fast.h"
#include "quant/types.h"

static pn_status kq_usage(int64_t *bad_col)
{
    if (bad_col)
        *bad_col = -1;
    return PN_ERR_USAGE;
}

pn_status pn_quantize_row_q4_K_path(int path, const float *x, int64_t n, uint8_t *out,
                                    int64_t *bad_col)
{
    if (!pn_path_available(path) || n < 0 || n % PN_QK_K != 0)
        return kq_usage(bad_col);
    return pn_type_traits_get(PN_TYPE_Q4_K)->encode[path](x, n, out, bad_col, NULL, NULL);
}

pn_status pn_quantize_row_q3_K_path(int path, const float *x, int64_t n, uint8_t *out,
                                    int64_t *bad_col)
{
    if (!pn_path_available(path) || n < 0 || n % PN_QK_K != 0)
        return kq_usage(bad_col);
    return pn_type_traits_get(PN_TYPE_Q3_K)->encode[path](x, n, out, bad_col, NULL, NULL);
}

pn_status pn_quantize_row_q4_K(const float *x, int64_t n, uint8_t *out, int64_t *bad_col)
{
    return pn_quantize_row_q4_K_path(pn_cpu_path_best(), x, n, out, bad_col);
}

pn_status pn_quantize_row_q3_K(const float *x, int64_t n, uint8_t *out, int64_t *bad_col)
{
    return pn_quantize_row_q3_K_path(pn_cpu_path_best(), x, n, out, bad_col);
}
