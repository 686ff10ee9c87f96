/* pn_fast_internal.h - what the fast PN quantizers (pn_fast*.c) share.
 *
 * Not a public header: only quant/pn_fast*.c include it.
 *
 * Why the fast paths give the reference's bytes
 * ---------------------------------------------
 * Everything the reference computes is reproduced with the same double
 * operations in the same order (t, the error terms, the running error sum per
 * candidate in element order, the err <= best scan in candidate order), with
 * two replacements that provably change no result:
 *
 * 1. fp16(t) is computed as (|t| + M) - M with M = 2^(E+42), 2^E the leading
 *    power of two of |t| (at least 2^-14): the sum's last bit weighs
 *    2^(E-10), the half's unit at that binade (2^-24 below 2^-14), so the
 *    addition performs the one correctly rounded, ties-to-even rounding and
 *    the subtraction is exact (see pn_fast_fp16_value).
 *
 * 2. In the error sums, the code k = clamp(rint(w/s), -z, z-1) comes from
 *    q' = w * r with r = fl(1/s) instead of q = fl(w/s). Let x = w/s exactly.
 *    The clamped code only changes at the half-way points M = j + 1/2,
 *    -z <= j <= z-2. q' = x(1+d1)(1+d2) with |di| <= 2^-53, so
 *    |q' - x| < 2^-51 |x| (no double underflow: |s| >= 2^-24, |w| >= 2^-149).
 *    - If x is not one of those M: either |x - M| >= 2^-26 for all of them,
 *      or x is near some M, so |w| >= (1/2 - 2^-26)|s| and w's exponent is at
 *      least s's minus 2; w - M*s is then a non-zero multiple of ulp(w) (M*s
 *      is a multiple of 2^(es-11), coarser), so |x - M| >= ulp(w)/|s|
 *      > 2^(es-25) / 2^(es+1) = 2^-26 anyway. |q' - x| < 2^-51 |x| stays
 *      below 2^-26 unless |x| > 2^25, where x and q' both lie beyond every
 *      M. So q' and x are on the same side of every M: the same code.
 *    - If x is exactly an M, q' may round to either neighbour j or j+1 (not
 *      always to the even one). Both are inside [-z, z-1], and both give
 *      diff = w - s*k = +-s/2 exactly, so diff*diff and the running sum are
 *      the same doubles. The tie-break does decide the winner's codes: those
 *      are computed with the reference's exact division w / s.
 *    Clamping q to [-z, z-1] before rint equals clamping after it (integer
 *    bounds, monotone rounding), and rint of a value in [-8, 7] may be done by
 *    adding and subtracting 1.5 * 2^52 (ties to even in the default mode).
 *    The sign of a zero k may differ from the reference's n - z: it changes
 *    neither the term (w - (+-0) = w, and 0 - (+-0) squares to +0) nor the
 *    code.
 *
 * 3. The AVX2 and AVX-512 paths do not sum every candidate in double. They
 *    score all candidates in float (twice the lanes), then rescore in double,
 *    with 1 and 2 above, only the candidates whose float score cannot be told
 *    from the best (pn_search_survivors), and pick among those with the
 *    reference's err <= best scan. Why that is the reference's winner:
 *
 *    Notation: u = 2^-24 (float), z <= 8, G <= 80. For a valid candidate s
 *    (a half value: exact in float, 2^-24 <= |s| <= 65504) let k_e be the
 *    reference's code of element e, D_e = w_e - s*k_e exactly, and
 *    E = sum D_e^2 (real numbers). The reference's double sum R satisfies
 *    |R - E| <= g*E, g = 82 * 2^-53 / (1 - 82 * 2^-53): s*k_e is exact, the
 *    difference, the square and G - 1 additions round once each, all terms
 *    are >= 0 and none is a double subnormal (D_e is 0 or a multiple of
 *    2^-149, so D_e^2 >= 2^-298).
 *
 *    The float score F: r' = fl(1/s); the code k' = clamp(rint(w*r'),
 *    -z, z - 1), computed as c' = fl(w*r' + C), C = 1.5 * 2^23 (one fused
 *    rounding: |w*r'| <= 4z(1 + u) < 2^22, as s >= t/2 = m*amax/(2z), so
 *    c' lies in [2^23, 2^24), where the floats are the integers, and c' - C
 *    is w*r' rounded to an integer, ties to even), clamped to
 *    [C - z, C + z - 1] and less C (exact); d' = fl(w - s*k') (one fused
 *    rounding), acc = fl(acc + d'*d') (one fused rounding). Candidates
 *    0..31 sum in element order; candidates 32..35 share a vector among 2
 *    (AVX2) or 4 (AVX-512) elements, so each of their scores is 2 or 4
 *    running sums over every second or fourth element, added at the end
 *    (1 or 3 more roundings; no term passes through more than G).
 *    - Let x = w/s exactly. clamp(rint(x), -z, z-1) is k_e, or, where x is
 *      exactly a half-way point, its other neighbour, with the same
 *      |D_e| = |s|/2. It changes only at the half-way points M = j + 1/2,
 *      |M| <= z - 1/2. w*r' = x(1+a), |a| <= u, so if k' and k_e differ,
 *      an M lies between x and x(1+a): rho = |x - M| obeys
 *      rho <= u(z - 1/2 + rho) < 16u, and the codes are M's two
 *      neighbours. Both leave a remainder in [1/2 - rho, 1/2 + rho] * |s|:
 *      (w - s*k')^2 = D_e^2 (1 + beta), |beta| <= ((1 + 32u)/(1 - 32u))^2
 *      - 1 < 129u (beta = 0 when the codes agree).
 *    - Each fl above that lands in float's subnormal range (d' and the
 *      sums; c' never does) errs by at most 2^-150 absolutely instead of u
 *      relatively; the 2G + 3 of them, carried through the later additions,
 *      add less than 2^-140 in all. Nothing overflows: a valid s needs
 *      amax < 65520 * 8 / 0.5, so every d'^2 and sum stays below 2^60. A
 *      skipped candidate's lane has s = +inf: r' = 0, c' = C, k' = 0,
 *      d' = w - inf*0 = NaN, its score is NaN, and NaN is neither the
 *      minimum taken below nor admitted by any comparison.
 *    - So F = sum D_e^2 (1+beta_e)(1+c_e)^2 prod(1+a_j) + abs, with at most G
 *      factors (1+a_j), |c_e|,|a_j| <= u: |F - E| <= f*E + A, f = 212u,
 *      A = 2^-140 ((1 + 129u)(1 + u)^82 < 1 + 212u).
 *    Hence L = (F - A)(1 - g)/(1 + f) <= R <= (F + A)(1 + g)/(1 - f) = U.
 *    Let j be a valid candidate with the smallest F. A candidate i with
 *    F_i > F_j K + A(1 + K), K = (1+g)(1+f)/((1-g)(1-f)) < 1 + 2^-15 - 2^-51,
 *    has R_i >= L_i > U_j >= R_j: its exact sum is larger than another's, so
 *    it is neither the reference's winner nor tied with it. The survivors
 *    test F_i <= thr, thr = fl(fl(F_j * (1 + 2^-15)) + 2^-138) in double:
 *    the two roundings lose at most 2^-52 relatively, still above
 *    F_j K + A(1 + K) (2^-138 (1 - 2^-53) > 2A(1 + f)); F_i being a float,
 *    F_i <= thr is F_i <= thr rounded down to float, which the vector code
 *    compares. Every candidate whose R could be the smallest survives, j
 *    among them; rescored exactly, the last one with the smallest R
 *    (err <= best, ascending) is the reference's winner. When j is the only
 *    survivor it is the winner without rescoring (the sums of quant_row.h
 *    rescore it for its exact error).
 *    Two smaller exact replacements on these paths: t = sigma*m*amax/z is
 *    computed as sigma*m*amax * (1/z), the same exact scaling by 2^-2 or
 *    2^-3 (|sigma*m*amax| >= 2^-150, far from double's subnormals); and the
 *    winner's codes come from w * fl(1/s) in double (argument 2: the
 *    reference's codes unless x is exactly a half-way point), checked for
 *    half-way points by 2w == (2k + 1)s or 2w == (2k - 1)s (every product
 *    exact: s has 11 significant bits, 2k +- 1 at most 5); a group with one
 *    takes the reference's division instead.
 *
 * All arithmetic assumes the default floating-point environment: round to
 * nearest, no flush-to-zero (never built with -ffast-math).
 */
#ifndef PN_QUANT_PN_FAST_INTERNAL_H
#define PN_QUANT_PN_FAST_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "quant/pn.h"

/* The 36 candidates padded to 40 lanes (5 vectors of 8 doubles); lanes 36..39
 * are never valid. m = (50 + 2i) / 100.0, folded at compile time with the
 * same IEEE rounding the reference gets at run time. */
#define PN_FAST_LANES 40
#define PN_FAST_M(i) ((double)(50 + 2 * (i)) / 100.0)
#define PN_FAST_M4(i) PN_FAST_M(i), PN_FAST_M((i) + 1), PN_FAST_M((i) + 2), PN_FAST_M((i) + 3)
static const double pn_fast_m[PN_FAST_LANES] __attribute__((aligned(64))) = {
    PN_FAST_M4(0),
    PN_FAST_M4(4),
    PN_FAST_M4(8),
    PN_FAST_M4(12),
    PN_FAST_M4(16),
    PN_FAST_M4(20),
    PN_FAST_M4(24),
    PN_FAST_M4(28),
    PN_FAST_M4(32),
    1.0,
    1.0,
    1.0,
    1.0,
};

#define PN_FAST_HALF_MAX 65504.0
#define PN_FAST_EXP_MASK 0x7ff0000000000000ull
#define PN_FAST_SIGN_MASK 0x8000000000000000ull
#define PN_FAST_MIN_NORMAL_HALF 0x1p-14
#define PN_FAST_SPLIT 0x1p42
#define PN_FAST_RINT_MAGIC 0x1.8p52
#define PN_FAST_FLOAT_RINT_MAGIC 0x1.8p23f

static inline uint64_t pn_fast_bits_of(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline double pn_fast_double_of(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* fp16(t) as a double: +-0 when it underflows, +-inf when it overflows.
 * The second of the project's three fp16 rounders (the list is in
 * quant/fp16.h): pn_fp16_from_double's rounding, but producing the value by
 * one addition and one subtraction (argument 1 above), so that
 * make_candidates in pn_fast_avx2.c / pn_fast_avx512.c can round the 36
 * candidate scales in vector lanes without per-lane branches; this scalar
 * form is what the portable path uses and what the tests pin against the
 * reference (tests/quant/test_pn_fast.c, fast_fp16_rounding_*). */
static inline double pn_fast_fp16_value(double t)
{
    uint64_t tb = pn_fast_bits_of(t);
    double a = pn_fast_double_of(tb & ~PN_FAST_SIGN_MASK);
    if (a >= 65520.0) /* rounds past 65504; also keeps magic below infinity */
        return pn_fast_double_of(pn_fast_bits_of(__builtin_inf()) | (tb & PN_FAST_SIGN_MASK));
    double lead = pn_fast_double_of(tb & PN_FAST_EXP_MASK);
    if (lead < PN_FAST_MIN_NORMAL_HALF)
        lead = PN_FAST_MIN_NORMAL_HALF;
    double magic = lead * PN_FAST_SPLIT;
    double y = (a + magic) - magic;
    return pn_fast_double_of(pn_fast_bits_of(y) | (tb & PN_FAST_SIGN_MASK));
}

/* Binary16 bits of a double that is exactly a finite half value. */
static inline uint16_t pn_fast_half_bits(double h)
{
    uint64_t b = pn_fast_bits_of(h);
    uint16_t sign = (uint16_t)((b >> 48) & 0x8000u);
    double a = pn_fast_double_of(b & ~PN_FAST_SIGN_MASK);
    if (a < PN_FAST_MIN_NORMAL_HALF) /* subnormal half (or zero): unit 2^-24 */
        return (uint16_t)(sign | (uint16_t)(a * 0x1p24));
    int exp = (int)((b >> 52) & 0x7ff) - 1023;
    uint16_t mant = (uint16_t)((b >> 42) & 0x3ff);
    return (uint16_t)(sign | (uint16_t)((exp + 15) << 10) | mant);
}

/* Index of the winner among the valid candidates (bit i of valid), smallest
 * err with ties to the later one, exactly the reference's err <= best scan;
 * -1 when none is valid. */
static inline int pn_fast_pick(const double *err, uint64_t valid)
{
    double best = __builtin_inf();
    int best_i = -1;
    for (int i = 0; i < PN_N_CANDIDATES; i++) {
        if (((valid >> i) & 1u) && err[i] <= best) {
            best = err[i];
            best_i = i;
        }
    }
    return best_i;
}

/* The survivors of the float scores f[0..35] (argument 3 above): the valid
 * candidates (bit i of valid) with f[i] <= f_min * (1 + 2^-15) + 2^-138,
 * f_min the smallest valid f, compared in double. valid must not be 0. */
#define PN_SEARCH_REL (1.0 + 0x1p-15)
#define PN_SEARCH_ABS 0x1p-138
static inline uint64_t pn_search_survivors(const float *f, uint64_t valid)
{
    float fmin = __builtin_inff();
    for (int i = 0; i < PN_N_CANDIDATES; i++)
        if (((valid >> i) & 1u) && f[i] < fmin)
            fmin = f[i];
    const double thr = (double)fmin * PN_SEARCH_REL + PN_SEARCH_ABS;
    uint64_t set = 0;
    for (int i = 0; i < PN_N_CANDIDATES; i++)
        if (((valid >> i) & 1u) && (double)f[i] <= thr)
            set |= 1ull << i;
    return set;
}

/* The per-group sums of quant_row.h on the float search's paths: the
 * winner's exact error (argument 2's double arithmetic, element order) and
 * the norm are two serial chains of G additions a group. Summed group by
 * group beside the search, they cost a scalar step per weight (about a
 * quarter of the AVX2 search's time, bench/bench_chunk.c); summed after a
 * batch of groups is searched, four groups at a time in the four lanes of a
 * vector (four weights of each group transposed so that lane i adds group
 * i's terms in element order), they cost a few vector operations per four
 * weights, and eight groups in flight hide the additions' latency. Every
 * lane performs exactly the reference's operations: q = w * fl(1/s),
 * clamped to [-z, z-1], rounded to nearest even, d = w - s*k (no fused
 * operation), err += d*d, norm += w*w. A group that decodes to zeros (all
 * zero, or every scale underflowed) has s = 0 and r = 0: k = +-0, d = w,
 * and err is its norm, as the reference's zero block gives. */
#ifdef __AVX2__
#include <immintrin.h>

#define PN_SUMS_STEP(wv, S, R, E, N, lo, hi)                                                       \
    do {                                                                                           \
        __m256d q_ = _mm256_min_pd(_mm256_max_pd(_mm256_mul_pd(wv, R), lo), hi);                   \
        __m256d k_ = _mm256_round_pd(q_, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);           \
        __m256d d_ = _mm256_sub_pd(wv, _mm256_mul_pd(S, k_));                                      \
        E = _mm256_add_pd(E, _mm256_mul_pd(d_, d_));                                               \
        N = _mm256_add_pd(N, _mm256_mul_pd(wv, wv));                                               \
    } while (0)

/* Four weights e..e+3 of four groups, as four vectors of one element each. */
static inline __attribute__((always_inline)) void pn_sums_load4(const float *const *xg, int e,
                                                                __m256d v[4])
{
    const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(xg[0] + e));
    const __m256d b = _mm256_cvtps_pd(_mm_loadu_ps(xg[1] + e));
    const __m256d c = _mm256_cvtps_pd(_mm_loadu_ps(xg[2] + e));
    const __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(xg[3] + e));
    const __m256d t0 = _mm256_unpacklo_pd(a, b), t1 = _mm256_unpackhi_pd(a, b);
    const __m256d t2 = _mm256_unpacklo_pd(c, d), t3 = _mm256_unpackhi_pd(c, d);
    v[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
    v[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
    v[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
    v[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
}

/* err[i], norm[i] of groups 0..n-1 at x (G weights each, G a multiple of
 * 4), the winner of group i having scale s[i] (0: decodes to zeros). */
static inline void pn_search_sums_batch(const float *x, int G, int z, const double *s, int n,
                                        double *err, double *norm)
{
    const __m256d lo = _mm256_set1_pd((double)-z), hi = _mm256_set1_pd((double)(z - 1));
    for (int g = 0; g < n; g += 8) {
        const float *xg[8];
        double sv[8] __attribute__((aligned(32))), rv[8] __attribute__((aligned(32)));
        for (int i = 0; i < 8; i++) {
            const int gi = g + i < n ? g + i : g; /* lanes past the end repeat group g */
            xg[i] = x + (int64_t)gi * G;
            sv[i] = s[gi];
            rv[i] = s[gi] != 0.0 ? 1.0 / s[gi] : 0.0;
        }
        const __m256d S0 = _mm256_load_pd(sv), R0 = _mm256_load_pd(rv);
        const __m256d S1 = _mm256_load_pd(sv + 4), R1 = _mm256_load_pd(rv + 4);
        __m256d E0 = _mm256_setzero_pd(), N0 = E0, E1 = E0, N1 = E0;
        for (int e = 0; e < G; e += 4) {
            __m256d v[4], u[4];
            pn_sums_load4(xg, e, v);
            pn_sums_load4(xg + 4, e, u);
            for (int j = 0; j < 4; j++) {
                PN_SUMS_STEP(v[j], S0, R0, E0, N0, lo, hi);
                PN_SUMS_STEP(u[j], S1, R1, E1, N1, lo, hi);
            }
        }
        double eo[8] __attribute__((aligned(32))), no[8] __attribute__((aligned(32)));
        _mm256_store_pd(eo, E0);
        _mm256_store_pd(eo + 4, E1);
        _mm256_store_pd(no, N0);
        _mm256_store_pd(no + 4, N1);
        for (int i = 0; i < 8 && g + i < n; i++) {
            err[g + i] = eo[i];
            norm[g + i] = no[i];
        }
    }
}
#endif

/* Shared scalar pieces (pn_fast.c). */

/* Packs G codes and the scale bits into a 34-byte block, reserved bits 0. */
void pn_fast_pack_block(const pn_params *p, uint16_t d_bits, const uint8_t *codes, uint8_t *block);

/* The same bytes as pn_fast_pack_block, packed with two multiplications a
 * word (the float search's paths; it reads 8 code bytes from each word's
 * first, all inside the G codes). */
void pn_fast_pack_block_mul(const pn_params *p, uint16_t d_bits, const uint8_t *codes,
                            uint8_t *block);

/* x read as little-endian (the codes are bytes in memory order). */
static inline uint64_t pn_fast_le64(uint64_t x)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap64(x);
#else
    return x;
#endif
}

/* Writes the canonical zero group (d = +0.0, every code z). */
void pn_fast_zero_block(const pn_params *p, uint8_t *block);

/* The reference's answer for a group the fast path will not encode (a NaN or
 * infinity): status and *bad_index exactly as pn_quantize_group_ref. */
pn_status pn_fast_group_refused(const pn_params *p, const float *w, int *bad_index);

/* The per-ISA row quantizers; p is pn_params_get(type), n a multiple of G;
 * blk_err and blk_norm both NULL, or both n/G doubles for the per-group sums
 * of pn_quantize_row_path_sums. */
pn_status pn_quantize_row_scalar_fast(const pn_params *p, const float *x, int64_t n, uint8_t *out,
                                      int64_t *bad_col, double *blk_err, double *blk_norm);
pn_status pn_quantize_row_avx2(const pn_params *p, const float *x, int64_t n, uint8_t *out,
                               int64_t *bad_col, double *blk_err, double *blk_norm);
pn_status pn_quantize_row_avx512(const pn_params *p, const float *x, int64_t n, uint8_t *out,
                                 int64_t *bad_col, double *blk_err, double *blk_norm);

#endif
