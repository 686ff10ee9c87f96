#include "common/crc32.h"

#include <zlib.h>

uint32_t pn_crc32(uint32_t crc, const void *buf, size_t len)
{
    if (len >= 64 && pn_crc32_pclmul_available())
        return pn_crc32_pclmul(crc, buf, len);
    return (uint32_t)crc32_z(crc, buf, len);
}

bool pn_crc32_pclmul_available(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2");
#else
    return false;
#endif
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
