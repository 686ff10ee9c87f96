/* make_gguf_corpus.c - writes the seed corpus of the GGUF reader's fuzzer.
 *
 * Usage: make_gguf_corpus OUT_DIR GOLDEN_TINY_F32_GGUF
 * (run-fuzz.sh does not need it: its output is committed in
 * tests/data/gguf-corpus/; rerun it when the format support changes.)
 *
 * Valid files come from our writer (one with the header hash, and a copy
 * with a key renamed, which the reader takes and the model check names);
 * invalid ones are a valid file with one
 * field changed, one per kind of refusal, so that the fuzzer starts next to
 * every check. All files are small (the largest is the first 4 KiB of the
 * golden model, whose header is 2,656 bytes: the rest is tensor data the
 * reader never reads).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "quant/types.h"

static const char *out_dir;

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "make_gguf_corpus: %s: %s\n", what, msg);
    exit(1);
}

static char *out_path(const char *name)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", out_dir, name);
    return buf;
}

static void check(pn_status st, const pn_error *e, const char *what)
{
    if (st != PN_OK)
        die(what, e ? e->msg : pn_strerror(st));
}

static void write_bytes(const char *name, const uint8_t *b, size_t n)
{
    FILE *f = fopen(out_path(name), "wb");
    if (!f || fwrite(b, 1, n, f) != n || fclose(f) != 0)
        die(name, "cannot write");
}

static uint8_t *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die(path, "cannot open");
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)len + 1);
    if (!b || fread(b, 1, (size_t)len, f) != (size_t)len)
        die(path, "cannot read");
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* Streams `total` bytes of a fixed pattern as tensor data, then commits. */
static void finish(gguf_writer *w, const char *name, uint64_t total)
{
    pn_error e;
    gguf_writer_set_replace(w, true); /* regenerating the corpus replaces it */
    check(gguf_writer_begin(w, out_path(name), &e), &e, name);
    uint8_t buf[256];
    for (uint64_t done = 0; done < total;) {
        size_t n = total - done < sizeof buf ? (size_t)(total - done) : sizeof buf;
        for (size_t i = 0; i < n; i++)
            buf[i] = (uint8_t)((done + i) * 13 + 5);
        check(gguf_writer_write(w, buf, n, &e), &e, name);
        done += n;
    }
    check(gguf_writer_close(w, &e), &e, name);
    check(gguf_writer_commit(w, &e), &e, name);
    gguf_writer_free(w);
}

static void add(gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne, int type,
                uint64_t *total)
{
    pn_error e;
    check(gguf_writer_add_tensor(w, name, n_dims, ne, type, &e), &e, name);
    const pn_type_traits *tt = pn_type_traits_get(type);
    uint64_t size = (uint64_t)(ne[0] / tt->block_weights * tt->block_bytes);
    for (uint32_t d = 1; d < n_dims; d++)
        size *= (uint64_t)ne[d];
    *total += size;
}

static void small_file(void)
{
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "test");
    gguf_writer_set_u32(w, "general.alignment", 32);
    gguf_writer_set_bool(w, "test.flag", true);
    gguf_writer_set_u32(w, "test.k1", 1);
    gguf_writer_set_u32(w, "test.k2", 2);
    uint32_t arr[3] = { 1, 2, 3 };
    gguf_writer_set_arr(w, "test.arr", GGUF_TYPE_UINT32, arr, 3);
    const char *toks[] = { "<s>", "", "tok" };
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    uint64_t total = 0;
    add(w, "t0", 1, (int64_t[]){ 4 }, PN_TYPE_F32, &total);
    add(w, "t1", 2, (int64_t[]){ 32, 2 }, PN_TYPE_Q8_0, &total);
    add(w, "t2", 2, (int64_t[]){ 80, 1 }, PN_TYPE_PN3T, &total);
    finish(w, "valid-small.gguf", total);
}

/* small_file's keys and tensors with the header hash (gguf/header_hash.h),
 * and a copy with one key's name changed (a renamed key the check names). */
static void header_hash_files(void)
{
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_header_hash(w, true);
    gguf_writer_set_str(w, "general.architecture", "test");
    gguf_writer_set_u32(w, "test.k1", 1);
    const char *toks[] = { "<s>", "", "tok" };
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    uint64_t total = 0;
    add(w, "t0", 1, (int64_t[]){ 4 }, PN_TYPE_F32, &total);
    add(w, "t1", 2, (int64_t[]){ 32, 2 }, PN_TYPE_Q8_0, &total);
    finish(w, "valid-header-hash.gguf", total);
    size_t n = 0;
    uint8_t *b = read_bytes(out_path("valid-header-hash.gguf"), &n);
    uint8_t *k = memmem(b, n, "test.k1", 7);
    if (!k)
        die("valid-header-hash.gguf", "no key test.k1");
    k[5] = 'X';
    write_bytes("valid-header-hash-renamed.gguf", b, n);
    free(b);
}

static void types_file(void)
{
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_u8(w, "v.u8", 255);
    gguf_writer_set_i8(w, "v.i8", -128);
    gguf_writer_set_u16(w, "v.u16", 65535);
    gguf_writer_set_i16(w, "v.i16", -32768);
    gguf_writer_set_u32(w, "v.u32", 4000000000u);
    gguf_writer_set_i32(w, "v.i32", -5);
    gguf_writer_set_f32(w, "v.f32", 1.5f);
    gguf_writer_set_bool(w, "v.bool", false);
    gguf_writer_set_str(w, "v.str", "hello");
    gguf_writer_set_u64(w, "v.u64", UINT64_MAX);
    gguf_writer_set_i64(w, "v.i64", -1);
    gguf_writer_set_f64(w, "v.f64", 0.25);
    gguf_writer_set_str(w, "v.empty", "");
    float f[3] = { 1, -0.0f, 2 };
    gguf_writer_set_arr(w, "a.f32", GGUF_TYPE_FLOAT32, f, 3);
    uint8_t b[2] = { 1, 0 };
    gguf_writer_set_arr(w, "a.bool", GGUF_TYPE_BOOL, b, 2);
    int64_t i64[2] = { -7, 7 };
    gguf_writer_set_arr(w, "a.i64", GGUF_TYPE_INT64, i64, 2);
    gguf_writer_set_arr(w, "a.empty", GGUF_TYPE_UINT16, NULL, 0);
    static const uint8_t nested[] = {
        4, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0,   8,
        0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 'x',
    };
    gguf_kv kv;
    memset(&kv, 0, sizeof kv);
    kv.key = (gguf_str){ 8, "a.nested" };
    kv.type = GGUF_TYPE_ARRAY;
    kv.arr_type = GGUF_TYPE_ARRAY;
    kv.arr_count = 2;
    kv.arr_data = nested;
    kv.arr_bytes = sizeof nested;
    if (gguf_writer_copy_kv(w, &kv) != PN_OK)
        die("types", "copy_kv");
    finish(w, "valid-types.gguf", 0);
}

static void mixed_file(void)
{
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_u32(w, "general.alignment", 64);
    gguf_writer_set_str(w, "pn.format", "PNX-FORMAT-v0");
    uint32_t crc[5] = { 0 };
    gguf_writer_set_arr(w, "pn.tensor_crc32", GGUF_TYPE_UINT32, crc, 5);
    uint64_t total = 0;
    add(w, "a.f16", 1, (int64_t[]){ 3 }, PN_TYPE_F16, &total);
    add(w, "b.pn4t", 2, (int64_t[]){ 64, 2 }, PN_TYPE_PN4T, &total);
    add(w, "c.q4_K", 1, (int64_t[]){ 256 }, PN_TYPE_Q4_K, &total);
    add(w, "d.bf16", 3, (int64_t[]){ 2, 1, 2 }, PN_TYPE_BF16, &total);
    add(w, "e.q3_K", 4, (int64_t[]){ 256, 1, 1, 1 }, PN_TYPE_Q3_K, &total);
    finish(w, "valid-mixed.gguf", total);
}

/* The golden model's keys and tensor names, with every shape shrunk. */
static void golden_header_file(const char *golden)
{
    gguf_reader *r;
    pn_error e;
    check(gguf_reader_open(golden, &r, &e), &e, golden);
    gguf_writer *w = gguf_writer_new();
    for (size_t i = 0; i < gguf_reader_n_kv(r); i++)
        if (gguf_writer_copy_kv(w, gguf_reader_kv(r, i)) != PN_OK)
            die(golden, "copy_kv");
    uint64_t total = 0;
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        int64_t ne[GGUF_MAX_DIMS] = { 2, 1, 1, 1 };
        add(w, t->name, t->n_dims, ne, t->type, &total);
    }
    gguf_reader_close(r);
    finish(w, "valid-golden-shrunk.gguf", total);

    size_t n;
    uint8_t *b = read_bytes(golden, &n);
    write_bytes("invalid-golden-first-4KiB.gguf", b, n < 4096 ? n : 4096);
    free(b);
}

static void put(uint8_t *b, uint64_t at, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        b[at + i] = (uint8_t)(v >> (8 * i));
}

/* One changed field per file, from valid-small.gguf. */
static void invalid_files(void)
{
    size_t n;
    uint8_t *orig = read_bytes(out_path("valid-small.gguf"), &n);
    uint8_t *b = malloc(n);
    gguf_reader *r;
    pn_error e;
    check(gguf_reader_open_memory(orig, n, "small", &r, &e), &e, "small");
    const gguf_tensor_info *t1 = gguf_reader_tensor(r, 1);
    uint64_t t1_n_dims = t1->info_offset + 8 + 2;
    uint64_t t1_type = t1_n_dims + 4 + 16;
    uint64_t t1_offset = t1_type + 4;
    const gguf_kv *k2 = gguf_reader_find_kv(r, "test.k2");
    uint64_t k2_key = (uint64_t)((const uint8_t *)k2->key.data - orig);
    const gguf_kv *al = gguf_reader_find_kv(r, "general.alignment");
    uint64_t al_value = (uint64_t)((const uint8_t *)al->key.data - orig) + al->key.len + 4;
    const gguf_kv *arr = gguf_reader_find_kv(r, "test.arr");
    uint64_t arr_count = (uint64_t)((const uint8_t *)arr->key.data - orig) + arr->key.len + 8;
    gguf_reader_close(r);

#define VARIANT(name, edit)                                                                        \
    do {                                                                                           \
        memcpy(b, orig, n);                                                                        \
        edit;                                                                                      \
        write_bytes(name, b, n);                                                                   \
    } while (0)
    VARIANT("valid-v2.gguf", put(b, 4, 2, 4));
    VARIANT("invalid-v1.gguf", put(b, 4, 1, 4));
    VARIANT("invalid-big-endian.gguf", put(b, 4, 0x03000000, 4));
    VARIANT("invalid-magic.gguf", b[0] = 'g');
    VARIANT("invalid-kv-count.gguf", put(b, 16, 1ull << 40, 8));
    VARIANT("invalid-array-count.gguf", put(b, arr_count, 1ull << 62, 8));
    VARIANT("invalid-duplicate-key.gguf", b[k2_key + 6] = '1');
    VARIANT("invalid-alignment-3.gguf", put(b, al_value, 3, 4));
    VARIANT("invalid-n-dims-5.gguf", put(b, t1_n_dims, 5, 4));
    VARIANT("invalid-type-77.gguf", put(b, t1_type, 77, 4));
    VARIANT("invalid-misaligned.gguf", put(b, t1_offset, 40, 8));
    VARIANT("invalid-overlap.gguf", put(b, t1_offset, 0, 8));
#undef VARIANT
    write_bytes("invalid-truncated.gguf", orig, n / 2);
    free(b);
    free(orig);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: make_gguf_corpus OUT_DIR GOLDEN_TINY_F32_GGUF\n");
        return 2;
    }
    out_dir = argv[1];
    small_file();
    header_hash_files();
    types_file();
    mixed_file();
    golden_header_file(argv[2]);
    invalid_files();
    return 0;
}
