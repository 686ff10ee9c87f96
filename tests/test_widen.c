/* Pins quant/widen: F32, F16 and BF16 source rows widen to the exact float,
 * from any byte alignment; anything else is PN_ERR_TYPE; pn_find_nonfinite
 * finds the first NaN or infinity. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "quant/types.h"
#include "quant/widen.h"
#include "test_util.h"

#define ALL_PATTERNS 65536

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The float bits of a half, built from its fields (independent of
 * quant/fp16.c): normal and infinite halves map field by field; subnormal
 * halves are mant * 2^-24, exact in float. */
static uint32_t half_as_float_bits(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0)
        return sign | float_bits((float)mant * 0x1p-24f);
    if (exp == 31)
        return sign | 0x7f800000u | (mant << 13);
    return sign | ((exp - 15 + 127) << 23) | (mant << 13);
}

/* Every 16-bit pattern once, little-endian, starting at byte offset `off`. */
static uint8_t *all_u16_patterns_at(int off)
{
    uint8_t *buf = malloc(2 * ALL_PATTERNS + 8);
    cr_assert_not_null(buf);
    for (uint32_t v = 0; v < ALL_PATTERNS; v++) {
        buf[off + 2 * v] = (uint8_t)v;
        buf[off + 2 * v + 1] = (uint8_t)(v >> 8);
    }
    return buf;
}

typedef struct widen_case {
    int src_type;
    int offset; /* byte offset of the source row: 0 aligned, 1..3 not */
} widen_case;

ParameterizedTestParameters(widen, every_16_bit_pattern_widens_exactly)
{
    static widen_case cases[] = {
        {PN_TYPE_F16, 0}, {PN_TYPE_F16, 1}, {PN_TYPE_F16, 3},
        {PN_TYPE_BF16, 0}, {PN_TYPE_BF16, 1}, {PN_TYPE_BF16, 3},
    };
    return cr_make_param_array(widen_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(widen_case *c, widen, every_16_bit_pattern_widens_exactly)
{
    uint8_t *src = all_u16_patterns_at(c->offset);
    float *dst = malloc(ALL_PATTERNS * sizeof(float));
    cr_assert_not_null(dst);
    cr_assert_eq(pn_widen_row(c->src_type, src + c->offset, dst, ALL_PATTERNS), PN_OK);
    int bad = 0;
    for (uint32_t v = 0; v < ALL_PATTERNS; v++) {
        uint32_t got = float_bits(dst[v]);
        uint32_t want = c->src_type == PN_TYPE_F16 ? half_as_float_bits((uint16_t)v) : v << 16;
        bool is_nan = (want & 0x7f800000u) == 0x7f800000u && (want & 0x007fffffu) != 0;
        /* A half NaN must stay a NaN of the same sign (its payload is not
         * data); a bf16 is the top half of a float, so even NaNs are exact. */
        is_nan = is_nan && c->src_type == PN_TYPE_F16;
        bool ok = is_nan ? (isnan(dst[v]) && (got >> 31) == (want >> 31)) : got == want;
        if (!ok) {
            if (!bad)
                cr_log_error("type %d offset %d: 0x%04x widens to 0x%08x, expected 0x%08x",
                             c->src_type, c->offset, v, got, want);
            bad++;
        }
    }
    cr_assert_eq(bad, 0, "%d of 65536 patterns widen wrongly (type %d, offset %d)", bad,
                 c->src_type, c->offset);
    free(src);
    free(dst);
}

ParameterizedTestParameters(widen, f32_rows_are_copied_bit_for_bit)
{
    static int offsets[] = {0, 1, 2, 3};
    return cr_make_param_array(int, offsets, 4);
}

ParameterizedTest(int *offset, widen, f32_rows_are_copied_bit_for_bit)
{
    enum { N = 4099 };
    uint32_t want[N];
    tu_rng rng = {42};
    for (int i = 0; i < N; i++)
        want[i] = (uint32_t)tu_rng_u64(&rng); /* every kind: NaN payloads, subnormals, inf */
    want[0] = 0x80000000u;                    /* -0.0 */
    want[1] = 0x7fa00001u;                    /* a signalling NaN */
    want[2] = 0x00000001u;                    /* the smallest subnormal */
    uint8_t *src = malloc(sizeof want + 4);
    float *dst = malloc(sizeof want);
    cr_assert(src && dst);
    memcpy(src + *offset, want, sizeof want);
    cr_assert_eq(pn_widen_row(PN_TYPE_F32, src + *offset, dst, N), PN_OK);
    cr_assert_eq(memcmp(dst, want, sizeof want), 0, "F32 row at offset %d is not copied exactly",
                 *offset);
    free(src);
    free(dst);
}

ParameterizedTestParameters(widen, a_type_that_is_not_a_float_source_is_refused)
{
    static int types[] = {PN_TYPE_Q8_0, PN_TYPE_Q3_K, PN_TYPE_Q4_K, PN_TYPE_PN3T, PN_TYPE_PN4T,
                          2, 31, -1, 1000};
    return cr_make_param_array(int, types, sizeof types / sizeof types[0]);
}

ParameterizedTest(int *type, widen, a_type_that_is_not_a_float_source_is_refused)
{
    uint8_t src[64] = {0};
    float dst[16];
    for (int i = 0; i < 16; i++)
        dst[i] = 123.0f;
    cr_assert_eq(pn_widen_row(*type, src, dst, 16), PN_ERR_TYPE, "type %d was accepted", *type);
    for (int i = 0; i < 16; i++)
        cr_assert_eq(dst[i], 123.0f, "a refused type wrote its output");
}

Test(widen, an_empty_row_is_fine_for_every_float_type)
{
    float dst[1] = {7.0f};
    uint8_t src[1] = {0};
    cr_assert_eq(pn_widen_row(PN_TYPE_F32, src, dst, 0), PN_OK);
    cr_assert_eq(pn_widen_row(PN_TYPE_F16, src, dst, 0), PN_OK);
    cr_assert_eq(pn_widen_row(PN_TYPE_BF16, src, dst, 0), PN_OK);
    cr_assert_eq(dst[0], 7.0f);
}

Test(widen, a_short_f16_row_reads_little_endian_bytes)
{
    const uint8_t src[] = {0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00, 0x00, 0x80};
    float dst[5];
    cr_assert_eq(pn_widen_row(PN_TYPE_F16, src, dst, 5), PN_OK);
    cr_assert_eq(dst[0], 1.0f);
    cr_assert_eq(dst[1], -2.0f);
    cr_assert_eq(dst[2], 65504.0f);
    cr_assert_eq(dst[3], 0x1p-24f);
    cr_assert(dst[4] == 0.0f && signbit(dst[4]));
    const uint8_t bsrc[] = {0x80, 0x3f, 0xc0, 0xbf};
    cr_assert_eq(pn_widen_row(PN_TYPE_BF16, bsrc, dst, 2), PN_OK);
    cr_assert_eq(dst[0], 1.0f);
    cr_assert_eq(dst[1], -1.5f);
}

/* --- pn_find_nonfinite ---------------------------------------------------- */

Test(find_nonfinite, a_finite_row_gives_minus_one)
{
    float x[] = {0.0f, -0.0f, FLT_MAX, -FLT_MAX, FLT_MIN, 0x1p-149f, -0x1p-149f, 1.0f};
    cr_assert_eq(pn_find_nonfinite(x, 8), -1);
    cr_assert_eq(pn_find_nonfinite(x, 0), -1, "an empty row has nothing to find");
}

Test(find_nonfinite, finds_the_first_nan_or_infinity)
{
    float x[64];
    for (int i = 0; i < 64; i++)
        x[i] = (float)i * 0.25f;
    x[40] = NAN;
    x[20] = INFINITY;
    cr_assert_eq(pn_find_nonfinite(x, 64), 20);
    x[7] = -INFINITY;
    cr_assert_eq(pn_find_nonfinite(x, 64), 7);
    x[0] = -NAN;
    cr_assert_eq(pn_find_nonfinite(x, 64), 0);
    cr_assert_eq(pn_find_nonfinite(x + 1, 63), 6, "index counts from the pointer given");
}

Test(find_nonfinite, finds_a_nan_in_the_last_element)
{
    float x[1001];
    for (int i = 0; i < 1001; i++)
        x[i] = -1.0f;
    x[1000] = NAN;
    cr_assert_eq(pn_find_nonfinite(x, 1001), 1000);
    cr_assert_eq(pn_find_nonfinite(x, 1000), -1, "n bounds the search");
}

Test(find_nonfinite, finds_every_nan_pattern_of_the_widened_halves)
{
    /* Every half NaN and infinity is found after widening, none of the rest. */
    uint8_t src[2];
    float f;
    int missed = 0, false_hits = 0;
    for (uint32_t v = 0; v < ALL_PATTERNS; v++) {
        src[0] = (uint8_t)v;
        src[1] = (uint8_t)(v >> 8);
        cr_assert_eq(pn_widen_row(PN_TYPE_F16, src, &f, 1), PN_OK);
        bool nonfinite = (v & 0x7c00u) == 0x7c00u;
        int64_t at = pn_find_nonfinite(&f, 1);
        if (nonfinite && at != 0)
            missed++;
        if (!nonfinite && at != -1)
            false_hits++;
    }
    cr_assert_eq(missed, 0, "%d half NaN/inf patterns not found", missed);
    cr_assert_eq(false_hits, 0, "%d finite halves reported", false_hits);
}
