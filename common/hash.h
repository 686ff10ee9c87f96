/* hash.h - the project's two hashes: FNV-1a 64 for identities, a seeded hash
 * for hash tables.
 *
 * FNV-1a 64 (Fowler, Noll, Vo; offset basis 0xcbf29ce484222325, prime
 * 0x100000001b3) is fixed and written into files (a split set's identity,
 * a source's header hash), so it never changes; it is not for tables, whose
 * keys an input may craft to collide. Tables hash with pn_hash_seeded and a
 * seed from pn_hash_seed, unknown to whoever made the input, so that no set
 * of names makes a table quadratic; a table's answers never depend on the
 * seed, only its slot order does, which nothing may print or write.
 */
#ifndef PN_COMMON_HASH_H
#define PN_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

#define PN_FNV1A64_BASIS 0xcbf29ce484222325ull

/* FNV-1a 64 of n bytes, continued from h (PN_FNV1A64_BASIS to start). */
uint64_t pn_fnv1a64(uint64_t h, const void *data, size_t n);
/* The same of the low n_bytes (at most 8) of v, least significant first. */
uint64_t pn_fnv1a64_le(uint64_t h, uint64_t v, unsigned n_bytes);

/* A seed for one table: from the address p of its owner (random under
 * ASLR) and the clock. */
uint64_t pn_hash_seed(const void *p);
/* The hash of n bytes under seed: each 8 bytes mixed in through a 64-bit
 * finalizer (a bijection), the length first. */
uint64_t pn_hash_seeded(const void *data, size_t n, uint64_t seed);

#endif
