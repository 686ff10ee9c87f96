/* The scalar reference of the PN quantizer: the definition every fast path is
 * tested against. Kept deliberately plain; speed lives in pn_fast*.c. */
#include <math.h>
#include <string.h>

#include "quant/fp16.h"
#include "quant/pn.h"
#include "quant/pn_testing.h"
#include "quant/types.h"

static const pn_params pn3t_params = { PN_TYPE_PN3T, 80, 3, 4, 10 };
static const pn_params pn4t_params = { PN_TYPE_PN4T, 64, 4, 8, 8 };

const pn_params *pn_params_get(int type)
{
    if (type == PN_TYPE_PN3T)
        return &pn3t_params;
    if (type == PN_TYPE_PN4T)
        return &pn4t_params;
    return NULL;
}

static inline int pn_code_shift(const pn_params *p, int t)
{
    return p->bits * (t >> 1) + 16 * (t & 1);
}

int pn_block_code(const pn_params *p, const uint8_t *block, int e)
{
    uint32_t word = pn_load_u32le(block + PN_BLOCK_WORDS_AT + 4 * (e / p->per_word));
    return (int)((word >> pn_code_shift(p, e % p->per_word)) & ((1u << p->bits) - 1u));
}

void pn_block_set_code(const pn_params *p, uint8_t *block, int e, int code)
{
    uint8_t *wp = block + PN_BLOCK_WORDS_AT + 4 * (e / p->per_word);
    int shift = pn_code_shift(p, e % p->per_word);
    uint32_t mask = ((1u << p->bits) - 1u) << shift;
    uint32_t word = pn_load_u32le(wp);
    word = (word & ~mask) | (((uint32_t)code << shift) & mask);
    pn_store_u32le(wp, word);
}

/* Packs G codes (each 0..2z-1) and the scale bits; reserved bits stay 0. */
static void pn_pack_block(const pn_params *p, uint16_t d_bits, const uint8_t *codes, uint8_t *block)
{
    pn_store_u16le(block + offsetof(block_pnt, d), d_bits);
    for (int wi = 0; wi < 8; wi++) {
        uint32_t word = 0;
        for (int t = 0; t < p->per_word; t++)
            word |= (uint32_t)codes[wi * p->per_word + t] << pn_code_shift(p, t);
        pn_store_u32le(block + PN_BLOCK_WORDS_AT + 4 * wi, word);
    }
}

pn_status pn_quantize_group_ref(const pn_params *p, const float *w, uint8_t *block, int *winner,
                                int *bad_index)
{
    return pn_quantize_group_ref_err(p, w, block, winner, bad_index, NULL);
}

pn_status pn_quantize_group_ref_err(const pn_params *p, const float *w, uint8_t *block, int *winner,
                                    int *bad_index, double *win_err)
{
    const int G = p->group, z = p->z, nmax = 2 * z - 1;
    double amax = 0.0, max = -INFINITY, min = INFINITY;
    for (int e = 0; e < G; e++) {
        double v = (double)w[e];
        if (!isfinite(v)) {
            if (bad_index)
                *bad_index = e;
            return PN_ERR_NONFINITE;
        }
        double a = fabs(v);
        if (a > amax)
            amax = a;
        if (v > max)
            max = v;
        if (v < min)
            min = v;
    }
    uint8_t codes[80];
    if (amax == 0.0) {
        memset(codes, z, (size_t)G);
        pn_pack_block(p, 0x0000, codes, block);
        if (winner)
            *winner = -1;
        return PN_OK;
    }
    const double sigma = (fabs(min) > max) ? 1.0 : -1.0;
    double best_err = INFINITY;
    int best_i = -1;
    uint16_t best_bits = 0;
    bool any_overflow = false;
    for (int i = 0; i < PN_N_CANDIDATES; i++) {
        double m = (double)(50 + 2 * i) / 100.0;
        double t = sigma * m * amax / (double)z;
        uint16_t bits = pn_fp16_from_double(t);
        double s = pn_fp16_to_double(bits);
        if (!isfinite(s)) {
            any_overflow = true;
            continue;
        }
        if (s == 0.0)
            continue;
        double err = 0.0;
        for (int e = 0; e < G; e++) {
            double q = (double)w[e] / s;
            double n = rint(q) + (double)z;
            if (n < 0.0)
                n = 0.0;
            if (n > (double)nmax)
                n = (double)nmax;
            double diff = (double)w[e] - s * (n - (double)z);
            err = err + diff * diff;
        }
        if (err <= best_err) {
            best_err = err;
            best_i = i;
            best_bits = bits;
        }
    }
    if (win_err)
        *win_err = best_err;
    if (best_i < 0) {
        if (any_overflow) {
            if (bad_index)
                *bad_index = 0;
            return PN_ERR_SCALE_OVERFLOW;
        }
        memset(codes, z, (size_t)G);
        pn_pack_block(p, 0x0000, codes, block);
        if (winner)
            *winner = -1;
        return PN_OK;
    }
    double s = pn_fp16_to_double(best_bits);
    for (int e = 0; e < G; e++) {
        double n = rint((double)w[e] / s) + (double)z;
        if (n < 0.0)
            n = 0.0;
        if (n > (double)nmax)
            n = (double)nmax;
        codes[e] = (uint8_t)n;
    }
    pn_pack_block(p, best_bits, codes, block);
    if (winner)
        *winner = best_i;
    return PN_OK;
}

pn_status pn_quantize_row_ref(int type, const float *x, int64_t n, uint8_t *out, int64_t *bad_col)
{
    return pn_quantize_row_ref_sums(type, x, n, out, bad_col, NULL, NULL);
}

pn_status pn_quantize_row_ref_sums(int type, const float *x, int64_t n, uint8_t *out,
                                   int64_t *bad_col, double *blk_err, double *blk_norm)
{
    const pn_params *p = pn_params_get(type);
    if (!p || n < 0 || n % p->group != 0)
        return PN_ERR_USAGE;
    const int G = p->group;
    for (int64_t g = 0; g < n / G; g++) {
        int bad = 0, winner = -1;
        double err = 0.0;
        pn_status st =
            pn_quantize_group_ref_err(p, x + g * G, out + g * PN_BLOCK_BYTES, &winner, &bad, &err);
        if (st != PN_OK) {
            if (bad_col)
                *bad_col = g * G + bad;
            return st;
        }
        if (blk_err && blk_norm) {
            /* a zero group decodes to zeros: its error is its norm */
            double norm = 0.0;
            for (int e = 0; e < G; e++)
                norm = norm + (double)x[g * G + e] * (double)x[g * G + e];
            blk_norm[g] = norm;
            blk_err[g] = winner < 0 ? norm : err;
        }
    }
    return PN_OK;
}

void pn_dequantize_row(int type, const uint8_t *in, float *y, int64_t n)
{
    const pn_params *p = pn_params_get(type);
    if (!p)
        return;
    const uint32_t mask = (1u << p->bits) - 1u;
    for (int64_t g = 0; g < n / p->group; g++) {
        const uint8_t *b = in + g * PN_BLOCK_BYTES;
        const float d = pn_fp16_to_float(pn_load_u16le(b + offsetof(block_pnt, d)));
        float *o = y + g * p->group;
        for (int wi = 0; wi < 8; wi++) {
            const uint32_t word = pn_load_u32le(b + PN_BLOCK_WORDS_AT + 4 * wi);
            for (int t = 0; t < p->per_word; t++)
                o[wi * p->per_word + t] =
                    d * (float)((int)((word >> pn_code_shift(p, t)) & mask) - p->z);
        }
    }
}

pn_status pn_validate_row(int type, const uint8_t *in, int64_t n, int64_t *bad_block)
{
    const pn_params *p = pn_params_get(type);
    if (!p || n < 0 || n % p->group != 0)
        return PN_ERR_USAGE;
    for (int64_t g = 0; g < n / p->group; g++) {
        const uint8_t *b = in + g * PN_BLOCK_BYTES;
        if ((pn_load_u16le(b + offsetof(block_pnt, d)) & 0x7c00u) == 0x7c00u) {
            if (bad_block)
                *bad_block = g;
            return PN_ERR_NONFINITE;
        }
        if (type == PN_TYPE_PN3T) {
            for (int wi = 0; wi < 8; wi++) {
                if (pn_load_u32le(b + PN_BLOCK_WORDS_AT + 4 * wi) & 0x80008000u) {
                    if (bad_block)
                        *bad_block = g;
                    return PN_ERR_RESERVED_BITS;
                }
            }
        }
    }
    return PN_OK;
}
