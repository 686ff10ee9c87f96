/* types.h - the type table: what every ggml tensor type id means, and what
 * this build can do with it.
 *
 * One entry per type id (types.c), in the spirit of ggml's type traits: its
 * name, its block (weights and bytes, as ggml defines them), what it can be
 * (PN_CAN_*), and, for the types a mix writes, its decoder, its encoder on
 * each CPU path (quant/pn_fast.h's ids), its sum block and, for the
 * k-quants, its imatrix-weighted encoder. The GGUF reader sizes and checks
 * tensors of any stock ggml type (a third party's file may hold Q6_K or
 * IQ4_XS) plus the engine's pn3t/pn4t; ids of types ggml has removed are
 * unknown here. Every other file asks this table: a type's name is spelled
 * here only (scripts/check-type-names), and adding a type is an entry here
 * and its kernels.
 *
 * The kernels are called through quant/quant_row.h, which checks what they
 * assume: the path is available, n >= 0 is a multiple of the block, blk_err
 * and blk_norm are both NULL or both pn_row_sum_blocks(type, n) doubles.
 */
#ifndef PN_QUANT_TYPES_H
#define PN_QUANT_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "quant/pn_fast.h"

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

/* What a type can be: bits of pn_type_traits.can (a type that has none is
 * only sized and read, never decoded or written). */
enum {
    PN_CAN_WRITE = 1u << 0,  /* a mix writes it: encoders, decoder, sums */
    PN_CAN_PN = 1u << 1,     /* pn3t, pn4t */
    PN_CAN_STOCK = 1u << 2,  /* written and not PN: stock llama.cpp reads it */
    PN_CAN_KQUANT = 1u << 3, /* a k-quant: also an imatrix-weighted encoder */
    PN_CAN_FLOAT = 1u << 4,  /* f32, f16, bf16: a valid quantizer source */
};

/* n weights of x into out, with the per-block sums (both NULL for none). */
typedef pn_status (*pn_row_encoder)(const float *x, int64_t n, uint8_t *out, int64_t *bad_col,
                                    double *blk_err, double *blk_norm);
/* The same for the least error weighted by v (quant/kquants_weighted.h). */
typedef pn_status (*pn_row_weighted_encoder)(const float *x, int64_t n, const float *v,
                                             uint8_t *out, int64_t *bad_col);
/* n weights decoded into y. */
typedef void (*pn_row_decoder)(const uint8_t *in, float *y, int64_t n);

typedef struct pn_type_traits {
    int id;
    const char *name;      /* ggml's lower-case name: f32, q4_K, pn3t */
    int64_t block_weights; /* weights per block (1 for plain types) */
    int64_t block_bytes;   /* bytes per block */
    unsigned can;          /* PN_CAN_* */
    /* With PN_CAN_WRITE: */
    int64_t sum_block;                       /* weights per sum block (quant_row.h) */
    pn_row_decoder decode;                   /* the decoder */
    pn_row_encoder encode[PN_PATH_COUNT];    /* the encoder on each path */
    pn_row_weighted_encoder encode_weighted; /* with PN_CAN_KQUANT */
} pn_type_traits;

/* NULL for an id this build does not know. */
const pn_type_traits *pn_type_traits_get(int id);
/* Case-insensitive lookup by name (Q4_K, pn3t, bf16); NULL if unknown. */
const pn_type_traits *pn_type_traits_by_name(const char *name);

/* The type's name, "?" for an id this build does not know. */
const char *pn_type_name(int id);
/* The float type (f32, f16, bf16) spelled exactly as its name; -1 for any
 * other text (an option's value: "F32" is not accepted). */
int pn_float_type_from_name(const char *name);

/* True when id is known and can be everything `can` says (PN_CAN_* bits). */
bool pn_type_can(int id, unsigned can);
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
