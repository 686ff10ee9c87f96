/* pn-quantize on headers of a few MB that hold very many keys or tensors:
 * planning, measuring, sizing and writing stay linear, and a signal is
 * honoured while the header is planned. Linear is checked as growth: the
 * work on 4n keys or tensors takes at most 8 times the CPU time of n (a
 * linear step takes 4, a quadratic one 16), with a second of slack for the
 * start-up both share. CPU time, not wall time: on a shared machine other
 * programs take the cores, and wall-clock bounds fail for no fault of the
 * code.
 *
 * Here the tests that call the library; those that run the built programs
 * are in tests/programs/test_quantize_scale_cli.c. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pipeline/quantize.h"
#include "quant/types.h"
#include "fixtures/scratch.h"
#include "fixtures/wide_header.h"
#include "test_util.h"

/* The sanitizer build runs several times slower (and beside another test). */
#if defined(__SANITIZE_ADDRESS__)
#else
#endif

/* At most this times the CPU time of n for 4n (linear: 4; quadratic: 16). */
#define GROWTH 8.0
#define SLACK_S 1.0

static void linear(double t_n, double t_4n, const char *what)
{
    cr_assert_lt(t_4n, GROWTH * t_n + SLACK_S,
                 "%s: %.2f CPU s for n, %.2f for 4n (%.1fx): more than linear", what, t_n, t_4n,
                 t_n > 0 ? t_4n / t_n : 0.0);
}


/* CPU seconds of this process (every thread's). */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static pn_status run(const char *src, const char *dst, const char *recipe, int promote,
                     uint64_t target, const char *list, bool dry, double *seconds,
                     pn_quantize_stats *s, pn_error *err)
{
    pn_quantize_opts o;
    pn_quantize_opts_init(&o);
    o.src_path = src;
    o.dst_path = dst;
    o.recipe_path = recipe;
    o.promote = promote;
    o.target_size = target;
    o.promote_list_path = list;
    o.dry_run = dry;
    o.threads = 2;
    o.backend = PN_BACKEND_CPU;
    double t0 = now_s();
    pn_status st = pn_quantize_file(&o, s, err);
    *seconds = now_s() - t0;
    return st;
}

/* CPU seconds of a dry run and of a real run of a header of n_kv keys. */
static void keys_run(size_t n_kv, double *dry, double *real)
{
    char *src = path_in("keys.gguf"), *dst = path_in("out.gguf"), *recipe = path_in("r.mix");
    unlink(dst);
    wide_header_write(src, n_kv, 2, 320, 4);
    cr_assert_eq(tu_write_file(recipe, wide_header_recipe, strlen(wide_header_recipe)), 0);
    pn_quantize_stats s;
    pn_error err;
    cr_assert_eq(run(src, NULL, recipe, 0, 0, NULL, true, dry, &s, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(run(src, dst, recipe, 1, 0, NULL, false, real, &s, &err), PN_OK, "%s", err.msg);
    free(src);
    free(dst);
    free(recipe);
}

Test(quantize_scale, a_header_of_200k_keys_is_planned_and_written_in_linear_time, .init = setup,
     .fini = teardown)
{
    double dry_n, real_n, dry_4n, real_4n;
    keys_run(50000, &dry_n, &real_n);
    keys_run(200000, &dry_4n, &real_4n);
    linear(dry_n, dry_4n, "a dry run of 50k and 200k keys");
    linear(real_n, real_4n, "a run of 50k and 200k keys");
}

/* CPU seconds of n tensors (every one a candidate) measured, promoted
 * (n/3) and written; sized for --target-size; promoted by a list of n/2. */
static void tensors_run(int n, double t[3])
{
    char *src = path_in("tensors.gguf"), *dst = path_in("out.gguf"), *recipe = path_in("r.mix");
    char *list = path_in("list.txt");
    unlink(dst);
    wide_header_write(src, 1, (size_t)n, 320, 1);
    cr_assert_eq(tu_write_file(recipe, wide_header_recipe, strlen(wide_header_recipe)), 0);
    FILE *f = fopen(list, "w");
    for (int i = 0; i < n; i += 2)
        fprintf(f, "blk.%d.attn_q.weight\n", i);
    fclose(f);
    pn_quantize_stats s;
    pn_error err;
    cr_assert_eq(run(src, dst, recipe, n / 3, 0, NULL, false, &t[0], &s, &err), PN_OK, "%s",
                 err.msg);
    cr_assert_eq(s.n_promoted, n / 3);
    uint64_t limit = s.file_bytes;
    cr_assert_eq(run(src, NULL, recipe, -1, limit, NULL, true, &t[1], &s, &err), PN_OK, "%s",
                 err.msg);
    cr_assert_eq(s.n_promoted, n / 3);
    cr_assert_eq(run(src, NULL, recipe, -1, 0, list, true, &t[2], &s, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(s.n_promoted, n / 2);
    free(src);
    free(dst);
    free(recipe);
    free(list);
}

Test(quantize_scale, sixty_thousand_tensors_are_measured_sized_promoted_and_written_in_linear_time,
     .init = setup, .fini = teardown)
{
    double n[3], n4[3];
    tensors_run(15000, n);
    tensors_run(60000, n4);
    linear(n[0], n4[0], "15k and 60k tensors measured, promoted and written");
    linear(n[1], n4[1], "--target-size over 15k and 60k candidates");
    linear(n[2], n4[2], "promote lists of 7.5k and 30k names");
}
