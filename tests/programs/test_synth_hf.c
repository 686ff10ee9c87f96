/* pn-synth --hf: the model as a Hugging Face checkpoint folder, and --mtp.
 *
 * The folder is read here with Jansson, independently of hf/ (which is
 * pn-convert's reader): its JSON files parse, its shards' safetensors
 * headers list the tensors the index says, each shard within --shard-size.
 * The key property (synth_convert): pn-convert of `pn-synth --hf DIR` is,
 * tensor for tensor (name, type, shape, bytes), the GGUF that pn-synth
 * writes with the same options. pn-synth derives its GGUF from the
 * checkpoint's weights by the converter's rules (synth/synth_internal.h)
 * and pn-convert is checked against llama.cpp's own converter
 * (tests/programs/test_hf.c): two implementations of the rules that must agree. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "quant/types.h"
#include "synth/synth.h"
#include "test_util.h"

#define GOLDEN PN_TEST_DATA "/hf-qwen35-tiny"

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

static char *in_dir(const char *name)
{
    return tu_join(g_dir, name);
}

static int run(const char *prog, const char *args, char **err)
{
    char cmd[16384], *out;
    snprintf(cmd, sizeof cmd, "%s/%s %s", PN_BIN_DIR, prog, args);
    int rc = tu_run(cmd, &out, err);
    free(out);
    return rc;
}

static void run_ok(const char *prog, const char *args)
{
    char *err;
    int rc = run(prog, args, &err);
    cr_assert_eq(rc, 0, "%s %s: exit %d: %s", prog, args, rc, err);
    free(err);
}

/* pn-synth --hf ARGS DIR (a name in g_dir); returns the folder's path. */
static char *synth_hf(const char *name, const char *args)
{
    char *dir = in_dir(name), a[8192];
    snprintf(a, sizeof a, "--quiet --hf %s '%s'", args, dir);
    run_ok("pn-synth", a);
    return dir;
}

static char *synth_gguf(const char *name, const char *args)
{
    char *path = in_dir(name), a[8192];
    snprintf(a, sizeof a, "--quiet %s '%s'", args, path);
    run_ok("pn-synth", a);
    return path;
}

static json_t *load_json(const char *dir, const char *name)
{
    char *p = tu_join(dir, name);
    json_error_t je;
    json_t *j = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
    cr_assert_not_null(j, "%s: %s (line %d)", p, je.text, je.line);
    cr_assert(json_is_object(j), "%s is not a JSON object", p);
    free(p);
    return j;
}

static json_int_t int_at(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    cr_assert(json_is_integer(v), "key %s is not an integer", key);
    return json_integer_value(v);
}

/* ---- the shards, read here ---- */

typedef struct st_tensor {
    char name[128];
    char dtype[8];
    int n_dims;
    int64_t shape[8];
    char shard[64];
} st_tensor;

typedef struct folder {
    json_t *config, *text, *index;
    st_tensor *t;
    size_t n;
    size_t n_shards;
    uint64_t max_shard_data;
    uint64_t shard_data[64];
    char shard_name[64][64]; /* in the order first named by the index */
} folder;

/* Parses every shard the index names: 8-byte LE length, a JSON header
 * (padded to 8 with spaces) of name -> {dtype, shape, data_offsets} and
 * __metadata__, the data offsets contiguous from 0 to the end of the file,
 * each tensor in the shard the index names. */
static folder read_folder(const char *dir)
{
    folder f;
    memset(&f, 0, sizeof f);
    f.config = load_json(dir, "config.json");
    f.text = json_object_get(f.config, "text_config");
    cr_assert(json_is_object(f.text), "config.json has no text_config");
    f.index = load_json(dir, "model.safetensors.index.json");
    const json_t *map = json_object_get(f.index, "weight_map");
    cr_assert(json_is_object(map));
    f.t = calloc(json_object_size(map) + 1, sizeof *f.t);
    const char *shards[64];
    const char *tname;
    const json_t *v;
    json_object_foreach((json_t *)map, tname, v)
    {
        cr_assert(json_is_string(v));
        size_t k;
        for (k = 0; k < f.n_shards; k++)
            if (strcmp(shards[k], json_string_value(v)) == 0)
                break;
        if (k == f.n_shards) {
            cr_assert_lt(f.n_shards, 64);
            shards[f.n_shards++] = json_string_value(v);
        }
    }
    uint64_t total = 0;
    for (size_t s = 0; s < f.n_shards; s++) {
        char *p = tu_join(dir, shards[s]);
        size_t size;
        uint8_t *d = tu_read_file(p, &size);
        cr_assert_geq(size, 8);
        uint64_t hl = 0;
        for (int b = 0; b < 8; b++)
            hl |= (uint64_t)d[b] << (8 * b);
        cr_assert_leq(8 + hl, size, "%s: header past the file", p);
        cr_assert_eq(hl % 8, 0, "%s: header of %llu bytes is not padded to 8", p,
                     (unsigned long long)hl);
        json_error_t je;
        json_t *h = json_loadb((const char *)d + 8, hl, JSON_REJECT_DUPLICATES, &je);
        cr_assert_not_null(h, "%s: header: %s", p, je.text);
        cr_assert(json_is_object(json_object_get(h, "__metadata__")), "%s: no __metadata__", p);
        uint64_t at = 0;
        const char *name;
        json_t *e;
        json_object_foreach(h, name, e)
        {
            if (strcmp(name, "__metadata__") == 0)
                continue;
            st_tensor *t = &f.t[f.n++];
            cr_assert_leq(f.n, json_object_size(map), "%s: more tensors than the index", p);
            snprintf(t->name, sizeof t->name, "%s", name);
            snprintf(t->shard, sizeof t->shard, "%s", shards[s]);
            const json_t *idx = json_object_get(map, name);
            cr_assert(idx && strcmp(json_string_value(idx), shards[s]) == 0,
                      "%s is in %s but the index says %s", name, shards[s],
                      idx ? json_string_value(idx) : "nothing");
            snprintf(t->dtype, sizeof t->dtype, "%s",
                     json_string_value(json_object_get(e, "dtype")));
            const json_t *shape = json_object_get(e, "shape");
            cr_assert(json_is_array(shape));
            t->n_dims = (int)json_array_size(shape);
            uint64_t elems = 1;
            for (int d2 = 0; d2 < t->n_dims; d2++) {
                t->shape[d2] = json_integer_value(json_array_get(shape, (size_t)d2));
                elems *= (uint64_t)t->shape[d2];
            }
            const json_t *off = json_object_get(e, "data_offsets");
            uint64_t b0 = (uint64_t)json_integer_value(json_array_get(off, 0));
            uint64_t b1 = (uint64_t)json_integer_value(json_array_get(off, 1));
            cr_assert_eq(b0, at, "%s: %s starts at %llu, not right after the one before", p, name,
                         (unsigned long long)b0);
            uint64_t es = strcmp(t->dtype, "F32") == 0 ? 4 : 2;
            cr_assert_eq(b1 - b0, elems * es, "%s: %s: shape and byte range disagree", p, name);
            at = b1;
        }
        cr_assert_eq(8 + hl + at, size, "%s: the data does not end the file", p);
        f.shard_data[s] = at;
        snprintf(f.shard_name[s], sizeof f.shard_name[s], "%s", shards[s]);
        if (at > f.max_shard_data)
            f.max_shard_data = at;
        total += at;
        json_decref(h);
        free(d);
        free(p);
    }
    cr_assert_eq(f.n, json_object_size(map), "the shards hold %zu tensors, the index %zu", f.n,
                 json_object_size(map));
    cr_assert_eq(int_at(json_object_get(f.index, "metadata"), "total_size"), (json_int_t)total);
    return f;
}

static void folder_free(folder *f)
{
    json_decref(f->config);
    json_decref(f->index);
    free(f->t);
}

static const st_tensor *find(const folder *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}

static size_t count_prefix(const folder *f, const char *prefix)
{
    size_t n = 0;
    for (size_t i = 0; i < f->n; i++)
        n += strncmp(f->t[i].name, prefix, strlen(prefix)) == 0;
    return n;
}

/* ---- the folder ---- */

Test(synth_hf, the_folder_parses_and_lists_the_model_tensors, .init = setup, .fini = teardown)
{
    char *dir = synth_hf("m", "--layers 4 --width-scale 8 --vocab 300");
    folder f = read_folder(dir);
    const json_t *arch = json_object_get(f.config, "architectures");
    cr_assert_str_eq(json_string_value(json_array_get(arch, 0)), "Qwen3_5ForConditionalGeneration");
    cr_assert(json_is_object(json_object_get(f.config, "vision_config")));
    /* width scale 8: n_embd 640, n_ff 2176, 3 heads of 256 (1 kv head), 6
     * linear value heads and 2 key heads of 128 */
    cr_assert_eq(int_at(f.text, "hidden_size"), 640);
    cr_assert_eq(int_at(f.text, "intermediate_size"), 2176);
    cr_assert_eq(int_at(f.text, "num_hidden_layers"), 4);
    cr_assert_eq(int_at(f.text, "num_attention_heads"), 3);
    cr_assert_eq(int_at(f.text, "num_key_value_heads"), 1);
    cr_assert_eq(int_at(f.text, "head_dim"), 256);
    cr_assert_eq(int_at(f.text, "linear_num_key_heads"), 2);
    cr_assert_eq(int_at(f.text, "linear_num_value_heads"), 6);
    cr_assert_eq(int_at(f.text, "linear_key_head_dim"), 128);
    cr_assert_eq(int_at(f.text, "linear_value_head_dim"), 128);
    cr_assert_eq(int_at(f.text, "vocab_size"), 300);
    cr_assert_eq(int_at(f.text, "mtp_num_hidden_layers"), 0);
    const json_t *lt = json_object_get(f.text, "layer_types");
    cr_assert_eq(json_array_size(lt), 4);
    cr_assert_str_eq(json_string_value(json_array_get(lt, 3)), "full_attention");
    cr_assert_str_eq(json_string_value(json_array_get(lt, 0)), "linear_attention");
    /* 3 linear blocks of 14, 1 full block of 11, 3 top tensors, 3 vision */
    cr_assert_eq(f.n, 3 * 14 + 11 + 3 + 3, "%zu tensors", f.n);
    struct {
        const char *name;
        int n;
        int64_t s[3];
    } want[] = {
        { "model.language_model.embed_tokens.weight", 2, { 300, 640 } },
        { "lm_head.weight", 2, { 300, 640 } },
        { "model.language_model.norm.weight", 1, { 640 } },
        { "model.language_model.layers.0.linear_attn.in_proj_qkv.weight", 2, { 1280, 640 } },
        { "model.language_model.layers.0.linear_attn.in_proj_z.weight", 2, { 768, 640 } },
        { "model.language_model.layers.0.linear_attn.conv1d.weight", 3, { 1280, 1, 4 } },
        { "model.language_model.layers.0.linear_attn.A_log", 1, { 6 } },
        { "model.language_model.layers.0.linear_attn.dt_bias", 1, { 6 } },
        { "model.language_model.layers.0.linear_attn.norm.weight", 1, { 128 } },
        { "model.language_model.layers.0.linear_attn.out_proj.weight", 2, { 640, 768 } },
        { "model.language_model.layers.2.linear_attn.in_proj_a.weight", 2, { 6, 640 } },
        { "model.language_model.layers.3.self_attn.q_proj.weight", 2, { 1536, 640 } },
        { "model.language_model.layers.3.self_attn.o_proj.weight", 2, { 640, 768 } },
        { "model.language_model.layers.3.mlp.down_proj.weight", 2, { 640, 2176 } },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const st_tensor *t = find(&f, want[i].name);
        cr_assert_not_null(t, "%s missing", want[i].name);
        cr_assert_str_eq(t->dtype, "BF16", "%s", t->name);
        cr_assert_eq(t->n_dims, want[i].n, "%s", t->name);
        for (int d = 0; d < want[i].n; d++)
            cr_assert_eq(t->shape[d], want[i].s[d], "%s dim %d", t->name, d);
    }
    cr_assert_eq(count_prefix(&f, "model.visual."), 3, "the vision tensors");
    cr_assert_eq(count_prefix(&f, "mtp."), 0, "no MTP layer without --mtp");
    folder_free(&f);
    free(dir);
}

Test(synth_hf, shards_hold_at_most_the_shard_size, .init = setup, .fini = teardown)
{
    char *dir = synth_hf("m", "--layers 4 --width-scale 8 --vocab 300 --shard-size 3M");
    folder f = read_folder(dir);
    /* the largest tensor (ffn, 640 x 2176 BF16) is 2785280 bytes: every
     * shard fits 3000000 bytes */
    cr_assert_gt(f.n_shards, 4, "%zu shards", f.n_shards);
    for (size_t s = 0; s < f.n_shards; s++)
        cr_assert_leq(f.shard_data[s], 3000000u, "shard %zu: %llu bytes", s,
                      (unsigned long long)f.shard_data[s]);
    char name[64];
    snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", f.n_shards, f.n_shards);
    cr_assert_not_null(strstr(json_dumps(json_object_get(f.index, "weight_map"), 0), name));
    folder_free(&f);
    /* a shard size below a tensor's size: that tensor has a shard of its own */
    free(dir);
    dir = synth_hf("small", "--layers 2 --width-scale 16 --vocab 300 --shard-size 100000");
    f = read_folder(dir);
    for (size_t s = 0; s < f.n_shards; s++) {
        size_t in_shard = 0;
        for (size_t i = 0; i < f.n; i++)
            in_shard += strcmp(f.t[i].shard, f.shard_name[s]) == 0;
        cr_assert(f.shard_data[s] <= 100000 || in_shard == 1,
                  "shard %zu has %zu tensors and %llu bytes", s, in_shard,
                  (unsigned long long)f.shard_data[s]);
    }
    folder_free(&f);
    free(dir);
}

Test(synth_hf, mtp_and_vision_tensors_are_there_when_asked, .init = setup, .fini = teardown)
{
    char *dir = synth_hf("m", "--layers 4 --width-scale 16 --vocab 300 --mtp");
    folder f = read_folder(dir);
    cr_assert_eq(int_at(f.text, "mtp_num_hidden_layers"), 1);
    const char *mtp[] = {
        "mtp.fc.weight",
        "mtp.pre_fc_norm_embedding.weight",
        "mtp.pre_fc_norm_hidden.weight",
        "mtp.norm.weight",
        "mtp.layers.0.input_layernorm.weight",
        "mtp.layers.0.post_attention_layernorm.weight",
        "mtp.layers.0.self_attn.q_proj.weight",
        "mtp.layers.0.self_attn.k_proj.weight",
        "mtp.layers.0.self_attn.v_proj.weight",
        "mtp.layers.0.self_attn.o_proj.weight",
        "mtp.layers.0.self_attn.q_norm.weight",
        "mtp.layers.0.self_attn.k_norm.weight",
        "mtp.layers.0.mlp.gate_proj.weight",
        "mtp.layers.0.mlp.up_proj.weight",
        "mtp.layers.0.mlp.down_proj.weight",
    };
    for (size_t i = 0; i < sizeof mtp / sizeof mtp[0]; i++)
        cr_assert_not_null(find(&f, mtp[i]), "%s missing", mtp[i]);
    cr_assert_eq(count_prefix(&f, "mtp."), 15);
    const st_tensor *fc = find(&f, "mtp.fc.weight");
    cr_assert(fc->shape[0] == 320 && fc->shape[1] == 640, "mtp.fc is [E, 2E]");
    cr_assert_eq(count_prefix(&f, "model.visual."), 3);
    cr_assert_not_null(find(&f, "model.visual.patch_embed.proj.weight"));
    folder_free(&f);
    free(dir);
}

static char *str_dup_range(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

Test(synth_hf, the_tokenizer_is_the_gguf_vocabulary_with_the_qwen35_pattern, .init = setup,
     .fini = teardown)
{
    char *dir = synth_hf("m", "--layers 2 --width-scale 16 --vocab 400");
    char *gg = synth_gguf("m.gguf", "--layers 2 --width-scale 16 --vocab 400");
    json_t *tok = load_json(dir, "tokenizer.json");
    json_t *tcfg = load_json(dir, "tokenizer_config.json");
    gguf_reader *r;
    pn_error e;
    cr_assert_eq(gguf_reader_open(gg, &r, &e), PN_OK, "%s", e.msg);
    const gguf_kv *tokens = gguf_reader_find_kv(r, "tokenizer.ggml.tokens");
    const gguf_kv *merges = gguf_reader_find_kv(r, "tokenizer.ggml.merges");
    cr_assert(tokens && merges);
    const json_t *model = json_object_get(tok, "model");
    cr_assert_str_eq(json_string_value(json_object_get(model, "type")), "BPE");
    const json_t *vocab = json_object_get(model, "vocab");
    const json_t *added = json_object_get(tok, "added_tokens");
    cr_assert_eq(json_object_size(vocab) + json_array_size(added), 400);
    const char **by_id = calloc(400, sizeof *by_id);
    const char *text;
    const json_t *id;
    json_object_foreach((json_t *)vocab, text, id)
    {
        json_int_t k = json_integer_value(id);
        cr_assert(k >= 0 && k < 400 && !by_id[k], "id %lld", (long long)k);
        by_id[k] = text;
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i);
        json_int_t k = int_at(a, "id");
        cr_assert(k >= 0 && k < 400 && !by_id[k]);
        cr_assert(json_is_true(json_object_get(a, "special")));
        by_id[k] = json_string_value(json_object_get(a, "content"));
    }
    for (uint64_t i = 0; i < 400; i++) {
        gguf_str s = gguf_kv_arr_str(tokens, i);
        cr_assert_not_null(by_id[i], "no token %llu", (unsigned long long)i);
        cr_assert(s.len == strlen(by_id[i]) && memcmp(s.data, by_id[i], s.len) == 0,
                  "token %llu: '%s'", (unsigned long long)i, by_id[i]);
    }
    const json_t *jm = json_object_get(model, "merges");
    cr_assert_eq(json_array_size(jm), merges->arr_count);
    for (size_t i = 0; i < json_array_size(jm); i++) {
        const json_t *pair = json_array_get(jm, i);
        char joined[256];
        snprintf(joined, sizeof joined, "%s %s", json_string_value(json_array_get(pair, 0)),
                 json_string_value(json_array_get(pair, 1)));
        gguf_str s = gguf_kv_arr_str(merges, i);
        char *g = str_dup_range(s.data, s.len);
        cr_assert_str_eq(joined, g, "merge %zu", i);
        free(g);
    }
    /* the pattern is the one of the golden Qwen3.5 tokenizer.json (which
     * llama.cpp knows as qwen35) */
    json_t *golden = load_json(GOLDEN "/hf", "tokenizer.json");
    const json_t *gp = json_array_get(
        json_object_get(json_object_get(golden, "pre_tokenizer"), "pretokenizers"), 0);
    const json_t *sp =
        json_array_get(json_object_get(json_object_get(tok, "pre_tokenizer"), "pretokenizers"), 0);
    cr_assert(json_equal((json_t *)gp, (json_t *)sp), "the Split pre-tokenizer differs");
    cr_assert_str_eq(json_string_value(json_object_get(tcfg, "eos_token")), by_id[399]);
    cr_assert(json_is_false(json_object_get(tcfg, "add_bos_token")));
    free(by_id);
    json_decref(golden);
    json_decref(tok);
    json_decref(tcfg);
    gguf_reader_close(r);
    free(gg);
    free(dir);
}

Test(synth_hf, an_existing_target_is_refused_and_only_a_checkpoint_folder_replaced, .init = setup,
     .fini = teardown)
{
    char *dir = synth_hf("m", "--layers 2 --width-scale 16 --vocab 300");
    char a[8192], *err;
    snprintf(a, sizeof a, "--quiet --hf --layers 2 --width-scale 16 --vocab 300 '%s'", dir);
    cr_assert_eq(run("pn-synth", a, &err), 1);
    cr_assert(strstr(err, "exists") && strstr(err, "--force"), "%s", err);
    free(err);
    /* --force replaces what pn-synth --hf wrote, with another seed */
    char *cfg = tu_join(dir, "model-00001-of-00001.safetensors");
    size_t n1, n2;
    void *before = tu_read_file(cfg, &n1);
    snprintf(a, sizeof a,
             "--quiet --hf --force --seed 7 --layers 2 --width-scale 16 --vocab 300 "
             "'%s/'",
             dir);
    run_ok("pn-synth", a);
    void *after = tu_read_file(cfg, &n2);
    cr_assert(n1 == n2 && memcmp(before, after, n1) != 0, "--force did not replace the folder");
    free(before);
    free(after);
    /* but not a folder holding anything else */
    char *notes = tu_join(dir, "notes.txt");
    tu_write_file(notes, "mine", 4);
    snprintf(a, sizeof a, "--quiet --hf --force --layers 2 --width-scale 16 --vocab 300 '%s'", dir);
    cr_assert_eq(run("pn-synth", a, &err), 1);
    cr_assert(strstr(err, "notes.txt"), "%s", err);
    free(err);
    struct stat sb;
    cr_assert_eq(stat(notes, &sb), 0, "a refused --force removed a file");
    /* nor a file */
    char *file = in_dir("plain");
    tu_write_file(file, "x", 1);
    snprintf(a, sizeof a, "--quiet --hf --force --layers 2 --width-scale 16 --vocab 300 '%s'",
             file);
    cr_assert_eq(run("pn-synth", a, &err), 1);
    cr_assert(strstr(err, "not a folder"), "%s", err);
    free(err);
    stat(file, &sb);
    cr_assert_eq(sb.st_size, 1);
    /* nothing else was left beside them: m and plain only */
    cr_assert_eq(tu_count_files(g_dir), 2, "temporary folders left in %s", g_dir);
    free(file);
    free(notes);
    free(cfg);
    free(dir);
}

Test(synth_hf, a_failed_write_leaves_nothing, .init = setup, .fini = teardown)
{
    char cmd[8192], *out, *err;
    snprintf(cmd, sizeof cmd,
             "ulimit -f 512; exec %s/pn-synth --quiet --hf --layers 2 --width-scale 16 "
             "--vocab 300 '%s/m'",
             PN_BIN_DIR, g_dir);
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 1, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "file size limit"), "%s", err);
    cr_assert_eq(tu_count_files(g_dir), 0, "something was left in %s", g_dir);
    free(out);
    free(err);
}

Test(synth_hf, options_that_do_not_fit_are_usage_errors, .init = setup, .fini = teardown)
{
    char a[8192], *err;
    snprintf(a, sizeof a, "--hf --dtype f16 --layers 2 --width-scale 16 '%s/m'", g_dir);
    cr_assert_eq(run("pn-synth", a, &err), 2);
    cr_assert(strstr(err, "f16"), "%s", err);
    free(err);
    snprintf(a, sizeof a, "--hf --split-max-size 1M --layers 2 --width-scale 16 '%s/m'", g_dir);
    cr_assert_eq(run("pn-synth", a, &err), 2);
    free(err);
    snprintf(a, sizeof a, "--shard-size 1M --layers 2 --width-scale 16 '%s/m.gguf'", g_dir);
    cr_assert_eq(run("pn-synth", a, &err), 2);
    cr_assert(strstr(err, "--hf"), "%s", err);
    free(err);
    snprintf(a, sizeof a, "--hf --shard-size 0 --layers 2 --width-scale 16 '%s/m'", g_dir);
    cr_assert_eq(run("pn-synth", a, &err), 2);
    free(err);
    cr_assert_eq(tu_count_files(g_dir), 0);
}

/* --full --hf: the 27 B shape as a checkpoint, planned without writing it:
 * the size of the BF16 GGUF (about 54 GB) in shards of at most 5 GB. */
Test(synth_hf, the_full_shape_is_planned_in_5_gb_shards)
{
    pn_synth_opts o;
    memset(&o, 0, sizeof o);
    o.path = "/nonexistent/full";
    o.config = pn_qwen38_config_full();
    o.config.n_mtp = 1;
    uint64_t hf = 0, gguf = 0;
    size_t shards = 0, files = 0;
    pn_error e;
    cr_assert_eq(pn_synth_hf_bytes(&o, &hf, &shards, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(pn_synth_files(&o, &gguf, &files, &e), PN_OK, "%s", e.msg);
    cr_assert_gt(gguf, 53000000000ull);
    cr_assert_gt(hf, gguf - 2000000000ull, "%llu against %llu", (unsigned long long)hf,
                 (unsigned long long)gguf);
    cr_assert_lt(hf, gguf + 2000000000ull);
    cr_assert(shards >= 11 && shards <= 13, "%zu shards", shards);
    o.config.weight_type = PN_TYPE_F16;
    cr_assert_eq(pn_synth_hf_bytes(&o, &hf, &shards, &e), PN_ERR_USAGE);
}

/* ---- the GGUF form's MTP layer ---- */

static const char *gguf_type_name(int t)
{
    return t == PN_TYPE_F32 ? "F32" : t == PN_TYPE_BF16 ? "BF16" : t == PN_TYPE_F16 ? "F16" : "?";
}

/* The golden converter output at 4 layers (3 linear, 1 full, the MTP layer
 * as block 4) and pn-synth --mtp at 4 layers: the same tensor names, each
 * of the same type, and the MTP keys. */
Test(synth_gguf, the_mtp_layer_has_the_converters_names_types_and_keys, .init = setup,
     .fini = teardown)
{
    char *gg = synth_gguf("m.gguf", "--layers 4 --width-scale 16 --vocab 300 --mtp");
    gguf_reader *r;
    pn_error e;
    cr_assert_eq(gguf_reader_open(gg, &r, &e), PN_OK, "%s", e.msg);
    json_t *golden = load_json(GOLDEN, "converted.bf16.json");
    const json_t *gt = json_object_get(golden, "tensors");
    cr_assert_eq(gguf_reader_n_tensors(r), json_array_size(gt));
    size_t nextn = 0;
    for (size_t i = 0; i < json_array_size(gt); i++) {
        const json_t *t = json_array_get(gt, i);
        const char *name = json_string_value(json_object_get(t, "name"));
        long k = gguf_reader_find_tensor(r, name);
        cr_assert_geq(k, 0, "pn-synth --mtp lacks %s", name);
        const gguf_tensor_info *ti = gguf_reader_tensor(r, (size_t)k);
        cr_assert_str_eq(gguf_type_name(ti->type), json_string_value(json_object_get(t, "type")),
                         "%s", name);
        cr_assert_eq(ti->n_dims, json_array_size(json_object_get(t, "ne")), "%s", name);
        nextn += strstr(name, ".nextn.") != NULL;
    }
    cr_assert_eq(nextn, 4);
    const gguf_kv *bc = gguf_reader_find_kv(r, "qwen35.block_count");
    const gguf_kv *np = gguf_reader_find_kv(r, "qwen35.nextn_predict_layers");
    cr_assert(bc && bc->v.u64 == 5, "block_count counts the MTP layer");
    cr_assert(np && np->v.u64 == 1);
    gguf_reader_close(r);
    /* without --mtp: neither the layer nor the key */
    char *plain = synth_gguf("p.gguf", "--layers 4 --width-scale 16 --vocab 300");
    cr_assert_eq(gguf_reader_open(plain, &r, &e), PN_OK, "%s", e.msg);
    cr_assert_lt(gguf_reader_find_tensor(r, "blk.4.nextn.eh_proj.weight"), 0);
    cr_assert_null(gguf_reader_find_kv(r, "qwen35.nextn_predict_layers"));
    cr_assert_eq(gguf_reader_find_kv(r, "qwen35.block_count")->v.u64, 4);
    gguf_reader_close(r);
    json_decref(golden);
    free(plain);
    free(gg);
}

/* ---- pn-convert of the folder is the GGUF form ---- */

/* Every tensor of a is in b with the same type, shape and bytes, and b has
 * no other. */
static void assert_same_tensors(const char *pa, const char *pb)
{
    gguf_reader *a, *b;
    pn_error e;
    cr_assert_eq(gguf_reader_open(pa, &a, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(gguf_reader_open(pb, &b, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(gguf_reader_n_tensors(a), gguf_reader_n_tensors(b), "%zu tensors against %zu",
                 gguf_reader_n_tensors(a), gguf_reader_n_tensors(b));
    for (size_t i = 0; i < gguf_reader_n_tensors(a); i++) {
        const gguf_tensor_info *ta = gguf_reader_tensor(a, i);
        long k = gguf_reader_find_tensor(b, ta->name);
        cr_assert_geq(k, 0, "%s lacks %s", pb, ta->name);
        const gguf_tensor_info *tb = gguf_reader_tensor(b, (size_t)k);
        cr_assert_eq(ta->type, tb->type, "%s: type %s against %s", ta->name,
                     gguf_type_name(ta->type), gguf_type_name(tb->type));
        cr_assert_eq(ta->n_dims, tb->n_dims, "%s", ta->name);
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            cr_assert_eq(ta->ne[d], tb->ne[d], "%s: ne[%d]", ta->name, d);
        cr_assert_eq(ta->size, tb->size);
        uint8_t *da = malloc(ta->size), *db = malloc(tb->size);
        cr_assert_eq(gguf_reader_read_tensor(a, i, 0, da, ta->size, &e), PN_OK, "%s", e.msg);
        cr_assert_eq(gguf_reader_read_tensor(b, (size_t)k, 0, db, tb->size, &e), PN_OK, "%s",
                     e.msg);
        size_t first = 0;
        while (first < ta->size && da[first] == db[first])
            first++;
        cr_assert_eq(first, ta->size, "%s: the bytes differ from byte %zu", ta->name, first);
        free(da);
        free(db);
    }
    gguf_reader_close(a);
    gguf_reader_close(b);
}

/* pn-synth OPTS --hf, pn-convert CONVERT_OPTS of it, and pn-synth GGUF_OPTS:
 * the same tensors. */
static void check_convert(const char *synth_hf_opts, const char *convert_opts,
                          const char *synth_gguf_opts)
{
    char *dir = synth_hf("hf", synth_hf_opts);
    char *conv = in_dir("conv.gguf"), a[8192];
    snprintf(a, sizeof a, "--quiet %s '%s' '%s'", convert_opts, dir, conv);
    run_ok("pn-convert", a);
    char *gg = synth_gguf("synth.gguf", synth_gguf_opts);
    assert_same_tensors(gg, conv);
    free(gg);
    free(conv);
    free(dir);
}

/* Width scale 8: 2 linear key heads and 6 value heads, so every V-head
 * reorder is a real permutation (3 value heads per key head). */
#define W8 "--layers 4 --width-scale 8 --vocab 300"

Test(synth_convert, pn_convert_of_the_hf_form_is_the_gguf_form, .init = setup, .fini = teardown)
{
    check_convert(W8 " --shard-size 2M", "", W8);
}

Test(synth_convert, with_the_mtp_layer_too, .init = setup, .fini = teardown)
{
    check_convert(W8 " --mtp", "", W8 " --mtp");
}

Test(synth_convert, pn_convert_no_mtp_is_pn_synth_without_mtp, .init = setup, .fini = teardown)
{
    check_convert(W8 " --mtp", "--no-mtp", W8);
}

Test(synth_convert, an_f32_checkpoint_at_outtype_f32_is_the_f32_gguf_form, .init = setup,
     .fini = teardown)
{
    check_convert("--layers 3 --width-scale 16 --vocab 300 --dtype f32 --mtp", "--outtype f32",
                  "--layers 3 --width-scale 16 --vocab 300 --dtype f32 --mtp");
}

/* ---- pn-quantize of the folder is pn-quantize of the GGUF form ---- */

#define FALLBACK PN_SOURCE_DIR "/recipes/test-fallback.mix"

static void quantize(const char *src, const char *dst, const char *args)
{
    char a[8192];
    snprintf(a, sizeof a, "--quiet --backend cpu --threads 2 %s '%s' '%s'", args, src, dst);
    run_ok("pn-quantize", a);
}

/* Issue 20: with the MTP layer kept, and with pn-quantize --no-mtp of the
 * folder against pn-synth without --mtp: every tensor byte for byte. */
Test(synth_quantize, pn_quantize_of_the_folder_is_pn_quantize_of_the_gguf_form, .init = setup,
     .fini = teardown)
{
    const char *opts = "--layers 4 --width-scale 16 --vocab 300";
    char a[512];
    snprintf(a, sizeof a, "%s --mtp --shard-size 1M", opts);
    char *dir = synth_hf("hf", a);
    snprintf(a, sizeof a, "%s --mtp", opts);
    char *gg = synth_gguf("mtp.gguf", a), *plain = synth_gguf("plain.gguf", opts);
    char *q_dir = in_dir("q-dir.gguf"), *q_gg = in_dir("q-gguf.gguf");
    quantize(dir, q_dir, "--recipe " FALLBACK);
    quantize(gg, q_gg, "--recipe " FALLBACK);
    assert_same_tensors(q_gg, q_dir);
    char *q_nomtp = in_dir("q-nomtp.gguf"), *q_plain = in_dir("q-plain.gguf");
    quantize(dir, q_nomtp, "--no-mtp --recipe " FALLBACK);
    quantize(plain, q_plain, "--recipe " FALLBACK);
    assert_same_tensors(q_plain, q_nomtp);
    free(q_nomtp);
    free(q_plain);
    free(q_dir);
    free(q_gg);
    free(plain);
    free(gg);
    free(dir);
}

/* The shipped recipe (P0k+19) at width 4, where its q3_K/q4_K fit: with
 * --keep-mtp (it drops the layer itself) it types every tensor of
 * pn-synth's MTP layer (eh_proj q8_0, norms f32, attention and FFN as in
 * every block), and the dry run of the folder shows the plan of the GGUF
 * form, line for line. */
Test(synth_quantize, the_shipped_recipe_types_the_mtp_layer_in_both_forms, .init = setup,
     .fini = teardown)
{
    const char *opts = "--layers 4 --width-scale 4 --vocab 512 --mtp";
    char *dir = synth_hf("hf", opts), *gg = synth_gguf("m.gguf", opts);
    char cmd[8192], *plan_dir, *plan_gg, *err;
    snprintf(cmd, sizeof cmd,
             "%s/pn-quantize --dry-run --keep-mtp '%s' '%s/o.gguf' | grep -E "
             "'^(blk|token_embd|output)' | sort",
             PN_BIN_DIR, dir, g_dir);
    cr_assert_eq(tu_run(cmd, &plan_dir, &err), 0, "%s", err);
    free(err);
    snprintf(cmd, sizeof cmd,
             "%s/pn-quantize --dry-run --keep-mtp '%s' '%s/o.gguf' | grep -E "
             "'^(blk|token_embd|output)' | sort",
             PN_BIN_DIR, gg, g_dir);
    cr_assert_eq(tu_run(cmd, &plan_gg, &err), 0, "%s", err);
    free(err);
    cr_assert_str_eq(plan_dir, plan_gg, "the folder's plan differs from the GGUF's");
    const char *mtp[] = {
        "blk.4.nextn.eh_proj.weight", "blk.4.nextn.enorm.weight",
        "blk.4.nextn.hnorm.weight",   "blk.4.nextn.shared_head_norm.weight",
        "blk.4.attn_q.weight",        "blk.4.attn_k.weight",
        "blk.4.attn_v.weight",        "blk.4.attn_output.weight",
        "blk.4.attn_q_norm.weight",   "blk.4.attn_k_norm.weight",
        "blk.4.attn_norm.weight",     "blk.4.post_attention_norm.weight",
        "blk.4.ffn_gate.weight",      "blk.4.ffn_up.weight",
        "blk.4.ffn_down.weight",
    };
    for (size_t i = 0; i < sizeof mtp / sizeof mtp[0]; i++) {
        char needle[128];
        snprintf(needle, sizeof needle, "%s ", mtp[i]);
        const char *line = strstr(plan_gg, needle);
        cr_assert_not_null(line, "the dry run does not show %s:\n%s", mtp[i], plan_gg);
        const char *eol = strchr(line, '\n');
        char one[256];
        snprintf(one, sizeof one, "%.*s", (int)(eol ? eol - line : (long)strlen(line)), line);
        if (strstr(mtp[i], "norm"))
            cr_assert(strstr(one, " f32    f32 "), "%s", one);
        else if (strstr(mtp[i], "eh_proj"))
            cr_assert(strstr(one, " q8_0 "), "%s", one);
        else
            cr_assert(strstr(one, " pn3t ") || strstr(one, " pn4t "), "%s", one);
    }
    free(plan_dir);
    free(plan_gg);
    free(gg);
    free(dir);
}

/* The entries of g_dir whose names start with ".m.pn-synth-": temporary
 * folders of runs for g_dir/m. */
static int temporaries_of_m(void)
{
    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c '^\\.m\\.pn-synth-' || true", g_dir);
    cr_assert_eq(tu_run(cmd, &out, NULL), 0);
    int n = atoi(out);
    free(out);
    return n;
}

Test(synth_hf, a_sigkilled_run_leaves_a_temporary_that_the_next_run_removes, .init = setup,
     .fini = teardown, .timeout = 120)
{
    /* the default model (hundreds of MB) is killed as soon as its
     * temporary folder appears */
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && { '%s/pn-synth' --quiet --hf m & pid=$!; "
             "i=0; while ! ls -a | grep -q '^\\.m\\.pn-synth-' && [ $i -lt 3000 ]; do "
             "sleep 0.01; i=$((i+1)); done; kill -KILL $pid; wait $pid; true; }",
             g_dir, PN_BIN_DIR);
    cr_assert_eq(tu_run(cmd, NULL, NULL), 0);
    char *m = in_dir("m");
    cr_assert(!tu_exists(m), "the killed run did not put a folder in place");
    cr_assert_eq(temporaries_of_m(), 1, "the killed run left its temporary folder");
    /* the same command again (a smaller model, as quick): what the killed
     * run left is removed */
    synth_hf("m", "--layers 2 --width-scale 16 --vocab 300");
    cr_assert_eq(temporaries_of_m(), 0, "the next run removed the killed run's temporary");
    cr_assert_eq(tu_count_files(g_dir), 1, "only m is left in %s", g_dir);
    free(m);
}

Test(synth_hf, a_temporary_that_a_live_run_holds_is_left_alone, .init = setup, .fini = teardown)
{
    /* a temporary folder as a run that is still writing holds it */
    char *t = in_dir(".m.pn-synth-ABCDEF");
    cr_assert_eq(mkdir(t, 0755), 0);
    char *inside = tu_join(t, "config.json");
    cr_assert_eq(tu_write_file(inside, "{}", 2), 0);
    int fd = open(t, O_RDONLY | O_DIRECTORY);
    cr_assert(fd >= 0);
    cr_assert_eq(flock(fd, LOCK_EX | LOCK_NB), 0);
    synth_hf("m", "--layers 2 --width-scale 16 --vocab 300");
    cr_assert(tu_exists(inside), "a held temporary is another run's: left");
    /* released (its run ended without cleaning up): the next run removes it */
    close(fd);
    char *other = in_dir(".n.pn-synth-ABCDEF");
    cr_assert_eq(mkdir(other, 0755), 0);
    char a[4096];
    snprintf(a, sizeof a, "--quiet --hf --force --layers 2 --width-scale 16 --vocab 300 '%s/m'",
             g_dir);
    run_ok("pn-synth", a);
    cr_assert(!tu_exists(t), "an unheld temporary of m is removed");
    cr_assert(tu_exists(other), "a temporary of another target (n) is not m's: left");
    free(other);
    free(inside);
    free(t);
}
