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
 * With n_mtp 1, block n_layers (last, after output.weight, so that every
 * other tensor keeps its index and its generated weights) is
 * the MTP layer as llama.cpp's converter writes it: a full-attention block's
 * tensors, then nextn.eh_proj [2E x E], nextn.enorm [E], nextn.hnorm [E],
 * nextn.shared_head_norm [E] (all "blk.<n_layers>.nextn.<role>.weight");
 * qwen35.block_count counts it and qwen35.nextn_predict_layers is 1.
 * Every name is "blk.<i>.<role>.weight" except ssm_a ("blk.<i>.ssm_a") and
 * ssm_dt.bias ("blk.<i>.ssm_dt.bias"). 1-D tensors are n_dims 1; every other
 * tensor is n_dims 2 even when a dimension is 1.
 *
 * Source types: every tensor of 2 dims has weight_type, except ssm_conv1d,
 * which has norm_type like every 1-D tensor (llama.cpp's converter keeps
 * norms and the conv kernel in f32 even for bf16 models; its CPU conv needs
 * f32).
 *
 * llama.cpp's qwen35 loader derives every shape from the model's keys
 * (pn_qwen38_llama_hparams below): a linear block has n_k_heads =
 * ssm.group_count and n_v_heads = ssm.time_step_rank heads of size
 * ssm.state_size, so attn_qkv has 2 * state * groups + state * v_heads
 * outputs, attn_gate and ssm_out state * v_heads (= n_inner), ssm_norm is
 * [state]; a full block's attn_q holds query and gate (2 * head_dim *
 * n_head), attn_k/attn_v head_dim * n_head_kv, attn_output head_dim * n_head
 * (= n_inner again).
 */
#ifndef PN_MIX_QWEN38_SHAPES_H
#define PN_MIX_QWEN38_SHAPES_H

#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "mix/plan.h"

typedef struct pn_qwen38_config {
    int n_layers;
    int full_attn_interval; /* 4 */
    int64_t n_embd;         /* 5120 */
    int64_t n_inner;        /* 6144: attn_gate output, ssm_out and attn_output input */
    int64_t n_qkv;          /* 10240: attn_qkv output, ssm_conv1d channels */
    int64_t n_q;            /* 12288: attn_q output */
    int64_t n_kv;           /* 1024: attn_k / attn_v output */
    int64_t n_ff;           /* 17408 */
    int64_t n_vocab;        /* 248320 */
    int64_t n_ssm_heads;    /* 48: ssm_alpha/ssm_beta output, ssm_a, ssm_dt.bias */
    int64_t conv_kernel;    /* 4 */
    int64_t ssm_norm;       /* 128 */
    int64_t head_dim;       /* 256: attn_q_norm / attn_k_norm */
    int weight_type;        /* source type of the 2-D tensors */
    int norm_type;          /* source type of the 1-D tensors */
    int n_mtp;              /* 0, or 1: an MTP layer (block n_layers, below) */
} pn_qwen38_config;

/* Qwen3.8-27B (docs/format.md#qwen38-27b-shapes), BF16 weights and F32 norms. */
pn_qwen38_config pn_qwen38_config_full(void);


/* The shapes pn-synth writes at width scale 1..16: a narrower Qwen3.8 that
 * llama.cpp loads and runs. Per-head sizes are kept (head_dim 256, ssm state
 * 128, conv 4) and the head counts divided in whole heads:
 *   n_head      = max(1, 24 / S)                                (floor)
 *   n_head_kv   = the largest divisor of n_head <= max(1, n_head / 6)
 *   ssm v heads = 2 * n_head (so state * v_heads = head_dim * n_head = n_inner)
 *   ssm groups  = the largest divisor of v_heads <= max(1, v_heads / 3)
 *   n_inner = 256 n_head, n_q = 512 n_head, n_kv = 256 n_head_kv,
 *   n_qkv = 256 groups + 256 n_head;
 *   n_embd = 5120 / S rounded (halves up) to a multiple of 1280 for S <= 4
 *   (so q3_K/q4_K's 256 and pn3t's 80 divide it; 1280 at S = 3 and 4), of 320
 *   above (pn3t's 80 and pn4t's 64 divide it; 320 at S = 16; k-quants do not
 *   fit, use a recipe with a fallback such as recipes/test-fallback.mix);
 *   n_ff = 17408 / S rounded to a multiple of 64.
 * Every 4th block is full attention; with fewer than 4 layers the interval
 * is n_layers, so the last block is full attention (llama.cpp cannot run a
 * model without one). One layer gives one full-attention block and no linear
 * one, which llama.cpp cannot run either (pn_qwen38_llama_runnable). S = 1 with 64
 * layers and vocab 248320 is exactly pn_qwen38_config_full() (F32 types).
 * width_scale outside 1..16, n_layers < 1 or n_vocab < 1 give n_layers = 0,
 * which pn_qwen38_tensors refuses. */
pn_qwen38_config pn_qwen38_config_narrow(int width_scale, int n_layers, int64_t n_vocab);

/* The hyperparameters llama.cpp's qwen35 loader reads, as they follow from a
 * config's widths. */
typedef struct pn_qwen38_hparams {
    int64_t n_head;           /* attention.head_count: n_inner / head_dim */
    int64_t n_head_kv;        /* attention.head_count_kv: n_kv / head_dim */
    int64_t head_dim;         /* attention.key_length and value_length */
    int64_t rope_dims;        /* rope.dimension_count: head_dim / 4 (partial rotary) */
    int32_t rope_sections[4]; /* rope.dimension_sections: rope_dims / 2 split 3 ways, 0 */
    int64_t ssm_state;        /* ssm.state_size: ssm_norm (key and value head size) */
    int64_t ssm_groups;       /* ssm.group_count: key heads */
    int64_t ssm_v_heads;      /* ssm.time_step_rank: value heads, n_ssm_heads */
    int64_t ssm_inner;        /* ssm.inner_size: ssm_state * ssm_v_heads = n_inner */
    int64_t conv_kernel;      /* ssm.conv_kernel */
} pn_qwen38_hparams;

/* Derives the keys from the config and checks that llama.cpp would derive
 * the config's shapes back from them: n_q = 2 n_inner, n_inner = head_dim *
 * n_head, n_kv = head_dim * n_head_kv with n_head a multiple of n_head_kv,
 * n_inner = ssm_norm * n_ssm_heads, n_qkv - n_inner = 2 ssm_norm * groups
 * with n_ssm_heads a multiple of groups, head_dim a multiple of 8
 * (PN_ERR_USAGE naming the widths that disagree). */
pn_status pn_qwen38_llama_hparams(const pn_qwen38_config *c, pn_qwen38_hparams *out, pn_error *err);

/* Whether llama.cpp (node-llama-cpp 3.22.1's build) can evaluate the model:
 * it aborts (GGML_ASSERT(buffer)) when the model has no full-attention block
 * (an empty KV cache) or no linear block (an empty recurrent state), so a
 * model needs n_layers >= full_attn_interval >= 2. PN_ERR_USAGE saying which
 * is missing and why. */
pn_status pn_qwen38_llama_runnable(const pn_qwen38_config *c, pn_error *err);

/* Number of tensors the config describes (0 if the config is invalid). */
size_t pn_qwen38_tensor_count(const pn_qwen38_config *c);

/* The tensor list. *out is one allocation holding the descriptors and their
 * names: free(*out) releases everything. PN_ERR_USAGE for a config with a
 * non-positive field or an interval < 1. */
pn_status pn_qwen38_tensors(const pn_qwen38_config *c, pn_tensor_desc **out, size_t *count,
                            pn_error *err);

#endif
