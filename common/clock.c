/* clock.c - the monotonic clock of the stage times (see clock.h). */
#include "common/clock.h"

#include <time.h>

double pn_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
