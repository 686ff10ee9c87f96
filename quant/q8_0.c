/* q8_0.c - ggml's q8_0: 32 weights, an fp16 scale d and 32 int8 codes.
 *
 * Encoder: the scale starts at fp16(amax/127), the one that puts the largest
 * magnitude on code +-127 with nothing clipped; then a least-squares refit of
 * d to those codes is tried and kept when its exact error is lower. Codes
 * are always re-derived from the stored (fp16) d, never from the unrounded
 * one, so every error measured is the error the engine will see. Codes stay
 * in -127..127 like ggml's own encoder: -128 is a legal int8 but some int8
 * dot-product kernels negate a code, and -(-128) does not fit.
 */
#include <math.h>
#include <string.h>

#include "quant/fp16.h"
#include "quant/kquants.h"
#include "quant/kquants_testing.h"
#include "quant/kquants_fast.h"
#include "quant/kquants_impl.h"

/* Squared error of scale d (d > 0), and the sums sum(x c), sum(c c) of its
 * codes c for a least-squares refit. */
static float q8_0_error(const float *x, float d, float *sxc, float *scc)
{
    const kq_v4 id = kq_set1(1.0f / d), vd = kq_set1(d);
    const kq_v4 lo = kq_set1(-127.0f), hi = kq_set1(127.0f);
    kq_v4 ae = kq_set1(0.0f), axc = ae, acc = ae;
    for (int i = 0; i < PN_QK8_0; i += 4) {
        kq_v4 xv = kq_load(x + i);
        kq_v4 c = kq_round4(kq_clamp4(kq_mul(xv, id), lo, hi));
        kq_v4 diff = kq_sub(xv, kq_mul(c, vd));
        ae = kq_add(ae, kq_mul(diff, diff));
        axc = kq_add(axc, kq_mul(xv, c));
        acc = kq_add(acc, kq_mul(c, c));
    }
    *sxc = kq_hsum(axc);
    *scc = kq_hsum(acc);
    return kq_hsum(ae);
}

/* The codes q8_0_error scored, lane for lane the same arithmetic. */
static void q8_0_codes(const float *x, float d, int8_t *q)
{
    const float id = 1.0f / d;
    for (int i = 0; i < PN_QK8_0; i++)
        q[i] = (int8_t)kq_round(kq_clamp(x[i] * id, -127.0f, 127.0f));
}

static pn_status q8_0_block(const float *x, uint8_t *blk, int *bad)
{
    if ((*bad = kq_first_nonfinite(x, PN_QK8_0)) >= 0)
        return PN_ERR_NONFINITE;
    kq_v4 am4 = kq_set1(0.0f);
    for (int i = 0; i < PN_QK8_0; i += 4)
        am4 = kq_max(kq_abs(kq_load(x + i)), am4);
    float lanes[4];
    kq_store(lanes, am4);
    float amax = lanes[0] > lanes[1] ? lanes[0] : lanes[1];
    amax = lanes[2] > amax ? lanes[2] : amax;
    amax = lanes[3] > amax ? lanes[3] : amax;
    if (amax == 0.0f) {
        memset(blk, 0, sizeof(block_q8_0));
        return PN_OK;
    }
    uint16_t h = pn_fp16_from_double((double)amax / 127.0);
    /* Among fp16's subnormals one unit is a large step: if rounding went
     * down far enough to clip the largest weight (or to zero), take the next
     * half up. */
    if ((double)amax > 127.5 * (double)pn_fp16_to_float(h))
        h++;
    if ((h & 0x7c00u) == 0x7c00u) {
        *bad = 0;
        return PN_ERR_SCALE_OVERFLOW;
    }
    float d = pn_fp16_to_float(h);
    float sxc, scc;
    float err = q8_0_error(x, d, &sxc, &scc);
    /* Least-squares scale for these codes: sum(x c) / sum(c c). */
    if (scc > 0.0f && sxc > 0.0f) {
        uint16_t h2 = pn_fp16_from_double((double)sxc / scc);
        float d2 = pn_fp16_to_float(h2);
        if (h2 != h && d2 > 0.0f && (h2 & 0x7c00u) != 0x7c00u) {
            float s1, s2;
            if (q8_0_error(x, d2, &s1, &s2) < err) {
                h = h2;
                d = d2;
            }
        }
    }
    int8_t q[PN_QK8_0];
    q8_0_codes(x, d, q);
    pn_store_u16le(blk + offsetof(block_q8_0, d), h);
    memcpy(blk + offsetof(block_q8_0, qs), q, sizeof q);
    return PN_OK;
}

pn_status pn_quantize_row_q8_0(const float *x, int64_t n, uint8_t *out, int64_t *bad_col)
{
    if (n < 0 || n % PN_QK8_0 != 0) {
        if (bad_col)
            *bad_col = -1;
        return PN_ERR_USAGE;
    }
    return pn_q8_0_row_sums(x, n, out, bad_col, NULL, NULL);
}

pn_status pn_q8_0_row_sums(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                           double *blk_err, double *blk_norm)
{
    for (int64_t b = 0; b < n / PN_QK8_0; b++) {
        int bad = 0;
        uint8_t *blk = out + b * sizeof(block_q8_0);
        const float *xb = x + b * PN_QK8_0;
        pn_status st = q8_0_block(xb, blk, &bad);
        if (st != PN_OK) {
            if (bad_col)
                *bad_col = b * PN_QK8_0 + bad;
            return st;
        }
        if (blk_err && blk_norm) {
            /* dq exactly as pn_dequantize_row_q8_0 computes it */
            const float d = pn_fp16_to_float(pn_load_u16le(blk + offsetof(block_q8_0, d)));
            const int8_t *qs = (const int8_t *)(blk + offsetof(block_q8_0, qs));
            double err = 0.0, norm = 0.0;
            for (int i = 0; i < PN_QK8_0; i++) {
                const float dq = (float)qs[i] * d;
                const double diff = (double)xb[i] - (double)dq;
                err = err + diff * diff;
                norm = norm + (double)xb[i] * (double)xb[i];
            }
            blk_err[b] = err;
            blk_norm[b] = norm;
        }
    }
    return PN_OK;
}

void pn_dequantize_row_q8_0(const uint8_t *in, float *y, int64_t n)
{
    for (int64_t b = 0; b < n / PN_QK8_0; b++) {
        const uint8_t *blk = in + b * sizeof(block_q8_0);
        const float d = pn_fp16_to_float(pn_load_u16le(blk + offsetof(block_q8_0, d)));
        const uint8_t *qs = blk + offsetof(block_q8_0, qs);
        for (int i = 0; i < PN_QK8_0; i++)
            y[b * PN_QK8_0 + i] = (float)(int8_t)qs[i] * d;
    }
}
