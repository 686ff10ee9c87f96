/* recipe_override.c - the type overrides llama-quantize users type
 * (--tensor-type PATTERN=TYPE, --output-tensor-type TYPE,
 * --token-embedding-type TYPE), made rules that stand before a recipe's own
 * so that the first match wins as everywhere in the language (recipe.h). */
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

/* One override as a rule: its pattern (owned) and its one type. */
static pn_status override_rule(const pn_recipe_override *ov, pn_recipe_rule *rule, pn_error *err)
{
    char text[320];
    pn_recipe_override_text(ov, text, sizeof text);
    const char *opt = ov->kind == PN_OVERRIDE_TENSOR_TYPE ? "--tensor-type"
                      : ov->kind == PN_OVERRIDE_OUTPUT    ? "--output-tensor-type"
                                                          : "--token-embedding-type";
    char pattern[256];
    const char *type_text = ov->value;
    if (ov->kind == PN_OVERRIDE_TENSOR_TYPE) {
        const char *eq = strrchr(ov->value, '=');
        size_t n = eq ? (size_t)(eq - ov->value) : 0;
        if (!eq || n == 0 || !eq[1] || n > 200)
            return pn_error_set(err, PN_ERR_USAGE,
                                "--tensor-type: expected PATTERN=TYPE (attn_v=q8_0, "
                                "blk.*.ffn_down.weight=pn4t), found '%.64s'",
                                ov->value);
        /* llama-quantize searches the name for a plain pattern (attn_v);
         * a pattern with * or ? is a glob of the whole name, as in recipes */
        bool glob = memchr(ov->value, '*', n) || memchr(ov->value, '?', n);
        snprintf(pattern, sizeof pattern, glob ? "%.*s" : "*%.*s*", (int)n, ov->value);
        type_text = eq + 1;
    } else {
        snprintf(pattern, sizeof pattern, "%s",
                 ov->kind == PN_OVERRIDE_OUTPUT ? "output.weight" : "token_embd.weight");
    }
    int type = override_type(type_text, opt, err);
    if (type < 0)
        return PN_ERR_USAGE;
    memset(rule, 0, sizeof *rule);
    rule->line = 0;
    rule->text = strdup(text);
    rule->patterns = malloc(sizeof *rule->patterns);
    if (rule->patterns)
        rule->patterns[0] = strdup(pattern);
    if (!rule->text || !rule->patterns || !rule->patterns[0]) {
        free(rule->text);
        if (rule->patterns)
            free(rule->patterns[0]);
        free(rule->patterns);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    rule->n_patterns = 1;
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
        for (size_t i = 0; i < k; i++) {
            free(rules[i].text);
            free(rules[i].patterns[0]);
            free(rules[i].patterns);
        }
        free(rules);
        return st;
    }
    memcpy(rules + k, r->rules, r->n_rules * sizeof *rules);
    free(r->rules);
    r->rules = rules;
    r->n_rules += k;
    return PN_OK;
}
