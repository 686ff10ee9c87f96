/* pn-quantize end to end: the golden tiny model, synthetic models against the
 * reference computed here, thread-count independence, the options, and every
 * refusal (library and CLI: stdout, stderr, exit code, nothing at DST).
 *
 * Here the tests that run the built programs; those that call the library
 * are in tests/pipeline/test_quantize.c. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "hadamard/hadamard.h"
#include "synth/qwen38_shapes.h"
#include "synth/qwen38_shapes_testing.h"
#include "pipeline/quantize.h"
#include "synth/synth.h"
#include "quant/pn_cuda.h"
#include "quant/pn.h"
#include "quant/types.h"
#include "quant/widen.h"
#include "fixtures/pn_source.h"
#include "fixtures/quantize_run.h"
#include "fixtures/scratch.h"
#include "test_util.h"

/* ---- the program --------------------------------------------------------- */

static int run_cli(const char *args, char **out, char **err)
{
    char cmd[40960];
    snprintf(cmd, sizeof cmd, "%s/pn-quantize %s", PN_BIN_DIR, args);
    return tu_run(cmd, out, err);
}

Test(quantize_cli, help_describes_every_option_and_exits_0)
{
    char *out, *err;
    cr_assert_eq(run_cli("--help", &out, &err), 0);
    const char *opts[] = { "--recipe",      "--promote ", "--promote-list", "--measurement",
                           "--target-size", "--rotation", "--threads",      "--backend",
                           "--dry-run",     "--report",   "--force",        "--quiet",
                           "--progress",    "--device" };
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        cr_assert(strstr(out, opts[i]), "--help lacks %s", opts[i]);
    cr_assert_str_empty(err);
    free(out);
    free(err);
}

Test(quantize_cli, a_bad_option_is_a_usage_error_with_exit_2)
{
    char *out, *err;
    cr_assert_eq(run_cli("--frobnicate a b", &out, &err), 2);
    cr_assert(strstr(err, "--frobnicate"), "%s", err);
    cr_assert_eq(run_cli("--backend gpu a b", &out, &err), 2);
    cr_assert(strstr(err, "auto, cpu or cuda"), "%s", err);
    cr_assert_eq(run_cli("only-one.gguf", &out, &err), 2);
    free(out);
    free(err);
}

Test(quantize_cli, dry_run_prints_the_plan_and_writes_nothing, .init = setup, .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 4, PN_TYPE_BF16, 2);
    char *dst = path_in("dst.gguf");
    char args[4096], *out, *err;
    snprintf(args, sizeof args, "--dry-run --recipe %s --promote 2 %s %s", FALLBACK_RECIPE, src,
             dst);
    cr_assert_eq(run_cli(args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "blk.0.attn_qkv.weight"), "%s", out);
    cr_assert(strstr(out, "pn3t") && strstr(out, "pn4t") && strstr(out, "q8_0"));
    cr_assert(strstr(out, "P0k-fallback+2"), "%s", out);
    cr_assert(strstr(out, "bits/weight"), "%s", out);
    cr_assert(strstr(out, "file size"), "%s", out);
    quantize_assert_nothing_left(g_dir, dst);
    free(out);
    free(err);
    free(src);
    free(dst);
}

Test(quantize_cli, a_real_run_ends_with_the_plan_totals_and_writes_a_report, .init = setup,
     .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_BF16, 2);
    char *dst = path_in("dst.gguf"), *rep = path_in("r.json");
    char args[4096], *out, *err;
    snprintf(args, sizeof args, "--recipe %s --promote 0 --report %s %s %s", FALLBACK_RECIPE, rep,
             src, dst);
    cr_assert_eq(run_cli(args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "file size") && strstr(out, "bits/weight"), "%s", out);
    cr_assert(exists(dst));
    size_t n;
    char *json = tu_read_file(rep, &n);
    json = realloc(json, n + 1);
    json[n] = 0;
    cr_assert(strstr(json, "\"relative_error\"") && strstr(json, "\"blk.0.ffn_up.weight\""), "%s",
              json);
    cr_assert(strstr(json, "\"source_type\": \"bf16\""), "%s", json);
    free(json);
    free(out);
    free(err);
    free(src);
    free(dst);
    free(rep);
}

Test(quantize_cli, refuses_an_existing_output_without_force_and_replaces_it_with_force,
     .init = setup, .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 2);
    char *dst = path_in("dst.gguf");
    tu_write_file(dst, "keep me", 7);
    char args[4096], *out, *err;
    snprintf(args, sizeof args, "--quiet --recipe %s --promote 0 %s %s", FALLBACK_RECIPE, src, dst);
    cr_assert_eq(run_cli(args, &out, &err), 1);
    cr_assert(strstr(err, "exists") && strstr(err, "--force"), "%s", err);
    size_t n;
    char *kept = tu_read_file(dst, &n);
    cr_assert(n == 7 && memcmp(kept, "keep me", 7) == 0, "the existing output was touched");
    free(kept);
    snprintf(args, sizeof args, "--quiet --force --recipe %s --promote 0 %s %s", FALLBACK_RECIPE,
             src, dst);
    cr_assert_eq(run_cli(args, &out, &err), 0, "%s", err);
    struct stat sb;
    stat(dst, &sb);
    cr_assert_gt(sb.st_size, 1000);
    free(out);
    free(err);
    free(src);
    free(dst);
}

Test(quantize_cli, refuses_the_source_as_output, .init = setup, .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 2);
    size_t n0;
    void *before = tu_read_file(src, &n0);
    char args[4096], *out, *err;
    snprintf(args, sizeof args, "--force --recipe %s %s %s", FALLBACK_RECIPE, src, src);
    cr_assert_eq(run_cli(args, &out, &err), 2);
    cr_assert(strstr(err, "is the source"), "%s", err);
    size_t n1;
    void *after = tu_read_file(src, &n1);
    cr_assert(n0 == n1 && memcmp(before, after, n0) == 0, "the source changed");
    free(before);
    free(after);
    free(out);
    free(err);
    free(src);
}

Test(quantize_cli, refuses_an_unwritable_folder_naming_it, .init = setup, .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 2);
    char args[4096], *out, *err;
    /* a folder under a regular file cannot exist, even for root */
    snprintf(args, sizeof args, "--quiet --recipe %s --promote 0 %s %s/dst.gguf", FALLBACK_RECIPE,
             src, src);
    cr_assert_eq(run_cli(args, &out, &err), 1);
    cr_assert(strstr(err, "dst.gguf"), "%s", err);
    free(out);
    free(err);
    free(src);
}

Test(quantize_cli, a_full_disk_is_reported_and_leaves_nothing, .init = setup, .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 2);
    char *dst = path_in("dst.gguf");
    char args[4096], *out, *err;
    /* a file size limit makes write() fail like a full disk (EFBIG) */
    snprintf(args, sizeof args,
             "sh -c 'trap \"\" XFSZ; ulimit -f 200; exec %s/pn-quantize --quiet --recipe %s "
             "--promote 0 %s %s'",
             PN_BIN_DIR, FALLBACK_RECIPE, src, dst);
    int rc = tu_run(args, &out, &err);
    cr_assert_eq(rc, 1, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "dst.gguf"), "%s", err);
    quantize_assert_nothing_left(g_dir, dst);
    free(out);
    free(err);
    free(src);
    free(dst);
}

Test(quantize_cli, sigint_during_a_run_leaves_nothing_at_the_output, .init = setup,
     .fini = teardown)
{
    pn_synth_opts so;
    memset(&so, 0, sizeof so);
    char *src = path_in("big.gguf");
    so.path = src;
    so.config = pn_qwen38_config_narrow(4, 1, 256); /* ~24 M weights */
    so.seed = 1;
    pn_error e;
    cr_assert_eq(pn_synth_write(&so, &e), PN_OK, "%s", e.msg);
    char *dst = path_in("dst.gguf");
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        tu_child_output_to_devnull();
        /* the reference quantizer on one thread: seconds of work on any
         * machine, so the signal lands while the run is writing */
        setenv("PN_CPU_PATH", "ref", 1);
        execl(PN_BIN_DIR "/pn-quantize", "pn-quantize", "--promote", "0", "--backend", "cpu",
              "--threads", "1", src, dst, (char *)NULL);
        _exit(127);
    }
    /* wait until the run holds its temporary output open, i.e. is writing
     * (unnamed: "DIR/#INODE (deleted)"; the fallback: "DIR/.dst.gguf.pn-*") */
    for (int i = 0; i < 600; i++) {
        char *out = NULL;
        char cmd[4096];
        snprintf(
            cmd, sizeof cmd,
            "ls -l /proc/%d/fd 2>/dev/null | grep -c '%s/\\(#\\|\\.dst\\.gguf\\.pn-\\)' || true",
            (int)pid, g_dir);
        tu_run(cmd, &out, NULL);
        int n = atoi(out);
        free(out);
        if (n > 0)
            break;
        usleep(50000);
    }
    kill(pid, SIGINT);
    int status;
    waitpid(pid, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 130, "exit status %d", status);
    quantize_assert_nothing_left(g_dir, dst);
    free(src);
    free(dst);
}

Test(quantize_cli, the_cuda_path_writes_the_same_bytes_as_the_cpu, .init = setup, .fini = teardown)
{
    if (!pn_cuda_build_enabled())
        cr_skip("this build has no CUDA backend, so there is no GPU path to compare");
    char *src = quantize_make_source("src.gguf", 4, PN_TYPE_BF16, 4);
    char *a = path_in("cpu.gguf"), *b = path_in("gpu.gguf");
    char args[8192], *out, *err;
    snprintf(args, sizeof args, "--quiet --backend cpu --recipe %s --promote 2 %s %s",
             FALLBACK_RECIPE, src, a);
    cr_assert_eq(run_cli(args, &out, &err), 0, "%s", err);
    free(out);
    free(err);
    /* the kernel's own code on the host, in chunks of a few rows: the
     * pipeline's two alternating slots are exercised without a GPU */
    snprintf(args, sizeof args,
             "PN_CUDA_EMULATE=1 PN_CHUNK_WEIGHTS=2000 %s/pn-quantize --quiet --backend cuda "
             "--recipe %s --promote 2 %s %s",
             PN_BIN_DIR, FALLBACK_RECIPE, src, b);
    cr_assert_eq(tu_run(args, &out, &err), 0, "%s", err);
    quantize_assert_same_bytes(a, b, "the CUDA path wrote other bytes");
    free(out);
    free(err);
    free(src);
    free(a);
    free(b);
}

Test(quantize_cli, tiny_chunks_give_the_same_bytes_as_the_default, .init = setup, .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_BF16, 8);
    char *a = path_in("big.gguf"), *b = path_in("small.gguf");
    char args[8192], *out, *err;
    snprintf(args, sizeof args, "%s/pn-quantize --quiet --recipe %s --promote 1 %s %s", PN_BIN_DIR,
             FALLBACK_RECIPE, src, a);
    cr_assert_eq(tu_run(args, &out, &err), 0, "%s", err);
    free(out);
    free(err);
    snprintf(args, sizeof args,
             "PN_CHUNK_WEIGHTS=700 %s/pn-quantize --quiet --recipe %s --promote 1 %s %s",
             PN_BIN_DIR, FALLBACK_RECIPE, src, b);
    cr_assert_eq(tu_run(args, &out, &err), 0, "%s", err);
    quantize_assert_same_bytes(a, b, "chunk size changed the output");
    free(out);
    free(err);
    free(src);
    free(a);
    free(b);
}

/* ==== nothing the user gives destroys a file, crashes, hangs or lies ==== */

static bool has_byte(const char *s, unsigned char b)
{
    return s && strchr(s, b) != NULL;
}

Test(quantize_cli, a_report_path_naming_the_source_or_the_output_is_refused_and_nothing_is_touched,
     .init = setup, .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 2);
    char *dst = path_in("dst.gguf"), *link_to_src = path_in("alias.gguf");
    cr_assert_eq(link(src, link_to_src), 0);
    size_t n0;
    void *before = tu_read_file(src, &n0);
    char args[8192], *out, *err;
    const char *reports[] = { src, link_to_src, dst };
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "--force --recipe %s --promote 0 --report %s %s %s",
                 FALLBACK_RECIPE, reports[i], src, dst);
        cr_assert_eq(run_cli(args, &out, &err), 2, "%s", err);
        cr_assert(strstr(err, i < 2 ? "that is the source" : "that is the output"), "%s", err);
        cr_assert_str_empty(out);
        quantize_assert_nothing_left(g_dir, dst);
        size_t n1;
        void *after = tu_read_file(src, &n1);
        cr_assert(n0 == n1 && memcmp(before, after, n0) == 0, "the source changed");
        free(after);
        free(out);
        free(err);
    }
    free(before);
    free(src);
    free(dst);
    free(link_to_src);
}

Test(quantize_cli, an_existing_report_is_kept_without_force_and_replaced_with_force, .init = setup,
     .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 2);
    char *dst = path_in("dst.gguf"), *rep = path_in("r.json");
    cr_assert_eq(tu_write_file(rep, "mine", 4), 0);
    char args[8192], *out, *err;
    snprintf(args, sizeof args, "--quiet --recipe %s --promote 0 --report %s %s %s",
             FALLBACK_RECIPE, rep, src, dst);
    cr_assert_eq(run_cli(args, &out, &err), 1, "%s", err);
    cr_assert(strstr(err, "r.json") && strstr(err, "the report exists") && strstr(err, "--force"),
              "%s", err);
    char *kept = quantize_read_text(rep);
    cr_assert_str_eq(kept, "mine");
    free(kept);
    quantize_assert_nothing_left(g_dir, dst);
    free(out);
    free(err);
    snprintf(args, sizeof args, "--quiet --force --recipe %s --promote 0 --report %s %s %s",
             FALLBACK_RECIPE, rep, src, dst);
    cr_assert_eq(run_cli(args, &out, &err), 0, "%s", err);
    char *json = quantize_read_text(rep);
    cr_assert(json[0] == '{' && strstr(json, "\"relative_error\""), "%s", json);
    free(json);
    cr_assert(exists(dst));
    free(out);
    free(err);
    free(src);
    free(dst);
    free(rep);
}

Test(quantize_cli, a_report_that_cannot_be_written_leaves_no_output_and_says_so, .init = setup,
     .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 2);
    char *dst = path_in("out.gguf");
    char args[8192], *out, *err;
    snprintf(args, sizeof args,
             "--quiet --recipe %s --promote 0 --report /nonexistent/r.json %s %s", FALLBACK_RECIPE,
             src, dst);
    cr_assert_eq(run_cli(args, &out, &err), 1, "%s", err);
    cr_assert(strstr(err, "/nonexistent/r.json") && strstr(err, "nothing was written to"), "%s",
              err);
    quantize_assert_nothing_left(g_dir, dst);
    free(out);
    free(err);
    free(src);
    free(dst);
}

/* A failure after the output's commit is reported as what it is. */
Test(quantize_cli, a_report_that_appears_during_the_run_is_kept_and_the_written_output_named,
     .init = setup, .fini = teardown)
{
    pn_synth_opts so;
    memset(&so, 0, sizeof so);
    char *src = path_in("big.gguf");
    so.path = src;
    so.config = pn_qwen38_config_narrow(4, 1, 256); /* ~24 M weights: seconds on one thread */
    so.seed = 1;
    pn_error e;
    cr_assert_eq(pn_synth_write(&so, &e), PN_OK, "%s", e.msg);
    char *dst = path_in("dst.gguf"), *rep = path_in("r.json"), *errf = path_in("stderr.txt");
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        int ef = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(devnull, 1);
        dup2(ef, 2);
        setenv("PN_CPU_PATH", "ref", 1);
        execl(PN_BIN_DIR "/pn-quantize", "pn-quantize", "--quiet", "--promote", "0", "--backend",
              "cpu", "--threads", "1", "--report", rep, src, dst, (char *)NULL);
        _exit(127);
    }
    /* once the run is writing (it holds a temporary output: named, or
     * unnamed and seen in /proc), another program puts a file at the report
     * path */
    bool writing = false;
    for (int i = 0; i < 1200 && !writing; i++) {
        char *o = NULL, cmd[4096];
        snprintf(cmd, sizeof cmd,
                 "{ ls -a '%s' | grep 'dst\\.gguf\\.tmp\\.\\|\\.dst\\.gguf\\.pn-'; "
                 "ls -l /proc/%d/fd 2>/dev/null | grep '%s/.*(deleted)'; } | grep -c . || true",
                 g_dir, (int)pid, g_dir);
        tu_run(cmd, &o, NULL);
        writing = atoi(o) > 0;
        free(o);
        if (!writing)
            usleep(10000);
    }
    cr_assert(writing, "the run never started writing");
    cr_assert_eq(tu_write_file(rep, "someone else's", 14), 0);
    int status;
    waitpid(pid, &status, 0);
    char *msg = quantize_read_text(errf);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %d: %s", status, msg);
    cr_assert(strstr(msg, "wrote ") && strstr(msg, "dst.gguf") &&
                  strstr(msg, "but the report could not be written") && strstr(msg, "r.json"),
              "%s", msg);
    cr_assert(!strstr(msg, "nothing was written"), "%s", msg);
    char *kept = quantize_read_text(rep);
    cr_assert_str_eq(kept, "someone else's");
    cr_assert(exists(dst), "the output was committed");
    cr_assert_eq(tu_count_temporary_files(g_dir), 0, "a temporary file is left");
    free(kept);
    free(msg);
    free(src);
    free(dst);
    free(rep);
    free(errf);
}

Test(quantize_cli, a_dry_run_into_a_full_stdout_fails_with_a_message, .init = setup,
     .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 2);
    char args[8192], *out, *err;
    snprintf(args, sizeof args, "%s/pn-quantize --dry-run --recipe %s %s > /dev/full", PN_BIN_DIR,
             FALLBACK_RECIPE, src);
    int rc = tu_run(args, &out, &err);
    cr_assert_eq(rc, 1, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "standard output") && strstr(err, "No space left"), "%s", err);
    free(out);
    free(err);
    free(src);
}

Test(quantize_cli, a_file_size_limit_fails_like_a_full_disk_and_leaves_nothing, .init = setup,
     .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 2);
    char *dst = path_in("dst.gguf");
    char args[8192], *out, *err;
    /* no trap: the program itself must survive SIGXFSZ */
    snprintf(args, sizeof args,
             "sh -c 'ulimit -f 200; exec %s/pn-quantize --quiet --recipe %s --promote 0 %s %s'",
             PN_BIN_DIR, FALLBACK_RECIPE, src, dst);
    int rc = tu_run(args, &out, &err);
    cr_assert_eq(rc, 1, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "dst.gguf") && strstr(err, "file-size limit") &&
                  strstr(err, "nothing was written"),
              "%s", err);
    quantize_assert_nothing_left(g_dir, dst);
    free(out);
    free(err);
    free(src);
    free(dst);
}

Test(quantize_cli, fifos_as_source_recipe_promote_list_measurement_or_report_are_refused_at_once,
     .init = setup, .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 2);
    char *fifo = path_in("pipe"), *dst = path_in("dst.gguf");
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    char args[5][8192];
    snprintf(args[0], sizeof args[0], "--recipe %s --promote 0 %s %s", FALLBACK_RECIPE, fifo, dst);
    snprintf(args[1], sizeof args[1], "--recipe %s --promote 0 %s %s", fifo, src, dst);
    snprintf(args[2], sizeof args[2], "--recipe %s --promote-list %s %s %s", FALLBACK_RECIPE, fifo,
             src, dst);
    snprintf(args[3], sizeof args[3], "--recipe %s --promote 1 --measurement %s %s %s",
             FALLBACK_RECIPE, fifo, src, dst);
    snprintf(args[4], sizeof args[4], "--recipe %s --promote 0 --report %s %s %s", FALLBACK_RECIPE,
             fifo, src, dst);
    for (int i = 0; i < 5; i++) {
        char cmd[40960], *out, *err;
        /* a hang is a failure, not a stuck suite */
        snprintf(cmd, sizeof cmd, "timeout 20 %s/pn-quantize %.8000s", PN_BIN_DIR, args[i]);
        int rc = tu_run(cmd, &out, &err);
        cr_assert(rc == 1 || rc == 2, "case %d: exit %d (124: it hung): %s", i, rc, err);
        cr_assert(strstr(err, fifo) && strstr(err, "FIFO"), "case %d: %s", i, err);
        quantize_assert_nothing_left(g_dir, dst);
        free(out);
        free(err);
    }
    free(src);
    free(fifo);
    free(dst);
}

Test(quantize_cli, names_with_terminal_escapes_are_printed_safely_everywhere, .init = setup,
     .fini = teardown)
{
    static const sf_spec specs[] = {
        { "blk.0.\x1b]0;owned\x07.attn_q.weight", 2, 320, 4, PN_TYPE_F32 },
        { "blk.0.\x1b[2J.ffn_up.weight", 2, 320, 4, PN_TYPE_F32 },
        { "blk.0.attn_norm.weight", 1, 320, 1, PN_TYPE_F32 },
    };
    static const char recipe_text[] = "mix E\nrotation hadamard 1024\npromote 0\n"
                                      "rule dims=1 => f32\n"
                                      "rule *.attn_q.weight *.ffn_up.weight => pn3t\n";
    static const char narrow_text[] = "mix E\nrotation hadamard 1024\nrule dims=1 => f32\n";
    char *src = path_in("src.gguf"), *dst = path_in("dst.gguf"), *rep = path_in("r.json");
    char *recipe = path_in("e.mix"), *narrow = path_in("n.mix"), *list = path_in("list.txt");
    sf_write_model(src, specs, 3, 4);
    cr_assert_eq(tu_write_file(recipe, recipe_text, strlen(recipe_text)), 0);
    cr_assert_eq(tu_write_file(narrow, narrow_text, strlen(narrow_text)), 0);
    const char *names = "blk.9.\x1b]0;x\x07.weight\n";
    cr_assert_eq(tu_write_file(list, names, strlen(names)), 0);
    char args[4][8192];
    snprintf(args[0], sizeof args[0], "--dry-run --recipe %s %s", recipe, src);
    snprintf(args[1], sizeof args[1], "--progress --recipe %s --report %s %s %s", recipe, rep, src,
             dst);
    snprintf(args[2], sizeof args[2], "--recipe %s %s %s.2", narrow, src, dst);
    snprintf(args[3], sizeof args[3], "--recipe %s --promote-list %s %s %s.3", recipe, list, src,
             dst);
    const int want[] = { 0, 0, 1, 1 }; /* the list names a tensor the model lacks: 1 */
    for (int i = 0; i < 4; i++) {
        char *out, *err;
        int rc = run_cli(args[i], &out, &err);
        cr_assert_eq(rc, want[i], "case %d: exit %d: %s", i, rc, err);
        cr_assert(!has_byte(out, 0x1b) && !has_byte(out, 0x07), "case %d: raw escape on stdout", i);
        cr_assert(!has_byte(err, 0x1b) && !has_byte(err, 0x07), "case %d: raw escape on stderr", i);
        /* the names are still there, visibly escaped */
        cr_assert(strstr(out, "\\x1b") || strstr(err, "\\x1b"), "case %d: %s %s", i, out, err);
        free(out);
        free(err);
    }
    char *json = quantize_read_text(rep);
    cr_assert(!has_byte(json, 0x1b) && strstr(json, "\\u001b]0;owned\\u0007"), "%s", json);
    free(json);
    free(src);
    free(dst);
    free(rep);
    free(recipe);
    free(narrow);
    free(list);
}

/* smaller items: the environment is read by the program only */
Test(quantize_cli, bad_environment_values_are_usage_errors_naming_the_variable, .init = setup,
     .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 2);
    char *dst = path_in("dst.gguf");
    const char *env[] = { "PN_CPU_PATH=turbo", "PN_CHUNK_WEIGHTS=12abc", "PN_CHUNK_WEIGHTS=3",
                          "PN_CUDA_EMULATE=yes" };
    const char *says[] = {
        "PN_CPU_PATH=turbo: expected ref, scalar, avx2 or avx512 (this CPU has: ref, scalar",
        "PN_CHUNK_WEIGHTS=12abc: expected a number of weights", "PN_CHUNK_WEIGHTS=3: expected",
        "PN_CUDA_EMULATE=yes: expected 0 or 1"
    };
    for (int i = 0; i < 4; i++) {
        char cmd[8192], *out, *err;
        snprintf(cmd, sizeof cmd, "%s %s/pn-quantize --recipe %s %s %s", env[i], PN_BIN_DIR,
                 FALLBACK_RECIPE, src, dst);
        cr_assert_eq(tu_run(cmd, &out, &err), 2, "%s", err);
        cr_assert(strstr(err, says[i]), "%s", err);
        quantize_assert_nothing_left(g_dir, dst);
        free(out);
        free(err);
    }
    free(src);
    free(dst);
}

/* A path refused before anything is done is a usage error: status 2, as in
 * pn-dequant (cmd/cli.h). */
Test(quantize_cli, an_output_that_is_the_source_is_a_usage_error_even_with_force, .init = setup,
     .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 2);
    size_t n0, n1;
    void *before = tu_read_file(src, &n0);
    char args[8192], *out, *err;
    snprintf(args, sizeof args, "--force --threads 1 --recipe %s --promote 0 %s %s",
             FALLBACK_RECIPE, src, src);
    cr_assert_eq(run_cli(args, &out, &err), 2, "%s", err);
    cr_assert(strstr(err, "the output is the source file"), "%s", err);
    void *after = tu_read_file(src, &n1);
    cr_assert(n0 == n1 && memcmp(before, after, n0) == 0, "the source is untouched");
    free(before);
    free(after);
    free(out);
    free(err);
    free(src);
}

/* A CUDA build on a machine without a usable GPU: --backend auto falls back
 * to the CPU. That is a fact of the run, said with the plan's lines on
 * stdout, and nothing at all with --quiet. */
Test(quantize_cli, without_a_usable_gpu_a_cuda_build_says_so_among_the_plan_lines, .init = setup,
     .fini = teardown)
{
    quantize_need_cuda_build_without_gpu();
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 2);
    char *dst = path_in("dst.gguf");
    char args[8192], *out, *err;
    snprintf(args, sizeof args, "--threads 2 --recipe %s --promote 0 %s %s", FALLBACK_RECIPE, src,
             dst);
    cr_assert_eq(run_cli(args, &out, &err), 0, "%s", err);
    cr_assert(!strstr(err, "GPU"), "stderr is for errors and progress: %s", err);
    /* one quiet line: the driver's words are for --backend cuda, which asked for a GPU */
    const char *line = strstr(out, "\nno usable GPU; using the CPU, 2 threads\n");
    cr_assert(line, "%s", out);
    cr_assert(strstr(out, "\nfile size ") < line, "after the plan totals: %s", out);
    cr_assert(!strstr(out, "driver") && !strstr(out, "cuda"), "%s", out);
    cr_assert(strstr(out, "\nwrote ") > line, "before the summary of what was written: %s", out);
    free(out);
    free(err);
    free(src);
    free(dst);
}

Test(quantize_cli, without_a_usable_gpu_quiet_prints_nothing, .init = setup, .fini = teardown)
{
    quantize_need_cuda_build_without_gpu();
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 2);
    char *dst = path_in("dst.gguf");
    char args[8192], *out, *err;
    snprintf(args, sizeof args, "--quiet --threads 2 --recipe %s --promote 0 %s %s",
             FALLBACK_RECIPE, src, dst);
    cr_assert_eq(run_cli(args, &out, &err), 0, "%s", err);
    cr_assert_str_empty(out);
    cr_assert_str_empty(err);
    cr_assert(exists(dst));
    free(out);
    free(err);
    free(src);
    free(dst);
}
