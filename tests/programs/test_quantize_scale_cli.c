/* pn-quantize on headers of a few MB that hold very many keys or tensors:
 * planning, measuring, sizing and writing stay linear, and a signal is
 * honoured while the header is planned. Linear is checked as growth: the
 * work on 4n keys or tensors takes at most 8 times the CPU time of n (a
 * linear step takes 4, a quadratic one 16), with a second of slack for the
 * start-up both share. CPU time, not wall time: on a shared machine other
 * programs take the cores, and wall-clock bounds fail for no fault of the
 * code.
 *
 * Here the tests that run the built programs; those that call the library
 * are in tests/pipeline/test_quantize_scale.c. */
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
#define SLOWER 4.0
#else
#define SLOWER 1.0
#endif


/* Wall seconds: how long another process takes to react. */
static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

Test(quantize_scale, sigterm_while_a_200k_key_header_is_planned_ends_the_run_at_once, .init = setup,
     .fini = teardown)
{
    char *src = path_in("keys.gguf"), *dst = path_in("out.gguf"), *recipe = path_in("r.mix");
    wide_header_write(src, 200000, 64, 320, 64);
    cr_assert_eq(tu_write_file(recipe, wide_header_recipe, strlen(wide_header_recipe)), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        tu_child_output_to_devnull();
        execl(PN_BIN_DIR "/pn-quantize", "pn-quantize", "--recipe", recipe, "--promote", "4",
              "--threads", "1", src, dst, (char *)NULL);
        _exit(127);
    }
    usleep(100000);
    double t0 = wall_s();
    kill(pid, SIGTERM);
    int status;
    waitpid(pid, &status, 0);
    double t = wall_s() - t0;
    /* 143 (128 + SIGTERM) when the signal landed in the run; 0 when the run
     * was already done */
    cr_assert(WIFEXITED(status) && (WEXITSTATUS(status) == 143 || WEXITSTATUS(status) == 0),
              "status %d", status);
    cr_assert_lt(t, 5.0 * SLOWER, "the run took %.1f s to stop after SIGTERM", t);
    struct stat sb;
    if (WEXITSTATUS(status) == 143)
        cr_assert_neq(stat(dst, &sb), 0, "an interrupted run left its output");
    free(src);
    free(dst);
    free(recipe);
}
