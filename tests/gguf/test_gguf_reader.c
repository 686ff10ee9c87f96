/* test_gguf.c - the GGUF reader and writer.
 *
 * Malformed files are made from one small valid file (written by our writer)
 * by changing the bytes of one field, located through the reader itself;
 * each must be refused with its own code and a message that names the file,
 * the byte offset and the key or tensor involved.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/outfile_testing.h"
#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "fixtures/gguf_bytes.h"
#include "quant/types.h"
#include "test_util.h"

/* ------------------------------------------------------------------ */
/* Helpers                                                             */

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static uint8_t pattern_byte(uint64_t i)
{
    return (uint8_t)(i * 7 + 1);
}

/* Writes every tensor of w with pattern bytes, in chunks of `chunk`. */
static void write_pattern(gguf_writer *w, uint64_t total, size_t chunk)
{
    uint8_t *buf = malloc(chunk);
    uint64_t done = 0;
    pn_error e;
    while (done < total) {
        size_t n = total - done < chunk ? (size_t)(total - done) : chunk;
        for (size_t i = 0; i < n; i++)
            buf[i] = pattern_byte(done + i);
        cr_assert_eq(gguf_writer_write(w, buf, n, &e), PN_OK, "%s", e.msg);
        done += n;
    }
    free(buf);
}

static void finish(gguf_writer *w, const char *path)
{
    pn_error e;
    cr_assert_eq(gguf_writer_begin(w, path, &e), PN_OK, "%s", e.msg);
}

static void close_and_commit(gguf_writer *w)
{
    pn_error e;
    cr_assert_eq(gguf_writer_close(w, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(gguf_writer_commit(w, &e), PN_OK, "%s", e.msg);
}

static gguf_reader *open_file(const char *path)
{
    gguf_reader *r = NULL;
    pn_error e;
    cr_assert_eq(gguf_reader_open(path, &r, &e), PN_OK, "%s", e.msg);
    return r;
}

typedef struct blob {
    uint8_t *bytes;
    size_t size;
} blob;

/* The small valid file every malformed case starts from:
 * keys general.architecture, general.alignment (u32 32), test.flag (bool),
 * test.k1, test.k2 (u32), test.arr (u32[3]); tensors t0 f32[4], t1 q8_0[32,2],
 * t2 f32[3]. */
static blob small_file(void)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "small.gguf");
    gguf_writer *w = gguf_writer_new();
    pn_error e;
    cr_assert_eq(gguf_writer_set_str(w, "general.architecture", "test"), PN_OK);
    cr_assert_eq(gguf_writer_set_u32(w, "general.alignment", 32), PN_OK);
    cr_assert_eq(gguf_writer_set_bool(w, "test.flag", true), PN_OK);
    cr_assert_eq(gguf_writer_set_u32(w, "test.k1", 1), PN_OK);
    cr_assert_eq(gguf_writer_set_u32(w, "test.k2", 2), PN_OK);
    uint32_t arr[3] = { 1, 2, 3 };
    cr_assert_eq(gguf_writer_set_arr(w, "test.arr", GGUF_TYPE_UINT32, arr, 3), PN_OK);
    cr_assert_eq(gguf_writer_add_tensor(w, "t0", 1, (int64_t[]){ 4 }, PN_TYPE_F32, &e), PN_OK);
    cr_assert_eq(gguf_writer_add_tensor(w, "t1", 2, (int64_t[]){ 32, 2 }, PN_TYPE_Q8_0, &e), PN_OK);
    cr_assert_eq(gguf_writer_add_tensor(w, "t2", 1, (int64_t[]){ 3 }, PN_TYPE_F32, &e), PN_OK);
    finish(w, path);
    write_pattern(w, 16 + 68 + 12, 5);
    close_and_commit(w);
    gguf_writer_free(w);
    blob b;
    b.bytes = tu_read_file(path, &b.size);
    tu_rm_rf(dir);
    free(path);
    free(dir);
    return b;
}

static gguf_reader *open_blob(blob b)
{
    gguf_reader *r = NULL;
    pn_error e;
    cr_assert_eq(gguf_reader_open_memory(b.bytes, b.size, "small.gguf", &r, &e), PN_OK, "%s",
                 e.msg);
    return r;
}

static void put_u32(blob b, uint64_t at, uint32_t v)
{
    cr_assert_leq(at + 4, b.size);
    for (int i = 0; i < 4; i++)
        b.bytes[at + i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(blob b, uint64_t at, uint64_t v)
{
    cr_assert_leq(at + 8, b.size);
    for (int i = 0; i < 8; i++)
        b.bytes[at + i] = (uint8_t)(v >> (8 * i));
}

/* File offsets of the parts of a key/value pair. */
typedef struct kv_at {
    uint64_t key_len, key, type, value;
} kv_at;

static kv_at locate_kv(const gguf_reader *r, const char *key)
{
    const gguf_kv *kv = gguf_reader_find_kv(r, key);
    cr_assert_not_null(kv, "no key %s", key);
    kv_at a;
    a.key = (uint64_t)((const uint8_t *)kv->key.data - gguf_reader_bytes(r));
    a.key_len = a.key - 8;
    a.type = a.key + kv->key.len;
    a.value = a.type + 4;
    return a;
}

/* File offsets of the fields of a tensor info. */
typedef struct tensor_at {
    uint64_t name_len, name, n_dims, ne0, type, offset;
} tensor_at;

static tensor_at locate_tensor(const gguf_reader *r, const char *name)
{
    long i = gguf_reader_find_tensor(r, name);
    cr_assert_geq(i, 0, "no tensor %s", name);
    const gguf_tensor_info *ti = gguf_reader_tensor(r, (size_t)i);
    tensor_at a;
    a.name_len = ti->info_offset;
    a.name = a.name_len + 8;
    a.n_dims = a.name + strlen(name);
    a.ne0 = a.n_dims + 4;
    a.type = a.ne0 + 8 * ti->n_dims;
    a.offset = a.type + 4;
    return a;
}

/* Opens a copy of exactly the blob's bytes (so ASan sees any over-read) and
 * expects a refusal with `code` whose message holds every given fragment. */
static void expect_refusal(blob b, pn_status code, const char *frag1, const char *frag2)
{
    uint8_t *copy = malloc(b.size ? b.size : 1);
    memcpy(copy, b.bytes, b.size);
    gguf_reader *r = (gguf_reader *)0x1;
    pn_error e;
    memset(&e, 0, sizeof e);
    pn_status st = gguf_reader_open_memory(copy, b.size, "small.gguf", &r, &e);
    free(copy);
    cr_assert_eq(st, code, "expected %s, got %s: %s", pn_strerror(code), pn_strerror(st), e.msg);
    cr_assert_eq(e.code, code);
    cr_assert_null(r);
    cr_assert(strncmp(e.msg, "small.gguf: at byte ", 20) == 0, "message: %s", e.msg);
    if (frag1)
        cr_assert(strstr(e.msg, frag1), "message lacks \"%s\": %s", frag1, e.msg);
    if (frag2)
        cr_assert(strstr(e.msg, frag2), "message lacks \"%s\": %s", frag2, e.msg);
}

static char *at_byte(uint64_t at)
{
    static char buf[64];
    snprintf(buf, sizeof buf, "at byte %llu:", (unsigned long long)at);
    return buf;
}

/* ------------------------------------------------------------------ */
/* Reading                                                             */

Test(gguf_reader, opens_the_small_file_and_shows_its_keys_and_tensors)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    cr_assert_eq(gguf_reader_version(r), 3);
    cr_assert_eq(gguf_reader_n_kv(r), 6);
    cr_assert_eq(gguf_reader_n_tensors(r), 3);
    cr_assert_eq(gguf_reader_alignment(r), 32);
    cr_assert_eq(gguf_reader_data_offset(r), 352);
    cr_assert_eq(gguf_reader_file_size(r), 512);
    cr_assert(gguf_str_eq(gguf_reader_find_kv(r, "general.architecture")->v.str, "test"));
    cr_assert_null(gguf_reader_find_kv(r, "general.name"));
    cr_assert_eq(gguf_reader_find_tensor(r, "t1"), 1);
    cr_assert_eq(gguf_reader_find_tensor(r, "t3"), -1);
    const gguf_tensor_info *t1 = gguf_reader_tensor(r, 1);
    cr_assert_str_eq(t1->name, "t1");
    cr_assert_eq(t1->n_dims, 2);
    cr_assert_eq(t1->ne[0], 32);
    cr_assert_eq(t1->ne[1], 2);
    cr_assert_eq(t1->ne[2], 1);
    cr_assert_eq(t1->ne[3], 1);
    cr_assert_eq(t1->type, PN_TYPE_Q8_0);
    cr_assert_eq(t1->offset, 32);
    cr_assert_eq(t1->size, 68);
    const uint8_t *d = gguf_reader_tensor_data(r, 1);
    cr_assert_eq(d, gguf_reader_bytes(r) + 352 + 32);
    for (int i = 0; i < 68; i++)
        cr_assert_eq(d[i], pattern_byte(16 + (uint64_t)i));
    cr_assert_null(gguf_reader_tensor(r, 3));
    gguf_reader_close(r);
    free(b.bytes);
}

Test(gguf_reader, reads_a_gguf_v2_file)
{
    blob b = small_file();
    put_u32(b, 4, 2);
    gguf_reader *r = open_blob(b);
    cr_assert_eq(gguf_reader_version(r), 2);
    gguf_reader_close(r);
    free(b.bytes);
}

Test(gguf_reader, refuses_a_file_truncated_at_every_byte)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    const gguf_tensor_info *last = gguf_reader_tensor(r, 2);
    uint64_t data_end = gguf_reader_data_offset(r) + last->offset + last->size;
    gguf_reader_close(r);
    for (size_t n = 0; n < data_end; n++) {
        blob t = { b.bytes, n };
        expect_refusal(t, PN_ERR_TRUNCATED, NULL, NULL);
    }
    /* The padding after the last tensor is optional. */
    for (size_t n = data_end; n <= b.size; n++) {
        uint8_t *copy = malloc(n);
        memcpy(copy, b.bytes, n);
        pn_error e;
        cr_assert_eq(gguf_reader_open_memory(copy, n, "small.gguf", &r, &e), PN_OK, "%s", e.msg);
        gguf_reader_close(r);
        free(copy);
    }
    free(b.bytes);
}

Test(gguf_reader, names_what_a_truncated_file_lacks)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    tensor_at t2 = locate_tensor(r, "t2");
    const gguf_tensor_info *ti = gguf_reader_tensor(r, 2);
    uint64_t t2_end = gguf_reader_data_offset(r) + ti->offset + ti->size;
    gguf_reader_close(r);
    expect_refusal((blob){ b.bytes, 2 }, PN_ERR_TRUNCATED, "too short for the GGUF magic", NULL);
    expect_refusal((blob){ b.bytes, 30 }, PN_ERR_TRUNCATED, "declares 3 tensors and 6 key/value",
                   "only 6 bytes follow");
    expect_refusal((blob){ b.bytes, (size_t)t2.offset + 3 }, PN_ERR_TRUNCATED, at_byte(t2.offset),
                   "tensor 't2': the data offset needs 8 bytes");
    expect_refusal((blob){ b.bytes, (size_t)t2_end - 1 }, PN_ERR_TRUNCATED, "tensor 't2'",
                   "ends past the end of the file");
    free(b.bytes);
}

Test(gguf_reader, refuses_an_empty_file_and_a_missing_one)
{
    expect_refusal((blob){ (uint8_t *)"", 0 }, PN_ERR_TRUNCATED, "0 bytes", NULL);
    gguf_reader *r = NULL;
    pn_error e;
    cr_assert_eq(gguf_reader_open("/nonexistent/x.gguf", &r, &e), PN_ERR_IO);
    cr_assert_null(r);
    cr_assert(strstr(e.msg, "/nonexistent/x.gguf: cannot open"), "%s", e.msg);
    char *dir = tu_mkdtemp();
    cr_assert_eq(gguf_reader_open(dir, &r, &e), PN_ERR_IO);
    cr_assert(strstr(e.msg, "not a regular file"), "%s", e.msg);
    char *path = tu_join(dir, "empty.gguf");
    cr_assert_eq(tu_write_file(path, "", 0), 0);
    cr_assert_eq(gguf_reader_open(path, &r, &e), PN_ERR_TRUNCATED);
    cr_assert(strncmp(e.msg, path, strlen(path)) == 0, "%s", e.msg);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(gguf_reader, refuses_a_bad_magic)
{
    blob b = small_file();
    b.bytes[3] = 'X';
    expect_refusal(b, PN_ERR_BAD_MAGIC, "not a GGUF file", "47 47 55 58");
    expect_refusal((blob){ (uint8_t *)"PK", 2 }, PN_ERR_BAD_MAGIC, "no \"GGUF\" magic", NULL);
    free(b.bytes);
}

Test(gguf_reader, refuses_gguf_v1_saying_so)
{
    blob b = small_file();
    put_u32(b, 4, 1);
    expect_refusal(b, PN_ERR_VERSION, "at byte 4:", "GGUF v1 is not supported");
    free(b.bytes);
}

Test(gguf_reader, refuses_a_big_endian_file_saying_so)
{
    blob b = small_file();
    put_u32(b, 4, 0x03000000);
    expect_refusal(b, PN_ERR_VERSION, "big-endian", "0x03000000");
    put_u32(b, 4, 0x02000000);
    expect_refusal(b, PN_ERR_VERSION, "big-endian", "v2 big-endian");
    memcpy(b.bytes, "FUGG", 4);
    expect_refusal(b, PN_ERR_VERSION, "big-endian", "FUGG");
    free(b.bytes);
}

Test(gguf_reader, refuses_an_unknown_version)
{
    blob b = small_file();
    put_u32(b, 4, 4);
    expect_refusal(b, PN_ERR_VERSION, "unsupported GGUF version 4", "expected 2 or 3");
    free(b.bytes);
}

Test(gguf_reader, refuses_huge_tensor_and_key_counts)
{
    blob b = small_file();
    put_u64(b, 8, 1ull << 60);
    expect_refusal(b, PN_ERR_TRUNCATED, "declares 1152921504606846976 tensors", "bytes follow");
    put_u64(b, 8, 3);
    put_u64(b, 16, UINT64_MAX);
    expect_refusal(b, PN_ERR_TRUNCATED, "18446744073709551615 key/value pairs", "bytes follow");
    put_u64(b, 16, 5); /* one fewer: the last key is read as a tensor info */
    expect_refusal(b, PN_ERR_TENSOR, "tensor 'test.arr': n_dims is 9", NULL);
    free(b.bytes);
}

/* "the length field at byte AT reads LEN bytes" */
static char *length_read(uint64_t at, uint64_t len)
{
    static char buf[128];
    snprintf(buf, sizeof buf,
             "damaged string length: the length field at byte %llu reads %llu bytes",
             (unsigned long long)at, (unsigned long long)len);
    return buf;
}

Test(gguf_reader, a_key_longer_than_the_file_is_a_damaged_string_length_at_its_offset)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    kv_at k = locate_kv(r, "general.architecture");
    gguf_reader_close(r);
    put_u64(b, k.key_len, 1ull << 40);
    expect_refusal(b, PN_ERR_STRING_LENGTH, at_byte(k.key_len), length_read(k.key_len, 1ull << 40));
    char rest[96];
    snprintf(rest, sizeof rest,
             "more than the whole file (the file is %zu bytes, %llu of them after", b.size,
             (unsigned long long)(b.size - k.key));
    expect_refusal(b, PN_ERR_STRING_LENGTH, "the key of key/value pair 0", rest);
    free(b.bytes);
}

Test(gguf_reader, a_string_value_longer_than_the_file_is_a_damaged_string_length_at_its_offset)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    kv_at k = locate_kv(r, "general.architecture");
    gguf_reader_close(r);
    put_u64(b, k.value, b.size + 1);
    expect_refusal(b, PN_ERR_STRING_LENGTH, "key 'general.architecture': the string value",
                   length_read(k.value, b.size + 1));
    put_u64(b, k.value, UINT64_MAX);
    expect_refusal(b, PN_ERR_STRING_LENGTH, at_byte(k.value), length_read(k.value, UINT64_MAX));
    free(b.bytes);
}

Test(gguf_reader, a_tensor_name_longer_than_the_file_is_a_damaged_string_length_at_its_offset)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    tensor_at t = locate_tensor(r, "t1");
    gguf_reader_close(r);
    put_u64(b, t.name_len, 1ull << 33);
    expect_refusal(b, PN_ERR_STRING_LENGTH, "the name of tensor info 1",
                   length_read(t.name_len, 1ull << 33));
    free(b.bytes);
}

Test(gguf_reader, a_string_element_longer_than_the_file_is_a_damaged_string_length_at_its_offset)
{
    /* tokenizer.ggml.tokens-like: an array of 3 strings, eight letters
     * over the second's length */
    gb g = { 0 };
    gb_header(&g, 0, 1);
    gb_kv_str_array(&g, "tokenizer.ggml.tokens", 3);
    gb_str(&g, "a", 1);
    const uint64_t second = g.n;
    gb_str(&g, "b", 1);
    gb_str(&g, "c", 1);
    memcpy(g.p + second, "HGFEDCBA", 8);
    blob b = { g.p, g.n };
    expect_refusal(b, PN_ERR_STRING_LENGTH, "key 'tokenizer.ggml.tokens': string element 1",
                   length_read(second, 0x4142434445464748ull));
    free(g.p);
}

Test(gguf_reader, a_file_cut_inside_a_string_is_a_truncated_header_not_a_damaged_length)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    kv_at k = locate_kv(r, "general.architecture");
    tensor_at t = locate_tensor(r, "t2");
    gguf_reader_close(r);
    /* its length (2, "t2") is right: the file ends after 1 of its bytes */
    expect_refusal((blob){ b.bytes, (size_t)t.name + 1 }, PN_ERR_TRUNCATED, at_byte(t.name_len),
                   "the name of tensor info 2: string of 2 bytes, but the file ends after 1");
    /* a length past the end that the whole file could hold: a cut, too */
    put_u64(b, k.value, b.size);
    expect_refusal(b, PN_ERR_TRUNCATED, at_byte(k.value), "the string value: string of 512");
    free(b.bytes);
}

Test(gguf_reader, refuses_an_array_of_2_to_the_62_elements)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    kv_at k = locate_kv(r, "test.arr");
    gguf_reader_close(r);
    put_u64(b, k.value + 4, 1ull << 62);
    expect_refusal(b, PN_ERR_TRUNCATED, "key 'test.arr'",
                   "array of 4611686018427387904 uint32 elements");
    free(b.bytes);
}

Test(gguf_reader, refuses_an_unknown_value_type)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    kv_at k = locate_kv(r, "test.k1");
    kv_at a = locate_kv(r, "test.arr");
    gguf_reader_close(r);
    put_u32(b, k.type, 13);
    expect_refusal(b, PN_ERR_FORMAT, "key 'test.k1': unknown value type 13", at_byte(k.type));
    put_u32(b, k.type, GGUF_TYPE_UINT32);
    put_u32(b, a.value, 99);
    expect_refusal(b, PN_ERR_FORMAT, "key 'test.arr': unknown array element type 99", NULL);
    free(b.bytes);
}

Test(gguf_reader, refuses_a_bool_that_is_neither_0_nor_1)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    kv_at k = locate_kv(r, "test.flag");
    gguf_reader_close(r);
    b.bytes[k.value] = 2;
    expect_refusal(b, PN_ERR_FORMAT, "key 'test.flag': bool value is 2", NULL);
    free(b.bytes);
}

Test(gguf_reader, refuses_a_duplicate_key)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    kv_at k1 = locate_kv(r, "test.k1");
    kv_at k2 = locate_kv(r, "test.k2");
    gguf_reader_close(r);
    b.bytes[k2.key + 6] = '1';
    char first[64];
    snprintf(first, sizeof first, "(first at byte %llu)", (unsigned long long)k1.key_len);
    expect_refusal(b, PN_ERR_FORMAT, "duplicate key 'test.k1'", first);
    free(b.bytes);
}

Test(gguf_reader, refuses_an_alignment_of_0_or_3_or_of_a_signed_type)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    kv_at k = locate_kv(r, "general.alignment");
    gguf_reader_close(r);
    put_u32(b, k.value, 0);
    expect_refusal(b, PN_ERR_ALIGNMENT, "'general.alignment' is 0", "power of two");
    put_u32(b, k.value, 3);
    expect_refusal(b, PN_ERR_ALIGNMENT, "'general.alignment' is 3", "power of two");
    put_u32(b, k.value, 32);
    put_u32(b, k.type, GGUF_TYPE_INT32);
    expect_refusal(b, PN_ERR_ALIGNMENT, "has type int32", "unsigned");
    free(b.bytes);
}

Test(gguf_reader, refuses_a_misaligned_tensor_offset)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    tensor_at t = locate_tensor(r, "t1");
    gguf_reader_close(r);
    put_u64(b, t.offset, 36);
    expect_refusal(b, PN_ERR_ALIGNMENT,
                   "tensor 't1': data offset 36 is not a multiple of the "
                   "alignment 32",
                   at_byte(t.offset));
    free(b.bytes);
}

Test(gguf_reader, refuses_overlapping_tensors)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    tensor_at t = locate_tensor(r, "t2");
    gguf_reader_close(r);
    put_u64(b, t.offset, 64); /* t1 covers [32, 100) */
    expect_refusal(b, PN_ERR_TENSOR,
                   "tensors 't1' (data bytes [32, 100)) and 't2' (from 64) "
                   "overlap",
                   NULL);
    free(b.bytes);
}

Test(gguf_reader, refuses_duplicate_tensor_names)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    tensor_at t = locate_tensor(r, "t2");
    gguf_reader_close(r);
    b.bytes[t.name + 1] = '0';
    expect_refusal(b, PN_ERR_TENSOR, "duplicate tensor name 't0'", "tensor infos 0 and 2");
    free(b.bytes);
}

Test(gguf_reader, refuses_a_tensor_name_holding_a_nul)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    tensor_at t = locate_tensor(r, "t0");
    gguf_reader_close(r);
    b.bytes[t.name + 1] = 0;
    expect_refusal(b, PN_ERR_TENSOR, "tensor 't\\x00': the name holds a NUL byte", NULL);
    free(b.bytes);
}

Test(gguf_reader, refuses_n_dims_0_and_5)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    tensor_at t = locate_tensor(r, "t1");
    gguf_reader_close(r);
    put_u32(b, t.n_dims, 0);
    expect_refusal(b, PN_ERR_TENSOR, "tensor 't1': n_dims is 0, expected 1..4", at_byte(t.n_dims));
    put_u32(b, t.n_dims, 5);
    expect_refusal(b, PN_ERR_TENSOR, "tensor 't1': n_dims is 5, expected 1..4", at_byte(t.n_dims));
    free(b.bytes);
}

Test(gguf_reader, refuses_a_dimension_of_0)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    tensor_at t = locate_tensor(r, "t1");
    gguf_reader_close(r);
    put_u64(b, t.ne0 + 8, 0);
    expect_refusal(b, PN_ERR_TENSOR, "tensor 't1': ne[1] is 0", at_byte(t.ne0 + 8));
    put_u64(b, t.ne0 + 8, 1ull << 63);
    expect_refusal(b, PN_ERR_TENSOR, "ne[1] is 9223372036854775808", NULL);
    free(b.bytes);
}

Test(gguf_reader, refuses_an_unknown_tensor_type_naming_the_tensor_and_the_id)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    tensor_at t = locate_tensor(r, "t2");
    gguf_reader_close(r);
    put_u32(b, t.type, 77);
    expect_refusal(b, PN_ERR_TYPE, "tensor 't2': unknown ggml type id 77", at_byte(t.type));
    put_u32(b, t.type, 0x80000000u);
    expect_refusal(b, PN_ERR_TYPE, "unknown ggml type id 2147483648", NULL);
    free(b.bytes);
}

Test(gguf_reader, refuses_a_tensor_past_the_end_of_the_file)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    tensor_at t = locate_tensor(r, "t2");
    gguf_reader_close(r);
    put_u64(b, t.offset, 1u << 20);
    expect_refusal(b, PN_ERR_TRUNCATED, "tensor 't2': data at file bytes [1048928, 1048940)",
                   "past the end of the file (size 512)");
    put_u64(b, t.offset, UINT64_MAX - 31);
    expect_refusal(b, PN_ERR_TENSOR, "tensor 't2': data offset 18446744073709551584",
                   "overflows 64 bits");
    free(b.bytes);
}

Test(gguf_reader, refuses_a_row_that_is_not_a_multiple_of_the_block)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    tensor_at t = locate_tensor(r, "t1");
    gguf_reader_close(r);
    put_u64(b, t.ne0, 48);
    expect_refusal(b, PN_ERR_TENSOR, "tensor 't1': row length ne[0] = 48",
                   "not a multiple of the q8_0 block of 32 weights");
    put_u32(b, t.type, PN_TYPE_PN3T);
    put_u64(b, t.ne0, 64);
    expect_refusal(b, PN_ERR_TENSOR, "ne[0] = 64", "pn3t block of 80 weights");
    free(b.bytes);
}

Test(gguf_reader, refuses_a_size_that_overflows)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    tensor_at t = locate_tensor(r, "t1");
    gguf_reader_close(r);
    put_u64(b, t.ne0, 1ull << 40);
    put_u64(b, t.ne0 + 8, 1ull << 40);
    expect_refusal(b, PN_ERR_TENSOR, "tensor 't1': size of 1099511627776 x 1099511627776",
                   "overflows 64 bits");
    free(b.bytes);
}

Test(gguf_reader, opened_leniently_accepts_misplaced_tensor_data_but_nothing_else)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    tensor_at t0 = locate_tensor(r, "t0");
    tensor_at t1 = locate_tensor(r, "t1");
    tensor_at t2 = locate_tensor(r, "t2");
    uint64_t data = gguf_reader_data_offset(r);
    gguf_reader_close(r);
    put_u64(b, t0.offset, 8);        /* misaligned */
    put_u64(b, t1.offset, 0);        /* overlaps t0 */
    put_u64(b, t2.offset, 1u << 20); /* past the end */
    pn_error e;
    cr_assert_eq(gguf_reader_open_memory_lenient(b.bytes, b.size, "small.gguf", &r, &e), PN_OK,
                 "%s", e.msg);
    cr_assert_eq(gguf_reader_tensor_data(r, 0), b.bytes + data + 8);
    cr_assert_eq(gguf_reader_tensor_data(r, 1), b.bytes + data);
    cr_assert_null(gguf_reader_tensor_data(r, 2));
    gguf_reader_close(r);
    put_u64(b, t2.offset, UINT64_MAX - 3);
    cr_assert_eq(gguf_reader_open_memory_lenient(b.bytes, b.size, "small.gguf", &r, &e), PN_OK,
                 "%s", e.msg);
    cr_assert_null(gguf_reader_tensor_data(r, 2));
    gguf_reader_close(r);

    /* Cut inside the padding before the data: no tensor is in the file. */
    uint8_t *cut = malloc((size_t)t2.offset + 9);
    memcpy(cut, b.bytes, (size_t)t2.offset + 9);
    cr_assert_eq(gguf_reader_open_memory_lenient(cut, (size_t)t2.offset + 9, "small.gguf", &r, &e),
                 PN_OK, "%s", e.msg);
    cr_assert_eq(gguf_reader_data_offset(r), data);
    cr_assert_gt(gguf_reader_data_offset(r), gguf_reader_file_size(r));
    for (size_t i = 0; i < 3; i++)
        cr_assert_null(gguf_reader_tensor_data(r, i));
    gguf_reader_close(r);
    free(cut);

    put_u32(b, t1.n_dims, 5);
    cr_assert_eq(gguf_reader_open_memory_lenient(b.bytes, b.size, "small.gguf", &r, &e),
                 PN_ERR_TENSOR);
    cr_assert(strstr(e.msg, "n_dims is 5"), "%s", e.msg);
    cr_assert_null(r);
    free(b.bytes);
}

Test(gguf_reader, opens_a_path_leniently)
{
    blob b = small_file();
    gguf_reader *r = open_blob(b);
    tensor_at t2 = locate_tensor(r, "t2");
    gguf_reader_close(r);
    put_u64(b, t2.offset, 1u << 20);
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "bad.gguf");
    cr_assert_eq(tu_write_file(path, b.bytes, b.size), 0);
    pn_error e;
    cr_assert_eq(gguf_reader_open(path, &r, &e), PN_ERR_TRUNCATED);
    cr_assert_eq(gguf_reader_open_lenient(path, &r, &e), PN_OK, "%s", e.msg);
    cr_assert_str_eq(gguf_reader_name(r), path);
    cr_assert_null(gguf_reader_tensor_data(r, 2));
    cr_assert_not_null(gguf_reader_tensor_data(r, 1));
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(path);
    free(dir);
    free(b.bytes);
}

/* Builds a file whose only key is `depth` arrays nested in one another. */
static blob nested_file(int depth)
{
    size_t n = (size_t)depth * 12 + 8 + 1;
    uint8_t *raw = calloc(1, n);
    size_t o = 0;
    for (int d = 1; d < depth; d++) {
        raw[o] = GGUF_TYPE_ARRAY; /* element type of the level-d array */
        raw[o + 4] = 1;           /* count of the level-(d+1) array: 1 */
        o += 12;
    }
    /* Innermost: one string "x". Its header (type STRING, count 1) is above
     * for depth > 1; for the kv itself arr_type says STRING. */
    raw[o] = 1;
    raw[o + 8] = 'x';
    o += 9;
    /* Fix the innermost array's element type. */
    if (depth > 1)
        raw[(size_t)(depth - 2) * 12] = GGUF_TYPE_STRING;
    gguf_kv kv;
    memset(&kv, 0, sizeof kv);
    kv.key = (gguf_str){ 11, "test.nested" };
    kv.type = GGUF_TYPE_ARRAY;
    kv.arr_type = depth > 1 ? GGUF_TYPE_ARRAY : GGUF_TYPE_STRING;
    kv.arr_count = 1;
    kv.arr_data = raw;
    kv.arr_bytes = o;

    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "nested.gguf");
    gguf_writer *w = gguf_writer_new();
    cr_assert_eq(gguf_writer_copy_kv(w, &kv), PN_OK);
    finish(w, path);
    close_and_commit(w);
    gguf_writer_free(w);
    blob b;
    b.bytes = tu_read_file(path, &b.size);
    tu_rm_rf(dir);
    free(path);
    free(dir);
    free(raw);
    return b;
}

Test(gguf_reader, reads_arrays_nested_8_deep_and_refuses_9)
{
    blob b = nested_file(GGUF_MAX_ARRAY_DEPTH);
    gguf_reader *r = open_blob(b);
    gguf_kv kv = *gguf_reader_find_kv(r, "test.nested");
    for (int d = 1; d < GGUF_MAX_ARRAY_DEPTH; d++) {
        cr_assert_eq(kv.arr_type, GGUF_TYPE_ARRAY);
        cr_assert_eq(kv.arr_count, 1);
        kv = gguf_kv_arr_arr(&kv, 0);
    }
    cr_assert_eq(kv.arr_type, GGUF_TYPE_STRING);
    cr_assert(gguf_str_eq(gguf_kv_arr_str(&kv, 0), "x"));
    gguf_reader_close(r);
    free(b.bytes);

    b = nested_file(GGUF_MAX_ARRAY_DEPTH + 1);
    expect_refusal(b, PN_ERR_FORMAT, "key 'test.nested': arrays nested deeper than 8", NULL);
    free(b.bytes);
}

Test(gguf_reader, survives_random_corruption_of_the_small_file)
{
    blob b = small_file();
    tu_rng rng = { 12345 };
    int refused = 0;
    for (int iter = 0; iter < 3000; iter++) {
        uint8_t *copy = malloc(b.size);
        memcpy(copy, b.bytes, b.size);
        int flips = 1 + (int)(tu_rng_u64(&rng) % 4);
        for (int f = 0; f < flips; f++) {
            /* Mostly the header, where the structure is. */
            size_t at = (size_t)(tu_rng_u64(&rng) % 360);
            copy[at] = (uint8_t)tu_rng_u64(&rng);
        }
        size_t size = tu_rng_u64(&rng) % 8 ? b.size : (size_t)(tu_rng_u64(&rng) % b.size);
        gguf_reader *r = NULL;
        pn_error e;
        pn_status st = gguf_reader_open_memory(copy, size, "fuzz.gguf", &r, &e);
        if (st == PN_OK) {
            for (size_t i = 0; i < gguf_reader_n_tensors(r); i++)
                cr_assert_not_null(gguf_reader_tensor_data(r, i));
            gguf_reader_close(r);
        } else {
            refused++;
            cr_assert_null(r);
            cr_assert(strncmp(e.msg, "fuzz.gguf: at byte ", 19) == 0, "%s", e.msg);
        }
        free(copy);
    }
    cr_assert_gt(refused, 100);
    free(b.bytes);
}

/* ------------------------------------------------------------------ */
/* The golden source file                                              */

Test(gguf_reader, opens_the_golden_tiny_f32_file_with_its_28_tensors)
{
    gguf_reader *r = open_file(PN_TEST_DATA "/golden/tiny.f32.gguf");
    size_t n;
    char *expect = tu_read_file(PN_TEST_DATA "/golden/tiny.f32.expect.txt", &n);
    expect = realloc(expect, n + 1);
    expect[n] = '\0';
    cr_assert_eq(gguf_reader_n_tensors(r), 28);
    size_t i = 0;
    char *save = NULL;
    for (char *line = strtok_r(expect, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char name[128], shape[64], type[16];
        cr_assert_eq(sscanf(line, "%127s %63s %15s", name, shape, type), 3, "line: %s", line);
        cr_assert_lt(i, gguf_reader_n_tensors(r));
        const gguf_tensor_info *ti = gguf_reader_tensor(r, i);
        cr_assert_str_eq(ti->name, name);
        int64_t ne[GGUF_MAX_DIMS] = { 1, 1, 1, 1 };
        uint32_t dims = 0;
        for (char *s = shape; *s && dims < GGUF_MAX_DIMS; dims++) {
            ne[dims] = strtoll(s, &s, 10);
            if (*s == 'x')
                s++;
        }
        cr_assert_eq(ti->n_dims, dims, "tensor %s", name);
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            cr_assert_eq(ti->ne[d], ne[d], "tensor %s ne[%d]", name, d);
        cr_assert_str_eq(pn_type_traits_get(ti->type)->name, "f32");
        cr_assert(strcasecmp(type, "F32") == 0);
        cr_assert_eq(ti->size, (uint64_t)(ne[0] * ne[1] * ne[2] * ne[3] * 4));
        i++;
    }
    cr_assert_eq(i, 28);
    cr_assert(gguf_str_eq(gguf_reader_find_kv(r, "general.architecture")->v.str, "qwen35"));
    free(expect);
    gguf_reader_close(r);
}

/* ------------------------------------------------------------------ */
/* Writing and reading back                                            */

static const uint8_t nested_u32[] = {
    /* [[1, 2], [], [3]] as three u32 arrays */
    4, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0,
};
static const uint8_t nested_str[] = {
    /* [[["ab", ""]]]: an array of one array of one array of two strings */
    9, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,   8,   0, 0, 0, 2, 0, 0, 0, 0,
    0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 0, 0, 0, 0, 0, 0, 0, 0,
};

static void set_nested(gguf_writer *w, const char *key, gguf_value_type et, const uint8_t *raw,
                       size_t n, uint64_t count)
{
    gguf_kv kv;
    memset(&kv, 0, sizeof kv);
    kv.key = (gguf_str){ strlen(key), key };
    kv.type = GGUF_TYPE_ARRAY;
    kv.arr_type = et;
    kv.arr_count = count;
    kv.arr_data = raw;
    kv.arr_bytes = n;
    cr_assert_eq(gguf_writer_copy_kv(w, &kv), PN_OK);
}

/* One key of every value type, arrays of every type, and the edge cases. */
static void set_every_type(gguf_writer *w)
{
    cr_assert_eq(gguf_writer_set_u8(w, "v.u8", 255), PN_OK);
    cr_assert_eq(gguf_writer_set_i8(w, "v.i8", -128), PN_OK);
    cr_assert_eq(gguf_writer_set_u16(w, "v.u16", 65535), PN_OK);
    cr_assert_eq(gguf_writer_set_i16(w, "v.i16", -32768), PN_OK);
    cr_assert_eq(gguf_writer_set_u32(w, "v.u32", 4000000000u), PN_OK);
    cr_assert_eq(gguf_writer_set_i32(w, "v.i32", INT32_MIN), PN_OK);
    cr_assert_eq(gguf_writer_set_f32(w, "v.f32", -0.0f), PN_OK);
    cr_assert_eq(gguf_writer_set_bool(w, "v.bool", true), PN_OK);
    cr_assert_eq(gguf_writer_set_str(w, "v.str", "quote \" backslash \\ tab\t nl\n \x01 é 日本"),
                 PN_OK);
    cr_assert_eq(gguf_writer_set_u64(w, "v.u64", UINT64_MAX), PN_OK);
    cr_assert_eq(gguf_writer_set_i64(w, "v.i64", INT64_MIN), PN_OK);
    cr_assert_eq(gguf_writer_set_f64(w, "v.f64", -2.5e300), PN_OK);
    cr_assert_eq(gguf_writer_set_bool(w, "v.false", false), PN_OK);
    cr_assert_eq(gguf_writer_set_str(w, "v.empty", ""), PN_OK);

    uint8_t au8[] = { 0, 1, 255 };
    int8_t ai8[] = { -1, 5 };
    uint16_t au16[] = { 7, 65535 };
    int16_t ai16[] = { -300, 300 };
    uint32_t au32[] = { 1, 2, 4000000000u };
    int32_t ai32[] = { -5, INT32_MAX };
    float af32[] = { 1.0f, -0.0f, INFINITY, 1e-45f };
    uint8_t abool[] = { 1, 0, 1 };
    uint64_t au64[] = { 0, UINT64_MAX };
    int64_t ai64[] = { INT64_MIN, 42 };
    double af64[] = { 0.1, -1e-310 };
    cr_assert_eq(gguf_writer_set_arr(w, "a.u8", GGUF_TYPE_UINT8, au8, 3), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.i8", GGUF_TYPE_INT8, ai8, 2), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.u16", GGUF_TYPE_UINT16, au16, 2), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.i16", GGUF_TYPE_INT16, ai16, 2), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.u32", GGUF_TYPE_UINT32, au32, 3), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.i32", GGUF_TYPE_INT32, ai32, 2), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.f32", GGUF_TYPE_FLOAT32, af32, 4), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.bool", GGUF_TYPE_BOOL, abool, 3), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.u64", GGUF_TYPE_UINT64, au64, 2), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.i64", GGUF_TYPE_INT64, ai64, 2), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.f64", GGUF_TYPE_FLOAT64, af64, 2), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.empty", GGUF_TYPE_UINT32, NULL, 0), PN_OK);
    const char *strs[] = { "", "x", "two words", "" };
    cr_assert_eq(gguf_writer_set_arr_str(w, "a.str", strs, 4), PN_OK);
    cr_assert_eq(gguf_writer_set_arr_str(w, "a.str_empty", NULL, 0), PN_OK);
    set_nested(w, "a.nested_u32", GGUF_TYPE_ARRAY, nested_u32, sizeof nested_u32, 3);
    set_nested(w, "a.nested_str", GGUF_TYPE_ARRAY, nested_str, sizeof nested_str, 1);
}

static const gguf_kv *kv_of(const gguf_reader *r, size_t i, const char *key, gguf_value_type t)
{
    const gguf_kv *kv = gguf_reader_kv(r, i);
    cr_assert_not_null(kv);
    cr_assert(gguf_str_eq(kv->key, key), "kv %zu is not %s", i, key);
    cr_assert_eq(kv->type, t, "%s: type %s", key, gguf_value_type_name(kv->type));
    cr_assert_eq(gguf_reader_find_kv(r, key), kv);
    return kv;
}

static const gguf_kv *arr_of(const gguf_reader *r, size_t i, const char *key, gguf_value_type et,
                             uint64_t count)
{
    const gguf_kv *kv = kv_of(r, i, key, GGUF_TYPE_ARRAY);
    cr_assert_eq(kv->arr_type, et, "%s", key);
    cr_assert_eq(kv->arr_count, count, "%s", key);
    return kv;
}

static uint32_t f32_bits(double v)
{
    float f = (float)v;
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

Test(gguf_roundtrip, keeps_every_value_type_and_the_key_order)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "types.gguf");
    gguf_writer *w = gguf_writer_new();
    set_every_type(w);
    cr_assert_eq(gguf_writer_n_kv(w), 30);
    finish(w, path);
    close_and_commit(w);
    gguf_writer_free(w);

    gguf_reader *r = open_file(path);
    cr_assert_eq(gguf_reader_n_kv(r), 30);
    cr_assert_eq(gguf_reader_n_tensors(r), 0);
    size_t i = 0;
    cr_assert_eq(kv_of(r, i++, "v.u8", GGUF_TYPE_UINT8)->v.u64, 255);
    cr_assert_eq(kv_of(r, i++, "v.i8", GGUF_TYPE_INT8)->v.i64, -128);
    cr_assert_eq(kv_of(r, i++, "v.u16", GGUF_TYPE_UINT16)->v.u64, 65535);
    cr_assert_eq(kv_of(r, i++, "v.i16", GGUF_TYPE_INT16)->v.i64, -32768);
    cr_assert_eq(kv_of(r, i++, "v.u32", GGUF_TYPE_UINT32)->v.u64, 4000000000u);
    cr_assert_eq(kv_of(r, i++, "v.i32", GGUF_TYPE_INT32)->v.i64, INT32_MIN);
    cr_assert_eq(f32_bits(kv_of(r, i++, "v.f32", GGUF_TYPE_FLOAT32)->v.f64), 0x80000000u);
    cr_assert_eq(kv_of(r, i++, "v.bool", GGUF_TYPE_BOOL)->v.u64, 1);
    cr_assert(gguf_str_eq(kv_of(r, i++, "v.str", GGUF_TYPE_STRING)->v.str,
                          "quote \" backslash \\ tab\t nl\n \x01 é 日本"));
    cr_assert_eq(kv_of(r, i++, "v.u64", GGUF_TYPE_UINT64)->v.u64, UINT64_MAX);
    cr_assert_eq(kv_of(r, i++, "v.i64", GGUF_TYPE_INT64)->v.i64, INT64_MIN);
    cr_assert_eq(kv_of(r, i++, "v.f64", GGUF_TYPE_FLOAT64)->v.f64, -2.5e300);
    cr_assert_eq(kv_of(r, i++, "v.false", GGUF_TYPE_BOOL)->v.u64, 0);
    const gguf_kv *kv = kv_of(r, i++, "v.empty", GGUF_TYPE_STRING);
    cr_assert_eq(kv->v.str.len, 0);

    kv = arr_of(r, i++, "a.u8", GGUF_TYPE_UINT8, 3);
    cr_assert_eq(gguf_kv_arr_u64(kv, 2), 255);
    kv = arr_of(r, i++, "a.i8", GGUF_TYPE_INT8, 2);
    cr_assert_eq(gguf_kv_arr_i64(kv, 0), -1);
    cr_assert_eq(gguf_kv_arr_i64(kv, 1), 5);
    kv = arr_of(r, i++, "a.u16", GGUF_TYPE_UINT16, 2);
    cr_assert_eq(gguf_kv_arr_u64(kv, 1), 65535);
    kv = arr_of(r, i++, "a.i16", GGUF_TYPE_INT16, 2);
    cr_assert_eq(gguf_kv_arr_i64(kv, 0), -300);
    cr_assert_eq(gguf_kv_arr_f64(kv, 0), -300.0);
    kv = arr_of(r, i++, "a.u32", GGUF_TYPE_UINT32, 3);
    cr_assert_eq(gguf_kv_arr_u64(kv, 2), 4000000000u);
    cr_assert_eq(kv->arr_bytes, 12);
    kv = arr_of(r, i++, "a.i32", GGUF_TYPE_INT32, 2);
    cr_assert_eq(gguf_kv_arr_i64(kv, 0), -5);
    cr_assert_eq(gguf_kv_arr_i64(kv, 1), INT32_MAX);
    kv = arr_of(r, i++, "a.f32", GGUF_TYPE_FLOAT32, 4);
    cr_assert_eq(gguf_kv_arr_f64(kv, 0), 1.0);
    cr_assert_eq(f32_bits(gguf_kv_arr_f64(kv, 1)), 0x80000000u);
    cr_assert(isinf(gguf_kv_arr_f64(kv, 2)));
    cr_assert_eq(f32_bits(gguf_kv_arr_f64(kv, 3)), 1u);
    cr_assert_eq(gguf_kv_arr_u64(kv, 0), 0, "no integer view of a float array");
    kv = arr_of(r, i++, "a.bool", GGUF_TYPE_BOOL, 3);
    cr_assert_eq(gguf_kv_arr_u64(kv, 0), 1);
    cr_assert_eq(gguf_kv_arr_u64(kv, 1), 0);
    kv = arr_of(r, i++, "a.u64", GGUF_TYPE_UINT64, 2);
    cr_assert_eq(gguf_kv_arr_u64(kv, 1), UINT64_MAX);
    kv = arr_of(r, i++, "a.i64", GGUF_TYPE_INT64, 2);
    cr_assert_eq(gguf_kv_arr_i64(kv, 0), INT64_MIN);
    kv = arr_of(r, i++, "a.f64", GGUF_TYPE_FLOAT64, 2);
    cr_assert_eq(gguf_kv_arr_f64(kv, 0), 0.1);
    cr_assert_eq(gguf_kv_arr_f64(kv, 1), -1e-310);
    kv = arr_of(r, i++, "a.empty", GGUF_TYPE_UINT32, 0);
    cr_assert_eq(kv->arr_bytes, 0);
    kv = arr_of(r, i++, "a.str", GGUF_TYPE_STRING, 4);
    cr_assert_eq(gguf_kv_arr_str(kv, 0).len, 0);
    cr_assert(gguf_str_eq(gguf_kv_arr_str(kv, 1), "x"));
    cr_assert(gguf_str_eq(gguf_kv_arr_str(kv, 2), "two words"));
    cr_assert_eq(gguf_kv_arr_str(kv, 3).len, 0);
    cr_assert_eq(kv->arr_bytes, 4 * 8 + 1 + 9);
    kv = arr_of(r, i++, "a.str_empty", GGUF_TYPE_STRING, 0);

    kv = arr_of(r, i++, "a.nested_u32", GGUF_TYPE_ARRAY, 3);
    cr_assert_eq(kv->arr_bytes, sizeof nested_u32);
    gguf_kv in = gguf_kv_arr_arr(kv, 0);
    cr_assert_eq(in.arr_type, GGUF_TYPE_UINT32);
    cr_assert_eq(in.arr_count, 2);
    cr_assert_eq(gguf_kv_arr_u64(&in, 0), 1);
    cr_assert_eq(gguf_kv_arr_u64(&in, 1), 2);
    in = gguf_kv_arr_arr(kv, 1);
    cr_assert_eq(in.arr_count, 0);
    in = gguf_kv_arr_arr(kv, 2);
    cr_assert_eq(in.arr_count, 1);
    cr_assert_eq(gguf_kv_arr_u64(&in, 0), 3);
    kv = arr_of(r, i++, "a.nested_str", GGUF_TYPE_ARRAY, 1);
    in = gguf_kv_arr_arr(kv, 0);
    cr_assert_eq(in.arr_type, GGUF_TYPE_ARRAY);
    in = gguf_kv_arr_arr(&in, 0);
    cr_assert_eq(in.arr_type, GGUF_TYPE_STRING);
    cr_assert_eq(in.arr_count, 2);
    cr_assert(gguf_str_eq(gguf_kv_arr_str(&in, 0), "ab"));
    cr_assert(gguf_str_eq(gguf_kv_arr_str(&in, 1), ""));
    cr_assert_eq(i, 30);
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(gguf_roundtrip, copies_every_key_of_a_file_byte_for_byte)
{
    char *dir = tu_mkdtemp();
    char *a = tu_join(dir, "a.gguf"), *b = tu_join(dir, "b.gguf");
    gguf_writer *w = gguf_writer_new();
    set_every_type(w);
    cr_assert_eq(gguf_writer_set_str_n(w, "v.nul", "a\0b", 3), PN_OK);
    finish(w, a);
    close_and_commit(w);
    gguf_writer_free(w);

    gguf_reader *r = open_file(a);
    w = gguf_writer_new();
    for (size_t i = 0; i < gguf_reader_n_kv(r); i++)
        cr_assert_eq(gguf_writer_copy_kv(w, gguf_reader_kv(r, i)), PN_OK);
    finish(w, b);
    close_and_commit(w);
    gguf_writer_free(w);
    cr_assert_eq(gguf_reader_find_kv(r, "v.nul")->v.str.len, 3);
    cr_assert_eq(memcmp(gguf_reader_find_kv(r, "v.nul")->v.str.data, "a\0b", 3), 0);

    size_t na, nb;
    uint8_t *ba = tu_read_file(a, &na), *bb = tu_read_file(b, &nb);
    cr_assert_eq(na, nb);
    cr_assert_eq(memcmp(ba, bb, na), 0);
    free(ba);
    free(bb);
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(a);
    free(b);
    free(dir);
}

Test(gguf_writer, replaces_a_key_in_place_and_removes_keys)
{
    gguf_writer *w = gguf_writer_new();
    cr_assert_eq(gguf_writer_set_u32(w, "k1", 1), PN_OK);
    cr_assert_eq(gguf_writer_set_u32(w, "k2", 2), PN_OK);
    cr_assert_eq(gguf_writer_set_u32(w, "k3", 3), PN_OK);
    cr_assert_eq(gguf_writer_set_str(w, "k2", "two"), PN_OK);
    cr_assert_eq(gguf_writer_n_kv(w), 3);
    gguf_writer_remove_kv(w, "k1");
    gguf_writer_remove_kv(w, "absent");
    cr_assert(!gguf_writer_has_kv(w, "k1"));
    cr_assert(gguf_writer_has_kv(w, "k2"));
    cr_assert_eq(gguf_writer_set_u32(w, "", 1), PN_ERR_FORMAT, "an empty key, as the reader");
    cr_assert_eq(gguf_writer_set_arr(w, "bad", GGUF_TYPE_STRING, "x", 1), PN_ERR_USAGE);

    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "k.gguf");
    finish(w, path);
    cr_assert_eq(gguf_writer_set_u32(w, "late", 1), PN_ERR_USAGE, "keys are fixed after begin");
    close_and_commit(w);
    gguf_writer_free(w);
    gguf_reader *r = open_file(path);
    cr_assert_eq(gguf_reader_n_kv(r), 2);
    cr_assert(gguf_str_eq(gguf_reader_kv(r, 0)->key, "k2"));
    cr_assert(gguf_str_eq(gguf_reader_kv(r, 0)->v.str, "two"));
    cr_assert(gguf_str_eq(gguf_reader_kv(r, 1)->key, "k3"));
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

typedef struct tensor_case {
    const char *name;
    int type;
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t size;
} tensor_case;

static const tensor_case mixed_tensors[] = {
    { "a.f32", PN_TYPE_F32, 1, { 3, 1, 1, 1 }, 12 },
    { "b.q8_0", PN_TYPE_Q8_0, 2, { 64, 2, 1, 1 }, 136 },
    { "c.pn3t", PN_TYPE_PN3T, 2, { 80, 3, 1, 1 }, 102 },
    { "d.pn4t", PN_TYPE_PN4T, 1, { 64, 1, 1, 1 }, 34 },
    { "e.q4_K", PN_TYPE_Q4_K, 3, { 256, 1, 2, 1 }, 288 },
    { "f.f16", PN_TYPE_F16, 4, { 5, 1, 1, 2 }, 20 },
};
#define N_MIXED (sizeof mixed_tensors / sizeof mixed_tensors[0])

static void write_mixed(const char *path, uint32_t alignment, size_t chunk)
{
    gguf_writer *w = gguf_writer_new();
    pn_error e;
    gguf_writer_set_replace(w, true); /* rewritten with other alignments */
    cr_assert_eq(gguf_writer_set_str(w, "general.architecture", "mixed"), PN_OK);
    if (alignment)
        cr_assert_eq(gguf_writer_set_u32(w, "general.alignment", alignment), PN_OK);
    uint64_t total = 0;
    for (size_t i = 0; i < N_MIXED; i++) {
        const tensor_case *t = &mixed_tensors[i];
        cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, &e), PN_OK, "%s",
                     e.msg);
        total += t->size;
    }
    cr_assert_eq(gguf_writer_n_tensors(w), N_MIXED);
    finish(w, path);
    write_pattern(w, total, chunk);
    close_and_commit(w);
    gguf_writer_free(w);
}

static void check_mixed(const char *path, uint64_t align)
{
    gguf_reader *r = open_file(path);
    const uint8_t *bytes = gguf_reader_bytes(r);
    cr_assert_eq(gguf_reader_alignment(r), align);
    uint64_t data = gguf_reader_data_offset(r);
    cr_assert_eq(data % align, 0);
    cr_assert_eq(gguf_reader_n_tensors(r), N_MIXED);
    uint64_t off = 0, stream = 0, prev_end = 0;
    for (size_t i = 0; i < N_MIXED; i++) {
        const tensor_case *t = &mixed_tensors[i];
        const gguf_tensor_info *ti = gguf_reader_tensor(r, i);
        cr_assert_str_eq(ti->name, t->name);
        cr_assert_eq(ti->type, t->type);
        cr_assert_eq(ti->n_dims, t->n_dims);
        for (int d = 0; d < 4; d++)
            cr_assert_eq(ti->ne[d], t->ne[d]);
        cr_assert_eq(ti->size, t->size, "%s", t->name);
        cr_assert_eq(ti->offset, off, "%s at %llu, expected %llu", t->name,
                     (unsigned long long)ti->offset, (unsigned long long)off);
        for (uint64_t p = prev_end; p < off; p++)
            cr_assert_eq(bytes[data + p], 0, "padding byte %llu", (unsigned long long)p);
        const uint8_t *d = gguf_reader_tensor_data(r, i);
        for (uint64_t k = 0; k < t->size; k++)
            cr_assert_eq(d[k], pattern_byte(stream + k));
        stream += t->size;
        prev_end = off + t->size;
        off = (prev_end + align - 1) / align * align;
    }
    cr_assert_eq(gguf_reader_file_size(r), data + off, "the file ends padded");
    for (uint64_t p = prev_end; p < off; p++)
        cr_assert_eq(bytes[data + p], 0);
    gguf_reader_close(r);
}

Test(gguf_writer, places_tensors_of_several_types_at_padded_offsets)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "mixed.gguf");
    write_mixed(path, 0, 7);
    check_mixed(path, 32);
    write_mixed(path, 64, 1 << 20);
    check_mixed(path, 64);
    write_mixed(path, 1, 1);
    check_mixed(path, 1);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(gguf_writer, knows_the_layout_before_it_begins)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "layout.gguf");
    for (int k = 0; k < 3; k++) {
        uint32_t align = k == 0 ? 0 : k == 1 ? 64 : 4096;
        gguf_writer *w = gguf_writer_new();
        pn_error e;
        gguf_writer_set_replace(w, true); /* one path for the three layouts */
        set_every_type(w);
        if (align)
            cr_assert_eq(gguf_writer_set_u32(w, "general.alignment", align), PN_OK);
        uint64_t total = 0;
        for (size_t i = 0; i < N_MIXED; i++) {
            const tensor_case *t = &mixed_tensors[i];
            cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, &e), PN_OK);
            total += t->size;
        }
        uint64_t a = gguf_writer_alignment(w), d = gguf_writer_data_offset(w);
        uint64_t f = gguf_writer_file_bytes(w);
        cr_assert_eq(a, align ? align : 32);
        finish(w, path);
        write_pattern(w, total, 4096);
        close_and_commit(w);
        cr_assert_eq(gguf_writer_file_bytes(w), f);
        gguf_writer_free(w);
        gguf_reader *r = open_file(path);
        cr_assert_eq(gguf_reader_data_offset(r), d);
        cr_assert_eq(gguf_reader_file_size(r), f);
        gguf_reader_close(r);
    }
    gguf_writer *w = gguf_writer_new();
    cr_assert_eq(gguf_writer_set_u32(w, "general.alignment", 3), PN_OK);
    cr_assert_eq(gguf_writer_alignment(w), 0);
    cr_assert_eq(gguf_writer_file_bytes(w), 0);
    cr_assert_eq(gguf_writer_set_i32(w, "general.alignment", 32), PN_OK);
    cr_assert_eq(gguf_writer_data_offset(w), 0);
    gguf_writer_free(w);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(gguf_writer, refuses_bad_tensor_infos_naming_the_tensor)
{
    gguf_writer *w = gguf_writer_new();
    pn_error e;
    cr_assert_eq(gguf_writer_add_tensor(w, "a", 1, (int64_t[]){ 4 }, PN_TYPE_F32, &e), PN_OK);
    cr_assert_eq(gguf_writer_add_tensor(w, "a", 1, (int64_t[]){ 4 }, PN_TYPE_F32, &e),
                 PN_ERR_TENSOR);
    cr_assert(strstr(e.msg, "duplicate tensor name 'a'"), "%s", e.msg);
    cr_assert_eq(gguf_writer_add_tensor(w, "b", 5, (int64_t[]){ 1, 1, 1, 1, 1 }, PN_TYPE_F32, &e),
                 PN_ERR_TENSOR);
    cr_assert(strstr(e.msg, "tensor 'b': n_dims is 5"), "%s", e.msg);
    cr_assert_eq(gguf_writer_add_tensor(w, "c", 2, (int64_t[]){ 4, 0 }, PN_TYPE_F32, &e),
                 PN_ERR_TENSOR);
    cr_assert(strstr(e.msg, "tensor 'c': ne[1] is 0"), "%s", e.msg);
    cr_assert_eq(gguf_writer_add_tensor(w, "d", 1, (int64_t[]){ 4 }, 77, &e), PN_ERR_TYPE);
    cr_assert(strstr(e.msg, "tensor 'd': unknown ggml type id 77"), "%s", e.msg);
    cr_assert_eq(gguf_writer_add_tensor(w, "e", 1, (int64_t[]){ 100 }, PN_TYPE_PN4T, &e),
                 PN_ERR_TENSOR);
    cr_assert(strstr(e.msg, "tensor 'e': row length ne[0] = 100"), "%s", e.msg);
    cr_assert(strstr(e.msg, "pn4t block of 64"), "%s", e.msg);
    cr_assert_eq(gguf_writer_n_tensors(w), 1);
    gguf_writer_free(w);
}

Test(gguf_writer, refuses_a_bad_alignment_key_and_leaves_no_file)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "x.gguf");
    gguf_writer *w = gguf_writer_new();
    cr_assert_eq(gguf_writer_set_u32(w, "general.alignment", 48), PN_OK);
    pn_error e;
    cr_assert_eq(gguf_writer_begin(w, path, &e), PN_ERR_ALIGNMENT);
    cr_assert(strstr(e.msg, "'general.alignment' is 48"), "%s", e.msg);
    cr_assert_eq(gguf_writer_fd(w), -1);
    cr_assert_eq(tu_count_files(dir), 0);
    gguf_writer_free(w);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(gguf_writer, patches_an_array_after_the_data_went_out)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "crc.gguf");
    gguf_writer *w = gguf_writer_new();
    pn_error e;
    uint32_t zeros[3] = { 0, 0, 0 }, crcs[3] = { 0xdeadbeef, 1, 0x80000000u };
    cr_assert_eq(gguf_writer_set_arr(w, "pn.tensor_crc32", GGUF_TYPE_UINT32, zeros, 3), PN_OK);
    cr_assert_eq(gguf_writer_set_str(w, "after", "x"), PN_OK);
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof name, "t%d", i);
        cr_assert_eq(gguf_writer_add_tensor(w, name, 1, (int64_t[]){ 8 }, PN_TYPE_F32, &e), PN_OK);
    }
    finish(w, path);
    write_pattern(w, 96, 96);
    cr_assert_eq(gguf_writer_patch_arr(w, "pn.tensor_crc32", crcs, 2, &e), PN_ERR_USAGE);
    cr_assert(strstr(e.msg, "has 3 elements, patch gives 2"), "%s", e.msg);
    cr_assert_eq(gguf_writer_patch_arr(w, "after", crcs, 3, &e), PN_ERR_USAGE);
    cr_assert_eq(gguf_writer_patch_arr(w, "nope", crcs, 3, &e), PN_ERR_USAGE);
    cr_assert_eq(gguf_writer_patch_arr(w, "pn.tensor_crc32", crcs, 3, &e), PN_OK, "%s", e.msg);
    close_and_commit(w);
    gguf_writer_free(w);

    gguf_reader *r = open_file(path);
    const gguf_kv *kv = gguf_reader_find_kv(r, "pn.tensor_crc32");
    for (int i = 0; i < 3; i++)
        cr_assert_eq(gguf_kv_arr_u64(kv, (uint64_t)i), crcs[i]);
    cr_assert(gguf_str_eq(gguf_reader_find_kv(r, "after")->v.str, "x"));
    const uint8_t *d = gguf_reader_tensor_data(r, 2);
    for (int k = 0; k < 32; k++)
        cr_assert_eq(d[k], pattern_byte(64 + (uint64_t)k));
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

/* The elements straddle the first 4 MiB flush of the write buffer, so the
 * patch goes half to the file (pwrite) and half to the buffer. */
Test(gguf_writer, patches_an_array_split_between_the_file_and_the_buffer)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "split.gguf");
    gguf_writer *w = gguf_writer_new();
    pn_error e;
    const uint64_t buffer = 4u << 20;
    /* header 24; "pad": 8+3 key, 4 type, 8 length; "crc": 8+3 key, 4 type,
     * 4 element type, 8 count. */
    uint64_t before = 24 + (8 + 3 + 4 + 8) + (8 + 3 + 4 + 4 + 8);
    uint64_t pad_len = buffer - 8 - before;
    char *pad = malloc(pad_len + 1);
    memset(pad, 'p', pad_len);
    pad[pad_len] = '\0';
    cr_assert_eq(gguf_writer_set_str(w, "pad", pad), PN_OK);
    uint32_t zeros[4] = { 0 }, vals[4] = { 11, 22, 33, 44 };
    cr_assert_eq(gguf_writer_set_arr(w, "crc", GGUF_TYPE_UINT32, zeros, 4), PN_OK);
    cr_assert_eq(gguf_writer_add_tensor(w, "big", 1, (int64_t[]){ 3 << 20 }, PN_TYPE_F32, &e),
                 PN_OK);
    finish(w, path);
    write_pattern(w, 12u << 20, 1 << 20);
    cr_assert_eq(gguf_writer_patch_arr(w, "crc", vals, 4, &e), PN_OK, "%s", e.msg);
    close_and_commit(w);
    gguf_writer_free(w);

    gguf_reader *r = open_file(path);
    const gguf_kv *kv = gguf_reader_find_kv(r, "crc");
    cr_assert_eq((uint64_t)(kv->arr_data - gguf_reader_bytes(r)), buffer - 8);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(gguf_kv_arr_u64(kv, (uint64_t)i), vals[i]);
    cr_assert_eq(gguf_reader_find_kv(r, "pad")->v.str.len, pad_len);
    uint8_t *d = malloc(12u << 20);
    cr_assert_eq(gguf_reader_read_tensor(r, 0, 0, d, 12u << 20, &e), PN_OK, "%s", e.msg);
    for (uint64_t k = 0; k < (12u << 20); k += 4099)
        cr_assert_eq(d[k], pattern_byte(k));
    free(d);
    gguf_reader_close(r);
    free(pad);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

/* ------------------------------------------------------------------ */
/* The temporary file                                                  */

static gguf_writer *begun_writer(const char *path)
{
    gguf_writer *w = gguf_writer_new();
    pn_error e;
    cr_assert_eq(gguf_writer_set_u32(w, "k", 1), PN_OK);
    cr_assert_eq(gguf_writer_add_tensor(w, "t", 1, (int64_t[]){ 16 }, PN_TYPE_F32, &e), PN_OK);
    finish(w, path);
    cr_assert_geq(gguf_writer_fd(w), 0);
    cr_assert(!exists(path), "nothing at the target before the commit");
    return w;
}

Test(gguf_writer, abort_leaves_nothing_and_refuses_later_calls)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "out.gguf");
    gguf_writer *w = begun_writer(path);
    write_pattern(w, 20, 20);
    gguf_writer_abort(w);
    cr_assert_eq(gguf_writer_fd(w), -1);
    cr_assert_eq(tu_count_files(dir), 0);
    gguf_writer_abort(w);
    pn_error e;
    cr_assert_eq(gguf_writer_write(w, "x", 1, &e), PN_ERR_USAGE);
    cr_assert_eq(gguf_writer_commit(w, &e), PN_ERR_USAGE);
    gguf_writer_free(w);
    cr_assert_eq(tu_count_files(dir), 0);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(gguf_writer, the_closed_file_is_read_through_its_descriptor_and_freeing_discards_it)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "out.gguf");
    gguf_writer *w = begun_writer(path);
    write_pattern(w, 64, 64);
    pn_error e;
    cr_assert_eq(gguf_writer_close(w, &e), PN_OK, "%s", e.msg);
    cr_assert_geq(gguf_writer_fd(w), 0, "the closed file stays open to be re-read");
    gguf_reader *r = NULL;
    cr_assert_eq(gguf_reader_open_fd(gguf_writer_fd(w), path, &r, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(gguf_reader_n_tensors(r), 1);
    uint8_t d[64];
    cr_assert_eq(gguf_reader_read_tensor(r, 0, 0, d, 64, &e), PN_OK, "%s", e.msg);
    for (int k = 0; k < 64; k++)
        cr_assert_eq(d[k], pattern_byte((uint64_t)k));
    gguf_reader_close(r);
    cr_assert(!exists(path));
    gguf_writer_free(w);
    cr_assert_eq(tu_count_files(dir), 0);

    w = begun_writer(path);
    gguf_writer_free(w);
    cr_assert_eq(tu_count_files(dir), 0);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(gguf_writer, commit_puts_the_file_at_the_target_and_needs_close_first)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "out.gguf");
    gguf_writer *w = gguf_writer_new();
    pn_error e;
    cr_assert_eq(gguf_writer_add_tensor(w, "t", 1, (int64_t[]){ 16 }, PN_TYPE_F32, &e), PN_OK);
    finish(w, path);
    write_pattern(w, 64, 64);
    cr_assert_eq(gguf_writer_commit(w, &e), PN_ERR_USAGE, "commit needs close first");
    cr_assert(strstr(e.msg, "commit before close"), "%s", e.msg);
    cr_assert_eq(gguf_writer_fd(w), -1, "a failed commit aborts");
    gguf_writer_free(w);
    cr_assert_eq(tu_count_files(dir), 0);

    mode_t mask = umask(0);
    umask(mask);
    w = begun_writer(path);
    write_pattern(w, 64, 64);
    close_and_commit(w);
    cr_assert_eq(gguf_writer_fd(w), -1);
    gguf_writer_free(w);
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    cr_assert_eq(sb.st_mode & 0777, 0644 & ~mask);
    gguf_reader *r = open_file(path);
    cr_assert_eq(gguf_reader_n_tensors(r), 1);
    gguf_reader_close(r);
    cr_assert_eq(tu_count_files(dir), 1);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(gguf_writer, refuses_too_many_or_too_few_bytes_and_leaves_no_file)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "out.gguf");
    gguf_writer *w = begun_writer(path);
    uint8_t buf[80] = { 0 };
    pn_error e;
    cr_assert_eq(gguf_writer_write(w, buf, sizeof buf, &e), PN_ERR_USAGE);
    cr_assert(strstr(e.msg, "16 bytes written past the end of the last tensor"), "%s", e.msg);
    cr_assert(strncmp(e.msg, path, strlen(path)) == 0, "%s", e.msg);
    cr_assert_eq(tu_count_files(dir), 0);
    gguf_writer_free(w);

    w = begun_writer(path);
    cr_assert_eq(gguf_writer_write(w, buf, 10, &e), PN_OK);
    cr_assert_eq(gguf_writer_close(w, &e), PN_ERR_USAGE);
    cr_assert(strstr(e.msg, "tensor 't' (0 of 1) got 10 of its 64 bytes"), "%s", e.msg);
    cr_assert_eq(tu_count_files(dir), 0);
    gguf_writer_free(w);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

/* ulimit -f is a full disk, named, with the offset. */
Test(gguf_writer, a_file_size_limit_is_reported_as_a_full_disk_naming_the_target_and_offset)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "out.gguf");
    /* A file size limit makes write() fail with EFBIG (SIGXFSZ ignored, as
     * the programs do). */
    struct rlimit old, lim;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 1 << 20;
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    signal(SIGXFSZ, SIG_IGN);

    gguf_writer *w = gguf_writer_new();
    pn_error e;
    cr_assert_eq(gguf_writer_add_tensor(w, "big", 1, (int64_t[]){ 4 << 20 }, PN_TYPE_F32, &e),
                 PN_OK);
    finish(w, path);
    uint8_t *chunk = calloc(1, 1 << 20);
    pn_status st = PN_OK;
    for (int i = 0; i < 16 && st == PN_OK; i++)
        st = gguf_writer_write(w, chunk, 1 << 20, &e);
    setrlimit(RLIMIT_FSIZE, &old);
    cr_assert_eq(st, PN_ERR_NOSPACE, "%s", e.msg);
    cr_assert(strncmp(e.msg, path, strlen(path)) == 0, "%s", e.msg);
    cr_assert(strstr(e.msg, "at byte offset 1048576"), "%s", e.msg);
    cr_assert(strstr(e.msg, "the file size limit (ulimit -f) was reached"), "%s", e.msg);
    cr_assert_eq(tu_count_files(dir), 0);
    cr_assert_eq(gguf_writer_close(w, &e), PN_ERR_USAGE);
    gguf_writer_free(w);
    free(chunk);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(gguf_writer, reports_a_target_folder_that_does_not_exist)
{
    gguf_writer *w = gguf_writer_new();
    pn_error e;
    cr_assert_eq(gguf_writer_begin(w, "/nonexistent-dir/out.gguf", &e), PN_ERR_IO);
    cr_assert(strstr(e.msg, "/nonexistent-dir/out.gguf: cannot create a temporary file"), "%s",
              e.msg);
    cr_assert_eq(gguf_writer_fd(w), -1);
    gguf_writer_free(w);
}

/* ------------------------------------------------------------------ */
/* Speed of opening (a measurement, not a timed assertion)             */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ */
/* The output file (common/outfile.h through the writer)              */

/* A one-tensor model of 64 pattern bytes at path, left closed (not
 * committed) in *out, or committed when out is NULL. */
static pn_status write_small(const char *path, const pn_outfile_opts *o, gguf_writer **out,
                             pn_error *e)
{
    gguf_writer *w = gguf_writer_new();
    if (o)
        gguf_writer_set_output_opts(w, o);
    cr_assert_eq(gguf_writer_set_str(w, "general.name", "small"), PN_OK);
    cr_assert_eq(gguf_writer_add_tensor(w, "t", 1, (int64_t[]){ 16 }, PN_TYPE_F32, e), PN_OK);
    pn_status st = gguf_writer_begin(w, path, e);
    if (st) {
        cr_assert_eq(gguf_writer_fd(w), -1);
        gguf_writer_free(w);
        return st;
    }
    write_pattern(w, 64, 64);
    cr_assert_eq(gguf_writer_close(w, e), PN_OK, "%s", e->msg);
    if (out) {
        *out = w;
        return PN_OK;
    }
    st = gguf_writer_commit(w, e);
    gguf_writer_free(w);
    return st;
}

static bool same_bytes(const char *a, const char *b)
{
    size_t na, nb;
    void *da = tu_read_file(a, &na), *db = tu_read_file(b, &nb);
    bool same = na == nb && memcmp(da, db, na) == 0;
    free(da);
    free(db);
    return same;
}

/* No output replaces a file without --force. */
Test(gguf_writer_output, an_existing_target_is_refused_at_begin_unless_replace_is_set)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "out.gguf");
    cr_assert_eq(tu_write_file(path, "precious", 8), 0);
    pn_error e;
    cr_assert_eq(write_small(path, NULL, NULL, &e), PN_ERR_EXISTS);
    cr_assert(strncmp(e.msg, path, strlen(path)) == 0 && strstr(e.msg, "use --force"), "%s", e.msg);
    size_t n;
    char *b = tu_read_file(path, &n);
    cr_assert(n == 8 && memcmp(b, "precious", 8) == 0, "the existing file is untouched");
    free(b);
    cr_assert_eq(tu_count_files(dir), 1);

    pn_outfile_opts force = { .force = true };
    cr_assert_eq(write_small(path, &force, NULL, &e), PN_OK, "%s", e.msg);
    gguf_reader *r = open_file(path);
    cr_assert_eq(gguf_reader_n_tensors(r), 1);
    gguf_reader_close(r);

    /* set_replace is the same switch */
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_replace(w, true);
    cr_assert_eq(gguf_writer_add_tensor(w, "u", 1, (int64_t[]){ 8 }, PN_TYPE_F32, &e), PN_OK);
    finish(w, path);
    write_pattern(w, 32, 32);
    close_and_commit(w);
    gguf_writer_free(w);
    r = open_file(path);
    cr_assert_str_eq(gguf_reader_tensor(r, 0)->name, "u");
    gguf_reader_close(r);
    cr_assert_eq(tu_count_files(dir), 1);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

/* Two runs writing one DST: the one that finishes second
 * is refused and the first one's file stays. */
Test(gguf_writer_output, a_target_made_by_another_run_during_this_one_is_refused_at_commit)
{
    for (int named = 0; named < 2; named++) {
        char *dir = tu_mkdtemp();
        char *path = tu_join(dir, "out.gguf");
        char *first = tu_join(dir, "first.gguf");
        const pn_outfile_testing t = { .named_temp = named };
        pn_outfile_opts o = { .testing = &t };
        gguf_writer *w = NULL;
        pn_error e;
        cr_assert_eq(write_small(path, &o, &w, &e), PN_OK, "%s", e.msg);
        /* the other run: another model, committed at the same path */
        gguf_writer *v = gguf_writer_new();
        cr_assert_eq(gguf_writer_add_tensor(v, "other", 1, (int64_t[]){ 8 }, PN_TYPE_F32, &e),
                     PN_OK);
        finish(v, path);
        write_pattern(v, 32, 32);
        close_and_commit(v);
        gguf_writer_free(v);
        cr_assert_eq(tu_write_file(first, "", 0), 0);

        cr_assert_eq(gguf_writer_commit(w, &e), PN_ERR_EXISTS, "named %d: %s", named, e.msg);
        cr_assert(strncmp(e.msg, path, strlen(path)) == 0, "%s", e.msg);
        cr_assert(strstr(e.msg, "nothing was replaced"), "%s", e.msg);
        cr_assert_eq(gguf_writer_fd(w), -1, "a refused commit aborts");
        gguf_writer_free(w);
        gguf_reader *r = open_file(path);
        cr_assert_str_eq(gguf_reader_tensor(r, 0)->name, "other", "the other run's file stays");
        gguf_reader_close(r);
        cr_assert_eq(tu_count_files(dir), 2, "named %d: no temporary file is left", named);
        free(first);
        tu_rm_rf(dir);
        free(path);
        free(dir);
    }
}

Test(gguf_writer_output, a_directory_or_a_fifo_target_is_refused_at_begin_even_with_replace)
{
    char *dir = tu_mkdtemp();
    char *sub = tu_join(dir, "sub.gguf");
    char *fifo = tu_join(dir, "fifo.gguf");
    cr_assert_eq(mkdir(sub, 0755), 0);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    pn_outfile_opts force = { .force = true };
    pn_error e;
    cr_assert_eq(write_small(sub, &force, NULL, &e), PN_ERR_IO);
    cr_assert(strstr(e.msg, "sub.gguf: the output is a directory"), "%s", e.msg);
    cr_assert_eq(write_small(fifo, &force, NULL, &e), PN_ERR_IO);
    cr_assert(strstr(e.msg, "fifo.gguf: the output is a FIFO"), "%s", e.msg);
    cr_assert_eq(tu_count_files(dir), 2);
    free(sub);
    free(fifo);
    tu_rm_rf(dir);
    free(dir);
}

/* A DST name at NAME_MAX is legal, so it is written. */
Test(gguf_writer_output, the_named_fallback_writes_the_same_bytes_even_for_a_name_max_target)
{
    char *dir = tu_mkdtemp();
    char name[NAME_MAX + 1];
    memset(name, 'm', NAME_MAX - 5);
    memcpy(name + NAME_MAX - 5, ".gguf", 6);
    cr_assert_eq(strlen(name), NAME_MAX);
    char *a = tu_join(dir, "unnamed.gguf");
    char *b = tu_join(dir, name);
    pn_error e;
    cr_assert_eq(write_small(a, NULL, NULL, &e), PN_OK, "%s", e.msg);
    const pn_outfile_testing t = { .named_temp = true };
    pn_outfile_opts named = { .testing = &t };
    cr_assert_eq(write_small(b, &named, NULL, &e), PN_OK, "%s", e.msg);
    cr_assert(same_bytes(a, b));
    char *c = tu_join(dir, "c.gguf");
    cr_assert_eq(write_small(c, NULL, NULL, &e), PN_OK, "%s", e.msg);
    pn_outfile_opts force = { .force = true };
    cr_assert_eq(write_small(b, &force, NULL, &e), PN_OK, "%s", e.msg);
    cr_assert(same_bytes(a, b));
    cr_assert_eq(tu_count_files(dir), 3);
    free(a);
    free(b);
    free(c);
    tu_rm_rf(dir);
    free(dir);
}

/* A killed run's temporary file is named by the next run. */
Test(gguf_writer_output, begin_names_the_stale_temporary_files_of_the_target)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "out.gguf");
    char *stale = tu_join(dir, ".out.gguf.pn-Zz09Yy");
    char *legacy = tu_join(dir, "out.gguf.tmp.q1W2e3");
    cr_assert_eq(tu_write_file(stale, "x", 1), 0);
    cr_assert_eq(tu_write_file(legacy, "y", 1), 0);
    gguf_writer *w = NULL;
    pn_error e;
    cr_assert_null(gguf_writer_note(NULL));
    cr_assert_eq(write_small(path, NULL, &w, &e), PN_OK, "%s", e.msg);
    const char *note = gguf_writer_note(w);
    cr_assert_not_null(note);
    cr_assert(strstr(note, stale) && strstr(note, legacy) && strstr(note, "remove them"), "%s",
              note);
    cr_assert_eq(gguf_writer_commit(w, &e), PN_OK, "%s", e.msg);
    cr_assert_not_null(gguf_writer_note(w), "the note lives until free");
    gguf_writer_free(w);
    cr_assert(exists(stale) && exists(legacy), "never removed by the writer");

    char *other = tu_join(dir, "other.gguf");
    cr_assert_eq(write_small(other, NULL, &w, &e), PN_OK, "%s", e.msg);
    cr_assert_null(gguf_writer_note(w), "another target's folder mates are not its own");
    gguf_writer_free(w);
    free(other);
    free(stale);
    free(legacy);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

/* SIGKILL leaves nothing where O_TMPFILE works. */
Test(gguf_writer_output, a_run_killed_while_writing_leaves_nothing)
{
    char *dir = tu_mkdtemp_tmpfile();
    char *path = tu_join(dir, "out.gguf");
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        gguf_writer *w = gguf_writer_new();
        pn_error e;
        if (gguf_writer_add_tensor(w, "t", 1, (int64_t[]){ 1 << 20 }, PN_TYPE_F32, &e) ||
            gguf_writer_begin(w, path, &e))
            _exit(3);
        static uint8_t buf[1 << 21];
        if (gguf_writer_write(w, buf, sizeof buf, &e) || write(p[1], "w", 1) != 1)
            _exit(4);
        for (;;)
            pause();
    }
    close(p[1]);
    char c;
    cr_assert_eq(read(p[0], &c, 1), 1, "the child did not get to write");
    close(p[0]);
    kill(pid, SIGKILL);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status));
    cr_assert_eq(tu_count_files(dir), 0);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(gguf_writer_output, a_set_of_writers_is_committed_all_or_nothing)
{
    char *dir = tu_mkdtemp();
    char *paths[3];
    gguf_writer *ws[3];
    pn_error e;
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "m-%05d-of-00003.gguf", i + 1);
        paths[i] = tu_join(dir, name);
        cr_assert_eq(write_small(paths[i], NULL, &ws[i], &e), PN_OK, "%s", e.msg);
    }
    cr_assert_eq(tu_write_file(paths[1], "theirs", 6), 0);
    cr_assert_eq(gguf_writer_commit_set(ws, 3, &e), PN_ERR_EXISTS, "%s", e.msg);
    cr_assert(strstr(e.msg, "m-00002-of-00003.gguf"), "%s", e.msg);
    cr_assert(!exists(paths[0]) && !exists(paths[2]));
    cr_assert_eq(tu_count_files(dir), 1);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(gguf_writer_fd(ws[i]), -1);
        gguf_writer_free(ws[i]);
    }
    cr_assert_eq(unlink(paths[1]), 0);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(write_small(paths[i], NULL, &ws[i], &e), PN_OK, "%s", e.msg);
    cr_assert_eq(gguf_writer_commit_set(ws, 3, &e), PN_OK, "%s", e.msg);
    for (int i = 0; i < 3; i++) {
        gguf_writer_free(ws[i]);
        gguf_reader *r = open_file(paths[i]);
        gguf_reader_close(r);
        free(paths[i]);
    }
    tu_rm_rf(dir);
    free(dir);
}

/* ------------------------------------------------------------------ */
/* Keys the reader refuses are refused by the writer                   */

Test(gguf_writer_keys, an_empty_key_or_one_holding_a_nul_is_refused_naming_its_index)
{
    gguf_writer *w = gguf_writer_new();
    cr_assert_null(gguf_writer_last_error(w));
    cr_assert_eq(gguf_writer_set_u32(w, "a", 1), PN_OK);
    cr_assert_eq(gguf_writer_set_u32(w, "b", 2), PN_OK);
    cr_assert_eq(gguf_writer_set_u32(w, "", 3), PN_ERR_FORMAT);
    cr_assert_str_eq(gguf_writer_last_error(w), "gguf writer: key 2 is empty");
    cr_assert_eq(gguf_writer_set_str(w, "", "v"), PN_ERR_FORMAT);
    cr_assert_eq(gguf_writer_set_arr_str(w, "", (const char *[]){ "v" }, 1), PN_ERR_FORMAT);

    gguf_kv kv;
    memset(&kv, 0, sizeof kv);
    kv.type = GGUF_TYPE_UINT8;
    kv.v.u64 = 7;
    kv.key.data = "ab\0cd";
    kv.key.len = 5;
    cr_assert_eq(gguf_writer_copy_kv(w, &kv), PN_ERR_FORMAT);
    cr_assert(strstr(gguf_writer_last_error(w), "key 2 ('ab...') holds a NUL byte at byte 2"), "%s",
              gguf_writer_last_error(w));
    kv.key.len = 0;
    cr_assert_eq(gguf_writer_copy_kv(w, &kv), PN_ERR_FORMAT);
    cr_assert(strstr(gguf_writer_last_error(w), "key 2 is empty"), "%s", gguf_writer_last_error(w));
    kv.key.data = "c";
    kv.key.len = 1;
    cr_assert_eq(gguf_writer_copy_kv(w, &kv), PN_OK);
    cr_assert_eq(gguf_writer_n_kv(w), 3);

    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "k.gguf");
    finish(w, path);
    close_and_commit(w);
    gguf_writer_free(w);
    gguf_reader *r = open_file(path);
    cr_assert_eq(gguf_reader_n_kv(r), 3);
    cr_assert(gguf_str_eq(gguf_reader_kv(r, 2)->key, "c"));
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

/* ------------------------------------------------------------------ */
/* Time linear in the keys and tensors                                 */

/* The bound is generous: linear work takes well under a second; the
 * quadratic writer took minutes. */
#define LINEAR_BOUND_S 10.0

Test(gguf_writer_scale, two_hundred_thousand_keys_are_set_copied_and_written_in_linear_time)
{
    enum { N = 200000 };
    char *dir = tu_mkdtemp();
    char *a = tu_join(dir, "keys.gguf"), *b = tu_join(dir, "copy.gguf");
    char key[32];
    double t0 = now_s();
    gguf_writer *w = gguf_writer_new();
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof key, "key.%06d", i);
        cr_assert_eq(gguf_writer_set_u32(w, key, (uint32_t)i), PN_OK);
    }
    for (int i = 0; i < N; i += 2) { /* setting again replaces in place */
        snprintf(key, sizeof key, "key.%06d", i);
        cr_assert_eq(gguf_writer_set_u32(w, key, (uint32_t)i + 1000000u), PN_OK);
    }
    cr_assert_eq(gguf_writer_n_kv(w), N, "a key set twice is one key");
    finish(w, a);
    close_and_commit(w);
    gguf_writer_free(w);
    double t_set = now_s() - t0;

    gguf_reader *r = open_file(a);
    cr_assert_eq(gguf_reader_n_kv(r), N);
    t0 = now_s();
    w = gguf_writer_new();
    for (size_t i = 0; i < N; i++)
        cr_assert_eq(gguf_writer_copy_kv(w, gguf_reader_kv(r, i)), PN_OK);
    for (size_t i = 0; i < N; i++) /* copying again is a set of each again */
        cr_assert_eq(gguf_writer_copy_kv(w, gguf_reader_kv(r, i)), PN_OK);
    for (int i = 0; i < N; i += 3) {
        snprintf(key, sizeof key, "key.%06d", i);
        gguf_writer_remove_kv(w, key);
    }
    finish(w, b);
    close_and_commit(w);
    gguf_writer_free(w);
    double t_copy = now_s() - t0;
    gguf_reader_close(r);
    cr_log_info("200k keys: set and write %.2f s, copy, remove a third and write %.2f s", t_set,
                t_copy);
    cr_assert_lt(t_set, LINEAR_BOUND_S, "setting 200k keys took %.1f s", t_set);
    cr_assert_lt(t_copy, LINEAR_BOUND_S, "copying 200k keys took %.1f s", t_copy);

    r = open_file(b);
    cr_assert_eq(gguf_reader_n_kv(r), N - (N + 2) / 3);
    size_t k = 0;
    for (int i = 0; i < N; i++) {
        if (i % 3 == 0)
            continue;
        const gguf_kv *kv = gguf_reader_kv(r, k++);
        snprintf(key, sizeof key, "key.%06d", i);
        cr_assert(gguf_str_eq(kv->key, key), "key %zu in insertion order", k - 1);
        cr_assert_eq(kv->v.u64, (uint64_t)i + (i % 2 == 0 ? 1000000u : 0u));
    }
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(a);
    free(b);
    free(dir);
}

Test(gguf_writer_scale, sixty_thousand_tensors_are_added_and_written_in_linear_time)
{
    enum { N = 60000 };
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "tensors.gguf");
    char name[48];
    pn_error e;
    double t0 = now_s();
    gguf_writer *w = gguf_writer_new();
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "blk.%d.ffn_gate.weight", i);
        cr_assert_eq(gguf_writer_add_tensor(w, name, 1, (int64_t[]){ 8 }, PN_TYPE_F32, &e), PN_OK,
                     "%s", e.msg);
    }
    double t_add = now_s() - t0;
    cr_assert_eq(gguf_writer_add_tensor(w, "blk.12345.ffn_gate.weight", 1, (int64_t[]){ 8 },
                                        PN_TYPE_F32, &e),
                 PN_ERR_TENSOR, "a duplicate among 60k is still refused");
    cr_assert(strstr(e.msg, "duplicate tensor name 'blk.12345.ffn_gate.weight' (tensor 12345 "
                            "and 60000)"),
              "%s", e.msg);
    cr_assert_eq(gguf_writer_n_tensors(w), N);
    t0 = now_s();
    finish(w, path);
    write_pattern(w, (uint64_t)N * 32, 1 << 16);
    close_and_commit(w);
    gguf_writer_free(w);
    double t_write = now_s() - t0;
    cr_log_info("60k tensors: add %.2f s, write %.2f s", t_add, t_write);
    cr_assert_lt(t_add, LINEAR_BOUND_S, "adding 60k tensors took %.1f s", t_add);
    cr_assert_lt(t_write, LINEAR_BOUND_S, "writing 60k tensors took %.1f s", t_write);
    gguf_reader *r = open_file(path);
    cr_assert_eq(gguf_reader_n_tensors(r), N);
    cr_assert_str_eq(gguf_reader_tensor(r, N - 1)->name, "blk.59999.ffn_gate.weight");
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

/* The hash index against a plain array model: random sets and removals of
 * a small name space, so removals shift entries back across each other. */
Test(gguf_writer_scale, the_key_index_agrees_with_a_plain_model_under_random_sets_and_removals)
{
    enum { NAMES = 1500, OPS = 40000 };
    tu_rng rng = { 12345 };
    gguf_writer *w = gguf_writer_new();
    int64_t order[NAMES]; /* insertion stamp of a present key, -1 if absent */
    uint32_t value[NAMES];
    for (int i = 0; i < NAMES; i++)
        order[i] = -1;
    char key[32];
    size_t present = 0;
    for (int64_t op = 0; op < OPS; op++) {
        int i = (int)(tu_rng_u64(&rng) % NAMES);
        snprintf(key, sizeof key, "k%d", i);
        if (tu_rng_u64(&rng) % 3 == 0) {
            gguf_writer_remove_kv(w, key);
            present -= order[i] >= 0;
            order[i] = -1;
        } else {
            uint32_t v = (uint32_t)tu_rng_u64(&rng);
            cr_assert_eq(gguf_writer_set_u32(w, key, v), PN_OK);
            if (order[i] < 0) {
                order[i] = op;
                present++;
            }
            value[i] = v;
        }
        int j = (int)(tu_rng_u64(&rng) % NAMES);
        snprintf(key, sizeof key, "k%d", j);
        cr_assert_eq(gguf_writer_has_kv(w, key), order[j] >= 0, "op %lld: k%d", (long long)op, j);
    }
    cr_assert_eq(gguf_writer_n_kv(w), present);
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "model.gguf");
    finish(w, path);
    close_and_commit(w);
    gguf_writer_free(w);
    gguf_reader *r = open_file(path);
    cr_assert_eq(gguf_reader_n_kv(r), present);
    int64_t last = -1;
    for (size_t k = 0; k < present; k++) {
        const gguf_kv *kv = gguf_reader_kv(r, k);
        int i = atoi(kv->key.data + 1);
        cr_assert_gt(order[i], last, "keys in order of insertion");
        last = order[i];
        cr_assert_eq(kv->v.u64, value[i]);
    }
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

/* ------------------------------------------------------------------ */
/* An independent parser (@huggingface/gguf, via tests/node)            */

typedef struct strbuf {
    char *s;
    size_t len, cap;
} strbuf;

static void sb_add(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->len + (size_t)n + 1 > b->cap) {
        b->cap = (b->len + (size_t)n + 1) * 2;
        b->s = realloc(b->s, b->cap);
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* A string as JSON.stringify writes it (valid UTF-8 passes through). */
static void json_str(strbuf *b, gguf_str s)
{
    sb_add(b, "\"");
    for (uint64_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.data[i];
        switch (c) {
        case '"': sb_add(b, "\\\""); break;
        case '\\': sb_add(b, "\\\\"); break;
        case '\b': sb_add(b, "\\b"); break;
        case '\f': sb_add(b, "\\f"); break;
        case '\n': sb_add(b, "\\n"); break;
        case '\r': sb_add(b, "\\r"); break;
        case '\t': sb_add(b, "\\t"); break;
        default:
            if (c < 0x20)
                sb_add(b, "\\u%04x", c);
            else
                sb_add(b, "%c", c);
        }
    }
    sb_add(b, "\"");
}

static uint64_t raw_elem(const gguf_kv *kv, uint64_t i, size_t n)
{
    uint64_t v = 0;
    for (size_t k = 0; k < n; k++)
        v |= (uint64_t)kv->arr_data[i * n + k] << (8 * k);
    return v;
}

static void json_elements(strbuf *b, const gguf_kv *kv, bool typed)
{
    sb_add(b, "[");
    for (uint64_t i = 0; i < kv->arr_count; i++) {
        if (i)
            sb_add(b, ",");
        switch (kv->arr_type) {
        case GGUF_TYPE_UINT8:
        case GGUF_TYPE_UINT16:
        case GGUF_TYPE_UINT32: sb_add(b, "%llu", (unsigned long long)gguf_kv_arr_u64(kv, i)); break;
        case GGUF_TYPE_INT8:
        case GGUF_TYPE_INT16:
        case GGUF_TYPE_INT32: sb_add(b, "%lld", (long long)gguf_kv_arr_i64(kv, i)); break;
        case GGUF_TYPE_UINT64:
            sb_add(b, "\"%llu\"", (unsigned long long)gguf_kv_arr_u64(kv, i));
            break;
        case GGUF_TYPE_INT64: sb_add(b, "\"%lld\"", (long long)gguf_kv_arr_i64(kv, i)); break;
        case GGUF_TYPE_BOOL: sb_add(b, "%s", gguf_kv_arr_u64(kv, i) ? "true" : "false"); break;
        case GGUF_TYPE_FLOAT32:
            cr_assert(typed, "no float elements in nested arrays in this test");
            sb_add(b, "\"0x%08llx\"", (unsigned long long)raw_elem(kv, i, 4));
            break;
        case GGUF_TYPE_FLOAT64:
            cr_assert(typed, "no float elements in nested arrays in this test");
            sb_add(b, "\"0x%016llx\"", (unsigned long long)raw_elem(kv, i, 8));
            break;
        case GGUF_TYPE_STRING: json_str(b, gguf_kv_arr_str(kv, i)); break;
        case GGUF_TYPE_ARRAY: {
            gguf_kv in = gguf_kv_arr_arr(kv, i);
            json_elements(b, &in, false);
            break;
        }
        default: cr_assert_fail("bad element type");
        }
    }
    sb_add(b, "]");
}

/* Our reading of a file, in the format tests/node/gguf-dump.mjs prints. */
static char *dump_like_node(const gguf_reader *r)
{
    strbuf b = { 0 };
    sb_add(&b, "{\"version\":%u,\"tensor_data_offset\":\"%llu\",\"kv\":[", gguf_reader_version(r),
           (unsigned long long)gguf_reader_data_offset(r));
    for (size_t i = 0; i < gguf_reader_n_kv(r); i++) {
        const gguf_kv *kv = gguf_reader_kv(r, i);
        sb_add(&b, "%s{\"key\":", i ? "," : "");
        json_str(&b, kv->key);
        sb_add(&b, ",\"type\":\"%s\"", gguf_value_type_name(kv->type));
        switch (kv->type) {
        case GGUF_TYPE_UINT8:
        case GGUF_TYPE_UINT16:
        case GGUF_TYPE_UINT32: sb_add(&b, ",\"value\":%llu", (unsigned long long)kv->v.u64); break;
        case GGUF_TYPE_INT8:
        case GGUF_TYPE_INT16:
        case GGUF_TYPE_INT32: sb_add(&b, ",\"value\":%lld", (long long)kv->v.i64); break;
        case GGUF_TYPE_UINT64:
            sb_add(&b, ",\"value\":\"%llu\"", (unsigned long long)kv->v.u64);
            break;
        case GGUF_TYPE_INT64: sb_add(&b, ",\"value\":\"%lld\"", (long long)kv->v.i64); break;
        case GGUF_TYPE_BOOL: sb_add(&b, ",\"value\":%s", kv->v.u64 ? "true" : "false"); break;
        case GGUF_TYPE_FLOAT32: sb_add(&b, ",\"value\":\"0x%08x\"", f32_bits(kv->v.f64)); break;
        case GGUF_TYPE_FLOAT64: {
            uint64_t bits;
            memcpy(&bits, &kv->v.f64, sizeof bits);
            sb_add(&b, ",\"value\":\"0x%016llx\"", (unsigned long long)bits);
            break;
        }
        case GGUF_TYPE_STRING:
            sb_add(&b, ",\"value\":");
            json_str(&b, kv->v.str);
            break;
        case GGUF_TYPE_ARRAY:
            sb_add(&b, ",\"elem_type\":\"%s\",\"value\":", gguf_value_type_name(kv->arr_type));
            json_elements(&b, kv, true);
            break;
        default: cr_assert_fail("bad value type");
        }
        sb_add(&b, "}");
    }
    sb_add(&b, "],\"tensors\":[");
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        sb_add(&b, "%s{\"name\":", i ? "," : "");
        json_str(&b, (gguf_str){ strlen(t->name), t->name });
        sb_add(&b, ",\"n_dims\":%u,\"shape\":[", t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            sb_add(&b, "%s\"%lld\"", d ? "," : "", (long long)t->ne[d]);
        sb_add(&b, "],\"dtype\":%d,\"offset\":\"%llu\"}", t->type, (unsigned long long)t->offset);
    }
    sb_add(&b, "]}\n");
    return b.s;
}

Test(gguf_node, an_independent_parser_reads_our_file_the_same_way)
{
    /* the only parser of our files not written here: CI (PN_REQUIRE_LLAMA=1,
     * which installs Node.js for llama.cpp) must run it, never skip it */
    const char *ci = getenv("PN_REQUIRE_LLAMA");
    const bool required = ci && strcmp(ci, "1") == 0;
    char *out = NULL, *err = NULL;
    const char *why = NULL;
    if (tu_run("node --version", &out, &err) != 0)
        why = "node is not installed; the independent GGUF parser runs on Node.js";
    else if (access(PN_SOURCE_DIR "/tests/node/node_modules/@huggingface/gguf/package.json",
                    R_OK) != 0)
        why = "@huggingface/gguf is not installed: run `npm ci --prefix tests/node` in the "
              "source tree";
    free(out);
    free(err);
    if (why && required)
        cr_assert_fail("the Node.js GGUF check is required here (PN_REQUIRE_LLAMA=1): %s", why);
    if (why)
        cr_skip_test("%s", why);

    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "node.gguf");
    gguf_writer *w = gguf_writer_new();
    pn_error e;
    set_every_type(w);
    cr_assert_eq(gguf_writer_set_f32(w, "v.f32b", 1e-45f), PN_OK);
    cr_assert_eq(gguf_writer_set_f32(w, "v.f32c", 3.1415927f), PN_OK);
    cr_assert_eq(gguf_writer_set_u32(w, "general.alignment", 64), PN_OK);
    uint64_t total = 0;
    for (size_t i = 0; i < N_MIXED; i++) {
        const tensor_case *t = &mixed_tensors[i];
        cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, &e), PN_OK);
        total += t->size;
    }
    finish(w, path);
    write_pattern(w, total, 1000);
    close_and_commit(w);
    gguf_writer_free(w);

    gguf_reader *r = open_file(path);
    char *ours = dump_like_node(r);
    gguf_reader_close(r);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "node '%s/tests/node/gguf-dump.mjs' '%s'", PN_SOURCE_DIR, path);
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "gguf-dump.mjs failed (%d): %s", rc, err);
    cr_assert_str_eq(out, ours);
    cr_assert(strstr(out, "\"dtype\":124"), "the pn3t tensor is there");
    free(out);
    free(err);
    free(ours);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

/* ------------------------------------------------------------------ */
/* Reading files: FIFOs, large headers, files that shrink              */

/* A model of one f32 tensor of n floats (pattern bytes) plus a string key of
 * pad_len bytes, written to dir/name. */
static char *write_model(const char *dir, const char *name, uint64_t pad_len, int64_t n)
{
    char *path = tu_join(dir, name);
    gguf_writer *w = gguf_writer_new();
    pn_error e;
    char *pad = malloc(pad_len + 1);
    memset(pad, 'k', pad_len);
    pad[pad_len] = '\0';
    cr_assert_eq(gguf_writer_set_str(w, "pad", pad), PN_OK);
    free(pad);
    cr_assert_eq(gguf_writer_add_tensor(w, "t", 1, (int64_t[]){ n }, PN_TYPE_F32, &e), PN_OK);
    finish(w, path);
    write_pattern(w, (uint64_t)n * 4, 1 << 20);
    close_and_commit(w);
    gguf_writer_free(w);
    return path;
}

Test(gguf_reader_io, a_fifo_is_refused_at_once_without_waiting_for_a_writer)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "pipe.gguf");
    cr_assert_eq(mkfifo(path, 0600), 0);
    gguf_reader *r = NULL;
    pn_error e;
    alarm(20); /* a hang fails the test instead of the suite */
    cr_assert_eq(gguf_reader_open(path, &r, &e), PN_ERR_IO);
    alarm(0);
    cr_assert_null(r);
    cr_assert(strstr(e.msg, path) && strstr(e.msg, "FIFO"), "%s", e.msg);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(gguf_reader_io, a_directory_is_refused_naming_it)
{
    char *dir = tu_mkdtemp();
    gguf_reader *r = NULL;
    pn_error e;
    cr_assert_eq(gguf_reader_open(dir, &r, &e), PN_ERR_IO);
    cr_assert(strstr(e.msg, dir) && strstr(e.msg, "directory"), "%s", e.msg);
    tu_rm_rf(dir);
    free(dir);
}

/* A 40 MiB key makes the header larger than the first read: the reader must
 * grow its buffer and still see every byte of the key right. */
Test(gguf_reader_io, a_header_larger_than_the_first_read_is_read_whole)
{
    char *dir = tu_mkdtemp();
    const uint64_t pad_len = 40u << 20;
    char *path = write_model(dir, "big-header.gguf", pad_len, 1024);
    gguf_reader *r = open_file(path);
    const gguf_kv *kv = gguf_reader_find_kv(r, "pad");
    cr_assert_not_null(kv);
    cr_assert_eq(kv->v.str.len, pad_len);
    for (uint64_t i = 0; i < pad_len; i += 65537)
        cr_assert_eq(kv->v.str.data[i], 'k');
    cr_assert_eq(kv->v.str.data[pad_len - 1], 'k');
    cr_assert_geq(gguf_reader_bytes_len(r), gguf_reader_data_offset(r));
    uint8_t got[16];
    pn_error e;
    cr_assert_eq(gguf_reader_read_tensor(r, 0, 4000, got, sizeof got, &e), PN_OK, "%s", e.msg);
    for (int i = 0; i < 16; i++)
        cr_assert_eq(got[i], pattern_byte(4000 + (uint64_t)i));
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(gguf_reader_io, a_file_that_shrinks_after_open_gives_an_error_naming_it_not_a_fault)
{
    char *dir = tu_mkdtemp();
    const int64_t n = 8 << 20; /* 32 MiB of data: more than the first read */
    char *path = write_model(dir, "shrinks.gguf", 100, n);
    gguf_reader *r = open_file(path);
    uint64_t data_end = gguf_reader_file_size(r);
    cr_assert_eq(truncate(path, (off_t)(data_end / 2)), 0);
    uint8_t *buf = malloc(1 << 20);
    pn_error e;
    /* the last MiB of the tensor now lies past the end of the file */
    pn_status st = gguf_reader_read_tensor(r, 0, (uint64_t)n * 4 - (1 << 20), buf, 1 << 20, &e);
    cr_assert_eq(st, PN_ERR_TRUNCATED);
    cr_assert(strstr(e.msg, path) && strstr(e.msg, "changed or shrank") &&
                  strstr(e.msg, "tensor t"),
              "%s", e.msg);
    /* bytes still in the file read fine */
    cr_assert_eq(gguf_reader_read_tensor(r, 0, 0, buf, 4096, &e), PN_OK, "%s", e.msg);
    free(buf);
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(gguf_reader_io, reads_outside_a_tensor_are_refused)
{
    char *dir = tu_mkdtemp();
    char *path = write_model(dir, "m.gguf", 10, 256);
    gguf_reader *r = open_file(path);
    uint8_t buf[8];
    pn_error e;
    cr_assert_eq(gguf_reader_read_tensor(r, 0, 1020, buf, 8, &e), PN_ERR_USAGE);
    cr_assert(strstr(e.msg, "tensor t"), "%s", e.msg);
    cr_assert_eq(gguf_reader_read_tensor(r, 1, 0, buf, 1, &e), PN_ERR_USAGE);
    cr_assert_eq(gguf_reader_read_tensor(r, 0, 1016, buf, 8, &e), PN_OK, "%s", e.msg);
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(gguf_reader_io, opening_a_descriptor_reads_the_same_file_and_keeps_the_callers_fd)
{
    char *dir = tu_mkdtemp();
    char *path = write_model(dir, "fd.gguf", 10, 256);
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    gguf_reader *r = NULL;
    pn_error e;
    cr_assert_eq(gguf_reader_open_fd(fd, "the temp file", &r, &e), PN_OK, "%s", e.msg);
    cr_assert_str_eq(gguf_reader_name(r), "the temp file");
    cr_assert_eq(gguf_reader_n_tensors(r), 1);
    gguf_reader_close(r);
    cr_assert_eq(fcntl(fd, F_GETFD) >= 0, true, "the caller's descriptor must stay open");
    close(fd);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(gguf_reader_io, a_header_only_reader_holds_the_header_alone_and_reads_the_same_bytes)
{
    char *dir = tu_mkdtemp();
    /* a header of 10 KB (more than the first read) before 4 MiB of data */
    char *path = write_model(dir, "h.gguf", 10000, (int64_t)1 << 20);
    gguf_reader *full = open_file(path), *r = NULL;
    pn_error e;
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(gguf_reader_open_fd_flags(fd, path, GGUF_OPEN_ONE_FILE, &r, &e), PN_ERR_USAGE);
    cr_assert_null(r);
    for (int by_path = 0; by_path < 2; by_path++) {
        cr_assert_eq(by_path ? gguf_reader_open_flags(path, GGUF_OPEN_HEADER_ONLY, &r, &e)
                             : gguf_reader_open_fd_flags(fd, path, GGUF_OPEN_HEADER_ONLY, &r, &e),
                     PN_OK, "%s", e.msg);
        const gguf_kv *pad = gguf_reader_find_kv(r, "pad");
        cr_assert_not_null(pad);
        cr_assert_eq(pad->v.str.len, 10000);
        cr_assert_eq(gguf_reader_data_offset(r), gguf_reader_data_offset(full));
        /* the full reader holds the first 16 MiB, this one none of the data */
        cr_assert_not_null(gguf_reader_tensor_data(full, 0));
        cr_assert_null(gguf_reader_tensor_data(r, 0));
        const size_t n = (size_t)4 << 20;
        uint8_t *a = malloc(n), *b = malloc(n);
        cr_assert_eq(gguf_reader_read_tensor(full, 0, 0, a, n, &e), PN_OK, "%s", e.msg);
        cr_assert_eq(gguf_reader_read_tensor(r, 0, 0, b, n, &e), PN_OK, "%s", e.msg);
        cr_assert(memcmp(a, b, n) == 0, "the header-only reader read other bytes");
        free(a);
        free(b);
        gguf_reader_close(r);
    }
    close(fd);
    gguf_reader_close(full);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

/* u32 magic, version, counts, then one key of `klen` bytes and a u8 value. */
static blob header_with_key(const char *key, size_t klen)
{
    blob b = { malloc(64 + klen), 0 };
    uint8_t *p = b.bytes;
    memcpy(p, "GGUF", 4);
    uint32_t v = 3;
    memcpy(p + 4, &v, 4);
    uint64_t nt = 0, nkv = 1, kl = klen;
    memcpy(p + 8, &nt, 8);
    memcpy(p + 16, &nkv, 8);
    memcpy(p + 24, &kl, 8);
    memcpy(p + 32, key, klen);
    uint32_t t = GGUF_TYPE_UINT8;
    memcpy(p + 32 + klen, &t, 4);
    p[36 + klen] = 7;
    b.size = 37 + klen;
    return b;
}

Test(gguf_reader_io, an_empty_key_is_refused_naming_its_offset)
{
    blob b = header_with_key("", 0);
    gguf_reader *r = NULL;
    pn_error e;
    cr_assert_eq(gguf_reader_open_memory(b.bytes, b.size, "k.gguf", &r, &e), PN_ERR_FORMAT);
    cr_assert(strstr(e.msg, "k.gguf: at byte 24") && strstr(e.msg, "empty key"), "%s", e.msg);
    free(b.bytes);
}

Test(gguf_reader_io, a_key_holding_a_nul_byte_is_refused_naming_its_offset)
{
    blob b = header_with_key("gen\0eral", 8);
    gguf_reader *r = NULL;
    pn_error e;
    cr_assert_eq(gguf_reader_open_memory(b.bytes, b.size, "k.gguf", &r, &e), PN_ERR_FORMAT);
    cr_assert(strstr(e.msg, "k.gguf: at byte 24") && strstr(e.msg, "NUL"), "%s", e.msg);
    free(b.bytes);
}
