/* Progress as a llama.cpp user sees it, the same in every program: one
 * reporter (cmd/cli.h, pn_cli_meter) whose lines read
 *   "<phase> [<item> I/N] <name> P%  R <unit>/s  ETA Ss",
 * on a terminal by default; when stderr is a pipe only with --progress, a
 * line at most every 5 s and one at the end, never a redraw; --quiet
 * silences it and the notes, so that a successful run says nothing on
 * stderr. pn-dequant, pn-check, pn-synth and pn-compare run here on a small
 * model (pn-quantize and pn-convert: convert_cli). */
#include <criterion/criterion.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"

#define SCRIPT PN_SOURCE_DIR "/tools/llama/pn-llama-logits.mjs"
#define SMALL "--layers 2 --width-scale 16 --vocab 300"

static char *g_dir;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A shell command line run in g_dir with the built programs first on PATH
 * (stderr a pipe, as in a batch job); its exit status, *out and *err its
 * output (caller frees), *seconds how long it ran. */
static int sh(char **out, char **err, double *seconds, const char *cmdline)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd '%s' && export PATH='%s':\"$PATH\" && %s", g_dir, PN_BIN_DIR,
             cmdline);
    double t0 = now_s();
    int rc = tu_run(cmd, out, err);
    if (seconds)
        *seconds = now_s() - t0;
    return rc;
}

static void sh_ok(const char *cmdline)
{
    char *o = NULL, *e = NULL;
    int rc = sh(&o, &e, NULL, cmdline);
    cr_assert_eq(rc, 0, "%s: exit %d\n%s%s", cmdline, rc, o, e);
    free(o);
    free(e);
}

static void setup(void)
{
    g_dir = tu_mkdtemp();
    sh_ok("pn-synth --quiet " SMALL " src.gguf && "
          "pn-quantize --quiet --threads 1 --recipe test-fallback src.gguf pn.gguf");
}

static void teardown(void)
{
    tu_rm_rf(g_dir);
    free(g_dir);
}

TestSuite(progress, .init = setup, .fini = teardown, .timeout = 300);

/* A run piped without --progress: it succeeds and says nothing on stderr. */
static void silent_when_piped(const char *cmdline)
{
    char *o = NULL, *e = NULL;
    int rc = sh(&o, &e, NULL, cmdline);
    cr_assert_eq(rc, 0, "%s: exit %d\n%s", cmdline, rc, e);
    cr_assert_str_empty(e, "%s: no progress when stderr is a pipe, without --progress:\n%s",
                        cmdline, e);
    free(o);
    free(e);
}

/* A run with --quiet: it succeeds and stderr is empty, even where a note
 * would be (--threads above the CPUs is capped with one). */
static void silent_when_quiet(const char *cmdline)
{
    char *o = NULL, *e = NULL;
    int rc = sh(&o, &e, NULL, cmdline);
    cr_assert_eq(rc, 0, "%s: exit %d\n%s", cmdline, rc, e);
    cr_assert_str_empty(e, "%s: --quiet: nothing on stderr:\n%s", cmdline, e);
    free(o);
    free(e);
}

/* The progress of a run with --progress and stderr a pipe (err, taking
 * `seconds`): every line but the --threads note (prog's, when given) is
 * one of the reporter's, of `phase` in `unit`, with an ETA; whole lines,
 * no redraw; at most `forced` lines (the first, each step's, the last)
 * plus one per 5 s; the last at 100% with nothing left. */
static void expect_progress(const char *err, double seconds, const char *prog, const char *phase,
                            const char *unit, int forced)
{
    regex_t re;
    cr_assert_eq(regcomp(&re,
                         "^[a-z][a-z. ]*( (tensor|model|mix) [0-9]+/[0-9]+)? [^ ].* "
                         "( *[0-9]+\\.[0-9]|    \\?)%  [0-9][0-9.e+]* [A-Za-z]+/s  "
                         "ETA ([0-9]+s|\\?)$",
                         REG_EXTENDED | REG_NOSUB),
                 0);
    cr_assert(!strchr(err, '\r'), "no redraw when stderr is no terminal: %s", err);
    char *copy = strdup(err), *save = NULL, *last = NULL;
    int lines = 0, notes = 0;
    char want_unit[64];
    snprintf(want_unit, sizeof want_unit, " %s/s  ETA ", unit);
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (prog && strncmp(line, prog, strlen(prog)) == 0 && strstr(line, ": --threads ")) {
            notes++;
            continue;
        }
        cr_assert_eq(regexec(&re, line, 0, NULL, 0), 0, "not a progress line: '%s'\n%s", line, err);
        cr_assert(strncmp(line, phase, strlen(phase)) == 0 || strcmp(phase, "*") == 0,
                  "'%s' is not of %s", line, phase);
        cr_assert(strstr(line, want_unit), "'%s': not in %s", line, unit);
        lines++;
        last = line;
    }
    cr_assert(err[0] == 0 || err[strlen(err) - 1] == '\n', "whole lines: %s", err);
    cr_assert_geq(lines, 1, "--progress: some progress: %s", err);
    int most = forced + 1 + (int)(seconds / 5.0);
    cr_assert_leq(lines, most, "%d lines in %.1f s, at most %d: %s", lines, seconds, most, err);
    cr_assert(strstr(last, "100.0%") && strstr(last, "ETA 0s"), "the last line says it is done: %s",
              last);
    if (prog)
        cr_assert_eq(notes, 1, "the one --threads note: %s", err);
    free(copy);
    regfree(&re);
}

/* The run with --progress; its stderr checked by expect_progress. */
static void shows_progress(const char *cmdline, const char *prog, const char *phase,
                           const char *unit, int forced)
{
    char *o = NULL, *e = NULL;
    double seconds = 0;
    int rc = sh(&o, &e, &seconds, cmdline);
    cr_assert_eq(rc, 0, "%s: exit %d\n%s", cmdline, rc, e);
    expect_progress(e, seconds, prog, phase, unit, forced);
    free(o);
    free(e);
}

Test(progress, pn_dequant_reports_through_the_one_reporter_when_asked_and_quiet_says_nothing)
{
    silent_when_piped("pn-dequant pn.gguf d1.gguf");
    shows_progress("pn-dequant --progress --threads 4096 pn.gguf d2.gguf", "pn-dequant", "decoding",
                   "MB", 2);
    silent_when_quiet("pn-dequant --progress --quiet --threads 4096 pn.gguf d3.gguf");
}

Test(progress, pn_check_reports_through_the_one_reporter_when_asked_and_quiet_says_nothing)
{
    silent_when_piped("pn-check pn.gguf");
    shows_progress("pn-check --progress --threads 4096 pn.gguf", "pn-check", "checking", "MB", 2);
    silent_when_quiet("pn-check --progress --quiet --threads 4096 pn.gguf");
    /* two files: a line for each, the reporter starting again */
    char *o = NULL, *e = NULL;
    int rc = sh(&o, &e, NULL, "pn-check --progress pn.gguf src.gguf");
    cr_assert_eq(rc, 0, "src.gguf has no PN keys: a warning, no error: %d\n%s%s", rc, o, e);
    cr_assert(strstr(e, "checking pn.gguf ") && strstr(e, "checking src.gguf "), "%s", e);
    free(o);
    free(e);
}

Test(progress, pn_synth_reports_through_the_one_reporter_when_asked_and_quiet_says_nothing)
{
    silent_when_piped("pn-synth " SMALL " s1.gguf");
    shows_progress("pn-synth --progress --threads 4096 " SMALL " s2.gguf", "pn-synth", "generating",
                   "w", 2);
    silent_when_quiet("pn-synth --progress --quiet --threads 4096 " SMALL " s3.gguf");
    silent_when_quiet("pn-synth --quiet --hf " SMALL " hf/");
}

Test(progress,
     pn_compare_reports_the_positions_llama_cpp_evaluated_when_asked_and_quiet_says_nothing)
{
    TU_REQUIRE_LLAMA(SCRIPT, NULL);
    silent_when_piped("pn-compare --threads 1 src.gguf pn.gguf");
    /* a line as each step begins (the source's run, the decoding, the
     * file's run) and the last, then one per 5 s at most */
    char *o = NULL, *e = NULL;
    double seconds = 0;
    int rc = sh(&o, &e, &seconds, "pn-compare --progress --threads 1 src.gguf pn.gguf");
    cr_assert_eq(rc, 0, "exit %d\n%s", rc, e);
    expect_progress(e, seconds, NULL, "*", "positions", 4);
    cr_assert(strncmp(e, "llama.cpp model 1/2 src.gguf ", 29) == 0, "the source's run first: %s",
              e);
    cr_assert(strstr(e, "\ndecoding model 2/2 pn.gguf ") &&
                  strstr(e, "\nllama.cpp model 2/2 pn.gguf "),
              "each step of the file: %s", e);
    /* the fixed set is 4 sequences of 64 positions, 512 over both runs:
     * after the source's run half of them are done */
    const char *dec = strstr(e, "\ndecoding model 2/2 pn.gguf ");
    const char *pct = dec ? strstr(dec, "%") : NULL;
    cr_assert(pct && pct - dec > 5 && strncmp(pct - 5, " 50.0%  ", 8) == 0 &&
                  !memchr(dec + 1, '\n', (size_t)(pct - dec - 1)),
              "%s", e);
    free(o);
    free(e);
    silent_when_quiet("pn-compare --progress --quiet --threads 4096 src.gguf pn.gguf");
}
