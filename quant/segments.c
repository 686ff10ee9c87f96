/* segments.c - the cut of a tensor into decoding segments (see segments.h). */
#include "quant/segments.h"

#include "quant/types.h"

pn_segments pn_segments_of(int64_t block_weights, int B)
{
    pn_segments s;
    s.unit = pn_lcm_i64(block_weights, B > 1 ? B : 1);
    s.seg = s.unit * (PN_SEG_TARGET / s.unit > 1 ? PN_SEG_TARGET / s.unit : 1);
    return s;
}

int64_t pn_segments_count(const pn_segments *s, int64_t e0, int64_t e1)
{
    return e1 > e0 ? (e1 - e0 + s->seg - 1) / s->seg : 0;
}

void pn_segment_at(const pn_segments *s, int64_t e0, int64_t e1, int64_t k, int64_t *e, int64_t *m)
{
    *e = e0 + k * s->seg;
    *m = e1 - *e < s->seg ? e1 - *e : s->seg;
}
