/* The AVX-512 PN quantizer. The search (pn_quantize_row_avx512): the 36
 * candidates scored in float, two 16-float vectors and one that holds
 * candidates 32..35 of four elements at once, then only those the float
 * scores cannot tell from the best summed again in
 * double, eight lanes at a time, exactly as the reference sums them.
 * Exactness: arguments 1-3 of pn_fast_internal.h.
 * Compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl; called only when
 * pn_path_available(PN_PATH_AVX512). */
#include <immintrin.h>
#include <math.h>

#include "quant/pn_fast_internal.h"

#define ROUND_NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* The per-group candidate table: s (1.0 where skipped), r = 1/s, and which
 * lanes are valid / overflowed. */
typedef struct cands512 {
    double s[PN_FAST_LANES] __attribute__((aligned(64)));
    uint64_t valid;
    bool any_overflow;
} cands512;

/* s of every candidate (+inf where skipped, so that a skipped lane's float
 * score is NaN and no comparison admits it) (the search divides, 1/s, only for the
 * few candidates it rescores). */
static inline void make_candidates(double sigma, double amax, int z, cands512 *c)
{
    const __m512d vsig = _mm512_set1_pd(sigma), vamax = _mm512_set1_pd(amax);
    const __m512d inv_z = _mm512_set1_pd(1.0 / (double)z);
    const __m512d inf = _mm512_set1_pd(__builtin_inf());
    const __m512d expmask = _mm512_castsi512_pd(_mm512_set1_epi64((long long)PN_FAST_EXP_MASK));
    const __m512d minhalf = _mm512_set1_pd(PN_FAST_MIN_NORMAL_HALF);
    const __m512d split = _mm512_set1_pd(PN_FAST_SPLIT);
    const __m512d halfmax = _mm512_set1_pd(PN_FAST_HALF_MAX), zero = _mm512_setzero_pd();
    uint64_t valid = 0, overflow = 0;
    for (int v = 0; v < PN_FAST_LANES / 8; v++) {
        __m512d m = _mm512_load_pd(pn_fast_m + 8 * v);
        /* t = sigma * m * amax / z, left to right as in the reference; z is
         * 4 or 8 and |sigma * m * amax| >= 2^-150, so dividing by z and
         * multiplying by 1/z are the same exact scaling */
        __m512d x = _mm512_mul_pd(_mm512_mul_pd(vsig, m), vamax);
        __m512d t = _mm512_mul_pd(x, inv_z);
        __m512d a = _mm512_abs_pd(t);
        __m512d lead = _mm512_max_pd(_mm512_and_pd(a, expmask), minhalf);
        /* |t| < 2^127 (amax is a float), so magic stays finite and y > 65504
         * is exactly the reference's overflow test |t| >= 65520 */
        __m512d magic = _mm512_mul_pd(lead, split);
        __m512d y = _mm512_sub_pd(_mm512_add_pd(a, magic), magic);
        __mmask8 ovf = _mm512_cmp_pd_mask(y, halfmax, _CMP_GT_OQ);
        __mmask8 ok = _mm512_cmp_pd_mask(y, zero, _CMP_NEQ_OQ) & (__mmask8)~ovf;
        __m512d s = _mm512_mask_blend_pd(ok, inf, _mm512_mul_pd(y, vsig));
        _mm512_store_pd(c->s + 8 * v, s);
        valid |= (uint64_t)ok << (8 * v);
        overflow |= (uint64_t)ovf << (8 * v);
    }
    const uint64_t lanes = (1ull << PN_N_CANDIDATES) - 1;
    c->valid = valid & lanes;
    c->any_overflow = (overflow & lanes) != 0;
}

/* The exact double errors of the candidates in `set` (bit i: candidate i),
 * eight lanes at a time, into err[i]: the reference's arithmetic, so each
 * is the reference's sum (argument 2 of pn_fast_internal.h). With norm not
 * NULL, *norm = sum wd[e]^2 in element order, a chain beside the first
 * batch. */
static void rescore(const double *wd, int G, int z, const cands512 *c, uint64_t set, double *err,
                    double *norm)
{
    const __m512d lo = _mm512_set1_pd((double)-z), hi = _mm512_set1_pd((double)(z - 1));
    double nrm = 0.0;
    for (int batch = 0; set; batch++) {
        double s8[8] __attribute__((aligned(64))), r8[8] __attribute__((aligned(64)));
        int idx[8], cnt = 0;
        for (; set && cnt < 8; cnt++) {
            idx[cnt] = __builtin_ctzll(set);
            set &= set - 1;
            s8[cnt] = c->s[idx[cnt]];
            r8[cnt] = 1.0 / s8[cnt];
        }
        for (int j = cnt; j < 8; j++)
            s8[j] = r8[j] = 1.0;
        const __m512d S = _mm512_load_pd(s8), R = _mm512_load_pd(r8);
        __m512d E = _mm512_setzero_pd();
        if (norm && batch == 0) {
            for (int e = 0; e < G; e++) {
                const __m512d wv = _mm512_set1_pd(wd[e]);
                __m512d q = _mm512_min_pd(_mm512_max_pd(_mm512_mul_pd(wv, R), lo), hi);
                __m512d d =
                    _mm512_sub_pd(wv, _mm512_mul_pd(S, _mm512_roundscale_pd(q, ROUND_NEAREST)));
                E = _mm512_add_pd(E, _mm512_mul_pd(d, d));
                nrm = nrm + wd[e] * wd[e];
            }
            *norm = nrm;
        } else {
            for (int e = 0; e < G; e++) {
                const __m512d wv = _mm512_set1_pd(wd[e]);
                __m512d q = _mm512_min_pd(_mm512_max_pd(_mm512_mul_pd(wv, R), lo), hi);
                __m512d d =
                    _mm512_sub_pd(wv, _mm512_mul_pd(S, _mm512_roundscale_pd(q, ROUND_NEAREST)));
                E = _mm512_add_pd(E, _mm512_mul_pd(d, d));
            }
        }
        double out8[8] __attribute__((aligned(64)));
        _mm512_store_pd(out8, E);
        for (int j = 0; j < cnt; j++)
            err[idx[j]] = out8[j];
    }
}

/* The winner by the float-scored search (argument 3 of pn_fast_internal.h):
 * candidates 0..31 in two 16-float vectors and 32..35 of four elements in a
 * third, scored in float; then the candidates the float scores cannot tell from the
 * best rescored exactly and picked as the reference does. err receives the
 * exact double sum of every rescored candidate, the winner among them when
 * err_wanted (the sums of quant_row.h); with norm not NULL, *norm = sum
 * wd[e]^2 in element order. */
static inline __attribute__((always_inline)) void
float_scores(const float *w, int G, int z, const cands512 *c, __m512 *F0, __m512 *F1, __m128 *F2)
{
    /* s is a half value (or +inf): exact in float; r = fl32(1/s) */
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 S0 =
        _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(_mm512_load_pd(c->s))),
                           _mm512_cvtpd_ps(_mm512_load_pd(c->s + 8)), 1);
    const __m512 S1 =
        _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(_mm512_load_pd(c->s + 16))),
                           _mm512_cvtpd_ps(_mm512_load_pd(c->s + 24)), 1);
    const __m512 R0 = _mm512_div_ps(one, S0), R1 = _mm512_div_ps(one, S1);
    /* candidates 32..35 of four elements at once: lane 4j + i holds
     * candidate 32 + i and element e + j, so a vector is full */
    const __m512 S2 = _mm512_broadcast_f32x4(_mm256_cvtpd_ps(_mm256_load_pd(c->s + 32)));
    const __m512 R2 = _mm512_div_ps(one, S2);
    const __m512i spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    /* the code k = clamp(rint(w * r), -z, z - 1): the exact product plus
     * C = 1.5 * 2^23 rounded once to an integer by the fused addition,
     * clamped as C + k, and C taken off again (exactly) */
    const __m512 mg = _mm512_set1_ps(PN_FAST_FLOAT_RINT_MAGIC);
    const __m512 lo = _mm512_set1_ps(PN_FAST_FLOAT_RINT_MAGIC - (float)z);
    const __m512 hi = _mm512_set1_ps(PN_FAST_FLOAT_RINT_MAGIC + (float)(z - 1));
    __m512 E0 = _mm512_setzero_ps(), E1 = E0, E2 = E0;
#define PN_FLOAT_STEP(wv)                                                                          \
    do {                                                                                           \
        __m512 q0 = _mm512_min_ps(_mm512_max_ps(_mm512_fmadd_ps(wv, R0, mg), lo), hi);             \
        __m512 q1 = _mm512_min_ps(_mm512_max_ps(_mm512_fmadd_ps(wv, R1, mg), lo), hi);             \
        __m512 d0 = _mm512_fnmadd_ps(S0, _mm512_sub_ps(q0, mg), wv);                               \
        __m512 d1 = _mm512_fnmadd_ps(S1, _mm512_sub_ps(q1, mg), wv);                               \
        E0 = _mm512_fmadd_ps(d0, d0, E0);                                                          \
        E1 = _mm512_fmadd_ps(d1, d1, E1);                                                          \
    } while (0)
    for (int e = 0; e < G; e += 4) { /* G is 64 or 80 */
        PN_FLOAT_STEP(_mm512_set1_ps(w[e]));
        PN_FLOAT_STEP(_mm512_set1_ps(w[e + 1]));
        PN_FLOAT_STEP(_mm512_set1_ps(w[e + 2]));
        PN_FLOAT_STEP(_mm512_set1_ps(w[e + 3]));
        const __m512 w4 =
            _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_loadu_ps(w + e)));
        __m512 q2 = _mm512_min_ps(_mm512_max_ps(_mm512_fmadd_ps(w4, R2, mg), lo), hi);
        __m512 d2 = _mm512_fnmadd_ps(S2, _mm512_sub_ps(q2, mg), w4);
        E2 = _mm512_fmadd_ps(d2, d2, E2);
    }
#undef PN_FLOAT_STEP
    /* the four running sums of candidates 32..35: (j0 + j2) + (j1 + j3) */
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(E2), _mm512_extractf32x8_ps(E2, 1));
    *F0 = E0;
    *F1 = E1;
    *F2 = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* The winner by the float-scored search (argument 3 of pn_fast_internal.h).
 * err receives the exact double sum of every rescored candidate, the winner
 * among them when err_wanted; with norm not NULL, *norm = sum wd[e]^2 in
 * element order. (The row's sums of quant_row.h are added after a batch of
 * groups: pn_search_sums_batch.) */
static inline int float_search(const float *w, const double *wd, int G, int z, const cands512 *c,
                               double *err, int err_wanted, double *norm)
{
    __m512 E0, E1;
    __m128 E2;
    float_scores(w, G, z, c, &E0, &E1, &E2);
    /* pn_search_survivors: a skipped lane's score is NaN (s = +inf), which
     * min ignores (it returns its second operand when either is NaN) and no
     * comparison admits; f_i <= thr in double is f_i <= thr rounded down to
     * float, f_i being a float */
    const __m512 mn = _mm512_min_ps(E1, _mm512_min_ps(E0, _mm512_set1_ps(__builtin_inff())));
    __m128 m4 = _mm_min_ps(E2, _mm512_castps512_ps128(_mm512_set1_ps(_mm512_reduce_min_ps(mn))));
    m4 = _mm_min_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_min_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const double thr = (double)_mm_cvtss_f32(m4) * PN_SEARCH_REL + PN_SEARCH_ABS;
    const __m128 thr4 = _mm_cvt_roundsd_ss(_mm_setzero_ps(), _mm_set_sd(thr),
                                           _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512 t = _mm512_broadcastss_ps(thr4);
    const uint64_t set = (uint64_t)_mm512_cmp_ps_mask(E0, t, _CMP_LE_OQ) |
                         (uint64_t)_mm512_cmp_ps_mask(E1, t, _CMP_LE_OQ) << 16 |
                         (uint64_t)_mm_cmp_ps_mask(E2, _mm512_castps512_ps128(t), _CMP_LE_OQ) << 32;
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
quantize_group_avx512(const pn_params *p, const float *w, uint8_t *block, int *bad_index,
                      double *err_out, double *norm_out, double *wd, double *s_out)
{
    const int G = p->group, z = p->z;
    const __m512i expf = _mm512_set1_epi32(0x7f800000);
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 vmax = _mm512_set1_ps(-INFINITY), vmin = _mm512_set1_ps(INFINITY);
    __m512 vamax = _mm512_setzero_ps();
    for (int e = 0; e < G; e += 16) {
        __m512i b = _mm512_loadu_si512((const void *)(w + e));
        __m512i ex = _mm512_and_si512(b, expf);
        if (_mm512_cmpeq_epi32_mask(ex, expf)) {
            return pn_fast_group_refused(p, w, bad_index);
        }
        __m512 v = _mm512_castsi512_ps(b);
        vmax = _mm512_max_ps(vmax, v);
        vmin = _mm512_min_ps(vmin, v);
        vamax = _mm512_max_ps(vamax, _mm512_and_ps(v, absmask));
        _mm512_store_pd(wd + e, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
        _mm512_store_pd(wd + e + 8, _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)));
    }
    const double amax = _mm512_reduce_max_ps(vamax);
    const double max = _mm512_reduce_max_ps(vmax), min = _mm512_reduce_min_ps(vmin);
    *s_out = 0.0; /* until a winner is found: decodes to zeros */
    if (amax == 0.0) {
        if (norm_out)
            *norm_out = *err_out = group_norm(wd, G);
        pn_fast_zero_block(p, block);
        return PN_OK;
    }
    const double sigma = (fabs(min) > max) ? 1.0 : -1.0;

    cands512 c;
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

    const __m512d vs = _mm512_set1_pd(sb), vzd = _mm512_set1_pd((double)z);
    const __m512d lo8 = _mm512_set1_pd((double)-z), hi8 = _mm512_set1_pd((double)(z - 1));
    uint8_t codes[80];
    /* The winner's codes from w * fl(1/s) (argument 2: the reference's
     * codes unless w/s is exactly a half-way point j + 1/2, that is
     * 2w == (2k +- 1)s, every product exact); at such a point the
     * reference's division decides. */
    const __m512d vr = _mm512_set1_pd(1.0 / sb), vs2 = _mm512_set1_pd(2.0 * sb);
    __mmask8 halfway = 0;
    for (int e = 0; e < G; e += 8) {
        const __m512d wv = _mm512_load_pd(wd + e), w2 = _mm512_add_pd(wv, wv);
        __m512d q = _mm512_min_pd(_mm512_max_pd(_mm512_mul_pd(wv, vr), lo8), hi8);
        __m512d k = _mm512_roundscale_pd(q, ROUND_NEAREST);
        halfway |= _mm512_cmp_pd_mask(w2, _mm512_fmadd_pd(k, vs2, vs), _CMP_EQ_OQ) |
                   _mm512_cmp_pd_mask(w2, _mm512_fmsub_pd(k, vs2, vs), _CMP_EQ_OQ);
        __m128i n8 = _mm256_cvtepi32_epi8(_mm512_cvtpd_epi32(_mm512_add_pd(k, vzd)));
        _mm_storel_epi64((__m128i *)(codes + e), n8);
    }
    if (!halfway) {
        pn_fast_pack_block_mul(p, pn_fast_half_bits(sb), codes, block);
        return PN_OK;
    }
    /* The winner's codes with the reference's exact division. */
    for (int e = 0; e < G; e += 8) {
        __m512d q = _mm512_div_pd(_mm512_load_pd(wd + e), vs);
        q = _mm512_min_pd(_mm512_max_pd(q, lo8), hi8);
        __m512d n = _mm512_add_pd(_mm512_roundscale_pd(q, ROUND_NEAREST), vzd);
        __m128i n8 = _mm256_cvtepi32_epi8(_mm512_cvtpd_epi32(n));
        _mm_storel_epi64((__m128i *)(codes + e), n8);
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
    double wd[80] __attribute__((aligned(64)));
    double sb[PN_SUMS_BATCH];
    const int64_t ng = n / G;
    for (int64_t g0 = 0; g0 < ng; g0 += PN_SUMS_BATCH) {
        const int nb = ng - g0 < PN_SUMS_BATCH ? (int)(ng - g0) : PN_SUMS_BATCH;
        for (int i = 0; i < nb; i++) {
            const int64_t g = g0 + i;
            int bad = 0;
            pn_status st = quantize_group_avx512(p, x + g * G, out + g * PN_BLOCK_BYTES, &bad, NULL,
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

pn_status pn_quantize_row_avx512(const pn_params *p, const float *x, int64_t n, uint8_t *out,
                                 int64_t *bad_col, double *blk_err, double *blk_norm)
{
    return quantize_row(p, x, n, out, bad_col, blk_err, blk_norm);
}
