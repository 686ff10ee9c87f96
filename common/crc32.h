/* crc32.h - CRC-32 of the zlib/gzip polynomial, faster than zlib's where the
 * CPU multiplies without carries.
 *
 * Contract: pn_crc32(crc, buf, len) == zlib's crc32_z(crc, buf, len) for
 * every crc, buffer, length and alignment (the reflected polynomial
 * 0xEDB88320, complemented before and after; crc is the CRC of what came
 * before, 0 to start). Pieces computed apart are joined with
 * pn_crc32_combine (zlib's crc32_combine64), so that no caller needs zlib.
 *
 * The fast path (crc32_pclmul.c) folds the data 64 bytes at a time with
 * PCLMULQDQ, the method of Gopal et al., "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ Instruction" (Intel, 2009), derived for this
 * polynomial there; lengths under 64 and machines without the instruction
 * use zlib. Which one runs never changes a result.
 */
#ifndef PN_COMMON_CRC32_H
#define PN_COMMON_CRC32_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

uint32_t pn_crc32(uint32_t crc, const void *buf, size_t len);

/* The CRC of A followed by B, from crc_a, crc_b and B's length in bytes. */
uint32_t pn_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

/* True when this build and CPU run pn_crc32_pclmul. */
bool pn_crc32_pclmul_available(void);
/* The folding path itself (for tests and benchmarks); call it only where
 * pn_crc32_pclmul_available(). */
uint32_t pn_crc32_pclmul(uint32_t crc, const void *buf, size_t len);

#endif
