/* Pins common/crc32: pn_crc32 and its folding path give zlib's crc32_z for
 * every length from 0 to 4096 and large ones, at every alignment, chained
 * from any crc and joined with crc32_combine; the folding constants are
 * x^(e-33) mod P, recomputed here by polynomial long division. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/crc32.h"
#include "common/crc32_testing.h"
#include "test_util.h"

static uint8_t *random_bytes(size_t n, uint64_t seed)
{
    uint8_t *b = malloc(n + 64);
    cr_assert_not_null(b);
    tu_rng rng = { seed };
    for (size_t i = 0; i < n + 64; i++)
        b[i] = (uint8_t)tu_rng_u64(&rng);
    return b;
}

/* The paths to check: the dispatcher always, the folding one where it runs. */
typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

static int crc_paths(crc_fn fns[2], const char *names[2])
{
    int n = 0;
    fns[n] = pn_crc32;
    names[n++] = "pn_crc32";
    if (pn_crc32_pclmul_available()) {
        fns[n] = pn_crc32_pclmul;
        names[n++] = "pn_crc32_pclmul";
    } else {
        cr_log_info("this CPU has no PCLMULQDQ: pn_crc32 is zlib's here; the folding path is "
                    "not run");
    }
    return n;
}

Test(crc32, every_length_to_4096_at_every_alignment_is_zlibs)
{
    enum { MAXN = 4096 };
    uint8_t *b = random_bytes(MAXN, 1);
    crc_fn fns[2];
    const char *names[2];
    const int np = crc_paths(fns, names);
    for (size_t n = 0; n <= MAXN; n++)
        for (size_t off = 0; off < 16; off++) {
            const uint32_t want = (uint32_t)crc32_z(0, b + off, n);
            for (int p = 0; p < np; p++)
                cr_assert_eq(fns[p](0, b + off, n), want,
                             "%s: length %zu at offset %zu: %08x, "
                             "zlib %08x",
                             names[p], n, off, fns[p](0, b + off, n), want);
        }
    free(b);
}

Test(crc32, a_chained_crc_from_any_start_is_zlibs)
{
    uint8_t *b = random_bytes(5000, 2);
    crc_fn fns[2];
    const char *names[2];
    const int np = crc_paths(fns, names);
    tu_rng rng = { 3 };
    static const uint32_t starts[] = { 0u, 0xffffffffu, 1u, 0x80000000u, 0xdeadbeefu };
    for (int k = 0; k < 4000; k++) {
        size_t n = (size_t)(tu_rng_u64(&rng) % 5000), off = (size_t)(tu_rng_u64(&rng) % 64);
        uint32_t start = k < 5 * 64 ? starts[k % 5] : (uint32_t)tu_rng_u64(&rng);
        if (off + n > 5000 + 64)
            n = 5000 + 64 - off;
        const uint32_t want = (uint32_t)crc32_z(start, b + off, n);
        for (int p = 0; p < np; p++)
            cr_assert_eq(fns[p](start, b + off, n), want, "%s: start %08x, length %zu", names[p],
                         start, n);
    }
    free(b);
}

Test(crc32, large_buffers_and_pieces_joined_with_crc32_combine_are_zlibs)
{
    const size_t big = ((size_t)8 << 20) + 77;
    uint8_t *b = random_bytes(big, 4);
    crc_fn fns[2];
    const char *names[2];
    const int np = crc_paths(fns, names);
    const uint32_t want = (uint32_t)crc32_z(0, b, big);
    const size_t cuts[] = { 0, 1, 63, 64, 65, 4096, 65536 + 3, (size_t)1 << 20, big };
    for (int p = 0; p < np; p++) {
        cr_assert_eq(fns[p](0, b, big), want, "%s: %zu bytes", names[p], big);
        cr_assert_eq(fns[p](0, b + 1, big - 1), (uint32_t)crc32_z(0, b + 1, big - 1), "%s",
                     names[p]);
        /* in two pieces, chained and combined */
        for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
            const size_t a = cuts[c];
            uint32_t ca = fns[p](0, b, a), cb = fns[p](0, b + a, big - a);
            cr_assert_eq(fns[p](ca, b + a, big - a), want, "%s: chained at %zu", names[p], a);
            cr_assert_eq((uint32_t)crc32_combine(ca, cb, (z_off_t)(big - a)), want,
                         "%s: combined at %zu", names[p], a);
            cr_assert_eq(pn_crc32_combine(ca, cb, big - a), want,
                         "%s: combined by pn_crc32_combine at %zu", names[p], a);
        }
        /* in many pieces of odd sizes, combined in order */
        uLong v = 0;
        size_t at = 0, step = 1;
        while (at < big) {
            size_t n = big - at < step ? big - at : step;
            v = crc32_combine(v, fns[p](0, b + at, n), (z_off_t)n);
            at += n;
            step = step * 3 + 1;
        }
        cr_assert_eq((uint32_t)v, want, "%s: pieces combined", names[p]);
    }
    free(b);
}

Test(crc32, buffers_of_one_repeated_byte_and_a_single_set_bit_are_zlibs)
{
    /* zeros, all ones, and every single-bit message of 256 bytes: each bit
     * position of each lane reaches the folding once */
    uint8_t b[1024];
    crc_fn fns[2];
    const char *names[2];
    const int np = crc_paths(fns, names);
    for (int v = 0; v < 256; v += 255) {
        memset(b, v, sizeof b);
        for (size_t n = 0; n <= sizeof b; n += 7)
            for (int p = 0; p < np; p++)
                cr_assert_eq(fns[p](0, b, n), (uint32_t)crc32_z(0, b, n), "%s: %zu bytes of %d",
                             names[p], n, v);
    }
    for (int bit = 0; bit < 256 * 8; bit++) {
        memset(b, 0, 256);
        b[bit / 8] = (uint8_t)(1u << (bit % 8));
        for (int p = 0; p < np; p++)
            cr_assert_eq(fns[p](0, b, 256), (uint32_t)crc32_z(0, b, 256), "%s: bit %d", names[p],
                         bit);
    }
}

/* x^n mod P by long division of polynomials in the usual order (bit j holds
 * x^j), P = x^32 + 0x04C11DB7, then bit-reflected: independent of
 * pn_crc32_xpow_mod's reflected shifts. */
static uint32_t xpow_mod_by_division(unsigned n)
{
    uint64_t r = 1;
    for (unsigned i = 0; i < n; i++) {
        r <<= 1;
        if (r & ((uint64_t)1 << 32))
            r ^= 0x104C11DB7ull;
    }
    uint32_t out = 0;
    for (int j = 0; j < 32; j++)
        if (r & ((uint64_t)1 << j))
            out |= 1u << (31 - j);
    return out;
}

Test(crc32, the_folding_constants_are_x_to_the_distance_minus_33_mod_p)
{
    uint32_t k[4];
    pn_crc32_fold_constants(k);
    const unsigned e[4] = { 576, 512, 192, 128 };
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(k[i], xpow_mod_by_division(e[i] - 33),
                     "constant for x^%u: %08x, x^%u mod P "
                     "is %08x",
                     e[i], k[i], e[i] - 33, xpow_mod_by_division(e[i] - 33));
        cr_assert_eq(pn_crc32_xpow_mod(e[i] - 33), k[i]);
    }
    for (unsigned n = 0; n < 700; n++)
        cr_assert_eq(pn_crc32_xpow_mod(n), xpow_mod_by_division(n), "x^%u", n);
}

Test(crc32, a_null_buffer_of_length_zero_is_zlibs)
{
    cr_assert_eq(pn_crc32(0, NULL, 0), (uint32_t)crc32_z(0, NULL, 0));
    cr_assert_eq(pn_crc32(0x1234u, "", 0), (uint32_t)crc32_z(0x1234u, (const Bytef *)"", 0));
}
