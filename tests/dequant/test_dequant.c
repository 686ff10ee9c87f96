/* The decoder (dequant/dequant.h) on a PN file made in the test
 * (fixtures/pn_model.h): the same bytes at any thread count and chunk size,
 * an input that shrinks during the run, a row of 2^24 weights in memory far
 * below the row.
 *
 * pn-dequant decoding, tensor by tensor, to exactly the floats the decoders
 * give, with the pn.* keys renamed, is tests/programs/test_dequant_cli.c. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fixtures/dequant_files.h"
#include "fixtures/gguf_bytes.h"
#include "fixtures/long_row.h"
#include "dequant/dequant.h"
#include "gguf/header_hash.h"
#include "fixtures/pn_model.h"
#include "test_util.h"
#include "gguf/gguf_testing.h"

static char *g_dir;
static fx_model g_model;
static char g_src[4096], g_good[4096];

static void setup(void)
{
    fx_make_folder(&g_dir, &g_model, g_src, g_good);
}

static void teardown(void)
{
    fx_remove_folder(&g_dir, &g_model);
}

TestSuite(pn_dequant, .init = setup, .fini = teardown, .timeout = 60);

/* A path in the test folder (static storage, a few at a time). */
static const char *path_in(const char *name)
{
    return tu_join_static(g_dir, name);
}

Test(pn_dequant, gives_the_same_bytes_for_any_thread_count_and_chunk_size)
{
    pn_dequant_opts o;
    pn_dequant_opts_init(&o);
    pn_error err = { 0 };
    pn_dequant_stats s;
    o.threads = 1;
    cr_assert_eq(pn_dequant_file(g_good, path_in("t1.gguf"), &o, &s, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(s.n_pn, 3);
    cr_assert_eq(s.n_stock, 3);
    cr_assert_eq(s.n_copied, 1);
    cr_assert(s.rotation_undone);
    cr_assert_eq(s.rotation_cap, 1024);
    o.threads = 3;
    o.chunk_bytes = 100; /* less than one segment: one segment per chunk */
    cr_assert_eq(pn_dequant_file(g_good, path_in("t3.gguf"), &o, &s, &err), PN_OK, "%s", err.msg);
    size_t n1, n3;
    uint8_t *a = tu_read_file(path_in("t1.gguf"), &n1), *b = tu_read_file(path_in("t3.gguf"), &n3);
    cr_assert_eq(n1, n3);
    cr_assert(memcmp(a, b, n1) == 0);
    free(a);
    free(b);
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

Test(pn_dequant, an_input_that_shrinks_during_the_run_is_an_error_leaving_nothing)
{
    const char *in = path_in("shrinks.gguf"), *outp = path_in("never.gguf");
    fx_copy_edit(g_good, in, NULL, NULL);
    int before = dequant_count_entries(g_dir);
    int calls = 0;
    char *ctx[2] = { (char *)in, (char *)&calls };
    pn_dequant_opts o;
    pn_dequant_opts_init(&o);
    o.threads = 2;
    o.progress = truncate_on_first_call;
    o.progress_ctx = ctx;
    pn_error err = { 0 };
    pn_status st = pn_dequant_file(in, outp, &o, NULL, &err);
    cr_assert_eq(st, PN_ERR_TRUNCATED, "status %d: %s", st, err.msg);
    cr_assert_eq(calls, 1);
    cr_assert(strstr(err.msg, in) && strstr(err.msg, "changed or shrank"), "%s", err.msg);
    cr_assert_eq(access(outp, F_OK), -1, "nothing at OUT");
    cr_assert_eq(dequant_count_entries(g_dir), before, "no temporary file is left");
}

typedef struct dequant_job {
    const char *in, *out;
} dequant_job;

/* In the child: a run with a 1 MiB chunk; 0 when it wrote the output. */
static int run_dequant_job(void *arg)
{
    const dequant_job *j = arg;
    pn_dequant_opts o;
    pn_dequant_opts_init(&o);
    o.out_type = PN_TYPE_BF16;
    o.chunk_bytes = (size_t)1 << 20;
    o.threads = 2;
    pn_error err = { 0 };
    return pn_dequant_file(j->in, j->out, &o, NULL, &err) == PN_OK ? 0 : 10;
}

Test(pn_dequant, decodes_a_row_of_2_24_weights_in_memory_far_below_the_row)
{
    const int64_t n = (int64_t)1 << 24; /* a row of 64 MiB as floats */
    const char *src = path_in("long-src.gguf"), *pn = path_in("long-pn.gguf");
    lr_write(src, pn, n);
    int st;
    dequant_job small = { g_good, path_in("small-out.gguf") },
                big = { pn, path_in("long-out.gguf") };
    long base = lr_peak_rss_kb(run_dequant_job, &small, &st);
    cr_assert_eq(st, 0);
    long peak = lr_peak_rss_kb(run_dequant_job, &big, &st);
    cr_assert_eq(st, 0, "the long row decodes");
    /* the reader keeps its header buffer of the input, and of the output
     * while it is checked */
    lr_expect_far_below_row(base, peak, lr_reader_kb(pn) + lr_reader_kb(big.out), n);
    gguf_reader *r = dequant_open_or_fail(big.out);
    cr_assert_eq(gguf_reader_tensor(r, 0)->ne[0], n);
    gguf_reader_close(r);
}
