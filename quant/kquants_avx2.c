/* The AVX2 q4_K and q3_K encoders: kquants_simd.h at 8 lanes. Compiled with
 * -mavx2 -mf16c -mfma (cmake/pn_module.cmake); FMA is used only where
 * kquants_simd.h proves fused == unfused (KQ_FMA_EXACT, sums of code
 * squares); the build's -ffp-contract=off keeps the compiler from fusing
 * anything else. Called only when pn_path_available(PN_PATH_AVX2), which
 * requires FMA too. */
#include <immintrin.h>

#define KQ_W 8

#define KQ_SUFFIX avx2
#define KQ_FMA_EXACT(a, b, c) ((kvf)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#define KQ_MAXF(a, b) ((kvf)_mm256_max_ps((__m256)(a), (__m256)(b)))
#define KQ_MINF(a, b) ((kvf)_mm256_min_ps((__m256)(a), (__m256)(b)))
#define KQ_ANYD(m) (_mm256_movemask_pd((__m256d)(m)) != 0)
#define KQ_SELF(m, a, b) _mm256_blendv_ps((__m256)(b), (__m256)(a), (__m256)(m))
#define KQ_SELD(m, a, b) _mm256_blendv_pd((__m256d)(b), (__m256d)(a), (__m256d)(m))
#define KQ_CVT4(v) ((kv4d)_mm256_cvtps_pd((__m128)(v)))
#define KQ_WIDEN_LO(a) ((kvdh)_mm256_cvtps_pd(_mm256_castps256_ps128((__m256)(a))))
#define KQ_WIDEN_HI(a) ((kvdh)_mm256_cvtps_pd(_mm256_extractf128_ps((__m256)(a), 1)))
#define KQ_NARROW(lo, hi)                                                                          \
    _mm256_set_m128(_mm256_cvtpd_ps((__m256d)(hi)), _mm256_cvtpd_ps((__m256d)(lo)))
/* the low 32 bits of each 64-bit mask lane (both halves of a mask lane are
 * equal), in lane order */
#define KQ_MASK32(lo, hi)                                                                          \
    _mm256_permute4x64_pd((__m256d)_mm256_shuffle_ps((__m256)(lo), (__m256)(hi), 0x88), 0xd8)
#define KQ_ROUND_NONNEG(v)                                                                         \
    ((kvf)_mm256_round_ps((__m256)(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#include "quant/kquants_simd.h"
