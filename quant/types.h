/* types.h - what every ggml tensor type id means for sizing.
 *
 * The GGUF reader sizes and checks tensors of any stock ggml type (a third
 * party's file may hold Q6_K or IQ4_XS) plus the engine's pn3t/pn4t. Ids of
 * types ggml has removed are unknown here.
 */
#ifndef PN_QUANT_TYPES_H
#define PN_QUANT_TYPES_H

#include <stdbool.h>
#include <stdint.h>

enum {
    PN_TYPE_F32 = 0,
    PN_TYPE_F16 = 1,
    PN_TYPE_Q8_0 = 8,
    PN_TYPE_Q3_K = 11,
    PN_TYPE_Q4_K = 12,
    PN_TYPE_BF16 = 30,
    PN_TYPE_PN3T = 124,
    PN_TYPE_PN4T = 125,
};

typedef struct pn_type_traits {
    int id;
    const char *name;      /* ggml's lower-case name: "f32", "q4_K", "pn3t" */
    int64_t block_weights; /* weights per block (1 for plain types) */
    int64_t block_bytes;   /* bytes per block */
} pn_type_traits;

/* NULL for an id this build does not know. */
const pn_type_traits *pn_type_traits_get(int id);
/* Case-insensitive lookup by name ("Q4_K", "pn3t", "bf16"); NULL if unknown. */
const pn_type_traits *pn_type_traits_by_name(const char *name);

bool pn_type_is_pn(int id);    /* pn3t or pn4t */
bool pn_type_is_float(int id); /* f32, f16 or bf16: a valid quantizer source */

/* Bytes of a row of n weights; -1 if n is not a multiple of the block. */
int64_t pn_type_row_bytes(int id, int64_t n);

/* Greatest common divisor and least common multiple of positive a and b
 * (lcm: the smallest run of elements that whole blocks of two block sizes,
 * a type's and a rotation's, both divide). */
int64_t pn_gcd_i64(int64_t a, int64_t b);
int64_t pn_lcm_i64(int64_t a, int64_t b);

/* The number of elements of a tensor of shape ne[0..3] (unused dims 1) into
 * *n; false when it exceeds INT64_MAX (a hostile shape whose byte size may
 * still fit 64 bits, for types of less than a byte per weight). */
bool pn_weight_count(const int64_t ne[4], int64_t *n);

#endif
