/* measurement_testing.h - what only the tests ask of the measurement
 * (measurement.h): the programs never include this. */
#ifndef PN_MIX_MEASUREMENT_TESTING_H
#define PN_MIX_MEASUREMENT_TESTING_H

#include <stdint.h>

#include "mix/measurement.h"

/* Adds n_rows consecutive rotated rows of K weights to acc, in order
 * (allocates its own scratch). Errors name the row (0-based within this
 * call) and column. */
pn_status pn_measure_rows(pn_measure_acc *acc, const float *rotated_rows, int64_t n_rows, int64_t K,
                          pn_error *err);

#endif
