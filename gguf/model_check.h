/* model_check.h - is a GGUF's header a model stock llama.cpp loads as it says?
 *
 * Two parts, shared by every room that judges or decodes a model file:
 *
 * The qwen35 architecture as one table (gguf_q35_tensors): every tensor a
 * Qwen3.5 text model holds, per kind of block, with its shape as a product of
 * sizes. The sizes are the same facts under two names: config.json fields
 * (hf/ checks a checkpoint folder against the table) and GGUF keys (the
 * check below). The shapes are those llama.cpp's qwen35 loader creates
 * (src/models/qwen35.cpp, tag v0.5.0), in the checkpoint's order.
 *
 * gguf_model_check: the header against the tensors (for a file whose
 * general.architecture is qwen35: every hyperparameter key the loader reads,
 * present with the type it reads, agreeing with every tensor shape that
 * depends on it; each block holding the tensors of its kind and no other),
 * and the tokenizer as llama.cpp's vocabulary loader needs it (for a qwen35
 * file, or any file with tokenizer.ggml.model). Each problem is reported
 * through a callback with a stable code (docs/usage.md lists them) naming
 * the key and the tensor or array index; the check never stops at the first.
 *
 * Bounds: O(tensors + keys + tokens + merges) time (tokens and merges through
 * one hash table), memory O(tokens + blocks).
 */
#ifndef PN_GGUF_MODEL_CHECK_H
#define PN_GGUF_MODEL_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "gguf/gguf.h"
#include "gguf/header_hash.h"

/* ---- the architecture's table ---- */

/* One dimension, as a product of sizes. */
typedef enum gguf_q35_dim {
    GGUF_Q35_E,    /* embedding */
    GGUF_Q35_E2,   /* 2 x embedding */
    GGUF_Q35_F,    /* feed-forward */
    GGUF_Q35_V,    /* vocabulary */
    GGUF_Q35_Q2,   /* 2 x heads x key head size (the query and its gate) */
    GGUF_Q35_QO,   /* heads x key head size */
    GGUF_Q35_KVK,  /* kv heads x key head size */
    GGUF_Q35_KVV,  /* kv heads x value head size */
    GGUF_Q35_HK,   /* key head size */
    GGUF_Q35_CONV, /* 2 x linear key heads x linear key size + linear value heads x value size */
    GGUF_Q35_VL,   /* linear value heads x linear value size */
    GGUF_Q35_NV,   /* linear value heads */
    GGUF_Q35_HV,   /* linear value size */
    GGUF_Q35_K,    /* convolution kernel */
    GGUF_Q35_ONE,
    GGUF_Q35_N_DIMS
} gguf_q35_dim;

/* The sizes the dimensions are made of. */
typedef struct gguf_q35_sizes {
    uint64_t n_embd, n_ff, n_vocab, n_head, n_head_kv, head_k, head_v;
    uint64_t lin_nk, lin_nv, lin_hk, lin_hv, conv_kernel;
} gguf_q35_sizes;

uint64_t gguf_q35_dim_value(gguf_q35_dim d, const gguf_q35_sizes *s);
/* The dimension in config.json's fields ("num_attention_heads x head_dim"). */
const char *gguf_q35_dim_config(gguf_q35_dim d);

/* Where a tensor of the table is. */
typedef enum gguf_q35_where {
    GGUF_Q35_MODEL,     /* once */
    GGUF_Q35_BLOCK,     /* every block, trunk and MTP */
    GGUF_Q35_LINEAR,    /* linear-attention blocks */
    GGUF_Q35_FULL,      /* full-attention blocks and MTP blocks */
    GGUF_Q35_MTP_FIRST, /* the first MTP block */
} gguf_q35_where;

typedef struct gguf_q35_tensor {
    gguf_q35_where at;
    const char *gguf; /* the GGUF name, after blk.N. for a block */
    const char *hf;   /* the checkpoint's name, after the layer's prefix */
    uint32_t n_dims;
    gguf_q35_dim shape[3]; /* the checkpoint's order: GGUF ne[] reversed, 1s squeezed */
} gguf_q35_tensor;

extern const gguf_q35_tensor gguf_q35_tensors[];
extern const size_t gguf_q35_n_tensors;

/* The GGUF shape of entry t: ne[0..3], unused dimensions 1. */
void gguf_q35_gguf_ne(const gguf_q35_tensor *t, gguf_q35_dim ne[4]);

/* ---- the check ---- */

typedef struct gguf_model_problem {
    bool warning;       /* llama.cpp loads it, but not as written (a departure) */
    const char *code;   /* static: ARCH-*, TOKENIZER-*, PN-HEADER-HASH-MISMATCH */
    const char *key;    /* the key concerned, or NULL */
    const char *tensor; /* the tensor concerned, or NULL */
    int64_t index;      /* the array element or block concerned, or -1 */
    int64_t count;      /* how many things share the problem, or -1 */
    const char *message;
    const char *file; /* the split of a set concerned where it is not the one
                       * holding the keys (a header hash's), or NULL */
} gguf_model_problem;

typedef void (*gguf_model_problem_fn)(void *ctx, const gguf_model_problem *p);

/* Checks r (one file, or a split set opened as one model: keys from its
 * first split) and calls fn for every problem, in a fixed order. Returns
 * PN_OK when the check ran (whatever it found), PN_ERR_NOMEM otherwise. A
 * file of another architecture without tokenizer keys has only its header
 * hash checked (gguf_header_hash_check: every file, whatever its
 * architecture). */
pn_status gguf_model_check(const gguf_reader *r, gguf_model_problem_fn fn, void *ctx,
                           pn_error *err);

/* The header hash (gguf/header_hash.h) of every file of r (each split of a
 * set): a PN-HEADER-HASH-MISMATCH problem naming the first key a file's
 * record does not account for (the split's file in the message of a set);
 * *proof (if not NULL) is PROVEN when every file's record accounts for all
 * its keys, UNPROVEN when the (first) file has none, else MISMATCH. A split
 * without the record where the first has one is a mismatch.
 * gguf_model_check runs it; PN_OK always. */
pn_status gguf_header_hash_check(const gguf_reader *r, gguf_model_problem_fn fn, void *ctx,
                                 gguf_header_proof *proof);

/* The first error gguf_model_check finds in r, as an error naming the file,
 * the code, the key and the tensor or index (PN_ERR_FORMAT); PN_OK when it
 * finds none. What a decoder calls before it decodes. */
pn_status gguf_model_check_first(const gguf_reader *r, pn_error *err);

/* True when r holds an MTP layer: a tensor blk.N.nextn.* (the layer a
 * decoded model drops for llama.cpp when its source has none). */
bool gguf_has_mtp_layer(const gguf_reader *r);

/* tokenizer checks only (vocab_check.c; gguf_model_check calls it): n_vocab
 * set to the token count, or 0 when there are no tokens. */
pn_status gguf_vocab_check(const gguf_reader *r, gguf_model_problem_fn fn, void *ctx,
                           uint64_t *n_vocab, pn_error *err);

#endif
