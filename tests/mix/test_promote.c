/* Promotion by measurement (mix/promote.h): candidates ordered by gain with
 * ties to the earlier tensor, and a measurement of another plan refused. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

Test(promote, candidates_are_ordered_by_gain_with_ties_to_the_earlier_tensor)
{
    pn_plan *p = mix_candidates_plan(6, 4);
    /* gains: 0.5, 0.25, 0.5, 0.75, 0.25, 0.5 (exact in binary, so ties are real) */
    double e3[6] = { 1.0, 0.5, 0.75, 1.0, 0.375, 0.625 };
    double e4[6] = { 0.5, 0.25, 0.25, 0.25, 0.125, 0.125 };
    pn_measurement *m = mix_measurement_for(p, e3, e4);
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
    pn_plan *p = mix_candidates_plan(3, 2), *q = mix_candidates_plan(4, 2);
    double e[4] = { 0 };
    pn_measurement *m = mix_measurement_for(q, e, e);
    size_t order[4];
    pn_error err = { 0 };
    cr_assert_eq(pn_promotion_order(p, m, order, &err), PN_ERR_MISMATCH);
    cr_assert_not_null(strstr(err.msg, "c.3"), "%s", err.msg);
    pn_measurement_free(m);
    m = mix_measurement_for(p, e, e);
    cr_assert_eq(pn_promotion_order(q, m, order, &err), PN_ERR_MISMATCH);
    cr_assert_not_null(strstr(err.msg, "no measurement for candidate 'c.3'"), "%s", err.msg);
    pn_measurement_free(m);
    pn_plan_free(p);
    pn_plan_free(q);
}
