/* fuzz_gguf_reader.c - libFuzzer target for the GGUF reader.
 *
 * Opens the input strictly and leniently with gguf_reader_open_memory and,
 * when a file is accepted, walks everything the API hands out: every key and
 * value, array elements (strings and nested arrays too), tensor infos and
 * the first and last byte of every tensor's data. libFuzzer passes a buffer
 * of exactly `size` bytes, so AddressSanitizer catches any read outside it.
 *
 * Beyond "no crash", the invariants an accepted file must meet are checked,
 * and a violation aborts (a finding): messages start with the file name;
 * find_kv / find_tensor find every key and tensor; strictly opened tensor
 * data lies inside the input at an aligned offset; and the writer, given a
 * copy of every key and tensor info, lays the header out exactly as the
 * input did (same alignment, same data offset).
 *
 * Every accepted file is also judged as a model (gguf/model_check.h, the
 * header against the tensors and the tokenizer, pn-check's ARCH-* and
 * TOKENIZER-* findings): each problem has a code of those two families, a
 * message and, when it names a key or tensor, a non-empty one; and the
 * decoders' first-error entry refuses exactly when an error was found.
 *
 * The header hash (gguf/header_hash.h) is checked on every accepted file: a
 * mismatch names a key and says how, and a writer given the file's keys
 * (its record left out) writes a header whose own record proves every key.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "gguf/header_hash.h"
#include "gguf/model_check.h"
#include "quant/types.h"

#define NAME "fuzz.gguf"
#define WALK_MAX 256 /* arr_str / arr_arr are O(i): bound the walk per array */

static volatile uint8_t sink;

static void require(int ok)
{
    if (!ok)
        abort();
}

static void touch(const void *p, uint64_t n)
{
    const uint8_t *b = p;
    if (n) {
        sink ^= b[0];
        sink ^= b[n - 1];
    }
}

static void walk_array(const gguf_kv *kv, int depth)
{
    require(depth <= GGUF_MAX_ARRAY_DEPTH);
    require((unsigned)kv->arr_type < GGUF_TYPE_COUNT_);
    touch(kv->arr_data, kv->arr_bytes);
    uint64_t n = kv->arr_count;
    for (uint64_t i = 0; i < n; i++) {
        /* The first WALK_MAX elements and the last one. */
        if (i == WALK_MAX && n > WALK_MAX + 1)
            i = n - 1;
        switch (kv->arr_type) {
        case GGUF_TYPE_STRING: {
            gguf_str s = gguf_kv_arr_str(kv, i);
            require(s.data >= (const char *)kv->arr_data &&
                    (const uint8_t *)s.data + s.len <= kv->arr_data + kv->arr_bytes);
            touch(s.data, s.len);
            break;
        }
        case GGUF_TYPE_ARRAY: {
            gguf_kv in = gguf_kv_arr_arr(kv, i);
            require(in.arr_data >= kv->arr_data &&
                    in.arr_data + in.arr_bytes <= kv->arr_data + kv->arr_bytes);
            walk_array(&in, depth + 1);
            break;
        }
        case GGUF_TYPE_FLOAT32:
        case GGUF_TYPE_FLOAT64: sink ^= (uint8_t)(gguf_kv_arr_f64(kv, i) != 0.0); break;
        default:
            sink ^= (uint8_t)gguf_kv_arr_u64(kv, i);
            sink ^= (uint8_t)gguf_kv_arr_i64(kv, i);
            if (kv->arr_type == GGUF_TYPE_BOOL)
                require(gguf_kv_arr_u64(kv, i) <= 1);
        }
    }
}

static void walk_kvs(const gguf_reader *r)
{
    for (size_t i = 0; i < gguf_reader_n_kv(r); i++) {
        const gguf_kv *kv = gguf_reader_kv(r, i);
        touch(kv->key.data, kv->key.len);
        if (!memchr(kv->key.data, 0, kv->key.len)) {
            char *key = strndup(kv->key.data, kv->key.len);
            require(key != NULL);
            require(gguf_reader_find_kv(r, key) == kv);
            free(key);
        }
        sink ^= (uint8_t)*gguf_value_type_name(kv->type);
        switch (kv->type) {
        case GGUF_TYPE_STRING: touch(kv->v.str.data, kv->v.str.len); break;
        case GGUF_TYPE_ARRAY: walk_array(kv, 1); break;
        case GGUF_TYPE_BOOL: require(kv->v.u64 <= 1); break;
        default: sink ^= (uint8_t)kv->v.u64;
        }
    }
}

static void walk_tensors(const gguf_reader *r, const uint8_t *data, size_t size, bool strict)
{
    uint64_t align = gguf_reader_alignment(r);
    require(align && (align & (align - 1)) == 0);
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        require(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
        require(t->name[0] != '\0');
        require(gguf_reader_find_tensor(r, t->name) == (long)i);
        const pn_type_traits *tt = pn_type_traits_get(t->type);
        require(tt != NULL);
        require(t->ne[0] % tt->block_weights == 0);
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            require(t->ne[d] >= 1);
        const uint8_t *p = gguf_reader_tensor_data(r, i);
        if (strict) {
            require(p != NULL);
            require(t->offset % align == 0);
        }
        if (p) {
            require(p >= data && t->size <= size && p + t->size <= data + size);
            touch(p, t->size);
        }
    }
}

/* The writer given the same keys and tensor infos lays the header out the
 * same way (our writer and reader agree on every structure). */
static void check_writer_layout(const gguf_reader *r)
{
    gguf_writer *w = gguf_writer_new();
    require(w != NULL);
    bool copied = true;
    for (size_t i = 0; i < gguf_reader_n_kv(r) && copied; i++) {
        const gguf_kv *kv = gguf_reader_kv(r, i);
        /* The writer keeps keys as C strings; such keys cannot be copied. */
        if (kv->key.len == 0 || memchr(kv->key.data, 0, kv->key.len)) {
            copied = false;
            break;
        }
        require(gguf_writer_copy_kv(w, kv) == PN_OK);
    }
    for (size_t i = 0; i < gguf_reader_n_tensors(r) && copied; i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        pn_error e;
        require(gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, &e) == PN_OK);
    }
    if (copied) {
        require(gguf_writer_n_kv(w) == gguf_reader_n_kv(r));
        require(gguf_writer_alignment(w) == gguf_reader_alignment(r));
        require(gguf_writer_data_offset(w) == gguf_reader_data_offset(r));
    }
    gguf_writer_free(w);
}

static void on_problem(void *ctx, const gguf_model_problem *p)
{
    require(p->code != NULL && p->message != NULL && p->message[0] != '\0');
    require(strncmp(p->code, "ARCH-", 5) == 0 || strncmp(p->code, "TOKENIZER-", 10) == 0 ||
            strcmp(p->code, "PN-HEADER-HASH-MISMATCH") == 0);
    require(!p->key || p->key[0] != '\0');
    require(!p->tensor || p->tensor[0] != '\0');
    touch(p->message, strlen(p->message));
    if (!p->warning)
        *(bool *)ctx = true;
}

static void check_model(const gguf_reader *r)
{
    bool error = false;
    pn_error e;
    if (gguf_model_check(r, on_problem, &error, &e) != PN_OK) {
        require(e.code == PN_ERR_NOMEM);
        return;
    }
    pn_status st = gguf_model_check_first(r, &e);
    require(st == (error ? PN_ERR_FORMAT : PN_OK) || st == PN_ERR_NOMEM);
    if (st == PN_ERR_FORMAT)
        require(strncmp(e.msg, NAME ": ", sizeof(NAME ": ") - 1) == 0);
}

/* The file's own record, and the record a writer makes of its keys. */
static void check_header_hash(const gguf_reader *r)
{
    gguf_header_verdict v;
    gguf_header_hash_verify(r, &v);
    require(v.proof == GGUF_HEADER_UNPROVEN || v.proof == GGUF_HEADER_PROVEN ||
            v.proof == GGUF_HEADER_MISMATCH);
    require(v.message[0] != '\0');
    if (v.proof == GGUF_HEADER_MISMATCH)
        require(v.kind != NULL && v.key[0] != '\0');
    else
        require(v.kind == NULL);

    gguf_writer *w = gguf_writer_new();
    require(w != NULL);
    pn_error e;
    gguf_writer_set_header_hash(w, true);
    for (size_t i = 0; i < gguf_reader_n_kv(r); i++) {
        const gguf_kv *kv = gguf_reader_kv(r, i);
        if (kv->key.len == 0 || memchr(kv->key.data, 0, kv->key.len) ||
            gguf_header_hash_is_record_key(kv->key))
            continue;
        require(gguf_writer_copy_kv(w, kv) == PN_OK);
    }
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        require(gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, &e) == PN_OK);
    }
    uint8_t *hdr = NULL;
    size_t len = 0;
    if (gguf_writer_header(w, &hdr, &len, &e) == PN_OK) {
        gguf_reader *h = NULL;
        pn_status st = gguf_reader_open_memory_lenient(hdr, len, NAME, &h, &e);
        require(st == PN_OK || st == PN_ERR_NOMEM);
        if (st == PN_OK) {
            gguf_header_hash_verify(h, &v);
            require(v.proof == GGUF_HEADER_PROVEN);
            gguf_reader_close(h);
        }
    } else {
        require(e.code == PN_ERR_ALIGNMENT || e.code == PN_ERR_NOMEM || e.code == PN_ERR_TENSOR);
    }
    free(hdr);
    gguf_writer_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int lenient = 0; lenient < 2; lenient++) {
        gguf_reader *r = (gguf_reader *)&sink;
        pn_error e;
        pn_status st = lenient ? gguf_reader_open_memory_lenient(data, size, NAME, &r, &e)
                               : gguf_reader_open_memory(data, size, NAME, &r, &e);
        if (st != PN_OK) {
            require(r == NULL);
            require(e.code == st);
            require(strncmp(e.msg, NAME ": at byte ", sizeof(NAME ": at byte ") - 1) == 0 ||
                    st == PN_ERR_NOMEM);
            continue;
        }
        require(gguf_reader_version(r) == 2 || gguf_reader_version(r) == 3);
        require(gguf_reader_file_size(r) == size);
        require(gguf_reader_bytes(r) == data || size == 0);
        if (!lenient)
            require(gguf_reader_data_offset(r) <= size);
        walk_kvs(r);
        walk_tensors(r, data, size, !lenient);
        check_model(r);
        if (!lenient) {
            check_writer_layout(r);
            check_header_hash(r);
        }
        gguf_reader_close(r);
    }
    return 0;
}
