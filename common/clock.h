/* clock.h - the one clock the programs time their stages with.
 *
 * Seconds on CLOCK_MONOTONIC: it never steps back when the wall clock is
 * set, so a difference of two readings is an elapsed time. Only for reports
 * (stage times, progress): no output depends on it.
 */
#ifndef PN_COMMON_CLOCK_H
#define PN_COMMON_CLOCK_H

/* Seconds since an arbitrary fixed point. */
double pn_now_seconds(void);

#endif
