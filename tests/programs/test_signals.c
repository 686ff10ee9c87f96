/* SIGHUP (a closed terminal, a dropped ssh session) stops every program
 * that writes files as SIGINT and SIGTERM do (issue 44, item 3: one trap,
 * cmd/cli.h pn_cli_trap_signals): the program ends itself with 129 (128 +
 * SIGHUP), says it was interrupted, and leaves nothing: no output at the
 * target, no temporary file beside it, no temporary folder in TMPDIR (a
 * fresh folder here).
 *
 * The signal lands in the middle of the work: the program's stderr is a
 * pipe filled beforehand, so it stops in its first progress line (pn-compare:
 * while a stand-in "node" for llama.cpp runs on the decoded model, which
 * is then in its temporary folder); the signal is sent once the program
 * catches SIGHUP (SigCgt of /proc/PID/status), so a default action that
 * killed it could not pass for the trap. pn-check writes no file and has no
 * trap: the stop signals end it (tests/programs/test_convert_cli.c). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compare/compare.h"
#include "fixtures/scratch.h"
#include "test_util.h"

#define BIN PN_BIN_DIR
#define RECIPE PN_SOURCE_DIR "/recipes/test-fallback.mix"
#define SCRIPT PN_SOURCE_DIR "/tools/llama/pn-llama-logits.mjs"

static void sh_ok(const char *fmt, const char *a, const char *b)
{
    char cmd[16384], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd, fmt, a, b);
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "%s: exit %d\n%s%s", cmd, rc, out, err);
    free(out);
    free(err);
}

/* The program (pid) has its handler for SIGHUP installed. */
static bool catches_sighup(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    unsigned long long mask = 0;
    bool found = false;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "SigCgt: %llx", &mask) == 1) {
            found = true;
            break;
        }
    fclose(f);
    return found && (mask >> (SIGHUP - 1) & 1);
}

/* Runs argv in g_dir with TMPDIR tmpdir and its stderr a full pipe; once it
 * catches SIGHUP (and wait_for exists, when given), SIGHUP. Returns the
 * exit status of its own exit (a death by the signal fails the test);
 * *err what it said after the filler. */
static int hup_in_the_middle(char *const argv[], const char *tmpdir, const char *wait_for,
                             char **err)
{
    int fds[2];
    const size_t filled = tu_full_pipe(fds);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(null, 1);
        if (chdir(g_dir) != 0 || setenv("TMPDIR", tmpdir, 1) != 0)
            _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    struct stat sb;
    for (int i = 0; i < 6000 && !(catches_sighup(pid) && (!wait_for || stat(wait_for, &sb) == 0));
         i++)
        usleep(10000);
    cr_assert(catches_sighup(pid), "%s never caught SIGHUP", argv[0]);
    cr_assert(!wait_for || stat(wait_for, &sb) == 0, "%s never appeared", wait_for);
    usleep(100000); /* blocked in its line (or waiting on the child) */
    cr_assert_eq(kill(pid, SIGHUP), 0);
    *err = tu_drain_pipe(fds[0], filled);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "%s was killed by signal %d, not stopped by its trap", argv[0],
              WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return WEXITSTATUS(status);
}

/* What a SIGHUP'd run must leave: 129, "interrupted" said, no target, no
 * temporary file beside it, TMPDIR (tmpdir) empty, g_dir with the entries
 * it had before the run. */
static void expect_nothing_left(int rc, const char *err, const char *target, const char *tmpdir,
                                int entries)
{
    cr_assert_eq(rc, 128 + SIGHUP, "exit %d, not 129\n%s", rc, err);
    cr_assert(strstr(err, "interrupted"), "%s", err);
    cr_assert(!tu_exists(tu_join_static(g_dir, target)), "%s was written", target);
    cr_assert_eq(tu_count_temporary_files(g_dir), 0, "a temporary file is left beside %s", target);
    cr_assert_eq(tu_count_files(g_dir), entries, "something is left in the folder");
    cr_assert_eq(tu_count_files(tmpdir), 0, "something is left in TMPDIR");
}

/* TMPDIR of the run: a fresh folder outside g_dir (so g_dir's count is the
 * program's alone). */
static char *fresh_tmpdir(void)
{
    return tu_mkdtemp();
}

TestSuite(signals, .init = setup, .fini = teardown, .timeout = 240);

Test(signals, sighup_during_pn_synth_leaves_nothing)
{
    char *tmp = fresh_tmpdir();
    int entries = tu_count_files(g_dir);
    char *e = NULL;
    char *const argv[] = { BIN "/pn-synth", "--progress", "--layers", "2", "--width-scale", "16",
                           "--vocab",       "300",        "s.gguf",   NULL };
    int rc = hup_in_the_middle(argv, tmp, NULL, &e);
    expect_nothing_left(rc, e, "s.gguf", tmp, entries);
    free(e);
    tu_rm_rf(tmp);
    free(tmp);
}

Test(signals, sighup_during_pn_quantize_leaves_nothing)
{
    char *tmp = fresh_tmpdir();
    sh_ok("cd '%s' && '%s'/pn-synth --quiet --layers 2 --width-scale 16 --vocab 300 s.gguf", g_dir,
          BIN);
    int entries = tu_count_files(g_dir);
    char *e = NULL;
    char *const argv[] = { BIN "/pn-quantize", "--progress", "--threads", "1", "--recipe", RECIPE,
                           "s.gguf",           "q.gguf",     NULL };
    int rc = hup_in_the_middle(argv, tmp, NULL, &e);
    expect_nothing_left(rc, e, "q.gguf", tmp, entries);
    cr_assert(strstr(e, "pn-quantize: interrupted: nothing was written to q.gguf"), "%s", e);
    free(e);
    tu_rm_rf(tmp);
    free(tmp);
}

Test(signals, sighup_during_pn_convert_leaves_nothing)
{
    char *tmp = fresh_tmpdir();
    sh_ok("cd '%s' && '%s'/pn-synth --quiet --hf --layers 2 --width-scale 16 --vocab 300 X/", g_dir,
          BIN);
    int entries = tu_count_files(g_dir);
    char *e = NULL;
    char *const argv[] = { BIN "/pn-convert", "--progress", "X", "c.gguf", NULL };
    int rc = hup_in_the_middle(argv, tmp, NULL, &e);
    expect_nothing_left(rc, e, "c.gguf", tmp, entries);
    cr_assert(strstr(e, "pn-convert: interrupted: nothing was written to c.gguf"), "%s", e);
    free(e);
    tu_rm_rf(tmp);
    free(tmp);
}

Test(signals, sighup_during_pn_dequant_leaves_nothing)
{
    char *tmp = fresh_tmpdir();
    sh_ok("cd '%s' && '%s'/pn-synth --quiet --layers 2 --width-scale 16 --vocab 300 s.gguf", g_dir,
          BIN);
    sh_ok("cd '%s' && '%s'/pn-quantize --quiet --threads 1 --recipe " RECIPE " s.gguf q.gguf",
          g_dir, BIN);
    int entries = tu_count_files(g_dir);
    char *e = NULL;
    char *const argv[] = { BIN "/pn-dequant", "--progress", "q.gguf", "d.gguf", NULL };
    int rc = hup_in_the_middle(argv, tmp, NULL, &e);
    expect_nothing_left(rc, e, "d.gguf", tmp, entries);
    free(e);
    tu_rm_rf(tmp);
    free(tmp);
}

/* What llama.cpp's harness answers for the source on its fd 3: the fixed
 * token set (compare/compare.h) and logits of vocab v, all 0. */
static void write_source_answer(const char *path, uint32_t v)
{
    const size_t n_pos = (size_t)PN_COMPARE_FIXED_SEQS * PN_COMPARE_FIXED_LEN;
    size_t bytes = 16 + PN_COMPARE_FIXED_SEQS * 4 + n_pos * 4 + n_pos * v * 4;
    uint8_t *b = calloc(1, bytes), *w = b;
    memcpy(w, "PNLOGIT1", 8);
    w += 8;
    uint32_t head[2] = { v, PN_COMPARE_FIXED_SEQS };
    memcpy(w, head, 8);
    w += 8;
    for (int s = 0; s < PN_COMPARE_FIXED_SEQS; s++) {
        uint32_t len = PN_COMPARE_FIXED_LEN;
        memcpy(w, &len, 4);
        w += 4;
        for (int i = 0; i < PN_COMPARE_FIXED_LEN; i++) {
            uint32_t id = pn_compare_fixed_token(v, s, i);
            memcpy(w, &id, 4);
            w += 4;
        }
    }
    cr_assert_eq(tu_write_file(path, b, bytes), 0);
    free(b);
}

/* pn-compare decodes the PN file into its folder in TMPDIR and runs
 * llama.cpp on it: a stand-in "node" answers the source, then on the
 * decoded model says it started (its pid in the pid file) and hangs, as a
 * long llama.cpp run does. SIGHUP then: the child is stopped, the folder
 * with the decoded model removed. No llama.cpp needed. */
Test(signals, sighup_during_pn_compare_leaves_nothing)
{
    char *tmp = fresh_tmpdir();
    sh_ok("cd '%s' && '%s'/pn-synth --quiet --layers 2 --width-scale 16 --vocab 64 s.gguf", g_dir,
          BIN);
    sh_ok("cd '%s' && '%s'/pn-quantize --quiet --threads 1 --recipe " RECIPE " s.gguf q.gguf",
          g_dir, BIN);
    /* the stand-in and its files live outside g_dir, whose entries are counted */
    char *aside = tu_mkdtemp();
    char *answer = tu_join(aside, "p.bin"), *node = tu_join(aside, "node.sh");
    char *pidfile = tu_join(aside, "node.pid");
    write_source_answer(answer, 64);
    char text[4096];
    snprintf(text, sizeof text,
             "#!/bin/sh\ncase \"$*\" in\n"
             "*--print-version*) cat >/dev/null; cat '%s' >&3 ;;\n"
             "*) echo $$ > '%s'; exec sleep 60 ;;\nesac\n",
             answer, pidfile);
    cr_assert_eq(tu_write_file(node, text, strlen(text)), 0);
    chmod(node, 0755);
    int entries = tu_count_files(g_dir);
    char *e = NULL;
    char *const argv[] = { BIN "/pn-compare", "--quiet", "--threads", "1",      "--node", node,
                           "--llama-script",  SCRIPT,    "s.gguf",    "q.gguf", NULL };
    int rc = hup_in_the_middle(argv, tmp, pidfile, &e);
    cr_assert_eq(rc, 128 + SIGHUP, "exit %d, not 129\n%s", rc, e);
    cr_assert_str_eq(e, "pn-compare: error: interrupted by a signal\n");
    cr_assert_eq(tu_count_files(g_dir), entries, "something is left beside the inputs");
    cr_assert_eq(tu_count_files(tmp), 0, "the decoded model's folder is left in TMPDIR");
    /* the stand-in was stopped with the run */
    char *pid_text = tu_read_file(pidfile, &(size_t){ 0 });
    cr_assert(pid_text);
    pid_t child = (pid_t)atoi(pid_text);
    cr_assert_gt(child, 0);
    cr_assert(kill(child, 0) != 0, "the stand-in for llama.cpp (%d) still runs", (int)child);
    free(pid_text);
    free(e);
    tu_rm_rf(aside);
    free(aside);
    free(answer);
    free(node);
    free(pidfile);
    tu_rm_rf(tmp);
    free(tmp);
}
