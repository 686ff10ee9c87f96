/* plan_testing.h - what only the tests do to a plan (plan.h): the programs
 * never include this. */
#ifndef PN_MIX_PLAN_TESTING_H
#define PN_MIX_PLAN_TESTING_H

#include <stddef.h>

#include "mix/plan.h"

/* Promotes exactly the given names (after clearing). A name that is not in
 * the plan, not a candidate, or listed twice is an error naming it
 * (PN_ERR_USAGE); the plan is then left with no promotions. */
pn_status pn_plan_promote_by_names(pn_plan *plan, const char *const *names, size_t n,
                                   pn_error *err);

#endif
