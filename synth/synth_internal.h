/* synth_internal.h - what synth.c (the GGUF form) and synth_hf.c (the
 * Hugging Face form) share: the model as a Hugging Face checkpoint holds it,
 * and the rules that turn it into the GGUF llama.cpp's converter writes.
 *
 * pn-synth generates every weight in the Hugging Face domain: tensor ti's
 * row r (the checkpoint's row: its last dimension) is a function of (seed,
 * ti, r) alone, rounded to the checkpoint's dtype. The GGUF form is derived
 * from those rows by the converter's rules (convert_hf_to_gguf.py, llama.cpp
 * tag v0.5.0, for the qwen35 family), written here independently of hf/:
 *   - names: model.language_model.* / lm_head / mtp.* to token_embd, blk.N.*,
 *     blk.<n_layers>.nextn.*; vision tensors (model.visual.*) are dropped;
 *   - A_log becomes ssm_a = -exp(A_log), computed in double, rounded once to
 *     f32;
 *   - every norm.weight but linear_attn.norm gets + 1 in f32;
 *   - conv1d [C, 1, K] is squeezed to [C, K];
 *   - where linear_num_key_heads != linear_num_value_heads, the V heads go
 *     from grouped to tiled order (the converter's V-head reorder) in seven
 *     places: the V rows of in_proj_qkv and of conv1d, the rows of in_proj_z,
 *     in_proj_a and in_proj_b, the elements of A_log and dt_bias, the
 *     columns of out_proj;
 *   - F32 for 1-D tensors, norms, ssm_conv1d and names not ending .weight,
 *     the weight dtype for the rest (BF16 rounds to nearest even, NaN quiet).
 * Not for use outside synth/.
 */
#ifndef PN_SYNTH_INTERNAL_H
#define PN_SYNTH_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "synth/qwen38_shapes.h"

/* How a checkpoint row's values are drawn. */
typedef enum synth_role {
    SR_WEIGHT,      /* N(0, 0.02) with 0.1% x10 and 4 outlier columns x8 */
    SR_NORM_OFFSET, /* 0.05 N(0, 1): a norm stored as weight - 1 */
    SR_NORM,        /* 1 + 0.05 N(0, 1): linear_attn.norm, stored as is */
    SR_A_LOG,       /* log(0.5 + 0.25 |N(0, 1)|) */
    SR_DT_BIAS,     /* 0.1 N(0, 1) */
} synth_role;

/* Which published measurement a weight of the trained profile follows
 * (synth_rules.c, docs/usage.md#the-trained-profile). */
typedef enum synth_tail {
    ST_TRANSMISSION = 0, /* FFN, attention output, the rest: Gaussian body */
    ST_SELECTION = 1,    /* attention input projections q, k (qkv): heavier tails */
} synth_tail;

/* The converter's elementwise transform. */
typedef enum synth_op { SO_NONE, SO_PLUS_ONE, SO_NEG_EXP } synth_op;

/* The V-head reorder of indices [start, end): index start + (j * nk + k) * hd
 * + d takes source index start + (k * vpk + j) * hd + d. */
typedef struct synth_perm {
    bool on;
    int64_t start, nk, vpk, hd;
} synth_perm;

typedef struct synth_tensor {
    const pn_tensor_desc *g; /* its GGUF tensor; NULL: dropped (vision) */
    char hf_name[112];
    uint32_t hf_dims;
    int64_t hf_shape[5];     /* the checkpoint's order, outermost first */
    int64_t row_len, n_rows; /* checkpoint rows (= GGUF rows) */
    int hf_type;             /* PN_TYPE_BF16 / F16 / F32 */
    synth_role role;
    synth_op op;
    synth_perm rows, cols; /* GGUF row r is checkpoint row perm(r), etc. */
    int profile;           /* PN_SYNTH_GAUSSIAN / PN_SYNTH_TRAINED */
    synth_tail tail;       /* trained: the weight's class */
    bool gain_outliers;    /* trained: a norm feeding matrices (n_embd long) */
} synth_tensor;

typedef struct synth_plan {
    pn_tensor_desc *g; /* the GGUF tensors (pn_qwen38_tensors) */
    size_t n_gguf;
    synth_tensor *t; /* n_gguf tensors, in GGUF order, then vision */
    size_t n;
} synth_plan;

/* The plan of a config; with vision, the vision tensors a Qwen3.5 checkpoint
 * holds (a small tower) follow. The checkpoint dtype is the config's
 * weight_type. profile: PN_SYNTH_GAUSSIAN or PN_SYNTH_TRAINED (synth.h). */
pn_status synth_plan_make(const pn_qwen38_config *c, int profile, bool vision, synth_plan *p,
                          pn_error *err);

/* The trained profile's outlier channels of a norm of n_embd gains: *n
 * channels (ascending) into ch (room for PN_SYNTH_MAX_GAIN_OUTLIERS). */
#define PN_SYNTH_MAX_GAIN_OUTLIERS 64
void synth_gain_outlier_channels(uint64_t seed, int64_t n_embd, int64_t *ch, int *n);
void synth_plan_free(synth_plan *p);

/* The 4 outlier columns of tensor ti (checkpoint columns). */
void synth_outlier_cols(uint64_t seed, size_t ti, int64_t K, int64_t cols[4]);

/* Checkpoint row r of tensor ti, as the values stored (rounded to hf_type),
 * encoded in hf_type (row_len elements). x: row_len floats of scratch. */
void synth_hf_row(const synth_tensor *t, size_t ti, uint64_t seed, const int64_t cols[4], int64_t r,
                  float *x, uint8_t *out);
/* GGUF row r of tensor ti (its GGUF type, row_len elements). x, y: row_len
 * floats of scratch each. */
void synth_gguf_row(const synth_tensor *t, size_t ti, uint64_t seed, const int64_t cols[4],
                    int64_t r, float *x, float *y, uint8_t *out);

/* ---- the tokenizer (byte-level BPE, gpt2) ---- */
typedef struct synth_vocab {
    uint64_t n_tokens, n_merges, n_bytes, n_special;
    char **tokens;  /* n_tokens texts, into blob */
    char **merges;  /* n_merges "left right" texts, into blob */
    int32_t *types; /* llama.cpp token types: 1 normal, 3 control */
    char *blob;
    uint32_t bos, eos, pad;
} synth_vocab;

pn_status synth_vocab_build(uint64_t V, synth_vocab *v, pn_error *err);
void synth_vocab_free(synth_vocab *v);

/* The pre-tokenizer pattern llama.cpp knows as qwen35 (Qwen3.5's). */
extern const char synth_qwen35_pre_regex[];
extern const char synth_chat_template[];

#endif
