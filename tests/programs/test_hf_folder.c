/* A Hugging Face folder can neither make a wrong model nor lose a file
 * (issue 27): each damaged folder is refused by every program that reads
 * it (pn-convert, pn-quantize, pn-check --source, pn-compare) with a
 * message naming what is wrong, and no program with any options writes
 * over a file of the folder. The folders are copies of the golden tiny
 * Qwen3.5 checkpoint (tests/data/hf-qwen35-tiny/hf) edited here. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "test_util.h"

#define HFDATA PN_TEST_DATA "/hf-qwen35-tiny"
#define TINY_RECIPE PN_TEST_DATA "/hf-tiny.mix"
#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"
#define INDEX "model.safetensors.index.json"

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

/* A copy of the golden folder at g_dir/m (returned), an empty g_dir/out. */
static char *copy_model(void)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/m' '%s/out' && cp -r '%s/hf' '%s/m' && mkdir -p '%s/out'",
             g_dir, g_dir, HFDATA, g_dir, g_dir);
    cr_assert_eq(tu_run(cmd, NULL, NULL), 0);
    return tu_join(g_dir, "m");
}

/* ---- editing a folder ---- */

static json_t *load_json(const char *path)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    cr_assert(j, "%s: %s", path, je.text);
    return j;
}

static void save_json(const char *path, json_t *j)
{
    cr_assert_eq(json_dump_file(j, path, JSON_INDENT(1) | JSON_SORT_KEYS), 0, "%s", path);
}

/* The header of a shard (as JSON) and its data section. */
static json_t *read_header(const char *path, uint8_t **data, size_t *n_data)
{
    size_t n;
    uint8_t *b = tu_read_file(path, &n);
    cr_assert(b && n >= 8);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | b[i];
    json_error_t je;
    json_t *h = json_loadb((const char *)b + 8, (size_t)hl, 0, &je);
    cr_assert(h, "%s: %s", path, je.text);
    *n_data = n - 8 - (size_t)hl;
    *data = malloc(*n_data ? *n_data : 1);
    memcpy(*data, b + 8 + hl, *n_data);
    free(b);
    return h;
}

static void write_header(const char *path, json_t *h, const uint8_t *data, size_t n_data)
{
    char *text = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
    size_t hl = strlen(text);
    uint8_t *b = malloc(8 + hl + n_data);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, text, hl);
    memcpy(b + 8 + hl, data, n_data);
    cr_assert_eq(tu_write_file(path, b, 8 + hl + n_data), 0);
    free(b);
    free(text);
}

/* The shard of tensor `name` by the index of folder m. */
static char *shard_of(const char *m, const char *name)
{
    char *ip = tu_join(m, INDEX);
    json_t *ix = load_json(ip);
    const char *s = json_string_value(json_object_get(json_object_get(ix, "weight_map"), name));
    cr_assert(s, "the index names %s", name);
    char *p = tu_join(m, s);
    json_decref(ix);
    free(ip);
    return p;
}

/* Removes tensor `name` from its shard's header and from the index. */
static void delete_tensor(const char *m, const char *name)
{
    char *sp = shard_of(m, name), *ip = tu_join(m, INDEX);
    uint8_t *data;
    size_t nd;
    json_t *h = read_header(sp, &data, &nd);
    cr_assert_eq(json_object_del(h, name), 0, "%s holds %s", sp, name);
    write_header(sp, h, data, nd);
    json_t *ix = load_json(ip);
    cr_assert_eq(json_object_del(json_object_get(ix, "weight_map"), name), 0);
    save_json(ip, ix);
    json_decref(ix);
    json_decref(h);
    free(data);
    free(sp);
    free(ip);
}

/* Renames tensor `from` to `to` in its shard and in the index. */
static void rename_tensor(const char *m, const char *from, const char *to)
{
    char *sp = shard_of(m, from), *ip = tu_join(m, INDEX);
    uint8_t *data;
    size_t nd;
    json_t *h = read_header(sp, &data, &nd);
    json_t *e = json_object_get(h, from);
    cr_assert(e);
    json_object_set(h, to, e);
    json_object_del(h, from);
    write_header(sp, h, data, nd);
    json_t *ix = load_json(ip), *wm = json_object_get(ix, "weight_map");
    json_object_set(wm, to, json_object_get(wm, from));
    json_object_del(wm, from);
    save_json(ip, ix);
    json_decref(ix);
    json_decref(h);
    free(data);
    free(sp);
    free(ip);
}

/* Gives tensor `name` another shape of the same number of elements. */
static void reshape_tensor(const char *m, const char *name, uint64_t d0, uint64_t d1)
{
    char *sp = shard_of(m, name);
    uint8_t *data;
    size_t nd;
    json_t *h = read_header(sp, &data, &nd);
    json_t *e = json_object_get(h, name);
    json_object_set_new(e, "shape", json_pack("[II]", (json_int_t)d0, (json_int_t)d1));
    write_header(sp, h, data, nd);
    json_decref(h);
    free(data);
    free(sp);
}

/* Sets key `key` of config.json's text_config to the integer v. */
static void set_config(const char *m, const char *key, long long v)
{
    char *cp = tu_join(m, "config.json");
    json_t *c = load_json(cp);
    json_object_set_new(json_object_get(c, "text_config"), key, json_integer(v));
    save_json(cp, c);
    json_decref(c);
    free(cp);
}

/* ---- running the programs on a folder ---- */

/* A PN file quantized from the golden folder, for pn-check --source. */
static char *pn_file(void)
{
    char *q = tu_join(g_dir, "q.gguf");
    if (tu_exists(q))
        return q;
    char *o = NULL, *e = NULL;
    int rc = tu_run_program(&o, &e, "pn-quantize", "--quiet --threads 2 --recipe '%s' '%s/hf' '%s'",
                            TINY_RECIPE, HFDATA, q);
    cr_assert_eq(rc, 0, "%s", e);
    free(o);
    free(e);
    return q;
}

/* Every program that reads the folder refuses it: exit status not 0,
 * stderr holds each string of want (NULL-ended), nothing written in out/. */
static void all_refuse(const char *m, const char *opts, const char *const *want)
{
    char *q = pn_file();
    char *out = tu_join(g_dir, "out/x.gguf"), *od = tu_join(g_dir, "out");
    char cmd[4][8192];
    snprintf(cmd[0], sizeof cmd[0], "'%s/pn-convert' %s '%s' '%s'", PN_BIN_DIR, opts, m, out);
    snprintf(cmd[1], sizeof cmd[1], "'%s/pn-quantize' --threads 2 --recipe '%s' %s '%s' '%s'",
             PN_BIN_DIR, TINY_RECIPE, opts, m, out);
    snprintf(cmd[2], sizeof cmd[2], "'%s/pn-check' --source '%s' '%s'", PN_BIN_DIR, m, q);
    snprintf(cmd[3], sizeof cmd[3], "'%s/pn-compare' --tmpdir '%s' '%s' '%s'", PN_BIN_DIR, od, m,
             q);
    for (int k = 0; k < 4; k++) {
        if (k >= 2 && opts[0])
            continue; /* the options are the writers' */
        char *o = NULL, *e = NULL;
        int rc = tu_run(cmd[k], &o, &e);
        cr_assert_neq(rc, 0, "%s: exit 0\n%s%s", cmd[k], o, e);
        for (size_t i = 0; want[i]; i++)
            cr_assert(strstr(e, want[i]), "%s: stderr names \"%s\":\n%s", cmd[k], want[i], e);
        cr_assert_eq(tu_count_files(od), 0, "%s: nothing written in %s", cmd[k], od);
        free(o);
        free(e);
    }
    free(out);
    free(od);
    free(q);
}

#define ALL_REFUSE(m, opts, ...) all_refuse(m, opts, (const char *const[]){ __VA_ARGS__, NULL })

/* pn-convert takes the folder (exit 0). */
static void converts(const char *m, const char *opts)
{
    char *o = NULL, *e = NULL;
    int rc = tu_run_program(&o, &e, "pn-convert", "--quiet --force %s '%s' '%s/out/x.gguf'", opts,
                            m, g_dir);
    cr_assert_eq(rc, 0, "%s", e);
    char *x = tu_join(g_dir, "out/x.gguf");
    cr_assert(tu_exists(x));
    unlink(x); /* out/ is left empty for the refusals that follow */
    free(x);
    free(o);
    free(e);
}

#define L "model.language_model."

/* ---- completeness against the config ---- */

TestSuite(hf_folder, .init = setup, .fini = teardown, .timeout = 120);

Test(hf_folder, a_missing_linear_attention_tensor_is_named_in_both_spellings)
{
    char *m = copy_model();
    delete_tensor(m, L "layers.2.linear_attn.in_proj_z.weight");
    ALL_REFUSE(m, "", L "layers.2.linear_attn.in_proj_z.weight", "blk.2.attn_gate.weight",
               "is missing", "linear_attention layer");
    free(m);
}

Test(hf_folder, a_missing_full_attention_tensor_is_refused)
{
    char *m = copy_model();
    delete_tensor(m, L "layers.3.self_attn.k_norm.weight");
    ALL_REFUSE(m, "", L "layers.3.self_attn.k_norm.weight", "blk.3.attn_k_norm.weight",
               "is missing", "full_attention layer");
    free(m);
}

Test(hf_folder, a_missing_output_is_refused_unless_the_embeddings_are_tied)
{
    char *m = copy_model();
    delete_tensor(m, "lm_head.weight");
    ALL_REFUSE(m, "", "lm_head.weight", "output.weight", "is missing");
    /* tied: the output is the embedding, as llama.cpp loads it */
    char *cp = tu_join(m, "config.json");
    json_t *c = load_json(cp);
    json_object_set_new(json_object_get(c, "text_config"), "tie_word_embeddings", json_true());
    save_json(cp, c);
    json_decref(c);
    converts(m, "");
    free(cp);
    free(m);
}

Test(hf_folder, a_missing_mtp_tensor_is_refused_and_no_mtp_converts_without_it)
{
    char *m = copy_model();
    delete_tensor(m, "mtp.fc.weight");
    ALL_REFUSE(m, "", "mtp.fc.weight", "blk.4.nextn.eh_proj.weight", "is missing", "--no-mtp");
    converts(m, "--no-mtp");
    free(m);
}

Test(hf_folder, a_tensor_the_architecture_does_not_have_is_refused)
{
    char *m = copy_model();
    /* a vision tensor (dropped) renamed into a linear-attention layer as a
     * query projection, which only full-attention layers have */
    rename_tensor(m, "model.visual.blocks.0.attn.qkv.weight", L "layers.0.self_attn.q_proj.weight");
    ALL_REFUSE(m, "", L "layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight",
               "is not one a qwen35 checkpoint has in a linear_attention layer");
    free(m);
}

Test(hf_folder, a_bias_the_architecture_does_not_have_is_refused)
{
    char *m = copy_model();
    rename_tensor(m, "model.visual.merger.linear_fc1.weight",
                  L "layers.0.linear_attn.out_proj.bias");
    ALL_REFUSE(m, "", L "layers.0.linear_attn.out_proj.bias", "blk.0.ssm_out.bias",
               "is not one a qwen35 checkpoint has in a linear_attention layer");
    free(m);
}

/* ---- consistency against the config ---- */

Test(hf_folder, a_hidden_size_the_tensors_contradict_is_refused)
{
    char *m = copy_model();
    set_config(m, "hidden_size", 96);
    ALL_REFUSE(m, "", "has shape", "hidden_size", "but config.json makes it");
    free(m);
}

Test(hf_folder, a_head_dim_the_tensors_contradict_is_refused)
{
    char *m = copy_model();
    set_config(m, "head_dim", 16);
    ALL_REFUSE(m, "", "has shape [256, 64]", "[128, 64]", "2 x num_attention_heads x head_dim");
    free(m);
}

Test(hf_folder, linear_attention_heads_the_tensors_contradict_are_refused)
{
    char *m = copy_model();
    set_config(m, "linear_num_value_heads", 2);
    ALL_REFUSE(m, "", "linear_num_value_heads", "but config.json makes it");
    free(m);
}

Test(hf_folder, a_conv_kernel_the_tensors_contradict_is_refused)
{
    char *m = copy_model();
    set_config(m, "linear_conv_kernel_dim", 3);
    ALL_REFUSE(m, "", "linear_attn.conv1d.weight", "[128, 1, 4]", "linear_conv_kernel_dim");
    free(m);
}

Test(hf_folder, an_intermediate_size_the_tensors_contradict_is_refused)
{
    char *m = copy_model();
    set_config(m, "intermediate_size", 64);
    ALL_REFUSE(m, "", "mlp.", "intermediate_size");
    free(m);
}

Test(hf_folder, a_vocab_size_the_embedding_contradicts_is_refused)
{
    char *m = copy_model();
    set_config(m, "vocab_size", 330);
    ALL_REFUSE(m, "", "embed_tokens.weight", "[320, 64]", "vocab_size");
    free(m);
}

Test(hf_folder, a_tensor_reshaped_to_the_same_bytes_is_refused)
{
    char *m = copy_model();
    reshape_tensor(m, L "layers.1.linear_attn.in_proj_a.weight", 8, 32);
    ALL_REFUSE(m, "", L "layers.1.linear_attn.in_proj_a.weight", "has shape [8, 32]", "[4, 64]",
               "linear_num_value_heads", "hidden_size");
    free(m);
}

Test(hf_folder, an_unknown_layer_type_is_refused)
{
    char *m = copy_model();
    char *cp = tu_join(m, "config.json");
    json_t *c = load_json(cp);
    json_array_set_new(json_object_get(json_object_get(c, "text_config"), "layer_types"), 1,
                       json_string("sliding_attention"));
    save_json(cp, c);
    json_decref(c);
    ALL_REFUSE(m, "", "layer_types", "sliding_attention");
    free(cp);
    free(m);
}

/* ---- the tokenizer ---- */

/* tokenizer.json's merges in the string form ("left right"), merge k
 * replaced by `bad` (NULL: none). */
static void string_merges(const char *m, size_t k, const char *bad)
{
    char *tp = tu_join(m, "tokenizer.json");
    json_t *t = load_json(tp);
    json_t *mg = json_object_get(json_object_get(t, "model"), "merges");
    cr_assert(json_array_size(mg) > k);
    for (size_t i = 0; i < json_array_size(mg); i++) {
        json_t *e = json_array_get(mg, i);
        if (json_is_string(e))
            continue; /* already in the string form */
        cr_assert(json_is_array(e), "the golden tokenizer has merges as pairs");
        char s[512];
        snprintf(s, sizeof s, "%s %s", json_string_value(json_array_get(e, 0)),
                 json_string_value(json_array_get(e, 1)));
        json_array_set_new(mg, i, json_string(s));
    }
    if (bad)
        json_array_set_new(mg, k, json_string(bad));
    save_json(tp, t);
    json_decref(t);
    free(tp);
}

Test(hf_folder, a_merge_without_a_space_is_refused_naming_its_index)
{
    char *m = copy_model();
    string_merges(m, 0, NULL);
    converts(m, ""); /* the string form of the same merges is taken */
    string_merges(m, 2, "in");
    ALL_REFUSE(m, "", "tokenizer.json", "model.merges[2]", "\"in\"", "not two tokens");
    free(m);
}

Test(hf_folder, string_merges_of_one_token_or_three_are_refused)
{
    static const char *const bad[] = { "in", " in", "in ", "a b c", "", " " };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *m = copy_model();
        string_merges(m, 1, bad[i]);
        char *o = NULL, *e = NULL;
        int rc = tu_run_program(&o, &e, "pn-convert", "'%s' '%s/out/x.gguf'", m, g_dir);
        cr_assert_eq(rc, 1, "merge \"%s\": exit %d", bad[i], rc);
        cr_assert(strstr(e, "model.merges[1]"), "merge \"%s\": %s", bad[i], e);
        free(o);
        free(e);
        free(m);
    }
}

Test(hf_folder, a_pair_merge_with_an_empty_token_is_refused)
{
    char *m = copy_model(), *tp = tu_join(m, "tokenizer.json");
    json_t *t = load_json(tp);
    json_array_set_new(json_object_get(json_object_get(t, "model"), "merges"), 3,
                       json_pack("[ss]", "i", ""));
    save_json(tp, t);
    json_decref(t);
    ALL_REFUSE(m, "", "tokenizer.json", "model.merges[3]", "empty token");
    free(tp);
    free(m);
}

/* ---- the format's own limits ---- */

/* A shard whose header length field says len; the file is len + 8 + 8
 * bytes of JSON-padding spaces ('{}' first) when `real`, else sparse zeros. */
static void long_header_shard(const char *path, uint64_t len, bool real)
{
    int fd = open(path, O_WRONLY | O_TRUNC | O_CREAT, 0644);
    cr_assert(fd >= 0);
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(len >> (8 * i));
    cr_assert_eq(write(fd, b, 8), 8);
    if (real) {
        char *h = malloc(len);
        memset(h, ' ', len);
        h[0] = '{';
        h[len - 1] = '}';
        cr_assert_eq(write(fd, h, len), (ssize_t)len);
        free(h);
    }
    cr_assert_eq(ftruncate(fd, (off_t)(8 + len + 8)), 0);
    close(fd);
}

Test(hf_folder, a_header_just_above_the_safetensors_limit_is_refused)
{
    char *m = copy_model(), *p = tu_join(m, SHARD1);
    long_header_shard(p, 100000008u, false);
    ALL_REFUSE(m, "", SHARD1, "header length 100000008 is above the limit of 100000000 bytes");
    free(p);
    free(m);
}

Test(hf_folder, a_header_at_the_safetensors_limit_is_read)
{
    char *m = copy_model(), *p = tu_join(m, SHARD1);
    long_header_shard(p, 100000000u, true);
    /* read, and found to hold none of its tensors */
    char *o = NULL, *e = NULL;
    int rc = tu_run_program(&o, &e, "pn-convert", "'%s' '%s/out/x.gguf'", m, g_dir);
    cr_assert_eq(rc, 1);
    cr_assert(!strstr(e, "above the limit"), "%s", e);
    cr_assert(strstr(e, "weight_map") || strstr(e, "does not hold"), "%s", e);
    free(o);
    free(e);
    free(p);
    free(m);
}

/* ---- messages naming what is missing ---- */

Test(hf_folder, shards_without_an_index_say_there_is_no_index)
{
    char *m = copy_model(), *ip = tu_join(m, INDEX);
    cr_assert_eq(unlink(ip), 0);
    ALL_REFUSE(m, "", "there is no model.safetensors.index.json and no model.safetensors");
    free(ip);
    free(m);
}

Test(hf_folder, a_folder_without_config_json_says_config_json_is_missing)
{
    char *m = copy_model(), *cp = tu_join(m, "config.json");
    cr_assert_eq(unlink(cp), 0);
    ALL_REFUSE(m, "", "config.json is missing");
    free(cp);
    free(m);
}

Test(hf_folder, an_empty_folder_says_config_json_is_missing)
{
    char *m = tu_join(g_dir, "empty");
    cr_assert_eq(mkdir(m, 0755), 0);
    cr_assert_eq(mkdir(tu_join_static(g_dir, "out"), 0755), 0);
    ALL_REFUSE(m, "", "config.json is missing");
    free(m);
}

Test(hf_folder, an_index_naming_a_missing_shard_names_that_shard)
{
    char *m = copy_model(), *sp = tu_join(m, SHARD2);
    cr_assert_eq(unlink(sp), 0);
    ALL_REFUSE(m, "", SHARD2, "cannot open shard");
    free(sp);
    free(m);
}

/* ---- no file of the folder is ever written ---- */

/* Names, link targets and bytes of every entry under dir. */
static char *snapshot(const char *dir)
{
    char cmd[4096], *o = NULL;
    snprintf(cmd, sizeof cmd,
             "cd '%s' && find . -printf '%%p %%y %%l\\n' | LC_ALL=C sort && "
             "find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum",
             dir);
    cr_assert_eq(tu_run(cmd, &o, NULL), 0);
    return o;
}

/* Runs cmdline: it must not succeed, and the folder's snapshot must not
 * change. Returns nothing; asserts. */
static void must_not_touch(const char *folder_root, const char *before, const char *cmdline)
{
    char *o = NULL, *e = NULL;
    int rc = tu_run(cmdline, &o, &e);
    char *after = snapshot(folder_root);
    cr_assert_str_eq(after, before, "%s changed the folder (exit %d): %s", cmdline, rc, e);
    cr_assert_neq(rc, 0, "%s: exit 0: %s", cmdline, o);
    free(after);
    free(o);
    free(e);
}

Test(hf_folder, no_program_writes_any_file_of_the_folder_with_or_without_force, .timeout = 600)
{
    /* a hub-cache layout: snapshot/ of links into blobs/, beside a plain copy */
    char *m = copy_model();
    char *q = pn_file();
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && mkdir -p hub/blobs hub/snap && for f in m/*; do b=$(basename $f); "
             "cp $f hub/blobs/$b.blob && ln -s ../blobs/$b.blob hub/snap/$b; done && "
             "ln -s m/config.json link-to-config && ln -s m/chat_template.jinja link-to-absent && "
             "ln m/" SHARD2 " hard-link-to-shard",
             g_dir);
    cr_assert_eq(tu_run(cmd, NULL, NULL), 0);
    const char *names[] = { "config.json",
                            INDEX,
                            SHARD1,
                            SHARD2,
                            "tokenizer.json",
                            "tokenizer_config.json",
                            "chat_template.jinja",
                            "model.safetensors" };
    const size_t n_names = sizeof names / sizeof *names;
    /* the targets: each file of each folder, the blobs behind the links, and
     * links outside the folder that point into it */
    char *targets[64];
    char *srcs[64];
    size_t nt = 0;
    char *snap = tu_join(g_dir, "hub/snap");
    for (size_t i = 0; i < n_names; i++) {
        targets[nt] = tu_join(m, names[i]);
        srcs[nt++] = m;
        targets[nt] = tu_join(snap, names[i]);
        srcs[nt++] = snap;
        if (i < 6) {
            char b[256];
            snprintf(b, sizeof b, "hub/blobs/%s.blob", names[i]);
            targets[nt] = tu_join(g_dir, b);
            srcs[nt++] = snap;
        }
    }
    targets[nt] = tu_join(g_dir, "link-to-config");
    srcs[nt++] = m;
    targets[nt] = tu_join(g_dir, "link-to-absent");
    srcs[nt++] = m;
    targets[nt] = tu_join(g_dir, "hard-link-to-shard");
    srcs[nt++] = m;
    char *before = snapshot(g_dir);
    const char *force[] = { "", "--force" };
    for (size_t t = 0; t < nt; t++)
        for (int f = 0; f < 2; f++) {
            const char *T = targets[t], *S = srcs[t], *F = force[f];
            char c[8192];
            snprintf(c, sizeof c, "'%s/pn-convert' --quiet %s '%s' '%s'", PN_BIN_DIR, F, S, T);
            must_not_touch(g_dir, before, c);
            snprintf(c, sizeof c, "'%s/pn-convert' --quiet %s --no-mtp --outtype f32 '%s' '%s'",
                     PN_BIN_DIR, F, S, T);
            must_not_touch(g_dir, before, c);
            snprintf(c, sizeof c, "'%s/pn-quantize' --quiet --threads 2 --recipe '%s' %s '%s' '%s'",
                     PN_BIN_DIR, TINY_RECIPE, F, S, T);
            must_not_touch(g_dir, before, c);
            snprintf(c, sizeof c,
                     "'%s/pn-quantize' --quiet --threads 2 --recipe '%s' %s "
                     "--report '%s' '%s' '%s/out/r.gguf'",
                     PN_BIN_DIR, TINY_RECIPE, F, T, S, g_dir);
            must_not_touch(g_dir, before, c);
            snprintf(c, sizeof c,
                     "'%s/pn-quantize' --quiet --threads 2 --recipe '%s' %s "
                     "--measurement '%s' --promote 1 '%s' '%s/out/s.gguf'",
                     PN_BIN_DIR, TINY_RECIPE, F, T, S, g_dir);
            must_not_touch(g_dir, before, c);
            snprintf(c, sizeof c, "'%s/pn-dequant' --quiet %s '%s' '%s'", PN_BIN_DIR, F, S, T);
            must_not_touch(g_dir, before, c);
        }
    /* pn-synth --hf takes no source: without --force it replaces no folder */
    char c[8192];
    snprintf(c, sizeof c, "'%s/pn-synth' --quiet --hf --layers 2 --width-scale 16 --vocab 300 '%s'",
             PN_BIN_DIR, m);
    must_not_touch(g_dir, before, c);
    /* pn-check and pn-compare read the folder and write nothing: the
     * folder is the same after them */
    snprintf(c, sizeof c, "'%s/pn-check' --source '%s' '%s'", PN_BIN_DIR, m, q);
    char *o = NULL, *e = NULL;
    cr_assert_eq(tu_run(c, &o, &e), 0, "%s", e);
    free(o);
    free(e);
    char *after = snapshot(g_dir);
    cr_assert_str_eq(after, before, "pn-check changed the folder");
    free(after);
    for (size_t t = 0; t < nt; t++)
        free(targets[t]);
    free(before);
    free(snap);
    free(q);
    free(m);
}

Test(hf_folder, a_split_output_set_is_checked_file_by_file)
{
    /* DST chosen so that the set's names are beside the folder's files:
     * the set is written and no file of the folder changes */
    char *m = copy_model();
    char *before = snapshot(m);
    char *o = NULL, *e = NULL;
    int rc = tu_run_program(&o, &e, "pn-convert", "--quiet --split-max-tensors 30 '%s' '%s/x.gguf'",
                            m, m);
    cr_assert_eq(rc, 0, "%s", e);
    char *after = snapshot(m);
    cr_assert(strstr(after, "x-00001-of-00003.gguf"), "%s", after);
    free(after);
    free(before);
    free(o);
    free(e);
    free(m);
}

/* ---- chat_template.jinja: read whole or refused, naming it ---- */

/* tokenizer_config.json without its chat_template: the template is then
 * read from chat_template.jinja beside it, as the converter does. */
static void drop_config_template(const char *m)
{
    char *tp = tu_join(m, "tokenizer_config.json");
    json_t *t = load_json(tp);
    cr_assert_eq(json_object_del(t, "chat_template"), 0);
    save_json(tp, t);
    json_decref(t);
    free(tp);
}

Test(hf_folder, chat_template_jinja_is_written_whole_as_the_template)
{
    char *m = copy_model(), *jp = tu_join(m, "chat_template.jinja");
    drop_config_template(m);
    /* a template with a NUL-free body of 70,000 bytes */
    size_t n = 70000;
    char *body = malloc(n);
    for (size_t i = 0; i < n; i++)
        body[i] = (char)('a' + i % 26);
    cr_assert_eq(tu_write_file(jp, body, n), 0);
    char *out = tu_join(g_dir, "out/x.gguf");
    char *o = NULL, *e = NULL;
    cr_assert_eq(tu_run_program(&o, &e, "pn-convert", "--quiet '%s' '%s'", m, out), 0, "%s", e);
    gguf_reader *r = NULL;
    pn_error err = { 0 };
    cr_assert_eq(gguf_reader_open(out, &r, &err), PN_OK, "%s", err.msg);
    const gguf_kv *kv = gguf_reader_find_kv(r, "tokenizer.chat_template");
    cr_assert(kv && kv->type == GGUF_TYPE_STRING);
    cr_assert_eq(kv->v.str.len, n);
    cr_assert(memcmp(kv->v.str.data, body, n) == 0);
    gguf_reader_close(r);
    free(o);
    free(e);
    free(out);
    free(body);
    free(jp);
    free(m);
}

Test(hf_folder, a_chat_template_jinja_that_is_not_a_regular_file_is_refused)
{
    char *m = copy_model(), *jp = tu_join(m, "chat_template.jinja");
    drop_config_template(m);
    cr_assert_eq(mkdir(jp, 0755), 0);
    ALL_REFUSE(m, "", "chat_template.jinja", "the chat template is a directory");
    free(jp);
    free(m);
}

Test(hf_folder, an_oversized_chat_template_jinja_is_refused_not_skipped)
{
    char *m = copy_model(), *jp = tu_join(m, "chat_template.jinja");
    drop_config_template(m);
    int fd = open(jp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(fd >= 0);
    cr_assert_eq(ftruncate(fd, (off_t)300 << 20), 0); /* sparse: 300 MiB of zeros */
    close(fd);
    ALL_REFUSE(m, "", "chat_template.jinja", "the chat template is 314572800 bytes, more than");
    free(jp);
    free(m);
}

Test(hf_folder, a_chat_template_jinja_that_reads_shorter_than_its_size_is_refused)
{
    /* a sysfs attribute (st_size 4096, a few bytes read) as the template:
     * what a file that shrank while read looks like to the reader */
    const char *sys = tu_short_read_file();
    char *m = copy_model(), *jp = tu_join(m, "chat_template.jinja");
    drop_config_template(m);
    cr_assert_eq(symlink(sys, jp), 0);
    struct stat sb;
    cr_assert_eq(stat(jp, &sb), 0);
    char said[96];
    snprintf(said, sizeof said, "the chat template is %lld bytes but ", (long long)sb.st_size);
    ALL_REFUSE(m, "", "chat_template.jinja", said, "changed while read");
    free(jp);
    free(m);
}
