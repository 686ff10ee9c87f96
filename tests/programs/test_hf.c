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
#include "gguf/header_hash.h"
#include "io/source_id.h"
#include "test_util.h"

#define HFDATA PN_TEST_DATA "/hf-qwen35-tiny"
#define CONVERT PN_BIN_DIR "/pn-convert"

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

static bool kv_equal(const gguf_kv *a, const gguf_kv *b)
{
    if (a->type != b->type)
        return false;
    switch (a->type) {
    case GGUF_TYPE_STRING:
        return a->v.str.len == b->v.str.len &&
               memcmp(a->v.str.data, b->v.str.data, a->v.str.len) == 0;
    case GGUF_TYPE_ARRAY:
        return a->arr_type == b->arr_type && a->arr_count == b->arr_count &&
               a->arr_bytes == b->arr_bytes && memcmp(a->arr_data, b->arr_data, a->arr_bytes) == 0;
    case GGUF_TYPE_FLOAT32:
    case GGUF_TYPE_FLOAT64: return memcmp(&a->v.f64, &b->v.f64, sizeof(double)) == 0;
    default: return a->v.u64 == b->v.u64;
    }
}

/* general.* (the converter's naming heuristics), split.* and pn.split.*
 * (the files of a set) are not compared. */
static bool is_general(const gguf_kv *kv)
{
    if (kv->key.len >= 6 && memcmp(kv->key.data, "split.", 6) == 0)
        return true;
    if (kv->key.len >= 9 && memcmp(kv->key.data, "pn.split.", 9) == 0)
        return true;
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
    pn_error err = { 0 };
    cr_assert_eq(gguf_reader_open(got, &g, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_reader_open(want, &w, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_reader_n_tensors(g), gguf_reader_n_tensors(w), "tensor count of %s", got);
    for (size_t i = 0; i < gguf_reader_n_tensors(w); i++) {
        const gguf_tensor_info *tg = gguf_reader_tensor(g, i), *tw = gguf_reader_tensor(w, i);
        cr_assert_str_eq(tg->name, tw->name, "tensor %zu", i);
        cr_assert_eq(tg->type, tw->type, "type of %s", tw->name);
        cr_assert_eq(tg->n_dims, tw->n_dims, "dims of %s", tw->name);
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            cr_assert_eq(tg->ne[d], tw->ne[d], "ne of %s", tw->name);
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
        while (ig < gguf_reader_n_kv(g) && is_general(gguf_reader_kv(g, ig)))
            ig++;
        while (iw < gguf_reader_n_kv(w) && is_general(gguf_reader_kv(w, iw)))
            iw++;
        if (ig == gguf_reader_n_kv(g) || iw == gguf_reader_n_kv(w))
            break;
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

/* The converter's bytes: without the header hash pn-convert adds by default
 * (the default's own test: default_output_is_the_converters_and_the_record). */
static void convert_and_compare(const char *opts, const char *src, const char *golden)
{
    char *out = tu_join(g_dir, "out.gguf"), all[4096];
    snprintf(all, sizeof all, "--no-header-hash %s", opts);
    convert_ok(all, src, out);
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
    convert_and_compare("", HFDATA "/hf/model.safetensors.index.json",
                        HFDATA "/converted.bf16.gguf");
}

/* A hub-cache snapshot: every file a symlink into ../../blobs/. */
Test(hf_convert, reads_a_hub_cache_snapshot_of_symlinks)
{
    static const char *const files[] = {
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
        "tokenizer_config.json",
    };
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/m/blobs' '%s/m/snapshots/abc'", g_dir, g_dir);
    cr_assert_eq(tu_run(cmd, NULL, NULL), 0);
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(cmd, sizeof cmd,
                 "cp '%s/hf/%s' '%s/m/blobs/blob%zu' && ln -s '../../blobs/blob%zu' "
                 "'%s/m/snapshots/abc/%s'",
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
    convert_ok("--no-header-hash --split-max-tensors 30", HFDATA "/hf", out);
    char *first = tu_join(g_dir, "out-00001-of-00003.gguf");
    struct stat sb;
    cr_assert_eq(stat(first, &sb), 0, "first split %s", first);
    hf_assert_same_model(first, HFDATA "/converted.bf16.gguf");
    free(first);
    free(out);
}

static bool is_record(const gguf_kv *kv)
{
    return kv->key.len >= 10 && memcmp(kv->key.data, "pn.header.", 10) == 0;
}

/* pn-convert's default output is the --no-header-hash one (the converter's
 * bytes, above) and the four keys of the header hash after the others:
 * the same tensors' bytes, the same other keys in the same order, the same
 * source identity; the header offset by the record's bytes alone. */
Test(hf_convert, default_output_is_the_converters_and_the_record)
{
    char *with = tu_join(g_dir, "with.gguf"), *without = tu_join(g_dir, "without.gguf");
    convert_ok("", HFDATA "/hf", with);
    convert_ok("--no-header-hash", HFDATA "/hf", without);
    gguf_reader *a = NULL, *b = NULL;
    pn_error err = { 0 };
    cr_assert_eq(gguf_reader_open(with, &a, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_reader_open(without, &b, &err), PN_OK, "%s", err.msg);
    const size_t na = gguf_reader_n_kv(a), nb = gguf_reader_n_kv(b);
    cr_assert_eq(na, nb + 4, "four keys more");
    for (size_t i = 0; i < na; i++) {
        const gguf_kv *k = gguf_reader_kv(a, i);
        if (i < nb) {
            const gguf_kv *l = gguf_reader_kv(b, i);
            cr_assert(k->key.len == l->key.len && memcmp(k->key.data, l->key.data, k->key.len) == 0,
                      "key %zu", i);
            cr_assert(kv_equal(k, l), "key %.*s differs", (int)l->key.len, l->key.data);
            continue;
        }
        cr_assert(is_record(k), "key %zu is the record's: %.*s", i, (int)k->key.len, k->key.data);
    }
    gguf_header_verdict v;
    gguf_header_hash_verify(a, &v);
    cr_assert_eq(v.proof, GGUF_HEADER_PROVEN, "%s", v.message);
    gguf_header_hash_verify(b, &v);
    cr_assert_eq(v.proof, GGUF_HEADER_UNPROVEN, "%s", v.message);
    cr_assert_eq(gguf_reader_n_tensors(a), gguf_reader_n_tensors(b));
    const uint64_t shift = gguf_reader_data_offset(a) - gguf_reader_data_offset(b);
    cr_assert_eq(gguf_reader_file_size(a) - gguf_reader_file_size(b), shift,
                 "only the header grew");
    for (size_t i = 0; i < gguf_reader_n_tensors(a); i++) {
        const gguf_tensor_info *ta = gguf_reader_tensor(a, i), *tb = gguf_reader_tensor(b, i);
        cr_assert_str_eq(ta->name, tb->name);
        cr_assert(ta->type == tb->type && ta->size == tb->size && ta->offset == tb->offset, "%s",
                  ta->name);
    }
    /* the data sections, byte for byte */
    size_t la = 0, lb = 0;
    uint8_t *ba = tu_read_file(with, &la), *bb = tu_read_file(without, &lb);
    cr_assert_eq(la - gguf_reader_data_offset(a), lb - gguf_reader_data_offset(b));
    cr_assert(memcmp(ba + gguf_reader_data_offset(a), bb + gguf_reader_data_offset(b),
                     lb - gguf_reader_data_offset(b)) == 0,
              "the tensors' bytes are the same");
    /* the header: the same bytes but the key count, with the record between
     * the keys and the tensor infos */
    const gguf_tensor_info *a0 = gguf_reader_tensor(a, 0), *b0 = gguf_reader_tensor(b, 0);
    const gguf_tensor_info *bl = gguf_reader_tensor(b, gguf_reader_n_tensors(b) - 1);
    cr_assert(memcmp(ba, bb, 16) == 0 && memcmp(ba + 24, bb + 24, b0->info_offset - 24) == 0,
              "the keys' bytes");
    cr_assert(
        memcmp(ba + a0->info_offset, bb + b0->info_offset, bl->info_offset - b0->info_offset) == 0,
        "the tensor infos' bytes");
    uint64_t ha = 0, hb = 0;
    cr_assert_eq(pn_source_header_hash(a, &ha, &err), PN_OK);
    cr_assert_eq(pn_source_header_hash(b, &hb, &err), PN_OK);
    cr_assert_eq(ha, hb, "one source, with the record or without");
    free(ba);
    free(bb);
    gguf_reader_close(a);
    gguf_reader_close(b);
    free(with);
    free(without);
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
           (kv->key.len >= 9 && memcmp(kv->key.data, "pn.split.", 9) == 0) ||
           (kv->key.len >= 10 && memcmp(kv->key.data, "pn.source.", 10) == 0) ||
           /* the record of keys that differ differs */
           (kv->key.len >= 10 && memcmp(kv->key.data, "pn.header.", 10) == 0);
}

static void assert_same_quantized(const char *got, const char *want)
{
    gguf_reader *g = NULL, *w = NULL;
    pn_error err = { 0 };
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
        if (skip_key(b))
            continue;
        nw++;
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)b->key.len, b->key.data);
        const gguf_kv *a = gguf_reader_find_kv(g, key);
        cr_assert(a, "%s lacks key %s", got, key);
        cr_assert(kv_equal(a, b), "key %s differs", key);
    }
    for (size_t i = 0; i < gguf_reader_n_kv(g); i++)
        ng += !skip_key(gguf_reader_kv(g, i));
    cr_assert_eq(ng, nw, "%s has other keys", got);
    /* the types of all three kinds occur: the comparison covers each path */
    bool pn = false, stock = false, f32 = false;
    for (size_t i = 0; i < gguf_reader_n_tensors(g); i++) {
        int t = gguf_reader_tensor(g, i)->type;
        if (t == 0)
            f32 = true;
        else if (t == 1 || t == 8 || t == 30)
            stock = true;
        else
            pn = true;
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
        "blk.4.nextn.eh_proj.weight", "blk.4.nextn.enorm.weight",
        "blk.4.nextn.hnorm.weight",   "blk.4.nextn.shared_head_norm.weight",
        "blk.4.attn_q.weight",        "blk.4.ffn_up.weight",
    };
    for (size_t i = 0; i < sizeof mtp / sizeof *mtp; i++)
        cr_assert(strstr(o, mtp[i]), "the dry run names %s:\n%s", mtp[i], o);
    cr_assert(strstr(o, "blk.4.nextn.eh_proj.weight") &&
                  strstr(strstr(o, "blk.4.nextn.eh_proj.weight"), "q8_0"),
              "eh_proj is q8_0");
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

/* ---- hostile input: each refused with exit 1, the file and the tensor or
 * key named, nothing written ---- */

TestSuite(hf_hostile, .init = setup, .fini = teardown, .timeout = 60);

/* A copy of the golden folder in g_dir/m; returns its path. */
static char *copy_model(void)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cp -r '%s/hf' '%s/m' && mkdir -p '%s/out'", HFDATA, g_dir, g_dir);
    cr_assert_eq(tu_run(cmd, NULL, NULL), 0);
    return tu_join(g_dir, "m");
}

/* Writes a safetensors file: the header text, then data_len zero bytes. */
static void write_shard(const char *path, const char *header, size_t data_len)
{
    size_t hl = strlen(header);
    size_t n = 8 + hl + data_len;
    uint8_t *b = calloc(1, n);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    cr_assert_eq(tu_write_file(path, b, n), 0);
    free(b);
}

/* Replaces the first `from` in file path by `to`. */
static void edit_file(const char *path, const char *from, const char *to)
{
    size_t n;
    char *t = tu_read_file(path, &n);
    char *at = strstr(t, from);
    cr_assert(at, "%s holds %s", path, from);
    size_t fl = strlen(from), tl = strlen(to);
    char *u = malloc(n - fl + tl + 1);
    memcpy(u, t, (size_t)(at - t));
    memcpy(u + (at - t), to, tl);
    memcpy(u + (at - t) + tl, at + fl, n - (size_t)(at - t) - fl);
    cr_assert_eq(tu_write_file(path, u, n - fl + tl), 0);
    free(t);
    free(u);
}

/* pn-convert SRC refuses: exit 1, stderr holds every string of `want`
 * (NULL-ended), nothing at the output nor beside it. */
static void assert_refused(const char *src, const char *const *want)
{
    char *out = tu_join(g_dir, "out/x.gguf");
    char cmd[8192], *o = NULL, *e = NULL;
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s'", CONVERT, src, out);
    int rc = tu_run(cmd, &o, &e);
    cr_assert_eq(rc, 1, "exit %d, stderr: %s", rc, e);
    for (size_t i = 0; want[i]; i++)
        cr_assert(strstr(e, want[i]), "stderr names \"%s\": %s", want[i], e);
    char *od = tu_join(g_dir, "out");
    cr_assert_eq(tu_count_files(od), 0, "nothing written in %s", od);
    free(od);
    free(out);
    free(o);
    free(e);
}

#define REFUSED(src, ...) assert_refused(src, (const char *const[]){ __VA_ARGS__, NULL })

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"

Test(hf_hostile, a_header_length_past_the_end_of_the_file)
{
    char *m = copy_model(), *p = tu_join(m, SHARD1);
    uint8_t b[16] = { 0xe8, 0x03 }; /* 1000 bytes of header in a 16-byte file */
    cr_assert_eq(tu_write_file(p, b, sizeof b), 0);
    REFUSED(m, SHARD1, "header length 1000 runs past the end of the file");
    free(p);
    free(m);
}

Test(hf_hostile, a_header_length_above_100_mb)
{
    char *m = copy_model(), *p = tu_join(m, SHARD1);
    uint8_t b[16] = { 0x00, 0xc2, 0xeb, 0x0b }; /* 200,000,000 */
    cr_assert_eq(tu_write_file(p, b, sizeof b), 0);
    REFUSED(m, SHARD1, "above the limit");
    free(p);
    free(m);
}

Test(hf_hostile, a_header_that_is_not_a_json_object)
{
    char *m = copy_model(), *p = tu_join(m, SHARD1);
    write_shard(p, "[1, 2, 3]", 0);
    REFUSED(m, SHARD1, "JSON is not an object");
    free(p);
    free(m);
}

Test(hf_hostile, a_header_with_a_tensor_named_twice)
{
    char *m = copy_model(), *p = tu_join(m, SHARD1);
    write_shard(p,
                "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                "\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]}}",
                8);
    REFUSED(m, SHARD1, "duplicate");
    free(p);
    free(m);
}

Test(hf_hostile, a_header_value_of_the_wrong_type)
{
    char *m = copy_model(), *p = tu_join(m, SHARD1);
    write_shard(p, "{\"model.norm.weight\":{\"dtype\":5,\"shape\":[2],\"data_offsets\":[0,4]}}", 4);
    REFUSED(m, SHARD1, "tensor model.norm.weight", "dtype");
    write_shard(
        p, "{\"model.norm.weight\":{\"dtype\":\"BF16\",\"shape\":[\"2\"],\"data_offsets\":[0,4]}}",
        4);
    REFUSED(m, SHARD1, "tensor model.norm.weight", "shape");
    free(p);
    free(m);
}

Test(hf_hostile, offsets_out_of_order)
{
    char *m = copy_model(), *p = tu_join(m, SHARD1);
    write_shard(
        p, "{\"model.norm.weight\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,0]}}", 8);
    REFUSED(m, SHARD1, "tensor model.norm.weight", "out of order");
    free(p);
    free(m);
}

Test(hf_hostile, overlapping_tensors)
{
    char *m = copy_model(), *p = tu_join(m, SHARD1);
    write_shard(p,
                "{\"x.a\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]},"
                "\"x.b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[4,12]}}",
                12);
    REFUSED(m, SHARD1, "x.a", "x.b", "overlap");
    free(p);
    free(m);
}

Test(hf_hostile, offsets_outside_the_data)
{
    char *m = copy_model(), *p = tu_join(m, SHARD1);
    write_shard(
        p, "{\"model.norm.weight\":{\"dtype\":\"BF16\",\"shape\":[64],\"data_offsets\":[0,128]}}",
        100);
    REFUSED(m, SHARD1, "tensor model.norm.weight", "outside the data");
    free(p);
    free(m);
}

Test(hf_hostile, shape_times_dtype_not_the_byte_range)
{
    char *m = copy_model(), *p = tu_join(m, SHARD1);
    write_shard(
        p, "{\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[64],\"data_offsets\":[0,128]}}",
        128);
    REFUSED(m, SHARD1, "tensor model.norm.weight", "256 bytes", "span 128");
    free(p);
    free(m);
}

Test(hf_hostile, dtypes_not_taken_are_refused_naming_the_tensor)
{
    static const char *const dtypes[] = { "F8_E4M3", "F8_E5M2", "I64", "BOOL" };
    char *m = copy_model(), *p = tu_join(m, SHARD1);
    for (size_t i = 0; i < 4; i++) {
        char h[256];
        snprintf(h, sizeof h,
                 "{\"model.norm.weight\":{\"dtype\":\"%s\",\"shape\":[8],\"data_offsets\":[0,8]}}",
                 dtypes[i]);
        write_shard(p, h, 64);
        REFUSED(m, SHARD1, "tensor model.norm.weight", dtypes[i], "not taken");
    }
    free(p);
    free(m);
}

Test(hf_hostile, an_index_naming_a_missing_shard)
{
    char *m = copy_model(), *p = tu_join(m, SHARD2);
    cr_assert_eq(unlink(p), 0);
    REFUSED(m, SHARD2, "cannot open shard");
    free(p);
    free(m);
}

Test(hf_hostile, an_index_naming_a_shard_that_is_not_a_regular_file)
{
    char *m = copy_model(), *p = tu_join(m, SHARD2);
    cr_assert_eq(unlink(p), 0);
    cr_assert_eq(mkdir(p, 0755), 0);
    REFUSED(m, SHARD2, "not a regular file");
    free(p);
    free(m);
}

Test(hf_hostile, an_index_naming_a_shard_outside_the_folder)
{
    char *m = copy_model(), *p = tu_join(m, "model.safetensors.index.json");
    edit_file(p, "\"model-00002-of-00002.safetensors\"", "\"../model-00002-of-00002.safetensors\"");
    REFUSED(m, "model.safetensors.index.json", "../model-00002-of-00002.safetensors",
            "leaves the model folder");
    free(p);
    free(m);
    m = copy_model();
    char *q = tu_join(g_dir, "m/model.safetensors.index.json");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/m' && cp -r '%s/hf' '%s/m'", g_dir, HFDATA, g_dir);
    cr_assert_eq(tu_run(cmd, NULL, NULL), 0);
    edit_file(q, "\"model-00002-of-00002.safetensors\"", "\"/etc/passwd\"");
    REFUSED(m, "model.safetensors.index.json", "/etc/passwd", "absolute path");
    free(q);
    free(m);
}

Test(hf_hostile, a_tensor_in_two_shards)
{
    char *m = copy_model(), *p = tu_join(m, SHARD2);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cp '%s/%s' '%s'", m, SHARD1, p);
    cr_assert_eq(tu_run(cmd, NULL, NULL), 0);
    REFUSED(m, "is in two shards", SHARD1, SHARD2);
    free(p);
    free(m);
}

Test(hf_hostile, a_config_with_a_field_missing)
{
    char *m = copy_model(), *p = tu_join(m, "config.json");
    edit_file(p, "\"num_hidden_layers\": 4,", "");
    REFUSED(m, "config.json", "key num_hidden_layers is missing");
    free(p);
    free(m);
}

Test(hf_hostile, a_config_with_zero_heads)
{
    char *m = copy_model(), *p = tu_join(m, "config.json");
    edit_file(p, "\"num_attention_heads\": 4", "\"num_attention_heads\": 0");
    REFUSED(m, "config.json", "key num_attention_heads is 0");
    free(p);
    free(m);
}

Test(hf_hostile, a_config_with_a_billion_layers)
{
    char *m = copy_model(), *p = tu_join(m, "config.json");
    edit_file(p, "\"num_hidden_layers\": 4", "\"num_hidden_layers\": 1000000000");
    REFUSED(m, "config.json", "key num_hidden_layers is 1000000000");
    free(p);
    free(m);
}

Test(hf_hostile, a_config_whose_head_counts_do_not_divide)
{
    char *m = copy_model(), *p = tu_join(m, "config.json");
    edit_file(p, "\"linear_num_value_heads\": 4", "\"linear_num_value_heads\": 3");
    REFUSED(m, "config.json",
            "linear_num_value_heads (3) is not a multiple of linear_num_key_heads (2)");
    free(p);
    free(m);
    m = copy_model();
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/m' && cp -r '%s/hf' '%s/m'", g_dir, HFDATA, g_dir);
    cr_assert_eq(tu_run(cmd, NULL, NULL), 0);
    p = tu_join(m, "config.json");
    edit_file(p, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3");
    REFUSED(m, "config.json",
            "num_attention_heads (4) is not a multiple of num_key_value_heads (3)");
    free(p);
    free(m);
}

Test(hf_hostile, a_config_value_of_the_wrong_type)
{
    char *m = copy_model(), *p = tu_join(m, "config.json");
    edit_file(p, "\"hidden_size\": 64", "\"hidden_size\": \"64\"");
    REFUSED(m, "config.json", "key hidden_size is not an integer");
    free(p);
    free(m);
}

Test(hf_hostile, a_config_of_another_architecture)
{
    char *m = copy_model(), *p = tu_join(m, "config.json");
    edit_file(p, "Qwen3_5ForConditionalGeneration", "LlamaForCausalLM");
    REFUSED(m, "config.json", "architecture LlamaForCausalLM is not taken");
    free(p);
    free(m);
}

Test(hf_hostile, a_malformed_tokenizer_json)
{
    char *m = copy_model(), *p = tu_join(m, "tokenizer.json");
    cr_assert_eq(tu_write_file(p, "{\"model\": {", 11), 0);
    REFUSED(m, "tokenizer.json", "JSON");
    free(p);
    free(m);
}

/* A vocab_size below the tokenizer's ids contradicts the embedding first:
 * the tensors are checked against the config before the tokenizer is. */
Test(hf_hostile, a_vocab_size_that_disagrees_with_the_embedding_and_the_tokenizer)
{
    char *m = copy_model(), *p = tu_join(m, "config.json");
    edit_file(p, "\"vocab_size\": 320", "\"vocab_size\": 200");
    REFUSED(m, "embed_tokens.weight", "[320, 64]", "[200, 64]", "vocab_size");
    free(p);
    free(m);
}

Test(hf_hostile, an_f16_checkpoint_is_refused_saying_why)
{
    char *m = copy_model(), *p = tu_join(m, SHARD1);
    /* the same header with every BF16 tensor declared F16 (same byte size) */
    size_t n;
    uint8_t *b = tu_read_file(p, &n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | b[i];
    for (uint64_t i = 8; i + 6 <= 8 + hl; i++)
        if (memcmp(b + i, "\"BF16\"", 6) == 0)
            memcpy(b + i, "\"F16\" ", 6);
    cr_assert_eq(tu_write_file(p, b, n), 0);
    free(b);
    REFUSED(m, SHARD1, "F16 checkpoints are refused");
    free(p);
    free(m);
}

/* Identity: a shard whose data changed is caught, as a changed GGUF is. */
Test(hf_quantize, a_changed_shard_is_caught_by_check_source_and_reuse)
{
    char *m = copy_model(), *a = tu_join(g_dir, "a.gguf"), *b = tu_join(g_dir, "b.gguf");
    char cmd[8192], *o = NULL, *e = NULL;
    snprintf(cmd, sizeof cmd, "'%s' --quiet --threads 2 --recipe '%s' '%s' '%s'", QUANTIZE,
             TINY_RECIPE, m, a);
    run_ok(cmd);
    /* flip a bit of the first tensor by name of shard 1 whose rows are
     * sampled: blk.0.ffn_gate.weight (mlp.gate_proj, data bytes [256, 16640)) */
    char *p = tu_join(m, SHARD1);
    size_t n;
    uint8_t *d = tu_read_file(p, &n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | d[i];
    d[8 + hl + 300] ^= 1;
    cr_assert_eq(tu_write_file(p, d, n), 0);
    free(d);
    snprintf(cmd, sizeof cmd, "'%s' --source '%s' '%s'", CHECK, m, a);
    int rc = tu_run(cmd, &o, &e);
    cr_assert_eq(rc, 1, "pn-check --source must fail: %s", o);
    cr_assert(strstr(o, "SRC-IDENTITY") && strstr(o, "blk.0.ffn_gate.weight"), "%s", o);
    free(o);
    free(e);
    snprintf(cmd, sizeof cmd, "'%s' --threads 2 --recipe '%s' --reuse '%s' '%s' '%s'", QUANTIZE,
             TINY_RECIPE, a, m, b);
    rc = tu_run(cmd, &o, &e);
    cr_assert_eq(rc, 0, "%s", e);
    cr_assert(strstr(o, "copied 70 of 71") || strstr(e, "copied 70 of 71"), "%s%s", o, e);
    cr_assert(strstr(o, "quantized 1: blk.0.ffn_gate.weight") ||
                  strstr(e, "quantized 1: blk.0.ffn_gate.weight"),
              "%s%s", o, e);
    free(o);
    free(e);
    free(p);
    free(a);
    free(b);
    free(m);
}

/* --no-mtp on a GGUF that has the MTP layer: the keys fixed and the layer
 * dropped as the converter's --no-mtp does, so it quantizes as the
 * converter's --no-mtp file does. */
Test(hf_quantize, no_mtp_on_the_converted_gguf_quantizes_as_the_no_mtp_file_does)
{
    char cmd[8192];
    char *a = tu_join(g_dir, "a.gguf"), *b = tu_join(g_dir, "b.gguf");
    snprintf(cmd, sizeof cmd, "'%s' --quiet --threads 2 --no-mtp --recipe '%s' '%s' '%s'", QUANTIZE,
             TINY_RECIPE, HFDATA "/converted.bf16.gguf", a);
    run_ok(cmd);
    snprintf(cmd, sizeof cmd, "'%s' --quiet --threads 2 --recipe '%s' '%s' '%s'", QUANTIZE,
             TINY_RECIPE, HFDATA "/converted.bf16.no-mtp.gguf", b);
    run_ok(cmd);
    assert_same_quantized(a, b);
    free(a);
    free(b);
}

/* A split output of the folder (--split-max-tensors) is the split output of
 * the converted file: the same tensors, the same keys but general.*,
 * pn.source.* and the set's identity. */
Test(hf_quantize, a_split_output_of_the_folder_is_that_of_the_converted_file)
{
    char cmd[8192];
    char *a = tu_join(g_dir, "a.gguf"), *b = tu_join(g_dir, "b.gguf");
    snprintf(cmd, sizeof cmd,
             "'%s' --quiet --threads 2 --split-max-tensors 40 --recipe '%s' '%s' '%s'", QUANTIZE,
             TINY_RECIPE, HFDATA "/hf", a);
    run_ok(cmd);
    snprintf(cmd, sizeof cmd,
             "'%s' --quiet --threads 2 --split-max-tensors 40 --recipe '%s' '%s' '%s'", QUANTIZE,
             TINY_RECIPE, HFDATA "/converted.bf16.gguf", b);
    run_ok(cmd);
    char *a1 = tu_join(g_dir, "a-00001-of-00002.gguf"),
         *b1 = tu_join(g_dir, "b-00001-of-00002.gguf");
    assert_same_quantized(a1, b1);
    free(a1);
    free(b1);
    free(a);
    free(b);
}
