/* Hugging Face checkpoints: pn-convert reproduces llama.cpp's converter on the
 * golden tiny Qwen3.5 checkpoint (tests/data/hf-qwen35-tiny: the converter's
 * own outputs), byte for byte per tensor and key for key except general.*,
 * from each form of SRC (folder, config.json, index, hub-cache symlinks). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "test_util.h"

#define HFDATA PN_TEST_DATA "/hf-qwen35-tiny"
#define CONVERT PN_BIN_DIR "/pn-convert"

static char *g_dir;
static void setup(void) { g_dir = tu_mkdtemp(); }
static void teardown(void)
{
    tu_rm_rf(g_dir);
    free(g_dir);
}

static bool kv_equal(const gguf_kv *a, const gguf_kv *b)
{
    if (a->type != b->type) return false;
    switch (a->type) {
    case GGUF_TYPE_STRING:
        return a->v.str.len == b->v.str.len && memcmp(a->v.str.data, b->v.str.data, a->v.str.len) == 0;
    case GGUF_TYPE_ARRAY:
        return a->arr_type == b->arr_type && a->arr_count == b->arr_count &&
               a->arr_bytes == b->arr_bytes && memcmp(a->arr_data, b->arr_data, a->arr_bytes) == 0;
    case GGUF_TYPE_FLOAT32:
    case GGUF_TYPE_FLOAT64:
        return memcmp(&a->v.f64, &b->v.f64, sizeof(double)) == 0;
    default:
        return a->v.u64 == b->v.u64;
    }
}

/* general.* (the converter's naming heuristics) and split.* (the files of a
 * set) are not compared. */
static bool is_general(const gguf_kv *kv)
{
    if (kv->key.len >= 6 && memcmp(kv->key.data, "split.", 6) == 0) return true;
    return kv->key.len >= 8 && memcmp(kv->key.data, "general.", 8) == 0 &&
           !gguf_str_eq(kv->key, "general.file_type") &&
           !gguf_str_eq(kv->key, "general.quantization_version") &&
           !gguf_str_eq(kv->key, "general.architecture");
}

/* `got` equals the golden file `want`: every tensor (name, type, shape, in
 * the same order) byte for byte, every key except general.* (name, type,
 * value, in the same order). */
void hf_assert_same_model(const char *got, const char *want)
{
    gguf_reader *g = NULL, *w = NULL;
    pn_error err = {0};
    cr_assert_eq(gguf_reader_open(got, &g, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_reader_open(want, &w, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_reader_n_tensors(g), gguf_reader_n_tensors(w), "tensor count of %s", got);
    for (size_t i = 0; i < gguf_reader_n_tensors(w); i++) {
        const gguf_tensor_info *tg = gguf_reader_tensor(g, i), *tw = gguf_reader_tensor(w, i);
        cr_assert_str_eq(tg->name, tw->name, "tensor %zu", i);
        cr_assert_eq(tg->type, tw->type, "type of %s", tw->name);
        cr_assert_eq(tg->n_dims, tw->n_dims, "dims of %s", tw->name);
        for (int d = 0; d < GGUF_MAX_DIMS; d++) cr_assert_eq(tg->ne[d], tw->ne[d], "ne of %s", tw->name);
        cr_assert_eq(tg->size, tw->size);
        uint8_t *a = malloc(tg->size), *b = malloc(tw->size);
        cr_assert_eq(gguf_reader_read_tensor(g, i, 0, a, tg->size, &err), PN_OK, "%s", err.msg);
        cr_assert_eq(gguf_reader_read_tensor(w, i, 0, b, tw->size, &err), PN_OK, "%s", err.msg);
        cr_assert(memcmp(a, b, tg->size) == 0, "data of %s differs from the converter's", tw->name);
        free(a);
        free(b);
    }
    size_t ig = 0, iw = 0;
    for (;;) {
        while (ig < gguf_reader_n_kv(g) && is_general(gguf_reader_kv(g, ig))) ig++;
        while (iw < gguf_reader_n_kv(w) && is_general(gguf_reader_kv(w, iw))) iw++;
        if (ig == gguf_reader_n_kv(g) || iw == gguf_reader_n_kv(w)) break;
        const gguf_kv *a = gguf_reader_kv(g, ig), *b = gguf_reader_kv(w, iw);
        cr_assert(a->key.len == b->key.len && memcmp(a->key.data, b->key.data, a->key.len) == 0,
                  "key %zu is %.*s, the converter's is %.*s", ig, (int)a->key.len, a->key.data,
                  (int)b->key.len, b->key.data);
        cr_assert(kv_equal(a, b), "key %.*s differs", (int)b->key.len, b->key.data);
        ig++;
        iw++;
    }
    cr_assert_eq(ig, gguf_reader_n_kv(g), "%s has keys the converter does not write", got);
    cr_assert_eq(iw, gguf_reader_n_kv(w), "%s lacks keys the converter writes", got);
    gguf_reader_close(g);
    gguf_reader_close(w);
}

static void convert_ok(const char *opts, const char *src, const char *out)
{
    char cmd[8192], *o = NULL, *e = NULL;
    snprintf(cmd, sizeof cmd, "'%s' --quiet %s '%s' '%s'", CONVERT, opts, src, out);
    int rc = tu_run(cmd, &o, &e);
    cr_assert_eq(rc, 0, "pn-convert %s: exit %d, stderr: %s", opts, rc, e);
    cr_assert_str_eq(o, "", "--quiet prints nothing");
    free(o);
    free(e);
}

static void convert_and_compare(const char *opts, const char *src, const char *golden)
{
    char *out = tu_join(g_dir, "out.gguf");
    convert_ok(opts, src, out);
    hf_assert_same_model(out, golden);
    free(out);
}

TestSuite(hf_convert, .init = setup, .fini = teardown, .timeout = 120);

Test(hf_convert, reproduces_the_converters_bf16_file)
{
    convert_and_compare("--outtype bf16", HFDATA "/hf", HFDATA "/converted.bf16.gguf");
}

Test(hf_convert, reproduces_the_converters_f16_file)
{
    convert_and_compare("--outtype f16", HFDATA "/hf", HFDATA "/converted.f16.gguf");
}

Test(hf_convert, reproduces_the_converters_f32_file)
{
    convert_and_compare("--outtype f32", HFDATA "/hf", HFDATA "/converted.f32.gguf");
}

Test(hf_convert, reproduces_the_converters_no_mtp_file)
{
    convert_and_compare("--no-mtp", HFDATA "/hf", HFDATA "/converted.bf16.no-mtp.gguf");
}

Test(hf_convert, auto_outtype_is_bf16_for_a_bf16_checkpoint)
{
    convert_and_compare("", HFDATA "/hf", HFDATA "/converted.bf16.gguf");
}

Test(hf_convert, takes_config_json_or_the_index_as_src)
{
    convert_and_compare("", HFDATA "/hf/config.json", HFDATA "/converted.bf16.gguf");
    char *out = tu_join(g_dir, "out.gguf");
    unlink(out);
    free(out);
    convert_and_compare("", HFDATA "/hf/model.safetensors.index.json", HFDATA "/converted.bf16.gguf");
}

/* A hub-cache snapshot: every file a symlink into ../../blobs/. */
Test(hf_convert, reads_a_hub_cache_snapshot_of_symlinks)
{
    static const char *const files[] = {
        "config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
        "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json",
    };
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/m/blobs' '%s/m/snapshots/abc'", g_dir, g_dir);
    cr_assert_eq(tu_run(cmd, NULL, NULL), 0);
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(cmd, sizeof cmd,
                 "cp '%s/hf/%s' '%s/m/blobs/blob%zu' && ln -s '../../blobs/blob%zu' '%s/m/snapshots/abc/%s'",
                 HFDATA, files[i], g_dir, i, i, g_dir, files[i]);
        cr_assert_eq(tu_run(cmd, NULL, NULL), 0);
    }
    char *src = tu_join(g_dir, "m/snapshots/abc");
    convert_and_compare("", src, HFDATA "/converted.bf16.gguf");
    free(src);
}

/* Split outputs: gguf-split's names, and the set read as one model is the
 * converter's file. */
Test(hf_convert, writes_a_split_set_that_reads_as_the_converters_file)
{
    char *out = tu_join(g_dir, "out.gguf");
    convert_ok("--split-max-tensors 30", HFDATA "/hf", out);
    char *first = tu_join(g_dir, "out-00001-of-00003.gguf");
    struct stat sb;
    cr_assert_eq(stat(first, &sb), 0, "first split %s", first);
    hf_assert_same_model(first, HFDATA "/converted.bf16.gguf");
    free(first);
    free(out);
}

/* ---- pn-quantize, pn-check --source on the folder ---- */

#define QUANTIZE PN_BIN_DIR "/pn-quantize"
#define CHECK PN_BIN_DIR "/pn-check"
#define TINY_RECIPE PN_TEST_DATA "/hf-tiny.mix"

static void run_ok(const char *cmdline)
{
    char *o = NULL, *e = NULL;
    int rc = tu_run(cmdline, &o, &e);
    cr_assert_eq(rc, 0, "%s: exit %d, stderr: %s", cmdline, rc, e);
    free(o);
    free(e);
}

/* Two pn-quantize outputs: every tensor the same bytes, every key the same
 * except general.* and pn.source.* (the folder and the file are two
 * sources). */
static bool skip_key(const gguf_kv *kv)
{
    return (kv->key.len >= 8 && memcmp(kv->key.data, "general.", 8) == 0) ||
           (kv->key.len >= 10 && memcmp(kv->key.data, "pn.source.", 10) == 0);
}

static void assert_same_quantized(const char *got, const char *want)
{
    gguf_reader *g = NULL, *w = NULL;
    pn_error err = {0};
    cr_assert_eq(gguf_reader_open(got, &g, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_reader_open(want, &w, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_reader_n_tensors(g), gguf_reader_n_tensors(w));
    for (size_t i = 0; i < gguf_reader_n_tensors(w); i++) {
        const gguf_tensor_info *tg = gguf_reader_tensor(g, i), *tw = gguf_reader_tensor(w, i);
        cr_assert_str_eq(tg->name, tw->name);
        cr_assert_eq(tg->type, tw->type, "type of %s", tw->name);
        cr_assert_eq(tg->size, tw->size);
        uint8_t *a = malloc(tg->size), *b = malloc(tw->size);
        cr_assert_eq(gguf_reader_read_tensor(g, i, 0, a, tg->size, &err), PN_OK, "%s", err.msg);
        cr_assert_eq(gguf_reader_read_tensor(w, i, 0, b, tw->size, &err), PN_OK, "%s", err.msg);
        cr_assert(memcmp(a, b, tg->size) == 0, "tensor %s differs", tw->name);
        free(a);
        free(b);
    }
    size_t ng = 0, nw = 0;
    for (size_t i = 0; i < gguf_reader_n_kv(w); i++) {
        const gguf_kv *b = gguf_reader_kv(w, i);
        if (skip_key(b)) continue;
        nw++;
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)b->key.len, b->key.data);
        const gguf_kv *a = gguf_reader_find_kv(g, key);
        cr_assert(a, "%s lacks key %s", got, key);
        cr_assert(kv_equal(a, b), "key %s differs", key);
    }
    for (size_t i = 0; i < gguf_reader_n_kv(g); i++) ng += !skip_key(gguf_reader_kv(g, i));
    cr_assert_eq(ng, nw, "%s has other keys", got);
    /* the types of all three kinds occur: the comparison covers each path */
    bool pn = false, stock = false, f32 = false;
    for (size_t i = 0; i < gguf_reader_n_tensors(g); i++) {
        int t = gguf_reader_tensor(g, i)->type;
        if (t == 0) f32 = true;
        else if (t == 1 || t == 8 || t == 30) stock = true;
        else pn = true;
    }
    cr_assert(pn && stock && f32, "the test recipe must give PN, stock and F32 tensors");
    gguf_reader_close(g);
    gguf_reader_close(w);
}

TestSuite(hf_quantize, .init = setup, .fini = teardown, .timeout = 240);

static void quantize_both(const char *opts, const char *golden)
{
    char cmd[8192];
    char *a = tu_join(g_dir, "from-folder.gguf"), *b = tu_join(g_dir, "from-file.gguf");
    snprintf(cmd, sizeof cmd, "'%s' --quiet --threads 2 --recipe '%s' %s '%s' '%s'", QUANTIZE,
             TINY_RECIPE, opts, HFDATA "/hf", a);
    run_ok(cmd);
    snprintf(cmd, sizeof cmd, "'%s' --quiet --threads 2 --recipe '%s' '%s' '%s'", QUANTIZE,
             TINY_RECIPE, golden, b);
    run_ok(cmd);
    assert_same_quantized(a, b);
    free(a);
    free(b);
}

Test(hf_quantize, the_folder_quantizes_as_the_converted_file_does_mtp_kept)
{
    quantize_both("", HFDATA "/converted.bf16.gguf");
}

Test(hf_quantize, the_folder_with_no_mtp_quantizes_as_the_no_mtp_converted_file_does)
{
    quantize_both("--no-mtp", HFDATA "/converted.bf16.no-mtp.gguf");
}

Test(hf_quantize, the_dry_run_gives_every_mtp_tensor_a_type)
{
    char cmd[8192], *o = NULL, *e = NULL;
    snprintf(cmd, sizeof cmd, "'%s' --dry-run --recipe '%s' '%s'", QUANTIZE, TINY_RECIPE,
             HFDATA "/hf");
    cr_assert_eq(tu_run(cmd, &o, &e), 0, "%s", e);
    /* every MTP tensor of the converter's file, with its type */
    static const char *const mtp[] = {
        "blk.4.nextn.eh_proj.weight", "blk.4.nextn.enorm.weight", "blk.4.nextn.hnorm.weight",
        "blk.4.nextn.shared_head_norm.weight", "blk.4.attn_q.weight", "blk.4.ffn_up.weight",
    };
    for (size_t i = 0; i < sizeof mtp / sizeof *mtp; i++)
        cr_assert(strstr(o, mtp[i]), "the dry run names %s:\n%s", mtp[i], o);
    cr_assert(strstr(o, "blk.4.nextn.eh_proj.weight") &&
              strstr(strstr(o, "blk.4.nextn.eh_proj.weight"), "q8_0"), "eh_proj is q8_0");
    free(o);
    free(e);
}

Test(hf_quantize, pn_check_takes_the_folder_as_source)
{
    char cmd[8192], *o = NULL, *e = NULL;
    char *a = tu_join(g_dir, "a.gguf");
    snprintf(cmd, sizeof cmd, "'%s' --quiet --threads 2 --recipe '%s' '%s' '%s'", QUANTIZE,
             TINY_RECIPE, HFDATA "/hf", a);
    run_ok(cmd);
    snprintf(cmd, sizeof cmd, "'%s' --source '%s' '%s'", CHECK, HFDATA "/hf", a);
    cr_assert_eq(tu_run(cmd, &o, &e), 0, "%s%s", o, e);
    cr_assert(strstr(o, "valid (0 errors"), "%s", o);
    free(o);
    free(e);
    /* against the converted file: the same data but another header (its
     * general.* keys), which the recorded identity tells apart */
    snprintf(cmd, sizeof cmd, "'%s' --source '%s' '%s'", CHECK, HFDATA "/converted.bf16.gguf", a);
    tu_run(cmd, &o, &e);
    cr_assert(strstr(o, "SRC-HEADER"), "the header hash of the folder is recorded: %s", o);
    free(o);
    free(e);
    free(a);
}
