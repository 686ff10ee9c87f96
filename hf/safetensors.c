/* safetensors.c - one safetensors header: 8-byte little-endian length, then a
 * JSON object {name: {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}.
 * The data section follows the header; each tensor's byte range is relative
 * to it. Parsed with Jansson, duplicate names refused. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/byte_order.h"
#include "common/mem.h"
#include "hf/hf.h"
#include "hf/hf_internal.h"

static int dtype_of(const char *s, pn_hf_dtype *out)
{
    if (strcmp(s, "BF16") == 0) {
        *out = PN_HF_BF16;
        return 1;
    }
    if (strcmp(s, "F16") == 0) {
        *out = PN_HF_F16;
        return 1;
    }
    if (strcmp(s, "F32") == 0) {
        *out = PN_HF_F32;
        return 1;
    }
    return 0;
}

static size_t dtype_size(pn_hf_dtype d)
{
    return d == PN_HF_F32 ? 4 : 2;
}

static int cmp_begin(const void *a, const void *b)
{
    const pn_hf_st_tensor *x = *(pn_hf_st_tensor *const *)a, *y = *(pn_hf_st_tensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : (x->end > y->end);
}

void pn_hf_st_free(pn_hf_st_header *h)
{
    if (!h)
        return;
    PN_FREE_EACH_FIELD(h->tensors, h->n_tensors, name);
    memset(h, 0, sizeof *h);
}

/* A JSON non-negative integer below 2^63. */
static int get_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return 0;
    *out = (uint64_t)json_integer_value(v);
    return 1;
}

/* One tensor's entry (key: val) of the header into t, its data_offsets
 * checked against the data section (data_size bytes from file offset
 * data_offset). name is the file, for the messages. */
static pn_status parse_entry(const char *name, const char *key, const json_t *val,
                             uint64_t data_size, uint64_t data_offset, pn_hf_st_tensor *t,
                             pn_error *err)
{
    if (key[0] == '\0' || strlen(key) >= 256)
        return pn_error_set(err, PN_ERR_TENSOR,
                            "%s: tensor name \"%.64s\" is empty or longer than 255 bytes", name,
                            key);
    if (!json_is_object(val))
        return pn_error_set(err, PN_ERR_FORMAT, "%s: tensor %s: entry is not an object", name, key);
    const json_t *jd = json_object_get(val, "dtype");
    const json_t *js = json_object_get(val, "shape");
    const json_t *jo = json_object_get(val, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo))
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: tensor %s: needs \"dtype\" (a string), \"shape\" and "
                            "\"data_offsets\" (arrays)",
                            name, key);
    if (!dtype_of(json_string_value(jd), &t->dtype))
        return pn_error_set(err, PN_ERR_TYPE,
                            "%s: tensor %s: dtype %.32s is not taken (only BF16, F16, F32)", name,
                            key, json_string_value(jd));
    if (json_array_size(js) > 8)
        return pn_error_set(err, PN_ERR_TENSOR, "%s: tensor %s: %zu dimensions (at most 8)", name,
                            key, json_array_size(js));
    t->n_dims = (uint32_t)json_array_size(js);
    unsigned __int128 elems = 1;
    int bad = 0;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (!get_u64(json_array_get(js, d), &t->shape[d])) {
            bad = 1;
            break;
        }
        elems *= t->shape[d];
        if (elems > ((unsigned __int128)1 << 62)) {
            bad = 2;
            break;
        }
    }
    if (bad)
        return pn_error_set(err, PN_ERR_TENSOR,
                            bad == 1 ? "%s: tensor %s: shape holds a value that is not a "
                                       "non-negative integer"
                                     : "%s: tensor %s: shape too large",
                            name, key);
    if (json_array_size(jo) != 2 || !get_u64(json_array_get(jo, 0), &t->begin) ||
        !get_u64(json_array_get(jo, 1), &t->end)) {
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: tensor %s: data_offsets is not two non-negative integers", name,
                            key);
    }
    if (t->end < t->begin || t->end > data_size)
        return pn_error_set(err, PN_ERR_TENSOR,
                            "%s: tensor %s: data_offsets [%llu, %llu] out of order or outside "
                            "the data (%llu bytes, from file offset %llu)",
                            name, key, (unsigned long long)t->begin, (unsigned long long)t->end,
                            (unsigned long long)data_size, (unsigned long long)data_offset);
    unsigned __int128 bytes_want = elems * dtype_size(t->dtype);
    if (bytes_want != (unsigned __int128)(t->end - t->begin))
        return pn_error_set(err, PN_ERR_TENSOR,
                            "%s: tensor %s: shape x dtype is %llu bytes but data_offsets "
                            "span %llu",
                            name, key, (unsigned long long)bytes_want,
                            (unsigned long long)(t->end - t->begin));
    t->name = strdup(key);
    if (!t->name)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", name);
    return PN_OK;
}

pn_status pn_hf_st_parse(const uint8_t *bytes, size_t n_bytes, uint64_t file_size, const char *name,
                         pn_hf_st_header *out, pn_error *err)
{
    memset(out, 0, sizeof *out);
    if (n_bytes < 8 || file_size < 8)
        return pn_error_set(err, PN_ERR_TRUNCATED,
                            "%s: at byte 0: the file ends before the 8-byte header length "
                            "(%llu bytes)",
                            name, (unsigned long long)file_size);
    uint64_t len = pn_load_u64le(bytes);
    if (len > PN_HF_MAX_HEADER)
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: at byte 0: header length %llu is above the limit of %u bytes",
                            name, (unsigned long long)len, PN_HF_MAX_HEADER);
    if (len > file_size - 8)
        return pn_error_set(err, PN_ERR_TRUNCATED,
                            "%s: at byte 0: header length %llu runs past the end of the file "
                            "(%llu bytes)",
                            name, (unsigned long long)len, (unsigned long long)file_size);
    if (len > n_bytes - 8)
        return pn_error_set(err, PN_ERR_INTERNAL, "%s: header not fully read", name);
    json_t *root = NULL;
    pn_status st = pn_hf_json_parse((const char *)bytes + 8, (size_t)len, name, 8, &root, err);
    if (st != PN_OK)
        return st;
    uint64_t data_size = file_size - 8 - len;
    out->data_offset = 8 + len;
    size_t n = json_object_size(root);
    out->tensors = calloc(n ? n : 1, sizeof *out->tensors);
    pn_hf_st_tensor **sorted = calloc(n ? n : 1, sizeof *sorted);
    if (!out->tensors || !sorted) {
        free(sorted);
        json_decref(root);
        pn_hf_st_free(out);
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory for %zu tensors", name, n);
    }
    const char *key;
    json_t *val;
    st = PN_OK;
    json_object_foreach(root, key, val)
    {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val)) {
                st = pn_error_set(err, PN_ERR_FORMAT,
                                  "%s: header key \"__metadata__\" is not an object", name);
                break;
            }
            continue;
        }
        pn_hf_st_tensor *t = &out->tensors[out->n_tensors];
        st = parse_entry(name, key, val, data_size, out->data_offset, t, err);
        if (st != PN_OK)
            break;
        sorted[out->n_tensors] = t;
        out->n_tensors++;
    }
    json_decref(root);
    if (st == PN_OK && out->n_tensors > 1) {
        qsort(sorted, out->n_tensors, sizeof *sorted, cmp_begin);
        for (size_t i = 1; i < out->n_tensors; i++)
            if (sorted[i]->begin < sorted[i - 1]->end) {
                st = pn_error_set(err, PN_ERR_TENSOR,
                                  "%s: tensors %s and %s overlap (bytes [%llu, %llu) and "
                                  "[%llu, %llu) of the data)",
                                  name, sorted[i - 1]->name, sorted[i]->name,
                                  (unsigned long long)sorted[i - 1]->begin,
                                  (unsigned long long)sorted[i - 1]->end,
                                  (unsigned long long)sorted[i]->begin,
                                  (unsigned long long)sorted[i]->end);
                break;
            }
    }
    free(sorted);
    if (st != PN_OK)
        pn_hf_st_free(out);
    return st;
}
