/* test_common.c - the shared helpers of common/: hostile small files, the
 * O_DIRECT reopen, text that is safe for a terminal and valid JSON, the
 * thread default and the loop that reports the first failure in item
 * order, the hashes, the clock, the CPU features, one place of
 * two paths, the line reader, little-endian loads and stores. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/byte_order.h"
#include "common/clock.h"
#include "common/cpu.h"
#include "common/file.h"
#include "common/hash.h"
#include "common/spawn.h"
#include "common/text.h"
#include "common/threads.h"
#include "test_util.h"

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

Test(small_file, a_fifo_without_a_writer_is_refused_at_once)
{
    char *dir = tu_mkdtemp();
    char *path = join(dir, "recipe.mix");
    cr_assert_eq(mkfifo(path, 0600), 0);
    char *data = NULL;
    size_t len = 0;
    pn_error e;
    alarm(20);
    cr_assert_eq(pn_read_small_file(path, 1000, "recipe", &data, &len, &e), PN_ERR_IO);
    alarm(0);
    cr_assert_null(data);
    cr_assert(strstr(e.msg, path) && strstr(e.msg, "recipe") && strstr(e.msg, "FIFO"), "%s", e.msg);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(small_file, a_directory_and_a_missing_file_are_refused_naming_them)
{
    char *dir = tu_mkdtemp();
    char *data = NULL;
    size_t len = 0;
    pn_error e;
    cr_assert_eq(pn_read_small_file(dir, 1000, "promote list", &data, &len, &e), PN_ERR_IO);
    cr_assert(strstr(e.msg, "directory") && strstr(e.msg, "promote list"), "%s", e.msg);
    char *missing = join(dir, "none");
    cr_assert_eq(pn_read_small_file(missing, 1000, "recipe", &data, &len, &e), PN_ERR_IO);
    cr_assert(strstr(e.msg, missing), "%s", e.msg);
    tu_rm_rf(dir);
    free(missing);
    free(dir);
}

Test(small_file, a_file_that_reads_shorter_than_its_size_is_refused_naming_it)
{
    /* a sysfs attribute: a regular file of st_size 4096 whose read gives a
     * few bytes, as a file that shrank between the stat and the read */
    const char *sys = tu_short_read_file();
    char *dir = tu_mkdtemp();
    char *path = join(dir, "recipe.mix");
    cr_assert_eq(symlink(sys, path), 0);
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    char *data = NULL;
    size_t len = 0;
    pn_error e;
    cr_assert_eq(pn_read_small_file(path, 1 << 20, "recipe", &data, &len, &e), PN_ERR_TRUNCATED,
                 "%s read whole", sys);
    cr_assert_null(data);
    cr_assert_eq(len, 0);
    char size[64];
    snprintf(size, sizeof size, "is %lld bytes but ", (long long)sb.st_size);
    cr_assert(strstr(e.msg, path) && strstr(e.msg, "recipe") && strstr(e.msg, size) &&
                  strstr(e.msg, "changed while read"),
              "%s", e.msg);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(small_file, a_file_over_the_limit_is_refused_before_it_is_read)
{
    char *dir = tu_mkdtemp();
    char *path = join(dir, "big");
    char buf[4096];
    memset(buf, 'x', sizeof buf);
    cr_assert_eq(tu_write_file(path, buf, sizeof buf), 0);
    char *data = NULL;
    size_t len = 0;
    pn_error e;
    cr_assert_eq(pn_read_small_file(path, 4095, "recipe", &data, &len, &e), PN_ERR_FORMAT);
    cr_assert(strstr(e.msg, "4096 bytes") && strstr(e.msg, "4095"), "%s", e.msg);
    cr_assert_eq(pn_read_small_file(path, 4096, "recipe", &data, &len, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(len, 4096);
    cr_assert_eq(data[4096], '\0');
    cr_assert_eq(memcmp(data, buf, 4096), 0);
    free(data);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(same_file, two_names_of_one_file_are_the_same_and_others_are_not)
{
    char *dir = tu_mkdtemp();
    char *a = join(dir, "a"), *b = join(dir, "b"), *c = join(dir, "c");
    cr_assert_eq(tu_write_file(a, "x", 1), 0);
    cr_assert_eq(link(a, b), 0);
    cr_assert_eq(tu_write_file(c, "x", 1), 0);
    cr_assert(pn_same_file(a, b));
    cr_assert(pn_same_file(a, a));
    cr_assert_not(pn_same_file(a, c));
    tu_rm_rf(dir);
    free(a);
    free(b);
    free(c);
    free(dir);
}

/* Captures what a FILE* writer produces. */
static char *capture(void (*fn)(FILE *, const char *), const char *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fn(f, s);
    fclose(f);
    return buf;
}

/* One place: a file that is there, or the same name in one folder (reached
 * by another path or a link) for a file that is not there yet. */
Test(same_place, one_name_in_one_folder_is_one_place_and_other_names_or_folders_are_not)
{
    char *dir = tu_mkdtemp();
    char *sub = join(dir, "sub"), *lnk = join(dir, "lnk");
    cr_assert_eq(mkdir(sub, 0755), 0);
    cr_assert_eq(symlink(sub, lnk), 0);
    char *a = join(sub, "out.gguf"), *b = join(lnk, "out.gguf"), *c = join(sub, "other.gguf");
    char *d = join(dir, "out.gguf"), *e = join(sub, "./out.gguf");
    cr_assert(pn_same_place(a, b), "not there yet, one folder by two paths");
    cr_assert(pn_same_place(a, e));
    cr_assert_not(pn_same_place(a, c), "another name");
    cr_assert_not(pn_same_place(a, d), "another folder");
    cr_assert_not(pn_same_file(a, b), "pn_same_file: only files that are there");
    cr_assert_eq(tu_write_file(c, "x", 1), 0);
    cr_assert_eq(link(c, a), 0);
    cr_assert(pn_same_place(c, b), "one file under two names");
    cr_assert(pn_same_place("x.gguf", "x.gguf"), "the same string");
    cr_assert_not(pn_same_place(NULL, "x.gguf"));
    cr_assert_not(pn_same_place("x.gguf", NULL));
    char cwd[4096];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    cr_assert_eq(chdir(sub), 0);
    cr_assert(pn_same_place("new.gguf", "../sub/new.gguf"), "a bare name is in the current folder");
    cr_assert(pn_same_place("/new.gguf", "//new.gguf"), "a name in the root");
    cr_assert_not(pn_same_place("new.gguf", "/new.gguf"));
    cr_assert_eq(chdir(cwd), 0);
    tu_rm_rf(dir);
    free(a);
    free(b);
    free(c);
    free(d);
    free(e);
    free(sub);
    free(lnk);
    free(dir);
}

Test(line_reader, lines_are_cut_in_place_and_counted_and_fields_split_at_tabs)
{
    char text[] = "a\tb\n\nc\td\te\nlast";
    pn_line_reader lr = { .buf = text, .len = sizeof text - 1 };
    char *f[3];
    char *s = pn_next_line(&lr);
    cr_assert_str_eq(s, "a\tb");
    cr_assert_eq(lr.line, 1);
    cr_assert_eq(pn_split_tabs(s, f, 3), 2);
    cr_assert_str_eq(f[0], "a");
    cr_assert_str_eq(f[1], "b");
    cr_assert_str_eq(pn_next_line(&lr), "", "an empty line");
    s = pn_next_line(&lr);
    cr_assert_eq(pn_split_tabs(s, f, 2), 3, "more fields than max: max + 1");
    cr_assert_str_eq(f[0], "c");
    cr_assert_str_eq(f[1], "d");
    cr_assert_str_eq(pn_next_line(&lr), "last", "a last line without its line end");
    cr_assert_eq(lr.line, 4);
    cr_assert_null(pn_next_line(&lr));
    char two[] = "x\n";
    pn_line_reader l2 = { .buf = two, .len = 2 };
    cr_assert_str_eq(pn_next_line(&l2), "x");
    cr_assert_null(pn_next_line(&l2), "no empty line after the last line end");
}

Test(text_field, a_real_number_is_the_whole_field_finite_and_without_a_leading_blank)
{
    /* what the KL measurement and the measurement files accept as a figure */
    const char *good[] = { "0", "1.5", "-2", "+3", "1e-320", "0x1p3", "2.5E+2" };
    const double want[] = { 0.0, 1.5, -2.0, 3.0, 1e-320, 8.0, 250.0 };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        double v = -99.0;
        cr_assert(pn_field_real(good[i], &v), "'%s' is a number", good[i]);
        cr_assert_eq(v, want[i], "'%s'", good[i]);
    }
    const char *bad[] = {
        "", " 1", "\t1", "1 ", "1x", "inf", "-inf", "nan", "1e999", "-1e999", "x"
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        double v = -99.0;
        cr_assert_not(pn_field_real(bad[i], &v), "'%s' is refused", bad[i]);
        cr_assert_eq(v, -99.0, "'%s' leaves the value as it was", bad[i]);
    }
}

Test(child_log, the_tail_is_its_last_bytes_on_one_printable_line)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "log");
    const char text[] = "first line\nsecond\x01line\xc3\xa9\n \n\n";
    cr_assert_eq(tu_write_file(path, text, sizeof text - 1), 0);
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    char buf[64];
    pn_child_log_tail(fd, buf, sizeof buf);
    cr_assert_str_eq(buf, "first line|second?line??", "trailing breaks and blanks dropped");
    char small[8];
    pn_child_log_tail(fd, small, sizeof small);
    cr_assert_str_eq(small, "e??", "the last cap - 1 bytes, then trimmed");
    close(fd);
    pn_child_log_tail(-1, buf, sizeof buf);
    cr_assert_str_eq(buf, "", "no log");
    free(path);
    tu_rm_rf(dir);
    free(dir);
}

Test(remove_folder, the_files_in_it_go_but_not_what_a_link_in_it_names)
{
    char *dir = tu_mkdtemp();
    char *outside = tu_join(dir, "outside");
    cr_assert_eq(tu_write_file(outside, "x", 1), 0);
    char *tmp = tu_join(dir, "tmp");
    cr_assert_eq(mkdir(tmp, 0700), 0);
    char *a = tu_join(tmp, "a"), *lnk = tu_join(tmp, "link");
    cr_assert_eq(tu_write_file(a, "a", 1), 0);
    cr_assert_eq(symlink(outside, lnk), 0);
    pn_remove_folder(tmp);
    cr_assert_not(tu_exists(tmp), "the folder is gone");
    cr_assert(tu_exists(outside), "the link's target is kept");
    free(a);
    free(lnk);
    free(tmp);
    free(outside);
    tu_rm_rf(dir);
    free(dir);
}

Test(byte_order, loads_and_stores_are_little_endian_at_any_alignment)
{
    uint8_t b[12] = { 0xff, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0xff };
    cr_assert_eq(pn_load_u16le(b + 1), 0x0201);
    cr_assert_eq(pn_load_u32le(b + 1), 0x04030201u);
    cr_assert_eq(pn_load_u64le(b + 1), 0x0807060504030201ull);
    cr_assert_eq(pn_load_le(b + 1, 3), 0x030201u);
    cr_assert_eq(pn_load_le(b + 1, 0), 0);
    cr_assert_eq(pn_load_le(b + 4, 8), 0xff0a090807060504ull);
    uint8_t o[13] = { 0 };
    pn_store_le(o + 1, 0x1122334455667788ull, 8);
    pn_store_u32le(o + 9, 0xa1b2c3d4u);
    const uint8_t want[13] = { 0,    0x88, 0x77, 0x66, 0x55, 0x44, 0x33,
                               0x22, 0x11, 0xd4, 0xc3, 0xb2, 0xa1 };
    cr_assert_eq(memcmp(o, want, 13), 0);
    pn_store_u16le(o, 0xbeef);
    cr_assert_eq(o[0], 0xef);
    cr_assert_eq(o[1], 0xbe);
    pn_store_le(o + 4, 0xabcdef, 2);
    cr_assert_eq(o[4], 0xef);
    cr_assert_eq(o[5], 0xcd);
    cr_assert_eq(o[6], 0x33, "only n bytes stored");
}

Test(safe_text, escape_sequences_controls_and_invalid_utf8_are_shown_as_hex)
{
    char *got = capture(pn_fput_safe, "blk.\x1b]0;pwned\x07.w\xff\xc3\xa9\xc2\x9b!\n");
    cr_assert_str_eq(got, "blk.\\x1b]0;pwned\\x07.w\\xff\xc3\xa9\\xc2\\x9b!\\x0a");
    free(got);
    char buf[16];
    cr_assert_str_eq(pn_safe_text("abc\x1b[2J", buf, sizeof buf), "abc\\x1b[2J");
    cr_assert_str_eq(pn_safe_text("a-very-long-tensor-name", buf, sizeof buf), "a-very-long-...");
    cr_assert_lt(strlen(buf), sizeof buf);
}

Test(safe_text, overlong_and_surrogate_encodings_are_not_valid_utf8)
{
    unsigned cp;
    cr_assert_eq(pn_utf8_char((const unsigned char *)"\xc0\xaf", 2, &cp), 0);     /* overlong '/' */
    cr_assert_eq(pn_utf8_char((const unsigned char *)"\xed\xa0\x80", 3, &cp), 0); /* U+D800 */
    cr_assert_eq(pn_utf8_char((const unsigned char *)"\xf4\x90\x80\x80", 4, &cp),
                 0);                                                          /* > U+10FFFF */
    cr_assert_eq(pn_utf8_char((const unsigned char *)"\xe2\x82", 2, &cp), 0); /* cut short */
    cr_assert_eq(pn_utf8_char((const unsigned char *)"\xe2\x82\xac", 3, &cp), 3);
    cr_assert_eq(cp, 0x20ac);
}

Test(json_text, every_string_becomes_valid_json_with_the_same_rendering_as_the_terminal)
{
    char *got = capture(pn_json_put_str, "a\"b\\c\x01\x7f\xff\xc3\xa9\n");
    cr_assert_str_eq(got, "\"a\\\"b\\\\c\\u0001\\u007f\\\\xff\xc3\xa9\\u000a\"");
    free(got);
    got = capture(pn_json_put_str, "");
    cr_assert_str_eq(got, "\"\"");
    free(got);
}

Test(threads, a_positive_request_is_kept_and_zero_means_every_core)
{
    cr_assert_eq(pn_threads_resolve(3), 3);
    cr_assert_geq(pn_threads_resolve(0), 1);
    cr_assert_eq(pn_threads_resolve(-1), pn_threads_resolve(0));
}

/* Items of the ordered-first-failure loop: 5, 17 and 40 fail, each with its
 * own status and message; item 5 is slow, so with two threads or more a
 * later item fails first in time. */
typedef struct each_case {
    int threads;
    int done[64];
    int bad_thread; /* a call saw a thread index outside 0..threads-1 */
} each_case;

static pn_status each_item(void *ctx, size_t i, int thread, void *fail)
{
    each_case *c = ctx;
    if (thread < 0 || thread >= (c->threads > 1 ? c->threads : 1))
        c->bad_thread = 1;
    if (i == 5) {
        struct timespec ts = { 0, 60 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    c->done[i] = 1;
    const pn_status st = i == 5 ? PN_ERR_IO : i == 17 ? PN_ERR_CRC : i == 40 ? PN_ERR_NOMEM : PN_OK;
    if (st != PN_OK)
        pn_error_set(fail, st, "item %zu failed", i);
    return st;
}

Test(each_first_failure, the_first_failure_in_item_order_wins_whatever_the_thread_count)
{
    const int counts[] = { 1, 2, 3, 8 };
    const int hows[] = { PN_EACH_SKIP_AFTER_FAILURE, PN_EACH_RUN_ALL };
    for (size_t h = 0; h < 2; h++)
        for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
            each_case c = { .threads = counts[k] };
            pn_error e;
            size_t at = 0;
            pn_status st =
                pn_each_first_failure(64, c.threads, hows[h], each_item, &c, sizeof e, &e, &at);
            cr_assert_eq(st, PN_ERR_IO, "threads %d: status %d", c.threads, st);
            cr_assert_eq(at, 5);
            cr_assert_eq(e.code, PN_ERR_IO);
            cr_assert_str_eq(e.msg, "item 5 failed");
            cr_assert_eq(c.bad_thread, 0);
            for (size_t i = 0; i <= 5; i++)
                cr_assert_eq(c.done[i], 1, "threads %d: item %zu before the failure not run",
                             c.threads, i);
            if (hows[h] == PN_EACH_RUN_ALL)
                for (size_t i = 0; i < 64; i++)
                    cr_assert_eq(c.done[i], 1, "threads %d: item %zu not run", c.threads, i);
        }
}

Test(each_first_failure, every_item_runs_once_and_none_failing_is_ok)
{
    for (int threads = 1; threads <= 4; threads++) {
        each_case c = { .threads = threads };
        size_t at = 0;
        /* items 0..4: none of them fails */
        pn_status st = pn_each_first_failure(5, threads, PN_EACH_SKIP_AFTER_FAILURE, each_item, &c,
                                             0, NULL, &at);
        cr_assert_eq(st, PN_OK);
        cr_assert_eq(at, SIZE_MAX);
        for (size_t i = 0; i < 64; i++)
            cr_assert_eq(c.done[i], i < 5, "threads %d: item %zu", threads, i);
        each_case none = { .threads = threads };
        st = pn_each_first_failure(0, threads, PN_EACH_RUN_ALL, each_item, &none, 0, NULL, &at);
        cr_assert_eq(st, PN_OK);
        cr_assert_eq(at, SIZE_MAX);
        for (size_t i = 0; i < 64; i++)
            cr_assert_eq(none.done[i], 0);
    }
}

Test(open_direct, a_regular_file_is_opened_again_and_anything_else_is_refused)
{
    cr_assert_eq(pn_open_direct(-1), -1);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    cr_assert_eq(pn_open_direct(p[0]), -1, "a pipe has no file to read around the cache");
    close(p[0]);
    close(p[1]);

    char *dir = tu_mkdtemp();
    char *path = join(dir, "data.bin");
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0);
    static char block[8192];
    memset(block, 7, sizeof block);
    cr_assert_eq(write(fd, block, sizeof block), (ssize_t)sizeof block);
    int d = pn_open_direct(fd);
    /* -1 is allowed (a file system that refuses O_DIRECT, such as some
     * tmpfs); what comes back must be the same file, direct, on a
     * description of its own */
    if (d >= 0) {
        struct stat a, b;
        cr_assert_eq(fstat(d, &a), 0);
        cr_assert_eq(fstat(fd, &b), 0);
        cr_assert(a.st_dev == b.st_dev && a.st_ino == b.st_ino);
        cr_assert(fcntl(d, F_GETFL) & O_DIRECT);
        cr_assert_not(fcntl(fd, F_GETFL) & O_DIRECT, "O_DIRECT must not reach the caller's fd");
        close(d);
    }
    close(fd);
    tu_rm_rf(dir);
    free(path);
}

/* FNV-1a 64 values from the algorithm's published test vectors (Fowler, Noll,
 * Vo: "", "a", "foobar"). */
Test(hash, fnv1a64_gives_the_published_values_and_continues_piece_by_piece)
{
    cr_assert_eq(pn_fnv1a64(PN_FNV1A64_BASIS, "", 0), 0xcbf29ce484222325ull);
    cr_assert_eq(pn_fnv1a64(PN_FNV1A64_BASIS, "a", 1), 0xaf63dc4c8601ec8cull);
    cr_assert_eq(pn_fnv1a64(PN_FNV1A64_BASIS, "foobar", 6), 0x85944171f73967e8ull);
    cr_assert_eq(pn_fnv1a64(pn_fnv1a64(PN_FNV1A64_BASIS, "foo", 3), "bar", 3),
                 0x85944171f73967e8ull);
    const unsigned char le[8] = { 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08 };
    cr_assert_eq(pn_fnv1a64_le(PN_FNV1A64_BASIS, 0x0807060504030201ull, 8),
                 pn_fnv1a64(PN_FNV1A64_BASIS, le, 8));
    cr_assert_eq(pn_fnv1a64_le(PN_FNV1A64_BASIS, 0x0807060504030201ull, 4),
                 pn_fnv1a64(PN_FNV1A64_BASIS, le, 4), "only the low bytes count");
}

Test(hash, the_seeded_hash_depends_on_every_byte_the_length_and_the_seed)
{
    const char a[] = "blk.0.attn_q.weight", b[] = "blk.0.attn_k.weight";
    const uint64_t s = 12345;
    cr_assert_eq(pn_hash_seeded(a, strlen(a), s), pn_hash_seeded(a, strlen(a), s));
    cr_assert_neq(pn_hash_seeded(a, strlen(a), s), pn_hash_seeded(b, strlen(b), s));
    cr_assert_neq(pn_hash_seeded(a, strlen(a), s), pn_hash_seeded(a, strlen(a), s + 1));
    /* "x" and "x\0" differ only in length */
    cr_assert_neq(pn_hash_seeded("x\0", 1, s), pn_hash_seeded("x\0", 2, s));
    int x, y;
    cr_assert_neq(pn_hash_seed(&x), pn_hash_seed(&y), "two owners get two seeds");
}

Test(clock, the_monotonic_clock_counts_seconds_and_never_goes_back)
{
    double t0 = pn_now_seconds();
    struct timespec d = { 0, 20 * 1000 * 1000 };
    nanosleep(&d, NULL);
    double t1 = pn_now_seconds();
    cr_assert_geq(t1 - t0, 0.019, "slept 20 ms, the clock says %g s", t1 - t0);
    cr_assert_lt(t1 - t0, 60.0);
}

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* The cached answers are CPUID's own, on the first call and on later ones. */
Test(cpu, the_cached_features_are_what_cpuid_says)
{
    bool pclmul = false, f16c = false;
#if defined(__x86_64__) || defined(__i386__)
    unsigned int eax, ebx, ecx, edx;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
        pclmul = (edx & (1u << 26)) && (ecx & (1u << 1));
        f16c = (ecx & (1u << 29)) != 0;
    }
#endif
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(pn_cpu_has_pclmul(), pclmul, "call %d", i);
        cr_assert_eq(pn_cpu_has_f16c(), f16c, "call %d", i);
    }
}
