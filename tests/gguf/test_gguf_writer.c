/* The GGUF writer (gguf/gguf.h): the bytes it writes, the keys it refuses,
 * and a file written and read back unchanged. */
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
#include "fixtures/scratch.h"
#include "quant/types.h"
#include "test_util.h"

/* ------------------------------------------------------------------ */
/* Writing and reading back                                            */

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

Test(gguf_roundtrip, keeps_every_value_type_and_the_key_order)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "types.gguf");
    gguf_writer *w = gguf_writer_new();
    gf_set_every_type(w);
    cr_assert_eq(gguf_writer_n_kv(w), 30);
    gf_finish(w, path);
    gf_close_and_commit(w);
    gguf_writer_free(w);

    gguf_reader *r = gf_open_file(path);
    cr_assert_eq(gguf_reader_n_kv(r), 30);
    cr_assert_eq(gguf_reader_n_tensors(r), 0);
    size_t i = 0;
    cr_assert_eq(kv_of(r, i++, "v.u8", GGUF_TYPE_UINT8)->v.u64, 255);
    cr_assert_eq(kv_of(r, i++, "v.i8", GGUF_TYPE_INT8)->v.i64, -128);
    cr_assert_eq(kv_of(r, i++, "v.u16", GGUF_TYPE_UINT16)->v.u64, 65535);
    cr_assert_eq(kv_of(r, i++, "v.i16", GGUF_TYPE_INT16)->v.i64, -32768);
    cr_assert_eq(kv_of(r, i++, "v.u32", GGUF_TYPE_UINT32)->v.u64, 4000000000u);
    cr_assert_eq(kv_of(r, i++, "v.i32", GGUF_TYPE_INT32)->v.i64, INT32_MIN);
    cr_assert_eq(gf_f32_bits(kv_of(r, i++, "v.f32", GGUF_TYPE_FLOAT32)->v.f64), 0x80000000u);
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
    cr_assert_eq(gf_f32_bits(gguf_kv_arr_f64(kv, 1)), 0x80000000u);
    cr_assert(isinf(gguf_kv_arr_f64(kv, 2)));
    cr_assert_eq(gf_f32_bits(gguf_kv_arr_f64(kv, 3)), 1u);
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
    cr_assert_eq(kv->arr_bytes, sizeof gf_nested_u32);
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
    gf_set_every_type(w);
    cr_assert_eq(gguf_writer_set_str_n(w, "v.nul", "a\0b", 3), PN_OK);
    gf_finish(w, a);
    gf_close_and_commit(w);
    gguf_writer_free(w);

    gguf_reader *r = gf_open_file(a);
    w = gguf_writer_new();
    for (size_t i = 0; i < gguf_reader_n_kv(r); i++)
        cr_assert_eq(gguf_writer_copy_kv(w, gguf_reader_kv(r, i)), PN_OK);
    gf_finish(w, b);
    gf_close_and_commit(w);
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
    gf_finish(w, path);
    cr_assert_eq(gguf_writer_set_u32(w, "late", 1), PN_ERR_USAGE, "keys are fixed after begin");
    gf_close_and_commit(w);
    gguf_writer_free(w);
    gguf_reader *r = gf_open_file(path);
    cr_assert_eq(gguf_reader_n_kv(r), 2);
    cr_assert(gguf_str_eq(gguf_reader_kv(r, 0)->key, "k2"));
    cr_assert(gguf_str_eq(gguf_reader_kv(r, 0)->v.str, "two"));
    cr_assert(gguf_str_eq(gguf_reader_kv(r, 1)->key, "k3"));
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

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
        const tensor_case *t = &gf_mixed_tensors[i];
        cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, &e), PN_OK, "%s",
                     e.msg);
        total += t->size;
    }
    cr_assert_eq(gguf_writer_n_tensors(w), N_MIXED);
    gf_finish(w, path);
    gf_write_pattern(w, total, chunk);
    gf_close_and_commit(w);
    gguf_writer_free(w);
}

static void check_mixed(const char *path, uint64_t align)
{
    gguf_reader *r = gf_open_file(path);
    const uint8_t *bytes = gguf_reader_bytes(r);
    cr_assert_eq(gguf_reader_alignment(r), align);
    uint64_t data = gguf_reader_data_offset(r);
    cr_assert_eq(data % align, 0);
    cr_assert_eq(gguf_reader_n_tensors(r), N_MIXED);
    uint64_t off = 0, stream = 0, prev_end = 0;
    for (size_t i = 0; i < N_MIXED; i++) {
        const tensor_case *t = &gf_mixed_tensors[i];
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
            cr_assert_eq(d[k], gf_pattern_byte(stream + k));
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
        gf_set_every_type(w);
        if (align)
            cr_assert_eq(gguf_writer_set_u32(w, "general.alignment", align), PN_OK);
        uint64_t total = 0;
        for (size_t i = 0; i < N_MIXED; i++) {
            const tensor_case *t = &gf_mixed_tensors[i];
            cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, &e), PN_OK);
            total += t->size;
        }
        uint64_t a = gguf_writer_alignment(w), d = gguf_writer_data_offset(w);
        uint64_t f = gguf_writer_file_bytes(w);
        cr_assert_eq(a, align ? align : 32);
        gf_finish(w, path);
        gf_write_pattern(w, total, 4096);
        gf_close_and_commit(w);
        cr_assert_eq(gguf_writer_file_bytes(w), f);
        gguf_writer_free(w);
        gguf_reader *r = gf_open_file(path);
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
    gf_finish(w, path);
    gf_write_pattern(w, 96, 96);
    cr_assert_eq(gguf_writer_patch_arr(w, "pn.tensor_crc32", crcs, 2, &e), PN_ERR_USAGE);
    cr_assert(strstr(e.msg, "has 3 elements, patch gives 2"), "%s", e.msg);
    cr_assert_eq(gguf_writer_patch_arr(w, "after", crcs, 3, &e), PN_ERR_USAGE);
    cr_assert_eq(gguf_writer_patch_arr(w, "nope", crcs, 3, &e), PN_ERR_USAGE);
    cr_assert_eq(gguf_writer_patch_arr(w, "pn.tensor_crc32", crcs, 3, &e), PN_OK, "%s", e.msg);
    gf_close_and_commit(w);
    gguf_writer_free(w);

    gguf_reader *r = gf_open_file(path);
    const gguf_kv *kv = gguf_reader_find_kv(r, "pn.tensor_crc32");
    for (int i = 0; i < 3; i++)
        cr_assert_eq(gguf_kv_arr_u64(kv, (uint64_t)i), crcs[i]);
    cr_assert(gguf_str_eq(gguf_reader_find_kv(r, "after")->v.str, "x"));
    const uint8_t *d = gguf_reader_tensor_data(r, 2);
    for (int k = 0; k < 32; k++)
        cr_assert_eq(d[k], gf_pattern_byte(64 + (uint64_t)k));
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
    gf_finish(w, path);
    gf_write_pattern(w, 12u << 20, 1 << 20);
    cr_assert_eq(gguf_writer_patch_arr(w, "crc", vals, 4, &e), PN_OK, "%s", e.msg);
    gf_close_and_commit(w);
    gguf_writer_free(w);

    gguf_reader *r = gf_open_file(path);
    const gguf_kv *kv = gguf_reader_find_kv(r, "crc");
    cr_assert_eq((uint64_t)(kv->arr_data - gguf_reader_bytes(r)), buffer - 8);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(gguf_kv_arr_u64(kv, (uint64_t)i), vals[i]);
    cr_assert_eq(gguf_reader_find_kv(r, "pad")->v.str.len, pad_len);
    uint8_t *d = malloc(12u << 20);
    cr_assert_eq(gguf_reader_read_tensor(r, 0, 0, d, 12u << 20, &e), PN_OK, "%s", e.msg);
    for (uint64_t k = 0; k < (12u << 20); k += 4099)
        cr_assert_eq(d[k], gf_pattern_byte(k));
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
    gf_finish(w, path);
    cr_assert_geq(gguf_writer_fd(w), 0);
    cr_assert(!exists(path), "nothing at the target before the commit");
    return w;
}

Test(gguf_writer, abort_leaves_nothing_and_refuses_later_calls)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "out.gguf");
    gguf_writer *w = begun_writer(path);
    gf_write_pattern(w, 20, 20);
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
    gf_write_pattern(w, 64, 64);
    pn_error e;
    cr_assert_eq(gguf_writer_close(w, &e), PN_OK, "%s", e.msg);
    cr_assert_geq(gguf_writer_fd(w), 0, "the closed file stays open to be re-read");
    gguf_reader *r = NULL;
    cr_assert_eq(gguf_reader_open_fd(gguf_writer_fd(w), path, &r, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(gguf_reader_n_tensors(r), 1);
    uint8_t d[64];
    cr_assert_eq(gguf_reader_read_tensor(r, 0, 0, d, 64, &e), PN_OK, "%s", e.msg);
    for (int k = 0; k < 64; k++)
        cr_assert_eq(d[k], gf_pattern_byte((uint64_t)k));
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
    gf_finish(w, path);
    gf_write_pattern(w, 64, 64);
    cr_assert_eq(gguf_writer_commit(w, &e), PN_ERR_USAGE, "commit needs close first");
    cr_assert(strstr(e.msg, "commit before close"), "%s", e.msg);
    cr_assert_eq(gguf_writer_fd(w), -1, "a failed commit aborts");
    gguf_writer_free(w);
    cr_assert_eq(tu_count_files(dir), 0);

    mode_t mask = umask(0);
    umask(mask);
    w = begun_writer(path);
    gf_write_pattern(w, 64, 64);
    gf_close_and_commit(w);
    cr_assert_eq(gguf_writer_fd(w), -1);
    gguf_writer_free(w);
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    cr_assert_eq(sb.st_mode & 0777, 0644 & ~mask);
    gguf_reader *r = gf_open_file(path);
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
    gf_finish(w, path);
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
    gf_finish(w, path);
    gf_close_and_commit(w);
    gguf_writer_free(w);
    gguf_reader *r = gf_open_file(path);
    cr_assert_eq(gguf_reader_n_kv(r), 3);
    cr_assert(gguf_str_eq(gguf_reader_kv(r, 2)->key, "c"));
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}
