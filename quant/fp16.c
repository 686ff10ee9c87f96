#include "quant/fp16.h"

#include <math.h>
#include <string.h>

/* One rounding from the exact double: split off the sign, scale the magnitude
 * so that the half's last kept bit has weight 1, and let rint() (ties to even
 * in the default rounding mode) round the exact scaled value. Scaling by a
 * power of two is exact in double for every magnitude a half can reach, so
 * only rint rounds. */
uint16_t pn_fp16_from_double(double x)
{
    uint16_t sign = signbit(x) ? 0x8000u : 0u;
    if (isnan(x))
        return (uint16_t)(sign | 0x7e00u);
    double a = fabs(x);
    if (a >= 65520.0) /* rounds past 65504 */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x1p-14) {
        /* subnormal range: unit 2^-24 */
        double q = rint(a * 0x1p24);           /* 0..1024 */
        return (uint16_t)(sign | (uint16_t)q); /* 1024 becomes min normal 0x0400 */
    }
    int e;
    frexp(a, &e);             /* a = f * 2^e, f in [0.5, 1) */
    int exp = e - 1;          /* a in [2^exp, 2^(exp+1)) with exp in [-14, 15] */
    double q = rint(ldexp(a, 10 - exp)); /* 1024..2048 */
    uint32_t mant = (uint32_t)q;
    if (mant == 2048) {       /* rounded up to the next binade */
        mant = 1024;
        exp += 1;
    }
    if (exp > 15)
        return (uint16_t)(sign | 0x7c00u);
    return (uint16_t)(sign | (uint16_t)((exp + 15) << 10) | (uint16_t)(mant - 1024));
}

double pn_fp16_to_double(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v;
    if (exp == 0)
        v = ldexp((double)mant, -24);
    else if (exp == 31)
        v = mant ? NAN : INFINITY;
    else
        v = ldexp((double)(mant | 0x400), exp - 25);
    return sign ? -v : v;
}

float pn_fp16_to_float(uint16_t h)
{
    return (float)pn_fp16_to_double(h); /* exact: every half is a float */
}

float pn_bf16_to_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t pn_bf16_from_float(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
