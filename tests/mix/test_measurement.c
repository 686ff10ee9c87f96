/* The promotion measurement (mix/measurement.h): the sampled rows as the
 * format states them, errors summed in row order, a measurement saved and
 * reloaded exactly, refused when taken with other parameters, on rows that
 * changed or in an old format, and never left half-written. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures/mix_plan.h"
#include "fixtures/mix_measure.h"
#include "hadamard/hadamard.h"
#include "mix/glob.h"
#include "mix/measurement.h"
#include "mix/measurement_testing.h"
#include "mix/plan.h"
#include "mix/plan_testing.h"
#include "mix/promote.h"
#include "synth/qwen38_shapes.h"
#include "synth/qwen38_shapes_testing.h"
#include "mix/recipe.h"
#include "mix/size.h"
#include "quant/pn.h"
#include "quant/types.h"
#include "test_util.h"

/* ---- measurement ---- */

/* The sample of R rows at most M, as a list, from the one-row rule. */
static int64_t sample_list(int64_t R, int64_t M, int64_t *out)
{
    int64_t n = pn_sample_count(R, M);
    for (int64_t i = 0; i < n; i++)
        out[i] = pn_sample_row(R, M, i);
    return n;
}

Test(measure, sample_rows_are_all_rows_up_to_the_maximum_then_evenly_spaced)
{
    int64_t out[300];
    cr_assert_eq(sample_list(5, 256, out), 5);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(out[i], i);
    cr_assert_eq(sample_list(256, 256, out), 256);
    cr_assert_eq(out[255], 255);
    cr_assert_eq(sample_list(1000, 256, out), 256);
    for (int i = 0; i < 256; i++) {
        cr_assert_eq(out[i], (int64_t)i * 1000 / 256);
        if (i)
            cr_assert_gt(out[i], out[i - 1]);
    }
    cr_assert_eq(out[0], 0);
    cr_assert_eq(out[255], 996);
    cr_assert_eq(sample_list(248320, 256, out), 256);
    cr_assert_eq(out[1], 970);
    cr_assert_eq(out[255], 255 * 970);
    /* no overflow where i * R would not fit in 64 bits */
    int64_t big = INT64_MAX / 3;
    cr_assert_eq(sample_list(big, 256, out), 256);
    __extension__ typedef __int128 i128;
    for (int i = 0; i < 256; i++)
        cr_assert_eq(out[i], (int64_t)((i128)i * big / 256));
    cr_assert_eq(sample_list(0, 256, out), 0);
    cr_assert_eq(sample_list(10, 0, out), 0);
}

Test(measure, the_sample_rule_matches_the_formats_statement_for_every_row_count)
{
    const int64_t R[] = { 1, 5, 255, 256, 257, 1000, 248320, 17408 };
    const int64_t M[] = { 1, 3, 256, 1000 };
    int64_t want[1000];
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++)
        for (size_t j = 0; j < sizeof M / sizeof M[0]; j++) {
            int64_t n = tu_sample_rows(R[i], M[j], want);
            cr_assert_eq(pn_sample_count(R[i], M[j]), n);
            for (int64_t k = 0; k < n; k++)
                cr_assert_eq(pn_sample_row(R[i], M[j], k), want[k], "R %lld M %lld i %lld",
                             (long long)R[i], (long long)M[j], (long long)k);
        }
}

static float *gauss_rows(int64_t rows, int64_t K, uint64_t seed, double scale)
{
    float *x = malloc((size_t)(rows * K) * sizeof *x);
    tu_rng rng = { seed };
    for (int64_t i = 0; i < rows * K; i++)
        x[i] = (float)(tu_rng_gauss(&rng) * scale);
    return x;
}

/* The same sums written out plainly with the reference quantizer. */
static void reference_sums(const float *x, int64_t rows, int64_t K, double *n3, double *n4,
                           double *den)
{
    uint8_t *q = malloc((size_t)(K / 64) * 34);
    float *y = malloc((size_t)K * sizeof *y);
    *n3 = *n4 = *den = 0;
    for (int64_t r = 0; r < rows; r++) {
        const float *w = x + r * K;
        double a = 0, b = 0, c = 0;
        cr_assert_eq(pn_quantize_row_ref(PN_TYPE_PN3T, w, K, q, NULL), PN_OK);
        pn_dequantize_row(PN_TYPE_PN3T, q, y, K);
        for (int64_t j = 0; j < K; j++) {
            double e = (double)w[j] - (double)y[j];
            a += e * e;
            c += (double)w[j] * (double)w[j];
        }
        cr_assert_eq(pn_quantize_row_ref(PN_TYPE_PN4T, w, K, q, NULL), PN_OK);
        pn_dequantize_row(PN_TYPE_PN4T, q, y, K);
        for (int64_t j = 0; j < K; j++) {
            double e = (double)w[j] - (double)y[j];
            b += e * e;
        }
        *n3 += a;
        *n4 += b;
        *den += c;
    }
    free(q);
    free(y);
}

Test(measure, measure_rows_sums_the_relative_errors_of_pn3t_and_pn4t_in_row_order)
{
    const int64_t rows = 7, K = 640;
    float *x = gauss_rows(rows, K, 42, 0.02);
    pn_measure_acc one = { 0 }, two = { 0 };
    pn_error err = { 0 };
    cr_assert_eq(pn_measure_rows(&one, x, rows, K, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(one.rows, rows);
    double n3, n4, den;
    reference_sums(x, rows, K, &n3, &n4, &den);
    cr_assert_eq(one.err3, n3, "%.17g vs %.17g", one.err3, n3);
    cr_assert_eq(one.err4, n4);
    cr_assert_eq(one.norm, den);
    /* in two calls: the same bits */
    cr_assert_eq(pn_measure_rows(&two, x, 3, K, &err), PN_OK);
    cr_assert_eq(pn_measure_rows(&two, x + 3 * K, rows - 3, K, &err), PN_OK);
    cr_assert_eq(memcmp(&one, &two, sizeof one), 0);
    double e3, e4;
    pn_measure_acc_result(&one, &e3, &e4);
    cr_assert_eq(e3, n3 / den);
    cr_assert_gt(e3, e4, "3 bits lose more than 4: E3 %g E4 %g", e3, e4);
    cr_assert_gt(e4, 0.0);
    cr_assert_lt(e3, 0.1);
    printf("gaussian rows K=640: E3 = %.6g, E4 = %.6g\n", e3, e4);
    free(x);
}

Test(measure, zero_rows_give_zero_errors_and_bad_input_is_reported)
{
    float z[320] = { 0 };
    pn_measure_acc a = { 0 };
    pn_error err = { 0 };
    cr_assert_eq(pn_measure_rows(&a, z, 1, 320, &err), PN_OK);
    double e3 = 1, e4 = 1;
    pn_measure_acc_result(&a, &e3, &e4);
    cr_assert_eq(e3, 0.0);
    cr_assert_eq(e4, 0.0);
    float bad[640] = { 0 };
    bad[320 + 17] = NAN;
    cr_assert_eq(pn_measure_rows(&a, bad, 2, 320, &err), PN_ERR_NONFINITE);
    cr_assert_not_null(strstr(err.msg, "row 1"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "column 17"), "%s", err.msg);
    cr_assert_eq(pn_measure_rows(&a, z, 1, 160, &err), PN_ERR_USAGE, "K must suit both types");
}

Test(measure, a_saved_measurement_reloads_exactly)
{
    pn_plan *p = mix_candidates_plan(5, 2);
    double e3[5] = { 0.1, 1.0 / 3.0, 4.9406564584124654e-324, 1e300, 0.0 };
    double e4[5] = { 0.05, 2.0 / 7.0, 0.0, 2.2250738585072014e-308, 0.0 };
    pn_measurement *m = mix_measurement_for(p, e3, e4);
    char *dir = tu_mkdtemp();
    char path[4200];
    snprintf(path, sizeof path, "%s/m.txt", dir);
    pn_error err = { 0 };
    cr_assert_eq(pn_measurement_save(m, path, &err), PN_OK, "%s", err.msg);
    pn_measurement *l = NULL;
    int version = 0;
    cr_assert_eq(pn_measurement_load(path, &l, &version, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(version, 2);
    cr_assert_eq(memcmp(&l->params, &m->params, sizeof l->params), 0, "the parameters reload");
    cr_assert_eq(l->n, m->n);
    for (size_t i = 0; i < m->n; i++) {
        cr_assert_str_eq(l->entries[i].name, m->entries[i].name);
        cr_assert_eq(l->entries[i].rows_crc32, m->entries[i].rows_crc32);
        cr_assert_eq(memcmp(&l->entries[i].e3, &m->entries[i].e3, sizeof(double)), 0, "%s E3",
                     m->entries[i].name);
        cr_assert_eq(memcmp(&l->entries[i].e4, &m->entries[i].e4, sizeof(double)), 0, "%s E4",
                     m->entries[i].name);
    }
    size_t o1[5], o2[5];
    cr_assert_eq(pn_promotion_order(p, m, o1, &err), PN_OK);
    cr_assert_eq(pn_promotion_order(p, l, o2, &err), PN_OK);
    cr_assert_eq(memcmp(o1, o2, sizeof o1), 0);
    pn_measurement_free(l);

    size_t size;
    char *text = tu_read_file(path, &size);
    const char *head = "pn-measure\t2\nsource\theader-fnv1a64\t0123456789abcdef\n"
                       "quantizer\tpn-quantize test\nrotation\thadamard\t1024\n"
                       "sample\tevenly-spaced\t256\ncandidates\t5\n"
                       "c.0\t0.10000000000000001\t0.050000000000000003\tfedcba98\n";
    cr_assert_eq(strncmp(text, head, strlen(head)), 0, "%.*s", (int)size, text);
    cr_assert_eq(memcmp(text + size - 4, "end\n", 4), 0);
    free(text);
    pn_measurement_free(m);
    pn_plan_free(p);
    tu_rm_rf(dir);
    free(dir);
}

Test(measure, a_measurement_of_other_parameters_is_refused_naming_what_differs)
{
    pn_plan *p = mix_candidates_plan(3, 1);
    double e[3] = { 0.5, 0.25, 0.125 };
    pn_measurement *m = mix_measurement_for(p, e, e);
    pn_error err = { 0 };
    pn_measure_params want = mix_test_params();
    cr_assert_eq(pn_measurement_check_params(m, "m.txt", &want, p, &err), PN_OK, "%s", err.msg);

    want.source_header_hash ^= 1;
    cr_assert_eq(pn_measurement_check_params(m, "m.txt", &want, p, &err), PN_ERR_MISMATCH);
    cr_assert(strstr(err.msg, "m.txt: measured on another source") &&
                  strstr(err.msg, "0123456789abcdef") && strstr(err.msg, "0123456789abcdee"),
              "%s", err.msg);
    want = mix_test_params();
    snprintf(want.quantizer, sizeof want.quantizer, "pn-quantize 9.9");
    cr_assert_eq(pn_measurement_check_params(m, "m.txt", &want, p, &err), PN_ERR_MISMATCH);
    cr_assert(strstr(err.msg, "another quantizer version") &&
                  strstr(err.msg, "'pn-quantize test'") && strstr(err.msg, "'pn-quantize 9.9'"),
              "%s", err.msg);
    want = mix_test_params();
    want.rotation_cap = 0;
    cr_assert_eq(pn_measurement_check_params(m, "m.txt", &want, p, &err), PN_ERR_MISMATCH);
    cr_assert(strstr(err.msg, "another rotation: hadamard:1024, this run uses none"), "%s",
              err.msg);
    want = mix_test_params();
    want.sample_max_rows = 4;
    cr_assert_eq(pn_measurement_check_params(m, "m.txt", &want, p, &err), PN_ERR_MISMATCH);
    cr_assert(strstr(err.msg, "256 per tensor, this run samples 4 (--measure-rows)"), "%s",
              err.msg);

    /* another candidate set: one more, one less */
    want = mix_test_params();
    pn_plan *more = mix_candidates_plan(4, 1), *fewer = mix_candidates_plan(2, 1);
    cr_assert_eq(pn_measurement_check_params(m, "m.txt", &want, more, &err), PN_ERR_MISMATCH);
    cr_assert(strstr(err.msg, "tensor c.3, a promotion candidate of this run, was not measured"),
              "%s", err.msg);
    cr_assert_eq(pn_measurement_check_params(m, "m.txt", &want, fewer, &err), PN_ERR_MISMATCH);
    cr_assert(strstr(err.msg, "tensor c.2 was measured but is not a promotion candidate"), "%s",
              err.msg);
    pn_plan_free(more);
    pn_plan_free(fewer);
    pn_measurement_free(m);
    pn_plan_free(p);
}

Test(measure, rows_that_changed_since_they_were_measured_are_named)
{
    pn_plan *p = mix_candidates_plan(3, 2);
    double e[3] = { 0.5, 0.25, 0.125 };
    pn_measurement *m = mix_measurement_for(p, e, e);
    uint32_t *crc = calloc(p->n_tensors, sizeof *crc);
    for (size_t i = 0, k = 0; i < p->n_tensors; i++)
        if (p->tensors[i].candidate)
            crc[i] = m->entries[k++].rows_crc32;
    pn_error err = { 0 };
    cr_assert_eq(pn_measurement_check_rows(m, "m.txt", p, crc, &err), PN_OK, "%s", err.msg);
    long c1 = pn_plan_find(p, "c.1");
    crc[c1] ^= 0x10;
    cr_assert_eq(pn_measurement_check_rows(m, "m.txt", p, crc, &err), PN_ERR_MISMATCH);
    char want[128];
    snprintf(want, sizeof want,
             "tensor c.1: its sampled rows are not the ones measured (CRC-32 "
             "%08x when measured, %08x now)",
             m->entries[1].rows_crc32, crc[c1]);
    cr_assert(strstr(err.msg, want), "'%s' should say '%s'", err.msg, want);
    free(crc);
    pn_measurement_free(m);
    pn_plan_free(p);
}

Test(measure, a_measurement_of_format_1_is_refused_with_a_message_to_measure_again)
{
    char *dir = tu_mkdtemp();
    char path[4200];
    snprintf(path, sizeof path, "%s/m.txt", dir);
    const char *v1 = "pn-measure\t1\nsource\tbytes=1 tensors=2 fnv1a64=0\n"
                     "sample\tevenly-spaced\t256\ncandidates\t1\nc.0\t0.5\t0.25\nend\n";
    cr_assert_eq(tu_write_file(path, v1, strlen(v1)), 0);
    pn_measurement *l = (pn_measurement *)0x1;
    int version = -1;
    pn_error err = { 0 };
    cr_assert_eq(pn_measurement_load(path, &l, &version, &err), PN_ERR_VERSION);
    cr_assert_null(l);
    cr_assert_eq(version, 1);
    cr_assert(strstr(err.msg, path) && strstr(err.msg, "format 1") &&
                  strstr(err.msg, "measure again"),
              "%s", err.msg);
    tu_rm_rf(dir);
    free(dir);
}

typedef struct bad_measure {
    char text[160];
    pn_status code;
    char phrase[64];
} bad_measure;

#define MHEAD0 "pn-measure\t2\nsource\theader-fnv1a64\t0123456789abcdef\n"
#define MHEAD1 MHEAD0 "quantizer\tq\nrotation\tnone\n"
#define MHEAD MHEAD1 "sample\tevenly-spaced\t256\n"

ParameterizedTestParameters(measure, a_malformed_measurement_file_is_refused_with_its_line)
{
    static bad_measure cases[] = {
        { "", PN_ERR_FORMAT, ":1: expected 'pn-measure" },
        { "GGUF", PN_ERR_FORMAT, ":1: expected 'pn-measure" },
        { "pn-measure\t3\n", PN_ERR_VERSION, "version 2, found '3'" },
        { "pn-measure\t2\nsauce\tid\n", PN_ERR_FORMAT, ":2: expected 'source" },
        { "pn-measure\t2\nsource\tbytes=1 tensors=1 fnv1a64=0\n", PN_ERR_FORMAT,
          ":2: expected 'source" },
        { "pn-measure\t2\nsource\theader-fnv1a64\t0123\n", PN_ERR_FORMAT, "16 hex digits" },
        { MHEAD0 "quantizer\n", PN_ERR_FORMAT, ":3: expected 'quantizer" },
        { MHEAD0 "quantizer\tq\nrotation\thadamard\n", PN_ERR_FORMAT, ":4: expected 'rotation" },
        { MHEAD0 "quantizer\tq\nrotation\tnone\t5\n", PN_ERR_FORMAT, ":4: expected 'rotation" },
        { MHEAD1 "sample\trandom\t256\n", PN_ERR_FORMAT, "'evenly-spaced', found 'random'" },
        { MHEAD1 "sample\tevenly-spaced\t0\n", PN_ERR_FORMAT, ":5: expected a maximum" },
        { MHEAD "candidates\t-1\n", PN_ERR_FORMAT, ":6: expected 'candidates" },
        { MHEAD "candidates\t99999\nx\t1\t1\t0\n", PN_ERR_FORMAT, ":6: expected 'candidates" },
        { MHEAD "candidates\t2\na\t0.5\t0.25\t00000000\n", PN_ERR_TRUNCATED,
          "expected 2 candidate lines, found 1" },
        { MHEAD "candidates\t1\na\tnan\t0.25\t00000000\nend\n", PN_ERR_FORMAT,
          ":7: tensor 'a': expected two finite" },
        { MHEAD "candidates\t1\na\t-1\t0.25\t00000000\nend\n", PN_ERR_FORMAT,
          "expected two finite errors >= 0" },
        { MHEAD "candidates\t1\na\t0.5x\t0.25\t00000000\nend\n", PN_ERR_FORMAT, "found '0.5x'" },
        { MHEAD "candidates\t1\na\t0.5\t0.25\nend\n", PN_ERR_FORMAT,
          ":7: expected '<tensor name>" },
        { MHEAD "candidates\t1\na\t0.5\t0.25\t0000000g\nend\n", PN_ERR_FORMAT,
          "a CRC-32 of 8 hex digits, found '0000000g'" },
        { MHEAD "candidates\t2\na\t0.5\t0.1\t00000000\na\t0.5\t0.1\t00000000\nend\n", PN_ERR_FORMAT,
          ":8: tensor 'a' is listed twice" },
        { MHEAD "candidates\t1\na\t0.5\t0.1\t00000000\n", PN_ERR_TRUNCATED, "expected 'end'" },
        { MHEAD "candidates\t1\na\t0.5\t0.1\t00000000\nb\t1\t1\t0\n", PN_ERR_FORMAT,
          ":8: expected 'end'" },
        { MHEAD "candidates\t1\na\t0.5\t0.1\t00000000\nend\nmore\n", PN_ERR_FORMAT,
          ":9: expected nothing after 'end'" },
    };
    return cr_make_param_array(bad_measure, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(bad_measure *c, measure, a_malformed_measurement_file_is_refused_with_its_line)
{
    char *dir = tu_mkdtemp();
    char path[4200];
    snprintf(path, sizeof path, "%s/m.txt", dir);
    cr_assert_eq(tu_write_file(path, c->text, strlen(c->text)), 0);
    pn_measurement *m = (pn_measurement *)0x1;
    pn_error err = { 0 };
    pn_status st = pn_measurement_load(path, &m, NULL, &err);
    cr_assert_eq(st, c->code, "got %d (%s), expected %d for:\n%s", st, err.msg, c->code, c->text);
    cr_assert_null(m);
    cr_assert_not_null(strstr(err.msg, c->phrase), "'%s' should say '%s'", err.msg, c->phrase);
    tu_rm_rf(dir);
    free(dir);
}

Test(measure, a_measurement_that_cannot_be_saved_says_why_and_leaves_no_file)
{
    pn_plan *p = mix_candidates_plan(1, 0);
    double e3[1] = { NAN }, e4[1] = { 0 };
    pn_measurement *m = mix_measurement_for(p, e3, e4);
    char *dir = tu_mkdtemp();
    char path[4200];
    snprintf(path, sizeof path, "%s/m.txt", dir);
    pn_error err = { 0 };
    cr_assert_eq(pn_measurement_save(m, path, &err), PN_ERR_USAGE);
    cr_assert_not_null(strstr(err.msg, "c.0"), "%s", err.msg);
    m->entries[0].e3 = 0.5;
    cr_assert_eq(pn_measurement_save(m, "/nonexistent/dir/m.txt", &err), PN_ERR_IO);
    cr_assert_not_null(strstr(err.msg, "/nonexistent/dir/m.txt"), "%s", err.msg);
    cr_assert_eq(strncmp(err.msg, "saving the measurement: ", 24), 0, "%s", err.msg);
    char *out = NULL;
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "ls -A '%s'", dir);
    cr_assert_eq(tu_run(cmd, &out, NULL), 0);
    cr_assert_str_eq(out, "", "no file left behind");
    free(out);
    pn_measurement *bad = NULL;
    pn_measure_params mp = mix_test_params();
    snprintf(mp.quantizer, sizeof mp.quantizer, "two\nlines");
    cr_assert_eq(pn_measurement_new(p, &mp, &bad, &err), PN_ERR_USAGE);
    mp = mix_test_params();
    mp.sample_max_rows = 0;
    cr_assert_eq(pn_measurement_new(p, &mp, &bad, &err), PN_ERR_USAGE);
    pn_measurement_free(m);
    pn_plan_free(p);
    tu_rm_rf(dir);
    free(dir);
}
