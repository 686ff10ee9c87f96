/* threads.h - the one default for how many threads a job uses, and the one
 * parallel loop that reports the first failure in item order.
 *
 * Every job takes a thread count in its options; 0 (or less) means "all the
 * cores this process may run on" (OpenMP's omp_get_num_procs, which honours
 * the CPU affinity mask). The environment is not read here: a program may
 * turn OMP_NUM_THREADS or its own flag into an explicit count.
 */
#ifndef PN_COMMON_THREADS_H
#define PN_COMMON_THREADS_H

#include <stddef.h>

#include "common/pn_error.h"

int pn_threads_resolve(int requested);

/* One item of a pn_each_first_failure loop: works on item i on thread
 * `thread` (0 .. threads-1, to pick that thread's scratch) and returns its
 * status. A failing call describes itself in `fail` (fail_size bytes of the
 * thread's own, suitably aligned, zeroed when the thread starts; NULL when
 * fail_size is 0). */
typedef pn_status (*pn_each_fn)(void *ctx, size_t i, int thread, void *fail);

/* What happens to the items after a failing one. */
enum {
    PN_EACH_SKIP_AFTER_FAILURE = 0, /* an item after a known failure may be skipped */
    PN_EACH_RUN_ALL = 1,            /* every item runs (its work is wanted anyway) */
};

/* Runs fn on items 0 .. n-1, `threads` at a time (dynamic schedule, one item
 * a turn; one item, or one thread, runs in the calling thread as thread 0),
 * and returns the status of the lowest-numbered item that failed, PN_OK when
 * none did; that item's index goes to *fail_at (SIZE_MAX when none; may be
 * NULL) and what its call left in `fail` to *first_fail (fail_size bytes; may
 * be NULL). Every item before the first failing one has run, so the failure
 * reported is the same whatever the thread count and whichever item failed
 * first in time. */
pn_status pn_each_first_failure(size_t n, int threads, int how, pn_each_fn fn, void *ctx,
                                size_t fail_size, void *first_fail, size_t *fail_at);

#endif
