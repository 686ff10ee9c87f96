/* hadamard.h - the block Hadamard rotation applied to PN weights.
 *
 * A row of K floats is cut into consecutive blocks of B; each block x becomes
 * H_B x / sqrt(B) with H_B the Sylvester Hadamard matrix
 * (H[i][j] = (-1)^popcount(i & j)). B is the largest power of two that
 * divides K and is <= cap (cap: a power of two, default 1024). The
 * transform is its own inverse up to rounding.
 *
 * Exact arithmetic order (the contract; every fast path matches it byte for
 * byte): widen the block to double; butterflies in place with
 * h = 1, 2, 4, ..., B/2, for each pair (j, j+h) inside each 2h-chunk:
 * a = x[j], b = x[j+h], x[j] = a + b, x[j+h] = a - b; multiply each by
 * 1.0/sqrt((double)B); round to float once.
 */
#ifndef PN_HADAMARD_H
#define PN_HADAMARD_H

#include <stdbool.h>
#include <stdint.h>

#define PN_HADAMARD_DEFAULT_CAP 1024
#define PN_HADAMARD_MAX_BLOCK 4096

/* The block size for a row of K with the given cap; 0 if K < 1 or cap is not a
 * power of two in [1, PN_HADAMARD_MAX_BLOCK]. */
int pn_hadamard_block_size(int64_t K, int cap);

/* True when v is a power of two >= 1. */
bool pn_is_pow2(int64_t v);

/* Rotates one row in place. B must be a power of two dividing K, <= MAX_BLOCK. */
void pn_hadamard_rotate_row_ref(float *x, int64_t K, int B);
/* The fastest path this CPU has (pn_cpu_path_best); same bytes as _ref.
 * pn_hadamard_rotate_row_path (hadamard/hadamard_fast.h) takes a path. */
void pn_hadamard_rotate_row(float *x, int64_t K, int B);

#endif
