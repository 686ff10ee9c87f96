/* vocab_check.c - the tokenizer keys as llama.cpp's vocabulary loader needs
 * them (src/llama-vocab.cpp, llama_vocab::impl::load, tag v0.5.0): a
 * tokenizer model and, for a BPE one, a pre-tokenizer that loader knows;
 * the token list (strings, no two alike: the loader asserts every text maps
 * to one id); scores and token types of the types it reads and at least as
 * many as tokens (more are read no further: a warning); merges for a BPE
 * model, each two tokens of the vocabulary; every special token id a uint32
 * inside the vocabulary (the loader would drop it for its default). Each
 * problem names the key and the index. model_check.h is the API. */
#include "gguf/model_check.h"
#include "common/byte_order.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK "tokenizer.ggml."

/* The tokenizer models the loader knows, and those that read merges. */
static const char *const known_models[] = { "no_vocab", "none",      "llama",      "bert",
                                            "gpt2",     "hybriddna", "t5",         "rwkv",
                                            "test",     "plamo2",    "whitespace", "gemma4" };

/* The pre-tokenizers the loader knows for a BPE model. */
static const char *const known_pre[] = {
    "default",
    "minicpm5",
    "llama3",
    "llama-v3",
    "llama-bpe",
    "falcon3",
    "falcon-h1",
    "pixtral",
    "midm-2.0",
    "lfm2",
    "jina-v5-nano",
    "deepseek-llm",
    "deepseek-coder",
    "deepseek-v3",
    "spark2_5",
    "youtu",
    "falcon",
    "mpt",
    "starcoder",
    "gpt-2",
    "phi-2",
    "jina-es",
    "jina-de",
    "gigachat",
    "jina-v2-es",
    "jina-v2-de",
    "a.x-4.0",
    "mellum",
    "modern-bert",
    "jais-2",
    "gemma4",
    "granite-embed-multi-311m",
    "sarvam-moe",
    "jina-v1-en",
    "jina-v2-code",
    "roberta-bpe",
    "whitespace",
    "refact",
    "command-r",
    "qwen2",
    "deepseek-r1-qwen",
    "kormo",
    "f2llmv2",
    "qwen35",
    "stablelm2",
    "olmo",
    "dbrx",
    "smaug-bpe",
    "poro-chat",
    "glm4",
    "chatglm-bpe",
    "viking",
    "jais",
    "tekken",
    "smollm",
    "codeshell",
    "bloom",
    "gpt3-finnish",
    "exaone",
    "exaone4",
    "exaone-moe",
    "chameleon",
    "minerva-7b",
    "megrez",
    "gpt-4o",
    "llama4",
    "kanana2",
    "talkie",
    "granite-embed-multi-97m",
    "tiny_aya",
    "cohere2moe",
    "superbpe",
    "trillion",
    "granite-docling",
    "bailingmoe",
    "bailingmoe2",
    "llada-moe",
    "seed-coder",
    "hunyuan",
    "hunyuan-dense",
    "hy_v4",
    "joyai-llm",
    "kimi-k2",
    "ufakzeka",
    "grok-2",
    "afmoe",
    "laguna",
    "minimax-m2",
    "solar-open",
    "mellum2",
};

/* The special token ids the loader reads. */
static const char *const special_ids[] = {
    TOK "bos_token_id",     TOK "eos_token_id",     TOK "eot_token_id",
    TOK "eom_token_id",     TOK "unknown_token_id", TOK "seperator_token_id",
    TOK "padding_token_id", TOK "mask_token_id",    TOK "fim_pre_token_id",
    TOK "fim_suf_token_id", TOK "fim_mid_token_id", TOK "fim_pad_token_id",
    TOK "fim_rep_token_id", TOK "fim_sep_token_id", TOK "prefix_token_id",
    TOK "suffix_token_id",  TOK "middle_token_id",
};

#define COUNT(a) (sizeof(a) / sizeof *(a))

typedef struct vctx {
    const gguf_reader *r;
    gguf_model_problem_fn fn;
    void *ctx;
} vctx;

static void report(vctx *v, bool warning, const char *code, const char *key, int64_t index,
                   int64_t count, const char *fmt, ...) __attribute__((format(printf, 7, 8)));

static void report(vctx *v, bool warning, const char *code, const char *key, int64_t index,
                   int64_t count, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    gguf_model_problem p = { warning, code, key, NULL, index, count, msg, NULL };
    v->fn(v->ctx, &p);
}

static bool str_in(gguf_str s, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (gguf_str_eq(s, list[i]))
            return true;
    return false;
}

/* A string of an array, walked in order (the reader checked every length). */
static gguf_str next_str(const uint8_t **p)
{
    uint64_t len = pn_load_u64le(*p);
    gguf_str s = { len, (const char *)*p + 8 };
    *p += 8 + len;
    return s;
}

static uint64_t hash_of(const char *s, uint64_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* The vocabulary: each token's text, and an open-addressed table of ids. */
typedef struct vocab {
    gguf_str *tok;
    uint64_t n;
    uint32_t *slot; /* id + 1, 0 empty */
    uint64_t mask;
} vocab;

/* The id of text s, or -1. */
static int64_t vocab_find(const vocab *vb, const char *s, uint64_t len)
{
    for (uint64_t h = hash_of(s, len) & vb->mask;; h = (h + 1) & vb->mask) {
        uint32_t e = vb->slot[h];
        if (!e)
            return -1;
        const gguf_str *t = &vb->tok[e - 1];
        if (t->len == len && memcmp(t->data, s, len) == 0)
            return e - 1;
    }
}

/* Builds the table; reports duplicates (the first pair and the count). */
static pn_status vocab_build(vctx *v, const gguf_kv *kv, vocab *vb, pn_error *err)
{
    vb->n = kv->arr_count;
    uint64_t cap = 16;
    while (cap < 2 * vb->n)
        cap *= 2;
    vb->mask = cap - 1;
    vb->tok = malloc((vb->n ? vb->n : 1) * sizeof *vb->tok);
    vb->slot = calloc(cap, sizeof *vb->slot);
    if (!vb->tok || !vb->slot)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", gguf_reader_name(v->r));
    const uint8_t *p = kv->arr_data;
    uint64_t dups = 0, first_a = 0, first_b = 0;
    for (uint64_t i = 0; i < vb->n; i++) {
        vb->tok[i] = next_str(&p);
        if (vb->tok[i].len == 0)
            continue; /* the loader names it [EMPTY_i]: no text to clash */
        uint64_t h = hash_of(vb->tok[i].data, vb->tok[i].len) & vb->mask;
        for (;; h = (h + 1) & vb->mask) {
            uint32_t e = vb->slot[h];
            if (!e) {
                vb->slot[h] = (uint32_t)(i + 1);
                break;
            }
            const gguf_str *t = &vb->tok[e - 1];
            if (t->len == vb->tok[i].len && memcmp(t->data, vb->tok[i].data, t->len) == 0) {
                if (dups++ == 0) {
                    first_a = e - 1;
                    first_b = i;
                }
                break;
            }
        }
    }
    if (dups)
        report(v, false, "TOKENIZER-DUPLICATE", TOK "tokens", (int64_t)first_b, (int64_t)dups,
               TOK "tokens[%llu] is \"%.*s\", as tokens[%llu] is: llama.cpp needs one id per "
                   "text%s",
               (unsigned long long)first_b,
               (int)(vb->tok[first_b].len > 60 ? 60 : vb->tok[first_b].len), vb->tok[first_b].data,
               (unsigned long long)first_a, dups > 1 ? " (and more tokens repeat)" : "");
    return PN_OK;
}

/* scores and token_type: the types the loader reads, at least n elements. */
static void check_parallel(vctx *v, const char *key, uint64_t n, bool int_ok, bool float_ok)
{
    const gguf_kv *kv = gguf_reader_find_kv(v->r, key);
    if (!kv)
        return;
    if (kv->type != GGUF_TYPE_ARRAY || !((int_ok && kv->arr_type == GGUF_TYPE_INT32) ||
                                         (float_ok && kv->arr_type == GGUF_TYPE_FLOAT32))) {
        report(v, false, "TOKENIZER-KEY", key, -1, -1,
               "key %s is not an array of %s, as llama.cpp reads it", key,
               int_ok && float_ok ? "float32 or int32" : "int32");
        return;
    }
    if (kv->arr_count < n)
        report(v, false, "TOKENIZER-LENGTH", key, (int64_t)kv->arr_count, -1,
               "key %s has %llu elements, but " TOK "tokens has %llu: the token at index %llu "
               "has none",
               key, (unsigned long long)kv->arr_count, (unsigned long long)n,
               (unsigned long long)kv->arr_count);
    else if (kv->arr_count > n)
        report(v, true, "TOKENIZER-LENGTH", key, (int64_t)n, -1,
               "key %s has %llu elements, but " TOK "tokens has %llu: llama.cpp reads no further "
               "than index %llu",
               key, (unsigned long long)kv->arr_count, (unsigned long long)n,
               (unsigned long long)(n ? n - 1 : 0));
}

/* Each merge "a b" (split at the first space after its first byte, as the
 * loader splits it) names two tokens of the vocabulary. */
static void check_merges(vctx *v, const gguf_kv *kv, const vocab *vb)
{
    const uint8_t *p = kv->arr_data;
    uint64_t bad = 0, first = 0;
    gguf_str first_s = { 0, "" };
    for (uint64_t i = 0; i < kv->arr_count; i++) {
        gguf_str m = next_str(&p);
        const char *sp = m.len > 1 ? memchr(m.data + 1, ' ', m.len - 1) : NULL;
        bool ok = sp != NULL;
        if (ok) {
            uint64_t a = (uint64_t)(sp - m.data);
            ok = vocab_find(vb, m.data, a) >= 0 && vocab_find(vb, sp + 1, m.len - a - 1) >= 0;
        }
        if (!ok && bad++ == 0) {
            first = i;
            first_s = m;
        }
    }
    if (bad)
        report(v, false, "TOKENIZER-MERGE", TOK "merges", (int64_t)first, (int64_t)bad,
               TOK "merges[%llu] is \"%.*s\": not two tokens of the vocabulary with a space "
                   "between%s",
               (unsigned long long)first, (int)(first_s.len > 60 ? 60 : first_s.len), first_s.data,
               bad > 1 ? " (nor are some later merges)" : "");
}

static void check_special_ids(vctx *v, uint64_t n)
{
    for (size_t i = 0; i < COUNT(special_ids); i++) {
        const gguf_kv *kv = gguf_reader_find_kv(v->r, special_ids[i]);
        if (!kv)
            continue;
        if (kv->type != GGUF_TYPE_UINT32)
            report(v, false, "TOKENIZER-KEY", special_ids[i], -1, -1,
                   "key %s is %s, but llama.cpp reads it as uint32", special_ids[i],
                   gguf_value_type_name(kv->type));
        else if (kv->v.u64 >= n)
            report(v, false, "TOKENIZER-SPECIAL-ID", special_ids[i], (int64_t)kv->v.u64, -1,
                   "key %s = %llu, outside the vocabulary of %llu tokens (llama.cpp would "
                   "use its default instead)",
                   special_ids[i], (unsigned long long)kv->v.u64, (unsigned long long)n);
    }
}

/* tokenizer.ggml.model and .pre: *bpe when the model reads merges. */
static bool check_model_keys(vctx *v, bool *bpe, bool *needs_merges, bool *no_vocab)
{
    const gguf_kv *m = gguf_reader_find_kv(v->r, TOK "model");
    if (!m || m->type != GGUF_TYPE_STRING) {
        report(v, false, "TOKENIZER-KEY", TOK "model", -1, -1,
               "key " TOK "model is %s: llama.cpp's vocabulary loader requires a string",
               m ? gguf_value_type_name(m->type) : "missing");
        return false;
    }
    if (!str_in(m->v.str, known_models, COUNT(known_models))) {
        report(v, false, "TOKENIZER-MODEL", TOK "model", -1, -1,
               "key " TOK "model = \"%.*s\": not a tokenizer llama.cpp knows",
               (int)(m->v.str.len > 60 ? 60 : m->v.str.len), m->v.str.data);
        return false;
    }
    *no_vocab = gguf_str_eq(m->v.str, "no_vocab") || gguf_str_eq(m->v.str, "none");
    *bpe = gguf_str_eq(m->v.str, "gpt2") || gguf_str_eq(m->v.str, "hybriddna") ||
           gguf_str_eq(m->v.str, "whitespace");
    *needs_merges = *bpe || gguf_str_eq(m->v.str, "gemma4");
    const gguf_kv *pre = gguf_reader_find_kv(v->r, TOK "pre");
    if (pre && pre->type != GGUF_TYPE_STRING) {
        report(v, false, "TOKENIZER-KEY", TOK "pre", -1, -1,
               "key " TOK "pre is %s: llama.cpp reads a string", gguf_value_type_name(pre->type));
        return true;
    }
    if (!*bpe)
        return true;
    if (!pre || pre->v.str.len == 0)
        report(v, true, "TOKENIZER-PRE", TOK "pre", -1, -1,
               "key " TOK "pre is missing: llama.cpp splits the text as 'default' and says the "
               "generation quality will be degraded");
    else if (!str_in(pre->v.str, known_pre, COUNT(known_pre)))
        report(v, false, "TOKENIZER-PRE", TOK "pre", -1, -1,
               "key " TOK "pre = \"%.*s\": not a pre-tokenizer llama.cpp knows",
               (int)(pre->v.str.len > 60 ? 60 : pre->v.str.len), pre->v.str.data);
    else if (gguf_str_eq(pre->v.str, "kimi-k2"))
        *needs_merges = false;
    return true;
}

pn_status gguf_vocab_check(const gguf_reader *r, gguf_model_problem_fn fn, void *ctx,
                           uint64_t *n_vocab, pn_error *err)
{
    vctx v = { r, fn, ctx };
    *n_vocab = 0;
    bool bpe = false, needs_merges = false, no_vocab = false;
    if (!check_model_keys(&v, &bpe, &needs_merges, &no_vocab) || no_vocab)
        return PN_OK;
    const gguf_kv *tokens = gguf_reader_find_kv(r, TOK "tokens");
    if (!tokens || tokens->type != GGUF_TYPE_ARRAY || tokens->arr_type != GGUF_TYPE_STRING) {
        report(&v, false, "TOKENIZER-KEY", TOK "tokens", -1, -1,
               "key " TOK "tokens is %s: llama.cpp's vocabulary loader requires an array of "
               "strings",
               tokens ? "of another type" : "missing");
        return PN_OK;
    }
    vocab vb = { 0 };
    pn_status st = vocab_build(&v, tokens, &vb, err);
    if (st == PN_OK) {
        *n_vocab = vb.n;
        check_parallel(&v, TOK "scores", vb.n, true, true);
        check_parallel(&v, TOK "token_type", vb.n, true, false);
        const gguf_kv *merges = gguf_reader_find_kv(r, TOK "merges");
        if (merges && (merges->type != GGUF_TYPE_ARRAY || merges->arr_type != GGUF_TYPE_STRING))
            report(&v, false, "TOKENIZER-KEY", TOK "merges", -1, -1,
                   "key " TOK "merges is not an array of strings, as llama.cpp reads it");
        else if (merges)
            check_merges(&v, merges, &vb);
        else if (needs_merges)
            report(&v, false, "TOKENIZER-KEY", TOK "merges", -1, -1,
                   "key " TOK "merges is missing: llama.cpp's loader requires it for this "
                   "tokenizer");
        check_special_ids(&v, vb.n);
    }
    free(vb.tok);
    free(vb.slot);
    return st;
}
