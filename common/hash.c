/* hash.c - FNV-1a 64 and the seeded table hash (see hash.h). */
#include "common/hash.h"

#include <string.h>
#include <time.h>

uint64_t pn_fnv1a64(uint64_t h, const void *data, size_t n)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t pn_fnv1a64_le(uint64_t h, uint64_t v, unsigned n_bytes)
{
    uint8_t b[8];
    for (unsigned i = 0; i < n_bytes && i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    return pn_fnv1a64(h, b, n_bytes < 8 ? n_bytes : 8);
}

/* A 64-bit finalizer: every bit of x moves every bit of the result. */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    return x ^ (x >> 32);
}

uint64_t pn_hash_seed(const void *p)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)p);
}

uint64_t pn_hash_seeded(const void *data, size_t n, uint64_t seed)
{
    const unsigned char *s = data;
    uint64_t h = mix64(seed ^ (uint64_t)n);
    for (; n >= 8; s += 8, n -= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = mix64(h ^ v);
    }
    uint64_t v = 0;
    memcpy(&v, s, n);
    return mix64(h ^ v ^ 0x9e3779b97f4a7c15ull);
}
