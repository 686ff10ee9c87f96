/* The AVX-512 block Hadamard rotation: eight doubles per vector. Stages
 * h = 1, 2, 4 run inside one vector (a lane permutation brings each partner
 * next to its pair, and a masked subtract writes the a - b half); the larger
 * stages pair whole vectors, two stages per pass over the block. Every value
 * is the same single-rounded sum or difference as in the reference
 * (hadamard_fast.h). Compiled with -mavx512f -mavx512dq; run only when
 * pn_hadamard_path_available(PN_PATH_AVX512). */
#include <immintrin.h>
#include <math.h>

#include "hadamard/hadamard.h"
#include "hadamard/hadamard_fast.h"

/* Stages 1, 2, 4 on the eight values of v. Lane j < j+h gets v[j] + v[j+h]
 * (computed as v[j] + p[j], the same sum) and lane j+h gets v[j] - v[j+h]
 * (p[j+h] - v[j+h]). */
static inline __m512d stages_1_2_4(__m512d v)
{
    __m512d p = _mm512_permute_pd(v, 0x55);
    v = _mm512_mask_sub_pd(_mm512_add_pd(v, p), 0xaa, p, v);
    p = _mm512_permutex_pd(v, 0x4e);
    v = _mm512_mask_sub_pd(_mm512_add_pd(v, p), 0xcc, p, v);
    p = _mm512_shuffle_f64x2(v, v, 0x4e);
    v = _mm512_mask_sub_pd(_mm512_add_pd(v, p), 0xf0, p, v);
    return v;
}

static void stage_pair(double *buf, int B, int h)
{
    for (int c = 0; c < B; c += 4 * h) {
        for (int j = c; j < c + h; j += 8) {
            __m512d x0 = _mm512_load_pd(buf + j), x1 = _mm512_load_pd(buf + j + h);
            __m512d x2 = _mm512_load_pd(buf + j + 2 * h), x3 = _mm512_load_pd(buf + j + 3 * h);
            __m512d a0 = _mm512_add_pd(x0, x1), a1 = _mm512_sub_pd(x0, x1);
            __m512d a2 = _mm512_add_pd(x2, x3), a3 = _mm512_sub_pd(x2, x3);
            _mm512_store_pd(buf + j, _mm512_add_pd(a0, a2));
            _mm512_store_pd(buf + j + 2 * h, _mm512_sub_pd(a0, a2));
            _mm512_store_pd(buf + j + h, _mm512_add_pd(a1, a3));
            _mm512_store_pd(buf + j + 3 * h, _mm512_sub_pd(a1, a3));
        }
    }
}

static void stage_single(double *buf, int B, int h)
{
    for (int c = 0; c < B; c += 2 * h) {
        for (int j = c; j < c + h; j += 8) {
            __m512d a = _mm512_load_pd(buf + j), b = _mm512_load_pd(buf + j + h);
            _mm512_store_pd(buf + j, _mm512_add_pd(a, b));
            _mm512_store_pd(buf + j + h, _mm512_sub_pd(a, b));
        }
    }
}

void pn_hadamard_rotate_row_avx512(float *x, int64_t K, int B)
{
    if (B < 8) {
        pn_hadamard_rotate_row_scalar_fast(x, K, B);
        return;
    }
    double buf[PN_HADAMARD_MAX_BLOCK] __attribute__((aligned(64)));
    const __m512d scale = _mm512_set1_pd(1.0 / sqrt((double)B));
    for (int64_t base = 0; base + B <= K; base += B) {
        float *xb = x + base;
        for (int j = 0; j < B; j += 8)
            _mm512_store_pd(buf + j, stages_1_2_4(_mm512_cvtps_pd(_mm256_loadu_ps(xb + j))));
        int h = 8;
        for (; 4 * h <= B; h *= 4)
            stage_pair(buf, B, h);
        if (2 * h <= B)
            stage_single(buf, B, h);
        for (int j = 0; j < B; j += 8)
            _mm256_storeu_ps(xb + j, _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_load_pd(buf + j), scale)));
    }
}
