/* The AVX2 PN quantizer. The search (pn_quantize_row_avx2): the 36
 * candidates scored in float, four 8-float vectors and one that holds
 * candidates 32..35 of two elements at once, then only those the float
 * scores cannot tell from the best summed again in double, four lanes at a
 * time, exactly as the reference sums them. Exactness: arguments 1-3 of
 * pn_fast_internal.h. Compiled with -mavx2 -mf16c -mfma; called only when
 * pn_path_available(PN_PATH_AVX2). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "quant/pn_fast_internal.h"

#define ROUND_NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define NVEC (PN_N_CANDIDATES / 4)

typedef struct cands256 {
    double s[PN_FAST_LANES] __attribute__((aligned(32)));
    uint64_t valid;
    bool any_overflow;
} cands256;

/* s of every candidate (+inf where skipped, so that a skipped lane's float
 * score is NaN and no comparison admits it) (the search divides, 1/s, only for the
 * few candidates it rescores). */
static inline void make_candidates(double sigma, double amax, int z, cands256 *c)
{
    const __m256d vsig = _mm256_set1_pd(sigma), vamax = _mm256_set1_pd(amax);
    const __m256d inv_z = _mm256_set1_pd(1.0 / (double)z);
    const __m256d inf = _mm256_set1_pd(__builtin_inf());
    const __m256d expmask = _mm256_castsi256_pd(_mm256_set1_epi64x((long long)PN_FAST_EXP_MASK));
    const __m256d absmask = _mm256_castsi256_pd(_mm256_set1_epi64x((long long)~PN_FAST_SIGN_MASK));
    const __m256d minhalf = _mm256_set1_pd(PN_FAST_MIN_NORMAL_HALF);
    const __m256d split = _mm256_set1_pd(PN_FAST_SPLIT);
    const __m256d halfmax = _mm256_set1_pd(PN_FAST_HALF_MAX), zero = _mm256_setzero_pd();
    uint64_t valid = 0, overflow = 0;
    for (int v = 0; v < NVEC; v++) {
        __m256d m = _mm256_load_pd(pn_fast_m + 4 * v);
        /* t = sigma * m * amax / z, left to right as in the reference; z is
         * 4 or 8 and |sigma * m * amax| >= 2^-150, so dividing by z and
         * multiplying by 1/z are the same exact scaling */
        __m256d x = _mm256_mul_pd(_mm256_mul_pd(vsig, m), vamax);
        __m256d t = _mm256_mul_pd(x, inv_z);
        __m256d a = _mm256_and_pd(t, absmask);
        __m256d lead = _mm256_max_pd(_mm256_and_pd(a, expmask), minhalf);
        /* |t| < 2^127 (amax is a float), so magic stays finite and y > 65504
         * is exactly the reference's overflow test |t| >= 65520 */
        __m256d magic = _mm256_mul_pd(lead, split);
        __m256d y = _mm256_sub_pd(_mm256_add_pd(a, magic), magic);
        __m256d ovf = _mm256_cmp_pd(y, halfmax, _CMP_GT_OQ);
        __m256d ok = _mm256_andnot_pd(ovf, _mm256_cmp_pd(y, zero, _CMP_NEQ_OQ));
        __m256d s = _mm256_blendv_pd(inf, _mm256_mul_pd(y, vsig), ok);
        _mm256_store_pd(c->s + 4 * v, s);
        valid |= (uint64_t)_mm256_movemask_pd(ok) << (4 * v);
        overflow |= (uint64_t)_mm256_movemask_pd(ovf) << (4 * v);
    }
    c->valid = valid;
    c->any_overflow = overflow != 0;
}

/* The exact double errors of the candidates in `set` (bit i: candidate i),
 * four lanes at a time, into err[i]: the reference's arithmetic, so each is
 * the reference's sum (argument 2 of pn_fast_internal.h). With norm not
 * NULL, *norm = sum wd[e]^2 in element order, a chain beside the first
 * batch. */
static void rescore(const double *wd, int G, int z, const cands256 *c, uint64_t set, double *err,
                    double *norm)
{
    const __m256d lo = _mm256_set1_pd((double)-z), hi = _mm256_set1_pd((double)(z - 1));
    double nrm = 0.0;
    for (int batch = 0; set; batch++) {
        double s4[4] __attribute__((aligned(32))) = { 1.0, 1.0, 1.0, 1.0 };
        double r4[4] __attribute__((aligned(32))) = { 1.0, 1.0, 1.0, 1.0 };
        int idx[4], cnt = 0;
        for (; set && cnt < 4; cnt++) {
            idx[cnt] = __builtin_ctzll(set);
            set &= set - 1;
            s4[cnt] = c->s[idx[cnt]];
            r4[cnt] = 1.0 / s4[cnt];
        }
        const __m256d S = _mm256_load_pd(s4), R = _mm256_load_pd(r4);
        __m256d E = _mm256_setzero_pd();
        if (norm && batch == 0) {
            for (int e = 0; e < G; e++) {
                const __m256d wv = _mm256_set1_pd(wd[e]);
                __m256d q = _mm256_min_pd(_mm256_max_pd(_mm256_mul_pd(wv, R), lo), hi);
                __m256d d = _mm256_sub_pd(wv, _mm256_mul_pd(S, _mm256_round_pd(q, ROUND_NEAREST)));
                E = _mm256_add_pd(E, _mm256_mul_pd(d, d));
                nrm = nrm + wd[e] * wd[e];
            }
            *norm = nrm;
        } else {
            for (int e = 0; e < G; e++) {
                const __m256d wv = _mm256_set1_pd(wd[e]);
                __m256d q = _mm256_min_pd(_mm256_max_pd(_mm256_mul_pd(wv, R), lo), hi);
                __m256d d = _mm256_sub_pd(wv, _mm256_mul_pd(S, _mm256_round_pd(q, ROUND_NEAREST)));
                E = _mm256_add_pd(E, _mm256_mul_pd(d, d));
            }
        }
        double out4[4] __attribute__((aligned(32)));
        _mm256_store_pd(out4, E);
        for (int j = 0; j < cnt; j++)
            err[idx[j]] = out4[j];
    }
}

/* One float step of the search (argument 3 of pn_fast_internal.h): the
 * code k = clamp(rint(w * r), -z, z - 1), rounded by the one fused addition
 * of C = 1.5 * 2^23 (the exact product plus C, rounded to an integer) and
 * clamped as C + k, the remainder fl(w - s*k) and its square fused into the
 * running float sum. lo and hi are C - z and C + z - 1. */
#define PN_FSTEP(wv, S, R, E, C, lo, hi, sfx)                                                      \
    do {                                                                                           \
        __typeof__(E) q_ = _mm##sfx##_fmadd_ps(wv, R, C);                                          \
        q_ = _mm##sfx##_min_ps(_mm##sfx##_max_ps(q_, lo), hi);                                     \
        __typeof__(E) d_ = _mm##sfx##_fnmadd_ps(S, _mm##sfx##_sub_ps(q_, C), wv);                  \
        E = _mm##sfx##_fmadd_ps(d_, d_, E);                                                        \
    } while (0)

/* The survivors of the float scores (pn_search_survivors): a skipped lane's
 * score is NaN (s = +inf), which min ignores (it returns its second operand
 * when either is NaN) and no comparison admits. f_i <= thr in double is
 * f_i <= thr rounded down to float, f_i being a float. */
static inline uint64_t survivors(const __m256 *F, __m128 F4)
{
    __m256 mn = _mm256_set1_ps(__builtin_inff());
    for (int v = 0; v < 4; v++)
        mn = _mm256_min_ps(F[v], mn);
    __m128 m4 =
        _mm_min_ps(F4, _mm_min_ps(_mm256_extractf128_ps(mn, 1), _mm256_castps256_ps128(mn)));
    m4 = _mm_min_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_min_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const double thr = (double)_mm_cvtss_f32(m4) * PN_SEARCH_REL + PN_SEARCH_ABS;
    float thr_f = (float)thr;
    if ((double)thr_f > thr)
        thr_f = __builtin_nextafterf(thr_f, 0.0f);
    const __m256 t = _mm256_set1_ps(thr_f);
    uint64_t set = 0;
    for (int v = 0; v < 4; v++)
        set |= (uint64_t)_mm256_movemask_ps(_mm256_cmp_ps(F[v], t, _CMP_LE_OQ)) << (8 * v);
    set |= (uint64_t)_mm_movemask_ps(_mm_cmp_ps(F4, _mm256_castps256_ps128(t), _CMP_LE_OQ)) << 32;
    return set;
}

/* Every candidate's float score (argument 3 of pn_fast_internal.h) into
 * E[0..3] (candidates 0..31) and *E4 (32..35). */
static inline __attribute__((always_inline)) void
float_scores(const float *w, int G, int z, const cands256 *c, __m256 *E, __m128 *E4out)
{
    __m256 S[4], R[4];
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int v = 0; v < 4; v++) {
        /* s is a half value (or +inf): exact in float; r = fl32(1/s) */
        S[v] = _mm256_set_m128(_mm256_cvtpd_ps(_mm256_load_pd(c->s + 8 * v + 4)),
                               _mm256_cvtpd_ps(_mm256_load_pd(c->s + 8 * v)));
        R[v] = _mm256_div_ps(one, S[v]);
        E[v] = _mm256_setzero_ps();
    }
    /* candidates 32..35 of two elements at once: lane 4j + i holds
     * candidate 32 + i and element e + j, so a vector is full */
    const __m128 S4h = _mm256_cvtpd_ps(_mm256_load_pd(c->s + 32));
    const __m256 S4 = _mm256_set_m128(S4h, S4h);
    const __m256 R4 = _mm256_div_ps(one, S4);
    __m256 E4 = _mm256_setzero_ps();
    const __m256 C = _mm256_set1_ps(PN_FAST_FLOAT_RINT_MAGIC);
    const __m256 lo = _mm256_set1_ps(PN_FAST_FLOAT_RINT_MAGIC - (float)z);
    const __m256 hi = _mm256_set1_ps(PN_FAST_FLOAT_RINT_MAGIC + (float)(z - 1));
    for (int e = 0; e < G; e += 2) { /* G is 64 or 80 */
        const __m256 wv = _mm256_broadcast_ss(w + e);
        const __m256 wn = _mm256_broadcast_ss(w + e + 1);
        PN_FSTEP(wv, S[0], R[0], E[0], C, lo, hi, 256);
        PN_FSTEP(wv, S[1], R[1], E[1], C, lo, hi, 256);
        PN_FSTEP(wv, S[2], R[2], E[2], C, lo, hi, 256);
        PN_FSTEP(wv, S[3], R[3], E[3], C, lo, hi, 256);
        PN_FSTEP(wn, S[0], R[0], E[0], C, lo, hi, 256);
        PN_FSTEP(wn, S[1], R[1], E[1], C, lo, hi, 256);
        PN_FSTEP(wn, S[2], R[2], E[2], C, lo, hi, 256);
        PN_FSTEP(wn, S[3], R[3], E[3], C, lo, hi, 256);
        const __m256 w2 = _mm256_blend_ps(wv, wn, 0xf0);
        PN_FSTEP(w2, S4, R4, E4, C, lo, hi, 256);
    }
    /* the two partial sums of candidates 32..35: j0 + j1 */
    *E4out = _mm_add_ps(_mm256_castps256_ps128(E4), _mm256_extractf128_ps(E4, 1));
}

/* The winner by the float-scored search (argument 3 of pn_fast_internal.h):
 * every candidate scored in float, then the candidates the float scores
 * cannot tell from the best rescored exactly and picked as the reference
 * does. err receives the exact double sum of every rescored candidate, the
 * winner among them when err_wanted; with norm not NULL, *norm = sum wd[e]^2
 * in element order. (The row's sums of quant_row.h are added after a batch
 * of groups: pn_search_sums_batch.) */
static inline int float_search(const float *w, const double *wd, int G, int z, const cands256 *c,
                               double *err, int err_wanted, double *norm)
{
    __m256 E[4];
    __m128 E4;
    float_scores(w, G, z, c, E, &E4);
    const uint64_t set = survivors(E, E4);
    if ((set & (set - 1)) == 0 && !err_wanted && !norm)
        return __builtin_ctzll(set);
    rescore(wd, G, z, c, set, err, norm);
    return pn_fast_pick(err, set);
}

/* sum wd[e]^2 in element order (groups that are not searched). */
static double group_norm(const double *wd, int G)
{
    double nrm = 0.0;
    for (int e = 0; e < G; e++)
        nrm = nrm + wd[e] * wd[e];
    return nrm;
}

static inline __attribute__((always_inline)) pn_status
quantize_group_avx2(const pn_params *p, const float *w, uint8_t *block, int *bad_index,
                    double *err_out, double *norm_out, double *wd, double *s_out)
{
    const int G = p->group, z = p->z;
    const __m256i expf = _mm256_set1_epi32(0x7f800000);
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 vmax = _mm256_set1_ps(-INFINITY), vmin = _mm256_set1_ps(INFINITY);
    __m256 vamax = _mm256_setzero_ps();
    for (int e = 0; e < G; e += 8) {
        __m256i b = _mm256_loadu_si256((const __m256i *)(w + e));
        __m256i ex = _mm256_and_si256(b, expf);
        if (_mm256_movemask_epi8(_mm256_cmpeq_epi32(ex, expf))) {
            return pn_fast_group_refused(p, w, bad_index);
        }
        __m256 v = _mm256_castsi256_ps(b);
        vmax = _mm256_max_ps(vmax, v);
        vmin = _mm256_min_ps(vmin, v);
        vamax = _mm256_max_ps(vamax, _mm256_and_ps(v, absmask));
        _mm256_store_pd(wd + e, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
        _mm256_store_pd(wd + e + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    }
    float lanes_max[8], lanes_min[8], lanes_amax[8];
    _mm256_storeu_ps(lanes_max, vmax);
    _mm256_storeu_ps(lanes_min, vmin);
    _mm256_storeu_ps(lanes_amax, vamax);
    float fmax = lanes_max[0], fmin = lanes_min[0], famax = lanes_amax[0];
    for (int i = 1; i < 8; i++) {
        fmax = lanes_max[i] > fmax ? lanes_max[i] : fmax;
        fmin = lanes_min[i] < fmin ? lanes_min[i] : fmin;
        famax = lanes_amax[i] > famax ? lanes_amax[i] : famax;
    }
    const double amax = famax, max = fmax, min = fmin;
    *s_out = 0.0; /* until a winner is found: decodes to zeros */
    if (amax == 0.0) {
        if (norm_out)
            *norm_out = *err_out = group_norm(wd, G);
        pn_fast_zero_block(p, block);
        return PN_OK;
    }
    const double sigma = (fabs(min) > max) ? 1.0 : -1.0;

    cands256 c;
    make_candidates(sigma, amax, z, &c);
    if (c.valid == 0) {
        if (c.any_overflow) {
            *bad_index = 0;
            return PN_ERR_SCALE_OVERFLOW;
        }
        if (norm_out) /* every scale underflowed: decodes to zeros */
            *norm_out = *err_out = group_norm(wd, G);
        pn_fast_zero_block(p, block);
        return PN_OK;
    }
    double err[PN_FAST_LANES];
    int best;
    best = float_search(w, wd, G, z, &c, err, err_out != NULL, norm_out);
    const double sb = c.s[best];
    *s_out = sb;
    if (err_out)
        *err_out = err[best];

    const __m256d vs = _mm256_set1_pd(sb), vzd = _mm256_set1_pd((double)z);
    const __m256d lo = _mm256_set1_pd((double)-z), hi = _mm256_set1_pd((double)(z - 1));
    uint8_t codes[80];
    /* The winner's codes from w * fl(1/s) (argument 2: the reference's
     * codes unless w/s is exactly a half-way point j + 1/2, that is
     * 2w == (2k +- 1)s, every product exact); at such a point the
     * reference's division decides. */
    const __m256d vr = _mm256_set1_pd(1.0 / sb), vs2 = _mm256_set1_pd(2.0 * sb);
    __m256d halfway = _mm256_setzero_pd();
    for (int e = 0; e < G; e += 4) {
        const __m256d wv = _mm256_load_pd(wd + e), w2 = _mm256_add_pd(wv, wv);
        __m256d q = _mm256_min_pd(_mm256_max_pd(_mm256_mul_pd(wv, vr), lo), hi);
        __m256d k = _mm256_round_pd(q, ROUND_NEAREST);
        halfway = _mm256_or_pd(halfway, _mm256_cmp_pd(w2, _mm256_fmadd_pd(k, vs2, vs), _CMP_EQ_OQ));
        halfway = _mm256_or_pd(halfway, _mm256_cmp_pd(w2, _mm256_fmsub_pd(k, vs2, vs), _CMP_EQ_OQ));
        const __m128i n = _mm256_cvtpd_epi32(_mm256_add_pd(k, vzd));
        const __m128i n8 = _mm_shuffle_epi8(n, _mm_set1_epi32(0x0c080400));
        uint32_t word = (uint32_t)_mm_cvtsi128_si32(n8);
        memcpy(codes + e, &word, sizeof word);
    }
    if (!_mm256_movemask_pd(halfway)) {
        pn_fast_pack_block_mul(p, pn_fast_half_bits(sb), codes, block);
        return PN_OK;
    }
    /* The winner's codes with the reference's exact division. */
    for (int e = 0; e < G; e += 4) {
        __m256d q = _mm256_div_pd(_mm256_load_pd(wd + e), vs);
        q = _mm256_min_pd(_mm256_max_pd(q, lo), hi);
        __m256d n = _mm256_add_pd(_mm256_round_pd(q, ROUND_NEAREST), vzd);
        int32_t ni[4];
        _mm_storeu_si128((__m128i *)ni, _mm256_cvtpd_epi32(n));
        for (int j = 0; j < 4; j++)
            codes[e + j] = (uint8_t)ni[j];
    }
    pn_fast_pack_block(p, pn_fast_half_bits(sb), codes, block);
    return PN_OK;
}

/* The row loop. With the sums, the groups are searched PN_SUMS_BATCH at a
 * time without them, and their sums are then added four groups to a vector
 * (pn_search_sums_batch in pn_fast_internal.h). */
#define PN_SUMS_BATCH 16
static inline __attribute__((always_inline)) pn_status
quantize_row(const pn_params *p, const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
             double *blk_err, double *blk_norm)
{
    const int sums = blk_err && blk_norm;
    const int G = p->group;
    double wd[80] __attribute__((aligned(32)));
    double sb[PN_SUMS_BATCH];
    const int64_t ng = n / G;
    for (int64_t g0 = 0; g0 < ng; g0 += PN_SUMS_BATCH) {
        const int nb = ng - g0 < PN_SUMS_BATCH ? (int)(ng - g0) : PN_SUMS_BATCH;
        for (int i = 0; i < nb; i++) {
            const int64_t g = g0 + i;
            int bad = 0;
            pn_status st = quantize_group_avx2(p, x + g * G, out + g * PN_BLOCK_BYTES, &bad, NULL,
                                               NULL, wd, &sb[i]);
            if (st != PN_OK) {
                if (bad_col)
                    *bad_col = g * G + bad;
                return st;
            }
        }
        if (sums)
            pn_search_sums_batch(x + g0 * G, G, p->z, sb, nb, blk_err + g0, blk_norm + g0);
    }
    return PN_OK;
}

pn_status pn_quantize_row_avx2(const pn_params *p, const float *x, int64_t n, uint8_t *out,
                               int64_t *bad_col, double *blk_err, double *blk_norm)
{
    return quantize_row(p, x, n, out, bad_col, blk_err, blk_norm);
}
