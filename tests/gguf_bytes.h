/* gguf_bytes.h - GGUF files byte by byte, for hostile inputs that the
 * project's writer refuses to make (an empty key, a shape of 2^63 weights, a
 * tensor table where every tensor overlaps) or makes too slowly to be a test
 * fixture (hundreds of thousands of entries). Header-only, like
 * pn_model_fixture.h: each test program is one translation unit.
 *
 * Usage: gb_header, then the keys (gb_kv_*), then the tensor infos
 * (gb_tensor), then gb_pad to the alignment, then the data (gb_put), then
 * gb_save. Nothing is checked: the bytes are what the test asks for.
 */
#ifndef PN_TEST_GGUF_BYTES_H
#define PN_TEST_GGUF_BYTES_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define GB_UNUSED __attribute__((unused))

typedef struct gb {
    uint8_t *p;
    size_t n, cap;
} gb;

static GB_UNUSED void gb_put(gb *b, const void *data, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        cr_assert_not_null(b->p);
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, data, n);
    b->n += n;
}

static GB_UNUSED void gb_u32(gb *b, uint32_t v)
{
    uint8_t x[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
    gb_put(b, x, 4);
}

static GB_UNUSED void gb_u64(gb *b, uint64_t v)
{
    gb_u32(b, (uint32_t)v);
    gb_u32(b, (uint32_t)(v >> 32));
}

/* A GGUF string: u64 length, then the bytes (any bytes, NUL included). */
static GB_UNUSED void gb_str(gb *b, const char *s, size_t len)
{
    gb_u64(b, len);
    gb_put(b, s, len);
}

/* GGUF v3, little-endian. */
static GB_UNUSED void gb_header(gb *b, uint64_t n_tensors, uint64_t n_kv)
{
    gb_put(b, "GGUF", 4);
    gb_u32(b, 3);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}

static GB_UNUSED void gb_kv_str(gb *b, const char *key, size_t key_len, const char *v, size_t v_len)
{
    gb_str(b, key, key_len);
    gb_u32(b, 8); /* GGUF_TYPE_STRING */
    gb_str(b, v, v_len);
}

static GB_UNUSED void gb_kv_u32(gb *b, const char *key, uint32_t v)
{
    gb_str(b, key, strlen(key));
    gb_u32(b, 4); /* GGUF_TYPE_UINT32 */
    gb_u32(b, v);
}

/* The head of an array of `count` strings; the caller adds them (gb_str). */
static GB_UNUSED void gb_kv_str_array(gb *b, const char *key, uint64_t count)
{
    gb_str(b, key, strlen(key));
    gb_u32(b, 9); /* GGUF_TYPE_ARRAY */
    gb_u32(b, 8); /* of strings */
    gb_u64(b, count);
}

static GB_UNUSED void gb_tensor(gb *b, const char *name, size_t name_len, uint32_t n_dims,
                                const uint64_t *ne, uint32_t type, uint64_t offset)
{
    gb_str(b, name, name_len);
    gb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        gb_u64(b, ne[d]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

/* Zero bytes up to a multiple of align (the data section's start). */
static GB_UNUSED void gb_pad(gb *b, size_t align)
{
    static const uint8_t zero[64] = { 0 };
    while (b->n % align)
        gb_put(b, zero, align - b->n % align < sizeof zero ? align - b->n % align : sizeof zero);
}

static GB_UNUSED void gb_save(gb *b, const char *path)
{
    cr_assert_eq(tu_write_file(path, b->p, b->n), 0, "cannot write %s", path);
    free(b->p);
    memset(b, 0, sizeof *b);
}

#endif
