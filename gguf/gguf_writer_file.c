/* gguf_writer_file.c - a writer's output (the life of a writer is in
 * gguf_writer.c): the alignment, the tensors' offsets and the header's
 * bytes, then begin, the streamed data through one 4 MiB buffer, the
 * patches of arrays already written, close and abort. */
#include "common/byte_order.h"
#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "gguf/gguf_split.h"
#include "gguf/gguf_writer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WRITE_BUFFER_BYTES (4u << 20)

void gguf_writer_abort(gguf_writer *w)
{
    if (!w || w->state == W_COMMITTED)
        return;
    pn_outfile_abort(w->out);
    free(w->buf);
    w->buf = NULL;
    w->buf_len = 0;
    w->state = W_ABORTED;
}

/* The error is formatted before the abort. */
#define FAIL_ABORT(w, err, code, ...)                                                              \
    do {                                                                                           \
        pn_status fail_code_ = pn_error_set((err), (code), __VA_ARGS__);                           \
        gguf_writer_abort(w);                                                                      \
        return fail_code_;                                                                         \
    } while (0)

/* Output errors name the target and the byte offset (common/outfile.c). */
static pn_status write_all(gguf_writer *w, const uint8_t *p, size_t n, pn_error *err)
{
    pn_status st = pn_outfile_write(w->out, p, n, err);
    if (st) {
        gguf_writer_abort(w);
        return st;
    }
    w->flushed += n;
    return PN_OK;
}

static pn_status flush(gguf_writer *w, pn_error *err)
{
    pn_status st = write_all(w, w->buf, w->buf_len, err);
    if (!st)
        w->buf_len = 0;
    return st;
}

static uint64_t position(const gguf_writer *w)
{
    return w->flushed + w->buf_len;
}

/* data, or n zero bytes when data is NULL, through the buffer (data of a
 * buffer or more goes around it when the buffer is empty). */
static pn_status emit(gguf_writer *w, const void *data, size_t n, pn_error *err)
{
    const uint8_t *p = data;
    while (n > 0) {
        if (p && w->buf_len == 0 && n >= WRITE_BUFFER_BYTES)
            return write_all(w, p, n, err);
        size_t take = WRITE_BUFFER_BYTES - w->buf_len;
        if (take > n)
            take = n;
        if (p) {
            memcpy(w->buf + w->buf_len, p, take);
            p += take;
        } else {
            memset(w->buf + w->buf_len, 0, take);
        }
        w->buf_len += take;
        n -= take;
        if (w->buf_len == WRITE_BUFFER_BYTES) {
            pn_status st = flush(w, err);
            if (st)
                return st;
        }
    }
    return PN_OK;
}

static pn_status emit_zeros(gguf_writer *w, uint64_t n, pn_error *err)
{
    return emit(w, NULL, (size_t)n, err);
}

static pn_status emit_le(gguf_writer *w, uint64_t v, size_t n, pn_error *err)
{
    uint8_t b[8];
    pn_store_le(b, v, n);
    return emit(w, b, n, err);
}

static uint64_t padding(uint64_t pos, uint64_t align)
{
    return (align - pos % align) % align;
}

static bool is_unsigned_int(gguf_value_type t)
{
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64;
}

static uint64_t unsigned_value(const writer_kv *kv)
{
    return pn_load_le(kv->val, gguf_value_type_size(kv->type));
}

/* general.alignment if set, else the default; 0 if the key is unusable. */
uint64_t gguf_writer_alignment_of_(const gguf_writer *w)
{
    const writer_kv *kv = gguf_writer_find_kv_(w, "general.alignment");
    if (!kv)
        return GGUF_DEFAULT_ALIGNMENT;
    if (!is_unsigned_int(kv->type))
        return 0;
    uint64_t a = unsigned_value(kv);
    return (a != 0 && (a & (a - 1)) == 0) ? a : 0;
}

static pn_status choose_alignment(gguf_writer *w, pn_error *err)
{
    w->alignment = gguf_writer_alignment_of_(w);
    if (w->alignment)
        return PN_OK;
    const writer_kv *kv = gguf_writer_find_kv_(w, "general.alignment");
    if (!is_unsigned_int(kv->type))
        return pn_error_set(err, PN_ERR_ALIGNMENT,
                            "%s: key 'general.alignment' has type %s, expected uint32", w->target,
                            gguf_value_type_name(kv->type));
    uint64_t a = unsigned_value(kv);
    return pn_error_set(err, PN_ERR_ALIGNMENT,
                        "%s: key 'general.alignment' is %llu, expected a power of two", w->target,
                        (unsigned long long)a);
}

/* The keys as the header holds them: the keys set, then the header hash's
 * record when it is on (built by then). */
static size_t n_header_kvs(const gguf_writer *w)
{
    return w->n_kv_slots + (w->header_hash ? GGUF_HEADER_HASH_KEYS : 0);
}

/* Where the record goes: after every key but llama.cpp's split keys when
 * they end the section (as llama.cpp writes them: last). */
static size_t record_at(const gguf_writer *w)
{
    size_t t = w->n_kv_slots;
    while (t > 0 && (!w->kvs[t - 1].key || strcmp(w->kvs[t - 1].key, GGUF_SPLIT_KEY_NO) == 0 ||
                     strcmp(w->kvs[t - 1].key, GGUF_SPLIT_KEY_COUNT) == 0 ||
                     strcmp(w->kvs[t - 1].key, GGUF_SPLIT_KEY_TENSORS_COUNT) == 0))
        t--;
    return t;
}

/* Key slot i of the header (of n_header_kvs), the record at record_at. */
static writer_kv *header_kv(gguf_writer *w, size_t i, size_t at)
{
    if (!w->header_hash || i < at)
        return &w->kvs[i];
    return i < at + GGUF_HEADER_HASH_KEYS ? &w->hh[i - at] : &w->kvs[i - GGUF_HEADER_HASH_KEYS];
}

/* Header bytes before the padding, exactly as emit_header writes them. */
static uint64_t header_bytes(const gguf_writer *w)
{
    uint64_t n = 4 + 4 + 8 + 8 + gguf_writer_header_hash_bytes_(w);
    for (size_t i = 0; i < w->n_kv_slots; i++)
        if (w->kvs[i].key)
            n += 8 + strlen(w->kvs[i].key) + 4 + w->kvs[i].val_len;
    for (size_t i = 0; i < w->n_tensors; i++)
        n += 8 + strlen(w->tensors[i].name) + 4 + 8 * (uint64_t)w->tensors[i].n_dims + 4 + 8;
    return n;
}

uint64_t gguf_writer_alignment(const gguf_writer *w)
{
    return w ? gguf_writer_alignment_of_(w) : 0;
}

uint64_t gguf_writer_data_offset(const gguf_writer *w)
{
    uint64_t a = gguf_writer_alignment(w);
    if (!a)
        return 0;
    uint64_t h = header_bytes(w);
    return h + padding(h, a);
}

uint64_t gguf_writer_file_bytes(const gguf_writer *w)
{
    uint64_t a = gguf_writer_alignment(w);
    if (!a)
        return 0;
    uint64_t n = gguf_writer_data_offset(w);
    for (size_t i = 0; i < w->n_tensors; i++)
        n += w->tensors[i].size + padding(w->tensors[i].size, a);
    return n;
}

static pn_status assign_offsets(gguf_writer *w, pn_error *err)
{
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        writer_tensor *t = &w->tensors[i];
        t->offset = off;
        if (__builtin_add_overflow(off, t->size, &off) ||
            __builtin_add_overflow(off, padding(off, w->alignment), &off))
            return pn_error_set(err, PN_ERR_TENSOR,
                                "%s: tensor '%s': the data section overflows 64 bits", w->target,
                                t->name);
    }
    return PN_OK;
}

static pn_status emit_header(gguf_writer *w, pn_error *err)
{
    pn_status st = emit(w, "GGUF", 4, err);
    if (!st)
        st = emit_le(w, 3, 4, err);
    if (!st)
        st = emit_le(w, w->n_tensors, 8, err);
    if (!st)
        st = emit_le(w, w->n_kv + (w->header_hash ? GGUF_HEADER_HASH_KEYS : 0), 8, err);
    const size_t at = record_at(w);
    for (size_t i = 0; i < n_header_kvs(w) && !st; i++) {
        writer_kv *kv = header_kv(w, i, at);
        if (!kv->key)
            continue; /* removed */
        size_t klen = strlen(kv->key);
        st = emit_le(w, klen, 8, err);
        if (!st)
            st = emit(w, kv->key, klen, err);
        if (!st)
            st = emit_le(w, (uint64_t)kv->type, 4, err);
        kv->val_offset = position(w);
        if (!st)
            st = emit(w, kv->val, (size_t)kv->val_len, err);
    }
    for (size_t i = 0; i < w->n_tensors && !st; i++) {
        const writer_tensor *t = &w->tensors[i];
        size_t nlen = strlen(t->name);
        st = emit_le(w, nlen, 8, err);
        if (!st)
            st = emit(w, t->name, nlen, err);
        if (!st)
            st = emit_le(w, t->n_dims, 4, err);
        for (uint32_t d = 0; d < t->n_dims && !st; d++)
            st = emit_le(w, (uint64_t)t->ne[d], 8, err);
        if (!st)
            st = emit_le(w, (uint64_t)t->type, 4, err);
        if (!st)
            st = emit_le(w, t->offset, 8, err);
    }
    if (!st)
        st = emit_zeros(w, padding(position(w), w->alignment), err);
    w->data_start = position(w);
    return st;
}

/* The header as begin would write it (padding to the alignment included),
 * in memory, for a virtual reader (gguf_reader_open_virtual). Offsets are
 * assigned as begin assigns them; the writer stays collecting. */
pn_status gguf_writer_header(gguf_writer *w, uint8_t **out, size_t *len, pn_error *err)
{
    *out = NULL;
    *len = 0;
    if (!w || w->state != W_COLLECTING)
        return pn_error_set(err, PN_ERR_USAGE, "gguf writer: header of a writer already begun");
    pn_status st = choose_alignment(w, err);
    if (!st)
        st = assign_offsets(w, err);
    if (!st && w->header_hash)
        st = gguf_writer_header_hash_build_(w, err);
    if (st)
        return st;
    uint64_t h = header_bytes(w);
    uint64_t n = h + padding(h, w->alignment);
    uint8_t *b = calloc(1, (size_t)n);
    if (!b)
        return pn_error_set(err, PN_ERR_NOMEM, "gguf writer: out of memory for a %llu-byte header",
                            (unsigned long long)n);
    uint8_t *p = b;
#define PUT(v, k) (pn_store_le(p, (uint64_t)(v), k), p += (k))
    memcpy(p, "GGUF", 4);
    p += 4;
    PUT(3, 4);
    PUT(w->n_tensors, 8);
    PUT(w->n_kv + (w->header_hash ? GGUF_HEADER_HASH_KEYS : 0), 8);
    const size_t at = record_at(w);
    for (size_t i = 0; i < n_header_kvs(w); i++) {
        const writer_kv *kv = header_kv(w, i, at);
        if (!kv->key)
            continue;
        size_t klen = strlen(kv->key);
        PUT(klen, 8);
        memcpy(p, kv->key, klen);
        p += klen;
        PUT(kv->type, 4);
        memcpy(p, kv->val, (size_t)kv->val_len);
        p += kv->val_len;
    }
    for (size_t i = 0; i < w->n_tensors; i++) {
        const writer_tensor *t = &w->tensors[i];
        size_t nlen = strlen(t->name);
        PUT(nlen, 8);
        memcpy(p, t->name, nlen);
        p += nlen;
        PUT(t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++)
            PUT(t->ne[d], 8);
        PUT(t->type, 4);
        PUT(t->offset, 8);
    }
#undef PUT
    *out = b;
    *len = (size_t)n;
    return PN_OK;
}

pn_status gguf_writer_begin(gguf_writer *w, const char *target_path, pn_error *err)
{
    if (!w || !target_path || !*target_path || w->state != W_COLLECTING)
        return pn_error_set(err, PN_ERR_USAGE, "gguf writer: begin needs a target path, once");
    w->target = strdup(target_path);
    w->buf = malloc(WRITE_BUFFER_BYTES);
    if (!w->target || !w->buf)
        FAIL_ABORT(w, err, PN_ERR_NOMEM, "%s: out of memory", target_path);
    pn_status st = choose_alignment(w, err);
    if (!st)
        st = assign_offsets(w, err);
    if (!st && w->header_hash)
        st = gguf_writer_header_hash_build_(w, err);
    if (!st)
        st = pn_outfile_open(target_path, &w->out_opts, &w->out, err);
    if (st) {
        gguf_writer_abort(w);
        return st;
    }
    w->state = W_OPEN;
    w->flushed = 0;
    w->buf_len = 0;
    w->cur = 0;
    w->cur_done = 0;
    return emit_header(w, err);
}

/* take bytes of the current tensor written: past its end, the padding to
 * the next tensor's offset, and after the last one to the alignment, as
 * ggml's writer does. */
static pn_status advance(gguf_writer *w, uint64_t take, pn_error *err)
{
    w->cur_done += take;
    if (w->cur_done < w->tensors[w->cur].size)
        return PN_OK;
    pn_status st = emit_zeros(w, padding(position(w), w->alignment), err);
    if (st)
        return st;
    w->cur++;
    w->cur_done = 0;
    return PN_OK;
}

pn_status gguf_writer_write(gguf_writer *w, const void *data, size_t n, pn_error *err)
{
    if (!w || w->state != W_OPEN)
        return pn_error_set(err, PN_ERR_USAGE, "gguf writer: write before begin or after close");
    if (n && !data)
        FAIL_ABORT(w, err, PN_ERR_USAGE, "%s: write of %zu bytes from NULL", w->target, n);
    const uint8_t *p = data;
    while (n > 0) {
        if (w->cur >= w->n_tensors)
            FAIL_ABORT(w, err, PN_ERR_USAGE,
                       "%s: %zu bytes written past the end of the last tensor (offset %llu)",
                       w->target, n, (unsigned long long)position(w));
        writer_tensor *t = &w->tensors[w->cur];
        uint64_t left = t->size - w->cur_done;
        size_t take = left < n ? (size_t)left : n;
        pn_status st = emit(w, p, take, err);
        if (st)
            return st;
        p += take;
        n -= take;
        if ((st = advance(w, take, err)))
            return st;
    }
    return PN_OK;
}

pn_status gguf_writer_copy_from(gguf_writer *w, int fd, uint64_t off, uint64_t n,
                                const char *src_name, pn_error *err)
{
    if (!w || w->state != W_OPEN)
        return pn_error_set(err, PN_ERR_USAGE, "gguf writer: copy before begin or after close");
    while (n > 0) {
        if (w->cur >= w->n_tensors)
            FAIL_ABORT(w, err, PN_ERR_USAGE,
                       "%s: %llu bytes copied past the end of the last tensor (offset %llu)",
                       w->target, (unsigned long long)n, (unsigned long long)position(w));
        writer_tensor *t = &w->tensors[w->cur];
        uint64_t left = t->size - w->cur_done;
        uint64_t take = left < n ? left : n;
        /* what is buffered goes first, then the copy lands after it */
        pn_status st = flush(w, err);
        if (st)
            return st;
        st = pn_outfile_copy_from(w->out, fd, off, take, src_name, err);
        if (st) {
            gguf_writer_abort(w);
            return st;
        }
        w->flushed += take;
        off += take;
        n -= take;
        if ((st = advance(w, take, err)))
            return st;
    }
    return PN_OK;
}

static pn_status patch_bytes(gguf_writer *w, uint64_t at, const void *data, uint64_t len,
                             const char *key, pn_error *err);

pn_status gguf_writer_patch_arr(gguf_writer *w, const char *key, const void *data, uint64_t count,
                                pn_error *err)
{
    if (!w || !key || (count && !data))
        return pn_error_set(err, PN_ERR_USAGE, "gguf writer: patch_arr needs a key and data");
    writer_kv *kv = gguf_writer_find_kv_(w, key);
    if (!kv || kv->type != GGUF_TYPE_ARRAY)
        return pn_error_set(err, PN_ERR_USAGE, "gguf writer: no array key '%s' to patch", key);
    gguf_value_type et = (gguf_value_type)pn_load_u32le(kv->val);
    uint64_t have = pn_load_u64le(kv->val + 4);
    size_t es = gguf_value_type_size(et);
    if (es == 0)
        return pn_error_set(err, PN_ERR_USAGE,
                            "gguf writer: key '%s' is an array of %s, not of a fixed-size type",
                            key, gguf_value_type_name(et));
    if (have != count)
        return pn_error_set(err, PN_ERR_USAGE,
                            "gguf writer: key '%s' has %llu elements, patch gives %llu", key,
                            (unsigned long long)have, (unsigned long long)count);
    if (w->state != W_COLLECTING && w->state != W_OPEN)
        return pn_error_set(err, PN_ERR_USAGE, "gguf writer: patch of key '%s' after close", key);
    uint64_t len = count * es; /* fits: the array is already in memory */
    memcpy(kv->val + 12, data, (size_t)len);
    if (w->state == W_COLLECTING)
        return PN_OK; /* the header hash is built at begin */
    pn_status st = patch_bytes(w, kv->val_offset + 12, data, len, key, err);
    if (st || !gguf_writer_hashes_key_(w, key))
        return st;
    /* the record follows: its value hashes and whole hash, sizes unchanged */
    gguf_writer_header_hash_update_(w);
    const writer_kv *values = &w->hh[GGUF_HH_VALUES], *whole = &w->hh[GGUF_HH_WHOLE];
    st = patch_bytes(w, values->val_offset, values->val, values->val_len, values->key, err);
    if (!st)
        st = patch_bytes(w, whole->val_offset, whole->val, whole->val_len, whole->key, err);
    return st;
}

/* Overwrites len bytes of the header at file offset at, which may be partly
 * in the file already and partly still in the buffer. */
static pn_status patch_bytes(gguf_writer *w, uint64_t at, const void *data, uint64_t len,
                             const char *key, pn_error *err)
{
    const uint8_t *src = data;
    if (at < w->flushed) {
        uint64_t in_file = w->flushed - at < len ? w->flushed - at : len;
        pn_status st = pn_outfile_pwrite(w->out, src, (size_t)in_file, at, err);
        if (st) {
            pn_error_prefix(err, "patching key '%s'", key);
            gguf_writer_abort(w);
            return st;
        }
        src += in_file;
        at += in_file;
        len -= in_file;
    }
    if (len)
        memcpy(w->buf + (at - w->flushed), src, (size_t)len);
    return PN_OK;
}

pn_status gguf_writer_close(gguf_writer *w, pn_error *err)
{
    if (!w || w->state != W_OPEN)
        return pn_error_set(err, PN_ERR_USAGE, "gguf writer: close without an open file");
    if (w->cur < w->n_tensors)
        FAIL_ABORT(w, err, PN_ERR_USAGE,
                   "%s: tensor '%s' (%zu of %zu) got %llu of its %llu bytes before close",
                   w->target, w->tensors[w->cur].name, w->cur, w->n_tensors,
                   (unsigned long long)w->cur_done, (unsigned long long)w->tensors[w->cur].size);
    pn_status st = flush(w, err);
    if (st)
        return st;
    st = pn_outfile_finish(w->out, err);
    if (st) {
        gguf_writer_abort(w);
        return st;
    }
    free(w->buf);
    w->buf = NULL;
    w->state = W_CLOSED;
    return PN_OK;
}

int gguf_writer_fd(const gguf_writer *w)
{
    return w && (w->state == W_OPEN || w->state == W_CLOSED) ? pn_outfile_fd(w->out) : -1;
}

uint64_t gguf_writer_bytes_flushed(const gguf_writer *w)
{
    return w && (w->state == W_OPEN || w->state == W_CLOSED) ? w->flushed : 0;
}

const char *gguf_writer_note(const gguf_writer *w)
{
    return w ? pn_outfile_note(w->out) : NULL;
}

void gguf_writer_set_header_hash(gguf_writer *w, bool on)
{
    if (w && w->state == W_COLLECTING)
        w->header_hash = on;
}

void gguf_writer_set_replace(gguf_writer *w, bool force)
{
    if (w)
        w->out_opts.force = force;
}

void gguf_writer_set_output_opts(gguf_writer *w, const pn_outfile_opts *opts)
{
    if (w && opts)
        w->out_opts = *opts;
}

pn_status gguf_writer_commit_set(gguf_writer *const *ws, size_t n, pn_error *err)
{
    if (!ws || n == 0)
        return pn_error_set(err, PN_ERR_USAGE, "gguf writer: commit of no writers");
    pn_outfile **outs = calloc(n, sizeof *outs);
    pn_status st = outs ? PN_OK : pn_error_set(err, PN_ERR_NOMEM, "gguf writer: out of memory");
    for (size_t i = 0; i < n && !st; i++) {
        if (!ws[i] || ws[i]->state != W_CLOSED)
            st = pn_error_set(err, PN_ERR_USAGE, "%s: commit before close",
                              ws[i] && ws[i]->target ? ws[i]->target : "gguf writer");
        else
            outs[i] = ws[i]->out;
    }
    if (!st)
        st = pn_outfile_commit_set(outs, n, err);
    free(outs);
    for (size_t i = 0; i < n; i++) {
        if (!ws[i])
            continue;
        if (st)
            gguf_writer_abort(ws[i]);
        else
            ws[i]->state = W_COMMITTED;
    }
    return st;
}

pn_status gguf_writer_commit(gguf_writer *w, pn_error *err)
{
    if (!w)
        return pn_error_set(err, PN_ERR_USAGE, "gguf writer: commit of NULL");
    return gguf_writer_commit_set(&w, 1, err);
}

void gguf_writer_free(gguf_writer *w)
{
    if (!w)
        return;
    gguf_writer_abort(w);
    pn_outfile_free(w->out);
    for (size_t i = 0; i < w->n_kv_slots; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].val);
    }
    free(w->kvs);
    gguf_writer_header_hash_clear_(w);
    for (size_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->tensors);
    free(w->kv_index.slots);
    free(w->tensor_index.slots);
    free(w->target);
    free(w->buf);
    free(w);
}
