/* pn_fast_testing.h - the fast path's half-float steps, exported so that
 * the tests can pin them (pn_fast.h): the programs never include this. */
#ifndef PN_QUANT_PN_FAST_TESTING_H
#define PN_QUANT_PN_FAST_TESTING_H

#include <stdint.h>

#include "quant/pn_fast.h"

/* The value fp16(x) widened back to double (+-0 on underflow, +-inf on
 * overflow), equal to pn_fp16_to_double(pn_fp16_from_double(x)) for every
 * non-NaN x, computed without frexp/ldexp. Exported so tests can pin it. */
double pn_fp16_value_fast(double x);

/* The binary16 bits of a double that is exactly a finite half value (as
 * pn_fp16_value_fast returns); equal to pn_fp16_from_double(h) for such h. */
uint16_t pn_fp16_bits_of_half_value(double h);

#endif
