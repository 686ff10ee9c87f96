/* Widening with the finiteness check, AVX2 + F16C: widen_simd.h at 8 lanes,
 * f16 by vcvtph2ps (exact for every half but a NaN, which stays a NaN).
 * Compiled with -mavx2 -mf16c; called only when
 * pn_path_available(PN_PATH_AVX2). */
#include <immintrin.h>

#define WD_W 8
#define WD_SUFFIX avx2
#define WD_F16(p) ((wd_vu)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p))))
#define WD_BF16(p)                                                                                 \
    ((wd_vu)_mm256_slli_epi32(                                                                     \
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p))), 16))
#define WD_ANY(m) (!_mm256_testz_si256((__m256i)(m), (__m256i)(m)))
#include "quant/widen_simd.h"
