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
