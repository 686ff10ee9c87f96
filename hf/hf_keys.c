/* hf_keys.c - the keys the converter writes for qwen35: from config.json
 * (text_config merged into the root), with its defaults, and the gpt2 BPE
 * tokenizer from tokenizer.json and tokenizer_config.json. The order is the
 * converter's. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/mem.h"
#include "hf/hf.h"
#include "hf/hf_testing.h"
#include "hf/hf_internal.h"
#include "common/file.h"

#define ARCH "qwen35"

/* The pre-tokenizer patterns llama.cpp knows, by name (tokenizer.ggml.pre). */
static const struct {
    const char *name, *regex;
} known_pre[] = {
    { "qwen35", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
                "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
    { "qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
               "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
};

static const json_t *find_key(const json_t *hp, const char *const *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_object_get(hp, keys[i]);
        if (v)
            return v;
    }
    return NULL;
}

#define FIND(hp, ...)                                                                              \
    find_key(hp, (const char *const[]){ __VA_ARGS__ },                                             \
             sizeof((const char *const[]){ __VA_ARGS__ }) / sizeof(const char *))

typedef struct kctx {
    gguf_writer *w;
    const char *file;
    pn_error *err;
    pn_status st;
} kctx;

static void wfail(kctx *k, const char *key)
{
    if (k->st == PN_OK)
        k->st = pn_error_set(k->err, PN_ERR_FORMAT, "%s: key %s: %s", k->file, key,
                             gguf_writer_last_error(k->w) ? gguf_writer_last_error(k->w)
                                                          : "cannot be written");
}

static void put_u32v(kctx *k, const char *key, const json_t *v, const char *src_key)
{
    if (k->st != PN_OK || !v)
        return;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > (json_int_t)UINT32_MAX) {
        k->st = pn_error_set(k->err, PN_ERR_FORMAT, "%s: key %s is not an integer in [0, 2^32)",
                             k->file, src_key);
        return;
    }
    if (gguf_writer_set_u32(k->w, key, (uint32_t)json_integer_value(v)) != PN_OK)
        wfail(k, key);
}
static void put_u32(kctx *k, const char *key, uint64_t v)
{
    if (k->st == PN_OK && gguf_writer_set_u32(k->w, key, (uint32_t)v) != PN_OK)
        wfail(k, key);
}
static void put_f32v(kctx *k, const char *key, const json_t *v, const char *src_key)
{
    if (k->st != PN_OK || !v)
        return;
    if (!json_is_number(v)) {
        k->st = pn_error_set(k->err, PN_ERR_FORMAT, "%s: key %s is not a number", k->file, src_key);
        return;
    }
    if (gguf_writer_set_f32(k->w, key, (float)json_number_value(v)) != PN_OK)
        wfail(k, key);
}
static void put_str(kctx *k, const char *key, const char *v)
{
    if (k->st == PN_OK && gguf_writer_set_str(k->w, key, v) != PN_OK)
        wfail(k, key);
}
static void put_bool(kctx *k, const char *key, bool v)
{
    if (k->st == PN_OK && gguf_writer_set_bool(k->w, key, v) != PN_OK)
        wfail(k, key);
}

/* ---- tokenizer ---- */

static bool looks_special(const char *t)
{
    size_t n = strlen(t);
    if (strcmp(t, "<pad>") == 0 || strcmp(t, "<mask>") == 0 || strcmp(t, "<2mass>") == 0 ||
        strcmp(t, "[@BOS@]") == 0)
        return true;
    if (n >= 4 && strncmp(t, "<|", 2) == 0 && strcmp(t + n - 2, "|>") == 0)
        return true;
    /* "<｜" ... "｜>" (fullwidth bar, U+FF5C) */
    if (n >= 8 && strncmp(t, "<\xef\xbd\x9c", 4) == 0 && strcmp(t + n - 4, "\xef\xbd\x9c>") == 0)
        return true;
    if (strncmp(t, "<unused", 7) == 0 && t[n - 1] == '>')
        return true;
    return false;
}

/* Replaces every U+2581 with a space, in place. */
static void unspace(char *s)
{
    char *o = s;
    for (char *p = s; *p;) {
        if ((unsigned char)p[0] == 0xe2 && (unsigned char)p[1] == 0x96 &&
            (unsigned char)p[2] == 0x81) {
            *o++ = ' ';
            p += 3;
        } else
            *o++ = *p++;
    }
    *o = '\0';
}

/* Python truthiness of a JSON value (None, "", {}, [], 0, false are false). */
static bool truthy(const json_t *v)
{
    if (!v || json_is_null(v) || json_is_false(v))
        return false;
    if (json_is_string(v))
        return json_string_length(v) > 0;
    if (json_is_object(v))
        return json_object_size(v) > 0;
    if (json_is_array(v))
        return json_array_size(v) > 0;
    if (json_is_integer(v))
        return json_integer_value(v) != 0;
    if (json_is_real(v))
        return json_real_value(v) != 0;
    return true;
}

static const char *find_pre_regex(const json_t *pt)
{
    if (!json_is_object(pt))
        return NULL;
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (type && strcmp(type, "Split") == 0) {
        const json_t *p = json_object_get(pt, "pattern");
        return json_string_value(json_object_get(p, "Regex"));
    }
    if (type && strcmp(type, "Sequence") == 0) {
        const json_t *arr = json_object_get(pt, "pretokenizers");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            const char *r = find_pre_regex(json_array_get(arr, i));
            if (r)
                return r;
        }
    }
    return NULL;
}

static void parse_normalizer(const json_t *n, int *lower, int *strip)
{
    const char *type = json_string_value(json_object_get(n, "type"));
    if (!type)
        return;
    if (strcmp(type, "Lowercase") == 0)
        *lower = 1;
    else if (strcmp(type, "StripAccents") == 0)
        *strip = 1;
    else if (strcmp(type, "BertNormalizer") == 0) {
        const json_t *l = json_object_get(n, "lowercase"), *s = json_object_get(n, "strip_accents");
        if (json_is_boolean(l))
            *lower = json_is_true(l);
        if (json_is_boolean(s))
            *strip = json_is_true(s);
    } else if (strcmp(type, "Sequence") == 0) {
        const json_t *arr = json_object_get(n, "normalizers");
        for (size_t i = 0; i < json_array_size(arr); i++)
            parse_normalizer(json_array_get(arr, i), lower, strip);
    }
}

static pn_status load_optional(const char *dir, const char *file, json_t **out, char **path,
                               pn_error *err)
{
    *out = NULL;
    *path = malloc(strlen(dir) + strlen(file) + 2);
    if (!*path)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    sprintf(*path, "%s/%s", dir, file);
    struct stat sb;
    if (stat(*path, &sb) != 0)
        return PN_OK;
    return pn_hf_json_load(*path, out, err);
}

/* chat_template.jinja of dir, whole, or NULL when there is none: read as
 * every input file is (common/file.h: a regular file, at most
 * PN_HF_MAX_JSON bytes, refused when fewer bytes are read than the file
 * had). */
static pn_status read_chat_template(const char *dir, char **out, size_t *len, pn_error *err)
{
    *out = NULL;
    *len = 0;
    char *jp = pn_path_join(dir, "chat_template.jinja");
    if (!jp)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    struct stat sb;
    if (lstat(jp, &sb) != 0 && errno == ENOENT) {
        free(jp);
        return PN_OK;
    }
    pn_status st = pn_read_small_file(jp, PN_HF_MAX_JSON, "chat template", out, len, err);
    free(jp);
    return st;
}

static pn_status tokenizer_keys_of(kctx *k, const char *dir, const json_t *root,
                                   const pn_hf_config *cfg, const pn_hf_opts *opts, json_t *tok,
                                   char *tok_path, json_t *tcfg, char *tcfg_path);

static pn_status tokenizer_keys(kctx *k, const char *dir, const json_t *root,
                                const pn_hf_config *cfg, const pn_hf_opts *opts)
{
    json_t *tok = NULL, *tcfg = NULL;
    char *tok_path = NULL, *tcfg_path = NULL;
    pn_error *err = k->err;
    pn_status st = load_optional(dir, "tokenizer.json", &tok, &tok_path, err);
    if (st == PN_OK && !tok)
        st = pn_error_set(err, PN_ERR_IO, "%s: missing (the gpt2 BPE tokenizer is read from it)",
                          tok_path);
    if (st == PN_OK)
        st = load_optional(dir, "tokenizer_config.json", &tcfg, &tcfg_path, err);
    if (st != PN_OK) {
        json_decref(tok);
        json_decref(tcfg);
        free(tok_path);
        free(tcfg_path);
        return st;
    }
    return tokenizer_keys_of(k, dir, root, cfg, opts, tok, tok_path, tcfg, tcfg_path);
}

pn_status pn_hf_tokenizer_parse(const char *text, size_t len, const char *name,
                                const pn_hf_config *cfg, gguf_writer *w, pn_error *err)
{
    json_t *tok = NULL;
    pn_status st = pn_hf_json_parse(text, len, name, 0, &tok, err);
    if (st != PN_OK)
        return st;
    char *tok_path = strdup(name);
    json_t *root = json_object();
    if (!tok_path || !root) {
        json_decref(tok);
        json_decref(root);
        free(tok_path);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    kctx k = { w, name, err, PN_OK };
    pn_hf_opts opts = { 0 };
    st = tokenizer_keys_of(&k, ".", root, cfg, &opts, tok, tok_path, NULL, NULL);
    json_decref(root);
    return st;
}

/* What the steps of the tokenizer keys share. */
typedef struct tok_job {
    kctx *k;
    const char *dir;
    const json_t *root, *tok, *tcfg, *model, *added;
    const char *tok_path, *tcfg_path;
    const pn_hf_opts *opts;
    uint64_t nv;   /* vocab_size */
    char **tokens; /* by id, borrowed from tok (NULL: a pad) */
    int32_t *types;
    const char *pre;
    const char **merges;
    char **merges_own; /* the pairs written as strings */
    size_t n_merges;
} tok_job;

/* model.vocab and added_tokens: the text and type of every id. */
static pn_status tok_vocab(tok_job *j)
{
    pn_error *err = j->k->err;
    const json_t *vocab = json_object_get(j->model, "vocab");
    const char *mtype = json_string_value(json_object_get(j->model, "type"));
    if (!json_is_object(j->model) || !json_is_object(vocab) || !mtype || strcmp(mtype, "BPE") != 0)
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: key model must be an object of type \"BPE\" with a vocab object",
                            j->tok_path);
    const uint64_t nv = j->nv;
    j->tokens = calloc(nv, sizeof *j->tokens);
    j->types = calloc(nv, sizeof *j->types);
    if (!j->tokens || !j->types)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)vocab, key, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            (uint64_t)json_integer_value(v) >= nv)
            return pn_error_set(err, PN_ERR_FORMAT,
                                "%s: key model.vocab: token \"%.40s\" has id %s, not an integer "
                                "below vocab_size %llu",
                                j->tok_path, key,
                                json_is_integer(v) ? "out of range" : "of the wrong type",
                                (unsigned long long)nv);
        size_t id = (size_t)json_integer_value(v);
        if (j->tokens[id])
            return pn_error_set(err, PN_ERR_FORMAT,
                                "%s: key model.vocab: id %zu is given to two "
                                "tokens",
                                j->tok_path, id);
        j->tokens[id] = (char *)key;
        j->types[id] = 1;
    }
    j->added = json_object_get(j->tok, "added_tokens");
    if (j->added && !json_is_array(j->added))
        return pn_error_set(err, PN_ERR_FORMAT, "%s: key added_tokens is not an array",
                            j->tok_path);
    for (size_t i = 0; i < json_array_size(j->added); i++) {
        const json_t *a = json_array_get(j->added, i);
        const json_t *jid = json_object_get(a, "id");
        const json_t *jc = json_object_get(a, "content");
        if (!json_is_integer(jid) || !json_is_string(jc) || json_integer_value(jid) < 0 ||
            (uint64_t)json_integer_value(jid) >= nv)
            return pn_error_set(err, PN_ERR_FORMAT,
                                "%s: key added_tokens[%zu]: needs an integer id below vocab_size "
                                "%llu and a string content",
                                j->tok_path, i, (unsigned long long)nv);
        size_t id = (size_t)json_integer_value(jid);
        if (j->tokens[id] && j->types[id] == 1 && strcmp(j->tokens[id], json_string_value(jc)) != 0)
            return pn_error_set(err, PN_ERR_FORMAT,
                                "%s: key added_tokens[%zu]: id %zu is \"%.40s\" in model.vocab",
                                j->tok_path, i, id, j->tokens[id]);
        if (j->types[id] > 1)
            return pn_error_set(err, PN_ERR_FORMAT, "%s: key added_tokens[%zu]: id %zu added twice",
                                j->tok_path, i, id);
        j->tokens[id] = (char *)json_string_value(jc);
        bool special = json_is_true(json_object_get(a, "special"));
        j->types[id] = (special || looks_special(j->tokens[id])) ? 3 : 4;
    }
    return PN_OK;
}

/* tokenizer.ggml.pre: --tokenizer-pre, else the known pattern's name. */
static pn_status tok_pre(tok_job *j)
{
    j->pre = j->opts->tokenizer_pre;
    if (j->pre)
        return PN_OK;
    const char *rx = find_pre_regex(json_object_get(j->tok, "pre_tokenizer"));
    for (size_t i = 0; rx && i < sizeof known_pre / sizeof *known_pre; i++)
        if (strcmp(rx, known_pre[i].regex) == 0)
            j->pre = known_pre[i].name;
    if (!j->pre)
        return pn_error_set(j->k->err, PN_ERR_FORMAT,
                            "%s: key pre_tokenizer: the split pattern is not one llama.cpp "
                            "knows here (known: qwen35, qwen2); name it with --tokenizer-pre",
                            j->tok_path);
    return PN_OK;
}

/* A pair merge [a, b] as "a b", the spaces inside a or b as U+0120. */
static char *pair_text(const char *a, const char *b)
{
    const char *p[2] = { a, b };
    size_t len = 2;
    for (int q = 0; q < 2; q++)
        for (const char *c = p[q]; *c; c++)
            len += *c == ' ' ? 2 : 1;
    char *s = malloc(len);
    if (!s)
        return NULL;
    char *o = s;
    for (int q = 0; q < 2; q++) {
        if (q)
            *o++ = ' ';
        for (const char *c = p[q]; *c; c++) {
            if (*c == ' ') {
                *o++ = (char)0xc4;
                *o++ = (char)0xa0;
            } /* U+0120 */
            else
                *o++ = *c;
        }
    }
    *o = '\0';
    return s;
}

/* model.merges: strings of two tokens with one space between, or pairs of
 * non-empty strings. */
static pn_status tok_merges(tok_job *j)
{
    pn_error *err = j->k->err;
    const json_t *jm = json_object_get(j->model, "merges");
    if (jm && !json_is_array(jm))
        return pn_error_set(err, PN_ERR_FORMAT, "%s: key model.merges is not an array",
                            j->tok_path);
    if (json_array_size(jm) == 0)
        return PN_OK;
    j->n_merges = json_array_size(jm);
    j->merges = calloc(j->n_merges, sizeof *j->merges);
    j->merges_own = calloc(j->n_merges, sizeof *j->merges_own);
    if (!j->merges || !j->merges_own)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    bool as_str = json_is_string(json_array_get(jm, 0));
    for (size_t i = 0; i < j->n_merges; i++) {
        const json_t *e = json_array_get(jm, i);
        if (as_str) {
            if (!json_is_string(e))
                return pn_error_set(err, PN_ERR_FORMAT,
                                    "%s: key model.merges[%zu] is not a "
                                    "string",
                                    j->tok_path, i);
            /* a merge is two tokens: "left right", one space between */
            const char *ms = json_string_value(e), *sp = strchr(ms, ' ');
            if (!sp || sp == ms || !sp[1] || strchr(sp + 1, ' '))
                return pn_error_set(err, PN_ERR_FORMAT,
                                    "%s: key model.merges[%zu] (\"%.40s\") "
                                    "is not two tokens separated by one space",
                                    j->tok_path, i, ms);
            j->merges[i] = ms;
            continue;
        }
        if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_string(json_array_get(e, 0)) ||
            !json_is_string(json_array_get(e, 1)))
            return pn_error_set(err, PN_ERR_FORMAT,
                                "%s: key model.merges[%zu] is not a pair "
                                "of strings",
                                j->tok_path, i);
        const char *a = json_string_value(json_array_get(e, 0));
        const char *b = json_string_value(json_array_get(e, 1));
        if (!a[0] || !b[0])
            return pn_error_set(err, PN_ERR_FORMAT,
                                "%s: key model.merges[%zu] has an empty "
                                "token",
                                j->tok_path, i);
        if (!(j->merges_own[i] = pair_text(a, b)))
            return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        j->merges[i] = j->merges_own[i];
    }
    return PN_OK;
}

/* tokenizer.ggml.model, pre, tokens (pads named, user-defined tokens
 * respaced), token_type and merges. */
static pn_status tok_write_vocab(tok_job *j)
{
    kctx *k = j->k;
    const uint64_t nv = j->nv;
    char **owned = calloc(nv, sizeof *owned);
    if (!owned)
        return pn_error_set(k->err, PN_ERR_NOMEM, "out of memory");
    pn_status st = PN_OK;
    for (uint64_t i = 0; i < nv && st == PN_OK; i++) {
        if (!j->tokens[i]) {
            char b[32];
            snprintf(b, sizeof b, "[PAD%llu]", (unsigned long long)i);
            owned[i] = strdup(b);
            j->types[i] = 5;
        } else {
            owned[i] = strdup(j->tokens[i]);
            if (owned[i] && j->types[i] == 4)
                unspace(owned[i]);
        }
        if (!owned[i])
            st = pn_error_set(k->err, PN_ERR_NOMEM, "out of memory");
    }
    if (st == PN_OK) {
        put_str(k, "tokenizer.ggml.model", "gpt2");
        put_str(k, "tokenizer.ggml.pre", j->pre);
        if (k->st == PN_OK && gguf_writer_set_arr_str(k->w, "tokenizer.ggml.tokens",
                                                      (const char *const *)owned, nv) != PN_OK)
            wfail(k, "tokenizer.ggml.tokens");
        if (k->st == PN_OK && gguf_writer_set_arr(k->w, "tokenizer.ggml.token_type",
                                                  GGUF_TYPE_INT32, j->types, nv) != PN_OK)
            wfail(k, "tokenizer.ggml.token_type");
        if (k->st == PN_OK && j->n_merges &&
            gguf_writer_set_arr_str(k->w, "tokenizer.ggml.merges", j->merges, j->n_merges) != PN_OK)
            wfail(k, "tokenizer.ggml.merges");
        st = k->st;
    }
    for (uint64_t i = 0; i < nv; i++)
        free(owned[i]);
    free(owned);
    return st;
}

/* A post-processor with template processing is not taken. */
static pn_status tok_post_processor(const tok_job *j)
{
    const json_t *pp = json_object_get(j->tok, "post_processor");
    if (!json_is_object(pp))
        return PN_OK;
    const char *ptype = json_string_value(json_object_get(pp, "type"));
    const json_t *procs = json_object_get(pp, "processors");
    bool template = ptype && (strcmp(ptype, "TemplateProcessing") == 0 ||
                              strcmp(ptype, "RobertaProcessing") == 0);
    for (size_t i = 0; i < json_array_size(procs); i++) {
        const char *t2 = json_string_value(json_object_get(json_array_get(procs, i), "type"));
        if (t2 && (strcmp(t2, "TemplateProcessing") == 0 || strcmp(t2, "RobertaProcessing") == 0))
            template = true;
    }
    if (template)
        return pn_error_set(j->k->err, PN_ERR_FORMAT,
                            "%s: key post_processor: template post-processing is not taken "
                            "(the qwen35 tokenizers use ByteLevel)",
                            j->tok_path);
    return PN_OK;
}

/* The id of the added token whose content is `content`, or -1. */
static int64_t added_id(const json_t *added, const char *content)
{
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i);
        if (json_is_string(json_object_get(a, "content")) &&
            strcmp(json_string_value(json_object_get(a, "content")), content) == 0) {
            const json_t *jid = json_object_get(a, "id");
            return json_is_integer(jid) ? json_integer_value(jid) : -1;
        }
    }
    return -1;
}

/* The special token ids: tokenizer_config.json by content, then
 * config.json's ids; and the add_*_token flags. */
static pn_status tok_special(tok_job *j)
{
    static const char *const typs[] = { "bos", "eos", "unk", "sep", "pad", "cls", "mask" };
    static const char *const id_keys[] = {
        "tokenizer.ggml.bos_token_id",     "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
        "tokenizer.ggml.padding_token_id", "tokenizer.ggml.cls_token_id",
        "tokenizer.ggml.mask_token_id",
    };
    kctx *k = j->k;
    int64_t ids[7];
    int order[7], n_order = 0;
    int add[7], add_order[7], n_add = 0;
    for (int t = 0; t < 7; t++) {
        ids[t] = -1;
        add[t] = -1;
    }
    for (int t = 0; j->tcfg && t < 7; t++) {
        char name[32];
        snprintf(name, sizeof name, "add_%s_token", typs[t]);
        const json_t *a = json_object_get(j->tcfg, name);
        if (json_is_boolean(a)) {
            add[t] = json_is_true(a);
            add_order[n_add++] = t;
        }
        snprintf(name, sizeof name, "%s_token", typs[t]);
        const json_t *e = json_object_get(j->tcfg, name);
        /* bos falls back to cls, eos to sep */
        if (!truthy(e) && (t == 0 || t == 1)) {
            const json_t *alt = json_object_get(j->tcfg, t == 0 ? "cls_token" : "sep_token");
            if (truthy(alt))
                e = alt;
        }
        const char *content = NULL;
        if (json_is_string(e))
            content = json_string_value(e);
        else if (json_is_object(e) && json_is_string(json_object_get(e, "content")))
            content = json_string_value(json_object_get(e, "content"));
        int64_t id = content ? added_id(j->added, content) : -1;
        if (id >= 0 && ids[t] < 0) {
            ids[t] = id;
            order[n_order++] = t;
        }
    }
    const json_t *tc = json_object_get(j->root, "text_config");
    for (int t = 0; t < 7; t++) {
        char name[32];
        snprintf(name, sizeof name, "%s_token_id", typs[t]);
        const json_t *v2 = json_object_get(j->root, name);
        if ((!v2 || json_is_null(v2)) && json_is_object(tc))
            v2 = json_object_get(tc, name);
        if (!json_is_integer(v2))
            continue;
        if (json_integer_value(v2) < 0 || json_integer_value(v2) > (json_int_t)UINT32_MAX)
            return pn_error_set(k->err, PN_ERR_FORMAT, "%s/config.json: key %s is %lld", j->dir,
                                name, (long long)json_integer_value(v2));
        if (ids[t] < 0) {
            ids[t] = json_integer_value(v2);
            order[n_order++] = t;
        }
    }
    for (int i = 0; i < n_order; i++) {
        if (ids[order[i]] > (int64_t)UINT32_MAX)
            return pn_error_set(k->err, PN_ERR_FORMAT, "%s: special token %s id out of range",
                                j->tok_path, typs[order[i]]);
        put_u32(k, id_keys[order[i]], (uint64_t)ids[order[i]]);
    }
    for (int i = 0; i < n_add; i++) {
        int t = add_order[i];
        char name[48];
        if (t != 0 && t != 1 && t != 3)
            continue; /* only bos, eos, sep have keys */
        snprintf(name, sizeof name, "tokenizer.ggml.add_%s_token", typs[t]);
        put_bool(k, name, add[t] != 0);
    }
    return PN_OK;
}

/* tokenizer.chat_template: tokenizer_config.json's, else chat_template.jinja. */
static pn_status tok_chat_template(tok_job *j)
{
    kctx *k = j->k;
    if (!j->tcfg)
        return PN_OK;
    const json_t *ct = json_object_get(j->tcfg, "chat_template");
    if (!ct || json_is_null(ct)) {
        char *jinja = NULL;
        size_t jinja_len = 0;
        pn_status st = read_chat_template(j->dir, &jinja, &jinja_len, k->err);
        if (st != PN_OK)
            return st;
        if (jinja && k->st == PN_OK &&
            gguf_writer_set_str_n(k->w, "tokenizer.chat_template", jinja, jinja_len) != PN_OK)
            wfail(k, "tokenizer.chat_template");
        free(jinja);
    } else if (json_is_string(ct)) {
        if (k->st == PN_OK &&
            gguf_writer_set_str_n(k->w, "tokenizer.chat_template", json_string_value(ct),
                                  json_string_length(ct)) != PN_OK)
            wfail(k, "tokenizer.chat_template");
    } else {
        return pn_error_set(k->err, PN_ERR_FORMAT,
                            "%s: key chat_template is not a string "
                            "(named templates are not taken)",
                            j->tcfg_path);
    }
    return PN_OK;
}

/* The tokenizer keys from the parsed files (taken: freed here), step by
 * step in the converter's order. */
static pn_status tokenizer_keys_of(kctx *k, const char *dir, const json_t *root,
                                   const pn_hf_config *cfg, const pn_hf_opts *opts, json_t *tok,
                                   char *tok_path, json_t *tcfg, char *tcfg_path)
{
    tok_job j = { 0 };
    j.k = k;
    j.dir = dir;
    j.root = root;
    j.tok = tok;
    j.tcfg = tcfg;
    j.model = json_object_get(tok, "model");
    j.tok_path = tok_path;
    j.tcfg_path = tcfg_path;
    j.opts = opts;
    j.nv = cfg->vocab_size;
    pn_status st = tok_vocab(&j);
    if (st == PN_OK)
        st = tok_pre(&j);
    if (st == PN_OK)
        st = tok_merges(&j);
    if (st == PN_OK)
        st = tok_write_vocab(&j);
    if (st == PN_OK)
        st = tok_post_processor(&j);
    if (st == PN_OK)
        st = tok_special(&j);
    if (st == PN_OK)
        st = tok_chat_template(&j);
    if (st == PN_OK) {
        int lower = -1, strip = -1;
        const json_t *norm = json_object_get(tok, "normalizer");
        if (json_is_object(norm))
            parse_normalizer(norm, &lower, &strip);
        if (lower >= 0)
            put_bool(k, "tokenizer.ggml.normalizer.lowercase", lower != 0);
        if (strip >= 0)
            put_bool(k, "tokenizer.ggml.normalizer.strip_accents", strip != 0);
        st = k->st;
    }
    PN_FREE_EACH(j.merges_own, j.n_merges);
    PN_FREE_ALL(j.merges, j.tokens, j.types, tok_path, tcfg_path);
    json_decref(tok);
    json_decref(tcfg);
    return st;
}

/* ---- model keys ---- */

/* rope_parameters.mrope_section (an array of up to four 32-bit integers)
 * as the four rope dimension sections. Returns the format error, if any;
 * a writer failure goes to k->st. */
static pn_status put_mrope_sections(kctx *k, const json_t *ms)
{
    if (!json_is_array(ms))
        return pn_error_set(k->err, PN_ERR_FORMAT,
                            "%s: key rope_parameters.mrope_section is "
                            "not an array",
                            k->file);
    int32_t sec[4] = { 0, 0, 0, 0 };
    for (size_t i = 0; i < json_array_size(ms) && i < 4; i++) {
        const json_t *e = json_array_get(ms, i);
        if (!json_is_integer(e) || json_integer_value(e) < INT32_MIN ||
            json_integer_value(e) > INT32_MAX)
            return pn_error_set(k->err, PN_ERR_FORMAT,
                                "%s: key rope_parameters.mrope_section"
                                "[%zu] is not a 32-bit integer",
                                k->file, i);
        sec[i] = (int32_t)json_integer_value(e);
    }
    if (gguf_writer_set_arr(k->w, ARCH ".rope.dimension_sections", GGUF_TYPE_INT32, sec, 4) !=
        PN_OK)
        wfail(k, ARCH ".rope.dimension_sections");
    return PN_OK;
}

/* The rope dimension count: head_dim x partial_rotary_factor (default
 * 0.25), the factor from rope_parameters (rp) or else the root (hp).
 * Returns the format error, if any; a writer failure goes to k->st. */
static pn_status put_rope_dimension_count(kctx *k, const json_t *rp, const json_t *hp,
                                          const pn_hf_config *cfg)
{
    const json_t *prf = rp ? json_object_get(rp, "partial_rotary_factor") : NULL;
    if (!prf || json_is_null(prf))
        prf = FIND(hp, "partial_rotary_factor", "rope_pct", "rope_percent");
    double f = 0.25;
    if (prf && !json_is_null(prf)) {
        if (!json_is_number(prf))
            return pn_error_set(k->err, PN_ERR_FORMAT,
                                "%s: key partial_rotary_factor is not a "
                                "number",
                                k->file);
        f = json_number_value(prf);
    }
    double rd = (double)cfg->head_dim * f;
    if (!(rd >= 0 && rd < 4294967296.0))
        return pn_error_set(k->err, PN_ERR_FORMAT,
                            "%s: key partial_rotary_factor %g gives a rope "
                            "dimension count out of range",
                            k->file, f);
    put_u32(k, ARCH ".rope.dimension_count", (uint64_t)rd);
    return PN_OK;
}

pn_status pn_hf_keys_write(const char *dir, const json_t *root, const json_t *hp,
                           const pn_hf_config *cfg, const pn_hf_opts *opts, int file_type,
                           gguf_writer *w, pn_error *err)
{
    char file[4096];
    snprintf(file, sizeof file, "%s/config.json", dir);
    kctx k = { w, file, err, PN_OK };
    char name[1024];
    pn_status name_st = pn_hf_model_name(dir, name, sizeof name, err);
    if (name_st != PN_OK)
        return name_st;
    put_str(&k, "general.architecture", ARCH);
    put_str(&k, "general.type", "model");
    put_str(&k, "general.name", name);
    uint64_t blocks = cfg->n_layer + (opts->no_mtp ? 0 : cfg->n_mtp);
    put_u32(&k, ARCH ".block_count", blocks);
    put_u32v(&k, ARCH ".context_length",
             FIND(hp, "max_position_embeddings", "n_ctx", "n_positions", "max_length",
                  "max_sequence_length", "model_max_length"),
             "max_position_embeddings");
    put_u32v(&k, ARCH ".embedding_length", FIND(hp, "hidden_size", "n_embd", "dim"), "hidden_size");
    put_u32v(&k, ARCH ".feed_forward_length",
             FIND(hp, "prefix_dense_intermediate_size", "dense_intermediate_size",
                  "intermediate_size", "n_inner", "hidden_dim"),
             "intermediate_size");
    put_u32v(&k, ARCH ".attention.head_count", FIND(hp, "num_attention_heads", "n_head", "n_heads"),
             "num_attention_heads");
    put_u32v(&k, ARCH ".attention.head_count_kv", FIND(hp, "num_key_value_heads", "n_kv_heads"),
             "num_key_value_heads");
    if (json_is_false(json_object_get(hp, "is_causal")))
        put_bool(&k, ARCH ".attention.causal", false);
    if (k.st != PN_OK)
        return k.st;

    /* rope: rope_parameters (or rope_scaling), with the root's values mirrored */
    const json_t *rp = json_object_get(hp, "rope_parameters");
    if (!rp || json_is_null(rp))
        rp = json_object_get(hp, "rope_scaling");
    if (rp && !json_is_null(rp) && !json_is_object(rp))
        return pn_error_set(err, PN_ERR_FORMAT, "%s: key rope_parameters is not an object", file);
    const json_t *full = rp ? json_object_get(rp, "full_attention") : NULL;
    const json_t *rparams = json_is_object(full) ? full : rp;
    const json_t *rope_type = rparams ? json_object_get(rparams, "rope_type") : NULL;
    if (!rope_type && rp && !json_object_get(rp, "full_attention"))
        rope_type = json_object_get(rp, "type");
    if (rope_type && !json_is_null(rope_type)) {
        const char *rt = json_string_value(rope_type);
        if (!rt)
            return pn_error_set(err, PN_ERR_FORMAT,
                                "%s: key rope_parameters.rope_type is not a "
                                "string",
                                file);
        const json_t *factor = json_object_get(rparams, "factor");
        if (strcmp(rt, "linear") == 0 && factor && !json_is_null(factor)) {
            put_str(&k, ARCH ".rope.scaling.type", "linear");
            put_f32v(&k, ARCH ".rope.scaling.factor", factor, "rope_parameters.factor");
        } else if ((strcmp(rt, "yarn") == 0 && factor && !json_is_null(factor)) ||
                   strcmp(rt, "su") == 0 || strcmp(rt, "longrope") == 0) {
            return pn_error_set(err, PN_ERR_FORMAT,
                                "%s: key rope_parameters.rope_type: %s "
                                "scaling is not taken by pn-convert",
                                file, rt);
        }
    }
    const json_t *ms = rp ? json_object_get(rp, "mrope_section") : NULL;
    if (ms && !json_is_null(ms)) {
        pn_status ms_st = put_mrope_sections(&k, ms);
        if (ms_st != PN_OK)
            return ms_st;
    }
    const json_t *theta = rparams ? json_object_get(rparams, "rope_theta") : NULL;
    if ((!theta || json_is_null(theta)) && !(rp && (json_object_get(rp, "full_attention") ||
                                                    json_object_get(rp, "sliding_attention"))))
        theta = FIND(hp, "global_rope_theta", "rope_global_theta", "rope_theta_global",
                     "rope_theta", "rotary_emb_base");
    if (theta && !json_is_null(theta))
        put_f32v(&k, ARCH ".rope.freq_base", theta, "rope_theta");
    const json_t *eps = FIND(hp, "rms_norm_eps", "norm_eps");
    put_f32v(&k, ARCH ".attention.layer_norm_rms_epsilon", eps, "rms_norm_eps");
    const json_t *leps = FIND(hp, "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon");
    if (leps && !json_is_null(leps))
        put_f32v(&k, ARCH ".attention.layer_norm_epsilon", leps, "layer_norm_eps");
    if (cfg->has_head_dim) {
        put_u32(&k, ARCH ".attention.key_length", cfg->head_dim);
        put_u32(&k, ARCH ".attention.value_length", cfg->head_dim);
    }
    put_u32(&k, "general.file_type", (uint64_t)file_type);
    const json_t *moe = json_object_get(hp, "moe_intermediate_size");
    if (moe && !json_is_null(moe))
        put_u32v(&k, ARCH ".expert_feed_forward_length", moe, "moe_intermediate_size");
    const json_t *sh = json_object_get(hp, "shared_expert_intermediate_size");
    if (sh && !json_is_null(sh))
        put_u32v(&k, ARCH ".expert_shared_feed_forward_length", sh,
                 "shared_expert_intermediate_size");
    if (!opts->no_mtp && cfg->n_mtp > 0)
        put_u32(&k, ARCH ".nextn_predict_layers", cfg->n_mtp);
    put_u32(&k, ARCH ".ssm.conv_kernel", cfg->conv_kernel);
    put_u32(&k, ARCH ".ssm.state_size", cfg->lin_hk);
    put_u32(&k, ARCH ".ssm.group_count", cfg->lin_nk);
    put_u32(&k, ARCH ".ssm.time_step_rank", cfg->lin_nv);
    put_u32(&k, ARCH ".ssm.inner_size", cfg->lin_hv * cfg->lin_nv);
    const json_t *lt = json_object_get(hp, "layer_types");
    if (json_is_array(lt) && k.st == PN_OK) {
        uint8_t *rec = calloc(blocks ? blocks : 1, 1);
        if (!rec)
            return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < json_array_size(lt); i++)
            rec[i] = strcmp(json_string_value(json_array_get(lt, i)), "linear_attention") == 0;
        if (gguf_writer_set_arr(w, ARCH ".attention.recurrent_layers", GGUF_TYPE_BOOL, rec,
                                blocks) != PN_OK)
            wfail(&k, ARCH ".attention.recurrent_layers");
        free(rec);
    }
    const json_t *fai = json_object_get(hp, "full_attention_interval");
    if (fai && !json_is_null(fai))
        put_u32v(&k, ARCH ".full_attention_interval", fai, "full_attention_interval");
    else
        put_u32(&k, ARCH ".full_attention_interval", 4);
    pn_status rd_st = put_rope_dimension_count(&k, rp, hp, cfg);
    if (rd_st != PN_OK)
        return rd_st;
    if (!ms || json_is_null(ms)) {
        static const int32_t def[4] = { 11, 11, 10, 0 };
        if (k.st == PN_OK && gguf_writer_set_arr(w, ARCH ".rope.dimension_sections",
                                                 GGUF_TYPE_INT32, def, 4) != PN_OK)
            wfail(&k, ARCH ".rope.dimension_sections");
    }
    put_u32(&k, "general.quantization_version", 2);
    if (k.st != PN_OK)
        return k.st;
    return tokenizer_keys(&k, dir, root, cfg, opts);
}
