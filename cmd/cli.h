/* cli.h - what every program does the same way at its edges: a progress
 * line on stderr, the check that what it wrote to stdout arrived, and the
 * exit status.
 *
 * Exit status of pn-quantize and pn-dequant (as llama.cpp's tools): 0
 * done, 1 an error while doing it (a file that cannot be read, a full
 * disk), 2 a usage error: an option, or a path refused before anything is
 * done (the output is the input or one of its files), 130 interrupted.
 * pn-check's 1 means an invalid file, so its errors are 2.
 *
 * Options: each program has one table (pn_cli_option) that getopt_long
 * parses with and that the usage's option list is printed from, so the
 * usage names exactly the options a program takes. cli.c is linked into
 * every program (cmd/CMakeLists.txt).
 *
 * Text that comes from the user or a file is printed in the terminal-safe
 * form (common/text.h).
 */
#ifndef PN_CMD_CLI_H
#define PN_CMD_CLI_H

#include <errno.h>
#include <stdbool.h>
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

/* One option of a program: its getopt_long entry and its lines of the
 * usage text. */
typedef struct pn_cli_option {
    const char *name;   /* the long name, without "--"; NULL ends a table */
    int has_arg;        /* no_argument or required_argument */
    int id;             /* what pn_cli_next returns for it: 'h' (also -h), or 256 and up */
    const char *help;   /* its lines of the usage: "  --name ARG   what it does\n" ... */
} pn_cli_option;

/* A program's usage: head (down to "options:\n"), the lines of each option
 * of the table in its order, then tail. */
typedef struct pn_cli_program {
    const char *name;
    const char *head;
    const pn_cli_option *options;
    const char *tail;
} pn_cli_program;

/* Prints the usage to f. */
void pn_cli_usage(FILE *f, const pn_cli_program *p);

/* The next option of argv, as getopt_long finds it with the program's
 * table (-h the one short option; GNU order: options may follow the
 * positional arguments, "--" ends them; no message of getopt's own).
 * Returns the option's id, '?' for an unknown option or a missing or
 * unexpected value (optopt and argv[optind - 1] tell which), -1 at the end;
 * the positional arguments are then argv[optind ...]. */
int pn_cli_next(const pn_cli_program *p, int argc, char **argv);

/* --help: the usage on stdout, flushed and closed. Returns 0, or
 * fail_status after "<prog>: cannot write to standard output: <why>". */
int pn_cli_help(const pn_cli_program *p, int fail_status);

/* An option's integer value in [lo, hi]. false after "<prog>: <opt>: '<v>'
 * is not an integer in [lo, hi]" on stderr (v terminal-safe). */
bool pn_cli_long(const char *prog, const char *opt, const char *v, long lo, long hi, long *out);

/* --threads N: N in [1, 4096] into *threads; false after the message. */
bool pn_cli_threads(const char *prog, const char *v, int *threads);

/* An option pn_cli_next returned '?' for, refused: "<prog>: option '--x'
 * needs a value or is unknown" (or "unknown option '-x'") and the usage,
 * on stderr. Returns 2, the exit status. */
int pn_cli_refuse_option(const pn_cli_program *p, char **argv);

/* Flushes and closes stdout. Returns 0, or 1 after "<prog>: error: writing
 * to standard output: <why>" (a closed pipe, a full disk). */
int pn_cli_close_stdout(const char *prog);

#endif
