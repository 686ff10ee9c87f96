/* widen.h - exact widening of source rows (F32, F16, BF16) to float.
 *
 * Source bytes are little-endian and may sit at any alignment (mmap'd
 * tensor data); the result is the exact float value of each element.
 */
#ifndef PN_QUANT_WIDEN_H
#define PN_QUANT_WIDEN_H

#include <stdint.h>

#include "common/pn_error.h"

/* PN_ERR_TYPE unless src_type is f32, f16 or bf16. */
pn_status pn_widen_row(int src_type, const uint8_t *src, float *dst, int64_t n);

/* Index of the first NaN or infinity in x[0..n), or -1. */
int64_t pn_find_nonfinite(const float *x, int64_t n);

#endif
