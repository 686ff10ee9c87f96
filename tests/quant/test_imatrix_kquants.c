/* test_imatrix_kquants.c - q3_K and q4_K weighted by an importance matrix
 * (issue 30, item 4) against stock llama.cpp on the golden model: the
 * regenerated m4.gguf (tests/data/imatrix/PROVENANCE), stock tensors from
 * node-llama-cpp's libllama (llama_model_quantize through
 * pn-llama-quantize --imatrix) checked against llama-quantize's golden
 * hashes, and our weighted error at most theirs on every such tensor,
 * measured by one decoder. */
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

#define IMX_DIR PN_TEST_DATA "/imatrix"
#define LIBLLAMA                                                                                   \
    PN_SOURCE_DIR "/tools/llama/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/"            \
                  "libllama.v0.5.0.so"
#define M4_SHA256 "3b944de1d9512979810b7eb0539733cc5dac42d1896dd615606beff43d89f8a1"

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

static void sha256_of_file(const char *path, char hex[65])
{
    char *out = NULL;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
    cr_assert_eq(tu_run(cmd, &out, NULL), 0);
    memcpy(hex, out, 64);
    hex[64] = 0;
    free(out);
}

/* The golden model, made again as its README says, checked by its hash. */
static char *make_m4(void)
{
    char *m4 = tu_join(g_dir, "m4.gguf");
    cr_assert_eq(tu_run_program(NULL, NULL, "pn-synth",
                                "--no-header-hash --layers 4 --vocab 2048 --seed 7 '%s'", m4),
                 0);
    char hex[65];
    sha256_of_file(m4, hex);
    cr_assert_str_eq(hex, M4_SHA256, "pn-synth no longer makes the golden m4.gguf");
    return m4;
}

/* Every tensor of `path` whose golden record (json) lists a sha256: its data
 * bytes hashed and compared. */
static void check_golden_hashes(const char *path, const char *json_path)
{
    json_error_t je;
    json_t *root = json_load_file(json_path, 0, &je);
    cr_assert_not_null(root, "%s", je.text);
    json_t *ts = json_object_get(root, "tensors");
    gguf_reader *r;
    pn_error err;
    cr_assert_eq(gguf_reader_open(path, &r, &err), PN_OK, "%s", err.msg);
    char *tmp = tu_join(g_dir, "tensor.bin");
    for (size_t i = 0; i < json_array_size(ts); i++) {
        json_t *t = json_array_get(ts, i);
        const char *name = json_string_value(json_object_get(t, "name"));
        long ti = gguf_reader_find_tensor(r, name);
        cr_assert_geq(ti, 0, "%s", name);
        const gguf_tensor_info *info = gguf_reader_tensor(r, (size_t)ti);
        cr_assert_eq((long long)info->size, json_integer_value(json_object_get(t, "nbytes")));
        uint8_t *b = malloc(info->size);
        cr_assert_eq(gguf_reader_read_tensor(r, (size_t)ti, 0, b, info->size, &err), PN_OK);
        cr_assert_eq(tu_write_file(tmp, b, info->size), 0);
        free(b);
        char hex[65];
        sha256_of_file(tmp, hex);
        cr_assert_str_eq(hex, json_string_value(json_object_get(t, "sha256")),
                         "%s: %s differs from llama-quantize's", path, name);
    }
    free(tmp);
    gguf_reader_close(r);
    json_decref(root);
}

/* A recipe giving every tensor the type it has in the stock file when that
 * is q3_K or q4_K, f32 to vectors and q8_0 to the rest. */
static char *recipe_like(const char *stock)
{
    gguf_reader *r;
    pn_error err;
    cr_assert_eq(gguf_reader_open(stock, &r, &err), PN_OK, "%s", err.msg);
    size_t cap = 65536, n = 0;
    char *text = malloc(cap);
    n += (size_t)snprintf(text + n, cap - n, "mix S\nrotation none\npromote 0\n");
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        const char *ty = t->type == PN_TYPE_Q4_K ? "q4_K" : t->type == PN_TYPE_Q3_K ? "q3_K" : NULL;
        if (ty)
            n += (size_t)snprintf(text + n, cap - n, "rule %s => %s\n", t->name, ty);
    }
    n += (size_t)snprintf(text + n, cap - n,
                          "rule dims=1 => f32\nrule *.ssm_conv1d.weight => f32\n"
                          "rule * => q8_0\n");
    gguf_reader_close(r);
    char *path = tu_join(g_dir, "like.mix");
    cr_assert_eq(tu_write_file(path, text, n), 0);
    free(text);
    return path;
}

/* sum over the tensor of v_j (w - dq(w))^2, w the source's floats, dq the
 * one decoder (pn_dequantize_row_type) of the stored bytes. */
static double weighted_error(gguf_reader *src, gguf_reader *q, const char *name, const float *v)
{
    const gguf_tensor_info *s = gguf_reader_tensor(src, (size_t)gguf_reader_find_tensor(src, name));
    long qi = gguf_reader_find_tensor(q, name);
    const gguf_tensor_info *t = gguf_reader_tensor(q, (size_t)qi);
    const int64_t K = s->ne[0], rows = s->ne[1];
    const int64_t srow = pn_type_row_bytes(s->type, K), qrow = pn_type_row_bytes(t->type, K);
    uint8_t *a = malloc((size_t)srow), *b = malloc((size_t)qrow);
    float *x = malloc((size_t)K * 4), *y = malloc((size_t)K * 4);
    pn_error err;
    double sum = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        cr_assert_eq(gguf_reader_read_tensor(src, (size_t)gguf_reader_find_tensor(src, name),
                                             (uint64_t)(r * srow), a, (size_t)srow, &err),
                     PN_OK);
        cr_assert_eq(
            gguf_reader_read_tensor(q, (size_t)qi, (uint64_t)(r * qrow), b, (size_t)qrow, &err),
            PN_OK);
        pn_widen_row(s->type, a, x, K);
        cr_assert_eq(pn_dequantize_row_type(t->type, b, y, K), PN_OK);
        for (int64_t j = 0; j < K; j++) {
            double d = (double)x[j] - (double)y[j];
            sum += (double)v[j] * d * d;
        }
    }
    free(a);
    free(b);
    free(x);
    free(y);
    return sum;
}

static void compare_with_stock(const char *ftype, const char *golden_json)
{
    char *m4 = make_m4();
    char *stock = tu_join(g_dir, "stock.gguf"), *ours = tu_join(g_dir, "ours.gguf");
    const char *imx = IMX_DIR "/m4.imatrix.gguf";
    cr_assert_eq(access(LIBLLAMA, R_OK), 0, "no libllama at %s (scripts/install-deps)", LIBLLAMA);
    cr_assert_eq(tu_run_program(NULL, NULL, "pn-llama-quantize",
                                "--lib '%s' --threads 2 --imatrix '%s' '%s' '%s' %s", LIBLLAMA, imx,
                                m4, stock, ftype),
                 0);
    check_golden_hashes(stock, golden_json);
    char *recipe = recipe_like(stock);
    char *err_text = NULL;
    int rc = tu_run_program(NULL, &err_text, "pn-quantize",
                            "--quiet --threads 2 --recipe '%s' --imatrix '%s' '%s' '%s'", recipe,
                            imx, m4, ours);
    cr_assert_eq(rc, 0, "%s", err_text);
    free(err_text);
    pn_imatrix *im;
    pn_error err;
    cr_assert_eq(pn_imatrix_load(imx, &im, &err), PN_OK, "%s", err.msg);
    gguf_reader *src, *s, *o;
    cr_assert_eq(gguf_reader_open(m4, &src, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_reader_open(stock, &s, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_reader_open(ours, &o, &err), PN_OK, "%s", err.msg);
    int compared = 0;
    for (size_t i = 0; i < gguf_reader_n_tensors(s); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(s, i);
        if (t->type != PN_TYPE_Q4_K && t->type != PN_TYPE_Q3_K)
            continue;
        const pn_imatrix_entry *e = pn_imatrix_find(im, t->name);
        if (!e)
            continue; /* token_embd: no entry, unweighted on both sides */
        const gguf_tensor_info *ot =
            gguf_reader_tensor(o, (size_t)gguf_reader_find_tensor(o, t->name));
        cr_assert_eq(ot->type, t->type, "%s", t->name);
        double es = weighted_error(src, s, t->name, e->weights);
        double eo = weighted_error(src, o, t->name, e->weights);
        cr_log_info("%s %s: weighted error ours %.6g, llama-quantize %.6g (%.2f%%)", ftype, t->name,
                    eo, es, 100.0 * (eo - es) / es);
        cr_expect_leq(eo, es, "%s: ours %.9g > llama-quantize's %.9g", t->name, eo, es);
        compared++;
    }
    cr_assert_gt(compared, 4);
    gguf_reader_close(src);
    gguf_reader_close(s);
    gguf_reader_close(o);
    pn_imatrix_free(im);
    free(recipe);
    free(m4);
    free(stock);
    free(ours);
}

Test(imatrix_kquants, every_weighted_q4_K_tensor_of_the_golden_model_errs_at_most_as_llama_quantize,
     .init = setup, .fini = teardown, .timeout = 600)
{
    compare_with_stock("Q4_K_M", IMX_DIR "/m4.q4km.imx.gguf.sha256.json");
}

Test(imatrix_kquants, every_weighted_q3_K_and_q4_K_tensor_of_q3_K_M_errs_at_most_as_llama_quantize,
     .init = setup, .fini = teardown, .timeout = 600)
{
    compare_with_stock("Q3_K_M", IMX_DIR "/m4.q3km.imx.gguf.sha256.json");
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

Test(imatrix_kquants, a_weighted_tensor_is_the_same_bytes_at_any_threads_and_chunk, .init = setup,
     .fini = teardown, .timeout = 300)
{
    /* q4_K output.weight of the golden model with its entry, 1 and 2
     * threads, the default chunk and a chunk of 256 weights (pieces of a
     * row) */
    char *m4 = make_m4();
    const char *recipe_text = "mix S\nrotation none\npromote 0\nrule output.weight => q4_K\n"
                              "rule blk.0.ffn_up.weight => q3_K\nrule dims=1 => f32\n"
                              "rule *.ssm_conv1d.weight => f32\n"
                              "rule * => q8_0\n";
    char *recipe = tu_join(g_dir, "r.mix");
    cr_assert_eq(tu_write_file(recipe, recipe_text, strlen(recipe_text)), 0);
    const char *env[4] = { "", "PN_CHUNK_WEIGHTS=256 ", "PN_CHUNK_WEIGHTS=256 ", "" };
    const int threads[4] = { 1, 2, 1, 1 };
    char first[65] = "";
    for (int k = 0; k < 4; k++) {
        char name[16];
        snprintf(name, sizeof name, "o%d.gguf", k);
        char *out = tu_join(g_dir, name);
        char cmd[8192], *err_text = NULL;
        /* the last run without the imatrix: the weights did change the bytes */
        snprintf(cmd, sizeof cmd,
                 "%s'%s/pn-quantize' --quiet --threads %d --recipe '%s' %s%s%s '%s' '%s'", env[k],
                 PN_BIN_DIR, threads[k], recipe, k < 3 ? "--imatrix '" : "",
                 k < 3 ? IMX_DIR "/m4.imatrix.gguf" : "", k < 3 ? "'" : "", m4, out);
        cr_assert_eq(tu_run(cmd, NULL, &err_text), 0, "%s", err_text);
        free(err_text);
        char hex[65];
        sha256_of_file(out, hex);
        if (k == 0)
            strcpy(first, hex);
        else if (k < 3)
            cr_assert_str_eq(hex, first, "run %d gives other bytes", k);
        else
            cr_assert_str_neq(hex, first, "the imatrix changed nothing");
        free(out);
    }
    free(m4);
    free(recipe);
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
