/* test_dequant.c - pn-dequant: a PN file made in the test decodes, tensor by
 * tensor, to exactly the floats the decoders give (rotation undone), within
 * each type's error of the source, with the pn.* keys renamed, and the result
 * is a GGUF that an independent parser reads. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/dequant.h"
#include "pn_model_fixture.h"
#include "test_util.h"

static char *g_dir;
static fx_model g_model;
static char g_src[4096], g_good[4096];

static void setup(void)
{
    g_dir = tu_mkdtemp();
    fx_make_model(&g_model);
    snprintf(g_src, sizeof g_src, "%s/source.gguf", g_dir);
    snprintf(g_good, sizeof g_good, "%s/good.gguf", g_dir);
    fx_write_source(g_src, &g_model);
    fx_write_pn(g_good, &g_model, NULL);
}

static void teardown(void)
{
    fx_free_model(&g_model);
    tu_rm_rf(g_dir);
    free(g_dir);
}

TestSuite(pn_dequant, .init = setup, .fini = teardown, .timeout = 60);

static const char *path_in(const char *name)
{
    static char buf[8][4096];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 4096, "%s/%s", g_dir, name);
    return p;
}

static int run_tool(char **out, char **err, const char *tool, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int run_tool(char **out, char **err, const char *tool, const char *fmt, ...)
{
    char args[8192], cmd[9000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s/%s %s", PN_BIN_DIR, tool, args);
    return tu_run(cmd, out, err);
}

static const char *dequantized(const char *name, const char *options)
{
    const char *out_path = path_in(name);
    char *out, *err;
    int rc = run_tool(&out, &err, "pn-dequant", "%s '%s' '%s'", options, g_good, out_path);
    cr_assert_eq(rc, 0, "pn-dequant %s: rc %d\n%s%s", options, rc, out, err);
    cr_assert_str_empty(err, "%s", err);
    cr_assert(strstr(out, "7 tensors (3 PN"), "%s", out);
    free(out);
    free(err);
    return out_path;
}

static gguf_reader *open_or_fail(const char *path)
{
    gguf_reader *r = NULL;
    pn_error e = {0};
    cr_assert_eq(gguf_reader_open(path, &r, &e), PN_OK, "%s", e.msg);
    return r;
}

/* What tensor i of the PN file decodes to: un-rotated unless keep_rotation. */
static float *expected_decode(const gguf_reader *pn, size_t i, bool keep_rotation)
{
    const gguf_tensor_info *ti = gguf_reader_tensor(pn, i);
    const int64_t K = ti->ne[0], rows = ti->ne[1] * ti->ne[2] * ti->ne[3];
    float *y = malloc((size_t)(K * rows) * sizeof *y);
    const uint8_t *d = gguf_reader_tensor_data(pn, i);
    const int64_t rb = pn_type_row_bytes(ti->type, K);
    for (int64_t r = 0; r < rows; r++) {
        float *row = y + r * K;
        if (pn_type_is_pn(ti->type)) {
            pn_dequantize_row(ti->type, d + r * rb, row, K);
            if (!keep_rotation)
                pn_hadamard_rotate_row(row, K, pn_hadamard_block_size(K, 1024));
        } else {
            cr_assert_eq(pn_dequantize_row_stock(ti->type, d + r * rb, row, K), PN_OK);
        }
    }
    return y;
}

static double rel_error(const float *w, const float *y, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)w[i] - y[i]) * ((double)w[i] - y[i]);
        den += (double)w[i] * w[i];
    }
    return num / den;
}

/* Checks names, order, shapes, types and every value of a decoded file. */
static void expect_decoded(const char *path, int out_type, bool keep_rotation)
{
    gguf_reader *pn = open_or_fail(g_good), *r = open_or_fail(path);
    cr_assert_eq(gguf_reader_n_tensors(r), FX_N);
    /* Bounds on E for these Gaussian-like weights, by the PN file's type. */
    static const struct { int type; double max; } bound[] = {
        {PN_TYPE_F32, 0}, {PN_TYPE_PN3T, 0.06}, {PN_TYPE_PN4T, 0.02}, {PN_TYPE_Q8_0, 2e-4},
        {PN_TYPE_Q4_K, 0.02}, {PN_TYPE_Q3_K, 0.06},
    };
    for (size_t i = 0; i < FX_N; i++) {
        const gguf_tensor_info *a = gguf_reader_tensor(pn, i), *b = gguf_reader_tensor(r, i);
        cr_assert_str_eq(b->name, fx_specs[i].name);
        cr_assert_eq(b->n_dims, a->n_dims, "%s", b->name);
        cr_assert_arr_eq(b->ne, a->ne, sizeof a->ne, "%s", b->name);
        const int want = a->type == PN_TYPE_F32 ? PN_TYPE_F32 : out_type;
        cr_assert_eq(b->type, want, "%s: type %d, expected %d", b->name, b->type, want);

        const int64_t n = fx_count((int)i);
        float *y = expected_decode(pn, i, keep_rotation);
        float *got = malloc((size_t)n * sizeof *got);
        cr_assert_eq(pn_widen_row(b->type, gguf_reader_tensor_data(r, i), got, n), PN_OK);
        for (int64_t e = 0; e < n; e++) {
            float ref = y[e];
            if (want == PN_TYPE_F16)
                ref = pn_fp16_to_float(pn_fp16_from_float(ref));
            else if (want == PN_TYPE_BF16)
                ref = pn_bf16_to_float(pn_bf16_from_float(ref));
            cr_assert(memcmp(&got[e], &ref, sizeof ref) == 0, "%s element %lld: %.9g, expected %.9g",
                      b->name, (long long)e, got[e], ref);
        }
        if (!keep_rotation) {
            double E = rel_error(g_model.w[i], got, n);
            double max = -1;
            for (size_t k = 0; k < sizeof bound / sizeof bound[0]; k++)
                if (bound[k].type == a->type)
                    max = bound[k].max;
            if (out_type != PN_TYPE_F32 && max >= 0)
                max += out_type == PN_TYPE_BF16 ? 1e-4 : 1e-6;   /* the output's own rounding */
            cr_assert(E <= max, "%s (%d): relative error %g > %g", b->name, a->type, E, max);
        }
        free(y);
        free(got);
    }
    gguf_reader_close(pn);
    gguf_reader_close(r);
}

Test(pn_dequant, decodes_every_tensor_exactly_with_the_rotation_undone)
{
    expect_decoded(dequantized("out.gguf", ""), PN_TYPE_F32, false);
}

Test(pn_dequant, keeps_the_rotated_domain_when_asked)
{
    const char *p = dequantized("rot.gguf", "--keep-rotation");
    expect_decoded(p, PN_TYPE_F32, true);
    gguf_reader *r = open_or_fail(p);
    const gguf_kv *kv = gguf_reader_find_kv(r, "pn_decoded.rotation_undone");
    cr_assert(kv && kv->type == GGUF_TYPE_BOOL && kv->v.u64 == 0);
    gguf_reader_close(r);
}

Test(pn_dequant, writes_f16_and_bf16_tensors_when_asked)
{
    expect_decoded(dequantized("f16.gguf", "--type f16"), PN_TYPE_F16, false);
    expect_decoded(dequantized("bf16.gguf", "--type bf16 --threads 1"), PN_TYPE_BF16, false);
}

static void expect_u32_key(const gguf_reader *r, const char *key, uint32_t v)
{
    const gguf_kv *kv = gguf_reader_find_kv(r, key);
    cr_assert_not_null(kv, "no %s", key);
    cr_assert_eq(kv->type, GGUF_TYPE_UINT32, "%s", key);
    cr_assert_eq(kv->v.u64, v, "%s", key);
}

Test(pn_dequant, renames_the_pn_keys_and_sets_the_file_type)
{
    static const struct { const char *opt; uint32_t ftype; } cases[] = {
        {"", 0}, {"--type f16", 1}, {"--type bf16", 32},
    };
    for (size_t k = 0; k < 3; k++) {
        gguf_reader *r = open_or_fail(dequantized(k == 0 ? "a.gguf" : k == 1 ? "b.gguf" : "c.gguf",
                                                  cases[k].opt));
        expect_u32_key(r, "general.file_type", cases[k].ftype);
        cr_assert_null(gguf_reader_find_kv(r, "general.quantization_version"));
        for (size_t i = 0; i < gguf_reader_n_kv(r); i++) {
            gguf_str key = gguf_reader_kv(r, i)->key;
            cr_assert(!(key.len >= 3 && memcmp(key.data, "pn.", 3) == 0), "key %.*s kept",
                      (int)key.len, key.data);
        }
        const gguf_kv *f = gguf_reader_find_kv(r, "pn_decoded.format");
        cr_assert(f && f->type == GGUF_TYPE_STRING && gguf_str_eq(f->v.str, "PNX-FORMAT-v0"));
        const gguf_kv *crc = gguf_reader_find_kv(r, "pn_decoded.tensor_crc32");
        cr_assert(crc && crc->arr_type == GGUF_TYPE_UINT32 && crc->arr_count == FX_N);
        const gguf_kv *mix = gguf_reader_find_kv(r, "pn_decoded.mix");
        cr_assert(mix && gguf_str_eq(mix->v.str, "T0+1"));
        const gguf_kv *u = gguf_reader_find_kv(r, "pn_decoded.rotation_undone");
        cr_assert(u && u->type == GGUF_TYPE_BOOL && u->v.u64 == 1);
        const gguf_kv *arch = gguf_reader_find_kv(r, "general.architecture");
        cr_assert(arch && gguf_str_eq(arch->v.str, "fixture"));
        gguf_reader_close(r);
    }
}

Test(pn_dequant, gives_the_same_bytes_for_any_thread_count_and_chunk_size)
{
    pn_dequant_opts o;
    pn_dequant_opts_init(&o);
    pn_error err = {0};
    pn_dequant_stats s;
    o.threads = 1;
    cr_assert_eq(pn_dequant_file(g_good, path_in("t1.gguf"), &o, &s, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(s.n_pn, 3);
    cr_assert_eq(s.n_stock, 3);
    cr_assert_eq(s.n_copied, 1);
    cr_assert(s.rotation_undone);
    cr_assert_eq(s.rotation_cap, 1024);
    o.threads = 3;
    o.chunk_bytes = 100;   /* less than one segment: one segment per chunk */
    cr_assert_eq(pn_dequant_file(g_good, path_in("t3.gguf"), &o, &s, &err), PN_OK, "%s", err.msg);
    size_t n1, n3;
    uint8_t *a = tu_read_file(path_in("t1.gguf"), &n1), *b = tu_read_file(path_in("t3.gguf"), &n3);
    cr_assert_eq(n1, n3);
    cr_assert(memcmp(a, b, n1) == 0);
    free(a);
    free(b);
}

Test(pn_dequant, refuses_an_existing_output_unless_forced)
{
    const char *p = path_in("exists.gguf");
    cr_assert_eq(tu_write_file(p, "keep me", 7), 0);
    char *out, *err;
    int rc = run_tool(&out, &err, "pn-dequant", "'%s' '%s'", g_good, p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(strstr(err, "exists"), "%s", err);
    size_t n;
    char *kept = tu_read_file(p, &n);
    cr_assert(n == 7 && memcmp(kept, "keep me", 7) == 0, "the existing file is untouched");
    free(kept);
    free(out);
    free(err);
    rc = run_tool(&out, &err, "pn-dequant", "--force --quiet '%s' '%s'", g_good, p);
    cr_assert_eq(rc, 0, "%s%s", out, err);
    cr_assert_str_empty(out);
    gguf_reader_close(open_or_fail(p));
    free(out);
    free(err);
    rc = run_tool(&out, &err, "pn-dequant", "--force '%s' '%s'", g_good, g_good);
    cr_assert_eq(rc, 1, "the input is never the output: %s%s", out, err);
    cr_assert(strstr(err, "is the input"), "%s", err);
    free(out);
    free(err);
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

Test(pn_dequant, leaves_nothing_behind_when_a_block_is_invalid)
{
    /* A NaN scale in row 2 block 1 of ffn_down. */
    uint64_t at = fx_data_offset(g_good, "blk.0.ffn_down.weight", NULL) +
                  (uint64_t)(2 * pn_type_row_bytes(PN_TYPE_PN4T, 384) + PN_BLOCK_BYTES);
    size_t n;
    uint8_t *buf = tu_read_file(g_good, &n);
    pn_store_u16le(buf + at, 0x7e00);
    const char *bad = path_in("bad.gguf");
    cr_assert_eq(tu_write_file(bad, buf, n), 0);
    free(buf);
    int before = count_entries(g_dir);
    char *out, *err;
    int rc = run_tool(&out, &err, "pn-dequant", "'%s' '%s'", bad, path_in("never.gguf"));
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(strstr(err, "tensor 'blk.0.ffn_down.weight' row 2 block 1"), "%s", err);
    cr_assert_eq(count_entries(g_dir), before, "no output and no temporary file are left");
    free(out);
    free(err);
}

Test(pn_dequant, refuses_bad_usage_with_status_2)
{
    static const char *const cases[] = {"", "only-one.gguf", "--type q8_0 a b", "--bogus a b",
                                        "--threads 0 a b"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, *err;
        int rc = run_tool(&out, &err, "pn-dequant", "%s", cases[i]);
        cr_assert_eq(rc, 2, "'%s': rc %d", cases[i], rc);
        cr_assert(strstr(err, "pn-dequant: "), "'%s': %s", cases[i], err);
        free(out);
        free(err);
    }
}

Test(pn_dequant, output_checks_clean_against_the_source)
{
    const char *p = dequantized("out.gguf", "");
    char *out, *err;
    int rc = run_tool(&out, &err, "pn-check", "--source '%s' '%s'", g_src, p);
    cr_assert_eq(rc, 0, "%s%s", out, err);
    /* No PN tensors and no pn.* keys any more: one warning says so. */
    cr_assert(strstr(out, "warning PN-META-MISSING key pn.*: no pn.* keys and no PN tensors"), "%s", out);
    cr_assert(strstr(out, "valid (0 errors, 1 warning)"), "%s", out);
    free(out);
    free(err);
}

Test(pn_dequant, output_is_read_by_an_independent_gguf_parser)
{
    const char *script = PN_SOURCE_DIR "/tests/node/gguf-dump.mjs";
    const char *module = PN_SOURCE_DIR "/tests/node/node_modules/@huggingface/gguf/package.json";
    if (system("node --version >/dev/null 2>&1") != 0)
        cr_skip("node is not installed");
    if (access(script, R_OK) != 0 || access(module, R_OK) != 0)
        cr_skip("tests/node is not set up (npm ci --prefix tests/node)");
    const char *p = dequantized("out.gguf", "--type bf16");
    char cmd[9000], *out, *err;
    snprintf(cmd, sizeof cmd, "node '%s' '%s'", script, p);
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "%s%s", out, err);
    for (int i = 0; i < FX_N; i++) {
        char want[256];
        snprintf(want, sizeof want, "{\"name\":\"%s\",\"n_dims\":%u,", fx_specs[i].name,
                 fx_specs[i].n_dims);
        cr_assert(strstr(out, want), "no %s in %s", want, out);
    }
    cr_assert(strstr(out, "\"name\":\"blk.0.attn_q.weight\",\"n_dims\":2,\"shape\":[\"320\",\"16\"],\"dtype\":30"),
              "%s", out);
    cr_assert(strstr(out, "\"name\":\"blk.0.attn_norm.weight\",\"n_dims\":1,\"shape\":[\"320\"],\"dtype\":0"),
              "%s", out);
    cr_assert(strstr(out, "{\"key\":\"general.file_type\",\"type\":\"uint32\",\"value\":32}"), "%s", out);
    cr_assert(strstr(out, "{\"key\":\"pn_decoded.format\",\"type\":\"string\",\"value\":\"PNX-FORMAT-v0\"}"),
              "%s", out);
    free(out);
    free(err);
}
