/* gguf_value.c - GGUF value types and the element accessors of array values.
 *
 * The accessors read elements straight from the bytes the reader validated,
 * so they trust the structure (lengths of strings, nesting) and only guard
 * against being called on the wrong kind of array.
 */
#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "common/byte_order.h"

#include <string.h>

static const char *const value_type_names[GGUF_TYPE_COUNT_] = {
    [GGUF_TYPE_UINT8] = "uint8",     [GGUF_TYPE_INT8] = "int8",     [GGUF_TYPE_UINT16] = "uint16",
    [GGUF_TYPE_INT16] = "int16",     [GGUF_TYPE_UINT32] = "uint32", [GGUF_TYPE_INT32] = "int32",
    [GGUF_TYPE_FLOAT32] = "float32", [GGUF_TYPE_BOOL] = "bool",     [GGUF_TYPE_STRING] = "string",
    [GGUF_TYPE_ARRAY] = "array",     [GGUF_TYPE_UINT64] = "uint64", [GGUF_TYPE_INT64] = "int64",
    [GGUF_TYPE_FLOAT64] = "float64",
};

const char *gguf_value_type_name(gguf_value_type t)
{
    if ((unsigned)t >= GGUF_TYPE_COUNT_)
        return "unknown";
    return value_type_names[t];
}

size_t gguf_value_type_size(gguf_value_type t)
{
    switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
    case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

static bool is_signed(gguf_value_type t)
{
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

static bool is_float(gguf_value_type t)
{
    return t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64;
}

static int64_t sign_extend(uint64_t v, size_t bytes)
{
    if (bytes >= 8)
        return (int64_t)v;
    unsigned shift = (unsigned)(64 - 8 * bytes);
    /* Two's-complement reinterpretation, then an arithmetic shift. */
    return (int64_t)(v << shift) >> shift;
}

static double bits_to_double(uint64_t bits, size_t bytes)
{
    if (bytes == 4) {
        uint32_t b = (uint32_t)bits;
        float f;
        memcpy(&f, &b, sizeof f);
        return f;
    }
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* Raw bits of fixed-size element i, or false for a string/array/NULL kv. */
static bool element_bits(const gguf_kv *kv, uint64_t i, uint64_t *bits, size_t *size)
{
    if (!kv || kv->type != GGUF_TYPE_ARRAY)
        return false;
    size_t n = gguf_value_type_size(kv->arr_type);
    if (n == 0 || i >= kv->arr_count)
        return false;
    *bits = pn_load_le(kv->arr_data + i * n, n);
    *size = n;
    return true;
}

uint64_t gguf_kv_arr_u64(const gguf_kv *kv, uint64_t i)
{
    uint64_t bits;
    size_t n;
    if (!element_bits(kv, i, &bits, &n) || is_float(kv->arr_type))
        return 0;
    if (is_signed(kv->arr_type))
        return (uint64_t)sign_extend(bits, n);
    return bits;
}

/* The same two's-complement bits as gguf_kv_arr_u64 (a signed element
 * sign-extended, an unsigned one as it is), read as signed. */
int64_t gguf_kv_arr_i64(const gguf_kv *kv, uint64_t i)
{
    return (int64_t)gguf_kv_arr_u64(kv, i);
}

double gguf_kv_arr_f64(const gguf_kv *kv, uint64_t i)
{
    uint64_t bits;
    size_t n;
    if (!element_bits(kv, i, &bits, &n))
        return 0.0;
    if (is_float(kv->arr_type))
        return bits_to_double(bits, n);
    if (is_signed(kv->arr_type))
        return (double)sign_extend(bits, n);
    return (double)bits;
}

/* Bytes taken by one serialized value of type t starting at p (t is a
 * string or an array; the reader has checked that it fits). */
static uint64_t value_span(gguf_value_type t, const uint8_t *p)
{
    size_t fixed = gguf_value_type_size(t);
    if (fixed)
        return fixed;
    if (t == GGUF_TYPE_STRING)
        return 8 + pn_load_le(p, 8);
    /* ARRAY: u32 element type, u64 count, elements. */
    gguf_value_type et = (gguf_value_type)pn_load_le(p, 4);
    uint64_t count = pn_load_le(p + 4, 8);
    size_t es = gguf_value_type_size(et);
    if (es)
        return 12 + count * es;
    uint64_t off = 12;
    for (uint64_t k = 0; k < count; k++)
        off += value_span(et, p + off);
    return off;
}

gguf_str gguf_kv_arr_str(const gguf_kv *kv, uint64_t i)
{
    gguf_str s = { 0, "" };
    if (!kv || kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_STRING ||
        i >= kv->arr_count)
        return s;
    const uint8_t *p = kv->arr_data;
    for (uint64_t k = 0; k < i; k++)
        p += 8 + pn_load_le(p, 8);
    s.len = pn_load_le(p, 8);
    s.data = (const char *)p + 8;
    return s;
}

gguf_kv gguf_kv_arr_arr(const gguf_kv *kv, uint64_t i)
{
    gguf_kv out;
    memset(&out, 0, sizeof out);
    if (!kv || kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_ARRAY || i >= kv->arr_count)
        return out;
    const uint8_t *p = kv->arr_data;
    for (uint64_t k = 0; k < i; k++)
        p += value_span(GGUF_TYPE_ARRAY, p);
    out.key.data = "";
    out.type = GGUF_TYPE_ARRAY;
    out.arr_type = (gguf_value_type)pn_load_le(p, 4);
    out.arr_count = pn_load_le(p + 4, 8);
    out.arr_data = p + 12;
    out.arr_bytes = value_span(GGUF_TYPE_ARRAY, p) - 12;
    return out;
}

bool gguf_str_eq(gguf_str s, const char *c)
{
    if (!c)
        return false;
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.data, c, n) == 0);
}
