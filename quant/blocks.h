/* blocks.h - the on-disk block layouts this project reads and writes.
 *
 * The single source of truth for every layout, as ggml-common.h is for
 * ggml's: code finds a field with offsetof(struct, field) and a block's size
 * with sizeof(struct), never with a number of its own; the static checks
 * below pin each offset and size to the published layout, so a change to a
 * layout cannot go unnoticed. The header is plain C11 and C++ (nvcc includes
 * it for the CUDA kernel, which checks its own constants against it). Multi-byte fields are little-endian on disk.
 * Blocks are packed back to back in a row with no padding, so a block may sit
 * at any byte offset: code must read and write fields byte-wise (or memcpy),
 * never through a pointer cast that assumes alignment.
 *
 * pn3t (ggml type 124): 80 weights in 34 bytes.  pn4t (125): 64 weights in 34.
 *   bytes 0..1   d: fp16 signed scale
 *   bytes 2..33  eight u32 words; element e is in word e/10 (pn3t) or e/8
 *                (pn4t), local index t = e mod 10 (or 8), at bit
 *                shift = BITS*(t>>1) + 16*(t&1): even t in the low half-word,
 *                odd t in the high half-word. pn3t bits 15 and 31 are reserved
 *                and must be 0.
 *   value = d * (n - z), z = 4 (pn3t) or 8 (pn4t).
 *
 * The stock ggml types (layouts as ggml defines them; QK_K = 256):
 *   q8_0: 32 weights, 34 bytes: fp16 d, int8 qs[32]; value = d*q.
 *   q4_K: 256 weights, 144 bytes: fp16 d, fp16 dmin, scales[12] (eight 6-bit
 *         scales and eight 6-bit mins, packed), qs[128] (4-bit codes).
 *   q3_K: 256 weights, 110 bytes: hmask[32] (high bits), qs[64] (low 2 bits),
 *         scales[12] (sixteen 6-bit scales, packed), fp16 d.
 */
#ifndef PN_QUANT_BLOCKS_H
#define PN_QUANT_BLOCKS_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#define PN_QK_K 256

typedef struct block_pnt {
    uint8_t d[2];
    uint8_t qs[32];
} block_pnt; /* pn3t and pn4t share the 34-byte frame */
static_assert(sizeof(block_pnt) == 34, "pn3t/pn4t block must be 34 bytes");
static_assert(offsetof(block_pnt, qs) == 2, "pn3t/pn4t words follow the 2-byte scale");

typedef struct block_q8_0 {
    uint8_t d[2];
    int8_t qs[32];
} block_q8_0;
static_assert(sizeof(block_q8_0) == 34, "q8_0 block must be 34 bytes");
static_assert(offsetof(block_q8_0, qs) == 2, "q8_0 codes follow the 2-byte scale");

typedef struct block_q4_K {
    uint8_t d[2];
    uint8_t dmin[2];
    uint8_t scales[12];
    uint8_t qs[PN_QK_K / 2];
} block_q4_K;
static_assert(sizeof(block_q4_K) == 144, "q4_K block must be 144 bytes");
static_assert(offsetof(block_q4_K, dmin) == 2 && offsetof(block_q4_K, scales) == 4 &&
                  offsetof(block_q4_K, qs) == 16,
              "q4_K: d, dmin, scales[12], qs[128]");

typedef struct block_q3_K {
    uint8_t hmask[PN_QK_K / 8];
    uint8_t qs[PN_QK_K / 4];
    uint8_t scales[12];
    uint8_t d[2];
} block_q3_K;
static_assert(sizeof(block_q3_K) == 110, "q3_K block must be 110 bytes");
static_assert(offsetof(block_q3_K, qs) == 32 && offsetof(block_q3_K, scales) == 96 &&
                  offsetof(block_q3_K, d) == 108,
              "q3_K: hmask[32], qs[64], scales[12], d");

#endif
