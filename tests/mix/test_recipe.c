/* test_mix.c - recipes, plans, promotion by measurement, sizes, shapes. */
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

#define MAIN_RECIPE PN_SOURCE_DIR "/recipes/qwen3.8-27b-pn3.mix"
#define TEST_RECIPE PN_SOURCE_DIR "/recipes/test-fallback.mix"
#define TINY_EXPECT PN_TEST_DATA "/golden/tiny.f32.expect.txt"

/* ---- helpers ---- */

static pn_recipe *parse_ok(const char *text)
{
    pn_recipe *r = NULL;
    pn_error err = { 0 };
    pn_status st = pn_recipe_parse(text, strlen(text), "t.mix", &r, &err);
    cr_assert_eq(st, PN_OK, "recipe should parse: %s\n%s", err.msg, text);
    return r;
}

static pn_recipe *load_ok(const char *path)
{
    pn_recipe *r = NULL;
    pn_error err = { 0 };
    cr_assert_eq(pn_recipe_load(path, &r, &err), PN_OK, "%s", err.msg);
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

static const char *tname(int id)
{
    const pn_type_traits *t = pn_type_traits_get(id);
    return t ? t->name : "?";
}

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

/* ---- parsing ---- */

Test(recipe, the_shipped_recipe_names_itself_p0k_with_19_promotions_and_hadamard_1024)
{
    pn_recipe *r = load_ok(MAIN_RECIPE);
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
    pn_recipe *a = load_ok(MAIN_RECIPE), *b = load_ok(TEST_RECIPE);
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
    pn_recipe *r = parse_ok("  # leading comment\r\n"
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

    r = parse_ok("mix x\nrotation hadamard 512\nrule * => f32\n");
    cr_assert_eq(r->rotation_cap, 512);
    cr_assert_eq(r->promote, 0, "promote defaults to 0");
    pn_recipe_free(r);
    r = parse_ok("mix x\nrotation hadamard\nrule * => f32\n");
    cr_assert_eq(r->rotation_cap, 1024, "the cap defaults to 1024");
    pn_recipe_free(r);
}

typedef struct bad_recipe {
    char text[160];
    char where[16];    /* "t.mix:<line>:" or "t.mix:" */
    char expected[96]; /* a phrase of the message */
} bad_recipe;

#define HEAD "mix A\nrotation hadamard\n"

ParameterizedTestParameters(recipe, a_syntax_error_names_the_line_and_what_was_expected)
{
    static bad_recipe cases[] = {
        { HEAD "rule x => q9_K\n", "t.mix:3:", "expected a type the toolchain writes" },
        { HEAD "rule x => q6_K\n", "t.mix:3:", "found 'q6_K'" },
        { HEAD "# c\n\n  # c\nfoo bar\n",
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
        { HEAD "promote -1\n", "t.mix:3:", "expected a whole number" },
        { HEAD "promote\n", "t.mix:3:", "expected 'promote <N>'" },
        { HEAD "promote 1 2\n", "t.mix:3:", "found 2 word(s)" },
        { HEAD "promote 1\npromote 2\n", "t.mix:4:", "the first is at line 3" },
        { HEAD "file_type 4294967296\n", "t.mix:3:", "from 0 to 4294967295" },
        { HEAD "rule *.w q8_0\n", "t.mix:3:", "found no '=>'" },
        { HEAD "rule => f32\n",
          "t.mix:3:", "expected a name pattern or a shape condition before '=>'" },
        { HEAD "rule x =>\n", "t.mix:3:", "after '=>', found nothing" },
        { HEAD "rule x => q8_0||f32\n", "t.mix:3:", "separated by '|'" },
        { HEAD "rule x => q8_0 f32\n", "t.mix:3:", "separated by '|'" },
        { HEAD "rule x => q8_0 => f32\n", "t.mix:3:", "found two" },
        { HEAD "rule K=abc => f32\n", "t.mix:3:", "non-negative whole number" },
        { HEAD "rule K= => f32\n", "t.mix:3:", "non-negative whole number" },
        { HEAD "rule K<1,2 => f32\n", "t.mix:3:", "expected one value" },
        { HEAD "rule Q=5 => f32\n", "t.mix:3:", "expected a shape condition on K, rows or dims" },
        { HEAD "rule K%0==0 => f32\n", "t.mix:3:", "modulus of at least 1" },
        { HEAD "rule K~5 x=1 => f32\n", "t.mix:3:", "found 'x=1'" },
        { HEAD "rule K5 => f32\n\nrule K!5 => f32\n", "t.mix:5:", "expected a comparison" },
        { HEAD "rule x => f32|f32|f32|f32|f32|f32|f32|f32|f32\n", "t.mix:3:", "at most 8 types" },
        { HEAD "rule K=1,2,3,4,5,6,7,8,9 => f32\n", "t.mix:3:", "at most 8 values" },
        { HEAD "rule K=99999999999999999999 => f32\n", "t.mix:3:", "non-negative whole number" },
        { "rotation none\nrule * => f32\n", "t.mix:", "expected a 'mix <name>' line, found none" },
        { "mix A\nrule * => f32\n",
          "t.mix:", "expected a 'rotation hadamard [cap]' or 'rotation none' line" },
        { HEAD "# only comments\n", "t.mix:", "expected at least one 'rule' line" },
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
    pn_recipe *r = parse_ok(HEAD "rule blk.0.* => q8_0\n"
                                 "rule *.ffn_up.weight => pn3t\n"
                                 "rule * => f32\n");
    int64_t ne[4] = { 320, 64, 1, 1 };
    cr_assert_eq(pn_recipe_match(r, "blk.0.ffn_up.weight", 2, ne)->line, 3);
    cr_assert_eq(pn_recipe_match(r, "blk.1.ffn_up.weight", 2, ne)->line, 4);
    cr_assert_eq(pn_recipe_match(r, "blk.1.ffn_down.weight", 2, ne)->line, 5);
    pn_recipe_free(r);

    r = parse_ok(HEAD "rule x => f32\n");
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
    snprintf(text, sizeof text, HEAD "%s\n", c->rule);
    pn_recipe *r = parse_ok(text);
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
    pn_recipe *r = parse_ok(HEAD "rule * => q3_K|q8_0|f32\n");
    pn_tensor_desc d = desc2("t", c->K, 8);
    pn_plan *p = build_ok(r, &d, 1);
    cr_assert_eq(p->tensors[0].type, c->type, "K=%lld: %s, expected %s", (long long)c->K,
                 tname(p->tensors[0].type), tname(c->type));
    cr_assert_eq(p->tensors[0].chain_index, c->index);
    cr_assert_eq(p->tensors[0].bytes, (uint64_t)pn_type_row_bytes(c->type, c->K) * 8);
    pn_plan_free(p);
    pn_recipe_free(r);
}

Test(plan, a_type_whose_block_does_not_divide_k_without_fallback_is_an_error_naming_everything)
{
    pn_recipe *r = parse_ok(HEAD "rule *_norm.weight => f32\n"
                                 "rule token_embd.weight => q3_K\n");
    pn_tensor_desc d[2] = { desc2("output_norm.weight", 320, 0),
                            desc2("token_embd.weight", 320, 64) };
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
    pn_recipe *r = parse_ok(HEAD "rule *.ffn_up.weight => pn3t\n");
    pn_tensor_desc d[5] = { desc2("blk.0.ffn_up.weight", 320, 64),
                            desc2("blk.0.mystery.weight", 320, 64),
                            desc2("blk.0.ffn_up.bias", 64, 0),
                            desc2("blk.1.ffn_up.weight", 320, 64), desc2("rope_freqs", 64, 0) };
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
    pn_recipe *r = parse_ok(HEAD "rule nothing => f32\n");
    enum { N = 300 };
    static char names[N][64];
    static pn_tensor_desc d[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "blk.%d.some_long_tensor_role.weight", i);
        d[i] = desc2(names[i], 64, 2);
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
    pn_recipe *r = parse_ok(HEAD "rule * => f32\n");
    pn_plan *p = NULL;
    pn_error err = { 0 };
    pn_tensor_desc dup[2] = { desc2("a", 4, 0), desc2("a", 4, 0) };
    cr_assert_eq(pn_plan_build(r, dup, 2, &p, NULL, &err), PN_ERR_TENSOR);
    cr_assert_not_null(strstr(err.msg, "'a'"), "%s", err.msg);
    pn_tensor_desc q = desc2("q", 32, 4);
    q.src_type = PN_TYPE_Q8_0;
    cr_assert_eq(pn_plan_build(r, &q, 1, &p, NULL, &err), PN_ERR_TYPE);
    cr_assert_not_null(strstr(err.msg, "q8_0"), "%s", err.msg);
    pn_tensor_desc z = desc2("z", 0, 4);
    cr_assert_eq(pn_plan_build(r, &z, 1, &p, NULL, &err), PN_ERR_TENSOR);
    pn_tensor_desc extra = desc2("e", 4, 0);
    extra.ne[1] = 3; /* beyond n_dims but not 1 */
    cr_assert_eq(pn_plan_build(r, &extra, 1, &p, NULL, &err), PN_ERR_TENSOR);
    cr_assert_null(p);
    pn_recipe_free(r);
}

/* ---- Qwen3.8-27B at full size ---- */

/* Mix P0k by K, as the format's text states it (docs/format.md#mix-p0k19), written apart from the
 * recipe. */
static int k_table_type(const pn_tensor_desc *t)
{
    const char *n = t->name;
    size_t len = strlen(n);
#define ENDS(s) (len >= strlen(s) && strcmp(n + len - strlen(s), s) == 0)
    if (strcmp(n, "token_embd.weight") == 0)
        return PN_TYPE_Q3_K;
    if (strcmp(n, "output.weight") == 0)
        return PN_TYPE_Q4_K;
    if (ENDS(".ssm_alpha.weight") || ENDS(".ssm_beta.weight"))
        return PN_TYPE_Q8_0;
    if (ENDS("_norm.weight") || t->n_dims == 1 || ENDS(".ssm_conv1d.weight"))
        return PN_TYPE_F32;
    if (ENDS(".attn_k.weight") || ENDS(".attn_v.weight"))
        return PN_TYPE_PN4T;
    if (t->ne[0] == 6144 || t->ne[0] == 17408)
        return PN_TYPE_PN4T;
    if (t->ne[0] == 5120)
        return PN_TYPE_PN3T;
#undef ENDS
    return -1;
}

static pn_plan *full_plan(const char *recipe_path, pn_tensor_desc **descs, size_t *n)
{
    pn_qwen38_config c = pn_qwen38_config_full();
    pn_error err = { 0 };
    cr_assert_eq(pn_qwen38_tensors(&c, descs, n, &err), PN_OK, "%s", err.msg);
    pn_recipe *r = load_ok(recipe_path);
    pn_plan *p = build_ok(r, *descs, *n);
    pn_recipe_free(r);
    return p;
}

Test(qwen38, the_full_size_shapes_are_those_of_qwen3_8_27b)
{
    pn_qwen38_config c = pn_qwen38_config_full();
    pn_tensor_desc *d;
    size_t n;
    pn_error err = { 0 };
    cr_assert_eq(pn_qwen38_tensors(&c, &d, &n, &err), PN_OK);
    cr_assert_eq(n, 3 + 48 * 14 + 16 * 11);
    cr_assert_eq(n, pn_qwen38_tensor_count(&c));
    struct {
        const char *name;
        uint32_t dims;
        int64_t ne0, ne1;
    } want[] = {
        { "token_embd.weight", 2, 5120, 248320 },
        { "blk.0.attn_qkv.weight", 2, 5120, 10240 },
        { "blk.0.attn_gate.weight", 2, 5120, 6144 },
        { "blk.0.ssm_alpha.weight", 2, 5120, 48 },
        { "blk.0.ssm_beta.weight", 2, 5120, 48 },
        { "blk.0.ssm_out.weight", 2, 6144, 5120 },
        { "blk.0.ssm_conv1d.weight", 2, 4, 10240 },
        { "blk.0.ssm_a", 1, 48, 1 },
        { "blk.0.ssm_dt.bias", 1, 48, 1 },
        { "blk.0.ssm_norm.weight", 1, 128, 1 },
        { "blk.3.attn_q.weight", 2, 5120, 12288 },
        { "blk.3.attn_k.weight", 2, 5120, 1024 },
        { "blk.3.attn_v.weight", 2, 5120, 1024 },
        { "blk.3.attn_output.weight", 2, 6144, 5120 },
        { "blk.3.attn_q_norm.weight", 1, 256, 1 },
        { "blk.63.attn_k_norm.weight", 1, 256, 1 },
        { "blk.62.attn_norm.weight", 1, 5120, 1 },
        { "blk.62.post_attention_norm.weight", 1, 5120, 1 },
        { "blk.62.ffn_gate.weight", 2, 5120, 17408 },
        { "blk.62.ffn_up.weight", 2, 5120, 17408 },
        { "blk.62.ffn_down.weight", 2, 17408, 5120 },
        { "output_norm.weight", 1, 5120, 1 },
        { "output.weight", 2, 5120, 248320 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        size_t k = 0;
        while (k < n && strcmp(d[k].name, want[i].name) != 0)
            k++;
        cr_assert_lt(k, n, "%s missing", want[i].name);
        cr_assert_eq(d[k].n_dims, want[i].dims, "%s", want[i].name);
        cr_assert_eq(d[k].ne[0], want[i].ne0, "%s", want[i].name);
        cr_assert_eq(d[k].ne[1], want[i].ne1, "%s", want[i].name);
    }
    int full = 0;
    for (size_t k = 0; k < n; k++) {
        int layer;
        if (sscanf(d[k].name, "blk.%d.attn_q.weight", &layer) == 1 &&
            strstr(d[k].name, "attn_q.weight")) {
            cr_assert_eq(layer % 4, 3, "block %d is full attention", layer);
            full++;
        }
    }
    cr_assert_eq(full, 16);
    cr_assert_str_eq(d[0].name, "token_embd.weight");
    cr_assert_str_eq(d[n - 1].name, "output.weight");
    free(d);
}

Test(qwen38, the_shipped_recipe_on_the_full_size_model_equals_the_k_based_table)
{
    pn_tensor_desc *d;
    size_t n;
    pn_plan *p = full_plan(MAIN_RECIPE, &d, &n);
    size_t pn3 = 0;
    for (size_t i = 0; i < n; i++) {
        const pn_plan_tensor *t = &p->tensors[i];
        int want = k_table_type(&d[i]);
        cr_assert_neq(want, -1, "%s is not covered by the K table", d[i].name);
        cr_assert_eq(t->type, want, "%s [%lld x %lld]: recipe gives %s, the K table %s", t->name,
                     (long long)t->ne[0], (long long)t->ne[1], tname(t->type), tname(want));
        cr_assert_eq(t->rotated, pn_type_is_pn(want), "%s", t->name);
        if (t->rotated)
            cr_assert_eq(t->rotation_block, 1024, "%s: K=%lld", t->name, (long long)t->ne[0]);
        else
            cr_assert_eq(t->rotation_block, 0);
        cr_assert_eq(t->candidate, want == PN_TYPE_PN3T, "%s", t->name);
        pn3 += want == PN_TYPE_PN3T;
    }
    cr_assert_eq(p->n_candidates, pn3);
    cr_assert_eq(pn3, 48 * 4 + 16 * 3,
                 "attn_qkv/attn_gate/ffn_gate/ffn_up and attn_q/ffn_gate/ffn_up");
    pn_plan_free(p);
    free(d);
}

Test(qwen38, the_p0k_plus_0_payload_is_about_12_47_gb)
{
    pn_tensor_desc *d;
    size_t n;
    pn_plan *p = full_plan(MAIN_RECIPE, &d, &n);
    pn_plan_totals t;
    pn_plan_totals_get(p, &t);
    cr_assert_eq(t.payload_bytes, t.pn_bytes + t.other_bytes);
    double rel = fabs((double)t.payload_bytes - 12.47e9) / 12.47e9;
    printf("P0k+0: payload %" PRIu64 " bytes (%.4f GB): PN %" PRIu64 " + other %" PRIu64
           "; %.4f bpw over PN weights, %.4f over all %" PRIu64 " weights; %zu candidates; "
           "data section with 32-byte padding %" PRIu64 "\n",
           t.payload_bytes, t.payload_bytes / 1e9, t.pn_bytes, t.other_bytes, t.bpw_pn, t.bpw_all,
           t.n_weights, t.n_candidates, pn_plan_data_bytes(p, 32));
    cr_assert_lt(rel, 0.01, "payload %" PRIu64 " is not within 1%% of 12.47e9", t.payload_bytes);
    cr_assert_eq(t.payload_bytes, 12473886720ull, "the exact figure from the shapes");
    cr_assert_eq(t.n_promoted, 0);
    char label[80];
    pn_plan_mix_label(p, label, sizeof label);
    cr_assert_str_eq(label, "P0k+0");
    pn_plan_free(p);
    free(d);
}

Test(qwen38, promoting_19_names_gives_p0k_plus_19_and_the_bytes_of_pn4t)
{
    pn_tensor_desc *d;
    size_t n;
    pn_plan *p = full_plan(MAIN_RECIPE, &d, &n);
    pn_plan_totals t0, t1;
    pn_plan_totals_get(p, &t0);
    static char names[19][64];
    const char *list[19];
    for (int i = 0; i < 19; i++) {
        snprintf(names[i], sizeof names[i], "blk.%d.ffn_up.weight", 60 - i * 3);
        list[i] = names[i];
    }
    pn_error err = { 0 };
    cr_assert_eq(pn_plan_promote_by_names(p, list, 19, &err), PN_OK, "%s", err.msg);
    pn_plan_totals_get(p, &t1);
    /* ffn_up: 17408 rows of 5120: pn3t 64 blocks, pn4t 80 blocks of 34 bytes */
    cr_assert_eq(t1.payload_bytes - t0.payload_bytes, 19ull * 17408 * (80 - 64) * 34);
    cr_assert_eq(t1.n_promoted, 19);
    char label[80];
    pn_plan_mix_label(p, label, sizeof label);
    cr_assert_str_eq(label, "P0k+19");
    const char *got[32];
    cr_assert_eq(pn_plan_promoted_names(p, got, 32), 19);
    cr_assert_str_eq(got[0], "blk.6.ffn_up.weight", "tensor order, not list order");
    cr_assert_str_eq(got[18], "blk.60.ffn_up.weight");
    pn_plan_free(p);
    free(d);
}

Test(qwen38, promote_by_names_refuses_a_non_candidate_naming_it)
{
    pn_tensor_desc *d;
    size_t n;
    pn_plan *p = full_plan(MAIN_RECIPE, &d, &n);
    pn_error err = { 0 };
    const char *a[] = { "blk.0.ffn_up.weight", "blk.3.attn_k.weight" };
    cr_assert_eq(pn_plan_promote_by_names(p, a, 2, &err), PN_ERR_MISMATCH);
    cr_assert_not_null(strstr(err.msg, "blk.3.attn_k.weight"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "not a promotion candidate"), "%s", err.msg);
    cr_assert_eq(p->n_promoted, 0, "a failed promotion leaves none");
    cr_assert_eq(p->tensors[pn_plan_find(p, "blk.0.ffn_up.weight")].type, PN_TYPE_PN3T);
    const char *b[] = { "blk.0.nothing.weight" };
    cr_assert_eq(pn_plan_promote_by_names(p, b, 1, &err), PN_ERR_MISMATCH);
    cr_assert_not_null(strstr(err.msg, "blk.0.nothing.weight"), "%s", err.msg);
    const char *c[] = { "blk.0.ffn_up.weight", "blk.0.ffn_up.weight" };
    cr_assert_eq(pn_plan_promote_by_names(p, c, 2, &err), PN_ERR_MISMATCH);
    cr_assert_not_null(strstr(err.msg, "twice"), "%s", err.msg);
    pn_plan_free(p);
    free(d);
}

Test(qwen38, the_main_recipe_refuses_the_narrow_token_embd_and_output_of_the_tiny_model)
{
    pn_qwen38_config c = pn_qwen38_config_full();
    c.n_embd = 320;
    c.n_layers = 2;
    c.n_vocab = 64;
    pn_tensor_desc *d;
    size_t n;
    pn_error err = { 0 };
    cr_assert_eq(pn_qwen38_tensors(&c, &d, &n, &err), PN_OK);
    pn_recipe *r = load_ok(MAIN_RECIPE);
    pn_plan *p = NULL;
    cr_assert_eq(pn_plan_build(r, d, n, &p, NULL, &err), PN_ERR_RECIPE);
    cr_assert_not_null(strstr(err.msg, "token_embd.weight"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "K=320"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "q3_K"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "qwen3.8-27b-pn3.mix:"), "%s", err.msg);
    pn_recipe_free(r);
    free(d);
}

typedef struct scale_case {
    int scale;
    int64_t embd, inner, qkv, q, kv, ff;
} scale_case;

ParameterizedTestParameters(qwen38, scaled_widths_round_to_their_granules)
{
    static scale_case cases[] = {
        { 1, 5120, 6144, 10240, 12288, 1024, 17408 }, { 2, 2560, 3072, 5120, 6144, 512, 8704 },
        { 3, 1280, 2048, 3392, 4096, 320, 5824 }, /* 5120/3 -> 1280; 10240/3 = 3413.3 -> 3392 */
        { 4, 1280, 1536, 2560, 3072, 256, 4352 },     { 16, 1280, 384, 640, 768, 64, 1088 },
        { 1000, 1280, 64, 64, 64, 64, 64 }, /* never below one granule */
    };
    return cr_make_param_array(scale_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(scale_case *c, qwen38, scaled_widths_round_to_their_granules)
{
    pn_qwen38_config s = pn_qwen38_config_scaled(c->scale, 5, 1000);
    cr_assert_eq(s.n_layers, 5);
    cr_assert_eq(s.n_vocab, 1000);
    cr_assert_eq(s.n_embd, c->embd, "scale %d: n_embd %lld", c->scale, (long long)s.n_embd);
    cr_assert_eq(s.n_inner, c->inner, "scale %d: n_inner %lld", c->scale, (long long)s.n_inner);
    cr_assert_eq(s.n_qkv, c->qkv, "scale %d: n_qkv %lld", c->scale, (long long)s.n_qkv);
    cr_assert_eq(s.n_q, c->q, "scale %d: n_q %lld", c->scale, (long long)s.n_q);
    cr_assert_eq(s.n_kv, c->kv, "scale %d: n_kv %lld", c->scale, (long long)s.n_kv);
    cr_assert_eq(s.n_ff, c->ff, "scale %d: n_ff %lld", c->scale, (long long)s.n_ff);
    cr_assert_eq(s.n_ssm_heads, 48);
    cr_assert_eq(s.head_dim, 256);
    cr_assert_eq(s.full_attn_interval, 4);
    cr_assert_eq(s.weight_type, PN_TYPE_F32);
}

Test(qwen38, the_shipped_recipe_applies_unchanged_to_a_scaled_model)
{
    pn_qwen38_config s = pn_qwen38_config_scaled(4, 8, 2560);
    pn_tensor_desc *d;
    size_t n;
    pn_error err = { 0 };
    cr_assert_eq(pn_qwen38_tensors(&s, &d, &n, &err), PN_OK, "%s", err.msg);
    pn_recipe *r = load_ok(MAIN_RECIPE);
    pn_plan *p = build_ok(r, d, n);
    for (size_t i = 0; i < n; i++) {
        const pn_plan_tensor *t = &p->tensors[i];
        if (t->ne[0] == 1280 && t->n_dims == 2 && strstr(t->name, "ssm_alpha") == NULL &&
            strstr(t->name, "ssm_beta") == NULL && strstr(t->name, "attn_k.") == NULL &&
            strstr(t->name, "attn_v.") == NULL && i != 0 && i != n - 1)
            cr_assert_eq(t->type, PN_TYPE_PN3T, "%s", t->name);
        if (strstr(t->name, "ffn_down") || strstr(t->name, "ssm_out") ||
            strstr(t->name, "attn_output"))
            cr_assert_eq(t->type, PN_TYPE_PN4T, "%s", t->name);
        if (t->rotated)
            cr_assert_eq(t->rotation_block, pn_hadamard_block_size(t->ne[0], 1024));
    }
    cr_assert_eq(p->tensors[0].type, PN_TYPE_Q3_K);
    cr_assert_eq(p->tensors[n - 1].type, PN_TYPE_Q4_K);
    pn_plan_free(p);
    pn_recipe_free(r);
    free(d);
}

Test(qwen38, an_invalid_config_is_refused)
{
    pn_qwen38_config s = pn_qwen38_config_scaled(0, 4, 100);
    pn_tensor_desc *d = (pn_tensor_desc *)0x1;
    size_t n = 7;
    pn_error err = { 0 };
    cr_assert_eq(pn_qwen38_tensors(&s, &d, &n, &err), PN_ERR_USAGE);
    cr_assert_null(d);
    cr_assert_eq(n, 0);
    pn_qwen38_config c = pn_qwen38_config_full();
    c.full_attn_interval = 0;
    cr_assert_eq(pn_qwen38_tensors(&c, &d, &n, &err), PN_ERR_USAGE);
}

/* ---- the golden tiny model ---- */

typedef struct expect_row {
    char name[64];
    uint32_t n_dims;
    int64_t ne[2];
    char src[8], type[8];
} expect_row;

static size_t read_expect(expect_row *rows, size_t cap)
{
    size_t size;
    char *text = tu_read_file(TINY_EXPECT, &size);
    char *buf = realloc(text, size + 1);
    cr_assert_not_null(buf);
    buf[size] = '\0';
    size_t n = 0;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        cr_assert_lt(n, cap);
        expect_row *e = &rows[n++];
        char shape[64];
        cr_assert_eq(sscanf(line, "%63s %63s %7s %7s", e->name, shape, e->src, e->type), 4, "%s",
                     line);
        long long a, b;
        if (sscanf(shape, "%lldx%lld", &a, &b) == 2) {
            e->n_dims = 2;
            e->ne[0] = a;
            e->ne[1] = b;
        } else {
            cr_assert_eq(sscanf(shape, "%lld", &a), 1);
            e->n_dims = 1;
            e->ne[0] = a;
            e->ne[1] = 1;
        }
    }
    free(buf);
    return n;
}

static pn_qwen38_config tiny_config(void)
{
    pn_qwen38_config c = {
        .n_layers = 2,
        .full_attn_interval = 2,
        .n_embd = 320,
        .n_inner = 64,
        .n_qkv = 192,
        .n_q = 128,
        .n_kv = 64,
        .n_ff = 64,
        .n_vocab = 64,
        .n_ssm_heads = 1,
        .conv_kernel = 4,
        .ssm_norm = 64,
        .head_dim = 64,
        .weight_type = PN_TYPE_F32,
        .norm_type = PN_TYPE_F32,
    };
    return c;
}

Test(tiny, a_config_reproduces_the_golden_tiny_models_tensor_list)
{
    expect_row rows[64];
    size_t n_exp = read_expect(rows, 64);
    pn_qwen38_config c = tiny_config();
    pn_tensor_desc *d;
    size_t n;
    pn_error err = { 0 };
    cr_assert_eq(pn_qwen38_tensors(&c, &d, &n, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(n, n_exp, "%zu tensors, the expect file has %zu", n, n_exp);
    for (size_t i = 0; i < n; i++) {
        cr_assert_str_eq(d[i].name, rows[i].name, "tensor %zu", i);
        cr_assert_eq(d[i].n_dims, rows[i].n_dims, "%s", d[i].name);
        cr_assert_eq(d[i].ne[0], rows[i].ne[0], "%s", d[i].name);
        cr_assert_eq(d[i].ne[1], rows[i].ne[1], "%s", d[i].name);
        cr_assert_str_eq(rows[i].src, "F32");
        cr_assert_eq(d[i].src_type, PN_TYPE_F32);
    }
    free(d);
}

Test(tiny, the_test_recipe_gives_the_expected_types_with_q8_0_for_token_embd_and_output)
{
    expect_row rows[64];
    size_t n_exp = read_expect(rows, 64);
    pn_qwen38_config c = tiny_config();
    pn_tensor_desc *d;
    size_t n;
    pn_error err = { 0 };
    cr_assert_eq(pn_qwen38_tensors(&c, &d, &n, &err), PN_OK);
    cr_assert_eq(n, n_exp);
    pn_recipe *r = load_ok(TEST_RECIPE);
    pn_plan *p = build_ok(r, d, n);
    uint64_t pn_offset = 0;
    size_t n_pn = 0;
    for (size_t i = 0; i < n; i++) {
        const pn_plan_tensor *t = &p->tensors[i];
        const pn_type_traits *want = pn_type_traits_by_name(rows[i].type);
        cr_assert_not_null(want);
        if (strcmp(t->name, "token_embd.weight") == 0 || strcmp(t->name, "output.weight") == 0) {
            /* the expect file's q3_K / q4_K cannot hold K = 320: the chain's fallback */
            cr_assert(want->id == PN_TYPE_Q3_K || want->id == PN_TYPE_Q4_K);
            cr_assert_eq(t->type, PN_TYPE_Q8_0, "%s: %s", t->name, tname(t->type));
            cr_assert_eq(t->chain_index, 1);
            cr_assert_eq(t->bytes, 320ull / 32 * 34 * 64);
            continue;
        }
        cr_assert_eq(t->type, want->id, "%s: plan %s, expected %s", t->name, tname(t->type),
                     want->name);
        cr_assert_eq(t->chain_index, 0);
        cr_assert_eq(t->rotated, pn_type_is_pn(want->id), "%s", t->name);
        if (t->rotated) {
            /* README of the golden data: B = 64 for K = 320 and K = 64 */
            cr_assert_eq(t->rotation_block, 64, "%s", t->name);
            pn_offset += t->bytes;
            n_pn++;
        }
    }
    cr_assert_eq(n_pn, 13);
    cr_assert_eq(pn_offset, 152320, "the size of tiny.f32.pn.bin");
    cr_assert_eq(p->tensors[pn_plan_find(p, "blk.0.attn_qkv.weight")].bytes, 26112);
    cr_assert_eq(p->tensors[pn_plan_find(p, "blk.1.attn_q.weight")].bytes, 17408);
    cr_assert_eq(p->tensors[pn_plan_find(p, "blk.0.ssm_out.weight")].bytes, 10880);
    cr_assert_eq(p->n_candidates, 7, "every pn3t tensor has K = 320, which 64 divides");
    char label[80];
    pn_plan_mix_label(p, label, sizeof label);
    cr_assert_str_eq(label, "P0k-fallback+0");
    printf("tiny model with test-fallback.mix: token_embd.weight and output.weight -> q8_0 "
           "(the chain's fallback); the 13 PN tensors hold %" PRIu64 " bytes\n",
           pn_offset);
    pn_plan_free(p);
    pn_recipe_free(r);
    free(d);
}

Test(plan, data_bytes_pad_every_tensor_to_the_alignment)
{
    pn_recipe *r = parse_ok(HEAD "rule * => f32\n");
    pn_tensor_desc d[3] = { desc2("a", 3, 0), desc2("b", 8, 0), desc2("c", 5, 0) };
    pn_plan *p = build_ok(r, d, 3);
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
    pn_recipe *r = parse_ok("mix N\nrotation none\nfile_type 2\nrule * => pn3t\n");
    pn_tensor_desc d = desc2("w", 320, 4);
    pn_plan *p = build_ok(r, &d, 1);
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
    pn_recipe *r = parse_ok(HEAD "rule * => pn3t\n");
    pn_tensor_desc d[2] = { desc2("a", 320, 2), desc2("b", 160, 2) };
    pn_plan *p = build_ok(r, d, 2);
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

Test(measure, a_saved_measurement_reloads_exactly)
{
    pn_plan *p = candidates_plan(5, 2);
    double e3[5] = { 0.1, 1.0 / 3.0, 4.9406564584124654e-324, 1e300, 0.0 };
    double e4[5] = { 0.05, 2.0 / 7.0, 0.0, 2.2250738585072014e-308, 0.0 };
    pn_measurement *m = measurement_for(p, e3, e4);
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
    pn_plan *p = candidates_plan(3, 1);
    double e[3] = { 0.5, 0.25, 0.125 };
    pn_measurement *m = measurement_for(p, e, e);
    pn_error err = { 0 };
    pn_measure_params want = test_params();
    cr_assert_eq(pn_measurement_check_params(m, "m.txt", &want, p, &err), PN_OK, "%s", err.msg);

    want.source_header_hash ^= 1;
    cr_assert_eq(pn_measurement_check_params(m, "m.txt", &want, p, &err), PN_ERR_MISMATCH);
    cr_assert(strstr(err.msg, "m.txt: measured on another source") &&
                  strstr(err.msg, "0123456789abcdef") && strstr(err.msg, "0123456789abcdee"),
              "%s", err.msg);
    want = test_params();
    snprintf(want.quantizer, sizeof want.quantizer, "pn-quantize 9.9");
    cr_assert_eq(pn_measurement_check_params(m, "m.txt", &want, p, &err), PN_ERR_MISMATCH);
    cr_assert(strstr(err.msg, "another quantizer version") &&
                  strstr(err.msg, "'pn-quantize test'") && strstr(err.msg, "'pn-quantize 9.9'"),
              "%s", err.msg);
    want = test_params();
    want.rotation_cap = 0;
    cr_assert_eq(pn_measurement_check_params(m, "m.txt", &want, p, &err), PN_ERR_MISMATCH);
    cr_assert(strstr(err.msg, "another rotation: hadamard:1024, this run uses none"), "%s",
              err.msg);
    want = test_params();
    want.sample_max_rows = 4;
    cr_assert_eq(pn_measurement_check_params(m, "m.txt", &want, p, &err), PN_ERR_MISMATCH);
    cr_assert(strstr(err.msg, "256 per tensor, this run samples 4 (--measure-rows)"), "%s",
              err.msg);

    /* another candidate set: one more, one less */
    want = test_params();
    pn_plan *more = candidates_plan(4, 1), *fewer = candidates_plan(2, 1);
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
    pn_plan *p = candidates_plan(3, 2);
    double e[3] = { 0.5, 0.25, 0.125 };
    pn_measurement *m = measurement_for(p, e, e);
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
    pn_plan *p = candidates_plan(1, 0);
    double e3[1] = { NAN }, e4[1] = { 0 };
    pn_measurement *m = measurement_for(p, e3, e4);
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
    pn_measure_params mp = test_params();
    snprintf(mp.quantizer, sizeof mp.quantizer, "two\nlines");
    cr_assert_eq(pn_measurement_new(p, &mp, &bad, &err), PN_ERR_USAGE);
    mp = test_params();
    mp.sample_max_rows = 0;
    cr_assert_eq(pn_measurement_new(p, &mp, &bad, &err), PN_ERR_USAGE);
    pn_measurement_free(m);
    pn_plan_free(p);
    tu_rm_rf(dir);
    free(dir);
}

/* ---- sizes ---- */

typedef struct size_case {
    char text[40];
    uint64_t bytes;
} size_case;

ParameterizedTestParameters(size, parses_bytes_decimal_and_binary_units_exactly)
{
    static size_case cases[] = {
        { "4096", 4096 },
        { "0", 0 },
        { "12B", 12 },
        { "12.5GiB", 13421772800ull },
        { "12.5 GiB", 13421772800ull },
        { "13GB", 13000000000ull },
        { "12.47GB", 12470000000ull },
        { "1.5KiB", 1536 },
        { "1kB", 1000 },
        { "1KB", 1000 },
        { "2MiB", 2097152 },
        { "3MB", 3000000 },
        { "1TiB", 1099511627776ull },
        { "1TB", 1000000000000ull },
        { "0.1B", 0 },
        { "0.0009765625KiB", 1 },
        { "1.9999B", 1 },
        { "18446744073709551615", UINT64_MAX },
        { "16777215.999999999999TiB", 18446744073709551614ull },
        /* gguf-split's single letters, powers of 1000, decimals exact */
        { "50G", 50000000000ull },
        { "500M", 500000000ull },
        { "13G", 13000000000ull },
        { "1.5G", 1500000000ull },
        { "0.05GB", 50000000ull },
        { "2k", 2000 },
        { "2K", 2000 },
        { "1T", 1000000000000ull },
        /* exponents, as the help's 13e9 */
        { "13e9", 13000000000ull },
        { "1.25e3", 1250 },
        { "1e0", 1 },
        { "2e3 KiB", 2048000 },
    };
    return cr_make_param_array(size_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(size_case *c, size, parses_bytes_decimal_and_binary_units_exactly)
{
    uint64_t v = 1;
    pn_error err = { 0 };
    cr_assert_eq(pn_parse_size(c->text, &v, &err), PN_OK, "'%s': %s", c->text, err.msg);
    cr_assert_eq(v, c->bytes, "'%s' gave %" PRIu64 ", expected %" PRIu64, c->text, v, c->bytes);
}

ParameterizedTestParameters(size, refuses_junk_quoting_it)
{
    static size_case cases[] = {
        { "", 0 },
        { "GiB", 0 },
        { "1.GiB", 0 },
        { ".5GiB", 0 },
        { "-1", 0 },
        { "+1", 0 },
        { "1e", 0 },
        { "12.5 gib", 0 },
        { "12x", 0 },
        { "12 ", 0 },
        { "1e-3", 0 },
        { "1e20", 0 },
        { "1e100", 0 },
        { "1E9", 0 },
        { "12g", 0 },
        { "1m", 0 },
        { "5GG", 0 },
        { " 12", 0 },
        { "12  GB", 0 },
        { "12Gb", 0 },
        { "12EiB", 0 },
        { "1,000", 0 },
        { "18446744073709551616", 0 },
        { "17179869184GiB", 0 },
        { "123456789012345678901", 0 },
    };
    return cr_make_param_array(size_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(size_case *c, size, refuses_junk_quoting_it)
{
    uint64_t v = 7;
    pn_error err = { 0 };
    cr_assert_eq(pn_parse_size(c->text, &v, &err), PN_ERR_USAGE, "'%s' should be refused", c->text);
    cr_assert_eq(v, 7, "nothing written on error");
    char quoted[64];
    snprintf(quoted, sizeof quoted, "'%s'", c->text);
    cr_assert_not_null(strstr(err.msg, quoted), "'%s' should quote the input", err.msg);
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
    pn_recipe *r = parse_ok("mix A\nrotation none\nmtp drop\nrule * => f32\n");
    cr_assert_eq(r->mtp, PN_RECIPE_MTP_DROP);
    cr_assert_eq(r->mtp_line, 3);
    pn_recipe_free(r);
    r = parse_ok("mix A\nrotation none\nmtp keep # as the converter\nrule * => f32\n");
    cr_assert_eq(r->mtp, PN_RECIPE_MTP_KEEP);
    pn_recipe_free(r);
    r = parse_ok("mix A\nrotation none\nrule * => f32\n");
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
