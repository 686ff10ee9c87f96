/* The AVX2 block Hadamard rotation: four doubles per vector. Stages h = 1, 2
 * run inside one vector (a lane permutation brings each partner next to its
 * pair; a blend keeps a + b in the lower and a - b in the upper lane of each
 * pair); the larger stages pair whole vectors, up to three stages a pass
 * while eight vectors stay in registers: the first pass widens 32 floats
 * and takes them through stages 1..16, the last one scales, rounds to float
 * and stores, so a block of 1024 takes three passes over its buffer (the
 * previous schedule took six: widening, four of two stages, rounding). Every
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

/* The butterflies of stages 1, 2, .., n/2 (in vectors) on v[0..n): the pair
 * (i, i+s) of vectors becomes (a + b, a - b), the reference's butterfly of
 * every lane. */
static inline __attribute__((always_inline)) void butterflies(__m256d *v, const int n)
{
#pragma GCC unroll 8
    for (int s = 1; s < n; s *= 2) {
#pragma GCC unroll 8
        for (int i = 0; i < n; i++) {
            if (i & s)
                continue;
            const __m256d a = v[i], b = v[i + s];
            v[i] = _mm256_add_pd(a, b);
            v[i + s] = _mm256_sub_pd(a, b);
        }
    }
}

/* Widens x[0..B) (B = 4n * m for some m), stages 1, 2 in each vector, then
 * the stages 4 .. 4n/2 across n vectors; into buf, or (last: no stage left)
 * scaled and rounded back into x. */
static inline __attribute__((always_inline)) void
first_pass(float *x, double *buf, int B, const int n, const int last, __m256d scale)
{
    for (int j = 0; j < B; j += 4 * n) {
        __m256d v[8];
#pragma GCC unroll 8
        for (int i = 0; i < n; i++)
            v[i] = stages_1_2(_mm256_cvtps_pd(_mm_loadu_ps(x + j + 4 * i)));
        butterflies(v, n);
#pragma GCC unroll 8
        for (int i = 0; i < n; i++) {
            if (last)
                _mm_storeu_ps(x + j + 4 * i, _mm256_cvtpd_ps(_mm256_mul_pd(v[i], scale)));
            else
                _mm256_store_pd(buf + j + 4 * i, v[i]);
        }
    }
}

/* The stages h, 2h, .., h*n/2 (h a multiple of 4) on buf; with last, the
 * results are scaled and rounded into x instead. */
static inline __attribute__((always_inline)) void
stage_pass(float *x, double *buf, int B, int h, const int n, const int last, __m256d scale)
{
    for (int c = 0; c < B; c += n * h) {
        for (int j = c; j < c + h; j += 4) {
            __m256d v[8];
#pragma GCC unroll 8
            for (int i = 0; i < n; i++)
                v[i] = _mm256_load_pd(buf + j + i * h);
            butterflies(v, n);
#pragma GCC unroll 8
            for (int i = 0; i < n; i++) {
                if (last)
                    _mm_storeu_ps(x + j + i * h, _mm256_cvtpd_ps(_mm256_mul_pd(v[i], scale)));
                else
                    _mm256_store_pd(buf + j + i * h, v[i]);
            }
        }
    }
}

static void rotate_block(float *x, double *buf, int B, __m256d scale)
{
    /* stages 1 and 2 in the vector, then up to three more in the first pass */
    int n = B / 4 < 8 ? B / 4 : 8;
    int h = 4 * n; /* the first stage left */
    const int last = h == B;
    switch (n) {
    case 1: first_pass(x, buf, B, 1, last, scale); break;
    case 2: first_pass(x, buf, B, 2, last, scale); break;
    case 4: first_pass(x, buf, B, 4, last, scale); break;
    default:
        if (last)
            first_pass(x, buf, B, 8, 1, scale);
        else
            first_pass(x, buf, B, 8, 0, scale);
        break;
    }
    while (h < B) {
        const int left = B / h; /* 2^(stages left) */
        if (left > 8) {
            stage_pass(x, buf, B, h, 8, 0, scale);
            h *= 8;
        } else if (left == 8) {
            stage_pass(x, buf, B, h, 8, 1, scale);
            h = B;
        } else if (left == 4) {
            stage_pass(x, buf, B, h, 4, 1, scale);
            h = B;
        } else {
            stage_pass(x, buf, B, h, 2, 1, scale);
            h = B;
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
    for (int64_t base = 0; base + B <= K; base += B)
        rotate_block(x + base, buf, B, scale);
}
