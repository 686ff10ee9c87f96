/* Stock llama.cpp (node-llama-cpp's prebuilt CPU build, tools/llama/) loads
 * and runs what we write, and pn-compare measures mixes with it.
 *
 * The llama_* suites need node and node-llama-cpp (scripts/install-deps
 * installs it): where they are missing a test is skipped with the reason,
 * except in CI (PN_REQUIRE_LLAMA=1, exported by .ci/run), where it fails.
 * compare_cli tests that need no llama.cpp use a fake "node" (a shell
 * script), and compare_math checks the arithmetic against direct formulas.
 *
 * Here the tests that run the built programs; those that call the library
 * are in tests/compare/test_compare_math.c. */
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

#include "compare/compare.h"
#include "fixtures/scratch.h"
#include "test_util.h"

#define SCRIPT PN_SOURCE_DIR "/tools/llama/pn-llama-logits.mjs"
#define FALLBACK_RECIPE PN_SOURCE_DIR "/recipes/test-fallback.mix"

/* ---- is llama.cpp here? ---- */

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

/* One thread: these models are small, and the sanitizer build's pn-quantize
 * at K = 1280 with 2 threads once tripped a misaligned store in the
 * measurement's scratch, which is not what these tests are about. */
static void quantize(const char *src, const char *dst, const char *args)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s/pn-quantize --quiet --backend cpu --threads 1 %s '%s' '%s'",
             PN_BIN_DIR, args, src, dst);
    run_ok(cmd);
}

static int count_entries(const char *dir)
{
    char cmd[4096], *out;
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    tu_run(cmd, &out, NULL);
    int n = atoi(out);
    free(out);
    return n;
}

/* ---- the harness directly: logits for token ids ---- */

typedef struct logits {
    uint32_t n_vocab, n_seq, total;
    uint32_t lens[16];
    float *rows; /* total x n_vocab */
} logits;

static uint32_t rd32(const uint8_t *p)
{
    return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Runs the harness on model over the sequences (ids[s][0..len-1]). */
static logits eval_model(const char *model, uint32_t n_seq, uint32_t len, const uint32_t *ids)
{
    char *tok = path_in("tokens.bin"), *out = path_in("logits.bin");
    FILE *f = fopen(tok, "wb");
    fwrite(&n_seq, 4, 1, f);
    for (uint32_t s = 0; s < n_seq; s++) {
        fwrite(&len, 4, 1, f);
        fwrite(ids + s * len, 4, len, f);
    }
    fclose(f);
    char cmd[8192], *o, *e;
    snprintf(cmd, sizeof cmd, "node '" SCRIPT "' '%s' --threads 1 < '%s' 3> '%s'", model, tok, out);
    int rc = tu_run(cmd, &o, &e);
    cr_assert_eq(rc, 0, "llama.cpp on %s: exit %d: %s", model, rc, e);
    free(o);
    free(e);
    size_t n;
    uint8_t *d = tu_read_file(out, &n);
    logits L = { 0 };
    cr_assert_geq(n, 16);
    cr_assert_eq(memcmp(d, "PNLOGIT1", 8), 0);
    L.n_vocab = rd32(d + 8);
    L.n_seq = rd32(d + 12);
    cr_assert_eq(L.n_seq, n_seq);
    size_t off = 16;
    for (uint32_t s = 0; s < n_seq; s++) {
        L.lens[s] = rd32(d + off);
        cr_assert_eq(L.lens[s], len);
        for (uint32_t i = 0; i < len; i++)
            cr_assert_eq(rd32(d + off + 4 + 4 * i), ids[s * len + i], "the ids evaluated");
        off += 4 + 4 * len;
        L.total += len;
    }
    cr_assert_eq(n, off + (size_t)L.total * L.n_vocab * 4, "%s: %zu bytes of logits", model, n);
    L.rows = malloc((size_t)L.total * L.n_vocab * 4);
    memcpy(L.rows, d + off, (size_t)L.total * L.n_vocab * 4);
    for (size_t i = 0; i < (size_t)L.total * L.n_vocab; i++)
        cr_assert(isfinite(L.rows[i]), "%s: logit %zu is not finite", model, i);
    free(d);
    free(tok);
    free(out);
    return L;
}

static double mean_kl(const logits *a, const logits *b)
{
    cr_assert_eq(a->n_vocab, b->n_vocab);
    cr_assert_eq(a->total, b->total);
    double s = 0;
    for (uint32_t p = 0; p < a->total; p++) {
        double kl;
        cr_assert_eq(pn_compare_kl(a->rows + (size_t)p * a->n_vocab,
                                   b->rows + (size_t)p * b->n_vocab, a->n_vocab, &kl, NULL, NULL,
                                   NULL),
                     PN_OK);
        s += kl;
    }
    return s / a->total;
}

static void seq_ids(uint32_t *ids, uint32_t n_seq, uint32_t len, uint32_t vocab)
{
    for (uint32_t s = 0; s < n_seq; s++)
        for (uint32_t i = 0; i < len; i++)
            ids[s * len + i] = (7 * i + 3 + 11 * s * (i + 1)) % vocab;
}

/* The distributions depend on the tokens before: two sequences that share
 * their second token but not their first differ there. */
static void assert_context_matters(const logits *L, uint32_t len)
{
    double d = 0;
    for (uint32_t v = 0; v < L->n_vocab; v++)
        d += fabs((double)L->rows[(size_t)1 * L->n_vocab + v] -
                  (double)L->rows[(size_t)(len + 1) * L->n_vocab + v]);
    cr_assert_gt(d, 1e-3, "position 1 ignores position 0");
}

Test(llama_synth, every_dtype_of_a_width_16_model_loads_and_gives_the_same_distributions,
     .init = setup, .fini = teardown)
{
    REQUIRE_LLAMA();
    const char *dt[] = { "f32", "f16", "bf16" };
    logits L[4];
    uint32_t ids[2 * 16];
    seq_ids(ids, 2, 16, 300);
    ids[16 + 1] = ids[1];
    for (int k = 0; k < 4; k++) {
        char args[256], name[64];
        snprintf(name, sizeof name, "m%d.gguf", k);
        char *p = path_in(name);
        snprintf(args, sizeof args, "--layers 2 --width-scale 16 --vocab 300 --dtype %s --seed %d",
                 k < 3 ? dt[k] : "f32", k < 3 ? 1 : 2);
        synth(p, args);
        L[k] = eval_model(p, 2, 16, ids);
        cr_assert_eq(L[k].n_vocab, 300);
        free(p);
    }
    assert_context_matters(&L[0], 16);
    double f16 = mean_kl(&L[0], &L[1]), bf16 = mean_kl(&L[0], &L[2]), other = mean_kl(&L[0], &L[3]);
    cr_log_info("mean KL to the f32 model: f16 %.3g, bf16 %.3g, another seed %.3g", f16, bf16,
                other);
    /* llama.cpp reads each dtype as the same weights, rounded */
    cr_assert_lt(f16, 1e-4, "f16: %g", f16);
    cr_assert_lt(bf16, 1e-2, "bf16: %g", bf16);
    cr_assert_gt(other, 100 * bf16, "another seed %g is not far from bf16 %g", other, bf16);
    for (int k = 0; k < 4; k++)
        free(L[k].rows);
}

Test(llama_synth, a_width_4_model_with_3_layers_loads_and_evaluates, .init = setup,
     .fini = teardown)
{
    REQUIRE_LLAMA();
    char *p = path_in("w4.gguf");
    synth(p, "--layers 3 --width-scale 4 --vocab 512");
    uint32_t ids[2 * 8];
    seq_ids(ids, 2, 8, 512);
    ids[8 + 1] = ids[1];
    logits L = eval_model(p, 2, 8, ids);
    cr_assert_eq(L.n_vocab, 512);
    assert_context_matters(&L, 8);
    free(L.rows);
    free(p);
}

Test(llama_synth, five_layers_and_a_vocabulary_of_64_load_and_evaluate, .init = setup,
     .fini = teardown)
{
    REQUIRE_LLAMA();
    char *p = path_in("v64.gguf");
    synth(p, "--layers 5 --width-scale 16 --vocab 64 --dtype f16");
    uint32_t ids[2 * 8];
    seq_ids(ids, 2, 8, 64);
    ids[8 + 1] = ids[1];
    logits L = eval_model(p, 2, 8, ids);
    cr_assert_eq(L.n_vocab, 64);
    assert_context_matters(&L, 8);
    free(L.rows);
    free(p);
}

/* The 27B's own widths (n_embd 5120, 24 heads, 48 ssm heads), 2 layers and
 * a small vocabulary: about 750 M weights, 1.5 GB in bf16. */
Test(llama_synth, a_width_1_model_loads_and_evaluates, .init = setup, .fini = teardown)
{
    REQUIRE_LLAMA();
    char *p = path_in("w1.gguf");
    synth(p, "--layers 2 --width-scale 1 --vocab 300");
    uint32_t ids[2 * 3];
    seq_ids(ids, 2, 3, 300);
    ids[3 + 1] = ids[1];
    logits L = eval_model(p, 2, 3, ids);
    cr_assert_eq(L.n_vocab, 300);
    assert_context_matters(&L, 3);
    free(L.rows);
    unlink(p);
    free(p);
}

/* ---- mixes, through pn-compare ---- */

/* The numbers after "key": in the JSON text, in order. */
static size_t json_numbers(const char *json, const char *key, double *v, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    size_t n = 0;
    for (const char *p = strstr(json, pat); p && n < cap; p = strstr(p + 1, pat))
        v[n++] = strtod(p + strlen(pat), NULL);
    return n;
}

static char *compare(const char *args, int want_rc)
{
    char cmd[16384], *out, *err;
    char *tmp = path_in("tmp");
    mkdir(tmp, 0700);
    snprintf(cmd, sizeof cmd, "%s/pn-compare --quiet --threads 1 --tmpdir '%s' %s", PN_BIN_DIR, tmp,
             args);
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, want_rc, "%s: exit %d: %s", cmd, rc, err);
    if (want_rc == 0)
        cr_assert_str_empty(err, "%s", err);
    cr_assert_eq(count_entries(tmp), 0, "pn-compare left files in %s", tmp);
    free(tmp);
    if (want_rc != 0) {
        free(out);
        return err;
    }
    free(err);
    return out;
}

/* A width-16 source with 4 layers (15 pn3t candidates) and three mixes of it. */
static void three_mixes(char **src, char **p0, char **p8, char **p15)
{
    *src = path_in("src.gguf");
    *p0 = path_in("p0.gguf");
    *p8 = path_in("p8.gguf");
    *p15 = path_in("p15.gguf");
    synth(*src, "--layers 4 --width-scale 16 --vocab 2048");
    quantize(*src, *p0, "--recipe " FALLBACK_RECIPE " --promote 0");
    quantize(*src, *p8, "--recipe " FALLBACK_RECIPE " --promote 8");
    quantize(*src, *p15, "--recipe " FALLBACK_RECIPE " --promote 15");
}

Test(llama_mix, three_mixes_load_and_kl_falls_as_pn3t_tensors_become_pn4t, .init = setup,
     .fini = teardown)
{
    REQUIRE_LLAMA();
    char *src, *p0, *p8, *p15;
    three_mixes(&src, &p0, &p8, &p15);
    char args[8192];
    snprintf(args, sizeof args, "--json '%s' '%s' '%s' '%s'", src, p0, p8, p15);
    char *out = compare(args, 0);
    double kl[3], p99[3], mx[3], top1[3], bpw[4];
    cr_assert_eq(json_numbers(out, "kl_mean", kl, 3), 3, "%s", out);
    cr_assert_eq(json_numbers(out, "kl_p99", p99, 3), 3);
    cr_assert_eq(json_numbers(out, "kl_max", mx, 3), 3);
    cr_assert_eq(json_numbers(out, "top1", top1, 3), 3);
    cr_assert_eq(json_numbers(out, "bits_per_weight_pn", bpw, 4), 3);
    cr_log_info("mean KL: P0+0 %.4g, +8 %.4g, +15 %.4g", kl[0], kl[1], kl[2]);
    for (int i = 0; i < 3; i++) {
        cr_assert(kl[i] > 0 && kl[i] <= p99[i] + 1e-12 && p99[i] <= mx[i], "file %d", i);
        cr_assert(top1[i] >= 0 && top1[i] <= 1);
    }
    cr_assert_gt(kl[0], kl[1], "8 promotions did not lower the KL: %g -> %g", kl[0], kl[1]);
    cr_assert_gt(kl[1], kl[2], "15 promotions did not lower it further: %g -> %g", kl[1], kl[2]);
    cr_assert_lt(bpw[0], bpw[1]);
    cr_assert_lt(bpw[1], bpw[2]);
    cr_assert_eq(bpw[2], 4.25, "every candidate promoted: all PN tensors pn4t (34 B / 64)");
    free(out);
    free(src);
    free(p0);
    free(p8);
    free(p15);
}

Test(llama_mix, a_keep_rotation_decode_is_far_worse_than_the_normal_decode, .init = setup,
     .fini = teardown)
{
    REQUIRE_LLAMA();
    char *src = path_in("src.gguf"), *p0 = path_in("p0.gguf");
    synth(src, "--layers 4 --width-scale 16 --vocab 2048");
    quantize(src, p0, "--recipe " FALLBACK_RECIPE " --promote 0");
    char args[8192];
    snprintf(args, sizeof args, "--json '%s' '%s'", src, p0);
    char *normal = compare(args, 0);
    snprintf(args, sizeof args, "--json --keep-rotation '%s' '%s'", src, p0);
    char *kept = compare(args, 0);
    double a, b, ta, tb;
    cr_assert_eq(json_numbers(normal, "kl_mean", &a, 1), 1);
    cr_assert_eq(json_numbers(kept, "kl_mean", &b, 1), 1);
    cr_assert_eq(json_numbers(normal, "top1", &ta, 1), 1);
    cr_assert_eq(json_numbers(kept, "top1", &tb, 1), 1);
    cr_assert(strstr(kept, "\"keep_rotation\": true"), "%s", kept);
    cr_log_info("mean KL: rotation undone %.4g, kept %.4g", a, b);
    /* llama.cpp multiplies unrotated activations: the weights must be back
     * in the source's basis */
    cr_assert_gt(b, 2 * a, "keep-rotation %g is not far worse than %g", b, a);
    cr_assert_lt(tb, ta);
    free(normal);
    free(kept);
    free(src);
    free(p0);
}

Test(llama_mix, the_f16_decode_against_the_f32_decode_gives_kl_near_zero, .init = setup,
     .fini = teardown)
{
    REQUIRE_LLAMA();
    char *src = path_in("src.gguf"), *p0 = path_in("p0.gguf"), *f32 = path_in("p0.f32.gguf");
    synth(src, "--layers 4 --width-scale 16 --vocab 2048");
    quantize(src, p0, "--recipe " FALLBACK_RECIPE " --promote 0");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s/pn-dequant --quiet '%s' '%s'", PN_BIN_DIR, p0, f32);
    run_ok(cmd);
    /* on tokens of a text, cut by the source's tokenizer (its byte-level
     * BPE): 2 sequences of 32 tokens */
    char *text = path_in("text.txt");
    const char *words = "the quick brown fox jumps over the lazy dog while the models are "
                        "compared token by token, position by position, and the numbers say "
                        "how far each mix is from its source; nothing is sampled at all.\n";
    tu_write_file(text, words, strlen(words));
    char args[8192];
    snprintf(args, sizeof args,
             "--json --decode-type f16 --text '%s' --seq-len 32 --max-seqs 2 "
             "'%s' '%s'",
             text, f32, p0);
    char *out = compare(args, 0);
    cr_assert(strstr(out, "\"set\": \"text\", \"sequences\": 2, \"positions\": 64"), "%s", out);
    cr_assert(strstr(out, "\"decode_type\": \"f16\""), "%s", out);
    free(text);
    double kl, mx, top1;
    cr_assert_eq(json_numbers(out, "kl_mean", &kl, 1), 1);
    cr_assert_eq(json_numbers(out, "kl_max", &mx, 1), 1);
    cr_assert_eq(json_numbers(out, "top1", &top1, 1), 1);
    cr_log_info("f16 decode against the f32 decode: mean KL %.3g, max %.3g", kl, mx);
    cr_assert_lt(kl, 1e-4, "%g", kl);
    cr_assert_lt(mx, 1e-3, "%g", mx);
    cr_assert_gt(top1, 0.95);
    free(out);
    free(src);
    free(p0);
    free(f32);
}

/* pn-synth --hf writes the model as a Hugging Face checkpoint;
 * stock llama.cpp loads pn-convert's GGUF of it and computes what it
 * computes from pn-synth's own GGUF of that model (the same tensors, keys
 * that differ only where the loader does not look), with the MTP layer and
 * without. Width scale 8: the V-head reorder is a real permutation. */
Test(llama_synth, pn_convert_of_the_hf_form_gives_the_logits_of_the_gguf_form, .init = setup,
     .fini = teardown)
{
    REQUIRE_LLAMA();
    const char *mtp[] = { "", "--mtp" };
    for (int k = 0; k < 2; k++) {
        char args[256], cmd[8192];
        char *dir = path_in(k ? "hf-mtp" : "hf"), *conv = path_in("conv.gguf"),
             *gg = path_in("synth.gguf");
        snprintf(args, sizeof args, "--layers 4 --width-scale 8 --vocab 300 %s --hf", mtp[k]);
        synth(dir, args);
        snprintf(cmd, sizeof cmd, "%s/pn-convert --quiet --force '%s' '%s'", PN_BIN_DIR, dir, conv);
        run_ok(cmd);
        snprintf(args, sizeof args, "--layers 4 --width-scale 8 --vocab 300 --force %s", mtp[k]);
        synth(gg, args);
        uint32_t ids[2 * 12];
        seq_ids(ids, 2, 12, 300);
        ids[12 + 1] = ids[1];
        logits a = eval_model(gg, 2, 12, ids), b = eval_model(conv, 2, 12, ids);
        assert_context_matters(&b, 12);
        cr_assert_eq(a.n_vocab, 300);
        cr_assert_eq(b.n_vocab, 300);
        cr_assert(memcmp(a.rows, b.rows, (size_t)a.total * a.n_vocab * 4) == 0,
                  "%s: pn-convert's GGUF gives other logits than pn-synth's (mean KL %g)",
                  k ? "--mtp" : "no MTP layer", mean_kl(&a, &b));
        free(a.rows);
        free(b.rows);
        free(dir);
        free(conv);
        free(gg);
    }
}

/* A split pn-dequant output (docs/split.md), as a decoded 27 B model is
 * written for the model hubs: llama.cpp loads the set from its first file,
 * finds the others by name, and computes what the unsplit file gives. */
Test(llama_split, a_split_pn_dequant_output_loads_and_gives_the_logits_of_the_unsplit_one,
     .init = setup, .fini = teardown)
{
    REQUIRE_LLAMA();
    char *src = path_in("src.gguf"), *pn = path_in("pn.gguf"), *plain = path_in("plain.gguf"),
         *set = path_in("set.gguf"), *first = path_in("set-00001-of-00003.gguf");
    synth(src, "--layers 2 --width-scale 16 --vocab 300");
    quantize(src, pn, "--recipe " FALLBACK_RECIPE " --split-max-tensors 10");
    char cmd[8192];
    /* the PN input is itself a split set (pn-00001-of-00003.gguf ...) */
    char *pn1 = path_in("pn-00001-of-00003.gguf");
    snprintf(cmd, sizeof cmd, "%s/pn-dequant --quiet '%s' '%s'", PN_BIN_DIR, pn1, plain);
    run_ok(cmd);
    free(pn1);
    char *pn2 = path_in("pn-00002-of-00003.gguf");
    snprintf(cmd, sizeof cmd, "%s/pn-dequant --quiet --split-max-tensors 10 '%s' '%s'", PN_BIN_DIR,
             pn2, set);
    run_ok(cmd);
    free(pn2);
    for (int s = 2; s <= 3; s++) {
        char name[64];
        snprintf(name, sizeof name, "set-%05d-of-00003.gguf", s);
        char *p = path_in(name);
        struct stat sb;
        cr_assert_eq(stat(p, &sb), 0, "%s", p);
        free(p);
    }
    uint32_t ids[2 * 12];
    seq_ids(ids, 2, 12, 300);
    ids[12 + 1] = ids[1];
    logits a = eval_model(plain, 2, 12, ids), b = eval_model(first, 2, 12, ids);
    assert_context_matters(&b, 12);
    cr_assert_eq(a.n_vocab, 300);
    cr_assert_eq(b.n_vocab, 300);
    /* the same weights, the same arithmetic (one thread): the same floats */
    cr_assert(memcmp(a.rows, b.rows, (size_t)a.total * a.n_vocab * 4) == 0,
              "the split set's logits differ from the unsplit file's (mean KL %g)",
              mean_kl(&a, &b));
    /* with a split missing llama.cpp refuses the set (nothing half-loaded) */
    char *third = path_in("set-00003-of-00003.gguf"), *tok = path_in("tokens.bin");
    cr_assert_eq(unlink(third), 0);
    snprintf(cmd, sizeof cmd, "node '" SCRIPT "' '%s' --threads 1 < '%s' 3> /dev/null", first, tok);
    free(tok);
    char *o, *e;
    int rc = tu_run(cmd, &o, &e);
    cr_assert_neq(rc, 0, "llama.cpp loaded a set without its last split:\n%s", e);
    free(o);
    free(e);
    free(third);
    free(a.rows);
    free(b.rows);
    free(src);
    free(pn);
    free(plain);
    free(set);
    free(first);
}

/* The shipped recipe (q3_K token_embd, q4_K output, q8_0 ssm_alpha/beta,
 * P0k+19's promotion count capped by the candidates) at the default width:
 * every stock type decodes into something llama.cpp runs. */
Test(llama_mix, the_shipped_recipe_at_width_4_decodes_into_a_model_llama_cpp_runs, .init = setup,
     .fini = teardown)
{
    REQUIRE_LLAMA();
    char *src = path_in("src.gguf"), *pn = path_in("pn.gguf");
    synth(src, "--layers 2 --width-scale 4 --vocab 512");
    quantize(src, pn, "--promote 3");
    char args[8192];
    snprintf(args, sizeof args, "'%s' '%s'", src, pn);
    char *out = compare(args, 0);
    cr_assert(strstr(out, "P0k+3"), "%s", out);
    free(out);
    free(src);
    free(pn);
}

/* ---- the command line ---- */

Test(compare_cli, the_table_and_the_json_name_every_file_and_figure, .init = setup,
     .fini = teardown)
{
    REQUIRE_LLAMA();
    char *src = path_in("src.gguf"), *a = path_in("a.gguf"), *b = path_in("b.gguf");
    synth(src, "--layers 2 --width-scale 16 --vocab 300");
    quantize(src, a, "--recipe " FALLBACK_RECIPE " --promote 0");
    quantize(src, b, "--recipe " FALLBACK_RECIPE " --promote 2");
    char args[8192];
    snprintf(args, sizeof args, "'%s' '%s' '%s'", src, a, b);
    char *table = compare(args, 0);
    const char *want[] = {
        "llama.cpp v",    "node-llama-cpp 3.22.1",
        "CPU, 1 thread)", "the fixed token set, 4 sequences, 256 positions, vocabulary 300",
        "bytes",          "bpw",
        "bpw PN",         "KL mean",
        "KL p99",         "KL max",
        "top-1",          "mix",
        "file",           "(source)",
        "P0k-fallback+0", "P0k-fallback+2"
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(table, want[i]), "the table lacks '%s':\n%s", want[i], table);
    /* one line per file, in the order given, the source first */
    const char *ls = strstr(table, "src.gguf\n"), *la = strstr(table, "a.gguf\n"),
               *lb = strstr(table, "b.gguf\n");
    cr_assert(ls && la && lb && ls < la && la < lb, "%s", table);
    snprintf(args, sizeof args, "--json '%s' '%s' '%s'", src, a, b);
    char *json = compare(args, 0);
    const char *keys[] = { "\"source\"",
                           "\"llama_cpp\"",
                           "\"release\"",
                           "\"node_llama_cpp\"",
                           "\"tokens\"",
                           "\"set\": \"fixed\"",
                           "\"sequences\": 4",
                           "\"positions\": 256",
                           "\"vocabulary\": 300",
                           "\"decode_type\": \"f32\"",
                           "\"files\"",
                           "\"mix\": \"P0k-fallback+2\"",
                           "\"bytes\"",
                           "\"bits_per_weight\"",
                           "\"bits_per_weight_pn\"",
                           "\"kl_mean\"",
                           "\"kl_p99\"",
                           "\"kl_max\"",
                           "\"kl_max_at\"",
                           "\"top1\"",
                           "\"seconds\"" };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        cr_assert(strstr(json, keys[i]), "the JSON lacks %s:\n%s", keys[i], json);
    /* and it is JSON: Node's parser reads it */
    char *jp = path_in("out.json");
    tu_write_file(jp, json, strlen(json));
    char cmd[8192], *o, *e;
    snprintf(cmd, sizeof cmd,
             "node -e 'const r = JSON.parse(require(\"fs\").readFileSync(process.argv[1], "
             "\"utf8\")); if (r.files.length !== 2) process.exit(3)' '%s'",
             jp);
    cr_assert_eq(tu_run(cmd, &o, &e), 0, "%s", e);
    /* two runs (the table's, the JSON's) give the same figures */
    double k[2];
    cr_assert_eq(json_numbers(json, "kl_mean", k, 2), 2);
    for (int i = 0; i < 2; i++) {
        char fig[32];
        snprintf(fig, sizeof fig, " %.4g ", k[i]);
        cr_assert(strstr(table, fig), "the table lacks the JSON's KL mean%s:\n%s", fig, table);
    }
    free(o);
    free(e);
    free(jp);
    free(json);
    free(table);
    free(src);
    free(a);
    free(b);
}

Test(compare_cli, usage_errors_exit_2)
{
    char cmd[4096], *out, *err;
    const char *bad[] = { "",
                          "src.gguf",
                          "--decode-type q8_0 a b",
                          "--threads 0 a b",
                          "--seq-len 8 a b",
                          "--bogus a b",
                          "--text" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s/pn-compare %s", PN_BIN_DIR, bad[i]);
        cr_assert_eq(tu_run(cmd, &out, &err), 2, "'%s': %s", bad[i], err);
        cr_assert_str_empty(out);
        cr_assert_str_neq(err, "", "'%s' says nothing", bad[i]);
        free(out);
        free(err);
    }
    snprintf(cmd, sizeof cmd, "%s/pn-compare --help", PN_BIN_DIR);
    cr_assert_eq(tu_run(cmd, &out, &err), 0);
    cr_assert(strstr(out, "--json") && strstr(out, "--text") && strstr(out, "--keep-rotation"));
    free(out);
    free(err);
    snprintf(cmd, sizeof cmd, "%s/pn-compare --version", PN_BIN_DIR);
    cr_assert_eq(tu_run(cmd, &out, &err), 0);
    cr_assert_str_eq(out, "pn-compare " PN_VERSION "\n");
    free(out);
    free(err);
}

/* libllama as scripts/install-deps installs it (node-llama-cpp's build). */
#define LIBLLAMA                                                                                   \
    PN_SOURCE_DIR "/tools/llama/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/"            \
                  "libllama.v0.5.0.so"

/* A stock quantization (llama_model_quantize, through bench's harness)
 * stands where a PN file does: run as it is, named by its ftype, and a
 * coarser one is further from the source. */
Test(compare_cli, a_stock_quantization_is_compared_as_it_is, .init = setup, .fini = teardown)
{
    REQUIRE_LLAMA();
    if (access(LIBLLAMA, R_OK) != 0)
        cr_skip_test("no %s", LIBLLAMA);
    char *src = path_in("src.gguf"), *q8 = path_in("q8.gguf"), *q3 = path_in("q3.gguf");
    synth(src, "--layers 2 --width-scale 16 --vocab 300");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s/pn-llama-quantize --lib '%s' --threads 2 '%s' '%s' Q8_0",
             PN_BIN_DIR, LIBLLAMA, src, q8);
    run_ok(cmd);
    snprintf(cmd, sizeof cmd, "%s/pn-llama-quantize --lib '%s' --threads 2 '%s' '%s' Q3_K_S",
             PN_BIN_DIR, LIBLLAMA, src, q3);
    run_ok(cmd);
    char args[8192];
    snprintf(args, sizeof args, "--json '%s' '%s' '%s'", src, q8, q3);
    char *out = compare(args, 0);
    cr_assert(strstr(out, "\"mix\": \"stock Q8_0\"") && strstr(out, "\"mix\": \"stock Q3_K_S\""),
              "%s", out);
    double kl[2], bpw[3];
    cr_assert_eq(json_numbers(out, "kl_mean", kl, 2), 2, "%s", out);
    cr_assert_eq(json_numbers(out, "bits_per_weight", bpw, 3), 3, "%s", out);
    cr_log_info("mean KL: stock Q8_0 %.4g, Q3_K_S %.4g", kl[0], kl[1]);
    cr_assert(kl[0] >= 0 && kl[0] < 0.01, "Q8_0: %g", kl[0]);
    cr_assert_gt(kl[1], kl[0]);
    cr_assert(bpw[1] < bpw[0] && bpw[2] < bpw[1], "%s", out);
    free(out);
    free(src);
    free(q8);
    free(q3);
}

/* Refusals that come before llama.cpp is started: no node needed. */
static char *refused(const char *args)
{
    return compare(args, 1);
}

Test(compare_cli, a_missing_file_is_an_error_naming_it, .init = setup, .fini = teardown)
{
    char *src = path_in("src.gguf"), *pn = path_in("pn.gguf");
    synth(src, "--layers 2 --width-scale 16 --vocab 64");
    quantize(src, pn, "--recipe " FALLBACK_RECIPE " --promote 0");
    char args[8192];
    snprintf(args, sizeof args, "'%s' '%s/nope.gguf'", src, g_dir);
    char *err = refused(args);
    cr_assert(strstr(err, "nope.gguf") && strstr(err, "No such file"), "%s", err);
    free(err);
    snprintf(args, sizeof args, "'%s/nosource.gguf' '%s'", g_dir, pn);
    err = refused(args);
    cr_assert(strstr(err, "nosource.gguf") && strstr(err, "source"), "%s", err);
    free(err);
    free(src);
    free(pn);
}

Test(compare_cli, a_file_that_is_not_pn_or_not_of_that_source_is_refused, .init = setup,
     .fini = teardown)
{
    char *src = path_in("src.gguf"), *pn = path_in("pn.gguf"), *other = path_in("other.gguf"),
         *opn = path_in("opn.gguf"), *wide = path_in("wide.gguf"), *wpn = path_in("wpn.gguf");
    synth(src, "--layers 4 --width-scale 16 --vocab 64");
    quantize(src, pn, "--recipe " FALLBACK_RECIPE " --promote 0");
    synth(other, "--layers 2 --width-scale 16 --vocab 64");
    quantize(other, opn, "--recipe " FALLBACK_RECIPE " --promote 0");
    synth(wide, "--layers 4 --width-scale 16 --vocab 128");
    quantize(wide, wpn, "--recipe " FALLBACK_RECIPE " --promote 0");
    char args[8192];
    /* a float model where a PN file belongs */
    snprintf(args, sizeof args, "'%s' '%s'", src, other);
    char *err = refused(args);
    cr_assert(strstr(err, "other.gguf") && strstr(err, "not a PN file"), "%s", err);
    free(err);
    /* a PN file as the source */
    snprintf(args, sizeof args, "'%s' '%s'", pn, pn);
    err = refused(args);
    cr_assert(strstr(err, "pn.gguf") && strstr(err, "float model") && strstr(err, "q8_0"), "%s",
              err);
    free(err);
    /* a PN file of a model with other tensors */
    snprintf(args, sizeof args, "'%s' '%s'", src, opn);
    err = refused(args);
    cr_assert(strstr(err, "opn.gguf") && strstr(err, "not a PN file of") && strstr(err, "src.gguf"),
              "%s", err);
    free(err);
    /* one with the same tensors in other shapes */
    snprintf(args, sizeof args, "'%s' '%s'", src, wpn);
    err = refused(args);
    cr_assert(strstr(err, "wpn.gguf") && strstr(err, "token_embd.weight") &&
                  strstr(err, "another shape"),
              "%s", err);
    free(err);
    /* the same file twice: the command line itself, exit 2 (cmd/cli.h) */
    snprintf(args, sizeof args, "'%s' '%s' '%s'", src, pn, pn);
    err = compare(args, 2);
    cr_assert(strstr(err, "given twice"), "%s", err);
    free(err);
    free(src);
    free(pn);
    free(other);
    free(opn);
    free(wide);
    free(wpn);
}

/* A stand-in for node: a shell script with the harness's protocol. */
static char *fake_node(const char *name, const char *body)
{
    char *p = path_in(name);
    char text[4096];
    snprintf(text, sizeof text,
             "#!/bin/sh\n"
             "# $1 is the harness, $2 --version or the model\n"
             "if [ \"$2\" = --version ]; then\n"
             "  printf '{\"node_llama_cpp\":\"0\",\"llama_cpp\":\"fake\"}\\n'; exit 0\n"
             "fi\n%s",
             body);
    tu_write_file(p, text, strlen(text));
    chmod(p, 0755);
    return p;
}

Test(compare_cli, a_missing_node_or_llama_cpp_is_a_clear_error, .init = setup, .fini = teardown)
{
    char *src = path_in("src.gguf"), *pn = path_in("pn.gguf");
    synth(src, "--layers 2 --width-scale 16 --vocab 64");
    quantize(src, pn, "--recipe " FALLBACK_RECIPE " --promote 0");
    char args[8192];
    snprintf(args, sizeof args, "--node '%s/no-node' '%s' '%s'", g_dir, src, pn);
    char *err = refused(args);
    cr_assert(strstr(err, "no-node") && strstr(err, "Node.js") && strstr(err, "--node"), "%s", err);
    free(err);
    snprintf(args, sizeof args, "--llama-script '%s/none.mjs' '%s' '%s'", g_dir, src, pn);
    err = refused(args);
    cr_assert(strstr(err, "none.mjs") && strstr(err, "harness is missing"), "%s", err);
    free(err);
    /* the harness without node-llama-cpp beside it */
    char *lone = path_in("lone");
    mkdir(lone, 0755);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cp '" SCRIPT "' '%s/'", lone);
    run_ok(cmd);
    if (tu_run("node --version", NULL, NULL) == 0) {
        snprintf(args, sizeof args, "--llama-script '%s/pn-llama-logits.mjs' '%s' '%s'", lone, src,
                 pn);
        err = refused(args);
        cr_assert(strstr(err, "not available") && strstr(err, "node-llama-cpp is not installed") &&
                      strstr(err, "npm ci"),
                  "%s", err);
        free(err);
    }
    free(lone);
    free(src);
    free(pn);
}

/* A llama.cpp that fails, dies or hangs: the error quotes it, nothing is
 * left in the temporary folder, no child is left running. */
Test(compare_cli, a_failing_or_killed_llama_cpp_leaves_nothing_behind, .init = setup,
     .fini = teardown)
{
    char *src = path_in("src.gguf"), *pn = path_in("pn.gguf");
    synth(src, "--layers 2 --width-scale 16 --vocab 64");
    quantize(src, pn, "--recipe " FALLBACK_RECIPE " --promote 0");
    /* the source run answers (zero logits for the 256 positions of a
     * vocabulary of 64), the decoded model's run fails */
    const char *answer =
        "case \"$2\" in */pn-compare.*) cat >/dev/null; echo \"fake: cannot load $2\" >&2; "
        "exit 1;; esac\n"
        "{ printf 'PNLOGIT1\\100\\000\\000\\000'; cat; head -c 65536 /dev/zero; } >&3\n";
    char *fail = fake_node("fail.sh", answer);
    char args[8192];
    snprintf(args, sizeof args, "--node '%s' --llama-script '" SCRIPT "' '%s' '%s'", fail, src, pn);
    char *err = refused(args);
    cr_assert(strstr(err, "fake: cannot load") && strstr(err, "decoded.gguf") &&
                  strstr(err, "exit 1"),
              "%s", err);
    free(err);
    char *crash = fake_node("crash.sh", "kill -ABRT $$\n");
    snprintf(args, sizeof args, "--node '%s' --llama-script '" SCRIPT "' '%s' '%s'", crash, src,
             pn);
    err = refused(args);
    cr_assert(strstr(err, "killed by signal 6"), "%s", err);
    free(err);
    char *garbage = fake_node("garbage.sh", "cat >/dev/null; echo nonsense >&3\n");
    snprintf(args, sizeof args, "--node '%s' --llama-script '" SCRIPT "' '%s' '%s'", garbage, src,
             pn);
    err = refused(args);
    cr_assert(strstr(err, "PNLOGIT1") || strstr(err, "header"), "%s", err);
    free(err);
    free(fail);
    free(crash);
    free(garbage);
    free(src);
    free(pn);
}

Test(compare_cli, sigint_while_llama_cpp_runs_exits_130_and_leaves_nothing, .init = setup,
     .fini = teardown)
{
    char *src = path_in("src.gguf"), *pn = path_in("pn.gguf"), *tmp = path_in("tmp");
    mkdir(tmp, 0700);
    synth(src, "--layers 2 --width-scale 16 --vocab 64");
    quantize(src, pn, "--recipe " FALLBACK_RECIPE " --promote 0");
    char *pidfile = path_in("child.pid");
    char body[1024];
    snprintf(body, sizeof body, "echo $$ > '%s'\nexec sleep 60\n", pidfile);
    char *hang = fake_node("hang.sh", body);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        tu_child_output_to_devnull();
        execl(PN_BIN_DIR "/pn-compare", "pn-compare", "--quiet", "--node", hang, "--llama-script",
              SCRIPT, "--tmpdir", tmp, src, pn, (char *)NULL);
        _exit(127);
    }
    struct stat sb;
    for (int i = 0; i < 1000 && stat(pidfile, &sb) != 0; i++)
        usleep(10000);
    cr_assert_eq(stat(pidfile, &sb), 0, "the fake llama.cpp never started");
    usleep(50000);
    cr_assert_eq(count_entries(tmp), 1, "the private folder exists while it runs");
    kill(pid, SIGINT);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 130, "status %d", status);
    cr_assert_eq(count_entries(tmp), 0, "files left in %s", tmp);
    size_t n;
    char *text = tu_read_file(pidfile, &n);
    pid_t child = (pid_t)atoi(text);
    cr_assert_gt(child, 0);
    cr_assert(kill(child, 0) != 0, "the llama.cpp child %d still runs", (int)child);
    free(text);
    free(hang);
    free(pidfile);
    free(tmp);
    free(src);
    free(pn);
}

/* ---- a Hugging Face checkpoint converted by pn-convert ---- */

#define HFDATA PN_TEST_DATA "/hf-qwen35-tiny"

/* Stock llama.cpp loads pn-convert's output of the tiny Qwen3.5 checkpoint
 * (vocabulary 320, an MTP layer) and gives exactly the logits of the
 * converter's own file of it. */
Test(llama_hf, pn_converts_output_loads_and_gives_the_logits_of_the_converters_file, .init = setup,
     .fini = teardown, .timeout = 300)
{
    REQUIRE_LLAMA();
    for (int no_mtp = 0; no_mtp < 2; no_mtp++) {
        char *ours = path_in(no_mtp ? "ours-no-mtp.gguf" : "ours.gguf");
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "%s/pn-convert --quiet %s '%s' '%s'", PN_BIN_DIR,
                 no_mtp ? "--no-mtp" : "", HFDATA "/hf", ours);
        run_ok(cmd);
        const uint32_t n_seq = 2, len = 6;
        uint32_t ids[12];
        seq_ids(ids, n_seq, len, 276);
        logits a = eval_model(ours, n_seq, len, ids);
        logits b = eval_model(no_mtp ? HFDATA "/converted.bf16.no-mtp.gguf"
                                     : HFDATA "/converted.bf16.gguf",
                              n_seq, len, ids);
        cr_assert_eq(a.n_vocab, 320);
        cr_assert_eq(a.n_vocab, b.n_vocab);
        cr_assert(memcmp(a.rows, b.rows, (size_t)a.total * a.n_vocab * 4) == 0,
                  "the logits of pn-convert's output are the converter file's");
        assert_context_matters(&a, len);
        free(a.rows);
        free(b.rows);
        free(ours);
    }
}

/* pn-compare takes the folder as SOURCE: the figures are those it gives
 * with the converter's file of the folder as SOURCE. */
Test(llama_hf, pn_compare_takes_the_folder_as_source, .init = setup, .fini = teardown,
     .timeout = 300)
{
    REQUIRE_LLAMA();
    char *pn = path_in("pn.gguf");
    quantize(HFDATA "/hf", pn, "--recipe '" PN_TEST_DATA "/hf-tiny.mix'");
    char *rows[2] = { NULL, NULL };
    const char *srcs[2] = { HFDATA "/hf", HFDATA "/converted.bf16.gguf" };
    for (int k = 0; k < 2; k++) {
        char cmd[8192], *o = NULL, *e = NULL;
        snprintf(cmd, sizeof cmd, "%s/pn-compare --threads 1 --llama-script '" SCRIPT "' '%s' '%s'",
                 PN_BIN_DIR, srcs[k], pn);
        int rc = tu_run(cmd, &o, &e);
        cr_assert_eq(rc, 0, "pn-compare %s: exit %d: %s", srcs[k], rc, e);
        char *line = strstr(o, "hf-tiny+0");
        cr_assert(line, "%s", o);
        /* the PN file's row from its first column to the mix label */
        char *start = line;
        while (start > o && start[-1] != '\n')
            start--;
        rows[k] = strndup(start, (size_t)(line - start));
        free(o);
        free(e);
    }
    cr_assert_str_eq(rows[0], rows[1], "the same bytes, bpw, KL and top-1");
    free(rows[0]);
    free(rows[1]);
    free(pn);
}
