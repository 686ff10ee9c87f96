/* recipe.c - the recipe language: parsing a recipe and matching a tensor to
 * its rule and type (see recipe.h). */
#include "mix/recipe.h"

#include "common/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hadamard/hadamard.h"
#include "mix/glob.h"
#include "quant/types.h"

/* The types the pipeline can write; a recipe naming another would only fail
 * later, in the middle of a conversion. */
static const int supported_types[] = {
    PN_TYPE_F32,  PN_TYPE_F16,  PN_TYPE_BF16, PN_TYPE_Q8_0,
    PN_TYPE_Q4_K, PN_TYPE_Q3_K, PN_TYPE_PN3T, PN_TYPE_PN4T,
};

bool pn_recipe_type_supported(int type)
{
    for (size_t i = 0; i < sizeof supported_types / sizeof supported_types[0]; i++)
        if (supported_types[i] == type)
            return true;
    return false;
}

/* ---- small text helpers ---- */

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Shortened copy of a token for messages (a recipe line can be long). */
static const char *shown(const char *s, char *buf, size_t size)
{
    size_t n = strlen(s);
    if (n < size) {
        memcpy(buf, s, n + 1);
    } else {
        memcpy(buf, s, size - 4);
        memcpy(buf + size - 4, "...", 4);
    }
    return buf;
}

/* Parses a whole token of decimal digits into [0, INT64_MAX]. */
static bool parse_u63(const char *s, int64_t *out)
{
    if (!*s)
        return false;
    int64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        int d = *s - '0';
        if (v > (INT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* Splits s in place at runs of whitespace; returns the token count (at most
 * max; *overflow set when there were more). */
static size_t split_ws(char *s, char **tok, size_t max, bool *overflow)
{
    size_t n = 0;
    *overflow = false;
    while (*s) {
        while (is_space(*s))
            s++;
        if (!*s)
            break;
        if (n == max) {
            *overflow = true;
            return n;
        }
        tok[n++] = s;
        while (*s && !is_space(*s))
            s++;
        if (*s)
            *s++ = '\0';
    }
    return n;
}

static char *trim(char *s)
{
    while (is_space(*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && is_space(s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* ---- parser state ---- */

typedef struct parser {
    const char *source;
    int line;
    pn_recipe *r;
    size_t rules_cap;
    int line_mix, line_rotation, line_promote, line_file_type, line_mtp;
    pn_error *err;
} parser;

#define FAIL(p, ...) pn_error_set((p)->err, PN_ERR_RECIPE, __VA_ARGS__)

static pn_status once(parser *p, int *seen, const char *kw)
{
    if (*seen)
        return FAIL(p,
                    "%s:%d: expected one '%s' line, found a second one (the first is at line %d)",
                    p->source, p->line, kw, *seen);
    *seen = p->line;
    return PN_OK;
}

static pn_status parse_mix(parser *p, char **tok, size_t n)
{
    pn_status st = once(p, &p->line_mix, "mix");
    if (st)
        return st;
    if (n != 2)
        return FAIL(p, "%s:%d: expected 'mix <name>' (one name), found %zu word(s) after 'mix'",
                    p->source, p->line, n - 1);
    const char *name = tok[1];
    size_t len = strlen(name);
    char b[64];
    if (len >= PN_MIX_NAME_MAX)
        return FAIL(
            p, "%s:%d: expected a mix name of at most %d characters, found '%s' (%zu characters)",
            p->source, p->line, PN_MIX_NAME_MAX - 1, shown(name, b, sizeof b), len);
    for (const char *c = name; *c; c++) {
        bool ok = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
                  (*c >= '0' && *c <= '9') || *c == '.' || *c == '_' || *c == '-';
        if (!ok)
            return FAIL(p,
                        "%s:%d: expected a mix name of letters, digits, '.', '_' or '-' "
                        "('+' is reserved for the promotion count), found '%s'",
                        p->source, p->line, shown(name, b, sizeof b));
    }
    memcpy(p->r->name, name, len + 1);
    return PN_OK;
}

static pn_status parse_rotation(parser *p, char **tok, size_t n)
{
    pn_status st = once(p, &p->line_rotation, "rotation");
    if (st)
        return st;
    char b[64];
    if (n == 2 && strcmp(tok[1], "none") == 0) {
        p->r->rotation = PN_ROTATION_NONE;
        p->r->rotation_cap = 0;
        return PN_OK;
    }
    if ((n == 2 || n == 3) && strcmp(tok[1], "hadamard") == 0) {
        int64_t cap = PN_HADAMARD_DEFAULT_CAP;
        if (n == 3 && (!parse_u63(tok[2], &cap) || cap < 1 || cap > PN_HADAMARD_MAX_BLOCK ||
                       !pn_is_pow2(cap)))
            return FAIL(
                p, "%s:%d: expected a block cap that is a power of two from 1 to %d, found '%s'",
                p->source, p->line, PN_HADAMARD_MAX_BLOCK, shown(tok[2], b, sizeof b));
        p->r->rotation = PN_ROTATION_HADAMARD;
        p->r->rotation_cap = (int)cap;
        return PN_OK;
    }
    return FAIL(
        p, "%s:%d: expected 'rotation hadamard [cap]' or 'rotation none', found 'rotation%s%s%s'",
        p->source, p->line, n > 1 ? " " : "", n > 1 ? shown(tok[1], b, sizeof b) : "",
        n > 2 ? " ..." : "");
}

/* mtp keep | mtp drop: whether a source's MTP layer (blk.L.nextn.* and the
 * block it belongs to) is part of the output. */
static pn_status parse_mtp(parser *p, char **tok, size_t n)
{
    pn_status st = once(p, &p->line_mtp, "mtp");
    if (st)
        return st;
    p->r->mtp_line = p->line;
    char b[64];
    if (n == 2 && strcmp(tok[1], "keep") == 0) {
        p->r->mtp = PN_RECIPE_MTP_KEEP;
        return PN_OK;
    }
    if (n == 2 && strcmp(tok[1], "drop") == 0) {
        p->r->mtp = PN_RECIPE_MTP_DROP;
        return PN_OK;
    }
    return FAIL(p, "%s:%d: expected 'mtp keep' or 'mtp drop', found 'mtp%s%s%s'", p->source,
                p->line, n > 1 ? " " : "", n > 1 ? shown(tok[1], b, sizeof b) : "",
                n > 2 ? " ..." : "");
}

static pn_status parse_count(parser *p, char **tok, size_t n, const char *kw, int *seen,
                             int64_t max, int64_t *out)
{
    pn_status st = once(p, seen, kw);
    if (st)
        return st;
    char b[64];
    if (n != 2)
        return FAIL(p, "%s:%d: expected '%s <N>' (one number), found %zu word(s) after '%s'",
                    p->source, p->line, kw, n - 1, kw);
    if (!parse_u63(tok[1], out) || *out > max)
        return FAIL(p, "%s:%d: expected a whole number from 0 to %lld after '%s', found '%s'",
                    p->source, p->line, (long long)max, kw, shown(tok[1], b, sizeof b));
    return PN_OK;
}

static bool is_condition(const char *tok)
{
    return strpbrk(tok, "=<>!%") != NULL;
}

static pn_status parse_condition(parser *p, const char *tok, pn_recipe_cond *c)
{
    char b[64];
    const char *s = tok;
    memset(c, 0, sizeof *c);
    if (strncmp(s, "K", 1) == 0 && !(s[1] >= 'a' && s[1] <= 'z')) {
        c->var = PN_SHAPE_K;
        s += 1;
    } else if (strncmp(s, "rows", 4) == 0) {
        c->var = PN_SHAPE_ROWS;
        s += 4;
    } else if (strncmp(s, "dims", 4) == 0) {
        c->var = PN_SHAPE_DIMS;
        s += 4;
    } else {
        return FAIL(p,
                    "%s:%d: expected a shape condition on K, rows or dims (e.g. K=5120, "
                    "K%%256==0, dims=1), found '%s'",
                    p->source, p->line, shown(tok, b, sizeof b));
    }
    if (*s == '%') {
        s++;
        char num[24];
        size_t k = 0;
        while (*s >= '0' && *s <= '9' && k + 1 < sizeof num)
            num[k++] = *s++;
        num[k] = '\0';
        int64_t m;
        if (!parse_u63(num, &m) || m < 1)
            return FAIL(p, "%s:%d: expected a modulus of at least 1 after '%%' in '%s'", p->source,
                        p->line, shown(tok, b, sizeof b));
        c->modulus = m;
    }
    if (strncmp(s, "==", 2) == 0) {
        c->cmp = PN_CMP_EQ;
        s += 2;
    } else if (strncmp(s, "!=", 2) == 0) {
        c->cmp = PN_CMP_NE;
        s += 2;
    } else if (strncmp(s, "<=", 2) == 0) {
        c->cmp = PN_CMP_LE;
        s += 2;
    } else if (strncmp(s, ">=", 2) == 0) {
        c->cmp = PN_CMP_GE;
        s += 2;
    } else if (*s == '=') {
        c->cmp = PN_CMP_EQ;
        s += 1;
    } else if (*s == '<') {
        c->cmp = PN_CMP_LT;
        s += 1;
    } else if (*s == '>') {
        c->cmp = PN_CMP_GT;
        s += 1;
    } else {
        return FAIL(p, "%s:%d: expected a comparison (=, ==, !=, <, <=, >, >=) in '%s'", p->source,
                    p->line, shown(tok, b, sizeof b));
    }
    bool list_ok = c->cmp == PN_CMP_EQ || c->cmp == PN_CMP_NE;
    for (;;) {
        char num[24];
        size_t k = 0;
        while (*s && *s != ',' && k + 1 < sizeof num)
            num[k++] = *s++;
        num[k] = '\0';
        if (*s && *s != ',')
            return FAIL(p, "%s:%d: expected a number of at most 19 digits in '%s'", p->source,
                        p->line, shown(tok, b, sizeof b));
        int64_t v;
        if (!parse_u63(num, &v))
            return FAIL(p, "%s:%d: expected a non-negative whole number in '%s', found '%s'",
                        p->source, p->line, shown(tok, b, sizeof b), num);
        if (c->n_values == PN_RECIPE_MAX_VALUES)
            return FAIL(p, "%s:%d: expected at most %d values in '%s'", p->source, p->line,
                        PN_RECIPE_MAX_VALUES, shown(tok, b, sizeof b));
        c->values[c->n_values++] = v;
        if (!*s)
            break;
        if (!list_ok)
            return FAIL(p,
                        "%s:%d: expected one value after <, <=, > or >= in '%s' "
                        "(a list of values is for = and != only)",
                        p->source, p->line, shown(tok, b, sizeof b));
        s++;
    }
    return PN_OK;
}

static pn_status parse_chain(parser *p, char *rhs, pn_recipe_rule *rule)
{
    char b[64];
    rhs = trim(rhs);
    if (!*rhs)
        return FAIL(
            p,
            "%s:%d: expected a type or a fallback chain (e.g. q3_K|q8_0) after '=>', found nothing",
            p->source, p->line);
    char *s = rhs;
    for (;;) {
        char *bar = strchr(s, '|');
        if (bar)
            *bar = '\0';
        char *name = trim(s);
        bool ws = false;
        for (char *c = name; *c; c++)
            ws = ws || is_space(*c);
        if (!*name || ws)
            return FAIL(p, "%s:%d: expected type names separated by '|' after '=>', found '%s'",
                        p->source, p->line, *name ? shown(name, b, sizeof b) : "(empty)");
        const pn_type_traits *t = pn_type_traits_by_name(name);
        if (!t || !pn_recipe_type_supported(t->id))
            return FAIL(p,
                        "%s:%d: expected a type the toolchain writes (f32, f16, bf16, q8_0, q4_K, "
                        "q3_K, pn3t, pn4t), found '%s'",
                        p->source, p->line, shown(name, b, sizeof b));
        if (rule->n_types == PN_RECIPE_MAX_CHAIN)
            return FAIL(p, "%s:%d: expected at most %d types in a fallback chain", p->source,
                        p->line, PN_RECIPE_MAX_CHAIN);
        rule->types[rule->n_types++] = t->id;
        if (!bar)
            break;
        s = bar + 1;
    }
    return PN_OK;
}

static void rule_free(pn_recipe_rule *rule)
{
    free(rule->text);
    for (size_t i = 0; i < rule->n_patterns; i++)
        free(rule->patterns[i]);
    free(rule->patterns);
    free(rule->conds);
    if (rule->regex)
        regfree(rule->regex);
    free(rule->regex);
}

/* stmt is the statement with comment removed and edges trimmed; it starts
 * with "rule" followed by a space. */
static pn_status parse_rule(parser *p, char *stmt)
{
    pn_recipe_rule rule;
    memset(&rule, 0, sizeof rule);
    rule.line = p->line;
    pn_status st = PN_OK;
    char *text = strdup(stmt);
    if (!text)
        return pn_error_set(p->err, PN_ERR_NOMEM, "%s:%d: out of memory", p->source, p->line);
    rule.text = text;

    char *arrow = strstr(stmt, "=>");
    if (!arrow) {
        st = FAIL(p,
                  "%s:%d: expected 'rule <pattern or condition>... => <type>[|<type>...]', "
                  "found no '=>'",
                  p->source, p->line);
        goto fail;
    }
    *arrow = '\0';
    char *lhs = stmt + 4, *rhs = arrow + 2;
    if (strstr(rhs, "=>")) {
        st = FAIL(p, "%s:%d: expected one '=>' in a rule, found two", p->source, p->line);
        goto fail;
    }
    size_t cap = strlen(lhs) / 2 + 1; /* bounds the token count */
    char **tok = malloc(cap * sizeof *tok);
    rule.patterns = malloc(cap * sizeof *rule.patterns);
    rule.conds = malloc(cap * sizeof *rule.conds);
    if (!tok || !rule.patterns || !rule.conds) {
        free(tok);
        st = pn_error_set(p->err, PN_ERR_NOMEM, "%s:%d: out of memory", p->source, p->line);
        goto fail;
    }
    bool overflow;
    size_t n = split_ws(lhs, tok, cap, &overflow);
    if (n == 0) {
        free(tok);
        st = FAIL(p,
                  "%s:%d: expected a name pattern or a shape condition before '=>', found nothing "
                  "(use '*' to select every tensor)",
                  p->source, p->line);
        goto fail;
    }
    for (size_t i = 0; i < n && !st; i++) {
        if (is_condition(tok[i])) {
            st = parse_condition(p, tok[i], &rule.conds[rule.n_conds]);
            if (!st)
                rule.n_conds++;
        } else {
            rule.patterns[rule.n_patterns] = strdup(tok[i]);
            if (!rule.patterns[rule.n_patterns])
                st = pn_error_set(p->err, PN_ERR_NOMEM, "%s:%d: out of memory", p->source, p->line);
            else
                rule.n_patterns++;
        }
    }
    free(tok);
    if (st)
        goto fail;
    st = parse_chain(p, rhs, &rule);
    if (st)
        goto fail;

    if (p->r->n_rules == p->rules_cap) {
        size_t nc = p->rules_cap ? 2 * p->rules_cap : 16;
        pn_recipe_rule *nr = realloc(p->r->rules, nc * sizeof *nr);
        if (!nr) {
            st = pn_error_set(p->err, PN_ERR_NOMEM, "%s:%d: out of memory", p->source, p->line);
            goto fail;
        }
        p->r->rules = nr;
        p->rules_cap = nc;
    }
    p->r->rules[p->r->n_rules++] = rule;
    return PN_OK;
fail:
    rule_free(&rule);
    return st;
}

static pn_status parse_statement(parser *p, char *stmt)
{
    char b[64];
    /* The keyword is the first word. */
    size_t kw_len = 0;
    while (stmt[kw_len] && !is_space(stmt[kw_len]))
        kw_len++;
    if (kw_len == 4 && strncmp(stmt, "rule", 4) == 0)
        return parse_rule(p, stmt);

    /* Every keyword but rule takes at most 3 words; the count is kept for
     * messages. */
    size_t n = 0;
    for (const char *c = stmt; *c;) {
        while (is_space(*c))
            c++;
        if (!*c)
            break;
        n++;
        while (*c && !is_space(*c))
            c++;
    }
    char *tok[4];
    bool overflow;
    split_ws(stmt, tok, 4, &overflow);
    if (strcmp(tok[0], "mix") == 0)
        return parse_mix(p, tok, n);
    if (strcmp(tok[0], "rotation") == 0)
        return parse_rotation(p, tok, n);
    if (strcmp(tok[0], "mtp") == 0)
        return parse_mtp(p, tok, n);
    if (strcmp(tok[0], "promote") == 0) {
        int64_t v;
        pn_status st = parse_count(p, tok, n, "promote", &p->line_promote, 1000000, &v);
        if (!st)
            p->r->promote = v;
        return st;
    }
    if (strcmp(tok[0], "file_type") == 0) {
        int64_t v;
        pn_status st = parse_count(p, tok, n, "file_type", &p->line_file_type, UINT32_MAX, &v);
        if (!st) {
            p->r->has_file_type = true;
            p->r->file_type = (uint32_t)v;
        }
        return st;
    }
    return FAIL(
        p,
        "%s:%d: expected a statement (mix, rotation, promote, file_type, mtp or rule), found '%s'",
        p->source, p->line, shown(tok[0], b, sizeof b));
}

pn_status pn_recipe_parse(const char *text, size_t len, const char *source, pn_recipe **out,
                          pn_error *err)
{
    *out = NULL;
    if (!source)
        source = "(recipe)";
    if (len > PN_RECIPE_MAX_BYTES)
        return pn_error_set(err, PN_ERR_RECIPE,
                            "%s: expected a recipe of at most %u bytes, found %zu", source,
                            PN_RECIPE_MAX_BYTES, len);
    pn_recipe *r = calloc(1, sizeof *r);
    char *buf = malloc(len + 1);
    if (!r || !buf || !(r->source = strdup(source))) {
        free(buf);
        pn_recipe_free(r);
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", source);
    }
    memcpy(buf, text, len);
    buf[len] = '\0';

    parser p = { .source = r->source, .r = r, .err = err };
    pn_status st = PN_OK;
    size_t pos = 0;
    while (pos < len && !st) {
        p.line++;
        size_t end = pos;
        while (end < len && buf[end] != '\n')
            end++;
        char *line = buf + pos;
        buf[end] = '\0';
        if (memchr(line, '\0', end - pos)) {
            st = FAIL(&p, "%s:%d: expected text, found a NUL byte", p.source, p.line);
            break;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *stmt = trim(line);
        if (*stmt)
            st = parse_statement(&p, stmt);
        pos = end + 1;
    }
    free(buf);
    if (!st && !p.line_mix)
        st = pn_error_set(err, PN_ERR_RECIPE, "%s: expected a 'mix <name>' line, found none",
                          r->source);
    if (!st && !p.line_rotation)
        st = pn_error_set(
            err, PN_ERR_RECIPE,
            "%s: expected a 'rotation hadamard [cap]' or 'rotation none' line, found none",
            r->source);
    if (!st && r->n_rules == 0)
        st = pn_error_set(err, PN_ERR_RECIPE, "%s: expected at least one 'rule' line, found none",
                          r->source);
    if (st) {
        pn_recipe_free(r);
        return st;
    }
    *out = r;
    return PN_OK;
}

pn_status pn_recipe_load(const char *path, pn_recipe **out, pn_error *err)
{
    *out = NULL;
    char *buf = NULL;
    size_t n = 0;
    /* one byte more than the parser takes, so that it names the limit */
    pn_status st = pn_read_small_file(path, PN_RECIPE_MAX_BYTES + 1, "recipe", &buf, &n, err);
    if (st != PN_OK)
        return st;
    st = pn_recipe_parse(buf, n, path, out, err);
    free(buf);
    return st;
}

void pn_recipe_free(pn_recipe *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_rules; i++)
        rule_free(&r->rules[i]);
    free(r->rules);
    free(r->source);
    free(r);
}

/* ---- matching ---- */

static bool cond_holds(const pn_recipe_cond *c, uint32_t n_dims, const int64_t ne[4])
{
    int64_t v;
    switch (c->var) {
    case PN_SHAPE_K: v = ne[0]; break;
    case PN_SHAPE_ROWS: v = ne[1] * ne[2] * ne[3]; break;
    default: v = (int64_t)n_dims; break;
    }
    if (c->modulus > 0)
        v %= c->modulus;
    switch (c->cmp) {
    case PN_CMP_EQ:
    case PN_CMP_NE: {
        bool any = false;
        for (int i = 0; i < c->n_values; i++)
            any = any || v == c->values[i];
        return c->cmp == PN_CMP_EQ ? any : !any;
    }
    case PN_CMP_LT: return v < c->values[0];
    case PN_CMP_LE: return v <= c->values[0];
    case PN_CMP_GT: return v > c->values[0];
    case PN_CMP_GE: return v >= c->values[0];
    }
    return false;
}

bool pn_recipe_rule_names(const pn_recipe_rule *rule, const char *name)
{
    bool named = rule->n_patterns == 0 && !rule->regex;
    for (size_t i = 0; i < rule->n_patterns && !named; i++)
        named = pn_glob_match(rule->patterns[i], name);
    return named || (rule->regex && regexec(rule->regex, name, 0, NULL, 0) == 0);
}

bool pn_recipe_rule_matches(const pn_recipe_rule *rule, const char *name, uint32_t n_dims,
                            const int64_t ne[4])
{
    if (!pn_recipe_rule_names(rule, name))
        return false;
    for (size_t i = 0; i < rule->n_conds; i++)
        if (!cond_holds(&rule->conds[i], n_dims, ne))
            return false;
    return true;
}

const pn_recipe_rule *pn_recipe_match(const pn_recipe *r, const char *name, uint32_t n_dims,
                                      const int64_t ne[4])
{
    for (size_t i = 0; i < r->n_rules; i++)
        if (pn_recipe_rule_matches(&r->rules[i], name, n_dims, ne))
            return &r->rules[i];
    return NULL;
}

int pn_recipe_rule_pick_type(const pn_recipe_rule *rule, int64_t K, int *chain_index)
{
    for (int i = 0; i < rule->n_types; i++) {
        if (pn_type_row_bytes(rule->types[i], K) >= 0) {
            if (chain_index)
                *chain_index = i;
            return rule->types[i];
        }
    }
    if (chain_index)
        *chain_index = -1;
    return -1;
}
