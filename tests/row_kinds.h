/* row_kinds.h - weight rows that stress the quantizers, shared by
 * test_kquants.c and test_quant_row.c: random rows at every scale,
 * heavy tails, and the edges (zeros of both signs, constants, one outlier,
 * float subnormals, the largest finite float, few-bit values that put
 * quotients on rounding ties, sub-blocks at wildly different scales, scales
 * at the fp16 limits, NaN and infinities).
 *
 * A row is filled block by block (a "block" of bw weights), each block of a
 * kind picked at random, so that rows mix kinds the way a real tensor's
 * blocks differ. Deterministic (tu_rng).
 */
#ifndef PN_TEST_ROW_KINDS_H
#define PN_TEST_ROW_KINDS_H

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "test_util.h"

enum {
    RK_GAUSS,       /* Gaussian, std log-uniform in 1e-8 .. 1e4 */
    RK_HEAVY,       /* Cauchy and Student-t(2)-like */
    RK_OUTLIERS,    /* Gaussian with a few x10..x1000 outliers */
    RK_ZEROS,       /* +0 and -0 */
    RK_CONSTANT,    /* one value, either sign */
    RK_ONE_OUTLIER, /* zeros and one large weight */
    RK_SUBNORMAL,   /* float subnormals, some beside tiny normals */
    RK_HUGE,        /* the largest finite floats among ordinary ones */
    RK_FEW_BITS,    /* 1..12 significant bits: rounding ties */
    RK_ONE_SIDED,   /* all positive or all negative */
    RK_MIXED_SCALE, /* every 16 weights at another scale, some all zero */
    RK_FP16_EDGE,   /* scales near fp16's largest and smallest halves */
    RK_NONFINITE,   /* Gaussian with a NaN or an infinity */
    RK_COUNT
};

static inline int rk_pick(tu_rng *r, int n)
{
    return (int)(tu_rng_u64(r) % (uint64_t)n);
}

static inline double rk_log_uniform(tu_rng *r, double lo, double hi)
{
    return exp(log(lo) + (log(hi) - log(lo)) * tu_rng_uniform(r));
}

static inline float rk_few_bits(double v, int bits)
{
    if (v == 0.0 || !isfinite(v))
        return (float)v;
    int e;
    double f = frexp(v, &e);
    return (float)ldexp(nearbyint(ldexp(f, bits)), e - bits);
}

/* One block of bw weights of the given kind. */
static inline void rk_fill_block(tu_rng *r, int kind, float *w, int bw)
{
    const double scale = rk_log_uniform(r, 1e-8, 1e4);
    const double sign = rk_pick(r, 2) ? 1.0 : -1.0;
    switch (kind) {
    case RK_GAUSS:
        for (int e = 0; e < bw; e++)
            w[e] = (float)(scale * tu_rng_gauss(r));
        break;
    case RK_HEAVY:
        for (int e = 0; e < bw; e++) {
            double u = tu_rng_uniform(r);
            double v = rk_pick(r, 2) ? tan(3.141592653589793 * (u - 0.5))
                                     : tu_rng_gauss(r) / sqrt(fabs(tu_rng_gauss(r)) + 1e-3);
            w[e] = (float)(scale * 1e-2 * v);
        }
        break;
    case RK_OUTLIERS:
        for (int e = 0; e < bw; e++)
            w[e] = (float)(0.02 * tu_rng_gauss(r));
        for (int k = 0; k < 1 + rk_pick(r, 3); k++)
            w[rk_pick(r, bw)] *= (float)(10.0 + 990.0 * tu_rng_uniform(r));
        break;
    case RK_ZEROS:
        for (int e = 0; e < bw; e++)
            w[e] = rk_pick(r, 2) ? 0.0f : -0.0f;
        break;
    case RK_CONSTANT: {
        const float c = (float)(sign * scale);
        for (int e = 0; e < bw; e++)
            w[e] = c;
        break;
    }
    case RK_ONE_OUTLIER:
        for (int e = 0; e < bw; e++)
            w[e] = 0.0f;
        w[rk_pick(r, bw)] = (float)(sign * scale);
        break;
    case RK_SUBNORMAL:
        for (int e = 0; e < bw; e++) {
            w[e] = (float)(0x1p-140 * tu_rng_gauss(r));
            if (rk_pick(r, 8) == 0)
                w[e] = (float)(0x1p-120 * tu_rng_gauss(r));
        }
        break;
    case RK_HUGE:
        for (int e = 0; e < bw; e++)
            w[e] = (float)(0.02 * tu_rng_gauss(r));
        for (int k = 0; k < 1 + rk_pick(r, 4); k++)
            w[rk_pick(r, bw)] = rk_pick(r, 2) ? FLT_MAX : -FLT_MAX;
        break;
    case RK_FEW_BITS: {
        const int bits = 1 + rk_pick(r, 12);
        for (int e = 0; e < bw; e++)
            w[e] = rk_few_bits(scale * tu_rng_gauss(r), bits);
        break;
    }
    case RK_ONE_SIDED:
        for (int e = 0; e < bw; e++)
            w[e] = (float)(sign * scale * (0.01 + tu_rng_uniform(r)));
        break;
    case RK_MIXED_SCALE:
        for (int e0 = 0; e0 < bw; e0 += 16) {
            const double s = rk_pick(r, 4) == 0 ? 0.0 : rk_log_uniform(r, 1e-9, 1e3);
            for (int e = e0; e < e0 + 16 && e < bw; e++)
                w[e] = (float)(s * tu_rng_gauss(r));
        }
        break;
    case RK_FP16_EDGE: {
        /* amax around where a type's fp16 scale overflows (about 65504 times
         * the largest code) or lands among the subnormal halves */
        const double edge = rk_pick(r, 2) ? 65504.0 * (2.0 + 70.0 * tu_rng_uniform(r))
                                          : 0x1p-24 * (1.0 + 100.0 * tu_rng_uniform(r));
        for (int e = 0; e < bw; e++)
            w[e] = (float)(edge * 0.3 * tu_rng_gauss(r));
        w[rk_pick(r, bw)] = (float)(sign * edge);
        break;
    }
    default: { /* RK_NONFINITE */
        static const float bad[] = { NAN, -NAN, INFINITY, -INFINITY };
        for (int e = 0; e < bw; e++)
            w[e] = (float)(scale * tu_rng_gauss(r));
        w[rk_pick(r, bw)] = bad[rk_pick(r, 4)];
        break;
    }
    }
}

/* A row of nblocks blocks of random kinds. Without allow_refusals, the
 * kinds a quantizer may refuse (NaN/Inf, the largest floats, the fp16
 * overflow edge) are replaced by Gaussian blocks. */
static inline void rk_fill_row(tu_rng *r, float *w, int64_t nblocks, int bw, int allow_refusals)
{
    for (int64_t b = 0; b < nblocks; b++) {
        int kind = rk_pick(r, RK_COUNT);
        if (!allow_refusals && (kind == RK_NONFINITE || kind == RK_HUGE || kind == RK_FP16_EDGE))
            kind = RK_GAUSS;
        rk_fill_block(r, kind, w + b * bw, bw);
    }
}

#endif
