/* gguf_header.c - a GGUF header parsed and validated, whole, from the bytes
 * a reader holds (gguf_reader.c reads them; gguf_parse_header_ in
 * gguf_internal.h).
 *
 * Reading order follows the file: magic and version, the two counts, the
 * key/value pairs, the tensor infos, the padding before the data. Then the
 * checks that need everything at once: duplicate keys and names (by sorting),
 * every tensor's bytes inside the file, and no two tensors overlapping (by
 * sorting offsets). Opened leniently, the checks of where tensor data lies
 * (offset alignment, inside the file, no overlap) are skipped.
 *
 * Hostile input is the normal case here (the fuzzer feeds it), so:
 *   - every read goes through `need`, which compares against the bytes left;
 *   - a count is compared with the bytes left before anything is sized from
 *     it, and arrays grow as items are actually parsed, so memory stays
 *     proportional to the header bytes walked, never to a claimed count;
 *   - all size arithmetic is done in uint64 with overflow checks;
 *   - nesting of arrays is bounded, so recursion depth is too.
 */
#include "gguf/gguf.h"
#include "common/byte_order.h"
#include "gguf/gguf_internal.h"

#include "quant/types.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Smallest possible encodings, used to bound counts by the bytes left. */
enum {
    MIN_KV_BYTES = 8 + 4 + 1,                  /* empty key, type, a one-byte value */
    MIN_TENSOR_INFO_BYTES = 8 + 4 + 8 + 4 + 8, /* empty name, 1 dim */
    MIN_STRING_BYTES = 8,
    MIN_ARRAY_BYTES = 4 + 8,
    HEADER_BYTES = 4 + 4 + 8 + 8,
};

/* ------------------------------------------------------------------ */
/* Cursor over the file with checked reads                             */

typedef struct parser {
    gguf_reader *r;
    uint64_t pos;
    pn_error *err;
    /* The key or tensor being read, named in truncation messages. */
    const char *item_kind; /* "key", "tensor" or NULL */
    gguf_str item_name;
    uint64_t want; /* bytes the buffer must hold for the parse to go on */
} parser;

/* The bytes [pos, pos + n) are in the file; are they in the buffer? */
static pn_status in_buffer(parser *ps, uint64_t n)
{
    if (ps->pos + n <= ps->r->avail)
        return PN_OK;
    ps->want = ps->pos + n;
    return GGUF_NEED_MORE_;
}

/* "<file>: at byte <at>: <message>" */
static pn_status fail(const parser *ps, pn_status code, uint64_t at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static pn_status fail(const parser *ps, pn_status code, uint64_t at, const char *fmt, ...)
{
    char msg[PN_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pn_error_set(ps->err, code, "%s: at byte %llu: %s", ps->r->name, (unsigned long long)at,
                        msg);
}

static uint64_t bytes_left(const parser *ps)
{
    return ps->r->size - ps->pos;
}

#define QUOTE_MAX 112

/* A key or name from the file, quoted for a message: printable ASCII kept,
 * other bytes as \xNN, long ones cut with "...". */
static const char *quoted(gguf_str s, char *buf, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    buf[o++] = '\'';
    for (uint64_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.data[i];
        if (o + 8 >= cap) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
            buf[o++] = (char)c;
        } else {
            buf[o++] = '\\';
            buf[o++] = 'x';
            buf[o++] = hex[c >> 4];
            buf[o++] = hex[c & 15];
        }
    }
    buf[o++] = '\'';
    buf[o] = '\0';
    return buf;
}

/* Quotes a gguf_str into a buffer that lives until the end of the block. */
#define Q(s) quoted((s), (char[QUOTE_MAX]){ 0 }, QUOTE_MAX)

/* "key 'x': " or "tensor 'y': " while inside one, else "". */
static const char *item_context(const parser *ps, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (ps->item_kind)
        snprintf(buf, cap, "%s %s: ", ps->item_kind, Q(ps->item_name));
    return buf;
}

/* `what` names the field for a message; when `index` is not NO_INDEX it is
 * printed after it ("the name of tensor info 3"). Nothing is formatted
 * unless the read fails: this runs for every field of every header. */
#define NO_INDEX UINT64_MAX

/* The longest string a header may hold: 4 GiB - 1 (read_str). */
#define STRING_LENGTH_MAX UINT64_C(0xFFFFFFFF)

static pn_status need(parser *ps, uint64_t n, const char *what, uint64_t index)
{
    if (n > bytes_left(ps)) {
        char num[24] = "";
        if (index != NO_INDEX)
            snprintf(num, sizeof num, " %llu", (unsigned long long)index);
        char ctx[QUOTE_MAX + 16];
        return fail(ps, PN_ERR_TRUNCATED, ps->pos,
                    "%s%s%s needs %llu bytes, but the file ends after %llu (file size %llu)",
                    item_context(ps, ctx, sizeof ctx), what, num, (unsigned long long)n,
                    (unsigned long long)bytes_left(ps), (unsigned long long)ps->r->size);
    }
    return in_buffer(ps, n);
}

static pn_status read_u32(parser *ps, uint32_t *v, const char *what)
{
    pn_status st = need(ps, 4, what, NO_INDEX);
    if (st)
        return st;
    *v = (uint32_t)pn_load_le(ps->r->base + ps->pos, 4);
    ps->pos += 4;
    return PN_OK;
}

static pn_status read_u64_at(parser *ps, uint64_t *v, const char *what, uint64_t index)
{
    pn_status st = need(ps, 8, what, index);
    if (st)
        return st;
    *v = pn_load_le(ps->r->base + ps->pos, 8);
    ps->pos += 8;
    return PN_OK;
}

static pn_status read_u64(parser *ps, uint64_t *v, const char *what)
{
    return read_u64_at(ps, v, what, NO_INDEX);
}

static pn_status read_str(parser *ps, gguf_str *s, const char *what, uint64_t index)
{
    uint64_t len;
    pn_status st = read_u64_at(ps, &len, what, index);
    if (st)
        return st;
    /* A length past the end is a file cut inside the string, unless no
     * file of this size could hold it (more bytes than the whole file) or
     * no header string is that long (4 GiB or more): then the length
     * itself is damaged, a GGUF string length being 8 bytes any bit flip
     * or overwrite makes huge. */
    if (len > bytes_left(ps) || len > STRING_LENGTH_MAX) {
        char num[24] = "";
        if (index != NO_INDEX)
            snprintf(num, sizeof num, " %llu", (unsigned long long)index);
        char ctx[QUOTE_MAX + 16];
        const uint64_t at = ps->pos - 8;
        if (len > ps->r->size || len > STRING_LENGTH_MAX)
            return fail(ps, PN_ERR_STRING_LENGTH, at,
                        "%s%s%s: damaged string length: the length field at byte %llu reads "
                        "%llu bytes, %s (the file is %llu bytes, %llu of them after the "
                        "length field)",
                        item_context(ps, ctx, sizeof ctx), what, num, (unsigned long long)at,
                        (unsigned long long)len,
                        len > ps->r->size ? "more than the whole file"
                                          : "more than any GGUF header string (at most 4 GiB)",
                        (unsigned long long)ps->r->size, (unsigned long long)bytes_left(ps));
        return fail(ps, PN_ERR_TRUNCATED, at,
                    "%s%s%s: string of %llu bytes, but the file ends after %llu",
                    item_context(ps, ctx, sizeof ctx), what, num, (unsigned long long)len,
                    (unsigned long long)bytes_left(ps));
    }
    if ((st = in_buffer(ps, len)))
        return st;
    s->len = len;
    s->data = (const char *)ps->r->base + ps->pos;
    ps->pos += len;
    return PN_OK;
}


/* Grows *arr (of *cap elements of `elem` bytes) to hold one more. */
static bool grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return true;
    size_t nc = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, nc * elem);
    if (!p)
        return false;
    *arr = p;
    *cap = nc;
    return true;
}

/* ------------------------------------------------------------------ */
/* Header: magic, version, counts                                      */

static pn_status parse_magic_and_version(parser *ps)
{
    const gguf_reader *r = ps->r;
    static const uint8_t magic[4] = { 'G', 'G', 'U', 'F' };
    if (r->size < 4) {
        if (memcmp(r->base, magic, r->size) == 0)
            return fail(ps, PN_ERR_TRUNCATED, 0,
                        "the file is %llu bytes, too short for the GGUF magic",
                        (unsigned long long)r->size);
        return fail(ps, PN_ERR_BAD_MAGIC, 0, "not a GGUF file: %llu bytes, no \"GGUF\" magic",
                    (unsigned long long)r->size);
    }
    if (memcmp(r->base, "FUGG", 4) == 0)
        return fail(ps, PN_ERR_VERSION, 0,
                    "big-endian GGUF file (magic reads \"FUGG\"); only little-endian files "
                    "are supported");
    if (memcmp(r->base, magic, 4) != 0)
        return fail(ps, PN_ERR_BAD_MAGIC, 0,
                    "not a GGUF file: magic is %02x %02x %02x %02x, expected 47 47 55 46 "
                    "(\"GGUF\")",
                    r->base[0], r->base[1], r->base[2], r->base[3]);
    ps->pos = 4;
    uint32_t v;
    pn_status st = read_u32(ps, &v, "the version");
    if (st)
        return st;
    if (v == 2 || v == 3) {
        ps->r->version = v;
        return PN_OK;
    }
    if (v == 1)
        return fail(ps, PN_ERR_VERSION, 4,
                    "GGUF v1 is not supported (32-bit counts); only v2 and v3 are read");
    uint32_t swapped = __builtin_bswap32(v);
    if (swapped >= 1 && swapped <= 3)
        return fail(ps, PN_ERR_VERSION, 4,
                    "big-endian GGUF file: the version reads 0x%08x little-endian, i.e. v%u "
                    "big-endian; only little-endian files are supported",
                    v, swapped);
    return fail(ps, PN_ERR_VERSION, 4, "unsupported GGUF version %u (0x%08x); expected 2 or 3", v,
                v);
}

static pn_status parse_counts(parser *ps, uint64_t *n_tensors, uint64_t *n_kv)
{
    pn_status st = read_u64(ps, n_tensors, "the tensor count");
    if (!st)
        st = read_u64(ps, n_kv, "the key/value count");
    if (st)
        return st;
    uint64_t left = bytes_left(ps);
    /* Each bound alone keeps the sum below 2 * left: no overflow. */
    if (*n_kv > left / MIN_KV_BYTES || *n_tensors > left / MIN_TENSOR_INFO_BYTES ||
        *n_kv * MIN_KV_BYTES + *n_tensors * MIN_TENSOR_INFO_BYTES > left)
        return fail(ps, PN_ERR_TRUNCATED, 8,
                    "the header declares %llu tensors and %llu key/value pairs, which need "
                    "at least %d and %d bytes each, but only %llu bytes follow (a truncated "
                    "file or a corrupt count)",
                    (unsigned long long)*n_tensors, (unsigned long long)*n_kv,
                    MIN_TENSOR_INFO_BYTES, MIN_KV_BYTES, (unsigned long long)left);
    return PN_OK;
}

/* ------------------------------------------------------------------ */
/* Key/value pairs                                                     */

static pn_status check_value_type(const parser *ps, uint32_t t, uint64_t at, gguf_str key,
                                  const char *what)
{
    if (t >= GGUF_TYPE_COUNT_)
        return fail(ps, PN_ERR_FORMAT, at, "key %s: unknown %s %u, expected 0..%d", Q(key), what, t,
                    GGUF_TYPE_COUNT_ - 1);
    return PN_OK;
}

/* Walks `count` elements of type `et` at the cursor, checking every length.
 * Work is bounded by the bytes walked: each element takes at least 1 byte. */
static pn_status walk_array(parser *ps, gguf_value_type et, uint64_t count, int depth, gguf_str key)
{
    uint64_t at = ps->pos;
    if (depth > GGUF_MAX_ARRAY_DEPTH)
        return fail(ps, PN_ERR_FORMAT, at, "key %s: arrays nested deeper than %d", Q(key),
                    GGUF_MAX_ARRAY_DEPTH);
    size_t es = gguf_value_type_size(et);
    uint64_t min = es ? es : et == GGUF_TYPE_STRING ? MIN_STRING_BYTES : MIN_ARRAY_BYTES;
    if (count > bytes_left(ps) / min)
        return fail(ps, PN_ERR_TRUNCATED, at,
                    "key %s: array of %llu %s elements needs at least %llu bytes each, but "
                    "only %llu bytes are left",
                    Q(key), (unsigned long long)count, gguf_value_type_name(et),
                    (unsigned long long)min, (unsigned long long)bytes_left(ps));
    if (es) {
        pn_status st = in_buffer(ps, count * es);
        if (st)
            return st;
        if (et == GGUF_TYPE_BOOL) {
            const uint8_t *p = ps->r->base + ps->pos;
            for (uint64_t i = 0; i < count; i++)
                if (p[i] > 1)
                    return fail(ps, PN_ERR_FORMAT, ps->pos + i,
                                "key %s: bool element %llu is %u, expected 0 or 1", Q(key),
                                (unsigned long long)i, p[i]);
        }
        ps->pos += count * es;
        return PN_OK;
    }
    for (uint64_t i = 0; i < count; i++) {
        pn_status st;
        if (et == GGUF_TYPE_STRING) {
            gguf_str s;
            st = read_str(ps, &s, "string element", i);
        } else {
            uint32_t sub;
            uint64_t n;
            uint64_t sub_at = ps->pos;
            st = read_u32(ps, &sub, "a nested array's element type");
            if (!st)
                st = check_value_type(ps, sub, sub_at, key, "nested array element type");
            if (!st)
                st = read_u64(ps, &n, "a nested array's count");
            if (!st)
                st = walk_array(ps, (gguf_value_type)sub, n, depth + 1, key);
        }
        if (st)
            return st;
    }
    return PN_OK;
}

static pn_status parse_value(parser *ps, gguf_kv *kv)
{
    uint64_t at = ps->pos;
    size_t n = gguf_value_type_size(kv->type);
    pn_status st;
    if (n) {
        if ((st = need(ps, n, "the value", NO_INDEX)))
            return st;
        uint64_t bits = pn_load_le(ps->r->base + at, n);
        ps->pos += n;
        switch (kv->type) {
        case GGUF_TYPE_INT8: kv->v.i64 = (int8_t)bits; break;
        case GGUF_TYPE_INT16: kv->v.i64 = (int16_t)bits; break;
        case GGUF_TYPE_INT32: kv->v.i64 = (int32_t)bits; break;
        case GGUF_TYPE_INT64: kv->v.i64 = (int64_t)bits; break;
        case GGUF_TYPE_FLOAT32: {
            uint32_t b = (uint32_t)bits;
            float f;
            memcpy(&f, &b, sizeof f);
            kv->v.f64 = f;
            break;
        }
        case GGUF_TYPE_FLOAT64: memcpy(&kv->v.f64, &bits, sizeof kv->v.f64); break;
        case GGUF_TYPE_BOOL:
            if (bits > 1)
                return fail(ps, PN_ERR_FORMAT, at, "key %s: bool value is %u, expected 0 or 1",
                            Q(kv->key), (unsigned)bits);
            kv->v.u64 = bits;
            break;
        default: kv->v.u64 = bits; break;
        }
        return PN_OK;
    }
    if (kv->type == GGUF_TYPE_STRING)
        return read_str(ps, &kv->v.str, "the string value", NO_INDEX);

    uint32_t et;
    if ((st = read_u32(ps, &et, "the array element type")))
        return st;
    if ((st = check_value_type(ps, et, at, kv->key, "array element type")))
        return st;
    if ((st = read_u64(ps, &kv->arr_count, "the array count")))
        return st;
    kv->arr_type = (gguf_value_type)et;
    kv->arr_data = ps->r->base + ps->pos;
    uint64_t start = ps->pos;
    if ((st = walk_array(ps, kv->arr_type, kv->arr_count, 1, kv->key)))
        return st;
    kv->arr_bytes = ps->pos - start;
    return PN_OK;
}

static pn_status parse_kvs(parser *ps, uint64_t n_kv)
{
    gguf_reader *r = ps->r;
    size_t cap = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        if (!grow((void **)&r->kvs, &cap, r->n_kv, sizeof *r->kvs))
            return pn_error_set(ps->err, PN_ERR_NOMEM, "%s: out of memory reading keys", r->name);
        gguf_kv *kv = &r->kvs[r->n_kv];
        memset(kv, 0, sizeof *kv);
        ps->item_kind = NULL;
        uint64_t key_at = ps->pos;
        pn_status st = read_str(ps, &kv->key, "the key of key/value pair", i);
        if (st)
            return st;
        if (kv->key.len == 0)
            return fail(ps, PN_ERR_FORMAT, key_at, "key/value pair %llu has an empty key",
                        (unsigned long long)i);
        if (memchr(kv->key.data, '\0', kv->key.len))
            return fail(ps, PN_ERR_FORMAT, key_at,
                        "the key of key/value pair %llu, %s, holds a NUL byte",
                        (unsigned long long)i, Q(kv->key));
        ps->item_kind = "key";
        ps->item_name = kv->key;
        uint64_t type_at = ps->pos;
        uint32_t t;
        if ((st = read_u32(ps, &t, "the value type")))
            return st;
        if ((st = check_value_type(ps, t, type_at, kv->key, "value type")))
            return st;
        kv->type = (gguf_value_type)t;
        if ((st = parse_value(ps, kv)))
            return st;
        r->n_kv++;
    }
    ps->item_kind = NULL;
    return PN_OK;
}

static int cmp_str(gguf_str a, gguf_str b)
{
    uint64_t n = a.len < b.len ? a.len : b.len;
    int c = n ? memcmp(a.data, b.data, n) : 0;
    if (c)
        return c;
    return (a.len > b.len) - (a.len < b.len);
}

static int cmp_kv_by_key(const void *a, const void *b)
{
    const gguf_kv *x = *(const gguf_kv *const *)a, *y = *(const gguf_kv *const *)b;
    int c = cmp_str(x->key, y->key);
    return c ? c : (x > y) - (x < y); /* stable: file order among equals */
}

static uint64_t key_offset(const gguf_reader *r, const gguf_kv *kv)
{
    return (uint64_t)((const uint8_t *)kv->key.data - r->base) - 8;
}

static pn_status index_keys(parser *ps)
{
    gguf_reader *r = ps->r;
    if (r->n_kv == 0)
        return PN_OK;
    r->kv_by_key = malloc(r->n_kv * sizeof *r->kv_by_key);
    if (!r->kv_by_key)
        return pn_error_set(ps->err, PN_ERR_NOMEM, "%s: out of memory", r->name);
    for (size_t i = 0; i < r->n_kv; i++)
        r->kv_by_key[i] = &r->kvs[i];
    qsort(r->kv_by_key, r->n_kv, sizeof *r->kv_by_key, cmp_kv_by_key);
    for (size_t i = 1; i < r->n_kv; i++) {
        const gguf_kv *a = r->kv_by_key[i - 1], *b = r->kv_by_key[i];
        if (cmp_str(a->key, b->key) == 0) {
            return fail(ps, PN_ERR_FORMAT, key_offset(r, b),
                        "duplicate key %s (first at byte %llu)", Q(b->key),
                        (unsigned long long)key_offset(r, a));
        }
    }
    return PN_OK;
}

static pn_status read_alignment(parser *ps)
{
    gguf_reader *r = ps->r;
    r->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_reader_find_kv(r, "general.alignment");
    if (!kv)
        return PN_OK;
    uint64_t at = key_offset(r, kv) + 8 + kv->key.len + 4;
    if (kv->type != GGUF_TYPE_UINT32 && kv->type != GGUF_TYPE_UINT8 &&
        kv->type != GGUF_TYPE_UINT16 && kv->type != GGUF_TYPE_UINT64)
        return fail(ps, PN_ERR_ALIGNMENT, at,
                    "key 'general.alignment' has type %s, expected an unsigned integer (uint32)",
                    gguf_value_type_name(kv->type));
    uint64_t a = kv->v.u64;
    if (a == 0 || (a & (a - 1)) != 0)
        return fail(ps, PN_ERR_ALIGNMENT, at,
                    "key 'general.alignment' is %llu, expected a power of two",
                    (unsigned long long)a);
    r->alignment = a;
    return PN_OK;
}

/* ------------------------------------------------------------------ */
/* Tensor infos                                                        */


static pn_status parse_tensor_info(parser *ps, uint64_t i, gguf_tensor_info *ti)
{
    gguf_reader *r = ps->r;
    ti->info_offset = ps->pos;
    gguf_str name;
    ps->item_kind = NULL;
    pn_status st = read_str(ps, &name, "the name of tensor info", i);
    if (st)
        return st;
    ps->item_kind = "tensor";
    ps->item_name = name;
    if (name.len == 0)
        return fail(ps, PN_ERR_TENSOR, ti->info_offset, "tensor info %llu has an empty name",
                    (unsigned long long)i);
    if (memchr(name.data, '\0', name.len))
        return fail(ps, PN_ERR_TENSOR, ti->info_offset, "tensor %s: the name holds a NUL byte",
                    Q(name));
    ti->name = malloc(name.len + 1);
    if (!ti->name)
        return pn_error_set(ps->err, PN_ERR_NOMEM, "%s: out of memory", r->name);
    memcpy(ti->name, name.data, name.len);
    ti->name[name.len] = '\0';

    uint64_t at = ps->pos;
    if ((st = read_u32(ps, &ti->n_dims, "n_dims")))
        return st;
    if (ti->n_dims < 1 || ti->n_dims > GGUF_MAX_DIMS)
        return fail(ps, PN_ERR_TENSOR, at, "tensor %s: n_dims is %u, expected 1..%d", Q(name),
                    ti->n_dims, GGUF_MAX_DIMS);
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        ti->ne[d] = 1;
    for (uint32_t d = 0; d < ti->n_dims; d++) {
        uint64_t ne;
        at = ps->pos;
        if ((st = read_u64(ps, &ne, "a dimension")))
            return st;
        if (ne < 1 || ne > INT64_MAX)
            return fail(ps, PN_ERR_TENSOR, at, "tensor %s: ne[%u] is %llu, expected 1..2^63-1",
                        Q(name), d, (unsigned long long)ne);
        ti->ne[d] = (int64_t)ne;
    }
    uint32_t type;
    at = ps->pos;
    if ((st = read_u32(ps, &type, "the tensor type")))
        return st;
    const pn_type_traits *tt = type <= INT_MAX ? pn_type_traits_get((int)type) : NULL;
    if (!tt)
        return fail(ps, PN_ERR_TYPE, at, "tensor %s: unknown ggml type id %u", Q(name), type);
    ti->type = (int)type;
    uint64_t off_at = ps->pos;
    if ((st = read_u64(ps, &ti->offset, "the data offset")))
        return st;

    if (ti->ne[0] % tt->block_weights != 0)
        return fail(ps, PN_ERR_TENSOR, ti->info_offset,
                    "tensor %s: row length ne[0] = %lld is not a multiple of the %s block "
                    "of %lld weights",
                    Q(name), (long long)ti->ne[0], tt->name, (long long)tt->block_weights);
    uint64_t size = (uint64_t)(ti->ne[0] / tt->block_weights);
    bool overflow = __builtin_mul_overflow(size, (uint64_t)tt->block_bytes, &size);
    for (int d = 1; d < GGUF_MAX_DIMS; d++)
        overflow |= __builtin_mul_overflow(size, (uint64_t)ti->ne[d], &size);
    if (overflow)
        return fail(ps, PN_ERR_TENSOR, ti->info_offset,
                    "tensor %s: size of %lld x %lld x %lld x %lld %s overflows 64 bits", Q(name),
                    (long long)ti->ne[0], (long long)ti->ne[1], (long long)ti->ne[2],
                    (long long)ti->ne[3], tt->name);
    ti->size = size;
    if (!r->lenient && ti->offset % r->alignment != 0)
        return fail(ps, PN_ERR_ALIGNMENT, off_at,
                    "tensor %s: data offset %llu is not a multiple of the alignment %llu", Q(name),
                    (unsigned long long)ti->offset, (unsigned long long)r->alignment);
    return PN_OK;
}

static pn_status parse_tensor_infos(parser *ps, uint64_t n_tensors)
{
    gguf_reader *r = ps->r;
    size_t cap = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (!grow((void **)&r->tensors, &cap, r->n_tensors, sizeof *r->tensors))
            return pn_error_set(ps->err, PN_ERR_NOMEM, "%s: out of memory reading tensors",
                                r->name);
        gguf_tensor_info *ti = &r->tensors[r->n_tensors];
        memset(ti, 0, sizeof *ti);
        r->n_tensors++; /* counted now so that close frees its name on failure */
        pn_status st = parse_tensor_info(ps, i, ti);
        if (st)
            return st;
    }
    ps->item_kind = NULL;
    return PN_OK;
}

static pn_status place_data_section(parser *ps)
{
    gguf_reader *r = ps->r;
    uint64_t pad = (r->alignment - ps->pos % r->alignment) % r->alignment;
    if (r->lenient) {
        if (__builtin_add_overflow(ps->pos, pad, &r->data_offset))
            r->data_offset = UINT64_MAX; /* past any file: no tensor is inside */
        return PN_OK;
    }
    if (pad > bytes_left(ps))
        return fail(ps, PN_ERR_TRUNCATED, ps->pos,
                    "padding to the alignment %llu: the data section would start at byte "
                    "%llu, but the file is %llu bytes",
                    (unsigned long long)r->alignment, (unsigned long long)(ps->pos + pad),
                    (unsigned long long)r->size);
    r->data_offset = ps->pos + pad;
    for (size_t i = 0; i < r->n_tensors; i++) {
        const gguf_tensor_info *ti = &r->tensors[i];
        uint64_t start, end;
        if (__builtin_add_overflow(r->data_offset, ti->offset, &start) ||
            __builtin_add_overflow(start, ti->size, &end))
            return fail(ps, PN_ERR_TENSOR, ti->info_offset,
                        "tensor '%s': data offset %llu + size %llu overflows 64 bits", ti->name,
                        (unsigned long long)ti->offset, (unsigned long long)ti->size);
        if (end > r->size)
            return fail(ps, PN_ERR_TRUNCATED, ti->info_offset,
                        "tensor '%s': data at file bytes [%llu, %llu) ends past the end of "
                        "the file (size %llu)",
                        ti->name, (unsigned long long)start, (unsigned long long)end,
                        (unsigned long long)r->size);
    }
    return PN_OK;
}

static int cmp_tensor_by_name(const void *a, const void *b)
{
    const gguf_tensor_info *x = *(const gguf_tensor_info *const *)a;
    const gguf_tensor_info *y = *(const gguf_tensor_info *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x > y) - (x < y);
}

static int cmp_tensor_by_offset(const void *a, const void *b)
{
    const gguf_tensor_info *x = *(const gguf_tensor_info *const *)a;
    const gguf_tensor_info *y = *(const gguf_tensor_info *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return (x > y) - (x < y);
}

static pn_status check_names_and_overlap(parser *ps)
{
    gguf_reader *r = ps->r;
    size_t n = r->n_tensors;
    if (n == 0)
        return PN_OK;
    r->tensor_by_name = malloc(n * sizeof *r->tensor_by_name);
    const gguf_tensor_info **by_off = malloc(n * sizeof *by_off);
    if (!r->tensor_by_name || !by_off) {
        free(by_off);
        return pn_error_set(ps->err, PN_ERR_NOMEM, "%s: out of memory", r->name);
    }
    for (size_t i = 0; i < n; i++)
        r->tensor_by_name[i] = by_off[i] = &r->tensors[i];

    qsort(r->tensor_by_name, n, sizeof *r->tensor_by_name, cmp_tensor_by_name);
    pn_status st = PN_OK;
    for (size_t i = 1; i < n && !st; i++) {
        const gguf_tensor_info *a = r->tensor_by_name[i - 1], *b = r->tensor_by_name[i];
        if (strcmp(a->name, b->name) == 0)
            st = fail(ps, PN_ERR_TENSOR, b->info_offset,
                      "duplicate tensor name '%s' (tensor infos %zu and %zu, the first at "
                      "byte %llu)",
                      b->name, (size_t)(a - r->tensors), (size_t)(b - r->tensors),
                      (unsigned long long)a->info_offset);
    }

    if (!r->lenient)
        qsort(by_off, n, sizeof *by_off, cmp_tensor_by_offset);
    for (size_t i = 1; i < n && !st && !r->lenient; i++) {
        const gguf_tensor_info *a = by_off[i - 1], *b = by_off[i];
        /* place_data_section ruled out overflow of offset + size. */
        if (a->offset + a->size > b->offset)
            st =
                fail(ps, PN_ERR_TENSOR, b->info_offset,
                     "tensors '%s' (data bytes [%llu, %llu)) and '%s' (from %llu) overlap", a->name,
                     (unsigned long long)a->offset, (unsigned long long)(a->offset + a->size),
                     b->name, (unsigned long long)b->offset);
    }
    free(by_off);
    return st;
}

/* ------------------------------------------------------------------ */
/* The whole header                                                    */

pn_status gguf_parse_header_(gguf_reader *r, uint64_t *want, pn_error *err)
{
    parser ps = { .r = r, .pos = 0, .err = err };
    uint64_t n_tensors, n_kv;
    pn_status st = parse_magic_and_version(&ps);
    if (!st)
        st = parse_counts(&ps, &n_tensors, &n_kv);
    if (!st)
        st = parse_kvs(&ps, n_kv);
    if (!st)
        st = index_keys(&ps);
    if (!st)
        st = read_alignment(&ps);
    if (!st)
        st = parse_tensor_infos(&ps, n_tensors);
    if (!st)
        st = place_data_section(&ps);
    if (!st)
        st = check_names_and_overlap(&ps);
    if (want)
        *want = ps.want;
    return st;
}

/* ------------------------------------------------------------------ */
/* The keys, by index and by name (the index index_keys built)          */

uint64_t gguf_reader_key_offset_(const gguf_reader *r, const gguf_kv *kv)
{
    return key_offset(gguf_file_of_(r), kv);
}

const gguf_kv *gguf_reader_kv(const gguf_reader *r, size_t i)
{
    r = gguf_file_of_(r);
    return i < r->n_kv ? &r->kvs[i] : NULL;
}

const gguf_kv *gguf_reader_find_kv(const gguf_reader *r, const char *key)
{
    r = gguf_file_of_(r);
    if (!key)
        return NULL;
    gguf_str want = { strlen(key), key };
    size_t lo = 0, hi = r->kv_by_key ? r->n_kv : 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp_str(r->kv_by_key[mid]->key, want);
        if (c == 0)
            return r->kv_by_key[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}
