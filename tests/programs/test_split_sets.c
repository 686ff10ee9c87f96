/* Split GGUF sets in the programs (docs/split.md): split
 * sources read as one model by pn-quantize, pn-dequant and pn-check; split
 * outputs (--split-max-size, --split-max-tensors, --keep-split) with a CRC
 * array per split, committed first split last; one split per process
 * (--split-index); pn-synth's split sources; every refusal of a broken set.
 *
 * The models are pn-synth's at width scale 16 (a few MB): MODEL has 56
 * tensors, cut into 3 splits of 20, 20 and 16 by --split-max-tensors 20.
 * Expected bytes come from the unsplit model run through the same tools, and
 * CRCs from zlib over the bytes read back, never from the code under test.
 * CLI tests check the exit code, stdout or stderr, and the folder's listing
 * before and after ("nothing left behind").
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "gguf/gguf.h"
#include "gguf/gguf_split.h"
#include "dequant/dequant.h"
#include "pipeline/quantize.h"
#include "fixtures/scratch.h"
#include "test_util.h"

#define FALLBACK_RECIPE PN_SOURCE_DIR "/recipes/test-fallback.mix"
#define MODEL "--width-scale 16 --layers 4 --vocab 2048"
#define OTHER_MODEL "--width-scale 16 --layers 2 --vocab 2048"
#define QUANT "--quiet --backend cpu --threads 1 --recipe '" FALLBACK_RECIPE "'"
#define MODEL_TENSORS 56

/* ------------------------------------------------------------------ */
/* Helpers                                                             */

/* A path in the test's folder, from a format; malloc'd. */
static char *at(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *at(const char *fmt, ...)
{
    char name[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return tu_join(g_dir, name);
}

/* Runs a command line (formatted) in the test's folder. */
static int sh(char **out, char **err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int sh(char **out, char **err, const char *fmt, ...)
{
    char cmd[16384];
    int n = snprintf(cmd, sizeof cmd, "cd '%s' && ", g_dir);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd + n, sizeof cmd - (size_t)n, fmt, ap);
    va_end(ap);
    return tu_run(cmd, out, err);
}

#define SH_OK(...)                                                                                 \
    do {                                                                                           \
        char *o_ = NULL, *e_ = NULL;                                                               \
        int rc_ = sh(&o_, &e_, __VA_ARGS__);                                                       \
        cr_assert_eq(rc_, 0, "exit %d\n%s%s", rc_, o_, e_);                                        \
        free(o_);                                                                                  \
        free(e_);                                                                                  \
    } while (0)

/* The folder's entries, hidden ones too, one per line in order. */
static char *listing(const char *dir)
{
    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd, "ls -A '%s' | LC_ALL=C sort", dir);
    cr_assert_eq(tu_run(cmd, &out, NULL), 0);
    return out;
}

static void assert_same_file(const char *a, const char *b)
{
    size_t na, nb;
    uint8_t *x = tu_read_file(a, &na), *y = tu_read_file(b, &nb);
    cr_assert_eq(na, nb, "%s has %zu bytes, %s %zu", a, na, b, nb);
    cr_assert(memcmp(x, y, na) == 0, "%s and %s differ", a, b);
    free(x);
    free(y);
}

static void copy_file(const char *from, const char *to)
{
    size_t n;
    uint8_t *b = tu_read_file(from, &n);
    cr_assert_eq(tu_write_file(to, b, n), 0, "writing %s", to);
    free(b);
}

static gguf_reader *open_ok(const char *path, unsigned flags)
{
    gguf_reader *r = NULL;
    pn_error e;
    pn_error_clear(&e);
    cr_assert_eq(gguf_reader_open_flags(path, flags, &r, &e), PN_OK, "%s: %s", path, e.msg);
    return r;
}

static bool is_split_key(gguf_str k)
{
    return gguf_str_eq(k, GGUF_SPLIT_KEY_NO) || gguf_str_eq(k, GGUF_SPLIT_KEY_COUNT) ||
           gguf_str_eq(k, GGUF_SPLIT_KEY_TENSORS_COUNT) || gguf_str_eq(k, GGUF_SPLIT_KEY_SET_ID);
}

/* The header hash's record (pn.header.*): each file, each split of a set,
 * makes it of its own keys, so it is not compared with a plain file's. */
static bool is_record_key(gguf_str k)
{
    return k.len >= 10 && memcmp(k.data, "pn.header.", 10) == 0;
}

/* Same key, type and value (arrays: element type, count and raw bytes). */
static bool same_kv(const gguf_kv *a, const gguf_kv *b)
{
    if (a->key.len != b->key.len || memcmp(a->key.data, b->key.data, a->key.len) != 0 ||
        a->type != b->type)
        return false;
    if (a->type == GGUF_TYPE_ARRAY)
        return a->arr_type == b->arr_type && a->arr_count == b->arr_count &&
               a->arr_bytes == b->arr_bytes && memcmp(a->arr_data, b->arr_data, a->arr_bytes) == 0;
    if (a->type == GGUF_TYPE_STRING)
        return a->v.str.len == b->v.str.len &&
               memcmp(a->v.str.data, b->v.str.data, a->v.str.len) == 0;
    return memcmp(&a->v, &b->v, sizeof a->v.u64) == 0;
}

/* The per-tensor keys: one array per split in a set, each of its own
 * tensors' entries. */
static const char *const k_per_tensor[] = { "pn.tensor_crc32", "pn.source.sample_crc32",
                                            "pn.source.tensor_crc32", "pn.source.type" };
#define N_PER_TENSOR (sizeof k_per_tensor / sizeof k_per_tensor[0])

static bool is_per_tensor_key(gguf_str k)
{
    for (size_t i = 0; i < N_PER_TENSOR; i++)
        if (gguf_str_eq(k, k_per_tensor[i]))
            return true;
    return false;
}

/* The keys of `set` (a split set or a file) but the split keys, in order,
 * against those of the plain file `plain`; the per-tensor keys (one array
 * per split in a set) are compared gathered, tensor by tensor. */
static void assert_same_keys(const gguf_reader *set, const gguf_reader *plain)
{
    size_t j = 0;
    for (size_t i = 0; i < gguf_reader_n_kv(set); i++) {
        const gguf_kv *a = gguf_reader_kv(set, i);
        if (is_split_key(a->key) || is_record_key(a->key))
            continue;
        while (j < gguf_reader_n_kv(plain) && is_record_key(gguf_reader_kv(plain, j)->key))
            j++;
        cr_assert_lt(j, gguf_reader_n_kv(plain), "%s has more keys than %s", gguf_reader_name(set),
                     gguf_reader_name(plain));
        const gguf_kv *b = gguf_reader_kv(plain, j++);
        cr_assert(!is_split_key(b->key), "%s has split keys", gguf_reader_name(plain));
        if (is_per_tensor_key(a->key) && gguf_reader_n_splits(set) > 1) {
            cr_assert(a->key.len == b->key.len && memcmp(a->key.data, b->key.data, a->key.len) == 0,
                      "key %zu", i);
            continue;
        }
        cr_assert(same_kv(a, b), "key %.*s differs between %s and %s", (int)a->key.len, a->key.data,
                  gguf_reader_name(set), gguf_reader_name(plain));
    }
    while (j < gguf_reader_n_kv(plain) && is_record_key(gguf_reader_kv(plain, j)->key))
        j++;
    cr_assert_eq(j, gguf_reader_n_kv(plain), "%s lacks keys of %s", gguf_reader_name(set),
                 gguf_reader_name(plain));
    const size_t n = gguf_reader_n_tensors(plain);
    for (size_t k = 0; k < N_PER_TENSOR; k++) {
        if (!gguf_reader_find_kv(plain, k_per_tensor[k]))
            continue;
        uint32_t *x = calloc(n ? n : 1, 4), *y = calloc(n ? n : 1, 4);
        pn_error e;
        cr_assert_eq(gguf_reader_per_tensor_u32(set, k_per_tensor[k], x, &e), PN_OK, "%s", e.msg);
        cr_assert_eq(gguf_reader_per_tensor_u32(plain, k_per_tensor[k], y, &e), PN_OK, "%s", e.msg);
        cr_assert(memcmp(x, y, n * 4) == 0, "the %s of %s differ from %s's", k_per_tensor[k],
                  gguf_reader_name(set), gguf_reader_name(plain));
        free(x);
        free(y);
    }
}

static uint8_t *tensor_bytes(const gguf_reader *r, size_t i)
{
    const gguf_tensor_info *t = gguf_reader_tensor(r, i);
    uint8_t *b = malloc(t->size);
    pn_error e;
    cr_assert_eq(gguf_reader_read_tensor(r, i, 0, b, t->size, &e), PN_OK, "%s", e.msg);
    return b;
}

/* Every tensor of `set` in order: name, shape, type and bytes of `plain`'s. */
static void assert_same_tensors(const gguf_reader *set, const gguf_reader *plain)
{
    cr_assert_eq(gguf_reader_n_tensors(set), gguf_reader_n_tensors(plain));
    for (size_t i = 0; i < gguf_reader_n_tensors(plain); i++) {
        const gguf_tensor_info *a = gguf_reader_tensor(set, i), *b = gguf_reader_tensor(plain, i);
        cr_assert_str_eq(a->name, b->name);
        cr_assert(a->type == b->type && a->n_dims == b->n_dims &&
                      memcmp(a->ne, b->ne, sizeof a->ne) == 0,
                  "tensor %s", a->name);
        uint8_t *x = tensor_bytes(set, i), *y = tensor_bytes(plain, i);
        cr_assert(memcmp(x, y, a->size) == 0, "the bytes of tensor %s differ", a->name);
        free(x);
        free(y);
    }
}

static void assert_same_model(const char *set_path, const char *plain_path)
{
    gguf_reader *s = open_ok(set_path, 0), *p = open_ok(plain_path, 0);
    assert_same_keys(s, p);
    assert_same_tensors(s, p);
    gguf_reader_close(s);
    gguf_reader_close(p);
}

/* gguf-split's --split-max-size plan, written out here: tensors in order,
 * each counting its bytes rounded up to 32; a split closes before the
 * tensor that would take it past `limit` (never empty). Fills split_of
 * (may be NULL); returns the number of splits. */
static size_t size_plan(const gguf_reader *r, uint64_t limit, size_t *split_of)
{
    size_t n_splits = 1, cur_n = 0;
    uint64_t cur = 0;
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        uint64_t b = (gguf_reader_tensor(r, i)->size + 31) / 32 * 32;
        if (cur_n > 0 && cur + b > limit) {
            n_splits++;
            cur = 0;
            cur_n = 0;
        }
        cur += b;
        cur_n++;
        if (split_of)
            split_of[i] = n_splits - 1;
    }
    return n_splits;
}

static void synth(const char *name, const char *model, const char *extra)
{
    SH_OK("'%s/pn-synth' --quiet %s %s '%s'", PN_BIN_DIR, model, extra, name);
}

static void quantize(const char *src, const char *dst, const char *extra)
{
    SH_OK("'%s/pn-quantize' " QUANT " %s '%s' '%s'", PN_BIN_DIR, extra, src, dst);
}

/* The split keys of one file, read alone. */
static gguf_split_keys keys_of(const char *path)
{
    gguf_reader *r = open_ok(path, GGUF_OPEN_ONE_FILE);
    gguf_split_keys k;
    pn_error e;
    cr_assert_eq(gguf_split_read_keys(r, &k, &e), PN_OK, "%s", e.msg);
    gguf_reader_close(r);
    return k;
}

/* ------------------------------------------------------------------ */
/* Split sources                                                       */

Test(split_source, a_three_split_source_quantizes_to_the_file_of_the_unsplit_model_byte_for_byte,
     .init = setup, .fini = teardown)
{
    synth("src.gguf", MODEL, "");
    synth("set.gguf", MODEL, "--split-max-tensors 20");
    for (int s = 1; s <= 3; s++) {
        char *p = at("set-%05d-of-00003.gguf", s);
        cr_assert(exists(p), "%s", p);
        free(p);
    }
    quantize("src.gguf", "plain.pn.gguf", "");
    /* any file of the set names the set */
    quantize("set-00001-of-00003.gguf", "from1.pn.gguf", "");
    quantize("set-00003-of-00003.gguf", "from3.pn.gguf", "");
    char *plain = at("plain.pn.gguf"), *from1 = at("from1.pn.gguf"), *from3 = at("from3.pn.gguf");
    assert_same_file(from1, plain);
    assert_same_file(from3, plain);
    gguf_reader *r = open_ok(from1, GGUF_OPEN_ONE_FILE);
    cr_assert_eq(gguf_reader_n_tensors(r), MODEL_TENSORS, "the whole model, not split 1's");
    cr_assert_null(gguf_reader_find_kv(r, GGUF_SPLIT_KEY_COUNT), "no split.count in one file");
    cr_assert_null(gguf_reader_find_kv(r, GGUF_SPLIT_KEY_NO));
    cr_assert_null(gguf_reader_find_kv(r, GGUF_SPLIT_KEY_TENSORS_COUNT));
    gguf_reader_close(r);
    free(plain);
    free(from1);
    free(from3);
}

Test(split_source, keep_split_writes_the_unsplit_output_as_files_of_the_same_keys_tensors_and_crcs,
     .init = setup, .fini = teardown)
{
    synth("src.gguf", MODEL, "");
    synth("set.gguf", MODEL, "--split-max-tensors 20");
    quantize("src.gguf", "plain.pn.gguf", "");
    quantize("set-00002-of-00003.gguf", "out.gguf", "--keep-split");
    char *plain = at("plain.pn.gguf");
    const size_t want[3] = { 20, 20, 16 };
    for (uint32_t s = 0; s < 3; s++) {
        char *p = at("out-%05u-of-00003.gguf", s + 1);
        gguf_reader *r = open_ok(p, GGUF_OPEN_ONE_FILE);
        cr_assert_eq(gguf_reader_n_tensors(r), want[s], "%s", p);
        gguf_reader_close(r);
        gguf_split_keys k = keys_of(p);
        cr_assert(k.has_no && k.no == s && k.has_count && k.count == 3 && k.has_tensors_count &&
                      k.tensors_count == MODEL_TENSORS,
                  "%s: split keys", p);
        assert_same_model(p, plain);
        free(p);
    }
    char *dst = at("out.gguf");
    cr_assert(!exists(dst), "DST itself is only the name of the set");
    free(dst);
    free(plain);
}

Test(split_source, pn_dequant_decodes_a_split_pn_file_to_the_file_of_the_unsplit_one_byte_for_byte,
     .init = setup, .fini = teardown)
{
    synth("src.gguf", MODEL, "");
    quantize("src.gguf", "plain.pn.gguf", "");
    quantize("src.gguf", "pn.gguf", "--split-max-tensors 20");
    SH_OK("'%s/pn-dequant' --quiet --threads 1 plain.pn.gguf plain.f32.gguf", PN_BIN_DIR);
    SH_OK("'%s/pn-dequant' --quiet --threads 1 pn-00003-of-00003.gguf set.f32.gguf", PN_BIN_DIR);
    char *a = at("plain.f32.gguf"), *b = at("set.f32.gguf");
    assert_same_file(b, a);
    /* pn_decoded.tensor_crc32 holds the CRCs of every split, as from the plain file */
    gguf_reader *r = open_ok(b, 0);
    const gguf_kv *kv = gguf_reader_find_kv(r, "pn_decoded.tensor_crc32");
    cr_assert(kv && kv->arr_count == MODEL_TENSORS);
    cr_assert_null(gguf_reader_find_kv(r, GGUF_SPLIT_KEY_COUNT));
    gguf_reader_close(r);
    free(a);
    free(b);
}

Test(split_source, pn_check_checks_a_split_source_with_source_as_the_whole_model, .init = setup,
     .fini = teardown)
{
    synth("src.gguf", MODEL, "");
    synth("set.gguf", MODEL, "--split-max-tensors 20");
    quantize("src.gguf", "pn.gguf", "");
    char *out = NULL, *err = NULL;
    int rc = sh(&out, &err, "'%s/pn-check' --threads 1 --source set-00002-of-00003.gguf pn.gguf",
                PN_BIN_DIR);
    cr_assert_eq(rc, 0, "%s%s", out, err);
    cr_assert(strstr(out, "valid (0 errors"), "%s", out);
    cr_assert_null(strstr(out, "not compared"), "every tensor compared:\n%s", out);
    free(out);
    free(err);
}

/* ------------------------------------------------------------------ */
/* Split outputs                                                       */

Test(split_output, split_max_size_plans_as_gguf_split_and_names_the_files_as_llama_cpp_finds_them,
     .init = setup, .fini = teardown)
{
    synth("src.gguf", MODEL, "");
    quantize("src.gguf", "plain.pn.gguf", "");
    /* 1M: 10^6 bytes of padded tensor data per split at most */
    quantize("src.gguf", "dir.out.gguf", "--split-max-size 1M");
    char *plain_path = at("plain.pn.gguf");
    gguf_reader *plain = open_ok(plain_path, 0);
    size_t *split_of = calloc(MODEL_TENSORS, sizeof *split_of);
    const size_t n_splits = size_plan(plain, 1000000, split_of);
    cr_assert_gt(n_splits, 2, "the limit cuts this model in several splits");
    size_t t = 0;
    for (size_t s = 0; s < n_splits; s++) {
        char name[64];
        snprintf(name, sizeof name, "dir.out-%05zu-of-%05zu.gguf", s + 1, n_splits);
        char *p = at("%s", name);
        gguf_reader *r = open_ok(p, GGUF_OPEN_ONE_FILE);
        const size_t nk = gguf_reader_n_kv(r);
        /* llama-quantize's order and types, at the end of every split */
        cr_assert(gguf_str_eq(gguf_reader_kv(r, nk - 3)->key, GGUF_SPLIT_KEY_NO) &&
                      gguf_reader_kv(r, nk - 3)->type == GGUF_TYPE_UINT16 &&
                      gguf_reader_kv(r, nk - 3)->v.u64 == s,
                  "%s", name);
        cr_assert(gguf_str_eq(gguf_reader_kv(r, nk - 2)->key, GGUF_SPLIT_KEY_COUNT) &&
                      gguf_reader_kv(r, nk - 2)->type == GGUF_TYPE_UINT16 &&
                      gguf_reader_kv(r, nk - 2)->v.u64 == n_splits,
                  "%s", name);
        cr_assert(gguf_str_eq(gguf_reader_kv(r, nk - 1)->key, GGUF_SPLIT_KEY_TENSORS_COUNT) &&
                      gguf_reader_kv(r, nk - 1)->type == GGUF_TYPE_INT32 &&
                      gguf_reader_kv(r, nk - 1)->v.i64 == MODEL_TENSORS,
                  "%s", name);
        /* the metadata is the first split's; the others hold their own
         * cuts of the per-tensor keys, in the model's order */
        if (s == 0) {
            cr_assert_eq(nk, gguf_reader_n_kv(plain) + 4, "%s", name);
        } else {
            /* the set identity before the header hash's four keys and the
             * split keys, one value in every split */
            const gguf_kv *id = gguf_reader_kv(r, nk - 8), *id0 = NULL;
            cr_assert(gguf_str_eq(id->key, GGUF_SPLIT_KEY_SET_ID) && id->type == GGUF_TYPE_UINT64,
                      "%s", name);
            char *p0 = at("dir.out-00001-of-%05zu.gguf", n_splits);
            gguf_reader *r0 = open_ok(p0, GGUF_OPEN_ONE_FILE);
            id0 = gguf_reader_find_kv(r0, GGUF_SPLIT_KEY_SET_ID);
            cr_assert(id0 && id0->v.u64 == id->v.u64, "%s: another set identity than split 1",
                      name);
            gguf_reader_close(r0);
            free(p0);
            cr_assert(nk == N_PER_TENSOR + 8, "%s: %zu keys", name, nk);
            for (size_t k = 0; k < N_PER_TENSOR; k++)
                cr_assert(is_per_tensor_key(gguf_reader_kv(r, k)->key), "%s: key %zu", name, k);
            cr_assert(gguf_str_eq(gguf_reader_kv(r, 0)->key, "pn.tensor_crc32"), "%s", name);
        }
        for (size_t j = 0; j < gguf_reader_n_tensors(r); j++, t++) {
            cr_assert_eq(split_of[t], s, "tensor %zu is in split %zu", t, s);
            cr_assert_str_eq(gguf_reader_tensor(r, j)->name, gguf_reader_tensor(plain, t)->name);
        }
        gguf_reader_close(r);
        free(p);
    }
    cr_assert_eq(t, MODEL_TENSORS);
    char *first = at("dir.out-00001-of-%05zu.gguf", n_splits);
    assert_same_model(first, plain_path);
    free(first);
    gguf_reader_close(plain);
    free(plain_path);
    free(split_of);
}

Test(split_output, each_split_records_the_crc32_of_its_own_tensors_and_checks_on_its_own,
     .init = setup, .fini = teardown)
{
    synth("src.gguf", MODEL, "");
    quantize("src.gguf", "out.gguf", "--split-max-tensors 20");
    for (int s = 1; s <= 3; s++) {
        char *p = at("out-%05d-of-00003.gguf", s);
        gguf_reader *r = open_ok(p, GGUF_OPEN_ONE_FILE);
        const gguf_kv *kv = gguf_reader_find_kv(r, "pn.tensor_crc32");
        cr_assert(kv && kv->arr_count == gguf_reader_n_tensors(r), "%s", p);
        for (size_t j = 0; j < gguf_reader_n_tensors(r); j++) {
            uint8_t *b = tensor_bytes(r, j);
            uint32_t crc = (uint32_t)crc32(0L, b, (uInt)gguf_reader_tensor(r, j)->size);
            cr_assert_eq(crc, (uint32_t)gguf_kv_arr_u64(kv, j), "%s: tensor %zu", p, j);
            free(b);
        }
        gguf_reader_close(r);
        free(p);
    }
}

Test(split_output, the_dry_run_shows_each_split_with_the_size_of_its_file_and_writes_nothing,
     .init = setup, .fini = teardown)
{
    synth("src.gguf", MODEL, "");
    char *before = listing(g_dir);
    char *out = NULL, *err = NULL;
    int rc = sh(&out, &err,
                "'%s/pn-quantize' " QUANT " --dry-run --split-max-tensors 20 src.gguf "
                "out.gguf",
                PN_BIN_DIR);
    cr_assert_eq(rc, 0, "%s", err);
    char *after = listing(g_dir);
    cr_assert_str_eq(after, before, "a dry run writes nothing");
    quantize("src.gguf", "out.gguf", "--split-max-tensors 20");
    const size_t first[3] = { 0, 20, 40 }, n[3] = { 20, 20, 16 };
    for (int s = 0; s < 3; s++) {
        char *p = at("out-%05d-of-00003.gguf", s + 1);
        struct stat sb;
        cr_assert_eq(stat(p, &sb), 0);
        char line[512];
        snprintf(line, sizeof line,
                 "split %d/3 out-%05d-of-00003.gguf: %zu tensors (%zu to %zu), "
                 "%lld bytes",
                 s + 1, s + 1, n[s], first[s], first[s] + n[s] - 1, (long long)sb.st_size);
        cr_assert(strstr(out, line), "no line '%s' in:\n%s", line, out);
        free(p);
    }
    free(before);
    free(after);
    free(out);
    free(err);
}

Test(split_output, split_index_runs_0_1_and_2_made_separately_equal_one_run_byte_for_byte,
     .init = setup, .fini = teardown)
{
    synth("src.gguf", MODEL, "");
    char *one = at("one"), *tasks = at("tasks");
    cr_assert_eq(mkdir(one, 0755), 0);
    cr_assert_eq(mkdir(tasks, 0755), 0);
    free(one);
    free(tasks);
    /* the measurement first, as a cluster does it once (docs/split.md) */
    SH_OK("'%s/pn-quantize' " QUANT " --dry-run --measurement m.txt src.gguf > /dev/null",
          PN_BIN_DIR);
    quantize("src.gguf", "one/out.gguf", "--split-max-size 1M --measurement m.txt");
    char *cnt = NULL;
    sh(&cnt, NULL, "ls one | grep -c '^out-000..-of-000..\\.gguf$'");
    const size_t n_splits = (size_t)atoi(cnt);
    free(cnt);
    cr_assert_geq(n_splits, 3, "1M gives at least 3 splits of this model");
    for (size_t i = 0; i < n_splits; i++) {
        char *before = listing(g_dir);
        char *out = NULL, *err = NULL;
        int rc = sh(&out, &err,
                    "'%s/pn-quantize' " QUANT " --split-max-size 1M --measurement "
                    "m.txt --report tasks/r%zu.json --split-index %zu src.gguf "
                    "tasks/out.gguf",
                    PN_BIN_DIR, i, i);
        cr_assert_eq(rc, 0, "task %zu: %s%s", i, out, err);
        free(before);
        free(out);
        free(err);
        /* only its split is there, under the name of the full run */
        sh(&cnt, NULL, "ls tasks | grep -c gguf");
        cr_assert_eq(atoi(cnt), (int)i + 1, "task %zu wrote one file", i);
        free(cnt);
        char *a = at("one/out-%05zu-of-%05zu.gguf", i + 1, n_splits);
        char *b = at("tasks/out-%05zu-of-%05zu.gguf", i + 1, n_splits);
        assert_same_file(b, a);
        free(a);
        free(b);
    }
    /* the report of a task has figures for its split's tensors only */
    char *rep = at("tasks/r1.json");
    size_t len;
    char *json = tu_read_file(rep, &len);
    cr_assert(strstr(json, "\"split_index\": 1"), "%s", json);
    cr_assert(strstr(json, "\"relative_error\": null"), "tensors of other splits: null");
    free(json);
    free(rep);
    /* the tasks' files read as one model: the one run's */
    char *a = at("tasks/out-00001-of-%05zu.gguf", n_splits);
    char *b = at("one/out-00002-of-%05zu.gguf", n_splits);
    gguf_reader *x = open_ok(a, 0), *y = open_ok(b, 0);
    assert_same_tensors(x, y);
    gguf_reader_close(x);
    gguf_reader_close(y);
    free(a);
    free(b);
}

Test(split_output, usage_errors_exit_2_naming_the_option, .init = setup, .fini = teardown)
{
    synth("src.gguf", MODEL, "");
    char *before = listing(g_dir);
    static const struct {
        const char *args, *want;
    } cases[] = {
        { "--split-index 0", "--split-index needs a split output" },
        { "--split-max-size 1M --split-max-tensors 3", "not both" },
        { "--keep-split --split-max-tensors 3", "--keep-split follows" },
        { "--split-max-size 1.5X", "not a size" }, /* 1.5G is 1.5 GB (mix/size.h) */
        { "--split-max-size 0", "expected a size" },
        { "--split-max-tensors 0", "is not an integer in" },
        { "--split-max-tensors 20 --split-index 3", "--split-index 3: the plan has 3 splits, "
                                                    "numbered 0 to 2" },
        { "--keep-split --split-index 1",
          "--split-index 1: the plan has 1 split, numbered 0 to 0" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char *out = NULL, *err = NULL;
        int rc = sh(&out, &err, "'%s/pn-quantize' " QUANT " %s src.gguf out.gguf", PN_BIN_DIR,
                    cases[k].args);
        cr_assert_eq(rc, 2, "%s: exit %d: %s", cases[k].args, rc, err);
        cr_assert(strstr(err, cases[k].want), "%s: stderr:\n%s", cases[k].args, err);
        free(out);
        free(err);
    }
    char *after = listing(g_dir);
    cr_assert_str_eq(after, before);
    free(before);
    free(after);
}

Test(split_output, an_existing_split_is_refused_without_force_and_replaced_with_it, .init = setup,
     .fini = teardown)
{
    synth("src.gguf", MODEL, "");
    char *p2 = at("out-00002-of-00003.gguf");
    cr_assert_eq(tu_write_file(p2, "old", 3), 0);
    char *before = listing(g_dir);
    char *out = NULL, *err = NULL;
    int rc = sh(&out, &err, "'%s/pn-quantize' " QUANT " --split-max-tensors 20 src.gguf out.gguf",
                PN_BIN_DIR);
    cr_assert_eq(rc, 1, "%s", err);
    cr_assert(strstr(err, "out-00002-of-00003.gguf: output exists; use --force to replace it"),
              "%s", err);
    char *after = listing(g_dir);
    cr_assert_str_eq(after, before, "nothing written");
    size_t n;
    char *old = tu_read_file(p2, &n);
    cr_assert(n == 3 && memcmp(old, "old", 3) == 0);
    free(old);
    free(out);
    free(err);
    quantize("src.gguf", "out.gguf", "--split-max-tensors 20 --force");
    quantize("src.gguf", "plain.gguf", "");
    char *plain = at("plain.gguf");
    assert_same_model(p2, plain);
    free(plain);
    free(p2);
    free(before);
    free(after);
}

Test(split_output, a_split_that_would_be_a_file_of_the_source_or_the_report_is_refused,
     .init = setup, .fini = teardown)
{
    synth("set.gguf", MODEL, "--split-max-tensors 20");
    char *before = listing(g_dir);
    char *out = NULL, *err = NULL;
    /* --keep-split into the source's own name: its files are the targets */
    int rc = sh(&out, &err,
                "'%s/pn-quantize' " QUANT " --keep-split --force "
                "set-00001-of-00003.gguf set.gguf",
                PN_BIN_DIR);
    cr_assert_eq(rc, 2, "%s", err);
    cr_assert(strstr(err, "set-00001-of-00003.gguf: the output is a file of the input"), "%s", err);
    free(out);
    free(err);
    rc = sh(&out, &err, "'%s/pn-dequant' --keep-split --force set-00002-of-00003.gguf set.gguf",
            PN_BIN_DIR);
    cr_assert_eq(rc, 2, "a usage error, as in pn-quantize: %s", err);
    cr_assert(strstr(err, "the output is a file of the input"), "%s", err);
    free(out);
    free(err);
    /* a report that would be one of the output's files */
    rc = sh(&out, &err,
            "'%s/pn-quantize' " QUANT " --split-max-tensors 20 --report "
            "out-00002-of-00003.gguf set-00001-of-00003.gguf out.gguf",
            PN_BIN_DIR);
    cr_assert_eq(rc, 2, "%s", err);
    cr_assert(strstr(err, "--report out-00002-of-00003.gguf: that is split 2 of the output"), "%s",
              err);
    free(out);
    free(err);
    char *after = listing(g_dir);
    cr_assert_str_eq(after, before, "nothing written, the source untouched");
    free(before);
    free(after);
}

Test(split_output, pn_dequant_writes_a_split_set_that_reads_as_its_unsplit_output, .init = setup,
     .fini = teardown)
{
    synth("src.gguf", MODEL, "");
    quantize("src.gguf", "pn.gguf", "--split-max-tensors 20");
    SH_OK("'%s/pn-dequant' --quiet --threads 1 pn-00001-of-00003.gguf plain.gguf", PN_BIN_DIR);
    char *out = NULL, *err = NULL;
    int rc = sh(&out, &err,
                "'%s/pn-dequant' --threads 1 --split-max-size 2M pn-00001-of-00003.gguf "
                "dq.gguf",
                PN_BIN_DIR);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert(strstr(out, "splits beside it"), "%s", out);
    free(out);
    free(err);
    SH_OK("'%s/pn-dequant' --quiet --threads 1 --keep-split pn-00002-of-00003.gguf keep.gguf",
          PN_BIN_DIR);
    char *plain = at("plain.gguf"), *keep = at("keep-00003-of-00003.gguf");
    assert_same_model(keep, plain);
    gguf_reader *k = open_ok(keep, GGUF_OPEN_ONE_FILE);
    cr_assert_eq(gguf_reader_n_tensors(k), 16, "the source's third split");
    gguf_reader_close(k);
    char *cnt = NULL;
    sh(&cnt, NULL, "ls | grep -c '^dq-000..-of-'");
    int n = atoi(cnt);
    free(cnt);
    cr_assert_gt(n, 2, "2M cuts the decoded model in several files");
    char *first = at("dq-00001-of-%05d.gguf", n);
    assert_same_model(first, plain);
    /* every split's data: at most 2M unless one tensor alone is larger */
    for (int s = 1; s <= n; s++) {
        char *p = at("dq-%05d-of-%05d.gguf", s, n);
        gguf_reader *r = open_ok(p, GGUF_OPEN_ONE_FILE);
        uint64_t data = 0;
        for (size_t j = 0; j < gguf_reader_n_tensors(r); j++)
            data += (gguf_reader_tensor(r, j)->size + 31) / 32 * 32;
        cr_assert(data <= 2000000 || gguf_reader_n_tensors(r) == 1, "%s: %llu bytes", p,
                  (unsigned long long)data);
        gguf_reader_close(r);
        free(p);
    }
    free(first);
    free(plain);
    free(keep);
}

Test(split_output, pn_synth_split_max_size_writes_a_source_that_reads_as_the_unsplit_model,
     .init = setup, .fini = teardown)
{
    synth("plain.gguf", MODEL, "");
    char *plain = at("plain.gguf");
    gguf_reader *pr = open_ok(plain, 0);
    const int n = (int)size_plan(pr, 4000000, NULL);
    gguf_reader_close(pr);
    cr_assert_geq(n, 3);
    char *out = NULL, *err = NULL;
    int rc = sh(&out, &err, "'%s/pn-synth' %s --split-max-size 4M set.gguf", PN_BIN_DIR, MODEL);
    cr_assert_eq(rc, 0, "%s", err);
    char want[128];
    snprintf(want, sizeof want, "wrote %d splits of set.gguf", n);
    cr_assert(strstr(out, want), "%s", out);
    free(out);
    free(err);
    for (int s = 1; s <= n; s++) {
        char *p = at("set-%05d-of-%05d.gguf", s, n);
        assert_same_model(p, plain);
        gguf_split_keys k = keys_of(p);
        cr_assert(k.no == s - 1 && k.count == n && k.tensors_count == MODEL_TENSORS, "%s", p);
        free(p);
    }
    /* an existing split is not replaced without --force */
    rc = sh(&out, &err, "'%s/pn-synth' %s --split-max-size 4M set.gguf", PN_BIN_DIR, MODEL);
    cr_assert_eq(rc, 1);
    snprintf(want, sizeof want, "set-00001-of-%05d.gguf: output exists", n);
    cr_assert(strstr(err, want), "%s", err);
    free(out);
    free(err);
    free(plain);
}

/* ------------------------------------------------------------------ */
/* An interrupted or refused commit leaves no loadable partial set     */

typedef struct hook {
    volatile sig_atomic_t cancel;
    size_t cancel_at;  /* tensor index; SIZE_MAX: never */
    const char *plant; /* a file to create just before the commit */
    int calls;
} hook;

static void on_progress(const pn_progress *p, void *user)
{
    hook *h = user;
    if (p->phase == PN_PHASE_QUANTIZE && p->tensor_index >= h->cancel_at)
        h->cancel = 1;
}

static pn_status on_result(const pn_quantize_result *r, void *user, pn_error *err)
{
    (void)r;
    (void)err;
    hook *h = user;
    h->calls++;
    if (h->plant)
        cr_assert_eq(tu_write_file(h->plant, "another run", 11), 0);
    return PN_OK;
}

typedef struct dq_stop {
    volatile sig_atomic_t cancel;
} dq_stop;

static void dq_progress(void *ctx, uint64_t done, uint64_t total)
{
    dq_stop *s = ctx;
    if (done >= total / 2)
        s->cancel = 1;
}

static void split_opts(pn_quantize_opts *o, const char *src, const char *dst, hook *h)
{
    pn_quantize_opts_init(o);
    o->src_path = src;
    o->dst_path = dst;
    o->recipe_path = FALLBACK_RECIPE;
    o->promote = 0;
    o->threads = 1;
    o->backend = PN_BACKEND_CPU;
    o->chunk_weights = 4096;
    o->split.mode = GGUF_SPLIT_MAX_TENSORS;
    o->split.max = 20;
    o->progress = on_progress;
    o->result = on_result;
    o->user = h;
    o->cancel = &h->cancel;
    h->cancel_at = SIZE_MAX;
}

Test(split_atomic, an_interrupted_split_write_leaves_no_file_of_the_set, .init = setup,
     .fini = teardown)
{
    synth("src.gguf", MODEL, "");
    char *src = at("src.gguf"), *dst = at("out.gguf");
    char *before = listing(g_dir);
    /* in split 1, split 2 (split 1 closed and validated by then) and split 3 */
    const size_t cancel_at[3] = { 5, 30, 50 };
    for (int k = 0; k < 3; k++) {
        hook h = { 0 };
        pn_quantize_opts o;
        split_opts(&o, src, dst, &h);
        h.cancel_at = cancel_at[k];
        pn_error e;
        pn_error_clear(&e);
        pn_status st = pn_quantize_file(&o, NULL, &e);
        cr_assert_eq(st, PN_ERR_INTERRUPTED, "cancel at tensor %zu: %s", cancel_at[k], e.msg);
        cr_assert_eq(h.calls, 0, "no result before the end");
        char *after = listing(g_dir);
        cr_assert_str_eq(after, before, "cancel at tensor %zu left files", cancel_at[k]);
        free(after);
    }
    /* pn-dequant the same way, halfway through (in its second split) */
    quantize("src.gguf", "pn.gguf", "--promote 0");
    free(before);
    before = listing(g_dir);
    dq_stop stop = { 0 };
    pn_dequant_opts d;
    pn_dequant_opts_init(&d);
    d.split = (gguf_split_limit){ GGUF_SPLIT_MAX_TENSORS, 20 };
    d.cancel = &stop.cancel;
    d.progress = dq_progress;
    d.progress_ctx = &stop;
    char *pn = at("pn.gguf"), *dq = at("dq.gguf");
    pn_error e;
    cr_assert_eq(pn_dequant_file(pn, dq, &d, NULL, &e), PN_ERR_INTERRUPTED, "%s", e.msg);
    cr_assert(stop.cancel, "stopped halfway, not before");
    char *after = listing(g_dir);
    cr_assert_str_eq(after, before);
    free(after);
    free(pn);
    free(dq);
    free(before);
    free(src);
    free(dst);
}

Test(split_atomic, a_split_that_appears_before_the_commit_is_refused_and_no_file_of_the_set_is_left,
     .init = setup, .fini = teardown)
{
    synth("src.gguf", MODEL, "");
    char *src = at("src.gguf"), *dst = at("out.gguf");
    char *p1 = at("out-00001-of-00003.gguf"), *p2 = at("out-00002-of-00003.gguf"),
         *p3 = at("out-00003-of-00003.gguf");
    hook h = { 0 };
    pn_quantize_opts o;
    split_opts(&o, src, dst, &h);
    h.plant = p2;
    pn_error e;
    pn_error_clear(&e);
    pn_status st = pn_quantize_file(&o, NULL, &e);
    cr_assert_eq(st, PN_ERR_EXISTS, "%s", e.msg);
    cr_assert(strstr(e.msg, "out-00002-of-00003.gguf"), "%s", e.msg);
    cr_assert(!exists(p1), "no first split: the set is not loadable");
    cr_assert(!exists(p3), "the split put in place before is taken back");
    size_t n;
    char *planted = tu_read_file(p2, &n);
    cr_assert(n == 11 && memcmp(planted, "another run", 11) == 0, "the other file is untouched");
    free(planted);
    char *cnt = NULL;
    sh(&cnt, NULL, "ls -A | wc -l");
    cr_assert_eq(atoi(cnt), 2, "only src.gguf and the planted file");
    free(cnt);
    free(src);
    free(dst);
    free(p1);
    free(p2);
    free(p3);
}

/* ------------------------------------------------------------------ */
/* Broken sets: every tool refuses them, naming the file               */

/* PN sets of MODEL: "p" (20, 20, 16), "q" (24, 24, 8) and of OTHER_MODEL
 * "o" (10, 10, 8), all three of 3 splits. */
static void make_pn_sets(void)
{
    synth("src.gguf", MODEL, "");
    synth("other.gguf", OTHER_MODEL, "");
    quantize("src.gguf", "p.gguf", "--split-max-tensors 20");
    quantize("src.gguf", "q.gguf", "--split-max-tensors 24");
    quantize("other.gguf", "o.gguf", "--split-max-tensors 10");
}

typedef struct broken {
    const char *what;
    char *dir;              /* the case's folder */
    char *given;            /* the file named on the command line */
    char *bad;              /* the file the message must name */
    const char *phrase;     /* what it must say */
    const char *check_code; /* pn-check's finding */
} broken;

enum { N_BROKEN = 4 };

/* Case k in a folder of its own: the good set "p" with one thing wrong. */
static broken make_broken(int k)
{
    broken b = { 0 };
    char name[64];
    snprintf(name, sizeof name, "case%d", k);
    b.dir = at("%s", name);
    cr_assert_eq(mkdir(b.dir, 0755), 0);
    char *p[3], *dst[3];
    for (int s = 0; s < 3; s++) {
        p[s] = at("p-%05d-of-00003.gguf", s + 1);
        char *rel = at("%s/p-%05d-of-00003.gguf", name, s + 1);
        dst[s] = rel;
    }
    b.given = strdup(dst[0]);
    switch (k) {
    case 0:
        b.what = "a missing split";
        copy_file(p[0], dst[0]);
        copy_file(p[1], dst[1]);
        b.bad = strdup(dst[2]);
        b.phrase = "missing: split 3 of 3";
        b.check_code = "SPLIT-MISSING";
        break;
    case 1: {
        b.what = "another model's split";
        char *o2 = at("o-00002-of-00003.gguf");
        copy_file(p[0], dst[0]);
        copy_file(o2, dst[1]);
        copy_file(p[2], dst[2]);
        free(o2);
        b.bad = strdup(dst[1]);
        b.phrase = "this file is not a split of that set";
        b.check_code = "SPLIT-FOREIGN";
        break;
    }
    case 2: {
        /* the same model in 3 splits by another plan: the counts do not add
         * up, but first of all the split's set identity is another run's */
        b.what = "a split of another run";
        char *q3 = at("q-00003-of-00003.gguf");
        copy_file(p[0], dst[0]);
        copy_file(p[1], dst[1]);
        copy_file(q3, dst[2]);
        free(q3);
        b.bad = strdup(dst[2]);
        b.phrase = "this split is from another run than the rest of its set";
        b.check_code = "SPLIT-MIXED";
        break;
    }
    default: {
        b.what = "a split given that is not part of the set it names";
        for (int s = 0; s < 3; s++)
            copy_file(p[s], dst[s]);
        free(b.given);
        b.given = at("%s/x-00002-of-00004.gguf", name);
        copy_file(p[1], b.given);
        b.bad = strdup(b.given);
        b.phrase = "make this file split 2 of 3, but its name does not end in "
                   "'-00002-of-00003.gguf'";
        b.check_code = "SPLIT-KEYS";
        break;
    }
    }
    for (int s = 0; s < 3; s++) {
        free(p[s]);
        free(dst[s]);
    }
    return b;
}

static void broken_free(broken *b)
{
    free(b->dir);
    free(b->given);
    free(b->bad);
}

/* The tool's command on b (IN, OUT in b's folder) refuses it with exit 1,
 * a message naming the bad file, saying what is wrong, and nothing left. */
static void assert_refused(const broken *b, const char *tool, const char *args)
{
    char *before = listing(b->dir);
    char *out = NULL, *err = NULL;
    int rc =
        sh(&out, &err, "'%s/%s' %s '%s' '%s/out.gguf'", PN_BIN_DIR, tool, args, b->given, b->dir);
    cr_assert_eq(rc, 1, "%s on %s: exit %d\n%s%s", tool, b->what, rc, out, err);
    cr_assert(strstr(err, b->bad), "%s on %s: the message does not name %s:\n%s", tool, b->what,
              b->bad, err);
    cr_assert(strstr(err, b->phrase), "%s on %s: no '%s' in:\n%s", tool, b->what, b->phrase, err);
    char *after = listing(b->dir);
    cr_assert_str_eq(after, before, "%s on %s left files", tool, b->what);
    free(before);
    free(after);
    free(out);
    free(err);
}

Test(split_refusal, pn_quantize_refuses_each_broken_source_set_naming_the_file_and_writes_nothing,
     .init = setup, .fini = teardown, .timeout = 120)
{
    synth("src.gguf", MODEL, "");
    synth("other.gguf", OTHER_MODEL, "");
    /* float sets cut like the PN ones of make_broken */
    synth("p.gguf", MODEL, "--split-max-tensors 20");
    synth("q.gguf", MODEL, "--split-max-tensors 24");
    synth("o.gguf", OTHER_MODEL, "--split-max-tensors 10");
    for (int k = 0; k < N_BROKEN; k++) {
        broken b = make_broken(k);
        assert_refused(&b, "pn-quantize", QUANT);
        assert_refused(&b, "pn-quantize", QUANT " --split-max-tensors 10");
        assert_refused(&b, "pn-quantize", QUANT " --keep-split --dry-run");
        broken_free(&b);
    }
}

Test(split_refusal, pn_dequant_refuses_each_broken_pn_set_naming_the_file_and_writes_nothing,
     .init = setup, .fini = teardown, .timeout = 120)
{
    make_pn_sets();
    for (int k = 0; k < N_BROKEN; k++) {
        broken b = make_broken(k);
        assert_refused(&b, "pn-dequant", "--threads 1");
        assert_refused(&b, "pn-dequant", "--threads 1 --keep-split");
        broken_free(&b);
    }
}

Test(split_refusal, pn_check_judges_each_broken_set_invalid_with_a_finding_naming_the_file,
     .init = setup, .fini = teardown, .timeout = 120)
{
    make_pn_sets();
    for (int k = 0; k < N_BROKEN; k++) {
        broken b = make_broken(k);
        char *before = listing(b.dir);
        char *out = NULL, *err = NULL;
        int rc = sh(&out, &err, "'%s/pn-check' --threads 1 '%s'", PN_BIN_DIR, b.given);
        cr_assert_eq(rc, 1, "%s: exit %d\n%s%s", b.what, rc, out, err);
        char line[4096];
        if (strcmp(b.check_code, "SPLIT-SET") == 0)
            snprintf(line, sizeof line, "error   %s", b.check_code);
        else
            snprintf(line, sizeof line, "error   %s file %s:", b.check_code, b.bad);
        cr_assert(strstr(out, line), "%s: no '%s' in:\n%s", b.what, line, out);
        cr_assert(strstr(out, b.phrase) && strstr(out, b.bad), "%s:\n%s", b.what, out);
        cr_assert(strstr(out, "\ninvalid ("), "%s:\n%s", b.what, out);
        free(out);
        free(err);
        /* JSON: the finding's file */
        rc = sh(&out, &err, "'%s/pn-check' --json --threads 1 '%s'", PN_BIN_DIR, b.given);
        cr_assert_eq(rc, 1);
        cr_assert(strstr(out, "\"set_opened\": false"), "%s", out);
        if (strcmp(b.check_code, "SPLIT-SET") != 0) {
            snprintf(line, sizeof line, "\"file\": \"%s\"}", b.bad);
            cr_assert(strstr(out, line), "%s: no '%s' in:\n%s", b.what, line, out);
        }
        free(out);
        free(err);
        char *after = listing(b.dir);
        cr_assert_str_eq(after, before);
        free(before);
        free(after);
        broken_free(&b);
    }
}

/* ------------------------------------------------------------------ */
/* pn-check on split sets                                              */

Test(split_check, a_good_split_set_is_valid_from_any_of_its_files, .init = setup, .fini = teardown)
{
    synth("src.gguf", MODEL, "");
    quantize("src.gguf", "p.gguf", "--split-max-tensors 20");
    for (int s = 1; s <= 3; s++) {
        char *out = NULL, *err = NULL;
        int rc = sh(&out, &err,
                    "'%s/pn-check' --threads 1 --recipe '" FALLBACK_RECIPE
                    "' --source src.gguf p-%05d-of-00003.gguf",
                    PN_BIN_DIR, s);
        cr_assert_eq(rc, 0, "split %d:\n%s%s", s, out, err);
        cr_assert(strstr(out, "a split set of 3 files, 56 tensors"), "%s", out);
        cr_assert(strstr(out, "  split 2/3 p-00002-of-00003.gguf: 20 tensors"), "%s", out);
        cr_assert(strstr(out, "\nvalid (0 errors, 0 warnings)"), "%s", out);
        free(out);
        free(err);
    }
}

Test(split_check, a_set_with_one_split_damaged_is_invalid_naming_that_file, .init = setup,
     .fini = teardown)
{
    synth("src.gguf", MODEL, "");
    quantize("src.gguf", "p.gguf", "--split-max-tensors 20");
    char *p2 = at("p-00002-of-00003.gguf"), *p3 = at("p-00003-of-00003.gguf");
    /* a byte of split 2's last tensor flipped */
    gguf_reader *r = open_ok(p2, GGUF_OPEN_ONE_FILE);
    const size_t last = gguf_reader_n_tensors(r) - 1;
    const uint64_t at_byte = gguf_reader_tensor_file_offset(r, last);
    char name[256];
    snprintf(name, sizeof name, "%s", gguf_reader_tensor(r, last)->name);
    gguf_reader_close(r);
    size_t n;
    uint8_t *b = tu_read_file(p2, &n);
    b[at_byte] ^= 0x40;
    cr_assert_eq(tu_write_file(p2, b, n), 0);
    free(b);
    char *out = NULL, *err = NULL;
    int rc = sh(&out, &err, "'%s/pn-check' --threads 1 p-00001-of-00003.gguf", PN_BIN_DIR);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    char line[1024];
    snprintf(line, sizeof line,
             "error   PN-CRC-MISMATCH file p-00002-of-00003.gguf tensor %s "
             "key pn.tensor_crc32 byte %llu: ",
             name, (unsigned long long)at_byte);
    cr_assert(strstr(out, line), "no '%s' in:\n%s", line, out);
    cr_assert(strstr(out, "\ninvalid (1 error, 0 warnings)"), "only that finding:\n%s", out);
    free(out);
    free(err);
    /* split 3 cut short inside its data: every tensor past its end named, in that file */
    struct stat sb;
    cr_assert_eq(stat(p3, &sb), 0);
    cr_assert_eq(truncate(p3, sb.st_size - 100000), 0);
    rc = sh(&out, &err, "'%s/pn-check' --json --threads 1 p-00002-of-00003.gguf", PN_BIN_DIR);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(strstr(out, "\"code\": \"GGUF-TENSOR-PAST-EOF\""), "%s", out);
    const char *f = strstr(out, "\"code\": \"GGUF-TENSOR-PAST-EOF\"");
    const char *eol = strchr(f, '\n');
    cr_assert(eol && memmem(f, (size_t)(eol - f), "\"file\": \"p-00003-of-00003.gguf\"",
                            strlen("\"file\": \"p-00003-of-00003.gguf\"")),
              "%s", out);
    cr_assert(strstr(out, "\"file\": \"p-00002-of-00003.gguf\"}"), "the CRC finding too");
    free(out);
    free(err);
    free(p2);
    free(p3);
}

/* ------------------------------------------------------------------ */
/* Reuse with split files                                              */

static size_t count_in(const char *path, const char *needle)
{
    size_t n = 0, len = 0;
    char *text = tu_read_file(path, &len); /* NUL-terminated */
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    free(text);
    return n;
}

Test(split_reuse, a_split_prev_named_by_any_file_is_copied_from_into_a_split_output_byte_for_byte,
     .init = setup, .fini = teardown)
{
    synth("set.gguf", MODEL, "--split-max-tensors 20");
    /* the measurement once, so that the runs differ only in the mix */
    SH_OK("'%s/pn-quantize' " QUANT " --dry-run --measurement m.txt set-00001-of-00003.gguf "
          "> /dev/null",
          PN_BIN_DIR);
    quantize("set-00001-of-00003.gguf", "prev.gguf",
             "--measurement m.txt --promote 1 --split-max-tensors 20");
    quantize("set-00001-of-00003.gguf", "scratch.gguf",
             "--measurement m.txt --promote 3 --split-max-tensors 20");
    quantize("set-00002-of-00003.gguf", "reused.gguf",
             "--measurement m.txt --promote 3 --split-max-tensors 20 --report r.json "
             "--reuse prev-00003-of-00003.gguf");
    char *rep = at("r.json");
    size_t copied = count_in(rep, "\"reused\": true"), redone = count_in(rep, "\"reused\": false");
    cr_assert(copied > 0 && redone > 0 && copied + redone == MODEL_TENSORS,
              "copied %zu, quantized %zu", copied, redone);
    for (int s = 1; s <= 3; s++) {
        char *a = at("reused-%05d-of-00003.gguf", s), *b = at("scratch-%05d-of-00003.gguf", s);
        assert_same_file(a, b);
        free(a);
        free(b);
    }
    /* and the split output records the identity pn-check compares with the
     * source, split or not */
    char *out = NULL, *err = NULL;
    int rc = sh(&out, &err,
                "'%s/pn-check' --threads 1 --source set-00003-of-00003.gguf "
                "reused-00001-of-00003.gguf",
                PN_BIN_DIR);
    cr_assert_eq(rc, 0, "%s%s", out, err);
    cr_assert(strstr(out, "valid (0 errors"), "%s", out);
    free(out);
    free(err);
    free(rep);
}

/* ------------------------------------------------------------------ */
/* The identity of a set: splits of two runs do not make a set          */

/* The scenario that passed pn-check before: a run writes its 5 splits; a
 * second run with --promote 5 and --force writes the same DST one split per
 * task, and the task of the third split fails. The folder then holds 4 new
 * splits and 1 old one, each valid alone, with the same split keys. */
Test(split_identity, a_set_of_two_runs_is_refused_by_every_reader_naming_the_old_split,
     .init = setup, .fini = teardown, .timeout = 180)
{
    synth("src.gguf", MODEL, "");
    const char *plan = "--measurement m.txt --split-max-tensors 12";
    quantize("src.gguf", "m.gguf", plan); /* the recipe's promotions */
    char *name[5], *old[5], *ref[5];
    for (int s = 0; s < 5; s++) {
        name[s] = at("m-%05d-of-00005.gguf", s + 1);
        old[s] = at("old-%d.bin", s + 1);
        ref[s] = at("ref/m-%05d-of-00005.gguf", s + 1);
        cr_assert(exists(name[s]), "run 1 wrote split %d of 5", s + 1);
        copy_file(name[s], old[s]);
    }
    for (int i = 0; i < 5; i++) {
        if (i == 2)
            continue; /* the task that failed */
        char extra[256];
        snprintf(extra, sizeof extra, "%s --promote 5 --force --split-index %d", plan, i);
        quantize("src.gguf", "m.gguf", extra);
    }
    /* what the second run's set is: one run of it, elsewhere */
    SH_OK("mkdir ref");
    char extra[256];
    snprintf(extra, sizeof extra, "%s --promote 5", plan);
    quantize("src.gguf", "ref/m.gguf", extra);
    for (int s = 0; s < 5; s++)
        assert_same_file(name[s], s == 2 ? old[s] : ref[s]);
    size_t na, nb;
    uint8_t *x = tu_read_file(name[2], &na), *y = tu_read_file(ref[2], &nb);
    cr_assert(na != nb || memcmp(x, y, na) != 0, "the runs wrote different third splits");
    free(x);
    free(y);

    /* pn-check: invalid, the finding names the old split */
    char *out = NULL, *err = NULL;
    int rc = sh(&out, &err, "'%s/pn-check' --threads 1 m-00001-of-00005.gguf", PN_BIN_DIR);
    cr_assert_eq(rc, 1, "exit %d\n%s%s", rc, out, err);
    cr_assert(strstr(out, "error   SPLIT-MIXED file m-00003-of-00005.gguf:"), "%s", out);
    cr_assert(strstr(out, "4 of the 5 splits have"), "%s", out);
    cr_assert(strstr(out, "\ninvalid (1 error"), "%s", out);
    free(out);
    free(err);
    /* named from the old split itself, the verdict is the same */
    rc = sh(&out, &err, "'%s/pn-check' --threads 1 m-00003-of-00005.gguf", PN_BIN_DIR);
    cr_assert_eq(rc, 1, "exit %d\n%s%s", rc, out, err);
    cr_assert(strstr(out, "error   SPLIT-MIXED file m-00003-of-00005.gguf:"), "%s", out);
    free(out);
    free(err);
    /* pn-dequant, --reuse and pn-quantize's split reading refuse it, naming
     * that file, and write nothing */
    const char *cmds[] = {
        "'%s/pn-dequant' --threads 1 m-00002-of-00005.gguf out.gguf",
        "'%s/pn-quantize' " QUANT " --reuse m-00001-of-00005.gguf src.gguf out.gguf",
        "'%s/pn-quantize' " QUANT " m-00005-of-00005.gguf out.gguf",
    };
    for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, cmds[k], PN_BIN_DIR);
        rc = sh(&out, &err, "%s", cmd);
        cr_assert_eq(rc, 1, "%s: exit %d\n%s%s", cmd, rc, out, err);
        cr_assert(strstr(err, "m-00003-of-00005.gguf: this split is from another run than the "
                              "rest of its set"),
                  "%s:\n%s", cmd, err);
        cr_assert(!exists(at("out.gguf")), "%s wrote out.gguf", cmd);
        free(out);
        free(err);
    }
    /* the failed task run again makes the set whole: the second run's */
    snprintf(extra, sizeof extra, "%s --promote 5 --force --split-index 2", plan);
    quantize("src.gguf", "m.gguf", extra);
    for (int s = 0; s < 5; s++)
        assert_same_file(name[s], ref[s]);
    rc = sh(&out, &err, "'%s/pn-check' --threads 1 m-00001-of-00005.gguf", PN_BIN_DIR);
    cr_assert_eq(rc, 0, "exit %d\n%s%s", rc, out, err);
    free(out);
    free(err);
    for (int s = 0; s < 5; s++) {
        free(name[s]);
        free(old[s]);
        free(ref[s]);
    }
}

/* ------------------------------------------------------------------ */
/* --measurement FILE: written when it is not there, so checked like an  */
/* output                                                               */

Test(measurement_path, may_not_be_an_input_the_output_or_a_file_of_the_output_set, .init = setup,
     .fini = teardown, .timeout = 120)
{
    synth("src.gguf", MODEL, "");
    quantize("src.gguf", "prev.gguf", "");
    SH_OK("mkdir sub");
    struct {
        const char *args;  /* the options, SRC and DST */
        const char *named; /* the measurement path the message quotes */
        const char *what;
    } cases[] = {
        { "--measurement out.gguf src.gguf out.gguf", "out.gguf", "the output (DST)" },
        { "--measurement sub/../out.gguf src.gguf ./out.gguf", "sub/../out.gguf",
          "the output (DST)" },
        { "--measurement out.gguf --dry-run src.gguf out.gguf", "out.gguf", "the output (DST)" },
        { "--measurement src.gguf src.gguf out.gguf", "src.gguf", "the source" },
        { "--measurement set-00002-of-00003.gguf --split-max-tensors 20 src.gguf set.gguf",
          "set-00002-of-00003.gguf", "a file of the output set" },
        { "--measurement sub/../set-00007-of-00009.gguf --split-max-tensors 20 src.gguf set",
          "sub/../set-00007-of-00009.gguf", "a file of the output set" },
        { "--measurement prev.gguf --reuse prev.gguf src.gguf out.gguf", "prev.gguf",
          "the --reuse file" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char *before = listing(g_dir);
        char *out = NULL, *err = NULL;
        int rc = sh(&out, &err, "'%s/pn-quantize' " QUANT " %s", PN_BIN_DIR, cases[k].args);
        cr_assert_eq(rc, 2, "%s: exit %d\n%s%s", cases[k].args, rc, out, err);
        char want[512];
        snprintf(want, sizeof want, "--measurement %s: that is %s; choose another measurement path",
                 cases[k].named, cases[k].what);
        cr_assert(strstr(err, want), "%s: no '%s' in:\n%s", cases[k].args, want, err);
        char *after = listing(g_dir);
        cr_assert_str_eq(after, before, "%s wrote a file", cases[k].args);
        free(before);
        free(after);
        free(out);
        free(err);
    }
    /* a path of its own is fine, and a split name of another output too */
    quantize("src.gguf", "set.gguf",
             "--measurement other-00001-of-00002.gguf "
             "--split-max-tensors 20");
    cr_assert(exists(at("other-00001-of-00002.gguf")), "the measurement was saved");
    cr_assert(exists(at("set-00003-of-00003.gguf")), "and the set written");
}
