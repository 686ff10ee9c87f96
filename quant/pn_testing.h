/* pn_testing.h - one code of a PN block read or written by itself, for the
 * tests and the fuzzers that build blocks code by code: the product packs
 * and unpacks whole blocks (pn.h). */
#ifndef PN_QUANT_PN_TESTING_H
#define PN_QUANT_PN_TESTING_H

#include "quant/pn.h"

/* Reads code e (0 <= e < G) of a block. */
int pn_block_code(const pn_params *p, const uint8_t *block, int e);
/* Writes code e of a block (other bits untouched). */
void pn_block_set_code(const pn_params *p, uint8_t *block, int e, int code);

#endif
