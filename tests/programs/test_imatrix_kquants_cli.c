/* q3_K and q4_K weighted by an importance matrix
 * (issue 30, item 4) against stock llama.cpp on the golden model: the
 * regenerated m4.gguf (tests/data/imatrix/PROVENANCE), stock tensors from
 * node-llama-cpp's libllama (llama_model_quantize through
 * pn-llama-quantize --imatrix) checked against llama-quantize's golden
 * hashes, and our weighted error at most theirs on every such tensor,
 * measured by one decoder.
 *
 * Here the tests that run the built programs; those that call the library
 * are in tests/quant/test_imatrix_kquants.c. */
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
