/* test_header_hash.c - the writer's header hash is the rule docs/format.md
 * states (recomputed here from the file's bytes by a parser and an FNV-1a 64
 * of this test's own), a patched array is hashed with its final values, the
 * layout known before begin counts the record, and the check proves what the
 * writer wrote. The CLI side (pn-check's findings, pn-dequant's refusal):
 * programs/test_model_check.c's header_hash suite; pn-convert's: programs/test_hf.c. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "gguf/header_hash.h"
#include "test_util.h"

static char *g_dir;

static void setup(void)
{
    g_dir = tu_mkdtemp();
}

static void teardown(void)
{
    tu_rm_rf(g_dir);
    free(g_dir);
}

TestSuite(header_hash_writer, .init = setup, .fini = teardown, .timeout = 30);

/* FNV-1a 64, as the format states it (not the project's function). */
static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#define BASIS 0xcbf29ce484222325ull

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Bytes of a value of type t at p (no nested arrays in these files). */
static size_t value_len(uint32_t t, const uint8_t *p)
{
    static const int fixed[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
    if (t == 8)
        return 8 + (size_t)le(p, 8);
    if (t == 9) {
        uint32_t et = (uint32_t)le(p, 4);
        uint64_t count = le(p + 4, 8);
        size_t n = 12;
        for (uint64_t i = 0; i < count; i++)
            n += et == 8 ? 8 + (size_t)le(p + n, 8) : (size_t)fixed[et];
        return n;
    }
    cr_assert_lt(t, 13u);
    return (size_t)fixed[t];
}

typedef struct parsed_key {
    char name[128];
    const uint8_t *record; /* from the name's length */
    size_t record_len;
    const uint8_t *typed; /* from the value type */
    size_t typed_len;
} parsed_key;

/* The keys of a GGUF v3 in file order, parsed here from its bytes; *infos:
 * where its tensor infos start. */
static size_t parse_keys(const uint8_t *b, parsed_key *keys, size_t max, const uint8_t **infos)
{
    cr_assert(memcmp(b, "GGUF", 4) == 0);
    uint64_t n_kv = le(b + 16, 8);
    cr_assert_leq(n_kv, max);
    const uint8_t *p = b + 24;
    for (uint64_t i = 0; i < n_kv; i++) {
        parsed_key *k = &keys[i];
        size_t nl = (size_t)le(p, 8);
        cr_assert_lt(nl, sizeof k->name);
        memcpy(k->name, p + 8, nl);
        k->name[nl] = 0;
        k->record = p;
        k->typed = p + 8 + nl;
        uint32_t t = (uint32_t)le(k->typed, 4);
        k->typed_len = 4 + value_len(t, k->typed + 4);
        k->record_len = 8 + nl + k->typed_len;
        p += k->record_len;
    }
    *infos = p;
    return (size_t)n_kv;
}

static bool excluded(const char *name)
{
    return strncmp(name, "pn.header.", 10) == 0 || strcmp(name, "split.no") == 0 ||
           strcmp(name, "split.count") == 0 || strcmp(name, "split.tensors.count") == 0;
}

static const parsed_key *find(const parsed_key *keys, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(keys[i].name, name) == 0)
            return &keys[i];
    return NULL;
}

/* The file's record equals the documented rule, recomputed from its bytes. */
static void assert_record_is_the_rule(const char *path, size_t want_hashed)
{
    size_t len = 0;
    uint8_t *b = tu_read_file(path, &len);
    cr_assert_not_null(b);
    parsed_key keys[64];
    const uint8_t *infos;
    size_t n = parse_keys(b, keys, 64, &infos);
    const parsed_key *names = find(keys, n, "pn.header.keys");
    const parsed_key *values = find(keys, n, "pn.header.value_fnv1a64");
    const parsed_key *tensors = find(keys, n, "pn.header.tensors_fnv1a64");
    const parsed_key *whole = find(keys, n, "pn.header.fnv1a64");
    cr_assert(names && values && tensors && whole, "the four keys are there");
    /* the last four, in this order */
    cr_assert_eq(names, &keys[n - 4]);
    cr_assert_eq(values, &keys[n - 3]);
    cr_assert_eq(tensors, &keys[n - 2]);
    cr_assert_eq(whole, &keys[n - 1]);
    /* the tensor infos as stored, each but its u64 offset */
    uint64_t th = BASIS;
    const uint8_t *p = infos;
    for (uint64_t t = 0; t < le(b + 8, 8); t++) {
        size_t nl = (size_t)le(p, 8);
        uint32_t nd = (uint32_t)le(p + 8 + nl, 4);
        size_t info = 8 + nl + 4 + 8 * (size_t)nd + 4;
        th = fnv(th, p, info);
        p += info + 8;
    }
    cr_assert_eq(le(tensors->typed, 4), 10u, "a uint64");
    cr_assert_eq(le(tensors->typed + 4, 8), th, "the tensor infos' hash");
    cr_assert_eq(le(names->typed, 4), 9u);
    cr_assert_eq(le(names->typed + 4, 4), 8u, "an array of string");
    cr_assert_eq(le(values->typed + 4, 4), 10u, "an array of uint64");
    cr_assert_eq(le(whole->typed, 4), 10u, "a uint64");
    cr_assert_eq(le(names->typed + 8, 8), want_hashed);
    cr_assert_eq(le(values->typed + 8, 8), want_hashed);
    const uint8_t *np = names->typed + 16;
    const uint8_t *vp = values->typed + 16;
    uint64_t h = BASIS;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (excluded(keys[i].name))
            continue;
        size_t nl = (size_t)le(np, 8);
        cr_assert(nl == strlen(keys[i].name) && memcmp(np + 8, keys[i].name, nl) == 0,
                  "record name %zu is %s", j, keys[i].name);
        np += 8 + nl;
        cr_assert_eq(le(vp, 8), fnv(BASIS, keys[i].typed, keys[i].typed_len), "value hash of %s",
                     keys[i].name);
        vp += 8;
        h = fnv(h, keys[i].record, keys[i].record_len);
        j++;
    }
    cr_assert_eq(j, want_hashed);
    cr_assert_eq(le(whole->typed + 4, 8), h, "the whole hash");
    free(b);
}

static gguf_reader *open_path(const char *path)
{
    gguf_reader *r = NULL;
    pn_error e = { 0 };
    cr_assert_eq(gguf_reader_open(path, &r, &e), PN_OK, "%s", e.msg);
    return r;
}

/* A writer with keys of several types, split keys among them, and one
 * tensor of 8 f32. */
static gguf_writer *writer_with_keys(bool hash)
{
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_header_hash(w, hash);
    cr_assert_eq(gguf_writer_set_str(w, "general.architecture", "test"), PN_OK);
    cr_assert_eq(gguf_writer_set_u32(w, "test.n", 7), PN_OK);
    cr_assert_eq(gguf_writer_set_u16(w, "split.no", 0), PN_OK);
    cr_assert_eq(gguf_writer_set_f32(w, "test.f", 0.5f), PN_OK);
    cr_assert_eq(gguf_writer_set_bool(w, "test.b", true), PN_OK);
    const char *strs[] = { "a", "bc", "" };
    cr_assert_eq(gguf_writer_set_arr_str(w, "test.strs", strs, 3), PN_OK);
    uint32_t zeros[1] = { 0 };
    cr_assert_eq(gguf_writer_set_arr(w, "test.crc", GGUF_TYPE_UINT32, zeros, 1), PN_OK);
    pn_error e = { 0 };
    int64_t ne[1] = { 8 };
    cr_assert_eq(gguf_writer_add_tensor(w, "t", 1, ne, PN_TYPE_F32, &e), PN_OK, "%s", e.msg);
    return w;
}

static void write_out(gguf_writer *w, const char *path, bool patch)
{
    pn_error e = { 0 };
    cr_assert_eq(gguf_writer_begin(w, path, &e), PN_OK, "%s", e.msg);
    float data[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    cr_assert_eq(gguf_writer_write(w, data, sizeof data, &e), PN_OK, "%s", e.msg);
    if (patch) {
        uint32_t crc[1] = { 0xdeadbeef };
        cr_assert_eq(gguf_writer_patch_arr(w, "test.crc", crc, 1, &e), PN_OK, "%s", e.msg);
    }
    cr_assert_eq(gguf_writer_close(w, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(gguf_writer_commit(w, &e), PN_OK, "%s", e.msg);
}

Test(header_hash_writer, the_record_is_the_rule_docs_format_md_states)
{
    const char *p = tu_join_static(g_dir, "a.gguf");
    gguf_writer *w = writer_with_keys(true);
    write_out(w, p, false);
    gguf_writer_free(w);
    /* 6 keys hashed: split.no and the record's own are not */
    assert_record_is_the_rule(p, 6);
    gguf_reader *r = open_path(p);
    gguf_header_verdict v;
    gguf_header_hash_verify(r, &v);
    cr_assert_eq(v.proof, GGUF_HEADER_PROVEN, "%s", v.message);
    gguf_reader_close(r);
}

Test(header_hash_writer, an_array_patched_after_begin_is_hashed_with_its_final_values)
{
    const char *p = tu_join_static(g_dir, "p.gguf");
    gguf_writer *w = writer_with_keys(true);
    write_out(w, p, true);
    gguf_writer_free(w);
    gguf_reader *r = open_path(p);
    const gguf_kv *crc = gguf_reader_find_kv(r, "test.crc");
    cr_assert_eq(gguf_kv_arr_u64(crc, 0), 0xdeadbeefu, "the patch is in the file");
    gguf_header_verdict v;
    gguf_header_hash_verify(r, &v);
    cr_assert_eq(v.proof, GGUF_HEADER_PROVEN, "%s", v.message);
    gguf_reader_close(r);
    assert_record_is_the_rule(p, 6);
}

Test(header_hash_writer, the_layout_known_before_begin_counts_the_record)
{
    const char *p = tu_join_static(g_dir, "l.gguf");
    gguf_writer *w = writer_with_keys(true);
    uint64_t data_at = gguf_writer_data_offset(w), bytes = gguf_writer_file_bytes(w);
    gguf_writer *plain = writer_with_keys(false);
    cr_assert_gt(data_at, gguf_writer_data_offset(plain), "the record takes header bytes");
    gguf_writer_free(plain);
    write_out(w, p, false);
    gguf_writer_free(w);
    gguf_reader *r = open_path(p);
    cr_assert_eq(gguf_reader_data_offset(r), data_at);
    cr_assert_eq(gguf_reader_file_size(r), bytes);
    gguf_reader_close(r);
}

Test(header_hash_writer, a_writer_without_it_writes_no_record_and_the_file_is_unproven)
{
    const char *p = tu_join_static(g_dir, "n.gguf");
    gguf_writer *w = writer_with_keys(false);
    write_out(w, p, false);
    gguf_writer_free(w);
    gguf_reader *r = open_path(p);
    for (size_t i = 0; i < gguf_reader_n_kv(r); i++) {
        gguf_str k = gguf_reader_kv(r, i)->key;
        cr_assert(!(k.len >= 10 && memcmp(k.data, "pn.header.", 10) == 0), "%.*s", (int)k.len,
                  k.data);
    }
    gguf_header_verdict v;
    gguf_header_hash_verify(r, &v);
    cr_assert_eq(v.proof, GGUF_HEADER_UNPROVEN);
    cr_assert(strstr(v.message, "no header hash") != NULL, "%s", v.message);
    gguf_reader_close(r);
}

Test(header_hash_writer, a_copied_record_is_refused_at_begin)
{
    const char *p = tu_join_static(g_dir, "c.gguf");
    gguf_writer *w = writer_with_keys(true);
    cr_assert_eq(gguf_writer_set_u64(w, "pn.header.fnv1a64", 1), PN_OK);
    pn_error e = { 0 };
    cr_assert_eq(gguf_writer_begin(w, p, &e), PN_ERR_USAGE);
    cr_assert(strstr(e.msg, "pn.header.fnv1a64") != NULL, "%s", e.msg);
    cr_assert(!tu_exists(p), "nothing written");
    gguf_writer_free(w);
}

Test(header_hash_writer, a_moved_key_is_named)
{
    /* the record of one file, the keys of the same set in another order */
    const char *a = tu_join_static(g_dir, "m1.gguf");
    gguf_writer *w = writer_with_keys(true);
    write_out(w, a, false);
    gguf_writer_free(w);
    gguf_reader *r = open_path(a);
    gguf_writer *x = gguf_writer_new();
    const char *first[] = { "test.n", "general.architecture" };
    for (int k = 0; k < 2; k++)
        cr_assert_eq(gguf_writer_copy_kv(x, gguf_reader_find_kv(r, first[k])), PN_OK);
    for (size_t i = 0; i < gguf_reader_n_kv(r); i++)
        cr_assert_eq(gguf_writer_copy_kv(x, gguf_reader_kv(r, i)), PN_OK);
    pn_error e = { 0 };
    int64_t ne[1] = { 8 };
    cr_assert_eq(gguf_writer_add_tensor(x, "t", 1, ne, PN_TYPE_F32, &e), PN_OK);
    gguf_reader_close(r);
    const char *b = tu_join_static(g_dir, "m2.gguf");
    write_out(x, b, false);
    gguf_writer_free(x);
    r = open_path(b);
    gguf_header_verdict v;
    gguf_header_hash_verify(r, &v);
    cr_assert_eq(v.proof, GGUF_HEADER_MISMATCH);
    cr_assert_str_eq(v.kind, "moved");
    cr_assert_str_eq(v.key, "test.n");
    cr_assert(strstr(v.message, "general.architecture") != NULL, "%s", v.message);
    gguf_reader_close(r);
}

/* llama-quantize copies every key of its input, the record too, into a
 * file of other tensor types and sets general.file_type: that record is not
 * the file's, and proves nothing either way. */
Test(header_hash_writer, a_record_copied_into_a_file_of_other_tensors_proves_nothing)
{
    const char *a = tu_join_static(g_dir, "q1.gguf");
    gguf_writer *w = writer_with_keys(true);
    write_out(w, a, false);
    gguf_writer_free(w);
    gguf_reader *r = open_path(a);
    gguf_writer *x = gguf_writer_new();
    for (size_t i = 0; i < gguf_reader_n_kv(r); i++)
        cr_assert_eq(gguf_writer_copy_kv(x, gguf_reader_kv(r, i)), PN_OK);
    cr_assert_eq(gguf_writer_set_u32(x, "test.n", 8), PN_OK, "a key changed too");
    gguf_reader_close(r);
    pn_error e = { 0 };
    int64_t ne[1] = { 8 };
    cr_assert_eq(gguf_writer_add_tensor(x, "t", 1, ne, PN_TYPE_F16, &e), PN_OK);
    const char *b = tu_join_static(g_dir, "q2.gguf");
    cr_assert_eq(gguf_writer_begin(x, b, &e), PN_OK, "%s", e.msg);
    uint16_t half[8] = { 0 };
    cr_assert_eq(gguf_writer_write(x, half, sizeof half, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(gguf_writer_close(x, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(gguf_writer_commit(x, &e), PN_OK, "%s", e.msg);
    gguf_writer_free(x);
    r = open_path(b);
    gguf_header_verdict v;
    gguf_header_hash_verify(r, &v);
    cr_assert_eq(v.proof, GGUF_HEADER_UNPROVEN, "%s", v.message);
    cr_assert(strstr(v.message, "written for other tensors") != NULL, "%s", v.message);
    gguf_reader_close(r);
}
