/* Pins quant/fp16: binary16 from the exact double with ONE rounding (nearest,
 * ties to even, subnormals kept, |x| >= 65520 -> inf), exact widening, and
 * bfloat16 both ways. Golden data: tests/data/golden/fp16.* (documented in
 * tests/data/golden/SOURCE.md; the rule: docs/format.md#numbers). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "quant/fp16.h"
#include "test_util.h"

#define FP16_GOLDEN_COUNT 3347

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static bool half_is_nan(uint16_t h)
{
    return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0;
}

/* The value of a half computed from its fields without quant/fp16.c, so the
 * widening is checked against an independent decoding. */
static double half_value_by_fields(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v;
    if (exp == 0)
        v = (double)mant / 16777216.0; /* mant * 2^-24 */
    else if (exp == 31)
        v = mant ? NAN : INFINITY;
    else
        v = (1.0 + (double)mant / 1024.0) * ldexp(1.0, exp - 15);
    return sign ? -v : v;
}

typedef struct fp16_golden {
    double *in;
    uint16_t *out;
} fp16_golden;

static fp16_golden load_fp16_golden(void)
{
    size_t in_size = 0, out_size = 0;
    fp16_golden g;
    g.in = tu_read_file(PN_TEST_DATA "/golden/fp16.in.f64", &in_size);
    g.out = tu_read_file(PN_TEST_DATA "/golden/fp16.out.u16", &out_size);
    cr_assert_eq(in_size, FP16_GOLDEN_COUNT * sizeof(double), "fp16.in.f64 has %zu bytes", in_size);
    cr_assert_eq(out_size, FP16_GOLDEN_COUNT * sizeof(uint16_t), "fp16.out.u16 has %zu bytes",
                 out_size);
    /* The files are little-endian; so is every host this project builds on. */
    return g;
}

/* Counts mismatches of pn_fp16_from_double against the golden bits over
 * [first, last] and reports the first one. */
static int check_fp16_golden_range(const fp16_golden *g, int first, int last, const char *section)
{
    int bad = 0;
    for (int i = first; i <= last; i++) {
        uint16_t got = pn_fp16_from_double(g->in[i]);
        if (got != g->out[i]) {
            if (bad == 0)
                cr_log_error("%s: input %d (%a = %.17g) gives 0x%04x, expected 0x%04x", section, i,
                             g->in[i], g->in[i], got, g->out[i]);
            bad++;
        }
    }
    return bad;
}

/* --- half -> float -> half -------------------------------------------------- */

Test(fp16, every_half_survives_widening_and_rounding_back)
{
    int bad = 0;
    for (uint32_t h = 0; h <= 0xffff; h++) {
        float f = pn_fp16_to_float((uint16_t)h);
        uint16_t back = pn_fp16_from_float(f);
        if (half_is_nan((uint16_t)h)) {
            if (!isnan(f) || !half_is_nan(back) || (back & 0x8000u) != (h & 0x8000u)) {
                if (!bad)
                    cr_log_error("NaN 0x%04x -> %a -> 0x%04x", h, f, back);
                bad++;
            }
        } else if (back != h) {
            if (!bad)
                cr_log_error("0x%04x -> %a -> 0x%04x", h, f, back);
            bad++;
        }
    }
    cr_assert_eq(bad, 0, "%d of 65536 halves did not survive half -> float -> half", bad);
}

Test(fp16, widening_every_half_is_exact_in_float_and_double)
{
    int bad = 0;
    for (uint32_t h = 0; h <= 0xffff; h++) {
        double want = half_value_by_fields((uint16_t)h);
        double got_d = pn_fp16_to_double((uint16_t)h);
        float got_f = pn_fp16_to_float((uint16_t)h);
        bool ok;
        if (isnan(want))
            ok = isnan(got_d) && isnan(got_f) && !!signbit(got_d) == !!(h & 0x8000u) &&
                 !!signbit(got_f) == !!(h & 0x8000u);
        else
            ok = got_d == want && (double)got_f == want && !!signbit(got_d) == !!signbit(want) &&
                 !!signbit(got_f) == !!signbit(want);
        if (!ok) {
            if (!bad)
                cr_log_error("0x%04x widens to %a / %a, expected %a", h, got_d, (double)got_f,
                             want);
            bad++;
        }
    }
    cr_assert_eq(bad, 0, "%d halves widen wrongly", bad);
}

/* --- golden file ------------------------------------------------------------ */

Test(fp16, golden_inputs_round_once_to_the_golden_bits)
{
    fp16_golden g = load_fp16_golden();
    int bad = check_fp16_golden_range(&g, 0, FP16_GOLDEN_COUNT - 1, "all");
    cr_assert_eq(bad, 0, "%d of %d golden fp16 inputs round wrongly", bad, FP16_GOLDEN_COUNT);
    free(g.in);
    free(g.out);
}

typedef struct fp16_section {
    int first, last;
    int name; /* index into fp16_section_names (no pointers in parameters) */
} fp16_section;

static const char *const fp16_section_names[] = { "special", "halfway", "double_rounding_trap",
                                                  "candidate_t", "random" };

ParameterizedTestParameters(fp16, each_golden_section_rounds_to_the_golden_bits)
{
    static fp16_section sections[] = {
        { 0, 38, 0 }, { 39, 1582, 1 }, { 1583, 1882, 2 }, { 1883, 2746, 3 }, { 2747, 3346, 4 },
    };
    return cr_make_param_array(fp16_section, sections, sizeof sections / sizeof sections[0]);
}

ParameterizedTest(fp16_section *s, fp16, each_golden_section_rounds_to_the_golden_bits)
{
    fp16_golden g = load_fp16_golden();
    const char *name = fp16_section_names[s->name];
    int bad = check_fp16_golden_range(&g, s->first, s->last, name);
    cr_assert_eq(bad, 0, "section %s [%d..%d]: %d inputs round wrongly", name, s->first, s->last,
                 bad);
    free(g.in);
    free(g.out);
}

/* The trap inputs only prove anything if rounding through float really gives
 * a different half there; check the data says so, then that we do not. */
Test(fp16, double_rounding_trap_inputs_differ_from_rounding_through_float)
{
    fp16_golden g = load_fp16_golden();
    int same_as_double_rounding = 0, bad = 0;
    for (int i = 1583; i <= 1882; i++) {
        uint16_t twice = pn_fp16_from_double((double)(float)g.in[i]);
        if (twice == g.out[i])
            same_as_double_rounding++;
        if (pn_fp16_from_double(g.in[i]) != g.out[i])
            bad++;
    }
    cr_assert_eq(same_as_double_rounding, 0,
                 "%d trap inputs give the golden bits even when rounded through float",
                 same_as_double_rounding);
    cr_assert_eq(bad, 0, "%d of 300 trap inputs are rounded twice", bad);
    free(g.in);
    free(g.out);
}

Test(fp16, halfway_values_round_to_the_even_neighbour)
{
    /* 1 + 2^-11 lies half-way between 1.0 (even) and 1 + 2^-10 (odd). */
    cr_assert_eq(pn_fp16_from_double(1.0 + 0x1p-11), 0x3c00);
    cr_assert_eq(pn_fp16_from_double(-(1.0 + 0x1p-11)), 0xbc00);
    /* 1 + 3*2^-11 lies half-way between 1 + 2^-10 (odd) and 1 + 2^-9 (even). */
    cr_assert_eq(pn_fp16_from_double(1.0 + 3 * 0x1p-11), 0x3c02);
    /* One double ulp off a tie decides it. */
    cr_assert_eq(pn_fp16_from_double(nextafter(1.0 + 0x1p-11, 2.0)), 0x3c01);
    cr_assert_eq(pn_fp16_from_double(nextafter(1.0 + 3 * 0x1p-11, 0.0)), 0x3c01);
    /* 2049 is half-way between 2048 and 2050 (spacing 2 above 2048). */
    cr_assert_eq(pn_fp16_from_double(2049.0), 0x6800);
    cr_assert_eq(pn_fp16_from_double(2051.0), 0x6802);
}

/* --- edges ---------------------------------------------------------------- */

Test(fp16, the_overflow_edge_is_65520)
{
    cr_assert_eq(pn_fp16_from_double(65504.0), 0x7bff);
    cr_assert_eq(pn_fp16_from_double(-65504.0), 0xfbff);
    cr_assert_eq(pn_fp16_from_double(65519.99), 0x7bff);
    cr_assert_eq(pn_fp16_from_double(nextafter(65520.0, 0.0)), 0x7bff);
    cr_assert_eq(pn_fp16_from_double(-nextafter(65520.0, 0.0)), 0xfbff);
    cr_assert_eq(pn_fp16_from_double(65520.0), 0x7c00);
    cr_assert_eq(pn_fp16_from_double(-65520.0), 0xfc00);
    cr_assert_eq(pn_fp16_from_double(65536.0), 0x7c00);
    cr_assert_eq(pn_fp16_from_double(DBL_MAX), 0x7c00);
    cr_assert_eq(pn_fp16_from_double(INFINITY), 0x7c00);
    cr_assert_eq(pn_fp16_from_double(-INFINITY), 0xfc00);
    cr_assert_eq(pn_fp16_from_float(65519.996f), 0x7bff);
    cr_assert_eq(pn_fp16_from_float(65520.0f), 0x7c00);
}

Test(fp16, subnormal_halves_are_kept_and_round_to_even)
{
    cr_assert_eq(pn_fp16_from_double(0x1p-24), 0x0001);
    cr_assert_eq(pn_fp16_from_double(-0x1p-24), 0x8001);
    cr_assert_eq(pn_fp16_from_double(0x1p-25), 0x0000, "2^-25 ties to even zero");
    cr_assert_eq(pn_fp16_from_double(-0x1p-25), 0x8000, "-2^-25 ties to -0");
    cr_assert_eq(pn_fp16_from_double(nextafter(0x1p-25, 1.0)), 0x0001);
    cr_assert_eq(pn_fp16_from_double(3 * 0x1p-25), 0x0002, "1.5 units ties to 2");
    cr_assert_eq(pn_fp16_from_double(5 * 0x1p-25), 0x0002, "2.5 units ties to 2");
    cr_assert_eq(pn_fp16_from_double(1023 * 0x1p-24), 0x03ff, "largest subnormal");
    cr_assert_eq(pn_fp16_from_double(1023.5 * 0x1p-24), 0x0400,
                 "half-way to the smallest normal rounds up to it");
    cr_assert_eq(pn_fp16_from_double(0x1p-14), 0x0400, "smallest normal");
    cr_assert_eq(pn_fp16_from_double(1e-300), 0x0000);
    cr_assert_eq(pn_fp16_from_double(-1e-300), 0x8000);
    cr_assert_eq(pn_fp16_from_double(4.9e-324), 0x0000, "double subnormal");
    cr_assert_eq(pn_fp16_to_double(0x0001), 0x1p-24);
    cr_assert_eq(pn_fp16_to_double(0x03ff), 1023 * 0x1p-24);
    cr_assert_eq(pn_fp16_to_double(0x8001), -0x1p-24);
}

Test(fp16, zeros_keep_their_sign)
{
    cr_assert_eq(pn_fp16_from_double(0.0), 0x0000);
    cr_assert_eq(pn_fp16_from_double(-0.0), 0x8000);
    cr_assert(signbit(pn_fp16_to_float(0x8000)) && pn_fp16_to_float(0x8000) == 0.0f);
    cr_assert(!signbit(pn_fp16_to_float(0x0000)));
}

Test(fp16, nan_rounds_to_a_quiet_nan_with_its_sign)
{
    uint16_t p = pn_fp16_from_double(NAN), n = pn_fp16_from_double(-NAN);
    cr_assert(half_is_nan(p) && (p & 0x0200u) && !(p & 0x8000u), "NaN gave 0x%04x", p);
    cr_assert(half_is_nan(n) && (n & 0x0200u) && (n & 0x8000u), "-NaN gave 0x%04x", n);
    cr_assert(isnan(pn_fp16_to_float(0x7c01)), "signalling half NaN widens to NaN");
    cr_assert(isinf(pn_fp16_to_float(0x7c00)) && pn_fp16_to_float(0x7c00) > 0);
    cr_assert(isinf(pn_fp16_to_float(0xfc00)) && pn_fp16_to_float(0xfc00) < 0);
}

/* --- bfloat16 --------------------------------------------------------------- */

Test(bf16, every_bf16_survives_widening_and_rounding_back)
{
    int bad = 0;
    for (uint32_t b = 0; b <= 0xffff; b++) {
        float f = pn_bf16_to_float((uint16_t)b);
        uint16_t back = pn_bf16_from_float(f);
        bool is_nan = (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0;
        /* A NaN comes back quiet (bit 6 set) with its sign and payload. */
        uint16_t want = is_nan ? (uint16_t)(b | 0x40u) : (uint16_t)b;
        if (float_bits(f) != b << 16 || back != want) {
            if (!bad)
                cr_log_error("bf16 0x%04x -> float 0x%08x -> 0x%04x (want 0x%04x)", b,
                             float_bits(f), back, want);
            bad++;
        }
    }
    cr_assert_eq(bad, 0, "%d of 65536 bf16 values did not survive", bad);
}

Test(bf16, rounding_from_float_goes_to_the_nearest_even)
{
    /* bf16 keeps 7 fraction bits: near 1.0 the spacing is 2^-7. */
    cr_assert_eq(pn_bf16_from_float(1.0f + 0x1p-8f), 0x3f80, "tie to even 1.0");
    cr_assert_eq(pn_bf16_from_float(1.0f + 3 * 0x1p-8f), 0x3f82, "tie to even 1+2^-6");
    cr_assert_eq(pn_bf16_from_float(1.0f + 0x1p-8f + 0x1p-23f), 0x3f81, "just past the tie");
    cr_assert_eq(pn_bf16_from_float(1.0f + 0x1p-8f - 0x1p-23f), 0x3f80, "just below the tie");
    cr_assert_eq(pn_bf16_from_float(-(1.0f + 0x1p-8f)), 0xbf80);
    cr_assert_eq(pn_bf16_from_float(-(1.0f + 3 * 0x1p-8f)), 0xbf82);
    cr_assert_eq(pn_bf16_from_float(FLT_MAX), 0x7f80, "rounds past the largest bf16 to inf");
    cr_assert_eq(pn_bf16_from_float(-FLT_MAX), 0xff80);
    cr_assert_eq(pn_bf16_from_float(INFINITY), 0x7f80);
    cr_assert_eq(pn_bf16_from_float(-0.0f), 0x8000);
    cr_assert_eq(pn_bf16_from_float(float_from_bits(0x00008000u)), 0x0000,
                 "subnormal tie to even 0");
    cr_assert_eq(pn_bf16_from_float(float_from_bits(0x00018000u)), 0x0002,
                 "subnormal tie to even 2");
    uint16_t q = pn_bf16_from_float(float_from_bits(0x7f800001u)); /* NaN with a low payload */
    cr_assert((q & 0x7f80u) == 0x7f80u && (q & 0x7fu) != 0, "NaN stays NaN: 0x%04x", q);
}

/* Nearest bf16 to f chosen by comparing the distances to both neighbours in
 * double (exact for these values), ties to the even bit pattern. */
static uint16_t bf16_nearest_by_distance(float f)
{
    uint32_t u = float_bits(f);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    if ((u & 0xffffu) == 0)
        return lo;
    double x = fabs((double)f);
    double a = fabs((double)float_from_bits((uint32_t)lo << 16));
    /* hi may be the infinity pattern: its distance is that of 2^128. */
    double b = ((hi & 0x7f80u) == 0x7f80u) ? ldexp(1.0, 128)
                                           : fabs((double)float_from_bits((uint32_t)hi << 16));
    double da = x - a, db = b - x;
    if (da < db)
        return lo;
    if (db < da)
        return hi;
    return (lo & 1u) ? hi : lo;
}

Test(bf16, rounding_matches_a_nearest_neighbour_search_on_random_floats)
{
    tu_rng rng = { 0xbf16bf16u };
    int bad = 0, checked = 0;
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = (uint32_t)tu_rng_u64(&rng);
        if ((u & 0x7f800000u) == 0x7f800000u)
            continue; /* NaN and inf are checked above */
        float f = float_from_bits(u);
        checked++;
        uint16_t want = bf16_nearest_by_distance(f), got = pn_bf16_from_float(f);
        if (got != want) {
            if (!bad)
                cr_log_error("float 0x%08x -> 0x%04x, nearest is 0x%04x", u, got, want);
            bad++;
        }
    }
    cr_assert_gt(checked, 900000);
    cr_assert_eq(bad, 0, "%d of %d random floats round wrongly to bf16", bad, checked);
}

/* --- little-endian helpers ------------------------------------------------ */

Test(fp16, little_endian_loads_and_stores_work_at_any_alignment)
{
    uint8_t buf[16];
    for (int off = 0; off < 8; off++) {
        memset(buf, 0xee, sizeof buf);
        pn_store_u16le(buf + off, 0xa1b2);
        cr_assert(buf[off] == 0xb2 && buf[off + 1] == 0xa1);
        cr_assert_eq(pn_load_u16le(buf + off), 0xa1b2);
        pn_store_u32le(buf + off, 0x11223344u);
        cr_assert(buf[off] == 0x44 && buf[off + 1] == 0x33 && buf[off + 2] == 0x22 &&
                  buf[off + 3] == 0x11);
        cr_assert_eq(pn_load_u32le(buf + off), 0x11223344u);
        cr_assert_eq(buf[off + 4], 0xee, "store wrote past its 4 bytes");
    }
}

/* ---- an independent oracle ---------------------------------------------
 * The project converts with integer bit arithmetic (quant/fp16.h). This
 * oracle gets the same answers a different way, with libm: scale the
 * magnitude so the half's last kept bit has weight 1 (exact: a power of
 * two) and let rint() round once, ties to even. */
static uint16_t oracle_fp16_from_double(double x)
{
    uint16_t sign = signbit(x) ? 0x8000u : 0u;
    if (isnan(x))
        return (uint16_t)(sign | 0x7e00u);
    double a = fabs(x);
    if (a >= 65520.0)
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x1p-14)
        return (uint16_t)(sign | (uint16_t)rint(a * 0x1p24));
    int e;
    frexp(a, &e);
    int exp = e - 1;
    uint32_t mant = (uint32_t)rint(ldexp(a, 10 - exp));
    if (mant == 2048) {
        mant = 1024;
        exp += 1;
    }
    if (exp > 15)
        return (uint16_t)(sign | 0x7c00u);
    return (uint16_t)(sign | (uint16_t)((exp + 15) << 10) | (uint16_t)(mant - 1024));
}

static double oracle_fp16_to_double(uint16_t h)
{
    int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v = exp == 0    ? ldexp((double)mant, -24)
               : exp == 31 ? (mant ? NAN : INFINITY)
                           : ldexp((double)(mant | 0x400), exp - 25);
    return (h & 0x8000) ? -v : v;
}

Test(fp16_oracle, widening_is_the_exact_value_of_every_half)
{
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float a = pn_fp16_to_float((uint16_t)h), b = (float)oracle_fp16_to_double((uint16_t)h);
        uint32_t ua, ub;
        memcpy(&ua, &a, 4);
        memcpy(&ub, &b, 4);
        if (isnan(b))
            cr_assert(isnan(a), "half 0x%04x: %g, want NaN", h, a);
        else
            cr_assert_eq(ua, ub, "half 0x%04x: %a, want %a", h, a, b);
    }
}

static void check_half_rounding(double x)
{
    uint16_t a = pn_fp16_from_double(x), b = oracle_fp16_from_double(x);
    cr_assert_eq(a, b, "fp16(%a): 0x%04x, the libm oracle gives 0x%04x", x, a, b);
}

Test(fp16_oracle, rounding_equals_a_libm_oracle_on_every_half_midpoint_and_neighbour)
{
    /* every half, the midpoint to its upper neighbour (a tie) and the
     * doubles just either side of that midpoint, both signs */
    for (uint32_t h = 0; h < 0x7c00u; h++) {
        double v = oracle_fp16_to_double((uint16_t)h);
        double next = h + 1 < 0x7c00u ? oracle_fp16_to_double((uint16_t)(h + 1)) : 65536.0;
        double mid = (v + next) / 2.0; /* exact: both are halves */
        const double probes[] = { v,
                                  mid,
                                  nextafter(mid, 0.0),
                                  nextafter(mid, INFINITY),
                                  nextafter(v, 0.0),
                                  nextafter(v, INFINITY) };
        for (size_t k = 0; k < sizeof probes / sizeof probes[0]; k++) {
            check_half_rounding(probes[k]);
            check_half_rounding(-probes[k]);
        }
    }
    const double specials[] = { 0.0,      -0.0,      INFINITY,  -INFINITY, NAN,     65504.0,
                                65519.99, 65520.0,   1e300,     -1e300,    0x1p-24, 0x1p-25,
                                0x1p-26,  0x1.8p-25, 0x1p-1074, 1e-320,    DBL_MAX };
    for (size_t k = 0; k < sizeof specials / sizeof specials[0]; k++)
        check_half_rounding(specials[k]);
    tu_rng r = { 17 };
    for (int i = 0; i < 1000000; i++) {
        uint64_t bits = tu_rng_u64(&r);
        double x;
        /* uniform over bit patterns, then squeezed into the range where
         * halves live (exponents 2^-30 .. 2^17) */
        bits = (bits & 0x800fffffffffffffull) | ((uint64_t)(993 + (bits >> 52) % 48) << 52);
        memcpy(&x, &bits, sizeof x);
        check_half_rounding(x);
    }
}
