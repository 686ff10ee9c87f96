/* scales.c - where each block type keeps its fp16 scales, and the scans for
 * values that are not finite (see scales.h). */
#include "quant/scales.h"

#include <stddef.h>

#include "quant/blocks.h"
#include "quant/types.h"

static const pn_scale_field q8_0_fields[] = { { "d", offsetof(block_q8_0, d) } };
static const pn_scale_field q4_K_fields[] = { { "d", offsetof(block_q4_K, d) },
                                              { "dmin", offsetof(block_q4_K, dmin) } };
static const pn_scale_field q3_K_fields[] = { { "d", offsetof(block_q3_K, d) } };
static const pn_scale_field pn_fields[] = { { "d", offsetof(block_pnt, d) } };

int pn_scale_fields(int type, const pn_scale_field **fields)
{
    switch (type) {
    case PN_TYPE_Q8_0: *fields = q8_0_fields; return 1;
    case PN_TYPE_Q4_K: *fields = q4_K_fields; return 2;
    case PN_TYPE_Q3_K: *fields = q3_K_fields; return 1;
    case PN_TYPE_PN3T:
    case PN_TYPE_PN4T: *fields = pn_fields; return 1;
    default: *fields = NULL; return 0;
    }
}

static uint16_t load_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static bool fp16_nonfinite(uint16_t h)
{
    return (h & 0x7c00u) == 0x7c00u;
}

int64_t pn_find_nonfinite_scale(int type, const uint8_t *p, int64_t nblk, int *field,
                                uint16_t *bits)
{
    const pn_scale_field *f;
    const int nf = pn_scale_fields(type, &f);
    const pn_type_traits *tt = pn_type_traits_get(type);
    if (nf == 0 || !tt)
        return -1;
    const int64_t bb = tt->block_bytes;
    for (int64_t b = 0; b < nblk; b++) {
        const uint8_t *blk = p + b * bb;
        for (int k = 0; k < nf; k++) {
            uint16_t h = load_u16(blk + f[k].offset);
            if (fp16_nonfinite(h)) {
                if (field)
                    *field = k;
                if (bits)
                    *bits = h;
                return b;
            }
        }
    }
    return -1;
}

int64_t pn_find_nonfinite_value(int type, const uint8_t *p, int64_t n, uint32_t *bits)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t v;
        bool bad;
        switch (type) {
        case PN_TYPE_F32:
            v = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
                (uint32_t)p[4 * i + 3] << 24;
            bad = (v & 0x7f800000u) == 0x7f800000u;
            break;
        case PN_TYPE_F16:
            v = load_u16(p + 2 * i);
            bad = fp16_nonfinite((uint16_t)v);
            break;
        case PN_TYPE_BF16:
            v = load_u16(p + 2 * i);
            bad = (v & 0x7f80u) == 0x7f80u;
            break;
        default: return -1;
        }
        if (bad) {
            if (bits)
                *bits = v;
            return i;
        }
    }
    return -1;
}

bool pn_nonfinite_is_nan(int type, uint32_t bits)
{
    switch (type) {
    case PN_TYPE_F32: return (bits & 0x007fffffu) != 0;
    case PN_TYPE_BF16: return (bits & 0x007fu) != 0;
    default: return (bits & 0x03ffu) != 0;
    }
}
