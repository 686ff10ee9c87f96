/* widen.h - exact widening of source rows (F32, F16, BF16) to float.
 *
 * Source bytes are little-endian and may sit at any alignment (a read
 * buffer at any offset); the result is the exact float value of each
 * element.
 */
#ifndef PN_QUANT_WIDEN_H
#define PN_QUANT_WIDEN_H

#include <stdint.h>

#include "common/pn_error.h"

/* The reference. PN_ERR_TYPE unless src_type is f32, f16 or bf16. */
pn_status pn_widen_row(int src_type, const uint8_t *src, float *dst, int64_t n);

/* Index of the first NaN or infinity in x[0..n), or -1. */
int64_t pn_find_nonfinite(const float *x, int64_t n);

/* Widening and the finiteness check in one pass, on a CPU path
 * (quant/pn_fast.h: PN_PATH_REF is pn_widen_row then pn_find_nonfinite, the
 * others are vector loops: widen_simd.h). Returns
 *   PN_OK             every element is finite; dst[0..n) holds the exact floats;
 *   PN_ERR_NONFINITE  *bad_col (when not NULL) is the index of the first NaN
 *                     or infinity; dst[0..*bad_col) holds the exact floats,
 *                     the rest of dst is unspecified;
 *   PN_ERR_TYPE       src_type is not f32, f16 or bf16 (dst untouched);
 *   PN_ERR_USAGE      the path is unknown or this CPU cannot run it.
 * Every path gives the same status, the same *bad_col (-1 unless
 * PN_ERR_NONFINITE) and the same dst bytes as PN_PATH_REF wherever dst is
 * specified. */
pn_status pn_widen_row_checked(int path, int src_type, const uint8_t *src, float *dst, int64_t n,
                               int64_t *bad_col);

#endif
