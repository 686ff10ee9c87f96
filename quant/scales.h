/* scales.h - where the fp16 scales of each block type lie, and scans for
 * values that are not finite.
 *
 * A decoder multiplies codes by fp16 scales: a NaN or infinite scale makes
 * every weight of its block meaningless, and a float tensor (f32, f16, bf16)
 * holding a NaN or infinite weight is no model either. pn-check counts such
 * values and pn-dequant refuses them; both name the block and the field, or
 * the weight, through these scans. The scans read the bytes as they are
 * stored (little-endian, any alignment), so they need no decoding.
 */
#ifndef PN_QUANT_SCALES_H
#define PN_QUANT_SCALES_H

#include <stdbool.h>
#include <stdint.h>

typedef struct pn_scale_field {
    const char *name; /* "d", "dmin" */
    int offset;       /* byte offset of the fp16 in the block */
} pn_scale_field;

/* The fp16 scale fields of a block of `type`: q8_0 d; q4_K d and dmin; q3_K
 * d; pn3t/pn4t d. Returns how many (0 for a type without fp16 scales, the
 * float types among them); *fields points at static data. */
int pn_scale_fields(int type, const pn_scale_field **fields);

/* Blocks [0, nblk) of `type` at p, packed back to back: the index of the
 * first block with a non-finite scale field, or -1. *field receives the
 * field's index in pn_scale_fields (the first bad field of that block) and
 * *bits its fp16 bits (either may be NULL). */
int64_t pn_find_nonfinite_scale(int type, const uint8_t *p, int64_t nblk, int *field,
                                uint16_t *bits);

/* n stored values of a float type (f32, f16 or bf16) at p: the index of the
 * first NaN or infinity, or -1 (-1 too for any other type). *bits receives
 * its bit pattern (may be NULL). */
int64_t pn_find_nonfinite_value(int type, const uint8_t *p, int64_t n, uint32_t *bits);

/* For the bits of a non-finite value of `type` (f32, bf16, or f16, which is
 * also the scales' format): true for NaN, false for an infinity. */
bool pn_nonfinite_is_nan(int type, uint32_t bits);

#endif
