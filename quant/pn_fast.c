/* Run-time choice of the fastest exact PN row quantizer. */
#include "quant/pn.h"

pn_status pn_quantize_row(int type, const float *x, int64_t n, uint8_t *out, int64_t *bad_col)
{
    return pn_quantize_row_ref(type, x, n, out, bad_col);
}
