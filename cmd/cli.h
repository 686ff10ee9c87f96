/* cli.h - what every program does the same way at its edges: a progress
 * line on stderr, the check that what it wrote to stdout arrived, and the
 * exit status.
 *
 * Exit status of pn-quantize and pn-dequant (as llama.cpp's tools): 0
 * done, 1 an error while doing it (a file that cannot be read, a full
 * disk), 2 a usage error: an option, or a path refused before anything is
 * done (the output is the input or one of its files), 130 interrupted.
 * pn-check's 1 means an invalid file, so its errors are 2; pn-synth and
 * pn-compare take their settings from options only, so every failure of
 * their job is 1.
 *
 * Header-only (each cmd/<name>.c is a program of its own). Text that comes
 * from the user or a file is printed in the terminal-safe form
 * (common/text.h).
 */
#ifndef PN_CMD_CLI_H
#define PN_CMD_CLI_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/text.h"
#include "gguf/gguf_split.h"
#include "mix/size.h"

/* A job's progress as lines on stderr: "<prog>: <path>: N% of B <what>",
 * at the start and at each further percent. */
typedef struct pn_cli_progress {
    const char *prog, *path, *what;
    int last_percent;
} pn_cli_progress;

static inline void pn_cli_show_progress(void *ctx, uint64_t done, uint64_t total)
{
    pn_cli_progress *p = ctx;
    int percent = total ? (int)(done * 100 / total) : 100;
    if (done != 0 && percent == p->last_percent)
        return;
    p->last_percent = percent;
    fprintf(stderr, "%s: ", p->prog);
    pn_fput_safe(stderr, p->path);
    fprintf(stderr, ": %3d%% of %llu %s\n", percent, (unsigned long long)total, p->what);
}

/* Flushes and closes stdout. Returns 0 when everything written to it
 * arrived; otherwise -1 with the reason in *why (a full disk, a file size
 * limit: output that is lost is an error, not a success). */
static inline int pn_cli_finish_stdout(const char **why)
{
    errno = 0;
    int bad = fflush(stdout) != 0;
    int e = errno;
    bad |= ferror(stdout) != 0;
    if (fclose(stdout) != 0) {
        bad = 1;
        if (!e)
            e = errno;
    }
    *why = e ? strerror(e) : "write error";
    return bad ? -1 : 0;
}

/* The argument of --split-max-size: gguf-split's form (a whole number and
 * M or G: 500M, 50G, powers of 10) or the project's sizes (mix/size.h:
 * 48GiB, 2.5GB, 4096). 0 with *why set when it is neither or is zero. */
static inline uint64_t pn_cli_split_size(const char *text, const char **why)
{
    uint64_t v = 0;
    pn_error e;
    if (gguf_split_parse_size(text, &v, &e) == PN_OK)
        return v;
    if (pn_parse_size(text, &v, &e) == PN_OK && v > 0)
        return v;
    *why = "expected a size: 50G or 500M as gguf-split takes it (powers of 10), or 48GiB, "
           "2.5GB, 4096 (bytes)";
    return 0;
}

/* The exit status of a job that failed with st (see above). */
static inline int pn_cli_exit_status(pn_status st)
{
    return st == PN_ERR_INTERRUPTED ? 130 : st == PN_ERR_USAGE ? 2 : 1;
}

/* "<prog>: <msg>" on stderr, msg in the terminal-safe form. */
static inline void pn_cli_error(const char *prog, const char *msg)
{
    fprintf(stderr, "%s: ", prog);
    pn_fput_safe(stderr, msg);
    fputc('\n', stderr);
}

#endif
