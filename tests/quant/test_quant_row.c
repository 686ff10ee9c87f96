/* Pins quant/quant_row.h, the one row entry point for every type a mix
 * writes: for pn3t, pn4t, q8_0, q4_K, q3_K, f32, f16 and bf16 on every CPU
 * path this machine runs, the per-block error sums given in the quantizer's
 * pass equal, bit for bit (the doubles' bits), the separate decode-and-sum
 * pass pn_row_sums_ref; the bytes, status and column are the same on every
 * path; and the sum blocks are the types' blocks (256 for the plain types,
 * the last one of a row shorter). A path this CPU lacks is said with
 * cr_log_info and not run. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "quant/fp16.h"
#include "quant/kquants.h"
#include "quant/pn.h"
#include "quant/pn_fast.h"
#include "quant/quant_row.h"
#include "quant/types.h"
#include "fixtures/row_kinds.h"
#include "test_util.h"

static const int ALL_TYPES[8] = { PN_TYPE_PN3T, PN_TYPE_PN4T, PN_TYPE_Q8_0, PN_TYPE_Q4_K,
                                  PN_TYPE_Q3_K, PN_TYPE_F32,  PN_TYPE_F16,  PN_TYPE_BF16 };

static const char *tname(int type)
{
    return pn_type_traits_get(type)->name;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    cr_assert(p, "out of memory for %zu bytes", n);
    return p;
}

static int log_missing_paths(void)
{
    int n = 0;
    for (int p = 0; p < PN_PATH_COUNT; p++) {
        if (pn_path_available(p))
            n++;
        else
            cr_log_info("path %s is not supported by this CPU: not run here", pn_path_name(p));
    }
    return n;
}

/* One row through every available path: the sums must equal
 * pn_row_sums_ref of the path's own bytes bit for bit, and the bytes,
 * status, column and sums must be the reference path's. Returns the number
 * of disagreements (the first few logged). */
static int check_row(int type, const float *x, int64_t n, const char *what)
{
    const int64_t rb = pn_type_row_bytes(type, n), nblk = pn_row_sum_blocks(type, n);
    uint8_t *q0 = xmalloc((size_t)rb), *q = xmalloc((size_t)rb);
    double *e0 = xmalloc((size_t)nblk * sizeof(double)),
           *w0 = xmalloc((size_t)nblk * sizeof(double));
    double *e = xmalloc((size_t)nblk * sizeof(double)), *w = xmalloc((size_t)nblk * sizeof(double));
    double *er = xmalloc((size_t)nblk * sizeof(double)),
           *wr = xmalloc((size_t)nblk * sizeof(double));
    int bad = 0;
    int64_t col0 = -5;
    const pn_status st0 = pn_quantize_row_sums(type, PN_PATH_REF, x, n, q0, &col0, e0, w0);
    for (int path = 0; path < PN_PATH_COUNT; path++) {
        if (!pn_path_available(path))
            continue;
        int64_t col = -6;
        memset(e, 0xff, (size_t)nblk * sizeof(double));
        memset(w, 0xff, (size_t)nblk * sizeof(double));
        const pn_status st = pn_quantize_row_sums(type, path, x, n, q, &col, e, w);
        bool same = st == st0;
        if (same && st != PN_OK)
            same = col == col0;
        if (same && st == PN_OK) {
            same = memcmp(q, q0, (size_t)rb) == 0 &&
                   memcmp(e, e0, (size_t)nblk * sizeof(double)) == 0 &&
                   memcmp(w, w0, (size_t)nblk * sizeof(double)) == 0;
            cr_assert_eq(pn_row_sums_ref(type, x, q, n, er, wr), PN_OK);
            for (int64_t b = 0; b < nblk && same; b++)
                if (memcmp(&e[b], &er[b], sizeof(double)) != 0 ||
                    memcmp(&w[b], &wr[b], sizeof(double)) != 0) {
                    same = false;
                    if (bad < 5)
                        cr_log_error(
                            "%s %s path %s: sum block %lld: fused err %a norm %a, separate pass "
                            "err %a norm %a",
                            what, tname(type), pn_path_name(path), (long long)b, e[b], w[b], er[b],
                            wr[b]);
                }
        }
        if (!same && bad++ < 5)
            cr_log_error("%s %s path %s (%lld weights): status %d column %lld, reference path %d "
                         "column %lld",
                         what, tname(type), pn_path_name(path), (long long)n, (int)st,
                         (long long)col, (int)st0, (long long)col0);
    }
    free(q0);
    free(q);
    free(e0);
    free(w0);
    free(e);
    free(w);
    free(er);
    free(wr);
    return bad;
}

/* Rows of 1..8 of the type's blocks (plain types: lengths that end in a
 * short sum block), random kinds mixed block by block. */
static int check_rows(int type, int rows_per_len, int allow_refusals, uint64_t seed,
                      const char *what)
{
    const int64_t block = pn_type_traits_get(type)->block_weights;
    const int bw = block == 1 ? 16 : (int)block; /* the kinds' granule */
    tu_rng r = { seed ^ ((uint64_t)type << 40) };
    int bad = 0;
    for (int len = 1; len <= 8; len++) {
        const int64_t n = block == 1 ? 37 * len + 200 * (len - 1) : block * len;
        const int64_t granules = (n + bw - 1) / bw;
        float *x = xmalloc((size_t)(granules * bw) * sizeof(float));
        for (int row = 0; row < rows_per_len; row++) {
            rk_fill_row(&r, x, granules, bw, allow_refusals);
            bad += check_row(type, x, n, what);
        }
        free(x);
    }
    return bad;
}

ParameterizedTestParameters(quant_row, fused_sums_equal_the_separate_pass_bit_for_bit_on_every_path)
{
    return cr_make_param_array(int, (void *)ALL_TYPES, 8);
}

ParameterizedTest(int *type, quant_row,
                  fused_sums_equal_the_separate_pass_bit_for_bit_on_every_path)
{
    log_missing_paths();
    int bad = check_rows(*type, 12, 0, 1, "random and edge rows");
    cr_expect_eq(bad, 0, "%s: %d rows disagree", tname(*type), bad);
}

/* The float search's paths search a row's groups a batch at a time (16)
 * and add the batch's sums eight groups at once (pn_search_sums_batch):
 * rows of every length around those counts, random and edge kinds mixed
 * group by group, and refusals anywhere in a batch. */
static const int PN_TYPES[2] = { PN_TYPE_PN3T, PN_TYPE_PN4T };

ParameterizedTestParameters(quant_row, fused_sums_hold_across_the_search_s_batches_of_groups)
{
    return cr_make_param_array(int, (void *)PN_TYPES, 2);
}

ParameterizedTest(int *type, quant_row, fused_sums_hold_across_the_search_s_batches_of_groups)
{
    log_missing_paths();
    static const int groups[] = { 7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33, 47, 49, 64, 100 };
    const int G = (int)pn_type_traits_get(*type)->block_weights;
    float *x = xmalloc((size_t)100 * G * sizeof(float));
    tu_rng r = { 77 + (uint64_t)*type };
    int bad = 0;
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++)
        for (int row = 0; row < 6; row++) {
            rk_fill_row(&r, x, groups[i], G, row == 5);
            bad += check_row(*type, x, (int64_t)groups[i] * G, "long row");
        }
    cr_expect_eq(bad, 0, "%s: %d long rows disagree", tname(*type), bad);
    free(x);
}

ParameterizedTestParameters(quant_row, every_path_refuses_the_same_rows_at_the_same_column)
{
    return cr_make_param_array(int, (void *)ALL_TYPES, 8);
}

ParameterizedTest(int *type, quant_row, every_path_refuses_the_same_rows_at_the_same_column)
{
    log_missing_paths();
    int bad = check_rows(*type, 10, 1, 2, "rows with refusals");
    cr_expect_eq(bad, 0, "%s: %d rows disagree", tname(*type), bad);
}

ParameterizedTestParameters(quant_row, each_kind_of_edge_row_gives_the_decoder_s_sums)
{
    return cr_make_param_array(int, (void *)ALL_TYPES, 8);
}

ParameterizedTest(int *type, quant_row, each_kind_of_edge_row_gives_the_decoder_s_sums)
{
    log_missing_paths();
    const int64_t block = pn_type_traits_get(*type)->block_weights;
    const int64_t n = block == 1 ? 600 : block * 3;
    const int bw = block == 1 ? 16 : (int)block;
    float *x = xmalloc((size_t)(n + bw) * sizeof(float));
    int bad = 0;
    for (int kind = 0; kind < RK_COUNT; kind++) {
        tu_rng r = { 900 + (uint64_t)kind };
        for (int row = 0; row < 6; row++) {
            for (int64_t g = 0; g * bw < n; g++)
                rk_fill_block(&r, kind, x + g * bw, bw);
            bad += check_row(*type, x, n, "edge row");
        }
    }
    cr_expect_eq(bad, 0, "%s: %d edge rows disagree", tname(*type), bad);
    free(x);
}

Test(quant_row, the_sum_blocks_are_the_types_blocks_and_256_for_plain_types)
{
    static const struct {
        int type;
        int64_t bw;
    } want[] = {
        { PN_TYPE_PN3T, 80 },  { PN_TYPE_PN4T, 64 }, { PN_TYPE_Q8_0, 32 }, { PN_TYPE_Q4_K, 256 },
        { PN_TYPE_Q3_K, 256 }, { PN_TYPE_F32, 256 }, { PN_TYPE_F16, 256 }, { PN_TYPE_BF16, 256 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_expect_eq(pn_sum_block_weights(want[i].type), want[i].bw, "%s", tname(want[i].type));
    cr_expect_eq(pn_sum_block_weights(14), 0, "q6_K is not written by a mix");
    cr_expect_eq(pn_sum_block_weights(-1), 0);
    cr_expect_eq(pn_row_sum_blocks(PN_TYPE_F16, 257), 2);
    cr_expect_eq(pn_row_sum_blocks(PN_TYPE_F16, 256), 1);
    cr_expect_eq(pn_row_sum_blocks(PN_TYPE_PN3T, 5120), 64);
    cr_expect_eq(pn_row_sum_blocks(PN_TYPE_Q4_K, 0), 0);
}

Test(quant_row, a_plain_row_s_last_sum_block_holds_the_rest_of_the_row)
{
    /* 300 f16 weights: block 0 is weights 0..255, block 1 weights 256..299;
     * sums computed here from the definition */
    float x[300];
    for (int i = 0; i < 300; i++)
        x[i] = (float)(0.001 * (i - 150)) + 1e-7f * (float)i;
    uint8_t q[600];
    double e[2], w[2];
    cr_assert_eq(pn_quantize_row_sums(PN_TYPE_F16, PN_PATH_REF, x, 300, q, NULL, e, w), PN_OK);
    for (int b = 0; b < 2; b++) {
        double we = 0.0, ww = 0.0;
        for (int i = 256 * b; i < (b ? 300 : 256); i++) {
            float dq = pn_fp16_to_float((uint16_t)(q[2 * i] | q[2 * i + 1] << 8));
            double d = (double)x[i] - (double)dq;
            we = we + d * d;
            ww = ww + (double)x[i] * (double)x[i];
        }
        cr_expect(memcmp(&we, &e[b], sizeof we) == 0, "block %d error %a, expected %a", b, e[b],
                  we);
        cr_expect(memcmp(&ww, &w[b], sizeof ww) == 0, "block %d norm %a, expected %a", b, w[b], ww);
    }
    /* f32 is a copy: no error at all */
    uint8_t q32[1200];
    cr_assert_eq(pn_quantize_row_sums(PN_TYPE_F32, PN_PATH_REF, x, 300, q32, NULL, e, w), PN_OK);
    cr_expect(e[0] == 0.0 && e[1] == 0.0 && !signbit(e[0]));
}

ParameterizedTestParameters(quant_row, a_zero_group_s_error_is_its_norm_on_every_path)
{
    static int pn_types[2] = { PN_TYPE_PN3T, PN_TYPE_PN4T };
    return cr_make_param_array(int, pn_types, 2);
}

ParameterizedTest(int *type, quant_row, a_zero_group_s_error_is_its_norm_on_every_path)
{
    /* group 0 all zeros; group 1 so small that every candidate scale
     * underflows fp16 (the zero group, which does not decode to x) */
    const int G = pn_params_get(*type)->group;
    float x[160];
    for (int e = 0; e < G; e++) {
        x[e] = e % 2 ? -0.0f : 0.0f;
        x[G + e] = (float)(1e-12 * (e - G / 2));
    }
    log_missing_paths();
    for (int path = 0; path < PN_PATH_COUNT; path++) {
        if (!pn_path_available(path))
            continue;
        uint8_t q[2 * PN_BLOCK_BYTES];
        double err[2], norm[2];
        cr_assert_eq(pn_quantize_row_sums(*type, path, x, 2 * G, q, NULL, err, norm), PN_OK);
        cr_expect(err[0] == 0.0 && norm[0] == 0.0, "path %s: the all-zero group",
                  pn_path_name(path));
        cr_expect_gt(norm[1], 0.0);
        cr_expect(memcmp(&err[1], &norm[1], sizeof(double)) == 0,
                  "path %s: underflowed group err %a norm %a", pn_path_name(path), err[1], norm[1]);
        cr_expect_eq(q[PN_BLOCK_BYTES] | q[PN_BLOCK_BYTES + 1], 0, "d = +0.0");
    }
}

Test(quant_row, bad_types_paths_and_lengths_are_refused)
{
    float x[512] = { 0 };
    uint8_t q[2048];
    double e[8], w[8];
    int64_t bad = 3;
    cr_expect_eq(pn_quantize_row_sums(14, PN_PATH_REF, x, 256, q, &bad, e, w), PN_ERR_TYPE);
    cr_expect_eq(bad, -1);
    for (int t = 0; t < 8; t++) {
        bad = 3;
        cr_expect_eq(pn_quantize_row_sums(ALL_TYPES[t], PN_PATH_COUNT, x, 256, q, &bad, e, w),
                     PN_ERR_USAGE, "%s: unknown path", tname(ALL_TYPES[t]));
        cr_expect_eq(bad, -1);
        cr_expect_eq(pn_quantize_row_sums(ALL_TYPES[t], PN_PATH_REF, x, -1, q, &bad, e, w),
                     PN_ERR_USAGE);
        const int64_t block = pn_type_traits_get(ALL_TYPES[t])->block_weights;
        if (block > 1) {
            cr_expect_eq(
                pn_quantize_row_sums(ALL_TYPES[t], PN_PATH_REF, x, block + 1, q, &bad, e, w),
                PN_ERR_USAGE, "%s", tname(ALL_TYPES[t]));
            float y[512];
            cr_expect_eq(pn_dequantize_row_type(ALL_TYPES[t], q, y, block + 1), PN_ERR_USAGE);
            cr_expect_eq(pn_row_sums_ref(ALL_TYPES[t], x, q, block + 1, e, w), PN_ERR_USAGE);
        }
        cr_expect_eq(pn_quantize_row_sums(ALL_TYPES[t], PN_PATH_REF, x, 0, q, &bad, NULL, NULL),
                     PN_OK);
    }
    float y[64];
    cr_expect_eq(pn_dequantize_row_type(2, q, y, 32), PN_ERR_TYPE, "q4_0 is not written by a mix");
    cr_expect_eq(pn_row_sums_ref(2, x, q, 32, e, w), PN_ERR_TYPE);
}

Test(quant_row, without_sums_the_bytes_are_those_with_sums)
{
    const int64_t n = 5120; /* whole blocks of every type */
    float *x = xmalloc((size_t)n * sizeof(float));
    tu_rng r = { 12 };
    rk_fill_row(&r, x, n / 256, 256, 0);
    for (int t = 0; t < 8; t++) {
        for (int path = 0; path < PN_PATH_COUNT; path++) {
            if (!pn_path_available(path))
                continue;
            const int64_t rb = pn_type_row_bytes(ALL_TYPES[t], n);
            uint8_t *a = xmalloc((size_t)rb), *b = xmalloc((size_t)rb);
            double e[256], w[256];
            pn_status sa = pn_quantize_row_sums(ALL_TYPES[t], path, x, n, a, NULL, NULL, NULL);
            pn_status sb = pn_quantize_row_sums(ALL_TYPES[t], path, x, n, b, NULL, e, w);
            cr_expect_eq(sa, PN_OK, "%s path %s", tname(ALL_TYPES[t]), pn_path_name(path));
            cr_expect_eq(sb, PN_OK);
            cr_expect(memcmp(a, b, (size_t)rb) == 0, "%s path %s", tname(ALL_TYPES[t]),
                      pn_path_name(path));
            free(a);
            free(b);
        }
    }
    free(x);
}
