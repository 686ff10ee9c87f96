/* plan.c - the conversion plan: a recipe applied to a model's tensors, its
 * promotions, totals and labels (see plan.h). */
#include "mix/plan.h"
#include "mix/plan_testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mem.h"
#include "hadamard/hadamard.h"
#include "quant/types.h"

static void chain_text(const pn_recipe_rule *rule, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < rule->n_types && n < size; i++)
        n +=
            (size_t)snprintf(buf + n, size - n, "%s%s", i ? "|" : "", pn_type_name(rule->types[i]));
}

static int cmp_name_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A type a rule could fall back to for a row of K weights: the first of
 * q8_0, bf16, f16, f32 whose block divides K and that the chain does not
 * name already (advice that names a type already tried helps no one). */
static int fallback_type(const pn_recipe_rule *rule, int64_t K)
{
    static const int order[] = { PN_TYPE_Q8_0, PN_TYPE_BF16, PN_TYPE_F16, PN_TYPE_F32 };
    for (size_t i = 0; i < sizeof order / sizeof *order; i++) {
        bool named = false;
        for (int k = 0; k < rule->n_types; k++)
            named = named || rule->types[k] == order[i];
        if (!named && pn_type_row_bytes(order[i], K) >= 0)
            return order[i];
    }
    return PN_TYPE_F32;
}

/* The error of a tensor whose row no type of its rule's chain holds, with
 * advice that works: for a recipe's rule its line and a fallback to add,
 * for an option the user typed (line 0) the option and a type to give. */
static pn_status no_type_fits(const pn_recipe *recipe, const pn_recipe_rule *rule,
                              const pn_tensor_desc *d, pn_error *err)
{
    char chain[128];
    chain_text(rule, chain, sizeof chain);
    const pn_type_traits *first = pn_type_traits_get(rule->types[0]);
    const char *alt = pn_type_name(fallback_type(rule, d->ne[0]));
    if (rule->line == 0)
        return pn_error_set(err, PN_ERR_RECIPE,
                            "%s: tensor '%s' has K=%lld, which %s cannot hold (it needs a "
                            "multiple of %lld); give a type whose block divides K, e.g. %s",
                            rule->text, d->name, (long long)d->ne[0], chain,
                            (long long)first->block_weights, alt);
    return pn_error_set(err, PN_ERR_RECIPE,
                        "%s:%d: tensor '%s' has K=%lld, which no type of '%s' divides (%s needs a "
                        "multiple of %lld); name a fallback in the rule, e.g. '%s|%s' (rule: %s)",
                        recipe->source, rule->line, d->name, (long long)d->ne[0], chain,
                        first->name, (long long)first->block_weights, chain, alt, rule->text);
}

static pn_status check_desc(const pn_tensor_desc *d, size_t i, pn_error *err)
{
    if (!d->name || !*d->name)
        return pn_error_set(err, PN_ERR_TENSOR, "tensor %zu: expected a name, found none", i);
    if (d->n_dims < 1 || d->n_dims > 4)
        return pn_error_set(err, PN_ERR_TENSOR, "tensor '%s': expected 1 to 4 dims, found %u",
                            d->name, d->n_dims);
    int64_t total = 1;
    for (int k = 0; k < 4; k++) {
        if (d->ne[k] < 1 || ((uint32_t)k >= d->n_dims && d->ne[k] != 1))
            return pn_error_set(
                err, PN_ERR_TENSOR, "tensor '%s': expected ne[%d] %s, found %lld", d->name, k,
                (uint32_t)k < d->n_dims ? ">= 1" : "= 1 (beyond n_dims)", (long long)d->ne[k]);
        if (total > INT64_MAX / d->ne[k])
            return pn_error_set(err, PN_ERR_TENSOR, "tensor '%s': element count overflows",
                                d->name);
        total *= d->ne[k];
    }
    if (!pn_type_is_float(d->src_type))
        return pn_error_set(
            err, PN_ERR_TYPE,
            "tensor '%s': expected a float source (f32, f16 or bf16), found type %d (%s)", d->name,
            d->src_type, pn_type_name(d->src_type));
    return PN_OK;
}

static void set_bytes(pn_plan_tensor *t)
{
    t->bytes = (uint64_t)pn_type_row_bytes(t->type, t->ne[0]) * (uint64_t)t->rows;
}

/* Error listing every unmatched tensor: the message holds what fits. */
static pn_status report_unmatched(const pn_recipe *recipe, const pn_tensor_desc *tensors,
                                  const size_t *idx, size_t n_bad, char **details, pn_error *err)
{
    char msg[PN_ERROR_MSG_MAX];
    int len = snprintf(msg, sizeof msg, "%s: %zu tensor%s match%s no rule:", recipe->source, n_bad,
                       n_bad == 1 ? "" : "s", n_bad == 1 ? "es" : "");
    size_t shown = 0;
    const size_t reserve = 40; /* room for " ... and N more" */
    for (; shown < n_bad; shown++) {
        const char *name = tensors[idx[shown]].name;
        size_t need = strlen(name) + 2;
        bool last = shown + 1 == n_bad;
        if ((size_t)len + need + (last ? 0 : reserve) >= sizeof msg)
            break;
        len += snprintf(msg + len, sizeof msg - (size_t)len, "%s %s", shown ? "," : "", name);
    }
    if (shown < n_bad)
        snprintf(msg + len, sizeof msg - (size_t)len, " ... and %zu more", n_bad - shown);
    if (details) {
        size_t total = 1;
        for (size_t i = 0; i < n_bad; i++)
            total += strlen(tensors[idx[i]].name) + 1;
        char *d = malloc(total);
        if (d) {
            size_t pos = 0;
            for (size_t i = 0; i < n_bad; i++) {
                size_t l = strlen(tensors[idx[i]].name);
                memcpy(d + pos, tensors[idx[i]].name, l);
                pos += l;
                d[pos++] = '\n';
            }
            d[pos] = '\0';
        }
        *details = d;
    }
    return pn_error_set(err, PN_ERR_UNMATCHED, "%s", msg);
}

/* Every --tensor-type the user typed (a rule of line 0 with a regular
 * expression or a glob) names at least one tensor of the model: one that
 * names none is a mistake (a pattern written for another model, or a typo),
 * refused rather than recorded in pn.mix.overrides as if it had done
 * something. */
static pn_status check_overrides_match(const pn_recipe *recipe, const pn_tensor_desc *tensors,
                                       size_t n, pn_error *err)
{
    for (size_t k = 0; k < recipe->n_rules; k++) {
        const pn_recipe_rule *rule = &recipe->rules[k];
        if (rule->line != 0 || strncmp(rule->text, "--tensor-type ", 14) != 0)
            continue;
        bool named = false;
        for (size_t i = 0; i < n && !named; i++)
            named = pn_recipe_rule_names(rule, tensors[i].name);
        if (!named)
            return pn_error_set(err, PN_ERR_USAGE,
                                "%s: the pattern matches no tensor of the model (%zu tensors; "
                                "it is searched in each name as a regular expression, or, with "
                                "* or ?, a glob of the whole name)",
                                rule->text, n);
    }
    return PN_OK;
}

pn_status pn_plan_build(const pn_recipe *recipe, const pn_tensor_desc *tensors, size_t n,
                        pn_plan **out, char **details, pn_error *err)
{
    *out = NULL;
    if (details)
        *details = NULL;
    for (size_t i = 0; i < n; i++) {
        pn_status st = check_desc(&tensors[i], i, err);
        if (st)
            return st;
    }
    if (n > 1) {
        const char **names = malloc(n * sizeof *names);
        if (!names)
            return pn_error_set(err, PN_ERR_NOMEM, "plan: out of memory");
        for (size_t i = 0; i < n; i++)
            names[i] = tensors[i].name;
        qsort(names, n, sizeof *names, cmp_name_ptr);
        for (size_t i = 1; i < n; i++) {
            if (strcmp(names[i - 1], names[i]) == 0) {
                pn_status st = pn_error_set(
                    err, PN_ERR_TENSOR, "tensor '%s': expected unique tensor names, found it twice",
                    names[i]);
                free(names);
                return st;
            }
        }
        free(names);
    }

    pn_status ost = check_overrides_match(recipe, tensors, n, err);
    if (ost)
        return ost;

    /* Unmatched tensors first: all of them are reported together. */
    size_t *bad = malloc((n ? n : 1) * sizeof *bad);
    if (!bad)
        return pn_error_set(err, PN_ERR_NOMEM, "plan: out of memory");
    size_t n_bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!pn_recipe_match(recipe, tensors[i].name, tensors[i].n_dims, tensors[i].ne))
            bad[n_bad++] = i;
    if (n_bad) {
        pn_status st = report_unmatched(recipe, tensors, bad, n_bad, details, err);
        free(bad);
        return st;
    }
    free(bad);

    pn_plan *p = calloc(1, sizeof *p);
    if (!p || !(p->tensors = calloc(n ? n : 1, sizeof *p->tensors))) {
        free(p);
        return pn_error_set(err, PN_ERR_NOMEM, "plan: out of memory");
    }
    memcpy(p->mix_name, recipe->name, sizeof p->mix_name);
    p->rotation = recipe->rotation;
    p->rotation_cap = recipe->rotation == PN_ROTATION_HADAMARD ? recipe->rotation_cap : 0;
    p->promote_default = recipe->promote;
    p->has_file_type = recipe->has_file_type;
    p->file_type = recipe->file_type;

    for (size_t i = 0; i < n; i++) {
        const pn_tensor_desc *d = &tensors[i];
        pn_plan_tensor *t = &p->tensors[i];
        p->n_tensors = i + 1; /* so pn_plan_free releases what is filled */
        t->name = strdup(d->name);
        if (!t->name) {
            pn_plan_free(p);
            return pn_error_set(err, PN_ERR_NOMEM, "plan: out of memory");
        }
        t->n_dims = d->n_dims;
        memcpy(t->ne, d->ne, sizeof t->ne);
        t->src_type = d->src_type;
        t->rows = d->ne[1] * d->ne[2] * d->ne[3];
        t->n_weights = d->ne[0] * t->rows;
        const pn_recipe_rule *rule = pn_recipe_match(recipe, d->name, d->n_dims, d->ne);
        t->rule_line = rule->line;
        int type = pn_recipe_rule_pick_type(rule, d->ne[0], &t->chain_index);
        if (type < 0) {
            pn_status st = no_type_fits(recipe, rule, d, err);
            pn_plan_free(p);
            return st;
        }
        t->base_type = type;
        t->type = type;
        t->rotated = pn_type_is_pn(type) && recipe->rotation == PN_ROTATION_HADAMARD;
        t->rotation_block = t->rotated ? pn_hadamard_block_size(d->ne[0], recipe->rotation_cap) : 0;
        /* a type the user typed (an override, line 0) is final */
        t->candidate = type == PN_TYPE_PN3T && pn_type_row_bytes(PN_TYPE_PN4T, d->ne[0]) >= 0 &&
                       rule->line != 0;
        t->promote_rank = -1;
        if (t->candidate)
            p->n_candidates++;
        set_bytes(t);
    }
    *out = p;
    return PN_OK;
}

void pn_plan_free(pn_plan *plan)
{
    if (!plan)
        return;
    PN_FREE_EACH_FIELD(plan->tensors, plan->n_tensors, name);
    free(plan);
}

long pn_plan_find(const pn_plan *plan, const char *name)
{
    for (size_t i = 0; i < plan->n_tensors; i++)
        if (strcmp(plan->tensors[i].name, name) == 0)
            return (long)i;
    return -1;
}

void pn_plan_clear_promotions(pn_plan *plan)
{
    for (size_t i = 0; i < plan->n_tensors; i++) {
        pn_plan_tensor *t = &plan->tensors[i];
        if (t->promoted) {
            t->promoted = false;
            t->promote_rank = -1;
            t->type = t->base_type;
            set_bytes(t);
        }
    }
    plan->n_promoted = 0;
}

pn_status pn_plan_promote_index(pn_plan *plan, size_t index, pn_error *err)
{
    if (index >= plan->n_tensors)
        return pn_error_set(err, PN_ERR_USAGE,
                            "promotion: tensor index %zu out of range (%zu tensors)", index,
                            plan->n_tensors);
    pn_plan_tensor *t = &plan->tensors[index];
    if (!t->candidate)
        return pn_error_set(err, PN_ERR_MISMATCH,
                            "promotion: tensor '%s' is not a promotion candidate (it is %s%s; "
                            "candidates are pn3t tensors with K a multiple of 64)",
                            t->name, pn_type_name(t->base_type),
                            t->base_type == PN_TYPE_PN3T ? ", but K is not a multiple of 64" : "");
    if (t->promoted)
        return pn_error_set(err, PN_ERR_MISMATCH, "promotion: tensor '%s' is listed twice",
                            t->name);
    t->promoted = true;
    t->promote_rank = (int)plan->n_promoted++;
    t->type = PN_TYPE_PN4T;
    set_bytes(t);
    return PN_OK;
}

pn_status pn_plan_promote_by_names(pn_plan *plan, const char *const *names, size_t n, pn_error *err)
{
    pn_plan_clear_promotions(plan);
    for (size_t i = 0; i < n; i++) {
        long idx = pn_plan_find(plan, names[i]);
        pn_status st;
        if (idx < 0)
            st = pn_error_set(err, PN_ERR_MISMATCH, "promotion: no tensor named '%s' in the model",
                              names[i]);
        else
            st = pn_plan_promote_index(plan, (size_t)idx, err);
        if (st) {
            pn_plan_clear_promotions(plan);
            return st;
        }
    }
    return PN_OK;
}

size_t pn_plan_promoted_names(const pn_plan *plan, const char **names, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < plan->n_tensors; i++) {
        if (!plan->tensors[i].promoted)
            continue;
        if (k < cap)
            names[k] = plan->tensors[i].name;
        k++;
    }
    return k;
}

int pn_plan_mix_label(const pn_plan *plan, char *buf, size_t size)
{
    return snprintf(buf, size, "%s+%zu", plan->mix_name, plan->n_promoted);
}

void pn_plan_totals_get(const pn_plan *plan, pn_plan_totals *t)
{
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < plan->n_tensors; i++) {
        const pn_plan_tensor *x = &plan->tensors[i];
        t->payload_bytes += x->bytes;
        t->n_weights += (uint64_t)x->n_weights;
        if (pn_type_is_pn(x->type)) {
            t->pn_bytes += x->bytes;
            t->pn_weights += (uint64_t)x->n_weights;
        } else {
            t->other_bytes += x->bytes;
        }
        t->n_pn3t += x->type == PN_TYPE_PN3T;
        t->n_pn4t += x->type == PN_TYPE_PN4T;
    }
    t->n_candidates = plan->n_candidates;
    t->n_promoted = plan->n_promoted;
    t->bpw_pn = t->pn_weights ? 8.0 * (double)t->pn_bytes / (double)t->pn_weights : 0.0;
    t->bpw_all = t->n_weights ? 8.0 * (double)t->payload_bytes / (double)t->n_weights : 0.0;
}

uint64_t pn_plan_data_bytes(const pn_plan *plan, uint64_t alignment)
{
    if (alignment == 0)
        alignment = 32;
    uint64_t total = 0;
    for (size_t i = 0; i < plan->n_tensors; i++) {
        uint64_t b = plan->tensors[i].bytes;
        total += (b + alignment - 1) / alignment * alignment;
    }
    return total;
}

void pn_rotation_text(int cap, char *buf, size_t size)
{
    if (cap > 0)
        snprintf(buf, size, "hadamard:%d", cap);
    else
        snprintf(buf, size, "none");
}
