/* kquants_impl.h - arithmetic helpers private to the stock-type encoders
 * (q8_0.c, q4_K.c, q3_K.c). Not part of the public API.
 *
 * The encoders' inner loops work on 4 floats at a time through kq_v4. On
 * x86-64 that is SSE2 (part of the base instruction set, so no run-time
 * dispatch is needed); elsewhere it is plain C on a 4-element struct. Both
 * do the same IEEE single-precision operation per lane, in the same order,
 * and max/min treat a NaN the same way, so the encoded bytes do not depend
 * on which one was compiled. (Building with -DPN_KQ_SCALAR forces the plain
 * C lanes on x86 too; tests/quant/test_kquants.c's golden file passes either way.)
 *
 * The per-block steps that the references (q4_K.c, q3_K.c) and the fast
 * paths (kquants_simd.h) share are defined once here, at the end: the
 * super-block scales, q4_K's least-squares solve for d and dmin, and the
 * packing of codes and scales into the stored bytes.
 */
#ifndef PN_QUANT_KQUANTS_IMPL_H
#define PN_QUANT_KQUANTS_IMPL_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kquants.h"

/* Round to nearest, ties to even, for |v| < 2^22. Adding 1.5 * 2^23 pushes
 * the fraction out of the float's 24-bit significand, so the hardware's
 * default rounding does the work: the same answer on every IEEE machine and
 * no libm call. Callers clamp first. */
#define KQ_ROUND_MAGIC 12582912.0f

static inline float kq_round(float v)
{
    return (v + KQ_ROUND_MAGIC) - KQ_ROUND_MAGIC;
}

/* Clamp to [lo, hi]; a NaN becomes lo (the float-to-int conversion that
 * follows would be undefined for a NaN). */
static inline float kq_clamp(float v, float lo, float hi)
{
    v = v > lo ? v : lo;
    return v < hi ? v : hi;
}

/* A NaN or an infinity fails this (a NaN fails every comparison). */
static inline int kq_is_finite(float v)
{
    return v >= -FLT_MAX && v <= FLT_MAX;
}

#if defined(__SSE2__) && !defined(PN_KQ_SCALAR) /* PN_KQ_SCALAR: force the plain C lanes */
#include <emmintrin.h>

typedef __m128 kq_v4;
static inline kq_v4 kq_load(const float *p)
{
    return _mm_loadu_ps(p);
}
static inline void kq_store(float *p, kq_v4 v)
{
    _mm_storeu_ps(p, v);
}
static inline kq_v4 kq_set1(float v)
{
    return _mm_set1_ps(v);
}
static inline kq_v4 kq_add(kq_v4 a, kq_v4 b)
{
    return _mm_add_ps(a, b);
}
static inline kq_v4 kq_sub(kq_v4 a, kq_v4 b)
{
    return _mm_sub_ps(a, b);
}
static inline kq_v4 kq_mul(kq_v4 a, kq_v4 b)
{
    return _mm_mul_ps(a, b);
}
/* maxps/minps return the second operand unless the first compares
 * greater/less: exactly kq_clamp's a > b ? a : b. */
static inline kq_v4 kq_max(kq_v4 a, kq_v4 b)
{
    return _mm_max_ps(a, b);
}
static inline kq_v4 kq_min(kq_v4 a, kq_v4 b)
{
    return _mm_min_ps(a, b);
}
static inline kq_v4 kq_abs(kq_v4 a)
{
    return _mm_and_ps(a, _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff)));
}
/* (l0 + l1) + (l2 + l3) */
static inline float kq_hsum(kq_v4 v)
{
    float t[4];
    _mm_storeu_ps(t, v);
    return (t[0] + t[1]) + (t[2] + t[3]);
}
#else
typedef struct kq_v4 {
    float v[4];
} kq_v4;
static inline kq_v4 kq_load(const float *p)
{
    kq_v4 r = { { p[0], p[1], p[2], p[3] } };
    return r;
}
static inline void kq_store(float *p, kq_v4 a)
{
    for (int i = 0; i < 4; i++)
        p[i] = a.v[i];
}
static inline kq_v4 kq_set1(float x)
{
    kq_v4 r = { { x, x, x, x } };
    return r;
}
static inline kq_v4 kq_add(kq_v4 a, kq_v4 b)
{
    for (int i = 0; i < 4; i++)
        a.v[i] = a.v[i] + b.v[i];
    return a;
}
static inline kq_v4 kq_sub(kq_v4 a, kq_v4 b)
{
    for (int i = 0; i < 4; i++)
        a.v[i] = a.v[i] - b.v[i];
    return a;
}
static inline kq_v4 kq_mul(kq_v4 a, kq_v4 b)
{
    for (int i = 0; i < 4; i++)
        a.v[i] = a.v[i] * b.v[i];
    return a;
}
static inline kq_v4 kq_max(kq_v4 a, kq_v4 b)
{
    for (int i = 0; i < 4; i++)
        a.v[i] = a.v[i] > b.v[i] ? a.v[i] : b.v[i];
    return a;
}
static inline kq_v4 kq_min(kq_v4 a, kq_v4 b)
{
    for (int i = 0; i < 4; i++)
        a.v[i] = a.v[i] < b.v[i] ? a.v[i] : b.v[i];
    return a;
}
static inline kq_v4 kq_abs(kq_v4 a)
{
    for (int i = 0; i < 4; i++)
        a.v[i] = fabsf(a.v[i]);
    return a;
}
static inline float kq_hsum(kq_v4 a)
{
    return (a.v[0] + a.v[1]) + (a.v[2] + a.v[3]);
}
#endif

/* Index of the first NaN or infinity in x[0..n) (n a multiple of 4), or -1.
 * x - x is 0 for a finite x and NaN otherwise, so one sum tells whether a
 * slower search is needed. */
static inline int kq_first_nonfinite(const float *x, int n)
{
    kq_v4 probe = kq_set1(0.0f);
    for (int i = 0; i < n; i += 4) {
        kq_v4 v = kq_load(x + i);
        probe = kq_add(probe, kq_sub(v, v));
    }
    if (kq_hsum(probe) == 0.0f)
        return -1;
    for (int i = 0; i < n; i++)
        if (!kq_is_finite(x[i]))
            return i;
    return -1;
}

/* kq_round and kq_clamp, lane by lane. */
static inline kq_v4 kq_round4(kq_v4 v)
{
    const kq_v4 m = kq_set1(KQ_ROUND_MAGIC);
    return kq_sub(kq_add(v, m), m);
}

static inline kq_v4 kq_clamp4(kq_v4 v, kq_v4 lo, kq_v4 hi)
{
    return kq_min(kq_max(v, lo), hi);
}

/* ---- per-block steps shared by the references and the fast paths ---- */

#define KQ_Q4K_SUB 32
#define KQ_Q4K_NSUB 8
#define KQ_Q3K_SUB 16
#define KQ_Q3K_NSUB 16

/* q4_K: fp16 of v/63, so that v lands on the largest 6-bit value. Among
 * fp16's subnormals one unit is a large step: if rounding went down far
 * enough that v/63 would clip (or to zero), take the next half up. */
static inline uint16_t kq_q4k_super_scale(float v)
{
    if (v == 0.0f)
        return 0;
    uint16_t h = pn_fp16_from_double((double)v / 63.0);
    if ((double)v > 63.5 * (double)pn_fp16_to_float(h))
        h++;
    return h;
}

/* q4_K stage 4: least-squares d, dmin from the sums over the sub-blocks
 * (saa = sum sc^2 sum q^2, sab = sum sc m sum q, sbb = sum m^2 * 32,
 * sxa = sum sc sum x q, sxb = sum m sum x), rounded to fp16. hm_now is the
 * current dmin, kept when no sub-block has a min. Returns 0 when there is
 * no usable refit. */
static inline int kq_q4k_solve(double saa, double sab, double sbb, double sxa, double sxb,
                               uint16_t hm_now, uint16_t *hd, uint16_t *hm)
{
    double d, dm;
    if (sbb == 0.0) {
        if (saa <= 0.0)
            return 0;
        d = sxa / saa;
        dm = (double)pn_fp16_to_float(hm_now);
    } else {
        double det = saa * sbb - sab * sab;
        if (!(det > 0.0))
            return 0;
        d = (sxa * sbb - sab * sxb) / det;
        dm = (sab * sxa - saa * sxb) / det;
    }
    if (!(d >= 0.0) || !(dm >= 0.0))
        return 0;
    *hd = pn_fp16_from_double(d);
    *hm = pn_fp16_from_double(dm);
    if ((*hd & 0x7c00u) == 0x7c00u || (*hm & 0x7c00u) == 0x7c00u)
        return 0;
    return 1;
}

/* q4_K: the stored block from d, dmin, the eight (sc, m) and the 256 codes
 * in element order. */
static inline void kq_q4k_pack(uint16_t hd, uint16_t hm, const int *sc, const int *m,
                               const uint8_t *q, uint8_t *blk)
{
    pn_store_u16le(blk + offsetof(block_q4_K, d), hd);
    pn_store_u16le(blk + offsetof(block_q4_K, dmin), hm);
    uint8_t *scales = blk + offsetof(block_q4_K, scales), *qs = blk + offsetof(block_q4_K, qs);
    memset(scales, 0, sizeof(((block_q4_K *)0)->scales));
    for (int j = 0; j < KQ_Q4K_NSUB; j++)
        pn_q4_K_set_scale_min(scales, j, sc[j], m[j]);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
}

/* q3_K: d = fp16(-S/32) from the signed sub-block scale S of largest
 * magnitude. An all-zero block gets d = +0.0, not the -0.0 that 0 / -32
 * gives. Among fp16's subnormals one unit is a large step: if rounding went
 * down far enough that S would clip (or to zero), take the next half away
 * from zero (the magnitude is the low 15 bits). */
static inline uint16_t kq_q3k_super_scale(float smax)
{
    uint16_t hd = 0;
    if (smax != 0.0f) {
        hd = pn_fp16_from_double((double)smax / -32.0);
        if (fabs((double)smax) > 32.5 * fabs((double)pn_fp16_to_float(hd)))
            hd++;
    }
    return hd;
}

/* q3_K: the stored block from d, the sixteen k (-32..31) and the 256 codes
 * (-4..3) in element order. Weight e = 32p + l: high bit in bit p of
 * hmask[l], low bits at 2*(p%4) in qs[32*(p/4) + l]. */
static inline void kq_q3k_pack(uint16_t hd, const int *k, const int8_t *q, uint8_t *blk)
{
    uint8_t *hmask = blk + offsetof(block_q3_K, hmask), *qs = blk + offsetof(block_q3_K, qs);
    uint8_t *scales = blk + offsetof(block_q3_K, scales);
    memset(scales, 0, sizeof(((block_q3_K *)0)->scales));
    for (int l = 0; l < 32; l++) {
        unsigned hm = 0, lo0 = 0, lo1 = 0;
        for (int p = 0; p < 8; p++) {
            unsigned L = (unsigned)(q[32 * p + l] + 4);
            hm |= (L >> 2) << p;
            if (p < 4)
                lo0 |= (L & 3) << (2 * p);
            else
                lo1 |= (L & 3) << (2 * (p - 4));
        }
        hmask[l] = (uint8_t)hm;
        qs[l] = (uint8_t)lo0;
        qs[32 + l] = (uint8_t)lo1;
    }
    for (int j = 0; j < KQ_Q3K_NSUB; j++)
        pn_q3_K_set_scale(scales, j, k[j] + 32);
    pn_store_u16le(blk + offsetof(block_q3_K, d), hd);
}

#endif
