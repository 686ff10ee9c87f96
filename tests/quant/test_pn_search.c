/* Pins the float-scored PN search of the AVX2 and AVX-512 paths (argument 3
 * of quant/pn_fast_internal.h): on every path, the same bytes, status, error
 * column and per-group sums as the scalar reference, for random,
 * heavy-tailed, edge (zeros, subnormals, huge, one outlier, constant,
 * non-finite) and tie-prone groups (two candidates with exactly equal error,
 * or errors one to a few ulps apart, which is where a float score can only
 * be trusted to within its bound and the double rescoring decides). A path
 * this CPU lacks is skipped with a message saying so (cr_skip_test), each
 * path being its own test. Expected bytes come from pn_quantize_row_ref /
 * pn_quantize_row_ref_sums, which the golden blocks of the independent
 * implementation pin in turn (every path, the reference's dispatch
 * included, against tests/data/golden). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/fp16.h"
#include "quant/pn.h"
#include "quant/pn_fast.h"
#include "quant/types.h"
#include "test_util.h"

enum { KIND_RANDOM, KIND_HEAVY, KIND_EDGE, KIND_TIE, KIND_COUNT };
static const char *const kind_names[KIND_COUNT] = { "random", "heavy-tailed", "edge", "tie-prone" };

static int pick(tu_rng *r, int n)
{
    return (int)(tu_rng_u64(r) % (uint64_t)n);
}

static double log_uniform(tu_rng *r, double lo, double hi)
{
    return exp(log(lo) + (log(hi) - log(lo)) * tu_rng_uniform(r));
}

/* v rounded to `bits` significant bits. */
static float with_bits(double v, int bits)
{
    if (v == 0.0)
        return 0.0f;
    int e;
    double f = frexp(v, &e);
    return (float)ldexp(nearbyint(ldexp(f, bits)), e - bits);
}

/* The contract's scale of candidate i, written out from quant/pn.h. */
static double contract_scale(const pn_params *p, double sigma, double amax, int i)
{
    double t = sigma * ((double)(50 + 2 * i) / 100.0) * amax / (double)p->z;
    return pn_fp16_to_double(pn_fp16_from_double(t));
}

static void group_stats(const pn_params *p, const float *w, double *amax, double *sigma)
{
    double a = 0.0, mx = -INFINITY, mn = INFINITY;
    for (int e = 0; e < p->group; e++) {
        double v = w[e];
        a = fabs(v) > a ? fabs(v) : a;
        mx = v > mx ? v : mx;
        mn = v < mn ? v : mn;
    }
    *amax = a;
    *sigma = fabs(mn) > mx ? 1.0 : -1.0;
}

/* The 36 error sums as the contract defines them (INFINITY where a
 * candidate is skipped), written out again here to classify generated
 * groups; nothing under test computes them. */
static void contract_errors(const pn_params *p, const float *w, double *err, double *s)
{
    double amax, sigma;
    group_stats(p, w, &amax, &sigma);
    const int z = p->z;
    for (int i = 0; i < PN_N_CANDIDATES; i++) {
        s[i] = amax == 0.0 ? 0.0 : contract_scale(p, sigma, amax, i);
        err[i] = INFINITY;
        if (s[i] == 0.0 || !isfinite(s[i]))
            continue;
        double sum = 0.0;
        for (int e = 0; e < p->group; e++) {
            double n = rint((double)w[e] / s[i]) + z;
            n = n < 0.0 ? 0.0 : (n > 2.0 * z - 1.0 ? 2.0 * z - 1.0 : n);
            double d = (double)w[e] - s[i] * (n - z);
            sum = sum + d * d;
        }
        err[i] = sum;
    }
}

/* 0: no near tie; 1: two candidates with different scales share the
 * smallest error exactly; 2: the smallest two errors of different scales are
 * 1 to 4 ulps apart. */
static int tie_class(const pn_params *p, const float *w)
{
    double err[PN_N_CANDIDATES], s[PN_N_CANDIDATES];
    contract_errors(p, w, err, s);
    int b = -1;
    for (int i = 0; i < PN_N_CANDIDATES; i++)
        if (isfinite(err[i]) && (b < 0 || err[i] <= err[b]))
            b = i;
    if (b < 0 || err[b] == 0.0)
        return 0;
    double second = INFINITY;
    for (int i = 0; i < PN_N_CANDIDATES; i++)
        if (isfinite(err[i]) && s[i] != s[b] && err[i] < second)
            second = err[i];
    if (second == err[b])
        return 1;
    double x = err[b];
    for (int k = 1; k <= 4; k++) {
        x = nextafter(x, INFINITY);
        if (second == x)
            return 2;
    }
    return 0;
}

static void gen_random(tu_rng *r, const pn_params *p, float *w)
{
    const double scale = log_uniform(r, 1e-6, 1e3);
    for (int e = 0; e < p->group; e++)
        w[e] = (float)(scale * tu_rng_gauss(r));
}

static void gen_heavy(tu_rng *r, const pn_params *p, float *w)
{
    const double scale = log_uniform(r, 1e-6, 1e2);
    for (int e = 0; e < p->group; e++) {
        /* Student-t with 1 or 2 degrees of freedom: a few large weights */
        double g = tu_rng_gauss(r), c = tu_rng_gauss(r);
        w[e] = (float)(scale * (pick(r, 2)
                                    ? g / (fabs(c) + 1e-3)
                                    : g / sqrt(0.5 * (c * c + pow(tu_rng_gauss(r), 2)) + 1e-6)));
    }
}

/* Zeros, float subnormals, amax at the fp16 overflow and underflow edges of
 * the candidate scales, one outlier, constant groups, non-finite weights. */
static void gen_edge(tu_rng *r, const pn_params *p, float *w)
{
    const int G = p->group;
    gen_random(r, p, w);
    switch (pick(r, 8)) {
    case 0: /* signed zeros, sometimes one value */
        for (int e = 0; e < G; e++)
            w[e] = pick(r, 2) ? 0.0f : -0.0f;
        if (pick(r, 2))
            w[pick(r, G)] = (float)log_uniform(r, 1e-30, 1e4);
        break;
    case 1: /* float subnormals among zeros */
        for (int e = 0; e < G; e++)
            w[e] = pick(r, 3) ? (float)(0x1p-140 * tu_rng_gauss(r)) : 0.0f;
        break;
    case 2: { /* amax within a few ulps of 65520 * z / m: scales overflow */
        float edge = (float)(65520.0 * p->z / ((50 + 2 * pick(r, PN_N_CANDIDATES)) / 100.0));
        for (int k = pick(r, 7) - 3; k != 0; k += k > 0 ? -1 : 1)
            edge = nextafterf(edge, k > 0 ? INFINITY : 0.0f);
        for (int e = 0; e < G; e++)
            w[e] = (float)(0.4 * edge * tanh(tu_rng_gauss(r)));
        w[pick(r, G)] = pick(r, 2) ? edge : -edge;
        break;
    }
    case 3: { /* amax where scales are fp16 subnormals or underflow to 0 */
        double a =
            (1 + pick(r, 40)) * 0x1p-25 * p->z / ((50 + 2 * pick(r, PN_N_CANDIDATES)) / 100.0);
        for (int e = 0; e < G; e++)
            w[e] = (float)(a * 0.5 * tanh(tu_rng_gauss(r)));
        w[pick(r, G)] = (float)(pick(r, 2) ? a : -a);
        break;
    }
    case 4: /* one outlier */ w[pick(r, G)] *= (float)log_uniform(r, 10.0, 1e4); break;
    case 5: { /* constant, sometimes with few significant bits */
        float v = pick(r, 2) ? with_bits(w[0], 1 + pick(r, 4)) : w[0];
        for (int e = 0; e < G; e++)
            w[e] = v;
        break;
    }
    case 6: /* huge weights: every scale overflows */
        for (int e = 0; e < G; e++)
            w[e] = (float)(1e30 * tu_rng_gauss(r));
        break;
    default: { /* NaN or infinity somewhere */
        const float bad[] = { NAN, -NAN, INFINITY, -INFINITY };
        w[pick(r, G)] = bad[pick(r, 4)];
        break;
    }
    }
}

/* Candidates i < j = i + 1 from the contract's scales for amax A: A and
 * B = z(|s_i| + |s_j|) - A both take code -z under both scales, and
 * (A - z s)^2 + (B - z s)^2 is a parabola in s with its axis half-way
 * between s_i and s_j, so the two candidates pay the same; pairs k s_i,
 * k s_j cost k^2 (s_j - s_i)^2 under each. Then, often, a few tiny weights
 * whose terms round differently in the two running sums: exact ties,
 * last-bit differences, and either way round. */
static void gen_tie(tu_rng *r, const pn_params *p, float *w)
{
    const int G = p->group, z = p->z;
    for (;;) {
        memset(w, 0, (size_t)G * sizeof(float));
        const double A = (double)with_bits(log_uniform(r, 1e-3, 1e3), 8);
        const double sign = pick(r, 2) ? 1.0 : -1.0, sigma = -sign;
        const int i = 18 + pick(r, 10);
        const double si = fabs(contract_scale(p, sigma, A, i));
        const double sj = fabs(contract_scale(p, sigma, A, i + 1));
        const double B = z * (si + sj) - A;
        if (!(B > 0.0 && B < A) || (double)(float)B != B)
            continue;
        const int ea = pick(r, G);
        const int eb = (ea + 1 + pick(r, G - 1)) % G;
        w[ea] = (float)(sign * A);
        w[eb] = (float)(sign * B);
        for (int q = pick(r, 10); q > 0; q--) {
            const int k = pick(r, 2 * z - 3) - (z - 2);
            const int e1 = pick(r, G), e2 = pick(r, G);
            if (e1 == ea || e1 == eb || e2 == ea || e2 == eb || e1 == e2)
                continue;
            w[e1] = (float)(k * si);
            w[e2] = (float)(k * sj);
        }
        for (int q = pick(r, 4); q > 0; q--) {
            const int e = pick(r, G);
            if (e != ea && e != eb)
                w[e] = (float)(ldexp(A, -(18 + pick(r, 20))) * (1.0 + tu_rng_uniform(r)) *
                               (pick(r, 2) ? 1.0 : -1.0));
        }
        return;
    }
}

static void gen_group(int kind, tu_rng *r, const pn_params *p, float *w)
{
    switch (kind) {
    case KIND_RANDOM: gen_random(r, p, w); break;
    case KIND_HEAVY: gen_heavy(r, p, w); break;
    case KIND_EDGE: gen_edge(r, p, w); break;
    default: gen_tie(r, p, w); break;
    }
}

static float *make_groups(int kind, int type, int64_t count, uint64_t seed)
{
    const pn_params *p = pn_params_get(type);
    float *w = malloc((size_t)(count * p->group) * sizeof(float));
    cr_assert_not_null(w);
    tu_rng r = { seed ^ ((uint64_t)type << 32) ^ ((uint64_t)kind << 44) };
    for (int64_t g = 0; g < count; g++)
        gen_group(kind, &r, p, w + g * p->group);
    return w;
}

/* The groups one by one, then as one row, through `path` and the reference:
 * status, error column, bytes and the per-group sums must agree bit for
 * bit. Returns the number of disagreements (the first is logged). */
static int disagreements(int path, int type, const float *w, int64_t count)
{
    const pn_params *p = pn_params_get(type);
    const int G = p->group;
    const char *name = pn_type_traits_get(type)->name;
    int bad = 0;
    for (int64_t g = 0; g < count; g++) {
        uint8_t ref[PN_BLOCK_BYTES], got[PN_BLOCK_BYTES];
        int64_t col_ref = -7, col = -7;
        double err_ref = -1.0, norm_ref = -1.0, err = -2.0, norm = -2.0;
        memset(ref, 0xa5, sizeof ref);
        memset(got, 0x5a, sizeof got);
        const float *x = w + g * G;
        pn_status st_ref = pn_quantize_row_ref_sums(type, x, G, ref, &col_ref, &err_ref, &norm_ref);
        pn_status st = pn_quantize_row_path_sums(type, path, x, G, got, &col, &err, &norm);
        bool same = st == st_ref && (st != PN_OK ? col == col_ref
                                                 : memcmp(ref, got, sizeof ref) == 0 &&
                                                       memcmp(&err, &err_ref, sizeof err) == 0 &&
                                                       memcmp(&norm, &norm_ref, sizeof norm) == 0);
        if (!same && bad++ == 0)
            cr_log_error("%s %s group %lld: status %d/%d, column %lld/%lld, d %02x%02x/%02x%02x, "
                         "err %a/%a, norm %a/%a (path/reference)",
                         name, pn_path_name(path), (long long)g, (int)st, (int)st_ref,
                         (long long)col, (long long)col_ref, got[1], got[0], ref[1], ref[0], err,
                         err_ref, norm, norm_ref);
    }
    uint8_t *row_ref = malloc((size_t)count * PN_BLOCK_BYTES);
    uint8_t *row_got = malloc((size_t)count * PN_BLOCK_BYTES + 3);
    cr_assert(row_ref && row_got);
    int64_t col_ref = -7, col = -7;
    pn_status st_ref = pn_quantize_row_ref(type, w, count * G, row_ref, &col_ref);
    /* at an odd address: blocks may start at any byte */
    pn_status st = pn_quantize_row_path(type, path, w, count * G, row_got + 3, &col);
    if (st != st_ref ||
        (st == PN_OK ? memcmp(row_ref, row_got + 3, (size_t)count * PN_BLOCK_BYTES) != 0
                     : col != col_ref)) {
        cr_log_error("%s %s: the row of %lld groups differs", name, pn_path_name(path),
                     (long long)count);
        bad++;
    }
    { /* the per-group sums of a whole row (groups hand sums on to the next) */
        double *e_ref = malloc((size_t)count * sizeof(double)),
               *n_ref = malloc((size_t)count * sizeof(double));
        double *e_got = malloc((size_t)count * sizeof(double)),
               *n_got = malloc((size_t)count * sizeof(double));
        cr_assert(e_ref && n_ref && e_got && n_got);
        st_ref = pn_quantize_row_ref_sums(type, w, count * G, row_ref, &col_ref, e_ref, n_ref);
        st = pn_quantize_row_path_sums(type, path, w, count * G, row_got, &col, e_got, n_got);
        if (st != st_ref ||
            (st == PN_OK && (memcmp(row_ref, row_got, (size_t)count * PN_BLOCK_BYTES) != 0 ||
                             memcmp(e_ref, e_got, (size_t)count * sizeof(double)) != 0 ||
                             memcmp(n_ref, n_got, (size_t)count * sizeof(double)) != 0))) {
            cr_log_error("%s %s: the sums of the row of %lld groups differ", name,
                         pn_path_name(path), (long long)count);
            bad++;
        }
        free(e_ref);
        free(n_ref);
        free(e_got);
        free(n_got);
    }
    free(row_ref);
    free(row_got);
    return bad;
}

#define SKIP_UNLESS_AVAILABLE(path)                                                                \
    do {                                                                                           \
        if (!pn_path_available(path))                                                              \
            cr_skip_test("path %s is not supported by this CPU: not tested here",                  \
                         pn_path_name(path));                                                      \
    } while (0)

/* Every kind of group, both types, `count` groups of each. */
static void check_path(int path, int kind, int64_t count)
{
    SKIP_UNLESS_AVAILABLE(path);
    for (int t = 0; t < 2; t++) {
        const int type = t ? PN_TYPE_PN4T : PN_TYPE_PN3T;
        float *w = make_groups(kind, type, count, 77);
        int bad = disagreements(path, type, w, count);
        cr_expect_eq(bad, 0, "%d of %lld %s %s groups differ from the reference on path %s", bad,
                     (long long)count, kind_names[kind], pn_type_traits_get(type)->name,
                     pn_path_name(path));
        free(w);
    }
}

/* The golden blocks of the independent implementation (tests/data/golden,
 * SOURCE.md): 128 groups of each type. */
#define GOLDEN_GROUPS 128

static void *read_golden(const char *type_name, const char *suffix, size_t want)
{
    char path[4096];
    snprintf(path, sizeof path, PN_TEST_DATA "/golden/%s.%s", type_name, suffix);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    void *p = malloc(want + 1);
    cr_assert_not_null(p);
    size_t got = fread(p, 1, want + 1, f);
    fclose(f);
    cr_assert_eq(got, want, "%s holds %zu bytes, expected %zu", path, got, want);
    return p;
}

ParameterizedTestParameters(pn_search,
                            every_path_gives_the_golden_blocks_of_the_independent_implementation)
{
    static int paths[] = { PN_PATH_REF, PN_PATH_SCALAR_FAST, PN_PATH_AVX2, PN_PATH_AVX512 };
    return cr_make_param_array(int, paths, sizeof paths / sizeof paths[0]);
}
/* The reference path (and every other) against bytes this code did not make:
 * the one check of PN_PATH_REF that does not compare it with itself. */
ParameterizedTest(int *path, pn_search,
                  every_path_gives_the_golden_blocks_of_the_independent_implementation)
{
    SKIP_UNLESS_AVAILABLE(*path);
    for (int t = 0; t < 2; t++) {
        const int type = t ? PN_TYPE_PN4T : PN_TYPE_PN3T;
        const char *name = pn_type_traits_get(type)->name;
        const int G = pn_params_get(type)->group;
        float *in = read_golden(name, "in.f32", (size_t)GOLDEN_GROUPS * G * sizeof(float));
        uint8_t *want = read_golden(name, "out.bin", (size_t)GOLDEN_GROUPS * PN_BLOCK_BYTES);
        uint8_t *got = malloc((size_t)GOLDEN_GROUPS * PN_BLOCK_BYTES);
        cr_assert_not_null(got);
        int64_t col = -1;
        pn_status st = pn_quantize_row_path(type, *path, in, (int64_t)GOLDEN_GROUPS * G, got, &col);
        cr_assert_eq(st, PN_OK, "%s on path %s: %s", name, pn_path_name(*path), pn_strerror(st));
        for (int g = 0; g < GOLDEN_GROUPS; g++)
            cr_expect_eq(
                memcmp(got + g * PN_BLOCK_BYTES, want + g * PN_BLOCK_BYTES, PN_BLOCK_BYTES), 0,
                "%s group %d on path %s differs from the golden block", name, g,
                pn_path_name(*path));
        free(in);
        free(want);
        free(got);
    }
}

Test(pn_search, the_scalar_path_equals_the_reference_on_every_kind_of_group)
{
    for (int k = 0; k < KIND_COUNT; k++)
        check_path(PN_PATH_SCALAR_FAST, k, 5000);
}

Test(pn_search, the_avx2_search_equals_the_reference_on_random_groups)
{
    check_path(PN_PATH_AVX2, KIND_RANDOM, 40000);
}
Test(pn_search, the_avx2_search_equals_the_reference_on_heavy_tailed_groups)
{
    check_path(PN_PATH_AVX2, KIND_HEAVY, 40000);
}
Test(pn_search, the_avx2_search_equals_the_reference_on_edge_groups)
{
    check_path(PN_PATH_AVX2, KIND_EDGE, 40000);
}
Test(pn_search, the_avx2_search_equals_the_reference_on_tie_prone_groups)
{
    check_path(PN_PATH_AVX2, KIND_TIE, 40000);
}

Test(pn_search, the_avx512_search_equals_the_reference_on_random_groups)
{
    check_path(PN_PATH_AVX512, KIND_RANDOM, 40000);
}
Test(pn_search, the_avx512_search_equals_the_reference_on_heavy_tailed_groups)
{
    check_path(PN_PATH_AVX512, KIND_HEAVY, 40000);
}
Test(pn_search, the_avx512_search_equals_the_reference_on_edge_groups)
{
    check_path(PN_PATH_AVX512, KIND_EDGE, 40000);
}
Test(pn_search, the_avx512_search_equals_the_reference_on_tie_prone_groups)
{
    check_path(PN_PATH_AVX512, KIND_TIE, 40000);
}

Test(pn_search, the_tie_prone_groups_hold_exact_ties_and_last_bit_differences)
{
    for (int t = 0; t < 2; t++) {
        const int type = t ? PN_TYPE_PN4T : PN_TYPE_PN3T;
        const pn_params *p = pn_params_get(type);
        const int64_t count = 4000;
        float *w = make_groups(KIND_TIE, type, count, 77);
        int64_t cls[3] = { 0, 0, 0 };
        for (int64_t g = 0; g < count; g++)
            cls[tie_class(p, w + g * p->group)]++;
        cr_log_info("%s: %lld exact ties, %lld 1-4 ulp apart, %lld neither, of %lld",
                    pn_type_traits_get(type)->name, (long long)cls[1], (long long)cls[2],
                    (long long)cls[0], (long long)count);
        cr_expect_geq(cls[1], count / 20, "only %lld exact ties of %lld", (long long)cls[1],
                      (long long)count);
        cr_expect_geq(cls[2], count / 200, "only %lld last-bit differences of %lld",
                      (long long)cls[2], (long long)count);
        free(w);
    }
}

/* A million random groups of each type, mixed kinds, on the best path this
 * CPU has (bench_pn --verify runs the same comparison at any size). */
Test(pn_search, a_million_mixed_groups_of_each_type_equal_the_reference_on_the_best_path)
{
    const int path = pn_cpu_path_best();
    const int64_t count = 1000000, chunk = 10000;
    for (int t = 0; t < 2; t++) {
        const int type = t ? PN_TYPE_PN4T : PN_TYPE_PN3T;
        const pn_params *p = pn_params_get(type);
        float *w = malloc((size_t)(chunk * p->group) * sizeof(float));
        uint8_t *ref = malloc((size_t)chunk * PN_BLOCK_BYTES);
        uint8_t *got = malloc((size_t)chunk * PN_BLOCK_BYTES);
        cr_assert(w && ref && got);
        tu_rng r = { 4242 + (uint64_t)type };
        int64_t bad = 0;
        for (int64_t c0 = 0; c0 < count; c0 += chunk) {
            for (int64_t g = 0; g < chunk; g++) {
                /* mostly Gaussian, as real weights; every kind present */
                int roll = pick(&r, 16);
                gen_group(roll < 10   ? KIND_RANDOM
                          : roll < 12 ? KIND_HEAVY
                          : roll < 14 ? KIND_EDGE
                                      : KIND_TIE,
                          &r, p, w + g * p->group);
            }
            for (int64_t g = 0; g < chunk; g++) {
                int64_t col_ref = -7, col = -7;
                const float *x = w + g * p->group;
                pn_status a =
                    pn_quantize_row_ref(type, x, p->group, ref + g * PN_BLOCK_BYTES, &col_ref);
                pn_status b =
                    pn_quantize_row_path(type, path, x, p->group, got + g * PN_BLOCK_BYTES, &col);
                if (a != b || (a == PN_OK ? memcmp(ref + g * PN_BLOCK_BYTES,
                                                   got + g * PN_BLOCK_BYTES, PN_BLOCK_BYTES) != 0
                                          : col != col_ref))
                    bad++;
            }
        }
        cr_expect_eq(bad, 0, "%lld of %lld %s groups differ on path %s", (long long)bad,
                     (long long)count, pn_type_traits_get(type)->name, pn_path_name(path));
        free(w);
        free(ref);
        free(got);
    }
}
