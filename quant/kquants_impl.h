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

/* fp16 bits -> float, exact (every half is a float). The same value as
 * pn_fp16_to_float, without its libm calls: the encoders widen a few
 * scales per block and that showed in their profile. */
static inline float kq_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) { /* zero or subnormal: mant * 2^-24 is exact in float */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    uint32_t bits = sign | (exp == 31 ? 0x7f800000u | (mant << 13) : ((exp + 112u) << 23) | (mant << 13));
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* double -> fp16 bits, rounded once to nearest, ties to even: the same
 * result as pn_fp16_from_double (tests/test_kquants.c checks this on every
 * half, every midpoint and its neighbours, and random doubles) without its
 * libm calls, which were a fifth of q8_0's time. Overflow gives +-inf, NaN a
 * quiet NaN, results below half the smallest subnormal +-0. */
static inline uint16_t kq_half_from_double(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    const uint16_t sign = (uint16_t)((u >> 48) & 0x8000u);
    const uint64_t a = u & 0x7fffffffffffffffull;
    if (a > 0x7ff0000000000000ull)
        return (uint16_t)(sign | 0x7e00u);
    const int e = (int)(a >> 52) - 1023; /* a = 1.f * 2^e for a normal double */
    if (e >= 16)
        return (uint16_t)(sign | 0x7c00u);
    if (e < -25 - 1) /* below 2^-26, a quarter of the smallest subnormal */
        return sign;
    const uint64_t m = (a & 0xfffffffffffffull) | (1ull << 52);
    /* keep 11 significant bits for a normal half; fewer for a subnormal,
     * whose last bit is worth 2^-24 */
    const int shift = e >= -14 ? 42 : 42 + (-14 - e);
    uint64_t r = m >> shift;
    const uint64_t rem = m & ((1ull << shift) - 1), halfway = 1ull << (shift - 1);
    if (rem > halfway || (rem == halfway && (r & 1)))
        r++;
    if (e < -14) /* subnormal; r == 1024 is the smallest normal, 0x0400 */
        return (uint16_t)(sign | r);
    int exp = e + 15;
    if (r == 2048) {
        r = 1024;
        exp++;
    }
    if (exp >= 31)
        return (uint16_t)(sign | 0x7c00u);
    return (uint16_t)(sign | (uint16_t)(exp << 10) | (uint16_t)(r - 1024));
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
