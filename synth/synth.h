/* synth.h - pn-synth: a float GGUF with the Qwen3.8 tensor names and shapes
 * (synth/qwen38_shapes.h) and plausible qwen35.* keys, filled with generated
 * weights, for tests, demos and benchmarks.
 *
 * Weights: 2-D tensors are near-Gaussian with standard deviation 0.02, with
 * 0.1% of the entries multiplied by 10 and 4 whole columns (input features,
 * the same for every row of a tensor) multiplied by 8, the outliers PN's
 * rotation exists for; norms are near 1, ssm_a negative, ssm_dt.bias small.
 * Every row is a function of (seed, tensor index, row) alone, so the file is
 * the same whatever the thread count. 1-D tensors are F32; the rest use the
 * chosen dtype. Written through the GGUF writer: temporary file, rename.
 *
 * With a split limit the model is written as a split set, as llama.cpp's
 * gguf-split writes one (io/outset.h, docs/split.md): PATH NAME.gguf
 * becomes NAME-00001-of-0000N.gguf ..., the first split holding every key,
 * committed with the first split last. A set reads back as the same model,
 * byte for byte the same keys (but the split keys) and tensor data.
 */
#ifndef PN_PIPELINE_SYNTH_H
#define PN_PIPELINE_SYNTH_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "gguf/gguf_split.h"
#include "synth/qwen38_shapes.h"

/* What the weights are like (docs/usage.md#the-trained-profile). */
typedef enum pn_synth_profile {
    PN_SYNTH_GAUSSIAN = 0, /* the default above: near-Gaussian, made-up outliers */
    PN_SYNTH_TRAINED = 1,  /* the statistics published for trained models */
} pn_synth_profile;

/* The trained profile's figures, each from a published measurement or
 * stated as our own choice (synth_rules.c says which):
 *   - norm gains: in PN_SYNTH_GAIN_OUTLIERS(n_embd) fixed channels, the same
 *     in every norm that feeds matrices (attn_norm, post_attention_norm,
 *     output_norm, the MTP layer's), a gain of PN_SYNTH_GAIN_OUTLIER, the
 *     rest 1 + 0.05 N(0, 1) as in the default;
 *   - 2-D weights: 0.02 x row scale x column scale x body, the scales
 *     exp(PN_SYNTH_SCALE_SIGMA N(0, 1)) per row and per column; the body
 *     N(0, 1) for FFN, attention output and the rest (Weibull shape of |w|
 *     about 1.19), N(0, 1) exp(PN_SYNTH_SELECTION_TAU N(0, 1)) for the
 *     attention input projections q, k and the linear attention's qkv
 *     (about 1.13); no made-up outliers. */
#define PN_SYNTH_GAIN_OUTLIERS(n_embd) ((n_embd) >= 4096 ? (n_embd) / 2048 : 2)
#define PN_SYNTH_GAIN_OUTLIER 20.0f
#define PN_SYNTH_SCALE_SIGMA 0.12
#define PN_SYNTH_SELECTION_TAU 0.32

typedef struct pn_synth_opts {
    const char *path;
    pn_qwen38_config config; /* shapes and the weight dtype */
    uint64_t seed;
    pn_synth_profile profile; /* 0: the default (gaussian) */
    bool force;               /* replace an existing file */
    bool no_header_hash;      /* write no header record (docs/format.md#the-header-hash) */
    gguf_split_limit split;   /* {GGUF_SPLIT_NONE}: one file */
    uint64_t shard_size;      /* the HF form: bytes of tensor data per shard
                                      (0: 5 GB, Hugging Face's default) */
    int threads;              /* 0: all cores */
    void (*progress)(uint64_t done, uint64_t total, void *user);
    void *user;
    volatile sig_atomic_t *cancel;
} pn_synth_opts;

/* The default model: 6 layers (one full-attention block), n_embd 1280 (width
 * scale 4), vocab 8192, BF16: about 150 M weights, with more than 19 pn3t
 * tensors so P0k+19 applies. */
pn_qwen38_config pn_synth_default_config(void);

/* Exact size of what pn_synth_write would write (all splits of a set), and
 * the number of files (1, or the splits of the set; n_files may be NULL). */
pn_status pn_synth_files(const pn_synth_opts *o, uint64_t *bytes, size_t *n_files, pn_error *err);

pn_status pn_synth_write(const pn_synth_opts *o, pn_error *err);

/* The Hugging Face form: path is a folder, written as Qwen3.5's checkpoints
 * are laid out: config.json (Qwen3_5ForConditionalGeneration, the text
 * settings under text_config, a vision_config), model-0000K-of-0000N
 * .safetensors shards of at most shard_size bytes of tensor data each (a
 * larger tensor alone in its shard) with model.safetensors.index.json,
 * tokenizer.json (the same byte-level BPE, with the pre-tokenizer pattern
 * llama.cpp knows as qwen35) and tokenizer_config.json. It holds the
 * model's weights in the checkpoint's domain (synth/synth_internal.h), a
 * small vision tower that the converter drops, and with config.n_mtp the
 * MTP layer (mtp.*). llama.cpp's converter, or pn-convert, makes of it what
 * pn_synth_write writes for the same options, tensor for tensor. BF16 or
 * F32 weights (f16: PN_ERR_USAGE; the converter computes an f16 checkpoint
 * in half precision). The folder is written as a temporary sibling and
 * renamed into place: nothing half-written is ever at path. An existing
 * path is refused (PN_ERR_EXISTS) without force, and even with force
 * unless it is a folder holding only what this writes. */
pn_status pn_synth_write_hf(const pn_synth_opts *o, pn_error *err);
/* Its size (an upper bound: shards exact, JSON generous) and shard count. */
pn_status pn_synth_hf_bytes(const pn_synth_opts *o, uint64_t *bytes, size_t *n_shards,
                            pn_error *err);

#endif
