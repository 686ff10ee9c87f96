/* cpu.h - what the CPU can run, asked of CPUID once per process.
 *
 * In a virtual machine CPUID traps to the hypervisor (about 10 us a call):
 * asked on every row or every CRC piece it cost as much as the work (a CRC
 * of 128 KiB twice as slow; the AVX2 row path asked three times a row). So
 * the answer is kept after the first call. Every thread computes the same
 * value, so the race of two first callers is harmless. By CPUID rather than
 * __builtin_cpu_supports, whose feature names differ by compiler (clang
 * knows no "f16c"). False on a CPU that is not x86.
 */
#ifndef PN_COMMON_CPU_H
#define PN_COMMON_CPU_H

#include <stdbool.h>

/* SSE2 and PCLMULQDQ (CPUID leaf 1: EDX bit 26, ECX bit 1). */
bool pn_cpu_has_pclmul(void);
/* F16C (CPUID leaf 1, ECX bit 29); the OS's saving of the AVX state is the
 * caller's "avx2" check. */
bool pn_cpu_has_f16c(void);

#endif
