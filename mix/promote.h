/* promote.h - choosing which pn3t tensors become pn4t, from a measurement.
 *
 * Order (docs/format.md#promotion): candidates sorted by gain
 * E3 - E4, largest first; equal gains keep tensor order (the earlier tensor
 * first). The measurement must hold exactly the plan's candidates: a
 * candidate without a measurement, or a measured name that is not a
 * candidate of this plan (another recipe or model), is PN_ERR_MISMATCH naming
 * it.
 *
 * Size targeting: promoting adds bytes (a pn3t row of K is 34*K/80 bytes, a
 * pn4t row 34*K/64), so the file grows with N; pn_plan_choose_n_for_size
 * takes the largest N whose whole file (header + padded data) is at most the
 * limit. The header itself changes with N (pn.mix and pn.mix.promoted), so
 * its size comes from a callback evaluated on the plan with N promotions.
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

/* Bytes of the GGUF header up to the start of the data section (padding
 * included) for the plan as it stands (its promotions decide pn.mix and
 * pn.mix.promoted). */
typedef pn_status (*pn_header_bytes_fn)(const pn_plan *plan, void *ctx, uint64_t *bytes,
                                        pn_error *err);
/* A pn_header_bytes_fn for a header whose size does not depend on the plan:
 * ctx points to a uint64_t holding it. */
pn_status pn_header_bytes_const(const pn_plan *plan, void *ctx, uint64_t *bytes, pn_error *err);

/* header_bytes(plan) + pn_plan_data_bytes(plan, alignment). */
pn_status pn_plan_file_bytes(const pn_plan *plan, pn_header_bytes_fn header_bytes, void *ctx,
                             uint64_t alignment, uint64_t *bytes, pn_error *err);

/* The largest n (promoting in measured order) whose file is <= size_limit;
 * on success the plan holds those n promotions and *file_bytes (may be NULL)
 * the file size. When even n = 0 does not fit: PN_ERR_USAGE giving the size
 * at n = 0 and the limit, and the plan is left with no promotions. */
pn_status pn_plan_choose_n_for_size(pn_plan *plan, const pn_measurement *m,
                                    pn_header_bytes_fn header_bytes, void *ctx, uint64_t alignment,
                                    uint64_t size_limit, size_t *n, uint64_t *file_bytes,
                                    pn_error *err);

#endif
