/* Split sets in the library (gguf/gguf_split.h, gguf_reader_open on a set).
 *
 * A "model" writer holds the whole model (keys, tensors, a per-tensor CRC
 * array); the set is written from it by the split pieces, each split's
 * tensors with deterministic bytes and its own CRCs, and committed as a set.
 * Refusals are made from such a set by removing, replacing or renaming one
 * file, or by writing a split file by hand with the keys under test. Every
 * refusal's message must name the file that is wrong.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "gguf/gguf_split.h"
#include "gguf/gguf_split_testing.h"
#include "quant/types.h"
#include "test_util.h"

/* ------------------------------------------------------------------ */
/* Helpers                                                             */

#define CRC_KEY "pn.tensor_crc32"
static const char *const per_tensor_keys[] = { CRC_KEY };

static uint8_t data_byte(size_t tensor, uint64_t k)
{
    return (uint8_t)(tensor * 31u + k * 7u + 1u);
}

static uint8_t *tensor_bytes(size_t tensor, uint64_t n)
{
    uint8_t *b = malloc(n ? n : 1);
    for (uint64_t k = 0; k < n; k++)
        b[k] = data_byte(tensor, k);
    return b;
}

static uint32_t tensor_crc(size_t tensor, uint64_t n)
{
    uint8_t *b = tensor_bytes(tensor, n);
    uint32_t c = (uint32_t)crc32(0L, b, (uInt)n);
    free(b);
    return c;
}

/* The model: keys of several types (and general.alignment when align is
 * not 0), a zeroed CRC array, n tensors blk.I.w of f32[8 * (I % 5 + 1)] and
 * q8_0[32, 2] every third one. */
static gguf_writer *model_writer(size_t n, uint32_t align)
{
    gguf_writer *w = gguf_writer_new();
    pn_error e;
    cr_assert_eq(gguf_writer_set_str(w, "general.architecture", "test"), PN_OK);
    if (align)
        cr_assert_eq(gguf_writer_set_u32(w, "general.alignment", align), PN_OK);
    cr_assert_eq(gguf_writer_set_u32(w, "test.u32", 7), PN_OK);
    cr_assert_eq(gguf_writer_set_f32(w, "test.f32", 1.5f), PN_OK);
    const char *strs[2] = { "a", "bc" };
    cr_assert_eq(gguf_writer_set_arr_str(w, "test.strs", strs, 2), PN_OK);
    uint32_t *zeros = calloc(n ? n : 1, sizeof *zeros);
    cr_assert_eq(gguf_writer_set_arr(w, CRC_KEY, GGUF_TYPE_UINT32, zeros, n), PN_OK);
    free(zeros);
    cr_assert_eq(gguf_writer_set_str(w, "test.after", "last"), PN_OK);
    for (size_t i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "blk.%zu.w", i);
        if (i % 3 == 2)
            cr_assert_eq(gguf_writer_add_tensor(w, name, 2, (int64_t[]){ 32, 2 }, PN_TYPE_Q8_0, &e),
                         PN_OK, "%s", e.msg);
        else
            cr_assert_eq(gguf_writer_add_tensor(w, name, 1, (int64_t[]){ 8 * (int64_t)(i % 5 + 1) },
                                                PN_TYPE_F32, &e),
                         PN_OK, "%s", e.msg);
    }
    return w;
}

/* Streams the tensors [lo, hi) of the model into w (begun) and patches its
 * CRCs, if it has the key; then closes it. */
static void fill_and_close(gguf_writer *w, const gguf_writer *model, size_t lo, size_t hi)
{
    pn_error e;
    uint32_t *crcs = calloc(hi - lo + 1, sizeof *crcs);
    for (size_t t = lo; t < hi; t++) {
        uint64_t n = gguf_writer_tensor_bytes(model, t);
        uint8_t *b = tensor_bytes(t, n);
        cr_assert_eq(gguf_writer_write(w, b, (size_t)n, &e), PN_OK, "%s", e.msg);
        crcs[t - lo] = (uint32_t)crc32(0L, b, (uInt)n);
        free(b);
    }
    if (gguf_writer_has_kv(w, CRC_KEY))
        cr_assert_eq(gguf_writer_patch_arr(w, CRC_KEY, crcs, hi - lo, &e), PN_OK, "%s", e.msg);
    free(crcs);
    cr_assert_eq(gguf_writer_close(w, &e), PN_OK, "%s", e.msg);
}

/* Writes the model as one plain file at path (the model writer itself). */
static void write_plain(gguf_writer *model, const char *path)
{
    pn_error e;
    cr_assert_eq(gguf_writer_begin(model, path, &e), PN_OK, "%s", e.msg);
    fill_and_close(model, model, 0, gguf_writer_n_tensors(model));
    cr_assert_eq(gguf_writer_commit(model, &e), PN_OK, "%s", e.msg);
}

/* Writes the model's set by the plan; the split paths from dst. Split s
 * (s < 32) lacks the set identity when bit s of no_id is set (a set
 * written by another tool); later splits always have it. */
static void write_set_ids(const gguf_writer *model, const gguf_split_plan *plan, const char *dst,
                          unsigned no_id)
{
    pn_error e;
    size_t n = plan->n_splits;
    gguf_writer **ws = calloc(n, sizeof *ws);
    for (size_t s = 0; s < n; s++) {
        cr_assert_eq(gguf_writer_new_split(model, plan, s, per_tensor_keys, 1, &ws[s], &e), PN_OK,
                     "%s", e.msg);
        cr_assert_eq(gguf_writer_has_kv(ws[s], GGUF_SPLIT_KEY_SET_ID), n > 1,
                     "a set of two or more splits has its identity in every split");
        if (s < 32 && (no_id & (1u << s)))
            gguf_writer_remove_kv(ws[s], GGUF_SPLIT_KEY_SET_ID);
        char *path = n > 1 ? gguf_split_path(dst, (uint32_t)s, (uint32_t)n) : strdup(dst);
        cr_assert_eq(gguf_writer_begin(ws[s], path, &e), PN_OK, "%s", e.msg);
        free(path);
    }
    /* Tensors in model order, each to the writer of its split. */
    for (size_t s = 0; s < n; s++)
        fill_and_close(ws[s], model, plan->first[s], plan->first[s + 1]);
    cr_assert_eq(gguf_writer_commit_set(ws, n, &e), PN_OK, "%s", e.msg);
    for (size_t s = 0; s < n; s++)
        gguf_writer_free(ws[s]);
    free(ws);
}

static void write_set(const gguf_writer *model, const gguf_split_plan *plan, const char *dst)
{
    write_set_ids(model, plan, dst, 0);
}

static gguf_split_plan plan_by_tensors(const gguf_writer *model, uint64_t max)
{
    gguf_split_plan p;
    pn_error e;
    cr_assert_eq(
        gguf_split_plan_of_writer(model, (gguf_split_limit){ GGUF_SPLIT_MAX_TENSORS, max }, &p, &e),
        PN_OK, "%s", e.msg);
    return p;
}

/* dir/m.gguf split in 3 (tensors 0-3, 4-7, 8-9) from a 10-tensor model. */
typedef struct fixture {
    char *dir, *dst, *path[3];
} fixture;

static fixture make_set3(uint32_t align)
{
    fixture f;
    f.dir = tu_mkdtemp();
    f.dst = tu_join(f.dir, "m.gguf");
    gguf_writer *model = model_writer(10, align);
    gguf_split_plan p = plan_by_tensors(model, 4);
    cr_assert_eq(p.n_splits, 3);
    write_set(model, &p, f.dst);
    gguf_split_plan_free(&p);
    gguf_writer_free(model);
    for (uint32_t s = 0; s < 3; s++)
        f.path[s] = gguf_split_path(f.dst, s, 3);
    return f;
}

static void fixture_free(fixture *f)
{
    tu_rm_rf(f->dir);
    for (int s = 0; s < 3; s++)
        free(f->path[s]);
    free(f->dst);
    free(f->dir);
}

static gguf_reader *open_ok(const char *path, unsigned flags)
{
    gguf_reader *r = NULL;
    pn_error e;
    cr_assert_eq(gguf_reader_open_flags(path, flags, &r, &e), PN_OK, "%s", e.msg);
    cr_assert_not_null(r);
    return r;
}

/* Opening must fail with `code`, a message naming `file` and holding
 * `what`; returns nothing open. */
static void open_refused(const char *path, pn_status code, const char *file, const char *what)
{
    gguf_reader *r = (gguf_reader *)1;
    pn_error e = { 0 };
    pn_status st = gguf_reader_open(path, &r, &e);
    cr_assert_eq(st, code, "opening %s: status %d, expected %d: %s", path, st, code, e.msg);
    cr_assert_null(r);
    cr_assert(strstr(e.msg, file), "the message names %s: %s", file, e.msg);
    cr_assert(strstr(e.msg, what), "the message says '%s': %s", what, e.msg);
}

static bool kv_equal(const gguf_kv *a, const gguf_kv *b)
{
    if (a->key.len != b->key.len || memcmp(a->key.data, b->key.data, a->key.len) != 0 ||
        a->type != b->type)
        return false;
    switch (a->type) {
    case GGUF_TYPE_STRING:
        return a->v.str.len == b->v.str.len &&
               memcmp(a->v.str.data, b->v.str.data, a->v.str.len) == 0;
    case GGUF_TYPE_ARRAY:
        return a->arr_type == b->arr_type && a->arr_count == b->arr_count &&
               a->arr_bytes == b->arr_bytes && memcmp(a->arr_data, b->arr_data, a->arr_bytes) == 0;
    default: return memcmp(&a->v, &b->v, sizeof a->v) == 0;
    }
}

static bool skipped_key(const gguf_kv *kv)
{
    return gguf_str_eq(kv->key, CRC_KEY) || gguf_str_eq(kv->key, GGUF_SPLIT_KEY_NO) ||
           gguf_str_eq(kv->key, GGUF_SPLIT_KEY_COUNT) ||
           gguf_str_eq(kv->key, GGUF_SPLIT_KEY_TENSORS_COUNT) ||
           gguf_str_eq(kv->key, GGUF_SPLIT_KEY_SET_ID);
}

/* The set reads as the plain file: keys other than the split keys and the
 * CRCs equal and in order, the CRCs of all splits together equal, every
 * tensor's info and bytes equal. */
static void assert_same_model(const gguf_reader *set, const gguf_reader *plain)
{
    size_t i = 0, j = 0;
    for (;;) {
        while (i < gguf_reader_n_kv(set) && skipped_key(gguf_reader_kv(set, i)))
            i++;
        while (j < gguf_reader_n_kv(plain) && skipped_key(gguf_reader_kv(plain, j)))
            j++;
        if (i == gguf_reader_n_kv(set) || j == gguf_reader_n_kv(plain))
            break;
        const gguf_kv *a = gguf_reader_kv(set, i), *b = gguf_reader_kv(plain, j);
        cr_assert(kv_equal(a, b),
                  "key %zu of the set ('%.*s') differs from key %zu of the plain "
                  "file ('%.*s')",
                  i, (int)a->key.len, a->key.data, j, (int)b->key.len, b->key.data);
        i++;
        j++;
    }
    cr_assert_eq(i, gguf_reader_n_kv(set), "the set has more keys");
    cr_assert_eq(j, gguf_reader_n_kv(plain), "the plain file has more keys");

    size_t n = gguf_reader_n_tensors(plain);
    cr_assert_eq(gguf_reader_n_tensors(set), n);
    uint32_t *ca = calloc(n + 1, 4), *cb = calloc(n + 1, 4);
    pn_error e;
    cr_assert_eq(gguf_reader_per_tensor_u32(set, CRC_KEY, ca, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(gguf_reader_per_tensor_u32(plain, CRC_KEY, cb, &e), PN_OK, "%s", e.msg);
    for (size_t t = 0; t < n; t++) {
        const gguf_tensor_info *a = gguf_reader_tensor(set, t), *b = gguf_reader_tensor(plain, t);
        cr_assert_str_eq(a->name, b->name);
        cr_assert_eq(a->n_dims, b->n_dims);
        cr_assert_eq(memcmp(a->ne, b->ne, sizeof a->ne), 0, "%s: shape", a->name);
        cr_assert_eq(a->type, b->type);
        cr_assert_eq(a->size, b->size);
        cr_assert_eq(ca[t], cb[t], "%s: CRC %08x, plain %08x", a->name, ca[t], cb[t]);
        cr_assert_eq(ca[t], tensor_crc(t, a->size), "%s: the recorded CRC is the data's", a->name);
        uint8_t *x = malloc(a->size), *y = malloc(a->size);
        cr_assert_eq(gguf_reader_read_tensor(set, t, 0, x, a->size, &e), PN_OK, "%s", e.msg);
        cr_assert_eq(gguf_reader_read_tensor(plain, t, 0, y, b->size, &e), PN_OK, "%s", e.msg);
        cr_assert_eq(memcmp(x, y, a->size), 0, "%s: bytes", a->name);
        free(x);
        free(y);
        cr_assert_eq(gguf_reader_find_tensor(set, a->name), (long)t);
    }
    free(ca);
    free(cb);
}

static void copy_file(const char *from, const char *to)
{
    size_t n;
    void *b = tu_read_file(from, &n);
    cr_assert_eq(tu_write_file(to, b, n), 0, "writing %s", to);
    free(b);
}

/* A split file written by hand: the split keys given (a key_type of
 * GGUF_TYPE_COUNT_ leaves the key out), then f32[4] tensors of the names. */
typedef struct custom_split {
    gguf_value_type no_type, count_type, total_type;
    int64_t no, count, total;
    const char *names[4];
    size_t n_names;
} custom_split;

static void set_int_key(gguf_writer *w, const char *key, gguf_value_type t, int64_t v)
{
    switch (t) {
    case GGUF_TYPE_COUNT_: return;
    case GGUF_TYPE_UINT16: cr_assert_eq(gguf_writer_set_u16(w, key, (uint16_t)v), PN_OK); return;
    case GGUF_TYPE_INT16: cr_assert_eq(gguf_writer_set_i16(w, key, (int16_t)v), PN_OK); return;
    case GGUF_TYPE_UINT32: cr_assert_eq(gguf_writer_set_u32(w, key, (uint32_t)v), PN_OK); return;
    case GGUF_TYPE_INT32: cr_assert_eq(gguf_writer_set_i32(w, key, (int32_t)v), PN_OK); return;
    default: cr_assert_fail("no such key type in this test");
    }
}

static custom_split custom(int64_t no, int64_t count, int64_t total)
{
    return (custom_split){
        GGUF_TYPE_UINT16, GGUF_TYPE_UINT16, GGUF_TYPE_INT32, no, count, total, { "x" }, 1
    };
}

static void write_custom(const char *path, const custom_split *c)
{
    gguf_writer *w = gguf_writer_new();
    pn_error e;
    cr_assert_eq(gguf_writer_set_str(w, "general.architecture", "test"), PN_OK);
    set_int_key(w, GGUF_SPLIT_KEY_NO, c->no_type, c->no);
    set_int_key(w, GGUF_SPLIT_KEY_COUNT, c->count_type, c->count);
    set_int_key(w, GGUF_SPLIT_KEY_TENSORS_COUNT, c->total_type, c->total);
    for (size_t i = 0; i < c->n_names; i++)
        cr_assert_eq(gguf_writer_add_tensor(w, c->names[i], 1, (int64_t[]){ 4 }, PN_TYPE_F32, &e),
                     PN_OK, "%s", e.msg);
    gguf_writer_set_replace(w, true); /* the tests replace a split in place */
    cr_assert_eq(gguf_writer_begin(w, path, &e), PN_OK, "%s", e.msg);
    uint8_t zero[16] = { 0 };
    for (size_t i = 0; i < c->n_names; i++)
        cr_assert_eq(gguf_writer_write(w, zero, 16, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(gguf_writer_close(w, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(gguf_writer_commit(w, &e), PN_OK, "%s", e.msg);
    gguf_writer_free(w);
}

/* ------------------------------------------------------------------ */
/* split_path: llama.cpp's naming rule                                 */

static void assert_path(const char *dst, uint32_t i, uint32_t n, const char *want)
{
    char *p = gguf_split_path(dst, i, n);
    cr_assert_not_null(p, "%s %u/%u", dst, i, n);
    cr_assert_str_eq(p, want);
    free(p);
}

Test(split_path, dst_name_gguf_gives_numbered_names_beside_it)
{
    assert_path("dir/NAME.gguf", 0, 3, "dir/NAME-00001-of-00003.gguf");
    assert_path("dir/NAME.gguf", 2, 3, "dir/NAME-00003-of-00003.gguf");
    assert_path("/a/b.c.gguf", 1, 2, "/a/b.c-00002-of-00002.gguf");
}

Test(split_path, a_dst_without_the_gguf_suffix_is_the_prefix_as_gguf_split_takes_it)
{
    assert_path("out", 0, 2, "out-00001-of-00002.gguf");
    assert_path("out.bin", 1, 2, "out.bin-00002-of-00002.gguf");
    assert_path("x.GGUF", 0, 2, "x.GGUF-00001-of-00002.gguf");
    /* Only a final ".gguf" after at least one byte is cut. */
    assert_path(".gguf", 0, 2, ".gguf-00001-of-00002.gguf");
    assert_path("a.gguf.gguf", 0, 2, "a.gguf-00001-of-00002.gguf");
    char *p = gguf_split_path_of_prefix("m.gguf", 0, 2);
    cr_assert_str_eq(p, "m.gguf-00001-of-00002.gguf", "a prefix is taken as it is");
    free(p);
}

Test(split_path, numbers_have_five_digits_up_to_the_largest_split_count)
{
    assert_path("m.gguf", 9, 10, "m-00010-of-00010.gguf");
    assert_path("m.gguf", 9998, 10000, "m-09999-of-10000.gguf");
    assert_path("m.gguf", 9999, 10000, "m-10000-of-10000.gguf");
    assert_path("m.gguf", 65534, 65535, "m-65535-of-65535.gguf");
    assert_path("m.gguf", 0, 1, "m-00001-of-00001.gguf");
    cr_assert_null(gguf_split_path("m.gguf", 0, 65536), "split.count is a uint16");
    cr_assert_null(gguf_split_path("m.gguf", 3, 3), "index from 0, below the count");
    cr_assert_null(gguf_split_path("m.gguf", 0, 0));
    cr_assert_null(gguf_split_path("", 0, 2));
}

Test(split_path, a_prefix_is_found_only_for_the_split_number_the_name_carries)
{
    char *p = gguf_split_prefix("dir/m-00002-of-00003.gguf", 1, 3);
    cr_assert_str_eq(p, "dir/m");
    free(p);
    cr_assert_null(gguf_split_prefix("dir/m-00002-of-00003.gguf", 0, 3));
    cr_assert_null(gguf_split_prefix("dir/m-00002-of-00003.gguf", 1, 4));
    cr_assert_null(gguf_split_prefix("-00001-of-00002.gguf", 0, 2), "an empty prefix");
    cr_assert_null(gguf_split_prefix("m-00001-of-00002.GGUF", 0, 2));
    cr_assert_null(gguf_split_prefix("m-1-of-2.gguf", 0, 2));
    p = gguf_split_prefix("/-00001-of-00002.gguf", 0, 2);
    cr_assert_str_eq(p, "/", "any prefix of one byte or more, as llama.cpp");
    free(p);
    p = gguf_split_prefix("m-65535-of-65535.gguf", 65534, 65535);
    cr_assert_str_eq(p, "m");
    free(p);
}

/* ------------------------------------------------------------------ */
/* split_plan                                                          */

static gguf_split_plan plan_ok(const uint64_t *bytes, size_t n, gguf_split_mode mode, uint64_t max)
{
    gguf_split_plan p;
    pn_error e;
    cr_assert_eq(gguf_split_plan_make(bytes, n, (gguf_split_limit){ mode, max }, &p, &e), PN_OK,
                 "%s", e.msg);
    return p;
}

/* The plan's splits hold these numbers of tensors. */
static void assert_counts(const gguf_split_plan *p, const size_t *counts, size_t n_splits)
{
    cr_assert_eq(p->n_splits, n_splits, "%zu splits, expected %zu", p->n_splits, n_splits);
    cr_assert_eq(p->first[0], 0);
    for (size_t s = 0; s < n_splits; s++)
        cr_assert_eq(p->first[s + 1] - p->first[s], counts[s], "split %zu holds %zu, expected %zu",
                     s, p->first[s + 1] - p->first[s], counts[s]);
}

Test(split_plan, by_size_a_split_closes_before_the_tensor_that_would_pass_the_limit)
{
    const uint64_t b[] = { 32, 32, 32, 32, 32 };
    gguf_split_plan p = plan_ok(b, 5, GGUF_SPLIT_MAX_SIZE, 64);
    assert_counts(&p, (size_t[]){ 2, 2, 1 }, 3);
    cr_assert_eq(p.data_bytes[0], 64);
    cr_assert_eq(p.data_bytes[2], 32);
    gguf_split_plan_free(&p);
    p = plan_ok(b, 5, GGUF_SPLIT_MAX_SIZE, 95); /* 96 would pass it */
    assert_counts(&p, (size_t[]){ 2, 2, 1 }, 3);
    gguf_split_plan_free(&p);
    p = plan_ok(b, 5, GGUF_SPLIT_MAX_SIZE, 96); /* exactly the limit fits */
    assert_counts(&p, (size_t[]){ 3, 2 }, 2);
    gguf_split_plan_free(&p);
}

Test(split_plan, by_size_each_tensor_counts_its_bytes_rounded_up_to_32)
{
    const uint64_t b[] = { 1, 33, 31, 64 }; /* count as 32, 64, 32, 64 */
    gguf_split_plan p = plan_ok(b, 4, GGUF_SPLIT_MAX_SIZE, 96);
    assert_counts(&p, (size_t[]){ 2, 2 }, 2);
    cr_assert_eq(p.data_bytes[0], 96);
    cr_assert_eq(p.data_bytes[1], 96);
    gguf_split_plan_free(&p);
    p = plan_ok(b, 4, GGUF_SPLIT_MAX_SIZE, 95); /* any two pass 95 */
    assert_counts(&p, (size_t[]){ 1, 1, 1, 1 }, 4);
    gguf_split_plan_free(&p);
}

Test(split_plan, a_tensor_larger_than_the_limit_is_alone_in_its_split)
{
    const uint64_t mid[] = { 32, 1000, 32, 32 };
    gguf_split_plan p = plan_ok(mid, 4, GGUF_SPLIT_MAX_SIZE, 64);
    assert_counts(&p, (size_t[]){ 1, 1, 2 }, 3);
    cr_assert_eq(p.data_bytes[1], 1024);
    gguf_split_plan_free(&p);
    const uint64_t first[] = { 1000, 32, 32 };
    p = plan_ok(first, 3, GGUF_SPLIT_MAX_SIZE, 64);
    assert_counts(&p, (size_t[]){ 1, 2 }, 2);
    gguf_split_plan_free(&p);
    const uint64_t last[] = { 32, 32, 1000 };
    p = plan_ok(last, 3, GGUF_SPLIT_MAX_SIZE, 64);
    assert_counts(&p, (size_t[]){ 2, 1 }, 2);
    gguf_split_plan_free(&p);
    const uint64_t all[] = { 1000, 1000, 1000 };
    p = plan_ok(all, 3, GGUF_SPLIT_MAX_SIZE, 64);
    assert_counts(&p, (size_t[]){ 1, 1, 1 }, 3);
    gguf_split_plan_free(&p);
}

Test(split_plan, limits_at_or_above_the_model_give_one_split)
{
    const uint64_t b[] = { 10, 20, 30 };
    gguf_split_plan p = plan_ok(b, 3, GGUF_SPLIT_MAX_SIZE, 96);
    assert_counts(&p, (size_t[]){ 3 }, 1);
    cr_assert_eq(p.data_bytes[0], 96);
    gguf_split_plan_free(&p);
    p = plan_ok(b, 3, GGUF_SPLIT_MAX_SIZE, UINT64_MAX);
    assert_counts(&p, (size_t[]){ 3 }, 1);
    gguf_split_plan_free(&p);
    p = plan_ok(b, 3, GGUF_SPLIT_MAX_TENSORS, 3);
    assert_counts(&p, (size_t[]){ 3 }, 1);
    gguf_split_plan_free(&p);
    p = plan_ok(b, 3, GGUF_SPLIT_MAX_TENSORS, 1000);
    assert_counts(&p, (size_t[]){ 3 }, 1);
    gguf_split_plan_free(&p);
    p = plan_ok(b, 3, GGUF_SPLIT_NONE, 0);
    assert_counts(&p, (size_t[]){ 3 }, 1);
    gguf_split_plan_free(&p);
}

Test(split_plan, by_tensor_count_every_n_tensors_start_a_split)
{
    gguf_split_plan p = plan_ok(NULL, 5, GGUF_SPLIT_MAX_TENSORS, 2);
    assert_counts(&p, (size_t[]){ 2, 2, 1 }, 3);
    gguf_split_plan_free(&p);
    p = plan_ok(NULL, 5, GGUF_SPLIT_MAX_TENSORS, 1);
    assert_counts(&p, (size_t[]){ 1, 1, 1, 1, 1 }, 5);
    gguf_split_plan_free(&p);
    p = plan_ok(NULL, 6, GGUF_SPLIT_MAX_TENSORS, 3);
    assert_counts(&p, (size_t[]){ 3, 3 }, 2);
    gguf_split_plan_free(&p);
    const uint64_t b[] = { 1, 2, 3, 4, 5 };
    p = plan_ok(b, 5, GGUF_SPLIT_MAX_TENSORS, 2);
    cr_assert_eq(p.data_bytes[0], 64, "with sizes, the bytes are counted too");
    gguf_split_plan_free(&p);
}

Test(split_plan, no_tensors_give_one_empty_split)
{
    for (int m = GGUF_SPLIT_NONE; m <= GGUF_SPLIT_MAX_TENSORS; m++) {
        gguf_split_plan p = plan_ok(NULL, 0, (gguf_split_mode)m, 5);
        assert_counts(&p, (size_t[]){ 0 }, 1);
        gguf_split_plan_free(&p);
    }
}

/* gguf-split's rule, written out for the comparison below. */
static size_t reference_splits(const uint64_t *b, size_t n, uint64_t max, size_t *first)
{
    size_t k = 0;
    uint64_t cur = 0;
    first[0] = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t pad = (b[i] + 31) / 32 * 32;
        if (i > 0 && cur + pad > max) {
            first[++k] = i;
            cur = pad;
        } else {
            cur += pad;
        }
    }
    first[++k] = n;
    return k;
}

Test(split_plan, the_same_inputs_always_give_the_same_plan_the_one_gguf_split_makes)
{
    tu_rng rng = { 42 };
    enum { N = 500 };
    uint64_t b[N];
    size_t want[N + 1];
    for (int round = 0; round < 20; round++) {
        for (size_t i = 0; i < N; i++)
            b[i] = 1 + tu_rng_u64(&rng) % 5000;
        uint64_t max = 1 + tu_rng_u64(&rng) % 40000;
        gguf_split_plan p = plan_ok(b, N, GGUF_SPLIT_MAX_SIZE, max);
        gguf_split_plan q = plan_ok(b, N, GGUF_SPLIT_MAX_SIZE, max);
        size_t k = reference_splits(b, N, max, want);
        cr_assert_eq(p.n_splits, k, "round %d: %zu splits, gguf-split makes %zu", round, p.n_splits,
                     k);
        cr_assert_eq(q.n_splits, k);
        for (size_t s = 0; s <= k; s++) {
            cr_assert_eq(p.first[s], want[s], "round %d split %zu", round, s);
            cr_assert_eq(q.first[s], want[s]);
        }
        for (size_t s = 0; s < k; s++) {
            cr_assert_eq(p.data_bytes[s], q.data_bytes[s]);
            cr_assert(p.first[s + 1] - p.first[s] == 1 || p.data_bytes[s] <= max,
                      "a split of several tensors stays within the limit");
        }
        gguf_split_plan_free(&p);
        gguf_split_plan_free(&q);
    }
}

Test(split_plan, limits_that_the_split_keys_cannot_hold_are_refused_naming_the_option)
{
    gguf_split_plan p;
    pn_error e;
    cr_assert_eq(
        gguf_split_plan_make(NULL, 10, (gguf_split_limit){ GGUF_SPLIT_MAX_TENSORS, 0 }, &p, &e),
        PN_ERR_USAGE);
    cr_assert(strstr(e.msg, "--split-max-tensors"), "%s", e.msg);
    const uint64_t b[1] = { 1 };
    cr_assert_eq(gguf_split_plan_make(b, 1, (gguf_split_limit){ GGUF_SPLIT_MAX_SIZE, 0 }, &p, &e),
                 PN_ERR_USAGE);
    cr_assert(strstr(e.msg, "--split-max-size"), "%s", e.msg);
    /* 65536 splits: one more than split.count holds. */
    cr_assert_eq(
        gguf_split_plan_make(NULL, 65536, (gguf_split_limit){ GGUF_SPLIT_MAX_TENSORS, 1 }, &p, &e),
        PN_ERR_USAGE);
    cr_assert(strstr(e.msg, "65535"), "%s", e.msg);
    p = plan_ok(NULL, 65535, GGUF_SPLIT_MAX_TENSORS, 1);
    cr_assert_eq(p.n_splits, 65535);
    gguf_split_plan_free(&p);
    uint64_t *many = malloc(70000 * sizeof *many);
    for (size_t i = 0; i < 70000; i++)
        many[i] = 32;
    cr_assert_eq(
        gguf_split_plan_make(many, 70000, (gguf_split_limit){ GGUF_SPLIT_MAX_SIZE, 32 }, &p, &e),
        PN_ERR_USAGE);
    cr_assert(strstr(e.msg, "--split-max-size") && strstr(e.msg, "70000"), "%s", e.msg);
    free(many);
    /* More tensors than split.tensors.count holds, in two splits. */
    size_t huge = (size_t)GGUF_SPLIT_MAX_SET_TENSORS + 1;
    cr_assert_eq(gguf_split_plan_make(
                     NULL, huge, (gguf_split_limit){ GGUF_SPLIT_MAX_TENSORS, huge - 1 }, &p, &e),
                 PN_ERR_USAGE);
    cr_assert(strstr(e.msg, "split.tensors.count"), "%s", e.msg);
    const uint64_t big[2] = { UINT64_MAX - 5, 1 };
    cr_assert_eq(
        gguf_split_plan_make(big, 2, (gguf_split_limit){ GGUF_SPLIT_MAX_SIZE, 64 }, &p, &e),
        PN_ERR_USAGE, "a size that overflows when padded");
}

Test(split_plan, split_of_gives_the_split_of_each_tensor)
{
    gguf_split_plan p = plan_ok(NULL, 7, GGUF_SPLIT_MAX_TENSORS, 3);
    const size_t want[7] = { 0, 0, 0, 1, 1, 1, 2 };
    for (size_t i = 0; i < 7; i++)
        cr_assert_eq(gguf_split_plan_split_of(&p, i), want[i], "tensor %zu", i);
    gguf_split_plan_free(&p);
}

Test(split_plan, keep_split_follows_the_source_set)
{
    fixture f = make_set3(0);
    gguf_reader *r = open_ok(f.path[1], 0);
    gguf_split_plan p;
    pn_error e;
    cr_assert_eq(gguf_split_plan_of_reader(r, NULL, &p, &e), PN_OK, "%s", e.msg);
    assert_counts(&p, (size_t[]){ 4, 4, 2 }, 3);
    uint64_t want0 = 0;
    for (size_t i = 0; i < 4; i++)
        want0 += (gguf_reader_tensor(r, i)->size + 31) / 32 * 32;
    cr_assert_eq(p.data_bytes[0], want0);
    gguf_split_plan_free(&p);
    uint64_t out[10];
    for (size_t i = 0; i < 10; i++)
        out[i] = 100;
    cr_assert_eq(gguf_split_plan_of_reader(r, out, &p, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(p.data_bytes[2], 256, "the output's sizes, padded");
    gguf_split_plan_free(&p);
    gguf_reader_close(r);
    fixture_free(&f);
}

Test(split_plan, max_size_is_parsed_as_gguf_split_takes_it)
{
    uint64_t v;
    pn_error e;
    cr_assert_eq(gguf_split_parse_size("50G", &v, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(v, 50000000000ull);
    cr_assert_eq(gguf_split_parse_size("500M", &v, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(v, 500000000ull);
    cr_assert_eq(gguf_split_parse_size("18446744073G", &v, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(v, 18446744073000000000ull, "the largest that fits");
    const char *bad[] = { "",
                          "G",
                          "1.5G",
                          "0G",
                          "12",
                          "12K",
                          "12g",
                          "-1G",
                          "1 G",
                          "1GB",
                          "99999999999999999999G",
                          "18446744074G" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(gguf_split_parse_size(bad[i], &v, &e), PN_ERR_USAGE, "'%s'", bad[i]);
        cr_assert(strstr(e.msg, "--split-max-size"), "%s", e.msg);
    }
}

/* ------------------------------------------------------------------ */
/* split_write                                                         */

Test(split_write, a_set_reads_back_as_the_unsplit_model_from_any_of_its_files)
{
    const uint32_t aligns[] = { 0, 64 };
    for (size_t a = 0; a < 2; a++) {
        fixture f = make_set3(aligns[a]);
        char *plain_path = tu_join(f.dir, "plain.gguf");
        gguf_writer *model = model_writer(10, aligns[a]);
        write_plain(model, plain_path);
        gguf_writer_free(model);
        gguf_reader *plain = open_ok(plain_path, 0);
        cr_assert_eq(gguf_reader_n_splits(plain), 1);
        for (int s = 0; s < 3; s++) {
            gguf_reader *set = open_ok(f.path[s], 0);
            cr_assert_eq(gguf_reader_n_splits(set), 3, "opened from split %d", s + 1);
            cr_assert_str_eq(gguf_reader_name(set), f.path[0], "the set's file is its first");
            assert_same_model(set, plain);
            gguf_reader_close(set);
        }
        gguf_reader_close(plain);
        free(plain_path);
        fixture_free(&f);
    }
}

/* The keys of a file, as "name:type" joined with spaces. */
static char *key_list(const gguf_reader *r)
{
    size_t cap = 4096, len = 0;
    char *s = calloc(cap, 1);
    for (size_t i = 0; i < gguf_reader_n_kv(r); i++) {
        const gguf_kv *kv = gguf_reader_kv(r, i);
        len += (size_t)snprintf(s + len, cap - len, "%s%.*s:%s", i ? " " : "", (int)kv->key.len,
                                kv->key.data, gguf_value_type_name(kv->type));
    }
    return s;
}

static int64_t int_key(const gguf_reader *r, const char *key)
{
    const gguf_kv *kv = gguf_reader_find_kv(r, key);
    cr_assert_not_null(kv, "%s: %s", gguf_reader_name(r), key);
    return kv->type == GGUF_TYPE_INT32 ? kv->v.i64 : (int64_t)kv->v.u64;
}

Test(split_write, every_split_ends_with_the_split_keys_in_llama_cpps_types_and_order)
{
    for (int a = 0; a < 2; a++) {
        fixture f = make_set3(a ? 64 : 0);
        gguf_reader *set = open_ok(f.path[0], 0);
        const char *first_keys = a ? "general.architecture:string general.alignment:uint32 "
                                     "test.u32:uint32 test.f32:float32 test.strs:array "
                                     "pn.tensor_crc32:array test.after:string "
                                     "pn.split.set_fnv1a64:uint64 split.no:uint16 "
                                     "split.count:uint16 split.tensors.count:int32"
                                   : "general.architecture:string "
                                     "test.u32:uint32 test.f32:float32 test.strs:array "
                                     "pn.tensor_crc32:array test.after:string "
                                     "pn.split.set_fnv1a64:uint64 split.no:uint16 "
                                     "split.count:uint16 split.tensors.count:int32";
        const char *later_keys = a ? "general.alignment:uint32 pn.tensor_crc32:array "
                                     "pn.split.set_fnv1a64:uint64 split.no:uint16 "
                                     "split.count:uint16 split.tensors.count:int32"
                                   : "pn.tensor_crc32:array pn.split.set_fnv1a64:uint64 "
                                     "split.no:uint16 split.count:uint16 "
                                     "split.tensors.count:int32";
        for (size_t s = 0; s < 3; s++) {
            const gguf_reader *sr = gguf_reader_split(set, s);
            cr_assert_str_eq(gguf_reader_name(sr), f.path[s]);
            char *keys = key_list(sr);
            cr_assert_str_eq(keys, s == 0 ? first_keys : later_keys, "split %zu", s + 1);
            free(keys);
            cr_assert_eq(int_key(sr, GGUF_SPLIT_KEY_NO), (int64_t)s);
            cr_assert_eq(int_key(sr, GGUF_SPLIT_KEY_COUNT), 3);
            cr_assert_eq(int_key(sr, GGUF_SPLIT_KEY_TENSORS_COUNT), 10);
            cr_assert_eq(gguf_reader_alignment(sr), a ? 64u : 32u, "each split reads alone");
            const gguf_kv *crc = gguf_reader_find_kv(sr, CRC_KEY);
            cr_assert_eq(crc->arr_count, gguf_reader_n_tensors(sr), "its own tensors' CRCs");
        }
        gguf_reader_close(set);
        fixture_free(&f);
    }
}

Test(split_write, a_split_opened_alone_is_its_own_file_and_checks_against_its_own_crcs)
{
    fixture f = make_set3(0);
    gguf_reader *r = open_ok(f.path[1], GGUF_OPEN_ONE_FILE);
    cr_assert_eq(gguf_reader_n_splits(r), 1);
    cr_assert_eq(gguf_reader_n_tensors(r), 4);
    cr_assert_str_eq(gguf_reader_tensor(r, 0)->name, "blk.4.w");
    gguf_split_keys k;
    pn_error e;
    cr_assert_eq(gguf_split_read_keys(r, &k, &e), PN_OK, "%s", e.msg);
    cr_assert(k.has_no && k.has_count && k.has_tensors_count);
    cr_assert_eq(k.no, 1);
    cr_assert_eq(k.count, 3);
    cr_assert_eq(k.tensors_count, 10);
    cr_assert(gguf_split_keys_in_set(&k));
    uint32_t crcs[4];
    cr_assert_eq(gguf_reader_per_tensor_u32(r, CRC_KEY, crcs, &e), PN_OK, "%s", e.msg);
    for (size_t j = 0; j < 4; j++) {
        const gguf_tensor_info *ti = gguf_reader_tensor(r, j);
        uint8_t *b = malloc(ti->size);
        cr_assert_eq(gguf_reader_read_tensor(r, j, 0, b, ti->size, &e), PN_OK, "%s", e.msg);
        cr_assert_eq(crcs[j], (uint32_t)crc32(0L, b, (uInt)ti->size), "tensor %zu", j);
        free(b);
    }
    gguf_reader_close(r);
    /* Lenient and one-file together too. */
    r = open_ok(f.path[2], GGUF_OPEN_ONE_FILE | GGUF_OPEN_LENIENT);
    cr_assert_eq(gguf_reader_n_tensors(r), 2);
    gguf_reader_close(r);
    fixture_free(&f);
}

Test(split_write, a_plan_of_one_writes_the_plain_file_byte_for_byte_without_split_keys)
{
    char *dir = tu_mkdtemp();
    char *a = tu_join(dir, "a.gguf"), *b = tu_join(dir, "b.gguf");
    gguf_writer *model = model_writer(6, 0);
    gguf_split_plan p = plan_by_tensors(model, 6);
    cr_assert_eq(p.n_splits, 1);
    write_set(model, &p, b);
    gguf_split_plan_free(&p);
    write_plain(model, a);
    gguf_writer_free(model);
    size_t na, nb;
    uint8_t *x = tu_read_file(a, &na), *y = tu_read_file(b, &nb);
    cr_assert_eq(na, nb);
    cr_assert_eq(memcmp(x, y, na), 0, "the same bytes");
    free(x);
    free(y);
    gguf_reader *r = open_ok(b, 0);
    cr_assert_null(gguf_reader_find_kv(r, GGUF_SPLIT_KEY_COUNT));
    cr_assert_eq(gguf_reader_n_splits(r), 1);
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(a);
    free(b);
    free(dir);
}

Test(split_write, split_keys_copied_from_a_split_source_never_reach_an_output)
{
    char *dir = tu_mkdtemp();
    char *dst = tu_join(dir, "o.gguf");
    gguf_writer *model = model_writer(4, 0);
    /* As a tool copying the keys of split 2 of 5 of its source would. */
    cr_assert_eq(gguf_writer_set_u16(model, GGUF_SPLIT_KEY_NO, 1), PN_OK);
    cr_assert_eq(gguf_writer_set_u16(model, GGUF_SPLIT_KEY_COUNT, 5), PN_OK);
    cr_assert_eq(gguf_writer_set_i32(model, GGUF_SPLIT_KEY_TENSORS_COUNT, 99), PN_OK);
    gguf_split_plan p = plan_by_tensors(model, 3);
    write_set(model, &p, dst);
    gguf_split_plan_free(&p);
    char *first = gguf_split_path(dst, 0, 2);
    gguf_reader *r = open_ok(first, 0);
    cr_assert_eq(gguf_reader_n_splits(r), 2);
    cr_assert_eq(int_key(r, GGUF_SPLIT_KEY_COUNT), 2);
    cr_assert_eq(int_key(r, GGUF_SPLIT_KEY_TENSORS_COUNT), 4);
    gguf_reader_close(r);
    /* One split: no split keys at all. */
    char *one = tu_join(dir, "one.gguf");
    p = plan_by_tensors(model, 100);
    write_set(model, &p, one);
    gguf_split_plan_free(&p);
    r = open_ok(one, 0);
    cr_assert_null(gguf_reader_find_kv(r, GGUF_SPLIT_KEY_NO));
    cr_assert_null(gguf_reader_find_kv(r, GGUF_SPLIT_KEY_COUNT));
    cr_assert_null(gguf_reader_find_kv(r, GGUF_SPLIT_KEY_TENSORS_COUNT));
    gguf_reader_close(r);
    gguf_split_remove_keys(model);
    cr_assert(!gguf_writer_has_kv(model, GGUF_SPLIT_KEY_NO));
    cr_assert(!gguf_writer_has_kv(model, GGUF_SPLIT_KEY_COUNT));
    cr_assert(!gguf_writer_has_kv(model, GGUF_SPLIT_KEY_TENSORS_COUNT));
    gguf_writer_free(model);
    tu_rm_rf(dir);
    free(one);
    free(first);
    free(dst);
    free(dir);
}

Test(split_write,
     split_writers_refuse_a_plan_of_another_model_and_a_per_tensor_key_of_another_shape)
{
    gguf_writer *model = model_writer(4, 0);
    gguf_writer *w = (gguf_writer *)1;
    pn_error e;
    gguf_split_plan p = plan_ok(NULL, 5, GGUF_SPLIT_MAX_TENSORS, 2);
    cr_assert_eq(gguf_writer_new_split(model, &p, 0, per_tensor_keys, 1, &w, &e), PN_ERR_USAGE);
    cr_assert_null(w);
    gguf_split_plan_free(&p);
    p = plan_ok(NULL, 4, GGUF_SPLIT_MAX_TENSORS, 2);
    cr_assert_eq(gguf_writer_new_split(model, &p, 2, per_tensor_keys, 1, &w, &e), PN_ERR_USAGE,
                 "no split 3 of 2");
    const char *bad[] = { "test.strs" };
    cr_assert_eq(gguf_writer_new_split(model, &p, 0, bad, 1, &w, &e), PN_ERR_USAGE);
    cr_assert(strstr(e.msg, "test.strs"), "%s", e.msg);
    const char *absent[] = { "no.such.key" };
    cr_assert_eq(gguf_writer_new_split(model, &p, 1, absent, 1, &w, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(gguf_writer_n_kv(w), 4, "only the set identity and the split keys");
    gguf_writer_free(w);
    gguf_split_plan_free(&p);
    /* The split keys themselves. */
    w = gguf_writer_new();
    cr_assert_eq(gguf_split_set_keys(w, 3, 3, 10, &e), PN_ERR_USAGE);
    cr_assert_eq(gguf_split_set_keys(w, 0, 65536, 10, &e), PN_ERR_USAGE);
    cr_assert_eq(gguf_split_set_keys(w, 0, 2, GGUF_SPLIT_MAX_SET_TENSORS + 1, &e), PN_ERR_USAGE);
    cr_assert_eq(gguf_split_set_keys(w, 65534, 65535, GGUF_SPLIT_MAX_SET_TENSORS, &e), PN_OK);
    cr_assert_eq(gguf_writer_n_kv(w), 3);
    gguf_writer_free(w);
    gguf_writer_free(model);
}

Test(split_write, each_split_file_is_a_valid_gguf_for_an_independent_parser)
{
    char *out = NULL, *err = NULL;
    if (tu_run("node --version", &out, &err) != 0) {
        free(out);
        free(err);
        cr_skip_test("node is not installed; the independent GGUF parser runs on Node.js");
    }
    free(out);
    free(err);
    if (access(PN_SOURCE_DIR "/tests/node/node_modules/@huggingface/gguf/package.json", R_OK) != 0)
        cr_skip_test("@huggingface/gguf is not installed: run "
                     "`npm ci --prefix tests/node` in the source tree");
    fixture f = make_set3(64);
    gguf_reader *set = open_ok(f.path[0], 0);
    for (size_t s = 0; s < 3; s++) {
        const gguf_reader *sr = gguf_reader_split(set, s);
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "node '%s/tests/node/gguf-dump.mjs' '%s'", PN_SOURCE_DIR,
                 f.path[s]);
        int rc = tu_run(cmd, &out, &err);
        cr_assert_eq(rc, 0, "gguf-dump.mjs on %s (%d): %s", f.path[s], rc, err);
        char want[256];
        snprintf(want, sizeof want, "\"tensor_data_offset\":\"%llu\"",
                 (unsigned long long)gguf_reader_data_offset(sr));
        cr_assert(strstr(out, want), "split %zu: %s in %s", s + 1, want, out);
        snprintf(want, sizeof want, "{\"key\":\"split.no\",\"type\":\"uint16\",\"value\":%zu}", s);
        cr_assert(strstr(out, want), "split %zu: %s", s + 1, out);
        cr_assert(strstr(out, "{\"key\":\"split.count\",\"type\":\"uint16\",\"value\":3}"), "%s",
                  out);
        cr_assert(strstr(out, "{\"key\":\"split.tensors.count\",\"type\":\"int32\",\"value\":10}"),
                  "%s", out);
        for (size_t j = 0; j < gguf_reader_n_tensors(sr); j++) {
            const gguf_tensor_info *ti = gguf_reader_tensor(sr, j);
            snprintf(want, sizeof want, "{\"name\":\"%s\",\"n_dims\":%u,", ti->name, ti->n_dims);
            cr_assert(strstr(out, want), "split %zu: %s", s + 1, want);
            snprintf(want, sizeof want, "\"dtype\":%d,\"offset\":\"%llu\"}", ti->type,
                     (unsigned long long)ti->offset);
            cr_assert(strstr(out, want), "split %zu: %s", s + 1, want);
        }
        free(out);
        free(err);
    }
    gguf_reader_close(set);
    fixture_free(&f);
}

/* ------------------------------------------------------------------ */
/* split_read                                                          */

Test(split_read, a_plain_file_is_a_set_of_one)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "p.gguf");
    gguf_writer *model = model_writer(3, 0);
    write_plain(model, path);
    gguf_writer_free(model);
    gguf_reader *r = open_ok(path, 0);
    cr_assert_eq(gguf_reader_n_splits(r), 1);
    cr_assert_eq(gguf_reader_split(r, 0), r);
    cr_assert_null(gguf_reader_split(r, 1));
    cr_assert_eq(gguf_reader_split_first(r, 0), 0);
    cr_assert_eq(gguf_reader_split_first(r, 1), 3);
    for (size_t i = 0; i < 3; i++) {
        cr_assert_eq(gguf_reader_tensor(r, i)->split, 0);
        cr_assert_eq(gguf_reader_tensor_index_in_split(r, i), i);
    }
    cr_assert_eq(gguf_reader_tensor_index_in_split(r, 3), SIZE_MAX);
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(split_read, split_count_one_or_zero_is_a_set_of_one_and_one_must_say_split_no_0)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "renamed.gguf");
    custom_split c = custom(0, 1, 1);
    write_custom(path, &c);
    gguf_reader *r = open_ok(path, 0);
    cr_assert_eq(gguf_reader_n_splits(r), 1, "any name: llama.cpp loads it as one file");
    gguf_reader_close(r);
    c = custom(0, 0, 7); /* what gguf-split --merge leaves in its output */
    write_custom(path, &c);
    r = open_ok(path, 0);
    cr_assert_eq(gguf_reader_n_splits(r), 1);
    gguf_reader_close(r);
    c = custom(1, 1, 1);
    write_custom(path, &c);
    open_refused(path, PN_ERR_FORMAT, path, "split.no is 1, but split.count is 1");
    c = custom(0, 1, 2);
    write_custom(path, &c);
    open_refused(path, PN_ERR_FORMAT, path, "split.tensors.count is 2");
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(split_read, tensors_of_a_set_are_read_from_the_split_that_holds_them)
{
    fixture f = make_set3(64);
    gguf_reader *r = open_ok(f.path[2], 0);
    cr_assert_eq(gguf_reader_n_tensors(r), 10);
    const size_t want_first[4] = { 0, 4, 8, 10 };
    for (size_t s = 0; s <= 3; s++)
        cr_assert_eq(gguf_reader_split_first(r, s), want_first[s]);
    for (size_t i = 0; i < 10; i++) {
        const gguf_tensor_info *ti = gguf_reader_tensor(r, i);
        size_t s = i < 4 ? 0 : i < 8 ? 1 : 2;
        cr_assert_eq(ti->split, s, "tensor %zu", i);
        cr_assert_eq(gguf_reader_tensor_index_in_split(r, i), i - want_first[s]);
        const gguf_reader *sr = gguf_reader_split(r, s);
        const gguf_tensor_info *own = gguf_reader_tensor(sr, i - want_first[s]);
        cr_assert_eq(ti, own, "the same info as its split's reader gives");
        cr_assert_eq(gguf_reader_tensor_file_offset(r, i), gguf_reader_data_offset(sr) + ti->offset,
                     "an offset in its split's file");
        /* Middle bytes, through the set and through its split. */
        uint8_t a[8], b[8];
        pn_error e;
        uint64_t off = ti->size / 2 - 4;
        cr_assert_eq(gguf_reader_read_tensor(r, i, off, a, 8, &e), PN_OK, "%s", e.msg);
        cr_assert_eq(gguf_reader_read_tensor(sr, i - want_first[s], off, b, 8, &e), PN_OK, "%s",
                     e.msg);
        for (int k = 0; k < 8; k++) {
            cr_assert_eq(a[k], data_byte(i, off + (uint64_t)k));
            cr_assert_eq(b[k], a[k]);
        }
        const uint8_t *mem = gguf_reader_tensor_data(r, i);
        cr_assert_not_null(mem, "a small split is all in its buffer");
        cr_assert_eq(mem[0], data_byte(i, 0));
        gguf_reader_advise_tensor(r, i, 0, ti->size, true);
        gguf_reader_advise_tensor(r, i, ti->size, 10, false); /* past the end: ignored */
    }
    pn_error e;
    uint8_t x;
    cr_assert_eq(gguf_reader_read_tensor(r, 10, 0, &x, 1, &e), PN_ERR_USAGE);
    cr_assert_eq(gguf_reader_read_tensor(r, 9, gguf_reader_tensor(r, 9)->size, &x, 1, &e),
                 PN_ERR_USAGE);
    cr_assert(strstr(e.msg, f.path[2]) && strstr(e.msg, "blk.9.w"), "%s", e.msg);
    cr_assert_eq(gguf_reader_find_tensor(r, "blk.5.w"), 5);
    cr_assert_eq(gguf_reader_find_tensor(r, "nope"), -1);
    cr_assert_null(gguf_reader_tensor(r, 10));
    /* Keys come from the first split, whichever file was named. */
    cr_assert_not_null(gguf_reader_find_kv(r, "general.architecture"));
    cr_assert_eq(int_key(r, GGUF_SPLIT_KEY_NO), 0);
    gguf_reader_close(r);
    /* Lenient: the set too. */
    r = open_ok(f.path[1], GGUF_OPEN_LENIENT);
    cr_assert_eq(gguf_reader_n_splits(r), 3);
    cr_assert_eq(gguf_reader_n_tensors(r), 10);
    gguf_reader_close(r);
    fixture_free(&f);
}

Test(split_read, direct_reads_of_a_set_give_each_tensors_bytes_from_its_own_split)
{
    fixture f = make_set3(64);
    gguf_reader *r = open_ok(f.path[0], 0);
    gguf_direct *d = NULL;
    pn_error e;
    cr_assert_eq(gguf_direct_open(r, 4096, &d, &e), PN_OK, "%s", e.msg);
    /* in order (the handle moves from split to split), then backwards and
     * jumping between splits (the window of another file is never used) */
    const size_t order[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 2, 7, 0, 8, 4, 3, 5, 1, 6 };
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        size_t i = order[k];
        const uint64_t size = gguf_reader_tensor(r, i)->size;
        for (uint64_t off = 0; off < size; off += 1000) {
            size_t n = size - off < 1000 ? (size_t)(size - off) : 1000;
            const uint8_t *got = NULL;
            cr_assert_eq(gguf_direct_read_tensor(d, i, off, n, &got, &e), PN_OK, "%s", e.msg);
            for (size_t b = 0; b < n; b++)
                cr_assert_eq(got[b], data_byte(i, off + b), "tensor %zu, byte %llu", i,
                             (unsigned long long)(off + b));
        }
    }
    gguf_direct_close(d);
    gguf_reader_close(r);
    fixture_free(&f);
}

Test(split_read, a_missing_split_is_refused_naming_it)
{
    fixture f = make_set3(0);
    cr_assert_eq(unlink(f.path[2]), 0);
    open_refused(f.path[0], PN_ERR_IO, f.path[2], "missing: split 3 of 3");
    open_refused(f.path[1], PN_ERR_IO, f.path[2], "missing");
    cr_assert_eq(unlink(f.path[0]), 0);
    open_refused(f.path[1], PN_ERR_IO, f.path[0], "missing: split 1 of 3");
    fixture_free(&f);
}

Test(split_read, a_split_of_another_set_is_refused_naming_it)
{
    fixture f = make_set3(0);
    /* Another model's split 2 of 3: 9 tensors in its set. */
    char *odir = tu_mkdtemp();
    char *odst = tu_join(odir, "other.gguf");
    gguf_writer *other = model_writer(9, 0);
    gguf_split_plan p = plan_by_tensors(other, 4);
    write_set(other, &p, odst);
    gguf_split_plan_free(&p);
    gguf_writer_free(other);
    char *o2 = gguf_split_path(odst, 1, 3);
    copy_file(o2, f.path[1]);
    open_refused(f.path[0], PN_ERR_FORMAT, f.path[1], "split.tensors.count is 9");
    open_refused(f.path[0], PN_ERR_FORMAT, f.path[1], "not a split of that set");
    /* A split whose split.count is another. */
    custom_split c = custom(1, 4, 10);
    write_custom(f.path[1], &c);
    open_refused(f.path[0], PN_ERR_FORMAT, f.path[1], "split.count is 4");
    /* Opened from the foreign file: its own name says split 2 of 4. */
    open_refused(f.path[1], PN_ERR_FORMAT, f.path[1], "-00002-of-00004.gguf");
    /* A plain file in a split's place. */
    c = custom(0, 0, 0);
    c.count_type = c.no_type = c.total_type = GGUF_TYPE_COUNT_;
    write_custom(f.path[1], &c);
    open_refused(f.path[0], PN_ERR_FORMAT, f.path[1], "no split.count key, but");
    tu_rm_rf(odir);
    free(o2);
    free(odst);
    free(odir);
    fixture_free(&f);
}

/* The set identity of one file, read alone. */
static uint64_t set_id_of(const char *path)
{
    gguf_reader *r = open_ok(path, GGUF_OPEN_ONE_FILE);
    bool has = false;
    uint64_t id = 0;
    pn_error e;
    cr_assert_eq(gguf_split_read_set_id(r, &has, &id, &e), PN_OK, "%s", e.msg);
    cr_assert(has, "%s has no set identity", path);
    gguf_reader_close(r);
    return id;
}

Test(split_read, splits_of_two_runs_are_refused_naming_the_one_that_differs_from_most)
{
    fixture f = make_set3(0);
    /* Another run: the same tensors, split keys and plan, one key's value
     * differs (as another recipe or promotion count would). */
    char *odir = tu_mkdtemp();
    char *odst = tu_join(odir, "m.gguf");
    gguf_writer *other = model_writer(10, 0);
    cr_assert_eq(gguf_writer_set_u32(other, "test.u32", 8), PN_OK);
    gguf_split_plan p = plan_by_tensors(other, 4);
    write_set(other, &p, odst);
    char *o[3];
    for (uint32_t s = 0; s < 3; s++)
        o[s] = gguf_split_path(odst, s, 3);
    uint64_t mine = set_id_of(f.path[0]), theirs = set_id_of(o[0]);
    cr_assert_neq(mine, theirs, "another key value, another identity");
    cr_assert_eq(set_id_of(f.path[1]), mine);
    cr_assert_eq(set_id_of(f.path[2]), mine);
    /* the same model written again: the same identity */
    char *adir = tu_mkdtemp(), *adst = tu_join(adir, "m.gguf");
    gguf_writer *again = model_writer(10, 0);
    write_set(again, &p, adst);
    char *a0 = gguf_split_path(adst, 0, 3);
    cr_assert_eq(set_id_of(a0), mine, "the same model and plan give the same identity");
    /* another plan of the same model: another identity */
    gguf_split_plan p5 = plan_by_tensors(again, 5);
    char *bdst = tu_join(adir, "b.gguf");
    write_set(again, &p5, bdst);
    char *b0 = gguf_split_path(bdst, 0, 2);
    cr_assert_neq(set_id_of(b0), mine, "another plan, another identity");

    /* the other run's split 2 in the set: that file is named, whichever
     * file is opened */
    copy_file(o[1], f.path[1]);
    char want[128];
    snprintf(want, sizeof want, "is 0x%016llx, but 2 of the 3 splits have 0x%016llx",
             (unsigned long long)theirs, (unsigned long long)mine);
    for (int s = 0; s < 3; s++) {
        open_refused(f.path[s], PN_ERR_FORMAT, f.path[1], "this split is from another run");
        open_refused(f.path[s], PN_ERR_FORMAT, f.path[1], want);
    }
    /* two of three the other run's: now the first split is the odd one */
    copy_file(o[2], f.path[2]);
    open_refused(f.path[2], PN_ERR_FORMAT, f.path[0], "this split is from another run");
    /* the lenient open (pn-check's) refuses it too */
    gguf_reader *r = NULL;
    pn_error e;
    cr_assert_eq(gguf_reader_open_flags(f.path[0], GGUF_OPEN_LENIENT, &r, &e), PN_ERR_FORMAT);
    cr_assert(strstr(e.msg, f.path[0]), "%s", e.msg);

    /* no split with an identity (gguf-split's set), or only the first one
     * (gguf-split's copy of an earlier set's keys): the set opens */
    const struct {
        const char *name;
        unsigned no_id;
        bool opens;
    } cases[] = { { "none.gguf", 7u, true },
                  { "first.gguf", 6u, true },
                  { "later.gguf", 1u, false } };
    for (size_t k = 0; k < 3; k++) {
        char *dst = tu_join(adir, cases[k].name);
        write_set_ids(again, &p, dst, cases[k].no_id);
        char *first = gguf_split_path(dst, 0, 3);
        if (cases[k].opens) {
            r = open_ok(first, 0);
            cr_assert_eq(gguf_reader_n_splits(r), 3);
            gguf_reader_close(r);
        } else {
            /* but a first split without one among splits that have one is odd */
            open_refused(first, PN_ERR_FORMAT, first,
                         "its set identity (pn.split.set_fnv1a64) is absent");
        }
        free(first);
        free(dst);
    }

    gguf_split_plan_free(&p);
    gguf_split_plan_free(&p5);
    gguf_writer_free(other);
    gguf_writer_free(again);
    for (int s = 0; s < 3; s++)
        free(o[s]);
    tu_rm_rf(odir);
    tu_rm_rf(adir);
    free(odst);
    free(odir);
    free(adst);
    free(adir);
    free(a0);
    free(bdst);
    free(b0);
    fixture_free(&f);
}

Test(split_read, a_split_whose_split_no_is_not_its_place_is_refused_naming_it)
{
    fixture f = make_set3(0);
    copy_file(f.path[2], f.path[1]); /* split.no 2 under the name of split 2 (no 1) */
    open_refused(f.path[0], PN_ERR_FORMAT, f.path[1], "split.no is 2 (split 3 of 3)");
    open_refused(f.path[2], PN_ERR_FORMAT, f.path[1], "by its name this is split 2 of 3");
    /* The named file itself: its keys say split 3, its name split 2. */
    open_refused(f.path[1], PN_ERR_FORMAT, f.path[1], "does not end in '-00003-of-00003.gguf'");
    fixture_free(&f);
}

Test(split_read, a_file_whose_name_is_not_the_split_its_keys_claim_is_refused)
{
    fixture f = make_set3(0);
    char *renamed = tu_join(f.dir, "model.gguf");
    cr_assert_eq(rename(f.path[0], renamed), 0);
    open_refused(renamed, PN_ERR_FORMAT, renamed, "make this file split 1 of 3");
    open_refused(f.path[1], PN_ERR_IO, f.path[0], "missing");
    char *wrong = tu_join(f.dir, "m-00001-of-00004.gguf");
    cr_assert_eq(rename(renamed, wrong), 0);
    open_refused(wrong, PN_ERR_FORMAT, wrong, "'-00001-of-00003.gguf'");
    free(wrong);
    free(renamed);
    fixture_free(&f);
}

Test(split_read, a_tensor_in_two_splits_is_refused_naming_both_files)
{
    char *dir = tu_mkdtemp();
    char *dst = tu_join(dir, "d.gguf");
    char *p1 = gguf_split_path(dst, 0, 2), *p2 = gguf_split_path(dst, 1, 2);
    custom_split c = custom(0, 2, 4);
    c.names[0] = "a";
    c.names[1] = "b";
    c.n_names = 2;
    write_custom(p1, &c);
    c = custom(1, 2, 4);
    c.names[0] = "c";
    c.names[1] = "a";
    c.n_names = 2;
    write_custom(p2, &c);
    open_refused(p1, PN_ERR_TENSOR, p1, "tensor 'a'");
    open_refused(p2, PN_ERR_TENSOR, p2, "in two splits");
    gguf_reader *r = (gguf_reader *)1;
    pn_error e;
    cr_assert_eq(gguf_reader_open(p1, &r, &e), PN_ERR_TENSOR);
    cr_assert(strstr(e.msg, p1) && strstr(e.msg, p2), "both files named: %s", e.msg);
    tu_rm_rf(dir);
    free(p1);
    free(p2);
    free(dst);
    free(dir);
}

Test(split_read, tensors_that_do_not_add_up_to_split_tensors_count_are_refused)
{
    char *dir = tu_mkdtemp();
    char *dst = tu_join(dir, "d.gguf");
    char *p1 = gguf_split_path(dst, 0, 2), *p2 = gguf_split_path(dst, 1, 2);
    custom_split c = custom(0, 2, 3);
    write_custom(p1, &c);
    c = custom(1, 2, 3);
    c.names[0] = "y";
    write_custom(p2, &c);
    open_refused(p2, PN_ERR_FORMAT, p1, "hold 2 tensors in all, but split.tensors.count says 3");
    tu_rm_rf(dir);
    free(p1);
    free(p2);
    free(dst);
    free(dir);
}

Test(split_read, split_keys_of_another_type_or_missing_are_refused_naming_the_key)
{
    char *dir = tu_mkdtemp();
    char *dst = tu_join(dir, "t.gguf");
    char *p1 = gguf_split_path(dst, 0, 2), *p2 = gguf_split_path(dst, 1, 2);
    custom_split good2 = custom(1, 2, 2);
    good2.names[0] = "y";
    write_custom(p2, &good2);
    struct {
        custom_split c;
        const char *what;
    } cases[] = {
        { custom(0, 2, 2), "split.count' has type uint32, expected uint16" },
        { custom(0, 2, 2), "split.no' has type int32, expected uint16" },
        { custom(0, 2, 2), "split.tensors.count' has type uint32, expected int32" },
        { custom(0, 2, 2), "split.no' has type int16" },
        { custom(0, 2, 2), "the key split.no is missing" },
        { custom(0, 2, 2), "the key split.tensors.count is missing" },
        { custom(2, 2, 2), "split.no is 2, but split.count is 2" },
        { custom(0, 2, -1), "split.tensors.count is -1" },
    };
    cases[0].c.count_type = GGUF_TYPE_UINT32;
    cases[1].c.no_type = GGUF_TYPE_INT32;
    cases[2].c.total_type = GGUF_TYPE_UINT32;
    cases[3].c.no_type = GGUF_TYPE_INT16;
    cases[4].c.no_type = GGUF_TYPE_COUNT_;
    cases[5].c.total_type = GGUF_TYPE_COUNT_;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_custom(p1, &cases[i].c);
        open_refused(p1, PN_ERR_FORMAT, p1, cases[i].what);
    }
    /* In a later split, found by name. */
    custom_split good1 = custom(0, 2, 2);
    write_custom(p1, &good1);
    custom_split bad2 = good2;
    bad2.no_type = GGUF_TYPE_UINT32;
    write_custom(p2, &bad2);
    open_refused(p1, PN_ERR_FORMAT, p2, "split.no' has type uint32, expected uint16");
    bad2 = good2;
    bad2.no_type = GGUF_TYPE_COUNT_;
    write_custom(p2, &bad2);
    open_refused(p1, PN_ERR_FORMAT, p2, "the key split.no is missing");
    /* Even a file without split.count: a split key of another type. */
    char *plain = tu_join(dir, "plain.gguf");
    custom_split c = custom(0, 0, 0);
    c.no_type = GGUF_TYPE_UINT32;
    c.count_type = c.total_type = GGUF_TYPE_COUNT_;
    write_custom(plain, &c);
    open_refused(plain, PN_ERR_FORMAT, plain, "split.no' has type uint32");
    gguf_reader_close(open_ok(plain, GGUF_OPEN_ONE_FILE)); /* alone: not checked */
    tu_rm_rf(dir);
    free(plain);
    free(p1);
    free(p2);
    free(dst);
    free(dir);
}

Test(split_read, a_split_that_shrinks_after_open_is_an_error_naming_that_split)
{
    fixture f = make_set3(0);
    gguf_reader *r = open_ok(f.path[0], 0);
    const gguf_reader *s3 = gguf_reader_split(r, 2);
    cr_assert_eq(truncate(f.path[2], (off_t)gguf_reader_data_offset(s3)), 0);
    uint8_t buf[64];
    pn_error e;
    const gguf_tensor_info *ti = gguf_reader_tensor(r, 9);
    cr_assert_eq(gguf_reader_read_tensor(r, 9, 0, buf, ti->size < 64 ? ti->size : 64, &e),
                 PN_ERR_TRUNCATED);
    cr_assert(strstr(e.msg, f.path[2]) && strstr(e.msg, "blk.9.w") && strstr(e.msg, "shrank"), "%s",
              e.msg);
    /* The other splits read on. */
    cr_assert_eq(gguf_reader_read_tensor(r, 0, 0, buf, 8, &e), PN_OK, "%s", e.msg);
    gguf_reader_close(r);
    /* Opened again, the cut split is refused. */
    gguf_reader *r2 = (gguf_reader *)1;
    cr_assert_eq(gguf_reader_open(f.path[0], &r2, &e), PN_ERR_TRUNCATED);
    cr_assert(strstr(e.msg, f.path[2]), "%s", e.msg);
    fixture_free(&f);
}

Test(split_read, a_fifo_or_a_directory_in_place_of_a_split_is_refused_at_once, .timeout = 20)
{
    fixture f = make_set3(0);
    cr_assert_eq(unlink(f.path[1]), 0);
    cr_assert_eq(mkfifo(f.path[1], 0600), 0, "%s", strerror(errno));
    open_refused(f.path[0], PN_ERR_IO, f.path[1], "FIFO");
    cr_assert_eq(unlink(f.path[1]), 0);
    cr_assert_eq(mkdir(f.path[1], 0700), 0);
    open_refused(f.path[0], PN_ERR_IO, f.path[1], "directory");
    cr_assert_eq(rmdir(f.path[1]), 0);
    fixture_free(&f);
}

Test(split_read, the_splits_of_a_large_set_are_read_no_further_than_their_headers)
{
    enum { N = 300, FLOATS = 16384 }; /* 64 KiB of data per split */
    char *dir = tu_mkdtemp();
    char *dst = tu_join(dir, "big.gguf");
    gguf_writer *model = gguf_writer_new();
    pn_error e;
    cr_assert_eq(gguf_writer_set_str(model, "general.architecture", "test"), PN_OK);
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%d", i);
        cr_assert_eq(gguf_writer_add_tensor(model, name, 1, (int64_t[]){ FLOATS }, PN_TYPE_F32, &e),
                     PN_OK);
    }
    gguf_split_plan p = plan_by_tensors(model, 1);
    cr_assert_eq(p.n_splits, N);
    write_set(model, &p, dst);
    gguf_split_plan_free(&p);
    gguf_writer_free(model);
    char *mid = gguf_split_path(dst, N / 2, N);
    double t0 = (double)clock() / CLOCKS_PER_SEC;
    gguf_reader *r = open_ok(mid, 0);
    double t1 = (double)clock() / CLOCKS_PER_SEC;
    cr_assert_eq(gguf_reader_n_splits(r), N);
    cr_assert_eq(gguf_reader_n_tensors(r), N);
    uint64_t buffered = 0;
    for (size_t s = 0; s < N; s++) {
        const gguf_reader *sr = gguf_reader_split(r, s);
        if (s != N / 2)
            cr_assert_lt(gguf_reader_bytes_len(sr), 8192, "split %zu read %llu bytes", s,
                         (unsigned long long)gguf_reader_bytes_len(sr));
        buffered += gguf_reader_bytes_len(sr);
    }
    cr_assert_lt(buffered, (uint64_t)N * 8192 + ((uint64_t)FLOATS * 4 + 4096),
                 "memory follows the headers, not the data");
    cr_assert_eq(gguf_reader_find_tensor(r, "t299"), 299);
    cr_log_info("a set of %d splits opened in %.3f s of CPU", N, t1 - t0);
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(mid);
    free(dst);
    free(dir);
}
