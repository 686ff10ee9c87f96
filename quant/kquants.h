/* kquants.h - the stock ggml types a PN mix writes: q8_0, q4_K, q3_K (and the
 * plain f32 / f16 / bf16), encoded byte for byte as stock ggml decodes them.
 *
 * Layouts (quant/blocks.h has the structs; every multi-byte field is
 * little-endian, blocks are packed back to back at any byte offset):
 *
 * q8_0, 32 weights in 34 bytes:
 *   d fp16 | qs int8[32].            w[i] = qs[i] * d
 *   Our encoder writes codes -127..127 only (never -128), like ggml's.
 *
 * q4_K, 256 weights in 144 bytes, eight sub-blocks of 32:
 *   d fp16 | dmin fp16 | scales[12] | qs[128]
 *   sub-block j has a 6-bit scale sc_j and a 6-bit min m_j (0..63):
 *     j < 4:  sc_j = scales[j] & 63             m_j = scales[j+4] & 63
 *     j >= 4: sc_j = (scales[j+4] & 15) | (scales[j-4] >> 6) << 4
 *             m_j  = (scales[j+4] >> 4) | (scales[j]   >> 6) << 4
 *   weight e (0..255), c = e / 64, r = e % 64: its 4-bit code q is the low
 *   nibble of qs[32c + r] when r < 32, else the high nibble of qs[32c + r-32].
 *   w[e] = (d*sc_j)*q - dmin*m_j with j = e / 32, in float as written.
 *
 * q3_K, 256 weights in 110 bytes, sixteen sub-blocks of 16:
 *   hmask[32] | qs[64] | scales[12] | d fp16
 *   sub-block j has a 6-bit scale u_j (0..63) stored with an offset of 32:
 *     u_j = ((scales[j % 8] >> 4*(j/8)) & 15) | ((scales[8 + j%4] >> 2*(j/4)) & 3) << 4
 *   weight e, l = e % 32, p = e / 32 (0..7): its 2-bit low code is
 *   (qs[32*(p/4) + l] >> 2*(p%4)) & 3 and its high bit is (hmask[l] >> p) & 1.
 *   w[e] = (d*(u_j - 32)) * (low - (high ? 0 : 4)) with j = e / 16.
 *
 * Decoding follows ggml's reference dequantize_row_* float for float (same
 * products in the same order, no fused multiply-add).
 *
 * Encoding is ours (error-minimising searches, see each .c file): a pure
 * function of the row, the same bytes on every machine and thread count
 * (float/double arithmetic without FMA, no libm beyond sqrt and fabs).
 *
 * q4_K and q3_K have a reference encoder (pn_quantize_row_*_ref, q4_K.c and
 * q3_K.c: the definition) and fast paths (kquants_simd.h: portable,
 * AVX2, AVX-512) chosen by the path ids of quant/pn_fast.h. Every path
 * writes the reference's bytes and returns its status and *bad_col for
 * every input; pn_quantize_row_q4_K / _q3_K run pn_cpu_path_best().
 * q8_0 has one encoder, the same on every path.
 *
 * Row calls: x holds n floats, n a multiple of the type's block (32 for q8_0,
 * 256 for the K types). out receives n/block blocks; the caller owns both
 * buffers; nothing allocates, prints or keeps state. Errors:
 *   PN_ERR_USAGE          n negative or not a multiple of the block
 *                         (*bad_col = -1);
 *   PN_ERR_NONFINITE      a NaN or infinity in x (*bad_col = its column, the
 *                         first one in the row);
 *   PN_ERR_SCALE_OVERFLOW a block whose scale does not fit an fp16 (weights
 *                         around 1e7 and above; for f16 output, a weight
 *                         beyond the f16 range; for bf16, beyond bf16's)
 *                         (*bad_col = the first column of that block, or the
 *                         weight's column for f16/bf16);
 * bad_col may be NULL. After an error the contents of out are unspecified.
 *
 * pn_dequantize_row_T decodes n weights from n/block blocks into y (n a
 * multiple of the block: the caller checks, or uses
 * pn_dequantize_row_type of quant/quant_row.h, which does). The type table
 * (quant/types.h) names these functions per type.
 */
#ifndef PN_QUANT_KQUANTS_H
#define PN_QUANT_KQUANTS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "quant/blocks.h"

#define PN_QK8_0 32

void pn_dequantize_row_q8_0(const uint8_t *in, float *y, int64_t n);

pn_status pn_quantize_row_q4_K(const float *x, int64_t n, uint8_t *out, int64_t *bad_col);
pn_status pn_quantize_row_q4_K_ref(const float *x, int64_t n, uint8_t *out, int64_t *bad_col);
/* On a chosen path (PN_PATH_*): PN_ERR_USAGE (*bad_col = -1) when the path is
 * unknown or unavailable, else exactly what the reference returns. */
pn_status pn_quantize_row_q4_K_path(int path, const float *x, int64_t n, uint8_t *out,
                                    int64_t *bad_col);
void pn_dequantize_row_q4_K(const uint8_t *in, float *y, int64_t n);

pn_status pn_quantize_row_q3_K(const float *x, int64_t n, uint8_t *out, int64_t *bad_col);
pn_status pn_quantize_row_q3_K_ref(const float *x, int64_t n, uint8_t *out, int64_t *bad_col);
pn_status pn_quantize_row_q3_K_path(int path, const float *x, int64_t n, uint8_t *out,
                                    int64_t *bad_col);
void pn_dequantize_row_q3_K(const uint8_t *in, float *y, int64_t n);

/* Field access for the K types (tests and checkers): the 6-bit scale and min
 * of q4_K sub-block j (0..7), and the stored 6-bit scale u_j (0..63, the
 * value is u_j - 32) of q3_K sub-block j (0..15). */
void pn_q4_K_get_scale_min(const uint8_t scales[12], int j, int *sc, int *m);
void pn_q4_K_set_scale_min(uint8_t scales[12], int j, int sc, int m);
int pn_q3_K_get_scale(const uint8_t scales[12], int j);
void pn_q3_K_set_scale(uint8_t scales[12], int j, int u);

/* The plain types: f32 (a copy), f16 and bf16 (round to nearest even), with
 * the per-block sums of quant/quant_row.h (blk_err and blk_norm both NULL
 * for none), and their decoders; same contract as the row calls above. */
pn_status pn_quantize_row_f32_sums(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                                   double *blk_err, double *blk_norm);
pn_status pn_quantize_row_f16_sums(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                                   double *blk_err, double *blk_norm);
pn_status pn_quantize_row_bf16_sums(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                                    double *blk_err, double *blk_norm);
void pn_dequantize_row_f32(const uint8_t *in, float *y, int64_t n);
void pn_dequantize_row_f16(const uint8_t *in, float *y, int64_t n);
void pn_dequantize_row_bf16(const uint8_t *in, float *y, int64_t n);

#endif
