/* q3_K.c - ggml's q3_K: 256 weights as sixteen sub-blocks of 16, each
 * w = (d*k)*c with 3-bit codes c in -4..3 (stored as c+4: a high bit in
 * hmask, two low bits in qs) and a signed 6-bit k in -32..31 (stored k+32).
 *
 * This is the reference encoder (pn_quantize_row_q3_K_ref): plain code, the
 * definition the fast paths (kquants_simd.h) reproduce byte for byte.
 *
 * Encoder, per super-block (plain squared error throughout):
 * 1. Each sub-block gets a continuous signed scale s: its largest-magnitude
 *    weight is tried on a few real positions around code -4 (and, with the
 *    opposite sign, around +3); for each trial the codes are rounded and s
 *    is refitted to them by least squares; the fit with the lowest error
 *    wins.
 * 2. d = fp16(-S/32), S the s of largest magnitude, so S lands on k = -32,
 *    the end of the range with one more step.
 * 3. Given d, each sub-block tries the two integers k around s/d,
 *    re-deriving its codes from the exact float scale the decoder uses, and
 *    keeps the k with the smaller error.
 * A least-squares refit of d after step 3 (as q4_K.c does) was measured on
 * the benchmark matrix: it bought 0.06% of error for 30% of the time, so it
 * is not done. Neither did finer trial grids or a third k pay for their time.
 */
#include <math.h>
#include <string.h>

#include "quant/fp16.h"
#include "quant/kquants.h"
#include "quant/kquants_impl.h"

#define Q3K_SUB KQ_Q3K_SUB
#define Q3K_NSUB KQ_Q3K_NSUB

/* Stage 1 trials: the real code position of the largest-magnitude weight. */
static const float q3k_trial[] = { -4.4f, -4.2f, -4.0f, -3.8f, -3.6f, -3.4f,
                                   -3.2f, -3.0f, 3.4f,  3.2f,  3.0f,  2.8f };
#define Q3K_NTRIAL (int)(sizeof q3k_trial / sizeof q3k_trial[0])

int pn_q3_K_get_scale(const uint8_t s[12], int j)
{
    int lo = (s[j % 8] >> (4 * (j / 8))) & 15;
    int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return lo | (hi << 4);
}

void pn_q3_K_set_scale(uint8_t s[12], int j, int u)
{
    int lo_shift = 4 * (j / 8), hi_shift = 2 * (j / 4);
    s[j % 8] = (uint8_t)((s[j % 8] & ~(15 << lo_shift)) | ((u & 15) << lo_shift));
    s[8 + j % 4] = (uint8_t)((s[8 + j % 4] & ~(3 << hi_shift)) | (((u >> 4) & 3) << hi_shift));
}

/* Squared error of w ~ t*c with the codes rounded from x / t, computed
 * with the decoder's float expression. */
static float q3k_error(const float *x, float t)
{
    const kq_v4 inv = kq_set1(t != 0.0f ? 1.0f / t : 0.0f), vt = kq_set1(t);
    const kq_v4 lo = kq_set1(-4.0f), hi = kq_set1(3.0f);
    kq_v4 acc = kq_set1(0.0f);
    for (int i = 0; i < Q3K_SUB; i += 4) {
        kq_v4 xv = kq_load(x + i);
        kq_v4 c = kq_round4(kq_clamp4(kq_mul(xv, inv), lo, hi));
        kq_v4 diff = kq_sub(xv, kq_mul(vt, c));
        acc = kq_add(acc, kq_mul(diff, diff));
    }
    return kq_hsum(acc);
}

/* The codes q3k_error scored, with the same arithmetic. */
static void q3k_codes(const float *x, float t, int8_t *q)
{
    const float inv = t != 0.0f ? 1.0f / t : 0.0f;
    for (int i = 0; i < Q3K_SUB; i++)
        q[i] = (int8_t)kq_round(kq_clamp(x[i] * inv, -4.0f, 3.0f));
}

/* Stage 1: continuous signed scale of one sub-block. */
static float q3k_fit_sub(const float *x)
{
    float xm = 0.0f, am = 0.0f;
    for (int i = 0; i < Q3K_SUB; i++) {
        float a = fabsf(x[i]);
        if (a > am) {
            am = a;
            xm = x[i];
        }
    }
    if (am == 0.0f)
        return 0.0f;
    /* For fixed codes the least-squares scale is sxc/scc and leaves an error
     * of sxx - sxc^2/scc, so the best trial is the one with the largest
     * sxc^2/scc, compared by cross-multiplying (all terms are >= 0). */
    const float ixm = 1.0f / xm;
    double best_num = 0.0, best_den = 1.0, best_s = xm / -4.0f;
    for (int t = 0; t < Q3K_NTRIAL; t++) {
        const kq_v4 inv = kq_set1(q3k_trial[t] * ixm);
        const kq_v4 lo = kq_set1(-4.0f), hi = kq_set1(3.0f);
        kq_v4 axc = kq_set1(0.0f), acc = axc;
        for (int i = 0; i < Q3K_SUB; i += 4) {
            kq_v4 xv = kq_load(x + i);
            kq_v4 c = kq_round4(kq_clamp4(kq_mul(xv, inv), lo, hi));
            axc = kq_add(axc, kq_mul(xv, c));
            acc = kq_add(acc, kq_mul(c, c));
        }
        double sxc = (double)kq_hsum(axc);
        double scc = (double)kq_hsum(acc);
        if (scc == 0.0)
            continue;
        if (sxc * sxc * best_den > best_num * scc) {
            best_num = sxc * sxc;
            best_den = scc;
            best_s = sxc / scc;
        }
    }
    return (float)best_s;
}

typedef struct q3k_state {
    uint16_t hd;
    int k[Q3K_NSUB];
    int8_t q[256];
} q3k_state;

/* Stage 3: best k per sub-block for the given fp16 d. */
static void q3k_integers(const float *x, const float *s, q3k_state *st)
{
    const float d = pn_fp16_to_float(st->hd);
    for (int j = 0; j < Q3K_NSUB; j++) {
        const float *xj = x + j * Q3K_SUB;
        int k_lo = 0, k_hi = 0;
        if (d != 0.0f) {
            float kf = kq_clamp(s[j] / d, -32.0f, 31.0f);
            k_lo = (int)kq_round(kf);
            k_lo = (float)k_lo > kf ? k_lo - 1 : k_lo; /* floor */
            k_hi = k_lo < 31 ? k_lo + 1 : 31;
        }
        float best = INFINITY;
        st->k[j] = k_lo;
        for (int k = k_lo; k <= k_hi; k++) {
            float e = q3k_error(xj, d * (float)k);
            if (e < best) {
                best = e;
                st->k[j] = k;
            }
        }
        q3k_codes(xj, d * (float)st->k[j], st->q + j * Q3K_SUB);
    }
}

static pn_status q3k_block(const float *x, uint8_t *blk, int *bad)
{
    if ((*bad = kq_first_nonfinite(x, PN_QK_K)) >= 0)
        return PN_ERR_NONFINITE;
    float s[Q3K_NSUB], smax = 0.0f;
    for (int j = 0; j < Q3K_NSUB; j++) {
        s[j] = q3k_fit_sub(x + j * Q3K_SUB);
        if (fabsf(s[j]) > fabsf(smax))
            smax = s[j];
    }
    q3k_state st;
    st.hd = kq_q3k_super_scale(smax);
    if ((st.hd & 0x7c00u) == 0x7c00u) {
        *bad = 0;
        return PN_ERR_SCALE_OVERFLOW;
    }
    q3k_integers(x, s, &st);
    kq_q3k_pack(st.hd, st.k, st.q, blk);
    return PN_OK;
}

pn_status pn_quantize_row_q3_K_ref(const float *x, int64_t n, uint8_t *out, int64_t *bad_col)
{
    if (n < 0 || n % PN_QK_K != 0) {
        if (bad_col)
            *bad_col = -1;
        return PN_ERR_USAGE;
    }
    for (int64_t b = 0; b < n / PN_QK_K; b++) {
        int bad = 0;
        pn_status st = q3k_block(x + b * PN_QK_K, out + b * sizeof(block_q3_K), &bad);
        if (st != PN_OK) {
            if (bad_col)
                *bad_col = b * PN_QK_K + bad;
            return st;
        }
    }
    return PN_OK;
}

void pn_dequantize_row_q3_K(const uint8_t *in, float *y, int64_t n)
{
    for (int64_t b = 0; b < n / PN_QK_K; b++) {
        const uint8_t *blk = in + b * sizeof(block_q3_K);
        const uint8_t *hmask = blk + offsetof(block_q3_K, hmask),
                      *qs = blk + offsetof(block_q3_K, qs);
        const uint8_t *scales = blk + offsetof(block_q3_K, scales);
        const float d = pn_fp16_to_float(pn_load_u16le(blk + offsetof(block_q3_K, d)));
        float *yb = y + b * PN_QK_K;
        for (int p = 0; p < 8; p++) { /* 32 weights share a bit plane */
            const uint8_t *q = qs + 32 * (p / 4);
            const int shift = 2 * (p % 4);
            for (int half = 0; half < 2; half++) {
                const int j = 2 * p + half; /* sub-block of 16 */
                const float dl = d * (float)(pn_q3_K_get_scale(scales, j) - 32);
                for (int l = 16 * half; l < 16 * half + 16; l++) {
                    int c = ((q[l] >> shift) & 3) - ((hmask[l] >> p) & 1 ? 0 : 4);
                    yb[32 * p + l] = dl * (float)c;
                }
            }
        }
    }
}
