/* threads.c - the default thread count of a job, and the parallel loop that
 * reports the first failure in item order (see threads.h). */
#include "common/threads.h"

#include <omp.h>
#include <stdint.h>
#include <string.h>

int pn_threads_resolve(int requested)
{
    if (requested > 0)
        return requested;
    int n = omp_get_num_procs();
    return n > 0 ? n : 1;
}

/* The item and what its call said, when it is below the lowest failure seen:
 * kept under one lock, so the lowest wins whatever the order of arrival. */
static void keep_if_first(size_t i, pn_status s, const void *mine, size_t fail_size,
                          void *first_fail, size_t *lowest, pn_status *first)
{
#pragma omp critical(pn_each_first_failure)
    if (i < *lowest) {
#pragma omp atomic write
        *lowest = i;
        *first = s;
        if (first_fail && fail_size)
            memcpy(first_fail, mine, fail_size);
    }
}

pn_status pn_each_first_failure(size_t n, int threads, int how, pn_each_fn fn, void *ctx,
                                size_t fail_size, void *first_fail, size_t *fail_at)
{
    const size_t words = fail_size / sizeof(max_align_t) + 1;
    const int skip = !(how & PN_EACH_RUN_ALL);
    size_t lowest = SIZE_MAX;
    pn_status first = PN_OK;
    if (n == 1 || threads <= 1) {
        /* starting threads would cost more than the work */
        max_align_t mine[words];
        memset(mine, 0, sizeof mine);
        for (size_t i = 0; i < n && !(skip && lowest != SIZE_MAX); i++) {
            pn_status s = fn(ctx, i, 0, fail_size ? (void *)mine : NULL);
            if (s != PN_OK)
                keep_if_first(i, s, mine, fail_size, first_fail, &lowest, &first);
        }
    } else {
#pragma omp parallel num_threads(threads)
        {
            max_align_t mine[words];
            memset(mine, 0, sizeof mine);
            const int t = omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
            for (size_t i = 0; i < n; i++) {
                if (skip) {
                    size_t seen;
#pragma omp atomic read
                    seen = lowest;
                    /* only items after a failure: every one before it runs */
                    if (i > seen)
                        continue;
                }
                pn_status s = fn(ctx, i, t, fail_size ? (void *)mine : NULL);
                if (s != PN_OK)
                    keep_if_first(i, s, mine, fail_size, first_fail, &lowest, &first);
            }
        }
    }
    if (fail_at)
        *fail_at = lowest;
    return first;
}
