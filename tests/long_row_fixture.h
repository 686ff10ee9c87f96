/* long_row_fixture.h - a model whose one tensor is a single very long row,
 * and the peak memory of a job run on it.
 *
 * lr_write makes a source GGUF holding a 1-D f16 tensor "long.weight" of n
 * weights (n a multiple of 65536) and its PN file (pn4t, rotated with block
 * 1024 as pn.rotation.* say), both streamed a segment at a time, so the test
 * process itself never holds a row. lr_peak_rss_kb runs a function in a
 * child process and returns the child's peak resident memory (wait4's
 * rusage): a job whose buffers were sized by the row would show it there;
 * lr_reader_kb is what the reader itself keeps of a file (up to 16 MiB, the
 * same whatever the row length), to be set apart.
 * Header-only: shared by tests/test_check.c and tests/test_dequant.c.
 */
#ifndef PN_TEST_LONG_ROW_FIXTURE_H
#define PN_TEST_LONG_ROW_FIXTURE_H

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "hadamard/hadamard.h"
#include "quant/fp16.h"
#include "quant/pn.h"
#include "quant/types.h"
#include "test_util.h"

#define LR_UNUSED __attribute__((unused))
#define LR_SEG 65536

static LR_UNUSED void lr_write(const char *src_path, const char *pn_path, int64_t n)
{
    cr_assert_eq(n % LR_SEG, 0);
    pn_error err = { 0 };
    gguf_writer *ws = gguf_writer_new(), *wp = gguf_writer_new();
    cr_assert(ws && wp);
    const int64_t ne[4] = { n, 1, 1, 1 };
    cr_assert_eq(gguf_writer_add_tensor(ws, "long.weight", 1, ne, PN_TYPE_F16, &err), PN_OK, "%s",
                 err.msg);
    cr_assert_eq(gguf_writer_add_tensor(wp, "long.weight", 1, ne, PN_TYPE_PN4T, &err), PN_OK, "%s",
                 err.msg);
    gguf_writer_set_str(wp, "pn.rotation.type", "hadamard");
    gguf_writer_set_u32(wp, "pn.rotation.block_size", 1024);
    cr_assert_eq(gguf_writer_begin(ws, src_path, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_writer_begin(wp, pn_path, &err), PN_OK, "%s", err.msg);
    float *x = malloc(LR_SEG * sizeof *x);
    uint8_t *h = malloc(LR_SEG * 2);
    uint8_t *q = malloc((size_t)pn_type_row_bytes(PN_TYPE_PN4T, LR_SEG));
    cr_assert(x && h && q);
    tu_rng rng = { 0x10a9 };
    for (int64_t e = 0; e < n; e += LR_SEG) {
        for (int i = 0; i < LR_SEG; i++) {
            uint16_t v = pn_fp16_from_float((float)((tu_rng_uniform(&rng) - 0.5) * 0.04));
            h[2 * i] = (uint8_t)v;
            h[2 * i + 1] = (uint8_t)(v >> 8);
            x[i] = pn_fp16_to_float(v); /* the PN file encodes what the source holds */
        }
        cr_assert_eq(gguf_writer_write(ws, h, LR_SEG * 2, &err), PN_OK, "%s", err.msg);
        pn_hadamard_rotate_row(x, LR_SEG, 1024);
        cr_assert_eq(pn_quantize_row(PN_TYPE_PN4T, x, LR_SEG, q, NULL), PN_OK);
        cr_assert_eq(
            gguf_writer_write(wp, q, (size_t)pn_type_row_bytes(PN_TYPE_PN4T, LR_SEG), &err), PN_OK,
            "%s", err.msg);
    }
    free(x);
    free(h);
    free(q);
    gguf_writer *w[2] = { ws, wp };
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(gguf_writer_close(w[k], &err), PN_OK, "%s", err.msg);
        cr_assert_eq(gguf_writer_commit(w[k], &err), PN_OK, "%s", err.msg);
        gguf_writer_free(w[k]);
    }
}

/* KiB the GGUF reader holds for this file whatever the job: the first bytes
 * it reads at open (the header, and all of a small file), which it keeps. */
static LR_UNUSED long lr_reader_kb(const char *path)
{
    gguf_reader *r = NULL;
    pn_error err = { 0 };
    cr_assert_eq(gguf_reader_open(path, &r, &err), PN_OK, "%s", err.msg);
    long kb = (long)(gguf_reader_bytes_len(r) / 1024);
    gguf_reader_close(r);
    return kb;
}

/* The peak of a job on a row of n weights against a baseline run on a small
 * model: what it needed beyond the readers' buffers must be far below the
 * row (a quarter of it as floats, at most 16 MiB). */
static LR_UNUSED void lr_expect_far_below_row(long base_kb, long peak_kb, long readers_kb,
                                              int64_t n)
{
    const long row_kb = (long)(n * 4 / 1024);
    const long bound = row_kb / 4 < 16 * 1024 ? row_kb / 4 : 16 * 1024;
    cr_log_info("peak RSS: %ld KiB for the small model, %ld KiB for a row of %lld weights, of "
                "which the readers' header buffers %ld KiB",
                base_kb, peak_kb, (long long)n, readers_kb);
    cr_assert_lt(peak_kb - readers_kb - base_kb, bound,
                 "%ld KiB more than for the small model, besides the readers' %ld KiB (the row is "
                 "%ld KiB as floats)",
                 peak_kb - readers_kb - base_kb, readers_kb, row_kb);
}

/* Runs fn(arg) in a child; *status gets its exit status (fn's return, 0..255;
 * 128 + signal when killed). Returns the child's peak RSS in KiB. */
static LR_UNUSED long lr_peak_rss_kb(int (*fn)(void *), void *arg, int *status)
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0)
        _exit(fn(arg) & 255);
    int st = 0;
    struct rusage ru;
    cr_assert_eq(wait4(pid, &st, 0, &ru), pid);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return ru.ru_maxrss;
}

#endif
