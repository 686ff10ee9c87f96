/* synth_hf.c - pn-synth's model as a Hugging Face checkpoint folder:
 * config.json, safetensors shards with model.safetensors.index.json,
 * tokenizer.json and tokenizer_config.json, all JSON written with Jansson.
 * The folder is written through common/outfile's folder writer: a
 * temporary sibling ".DIR.pn-synth-XXXXXX", locked while written, renamed
 * into place (a killed run's is removed by the next run for DIR). */
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/outfile.h"
#include "quant/fp16.h"
#include "quant/types.h"
#include "synth/synth.h"
#include "synth/synth_internal.h"

#define DEFAULT_SHARD_SIZE 5000000000ull

static size_t elem_size(int type)
{
    return type == PN_TYPE_F32 ? 4 : 2;
}

static const char *st_dtype(int type)
{
    return type == PN_TYPE_F32 ? "F32" : type == PN_TYPE_F16 ? "F16" : "BF16";
}

static uint64_t tensor_bytes(const synth_tensor *t)
{
    return (uint64_t)t->n_rows * (uint64_t)t->row_len * elem_size(t->hf_type);
}

/* ---- the shards ---- */

typedef struct shard {
    size_t first, count; /* tensors [first, first + count) of the plan */
    uint64_t data_bytes;
    char *header; /* the JSON header, padded with spaces to 8 */
    size_t header_len;
} shard;

typedef struct layout {
    synth_plan p;
    shard *s;
    size_t n_shards;
} layout;

static void layout_free(layout *l)
{
    for (size_t i = 0; i < l->n_shards; i++)
        free(l->s[i].header);
    free(l->s);
    synth_plan_free(&l->p);
    memset(l, 0, sizeof *l);
}

static pn_status oom(pn_error *err)
{
    return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
}

/* The safetensors header of a shard: {"__metadata__": {"format": "pt"},
 * name: {dtype, shape, data_offsets}, ...} in data order, padded with
 * spaces so that the data starts at a multiple of 8. */
static pn_status shard_header(const synth_plan *p, shard *s, pn_error *err)
{
    json_t *root = json_object();
    json_t *meta = json_pack("{s:s}", "format", "pt");
    if (!root || !meta || json_object_set_new(root, "__metadata__", meta) != 0) {
        json_decref(root);
        return oom(err);
    }
    uint64_t off = 0;
    for (size_t i = s->first; i < s->first + s->count; i++) {
        const synth_tensor *t = &p->t[i];
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t->hf_dims; d++)
            json_array_append_new(shape, json_integer(t->hf_shape[d]));
        uint64_t end = off + tensor_bytes(t);
        json_t *e = json_pack("{s:s, s:o, s:[I,I]}", "dtype", st_dtype(t->hf_type), "shape", shape,
                              "data_offsets", (json_int_t)off, (json_int_t)end);
        if (!e || json_object_set_new(root, t->hf_name, e) != 0) {
            json_decref(root);
            return oom(err);
        }
        off = end;
    }
    s->data_bytes = off;
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!text)
        return oom(err);
    size_t n = strlen(text), padded = (n + 7) / 8 * 8;
    s->header = malloc(padded + 1);
    if (!s->header) {
        free(text);
        return oom(err);
    }
    memcpy(s->header, text, n);
    memset(s->header + n, ' ', padded - n);
    s->header[padded] = 0;
    s->header_len = padded;
    free(text);
    return PN_OK;
}

/* Tensors in plan order, a new shard when the next tensor would take the
 * shard past the limit (a tensor larger than the limit has a shard of its
 * own), as Hugging Face's max_shard_size does. */
static pn_status layout_make(const pn_synth_opts *o, layout *l, pn_error *err)
{
    memset(l, 0, sizeof *l);
    if (o->config.weight_type == PN_TYPE_F16)
        return pn_error_set(err, PN_ERR_USAGE,
                            "--hf --dtype f16: an f16 checkpoint is converted in half precision "
                            "by llama.cpp's converter and refused by pn-convert; use bf16 or f32");
    if (o->config.norm_type != PN_TYPE_F32)
        return pn_error_set(err, PN_ERR_USAGE, "--hf: the norms of the GGUF form must be f32");
    pn_status st = synth_plan_make(&o->config, o->profile, true, &l->p, err);
    if (st != PN_OK)
        return st;
    const uint64_t limit = o->shard_size ? o->shard_size : DEFAULT_SHARD_SIZE;
    l->s = calloc(l->p.n, sizeof *l->s);
    if (!l->s) {
        layout_free(l);
        return oom(err);
    }
    uint64_t cur = 0;
    for (size_t i = 0; i < l->p.n; i++) {
        uint64_t b = tensor_bytes(&l->p.t[i]);
        if (l->n_shards == 0 || (l->s[l->n_shards - 1].count > 0 && cur + b > limit)) {
            l->s[l->n_shards].first = i;
            l->n_shards++;
            cur = 0;
        }
        l->s[l->n_shards - 1].count++;
        cur += b;
    }
    for (size_t s = 0; s < l->n_shards && st == PN_OK; s++)
        st = shard_header(&l->p, &l->s[s], err);
    if (st != PN_OK)
        layout_free(l);
    return st;
}

pn_status pn_synth_hf_bytes(const pn_synth_opts *o, uint64_t *bytes, size_t *n_shards,
                            pn_error *err)
{
    layout l;
    pn_status st = layout_make(o, &l, err);
    if (st != PN_OK)
        return st;
    uint64_t b = 0;
    for (size_t s = 0; s < l.n_shards; s++)
        b += 8 + l.s[s].header_len + l.s[s].data_bytes;
    /* the vocabulary twice (tokenizer.json's vocab and merges), generously */
    b += (uint64_t)o->config.n_vocab * 64 + 65536;
    *bytes = b;
    if (n_shards)
        *n_shards = l.n_shards;
    layout_free(&l);
    return PN_OK;
}

/* ---- files ---- */

/* Writes j (stolen) as the folder's file NAME, indented, with a final
 * newline. */
static pn_status write_json(pn_outdir *d, const char *name, json_t *j, pn_error *err)
{
    if (!j)
        return oom(err);
    char *text = json_dumps(j, JSON_INDENT(2));
    json_decref(j);
    if (!text)
        return oom(err);
    pn_outfile *f = NULL;
    pn_status st = pn_outdir_file(d, name, &f, err);
    if (st == PN_OK)
        st = pn_outfile_write(f, text, strlen(text), err);
    if (st == PN_OK)
        st = pn_outfile_write(f, "\n", 1, err);
    if (st == PN_OK)
        st = pn_outfile_commit(f, err);
    pn_outfile_free(f);
    free(text);
    return st;
}

static pn_status write_shard(const pn_synth_opts *o, const layout *l, size_t s, pn_outdir *d,
                             uint64_t *done, uint64_t total, pn_error *err)
{
    char name[64];
    snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, l->n_shards);
    pn_outfile *f = NULL;
    pn_status st = pn_outdir_file(d, name, &f, err);
    if (st != PN_OK)
        return st;
    const shard *sh = &l->s[s];
    uint8_t len[8];
    for (int b = 0; b < 8; b++)
        len[b] = (uint8_t)((uint64_t)sh->header_len >> (8 * b));
    st = pn_outfile_write(f, len, 8, err);
    if (st == PN_OK)
        st = pn_outfile_write(f, sh->header, sh->header_len, err);
    const int threads = o->threads > 0 ? o->threads : omp_get_num_procs();
    const int64_t chunk_weights = (int64_t)4 << 20;
    float *x = NULL;
    uint8_t *buf = NULL;
    for (size_t ti = sh->first; ti < sh->first + sh->count && st == PN_OK; ti++) {
        const synth_tensor *t = &l->p.t[ti];
        const int64_t K = t->row_len, rows = t->n_rows;
        const int64_t row_bytes = K * (int64_t)elem_size(t->hf_type);
        int64_t per = chunk_weights / K > 0 ? chunk_weights / K : 1;
        if (per > rows)
            per = rows;
        free(x);
        free(buf);
        x = malloc((size_t)(per * K) * sizeof(float));
        buf = malloc((size_t)(per * row_bytes));
        if (!x || !buf) {
            st = oom(err);
            break;
        }
        int64_t cols[4];
        synth_outlier_cols(o->seed, ti, K, cols);
        for (int64_t r0 = 0; r0 < rows && st == PN_OK; r0 += per) {
            if (o->cancel && *o->cancel) {
                st = pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
                break;
            }
            int64_t m = rows - r0 < per ? rows - r0 : per;
#pragma omp parallel for schedule(static) num_threads(threads)
            for (int64_t r = 0; r < m; r++)
                synth_hf_row(t, ti, o->seed, cols, r0 + r, x + r * K, buf + r * row_bytes);
            st = pn_outfile_write(f, buf, (size_t)(m * row_bytes), err);
            *done += (uint64_t)(m * K);
            if (o->progress)
                o->progress(*done, total, o->user);
        }
    }
    free(x);
    free(buf);
    if (st == PN_OK)
        st = pn_outfile_commit(f, err);
    pn_outfile_free(f);
    return st;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp((*(const synth_tensor *const *)a)->hf_name,
                  (*(const synth_tensor *const *)b)->hf_name);
}

static pn_status write_index(const layout *l, pn_outdir *dir, pn_error *err)
{
    const synth_tensor **by_name = malloc(l->p.n * sizeof *by_name);
    size_t *shard_of = malloc(l->p.n * sizeof *shard_of);
    if (!by_name || !shard_of) {
        free(by_name);
        free(shard_of);
        return oom(err);
    }
    uint64_t total = 0;
    for (size_t s = 0; s < l->n_shards; s++) {
        total += l->s[s].data_bytes;
        for (size_t i = l->s[s].first; i < l->s[s].first + l->s[s].count; i++)
            shard_of[i] = s;
    }
    for (size_t i = 0; i < l->p.n; i++)
        by_name[i] = &l->p.t[i];
    qsort(by_name, l->p.n, sizeof *by_name, cmp_name);
    json_t *map = json_object();
    for (size_t k = 0; map && k < l->p.n; k++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors",
                 shard_of[by_name[k] - l->p.t] + 1, l->n_shards);
        if (json_object_set_new(map, by_name[k]->hf_name, json_string(name)) != 0) {
            json_decref(map);
            map = NULL;
        }
    }
    free(by_name);
    free(shard_of);
    if (!map)
        return oom(err);
    return write_json(
        dir, "model.safetensors.index.json",
        json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)total, "weight_map", map),
        err);
}

static pn_status write_config(const pn_synth_opts *o, const synth_vocab *v, pn_outdir *dir,
                              pn_error *err)
{
    const pn_qwen38_config *c = &o->config;
    pn_qwen38_hparams h;
    pn_status st = pn_qwen38_llama_hparams(c, &h, err);
    if (st != PN_OK)
        return st;
    json_t *types = json_array();
    for (int i = 0; types && i < c->n_layers; i++)
        json_array_append_new(types, json_string((i + 1) % c->full_attn_interval == 0
                                                     ? "full_attention"
                                                     : "linear_attention"));
    json_t *rope =
        json_pack("{s:s, s:I, s:f, s:b, s:[i,i,i]}", "rope_type", "default", "rope_theta",
                  (json_int_t)10000000, "partial_rotary_factor",
                  (double)h.rope_dims / (double)h.head_dim, "mrope_interleaved", 1, "mrope_section",
                  h.rope_sections[0], h.rope_sections[1], h.rope_sections[2]);
    const char *dtype = c->weight_type == PN_TYPE_F32 ? "float32" : "bfloat16";
    json_t *text = json_pack(
        "{s:s, s:I, s:I, s:I, s:i, s:I, s:I, s:I, s:s, s:i, s:f, s:b, s:b, s:i, s:o, "
        "s:I, s:I, s:I, s:I, s:I, s:i, s:b, s:o, s:b, s:i, s:i, s:s}",
        "model_type", "qwen3_5_text", "vocab_size", (json_int_t)c->n_vocab, "hidden_size",
        (json_int_t)c->n_embd, "intermediate_size", (json_int_t)c->n_ff, "num_hidden_layers",
        c->n_layers, "num_attention_heads", (json_int_t)h.n_head, "num_key_value_heads",
        (json_int_t)h.n_head_kv, "head_dim", (json_int_t)h.head_dim, "hidden_act", "silu",
        "max_position_embeddings", 262144, "rms_norm_eps", 1e-6, "attention_bias", 0,
        "attn_output_gate", 1, "full_attention_interval", c->full_attn_interval, "layer_types",
        types, "linear_conv_kernel_dim", (json_int_t)h.conv_kernel, "linear_key_head_dim",
        (json_int_t)h.ssm_state, "linear_value_head_dim", (json_int_t)h.ssm_state,
        "linear_num_key_heads", (json_int_t)h.ssm_groups, "linear_num_value_heads",
        (json_int_t)h.ssm_v_heads, "mtp_num_hidden_layers", c->n_mtp,
        "mtp_use_dedicated_embeddings", 0, "rope_parameters", rope, "tie_word_embeddings", 0,
        "bos_token_id", (int)v->bos, "eos_token_id", (int)v->eos, "dtype", dtype);
    json_t *vision =
        json_pack("{s:s, s:i, s:i, s:i, s:I, s:i, s:i, s:i, s:i, s:i}", "model_type", "qwen3_5",
                  "depth", 1, "hidden_size", 64, "num_heads", 2, "out_hidden_size",
                  (json_int_t)c->n_embd, "patch_size", 4, "spatial_merge_size", 2,
                  "temporal_patch_size", 2, "in_channels", 3, "intermediate_size", 128);
    json_t *root =
        json_pack("{s:[s], s:s, s:o, s:o, s:b}", "architectures", "Qwen3_5ForConditionalGeneration",
                  "model_type", "qwen3_5", "text_config", text, "vision_config", vision,
                  "tie_word_embeddings", 0);
    return write_json(dir, "config.json", root, err);
}

static json_t *added_token(const synth_vocab *v, uint64_t id, bool with_id)
{
    json_t *a = json_pack("{s:s, s:b, s:b, s:b, s:b, s:b}", "content", v->tokens[id], "single_word",
                          0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1);
    if (a && with_id)
        json_object_set_new(a, "id", json_integer((json_int_t)id));
    return a;
}

static pn_status write_tokenizer(const synth_vocab *v, pn_outdir *dir, pn_error *err)
{
    const uint64_t n_regular = v->n_tokens - v->n_special;
    json_t *vocab = json_object(), *merges = json_array(), *added = json_array();
    bool ok = vocab && merges && added;
    for (uint64_t i = 0; ok && i < n_regular; i++)
        ok = json_object_set_new(vocab, v->tokens[i], json_integer((json_int_t)i)) == 0;
    for (uint64_t m = 0; ok && m < v->n_merges; m++) {
        const char *sp = strchr(v->merges[m], ' ');
        json_t *pair =
            sp ? json_pack("[s%, s]", v->merges[m], (size_t)(sp - v->merges[m]), sp + 1) : NULL;
        ok = pair && json_array_append_new(merges, pair) == 0;
    }
    for (uint64_t i = n_regular; ok && i < v->n_tokens; i++)
        ok = json_array_append_new(added, added_token(v, i, true)) == 0;
    if (!ok) {
        json_decref(vocab);
        json_decref(merges);
        json_decref(added);
        return oom(err);
    }
    json_t *byte_level = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space",
                                   0, "trim_offsets", 0, "use_regex", 0);
    json_t *pre =
        json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, O]}", "type", "Sequence", "pretokenizers",
                  "type", "Split", "pattern", "Regex", synth_qwen35_pre_regex, "behavior",
                  "Isolated", "invert", 0, byte_level);
    json_t *model = json_pack("{s:s, s:n, s:n, s:s, s:s, s:b, s:b, s:b, s:o, s:o}", "type", "BPE",
                              "dropout", "unk_token", "continuing_subword_prefix", "",
                              "end_of_word_suffix", "", "fuse_unk", 0, "byte_fallback", 0,
                              "ignore_merges", 0, "vocab", vocab, "merges", merges);
    json_t *root = json_pack("{s:s, s:n, s:n, s:o, s:{s:s}, s:o, s:O, s:O, s:o}", "version", "1.0",
                             "truncation", "padding", "added_tokens", added, "normalizer", "type",
                             "NFC", "pre_tokenizer", pre, "post_processor", byte_level, "decoder",
                             byte_level, "model", model);
    json_decref(byte_level);
    return write_json(dir, "tokenizer.json", root, err);
}

static pn_status write_tokenizer_config(const synth_vocab *v, pn_outdir *dir, pn_error *err)
{
    json_t *dec = json_object();
    for (uint64_t i = v->n_tokens - v->n_special; dec && i < v->n_tokens; i++) {
        char id[32];
        snprintf(id, sizeof id, "%llu", (unsigned long long)i);
        json_object_set_new(dec, id, added_token(v, i, false));
    }
    json_t *root =
        json_pack("{s:b, s:b, s:o, s:s, s:s, s:s, s:s, s:i, s:s, s:n, s:s}", "add_bos_token", 0,
                  "add_prefix_space", 0, "added_tokens_decoder", dec, "bos_token",
                  v->tokens[v->bos], "eos_token", v->tokens[v->eos], "pad_token", v->tokens[v->pad],
                  "errors", "replace", "model_max_length", 262144, "tokenizer_class",
                  "Qwen2Tokenizer", "unk_token", "chat_template", synth_chat_template);
    return write_json(dir, "tokenizer_config.json", root, err);
}

/* ---- the folder ---- */

/* What pn-synth --hf writes: the only entries a folder it replaces may hold. */
static bool ours(const char *name)
{
    static const char *const fixed[] = { "config.json", "tokenizer.json", "tokenizer_config.json",
                                         "model.safetensors.index.json", "model.safetensors" };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (strcmp(name, fixed[i]) == 0)
            return true;
    unsigned a, b;
    int end = 0;
    return sscanf(name, "model-%5u-of-%5u.safetensors%n", &a, &b, &end) == 2 &&
           (size_t)end == strlen(name);
}

pn_status pn_synth_write_hf(const pn_synth_opts *o, pn_error *err)
{
    /* DIR without its trailing slashes */
    size_t len = strlen(o->path);
    while (len > 1 && o->path[len - 1] == '/')
        len--;
    if (len == 0 || len >= 3900 || (len == 1 && o->path[0] == '/'))
        return pn_error_set(err, PN_ERR_USAGE, "--hf: '%s' cannot be the checkpoint folder",
                            o->path);
    char dir[4096];
    memcpy(dir, o->path, len);
    dir[len] = 0;
    const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
    if (strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return pn_error_set(err, PN_ERR_USAGE, "--hf: '%s' cannot be the checkpoint folder",
                            o->path);
    layout l;
    pn_status st = layout_make(o, &l, err);
    if (st != PN_OK)
        return st;
    const pn_outdir_opts dopts = {
        .force = o->force, .tag = "pn-synth", .writer = "pn-synth --hf", .ours = ours
    };
    pn_outdir *d = NULL;
    st = pn_outdir_open(dir, &dopts, &d, err);
    synth_vocab v;
    memset(&v, 0, sizeof v);
    if (st == PN_OK)
        st = synth_vocab_build((uint64_t)o->config.n_vocab, &v, err);
    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < l.p.n; i++)
        total += (uint64_t)(l.p.t[i].n_rows * l.p.t[i].row_len);
    for (size_t s = 0; s < l.n_shards && st == PN_OK; s++)
        st = write_shard(o, &l, s, d, &done, total, err);
    if (st == PN_OK)
        st = write_index(&l, d, err);
    if (st == PN_OK)
        st = write_config(o, &v, d, err);
    if (st == PN_OK)
        st = write_tokenizer(&v, d, err);
    if (st == PN_OK)
        st = write_tokenizer_config(&v, d, err);
    synth_vocab_free(&v);
    layout_free(&l);
    if (st == PN_OK && o->cancel && *o->cancel)
        st = pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
    if (st == PN_OK)
        st = pn_outdir_commit(d, err);
    pn_outdir_free(d);
    return st;
}
