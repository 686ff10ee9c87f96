/* pn.h - the PN block types pn3t and pn4t: quantize, dequantize, validate.
 *
 * Layout: see quant/blocks.h. The reference quantizer is the scalar
 * definition of the contract (docs/format.md#the-reference-quantizer):
 *   per group of G weights (pn3t G=80, bits 3, z 4; pn4t G=64, bits 4, z 8):
 *   amax, max, min in double; amax == 0 -> d = +0.0, every code z.
 *   sigma = (|min| > max) ? +1 : -1.
 *   for i = 0..35: m = (50+2i)/100.0, t = sigma*m*amax/z (left to right, double),
 *     s = fp16(t) (one rounding) widened to double; skip s == 0 or non-finite;
 *     per element in order: q = w/s, n = clamp(rint(q)+z, 0, 2z-1),
 *     diff = w - s*(n-z), err += diff*diff (double, no FMA).
 *   keep the smallest err, ties to the later candidate (err <= best).
 *   all skipped: underflow only -> zero group; any overflow -> error.
 * Every fast path must give the same bytes as pn_quantize_row_ref.
 *
 * Nothing here allocates or prints. Rows are n weights, n a multiple of G;
 * output is n/G blocks of 34 bytes at any alignment.
 */
#ifndef PN_QUANT_PN_H
#define PN_QUANT_PN_H

#include <stdbool.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "quant/blocks.h"

/* Bytes of a pn3t/pn4t block: the struct's size (quant/blocks.h). */
#define PN_BLOCK_BYTES ((int)sizeof(block_pnt))
/* Offset of a block's first code word. */
#define PN_BLOCK_WORDS_AT offsetof(block_pnt, qs)
#define PN_N_CANDIDATES 36

typedef struct pn_params {
    int type;     /* PN_TYPE_PN3T or PN_TYPE_PN4T */
    int group;    /* 80 or 64 */
    int bits;     /* 3 or 4 */
    int z;        /* 4 or 8 */
    int per_word; /* codes per u32 word: 10 or 8 */
} pn_params;

/* NULL unless type is pn3t or pn4t. */
const pn_params *pn_params_get(int type);

/* Quantizes one group of p->group floats into a 34-byte block.
 * Returns PN_OK, PN_ERR_NONFINITE (*bad_index = element) or
 * PN_ERR_SCALE_OVERFLOW (*bad_index = 0). *winner (may be NULL) receives the
 * winning candidate index 0..35, or -1 for the zero group. */
pn_status pn_quantize_group_ref(const pn_params *p, const float *w, uint8_t *block, int *winner,
                                int *bad_index);

/* The same, and (win_err not NULL) the winning candidate's error sum,
 * sum ((double)w - s*(n - z))^2 in element order from +0.0 (infinity when
 * every candidate was skipped). */
pn_status pn_quantize_group_ref_err(const pn_params *p, const float *w, uint8_t *block, int *winner,
                                    int *bad_index, double *win_err);

/* Reference row quantizer: n/G groups in order. On error *bad_col (may be
 * NULL) is the column of the offending weight (NaN/Inf) or the first column
 * of the group whose scale overflows; the output is then unspecified. */
pn_status pn_quantize_row_ref(int type, const float *x, int64_t n, uint8_t *out, int64_t *bad_col);
/* The reference with the per-group sums of quant/quant_row.h (blk_err and
 * blk_norm both NULL or both n/G doubles): the error is the search's own
 * sum for the winner, which is the decoder's error exactly (s*(n - z) is
 * the decoded float: s has 11 significant bits, n - z at most 4), and the
 * norm for a zero group (it decodes to zeros). */
pn_status pn_quantize_row_ref_sums(int type, const float *x, int64_t n, uint8_t *out,
                                   int64_t *bad_col, double *blk_err, double *blk_norm);

/* The fastest exact implementation this CPU supports (same bytes as _ref):
 * pn_quantize_row_path(type, pn_cpu_path_best(), ...), quant/pn_fast.h. */
pn_status pn_quantize_row(int type, const float *x, int64_t n, uint8_t *out, int64_t *bad_col);

/* Decodes n weights: w = d * (n - z), in float (exact). The PN kernel of
 * the type table; pn_dequantize_row_type (quant/quant_row.h) decodes any
 * type a mix writes. */
void pn_dequantize_row(int type, const uint8_t *in, float *y, int64_t n);

/* Checks a row of n weights: every d finite, pn3t reserved bits clear.
 * Returns PN_OK, PN_ERR_NONFINITE or PN_ERR_RESERVED_BITS with *bad_block
 * (may be NULL) the index of the first bad block in the row. */
pn_status pn_validate_row(int type, const uint8_t *in, int64_t n, int64_t *bad_block);

#endif
