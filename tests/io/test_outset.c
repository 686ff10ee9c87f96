/* Pins what io/outset.h's page-cache options may not change: a set written
 * with its writeback started early and its older data dropped from the page
 * cache (pn_outset_opts.drop_behind_bytes, as pn-quantize writes) holds
 * every byte that was written, the same file as one written with neither,
 * whether the tensors come in small pieces or large ones, and it reads back
 * as written. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "io/outset.h"
#include "quant/types.h"
#include "fixtures/scratch.h"
#include "test_util.h"

/* Three f32 tensors of 2.8 MB, 1.2 MB and 4 bytes less than 2 MB. */
static const int64_t g_ne[3][2] = { { 1000, 700 }, { 3000, 100 }, { 524287, 1 } };
#define N_TENSORS 3

static gguf_writer *model(void)
{
    gguf_writer *w = gguf_writer_new();
    cr_assert_not_null(w);
    cr_assert_eq(gguf_writer_set_str(w, "general.architecture", "test"), PN_OK);
    pn_error err;
    char name[32];
    for (int i = 0; i < N_TENSORS; i++) {
        snprintf(name, sizeof name, "t%d.weight", i);
        cr_assert_eq(gguf_writer_add_tensor(w, name, 2, g_ne[i], PN_TYPE_F32, &err), PN_OK, "%s",
                     err.msg);
    }
    return w;
}

static size_t tensor_bytes(int i)
{
    return (size_t)(g_ne[i][0] * g_ne[i][1]) * 4;
}

/* The bytes of tensor i: the same for every file. */
static uint8_t *pattern(int i)
{
    const size_t n = tensor_bytes(i);
    uint8_t *p = malloc(n);
    tu_rng rng = { 100 + (uint64_t)i };
    for (size_t k = 0; k < n; k++)
        p[k] = (uint8_t)tu_rng_u64(&rng);
    return p;
}

/* Writes the model to path in pieces of `piece` bytes, with the writeback
 * and drop-behind distances given (0: off). */
static void write_set(const gguf_writer *w, const char *path, size_t piece, uint64_t writeback,
                      uint64_t drop_behind)
{
    pn_outset_opts oo;
    pn_outset_opts_init(&oo);
    oo.writeback_bytes = writeback;
    oo.drop_behind_bytes = drop_behind;
    pn_outset *os = NULL;
    pn_error err;
    cr_assert_eq(pn_outset_make(w, path, &oo, &os, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(pn_outset_check_targets(os, NULL, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(pn_outset_begin(os, &err), PN_OK, "%s", err.msg);
    for (int i = 0; i < N_TENSORS; i++) {
        uint8_t *p = pattern(i);
        const size_t n = tensor_bytes(i);
        for (size_t at = 0; at < n; at += piece) {
            size_t k = n - at < piece ? n - at : piece;
            cr_assert_eq(pn_outset_write(os, (size_t)i, p + at, k, &err), PN_OK, "%s", err.msg);
        }
        free(p);
    }
    cr_assert_eq(pn_outset_close(os, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(pn_outset_commit(os, &err), PN_OK, "%s", err.msg);
    pn_outset_free(os);
}

static void assert_reads_back(const char *path)
{
    gguf_reader *r;
    pn_error err;
    cr_assert_eq(gguf_reader_open(path, &r, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_reader_n_tensors(r), N_TENSORS);
    for (int i = 0; i < N_TENSORS; i++) {
        const size_t n = tensor_bytes(i);
        uint8_t *want = pattern(i), *got = malloc(n);
        cr_assert_eq(gguf_reader_read_tensor(r, (size_t)i, 0, got, n, &err), PN_OK, "%s", err.msg);
        cr_assert(memcmp(got, want, n) == 0, "%s: tensor %d differs from what was written", path,
                  i);
        free(want);
        free(got);
    }
    gguf_reader_close(r);
}

Test(outset, data_dropped_from_the_page_cache_behind_the_writer_is_all_in_the_file, .init = setup,
     .fini = teardown)
{
    gguf_writer *w = model();
    char *plain = path_in("plain.gguf");
    write_set(w, plain, 1 << 20, 0, 0);
    assert_reads_back(plain);
    size_t plain_n;
    uint8_t *plain_bytes = tu_read_file(plain, &plain_n);
    /* pieces smaller and larger than both distances, distances that do
     * and do not divide the data */
    const size_t pieces[] = { 4096, 100000, 3 << 20 };
    const uint64_t drops[][2] = { { 65536, 262144 }, { 100000, 300001 }, { 1 << 20, 1 << 20 } };
    for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++)
        for (size_t d = 0; d < sizeof drops / sizeof drops[0]; d++) {
            char name[64];
            snprintf(name, sizeof name, "drop-%zu-%zu.gguf", p, d);
            char *path = path_in(name);
            write_set(w, path, pieces[p], drops[d][0], drops[d][1]);
            size_t n;
            uint8_t *bytes = tu_read_file(path, &n);
            cr_assert(n == plain_n && memcmp(bytes, plain_bytes, n) == 0,
                      "pieces of %zu bytes, writeback every %llu, dropped %llu behind: the file "
                      "differs from the one written without",
                      pieces[p], (unsigned long long)drops[d][0], (unsigned long long)drops[d][1]);
            assert_reads_back(path);
            free(bytes);
            free(path);
        }
    free(plain_bytes);
    free(plain);
    gguf_writer_free(w);
}
