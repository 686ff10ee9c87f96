/* fp16.h - IEEE binary16 and bfloat16 conversions.
 *
 * pn_fp16_from_double rounds the exact double ONCE to binary16: nearest, ties
 * to even, subnormal halves kept, |x| >= 65520 (after rounding would exceed
 * 65504) gives +-inf, NaN gives a quiet NaN. Never double -> float -> half:
 * that second rounding changes 880 of the golden inputs.
 * Widening (half -> float, bf16 -> float) is exact.
 *
 * The project rounds to fp16 in three places, each for a reason, and the
 * tests hold them equal:
 *  - here, pn_fp16_from_double: the definition, used by the references and
 *    the stock encoders; integer work on the significand, no libm, so it is
 *    the same on every machine (tests/quant/test_fp16.c: golden file, every
 *    half midpoint against a libm oracle);
 *  - quant/pn_fast_internal.h, pn_fast_fp16_value: the same rounding done
 *    by one double addition and subtraction of a power of two, giving the
 *    VALUE as a double without a branch, so the fast PN paths compute all
 *    36 candidate scales in vector lanes (tests/quant/test_pn_fast.c: golden
 *    inputs, every half midpoint and its neighbours, random doubles);
 *  - quant/pn_cuda.cu, pn_hd_fp16_from_double: a __host__ __device__ copy
 *    for the GPU kernel and its host emulator, which cannot call this host
 *    function (tests/quant/test_pn_cuda.c, in CUDA builds: golden inputs and
 *    half-way points against this function, on the emulator and a GPU).
 */
#ifndef PN_QUANT_FP16_H
#define PN_QUANT_FP16_H

#include <stdint.h>
#include <string.h>

#include "common/byte_order.h" /* pn_load_u16le, pn_load_u32le: the blocks are little-endian */

/* Bit-exact and libm-free: these run per weight when widening sources and
 * per block in the encoders. */
static inline float pn_fp16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) { /* zero or subnormal: mant * 2^-24 is exact in float */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    uint32_t bits =
        sign | (exp == 31 ? 0x7f800000u | (mant << 13) : ((exp + 112u) << 23) | (mant << 13));
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline double pn_fp16_to_double(uint16_t h)
{
    return (double)pn_fp16_to_float(h);
}

/* Rounds the double once: keep 11 significant bits (fewer for a subnormal
 * half, whose last bit is worth 2^-24) and round the dropped bits to
 * nearest, ties to even, on the integer significand. */
static inline uint16_t pn_fp16_from_double(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    const uint16_t sign = (uint16_t)((u >> 48) & 0x8000u);
    const uint64_t a = u & 0x7fffffffffffffffull;
    if (a > 0x7ff0000000000000ull)
        return (uint16_t)(sign | 0x7e00u);
    const int e = (int)(a >> 52) - 1023; /* a = 1.f * 2^e for a normal double */
    if (e >= 16)
        return (uint16_t)(sign | 0x7c00u);
    if (e < -26) /* below a quarter of the smallest subnormal: rounds to 0 */
        return sign;
    const uint64_t m = (a & 0xfffffffffffffull) | (1ull << 52);
    const int shift = e >= -14 ? 42 : 42 + (-14 - e);
    uint64_t r = m >> shift;
    const uint64_t rem = m & ((1ull << shift) - 1), halfway = 1ull << (shift - 1);
    if (rem > halfway || (rem == halfway && (r & 1)))
        r++;
    if (e < -14) /* subnormal; r == 1024 is the smallest normal, 0x0400 */
        return (uint16_t)(sign | r);
    int exp = e + 15;
    if (r == 2048) {
        r = 1024;
        exp++;
    }
    if (exp >= 31)
        return (uint16_t)(sign | 0x7c00u);
    return (uint16_t)(sign | (uint16_t)(exp << 10) | (uint16_t)(r - 1024));
}

/* float -> half with one rounding (the float is exact in double). */
static inline uint16_t pn_fp16_from_float(float x)
{
    return pn_fp16_from_double((double)x);
}

static inline float pn_bf16_to_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* float -> bf16, round to nearest even, NaN kept quiet (for pn-dequant). */
uint16_t pn_bf16_from_float(float x);

#endif
