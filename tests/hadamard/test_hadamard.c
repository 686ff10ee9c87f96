/* Pins hadamard/: the block size rule, the golden rotations byte for byte
 * (reference and dispatching fast path), agreement with an explicit Sylvester
 * matrix product, and that the rotation is its own inverse. Golden data:
 * tests/data/golden/hadamard.* (documented in tests/data/golden/SOURCE.md). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hadamard/hadamard.h"
#include "test_util.h"

/* --- block size ---------------------------------------------------------- */

typedef struct block_size_case {
    int64_t K;
    int cap;
    int B;
} block_size_case;

ParameterizedTestParameters(hadamard,
                            block_size_is_the_largest_power_of_two_dividing_k_up_to_the_cap)
{
    static block_size_case cases[] = {
        /* the Qwen3.8-27B row lengths */
        { 5120, 1024, 1024 },
        { 6144, 1024, 1024 },
        { 17408, 1024, 1024 },
        /* the golden files and the tiny model */
        { 320, 1024, 64 },
        { 1280, 1024, 256 },
        { 640, 1024, 128 },
        { 96, 1024, 32 },
        { 64, 1024, 64 },
        { 5120, 512, 512 },
        /* odd K: only B = 1 divides it */
        { 1, 1024, 1 },
        { 7, 1024, 1 },
        { 5121, 1024, 1 },
        { 4097, 1024, 1 },
        /* the cap binds */
        { 2048, 1024, 1024 },
        { 1 << 20, 1024, 1024 },
        { 4096, 4096, 4096 },
        { 8192, 4096, 4096 },
        { 1024, 1, 1 },
        { 1024, 2, 2 },
        { 6, 1024, 2 },
        { 12, 2, 2 },
    };
    return cr_make_param_array(block_size_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(block_size_case *c, hadamard,
                  block_size_is_the_largest_power_of_two_dividing_k_up_to_the_cap)
{
    int B = pn_hadamard_block_size(c->K, c->cap);
    cr_assert_eq(B, c->B, "K = %lld, cap = %d: B = %d, expected %d", (long long)c->K, c->cap, B,
                 c->B);
}

ParameterizedTestParameters(hadamard, an_invalid_cap_or_row_length_gives_block_size_0)
{
    static block_size_case cases[] = {
        { 5120, 0, 0 },    { 5120, 3, 0 },    { 5120, 8192, 0 }, { 5120, -4, 0 },
        { 5120, 1000, 0 }, { 5120, 1536, 0 }, { 0, 1024, 0 },    { -64, 1024, 0 },
    };
    return cr_make_param_array(block_size_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(block_size_case *c, hadamard, an_invalid_cap_or_row_length_gives_block_size_0)
{
    int B = pn_hadamard_block_size(c->K, c->cap);
    cr_assert_eq(B, 0, "K = %lld, cap = %d: B = %d, expected 0", (long long)c->K, c->cap, B);
}

Test(hadamard, is_pow2_accepts_exactly_the_powers_of_two)
{
    for (int64_t v = -5; v <= 5000; v++) {
        bool want = false;
        for (int64_t p = 1; p <= 8192; p *= 2)
            if (v == p)
                want = true;
        cr_assert_eq(pn_is_pow2(v), want, "pn_is_pow2(%lld)", (long long)v);
    }
    cr_assert(pn_is_pow2((int64_t)1 << 62));
    cr_assert(!pn_is_pow2(INT64_MIN));
}

/* --- golden files ---------------------------------------------------------- */

typedef struct hadamard_file {
    int tag; /* index into hadamard_file_tags (no pointers in parameters) */
    int64_t K;
    int cap;
    int B;
    int rows;
} hadamard_file;

static const char *const hadamard_file_tags[] = { "K5120", "K6144", "K17408", "K1280",
                                                  "K320",  "K640",  "K96",    "K5120.cap512" };

static hadamard_file golden_files[] = {
    { 0, 5120, 1024, 1024, 8 }, { 1, 6144, 1024, 1024, 8 }, { 2, 17408, 1024, 1024, 8 },
    { 3, 1280, 1024, 256, 12 }, { 4, 320, 1024, 64, 12 },   { 5, 640, 1024, 128, 12 },
    { 6, 96, 1024, 32, 12 },    { 7, 5120, 512, 512, 9 },
};

static float *load_hadamard(const hadamard_file *f, const char *kind)
{
    char path[512];
    snprintf(path, sizeof path, PN_TEST_DATA "/golden/hadamard.%s.%s.f32",
             hadamard_file_tags[f->tag], kind);
    size_t size = 0;
    float *x = tu_read_file(path, &size);
    cr_assert_eq(size, (size_t)f->rows * (size_t)f->K * sizeof(float), "%s has %zu bytes", path,
                 size);
    return x;
}

typedef void (*rotate_fn)(float *x, int64_t K, int B);

/* Rotates every row of the file's input with `rotate` and compares the bits
 * with the file's output, naming the first differing row and column. */
static void check_golden_file(const hadamard_file *f, rotate_fn rotate, const char *which)
{
    const char *tag = hadamard_file_tags[f->tag];
    int B = pn_hadamard_block_size(f->K, f->cap);
    cr_assert_eq(B, f->B, "%s: block size %d, expected %d", tag, B, f->B);
    float *in = load_hadamard(f, "in"), *out = load_hadamard(f, "out");
    int bad_rows = 0;
    for (int r = 0; r < f->rows; r++) {
        float *row = in + (int64_t)r * f->K;
        const float *want = out + (int64_t)r * f->K;
        rotate(row, f->K, B);
        if (memcmp(row, want, (size_t)f->K * sizeof(float)) != 0) {
            for (int64_t j = 0; j < f->K; j++) {
                if (memcmp(&row[j], &want[j], sizeof(float)) != 0) {
                    cr_log_error("%s (%s): row %d column %lld is %a, expected %a", tag, which, r,
                                 (long long)j, row[j], want[j]);
                    break;
                }
            }
            bad_rows++;
        }
    }
    cr_assert_eq(bad_rows, 0, "%s (%s): %d of %d rows differ from the golden rotation", tag, which,
                 bad_rows, f->rows);
    free(in);
    free(out);
}

ParameterizedTestParameters(hadamard, the_reference_rotation_matches_every_golden_file)
{
    return cr_make_param_array(hadamard_file, golden_files,
                               sizeof golden_files / sizeof golden_files[0]);
}

ParameterizedTest(hadamard_file *f, hadamard, the_reference_rotation_matches_every_golden_file)
{
    check_golden_file(f, pn_hadamard_rotate_row_ref, "reference");
}

ParameterizedTestParameters(hadamard, the_dispatching_rotation_matches_every_golden_file)
{
    return cr_make_param_array(hadamard_file, golden_files,
                               sizeof golden_files / sizeof golden_files[0]);
}

ParameterizedTest(hadamard_file *f, hadamard, the_dispatching_rotation_matches_every_golden_file)
{
    check_golden_file(f, pn_hadamard_rotate_row, "fast path");
}

/* --- fast path on random rows ---------------------------------------------- */

Test(hadamard, the_dispatching_rotation_equals_the_reference_for_every_block_size)
{
    tu_rng rng = { 7 };
    for (int B = 1; B <= PN_HADAMARD_MAX_BLOCK; B *= 2) {
        for (int blocks = 1; blocks <= 3; blocks++) {
            int64_t K = (int64_t)B * blocks;
            float *a = malloc((size_t)K * sizeof(float) + 4),
                  *b = malloc((size_t)K * sizeof(float));
            cr_assert(a && b);
            for (int64_t j = 0; j < K; j++)
                a[j] = (float)(tu_rng_gauss(&rng) * ldexp(1.0, (int)(tu_rng_u64(&rng) % 40) - 20));
            memcpy(b, a, (size_t)K * sizeof(float));
            pn_hadamard_rotate_row_ref(a, K, B);
            pn_hadamard_rotate_row(b, K, B);
            cr_assert_eq(memcmp(a, b, (size_t)K * sizeof(float)), 0,
                         "fast path differs from the reference for B = %d, K = %lld", B,
                         (long long)K);
            free(a);
            free(b);
        }
    }
}

Test(hadamard, the_dispatching_rotation_works_on_an_unaligned_row)
{
    enum { K = 2048, B = 1024 };
    char *raw = malloc(K * sizeof(float) + 16);
    float *ref = malloc(K * sizeof(float));
    cr_assert(raw && ref);
    tu_rng rng = { 99 };
    for (int j = 0; j < K; j++)
        ref[j] = (float)tu_rng_gauss(&rng);
    /* A float* at a 4-byte but not 16/32/64-byte boundary, as in a row of an
     * odd-length tensor; SIMD code must not assume more. */
    for (int off = 4; off <= 12; off += 4) {
        float *row = (float *)(raw + off);
        memcpy(row, ref, K * sizeof(float));
        float want[K];
        memcpy(want, ref, sizeof want);
        pn_hadamard_rotate_row_ref(want, K, B);
        pn_hadamard_rotate_row(row, K, B);
        cr_assert_eq(memcmp(row, want, sizeof want), 0, "offset %d differs", off);
    }
    free(raw);
    free(ref);
}

/* --- the mathematics --------------------------------------------------------- */

static int sylvester(int i, int j)
{
    return (__builtin_popcount((unsigned)(i & j)) & 1) ? -1 : 1;
}

ParameterizedTestParameters(hadamard, equals_the_sylvester_matrix_product_for_small_blocks)
{
    static int sizes[] = { 1, 2, 4, 8, 16, 32 };
    return cr_make_param_array(int, sizes, sizeof sizes / sizeof sizes[0]);
}

ParameterizedTest(int *pB, hadamard, equals_the_sylvester_matrix_product_for_small_blocks)
{
    const int B = *pB, blocks = 3, K = B * blocks;
    float x[96], y[96];
    tu_rng rng = { (uint64_t)B * 1000003u };

    /* Integer inputs: every butterfly sum is exact in double, so the result
     * must be float(S * (1/sqrt(B))) exactly, S the exact integer product. */
    for (int trial = 0; trial < 50; trial++) {
        for (int j = 0; j < K; j++)
            x[j] = (float)((int64_t)(tu_rng_u64(&rng) % 2000001) - 1000000);
        memcpy(y, x, sizeof(float) * (size_t)K);
        pn_hadamard_rotate_row_ref(y, K, B);
        for (int b = 0; b < blocks; b++) {
            for (int i = 0; i < B; i++) {
                int64_t S = 0;
                for (int j = 0; j < B; j++)
                    S += sylvester(i, j) * (int64_t)x[b * B + j];
                float want = (float)((double)S * (1.0 / sqrt((double)B)));
                cr_assert_eq(y[b * B + i], want, "B = %d block %d output %d: %a, expected %a", B, b,
                             i, y[b * B + i], want);
            }
        }
    }

    /* Gaussian inputs: within one float rounding of the long double product
     * plus the double sums' own (far smaller) error. */
    for (int trial = 0; trial < 50; trial++) {
        for (int j = 0; j < K; j++)
            x[j] = (float)tu_rng_gauss(&rng);
        memcpy(y, x, sizeof(float) * (size_t)K);
        pn_hadamard_rotate_row_ref(y, K, B);
        for (int b = 0; b < blocks; b++) {
            long double l1 = 0;
            for (int j = 0; j < B; j++)
                l1 += fabsl((long double)x[b * B + j]);
            for (int i = 0; i < B; i++) {
                long double S = 0;
                for (int j = 0; j < B; j++)
                    S += (long double)sylvester(i, j) * (long double)x[b * B + j];
                long double want = S / sqrtl((long double)B);
                long double tol = fabsl(want) * 0x1p-24L + l1 * 0x1p-45L;
                cr_assert_leq(fabsl((long double)y[b * B + i] - want), tol,
                              "B = %d block %d output %d: %a vs %La", B, b, i, y[b * B + i], want);
            }
        }
    }
}

Test(hadamard, a_block_size_of_1_leaves_the_row_unchanged)
{
    float x[37], y[37];
    tu_rng rng = { 5 };
    for (int j = 0; j < 37; j++)
        x[j] = (float)tu_rng_gauss(&rng);
    x[3] = -0.0f;
    x[4] = 0x1p-149f;
    memcpy(y, x, sizeof x);
    pn_hadamard_rotate_row_ref(y, 37, 1);
    cr_assert_eq(memcmp(x, y, sizeof x), 0);
}

Test(hadamard, an_impulse_becomes_a_flat_block_of_one_over_sqrt_b)
{
    enum { K = 2048, B = 1024 };
    float *x = calloc(K, sizeof(float));
    cr_assert_not_null(x);
    x[B] = 1.0f; /* first element of the second block */
    pn_hadamard_rotate_row_ref(x, K, B);
    for (int j = 0; j < B; j++)
        cr_assert_eq(x[j], 0.0f, "the first block must stay zero");
    for (int j = B; j < K; j++)
        cr_assert_eq(x[j], 0.03125f, "column %d: %a", j, x[j]); /* 1/sqrt(1024) */
    free(x);
}

typedef struct involution_case {
    int64_t K;
    int B;
} involution_case;

ParameterizedTestParameters(hadamard, rotating_twice_gives_back_the_input)
{
    static involution_case cases[] = { { 5120, 1024 }, { 6144, 1024 }, { 17408, 1024 },
                                       { 5120, 512 },  { 1280, 256 },  { 320, 64 },
                                       { 96, 32 },     { 40, 8 },      { 4096, 4096 },
                                       { 6, 2 } };
    return cr_make_param_array(involution_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(involution_case *c, hadamard, rotating_twice_gives_back_the_input)
{
    float *x = malloc((size_t)c->K * sizeof(float)), *y = malloc((size_t)c->K * sizeof(float));
    cr_assert(x && y);
    tu_rng rng = { (uint64_t)c->K * 31 + (uint64_t)c->B };
    for (int row = 0; row < 4; row++) {
        double amax = 0;
        for (int64_t j = 0; j < c->K; j++) {
            /* Gaussian rows, one of them heavy-tailed: a Cauchy-like ratio. */
            double v = row == 3 ? tu_rng_gauss(&rng) / (fabs(tu_rng_gauss(&rng)) + 1e-3)
                                : tu_rng_gauss(&rng) * 0.02;
            x[j] = (float)v;
            if (fabs((double)x[j]) > amax)
                amax = fabs((double)x[j]);
        }
        memcpy(y, x, (size_t)c->K * sizeof(float));
        pn_hadamard_rotate_row(y, c->K, c->B);
        pn_hadamard_rotate_row(y, c->K, c->B);
        double worst = 0;
        for (int64_t j = 0; j < c->K; j++)
            worst = fmax(worst, fabs((double)y[j] - (double)x[j]));
        cr_assert_leq(worst, 1e-6 * amax, "K = %lld, B = %d, row %d: max error %g, max |x| %g",
                      (long long)c->K, c->B, row, worst, amax);
    }
    free(x);
    free(y);
}

Test(hadamard, preserves_the_euclidean_norm_of_each_block)
{
    enum { K = 5120, B = 1024 };
    float *x = malloc(K * sizeof(float)), *y = malloc(K * sizeof(float));
    cr_assert(x && y);
    tu_rng rng = { 11 };
    for (int j = 0; j < K; j++)
        x[j] = (float)(tu_rng_gauss(&rng) * (1 + j % 7));
    memcpy(y, x, K * sizeof(float));
    pn_hadamard_rotate_row_ref(y, K, B);
    for (int b = 0; b < K / B; b++) {
        double nx = 0, ny = 0;
        for (int j = 0; j < B; j++) {
            nx += (double)x[b * B + j] * x[b * B + j];
            ny += (double)y[b * B + j] * y[b * B + j];
        }
        cr_assert_leq(fabs(ny - nx), 1e-6 * nx, "block %d: |Hx|^2 = %g, |x|^2 = %g", b, ny, nx);
    }
    free(x);
    free(y);
}
