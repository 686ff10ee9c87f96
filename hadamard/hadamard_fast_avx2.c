/* The AVX2 block Hadamard rotation: four doubles per vector. Stages h = 1, 2
 * run inside one vector (a lane permutation brings each partner next to its
 * pair; a blend keeps a + b in the lower and a - b in the upper lane of each
 * pair); the larger stages pair whole vectors, two stages per pass. Every
 * value is the same single-rounded sum or difference as in the reference
 * (hadamard_fast.h). Compiled with -mavx2; run only when
 * pn_hadamard_path_available(PN_PATH_AVX2). */
#include <immintrin.h>
#include <math.h>

#include "hadamard/hadamard.h"
#include "hadamard/hadamard_fast.h"

static inline __m256d stages_1_2(__m256d v)
{
    __m256d p = _mm256_permute_pd(v, 0x5);
    v = _mm256_blend_pd(_mm256_add_pd(v, p), _mm256_sub_pd(p, v), 0xa);
    p = _mm256_permute2f128_pd(v, v, 0x01);
    v = _mm256_blend_pd(_mm256_add_pd(v, p), _mm256_sub_pd(p, v), 0xc);
    return v;
}

static void stage_pair(double *buf, int B, int h)
{
    for (int c = 0; c < B; c += 4 * h) {
        for (int j = c; j < c + h; j += 4) {
            __m256d x0 = _mm256_load_pd(buf + j), x1 = _mm256_load_pd(buf + j + h);
            __m256d x2 = _mm256_load_pd(buf + j + 2 * h), x3 = _mm256_load_pd(buf + j + 3 * h);
            __m256d a0 = _mm256_add_pd(x0, x1), a1 = _mm256_sub_pd(x0, x1);
            __m256d a2 = _mm256_add_pd(x2, x3), a3 = _mm256_sub_pd(x2, x3);
            _mm256_store_pd(buf + j, _mm256_add_pd(a0, a2));
            _mm256_store_pd(buf + j + 2 * h, _mm256_sub_pd(a0, a2));
            _mm256_store_pd(buf + j + h, _mm256_add_pd(a1, a3));
            _mm256_store_pd(buf + j + 3 * h, _mm256_sub_pd(a1, a3));
        }
    }
}

static void stage_single(double *buf, int B, int h)
{
    for (int c = 0; c < B; c += 2 * h) {
        for (int j = c; j < c + h; j += 4) {
            __m256d a = _mm256_load_pd(buf + j), b = _mm256_load_pd(buf + j + h);
            _mm256_store_pd(buf + j, _mm256_add_pd(a, b));
            _mm256_store_pd(buf + j + h, _mm256_sub_pd(a, b));
        }
    }
}

void pn_hadamard_rotate_row_avx2(float *x, int64_t K, int B)
{
    if (B < 4) {
        pn_hadamard_rotate_row_scalar_fast(x, K, B);
        return;
    }
    double buf[PN_HADAMARD_MAX_BLOCK] __attribute__((aligned(32)));
    const __m256d scale = _mm256_set1_pd(1.0 / sqrt((double)B));
    for (int64_t base = 0; base + B <= K; base += B) {
        float *xb = x + base;
        for (int j = 0; j < B; j += 4)
            _mm256_store_pd(buf + j, stages_1_2(_mm256_cvtps_pd(_mm_loadu_ps(xb + j))));
        int h = 4;
        for (; 4 * h <= B; h *= 4)
            stage_pair(buf, B, h);
        if (2 * h <= B)
            stage_single(buf, B, h);
        for (int j = 0; j < B; j += 4)
            _mm_storeu_ps(xb + j, _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_load_pd(buf + j), scale)));
    }
}
