/* libFuzzer target: PN blocks from arbitrary bytes. Validation, decoding and
 * code access must never read or write outside the row, whatever the bytes;
 * a row that validates decodes to finite values. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "quant/pn.h"
#include "quant/pn_testing.h"
#include "quant/types.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const int type = (data[0] & 1) ? PN_TYPE_PN4T : PN_TYPE_PN3T;
    const pn_params *p = pn_params_get(type);
    const size_t blocks = (size - 1) / PN_BLOCK_BYTES;
    if (blocks == 0)
        return 0;
    const int64_t n = (int64_t)blocks * p->group;
    /* an exact-size copy so ASan sees any overrun */
    uint8_t *row = malloc(blocks * PN_BLOCK_BYTES);
    float *y = malloc((size_t)n * sizeof *y);
    if (!row || !y)
        abort();
    for (size_t i = 0; i < blocks * PN_BLOCK_BYTES; i++)
        row[i] = data[1 + i];
    int64_t bad = -1;
    pn_status st = pn_validate_row(type, row, n, &bad);
    pn_dequantize_row(type, row, y, n);
    if (st == PN_OK)
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(y[i]))
                abort(); /* a valid block has a finite scale, so finite weights */
    if (st != PN_OK && (bad < 0 || (size_t)bad >= blocks))
        abort();
    for (int e = 0; e < p->group; e++)
        if (pn_block_code(p, row, e) >= (1 << p->bits))
            abort();
    free(row);
    free(y);
    return 0;
}
