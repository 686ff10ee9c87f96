/* types.c - the type table (see types.h): every ggml tensor type id, its
 * block as ggml defines it (ggml.h / ggml-common.h), and for the types a
 * mix writes their kernels per path; the integer helpers of sizing. */
#include "quant/types.h"
#include "quant/types_testing.h"

#include <string.h>
#include <strings.h>

#include "quant/kquants.h"
#include "quant/kquants_fast.h"
#include "quant/kquants_weighted.h"
#include "quant/pn.h"
#include "quant/pn_fast_internal.h"
#include "quant/quant_row.h"

/* The PN encoders per path: the reference by type, the fast paths by the
 * type's parameters. */
#define PN_ENCODERS(T, ID)                                                                         \
    static pn_status T##_ref(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,            \
                             double *blk_err, double *blk_norm)                                    \
    {                                                                                              \
        return pn_quantize_row_ref_sums(ID, x, n, out, bad_col, blk_err, blk_norm);                \
    }                                                                                              \
    static pn_status T##_scalar(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,         \
                                double *blk_err, double *blk_norm)                                 \
    {                                                                                              \
        return pn_quantize_row_scalar_fast(pn_params_get(ID), x, n, out, bad_col, blk_err,         \
                                           blk_norm);                                              \
    }                                                                                              \
    static pn_status T##_avx2(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,           \
                              double *blk_err, double *blk_norm)                                   \
    {                                                                                              \
        return pn_quantize_row_avx2(pn_params_get(ID), x, n, out, bad_col, blk_err, blk_norm);     \
    }                                                                                              \
    static pn_status T##_avx512(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,         \
                                double *blk_err, double *blk_norm)                                 \
    {                                                                                              \
        return pn_quantize_row_avx512(pn_params_get(ID), x, n, out, bad_col, blk_err, blk_norm);   \
    }                                                                                              \
    static void T##_decode(const uint8_t *in, float *y, int64_t n)                                 \
    {                                                                                              \
        pn_dequantize_row(ID, in, y, n);                                                           \
    }
PN_ENCODERS(pn3t, PN_TYPE_PN3T)
PN_ENCODERS(pn4t, PN_TYPE_PN4T)

/* The k-quants' reference path: the reference encoder, then the sums as
 * pn_row_sums_ref computes them (the fast paths fuse theirs). */
#define KQ_REF(T, ID)                                                                              \
    static pn_status T##_ref(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,            \
                             double *blk_err, double *blk_norm)                                    \
    {                                                                                              \
        pn_status st = pn_quantize_row_##T##_ref(x, n, out, bad_col);                              \
        if (st == PN_OK && blk_err)                                                                \
            st = pn_row_sums_ref(ID, x, out, n, blk_err, blk_norm);                                \
        return st;                                                                                 \
    }
KQ_REF(q4_K, PN_TYPE_Q4_K)
KQ_REF(q3_K, PN_TYPE_Q3_K)

#define W PN_CAN_WRITE
#define ALL_PATHS(f)                                                                               \
    {                                                                                              \
        f, f, f, f                                                                                 \
    }
#define PATHS(T)                                                                                   \
    {                                                                                              \
        T##_ref, T##_scalar, T##_avx2, T##_avx512                                                  \
    }
#define KQ_PATHS(T)                                                                                \
    {                                                                                              \
        T##_ref, pn_kq_##T##_row_w4, pn_kq_##T##_row_avx2, pn_kq_##T##_row_avx512                  \
    }

/* By type id. The encoders are indexed by PN_PATH_REF, _SCALAR_FAST, _AVX2,
 * _AVX512; q8_0 and the plain types have one implementation for all. */
static const pn_type_traits pn_types[] = {
    { 0, "f32", 1, 4, W | PN_CAN_STOCK | PN_CAN_FLOAT, 256, pn_dequantize_row_f32,
      ALL_PATHS(pn_quantize_row_f32_sums), NULL },
    { 1, "f16", 1, 2, W | PN_CAN_STOCK | PN_CAN_FLOAT, 256, pn_dequantize_row_f16,
      ALL_PATHS(pn_quantize_row_f16_sums), NULL },
    { 2, "q4_0", 32, 18, 0, 0, NULL, { NULL }, NULL },
    { 3, "q4_1", 32, 20, 0, 0, NULL, { NULL }, NULL },
    { 6, "q5_0", 32, 22, 0, 0, NULL, { NULL }, NULL },
    { 7, "q5_1", 32, 24, 0, 0, NULL, { NULL }, NULL },
    { 8, "q8_0", 32, 34, W | PN_CAN_STOCK, 32, pn_dequantize_row_q8_0, ALL_PATHS(pn_q8_0_row_sums),
      NULL },
    { 9, "q8_1", 32, 36, 0, 0, NULL, { NULL }, NULL },
    { 10, "q2_K", 256, 84, 0, 0, NULL, { NULL }, NULL },
    { 11, "q3_K", 256, 110, W | PN_CAN_STOCK | PN_CAN_KQUANT, 256, pn_dequantize_row_q3_K,
      KQ_PATHS(q3_K), pn_quantize_row_q3_K_weighted },
    { 12, "q4_K", 256, 144, W | PN_CAN_STOCK | PN_CAN_KQUANT, 256, pn_dequantize_row_q4_K,
      KQ_PATHS(q4_K), pn_quantize_row_q4_K_weighted },
    { 13, "q5_K", 256, 176, 0, 0, NULL, { NULL }, NULL },
    { 14, "q6_K", 256, 210, 0, 0, NULL, { NULL }, NULL },
    { 15, "q8_K", 256, 292, 0, 0, NULL, { NULL }, NULL },
    { 16, "iq2_xxs", 256, 66, 0, 0, NULL, { NULL }, NULL },
    { 17, "iq2_xs", 256, 74, 0, 0, NULL, { NULL }, NULL },
    { 18, "iq3_xxs", 256, 98, 0, 0, NULL, { NULL }, NULL },
    { 19, "iq1_s", 256, 50, 0, 0, NULL, { NULL }, NULL },
    { 20, "iq4_nl", 32, 18, 0, 0, NULL, { NULL }, NULL },
    { 21, "iq3_s", 256, 110, 0, 0, NULL, { NULL }, NULL },
    { 22, "iq2_s", 256, 82, 0, 0, NULL, { NULL }, NULL },
    { 23, "iq4_xs", 256, 136, 0, 0, NULL, { NULL }, NULL },
    { 24, "i8", 1, 1, 0, 0, NULL, { NULL }, NULL },
    { 25, "i16", 1, 2, 0, 0, NULL, { NULL }, NULL },
    { 26, "i32", 1, 4, 0, 0, NULL, { NULL }, NULL },
    { 27, "i64", 1, 8, 0, 0, NULL, { NULL }, NULL },
    { 28, "f64", 1, 8, 0, 0, NULL, { NULL }, NULL },
    { 29, "iq1_m", 256, 56, 0, 0, NULL, { NULL }, NULL },
    { 30, "bf16", 1, 2, W | PN_CAN_STOCK | PN_CAN_FLOAT, 256, pn_dequantize_row_bf16,
      ALL_PATHS(pn_quantize_row_bf16_sums), NULL },
    { 34, "tq1_0", 256, 54, 0, 0, NULL, { NULL }, NULL },
    { 35, "tq2_0", 256, 66, 0, 0, NULL, { NULL }, NULL },
    { 39, "mxfp4", 32, 17, 0, 0, NULL, { NULL }, NULL },
    { 124, "pn3t", 80, 34, W | PN_CAN_PN, 80, pn3t_decode, PATHS(pn3t), NULL },
    { 125, "pn4t", 64, 34, W | PN_CAN_PN, 64, pn4t_decode, PATHS(pn4t), NULL },
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

const pn_type_traits *pn_type_traits_all(size_t *count)
{
    *count = sizeof pn_types / sizeof pn_types[0];
    return pn_types;
}

const char *pn_type_name(int id)
{
    const pn_type_traits *t = pn_type_traits_get(id);
    return t ? t->name : "?";
}

int pn_float_type_from_name(const char *name)
{
    const pn_type_traits *t = pn_type_traits_by_name(name);
    return t && (t->can & PN_CAN_FLOAT) && strcmp(t->name, name) == 0 ? t->id : -1;
}

bool pn_type_can(int id, unsigned can)
{
    const pn_type_traits *t = pn_type_traits_get(id);
    return t && (t->can & can) == can;
}

bool pn_type_is_pn(int id)
{
    return pn_type_can(id, PN_CAN_PN);
}

bool pn_type_is_float(int id)
{
    return pn_type_can(id, PN_CAN_FLOAT);
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
