/* segments.h - the one cut of a tensor's elements into the segments that
 * pn-dequant and pn-check decode and un-rotate one at a time.
 *
 * A segment holds whole blocks of the type and whole rotation blocks: its
 * length is a multiple of the unit, the least common multiple of the type's
 * block and the rotation block (1 for none). A range that starts on a unit
 * boundary (a tensor, a chunk of one, a work item, a row) is cut from its
 * start into segments of `seg` elements, the last one shorter when the
 * range ends before: seg is the largest multiple of the unit not above
 * PN_SEG_TARGET, or the unit itself when it is larger. The cut depends on
 * the type and the rotation only, never on the thread count or chunk size,
 * so what is decoded a segment at a time is the same in every run.
 */
#ifndef PN_QUANT_SEGMENTS_H
#define PN_QUANT_SEGMENTS_H

#include <stdint.h>

/* Elements decoded per step: a few segments a thread stay in cache. */
#define PN_SEG_TARGET 16384

typedef struct pn_segments {
    int64_t unit; /* elements: the type's block and the rotation block divide it */
    int64_t seg;  /* elements per segment, a multiple of unit */
} pn_segments;

/* The cut of a type whose blocks hold `block_weights` elements, rotated in
 * blocks of B (B <= 1: not rotated). */
pn_segments pn_segments_of(int64_t block_weights, int B);

/* How many segments cut the range [e0, e1). */
int64_t pn_segments_count(const pn_segments *s, int64_t e0, int64_t e1);

/* Segment k of the range [e0, e1): its first element *e and its length *m. */
void pn_segment_at(const pn_segments *s, int64_t e0, int64_t e1, int64_t k, int64_t *e, int64_t *m);

#endif
