/* The AVX-512 block Hadamard rotation: eight doubles per vector. Stages
 * h = 1, 2, 4 run inside one vector (a lane permutation brings each partner
 * next to its pair, and a masked subtract writes the a - b half); the larger
 * stages pair whole vectors, up to four stages a pass while sixteen vectors
 * stay in registers: the first pass widens 64 floats and takes them through
 * stages 1..32, the last one scales, rounds to float and stores, so a block
 * of 1024 takes two passes over its buffer (the previous schedule took six:
 * widening, two stages a pass, rounding). Every value is the same
 * single-rounded sum or difference as in the reference (hadamard_fast.h).
 * Compiled with -mavx512f -mavx512dq; run only when
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

/* The butterflies of the stages 1, 2, .., n/2 (in vectors) on v[0..n): the
 * pair (i, i+s) of vectors becomes (a + b, a - b), the reference's butterfly
 * of every lane. */
static inline __attribute__((always_inline)) void butterflies(__m512d *v, const int n)
{
#pragma GCC unroll 16
    for (int s = 1; s < n; s *= 2) {
#pragma GCC unroll 16
        for (int i = 0; i < n; i++) {
            if (i & s)
                continue;
            const __m512d a = v[i], b = v[i + s];
            v[i] = _mm512_add_pd(a, b);
            v[i + s] = _mm512_sub_pd(a, b);
        }
    }
}

/* Widens x[0..B) (B a multiple of 8n), stages 1, 2, 4 in each vector, then
 * the stages 8 .. 8n/2 across n vectors; into buf, or (last: no stage left)
 * scaled and rounded back into x. */
static inline __attribute__((always_inline)) void
first_pass(float *x, double *buf, int B, const int n, const int last, __m512d scale)
{
    for (int j = 0; j < B; j += 8 * n) {
        __m512d v[8];
#pragma GCC unroll 8
        for (int i = 0; i < n; i++)
            v[i] = stages_1_2_4(_mm512_cvtps_pd(_mm256_loadu_ps(x + j + 8 * i)));
        butterflies(v, n);
#pragma GCC unroll 8
        for (int i = 0; i < n; i++) {
            if (last)
                _mm256_storeu_ps(x + j + 8 * i, _mm512_cvtpd_ps(_mm512_mul_pd(v[i], scale)));
            else
                _mm512_store_pd(buf + j + 8 * i, v[i]);
        }
    }
}

/* The stages h, 2h, .., h*n/2 (h a multiple of 8) on buf; with last, the
 * results are scaled and rounded into x instead. */
static inline __attribute__((always_inline)) void
stage_pass(float *x, double *buf, int B, int h, const int n, const int last, __m512d scale)
{
    for (int c = 0; c < B; c += n * h) {
        for (int j = c; j < c + h; j += 8) {
            __m512d v[16];
#pragma GCC unroll 16
            for (int i = 0; i < n; i++)
                v[i] = _mm512_load_pd(buf + j + i * h);
            butterflies(v, n);
#pragma GCC unroll 16
            for (int i = 0; i < n; i++) {
                if (last)
                    _mm256_storeu_ps(x + j + i * h, _mm512_cvtpd_ps(_mm512_mul_pd(v[i], scale)));
                else
                    _mm512_store_pd(buf + j + i * h, v[i]);
            }
        }
    }
}

static void rotate_block(float *x, double *buf, int B, __m512d scale)
{
    /* stages 1, 2, 4 in the vector, then up to three more in the first pass */
    const int n = B / 8 < 8 ? B / 8 : 8;
    int h = 8 * n; /* the first stage left */
    switch (n) {
    case 1: first_pass(x, buf, B, 1, h == B, scale); break;
    case 2: first_pass(x, buf, B, 2, h == B, scale); break;
    case 4: first_pass(x, buf, B, 4, h == B, scale); break;
    default:
        if (h == B)
            first_pass(x, buf, B, 8, 1, scale);
        else
            first_pass(x, buf, B, 8, 0, scale);
        break;
    }
    while (h < B) {
        const int left = B / h; /* 2^(stages left) */
        if (left > 16) {
            stage_pass(x, buf, B, h, 16, 0, scale);
            h *= 16;
            continue;
        }
        switch (left) {
        case 16: stage_pass(x, buf, B, h, 16, 1, scale); break;
        case 8: stage_pass(x, buf, B, h, 8, 1, scale); break;
        case 4: stage_pass(x, buf, B, h, 4, 1, scale); break;
        default: stage_pass(x, buf, B, h, 2, 1, scale); break;
        }
        h = B;
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
    for (int64_t base = 0; base + B <= K; base += B)
        rotate_block(x + base, buf, B, scale);
}
