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
        { PN_TYPE_F16, 0 },  { PN_TYPE_F16, 1 },  { PN_TYPE_F16, 3 },
        { PN_TYPE_BF16, 0 }, { PN_TYPE_BF16, 1 }, { PN_TYPE_BF16, 3 },
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
    static int offsets[] = { 0, 1, 2, 3 };
    return cr_make_param_array(int, offsets, 4);
}

ParameterizedTest(int *offset, widen, f32_rows_are_copied_bit_for_bit)
{
    enum { N = 4099 };
    uint32_t want[N];
    tu_rng rng = { 42 };
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
    static int types[] = { PN_TYPE_Q8_0, PN_TYPE_Q3_K, PN_TYPE_Q4_K, PN_TYPE_PN3T, PN_TYPE_PN4T, 2,
                           31,           -1,           1000 };
    return cr_make_param_array(int, types, sizeof types / sizeof types[0]);
}

ParameterizedTest(int *type, widen, a_type_that_is_not_a_float_source_is_refused)
{
    uint8_t src[64] = { 0 };
    float dst[16];
    for (int i = 0; i < 16; i++)
        dst[i] = 123.0f;
    cr_assert_eq(pn_widen_row(*type, src, dst, 16), PN_ERR_TYPE, "type %d was accepted", *type);
    for (int i = 0; i < 16; i++)
        cr_assert_eq(dst[i], 123.0f, "a refused type wrote its output");
}

Test(widen, an_empty_row_is_fine_for_every_float_type)
{
    float dst[1] = { 7.0f };
    uint8_t src[1] = { 0 };
    cr_assert_eq(pn_widen_row(PN_TYPE_F32, src, dst, 0), PN_OK);
    cr_assert_eq(pn_widen_row(PN_TYPE_F16, src, dst, 0), PN_OK);
    cr_assert_eq(pn_widen_row(PN_TYPE_BF16, src, dst, 0), PN_OK);
    cr_assert_eq(dst[0], 7.0f);
}

Test(widen, a_short_f16_row_reads_little_endian_bytes)
{
    const uint8_t src[] = { 0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00, 0x00, 0x80 };
    float dst[5];
    cr_assert_eq(pn_widen_row(PN_TYPE_F16, src, dst, 5), PN_OK);
    cr_assert_eq(dst[0], 1.0f);
    cr_assert_eq(dst[1], -2.0f);
    cr_assert_eq(dst[2], 65504.0f);
    cr_assert_eq(dst[3], 0x1p-24f);
    cr_assert(dst[4] == 0.0f && signbit(dst[4]));
    const uint8_t bsrc[] = { 0x80, 0x3f, 0xc0, 0xbf };
    cr_assert_eq(pn_widen_row(PN_TYPE_BF16, bsrc, dst, 2), PN_OK);
    cr_assert_eq(dst[0], 1.0f);
    cr_assert_eq(dst[1], -1.5f);
}

/* --- pn_find_nonfinite ---------------------------------------------------- */

Test(find_nonfinite, a_finite_row_gives_minus_one)
{
    float x[] = { 0.0f, -0.0f, FLT_MAX, -FLT_MAX, FLT_MIN, 0x1p-149f, -0x1p-149f, 1.0f };
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

/* --- pn_widen_row_checked: every path against the reference --------------- */

#include "quant/pn_fast.h"

static const int g_paths[] = { PN_PATH_REF, PN_PATH_SCALAR_FAST, PN_PATH_AVX2, PN_PATH_AVX512 };
#define N_PATHS 4

static bool path_runs(int path)
{
    if (pn_path_available(path))
        return true;
    cr_log_info("path %s is not available on this CPU: not run here (its logic is the "
                "4- and 8-lane one, widen_simd.h)",
                pn_path_name(path));
    return false;
}

static bool u16_is_nonfinite(int type, uint16_t v)
{
    return type == PN_TYPE_F16 ? (v & 0x7c00u) == 0x7c00u : (v & 0x7f80u) == 0x7f80u;
}

/* Every finite 16-bit pattern of the type once, in order. */
static uint16_t *finite_patterns(int type, int64_t *n)
{
    uint16_t *p = malloc(ALL_PATTERNS * sizeof *p);
    cr_assert_not_null(p);
    int64_t k = 0;
    for (uint32_t v = 0; v < ALL_PATTERNS; v++)
        if (!u16_is_nonfinite(type, (uint16_t)v))
            p[k++] = (uint16_t)v;
    *n = k;
    return p;
}

/* The values v[0..n) as little-endian source bytes at byte offset off. */
static uint8_t *as_bytes_at(int type, const void *v, int64_t n, int off)
{
    const int64_t es = type == PN_TYPE_F32 ? 4 : 2;
    uint8_t *b = malloc((size_t)(n * es) + 8);
    cr_assert_not_null(b);
    memcpy(b + off, v, (size_t)(n * es)); /* the host is little-endian */
    return b;
}

static uint32_t float_bits_of(const float *x, int64_t i)
{
    uint32_t u;
    memcpy(&u, &x[i], sizeof u);
    return u;
}

ParameterizedTestParameters(widen_paths, every_finite_16_bit_pattern_widens_exactly_at_every_offset)
{
    static int types[] = { PN_TYPE_F16, PN_TYPE_BF16 };
    return cr_make_param_array(int, types, 2);
}

ParameterizedTest(int *type, widen_paths,
                  every_finite_16_bit_pattern_widens_exactly_at_every_offset)
{
    int64_t n;
    uint16_t *pat = finite_patterns(*type, &n);
    cr_assert_eq(n, *type == PN_TYPE_F16 ? 65536 - 2048 : 65536 - 256);
    float *got = malloc((size_t)n * sizeof(float));
    cr_assert_not_null(got);
    for (int pi = 0; pi < N_PATHS; pi++) {
        if (!path_runs(g_paths[pi]))
            continue;
        for (int off = 0; off < 4; off++) {
            uint8_t *src = as_bytes_at(*type, pat, n, off);
            int64_t bad = 7;
            cr_assert_eq(pn_widen_row_checked(g_paths[pi], *type, src + off, got, n, &bad), PN_OK,
                         "path %s offset %d", pn_path_name(g_paths[pi]), off);
            cr_assert_eq(bad, -1, "no column is bad in a finite row");
            int wrong = 0;
            for (int64_t i = 0; i < n; i++) {
                uint32_t want =
                    *type == PN_TYPE_F16 ? half_as_float_bits(pat[i]) : (uint32_t)pat[i] << 16;
                if (float_bits_of(got, i) != want && wrong++ == 0)
                    cr_log_error("path %s offset %d: 0x%04x widens to 0x%08x, expected 0x%08x",
                                 pn_path_name(g_paths[pi]), off, pat[i], float_bits_of(got, i),
                                 want);
            }
            cr_assert_eq(wrong, 0, "path %s, type %d, offset %d: %d patterns widen wrongly",
                         pn_path_name(g_paths[pi]), *type, off, wrong);
            free(src);
        }
    }
    free(got);
    free(pat);
}

/* Rows of every length from 0 to 700 (vector tails, the 256-element blocks
 * and their ends), each a window of random finite values at a random start,
 * every byte offset: the bytes of the reference. */
ParameterizedTestParameters(widen_paths, rows_of_every_length_give_the_references_bytes)
{
    static int types[] = { PN_TYPE_F16, PN_TYPE_BF16, PN_TYPE_F32 };
    return cr_make_param_array(int, types, 3);
}

ParameterizedTest(int *type, widen_paths, rows_of_every_length_give_the_references_bytes)
{
    enum { MAXN = 700 };
    const int64_t es = *type == PN_TYPE_F32 ? 4 : 2;
    tu_rng rng = { (uint64_t)*type + 5 };
    uint8_t *src = malloc(MAXN * 4 + 8);
    float *want = malloc(MAXN * sizeof(float)), *got = malloc(MAXN * sizeof(float));
    cr_assert(src && want && got);
    for (int64_t n = 0; n <= MAXN; n++)
        for (int off = 0; off < 4; off++) {
            for (int64_t i = 0; i < n; i++) {
                uint32_t v = (uint32_t)tu_rng_u64(&rng);
                if (es == 2) {
                    v &= 0xffffu;
                    if (u16_is_nonfinite(*type, (uint16_t)v))
                        v ^= 0x4000u; /* exponent no longer all ones */
                    src[off + 2 * i] = (uint8_t)v;
                    src[off + 2 * i + 1] = (uint8_t)(v >> 8);
                } else {
                    if ((v & 0x7f800000u) == 0x7f800000u)
                        v ^= 0x40000000u;
                    memcpy(src + off + 4 * i, &v, 4);
                }
            }
            cr_assert_eq(pn_widen_row(*type, src + off, want, n), PN_OK);
            for (int pi = 0; pi < N_PATHS; pi++) {
                if (!pn_path_available(g_paths[pi]))
                    continue;
                memset(got, 0xa5, MAXN * sizeof(float));
                int64_t bad = 7;
                cr_assert_eq(pn_widen_row_checked(g_paths[pi], *type, src + off, got, n, &bad),
                             PN_OK, "path %s, n %lld, offset %d", pn_path_name(g_paths[pi]),
                             (long long)n, off);
                cr_assert_eq(bad, -1);
                cr_assert(memcmp(got, want, (size_t)n * sizeof(float)) == 0,
                          "path %s, type %d, n %lld, offset %d: other floats",
                          pn_path_name(g_paths[pi]), *type, (long long)n, off);
                if (n < MAXN)
                    cr_assert_eq(float_bits_of(got, n), 0xa5a5a5a5u, "path %s wrote past n = %lld",
                                 pn_path_name(g_paths[pi]), (long long)n);
            }
        }
    free(src);
    free(want);
    free(got);
}

/* The non-finite patterns of a type: every one for f16 and bf16 (2048 and
 * 256), the infinities and a few NaNs (quiet, signalling, with payloads)
 * for f32. */
static int64_t nonfinite_patterns(int type, uint32_t *out)
{
    int64_t k = 0;
    if (type == PN_TYPE_F32) {
        static const uint32_t f[] = { 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
                                      0x7f800001u, 0x7fa00001u, 0xffffffffu, 0x7fffffffu };
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
            out[k++] = f[i];
        return k;
    }
    for (uint32_t v = 0; v < ALL_PATTERNS; v++)
        if (u16_is_nonfinite(type, (uint16_t)v))
            out[k++] = v;
    return k;
}

/* Each non-finite pattern at every position of rows of several lengths
 * (and a second one later): the same status and column as the reference on
 * every path, the floats before it exact. */
ParameterizedTestParameters(widen_paths,
                            the_first_nan_or_infinity_is_found_at_the_references_column)
{
    static int types[] = { PN_TYPE_F16, PN_TYPE_BF16, PN_TYPE_F32 };
    return cr_make_param_array(int, types, 3);
}

ParameterizedTest(int *type, widen_paths,
                  the_first_nan_or_infinity_is_found_at_the_references_column)
{
    static const int64_t lengths[] = { 1, 7, 8, 9, 17, 255, 256, 257, 300, 513, 1031 };
    const int64_t es = *type == PN_TYPE_F32 ? 4 : 2;
    uint32_t *bad_pat = malloc(ALL_PATTERNS * sizeof *bad_pat);
    cr_assert_not_null(bad_pat);
    const int64_t n_bad = nonfinite_patterns(*type, bad_pat);
    enum { MAXN = 1031 };
    uint8_t *src = malloc(MAXN * 4 + 8);
    float *want = malloc(MAXN * sizeof(float)), *got = malloc(MAXN * sizeof(float));
    cr_assert(src && want && got);
    tu_rng rng = { 99 };
    int64_t k = 0, cases = 0;
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        const int64_t n = lengths[li];
        for (int64_t pos = 0; pos < n; pos++) {
            const int off = (int)(pos % 4);
            for (int64_t i = 0; i < n; i++) {
                uint32_t v = es == 2 ? 0x3c00u + (uint32_t)(i % 512) : 0x3f800000u + (uint32_t)i;
                if (es == 2) {
                    src[off + 2 * i] = (uint8_t)v;
                    src[off + 2 * i + 1] = (uint8_t)(v >> 8);
                } else {
                    memcpy(src + off + 4 * i, &v, 4);
                }
            }
            /* the pattern at pos, and another one somewhere after it */
            const uint32_t v = bad_pat[k++ % n_bad];
            const int64_t later = pos + 1 + (int64_t)(tu_rng_u64(&rng) % (uint64_t)(n - pos));
            const uint32_t w = bad_pat[tu_rng_u64(&rng) % (uint64_t)n_bad];
            for (int j = 0; j < 2; j++) {
                int64_t at = j ? later : pos;
                uint32_t x = j ? w : v;
                if (at >= n)
                    continue;
                if (es == 2) {
                    src[off + 2 * at] = (uint8_t)x;
                    src[off + 2 * at + 1] = (uint8_t)(x >> 8);
                } else {
                    memcpy(src + off + 4 * at, &x, 4);
                }
            }
            cr_assert_eq(pn_widen_row(*type, src + off, want, n), PN_OK);
            cr_assert_eq(pn_find_nonfinite(want, n), pos, "the reference finds it");
            for (int pi = 0; pi < N_PATHS; pi++) {
                if (!pn_path_available(g_paths[pi]))
                    continue;
                int64_t bad = -7;
                pn_status st = pn_widen_row_checked(g_paths[pi], *type, src + off, got, n, &bad);
                cr_assert_eq(st, PN_ERR_NONFINITE, "path %s, n %lld, pattern 0x%x at %lld",
                             pn_path_name(g_paths[pi]), (long long)n, v, (long long)pos);
                cr_assert_eq(bad, pos, "path %s, n %lld, pattern 0x%x at %lld: column %lld",
                             pn_path_name(g_paths[pi]), (long long)n, v, (long long)pos,
                             (long long)bad);
                cr_assert(memcmp(got, want, (size_t)pos * sizeof(float)) == 0,
                          "path %s: the floats before the bad one differ",
                          pn_path_name(g_paths[pi]));
                cr_assert(
                    isnan(got[pos]) == isnan(want[pos]) && isinf(got[pos]) == isinf(want[pos]) &&
                        signbit(got[pos]) == signbit(want[pos]),
                    "path %s: the bad value's class or sign differs", pn_path_name(g_paths[pi]));
            }
            cases++;
        }
    }
    cr_assert_geq(k, n_bad, "every non-finite pattern was placed (%lld)", (long long)k);
    cr_log_info("type %d: %lld rows with a non-finite weight", *type, (long long)cases);
    free(bad_pat);
    free(src);
    free(want);
    free(got);
}

Test(widen_paths, a_refused_type_or_path_writes_nothing)
{
    uint8_t src[64] = { 0 };
    float dst[16];
    for (int i = 0; i < 16; i++)
        dst[i] = 123.0f;
    int64_t bad = 5;
    cr_assert_eq(pn_widen_row_checked(PN_PATH_REF, PN_TYPE_Q8_0, src, dst, 16, &bad), PN_ERR_TYPE);
    cr_assert_eq(pn_widen_row_checked(PN_PATH_SCALAR_FAST, PN_TYPE_PN3T, src, dst, 16, &bad),
                 PN_ERR_TYPE);
    cr_assert_eq(pn_widen_row_checked(-1, PN_TYPE_BF16, src, dst, 16, &bad), PN_ERR_USAGE);
    cr_assert_eq(pn_widen_row_checked(PN_PATH_COUNT, PN_TYPE_BF16, src, dst, 16, &bad),
                 PN_ERR_USAGE);
    for (int p = 0; p < PN_PATH_COUNT; p++)
        if (!pn_path_available(p))
            cr_assert_eq(pn_widen_row_checked(p, PN_TYPE_BF16, src, dst, 16, &bad), PN_ERR_USAGE,
                         "path %s is not available yet accepted", pn_path_name(p));
    for (int i = 0; i < 16; i++)
        cr_assert_eq(dst[i], 123.0f, "a refused call wrote its output");
    cr_assert_eq(bad, -1);
    cr_assert_eq(pn_widen_row_checked(PN_PATH_SCALAR_FAST, PN_TYPE_BF16, src, dst, 16, NULL), PN_OK,
                 "bad_col may be NULL");
}
