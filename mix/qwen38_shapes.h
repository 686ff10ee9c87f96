/* qwen38_shapes.h - the tensor list of a Qwen3.8-shaped model (llama.cpp
 * "qwen35" naming), for pn-synth and the tests.
 *
 * Order (as llama.cpp's converter writes it, and as the golden tiny model
 * has it): token_embd.weight; then per block i = 0..n_layers-1 the block's
 * tensors; then output_norm.weight, output.weight. Block i is full attention
 * when (i + 1) % full_attn_interval == 0 (every 4th: 3, 7, ...), linear
 * (gated delta-net) otherwise. "[a x b]" is ne = {a, b}; E = n_embd.
 *   linear: attn_norm [E], attn_qkv [E x qkv], attn_gate [E x inner],
 *           ssm_conv1d [conv x qkv], ssm_alpha [E x heads], ssm_beta
 *           [E x heads], ssm_a [heads], ssm_dt.bias [heads], ssm_norm
 *           [ssm_norm], ssm_out [inner x E], post_attention_norm [E],
 *           ffn_gate [E x ffn], ffn_up [E x ffn], ffn_down [ffn x E]
 *   full:   attn_norm [E], attn_q [E x q], attn_k [E x kv], attn_v [E x kv],
 *           attn_q_norm [head_dim], attn_k_norm [head_dim], attn_output
 *           [inner x E], post_attention_norm [E], ffn_gate, ffn_up, ffn_down
 *   token_embd [E x vocab], output_norm [E], output [E x vocab]
 * Every name is "blk.<i>.<role>.weight" except ssm_a ("blk.<i>.ssm_a") and
 * ssm_dt.bias ("blk.<i>.ssm_dt.bias"). 1-D tensors are n_dims 1; every other
 * tensor is n_dims 2 even when a dimension is 1.
 *
 * Source types: every tensor of 2 dims has weight_type, every 1-D tensor
 * norm_type (converters keep norms in f32 even for bf16 models).
 */
#ifndef PN_MIX_QWEN38_SHAPES_H
#define PN_MIX_QWEN38_SHAPES_H

#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "mix/plan.h"

typedef struct pn_qwen38_config {
    int n_layers;
    int full_attn_interval;  /* 4 */
    int64_t n_embd;          /* 5120 */
    int64_t n_inner;         /* 6144: attn_gate output, ssm_out and attn_output input */
    int64_t n_qkv;           /* 10240: attn_qkv output, ssm_conv1d channels */
    int64_t n_q;             /* 12288: attn_q output */
    int64_t n_kv;            /* 1024: attn_k / attn_v output */
    int64_t n_ff;            /* 17408 */
    int64_t n_vocab;         /* 248320 */
    int64_t n_ssm_heads;     /* 48: ssm_alpha/ssm_beta output, ssm_a, ssm_dt.bias */
    int64_t conv_kernel;     /* 4 */
    int64_t ssm_norm;        /* 128 */
    int64_t head_dim;        /* 256: attn_q_norm / attn_k_norm */
    int weight_type;         /* source type of the 2-D tensors */
    int norm_type;           /* source type of the 1-D tensors */
} pn_qwen38_config;

/* Qwen3.8-27B (docs/format.md#qwen38-27b-shapes), BF16 weights and F32 norms. */
pn_qwen38_config pn_qwen38_config_full(void);

/* A narrower Qwen3.8: every width of the full model divided by width_scale
 * and rounded to the nearest multiple (halves up) of its granule, never
 * below one granule: n_embd to a multiple of 1280 (so q3_K/q4_K's 256 and
 * pn3t's 80 divide it), n_inner, n_qkv, n_q, n_kv and n_ff to multiples of
 * 64 (pn4t's group). Head counts and per-head sizes (ssm heads 48, conv 4,
 * ssm_norm 128, head_dim 256) are kept. n_layers and n_vocab as given; F32
 * throughout. width_scale < 1, n_layers < 1 or n_vocab < 1 give a config
 * with n_layers = 0, which pn_qwen38_tensors refuses. */
pn_qwen38_config pn_qwen38_config_scaled(int width_scale, int n_layers, int64_t n_vocab);

/* Number of tensors the config describes (0 if the config is invalid). */
size_t pn_qwen38_tensor_count(const pn_qwen38_config *c);

/* The tensor list. *out is one allocation holding the descriptors and their
 * names: free(*out) releases everything. PN_ERR_USAGE for a config with a
 * non-positive field or an interval < 1. */
pn_status pn_qwen38_tensors(const pn_qwen38_config *c, pn_tensor_desc **out, size_t *count,
                            pn_error *err);

#endif
