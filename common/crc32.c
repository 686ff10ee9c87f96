/* crc32.c - pn_crc32: the folding path where the CPU has it, zlib's crc32_z
 * otherwise (see crc32.h). */
#include "common/crc32.h"
#include "common/crc32_testing.h"

#include "common/cpu.h"

#include <zlib.h>

uint32_t pn_crc32(uint32_t crc, const void *buf, size_t len)
{
    if (len >= 64 && pn_crc32_pclmul_available())
        return pn_crc32_pclmul(crc, buf, len);
    return (uint32_t)crc32_z(crc, buf, len);
}

uint32_t pn_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
    return (uint32_t)crc32_combine64(crc_a, crc_b, (z_off64_t)len_b);
}

bool pn_crc32_pclmul_available(void)
{
    return pn_cpu_has_pclmul(); /* asked once (common/cpu.h) */
}

uint32_t pn_crc32_xpow_mod(unsigned n)
{
    /* x^0 is bit 31; multiplying by x moves x^j to x^(j+1) (one bit right)
     * and replaces the x^32 that falls out of bit 0 by x^32 mod P, which is
     * P without its x^32 term: 0x04C11DB7, reflected 0xEDB88320 */
    uint32_t v = 0x80000000u;
    for (unsigned i = 0; i < n; i++)
        v = (v >> 1) ^ ((v & 1u) ? 0xEDB88320u : 0u);
    return v;
}
