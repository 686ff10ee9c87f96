/* fp16.h - IEEE binary16 and bfloat16 conversions.
 *
 * pn_fp16_from_double rounds the exact double ONCE to binary16: nearest, ties
 * to even, subnormal halves kept, |x| >= 65520 (after rounding would exceed
 * 65504) gives +-inf, NaN gives a quiet NaN. Never double -> float -> half:
 * that second rounding changes 880 of the golden inputs.
 * Widening (half -> float, bf16 -> float) is exact.
 */
#ifndef PN_QUANT_FP16_H
#define PN_QUANT_FP16_H

#include <stdint.h>

uint16_t pn_fp16_from_double(double x);
float pn_fp16_to_float(uint16_t h);
double pn_fp16_to_double(uint16_t h);
/* float -> half with one rounding (the float is exact in double). */
static inline uint16_t pn_fp16_from_float(float x) { return pn_fp16_from_double((double)x); }

float pn_bf16_to_float(uint16_t b);
/* float -> bf16, round to nearest even, NaN kept quiet (for pn-dequant). */
uint16_t pn_bf16_from_float(float x);

/* Little-endian load/store of a u16 at any alignment. */
static inline uint16_t pn_load_u16le(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline void pn_store_u16le(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline uint32_t pn_load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline void pn_store_u32le(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

#endif
