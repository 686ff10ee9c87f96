/* q3_K and q4_K weighted by an importance matrix (quant/kquants_weighted.h,
 * issue 30, item 4): the weighted encoders never err more, by the weights,
 * than the unweighted ones, and an expert tensor's rows take their expert's
 * weights.
 *
 * Against stock llama.cpp on the golden model (llama-quantize --imatrix's
 * tensors and hashes) is tests/programs/test_imatrix_kquants_cli.c. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "mix/imatrix.h"
#include "pipeline/quantize.h"
#include "quant/kquants.h"
#include "quant/kquants_weighted.h"
#include "quant/quant_row.h"
#include "quant/types.h"
#include "quant/widen.h"
#include "test_util.h"

static char *g_dir;
static void setup(void)
{
    g_dir = tu_mkdtemp();
}
static void teardown(void)
{
    tu_rm_rf(g_dir);
    free(g_dir);
}

/* ---- the weighted encoders themselves ---- */

static void rows_of(tu_rng *rng, float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double g = tu_rng_gauss(rng);
        x[i] = (float)(tu_rng_uniform(rng) < 0.02 ? 8.0 * g : g);
    }
}

static double werr(int type, const float *x, const uint8_t *q, const float *v, int64_t n)
{
    float *y = malloc((size_t)n * 4);
    cr_assert_eq(pn_dequantize_row_type(type, q, y, n), PN_OK);
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)x[i] - (double)y[i];
        s += (double)v[i] * d * d;
    }
    free(y);
    return s;
}

Test(imatrix_kquants, the_weighted_encoders_never_err_more_than_the_unweighted_by_the_weights)
{
    const int types[2] = { PN_TYPE_Q4_K, PN_TYPE_Q3_K };
    const int64_t n = 256 * 64;
    float *x = malloc((size_t)n * 4), *v = malloc((size_t)n * 4);
    uint8_t *a = malloc((size_t)n), *b = malloc((size_t)n);
    tu_rng rng = { 123 };
    rows_of(&rng, x, n);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)(0.01 + tu_rng_uniform(&rng) * (i % 37 == 3 ? 500.0 : 1.0));
    for (int t = 0; t < 2; t++) {
        cr_assert_eq(pn_quantize_row_stock(types[t], x, n, a, NULL), PN_OK);
        cr_assert_eq(pn_quantize_row_kquant_weighted(types[t], x, n, v, b, NULL), PN_OK);
        double ea = werr(types[t], x, a, v, n), eb = werr(types[t], x, b, v, n);
        cr_assert_lt(eb, ea, "type %d: weighted %g, unweighted %g", types[t], eb, ea);
        /* each block on its own too */
        for (int64_t k = 0; k < n / 256; k++) {
            const size_t bb = (size_t)pn_type_row_bytes(types[t], 256);
            cr_assert_leq(werr(types[t], x + 256 * k, b + bb * (size_t)k, v + 256 * k, 256),
                          werr(types[t], x + 256 * k, a + bb * (size_t)k, v + 256 * k, 256));
        }
    }
    /* zero weights everywhere: the unweighted bytes */
    memset(v, 0, (size_t)n * 4);
    for (int t = 0; t < 2; t++) {
        cr_assert_eq(pn_quantize_row_stock(types[t], x, n, a, NULL), PN_OK);
        cr_assert_eq(pn_quantize_row_kquant_weighted(types[t], x, n, v, b, NULL), PN_OK);
        cr_assert(memcmp(a, b, (size_t)pn_type_row_bytes(types[t], n)) == 0);
    }
    /* the reference's errors */
    x[300] = NAN;
    int64_t col = 0;
    cr_assert_eq(pn_quantize_row_q4_K_weighted(x, n, v, b, &col), PN_ERR_NONFINITE);
    cr_assert_eq(col, 300);
    cr_assert_eq(pn_quantize_row_q3_K_weighted(x, 100, v, b, &col), PN_ERR_USAGE);
    free(x);
    free(v);
    free(a);
    free(b);
}

/* ---- expert (3-D) tensors ------------------------------------------------ */

/* Expert e's weight for column j: uneven, and each expert heavy on other
 * columns, so that an expert's rows encoded with another's weights differ. */
static float expert_weight(int64_t e, int64_t j)
{
    uint64_t h = (uint64_t)(e * 7919 + j) * 0x9e3779b97f4a7c15ull;
    float x = 0.02f + (float)(h >> 40) / (float)(1u << 24);
    return (j % 37 == 3 + 5 * e) ? x * 300.0f : x;
}

/* A model of two expert tensors [K, R, E] (F32, Gaussian) and a GGUF
 * imatrix with E matrices for each (counts 1: the weight is in_sum2). */
static void write_experts(const char *src, const char *imx, const char *const names[2], int64_t K,
                          int64_t R, int64_t E)
{
    gguf_writer *w = gguf_writer_new();
    pn_error err;
    cr_assert_eq(gguf_writer_set_str(w, "general.architecture", "test"), PN_OK);
    int64_t ne[4] = { K, R, E, 1 };
    for (int i = 0; i < 2; i++)
        cr_assert_eq(gguf_writer_add_tensor(w, names[i], 3, ne, PN_TYPE_F32, &err), PN_OK, "%s",
                     err.msg);
    cr_assert_eq(gguf_writer_begin(w, src, &err), PN_OK, "%s", err.msg);
    tu_rng rng = { 11 };
    float *buf = malloc((size_t)(K * R * E) * 4);
    for (int i = 0; i < 2; i++) {
        for (int64_t k = 0; k < K * R * E; k++)
            buf[k] = (float)tu_rng_gauss(&rng);
        cr_assert_eq(gguf_writer_write(w, buf, (size_t)(K * R * E) * 4, &err), PN_OK);
    }
    free(buf);
    cr_assert_eq(gguf_writer_close(w, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_writer_commit(w, &err), PN_OK, "%s", err.msg);
    gguf_writer_free(w);

    w = gguf_writer_new();
    gguf_writer_set_str(w, "general.type", "imatrix");
    const char *ds[] = { "t" };
    gguf_writer_set_arr_str(w, "imatrix.datasets", ds, 1);
    gguf_writer_set_u32(w, "imatrix.chunk_count", 1);
    gguf_writer_set_u32(w, "imatrix.chunk_size", 1);
    int64_t ns[4] = { K, E, 1, 1 }, nc[4] = { 1, E, 1, 1 };
    for (int i = 0; i < 2; i++) {
        char n1[128], n2[128];
        snprintf(n1, sizeof n1, "%s.counts", names[i]);
        snprintf(n2, sizeof n2, "%s.in_sum2", names[i]);
        cr_assert_eq(gguf_writer_add_tensor(w, n1, 2, nc, PN_TYPE_F32, &err), PN_OK, "%s", err.msg);
        cr_assert_eq(gguf_writer_add_tensor(w, n2, 2, ns, PN_TYPE_F32, &err), PN_OK, "%s", err.msg);
    }
    cr_assert_eq(gguf_writer_begin(w, imx, &err), PN_OK, "%s", err.msg);
    float *counts = malloc((size_t)E * 4), *v = malloc((size_t)(K * E) * 4);
    for (int64_t e = 0; e < E; e++)
        counts[e] = 1.0f;
    for (int64_t e = 0; e < E; e++)
        for (int64_t j = 0; j < K; j++)
            v[e * K + j] = expert_weight(e, j);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(gguf_writer_write(w, counts, (size_t)E * 4, &err), PN_OK);
        cr_assert_eq(gguf_writer_write(w, v, (size_t)(K * E) * 4, &err), PN_OK);
    }
    free(counts);
    free(v);
    cr_assert_eq(gguf_writer_close(w, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_writer_commit(w, &err), PN_OK, "%s", err.msg);
    gguf_writer_free(w);
}

Test(imatrix_kquants, an_expert_tensors_rows_are_encoded_with_their_experts_weights, .init = setup,
     .fini = teardown)
{
    const int64_t K = 512, R = 3, E = 3;
    const char *names[2] = { "blk.0.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight" };
    const int types[2] = { PN_TYPE_Q4_K, PN_TYPE_Q3_K };
    char *src = tu_join(g_dir, "moe.gguf"), *imx = tu_join(g_dir, "moe.imatrix"),
         *recipe = tu_join(g_dir, "r.mix"), *dst = tu_join(g_dir, "out.gguf");
    write_experts(src, imx, names, K, R, E);
    const char *recipe_text = "mix E\nrotation none\npromote 0\n"
                              "rule blk.0.ffn_up_exps.weight => q4_K\nrule * => q3_K\n";
    cr_assert_eq(tu_write_file(recipe, recipe_text, strlen(recipe_text)), 0);
    /* the expected bytes: each row through the weighted encoder with its own
     * expert's weights (r / R), and with expert 0's weights for contrast */
    const size_t row_bytes[2] = { (size_t)pn_type_row_bytes(types[0], K),
                                  (size_t)pn_type_row_bytes(types[1], K) };
    uint8_t *want[2], *first_only[2];
    gguf_reader *s;
    pn_error err;
    cr_assert_eq(gguf_reader_open(src, &s, &err), PN_OK, "%s", err.msg);
    float *x = malloc((size_t)K * 4), *v = malloc((size_t)K * 4), *v0 = malloc((size_t)K * 4);
    for (int64_t j = 0; j < K; j++)
        v0[j] = expert_weight(0, j);
    for (int i = 0; i < 2; i++) {
        want[i] = malloc(row_bytes[i] * (size_t)(R * E));
        first_only[i] = malloc(row_bytes[i] * (size_t)(R * E));
        for (int64_t r = 0; r < R * E; r++) {
            cr_assert_eq(gguf_reader_read_tensor(s, (size_t)i, (uint64_t)(r * K * 4), x,
                                                 (size_t)K * 4, &err),
                         PN_OK, "%s", err.msg);
            for (int64_t j = 0; j < K; j++)
                v[j] = expert_weight(r / R, j);
            cr_assert_eq(pn_quantize_row_kquant_weighted(types[i], x, K, v,
                                                         want[i] + (size_t)r * row_bytes[i], NULL),
                         PN_OK);
            cr_assert_eq(pn_quantize_row_kquant_weighted(
                             types[i], x, K, v0, first_only[i] + (size_t)r * row_bytes[i], NULL),
                         PN_OK);
        }
        /* the case is real: expert 0's weights would give other bytes */
        cr_assert(memcmp(want[i] + row_bytes[i] * (size_t)R,
                         first_only[i] + row_bytes[i] * (size_t)R,
                         row_bytes[i] * (size_t)(R * (E - 1))) != 0,
                  "%s: the experts' weights make no difference", names[i]);
    }
    gguf_reader_close(s);
    /* 1 thread with the default chunk, 2 threads with chunks of 256 weights
     * (pieces of a row) */
    for (int run = 0; run < 2; run++) {
        pn_quantize_opts o;
        pn_quantize_opts_init(&o);
        o.src_path = src;
        o.dst_path = dst;
        o.recipe_path = recipe;
        o.imatrix_path = imx;
        o.backend = PN_BACKEND_CPU;
        o.force = true;
        o.threads = run ? 2 : 1;
        o.chunk_weights = run ? 256 : 0;
        cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_OK, "%s", err.msg);
        gguf_reader *q;
        cr_assert_eq(gguf_reader_open(dst, &q, &err), PN_OK, "%s", err.msg);
        for (int i = 0; i < 2; i++) {
            long ti = gguf_reader_find_tensor(q, names[i]);
            cr_assert_geq(ti, 0);
            cr_assert_eq(gguf_reader_tensor(q, (size_t)ti)->type, types[i]);
            const size_t n = row_bytes[i] * (size_t)(R * E);
            uint8_t *got = malloc(n);
            cr_assert_eq(gguf_reader_read_tensor(q, (size_t)ti, 0, got, n, &err), PN_OK, "%s",
                         err.msg);
            for (int64_t r = 0; r < R * E; r++)
                cr_assert(memcmp(got + (size_t)r * row_bytes[i], want[i] + (size_t)r * row_bytes[i],
                                 row_bytes[i]) == 0,
                          "%s row %lld (expert %lld), run %d: not its expert's encoding", names[i],
                          (long long)r, (long long)(r / R), run);
            free(got);
        }
        gguf_reader_close(q);
    }
    for (int i = 0; i < 2; i++) {
        free(want[i]);
        free(first_only[i]);
    }
    free(x);
    free(v);
    free(v0);
    free(src);
    free(imx);
    free(recipe);
    free(dst);
}
