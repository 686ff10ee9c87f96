/* recipe_override.c - the type overrides llama-quantize users type
 * (--tensor-type PATTERN=TYPE, --output-tensor-type TYPE,
 * --token-embedding-type TYPE), made rules that stand before a recipe's own
 * so that the first match wins as everywhere in the language (recipe.h).
 * --tensor-type's PATTERN is a regular expression searched in the name, as
 * llama-quantize takes it, and keeps the glob meaning recipes give * and ?. */
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mix/recipe.h"
#include "quant/types.h"

void pn_recipe_override_text(const pn_recipe_override *ov, char *buf, size_t size)
{
    static const char *const opt[] = { "--tensor-type", "--output-tensor-type",
                                       "--token-embedding-type" };
    snprintf(buf, size, "%s %s", opt[ov->kind], ov->value);
}

/* The type named by text (case-insensitive, one the toolchain writes). */
static int override_type(const char *text, const char *opt, pn_error *err)
{
    const pn_type_traits *t = pn_type_traits_by_name(text);
    if (!t || !pn_recipe_type_supported(t->id)) {
        pn_error_set(err, PN_ERR_USAGE,
                     "%s: '%.64s' is not a type the toolchain writes (f32, f16, bf16, q8_0, "
                     "q4_K, q3_K, pn3t, pn4t)",
                     opt, text);
        return -1;
    }
    return t->id;
}

static void override_rule_free(pn_recipe_rule *rule)
{
    free(rule->text);
    if (rule->patterns)
        free(rule->patterns[0]);
    free(rule->patterns);
    if (rule->regex)
        regfree(rule->regex);
    free(rule->regex);
    memset(rule, 0, sizeof *rule);
}

/* --tensor-type's PATTERN (n bytes of text) into the rule: a POSIX extended
 * regular expression searched in the name, as llama-quantize's
 * std::regex_search; with * or ? also a glob of the whole name (recipe.h).
 * PN_ERR_USAGE naming the option when it is neither. */
static pn_status override_patterns(const char *text, size_t n, const char *typed,
                                   pn_recipe_rule *rule, pn_error *err)
{
    char pattern[256];
    snprintf(pattern, sizeof pattern, "%.*s", (int)n, text);
    const bool glob = memchr(text, '*', n) || memchr(text, '?', n);
    regex_t *re = malloc(sizeof *re);
    if (!re)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    int rc = regcomp(re, pattern, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        char why[128];
        regerror(rc, re, why, sizeof why);
        free(re);
        re = NULL;
        if (!glob)
            return pn_error_set(err, PN_ERR_USAGE,
                                "%s: '%s' is not a regular expression (%s); PATTERN is a POSIX "
                                "extended regular expression searched in the name, as "
                                "llama-quantize takes it ('ffn_(up|gate)', "
                                "'blk\\.[0-9]+\\.ffn_down'), or a glob of the whole name",
                                typed, pattern, why);
    }
    rule->regex = re;
    if (glob) {
        rule->patterns = calloc(1, sizeof *rule->patterns);
        if (!rule->patterns || !(rule->patterns[0] = strdup(pattern)))
            return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        rule->n_patterns = 1;
    }
    return PN_OK;
}

/* One override as a rule: its patterns (owned) and its one type. */
static pn_status override_rule(const pn_recipe_override *ov, pn_recipe_rule *rule, pn_error *err)
{
    char text[320];
    pn_recipe_override_text(ov, text, sizeof text);
    const char *opt = ov->kind == PN_OVERRIDE_TENSOR_TYPE ? "--tensor-type"
                      : ov->kind == PN_OVERRIDE_OUTPUT    ? "--output-tensor-type"
                                                          : "--token-embedding-type";
    memset(rule, 0, sizeof *rule);
    rule->line = 0;
    if (!(rule->text = strdup(text)))
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    const char *type_text = ov->value;
    pn_status st = PN_OK;
    if (ov->kind == PN_OVERRIDE_TENSOR_TYPE) {
        const char *eq = strrchr(ov->value, '=');
        size_t n = eq ? (size_t)(eq - ov->value) : 0;
        if (!eq || n == 0 || !eq[1] || n > 200)
            st = pn_error_set(err, PN_ERR_USAGE,
                              "--tensor-type: expected PATTERN=TYPE (attn_v=q8_0, "
                              "blk.*.ffn_down.weight=pn4t), found '%.64s'",
                              ov->value);
        else
            st = override_patterns(ov->value, n, text, rule, err);
        type_text = eq ? eq + 1 : "";
    } else {
        rule->patterns = calloc(1, sizeof *rule->patterns);
        if (!rule->patterns ||
            !(rule->patterns[0] =
                  strdup(ov->kind == PN_OVERRIDE_OUTPUT ? "output.weight" : "token_embd.weight")))
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        else
            rule->n_patterns = 1;
    }
    int type = st ? -1 : override_type(type_text, opt, err);
    if (type < 0) {
        override_rule_free(rule);
        return st ? st : PN_ERR_USAGE;
    }
    rule->n_types = 1;
    rule->types[0] = type;
    return PN_OK;
}

pn_status pn_recipe_apply_overrides(pn_recipe *r, const pn_recipe_override *ov, size_t n,
                                    pn_error *err)
{
    if (n == 0)
        return PN_OK;
    /* --tensor-type in the order given, then the output, then the token
     * embedding (llama-quantize: a --tensor-type match wins over both) */
    pn_recipe_rule *rules = calloc(n + r->n_rules, sizeof *rules);
    if (!rules)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    size_t k = 0;
    pn_status st = PN_OK;
    for (int kind = PN_OVERRIDE_TENSOR_TYPE; kind <= PN_OVERRIDE_TOKEN_EMBD && !st; kind++)
        for (size_t i = 0; i < n && !st; i++)
            if ((int)ov[i].kind == kind && !(st = override_rule(&ov[i], &rules[k], err)))
                k++;
    if (st) {
        for (size_t i = 0; i < k; i++)
            override_rule_free(&rules[i]);
        free(rules);
        return st;
    }
    memcpy(rules + k, r->rules, r->n_rules * sizeof *rules);
    free(r->rules);
    r->rules = rules;
    r->n_rules += k;
    return PN_OK;
}
