/* Tensor-name patterns (mix/glob.h): * and ? match whole names. */
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


/* ---- the glob ---- */

/* Parameters hold arrays, not pointers: Criterion runs each case in a
 * fresh process where the parent's addresses mean nothing. */
typedef struct glob_case {
    char pattern[48], name[48];
    bool match;
} glob_case;

ParameterizedTestParameters(glob, matches_whole_names_with_star_and_question_mark)
{
    static glob_case cases[] = {
        { "*.attn_k.weight", "blk.12.attn_k.weight", true },
        { "*.attn_k.weight", "blk.12.attn_k.weight.x", false },
        { "*.attn_k.weight", "attn_k.weight", false },
        { "*_norm.weight", "blk.0.attn_q_norm.weight", true },
        { "*_norm.weight", "output_norm.weight", true },
        { "*_norm.weight", "blk.0.ssm_norm.bias", false },
        { "token_embd.weight", "token_embd.weight", true },
        { "token_embd.weight", "token_embd.weights", false },
        { "token_embd.weight", "Token_embd.weight", false },
        { "blk.?.ffn_up.weight", "blk.7.ffn_up.weight", true },
        { "blk.?.ffn_up.weight", "blk.17.ffn_up.weight", false },
        { "*", "", true },
        { "*", "anything", true },
        { "?", "", false },
        { "", "", true },
        { "", "a", false },
        { "a*b*c", "axxbyybzzc", true },
        { "a*b*c", "axxbyybzz", false },
        { "**a", "bbba", true },
        { "*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false },
    };
    return cr_make_param_array(glob_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(glob_case *c, glob, matches_whole_names_with_star_and_question_mark)
{
    cr_assert_eq(pn_glob_match(c->pattern, c->name), c->match, "'%s' vs '%s': expected %s",
                 c->pattern, c->name, c->match ? "a match" : "no match");
}
