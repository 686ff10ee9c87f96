/* the source identity (pn.source.*), the measurement that
 * checks what it measured, pn-quantize --reuse / --reuse-verify, and
 * pn-check --source on the recorded identity (docs/reuse.md).
 * Models: pn-synth shapes at width scale 16 (K = 320), 2 layers, 512 tokens
 * (token_embd and output have 512 rows, so odd rows are not sampled).
 *
 * Here the tests that run the built programs; those that call the library
 * are in tests/pipeline/test_reuse.c. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "gguf/header_hash.h"
#include "mix/measurement.h"
#include "check/check.h"
#include "check/check_testing.h"
#include "common/outfile_testing.h"
#include "pipeline/quantize.h"
#include "pipeline/quantize_testing.h"
#include "io/source_id.h"
#include "io/source_id_testing.h"
#include "synth/synth.h"
#include "quant/types.h"
#include "fixtures/reuse_run.h"
#include "fixtures/scratch.h"
#include "test_util.h"

/* ---- the program ----------------------------------------------------------- */

static int run_cli(const char *prog, const char *args, char **out, char **err)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s/%s %s", PN_BIN_DIR, prog, args);
    return tu_run(cmd, out, err);
}

Test(reuse_cli, the_summary_and_the_report_say_what_was_copied_and_what_was_quantized,
     .init = setup, .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 22), *m = path_in("m.txt");
    char *prev = reuse_make_prev(src, "prev.gguf", m), *dst = path_in("dst.gguf"),
         *rep = path_in("r.json");
    char args[8192], *out, *err;
    snprintf(args, sizeof args,
             "--recipe %s --promote 3 --measurement %s --reuse %s --report %s %s %s",
             FALLBACK_RECIPE, m, prev, rep, src, dst);
    cr_assert_eq(run_cli("pn-quantize", args, &out, &err), 0, "%s", err);
    gguf_reader *r;
    pn_error e;
    cr_assert_eq(gguf_reader_open(dst, &r, &e), PN_OK);
    size_t n = gguf_reader_n_tensors(r);
    gguf_reader_close(r);
    char want[512];
    snprintf(want, sizeof want, "reuse %s: copied %zu of %zu tensors, ", prev, n - 1, n);
    cr_assert(strstr(out, want), "'%s' should say '%s'", out, want);
    cr_assert(strstr(out, "; quantized 1: blk."), "%s", out);
    cr_assert(strstr(out, "reuse seconds: sampled rows"), "%s", out);
    size_t len;
    char *json = tu_read_file(rep, &len);
    json = realloc(json, len + 1);
    json[len] = 0;
    snprintf(want, sizeof want, "\"reuse\": {\"from\": \"%s\", \"tensors\": %zu, \"bytes\": ", prev,
             n - 1);
    cr_assert(strstr(json, want), "%s", json);
    cr_assert(strstr(json, "\"because\": \"its type differs from PREV's\""), "%s", json);
    cr_assert(strstr(json, "\"reused\": true") && strstr(json, "\"reused\": false"), "%s", json);
    free(json);
    free(out);
    free(err);

    /* --dry-run says what would be copied */
    snprintf(args, sizeof args, "--dry-run --recipe %s --promote 4 --measurement %s --reuse %s %s",
             FALLBACK_RECIPE, m, prev, src);
    cr_assert_eq(run_cli("pn-quantize", args, &out, &err), 0, "%s", err);
    snprintf(want, sizeof want, "reuse %s: would copy %zu of %zu tensors", prev, n - 2, n);
    cr_assert(strstr(out, want), "%s", out);
    cr_assert(strstr(out, "from PREV"), "the plan table marks the copied tensors: %s", out);
    free(out);
    free(err);
    free(src);
    free(m);
    free(prev);
    free(dst);
    free(rep);
}

Test(reuse_cli, a_prev_that_cannot_be_one_exits_1_and_writes_nothing, .init = setup,
     .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 23), *dst = path_in("dst.gguf"), *fifo = path_in("fifo");
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    char args[8192], *out, *err;
    snprintf(args, sizeof args, "--quiet --recipe %s --reuse %s %s %s", FALLBACK_RECIPE, src, src,
             dst);
    cr_assert_eq(run_cli("pn-quantize", args, &out, &err), 1);
    cr_assert(strstr(err, "not a PN file") && strstr(err, "nothing was written to"), "%s", err);
    free(out);
    free(err);
    snprintf(args, sizeof args, "--quiet --recipe %s --reuse %s %s %s", FALLBACK_RECIPE, fifo, src,
             dst);
    cr_assert_eq(run_cli("pn-quantize", args, &out, &err), 1);
    cr_assert(strstr(err, "the --reuse file is a FIFO"), "%s", err);
    free(out);
    free(err);
    snprintf(args, sizeof args, "--quiet --reuse-verify %s %s", src, dst);
    cr_assert_eq(run_cli("pn-quantize", args, &out, &err), 2);
    cr_assert(strstr(err, "--reuse-verify needs --reuse"), "%s", err);
    free(out);
    free(err);
    snprintf(args, sizeof args, "--quiet --reuse %s --report %s %s %s", src, src, src, dst);
    cr_assert_eq(run_cli("pn-quantize", args, &out, &err), 2);
    cr_assert(strstr(err, "that is the source"), "%s", err);
    free(out);
    free(err);
    cr_assert(!exists(dst));
    free(src);
    free(dst);
    free(fifo);
}

/* ---- pn-check --source ------------------------------------------------------ */

static pn_check_report *check_with_source(const char *file, const char *src)
{
    pn_check_options co;
    pn_check_options_default(&co);
    co.source_path = src;
    co.threads = 2;
    pn_check_report *rep = NULL;
    pn_error err;
    cr_assert_eq(pn_check_file(file, &co, &rep, &err), PN_OK, "%s", err.msg);
    return rep;
}

Test(reuse_check, pn_check_source_names_the_first_tensor_of_a_source_the_file_was_not_made_from,
     .init = setup, .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 24), *dst = path_in("dst.gguf");
    pn_quantize_opts o;
    reuse_opts_for(&o, src, dst, NULL);
    reuse_run_ok(&o, NULL);
    pn_check_report *rep = check_with_source(dst, src);
    cr_assert_eq(rep->n_errors, 0, "%s", rep->n_findings ? rep->findings[0].message : "");
    cr_assert_eq(rep->n_warnings, 0, "the pn.source.* keys are known: %s",
                 rep->n_findings ? rep->findings[0].message : "");
    pn_check_report_free(rep);

    char *changed = reuse_copy_file(src, "changed.gguf");
    reuse_nudge_weight(changed, "blk.0.attn_gate.weight", 0, 1);
    reuse_nudge_weight(changed, "output.weight", 4, 0);
    rep = check_with_source(dst, changed);
    const pn_finding *f = pn_check_find(rep, "SRC-IDENTITY", NULL);
    cr_assert_not_null(f, "no SRC-IDENTITY finding");
    cr_assert_eq(f->severity, PN_SEV_ERROR);
    cr_assert_str_eq(f->tensor, "blk.0.attn_gate.weight", "the first in file order");
    cr_assert_eq(f->count, 2);
    cr_assert(strstr(f->message, "is not the source this file was made from: 2 of") &&
                  strstr(f->message, "the CRC-32 of its 256 sampled rows is"),
              "%s", f->message);
    cr_assert_null(pn_check_find(rep, "SRC-HEADER", NULL), "the header is the same");
    cr_assert_eq(pn_check_exit_code(rep, false), 1);
    pn_check_report_free(rep);

    /* the CLI says it */
    char args[8192], *out, *err;
    snprintf(args, sizeof args, "--source %s %s", changed, dst);
    cr_assert_eq(run_cli("pn-check", args, &out, &err), 1, "%s%s", out, err);
    cr_assert(strstr(out, "SRC-IDENTITY") && strstr(out, "blk.0.attn_gate.weight"), "%s", out);
    free(out);
    free(err);
    free(src);
    free(dst);
    free(changed);
}
