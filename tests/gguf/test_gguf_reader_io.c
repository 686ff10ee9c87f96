/* The GGUF reader (gguf/gguf.h) on what is not a plain file or changes
 * under it (a FIFO, a folder, a file that shrinks), on reads outside a
 * tensor, opened from a descriptor or for the header alone, and on keys
 * with an empty name or a NUL byte, each refused naming the file and offset. */
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
    gf_finish(w, path);
    gf_write_pattern(w, (uint64_t)n * 4, 1 << 20);
    gf_close_and_commit(w);
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
    gguf_reader *r = gf_open_file(path);
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
        cr_assert_eq(got[i], gf_pattern_byte(4000 + (uint64_t)i));
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
    gguf_reader *r = gf_open_file(path);
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
    gguf_reader *r = gf_open_file(path);
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
    gguf_reader *full = gf_open_file(path), *r = NULL;
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
