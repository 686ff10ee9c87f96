/* qwen38_shapes_testing.h - the scaled configs only the tests build
 * (qwen38_shapes.h): the programs never include this. */
#ifndef PN_SYNTH_QWEN38_SHAPES_TESTING_H
#define PN_SYNTH_QWEN38_SHAPES_TESTING_H

#include <stdint.h>

#include "synth/qwen38_shapes.h"

/* A narrower Qwen3.8: every width of the full model divided by width_scale
 * and rounded to the nearest multiple (halves up) of its granule, never
 * below one granule: n_embd to a multiple of 1280 (so q3_K/q4_K's 256 and
 * pn3t's 80 divide it), n_inner, n_qkv, n_q, n_kv and n_ff to multiples of
 * 64 (pn4t's group). Head counts and per-head sizes (ssm heads 48, conv 4,
 * ssm_norm 128, head_dim 256) are kept. n_layers and n_vocab as given; F32
 * throughout. width_scale < 1, n_layers < 1 or n_vocab < 1 give a config
 * with n_layers = 0, which pn_qwen38_tensors refuses. */
pn_qwen38_config pn_qwen38_config_scaled(int width_scale, int n_layers, int64_t n_vocab);

#endif
