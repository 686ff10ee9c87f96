/* The GGUF reader (gguf/gguf.h): what it reads of a valid file and how it
 * refuses a malformed one.
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
#include "fixtures/gguf_files.h"
#include "quant/types.h"
#include "test_util.h"

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
    gf_finish(w, path);
    gf_write_pattern(w, 16 + 68 + 12, 5);
    gf_close_and_commit(w);
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
        cr_assert_eq(d[i], gf_pattern_byte(16 + (uint64_t)i));
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
    gf_finish(w, path);
    gf_close_and_commit(w);
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
    gguf_reader *r = gf_open_file(PN_TEST_DATA "/golden/tiny.f32.gguf");
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
