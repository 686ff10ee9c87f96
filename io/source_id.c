/* The source identity (see source_id.h). */
#include "io/source_id.h"
#include "io/source_id_testing.h"

#include <stdlib.h>
#include <string.h>

#include "common/crc32.h"
#include "common/hash.h"
#include "common/threads.h"
#include "gguf/gguf_split.h"
#include "gguf/header_hash.h"
#include "gguf/pn_keys.h"
#include "mix/measurement.h"
#include "quant/types.h"

/* Bytes read per pread (and per piece of a whole-tensor CRC). */
#define PIECE_BYTES ((uint64_t)4 << 20)

static uint64_t fnv_u32(uint64_t h, uint32_t v)
{
    return pn_fnv1a64_le(h, v, 4);
}

static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
    h = fnv_u32(h, (uint32_t)v);
    return fnv_u32(h, (uint32_t)(v >> 32));
}

static uint64_t fnv_str(uint64_t h, const char *p, uint64_t n)
{
    return pn_fnv1a64(fnv_u64(h, n), p, (size_t)n);
}

pn_status pn_source_header_hash(const gguf_reader *r, uint64_t *out, pn_error *err)
{
    (void)err;
    /* The model the header describes, not its layout: the same model
     * unsplit or split by gguf-split (whose split.* keys and tensor offsets
     * differ, and our set identity, GGUF_SPLIT_KEY_SET_ID) has the same
     * hash; so does the model with or without the header hash's record
     * (pn.header.*: pn-convert's output and the converter's file of one
     * folder, and the folder read directly, are one source). Every other key (name, type, value as
     * stored: a float32 as its double, arrays as their raw element bytes),
     * then every tensor's name, dimensions and type, in the set's order. */
    uint64_t h = PN_FNV1A64_BASIS;
    h = fnv_u32(h, gguf_reader_version(r));
    for (size_t i = 0; i < gguf_reader_n_kv(r); i++) {
        const gguf_kv *kv = gguf_reader_kv(r, i);
        if ((kv->key.len >= 6 && memcmp(kv->key.data, "split.", 6) == 0) ||
            gguf_str_eq(kv->key, GGUF_SPLIT_KEY_SET_ID) || gguf_header_hash_is_record_key(kv->key))
            continue;
        h = fnv_str(h, kv->key.data, kv->key.len);
        h = fnv_u32(h, (uint32_t)kv->type);
        if (kv->type == GGUF_TYPE_STRING) {
            h = fnv_str(h, kv->v.str.data, kv->v.str.len);
        } else if (kv->type == GGUF_TYPE_ARRAY) {
            h = fnv_u32(h, (uint32_t)kv->arr_type);
            h = fnv_u64(h, kv->arr_count);
            h = fnv_u64(h, kv->arr_bytes);
            h = pn_fnv1a64(h, kv->arr_data, (size_t)kv->arr_bytes);
        } else {
            uint64_t bits;
            memcpy(&bits, &kv->v, sizeof bits); /* u64, i64 or f64: 8 bytes */
            h = fnv_u64(h, bits);
        }
    }
    const size_t n = gguf_reader_n_tensors(r);
    h = fnv_u64(h, n);
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        h = fnv_str(h, t->name, strlen(t->name));
        h = fnv_u32(h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            h = fnv_u64(h, (uint64_t)t->ne[d]);
        h = fnv_u32(h, (uint32_t)t->type);
    }
    *out = h;
    return PN_OK;
}

/* The first sample index whose row is at or after `row` (M when none). */
static int64_t first_sample_from(int64_t n_rows, int64_t M, int64_t row)
{
    if (n_rows <= M)
        return row;
    /* floor(i * R / M) >= row  <=>  i >= ceil(row * M / R) */
    unsigned __int128 p = (unsigned __int128)(uint64_t)row * (uint64_t)M;
    return (int64_t)((p + (uint64_t)n_rows - 1) / (uint64_t)n_rows);
}

/* The one walk of the sampled rows: continues crc over the bytes of the
 * sampled rows that [elem_at, elem_at + n_elems) holds, in row order, and
 * adds their number to *len. */
static uint32_t sample_crc_walk(uint32_t crc, int64_t n_rows, int64_t M, int64_t K,
                                int64_t elem_bytes, int64_t elem_at, const uint8_t *bytes,
                                int64_t n_elems, uint64_t *len)
{
    if (n_elems <= 0 || K < 1)
        return crc;
    if (n_rows <= M) {
        *len += (uint64_t)(n_elems * elem_bytes);
        return pn_crc32(crc, bytes, (size_t)(n_elems * elem_bytes));
    }
    const int64_t a = elem_at, b = elem_at + n_elems;
    const int64_t last_row = (b - 1) / K;
    for (int64_t i = first_sample_from(n_rows, M, a / K); i < M; i++) {
        int64_t row = pn_sample_row(n_rows, M, i);
        if (row > last_row)
            break;
        int64_t s = row * K > a ? row * K : a;
        int64_t e = row * K + K < b ? row * K + K : b;
        if (e <= s)
            continue;
        crc = pn_crc32(crc, bytes + (s - a) * elem_bytes, (size_t)((e - s) * elem_bytes));
        *len += (uint64_t)((e - s) * elem_bytes);
    }
    return crc;
}

uint32_t pn_sample_crc_update(uint32_t crc, int64_t n_rows, int64_t M, int64_t K,
                              int64_t elem_bytes, int64_t elem_at, const uint8_t *bytes,
                              int64_t n_elems)
{
    uint64_t len = 0;
    return sample_crc_walk(crc, n_rows, M, K, elem_bytes, elem_at, bytes, n_elems, &len);
}

uint32_t pn_sample_crc_piece(int64_t n_rows, int64_t M, int64_t K, int64_t elem_bytes,
                             int64_t elem_at, const uint8_t *bytes, int64_t n_elems, uint64_t *len)
{
    *len = 0;
    return sample_crc_walk(0, n_rows, M, K, elem_bytes, elem_at, bytes, n_elems, len);
}

static bool cancelled(volatile sig_atomic_t *cancel)
{
    return cancel && *cancel;
}

static int64_t rows_of(const gguf_tensor_info *t)
{
    return t->ne[1] * t->ne[2] * t->ne[3];
}

/* Continues *crc over bytes [off, off + len) of tensor i. */
static pn_status crc_range(const gguf_reader *r, size_t i, uint64_t off, uint64_t len, uint8_t *buf,
                           volatile sig_atomic_t *cancel, uint32_t *crc, pn_error *err)
{
    while (len > 0) {
        if (cancelled(cancel))
            return pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
        size_t k = len < PIECE_BYTES ? (size_t)len : (size_t)PIECE_BYTES;
        pn_status st = gguf_reader_read_tensor(r, i, off, buf, k, err);
        if (st != PN_OK)
            return st;
        *crc = pn_crc32(*crc, buf, k);
        off += k;
        len -= k;
    }
    return PN_OK;
}

/* The sampled-rows CRC of tensor i, read by one thread. */
static pn_status sample_crc_one(const gguf_reader *r, size_t i, int64_t M, uint8_t *buf,
                                volatile sig_atomic_t *cancel, uint32_t *out, pn_error *err)
{
    const gguf_tensor_info *t = gguf_reader_tensor(r, i);
    const int64_t R = rows_of(t);
    const uint64_t row_bytes = t->size / (uint64_t)R;
    const uint64_t at = gguf_reader_tensor_file_offset(r, i);
    uint32_t crc = 0;
    pn_status st = PN_OK;
    if (R <= M) {
        gguf_reader_advise(r, at, t->size, true);
        st = crc_range(r, i, 0, t->size, buf, cancel, &crc, err);
    } else {
        /* scattered rows: the kernel fetches them all while they are read */
        for (int64_t s = 0; s < M; s++)
            gguf_reader_advise(r, at + (uint64_t)pn_sample_row(R, M, s) * row_bytes, row_bytes,
                               true);
        for (int64_t s = 0; s < M && st == PN_OK; s++)
            st = crc_range(r, i, (uint64_t)pn_sample_row(R, M, s) * row_bytes, row_bytes, buf,
                           cancel, &crc, err);
    }
    *out = crc;
    return st;
}

typedef struct crc_piece {
    size_t k; /* position in idx */
    uint64_t off, len;
    uint32_t crc;
} crc_piece;

/* What every item of pn_tensor_crcs shares. */
typedef struct crcs_job {
    const gguf_reader *r;
    const size_t *idx;
    int64_t sample_rows;
    int threads;
    volatile sig_atomic_t *cancel;
    uint32_t *crcs;
    uint8_t **bufs; /* one a thread */
    crc_piece *pc;
    size_t n_items;
} crcs_job;

/* Item j: the sampled CRC of tensor j, or piece j's CRC, on one thread. */
static pn_status crc_item(void *ctx, size_t j, int t, void *fail)
{
    const crcs_job *c = ctx;
    pn_error *e = fail;
    pn_status s;
    if (c->sample_rows > 0) {
        s = sample_crc_one(c->r, c->idx[j], c->sample_rows, c->bufs[t], c->cancel, &c->crcs[j], e);
    } else {
        const crc_piece *pc = c->pc;
        size_t ahead = j + 2 * (size_t)c->threads;
        if (ahead < c->n_items)
            gguf_reader_advise(
                c->r, gguf_reader_tensor_file_offset(c->r, c->idx[pc[ahead].k]) + pc[ahead].off,
                pc[ahead].len, true);
        c->pc[j].crc = 0;
        s = crc_range(c->r, c->idx[pc[j].k], pc[j].off, pc[j].len, c->bufs[t], c->cancel,
                      &c->pc[j].crc, e);
    }
    return s;
}

pn_status pn_tensor_crcs(const gguf_reader *r, const size_t *idx, size_t n, int64_t sample_rows,
                         int threads, volatile sig_atomic_t *cancel, uint32_t *crcs, pn_error *err)
{
    if (n == 0)
        return PN_OK;
    if (threads < 1)
        threads = 1;
    pn_status st = PN_OK;
    uint8_t **bufs = calloc((size_t)threads, sizeof *bufs);
    crc_piece *pc = NULL;
    size_t n_items = n;
    if (!bufs)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", gguf_reader_name(r));
    if (sample_rows <= 0) {
        n_items = 0;
        for (size_t k = 0; k < n; k++) {
            uint64_t size = gguf_reader_tensor(r, idx[k])->size;
            n_items += (size_t)((size + PIECE_BYTES - 1) / PIECE_BYTES);
        }
        pc = calloc(n_items ? n_items : 1, sizeof *pc);
        if (!pc) {
            st = pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", gguf_reader_name(r));
            goto done;
        }
        size_t j = 0;
        for (size_t k = 0; k < n; k++) {
            uint64_t size = gguf_reader_tensor(r, idx[k])->size;
            for (uint64_t off = 0; off < size; off += PIECE_BYTES, j++) {
                pc[j].k = k;
                pc[j].off = off;
                pc[j].len = size - off < PIECE_BYTES ? size - off : PIECE_BYTES;
            }
        }
    }
    for (int t = 0; t < threads; t++)
        if (!(bufs[t] = malloc((size_t)PIECE_BYTES))) {
            st = pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", gguf_reader_name(r));
            goto done;
        }
    /* the first failing item (in order) and its message */
    size_t bad = SIZE_MAX;
    pn_error bad_err;
    pn_error_clear(&bad_err);
    crcs_job job = { r, idx, sample_rows, threads, cancel, crcs, bufs, pc, n_items };
    pn_each_first_failure(n_items, threads, PN_EACH_RUN_ALL, crc_item, &job, sizeof bad_err,
                          &bad_err, &bad);
    if (bad != SIZE_MAX) {
        if (err)
            *err = bad_err;
        st = bad_err.code != PN_OK ? bad_err.code : PN_ERR_IO;
        goto done;
    }
    if (sample_rows <= 0) {
        for (size_t k = 0; k < n; k++)
            crcs[k] = 0;
        for (size_t j = 0; j < n_items; j++)
            crcs[pc[j].k] = pn_crc32_combine(crcs[pc[j].k], pc[j].crc, pc[j].len);
    }
done:
    for (int t = 0; t < threads; t++)
        free(bufs[t]);
    free(bufs);
    free(pc);
    return st;
}

pn_status pn_source_id_init(pn_source_id *id, const gguf_reader *r, pn_error *err)
{
    memset(id, 0, sizeof *id);
    id->n = gguf_reader_n_tensors(r);
    id->sample_crc = calloc(id->n ? id->n : 1, sizeof *id->sample_crc);
    id->tensor_crc = calloc(id->n ? id->n : 1, sizeof *id->tensor_crc);
    if (!id->sample_crc || !id->tensor_crc) {
        pn_source_id_free(id);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    pn_status st = pn_source_header_hash(r, &id->header_hash, err);
    if (st != PN_OK)
        pn_source_id_free(id);
    return st;
}

void pn_source_id_free(pn_source_id *id)
{
    free(id->sample_crc);
    free(id->tensor_crc);
    memset(id, 0, sizeof *id);
}

pn_status pn_source_id_read_samples(pn_source_id *id, const gguf_reader *r, int threads,
                                    volatile sig_atomic_t *cancel, pn_error *err)
{
    size_t *idx = malloc((id->n ? id->n : 1) * sizeof *idx);
    if (!idx)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < id->n; i++)
        idx[i] = i;
    pn_status st =
        pn_tensor_crcs(r, idx, id->n, PN_SOURCE_SAMPLE_ROWS, threads, cancel, id->sample_crc, err);
    free(idx);
    id->samples_known = st == PN_OK;
    return st;
}

/* ---- the recorded identity ---------------------------------------------- */

/* Key `key`, one uint32 per tensor (each split's own cut for a set), into a
 * new array. */
static pn_status u32_array(const gguf_reader *r, const char *key, uint32_t **out, pn_error *err)
{
    size_t n = gguf_reader_n_tensors(r);
    *out = malloc((n ? n : 1) * sizeof **out);
    if (!*out)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    return gguf_reader_per_tensor_u32(r, key, *out, err);
}

void pn_recorded_source_free(pn_recorded_source *rec)
{
    free(rec->sample_crc);
    free(rec->tensor_crc);
    free(rec->type);
    memset(rec, 0, sizeof *rec);
}

pn_status pn_recorded_source_read(const gguf_reader *r, pn_recorded_source *out, pn_error *err)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < gguf_reader_n_kv(r) && !out->present; i++) {
        gguf_str k = gguf_reader_kv(r, i)->key;
        out->present = k.len >= PN_KEY_SOURCE_PREFIX_LEN &&
                       memcmp(k.data, PN_KEY_SOURCE_PREFIX, PN_KEY_SOURCE_PREFIX_LEN) == 0;
    }
    if (!out->present)
        return PN_OK;
    const gguf_kv *h = gguf_reader_find_kv(r, PN_KEY_SOURCE_HEADER);
    if (!h)
        return pn_error_set(err, PN_ERR_FORMAT, "key %s is absent", PN_KEY_SOURCE_HEADER);
    if (h->type != GGUF_TYPE_UINT64)
        return pn_error_set(err, PN_ERR_FORMAT, "key %s is not a uint64", PN_KEY_SOURCE_HEADER);
    out->header_hash = h->v.u64;
    const gguf_kv *m = gguf_reader_find_kv(r, PN_KEY_SOURCE_SAMPLE_ROWS);
    if (!m)
        return pn_error_set(err, PN_ERR_FORMAT, "key %s is absent", PN_KEY_SOURCE_SAMPLE_ROWS);
    if (m->type != GGUF_TYPE_UINT32 || m->v.u64 < 1)
        return pn_error_set(err, PN_ERR_FORMAT, "key %s is not a uint32 >= 1",
                            PN_KEY_SOURCE_SAMPLE_ROWS);
    out->sample_rows = (int64_t)m->v.u64;
    pn_status st = u32_array(r, PN_KEY_SOURCE_SAMPLE_CRC, &out->sample_crc, err);
    if (st == PN_OK)
        st = u32_array(r, PN_KEY_SOURCE_TENSOR_CRC, &out->tensor_crc, err);
    if (st == PN_OK)
        st = u32_array(r, PN_KEY_SOURCE_TYPE, &out->type, err);
    if (st != PN_OK) {
        pn_recorded_source_free(out);
        out->present = true;
    }
    return st;
}
