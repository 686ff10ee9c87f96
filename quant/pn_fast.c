/* The portable fast PN quantizer, the pieces every fast path shares, and the
 * run-time choice among the paths. Exactness argument: pn_fast_internal.h. */
#include <math.h>
#include <string.h>

#include "common/cpu.h"
#include "quant/pn.h"
#include "quant/pn_fast.h"
#include "quant/pn_fast_testing.h"
#include "quant/pn_fast_internal.h"
#include "quant/types.h"

/* ---- shared pieces ---------------------------------------------------- */

void pn_fast_pack_block(const pn_params *p, uint16_t d_bits, const uint8_t *codes, uint8_t *block)
{
    block[offsetof(block_pnt, d)] = (uint8_t)d_bits;
    block[offsetof(block_pnt, d) + 1] = (uint8_t)(d_bits >> 8);
    const int per_word = p->per_word, bits = p->bits;
    for (int wi = 0; wi < 8; wi++) {
        const uint8_t *c = codes + wi * per_word;
        uint32_t lo = 0, hi = 0;
        for (int j = 0; j < per_word / 2; j++) {
            lo |= (uint32_t)c[2 * j] << (bits * j);
            hi |= (uint32_t)c[2 * j + 1] << (bits * j);
        }
        uint32_t word = lo | (hi << 16);
        uint8_t *wp = block + PN_BLOCK_WORDS_AT + 4 * wi;
        wp[0] = (uint8_t)word;
        wp[1] = (uint8_t)(word >> 8);
        wp[2] = (uint8_t)(word >> 16);
        wp[3] = (uint8_t)(word >> 24);
    }
}

/* Each word holds codes c0..c(n-1), n = per_word: even ones from bit 0,
 * odd ones from bit 16, `bits` apart. Eight code bytes read as one
 * little-endian u64 x: (x & F) keeps c0, c2, c4, c6 at bits 0, 16, 32, 48
 * (F: the low `bits` of every other byte) and one multiplication by
 * 2^48 + 2^(48+b-16) + 2^(48+2b-32) + 2^(48+3b-48) moves them to bits 48,
 * 48+b, 48+2b, 48+3b; the other products land on distinct fields of `bits`
 * bits (b = 3: at 9, 22, 25, 35, 38, 41; b = 4: at 12, 24, 28, 36, 40, 44)
 * or past bit 63, so nothing carries into the top 16 bits. The same for the
 * odd codes (x >> 8); pn3t's ninth and tenth codes are added by hand. */
void pn_fast_pack_block_mul(const pn_params *p, uint16_t d_bits, const uint8_t *codes,
                            uint8_t *block)
{
    block[offsetof(block_pnt, d)] = (uint8_t)d_bits;
    block[offsetof(block_pnt, d) + 1] = (uint8_t)(d_bits >> 8);
    const int per_word = p->per_word, b = p->bits;
    const uint64_t F = b == 3 ? 0x0007000700070007ull : 0x000f000f000f000full;
    const uint64_t M =
        (1ull << 48) | (1ull << (32 + b)) | (1ull << (16 + 2 * b)) | (1ull << (3 * b));
    for (int wi = 0; wi < 8; wi++) {
        const uint8_t *c = codes + wi * per_word;
        uint64_t x;
        memcpy(&x, c, sizeof x);
        x = pn_fast_le64(x);
        uint32_t lo = (uint32_t)(((x & F) * M) >> 48);
        uint32_t hi = (uint32_t)((((x >> 8) & F) * M) >> 48);
        if (per_word == 10) {
            lo |= (uint32_t)c[8] << 12;
            hi |= (uint32_t)c[9] << 12;
        }
        uint32_t word = lo | (hi << 16);
        uint8_t *wp = block + PN_BLOCK_WORDS_AT + 4 * wi;
        wp[0] = (uint8_t)word;
        wp[1] = (uint8_t)(word >> 8);
        wp[2] = (uint8_t)(word >> 16);
        wp[3] = (uint8_t)(word >> 24);
    }
}

void pn_fast_zero_block(const pn_params *p, uint8_t *block)
{
    uint8_t codes[80];
    memset(codes, p->z, sizeof codes);
    pn_fast_pack_block(p, 0x0000, codes, block);
}

pn_status pn_fast_group_refused(const pn_params *p, const float *w, int *bad_index)
{
    uint8_t scratch[PN_BLOCK_BYTES];
    return pn_quantize_group_ref(p, w, scratch, NULL, bad_index);
}

double pn_fp16_value_fast(double x)
{
    return pn_fast_fp16_value(x);
}

uint16_t pn_fp16_bits_of_half_value(double h)
{
    return pn_fast_half_bits(h);
}

/* ---- the portable path ------------------------------------------------ */

/* Where the portable path starts its search: m = 0.92, about where Gaussian
 * groups of both types pick their scale. Any start gives the same result. */
#define PN_FAST_FIRST_GUESS 21

/* One group; the candidates that survive fp16 rounding are compacted into
 * s[]/r[]/idx[] in ascending order, and each candidate's error is summed in
 * element order. With sums (err, norm not NULL): the winner's error, which is
 * scored to the end (see below), and the norm in element order. */
static pn_status quantize_group_scalar_fast(const pn_params *p, const float *w, uint8_t *block,
                                            int *bad_index, double *err_out, double *norm_out)
{
    const int G = p->group, z = p->z;
    double wd[80];
    float fmax = -INFINITY, fmin = INFINITY, famax = 0.0f;
    for (int e = 0; e < G; e++) {
        uint32_t b;
        memcpy(&b, &w[e], sizeof b);
        if ((b & 0x7f800000u) == 0x7f800000u)
            return pn_fast_group_refused(p, w, bad_index);
        float v = w[e], a = fabsf(v);
        famax = a > famax ? a : famax;
        fmax = v > fmax ? v : fmax;
        fmin = v < fmin ? v : fmin;
        wd[e] = (double)v;
    }
    if (norm_out) {
        double norm = 0.0;
        for (int e = 0; e < G; e++)
            norm = norm + wd[e] * wd[e];
        *norm_out = norm;
        *err_out = norm; /* a zero group's; a search below replaces it */
    }
    const double amax = famax, max = fmax, min = fmin;
    if (amax == 0.0) {
        pn_fast_zero_block(p, block);
        return PN_OK;
    }
    const double sigma = (fabs(min) > max) ? 1.0 : -1.0;

    double s[PN_N_CANDIDATES], r[PN_N_CANDIDATES];
    int idx[PN_N_CANDIDATES];
    int nc = 0;
    bool any_overflow = false;
    for (int i = 0; i < PN_N_CANDIDATES; i++) {
        double t = sigma * pn_fast_m[i] * amax / (double)z;
        double si = pn_fast_fp16_value(t);
        if (!isfinite(si)) {
            any_overflow = true;
            continue;
        }
        if (si == 0.0)
            continue;
        s[nc] = si;
        r[nc] = 1.0 / si;
        idx[nc] = i;
        nc++;
    }
    if (nc == 0) {
        if (any_overflow) {
            *bad_index = 0;
            return PN_ERR_SCALE_OVERFLOW;
        }
        pn_fast_zero_block(p, block);
        return PN_OK;
    }

    /* Candidates are scored one at a time, a likely winner first. A running
     * error only grows (every term is >= 0 and rounding is monotone), so a
     * candidate is abandoned as soon as it cannot beat the best fully scored
     * one in the reference's order: err > best, or err == best for an earlier
     * candidate (a tie goes to the later one). The reference's winner is never
     * abandoned, and a candidate scored to the end beats the previous best. */
    const double lo = (double)-z, hi = (double)(z - 1);
    int first = 0;
    for (int c = 0; c < nc; c++)
        if (idx[c] <= PN_FAST_FIRST_GUESS)
            first = c;
    double best = INFINITY;
    int best_c = -1;
    for (int step = 0; step < nc; step++) {
        const int c = step == 0 ? first : (step <= first ? step - 1 : step);
        const bool later = c > best_c;
        const double sc = s[c], rc = r[c];
        double err = 0.0;
        int e = 0;
        for (; e < G; e++) {
            const double we = wd[e];
            double q = we * rc;
            q = q < lo ? lo : q;
            q = q > hi ? hi : q;
            double k = (q + PN_FAST_RINT_MAGIC) - PN_FAST_RINT_MAGIC;
            double diff = we - sc * k;
            err = err + diff * diff;
            if (err > best || (!later && err == best))
                break;
        }
        if (e == G) {
            best = err;
            best_c = c;
        }
    }
    const double sb = s[best_c];
    if (err_out)
        *err_out = best;
    uint8_t codes[80];
    for (int e = 0; e < G; e++) {
        double q = wd[e] / sb;
        q = q < lo ? lo : q;
        q = q > hi ? hi : q;
        double k = (q + PN_FAST_RINT_MAGIC) - PN_FAST_RINT_MAGIC;
        codes[e] = (uint8_t)(int)(k + (double)z);
    }
    pn_fast_pack_block(p, pn_fast_half_bits(sb), codes, block);
    return PN_OK;
}

pn_status pn_quantize_row_scalar_fast(const pn_params *p, const float *x, int64_t n, uint8_t *out,
                                      int64_t *bad_col, double *blk_err, double *blk_norm)
{
    const bool sums = blk_err && blk_norm;
    for (int64_t g = 0; g < n / p->group; g++) {
        int bad = 0;
        pn_status st =
            quantize_group_scalar_fast(p, x + g * p->group, out + g * PN_BLOCK_BYTES, &bad,
                                       sums ? blk_err + g : NULL, sums ? blk_norm + g : NULL);
        if (st != PN_OK) {
            if (bad_col)
                *bad_col = g * p->group + bad;
            return st;
        }
    }
    return PN_OK;
}

/* ---- choosing a path -------------------------------------------------- */

static const char *const path_names[PN_PATH_COUNT] = { "ref", "scalar", "avx2", "avx512" };

bool pn_path_available(int path)
{
    switch (path) {
    case PN_PATH_REF:
    case PN_PATH_SCALAR_FAST: return true;
    case PN_PATH_AVX2: /* the files are built with -mavx2 -mf16c -mfma */
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && pn_cpu_has_f16c() && __builtin_cpu_supports("fma");
    case PN_PATH_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    default: return false;
    }
}

const char *pn_path_name(int path)
{
    return (path >= 0 && path < PN_PATH_COUNT) ? path_names[path] : "unknown";
}

int pn_path_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < PN_PATH_COUNT; i++)
        if (strcmp(name, path_names[i]) == 0)
            return i;
    return -1;
}

int pn_cpu_path_best(void)
{
    if (pn_path_available(PN_PATH_AVX512))
        return PN_PATH_AVX512;
    if (pn_path_available(PN_PATH_AVX2))
        return PN_PATH_AVX2;
    return PN_PATH_SCALAR_FAST;
}

pn_status pn_quantize_row_path(int type, int path, const float *x, int64_t n, uint8_t *out,
                               int64_t *bad_col)
{
    return pn_quantize_row_path_sums(type, path, x, n, out, bad_col, NULL, NULL);
}

pn_status pn_quantize_row_path_sums(int type, int path, const float *x, int64_t n, uint8_t *out,
                                    int64_t *bad_col, double *blk_err, double *blk_norm)
{
    const pn_params *p = pn_params_get(type);
    if (!p || n < 0 || n % p->group != 0 || !pn_path_available(path))
        return PN_ERR_USAGE;
    if (!blk_err || !blk_norm)
        blk_err = blk_norm = NULL;
    return pn_type_traits_get(type)->encode[path](x, n, out, bad_col, blk_err, blk_norm);
}

pn_status pn_quantize_row(int type, const float *x, int64_t n, uint8_t *out, int64_t *bad_col)
{
    return pn_quantize_row_path(type, pn_cpu_path_best(), x, n, out, bad_col);
}
