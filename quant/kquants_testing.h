/* kquants_testing.h - q8_0's row encoder by itself, for its tests: the
 * programs reach it through the type table's per-path row sums (types.h),
 * never by name. */
#ifndef PN_QUANT_KQUANTS_TESTING_H
#define PN_QUANT_KQUANTS_TESTING_H

#include "quant/kquants.h"

pn_status pn_quantize_row_q8_0(const float *x, int64_t n, uint8_t *out, int64_t *bad_col);

#endif
