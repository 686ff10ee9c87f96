/* fp16.c - binary16 and bfloat16 conversions, exactly rounded (see fp16.h). */
#include "quant/fp16.h"

#include <string.h>

uint16_t pn_bf16_from_float(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
