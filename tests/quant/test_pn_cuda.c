/* Pins the CUDA scale search (quant/pn_cuda.h): byte equality with the
 * scalar reference (pn_quantize_row_ref, row by row) on random, heavy-tailed,
 * structured and edge rows of every shape the project uses, on every golden
 * group and refusal, the error reported (lowest row, then column), the
 * asynchronous slots against the synchronous call, chunking, argument
 * checks, and the device fp16 rounding against pn_fp16_from_double.
 *
 * Every data test runs twice: suite pn_cuda_gpu on GPU 0 (skipped with the
 * reason when there is no usable GPU or no CUDA build), and suite
 * pn_cuda_emulator on the host emulator, which runs the kernel's own code
 * phase by phase (skipped with the reason in a build without CUDA). */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/fp16.h"
#include "quant/pn.h"
#include "quant/pn_cuda.h"
#include "quant/types.h"
#include "test_util.h"

#define STUB_MSG "this build has no CUDA backend (configure with -DPN_CUDA=ON and a CUDA toolkit)"

/* --- backends ------------------------------------------------------------------ */

typedef enum backend { BACKEND_GPU, BACKEND_EMULATOR } backend;

static pn_cuda_ctx *open_backend(backend b)
{
    pn_error err;
    pn_cuda_ctx *ctx = NULL;
    if (b == BACKEND_GPU) {
        if (pn_cuda_open(0, &ctx, &err) != PN_OK)
            cr_skip("%s%s", strncmp(err.msg, "no CUDA device", 14) ? "no CUDA device: " : "",
                    err.msg);
    } else {
        if (pn_cuda_open_emulator(&ctx, &err) != PN_OK)
            cr_skip("no CUDA kernel to emulate: %s", err.msg);
    }
    cr_assert_not_null(ctx);
    return ctx;
}

/* Defines the test `name` in both suites; the body gets the open context. */
#define BACKEND_TEST(name)                                                                         \
    static void name##_body(pn_cuda_ctx *ctx);                                                     \
    Test(pn_cuda_gpu, name)                                                                        \
    {                                                                                              \
        pn_cuda_ctx *ctx = open_backend(BACKEND_GPU);                                              \
        name##_body(ctx);                                                                          \
        pn_cuda_close(ctx);                                                                        \
    }                                                                                              \
    Test(pn_cuda_emulator, name)                                                                   \
    {                                                                                              \
        pn_cuda_ctx *ctx = open_backend(BACKEND_EMULATOR);                                         \
        name##_body(ctx);                                                                          \
        pn_cuda_close(ctx);                                                                        \
    }                                                                                              \
    static void name##_body(pn_cuda_ctx *ctx)

/* --- shapes and data --------------------------------------------------------------- */

typedef struct shape {
    int type;
    int64_t K;
} shape;

/* Every (type, K) the project quantizes: K = 320 (tiny model), 1280, 5120,
 * 6144, 17408, each type where its group divides K. */
static const shape SHAPES[] = {
    { PN_TYPE_PN3T, 320 },  { PN_TYPE_PN3T, 1280 }, { PN_TYPE_PN3T, 5120 }, { PN_TYPE_PN4T, 320 },
    { PN_TYPE_PN4T, 1280 }, { PN_TYPE_PN4T, 5120 }, { PN_TYPE_PN4T, 6144 }, { PN_TYPE_PN4T, 17408 },
};
#define N_SHAPES (sizeof SHAPES / sizeof SHAPES[0])

static int group_of(int type)
{
    return type == PN_TYPE_PN3T ? 80 : 64;
}
static int zero_of(int type)
{
    return type == PN_TYPE_PN3T ? 4 : 8;
}
static const char *name_of(int type)
{
    return type == PN_TYPE_PN3T ? "pn3t" : "pn4t";
}

static size_t out_bytes(int type, int64_t n_rows, int64_t K)
{
    return (size_t)(n_rows * (K / group_of(type))) * PN_BLOCK_BYTES;
}

static float *alloc_floats(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    cr_assert_not_null(p);
    return p;
}

static uint8_t *alloc_bytes(size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    cr_assert_not_null(p);
    memset(p, 0xee, n ? n : 1);
    return p;
}

/* --- the reference, row by row ------------------------------------------------------ */

typedef struct result {
    pn_status st;
    int64_t row, col;
} result;

static result ref_rows(int type, const float *x, int64_t n_rows, int64_t K, uint8_t *out)
{
    result r = { PN_OK, -1, -1 };
    const size_t row_out = out_bytes(type, 1, K);
    for (int64_t i = 0; i < n_rows; i++) {
        int64_t col = -1;
        pn_status st = pn_quantize_row_ref(type, x + i * K, K, out + (size_t)i * row_out, &col);
        if (st != PN_OK) {
            r.st = st;
            r.row = i;
            r.col = col;
            return r;
        }
    }
    return r;
}

static result cuda_rows(pn_cuda_ctx *ctx, int type, const float *x, int64_t n_rows, int64_t K,
                        uint8_t *out, pn_error *err)
{
    result r = { PN_OK, -1, -1 };
    r.st = pn_cuda_quantize_rows(ctx, type, x, n_rows, K, out, &r.row, &r.col, err);
    return r;
}

/* Asserts that the CUDA backend gives what the reference gives: the same
 * status, row and column on an error, the same bytes otherwise. */
static void expect_same_as_ref(pn_cuda_ctx *ctx, int type, const float *x, int64_t n_rows,
                               int64_t K, const char *what)
{
    const size_t nb = out_bytes(type, n_rows, K);
    uint8_t *want = alloc_bytes(nb), *got = alloc_bytes(nb);
    memset(got, 0x5a, nb);
    result rr = ref_rows(type, x, n_rows, K, want);
    pn_error err = { 0 };
    result rc = cuda_rows(ctx, type, x, n_rows, K, got, &err);
    cr_assert_eq(rc.st, rr.st, "%s (%s, %lld x %lld) on %s: status %s, the reference says %s (%s)",
                 what, name_of(type), (long long)n_rows, (long long)K, pn_cuda_device_name(ctx),
                 pn_strerror(rc.st), pn_strerror(rr.st), rc.st ? err.msg : "");
    if (rr.st != PN_OK) {
        cr_assert(rc.row == rr.row && rc.col == rr.col,
                  "%s (%s): error at row %lld column %lld, the reference says row %lld column %lld",
                  what, name_of(type), (long long)rc.row, (long long)rc.col, (long long)rr.row,
                  (long long)rr.col);
    } else if (memcmp(got, want, nb) != 0) {
        size_t i = 0;
        while (got[i] == want[i])
            i++;
        const size_t blk = i / PN_BLOCK_BYTES;
        const int64_t gpr = K / group_of(type);
        const uint8_t *g = got + blk * PN_BLOCK_BYTES, *w = want + blk * PN_BLOCK_BYTES;
        cr_assert_fail("%s (%s, K %lld) on %s: row %lld group %lld differs at byte %zu: "
                       "d 0x%02x%02x vs reference 0x%02x%02x, byte 0x%02x vs 0x%02x",
                       what, name_of(type), (long long)K, pn_cuda_device_name(ctx),
                       (long long)(blk / gpr), (long long)(blk % gpr), i % PN_BLOCK_BYTES, g[1],
                       g[0], w[1], w[0], got[i], want[i]);
    }
    free(want);
    free(got);
}

/* --- row generators ------------------------------------------------------------------ */

static float gauss_f(tu_rng *r, double scale)
{
    return (float)(scale * tu_rng_gauss(r));
}

typedef enum row_kind {
    ROW_CAUCHY,
    ROW_T2,
    ROW_OUTLIERS,
    ROW_SPARSE,
    ROW_ALL_POSITIVE,
    ROW_ALL_NEGATIVE,
    ROW_CONSTANT_GROUPS,
    ROW_SIGNED_ZEROS,
    ROW_F32_SUBNORMAL,
    ROW_SUBNORMAL_MIXED,
    ROW_GROUP_SCALES,
    ROW_HALFWAY_GRID,
    ROW_SYMMETRIC,
    ROW_KIND_COUNT
} row_kind;

/* Returns an fp16-representable positive scale near `approx`. */
static double fp16_near(double approx)
{
    return pn_fp16_to_double(pn_fp16_from_double(approx));
}

static void fill_row(tu_rng *r, row_kind kind, int type, float *x, int64_t K)
{
    const int G = group_of(type), z = zero_of(type);
    for (int64_t j = 0; j < K; j++) {
        double v = 0.0;
        switch (kind) {
        case ROW_CAUCHY: v = 0.01 * tu_rng_gauss(r) / (fabs(tu_rng_gauss(r)) + 1e-12); break;
        case ROW_T2: {
            double a = tu_rng_gauss(r), b = tu_rng_gauss(r);
            v = 0.02 * tu_rng_gauss(r) / sqrt((a * a + b * b) / 2.0 + 1e-30);
            break;
        }
        case ROW_OUTLIERS:
            v = 0.02 * tu_rng_gauss(r) * (tu_rng_uniform(r) < 0.01 ? 100.0 : 1.0);
            break;
        case ROW_SPARSE: v = tu_rng_uniform(r) < 0.9 ? 0.0 : 0.02 * tu_rng_gauss(r); break;
        case ROW_ALL_POSITIVE: v = tu_rng_uniform(r) + 1e-3; break;
        case ROW_ALL_NEGATIVE: v = -(tu_rng_uniform(r) + 1e-3); break;
        case ROW_CONSTANT_GROUPS: {
            tu_rng gr = { (uint64_t)(j / G) * 7919u + 17u };
            v = (tu_rng_uniform(&gr) - 0.5) * 6.0;
            break;
        }
        case ROW_SIGNED_ZEROS:
            v = (tu_rng_u64(r) & 1) ? -0.0 : 0.0;
            if ((j / G) % 3 == 1 && j % G == 5)
                v = -0.001; /* a group that is all zeros but one */
            break;
        case ROW_F32_SUBNORMAL: v = 1e-40 * tu_rng_gauss(r); break;
        case ROW_SUBNORMAL_MIXED:
            v = (j % 7 == 3) ? 1e-41 * tu_rng_gauss(r) : 1e-3 * tu_rng_gauss(r);
            break;
        case ROW_GROUP_SCALES: {
            tu_rng gr = { (uint64_t)(j / G) * 104729u + 3u };
            const double lg = -8.0 + 11.0 * tu_rng_uniform(&gr); /* 1e-8 .. 1e3 per group */
            v = pow(10.0, lg) * tu_rng_gauss(r);
            break;
        }
        case ROW_HALFWAY_GRID: {
            /* Weights at (k + 1/2) * s for an fp16 s: the divisions are exact
             * half-integers and rint's ties-to-even decides the codes. */
            tu_rng gr = { (uint64_t)(j / G) * 15485863u + 11u };
            const double s = fp16_near(0.001 + tu_rng_uniform(&gr));
            const int k = (int)(tu_rng_u64(r) % (uint64_t)(2 * z)) - z;
            v = ((double)k + 0.5) * s;
            break;
        }
        case ROW_SYMMETRIC: v = 0.05 * tu_rng_gauss(r); break;
        default: break;
        }
        x[j] = (float)v;
    }
    if (kind == ROW_SYMMETRIC) {
        /* |min| == max in every group: sigma must be -1. */
        for (int64_t g0 = 0; g0 < K; g0 += G) {
            float mx = 0.0f;
            int64_t at = g0;
            for (int e = 0; e < G; e++)
                if (fabsf(x[g0 + e]) > mx) {
                    mx = fabsf(x[g0 + e]);
                    at = g0 + e;
                }
            x[at] = mx;
            x[g0 + (at - g0 + 1) % G] = -mx;
        }
    }
}

/* --- tests without a GPU: the build and the refusals ---------------------------------- */

Test(pn_cuda, the_build_flag_says_whether_the_backend_was_compiled)
{
#ifdef PN_HAVE_CUDA
    cr_assert(pn_cuda_build_enabled(), "PN_HAVE_CUDA is defined but the library says no CUDA");
#else
    cr_assert_not(pn_cuda_build_enabled(), "no PN_HAVE_CUDA but the library claims CUDA");
#endif
}

Test(pn_cuda, a_build_without_cuda_refuses_every_call_with_the_reason)
{
    if (pn_cuda_build_enabled())
        cr_skip("this build has the CUDA backend, so the stub is not linked");
    pn_error err = { 0 };
    pn_cuda_ctx *ctx = (pn_cuda_ctx *)(uintptr_t)1;
    cr_assert_eq(pn_cuda_open(0, &ctx, &err), PN_ERR_CUDA);
    cr_assert_null(ctx);
    cr_assert_str_eq(err.msg, STUB_MSG);
    ctx = (pn_cuda_ctx *)(uintptr_t)1;
    cr_assert_eq(pn_cuda_open_emulator(&ctx, &err), PN_ERR_CUDA);
    cr_assert_null(ctx);
    cr_assert_str_eq(err.msg, STUB_MSG);
    float x[80] = { 0 };
    uint8_t out[34];
    uint16_t h;
    double d = 1.0;
    int64_t row, col;
    memset(&err, 0, sizeof err);
    cr_assert_eq(pn_cuda_quantize_rows(NULL, PN_TYPE_PN3T, x, 1, 80, out, &row, &col, &err),
                 PN_ERR_CUDA);
    cr_assert_str_eq(err.msg, STUB_MSG);
    cr_assert_eq(pn_cuda_submit(NULL, 0, PN_TYPE_PN3T, x, 1, 80, 0, &err), PN_ERR_CUDA);
    cr_assert_eq(pn_cuda_collect(NULL, 0, out, &row, &col, &err), PN_ERR_CUDA);
    cr_assert_eq(pn_cuda_fp16_from_double_batch(NULL, &d, 1, &h, &err), PN_ERR_CUDA);
    cr_assert_eq(pn_cuda_set_chunk_floats(NULL, 80, &err), PN_ERR_CUDA);
    cr_assert_str_eq(err.msg, STUB_MSG);
    cr_assert_eq(pn_cuda_max_rows(NULL, 80), 0);
    cr_assert_null(pn_cuda_slot_input(NULL, 0));
    cr_assert_null(pn_cuda_slot_output(NULL, 0));
    pn_cuda_close(NULL);
}

Test(pn_cuda, opening_without_a_usable_gpu_fails_and_names_the_reason)
{
    if (!pn_cuda_build_enabled())
        cr_skip("this build has no CUDA backend (the stub's refusal is tested on its own)");
    pn_error err = { 0 };
    pn_cuda_ctx *ctx = NULL;
    pn_status st = pn_cuda_open(0, &ctx, &err);
    if (st == PN_OK) {
        char name[256];
        snprintf(name, sizeof name, "%s", pn_cuda_device_name(ctx));
        pn_cuda_close(ctx);
        cr_skip("a CUDA device is present (%s): there is no failure to check", name);
    }
    cr_assert_eq(st, PN_ERR_CUDA, "got %s: %s", pn_strerror(st), err.msg);
    cr_assert_null(ctx);
    cr_assert_eq(err.code, PN_ERR_CUDA);
    cr_assert(strstr(err.msg, "CUDA") != NULL, "message does not say CUDA: %s", err.msg);
    cr_assert(strstr(err.msg, "no CUDA device") != NULL || strstr(err.msg, "no kernel") != NULL,
              "message does not name the reason: %s", err.msg);
}

Test(pn_cuda, a_device_index_out_of_range_is_refused_with_the_device_count)
{
    if (!pn_cuda_build_enabled())
        cr_skip("this build has no CUDA backend");
    pn_error err = { 0 };
    pn_cuda_ctx *ctx = NULL;
    bool have_gpu = pn_cuda_open(0, &ctx, &err) == PN_OK;
    pn_cuda_close(ctx);
    const int bad[] = { -1, 4096 };
    for (size_t i = 0; i < 2; i++) {
        ctx = (pn_cuda_ctx *)(uintptr_t)1;
        memset(&err, 0, sizeof err);
        cr_assert_eq(pn_cuda_open(bad[i], &ctx, &err), PN_ERR_CUDA, "device %d", bad[i]);
        cr_assert_null(ctx);
        if (have_gpu)
            cr_assert(strstr(err.msg, "does not exist") && strstr(err.msg, "this machine has"),
                      "device %d: %s", bad[i], err.msg);
        else
            cr_assert(strstr(err.msg, "no CUDA device") != NULL, "device %d: %s", bad[i], err.msg);
    }
}

Test(pn_cuda, the_emulator_names_itself_and_takes_whole_slots)
{
    if (!pn_cuda_build_enabled())
        cr_skip("this build has no CUDA backend: no kernel to emulate");
    pn_cuda_ctx *ctx = open_backend(BACKEND_EMULATOR);
    cr_assert(strstr(pn_cuda_device_name(ctx), "emulator") != NULL, "%s", pn_cuda_device_name(ctx));
    cr_assert_eq(pn_cuda_max_rows(ctx, 5120), (int64_t)(PN_CUDA_SLOT_INPUT_BYTES / 4 / 5120));
    cr_assert_eq(pn_cuda_max_rows(ctx, 0), 0);
    cr_assert_eq(pn_cuda_max_rows(ctx, (int64_t)(PN_CUDA_SLOT_INPUT_BYTES / 4) + 1), 0);
    for (int s = 0; s < PN_CUDA_SLOTS; s++) {
        cr_assert_not_null(pn_cuda_slot_input(ctx, s));
        cr_assert_not_null(pn_cuda_slot_output(ctx, s));
    }
    cr_assert_null(pn_cuda_slot_input(ctx, PN_CUDA_SLOTS));
    cr_assert_null(pn_cuda_slot_input(ctx, -1));
    pn_cuda_close(ctx);
}

/* --- byte equality ------------------------------------------------------------------------ */

BACKEND_TEST(gaussian_rows_at_many_scales_give_the_reference_bytes)
{
    /* From all-underflow (1e-9: zero groups) through fp16-subnormal scales
     * to large weights, one scale per row, every shape. */
    static const double scales[] = { 1e-9, 3e-8, 1e-6, 1e-5, 1e-4, 1e-3,
                                     0.02, 0.1,  1.0,  30.0, 1e3,  2e4 };
    const int n_rows = (int)(sizeof scales / sizeof scales[0]);
    for (size_t s = 0; s < N_SHAPES; s++) {
        const int64_t K = SHAPES[s].K;
        float *x = alloc_floats((size_t)(n_rows * K));
        tu_rng r = { 1000u + s };
        for (int i = 0; i < n_rows; i++)
            for (int64_t j = 0; j < K; j++)
                x[i * K + j] = gauss_f(&r, scales[i]);
        expect_same_as_ref(ctx, SHAPES[s].type, x, n_rows, K, "gaussian rows");
        free(x);
    }
}

BACKEND_TEST(heavy_tailed_and_structured_rows_give_the_reference_bytes)
{
    for (size_t s = 0; s < N_SHAPES; s++) {
        const int64_t K = SHAPES[s].K;
        const int n_rows = ROW_KIND_COUNT;
        float *x = alloc_floats((size_t)(n_rows * K));
        tu_rng r = { 77u + 31u * s };
        for (int i = 0; i < n_rows; i++)
            fill_row(&r, (row_kind)i, SHAPES[s].type, x + i * K, K);
        expect_same_as_ref(ctx, SHAPES[s].type, x, n_rows, K, "heavy-tailed and structured rows");
        free(x);
    }
}

static float *read_golden_floats(const char *name, size_t want_floats)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/golden/%s", PN_TEST_DATA, name);
    size_t n = 0;
    float *p = tu_read_file(path, &n);
    cr_assert_eq(n, want_floats * sizeof(float), "%s: %zu bytes", path, n);
    return p;
}

BACKEND_TEST(every_golden_group_gives_its_golden_block)
{
    const int types[] = { PN_TYPE_PN3T, PN_TYPE_PN4T };
    for (int t = 0; t < 2; t++) {
        const int type = types[t], G = group_of(type);
        char name[64], path[1024];
        snprintf(name, sizeof name, "%s.in.f32", name_of(type));
        float *in = read_golden_floats(name, (size_t)128 * G);
        snprintf(path, sizeof path, "%s/golden/%s.out.bin", PN_TEST_DATA, name_of(type));
        size_t n = 0;
        uint8_t *golden = tu_read_file(path, &n);
        cr_assert_eq(n, (size_t)128 * PN_BLOCK_BYTES);
        /* As 128 rows of one group, 16 rows of 8, and one row of 128. */
        const int64_t rows[] = { 128, 16, 1 };
        for (int k = 0; k < 3; k++) {
            const int64_t K = 128 / rows[k] * G;
            uint8_t *got = alloc_bytes(n);
            pn_error err = { 0 };
            int64_t br = -1, bc = -1;
            pn_status st = pn_cuda_quantize_rows(ctx, type, in, rows[k], K, got, &br, &bc, &err);
            cr_assert_eq(st, PN_OK, "%s golden as %lld rows: %s", name_of(type), (long long)rows[k],
                         err.msg);
            for (int g = 0; g < 128; g++)
                cr_assert(memcmp(got + g * PN_BLOCK_BYTES, golden + g * PN_BLOCK_BYTES,
                                 PN_BLOCK_BYTES) == 0,
                          "%s golden group %d (as %lld rows): d 0x%02x%02x, golden 0x%02x%02x",
                          name_of(type), g, (long long)rows[k], got[g * 34 + 1], got[g * 34],
                          golden[g * 34 + 1], golden[g * 34]);
            free(got);
        }
        free(in);
        free(golden);
    }
}

BACKEND_TEST(every_golden_refusal_is_reported_like_the_reference)
{
    const int types[] = { PN_TYPE_PN3T, PN_TYPE_PN4T };
    for (int t = 0; t < 2; t++) {
        const int type = types[t], G = group_of(type);
        char name[64];
        snprintf(name, sizeof name, "%s.refuse.f32", name_of(type));
        float *refuse = read_golden_floats(name, (size_t)5 * G);
        for (int k = 0; k < 5; k++) {
            /* Alone, then as group 2 of row 1 in a 3 x 4-group matrix. */
            expect_same_as_ref(ctx, type, refuse + k * G, 1, G, "golden refusal alone");
            const int64_t K = 4 * G;
            float *x = alloc_floats((size_t)(3 * K));
            tu_rng r = { 900u + (uint64_t)k };
            for (int64_t j = 0; j < 3 * K; j++)
                x[j] = gauss_f(&r, 0.02);
            memcpy(x + K + 2 * G, refuse + k * G, (size_t)G * sizeof(float));
            expect_same_as_ref(ctx, type, x, 3, K, "golden refusal inside a matrix");
            int64_t br = -1, bc = -1;
            uint8_t *out = alloc_bytes(out_bytes(type, 3, K));
            pn_error err = { 0 };
            pn_status st = pn_cuda_quantize_rows(ctx, type, x, 3, K, out, &br, &bc, &err);
            cr_assert(st == PN_ERR_NONFINITE || st == PN_ERR_SCALE_OVERFLOW, "%s refusal %d: %s",
                      name_of(type), k, pn_strerror(st));
            cr_assert_eq(br, 1);
            cr_assert(bc >= 2 * G && bc < 3 * G, "column %lld", (long long)bc);
            cr_assert(strstr(err.msg, "row 1") != NULL, "%s", err.msg);
            if (st == PN_ERR_SCALE_OVERFLOW) {
                cr_assert_eq(bc, 2 * G);
                cr_assert(strstr(err.msg, "too large for an fp16 scale") != NULL, "%s", err.msg);
            }
            free(out);
            free(x);
        }
        free(refuse);
    }
}

BACKEND_TEST(the_error_reported_is_the_lowest_row_then_the_lowest_column)
{
    const int types[] = { PN_TYPE_PN3T, PN_TYPE_PN4T };
    for (int t = 0; t < 2; t++) {
        const int type = types[t], G = group_of(type);
        const int64_t K = 6 * G, n_rows = 40;
        float *x = alloc_floats((size_t)(n_rows * K));
        tu_rng r = { 4242u + (uint64_t)t };
        for (int64_t j = 0; j < n_rows * K; j++)
            x[j] = gauss_f(&r, 0.02);
        /* Later rows fail too; row 17 holds an overflowing group 1 before
         * NaNs in groups 3 and 4: the overflow is reported. */
        x[33 * K + 0] = NAN;
        x[25 * K + 4 * G + 3] = INFINITY;
        x[17 * K + 1 * G + 9] = 1e30f;
        x[17 * K + 3 * G + 7] = NAN;
        x[17 * K + 3 * G + 2] = -INFINITY;
        expect_same_as_ref(ctx, type, x, n_rows, K, "several bad rows");
        uint8_t *out = alloc_bytes(out_bytes(type, n_rows, K));
        int64_t br = -1, bc = -1;
        pn_error err = { 0 };
        cr_assert_eq(pn_cuda_quantize_rows(ctx, type, x, n_rows, K, out, &br, &bc, &err),
                     PN_ERR_SCALE_OVERFLOW, "%s", err.msg);
        cr_assert(br == 17 && bc == G, "row %lld column %lld", (long long)br, (long long)bc);
        /* Without the overflow, the first NaN/Inf of group 3 (column 3G+2). */
        x[17 * K + 1 * G + 9] = 0.5f;
        expect_same_as_ref(ctx, type, x, n_rows, K, "a NaN after an infinity in one group");
        cr_assert_eq(pn_cuda_quantize_rows(ctx, type, x, n_rows, K, out, &br, &bc, &err),
                     PN_ERR_NONFINITE, "%s", err.msg);
        cr_assert(br == 17 && bc == 3 * G + 2, "row %lld column %lld", (long long)br,
                  (long long)bc);
        cr_assert(strstr(err.msg, "row 17, column") != NULL, "%s", err.msg);
        /* The same across chunks of 3 rows: row numbers count from the
         * matrix's first row, not the chunk's. */
        cr_assert_eq(pn_cuda_set_chunk_floats(ctx, (size_t)(3 * K), &err), PN_OK, "%s", err.msg);
        expect_same_as_ref(ctx, type, x, n_rows, K, "bad rows across chunks");
        cr_assert_eq(pn_cuda_quantize_rows(ctx, type, x, n_rows, K, out, &br, &bc, &err),
                     PN_ERR_NONFINITE);
        cr_assert(br == 17 && bc == 3 * G + 2, "row %lld column %lld", (long long)br,
                  (long long)bc);
        /* The slots are idle again after an error. */
        cr_assert_eq(pn_cuda_set_chunk_floats(ctx, PN_CUDA_SLOT_INPUT_BYTES / 4, &err), PN_OK, "%s",
                     err.msg);
        free(out);
        free(x);
    }
}

/* One group of G: `amax` at position `at` (with its sign), the rest a
 * Gaussian well inside it. */
static void edge_group(tu_rng *r, float *w, int G, float amax, int at)
{
    for (int e = 0; e < G; e++)
        w[e] = (float)(tu_rng_gauss(r) * (double)fabsf(amax) / 4.0);
    w[at] = amax;
}

BACKEND_TEST(groups_at_the_underflow_and_overflow_edges_give_the_reference_result)
{
    const int types[] = { PN_TYPE_PN3T, PN_TYPE_PN4T };
    for (int t = 0; t < 2; t++) {
        const int type = types[t], G = group_of(type), z = zero_of(type);
        tu_rng r = { 31337u + (uint64_t)t };
        float w[80];
        for (int i = 0; i < PN_N_CANDIDATES; i++) {
            const double m = (double)(50 + 2 * i) / 100.0;
            /* t = m * amax / z reaches 65520 (overflow) and 2^-25 (underflow). */
            const double edges[2] = { 65520.0 * z / m, 0x1p-25 * z / m };
            for (int k = 0; k < 2; k++) {
                float a = (float)edges[k];
                for (int u = 0; u < 3; u++)
                    a = nextafterf(a, 0.0f);
                for (int u = 0; u < 7; u++, a = nextafterf(a, INFINITY)) {
                    const float sgn = (tu_rng_u64(&r) & 1) ? -1.0f : 1.0f;
                    edge_group(&r, w, G, sgn * a, (int)(tu_rng_u64(&r) % (uint64_t)G));
                    expect_same_as_ref(ctx, type, w, 1, G, k ? "underflow edge" : "overflow edge");
                }
            }
        }
        /* Every candidate overflowing, and every one underflowing. */
        edge_group(&r, w, G, (float)(65520.0 * z / 0.5), 3);
        expect_same_as_ref(ctx, type, w, 1, G, "all candidates overflow");
        edge_group(&r, w, G, FLT_MAX, 0);
        expect_same_as_ref(ctx, type, w, 1, G, "FLT_MAX");
        edge_group(&r, w, G, 1e-9f, 5);
        expect_same_as_ref(ctx, type, w, 1, G, "all candidates underflow");
        edge_group(&r, w, G, 0x1p-149f, 5);
        expect_same_as_ref(ctx, type, w, 1, G, "smallest float32 subnormal");
    }
}

/* --- the asynchronous slots, chunking, arguments -------------------------------------------- */

BACKEND_TEST(the_async_slots_give_the_same_bytes_as_the_sync_call)
{
    const int type = PN_TYPE_PN4T;
    const int64_t K = 5120, n_rows = 40, per = 7;
    float *x = alloc_floats((size_t)(n_rows * K));
    tu_rng r = { 555u };
    for (int64_t i = 0; i < n_rows; i++)
        fill_row(&r, (row_kind)(i % ROW_KIND_COUNT), type, x + i * K, K);
    const size_t nb = out_bytes(type, n_rows, K), row_out = out_bytes(type, 1, K);
    uint8_t *want = alloc_bytes(nb), *sync = alloc_bytes(nb), *async = alloc_bytes(nb);
    cr_assert_eq(ref_rows(type, x, n_rows, K, want).st, PN_OK);
    pn_error err = { 0 };
    cr_assert_eq(pn_cuda_set_chunk_floats(ctx, (size_t)(per * K), &err), PN_OK, "%s", err.msg);
    cr_assert_eq(pn_cuda_max_rows(ctx, K), per);
    cr_assert_eq(pn_cuda_quantize_rows(ctx, type, x, n_rows, K, sync, NULL, NULL, &err), PN_OK,
                 "%s", err.msg);
    cr_assert(memcmp(sync, want, nb) == 0, "sync call differs from the reference");

    /* Chunk i on slot i % 2; odd chunks are written straight into the
     * slot's pinned buffer (no copy), even ones copied from x. */
    const int64_t n_chunks = (n_rows + per - 1) / per;
    for (int64_t i = 0; i < n_chunks + PN_CUDA_SLOTS; i++) {
        if (i >= PN_CUDA_SLOTS) {
            const int64_t c = i - PN_CUDA_SLOTS;
            if (c < n_chunks) {
                const int slot = (int)(c % PN_CUDA_SLOTS);
                const int64_t nr = (n_rows - c * per < per) ? n_rows - c * per : per;
                cr_assert_eq(pn_cuda_collect(ctx, slot, async + (size_t)(c * per) * row_out, NULL,
                                             NULL, &err),
                             PN_OK, "chunk %lld: %s", (long long)c, err.msg);
                cr_assert(memcmp(pn_cuda_slot_output(ctx, slot),
                                 async + (size_t)(c * per) * row_out, (size_t)nr * row_out) == 0,
                          "the slot's output buffer holds other bytes than collect copied");
            }
        }
        if (i < n_chunks) {
            const int slot = (int)(i % PN_CUDA_SLOTS);
            const int64_t nr = (n_rows - i * per < per) ? n_rows - i * per : per;
            const float *src = x + i * per * K;
            if (i & 1) {
                float *in = pn_cuda_slot_input(ctx, slot);
                memcpy(in, src, (size_t)(nr * K) * sizeof(float));
                src = in;
            }
            cr_assert_eq(pn_cuda_submit(ctx, slot, type, src, nr, K, i * per, &err), PN_OK,
                         "chunk %lld: %s", (long long)i, err.msg);
            if (i == 1) {
                /* Both slots busy: a third submit and a sync call are refused. */
                cr_assert_eq(pn_cuda_submit(ctx, 0, type, x, 1, K, 0, &err), PN_ERR_USAGE);
                cr_assert(strstr(err.msg, "busy") != NULL, "%s", err.msg);
                cr_assert_eq(pn_cuda_quantize_rows(ctx, type, x, 1, K, sync, NULL, NULL, &err),
                             PN_ERR_USAGE);
                cr_assert_eq(pn_cuda_set_chunk_floats(ctx, (size_t)K, &err), PN_ERR_USAGE);
            }
        }
    }
    cr_assert(memcmp(async, want, nb) == 0, "async slots differ from the reference");
    int64_t br, bc;
    cr_assert_eq(pn_cuda_collect(ctx, 0, async, &br, &bc, &err), PN_ERR_USAGE,
                 "collecting an idle slot");

    /* An error in an async chunk counts rows from its row_base. */
    x[3 * K + 77] = NAN;
    cr_assert_eq(pn_cuda_submit(ctx, 1, type, x, per, K, 1000, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(pn_cuda_collect(ctx, 1, async, &br, &bc, &err), PN_ERR_NONFINITE);
    cr_assert(br == 1003 && bc == 77, "row %lld column %lld", (long long)br, (long long)bc);
    cr_assert(strstr(err.msg, "row 1003, column 77") != NULL, "%s", err.msg);
    free(x);
    free(want);
    free(sync);
    free(async);
}

BACKEND_TEST(more_rows_than_a_chunk_holds_are_chunked_without_changing_a_byte)
{
    const int types[] = { PN_TYPE_PN3T, PN_TYPE_PN4T };
    for (int t = 0; t < 2; t++) {
        const int type = types[t];
        const int64_t K = 1280, n_rows = 25;
        float *x = alloc_floats((size_t)(n_rows * K));
        tu_rng r = { 8080u + (uint64_t)t };
        for (int64_t i = 0; i < n_rows; i++)
            fill_row(&r, (row_kind)((i * 5) % ROW_KIND_COUNT), type, x + i * K, K);
        pn_error err = { 0 };
        /* 3.5 rows per chunk: 3 rows each, 9 chunks. */
        cr_assert_eq(pn_cuda_set_chunk_floats(ctx, (size_t)(K * 7 / 2), &err), PN_OK, "%s",
                     err.msg);
        cr_assert_eq(pn_cuda_max_rows(ctx, K), 3);
        expect_same_as_ref(ctx, type, x, n_rows, K, "chunks of 3 rows");
        cr_assert_eq(pn_cuda_set_chunk_floats(ctx, (size_t)K, &err), PN_OK, "%s", err.msg);
        expect_same_as_ref(ctx, type, x, n_rows, K, "chunks of 1 row");
        /* Zero rows: nothing to do, nothing written. */
        cr_assert_eq(pn_cuda_quantize_rows(ctx, type, x, 0, K, NULL, NULL, NULL, &err), PN_OK, "%s",
                     err.msg);
        free(x);
    }
}

BACKEND_TEST(bad_arguments_are_usage_errors)
{
    float x[160] = { 0 };
    uint8_t out[68];
    pn_error err = { 0 };
    cr_assert_eq(pn_cuda_quantize_rows(ctx, PN_TYPE_Q8_0, x, 1, 64, out, NULL, NULL, &err),
                 PN_ERR_USAGE);
    cr_assert_eq(pn_cuda_quantize_rows(ctx, PN_TYPE_PN3T, x, 1, 64, out, NULL, NULL, &err),
                 PN_ERR_USAGE);
    cr_assert(strstr(err.msg, "80") != NULL, "%s", err.msg);
    cr_assert_eq(pn_cuda_quantize_rows(ctx, PN_TYPE_PN4T, x, 1, 0, out, NULL, NULL, &err),
                 PN_ERR_USAGE);
    cr_assert_eq(pn_cuda_quantize_rows(ctx, PN_TYPE_PN4T, x, -1, 64, out, NULL, NULL, &err),
                 PN_ERR_USAGE);
    cr_assert_eq(pn_cuda_submit(ctx, PN_CUDA_SLOTS, PN_TYPE_PN4T, x, 1, 64, 0, &err), PN_ERR_USAGE);
    cr_assert_eq(pn_cuda_submit(ctx, -1, PN_TYPE_PN4T, x, 1, 64, 0, &err), PN_ERR_USAGE);
    cr_assert_eq(pn_cuda_submit(ctx, 0, PN_TYPE_PN4T, x, 0, 64, 0, &err), PN_ERR_USAGE);
    cr_assert_eq(pn_cuda_submit(ctx, 0, PN_TYPE_PN4T, NULL, 1, 64, 0, &err), PN_ERR_USAGE);
    cr_assert_eq(pn_cuda_set_chunk_floats(ctx, 128, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(pn_cuda_submit(ctx, 0, PN_TYPE_PN4T, x, 3, 64, 0, &err), PN_ERR_USAGE,
                 "3 rows of 64 in a 128-float chunk");
    cr_assert(strstr(err.msg, "do not fit") != NULL, "%s", err.msg);
    cr_assert_eq(pn_cuda_max_rows(ctx, 160), 0);
    cr_assert_eq(pn_cuda_quantize_rows(ctx, PN_TYPE_PN3T, x, 1, 160, out, NULL, NULL, &err),
                 PN_ERR_USAGE, "a row longer than a chunk");
    cr_assert_eq(pn_cuda_set_chunk_floats(ctx, 0, &err), PN_ERR_USAGE);
    cr_assert_eq(pn_cuda_set_chunk_floats(ctx, PN_CUDA_SLOT_INPUT_BYTES / 4 + 1, &err),
                 PN_ERR_USAGE);
    cr_assert_eq(pn_cuda_collect(ctx, 0, out, NULL, NULL, &err), PN_ERR_USAGE);
    /* Still usable after all that. */
    cr_assert_eq(pn_cuda_quantize_rows(ctx, PN_TYPE_PN4T, x, 2, 64, out, NULL, NULL, &err), PN_OK,
                 "%s", err.msg);
    for (int b = 0; b < 2; b++)
        cr_assert(out[34 * b] == 0 && out[34 * b + 1] == 0 && out[34 * b + 2] == 0x88,
                  "zero group: d +0.0 and codes z");
}

/* --- the device fp16 rounding ---------------------------------------------------------- */

static void expect_fp16_like_host(pn_cuda_ctx *ctx, const double *x, int64_t n, const char *what)
{
    uint16_t *got = malloc((size_t)n * sizeof *got);
    cr_assert_not_null(got);
    pn_error err = { 0 };
    cr_assert_eq(pn_cuda_fp16_from_double_batch(ctx, x, n, got, &err), PN_OK, "%s", err.msg);
    for (int64_t i = 0; i < n; i++) {
        const uint16_t want = pn_fp16_from_double(x[i]);
        cr_assert_eq(got[i], want, "%s %lld: fp16(%a) = 0x%04x on %s, 0x%04x on the host", what,
                     (long long)i, x[i], got[i], pn_cuda_device_name(ctx), want);
    }
    free(got);
}

BACKEND_TEST(fp16_rounding_matches_the_host_on_every_golden_input)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/golden/fp16.in.f64", PN_TEST_DATA);
    size_t n_in = 0, n_out = 0;
    double *in = tu_read_file(path, &n_in);
    snprintf(path, sizeof path, "%s/golden/fp16.out.u16", PN_TEST_DATA);
    uint16_t *golden = tu_read_file(path, &n_out);
    const int64_t n = (int64_t)(n_in / sizeof(double));
    cr_assert_eq(n_out, (size_t)n * sizeof(uint16_t));
    uint16_t *got = malloc((size_t)n * sizeof *got);
    cr_assert_not_null(got);
    pn_error err = { 0 };
    cr_assert_eq(pn_cuda_fp16_from_double_batch(ctx, in, n, got, &err), PN_OK, "%s", err.msg);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(got[i], golden[i], "golden fp16 input %lld (%a): 0x%04x, expected 0x%04x",
                     (long long)i, in[i], got[i], golden[i]);
    expect_fp16_like_host(ctx, in, n, "golden input");
    free(in);
    free(golden);
    free(got);
}

BACKEND_TEST(fp16_rounding_matches_the_host_on_half_way_points_and_random_doubles)
{
    /* Every finite half's upper half-way point, exactly and one double ulp
     * either side, both signs; then random bit patterns and magnitudes. */
    const int64_t n_half = 0x7c00 * 6, n_rand = 300000;
    double *x = malloc((size_t)(n_half + n_rand) * sizeof *x);
    cr_assert_not_null(x);
    int64_t k = 0;
    for (uint32_t h = 0; h < 0x7c00u; h++) {
        const double lo = pn_fp16_to_double((uint16_t)h);
        const double hi = (h == 0x7bffu) ? 65536.0 : pn_fp16_to_double((uint16_t)(h + 1));
        const double mid = (lo + hi) / 2.0; /* exact: both are short binary fractions */
        const double v[3] = { mid, nextafter(mid, 0.0), nextafter(mid, INFINITY) };
        for (int i = 0; i < 3; i++) {
            x[k++] = v[i];
            x[k++] = -v[i];
        }
    }
    tu_rng r = { 2718u };
    for (int64_t i = 0; i < n_rand; i++) {
        if (i & 1) {
            uint64_t u = tu_rng_u64(&r);
            memcpy(&x[k++], &u, sizeof u);
        } else {
            const double mag = ldexp(1.0 + tu_rng_uniform(&r), (int)(tu_rng_u64(&r) % 60) - 42);
            x[k++] = (tu_rng_u64(&r) & 1) ? -mag : mag;
        }
    }
    expect_fp16_like_host(ctx, x, k, "value");
    free(x);
}
