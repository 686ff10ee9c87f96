/* Pins the fast PN quantizers (quant/pn_fast.h) and the fast Hadamard
 * rotations (hadamard/hadamard_fast.h): on every path this CPU has, the same
 * bytes as the scalar references for the golden vectors and for large sets of
 * random and engineered inputs (half-way quotients, ties between candidate
 * scales, fp16 subnormal and overflow edges, signed zeros, NaN/Inf), the same
 * refusals with the same column, and the path-choosing API. A path the CPU
 * lacks is not run, and each test says which (cr_log_info). Golden data:
 * tests/data/golden/ (documented in tests/data/golden/SOURCE.md). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hadamard/hadamard.h"
#include "hadamard/hadamard_fast.h"
#include "quant/fp16.h"
#include "quant/pn.h"
#include "quant/pn_fast.h"
#include "quant/pn_fast_testing.h"
#include "quant/types.h"
#include "test_util.h"

#define GOLDEN_GROUPS 128
#define REFUSE_GROUPS 5
#define MAX_G 80

typedef struct path_type {
    int path;
    int type;
} path_type;

/* A path this CPU lacks is not run, and the test says so with cr_log_info;
 * the test still passes on the paths that run (a cr_skip here would mark
 * the whole ctest test Skipped on a machine that lacks one SIMD path). */
#define RUN_ONLY_ON_AVAILABLE_PATH(path)                                                           \
    do {                                                                                           \
        if (!pn_path_available(path)) {                                                            \
            cr_log_info("path %s is not supported by this CPU: not run here", pn_path_name(path)); \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static const char *type_name(int type)
{
    return pn_type_traits_get(type)->name;
}

static double candidate_m(int i)
{
    return (double)(50 + 2 * i) / 100.0;
}

/* s of candidate i for a group with this amax and sigma (the contract's t). */
static double candidate_scale(const pn_params *p, double sigma, double amax, int i)
{
    return pn_fp16_to_double(pn_fp16_from_double(sigma * candidate_m(i) * amax / (double)p->z));
}

static void log_group(const char *what, const float *w, int G)
{
    char buf[80 * 20 + 64];
    int len = 0;
    for (int e = 0; e < G && len < (int)sizeof buf - 24; e++)
        len += snprintf(buf + len, sizeof buf - (size_t)len, " %a", (double)w[e]);
    cr_log_error("%s:%s", what, buf);
}

/* Quantizes `count` groups one by one with the reference and with `path`;
 * returns the number of groups whose status, column or bytes differ (the
 * first is logged). Then the same groups as one row, which must agree too. */
static int compare_groups(int path, int type, const float *w, int64_t count, const char *what)
{
    const pn_params *p = pn_params_get(type);
    const int G = p->group;
    uint8_t ref[PN_BLOCK_BYTES], got[PN_BLOCK_BYTES];
    int bad = 0;
    for (int64_t g = 0; g < count; g++) {
        int64_t col_ref = -7, col = -7;
        memset(ref, 0xa5, sizeof ref);
        memset(got, 0x5a, sizeof got);
        pn_status st_ref = pn_quantize_row_ref(type, w + g * G, G, ref, &col_ref);
        pn_status st = pn_quantize_row_path(type, path, w + g * G, G, got, &col);
        bool same =
            st == st_ref && (st == PN_OK ? memcmp(ref, got, PN_BLOCK_BYTES) == 0 : col == col_ref);
        if (!same) {
            if (bad == 0) {
                cr_log_error("%s %s path %s: group %lld: status %d (column %lld), reference %d "
                             "(column %lld), d 0x%02x%02x vs 0x%02x%02x",
                             what, type_name(type), pn_path_name(path), (long long)g, (int)st,
                             (long long)col, (int)st_ref, (long long)col_ref, got[1], got[0],
                             ref[1], ref[0]);
                log_group("  the group", w + g * G, G);
            }
            bad++;
        }
    }
    uint8_t *row_ref = malloc((size_t)count * PN_BLOCK_BYTES + 1);
    uint8_t *row_got = malloc((size_t)count * PN_BLOCK_BYTES + 1);
    cr_assert(row_ref && row_got);
    int64_t col_ref = -7, col = -7;
    pn_status st_ref = pn_quantize_row_ref(type, w, count * G, row_ref, &col_ref);
    /* at an odd address: blocks may sit at any byte offset */
    pn_status st = pn_quantize_row_path(type, path, w, count * G, row_got + 1, &col);
    if (st != st_ref ||
        (st == PN_OK ? memcmp(row_ref, row_got + 1, (size_t)count * PN_BLOCK_BYTES) != 0
                     : col != col_ref)) {
        cr_log_error("%s %s path %s: the whole row differs (status %d column %lld, reference %d "
                     "column %lld)",
                     what, type_name(type), pn_path_name(path), (int)st, (long long)col,
                     (int)st_ref, (long long)col_ref);
        bad++;
    }
    free(row_ref);
    free(row_got);
    return bad;
}

/* ---- group generators ------------------------------------------------- */

static float few_bits(double v, int bits)
{
    if (v == 0.0 || !isfinite(v))
        return (float)v;
    int e;
    double f = frexp(v, &e);
    return (float)ldexp(nearbyint(ldexp(f, bits)), e - bits);
}

static double log_uniform(tu_rng *r, double lo, double hi)
{
    return exp(log(lo) + (log(hi) - log(lo)) * tu_rng_uniform(r));
}

static int pick(tu_rng *r, int n)
{
    return (int)(tu_rng_u64(r) % (uint64_t)n);
}

static void gen_gauss(tu_rng *r, const pn_params *p, float *w, double scale)
{
    for (int e = 0; e < p->group; e++)
        w[e] = (float)(scale * tu_rng_gauss(r));
}

static void gen_heavy(tu_rng *r, const pn_params *p, float *w, double scale)
{
    for (int e = 0; e < p->group; e++) {
        double u = tu_rng_uniform(r);
        /* Cauchy or Student-t(2)-like, with the odd huge outlier */
        double v = pick(r, 2) ? tan(3.141592653589793 * (u - 0.5))
                              : tu_rng_gauss(r) / sqrt(fabs(tu_rng_gauss(r)) + 1e-3);
        w[e] = (float)(scale * v);
    }
}

/* Elements exactly at (k + 1/2) * s, s one of the group's own candidate
 * scales, plus a few one float-ulp beside such points. */
static void gen_halfway(tu_rng *r, const pn_params *p, float *w, double scale)
{
    const int G = p->group, z = p->z;
    const double A = (double)few_bits(scale * (1.0 + tu_rng_uniform(r)), 1 + pick(r, 12));
    const double sign = pick(r, 2) ? 1.0 : -1.0;
    for (int e = 0; e < G; e++)
        w[e] = (float)(0.3 * A * tu_rng_gauss(r));
    const int ia = pick(r, G);
    w[ia] = (float)(sign * A);
    double amax = 0.0, max = -INFINITY, min = INFINITY;
    for (int e = 0; e < G; e++) {
        if (fabs((double)w[e]) > A) /* keep A the largest magnitude */
            w[e] = (float)(0.5 * w[e] * A / fabs((double)w[e]));
    }
    for (int e = 0; e < G; e++) {
        double v = w[e];
        amax = fabs(v) > amax ? fabs(v) : amax;
        max = v > max ? v : max;
        min = v < min ? v : min;
    }
    const double sigma = (fabs(min) > max) ? 1.0 : -1.0;
    const int n = 1 + pick(r, G / 2);
    for (int j = 0; j < n; j++) {
        int e = pick(r, G);
        if (e == ia)
            continue;
        double s = candidate_scale(p, sigma, amax, pick(r, PN_N_CANDIDATES));
        if (s == 0.0 || !isfinite(s))
            continue;
        int k = pick(r, 2 * z - 1) - z; /* half-way points that decide a code */
        float v = (float)((k + 0.5) * s);
        if (fabs((double)v) >= amax)
            continue;
        int nudge = pick(r, 8);
        if (nudge == 1)
            v = nextafterf(v, INFINITY);
        else if (nudge == 2)
            v = nextafterf(v, -INFINITY);
        w[e] = v;
    }
}

/* Two candidates i, i+1 with different scales and exactly equal error: the
 * amax element A and B = z(s_i + s_{i+1}) - A both take code -z under both,
 * and pairs k*s_i, k*s_{i+1} cost the same under both. The later (larger m)
 * must win. */
static void gen_tie(tu_rng *r, const pn_params *p, float *w, double scale)
{
    const int G = p->group, z = p->z;
    memset(w, 0, (size_t)G * sizeof(float));
    const double A = ldexp(128.0 + pick(r, 128), -7) * scale;
    const double A8 = (double)few_bits(A, 8);
    const double sg = pick(r, 2) ? 1.0 : -1.0;
    const double sigma = sg < 0 ? 1.0 : -1.0;
    const int i = (z == 4 ? 20 : 22) + pick(r, z == 4 ? 5 : 3);
    const double si = candidate_scale(p, sigma, A8, i), sj = candidate_scale(p, sigma, A8, i + 1);
    const double Bm = z * (fabs(si) + fabs(sj)) - A8;
    const int ea = pick(r, G);
    int eb = pick(r, G);
    if (eb == ea)
        eb = (ea + 1) % G;
    w[ea] = (float)(sg * A8);
    w[eb] = (float)(sg * Bm);
    const int pairs = pick(r, 12);
    for (int q = 0; q < pairs; q++) {
        int k = pick(r, 2 * z - 1) - (z - 1);
        int e1 = pick(r, G), e2 = pick(r, G);
        if (e1 == ea || e1 == eb || e2 == ea || e2 == eb || e1 == e2)
            continue;
        w[e1] = (float)(k * si);
        w[e2] = (float)(k * sj);
    }
}

/* A tie as above plus a few tiny weights: every candidate adds the same tiny
 * terms, but at different points of its own running sum, so whether the tie
 * survives depends on the rounding of each addition in element order. Any
 * other summation order (lanes, pairs, reversed) picks other winners here. */
static void gen_tie_plus_small(tu_rng *r, const pn_params *p, float *w, double scale)
{
    gen_tie(r, p, w, scale);
    double amax = 0.0;
    for (int e = 0; e < p->group; e++)
        amax = fabs((double)w[e]) > amax ? fabs((double)w[e]) : amax;
    const int n = 1 + pick(r, 4);
    for (int j = 0; j < n; j++) {
        int e = pick(r, p->group);
        if (fabs((double)w[e]) == amax)
            continue;
        w[e] = (float)(ldexp(amax, -(20 + pick(r, 14))) * (1.0 + tu_rng_uniform(r)) *
                       (pick(r, 2) ? 1.0 : -1.0));
    }
}

/* amax within a few float ulps of 65520 * z / m for some candidate m: where
 * candidate scales start to overflow to infinity. */
static void gen_overflow_edge(tu_rng *r, const pn_params *p, float *w)
{
    const int G = p->group;
    float edge = (float)(65520.0 * p->z / candidate_m(pick(r, PN_N_CANDIDATES)));
    int steps = pick(r, 9) - 4;
    for (int s = 0; s < abs(steps); s++)
        edge = nextafterf(edge, steps > 0 ? INFINITY : 0.0f);
    for (int e = 0; e < G; e++)
        w[e] = (float)(0.3 * edge * tu_rng_gauss(r));
    w[pick(r, G)] = pick(r, 2) ? edge : -edge;
}

/* amax near j * 2^-25 * z / m: where candidate scales become fp16 subnormals,
 * collapse onto each other, or underflow to zero; also near the smallest
 * normal half 2^-14. */
static void gen_subnormal_edge(tu_rng *r, const pn_params *p, float *w)
{
    const int G = p->group;
    double unit = pick(r, 4) ? 0x1p-25 * (1 + pick(r, 24)) : 0x1p-14 * (0.5 + pick(r, 3) * 0.5);
    float edge = (float)(unit * p->z / candidate_m(pick(r, PN_N_CANDIDATES)));
    int steps = pick(r, 9) - 4;
    for (int s = 0; s < abs(steps); s++)
        edge = nextafterf(edge, steps > 0 ? INFINITY : 0.0f);
    for (int e = 0; e < G; e++)
        w[e] = pick(r, 3) ? (float)(0.4 * edge * tu_rng_gauss(r)) : 0.0f;
    w[pick(r, G)] = pick(r, 2) ? edge : -edge;
}

static void gen_equal(tu_rng *r, const pn_params *p, float *w, double scale)
{
    float v = (float)(scale * tu_rng_gauss(r));
    if (pick(r, 4) == 0)
        v = few_bits(v, 1 + pick(r, 6));
    for (int e = 0; e < p->group; e++)
        w[e] = v;
}

static void gen_signed_zeros(tu_rng *r, const pn_params *p, float *w, double scale)
{
    const int mode = pick(r, 3);
    for (int e = 0; e < p->group; e++) {
        w[e] = pick(r, 2) ? 0.0f : -0.0f;
        if (mode == 1 && pick(r, 10) == 0)
            w[e] = (float)(scale * tu_rng_gauss(r));
        if (mode == 2 && pick(r, 10) == 0) /* float subnormals */
            w[e] = (float)(0x1p-140 * tu_rng_gauss(r));
    }
}

static void gen_few_bits(tu_rng *r, const pn_params *p, float *w, double scale)
{
    const int bits = 1 + pick(r, 16);
    for (int e = 0; e < p->group; e++)
        w[e] = few_bits(scale * tu_rng_gauss(r), bits);
}

static void gen_nonfinite(tu_rng *r, const pn_params *p, float *w, double scale)
{
    gen_gauss(r, p, w, scale);
    const float bad[] = { NAN, -NAN, INFINITY, -INFINITY };
    const int n = 1 + pick(r, 3);
    for (int j = 0; j < n; j++)
        w[pick(r, p->group)] = bad[pick(r, 4)];
}

static void gen_symmetric(tu_rng *r, const pn_params *p, float *w, double scale)
{
    gen_gauss(r, p, w, scale);
    int imax = 0, imin = 0;
    for (int e = 1; e < p->group; e++) {
        imax = w[e] > w[imax] ? e : imax;
        imin = w[e] < w[imin] ? e : imin;
    }
    w[imin] = -w[imax];
    int d = pick(r, 3);
    if (d == 1)
        w[imin] = nextafterf(w[imin], -INFINITY);
    else if (d == 2)
        w[imax] = nextafterf(w[imax], INFINITY);
}

enum {
    GEN_GAUSS,
    GEN_HEAVY,
    GEN_HALFWAY,
    GEN_TIE,
    GEN_TIE_SMALL,
    GEN_OVERFLOW,
    GEN_SUBNORMAL,
    GEN_EQUAL,
    GEN_ZEROS,
    GEN_FEW_BITS,
    GEN_NONFINITE,
    GEN_SYMMETRIC,
    GEN_COUNT
};

static void gen_group(int kind, tu_rng *r, const pn_params *p, float *w)
{
    const double scale = log_uniform(r, 1e-8, 1e4);
    switch (kind) {
    case GEN_GAUSS: gen_gauss(r, p, w, scale); break;
    case GEN_HEAVY: gen_heavy(r, p, w, scale); break;
    case GEN_HALFWAY: gen_halfway(r, p, w, scale); break;
    case GEN_TIE: gen_tie(r, p, w, scale); break;
    case GEN_TIE_SMALL: gen_tie_plus_small(r, p, w, scale); break;
    case GEN_OVERFLOW: gen_overflow_edge(r, p, w); break;
    case GEN_SUBNORMAL: gen_subnormal_edge(r, p, w); break;
    case GEN_EQUAL: gen_equal(r, p, w, scale); break;
    case GEN_ZEROS: gen_signed_zeros(r, p, w, scale); break;
    case GEN_FEW_BITS: gen_few_bits(r, p, w, scale); break;
    case GEN_NONFINITE: gen_nonfinite(r, p, w, scale); break;
    default: gen_symmetric(r, p, w, scale); break;
    }
}

static float *make_groups(int kind, int type, int64_t count, uint64_t seed)
{
    const pn_params *p = pn_params_get(type);
    float *w = malloc((size_t)(count * p->group) * sizeof(float));
    cr_assert_not_null(w);
    tu_rng r = { seed ^ ((uint64_t)type << 40) ^ ((uint64_t)kind << 48) };
    for (int64_t g = 0; g < count; g++)
        gen_group(kind, &r, p, w + g * p->group);
    return w;
}

/* The reference's per-candidate errors, written out again from the contract,
 * to tell a real tie (two different scales with the smallest error) from a
 * lucky one. Returns true for a real tie. */
static bool has_real_tie(const pn_params *p, const float *w)
{
    const int G = p->group, z = p->z;
    double amax = 0.0, max = -INFINITY, min = INFINITY;
    for (int e = 0; e < G; e++) {
        double v = w[e];
        amax = fabs(v) > amax ? fabs(v) : amax;
        max = v > max ? v : max;
        min = v < min ? v : min;
    }
    if (amax == 0.0)
        return false;
    const double sigma = (fabs(min) > max) ? 1.0 : -1.0;
    double err[PN_N_CANDIDATES], s[PN_N_CANDIDATES], best = INFINITY;
    for (int i = 0; i < PN_N_CANDIDATES; i++) {
        s[i] = candidate_scale(p, sigma, amax, i);
        err[i] = INFINITY;
        if (s[i] == 0.0 || !isfinite(s[i]))
            continue;
        double sum = 0.0;
        for (int e = 0; e < G; e++) {
            double n = rint((double)w[e] / s[i]) + z;
            n = n < 0 ? 0 : (n > 2 * z - 1 ? 2 * z - 1 : n);
            double d = (double)w[e] - s[i] * (n - z);
            sum = sum + d * d;
        }
        err[i] = sum;
        best = sum < best ? sum : best;
    }
    for (int i = 0; i < PN_N_CANDIDATES; i++)
        for (int j = i + 1; j < PN_N_CANDIDATES; j++)
            if (err[i] == best && err[j] == best && s[i] != s[j])
                return true;
    return false;
}

/* ---- parameter tables ------------------------------------------------- */

static path_type all_paths[] = {
    { PN_PATH_REF, PN_TYPE_PN3T },         { PN_PATH_REF, PN_TYPE_PN4T },
    { PN_PATH_SCALAR_FAST, PN_TYPE_PN3T }, { PN_PATH_SCALAR_FAST, PN_TYPE_PN4T },
    { PN_PATH_AVX2, PN_TYPE_PN3T },        { PN_PATH_AVX2, PN_TYPE_PN4T },
    { PN_PATH_AVX512, PN_TYPE_PN3T },      { PN_PATH_AVX512, PN_TYPE_PN4T },
};
#define ALL_PATHS cr_make_param_array(path_type, all_paths, sizeof all_paths / sizeof all_paths[0])
/* the paths that are not the reference itself */
#define FAST_PATHS                                                                                 \
    cr_make_param_array(path_type, all_paths + 2, sizeof all_paths / sizeof all_paths[0] - 2)

/* ---- golden vectors --------------------------------------------------- */

ParameterizedTestParameters(pn_fast, every_path_writes_the_golden_blocks)
{
    return ALL_PATHS;
}
ParameterizedTest(path_type *pt, pn_fast, every_path_writes_the_golden_blocks)
{
    RUN_ONLY_ON_AVAILABLE_PATH(pt->path);
    const pn_params *p = pn_params_get(pt->type);
    char in_path[512], out_path[512];
    snprintf(in_path, sizeof in_path, PN_TEST_DATA "/golden/%s.in.f32", type_name(pt->type));
    snprintf(out_path, sizeof out_path, PN_TEST_DATA "/golden/%s.out.bin", type_name(pt->type));
    size_t in_size = 0, out_size = 0;
    float *w = tu_read_file(in_path, &in_size);
    uint8_t *want = tu_read_file(out_path, &out_size);
    cr_assert_eq(in_size, (size_t)GOLDEN_GROUPS * p->group * sizeof(float));
    cr_assert_eq(out_size, (size_t)GOLDEN_GROUPS * PN_BLOCK_BYTES);
    int bad = 0;
    for (int g = 0; g < GOLDEN_GROUPS; g++) {
        uint8_t got[PN_BLOCK_BYTES];
        int64_t col = -1;
        pn_status st =
            pn_quantize_row_path(pt->type, pt->path, w + g * p->group, p->group, got, &col);
        if (st != PN_OK || memcmp(got, want + g * PN_BLOCK_BYTES, PN_BLOCK_BYTES) != 0) {
            cr_log_error(
                "%s golden group %d on path %s: status %d, d 0x%02x%02x, expected 0x%02x%02x",
                type_name(pt->type), g, pn_path_name(pt->path), (int)st, got[1], got[0],
                want[g * PN_BLOCK_BYTES + 1], want[g * PN_BLOCK_BYTES]);
            bad++;
        }
    }
    cr_expect_eq(bad, 0, "%d of %d golden %s groups differ on path %s", bad, GOLDEN_GROUPS,
                 type_name(pt->type), pn_path_name(pt->path));
    uint8_t *row = malloc(out_size);
    cr_assert_eq(pn_quantize_row_path(pt->type, pt->path, w, GOLDEN_GROUPS * p->group, row, NULL),
                 PN_OK);
    cr_expect(memcmp(row, want, out_size) == 0, "the golden %s groups as one row differ on path %s",
              type_name(pt->type), pn_path_name(pt->path));
    free(row);
    free(w);
    free(want);
}

ParameterizedTestParameters(pn_fast,
                            every_path_refuses_the_golden_refusal_groups_at_the_same_column)
{
    return ALL_PATHS;
}
ParameterizedTest(path_type *pt, pn_fast,
                  every_path_refuses_the_golden_refusal_groups_at_the_same_column)
{
    RUN_ONLY_ON_AVAILABLE_PATH(pt->path);
    const pn_params *p = pn_params_get(pt->type);
    const int G = p->group;
    char path[512];
    snprintf(path, sizeof path, PN_TEST_DATA "/golden/%s.refuse.f32", type_name(pt->type));
    size_t size = 0;
    float *w = tu_read_file(path, &size);
    cr_assert_eq(size, (size_t)REFUSE_GROUPS * G * sizeof(float));
    /* each refusal group alone, and placed as group 3 of a row of valid ones */
    float *row = malloc((size_t)6 * G * sizeof(float));
    uint8_t out[6 * PN_BLOCK_BYTES];
    for (int g = 0; g < REFUSE_GROUPS; g++) {
        int64_t col_ref = -1, col = -1;
        pn_status st_ref = pn_quantize_row_ref(pt->type, w + g * G, G, out, &col_ref);
        pn_status st = pn_quantize_row_path(pt->type, pt->path, w + g * G, G, out, &col);
        cr_expect_neq(st, PN_OK, "refusal group %d accepted on path %s", g, pn_path_name(pt->path));
        cr_expect(st_ref == PN_ERR_NONFINITE || st_ref == PN_ERR_SCALE_OVERFLOW);
        cr_expect_eq(st, st_ref, "refusal group %d: status %d, reference %d", g, (int)st,
                     (int)st_ref);
        cr_expect_eq(col, col_ref, "refusal group %d: column %lld, reference %lld", g,
                     (long long)col, (long long)col_ref);
        tu_rng r = { (uint64_t)g + 1 };
        for (int e = 0; e < 6 * G; e++)
            row[e] = (float)(0.02 * tu_rng_gauss(&r));
        memcpy(row + 3 * G, w + g * G, (size_t)G * sizeof(float));
        st_ref = pn_quantize_row_ref(pt->type, row, 6 * G, out, &col_ref);
        st = pn_quantize_row_path(pt->type, pt->path, row, 6 * G, out, &col);
        cr_expect_eq(st, st_ref);
        cr_expect_eq(col, col_ref, "refusal group %d in a row: column %lld, reference %lld", g,
                     (long long)col, (long long)col_ref);
        cr_expect(col >= 3 * G && col < 4 * G);
    }
    free(row);
    free(w);
}

/* ---- random and engineered groups -------------------------------------- */

typedef struct gen_case {
    int kind;
    const char *name;
    int64_t count;
} gen_case;

static const gen_case gen_cases[] = {
    { GEN_HALFWAY, "exact half-way quotients", 4000 },
    { GEN_TIE_SMALL, "near-ties decided by the rounding of the sums", 4000 },
    { GEN_OVERFLOW, "fp16 overflow edges", 3000 },
    { GEN_SUBNORMAL, "fp16 subnormal and underflow edges", 3000 },
    { GEN_EQUAL, "all-equal groups", 1000 },
    { GEN_ZEROS, "signed zeros", 1000 },
    { GEN_FEW_BITS, "few-bit weights", 3000 },
    { GEN_NONFINITE, "NaN and infinity", 500 },
    { GEN_SYMMETRIC, "|min| == max and one ulp off", 1000 },
    { GEN_HEAVY, "heavy tails", 2000 },
};

ParameterizedTestParameters(pn_fast, every_fast_path_matches_the_reference_on_engineered_groups)
{
    return FAST_PATHS;
}
ParameterizedTest(path_type *pt, pn_fast,
                  every_fast_path_matches_the_reference_on_engineered_groups)
{
    RUN_ONLY_ON_AVAILABLE_PATH(pt->path);
    for (size_t c = 0; c < sizeof gen_cases / sizeof gen_cases[0]; c++) {
        float *w = make_groups(gen_cases[c].kind, pt->type, gen_cases[c].count, 11);
        int bad = compare_groups(pt->path, pt->type, w, gen_cases[c].count, gen_cases[c].name);
        cr_expect_eq(bad, 0, "%s: %d of %lld groups differ on path %s", gen_cases[c].name, bad,
                     (long long)gen_cases[c].count, pn_path_name(pt->path));
        free(w);
    }
}

ParameterizedTestParameters(pn_fast, every_fast_path_lets_the_later_candidate_win_real_ties)
{
    return FAST_PATHS;
}
ParameterizedTest(path_type *pt, pn_fast, every_fast_path_lets_the_later_candidate_win_real_ties)
{
    RUN_ONLY_ON_AVAILABLE_PATH(pt->path);
    const pn_params *p = pn_params_get(pt->type);
    const int64_t count = 2000;
    float *w = make_groups(GEN_TIE, pt->type, count, 5);
    int ties = 0;
    for (int64_t g = 0; g < count; g++)
        ties += has_real_tie(p, w + g * p->group);
    /* the construction makes most groups real ties; make sure it still does */
    cr_expect_geq(ties, count / 5, "only %d of %lld engineered %s groups are real ties", ties,
                  (long long)count, type_name(pt->type));
    int bad = compare_groups(pt->path, pt->type, w, count, "tie");
    cr_expect_eq(bad, 0, "%d of %lld tie groups differ on path %s", bad, (long long)count,
                 pn_path_name(pt->path));
    free(w);
}

ParameterizedTestParameters(pn_fast,
                            every_fast_path_matches_the_reference_on_gaussian_rows_at_every_scale)
{
    return FAST_PATHS;
}
ParameterizedTest(path_type *pt, pn_fast,
                  every_fast_path_matches_the_reference_on_gaussian_rows_at_every_scale)
{
    RUN_ONLY_ON_AVAILABLE_PATH(pt->path);
    const pn_params *p = pn_params_get(pt->type);
    const int groups = 64;
    float *w = malloc((size_t)groups * p->group * sizeof(float));
    tu_rng r = { 99 };
    int bad = 0;
    for (int decade = -8; decade <= 4; decade++) {
        for (int rep = 0; rep < 3; rep++) {
            double scale = pow(10.0, decade + rep / 3.0);
            for (int e = 0; e < groups * p->group; e++)
                w[e] = (float)(scale * tu_rng_gauss(&r));
            char what[64];
            snprintf(what, sizeof what, "Gaussian rows, std %.3g", scale);
            bad += compare_groups(pt->path, pt->type, w, groups, what);
        }
    }
    cr_expect_eq(bad, 0, "%d Gaussian groups differ on path %s", bad, pn_path_name(pt->path));
    free(w);
}

/* One reference run per type shared by every fast path: the reference is
 * the slow part, and the suite has to stay quick. */
static int pn_types[] = { PN_TYPE_PN3T, PN_TYPE_PN4T };

ParameterizedTestParameters(pn_fast, every_fast_path_matches_the_reference_on_200k_random_groups)
{
    return cr_make_param_array(int, pn_types, 2);
}
ParameterizedTest(int *type, pn_fast, every_fast_path_matches_the_reference_on_200k_random_groups)
{
    const pn_params *p = pn_params_get(*type);
    const int G = p->group;
    const int64_t count = 200000;
    float *w = malloc((size_t)(count * G) * sizeof(float));
    uint8_t *ref = malloc((size_t)count * PN_BLOCK_BYTES);
    pn_status *st_ref = malloc((size_t)count * sizeof(pn_status));
    int64_t *col_ref = malloc((size_t)count * sizeof(int64_t));
    cr_assert(w && ref && st_ref && col_ref);
    tu_rng r = { 2024 + (uint64_t)*type };
    int kinds_seen[GEN_COUNT] = { 0 };
    for (int64_t g = 0; g < count; g++) {
        /* mostly the plain kinds real weights look like; every kind present */
        int roll = pick(&r, 10 + GEN_COUNT - 1);
        int kind = roll < 8 ? GEN_GAUSS : roll < 10 ? GEN_HEAVY : roll - 10 + GEN_HEAVY;
        kinds_seen[kind]++;
        gen_group(kind, &r, p, w + g * G);
        st_ref[g] = pn_quantize_row_ref(*type, w + g * G, G, ref + g * PN_BLOCK_BYTES, &col_ref[g]);
    }
    for (int k = 0; k < GEN_COUNT; k++)
        cr_assert_gt(kinds_seen[k], 1000, "group kind %d is missing", k);
    int tested = 0;
    for (int path = PN_PATH_SCALAR_FAST; path < PN_PATH_COUNT; path++) {
        if (!pn_path_available(path)) {
            cr_log_info("path %s is not supported by this CPU: not compared", pn_path_name(path));
            continue;
        }
        tested++;
        int bad = 0;
        for (int64_t g = 0; g < count; g++) {
            uint8_t got[PN_BLOCK_BYTES];
            int64_t col = -7;
            pn_status st = pn_quantize_row_path(*type, path, w + g * G, G, got, &col);
            bool same = st == st_ref[g] &&
                        (st == PN_OK ? memcmp(got, ref + g * PN_BLOCK_BYTES, PN_BLOCK_BYTES) == 0
                                     : col == col_ref[g]);
            if (!same && bad++ == 0) {
                cr_log_error("%s path %s: random group %lld: status %d, reference %d",
                             type_name(*type), pn_path_name(path), (long long)g, (int)st,
                             (int)st_ref[g]);
                log_group("  the group", w + g * G, G);
            }
        }
        cr_expect_eq(bad, 0, "%d of %lld random %s groups differ on path %s", bad, (long long)count,
                     type_name(*type), pn_path_name(path));
    }
    cr_expect_geq(tested, 1, "the portable path at least is always compared");
    free(w);
    free(ref);
    free(st_ref);
    free(col_ref);
}

ParameterizedTestParameters(pn_fast, every_path_reports_the_first_bad_column_of_a_row)
{
    return ALL_PATHS;
}
ParameterizedTest(path_type *pt, pn_fast, every_path_reports_the_first_bad_column_of_a_row)
{
    RUN_ONLY_ON_AVAILABLE_PATH(pt->path);
    const pn_params *p = pn_params_get(pt->type);
    const int G = p->group, groups = 8;
    float row[8 * MAX_G];
    uint8_t out[8 * PN_BLOCK_BYTES];
    tu_rng r = { 7 };
    for (int trial = 0; trial < 200; trial++) {
        for (int e = 0; e < groups * G; e++)
            row[e] = (float)(0.02 * tu_rng_gauss(&r));
        int c1 = pick(&r, groups * G), c2 = pick(&r, groups * G);
        row[c1] = pick(&r, 2) ? NAN : -INFINITY;
        if (pick(&r, 2)) { /* a second problem: a group too large for fp16 */
            for (int e = 0; e < G; e++)
                row[(c2 / G) * G + e] = 1e30f;
        }
        int64_t col_ref = -1, col = -1;
        pn_status st_ref = pn_quantize_row_ref(pt->type, row, groups * G, out, &col_ref);
        pn_status st = pn_quantize_row_path(pt->type, pt->path, row, groups * G, out, &col);
        cr_assert_eq(st, st_ref, "trial %d: status %d, reference %d", trial, (int)st, (int)st_ref);
        cr_assert_eq(col, col_ref, "trial %d: column %lld, reference %lld", trial, (long long)col,
                     (long long)col_ref);
    }
}

ParameterizedTestParameters(pn_fast, every_path_refuses_bad_arguments_and_accepts_an_empty_row)
{
    return ALL_PATHS;
}
ParameterizedTest(path_type *pt, pn_fast, every_path_refuses_bad_arguments_and_accepts_an_empty_row)
{
    RUN_ONLY_ON_AVAILABLE_PATH(pt->path);
    const pn_params *p = pn_params_get(pt->type);
    float w[2 * MAX_G] = { 0 };
    uint8_t out[2 * PN_BLOCK_BYTES];
    cr_expect_eq(pn_quantize_row_path(pt->type, pt->path, w, p->group + 1, out, NULL),
                 PN_ERR_USAGE);
    cr_expect_eq(pn_quantize_row_path(pt->type, pt->path, w, -p->group, out, NULL), PN_ERR_USAGE);
    cr_expect_eq(pn_quantize_row_path(PN_TYPE_Q8_0, pt->path, w, p->group, out, NULL),
                 PN_ERR_USAGE);
    cr_expect_eq(pn_quantize_row_path(pt->type, pt->path, w, 0, out, NULL), PN_OK);
    /* the input may start at any float */
    tu_rng r = { 3 };
    for (int e = 0; e < 2 * MAX_G; e++)
        w[e] = (float)tu_rng_gauss(&r);
    uint8_t want[PN_BLOCK_BYTES];
    cr_assert_eq(pn_quantize_row_ref(pt->type, w + 1, p->group, want, NULL), PN_OK);
    cr_assert_eq(pn_quantize_row_path(pt->type, pt->path, w + 1, p->group, out + 3, NULL), PN_OK);
    cr_expect(memcmp(want, out + 3, PN_BLOCK_BYTES) == 0);
}

/* ---- the path API ----------------------------------------------------- */

Test(pn_fast, path_names_round_trip_and_unknown_paths_are_refused)
{
    for (int path = 0; path < PN_PATH_COUNT; path++)
        cr_expect_eq(pn_path_from_name(pn_path_name(path)), path);
    cr_expect_eq(pn_path_from_name("sse9"), -1);
    cr_expect_eq(pn_path_from_name(NULL), -1);
    cr_expect_str_eq(pn_path_name(17), "unknown");
    cr_expect(pn_path_available(PN_PATH_REF));
    cr_expect(pn_path_available(PN_PATH_SCALAR_FAST));
    cr_expect_not(pn_path_available(-1));
    cr_expect_not(pn_path_available(PN_PATH_COUNT));
    float w[80] = { 1.0f };
    uint8_t out[PN_BLOCK_BYTES];
    cr_expect_eq(pn_quantize_row_path(PN_TYPE_PN3T, PN_PATH_COUNT, w, 80, out, NULL), PN_ERR_USAGE);
    cr_expect_eq(pn_hadamard_rotate_row_path(PN_PATH_COUNT, w, 80, 16), PN_ERR_USAGE);
}

Test(pn_fast, the_best_path_is_the_fastest_the_cpu_has)
{
    int want = pn_path_available(PN_PATH_AVX512) ? PN_PATH_AVX512
               : pn_path_available(PN_PATH_AVX2) ? PN_PATH_AVX2
                                                 : PN_PATH_SCALAR_FAST;
    cr_expect_eq(pn_cpu_path_best(), want);
    cr_expect(pn_path_available(pn_cpu_path_best()));
}

Test(pn_fast, a_path_name_that_is_not_a_path_is_refused)
{
    /* how the programs parse PN_CPU_PATH: only the exact names */
    static const char *const bad[] = { "turbo", "", "AVX2", "avx2 ", "scalar-fast", "1" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_eq(pn_path_from_name(bad[i]), -1, "\"%s\" names no path", bad[i]);
    cr_expect_eq(pn_path_from_name("ref"), PN_PATH_REF);
    cr_expect_eq(pn_path_from_name("scalar"), PN_PATH_SCALAR_FAST);
    cr_expect_eq(pn_path_from_name("avx2"), PN_PATH_AVX2);
    cr_expect_eq(pn_path_from_name("avx512"), PN_PATH_AVX512);
}

Test(pn_fast, the_library_reads_no_environment)
{
    /* A value that once made pn_quantize_row refuse every row and the
     * rotation fall back to the reference: the library now ignores it (the
     * programs read it, once). */
    setenv(PN_CPU_PATH_ENV, "turbo", 1);
    float w[80] = { 0.5f, -0.25f };
    uint8_t out[PN_BLOCK_BYTES], want[PN_BLOCK_BYTES];
    cr_expect_eq(pn_quantize_row(PN_TYPE_PN3T, w, 80, out, NULL), PN_OK);
    cr_assert_eq(pn_quantize_row_ref(PN_TYPE_PN3T, w, 80, want, NULL), PN_OK);
    cr_expect(memcmp(out, want, sizeof out) == 0);
    float x[16], y[16];
    for (int j = 0; j < 16; j++)
        x[j] = y[j] = (float)j - 3.5f;
    pn_hadamard_rotate_row(x, 16, 16);
    pn_hadamard_rotate_row_ref(y, 16, 16);
    cr_expect(memcmp(x, y, sizeof x) == 0);
    unsetenv(PN_CPU_PATH_ENV);
}

/* ---- fp16 helpers ----------------------------------------------------- */

static uint64_t dbits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* 0 when pn_fp16_value_fast(x) is bit for bit fp16(x) widened. */
static int fp16_fast_differs(double x)
{
    double want = pn_fp16_to_double(pn_fp16_from_double(x));
    double got = pn_fp16_value_fast(x);
    if (dbits(want) == dbits(got))
        return 0;
    cr_log_error("fp16 of %a: fast %a, reference %a", x, got, want);
    return 1;
}

Test(pn_fast, fast_fp16_rounding_equals_the_reference_on_the_golden_inputs)
{
    size_t size = 0;
    double *in = tu_read_file(PN_TEST_DATA "/golden/fp16.in.f64", &size);
    cr_assert_eq(size % sizeof(double), 0);
    int bad = 0, checked = 0;
    for (size_t i = 0; i < size / sizeof(double); i++) {
        if (isnan(in[i]))
            continue; /* a candidate t is never NaN */
        bad += fp16_fast_differs(in[i]);
        checked++;
    }
    cr_expect_gt(checked, 3000);
    cr_expect_eq(bad, 0, "%d of %d golden fp16 inputs differ", bad, checked);
    free(in);
}

Test(pn_fast, fast_fp16_rounding_equals_the_reference_on_random_and_half_way_doubles)
{
    tu_rng r = { 42 };
    int bad = 0;
    for (int i = 0; i < 1000000 && bad < 10; i++) {
        /* any magnitude a candidate can take, and beyond */
        double x = ldexp(1.0 + tu_rng_uniform(&r), -40 + pick(&r, 60));
        if (pick(&r, 2))
            x = -x;
        bad += fp16_fast_differs(x);
    }
    /* exactly half-way between two halves, and one double ulp either side */
    for (uint32_t h = 0; h < 0x7c00u && bad < 10; h++) {
        double a = pn_fp16_to_double((uint16_t)h), b = pn_fp16_to_double((uint16_t)(h + 1));
        if (h + 1 == 0x7c00u)
            b = 65536.0; /* the overflow threshold 65520 is the midpoint */
        double mid = 0.5 * (a + b);
        const double xs[] = { mid, nextafter(mid, 0.0), nextafter(mid, INFINITY), a };
        for (int k = 0; k < 4; k++) {
            bad += fp16_fast_differs(xs[k]);
            bad += fp16_fast_differs(-xs[k]);
        }
    }
    const double specials[] = { 0.0,     -0.0,  0x1p-25, 0x1p-26,  0x1.8p-25, 65504.0, 65519.99,
                                65520.0, 1e300, -1e300,  INFINITY, -INFINITY, DBL_MIN, 5e-324 };
    for (size_t k = 0; k < sizeof specials / sizeof specials[0]; k++)
        bad += fp16_fast_differs(specials[k]);
    cr_expect_eq(bad, 0, "%d doubles round differently", bad);
}

Test(pn_fast, half_bits_of_every_finite_half_value_round_trip)
{
    int bad = 0;
    for (uint32_t h = 0; h <= 0xffffu; h++) {
        if ((h & 0x7c00u) == 0x7c00u)
            continue;
        uint16_t got = pn_fp16_bits_of_half_value(pn_fp16_to_double((uint16_t)h));
        if (got != h && bad++ < 5)
            cr_log_error("half 0x%04x comes back as 0x%04x", h, got);
    }
    cr_expect_eq(bad, 0);
}

/* ---- the rotation ----------------------------------------------------- */

static const int rotation_paths[] = { PN_PATH_REF, PN_PATH_SCALAR_FAST, PN_PATH_AVX2,
                                      PN_PATH_AVX512 };

ParameterizedTestParameters(pn_fast_rotation, every_path_writes_the_golden_rotations)
{
    return cr_make_param_array(int, (void *)rotation_paths, 4);
}
ParameterizedTest(int *path, pn_fast_rotation, every_path_writes_the_golden_rotations)
{
    RUN_ONLY_ON_AVAILABLE_PATH(*path);
    static const struct {
        const char *name;
        int64_t K;
        int cap;
    } files[] = {
        { "K5120", 5120, 1024 }, { "K6144", 6144, 1024 },       { "K17408", 17408, 1024 },
        { "K1280", 1280, 1024 }, { "K320", 320, 1024 },         { "K640", 640, 1024 },
        { "K96", 96, 1024 },     { "K5120.cap512", 5120, 512 },
    };
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char in_path[512], out_path[512];
        snprintf(in_path, sizeof in_path, PN_TEST_DATA "/golden/hadamard.%s.in.f32", files[f].name);
        snprintf(out_path, sizeof out_path, PN_TEST_DATA "/golden/hadamard.%s.out.f32",
                 files[f].name);
        size_t in_size = 0, out_size = 0;
        float *x = tu_read_file(in_path, &in_size);
        float *want = tu_read_file(out_path, &out_size);
        cr_assert_eq(in_size, out_size);
        const int64_t K = files[f].K, rows = (int64_t)(in_size / sizeof(float)) / K;
        const int B = pn_hadamard_block_size(K, files[f].cap);
        for (int64_t r = 0; r < rows; r++) {
            cr_assert_eq(pn_hadamard_rotate_row_path(*path, x + r * K, K, B), PN_OK);
            cr_expect(memcmp(x + r * K, want + r * K, (size_t)K * sizeof(float)) == 0,
                      "hadamard.%s row %lld differs on path %s", files[f].name, (long long)r,
                      pn_path_name(*path));
        }
        free(x);
        free(want);
    }
}

/* Rows whose values stress the rounding: wide magnitudes, cancellation,
 * subnormals, values that overflow float after scaling, NaN and infinity. */
static void fill_rotation_row(tu_rng *r, float *x, int64_t K, int kind)
{
    for (int64_t j = 0; j < K; j++) {
        double v = tu_rng_gauss(r);
        switch (kind) {
        case 0: v *= 0.02; break;
        case 1: v *= exp(60.0 * (2.0 * tu_rng_uniform(r) - 1.0)); break;
        case 2: v *= 1e-39; break;
        case 3: v *= 1e38; break;
        case 4: v = (j % 3 == 0) ? 0x1p60 : (j % 3 == 1) ? -0x1p60 : 1.0; break;
        case 5: v = few_bits(v, 3); break;
        default:
            if (pick(r, 50) == 0)
                v = pick(r, 3) == 0 ? NAN : (pick(r, 2) ? INFINITY : -INFINITY);
            break;
        }
        x[j] = (float)v;
    }
}

/* Bit for bit, except that a NaN only has to be a NaN: C leaves the operand
 * order of a commutative addition to the compiler, and with two NaN operands
 * that order picks the result's sign and payload (PN rows never hold NaN:
 * non-finite weights are refused before the rotation). */
static bool same_rotation(const float *a, const float *b, int64_t K)
{
    for (int64_t j = 0; j < K; j++) {
        if (isnan(a[j]) && isnan(b[j]))
            continue;
        if (memcmp(&a[j], &b[j], sizeof(float)) != 0)
            return false;
    }
    return true;
}

ParameterizedTestParameters(pn_fast_rotation, every_path_equals_the_reference_for_every_block_size)
{
    return cr_make_param_array(int, (void *)rotation_paths, 4);
}
ParameterizedTest(int *path, pn_fast_rotation, every_path_equals_the_reference_for_every_block_size)
{
    RUN_ONLY_ON_AVAILABLE_PATH(*path);
    tu_rng r = { 17 };
    float *x = malloc(3 * PN_HADAMARD_MAX_BLOCK * sizeof(float));
    float *y = malloc(3 * PN_HADAMARD_MAX_BLOCK * sizeof(float));
    int bad = 0;
    for (int B = 1; B <= PN_HADAMARD_MAX_BLOCK; B *= 2) {
        for (int kind = 0; kind < 7; kind++) {
            const int64_t K = (int64_t)B * (1 + pick(&r, 3));
            fill_rotation_row(&r, x, K, kind);
            memcpy(y, x, (size_t)K * sizeof(float));
            pn_hadamard_rotate_row_ref(y, K, B);
            cr_assert_eq(pn_hadamard_rotate_row_path(*path, x, K, B), PN_OK);
            if (!same_rotation(x, y, K) && bad++ < 5)
                cr_log_error("B = %d, K = %lld, row kind %d differs on path %s", B, (long long)K,
                             kind, pn_path_name(*path));
        }
    }
    /* the block sizes a cap of 4096 gives */
    for (int64_t K = 4096; K <= 3 * 4096; K += 1024) {
        const int B = pn_hadamard_block_size(K, 4096);
        fill_rotation_row(&r, x, K, 1);
        memcpy(y, x, (size_t)K * sizeof(float));
        pn_hadamard_rotate_row_ref(y, K, B);
        cr_assert_eq(pn_hadamard_rotate_row_path(*path, x, K, B), PN_OK);
        if (!same_rotation(x, y, K) && bad++ < 5)
            cr_log_error("cap 4096, K = %lld (B = %d) differs on path %s", (long long)K, B,
                         pn_path_name(*path));
    }
    cr_expect_eq(bad, 0, "%d rotations differ on path %s", bad, pn_path_name(*path));
    free(x);
    free(y);
}

ParameterizedTestParameters(pn_fast_rotation,
                            every_path_refuses_a_bad_block_and_leaves_the_row_alone)
{
    return cr_make_param_array(int, (void *)rotation_paths, 4);
}
ParameterizedTest(int *path, pn_fast_rotation,
                  every_path_refuses_a_bad_block_and_leaves_the_row_alone)
{
    RUN_ONLY_ON_AVAILABLE_PATH(*path);
    float x[96], y[96];
    for (int j = 0; j < 96; j++)
        x[j] = y[j] = (float)j;
    cr_expect_eq(pn_hadamard_rotate_row_path(*path, x, 96, 3), PN_ERR_USAGE);
    cr_expect_eq(pn_hadamard_rotate_row_path(*path, x, 96, 64), PN_ERR_USAGE);
    cr_expect_eq(pn_hadamard_rotate_row_path(*path, x, 96, 0), PN_ERR_USAGE);
    cr_expect_eq(pn_hadamard_rotate_row_path(*path, x, 0, 32), PN_ERR_USAGE);
    cr_expect_eq(pn_hadamard_rotate_row_path(*path, x, 8192, 8192), PN_ERR_USAGE);
    cr_expect(memcmp(x, y, sizeof x) == 0);
}
