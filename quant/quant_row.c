/* quant_row.c - the row entry points for every type a mix writes, through
 * the type table (quant/types.h), with the per-block error sums of the
 * quantizer's pass (contract: quant_row.h). */
#include "quant/quant_row.h"

#include "quant/blocks.h"
#include "quant/pn_fast.h"
#include "quant/types.h"

/* The table's entry of a type a mix writes; NULL for any other id. */
static const pn_type_traits *written(int type)
{
    const pn_type_traits *t = pn_type_traits_get(type);
    return t && (t->can & PN_CAN_WRITE) ? t : NULL;
}

int64_t pn_sum_block_weights(int type)
{
    const pn_type_traits *t = written(type);
    return t ? t->sum_block : 0;
}

int64_t pn_row_sum_blocks(int type, int64_t n)
{
    const int64_t bw = pn_sum_block_weights(type);
    return bw > 0 && n > 0 ? (n + bw - 1) / bw : 0;
}

static pn_status fail(int64_t *bad_col, int64_t col, pn_status st)
{
    if (bad_col)
        *bad_col = col;
    return st;
}

pn_status pn_quantize_row_sums(int type, int path, const float *x, int64_t n, uint8_t *out,
                               int64_t *bad_col, double *blk_err, double *blk_norm)
{
    const pn_type_traits *t = written(type);
    if (!t)
        return fail(bad_col, -1, PN_ERR_TYPE);
    if (!pn_path_available(path) || n < 0 || n % t->block_weights != 0)
        return fail(bad_col, -1, PN_ERR_USAGE);
    if (!blk_err || !blk_norm)
        blk_err = blk_norm = NULL;
    return t->encode[path](x, n, out, bad_col, blk_err, blk_norm);
}

pn_status pn_quantize_row_stock(int type, const float *x, int64_t n, uint8_t *out, int64_t *bad_col)
{
    if (!pn_type_can(type, PN_CAN_STOCK))
        return fail(bad_col, -1, PN_ERR_TYPE);
    return pn_quantize_row_sums(type, pn_cpu_path_best(), x, n, out, bad_col, NULL, NULL);
}

pn_status pn_dequantize_row_type(int type, const uint8_t *in, float *y, int64_t n)
{
    const pn_type_traits *t = written(type);
    if (!t)
        return PN_ERR_TYPE;
    if (pn_type_row_bytes(type, n) < 0)
        return PN_ERR_USAGE;
    t->decode(in, y, n);
    return PN_OK;
}

pn_status pn_row_sums_ref(int type, const float *x, const uint8_t *q, int64_t n, double *blk_err,
                          double *blk_norm)
{
    const int64_t bw = pn_sum_block_weights(type);
    if (bw == 0)
        return PN_ERR_TYPE;
    if (pn_type_row_bytes(type, n) < 0)
        return PN_ERR_USAGE;
    float y[PN_QK_K];
    for (int64_t b = 0; b * bw < n; b++) {
        const int64_t start = b * bw, cnt = n - start < bw ? n - start : bw;
        pn_status st = pn_dequantize_row_type(type, q + pn_type_row_bytes(type, start), y, cnt);
        if (st != PN_OK)
            return st;
        double err = 0.0, norm = 0.0;
        for (int64_t i = 0; i < cnt; i++) {
            const double d = (double)x[start + i] - (double)y[i];
            err = err + d * d;
            norm = norm + (double)x[start + i] * (double)x[start + i];
        }
        blk_err[b] = err;
        blk_norm[b] = norm;
    }
    return PN_OK;
}
