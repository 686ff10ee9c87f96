/* header_hash.c - the header hash (header_hash.h): the record a writer puts
 * after its keys, and the check that accounts for every key of a file with
 * it. The rule, for a third party to recompute: docs/format.md#the-header-hash.
 */
#include "gguf/header_hash.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "gguf/gguf_split.h"
#include "gguf/gguf_writer_internal.h"
#include "gguf/model_check.h"
#include "gguf/pn_keys.h"

static bool has_prefix(const char *s, size_t len, const char *prefix, size_t plen)
{
    return len >= plen && memcmp(s, prefix, plen) == 0;
}

static bool excluded(const char *key, size_t len)
{
    gguf_str k = { len, key };
    return has_prefix(key, len, PN_KEY_HEADER_PREFIX, PN_KEY_HEADER_PREFIX_LEN) ||
           gguf_str_eq(k, GGUF_SPLIT_KEY_NO) || gguf_str_eq(k, GGUF_SPLIT_KEY_COUNT) ||
           gguf_str_eq(k, GGUF_SPLIT_KEY_TENSORS_COUNT);
}

bool gguf_header_hash_is_record_key(gguf_str key)
{
    return has_prefix(key.data, (size_t)key.len, PN_KEY_HEADER_PREFIX, PN_KEY_HEADER_PREFIX_LEN);
}

bool gguf_header_hash_excludes(gguf_str key)
{
    return excluded(key.data, (size_t)key.len);
}

static uint64_t load_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void store_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* ------------------------------------------------------------------ */
/* The writer's record                                                 */

static const char *const record_names[GGUF_HEADER_HASH_KEYS] = {
    [GGUF_HH_KEYS] = PN_KEY_HEADER_KEYS,
    [GGUF_HH_VALUES] = PN_KEY_HEADER_VALUES,
    [GGUF_HH_TENSORS] = PN_KEY_HEADER_TENSORS,
    [GGUF_HH_WHOLE] = PN_KEY_HEADER_HASH,
};

/* FNV-1a 64 of one tensor info as stored but its offset, continued from h. */
static uint64_t tensor_info_hash(uint64_t h, const char *name, uint32_t n_dims, const int64_t *ne,
                                 int type)
{
    size_t nl = strlen(name);
    h = pn_fnv1a64_le(h, nl, 8);
    h = pn_fnv1a64(h, name, nl);
    h = pn_fnv1a64_le(h, n_dims, 4);
    for (uint32_t d = 0; d < n_dims; d++)
        h = pn_fnv1a64_le(h, (uint64_t)ne[d], 8);
    return pn_fnv1a64_le(h, (uint32_t)type, 4);
}

static bool writer_hashes(const writer_kv *kv)
{
    return kv->key && !excluded(kv->key, strlen(kv->key));
}

/* The hashed keys of w and the bytes of their names as an array of strings. */
static void count_hashed(const gguf_writer *w, uint64_t *n, uint64_t *name_bytes)
{
    *n = 0;
    *name_bytes = 0;
    for (size_t i = 0; i < w->n_kv_slots; i++)
        if (writer_hashes(&w->kvs[i])) {
            (*n)++;
            *name_bytes += 8 + strlen(w->kvs[i].key);
        }
}

uint64_t gguf_writer_header_hash_bytes_(const gguf_writer *w)
{
    if (!w->header_hash)
        return 0;
    uint64_t n, name_bytes;
    count_hashed(w, &n, &name_bytes);
    uint64_t total = 0;
    for (int k = 0; k < GGUF_HEADER_HASH_KEYS; k++)
        total += 8 + strlen(record_names[k]) + 4;
    return total + (12 + name_bytes) + (12 + 8 * n) + 8 + 8;
}

void gguf_writer_header_hash_update_(gguf_writer *w)
{
    uint8_t *values = w->hh[GGUF_HH_VALUES].val + 12;
    uint64_t whole = PN_FNV1A64_BASIS;
    for (size_t i = 0; i < w->n_kv_slots; i++) {
        const writer_kv *kv = &w->kvs[i];
        if (!writer_hashes(kv))
            continue;
        uint8_t len8[8], type4[4];
        size_t klen = strlen(kv->key);
        store_u64(len8, klen);
        for (int b = 0; b < 4; b++)
            type4[b] = (uint8_t)((uint32_t)kv->type >> (8 * b));
        uint64_t v = pn_fnv1a64(PN_FNV1A64_BASIS, type4, 4);
        v = pn_fnv1a64(v, kv->val, (size_t)kv->val_len);
        store_u64(values, v);
        values += 8;
        whole = pn_fnv1a64(whole, len8, 8);
        whole = pn_fnv1a64(whole, kv->key, klen);
        whole = pn_fnv1a64(whole, type4, 4);
        whole = pn_fnv1a64(whole, kv->val, (size_t)kv->val_len);
    }
    store_u64(w->hh[GGUF_HH_WHOLE].val, whole);
}

void gguf_writer_header_hash_clear_(gguf_writer *w)
{
    for (int k = 0; k < GGUF_HEADER_HASH_KEYS; k++) {
        free(w->hh[k].key);
        free(w->hh[k].val);
        memset(&w->hh[k], 0, sizeof w->hh[k]);
    }
}

pn_status gguf_writer_header_hash_build_(gguf_writer *w, pn_error *err)
{
    gguf_writer_header_hash_clear_(w);
    for (size_t i = 0; i < w->n_kv_slots; i++)
        if (w->kvs[i].key && has_prefix(w->kvs[i].key, strlen(w->kvs[i].key), PN_KEY_HEADER_PREFIX,
                                        PN_KEY_HEADER_PREFIX_LEN))
            return pn_error_set(err, PN_ERR_USAGE,
                                "gguf writer: key '%s' is the header hash's own (a copy of "
                                "another file's record?): the writer records it itself",
                                w->kvs[i].key);
    uint64_t n, name_bytes;
    count_hashed(w, &n, &name_bytes);
    const uint64_t lens[GGUF_HEADER_HASH_KEYS] = { 12 + name_bytes, 12 + 8 * n, 8, 8 };
    const gguf_value_type types[GGUF_HEADER_HASH_KEYS] = { GGUF_TYPE_ARRAY, GGUF_TYPE_ARRAY,
                                                           GGUF_TYPE_UINT64, GGUF_TYPE_UINT64 };
    for (int k = 0; k < GGUF_HEADER_HASH_KEYS; k++) {
        w->hh[k].key = strdup(record_names[k]);
        w->hh[k].val = calloc(1, (size_t)lens[k]);
        w->hh[k].val_len = lens[k];
        w->hh[k].type = types[k];
        if (!w->hh[k].key || !w->hh[k].val) {
            gguf_writer_header_hash_clear_(w);
            return pn_error_set(err, PN_ERR_NOMEM,
                                "gguf writer: out of memory for the header hash");
        }
    }
    uint8_t *p = w->hh[GGUF_HH_KEYS].val;
    p[0] = GGUF_TYPE_STRING;
    store_u64(p + 4, n);
    p += 12;
    for (size_t i = 0; i < w->n_kv_slots; i++) {
        if (!writer_hashes(&w->kvs[i]))
            continue;
        size_t klen = strlen(w->kvs[i].key);
        store_u64(p, klen);
        memcpy(p + 8, w->kvs[i].key, klen);
        p += 8 + klen;
    }
    w->hh[GGUF_HH_VALUES].val[0] = GGUF_TYPE_UINT64;
    store_u64(w->hh[GGUF_HH_VALUES].val + 4, n);
    uint64_t th = PN_FNV1A64_BASIS;
    for (size_t i = 0; i < w->n_tensors; i++) {
        const writer_tensor *t = &w->tensors[i];
        th = tensor_info_hash(th, t->name, t->n_dims, t->ne, t->type);
    }
    store_u64(w->hh[GGUF_HH_TENSORS].val, th);
    gguf_writer_header_hash_update_(w);
    return PN_OK;
}

bool gguf_writer_hashes_key_(const gguf_writer *w, const char *key)
{
    return w->header_hash && !excluded(key, strlen(key));
}

/* ------------------------------------------------------------------ */
/* The check                                                           */

/* The bytes of kv as stored from its value type on (the u32 type, then the
 * value): the reader has checked they lie in its buffer. */
static void stored_value(const gguf_kv *kv, const uint8_t **p, uint64_t *n)
{
    *p = (const uint8_t *)kv->key.data + kv->key.len;
    uint64_t v;
    if (kv->type == GGUF_TYPE_STRING)
        v = 8 + kv->v.str.len;
    else if (kv->type == GGUF_TYPE_ARRAY)
        v = 12 + kv->arr_bytes;
    else
        v = gguf_value_type_size(kv->type);
    *n = 4 + v;
}

static void printable(char *dst, size_t cap, const char *s, uint64_t len)
{
    size_t n = len < cap - 1 ? (size_t)len : cap - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        dst[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    dst[n] = 0;
}

/* A walk over the record's array of names, one string after another. */
typedef struct name_walk {
    const uint8_t *p;
} name_walk;

static gguf_str walk_next(name_walk *nw)
{
    gguf_str s = { load_u64(nw->p), (const char *)nw->p + 8 };
    nw->p += 8 + s.len;
    return s;
}

static bool str_same(gguf_str a, gguf_str b)
{
    return a.len == b.len && memcmp(a.data, b.data, (size_t)a.len) == 0;
}

static bool file_hashes(const gguf_reader *r, gguf_str name)
{
    for (size_t i = 0; i < gguf_reader_n_kv(r); i++) {
        gguf_str k = gguf_reader_kv(r, i)->key;
        if (!gguf_header_hash_excludes(k) && str_same(k, name))
            return true;
    }
    return false;
}

static bool record_names_key(const gguf_kv *names, gguf_str name)
{
    name_walk nw = { names->arr_data };
    for (uint64_t j = 0; j < names->arr_count; j++)
        if (str_same(walk_next(&nw), name))
            return true;
    return false;
}

static void mismatch(gguf_header_verdict *v, const char *kind, gguf_str key, int64_t index,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void mismatch(gguf_header_verdict *v, const char *kind, gguf_str key, int64_t index,
                     const char *fmt, ...)
{
    v->proof = GGUF_HEADER_MISMATCH;
    v->kind = kind;
    printable(v->key, sizeof v->key, key.data, key.len);
    v->index = index;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->message, sizeof v->message, fmt, ap);
    va_end(ap);
}

static gguf_str cstr(const char *s)
{
    return (gguf_str){ strlen(s), s };
}

/* The record's four keys present with their types and counts; else the
 * verdict says which is not. */
static bool record_usable(const gguf_reader *r, const gguf_kv *rec[GGUF_HEADER_HASH_KEYS],
                          gguf_header_verdict *v)
{
    static const gguf_value_type want[GGUF_HEADER_HASH_KEYS][2] = {
        [GGUF_HH_KEYS] = { GGUF_TYPE_ARRAY, GGUF_TYPE_STRING },
        [GGUF_HH_VALUES] = { GGUF_TYPE_ARRAY, GGUF_TYPE_UINT64 },
        [GGUF_HH_TENSORS] = { GGUF_TYPE_UINT64, GGUF_TYPE_COUNT_ },
        [GGUF_HH_WHOLE] = { GGUF_TYPE_UINT64, GGUF_TYPE_COUNT_ },
    };
    for (int k = 0; k < GGUF_HEADER_HASH_KEYS; k++) {
        rec[k] = gguf_reader_find_kv(r, record_names[k]);
        if (!rec[k]) {
            mismatch(v, "record", cstr(record_names[k]), -1,
                     "the header hash record is incomplete: key %s is absent (removed?)",
                     record_names[k]);
            return false;
        }
        bool ok = rec[k]->type == want[k][0] &&
                  (want[k][0] != GGUF_TYPE_ARRAY || rec[k]->arr_type == want[k][1]);
        if (!ok) {
            mismatch(v, "record", cstr(record_names[k]), -1,
                     "key %s of the header hash has type %s, expected %s%s", record_names[k],
                     gguf_value_type_name(rec[k]->type),
                     want[k][0] == GGUF_TYPE_ARRAY ? "an array of " : "",
                     gguf_value_type_name(want[k][0] == GGUF_TYPE_ARRAY ? want[k][1] : want[k][0]));
            return false;
        }
    }
    if (rec[GGUF_HH_KEYS]->arr_count != rec[GGUF_HH_VALUES]->arr_count) {
        mismatch(v, "record", cstr(PN_KEY_HEADER_VALUES), -1,
                 "key %s has %llu elements and %s %llu: one per hashed key in both",
                 PN_KEY_HEADER_KEYS, (unsigned long long)rec[GGUF_HH_KEYS]->arr_count,
                 PN_KEY_HEADER_VALUES, (unsigned long long)rec[GGUF_HH_VALUES]->arr_count);
        return false;
    }
    return true;
}

#define SHOW(s) (int)((s).len > 160 ? 160 : (s).len), (s).data

/* Why kv, the file's hashed key at record place j, is not the record's j-th
 * key `recorded` (value_same: its value hashes as recorded). */
static void explain(gguf_header_verdict *v, const gguf_reader *r, const gguf_kv *names,
                    const gguf_kv *kv, uint64_t j, gguf_str recorded, bool value_same)
{
    const long long jj = (long long)j;
    if (str_same(recorded, kv->key)) {
        mismatch(v, "changed", kv->key, (int64_t)j,
                 "key %.*s: its value is not the one the header hash records (%s[%lld]): "
                 "changed after the file was written",
                 SHOW(kv->key), PN_KEY_HEADER_VALUES, jj);
        return;
    }
    bool recorded_in_file = file_hashes(r, recorded);
    bool key_recorded = record_names_key(names, kv->key);
    if (!recorded_in_file && !key_recorded)
        mismatch(v, "renamed", kv->key, (int64_t)j,
                 "key %.*s is not in the header hash's record, which has %.*s in its place "
                 "(%s[%lld]), absent from the file: %.*s renamed to %.*s%s",
                 SHOW(kv->key), SHOW(recorded), PN_KEY_HEADER_KEYS, jj, SHOW(recorded),
                 SHOW(kv->key), value_same ? "" : ", and its value changed");
    else if (!recorded_in_file)
        mismatch(v, "removed", recorded, (int64_t)j,
                 "key %.*s, %s[%lld], is not in the file (%.*s stands in its place): removed",
                 SHOW(recorded), PN_KEY_HEADER_KEYS, jj, SHOW(kv->key));
    else if (!key_recorded)
        mismatch(v, "added", kv->key, (int64_t)j,
                 "key %.*s is not in the header hash's record (it stands where the record has "
                 "%.*s): added after the file was written",
                 SHOW(kv->key), SHOW(recorded));
    else
        mismatch(v, "moved", kv->key, (int64_t)j,
                 "key %.*s is out of the recorded order: the header hash's record has %.*s in "
                 "its place (%s[%lld])",
                 SHOW(kv->key), SHOW(recorded), PN_KEY_HEADER_KEYS, jj);
}

static void gguf_header_verdict_init_(gguf_header_verdict *v)
{
    memset(v, 0, sizeof *v);
    v->index = -1;
    v->proof = GGUF_HEADER_UNPROVEN;
}

void gguf_header_hash_verify(const gguf_reader *r, gguf_header_verdict *v)
{
    gguf_header_verdict_init_(v);
    bool any = false;
    for (int k = 0; k < GGUF_HEADER_HASH_KEYS; k++)
        any = any || gguf_reader_find_kv(r, record_names[k]);
    if (!any) {
        snprintf(v->message, sizeof v->message,
                 "no header hash (%s): a file of another tool or an older build; its keys are "
                 "checked against its tensors alone",
                 PN_KEY_HEADER_HASH);
        return;
    }
    const gguf_kv *rec[GGUF_HEADER_HASH_KEYS];
    if (!record_usable(r, rec, v))
        return;
    uint64_t th = PN_FNV1A64_BASIS;
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        th = tensor_info_hash(th, t->name, t->n_dims, t->ne, t->type);
    }
    if (th != rec[GGUF_HH_TENSORS]->v.u64) {
        /* not this file's record: the keys were copied into a file of
         * other tensors (llama-quantize, gguf-split --merge of our set), or
         * the tensor infos were changed; either way nothing is proven, and
         * the model check judges the header against the tensors */
        snprintf(v->message, sizeof v->message,
                 "the header hash (%s) was written for other tensors than this file's (%s "
                 "differs: a tool copied the keys into a file of its own, as llama-quantize "
                 "does); its keys are checked against its tensors alone",
                 PN_KEY_HEADER_HASH, PN_KEY_HEADER_TENSORS);
        return;
    }
    const uint64_t m = rec[GGUF_HH_KEYS]->arr_count;
    name_walk nw = { rec[GGUF_HH_KEYS]->arr_data };
    uint64_t j = 0, whole = PN_FNV1A64_BASIS;
    for (size_t i = 0; i < gguf_reader_n_kv(r); i++) {
        const gguf_kv *kv = gguf_reader_kv(r, i);
        if (gguf_header_hash_excludes(kv->key))
            continue;
        const uint8_t *val;
        uint64_t n;
        stored_value(kv, &val, &n);
        uint64_t h = pn_fnv1a64(PN_FNV1A64_BASIS, val, (size_t)n);
        whole = pn_fnv1a64(whole, kv->key.data - 8, (size_t)(8 + kv->key.len + n));
        if (j == m) {
            mismatch(v, "added", kv->key, -1,
                     "key %.*s is not in the header hash's record of %llu keys: added after the "
                     "file was written",
                     SHOW(kv->key), (unsigned long long)m);
            return;
        }
        gguf_str want = walk_next(&nw);
        uint64_t want_h = gguf_kv_arr_u64(rec[GGUF_HH_VALUES], j);
        if (str_same(want, kv->key) && want_h == h) {
            j++;
            continue;
        }
        explain(v, r, rec[GGUF_HH_KEYS], kv, j, want, want_h == h);
        return;
    }
    if (j < m) {
        gguf_str want = walk_next(&nw);
        mismatch(v, "removed", want, (int64_t)j, "key %.*s, %s[%llu], is not in the file: removed",
                 SHOW(want), PN_KEY_HEADER_KEYS, (unsigned long long)j);
        return;
    }
    if (whole != rec[GGUF_HH_WHOLE]->v.u64) {
        mismatch(v, "record", cstr(PN_KEY_HEADER_HASH), -1,
                 "every key is the one recorded, but %s is 0x%016llx where the keys hash to "
                 "0x%016llx: the record itself was altered",
                 PN_KEY_HEADER_HASH, (unsigned long long)rec[GGUF_HH_WHOLE]->v.u64,
                 (unsigned long long)whole);
        return;
    }
    v->proof = GGUF_HEADER_PROVEN;
    snprintf(v->message, sizeof v->message, "%llu keys, %s = 0x%016llx", (unsigned long long)m,
             PN_KEY_HEADER_HASH, (unsigned long long)whole);
}

pn_status gguf_header_hash_check(const gguf_reader *r, gguf_model_problem_fn fn, void *ctx,
                                 gguf_header_proof *proof)
{
    const size_t n = gguf_reader_n_splits(r);
    bool first_proven = false, all_proven = true, any_mismatch = false;
    gguf_header_verdict v;
    for (size_t s = 0; s < n; s++) {
        const gguf_reader *f = gguf_reader_split(r, s);
        gguf_header_hash_verify(f, &v);
        if (s == 0)
            first_proven = v.proof == GGUF_HEADER_PROVEN;
        else if (v.proof == GGUF_HEADER_UNPROVEN && first_proven &&
                 !gguf_reader_find_kv(f, PN_KEY_HEADER_HASH))
            /* our sets record every split's keys; gguf-split's later
             * splits have none, but then the first's record is not its
             * own (other tensors) and the first is not proven */
            mismatch(&v, "record", cstr(PN_KEY_HEADER_HASH), -1,
                     "no header hash (%s), where the set's first split has its own: removed",
                     PN_KEY_HEADER_HASH);
        all_proven = all_proven && v.proof == GGUF_HEADER_PROVEN;
        if (v.proof != GGUF_HEADER_MISMATCH)
            continue;
        any_mismatch = true;
        const char *msg = v.message;
        gguf_model_problem p = { .file = n > 1 ? gguf_reader_name(f) : NULL,
                                 .warning = false,
                                 .code = "PN-HEADER-HASH-MISMATCH",
                                 .key = v.key,
                                 .tensor = NULL,
                                 .index = v.index,
                                 .count = -1,
                                 .message = msg };
        fn(ctx, &p);
    }
    if (proof)
        *proof = any_mismatch ? GGUF_HEADER_MISMATCH
                 : all_proven ? GGUF_HEADER_PROVEN
                              : GGUF_HEADER_UNPROVEN;
    return PN_OK;
}
