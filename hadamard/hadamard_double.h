/* hadamard_double.h - the rotation's butterflies kept in double, for taking
 * an error in the rotated domain back to the original one without rounding
 * (the imatrix-weighted measurement, mix/measurement.h).
 *
 * Block by block of B, the same butterflies in the same order as the
 * rotation (hadamard.h: h = 1, 2, ..., B/2; a = x[j], b = x[j+h];
 * x[j] = a + b, x[j+h] = a - b), then each value times 1.0/sqrt((double)B);
 * no rounding to float. The normalised H_B is symmetric and its own inverse,
 * so applied to e' = W' - dq(W') it gives the error on the original columns.
 */
#ifndef PN_HADAMARD_DOUBLE_H
#define PN_HADAMARD_DOUBLE_H

#include <stdint.h>

/* In place on n doubles (n a multiple of B; B a power of two <=
 * PN_HADAMARD_MAX_BLOCK; B <= 1 leaves x as it is). */
void pn_hadamard_rotate_double(double *x, int64_t n, int B);

#endif
