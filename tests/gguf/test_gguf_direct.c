/* Pins the direct reads of gguf/gguf.h (gguf_direct_*): every range of every
 * tensor gives pread's bytes, whether the range is aligned or not, read in
 * order (from the window of an earlier read) or anywhere; a file that shrank
 * is the reader's own PN_ERR_TRUNCATED message; bad ranges are refused with
 * its messages; a memory reader falls back to copying; data written and not
 * yet flushed is read. The reads into a caller's buffer
 * (gguf_direct_read_tensor_into) give the same bytes in one part or in
 * several, one after the other or from threads at once. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "fixtures/pn_source.h"
#include "fixtures/scratch.h"
#include "test_util.h"

/* Tensor sizes that are not multiples of 4096 (f16 rows of 1000 bytes, a
 * bf16 vector of 6 bytes, ...), so tensors start anywhere in a block. */
static const sf_spec g_specs[] = {
    { "a.weight", 2, 500, 37, PN_TYPE_F16 },  /* 37000 bytes */
    { "b.weight", 1, 3, 1, PN_TYPE_BF16 },    /* 6 */
    { "c.weight", 2, 1000, 9, PN_TYPE_F32 },  /* 36000 */
    { "d.weight", 2, 4096, 5, PN_TYPE_BF16 }, /* 40960 */
    { "e.weight", 1, 77, 1, PN_TYPE_F32 },    /* 308, the last: the file ends unaligned */
};
#define N_SPECS (sizeof g_specs / sizeof g_specs[0])

static void open_both(const char *path, gguf_reader **r, gguf_direct **d, size_t max_bytes)
{
    pn_error err;
    cr_assert_eq(gguf_reader_open(path, r, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_direct_open(*r, max_bytes, d, &err), PN_OK, "%s", err.msg);
    if (!gguf_direct_is_direct(*d))
        cr_log_info("%s: this file system refuses O_DIRECT: the reads below are the "
                    "fallback's",
                    path);
}

/* Tensor i's bytes [off, off + n) through both, compared. */
static void same_bytes(const gguf_reader *r, gguf_direct *d, size_t i, uint64_t off, size_t n)
{
    uint8_t *want = malloc(n + 1);
    pn_error err;
    cr_assert_eq(gguf_reader_read_tensor(r, i, off, want, n, &err), PN_OK, "%s", err.msg);
    const uint8_t *got = NULL;
    cr_assert_eq(gguf_direct_read_tensor(d, i, off, n, &got, &err), PN_OK, "%s", err.msg);
    cr_assert(n == 0 || memcmp(got, want, n) == 0,
              "tensor %zu, bytes [%llu, %llu): the direct read differs", i, (unsigned long long)off,
              (unsigned long long)(off + n));
    free(want);
}

Test(gguf_direct, every_range_read_in_order_or_anywhere_gives_preads_bytes, .init = setup,
     .fini = teardown)
{
    char *path = tu_join(g_dir, "m.gguf");
    sf_write_model(path, g_specs, N_SPECS, 5);
    gguf_reader *r;
    gguf_direct *d;
    const size_t max_bytes = 10000;
    open_both(path, &r, &d, max_bytes);
    cr_assert_eq(gguf_reader_n_tensors(r), N_SPECS);
    /* in order, in pieces of several sizes (window hits and misses) */
    const size_t pieces[] = { 1, 6, 333, 4096, 4097, max_bytes };
    for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++)
        for (size_t i = 0; i < N_SPECS; i++) {
            const uint64_t size = gguf_reader_tensor(r, i)->size;
            for (uint64_t off = 0; off < size; off += pieces[p]) {
                size_t n = size - off < pieces[p] ? (size_t)(size - off) : pieces[p];
                same_bytes(r, d, i, off, n);
            }
        }
    /* anywhere: random tensors, offsets and lengths, backwards too */
    tu_rng rng = { 11 };
    for (int k = 0; k < 3000; k++) {
        size_t i = (size_t)(tu_rng_u64(&rng) % N_SPECS);
        const uint64_t size = gguf_reader_tensor(r, i)->size;
        uint64_t off = tu_rng_u64(&rng) % (size + 1);
        uint64_t left = size - off;
        size_t n = (size_t)(tu_rng_u64(&rng) % ((left < max_bytes ? left : max_bytes) + 1));
        same_bytes(r, d, i, off, n);
    }
    /* the last bytes of the file, whose block ends past its end */
    const size_t last = N_SPECS - 1;
    same_bytes(r, d, last, gguf_reader_tensor(r, last)->size - 1, 1);
    same_bytes(r, d, last, 0, (size_t)gguf_reader_tensor(r, last)->size);
    gguf_direct_close(d);
    gguf_reader_close(r);
    free(path);
}

Test(gguf_direct, a_file_that_shrank_is_the_readers_truncated_error_naming_it, .init = setup,
     .fini = teardown)
{
    char *path = tu_join(g_dir, "m.gguf");
    sf_write_model(path, g_specs, N_SPECS, 6);
    gguf_reader *r;
    gguf_direct *d;
    open_both(path, &r, &d, 1 << 16);
    const size_t i = 3; /* d.weight */
    const uint64_t at = gguf_reader_tensor_file_offset(r, i);
    cr_assert_eq(truncate(path, (off_t)(at + 1000)), 0);
    pn_error want, got;
    uint8_t *buf = malloc(8192);
    cr_assert_eq(gguf_reader_read_tensor(r, i, 500, buf, 8000, &want), PN_ERR_TRUNCATED);
    const uint8_t *data = NULL;
    cr_assert_eq(gguf_direct_read_tensor(d, i, 500, 8000, &data, &got), PN_ERR_TRUNCATED, "%s",
                 got.msg);
    cr_assert_str_eq(got.msg, want.msg);
    cr_assert(strstr(got.msg, path) && strstr(got.msg, "changed or shrank") &&
                  strstr(got.msg, "d.weight"),
              "%s", got.msg);
    /* what is still in the file is still read */
    same_bytes(r, d, i, 0, 1000);
    free(buf);
    gguf_direct_close(d);
    gguf_reader_close(r);
    free(path);
}

Test(gguf_direct, a_range_outside_the_tensor_or_longer_than_the_buffer_is_refused, .init = setup,
     .fini = teardown)
{
    char *path = tu_join(g_dir, "m.gguf");
    sf_write_model(path, g_specs, N_SPECS, 7);
    gguf_reader *r;
    gguf_direct *d;
    open_both(path, &r, &d, 4000);
    pn_error want, got;
    uint8_t buf[16];
    const uint8_t *data = NULL;
    /* b.weight has 6 bytes */
    cr_assert_eq(gguf_reader_read_tensor(r, 1, 2, buf, 5, &want), PN_ERR_USAGE);
    cr_assert_eq(gguf_direct_read_tensor(d, 1, 2, 5, &data, &got), PN_ERR_USAGE);
    cr_assert_str_eq(got.msg, want.msg);
    cr_assert_eq(gguf_reader_read_tensor(r, 99, 0, buf, 1, &want), PN_ERR_USAGE);
    cr_assert_eq(gguf_direct_read_tensor(d, 99, 0, 1, &data, &got), PN_ERR_USAGE);
    cr_assert_str_eq(got.msg, want.msg);
    cr_assert_eq(gguf_direct_read_tensor(d, 0, 0, 4001, &data, &got), PN_ERR_USAGE);
    cr_assert(strstr(got.msg, path) && strstr(got.msg, "4001"), "%s", got.msg);
    gguf_direct_close(d);
    gguf_reader_close(r);
    free(path);
}

Test(gguf_direct, a_memory_reader_is_read_by_copying)
{
    /* a GGUF in memory: the header of a file written by the fixture */
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "m.gguf");
    sf_write_model(path, g_specs, N_SPECS, 8);
    size_t size;
    void *bytes = tu_read_file(path, &size);
    gguf_reader *r;
    gguf_direct *d;
    pn_error err;
    cr_assert_eq(gguf_reader_open_memory(bytes, size, "mem", &r, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_direct_open(r, 50000, &d, &err), PN_OK, "%s", err.msg);
    cr_assert(!gguf_direct_is_direct(d), "a memory reader has no file to read directly");
    for (size_t i = 0; i < N_SPECS; i++)
        same_bytes(r, d, i, 0, (size_t)gguf_reader_tensor(r, i)->size);
    gguf_direct_close(d);
    gguf_reader_close(r);
    free(bytes);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(gguf_direct, bytes_written_and_not_yet_flushed_are_read, .init = setup, .fini = teardown)
{
    char *path = tu_join(g_dir, "m.gguf");
    sf_write_model(path, g_specs, N_SPECS, 9);
    gguf_reader *r;
    gguf_direct *d;
    open_both(path, &r, &d, 1 << 16);
    same_bytes(r, d, 3, 0, 40960);
    /* overwrite d.weight's bytes in place (no fsync): the direct read sees them */
    const uint64_t at = gguf_reader_tensor_file_offset(r, 3);
    uint8_t *pat = malloc(40960);
    for (int k = 0; k < 40960; k++)
        pat[k] = (uint8_t)(k * 7 + 3);
    int fd = open(path, O_WRONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(pwrite(fd, pat, 40960, (off_t)at), 40960);
    close(fd);
    gguf_direct *d2;
    pn_error err;
    cr_assert_eq(gguf_direct_open(r, 1 << 16, &d2, &err), PN_OK);
    const uint8_t *data = NULL;
    cr_assert_eq(gguf_direct_read_tensor(d2, 3, 0, 40960, &data, &err), PN_OK, "%s", err.msg);
    cr_assert(memcmp(data, pat, 40960) == 0, "the direct read missed unflushed data");
    free(pat);
    gguf_direct_close(d2);
    gguf_direct_close(d);
    gguf_reader_close(r);
    free(path);
}

Test(gguf_direct, where_the_file_system_takes_o_direct_the_reads_use_it, .init = setup,
     .fini = teardown)
{
    char *path = tu_join(g_dir, "m.gguf");
    sf_write_model(path, g_specs, N_SPECS, 10);
    /* does this file system take an aligned O_DIRECT read? asked here directly */
    bool takes = false;
    int fd = open(path, O_RDONLY | O_DIRECT);
    if (fd >= 0) {
        void *buf = NULL;
        cr_assert_eq(posix_memalign(&buf, 4096, 4096), 0);
        takes = pread(fd, buf, 4096, 0) > 0;
        free(buf);
        close(fd);
    }
    gguf_reader *r;
    gguf_direct *d;
    pn_error err;
    cr_assert_eq(gguf_reader_open(path, &r, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_direct_open(r, 1 << 16, &d, &err), PN_OK);
    const uint8_t *data = NULL;
    cr_assert_eq(gguf_direct_read_tensor(d, 0, 0, 1000, &data, &err), PN_OK);
    cr_assert_eq(gguf_direct_is_direct(d), takes, "O_DIRECT %s by %s, but the handle %s it",
                 takes ? "is taken" : "is refused", g_dir, takes ? "does not use" : "uses");
    cr_log_info("%s: direct reads %s", g_dir, takes ? "used" : "refused (pread instead)");
    gguf_direct_close(d);
    gguf_reader_close(r);
    free(path);
}

/* ---- reads into the caller's buffer ------------------------------------ */

/* A model written with `seed`, its reader and n handles (n <= 3) of
 * max_bytes, for the reads into a buffer. */
typedef struct handles {
    char *path;
    gguf_reader *r;
    gguf_direct *d[3];
    int n;
} handles;

static void handles_open(handles *h, uint64_t seed, size_t max_bytes, int n)
{
    h->path = tu_join(g_dir, "m.gguf");
    sf_write_model(h->path, g_specs, N_SPECS, seed);
    h->n = n;
    open_both(h->path, &h->r, &h->d[0], max_bytes);
    pn_error err;
    for (int p = 1; p < n; p++)
        cr_assert_eq(gguf_direct_open(h->r, max_bytes, &h->d[p], &err), PN_OK, "%s", err.msg);
}

static void handles_close(handles *h)
{
    for (int p = 0; p < h->n; p++)
        gguf_direct_close(h->d[p]);
    gguf_reader_close(h->r);
    free(h->path);
}

/* A buffer aligned as direct reads want it, every byte `fill`. */
static uint8_t *aligned_buffer(size_t cap, uint8_t fill)
{
    void *buf = NULL;
    cr_assert_eq(posix_memalign(&buf, 4096, cap), 0);
    memset(buf, fill, cap);
    return buf;
}

/* Tensor i's bytes [off, off + n) read into an aligned buffer in n_parts
 * parts, one handle each (one after the other), compared with pread's; the
 * buffer is filled with a pattern first, so a piece no part read shows. */
static void same_bytes_into(const gguf_reader *r, gguf_direct **d, int n_parts, size_t i,
                            uint64_t off, size_t n)
{
    uint8_t *want = malloc(n + 1);
    pn_error err;
    cr_assert_eq(gguf_reader_read_tensor(r, i, off, want, n, &err), PN_OK, "%s", err.msg);
    const size_t cap = gguf_direct_into_cap(n);
    uint8_t *buf = aligned_buffer(cap, 0xA5);
    const uint8_t *first = NULL;
    for (int p = 0; p < n_parts; p++) {
        const uint8_t *data = NULL;
        cr_assert_eq(
            gguf_direct_read_tensor_into(d[p], i, off, n, buf, cap, p, n_parts, &data, &err), PN_OK,
            "tensor %zu, part %d of %d: %s", i, p, n_parts, err.msg);
        cr_assert(data >= buf && data < buf + 4096 && data + n <= buf + cap,
                  "the bytes start %td bytes into the buffer", data - buf);
        if (p == 0)
            first = data;
        cr_assert_eq(data, first, "part %d says the bytes start elsewhere than part 0", p);
    }
    cr_assert(n == 0 || memcmp(first, want, n) == 0,
              "tensor %zu, bytes [%llu, %llu) in %d parts: the read differs", i,
              (unsigned long long)off, (unsigned long long)(off + n), n_parts);
    free(buf);
    free(want);
}

Test(gguf_direct, every_range_read_into_a_buffer_in_any_number_of_parts_gives_preads_bytes,
     .init = setup, .fini = teardown)
{
    /* pieces of at most 5000 bytes (4096 once aligned): a tensor of 40960
     * takes ten of them, dealt to the parts */
    handles h;
    handles_open(&h, 12, 5000, 3);
    const gguf_reader *r = h.r;
    gguf_direct **d = h.d;
    for (int parts = 1; parts <= 3; parts++) {
        /* whole tensors, and in order in pieces of several sizes */
        const size_t pieces[] = { 333, 4095, 4096, 4097, 12288, 1 << 20 };
        for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++)
            for (size_t i = 0; i < N_SPECS; i++) {
                const uint64_t size = gguf_reader_tensor(r, i)->size;
                for (uint64_t off = 0; off < size; off += pieces[p]) {
                    size_t n = size - off < pieces[p] ? (size_t)(size - off) : pieces[p];
                    same_bytes_into(r, d, parts, i, off, n);
                }
            }
        /* anywhere, any length (past max_bytes too) */
        tu_rng rng = { 13 + (uint64_t)parts };
        for (int k = 0; k < 300; k++) {
            size_t i = (size_t)(tu_rng_u64(&rng) % N_SPECS);
            const uint64_t size = gguf_reader_tensor(r, i)->size;
            uint64_t off = tu_rng_u64(&rng) % (size + 1);
            size_t n = (size_t)(tu_rng_u64(&rng) % (size - off + 1));
            same_bytes_into(r, d, parts, i, off, n);
        }
        /* the last bytes of the file, whose block ends past its end */
        const size_t last = N_SPECS - 1;
        same_bytes_into(r, d, parts, last, gguf_reader_tensor(r, last)->size - 1, 1);
        same_bytes_into(r, d, parts, last, 0, (size_t)gguf_reader_tensor(r, last)->size);
    }
    handles_close(&h);
}

typedef struct part_job {
    gguf_direct *d;
    size_t i;
    uint64_t off;
    size_t n, cap;
    uint8_t *buf;
    int part, n_parts;
    pn_status st;
} part_job;

static void *read_part(void *arg)
{
    part_job *j = arg;
    const uint8_t *data = NULL;
    pn_error err;
    j->st = gguf_direct_read_tensor_into(j->d, j->i, j->off, j->n, j->buf, j->cap, j->part,
                                         j->n_parts, &data, &err);
    return NULL;
}

Test(gguf_direct, two_threads_reading_the_parts_of_one_range_at_once_give_preads_bytes,
     .init = setup, .fini = teardown)
{
    handles h;
    handles_open(&h, 14, 4096, 2);
    const gguf_reader *r = h.r;
    gguf_direct **d = h.d;
    pn_error err;
    const size_t i = 3; /* d.weight, 40960 bytes: ten or eleven pieces */
    tu_rng rng = { 15 };
    for (int k = 0; k < 200; k++) {
        uint64_t off = tu_rng_u64(&rng) % 40960;
        size_t n = (size_t)(tu_rng_u64(&rng) % (40960 - off + 1));
        uint8_t *want = malloc(n + 1);
        cr_assert_eq(gguf_reader_read_tensor(r, i, off, want, n, &err), PN_OK, "%s", err.msg);
        const size_t cap = gguf_direct_into_cap(n);
        uint8_t *buf = aligned_buffer(cap, 0x5A);
        part_job jobs[2];
        pthread_t th[2];
        for (int p = 0; p < 2; p++) {
            jobs[p] = (part_job){ d[p], i, off, n, cap, buf, p, 2, PN_ERR_INTERNAL };
            cr_assert_eq(pthread_create(&th[p], NULL, read_part, &jobs[p]), 0);
        }
        for (int p = 0; p < 2; p++) {
            pthread_join(th[p], NULL);
            cr_assert_eq(jobs[p].st, PN_OK, "part %d failed", p);
        }
        const uint64_t at = gguf_reader_tensor_file_offset(r, i) + off;
        cr_assert(n == 0 || memcmp(buf + at % 4096, want, n) == 0,
                  "bytes [%llu, %llu) read by two threads differ", (unsigned long long)off,
                  (unsigned long long)(off + n));
        free(buf);
        free(want);
    }
    handles_close(&h);
}

Test(gguf_direct, a_read_into_a_buffer_of_a_file_that_shrank_is_a_truncated_error_naming_it,
     .init = setup, .fini = teardown)
{
    handles h;
    handles_open(&h, 16, 8192, 2);
    const gguf_reader *r = h.r;
    gguf_direct **d = h.d;
    const char *path = h.path;
    pn_error err;
    const size_t i = 3; /* d.weight */
    const uint64_t at = gguf_reader_tensor_file_offset(r, i);
    cr_assert_eq(truncate(path, (off_t)(at + 1000)), 0);
    const size_t cap = gguf_direct_into_cap(40960);
    uint8_t *buf = aligned_buffer(cap, 0);
    /* in one part, and in two: some part says what is missing */
    for (int parts = 1; parts <= 2; parts++) {
        int failed = 0;
        for (int p = 0; p < parts; p++) {
            const uint8_t *data = NULL;
            pn_status st =
                gguf_direct_read_tensor_into(d[p], i, 0, 40960, buf, cap, p, parts, &data, &err);
            if (st == PN_OK)
                continue;
            failed++;
            cr_assert_eq(st, PN_ERR_TRUNCATED, "%s", err.msg);
            cr_assert(strstr(err.msg, path) && strstr(err.msg, "changed or shrank") &&
                          strstr(err.msg, "d.weight"),
                      "%s", err.msg);
        }
        cr_assert_geq(failed, 1, "a read in %d parts of bytes no longer in the file succeeded",
                      parts);
    }
    /* what is still in the file is still read */
    same_bytes_into(r, d, 2, i, 0, 1000);
    free(buf);
    handles_close(&h);
}

Test(gguf_direct, a_read_into_an_unaligned_or_small_buffer_or_outside_the_tensor_is_refused,
     .init = setup, .fini = teardown)
{
    handles h;
    handles_open(&h, 17, 4096, 1);
    const gguf_reader *r = h.r;
    gguf_direct *d = h.d[0];
    const char *path = h.path;
    const size_t cap = gguf_direct_into_cap(1000);
    uint8_t *buf = aligned_buffer(cap + 4096, 0);
    const uint8_t *data = NULL;
    pn_error want, got;
    cr_assert_eq(gguf_direct_read_tensor_into(d, 0, 0, 1000, buf + 8, cap, 0, 1, &data, &got),
                 PN_ERR_USAGE);
    cr_assert(strstr(got.msg, path) && strstr(got.msg, "aligned"), "%s", got.msg);
    cr_assert_eq(gguf_direct_read_tensor_into(d, 0, 0, 1000, buf, cap - 1, 0, 1, &data, &got),
                 PN_ERR_USAGE);
    cr_assert(strstr(got.msg, "1000 bytes"), "%s", got.msg);
    cr_assert_eq(gguf_direct_read_tensor_into(d, 0, 0, 1000, buf, cap, 2, 2, &data, &got),
                 PN_ERR_USAGE);
    cr_assert(strstr(got.msg, "part 2 of a read in 2 parts"), "%s", got.msg);
    /* b.weight has 6 bytes: the reader's own message */
    uint8_t small[16];
    cr_assert_eq(gguf_reader_read_tensor(r, 1, 2, small, 5, &want), PN_ERR_USAGE);
    cr_assert_eq(gguf_direct_read_tensor_into(d, 1, 2, 5, buf, cap, 0, 1, &data, &got),
                 PN_ERR_USAGE);
    cr_assert_str_eq(got.msg, want.msg);
    free(buf);
    handles_close(&h);
}

Test(gguf_direct, a_memory_reader_is_read_into_a_buffer_by_copying)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "m.gguf");
    sf_write_model(path, g_specs, N_SPECS, 18);
    size_t size;
    void *bytes = tu_read_file(path, &size);
    gguf_reader *r;
    gguf_direct *d[2];
    pn_error err;
    cr_assert_eq(gguf_reader_open_memory(bytes, size, "mem", &r, &err), PN_OK, "%s", err.msg);
    for (int p = 0; p < 2; p++)
        cr_assert_eq(gguf_direct_open(r, 8192, &d[p], &err), PN_OK, "%s", err.msg);
    cr_assert(!gguf_direct_is_direct(d[0]), "a memory reader has no file to read directly");
    for (int parts = 1; parts <= 2; parts++)
        for (size_t i = 0; i < N_SPECS; i++) {
            const size_t n = (size_t)gguf_reader_tensor(r, i)->size;
            same_bytes_into(r, d, parts, i, 0, n);
            same_bytes_into(r, d, parts, i, n / 3, n - n / 3);
        }
    for (int p = 0; p < 2; p++)
        gguf_direct_close(d[p]);
    gguf_reader_close(r);
    free(bytes);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}
