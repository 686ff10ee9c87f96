/* The promotion measurement by KL (compare/kl_measure.h, pn-quantize
 * --measure kl).
 *
 * kl_file: the file written and read back, damaged files refused naming the
 * file and line, parts joined (and refused when one is missing, unfinished
 * or of another run), the form promotion takes. No llama.cpp.
 * kl_cli: what pn-quantize refuses before it judges anything (options, a
 * hostile calibration text), nothing written. No llama.cpp.
 * kl_llama: measurements of a tiny model judged by stock llama.cpp
 * (node-llama-cpp; skipped with the reason where it is missing, except in
 * CI, PN_REQUIRE_LLAMA=1): the same file at any thread count, from parts,
 * and after an interruption; the promotions are the largest gains. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compare/kl_measure.h"
#include "pipeline/quantize.h"
#include "quant/types.h"
#include "fixtures/scratch.h"
#include "test_util.h"

#define SCRIPT PN_SOURCE_DIR "/tools/llama/pn-llama-logits.mjs"
#define FALLBACK_RECIPE PN_SOURCE_DIR "/recipes/test-fallback.mix"
#define LIBLLAMA                                                                                   \
    PN_SOURCE_DIR "/tools/llama/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/"            \
                  "libllama.v0.5.0.so"
#define REQUIRE_LLAMA() TU_REQUIRE_LLAMA(SCRIPT, LIBLLAMA)
#define TEXT "/usr/share/common-licenses/GPL-3"

/* ---- the file ---- */

static pn_kl_measurement *made(int part, int n_parts, size_t first, size_t count, size_t total)
{
    pn_kl_measurement *m = calloc(1, sizeof *m);
    cr_assert(m);
    pn_kl_params *p = &m->params;
    p->source_header_hash = 0x0123456789abcdefull;
    snprintf(p->quantizer, sizeof p->quantizer, "pn-quantize test");
    snprintf(p->base_label, sizeof p->base_label, "P0k+0");
    p->base_hash = 0xfedcba9876543210ull;
    p->text_hash = 0x1111222233334444ull;
    p->text_bytes = 35149;
    p->seq_len = 64;
    p->max_seqs = 4;
    snprintf(p->llama_cpp, sizeof p->llama_cpp, "v0.5.0");
    snprintf(p->node_llama_cpp, sizeof p->node_llama_cpp, "3.22.1");
    p->decode_type = PN_TYPE_BF16;
    m->n_positions = 256;
    m->kl_base = 0.1 + 1e-17;
    m->kl_base_se = 0.01;
    m->part = part;
    m->n_parts = n_parts;
    m->first = first;
    m->count = count;
    m->total = total;
    m->entries = calloc(count ? count : 1, sizeof *m->entries);
    cr_assert(m->entries);
    for (size_t i = 0; i < count; i++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%zu.ffn_up.weight", first + i);
        m->entries[i].name = strdup(name);
        m->entries[i].kl = 0.1 - 0.001 * (double)(first + i) / 3.0;
        m->entries[i].gain = m->kl_base - m->entries[i].kl;
        m->entries[i].se = 1.0 / 7.0;
        m->entries[i].extra_bytes = 1000 * (first + i + 1);
        m->entries[i].sample_crc = 0xabc00000u + (uint32_t)(first + i);
    }
    m->n = count;
    return m;
}

Test(kl_file, a_saved_measurement_reads_back_figure_for_figure, .init = setup, .fini = teardown)
{
    pn_kl_measurement *m = made(1, 1, 0, 5, 5);
    char *path = path_in("m.kl");
    pn_error err;
    cr_assert_eq(pn_kl_save(m, path, &err), PN_OK, "%s", err.msg);
    pn_kl_measurement *r = NULL;
    cr_assert_eq(pn_kl_load(path, &r, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(pn_kl_params_check(&r->params, &m->params, path, &err), PN_OK, "%s", err.msg);
    cr_assert(r->kl_base == m->kl_base && r->kl_base_se == m->kl_base_se);
    cr_assert_eq(r->n, 5);
    for (size_t i = 0; i < 5; i++) {
        cr_assert_str_eq(r->entries[i].name, m->entries[i].name);
        cr_assert(r->entries[i].kl == m->entries[i].kl &&
                  r->entries[i].gain == m->entries[i].gain && r->entries[i].se == m->entries[i].se);
        cr_assert_eq(r->entries[i].extra_bytes, m->entries[i].extra_bytes);
        cr_assert_eq(r->entries[i].sample_crc, m->entries[i].sample_crc);
    }
    pn_kl_measurement_free(r);
    pn_kl_measurement_free(m);
    free(path);
}

Test(kl_file, a_measurement_that_cannot_be_saved_says_so_and_leaves_no_file, .init = setup,
     .fini = teardown)
{
    pn_kl_measurement *m = made(1, 1, 0, 3, 3);
    char *path = path_in("none/m.kl");
    pn_error err;
    cr_assert_eq(pn_kl_save(m, path, &err), PN_ERR_IO);
    cr_assert_eq(strncmp(err.msg, "saving the KL measurement: ", 27), 0, "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, path), "%s", err.msg);
    char *ok = path_in("m.kl");
    cr_assert_eq(pn_kl_save(m, ok, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(pn_kl_save(m, ok, &err), PN_OK, "saving again replaces: %s", err.msg);
    cr_assert_eq(tu_count_files(g_dir), 1, "the file and nothing else");
    pn_kl_measurement_free(m);
    free(path);
    free(ok);
}

Test(kl_file, a_damaged_file_is_refused_naming_the_file_and_line, .init = setup, .fini = teardown)
{
    pn_kl_measurement *m = made(1, 1, 0, 3, 3);
    char *path = path_in("m.kl");
    pn_error err;
    cr_assert_eq(pn_kl_save(m, path, &err), PN_OK);
    size_t n = 0;
    char *text = tu_read_file(path, &n);
    struct {
        const char *from, *to;
        const char *says;
    } cases[] = {
        { "pn-measure-kl\t1", "pn-measure-kl\t9", "format 1" },
        { "positions\t64\t4\t256", "positions\t64\t4\t257", ":7:" },
        { "judge\tv0.5.0\t3.22.1\tbf16", "judge\tv0.5.0\t3.22.1\tq8", ":8:" },
        { "\tabc00001\n", "\tabc0000g\n", ":12:" },
        { "\nend\n", "\n", "expected 'end'" },
        { "blk.2.ffn_up.weight", "blk.1.ffn_up.weight", "listed twice" },
        { "end\n", "end\nmore\n", "nothing after 'end'" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char *bad = malloc(n + 64);
        const char *at = strstr(text, cases[c].from);
        cr_assert(at, "case %zu: '%s' not in the file", c, cases[c].from);
        size_t k = (size_t)(at - text);
        memcpy(bad, text, k);
        strcpy(bad + k, cases[c].to);
        strcat(bad, at + strlen(cases[c].from));
        char *bp = path_in("bad.kl");
        cr_assert_eq(tu_write_file(bp, bad, strlen(bad)), 0);
        pn_kl_measurement *r = NULL;
        cr_assert_neq(pn_kl_load(bp, &r, &err), PN_OK, "case %zu was read", c);
        cr_assert_null(r);
        cr_assert(strstr(err.msg, bp) && strstr(err.msg, cases[c].says), "case %zu: %s", c,
                  err.msg);
        free(bp);
        free(bad);
    }
    free(text);
    pn_kl_measurement_free(m);
    free(path);
}

/* Saves part I of N of a measurement of 7 candidates beside path. */
static void save_part(const char *path, int part, int n_parts,
                      pn_kl_measurement *(*edit)(pn_kl_measurement *))
{
    size_t first = 7 * (size_t)(part - 1) / (size_t)n_parts;
    size_t count = 7 * (size_t)part / (size_t)n_parts - first;
    pn_kl_measurement *m = made(part, n_parts, first, count, 7);
    if (edit)
        m = edit(m);
    char *pp = pn_kl_part_path(path, part, n_parts);
    pn_error err;
    cr_assert_eq(pn_kl_save(m, pp, &err), PN_OK, "%s", err.msg);
    free(pp);
    pn_kl_measurement_free(m);
}

Test(kl_file, three_parts_join_into_the_whole_measurement, .init = setup, .fini = teardown)
{
    char *path = path_in("m.kl");
    for (int i = 1; i <= 3; i++)
        save_part(path, i, 3, NULL);
    pn_kl_measurement *all = NULL, *whole = made(1, 1, 0, 7, 7);
    pn_error err;
    cr_assert_eq(pn_kl_assemble(path, 3, &all, &err), PN_OK, "%s", err.msg);
    char *a = path_in("joined.kl"), *b = path_in("whole.kl");
    cr_assert_eq(pn_kl_save(all, a, &err), PN_OK);
    cr_assert_eq(pn_kl_save(whole, b, &err), PN_OK);
    size_t na, nb;
    char *ta = tu_read_file(a, &na), *tb = tu_read_file(b, &nb);
    cr_assert(na == nb && memcmp(ta, tb, na) == 0, "joined:\n%s\nwhole:\n%s", ta, tb);
    free(ta);
    free(tb);
    free(a);
    free(b);
    pn_kl_measurement_free(all);
    pn_kl_measurement_free(whole);
    free(path);
}

static pn_kl_measurement *other_text(pn_kl_measurement *m)
{
    m->params.text_hash ^= 1;
    return m;
}

static pn_kl_measurement *unfinished(pn_kl_measurement *m)
{
    m->n--;
    free(m->entries[m->n].name);
    return m;
}

Test(kl_file, a_missing_unfinished_or_foreign_part_is_named, .init = setup, .fini = teardown)
{
    char *path = path_in("m.kl");
    pn_error err;
    pn_kl_measurement *all = NULL;
    save_part(path, 1, 3, NULL);
    save_part(path, 3, 3, NULL);
    cr_assert_neq(pn_kl_assemble(path, 3, &all, &err), PN_OK);
    cr_assert(strstr(err.msg, "m.kl.part-00002-of-00003"), "%s", err.msg);
    save_part(path, 2, 3, unfinished);
    cr_assert_eq(pn_kl_assemble(path, 3, &all, &err), PN_ERR_MISMATCH);
    cr_assert(strstr(err.msg, "part-00002-of-00003") && strstr(err.msg, "not finished"), "%s",
              err.msg);
    save_part(path, 2, 3, other_text);
    cr_assert_eq(pn_kl_assemble(path, 3, &all, &err), PN_ERR_MISMATCH);
    cr_assert(strstr(err.msg, "part 2 differs") && strstr(err.msg, "calibration text"), "%s",
              err.msg);
    cr_assert_null(all);
    free(path);
}

Test(kl_file, promotion_takes_the_gain_or_the_gain_per_byte)
{
    pn_kl_measurement *k = made(1, 1, 0, 3, 3);
    pn_measurement *m = NULL;
    pn_error err;
    cr_assert_eq(pn_kl_as_measurement(k, false, &m, &err), PN_OK);
    cr_assert(m->by_gain && m->n == 3);
    cr_assert(m->entries[1].gain == k->entries[1].gain);
    pn_measurement_free(m);
    cr_assert_eq(pn_kl_as_measurement(k, true, &m, &err), PN_OK);
    cr_assert(m->entries[2].gain == k->entries[2].gain / 3000.0);
    pn_measurement_free(m);
    pn_kl_measurement_free(k);
}

/* ---- the command line, before anything is judged ---- */

static void synth(const char *path)
{
    char *out, *err;
    int rc = tu_run_program(&out, &err, "pn-synth",
                            "--quiet --layers 2 --width-scale 16 --vocab 64 '%s'", path);
    cr_assert_eq(rc, 0, "pn-synth: %s", err);
    free(out);
    free(err);
}

static int quantize(char **out, char **err, const char *args)
{
    return tu_run_program(out, err, "pn-quantize", "--quiet --recipe '%s' --threads 1 %s",
                          FALLBACK_RECIPE, args);
}

Test(kl_cli, options_that_need_each_other_are_usage_errors, .init = setup, .fini = teardown)
{
    char *src = path_in("src.gguf");
    synth(src);
    struct {
        const char *args;
        const char *says;
    } cases[] = {
        { "--calibration " TEXT " '%s' out.gguf", "give --measure kl" },
        { "--measure kl '%s' out.gguf", "needs --calibration" },
        { "--measure fast '%s' out.gguf", "expected error, forward or kl" },
        { "--measure kl --calibration " TEXT " --measure-part 2/1 --measurement m.kl '%s'",
          "expected I/N" },
        { "--measure kl --calibration " TEXT " --measure-part 1/2 '%s'", "needs --measurement" },
        { "--measure kl --calibration " TEXT " --measure-part 1/2 --measurement m.kl '%s' o.gguf",
          "writes no model" },
        { "--measure kl --calibration " TEXT " --promote-list x.txt '%s' out.gguf",
          "--promote-list" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char args[4096], *out, *err;
        snprintf(args, sizeof args, cases[c].args, src);
        int rc = quantize(&out, &err, args);
        cr_assert_eq(rc, 2, "case %zu: exit %d: %s", c, rc, err);
        cr_assert(strstr(err, cases[c].says), "case %zu: %s", c, err);
        cr_assert_str_eq(out, "");
        free(out);
        free(err);
    }
    cr_assert_not(exists("out.gguf") || exists("m.kl"));
    free(src);
}

Test(kl_cli, a_hostile_calibration_text_is_refused_naming_it_and_nothing_is_written, .init = setup,
     .fini = teardown)
{
    char *src = path_in("src.gguf"), *dst = path_in("out.gguf"), *meas = path_in("m.kl");
    synth(src);
    char *empty = path_in("empty.txt"), *latin = path_in("latin1.txt"), *fifo = path_in("fifo"),
         *big = path_in("big.txt"), *none = path_in("none.txt");
    cr_assert_eq(tu_write_file(empty, "", 0), 0);
    cr_assert_eq(tu_write_file(latin, "caf\xe9 cr\xe8me\n", 11), 0);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    FILE *f = fopen(big, "w");
    cr_assert(f);
    cr_assert_eq(ftruncate(fileno(f), (off_t)65 << 20), 0);
    fclose(f);
    struct {
        const char *path, *says;
    } cases[] = {
        { empty, "empty" },        { latin, "not UTF-8 (byte offset 3)" },
        { fifo, "not a regular" }, { big, "" },
        { none, "No such file" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char args[8192], *out, *err;
        snprintf(args, sizeof args, "--measure kl --calibration '%s' --measurement '%s' '%s' '%s'",
                 cases[c].path, meas, src, dst);
        int rc = quantize(&out, &err, args);
        cr_assert_eq(rc, 1, "case %zu: exit %d: %s", c, rc, err);
        cr_assert(strstr(err, cases[c].path) && strstr(err, cases[c].says), "case %zu: %s", c, err);
        cr_assert_not(tu_exists(dst) || tu_exists(meas), "case %zu wrote a file", c);
        free(out);
        free(err);
    }
    free(src);
    free(dst);
    free(meas);
    free(empty);
    free(latin);
    free(fifo);
    free(big);
    free(none);
}

/* ---- with stock llama.cpp ---- */

#define KL_ARGS "--measure kl --calibration " TEXT " --seq-len 8 --max-seqs 2"

/* pn-quantize --measure kl into file; the text of `read` (NULL: file). */
static char *measure_into(const char *src, const char *file, const char *more, const char *read)
{
    char args[8192], *out, *err;
    snprintf(args, sizeof args, KL_ARGS " --measurement '%s' %s '%s'", file, more, src);
    int rc = quantize(&out, &err, args);
    cr_assert_eq(rc, 0, "%s: exit %d: %s", args, rc, err);
    free(out);
    free(err);
    size_t n;
    return tu_read_file(read ? read : file, &n);
}

static char *measure(const char *src, const char *file, const char *more)
{
    return measure_into(src, file, more, NULL);
}

Test(kl_llama, the_file_is_the_same_at_any_thread_count_from_parts_and_after_an_interruption,
     .init = setup, .fini = teardown, .timeout = 900)
{
    REQUIRE_LLAMA();
    char *src = path_in("src.gguf");
    synth(src);
    char *a = path_in("a.kl"), *b = path_in("b.kl"), *parts = path_in("p.kl"),
         *resumed = path_in("r.kl");
    /* the whole, with the measurement's only output: the file (--dry-run) */
    char *whole = measure(src, a, "--threads 2 --dry-run");
    cr_assert(strstr(whole, "part\t1\t1\t0\t7\t7\n"), "%s", whole);
    char *one = measure(src, b, "--threads 1 --dry-run");
    cr_assert_str_eq(one, whole, "1 thread:\n%s\n2 threads:\n%s", one, whole);
    /* two parts, then a run that joins them */
    char *p1path = path_in("p.kl.part-00001-of-00002"),
         *p2path = path_in("p.kl.part-00002-of-00002");
    free(measure_into(src, parts, "--measure-part 1/2", p1path));
    char *p2 = measure_into(src, parts, "--measure-part 2/2", p2path);
    cr_assert(strstr(p2, "part\t2\t2\t3\t4\t7\n"), "%s", p2);
    cr_assert_not(tu_exists(parts), "a part run wrote the whole file");
    char *joined = measure(src, parts, "--dry-run");
    cr_assert_str_eq(joined, whole);
    /* an interrupted measurement: the file as it is after its second candidate */
    char *cut = strdup(whole);
    char *third = strstr(cut, "blk.0.ffn_up.weight\t");
    cr_assert(third && strstr(third, "blk.1."), "%s", cut);
    strcpy(third, "end\n");
    cr_assert_eq(tu_write_file(resumed, cut, strlen(cut)), 0);
    char *again = measure(src, resumed, "--dry-run");
    cr_assert_str_eq(again, whole);
    free(again);
    free(cut);
    free(joined);
    free(p2);
    free(p1path);
    free(p2path);
    free(one);
    free(whole);
    free(a);
    free(b);
    free(parts);
    free(resumed);
    free(src);
}

/* The gains of a file, in its order. */
static size_t gains(const char *text, char names[][64], double *g, size_t max)
{
    size_t n = 0;
    const char *p = strstr(text, "\npart\t");
    p = p ? strchr(p + 1, '\n') : NULL;
    while (p && n < max && strncmp(p + 1, "end", 3) != 0) {
        double kl;
        cr_assert_eq(sscanf(p + 1, "%63[^\t]\t%lf\t%lf", names[n], &kl, &g[n]), 3);
        n++;
        p = strchr(p + 1, '\n');
    }
    return n;
}

Test(kl_llama, promote_n_takes_the_n_largest_gains_and_the_plan_shows_them, .init = setup,
     .fini = teardown, .timeout = 600)
{
    REQUIRE_LLAMA();
    char *src = path_in("src.gguf"), *file = path_in("m.kl");
    synth(src);
    char *text = measure(src, file, "--dry-run");
    char names[16][64];
    double g[16];
    size_t n = gains(text, names, g, 16);
    cr_assert_eq(n, 7);
    /* the two largest, found here by a plain scan */
    size_t best = 0, second = n;
    for (size_t i = 1; i < n; i++)
        if (g[i] > g[best])
            best = i;
    for (size_t i = 0; i < n; i++)
        if (i != best && (second == n || g[i] > g[second]))
            second = i;
    char args[8192], *out, *err;
    snprintf(args, sizeof args, KL_ARGS " --measurement '%s' --promote 2 --dry-run '%s'", file,
             src);
    int rc = tu_run_program(&out, &err, "pn-quantize", "--recipe '%s' --threads 1 %s",
                            FALLBACK_RECIPE, args);
    cr_assert_eq(rc, 0, "%s", err);
    char l1[256], l2[256];
    snprintf(l1, sizeof l1, "%s", names[best]);
    snprintf(l2, sizeof l2, "%s", names[second]);
    const char *at1 = strstr(out, l1), *at2 = strstr(out, l2);
    cr_assert(at1 && at2, "%s", out);
    cr_assert(strstr(at1, "promoted #1") && strstr(at2, "promoted #2"), "%s", out);
    cr_assert(strstr(out, "KL gain"), "%s", out);
    free(out);
    free(err);
    /* a file of another calibration text is not replaced without --force */
    snprintf(args, sizeof args,
             "--measure kl --calibration " PN_SOURCE_DIR "/README.md --seq-len 8 --max-seqs 2 "
             "--measurement '%s' --dry-run '%s'",
             file, src);
    rc = quantize(&out, &err, args);
    cr_assert_eq(rc, 1, "%s", err);
    cr_assert(strstr(err, file) && strstr(err, "calibration text") && strstr(err, "--force"), "%s",
              err);
    size_t len;
    char *still = tu_read_file(file, &len);
    cr_assert_str_eq(still, text);
    free(still);
    free(out);
    free(err);
    free(text);
    free(file);
    free(src);
}

/* ---- the sweep ---- */

static int sweep(char **out, char **err, const char *args)
{
    return tu_run_program(out, err, "pn-compare",
                          "--sweep --quiet --threads 1 --recipe '%s' --seq-len 8 --max-seqs 2 %s",
                          FALLBACK_RECIPE, args);
}

Test(kl_cli, the_sweep_refuses_its_judging_text_as_calibration_by_any_name, .init = setup,
     .fini = teardown)
{
    char *src = path_in("src.gguf"), *keep = path_in("kept"), *alias = path_in("alias.txt");
    synth(src);
    cr_assert_eq(symlink(TEXT, alias), 0);
    const char *cal[] = { TEXT, alias };
    for (size_t c = 0; c < 2; c++) {
        char args[8192], *out, *err;
        snprintf(args, sizeof args,
                 "--promote 1 --measure kl --calibration '%s' --text " TEXT " --keep '%s' '%s'",
                 cal[c], keep, src);
        int rc = sweep(&out, &err, args);
        cr_assert_eq(rc, 2, "case %zu: exit %d: %s", c, rc, err);
        cr_assert(strstr(err, "the calibration text is the judging text"), "case %zu: %s", c, err);
        cr_assert_not(tu_exists(keep), "case %zu: the keep folder was made", c);
        free(out);
        free(err);
    }
    char *out, *err;
    char args[8192];
    snprintf(args, sizeof args, "--promote 1 --calibration " TEXT " '%s'", src);
    cr_assert_eq(sweep(&out, &err, args), 2);
    cr_assert(strstr(err, "--calibration goes with --measure kl"), "%s", err);
    free(out);
    free(err);
    free(src);
    free(keep);
    free(alias);
}

Test(kl_llama, the_sweep_makes_its_mixes_from_one_kl_measurement, .init = setup, .fini = teardown,
     .timeout = 900)
{
    REQUIRE_LLAMA();
    char *src = path_in("src.gguf"), *keep = path_in("kept"), *one = path_in("one.gguf");
    synth(src);
    char args[8192], *out, *err;
    snprintf(args, sizeof args,
             "--promote 2 --measure kl --calibration " TEXT
             " --text /usr/share/common-licenses/Apache-2.0 --keep '%s' '%s'",
             keep, src);
    int rc = sweep(&out, &err, args);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    cr_assert(strstr(out, "+2 by KL"), "%s", out);
    char *meas = tu_join(keep, "measurement.kl"), *mix = tu_join(keep, "promote-2-kl.gguf");
    cr_assert(tu_exists(meas) && tu_exists(mix), "%s", out);
    free(out);
    free(err);
    /* pn-quantize with that measurement makes the same mix, byte for byte */
    snprintf(args, sizeof args, KL_ARGS " --measurement '%s' --promote 2 '%s' '%s'", meas, src,
             one);
    rc = quantize(&out, &err, args);
    cr_assert_eq(rc, 0, "%s", err);
    size_t na, nb;
    char *a = tu_read_file(one, &na), *b = tu_read_file(mix, &nb);
    cr_assert(na == nb && memcmp(a, b, na) == 0, "the sweep's mix differs from pn-quantize's");
    free(a);
    free(b);
    free(out);
    free(err);
    free(meas);
    free(mix);
    free(src);
    free(keep);
    free(one);
}

/* ---- --measure forward ---- */

Test(measure_forward, the_earliest_tensors_in_the_forward_pass_are_promoted_first, .init = setup,
     .fini = teardown)
{
    char *src = path_in("src.gguf");
    synth(src);
    char args[4096], *out, *err;
    snprintf(args, sizeof args, "--measure forward --promote 3 --dry-run '%s'", src);
    int rc = tu_run_program(&out, &err, "pn-quantize", "--recipe '%s' --threads 1 %s",
                            FALLBACK_RECIPE, args);
    cr_assert_eq(rc, 0, "%s", err);
    /* block 0: the fused QKV, then the gate of the attention's output, then the FFN's gate */
    const char *want[] = { "blk.0.attn_qkv.weight", "blk.0.attn_gate.weight",
                           "blk.0.ffn_gate.weight" };
    for (int i = 0; i < 3; i++) {
        const char *line = strstr(out, want[i]);
        char rank[32];
        snprintf(rank, sizeof rank, "promoted #%d", i + 1);
        cr_assert(line, "%s is not in the plan:\n%s", want[i], out);
        const char *eol = strchr(line, '\n');
        cr_assert(eol && memmem(line, (size_t)(eol - line), rank, strlen(rank)),
                  "%s is not %s:\n%s", want[i], rank, out);
    }
    cr_assert(strstr(out, "(3 promoted of"), "%s", out);
    free(out);
    free(err);
    free(src);
}

Test(kl_cli, a_measurement_path_that_is_the_source_or_the_output_is_refused_and_nothing_written,
     .init = setup, .fini = teardown)
{
    char *src = path_in("src.gguf"), *dst = path_in("out.gguf");
    synth(src);
    size_t n0;
    char *before = tu_read_file(src, &n0);
    const char *meas[] = { dst, src };
    const char *says[] = { "that is the output (DST)", "that is the source" };
    for (size_t c = 0; c < 2; c++) {
        char args[8192], *out, *err;
        snprintf(args, sizeof args,
                 "--measure kl --calibration " TEXT " --measurement '%s' '%s' '%s'", meas[c], src,
                 dst);
        int rc = quantize(&out, &err, args);
        cr_assert_eq(rc, 2, "case %zu: exit %d: %s", c, rc, err);
        cr_assert(strstr(err, says[c]), "case %zu: %s", c, err);
        cr_assert_not(tu_exists(dst), "case %zu: something was written at DST", c);
        free(out);
        free(err);
    }
    size_t n1;
    char *after = tu_read_file(src, &n1);
    cr_assert(n0 == n1 && memcmp(before, after, n0) == 0, "the source was written");
    free(before);
    free(after);
    free(src);
    free(dst);
}

/* ---- --target-size by KL gains: nothing measured to buy nothing ---- */

typedef struct plan_seen {
    size_t n_candidates, n_promoted;
    char names[64][96]; /* the candidates, in tensor order */
    bool promoted[64];
} plan_seen;

static pn_status see_plan(const pn_quantize_result *r, void *user, pn_error *err)
{
    (void)err;
    plan_seen *s = user;
    s->n_candidates = s->n_promoted = 0;
    for (size_t i = 0; i < r->plan->n_tensors && s->n_candidates < 64; i++) {
        const pn_plan_tensor *t = &r->plan->tensors[i];
        if (!t->candidate)
            continue;
        snprintf(s->names[s->n_candidates], sizeof s->names[0], "%s", t->name);
        s->promoted[s->n_candidates] = t->promote_rank >= 0;
        s->n_promoted += t->promote_rank >= 0;
        s->n_candidates++;
    }
    return PN_OK;
}

static void plan_with(const char *src, const pn_measurement *m, uint64_t target, plan_seen *s)
{
    pn_quantize_opts o;
    pn_quantize_opts_init(&o);
    o.src_path = src;
    o.recipe_path = FALLBACK_RECIPE;
    o.threads = 1;
    o.backend = PN_BACKEND_CPU;
    o.dry_run = true;
    o.measurement = m;
    o.target_size = target;
    o.result = see_plan;
    o.user = s;
    pn_error err;
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_OK, "%s", err.msg);
}

Test(kl_cli, a_size_target_never_promotes_a_candidate_whose_kl_gain_is_zero_or_below, .init = setup,
     .fini = teardown)
{
    char *src = path_in("src.gguf");
    synth(src);
    plan_seen seen;
    plan_with(src, NULL, 0, &seen); /* the candidates, from the error measurement's plan */
    const size_t n = seen.n_candidates;
    cr_assert_geq(n, 4, "too few candidates to tell");
    /* gains per byte as pn_kl_as_measurement gives them: two above zero
     * (the second candidate the larger), one exactly zero, the rest below */
    pn_measurement m = { .n = n, .by_gain = true, .positive_only = true };
    m.entries = calloc(n, sizeof *m.entries);
    char names[64][96];
    memcpy(names, seen.names, sizeof names);
    for (size_t i = 0; i < n; i++) {
        m.entries[i].name = names[i];
        m.entries[i].gain = i == 0 ? 1e-9 : i == 1 ? 2e-9 : i == 2 ? 0.0 : -1e-10;
    }
    plan_with(src, &m, 1ull << 40, &seen); /* a budget every candidate fits */
    cr_assert_eq(seen.n_promoted, 2, "promoted %zu of %zu", seen.n_promoted, n);
    cr_assert(seen.promoted[0] && seen.promoted[1] && !seen.promoted[2]);
    /* the same gains as another order's scores: every candidate fits */
    m.positive_only = false;
    plan_with(src, &m, 1ull << 40, &seen);
    cr_assert_eq(seen.n_promoted, n);
    free(m.entries);
    free(src);
}
