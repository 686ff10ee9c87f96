/* crc32_testing.h - what only the tests of the folding constants ask of
 * crc32.h: the programs never include this. */
#ifndef PN_COMMON_CRC32_TESTING_H
#define PN_COMMON_CRC32_TESTING_H

#include <stdint.h>

#include "common/crc32.h"

/* x^n mod P(x), bit-reflected (bit 31 - j holds the coefficient of x^j),
 * computed one multiplication by x at a time; and the four constants the
 * folding uses, in the order fold-by-4 high, fold-by-4 low, fold-by-1 high,
 * fold-by-1 low. */
uint32_t pn_crc32_xpow_mod(unsigned n);
void pn_crc32_fold_constants(uint32_t out[4]);

#endif
