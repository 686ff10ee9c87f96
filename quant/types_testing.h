/* types_testing.h - the whole type table, for the tests that check every
 * entry against the block layouts: the product looks types up one at a
 * time (types.h). */
#ifndef PN_QUANT_TYPES_TESTING_H
#define PN_QUANT_TYPES_TESTING_H

#include <stddef.h>

#include "quant/types.h"

/* Every entry: *count of them, in id order. */
const pn_type_traits *pn_type_traits_all(size_t *count);

#endif
