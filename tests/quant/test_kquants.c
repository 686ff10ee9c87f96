/* Pins the stock ggml types a mix writes (quant/kquants.h): q8_0, q4_K,
 * q3_K and the plain f32 / f16 / bf16 of the stock dispatcher.
 *
 * - Decoding: hand-built blocks, one field at a time, decode to values
 *   computed by hand from ggml's layout (written out here independently of
 *   the library's own packing helpers).
 * - Encoding: round trips within error bounds on Gaussian, heavy-tailed and
 *   outlier data; zero, constant and tiny rows; refusals (NaN/Inf, bad n,
 *   scale overflow) with the column they name; independence from alignment.
 * - The fast paths of q4_K and q3_K (portable, AVX2, AVX-512): the
 *   reference's bytes, status and column on every path this CPU runs, for
 *   random, heavy-tailed and edge rows of 1..8 super-blocks, two failing
 *   blocks in one row, and inside OpenMP loops at 1 and 2 threads; and the
 *   16-lane logic of the AVX-512 build, compiled here with generic vectors.
 * - Independent decodings (tests/data/kquants/, the .blocks.bin and
 *   .decoded.f32 files,
 *   see SOURCE.md there): 1024 random blocks of each type decode to the
 *   independent decoder's floats bit for bit.
 * - Golden file tests/data/kquants/golden.bin: the encoded bytes of a fixed
 *   input, so that any change in the encoders' output is noticed. The input
 *   is built from tu_rng's integer stream with exact double arithmetic only
 *   (no libm), so it is the same on every machine.
 *   To regenerate it after an intended encoder change, run this program with
 *   PN_REGEN_GOLDEN=1 in the environment, e.g.
 *     PN_REGEN_GOLDEN=1 build/tests/test_kquants --filter 'kquants_golden/encodes_the_fixed_input_to_the_frozen_bytes'
 *   and commit the new file together with the change that explains it.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kquants.h"
#include "quant/kquants_testing.h"
#include "quant/kquants_impl.h"
#include "quant/pn_fast.h"
#include "quant/quant_row.h"
#include "quant/types.h"
#include "fixtures/row_kinds.h"
#include "test_util.h"

/* --- the three block types, their constants written out here --------------- */

typedef struct kq_case {
    int type;
    const char *name;
    int block; /* weights per block */
    int bytes; /* bytes per block */
} kq_case;

static const kq_case KQ_CASES[] = {
    { PN_TYPE_Q8_0, "q8_0", 32, 34 },
    { PN_TYPE_Q4_K, "q4_K", 256, 144 },
    { PN_TYPE_Q3_K, "q3_K", 256, 110 },
};
#define N_KQ_CASES 3
/* Criterion re-executes the program for each test, so a parameter must not
 * hold a pointer (the name strings would move): tests take an index. */
static int KQ_INDEX[N_KQ_CASES] = { 0, 1, 2 };

static pn_status quantize(int type, const float *x, int64_t n, uint8_t *out, int64_t *bad)
{
    switch (type) {
    case PN_TYPE_Q8_0: return pn_quantize_row_q8_0(x, n, out, bad);
    case PN_TYPE_Q4_K: return pn_quantize_row_q4_K(x, n, out, bad);
    default: return pn_quantize_row_q3_K(x, n, out, bad);
    }
}

static void dequantize(int type, const uint8_t *in, float *y, int64_t n)
{
    switch (type) {
    case PN_TYPE_Q8_0: pn_dequantize_row_q8_0(in, y, n); break;
    case PN_TYPE_Q4_K: pn_dequantize_row_q4_K(in, y, n); break;
    default: pn_dequantize_row_q3_K(in, y, n); break;
    }
}

static uint8_t *xmalloc(size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    cr_assert(p, "out of memory for %zu bytes", n);
    return p;
}

static double rel_rmse(const float *w, const float *y, int64_t n)
{
    double se = 0.0, sw = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = (double)w[i] - y[i];
        se += e * e;
        sw += (double)w[i] * w[i];
    }
    return sqrt(se / sw);
}

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* --- sizes ------------------------------------------------------------------- */

Test(kquants_layout, block_sizes_are_ggml_s)
{
    cr_assert_eq(sizeof(block_q8_0), 34);
    cr_assert_eq(sizeof(block_q4_K), 144);
    cr_assert_eq(sizeof(block_q3_K), 110);
    for (int c = 0; c < N_KQ_CASES; c++)
        cr_assert_eq(pn_type_row_bytes(KQ_CASES[c].type, 5120),
                     5120 / KQ_CASES[c].block * KQ_CASES[c].bytes, "%s: row bytes",
                     KQ_CASES[c].name);
}

Test(kquants_layout, rounding_helper_is_nearest_even)
{
    static const float in[] = { 0.5f,  1.5f,   2.5f, -0.5f, -2.5f, 3.49999f,
                                -3.5f, 127.5f, 0.0f, -0.0f, 14.5f };
    static const float want[] = { 0.0f,  2.0f,   2.0f, -0.0f, -2.0f, 3.0f,
                                  -4.0f, 128.0f, 0.0f, 0.0f,  14.0f };
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        cr_assert_eq(kq_round(in[i]), want[i], "round(%g) = %g", in[i], kq_round(in[i]));
    cr_assert_eq(kq_clamp(NAN, -4.0f, 3.0f), -4.0f, "a NaN clamps to the low end");
}

/* --- q8_0 decoding ----------------------------------------------------------- */

Test(kquants_q8_0_decode, gives_code_times_d_for_every_int8_code)
{
    uint8_t blk[8 * 34];
    float y[8 * 32];
    for (int b = 0; b < 8; b++) {
        put_u16(blk + 34 * b, 0xb800); /* -0.5 */
        for (int i = 0; i < 32; i++)
            blk[34 * b + 2 + i] = (uint8_t)(32 * b + i); /* every byte 0..255 once */
    }
    pn_dequantize_row_q8_0(blk, y, 256);
    for (int b = 0; b < 8; b++)
        for (int i = 0; i < 32; i++) {
            int code = (int8_t)(uint8_t)(32 * b + i);
            cr_assert_eq(y[32 * b + i], -0.5f * (float)code, "block %d code %d: got %g", b, code,
                         y[32 * b + i]);
        }
}

Test(kquants_q8_0_decode, reads_d_as_little_endian_fp16_at_any_offset)
{
    uint8_t buf[1 + 2 * 34];
    float y[64];
    memset(buf, 0, sizeof buf);
    uint8_t *blk = buf + 1;    /* odd address */
    put_u16(blk, 0x3555);      /* 0.333251953125 */
    put_u16(blk + 34, 0x0001); /* smallest subnormal half, 2^-24 */
    blk[2 + 5] = 3;
    blk[34 + 2 + 31] = (uint8_t)-7;
    pn_dequantize_row_q8_0(blk, y, 64);
    cr_assert_eq(y[5], 3.0f * 0.333251953125f);
    cr_assert_eq(y[32 + 31], -7.0f * 0x1p-24f);
    cr_assert_eq(y[0], 0.0f);
}

/* --- q4_K decoding ----------------------------------------------------------- */

/* Where ggml keeps the 6-bit scale and min of q4_K sub-block j:
 * j < 4: all six bits in one byte's bits 0..5; j >= 4: the low four bits in
 * scales[j+4] (scale: bits 0..3, min: bits 4..7) and the high two in bits
 * 6..7 of scales[j-4] (scale) or scales[j] (min). */
static void q4k_put(uint8_t *scales, int j, int sc, int m)
{
    if (j < 4) {
        scales[j] |= (uint8_t)sc;
        scales[j + 4] |= (uint8_t)m;
    } else {
        scales[j + 4] |= (uint8_t)((sc & 0x0f) | (m & 0x0f) << 4);
        scales[j - 4] |= (uint8_t)((sc >> 4) << 6);
        scales[j] |= (uint8_t)((m >> 4) << 6);
    }
}

Test(kquants_q4_K_decode, places_every_code_by_ggml_s_nibble_order)
{
    uint8_t blk[144];
    float y[256];
    for (int e = 0; e < 256; e++) {
        memset(blk, 0, sizeof blk);
        put_u16(blk, 0x3c00); /* d = 1 */
        for (int j = 0; j < 8; j++)
            q4k_put(blk + 4, j, 1, 0);
        /* weights 64c .. 64c+31 are the low nibbles of qs[32c ..], the next
         * 32 the high nibbles of the same bytes */
        int c = e / 64, r = e % 64;
        blk[16 + 32 * c + r % 32] = (uint8_t)(r < 32 ? 0x0b : 0xb0);
        pn_dequantize_row_q4_K(blk, y, 256);
        for (int i = 0; i < 256; i++)
            cr_assert_eq(y[i], i == e ? 11.0f : 0.0f, "code placed for weight %d: y[%d] = %g", e, i,
                         y[i]);
    }
}

Test(kquants_q4_K_decode, unpacks_the_6_bit_scale_and_min_at_every_index)
{
    /* 45 = 0b101101 and 26 = 0b011010: different low and high parts */
    uint8_t blk[144];
    float y[256];
    for (int j = 0; j < 8; j++) {
        memset(blk, 0, sizeof blk);
        put_u16(blk, 0x4000);     /* d = 2 */
        put_u16(blk + 2, 0x3800); /* dmin = 0.5 */
        q4k_put(blk + 4, j, 45, 26);
        memset(blk + 16, 0x33, 128); /* every code 3 */
        pn_dequantize_row_q4_K(blk, y, 256);
        for (int i = 0; i < 256; i++) {
            float want = i / 32 == j ? 2.0f * 45.0f * 3.0f - 0.5f * 26.0f : 0.0f;
            cr_assert_eq(y[i], want, "scale/min at sub-block %d: y[%d] = %g, want %g", j, i, y[i],
                         want);
        }
    }
}

Test(kquants_q4_K_decode, subtracts_dmin_times_min_alone)
{
    uint8_t blk[144];
    float y[256];
    for (int j = 0; j < 8; j++) {
        memset(blk, 0, sizeof blk);
        put_u16(blk, 0x3c00);
        put_u16(blk + 2, 0x3400); /* dmin = 0.25 */
        q4k_put(blk + 4, j, 0, 63);
        memset(blk + 16, 0xff, 128);
        pn_dequantize_row_q4_K(blk, y, 256);
        for (int i = 0; i < 256; i++)
            cr_assert_eq(y[i], i / 32 == j ? -15.75f : 0.0f, "min of sub-block %d: y[%d] = %g", j,
                         i, y[i]);
    }
}

Test(kquants_q4_K_decode, accessors_agree_with_the_layout_for_every_value)
{
    for (int j = 0; j < 8; j++)
        for (int v = 0; v < 64; v++) {
            uint8_t want[12] = { 0 }, got[12];
            q4k_put(want, j, v, 63 - v);
            memset(got, 0, sizeof got);
            pn_q4_K_set_scale_min(got, j, v, 63 - v);
            cr_assert_arr_eq(got, want, 12, "set sub-block %d value %d", j, v);
            /* setting must keep the other sub-blocks' bits */
            uint8_t full[12];
            memset(full, 0xff, sizeof full);
            pn_q4_K_set_scale_min(full, j, v, 63 - v);
            for (int k = 0; k < 8; k++) {
                int sc, m;
                pn_q4_K_get_scale_min(full, k, &sc, &m);
                cr_assert_eq(sc, k == j ? v : 63, "sub-block %d after setting %d", k, j);
                cr_assert_eq(m, k == j ? 63 - v : 63, "sub-block %d after setting %d", k, j);
            }
        }
}

/* --- q3_K decoding ----------------------------------------------------------- */

/* Where ggml keeps q3_K's sixteen 6-bit scales: the low four bits of scale j
 * in scales[j % 8] (bits 0..3 for j < 8, 4..7 for j >= 8), the high two in
 * scales[8 + j % 4] at bits 2*(j/4). */
static void q3k_put(uint8_t *scales, int j, int u)
{
    scales[j % 8] |= (uint8_t)((u & 15) << (j < 8 ? 0 : 4));
    scales[8 + j % 4] |= (uint8_t)((u >> 4) << (2 * (j / 4)));
}

/* A block where every weight has code 4 (value 0) and every scale k = 1. */
static void q3k_neutral(uint8_t *blk)
{
    memset(blk, 0, 110);
    memset(blk, 0xff, 32); /* hmask: high bit set -> no -4 */
    for (int j = 0; j < 16; j++)
        q3k_put(blk + 96, j, 33);
    put_u16(blk + 108, 0x3c00);
}

Test(kquants_q3_K_decode, places_every_low_code_by_ggml_s_bit_walk)
{
    uint8_t blk[110];
    float y[256];
    for (int e = 0; e < 256; e++) {
        q3k_neutral(blk);
        /* weight e = 128h + 32p + l: two bits at 2p of qs[32h + l] */
        int h = e / 128, p = (e / 32) % 4, l = e % 32;
        blk[32 + 32 * h + l] = (uint8_t)(2 << (2 * p));
        pn_dequantize_row_q3_K(blk, y, 256);
        for (int i = 0; i < 256; i++)
            cr_assert_eq(y[i], i == e ? 2.0f : 0.0f, "low bits of weight %d: y[%d] = %g", e, i,
                         y[i]);
    }
}

Test(kquants_q3_K_decode, places_every_high_bit_by_ggml_s_mask_walk)
{
    uint8_t blk[110];
    float y[256];
    for (int e = 0; e < 256; e++) {
        q3k_neutral(blk);
        /* weight e: bit e/32 of hmask[e % 32]; clear -> subtract 4 */
        blk[e % 32] = (uint8_t) ~(1u << (e / 32));
        pn_dequantize_row_q3_K(blk, y, 256);
        for (int i = 0; i < 256; i++)
            cr_assert_eq(y[i], i == e ? -4.0f : 0.0f, "high bit of weight %d: y[%d] = %g", e, i,
                         y[i]);
    }
}

Test(kquants_q3_K_decode, unpacks_the_6_bit_scale_at_every_index)
{
    /* u = 39 = 0b100111 (k = 7) and u = 0 (k = -32): both halves of the
     * field and both ends of the range */
    static const int us[] = { 39, 0, 63, 26 };
    uint8_t blk[110];
    float y[256];
    for (size_t t = 0; t < sizeof us / sizeof us[0]; t++)
        for (int j = 0; j < 16; j++) {
            memset(blk, 0, 110);
            memset(blk, 0xff, 32);
            memset(blk + 32, 0x55, 64); /* every code 4 + 1 */
            for (int k = 0; k < 16; k++)
                q3k_put(blk + 96, k, k == j ? us[t] : 32);
            put_u16(blk + 108, 0xb400); /* d = -0.25 */
            pn_dequantize_row_q3_K(blk, y, 256);
            for (int i = 0; i < 256; i++) {
                float want = i / 16 == j ? -0.25f * (float)(us[t] - 32) : 0.0f;
                cr_assert_eq(y[i], want, "scale %d = %d: y[%d] = %g, want %g", j, us[t], i, y[i],
                             want);
            }
        }
}

Test(kquants_q3_K_decode, accessors_agree_with_the_layout_for_every_value)
{
    for (int j = 0; j < 16; j++)
        for (int u = 0; u < 64; u++) {
            uint8_t want[12] = { 0 }, got[12];
            q3k_put(want, j, u);
            memset(got, 0, sizeof got);
            pn_q3_K_set_scale(got, j, u);
            cr_assert_arr_eq(got, want, 12, "set scale %d to %d", j, u);
            uint8_t full[12];
            memset(full, 0xff, sizeof full);
            pn_q3_K_set_scale(full, j, u);
            for (int k = 0; k < 16; k++)
                cr_assert_eq(pn_q3_K_get_scale(full, k), k == j ? u : 63,
                             "scale %d after setting %d", k, j);
        }
}

/* --- encoding: round trips --------------------------------------------------- */

typedef enum { DIST_GAUSS, DIST_HEAVY, DIST_OUTLIERS } dist;

/* rows x cols weights of the given distribution, sigma 0.02. */
static float *make_weights(dist d, int rows, int cols, uint64_t seed)
{
    float *w = (float *)xmalloc((size_t)rows * cols * sizeof(float));
    tu_rng r = { seed };
    for (int i = 0; i < rows * cols; i++) {
        double g = tu_rng_gauss(&r);
        if (d == DIST_HEAVY) /* Student-t with 3 degrees of freedom */
            g /= sqrt(
                (pow(tu_rng_gauss(&r), 2) + pow(tu_rng_gauss(&r), 2) + pow(tu_rng_gauss(&r), 2)) /
                3.0);
        w[i] = (float)(0.02 * g);
    }
    if (d == DIST_OUTLIERS) {
        for (int k = 0; k < rows * cols / 1000; k++)
            w[tu_rng_u64(&r) % (uint64_t)(rows * cols)] *= 10.0f;
        for (int k = 0; k < 4; k++) {
            int c = (int)(tu_rng_u64(&r) % (uint64_t)cols);
            for (int i = 0; i < rows; i++)
                w[i * cols + c] *= 8.0f;
        }
    }
    return w;
}

typedef struct rt_case {
    int type;
    dist d;
    double max_rel_rmse;
} rt_case;

ParameterizedTestParameters(kquants_encode, round_trips_within_the_type_s_error)
{
    /* Bounds: what these encoders reach on this data plus 3% (measured:
     * q8_0 0.00526 / 0.00827 / 0.00778, q4_K 0.0694 / 0.0894 / 0.0702,
     * q3_K 0.1437 / 0.1831 / 0.1408 for Gaussian / Student-t / outliers), so
     * that a change that makes an encoder noticeably worse fails here. */
    static rt_case cases[] = {
        { PN_TYPE_Q8_0, DIST_GAUSS, 0.0054 },    { PN_TYPE_Q8_0, DIST_HEAVY, 0.0085 },
        { PN_TYPE_Q8_0, DIST_OUTLIERS, 0.0080 }, { PN_TYPE_Q4_K, DIST_GAUSS, 0.0715 },
        { PN_TYPE_Q4_K, DIST_HEAVY, 0.092 },     { PN_TYPE_Q4_K, DIST_OUTLIERS, 0.0725 },
        { PN_TYPE_Q3_K, DIST_GAUSS, 0.148 },     { PN_TYPE_Q3_K, DIST_HEAVY, 0.189 },
        { PN_TYPE_Q3_K, DIST_OUTLIERS, 0.145 },
    };
    return cr_make_param_array(rt_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(rt_case *tc, kquants_encode, round_trips_within_the_type_s_error)
{
    const int rows = 16, cols = 5120;
    float *w = make_weights(tc->d, rows, cols, 1000 + (uint64_t)tc->d);
    float *y = (float *)xmalloc((size_t)rows * cols * sizeof(float));
    int64_t rb = pn_type_row_bytes(tc->type, cols);
    uint8_t *q = xmalloc((size_t)(rows * rb));
    for (int r = 0; r < rows; r++) {
        int64_t bad = 7;
        cr_assert_eq(quantize(tc->type, w + r * cols, cols, q + r * rb, &bad), PN_OK, "row %d", r);
        dequantize(tc->type, q + r * rb, y + r * cols, cols);
    }
    double e = rel_rmse(w, y, (int64_t)rows * cols);
    cr_assert(e <= tc->max_rel_rmse, "type %d dist %d: relative RMSE %.5f above %.5f", tc->type,
              (int)tc->d, e, tc->max_rel_rmse);
    cr_assert(e > 0.0, "no error at all is suspicious for random data");
    free(w);
    free(y);
    free(q);
}

/* The target the project set: no worse than 1.02x ggml's reference encoders
 * on the benchmark's matrix (bench/bench_kquants.c, here fewer rows). */
Test(kquants_encode, stays_within_2_percent_of_ggml_s_error_on_outlier_data)
{
    static const double ggml[N_KQ_CASES] = { 0.00672, 0.0776, 0.163 };
    const int rows = 64, cols = 5120;
    float *w = make_weights(DIST_OUTLIERS, rows, cols, 77);
    float *y = (float *)xmalloc((size_t)rows * cols * sizeof(float));
    for (int c = 0; c < N_KQ_CASES; c++) {
        int64_t rb = pn_type_row_bytes(KQ_CASES[c].type, cols);
        uint8_t *q = xmalloc((size_t)rb);
        for (int r = 0; r < rows; r++) {
            cr_assert_eq(quantize(KQ_CASES[c].type, w + r * cols, cols, q, NULL), PN_OK);
            dequantize(KQ_CASES[c].type, q, y + r * cols, cols);
        }
        double e = rel_rmse(w, y, (int64_t)rows * cols);
        cr_assert(e <= 1.02 * ggml[c], "%s: relative RMSE %.5f, ggml's reference %.5f",
                  KQ_CASES[c].name, e, ggml[c]);
        free(q);
    }
    free(w);
    free(y);
}

Test(kquants_encode, q8_0_never_writes_minus_128_and_errs_at_most_one_step)
{
    const int n = 4096;
    float *w = make_weights(DIST_HEAVY, 1, n, 5);
    uint8_t q[4096 / 32 * 34];
    float y[4096];
    cr_assert_eq(pn_quantize_row_q8_0(w, n, q, NULL), PN_OK);
    pn_dequantize_row_q8_0(q, y, n);
    for (int b = 0; b < n / 32; b++) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) {
            cr_assert_neq((int8_t)q[34 * b + 2 + i], -128, "block %d", b);
            amax = fmaxf(amax, fabsf(w[32 * b + i]));
        }
        float d = pn_fp16_to_float((uint16_t)(q[34 * b] | q[34 * b + 1] << 8));
        cr_assert(d > 0.0f && d <= amax / 127.0f * 1.01f, "block %d: d %g for amax %g", b, d, amax);
        for (int i = 0; i < 32; i++)
            cr_assert(fabsf(w[32 * b + i] - y[32 * b + i]) <= d, "block %d weight %d", b, i);
    }
    free(w);
}

ParameterizedTestParameters(kquants_encode, encodes_an_all_zero_row_to_zeros)
{
    return cr_make_param_array(int, KQ_INDEX, N_KQ_CASES);
}

ParameterizedTest(int *ci, kquants_encode, encodes_an_all_zero_row_to_zeros)
{
    const kq_case *tc = &KQ_CASES[*ci];
    const int n = 1024;
    float w[1024], y[1024];
    uint8_t q[1024 / 32 * 34];
    for (int i = 0; i < n; i++)
        w[i] = (i % 3) ? 0.0f : -0.0f;
    cr_assert_eq(quantize(tc->type, w, n, q, NULL), PN_OK, "%s", tc->name);
    dequantize(tc->type, q, y, n);
    for (int i = 0; i < n; i++)
        cr_assert(y[i] == 0.0f, "%s: weight %d decodes to %g", tc->name, i, y[i]);
    /* the scales are zero: no NaN or infinity can come out of such a block */
    for (int b = 0; b < n / tc->block; b++) {
        const uint8_t *blk = q + b * tc->bytes;
        int off = tc->type == PN_TYPE_Q3_K ? 108 : 0;
        cr_assert_eq(blk[off] | blk[off + 1], 0, "%s block %d: d", tc->name, b);
    }
}

ParameterizedTestParameters(kquants_encode, handles_constant_tiny_and_one_sided_rows)
{
    return cr_make_param_array(int, KQ_INDEX, N_KQ_CASES);
}

ParameterizedTest(int *ci, kquants_encode, handles_constant_tiny_and_one_sided_rows)
{
    const kq_case *tc = &KQ_CASES[*ci];
    const int n = 512;
    float w[512], y[512];
    uint8_t q[512 / 32 * 34];
    tu_rng r = { 9 };
    for (int kind = 0; kind < 7; kind++) {
        for (int i = 0; i < n; i++) {
            double u = tu_rng_uniform(&r);
            switch (kind) {
            case 0: w[i] = 0.75f; break;                       /* constant positive */
            case 1: w[i] = -0.3f; break;                       /* constant negative */
            case 2: w[i] = (float)(1e-4 * (u - 0.5)); break;   /* scales in fp16's subnormals */
            case 3: w[i] = (float)(1e-12 * (u - 0.5)); break;  /* below every fp16 scale */
            case 4: w[i] = (float)(0.01 + u); break;           /* all positive */
            case 5: w[i] = (float)(-0.01 - u); break;          /* all negative */
            default: w[i] = (float)(1e-40 * (u - 0.5)); break; /* float subnormals */
            }
        }
        cr_assert_eq(quantize(tc->type, w, n, q, NULL), PN_OK, "%s kind %d", tc->name, kind);
        dequantize(tc->type, q, y, n);
        double amax = 0.0;
        for (int i = 0; i < n; i++)
            amax = fmax(amax, fabs(w[i]));
        /* a constant row must come back almost exactly; a row below every
         * fp16 scale comes back as zeros; the others within about one code
         * step (q3_K: 7 steps across -amax..amax, the extreme opposite the
         * scale's sign may be clipped by one) */
        static const double step_frac[N_KQ_CASES] = { 0.01, 0.1, 0.3 };
        double tol =
            kind < 2 ? 0.02 * amax : (kind == 3 || kind == 6 ? amax : step_frac[*ci] * amax);
        for (int i = 0; i < n; i++) {
            cr_assert(isfinite(y[i]), "%s kind %d weight %d not finite", tc->name, kind, i);
            cr_assert(fabs((double)w[i] - y[i]) <= tol, "%s kind %d weight %d: %g -> %g", tc->name,
                      kind, i, w[i], y[i]);
        }
    }
}

ParameterizedTestParameters(kquants_encode, gives_the_same_bytes_at_any_alignment_and_row_position)
{
    return cr_make_param_array(int, KQ_INDEX, N_KQ_CASES);
}

ParameterizedTest(int *ci, kquants_encode, gives_the_same_bytes_at_any_alignment_and_row_position)
{
    const kq_case *tc = &KQ_CASES[*ci];
    const int n = 1024;
    float *w = make_weights(DIST_OUTLIERS, 2, n, 21);
    int64_t rb = pn_type_row_bytes(tc->type, n);
    uint8_t *a = xmalloc((size_t)(2 * rb)), *b = xmalloc((size_t)(2 * rb) + 8);
    cr_assert_eq(quantize(tc->type, w, 2 * n, a, NULL), PN_OK);
    /* second row alone, at an odd address, with guard bytes around it */
    memset(b, 0xa5, (size_t)(2 * rb) + 8);
    cr_assert_eq(quantize(tc->type, w + n, n, b + 3, NULL), PN_OK);
    cr_assert_arr_eq(b + 3, a + rb, (size_t)rb, "%s: row 2 alone differs from row 2 of the pair",
                     tc->name);
    cr_assert_eq(b[2], 0xa5, "%s wrote before its output", tc->name);
    cr_assert_eq(b[3 + rb], 0xa5, "%s wrote past its output", tc->name);
    /* decoding from the odd address gives the same floats */
    float *y1 = (float *)xmalloc(n * sizeof(float)), *y2 = (float *)xmalloc(n * sizeof(float));
    dequantize(tc->type, a + rb, y1, n);
    dequantize(tc->type, b + 3, y2, n);
    cr_assert_arr_eq(y1, y2, n * sizeof(float));
    free(w);
    free(a);
    free(b);
    free(y1);
    free(y2);
}

/* --- encoding: refusals ------------------------------------------------------ */

ParameterizedTestParameters(kquants_refuse, names_the_column_of_a_nan_or_infinity)
{
    return cr_make_param_array(int, KQ_INDEX, N_KQ_CASES);
}

ParameterizedTest(int *ci, kquants_refuse, names_the_column_of_a_nan_or_infinity)
{
    const kq_case *tc = &KQ_CASES[*ci];
    const int n = 1024;
    static const int cols[] = { 0, 1, 255, 256, 700, 1023 };
    float w[1024];
    uint8_t q[1024 / 32 * 34];
    for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++)
        for (int kind = 0; kind < 3; kind++) {
            for (int i = 0; i < n; i++)
                w[i] = 0.01f * (float)((i * 37) % 17 - 8);
            w[cols[c]] = kind == 0 ? NAN : (kind == 1 ? INFINITY : -INFINITY);
            if (cols[c] + 5 < n)
                w[cols[c] + 5] = NAN; /* a later one must not be the one named */
            int64_t bad = -2;
            cr_assert_eq(quantize(tc->type, w, n, q, &bad), PN_ERR_NONFINITE, "%s col %d", tc->name,
                         cols[c]);
            cr_assert_eq(bad, cols[c], "%s: named column %lld, the bad one is %d", tc->name,
                         (long long)bad, cols[c]);
            cr_assert_eq(quantize(tc->type, w, n, q, NULL), PN_ERR_NONFINITE,
                         "%s with bad_col NULL", tc->name);
        }
}

ParameterizedTestParameters(kquants_refuse, a_row_that_is_not_whole_blocks)
{
    return cr_make_param_array(int, KQ_INDEX, N_KQ_CASES);
}

ParameterizedTest(int *ci, kquants_refuse, a_row_that_is_not_whole_blocks)
{
    const kq_case *tc = &KQ_CASES[*ci];
    float w[512] = { 0 };
    uint8_t q[512 / 32 * 34];
    int64_t bad = 0;
    cr_assert_eq(quantize(tc->type, w, tc->block + 1, q, &bad), PN_ERR_USAGE, "%s", tc->name);
    cr_assert_eq(bad, -1);
    cr_assert_eq(quantize(tc->type, w, tc->block / 2, q, &bad), PN_ERR_USAGE, "%s", tc->name);
    cr_assert_eq(quantize(tc->type, w, -(int64_t)tc->block, q, &bad), PN_ERR_USAGE, "%s", tc->name);
    cr_assert_eq(quantize(tc->type, w, 0, q, &bad), PN_OK, "%s: an empty row is whole blocks",
                 tc->name);
}

ParameterizedTestParameters(kquants_refuse, a_block_whose_scale_overflows_fp16)
{
    return cr_make_param_array(int, KQ_INDEX, N_KQ_CASES);
}

ParameterizedTest(int *ci, kquants_refuse, a_block_whose_scale_overflows_fp16)
{
    const kq_case *tc = &KQ_CASES[*ci];
    const int n = 1024;
    float w[1024];
    uint8_t q[1024 / 32 * 34];
    for (int i = 0; i < n; i++)
        w[i] = 0.01f * (float)(i % 7 - 3);
    w[600] = 3e9f; /* fp16 tops out at 65504: no scale can reach this */
    int64_t bad = 0;
    cr_assert_eq(quantize(tc->type, w, n, q, &bad), PN_ERR_SCALE_OVERFLOW, "%s", tc->name);
    cr_assert_eq(bad, 600 / tc->block * tc->block, "%s: names the block's first column", tc->name);
    /* a large but representable block is fine */
    w[600] = 1e5f;
    cr_assert_eq(quantize(tc->type, w, n, q, &bad), PN_OK, "%s", tc->name);
}

/* --- the stock dispatcher ---------------------------------------------------- */

Test(kquants_stock, knows_exactly_the_types_a_mix_writes)
{
    static const int yes[] = { PN_TYPE_F32,  PN_TYPE_F16,  PN_TYPE_BF16,
                               PN_TYPE_Q8_0, PN_TYPE_Q3_K, PN_TYPE_Q4_K };
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        cr_assert(pn_type_can(yes[i], PN_CAN_STOCK), "type %d", yes[i]);
    static const int no[] = { 2,  3,   6, 7, 9, 10, 13, 14, 15, 23, PN_TYPE_PN3T, PN_TYPE_PN4T,
                              -1, 1000 };
    float w[256] = { 0 }, y[256];
    uint8_t q[1024];
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        cr_assert_not(pn_type_can(no[i], PN_CAN_STOCK), "type %d", no[i]);
        int64_t bad = 0;
        cr_assert_eq(pn_quantize_row_stock(no[i], w, 256, q, &bad), PN_ERR_TYPE, "type %d", no[i]);
        if (!pn_type_is_pn(no[i])) /* the one decoder decodes the PN types too */
            cr_assert_eq(pn_dequantize_row_type(no[i], q, y, 256), PN_ERR_TYPE, "type %d", no[i]);
    }
}

Test(kquants_stock, dispatches_the_block_types_to_their_encoders)
{
    const int n = 512;
    float *w = make_weights(DIST_GAUSS, 1, n, 3);
    for (int c = 0; c < N_KQ_CASES; c++) {
        uint8_t a[512 / 32 * 34], b[512 / 32 * 34];
        float ya[512], yb[512];
        cr_assert_eq(pn_quantize_row_stock(KQ_CASES[c].type, w, n, a, NULL), PN_OK);
        cr_assert_eq(quantize(KQ_CASES[c].type, w, n, b, NULL), PN_OK);
        int64_t rb = pn_type_row_bytes(KQ_CASES[c].type, n);
        cr_assert_arr_eq(a, b, (size_t)rb, "%s", KQ_CASES[c].name);
        cr_assert_eq(pn_dequantize_row_type(KQ_CASES[c].type, a, ya, n), PN_OK);
        dequantize(KQ_CASES[c].type, a, yb, n);
        cr_assert_arr_eq(ya, yb, sizeof ya, "%s", KQ_CASES[c].name);
        cr_assert_eq(pn_dequantize_row_type(KQ_CASES[c].type, a, ya, n - 1), PN_ERR_USAGE, "%s",
                     KQ_CASES[c].name);
        int64_t bad = 0;
        cr_assert_eq(pn_quantize_row_stock(KQ_CASES[c].type, w, n - 1, a, &bad), PN_ERR_USAGE);
    }
    free(w);
}

Test(kquants_stock, copies_f32_bit_for_bit_little_endian)
{
    static const float w[8] = { 1.0f, -0.0f, 0x1p-149f, -3.4028235e38f, 0.1f, 1e-40f, 7.0f, -2.5f };
    uint8_t q[32];
    float y[8];
    cr_assert_eq(pn_quantize_row_stock(PN_TYPE_F32, w, 8, q, NULL), PN_OK);
    for (int i = 0; i < 8; i++) {
        uint32_t u;
        memcpy(&u, &w[i], 4);
        uint32_t got = (uint32_t)q[4 * i] | (uint32_t)q[4 * i + 1] << 8 |
                       (uint32_t)q[4 * i + 2] << 16 | (uint32_t)q[4 * i + 3] << 24;
        cr_assert_eq(got, u, "weight %d", i);
    }
    cr_assert_eq(pn_dequantize_row_type(PN_TYPE_F32, q, y, 8), PN_OK);
    cr_assert_arr_eq(y, w, sizeof w);
}

Test(kquants_stock, rounds_f16_and_bf16_once_to_nearest_even)
{
    /* 1 + 2^-11 is halfway between the halves 1 and 1 + 2^-10: ties to even
     * gives 1 (0x3c00); 1 + 3*2^-11 ties up to 1 + 2^-9 (0x3c02). bf16: 1 +
     * 2^-8 is halfway between 1 and 1 + 2^-7 -> 0x3f80; 1 + 3*2^-8 -> 0x3f82. */
    static const float w[4] = { 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, -65504.0f, 0x1p-24f };
    static const uint16_t h[4] = { 0x3c00, 0x3c02, 0xfbff, 0x0001 };
    static const float wb[4] = { 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.0f, 1e30f };
    static const uint16_t hb[4] = { 0x3f80, 0x3f82, 0xc000, 0x714a };
    uint8_t q[8];
    float y[4];
    cr_assert_eq(pn_quantize_row_stock(PN_TYPE_F16, w, 4, q, NULL), PN_OK);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(q[2 * i] | q[2 * i + 1] << 8, h[i], "f16 %d: 0x%04x", i,
                     q[2 * i] | q[2 * i + 1] << 8);
    cr_assert_eq(pn_dequantize_row_type(PN_TYPE_F16, q, y, 4), PN_OK);
    cr_assert_eq(y[1], 1.0f + 0x1p-9f);
    cr_assert_eq(pn_quantize_row_stock(PN_TYPE_BF16, wb, 4, q, NULL), PN_OK);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(q[2 * i] | q[2 * i + 1] << 8, hb[i], "bf16 %d: 0x%04x", i,
                     q[2 * i] | q[2 * i + 1] << 8);
    cr_assert_eq(pn_dequantize_row_type(PN_TYPE_BF16, q, y, 4), PN_OK);
    cr_assert_eq(y[2], -2.0f);
}

Test(kquants_stock, refuses_nonfinite_weights_and_f16_overflow_by_column)
{
    float w[6] = { 0.5f, 1.0f, 2.0f, 70000.0f, NAN, 3.0f };
    uint8_t q[24];
    int64_t bad = 0;
    cr_assert_eq(pn_quantize_row_stock(PN_TYPE_F16, w, 6, q, &bad), PN_ERR_SCALE_OVERFLOW);
    cr_assert_eq(bad, 3);
    w[3] = 65504.0f; /* the largest half is fine */
    cr_assert_eq(pn_quantize_row_stock(PN_TYPE_F16, w, 6, q, &bad), PN_ERR_NONFINITE);
    cr_assert_eq(bad, 4);
    cr_assert_eq(pn_quantize_row_stock(PN_TYPE_F32, w, 6, q, &bad), PN_ERR_NONFINITE);
    cr_assert_eq(bad, 4);
    w[4] = -INFINITY;
    cr_assert_eq(pn_quantize_row_stock(PN_TYPE_BF16, w, 6, q, &bad), PN_ERR_NONFINITE);
    cr_assert_eq(bad, 4);
    w[4] = 3.4e38f; /* rounds past bf16's largest finite value */
    cr_assert_eq(pn_quantize_row_stock(PN_TYPE_BF16, w, 6, q, &bad), PN_ERR_SCALE_OVERFLOW);
    cr_assert_eq(bad, 4);
}

/* --- the fast paths (quant/kquants_fast.h) ------------------------------------ */

/* The 16-lane instantiation of the fast encoders, compiled into this test
 * without AVX-512 (GCC's generic vectors, the generic max/min/select/convert
 * forms): the logic kquants_avx512.c runs, one vector per unit holding both
 * super-blocks, checked here on a machine that may lack AVX-512. Only the
 * ISA's spelling of max, min, blend and conversions differs from it. */
#define KQ_W 16
#define KQ_SUFFIX w16_generic
#include "quant/kquants_simd.h"
#undef KQ_W
#undef KQ_SUFFIX

/* q4_K and q3_K have a reference and three fast paths; every path that runs
 * here must give the reference's bytes, status and column. A path this CPU
 * lacks is said with cr_log_info and not run (the others still are). */
static const int KQ_K_TYPES[2] = { PN_TYPE_Q4_K, PN_TYPE_Q3_K };
static const int KQ_FAST_PATHS[3] = { PN_PATH_SCALAR_FAST, PN_PATH_AVX2, PN_PATH_AVX512 };

static pn_status quantize_ref(int type, const float *x, int64_t n, uint8_t *out, int64_t *bad)
{
    return type == PN_TYPE_Q4_K ? pn_quantize_row_q4_K_ref(x, n, out, bad)
                                : pn_quantize_row_q3_K_ref(x, n, out, bad);
}

/* PN_PATH_COUNT stands for the 16-lane logic built above. */
#define W16_GENERIC PN_PATH_COUNT

static pn_status quantize_path(int path, int type, const float *x, int64_t n, uint8_t *out,
                               int64_t *bad)
{
    if (path == W16_GENERIC)
        return type == PN_TYPE_Q4_K ? pn_kq_q4_K_row_w16_generic(x, n, out, bad, NULL, NULL)
                                    : pn_kq_q3_K_row_w16_generic(x, n, out, bad, NULL, NULL);
    return type == PN_TYPE_Q4_K ? pn_quantize_row_q4_K_path(path, x, n, out, bad)
                                : pn_quantize_row_q3_K_path(path, x, n, out, bad);
}

static const char *path_label(int path)
{
    return path == W16_GENERIC ? "16-lane generic" : pn_path_name(path);
}

static const char *kname(int type)
{
    return type == PN_TYPE_Q4_K ? "q4_K" : "q3_K";
}

/* How many of the fast paths run here; logs the ones that do not. */
static int paths_available(void)
{
    int n = 0;
    for (int k = 0; k < 3; k++) {
        if (pn_path_available(KQ_FAST_PATHS[k]))
            n++;
        else
            cr_log_info("path %s is not supported by this CPU: not run here",
                        pn_path_name(KQ_FAST_PATHS[k]));
    }
    return n;
}

/* Quantizes `rows` rows of n weights with the reference and with every
 * available fast path; returns the number of rows whose status, column or
 * bytes differ (the first few are logged). The fast path writes at an odd
 * address, inside guard bytes. */
static int compare_paths(int type, const float *x, int rows, int64_t n, const char *what)
{
    const int64_t rb = pn_type_row_bytes(type, n);
    uint8_t *ref = xmalloc((size_t)rb), *got = xmalloc((size_t)rb + 8);
    int bad = 0;
    for (int r = 0; r < rows; r++) {
        int64_t col_ref = -7;
        const pn_status st_ref = quantize_ref(type, x + r * n, n, ref, &col_ref);
        for (int k = 0; k < 4; k++) {
            const int path = k < 3 ? KQ_FAST_PATHS[k] : W16_GENERIC;
            if (k < 3 && !pn_path_available(path))
                continue;
            int64_t col = -9;
            memset(got, 0x5a, (size_t)rb + 8);
            const pn_status st = quantize_path(path, type, x + r * n, n, got + 3, &col);
            bool same = st == st_ref &&
                        (st == PN_OK ? memcmp(ref, got + 3, (size_t)rb) == 0 : col == col_ref);
            same = same && got[2] == 0x5a && got[3 + rb] == 0x5a;
            if (!same && bad++ < 5) {
                int64_t at = -1;
                for (int64_t i = 0; st == PN_OK && i < rb && at < 0; i++)
                    if (ref[i] != got[3 + i])
                        at = i;
                cr_log_error(
                    "%s %s path %s, row %d of %lld weights: status %d column %lld, reference %d "
                    "column %lld, first differing byte %lld (block %lld)",
                    what, kname(type), path_label(path), r, (long long)n, (int)st, (long long)col,
                    (int)st_ref, (long long)col_ref, (long long)at,
                    at < 0 ? -1LL : (long long)(at / (rb / (n / 256))));
            }
        }
    }
    free(ref);
    free(got);
    return bad;
}

ParameterizedTestParameters(kquants_paths,
                            every_path_writes_the_reference_bytes_for_rows_of_1_to_8_blocks)
{
    return cr_make_param_array(int, (void *)KQ_K_TYPES, 2);
}

ParameterizedTest(int *type, kquants_paths,
                  every_path_writes_the_reference_bytes_for_rows_of_1_to_8_blocks)
{
    paths_available();
    int bad = 0;
    for (int nb = 1; nb <= 8; nb++) {
        const int rows = 24;
        const int64_t n = (int64_t)nb * 256;
        float *x = (float *)xmalloc((size_t)(rows * n) * sizeof(float));
        /* random and heavy-tailed rows at every scale */
        tu_rng r = { 4000 + (uint64_t)nb + ((uint64_t)*type << 32) };
        for (int row = 0; row < rows; row++) {
            const int kind = row % 3 == 0 ? RK_HEAVY : row % 3 == 1 ? RK_GAUSS : RK_OUTLIERS;
            for (int b = 0; b < nb; b++)
                rk_fill_block(&r, kind, x + row * n + b * 256, 256);
        }
        bad += compare_paths(*type, x, rows, n, "random row");
        /* rows whose blocks mix every kind, including NaN and infinities */
        for (int row = 0; row < rows; row++)
            rk_fill_row(&r, x + row * n, nb, 256, row % 4 == 3);
        bad += compare_paths(*type, x, rows, n, "mixed-kind row");
        free(x);
    }
    cr_expect_eq(bad, 0, "%s: %d rows differ from the reference", kname(*type), bad);
}

ParameterizedTestParameters(kquants_paths, every_path_matches_the_reference_on_each_edge_kind)
{
    return cr_make_param_array(int, (void *)KQ_K_TYPES, 2);
}

ParameterizedTest(int *type, kquants_paths, every_path_matches_the_reference_on_each_edge_kind)
{
    paths_available();
    static const char *const names[RK_COUNT] = { "Gaussian",
                                                 "heavy-tailed",
                                                 "outliers",
                                                 "signed zeros",
                                                 "constant",
                                                 "one outlier",
                                                 "subnormal",
                                                 "largest finite",
                                                 "few-bit",
                                                 "one-sided",
                                                 "mixed sub-block scales",
                                                 "fp16 edges",
                                                 "NaN/Inf" };
    const int rows = 40, nb = 3;
    const int64_t n = nb * 256;
    float *x = (float *)xmalloc((size_t)(rows * n) * sizeof(float));
    int bad = 0, refused[RK_COUNT] = { 0 };
    for (int kind = 0; kind < RK_COUNT; kind++) {
        tu_rng r = { 77 + (uint64_t)kind * 1000 + (uint64_t)*type };
        /* the kind in one of the row's blocks (every position), the others
         * ordinary, and rows that are all of the kind */
        for (int row = 0; row < rows; row++) {
            for (int b = 0; b < nb; b++)
                rk_fill_block(&r, row >= rows / 2 || b == row % nb ? kind : RK_GAUSS,
                              x + row * n + b * 256, 256);
            int64_t col = 0;
            uint8_t scratch[3 * 144];
            refused[kind] += quantize_ref(*type, x + row * n, n, scratch, &col) != PN_OK;
        }
        int d = compare_paths(*type, x, rows, n, names[kind]);
        cr_expect_eq(d, 0, "%s %s rows: %d differ", kname(*type), names[kind], d);
        bad += d;
    }
    /* the refusals are there to be compared: NaN/Inf rows always, the
     * largest finite floats (scale overflow) often */
    cr_expect_eq(refused[RK_NONFINITE], rows, "every NaN/Inf row is refused");
    cr_expect_gt(refused[RK_HUGE], 0, "some largest-finite rows overflow the fp16 scale");
    cr_expect_eq(refused[RK_GAUSS], 0);
    free(x);
}

ParameterizedTestParameters(kquants_paths,
                            every_path_names_the_first_bad_block_when_two_blocks_fail)
{
    return cr_make_param_array(int, (void *)KQ_K_TYPES, 2);
}

ParameterizedTest(int *type, kquants_paths,
                  every_path_names_the_first_bad_block_when_two_blocks_fail)
{
    /* The fast paths work on two super-blocks at once: an overflow in one
     * and a NaN in the other, in both orders and in every pair position,
     * must give the reference's status and column. */
    paths_available();
    const int nb = 5;
    const int64_t n = nb * 256;
    float *x = (float *)xmalloc((size_t)n * sizeof(float));
    tu_rng r = { 555 };
    int bad = 0;
    for (int a = 0; a < nb; a++) {
        for (int b = 0; b < nb; b++) {
            for (int order = 0; order < 2; order++) {
                for (int i = 0; i < n; i++)
                    x[i] = (float)(0.02 * tu_rng_gauss(&r));
                x[a * 256 + rk_pick(&r, 256)] = order ? 3e9f : NAN; /* overflow or NaN */
                x[b * 256 + rk_pick(&r, 256)] = order ? -INFINITY : 3e9f;
                bad += compare_paths(*type, x, 1, n, "two failing blocks");
            }
        }
    }
    cr_expect_eq(bad, 0, "%s: %d rows differ", kname(*type), bad);
    free(x);
}

ParameterizedTestParameters(kquants_paths,
                            every_path_gives_the_same_bytes_inside_openmp_loops_at_1_and_2_threads)
{
    return cr_make_param_array(int, (void *)KQ_K_TYPES, 2);
}

ParameterizedTest(int *type, kquants_paths,
                  every_path_gives_the_same_bytes_inside_openmp_loops_at_1_and_2_threads)
{
    paths_available();
    const int rows = 48;
    const int64_t n = 5 * 256;
    const int64_t rb = pn_type_row_bytes(*type, n);
    float *x = (float *)xmalloc((size_t)(rows * n) * sizeof(float));
    uint8_t *ref = xmalloc((size_t)(rows * rb)), *got = xmalloc((size_t)(rows * rb));
    tu_rng r = { 9090 };
    for (int row = 0; row < rows; row++)
        rk_fill_row(&r, x + row * n, 5, 256, 0);
    for (int row = 0; row < rows; row++)
        cr_assert_eq(quantize_ref(*type, x + row * n, n, ref + row * rb, NULL), PN_OK);
    for (int k = 0; k < 4; k++) {
        const int path = k == 0 ? PN_PATH_REF : KQ_FAST_PATHS[k - 1];
        if (!pn_path_available(path))
            continue;
        for (int threads = 1; threads <= 2; threads++) {
            memset(got, 0, (size_t)(rows * rb));
            int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) reduction(+ : failed)
            for (int row = 0; row < rows; row++)
                failed += quantize_path(path, *type, x + row * n, n, got + row * rb, NULL) != PN_OK;
            cr_expect_eq(failed, 0);
            cr_expect(memcmp(ref, got, (size_t)(rows * rb)) == 0,
                      "%s path %s at %d thread(s) differs", kname(*type), pn_path_name(path),
                      threads);
        }
    }
    free(x);
    free(ref);
    free(got);
}

ParameterizedTestParameters(kquants_paths, the_16_lane_logic_gives_the_sums_of_the_separate_pass)
{
    return cr_make_param_array(int, (void *)KQ_K_TYPES, 2);
}

ParameterizedTest(int *type, kquants_paths, the_16_lane_logic_gives_the_sums_of_the_separate_pass)
{
    /* quant_row.h's fused sums on the 16-lane build (quant_row tests the
     * widths this CPU runs): rows of 1..11 blocks (a partial batch of
     * eight and an odd unit), against pn_row_sums_ref bit for bit */
    int bad = 0;
    for (int nb = 1; nb <= 11; nb++) {
        const int64_t n = (int64_t)nb * 256;
        float *x = (float *)xmalloc((size_t)n * sizeof(float));
        uint8_t *q = xmalloc((size_t)pn_type_row_bytes(*type, n));
        double e[11], w[11], er[11], wr[11];
        tu_rng r = { 600 + (uint64_t)nb };
        rk_fill_row(&r, x, nb, 256, 0);
        pn_status st = *type == PN_TYPE_Q4_K ? pn_kq_q4_K_row_w16_generic(x, n, q, NULL, e, w)
                                             : pn_kq_q3_K_row_w16_generic(x, n, q, NULL, e, w);
        cr_assert_eq(st, PN_OK);
        cr_assert_eq(pn_row_sums_ref(*type, x, q, n, er, wr), PN_OK);
        bad += memcmp(e, er, (size_t)nb * sizeof(double)) != 0 ||
               memcmp(w, wr, (size_t)nb * sizeof(double)) != 0;
        free(x);
        free(q);
    }
    cr_expect_eq(bad, 0, "%s: %d rows' sums differ", kname(*type), bad);
}

Test(kquants_paths, a_path_that_is_unknown_or_missing_and_a_bad_length_are_usage_errors)
{
    float w[512] = { 0 };
    uint8_t q[2 * 144];
    for (int t = 0; t < 2; t++) {
        int64_t bad = 5;
        cr_expect_eq(KQ_K_TYPES[t] == PN_TYPE_Q4_K
                         ? pn_quantize_row_q4_K_path(PN_PATH_COUNT, w, 256, q, &bad)
                         : pn_quantize_row_q3_K_path(PN_PATH_COUNT, w, 256, q, &bad),
                     PN_ERR_USAGE);
        cr_expect_eq(bad, -1);
        cr_expect_eq(quantize_path(-1, KQ_K_TYPES[t], w, 256, q, &bad), PN_ERR_USAGE);
        for (int p = 0; p < PN_PATH_COUNT; p++) {
            if (!pn_path_available(p)) {
                cr_expect_eq(quantize_path(p, KQ_K_TYPES[t], w, 256, q, &bad), PN_ERR_USAGE,
                             "a path this CPU lacks is refused, not run");
                continue;
            }
            cr_expect_eq(quantize_path(p, KQ_K_TYPES[t], w, 255, q, &bad), PN_ERR_USAGE);
            cr_expect_eq(bad, -1);
            cr_expect_eq(quantize_path(p, KQ_K_TYPES[t], w, -256, q, &bad), PN_ERR_USAGE);
            cr_expect_eq(quantize_path(p, KQ_K_TYPES[t], w, 0, q, &bad), PN_OK);
        }
    }
}

Test(kquants_paths, the_row_calls_run_the_best_path_and_match_the_reference)
{
    const int64_t n = 4 * 256;
    float *x = (float *)xmalloc((size_t)n * sizeof(float));
    tu_rng r = { 31 };
    rk_fill_row(&r, x, 4, 256, 0);
    uint8_t a[4 * 144], b[4 * 144];
    cr_assert_eq(pn_quantize_row_q4_K(x, n, a, NULL), PN_OK);
    cr_assert_eq(pn_quantize_row_q4_K_ref(x, n, b, NULL), PN_OK);
    cr_expect(memcmp(a, b, (size_t)pn_type_row_bytes(PN_TYPE_Q4_K, n)) == 0);
    cr_assert_eq(pn_quantize_row_q3_K(x, n, a, NULL), PN_OK);
    cr_assert_eq(pn_quantize_row_q3_K_ref(x, n, b, NULL), PN_OK);
    cr_expect(memcmp(a, b, (size_t)pn_type_row_bytes(PN_TYPE_Q3_K, n)) == 0);
    free(x);
}

/* --- independent decodings (tests/data/kquants/SOURCE.md) -------------------- */

#define STOCK_GOLDEN_BLOCKS 1024

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

ParameterizedTestParameters(kquants_stock_golden,
                            every_random_block_decodes_to_the_independent_floats_bit_for_bit)
{
    return cr_make_param_array(int, KQ_INDEX, N_KQ_CASES);
}

ParameterizedTest(int *ci, kquants_stock_golden,
                  every_random_block_decodes_to_the_independent_floats_bit_for_bit)
{
    const kq_case *tc = &KQ_CASES[*ci];
    char path[512];
    size_t nb = 0, nf = 0;
    snprintf(path, sizeof path, PN_TEST_DATA "/kquants/%s.blocks.bin", tc->name);
    uint8_t *blocks = tu_read_file(path, &nb);
    snprintf(path, sizeof path, PN_TEST_DATA "/kquants/%s.decoded.f32", tc->name);
    float *want = tu_read_file(path, &nf);
    const int64_t n = (int64_t)STOCK_GOLDEN_BLOCKS * tc->block;
    cr_assert_eq(nb, (size_t)STOCK_GOLDEN_BLOCKS * tc->bytes, "%s: %zu block bytes", tc->name, nb);
    cr_assert_eq(nf, (size_t)n * sizeof(float), "%s: %zu decoded bytes", tc->name, nf);
    float *y = (float *)xmalloc((size_t)n * sizeof(float));
    /* the whole file as one row, by the type's decoder and by the dispatcher */
    for (int how = 0; how < 2; how++) {
        memset(y, 0xa5, (size_t)n * sizeof(float));
        if (how == 0)
            dequantize(tc->type, blocks, y, n);
        else
            cr_assert_eq(pn_dequantize_row_type(tc->type, blocks, y, n), PN_OK);
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            if (memcmp(&y[i], &want[i], sizeof(float)) != 0 && bad++ < 5)
                cr_log_error(
                    "%s block %lld weight %lld: %a (0x%08x), independent decoder %a (0x%08x)",
                    tc->name, (long long)(i / tc->block), (long long)(i % tc->block), (double)y[i],
                    (unsigned)f32_bits(y[i]), (double)want[i], (unsigned)f32_bits(want[i]));
        }
        cr_expect_eq(bad, 0, "%s: %lld of %lld floats differ (%s)", tc->name, (long long)bad,
                     (long long)n, how == 0 ? "row decoder" : "stock dispatcher");
    }
    /* each block alone at an odd address */
    uint8_t *one = xmalloc((size_t)tc->bytes + 1);
    int64_t bad = 0;
    for (int b = 0; b < STOCK_GOLDEN_BLOCKS; b++) {
        memcpy(one + 1, blocks + (size_t)b * tc->bytes, (size_t)tc->bytes);
        dequantize(tc->type, one + 1, y, tc->block);
        bad += memcmp(y, want + (size_t)b * tc->block, (size_t)tc->block * sizeof(float)) != 0;
    }
    cr_expect_eq(bad, 0, "%s: %lld blocks decode differently alone at an odd address", tc->name,
                 (long long)bad);
    free(one);
    free(y);
    free(blocks);
    free(want);
}

/* --- golden file ------------------------------------------------------------- */

#define GOLD_ROWS 10
#define GOLD_COLS 1024
#define GOLD_MAGIC "PNKQGLD1"

/* Approximately Gaussian (sum of four uniforms, variance matched) from the
 * integer stream with exact double arithmetic only: no libm, so the input
 * is bit-identical wherever the test runs. */
static double gold_gauss(tu_rng *r)
{
    double s = tu_rng_uniform(r) + tu_rng_uniform(r) + tu_rng_uniform(r) + tu_rng_uniform(r);
    return (s - 2.0) * 1.7320508075688772;
}

static void gold_input(float *w)
{
    tu_rng r = { 0x6b71676f6c64ull };
    for (int row = 0; row < GOLD_ROWS; row++) {
        float *x = w + row * GOLD_COLS;
        for (int i = 0; i < GOLD_COLS; i++) {
            double g = gold_gauss(&r), u = tu_rng_uniform(&r);
            switch (row) {
            case 0: x[i] = (float)(0.02 * g); break;
            case 1:
                x[i] = (float)(0.02 * g * (u < 0.01 ? 10.0 : 1.0) * (i % 293 == 7 ? 8.0 : 1.0));
                break;
            case 2: x[i] = (float)(0.02 * g / (0.05 + u)); break; /* heavy tail */
            case 3: x[i] = (i / 256 == 1) ? 0.125f : (i / 256 == 2 ? -0.0f : 0.0f); break;
            case 4: x[i] = (float)(4e-5 * g); break;   /* fp16-subnormal scales */
            case 5: x[i] = (float)(3000.0 * g); break; /* large scales */
            case 6: x[i] = (float)(0.5 * u); break;    /* one-sided */
            case 7: x[i] = (float)(-0.5 * u - 0.1); break;
            case 8: x[i] = (float)(g * (double)(1 + i / 32)); break;         /* growing spread */
            default: x[i] = (float)((i % 16 == 0) ? 1.0 : 0.001 * g); break; /* spikes */
            }
        }
    }
}

Test(kquants_golden, encodes_the_fixed_input_to_the_frozen_bytes)
{
    float *w = (float *)xmalloc(GOLD_ROWS * GOLD_COLS * sizeof(float));
    gold_input(w);
    size_t total = 8;
    for (int c = 0; c < N_KQ_CASES; c++)
        total += 8 + (size_t)(GOLD_ROWS * pn_type_row_bytes(KQ_CASES[c].type, GOLD_COLS));
    uint8_t *mine = xmalloc(total), *p = mine;
    memcpy(p, GOLD_MAGIC, 8);
    p += 8;
    for (int c = 0; c < N_KQ_CASES; c++) {
        int64_t rb = pn_type_row_bytes(KQ_CASES[c].type, GOLD_COLS);
        uint32_t hdr[2] = { (uint32_t)KQ_CASES[c].type, (uint32_t)(GOLD_ROWS * rb) };
        for (int k = 0; k < 2; k++)
            for (int b = 0; b < 4; b++)
                *p++ = (uint8_t)(hdr[k] >> (8 * b));
        for (int row = 0; row < GOLD_ROWS; row++, p += rb)
            cr_assert_eq(quantize(KQ_CASES[c].type, w + row * GOLD_COLS, GOLD_COLS, p, NULL), PN_OK,
                         "%s row %d", KQ_CASES[c].name, row);
    }
    const char *path = PN_TEST_DATA "/kquants/golden.bin";
    const char *regen = getenv("PN_REGEN_GOLDEN");
    if (regen && strcmp(regen, "1") == 0) {
        cr_assert_eq(tu_write_file(path, mine, total), 0, "cannot write %s", path);
        cr_log_warn("regenerated %s (%zu bytes)", path, total);
    }
    size_t size = 0;
    uint8_t *gold = tu_read_file(path, &size);
    cr_assert_eq(size, total, "%s: %zu bytes, this encoder writes %zu", path, size, total);
    /* name the first differing block rather than just "differs" */
    size_t off = 8;
    cr_assert_eq(memcmp(gold, GOLD_MAGIC, 8), 0, "%s: bad magic", path);
    for (int c = 0; c < N_KQ_CASES; c++) {
        int64_t rb = pn_type_row_bytes(KQ_CASES[c].type, GOLD_COLS);
        off += 8;
        for (int row = 0; row < GOLD_ROWS; row++)
            for (int64_t b = 0; b < rb / KQ_CASES[c].bytes; b++) {
                size_t at = off + (size_t)(row * rb + b * KQ_CASES[c].bytes);
                cr_assert_eq(
                    memcmp(gold + at, mine + at, (size_t)KQ_CASES[c].bytes), 0,
                    "%s row %d block %lld (file offset %zu) differs from the frozen encoding",
                    KQ_CASES[c].name, row, (long long)b, at);
            }
        off += (size_t)(GOLD_ROWS * rb);
    }
    cr_assert_arr_eq(gold, mine, total);
    free(gold);
    free(mine);
    free(w);
}

Test(kquants_golden, frozen_bytes_decode_close_to_the_input)
{
    /* Guards the golden file itself: whatever is frozen there must be a
     * good encoding of the input, not just a repeatable one. */
    float *w = (float *)xmalloc(GOLD_ROWS * GOLD_COLS * sizeof(float));
    float *y = (float *)xmalloc(GOLD_COLS * sizeof(float));
    gold_input(w);
    size_t size = 0;
    uint8_t *gold = tu_read_file(PN_TEST_DATA "/kquants/golden.bin", &size);
    static const double bound[N_KQ_CASES] = { 0.01, 0.12, 0.25 };
    size_t off = 8;
    for (int c = 0; c < N_KQ_CASES; c++) {
        int64_t rb = pn_type_row_bytes(KQ_CASES[c].type, GOLD_COLS);
        off += 8;
        cr_assert_leq(off + (size_t)(GOLD_ROWS * rb), size, "golden file too short");
        for (int row = 0; row < GOLD_ROWS; row++) {
            if (row == 3)
                continue; /* mostly zeros: relative error undefined */
            dequantize(KQ_CASES[c].type, gold + off + (size_t)(row * rb), y, GOLD_COLS);
            double e = rel_rmse(w + row * GOLD_COLS, y, GOLD_COLS);
            cr_assert(e <= bound[c], "%s row %d: relative RMSE %.4f", KQ_CASES[c].name, row, e);
        }
        off += (size_t)(GOLD_ROWS * rb);
    }
    free(gold);
    free(w);
    free(y);
}
