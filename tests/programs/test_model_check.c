/* pn-check judges the header and the tokenizer as stock
 * llama.cpp loads them: a copy of a valid pn-synth model with one key
 * changed (in place, as a bit flip would; or rewritten where the change
 * moves bytes) is invalid with the finding that names that key and the
 * tensor or index; the unchanged file, the converter's golden outputs,
 * pn-convert's and pn-dequant's files are valid; pn-dequant refuses what
 * pn-check calls invalid. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "gguf/model_check.h"
#include "test_util.h"

#define GOLDEN_HF PN_TEST_DATA "/hf-qwen35-tiny"

static char *g_dir;
static char g_good[4096];

/* The model every test changes: 4 trunk blocks (block 3 full attention) and
 * an MTP block, 320 wide, 300 tokens. */
static void setup(void)
{
    g_dir = tu_mkdtemp();
    snprintf(g_good, sizeof g_good, "%s/good.gguf", g_dir);
    char *out = NULL, *err = NULL;
    int rc = tu_run_program(&out, &err, "pn-synth",
                            "--quiet --layers 4 --mtp --width-scale 16 --vocab 300 --dtype f32 "
                            "--threads 2 '%s'",
                            g_good);
    cr_assert_eq(rc, 0, "pn-synth: %s", err);
    free(out);
    free(err);
}

static void teardown(void)
{
    tu_rm_rf(g_dir);
    free(g_dir);
}

TestSuite(model_check, .init = setup, .fini = teardown, .timeout = 60);

/* A copy of the good model under `name`. */
static const char *copy_of_good(const char *name)
{
    size_t n = 0;
    void *b = tu_read_file(g_good, &n);
    cr_assert_not_null(b);
    const char *p = tu_join_static(g_dir, name);
    cr_assert_eq(tu_write_file(p, b, n), 0);
    free(b);
    return p;
}

/* The file offset of key's value (after its name and type). */
static uint64_t value_offset(const char *path, const char *key)
{
    gguf_reader *r = NULL;
    pn_error e = { 0 };
    cr_assert_eq(gguf_reader_open(path, &r, &e), PN_OK, "%s", e.msg);
    const gguf_kv *kv = gguf_reader_find_kv(r, key);
    cr_assert_not_null(kv, "no key %s", key);
    uint64_t at = (uint64_t)((const uint8_t *)kv->key.data - gguf_reader_bytes(r)) + kv->key.len;
    gguf_reader_close(r);
    return at + 4;
}

static void write_at(const char *path, uint64_t at, const void *bytes, size_t n)
{
    int fd = open(path, O_WRONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(pwrite(fd, bytes, n, (off_t)at), (ssize_t)n);
    close(fd);
}

static uint32_t read_u32_key(const char *path, const char *key)
{
    gguf_reader *r = NULL;
    pn_error e = { 0 };
    cr_assert_eq(gguf_reader_open(path, &r, &e), PN_OK, "%s", e.msg);
    const gguf_kv *kv = gguf_reader_find_kv(r, key);
    cr_assert(kv && kv->type == GGUF_TYPE_UINT32, "key %s is a uint32", key);
    uint32_t v = (uint32_t)kv->v.u64;
    gguf_reader_close(r);
    return v;
}

/* Sets a uint32 key in place. */
static void set_u32(const char *path, const char *key, uint32_t v)
{
    (void)read_u32_key(path, key);
    uint8_t b[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
    write_at(path, value_offset(path, key), b, 4);
}

/* The copy rewritten with key `drop` (every key it starts, when it ends in
 * '*') left out and `add` (a function adding
 * keys to the writer) after the others: the data section copied as it is. */
static void rewrite(const char *path, const char *drop, void (*add)(gguf_writer *, void *),
                    void *arg)
{
    gguf_reader *r = NULL;
    pn_error e = { 0 };
    cr_assert_eq(gguf_reader_open(path, &r, &e), PN_OK, "%s", e.msg);
    gguf_writer *w = gguf_writer_new();
    for (size_t i = 0; i < gguf_reader_n_kv(r); i++) {
        const gguf_kv *kv = gguf_reader_kv(r, i);
        size_t dl = drop ? strlen(drop) : 0;
        bool prefix = dl && drop[dl - 1] == '*';
        if (drop && (prefix ? kv->key.len >= dl - 1 && memcmp(kv->key.data, drop, dl - 1) == 0
                            : gguf_str_eq(kv->key, drop)))
            continue;
        cr_assert_eq(gguf_writer_copy_kv(w, kv), PN_OK);
    }
    add(w, arg);
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, &e), PN_OK, "%s",
                     e.msg);
    }
    uint8_t *hdr = NULL;
    size_t len = 0;
    cr_assert_eq(gguf_writer_header(w, &hdr, &len, &e), PN_OK, "%s", e.msg);
    const uint64_t data_at = gguf_writer_data_offset(w), old_at = gguf_reader_data_offset(r);
    const uint64_t old_size = gguf_reader_file_size(r);
    size_t n = 0;
    uint8_t *old = tu_read_file(path, &n);
    cr_assert_eq(n, old_size);
    uint8_t *b = calloc(1, data_at + (old_size - old_at));
    cr_assert_leq(len, data_at);
    memcpy(b, hdr, len);
    memcpy(b + data_at, old + old_at, old_size - old_at);
    cr_assert_eq(tu_write_file(path, b, data_at + (old_size - old_at)), 0);
    free(b);
    free(old);
    free(hdr);
    gguf_writer_free(w);
    gguf_reader_close(r);
}

/* Runs pn-check on path: its exit status, stdout in *out (freed by caller). */
static int check(const char *path, char **out)
{
    char *err = NULL;
    int rc = tu_run_program(out, &err, "pn-check", "'%s'", path);
    cr_assert_str_empty(err, "pn-check writes nothing on stderr: %s", err);
    free(err);
    return rc;
}

/* pn-check calls path invalid (exit 1) with a line of code that has text. */
static void expect_finding(const char *path, const char *code, const char *text)
{
    char *out = NULL;
    int rc = check(path, &out);
    cr_assert_eq(rc, 1, "invalid, exit 1: %s", out);
    char head[96];
    snprintf(head, sizeof head, "error   %s ", code);
    bool hit = false;
    for (const char *line = out; line && *line && !hit;) {
        const char *end = strchr(line, '\n');
        char *l = strndup(line, end ? (size_t)(end - line) : strlen(line));
        hit = strncmp(l, head, strlen(head)) == 0 && strstr(l, text) != NULL;
        free(l);
        line = end ? end + 1 : NULL;
    }
    cr_assert(hit, "a %s finding that says \"%s\": %s", code, text, out);
    cr_assert(strstr(out, "\ninvalid (") != NULL, "%s", out);
    free(out);
}

Test(model_check, the_unchanged_model_is_valid)
{
    char *out = NULL;
    cr_assert_eq(check(g_good, &out), 0, "%s", out);
    cr_assert(strstr(out, "valid (0 errors, 1 warning)") != NULL, "%s", out);
    cr_assert_null(strstr(out, "ARCH-"), "%s", out);
    free(out);
}

Test(model_check, an_embedding_length_that_is_not_token_embds_width_is_named_with_both)
{
    const char *p = copy_of_good("embd.gguf");
    cr_assert_eq(read_u32_key(p, "qwen35.embedding_length"), 320);
    set_u32(p, "qwen35.embedding_length", 320 ^ 64); /* one bit */
    expect_finding(p, "ARCH-SHAPE",
                   "qwen35.embedding_length = 256, but token_embd.weight has ne[0] = 320");
}

Test(model_check, a_head_count_that_does_not_make_the_query_width_is_named)
{
    const char *p = copy_of_good("heads.gguf");
    const uint32_t h = read_u32_key(p, "qwen35.attention.head_count");
    set_u32(p, "qwen35.attention.head_count", h + 1);
    expect_finding(p, "ARCH-SHAPE",
                   "2 x qwen35.attention.head_count x qwen35.attention.key_length = ");
    expect_finding(p, "ARCH-SHAPE", "but blk.3.attn_q.weight has ne[1] = ");
}

Test(model_check, a_block_count_past_the_blocks_names_the_first_empty_block)
{
    const char *p = copy_of_good("more.gguf");
    cr_assert_eq(read_u32_key(p, "qwen35.block_count"), 5);
    set_u32(p, "qwen35.block_count", 6);
    expect_finding(p, "ARCH-TENSOR-MISSING", "qwen35.block_count = 6, but blk.5 holds no tensor");
}

Test(model_check, a_block_count_short_of_the_blocks_names_the_first_block_past_it)
{
    const char *p = copy_of_good("fewer.gguf");
    set_u32(p, "qwen35.block_count", 4);
    set_u32(p, "qwen35.nextn_predict_layers", 0);
    expect_finding(p, "ARCH-TENSOR-UNEXPECTED",
                   "qwen35.block_count = 4, but blk.4.attn_norm.weight is of a block past it");
}

Test(model_check, an_ssm_size_that_is_not_the_convolutions_is_named)
{
    const char *p = copy_of_good("conv.gguf");
    cr_assert_eq(read_u32_key(p, "qwen35.ssm.conv_kernel"), 4);
    set_u32(p, "qwen35.ssm.conv_kernel", 5);
    expect_finding(p, "ARCH-SHAPE",
                   "qwen35.ssm.conv_kernel = 5, but blk.0.ssm_conv1d.weight has ne[0] = 4");
}

Test(model_check, an_ssm_state_size_that_contradicts_the_value_heads_is_named)
{
    const char *p = copy_of_good("state.gguf");
    const uint32_t s = read_u32_key(p, "qwen35.ssm.state_size");
    set_u32(p, "qwen35.ssm.state_size", s * 2);
    expect_finding(p, "ARCH-SHAPE", "qwen35.ssm.state_size = ");
    expect_finding(p, "ARCH-SHAPE", "but blk.0.ssm_norm.weight has ne[0] = ");
    expect_finding(p, "ARCH-KEY-RANGE", "qwen35.ssm.inner_size = ");
}

Test(model_check, a_full_attention_interval_that_is_not_the_blocks_kinds_names_the_block)
{
    const char *p = copy_of_good("interval.gguf");
    cr_assert_eq(read_u32_key(p, "qwen35.full_attention_interval"), 4);
    set_u32(p, "qwen35.full_attention_interval", 2);
    expect_finding(p, "ARCH-LAYER-KIND",
                   "key qwen35.full_attention_interval makes blk.1 a full-attention block, but "
                   "it holds a linear-attention block's tensors");
}

Test(model_check, an_optional_key_of_another_type_than_the_loader_reads_is_named)
{
    const char *p = copy_of_good("freq.gguf");
    /* float32 -> uint32: the same 4 bytes, another type */
    const uint64_t at = value_offset(p, "qwen35.rope.freq_base") - 4;
    const uint8_t u32[4] = { GGUF_TYPE_UINT32, 0, 0, 0 };
    write_at(p, at, u32, 4);
    expect_finding(p, "ARCH-KEY-TYPE",
                   "key qwen35.rope.freq_base is uint32, but llama.cpp reads it as float32");
}

static void add_vocab_size(gguf_writer *w, void *arg)
{
    cr_assert_eq(gguf_writer_set_u32(w, "qwen35.vocab_size", *(uint32_t *)arg), PN_OK);
}

Test(model_check, a_vocabulary_size_that_is_not_token_embds_rows_is_named)
{
    const char *p = copy_of_good("vocab.gguf");
    uint32_t v = 301;
    rewrite(p, NULL, add_vocab_size, &v);
    expect_finding(p, "ARCH-SHAPE",
                   "qwen35.vocab_size = 301, but token_embd.weight has ne[1] = 300");
    const char *q = copy_of_good("vocab-right.gguf");
    v = 300;
    rewrite(q, NULL, add_vocab_size, &v);
    char *out = NULL;
    cr_assert_eq(check(q, &out), 0, "the right vocab_size is valid: %s", out);
    free(out);
}

Test(model_check, a_special_token_id_outside_the_vocabulary_is_named)
{
    const char *p = copy_of_good("eos.gguf");
    set_u32(p, "tokenizer.ggml.eos_token_id", 300);
    expect_finding(p, "TOKENIZER-SPECIAL-ID",
                   "key tokenizer.ggml.eos_token_id = 300, outside the vocabulary of 300 tokens");
}

static void add_short_types(gguf_writer *w, void *arg)
{
    (void)arg;
    int32_t t[299];
    for (int i = 0; i < 299; i++)
        t[i] = 1;
    cr_assert_eq(gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, t, 299),
                 PN_OK);
}

Test(model_check, a_token_type_array_shorter_than_the_tokens_names_the_index)
{
    const char *p = copy_of_good("types.gguf");
    rewrite(p, "tokenizer.ggml.token_type", add_short_types, NULL);
    expect_finding(p, "TOKENIZER-LENGTH",
                   "key tokenizer.ggml.token_type has 299 elements, but tokenizer.ggml.tokens has "
                   "300: the token at index 299 has none");
}

Test(model_check, a_merge_that_is_not_two_tokens_names_its_index)
{
    const char *p = copy_of_good("merge.gguf");
    gguf_reader *r = NULL;
    pn_error e = { 0 };
    cr_assert_eq(gguf_reader_open(p, &r, &e), PN_OK, "%s", e.msg);
    const gguf_kv *kv = gguf_reader_find_kv(r, "tokenizer.ggml.merges");
    cr_assert(kv && kv->arr_count > 3);
    /* merges[2]: its space made a '#' */
    const uint8_t *m = kv->arr_data;
    for (int i = 0; i < 2; i++) {
        uint64_t len = 0;
        memcpy(&len, m, 8);
        m += 8 + len;
    }
    uint64_t len = 0;
    memcpy(&len, m, 8);
    const uint8_t *sp = memchr(m + 9, ' ', len - 1);
    cr_assert_not_null(sp);
    const uint64_t at = (uint64_t)(sp - gguf_reader_bytes(r));
    gguf_reader_close(r);
    write_at(p, at, "#", 1);
    expect_finding(p, "TOKENIZER-MERGE", "tokenizer.ggml.merges[2] is \"");
}

Test(model_check, a_duplicate_token_names_both_indexes)
{
    const char *p = copy_of_good("dup.gguf");
    gguf_reader *r = NULL;
    pn_error e = { 0 };
    cr_assert_eq(gguf_reader_open(p, &r, &e), PN_OK, "%s", e.msg);
    const gguf_kv *kv = gguf_reader_find_kv(r, "tokenizer.ggml.tokens");
    /* tokens 0 and 1 are byte tokens of one character each: 1 becomes 0 */
    const uint8_t *t0 = kv->arr_data;
    uint64_t l0 = 0, l1 = 0;
    memcpy(&l0, t0, 8);
    const uint8_t *t1 = t0 + 8 + l0;
    memcpy(&l1, t1, 8);
    cr_assert_eq(l0, l1, "tokens 0 and 1 are as long");
    const uint64_t at = (uint64_t)(t1 + 8 - gguf_reader_bytes(r));
    char text[16];
    memcpy(text, t0 + 8, l0);
    gguf_reader_close(r);
    write_at(p, at, text, l0);
    expect_finding(p, "TOKENIZER-DUPLICATE", "tokenizer.ggml.tokens[1] is \"");
    expect_finding(p, "TOKENIZER-DUPLICATE", "as tokens[0] is");
}

Test(model_check, an_unknown_pre_tokenizer_is_named)
{
    const char *p = copy_of_good("pre.gguf");
    const uint64_t at = value_offset(p, "tokenizer.ggml.pre");
    write_at(p, at + 8, "Q", 1); /* "qwen2" -> "Qwen2" */
    expect_finding(p, "TOKENIZER-PRE",
                   "key tokenizer.ggml.pre = \"Qwen2\": not a pre-tokenizer llama.cpp knows");
}

Test(model_check, the_json_report_carries_the_code_the_key_and_the_tensor)
{
    const char *p = copy_of_good("json.gguf");
    set_u32(p, "qwen35.embedding_length", 256);
    char *out = NULL, *err = NULL;
    int rc = tu_run_program(&out, &err, "pn-check", "--json '%s'", p);
    cr_assert_eq(rc, 1, "%s", err);
    cr_assert_str_empty(err);
    cr_assert(strstr(out, "\"code\": \"ARCH-SHAPE\", \"tensor\": \"token_embd.weight\", \"key\": "
                          "\"qwen35.embedding_length\"") != NULL,
              "%s", out);
    free(out);
    free(err);
}

Test(model_check, pn_dequant_refuses_a_model_pn_check_calls_invalid)
{
    const char *p = copy_of_good("bad.gguf");
    set_u32(p, "qwen35.embedding_length", 256);
    const char *o = tu_join_static(g_dir, "bad-decoded.gguf");
    char *out = NULL, *err = NULL;
    int rc = tu_run_program(&out, &err, "pn-dequant", "'%s' '%s'", p, o);
    cr_assert_eq(rc, 1, "refused, exit 1: %s", err);
    cr_assert_str_empty(out);
    cr_assert(strstr(err, "ARCH-SHAPE: qwen35.embedding_length = 256, but token_embd.weight has "
                          "ne[0] = 320") != NULL,
              "%s", err);
    cr_assert(!tu_exists(o), "nothing written");
    free(out);
    free(err);
}

/* pn-compare decodes a PN file through pn-dequant: it refuses it too, before
 * llama.cpp is given anything decoded. */
Test(model_check, pn_compare_refuses_a_pn_file_pn_check_calls_invalid, .timeout = 240)
{
    TU_REQUIRE_LLAMA(PN_SOURCE_DIR "/tools/llama/pn-llama-logits.mjs", NULL);
    const char *pn = tu_join_static(g_dir, "cmp.gguf");
    char *out = NULL, *err = NULL;
    int rc = tu_run_program(&out, &err, "pn-quantize",
                            "--quiet --threads 2 --promote 0 --recipe test-fallback '%s' '%s'",
                            g_good, pn);
    cr_assert_eq(rc, 0, "pn-quantize: %s", err);
    free(out);
    free(err);
    set_u32(pn, "qwen35.embedding_length", 256);
    rc = tu_run_program(&out, &err, "pn-compare", "--threads 2 '%s' '%s'", g_good, pn);
    cr_assert_eq(rc, 1, "refused, exit 1: %s%s", out, err);
    cr_assert(strstr(err, "decoding ") && strstr(err, "ARCH-SHAPE: qwen35.embedding_length = 256, "
                                                      "but token_embd.weight has ne[0] = 320"),
              "%s", err);
    free(out);
    free(err);
}

Test(model_check, the_converters_golden_outputs_are_valid)
{
    const char *names[] = { "converted.bf16.gguf", "converted.f16.gguf", "converted.f32.gguf",
                            "converted.bf16.no-mtp.gguf" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", GOLDEN_HF, names[i]);
        char *out = NULL;
        cr_assert_eq(check(path, &out), 0, "%s: %s", names[i], out);
        /* another tool's file: no record, so its header is unproven */
        cr_assert(strstr(out, "\nheader: unproven: no header hash") != NULL, "%s: %s", names[i],
                  out);
        free(out);
    }
}

Test(model_check, pn_converts_and_pn_dequants_outputs_are_valid)
{
    const char *conv = tu_join_static(g_dir, "converted.gguf");
    char *out = NULL, *err = NULL;
    int rc = tu_run_program(&out, &err, "pn-convert", "--quiet '%s/hf' '%s'", GOLDEN_HF, conv);
    cr_assert_eq(rc, 0, "pn-convert: %s", err);
    free(out);
    free(err);
    cr_assert_eq(check(conv, &out), 0, "pn-convert's output: %s", out);
    /* every program of ours proves its output's keys */
    cr_assert(strstr(out, "\nheader: proven: ") != NULL, "pn-convert's output: %s", out);
    free(out);
    const char *pn = tu_join_static(g_dir, "pn.gguf");
    rc = tu_run_program(&out, &err, "pn-quantize",
                        "--quiet --threads 2 --promote 0 --recipe test-fallback '%s' '%s'", g_good,
                        pn);
    cr_assert_eq(rc, 0, "pn-quantize: %s", err);
    free(out);
    free(err);
    cr_assert_eq(check(pn, &out), 0, "pn-quantize's output: %s", out);
    cr_assert(strstr(out, "\nheader: proven: ") != NULL, "pn-quantize's output: %s", out);
    free(out);
    const char *dq = tu_join_static(g_dir, "decoded.gguf");
    rc = tu_run_program(&out, &err, "pn-dequant", "--quiet '%s' '%s'", pn, dq);
    cr_assert_eq(rc, 0, "pn-dequant: %s", err);
    free(out);
    free(err);
    cr_assert_eq(check(dq, &out), 0, "pn-dequant's output: %s", out);
    cr_assert(strstr(out, "\nheader: proven: ") != NULL, "pn-dequant's output: %s", out);
    free(out);
}

/* The library's first-error entry, as the decoders call it. */
Test(model_check, the_first_problem_names_the_file_the_code_and_the_key)
{
    const char *p = copy_of_good("first.gguf");
    set_u32(p, "qwen35.ssm.conv_kernel", 5);
    gguf_reader *r = NULL;
    pn_error e = { 0 };
    cr_assert_eq(gguf_reader_open(p, &r, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(gguf_model_check_first(r, &e), PN_ERR_FORMAT);
    cr_assert(strstr(e.msg, p) != NULL, "%s", e.msg);
    cr_assert(strstr(e.msg, "ARCH-SHAPE: qwen35.ssm.conv_kernel = 5") != NULL, "%s", e.msg);
    gguf_reader_close(r);
    gguf_reader *g = NULL;
    cr_assert_eq(gguf_reader_open(g_good, &g, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(gguf_model_check_first(g, &e), PN_OK, "%s", e.msg);
    gguf_reader_close(g);
}

/* ---- pn-check's command line and its finding codes, as docs/usage.md gives them ---- */

TestSuite(pn_check_usage, .init = setup, .fini = teardown, .timeout = 60);

Test(pn_check_usage, a_type_override_without_a_recipe_is_refused_before_any_check)
{
    const char *forms[] = { "--tensor-type attn_v=q8_0", "--output-tensor-type q8_0",
                            "--token-embedding-type q8_0" };
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
        char *out = NULL, *err = NULL;
        int rc = tu_run_program(&out, &err, "pn-check", "%s '%s'", forms[i], g_good);
        cr_assert_eq(rc, 2, "%s: exit 2: %s", forms[i], err);
        cr_assert_str_empty(out, "nothing checked: %s", out);
        char opt[40];
        snprintf(opt, sizeof opt, "%.*s needs --recipe", (int)strcspn(forms[i], " "), forms[i]);
        cr_assert(strstr(err, opt) != NULL, "%s: %s", opt, err);
        free(out);
        free(err);
    }
    char *out = NULL, *err = NULL;
    int rc = tu_run_program(&out, &err, "pn-check",
                            "--recipe test-fallback --tensor-type attn_v=q8_0 '%s'", g_good);
    cr_assert_neq(rc, 2, "with --recipe it is taken: %s", err);
    free(out);
    free(err);
}

/* The rows of usage.md's finding-code table: code, severity, exit. */
typedef struct code_row {
    char code[48], severity[64], exit[64];
} code_row;

static size_t read_code_table(code_row *rows, size_t max)
{
    size_t n = 0;
    char *doc = tu_read_file(PN_SOURCE_DIR "/docs/usage.md", &n);
    cr_assert_not_null(doc);
    char *at = strstr(doc, "#### Finding codes");
    cr_assert_not_null(at);
    char *end = strstr(at, "#### Text output");
    cr_assert_not_null(end);
    *end = '\0';
    size_t k = 0;
    for (char *line = at; line && *line && k < max;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        code_row r;
        if (sscanf(line, "| `%47[^`]` | %63[^|]| %63[^|]|", r.code, r.severity, r.exit) == 3) {
            r.severity[strcspn(r.severity, " ")] = '\0';
            rows[k++] = r;
        }
        line = nl ? nl + 1 : NULL;
    }
    free(doc);
    return k;
}

static const code_row *row_of(const code_row *rows, size_t n, const char *code)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].code, code) == 0)
            return &rows[i];
    cr_assert_fail("usage.md's table has no row for %s", code);
    return NULL;
}

/* The exit status pn-check gives path with args, and the code of its first
 * finding. */
static int first_code(const char *args, const char *path, char *code, size_t len)
{
    char *out = NULL, *err = NULL;
    int rc = tu_run_program(&out, &err, "pn-check", "%s '%s'", args, path);
    const char *l = strstr(out, "\nerror   ");
    if (!l)
        l = strstr(out, "\nwarning ");
    cr_assert_not_null(l, "a finding: %s", out);
    l = strchr(l + 1, ' ');
    while (*l == ' ')
        l++;
    snprintf(code, len, "%.*s", (int)strcspn(l, " :"), l);
    free(out);
    free(err);
    return rc;
}

Test(pn_check_usage, the_finding_code_tables_exit_statuses_are_pn_checks)
{
    code_row rows[128];
    const size_t n = read_code_table(rows, 128);
    cr_assert_gt(n, 40, "the table has its rows");
    for (size_t i = 0; i < n; i++) {
        /* an error exits 1, a warning 0 (1 under --strict): the only two */
        if (strcmp(rows[i].severity, "error") == 0)
            cr_assert(rows[i].exit[0] == '1', "%s: %s", rows[i].code, rows[i].exit);
        else
            cr_assert(strncmp(rows[i].exit, "0; 1 with `--strict`", 20) == 0, "%s: %s",
                      rows[i].code, rows[i].exit);
    }
    /* and pn-check agrees, for an unreadable file, an error and a warning */
    const char *junk = tu_join_static(g_dir, "junk.gguf");
    cr_assert_eq(tu_write_file(junk, "hello", 5), 0);
    char code[48];
    int rc = first_code("", junk, code, sizeof code);
    cr_assert_str_eq(code, "GGUF-NOT-GGUF");
    cr_assert_eq(rc, row_of(rows, n, code)->exit[0] - '0', "%s exits %d", code, rc);
    const char *p = copy_of_good("usage-embd.gguf");
    set_u32(p, "qwen35.embedding_length", 256);
    rc = first_code("", p, code, sizeof code);
    cr_assert_str_eq(code, "ARCH-SHAPE");
    cr_assert_eq(rc, row_of(rows, n, code)->exit[0] - '0', "%s exits %d", code, rc);
    rc = first_code("", g_good, code, sizeof code);
    cr_assert_str_eq(code, "PN-META-MISSING");
    cr_assert_eq(rc, 0);
    cr_assert_eq(first_code("--strict", g_good, code, sizeof code), 1, "1 with --strict");
}

/* Every code literal of the check's sources ("ARCH-SHAPE", ...) has its row. */
Test(pn_check_usage, every_code_pn_check_can_report_is_in_the_table)
{
    code_row rows[128];
    const size_t n = read_code_table(rows, 128);
    const char *files[] = { "check/check.c",        "check/check_meta.c",   "check/check_data.c",
                            "check/check_recipe.c", "check/check_source.c", "check/check_imatrix.c",
                            "gguf/qwen35_arch.c",   "gguf/vocab_check.c",   "gguf/header_hash.c" };
    const char *prefixes[] = { "GGUF-",    "PN-",    "TENSOR-", "RECIPE-",   "SRC-",
                               "IMATRIX-", "SPLIT-", "ARCH-",   "TOKENIZER-" };
    int seen = 0;
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", PN_SOURCE_DIR, files[f]);
        size_t len = 0;
        char *src = tu_read_file(path, &len);
        cr_assert_not_null(src, "%s", path);
        for (char *q = strchr(src, '"'); q; q = strchr(q + 1, '"')) {
            size_t k = strspn(q + 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-");
            if (k < 4 || q[1 + k] != '"')
                continue;
            char code[48];
            snprintf(code, sizeof code, "%.*s", (int)k, q + 1);
            bool known = false;
            for (size_t p = 0; p < sizeof prefixes / sizeof *prefixes; p++)
                known |= strncmp(code, prefixes[p], strlen(prefixes[p])) == 0;
            if (!known || code[k - 1] == '-')
                continue;
            (void)row_of(rows, n, code);
            seen++;
            q += k + 1;
        }
        free(src);
    }
    cr_assert_gt(seen, 40, "the sources' codes were found");
}

/* ---- split sets: --dump of any split, and DST as the set's name ---- */

TestSuite(pn_check_split, .init = setup, .fini = teardown, .timeout = 60);

/* The model as a set of 3 splits, DST "s.gguf": s-0000N-of-00003.gguf. */
static const char *make_set(void)
{
    const char *dst = tu_join_static(g_dir, "s.gguf");
    char *out = NULL, *err = NULL;
    int rc = tu_run_program(&out, &err, "pn-synth",
                            "--quiet --layers 4 --mtp --width-scale 16 --vocab 300 --dtype f32 "
                            "--threads 2 --split-max-tensors 30 '%s'",
                            dst);
    cr_assert_eq(rc, 0, "pn-synth: %s", err);
    free(out);
    free(err);
    return dst;
}

Test(pn_check_split, dump_of_a_later_split_shows_its_own_keys_and_the_file_of_each_offset)
{
    make_set();
    char second[4096];
    snprintf(second, sizeof second, "%s/s-00002-of-00003.gguf", g_dir);
    char *out = NULL, *err = NULL;
    int rc = tu_run_program(&out, &err, "pn-check", "--dump '%s'", second);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_str_empty(err);
    /* its keys: the split keys alone, split.no 1; not the first split's */
    cr_assert(strstr(out, "split.no = 1\n") != NULL, "%s", out);
    cr_assert_null(strstr(out, "general.architecture"), "the first split's keys: %s", out);
    cr_assert(strstr(out, "its set of 3 files, each offset in the file named") != NULL, "%s", out);
    /* every tensor line names the file its offset is in */
    int lines = 0, in_second = 0;
    for (const char *l = strstr(out, "\n    1: f32"); l && *l; l = strchr(l + 1, '\n')) {
        if (l[1] == '\0')
            break;
        lines++;
        const char *end = strchr(l + 1, '\n');
        char *line = strndup(l + 1, end ? (size_t)(end - l - 1) : strlen(l + 1));
        cr_assert(strstr(line, "  in ") != NULL, "a line without its file: %s", line);
        in_second += strstr(line, "in ") && strstr(line, "s-00002-of-00003.gguf") != NULL;
        free(line);
    }
    cr_assert_eq(lines, 71, "every tensor of the set: %s", out);
    cr_assert_eq(in_second, 30, "30 of them in the second split");
    free(out);
    free(err);
}

Test(pn_check_split, the_name_given_to_split_max_size_is_taken_as_the_set)
{
    const char *dst = make_set();
    char *out = NULL, *err = NULL;
    int rc = tu_run_program(&out, &err, "pn-check", "'%s'", dst);
    cr_assert_eq(rc, 0, "%s%s", out, err);
    cr_assert(strstr(out, "s-00001-of-00003.gguf: a split set of 3 files, 71 tensors") != NULL,
              "%s", out);
    cr_assert(strstr(err, "s.gguf is a split set: checked from its first split") != NULL, "%s",
              err);
    free(out);
    free(err);
    /* --quiet: no note */
    rc = tu_run_program(&out, &err, "pn-check", "--quiet '%s'", dst);
    cr_assert_eq(rc, 0);
    cr_assert_str_empty(err);
    free(out);
    free(err);
    /* two sets under the name: both named, nothing checked */
    char first[4096], other[4096];
    snprintf(first, sizeof first, "%s/s-00001-of-00003.gguf", g_dir);
    snprintf(other, sizeof other, "%s/s-00001-of-00002.gguf", g_dir);
    size_t n = 0;
    void *b = tu_read_file(first, &n);
    cr_assert_eq(tu_write_file(other, b, n), 0);
    free(b);
    rc = tu_run_program(&out, &err, "pn-check", "'%s'", dst);
    cr_assert_eq(rc, 1, "%s", err);
    cr_assert_str_empty(out);
    cr_assert(strstr(err, "no such file, and 2 split sets have its name") != NULL, "%s", err);
    cr_assert(strstr(err, "s-00001-of-00002.gguf, ") && strstr(err, "s-00001-of-00003.gguf"), "%s",
              err);
    free(out);
    free(err);
}

/* ---- the header hash: a file we wrote proves its keys ---- */

TestSuite(header_hash, .init = setup, .fini = teardown, .timeout = 60);

/* The file offset of key's name (after its length). */
static uint64_t name_offset(const char *path, const char *key)
{
    return value_offset(path, key) - 4 - strlen(key);
}

/* pn-check --json of path: its exit status and stdout. */
static int check_json(const char *path, char **out)
{
    char *err = NULL;
    int rc = tu_run_program(out, &err, "pn-check", "--json '%s'", path);
    cr_assert_str_empty(err, "%s", err);
    free(err);
    return rc;
}

/* One error exactly: the one named. */
static void expect_only_hash_finding(const char *path, const char *key, const char *text)
{
    expect_finding(path, "PN-HEADER-HASH-MISMATCH", text);
    char *out = NULL;
    cr_assert_eq(check(path, &out), 1);
    char head[256];
    snprintf(head, sizeof head, "error   PN-HEADER-HASH-MISMATCH key %s: ", key);
    cr_assert(strstr(out, head) != NULL, "the finding names key %s: %s", key, out);
    cr_assert(strstr(out, "\ninvalid (1 error, 1 warning)") != NULL, "%s", out);
    cr_assert(strstr(out, "\nheader: mismatch: ") != NULL, "%s", out);
    free(out);
}

Test(header_hash, the_unchanged_model_is_proven)
{
    char *out = NULL;
    cr_assert_eq(check(g_good, &out), 0, "%s", out);
    cr_assert(strstr(out, "\nheader: proven: ") != NULL, "%s", out);
    cr_assert(strstr(out, "pn.header.fnv1a64 = 0x") != NULL, "%s", out);
    free(out);
    cr_assert_eq(check_json(g_good, &out), 0, "%s", out);
    cr_assert(strstr(out, "\"header\": \"proven\"") != NULL, "%s", out);
    free(out);
}

Test(header_hash, a_renamed_key_is_named_with_its_recorded_name)
{
    const char *p = copy_of_good("renamed.gguf");
    write_at(p, name_offset(p, "general.name") + 3, "X", 1);
    expect_only_hash_finding(p, "genXral.name", "general.name renamed to genXral.name");
    char *out = NULL;
    cr_assert_eq(check_json(p, &out), 1, "%s", out);
    cr_assert(strstr(out, "\"code\": \"PN-HEADER-HASH-MISMATCH\", \"tensor\": null, "
                          "\"key\": \"genXral.name\"") != NULL,
              "%s", out);
    cr_assert(strstr(out, "\"header\": \"mismatch\"") != NULL, "%s", out);
    free(out);
}

Test(header_hash, one_value_byte_changed_names_the_key)
{
    const char *p = copy_of_good("value.gguf");
    /* the context length is read by llama.cpp but no shape depends on it:
     * only the hash can tell */
    set_u32(p, "qwen35.context_length", read_u32_key(p, "qwen35.context_length") ^ 0x100);
    expect_only_hash_finding(p, "qwen35.context_length",
                             "its value is not the one the header hash records");
}

static void add_comment(gguf_writer *w, void *arg)
{
    (void)arg;
    cr_assert_eq(gguf_writer_set_str(w, "general.comment", "added later"), PN_OK);
}

static void add_nothing(gguf_writer *w, void *arg)
{
    (void)w;
    (void)arg;
}

Test(header_hash, an_added_key_is_named)
{
    const char *p = copy_of_good("added.gguf");
    rewrite(p, NULL, add_comment, NULL);
    expect_only_hash_finding(p, "general.comment",
                             "key general.comment is not in the header hash's record");
}

Test(header_hash, a_removed_key_is_named)
{
    const char *p = copy_of_good("removed.gguf");
    rewrite(p, "general.name", add_nothing, NULL);
    expect_only_hash_finding(p, "general.name",
                             "key general.name, pn.header.keys[1], is not in "
                             "the file");
}

Test(header_hash, a_file_without_the_record_is_valid_and_unproven)
{
    /* what an older build (or another tool) writes: the same keys, no record */
    const char *p = copy_of_good("older.gguf");
    rewrite(p, "pn.header.*", add_nothing, NULL);
    char *out = NULL;
    cr_assert_eq(check(p, &out), 0, "%s", out);
    cr_assert(strstr(out, "\nheader: unproven: no header hash") != NULL, "%s", out);
    cr_assert(strstr(out, "\nvalid (0 errors, 1 warning)") != NULL, "%s", out);
    free(out);
    cr_assert_eq(check_json(p, &out), 0, "%s", out);
    cr_assert(strstr(out, "\"header\": \"unproven\"") != NULL, "%s", out);
    cr_assert_null(strstr(out, "PN-HEADER"), "%s", out);
    free(out);
    /* the model check of items 1-2 still runs on it */
    set_u32(p, "qwen35.embedding_length", 256);
    expect_finding(p, "ARCH-SHAPE", "qwen35.embedding_length = 256");
}

Test(header_hash, a_record_cut_short_is_named)
{
    const char *p = copy_of_good("cut.gguf");
    rewrite(p, "pn.header.value_fnv1a64", add_nothing, NULL);
    expect_only_hash_finding(p, "pn.header.value_fnv1a64", "is absent");
}

Test(header_hash, pn_dequant_refuses_a_header_that_is_not_the_one_written)
{
    const char *p = copy_of_good("renamed.gguf");
    write_at(p, name_offset(p, "general.name") + 3, "X", 1);
    const char *o = tu_join_static(g_dir, "renamed-decoded.gguf");
    char *out = NULL, *err = NULL;
    int rc = tu_run_program(&out, &err, "pn-dequant", "'%s' '%s'", p, o);
    cr_assert_eq(rc, 1, "refused, exit 1: %s", err);
    cr_assert(strstr(err, "PN-HEADER-HASH-MISMATCH: key genXral.name") != NULL, "%s", err);
    cr_assert(!tu_exists(o), "nothing written");
    free(out);
    free(err);
}

/* pn-compare decodes a PN file through pn-dequant: a header that is not the
 * one written is refused before llama.cpp is given anything decoded. */
Test(header_hash, pn_compare_refuses_a_header_that_is_not_the_one_written, .timeout = 240)
{
    TU_REQUIRE_LLAMA(PN_SOURCE_DIR "/tools/llama/pn-llama-logits.mjs", NULL);
    const char *pn = tu_join_static(g_dir, "cmp.gguf");
    char *out = NULL, *err = NULL;
    int rc = tu_run_program(&out, &err, "pn-quantize",
                            "--quiet --threads 2 --promote 0 --recipe test-fallback '%s' '%s'",
                            g_good, pn);
    cr_assert_eq(rc, 0, "pn-quantize: %s", err);
    free(out);
    free(err);
    write_at(pn, name_offset(pn, "general.name") + 3, "X", 1);
    rc = tu_run_program(&out, &err, "pn-compare", "--threads 2 '%s' '%s'", g_good, pn);
    cr_assert_eq(rc, 1, "refused, exit 1: %s%s", out, err);
    cr_assert(strstr(err, "decoding ") &&
                  strstr(err, "PN-HEADER-HASH-MISMATCH: key genXral.name is not in the header "
                              "hash's record"),
              "%s", err);
    free(out);
    free(err);
}

/* The file offset of key's value in that one file (a split alone). */
static uint64_t value_offset_in_file(const char *path, const char *key)
{
    gguf_reader *r = NULL;
    pn_error e = { 0 };
    cr_assert_eq(gguf_reader_open_flags(path, GGUF_OPEN_ONE_FILE, &r, &e), PN_OK, "%s", e.msg);
    const gguf_kv *kv = gguf_reader_find_kv(r, key);
    cr_assert_not_null(kv, "no key %s in %s", key, path);
    uint64_t at = (uint64_t)((const uint8_t *)kv->key.data - gguf_reader_bytes(r)) + kv->key.len;
    gguf_reader_close(r);
    return at + 4;
}

Test(header_hash, each_split_proves_its_own_keys)
{
    const char *dst = tu_join_static(g_dir, "q.gguf");
    char *out = NULL, *err = NULL;
    int rc = tu_run_program(&out, &err, "pn-quantize",
                            "--quiet --threads 2 --promote 0 --recipe test-fallback "
                            "--split-max-tensors 30 '%s' '%s'",
                            g_good, dst);
    cr_assert_eq(rc, 0, "pn-quantize: %s", err);
    free(out);
    free(err);
    char second[4096];
    snprintf(second, sizeof second, "%s/q-00002-of-00003.gguf", g_dir);
    cr_assert_eq(check(second, &out), 0, "%s", out);
    cr_assert(strstr(out, "\nheader: proven: every split's keys proven") != NULL, "%s", out);
    free(out);
    /* the second split's share of the CRCs, one byte changed (element 0's
     * bytes start after the array's type and count) */
    write_at(second, value_offset_in_file(second, "pn.tensor_crc32") + 12, "\x5a", 1);
    cr_assert_eq(check(second, &out), 1, "%s", out);
    char head[4200];
    snprintf(head, sizeof head,
             "error   PN-HEADER-HASH-MISMATCH file %s key pn.tensor_crc32: key pn.tensor_crc32: "
             "its value is not the one",
             second);
    cr_assert(strstr(out, head) != NULL, "the split is named: %s", out);
    free(out);
}
