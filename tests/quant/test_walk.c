/* test_walk.c - the one walk over a tensor's pieces (quant/segments.h): the
 * segments cover a range exactly, in order, each of whole type and rotation
 * blocks, with the lengths pn-dequant and pn-check cut before they shared
 * the walk. The expected lengths are worked out here, by counting, and for
 * the types of a mix written out. */
#include <criterion/criterion.h>

#include <stdint.h>

#include "quant/segments.h"

/* The least multiple of a that b divides, by counting. */
static int64_t least_common_multiple(int64_t a, int64_t b)
{
    int64_t m = a;
    while (m % b != 0)
        m += a;
    return m;
}

/* The segment length: the most whole units up to 16384 elements, one unit
 * at least. */
static int64_t expected_seg(int64_t unit)
{
    int64_t s = unit;
    while (s + unit <= 16384)
        s += unit;
    return s;
}

Test(segments, the_unit_holds_whole_blocks_and_the_segment_is_as_the_decoders_cut_it)
{
    /* block weights, rotation block, then the unit and segment the two
     * decoders used: pn3t/pn4t rotated, q4_K/q8_0/f32 not, and a rotation
     * block whose unit is past the target (the segment is one unit) */
    const struct {
        int64_t bw;
        int B;
        int64_t unit, seg;
    } cases[] = {
        { 80, 256, 1280, 15360 }, { 64, 256, 256, 16384 },    { 64, 512, 512, 16384 },
        { 80, 512, 2560, 15360 }, { 80, 2048, 10240, 10240 }, { 80, 8192, 40960, 40960 },
        { 256, 0, 256, 16384 },   { 32, 0, 32, 16384 },       { 1, 0, 1, 16384 },
        { 80, 1, 80, 16320 },     { 256, 128, 256, 16384 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        pn_segments s = pn_segments_of(cases[i].bw, cases[i].B);
        const int64_t b = cases[i].B > 1 ? cases[i].B : 1;
        cr_assert_eq(least_common_multiple(cases[i].bw, b), cases[i].unit, "case %zu", i);
        cr_assert_eq(expected_seg(cases[i].unit), cases[i].seg, "case %zu", i);
        cr_assert_eq(s.unit, cases[i].unit, "bw %lld B %d: unit %lld", (long long)cases[i].bw,
                     cases[i].B, (long long)s.unit);
        cr_assert_eq(s.seg, cases[i].seg, "bw %lld B %d: seg %lld", (long long)cases[i].bw,
                     cases[i].B, (long long)s.seg);
    }
}

Test(segments, they_cover_each_range_exactly_in_order_and_only_the_last_is_short)
{
    const int64_t bws[] = { 80, 64, 256, 1 };
    const int Bs[] = { 0, 256, 512, 8192 };
    for (size_t a = 0; a < 4; a++)
        for (size_t r = 0; r < 4; r++) {
            pn_segments s = pn_segments_of(bws[a], Bs[r]);
            const int64_t seg = expected_seg(least_common_multiple(bws[a], Bs[r] > 1 ? Bs[r] : 1));
            /* ranges on unit boundaries: empty, one unit, a segment, a bit
             * more, and a tensor of many rows starting past the origin */
            const int64_t lens[] = { 0, s.unit, seg, seg + s.unit, 37 * s.unit, 5 * seg };
            for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
                const int64_t e0 = 3 * s.unit, e1 = e0 + lens[l];
                const int64_t n = pn_segments_count(&s, e0, e1);
                cr_assert_eq(n, (lens[l] + seg - 1) / seg);
                int64_t at = e0;
                for (int64_t k = 0; k < n; k++) {
                    int64_t e = -1, m = -1;
                    pn_segment_at(&s, e0, e1, k, &e, &m);
                    cr_assert_eq(e, at, "segment %lld starts at %lld, not %lld", (long long)k,
                                 (long long)e, (long long)at);
                    cr_assert_gt(m, 0);
                    cr_assert_eq(m % s.unit, 0, "segment %lld: %lld elements", (long long)k,
                                 (long long)m);
                    if (k + 1 < n)
                        cr_assert_eq(m, seg);
                    else
                        cr_assert_leq(m, seg);
                    at += m;
                }
                cr_assert_eq(at, e1, "the segments end at %lld, the range at %lld", (long long)at,
                             (long long)e1);
            }
        }
}
