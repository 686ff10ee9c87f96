/* pn-compare --sweep (compare/sweep.h) and its picture (compare/plot.h).
 *
 * sweep_cli: options refused before anything runs, and an interrupt, with a
 * fake stock quantizer (a shell script) so that no llama.cpp is needed.
 * sweep_llama: a whole sweep of a tiny model judged by stock llama.cpp
 * (node-llama-cpp; skipped with the reason where it is missing, except in
 * CI, PN_REQUIRE_LLAMA=1). plot: gnuplot's pictures (gnuplot-nox, which
 * scripts/install-deps installs: a missing gnuplot fails these tests).
 *
 * Here the tests that run the built programs; those that call the library
 * are in tests/compare/test_plot.c. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compare/plot.h"
#include "gguf/gguf.h"
#include "gguf/pn_keys.h"
#include "fixtures/scratch.h"
#include "test_util.h"

#define SCRIPT PN_SOURCE_DIR "/tools/llama/pn-llama-logits.mjs"
#define FALLBACK_RECIPE PN_SOURCE_DIR "/recipes/test-fallback.mix"
#define LIBLLAMA                                                                                   \
    PN_SOURCE_DIR "/tools/llama/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/"            \
                  "libllama.v0.5.0.so"


#define REQUIRE_LLAMA() TU_REQUIRE_LLAMA(SCRIPT, LIBLLAMA)

static void synth(const char *path, const char *args)
{
    char cmd[8192], *out, *err;
    snprintf(cmd, sizeof cmd, "%s/pn-synth --quiet %s '%s'", PN_BIN_DIR, args, path);
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "%s: exit %d: %s", cmd, rc, err);
    free(out);
    free(err);
}

/* pn-compare --sweep with args; its exit status, stdout and stderr. */
static int sweep(const char *args, char **out, char **err)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s/pn-compare --sweep --quiet --threads 1 --recipe '%s' %s",
             PN_BIN_DIR, FALLBACK_RECIPE, args);
    return tu_run(cmd, out, err);
}

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* The marks of point type `pt` (gnuplot's SVG "gpPt6", ...) drawn in
 * colour: with error bars gnuplot lays a white mark under each point
 * first, which is no point of its own. */
static size_t marks(const char *svg, const char *pt)
{
    char use[64];
    snprintf(use, sizeof use, "<use xlink:href='#%s' transform=", pt);
    size_t n = 0;
    for (const char *p = svg; (p = strstr(p, use)) != NULL; p += strlen(use)) {
        const char *end = strchr(p, '>');
        const char *white = strstr(p, "color='#FFFFFF'");
        n += !(white && end && white < end);
    }
    return n;
}

/* ---- refusals ---- */

Test(sweep_cli, sweep_options_without_sweep_and_a_sweep_without_mixes_are_usage_errors,
     .init = setup, .fini = teardown)
{
    char *src = path_in("src.gguf");
    synth(src, "--layers 2 --width-scale 16 --vocab 64");
    struct {
        const char *args;
        const char *says;
    } cases[] = {
        { "--promote 0,19 '%s' '%s'", "go with --sweep" },
        { "--sweep '%s' '%s'", "expected one SOURCE" },
        { "--sweep '%s'", "no mix to make" },
        { "--sweep --promote 0,x '%s'", "--promote" },
        { "--sweep --stock Q4_K_M,Q9_K '%s'", "not a type the stock quantizer takes: 'Q9_K'" },
        { "--sweep --promote 1 --budget 16GB '%s'", "--budget" },
        { "--sweep --promote 1 --target-size 12.6XB '%s'", "--target-size" },
    };
    char *hout, *herr;
    int hrc = tu_run(PN_BIN_DIR "/pn-compare --help", &hout, &herr);
    cr_assert(hrc == 0 && strstr(hout, "--sweep") && strstr(hout, "--plot FILE") &&
                  strstr(hout, "--imatrix FILE"),
              "exit %d: %s%s", hrc, hout, herr);
    free(hout);
    free(herr);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char fmt[512], cmd[8192], *out, *err;
        snprintf(fmt, sizeof fmt, "%s/pn-compare --quiet %s", PN_BIN_DIR, cases[i].args);
        snprintf(cmd, sizeof cmd, fmt, src, src);
        int rc = tu_run(cmd, &out, &err);
        cr_expect_eq(rc, 2, "%s: exit %d: %s", cmd, rc, err);
        cr_expect(strstr(err, cases[i].says), "%s: %s", cmd, err);
        free(out);
        free(err);
    }
    free(src);
}

/* The imatrix reaches both kinds of mix: the PN mixes' quantize job reads
 * it (one made for another model fails there, naming the entry), and the
 * stock quantizer is given it as llama-quantize --imatrix takes it (a stand-in
 * quantizer records its arguments). */
Test(sweep_cli, the_imatrix_is_given_to_every_pn_mix_and_to_the_stock_quantizer, .init = setup,
     .fini = teardown)
{
    char *src = path_in("src.gguf"), *tmp = path_in("tmp"), *fakeq = path_in("record.sh");
    char *args_file = path_in("args.txt");
    mkdir(tmp, 0700);
    synth(src, "--layers 2 --width-scale 10 --vocab 64");
    char text[4096];
    snprintf(text, sizeof text, "#!/bin/sh\necho \"$@\" > '%s'\nexit 1\n", args_file);
    tu_write_file(fakeq, text, strlen(text));
    chmod(fakeq, 0755);
    const char *imx = PN_SOURCE_DIR "/tests/data/imatrix/m4.imatrix.gguf";
    char args[8192], *out, *err;
    snprintf(args, sizeof args,
             "--tmpdir '%s' --recipe '%s/recipes/test-fallback.mix' --promote 0 --stock Q4_K_M "
             "--llama-quantize '%s' --imatrix '%s' '%s'",
             tmp, PN_SOURCE_DIR, fakeq, imx, src);
    int rc = sweep(args, &out, &err);
    cr_assert_eq(rc, 1, "every mix failed: exit %d: %s%s", rc, out, err);
    cr_assert(strstr(out, "m4.imatrix.gguf") && strstr(out, "blk.0.attn_gate.weight") &&
                  strstr(out, "another model"),
              "the PN mix read the imatrix: %s", out);
    size_t n = 0;
    char *recorded = tu_read_file(args_file, &n);
    cr_assert(recorded, "the stock quantizer ran");
    char want[4096];
    snprintf(want, sizeof want, "--imatrix %s ", imx);
    cr_assert(strstr(recorded, want), "the stock quantizer was given the imatrix: %s", recorded);
    cr_assert_eq(tu_count_files(tmp), 0, "the work folder is removed");
    free(recorded);
    free(out);
    free(err);
    free(src);
    free(tmp);
    free(fakeq);
    free(args_file);
}

/* The picture is never an input of the sweep, --force or not: not the
 * source (here a GGUF named like a picture), not the text. */
Test(sweep_cli, a_plot_path_that_names_an_input_is_refused_and_the_input_kept, .init = setup,
     .fini = teardown)
{
    char *src = path_in("src.svg"), *text = path_in("text.svg"), *tmp = path_in("tmp");
    mkdir(tmp, 0700);
    synth(src, "--layers 2 --width-scale 10 --vocab 64");
    tu_write_file(text, "some held-out text\n", 19);
    size_t n_src = 0, n_text = 0;
    char *src_before = tu_read_file(src, &n_src), *text_before = tu_read_file(text, &n_text);
    const char *cases[][2] = { { src, "--plot is a file of the input" },
                               { text, "an input of the sweep" } };
    for (size_t i = 0; i < 2; i++) {
        char args[8192], *out, *err;
        snprintf(args, sizeof args,
                 "--tmpdir '%s' --recipe '%s/recipes/test-fallback.mix' --promote 0 --text '%s' "
                 "--plot '%s' --force '%s'",
                 tmp, PN_SOURCE_DIR, text, cases[i][0], src);
        int rc = sweep(args, &out, &err);
        cr_assert_eq(rc, 2, "%s: exit %d: %s", cases[i][0], rc, err);
        cr_assert(strstr(err, cases[i][1]), "%s", err);
        free(out);
        free(err);
    }
    size_t n = 0;
    char *src_after = tu_read_file(src, &n);
    cr_assert(n == n_src && memcmp(src_after, src_before, n) == 0, "the source was changed");
    char *text_after = tu_read_file(text, &n);
    cr_assert(n == n_text && memcmp(text_after, text_before, n) == 0, "the text was changed");
    cr_assert_eq(tu_count_files(tmp), 0);
    free(src_before);
    free(src_after);
    free(text_before);
    free(text_after);
    free(src);
    free(text);
    free(tmp);
}

Test(sweep_cli, a_keep_folder_holding_a_mixs_name_is_refused_before_anything_runs, .init = setup,
     .fini = teardown)
{
    char *src = path_in("src.gguf"), *keep = path_in("keep"), *tmp = path_in("tmp");
    mkdir(tmp, 0700);
    mkdir(keep, 0700);
    synth(src, "--layers 2 --width-scale 16 --vocab 64");
    tu_write_file(tu_join_static(keep, "promote-3.gguf"), "mine", 4);
    char args[8192], *out, *err;
    snprintf(args, sizeof args, "--tmpdir '%s' --promote 0,3 --keep '%s' '%s'", tmp, keep, src);
    int rc = sweep(args, &out, &err);
    cr_assert_eq(rc, 1, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "promote-3.gguf is there already"), "%s", err);
    size_t n;
    char *mine = tu_read_file(tu_join_static(keep, "promote-3.gguf"), &n);
    cr_assert(n == 4 && memcmp(mine, "mine", 4) == 0, "the file in --keep was touched");
    cr_assert_eq(tu_count_files(keep), 1);
    cr_assert_eq(tu_count_files(tmp), 0);
    free(mine);
    free(out);
    free(err);
    free(src);
    free(keep);
    free(tmp);
}

/* ---- an interrupt ---- */

/* A stock quantizer that says it started (its pid) and then hangs. */
static char *hanging_quantizer(const char *pidfile)
{
    char *p = path_in("hang-quantize.sh");
    char text[2048];
    snprintf(text, sizeof text, "#!/bin/sh\necho $$ > '%s'\nexec sleep 60\n", pidfile);
    tu_write_file(p, text, strlen(text));
    chmod(p, 0755);
    return p;
}

/* pn-compare --sweep --promote 0,4 --stock Q4_K_M with the hanging
 * quantizer, SIGINT or SIGTERM once it runs; the exit status. */
static int interrupted_sweep(const char *src, const char *tmp, const char *keep, int sig,
                             pid_t *quantizer_pid)
{
    char *pidfile = path_in("quantizer.pid");
    unlink(pidfile);
    char *q = hanging_quantizer(pidfile);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        tu_child_output_to_devnull();
        const char *argv[32];
        int a = 0;
        argv[a++] = "pn-compare";
        argv[a++] = "--sweep";
        argv[a++] = "--quiet";
        argv[a++] = "--threads";
        argv[a++] = "1";
        argv[a++] = "--recipe";
        argv[a++] = FALLBACK_RECIPE;
        argv[a++] = "--promote";
        argv[a++] = "0,4";
        argv[a++] = "--stock";
        argv[a++] = "Q4_K_M";
        argv[a++] = "--llama-quantize";
        argv[a++] = q;
        argv[a++] = "--libllama";
        argv[a++] = src; /* any readable file: the fake never opens it */
        argv[a++] = "--llama-script";
        argv[a++] = SCRIPT;
        argv[a++] = "--tmpdir";
        argv[a++] = tmp;
        if (keep) {
            argv[a++] = "--keep";
            argv[a++] = keep;
        }
        argv[a++] = src;
        argv[a] = NULL;
        execv(PN_BIN_DIR "/pn-compare", (char *const *)argv);
        _exit(127);
    }
    struct stat sb;
    for (int i = 0; i < 6000 && stat(pidfile, &sb) != 0; i++)
        usleep(10000);
    cr_assert_eq(stat(pidfile, &sb), 0, "the stock quantizer never started");
    usleep(100000);
    size_t n;
    char *text = tu_read_file(pidfile, &n);
    *quantizer_pid = (pid_t)atoi(text);
    free(text);
    kill(pid, sig);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    free(pidfile);
    free(q);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Test(sweep_cli, sigint_during_a_stock_quantization_exits_130_and_leaves_nothing, .init = setup,
     .fini = teardown)
{
    char *src = path_in("src.gguf"), *tmp = path_in("tmp");
    mkdir(tmp, 0700);
    synth(src, "--layers 2 --width-scale 16 --vocab 64");
    pid_t qp = 0;
    int rc = interrupted_sweep(src, tmp, NULL, SIGINT, &qp);
    cr_assert_eq(rc, 130, "exit %d", rc);
    cr_assert_eq(tu_count_files(tmp), 0, "files left in %s", tmp);
    cr_assert_gt(qp, 0);
    cr_assert(kill(qp, 0) != 0, "the stock quantizer %d still runs", (int)qp);
    cr_assert_eq(tu_count_files(g_dir), 4,
                 "only src.gguf, tmp, the pid file and the fake "
                 "quantizer are in the test's folder");
    free(src);
    free(tmp);
}

/* With --keep, the mixes finished before the interrupt are kept, whole
 * (pn-check passes them), and nothing else is left. */
Test(sweep_cli, sigterm_with_keep_exits_143_and_leaves_the_finished_mixes_and_nothing_else,
     .init = setup, .fini = teardown)
{
    char *src = path_in("src.gguf"), *tmp = path_in("tmp"), *keep = path_in("kept");
    mkdir(tmp, 0700);
    synth(src, "--layers 2 --width-scale 16 --vocab 64");
    pid_t qp = 0;
    int rc = interrupted_sweep(src, tmp, keep, SIGTERM, &qp);
    cr_assert_eq(rc, 128 + SIGTERM, "exit %d", rc);
    cr_assert_eq(tu_count_files(tmp), 0, "files left in %s", tmp);
    cr_assert(kill(qp, 0) != 0, "the stock quantizer %d still runs", (int)qp);
    cr_assert(exists(tu_join_static(keep, "promote-0.gguf")));
    cr_assert(exists(tu_join_static(keep, "promote-4.gguf")));
    cr_assert(exists(tu_join_static(keep, "measurement.pnm")));
    cr_assert_eq(tu_count_files(keep), 3, "only the two mixes and the measurement are kept");
    for (int i = 0; i < 2; i++) {
        char cmd[8192], *out, *err;
        snprintf(cmd, sizeof cmd, "%s/pn-check --source '%s' '%s'", PN_BIN_DIR, src,
                 tu_join_static(keep, i ? "promote-4.gguf" : "promote-0.gguf"));
        int c = tu_run(cmd, &out, &err);
        cr_assert_eq(c, 0, "%s: exit %d: %s%s", cmd, c, out, err);
        free(out);
        free(err);
    }
    free(src);
    free(tmp);
    free(keep);
}

/* ---- a whole sweep in stock llama.cpp ---- */

/* Five PN mixes, one of which fails (more promotions than the model has
 * pn3t tensors), two stock types, one of which fails (its quantizer), and
 * the rest compared in one run; the table, the JSON and the picture. */
Test(sweep_llama, a_failing_mix_is_reported_and_the_others_are_compared_and_drawn, .init = setup,
     .fini = teardown, .timeout = 600)
{
    REQUIRE_LLAMA();
    char *src = path_in("src.gguf"), *tmp = path_in("tmp"), *svg = path_in("mixes.svg");
    char *keep = path_in("kept");
    mkdir(tmp, 0700);
    synth(src, "--layers 2 --width-scale 16 --vocab 300");
    char *failq = path_in("fail-quantize.sh");
    /* fails for Q3_K_S only, calls the real quantizer otherwise */
    char text[4096];
    snprintf(text, sizeof text,
             "#!/bin/sh\nfor a; do t=$a; done\n"
             "if [ \"$t\" = Q3_K_S ]; then echo 'fake: no Q3_K_S today' >&2; exit 1; fi\n"
             "exec '%s/pn-llama-quantize' \"$@\"\n",
             PN_BIN_DIR);
    tu_write_file(failq, text, strlen(text));
    chmod(failq, 0755);
    char args[8192], *out, *err;
    snprintf(args, sizeof args,
             "--tmpdir '%s' --promote 0,2,100,4,7 --stock Q4_K_M,Q3_K_S --llama-quantize '%s' "
             "--plot '%s' --budget 2MB --keep '%s' '%s'",
             tmp, failq, svg, keep, src);
    int rc = sweep(args, &out, &err);
    cr_assert_eq(rc, 1, "a failed mix is exit 1: %d: %s%s", rc, out, err);
    cr_log_info("%s", out);
    cr_assert_eq(tu_count_files(tmp), 0, "files left in %s", tmp);
    /* the table: four PN mixes and Q4_K_M compared, two failures with why */
    cr_assert(strstr(out, "P0k-fallback+0") && strstr(out, "P0k-fallback+2") &&
                  strstr(out, "P0k-fallback+4") && strstr(out, "P0k-fallback+7") &&
                  strstr(out, "stock Q4_K_M"),
              "%s", out);
    cr_assert(strstr(out, "promote 100") && strstr(out, "pn3t tensors"), "%s", out);
    cr_assert(strstr(out, "stock Q3_K_S") && strstr(out, "no Q3_K_S today"), "%s", out);
    cr_assert_eq(count(out, " failed        -"), 2, "%s", out);
    cr_assert(strstr(out, "(7 mixes, 2 failed)"), "%s", out);
    cr_assert(strstr(err, "promote 100 failed") && strstr(err, "stock Q3_K_S failed"), "%s", err);
    /* kept: the five mixes made and the measurement */
    cr_assert_eq(tu_count_files(keep), 6);
    cr_assert(exists(tu_join_static(keep, "stock-Q4_K_M.gguf")));
    cr_assert(!exists(tu_join_static(keep, "stock-Q3_K_S.gguf")));
    cr_assert(!exists(tu_join_static(keep, "promote-100.gguf")));
    /* the picture: one mark per mix made, of its kind (one more each: the key) */
    size_t n;
    char *pic = tu_read_file(svg, &n);
    cr_assert(strncmp(pic, "<?xml", 5) == 0 && strstr(pic, "</svg>"), "not an SVG");
    cr_assert_eq(marks(pic, "gpPt6"), 4 + 1, "PN mixes (circles)");
    cr_assert_eq(marks(pic, "gpPt4"), 1 + 1, "stock types (squares)");
    cr_assert(strstr(pic, "P0k-fallback+7") && strstr(pic, "stock Q4_K_M") &&
                  strstr(pic, "Pareto front") && strstr(pic, "budget 2 MB"),
              "names, the front and the budget are drawn");
    cr_assert(!strstr(pic, "promote 100"), "a failed mix is not drawn");
    free(pic);
    free(out);
    free(err);
    /* the same sweep again into the kept files' folder: a mix kept there is
     * used as it is (not refused, not made again) */
    struct stat kept_before, kept_after;
    cr_assert_eq(stat(tu_join_static(keep, "promote-0.gguf"), &kept_before), 0);
    snprintf(args, sizeof args, "--tmpdir '%s' --promote 0 --keep '%s' --json '%s'", tmp, keep,
             src);
    rc = sweep(args, &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    cr_assert_str_empty(err);
    cr_assert(strstr(out, "\"name\": \"P0k-fallback+0\", \"kind\": \"pn\", \"file\": "
                          "\"promote-0.gguf\", \"kept\": "),
              "%s", out);
    cr_assert_eq(stat(tu_join_static(keep, "promote-0.gguf"), &kept_after), 0);
    cr_assert(kept_after.st_ino == kept_before.st_ino &&
                  kept_after.st_mtim.tv_nsec == kept_before.st_mtim.tv_nsec,
              "the kept mix was made again");
    cr_assert_eq(tu_count_files(keep), 6);
    free(out);
    free(err);
    free(failq);
    free(src);
    free(tmp);
    free(svg);
    free(keep);
}

/* The JSON of a sweep names each mix, its kind and status, and its figures;
 * KL falls as pn3t tensors become pn4t. */
Test(sweep_llama, the_json_gives_every_mix_with_its_figures_in_the_order_asked, .init = setup,
     .fini = teardown, .timeout = 600)
{
    REQUIRE_LLAMA();
    char *src = path_in("src.gguf"), *tmp = path_in("tmp");
    mkdir(tmp, 0700);
    synth(src, "--layers 2 --width-scale 16 --vocab 300");
    char args[8192], *out, *err;
    snprintf(args, sizeof args, "--tmpdir '%s' --promote 0,7 --stock Q8_0 --json '%s'", tmp, src);
    int rc = sweep(args, &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    cr_assert_eq(tu_count_files(tmp), 0, "files left in %s", tmp);
    const char *a = strstr(out, "\"name\": \"P0k-fallback+0\", \"kind\": \"pn\"");
    const char *b = strstr(out, "\"name\": \"P0k-fallback+7\", \"kind\": \"pn\"");
    const char *c = strstr(out, "\"name\": \"stock Q8_0\", \"kind\": \"stock\"");
    cr_assert(a && b && c && a < b && b < c, "%s", out);
    cr_assert_eq(count(out, "\"status\": \"ok\""), 3, "%s", out);
    cr_assert(strstr(out, "\"failed\": 0"), "%s", out);
    double kl[3];
    const char *p = out;
    for (int i = 0; i < 3; i++) {
        p = strstr(p, "\"kl_mean\": ");
        cr_assert(p, "%s", out);
        p += strlen("\"kl_mean\": ");
        kl[i] = strtod(p, NULL);
    }
    cr_log_info("mean KL: +0 %.4g, +7 %.4g, Q8_0 %.4g", kl[0], kl[1], kl[2]);
    cr_assert_gt(kl[0], kl[1], "every pn3t tensor promoted is nearer the source");
    cr_assert_lt(kl[2], kl[1], "Q8_0 is nearer still");
    free(out);
    free(err);
    free(src);
    free(tmp);
}


/* ---- the promotion orders (--measure LIST) ---- */

/* A --measure list is checked before anything runs: an unknown order, one
 * given twice, kl without its calibration text and a calibration text
 * without kl are usage errors naming what is wrong, and nothing is made. */
Test(sweep_cli, a_measure_list_with_an_unknown_or_repeated_order_is_refused_naming_it,
     .init = setup, .fini = teardown)
{
    char *src = path_in("src.gguf"), *keep = path_in("keep");
    synth(src, "--layers 2 --width-scale 16 --vocab 64");
    const struct {
        const char *measure, *says;
    } cases[] = {
        { "error,error", "--measure: error is given twice" },
        { "kl,forward,kl", "--measure: kl is given twice" },
        { "error,bogus", "--measure: 'bogus' is not an order" },
        { "error,", "--measure: '' is not an order" },
        { "Error", "--measure: 'Error' is not an order" },
        { "error,kl", "--measure kl needs --calibration FILE" },
        { "error,forward --calibration /usr/share/common-licenses/GPL-3",
          "--calibration goes with --measure kl" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[8192], *out, *err;
        snprintf(args, sizeof args, "--promote 1 --keep '%s' --measure %s '%s'", keep,
                 cases[i].measure, src);
        int rc = sweep(args, &out, &err);
        cr_expect_eq(rc, 2, "--measure %s: exit %d: %s", cases[i].measure, rc, err);
        cr_expect(strstr(err, cases[i].says), "--measure %s: %s", cases[i].measure, err);
        cr_expect(strncmp(err, "pn-compare: error: ", 19) == 0, "%s", err);
        cr_expect_str_empty(out);
        cr_expect_not(exists(keep), "--measure %s: the keep folder was made", cases[i].measure);
        free(out);
        free(err);
    }
    char *hout, *herr;
    int hrc = tu_run(PN_BIN_DIR "/pn-compare --help", &hout, &herr);
    cr_assert(hrc == 0 && strstr(hout, "--measure LIST") && strstr(hout, "forward"), "%s", hout);
    free(hout);
    free(herr);
    free(src);
    free(keep);
}

/* One candidate of an error measurement file (mix/measurement.h's text
 * format, read here on its own): its name and E3 - E4. */
typedef struct cand {
    char name[96];
    double gain;
    double position;
} cand;

/* The forward position as mix/promote_score.h states the rule: 8 per
 * block, and the role's stage inside it. */
static double forward_position(const char *name)
{
    static const struct {
        const char *role;
        int stage;
    } stages[] = { { "attn_qkv.", 0 }, { "attn_q.", 0 },    { "attn_k.", 0 },
                   { "attn_v.", 0 },   { "attn_gate.", 1 }, { "attn_output.", 2 },
                   { "ssm_out.", 2 },  { "ffn_gate.", 3 },  { "ffn_up.", 4 },
                   { "ffn_down.", 5 } };
    int block = 0, used = 0;
    if (sscanf(name, "blk.%d.%n", &block, &used) != 1 || used == 0)
        return 6;
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++)
        if (strncmp(name + used, stages[i].role, strlen(stages[i].role)) == 0)
            return 8.0 * block + stages[i].stage;
    return 8.0 * block + 6;
}

static size_t read_candidates(const char *path, cand *c, size_t cap)
{
    size_t n;
    char *text = tu_read_file(path, &n);
    cr_assert(text, "%s", path);
    size_t k = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        double e3, e4;
        char name[96];
        if (sscanf(line, "%95[^\t]\t%lf\t%lf\t", name, &e3, &e4) == 3 && k < cap) {
            snprintf(c[k].name, sizeof c[k].name, "%s", name);
            c[k].gain = e3 - e4;
            c[k].position = forward_position(name);
            k++;
        }
    }
    free(text);
    return k;
}

/* The first n of the candidates ranked: by gain, or by the forward position
 * first and the gain within one (ties: the earlier tensor), as names in
 * rank order. */
static void rank(const cand *c, size_t nc, bool forward, size_t n, const char **out)
{
    bool taken[64] = { false };
    for (size_t r = 0; r < n; r++) {
        long best = -1;
        for (size_t i = 0; i < nc; i++) {
            if (taken[i])
                continue;
            if (best < 0) {
                best = (long)i;
                continue;
            }
            const cand *a = &c[i], *b = &c[best];
            bool better = forward ? a->position < b->position ||
                                        (a->position == b->position && a->gain > b->gain)
                                  : a->gain > b->gain;
            if (better)
                best = (long)i;
        }
        taken[best] = true;
        out[r] = c[best].name;
    }
}

/* pn.mix.promoted of a file, as a set: is each name in it, and no other? */
static void expect_promoted(const char *path, const char **want, size_t n)
{
    gguf_reader *r;
    pn_error e;
    pn_error_clear(&e);
    cr_assert_eq(gguf_reader_open(path, &r, &e), PN_OK, "%s", e.msg);
    const gguf_kv *kv = gguf_reader_find_kv(r, PN_KEY_MIX_PROMOTED);
    cr_assert(kv, "%s: no %s", path, PN_KEY_MIX_PROMOTED);
    cr_assert_eq(kv->arr_count, n, "%s", path);
    for (size_t i = 0; i < n; i++) {
        bool found = false;
        for (uint64_t k = 0; k < kv->arr_count; k++)
            found |= gguf_str_eq(gguf_kv_arr_str(kv, k), want[i]);
        cr_assert(found, "%s does not promote %s", path, want[i]);
    }
    gguf_reader_close(r);
}

/* --measure error,forward: each PN mix made once per order from the one
 * error measurement, the error order under today's names and the forward
 * order's with the order added; each file promotes what its order ranks
 * first (ranked here from the kept measurement, by the rule of
 * mix/promote_score.h); the JSON gives each mix's order, the picture one
 * curve per order; the sweep run again uses every mix it kept. */
Test(sweep_llama, measure_error_forward_makes_each_mix_once_per_order_promoting_as_it_ranks,
     .init = setup, .fini = teardown, .timeout = 600)
{
    REQUIRE_LLAMA();
    char *src = path_in("src.gguf"), *tmp = path_in("tmp"), *keep = path_in("kept");
    char *svg = path_in("orders.svg"), *script = path_in("script.gp"), *fake = path_in("gp.sh");
    mkdir(tmp, 0700);
    synth(src, "--layers 2 --width-scale 16 --vocab 300");
    char text[4096];
    snprintf(text, sizeof text, "#!/bin/sh\ncat > '%s'\necho '<svg xmlns=\"s\"></svg>'\n", script);
    tu_write_file(fake, text, strlen(text));
    chmod(fake, 0755);
    char args[8192], *out, *err;
    snprintf(args, sizeof args,
             "--tmpdir '%s' --text /usr/share/common-licenses/Apache-2.0 --seq-len 16 "
             "--max-seqs 2 --promote 0,2 --measure error,forward --keep '%s' --plot '%s' "
             "--gnuplot '%s' --json '%s'",
             tmp, keep, svg, fake, src);
    int rc = sweep(args, &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    cr_log_info("%s", out);
    cr_assert_eq(tu_count_files(tmp), 0, "files left in %s", tmp);
    /* four mixes and the one error measurement, nothing else */
    const char *files[] = { "promote-0.gguf", "promote-2.gguf", "promote-0-forward.gguf",
                            "promote-2-forward.gguf", "measurement.pnm" };
    for (size_t i = 0; i < 5; i++)
        cr_assert(exists(tu_join_static(keep, files[i])), "%s is not kept", files[i]);
    cr_assert_eq(tu_count_files(keep), 5);
    /* the JSON: each mix with its order, the error order's in today's names */
    const char *a = strstr(out, "\"name\": \"P0k-fallback+2\", \"kind\": \"pn\", \"file\": "
                                "\"promote-2.gguf\"");
    const char *b = strstr(out, "\"name\": \"P0k-fallback+2 by forward\", \"kind\": \"pn\", "
                                "\"file\": \"promote-2-forward.gguf\"");
    cr_assert(a && b && a < b, "the error order's mixes first:\n%s", out);
    cr_assert(strstr(a, "\"order\": \"error\"") < strstr(a, "\"order\": \"forward\""), "%s", out);
    cr_assert_eq(count(out, "\"order\": \"error\""), 2, "%s", out);
    cr_assert_eq(count(out, "\"order\": \"forward\""), 2, "%s", out);
    cr_assert_eq(count(out, "\"status\": \"ok\""), 4, "%s", out);
    /* what each order promotes, ranked here from the measurement */
    cand c[64];
    size_t nc = read_candidates(tu_join_static(keep, "measurement.pnm"), c, 64);
    cr_assert_geq(nc, 4, "the measurement has its candidates");
    const char *by_error[2], *by_forward[2];
    rank(c, nc, false, 2, by_error);
    rank(c, nc, true, 2, by_forward);
    cr_log_info("by error: %s %s; by forward: %s %s", by_error[0], by_error[1], by_forward[0],
                by_forward[1]);
    bool same =
        (strcmp(by_error[0], by_forward[0]) == 0 && strcmp(by_error[1], by_forward[1]) == 0) ||
        (strcmp(by_error[0], by_forward[1]) == 0 && strcmp(by_error[1], by_forward[0]) == 0);
    cr_assert_not(same, "this model's two orders promote the same two: no test");
    expect_promoted(tu_join_static(keep, "promote-2.gguf"), by_error, 2);
    expect_promoted(tu_join_static(keep, "promote-2-forward.gguf"), by_forward, 2);
    expect_promoted(tu_join_static(keep, "promote-0-forward.gguf"), NULL, 0);
    /* the picture: one curve per order, its points joined in size order */
    size_t n;
    char *gp = tu_read_file(script, &n);
    cr_assert(gp, "gnuplot was given a script");
    cr_assert(strstr(gp, "title \"PN, promotions by error\"") &&
                  strstr(gp, "title \"PN, promotions by forward position\""),
              "%s", gp);
    cr_assert_eq(count(gp, "with yerrorlines"), 2, "%s", gp);
    cr_assert(strstr(gp, "\"P0k-fallback+2 by forward\""), "%s", gp);
    free(gp);
    free(out);
    free(err);
    /* again into the same folder: every mix and the measurement are used */
    struct stat before, after;
    cr_assert_eq(stat(tu_join_static(keep, "promote-2-forward.gguf"), &before), 0);
    snprintf(args, sizeof args,
             "--tmpdir '%s' --text /usr/share/common-licenses/Apache-2.0 --seq-len 16 "
             "--max-seqs 1 --promote 0,2 --measure error,forward --keep '%s' '%s'",
             tmp, keep, src);
    rc = sweep(args, &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    cr_assert(strstr(out, "P0k-fallback+2 by forward"), "a kept mix keeps its order:\n%s", out);
    cr_assert_eq(stat(tu_join_static(keep, "promote-2-forward.gguf"), &after), 0);
    cr_assert(after.st_ino == before.st_ino && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec,
              "the kept mix was made again");
    cr_assert_eq(tu_count_files(keep), 5);
    free(out);
    free(err);
    free(src);
    free(tmp);
    free(keep);
    free(svg);
    free(script);
    free(fake);
}

/* The KL measurement's candidates (compare/kl_measure.h's file, read here
 * on its own: "name kl gain se extra_bytes crc" lines): name and gain. */
static size_t read_kl_candidates(const char *path, cand *c, size_t cap)
{
    size_t n;
    char *text = tu_read_file(path, &n);
    cr_assert(text, "%s", path);
    size_t k = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        double kl, gain;
        char name[96];
        if (sscanf(line, "%95[^\t]\t%lf\t%lf\t", name, &kl, &gain) == 3 &&
            strstr(name, ".weight") && k < cap) {
            snprintf(c[k].name, sizeof c[k].name, "%s", name);
            c[k].gain = gain;
            c[k].position = 0;
            k++;
        }
    }
    free(text);
    return k;
}

/* --measure error,kl: both measurements made once and kept, each order's
 * mixes promoting what its measurement ranks first; a later sweep into the
 * folder reads both kept measurements (they stay as they are) for mixes it
 * makes anew. */
Test(sweep_llama, measure_error_kl_keeps_both_measurements_and_reads_them_again, .init = setup,
     .fini = teardown, .timeout = 900)
{
    REQUIRE_LLAMA();
    char *src = path_in("src.gguf"), *tmp = path_in("tmp"), *keep = path_in("kept");
    mkdir(tmp, 0700);
    synth(src, "--layers 2 --width-scale 16 --vocab 300");
    const char *texts = "--calibration /usr/share/common-licenses/Apache-2.0 --text "
                        "/usr/share/common-licenses/GPL-3 --seq-len 8 --max-seqs 1";
    char args[8192], *out, *err;
    snprintf(args, sizeof args, "--tmpdir '%s' %s --promote 2 --measure error,kl --keep '%s' '%s'",
             tmp, texts, keep, src);
    int rc = sweep(args, &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    cr_log_info("%s", out);
    char want[4096];
    snprintf(want, sizeof want,
             "\nmeasurement kept: %s/measurement.pnm\nmeasurement kept: %s/"
             "measurement.kl\n",
             keep, keep);
    cr_assert(strstr(out, want), "both measurements kept:\n%s", out);
    cr_assert(strstr(out, "P0k-fallback+2 by KL"), "%s", out);
    cr_assert_eq(tu_count_files(keep), 4, "two mixes, two measurements");
    cr_assert_eq(tu_count_files(tmp), 0);
    free(out);
    free(err);
    cand ce[64], ck[64];
    size_t ne = read_candidates(tu_join_static(keep, "measurement.pnm"), ce, 64);
    size_t nk = read_kl_candidates(tu_join_static(keep, "measurement.kl"), ck, 64);
    cr_assert(ne >= 3 && nk == ne, "%zu error and %zu KL candidates", ne, nk);
    const char *by_error[3], *by_kl[3];
    rank(ce, ne, false, 2, by_error);
    rank(ck, nk, false, 3, by_kl);
    expect_promoted(tu_join_static(keep, "promote-2.gguf"), by_error, 2);
    expect_promoted(tu_join_static(keep, "promote-2-kl.gguf"), by_kl, 2);
    /* again, with one count more: the kept measurements are read, not made */
    struct stat kl_before, kl_after, pnm_before, pnm_after;
    cr_assert_eq(stat(tu_join_static(keep, "measurement.kl"), &kl_before), 0);
    cr_assert_eq(stat(tu_join_static(keep, "measurement.pnm"), &pnm_before), 0);
    snprintf(args, sizeof args,
             "--tmpdir '%s' %s --promote 2,3 --measure error,kl --keep '%s' '%s'", tmp, texts, keep,
             src);
    rc = sweep(args, &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    cr_assert_not(strstr(out, "measurement kept"), "%s", out);
    cr_assert_eq(stat(tu_join_static(keep, "measurement.kl"), &kl_after), 0);
    cr_assert_eq(stat(tu_join_static(keep, "measurement.pnm"), &pnm_after), 0);
    cr_assert(kl_after.st_ino == kl_before.st_ino &&
                  kl_after.st_mtim.tv_nsec == kl_before.st_mtim.tv_nsec &&
                  pnm_after.st_ino == pnm_before.st_ino &&
                  pnm_after.st_mtim.tv_nsec == pnm_before.st_mtim.tv_nsec,
              "a kept measurement was written");
    cr_assert_eq(tu_count_files(keep), 6, "four mixes, two measurements");
    expect_promoted(tu_join_static(keep, "promote-3-kl.gguf"), by_kl, 3);
    free(out);
    free(err);
    /* on other positions the kept KL measurement is not this sweep's: it is
     * refused, named where it is, and nothing there changes */
    snprintf(args, sizeof args,
             "--tmpdir '%s' %s --max-seqs 2 --promote 4 --measure error,kl --keep '%s' '%s'", tmp,
             texts, keep, src);
    rc = sweep(args, &out, &err);
    cr_assert_eq(rc, 1, "exit %d: %s", rc, err);
    snprintf(want, sizeof want,
             "pn-compare: error: --measure kl: %s/measurement.kl: measured on "
             "other positions",
             keep);
    cr_assert(strstr(err, want) && strstr(err, "remove it to measure again"), "%s", err);
    cr_assert_eq(stat(tu_join_static(keep, "measurement.kl"), &kl_after), 0);
    cr_assert(kl_after.st_mtim.tv_nsec == kl_before.st_mtim.tv_nsec, "it was written");
    cr_assert_eq(tu_count_files(keep), 6);
    cr_assert_eq(tu_count_files(tmp), 0);
    free(out);
    free(err);
    free(src);
    free(tmp);
    free(keep);
}
