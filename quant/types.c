/* types.c - the sizing traits of every ggml tensor type id, and the integer
 * helpers of sizing (see types.h). */
#include "quant/types.h"

#include <stddef.h>
#include <strings.h>

/* Block sizes as ggml defines them (ggml.h / ggml-common.h), by type id. */
static const pn_type_traits pn_types[] = {
    { 0, "f32", 1, 4 },         { 1, "f16", 1, 2 },         { 2, "q4_0", 32, 18 },
    { 3, "q4_1", 32, 20 },      { 6, "q5_0", 32, 22 },      { 7, "q5_1", 32, 24 },
    { 8, "q8_0", 32, 34 },      { 9, "q8_1", 32, 36 },      { 10, "q2_K", 256, 84 },
    { 11, "q3_K", 256, 110 },   { 12, "q4_K", 256, 144 },   { 13, "q5_K", 256, 176 },
    { 14, "q6_K", 256, 210 },   { 15, "q8_K", 256, 292 },   { 16, "iq2_xxs", 256, 66 },
    { 17, "iq2_xs", 256, 74 },  { 18, "iq3_xxs", 256, 98 }, { 19, "iq1_s", 256, 50 },
    { 20, "iq4_nl", 32, 18 },   { 21, "iq3_s", 256, 110 },  { 22, "iq2_s", 256, 82 },
    { 23, "iq4_xs", 256, 136 }, { 24, "i8", 1, 1 },         { 25, "i16", 1, 2 },
    { 26, "i32", 1, 4 },        { 27, "i64", 1, 8 },        { 28, "f64", 1, 8 },
    { 29, "iq1_m", 256, 56 },   { 30, "bf16", 1, 2 },       { 34, "tq1_0", 256, 54 },
    { 35, "tq2_0", 256, 66 },   { 39, "mxfp4", 32, 17 },    { 124, "pn3t", 80, 34 },
    { 125, "pn4t", 64, 34 },
};

const pn_type_traits *pn_type_traits_get(int id)
{
    for (size_t i = 0; i < sizeof pn_types / sizeof pn_types[0]; i++)
        if (pn_types[i].id == id)
            return &pn_types[i];
    return NULL;
}

const pn_type_traits *pn_type_traits_by_name(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < sizeof pn_types / sizeof pn_types[0]; i++)
        if (strcasecmp(pn_types[i].name, name) == 0)
            return &pn_types[i];
    return NULL;
}

bool pn_type_is_pn(int id)
{
    return id == PN_TYPE_PN3T || id == PN_TYPE_PN4T;
}

bool pn_type_is_float(int id)
{
    return id == PN_TYPE_F32 || id == PN_TYPE_F16 || id == PN_TYPE_BF16;
}

int64_t pn_type_row_bytes(int id, int64_t n)
{
    const pn_type_traits *t = pn_type_traits_get(id);
    if (!t || n < 0 || n % t->block_weights != 0)
        return -1;
    return n / t->block_weights * t->block_bytes;
}

int64_t pn_gcd_i64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int64_t pn_lcm_i64(int64_t a, int64_t b)
{
    return a / pn_gcd_i64(a, b) * b;
}

bool pn_weight_count(const int64_t ne[4], int64_t *n)
{
    int64_t c = 1;
    for (int d = 0; d < 4; d++)
        if (ne[d] < 0 || __builtin_mul_overflow(c, ne[d], &c))
            return false;
    *n = c;
    return true;
}
