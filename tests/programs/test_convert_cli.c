/* pn-convert as a llama.cpp user runs it (--dry-run, --threads, progress,
 * a signal), and --threads above the CPUs a process may use in every
 * program: capped with one note, the same bytes. Small checkpoints made by
 * pn-synth --hf, run through the built programs. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "quant/types.h"
#include "test_util.h"

#define BIN PN_BIN_DIR
#define FALLBACK_RECIPE PN_SOURCE_DIR "/recipes/test-fallback.mix"
#define SYNTH_HF "pn-synth --quiet --hf --layers 2 --width-scale 16 --vocab 300 X/"

static char *g_dir;
static void setup(void)
{
    g_dir = tu_mkdtemp();
}
static void teardown(void)
{
    tu_rm_rf(g_dir);
    free(g_dir);
}

/* A shell command line (formatted) run in g_dir with the built programs
 * first on PATH; its exit status, *out and *err its output (caller frees). */
static int sh(char **out, char **err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int sh(char **out, char **err, const char *fmt, ...)
{
    char body[8192], cmd[12000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd '%s' && export PATH='%s':\"$PATH\" && %s", g_dir, BIN, body);
    return tu_run(cmd, out, err);
}

static void sh_ok(const char *cmdline)
{
    char *o = NULL, *e = NULL;
    int rc = sh(&o, &e, "%s", cmdline);
    cr_assert_eq(rc, 0, "%s: exit %d\n%s%s", cmdline, rc, o, e);
    free(o);
    free(e);
}

static bool same_bytes(const char *a, const char *b)
{
    size_t na, nb;
    char *pa = tu_read_file(tu_join_static(g_dir, a), &na);
    char *pb = tu_read_file(tu_join_static(g_dir, b), &nb);
    bool same = na == nb && memcmp(pa, pb, na) == 0;
    free(pa);
    free(pb);
    return same;
}

static int count_lines(const char *text, const char *holding)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, holding)); p += strlen(holding))
        n++;
    return n;
}

static void expect_file_text(const char *name, const char *want)
{
    size_t n;
    char *got = tu_read_file(tu_join_static(g_dir, name), &n);
    cr_assert_str_eq(got, want, "%s was changed", name);
    free(got);
}

TestSuite(convert_cli, .init = setup, .fini = teardown, .timeout = 240);

Test(convert_cli, a_dry_run_lists_each_tensor_the_real_run_writes_and_writes_nothing)
{
    sh_ok(SYNTH_HF " && pn-convert --quiet X real.gguf");
    int entries = tu_count_files(g_dir);
    char *o = NULL, *e = NULL;
    int rc = sh(&o, &e, "pn-convert --dry-run X never.gguf");
    cr_assert_eq(rc, 0, "%s", e);
    cr_assert_str_empty(e, "a dry run of a free DST has nothing to say on stderr: %s", e);
    cr_assert_eq(tu_count_files(g_dir), entries, "nothing written");
    cr_assert(!tu_exists(tu_join_static(g_dir, "never.gguf")));
    cr_assert(strncmp(o, "tensor ", 7) == 0, "a header line first: %s", o);

    /* every tensor of the file the real run wrote, in its order, with its
     * type, shape and bytes as the GGUF reader reads them */
    gguf_reader *r = NULL;
    pn_error err = { 0 };
    cr_assert_eq(gguf_reader_open(tu_join_static(g_dir, "real.gguf"), &r, &err), PN_OK, "%s",
                 err.msg);
    const char *at = strchr(o, '\n') + 1;
    size_t n = gguf_reader_n_tensors(r);
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        char name[256], type[16], shape[96];
        unsigned long long bytes;
        cr_assert_eq(sscanf(at, "%255s %15s %95s %llu", name, type, shape, &bytes), 4,
                     "line %zu: %.80s", i, at);
        cr_assert_str_eq(name, t->name, "line %zu in the real run's order", i);
        cr_assert_str_eq(type, pn_type_traits_get(t->type)->name, "%s", name);
        char want_shape[96];
        int k = snprintf(want_shape, sizeof want_shape, "%lld", (long long)t->ne[0]);
        for (uint32_t d = 1; d < t->n_dims; d++)
            k += snprintf(want_shape + k, sizeof want_shape - (size_t)k, "x%lld",
                          (long long)t->ne[d]);
        cr_assert_str_eq(shape, want_shape, "%s", name);
        cr_assert_eq(bytes, t->size, "%s", name);
        at = strchr(at, '\n') + 1;
    }
    gguf_reader_close(r);
    struct stat sb;
    cr_assert_eq(stat(tu_join_static(g_dir, "real.gguf"), &sb), 0);
    char total[160];
    snprintf(total, sizeof total, "total: %zu tensors, ", n);
    cr_assert(strncmp(at, total, strlen(total)) == 0, "the total after the list: %s", at);
    snprintf(total, sizeof total, "bytes of tensor data, %lld bytes in 1 file (dry run",
             (long long)sb.st_size);
    cr_assert(strstr(at, total), "the total is the real run's file size %lld: %s",
              (long long)sb.st_size, at);
    free(o);
    free(e);
}

Test(convert_cli, a_dry_run_refuses_an_existing_dst_as_the_real_run_does_and_leaves_it)
{
    sh_ok(SYNTH_HF " && echo old > o.gguf");
    char *o = NULL, *e = NULL;
    int rc = sh(&o, &e, "pn-convert --dry-run X o.gguf");
    cr_assert_eq(rc, 1, "%s", e);
    cr_assert_str_eq(e, "pn-convert: error: o.gguf: output exists; use --force to replace it\n");
    cr_assert_str_empty(o, "refused before it lists anything: %s", o);
    free(o);
    free(e);
    rc = sh(&o, &e, "pn-convert --dry-run --force X o.gguf");
    cr_assert_eq(rc, 0, "%s", e);
    cr_assert_str_empty(e, "with --force the real run would replace it: %s", e);
    cr_assert(strstr(o, "total: "), "the list is what a dry run prints: %s", o);
    free(o);
    free(e);
    /* the real run refuses it as the dry run said */
    rc = sh(&o, &e, "pn-convert X o.gguf");
    cr_assert_eq(rc, 1, "%s", e);
    cr_assert(strstr(e, "exists"), "%s", e);
    free(o);
    free(e);
    /* a dry run whose DST is a file of SRC is refused as the real run is */
    rc = sh(&o, &e, "pn-convert --dry-run --force X X/config.json");
    cr_assert_eq(rc, 2, "%s", e);
    free(o);
    free(e);
    expect_file_text("o.gguf", "old\n");
}

Test(convert_cli, the_bytes_do_not_depend_on_threads)
{
    sh_ok(SYNTH_HF " && pn-convert --quiet --threads 1 X t1.gguf && "
                   "pn-convert --quiet --threads 2 X t2.gguf && pn-convert --quiet X t0.gguf && "
                   "pn-convert --quiet --threads 4096 X tmax.gguf");
    cr_assert(same_bytes("t1.gguf", "t2.gguf"));
    cr_assert(same_bytes("t1.gguf", "t0.gguf"));
    cr_assert(same_bytes("t1.gguf", "tmax.gguf"));
    char *o = NULL, *e = NULL;
    int rc = sh(&o, &e, "pn-convert --threads 0 X t.gguf");
    cr_assert_eq(rc, 2);
    cr_assert_str_eq(e, "pn-convert: error: --threads: '0' is not an integer in [1, 4096]\n");
    free(o);
    free(e);
    rc = sh(&o, &e, "pn-convert --help");
    cr_assert_eq(rc, 0);
    cr_assert(strstr(o, "--threads N") && strstr(o, "one thread whatever N is"), "%s", o);
    cr_assert(strstr(o, "--dry-run") && strstr(o, "--progress"), "%s", o);
    free(o);
    free(e);
}

Test(convert_cli, progress_goes_to_stderr_at_a_bounded_rate_with_an_eta_and_quiet_silences_it)
{
    sh_ok(SYNTH_HF);
    char *o = NULL, *e = NULL;
    int rc = sh(&o, &e, "pn-convert --progress X p.gguf");
    cr_assert_eq(rc, 0, "%s", e);
    cr_assert(strstr(o, "pn-convert: p.gguf: "), "%s", o);
    /* not a terminal: whole lines, the first chunk's and the last's (a
     * line at most every 5 s between them: this run takes far less) */
    int lines = count_lines(e, "\n");
    cr_assert_eq(count_lines(e, "converting tensor "), lines, "%s", e);
    cr_assert(lines >= 1 && lines <= 3, "%d lines: %s", lines, e);
    cr_assert(!strchr(e, '\r'), "no redraw when stderr is no terminal");
    cr_assert(strstr(e, "MB/s  ETA "), "%s", e);
    const char *last = e + strlen(e) - 1;
    while (last > e && last[-1] != '\n')
        last--;
    cr_assert(strstr(last, "100.0%"), "the last line says it is done: %s", last);
    free(o);
    free(e);
    rc = sh(&o, &e, "pn-convert X q.gguf");
    cr_assert_eq(rc, 0, "%s", e);
    cr_assert_str_empty(e, "no progress when stderr is no terminal, unless --progress");
    free(o);
    free(e);
    rc = sh(&o, &e, "pn-convert --progress --quiet X r.gguf");
    cr_assert_eq(rc, 0, "%s", e);
    cr_assert_str_empty(e, "--quiet: no progress: %s", e);
    cr_assert_str_empty(o);
    free(o);
    free(e);
    cr_assert(same_bytes("p.gguf", "q.gguf"));
    /* pn-quantize prints its progress through the same reporter */
    rc = sh(&o, &e, "pn-quantize --progress --threads 1 --recipe test-fallback p.gguf pq.gguf");
    cr_assert_eq(rc, 0, "%s", e);
    cr_assert(strstr(e, "quantizing tensor ") && strstr(e, " w/s  ETA "), "%s", e);
    free(o);
    free(e);
}

/* Runs the program (argv: its path first, --progress among the options)
 * with its stderr a full pipe, so that it stops in its first progress
 * line, in the middle of its work; SIGTERM then. Returns the exit status as
 * a shell reports it (128 + the signal when the signal killed it); *err
 * what it said after the filler. */
static int killed_in_the_middle(char *const argv[], char **err)
{
    int fds[2];
    const size_t filled = tu_full_pipe(fds);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        if (chdir(g_dir) != 0)
            _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    sleep(2); /* long past the signal handlers' setup; blocked in the first line */
    cr_assert_eq(kill(pid, SIGTERM), 0);
    *err = tu_drain_pipe(fds[0], filled);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Test(convert_cli, sigterm_exits_143_and_says_dst_is_as_it_was)
{
    sh_ok(SYNTH_HF " && echo old > o.gguf");
    char *e = NULL;
    char *const argv[] = { BIN "/pn-convert", "--progress", "--force", "X", "o.gguf", NULL };
    int rc = killed_in_the_middle(argv, &e);
    cr_assert_eq(rc, 143, "128 + SIGTERM, an exit of its own: %d\n%s", rc, e);
    cr_assert(strstr(e, "pn-convert: interrupted: nothing was written to o.gguf; what was "
                        "there is as it was\n"),
              "%s", e);
    free(e);
    expect_file_text("o.gguf", "old\n");
    cr_assert_eq(tu_count_temporary_files(g_dir), 0, "no temporary file left");
}

Test(convert_cli, pn_check_stopped_by_sigterm_reports_143_and_leaves_nothing)
{
    /* pn-check writes nothing: SIGTERM's own action ends it, which a shell
     * reports as 143 like the programs that stop their work themselves */
    sh_ok(SYNTH_HF " && pn-convert --quiet X c.gguf");
    int entries = tu_count_files(g_dir);
    char *e = NULL;
    char *const argv[] = { BIN "/pn-check", "--progress", "c.gguf", NULL };
    int rc = killed_in_the_middle(argv, &e);
    cr_assert_eq(rc, 143, "128 + SIGTERM: %d\n%s", rc, e);
    free(e);
    cr_assert_eq(tu_count_files(g_dir), entries, "nothing left");
}

/* ---- --threads above the usable CPUs ---- */

TestSuite(thread_cap, .init = setup, .fini = teardown, .timeout = 240);

/* Runs a command line under taskset -c 0 (one usable CPU). */
static int on_one_cpu(char **out, char **err, const char *cmdline)
{
    return sh(out, err, "taskset -c 0 %s", cmdline);
}

Test(thread_cap, every_program_caps_threads_at_the_usable_cpus_with_one_note)
{
    sh_ok(SYNTH_HF " && pn-synth --quiet --layers 2 --width-scale 16 --vocab 300 src.gguf && "
                   "pn-quantize --quiet --threads 1 --recipe test-fallback src.gguf ref.gguf");
    static const struct {
        const char *prog, *cmdline;
        int rc;
    } runs[] = {
        { "pn-quantize",
          "pn-quantize --threads 8 --recipe test-fallback src.gguf q8.gguf >/dev/null", 0 },
        { "pn-dequant", "pn-dequant --threads 8 ref.gguf d8.gguf >/dev/null", 0 },
        { "pn-check", "pn-check --threads 8 ref.gguf >/dev/null", 0 },
        { "pn-convert", "pn-convert --threads 8 X c8.gguf >/dev/null", 0 },
        { "pn-synth", "pn-synth --threads 8 --layers 2 --width-scale 16 --vocab 300 s8.gguf", 0 },
        { "pn-compare", "pn-compare --threads 8 missing.gguf missing-pn.gguf", 1 },
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        char *o = NULL, *e = NULL;
        int rc = on_one_cpu(&o, &e, runs[k].cmdline);
        cr_assert_eq(rc, runs[k].rc, "%s: %d\n%s", runs[k].cmdline, rc, e);
        char note[160];
        snprintf(note, sizeof note, "%s: --threads 8: this process may use 1 CPU; using 1\n",
                 runs[k].prog);
        cr_assert_eq(count_lines(e, "--threads"), 1, "one note: %s", e);
        cr_assert(strncmp(e, note, strlen(note)) == 0, "%s: the note first:\n%s", runs[k].prog, e);
        free(o);
        free(e);
    }
    /* the same bytes as one thread writes */
    cr_assert(same_bytes("q8.gguf", "ref.gguf"));
    sh_ok("pn-dequant --quiet --threads 1 ref.gguf d1.gguf && pn-convert --quiet X c1.gguf && "
          "pn-synth --quiet --threads 1 --layers 2 --width-scale 16 --vocab 300 s1.gguf");
    cr_assert(same_bytes("d8.gguf", "d1.gguf"));
    cr_assert(same_bytes("c8.gguf", "c1.gguf"));
    cr_assert(same_bytes("s8.gguf", "s1.gguf"));
}

Test(thread_cap, quiet_silences_the_note_and_threads_within_the_cpus_have_none)
{
    sh_ok("pn-synth --quiet --layers 2 --width-scale 16 --vocab 300 src.gguf");
    char *o = NULL, *e = NULL;
    int rc = on_one_cpu(&o, &e,
                        "pn-quantize --quiet --threads 8 --recipe test-fallback src.gguf q.gguf");
    cr_assert_eq(rc, 0, "%s", e);
    cr_assert_str_empty(e, "--quiet: %s", e);
    free(o);
    free(e);
    rc = on_one_cpu(&o, &e, "pn-dequant --quiet --threads 8 q.gguf d.gguf");
    cr_assert_eq(rc, 0, "%s", e);
    cr_assert_str_empty(e, "--quiet: %s", e);
    free(o);
    free(e);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "pn-dequant --threads %d q.gguf d2.gguf", tu_usable_cpus());
    rc = sh(&o, &e, "%s", cmd);
    cr_assert_eq(rc, 0, "%s", e);
    cr_assert(!strstr(e, "--threads"), "as many threads as CPUs: no note: %s", e);
    free(o);
    free(e);
}
