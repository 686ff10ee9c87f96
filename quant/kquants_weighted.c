/* kquants_weighted.c - the weighted q4_K / q3_K search (kquants_weighted.h).
 *
 * Scalar code, double sums, so that it is its own reference. The search
 * works with weights floored at 1e-7 of the block's largest (a column the
 * model never feeds still gets a value near its neighbours rather than an
 * arbitrary one); the choice between candidates uses the weights as given.
 *
 * q4_K, per super-block:
 * 1. each sub-block of 32 gets w ~ a*q - b by weighted least squares on the
 *    codes of 13 trial steps around range/15 times 3 low ends, then two
 *    round-and-refit passes;
 * 2. d = fp16(max a / 63), dmin = fp16(max b / 63) (as the reference);
 * 3. for the fp16 d and dmin, each sub-block tries the 5 x 5 integer pairs
 *    (sc, m) around a/d and b/dmin with the decoder's float arithmetic and
 *    keeps the least weighted error (codes rounded to nearest, which is
 *    optimal per weight whatever its importance);
 * 4. d and dmin are refitted by weighted least squares to the codes and
 *    integers, and step 3 runs again while the error goes down (6 rounds).
 * q3_K, per super-block:
 * 1. each sub-block of 16 gets a signed scale from 30 trial positions of its
 *    largest weight (codes rounded, scale refitted by weighted least
 *    squares), then two round-and-refit passes;
 * 2. d = fp16(-S/32) from the largest, and three nearby starts;
 * 3. for each start, every sub-block tries the four integers around s/d;
 *    d is refitted by weighted least squares and step 3 repeats while the
 *    error goes down (4 rounds); the best start wins.
 */
#include "quant/kquants_weighted.h"

#include <math.h>
#include <string.h>

#include "quant/fp16.h"
#include "quant/kquants.h"
#include "quant/kquants_impl.h"
#include "quant/types.h"

#define QK PN_QK_K

/* The search weights of one super-block: v floored at 1e-7 of its largest.
 * Returns 0 when every weight is 0 (nothing to search for). */
static int search_weights(const float *v, double *ve)
{
    double mx = 0.0;
    for (int i = 0; i < QK; i++)
        mx = (double)v[i] > mx ? (double)v[i] : mx;
    if (!(mx > 0.0))
        return 0;
    const double fl = 1e-7 * mx;
    for (int i = 0; i < QK; i++)
        ve[i] = (double)v[i] > fl ? (double)v[i] : fl;
    return 1;
}

/* sum v (x - y)^2 over a decoded block. */
static double block_error(const float *x, const float *y, const float *v)
{
    double s = 0.0;
    for (int i = 0; i < QK; i++) {
        double d = (double)x[i] - (double)y[i];
        s += (double)v[i] * (d * d);
    }
    return s;
}

/* ---- q4_K ---------------------------------------------------------------- */

#define W4_SUB KQ_Q4K_SUB
#define W4_NSUB KQ_Q4K_NSUB
#define W4_ROUNDS 6

static const float w4_trial[] = { -1.5f, -1.25f, -1.0f, -0.75f, -0.5f, -0.25f, 0.0f,
                                  0.25f, 0.5f,   0.75f, 1.0f,   1.25f, 1.5f };
#define W4_NTRIAL (int)(sizeof w4_trial / sizeof w4_trial[0])

static uint8_t w4_code(float x, float off, float inv)
{
    return (uint8_t)kq_round(kq_clamp((x + off) * inv, 0.0f, 15.0f));
}

/* Weighted error of w ~ step*q - off, codes from (x + off) / step. */
static double w4_error(const float *x, const double *v, float step, float off)
{
    const float inv = step > 0.0f ? 1.0f / step : 0.0f;
    double s = 0.0;
    for (int i = 0; i < W4_SUB; i++) {
        float q = (float)w4_code(x[i], off, inv);
        double d = (double)x[i] - (double)(step * q - off);
        s += v[i] * (d * d);
    }
    return s;
}

typedef struct w4_fit {
    double a, c, err; /* w ~ a*q + c, c <= 0 */
} w4_fit;

/* Weighted least squares for fixed codes from (x - lo) * inv. */
static w4_fit w4_lsq(const float *x, const double *v, float lo, float inv)
{
    double sw = 0, sx = 0, sxx = 0, sq = 0, sqq = 0, sxq = 0;
    for (int i = 0; i < W4_SUB; i++) {
        double q = (double)w4_code(x[i], -lo, inv), w = v[i], xv = x[i];
        sw += w;
        sx += w * xv;
        sxx += w * xv * xv;
        sq += w * q;
        sqq += w * q * q;
        sxq += w * xv * q;
    }
    w4_fit f = { 0.0, 0.0, INFINITY };
    double det = sw * sqq - sq * sq;
    if (!(det > 0.0) || !(sw > 0.0))
        return f;
    double a = (sw * sxq - sq * sx) / det;
    double c = (sx - a * sq) / sw;
    if (c > 0.0) {
        c = 0.0;
        a = sxq / sqq;
    }
    if (a < 0.0) {
        a = 0.0;
        c = sx / sw < 0.0 ? sx / sw : 0.0;
    }
    f.a = a;
    f.c = c;
    f.err = sxx + a * a * sqq + sw * c * c - 2.0 * a * sxq - 2.0 * c * sx + 2.0 * a * c * sq;
    return f;
}

static void w4_fit_sub(const float *x, const double *v, float *a_out, float *b_out)
{
    float mn = x[0], mx = x[0];
    for (int i = 1; i < W4_SUB; i++) {
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
    }
    const float lo = mn < 0.0f ? mn : 0.0f;
    if (!(mx > lo)) {
        *a_out = 0.0f;
        *b_out = -lo;
        return;
    }
    const float range = mx - lo;
    w4_fit best = { 0.0, 0.0, INFINITY };
    for (int u = 0; u < 3; u++)
        for (int t = 0; t < W4_NTRIAL; t++) {
            const float inv = (15.0f + w4_trial[t]) / range;
            w4_fit f = w4_lsq(x, v, lo + 0.25f * (float)u / inv, inv);
            if (f.err < best.err)
                best = f;
        }
    if (!(best.err < INFINITY)) {
        *a_out = range / 15.0f;
        *b_out = -lo;
        return;
    }
    for (int pass = 0; pass < 2 && best.a > 0.0; pass++) {
        w4_fit f = w4_lsq(x, v, (float)best.c, (float)(1.0 / best.a));
        if (!(f.err < best.err))
            break;
        best = f;
    }
    *a_out = (float)best.a;
    *b_out = (float)-best.c;
}

typedef struct w4_state {
    uint16_t hd, hm;
    int sc[W4_NSUB], m[W4_NSUB];
    uint8_t q[QK];
    double err;
} w4_state;

static int w4_nearest(float v, int hi)
{
    return (int)kq_round(kq_clamp(v, 0.0f, (float)hi));
}

static void w4_integers(const float *x, const double *v, const float *a, const float *b,
                        w4_state *s)
{
    const float d = pn_fp16_to_float(s->hd), dm = pn_fp16_to_float(s->hm);
    s->err = 0.0;
    for (int j = 0; j < W4_NSUB; j++) {
        const float *xj = x + j * W4_SUB;
        const double *vj = v + j * W4_SUB;
        int sc0 = d > 0.0f ? w4_nearest(a[j] / d, 63) : 0;
        int m0 = dm > 0.0f ? w4_nearest(b[j] / dm, 63) : 0;
        int sc_lo = sc0 > 2 ? sc0 - 2 : 0, sc_hi = sc0 < 61 ? sc0 + 2 : 63;
        int m_lo = m0 > 2 ? m0 - 2 : 0, m_hi = m0 < 61 ? m0 + 2 : 63;
        if (d == 0.0f)
            sc_lo = sc_hi = 0;
        if (dm == 0.0f)
            m_lo = m_hi = 0;
        double best = INFINITY;
        s->sc[j] = sc_lo;
        s->m[j] = m_lo;
        for (int sc = sc_lo; sc <= sc_hi; sc++)
            for (int m = m_lo; m <= m_hi; m++) {
                double e = w4_error(xj, vj, d * (float)sc, dm * (float)m);
                if (e < best) {
                    best = e;
                    s->sc[j] = sc;
                    s->m[j] = m;
                }
            }
        const float step = d * (float)s->sc[j], off = dm * (float)s->m[j];
        const float inv = step > 0.0f ? 1.0f / step : 0.0f;
        for (int i = 0; i < W4_SUB; i++)
            s->q[j * W4_SUB + i] = w4_code(xj[i], off, inv);
        s->err += best;
    }
}

static int w4_refit(const float *x, const double *v, const w4_state *s, uint16_t *hd, uint16_t *hm)
{
    double saa = 0, sab = 0, sbb = 0, sxa = 0, sxb = 0;
    for (int j = 0; j < W4_NSUB; j++) {
        double tw = 0, ta = 0, taa = 0, txa = 0, tx = 0;
        for (int i = 0; i < W4_SUB; i++) {
            double w = v[j * W4_SUB + i], q = s->q[j * W4_SUB + i], xv = x[j * W4_SUB + i];
            tw += w;
            ta += w * q;
            taa += w * q * q;
            txa += w * xv * q;
            tx += w * xv;
        }
        double sc = s->sc[j], m = s->m[j];
        saa += sc * sc * taa;
        sab += sc * m * ta;
        sbb += m * m * tw;
        sxa += sc * txa;
        sxb += m * tx;
    }
    return kq_q4k_solve(saa, sab, sbb, sxa, sxb, s->hm, hd, hm);
}

/* The weighted search's block into blk; 0 when its scales overflow (the
 * caller keeps the reference's then). */
static int w4_search(const float *x, const double *v, uint8_t *blk)
{
    float a[W4_NSUB], b[W4_NSUB], amax = 0.0f, bmax = 0.0f;
    for (int j = 0; j < W4_NSUB; j++) {
        w4_fit_sub(x + j * W4_SUB, v + j * W4_SUB, &a[j], &b[j]);
        amax = a[j] > amax ? a[j] : amax;
        bmax = b[j] > bmax ? b[j] : bmax;
    }
    w4_state cur, best;
    cur.hd = kq_q4k_super_scale(amax);
    cur.hm = kq_q4k_super_scale(bmax);
    if ((cur.hd & 0x7c00u) == 0x7c00u || (cur.hm & 0x7c00u) == 0x7c00u)
        return 0;
    w4_integers(x, v, a, b, &cur);
    best = cur;
    for (int r = 1; r < W4_ROUNDS; r++) {
        uint16_t hd, hm;
        if (!w4_refit(x, v, &best, &hd, &hm) || (hd == best.hd && hm == best.hm))
            break;
        cur.hd = hd;
        cur.hm = hm;
        w4_integers(x, v, a, b, &cur);
        if (!(cur.err < best.err))
            break;
        best = cur;
    }
    kq_q4k_pack(best.hd, best.hm, best.sc, best.m, best.q, blk);
    return 1;
}

pn_status pn_quantize_row_q4_K_weighted(const float *x, int64_t n, const float *v, uint8_t *out,
                                        int64_t *bad_col)
{
    /* the reference first: its status is ours, and its block a candidate */
    pn_status st = pn_quantize_row_q4_K_ref(x, n, out, bad_col);
    if (st != PN_OK)
        return st;
    double ve[QK];
    float y[QK];
    uint8_t cand[sizeof(block_q4_K)];
    for (int64_t b = 0; b < n / QK; b++) {
        const float *xb = x + b * QK, *vb = v + b * QK;
        uint8_t *blk = out + b * sizeof(block_q4_K);
        if (!search_weights(vb, ve) || !w4_search(xb, ve, cand))
            continue;
        pn_dequantize_row_q4_K(blk, y, QK);
        const double e_ref = block_error(xb, y, vb);
        pn_dequantize_row_q4_K(cand, y, QK);
        if (block_error(xb, y, vb) <= e_ref)
            memcpy(blk, cand, sizeof cand);
    }
    return PN_OK;
}

/* ---- q3_K ---------------------------------------------------------------- */

#define W3_SUB KQ_Q3K_SUB
#define W3_NSUB KQ_Q3K_NSUB
#define W3_ROUNDS 4

static int8_t w3_code(float x, float inv)
{
    return (int8_t)kq_round(kq_clamp(x * inv, -4.0f, 3.0f));
}

static double w3_error(const float *x, const double *v, float t)
{
    const float inv = t != 0.0f ? 1.0f / t : 0.0f;
    double s = 0.0;
    for (int i = 0; i < W3_SUB; i++) {
        double d = (double)x[i] - (double)(t * (float)w3_code(x[i], inv));
        s += v[i] * (d * d);
    }
    return s;
}

/* Weighted least-squares scale for the codes of x * inv; *gain receives
 * sxc^2 / scc (the error it removes), 0 when no code is non-zero. */
static double w3_lsq(const float *x, const double *v, float inv, double *gain)
{
    double sxc = 0, scc = 0;
    for (int i = 0; i < W3_SUB; i++) {
        double c = w3_code(x[i], inv);
        sxc += v[i] * (double)x[i] * c;
        scc += v[i] * c * c;
    }
    if (!(scc > 0.0)) {
        *gain = 0.0;
        return 0.0;
    }
    *gain = sxc * sxc / scc;
    return sxc / scc;
}

static float w3_fit_sub(const float *x, const double *v)
{
    float xm = 0.0f, am = 0.0f;
    for (int i = 0; i < W3_SUB; i++) {
        float a = fabsf(x[i]);
        if (a > am) {
            am = a;
            xm = x[i];
        }
    }
    if (am == 0.0f)
        return 0.0f;
    double best_gain = -1.0, best_s = xm / -4.0f;
    for (int t = 0; t < 30; t++) {
        /* positions -4.6 .. -2.8 (19) and 3.6 .. 2.6 (11) */
        float pos = t < 19 ? -4.6f + 0.1f * (float)t : 3.6f - 0.1f * (float)(t - 19);
        double g, s = w3_lsq(x, v, pos / xm, &g);
        if (g > best_gain && s != 0.0) {
            best_gain = g;
            best_s = s;
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        double g, s = w3_lsq(x, v, (float)(1.0 / best_s), &g);
        if (!(g > best_gain) || s == 0.0)
            break;
        best_gain = g;
        best_s = s;
    }
    return (float)best_s;
}

typedef struct w3_state {
    uint16_t hd;
    int k[W3_NSUB];
    int8_t q[QK];
    double err;
} w3_state;

static void w3_integers(const float *x, const double *v, const float *s, w3_state *st)
{
    const float d = pn_fp16_to_float(st->hd);
    st->err = 0.0;
    for (int j = 0; j < W3_NSUB; j++) {
        const float *xj = x + j * W3_SUB;
        const double *vj = v + j * W3_SUB;
        int k_lo = 0, k_hi = 0;
        if (d != 0.0f) {
            float kf = kq_clamp(s[j] / d, -32.0f, 31.0f);
            int f = (int)kq_round(kf);
            f = (float)f > kf ? f - 1 : f;
            k_lo = f > -31 ? f - 1 : -32;
            k_hi = f < 30 ? f + 2 : 31;
        }
        double best = INFINITY;
        st->k[j] = k_lo;
        for (int k = k_lo; k <= k_hi; k++) {
            double e = w3_error(xj, vj, d * (float)k);
            if (e < best) {
                best = e;
                st->k[j] = k;
            }
        }
        const float t = d * (float)st->k[j];
        const float inv = t != 0.0f ? 1.0f / t : 0.0f;
        for (int i = 0; i < W3_SUB; i++)
            st->q[j * W3_SUB + i] = w3_code(xj[i], inv);
        st->err += best;
    }
}

/* Weighted least-squares d for the current k and codes, as fp16; 0 when
 * there is none. */
static int w3_refit(const float *x, const double *v, const w3_state *st, uint16_t *hd)
{
    double num = 0, den = 0;
    for (int j = 0; j < W3_NSUB; j++)
        for (int i = 0; i < W3_SUB; i++) {
            double kc = (double)st->k[j] * (double)st->q[j * W3_SUB + i];
            double w = v[j * W3_SUB + i];
            num += w * (double)x[j * W3_SUB + i] * kc;
            den += w * kc * kc;
        }
    if (!(den > 0.0))
        return 0;
    *hd = pn_fp16_from_double(num / den);
    return (*hd & 0x7c00u) != 0x7c00u;
}

static int w3_search(const float *x, const double *v, uint8_t *blk)
{
    float s[W3_NSUB], smax = 0.0f;
    for (int j = 0; j < W3_NSUB; j++) {
        s[j] = w3_fit_sub(x + j * W3_SUB, v + j * W3_SUB);
        if (fabsf(s[j]) > fabsf(smax))
            smax = s[j];
    }
    static const float starts[] = { 1.0f, 0.96f, 0.92f, 1.03f };
    w3_state best;
    best.err = INFINITY;
    for (int t = 0; t < 4; t++) {
        w3_state cur;
        cur.hd = kq_q3k_super_scale(smax * starts[t]);
        if ((cur.hd & 0x7c00u) == 0x7c00u)
            continue;
        w3_integers(x, v, s, &cur);
        w3_state run = cur;
        for (int r = 1; r < W3_ROUNDS; r++) {
            uint16_t hd;
            if (!w3_refit(x, v, &run, &hd) || hd == run.hd)
                break;
            cur.hd = hd;
            w3_integers(x, v, s, &cur);
            if (!(cur.err < run.err))
                break;
            run = cur;
        }
        if (run.err < best.err)
            best = run;
    }
    if (!(best.err < INFINITY))
        return 0;
    kq_q3k_pack(best.hd, best.k, best.q, blk);
    return 1;
}

pn_status pn_quantize_row_q3_K_weighted(const float *x, int64_t n, const float *v, uint8_t *out,
                                        int64_t *bad_col)
{
    pn_status st = pn_quantize_row_q3_K_ref(x, n, out, bad_col);
    if (st != PN_OK)
        return st;
    double ve[QK];
    float y[QK];
    uint8_t cand[sizeof(block_q3_K)];
    for (int64_t b = 0; b < n / QK; b++) {
        const float *xb = x + b * QK, *vb = v + b * QK;
        uint8_t *blk = out + b * sizeof(block_q3_K);
        if (!search_weights(vb, ve) || !w3_search(xb, ve, cand))
            continue;
        pn_dequantize_row_q3_K(blk, y, QK);
        const double e_ref = block_error(xb, y, vb);
        pn_dequantize_row_q3_K(cand, y, QK);
        if (block_error(xb, y, vb) <= e_ref)
            memcpy(blk, cand, sizeof cand);
    }
    return PN_OK;
}

pn_status pn_quantize_row_kquant_weighted(int type, const float *x, int64_t n, const float *v,
                                          uint8_t *out, int64_t *bad_col)
{
    const pn_type_traits *t = pn_type_traits_get(type);
    if (t && t->encode_weighted)
        return t->encode_weighted(x, n, v, out, bad_col);
    if (bad_col)
        *bad_col = -1;
    return PN_ERR_TYPE;
}
