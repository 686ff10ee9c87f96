/* widen_simd.h - widening with the finiteness check fused, for a vector of
 * WD_W float lanes. Included once per width, by widen.c (4 lanes, portable
 * C through GCC vector extensions), widen_avx2.c (8) and widen_avx512.c
 * (16), each defining before the include:
 *   WD_W            lanes;
 *   WD_SUFFIX       the suffix of the function defined here;
 *   WD_F16(p)       the exact floats (as wd_vu bits) of WD_W halves at p (any
 *                   alignment), or leave it undefined for the portable
 *                   integer conversion below;
 *   WD_BF16(p)      the same for WD_W bf16 values (the high halves of their
 *                   floats), or leave it undefined for GCC's vector
 *                   conversion and a shift;
 *   WD_ANY(m)       nonzero when a lane of the wd_vu mask m is set, or leave
 *                   it undefined for a loop over the lanes.
 * and it defines
 *   int64_t pn_widen_check_<suffix>(int type, const uint8_t *src, float *dst, int64_t n);
 * for type f32, f16 or bf16: the index of the first NaN or infinity, or -1.
 * dst[0..n) is written when it returns -1; when it returns i, dst[0..i) is.
 *
 * The same program at every width: a row is taken in blocks of WD_BLOCK
 * elements (a multiple of every width), each block widened a vector at a
 * time with an OR of the lanes' "exponent all ones" test; a block that has
 * one is searched again, element by element, for the first (so the index is
 * the reference's, pn_find_nonfinite on the widened row). The elements after
 * the last whole vector are widened one by one with quant/fp16.h. So the
 * block and tail logic this machine runs at 4 and 8 lanes is the logic of
 * the 16-lane build.
 *
 * Why the floats are exact:
 *   f32   a copy;
 *   bf16  a bf16 is the high half of its float: a 16-bit shift;
 *   f16   with F16C/AVX-512F, vcvtph2ps, exact for every half that is not a
 *         NaN (normals, subnormals, zeros and infinities); a NaN stays a NaN
 *         of its sign (a signalling NaN comes back quiet: its payload is not
 *         data, and a NaN is refused anyway). The portable conversion is the
 *         reference's, lane by lane: a normal half's fields moved into a
 *         float's (exponent + 112), exponent 31 moved to 255, a subnormal's
 *         significand converted to float and scaled by 2^-24 (both exact).
 */
#include <stdint.h>
#include <string.h>

#include "quant/fp16.h"
#include "quant/types.h"

#define WD_CAT2(a, b) a##b
#define WD_CAT(a, b) WD_CAT2(a, b)
#define WD_FN(name) WD_CAT(name, WD_SUFFIX)

/* Elements between two tests of the block's mask. */
#define WD_BLOCK 256

typedef uint16_t WD_FN(wd_vh_) __attribute__((vector_size(2 * WD_W)));
typedef uint32_t WD_FN(wd_vu_) __attribute__((vector_size(4 * WD_W)));
typedef int32_t WD_FN(wd_vi_) __attribute__((vector_size(4 * WD_W)));
typedef float WD_FN(wd_vf_) __attribute__((vector_size(4 * WD_W)));
#define wd_vh WD_FN(wd_vh_)
#define wd_vu WD_FN(wd_vu_)
#define wd_vi WD_FN(wd_vi_)
#define wd_vf WD_FN(wd_vf_)

#ifndef WD_ANY
static inline int WD_FN(wd_any_)(wd_vu m)
{
    uint32_t any = 0;
    for (int i = 0; i < WD_W; i++)
        any |= m[i];
    return any != 0;
}
#define WD_ANY(m) WD_FN(wd_any_)(m)
#endif

#ifndef WD_F16
/* The reference's conversion, in lanes (see above). */
static inline wd_vu WD_FN(wd_f16_)(const uint8_t *p)
{
    wd_vh h;
    memcpy(&h, p, sizeof h);
    const wd_vu u = __builtin_convertvector(h, wd_vu);
    const wd_vu m = u & 0x7fffu, e = u & 0x7c00u;
    wd_vu bits = (m << 13) + (112u << 23);
    bits += (wd_vu)(e == 0x7c00u) & (112u << 23);
    const wd_vf sub = __builtin_convertvector((wd_vi)m, wd_vf) * 0x1p-24f;
    wd_vu sub_bits;
    memcpy(&sub_bits, &sub, sizeof sub_bits);
    const wd_vu is_sub = (wd_vu)(e == 0u);
    bits = (sub_bits & is_sub) | (bits & ~is_sub);
    return bits | ((u & 0x8000u) << 16);
}
#define WD_F16(p) WD_FN(wd_f16_)(p)
#endif

static inline __attribute__((always_inline)) wd_vu WD_FN(wd_load_)(int type, const uint8_t *p)
{
    if (type == PN_TYPE_F32) {
        wd_vu v;
        memcpy(&v, p, sizeof v); /* the host is little-endian */
        return v;
    }
    if (type == PN_TYPE_BF16) {
#ifdef WD_BF16
        return WD_BF16(p);
#else
        wd_vh h;
        memcpy(&h, p, sizeof h);
        return __builtin_convertvector(h, wd_vu) << 16;
#endif
    }
    return WD_F16(p);
}

static inline __attribute__((always_inline)) float WD_FN(wd_one_)(int type, const uint8_t *p)
{
    if (type == PN_TYPE_F32) {
        float f;
        memcpy(&f, p, sizeof f);
        return f;
    }
    uint16_t h = pn_load_u16le(p);
    return type == PN_TYPE_BF16 ? pn_bf16_to_float(h) : pn_fp16_to_float(h);
}

static inline int WD_FN(wd_nonfinite_)(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (u & 0x7f800000u) == 0x7f800000u;
}

static inline __attribute__((always_inline)) int64_t WD_FN(wd_loop_)(int type, const uint8_t *src,
                                                                     float *dst, int64_t n)
{
    const int64_t es = type == PN_TYPE_F32 ? 4 : 2;
    int64_t i = 0;
    while (n - i >= WD_W) {
        const int64_t b0 = i;
        const int64_t end = n - i >= WD_BLOCK ? i + WD_BLOCK : n - (n - i) % WD_W;
        wd_vu bad = { 0 };
        for (; i < end; i += WD_W) {
            const wd_vu v = WD_FN(wd_load_)(type, src + i * es);
            memcpy(dst + i, &v, sizeof v);
            bad |= (wd_vu)((v & 0x7f800000u) == 0x7f800000u);
        }
        if (WD_ANY(bad))
            for (int64_t k = b0; k < i; k++)
                if (WD_FN(wd_nonfinite_)(dst[k]))
                    return k;
    }
    for (; i < n; i++) {
        dst[i] = WD_FN(wd_one_)(type, src + i * es);
        if (WD_FN(wd_nonfinite_)(dst[i]))
            return i;
    }
    return -1;
}

int64_t WD_FN(pn_widen_check_)(int type, const uint8_t *src, float *dst, int64_t n);
int64_t WD_FN(pn_widen_check_)(int type, const uint8_t *src, float *dst, int64_t n)
{
    /* one specialised loop per type */
    if (type == PN_TYPE_BF16)
        return WD_FN(wd_loop_)(PN_TYPE_BF16, src, dst, n);
    if (type == PN_TYPE_F16)
        return WD_FN(wd_loop_)(PN_TYPE_F16, src, dst, n);
    return WD_FN(wd_loop_)(PN_TYPE_F32, src, dst, n);
}

#undef wd_vh
#undef wd_vu
#undef wd_vi
#undef wd_vf
