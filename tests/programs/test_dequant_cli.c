/* pn-dequant: a PN file made in the test decodes, tensor by
 * tensor, to exactly the floats the decoders give (rotation undone), within
 * each type's error of the source, with the pn.* keys renamed, and the result
 * is a GGUF that an independent parser reads.
 *
 * Here the tests that run the built programs; those that call the library
 * are in tests/dequant/test_dequant.c. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fixtures/dequant_files.h"
#include "fixtures/gguf_bytes.h"
#include "fixtures/long_row.h"
#include "dequant/dequant.h"
#include "gguf/header_hash.h"
#include "fixtures/pn_model.h"
#include "test_util.h"
#include "gguf/gguf_testing.h"

static char *g_dir;
static fx_model g_model;
static char g_src[4096], g_good[4096];

static void setup(void)
{
    fx_make_folder(&g_dir, &g_model, g_src, g_good);
}

static void teardown(void)
{
    fx_remove_folder(&g_dir, &g_model);
}

TestSuite(pn_dequant, .init = setup, .fini = teardown, .timeout = 60);

/* A path in the test folder (static storage, a few at a time). */
static const char *path_in(const char *name)
{
    return tu_join_static(g_dir, name);
}

static const char *dequantized(const char *name, const char *options)
{
    const char *out_path = path_in(name);
    char *out, *err;
    int rc = tu_run_program(&out, &err, "pn-dequant", "%s '%s' '%s'", options, g_good, out_path);
    cr_assert_eq(rc, 0, "pn-dequant %s: rc %d\n%s%s", options, rc, out, err);
    cr_assert_str_empty(err, "%s", err);
    cr_assert(strstr(out, "7 tensors (3 PN"), "%s", out);
    free(out);
    free(err);
    return out_path;
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
            cr_assert_eq(pn_dequantize_row_type(ti->type, d + r * rb, row, K), PN_OK);
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
    gguf_reader *pn = dequant_open_or_fail(g_good), *r = dequant_open_or_fail(path);
    cr_assert_eq(gguf_reader_n_tensors(r), FX_N);
    /* Bounds on E for these Gaussian-like weights, by the PN file's type. */
    static const struct {
        int type;
        double max;
    } bound[] = {
        { PN_TYPE_F32, 0 },     { PN_TYPE_PN3T, 0.06 }, { PN_TYPE_PN4T, 0.02 },
        { PN_TYPE_Q8_0, 2e-4 }, { PN_TYPE_Q4_K, 0.02 }, { PN_TYPE_Q3_K, 0.06 },
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
            cr_assert(memcmp(&got[e], &ref, sizeof ref) == 0,
                      "%s element %lld: %.9g, expected %.9g", b->name, (long long)e, got[e], ref);
        }
        if (!keep_rotation) {
            double E = rel_error(g_model.w[i], got, n);
            double max = -1;
            for (size_t k = 0; k < sizeof bound / sizeof bound[0]; k++)
                if (bound[k].type == a->type)
                    max = bound[k].max;
            if (out_type != PN_TYPE_F32 && max >= 0)
                max += out_type == PN_TYPE_BF16 ? 1e-4 : 1e-6; /* the output's own rounding */
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
    gguf_reader *r = dequant_open_or_fail(p);
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
    static const struct {
        const char *opt;
        uint32_t ftype;
    } cases[] = {
        { "", 0 },
        { "--type f16", 1 },
        { "--type bf16", 32 },
    };
    for (size_t k = 0; k < 3; k++) {
        gguf_reader *r = dequant_open_or_fail(dequantized(k == 0   ? "a.gguf"
                                                          : k == 1 ? "b.gguf"
                                                                   : "c.gguf",
                                                          cases[k].opt));
        expect_u32_key(r, "general.file_type", cases[k].ftype);
        cr_assert_null(gguf_reader_find_kv(r, "general.quantization_version"));
        /* no pn.* key but the output's own header hash (pn.header.*) */
        for (size_t i = 0; i < gguf_reader_n_kv(r); i++) {
            gguf_str key = gguf_reader_kv(r, i)->key;
            bool record = key.len >= 10 && memcmp(key.data, "pn.header.", 10) == 0;
            cr_assert(record || !(key.len >= 3 && memcmp(key.data, "pn.", 3) == 0), "key %.*s kept",
                      (int)key.len, key.data);
            cr_assert(!(key.len >= 18 && memcmp(key.data, "pn_decoded.header.", 18) == 0),
                      "the input's header hash renamed: %.*s", (int)key.len, key.data);
        }
        gguf_header_verdict hv;
        gguf_header_hash_verify(r, &hv);
        cr_assert_eq(hv.proof, GGUF_HEADER_PROVEN, "%s", hv.message);
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

Test(pn_dequant, refuses_an_existing_output_unless_forced)
{
    const char *p = path_in("exists.gguf");
    cr_assert_eq(tu_write_file(p, "keep me", 7), 0);
    char *out, *err;
    int rc = tu_run_program(&out, &err, "pn-dequant", "'%s' '%s'", g_good, p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(strstr(err, "exists"), "%s", err);
    size_t n;
    char *kept = tu_read_file(p, &n);
    cr_assert(n == 7 && memcmp(kept, "keep me", 7) == 0, "the existing file is untouched");
    free(kept);
    free(out);
    free(err);
    rc = tu_run_program(&out, &err, "pn-dequant", "--force --quiet '%s' '%s'", g_good, p);
    cr_assert_eq(rc, 0, "%s%s", out, err);
    cr_assert_str_empty(out);
    gguf_reader_close(dequant_open_or_fail(p));
    free(out);
    free(err);
}

/* A path refused before anything is done is a usage error: status 2, as in
 * pn-quantize (cmd/cli.h), not the 1 of a failure while writing. */
Test(pn_dequant, an_output_that_is_its_input_is_a_usage_error_even_with_force)
{
    char *out, *err;
    int rc = tu_run_program(&out, &err, "pn-dequant", "--force '%s' '%s'", g_good, g_good);
    cr_assert_eq(rc, 2, "the input is never the output: %s%s", out, err);
    cr_assert(strstr(err, "is the input"), "%s", err);
    cr_assert(tu_exists(g_good));
    free(out);
    free(err);
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
    fx_fix_crcs(bad); /* the block itself is invalid, not damaged in storage */
    int before = dequant_count_entries(g_dir);
    char *out, *err;
    int rc = tu_run_program(&out, &err, "pn-dequant", "'%s' '%s'", bad, path_in("never.gguf"));
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(strstr(err, "tensor 'blk.0.ffn_down.weight' row 2 block 1"), "%s", err);
    cr_assert_eq(dequant_count_entries(g_dir), before, "no output and no temporary file are left");
    free(out);
    free(err);
}

Test(pn_dequant, refuses_bad_usage_with_status_2)
{
    static const char *const cases[] = { "", "only-one.gguf", "--type q8_0 a b", "--bogus a b",
                                         "--threads 0 a b" };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, *err;
        int rc = tu_run_program(&out, &err, "pn-dequant", "%s", cases[i]);
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
    int rc = tu_run_program(&out, &err, "pn-check", "--source '%s' '%s'", g_src, p);
    cr_assert_eq(rc, 0, "%s%s", out, err);
    /* No PN tensors and no pn.* keys any more: one warning says so. */
    cr_assert(strstr(out, "warning PN-META-MISSING key pn.*: no pn.* keys and no PN tensors"), "%s",
              out);
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
    cr_assert(strstr(out, "\"name\":\"blk.0.attn_q.weight\",\"n_dims\":2,\"shape\":[\"320\",\"16\"]"
                          ",\"dtype\":30"),
              "%s", out);
    cr_assert(
        strstr(out,
               "\"name\":\"blk.0.attn_norm.weight\",\"n_dims\":1,\"shape\":[\"320\"],\"dtype\":0"),
        "%s", out);
    cr_assert(strstr(out, "{\"key\":\"general.file_type\",\"type\":\"uint32\",\"value\":32}"), "%s",
              out);
    cr_assert(
        strstr(out,
               "{\"key\":\"pn_decoded.format\",\"type\":\"string\",\"value\":\"PNX-FORMAT-v0\"}"),
        "%s", out);
    free(out);
    free(err);
}

/* ---- hostile inputs: refused naming the file, never a crash or a hang ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

Test(pn_dequant, a_summary_that_cannot_be_written_is_an_error_exit)
{
    const char *p = path_in("out.gguf");
    char *out, *err;
    int rc = tu_run_program(&out, &err, "pn-dequant", "'%s' '%s' >/dev/full", g_good, p);
    cr_assert_eq(rc, 1, "rc %d\n%s", rc, err);
    cr_assert_str_empty(out);
    char want[4300];
    snprintf(want, sizeof want,
             "pn-dequant: error: %s was written, but the summary could not be written to standard "
             "output: No space left on device\n",
             p);
    cr_assert_str_eq(err, want);
    free(out);
    free(err);
    rc = tu_run_program(&out, &err, "pn-dequant", "--help >/dev/full");
    cr_assert_eq(rc, 1, "rc %d\n%s", rc, err);
    cr_assert_str_eq(
        err, "pn-dequant: error: cannot write to standard output: No space left on device\n");
    free(out);
    free(err);
}

Test(pn_dequant, a_file_size_limit_is_a_clean_error_leaving_nothing)
{
    const char *p = path_in("limited.gguf");
    int before = dequant_count_entries(g_dir);
    char cmd[9000], *out, *err;
    /* 8 blocks: 4 KiB under dash, 8 KiB under bash; the output is ~60 KB */
    snprintf(cmd, sizeof cmd, "sh -c 'ulimit -f 8; exec %s/pn-dequant \"$0\" \"$1\"' '%s' '%s'",
             PN_BIN_DIR, g_good, p);
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 1, "rc %d (153 is SIGXFSZ)\n%s%s", rc, out, err);
    cr_assert(strncmp(err, "pn-dequant: ", 12) == 0 && strstr(err, p), "names the output: %s", err);
    cr_assert(strstr(err, "file size limit"), "%s", err);
    cr_assert_str_empty(out);
    cr_assert_eq(access(p, F_OK), -1, "nothing at OUT");
    cr_assert_eq(dequant_count_entries(g_dir), before, "no temporary file is left");
    free(out);
    free(err);
}

Test(pn_dequant, refuses_a_fifo_as_input_at_once)
{
    const char *fifo = path_in("fifo"), *p = path_in("never.gguf");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    char cmd[9000], *out, *err;
    snprintf(cmd, sizeof cmd, "timeout 20 %s/pn-dequant '%s' '%s'", PN_BIN_DIR, fifo, p);
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 1, "rc %d (124: it hung)\n%s%s", rc, out, err);
    cr_assert(strstr(err, fifo) && strstr(err, "FIFO"), "%s", err);
    cr_assert_eq(access(p, F_OK), -1);
    free(out);
    free(err);
}

Test(pn_dequant, refuses_an_empty_key_or_one_holding_a_nul_naming_its_offset)
{
    static const struct {
        const char *key;
        size_t len;
        const char *says;
    } cases[] = {
        { "", 0, "has an empty key" },
        { "a\0b", 3, "holds a NUL byte" },
    };
    for (int k = 0; k < 2; k++) {
        gb b = { 0 };
        gb_header(&b, 0, 1);
        gb_kv_str(&b, cases[k].key, cases[k].len, "v", 1);
        const char *in = path_in("key.gguf"), *p = path_in("never.gguf");
        gb_save(&b, in);
        char *out, *err;
        int rc = tu_run_program(&out, &err, "pn-dequant", "'%s' '%s'", in, p);
        cr_assert_eq(rc, 1, "%s%s", out, err);
        char want[4200];
        snprintf(want, sizeof want, "pn-dequant: error: %s: at byte 24: ", in);
        cr_assert(strncmp(err, want, strlen(want)) == 0, "%s", err);
        cr_assert(strstr(err, cases[k].says), "%s", err);
        cr_assert_eq(access(p, F_OK), -1);
        free(out);
        free(err);
    }
}

/* The good file with `bits` stored (n bytes) at byte `at`, its
 * pn.tensor_crc32 made to match (a file another tool wrote so): the
 * decoder's own checks of what it decodes, past the CRC check that stops
 * damage (decode_crc/ in test_program_conventions.c). */
static const char *with_bits(const char *from, const char *name, uint64_t at, uint32_t bits, int n)
{
    size_t size;
    uint8_t *buf = tu_read_file(from, &size);
    for (int i = 0; i < n; i++)
        buf[at + i] = (uint8_t)(bits >> (8 * i));
    const char *p = path_in(name);
    cr_assert_eq(tu_write_file(p, buf, size), 0);
    free(buf);
    fx_fix_crcs(p);
    return p;
}

static uint64_t block_at(const char *path, int t, int64_t row, int64_t block, int field)
{
    const pn_type_traits *tt = pn_type_traits_get(fx_specs[t].type);
    return fx_data_offset(path, fx_specs[t].name, NULL) +
           (uint64_t)(row * pn_type_row_bytes(fx_specs[t].type, fx_specs[t].K) +
                      block * tt->block_bytes + field);
}

static void expect_refused(const char *in, const char *options, const char *says)
{
    const char *p = path_in("never.gguf");
    int before = dequant_count_entries(g_dir);
    char *out, *err;
    int rc = tu_run_program(&out, &err, "pn-dequant", "%s '%s' '%s'", options, in, p);
    cr_assert_eq(rc, 1, "%s: rc %d\n%s%s", options, rc, out, err);
    /* --threads above the CPUs this process may use: one note first */
    char note[160] = "";
    const char *t = strstr(options, "--threads ");
    int cpus = tu_usable_cpus(), n = t ? atoi(t + 10) : 0;
    if (n > cpus)
        snprintf(note, sizeof note,
                 "pn-dequant: --threads %d: this process may use %d CPU%s; "
                 "using %d\n",
                 n, cpus, cpus == 1 ? "" : "s", cpus);
    char want[4600];
    snprintf(want, sizeof want,
             "%spn-dequant: error: %s: %s; the file is invalid (pn-check tells more)\n", note, in,
             says);
    cr_assert_str_eq(err, want, "%s", options);
    cr_assert_eq(dequant_count_entries(g_dir), before, "nothing left behind");
    free(out);
    free(err);
}

Test(pn_dequant, refuses_non_finite_weights_whatever_the_output_type)
{
    /* ssm_alpha stored as f16 and bf16: copied when the output type is its
     * own, widened otherwise; the norm is f32, always copied. */
    static const struct {
        int type;
        uint16_t bits;
        const char *says;
    } cases[] = {
        { PN_TYPE_F16, 0x7e00,
          "tensor 'blk.0.ssm_alpha.weight' (f16) row 2 column 7: the weight is "
          "NaN (0x7e00)" },
        { PN_TYPE_BF16, 0xff80,
          "tensor 'blk.0.ssm_alpha.weight' (bf16) row 2 column 7: the weight is "
          "infinite (0xff80)" },
    };
    static const char *const types[] = { "--type f32", "--type f16", "--type bf16" };
    for (size_t k = 0; k < 2; k++) {
        fx_pn_opts o = { .tensor = "blk.0.ssm_alpha.weight", .store_type = cases[k].type };
        const char *made = path_in("float.gguf");
        fx_write_pn(made, &g_model, &o);
        uint64_t at = fx_data_offset(made, "blk.0.ssm_alpha.weight", NULL) + (2 * 320 + 7) * 2;
        const char *bad = with_bits(made, "bad.gguf", at, cases[k].bits, 2);
        for (int t = 0; t < 3; t++)
            expect_refused(bad, types[t], cases[k].says);
    }
    uint64_t at = fx_data_offset(g_good, fx_specs[FX_NORM].name, NULL) + 17 * 4;
    const char *bad = with_bits(g_good, "norm.gguf", at, 0x7fc00000, 4);
    for (int t = 0; t < 3; t++)
        expect_refused(bad, types[t],
                       "tensor 'blk.0.attn_norm.weight' (f32) row 0 column 17: the "
                       "weight is NaN (0x7fc00000)");
}

Test(pn_dequant, refuses_non_finite_scales_naming_the_block_and_field)
{
    static const struct {
        int t;
        int64_t row, block;
        int field;
        uint16_t bits;
        const char *says;
    } cases[] = {
        { FX_ALPHA, 1, 3, 0, 0x7e00,
          "tensor 'blk.0.ssm_alpha.weight' (q8_0) row 1 block 3: the scale d is NaN (0x7e00)" },
        { FX_OUTPUT, 2, 0, 2, 0xfc00,
          "tensor 'output.weight' (q4_K) row 2 block 0: the scale dmin is infinite (0xfc00)" },
        { FX_EMBD, 4, 0, 108, 0x7c01,
          "tensor 'token_embd.weight' (q3_K) row 4 block 0: the scale d is NaN (0x7c01)" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        uint64_t at = block_at(g_good, cases[k].t, cases[k].row, cases[k].block, cases[k].field);
        const char *bad = with_bits(g_good, "scale.gguf", at, cases[k].bits, 2);
        expect_refused(bad, "--type f32", cases[k].says);
        expect_refused(bad, "--type bf16 --threads 3", cases[k].says);
    }
}

Test(pn_dequant, prints_hostile_names_in_errors_safely)
{
    /* A NaN weight in a tensor whose name holds terminal escapes, a newline
     * and invalid UTF-8: the error names it, in its \xNN form. */
    const char *name = "x\x1b]0;x\x07\x1b[2J\ny\xff\xc3z";
    gb b = { 0 };
    gb_header(&b, 1, 0);
    gb_tensor(&b, name, strlen(name), 1, (const uint64_t[]){ 8 }, PN_TYPE_F32, 0);
    gb_pad(&b, 32);
    float w[8] = { 1, 2, 3, NAN, 5, 6, 7, 8 };
    gb_put(&b, w, sizeof w);
    const char *in = path_in("hostile.gguf");
    gb_save(&b, in);
    char *out, *err;
    int rc = tu_run_program(&out, &err, "pn-dequant", "'%s' '%s'", in, path_in("never.gguf"));
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(strstr(err, "tensor 'x\\x1b]0;x\\x07\\x1b[2J\\x0ay\\xff\\xc3z' (f32) row 0 column 3"),
              "%s", err);
    for (const unsigned char *q = (const unsigned char *)err; *q; q++)
        cr_assert(*q == '\n' || (*q >= 0x20 && *q < 0x7f), "raw byte 0x%02x in %s", *q, err);
    cr_assert_eq(strchr(err, '\n'), err + strlen(err) - 1, "one line: %s", err);
    free(out);
    free(err);
}

Test(pn_dequant, decodes_20k_small_tensors_in_linear_time_even_with_64_threads)
{
    /* One pn4t block per tensor. Starting 64 threads per tensor on a small
     * machine took minutes; the tensors are decoded without starting any. */
    enum { N = 20000 };
    gb b = { 0 };
    gb_header(&b, N, 1);
    gb_kv_str(&b, "pn.rotation.type", 16, "hadamard", 8);
    for (int i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "t.%05d", i);
        gb_tensor(&b, name, strlen(name), 1, (const uint64_t[]){ 64 }, PN_TYPE_PN4T,
                  (uint64_t)i * 64);
    }
    gb_pad(&b, 32);
    uint8_t block[64] = { 0x00, 0x3c, 0x12, 0x34 };
    for (int i = 0; i < N; i++)
        gb_put(&b, block, i + 1 < N ? 64 : PN_BLOCK_BYTES);
    const char *in = path_in("20k.gguf"), *p = path_in("20k-out.gguf");
    gb_save(&b, in);
    char *out, *err;
    double t0 = now_s();
    int rc = tu_run_program(&out, &err, "pn-dequant", "--threads 64 '%s' '%s'", in, p);
    double dt = now_s() - t0;
    cr_assert_eq(rc, 0, "%s%s", out, err);
    cr_assert(strstr(out, "20000 tensors (20000 PN, rotation undone"), "%s", out);
    cr_log_info("pn-dequant, 20k tensors, 64 threads: %.2f s", dt);
    /* The writer's check of each new name against the earlier ones is still
     * quadratic: about 1 s here, 12 s under the sanitizers' strcmp. */
#if defined(__SANITIZE_ADDRESS__)
    const double bound = 45;
#else
    const double bound = 20;
#endif
    cr_assert_lt(dt, bound, "%.1f s", dt);
    free(out);
    free(err);
}
