/* pn-compare as a user meets it (issue 43): a Hugging Face folder with an
 * MTP layer and PN files made from it with the layer dropped or kept, a
 * split set's size, the mean KL's standard error, the sweep of such a
 * folder and its picture, what the sweep refuses before it runs anything,
 * --keep shared by two sweeps and resumed after an interrupt, and the
 * options the docs name.
 *
 * compare_fake: a stand-in "node" (a shell script) answers with logits the
 * test wrote, so the figures are checked against the textbook formulas
 * without llama.cpp. compare_hf and sweep_resume run stock llama.cpp
 * (node-llama-cpp; skipped with the reason where it is missing, except in
 * CI, PN_REQUIRE_LLAMA=1). sweep_first needs neither: a stand-in stock
 * quantizer records whether it ran. */
#include <criterion/criterion.h>
#include <math.h>
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

#define SCRIPT PN_SOURCE_DIR "/tools/llama/pn-llama-logits.mjs"
#define FALLBACK_RECIPE PN_SOURCE_DIR "/recipes/test-fallback.mix"
#define REQUIRE_LLAMA() TU_REQUIRE_LLAMA(SCRIPT, NULL)

static void run_ok(const char *cmd)
{
    char *out, *err;
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "%s: exit %d: %s%s", cmd, rc, out, err);
    free(out);
    free(err);
}

static void synth(const char *path, const char *args)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s/pn-synth --quiet %s '%s'", PN_BIN_DIR, args, path);
    run_ok(cmd);
}

static void quantize(const char *src, const char *dst, const char *args)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s/pn-quantize --quiet --backend cpu --threads 1 %s '%s' '%s'",
             PN_BIN_DIR, args, src, dst);
    run_ok(cmd);
}

/* The test recipe with the shipped recipe's 'mtp drop': what a user's
 * pn-quantize of a Qwen3.5 checkpoint does with its MTP layer. */
static char *drop_recipe(void)
{
    char *p = path_in("drop.mix");
    size_t n = 0;
    char *text = tu_read_file(FALLBACK_RECIPE, &n);
    cr_assert(text);
    char *all = malloc(n + 16);
    memcpy(all, text, n);
    memcpy(all + n, "\nmtp drop\n", 10);
    tu_write_file(p, all, n + 10);
    free(all);
    free(text);
    return p;
}

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* The number after "key": (the first at or after from). */
static double json_number(const char *from, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(from, pat);
    cr_assert(p, "no %s in %s", key, from);
    return strtod(p + strlen(pat), NULL);
}

static uint64_t file_size(const char *path)
{
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0, "%s", path);
    return (uint64_t)sb.st_size;
}

/* ---- a stand-in llama.cpp ---- */

#define V 64
#define N_POS (PN_COMPARE_FIXED_SEQS * PN_COMPARE_FIXED_LEN)

/* The logits at position j: the source's and the decoded model's. */
static void logits_at(int j, float *p, float *q)
{
    for (int v = 0; v < V; v++) {
        p[v] = (float)((v * 37 + j * 11) % 17) * 0.25f;
        q[v] = p[v];
    }
    q[(j * 7) % V] += 0.5f + (float)(j % 5);
    q[(j * 3 + 1) % V] -= 1.0f;
}

/* What the harness writes on its fd 3 for the fixed token set. */
static void write_answer(const char *path, bool decoded)
{
    size_t bytes = 16 + PN_COMPARE_FIXED_SEQS * 4 + N_POS * 4 + (size_t)N_POS * V * 4;
    uint8_t *b = malloc(bytes), *w = b;
    memcpy(w, "PNLOGIT1", 8);
    w += 8;
    uint32_t head[2] = { V, PN_COMPARE_FIXED_SEQS };
    memcpy(w, head, 8);
    w += 8;
    for (int s = 0; s < PN_COMPARE_FIXED_SEQS; s++) {
        uint32_t len = PN_COMPARE_FIXED_LEN;
        memcpy(w, &len, 4);
        w += 4;
        for (int i = 0; i < PN_COMPARE_FIXED_LEN; i++) {
            uint32_t id = pn_compare_fixed_token(V, s, i);
            memcpy(w, &id, 4);
            w += 4;
        }
    }
    for (int j = 0; j < N_POS; j++) {
        float p[V], q[V];
        logits_at(j, p, q);
        memcpy(w, decoded ? q : p, sizeof p);
        w += sizeof p;
    }
    tu_write_file(path, b, bytes);
    free(b);
}

/* A "node" that answers every model with the logits above: the decoded
 * models (and a stock quantization) with q, the source with p. */
static char *fake_node(void)
{
    char *p_bin = path_in("p.bin"), *q_bin = path_in("q.bin"), *node = path_in("node.sh");
    write_answer(p_bin, false);
    write_answer(q_bin, true);
    char text[4096];
    snprintf(text, sizeof text,
             "#!/bin/sh\ncat >/dev/null\ncase \"$*\" in\n"
             "*--print-version*) echo '{\"llama_cpp\":\"vTEST\",\"node_llama_cpp\":\"0.0\"}'; "
             "cat '%s' >&3 ;;\n*) cat '%s' >&3 ;;\nesac\n",
             p_bin, q_bin);
    tu_write_file(node, text, strlen(text));
    chmod(node, 0755);
    free(p_bin);
    free(q_bin);
    return node;
}

/* KL(P||Q) by the textbook formula, in long double. */
static double textbook_kl(const float *p, const float *q)
{
    long double sp = 0, sq = 0, kl = 0;
    for (int v = 0; v < V; v++) {
        sp += expl((long double)p[v]);
        sq += expl((long double)q[v]);
    }
    for (int v = 0; v < V; v++) {
        long double P = expl((long double)p[v]) / sp, Q = expl((long double)q[v]) / sq;
        kl += P * (logl(P) - logl(Q));
    }
    return (double)kl;
}

/* The mean KL's standard error is the sample standard deviation over the
 * positions / sqrt(n), in the JSON and beside the mean in the table as
 * llama-perplexity prints "Mean KLD: x ± y"; a split set's bytes are all
 * its files'. */
Test(compare_fake, the_mean_kl_has_its_standard_error_and_a_split_sets_bytes_are_the_sets,
     .init = setup, .fini = teardown)
{
    char *src = path_in("src.gguf"), *pn = path_in("pn.gguf"), *set = path_in("set.gguf");
    char *tmp = path_in("tmp");
    mkdir(tmp, 0700);
    synth(src, "--layers 2 --width-scale 16 --vocab 64");
    quantize(src, pn, "--recipe " FALLBACK_RECIPE);
    quantize(src, set, "--recipe " FALLBACK_RECIPE " --split-max-tensors 10");
    char *first = path_in("set-00001-of-00003.gguf");
    uint64_t set_bytes = 0;
    for (int s = 1; s <= 3; s++) {
        char name[64];
        snprintf(name, sizeof name, "set-%05d-of-00003.gguf", s);
        set_bytes += file_size(tu_join_static(g_dir, name));
    }
    cr_assert_gt(set_bytes, file_size(first));
    /* what the figures must be, from the logits the stand-in gives */
    double kl[N_POS], sum = 0, ss = 0;
    for (int j = 0; j < N_POS; j++) {
        float p[V], q[V];
        logits_at(j, p, q);
        kl[j] = textbook_kl(p, q);
        sum += kl[j];
    }
    double mean = sum / N_POS;
    for (int j = 0; j < N_POS; j++)
        ss += (kl[j] - mean) * (kl[j] - mean);
    double se = sqrt(ss / (N_POS - 1) / N_POS);
    char *node = fake_node();
    char cmd[16384], *out, *err;
    snprintf(cmd, sizeof cmd,
             "%s/pn-compare --quiet --threads 1 --tmpdir '%s' --node '%s' --llama-script '%s' "
             "--json '%s' '%s' '%s'",
             PN_BIN_DIR, tmp, node, SCRIPT, src, pn, first);
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    cr_assert_str_empty(err);
    const char *f1 = strstr(out, "\"files\"");
    cr_assert(f1, "%s", out);
    const char *f2 = strstr(f1, "set-00001-of-00003.gguf");
    cr_assert(f2, "%s", out);
    for (const char *f = f1; f; f = f == f1 ? f2 : NULL) {
        double m = json_number(f, "kl_mean"), e = json_number(f, "kl_mean_se");
        cr_assert(fabs(m - mean) <= 1e-7 * mean, "kl_mean %.9g, the formula %.9g", m, mean);
        cr_assert(fabs(e - se) <= 1e-7 * se, "kl_mean_se %.9g, the formula %.9g", e, se);
    }
    cr_assert_eq((uint64_t)json_number(f1, "bytes"), file_size(pn));
    cr_assert_eq((uint64_t)json_number(f2, "bytes"), set_bytes, "the set's bytes: %s", f2);
    free(out);
    free(err);
    /* the table: "x ± y" and the set's bytes */
    snprintf(cmd, sizeof cmd,
             "%s/pn-compare --quiet --threads 1 --tmpdir '%s' --node '%s' --llama-script '%s' "
             "'%s' '%s' '%s'",
             PN_BIN_DIR, tmp, node, SCRIPT, src, pn, first);
    rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    cr_assert_str_empty(err);
    char want[128];
    snprintf(want, sizeof want, " %.4g ± %.2g ", mean, se);
    cr_assert_eq(count(out, want), 2, "'%s' on both rows:\n%s", want, out);
    cr_assert(strstr(out, "KL mean ± SE"), "%s", out);
    snprintf(want, sizeof want, " %llu ", (unsigned long long)set_bytes);
    cr_assert(strstr(out, want), "the set's bytes %s:\n%s", want, out);
    cr_assert_eq(tu_count_files(tmp), 0);
    free(out);
    free(err);
    free(node);
    free(first);
    free(src);
    free(pn);
    free(set);
    free(tmp);
}

/* ---- a Hugging Face folder with its MTP layer, in stock llama.cpp ---- */

/* pn-compare reads the folder as pn-quantize read it for each file: a PN
 * file made with the layer dropped (the shipped recipe's 'mtp drop') and
 * one made with it kept are both compared in one run. */
Test(compare_hf, a_folder_with_an_mtp_layer_is_compared_with_files_that_dropped_or_kept_it,
     .init = setup, .fini = teardown, .timeout = 600)
{
    REQUIRE_LLAMA();
    char *hf = path_in("hf2"), *drop = path_in("drop.gguf"), *keep = path_in("keep.gguf");
    char *tmp = path_in("tmp"), *recipe = drop_recipe();
    mkdir(tmp, 0700);
    synth(hf, "--hf --mtp --layers 2 --width-scale 16 --vocab 512");
    char args[8192];
    snprintf(args, sizeof args, "--promote 2 --recipe '%s'", recipe);
    quantize(hf, drop, args);
    quantize(hf, keep, "--promote 2 --recipe " FALLBACK_RECIPE);
    char cmd[16384], *out, *err;
    snprintf(cmd, sizeof cmd,
             "%s/pn-compare --quiet --threads 1 --tmpdir '%s' --llama-script '%s' '%s' '%s' '%s'",
             PN_BIN_DIR, tmp, SCRIPT, hf, drop, keep);
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    cr_assert_str_empty(err);
    cr_log_info("%s", out);
    const char *a = strstr(out, "drop.gguf\n"), *b = strstr(out, "keep.gguf\n");
    cr_assert(a && b && a < b, "a row for each file, in order:\n%s", out);
    cr_assert_eq(count(out, "P0k-fallback+2 "), 2, "%s", out);
    cr_assert_eq(count(out, " ± "), 1 + 2, "the header's and each file's:\n%s", out);
    cr_assert_eq(tu_count_files(tmp), 0);
    free(out);
    free(err);
    free(hf);
    free(drop);
    free(keep);
    free(tmp);
    free(recipe);
}

/* The sweep of that folder with the dropping recipe prints its table and
 * draws its picture: the spread on every point, a caption naming the
 * source, the tokens and their positions and the llama.cpp release, sizes
 * in MB for a model of a few MB, the target-size mix labelled as such, and
 * "wrote FILE" on stderr. */
Test(compare_hf, the_sweep_of_a_folder_with_an_mtp_layer_prints_its_table_and_draws_its_picture,
     .init = setup, .fini = teardown, .timeout = 600)
{
    REQUIRE_LLAMA();
    char *hf = path_in("hf2"), *tmp = path_in("tmp"), *svg = path_in("mixes.svg");
    char *recipe = drop_recipe();
    mkdir(tmp, 0700);
    synth(hf, "--hf --mtp --layers 2 --width-scale 16 --vocab 512");
    char cmd[16384], *out, *err;
    snprintf(cmd, sizeof cmd,
             "%s/pn-compare --sweep --threads 1 --tmpdir '%s' --llama-script '%s' --recipe '%s' "
             "--promote 0,3 --target-size 2.6MB --plot '%s' '%s'",
             PN_BIN_DIR, tmp, SCRIPT, recipe, svg, hf);
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s%s", rc, out, err);
    cr_log_info("%s", out);
    char want[8192];
    snprintf(want, sizeof want, "wrote %s\n", svg);
    cr_assert_str_eq(err, want);
    cr_assert(strstr(out, " P0k-fallback+0 ") && strstr(out, " P0k-fallback+3 ") &&
                  strstr(out, " (--target-size 2.6 MB) "),
              "%s", out);
    cr_assert(strstr(out, "(3 mixes, 0 failed)"), "%s", out);
    cr_assert_eq(count(out, " ± "), 1 + 3, "the header's and each mix's:\n%s", out);
    size_t n;
    char *pic = tu_read_file(svg, &n);
    cr_assert(pic && strncmp(pic, "<?xml", 5) == 0 && strstr(pic, "</svg>"), "not an SVG");
    const char *in_pic[] = { "file size (MB",
                             "(--target-size 2.6 MB)",
                             "judged on the fixed token set: 4 sequences, 256 positions",
                             "by stock llama.cpp v",
                             "bits per weight of each mix",
                             "1 std. error" };
    for (size_t i = 0; i < sizeof in_pic / sizeof in_pic[0]; i++)
        cr_assert(strstr(pic, in_pic[i]), "the picture lacks '%s'", in_pic[i]);
    snprintf(want, sizeof want, "source %s (", hf);
    cr_assert(strstr(pic, want), "the caption names the source: %s", want);
    cr_assert_eq(tu_count_files(tmp), 0);
    free(pic);
    free(out);
    free(err);
    free(hf);
    free(tmp);
    free(svg);
    free(recipe);
}

/* ---- what the sweep checks before it runs anything ---- */

/* A stand-in stock quantizer that records its arguments and fails. */
static char *recording_quantizer(const char *args_file)
{
    char *q = path_in("record.sh"), text[4096];
    snprintf(text, sizeof text, "#!/bin/sh\necho \"$@\" > '%s'\nexit 1\n", args_file);
    tu_write_file(q, text, strlen(text));
    chmod(q, 0755);
    return q;
}

/* pn-compare --sweep ARGS SOURCE: its exit status, stdout and stderr. */
static int sweep_run(const char *args, const char *src, char **out, char **err)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s/pn-compare --sweep --quiet --threads 1 %s '%s'", PN_BIN_DIR, args,
             src);
    return tu_run(cmd, out, err);
}

/* A recipe given by a shipped name is taken as pn-quantize takes it (and
 * one that cannot type the model is refused then, once, naming its rule),
 * an unknown name is a usage error, and a text that is not there is
 * refused: each before any mix is made (the stock quantizer never ran,
 * nothing is left). */
Test(sweep_first, the_recipe_and_the_text_are_checked_before_any_mix_is_made, .init = setup,
     .fini = teardown)
{
    char *src = path_in("src.gguf"), *tmp = path_in("tmp"), *args_file = path_in("args.txt");
    char *q = recording_quantizer(args_file), *missing = path_in("no-such-text.txt");
    mkdir(tmp, 0700);
    /* width 16: K = 320, which the shipped recipe's q3_K and q4_K cannot hold */
    synth(src, "--layers 2 --width-scale 16 --vocab 64");
    struct {
        const char *opts;
        int rc;
        const char *says, *says_too;
    } cases[] = {
        { "--recipe qwen3.8-27b-pn3", 1, "qwen3.8-27b-pn3.mix:", "needs a multiple of 256" },
        { "--recipe no-such-recipe", 2,
          "pn-compare: error: --recipe no-such-recipe: no such file, nor a shipped recipe of that "
          "name; "
          "shipped:",
          "qwen3.8-27b-pn3" },
        { "--recipe " FALLBACK_RECIPE " --text '%s'", 1, "no-such-text.txt: cannot open the text",
          "No such file" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char opts[4096], args[8192], *out, *err;
        snprintf(opts, sizeof opts, cases[i].opts, missing);
        snprintf(args, sizeof args,
                 "--tmpdir '%s' --promote 0,2 --stock Q4_K_M --llama-quantize '%s' --libllama "
                 "'%s' %s",
                 tmp, q, src, opts);
        int rc = sweep_run(args, src, &out, &err);
        cr_expect_eq(rc, cases[i].rc, "%s: exit %d: %s%s", opts, rc, out, err);
        cr_expect(strstr(err, cases[i].says) && strstr(err, cases[i].says_too), "%s: %s", opts,
                  err);
        cr_expect_str_empty(out, "%s: %s", opts, out);
        cr_expect(!exists(args_file), "%s: the stock quantizer ran", opts);
        cr_expect_eq(tu_count_files(tmp), 0, "%s: files left", opts);
        unlink(args_file);
        free(out);
        free(err);
    }
    free(src);
    free(tmp);
    free(args_file);
    free(q);
    free(missing);
}

/* llama-quantize takes its types in either case (q4_k_m): so does --stock,
 * and the quantizer is given llama.cpp's spelling. */
Test(sweep_first, stock_types_are_taken_in_lower_case_as_llama_quantize_takes_them, .init = setup,
     .fini = teardown)
{
    char *src = path_in("src.gguf"), *tmp = path_in("tmp"), *args_file = path_in("args.txt");
    char *q = recording_quantizer(args_file);
    mkdir(tmp, 0700);
    synth(src, "--layers 2 --width-scale 16 --vocab 64");
    char args[8192], *out, *err;
    snprintf(args, sizeof args,
             "--tmpdir '%s' --stock q4_k_m --llama-quantize '%s' --libllama '%s'", tmp, q, src);
    int rc = sweep_run(args, src, &out, &err);
    cr_assert_eq(rc, 1, "the stand-in fails: exit %d: %s%s", rc, out, err);
    cr_assert(strstr(out, "no mix could be made") && strstr(out, "stock Q4_K_M"), "%s", out);
    cr_assert(
        strstr(err, "pn-compare: error: stock Q4_K_M failed: stock quantizer failed (exit 1)"),
        "%s", err);
    size_t n = 0;
    char *recorded = tu_read_file(args_file, &n);
    cr_assert(recorded, "the stock quantizer ran");
    cr_assert(strstr(recorded, "/stock-Q4_K_M.gguf Q4_K_M\n"), "%s", recorded);
    cr_assert_eq(tu_count_files(tmp), 0);
    free(recorded);
    free(out);
    free(err);
    free(src);
    free(tmp);
    free(args_file);
    free(q);
}

/* A stock quantizer that says it started (its pid in pidfile), then hangs. */
static char *hanging_quantizer(const char *pidfile)
{
    char *p = path_in("hang.sh"), text[2048];
    snprintf(text, sizeof text, "#!/bin/sh\necho $$ > '%s'\nexec sleep 60\n", pidfile);
    tu_write_file(p, text, strlen(text));
    chmod(p, 0755);
    return p;
}

/* pn-compare --sweep --promote 0,4 --stock Q4_K_M --keep KEEP SRC with the
 * hanging quantizer, started in the background; returns once the
 * quantizer runs (the PN mixes are made), with the sweep's pid. */
static pid_t sweep_until_stock(const char *src, const char *tmp, const char *keep)
{
    char *pidfile = path_in("quantizer.pid");
    unlink(pidfile);
    char *q = hanging_quantizer(pidfile);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        tu_child_output_to_devnull();
        execl(PN_BIN_DIR "/pn-compare", "pn-compare", "--sweep", "--quiet", "--threads", "1",
              "--recipe", FALLBACK_RECIPE, "--promote", "0,4", "--stock", "Q4_K_M",
              "--llama-quantize", q, "--libllama", src, "--llama-script", SCRIPT, "--tmpdir", tmp,
              "--keep", keep, src, (char *)NULL);
        _exit(127);
    }
    struct stat sb;
    for (int i = 0; i < 6000 && stat(pidfile, &sb) != 0; i++)
        usleep(10000);
    cr_assert_eq(stat(pidfile, &sb), 0, "the stock quantizer never started");
    usleep(100000);
    free(pidfile);
    free(q);
    return pid;
}

static int stop(pid_t pid, int sig)
{
    kill(pid, sig);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Two sweeps keeping into one folder would both run and the second lose
 * every mix at the end: the second is refused at once, and touches
 * nothing. */
Test(sweep_first, a_second_sweep_into_a_keep_folder_in_use_is_refused_at_once, .init = setup,
     .fini = teardown)
{
    char *src = path_in("src.gguf"), *tmp = path_in("tmp"), *keep = path_in("kept");
    mkdir(tmp, 0700);
    synth(src, "--layers 2 --width-scale 16 --vocab 64");
    pid_t first = sweep_until_stock(src, tmp, keep);
    int before = tu_count_files(keep);
    char args[8192], *out, *err;
    snprintf(args, sizeof args, "--tmpdir '%s' --recipe '%s' --promote 7 --keep '%s'", tmp,
             FALLBACK_RECIPE, keep);
    int rc = sweep_run(args, src, &out, &err);
    cr_assert_eq(rc, 1, "exit %d: %s%s", rc, out, err);
    char want[8192];
    snprintf(want, sizeof want,
             "pn-compare: error: --keep %s: another sweep is keeping its mixes there now; one "
             "sweep at a time per folder (wait for it, or give another folder)\n",
             keep);
    cr_assert_str_eq(err, want);
    cr_assert_str_empty(out);
    cr_assert_eq(tu_count_files(keep), before, "the second sweep touched the folder");
    cr_assert(!exists(tu_join_static(keep, "promote-7.gguf")));
    cr_assert_eq(stop(first, SIGTERM), 128 + SIGTERM);
    free(out);
    free(err);
    free(src);
    free(tmp);
    free(keep);
}

/* An interrupted sweep with --keep leaves its finished mixes there; the
 * same sweep run again uses them (the files are not made again: the same
 * inode, the same time) and makes the rest. */
Test(sweep_resume, an_interrupted_sweep_with_keep_resumes_with_the_mixes_it_kept, .init = setup,
     .fini = teardown, .timeout = 600)
{
    REQUIRE_LLAMA();
    char *src = path_in("src.gguf"), *tmp = path_in("tmp"), *keep = path_in("kept");
    mkdir(tmp, 0700);
    synth(src, "--layers 2 --width-scale 16 --vocab 300");
    cr_assert_eq(stop(sweep_until_stock(src, tmp, keep), SIGTERM), 128 + SIGTERM);
    const char *names[] = { "promote-0.gguf", "promote-4.gguf", "measurement.pnm" };
    struct stat before[3], after;
    for (int i = 0; i < 3; i++)
        cr_assert_eq(stat(tu_join_static(keep, names[i]), &before[i]), 0, "%s", names[i]);
    cr_assert_eq(tu_count_files(keep), 3);
    char args[8192], *out, *err;
    snprintf(args, sizeof args,
             "--tmpdir '%s' --llama-script '%s' --recipe '%s' --promote 0,4,7 --keep '%s'", tmp,
             SCRIPT, FALLBACK_RECIPE, keep);
    int rc = sweep_run(args, src, &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s%s", rc, out, err);
    cr_assert_str_empty(err);
    cr_log_info("%s", out);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(stat(tu_join_static(keep, names[i]), &after), 0, "%s", names[i]);
        cr_assert(after.st_ino == before[i].st_ino &&
                      after.st_mtim.tv_sec == before[i].st_mtim.tv_sec &&
                      after.st_mtim.tv_nsec == before[i].st_mtim.tv_nsec,
                  "%s was made again", names[i]);
    }
    const char *rows[] = { " P0k-fallback+0 ", " P0k-fallback+4 ", " P0k-fallback+7 " };
    for (int i = 0; i < 3; i++)
        cr_assert(strstr(out, rows[i]), "%s:\n%s", rows[i], out);
    cr_assert(strstr(out, "(3 mixes, 0 failed)"), "%s", out);
    cr_assert(exists(tu_join_static(keep, "promote-7.gguf")));
    cr_assert_eq(tu_count_files(keep), 4, "the three mixes and the measurement");
    cr_assert_eq(tu_count_files(tmp), 0);
    free(out);
    free(err);
    free(src);
    free(tmp);
    free(keep);
}

/* ---- the docs ---- */

/* Every option pn-compare's --help lists is documented (docs/usage.md or
 * docs/llama-cpp.md name it as `--option`). */
Test(compare_docs, every_option_of_pn_compare_is_in_the_docs)
{
    char *out, *err;
    int rc = tu_run(PN_BIN_DIR "/pn-compare --help", &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    cr_assert_str_empty(err);
    size_t n1 = 0, n2 = 0;
    char *usage = tu_read_file(PN_SOURCE_DIR "/docs/usage.md", &n1);
    char *llama = tu_read_file(PN_SOURCE_DIR "/docs/llama-cpp.md", &n2);
    cr_assert(usage && llama);
    size_t checked = 0;
    for (const char *p = strstr(out, "\n  --"); p; p = strstr(p + 1, "\n  --")) {
        char opt[64];
        size_t k = 0;
        for (const char *q = p + 3; k < sizeof opt - 2 && (*q == '-' || (*q >= 'a' && *q <= 'z'));
             q++)
            opt[k++] = *q;
        opt[k] = 0;
        char ticked[80], spaced[80];
        snprintf(ticked, sizeof ticked, "`%s", opt);
        snprintf(spaced, sizeof spaced, "[%s ", opt);
        bool named = strstr(usage, ticked) || strstr(llama, ticked) || strstr(usage, spaced);
        cr_expect(named, "%s is in --help but in no doc", opt);
        checked++;
    }
    cr_assert_gt(checked, 25, "the options were read from --help:\n%s", out);
    free(usage);
    free(llama);
    free(out);
    free(err);
}

/* When llama.cpp fails on a mix, the error names the mix as it is after
 * the sweep: by its file name (the work folder is gone), or by the path
 * --keep kept it under, where it is. */
Test(sweep_first, a_failed_comparison_names_each_mix_where_it_is_after_the_sweep, .init = setup,
     .fini = teardown)
{
    char *src = path_in("src.gguf"), *tmp = path_in("tmp"), *keep = path_in("kept");
    char *node = path_in("node.sh"), *p_bin = path_in("p.bin");
    mkdir(tmp, 0700);
    synth(src, "--layers 2 --width-scale 16 --vocab 64");
    write_answer(p_bin, false);
    char text[4096];
    snprintf(text, sizeof text,
             "#!/bin/sh\ncat >/dev/null\ncase \"$*\" in\n"
             "*--print-version*) echo '{\"llama_cpp\":\"vTEST\"}'; cat '%s' >&3 ;;\n"
             "*) echo \"fake: cannot load $2\" >&2; exit 1 ;;\nesac\n",
             p_bin);
    tu_write_file(node, text, strlen(text));
    chmod(node, 0755);
    for (int kept = 0; kept < 2; kept++) {
        char args[8192], *out, *err;
        snprintf(args, sizeof args,
                 "--tmpdir '%s' --node '%s' --llama-script '%s' --recipe '%s' --promote 0 %s%s%s",
                 tmp, node, SCRIPT, FALLBACK_RECIPE, kept ? "--keep '" : "", kept ? keep : "",
                 kept ? "'" : "");
        int rc = sweep_run(args, src, &out, &err);
        cr_assert_eq(rc, 1, "exit %d: %s%s", rc, out, err);
        cr_assert_str_empty(out);
        cr_assert(!strstr(err, ".pn-sweep."), "a removed work folder is named: %s", err);
        char want[8192];
        if (kept)
            snprintf(want, sizeof want, "pn-compare: error: llama.cpp on %s/promote-0.gguf failed",
                     keep);
        else
            snprintf(want, sizeof want, "pn-compare: error: llama.cpp on promote-0.gguf failed");
        cr_assert(strncmp(err, want, strlen(want)) == 0, "%s", err);
        cr_assert(kept || strstr(err, "(the sweep's mixes were removed: --keep DIR keeps them)\n"),
                  "%s", err);
        cr_assert(!kept || exists(tu_join_static(keep, "promote-0.gguf")),
                  "the mix is kept where the error says");
        cr_assert_eq(tu_count_files(tmp), 0);
        free(out);
        free(err);
    }
    free(src);
    free(tmp);
    free(keep);
    free(node);
    free(p_bin);
}
