/* test_common.c - the shared helpers of common/: hostile small files, text
 * that is safe for a terminal and valid JSON, the thread default. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
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
    cr_assert_eq(pn_utf8_char((const unsigned char *)"\xc0\xaf", 2, &cp), 0);       /* overlong '/' */
    cr_assert_eq(pn_utf8_char((const unsigned char *)"\xed\xa0\x80", 3, &cp), 0);   /* U+D800 */
    cr_assert_eq(pn_utf8_char((const unsigned char *)"\xf4\x90\x80\x80", 4, &cp), 0); /* > U+10FFFF */
    cr_assert_eq(pn_utf8_char((const unsigned char *)"\xe2\x82", 2, &cp), 0);       /* cut short */
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
