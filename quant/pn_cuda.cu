/* pn_cuda.cu - the PN scale search on the GPU (contract: quant/pn_cuda.h).
 *
 * Work layout. One thread block of 288 threads takes 8 consecutive groups
 * (of the flattened n_rows * K/G groups); thread tid works for group
 * g = tid / 36 of the block and, in the search, for candidate c = tid % 36.
 * The kernel is a fixed sequence of phases separated by __syncthreads();
 * each phase is one __host__ __device__ function of (block, thread). The GPU
 * runs a phase for all threads at once; the host emulator runs it for thread
 * 0, 1, ..., 287 in turn. No phase reads what another thread writes in the
 * same phase, so both orders compute the same thing, and the emulator tests
 * this very code on a machine without a GPU (it also fills shared memory
 * with junk before each block and keeps a guard band after the output, so a
 * read of something unwritten or a store past the chunk shows). No warp
 * shuffles, no cooperative groups, no tensor cores, no float arithmetic:
 * sm_60 has everything used here. G, z, bits and codes per word are template
 * constants (Pn3t, Pn4t), so the loops have fixed trip counts.
 *
 * Why this layout: one thread per (group, candidate) sums its candidate's
 * error over the elements in index order by itself, so no partial sums are
 * ever combined (combining them in another order changes err; see the
 * golden catch_sum_* groups). The only cross-thread step on err is the
 * choice of the winner, done by one thread in the reference's order. Cost:
 * 36 double divisions per weight, the same work as the CPU. Resources (sm_75
 * build): 72 registers, 16.5 KB shared memory per 288-thread block, i.e.
 * 3 blocks (864 threads) per SM on a P100.
 *
 * Flags: the arithmetic does not depend on them. Checked in the PTX: with
 * -ftz=true or --use_fast_math there is still no f32 operation and no
 * fma; fast-math only turns __ddiv_rn(x, 4.0 or 8.0) into x * 0.25 or
 * x * 0.125, which is the same value (z is a power of two).
 *
 * Review against pn_quantize_group_ref (quant/pn_ref.c), step by step:
 *
 *  ref: double v = (double)w[e]                     -> phase LOAD widens each
 *       float to double once (exact) into shared memory; every later step
 *       reads that double, as the ref reads (double)w[e].
 *  ref: if (!isfinite(v)) { *bad_index = e; return PN_ERR_NONFINITE; }
 *       -> phases STATS/TREE take the minimum index of a non-finite element
 *       (the first one in index order, which is where the ref's loop
 *       stops). Phase SEARCH then skips the group and records key
 *       (group << 8) | e; the host decodes row and column from the smallest
 *       key of the launch, i.e. the lowest row, then the lowest group: the
 *       group pn_quantize_row_ref would stop at first, row by row.
 *  ref: amax = max fabs(v), max = max v, min = min v (from 0, -inf, +inf)
 *       -> STATS: 32 lanes per group each reduce elements lane, lane+32,
 *       lane+64 with the same comparisons; TREE combines the 32 partials in
 *       five halving rounds. max/min/amax of exact values do not depend on
 *       the order (the only order-dependent detail, the sign of a zero max or
 *       min, cannot change fabs(min) > max). The device does no float
 *       arithmetic at all (pn_widen_float goes through the bits), so a
 *       flush-to-zero build (-ftz=true) cannot drop float subnormals.
 *  ref: amax == 0.0 -> d = +0.0, codes z             -> SEARCH marks GS_ZERO;
 *       CODES writes z; PACK writes d bits 0x0000.
 *  ref: sigma = (fabs(min) > max) ? 1.0 : -1.0       -> SEARCH, same expression.
 *  ref: for i in 0..35: m = (double)(50 + 2*i) / 100.0
 *       -> SEARCH, thread c is candidate i = c: pn_ddiv((double)(50+2c), 100.0).
 *  ref: t = sigma * m * amax / (double)z (left to right)
 *       -> pn_ddiv(pn_dmul(pn_dmul(sigma, m), amax), z).
 *  ref: bits = pn_fp16_from_double(t); s = pn_fp16_to_double(bits)
 *       -> pn_hd_fp16_from_double (the same algorithm: split the sign, scale
 *       by an exact power of two so the last kept bit has weight 1, one
 *       rint, ties to even) and pn_hd_fp16_to_double (mantissa times an exact
 *       power of two). Tested against the host function on every golden
 *       fp16 input (pn_cuda_fp16_from_double_batch).
 *  ref: !isfinite(s) -> any_overflow, skip; s == 0.0 -> skip
 *       -> bits exponent 31 (s = +-inf; NaN cannot occur: t is finite) ->
 *       CS_OVERFLOW; (bits & 0x7fff) == 0 (s = +-0) -> CS_UNDERFLOW.
 *  ref: for e in 0..G-1 (index order): q = (double)w[e] / s; n = rint(q) + z;
 *       clamp n to [0, 2z-1]; diff = (double)w[e] - s * (n - z);
 *       err = err + diff * diff
 *       -> the same loop in the same order in ONE thread per candidate, so
 *       err is summed exactly as on the CPU. Every operation is an explicit
 *       round-to-nearest intrinsic (__ddiv_rn, __dadd_rn, __dsub_rn,
 *       __dmul_rn), which the compiler never contracts into an FMA whatever
 *       -fmad says (-fmad=false is set as well); rint() on the device rounds
 *       half to even like the host's rint in the default rounding mode.
 *  ref: if (err <= best_err) take i (ties go to the later candidate)
 *       -> SELECT: thread c == 0 of the group scans the 36 (err, state) pairs
 *       in ascending i with the same test, starting from best = +inf.
 *  ref: best_i < 0 && any_overflow -> PN_ERR_SCALE_OVERFLOW (*bad_index = 0)
 *       -> SELECT records key (group << 8) | 0x80; the host reports the
 *       group's first column.
 *  ref: best_i < 0 otherwise -> zero group          -> SELECT marks GS_ZERO.
 *  ref: s = pn_fp16_to_double(best_bits); codes[e] = clamp(rint(w[e]/s)+z)
 *       -> CODES, threads of the group over e = c, c+36, ...; same ops.
 *  ref: pn_pack_block: d little-endian, word wi = OR of code (wi*per_word+t)
 *       << (bits*(t>>1) + 16*(t&1)), little-endian; reserved bits 0
 *       -> PACK, one thread per (group, word), into a byte staging area (the
 *       34-byte blocks are not 4-byte aligned), then STORE copies the 8*34
 *       staged bytes byte by byte to out + 34 * first_group.
 *  Groups that fail write 34 zero bytes (the output is unspecified then).
 */
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {
#include "common/pn_error.h"
#include "quant/pn.h"
#include "quant/types.h"
}
#include "quant/pn_cuda.h"

#define PN_HD __host__ __device__ __forceinline__

namespace
{

constexpr int kGroupsPerBlock = 8;
constexpr int kCands = PN_N_CANDIDATES;            /* 36 */
constexpr int kThreads = kGroupsPerBlock * kCands; /* 288 */
constexpr int kStatLanes = 32;
constexpr int kGroupMax = 80;
/* Row stride of the weights in shared memory, in doubles: odd, so that the
 * two groups a warp straddles read from different banks. */
constexpr int kWStride = kGroupMax + 1;
/* The pn3t/pn4t frame from quant/blocks.h (the one source of the layout):
 * the kernel stages and packs blocks byte by byte with these. */
constexpr int kBlockBytes = (int)sizeof(block_pnt);
constexpr int kScaleAt = (int)offsetof(block_pnt, d);
constexpr int kWordsAt = (int)offsetof(block_pnt, qs);
static_assert(kBlockBytes == PN_BLOCK_BYTES && kBlockBytes == 34 && kScaleAt == 0 && kWordsAt == 2,
              "the kernel's STORE and PACK phases assume quant/blocks.h's block_pnt");

static_assert(kThreads >= kGroupsPerBlock * kBlockBytes, "STORE writes one byte per thread");
static_assert(kGroupsPerBlock * 8 <= kThreads, "PACK takes one thread per word");
static_assert(kStatLanes <= kCands, "STATS lanes are candidate threads");

enum : unsigned char { GS_SEARCH = 0, GS_ZERO = 1, GS_ERROR = 2 };
enum : unsigned char { CS_VALID = 0, CS_UNDERFLOW = 1, CS_OVERFLOW = 2 };

/* Phases of the search kernel (each ends at a barrier). */
enum {
    PH_LOAD = 0,
    PH_STATS = 1,
    PH_TREE_FIRST = 2, /* 5 rounds: 16, 8, 4, 2, 1 */
    PH_SEARCH = 7,
    PH_SELECT = 8,
    PH_CODES = 9,
    PH_PACK = 10,
    PH_STORE = 11,
    PH_COUNT = 12
};

/* No error key: every real key is smaller. */
constexpr unsigned long long kNoKey = ~0ull;
constexpr unsigned long long kKeyOverflow = 0x80ull;

struct KParams {
    const float *x;          /* n_groups * G floats */
    uint8_t *out;            /* n_groups * 34 bytes */
    unsigned long long *key; /* smallest error key, kNoKey when none */
    long long n_groups;
};

/* The format's constants as compile-time values, so that the loops have
 * fixed trip counts (the values are those of pn_params_get, checked at
 * launch). */
struct Pn3t {
    static constexpr int G = 80, Z = 4, BITS = 3, PER_WORD = 10;
};
struct Pn4t {
    static constexpr int G = 64, Z = 8, BITS = 4, PER_WORD = 8;
};

struct KShared {
    double w[kGroupsPerBlock][kWStride];
    double st_amax[kGroupsPerBlock][kStatLanes];
    double st_max[kGroupsPerBlock][kStatLanes];
    double st_min[kGroupsPerBlock][kStatLanes];
    int st_bad[kGroupsPerBlock][kStatLanes];
    double err[kGroupsPerBlock][kCands];
    double win_s[kGroupsPerBlock];
    unsigned short cbits[kGroupsPerBlock][kCands];
    unsigned short win_bits[kGroupsPerBlock];
    unsigned char cstate[kGroupsPerBlock][kCands];
    unsigned char gstate[kGroupsPerBlock];
    unsigned char codes[kGroupsPerBlock][kGroupMax];
    unsigned char staging[kGroupsPerBlock * kBlockBytes];
};

/* --- exact arithmetic, the same on the device and in the emulator -------- */

PN_HD double pn_dadd(double a, double b)
{
#ifdef __CUDA_ARCH__
    return __dadd_rn(a, b);
#else
    return a + b; /* host: SSE2 double, -ffp-contract=off */
#endif
}

PN_HD double pn_dsub(double a, double b)
{
#ifdef __CUDA_ARCH__
    return __dsub_rn(a, b);
#else
    return a - b;
#endif
}

PN_HD double pn_dmul(double a, double b)
{
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}

PN_HD double pn_ddiv(double a, double b)
{
#ifdef __CUDA_ARCH__
    return __ddiv_rn(a, b);
#else
    return a / b;
#endif
}

/* Round to an integral value, half to even (device rint; host rint in the
 * default rounding mode, which this library never changes). */
PN_HD double pn_rint(double a)
{
    return rint(a);
}

PN_HD uint64_t pn_double_bits(double x)
{
#ifdef __CUDA_ARCH__
    return (uint64_t)__double_as_longlong(x);
#else
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

PN_HD double pn_bits_double(uint64_t u)
{
#ifdef __CUDA_ARCH__
    return __longlong_as_double((long long)u);
#else
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

PN_HD bool pn_is_finite(double x)
{
    return (pn_double_bits(x) & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
}

/* 2^e for -1022 <= e <= 1023, built from its bits (exact). */
PN_HD double pn_pow2(int e)
{
    return pn_bits_double((uint64_t)(e + 1023) << 52);
}

PN_HD uint32_t pn_float_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

/* float -> double, exact for every float, through the bits (so the emulator
 * runs this very code too). Not a plain conversion, because a build with
 * -ftz=true (or --use_fast_math) turns that into cvt.ftz.f64.f32, which
 * flushes float subnormals to zero; the CPU keeps them. */
PN_HD double pn_widen_float(float f)
{
    const uint32_t u = pn_float_bits(f);
    const uint64_t sign = (uint64_t)(u >> 31) << 63;
    const uint32_t exp = (u >> 23) & 0xffu, mant = u & 0x7fffffu;
    if (exp == 0xffu) /* infinity or NaN (payload kept) */
        return pn_bits_double(sign | 0x7ff0000000000000ull | ((uint64_t)mant << 29));
    if (exp == 0u) { /* zero or subnormal: mant * 2^-149, both factors exact */
        const double v = pn_dmul((double)mant, pn_pow2(-149));
        return sign ? -v : v;
    }
    return pn_bits_double(sign | ((uint64_t)(exp - 127u + 1023u) << 52) | ((uint64_t)mant << 29));
}

/* fp16(x): one rounding of the exact double, ties to even: the rounding
 * pn_fp16_from_double (quant/fp16.h) defines, computed another way. Why a
 * rounder of its own (the project's third; see quant/fp16.h for the list):
 * the host's is a plain static inline C function, which device code cannot
 * call, and it rounds by shifting a 64-bit significand; here the value is
 * scaled by an exact power of two so that its last kept bit weighs 1 and
 * rounded once with rint, every step an explicit round-to-nearest double
 * operation, so one __host__ __device__ body serves the GPU and the host
 * emulator alike. Tests: test_pn_cuda's fp16 backend tests compare it with
 * pn_fp16_from_double on every golden input and on every half-way point. */
PN_HD unsigned short pn_hd_fp16_from_double(double x)
{
    const uint64_t u = pn_double_bits(x);
    const unsigned short sign = (unsigned short)((u >> 48) & 0x8000u);
    const uint64_t mag = u & 0x7fffffffffffffffull;
    if (mag > 0x7ff0000000000000ull) /* NaN */
        return (unsigned short)(sign | 0x7e00u);
    const double a = pn_bits_double(mag);
    if (a >= 65520.0) /* rounds past 65504 (also +-inf) */
        return (unsigned short)(sign | 0x7c00u);
    if (a < 6.103515625e-05) { /* 2^-14: subnormal halves, unit 2^-24 */
        /* a * 2^24 is exact: scaling by a power of two into [0, 1024]. */
        const double q = pn_rint(pn_dmul(a, 16777216.0));
        return (unsigned short)(sign | (unsigned short)q); /* 1024 -> 0x0400 */
    }
    int exp = (int)(mag >> 52) - 1023; /* a normal double: a in [2^exp, 2^(exp+1)) */
    const double q = pn_rint(pn_dmul(a, pn_pow2(10 - exp))); /* exact scaling, 1024..2048 */
    unsigned int mant = (unsigned int)q;
    if (mant == 2048u) {
        mant = 1024u;
        exp += 1;
    }
    if (exp > 15)
        return (unsigned short)(sign | 0x7c00u);
    return (unsigned short)(sign | (unsigned short)((exp + 15) << 10) |
                            (unsigned short)(mant - 1024u));
}

/* The half's value as a double (exact). Only called for finite halves. */
PN_HD double pn_hd_fp16_to_double(unsigned short h)
{
    const int exp = (h >> 10) & 0x1f;
    const int mant = h & 0x3ff;
    double v;
    if (exp == 0)
        v = pn_dmul((double)mant, pn_pow2(-24));
    else
        v = pn_dmul((double)(mant | 0x400), pn_pow2(exp - 25));
    return (h & 0x8000u) ? -v : v;
}

/* The code of w for scale s: clamp(rint(w / s) + z, 0, 2z - 1), as in the
 * reference (n is kept as a double until the end, like there). */
PN_HD double pn_code_of(double w, double s, double zd, double nmax)
{
    double n = pn_dadd(pn_rint(pn_ddiv(w, s)), zd);
    if (n < 0.0)
        n = 0.0;
    if (n > nmax)
        n = nmax;
    return n;
}

PN_HD void pn_key_min(unsigned long long *key, unsigned long long v)
{
#ifdef __CUDA_ARCH__
    atomicMin(key, v);
#else
    if (v < *key)
        *key = v;
#endif
}

/* --- the kernel's phases --------------------------------------------------- */

template <class T> PN_HD void pn_phase_load(const KParams &p, KShared &sm, long long g0, int tid)
{
    const int n = kGroupsPerBlock * T::G;
    for (int idx = tid; idx < n; idx += kThreads) {
        const int gg = idx / T::G, e = idx % T::G;
        if (g0 + gg < p.n_groups)
            sm.w[gg][e] = pn_widen_float(p.x[g0 * T::G + idx]); /* coalesced */
    }
}

template <class T> PN_HD void pn_phase_stats(KShared &sm, int g, int lane)
{
    double amax = 0.0, max = -pn_bits_double(0x7ff0000000000000ull);
    double min = pn_bits_double(0x7ff0000000000000ull);
    int bad = T::G;
    for (int e = lane; e < T::G; e += kStatLanes) {
        const double v = sm.w[g][e];
        if (!pn_is_finite(v)) {
            if (e < bad)
                bad = e;
            continue;
        }
        const double a = fabs(v);
        if (a > amax)
            amax = a;
        if (v > max)
            max = v;
        if (v < min)
            min = v;
    }
    sm.st_amax[g][lane] = amax;
    sm.st_max[g][lane] = max;
    sm.st_min[g][lane] = min;
    sm.st_bad[g][lane] = bad;
}

PN_HD void pn_phase_tree(KShared &sm, int g, int lane, int half)
{
    const int o = lane + half;
    if (sm.st_amax[g][o] > sm.st_amax[g][lane])
        sm.st_amax[g][lane] = sm.st_amax[g][o];
    if (sm.st_max[g][o] > sm.st_max[g][lane])
        sm.st_max[g][lane] = sm.st_max[g][o];
    if (sm.st_min[g][o] < sm.st_min[g][lane])
        sm.st_min[g][lane] = sm.st_min[g][o];
    if (sm.st_bad[g][o] < sm.st_bad[g][lane])
        sm.st_bad[g][lane] = sm.st_bad[g][o];
}

template <class T>
PN_HD void pn_phase_search(const KParams &p, KShared &sm, long long gi, int g, int c)
{
    const int bad = sm.st_bad[g][0];
    if (bad < T::G) {
        if (c == 0) {
            sm.gstate[g] = GS_ERROR;
            pn_key_min(p.key, ((unsigned long long)gi << 8) | (unsigned long long)bad);
        }
        return;
    }
    const double amax = sm.st_amax[g][0];
    const double max = sm.st_max[g][0];
    const double min = sm.st_min[g][0];
    if (amax == 0.0) {
        if (c == 0)
            sm.gstate[g] = GS_ZERO;
        return;
    }
    if (c == 0)
        sm.gstate[g] = GS_SEARCH;
    const double sigma = (fabs(min) > max) ? 1.0 : -1.0;
    const double m = pn_ddiv((double)(50 + 2 * c), 100.0);
    const double t = pn_ddiv(pn_dmul(pn_dmul(sigma, m), amax), (double)T::Z);
    const unsigned short bits = pn_hd_fp16_from_double(t);
    sm.cbits[g][c] = bits;
    if ((bits & 0x7c00u) == 0x7c00u) {
        sm.cstate[g][c] = CS_OVERFLOW;
        return;
    }
    if ((bits & 0x7fffu) == 0u) {
        sm.cstate[g][c] = CS_UNDERFLOW;
        return;
    }
    const double s = pn_hd_fp16_to_double(bits);
    const double zd = (double)T::Z, nmax = (double)(2 * T::Z - 1);
    double err = 0.0;
    for (int e = 0; e < T::G; e++) {
        const double w = sm.w[g][e];
        const double n = pn_code_of(w, s, zd, nmax);
        const double diff = pn_dsub(w, pn_dmul(s, pn_dsub(n, zd)));
        err = pn_dadd(err, pn_dmul(diff, diff));
    }
    sm.err[g][c] = err;
    sm.cstate[g][c] = CS_VALID;
}

template <class T> PN_HD void pn_phase_select(const KParams &p, KShared &sm, long long gi, int g)
{
    if (sm.gstate[g] != GS_SEARCH)
        return;
    double best = pn_bits_double(0x7ff0000000000000ull);
    int best_i = -1;
    bool any_overflow = false;
    for (int i = 0; i < kCands; i++) {
        if (sm.cstate[g][i] == CS_OVERFLOW) {
            any_overflow = true;
            continue;
        }
        if (sm.cstate[g][i] == CS_UNDERFLOW)
            continue;
        if (sm.err[g][i] <= best) {
            best = sm.err[g][i];
            best_i = i;
        }
    }
    if (best_i < 0) {
        if (any_overflow) {
            sm.gstate[g] = GS_ERROR;
            pn_key_min(p.key, ((unsigned long long)gi << 8) | kKeyOverflow);
        } else {
            sm.gstate[g] = GS_ZERO;
        }
        return;
    }
    sm.win_bits[g] = sm.cbits[g][best_i];
    sm.win_s[g] = pn_hd_fp16_to_double(sm.cbits[g][best_i]);
}

template <class T> PN_HD void pn_phase_codes(KShared &sm, int g, int c)
{
    const unsigned char st = sm.gstate[g];
    if (st == GS_ZERO) {
        for (int e = c; e < T::G; e += kCands)
            sm.codes[g][e] = (unsigned char)T::Z;
    } else if (st == GS_SEARCH) {
        const double s = sm.win_s[g];
        const double zd = (double)T::Z, nmax = (double)(2 * T::Z - 1);
        for (int e = c; e < T::G; e += kCands)
            sm.codes[g][e] = (unsigned char)pn_code_of(sm.w[g][e], s, zd, nmax);
    }
}

template <class T> PN_HD void pn_phase_pack(const KParams &p, KShared &sm, long long g0, int tid)
{
    if (tid >= kGroupsPerBlock * 8)
        return;
    const int gg = tid >> 3, wi = tid & 7;
    if (g0 + gg >= p.n_groups)
        return;
    const unsigned char st = sm.gstate[gg];
    uint32_t word = 0;
    unsigned short d = 0;
    if (st == GS_SEARCH || st == GS_ZERO) {
        for (int t = 0; t < T::PER_WORD; t++) {
            const int shift = T::BITS * (t >> 1) + 16 * (t & 1);
            word |= (uint32_t)sm.codes[gg][wi * T::PER_WORD + t] << shift;
        }
        if (st == GS_SEARCH)
            d = sm.win_bits[gg];
    }
    unsigned char *b = sm.staging + gg * kBlockBytes;
    b[kWordsAt + 4 * wi + 0] = (unsigned char)word;
    b[kWordsAt + 4 * wi + 1] = (unsigned char)(word >> 8);
    b[kWordsAt + 4 * wi + 2] = (unsigned char)(word >> 16);
    b[kWordsAt + 4 * wi + 3] = (unsigned char)(word >> 24);
    if (wi == 0) {
        b[kScaleAt] = (unsigned char)d;
        b[kScaleAt + 1] = (unsigned char)(d >> 8);
    }
}

template <class T>
PN_HD void pn_phase_store(const KParams &p, const KShared &sm, long long g0, int tid)
{
    if (tid >= kGroupsPerBlock * kBlockBytes)
        return;
    if (g0 + tid / kBlockBytes < p.n_groups)
        p.out[g0 * kBlockBytes + tid] = sm.staging[tid];
}

/* One phase for one thread of block `blk`. */
template <class T>
PN_HD void pn_search_phase(int ph, const KParams &p, KShared &sm, long long blk, int tid)
{
    const int g = tid / kCands, c = tid % kCands;
    const long long g0 = blk * kGroupsPerBlock;
    const long long gi = g0 + g;
    const bool present = gi < p.n_groups;
    if (ph == PH_LOAD) {
        pn_phase_load<T>(p, sm, g0, tid);
    } else if (ph == PH_STATS) {
        if (present && c < kStatLanes)
            pn_phase_stats<T>(sm, g, c);
    } else if (ph < PH_SEARCH) {
        const int half = (kStatLanes / 2) >> (ph - PH_TREE_FIRST);
        if (present && c < half)
            pn_phase_tree(sm, g, c, half);
    } else if (ph == PH_SEARCH) {
        if (present)
            pn_phase_search<T>(p, sm, gi, g, c);
    } else if (ph == PH_SELECT) {
        if (present && c == 0)
            pn_phase_select<T>(p, sm, gi, g);
    } else if (ph == PH_CODES) {
        if (present)
            pn_phase_codes<T>(sm, g, c);
    } else if (ph == PH_PACK) {
        pn_phase_pack<T>(p, sm, g0, tid);
    } else if (ph == PH_STORE) {
        pn_phase_store<T>(p, sm, g0, tid);
    }
}

static_assert((kStatLanes >> (PH_SEARCH - PH_TREE_FIRST)) == 1, "the tree rounds end at one lane");

template <class T> __global__ void __launch_bounds__(kThreads) pn_search_kernel(KParams p)
{
    static_assert(T::G <= kGroupMax && T::G < 128, "a group fits the shared arrays and 7 key bits");
    static_assert(T::PER_WORD * 8 == T::G, "eight words per block");
    __shared__ KShared sm;
    for (int ph = 0; ph < PH_COUNT; ph++) {
        pn_search_phase<T>(ph, p, sm, (long long)blockIdx.x, (int)threadIdx.x);
        __syncthreads();
    }
}

__global__ void pn_fp16_kernel(const double *x, unsigned short *out, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = pn_hd_fp16_from_double(x[i]);
}

/* The host emulator: every block, every phase, every thread in turn. The
 * shared memory is filled with a junk pattern before each block so that a
 * read of something no phase wrote shows up as wrong bytes. */
template <class T> void pn_emulate_search(const KParams &p, KShared *sm)
{
    const long long n_blocks = (p.n_groups + kGroupsPerBlock - 1) / kGroupsPerBlock;
    for (long long b = 0; b < n_blocks; b++) {
        memset(sm, 0x5b, sizeof *sm); /* unlike the output guard's 0xa5 */
        for (int ph = 0; ph < PH_COUNT; ph++)
            for (int tid = 0; tid < kThreads; tid++)
                pn_search_phase<T>(ph, p, *sm, b, tid);
    }
}

} /* namespace */

/* --- host side -------------------------------------------------------------- */

struct pn_cuda_slot {
    float *h_in;               /* pinned (emulator: malloc), in_bytes */
    uint8_t *h_out;            /* pinned (emulator: malloc), out_bytes */
    unsigned long long *h_key; /* pinned (emulator: malloc) */
    float *d_in;
    uint8_t *d_out;
    unsigned long long *d_key;
    cudaStream_t stream;
    bool busy;
    int type;
    int64_t n_rows, K, row_base;
};

struct pn_cuda_ctx {
    bool emulator;
    bool poisoned;
    int device;
    char name[400]; /* fits cudaDeviceProp.name (256) and the suffix */
    size_t in_bytes, out_bytes;
    size_t chunk_floats; /* <= in_bytes / sizeof(float) */
    KShared *emu_smem;
    pn_cuda_slot slot[PN_CUDA_SLOTS];
};

static const char pn_cuda_no_device_hint[] = "no NVIDIA GPU or driver usable on this machine?";

static pn_status pn_cuda_fail(pn_cuda_ctx *ctx, pn_error *err, cudaError_t e, const char *what)
{
    if (ctx)
        ctx->poisoned = true;
    return pn_error_set(err, PN_ERR_CUDA, "CUDA error on %s: %s: %s (%s)",
                        ctx ? ctx->name : "the GPU", what, cudaGetErrorString(e),
                        cudaGetErrorName(e));
}

static pn_status pn_cuda_check_usable(pn_cuda_ctx *ctx, pn_error *err)
{
    if (!ctx)
        return pn_error_set(err, PN_ERR_USAGE, "CUDA backend: no context (open it first)");
    if (ctx->poisoned)
        return pn_error_set(err, PN_ERR_CUDA,
                            "CUDA backend on %s: an earlier CUDA call failed; close the context",
                            ctx->name);
    if (!ctx->emulator) {
        cudaError_t e = cudaSetDevice(ctx->device);
        if (e != cudaSuccess)
            return pn_cuda_fail(ctx, err, e, "cudaSetDevice");
    }
    return PN_OK;
}

static void pn_cuda_free_buffers(pn_cuda_ctx *ctx)
{
    for (int i = 0; i < PN_CUDA_SLOTS; i++) {
        pn_cuda_slot *s = &ctx->slot[i];
        if (ctx->emulator) {
            free(s->h_in);
            free(s->h_out);
            free(s->h_key);
        } else {
            if (s->stream)
                cudaStreamSynchronize(s->stream);
            if (s->h_in)
                cudaFreeHost(s->h_in);
            if (s->h_out)
                cudaFreeHost(s->h_out);
            if (s->h_key)
                cudaFreeHost(s->h_key);
            if (s->d_in)
                cudaFree(s->d_in);
            if (s->d_out)
                cudaFree(s->d_out);
            if (s->d_key)
                cudaFree(s->d_key);
            if (s->stream)
                cudaStreamDestroy(s->stream);
        }
        memset(s, 0, sizeof *s);
    }
    free(ctx->emu_smem);
    ctx->emu_smem = NULL;
}

static pn_cuda_ctx *pn_cuda_ctx_new(void)
{
    pn_cuda_ctx *ctx = (pn_cuda_ctx *)calloc(1, sizeof *ctx);
    if (!ctx)
        return NULL;
    ctx->in_bytes = PN_CUDA_SLOT_INPUT_BYTES;
    /* The most blocks the input can need: pn4t, 64 weights per 34 bytes. */
    ctx->out_bytes = (PN_CUDA_SLOT_INPUT_BYTES / sizeof(float) / 64) * PN_BLOCK_BYTES;
    ctx->chunk_floats = PN_CUDA_SLOT_INPUT_BYTES / sizeof(float);
    return ctx;
}

extern "C" bool pn_cuda_build_enabled(void)
{
    return true;
}

extern "C" pn_status pn_cuda_open(int device, pn_cuda_ctx **out, pn_error *err)
{
    if (!out)
        return pn_error_set(err, PN_ERR_USAGE, "pn_cuda_open: out is NULL");
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return pn_error_set(err, PN_ERR_CUDA,
                            "no CUDA device: cudaGetDeviceCount failed: %s (%s; %s)",
                            cudaGetErrorString(e), cudaGetErrorName(e), pn_cuda_no_device_hint);
    }
    if (count <= 0)
        return pn_error_set(err, PN_ERR_CUDA, "no CUDA device: the driver reports 0 devices");
    if (device < 0 || device >= count)
        return pn_error_set(err, PN_ERR_CUDA,
                            "CUDA device %d does not exist: this machine has %d CUDA device%s "
                            "(numbered 0..%d)",
                            device, count, count == 1 ? "" : "s", count - 1);
    e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return pn_cuda_fail(NULL, err, e, "cudaSetDevice");
    cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess)
        return pn_cuda_fail(NULL, err, e, "cudaGetDeviceProperties");
    cudaFuncAttributes fa;
    e = cudaFuncGetAttributes(&fa, pn_search_kernel<Pn3t>);
    if (e == cudaSuccess)
        e = cudaFuncGetAttributes(&fa, pn_search_kernel<Pn4t>);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return pn_error_set(err, PN_ERR_CUDA,
                            "CUDA device %d (%s, compute capability %d.%d): this build has no "
                            "kernel it can run (%s); rebuild with -DCMAKE_CUDA_ARCHITECTURES=%d%d",
                            device, prop.name, prop.major, prop.minor, cudaGetErrorString(e),
                            prop.major, prop.minor);
    }

    pn_cuda_ctx *ctx = pn_cuda_ctx_new();
    if (!ctx)
        return pn_error_set(err, PN_ERR_NOMEM, "CUDA backend: out of host memory for the context");
    ctx->device = device;
    snprintf(ctx->name, sizeof ctx->name, "%s (sm_%d%d, device %d)", prop.name, prop.major,
             prop.minor, device);
    const char *what = NULL;
    for (int i = 0; i < PN_CUDA_SLOTS && !what; i++) {
        pn_cuda_slot *s = &ctx->slot[i];
        if ((e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking)) != cudaSuccess)
            what = "cudaStreamCreateWithFlags";
        else if ((e = cudaMallocHost((void **)&s->h_in, ctx->in_bytes)) != cudaSuccess)
            what = "cudaMallocHost (input buffer)";
        else if ((e = cudaMallocHost((void **)&s->h_out, ctx->out_bytes)) != cudaSuccess)
            what = "cudaMallocHost (output buffer)";
        else if ((e = cudaMallocHost((void **)&s->h_key, sizeof *s->h_key)) != cudaSuccess)
            what = "cudaMallocHost (error key)";
        else if ((e = cudaMalloc((void **)&s->d_in, ctx->in_bytes)) != cudaSuccess)
            what = "cudaMalloc (input buffer)";
        else if ((e = cudaMalloc((void **)&s->d_out, ctx->out_bytes)) != cudaSuccess)
            what = "cudaMalloc (output buffer)";
        else if ((e = cudaMalloc((void **)&s->d_key, sizeof *s->d_key)) != cudaSuccess)
            what = "cudaMalloc (error key)";
    }
    if (what) {
        pn_status st = pn_cuda_fail(ctx, err, e, what);
        pn_cuda_free_buffers(ctx);
        free(ctx);
        return st;
    }
    *out = ctx;
    return PN_OK;
}

extern "C" pn_status pn_cuda_open_emulator(pn_cuda_ctx **out, pn_error *err)
{
    if (!out)
        return pn_error_set(err, PN_ERR_USAGE, "pn_cuda_open_emulator: out is NULL");
    *out = NULL;
    pn_cuda_ctx *ctx = pn_cuda_ctx_new();
    if (!ctx)
        return pn_error_set(err, PN_ERR_NOMEM, "CUDA emulator: out of host memory");
    ctx->emulator = true;
    ctx->device = -1;
    snprintf(ctx->name, sizeof ctx->name, "host emulator of the CUDA kernel");
    bool ok = (ctx->emu_smem = (KShared *)malloc(sizeof(KShared))) != NULL;
    for (int i = 0; i < PN_CUDA_SLOTS && ok; i++) {
        pn_cuda_slot *s = &ctx->slot[i];
        s->h_in = (float *)malloc(ctx->in_bytes);
        s->h_out = (uint8_t *)malloc(ctx->out_bytes);
        s->h_key = (unsigned long long *)malloc(sizeof *s->h_key);
        ok = s->h_in && s->h_out && s->h_key;
    }
    if (!ok) {
        pn_cuda_free_buffers(ctx);
        free(ctx);
        return pn_error_set(err, PN_ERR_NOMEM, "CUDA emulator: cannot allocate %zu-byte buffers",
                            (size_t)PN_CUDA_SLOT_INPUT_BYTES);
    }
    *out = ctx;
    return PN_OK;
}

extern "C" void pn_cuda_close(pn_cuda_ctx *ctx)
{
    if (!ctx)
        return;
    if (!ctx->emulator)
        cudaSetDevice(ctx->device);
    pn_cuda_free_buffers(ctx);
    free(ctx);
}

extern "C" const char *pn_cuda_device_name(const pn_cuda_ctx *ctx)
{
    return ctx ? ctx->name : "no CUDA context";
}

extern "C" int64_t pn_cuda_max_rows(const pn_cuda_ctx *ctx, int64_t K)
{
    if (!ctx || K <= 0)
        return 0;
    return (int64_t)ctx->chunk_floats / K;
}

static pn_status pn_cuda_require_idle(pn_cuda_ctx *ctx, const char *what, pn_error *err);

extern "C" pn_status pn_cuda_set_chunk_floats(pn_cuda_ctx *ctx, size_t chunk_floats, pn_error *err)
{
    if (!ctx)
        return pn_error_set(err, PN_ERR_USAGE, "CUDA backend: no context (open it first)");
    pn_status st = pn_cuda_require_idle(ctx, "pn_cuda_set_chunk_floats", err);
    if (st != PN_OK)
        return st;
    const size_t max = ctx->in_bytes / sizeof(float);
    if (chunk_floats < 1 || chunk_floats > max)
        return pn_error_set(err, PN_ERR_USAGE,
                            "pn_cuda_set_chunk_floats: %zu floats is outside 1..%zu", chunk_floats,
                            max);
    ctx->chunk_floats = chunk_floats;
    return PN_OK;
}

extern "C" float *pn_cuda_slot_input(pn_cuda_ctx *ctx, int slot)
{
    if (!ctx || slot < 0 || slot >= PN_CUDA_SLOTS)
        return NULL;
    return ctx->slot[slot].h_in;
}

extern "C" const uint8_t *pn_cuda_slot_output(const pn_cuda_ctx *ctx, int slot)
{
    if (!ctx || slot < 0 || slot >= PN_CUDA_SLOTS)
        return NULL;
    return ctx->slot[slot].h_out;
}

static const char *pn_cuda_type_name(int type)
{
    const pn_type_traits *tt = pn_type_traits_get(type);
    return tt ? tt->name : "?";
}

template <class T> static bool pn_cuda_params_match_t(const pn_params *pp)
{
    return pp->group == T::G && pp->z == T::Z && pp->bits == T::BITS && pp->per_word == T::PER_WORD;
}

static bool pn_cuda_params_match(const pn_params *pp)
{
    return pp->type == PN_TYPE_PN3T ? pn_cuda_params_match_t<Pn3t>(pp)
                                    : pn_cuda_params_match_t<Pn4t>(pp);
}

extern "C" pn_status pn_cuda_submit(pn_cuda_ctx *ctx, int slot, int type, const float *x,
                                    int64_t n_rows, int64_t K, int64_t row_base, pn_error *err)
{
    pn_status st = pn_cuda_check_usable(ctx, err);
    if (st != PN_OK)
        return st;
    const pn_params *pp = pn_params_get(type);
    if (!pp)
        return pn_error_set(err, PN_ERR_USAGE, "CUDA search: type %d is not pn3t or pn4t", type);
    if (!pn_cuda_params_match(pp))
        return pn_error_set(err, PN_ERR_INTERNAL,
                            "CUDA search: the kernel's %s constants differ from pn_params_get",
                            pn_cuda_type_name(type));
    if (slot < 0 || slot >= PN_CUDA_SLOTS)
        return pn_error_set(err, PN_ERR_USAGE, "CUDA search: slot %d does not exist (0..%d)", slot,
                            PN_CUDA_SLOTS - 1);
    pn_cuda_slot *s = &ctx->slot[slot];
    if (s->busy)
        return pn_error_set(err, PN_ERR_USAGE,
                            "CUDA search: slot %d is busy (collect it before submitting again)",
                            slot);
    if (K <= 0 || K % pp->group != 0)
        return pn_error_set(err, PN_ERR_USAGE,
                            "CUDA search: row length %lld is not a positive multiple of the %s "
                            "group (%d)",
                            (long long)K, pn_cuda_type_name(type), pp->group);
    const int64_t max_rows = pn_cuda_max_rows(ctx, K);
    if (n_rows < 1 || n_rows > max_rows)
        return pn_error_set(
            err, PN_ERR_USAGE,
            "CUDA search: %lld rows of %lld weights do not fit a slot (1..%lld rows)",
            (long long)n_rows, (long long)K, (long long)max_rows);
    if (!x)
        return pn_error_set(err, PN_ERR_USAGE, "CUDA search: x is NULL");

    const size_t in_bytes = (size_t)n_rows * (size_t)K * sizeof(float);
    const long long n_groups = (long long)(n_rows * (K / pp->group));
    if (x != s->h_in)
        memcpy(s->h_in, x, in_bytes);
    s->type = type;
    s->n_rows = n_rows;
    s->K = K;
    s->row_base = row_base;

    KParams p;
    p.n_groups = n_groups;
    if (ctx->emulator) {
        *s->h_key = kNoKey;
        p.x = s->h_in;
        p.out = s->h_out;
        p.key = s->h_key;
        /* A guard band after the chunk: the kernel must not store past it
         * (on the GPU such a store would land unnoticed in the slack of the
         * slot's buffer). */
        const size_t used = (size_t)n_groups * PN_BLOCK_BYTES;
        size_t guard = ctx->out_bytes - used;
        if (guard > (size_t)(kGroupsPerBlock * kBlockBytes))
            guard = (size_t)(kGroupsPerBlock * kBlockBytes);
        memset(s->h_out + used, 0xa5, guard);
        if (type == PN_TYPE_PN3T)
            pn_emulate_search<Pn3t>(p, ctx->emu_smem);
        else
            pn_emulate_search<Pn4t>(p, ctx->emu_smem);
        for (size_t i = 0; i < guard; i++)
            if (s->h_out[used + i] != 0xa5)
                return pn_error_set(err, PN_ERR_INTERNAL,
                                    "CUDA emulator: the kernel wrote byte %zu past its chunk of "
                                    "%lld groups",
                                    i, n_groups);
        s->busy = true;
        return PN_OK;
    }
    p.x = s->d_in;
    p.out = s->d_out;
    p.key = s->d_key;
    cudaError_t e;
    if ((e = cudaMemsetAsync(s->d_key, 0xff, sizeof *s->d_key, s->stream)) != cudaSuccess)
        return pn_cuda_fail(ctx, err, e, "cudaMemsetAsync (error key)");
    if ((e = cudaMemcpyAsync(s->d_in, s->h_in, in_bytes, cudaMemcpyHostToDevice, s->stream)) !=
        cudaSuccess)
        return pn_cuda_fail(ctx, err, e, "cudaMemcpyAsync (rows to the GPU)");
    const long long n_blocks = (n_groups + kGroupsPerBlock - 1) / kGroupsPerBlock;
    if (type == PN_TYPE_PN3T)
        pn_search_kernel<Pn3t><<<(unsigned int)n_blocks, kThreads, 0, s->stream>>>(p);
    else
        pn_search_kernel<Pn4t><<<(unsigned int)n_blocks, kThreads, 0, s->stream>>>(p);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return pn_cuda_fail(ctx, err, e, "launching the search kernel");
    if ((e = cudaMemcpyAsync(s->h_out, s->d_out, (size_t)n_groups * PN_BLOCK_BYTES,
                             cudaMemcpyDeviceToHost, s->stream)) != cudaSuccess)
        return pn_cuda_fail(ctx, err, e, "cudaMemcpyAsync (blocks from the GPU)");
    if ((e = cudaMemcpyAsync(s->h_key, s->d_key, sizeof *s->h_key, cudaMemcpyDeviceToHost,
                             s->stream)) != cudaSuccess)
        return pn_cuda_fail(ctx, err, e, "cudaMemcpyAsync (error key from the GPU)");
    s->busy = true;
    return PN_OK;
}

extern "C" pn_status pn_cuda_collect(pn_cuda_ctx *ctx, int slot, uint8_t *out, int64_t *bad_row,
                                     int64_t *bad_col, pn_error *err)
{
    pn_status st = pn_cuda_check_usable(ctx, err);
    if (st != PN_OK)
        return st;
    if (slot < 0 || slot >= PN_CUDA_SLOTS)
        return pn_error_set(err, PN_ERR_USAGE, "CUDA search: slot %d does not exist (0..%d)", slot,
                            PN_CUDA_SLOTS - 1);
    pn_cuda_slot *s = &ctx->slot[slot];
    if (!s->busy)
        return pn_error_set(err, PN_ERR_USAGE, "CUDA search: slot %d has nothing submitted", slot);
    s->busy = false;
    if (!ctx->emulator) {
        cudaError_t e = cudaStreamSynchronize(s->stream);
        if (e != cudaSuccess)
            return pn_cuda_fail(ctx, err, e, "running the search kernel");
    }
    const pn_params *pp = pn_params_get(s->type);
    const int64_t groups_per_row = s->K / pp->group;
    const unsigned long long key = *s->h_key;
    if (key != kNoKey) {
        const int64_t gi = (int64_t)(key >> 8);
        const int64_t row = s->row_base + gi / groups_per_row;
        const int64_t first_col = (gi % groups_per_row) * pp->group;
        if (key & kKeyOverflow) {
            if (bad_row)
                *bad_row = row;
            if (bad_col)
                *bad_col = first_col;
            return pn_error_set(err, PN_ERR_SCALE_OVERFLOW,
                                "row %lld, columns %lld..%lld: group too large for an fp16 scale "
                                "(%s: every candidate scale rounds to infinity)",
                                (long long)row, (long long)first_col,
                                (long long)(first_col + pp->group - 1), pn_cuda_type_name(s->type));
        }
        const int64_t col = first_col + (int64_t)(key & 0x7f);
        if (bad_row)
            *bad_row = row;
        if (bad_col)
            *bad_col = col;
        return pn_error_set(err, PN_ERR_NONFINITE,
                            "row %lld, column %lld: the weight is NaN or infinite", (long long)row,
                            (long long)col);
    }
    if (out)
        memcpy(out, s->h_out, (size_t)(s->n_rows * groups_per_row) * PN_BLOCK_BYTES);
    return PN_OK;
}

static pn_status pn_cuda_require_idle(pn_cuda_ctx *ctx, const char *what, pn_error *err)
{
    for (int i = 0; i < PN_CUDA_SLOTS; i++)
        if (ctx->slot[i].busy)
            return pn_error_set(err, PN_ERR_USAGE, "%s: slot %d is busy (collect it first)", what,
                                i);
    return PN_OK;
}

extern "C" pn_status pn_cuda_quantize_rows(pn_cuda_ctx *ctx, int type, const float *x,
                                           int64_t n_rows, int64_t K, uint8_t *out,
                                           int64_t *bad_row, int64_t *bad_col, pn_error *err)
{
    pn_status st = pn_cuda_check_usable(ctx, err);
    if (st != PN_OK)
        return st;
    if ((st = pn_cuda_require_idle(ctx, "pn_cuda_quantize_rows", err)) != PN_OK)
        return st;
    const pn_params *pp = pn_params_get(type);
    if (!pp)
        return pn_error_set(err, PN_ERR_USAGE, "CUDA search: type %d is not pn3t or pn4t", type);
    if (n_rows < 0 || K <= 0 || K % pp->group != 0)
        return pn_error_set(err, PN_ERR_USAGE,
                            "CUDA search: %lld rows of %lld weights: K must be a positive "
                            "multiple of the %s group (%d)",
                            (long long)n_rows, (long long)K, pn_cuda_type_name(type), pp->group);
    const int64_t per = pn_cuda_max_rows(ctx, K);
    if (per < 1)
        return pn_error_set(err, PN_ERR_USAGE,
                            "CUDA search: a row of %lld weights does not fit a %zu-byte slot",
                            (long long)K, (size_t)PN_CUDA_SLOT_INPUT_BYTES);
    const size_t row_out = (size_t)(K / pp->group) * PN_BLOCK_BYTES;
    const int64_t n_chunks = (n_rows + per - 1) / per;
    /* Chunk i goes to slot i % SLOTS; chunks are collected in order, so the
     * first error met is the one of the lowest row. */
    st = PN_OK;
    int64_t next_collect = 0;
    for (int64_t i = 0; i < n_chunks && st == PN_OK; i++) {
        const int slot = (int)(i % PN_CUDA_SLOTS);
        if (ctx->slot[slot].busy) {
            st = pn_cuda_collect(ctx, slot, out + (size_t)(next_collect * per) * row_out, bad_row,
                                 bad_col, err);
            next_collect++;
            if (st != PN_OK)
                break;
        }
        const int64_t r0 = i * per;
        const int64_t nr = (n_rows - r0 < per) ? n_rows - r0 : per;
        st = pn_cuda_submit(ctx, slot, type, x + (size_t)r0 * (size_t)K, nr, K, r0, err);
    }
    for (; next_collect < n_chunks; next_collect++) {
        const int slot = (int)(next_collect % PN_CUDA_SLOTS);
        if (!ctx->slot[slot].busy)
            continue;
        if (st == PN_OK) {
            st = pn_cuda_collect(ctx, slot, out + (size_t)(next_collect * per) * row_out, bad_row,
                                 bad_col, err);
        } else {
            pn_error scratch;
            pn_cuda_collect(ctx, slot, NULL, NULL, NULL,
                            &scratch); /* drain, keep the first error */
        }
    }
    return st;
}

extern "C" pn_status pn_cuda_fp16_from_double_batch(pn_cuda_ctx *ctx, const double *x, int64_t n,
                                                    uint16_t *out, pn_error *err)
{
    pn_status st = pn_cuda_check_usable(ctx, err);
    if (st != PN_OK)
        return st;
    if ((st = pn_cuda_require_idle(ctx, "pn_cuda_fp16_from_double_batch", err)) != PN_OK)
        return st;
    if (n < 0 || (n > 0 && (!x || !out)))
        return pn_error_set(err, PN_ERR_USAGE, "pn_cuda_fp16_from_double_batch: bad arguments");
    if (ctx->emulator) {
        for (int64_t i = 0; i < n; i++)
            out[i] = pn_hd_fp16_from_double(x[i]);
        return PN_OK;
    }
    pn_cuda_slot *s = &ctx->slot[0];
    int64_t chunk = (int64_t)(ctx->in_bytes / sizeof(double));
    if (chunk > (int64_t)(ctx->out_bytes / sizeof(uint16_t)))
        chunk = (int64_t)(ctx->out_bytes / sizeof(uint16_t));
    for (int64_t i0 = 0; i0 < n; i0 += chunk) {
        const int64_t m = (n - i0 < chunk) ? n - i0 : chunk;
        double *hx = (double *)(void *)s->h_in;
        memcpy(hx, x + i0, (size_t)m * sizeof(double));
        cudaError_t e;
        if ((e = cudaMemcpyAsync(s->d_in, hx, (size_t)m * sizeof(double), cudaMemcpyHostToDevice,
                                 s->stream)) != cudaSuccess)
            return pn_cuda_fail(ctx, err, e, "cudaMemcpyAsync (fp16 inputs)");
        const int tpb = 256;
        pn_fp16_kernel<<<(unsigned int)((m + tpb - 1) / tpb), tpb, 0, s->stream>>>(
            (const double *)(const void *)s->d_in, (unsigned short *)(void *)s->d_out,
            (long long)m);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return pn_cuda_fail(ctx, err, e, "launching the fp16 kernel");
        if ((e = cudaMemcpyAsync(s->h_out, s->d_out, (size_t)m * sizeof(uint16_t),
                                 cudaMemcpyDeviceToHost, s->stream)) != cudaSuccess)
            return pn_cuda_fail(ctx, err, e, "cudaMemcpyAsync (fp16 results)");
        if ((e = cudaStreamSynchronize(s->stream)) != cudaSuccess)
            return pn_cuda_fail(ctx, err, e, "running the fp16 kernel");
        memcpy(out + i0, s->h_out, (size_t)m * sizeof(uint16_t));
    }
    return PN_OK;
}
