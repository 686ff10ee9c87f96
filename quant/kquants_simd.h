/* kquants_simd.h - the q4_K and q3_K fast encoders, written once for a
 * vector of KQ_W float lanes (4, 8 or 16) with GCC vector extensions.
 *
 * Included, once each, by kquants_fast.c (KQ_W 4, no instruction-set flags:
 * SSE2 on x86-64, plain C elsewhere), kquants_avx2.c (8) and
 * kquants_avx512.c (16); the includer defines KQ_W, KQ_SUFFIX (the suffix of
 * the functions it exports) and, where it has them, KQ_MAXF / KQ_MINF (the
 * ISA's maxps / minps). Not a public header.
 *
 * Why the bytes are the reference's (q4_K.c, q3_K.c)
 * --------------------------------------------------
 * The references work on one sub-block at a time, and inside it on four
 * floats at a time (kq_v4 lanes: lane l sums elements l, l+4, l+8, ... in
 * order, and the lanes are combined as (l0 + l1) + (l2 + l3)). Here each
 * vector lane is one sub-block: lane i of vector v of a unit holds
 * sub-block v*KQ_W/2 + i % (KQ_W/2) of super-block i / (KQ_W/2), so every
 * vector mixes the unit's two super-blocks, whatever the width. A lane runs
 * exactly the reference's per-sub-block program:
 *  - every float or double operation is the reference's, on the same
 *    operands in the same order (the source expressions are the same, with
 *    vector operands), and the build has no contraction into FMA and no
 *    fast-math, so each lane rounds as the scalar code does;
 *  - each four-lane sum of the reference is kept as four accumulators, one
 *    per residue class e % 4, fed in element order and combined as
 *    (A0 + A1) + (A2 + A3); sums that are exact in float whatever the order
 *    (code counts and code squares: integers below 2^24) are not special,
 *    except that the sums of code squares may use a fused multiply-add
 *    (KQ_FMA_EXACT: exact operands, exact result, so fused == unfused);
 *  - max/min are the ISA's maxps/minps with the reference's operand order
 *    (a > b ? a : b, so a NaN picks the same operand), and every branch of
 *    the reference becomes a lane mask computed with the same comparison,
 *    taken in the same order (trial by trial, slot by slot: "the first
 *    strict improvement wins" is a per-lane select in loop order);
 *  - what the reference does per super-block (the maxima over sub-blocks,
 *    the fp16 super-block scales, q4_K's refit of d and dmin and its rounds,
 *    the packing) runs per super-block in scalar code, with the shared
 *    helpers of kquants_impl.h, in the reference's order.
 * Lanes whose values the reference would not compute (a flat sub-block, a
 * scale slot outside the valid range, the padding super-block of a row with
 * an odd count) compute garbage that no select ever takes; nothing traps
 * (default floating-point environment) and no garbage is converted to an
 * integer in scalar code.
 * A super-block with a NaN or infinity, or whose scale overflows fp16, is an
 * error: the unit holding it is handed to the reference, whose status and
 * column are then returned as they are.
 *
 * Per-block sums (quant/quant_row.h): the encoder computes the decoded
 * floats from its final codes with the decoder's own operations (q4_K
 * d1 * q - m1, q3_K dl * q, with d1, m1, dl the products the decoder forms),
 * and the two sums of eight super-blocks run in eight double lanes, each lane
 * adding its block's terms in element order.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kquants.h"
#include "quant/kquants_fast.h"
#include "quant/kquants_impl.h"

#ifndef KQ_W
#error "define KQ_W (4, 8 or 16) before including kquants_simd.h"
#endif

#define KQ_CAT2(a, b) a##_##b
#define KQ_CAT(a, b) KQ_CAT2(a, b)
#define KQ_FN(name) KQ_CAT(name, KQ_SUFFIX)

#define KQ_HALF (KQ_W / 2)

/* Vectors wider than the ISA's pass between these static inline functions
 * only; GCC's note that their ABI would differ is about exported ones. */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float kvf __attribute__((vector_size(4 * KQ_W)));
typedef int32_t kvi __attribute__((vector_size(4 * KQ_W)));
/* Doubles in two native-width halves (lanes 0..W/2-1 and W/2..W-1): GCC
 * splits arithmetic on a double vector twice the ISA's width well, but not
 * comparisons, which it turns into scalar code; so every double value of a
 * float vector is a kvd2 and the double steps run once per half. */
typedef float kvfh __attribute__((vector_size(2 * KQ_W)));
typedef int32_t kvih __attribute__((vector_size(2 * KQ_W)));
typedef double kvdh __attribute__((vector_size(4 * KQ_W)));
typedef int64_t kvlh __attribute__((vector_size(4 * KQ_W)));
typedef struct kvd2 {
    kvdh h[2];
} kvd2;

#if KQ_W == 4
#define KQ_IDX_LO 0, 1
#define KQ_IDX_HI 2, 3
#define KQ_IDX_ALL 0, 1, 2, 3
#elif KQ_W == 8
#define KQ_IDX_LO 0, 1, 2, 3
#define KQ_IDX_HI 4, 5, 6, 7
#define KQ_IDX_ALL 0, 1, 2, 3, 4, 5, 6, 7
#elif KQ_W == 16
#define KQ_IDX_LO 0, 1, 2, 3, 4, 5, 6, 7
#define KQ_IDX_HI 8, 9, 10, 11, 12, 13, 14, 15
#define KQ_IDX_ALL 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
#else
#error "KQ_W must be 4, 8 or 16"
#endif

/* a > b ? a : b and a < b ? a : b, lane by lane (maxps / minps). */
#ifndef KQ_MAXF
#define KQ_MAXF(a, b) kq_self((a) > (b), (a), (b))
#define KQ_MINF(a, b) kq_self((a) < (b), (a), (b))
#endif

/* m ? a : b lane by lane, for masks of all ones or zero (the ISA's blend
 * when the includer has one). */
#ifndef KQ_SELF
#define KQ_SELF(m, a, b) ((kvf)(((m) & (kvi)(a)) | (~(m) & (kvi)(b))))
#define KQ_SELD(m, a, b) ((kvdh)(((m) & (kvlh)(a)) | (~(m) & (kvlh)(b))))
#endif
/* Whether any lane of a double mask is set (the branches only skip work
 * whose result no lane would take). */
#ifndef KQ_ANYD
static inline int kq_anyd(kvlh m)
{
    int64_t r = 0;
    for (int i = 0; i < KQ_HALF; i++)
        r |= m[i];
    return r != 0;
}
#define KQ_ANYD(m) kq_anyd(m)
#endif
static inline kvf kq_self(kvi m, kvf a, kvf b)
{
    return (kvf)KQ_SELF(m, a, b);
}
static inline kvdh kq_seld(kvlh m, kvdh a, kvdh b)
{
    return (kvdh)KQ_SELD(m, a, b);
}
static inline kvf kq_maxf(kvf a, kvf b)
{
    return KQ_MAXF(a, b);
}
static inline kvf kq_minf(kvf a, kvf b)
{
    return KQ_MINF(a, b);
}
static inline kvf kq_splat(float s)
{
    return (kvf){ 0 } + s;
}
static inline kvdh kq_splatd(double s)
{
    return (kvdh){ 0 } + s;
}
static inline kvd2 kq_splatd2(double s)
{
    return (kvd2){ { kq_splatd(s), kq_splatd(s) } };
}
/* float <-> double conversions and the narrowing of a double mask, per ISA
 * when the includer has them (GCC 12 lowers the generic forms through
 * memory, two lanes at a time); the generic forms compute the same values. */
#ifndef KQ_WIDEN_LO
#define KQ_WIDEN_LO(a) __builtin_convertvector((kvfh)__builtin_shufflevector(a, a, KQ_IDX_LO), kvdh)
#define KQ_WIDEN_HI(a) __builtin_convertvector((kvfh)__builtin_shufflevector(a, a, KQ_IDX_HI), kvdh)
#define KQ_NARROW(lo, hi)                                                                          \
    __builtin_shufflevector(__builtin_convertvector(lo, kvfh), __builtin_convertvector(hi, kvfh),  \
                            KQ_IDX_ALL)
#define KQ_MASK32(lo, hi)                                                                          \
    __builtin_shufflevector(__builtin_convertvector(lo, kvih), __builtin_convertvector(hi, kvih),  \
                            KQ_IDX_ALL)
#endif

static inline kvd2 kq_widen(kvf a)
{
    return (kvd2){ { KQ_WIDEN_LO(a), KQ_WIDEN_HI(a) } };
}
static inline kvf kq_narrow(kvd2 a)
{
    return (kvf)KQ_NARROW(a.h[0], a.h[1]);
}
/* A mask of double lanes (all ones or zero) as a mask of float lanes. */
static inline kvi kq_mask32(kvlh lo, kvlh hi)
{
    return (kvi)KQ_MASK32(lo, hi);
}
/* Lane i of a kvd2. */
static inline double kq_lane(const kvd2 *a, int i)
{
    return a->h[i / KQ_HALF][i % KQ_HALF];
}
/* c + a*b for integer-valued floats whose product and sum are exact
 * (code squares and their sums: integers below 2^24). Then a fused
 * multiply-add and the reference's separate multiply and add give the same
 * float, so an ISA with one may fuse here, and only here; everywhere else
 * every operation rounds on its own. */
#ifndef KQ_FMA_EXACT
#define KQ_FMA_EXACT(a, b, c) ((c) + (a) * (b))
#endif
static inline kvf kq_absf(kvf a)
{
    return (kvf)((kvi)a & 0x7fffffff);
}

/* kq_round4 / kq_clamp4 of kquants_impl.h, lane by lane. */
static inline kvf kq_roundv(kvf v)
{
    const kvf m = kq_splat(KQ_ROUND_MAGIC);
    return (v + m) - m;
}

static inline kvf kq_clampv(kvf v, kvf lo, kvf hi)
{
    return kq_minf(kq_maxf(v, lo), hi);
}

/* kq_roundv of a value already clamped to [+0, 63] (q4_K's codes, scales
 * and mins): there (v + 1.5 * 2^23) lies in [2^23, 2^24), where the float
 * unit is 1, so the magic addition rounds to the nearest integer, ties to
 * even (1.5 * 2^23 is even), and the subtraction is exact: rint(v), which
 * is one instruction where the ISA rounds in place (KQ_ROUND_NONNEG). The
 * clamp's max(v, +0) turns -0 into +0, so no result is -0 either way. */
#ifndef KQ_ROUND_NONNEG
#define KQ_ROUND_NONNEG(v) kq_roundv(v)
#endif
static inline kvf kq_round_nonneg(kvf v)
{
    return (kvf)KQ_ROUND_NONNEG(v);
}

/* The reference's four-lane sum: (l0 + l1) + (l2 + l3). */
static inline kvf kq_comb(const kvf *a)
{
    return (a[0] + a[1]) + (a[2] + a[3]);
}

/* Lanes of the unit's second super-block (i >= KQ_W / 2). */
static inline kvi kq_second_block_lanes(void)
{
    kvi m;
    for (int i = 0; i < KQ_W; i++)
        m[i] = i >= KQ_HALF ? -1 : 0;
    return m;
}

/* One value per lane from the unit's two super-blocks' values. */
static inline kvf kq_per_block(kvi second, float v0, float v1)
{
    return kq_self(second, kq_splat(v1), kq_splat(v0));
}

/* Lane and vector of sub-block j of super-block b. */
#define KQ_LANE(b, j) ((b)*KQ_HALF + (j) % KQ_HALF)
#define KQ_VEC(j) ((j) / KQ_HALF)

typedef float kv4f __attribute__((vector_size(16)));

typedef float kv8f __attribute__((vector_size(32)));

/* Copies the unit's super-blocks (xb[0], xb[1]; 256 floats each) into
 * sub-block lanes: xt[(v * sub + e) * KQ_W + i] = element e of lane i's
 * sub-block. Four sub-blocks of each super-block and four elements at a
 * time: the two 4 x 4 tiles in the halves of 8-float vectors, transposed
 * together, each half stored at its super-block's lanes. */
static inline void kq_transpose_in(const float *const xb[2], int sub, int nsub, float *xt)
{
    for (int j0 = 0; j0 < nsub; j0 += 4) {
        for (int e = 0; e < sub; e += 4) {
            kv8f r[4];
            for (int k = 0; k < 4; k++) {
                kv4f a, b;
                memcpy(&a, xb[0] + (j0 + k) * sub + e, sizeof a);
                memcpy(&b, xb[1] + (j0 + k) * sub + e, sizeof b);
                r[k] = __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7);
            }
            const kv8f t0 = __builtin_shufflevector(r[0], r[1], 0, 8, 1, 9, 4, 12, 5, 13);
            const kv8f t1 = __builtin_shufflevector(r[2], r[3], 0, 8, 1, 9, 4, 12, 5, 13);
            const kv8f t2 = __builtin_shufflevector(r[0], r[1], 2, 10, 3, 11, 6, 14, 7, 15);
            const kv8f t3 = __builtin_shufflevector(r[2], r[3], 2, 10, 3, 11, 6, 14, 7, 15);
            const kv8f c[4] = { __builtin_shufflevector(t0, t1, 0, 1, 8, 9, 4, 5, 12, 13),
                                __builtin_shufflevector(t0, t1, 2, 3, 10, 11, 6, 7, 14, 15),
                                __builtin_shufflevector(t2, t3, 0, 1, 8, 9, 4, 5, 12, 13),
                                __builtin_shufflevector(t2, t3, 2, 3, 10, 11, 6, 7, 14, 15) };
            /* c[k] = element e+k of sub-blocks j0..j0+3 of block 0, then of block 1 */
            for (int k = 0; k < 4; k++) {
                for (int b = 0; b < 2; b++) {
                    const kv4f h = b ? __builtin_shufflevector(c[k], c[k], 4, 5, 6, 7)
                                     : __builtin_shufflevector(c[k], c[k], 0, 1, 2, 3);
                    if (KQ_HALF >= 4) {
                        memcpy(xt + ((size_t)KQ_VEC(j0) * sub + e + k) * KQ_W + KQ_LANE(b, j0), &h,
                               sizeof h);
                    } else { /* KQ_W 4: sub-blocks j0, j0+1 and j0+2, j0+3 go to two vectors */
                        for (int q = 0; q < 4; q++)
                            xt[((size_t)KQ_VEC(j0 + q) * sub + e + k) * KQ_W + KQ_LANE(b, j0 + q)] =
                                h[q];
                    }
                }
            }
        }
    }
}

/* Adds x - x over a vector: 0 for finite lanes, NaN for a NaN or an
 * infinity, and one NaN makes the sum NaN for good. */
static inline kvf kq_probe(kvf probe, kvf x)
{
    return probe + (x - x);
}

/* Whether a probe saw a NaN or an infinity. */
static inline int kq_probe_hit(kvf probe)
{
    float s = 0.0f;
    for (int i = 0; i < KQ_W; i++)
        s += probe[i];
    return !(s == 0.0f);
}

static const float kq_zero_block[PN_QK_K];

/* ===================================================================== */
/* q4_K                                                                  */
/* ===================================================================== */

#define Q4F_SUB KQ_Q4K_SUB
#define Q4F_NSUB KQ_Q4K_NSUB
#define Q4F_NV (2 * Q4F_NSUB / KQ_W) /* vectors per unit of two super-blocks */

/* The reference's stage-1 trials (q4_K.c): steps range / (15 + f), low end
 * raised by u/4 of a step. */
static const float q4f_trial[9] = { -1.0f, -0.75f, -0.5f, -0.25f, 0.0f, 0.25f, 0.5f, 0.75f, 1.0f };

/* q4k_sums for every lane: code sums for codes round(clamp((x - lo) * inv)),
 * as floats (the reference's float sums, before it widens them). */
static inline void q4f_sums_f(const kvf *xt, kvf lo, kvf inv, kvf *sq, kvf *sqq, kvf *sxq)
{
    const kvf zero = kq_splat(0.0f), hi = kq_splat(15.0f);
    kvf aq[4] = { zero, zero, zero, zero }, aqq[4] = { zero, zero, zero, zero };
    kvf axq[4] = { zero, zero, zero, zero };
    for (int k = 0; k < Q4F_SUB / 4; k++) {
        for (int l = 0; l < 4; l++) {
            const kvf xe = xt[4 * k + l];
            const kvf c = kq_round_nonneg(kq_clampv((xe - lo) * inv, zero, hi));
            aq[l] = aq[l] + c;
            aqq[l] = KQ_FMA_EXACT(c, c, aqq[l]);
            axq[l] = axq[l] + xe * c;
        }
    }
    *sq = kq_comb(aq);
    *sqq = kq_comb(aqq);
    *sxq = kq_comb(axq);
}

/* The same, widened to double as the reference widens them. */
static inline void q4f_sums(const kvf *xt, kvf lo, kvf inv, kvd2 *sq, kvd2 *sqq, kvd2 *sxq)
{
    kvf fq, fqq, fxq;
    q4f_sums_f(xt, lo, inv, &fq, &fqq, &fxq);
    *sq = kq_widen(fq);
    *sqq = kq_widen(fqq);
    *sxq = kq_widen(fxq);
}

/* q4k_lsq for the lanes of one half: a, c (c <= 0) and the error of
 * w ~ a*q + c. */
static inline void q4f_lsq(kvdh sx, kvdh sxx, kvdh sxn, kvdh sq, kvdh sqq, kvdh sxq, kvdh *a_out,
                           kvdh *c_out, kvdh *err_out)
{
    /* sxn: sx / n, the same for every trial of a sub-block */
    const double n = Q4F_SUB;
    const kvdh zero = kq_splatd(0.0);
    kvdh det = n * sqq - sq * sq;
    kvlh ok = ~(det <= 0.0);
    kvdh a = (n * sxq - sq * sx) / det;
    kvdh c = (sx - a * sq) / n;
    kvlh m1 = c > 0.0;
    if (KQ_ANYD(m1)) { /* rare: every weight of a lane's sub-block above its fitted low end */
        c = kq_seld(m1, zero, c);
        a = kq_seld(m1, sxq / sqq, a);
    }
    kvlh m2 = a < 0.0;
    if (KQ_ANYD(m2)) {
        a = kq_seld(m2, zero, a);
        c = kq_seld(m2, kq_seld(sxn < 0.0, sxn, zero), c);
    }
    kvdh err = sxx + a * a * sqq + n * c * c - 2.0 * a * sxq - 2.0 * c * sx + 2.0 * a * c * sq;
    *a_out = a;
    *c_out = c;
    *err_out = kq_seld(ok, err, kq_splatd(INFINITY));
}

/* Stage 1 (q4k_fit_sub) for the lanes of one vector: a (step) and b (min,
 * subtracted) of each sub-block, and its sum of x in double. */
static inline void q4f_fit(const kvf *xt, kvf *a_out, kvf *b_out, kvd2 *sx_out, kvf *probe)
{
    kvf mn = xt[0], mx = xt[0];
    kvd2 sx = kq_splatd2(0.0), sxx = kq_splatd2(0.0);
    for (int e = 0; e < Q4F_SUB; e++) {
        const kvf xe = xt[e];
        *probe = kq_probe(*probe, xe);
        mn = kq_minf(xe, mn);
        mx = kq_maxf(xe, mx);
        const kvd2 xd = kq_widen(xe);
        for (int h = 0; h < 2; h++) {
            sx.h[h] = sx.h[h] + xd.h[h];
            sxx.h[h] = sxx.h[h] + xd.h[h] * xd.h[h];
        }
    }
    const kvf zero = kq_splat(0.0f);
    const kvf lo = kq_self(mn < zero, mn, zero);
    const kvi sloped = mx > lo;
    const kvf range = mx - lo;
    kvd2 sxn;
    for (int h = 0; h < 2; h++)
        sxn.h[h] = sx.h[h] / (double)Q4F_SUB;
    kvd2 best_a = kq_splatd2(0.0), best_c = best_a, best_err = kq_splatd2(INFINITY);
    /* the nine trial steps do not depend on u: divided once each. For u = 0
     * the low end is lo + 0/inv = lo + (+0) = lo exactly wherever inv is a
     * positive finite float (every sloped lane; the others are garbage no
     * select takes), so it skips the division. */
    kvf invs[9];
    for (int t = 0; t < 9; t++)
        invs[t] = (15.0f + q4f_trial[t]) / range;
    /* the code sums of all 27 trials first, then their fits and
     * comparisons in trial order: the fits of different trials do not
     * depend on each other, so their long chains (a division among them)
     * overlap instead of each waiting behind its own trial's sums */
    kvf fq[27], fqq[27], fxq[27];
    for (int u = 0; u < 3; u++) {
        for (int t = 0; t < 9; t++) {
            const kvf inv = invs[t];
            const kvf lou = u == 0 ? lo : lo + 0.25f * (float)u / inv;
            q4f_sums_f(xt, lou, inv, &fq[9 * u + t], &fqq[9 * u + t], &fxq[9 * u + t]);
        }
    }
    for (int u = 0; u < 3; u++) {
        for (int t = 0; t < 9; t++) {
            const kvd2 sq = kq_widen(fq[9 * u + t]), sqq = kq_widen(fqq[9 * u + t]);
            const kvd2 sxq = kq_widen(fxq[9 * u + t]);
            for (int h = 0; h < 2; h++) {
                kvdh a, c, err;
                q4f_lsq(sx.h[h], sxx.h[h], sxn.h[h], sq.h[h], sqq.h[h], sxq.h[h], &a, &c, &err);
                const kvlh upd = err < best_err.h[h];
                best_a.h[h] = kq_seld(upd, a, best_a.h[h]);
                best_c.h[h] = kq_seld(upd, c, best_c.h[h]);
                best_err.h[h] = kq_seld(upd, err, best_err.h[h]);
            }
        }
    }
    const kvi found = kq_mask32(best_err.h[0] < INFINITY, best_err.h[1] < INFINITY);
    { /* one more round-and-refit pass where best.a > 0 */
        kvd2 sq, sqq, sxq, inv_a;
        for (int h = 0; h < 2; h++)
            inv_a.h[h] = 1.0 / best_a.h[h];
        q4f_sums(xt, kq_narrow(best_c), kq_narrow(inv_a), &sq, &sqq, &sxq);
        for (int h = 0; h < 2; h++) {
            kvdh a, c, err;
            q4f_lsq(sx.h[h], sxx.h[h], sxn.h[h], sq.h[h], sqq.h[h], sxq.h[h], &a, &c, &err);
            const kvlh upd = (best_a.h[h] > 0.0) & (err < best_err.h[h]);
            best_a.h[h] = kq_seld(upd, a, best_a.h[h]);
            best_c.h[h] = kq_seld(upd, c, best_c.h[h]);
        }
    }
    kvd2 neg_c;
    for (int h = 0; h < 2; h++)
        neg_c.h[h] = -best_c.h[h];
    kvf a_f = kq_self(found, kq_narrow(best_a), range / 15.0f);
    kvf b_f = kq_self(found, kq_narrow(neg_c), -lo);
    *a_out = kq_self(sloped, a_f, zero);
    *b_out = kq_self(sloped, b_f, -lo);
    *sx_out = sx;
}

/* q4k_error for every lane. */
static inline kvf q4f_error(const kvf *xt, kvf step, kvf off, kvf inv)
{
    const kvf zero = kq_splat(0.0f), hi = kq_splat(15.0f);
    kvf acc[4] = { zero, zero, zero, zero };
    for (int k = 0; k < Q4F_SUB / 4; k++) {
        for (int l = 0; l < 4; l++) {
            const kvf xe = xt[4 * k + l];
            const kvf c = kq_round_nonneg(kq_clampv((xe + off) * inv, zero, hi));
            const kvf diff = xe - (step * c - off);
            acc[l] = acc[l] + diff * diff;
        }
    }
    return kq_comb(acc);
}

static inline kvf q4f_inv(kvf step)
{
    return kq_self(step > 0.0f, 1.0f / step, kq_splat(0.0f));
}

/* One state of the unit's two super-blocks (the reference's q4k_state, per
 * lane): integer scale and min and the lane's error; the codes are a
 * function of these and are recomputed where needed. */
typedef struct q4f_state {
    kvf sc[Q4F_NV], m[Q4F_NV], err[Q4F_NV];
    uint16_t hd[2], hm[2];
    float block_err[2];
} q4f_state;

/* The lanes' d and dmin of a state. */
static inline void q4f_scales(const q4f_state *s, kvi second, kvf *d, kvf *dm)
{
    *d = kq_per_block(second, pn_fp16_to_float(s->hd[0]), pn_fp16_to_float(s->hd[1]));
    *dm = kq_per_block(second, pn_fp16_to_float(s->hm[0]), pn_fp16_to_float(s->hm[1]));
}

/* Stage 3 (q4k_integers) on vector v, for the lanes' d and dmin. */
static inline void q4f_integers_vec(const kvf *xt, kvf a, kvf b, kvf d, kvf dm, kvf *sc_out,
                                    kvf *m_out, kvf *err_out)
{
    const kvf zero = kq_splat(0.0f), c63 = kq_splat(63.0f), one = kq_splat(1.0f);
    const kvf sc0 = kq_self(d > 0.0f, kq_round_nonneg(kq_clampv(a / d, zero, c63)), zero);
    const kvf m0 = kq_self(dm > 0.0f, kq_round_nonneg(kq_clampv(b / dm, zero, c63)), zero);
    const kvi dz = d == 0.0f, dmz = dm == 0.0f;
    const kvf sc_lo = kq_self(dz, zero, kq_self(sc0 > 0.0f, sc0 - one, zero));
    const kvf sc_hi = kq_self(dz, zero, kq_self(sc0 < 63.0f, sc0 + one, c63));
    const kvf m_lo = kq_self(dmz, zero, kq_self(m0 > 0.0f, m0 - one, zero));
    const kvf m_hi = kq_self(dmz, zero, kq_self(m0 < 63.0f, m0 + one, c63));
    kvf best = kq_splat(INFINITY), bsc = sc_lo, bm = m_lo;
    for (int ds = -1; ds <= 1; ds++) {
        const kvf sc = sc0 + (float)ds;
        const kvi vs = (sc >= sc_lo) & (sc <= sc_hi);
        const kvf step = d * sc;
        const kvf inv = q4f_inv(step);
        for (int dmm = -1; dmm <= 1; dmm++) {
            const kvf m = m0 + (float)dmm;
            const kvi valid = vs & (m >= m_lo) & (m <= m_hi);
            const kvf e = q4f_error(xt, step, dm * m, inv);
            const kvi upd = valid & (e < best);
            best = kq_self(upd, e, best);
            bsc = kq_self(upd, sc, bsc);
            bm = kq_self(upd, m, bm);
        }
    }
    *sc_out = bsc;
    *m_out = bm;
    *err_out = best;
}

/* Stage 3 for the whole unit; the super-blocks' errors are the lanes'
 * errors added in sub-block order, as the reference adds them. */
static inline void q4f_integers(const kvf (*xt)[Q4F_SUB], const kvf *a, const kvf *b, kvi second,
                                q4f_state *s)
{
    kvf d, dm;
    q4f_scales(s, second, &d, &dm);
    for (int v = 0; v < Q4F_NV; v++)
        q4f_integers_vec(xt[v], a[v], b[v], d, dm, &s->sc[v], &s->m[v], &s->err[v]);
    for (int bl = 0; bl < 2; bl++) {
        float err = 0.0f;
        for (int j = 0; j < Q4F_NSUB; j++)
            err += s->err[KQ_VEC(j)][KQ_LANE(bl, j)];
        s->block_err[bl] = err;
    }
}

/* The per-lane code sums stage 4 needs, for the codes of state s (q4k_codes:
 * round(clamp((x + off) * inv)) with the lane's step and offset): sum q and
 * sum q^2 (integers below 2^24, exact in float in any order) and sum x*q in
 * double in element order. xd is x widened. */
static inline void q4f_code_sums(const kvf (*xt)[Q4F_SUB], const kvd2 (*xd)[Q4F_SUB],
                                 const q4f_state *s, kvi second, kvd2 *txa, kvd2 *ta, kvd2 *taa)
{
    kvf d, dm;
    q4f_scales(s, second, &d, &dm);
    const kvf zero = kq_splat(0.0f), hi = kq_splat(15.0f);
    for (int v = 0; v < Q4F_NV; v++) {
        const kvf step = d * s->sc[v], off = dm * s->m[v], inv = q4f_inv(step);
        kvf fa = zero, faa = zero;
        kvd2 xa = kq_splatd2(0.0);
        for (int e = 0; e < Q4F_SUB; e++) {
            const kvf c = kq_round_nonneg(kq_clampv((xt[v][e] + off) * inv, zero, hi));
            fa = fa + c;
            faa = KQ_FMA_EXACT(c, c, faa);
            const kvd2 qa = kq_widen(c);
            for (int h = 0; h < 2; h++)
                xa.h[h] = xa.h[h] + xd[v][e].h[h] * qa.h[h];
        }
        txa[v] = xa;
        ta[v] = kq_widen(fa);
        taa[v] = kq_widen(faa);
    }
}

/* Stage 4 (q4k_refit) for super-block bl of state s: its sums over the
 * sub-blocks in the reference's order, solved by the shared helper. txa is
 * the per-lane sum of x*q in element order; tx the stage-1 sum of x. */
static inline int q4f_refit(const kvd2 *txa, const kvd2 *ta, const kvd2 *taa, const kvd2 *tx,
                            const q4f_state *s, int bl, uint16_t *hd, uint16_t *hm)
{
    double saa = 0, sab = 0, sbb = 0, sxa = 0, sxb = 0;
    for (int j = 0; j < Q4F_NSUB; j++) {
        const int v = KQ_VEC(j), i = KQ_LANE(bl, j);
        double sc = (double)s->sc[v][i], m = (double)s->m[v][i];
        saa += sc * sc * kq_lane(&taa[v], i);
        sab += sc * m * kq_lane(&ta[v], i);
        sbb += m * m * Q4F_SUB;
        sxa += sc * kq_lane(&txa[v], i);
        sxb += m * kq_lane(&tx[v], i);
    }
    return kq_q4k_solve(saa, sab, sbb, sxa, sxb, s->hm[bl], hd, hm);
}

static inline void q4f_copy_block(q4f_state *dst, const q4f_state *src, kvi lanes, int bl)
{
    for (int v = 0; v < Q4F_NV; v++) {
        dst->sc[v] = kq_self(lanes, src->sc[v], dst->sc[v]);
        dst->m[v] = kq_self(lanes, src->m[v], dst->m[v]);
        dst->err[v] = kq_self(lanes, src->err[v], dst->err[v]);
    }
    dst->hd[bl] = src->hd[bl];
    dst->hm[bl] = src->hm[bl];
    dst->block_err[bl] = src->block_err[bl];
}

/* The low byte of each int32 lane. */
typedef uint8_t kvb __attribute__((vector_size(KQ_W)));
typedef uint8_t kvb4 __attribute__((vector_size(4 * KQ_W)));
#if KQ_W == 4
#define KQ_IDX_BYTES 0, 4, 8, 12
#elif KQ_W == 8
#define KQ_IDX_BYTES 0, 4, 8, 12, 16, 20, 24, 28
#else
#define KQ_IDX_BYTES 0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60
#endif
static inline kvb kq_low_bytes(kvi v)
{
    const kvb4 b = (kvb4)v;
    return __builtin_shufflevector(b, b, KQ_IDX_BYTES);
}

/* Codes 0..255 (integer-valued floats) of one sub-block in element order,
 * stored as bytes at q. */
static inline void kq_store_codes(kvf c, uint8_t *q)
{
    const kvb cb = kq_low_bytes(__builtin_convertvector(c, kvi));
    memcpy(q, &cb, sizeof cb);
}

typedef uint8_t kvb32 __attribute__((vector_size(32)));

/* q4k_codes of super-block bl in element order, then kq_q4k_pack with 32
 * bytes at a time: qs[32c + l] = q[64c + l] | q[64c + 32 + l] << 4. With dq
 * (not NULL): the 256 decoded floats as well, with the decoder's operations
 * (d1 * q - m1, d1 = d * sc and m1 = dmin * m: the step and offset here). */
static inline void q4f_pack(const float *x, const q4f_state *s, int bl, uint8_t *blk, float *dq)
{
    const float d = pn_fp16_to_float(s->hd[bl]), dm = pn_fp16_to_float(s->hm[bl]);
    const kvf zero = kq_splat(0.0f), hi = kq_splat(15.0f);
    uint8_t q[PN_QK_K] __attribute__((aligned(32)));
    uint8_t *scales = blk + offsetof(block_q4_K, scales), *qs = blk + offsetof(block_q4_K, qs);
    memset(scales, 0, sizeof(((block_q4_K *)0)->scales));
    for (int j = 0; j < Q4F_NSUB; j++) {
        const int v = KQ_VEC(j), i = KQ_LANE(bl, j);
        const float scj = s->sc[v][i], mj = s->m[v][i];
        const float step = d * scj, off = dm * mj, inv = step > 0.0f ? 1.0f / step : 0.0f;
        const kvf voff = kq_splat(off), vinv = kq_splat(inv);
        for (int e = 0; e < Q4F_SUB; e += KQ_W) {
            kvf xv;
            memcpy(&xv, x + j * Q4F_SUB + e, sizeof xv);
            const kvf c = kq_round_nonneg(kq_clampv((xv + voff) * vinv, zero, hi));
            kq_store_codes(c, q + j * Q4F_SUB + e);
            if (dq) {
                const kvf y = kq_splat(step) * c - voff;
                memcpy(dq + j * Q4F_SUB + e, &y, sizeof y);
            }
        }
        pn_q4_K_set_scale_min(scales, j, (int)scj, (int)mj);
    }
    pn_store_u16le(blk + offsetof(block_q4_K, d), s->hd[bl]);
    pn_store_u16le(blk + offsetof(block_q4_K, dmin), s->hm[bl]);
    for (int c = 0; c < 4; c++) {
        kvb32 lo, hi4;
        memcpy(&lo, q + 64 * c, sizeof lo);
        memcpy(&hi4, q + 64 * c + 32, sizeof hi4);
        const kvb32 packed = lo | (kvb32)(hi4 << 4);
        memcpy(qs + 32 * c, &packed, sizeof packed);
    }
}

/* One unit: super-blocks xb[0] and xb[1] (xb[1] may be the zero padding,
 * nreal = 1). Returns PN_OK with the blocks written, PN_ERR_NONFINITE for a
 * NaN or an infinity anywhere in the unit, or PN_ERR_SCALE_OVERFLOW when a
 * real super-block's scale overflows (nothing useful written then). */
static pn_status q4f_unit(const float *const xb[2], int nreal, uint8_t *out, float *dq)
{
    kvf xt[Q4F_NV][Q4F_SUB];
    kq_transpose_in(xb, Q4F_SUB, Q4F_NSUB, (float *)xt);
    const kvi second = kq_second_block_lanes();
    kvf a[Q4F_NV], b[Q4F_NV], probe = kq_splat(0.0f);
    kvd2 tx[Q4F_NV];
    for (int v = 0; v < Q4F_NV; v++)
        q4f_fit(xt[v], &a[v], &b[v], &tx[v], &probe);
    if (kq_probe_hit(probe)) /* stage 1 ran on a NaN or an infinity: garbage, dropped */
        return PN_ERR_NONFINITE;

    q4f_state cur, best;
    int active[2];
    for (int bl = 0; bl < 2; bl++) {
        float amax = 0.0f, bmax = 0.0f;
        for (int j = 0; j < Q4F_NSUB; j++) {
            const float aj = a[KQ_VEC(j)][KQ_LANE(bl, j)], bj = b[KQ_VEC(j)][KQ_LANE(bl, j)];
            amax = aj > amax ? aj : amax;
            bmax = bj > bmax ? bj : bmax;
        }
        cur.hd[bl] = kq_q4k_super_scale(amax);
        cur.hm[bl] = kq_q4k_super_scale(bmax);
        if (bl < nreal && ((cur.hd[bl] & 0x7c00u) == 0x7c00u || (cur.hm[bl] & 0x7c00u) == 0x7c00u))
            return PN_ERR_SCALE_OVERFLOW;
        active[bl] = bl < nreal;
    }
    q4f_integers(xt, a, b, second, &cur);
    best = cur;
    kvd2 xd[Q4F_NV][Q4F_SUB];
    for (int v = 0; v < Q4F_NV; v++)
        for (int e = 0; e < Q4F_SUB; e++)
            xd[v][e] = kq_widen(xt[v][e]);
    for (int r = 1; r < 3; r++) {
        kvd2 txa[Q4F_NV], ta[Q4F_NV], taa[Q4F_NV];
        q4f_code_sums(xt, xd, &best, second, txa, ta, taa);
        for (int bl = 0; bl < 2; bl++) {
            if (!active[bl])
                continue;
            uint16_t hd, hm;
            if (!q4f_refit(txa, ta, taa, tx, &best, bl, &hd, &hm) ||
                (hd == best.hd[bl] && hm == best.hm[bl])) {
                active[bl] = 0;
                continue;
            }
            cur.hd[bl] = hd;
            cur.hm[bl] = hm;
        }
        if (!active[0] && !active[1])
            break;
        q4f_integers(xt, a, b, second, &cur);
        for (int bl = 0; bl < 2; bl++) {
            if (!active[bl])
                continue;
            if (!(cur.block_err[bl] < best.block_err[bl])) {
                active[bl] = 0;
                continue;
            }
            q4f_copy_block(&best, &cur, bl ? second : ~second, bl);
        }
    }
    for (int bl = 0; bl < nreal; bl++)
        q4f_pack(xb[bl], &best, bl, out + (size_t)bl * sizeof(block_q4_K),
                 dq ? dq + bl * PN_QK_K : NULL);
    return PN_OK;
}

/* ===================================================================== */
/* q3_K                                                                  */
/* ===================================================================== */

#define Q3F_SUB KQ_Q3K_SUB
#define Q3F_NSUB KQ_Q3K_NSUB
#define Q3F_NV (2 * Q3F_NSUB / KQ_W)

static const float q3f_trial[12] = { -4.4f, -4.2f, -4.0f, -3.8f, -3.6f, -3.4f,
                                     -3.2f, -3.0f, 3.4f,  3.2f,  3.0f,  2.8f };

/* Stage 1 (q3k_fit_sub) for every lane of the unit: the element sums of
 * all trials first, then the trials' comparisons in trial order (the
 * comparison chains of the unit's vectors and halves overlap). */
static inline int q3f_fit(const kvf (*xt)[Q3F_SUB], kvf *s_out)
{
    const kvf zero = kq_splat(0.0f), lo = kq_splat(-4.0f), hi = kq_splat(3.0f);
    kvf am[Q3F_NV], xm[Q3F_NV], sxc_f[Q3F_NV][12], scc_f[Q3F_NV][12], probe = zero;
    for (int v = 0; v < Q3F_NV; v++) {
        kvf xmv = zero, amv = zero;
        for (int e = 0; e < Q3F_SUB; e++) {
            probe = kq_probe(probe, xt[v][e]);
            const kvf a = kq_absf(xt[v][e]);
            const kvi upd = a > amv;
            amv = kq_self(upd, a, amv);
            xmv = kq_self(upd, xt[v][e], xmv);
        }
        am[v] = amv;
        xm[v] = xmv;
        const kvf ixm = 1.0f / xmv;
        for (int t = 0; t < 12; t++) {
            const kvf inv = q3f_trial[t] * ixm;
            kvf axc[4] = { zero, zero, zero, zero }, acc[4] = { zero, zero, zero, zero };
            for (int k = 0; k < Q3F_SUB / 4; k++) {
                for (int l = 0; l < 4; l++) {
                    const kvf xe = xt[v][4 * k + l];
                    const kvf c = kq_roundv(kq_clampv(xe * inv, lo, hi));
                    axc[l] = axc[l] + xe * c;
                    acc[l] = KQ_FMA_EXACT(c, c, acc[l]);
                }
            }
            sxc_f[v][t] = kq_comb(axc);
            scc_f[v][t] = kq_comb(acc);
        }
    }
    if (kq_probe_hit(probe)) /* a NaN or an infinity: the unit is refused */
        return 1;
    kvd2 best_num[Q3F_NV], best_den[Q3F_NV], best_sxc[Q3F_NV];
    for (int v = 0; v < Q3F_NV; v++) {
        best_num[v] = kq_splatd2(0.0);
        best_den[v] = kq_splatd2(1.0);
        best_sxc[v] = best_num[v];
    }
    for (int t = 0; t < 12; t++) {
        for (int v = 0; v < Q3F_NV; v++) {
            const kvd2 sxc = kq_widen(sxc_f[v][t]), scc = kq_widen(scc_f[v][t]);
            for (int h = 0; h < 2; h++) {
                /* The reference skips a trial with scc == 0; this test needs
                 * no such case: scc == 0 means every code is 0, so sxc = +-0,
                 * the left side is +0 and the right side +0 or NaN (best_num
                 * may be infinite), and +0 > either is false. */
                const kvdh x2 = sxc.h[h] * sxc.h[h];
                const kvlh upd = x2 * best_den[v].h[h] > best_num[v].h[h] * scc.h[h];
                best_num[v].h[h] = kq_seld(upd, x2, best_num[v].h[h]);
                best_den[v].h[h] = kq_seld(upd, scc.h[h], best_den[v].h[h]);
                best_sxc[v].h[h] = kq_seld(upd, sxc.h[h], best_sxc[v].h[h]);
            }
        }
    }
    for (int v = 0; v < Q3F_NV; v++) {
        /* best_s = sxc / scc of the winner (the reference divides as it
         * goes: the same operands, the same quotient), else xm / -4. A lane
         * has a winner iff best_num > 0: a taken trial has sxc^2 * den > 0
         * (a NaN fails the test and is never taken), the start is 0. */
        const kvd2 s0 = kq_widen(xm[v] / -4.0f);
        kvd2 sv;
        for (int h = 0; h < 2; h++)
            sv.h[h] = kq_seld(best_num[v].h[h] > 0.0, best_sxc[v].h[h] / best_den[v].h[h], s0.h[h]);
        s_out[v] = kq_self(am[v] == 0.0f, zero, kq_narrow(sv));
    }
    return 0;
}

static inline kvf q3f_inv(kvf t)
{
    return kq_self(t != 0.0f, 1.0f / t, kq_splat(0.0f));
}

/* q3k_error for every lane. */
static inline kvf q3f_error(const kvf *xt, kvf t)
{
    const kvf inv = q3f_inv(t), zero = kq_splat(0.0f);
    const kvf lo = kq_splat(-4.0f), hi = kq_splat(3.0f);
    kvf acc[4] = { zero, zero, zero, zero };
    for (int k = 0; k < Q3F_SUB / 4; k++) {
        for (int l = 0; l < 4; l++) {
            const kvf xe = xt[4 * k + l];
            const kvf c = kq_roundv(kq_clampv(xe * inv, lo, hi));
            const kvf diff = xe - t * c;
            acc[l] = acc[l] + diff * diff;
        }
    }
    return kq_comb(acc);
}

/* Stage 3 (q3k_integers) on one vector: the best k per lane. */
static inline kvf q3f_integers_vec(const kvf *xt, kvf s, kvf d)
{
    const kvf zero = kq_splat(0.0f), one = kq_splat(1.0f);
    const kvf kf = kq_clampv(s / d, kq_splat(-32.0f), kq_splat(31.0f));
    kvf k_lo = kq_roundv(kf);
    k_lo = kq_self(k_lo > kf, k_lo - one, k_lo); /* floor */
    kvf k_hi = kq_self(k_lo < 31.0f, k_lo + one, kq_splat(31.0f));
    const kvi dz = d == 0.0f;
    k_lo = kq_self(dz, zero, k_lo);
    k_hi = kq_self(dz, zero, k_hi);
    kvf best = kq_splat(INFINITY), bk = k_lo;
    for (int slot = 0; slot < 2; slot++) {
        const kvf k = k_lo + (float)slot;
        const kvi valid = k <= k_hi;
        const kvf e = q3f_error(xt, d * k);
        const kvi upd = valid & (e < best);
        best = kq_self(upd, e, best);
        bk = kq_self(upd, k, bk);
    }
    return bk;
}

/* q3k_codes of one super-block in element order (codes + 4, 0..7), each
 * sub-block with the float scale t = d * k its lane scored. With dq (not
 * NULL): the decoded floats as well, dl * code with dl = d * k, the
 * decoder's operations. */
static inline void q3f_codes(const float *x, float d, const int *k, uint8_t *L, float *dq)
{
    const kvf lo = kq_splat(-4.0f), hi = kq_splat(3.0f);
    for (int j = 0; j < Q3F_NSUB; j++) {
        const float t = d * (float)k[j];
        const kvf inv = kq_splat(t != 0.0f ? 1.0f / t : 0.0f);
        for (int e = 0; e < Q3F_SUB; e += KQ_W) {
            kvf xv;
            memcpy(&xv, x + j * Q3F_SUB + e, sizeof xv);
            const kvf c = kq_roundv(kq_clampv(xv * inv, lo, hi));
            kq_store_codes(c + 4.0f, L + j * Q3F_SUB + e);
            if (dq) {
                const kvf y = kq_splat(t) * c;
                memcpy(dq + j * Q3F_SUB + e, &y, sizeof y);
            }
        }
    }
}

/* kq_q3k_pack with 32 bytes at a time: weight e = 32p + l, L = code + 4:
 * bit p of hmask[l] is L >> 2, bits 2(p%4) of qs[32(p/4) + l] are L & 3. */
static inline void q3f_pack(uint16_t hd, const int *k, const uint8_t *L, uint8_t *blk)
{
    kvb32 hm = { 0 }, lo0 = { 0 }, lo1 = { 0 };
    for (int p = 0; p < 8; p++) {
        kvb32 v;
        memcpy(&v, L + 32 * p, sizeof v);
        hm |= (kvb32)((v >> 2) << p);
        if (p < 4)
            lo0 |= (kvb32)((v & 3) << (2 * p));
        else
            lo1 |= (kvb32)((v & 3) << (2 * (p - 4)));
    }
    memcpy(blk + offsetof(block_q3_K, hmask), &hm, sizeof hm);
    memcpy(blk + offsetof(block_q3_K, qs), &lo0, sizeof lo0);
    memcpy(blk + offsetof(block_q3_K, qs) + 32, &lo1, sizeof lo1);
    /* pn_q3_K_set_scale into zeroed bytes: the low four bits of u_j in
     * scales[j % 8] at 4*(j/8), the high two in scales[8 + j % 4] at 2*(j/4) */
    uint8_t *scales = blk + offsetof(block_q3_K, scales);
    memset(scales, 0, sizeof(((block_q3_K *)0)->scales));
    for (int j = 0; j < Q3F_NSUB; j++) {
        const unsigned u = (unsigned)(k[j] + 32);
        scales[j % 8] |= (uint8_t)((u & 15) << (4 * (j / 8)));
        scales[8 + j % 4] |= (uint8_t)(((u >> 4) & 3) << (2 * (j / 4)));
    }
    pn_store_u16le(blk + offsetof(block_q3_K, d), hd);
}

static pn_status q3f_unit(const float *const xb[2], int nreal, uint8_t *out, float *dq)
{
    kvf xt[Q3F_NV][Q3F_SUB];
    kq_transpose_in(xb, Q3F_SUB, Q3F_NSUB, (float *)xt);
    const kvi second = kq_second_block_lanes();
    kvf s[Q3F_NV];
    if (q3f_fit(xt, s))
        return PN_ERR_NONFINITE;
    uint16_t hd[2];
    for (int bl = 0; bl < 2; bl++) {
        float smax = 0.0f;
        for (int j = 0; j < Q3F_NSUB; j++) {
            const float sj = s[KQ_VEC(j)][KQ_LANE(bl, j)];
            if (fabsf(sj) > fabsf(smax))
                smax = sj;
        }
        hd[bl] = kq_q3k_super_scale(smax);
        if (bl < nreal && (hd[bl] & 0x7c00u) == 0x7c00u)
            return PN_ERR_SCALE_OVERFLOW;
    }
    const kvf d = kq_per_block(second, pn_fp16_to_float(hd[0]), pn_fp16_to_float(hd[1]));
    kvf k[Q3F_NV];
    for (int v = 0; v < Q3F_NV; v++)
        k[v] = q3f_integers_vec(xt[v], s[v], d);
    for (int bl = 0; bl < nreal; bl++) {
        int kb[Q3F_NSUB];
        uint8_t L[PN_QK_K] __attribute__((aligned(32)));
        for (int j = 0; j < Q3F_NSUB; j++)
            kb[j] = (int)k[KQ_VEC(j)][KQ_LANE(bl, j)];
        q3f_codes(xb[bl], pn_fp16_to_float(hd[bl]), kb, L, dq ? dq + bl * PN_QK_K : NULL);
        q3f_pack(hd[bl], kb, L, out + (size_t)bl * sizeof(block_q3_K));
    }
    return PN_OK;
}

/* ===================================================================== */
/* rows                                                                  */
/* ===================================================================== */

typedef double kv4d __attribute__((vector_size(32)));

#ifndef KQ_CVT4
#define KQ_CVT4(v) __builtin_convertvector(v, kv4d)
#endif

/* Eight blocks at a time, four elements at a time: each block's four terms
 * in a vector, the 4 x 4 tiles transposed so that a lane is a block, and
 * each lane adds its block's terms in element order (the eight dependent
 * chains overlap). */
static void kq_block_sums(const float *x, const float *y, int64_t nb, int bw, double *err,
                          double *norm)
{
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
        const int cnt = nb - b0 < 8 ? (int)(nb - b0) : 8;
        const float *xs[8], *ys[8];
        for (int k = 0; k < 8; k++) {
            /* missing lanes repeat the last block; their sums are dropped */
            const int64_t b = b0 + (k < cnt ? k : cnt - 1);
            xs[k] = x + b * bw;
            ys[k] = y + b * bw;
        }
        kv4d E[2] = { { 0 }, { 0 } }, N[2] = { { 0 }, { 0 } };
        for (int i = 0; i < bw; i += 4) {
            kv4d D[8], W[8];
            for (int k = 0; k < 8; k++) {
                kv4f xf, yf;
                memcpy(&xf, xs[k] + i, sizeof xf);
                memcpy(&yf, ys[k] + i, sizeof yf);
                const kv4d xv = KQ_CVT4(xf), yv = KQ_CVT4(yf), dd = xv - yv;
                D[k] = dd * dd;
                W[k] = xv * xv;
            }
            for (int h = 0; h < 2; h++) {
                const kv4d *d = D + 4 * h, *w = W + 4 * h;
                const kv4d d0 = __builtin_shufflevector(d[0], d[1], 0, 4, 2, 6);
                const kv4d d1 = __builtin_shufflevector(d[0], d[1], 1, 5, 3, 7);
                const kv4d d2 = __builtin_shufflevector(d[2], d[3], 0, 4, 2, 6);
                const kv4d d3 = __builtin_shufflevector(d[2], d[3], 1, 5, 3, 7);
                const kv4d w0 = __builtin_shufflevector(w[0], w[1], 0, 4, 2, 6);
                const kv4d w1 = __builtin_shufflevector(w[0], w[1], 1, 5, 3, 7);
                const kv4d w2 = __builtin_shufflevector(w[2], w[3], 0, 4, 2, 6);
                const kv4d w3 = __builtin_shufflevector(w[2], w[3], 1, 5, 3, 7);
                /* element i, i+1, i+2, i+3 of blocks 4h..4h+3, in that order */
                E[h] = E[h] + __builtin_shufflevector(d0, d2, 0, 1, 4, 5);
                N[h] = N[h] + __builtin_shufflevector(w0, w2, 0, 1, 4, 5);
                E[h] = E[h] + __builtin_shufflevector(d1, d3, 0, 1, 4, 5);
                N[h] = N[h] + __builtin_shufflevector(w1, w3, 0, 1, 4, 5);
                E[h] = E[h] + __builtin_shufflevector(d0, d2, 2, 3, 6, 7);
                N[h] = N[h] + __builtin_shufflevector(w0, w2, 2, 3, 6, 7);
                E[h] = E[h] + __builtin_shufflevector(d1, d3, 2, 3, 6, 7);
                N[h] = N[h] + __builtin_shufflevector(w1, w3, 2, 3, 6, 7);
            }
        }
        for (int k = 0; k < cnt; k++) {
            err[b0 + k] = E[k / 4][k % 4];
            norm[b0 + k] = N[k / 4][k % 4];
        }
    }
}

typedef pn_status (*kq_unit_fn)(const float *const xb[2], int nreal, uint8_t *out, float *dq);
typedef pn_status (*kq_ref_fn)(const float *x, int64_t n, uint8_t *out, int64_t *bad_col);
typedef void (*kq_dec_fn)(const uint8_t *in, float *y, int64_t n);

/* The row loop shared by both types: units of two super-blocks in order; a
 * unit with a non-finite weight or an overflowing scale goes to the
 * reference, which gives the status and column. With sums, the units leave
 * their decoded floats in a buffer of eight super-blocks, summed when full. */
static inline pn_status kq_row(kq_unit_fn unit, kq_ref_fn ref, kq_dec_fn dec, size_t block_bytes,
                               const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                               double *blk_err, double *blk_norm)
{
    const int64_t nb = n / PN_QK_K;
    const int sums = blk_err && blk_norm;
    float dq[8 * PN_QK_K];
    for (int64_t b0 = 0; b0 < nb; b0 += 2) {
        const int nreal = nb - b0 >= 2 ? 2 : 1;
        const float *xb[2] = { x + b0 * PN_QK_K,
                               nreal == 2 ? x + (b0 + 1) * PN_QK_K : kq_zero_block };
        float *dqu = sums ? dq + (b0 % 8) * PN_QK_K : NULL;
        uint8_t *o = out + (size_t)b0 * block_bytes;
        pn_status st = unit(xb, nreal, o, dqu);
        if (st != PN_OK) {
            int64_t bad = -1;
            st = ref(xb[0], (int64_t)nreal * PN_QK_K, o, &bad);
            if (st != PN_OK) {
                if (bad_col)
                    *bad_col = b0 * PN_QK_K + bad;
                return st;
            }
            if (dqu)
                dec(o, dqu, (int64_t)nreal * PN_QK_K);
        }
        const int64_t first = b0 - b0 % 8;
        if (sums && (b0 + nreal == nb || (b0 + 2) % 8 == 0))
            kq_block_sums(x + first * PN_QK_K, dq, b0 + nreal - first, PN_QK_K, blk_err + first,
                          blk_norm + first);
    }
    return PN_OK;
}

pn_status KQ_FN(pn_kq_q4_K_row)(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                                double *blk_err, double *blk_norm)
{
    return kq_row(q4f_unit, pn_quantize_row_q4_K_ref, pn_dequantize_row_q4_K, sizeof(block_q4_K), x,
                  n, out, bad_col, blk_err, blk_norm);
}

pn_status KQ_FN(pn_kq_q3_K_row)(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                                double *blk_err, double *blk_norm)
{
    return kq_row(q3f_unit, pn_quantize_row_q3_K_ref, pn_dequantize_row_q3_K, sizeof(block_q3_K), x,
                  n, out, bad_col, blk_err, blk_norm);
}
