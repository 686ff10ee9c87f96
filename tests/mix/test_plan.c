/* Plans (mix/plan.h): a recipe applied to a model's tensors, every
 * tensor typed or every unmatched one named, data padded to the alignment. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures/mix_plan.h"
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

Test(plan, a_type_whose_block_does_not_divide_k_without_fallback_is_an_error_naming_everything)
{
    pn_recipe *r = mix_parse_ok(MIX_HEAD "rule *_norm.weight => f32\n"
                                         "rule token_embd.weight => q3_K\n");
    pn_tensor_desc d[2] = { mix_desc2("output_norm.weight", 320, 0),
                            mix_desc2("token_embd.weight", 320, 64) };
    pn_plan *p = (pn_plan *)0x1;
    pn_error err = { 0 };
    cr_assert_eq(pn_plan_build(r, d, 2, &p, NULL, &err), PN_ERR_RECIPE);
    cr_assert_null(p);
    const char *want[] = { "t.mix:4:", "token_embd.weight", "K=320",
                           "q3_K",     "multiple of 256",   "fallback" };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert_not_null(strstr(err.msg, want[i]), "'%s' should mention '%s'", err.msg, want[i]);
    pn_recipe_free(r);
}

Test(plan, every_unmatched_tensor_is_listed_in_one_error)
{
    pn_recipe *r = mix_parse_ok(MIX_HEAD "rule *.ffn_up.weight => pn3t\n");
    pn_tensor_desc d[5] = { mix_desc2("blk.0.ffn_up.weight", 320, 64),
                            mix_desc2("blk.0.mystery.weight", 320, 64),
                            mix_desc2("blk.0.ffn_up.bias", 64, 0),
                            mix_desc2("blk.1.ffn_up.weight", 320, 64),
                            mix_desc2("rope_freqs", 64, 0) };
    pn_plan *p = NULL;
    char *details = NULL;
    pn_error err = { 0 };
    cr_assert_eq(pn_plan_build(r, d, 5, &p, &details, &err), PN_ERR_UNMATCHED);
    cr_assert_null(p);
    cr_assert_not_null(strstr(err.msg, "3 tensors match no rule"), "%s", err.msg);
    for (int i = 1; i < 5; i++) {
        if (i == 3)
            continue;
        cr_assert_not_null(strstr(err.msg, d[i].name), "'%s' should list %s", err.msg, d[i].name);
    }
    cr_assert_null(strstr(err.msg, "blk.0.ffn_up.weight"), "%s", err.msg);
    cr_assert_str_eq(details, "blk.0.mystery.weight\nblk.0.ffn_up.bias\nrope_freqs\n");
    free(details);
    pn_recipe_free(r);
}

Test(plan, more_unmatched_tensors_than_a_message_holds_are_all_in_the_details)
{
    pn_recipe *r = mix_parse_ok(MIX_HEAD "rule nothing => f32\n");
    enum { N = 300 };
    static char names[N][64];
    static pn_tensor_desc d[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "blk.%d.some_long_tensor_role.weight", i);
        d[i] = mix_desc2(names[i], 64, 2);
    }
    pn_plan *p = NULL;
    char *details = NULL;
    pn_error err = { 0 };
    cr_assert_eq(pn_plan_build(r, d, N, &p, &details, &err), PN_ERR_UNMATCHED);
    cr_assert_not_null(strstr(err.msg, "300 tensors match no rule"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "more"), "the message says how many it leaves out: %s",
                       err.msg);
    cr_assert_lt(strlen(err.msg), (size_t)PN_ERROR_MSG_MAX - 1);
    int lines = 0;
    for (const char *c = details; *c; c++)
        lines += *c == '\n';
    cr_assert_eq(lines, N);
    cr_assert_not_null(strstr(details, "blk.299.some_long_tensor_role.weight\n"));
    free(details);
    pn_recipe_free(r);
}

Test(plan, refuses_bad_descriptions_duplicate_names_and_non_float_sources)
{
    pn_recipe *r = mix_parse_ok(MIX_HEAD "rule * => f32\n");
    pn_plan *p = NULL;
    pn_error err = { 0 };
    pn_tensor_desc dup[2] = { mix_desc2("a", 4, 0), mix_desc2("a", 4, 0) };
    cr_assert_eq(pn_plan_build(r, dup, 2, &p, NULL, &err), PN_ERR_TENSOR);
    cr_assert_not_null(strstr(err.msg, "'a'"), "%s", err.msg);
    pn_tensor_desc q = mix_desc2("q", 32, 4);
    q.src_type = PN_TYPE_Q8_0;
    cr_assert_eq(pn_plan_build(r, &q, 1, &p, NULL, &err), PN_ERR_TYPE);
    cr_assert_not_null(strstr(err.msg, "q8_0"), "%s", err.msg);
    pn_tensor_desc z = mix_desc2("z", 0, 4);
    cr_assert_eq(pn_plan_build(r, &z, 1, &p, NULL, &err), PN_ERR_TENSOR);
    pn_tensor_desc extra = mix_desc2("e", 4, 0);
    extra.ne[1] = 3; /* beyond n_dims but not 1 */
    cr_assert_eq(pn_plan_build(r, &extra, 1, &p, NULL, &err), PN_ERR_TENSOR);
    cr_assert_null(p);
    pn_recipe_free(r);
}

Test(plan, data_bytes_pad_every_tensor_to_the_alignment)
{
    pn_recipe *r = mix_parse_ok(MIX_HEAD "rule * => f32\n");
    pn_tensor_desc d[3] = { mix_desc2("a", 3, 0), mix_desc2("b", 8, 0), mix_desc2("c", 5, 0) };
    pn_plan *p = mix_build_ok(r, d, 3);
    /* 12, 32, 20 bytes -> 32 + 32 + 32 */
    cr_assert_eq(pn_plan_data_bytes(p, 32), 96);
    cr_assert_eq(pn_plan_data_bytes(p, 0), 96, "0 means the default 32");
    cr_assert_eq(pn_plan_data_bytes(p, 8), 16 + 32 + 24);
    cr_assert_eq(pn_plan_data_bytes(p, 1), 64);
    pn_plan_totals t;
    pn_plan_totals_get(p, &t);
    cr_assert_eq(t.payload_bytes, 64);
    cr_assert_eq(t.n_weights, 16);
    cr_assert_float_eq(t.bpw_all, 32.0, 1e-12);
    cr_assert_eq(t.pn_weights, 0);
    cr_assert_float_eq(t.bpw_pn, 0.0, 0.0);
    pn_plan_free(p);
    pn_recipe_free(r);
}

Test(plan, rotation_none_rotates_nothing_and_file_type_is_carried)
{
    pn_recipe *r = mix_parse_ok("mix N\nrotation none\nfile_type 2\nrule * => pn3t\n");
    pn_tensor_desc d = mix_desc2("w", 320, 4);
    pn_plan *p = mix_build_ok(r, &d, 1);
    cr_assert_eq(p->tensors[0].type, PN_TYPE_PN3T);
    cr_assert(!p->tensors[0].rotated);
    cr_assert_eq(p->tensors[0].rotation_block, 0);
    cr_assert(p->has_file_type);
    cr_assert_eq(p->file_type, 2);
    pn_plan_free(p);
    pn_recipe_free(r);
}

Test(plan, a_pn3t_tensor_is_a_candidate_only_when_64_divides_k)
{
    pn_recipe *r = mix_parse_ok(MIX_HEAD "rule * => pn3t\n");
    pn_tensor_desc d[2] = { mix_desc2("a", 320, 2), mix_desc2("b", 160, 2) };
    pn_plan *p = mix_build_ok(r, d, 2);
    cr_assert(p->tensors[0].candidate);
    cr_assert(!p->tensors[1].candidate);
    cr_assert_eq(p->n_candidates, 1);
    pn_error err = { 0 };
    const char *b[] = { "b" };
    cr_assert_eq(pn_plan_promote_by_names(p, b, 1, &err), PN_ERR_MISMATCH);
    cr_assert_not_null(strstr(err.msg, "K is not a multiple of 64"), "%s", err.msg);
    pn_plan_free(p);
    pn_recipe_free(r);
}
