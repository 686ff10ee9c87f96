/* promote.c - choosing the pn3t tensors to promote to pn4t from a
 * measurement (see promote.h). */
#include "mix/promote.h"

#include <stdlib.h>
#include <string.h>

#include "mix/name_index.h"

typedef struct ranked {
    size_t index; /* plan tensor index */
    double gain;  /* E3 - E4, or the entry's gain (by_gain) */
} ranked;

/* A total order (gain, then index), so qsort's instability cannot show. */
static int cmp_ranked(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->gain != y->gain)
        return x->gain > y->gain ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

pn_status pn_promotion_order(const pn_plan *plan, const pn_measurement *m, size_t *order,
                             pn_error *err)
{
    /* names through hash indices: linear in the tensors and the entries */
    pn_name_index *tensors = pn_name_index_new(plan->n_tensors);
    pn_name_index *entries = pn_name_index_new(m->n);
    ranked *r = malloc((plan->n_candidates ? plan->n_candidates : 1) * sizeof *r);
    pn_status st = PN_OK;
    if (!tensors || !entries || !r) {
        st = pn_error_set(err, PN_ERR_NOMEM, "promotion order: out of memory");
        goto done;
    }
    for (size_t i = 0; i < plan->n_tensors; i++)
        pn_name_index_put(tensors, plan->tensors[i].name, i, NULL); /* names are unique */
    for (size_t i = 0; i < m->n; i++) {
        long idx = pn_name_index_get(tensors, m->entries[i].name);
        if (idx < 0 || !plan->tensors[idx].candidate) {
            st = pn_error_set(err, PN_ERR_MISMATCH,
                              "measurement: tensor '%s' is %s; the measurement was made for "
                              "another model or recipe",
                              m->entries[i].name,
                              idx < 0 ? "not in the model"
                                      : "not a promotion candidate of this plan");
            goto done;
        }
        pn_name_index_put(entries, m->entries[i].name, i, NULL);
    }
    size_t k = 0;
    for (size_t i = 0; i < plan->n_tensors; i++) {
        const pn_plan_tensor *t = &plan->tensors[i];
        if (!t->candidate)
            continue;
        long e = pn_name_index_get(entries, t->name);
        if (e < 0) {
            st = pn_error_set(err, PN_ERR_MISMATCH,
                              "measurement: no measurement for candidate '%s'; measure again",
                              t->name);
            goto done;
        }
        r[k].index = i;
        r[k].gain = m->by_gain ? m->entries[e].gain : m->entries[e].e3 - m->entries[e].e4;
        k++;
    }
    qsort(r, k, sizeof *r, cmp_ranked);
    for (size_t i = 0; i < k; i++)
        order[i] = r[i].index;
done:
    free(r);
    pn_name_index_free(tensors);
    pn_name_index_free(entries);
    return st;
}

static pn_status ordered(const pn_plan *plan, const pn_measurement *m, size_t **order,
                         pn_error *err)
{
    *order = malloc((plan->n_candidates ? plan->n_candidates : 1) * sizeof **order);
    if (!*order)
        return pn_error_set(err, PN_ERR_NOMEM, "promotion: out of memory");
    pn_status st = pn_promotion_order(plan, m, *order, err);
    if (st) {
        free(*order);
        *order = NULL;
    }
    return st;
}

pn_status pn_plan_promote_top(pn_plan *plan, const pn_measurement *m, size_t n, pn_error *err)
{
    pn_plan_clear_promotions(plan);
    if (n > plan->n_candidates)
        return pn_error_set(err, PN_ERR_MISMATCH,
                            "promotion: asked to promote %zu tensors, but the plan has only %zu "
                            "candidates (pn3t tensors with K a multiple of 64)",
                            n, plan->n_candidates);
    size_t *order;
    pn_status st = ordered(plan, m, &order, err);
    for (size_t i = 0; i < n && !st; i++)
        st = pn_plan_promote_index(plan, order[i], err);
    free(order);
    if (st)
        pn_plan_clear_promotions(plan);
    return st;
}
