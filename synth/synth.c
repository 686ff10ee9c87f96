#include "synth/synth.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "io/outset.h"
#include "quant/fp16.h"
#include "quant/types.h"

pn_qwen38_config pn_synth_default_config(void)
{
    pn_qwen38_config c = pn_qwen38_config_narrow(4, 6, 8192);
    c.weight_type = PN_TYPE_BF16;
    return c;
}

/* splitmix64: a tiny, well-mixed generator; one per row. */
static uint64_t mix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Near-Gaussian N(0,1): the sum of four 16-bit uniforms, centred and scaled
 * (Irwin-Hall); cheap, and heavy tails come from the outliers added on top. */
static float gauss_approx(uint64_t r)
{
    uint32_t s = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
                 (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);
    return (float)(((double)s - 131070.0) / 37837.0);
}

static uint64_t row_seed(uint64_t seed, size_t tensor, int64_t row)
{
    uint64_t s = seed ^ (0xA24BAED4963EE407ull * (uint64_t)(tensor + 1));
    uint64_t a = mix64(&s);
    s = a ^ (0x9FB21C651E98DF25ull * (uint64_t)(row + 1));
    return mix64(&s);
}

typedef enum role { ROLE_WEIGHT, ROLE_NORM, ROLE_SSM_A, ROLE_DT_BIAS } role;

static role role_of(const char *name)
{
    size_t n = strlen(name);
    if (n >= 5 && strcmp(name + n - 5, "ssm_a") == 0)
        return ROLE_SSM_A;
    if (strstr(name, "ssm_dt.bias"))
        return ROLE_DT_BIAS;
    if (strstr(name, "_norm.weight"))
        return ROLE_NORM;
    return ROLE_WEIGHT;
}

static void fill_row(float *x, int64_t K, role ro, uint64_t seed, const int64_t outlier_cols[4])
{
    uint64_t s = seed;
    for (int64_t i = 0; i < K; i++) {
        uint64_t r = mix64(&s);
        float g = gauss_approx(r);
        switch (ro) {
        case ROLE_NORM: x[i] = 1.0f + 0.05f * g; break;
        case ROLE_SSM_A: x[i] = -(0.5f + 0.25f * (g < 0 ? -g : g)); break;
        case ROLE_DT_BIAS: x[i] = 0.1f * g; break;
        default: {
            float w = 0.02f * g;
            if ((mix64(&s) % 1000u) == 0)
                w *= 10.0f;
            x[i] = w;
        }
        }
    }
    if (ro == ROLE_WEIGHT)
        for (int k = 0; k < 4; k++)
            if (outlier_cols[k] < K)
                x[outlier_cols[k]] *= 8.0f;
}

static void encode_row(int type, const float *x, int64_t K, uint8_t *out)
{
    switch (type) {
    case PN_TYPE_F32: memcpy(out, x, (size_t)K * 4); break;
    case PN_TYPE_F16:
        for (int64_t i = 0; i < K; i++)
            pn_store_u16le(out + 2 * i, pn_fp16_from_float(x[i]));
        break;
    default:
        for (int64_t i = 0; i < K; i++)
            pn_store_u16le(out + 2 * i, pn_bf16_from_float(x[i]));
    }
}

/* ---- the tokenizer ---- */

/* GPT-2's byte-to-unicode map: the printable bytes '!'..'~', 0xA1..0xAC and
 * 0xAE..0xFF stand for themselves; the other 68, in byte order, for
 * U+0100, U+0101, ... (so ' ' is U+0120 'Ġ' and '\n' U+010A 'Ċ'). */
static unsigned gpt2_char(unsigned b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
        return b;
    unsigned n = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174))
            n++;
    return 256 + n;
}

/* UTF-8 of a code point below U+0800; returns the byte count. */
static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static const char *const special_text[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

typedef struct synth_vocab {
    uint64_t n_tokens, n_merges, n_bytes, n_special;
    char **tokens;            /* n_tokens texts, into blob */
    char **merges;            /* n_merges "left right" texts, into blob */
    int32_t *types;           /* llama.cpp token types: 1 normal, 3 control */
    char *blob;
    uint32_t bos, eos, pad;
} synth_vocab;

static void vocab_free(synth_vocab *v)
{
    free(v->tokens);
    free(v->merges);
    free(v->types);
    free(v->blob);
    memset(v, 0, sizeof *v);
}

/* The vocabulary: byte tokens first (id = byte value), then merged tokens,
 * then the special tokens. With at least 259 entries: the 256 bytes, the 3
 * specials last, merges between. A merged token is an earlier token followed
 * by a lowercase letter, in breadth-first order from the seeds 'Ġ' and
 * 'a'..'z' ("Ġa".."Ġz", "aa".."zz", "Ġaa", ...), each with its merge
 * "<earlier> <letter>", so every merge joins two tokens and every text is
 * unique. Smaller vocabularies hold bytes 0..V-2 and <|endoftext|>. */
static pn_status vocab_build(uint64_t V, synth_vocab *v, pn_error *err)
{
    memset(v, 0, sizeof *v);
    v->n_tokens = V;
    v->n_special = V >= 259 ? 3 : 1;
    v->n_bytes = V - v->n_special < 256 ? V - v->n_special : 256;
    v->n_merges = V - v->n_special - v->n_bytes;
    /* a merged token is at most 1 + 2 * depth bytes; depth grows as log26 */
    size_t max_len = 2;
    for (uint64_t level = 27; level < v->n_merges + 27; level *= 26)
        max_len += 2;
    size_t blob_bytes = (size_t)(v->n_bytes * 3 + v->n_merges * (max_len + 1) +
                                 v->n_merges * (2 * max_len + 2) + 64);
    v->tokens = malloc((size_t)V * sizeof *v->tokens);
    v->merges = malloc((size_t)(v->n_merges ? v->n_merges : 1) * sizeof *v->merges);
    v->types = malloc((size_t)V * sizeof *v->types);
    v->blob = malloc(blob_bytes);
    if (!v->tokens || !v->merges || !v->types || !v->blob) {
        vocab_free(v);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory for a vocabulary of %llu tokens",
                            (unsigned long long)V);
    }
    char *o = v->blob;
    for (uint64_t b = 0; b < v->n_bytes; b++) {
        v->tokens[b] = o;
        o += put_utf8(o, gpt2_char((unsigned)b));
        *o++ = 0;
        v->types[b] = 1;
    }
    /* breadth-first: the queue is the token ids themselves (seeds, then
     * every merged token in creation order) */
    uint64_t next = v->n_bytes, head = 0;
    uint64_t seed_ids[27];
    seed_ids[0] = ' ';
    for (int k = 0; k < 26; k++)
        seed_ids[k + 1] = (uint64_t)('a' + k);
    for (uint64_t m = 0; m < v->n_merges; m++) {
        uint64_t q = head / 26, letter = head % 26;
        uint64_t left = q < 27 ? seed_ids[q] : v->n_bytes + (q - 27);
        const char *lt = v->tokens[left], *rt = v->tokens['a' + letter];
        size_t ll = strlen(lt);
        v->tokens[next] = o;
        memcpy(o, lt, ll);
        o[ll] = rt[0];
        o[ll + 1] = 0;
        o += ll + 2;
        v->merges[m] = o;
        memcpy(o, lt, ll);
        o[ll] = ' ';
        o[ll + 1] = rt[0];
        o[ll + 2] = 0;
        o += ll + 3;
        v->types[next] = 1;
        next++;
        head++;
    }
    for (uint64_t k = 0; k < v->n_special; k++) {
        v->tokens[next + k] = (char *)special_text[k];
        v->types[next + k] = 3;
    }
    v->bos = (uint32_t)next;
    v->pad = (uint32_t)next;
    v->eos = (uint32_t)(next + v->n_special - 1);
    return PN_OK;
}

static pn_status build_writer(const pn_synth_opts *o, const pn_tensor_desc *t, size_t n,
                              gguf_writer **out, pn_error *err)
{
    const pn_qwen38_config *c = &o->config;
    pn_qwen38_hparams h;
    pn_status st = pn_qwen38_llama_hparams(c, &h, err);
    if (st != PN_OK)
        return st;
    if (c->n_vocab > UINT32_MAX - 1)
        return pn_error_set(err, PN_ERR_USAGE, "vocabulary of %lld tokens: at most %u",
                            (long long)c->n_vocab, UINT32_MAX - 1);
    synth_vocab v;
    st = vocab_build((uint64_t)c->n_vocab, &v, err);
    if (st != PN_OK)
        return st;
    gguf_writer *w = gguf_writer_new();
    if (!w) {
        vocab_free(&v);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    uint32_t file_type = c->weight_type == PN_TYPE_F32 ? 0 : c->weight_type == PN_TYPE_F16 ? 1 : 32;
#define SET(call) do { if (st == PN_OK) st = (call); } while (0)
    SET(gguf_writer_set_str(w, "general.architecture", "qwen35"));
    SET(gguf_writer_set_str(w, "general.name", "pn-synth Qwen3.8-shaped test model"));
    SET(gguf_writer_set_u32(w, "general.file_type", file_type));
    SET(gguf_writer_set_u32(w, "qwen35.block_count", (uint32_t)c->n_layers));
    SET(gguf_writer_set_u32(w, "qwen35.context_length", 262144));
    SET(gguf_writer_set_u32(w, "qwen35.embedding_length", (uint32_t)c->n_embd));
    SET(gguf_writer_set_u32(w, "qwen35.feed_forward_length", (uint32_t)c->n_ff));
    SET(gguf_writer_set_u32(w, "qwen35.attention.head_count", (uint32_t)h.n_head));
    SET(gguf_writer_set_u32(w, "qwen35.attention.head_count_kv", (uint32_t)h.n_head_kv));
    SET(gguf_writer_set_u32(w, "qwen35.attention.key_length", (uint32_t)h.head_dim));
    SET(gguf_writer_set_u32(w, "qwen35.attention.value_length", (uint32_t)h.head_dim));
    SET(gguf_writer_set_f32(w, "qwen35.attention.layer_norm_rms_epsilon", 1e-6f));
    SET(gguf_writer_set_f32(w, "qwen35.rope.freq_base", 10000000.0f));
    SET(gguf_writer_set_u32(w, "qwen35.rope.dimension_count", (uint32_t)h.rope_dims));
    SET(gguf_writer_set_arr(w, "qwen35.rope.dimension_sections", GGUF_TYPE_INT32,
                            h.rope_sections, 4));
    SET(gguf_writer_set_u32(w, "qwen35.full_attention_interval", (uint32_t)c->full_attn_interval));
    SET(gguf_writer_set_u32(w, "qwen35.ssm.conv_kernel", (uint32_t)h.conv_kernel));
    SET(gguf_writer_set_u32(w, "qwen35.ssm.state_size", (uint32_t)h.ssm_state));
    SET(gguf_writer_set_u32(w, "qwen35.ssm.group_count", (uint32_t)h.ssm_groups));
    SET(gguf_writer_set_u32(w, "qwen35.ssm.time_step_rank", (uint32_t)h.ssm_v_heads));
    SET(gguf_writer_set_u32(w, "qwen35.ssm.inner_size", (uint32_t)h.ssm_inner));
    SET(gguf_writer_set_u32(w, "qwen35.vocab_size", (uint32_t)c->n_vocab));
    SET(gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"));
    SET(gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2"));
    SET(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tokens,
                                v.n_tokens));
    SET(gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v.types,
                            v.n_tokens));
    SET(gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merges,
                                v.n_merges));
    SET(gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", v.bos));
    SET(gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", v.eos));
    SET(gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", v.pad));
    SET(gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false));
    SET(gguf_writer_set_u64(w, "pn_synth.seed", o->seed));
#undef SET
    vocab_free(&v);
    if (st != PN_OK) {
        gguf_writer_free(w);
        return pn_error_set(err, st, "setting keys: %s", pn_strerror(st));
    }
    for (size_t i = 0; i < n && st == PN_OK; i++)
        st = gguf_writer_add_tensor(w, t[i].name, t[i].n_dims, t[i].ne, t[i].src_type, err);
    if (st != PN_OK) {
        gguf_writer_free(w);
        return st;
    }
    *out = w;
    return PN_OK;
}

/* The model writer and the files it is written as. */
static pn_status build_output(const pn_synth_opts *o, const pn_tensor_desc *t, size_t n,
                              gguf_writer **w, pn_outset **os, pn_error *err)
{
    *os = NULL;
    pn_status st = build_writer(o, t, n, w, err);
    if (st != PN_OK)
        return st;
    pn_outset_opts oo;
    pn_outset_opts_init(&oo);
    oo.limit = o->split;
    oo.force = o->force;
    st = pn_outset_make(*w, o->path, &oo, os, err);
    if (st != PN_OK) {
        gguf_writer_free(*w);
        *w = NULL;
    }
    return st;
}

pn_status pn_synth_file_bytes(const pn_synth_opts *o, uint64_t *bytes, pn_error *err)
{
    return pn_synth_files(o, bytes, NULL, err);
}

pn_status pn_synth_files(const pn_synth_opts *o, uint64_t *bytes, size_t *n_splits,
                         pn_error *err)
{
    pn_tensor_desc *t = NULL;
    size_t n = 0;
    pn_status st = pn_qwen38_tensors(&o->config, &t, &n, err);
    if (st != PN_OK)
        return st;
    gguf_writer *w = NULL;
    pn_outset *os = NULL;
    st = build_output(o, t, n, &w, &os, err);
    if (st == PN_OK) {
        *bytes = pn_outset_total_bytes(os);
        if (n_splits)
            *n_splits = pn_outset_n_splits(os);
        pn_outset_free(os);
        gguf_writer_free(w);
    }
    free(t);
    return st;
}

pn_status pn_synth_write(const pn_synth_opts *o, pn_error *err)
{
    pn_tensor_desc *t = NULL;
    size_t n = 0;
    pn_status st = pn_qwen38_tensors(&o->config, &t, &n, err);
    if (st != PN_OK)
        return st;
    gguf_writer *w = NULL;
    pn_outset *os = NULL;
    st = build_output(o, t, n, &w, &os, err);
    if (st != PN_OK) {
        free(t);
        return st;
    }
    const int threads = o->threads > 0 ? o->threads : omp_get_num_procs();
    const int64_t chunk_weights = (int64_t)4 << 20;
    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < n; i++)
        total += (uint64_t)(t[i].ne[0] * t[i].ne[1] * t[i].ne[2] * t[i].ne[3]);
    float *x = NULL;
    uint8_t *buf = NULL;
    st = pn_outset_check_targets(os, NULL, err);
    if (st == PN_OK)
        st = pn_outset_begin(os, err);
    for (size_t ti = 0; ti < n && st == PN_OK; ti++) {
        const int64_t K = t[ti].ne[0];
        const int64_t rows = t[ti].ne[1] * t[ti].ne[2] * t[ti].ne[3];
        const int type = t[ti].src_type;
        const int64_t row_bytes = pn_type_row_bytes(type, K);
        int64_t per = chunk_weights / K > 0 ? chunk_weights / K : 1;
        free(x);
        free(buf);
        x = malloc((size_t)(per * K) * sizeof(float));
        buf = malloc((size_t)(per * row_bytes));
        if (!x || !buf) {
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
            break;
        }
        role ro = role_of(t[ti].name);
        int64_t cols[4];
        uint64_t cs = row_seed(o->seed, ti, -1);
        for (int k = 0; k < 4; k++)
            cols[k] = (int64_t)(mix64(&cs) % (uint64_t)K);
        for (int64_t r0 = 0; r0 < rows && st == PN_OK; r0 += per) {
            if (o->cancel && *o->cancel) {
                st = pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
                break;
            }
            int64_t m = rows - r0 < per ? rows - r0 : per;
#pragma omp parallel for schedule(static) num_threads(threads)
            for (int64_t r = 0; r < m; r++) {
                fill_row(x + r * K, K, ro, row_seed(o->seed, ti, r0 + r), cols);
                encode_row(type, x + r * K, K, buf + r * row_bytes);
            }
            st = pn_outset_write(os, ti, buf, (size_t)(m * row_bytes), err);
            done += (uint64_t)(m * K);
            if (o->progress)
                o->progress(done, total, o->user);
        }
    }
    free(x);
    free(buf);
    free(t);
    if (st == PN_OK)
        st = pn_outset_close(os, err);
    if (st == PN_OK)
        st = pn_outset_commit(os, err);
    pn_outset_free(os);   /* aborts what is not committed */
    gguf_writer_free(w);
    return st;
}
