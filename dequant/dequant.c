/* dequant.c - pn-dequant: decode every quantized tensor into a float GGUF.
 *
 * Each tensor is streamed in chunks of about chunk_bytes of output; a chunk
 * is cut into segments that are decoded in parallel (a segment holds whole
 * type blocks and whole rotation blocks, so a 1-D tensor of any length needs
 * no row-sized buffer), then written in order. Input is checked as it is
 * decoded or copied: an invalid PN block (non-finite scale, pn3t reserved
 * bit), a non-finite scale of a q8_0/q4_K/q3_K block or a non-finite f32,
 * f16 or bf16 weight stops the run with its tensor, row and block or column
 * named, since its decode would be meaningless. Each tensor's bytes are also
 * checked against the file's pn.tensor_crc32 as they are read: a damaged
 * tensor is refused by name (before any fault its damage causes in the
 * decode is reported), so no damaged byte is ever decoded into an output.
 */
#include "dequant/dequant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/clock.h"
#include "common/crc32.h"
#include "gguf/model_check.h"
#include "common/threads.h"
#include "gguf/gguf.h"
#include "gguf/gguf_split.h"
#include "gguf/header_hash.h"
#include "gguf/pn_keys.h"
#include "hadamard/hadamard.h"
#include "io/outset.h"
#include "quant/quant_row.h"
#include "quant/pn.h"
#include "quant/scales.h"
#include "quant/segments.h"
#include "quant/types.h"
#include "quant/widen.h"

void pn_dequant_opts_init(pn_dequant_opts *o)
{
    memset(o, 0, sizeof *o);
    o->out_type = PN_TYPE_F32;
    o->chunk_bytes = (size_t)64 << 20;
}

static bool kv_integer(const gguf_kv *kv, int64_t *v)
{
    switch (kv->type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_UINT64: *v = kv->v.u64 > INT64_MAX ? -1 : (int64_t)kv->v.u64; return true;
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_INT64: *v = kv->v.i64; return true;
    default: return false;
    }
}

/* The rotation the file declares: *cap 0 for none. */
static pn_status read_rotation(const gguf_reader *r, const char *path, int *cap, bool *missing,
                               pn_error *err)
{
    *cap = 0;
    *missing = false;
    const gguf_kv *type = gguf_reader_find_kv(r, PN_KEY_ROTATION_TYPE);
    if (!type) {
        *missing = true;
        return PN_OK;
    }
    if (type->type != GGUF_TYPE_STRING)
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: key pn.rotation.type has type %s, expected string", path,
                            gguf_value_type_name(type->type));
    if (gguf_str_eq(type->v.str, "none"))
        return PN_OK;
    if (!gguf_str_eq(type->v.str, "hadamard"))
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: pn.rotation.type is \"%.*s\", expected \"hadamard\" or \"none\"",
                            path, (int)(type->v.str.len > 64 ? 64 : type->v.str.len),
                            type->v.str.data);
    *cap = PN_HADAMARD_DEFAULT_CAP;
    const gguf_kv *bs = gguf_reader_find_kv(r, PN_KEY_ROTATION_BLOCK_SIZE);
    if (!bs)
        return PN_OK;
    int64_t v = -1;
    if (!kv_integer(bs, &v) || v < 1 || v > PN_HADAMARD_MAX_BLOCK || !pn_is_pow2(v))
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: pn.rotation.block_size must be an integer power of two from 1 "
                            "to %d (found type %s, value %lld)",
                            path, PN_HADAMARD_MAX_BLOCK, gguf_value_type_name(bs->type),
                            (long long)v);
    *cap = (int)v;
    return PN_OK;
}

/* The per-tensor keys of a PN file: in a split set each split records its
 * own tensors' entries. */
static bool is_per_tensor_key(gguf_str k)
{
    return gguf_str_eq(k, PN_KEY_TENSOR_CRC) || gguf_str_eq(k, PN_KEY_SOURCE_SAMPLE_CRC) ||
           gguf_str_eq(k, PN_KEY_SOURCE_TENSOR_CRC) || gguf_str_eq(k, PN_KEY_SOURCE_TYPE);
}

/* A split input's per-tensor key `pn.X` as `pn_decoded.X`: the output's key
 * holds every split's entries, as it does from the unsplit file. A set whose
 * splits do not all record it gives no key. */
static pn_status copy_set_array(gguf_writer *w, const gguf_reader *r, gguf_str key, pn_error *err)
{
    const size_t n = gguf_reader_n_tensors(r);
    uint32_t *v = malloc((n ? n : 1) * sizeof *v);
    char in[64], out[80];
    if (!v)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory for %zu values", n);
    snprintf(in, sizeof in, "%.*s", (int)key.len, key.data);
    snprintf(out, sizeof out, PN_KEY_DECODED_PREFIX "%s", in + PN_KEY_PREFIX_LEN);
    pn_status st = PN_OK;
    if (gguf_reader_per_tensor_u32(r, in, v, NULL) == PN_OK &&
        (st = gguf_writer_set_arr(w, out, GGUF_TYPE_UINT32, v, n)))
        pn_error_set(err, st, "setting %s: %s", out, pn_strerror(st));
    free(v);
    return st;
}

static pn_status copy_metadata(gguf_writer *w, const gguf_reader *r, int out_type, bool has_pn,
                               bool undone, pn_error *err)
{
    pn_status st = PN_OK;
    char key[512];
    const bool set = gguf_reader_n_splits(r) > 1;
    for (size_t i = 0; i < gguf_reader_n_kv(r) && !st; i++) {
        const gguf_kv *kv = gguf_reader_kv(r, i);
        /* the set identity describes the input's files, not ours; its
         * header hash proves its keys, and ours records our own */
        if (gguf_str_eq(kv->key, "general.quantization_version") ||
            gguf_str_eq(kv->key, GGUF_SPLIT_KEY_SET_ID) || gguf_header_hash_is_record_key(kv->key))
            continue;
        if (set && is_per_tensor_key(kv->key)) {
            st = copy_set_array(w, r, kv->key, err);
            if (st)
                return st;
            continue;
        }
        if (kv->key.len >= PN_KEY_PREFIX_LEN &&
            memcmp(kv->key.data, PN_KEY_PREFIX, PN_KEY_PREFIX_LEN) == 0) {
            /* pn.X -> pn_decoded.X */
            if (kv->key.len + 8 >= sizeof key)
                return pn_error_set(err, PN_ERR_FORMAT, "key %.*s... is too long to rename", 64,
                                    kv->key.data);
            gguf_kv renamed = *kv;
            int n =
                snprintf(key, sizeof key, PN_KEY_DECODED_PREFIX "%.*s",
                         (int)(kv->key.len - PN_KEY_PREFIX_LEN), kv->key.data + PN_KEY_PREFIX_LEN);
            renamed.key.data = key;
            renamed.key.len = (uint64_t)n;
            st = gguf_writer_copy_kv(w, &renamed);
        } else {
            st = gguf_writer_copy_kv(w, kv);
        }
        if (st)
            return pn_error_set(err, st, "copying key %.*s: %s",
                                (int)(kv->key.len > 128 ? 128 : kv->key.len), kv->key.data,
                                pn_strerror(st));
    }
    uint32_t ftype = out_type == PN_TYPE_F16    ? PN_FTYPE_MOSTLY_F16
                     : out_type == PN_TYPE_BF16 ? PN_FTYPE_MOSTLY_BF16
                                                : PN_FTYPE_ALL_F32;
    /* a split input's split keys describe its files, not ours */
    gguf_split_remove_keys(w);
    st = gguf_writer_set_u32(w, "general.file_type", ftype);
    if (!st && has_pn)
        st = gguf_writer_set_bool(w, PN_KEY_DECODED_ROTATION_UNDONE, undone);
    if (st)
        return pn_error_set(err, st, "setting the output keys: %s", pn_strerror(st));
    return PN_OK;
}

/* One tensor's decoding parameters. */
typedef struct tjob {
    const gguf_reader *r;
    size_t index;
    const gguf_tensor_info *ti;
    const uint8_t *data; /* the current chunk's input bytes (read_chunk) */
    int64_t data_e0;     /* the element that data starts with */
    int in_type, out_type;
    int64_t n, K;
    int64_t bw, bb;  /* input block weights / bytes */
    int64_t out_es;  /* output bytes per element */
    pn_segments cut; /* the segments decoded in parallel */
    int B;           /* rotation block undone, 0 none */
    uint32_t crc;    /* CRC-32 of the bytes read so far */
} tjob;

/* What went wrong first in a segment, and where. */
enum { AT_ELEM, AT_PN_BLOCK, AT_SCALE, AT_WEIGHT };

typedef struct seg_err {
    pn_status st;
    int64_t elem;  /* element where it happened (tensor-wide index) */
    int where;     /* AT_*: which of the fields below say more */
    int64_t block; /* tensor-wide block index (AT_PN_BLOCK, AT_SCALE) */
    int field;     /* the scale field (AT_SCALE) */
    uint32_t bits; /* the value found (AT_SCALE, AT_WEIGHT) */
} seg_err;

/* The first non-finite f32/f16/bf16 weight among m stored ones that start at
 * tensor element e, into *r; false when there is none. */
static bool find_bad_weight(int type, const uint8_t *p, int64_t e, int64_t m, seg_err *r)
{
    uint32_t bits = 0;
    int64_t bad = pn_find_nonfinite_value(type, p, m, &bits);
    if (bad < 0)
        return false;
    *r = (seg_err){ PN_ERR_NONFINITE, e + bad, AT_WEIGHT, -1, 0, bits };
    return true;
}

/* Decodes elements [e, e+m) of the tensor into out (m * out_es bytes). */
static seg_err decode_segment(const tjob *j, int64_t e, int64_t m, float *y, uint8_t *out)
{
    seg_err r = { PN_OK, -1, AT_ELEM, -1, 0, 0 };
    const uint8_t *p = j->data + (e - j->data_e0) / j->bw * j->bb;
    const pn_scale_field *fields;
    if (pn_type_is_pn(j->in_type)) {
        int64_t bad = -1;
        pn_status st = pn_validate_row(j->in_type, p, m, &bad);
        if (st) {
            r.st = st;
            r.where = AT_PN_BLOCK;
            r.block = e / j->bw + bad;
            r.elem = r.block * j->bw;
            return r;
        }
        pn_dequantize_row(j->in_type, p, y, m);
    } else {
        if (pn_type_is_float(j->in_type) && find_bad_weight(j->in_type, p, e, m, &r))
            return r;
        if (pn_scale_fields(j->in_type, &fields) > 0) {
            int field = 0;
            uint16_t bits = 0;
            int64_t bad = pn_find_nonfinite_scale(j->in_type, p, m / j->bw, &field, &bits);
            if (bad >= 0) {
                r = (seg_err){ PN_ERR_NONFINITE, e + bad * j->bw, AT_SCALE,
                               e / j->bw + bad,  field,           bits };
                return r;
            }
        }
        pn_status st = pn_dequantize_row_type(j->in_type, p, y, m);
        if (st) {
            r.st = st;
            r.elem = e;
            return r;
        }
    }
    /* With finite inputs and scales every decoder gives finite values; this
     * is the last guard, so that no output ever carries a NaN silently. */
    int64_t bad = pn_find_nonfinite(y, m);
    if (bad >= 0) {
        r.st = PN_ERR_NONFINITE;
        r.elem = e + bad;
        return r;
    }
    if (j->B > 1)
        pn_hadamard_rotate_row(y, m, j->B);
    if (j->out_type == PN_TYPE_F32) {
        memcpy(out, y, (size_t)m * sizeof(float)); /* the host is little-endian */
        return r;
    }
    int64_t bad_col = -1;
    pn_status st = pn_quantize_row_stock(j->out_type, y, m, out, &bad_col);
    if (st) {
        r.st = st;
        r.elem = e + (bad_col >= 0 ? bad_col : 0);
    }
    return r;
}

static pn_status describe_failure(const char *path, const tjob *j, seg_err e, pn_error *err)
{
    const char *name = j->ti->name;
    const char *tn = pn_type_name(j->in_type);
    const int64_t per_row = j->K / j->bw;
    const long long row = (long long)(e.elem / j->K), col = (long long)(e.elem % j->K);
    const bool nan = pn_nonfinite_is_nan(e.where == AT_WEIGHT ? j->in_type : PN_TYPE_F16, e.bits);
    const pn_scale_field *fields;
    switch (e.where) {
    case AT_WEIGHT:
        return pn_error_set(err, e.st,
                            "%s: tensor '%s' (%s) row %lld column %lld: the weight is %s (0x%0*x); "
                            "the file is invalid (pn-check tells more)",
                            path, name, tn, row, col, nan ? "NaN" : "infinite", (int)(2 * j->bb),
                            (unsigned)e.bits);
    case AT_SCALE:
        pn_scale_fields(j->in_type, &fields);
        return pn_error_set(err, e.st,
                            "%s: tensor '%s' (%s) row %lld block %lld: the scale %s is %s "
                            "(0x%04x); the file is invalid (pn-check tells more)",
                            path, name, tn, (long long)(e.block / per_row),
                            (long long)(e.block % per_row), fields[e.field].name,
                            nan ? "NaN" : "infinite", (unsigned)e.bits);
    case AT_PN_BLOCK:
        return pn_error_set(err, e.st,
                            "%s: tensor '%s' row %lld block %lld: %s; the file is invalid "
                            "(pn-check tells more)",
                            path, name, (long long)(e.block / per_row),
                            (long long)(e.block % per_row),
                            e.st == PN_ERR_RESERVED_BITS ? "a pn3t reserved bit is set"
                                                         : "the scale d is not finite");
    default: break;
    }
    switch (e.st) {
    case PN_ERR_NONFINITE:
        return pn_error_set(err, e.st,
                            "%s: tensor '%s' (%s) row %lld column %lld decodes to a non-finite "
                            "value",
                            path, name, tn, row, col);
    case PN_ERR_SCALE_OVERFLOW:
        return pn_error_set(err, e.st,
                            "%s: tensor '%s' row %lld column %lld: the value does not fit %s", path,
                            name, row, col, pn_type_name(j->out_type));
    default:
        return pn_error_set(err, e.st, "%s: tensor '%s' (%s) row %lld: cannot decode: %s", path,
                            name, tn, row, pn_strerror(e.st));
    }
}

/* What every tensor's streaming shares: the options, the threads and their
 * segment buffers (one per thread, allocated once), the chunk buffers, and
 * the progress made. */
typedef struct stream {
    const char *path;
    const pn_dequant_opts *o;
    int nthreads;
    float *y; /* nthreads x seg_max floats */
    int64_t seg_max;
    uint8_t *buf; /* output chunk */
    size_t buf_bytes;
    uint8_t *in; /* input chunk */
    size_t in_bytes;
    uint64_t done, total;     /* tensor data bytes written / to write */
    const uint32_t *want_crc; /* the file's pn.tensor_crc32, or NULL without it */
} stream;

/* The file's pn.tensor_crc32 into *out (NULL when the file has no such key:
 * a float GGUF, or a PN file of before the key; a key that is there but
 * malformed is refused, naming it). */
static pn_status read_tensor_crcs(const gguf_reader *r, uint32_t **out, pn_error *err)
{
    *out = NULL;
    if (!gguf_reader_find_kv(r, PN_KEY_TENSOR_CRC))
        return PN_OK;
    const size_t nt = gguf_reader_n_tensors(r);
    uint32_t *crc = calloc(nt ? nt : 1, sizeof *crc);
    if (!crc)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", gguf_reader_name(r));
    pn_status st = gguf_reader_per_tensor_u32(r, PN_KEY_TENSOR_CRC, crc, err);
    if (st) {
        free(crc);
        return st;
    }
    *out = crc;
    return PN_OK;
}

/* PN_ERR_CRC naming the tensor when j's bytes read from offset `from` to
 * its end, after those whose CRC j->crc holds, do not give the recorded
 * CRC; PN_OK when they do or nothing is recorded. Reads what is left of
 * the tensor through s->in. */
static pn_status check_tensor_crc(tjob *j, stream *s, uint64_t from, pn_error *err)
{
    if (!s->want_crc)
        return PN_OK;
    for (uint64_t off = from; off < j->ti->size;) {
        size_t n = j->ti->size - off < s->in_bytes ? (size_t)(j->ti->size - off) : s->in_bytes;
        pn_status st = gguf_reader_read_tensor(j->r, j->index, off, s->in, n, err);
        if (st)
            return st;
        j->crc = pn_crc32(j->crc, s->in, n);
        off += n;
    }
    const uint32_t want = s->want_crc[j->index];
    if (j->crc == want)
        return PN_OK;
    return pn_error_set(err, PN_ERR_CRC,
                        "%s: tensor '%s' is damaged: the CRC-32 of its %llu data bytes is "
                        "0x%08x, pn.tensor_crc32[%zu] records 0x%08x; it is not decoded",
                        s->path, j->ti->name, (unsigned long long)j->ti->size, j->crc, j->index,
                        want);
}

/* Bytes of tensor i, to the file of the output that holds it. */
static pn_status written(pn_outset *w, size_t i, stream *s, const void *p, size_t n, pn_error *err)
{
    pn_status st = pn_outset_write(w, i, p, n, err);
    if (st)
        return st;
    s->done += n;
    if (s->o->progress)
        s->o->progress(s->o->progress_ctx, s->done, s->total);
    return PN_OK;
}

/* One chunk of a tensor, decoded a segment an item. */
typedef struct chunk_job {
    const tjob *j;
    const stream *s;
    int64_t c0, cn; /* the chunk's elements [c0, c0 + cn) */
} chunk_job;

/* Segment k of the chunk into its place in s->buf, on thread t. */
static pn_status decode_chunk_segment(void *ctx, size_t k, int t, void *fail)
{
    const chunk_job *cj = ctx;
    const tjob *j = cj->j;
    float *y = cj->s->y + (size_t)t * (size_t)cj->s->seg_max;
    int64_t e, m;
    pn_segment_at(&j->cut, cj->c0, cj->c0 + cj->cn, (int64_t)k, &e, &m);
    seg_err r = decode_segment(j, e, m, y, cj->s->buf + (size_t)((e - cj->c0) * j->out_es));
    if (r.st)
        memcpy(fail, &r, sizeof r);
    return r.st;
}

/* Streams one decoded tensor into the writer. The input of each chunk is
 * read into s->in first. */
static pn_status write_decoded(pn_outset *w, tjob *j, stream *s, pn_error *err)
{
    /* chunks of whole segments, so that a chunk is cut as the tensor is */
    const int64_t seg = j->cut.seg;
    int64_t chunk = (int64_t)(s->buf_bytes / (size_t)j->out_es) / seg * seg;
    int64_t in_chunk = (int64_t)(s->in_bytes / (size_t)j->bb) * j->bw / seg * seg;
    if (in_chunk < chunk)
        chunk = in_chunk;
    if (chunk < seg)
        chunk = seg;
    for (int64_t c0 = 0; c0 < j->n; c0 += chunk) {
        if (s->o->cancel && *s->o->cancel)
            return pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted while decoding tensor '%s'",
                                j->ti->name);
        const int64_t cn = j->n - c0 < chunk ? j->n - c0 : chunk;
        const uint64_t in_at = (uint64_t)(c0 / j->bw * j->bb);
        const size_t in_n = (size_t)((cn + j->bw - 1) / j->bw * j->bb);
        pn_status rs = gguf_reader_read_tensor(j->r, j->index, in_at, s->in, in_n, err);
        if (rs)
            return rs;
        if (s->want_crc)
            j->crc = pn_crc32(j->crc, s->in, in_n);
        j->data = s->in;
        j->data_e0 = c0;
        const int64_t nseg = pn_segments_count(&j->cut, c0, c0 + cn);
        seg_err first = { PN_OK, INT64_MAX, AT_ELEM, -1, 0, 0 };
        chunk_job cj = { j, s, c0, cn };
        /* the lowest failing segment holds the lowest failing element, so the
         * message does not depend on the thread count */
        pn_each_first_failure((size_t)nseg, s->nthreads, PN_EACH_RUN_ALL, decode_chunk_segment, &cj,
                              sizeof first, &first, NULL);
        if (first.st) {
            /* damage is named as damage, not as the fault it makes */
            pn_status cs = check_tensor_crc(j, s, in_at + in_n, err);
            return cs ? cs : describe_failure(s->path, j, first, err);
        }
        if (c0 + cn >= j->n && (rs = check_tensor_crc(j, s, j->ti->size, err)))
            return rs;
        pn_status st = written(w, j->index, s, s->buf, (size_t)(cn * j->out_es), err);
        if (st)
            return st;
    }
    return PN_OK;
}

/* Streams a tensor of the output type as it is, checking float weights. */
static pn_status write_copied(pn_outset *w, tjob *j, stream *s, pn_error *err)
{
    const uint64_t total = j->ti->size;
    /* whole elements per chunk, so a value is never split between two */
    size_t step = s->buf_bytes / (size_t)j->bb * (size_t)j->bb;
    if (step == 0)
        step = (size_t)j->bb; /* the buffer has a segment's slack past buf_bytes */
    for (uint64_t off = 0; off < total; off += step) {
        if (s->o->cancel && *s->o->cancel)
            return pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted while copying tensor '%s'",
                                j->ti->name);
        size_t n = total - off < step ? (size_t)(total - off) : step;
        pn_status st = gguf_reader_read_tensor(j->r, j->index, off, s->buf, n, err);
        if (st)
            return st;
        if (s->want_crc)
            j->crc = pn_crc32(j->crc, s->buf, n);
        seg_err e;
        if (find_bad_weight(j->in_type, s->buf, (int64_t)(off / (uint64_t)j->bb),
                            (int64_t)(n / (size_t)j->bb), &e)) {
            pn_status cs = check_tensor_crc(j, s, off + n, err);
            return cs ? cs : describe_failure(s->path, j, e, err);
        }
        if (off + n >= total && (st = check_tensor_crc(j, s, total, err)))
            return st;
        if ((st = written(w, j->index, s, s->buf, n, err)))
            return st;
    }
    return PN_OK;
}

/* Every written file must read back with its planned tensors (and its
 * split keys, pn_outset_open_written). */
static pn_status verify_output(const pn_outset *os, const gguf_reader *in, const int *out_types,
                               pn_error *err)
{
    pn_status st = PN_OK;
    for (size_t sp = 0; !st && sp < pn_outset_n_splits(os); sp++) {
        const char *tmp = pn_outset_path(os, sp);
        const size_t lo = pn_outset_plan(os)->first[sp], hi = pn_outset_plan(os)->first[sp + 1];
        gguf_reader *r = NULL;
        st = pn_outset_open_written(os, sp, &r, err);
        if (st) {
            pn_error_prefix(err, "re-reading the output");
            return st;
        }
        for (size_t i = lo; !st && i < hi; i++) {
            const gguf_tensor_info *a = gguf_reader_tensor(in, i),
                                   *b = gguf_reader_tensor(r, i - lo);
            if (strcmp(a->name, b->name) != 0 || a->n_dims != b->n_dims ||
                memcmp(a->ne, b->ne, sizeof a->ne) != 0 || b->type != out_types[i])
                st = pn_error_set(err, PN_ERR_INTERNAL,
                                  "%s: tensor %zu reads back as '%s' (%s), expected '%s' (%s)", tmp,
                                  i - lo, b->name, pn_type_name(b->type), a->name,
                                  pn_type_name(out_types[i]));
        }
        gguf_reader_close(r);
    }
    return st;
}

static pn_status check_paths(const char *in_path, const char *out_path, bool force, pn_error *err)
{
    struct stat si, so;
    if (stat(out_path, &so) != 0)
        return PN_OK;
    if (stat(in_path, &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        return pn_error_set(err, PN_ERR_USAGE, "%s: the output is the input file", out_path);
    if (S_ISDIR(so.st_mode))
        return pn_error_set(err, PN_ERR_EXISTS, "%s: is a folder; name the output file in it",
                            out_path);
    if (!force)
        return pn_error_set(err, PN_ERR_EXISTS, "%s: exists (use --force to replace it)", out_path);
    return PN_OK;
}

/* Tensor i's job: its types, sizes, rotation block and segment; counted in
 * stats as PN, copied or stock. Refuses a tensor too large to decode or of a
 * type this build cannot decode. */
static pn_status plan_tensor(tjob *j, const gguf_reader *r, size_t i, int out_type, int use_cap,
                             const char *in_path, pn_dequant_stats *stats, bool *has_pn,
                             pn_error *err)
{
    const gguf_tensor_info *ti = gguf_reader_tensor(r, i);
    const pn_type_traits *tt = pn_type_traits_get(ti->type);
    j->r = r;
    j->index = i;
    j->ti = ti;
    j->in_type = ti->type;
    j->out_type = ti->type == PN_TYPE_F32 ? PN_TYPE_F32 : out_type;
    j->K = ti->ne[0];
    j->bw = tt->block_weights;
    j->bb = tt->block_bytes;
    j->out_es = j->out_type == PN_TYPE_F32 ? 4 : 2;
    if (!pn_weight_count(ti->ne, &j->n) || j->n > INT64_MAX / j->out_es)
        return pn_error_set(err, PN_ERR_TENSOR,
                            "%s: tensor '%s': shape %lld x %lld x %lld x %lld holds too many "
                            "weights to decode (more than 2^63 - 1 output bytes)",
                            in_path, ti->name, (long long)ti->ne[0], (long long)ti->ne[1],
                            (long long)ti->ne[2], (long long)ti->ne[3]);
    if (pn_type_is_pn(ti->type)) {
        *has_pn = true;
        stats->n_pn++;
        if (use_cap > 0) {
            j->B = pn_hadamard_block_size(j->K, use_cap);
            stats->rotation_undone = true;
        }
    } else if (j->in_type == j->out_type) {
        stats->n_copied++;
    } else if (pn_type_can(ti->type, PN_CAN_STOCK)) {
        stats->n_stock++;
    } else {
        return pn_error_set(err, PN_ERR_TYPE,
                            "%s: tensor '%s' has type %s, which this build cannot decode", in_path,
                            ti->name, pn_type_name(ti->type));
    }
    j->cut = pn_segments_of(j->bw, j->B);
    return PN_OK;
}

pn_status pn_dequant_file(const char *in_path, const char *out_path, const pn_dequant_opts *opts,
                          pn_dequant_stats *stats, pn_error *err)
{
    pn_dequant_opts o;
    if (opts)
        o = *opts;
    else
        pn_dequant_opts_init(&o);
    if (o.chunk_bytes == 0)
        o.chunk_bytes = (size_t)64 << 20;
    pn_dequant_stats sdummy;
    if (!stats)
        stats = &sdummy;
    memset(stats, 0, sizeof *stats);
    const double t0 = pn_now_seconds();
    if (o.out_type != PN_TYPE_F32 && o.out_type != PN_TYPE_F16 && o.out_type != PN_TYPE_BF16)
        return pn_error_set(err, PN_ERR_USAGE, "output type %s: expected f32, f16 or bf16",
                            pn_type_name(o.out_type));
    const bool split = o.split.mode != GGUF_SPLIT_NONE || o.keep_split;
    /* a split output is checked file by file once planned (DST is a name) */
    pn_status st = split ? PN_OK : check_paths(in_path, out_path, o.force, err);
    if (st)
        return st;

    gguf_reader *r = NULL;
    if ((st = gguf_reader_open(in_path, &r, err)))
        return st;
    const size_t nt = gguf_reader_n_tensors(r);
    tjob *jobs = calloc(nt ? nt : 1, sizeof *jobs);
    int *out_types = calloc(nt ? nt : 1, sizeof *out_types);
    uint8_t *buf = NULL;
    uint32_t *want_crc = NULL;
    stream sm = { 0 };
    pn_outset *os = NULL;
    gguf_writer *w = gguf_writer_new();
    if (!jobs || !out_types || !w) {
        st = pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", in_path);
        goto done;
    }
    gguf_writer_set_header_hash(w, true); /* docs/format.md#the-header-hash */

    int cap = 0;
    bool missing = false;
    /* what pn-check calls an invalid header or tokenizer is not decoded:
     * the output would be a model stock llama.cpp cannot load, or loads
     * wrong */
    if ((st = gguf_model_check_first(r, err)) ||
        (st = read_rotation(r, in_path, &cap, &missing, err)) ||
        (st = read_tensor_crcs(r, &want_crc, err)))
        goto done;
    const int use_cap = o.keep_rotation ? 0 : cap;
    stats->rotation_cap = use_cap;

    bool has_pn = false;
    int64_t seg_max = 1;
    for (size_t i = 0; i < nt; i++) {
        const gguf_tensor_info *ti = gguf_reader_tensor(r, i);
        tjob *j = &jobs[i];
        if ((st = plan_tensor(j, r, i, o.out_type, use_cap, in_path, stats, &has_pn, err)))
            goto done;
        if (j->cut.seg > seg_max)
            seg_max = j->cut.seg;
        out_types[i] = j->out_type;
        if ((st = gguf_writer_add_tensor(w, ti->name, ti->n_dims, ti->ne, j->out_type, err)))
            goto done;
        stats->bytes_in += ti->size;
        stats->bytes_out += (uint64_t)(j->n * j->out_es);
    }
    stats->n_tensors = nt;
    stats->rotation_key_missing = has_pn && missing;
    if ((st = copy_metadata(w, r, o.out_type, has_pn, stats->rotation_undone, err)))
        goto done;

    /* output chunk with a segment's slack (a chunk holds at least one
     * segment), then the input bytes of a chunk (at most 4 bytes a weight
     * against at least 2 out: twice the output chunk), then one segment
     * of floats per thread */
    const size_t slack = (size_t)seg_max * 4;
    const size_t in_bytes = 2 * o.chunk_bytes + slack;
    sm = (stream){ in_path,
                   &o,
                   pn_threads_resolve(o.threads),
                   NULL,
                   seg_max,
                   NULL,
                   o.chunk_bytes,
                   NULL,
                   in_bytes,
                   0,
                   stats->bytes_out,
                   want_crc };
    buf = malloc(o.chunk_bytes + slack + in_bytes);
    sm.y = malloc((size_t)sm.nthreads * (size_t)seg_max * sizeof(float));
    if (!buf || !sm.y) {
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory for a %zu-byte chunk", o.chunk_bytes);
        goto done;
    }
    sm.buf = buf;
    sm.in = buf + o.chunk_bytes + slack;
    /* the files: one, or a split set planned by gguf-split's rules */
    pn_outset_opts oo;
    pn_outset_opts_init(&oo);
    oo.limit = o.split;
    oo.keep_split = o.keep_split ? r : NULL;
    oo.force = o.force;
    if ((st = pn_outset_make(w, out_path, &oo, &os, err)))
        goto done;
    stats->n_files = pn_outset_n_splits(os);
    stats->file_bytes = pn_outset_total_bytes(os);
    if ((st = pn_outset_check_targets(os, r, err)) || (st = pn_outset_begin(os, err)))
        goto done;
    if (o.progress)
        o.progress(o.progress_ctx, 0, sm.total);
    for (size_t i = 0; i < nt && !st; i++) {
        tjob *j = &jobs[i];
        if (j->in_type == j->out_type)
            st = write_copied(os, j, &sm, err);
        else
            st = write_decoded(os, j, &sm, err);
    }
    if (!st)
        st = pn_outset_close(os, err);
    if (!st)
        st = verify_output(os, r, out_types, err);
    if (!st)
        st = pn_outset_commit(os, err);

done:
    pn_outset_free(os); /* aborts what is not committed */
    gguf_writer_free(w);
    free(sm.y);
    free(buf);
    free(out_types);
    free(jobs);
    free(want_crc);
    gguf_reader_close(r);
    stats->seconds = pn_now_seconds() - t0;
    return st;
}
