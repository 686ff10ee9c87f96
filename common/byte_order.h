/* byte_order.h - little-endian loads and stores at any alignment, whatever
 * the host's byte order: GGUF files, PN blocks, safetensors headers and the
 * llama.cpp harness's stream are little-endian, and every room reads and
 * writes them through these, written once. */
#ifndef PN_COMMON_BYTE_ORDER_H
#define PN_COMMON_BYTE_ORDER_H

#include <stddef.h>
#include <stdint.h>

/* The n <= 8 bytes at p as a little-endian unsigned number. */
static inline uint64_t pn_load_le(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}
/* The low n <= 8 bytes of v at p, little-endian. */
static inline void pn_store_le(uint8_t *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t pn_load_u16le(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline void pn_store_u16le(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline uint32_t pn_load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline void pn_store_u32le(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}
static inline uint64_t pn_load_u64le(const uint8_t *p)
{
    return pn_load_le(p, 8);
}

#endif
