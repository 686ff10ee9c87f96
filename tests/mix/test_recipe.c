/* Recipes (mix/recipe.h): the shipped ones, every line kind, rules and
 * conditions, the MTP statement, and every refusal naming its line. */
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

#define MAIN_RECIPE PN_SOURCE_DIR "/recipes/qwen3.8-27b-pn3.mix"
#define TEST_RECIPE PN_SOURCE_DIR "/recipes/test-fallback.mix"

/* ---- parsing ---- */

Test(recipe, the_shipped_recipe_names_itself_p0k_with_19_promotions_and_hadamard_1024)
{
    pn_recipe *r = mix_load_ok(MAIN_RECIPE);
    cr_assert_str_eq(r->name, "P0k");
    cr_assert_eq(r->rotation, PN_ROTATION_HADAMARD);
    cr_assert_eq(r->rotation_cap, 1024);
    cr_assert_eq(r->promote, 19);
    cr_assert(!r->has_file_type, "the output file: no general.file_type unless a recipe sets it");
    cr_assert_eq(r->n_rules, 10, "nine rules and the MTP layer's eh_proj");
    for (size_t i = 0; i < r->n_rules; i++)
        cr_assert_eq(r->rules[i].n_types, 1, "line %d: the main recipe names no fallback",
                     r->rules[i].line);
    pn_recipe_free(r);
}

Test(recipe, the_test_recipe_differs_from_the_main_one_only_in_name_two_fallbacks_and_mtp)
{
    pn_recipe *a = mix_load_ok(MAIN_RECIPE), *b = mix_load_ok(TEST_RECIPE);
    cr_assert_str_eq(b->name, "P0k-fallback");
    cr_assert_eq(a->mtp, PN_RECIPE_MTP_DROP, "the format's PN3 file has no MTP layer");
    cr_assert_eq(b->mtp, PN_RECIPE_MTP_UNSTATED, "the test recipe keeps a model's MTP layer");
    cr_assert_eq(a->rotation, b->rotation);
    cr_assert_eq(a->rotation_cap, b->rotation_cap);
    cr_assert_eq(a->promote, b->promote);
    cr_assert_eq(a->has_file_type, b->has_file_type);
    cr_assert_eq(a->n_rules, b->n_rules);
    int changed = 0;
    for (size_t i = 0; i < a->n_rules; i++) {
        const pn_recipe_rule *x = &a->rules[i], *y = &b->rules[i];
        cr_assert_eq(x->n_patterns, y->n_patterns, "rule %zu", i);
        for (size_t k = 0; k < x->n_patterns; k++)
            cr_assert_str_eq(x->patterns[k], y->patterns[k]);
        cr_assert_eq(x->n_conds, y->n_conds);
        cr_assert_eq(memcmp(x->conds, y->conds, x->n_conds * sizeof *x->conds), 0);
        cr_assert_eq(x->types[0], y->types[0], "rule %zu: same first choice", i);
        if (x->n_types != y->n_types || memcmp(x->types, y->types, sizeof x->types) != 0) {
            changed++;
            bool embd = strcmp(x->patterns[0], "token_embd.weight") == 0;
            bool out = strcmp(x->patterns[0], "output.weight") == 0;
            cr_assert(embd || out, "rule '%s' should be the same in both recipes", y->text);
            cr_assert_eq(y->n_types, 2);
            cr_assert_eq(y->types[1], PN_TYPE_Q8_0);
        }
    }
    cr_assert_eq(changed, 2);
    pn_recipe_free(a);
    pn_recipe_free(b);
}

Test(recipe, reads_every_line_kind)
{
    pn_recipe *r = mix_parse_ok("  # leading comment\r\n"
                                "mix Test-1.a_b   # trailing comment\r\n"
                                "\n"
                                "rotation none\n"
                                "file_type 7\n"
                                "promote 3\n"
                                "rule a.weight b.* K%256==0 dims=2 rows>=4 => q3_K | q8_0|f32\n"
                                "rule K=1,2,3 K!=2 rows<5 rows<=9 K>0 => BF16\n"
                                "rule *=>f16");
    cr_assert_str_eq(r->name, "Test-1.a_b");
    cr_assert_eq(r->rotation, PN_ROTATION_NONE);
    cr_assert_eq(r->rotation_cap, 0);
    cr_assert(r->has_file_type);
    cr_assert_eq(r->file_type, 7);
    cr_assert_eq(r->promote, 3);
    cr_assert_eq(r->n_rules, 3);
    const pn_recipe_rule *a = &r->rules[0];
    cr_assert_eq(a->line, 7);
    cr_assert_eq(a->n_patterns, 2);
    cr_assert_str_eq(a->patterns[1], "b.*");
    cr_assert_eq(a->n_conds, 3);
    cr_assert_eq(a->conds[0].var, PN_SHAPE_K);
    cr_assert_eq(a->conds[0].modulus, 256);
    cr_assert_eq(a->conds[0].cmp, PN_CMP_EQ);
    cr_assert_eq(a->conds[0].values[0], 0);
    cr_assert_eq(a->conds[1].var, PN_SHAPE_DIMS);
    cr_assert_eq(a->conds[2].var, PN_SHAPE_ROWS);
    cr_assert_eq(a->conds[2].cmp, PN_CMP_GE);
    cr_assert_eq(a->n_types, 3);
    cr_assert_eq(a->types[0], PN_TYPE_Q3_K);
    cr_assert_eq(a->types[1], PN_TYPE_Q8_0);
    cr_assert_eq(a->types[2], PN_TYPE_F32);
    const pn_recipe_rule *b = &r->rules[1];
    cr_assert_eq(b->n_patterns, 0);
    cr_assert_eq(b->n_conds, 5);
    cr_assert_eq(b->conds[0].n_values, 3);
    cr_assert_eq(b->types[0], PN_TYPE_BF16);
    cr_assert_eq(r->rules[2].types[0], PN_TYPE_F16);
    cr_assert_str_eq(r->rules[2].patterns[0], "*");
    pn_recipe_free(r);

    r = mix_parse_ok("mix x\nrotation hadamard 512\nrule * => f32\n");
    cr_assert_eq(r->rotation_cap, 512);
    cr_assert_eq(r->promote, 0, "promote defaults to 0");
    pn_recipe_free(r);
    r = mix_parse_ok("mix x\nrotation hadamard\nrule * => f32\n");
    cr_assert_eq(r->rotation_cap, 1024, "the cap defaults to 1024");
    pn_recipe_free(r);
}

typedef struct bad_recipe {
    char text[160];
    char where[16];    /* "t.mix:<line>:" or "t.mix:" */
    char expected[96]; /* a phrase of the message */
} bad_recipe;

ParameterizedTestParameters(recipe, a_syntax_error_names_the_line_and_what_was_expected)
{
    static bad_recipe cases[] = {
        { MIX_HEAD "rule x => q9_K\n", "t.mix:3:", "expected a type the toolchain writes" },
        { MIX_HEAD "rule x => q6_K\n", "t.mix:3:", "found 'q6_K'" },
        { MIX_HEAD "# c\n\n  # c\nfoo bar\n",
          "t.mix:6:", "expected a statement (mix, rotation, promote" },
        { "mix A\nmix B\nrotation none\nrule * => f32\n",
          "t.mix:2:", "found a second one (the first is at line 1)" },
        { "mix A+1\n", "t.mix:1:", "'+' is reserved" },
        { "mix\n", "t.mix:1:", "expected 'mix <name>'" },
        { "mix a b\n", "t.mix:1:", "expected 'mix <name>'" },
        { "mix A\nrotation hadamard 1000\n", "t.mix:2:", "power of two from 1 to 4096" },
        { "mix A\nrotation hadamard 8192\n", "t.mix:2:", "power of two" },
        { "mix A\nrotation spin\n",
          "t.mix:2:", "expected 'rotation hadamard [cap]' or 'rotation none'" },
        { "mix A\nrotation none 4\n", "t.mix:2:", "expected 'rotation hadamard" },
        { MIX_HEAD "promote -1\n", "t.mix:3:", "expected a whole number" },
        { MIX_HEAD "promote\n", "t.mix:3:", "expected 'promote <N>'" },
        { MIX_HEAD "promote 1 2\n", "t.mix:3:", "found 2 word(s)" },
        { MIX_HEAD "promote 1\npromote 2\n", "t.mix:4:", "the first is at line 3" },
        { MIX_HEAD "file_type 4294967296\n", "t.mix:3:", "from 0 to 4294967295" },
        { MIX_HEAD "rule *.w q8_0\n", "t.mix:3:", "found no '=>'" },
        { MIX_HEAD "rule => f32\n",
          "t.mix:3:", "expected a name pattern or a shape condition before '=>'" },
        { MIX_HEAD "rule x =>\n", "t.mix:3:", "after '=>', found nothing" },
        { MIX_HEAD "rule x => q8_0||f32\n", "t.mix:3:", "separated by '|'" },
        { MIX_HEAD "rule x => q8_0 f32\n", "t.mix:3:", "separated by '|'" },
        { MIX_HEAD "rule x => q8_0 => f32\n", "t.mix:3:", "found two" },
        { MIX_HEAD "rule K=abc => f32\n", "t.mix:3:", "non-negative whole number" },
        { MIX_HEAD "rule K= => f32\n", "t.mix:3:", "non-negative whole number" },
        { MIX_HEAD "rule K<1,2 => f32\n", "t.mix:3:", "expected one value" },
        { MIX_HEAD "rule Q=5 => f32\n",
          "t.mix:3:", "expected a shape condition on K, rows or dims" },
        { MIX_HEAD "rule K%0==0 => f32\n", "t.mix:3:", "modulus of at least 1" },
        { MIX_HEAD "rule K~5 x=1 => f32\n", "t.mix:3:", "found 'x=1'" },
        { MIX_HEAD "rule K5 => f32\n\nrule K!5 => f32\n", "t.mix:5:", "expected a comparison" },
        { MIX_HEAD "rule x => f32|f32|f32|f32|f32|f32|f32|f32|f32\n",
          "t.mix:3:", "at most 8 types" },
        { MIX_HEAD "rule K=1,2,3,4,5,6,7,8,9 => f32\n", "t.mix:3:", "at most 8 values" },
        { MIX_HEAD "rule K=99999999999999999999 => f32\n",
          "t.mix:3:", "non-negative whole number" },
        { "rotation none\nrule * => f32\n", "t.mix:", "expected a 'mix <name>' line, found none" },
        { "mix A\nrule * => f32\n",
          "t.mix:", "expected a 'rotation hadamard [cap]' or 'rotation none' line" },
        { MIX_HEAD "# only comments\n", "t.mix:", "expected at least one 'rule' line" },
        { "", "t.mix:", "expected a 'mix <name>' line" },
    };
    return cr_make_param_array(bad_recipe, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(bad_recipe *c, recipe, a_syntax_error_names_the_line_and_what_was_expected)
{
    pn_recipe *r = (pn_recipe *)0x1;
    pn_error err = { 0 };
    pn_status st = pn_recipe_parse(c->text, strlen(c->text), "t.mix", &r, &err);
    cr_assert_eq(st, PN_ERR_RECIPE, "expected PN_ERR_RECIPE for:\n%s\ngot %d: %s", c->text, st,
                 err.msg);
    cr_assert_eq(err.code, PN_ERR_RECIPE);
    cr_assert_null(r);
    cr_assert_eq(strncmp(err.msg, c->where, strlen(c->where)), 0,
                 "message '%s' should start with '%s'", err.msg, c->where);
    if (strcmp(c->where, "t.mix:") == 0)
        cr_assert(err.msg[6] == ' ', "a whole-file error has no line number: %s", err.msg);
    cr_assert_not_null(strstr(err.msg, c->expected), "message '%s' should say '%s'", err.msg,
                       c->expected);
}

Test(recipe, a_nul_byte_is_refused_with_its_line)
{
    const char text[] = "mix A\nrotation none\nrule a\0b => f32\n";
    pn_recipe *r = NULL;
    pn_error err = { 0 };
    cr_assert_eq(pn_recipe_parse(text, sizeof text - 1, "t.mix", &r, &err), PN_ERR_RECIPE);
    cr_assert_not_null(strstr(err.msg, "t.mix:3:"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "NUL"), "%s", err.msg);
}

Test(recipe, a_missing_file_is_an_io_error_naming_it)
{
    pn_recipe *r = NULL;
    pn_error err = { 0 };
    cr_assert_eq(pn_recipe_load("/nonexistent/x.mix", &r, &err), PN_ERR_IO);
    cr_assert_not_null(strstr(err.msg, "/nonexistent/x.mix"), "%s", err.msg);
    cr_assert_null(r);
}

/* ---- matching ---- */

Test(recipe, the_first_matching_rule_wins)
{
    pn_recipe *r = mix_parse_ok(MIX_HEAD "rule blk.0.* => q8_0\n"
                                         "rule *.ffn_up.weight => pn3t\n"
                                         "rule * => f32\n");
    int64_t ne[4] = { 320, 64, 1, 1 };
    cr_assert_eq(pn_recipe_match(r, "blk.0.ffn_up.weight", 2, ne)->line, 3);
    cr_assert_eq(pn_recipe_match(r, "blk.1.ffn_up.weight", 2, ne)->line, 4);
    cr_assert_eq(pn_recipe_match(r, "blk.1.ffn_down.weight", 2, ne)->line, 5);
    pn_recipe_free(r);

    r = mix_parse_ok(MIX_HEAD "rule x => f32\n");
    cr_assert_null(pn_recipe_match(r, "y", 2, ne));
    pn_recipe_free(r);
}

typedef struct cond_case {
    char rule[64];
    char name[16];
    uint32_t n_dims;
    int64_t ne0, ne1, ne2;
    bool match;
} cond_case;

ParameterizedTestParameters(recipe, patterns_are_ored_and_conditions_anded)
{
    static cond_case cases[] = {
        { "rule a b => f32", "a", 2, 5, 5, 1, true },
        { "rule a b => f32", "b", 2, 5, 5, 1, true },
        { "rule a b => f32", "c", 2, 5, 5, 1, false },
        { "rule K=5120 => f32", "x", 2, 5120, 5, 1, true },
        { "rule K=5120 => f32", "x", 2, 5121, 5, 1, false },
        { "rule K==6144,17408 => f32", "x", 2, 17408, 5, 1, true },
        { "rule K==6144,17408 => f32", "x", 2, 6144, 5, 1, true },
        { "rule K==6144,17408 => f32", "x", 2, 5120, 5, 1, false },
        { "rule K!=6144,17408 => f32", "x", 2, 5120, 5, 1, true },
        { "rule K!=6144,17408 => f32", "x", 2, 6144, 5, 1, false },
        { "rule K%256==0 => f32", "x", 2, 5120, 5, 1, true },
        { "rule K%256==0 => f32", "x", 2, 320, 5, 1, false },
        { "rule K%256!=0 => f32", "x", 2, 320, 5, 1, true },
        { "rule K%80=0 K%64=0 => f32", "x", 2, 320, 5, 1, true },
        { "rule K%80=0 K%64=0 => f32", "x", 2, 160, 5, 1, false },
        { "rule K<320 => f32", "x", 2, 319, 5, 1, true },
        { "rule K<320 => f32", "x", 2, 320, 5, 1, false },
        { "rule K<=320 => f32", "x", 2, 320, 5, 1, true },
        { "rule K>320 => f32", "x", 2, 320, 5, 1, false },
        { "rule K>=320 => f32", "x", 2, 320, 5, 1, true },
        { "rule dims=1 => f32", "x", 1, 64, 1, 1, true },
        { "rule dims=1 => f32", "x", 2, 64, 1, 1, false },
        { "rule rows=12 => f32", "x", 3, 64, 3, 4, true },
        { "rule rows>12 => f32", "x", 3, 64, 3, 4, false },
        { "rule *.w K=64 => f32", "a.w", 2, 64, 2, 1, true },
        { "rule *.w K=64 => f32", "a.w", 2, 65, 2, 1, false },
        { "rule *.w K=64 => f32", "a.v", 2, 64, 2, 1, false },
        { "rule *.w *.v K=64 dims=2 => f32", "a.v", 2, 64, 2, 1, true },
    };
    return cr_make_param_array(cond_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(cond_case *c, recipe, patterns_are_ored_and_conditions_anded)
{
    char text[256];
    snprintf(text, sizeof text, MIX_HEAD "%s\n", c->rule);
    pn_recipe *r = mix_parse_ok(text);
    int64_t ne[4] = { c->ne0, c->ne1, c->ne2, 1 };
    cr_assert_eq(pn_recipe_rule_matches(&r->rules[0], c->name, c->n_dims, ne), c->match,
                 "'%s' on %s [%lld x %lld x %lld]: expected %s", c->rule, c->name,
                 (long long)c->ne0, (long long)c->ne1, (long long)c->ne2,
                 c->match ? "a match" : "no match");
    pn_recipe_free(r);
}

typedef struct chain_case {
    int64_t K;
    int type;
    int index;
} chain_case;

ParameterizedTestParameters(recipe, a_fallback_chain_gives_the_first_type_whose_block_divides_k)
{
    static chain_case cases[] = {
        { 5120, PN_TYPE_Q3_K, 0 }, { 512, PN_TYPE_Q3_K, 0 }, { 320, PN_TYPE_Q8_0, 1 },
        { 96, PN_TYPE_Q8_0, 1 },   { 100, PN_TYPE_F32, 2 },  { 1, PN_TYPE_F32, 2 },
    };
    return cr_make_param_array(chain_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(chain_case *c, recipe,
                  a_fallback_chain_gives_the_first_type_whose_block_divides_k)
{
    pn_recipe *r = mix_parse_ok(MIX_HEAD "rule * => q3_K|q8_0|f32\n");
    pn_tensor_desc d = mix_desc2("t", c->K, 8);
    pn_plan *p = mix_build_ok(r, &d, 1);
    cr_assert_eq(p->tensors[0].type, c->type, "K=%lld: %s, expected %s", (long long)c->K,
                 mix_tname(p->tensors[0].type), mix_tname(c->type));
    cr_assert_eq(p->tensors[0].chain_index, c->index);
    cr_assert_eq(p->tensors[0].bytes, (uint64_t)pn_type_row_bytes(c->type, c->K) * 8);
    pn_plan_free(p);
    pn_recipe_free(r);
}

/* The MTP layer the converter keeps by default (blk.L.nextn.*): every
 * shipped recipe gives each of its tensors a type. */
Test(recipe, the_shipped_recipes_type_every_mtp_tensor)
{
    static const char *const recipes[] = { PN_SOURCE_DIR "/recipes/qwen3.8-27b-pn3.mix",
                                           PN_SOURCE_DIR "/recipes/test-fallback.mix" };
    static const struct {
        const char *name;
        uint32_t n_dims;
        int64_t ne[4];
    } mtp[] = {
        { "blk.64.nextn.eh_proj.weight", 2, { 10240, 5120, 1, 1 } },
        { "blk.64.nextn.enorm.weight", 1, { 5120, 1, 1, 1 } },
        { "blk.64.nextn.hnorm.weight", 1, { 5120, 1, 1, 1 } },
        { "blk.64.nextn.shared_head_norm.weight", 1, { 5120, 1, 1, 1 } },
        { "blk.64.attn_q.weight", 2, { 5120, 12288, 1, 1 } },
        { "blk.64.attn_k.weight", 2, { 5120, 1024, 1, 1 } },
        { "blk.64.attn_v.weight", 2, { 5120, 1024, 1, 1 } },
        { "blk.64.attn_output.weight", 2, { 6144, 5120, 1, 1 } },
        { "blk.64.attn_q_norm.weight", 1, { 256, 1, 1, 1 } },
        { "blk.64.attn_k_norm.weight", 1, { 256, 1, 1, 1 } },
        { "blk.64.attn_norm.weight", 1, { 5120, 1, 1, 1 } },
        { "blk.64.post_attention_norm.weight", 1, { 5120, 1, 1, 1 } },
        { "blk.64.ffn_gate.weight", 2, { 5120, 17408, 1, 1 } },
        { "blk.64.ffn_up.weight", 2, { 5120, 17408, 1, 1 } },
        { "blk.64.ffn_down.weight", 2, { 17408, 5120, 1, 1 } },
    };
    for (size_t r = 0; r < 2; r++) {
        pn_recipe *rec = NULL;
        pn_error err = { 0 };
        cr_assert_eq(pn_recipe_load(recipes[r], &rec, &err), PN_OK, "%s", err.msg);
        for (size_t i = 0; i < sizeof mtp / sizeof *mtp; i++) {
            const pn_recipe_rule *rule =
                pn_recipe_match(rec, mtp[i].name, mtp[i].n_dims, mtp[i].ne);
            cr_assert(rule, "%s: no rule types %s", recipes[r], mtp[i].name);
            cr_assert_geq(pn_recipe_rule_pick_type(rule, mtp[i].ne[0], NULL), 0, "%s: %s",
                          recipes[r], mtp[i].name);
        }
        pn_recipe_free(rec);
    }
}

Test(recipe, the_mtp_statement_keeps_or_drops_the_mtp_layer_once)
{
    pn_recipe *r = mix_parse_ok("mix A\nrotation none\nmtp drop\nrule * => f32\n");
    cr_assert_eq(r->mtp, PN_RECIPE_MTP_DROP);
    cr_assert_eq(r->mtp_line, 3);
    pn_recipe_free(r);
    r = mix_parse_ok("mix A\nrotation none\nmtp keep # as the converter\nrule * => f32\n");
    cr_assert_eq(r->mtp, PN_RECIPE_MTP_KEEP);
    pn_recipe_free(r);
    r = mix_parse_ok("mix A\nrotation none\nrule * => f32\n");
    cr_assert_eq(r->mtp, PN_RECIPE_MTP_UNSTATED);
    cr_assert_eq(r->mtp_line, 0);
    pn_recipe_free(r);
    static const char *const bad[] = {
        "mix A\nrotation none\nmtp\nrule * => f32\n",
        "mix A\nrotation none\nmtp remove\nrule * => f32\n",
        "mix A\nrotation none\nmtp drop keep\nrule * => f32\n",
        "mix A\nrotation none\nmtp drop\nmtp keep\nrule * => f32\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        pn_error err = { 0 };
        cr_assert_eq(pn_recipe_parse(bad[i], strlen(bad[i]), "t.mix", &r, &err), PN_ERR_RECIPE,
                     "%s", bad[i]);
        cr_assert(strstr(err.msg, i == 3 ? "t.mix:4" : "t.mix:3"), "%s", err.msg);
        cr_assert(strstr(err.msg, "mtp"), "%s", err.msg);
    }
}
