/* pn-check: a good PN file made in the test, and a corpus of
 * damaged copies, each caught by its own finding with the right exit status.
 *
 * Here the tests that run the built programs; those that call the library
 * are in tests/check/test_check.c. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixtures/gguf_bytes.h"
#include "fixtures/check_files.h"
#include "fixtures/long_row.h"
#include "check/check.h"
#include "check/check_testing.h"
#include "fixtures/pn_model.h"
#include "test_util.h"

static char *g_dir;
static fx_model g_model;
static char g_src[4096], g_good[4096], g_recipe[4096];

static void setup(void)
{
    fx_make_folder(&g_dir, &g_model, g_src, g_good);
    snprintf(g_recipe, sizeof g_recipe, "%s/t0.mix", g_dir);
    cr_assert_eq(tu_write_file(g_recipe, FX_RECIPE, strlen(FX_RECIPE)), 0);
}

static void teardown(void)
{
    fx_remove_folder(&g_dir, &g_model);
}

TestSuite(pn_check, .init = setup, .fini = teardown, .timeout = 60);

/* A path in the test folder (static storage, a few at a time). */
static const char *path_in(const char *name)
{
    return tu_join_static(g_dir, name);
}

/* Runs pn-check with the arguments fmt formats. */
#define check_cli(out, err, ...) tu_run_program(out, err, "pn-check", __VA_ARGS__)

/* A line "<severity> <code> ..." that mentions `what` (tensor or key) if given. */
static bool has_finding(const char *out, const char *sev, const char *code, const char *what)
{
    char head[128];
    snprintf(head, sizeof head, "%-7s %s", sev, code);
    const size_t hl = strlen(head);
    for (const char *line = out; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (strncmp(line, head, hl) == 0 && (line[hl] == ' ' || line[hl] == ':')) {
            if (!what)
                return true;
            char *copy = strndup(line, len);
            bool hit = strstr(copy, what) != NULL;
            free(copy);
            if (hit)
                return true;
        }
        line = end ? end + 1 : NULL;
    }
    return false;
}

static int count_lines_starting(const char *out, const char *prefix)
{
    int n = 0;
    for (const char *line = out; line && *line;) {
        if (strncmp(line, prefix, strlen(prefix)) == 0)
            n++;
        const char *end = strchr(line, '\n');
        line = end ? end + 1 : NULL;
    }
    return n;
}

static const char *last_line(const char *out)
{
    static char buf[512];
    size_t n = strlen(out);
    while (n && out[n - 1] == '\n')
        n--;
    size_t s = n;
    while (s && out[s - 1] != '\n')
        s--;
    snprintf(buf, sizeof buf, "%.*s", (int)(n - s), out + s);
    return buf;
}

/* ---- byte edits ---- */

static const char *damaged(const char *name, check_edit e, bool fix_crcs)
{
    return check_damaged(g_dir, g_good, name, e, fix_crcs);
}

/* Byte offset of block b of row r of a PN tensor of the fixture. */
static uint64_t pn_block_at(int t, int64_t row, int64_t block)
{
    return check_block_at(g_good, t, row, block);
}

static const char *made_with(const char *name, const fx_pn_opts *o)
{
    const char *p = path_in(name);
    fx_write_pn(p, &g_model, o);
    return p;
}

/* ---- the good file ---- */

Test(pn_check, accepts_the_good_file_with_no_findings)
{
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", g_good);
    cr_assert_eq(rc, 0, "rc %d\n%s%s", rc, out, err);
    cr_assert_eq(count_lines_starting(out, "error "), 0, "%s", out);
    cr_assert_eq(count_lines_starting(out, "warning "), 0, "%s", out);
    cr_assert_str_eq(last_line(out), "valid (0 errors, 0 warnings)");
    cr_assert_str_empty(err);
    free(out);
    free(err);
}

Test(pn_check, accepts_the_good_file_against_its_recipe_and_source)
{
    char *out, *err;
    int rc =
        check_cli(&out, &err, "--strict --recipe '%s' --source '%s' '%s'", g_recipe, g_src, g_good);
    cr_assert_eq(rc, 0, "rc %d\n%s%s", rc, out, err);
    cr_assert_str_eq(last_line(out), "valid (0 errors, 0 warnings)");
    cr_assert(
        strstr(out, "recipe: mix T0, 1 promotion (recipe default 1); expected pn.mix \"T0+1\""),
        "%s", out);
    cr_assert(strstr(out, "  promoted blk.0.ffn_gate.weight\n"), "%s", out);
    cr_assert_null(strstr(out, "HIGH"), "%s", out);
    cr_assert_null(strstr(out, "not compared"), "%s", out);
    free(out);
    free(err);
}

Test(pn_check, prints_json_that_parses_with_the_same_verdict)
{
    char *out, *err;
    int rc =
        check_cli(&out, &err, "--json --recipe '%s' --source '%s' '%s'", g_recipe, g_src, g_good);
    cr_assert_eq(rc, 0, "%s%s", out, err);
    cr_assert(strstr(out, "\"status\": \"valid\""), "%s", out);
    cr_assert(strstr(out, "\"findings\": []"), "%s", out);
    const char *jp = path_in("report.json");
    cr_assert_eq(tu_write_file(jp, out, strlen(out)), 0);
    free(out);
    free(err);
    if (system("node --version >/dev/null 2>&1") != 0)
        cr_skip("node is not installed: only the structural checks above ran");
    char cmd[4600];
    snprintf(cmd, sizeof cmd,
             "node -e 'const r = JSON.parse(require(\"fs\").readFileSync(process.argv[1]));"
             "if (r.status !== \"valid\" || r.tensors.length !== 7 || r.recipe.n_promoted !== 1 ||"
             " r.tensors[2].source.error > r.tensors[2].source.limit) process.exit(3);"
             "console.log(r.tensors[2].type, r.tensors[2].rotation_block)' '%s'",
             jp);
    rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "node: %s%s", out, err);
    cr_assert_str_eq(out, "pn3t 64\n");
    free(out);
    free(err);
}

Test(pn_check, json_names_the_findings_of_a_damaged_file)
{
    const char *p =
        damaged("nan.gguf", (check_edit){ pn_block_at(FX_FFN_DOWN, 2, 1), 1, 0x7e00 }, true);
    char *out, *err;
    int rc = check_cli(&out, &err, "--json '%s'", p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(strstr(out, "\"status\": \"invalid\""), "%s", out);
    cr_assert(
        strstr(out, "\"code\": \"PN-NONFINITE-SCALE\", \"tensor\": \"blk.0.ffn_down.weight\""),
        "%s", out);
    cr_assert(strstr(out, "\"row\": 2, \"block\": 1, \"count\": 1"), "%s", out);
    free(out);
    free(err);
}

/* ---- errors: exit 1 ---- */

Test(pn_check, reports_a_set_pn3t_reserved_bit_with_its_row_and_block)
{
    /* Bit 15 of word 3 of block 2 of row 1. */
    const char *p = damaged("reserved.gguf",
                            (check_edit){ pn_block_at(FX_ATTN_Q, 1, 2) + 2 + 12, 0, 0x8000 }, true);
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "PN-RESERVED-BITS", "tensor blk.0.attn_q.weight"), "%s",
              out);
    cr_assert(strstr(out, "1 of 64 pn3t blocks have reserved bit 15 or 31"), "%s", out);
    cr_assert(strstr(out, "first: row 1 block 2"), "%s", out);
    cr_assert_eq(count_lines_starting(out, "error "), 1, "only this finding:\n%s", out);
    cr_assert_str_eq(last_line(out), "invalid (1 error, 0 warnings)");
    free(out);
    free(err);
}

Test(pn_check, reports_a_nan_scale)
{
    const char *p =
        damaged("nan.gguf", (check_edit){ pn_block_at(FX_FFN_DOWN, 2, 1), 1, 0x7e00 }, true);
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "PN-NONFINITE-SCALE", "tensor blk.0.ffn_down.weight"), "%s",
              out);
    cr_assert(strstr(out, "(1 NaN, 0 infinite); first: row 2 block 1"), "%s", out);
    cr_assert_eq(count_lines_starting(out, "error "), 1, "%s", out);
    free(out);
    free(err);
}

Test(pn_check, reports_an_infinite_scale)
{
    const char *p =
        damaged("inf.gguf", (check_edit){ pn_block_at(FX_ATTN_Q, 0, 0), 1, 0xfc00 }, true);
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "PN-NONFINITE-SCALE", "tensor blk.0.attn_q.weight"), "%s",
              out);
    cr_assert(strstr(out, "(0 NaN, 1 infinite); first: row 0 block 0"), "%s", out);
    cr_assert(strstr(out, "d 0xfc00"), "%s", out);
    free(out);
    free(err);
}

Test(pn_check, reports_a_changed_data_byte_as_a_crc_mismatch_naming_the_tensor)
{
    uint64_t at = fx_data_offset(g_good, "blk.0.ssm_alpha.weight", NULL) + 40;
    const char *p = damaged("crc.gguf", (check_edit){ at, 2, 0x01 }, false);
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "PN-CRC-MISMATCH", "tensor blk.0.ssm_alpha.weight"), "%s",
              out);
    cr_assert_eq(count_lines_starting(out, "error "), 1, "%s", out);
    free(out);
    free(err);
}

/* The offset field of a tensor info: after the name, n_dims, ne[] and type. */
static uint64_t info_offset_field(int t)
{
    uint64_t info;
    fx_data_offset(g_good, fx_specs[t].name, &info);
    return info + 8 + strlen(fx_specs[t].name) + 4 + 8 * fx_specs[t].n_dims + 4;
}

Test(pn_check, reports_overlapping_tensors_by_name)
{
    /* output.weight's data offset := ssm_alpha's (both relative to the data section). */
    size_t n;
    uint8_t *buf = tu_read_file(g_good, &n);
    uint64_t alpha_rel = 0;
    for (int i = 0; i < 8; i++)
        alpha_rel |= (uint64_t)buf[info_offset_field(FX_ALPHA) + i] << (8 * i);
    free(buf);
    const char *p =
        damaged("overlap.gguf", (check_edit){ info_offset_field(FX_OUTPUT), 4, alpha_rel }, false);
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "GGUF-TENSOR-OVERLAP", "tensor output.weight"), "%s", out);
    cr_assert(has_finding(out, "error", "GGUF-TENSOR-OVERLAP", "'blk.0.ssm_alpha.weight'"), "%s",
              out);
    free(out);
    free(err);
}

Test(pn_check, names_every_tensor_past_the_end_of_a_file_cut_inside_its_data)
{
    uint64_t cut = fx_data_offset(g_good, "blk.0.attn_q.weight", NULL) + 100;
    const char *p = damaged("cut-data.gguf", (check_edit){ cut, 3, 0 }, false);
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    for (int i = 0; i < FX_N; i++) {
        char what[128];
        snprintf(what, sizeof what, "tensor %s ", fx_specs[i].name);
        bool past = i >= FX_ATTN_Q;
        cr_assert_eq(has_finding(out, "error", "GGUF-TENSOR-PAST-EOF", what), past,
                     "%s %s be named:\n%s", fx_specs[i].name, past ? "should" : "should not", out);
    }
    cr_assert_eq(count_lines_starting(out, "error   GGUF-TENSOR-PAST-EOF"), FX_N - FX_ATTN_Q, "%s",
                 out);
    cr_assert(strstr(out, "cut short inside its tensor data"), "%s", out);
    free(out);
    free(err);
}

/* ---- errors found only with --source ---- */

static void expect_source_catch(const char *file, const char *tensor)
{
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", file);
    cr_assert_eq(rc, 0, "without --source the damage is invisible: %s%s", out, err);
    free(out);
    free(err);
    rc = check_cli(&out, &err, "--source '%s' '%s'", g_src, file);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    char what[128];
    snprintf(what, sizeof what, "tensor %s ", tensor);
    cr_assert(has_finding(out, "error", "SRC-ERROR-HIGH", what), "%s", out);
    cr_assert_eq(count_lines_starting(out, "error "), 1, "only that tensor is flagged:\n%s", out);
    free(out);
    free(err);
}

Test(pn_check, source_catches_codes_packed_by_element_index)
{
    fx_pn_opts o = { .tensor = "blk.0.ffn_down.weight", .element_packing = true };
    expect_source_catch(made_with("packing.gguf", &o), "blk.0.ffn_down.weight");
}

Test(pn_check, source_catches_a_pn_tensor_quantized_without_rotation)
{
    fx_pn_opts o = { .tensor = "blk.0.attn_q.weight", .cap = -1 };
    expect_source_catch(made_with("unrotated.gguf", &o), "blk.0.attn_q.weight");
}

Test(pn_check, source_catches_a_pn_tensor_rotated_with_another_block_size)
{
    fx_pn_opts o = { .tensor = "blk.0.attn_q.weight", .cap = 32 };
    expect_source_catch(made_with("block32.gguf", &o), "blk.0.attn_q.weight");
}

Test(pn_check, source_catches_a_pn_tensor_holding_the_other_pn_types_bytes)
{
    /* pn4t by its label, pn3t codes inside (the rows do not even line up). */
    fx_pn_opts o = { .tensor = "blk.0.ffn_gate.weight", .swapped = true };
    const char *p = made_with("swapped.gguf", &o);
    char *out, *err;
    int rc = check_cli(&out, &err, "--source '%s' '%s'", g_src, p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "SRC-ERROR-HIGH", "tensor blk.0.ffn_gate.weight "), "%s",
              out);
    free(out);
    free(err);
}

/* ---- could not read: exit 1, the verdict "unreadable" (cmd/cli.h's rule) ---- */

Test(pn_check, cannot_read_a_file_whose_string_length_is_damaged_and_names_the_length_field)
{
    /* byte 24: the first key's length, overwritten (a cut header is
     * GGUF-TRUNCATED-HEADER, below) */
    const char *p = damaged("bad-length.gguf", (check_edit){ 24, 4, 1ull << 40 }, false);
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "GGUF-BAD-STRING-LENGTH", "byte 24: "), "%s", out);
    cr_assert(strstr(out, "the key of key/value pair 0: damaged string length: the length field "
                          "at byte 24 reads 1099511627776 bytes, more than the whole file (the "
                          "file is "),
              "%s", out);
    cr_assert(!strstr(out, "GGUF-TRUNCATED-HEADER"), "%s", out);
    cr_assert_str_eq(last_line(out), "unreadable (1 error, 0 warnings)");
    cr_assert_str_empty(err, "the report says it once, on stdout: %s", err);
    free(out);
    free(err);
}

Test(pn_check, cannot_read_a_file_cut_inside_its_header)
{
    const char *p = damaged("cut-header.gguf", (check_edit){ 40, 3, 0 }, false);
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "GGUF-TRUNCATED-HEADER", NULL), "%s", out);
    cr_assert(strstr(out, " byte "), "the finding carries the offset: %s", out);
    cr_assert_str_eq(last_line(out), "unreadable (1 error, 0 warnings)");
    cr_assert_str_empty(err, "the report says it once, on stdout: %s", err);
    free(out);
    free(err);
}

Test(pn_check, cannot_read_a_file_that_is_not_gguf)
{
    const char *p = path_in("text.gguf");
    cr_assert_eq(tu_write_file(p, "hello, this is not a model\n", 27), 0);
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "GGUF-NOT-GGUF", NULL), "%s", out);
    free(out);
    free(err);
}

Test(pn_check, cannot_read_a_missing_file)
{
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", path_in("absent.gguf"));
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "GGUF-IO", NULL), "%s", out);
    cr_assert(strstr(out, "absent.gguf: not opened\n"), "a missing file has no size: %s", out);
    cr_assert(strstr(out, "absent.gguf") && !strstr(out, "0 bytes"), "%s", out);
    cr_assert_str_empty(err, "once, on stdout: %s", err);
    free(out);
    free(err);
}

Test(pn_check, refuses_bad_usage_with_status_2)
{
    static const char *const cases[] = {
        "", "--bogus x.gguf", "--threads 0 x.gguf", "--threads many x.gguf", "--recipe",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, *err;
        int rc = check_cli(&out, &err, "%s", cases[i]);
        cr_assert_eq(rc, 2, "'%s': rc %d", cases[i], rc);
        cr_assert_str_empty(out, "'%s': %s", cases[i], out);
        cr_assert(strstr(err, "pn-check: "), "'%s': %s", cases[i], err);
        free(out);
        free(err);
    }
    char *out, *err;
    cr_assert_eq(check_cli(&out, &err, "--help"), 0);
    cr_assert(strstr(out, "usage: pn-check"));
    free(out);
    free(err);
}

Test(pn_check, cannot_run_with_an_unreadable_recipe_or_source)
{
    char *out, *err;
    int rc = check_cli(&out, &err, "--recipe '%s' '%s'", path_in("none.mix"), g_good);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(strstr(err, "none.mix"), "%s", err);
    free(out);
    free(err);
    rc = check_cli(&out, &err, "--source '%s' '%s'", path_in("none.gguf"), g_good);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(strstr(err, "source"), "%s", err);
    free(out);
    free(err);
}

/* ---- warnings: exit 0, 1 with --strict ---- */

static void expect_warning(const char *file, const char *extra, const char *code, const char *what)
{
    char *out, *err;
    int rc = check_cli(&out, &err, "%s '%s'", extra, file);
    cr_assert_eq(rc, 0, "%s%s", out, err);
    cr_assert(has_finding(out, "warning", code, what), "%s", out);
    cr_assert_eq(count_lines_starting(out, "error "), 0, "%s", out);
    cr_assert_str_eq(last_line(out), "valid (0 errors, 1 warning)");
    free(out);
    free(err);
    rc = check_cli(&out, &err, "--strict %s '%s'", extra, file);
    cr_assert_eq(rc, 1, "--strict: %s%s", out, err);
    cr_assert_str_eq(last_line(out), "invalid (0 errors, 1 warning)");
    free(out);
    free(err);
}

Test(pn_check, warns_about_a_missing_pn_format_key)
{
    fx_pn_opts o = { .omit_format = true };
    expect_warning(made_with("noformat.gguf", &o), "", "PN-META-MISSING", "key pn.format");
}

Test(pn_check, warns_about_missing_crcs)
{
    fx_pn_opts o = { .omit_crc = true };
    expect_warning(made_with("nocrc.gguf", &o), "", "PN-META-MISSING", "key pn.tensor_crc32");
}

Test(pn_check, warns_about_a_type_that_differs_from_the_recipe)
{
    fx_pn_opts o = { .tensor = "blk.0.ssm_alpha.weight", .store_type = PN_TYPE_F16 };
    char extra[4200];
    snprintf(extra, sizeof extra, "--recipe '%s'", g_recipe);
    expect_warning(made_with("f16alpha.gguf", &o), extra, "RECIPE-TYPE",
                   "tensor blk.0.ssm_alpha.weight");
}

/* ---- metadata errors ---- */

Test(pn_check, reports_a_pn_key_of_the_wrong_type)
{
    fx_pn_opts o = { .block_size_i32 = true };
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", made_with("i32.gguf", &o));
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "PN-META-TYPE", "key pn.rotation.block_size"), "%s", out);
    cr_assert(strstr(out, "has type int32, expected uint32"), "%s", out);
    free(out);
    free(err);
}

Test(pn_check, reports_promoted_names_that_are_absent_or_not_pn4t)
{
    static const char *const extra[] = { "blk.0.attn_q.weight", "blk.9.nothing.weight" };
    static const char *const says[] = { "whose type is pn3t, not pn4t",
                                        "which the file does not hold" };
    for (int k = 0; k < 2; k++) {
        fx_pn_opts o = { .promoted_extra = extra[k] };
        char *out, *err;
        int rc = check_cli(&out, &err, "'%s'", made_with("promoted.gguf", &o));
        cr_assert_eq(rc, 1, "%s%s", out, err);
        cr_assert(has_finding(out, "error", "PN-META-VALUE", extra[k]), "%s", out);
        cr_assert(strstr(out, says[k]), "%s", out);
        /* pn.mix "T0+1" no longer matches the two names listed. */
        cr_assert(has_finding(out, "error", "PN-META-VALUE", "key pn.mix:"), "%s", out);
        free(out);
        free(err);
    }
}

/* ---- hostile inputs: refused with a finding, never a crash or a hang ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

Test(pn_check, a_report_that_cannot_be_written_is_an_error_exit)
{
    static const char *const modes[] = { "--json", "" };
    for (int k = 0; k < 2; k++) {
        char *out, *err;
        int rc = check_cli(&out, &err, "%s '%s' >/dev/full", modes[k], g_good);
        cr_assert_eq(rc, 1, "'%s': rc %d\n%s", modes[k], rc, err);
        cr_assert_str_empty(out);
        cr_assert_str_eq(err,
                         "pn-check: error: cannot write the report to standard output: No space "
                         "left on device\n");
        free(out);
        free(err);
    }
    /* Past a file size limit: EFBIG, not death by SIGXFSZ. The report is
     * several KB; the limit is 512 or 1024 bytes (dash or bash). */
    const char *rep = path_in("report.json");
    char cmd[9000], *out, *err;
    snprintf(cmd, sizeof cmd,
             "sh -c 'ulimit -f 1; exec %s/pn-check --json \"$0\" >\"$1\"' '%s' '%s'", PN_BIN_DIR,
             g_good, rep);
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 1, "rc %d (153 is SIGXFSZ)\n%s", rc, err);
    cr_assert_str_eq(
        err, "pn-check: error: cannot write the report to standard output: File too large\n");
    free(out);
    free(err);
}

/* What the main thread of a process is blocked in: the first field of
 * /proc/PID/syscall (1 = write), its first argument (the fd); false when the
 * kernel does not tell. */
static bool blocked_writing_fd(pid_t pid, int fd, bool *known)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/syscall", (int)pid);
    FILE *f = fopen(path, "r");
    *known = false;
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    if (n == 0)
        return false;
    *known = true;
    long nr = -1;
    unsigned long a0 = 0;
    return sscanf(buf, "%ld 0x%lx", &nr, &a0) == 2 && nr == 1 && a0 == (unsigned long)fd;
}

Test(pn_check, exits_2_naming_a_file_that_shrinks_during_the_check)
{
    /* pn-check's stderr is a pipe filled beforehand, so its first progress
     * line (written before the data pass reads a byte) blocks it: the file
     * is cut while it waits, then the pipe is drained. */
    const char *p = path_in("shrinks.gguf");
    const char *outp = path_in("stdout.txt");
    fx_copy_edit(g_good, p, NULL, NULL);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    cr_assert_eq(fcntl(fds[1], F_SETFL, O_NONBLOCK), 0);
    static const char dots[256] = { [0 ... 255] = '.' };
    size_t filled = 0;
    for (size_t chunk = sizeof dots; chunk > 0; chunk /= 2)
        for (ssize_t k; (k = write(fds[1], dots, chunk)) > 0;)
            filled += (size_t)k;
    cr_assert_eq(fcntl(fds[1], F_SETFL, 0), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int o = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644), in = open("/dev/null", O_RDONLY);
        dup2(in, 0);
        dup2(o, 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        execl(PN_BIN_DIR "/pn-check", "pn-check", "--progress", "--threads", "2", p, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    bool known = true;
    const double t0 = now_s();
    while (!blocked_writing_fd(pid, 2, &known) && known && now_s() - t0 < 30)
        usleep(1000);
    if (!known) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        cr_skip("/proc/PID/syscall is not readable here: cannot tell when pn-check waits");
    }
    cr_assert_lt(now_s() - t0, 30, "pn-check never wrote its first progress line");
    cr_assert_eq(truncate(p, 0), 0);
    size_t cap = filled + 65536, len = 0;
    char *err = malloc(cap + 1);
    for (ssize_t k; (k = read(fds[0], err + len, cap - len)) > 0;)
        len += (size_t)k;
    close(fds[0]);
    err[len] = '\0';
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "pn-check died of signal %d", WTERMSIG(status));
    const char *msg = err + filled;
    cr_assert_eq(WEXITSTATUS(status), 1, "%s", msg);
    char want[4200];
    const char *first_end = strchr(msg, '\n');
    cr_assert(first_end, "%s", msg);
    char *first = strndup(msg, (size_t)(first_end - msg));
    cr_assert(strncmp(first, "checking ", 9) == 0 && strstr(first, "shrinks.gguf ") &&
                  strstr(first, " 0.0%  0 MB/s  ETA ?"),
              "the progress line, nothing checked yet, comes first: %s", msg);
    free(first);
    const char *last = strrchr(msg, '\n');
    while (last > msg && last[-1] != '\n')
        last--;
    snprintf(want, sizeof want, "pn-check: error: tensor ");
    cr_assert(strncmp(last, want, strlen(want)) == 0, "%s", msg);
    cr_assert(strstr(last, p) && strstr(last, "the file changed or shrank during the run"), "%s",
              msg);
    size_t n;
    char *out = tu_read_file(outp, &n);
    cr_assert_eq(n, 0, "no report is printed: %.*s", (int)n, out);
    free(out);
    free(err);
}

/* A GGUF of one tensor of this shape and type, with `data` bytes after the
 * header (a file far shorter than the tensor). */
static const char *one_tensor_file(const char *name, const uint64_t *ne, uint32_t n_dims,
                                   uint32_t type, size_t data)
{
    gb b = { 0 };
    gb_header(&b, 1, 0);
    gb_tensor(&b, "huge", 4, n_dims, ne, type, 0);
    gb_pad(&b, 32);
    uint8_t *zero = calloc(1, data ? data : 1);
    gb_put(&b, zero, data);
    free(zero);
    const char *p = path_in(name);
    gb_save(&b, p);
    return p;
}

Test(pn_check, reports_a_shape_of_more_than_2_63_weights_without_overflowing)
{
    /* Fewer bytes than weights: the byte size fits 64 bits, the weight count
     * does not fit int64 (the sanitizer build runs this test too). */
    static const struct {
        uint32_t type;
        uint64_t ne[4];
        uint32_t n_dims;
    } cases[] = {
        { PN_TYPE_Q4_K, { 256, 1ull << 55 }, 2 }, /* 2^63 weights, 1.3 * 2^62 bytes */
        { PN_TYPE_Q3_K, { 256, 1ull << 20, 1ull << 20, 1ull << 15 }, 4 },
        { PN_TYPE_PN3T, { 80, 1ull << 58, 1 }, 3 },        /* 2.5 * 2^63 weights */
        { 24 /* i8 */, { 1ull << 32, 1ull << 30, 3 }, 3 }, /* 1.5 * 2^63 bytes and weights */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *p =
            one_tensor_file("huge.gguf", cases[k].ne, cases[k].n_dims, cases[k].type, 64);
        char *out, *err;
        int rc = check_cli(&out, &err, "'%s'", p);
        cr_assert_eq(rc, 1, "case %zu: rc %d\n%s%s", k, rc, out, err);
        cr_assert(has_finding(out, "error", "GGUF-TENSOR-TOO-LARGE", "tensor huge "), "%zu: %s", k,
                  out);
        cr_assert(strstr(out, "more than 2^63 - 1 weights"), "%s", out);
        cr_assert(has_finding(out, "error", "GGUF-TENSOR-PAST-EOF", "tensor huge "), "%s", out);
        cr_assert_str_empty(err);
        free(out);
        free(err);
        rc = check_cli(&out, &err, "--json --recipe '%s' '%s'", g_recipe, p);
        cr_assert_eq(rc, 1, "case %zu --json --recipe: rc %d\n%s%s", k, rc, out, err);
        cr_assert(strstr(out, "\"code\": \"GGUF-TENSOR-TOO-LARGE\", \"tensor\": \"huge\""), "%s",
                  out);
        free(out);
        free(err);
    }
}

Test(pn_check, refuses_a_fifo_as_file_source_or_recipe_at_once)
{
    const char *fifo = path_in("fifo");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    static const char *const forms[] = { "'%s'", "--source '%s' '%s'", "--recipe '%s' '%s'" };
    for (int k = 0; k < 3; k++) {
        char args[9000];
        snprintf(args, sizeof args, forms[k], fifo, g_good);
        char *out, *err;
        /* a hang would be killed by timeout (status 124) */
        char cmd[9500];
        snprintf(cmd, sizeof cmd, "timeout 20 %s/pn-check %s", PN_BIN_DIR, args);
        int rc = tu_run(cmd, &out, &err);
        cr_assert_eq(rc, 1, "%s: rc %d\n%s%s", args, rc, out, err);
        cr_assert(strstr(k == 0 ? out : err, fifo) && strstr(k == 0 ? out : err, "FIFO"),
                  "%s: %s%s", args, out, err);
        if (k == 0)
            cr_assert(has_finding(out, "error", "GGUF-IO", NULL), "%s", out);
        else
            cr_assert_str_empty(out);
        free(out);
        free(err);
    }
}

Test(pn_check, checks_300k_promoted_names_in_linear_time)
{
    /* One pn4t tensor, named 300000 times in pn.mix.promoted. */
    enum { N = 300000 };
    gb b = { 0 };
    gb_header(&b, 1, 2);
    gb_kv_str(&b, "pn.mix", 6, "T0+300000", 9);
    gb_kv_str_array(&b, "pn.mix.promoted", N);
    for (int i = 0; i < N; i++)
        gb_str(&b, "w", 1);
    gb_tensor(&b, "w", 1, 1, (const uint64_t[]){ 320 }, PN_TYPE_PN4T, 0);
    gb_pad(&b, 32);
    uint8_t block[PN_BLOCK_BYTES] = { 0x00, 0x3c };
    for (int i = 0; i < 5; i++)
        gb_put(&b, block, sizeof block);
    const char *p = path_in("promoted300k.gguf");
    gb_save(&b, p);
    const char *recipe = path_in("w.mix");
    static const char text[] = "mix T0\nrotation none\nrule w => pn3t\n";
    cr_assert_eq(tu_write_file(recipe, text, strlen(text)), 0);

    char *out, *err;
    double t0 = now_s();
    int rc = check_cli(&out, &err, "--recipe '%s' '%s'", recipe, p);
    double dt = now_s() - t0;
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert_lt(dt, 20, "%.1f s", dt);
    cr_log_info("pn-check, 300k promoted names: %.2f s", dt);
    cr_assert_eq(count_lines_starting(out, "error "), 1, "%s", out);
    cr_assert(has_finding(out, "error", "PN-META-VALUE", "tensor w key pn.mix.promoted"), "%s",
              out);
    cr_assert(strstr(out, "names tensor 'w' 300000 times (first at entry 0), not once"), "%s", out);
    cr_assert(strstr(out, "recipe: mix T0, 1 promotion"), "%s", out);
    cr_assert_null(strstr(out, "RECIPE-PROMOTION"), "w is listed: %s", out);
    free(out);
    free(err);
}

Test(pn_check, checks_20k_tensors_overlapping_one_range_reading_it_once)
{
    enum { N = 20000 };
    const uint64_t K = 1u << 19; /* 2 MiB of f32 */
    gb b = { 0 };
    gb_header(&b, N, 0);
    for (int i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "t.%05d", i);
        gb_tensor(&b, name, strlen(name), 1, &K, PN_TYPE_F32, 0);
    }
    gb_pad(&b, 32);
    float *data = calloc(K, sizeof *data);
    gb_put(&b, data, K * sizeof *data);
    free(data);
    const char *p = path_in("overlap20k.gguf");
    gb_save(&b, p);

    char *out, *err;
    double t0 = now_s();
    int rc = check_cli(&out, &err, "'%s'", p);
    double dt = now_s() - t0;
    cr_assert_eq(rc, 1, "%.2000s%s", out, err);
    cr_assert_lt(dt, 20, "%.1f s", dt);
    cr_log_info("pn-check, 20k overlapping tensors: %.2f s", dt);
    cr_assert(strstr(out, " 2097152 data bytes read in "), "the range is read once: %.300s", out);
    cr_assert_eq(count_lines_starting(out, "error   GGUF-TENSOR-OVERLAP tensor t."), N - 1);
    cr_assert_eq(count_lines_starting(out, "error "), N - 1);
    cr_assert(strstr(out, "error   GGUF-TENSOR-OVERLAP tensor t.19999 byte "), "%.300s", out);
    cr_assert(strstr(out, "overlap tensor 't.00000' at [") &&
                  strstr(out, "and 19998 other earlier tensors"),
              "%.300s", out);
    free(out);
    free(err);
}

/* A PN file of one pn4t tensor "w" (K 320) with pn.mix = mix and
 * pn.mix.promoted = ["w"]. */
static const char *mix_file(const char *name, const char *mix)
{
    gb b = { 0 };
    gb_header(&b, 1, 2);
    gb_kv_str(&b, "pn.mix", 6, mix, strlen(mix));
    gb_kv_str_array(&b, "pn.mix.promoted", 1);
    gb_str(&b, "w", 1);
    gb_tensor(&b, "w", 1, 1, (const uint64_t[]){ 320 }, PN_TYPE_PN4T, 0);
    gb_pad(&b, 32);
    uint8_t block[PN_BLOCK_BYTES] = { 0x00, 0x3c };
    for (int i = 0; i < 5; i++)
        gb_put(&b, block, sizeof block);
    const char *p = path_in(name);
    gb_save(&b, p);
    return p;
}

Test(pn_check, compares_a_mix_count_of_any_length_exactly)
{
    static const struct {
        const char *mix;
        bool mismatch;
    } cases[] = {
        { "T0+1", false },
        { "T0+00000000001", false },         /* 11 digits, the number 1 */
        { "T0+99999999999999999999", true }, /* 20 digits */
        { "T0+18446744073709551617", true }, /* 2^64 + 1: 1 if it wrapped */
        { "T0+2", true },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char *out, *err;
        int rc = check_cli(&out, &err, "'%s'", mix_file("mix.gguf", cases[k].mix));
        bool found = has_finding(out, "error", "PN-META-VALUE", "key pn.mix:");
        cr_assert_eq(found, cases[k].mismatch, "%s:\n%s", cases[k].mix, out);
        cr_assert_eq(rc, cases[k].mismatch ? 1 : 0, "%s: rc %d\n%s", cases[k].mix, rc, out);
        if (found) {
            char want[128];
            snprintf(want, sizeof want, "says %s promotions but pn.mix.promoted lists 1",
                     cases[k].mix + 3);
            cr_assert(strstr(out, want), "%s", out);
        }
        free(out);
        free(err);
    }
}

Test(pn_check, refuses_a_source_that_is_not_a_float_model)
{
    char *out, *err;
    int rc = check_cli(&out, &err, "--source '%s' '%s'", g_good, g_good);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert_str_empty(out);
    char want[4300];
    snprintf(want, sizeof want,
             "pn-check: error: source %s: not a float model: tensor 'token_embd.weight' is q3_K (a "
             "source holds only f32, f16 and bf16 tensors)\n",
             g_good);
    cr_assert_str_eq(err, want);
    free(out);
    free(err);
}

/* A file whose only key is `key` (len bytes), a string. */
static const char *key_file(const char *name, const char *key, size_t len)
{
    gb b = { 0 };
    gb_header(&b, 0, 1);
    gb_kv_str(&b, key, len, "v", 1);
    const char *p = path_in(name);
    gb_save(&b, p);
    return p;
}

Test(pn_check, reports_an_empty_key_or_one_holding_a_nul_as_malformed_at_its_offset)
{
    const char *files[] = { key_file("empty-key.gguf", "", 0),
                            key_file("nul-key.gguf", "a\0b", 3) };
    for (int k = 0; k < 2; k++) {
        char *out, *err;
        int rc = check_cli(&out, &err, "'%s'", files[k]);
        cr_assert_eq(rc, 1, "%s%s", out, err);
        /* the key starts right after the 24-byte header */
        cr_assert(has_finding(out, "error", "GGUF-MALFORMED", "byte 24: "), "%s", out);
        cr_assert(strstr(out, k == 0 ? "has an empty key" : "holds a NUL byte"), "%s", out);
        cr_assert_str_eq(last_line(out), "invalid (1 error, 0 warnings)");
        free(out);
        free(err);
    }
}

/* Byte offset of field `at` of block b of row r of tensor t of the good file. */
static uint64_t stock_block_at(int t, int64_t row, int64_t block, int at)
{
    uint64_t base = fx_data_offset(g_good, fx_specs[t].name, NULL);
    const pn_type_traits *tt = pn_type_traits_get(fx_specs[t].type);
    int64_t rb = pn_type_row_bytes(fx_specs[t].type, fx_specs[t].K);
    return base + (uint64_t)(row * rb + block * tt->block_bytes + at);
}

static void set_bits(uint8_t *buf, size_t *size, void *arg)
{
    (void)size;
    const check_edit *e = arg;
    for (; e->kind >= 0; e++)
        for (int i = 0; i < e->kind; i++)
            buf[e->at + i] = (uint8_t)(e->value >> (8 * i));
}

Test(pn_check, reports_non_finite_scales_and_weights_of_every_type)
{
    /* Each damage, the byte its finding points at (the block, or the
     * weight), and the line that must name it (%llu: that byte, twice). */
    const struct {
        check_edit e;
        uint64_t at;
        const char *line;
    } cases[] = {
        { { stock_block_at(FX_ALPHA, 1, 3, 0), 2, 0x7e00 },
          stock_block_at(FX_ALPHA, 1, 3, 0),
          "error   TENSOR-NONFINITE-SCALE tensor blk.0.ssm_alpha.weight byte %llu: 1 of 40 q8_0 "
          "blocks have a non-finite scale d (1 NaN, 0 infinite); first: row 1 block 3 (byte %llu, "
          "d 0x7e00)\n" },
        { { stock_block_at(FX_OUTPUT, 2, 0, 2), 2, 0xfc00 },
          stock_block_at(FX_OUTPUT, 2, 0, 0),
          "error   TENSOR-NONFINITE-SCALE tensor output.weight byte %llu: 1 of 4 q4_K blocks have "
          "a "
          "non-finite scale d or dmin (0 NaN, 1 infinite); first: row 2 block 0 (byte %llu, dmin "
          "0xfc00)\n" },
        { { stock_block_at(FX_EMBD, 4, 0, 108), 2, 0x7c00 },
          stock_block_at(FX_EMBD, 4, 0, 0),
          "error   TENSOR-NONFINITE-SCALE tensor token_embd.weight byte %llu: 1 of 6 q3_K blocks "
          "have a non-finite scale d (0 NaN, 1 infinite); first: row 4 block 0 (byte %llu, d "
          "0x7c00)\n" },
        { { fx_data_offset(g_good, fx_specs[FX_NORM].name, NULL) + 17 * 4, 4, 0x7fc00000 },
          fx_data_offset(g_good, fx_specs[FX_NORM].name, NULL) + 17 * 4,
          "error   TENSOR-NONFINITE-WEIGHT tensor blk.0.attn_norm.weight byte %llu: 1 of 320 f32 "
          "weights are not finite (1 NaN, 0 infinite); first: row 0 column 17 (byte %llu, "
          "0x7fc00000)\n" },
    };
    enum { N = sizeof cases / sizeof cases[0] };
    check_edit edits[N + 1];
    for (int k = 0; k < N; k++)
        edits[k] = cases[k].e;
    edits[N] = (check_edit){ 0, -1, 0 };
    const char *p = path_in("nonfinite.gguf");
    fx_copy_edit(g_good, p, set_bits, edits);
    fx_fix_crcs(p);
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert_eq(count_lines_starting(out, "error "), N, "%s", out);
    for (int k = 0; k < N; k++) {
        char want[512];
        snprintf(want, sizeof want, cases[k].line, (unsigned long long)cases[k].at,
                 (unsigned long long)cases[k].at);
        cr_assert(strstr(out, want), "%s\nnot in\n%s", want, out);
    }
    free(out);
    free(err);

    rc = check_cli(&out, &err, "--json '%s'", p);
    cr_assert_eq(rc, 1);
    cr_assert(
        strstr(out,
               "\"code\": \"TENSOR-NONFINITE-WEIGHT\", \"tensor\": \"blk.0.attn_norm.weight\""),
        "%s", out);
    cr_assert(strstr(out, "\"row\": 0, \"block\": 17, \"count\": 1"), "%s", out);
    cr_assert(strstr(out, "\"row\": 1, \"block\": 3, \"count\": 1"), "%s", out);
    free(out);
    free(err);
}

Test(pn_check, reports_non_finite_f16_and_bf16_weights_with_their_row_and_column)
{
    static const struct {
        int type;
        uint16_t bits;
        const char *name, *says;
    } cases[] = {
        { PN_TYPE_F16, 0x7e00, "f16", "(1 NaN, 0 infinite); first: row 2 column 7" },
        { PN_TYPE_F16, 0xfc00, "f16", "(0 NaN, 1 infinite); first: row 2 column 7" },
        { PN_TYPE_BF16, 0x7fc1, "bf16", "(1 NaN, 0 infinite); first: row 2 column 7" },
        { PN_TYPE_BF16, 0x7f80, "bf16", "(0 NaN, 1 infinite); first: row 2 column 7" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        fx_pn_opts o = { .tensor = "blk.0.ssm_alpha.weight", .store_type = cases[k].type };
        const char *p = made_with("float.gguf", &o);
        check_edit e[] = { { fx_data_offset(p, "blk.0.ssm_alpha.weight", NULL) + (2 * 320 + 7) * 2,
                             2, cases[k].bits },
                           { 0, -1, 0 } };
        fx_copy_edit(p, p, set_bits, e);
        fx_fix_crcs(p);
        char *out, *err;
        int rc = check_cli(&out, &err, "'%s'", p);
        cr_assert_eq(rc, 1, "%s%s", out, err);
        cr_assert_eq(count_lines_starting(out, "error "), 1, "%s", out);
        cr_assert(
            has_finding(out, "error", "TENSOR-NONFINITE-WEIGHT", "tensor blk.0.ssm_alpha.weight"),
            "%s", out);
        char want[256];
        snprintf(want, sizeof want, "1 of 1280 %s weights are not finite %s (byte %llu, 0x%04x)",
                 cases[k].name, cases[k].says, (unsigned long long)e[0].at, cases[k].bits);
        cr_assert(strstr(out, want), "%s\nnot in\n%s", want, out);
        free(out);
        free(err);
    }
}

/* ---- output a terminal or a parser can trust ---- */

/* Text a terminal shows as it is: printable ASCII, newlines ending lines,
 * and valid UTF-8 of U+00A0 and above; no other control or invalid byte. */
static void expect_terminal_safe(const char *text)
{
    const unsigned char *u = (const unsigned char *)text;
    size_t n = strlen(text);
    for (size_t i = 0; i < n;) {
        size_t len = check_utf8_len(u + i, n - i);
        cr_assert(len > 0, "invalid UTF-8 at byte %zu: %s", i, text);
        if (len == 1)
            cr_assert(u[i] == '\n' || (u[i] >= 0x20 && u[i] < 0x7f), "raw byte 0x%02x at %zu: %s",
                      u[i], i, text);
        else if (len == 2)
            cr_assert(!(u[i] == 0xc2 && u[i + 1] < 0xa0), "a C1 control at %zu", i);
        i += len;
    }
}

/* ESC ] 0 ; x BEL (retitles), ESC [ 2 J (clears), a newline (forges a line),
 * a lone 0xff and a lone 0xc3 (invalid UTF-8). */
#define HOSTILE "x\x1b]0;x\x07\x1b[2J\ny\xff\xc3z"
#define HOSTILE_TEXT "x\\x1b]0;x\\x07\\x1b[2J\\x0ay\\xff\\xc3z"
#define HOSTILE_JSON "\"x\\u001b]0;x\\u0007\\u001b[2J\\u000ay\\\\xff\\\\xc3z\""

/* A PN-ish file where the hostile name is a tensor (f32, listed as promoted:
 * a finding names it), an absent promoted name and part of a key. */
static const char *hostile_file(void)
{
    gb b = { 0 };
    gb_header(&b, 1, 3);
    gb_kv_str(&b, "pn.mix", 6, "T0+2", 4);
    gb_kv_str_array(&b, "pn.mix.promoted", 2);
    gb_str(&b, HOSTILE, strlen(HOSTILE));
    gb_str(&b, HOSTILE "2", strlen(HOSTILE) + 1);
    gb_kv_str(&b, "pn." HOSTILE, strlen(HOSTILE) + 3, HOSTILE, strlen(HOSTILE));
    gb_tensor(&b, HOSTILE, strlen(HOSTILE), 1, (const uint64_t[]){ 8 }, PN_TYPE_F32, 0);
    gb_pad(&b, 32);
    float w[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    gb_put(&b, w, sizeof w);
    const char *p = path_in("hostile.gguf");
    gb_save(&b, p);
    return p;
}

Test(pn_check, prints_hostile_names_safely_in_text)
{
    const char *p = hostile_file();
    char *out, *err;
    int rc = check_cli(&out, &err, "--recipe '%s' '%s'", g_recipe, p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    expect_terminal_safe(out);
    cr_assert_str_empty(err);
    /* every line is a finding, the first line or the last: the newline in
     * the name started none */
    int lines = count_lines_starting(out, "error ") + count_lines_starting(out, "warning ");
    int all = 0;
    for (const char *q = out; *q; q++)
        all += *q == '\n';
    /* + the first line, the recipe line, the header line, the verdict */
    cr_assert_eq(all, lines + 4, "%s", out);
    cr_assert(strstr(out, "error   PN-META-VALUE tensor " HOSTILE_TEXT " key pn.mix.promoted: "
                          "pn.mix.promoted names tensor '" HOSTILE_TEXT "', whose type is f32"),
              "%s", out);
    cr_assert(strstr(out, "names tensor '" HOSTILE_TEXT "2', which the file does not hold"), "%s",
              out);
    cr_assert(strstr(out, "warning PN-META-UNKNOWN key pn." HOSTILE_TEXT ": "), "%s", out);
    cr_assert(strstr(out, "warning RECIPE-UNMATCHED tensor " HOSTILE_TEXT ": "), "%s", out);
    free(out);
    free(err);
    /* the table of --source (the file is its own float source here) */
    rc = check_cli(&out, &err, "--source '%s' '%s'", p, p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    expect_terminal_safe(out);
    cr_assert(strstr(out, "\n  " HOSTILE_TEXT " "), "%s", out);
    free(out);
    free(err);
}

Test(pn_check, prints_hostile_names_as_valid_json)
{
    const char *p = hostile_file();
    char *out, *err;
    int rc = check_cli(&out, &err, "--json --source '%s' '%s'", p, p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(check_is_json(out), "not JSON:\n%s", out);
    cr_assert(strstr(out, "\"tensor\": " HOSTILE_JSON ", \"key\": \"pn.mix.promoted\""), "%s", out);
    cr_assert(strstr(out, "{\"name\": " HOSTILE_JSON ", \"type\": \"f32\""), "%s", out);
    const char *jpath = path_in("hostile.json");
    cr_assert_eq(tu_write_file(jpath, out, strlen(out)), 0);
    free(out);
    free(err);
    if (system("node --version >/dev/null 2>&1") != 0)
        cr_skip("node is not installed: only the C JSON reader checked the output");
    char cmd[4600];
    snprintf(cmd, sizeof cmd,
             "node -e 'const r = JSON.parse(require(\"fs\").readFileSync(0));"
             "const want = \"x\\u001b]0;x\\u0007\\u001b[2J\\ny\\\\xff\\\\xc3z\";"
             "if (r.tensors[0].name !== want || !r.findings.some(f => f.tensor === want))"
             " process.exit(3); console.log(r.findings.length)' < '%s'",
             jpath);
    rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "node: %s%s", out, err);
    free(out);
    free(err);
}
