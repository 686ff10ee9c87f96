/* gguf_writer_split.c - the writers of the splits of a set (gguf_split.h):
 * each split's keys (the model's on the first, the per-tensor arrays cut to
 * its tensors, the split keys and the set identity) and its tensor infos,
 * derived from one model writer that holds the whole model.
 */
#include "gguf/gguf_split.h"

#include <stdlib.h>
#include <string.h>

#include "common/byte_order.h"
#include "common/hash.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer_internal.h"

uint64_t gguf_writer_tensor_bytes(const gguf_writer *w, size_t i)
{
    return w && i < w->n_tensors ? w->tensors[i].size : 0;
}

static bool is_split_key(const char *key)
{
    return strcmp(key, GGUF_SPLIT_KEY_NO) == 0 || strcmp(key, GGUF_SPLIT_KEY_COUNT) == 0 ||
           strcmp(key, GGUF_SPLIT_KEY_TENSORS_COUNT) == 0 ||
           strcmp(key, GGUF_SPLIT_KEY_SET_ID) == 0;
}

static bool is_named(const char *key, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (names[i] && strcmp(key, names[i]) == 0)
            return true;
    return false;
}

/* The element type and count of a serialized array value. */
static void array_shape(const writer_kv *kv, gguf_value_type *et, uint64_t *count)
{
    *et = (gguf_value_type)pn_load_u32le(kv->val);
    *count = pn_load_u64le(kv->val + 4);
}

/* Copies the model's key kv into w: whole, or cut to elements [lo, hi) for
 * a per-tensor array. */
static pn_status copy_model_kv(gguf_writer *w, const writer_kv *kv, bool per_tensor, size_t lo,
                               size_t hi)
{
    if (per_tensor) {
        gguf_value_type et;
        uint64_t count;
        array_shape(kv, &et, &count);
        size_t es = gguf_value_type_size(et);
        return gguf_writer_put_array_(w, kv->key, et, hi - lo, kv->val + 12 + lo * es,
                                      (hi - lo) * es);
    }
    uint8_t *val = malloc(kv->val_len ? (size_t)kv->val_len : 1);
    if (val && kv->val_len)
        memcpy(val, kv->val, (size_t)kv->val_len);
    return gguf_writer_put_kv_(w, kv->key, kv->type, val, kv->val_len);
}

/* GGUF_SPLIT_KEY_SET_ID of the set that `plan` makes of `model`
 * (gguf_split.h): its keys as the header holds them (length, name, type,
 * value) but the split keys, the identity and the per-tensor keys; its
 * tensors' names, shapes and types; the plan's split starts. */
static uint64_t set_identity(const gguf_writer *model, const gguf_split_plan *plan,
                             const char *const *per_tensor_keys, size_t n_per_tensor_keys)
{
    static const char tag[] = "pn split set v1";
    uint64_t h = pn_fnv1a64(PN_FNV1A64_BASIS, tag, sizeof tag);
    for (size_t i = 0; i < model->n_kv_slots; i++) {
        const writer_kv *kv = &model->kvs[i];
        if (!kv->key || is_split_key(kv->key) ||
            is_named(kv->key, per_tensor_keys, n_per_tensor_keys))
            continue;
        size_t klen = strlen(kv->key);
        h = pn_fnv1a64_le(h, klen, 8);
        h = pn_fnv1a64(h, kv->key, klen);
        h = pn_fnv1a64_le(h, (uint64_t)kv->type, 8);
        h = pn_fnv1a64_le(h, kv->val_len, 8);
        h = pn_fnv1a64(h, kv->val, (size_t)kv->val_len);
    }
    h = pn_fnv1a64_le(h, model->n_tensors, 8);
    for (size_t i = 0; i < model->n_tensors; i++) {
        const writer_tensor *t = &model->tensors[i];
        size_t nlen = strlen(t->name);
        h = pn_fnv1a64_le(h, nlen, 8);
        h = pn_fnv1a64(h, t->name, nlen);
        h = pn_fnv1a64_le(h, t->n_dims, 8);
        for (uint32_t d = 0; d < t->n_dims; d++)
            h = pn_fnv1a64_le(h, (uint64_t)t->ne[d], 8);
        h = pn_fnv1a64_le(h, (uint64_t)t->type, 8);
    }
    h = pn_fnv1a64_le(h, plan->n_splits, 8);
    for (size_t s = 0; s <= plan->n_splits; s++)
        h = pn_fnv1a64_le(h, plan->first[s], 8);
    return h;
}

pn_status gguf_writer_new_split(const gguf_writer *model, const gguf_split_plan *plan, size_t index,
                                const char *const *per_tensor_keys, size_t n_per_tensor_keys,
                                gguf_writer **out, pn_error *err)
{
    *out = NULL;
    if (!model || !plan || !plan->first || plan->n_splits == 0 || index >= plan->n_splits ||
        plan->first[plan->n_splits] != model->n_tensors || (n_per_tensor_keys && !per_tensor_keys))
        return pn_error_set(err, PN_ERR_USAGE,
                            "gguf writer: split %zu of a plan of %zu splits and %zu tensors, for "
                            "a model of %zu tensors",
                            index, plan ? plan->n_splits : 0,
                            plan && plan->first ? plan->first[plan->n_splits] : 0,
                            model ? model->n_tensors : 0);
    uint64_t align = gguf_writer_alignment_of_(model);
    if (!align)
        return pn_error_set(err, PN_ERR_ALIGNMENT,
                            "gguf writer: the model's general.alignment is not an unsigned "
                            "power of two");
    for (size_t k = 0; k < n_per_tensor_keys; k++) {
        const writer_kv *kv =
            per_tensor_keys[k] ? gguf_writer_find_kv_(model, per_tensor_keys[k]) : NULL;
        if (!kv)
            continue;
        gguf_value_type et = GGUF_TYPE_COUNT_;
        uint64_t count = 0;
        if (kv->type == GGUF_TYPE_ARRAY)
            array_shape(kv, &et, &count);
        if (kv->type != GGUF_TYPE_ARRAY || gguf_value_type_size(et) == 0 ||
            count != model->n_tensors)
            return pn_error_set(err, PN_ERR_USAGE,
                                "gguf writer: key '%s' is not an array of fixed-size elements "
                                "with one per tensor (%zu), so it cannot be cut per split",
                                kv->key, model->n_tensors);
    }
    gguf_writer *w = gguf_writer_new();
    if (!w)
        return pn_error_set(err, PN_ERR_NOMEM, "gguf writer: out of memory");
    w->out_opts = model->out_opts;
    w->header_hash = model->header_hash; /* each split records its own keys */
    size_t lo = plan->first[index], hi = plan->first[index + 1];
    pn_status st = PN_OK;
    for (size_t i = 0; i < model->n_kv_slots && !st; i++) {
        const writer_kv *kv = &model->kvs[i];
        if (!kv->key || is_split_key(kv->key))
            continue;
        bool per_tensor = is_named(kv->key, per_tensor_keys, n_per_tensor_keys);
        bool keep = index == 0 || per_tensor ||
                    (align != GGUF_DEFAULT_ALIGNMENT && strcmp(kv->key, "general.alignment") == 0);
        if (keep)
            st = copy_model_kv(w, kv, per_tensor, lo, hi);
    }
    if (st)
        pn_error_set(err, st, "%s", gguf_writer_last_error(w));
    if (!st && plan->n_splits > 1) {
        st = gguf_writer_set_u64(w, GGUF_SPLIT_KEY_SET_ID,
                                 set_identity(model, plan, per_tensor_keys, n_per_tensor_keys));
        if (st)
            pn_error_set(err, st, "%s", gguf_writer_last_error(w));
    }
    if (!st && plan->n_splits > 1)
        st = gguf_split_set_keys(w, (uint32_t)index, (uint32_t)plan->n_splits, model->n_tensors,
                                 err);
    for (size_t i = lo; i < hi && !st; i++) {
        const writer_tensor *t = &model->tensors[i];
        st = gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, err);
    }
    if (st) {
        gguf_writer_free(w);
        return st;
    }
    *out = w;
    return PN_OK;
}
