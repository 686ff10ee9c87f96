/* The AVX2 PN quantizer: one lane per candidate scale, the 36 candidates in
 * nine 4-double vectors; for each element in order every lane adds its own
 * error term, so each candidate's error is the reference's sum in the
 * reference's order. Exactness: pn_fast_internal.h. Compiled with -mavx2
 * -mf16c; called only when pn_path_available(PN_PATH_AVX2). */
#include <immintrin.h>
#include <math.h>

#include "quant/pn_fast_internal.h"

#define ROUND_NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define NVEC (PN_N_CANDIDATES / 4)

typedef struct cands256 {
    double s[PN_FAST_LANES] __attribute__((aligned(32)));
    double r[PN_FAST_LANES] __attribute__((aligned(32)));
    uint64_t valid;
    bool any_overflow;
} cands256;

static inline void make_candidates(double sigma, double amax, int z, cands256 *c)
{
    const __m256d vsig = _mm256_set1_pd(sigma), vamax = _mm256_set1_pd(amax);
    const __m256d vz = _mm256_set1_pd((double)z), one = _mm256_set1_pd(1.0);
    const __m256d expmask = _mm256_castsi256_pd(_mm256_set1_epi64x((long long)PN_FAST_EXP_MASK));
    const __m256d absmask = _mm256_castsi256_pd(_mm256_set1_epi64x((long long)~PN_FAST_SIGN_MASK));
    const __m256d minhalf = _mm256_set1_pd(PN_FAST_MIN_NORMAL_HALF);
    const __m256d split = _mm256_set1_pd(PN_FAST_SPLIT);
    const __m256d halfmax = _mm256_set1_pd(PN_FAST_HALF_MAX), zero = _mm256_setzero_pd();
    uint64_t valid = 0, overflow = 0;
    for (int v = 0; v < NVEC; v++) {
        __m256d m = _mm256_load_pd(pn_fast_m + 4 * v);
        /* t = sigma * m * amax / z, left to right as in the reference */
        __m256d t = _mm256_div_pd(_mm256_mul_pd(_mm256_mul_pd(vsig, m), vamax), vz);
        __m256d a = _mm256_and_pd(t, absmask);
        __m256d lead = _mm256_max_pd(_mm256_and_pd(a, expmask), minhalf);
        /* |t| < 2^127 (amax is a float), so magic stays finite and y > 65504
         * is exactly the reference's overflow test |t| >= 65520 */
        __m256d magic = _mm256_mul_pd(lead, split);
        __m256d y = _mm256_sub_pd(_mm256_add_pd(a, magic), magic);
        __m256d ovf = _mm256_cmp_pd(y, halfmax, _CMP_GT_OQ);
        __m256d ok = _mm256_andnot_pd(ovf, _mm256_cmp_pd(y, zero, _CMP_NEQ_OQ));
        __m256d s = _mm256_blendv_pd(one, _mm256_mul_pd(y, vsig), ok);
        _mm256_store_pd(c->s + 4 * v, s);
        _mm256_store_pd(c->r + 4 * v, _mm256_div_pd(one, s));
        valid |= (uint64_t)_mm256_movemask_pd(ok) << (4 * v);
        overflow |= (uint64_t)_mm256_movemask_pd(ovf) << (4 * v);
    }
    c->valid = valid;
    c->any_overflow = overflow != 0;
}

/* err[i] = the reference's error sum of candidate i (garbage where invalid):
 * lane i adds element e's term before element e+1's, as the reference does.
 * With_norm (a constant at each call): *norm = sum wd[e]^2 in element order,
 * a scalar chain hidden in the loop's latency. */
static inline __attribute__((always_inline)) void candidate_errors(const double *wd, int G, int z,
                                                                   const cands256 *c, double *err,
                                                                   const int with_norm,
                                                                   double *norm)
{
    double nrm = 0.0;
    const __m256d lo = _mm256_set1_pd((double)-z), hi = _mm256_set1_pd((double)(z - 1));
    __m256d S[NVEC], R[NVEC], E[NVEC];
    for (int v = 0; v < NVEC; v++) {
        S[v] = _mm256_load_pd(c->s + 4 * v);
        R[v] = _mm256_load_pd(c->r + 4 * v);
        E[v] = _mm256_setzero_pd();
    }
    for (int e = 0; e < G; e++) {
        const __m256d wv = _mm256_set1_pd(wd[e]);
        for (int v = 0; v < NVEC; v++) {
            __m256d q = _mm256_mul_pd(wv, R[v]);
            q = _mm256_min_pd(_mm256_max_pd(q, lo), hi);
            __m256d k = _mm256_round_pd(q, ROUND_NEAREST);
            __m256d d = _mm256_sub_pd(wv, _mm256_mul_pd(S[v], k));
            E[v] = _mm256_add_pd(E[v], _mm256_mul_pd(d, d));
        }
        if (with_norm)
            nrm = nrm + wd[e] * wd[e];
    }
    for (int v = 0; v < NVEC; v++)
        _mm256_storeu_pd(err + 4 * v, E[v]);
    if (with_norm)
        *norm = nrm;
}

/* sum wd[e]^2 in element order (groups that are not searched). */
static double group_norm(const double *wd, int G)
{
    double nrm = 0.0;
    for (int e = 0; e < G; e++)
        nrm = nrm + wd[e] * wd[e];
    return nrm;
}

static pn_status quantize_group_avx2(const pn_params *p, const float *w, uint8_t *block,
                                     int *bad_index, double *err_out, double *norm_out)
{
    const int G = p->group, z = p->z;
    const __m256i expf = _mm256_set1_epi32(0x7f800000);
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    double wd[80] __attribute__((aligned(32)));
    __m256 vmax = _mm256_set1_ps(-INFINITY), vmin = _mm256_set1_ps(INFINITY);
    __m256 vamax = _mm256_setzero_ps();
    for (int e = 0; e < G; e += 8) {
        __m256i b = _mm256_loadu_si256((const __m256i *)(w + e));
        __m256i ex = _mm256_and_si256(b, expf);
        if (_mm256_movemask_epi8(_mm256_cmpeq_epi32(ex, expf)))
            return pn_fast_group_refused(p, w, bad_index);
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
    if (norm_out)
        candidate_errors(wd, G, z, &c, err, 1, norm_out);
    else
        candidate_errors(wd, G, z, &c, err, 0, NULL);
    const int best = pn_fast_pick(err, c.valid);
    const double sb = c.s[best];
    if (err_out)
        *err_out = err[best];

    /* The winner's codes with the reference's exact division. */
    const __m256d vs = _mm256_set1_pd(sb), vzd = _mm256_set1_pd((double)z);
    const __m256d lo = _mm256_set1_pd((double)-z), hi = _mm256_set1_pd((double)(z - 1));
    uint8_t codes[80];
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

pn_status pn_quantize_row_avx2(const pn_params *p, const float *x, int64_t n, uint8_t *out,
                               int64_t *bad_col, double *blk_err, double *blk_norm)
{
    const int sums = blk_err && blk_norm;
    for (int64_t g = 0; g < n / p->group; g++) {
        int bad = 0;
        pn_status st = quantize_group_avx2(p, x + g * p->group, out + g * PN_BLOCK_BYTES, &bad,
                                           sums ? blk_err + g : NULL, sums ? blk_norm + g : NULL);
        if (st != PN_OK) {
            if (bad_col)
                *bad_col = g * p->group + bad;
            return st;
        }
    }
    return PN_OK;
}
