/* cli.h - what every program does the same way at its edges: a progress
 * line on stderr, the check that what it wrote to stdout arrived, the
 * signals that stop it, and the exit status.
 *
 * Exit status, one rule for every program (docs/usage.md#exit-status):
 *   0    done (pn-check: the file is valid);
 *   1    what the files hold, or the system, stops the job: an input that
 *        is missing, unreadable, damaged or of the wrong kind, a model that
 *        does not fit the request (more promotions than candidates, a
 *        --target-size even no promotion fits, a --promote-list name the
 *        model lacks), an output that exists without --force, a full disk
 *        (pn-check: the file is invalid or unreadable; its verdict says
 *        which);
 *   2    the command line itself, whatever the files hold: an unknown
 *        option, a bad or missing value, a missing or extra argument,
 *        options that do not go together, one path given as an input and
 *        as the output (or twice);
 *   128 + N  interrupted by signal N (130 SIGINT, 143 SIGTERM, 129 SIGHUP).
 * The library says which with its status: PN_ERR_USAGE is 2, every other
 * error 1 (pn_cli_exit_status); tests/programs/test_program_conventions.c
 * (exit_status/) holds the table of every refusal of every program.
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
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/text.h"
#include "gguf/gguf_split.h"
#include "mix/size.h"

/* The one progress reporter of every program: a line on stderr
 *   "<phase> [<item> I/N] [<name>] P%  R <unit>/s  ETA Ss"
 * ("quantizing tensor 12/28 blk.0.ffn_up.weight  41.3%  9.6e+07 w/s  ETA 12s",
 * "decoding out.gguf  63.0%  412 MB/s  ETA 3s"), redrawn in place at most 4
 * times a second on a terminal, else a new line at most once every 5 s (and
 * at the end), so a log of a long run stays short. Shown on a terminal by
 * default, with --progress when stderr is no terminal, never under --quiet
 * (pn_cli_meter_open). P and the ETA are "?" while nothing is measured. */
typedef struct pn_cli_meter {
    bool on;      /* lines are shown (pn_cli_meter_open) */
    bool tty;     /* stderr is a terminal: redraw in place */
    bool drawn;   /* a line is on the terminal (pn_cli_meter_end clears it) */
    double last;  /* elapsed seconds of the last line */
    double start; /* pn_cli_now() when the measure began (pn_cli_meter_show) */
} pn_cli_meter;

/* A meter for stderr as it is (isatty), shown (on). */
void pn_cli_meter_init(pn_cli_meter *m);
/* The same, on only when not quiet and stderr is a terminal or forced
 * (--progress); the clock of pn_cli_meter_show starts now. */
void pn_cli_meter_open(pn_cli_meter *m, bool quiet, bool forced);
/* Whether a line is due at `elapsed` seconds; `always` (the last step, a
 * phase that must show each step) makes it due. */
bool pn_cli_meter_due(pn_cli_meter *m, double elapsed, bool always);
/* The line: item (NULL: none) index of n, name (NULL: none; terminal-safe,
 * padded to 36 bytes; a longer one as "..." and its last 33), done of total (in unit), the rate and the time left
 * from elapsed. */
void pn_cli_meter_line(pn_cli_meter *m, const char *phase, const char *item, size_t index, size_t n,
                       const char *name, double done, double total, double elapsed,
                       const char *unit);
/* pn_cli_meter_line when the meter is on and a line is due, elapsed being
 * the time since pn_cli_meter_open (or the last pn_cli_meter_restart); the
 * line at done >= total is always due. */
void pn_cli_meter_show(pn_cli_meter *m, const char *phase, const char *item, size_t index, size_t n,
                       const char *name, double done, double total, const char *unit);
/* A new measure from now (the next line is due at once). */
void pn_cli_meter_restart(pn_cli_meter *m);
/* Clears a line drawn in place, before a message or the end of the run. */
void pn_cli_meter_end(pn_cli_meter *m);
/* Seconds since an arbitrary start (CLOCK_MONOTONIC). */
double pn_cli_now(void);

/* The number of CPUs this process may run on (sched_getaffinity; the
 * online CPUs when that fails; at least 1). */
int pn_cli_usable_cpus(void);

/* --threads N (opt) above the usable CPUs is capped to them (more threads
 * than CPUs only take turns; no output depends on the count) with one note
 * "<prog>: --threads N: this process may use C CPUs; using C" on stderr
 * unless quiet. 0 (the default: all) is left as it is. */
void pn_cli_cap_threads(const char *prog, const char *opt, int *threads, bool quiet);

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

/* What every size option says its values are (docs/usage.md#sizes). */
#define PN_CLI_SIZE_LIST                                                                           \
    "50G or 500M as gguf-split takes them, 2.5GB, 13e9 (powers of 10), 48GiB (powers of 2) or "    \
    "4096 (bytes)"
#define PN_CLI_SIZE_FORMS "expected a size above 0: " PN_CLI_SIZE_LIST

/* The value of a size option (--split-max-size, --target-size,
 * --shard-size): the one parser, mix/size.h, and above 0. 0 with *why set
 * when it is not such a size. */
static inline uint64_t pn_cli_split_size(const char *text, const char **why)
{
    uint64_t v = 0;
    pn_error e;
    pn_status st = pn_parse_size(text, &v, &e);
    if (st == PN_OK && v > 0)
        return v;
    /* the syntax first ("12,6G": no comma), then the range */
    *why = st != PN_OK && !strstr(e.msg, "larger than")
               ? "not a size (a number, '.' before its decimals, then its unit, in one word): "
                 "write " PN_CLI_SIZE_LIST
               : PN_CLI_SIZE_FORMS;
    return 0;
}

/* A size option's value into *out (pn_cli_split_size); false after
 * "<prog>: error: <opt>: '<v>': expected a size ..." on stderr. */
static inline bool pn_cli_size(const char *prog, const char *opt, const char *v, uint64_t *out)
{
    const char *why = "";
    if ((*out = pn_cli_split_size(v, &why)))
        return true;
    fprintf(stderr, "%s: error: %s: '", prog, opt);
    pn_fput_safe(stderr, v);
    fprintf(stderr, "': %s\n", why);
    return false;
}

/* The exit status of a job that failed with st (see above). */
static inline int pn_cli_exit_status(pn_status st)
{
    return st == PN_ERR_INTERRUPTED ? 130 : st == PN_ERR_USAGE ? 2 : 1;
}

/* The same, with the signal that interrupted it (the program's cancel flag
 * holds its number): 128 + the signal, as a shell reports a program the
 * signal killed (SIGINT 130, SIGTERM 143, SIGHUP 129). */
static inline int pn_cli_exit_status_signal(pn_status st, int sig)
{
    return st == PN_ERR_INTERRUPTED && sig > 0 ? 128 + sig : pn_cli_exit_status(st);
}

/* The one signal trap of every program that stops its work itself:
 * SIGINT, SIGTERM and SIGHUP (a closed terminal, a dropped ssh session)
 * set the flag returned, which the library's cancel pointer watches; the
 * run then stops, removes what it had begun (temporary files and folders)
 * and the program exits 128 + the signal (pn_cli_exit_status_signal). No
 * SA_RESTART: a read blocked on a child (llama.cpp) returns and sees the
 * flag. SIGPIPE and SIGXFSZ are ignored (pn_cli_ignore_write_signals).
 * Returns the flag: 0 until a signal, then its number. The programs' one
 * piece of process-wide state: a signal handler can reach nothing else. */
volatile sig_atomic_t *pn_cli_trap_signals(void);

/* SIGPIPE and SIGXFSZ ignored: a write to a closed pipe or past a file size
 * limit (ulimit -f) fails (EPIPE, EFBIG) and is reported and cleaned up
 * like a full disk, instead of the signal killing the program with its
 * temporary files left. Alone, for a program that writes no file and has no
 * cancel (pn-check): SIGINT, SIGTERM and SIGHUP keep their own action,
 * which ends it leaving nothing, and a shell reports 128 + the signal. */
void pn_cli_ignore_write_signals(void);

/* "<prog>: error: <msg>" on stderr, msg in the terminal-safe form: the one
 * prefix of every program's errors. */
static inline void pn_cli_error(const char *prog, const char *msg)
{
    fprintf(stderr, "%s: error: ", prog);
    pn_fput_safe(stderr, msg);
    fputc('\n', stderr);
}

/* One option of a program: its getopt_long entry and its lines of the
 * usage text. */
typedef struct pn_cli_option {
    const char *name; /* the long name, without "--"; NULL ends a table */
    int has_arg;      /* no_argument or required_argument */
    int id;           /* what pn_cli_next returns for it: 'h' (also -h), or 256 and up */
    const char *help; /* its lines of the usage: "  --name ARG   what it does\n" ... */
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
 * fail_status after "<prog>: error: cannot write to standard output: <why>". */
int pn_cli_help(const pn_cli_program *p, int fail_status);

/* An option's integer value in [lo, hi]. false after "<prog>: error: <opt>:
 * '<v>' is not an integer in [lo, hi]" on stderr (v terminal-safe). */
bool pn_cli_long(const char *prog, const char *opt, const char *v, long lo, long hi, long *out);

/* --threads N: N in [1, 4096] into *threads; false after the message. */
bool pn_cli_threads(const char *prog, const char *v, int *threads);

/* An option pn_cli_next returned '?' for, refused on stderr, the one style
 * of every program's refusals: "<prog>: error: option '--x' needs a value"
 * (or "takes no value"), "<prog>: error: unknown option '--promte'; did you
 * mean '--promote'?" (the nearest name, when it is a slip of a letter or
 * two), "<prog>: error: option '--pro' is ambiguous; it is the start of
 * --promote --promote-list --progress", then "Try '<prog> --help'.".
 * Returns 2, the exit status. */
int pn_cli_refuse_option(const pn_cli_program *p, char **argv);

/* A size option's value written apart from its unit (--target-size 12.6 GB
 * unquoted: "GB" would be taken for another argument, a source or an
 * output): true after "<prog>: error: --target-size 12.6 'GB': a size is one
 * word ..." and the help hint on stderr (exit 2). Looks at argv as typed,
 * before getopt_long reorders it. */
bool pn_cli_stray_size_unit(const char *prog, int argc, char **argv);

/* "Try '<prog> --help'." on stderr, after a usage message. Returns 2. */
int pn_cli_try_help(const char *prog);

/* The positional arguments argv[optind..argc): at least min, at most max
 * (max < 0: no limit). names is how the usage names them, one word each
 * ("SRC DST.gguf"). false after "<prog>: error: expected NAMES: DST.gguf is
 * missing" or "...: 'x' is one argument too many" and the help hint. */
bool pn_cli_positional(const char *prog, int argc, char **argv, int min, int max,
                       const char *names);

/* --recipe ARG: a file (ARG names one, or holds '/' or ends in .mix), or
 * the name of a shipped recipe, <dir of the program>/../share/pn-quantize/
 * recipes/ARG.mix (the build's share/ and an installed prefix's alike).
 * Returns the path (ARG itself, or the shipped file's in buf), or NULL
 * after "<prog>: error: --recipe ARG: no such file nor shipped recipe; shipped:
 * ..." on stderr. */
const char *pn_cli_recipe_path(const char *prog, const char *arg, char *buf, size_t size);

/* <the folder of this program's executable><rel><name>, malloc'd; NULL when
 * /proc/self/exe cannot be read or out of memory. */
char *pn_cli_exe_path(const char *rel, const char *name);

/* The llama.cpp harness beside the program, <dir of the executable>/../
 * share/pn-quantize/llama/pn-llama-logits.mjs (the build's share/ and an
 * installed prefix's alike); malloc'd, NULL when /proc/self/exe cannot be
 * read. */
char *pn_cli_llama_script(void);

/* Flushes and closes stdout. Returns 0, or 1 after "<prog>: error: writing
 * to standard output: <why>" (a closed pipe, a full disk). */
int pn_cli_close_stdout(const char *prog);

#endif
