/* hf_model.c - a Hugging Face model folder: config.json, the shards named by
 * model.safetensors.index.json (or one model.safetensors), their headers,
 * and the list of converted tensors in the converter's order (shards by
 * name, tensors of a shard by name). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/byte_order.h"
#include "common/file.h"
#include "common/mem.h"
#include "hf/hf.h"
#include "hf/hf_testing.h"
#include "hf/hf_internal.h"
#include "quant/types.h"

typedef struct shard {
    char *name; /* as in the index */
    char *path; /* dir/name */
    int fd;
    uint64_t size;
    pn_hf_st_header hdr;
} shard;

struct pn_hf_model {
    char *dir;
    pn_hf_opts opts;
    char *tokenizer_pre;
    pn_hf_config cfg;
    json_t *root; /* config.json as read */
    json_t *hp;   /* config.json with text_config merged into the root */
    int out_type; /* ggml type for the weights */
    int file_type;
    size_t n_shards;
    shard *shards;
    size_t n_tensors;
    pn_hf_tensor *tensors;
};

static bool ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && memcmp(s + n - m, suf, m) == 0;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static char *dir_of(const char *p)
{
    const char *s = strrchr(p, '/');
    if (!s)
        return strdup(".");
    if (s == p)
        return strdup("/");
    return strndup(p, (size_t)(s - p));
}

bool pn_hf_is_source(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return false;
    if (S_ISDIR(sb.st_mode)) {
        char *c = pn_path_join(path, "config.json");
        bool ok = c && stat(c, &sb) == 0;
        free(c);
        return ok;
    }
    const char *b = base_name(path);
    return strcmp(b, "config.json") == 0 || ends_with(b, ".safetensors.index.json") ||
           ends_with(b, ".safetensors");
}

/* ---- config ---- */

static pn_status get_uint(const json_t *hp, const char *key, bool required, uint64_t lo,
                          uint64_t hi, uint64_t *out, bool *present, const char *name,
                          pn_error *err)
{
    const json_t *v = json_object_get(hp, key);
    if (present)
        *present = v != NULL && !json_is_null(v);
    if (!v || json_is_null(v)) {
        if (!required)
            return PN_OK;
        return pn_error_set(err, PN_ERR_FORMAT, "%s: key %s is missing", name, key);
    }
    if (!json_is_integer(v))
        return pn_error_set(err, PN_ERR_FORMAT, "%s: key %s is not an integer", name, key);
    json_int_t x = json_integer_value(v);
    if (x < 0 || (uint64_t)x < lo || (uint64_t)x > hi)
        return pn_error_set(err, PN_ERR_FORMAT, "%s: key %s is %lld, outside [%llu, %llu]", name,
                            key, (long long)x, (unsigned long long)lo, (unsigned long long)hi);
    *out = (uint64_t)x;
    return PN_OK;
}

/* The merged hparams: the root with text_config's members over it. */
static pn_status merge_config(json_t *root, const char *name, json_t **out, pn_error *err)
{
    json_t *hp = json_deep_copy(root);
    if (!hp)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", name);
    json_t *tc = json_object_get(root, "text_config");
    if (tc) {
        if (!json_is_object(tc)) {
            json_decref(hp);
            return pn_error_set(err, PN_ERR_FORMAT, "%s: key text_config is not an object", name);
        }
        if (json_object_update(hp, tc) != 0) {
            json_decref(hp);
            return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", name);
        }
    }
    *out = hp;
    return PN_OK;
}

static pn_status config_of(const json_t *root, const json_t *hp, const char *name, bool no_mtp,
                           pn_hf_config *c, pn_error *err)
{
    (void)no_mtp;
    memset(c, 0, sizeof *c);
    const json_t *archs = json_object_get(root, "architectures");
    if (!json_is_array(archs) || json_array_size(archs) < 1 ||
        !json_is_string(json_array_get(archs, 0)))
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: key architectures is missing or not an array of strings", name);
    const char *a = json_string_value(json_array_get(archs, 0));
    if (strcmp(a, "Qwen3_5ForCausalLM") != 0 && strcmp(a, "Qwen3_5ForConditionalGeneration") != 0)
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: architecture %.60s is not taken (only Qwen3_5ForCausalLM and "
                            "Qwen3_5ForConditionalGeneration, written as qwen35)",
                            name, a);
    snprintf(c->arch, sizeof c->arch, "%s", a);
    const uint64_t DIM = 1u << 20, HEADS = 1u << 16;
    pn_status st;
#define U(key, req, lo, hi, field, pres)                                                           \
    if ((st = get_uint(hp, key, req, lo, hi, &c->field, pres, name, err)) != PN_OK)                \
    return st
    U("num_hidden_layers", true, 1, 1024, n_layer, NULL);
    U("mtp_num_hidden_layers", false, 0, 16, n_mtp, NULL);
    U("hidden_size", true, 1, DIM, n_embd, NULL);
    U("intermediate_size", true, 1, DIM, n_ff, NULL);
    U("num_attention_heads", true, 1, HEADS, n_head, NULL);
    U("num_key_value_heads", true, 1, HEADS, n_head_kv, NULL);
    U("head_dim", false, 1, DIM, head_dim, &c->has_head_dim);
    U("vocab_size", true, 1, 1u << 24, vocab_size, NULL);
    U("linear_num_key_heads", true, 1, HEADS, lin_nk, NULL);
    U("linear_num_value_heads", true, 1, HEADS, lin_nv, NULL);
    U("linear_key_head_dim", true, 1, DIM, lin_hk, NULL);
    U("linear_value_head_dim", true, 1, DIM, lin_hv, NULL);
    U("linear_conv_kernel_dim", true, 1, 1024, conv_kernel, NULL);
#undef U
    if (c->n_head % c->n_head_kv != 0)
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: key num_attention_heads (%llu) is not a multiple of "
                            "num_key_value_heads (%llu)",
                            name, (unsigned long long)c->n_head, (unsigned long long)c->n_head_kv);
    if (c->lin_nv % c->lin_nk != 0)
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: key linear_num_value_heads (%llu) is not a multiple of "
                            "linear_num_key_heads (%llu)",
                            name, (unsigned long long)c->lin_nv, (unsigned long long)c->lin_nk);
    if (!c->has_head_dim && c->n_embd % c->n_head != 0)
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: key hidden_size (%llu) is not a multiple of "
                            "num_attention_heads (%llu) and head_dim is not given",
                            name, (unsigned long long)c->n_embd, (unsigned long long)c->n_head);
    if (!c->has_head_dim)
        c->head_dim = c->n_embd / c->n_head;
    const json_t *lt = json_object_get(hp, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt))
            return pn_error_set(err, PN_ERR_FORMAT, "%s: key layer_types is not an array", name);
        if (json_array_size(lt) != c->n_layer)
            return pn_error_set(err, PN_ERR_FORMAT,
                                "%s: key layer_types has %zu entries, expected "
                                "num_hidden_layers (%llu)",
                                name, json_array_size(lt), (unsigned long long)c->n_layer);
        for (size_t i = 0; i < json_array_size(lt); i++)
            if (!json_is_string(json_array_get(lt, i)))
                return pn_error_set(err, PN_ERR_FORMAT,
                                    "%s: key layer_types: entry %zu is not a string", name, i);
    }
    const json_t *eps = json_object_get(hp, "rms_norm_eps");
    if (!json_is_number(eps))
        return pn_error_set(err, PN_ERR_FORMAT, "%s: key rms_norm_eps is missing or not a number",
                            name);
    return PN_OK;
}

pn_status pn_hf_config_parse(const char *text, size_t len, const char *name, bool no_mtp,
                             pn_hf_config *out, pn_error *err)
{
    json_t *root = NULL, *hp = NULL;
    pn_status st = pn_hf_json_parse(text, len, name, 0, &root, err);
    if (st == PN_OK)
        st = merge_config(root, name, &hp, err);
    if (st == PN_OK)
        st = config_of(root, hp, name, no_mtp, out, err);
    json_decref(hp);
    json_decref(root);
    return st;
}

/* ---- shards ---- */

static pn_status check_shard_name(const char *index, const char *s, pn_error *err)
{
    if (s[0] == '\0' || s[0] == '/')
        return pn_error_set(err, PN_ERR_FORMAT, "%s: shard name \"%s\" is %s", index, s,
                            s[0] ? "an absolute path" : "empty");
    for (const char *p = s; *p;) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if ((n == 2 && p[0] == '.' && p[1] == '.') || n == 0)
            return pn_error_set(err, PN_ERR_FORMAT, "%s: shard name \"%s\" leaves the model folder",
                                index, s);
        p = e ? e + 1 : p + n;
    }
    return PN_OK;
}

static pn_status open_shard(shard *sh, pn_error *err)
{
    sh->fd = open(sh->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (sh->fd < 0)
        return pn_error_set(err, PN_ERR_IO, "%s: cannot open shard: %s", sh->path, strerror(errno));
    struct stat sb;
    if (fstat(sh->fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        return pn_error_set(err, PN_ERR_IO, "%s: shard is not a regular file", sh->path);
    sh->size = (uint64_t)sb.st_size;
    uint8_t lenb[8];
    if (sh->size < 8)
        return pn_error_set(err, PN_ERR_TRUNCATED,
                            "%s: at byte 0: the file ends before the 8-byte header length",
                            sh->path);
    if (pread(sh->fd, lenb, 8, 0) != 8)
        return pn_error_set(err, PN_ERR_IO, "%s: at byte 0: cannot read", sh->path);
    uint64_t len = pn_load_u64le(lenb);
    if (len > PN_HF_MAX_HEADER || len > sh->size - 8)
        return pn_hf_st_parse(lenb, 8, sh->size, sh->path, &sh->hdr, err);
    size_t n = 8 + (size_t)len;
    uint8_t *buf = malloc(n);
    if (!buf)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", sh->path);
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(sh->fd, buf + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            free(buf);
            return pn_error_set(err, PN_ERR_TRUNCATED, "%s: at byte %zu: cannot read the header",
                                sh->path, got);
        }
        got += (size_t)r;
    }
    pn_status st = pn_hf_st_parse(buf, n, sh->size, sh->path, &sh->hdr, err);
    free(buf);
    return st;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef struct name_ref {
    const char *name;
    size_t shard, idx;
} name_ref;
static int cmp_ref(const void *a, const void *b)
{
    const name_ref *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x->shard < y->shard ? -1 : (x->shard > y->shard);
}
static int cmp_tensor_name(const void *a, const void *b)
{
    const pn_hf_st_tensor *x = *(pn_hf_st_tensor *const *)a, *y = *(pn_hf_st_tensor *const *)b;
    return strcmp(x->name, y->name);
}

void pn_hf_close(pn_hf_model *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_shards; i++) {
        if (m->shards[i].fd >= 0)
            close(m->shards[i].fd);
        free(m->shards[i].name);
        free(m->shards[i].path);
        pn_hf_st_free(&m->shards[i].hdr);
    }
    json_decref(m->hp);
    json_decref(m->root);
    PN_FREE_ALL(m->shards, m->tensors, m->tokenizer_pre, m->dir, m);
}

/* The shard names of a parsed index: its weight_map's values, checked,
 * sorted, each once (pointers into idx). */
static pn_status index_names(const json_t *idx, const char *index_path, const char ***out,
                             size_t *n_out, pn_error *err)
{
    *out = NULL;
    *n_out = 0;
    const json_t *wm = json_object_get(idx, "weight_map");
    if (!json_is_object(wm))
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: key weight_map is missing or not an "
                            "object",
                            index_path);
    size_t k = json_object_size(wm), n = 0;
    const char **names = calloc(k ? k : 1, sizeof *names);
    if (!names)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    const char *key;
    json_t *v;
    pn_status st = PN_OK;
    json_object_foreach((json_t *)wm, key, v)
    {
        if (!json_is_string(v)) {
            st = pn_error_set(err, PN_ERR_FORMAT,
                              "%s: weight_map: tensor %s: shard is not a "
                              "string",
                              index_path, key);
            break;
        }
        const char *s = json_string_value(v);
        if ((st = check_shard_name(index_path, s, err)) != PN_OK)
            break;
        names[n++] = s;
    }
    if (st == PN_OK && n == 0)
        st = pn_error_set(err, PN_ERR_FORMAT, "%s: weight_map names no shard", index_path);
    if (st != PN_OK) {
        free(names);
        return st;
    }
    qsort(names, n, sizeof *names, cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (u == 0 || strcmp(names[u - 1], names[i]) != 0)
            names[u++] = names[i];
    *out = names;
    *n_out = u;
    return PN_OK;
}

pn_status pn_hf_index_parse(const char *text, size_t len, const char *name, size_t *n_shards,
                            pn_error *err)
{
    *n_shards = 0;
    json_t *idx = NULL;
    pn_status st = pn_hf_json_parse(text, len, name, 0, &idx, err);
    const char **names = NULL;
    if (st == PN_OK)
        st = index_names(idx, name, &names, n_shards, err);
    free(names);
    json_decref(idx);
    return st;
}

/* The shard names: from the index's weight_map (sorted, unique), or the
 * single model.safetensors. */
static pn_status list_shards(pn_hf_model *m, const char *index_path, const char *single,
                             json_t **weight_map_out, pn_error *err)
{
    *weight_map_out = NULL;
    if (index_path) {
        json_t *idx = NULL;
        pn_status st = pn_hf_json_load(index_path, &idx, err);
        if (st != PN_OK)
            return st;
        const char **names = NULL;
        size_t n = 0;
        st = index_names(idx, index_path, &names, &n, err);
        if (st == PN_OK && !(m->shards = calloc(n, sizeof *m->shards)))
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        for (size_t i = 0; st == PN_OK && i < n; i++) {
            m->shards[i].fd = -1;
            m->shards[i].name = strdup(names[i]);
            m->shards[i].path = pn_path_join(m->dir, names[i]);
            m->n_shards++;
            if (!m->shards[i].name || !m->shards[i].path)
                st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        }
        free(names);
        if (st == PN_OK)
            *weight_map_out = json_incref(json_object_get(idx, "weight_map"));
        json_decref(idx);
        return st;
    }
    m->shards = calloc(1, sizeof *m->shards);
    if (!m->shards)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    m->shards[0].fd = -1;
    m->shards[0].name = strdup(single);
    m->shards[0].path = pn_path_join(m->dir, single);
    m->n_shards = 1;
    if (!m->shards[0].name || !m->shards[0].path)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    return PN_OK;
}

/* config.json of m->dir: read, text_config merged, the values checked. */
static pn_status open_config(pn_hf_model *m, pn_error *err)
{
    char *cfg_path = pn_path_join(m->dir, "config.json");
    if (!cfg_path)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    struct stat cb;
    if (lstat(cfg_path, &cb) != 0 && errno == ENOENT) {
        free(cfg_path);
        return pn_error_set(err, PN_ERR_IO,
                            "%s: config.json is missing (a Hugging Face model "
                            "folder holds config.json beside its safetensors)",
                            m->dir);
    }
    json_t *root = NULL;
    pn_status st = pn_hf_json_load(cfg_path, &root, err);
    if (st == PN_OK)
        st = merge_config(root, cfg_path, &m->hp, err);
    if (st == PN_OK)
        st = config_of(root, m->hp, cfg_path, m->opts.no_mtp, &m->cfg, err);
    m->root = root;
    free(cfg_path);
    return st;
}

/* Every tensor name once, in one shard, and the index (weight_map, when
 * there is one) agreeing with the shards both ways. */
static pn_status check_index_agrees(const pn_hf_model *m, const char *index_path, const json_t *wm,
                                    size_t total, pn_error *err)
{
    name_ref *refs = calloc(total ? total : 1, sizeof *refs);
    if (!refs)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    size_t k = 0;
    for (size_t s = 0; s < m->n_shards; s++)
        for (size_t i = 0; i < m->shards[s].hdr.n_tensors; i++)
            refs[k++] = (name_ref){ m->shards[s].hdr.tensors[i].name, s, i };
    qsort(refs, total, sizeof *refs, cmp_ref);
    pn_status st = PN_OK;
    for (size_t i = 1; i < total && st == PN_OK; i++)
        if (strcmp(refs[i].name, refs[i - 1].name) == 0)
            st = pn_error_set(err, PN_ERR_TENSOR, "tensor %s is in two shards: %s and %s",
                              refs[i].name, m->shards[refs[i - 1].shard].path,
                              m->shards[refs[i].shard].path);
    for (size_t i = 0; wm && i < total && st == PN_OK; i++) {
        const json_t *v = json_object_get(wm, refs[i].name);
        if (!v)
            st = pn_error_set(err, PN_ERR_TENSOR,
                              "%s: tensor %s is in shard %s but not in "
                              "the index's weight_map",
                              index_path, refs[i].name, m->shards[refs[i].shard].name);
        else if (strcmp(json_string_value(v), m->shards[refs[i].shard].name) != 0)
            st = pn_error_set(err, PN_ERR_TENSOR,
                              "%s: tensor %s is in shard %s, the index "
                              "says %s",
                              index_path, refs[i].name, m->shards[refs[i].shard].name,
                              json_string_value(v));
    }
    if (st == PN_OK && wm && json_object_size(wm) != total) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)wm, key, v)
        {
            /* binary search by name only */
            size_t lo = 0, hi = total;
            while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (strcmp(refs[mid].name, key) < 0)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if (lo == total || strcmp(refs[lo].name, key) != 0) {
                st = pn_error_set(err, PN_ERR_TENSOR,
                                  "%s: tensor %s: the index names shard "
                                  "%s, which does not hold it",
                                  index_path, key, json_string_value(v));
                break;
            }
        }
    }
    free(refs);
    return st;
}

/* The kept tensors, in the converter's order (shards in order, each
 * shard's tensors by name): mapped, with their source shapes, into
 * m->tensors (not planned yet); kept[i] is tensor i's header entry.
 * *auto_type: the auto outtype (the first kept tensor of 2 or more dims). */
static pn_status map_tensors(pn_hf_model *m, size_t total, const pn_hf_st_tensor **kept,
                             int *auto_type, pn_error *err)
{
    *auto_type = -1;
    pn_hf_st_tensor **by_name = calloc(total ? total : 1, sizeof *by_name);
    if (!by_name)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    pn_status st = PN_OK;
    for (size_t s = 0; s < m->n_shards && st == PN_OK; s++) {
        shard *sh = &m->shards[s];
        for (size_t i = 0; i < sh->hdr.n_tensors; i++)
            by_name[i] = &sh->hdr.tensors[i];
        qsort(by_name, sh->hdr.n_tensors, sizeof *by_name, cmp_tensor_name);
        for (size_t i = 0; i < sh->hdr.n_tensors && st == PN_OK; i++) {
            const pn_hf_st_tensor *t = by_name[i];
            char gname[96];
            int r = pn_hf_map_name(t->name, &m->cfg, m->opts.no_mtp, gname, sizeof gname, err);
            if (r < 0) {
                pn_error_prefix(err, "%s", sh->path);
                st = err ? err->code : PN_ERR_TENSOR;
                break;
            }
            if (r == 0)
                continue;
            if (t->dtype == PN_HF_F16) {
                st = pn_error_set(err, PN_ERR_TYPE,
                                  "%s: tensor %s: F16 checkpoints are refused (the converter "
                                  "transforms them in half precision, which pn-convert does not "
                                  "reproduce; convert the checkpoint to BF16 or F32 first)",
                                  sh->path, t->name);
                break;
            }
            if (*auto_type < 0 && t->n_dims >= 2)
                *auto_type = t->dtype == PN_HF_BF16 ? PN_TYPE_BF16 : PN_TYPE_F16;
            pn_hf_tensor *o = &m->tensors[m->n_tensors];
            snprintf(o->name, sizeof o->name, "%s", gname);
            o->src_name = t->name;
            o->src_n_dims = t->n_dims;
            memcpy(o->src_shape, t->shape, sizeof o->src_shape);
            o->shard = (uint32_t)s;
            o->src_begin = sh->hdr.data_offset + t->begin;
            kept[m->n_tensors++] = t;
        }
    }
    free(by_name);
    return st;
}

/* No GGUF name twice (two sources for one GGUF tensor), what the
 * architecture holds (hf_arch.c), then each tensor's plan: shape, type,
 * transform. */
static pn_status plan_tensors(pn_hf_model *m, const pn_hf_st_tensor *const *kept, pn_error *err)
{
    pn_status st = PN_OK;
    char **nm = calloc(m->n_tensors ? m->n_tensors : 1, sizeof *nm);
    if (!nm)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < m->n_tensors; i++)
        nm[i] = m->tensors[i].name;
    qsort(nm, m->n_tensors, sizeof *nm, cmp_str);
    for (size_t i = 1; i < m->n_tensors; i++)
        if (strcmp(nm[i], nm[i - 1]) == 0) {
            st = pn_error_set(err, PN_ERR_TENSOR, "%s: two tensors map to %s", m->dir, nm[i]);
            break;
        }
    free(nm);
    if (st == PN_OK)
        st =
            pn_hf_check_arch(m->dir, m->hp, &m->cfg, m->opts.no_mtp, m->tensors, m->n_tensors, err);
    for (size_t i = 0; st == PN_OK && i < m->n_tensors; i++) {
        pn_hf_tensor *o = &m->tensors[i];
        const uint32_t s = o->shard;
        const uint64_t begin = o->src_begin;
        char gname[96];
        snprintf(gname, sizeof gname, "%s", o->name);
        st = pn_hf_plan_tensor(&m->cfg, kept[i]->name, kept[i], gname, PN_TYPE_BF16, o, err);
        if (st != PN_OK) {
            pn_error_prefix(err, "%s", m->shards[s].path);
            break;
        }
        o->shard = s;
        o->src_begin = begin;
    }
    return st;
}

/* Where the shards are named: SRC itself (an index or a .safetensors),
 * else the folder's index, else its model.safetensors; neither is said so. */
static pn_status find_weights(pn_hf_model *m, const char *src, bool is_dir, char **index_path,
                              const char **single, pn_error *err)
{
    *index_path = NULL;
    *single = "model.safetensors";
    if (!is_dir) {
        const char *b = base_name(src);
        if (ends_with(b, ".safetensors.index.json"))
            return (*index_path = strdup(src)) ? PN_OK
                                               : pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        if (ends_with(b, ".safetensors")) {
            *single = b;
            return PN_OK;
        }
    }
    char *ip = pn_path_join(m->dir, "model.safetensors.index.json");
    struct stat sb;
    if (ip && lstat(ip, &sb) == 0) {
        *index_path = ip;
        return PN_OK;
    }
    free(ip);
    char *sp = pn_path_join(m->dir, *single);
    bool none = sp && lstat(sp, &sb) != 0 && errno == ENOENT;
    free(sp);
    if (none)
        return pn_error_set(err, PN_ERR_IO,
                            "%s: there is no model.safetensors.index.json "
                            "and no model.safetensors: the folder names no weights (a "
                            "checkpoint in shards needs its index)",
                            m->dir);
    return PN_OK;
}

static pn_status build(pn_hf_model *m, const char *src, pn_error *err)
{
    struct stat sb;
    if (stat(src, &sb) != 0)
        return pn_error_set(err, PN_ERR_IO, "%s: %s", src, strerror(errno));
    const bool is_dir = S_ISDIR(sb.st_mode);
    if (!is_dir) {
        const char *b = base_name(src);
        if (!ends_with(b, ".safetensors.index.json") && !ends_with(b, ".safetensors") &&
            strcmp(b, "config.json") != 0)
            return pn_error_set(err, PN_ERR_USAGE,
                                "%s: not a Hugging Face model folder, config.json, index or "
                                ".safetensors file",
                                src);
    }
    m->dir = is_dir ? strdup(src) : dir_of(src);
    if (!m->dir)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    pn_status st = open_config(m, err);
    char *index_path = NULL;
    const char *single = NULL;
    if (st == PN_OK)
        st = find_weights(m, src, is_dir, &index_path, &single, err);
    json_t *wm = NULL;
    if (st == PN_OK)
        st = list_shards(m, index_path, single, &wm, err);
    for (size_t s = 0; s < m->n_shards && st == PN_OK; s++)
        st = open_shard(&m->shards[s], err);
    size_t total = 0;
    for (size_t s = 0; st == PN_OK && s < m->n_shards; s++)
        total += m->shards[s].hdr.n_tensors;
    if (st == PN_OK)
        st = check_index_agrees(m, index_path, wm, total, err);
    json_decref(wm);
    free(index_path);
    if (st != PN_OK)
        return st;

    m->tensors = calloc(total ? total : 1, sizeof *m->tensors);
    const pn_hf_st_tensor **kept = calloc(total ? total : 1, sizeof *kept);
    int auto_type = -1;
    if (!m->tensors || !kept)
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    if (st == PN_OK)
        st = map_tensors(m, total, kept, &auto_type, err);
    if (st == PN_OK)
        st = plan_tensors(m, kept, err);
    free(kept);
    if (st != PN_OK)
        return st;
    int out;
    switch (m->opts.outtype) {
    case PN_HF_OUT_BF16: out = PN_TYPE_BF16; break;
    case PN_HF_OUT_F16: out = PN_TYPE_F16; break;
    case PN_HF_OUT_F32: out = PN_TYPE_F32; break;
    default: out = auto_type < 0 ? PN_TYPE_F16 : auto_type; break;
    }
    m->out_type = out;
    m->file_type = out == PN_TYPE_BF16 ? 32 : out == PN_TYPE_F16 ? 1 : 0;
    for (size_t i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].type == PN_TYPE_BF16)
            m->tensors[i].type = out;
    /* the keys, built once here so that a bad tokenizer is refused at open */
    gguf_writer *w = gguf_writer_new();
    if (!w)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    st = pn_hf_set_keys(m, w, err);
    gguf_writer_free(w);
    return st;
}

pn_status pn_hf_open(const char *src, const pn_hf_opts *opts, pn_hf_model **out, pn_error *err)
{
    *out = NULL;
    pn_hf_model *m = calloc(1, sizeof *m);
    if (!m)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    if (opts)
        m->opts = *opts;
    if (opts && opts->tokenizer_pre) {
        m->tokenizer_pre = strdup(opts->tokenizer_pre);
        if (!m->tokenizer_pre) {
            free(m);
            return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        }
    }
    m->opts.tokenizer_pre = m->tokenizer_pre;
    pn_status st = build(m, src, err);
    if (st != PN_OK) {
        pn_hf_close(m);
        return st;
    }
    *out = m;
    return PN_OK;
}

const char *pn_hf_dir(const pn_hf_model *m)
{
    return m->dir;
}
size_t pn_hf_n_tensors(const pn_hf_model *m)
{
    return m->n_tensors;
}
const pn_hf_tensor *pn_hf_tensor_at(const pn_hf_model *m, size_t i)
{
    return i < m->n_tensors ? &m->tensors[i] : NULL;
}
size_t pn_hf_n_shards(const pn_hf_model *m)
{
    return m->n_shards;
}
const char *pn_hf_shard_path(const pn_hf_model *m, size_t s)
{
    return m->shards[s].path;
}
int pn_hf_shard_fd(const pn_hf_model *m, size_t s)
{
    return m->shards[s].fd;
}
uint64_t pn_hf_shard_size(const pn_hf_model *m, size_t s)
{
    return m->shards[s].size;
}

pn_status pn_hf_set_keys(const pn_hf_model *m, gguf_writer *w, pn_error *err)
{
    return pn_hf_keys_write(m->dir, m->root, m->hp, &m->cfg, &m->opts, m->file_type, w, err);
}

pn_status pn_hf_add_tensors(const pn_hf_model *m, gguf_writer *w, pn_error *err)
{
    for (size_t i = 0; i < m->n_tensors; i++) {
        const pn_hf_tensor *t = &m->tensors[i];
        pn_status st = gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, err);
        if (st != PN_OK)
            return st;
    }
    return PN_OK;
}
