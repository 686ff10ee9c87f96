/* pn-synth: the program's options, output and refusals, and the keys and
 * tokenizer that make its files complete qwen35 models. (That stock
 * llama.cpp loads and runs them is tests/programs/test_llama.c.)
 *
 * Here the tests that run the built programs; those that call the library
 * are in tests/synth/test_synth.c. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf/gguf.h"
#include "synth/qwen38_shapes.h"
#include "synth/qwen38_shapes_testing.h"
#include "synth/synth.h"
#include "quant/types.h"
#include "fixtures/loader_shapes.h"
#include "fixtures/scratch.h"
#include "test_util.h"

static int synth(const char *args, char **out, char **err)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s/pn-synth %s", PN_BIN_DIR, args);
    return tu_run(cmd, out, err);
}

static void write_model(const char *path, const char *args)
{
    char cmd[8192], *out, *err;
    snprintf(cmd, sizeof cmd, "--quiet %s %s", args, path);
    int rc = synth(cmd, &out, &err);
    cr_assert_eq(rc, 0, "pn-synth %s: exit %d: %s", cmd, rc, err);
    cr_assert_str_empty(out);
    free(out);
    free(err);
}

static gguf_reader *open_ok(const char *path)
{
    gguf_reader *r;
    pn_error e;
    cr_assert_eq(gguf_reader_open(path, &r, &e), PN_OK, "%s", e.msg);
    return r;
}

static uint64_t key_u(const gguf_reader *r, const char *key)
{
    const gguf_kv *kv = gguf_reader_find_kv(r, key);
    cr_assert_not_null(kv, "key %s missing", key);
    cr_assert(kv->type == GGUF_TYPE_UINT32 || kv->type == GGUF_TYPE_UINT64 ||
                  kv->type == GGUF_TYPE_BOOL,
              "key %s has type %d", key, kv->type);
    return kv->v.u64;
}

/* ---- the command line ---- */

Test(synth_cli, help_names_every_option)
{
    char *out, *err;
    cr_assert_eq(synth("--help", &out, &err), 0);
    const char *opts[] = { "--layers", "--width-scale", "--vocab",     "--dtype", "--seed",
                           "--full",   "--threads",     "--force",     "--quiet", "--version",
                           "--hf",     "--mtp",         "--shard-size" };
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        cr_assert(strstr(out, opts[i]), "--help lacks %s", opts[i]);
    /* the text is printed with fputs, so a printf escape shows */
    cr_assert_null(strstr(out, "%%"), "--help prints a doubled percent sign:\n%s", out);
    cr_assert(strstr(out, "0.1% of entries"), "%s", out);
    free(out);
    free(err);
}

Test(synth_cli, version_prints_the_program_and_its_version)
{
    char *out, *err;
    cr_assert_eq(synth("--version", &out, &err), 0);
    cr_assert_str_eq(out, "pn-synth " PN_VERSION "\n");
    cr_assert_str_empty(err);
    free(out);
    free(err);
}

Test(synth_cli, a_stdout_that_cannot_be_written_is_an_error)
{
    char *out, *err;
    cr_assert_eq(synth("--version > /dev/full", &out, &err), 1);
    cr_assert(strstr(err, "standard output"), "%s", err);
    cr_assert_eq(synth("--help > /dev/full", &out, &err), 1);
    free(out);
    free(err);
}

Test(synth_cli, bad_options_are_usage_errors)
{
    char *out, *err;
    cr_assert_eq(synth("--dtype q4_K x.gguf", &out, &err), 2);
    cr_assert(strstr(err, "bf16, f16 or f32"), "%s", err);
    cr_assert_eq(synth("--width-scale 0 x.gguf", &out, &err), 2);
    cr_assert_eq(synth("--width-scale 17 x.gguf", &out, &err), 2);
    cr_assert(strstr(err, "[1, 16]"), "%s", err);
    cr_assert_eq(synth("--full --layers 2 x.gguf", &out, &err), 2);
    cr_assert_eq(synth("", &out, &err), 2);
    free(out);
    free(err);
}

Test(synth_cli, one_layer_is_refused_because_llama_cpp_cannot_run_it, .init = setup,
     .fini = teardown)
{
    char args[4096], *out, *err;
    snprintf(args, sizeof args, "--layers 1 --width-scale 16 %s/one.gguf", g_dir);
    cr_assert_eq(synth(args, &out, &err), 2);
    cr_assert(strstr(err, "--layers 1") && strstr(err, "linear-attention") &&
                  strstr(err, "llama.cpp") && strstr(err, "2 layers or more"),
              "%s", err);
    struct stat sb;
    char path[4096];
    snprintf(path, sizeof path, "%s/one.gguf", g_dir);
    cr_assert_neq(stat(path, &sb), 0, "a refused run wrote its output");
    free(out);
    free(err);
}

Test(synth_cli, writes_the_tensor_list_with_the_chosen_dtype_and_f32_conv, .init = setup,
     .fini = teardown)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/m.gguf", g_dir);
    write_model(path, "--layers 4 --vocab 64 --dtype f16");
    gguf_reader *r = open_ok(path);
    pn_qwen38_config c = pn_qwen38_config_narrow(4, 4, 64);
    pn_tensor_desc *t;
    size_t n;
    pn_error e;
    cr_assert_eq(pn_qwen38_tensors(&c, &t, &n, &e), PN_OK);
    cr_assert_eq(gguf_reader_n_tensors(r), n);
    size_t convs = 0;
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor_info *ti = gguf_reader_tensor(r, i);
        cr_assert_str_eq(ti->name, t[i].name);
        cr_assert_eq(ti->n_dims, t[i].n_dims, "%s", ti->name);
        for (int k = 0; k < 4; k++)
            cr_assert_eq(ti->ne[k], t[i].ne[k], "%s", ti->name);
        /* llama.cpp's converter: 1-D tensors and the conv kernel stay f32
         * (its CPU conv asserts an f32 kernel) */
        bool conv = strstr(ti->name, "ssm_conv1d") != NULL;
        convs += conv;
        cr_assert_eq(ti->type, t[i].n_dims == 1 || conv ? PN_TYPE_F32 : PN_TYPE_F16, "%s",
                     ti->name);
    }
    cr_assert_eq(convs, 3);
    const gguf_kv *arch = gguf_reader_find_kv(r, "general.architecture");
    cr_assert(arch && gguf_str_eq(arch->v.str, "qwen35"));
    cr_assert_eq(key_u(r, "qwen35.block_count"), 4);
    cr_assert_eq(key_u(r, "general.file_type"), 1);
    free(t);
    gguf_reader_close(r);
}

Test(synth_cli, the_file_depends_on_the_seed_only_not_the_threads, .init = setup, .fini = teardown)
{
    char a[1024], b[1024], c[1024];
    snprintf(a, sizeof a, "%s/a.gguf", g_dir);
    snprintf(b, sizeof b, "%s/b.gguf", g_dir);
    snprintf(c, sizeof c, "%s/c.gguf", g_dir);
    write_model(a, "--layers 2 --width-scale 16 --vocab 64 --threads 1");
    write_model(b, "--layers 2 --width-scale 16 --vocab 64 --threads 2");
    write_model(c, "--layers 2 --width-scale 16 --vocab 64 --seed 2");
    size_t na, nb, nc;
    void *da = tu_read_file(a, &na), *db = tu_read_file(b, &nb), *dc = tu_read_file(c, &nc);
    cr_assert(na == nb && memcmp(da, db, na) == 0, "thread count changed the file");
    cr_assert(na == nc && memcmp(da, dc, na) != 0, "another seed gave the same file");
    free(da);
    free(db);
    free(dc);
}

Test(synth_cli, refuses_to_replace_a_file_without_force, .init = setup, .fini = teardown)
{
    char args[8192], *out, *err, path[1024];
    snprintf(path, sizeof path, "%s/m.gguf", g_dir);
    tu_write_file(path, "x", 1);
    snprintf(args, sizeof args, "--quiet --layers 2 --width-scale 16 --vocab 64 %s", path);
    cr_assert_eq(synth(args, &out, &err), 1);
    cr_assert(strstr(err, "exists") && strstr(err, "--force"), "%s", err);
    struct stat sb;
    stat(path, &sb);
    cr_assert_eq(sb.st_size, 1);
    free(out);
    free(err);
}

/* A file-size limit is a write error like a full disk,
 * with a message, exit 1 and no temporary file, not a death by SIGXFSZ */
Test(synth_cli, a_file_size_limit_is_a_clean_write_error, .init = setup, .fini = teardown)
{
    char cmd[8192], *out, *err;
    snprintf(cmd, sizeof cmd,
             "ulimit -f 1024; exec %s/pn-synth --quiet --layers 2 --width-scale 16 --vocab 64 "
             "%s/big.gguf",
             PN_BIN_DIR, g_dir);
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 1, "exit %d (153 is death by SIGXFSZ): %s", rc, err);
    cr_assert(strstr(err, "big.gguf") && strstr(err, "file size limit"), "%s", err);
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", g_dir);
    free(out);
    tu_run(cmd, &out, NULL);
    cr_assert_eq(atoi(out), 0, "files left in %s", g_dir);
    free(out);
    free(err);
}

Test(synth_keys, the_file_holds_every_key_the_loader_reads_consistent_with_its_shapes,
     .init = setup, .fini = teardown)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/m.gguf", g_dir);
    write_model(path, "--layers 3 --width-scale 8 --vocab 300 --dtype bf16");
    gguf_reader *r = open_ok(path);
    /* width scale 8: 3 heads of 256 (1 kv head), 6 ssm value heads and 2
     * key heads of 128, n_embd 640, n_ff 2176 */
    cr_assert_eq(key_u(r, "qwen35.block_count"), 3);
    cr_assert_eq(key_u(r, "qwen35.context_length"), 262144);
    cr_assert_eq(key_u(r, "qwen35.embedding_length"), 640);
    cr_assert_eq(key_u(r, "qwen35.feed_forward_length"), 2176);
    cr_assert_eq(key_u(r, "qwen35.attention.head_count"), 3);
    cr_assert_eq(key_u(r, "qwen35.attention.head_count_kv"), 1);
    cr_assert_eq(key_u(r, "qwen35.attention.key_length"), 256);
    cr_assert_eq(key_u(r, "qwen35.attention.value_length"), 256);
    cr_assert_eq(key_u(r, "qwen35.rope.dimension_count"), 64);
    cr_assert_eq(key_u(r, "qwen35.full_attention_interval"), 3);
    cr_assert_eq(key_u(r, "qwen35.ssm.conv_kernel"), 4);
    cr_assert_eq(key_u(r, "qwen35.ssm.state_size"), 128);
    cr_assert_eq(key_u(r, "qwen35.ssm.group_count"), 2);
    cr_assert_eq(key_u(r, "qwen35.ssm.time_step_rank"), 6);
    cr_assert_eq(key_u(r, "qwen35.ssm.inner_size"), 768);
    cr_assert_eq(key_u(r, "qwen35.vocab_size"), 300);
    cr_assert_eq(key_u(r, "general.file_type"), 32);
    const gguf_kv *eps = gguf_reader_find_kv(r, "qwen35.attention.layer_norm_rms_epsilon");
    cr_assert(eps && eps->type == GGUF_TYPE_FLOAT32 && (float)eps->v.f64 == 1e-6f);
    const gguf_kv *base = gguf_reader_find_kv(r, "qwen35.rope.freq_base");
    cr_assert(base && base->type == GGUF_TYPE_FLOAT32 && base->v.f64 == 1e7);
    const gguf_kv *sec = gguf_reader_find_kv(r, "qwen35.rope.dimension_sections");
    cr_assert(sec && sec->type == GGUF_TYPE_ARRAY && sec->arr_type == GGUF_TYPE_INT32 &&
                  sec->arr_count == 4,
              "rope.dimension_sections must be 4 int32 (llama.cpp's int[4])");
    int64_t sum = 0;
    for (int k = 0; k < 4; k++)
        sum += gguf_kv_arr_i64(sec, k);
    cr_assert_eq(sum, 32, "sections cover the 32 rotary pairs");
    /* the shapes the loader derives from those keys */
    pn_qwen38_hparams h = {
        .n_head = 3,
        .n_head_kv = 1,
        .head_dim = 256,
        .ssm_state = 128,
        .ssm_groups = 2,
        .ssm_v_heads = 6,
        .conv_kernel = 4,
    };
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *ti = gguf_reader_tensor(r, i);
        int64_t ne[2];
        int dims = synth_loader_shape(synth_role_of(ti->name), &h, 640, 2176, 300, ne);
        cr_assert_neq(dims, 0, "%s", ti->name);
        cr_assert(ti->ne[0] == ne[0] && ti->ne[1] == ne[1], "%s: %lld x %lld", ti->name,
                  (long long)ti->ne[0], (long long)ti->ne[1]);
    }
    cr_assert_geq(gguf_reader_find_tensor(r, "blk.2.attn_q.weight"), 0, "block 2 is full");
    cr_assert_geq(gguf_reader_find_tensor(r, "blk.1.attn_qkv.weight"), 0);
    gguf_reader_close(r);
}

/* ---- the tokenizer ---- */

/* UTF-8 of GPT-2's byte-to-unicode character for byte b, computed here by
 * its definition (printable bytes stand for themselves, the others, in
 * order, for U+0100 onwards). */
static const char *gpt2_text(int b, char buf[4])
{
    int cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
        cp = b;
    else {
        int n = 0;
        for (int x = 0; x < b; x++)
            n += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
        cp = 256 + n;
    }
    if (cp < 0x80) {
        buf[0] = (char)cp;
        buf[1] = 0;
    } else {
        buf[0] = (char)(0xC0 | (cp >> 6));
        buf[1] = (char)(0x80 | (cp & 0x3F));
        buf[2] = 0;
    }
    return buf;
}

static char *str_of(gguf_str s)
{
    char *p = malloc(s.len + 1);
    memcpy(p, s.data, s.len);
    p[s.len] = 0;
    return p;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

Test(synth_vocab, a_byte_level_bpe_vocabulary_of_exactly_vocab_tokens, .init = setup,
     .fini = teardown)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/v.gguf", g_dir);
    const uint64_t V = 3000;
    write_model(path, "--layers 2 --width-scale 16 --vocab 3000");
    gguf_reader *r = open_ok(path);
    const gguf_kv *model = gguf_reader_find_kv(r, "tokenizer.ggml.model");
    const gguf_kv *pre = gguf_reader_find_kv(r, "tokenizer.ggml.pre");
    cr_assert(model && gguf_str_eq(model->v.str, "gpt2"));
    cr_assert(pre && gguf_str_eq(pre->v.str, "qwen2"));
    const gguf_kv *tok = gguf_reader_find_kv(r, "tokenizer.ggml.tokens");
    const gguf_kv *typ = gguf_reader_find_kv(r, "tokenizer.ggml.token_type");
    const gguf_kv *mer = gguf_reader_find_kv(r, "tokenizer.ggml.merges");
    cr_assert(tok && tok->arr_type == GGUF_TYPE_STRING && tok->arr_count == V);
    cr_assert(typ && typ->arr_type == GGUF_TYPE_INT32 && typ->arr_count == V);
    cr_assert(mer && mer->arr_type == GGUF_TYPE_STRING && mer->arr_count == V - 256 - 3);
    char **t = malloc(V * sizeof *t);
    for (uint64_t i = 0; i < V; i++)
        t[i] = str_of(gguf_kv_arr_str(tok, i));
    char buf[4];
    for (int b = 0; b < 256; b++) {
        cr_assert_str_eq(t[b], gpt2_text(b, buf), "byte %d", b);
        cr_assert_eq(gguf_kv_arr_i64(typ, (uint64_t)b), 1);
    }
    cr_assert_str_eq(t[' '], "\xC4\xA0", "space is U+0120");
    cr_assert_str_eq(t['\n'], "\xC4\x8A", "newline is U+010A");
    cr_assert_str_eq(t[V - 3], "<|endoftext|>");
    cr_assert_str_eq(t[V - 2], "<|im_start|>");
    cr_assert_str_eq(t[V - 1], "<|im_end|>");
    for (uint64_t i = V - 3; i < V; i++)
        cr_assert_eq(gguf_kv_arr_i64(typ, i), 3, "special token %llu is control",
                     (unsigned long long)i);
    cr_assert_eq(key_u(r, "tokenizer.ggml.bos_token_id"), V - 3);
    cr_assert_eq(key_u(r, "tokenizer.ggml.eos_token_id"), V - 1);
    cr_assert_eq(key_u(r, "tokenizer.ggml.padding_token_id"), V - 3);
    cr_assert_eq(key_u(r, "tokenizer.ggml.add_bos_token"), 0);
    /* merge k joins two earlier tokens into token 256 + k */
    for (uint64_t k = 0; k < mer->arr_count; k++) {
        char *m = str_of(gguf_kv_arr_str(mer, k));
        char *sp = strchr(m, ' ');
        cr_assert_not_null(sp, "merge %llu: '%s'", (unsigned long long)k, m);
        *sp = 0;
        const char *left = m, *right = sp + 1;
        char joined[256];
        snprintf(joined, sizeof joined, "%s%s", left, right);
        cr_assert_str_eq(t[256 + k], joined, "merge %llu", (unsigned long long)k);
        bool lf = false, rf = false;
        for (uint64_t i = 0; i < 256 + k; i++) {
            lf |= strcmp(t[i], left) == 0;
            rf |= strcmp(t[i], right) == 0;
        }
        cr_assert(lf && rf, "merge %llu joins a token that does not exist before it",
                  (unsigned long long)k);
        free(m);
    }
    cr_assert_str_eq(t[256],
                     "\xC4\xA0"
                     "a",
                     "the first merge is 'Ġ a'");
    qsort(t, V, sizeof *t, cmp_str);
    for (uint64_t i = 1; i < V; i++)
        cr_assert_str_neq(t[i - 1], t[i], "token text '%s' twice", t[i]);
    for (uint64_t i = 0; i < V; i++)
        free(t[i]);
    free(t);
    gguf_reader_close(r);
}

Test(synth_vocab, a_small_vocabulary_keeps_the_low_bytes_and_end_of_text, .init = setup,
     .fini = teardown)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/v.gguf", g_dir);
    write_model(path, "--layers 2 --width-scale 16 --vocab 64");
    gguf_reader *r = open_ok(path);
    const gguf_kv *tok = gguf_reader_find_kv(r, "tokenizer.ggml.tokens");
    const gguf_kv *mer = gguf_reader_find_kv(r, "tokenizer.ggml.merges");
    cr_assert(tok && tok->arr_count == 64);
    cr_assert(mer && mer->arr_count == 0);
    char buf[4];
    for (int b = 0; b < 63; b++) {
        char *s = str_of(gguf_kv_arr_str(tok, (uint64_t)b));
        cr_assert_str_eq(s, gpt2_text(b, buf));
        free(s);
    }
    cr_assert(gguf_str_eq(gguf_kv_arr_str(tok, 63), "<|endoftext|>"));
    cr_assert_eq(key_u(r, "tokenizer.ggml.eos_token_id"), 63);
    cr_assert_eq(key_u(r, "qwen35.vocab_size"), 64);
    const gguf_tensor_info *emb = gguf_reader_tensor(r, 0);
    cr_assert_eq(emb->ne[1], 64);
    gguf_reader_close(r);
}
