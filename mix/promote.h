/* promote.h - choosing which pn3t tensors become pn4t, from a measurement.
 *
 * Order (docs/format.md#promotion): candidates sorted by gain
 * E3 - E4, largest first; equal gains keep tensor order (the earlier tensor
 * first). The measurement must hold exactly the plan's candidates: a
 * candidate without a measurement, or a measured name that is not a
 * candidate of this plan (another recipe or model), is PN_ERR_MISMATCH naming
 * it.
 *
 * Size targeting (the largest N whose whole file fits a limit) is the
 * quantize job's (pipeline/plan_build.c): the file's size with N promotions
 * is its writer's layout, header and all.
 */
#ifndef PN_MIX_PROMOTE_H
#define PN_MIX_PROMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "mix/measurement.h"
#include "mix/plan.h"

/* Plan tensor indices of the candidates in promotion order; order must hold
 * plan->n_candidates entries. */
pn_status pn_promotion_order(const pn_plan *plan, const pn_measurement *m, size_t *order,
                             pn_error *err);

/* Promotes the first n of the order (after clearing earlier promotions).
 * n larger than the number of candidates is PN_ERR_USAGE saying how many
 * there are. */
pn_status pn_plan_promote_top(pn_plan *plan, const pn_measurement *m, size_t n, pn_error *err);

#endif
