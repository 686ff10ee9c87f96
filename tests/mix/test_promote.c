/* Promotion by measurement (mix/promote.h): candidates ordered by gain with
 * ties to the earlier tensor, and a measurement of another plan refused. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- helpers ---- */

static pn_recipe *parse_ok(const char *text)
{
    pn_recipe *r = NULL;
    pn_error err = { 0 };
    pn_status st = pn_recipe_parse(text, strlen(text), "t.mix", &r, &err);
    cr_assert_eq(st, PN_OK, "recipe should parse: %s\n%s", err.msg, text);
    return r;
}

static pn_tensor_desc desc2(const char *name, int64_t ne0, int64_t ne1)
{
    pn_tensor_desc d = { .name = name,
                         .n_dims = ne1 ? 2 : 1,
                         .ne = { ne0, ne1 ? ne1 : 1, 1, 1 },
                         .src_type = PN_TYPE_F32 };
    return d;
}

static pn_plan *build_ok(const pn_recipe *r, const pn_tensor_desc *t, size_t n)
{
    pn_plan *p = NULL;
    pn_error err = { 0 };
    cr_assert_eq(pn_plan_build(r, t, n, &p, NULL, &err), PN_OK, "%s", err.msg);
    return p;
}

#define HEAD "mix A\nrotation hadamard\n"


static pn_plan *candidates_plan(size_t n_cand, size_t n_other)
{
    pn_recipe *r = parse_ok(HEAD "rule c.* => pn3t\nrule * => q8_0\n");
    pn_tensor_desc *d = calloc(n_cand + n_other, sizeof *d);
    char(*names)[32] = calloc(n_cand + n_other, 32);
    size_t k = 0, o = 0;
    for (size_t i = 0; i < n_cand + n_other; i++) {
        /* candidates and others interleaved, so tensor order != candidate order */
        if ((i % 2 == 0 && k < n_cand) || o == n_other)
            snprintf(names[i], 32, "c.%zu", k++);
        else
            snprintf(names[i], 32, "o.%zu", o++);
        d[i] = desc2(names[i], 320, 10 + (int64_t)i);
    }
    pn_plan *p = build_ok(r, d, n_cand + n_other);
    cr_assert_eq(p->n_candidates, n_cand);
    free(d);
    free(names);
    pn_recipe_free(r);
    return p;
}

/* The parameters the measurement tests use. */
static pn_measure_params test_params(void)
{
    pn_measure_params p;
    memset(&p, 0, sizeof p);
    p.source_header_hash = 0x0123456789abcdefull;
    snprintf(p.quantizer, sizeof p.quantizer, "pn-quantize test");
    p.rotation_cap = 1024;
    p.sample_max_rows = 256;
    return p;
}

static pn_measurement *measurement_for(const pn_plan *p, const double *gain3, const double *gain4)
{
    pn_measurement *m = NULL;
    pn_error err = { 0 };
    pn_measure_params mp = test_params();
    cr_assert_eq(pn_measurement_new(p, &mp, &m, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(m->n, p->n_candidates);
    for (size_t i = 0; i < m->n; i++) {
        m->entries[i].e3 = gain3[i];
        m->entries[i].e4 = gain4[i];
        m->entries[i].rows_crc32 = 0xfedcba98u - (uint32_t)i;
    }
    return m;
}

Test(promote, candidates_are_ordered_by_gain_with_ties_to_the_earlier_tensor)
{
    pn_plan *p = candidates_plan(6, 4);
    /* gains: 0.5, 0.25, 0.5, 0.75, 0.25, 0.5 (exact in binary, so ties are real) */
    double e3[6] = { 1.0, 0.5, 0.75, 1.0, 0.375, 0.625 };
    double e4[6] = { 0.5, 0.25, 0.25, 0.25, 0.125, 0.125 };
    pn_measurement *m = measurement_for(p, e3, e4);
    size_t order[6];
    pn_error err = { 0 };
    cr_assert_eq(pn_promotion_order(p, m, order, &err), PN_OK, "%s", err.msg);
    const char *want[6] = { "c.3", "c.0", "c.2", "c.5", "c.1", "c.4" };
    for (int i = 0; i < 6; i++)
        cr_assert_str_eq(p->tensors[order[i]].name, want[i], "position %d", i);
    cr_assert_eq(pn_plan_promote_top(p, m, 4, &err), PN_OK);
    cr_assert_eq(p->n_promoted, 4);
    cr_assert_eq(p->tensors[order[0]].promote_rank, 0);
    cr_assert_eq(p->tensors[order[3]].promote_rank, 3);
    cr_assert(!p->tensors[order[4]].promoted);
    cr_assert_eq(p->tensors[order[2]].type, PN_TYPE_PN4T);
    cr_assert_eq(p->tensors[order[4]].type, PN_TYPE_PN3T);
    cr_assert_eq(pn_plan_promote_top(p, m, 1, &err), PN_OK);
    cr_assert_eq(p->n_promoted, 1, "promote_top replaces the earlier promotions");
    cr_assert_eq(pn_plan_promote_top(p, m, 7, &err), PN_ERR_MISMATCH);
    cr_assert_not_null(strstr(err.msg, "only 6 candidates"), "%s", err.msg);
    cr_assert_eq(pn_plan_promote_top(p, m, 6, &err), PN_OK);
    cr_assert_eq(pn_plan_promote_top(p, m, 0, &err), PN_OK);
    cr_assert_eq(p->n_promoted, 0);
    pn_measurement_free(m);
    pn_plan_free(p);
}

Test(promote, a_measurement_of_another_plan_is_refused)
{
    pn_plan *p = candidates_plan(3, 2), *q = candidates_plan(4, 2);
    double e[4] = { 0 };
    pn_measurement *m = measurement_for(q, e, e);
    size_t order[4];
    pn_error err = { 0 };
    cr_assert_eq(pn_promotion_order(p, m, order, &err), PN_ERR_MISMATCH);
    cr_assert_not_null(strstr(err.msg, "c.3"), "%s", err.msg);
    pn_measurement_free(m);
    m = measurement_for(p, e, e);
    cr_assert_eq(pn_promotion_order(q, m, order, &err), PN_ERR_MISMATCH);
    cr_assert_not_null(strstr(err.msg, "no measurement for candidate 'c.3'"), "%s", err.msg);
    pn_measurement_free(m);
    pn_plan_free(p);
    pn_plan_free(q);
}
