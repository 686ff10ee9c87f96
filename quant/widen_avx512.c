/* Widening with the finiteness check, AVX-512F: widen_simd.h at 16 lanes,
 * f16 by vcvtph2ps (exact for every half but a NaN, which stays a NaN), the
 * same block and tail logic the 4- and 8-lane builds run here. Compiled with
 * -mavx512f (and BW/DQ/VL); called only when
 * pn_path_available(PN_PATH_AVX512). */
#include <immintrin.h>

#define WD_W 16
#define WD_SUFFIX avx512
#define WD_F16(p) ((wd_vu)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p))))
#define WD_BF16(p)                                                                                 \
    ((wd_vu)_mm512_slli_epi32(                                                                     \
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(p))), 16))
#define WD_ANY(m) (_mm512_test_epi32_mask((__m512i)(m), (__m512i)(m)) != 0)
#include "quant/widen_simd.h"
