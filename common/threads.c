/* threads.c - the default thread count of a job (see threads.h). */
#include "common/threads.h"

#include <omp.h>

int pn_threads_resolve(int requested)
{
    if (requested > 0)
        return requested;
    int n = omp_get_num_procs();
    return n > 0 ? n : 1;
}
