/* imatrix.c - reading llama.cpp's importance matrix (both forms) and
 * matching it to a model's tensors; the rules are in imatrix.h. */
#include "mix/imatrix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/file.h"
#include "common/hash.h"
#include "common/text.h"
#include "gguf/gguf.h"
#include "mix/name_index.h"

#define GGML_TYPE_F32_ID 0

static const char *safe(const char *s, char *buf, size_t cap)
{
    return pn_safe_text(s, buf, cap);
}

void pn_imatrix_free(pn_imatrix *im)
{
    if (!im)
        return;
    for (size_t i = 0; i < im->n; i++) {
        free(im->entries[i].name);
        free(im->entries[i].weights);
    }
    free(im->entries);
    free(im->dataset);
    free(im);
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const pn_imatrix_entry *)a)->name, ((const pn_imatrix_entry *)b)->name);
}

/* A name as an entry may carry: 1..PN_IMATRIX_NAME_MAX bytes, no control
 * byte (C0, DEL), so that no message or report line can be forged. */
static bool name_ok(const char *s, size_t n)
{
    if (n == 0 || n > PN_IMATRIX_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return false;
    }
    return true;
}

/* Sorts the entries and refuses a name given twice. */
static pn_status sort_entries(pn_imatrix *im, const char *file, pn_error *err)
{
    qsort(im->entries, im->n, sizeof *im->entries, entry_cmp);
    for (size_t i = 1; i < im->n; i++)
        if (strcmp(im->entries[i - 1].name, im->entries[i].name) == 0) {
            char b[256];
            return pn_error_set(err, PN_ERR_FORMAT, "%s: entry %s is given twice", file,
                                safe(im->entries[i].name, b, sizeof b));
        }
    return PN_OK;
}

/* ---- legacy .dat ---- */

typedef struct cursor {
    const uint8_t *p;
    size_t len, at;
    const char *file;
} cursor;

static pn_status take_i32(cursor *c, int32_t *v, const char *what, pn_error *err)
{
    if (c->len - c->at < 4)
        return pn_error_set(err, PN_ERR_TRUNCATED,
                            "%s: at byte %zu: the file ends inside %s (4 bytes expected, %zu left)",
                            c->file, c->at, what, c->len - c->at);
    uint32_t u = (uint32_t)c->p[c->at] | (uint32_t)c->p[c->at + 1] << 8 |
                 (uint32_t)c->p[c->at + 2] << 16 | (uint32_t)c->p[c->at + 3] << 24;
    memcpy(v, &u, 4);
    c->at += 4;
    return PN_OK;
}

static float le_f32(const uint8_t *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static pn_status parse_dat(const uint8_t *p, size_t len, const char *file, pn_imatrix *im,
                           pn_error *err)
{
    cursor c = { p, len, 0, file };
    int32_t n_entries = 0;
    pn_status st = take_i32(&c, &n_entries, "the entry count", err);
    if (st)
        return st;
    if (n_entries < 1)
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: at byte 0: the entry count is %d (expected >= 1)", file,
                            (int)n_entries);
    /* each entry takes at least 16 bytes (three int32, one name byte, one
     * float): a count the file cannot hold is refused before any allocation */
    if ((uint64_t)n_entries > (len - 4) / 16)
        return pn_error_set(err, PN_ERR_TRUNCATED,
                            "%s: at byte 0: %d entries declared, but the %zu bytes left hold at "
                            "most %zu",
                            file, (int)n_entries, len - 4, (len - 4) / 16);
    im->form = PN_IMATRIX_DAT;
    im->entries = calloc((size_t)n_entries, sizeof *im->entries);
    if (!im->entries)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", file);
    for (int32_t i = 0; i < n_entries; i++) {
        char what[64];
        snprintf(what, sizeof what, "the name length of entry %d", (int)i);
        size_t at0 = c.at;
        int32_t nlen = 0;
        if ((st = take_i32(&c, &nlen, what, err)))
            return st;
        if (nlen < 1 || nlen > PN_IMATRIX_NAME_MAX)
            return pn_error_set(err, PN_ERR_FORMAT,
                                "%s: at byte %zu: entry %d: name length %d (expected 1..%d)", file,
                                at0, (int)i, (int)nlen, PN_IMATRIX_NAME_MAX);
        if ((size_t)nlen > c.len - c.at)
            return pn_error_set(err, PN_ERR_TRUNCATED,
                                "%s: at byte %zu: entry %d: a name of %d bytes runs past the end "
                                "of the file (%zu bytes left)",
                                file, c.at, (int)i, (int)nlen, c.len - c.at);
        const char *nm = (const char *)c.p + c.at;
        pn_imatrix_entry *e = &im->entries[im->n];
        if (!(e->name = malloc((size_t)nlen + 1)))
            return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", file);
        memcpy(e->name, nm, (size_t)nlen);
        e->name[nlen] = 0;
        im->n++;
        char b[256];
        if (!name_ok(nm, (size_t)nlen) || memchr(nm, 0, (size_t)nlen))
            return pn_error_set(err, PN_ERR_FORMAT,
                                "%s: at byte %zu: entry %d: the name %s holds a control byte", file,
                                c.at, (int)i, safe(e->name, b, sizeof b));
        c.at += (size_t)nlen;
        int32_t ncall = 0, nval = 0;
        snprintf(what, sizeof what, "the ncall of entry %d", (int)i);
        if ((st = take_i32(&c, &ncall, what, err)))
            return pn_error_prefix(err, "entry %s", safe(e->name, b, sizeof b));
        snprintf(what, sizeof what, "the value count of entry %d", (int)i);
        if ((st = take_i32(&c, &nval, what, err)))
            return pn_error_prefix(err, "entry %s", safe(e->name, b, sizeof b));
        if (ncall < 0)
            return pn_error_set(err, PN_ERR_FORMAT,
                                "%s: at byte %zu: entry %s: ncall %d is negative", file, c.at - 8,
                                safe(e->name, b, sizeof b), (int)ncall);
        if (nval < 1)
            return pn_error_set(err, PN_ERR_FORMAT,
                                "%s: at byte %zu: entry %s: value count %d (expected >= 1)", file,
                                c.at - 4, safe(e->name, b, sizeof b), (int)nval);
        if ((uint64_t)nval > (c.len - c.at) / 4)
            return pn_error_set(err, PN_ERR_TRUNCATED,
                                "%s: at byte %zu: entry %s: %d values run past the end of the file "
                                "(%zu bytes left)",
                                file, c.at, safe(e->name, b, sizeof b), (int)nval, c.len - c.at);
        e->n_vals = nval;
        e->n_mat = 1;
        e->count = ncall;
        if (!(e->weights = malloc((size_t)nval * sizeof(float))))
            return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", file);
        for (int32_t j = 0; j < nval; j++) {
            float v = le_f32(c.p + c.at + 4 * (size_t)j);
            if (!isfinite(v) || v < 0.0f)
                return pn_error_set(err, isfinite(v) ? PN_ERR_FORMAT : PN_ERR_NONFINITE,
                                    "%s: at byte %zu: entry %s, column %d: value %g (expected "
                                    "finite and >= 0)",
                                    file, c.at + 4 * (size_t)j, safe(e->name, b, sizeof b), (int)j,
                                    (double)v);
            e->weights[j] = ncall > 0 ? v / (float)ncall : v;
        }
        c.at += 4 * (size_t)nval;
    }
    if (c.at < c.len) {
        int32_t chunks = 0, dlen = 0;
        if ((st = take_i32(&c, &chunks, "the trailer's chunk count", err)))
            return st;
        if ((st = take_i32(&c, &dlen, "the trailer's dataset length", err)))
            return st;
        if (chunks < 0 || dlen < 0)
            return pn_error_set(err, PN_ERR_FORMAT,
                                "%s: at byte %zu: the trailer gives chunk count %d and dataset "
                                "length %d (expected >= 0)",
                                file, c.at - 8, (int)chunks, (int)dlen);
        if ((size_t)dlen > c.len - c.at)
            return pn_error_set(err, PN_ERR_TRUNCATED,
                                "%s: at byte %zu: a dataset name of %d bytes runs past the end of "
                                "the file (%zu bytes left)",
                                file, c.at, (int)dlen, c.len - c.at);
        if ((size_t)dlen != c.len - c.at)
            return pn_error_set(err, PN_ERR_FORMAT,
                                "%s: at byte %zu: %zu bytes after the trailer's dataset name", file,
                                c.at + (size_t)dlen, c.len - c.at - (size_t)dlen);
        im->chunk_count = chunks;
        if (!(im->dataset = malloc((size_t)dlen + 1)))
            return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", file);
        memcpy(im->dataset, c.p + c.at, (size_t)dlen);
        im->dataset[dlen] = 0;
        im->n_datasets = dlen > 0;
        c.at += (size_t)dlen;
    }
    return sort_entries(im, file, err);
}

/* ---- GGUF ---- */

static const gguf_kv *need_kv(const gguf_reader *r, const char *file, const char *key,
                              gguf_value_type type, pn_error *err)
{
    const gguf_kv *kv = gguf_reader_find_kv(r, key);
    if (!kv) {
        pn_error_set(err, PN_ERR_FORMAT, "%s: an imatrix needs the key %s, which is missing", file,
                     key);
        return NULL;
    }
    if (kv->type != type) {
        pn_error_set(err, PN_ERR_FORMAT, "%s: key %s is %s (expected %s)", file, key,
                     gguf_value_type_name(kv->type), gguf_value_type_name(type));
        return NULL;
    }
    return kv;
}

/* Reads n float32 of tensor ti and refuses NaN, infinity and negatives. */
static pn_status read_f32(const gguf_reader *r, size_t ti, const char *file, float *dst, uint64_t n,
                          pn_error *err)
{
    pn_status st = gguf_reader_read_tensor(r, ti, 0, dst, (size_t)n * 4, err);
    if (st)
        return st;
    for (uint64_t j = 0; j < n; j++) {
        float v = le_f32((const uint8_t *)&dst[j]);
        if (!isfinite(v) || v < 0.0f) {
            char b[256];
            return pn_error_set(err, isfinite(v) ? PN_ERR_FORMAT : PN_ERR_NONFINITE,
                                "%s: tensor %s, element %llu: %g (expected finite and >= 0)", file,
                                safe(gguf_reader_tensor(r, ti)->name, b, sizeof b),
                                (unsigned long long)j, (double)v);
        }
        dst[j] = v;
    }
    return PN_OK;
}

static bool ends_with(const char *s, size_t n, const char *suf, size_t *stem)
{
    size_t k = strlen(suf);
    if (n <= k || memcmp(s + n - k, suf, k) != 0)
        return false;
    *stem = n - k;
    return true;
}

/* The entry of in_sum2 tensor i (its name's stem of `stem` bytes) and its
 * counts, appended to im->entries. counts: a scratch buffer, reallocated. */
static pn_status read_entry(const gguf_reader *r, size_t i, size_t stem, const char *file,
                            pn_imatrix *im, float **counts_io, pn_error *err)
{
    char b[256];
    const gguf_tensor_info *t = gguf_reader_tensor(r, i);
    pn_imatrix_entry *e = &im->entries[im->n];
    if (!(e->name = malloc(stem + 8)))
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", file);
    memcpy(e->name, t->name, stem);
    e->name[stem] = 0;
    im->n++;
    if (!name_ok(e->name, stem))
        return pn_error_set(err, PN_ERR_FORMAT, "%s: entry %s: the name holds a control byte", file,
                            safe(e->name, b, sizeof b));
    char cname[PN_IMATRIX_NAME_MAX + 16];
    snprintf(cname, sizeof cname, "%s.counts", e->name);
    long ci = gguf_reader_find_tensor(r, cname);
    if (ci < 0)
        return pn_error_set(err, PN_ERR_FORMAT, "%s: entry %s has in_sum2 but no counts", file,
                            safe(e->name, b, sizeof b));
    const gguf_tensor_info *ct = gguf_reader_tensor(r, (size_t)ci);
    if (t->n_dims > 2 || ct->n_dims > 2 || ct->ne[0] != 1 || ct->ne[1] != t->ne[1])
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: entry %s: in_sum2 of ne [%lld, %lld] and counts of ne [%lld, "
                            "%lld] (expected [K, n_mat] and [1, n_mat])",
                            file, safe(e->name, b, sizeof b), (long long)t->ne[0],
                            (long long)t->ne[1], (long long)ct->ne[0], (long long)ct->ne[1]);
    const int64_t K = t->ne[0], n_mat = t->ne[1];
    e->n_vals = K * n_mat;
    e->n_mat = n_mat;
    free(*counts_io);
    float *counts = *counts_io = malloc((size_t)n_mat * sizeof(float));
    e->weights = malloc((size_t)e->n_vals * sizeof(float));
    if (!counts || !e->weights)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", file);
    pn_status st;
    if ((st = read_f32(r, i, file, e->weights, (uint64_t)e->n_vals, err)) ||
        (st = read_f32(r, (size_t)ci, file, counts, (uint64_t)n_mat, err)))
        return st;
    for (int64_t m = 0; m < n_mat; m++) {
        if (counts[m] > 9007199254740992.0f)
            return pn_error_set(err, PN_ERR_FORMAT, "%s: entry %s, matrix %lld: a count of %g",
                                file, safe(e->name, b, sizeof b), (long long)m, (double)counts[m]);
        const int64_t cnt = (int64_t)lroundf(counts[m]);
        if (m == 0)
            e->count = cnt;
        float *w = e->weights + m * K;
        for (int64_t j = 0; j < K; j++)
            w[j] = cnt > 0 ? w[j] / (float)cnt : 1.0f;
    }
    return PN_OK;
}

static pn_status parse_gguf(const uint8_t *p, size_t len, const char *file, pn_imatrix *im,
                            pn_error *err)
{
    gguf_reader *r = NULL;
    pn_status st = gguf_reader_open_memory(p, len, file, &r, err);
    if (st)
        return st;
    char b[256];
    float *counts = NULL;
    const gguf_kv *kv = gguf_reader_find_kv(r, "general.type");
    if (!kv || kv->type != GGUF_TYPE_STRING || !gguf_str_eq(kv->v.str, "imatrix")) {
        st = pn_error_set(err, PN_ERR_FORMAT,
                          "%s: a GGUF file that is not an imatrix (general.type is %s, expected "
                          "\"imatrix\")",
                          file,
                          !kv                            ? "missing"
                          : kv->type != GGUF_TYPE_STRING ? "not a string"
                                                         : "another string");
        goto done;
    }
    const gguf_kv *ds = need_kv(r, file, "imatrix.datasets", GGUF_TYPE_ARRAY, err);
    const gguf_kv *cc = ds ? need_kv(r, file, "imatrix.chunk_count", GGUF_TYPE_UINT32, err) : NULL;
    const gguf_kv *cs = cc ? need_kv(r, file, "imatrix.chunk_size", GGUF_TYPE_UINT32, err) : NULL;
    if (!cs) {
        st = PN_ERR_FORMAT;
        goto done;
    }
    if (ds->arr_type != GGUF_TYPE_STRING) {
        st = pn_error_set(err, PN_ERR_FORMAT,
                          "%s: key imatrix.datasets is an array of %s "
                          "(expected strings)",
                          file, gguf_value_type_name(ds->arr_type));
        goto done;
    }
    im->form = PN_IMATRIX_GGUF;
    im->chunk_count = (int64_t)cc->v.u64;
    im->chunk_size = (int64_t)cs->v.u64;
    im->n_datasets = (size_t)ds->arr_count;
    {
        gguf_str d0 = { 0, "" };
        if (ds->arr_count > 0)
            d0 = gguf_kv_arr_str(ds, 0);
        if (!(im->dataset = malloc((size_t)d0.len + 1))) {
            st = pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", file);
            goto done;
        }
        memcpy(im->dataset, d0.data, (size_t)d0.len);
        im->dataset[d0.len] = 0;
    }
    const size_t nt = gguf_reader_n_tensors(r);
    if (nt == 0) {
        st = pn_error_set(err, PN_ERR_FORMAT, "%s: an imatrix without entries", file);
        goto done;
    }
    /* Every tensor is W.in_sum2 or W.counts, and each in_sum2 has its counts:
     * with the names sorted (gguf_reader_find_tensor), a pass over in_sum2
     * tensors looks up each one's counts; a counts tensor without its
     * in_sum2 is found by counting. */
    size_t n_sums = 0, n_counts = 0;
    for (size_t i = 0; i < nt; i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        size_t n = strlen(t->name), stem;
        if (ends_with(t->name, n, ".in_sum2", &stem))
            n_sums++;
        else if (ends_with(t->name, n, ".counts", &stem))
            n_counts++;
        else {
            st = pn_error_set(err, PN_ERR_FORMAT, "%s: tensor %s is neither W.in_sum2 nor W.counts",
                              file, safe(t->name, b, sizeof b));
            goto done;
        }
        if (t->type != GGML_TYPE_F32_ID) {
            st = pn_error_set(err, PN_ERR_FORMAT, "%s: tensor %s is not F32", file,
                              safe(t->name, b, sizeof b));
            goto done;
        }
    }
    if (!(im->entries = calloc(n_sums ? n_sums : 1, sizeof *im->entries))) {
        st = pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", file);
        goto done;
    }
    for (size_t i = 0; i < nt; i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        size_t n = strlen(t->name), stem;
        if (ends_with(t->name, n, ".in_sum2", &stem) &&
            (st = read_entry(r, i, stem, file, im, &counts, err)) != PN_OK)
            goto done;
    }
    if (n_counts != n_sums) {
        /* a counts tensor whose in_sum2 is missing: name it */
        for (size_t i = 0; i < nt; i++) {
            const gguf_tensor_info *t = gguf_reader_tensor(r, i);
            size_t n = strlen(t->name), stem;
            if (!ends_with(t->name, n, ".counts", &stem))
                continue;
            char sname[PN_IMATRIX_NAME_MAX + 16];
            if (stem > PN_IMATRIX_NAME_MAX)
                stem = PN_IMATRIX_NAME_MAX;
            snprintf(sname, sizeof sname, "%.*s.in_sum2", (int)stem, t->name);
            if (gguf_reader_find_tensor(r, sname) < 0) {
                snprintf(sname, sizeof sname, "%.*s", (int)stem, t->name);
                st = pn_error_set(err, PN_ERR_FORMAT, "%s: entry %s has counts but no in_sum2",
                                  file, safe(sname, b, sizeof b));
                goto done;
            }
        }
    }
    st = sort_entries(im, file, err);
done:
    free(counts);
    gguf_reader_close(r);
    return st;
}

pn_status pn_imatrix_parse(const void *data, size_t len, const char *name, pn_imatrix **out,
                           pn_error *err)
{
    *out = NULL;
    pn_imatrix *im = calloc(1, sizeof *im);
    if (!im)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", name);
    const uint8_t *p = data;
    pn_status st = len >= 4 && memcmp(p, "GGUF", 4) == 0 ? parse_gguf(p, len, name, im, err)
                                                         : parse_dat(p, len, name, im, err);
    if (st == PN_OK && !im->dataset && !(im->dataset = calloc(1, 1)))
        st = pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", name);
    if (st) {
        pn_imatrix_free(im);
        return st;
    }
    *out = im;
    return PN_OK;
}

pn_status pn_imatrix_load(const char *path, pn_imatrix **out, pn_error *err)
{
    *out = NULL;
    char *data = NULL;
    size_t len = 0;
    pn_status st = pn_read_small_file(path, PN_IMATRIX_MAX_FILE_BYTES, "imatrix", &data, &len, err);
    if (st)
        return st;
    st = pn_imatrix_parse(data, len, path, out, err);
    free(data);
    return st;
}

const pn_imatrix_entry *pn_imatrix_find(const pn_imatrix *im, const char *name)
{
    size_t lo = 0, hi = im->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(im->entries[mid].name, name);
        if (c == 0)
            return &im->entries[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const float *pn_imatrix_weights_for(const pn_imatrix *im, const char *name)
{
    const pn_imatrix_entry *e = im ? pn_imatrix_find(im, name) : NULL;
    return e ? e->weights : NULL;
}

/* The plan's names in an index (NULL when out of memory). */
static pn_name_index *plan_index(const pn_plan *plan)
{
    pn_name_index *x = pn_name_index_new(plan->n_tensors);
    for (size_t i = 0; x && i < plan->n_tensors; i++)
        if (!pn_name_index_put(x, plan->tensors[i].name, i, NULL)) {
            pn_name_index_free(x);
            return NULL;
        }
    return x;
}

pn_status pn_imatrix_check_model(const pn_imatrix *im, const char *path, const pn_plan *plan,
                                 size_t *n_unknown, char **unknown, pn_error *err)
{
    *n_unknown = 0;
    if (unknown)
        *unknown = NULL;
    size_t matched = 0, cap = 0, used = 0;
    char *list = NULL;
    char b[256];
    pn_name_index *x = plan_index(plan);
    if (!x)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < im->n; i++) {
        const pn_imatrix_entry *e = &im->entries[i];
        long ti = pn_name_index_get(x, e->name);
        if (ti < 0) {
            (*n_unknown)++;
            if (unknown) {
                safe(e->name, b, sizeof b);
                size_t k = strlen(b);
                if (used + k + 2 > cap) {
                    size_t nc = (used + k + 2) * 2;
                    char *nl = realloc(list, nc);
                    if (!nl) {
                        free(list);
                        pn_name_index_free(x);
                        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", path);
                    }
                    list = nl;
                    cap = nc;
                }
                memcpy(list + used, b, k);
                list[used + k] = '\n';
                list[used + k + 1] = 0;
                used += k + 1;
            }
            continue;
        }
        const pn_plan_tensor *t = &plan->tensors[ti];
        const int64_t n_exp = t->n_dims >= 3 ? t->ne[2] : 1;
        const bool dat = im->form == PN_IMATRIX_DAT;
        bool fits = dat ? e->n_vals == t->ne[0] * n_exp
                        : e->n_mat == n_exp && e->n_vals == t->ne[0] * n_exp;
        if (t->n_dims > 3 && t->ne[3] != 1)
            fits = false;
        if (!fits) {
            free(list);
            pn_name_index_free(x);
            if (!dat && e->n_mat != n_exp)
                return pn_error_set(err, PN_ERR_MISMATCH,
                                    "%s: entry %s has %lld matrices, but the tensor has %lld (an "
                                    "imatrix of another model?)",
                                    path, safe(e->name, b, sizeof b), (long long)e->n_mat,
                                    (long long)n_exp);
            return pn_error_set(err, PN_ERR_MISMATCH,
                                "%s: entry %s has %lld columns per matrix, but the tensor's K is "
                                "%lld (an imatrix of another model?)",
                                path, safe(e->name, b, sizeof b),
                                (long long)(e->n_vals / (dat ? n_exp : e->n_mat)),
                                (long long)t->ne[0]);
        }
        matched++;
    }
    pn_name_index_free(x);
    if (matched == 0) {
        free(list);
        return pn_error_set(err, PN_ERR_MISMATCH,
                            "%s: none of its %zu entries names a tensor of this model (an imatrix "
                            "made for another model)",
                            path, im->n);
    }
    if (unknown)
        *unknown = list;
    else
        free(list);
    return PN_OK;
}

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    return pn_fnv1a64(h, data, n); /* common/hash.h */
}

static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    return fnv(h, b, 8);
}

/* The hash over the entries x (an index of tensor names) holds. */
static uint64_t hash_indexed(const pn_imatrix *im, const pn_name_index *x, size_t *n_used)
{
    uint64_t h = 0xcbf29ce484222325ull;
    size_t n = 0;
    for (size_t i = 0; i < im->n; i++) {
        const pn_imatrix_entry *e = &im->entries[i];
        if (pn_name_index_get(x, e->name) < 0)
            continue;
        n++;
        h = fnv(h, e->name, strlen(e->name) + 1);
        h = fnv_u64(h, (uint64_t)e->n_vals);
        for (int64_t j = 0; j < e->n_vals; j++) {
            uint32_t u;
            memcpy(&u, &e->weights[j], 4);
            uint8_t bb[4] = { (uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16),
                              (uint8_t)(u >> 24) };
            h = fnv(h, bb, 4);
        }
    }
    if (n_used)
        *n_used = n;
    return h;
}

/* hash_indexed over the names of x, then x freed; 0 and no entry used when
 * x is NULL (out of memory). */
static uint64_t hash_and_free(const pn_imatrix *im, pn_name_index *x, size_t *n_used)
{
    if (!x) {
        if (n_used)
            *n_used = 0;
        return 0;
    }
    uint64_t h = hash_indexed(im, x, n_used);
    pn_name_index_free(x);
    return h;
}

uint64_t pn_imatrix_hash_names(const pn_imatrix *im, const char *const *names, size_t n_names,
                               size_t *n_used)
{
    pn_name_index *x = pn_name_index_new(n_names);
    for (size_t i = 0; x && i < n_names; i++)
        (void)pn_name_index_put(x, names[i], i, NULL); /* a repeated name is one name */
    return hash_and_free(im, x, n_used);
}

uint64_t pn_imatrix_hash_used(const pn_imatrix *im, const pn_plan *plan, size_t *n_used)
{
    return hash_and_free(im, plan_index(plan), n_used);
}

const char *pn_imatrix_base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}
