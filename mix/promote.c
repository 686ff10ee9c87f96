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

pn_status pn_header_bytes_const(const pn_plan *plan, void *ctx, uint64_t *bytes, pn_error *err)
{
    (void)plan;
    (void)err;
    *bytes = *(const uint64_t *)ctx;
    return PN_OK;
}

pn_status pn_plan_file_bytes(const pn_plan *plan, pn_header_bytes_fn header_bytes, void *ctx,
                             uint64_t alignment, uint64_t *bytes, pn_error *err)
{
    uint64_t h = 0;
    pn_status st = header_bytes(plan, ctx, &h, err);
    if (st)
        return st;
    *bytes = h + pn_plan_data_bytes(plan, alignment);
    return PN_OK;
}

pn_status pn_plan_choose_n_for_size(pn_plan *plan, const pn_measurement *m,
                                    pn_header_bytes_fn header_bytes, void *ctx, uint64_t alignment,
                                    uint64_t size_limit, size_t *n, uint64_t *file_bytes,
                                    pn_error *err)
{
    pn_plan_clear_promotions(plan);
    size_t *order;
    pn_status st = ordered(plan, m, &order, err);
    if (st)
        return st;
    /* Every N is tried rather than stopping at the first that does not fit:
     * the header callback is the caller's and need not be monotone. */
    size_t best = 0;
    uint64_t best_bytes = 0, size0 = 0;
    bool any = false;
    for (size_t k = 0; k <= plan->n_candidates && !st; k++) {
        if (k > 0)
            st = pn_plan_promote_index(plan, order[k - 1], err);
        uint64_t b = 0;
        if (!st)
            st = pn_plan_file_bytes(plan, header_bytes, ctx, alignment, &b, err);
        if (st)
            break;
        if (k == 0)
            size0 = b;
        if (b <= size_limit) {
            best = k;
            best_bytes = b;
            any = true;
        }
    }
    pn_plan_clear_promotions(plan);
    if (!st && !any)
        st = pn_error_set(err, PN_ERR_MISMATCH,
                          "target size: even with no promotion the file is %llu bytes (%.3f GB), "
                          "more than the limit of %llu bytes (%.3f GB)",
                          (unsigned long long)size0, (double)size0 / 1e9,
                          (unsigned long long)size_limit, (double)size_limit / 1e9);
    for (size_t k = 0; k < best && !st; k++)
        st = pn_plan_promote_index(plan, order[k], err);
    free(order);
    if (st) {
        pn_plan_clear_promotions(plan);
        return st;
    }
    *n = best;
    if (file_bytes)
        *file_bytes = best_bytes;
    return PN_OK;
}
