/* pn-quantize with an importance matrix (issue 30):
 * the promotion measurement weighted through the rotation, pinned against an
 * implementation written here; the promoted list following the weights; the
 * candidates without an entry; the identity in the output and in the
 * --measurement file.
 *
 * Here the tests that run the built programs; those that call the library
 * are in tests/pipeline/test_imatrix_measure.c. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "hadamard/hadamard.h"
#include "mix/imatrix.h"
#include "mix/measurement.h"
#include "pipeline/quantize.h"
#include "quant/pn.h"
#include "quant/types.h"
#include "quant/widen.h"
#include "fixtures/imatrix_files.h"
#include "fixtures/pn_source.h"
#include "fixtures/scratch.h"
#include "test_util.h"

static const char g_recipe[] = "mix M\nrotation hadamard 1024\npromote 1\n"
                               "rule *.weight => pn3t\n";

/* ---- --reuse, pn-check, the programs ------------------------------------ */

#include "check/check.h"
#include "check/check_testing.h"


Test(imatrix_measure, a_hostile_imatrix_stops_pn_quantize_with_exit_1_and_nothing_written,
     .init = setup, .fini = teardown)
{
    char *src = path_in("pair.gguf"), *recipe = path_in("r.mix"), *bad = path_in("bad.dat"),
         *dst = path_in("out.gguf");
    imatrix_write_pair(src);
    cr_assert_eq(tu_write_file(recipe, g_recipe, strlen(g_recipe)), 0);
    /* an entry count past the file */
    const uint8_t bytes[] = { 0xff, 0xff, 0xff, 0x7f, 1, 0, 0, 0, 'a' };
    cr_assert_eq(tu_write_file(bad, bytes, sizeof bytes), 0);
    char *err_text = NULL;
    int rc =
        tu_run_program(NULL, &err_text, "pn-quantize",
                       "--quiet --recipe '%s' --imatrix '%s' '%s' '%s'", recipe, bad, src, dst);
    cr_assert_eq(rc, 1, "%s", err_text);
    cr_assert(strstr(err_text, "bad.dat") != NULL, "%s", err_text);
    cr_assert_not(tu_exists(dst));
    cr_assert_eq(tu_count_temporary_files(g_dir), 0);
    free(err_text);
    /* pn-check: an imatrix it cannot read is exit 1 (unreadable), naming it */
    rc = tu_run_program(NULL, &err_text, "pn-check", "--imatrix '%s' '%s'", bad, src);
    cr_assert_eq(rc, 1, "%s", err_text);
    cr_assert(strstr(err_text, "bad.dat") != NULL, "%s", err_text);
    free(err_text);
    /* an imatrix of another model */
    const char *names[] = { "model.layers.0.mlp.up_proj.weight" };
    const int64_t K[] = { 320 };
    imatrix_write_dat(bad, names, K, 1, imatrix_w_ones);
    rc = tu_run_program(NULL, &err_text, "pn-quantize",
                        "--quiet --recipe '%s' --imatrix '%s' '%s' '%s'", recipe, bad, src, dst);
    cr_assert_eq(rc, 1, "%s", err_text);
    cr_assert(strstr(err_text, "another model") != NULL, "%s", err_text);
    cr_assert_not(tu_exists(dst));
    free(err_text);
    rc = tu_run_program(NULL, &err_text, "pn-quantize", "--imatrix-missing sometimes '%s' '%s'",
                        src, dst);
    cr_assert_eq(rc, 2, "%s", err_text);
    free(err_text);
    free(src);
    free(recipe);
    free(bad);
    free(dst);
}

Test(imatrix_measure, a_folder_source_matches_the_imatrix_through_its_converted_names,
     .init = setup, .fini = teardown)
{
    char *imx = path_in("hf.dat");
    /* GGUF names of the converted folder, and one Hugging Face name */
    const char *names[] = { "blk.0.ffn_down.weight", "blk.3.attn_k.weight",
                            "model.layers.0.mlp.down_proj.weight" };
    const int64_t K[] = { 128, 64, 128 };
    imatrix_write_dat(imx, names, K, 3, imatrix_w_ones);
    char *out = NULL, *err_text = NULL;
    int rc = tu_run_program(&out, &err_text, "pn-quantize",
                            "--dry-run --recipe '%s' --imatrix '%s' '%s'",
                            PN_TEST_DATA "/hf-tiny.mix", imx, PN_TEST_DATA "/hf-qwen35-tiny/hf");
    cr_assert_eq(rc, 0, "%s", err_text);
    cr_assert(strstr(err_text, "3 entries, 2 name tensors of this model") != NULL, "%s", err_text);
    const char *u = strstr(err_text, "entries that name no tensor of this model (1):");
    cr_assert(u && strstr(u, "model.layers.0.mlp.down_proj.weight"), "%s", err_text);
    cr_assert_null(strstr(err_text, "blk.0.ffn_down.weight"), "%s", err_text);
    free(out);
    free(err_text);
    free(imx);
}

/* ---- the plan says which candidates have an entry ----------------------- */

/* The plan table's row of tensor name in out (a copy), or NULL. */
static char *plan_row(const char *out, const char *name)
{
    const size_t n = strlen(name);
    for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, name, n) == 0 && l[n] == ' ') {
            const char *e = strchr(l, '\n');
            return strndup(l, e ? (size_t)(e - l) : strlen(l));
        }
    return NULL;
}

/* The report's imatrix_entry of tensor name: 1 true, 0 false, -1 absent. */
static int report_entry(json_t *root, const char *name)
{
    json_t *ts = json_object_get(root, "tensors");
    for (size_t i = 0; i < json_array_size(ts); i++) {
        json_t *t = json_array_get(ts, i);
        if (strcmp(json_string_value(json_object_get(t, "name")), name) != 0)
            continue;
        json_t *f = json_object_get(t, "imatrix_entry");
        cr_assert(f == NULL || json_is_boolean(f), "%s: imatrix_entry is no boolean", name);
        return f ? json_is_true(f) : -1;
    }
    cr_assert_fail("%s: not in the report", name);
    return -1;
}

Test(imatrix_measure, the_plan_marks_each_candidate_with_or_without_an_entry_and_only_with_imatrix,
     .init = setup, .fini = teardown)
{
    static const sf_spec specs[] = {
        { "a.ffn_up.weight", 2, 320, 16, PN_TYPE_F32 },
        { "b.ffn_up.weight", 2, 320, 16, PN_TYPE_F32 },
        { "output.weight", 2, 512, 8, PN_TYPE_F32 },
    };
    static const char recipe_text[] = "mix P\nrotation hadamard 1024\npromote 1\n"
                                      "rule output.weight => q4_K\nrule * => pn3t\n";
    char *src = path_in("p.gguf"), *recipe = path_in("p.mix"), *imx = path_in("half.dat"),
         *report = path_in("r.json");
    sf_write_model(src, specs, 3, 4);
    cr_assert_eq(tu_write_file(recipe, recipe_text, strlen(recipe_text)), 0);
    /* a.ffn_up.weight, a candidate, has no entry; output.weight, not a
     * candidate, has one */
    const char *names[] = { "b.ffn_up.weight", "output.weight" };
    const int64_t K[] = { 320, 512 };
    imatrix_write_dat(imx, names, K, 2, imatrix_w_varied);
    char *out = NULL, *err_text = NULL;
    int rc = tu_run_program(&out, &err_text, "pn-quantize",
                            "--dry-run --recipe '%s' --imatrix '%s' --imatrix-promotion weighted "
                            "--imatrix-missing unweighted "
                            "--report '%s' '%s'",
                            recipe, imx, report, src);
    cr_assert_eq(rc, 0, "%s", err_text);
    char *a = plan_row(out, "a.ffn_up.weight"), *b = plan_row(out, "b.ffn_up.weight"),
         *o = plan_row(out, "output.weight");
    cr_assert(a && b && o, "rows missing from the plan:\n%s", out);
    cr_assert(strstr(a, "no imatrix entry") != NULL, "%s", a);
    cr_assert(strstr(b, "imatrix entry") != NULL && strstr(b, "no imatrix entry") == NULL, "%s", b);
    cr_assert_null(strstr(o, "imatrix"), "not a candidate, yet marked: %s", o);
    json_error_t je;
    json_t *root = json_load_file(report, 0, &je);
    cr_assert_not_null(root, "%s", je.text);
    cr_assert_eq(report_entry(root, "a.ffn_up.weight"), 0);
    cr_assert_eq(report_entry(root, "b.ffn_up.weight"), 1);
    cr_assert_eq(report_entry(root, "output.weight"), 1);
    json_decref(root);
    free(a);
    free(b);
    free(o);
    free(out);
    free(err_text);
    /* without --imatrix: neither the marker nor the report's flag */
    rc = tu_run_program(&out, &err_text, "pn-quantize",
                        "--dry-run --force --recipe '%s' --report '%s' '%s'", recipe, report, src);
    cr_assert_eq(rc, 0, "%s", err_text);
    a = plan_row(out, "a.ffn_up.weight");
    cr_assert_not_null(a, "%s", out);
    free(a);
    cr_assert_null(strstr(out, "imatrix"), "%s", out);
    root = json_load_file(report, 0, &je);
    cr_assert_not_null(root, "%s", je.text);
    cr_assert_eq(report_entry(root, "a.ffn_up.weight"), -1);
    cr_assert_eq(report_entry(root, "output.weight"), -1);
    json_decref(root);
    free(out);
    free(err_text);
    free(src);
    free(recipe);
    free(imx);
    free(report);
}

Test(imatrix_measure, an_imatrix_changes_no_promotion_unless_weighted_promotion_is_asked,
     .init = setup, .fini = teardown)
{
    /* the heavy-channel pair promotes b unweighted and a weighted */
    char *src = path_in("pair.gguf"), *recipe = path_in("r.mix"), *imx = path_in("heavy.dat");
    imatrix_write_pair(src);
    static const char rec[] = "mix M\nrotation none\npromote 1\nrule *.weight => pn3t\n";
    cr_assert_eq(tu_write_file(recipe, rec, strlen(rec)), 0);
    const char *names[] = { "a.ffn_up.weight", "b.ffn_up.weight" };
    const int64_t K[] = { 320, 320 };
    imatrix_write_dat(imx, names, K, 2, imatrix_w_heavy);
    const char *how[] = { "", "--imatrix '%s' ", "--imatrix '%s' --imatrix-promotion unweighted ",
                          "--imatrix '%s' --imatrix-promotion weighted " };
    const char *want[] = { "b.ffn_up.weight", "b.ffn_up.weight", "b.ffn_up.weight",
                           "a.ffn_up.weight" };
    for (int k = 0; k < 4; k++) {
        char opts[256];
        snprintf(opts, sizeof opts, how[k], imx);
        char *out = NULL, *err_text = NULL;
        int rc = tu_run_program(&out, &err_text, "pn-quantize", "--dry-run --recipe '%s' %s'%s'",
                                recipe, opts, src);
        cr_assert_eq(rc, 0, "%s: %s", opts, err_text);
        char *row = plan_row(out, want[k]);
        cr_assert(row && strstr(row, "promoted #1"), "%s: %s is not promoted:\n%s", opts, want[k],
                  out);
        /* the plan marks entries only where they weight the measurement */
        cr_assert_eq(strstr(out, "imatrix entry") != NULL, k == 3, "%s:\n%s", opts, out);
        free(row);
        free(out);
        free(err_text);
    }
    char *out = NULL, *err_text = NULL;
    int rc = tu_run_program(&out, &err_text, "pn-quantize",
                            "--dry-run --recipe '%s' --imatrix '%s' --imatrix-promotion sometimes "
                            "'%s'",
                            recipe, imx, src);
    cr_assert_eq(rc, 2, "%s", err_text);
    cr_assert(strstr(err_text, "pn-quantize: error: --imatrix-promotion: 'sometimes'"), "%s",
              err_text);
    cr_assert_str_eq(out, "");
    free(out);
    free(err_text);
    free(src);
    free(recipe);
    free(imx);
}
