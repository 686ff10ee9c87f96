/* The checker (check/check.h) on a good PN file made in the test
 * (fixtures/pn_model.h): the same report at any thread count and chunk size,
 * each tensor's error against the source, the file cut at every length, a
 * file or source that shrinks during the check, a row of 2^24 weights in
 * memory far below the row.
 *
 * pn-check on the corpus of damaged copies, each caught by its own finding
 * with the right exit status, is tests/programs/test_check_cli.c. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixtures/gguf_bytes.h"
#include "fixtures/check_files.h"
#include "fixtures/long_row.h"
#include "check/check.h"
#include "check/check_testing.h"
#include "fixtures/pn_model.h"
#include "test_util.h"

static char *g_dir;
static fx_model g_model;
static char g_src[4096], g_good[4096], g_recipe[4096];

static void setup(void)
{
    fx_make_folder(&g_dir, &g_model, g_src, g_good);
    snprintf(g_recipe, sizeof g_recipe, "%s/t0.mix", g_dir);
    cr_assert_eq(tu_write_file(g_recipe, FX_RECIPE, strlen(FX_RECIPE)), 0);
}

static void teardown(void)
{
    fx_remove_folder(&g_dir, &g_model);
}

TestSuite(pn_check, .init = setup, .fini = teardown, .timeout = 60);

/* A path in the test folder (static storage, a few at a time). */
static const char *path_in(const char *name)
{
    return tu_join_static(g_dir, name);
}

/* ---- byte edits ---- */

static const char *damaged(const char *name, check_edit e, bool fix_crcs)
{
    return check_damaged(g_dir, g_good, name, e, fix_crcs);
}

/* Byte offset of block b of row r of a PN tensor of the fixture. */
static uint64_t pn_block_at(int t, int64_t row, int64_t block)
{
    return check_block_at(g_good, t, row, block);
}

/* ---- the library ---- */

static pn_check_report *check_lib(const char *path, int threads, size_t chunk, const char *src)
{
    pn_check_options o;
    pn_check_options_default(&o);
    o.threads = threads;
    o.chunk_bytes = chunk;
    o.source_path = src;
    pn_check_report *r = NULL;
    pn_error err = { 0 };
    cr_assert_eq(pn_check_file(path, &o, &r, &err), PN_OK, "%s", err.msg);
    return r;
}

static void expect_same_reports(const pn_check_report *a, const pn_check_report *b, bool same_sums)
{
    cr_assert_eq(a->n_findings, b->n_findings);
    for (size_t i = 0; i < a->n_findings; i++) {
        cr_assert_str_eq(a->findings[i].code, b->findings[i].code);
        if (same_sums || strcmp(a->findings[i].code, "SRC-ERROR-HIGH") != 0)
            cr_assert_str_eq(a->findings[i].message, b->findings[i].message);
    }
    for (size_t i = 0; i < a->n_tensors; i++) {
        const pn_check_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        cr_assert(x->crc_computed && y->crc_computed);
        cr_assert_eq(x->crc32, y->crc32, "%s", x->name);
        cr_assert_eq(x->bad_blocks, y->bad_blocks, "%s", x->name);
        if (same_sums)
            cr_assert(x->rel_error == y->rel_error, "%s: %.17g vs %.17g", x->name, x->rel_error,
                      y->rel_error);
        else /* other work items sum the squares in another grouping */
            cr_assert(fabs(x->rel_error - y->rel_error) <= 1e-12 * x->rel_error,
                      "%s: %.17g vs %.17g", x->name, x->rel_error, y->rel_error);
    }
}

Test(pn_check, gives_the_same_report_for_any_thread_count_and_chunk_size)
{
    const char *p = damaged(
        "reserved2.gguf", (check_edit){ pn_block_at(FX_ATTN_Q, 3, 1) + 30, 0, 0x80000000u }, false);
    pn_check_report *a = check_lib(p, 1, 40, g_src); /* 40 bytes: one unit per item */
    pn_check_report *b = check_lib(p, 3, 40, g_src);
    pn_check_report *c = check_lib(p, 2, (size_t)8 << 20, g_src);
    cr_assert_not_null(pn_check_find(a, "PN-RESERVED-BITS", "blk.0.attn_q.weight"));
    cr_assert_not_null(pn_check_find(a, "PN-CRC-MISMATCH", "blk.0.attn_q.weight"));
    expect_same_reports(a, b, true);
    expect_same_reports(a, c, false);
    pn_check_report_free(a);
    pn_check_report_free(b);
    pn_check_report_free(c);
}

Test(pn_check, measures_each_tensors_error_against_the_source)
{
    pn_check_report *r = check_lib(g_good, 0, (size_t)8 << 20, g_src);
    cr_assert_eq(r->n_findings, 0);
    /* Bounds for Gaussian-like weights: the measured figures are in the
     * report of this project (pn3t about 3.5%, pn4t about 0.9%). */
    static const struct {
        int t;
        double lo, hi;
    } expect[] = {
        { FX_NORM, 0, 0 },
        { FX_ATTN_Q, 0.01, 0.08 },
        { FX_FFN_GATE, 0.002, 0.03 },
        { FX_FFN_DOWN, 0.002, 0.03 },
        { FX_ALPHA, 0, 1e-3 },
        { FX_OUTPUT, 0, 0.03 },
        { FX_EMBD, 0, 0.08 },
    };
    for (size_t k = 0; k < sizeof expect / sizeof expect[0]; k++) {
        const pn_check_tensor *t = &r->tensors[expect[k].t];
        cr_assert(t->compared, "%s: %s", t->name, t->note ? t->note : "");
        cr_assert(t->rel_error >= expect[k].lo && t->rel_error <= expect[k].hi, "%s: E = %g",
                  t->name, t->rel_error);
        if (pn_type_is_pn(t->type)) {
            /* The file was made by the reference quantizer: E is E_ref's. */
            cr_assert(t->rel_error < 1.5 * t->expected_error &&
                          t->rel_error > 0.5 * t->expected_error,
                      "%s: E %g, E_ref %g", t->name, t->rel_error, t->expected_error);
            cr_assert_eq(t->rotation_block, t->ne[0] == 384 ? 128 : 64);
        }
    }
    pn_check_report_free(r);
}

Test(pn_check, classifies_the_good_file_cut_at_every_length)
{
    size_t n;
    uint8_t *buf = tu_read_file(g_good, &n);
    gguf_reader *r = NULL;
    pn_error e = { 0 };
    cr_assert_eq(gguf_reader_open(g_good, &r, &e), PN_OK, "%s", e.msg);
    const uint64_t data_off = gguf_reader_data_offset(r);
    uint64_t last_end = 0;
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *ti = gguf_reader_tensor(r, i);
        if (data_off + ti->offset + ti->size > last_end)
            last_end = data_off + ti->offset + ti->size;
    }
    gguf_reader_close(r);
    const char *p = path_in("cut.gguf");
    pn_check_options o;
    pn_check_options_default(&o);
    o.threads = 1;
    for (size_t cut = 0; cut <= n; cut += cut < data_off + 64 ? 1 : 29) {
        cr_assert_eq(tu_write_file(p, buf, cut), 0);
        pn_check_report *rep = NULL;
        cr_assert_eq(pn_check_file(p, &o, &rep, &e), PN_OK, "cut %zu: %s", cut, e.msg);
        int rc = pn_check_exit_code(rep, false);
        cr_assert(rep->n_findings > 0 || rc == 0, "cut %zu: a verdict without a finding", cut);
        if (cut >= last_end)
            cr_assert_eq(rc, 0, "cut %zu (data ends at %llu): %s", cut,
                         (unsigned long long)last_end,
                         rep->n_findings ? rep->findings[0].message : "");
        else if (cut >= data_off)
            cr_assert_eq(rc, 1, "cut %zu inside the data", cut);
        else
            cr_assert(rc == 1 &&
                          (!rep->readable || pn_check_find(rep, "GGUF-TRUNCATED-DATA", NULL)),
                      "cut %zu inside the header: rc %d", cut, rc);
        if (rc == 1 && rep->readable)
            cr_assert_not_null(pn_check_find(rep, "GGUF-TENSOR-PAST-EOF", NULL), "cut %zu", cut);
        pn_check_report_free(rep);
    }
    free(buf);
}

/* A progress callback that truncates a file the first time it is called. */
static void truncate_on_first_call(void *ctx, uint64_t done, uint64_t total)
{
    (void)total;
    int *calls = (int *)((char **)ctx)[1];
    if ((*calls)++ == 0) {
        cr_assert_eq(done, 0);
        cr_assert_eq(truncate(((char **)ctx)[0], 0), 0, "%s", strerror(errno));
    }
}

static void expect_shrink_error(const char *file, const char *source, const char *shrinks)
{
    int calls = 0;
    char *ctx[2] = { (char *)shrinks, (char *)&calls };
    pn_check_options o;
    pn_check_options_default(&o);
    o.source_path = source;
    o.threads = 2;
    o.progress = truncate_on_first_call;
    o.progress_ctx = ctx;
    pn_check_report *r = NULL;
    pn_error err = { 0 };
    pn_status st = pn_check_file(file, &o, &r, &err);
    cr_assert_eq(st, PN_ERR_TRUNCATED, "status %d: %s", st, err.msg);
    cr_assert_null(r);
    cr_assert_geq(calls, 1);
    cr_assert(strstr(err.msg, shrinks), "the message names %s: %s", shrinks, err.msg);
    cr_assert(strstr(err.msg, "changed or shrank"), "%s", err.msg);
}

Test(pn_check, a_file_that_shrinks_during_the_check_is_an_error_naming_it)
{
    const char *p = path_in("shrinks.gguf");
    fx_copy_edit(g_good, p, NULL, NULL);
    expect_shrink_error(p, NULL, p);
}

Test(pn_check, a_source_that_shrinks_during_the_check_is_an_error_naming_it)
{
    const char *src = path_in("source-shrinks.gguf");
    fx_copy_edit(g_src, src, NULL, NULL);
    expect_shrink_error(g_good, src, src);
}

/* ---- output a terminal or a parser can trust ---- */
Test(pn_check, json_reader_of_these_tests_tells_json_from_not_json)
{
    cr_assert(check_is_json("{\"a\": [1, -2.5e3, true, null, \"\\u001b\\\\x\"], \"b\": {}}"));
    cr_assert(check_is_json("\"caf\xc3\xa9\""));
    cr_assert_not(check_is_json("\"\xff\""), "invalid UTF-8");
    cr_assert_not(check_is_json("\"a\x1b\""), "raw control byte");
    cr_assert_not(check_is_json("\"\\x41\""), "\\x is no JSON escape");
    cr_assert_not(check_is_json("{\"a\": 1,}"));
    cr_assert_not(check_is_json("[1] 2"));
}

/* ---- memory bounded by the chunk, whatever the row ---- */

typedef struct check_job {
    const char *file, *source;
} check_job;

/* In the child: a check with a 1 MiB chunk; 0 when it compared every tensor
 * with no error. */
static int run_check_job(void *arg)
{
    const check_job *j = arg;
    pn_check_options o;
    pn_check_options_default(&o);
    o.source_path = j->source;
    o.chunk_bytes = (size_t)1 << 20;
    o.threads = 2;
    pn_check_report *r = NULL;
    pn_error err = { 0 };
    if (pn_check_file(j->file, &o, &r, &err) != PN_OK)
        return 10;
    int rc = r->n_errors ? 11 : 0;
    for (size_t i = 0; i < r->n_tensors; i++)
        if (!r->tensors[i].compared)
            rc = 12;
    pn_check_report_free(r);
    return rc;
}

Test(pn_check, checks_a_row_of_2_24_weights_in_memory_far_below_the_row)
{
    const int64_t n = (int64_t)1 << 24; /* a row of 64 MiB as floats, 32 MiB as f16 */
    const char *src = path_in("long-src.gguf"), *pn = path_in("long-pn.gguf");
    lr_write(src, pn, n);
    int st;
    check_job small = { g_good, g_src }, big = { pn, src };
    long base = lr_peak_rss_kb(run_check_job, &small, &st);
    cr_assert_eq(st, 0, "the fixture checks clean: %d", st);
    long peak = lr_peak_rss_kb(run_check_job, &big, &st);
    cr_assert_eq(st, 0, "the long row checks clean against its source: %d", st);
    lr_expect_far_below_row(base, peak, lr_reader_kb(pn) + lr_reader_kb(src), n);
}
