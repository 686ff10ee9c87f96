/* The AVX-512 q4_K and q3_K encoders: kquants_simd.h at 16 lanes, the same
 * logic the 4- and 8-lane builds run (a vector holds half of each of the
 * unit's two super-blocks at every width). Compiled with -mavx512f
 * -mavx512bw -mavx512dq -mavx512vl (AVX-512F's FMA only where
 * kquants_simd.h proves fused == unfused, KQ_FMA_EXACT); called only when
 * pn_path_available(PN_PATH_AVX512). */
#include <immintrin.h>

#define KQ_W 16
#define KQ_SUFFIX avx512
#define KQ_FMA_EXACT(a, b, c) ((kvf)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#define KQ_MAXF(a, b) ((kvf)_mm512_max_ps((__m512)(a), (__m512)(b)))
#define KQ_MINF(a, b) ((kvf)_mm512_min_ps((__m512)(a), (__m512)(b)))
#define KQ_ANYD(m) (_mm512_test_epi64_mask((__m512i)(m), (__m512i)(m)) != 0)
#define KQ_CVT4(v) ((kv4d)_mm256_cvtps_pd((__m128)(v)))
#define KQ_WIDEN_LO(a) ((kvdh)_mm512_cvtps_pd(_mm512_castps512_ps256((__m512)(a))))
#define KQ_WIDEN_HI(a) ((kvdh)_mm512_cvtps_pd(_mm512_extractf32x8_ps((__m512)(a), 1)))
#define KQ_NARROW(lo, hi)                                                                          \
    _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps((__m512d)(lo))),                     \
                       _mm512_cvtpd_ps((__m512d)(hi)), 1)
#define KQ_MASK32(lo, hi)                                                                          \
    _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32((__m512i)(lo))),               \
                       _mm512_cvtepi64_epi32((__m512i)(hi)), 1)
#define KQ_ROUND_NONNEG(v)                                                                         \
    ((kvf)_mm512_roundscale_ps((__m512)(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#include "quant/kquants_simd.h"
