/* cpu.c - CPUID leaf 1, asked once (see cpu.h). */
#include "common/cpu.h"

#include <stdatomic.h>
#include <stdint.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* Leaf 1's ECX (low 32 bits) and EDX (high 32 bits); leaf1_known says
 * whether they were asked yet. */
static _Atomic uint64_t leaf1;
static _Atomic int leaf1_known;

static uint64_t cpuid_leaf1(void)
{
    if (atomic_load_explicit(&leaf1_known, memory_order_acquire))
        return atomic_load_explicit(&leaf1, memory_order_relaxed);
    uint64_t v = 0;
#if defined(__x86_64__) || defined(__i386__)
    unsigned int eax, ebx, ecx, edx;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx))
        v = (uint64_t)ecx | (uint64_t)edx << 32;
#endif
    atomic_store_explicit(&leaf1, v, memory_order_relaxed);
    atomic_store_explicit(&leaf1_known, 1, memory_order_release);
    return v;
}

bool pn_cpu_has_pclmul(void)
{
    const uint64_t v = cpuid_leaf1();
    return (v & (1ull << (32 + 26))) && (v & (1ull << 1));
}

bool pn_cpu_has_f16c(void)
{
    return (cpuid_leaf1() & (1ull << 29)) != 0;
}
