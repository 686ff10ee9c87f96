/* gguf_writer.c - writes a GGUF v3 file through an atomic output file.
 *
 * Life of a writer:
 *   COLLECTING  keys and tensor infos are gathered in memory (values are kept
 *               already serialized, exactly as they go to disk), indexed by
 *               name in hash tables so that each set, copy or add costs O(1)
 *               whatever the number of keys and tensors;
 *   OPEN        gguf_writer_begin opened the output (common/outfile.h: an
 *               unnamed temporary file in the target's folder where the
 *               filesystem allows), wrote the header and the padding;
 *               gguf_writer_write streams the tensors' bytes in order and
 *               inserts the zero padding between them;
 *   CLOSED      every tensor got its bytes, the file is flushed and fsynced,
 *               its descriptor still open for the caller to re-read it;
 *   COMMITTED   linked or renamed onto the target;
 *   ABORTED     the temporary file is gone.
 * Any failure after begin aborts, so a failed writer never leaves a file.
 *
 * The writers of a split set are derived from a model writer in
 * gguf_writer_split.c (the structures both use: gguf_writer_internal.h).
 *
 * This file gathers the keys and tensor infos; the output (offsets, the
 * header, begin, write, patch, close) is gguf_writer_file.c's. Output goes
 * through one 4 MiB buffer, so many small writes cost one system call per
 * 4 MiB and memory stays flat however large the model is.
 */
#include "common/byte_order.h"
#include "common/hash.h"
#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "gguf/gguf_split.h"
#include "gguf/gguf_writer_internal.h"

#include "quant/types.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gguf_writer *gguf_writer_new(void)
{
    gguf_writer *w = calloc(1, sizeof *w);
    if (w)
        w->seed = pn_hash_seed(w); /* of no effect on the output */
    return w;
}

/* ------------------------------------------------------------------ */
/* Name index                                                          */


typedef const char *(*item_name_fn)(const gguf_writer *w, size_t item);

static const char *kv_name(const gguf_writer *w, size_t i)
{
    return w->kvs[i].key;
}
static const char *tensor_name(const gguf_writer *w, size_t i)
{
    return w->tensors[i].name;
}

/* The slot holding `name`, or the empty slot where it would go. */
static size_t index_probe(const gguf_writer *w, const name_index *x, item_name_fn name_of,
                          const char *name, uint64_t h)
{
    size_t mask = x->cap - 1;
    for (size_t s = (size_t)h & mask;; s = (s + 1) & mask) {
        const index_slot *sl = &x->slots[s];
        if (!sl->item || (sl->hash == h && strcmp(name_of(w, sl->item - 1), name) == 0))
            return s;
    }
}

/* Item index of `name`, or -1. */
static long index_find(const gguf_writer *w, const name_index *x, item_name_fn name_of,
                       const char *name)
{
    if (!x->cap)
        return -1;
    uint64_t h = pn_hash_seeded(name, strlen(name), w->seed);
    size_t s = index_probe(w, x, name_of, name, h);
    return x->slots[s].item ? (long)(x->slots[s].item - 1) : -1;
}

static bool index_grow(name_index *x)
{
    size_t nc = x->cap ? x->cap * 2 : 64;
    index_slot *ns = calloc(nc, sizeof *ns);
    if (!ns)
        return false;
    for (size_t i = 0; i < x->cap; i++) {
        if (!x->slots[i].item)
            continue;
        size_t s = (size_t)x->slots[i].hash & (nc - 1);
        while (ns[s].item)
            s = (s + 1) & (nc - 1);
        ns[s] = x->slots[i];
    }
    free(x->slots);
    x->slots = ns;
    x->cap = nc;
    return true;
}

/* Adds `name` (not present) as item `item`; false when out of memory. */
static bool index_add(const gguf_writer *w, name_index *x, item_name_fn name_of, const char *name,
                      size_t item)
{
    if ((x->used + 1) * 2 > x->cap && !index_grow(x))
        return false;
    uint64_t h = pn_hash_seeded(name, strlen(name), w->seed);
    size_t s = index_probe(w, x, name_of, name, h);
    x->slots[s].hash = h;
    x->slots[s].item = item + 1;
    x->used++;
    return true;
}

/* Removes `name` (present), shifting back the entries after it so that
 * every probe sequence stays unbroken. */
static void index_remove(const gguf_writer *w, name_index *x, item_name_fn name_of,
                         const char *name)
{
    uint64_t h = pn_hash_seeded(name, strlen(name), w->seed);
    size_t mask = x->cap - 1;
    size_t i = index_probe(w, x, name_of, name, h);
    if (!x->slots[i].item)
        return;
    for (size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
        if (!x->slots[j].item)
            break;
        size_t home = (size_t)x->slots[j].hash & mask;
        /* The entry at j may fill the hole at i unless its home lies
         * cyclically in (i, j]. */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays)
            continue;
        x->slots[i] = x->slots[j];
        i = j;
    }
    x->slots[i].item = 0;
    x->used--;
}

/* ------------------------------------------------------------------ */
/* Keys                                                                */

writer_kv *gguf_writer_find_kv_(const gguf_writer *w, const char *key)
{
    long i = index_find(w, &w->kv_index, kv_name, key);
    return i < 0 ? NULL : &w->kvs[i];
}

/* Records why a set or copy was refused (gguf_writer_last_error). */
static pn_status refuse(gguf_writer *w, pn_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static pn_status refuse(gguf_writer *w, pn_status code, const char *fmt, ...)
{
    if (!w)
        return code;
    va_list ap;
    va_start(ap, fmt);
    char msg[PN_ERROR_MSG_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pn_error_set(&w->last_error, code, "gguf writer: %s", msg);
    return code;
}

/* A key the reader would refuse is refused here too: empty, or holding a
 * NUL byte. `index` is the position the key would take. */
static pn_status check_key(gguf_writer *w, const char *key, uint64_t len)
{
    if (len == 0)
        return refuse(w, PN_ERR_FORMAT, "key %zu is empty", w->n_kv);
    const char *nul = memchr(key, 0, len);
    if (nul)
        return refuse(w, PN_ERR_FORMAT,
                      "key %zu ('%s...') holds a NUL byte at byte %zu of its %llu", w->n_kv, key,
                      (size_t)(nul - key), (unsigned long long)len);
    return PN_OK;
}

/* Stores a serialized value under key, replacing an existing one in place.
 * Takes ownership of val (NULL means out of memory). */
pn_status gguf_writer_put_kv_(gguf_writer *w, const char *key, gguf_value_type type, uint8_t *val,
                              uint64_t len)
{
    if (!w || !key || w->state != W_COLLECTING) {
        free(val);
        return refuse(w, PN_ERR_USAGE, "a key is set %s", !key ? "without a name" : "after begin");
    }
    pn_status st = check_key(w, key, strlen(key));
    if (st) {
        free(val);
        return st;
    }
    if (!val)
        return refuse(w, PN_ERR_NOMEM, "out of memory for key '%s'", key);
    writer_kv *kv = gguf_writer_find_kv_(w, key);
    if (!kv) {
        if (w->n_kv_slots == w->cap_kv) {
            size_t nc = w->cap_kv ? w->cap_kv * 2 : 32;
            writer_kv *p = realloc(w->kvs, nc * sizeof *p);
            if (!p) {
                free(val);
                return refuse(w, PN_ERR_NOMEM, "out of memory for key '%s'", key);
            }
            w->kvs = p;
            w->cap_kv = nc;
        }
        char *k = strdup(key);
        if (!k) {
            free(val);
            return refuse(w, PN_ERR_NOMEM, "out of memory for key '%s'", key);
        }
        kv = &w->kvs[w->n_kv_slots];
        memset(kv, 0, sizeof *kv);
        kv->key = k;
        if (!index_add(w, &w->kv_index, kv_name, k, w->n_kv_slots)) {
            free(k);
            kv->key = NULL;
            free(val);
            return refuse(w, PN_ERR_NOMEM, "out of memory for key '%s'", key);
        }
        w->n_kv_slots++;
        w->n_kv++;
    }
    free(kv->val);
    kv->type = type;
    kv->val = val;
    kv->val_len = len;
    return PN_OK;
}

static pn_status put_scalar(gguf_writer *w, const char *key, gguf_value_type type, uint64_t bits)
{
    size_t n = gguf_value_type_size(type);
    uint8_t *val = malloc(n);
    if (val)
        pn_store_le(val, bits, n);
    return gguf_writer_put_kv_(w, key, type, val, n);
}

pn_status gguf_writer_set_u8(gguf_writer *w, const char *key, uint8_t v)
{
    return put_scalar(w, key, GGUF_TYPE_UINT8, v);
}
pn_status gguf_writer_set_i8(gguf_writer *w, const char *key, int8_t v)
{
    return put_scalar(w, key, GGUF_TYPE_INT8, (uint64_t)(int64_t)v);
}
pn_status gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v)
{
    return put_scalar(w, key, GGUF_TYPE_UINT16, v);
}
pn_status gguf_writer_set_i16(gguf_writer *w, const char *key, int16_t v)
{
    return put_scalar(w, key, GGUF_TYPE_INT16, (uint64_t)(int64_t)v);
}
pn_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v)
{
    return put_scalar(w, key, GGUF_TYPE_UINT32, v);
}
pn_status gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v)
{
    return put_scalar(w, key, GGUF_TYPE_INT32, (uint64_t)(int64_t)v);
}
pn_status gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v)
{
    return put_scalar(w, key, GGUF_TYPE_UINT64, v);
}
pn_status gguf_writer_set_i64(gguf_writer *w, const char *key, int64_t v)
{
    return put_scalar(w, key, GGUF_TYPE_INT64, (uint64_t)v);
}
pn_status gguf_writer_set_f32(gguf_writer *w, const char *key, float v)
{
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    return put_scalar(w, key, GGUF_TYPE_FLOAT32, b);
}
pn_status gguf_writer_set_f64(gguf_writer *w, const char *key, double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return put_scalar(w, key, GGUF_TYPE_FLOAT64, b);
}
pn_status gguf_writer_set_bool(gguf_writer *w, const char *key, bool v)
{
    return put_scalar(w, key, GGUF_TYPE_BOOL, v ? 1 : 0);
}

pn_status gguf_writer_set_str_n(gguf_writer *w, const char *key, const char *v, uint64_t len)
{
    if (!v && len)
        return refuse(w, PN_ERR_USAGE, "key '%s': a string of %llu bytes from NULL",
                      key ? key : "(null)", (unsigned long long)len);
    if (len > SIZE_MAX - 8)
        return refuse(w, PN_ERR_NOMEM, "key '%s': a string of %llu bytes", key ? key : "(null)",
                      (unsigned long long)len);
    uint8_t *val = malloc(8 + len);
    if (val) {
        pn_store_le(val, len, 8);
        if (len)
            memcpy(val + 8, v, len);
    }
    return gguf_writer_put_kv_(w, key, GGUF_TYPE_STRING, val, 8 + len);
}

pn_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *v)
{
    if (!v)
        return refuse(w, PN_ERR_USAGE, "key '%s': a NULL string", key ? key : "(null)");
    return gguf_writer_set_str_n(w, key, v, strlen(v));
}

/* An array value: element type, count, then `bytes` bytes of elements. */
pn_status gguf_writer_put_array_(gguf_writer *w, const char *key, gguf_value_type et,
                                 uint64_t count, const void *elems, uint64_t bytes)
{
    if (bytes > SIZE_MAX - 12)
        return refuse(w, PN_ERR_NOMEM, "key '%s': an array of %llu bytes", key,
                      (unsigned long long)bytes);
    uint8_t *val = malloc(12 + bytes);
    if (val) {
        pn_store_le(val, (uint64_t)et, 4);
        pn_store_le(val + 4, count, 8);
        if (bytes)
            memcpy(val + 12, elems, bytes);
    }
    return gguf_writer_put_kv_(w, key, GGUF_TYPE_ARRAY, val, 12 + bytes);
}

pn_status gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_value_type elem_type,
                              const void *data, uint64_t count)
{
    size_t es = gguf_value_type_size(elem_type);
    if (!key || es == 0 || (count && !data))
        return refuse(w, PN_ERR_USAGE, "key '%s': an array of %s needs elements of a fixed size",
                      key ? key : "(null)", gguf_value_type_name(elem_type));
    if (count > UINT64_MAX / es)
        return refuse(w, PN_ERR_NOMEM, "key '%s': an array of %llu elements", key,
                      (unsigned long long)count);
    return gguf_writer_put_array_(w, key, elem_type, count, data, count * es);
}

pn_status gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *v,
                                  uint64_t count)
{
    if (count && !v)
        return refuse(w, PN_ERR_USAGE, "key '%s': %llu strings from NULL", key ? key : "(null)",
                      (unsigned long long)count);
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < count; i++) {
        if (!v[i])
            return refuse(w, PN_ERR_USAGE, "key '%s': string %llu is NULL", key ? key : "(null)",
                          (unsigned long long)i);
        bytes += 8 + strlen(v[i]);
    }
    if (bytes > SIZE_MAX - 12)
        return refuse(w, PN_ERR_NOMEM, "key '%s': an array of %llu bytes", key ? key : "(null)",
                      (unsigned long long)bytes);
    uint8_t *val = malloc(12 + bytes);
    if (!val)
        return gguf_writer_put_kv_(w, key, GGUF_TYPE_ARRAY, NULL, 0);
    pn_store_le(val, GGUF_TYPE_STRING, 4);
    pn_store_le(val + 4, count, 8);
    uint8_t *p = val + 12;
    for (uint64_t i = 0; i < count; i++) {
        size_t n = strlen(v[i]);
        pn_store_le(p, n, 8);
        memcpy(p + 8, v[i], n);
        p += 8 + n;
    }
    return gguf_writer_put_kv_(w, key, GGUF_TYPE_ARRAY, val, 12 + bytes);
}

pn_status gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv)
{
    if (!w || !kv || (!kv->key.data && kv->key.len))
        return refuse(w, PN_ERR_USAGE, "copy of a key that is not there");
    if (kv->key.len > SIZE_MAX - 1)
        return refuse(w, PN_ERR_NOMEM, "key %zu: %llu bytes", w->n_kv,
                      (unsigned long long)kv->key.len);
    char *key = malloc(kv->key.len + 1);
    if (!key)
        return refuse(w, PN_ERR_NOMEM, "out of memory for key %zu", w->n_kv);
    if (kv->key.len)
        memcpy(key, kv->key.data, kv->key.len);
    key[kv->key.len] = '\0';
    pn_status kst = check_key(w, key, kv->key.len);
    if (kst) {
        free(key);
        return kst;
    }

    pn_status st;
    size_t n = gguf_value_type_size(kv->type);
    if (kv->type == GGUF_TYPE_FLOAT32) {
        float f = (float)kv->v.f64; /* exact: the reader widened a float */
        st = gguf_writer_set_f32(w, key, f);
    } else if (kv->type == GGUF_TYPE_FLOAT64) {
        st = gguf_writer_set_f64(w, key, kv->v.f64);
    } else if (n) {
        /* Both union views hold the value's two's-complement bits. */
        st = put_scalar(w, key, kv->type, kv->v.u64);
    } else if (kv->type == GGUF_TYPE_STRING) {
        st = gguf_writer_set_str_n(w, key, kv->v.str.data, kv->v.str.len);
    } else if (kv->type == GGUF_TYPE_ARRAY) {
        size_t es = gguf_value_type_size(kv->arr_type);
        if ((unsigned)kv->arr_type >= GGUF_TYPE_COUNT_ ||
            (es && kv->arr_bytes / es != kv->arr_count) || (es && kv->arr_bytes % es) ||
            (kv->arr_bytes && !kv->arr_data))
            st = refuse(w, PN_ERR_USAGE, "key '%s': an array whose sizes do not agree", key);
        else
            st = gguf_writer_put_array_(w, key, kv->arr_type, kv->arr_count, kv->arr_data,
                                        kv->arr_bytes);
    } else {
        st = refuse(w, PN_ERR_USAGE, "key '%s': unknown value type %d", key, (int)kv->type);
    }
    free(key);
    return st;
}

const char *gguf_writer_last_error(const gguf_writer *w)
{
    return w && w->last_error.msg[0] ? w->last_error.msg : NULL;
}

/* The slot stays (as a hole skipped when writing), so removal is O(1). */
void gguf_writer_remove_kv(gguf_writer *w, const char *key)
{
    if (!w || !key || w->state != W_COLLECTING)
        return;
    writer_kv *kv = gguf_writer_find_kv_(w, key);
    if (!kv)
        return;
    index_remove(w, &w->kv_index, kv_name, key);
    free(kv->key);
    free(kv->val);
    memset(kv, 0, sizeof *kv);
    w->n_kv--;
}

bool gguf_writer_has_kv(const gguf_writer *w, const char *key)
{
    return w && key && gguf_writer_find_kv_(w, key) != NULL;
}

size_t gguf_writer_n_kv(const gguf_writer *w)
{
    return w ? w->n_kv : 0;
}
size_t gguf_writer_n_tensors(const gguf_writer *w)
{
    return w ? w->n_tensors : 0;
}

/* ------------------------------------------------------------------ */
/* Tensor infos                                                        */

pn_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t n_dims,
                                 const int64_t *ne, int type, pn_error *err)
{
    if (!w || !name || !ne || w->state != W_COLLECTING)
        return pn_error_set(err, PN_ERR_USAGE,
                            "gguf writer: add_tensor needs a name and a shape, before begin");
    if (!*name)
        return pn_error_set(err, PN_ERR_TENSOR, "gguf writer: a tensor name is empty");
    long dup = index_find(w, &w->tensor_index, tensor_name, name);
    if (dup >= 0)
        return pn_error_set(err, PN_ERR_TENSOR,
                            "gguf writer: duplicate tensor name '%s' (tensor %ld and %zu)", name,
                            dup, w->n_tensors);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return pn_error_set(err, PN_ERR_TENSOR,
                            "gguf writer: tensor '%s': n_dims is %u, expected 1..%d", name, n_dims,
                            GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < n_dims; d++)
        if (ne[d] < 1)
            return pn_error_set(err, PN_ERR_TENSOR,
                                "gguf writer: tensor '%s': ne[%u] is %lld, expected >= 1", name, d,
                                (long long)ne[d]);
    const pn_type_traits *tt = pn_type_traits_get(type);
    if (!tt)
        return pn_error_set(err, PN_ERR_TYPE, "gguf writer: tensor '%s': unknown ggml type id %d",
                            name, type);
    if (ne[0] % tt->block_weights != 0)
        return pn_error_set(err, PN_ERR_TENSOR,
                            "gguf writer: tensor '%s': row length ne[0] = %lld is not a multiple "
                            "of the %s block of %lld weights",
                            name, (long long)ne[0], tt->name, (long long)tt->block_weights);
    uint64_t size = (uint64_t)(ne[0] / tt->block_weights);
    bool overflow = __builtin_mul_overflow(size, (uint64_t)tt->block_bytes, &size);
    for (uint32_t d = 1; d < n_dims; d++)
        overflow |= __builtin_mul_overflow(size, (uint64_t)ne[d], &size);
    if (overflow)
        return pn_error_set(err, PN_ERR_TENSOR, "gguf writer: tensor '%s': size overflows 64 bits",
                            name);

    if (w->n_tensors == w->cap_tensors) {
        size_t nc = w->cap_tensors ? w->cap_tensors * 2 : 64;
        writer_tensor *p = realloc(w->tensors, nc * sizeof *p);
        if (!p)
            return pn_error_set(err, PN_ERR_NOMEM, "gguf writer: out of memory");
        w->tensors = p;
        w->cap_tensors = nc;
    }
    char *copy = strdup(name);
    if (!copy)
        return pn_error_set(err, PN_ERR_NOMEM, "gguf writer: out of memory");
    writer_tensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = copy;
    if (!index_add(w, &w->tensor_index, tensor_name, copy, w->n_tensors)) {
        free(copy);
        return pn_error_set(err, PN_ERR_NOMEM, "gguf writer: out of memory");
    }
    w->n_tensors++;
    t->n_dims = n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        t->ne[d] = (uint32_t)d < n_dims ? ne[d] : 1;
    t->type = type;
    t->size = size;
    return PN_OK;
}
