/* kquants_impl.h - arithmetic helpers private to the stock-type encoders
 * (q8_0.c, q4_K.c, q3_K.c). Not part of the public API.
 *
 * The encoders' inner loops work on 4 floats at a time through kq_v4. On
 * x86-64 that is SSE2 (part of the base instruction set, so no run-time
 * dispatch is needed); elsewhere it is plain C on a 4-element struct. Both
 * do the same IEEE single-precision operation per lane, in the same order,
 * and max/min treat a NaN the same way, so the encoded bytes do not depend
 * on which one was compiled. (Building with -DPN_KQ_SCALAR forces the plain
 * C lanes on x86 too; tests/test_kquants.c's golden file passes either way.)
 */
#ifndef PN_QUANT_KQUANTS_IMPL_H
#define PN_QUANT_KQUANTS_IMPL_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

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
static inline kq_v4 kq_load(const float *p) { return _mm_loadu_ps(p); }
static inline void kq_store(float *p, kq_v4 v) { _mm_storeu_ps(p, v); }
static inline kq_v4 kq_set1(float v) { return _mm_set1_ps(v); }
static inline kq_v4 kq_add(kq_v4 a, kq_v4 b) { return _mm_add_ps(a, b); }
static inline kq_v4 kq_sub(kq_v4 a, kq_v4 b) { return _mm_sub_ps(a, b); }
static inline kq_v4 kq_mul(kq_v4 a, kq_v4 b) { return _mm_mul_ps(a, b); }
/* maxps/minps return the second operand unless the first compares
 * greater/less: exactly kq_clamp's a > b ? a : b. */
static inline kq_v4 kq_max(kq_v4 a, kq_v4 b) { return _mm_max_ps(a, b); }
static inline kq_v4 kq_min(kq_v4 a, kq_v4 b) { return _mm_min_ps(a, b); }
static inline kq_v4 kq_abs(kq_v4 a) { return _mm_and_ps(a, _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff))); }
/* (l0 + l1) + (l2 + l3) */
static inline float kq_hsum(kq_v4 v)
{
    float t[4];
    _mm_storeu_ps(t, v);
    return (t[0] + t[1]) + (t[2] + t[3]);
}
#else
typedef struct kq_v4 { float v[4]; } kq_v4;
static inline kq_v4 kq_load(const float *p) { kq_v4 r = {{p[0], p[1], p[2], p[3]}}; return r; }
static inline void kq_store(float *p, kq_v4 a) { for (int i = 0; i < 4; i++) p[i] = a.v[i]; }
static inline kq_v4 kq_set1(float x) { kq_v4 r = {{x, x, x, x}}; return r; }
static inline kq_v4 kq_add(kq_v4 a, kq_v4 b) { for (int i = 0; i < 4; i++) a.v[i] = a.v[i] + b.v[i]; return a; }
static inline kq_v4 kq_sub(kq_v4 a, kq_v4 b) { for (int i = 0; i < 4; i++) a.v[i] = a.v[i] - b.v[i]; return a; }
static inline kq_v4 kq_mul(kq_v4 a, kq_v4 b) { for (int i = 0; i < 4; i++) a.v[i] = a.v[i] * b.v[i]; return a; }
static inline kq_v4 kq_max(kq_v4 a, kq_v4 b) { for (int i = 0; i < 4; i++) a.v[i] = a.v[i] > b.v[i] ? a.v[i] : b.v[i]; return a; }
static inline kq_v4 kq_min(kq_v4 a, kq_v4 b) { for (int i = 0; i < 4; i++) a.v[i] = a.v[i] < b.v[i] ? a.v[i] : b.v[i]; return a; }
static inline kq_v4 kq_abs(kq_v4 a) { for (int i = 0; i < 4; i++) a.v[i] = fabsf(a.v[i]); return a; }
static inline float kq_hsum(kq_v4 a) { return (a.v[0] + a.v[1]) + (a.v[2] + a.v[3]); }
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

#endif
