/* q4_K.c - ggml's q4_K: 256 weights as eight sub-blocks of 32, each
 * w = (d*sc)*q - dmin*m with 4-bit codes q and 6-bit sc, m.
 *
 * This is the reference encoder (pn_quantize_row_q4_K_ref): plain code, the
 * definition the fast paths (kquants_simd.h) reproduce byte for byte.
 *
 * Encoder, per super-block (all errors are plain squared errors, the
 * quantity the project measures):
 * 1. Each sub-block gets a continuous fit w ~ a*q - b (a, b >= 0): for a few
 *    trial steps around range/15 and trial low ends at or a little above the
 *    minimum, the codes are rounded, then a and b are fitted to them by least
 *    squares (b clamped at 0, as the format cannot add an offset); the best
 *    fit gets one more round/refit pass.
 * 2. d = fp16(max a / 63), dmin = fp16(max b / 63).
 * 3. Given d and dmin, each sub-block tries the integer sc and m around
 *    a/d and b/dmin (3 x 3 pairs), re-deriving its codes from the exact
 *    float step and offset the decoder will use, and keeps the pair with
 *    the smallest error.
 * 4. d and dmin are refitted by least squares to all codes and integer
 *    scales, rounded to fp16, and step 3 runs again; this repeats while the
 *    block's error goes down (at most a few times).
 */
#include <math.h>
#include <string.h>

#include "quant/fp16.h"
#include "quant/kquants.h"
#include "quant/kquants_impl.h"

#define Q4K_SUB KQ_Q4K_SUB
#define Q4K_NSUB KQ_Q4K_NSUB
#define Q4K_ROUNDS 3

/* Trial steps for stage 1: range / (15 + f). */
static const float q4k_trial[] = { -1.0f, -0.75f, -0.5f, -0.25f, 0.0f, 0.25f, 0.5f, 0.75f, 1.0f };
/* ... each with the low end at min, or raised by 1/4 or 1/2 of a step (the
 * lowest weights then share code 0: clipping a lone low weight can pay). */
#define Q4K_NSHIFT 3
#define Q4K_NTRIAL (int)(sizeof q4k_trial / sizeof q4k_trial[0])

void pn_q4_K_get_scale_min(const uint8_t s[12], int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

void pn_q4_K_set_scale_min(uint8_t s[12], int j, int sc, int m)
{
    if (j < 4) {
        s[j] = (uint8_t)((s[j] & 0xc0) | (sc & 63));
        s[j + 4] = (uint8_t)((s[j + 4] & 0xc0) | (m & 63));
    } else {
        s[j + 4] = (uint8_t)((sc & 15) | ((m & 15) << 4));
        s[j - 4] = (uint8_t)((s[j - 4] & 63) | ((sc >> 4) << 6));
        s[j] = (uint8_t)((s[j] & 63) | ((m >> 4) << 6));
    }
}

/* Squared error of w ~ step*q - off with the codes rounded from
 * (x + off) / step, computed with the decoder's own float expression. */
static float q4k_error(const float *x, float step, float off)
{
    const kq_v4 inv = kq_set1(step > 0.0f ? 1.0f / step : 0.0f);
    const kq_v4 vs = kq_set1(step), vo = kq_set1(off);
    const kq_v4 lo = kq_set1(0.0f), hi = kq_set1(15.0f);
    kq_v4 acc = lo;
    for (int i = 0; i < Q4K_SUB; i += 4) {
        kq_v4 xv = kq_load(x + i);
        kq_v4 c = kq_round4(kq_clamp4(kq_mul(kq_add(xv, vo), inv), lo, hi));
        kq_v4 diff = kq_sub(xv, kq_sub(kq_mul(vs, c), vo));
        acc = kq_add(acc, kq_mul(diff, diff));
    }
    return kq_hsum(acc);
}

/* The codes q4k_error scored, with the same arithmetic. */
static void q4k_codes(const float *x, float step, float off, uint8_t *q)
{
    const float inv = step > 0.0f ? 1.0f / step : 0.0f;
    for (int i = 0; i < Q4K_SUB; i++)
        q[i] = (uint8_t)kq_round(kq_clamp((x[i] + off) * inv, 0.0f, 15.0f));
}

typedef struct q4k_fit {
    double a, c; /* w ~ a*q + c, c <= 0 */
    double err;
} q4k_fit;

/* Least-squares a, c for fixed codes, with c <= 0 enforced. */
static q4k_fit q4k_lsq(double sx, double sxx, double sq, double sqq, double sxq)
{
    const double n = Q4K_SUB;
    q4k_fit f = { 0.0, 0.0, INFINITY };
    double det = n * sqq - sq * sq;
    if (det <= 0.0)
        return f;
    double a = (n * sxq - sq * sx) / det;
    double c = (sx - a * sq) / n;
    if (c > 0.0) {
        c = 0.0;
        a = sxq / sqq;
    }
    if (a < 0.0) {
        a = 0.0;
        c = sx / n < 0.0 ? sx / n : 0.0;
    }
    f.a = a;
    f.c = c;
    f.err = sxx + a * a * sqq + n * c * c - 2.0 * a * sxq - 2.0 * c * sx + 2.0 * a * c * sq;
    return f;
}

/* Code sums for w ~ q*step + lo, codes rounded from (x - lo) * inv. */
static void q4k_sums(const float *x, float lo, float inv, double *sq, double *sqq, double *sxq)
{
    const kq_v4 vlo = kq_set1(lo), vinv = kq_set1(inv);
    const kq_v4 zero = kq_set1(0.0f), hi = kq_set1(15.0f);
    kq_v4 aq = zero, aqq = zero, axq = zero;
    for (int i = 0; i < Q4K_SUB; i += 4) {
        kq_v4 xv = kq_load(x + i);
        kq_v4 c = kq_round4(kq_clamp4(kq_mul(kq_sub(xv, vlo), vinv), zero, hi));
        aq = kq_add(aq, c);
        aqq = kq_add(aqq, kq_mul(c, c));
        axq = kq_add(axq, kq_mul(xv, c));
    }
    *sq = (double)kq_hsum(aq);
    *sqq = (double)kq_hsum(aqq);
    *sxq = (double)kq_hsum(axq);
}

/* Stage 1: continuous a (step) and b (min, subtracted) for one sub-block. */
static void q4k_fit_sub(const float *x, float *a_out, float *b_out)
{
    float mn = x[0], mx = x[0];
    double sx = 0.0, sxx = 0.0;
    for (int i = 0; i < Q4K_SUB; i++) {
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
        sx += x[i];
        sxx += (double)x[i] * x[i];
    }
    const float lo = mn < 0.0f ? mn : 0.0f;
    if (!(mx > lo)) { /* every weight equals lo <= 0 */
        *a_out = 0.0f;
        *b_out = -lo;
        return;
    }
    const float range = mx - lo;
    q4k_fit best = { 0.0, 0.0, INFINITY };
    for (int u = 0; u < Q4K_NSHIFT; u++) {
        for (int t = 0; t < Q4K_NTRIAL; t++) {
            const float inv = (15.0f + q4k_trial[t]) / range;
            double sq, sqq, sxq;
            q4k_sums(x, lo + 0.25f * (float)u / inv, inv, &sq, &sqq, &sxq);
            q4k_fit f = q4k_lsq(sx, sxx, sq, sqq, sxq);
            if (f.err < best.err)
                best = f;
        }
    }
    if (!(best.err < INFINITY)) { /* cannot happen with mx > lo; be safe */
        *a_out = range / 15.0f;
        *b_out = -lo;
        return;
    }
    if (best.a > 0.0) { /* one more round-and-refit pass */
        double sq, sqq, sxq;
        q4k_sums(x, (float)best.c, (float)(1.0 / best.a), &sq, &sqq, &sxq);
        q4k_fit f = q4k_lsq(sx, sxx, sq, sqq, sxq);
        if (f.err < best.err)
            best = f;
    }
    *a_out = (float)best.a;
    *b_out = (float)-best.c;
}

typedef struct q4k_state {
    uint16_t hd, hm; /* fp16 d and dmin */
    int sc[Q4K_NSUB], m[Q4K_NSUB];
    uint8_t q[256];
    float err;
} q4k_state;

static int q4k_nearest(float v, int hi)
{
    return (int)kq_round(kq_clamp(v, 0.0f, (float)hi));
}

/* Stage 3: best integer sc, m per sub-block for the given fp16 d, dmin. */
static void q4k_integers(const float *x, const float *a, const float *b, q4k_state *s)
{
    const float d = pn_fp16_to_float(s->hd), dm = pn_fp16_to_float(s->hm);
    s->err = 0.0f;
    for (int j = 0; j < Q4K_NSUB; j++) {
        const float *xj = x + j * Q4K_SUB;
        int sc0 = d > 0.0f ? q4k_nearest(a[j] / d, 63) : 0;
        int m0 = dm > 0.0f ? q4k_nearest(b[j] / dm, 63) : 0;
        int sc_lo = sc0 > 0 ? sc0 - 1 : 0, sc_hi = sc0 < 63 ? sc0 + 1 : 63;
        int m_lo = m0 > 0 ? m0 - 1 : 0, m_hi = m0 < 63 ? m0 + 1 : 63;
        if (d == 0.0f)
            sc_lo = sc_hi = 0;
        if (dm == 0.0f)
            m_lo = m_hi = 0;
        float best = INFINITY;
        s->sc[j] = sc_lo;
        s->m[j] = m_lo;
        for (int sc = sc_lo; sc <= sc_hi; sc++) {
            for (int m = m_lo; m <= m_hi; m++) {
                float e = q4k_error(xj, d * (float)sc, dm * (float)m);
                if (e < best) {
                    best = e;
                    s->sc[j] = sc;
                    s->m[j] = m;
                }
            }
        }
        q4k_codes(xj, d * (float)s->sc[j], dm * (float)s->m[j], s->q + j * Q4K_SUB);
        s->err += best;
    }
}

/* Stage 4: least-squares d, dmin for the current integers and codes.
 * Returns 0 when there is no usable refit. */
static int q4k_refit(const float *x, const q4k_state *s, uint16_t *hd, uint16_t *hm)
{
    double saa = 0, sab = 0, sbb = 0, sxa = 0, sxb = 0;
    for (int j = 0; j < Q4K_NSUB; j++) {
        double ta = 0, taa = 0, txa = 0, tx = 0;
        for (int i = 0; i < Q4K_SUB; i++) {
            double qa = s->q[j * Q4K_SUB + i];
            double xv = x[j * Q4K_SUB + i];
            ta += qa;
            taa += qa * qa;
            txa += xv * qa;
            tx += xv;
        }
        double sc = s->sc[j], m = s->m[j];
        saa += sc * sc * taa;
        sab += sc * m * ta;
        sbb += m * m * Q4K_SUB;
        sxa += sc * txa;
        sxb += m * tx;
    }
    return kq_q4k_solve(saa, sab, sbb, sxa, sxb, s->hm, hd, hm);
}

static pn_status q4k_block(const float *x, uint8_t *blk, int *bad)
{
    if ((*bad = kq_first_nonfinite(x, PN_QK_K)) >= 0)
        return PN_ERR_NONFINITE;
    float a[Q4K_NSUB], b[Q4K_NSUB], amax = 0.0f, bmax = 0.0f;
    for (int j = 0; j < Q4K_NSUB; j++) {
        q4k_fit_sub(x + j * Q4K_SUB, &a[j], &b[j]);
        amax = a[j] > amax ? a[j] : amax;
        bmax = b[j] > bmax ? b[j] : bmax;
    }
    q4k_state cur, best;
    cur.hd = kq_q4k_super_scale(amax);
    cur.hm = kq_q4k_super_scale(bmax);
    if ((cur.hd & 0x7c00u) == 0x7c00u || (cur.hm & 0x7c00u) == 0x7c00u) {
        *bad = 0;
        return PN_ERR_SCALE_OVERFLOW;
    }
    q4k_integers(x, a, b, &cur);
    best = cur;
    for (int r = 1; r < Q4K_ROUNDS; r++) {
        uint16_t hd, hm;
        if (!q4k_refit(x, &best, &hd, &hm) || (hd == best.hd && hm == best.hm))
            break;
        cur.hd = hd;
        cur.hm = hm;
        q4k_integers(x, a, b, &cur);
        if (!(cur.err < best.err))
            break;
        best = cur;
    }
    kq_q4k_pack(best.hd, best.hm, best.sc, best.m, best.q, blk);
    return PN_OK;
}

pn_status pn_quantize_row_q4_K_ref(const float *x, int64_t n, uint8_t *out, int64_t *bad_col)
{
    if (n < 0 || n % PN_QK_K != 0) {
        if (bad_col)
            *bad_col = -1;
        return PN_ERR_USAGE;
    }
    for (int64_t b = 0; b < n / PN_QK_K; b++) {
        int bad = 0;
        pn_status st = q4k_block(x + b * PN_QK_K, out + b * sizeof(block_q4_K), &bad);
        if (st != PN_OK) {
            if (bad_col)
                *bad_col = b * PN_QK_K + bad;
            return st;
        }
    }
    return PN_OK;
}

void pn_dequantize_row_q4_K(const uint8_t *in, float *y, int64_t n)
{
    for (int64_t b = 0; b < n / PN_QK_K; b++) {
        const uint8_t *blk = in + b * sizeof(block_q4_K);
        const float d = pn_fp16_to_float(pn_load_u16le(blk + offsetof(block_q4_K, d)));
        const float dmin = pn_fp16_to_float(pn_load_u16le(blk + offsetof(block_q4_K, dmin)));
        const uint8_t *scales = blk + offsetof(block_q4_K, scales);
        const uint8_t *qs = blk + offsetof(block_q4_K, qs);
        float *yb = y + b * PN_QK_K;
        for (int c = 0; c < 4; c++) {
            int sc, m;
            pn_q4_K_get_scale_min(scales, 2 * c, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            pn_q4_K_get_scale_min(scales, 2 * c + 1, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++)
                yb[64 * c + l] = d1 * (float)(qs[32 * c + l] & 15) - m1;
            for (int l = 0; l < 32; l++)
                yb[64 * c + 32 + l] = d2 * (float)(qs[32 * c + l] >> 4) - m2;
        }
    }
}
