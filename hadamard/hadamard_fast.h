/* hadamard_fast.h - the exact fast block Hadamard rotations and their choice.
 *
 * Contract: every path writes the same floats, bit for bit, as
 * pn_hadamard_rotate_row_ref (hadamard/hadamard.h) for every input (NaN
 * results: see below). That is
 * possible because the reference's arithmetic is a fixed graph of single
 * roundings: each butterfly output is one double addition or subtraction of
 * two values of the previous stage (h = 1, 2, ..., B/2), then one double
 * multiplication by 1.0/sqrt(B) and one rounding to float. The fast paths
 * compute exactly those operations (a + b and a - b are commutative where it
 * matters: a + b == b + a in IEEE arithmetic), only in another schedule:
 * several stages of a block while its values are in registers, many
 * butterflies of one stage per vector instruction.
 * One exception, shared with the reference itself: a NaN result is a NaN on
 * every path, but its sign and payload are not pinned, because C lets the
 * compiler swap the operands of a + b and with two NaN operands the order
 * decides which NaN comes out. PN rows never hold NaN (a non-finite source
 * weight is refused before the rotation); infinities are exact.
 *
 * Paths use the ids of quant/pn_fast.h: PN_PATH_REF, PN_PATH_SCALAR_FAST,
 * PN_PATH_AVX2, PN_PATH_AVX512; the caller passes the id it chose for the
 * quantizer (one choice for every row operation; the library reads no
 * environment). pn_hadamard_rotate_row (hadamard/hadamard.h) runs
 * pn_cpu_path_best().
 *
 * Nothing here allocates (blocks up to PN_HADAMARD_MAX_BLOCK live on the
 * stack), prints or keeps state; all functions are thread-safe.
 */
#ifndef PN_HADAMARD_FAST_H
#define PN_HADAMARD_FAST_H

#include <stdbool.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "quant/pn_fast.h"

/* True when this build and CPU can run the path (a PN_PATH_* id). */
bool pn_hadamard_path_available(int path);

/* pn_hadamard_rotate_row on a chosen path. PN_ERR_USAGE (x untouched) when
 * the path is unknown or unavailable, K < 1, or B is not a power of two
 * dividing K and at most PN_HADAMARD_MAX_BLOCK. */
pn_status pn_hadamard_rotate_row_path(int path, float *x, int64_t K, int B);

/* The per-ISA rotations (arguments already checked). */
void pn_hadamard_rotate_row_scalar_fast(float *x, int64_t K, int B);
void pn_hadamard_rotate_row_avx2(float *x, int64_t K, int B);
void pn_hadamard_rotate_row_avx512(float *x, int64_t K, int B);

#endif
