/* CRC-32 by folding with carry-less multiplication (see crc32.h).
 *
 * The algebra. Read a 16-byte lane little-endian into a 128-bit integer:
 * bit p (bit p % 8 of byte p / 8) is the p-th bit of the stream zlib's
 * reflected CRC reads, so as a polynomial it holds the coefficient of
 * x^(127 - p) (the first bit is the highest). The CRC register of a message
 * M of L bits, started from r, is (r x^L + M x^32) mod P; zlib's value is its
 * complement, started from the complement of the crc given. XORing that
 * start r into the first four bytes gives r x^(L-32) + M: the message is
 * then all there is, and what is wanted is M x^32 mod P.
 *
 * Folding. A lane R = H x^64 + L (H: the low quadword, whose bits are the
 * high degrees; L: the high quadword) that is T bits ahead of the data still
 * to come stands for R x^T, and R x^T = H x^(T+64) + L x^T is congruent to
 * H k_(T+64) + L k_T with k_e = x^e mod P: two products of 64 x 32 bits, at
 * most 95 bits, one new 128-bit lane to which the data T bits on is added.
 * Four lanes 64 bytes apart fold by T = 512 (k_576, k_512); at the end they
 * fold into one by T = 128 (k_192, k_128), and the remaining whole lanes too.
 *
 * The products. PCLMULQDQ multiplies integers: bit s of a (x) b collects
 * a_i b_j with i + j = s. With a a reflected 64-bit H (bit i: x^(63-i)) and
 * b holding c in its low 32 bits reflected (bit j: x^(31-j), i.e. the
 * polynomial c x^32 as a reflected 64-bit value), bit s is the coefficient
 * of x^(126 - s) of H c x^32, and read as a 128-bit lane (bit s: x^(127-s))
 * the product is x * H * c * x^32. So the constant stored for k_e is
 * c = x^(e - 33) mod P, reflected: pn_crc32_xpow_mod(e - 33), which the test
 * suite recomputes for each constant below by polynomial division.
 *
 * The end. One lane R and fewer than 16 bytes t remain, and M x^32 is
 * congruent to R x^(32 + 8|t|) + t x^32: the CRC register of the bytes of R
 * followed by t, started from 0. zlib computes that register (at most 31
 * bytes) when started from 0xFFFFFFFF (its complement is 0) and returns its
 * complement, which is zlib's CRC of the whole. */
#include "common/crc32.h"
#include "common/crc32_testing.h"

#include <string.h>
#include <zlib.h>

/* pn_crc32_xpow_mod(576 - 33), (512 - 33), (192 - 33), (128 - 33) */
#define K_576 0x8f352d95u
#define K_512 0x1d9513d7u
#define K_192 0xae689191u
#define K_128 0xccaa009eu

void pn_crc32_fold_constants(uint32_t out[4])
{
    out[0] = K_576;
    out[1] = K_512;
    out[2] = K_192;
    out[3] = K_128;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* x = H (low quadword) and L (high): H * k.low + L * k.high */
static inline __m128i fold(__m128i x, __m128i k)
{
    return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

static inline __m128i load(const uint8_t *p)
{
    return _mm_loadu_si128((const __m128i *)(const void *)p);
}

uint32_t pn_crc32_pclmul(uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    if (len < 64)
        return (uint32_t)crc32_z(crc, p, len);
    __m128i x0 = _mm_xor_si128(load(p), _mm_cvtsi32_si128((int)~crc));
    __m128i x1 = load(p + 16), x2 = load(p + 32), x3 = load(p + 48);
    p += 64;
    len -= 64;
    const __m128i k4 = _mm_set_epi64x(K_512, K_576);
    while (len >= 64) {
        x0 = _mm_xor_si128(fold(x0, k4), load(p));
        x1 = _mm_xor_si128(fold(x1, k4), load(p + 16));
        x2 = _mm_xor_si128(fold(x2, k4), load(p + 32));
        x3 = _mm_xor_si128(fold(x3, k4), load(p + 48));
        p += 64;
        len -= 64;
    }
    const __m128i k1 = _mm_set_epi64x(K_128, K_192);
    x1 = _mm_xor_si128(fold(x0, k1), x1);
    x2 = _mm_xor_si128(fold(x1, k1), x2);
    x3 = _mm_xor_si128(fold(x2, k1), x3);
    while (len >= 16) {
        x3 = _mm_xor_si128(fold(x3, k1), load(p));
        p += 16;
        len -= 16;
    }
    uint8_t last[32];
    _mm_storeu_si128((__m128i *)(void *)last, x3);
    memcpy(last + 16, p, len);
    return (uint32_t)crc32_z(0xffffffffUL, last, 16 + len);
}
#else
uint32_t pn_crc32_pclmul(uint32_t crc, const void *buf, size_t len)
{
    return (uint32_t)crc32_z(crc, buf, len);
}
#endif
