/* crc32.c - pn_crc32: the folding path where the CPU has it, zlib's crc32_z
 * otherwise (see crc32.h). */
#include "common/crc32.h"

#include <stdatomic.h>
#include <zlib.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

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

static bool pclmul_by_cpuid(void)
{
#if defined(__x86_64__) || defined(__i386__)
    /* CPUID leaf 1: EDX bit 26 SSE2, ECX bit 1 PCLMULQDQ (by CPUID rather
     * than __builtin_cpu_supports, whose feature names differ by compiler) */
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx))
        return false;
    return (edx & (1u << 26)) && (ecx & (1u << 1));
#else
    return false;
#endif
}

bool pn_crc32_pclmul_available(void)
{
    /* A fact about the CPU, asked once: in a virtual machine CPUID traps to
     * the hypervisor (about 10 us), which made a CRC of a 128 KiB piece
     * twice as slow. Every thread computes the same value, so the race of
     * two first callers is harmless. 0 unknown, 1 no, 2 yes. */
    static _Atomic int known;
    int k = atomic_load_explicit(&known, memory_order_relaxed);
    if (k == 0) {
        k = pclmul_by_cpuid() ? 2 : 1;
        atomic_store_explicit(&known, k, memory_order_relaxed);
    }
    return k == 2;
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
