/* test_check.c - pn-check: a good PN file made in the test, and a corpus of
 * damaged copies, each caught by its own finding with the right exit status. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/check.h"
#include "pn_model_fixture.h"
#include "test_util.h"

static char *g_dir;
static fx_model g_model;
static char g_src[4096], g_good[4096], g_recipe[4096];

static void setup(void)
{
    g_dir = tu_mkdtemp();
    fx_make_model(&g_model);
    snprintf(g_src, sizeof g_src, "%s/source.gguf", g_dir);
    snprintf(g_good, sizeof g_good, "%s/good.gguf", g_dir);
    snprintf(g_recipe, sizeof g_recipe, "%s/t0.mix", g_dir);
    fx_write_source(g_src, &g_model);
    fx_write_pn(g_good, &g_model, NULL);
    cr_assert_eq(tu_write_file(g_recipe, FX_RECIPE, strlen(FX_RECIPE)), 0);
}

static void teardown(void)
{
    fx_free_model(&g_model);
    tu_rm_rf(g_dir);
    free(g_dir);
}

TestSuite(pn_check, .init = setup, .fini = teardown, .timeout = 60);

/* A path in the test folder (static storage, a few at a time). */
static const char *path_in(const char *name)
{
    static char buf[8][4096];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 4096, "%s/%s", g_dir, name);
    return p;
}

static int check_cli(char **out, char **err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int check_cli(char **out, char **err, const char *fmt, ...)
{
    char args[8192], cmd[9000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s/pn-check %s", PN_BIN_DIR, args);
    return tu_run(cmd, out, err);
}

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

typedef struct edit {
    uint64_t at;
    int kind;          /* 0 or-mask u32, 1 set u16, 2 xor byte, 3 truncate, 4 set u64 */
    uint64_t value;
} edit;

static void apply_edit(uint8_t *buf, size_t *size, void *arg)
{
    const edit *e = arg;
    switch (e->kind) {
    case 0: pn_store_u32le(buf + e->at, pn_load_u32le(buf + e->at) | (uint32_t)e->value); break;
    case 1: pn_store_u16le(buf + e->at, (uint16_t)e->value); break;
    case 2: buf[e->at] ^= (uint8_t)e->value; break;
    case 3: *size = (size_t)e->at; break;
    case 4:
        for (int i = 0; i < 8; i++)
            buf[e->at + i] = (uint8_t)(e->value >> (8 * i));
        break;
    }
}

static const char *damaged(const char *name, edit e, bool fix_crcs)
{
    const char *p = path_in(name);
    fx_copy_edit(g_good, p, apply_edit, &e);
    if (fix_crcs)
        fx_fix_crcs(p);
    return p;
}

static const char *made_with(const char *name, const fx_pn_opts *o)
{
    const char *p = path_in(name);
    fx_write_pn(p, &g_model, o);
    return p;
}

/* Byte offset of block b of row r of a PN tensor of the fixture. */
static uint64_t pn_block_at(int t, int64_t row, int64_t block)
{
    uint64_t base = fx_data_offset(g_good, fx_specs[t].name, NULL);
    int64_t rb = pn_type_row_bytes(fx_specs[t].type, fx_specs[t].K);
    return base + (uint64_t)(row * rb + block * PN_BLOCK_BYTES);
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
    int rc = check_cli(&out, &err, "--strict --recipe '%s' --source '%s' '%s'", g_recipe, g_src,
                       g_good);
    cr_assert_eq(rc, 0, "rc %d\n%s%s", rc, out, err);
    cr_assert_str_eq(last_line(out), "valid (0 errors, 0 warnings)");
    cr_assert(strstr(out, "recipe: mix T0, 1 promotion (recipe default 1); expected pn.mix \"T0+1\""),
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
    int rc = check_cli(&out, &err, "--json --recipe '%s' --source '%s' '%s'", g_recipe, g_src,
                       g_good);
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
    const char *p = damaged("nan.gguf", (edit){pn_block_at(FX_FFN_DOWN, 2, 1), 1, 0x7e00}, true);
    char *out, *err;
    int rc = check_cli(&out, &err, "--json '%s'", p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(strstr(out, "\"status\": \"invalid\""), "%s", out);
    cr_assert(strstr(out, "\"code\": \"PN-NONFINITE-SCALE\", \"tensor\": \"blk.0.ffn_down.weight\""),
              "%s", out);
    cr_assert(strstr(out, "\"row\": 2, \"block\": 1, \"count\": 1"), "%s", out);
    free(out);
    free(err);
}

/* ---- errors: exit 1 ---- */

Test(pn_check, reports_a_set_pn3t_reserved_bit_with_its_row_and_block)
{
    /* Bit 15 of word 3 of block 2 of row 1. */
    const char *p = damaged("reserved.gguf", (edit){pn_block_at(FX_ATTN_Q, 1, 2) + 2 + 12, 0, 0x8000}, true);
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "PN-RESERVED-BITS", "tensor blk.0.attn_q.weight"), "%s", out);
    cr_assert(strstr(out, "1 of 64 pn3t blocks have reserved bit 15 or 31"), "%s", out);
    cr_assert(strstr(out, "first: row 1 block 2"), "%s", out);
    cr_assert_eq(count_lines_starting(out, "error "), 1, "only this finding:\n%s", out);
    cr_assert_str_eq(last_line(out), "invalid (1 error, 0 warnings)");
    free(out);
    free(err);
}

Test(pn_check, reports_a_nan_scale)
{
    const char *p = damaged("nan.gguf", (edit){pn_block_at(FX_FFN_DOWN, 2, 1), 1, 0x7e00}, true);
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "PN-NONFINITE-SCALE", "tensor blk.0.ffn_down.weight"), "%s", out);
    cr_assert(strstr(out, "(1 NaN, 0 infinite); first: row 2 block 1"), "%s", out);
    cr_assert_eq(count_lines_starting(out, "error "), 1, "%s", out);
    free(out);
    free(err);
}

Test(pn_check, reports_an_infinite_scale)
{
    const char *p = damaged("inf.gguf", (edit){pn_block_at(FX_ATTN_Q, 0, 0), 1, 0xfc00}, true);
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "PN-NONFINITE-SCALE", "tensor blk.0.attn_q.weight"), "%s", out);
    cr_assert(strstr(out, "(0 NaN, 1 infinite); first: row 0 block 0"), "%s", out);
    cr_assert(strstr(out, "d 0xfc00"), "%s", out);
    free(out);
    free(err);
}

Test(pn_check, reports_a_changed_data_byte_as_a_crc_mismatch_naming_the_tensor)
{
    uint64_t at = fx_data_offset(g_good, "blk.0.ssm_alpha.weight", NULL) + 40;
    const char *p = damaged("crc.gguf", (edit){at, 2, 0x01}, false);
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "PN-CRC-MISMATCH", "tensor blk.0.ssm_alpha.weight"), "%s", out);
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
    const char *p = damaged("overlap.gguf", (edit){info_offset_field(FX_OUTPUT), 4, alpha_rel}, false);
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "GGUF-TENSOR-OVERLAP", "tensor output.weight"), "%s", out);
    cr_assert(has_finding(out, "error", "GGUF-TENSOR-OVERLAP", "'blk.0.ssm_alpha.weight'"), "%s", out);
    free(out);
    free(err);
}

Test(pn_check, names_every_tensor_past_the_end_of_a_file_cut_inside_its_data)
{
    uint64_t cut = fx_data_offset(g_good, "blk.0.attn_q.weight", NULL) + 100;
    const char *p = damaged("cut-data.gguf", (edit){cut, 3, 0}, false);
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
    cr_assert_eq(count_lines_starting(out, "error   GGUF-TENSOR-PAST-EOF"), FX_N - FX_ATTN_Q, "%s", out);
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
    fx_pn_opts o = {.tensor = "blk.0.ffn_down.weight", .element_packing = true};
    expect_source_catch(made_with("packing.gguf", &o), "blk.0.ffn_down.weight");
}

Test(pn_check, source_catches_a_pn_tensor_quantized_without_rotation)
{
    fx_pn_opts o = {.tensor = "blk.0.attn_q.weight", .cap = -1};
    expect_source_catch(made_with("unrotated.gguf", &o), "blk.0.attn_q.weight");
}

Test(pn_check, source_catches_a_pn_tensor_rotated_with_another_block_size)
{
    fx_pn_opts o = {.tensor = "blk.0.attn_q.weight", .cap = 32};
    expect_source_catch(made_with("block32.gguf", &o), "blk.0.attn_q.weight");
}

Test(pn_check, source_catches_a_pn_tensor_holding_the_other_pn_types_bytes)
{
    /* pn4t by its label, pn3t codes inside (the rows do not even line up). */
    fx_pn_opts o = {.tensor = "blk.0.ffn_gate.weight", .swapped = true};
    const char *p = made_with("swapped.gguf", &o);
    char *out, *err;
    int rc = check_cli(&out, &err, "--source '%s' '%s'", g_src, p);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "SRC-ERROR-HIGH", "tensor blk.0.ffn_gate.weight "), "%s", out);
    free(out);
    free(err);
}

/* ---- could not read: exit 2 ---- */

Test(pn_check, cannot_read_a_file_cut_inside_its_header)
{
    const char *p = damaged("cut-header.gguf", (edit){40, 3, 0}, false);
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", p);
    cr_assert_eq(rc, 2, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "GGUF-TRUNCATED-HEADER", NULL), "%s", out);
    cr_assert(strstr(out, " byte "), "the finding carries the offset: %s", out);
    cr_assert_str_eq(last_line(out), "unreadable (1 error, 0 warnings)");
    cr_assert(strstr(err, "pn-check: "), "%s", err);
    free(out);
    free(err);
}

Test(pn_check, cannot_read_a_file_that_is_not_gguf)
{
    const char *p = path_in("text.gguf");
    cr_assert_eq(tu_write_file(p, "hello, this is not a model\n", 27), 0);
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", p);
    cr_assert_eq(rc, 2, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "GGUF-NOT-GGUF", NULL), "%s", out);
    free(out);
    free(err);
}

Test(pn_check, cannot_read_a_missing_file)
{
    char *out, *err;
    int rc = check_cli(&out, &err, "'%s'", path_in("absent.gguf"));
    cr_assert_eq(rc, 2, "%s%s", out, err);
    cr_assert(has_finding(out, "error", "GGUF-IO", NULL), "%s", out);
    cr_assert(strstr(err, "absent.gguf"), "%s", err);
    free(out);
    free(err);
}

Test(pn_check, refuses_bad_usage_with_status_2)
{
    static const char *const cases[] = {
        "", "--bogus x.gguf", "--threads 0 x.gguf", "--threads many x.gguf", "a.gguf b.gguf",
        "--recipe",
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
    cr_assert_eq(rc, 2, "%s%s", out, err);
    cr_assert(strstr(err, "none.mix"), "%s", err);
    free(out);
    free(err);
    rc = check_cli(&out, &err, "--source '%s' '%s'", path_in("none.gguf"), g_good);
    cr_assert_eq(rc, 2, "%s%s", out, err);
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
    fx_pn_opts o = {.omit_format = true};
    expect_warning(made_with("noformat.gguf", &o), "", "PN-META-MISSING", "key pn.format");
}

Test(pn_check, warns_about_missing_crcs)
{
    fx_pn_opts o = {.omit_crc = true};
    expect_warning(made_with("nocrc.gguf", &o), "", "PN-META-MISSING", "key pn.tensor_crc32");
}

Test(pn_check, warns_about_a_type_that_differs_from_the_recipe)
{
    fx_pn_opts o = {.tensor = "blk.0.ssm_alpha.weight", .store_type = PN_TYPE_F16};
    char extra[4200];
    snprintf(extra, sizeof extra, "--recipe '%s'", g_recipe);
    expect_warning(made_with("f16alpha.gguf", &o), extra, "RECIPE-TYPE",
                   "tensor blk.0.ssm_alpha.weight");
}

/* ---- metadata errors ---- */

Test(pn_check, reports_a_pn_key_of_the_wrong_type)
{
    fx_pn_opts o = {.block_size_i32 = true};
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
    static const char *const extra[] = {"blk.0.attn_q.weight", "blk.9.nothing.weight"};
    static const char *const says[] = {"whose type is pn3t, not pn4t", "which the file does not hold"};
    for (int k = 0; k < 2; k++) {
        fx_pn_opts o = {.promoted_extra = extra[k]};
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

/* ---- the library ---- */

static pn_check_report *check_lib(const char *path, int threads, size_t chunk, const char *src)
{
    pn_check_options o;
    pn_check_options_default(&o);
    o.threads = threads;
    o.chunk_bytes = chunk;
    o.source_path = src;
    pn_check_report *r = NULL;
    pn_error err = {0};
    cr_assert_eq(pn_check_file(path, &o, &r, &err), PN_OK, "%s", err.msg);
    return r;
}

static void expect_same_reports(const pn_check_report *a, const pn_check_report *b,
                                bool same_sums)
{
    cr_assert_eq(a->n_findings, b->n_findings);
    for (size_t i = 0; i < a->n_findings; i++) {
        cr_assert_str_eq(a->findings[i].code, b->findings[i].code);
        if (same_sums || strcmp(a->findings[i].code, "SRC-ERROR-HIGH") != 0)
            cr_assert_str_eq(a->findings[i].message, b->findings[i].message);
    }
    for (size_t i = 0; i < a->n_tensors; i++) {
        const pn_check_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        cr_assert(x->crc_computed && y->crc_computed);
        cr_assert_eq(x->crc32, y->crc32, "%s", x->name);
        cr_assert_eq(x->bad_blocks, y->bad_blocks, "%s", x->name);
        if (same_sums)
            cr_assert(x->rel_error == y->rel_error, "%s: %.17g vs %.17g", x->name, x->rel_error,
                      y->rel_error);
        else   /* other work items sum the squares in another grouping */
            cr_assert(fabs(x->rel_error - y->rel_error) <= 1e-12 * x->rel_error, "%s: %.17g vs %.17g",
                      x->name, x->rel_error, y->rel_error);
    }
}

Test(pn_check, gives_the_same_report_for_any_thread_count_and_chunk_size)
{
    const char *p = damaged("reserved2.gguf", (edit){pn_block_at(FX_ATTN_Q, 3, 1) + 30, 0, 0x80000000u}, false);
    pn_check_report *a = check_lib(p, 1, 40, g_src);   /* 40 bytes: one unit per item */
    pn_check_report *b = check_lib(p, 3, 40, g_src);
    pn_check_report *c = check_lib(p, 2, (size_t)8 << 20, g_src);
    cr_assert_not_null(pn_check_find(a, "PN-RESERVED-BITS", "blk.0.attn_q.weight"));
    cr_assert_not_null(pn_check_find(a, "PN-CRC-MISMATCH", "blk.0.attn_q.weight"));
    expect_same_reports(a, b, true);
    expect_same_reports(a, c, false);
    pn_check_report_free(a);
    pn_check_report_free(b);
    pn_check_report_free(c);
}

Test(pn_check, measures_each_tensors_error_against_the_source)
{
    pn_check_report *r = check_lib(g_good, 0, (size_t)8 << 20, g_src);
    cr_assert_eq(r->n_findings, 0);
    /* Bounds for Gaussian-like weights: the measured figures are in the
     * report of this project (pn3t about 3.5%, pn4t about 0.9%). */
    static const struct { int t; double lo, hi; } expect[] = {
        {FX_NORM, 0, 0},           {FX_ATTN_Q, 0.01, 0.08},  {FX_FFN_GATE, 0.002, 0.03},
        {FX_FFN_DOWN, 0.002, 0.03}, {FX_ALPHA, 0, 1e-3},     {FX_OUTPUT, 0, 0.03},
        {FX_EMBD, 0, 0.08},
    };
    for (size_t k = 0; k < sizeof expect / sizeof expect[0]; k++) {
        const pn_check_tensor *t = &r->tensors[expect[k].t];
        cr_assert(t->compared, "%s: %s", t->name, t->note ? t->note : "");
        cr_assert(t->rel_error >= expect[k].lo && t->rel_error <= expect[k].hi, "%s: E = %g",
                  t->name, t->rel_error);
        if (pn_type_is_pn(t->type)) {
            /* The file was made by the reference quantizer: E is E_ref's. */
            cr_assert(t->rel_error < 1.5 * t->expected_error && t->rel_error > 0.5 * t->expected_error,
                      "%s: E %g, E_ref %g", t->name, t->rel_error, t->expected_error);
            cr_assert_eq(t->rotation_block, t->ne[0] == 384 ? 128 : 64);
        }
    }
    pn_check_report_free(r);
}

Test(pn_check, classifies_the_good_file_cut_at_every_length)
{
    size_t n;
    uint8_t *buf = tu_read_file(g_good, &n);
    gguf_reader *r = NULL;
    pn_error e = {0};
    cr_assert_eq(gguf_reader_open(g_good, &r, &e), PN_OK, "%s", e.msg);
    const uint64_t data_off = gguf_reader_data_offset(r);
    uint64_t last_end = 0;
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *ti = gguf_reader_tensor(r, i);
        if (data_off + ti->offset + ti->size > last_end)
            last_end = data_off + ti->offset + ti->size;
    }
    gguf_reader_close(r);
    const char *p = path_in("cut.gguf");
    pn_check_options o;
    pn_check_options_default(&o);
    o.threads = 1;
    for (size_t cut = 0; cut <= n; cut += cut < data_off + 64 ? 1 : 29) {
        cr_assert_eq(tu_write_file(p, buf, cut), 0);
        pn_check_report *rep = NULL;
        cr_assert_eq(pn_check_file(p, &o, &rep, &e), PN_OK, "cut %zu: %s", cut, e.msg);
        int rc = pn_check_exit_code(rep, false);
        cr_assert(rep->n_findings > 0 || rc == 0, "cut %zu: a verdict without a finding", cut);
        if (cut >= last_end)
            cr_assert_eq(rc, 0, "cut %zu (data ends at %llu): %s", cut, (unsigned long long)last_end,
                         rep->n_findings ? rep->findings[0].message : "");
        else if (cut >= data_off)
            cr_assert_eq(rc, 1, "cut %zu inside the data", cut);
        else
            cr_assert(rc == 2 || (rc == 1 && pn_check_find(rep, "GGUF-TRUNCATED-DATA", NULL)),
                      "cut %zu inside the header: rc %d", cut, rc);
        if (rc == 1)
            cr_assert_not_null(pn_check_find(rep, "GGUF-TENSOR-PAST-EOF", NULL), "cut %zu", cut);
        pn_check_report_free(rep);
    }
    free(buf);
}
