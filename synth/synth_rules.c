/* synth_rules.c - the model in the Hugging Face domain and the converter's
 * rules that give its GGUF form (synth_internal.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/fp16.h"
#include "quant/types.h"
#include "synth/synth.h"
#include "synth/synth_internal.h"

/* splitmix64: a tiny, well-mixed generator; one per row. */
static uint64_t mix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Near-Gaussian N(0,1): the sum of four 16-bit uniforms, centred and scaled
 * (Irwin-Hall); cheap, and heavy tails come from the outliers added on top. */
static float gauss_approx(uint64_t r)
{
    uint32_t s = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
                 (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);
    return (float)(((double)s - 131070.0) / 37837.0);
}

static uint64_t row_seed(uint64_t seed, size_t tensor, int64_t row)
{
    uint64_t s = seed ^ (0xA24BAED4963EE407ull * (uint64_t)(tensor + 1));
    uint64_t a = mix64(&s);
    s = a ^ (0x9FB21C651E98DF25ull * (uint64_t)(row + 1));
    return mix64(&s);
}

void synth_outlier_cols(uint64_t seed, size_t ti, int64_t K, int64_t cols[4])
{
    uint64_t cs = row_seed(seed, ti, -1);
    for (int k = 0; k < 4; k++)
        cols[k] = (int64_t)(mix64(&cs) % (uint64_t)K);
}

/* The value stored in the checkpoint: x rounded to its dtype. */
static float stored(int type, float x)
{
    switch (type) {
    case PN_TYPE_F32: return x;
    case PN_TYPE_F16: return pn_fp16_to_float(pn_fp16_from_float(x));
    default: return pn_bf16_to_float(pn_bf16_from_float(x));
    }
}

/* ---- the trained profile (synth.h) ----
 *
 * Where each figure comes from (docs/usage.md#the-trained-profile):
 *   - Weight tails by tensor kind: Ding (2026), "A Two-Parameter Weibull
 *     Framework for Diagnosing Transformer Weight Distributions", arXiv
 *     2605.18898: the Weibull shape k of |w| (fitted on a probability plot of
 *     the middle 80%) is 1.186-1.204 (median over 12 models of 7 families)
 *     for the FFN matrices and the attention output, the value i.i.d.
 *     Gaussian weights give (1.20), and 1.10-1.16 for the attention input
 *     projections q and k of grouped-query models (LLaMA-3, Mistral,
 *     Qwen2.5/3), 1.05-1.18 for Pythia's merged qkv. The bodies here are
 *     calibrated so that the weights as written (scales included) fit those
 *     shapes: 1.19 and 1.13.
 *   - Outlier channels of the activations that reach the matrices: the
 *     input of every matrix is a norm's output, gain x normalized hidden
 *     state, so a channel's gain is its activation's scale. Dettmers et al.
 *     (2022), LLM.int8(): outlier features are a few fixed feature
 *     dimensions with magnitudes of at least 6 where the rest lie within
 *     about +-3.5, and more than 99.9% of the values are not outliers; Sun
 *     et al. (2024), "Massive Activations in Large Language Models": in
 *     LLaMA2-7B two fixed feature dimensions (1415, 2533) of 4096 carry
 *     activations up to 10^4-10^5 times the median. Here: 2 channels (one in
 *     2048 for wider models), the same in every such norm, with a gain of
 *     20: the outlier channel's activation is 20 times the median one's,
 *     above LLM.int8()'s threshold and far below massive activations (which
 *     are per token, not per channel, and no gain can make).
 *   - Rows and columns of unequal scale: log-normal, sigma 0.12 each. Our
 *     own choice, not a published figure: it is part of what the Weibull
 *     shapes above are calibrated with.
 */

/* N(0, 1) by Marsaglia's polar method from stream s, in double (log and
 * sqrt of libm only). */
static double gauss_polar(uint64_t *s)
{
    for (;;) {
        double u = (double)(mix64(s) >> 11) * 0x1p-52 - 1.0;
        double v = (double)(mix64(s) >> 11) * 0x1p-52 - 1.0;
        double q = u * u + v * v;
        if (q > 0.0 && q < 1.0)
            return u * sqrt(-2.0 * log(q) / q);
    }
}

void synth_gain_outlier_channels(uint64_t seed, int64_t n_embd, int64_t *ch, int *n)
{
    int want = (int)PN_SYNTH_GAIN_OUTLIERS(n_embd);
    if (want > PN_SYNTH_MAX_GAIN_OUTLIERS)
        want = PN_SYNTH_MAX_GAIN_OUTLIERS;
    if (want > n_embd)
        want = (int)n_embd;
    uint64_t s = seed ^ 0x6F75746C69657273ull; /* "outliers" */
    int k = 0;
    while (k < want) {
        int64_t c = (int64_t)(mix64(&s) % (uint64_t)n_embd);
        int at = 0;
        while (at < k && ch[at] < c)
            at++;
        if (at < k && ch[at] == c)
            continue;
        memmove(ch + at + 1, ch + at, (size_t)(k - at) * sizeof *ch);
        ch[at] = c;
        k++;
    }
    *n = k;
}

static void trained_values(const synth_tensor *t, size_t ti, uint64_t seed, int64_t r, float *x)
{
    const int64_t K = t->row_len;
    uint64_t s = row_seed(seed, ti, r);
    if (t->role != SR_WEIGHT) {
        for (int64_t i = 0; i < K; i++) {
            float g = (float)gauss_polar(&s);
            switch (t->role) {
            case SR_NORM_OFFSET: x[i] = 0.05f * g; break;
            case SR_NORM: x[i] = 1.0f + 0.05f * g; break;
            case SR_A_LOG: x[i] = (float)log(0.5 + 0.25 * fabs((double)g)); break;
            default: x[i] = 0.1f * g; break; /* SR_DT_BIAS */
            }
        }
        if (t->gain_outliers) {
            int64_t ch[PN_SYNTH_MAX_GAIN_OUTLIERS];
            int n = 0;
            synth_gain_outlier_channels(seed, K, ch, &n);
            for (int k = 0; k < n; k++)
                x[ch[k]] = PN_SYNTH_GAIN_OUTLIER - 1.0f; /* stored as gain - 1 */
        }
        return;
    }
    uint64_t rs = row_seed(seed ^ 0x726F777363616C65ull, ti, r); /* "rowscale" */
    const double row_scale = exp(PN_SYNTH_SCALE_SIGMA * gauss_polar(&rs));
    const double tau = t->tail == ST_SELECTION ? PN_SYNTH_SELECTION_TAU : 0.0;
    for (int64_t i = 0; i < K; i++) {
        uint64_t cs = row_seed(seed ^ 0x636F6C7363616C65ull, ti, i); /* "colscale" */
        double col_scale = exp(PN_SYNTH_SCALE_SIGMA * gauss_polar(&cs));
        double body = gauss_polar(&s);
        if (tau > 0.0)
            body *= exp(tau * gauss_polar(&s));
        x[i] = (float)(0.02 * row_scale * col_scale * body);
    }
}

/* Checkpoint row r of tensor ti as stored (f32 values). */
static void hf_values(const synth_tensor *t, size_t ti, uint64_t seed, const int64_t cols[4],
                      int64_t r, float *x)
{
    const int64_t K = t->row_len;
    if (t->profile == PN_SYNTH_TRAINED) {
        trained_values(t, ti, seed, r, x);
        for (int64_t i = 0; i < K; i++)
            x[i] = stored(t->hf_type, x[i]);
        return;
    }
    uint64_t s = row_seed(seed, ti, r);
    for (int64_t i = 0; i < K; i++) {
        float g = gauss_approx(mix64(&s));
        switch (t->role) {
        case SR_NORM_OFFSET: x[i] = 0.05f * g; break;
        case SR_NORM: x[i] = 1.0f + 0.05f * g; break;
        case SR_A_LOG: x[i] = (float)log(0.5 + 0.25 * fabs((double)g)); break;
        case SR_DT_BIAS: x[i] = 0.1f * g; break;
        default: {
            float w = 0.02f * g;
            if ((mix64(&s) % 1000u) == 0)
                w *= 10.0f;
            x[i] = w;
        }
        }
    }
    if (t->role == SR_WEIGHT)
        for (int k = 0; k < 4; k++)
            if (cols[k] < K)
                x[cols[k]] *= 8.0f;
    for (int64_t i = 0; i < K; i++)
        x[i] = stored(t->hf_type, x[i]);
}

static void encode(int type, const float *x, int64_t K, uint8_t *out)
{
    switch (type) {
    case PN_TYPE_F32: memcpy(out, x, (size_t)K * 4); break;
    case PN_TYPE_F16:
        for (int64_t i = 0; i < K; i++)
            pn_store_u16le(out + 2 * i, pn_fp16_from_float(x[i]));
        break;
    default:
        for (int64_t i = 0; i < K; i++)
            pn_store_u16le(out + 2 * i, pn_bf16_from_float(x[i]));
    }
}

void synth_hf_row(const synth_tensor *t, size_t ti, uint64_t seed, const int64_t cols[4], int64_t r,
                  float *x, uint8_t *out)
{
    hf_values(t, ti, seed, cols, r, x);
    encode(t->hf_type, x, t->row_len, out);
}

static int64_t perm_src(const synth_perm *p, int64_t i)
{
    if (!p->on || i < p->start)
        return i;
    int64_t rel = i - p->start, d = rel % p->hd, q = rel / p->hd;
    int64_t j = q / p->nk, k = q % p->nk;
    return p->start + (k * p->vpk + j) * p->hd + d;
}

void synth_gguf_row(const synth_tensor *t, size_t ti, uint64_t seed, const int64_t cols[4],
                    int64_t r, float *x, float *y, uint8_t *out)
{
    const int64_t K = t->row_len;
    hf_values(t, ti, seed, cols, perm_src(&t->rows, r), x);
    for (int64_t i = 0; i < K; i++)
        y[i] = x[perm_src(&t->cols, i)];
    if (t->op == SO_PLUS_ONE)
        for (int64_t i = 0; i < K; i++)
            y[i] = y[i] + 1.0f;
    else if (t->op == SO_NEG_EXP)
        for (int64_t i = 0; i < K; i++)
            y[i] = (float)-exp((double)y[i]);
    encode(t->g->src_type, y, K, out);
}

/* ---- the names and the rules ---- */

typedef struct rule {
    const char *gguf; /* the GGUF role (after "blk.N.") */
    const char *hf;   /* the checkpoint's name after the layer prefix */
    synth_role role;
    synth_op op;
    int perm; /* 0 none, 1 V rows of qkv/conv, 2 all rows (hd),
                                 3 all rows (hd 1), 4 elements (hd 1), 5 columns (hd) */
} rule;

static const rule block_rules[] = {
    { "attn_norm.weight", "input_layernorm.weight", SR_NORM_OFFSET, SO_PLUS_ONE, 0 },
    { "post_attention_norm.weight", "post_attention_layernorm.weight", SR_NORM_OFFSET, SO_PLUS_ONE,
      0 },
    { "ffn_gate.weight", "mlp.gate_proj.weight", SR_WEIGHT, SO_NONE, 0 },
    { "ffn_up.weight", "mlp.up_proj.weight", SR_WEIGHT, SO_NONE, 0 },
    { "ffn_down.weight", "mlp.down_proj.weight", SR_WEIGHT, SO_NONE, 0 },
    { "attn_q.weight", "self_attn.q_proj.weight", SR_WEIGHT, SO_NONE, 0 },
    { "attn_k.weight", "self_attn.k_proj.weight", SR_WEIGHT, SO_NONE, 0 },
    { "attn_v.weight", "self_attn.v_proj.weight", SR_WEIGHT, SO_NONE, 0 },
    { "attn_q_norm.weight", "self_attn.q_norm.weight", SR_NORM_OFFSET, SO_PLUS_ONE, 0 },
    { "attn_k_norm.weight", "self_attn.k_norm.weight", SR_NORM_OFFSET, SO_PLUS_ONE, 0 },
    { "attn_output.weight", "self_attn.o_proj.weight", SR_WEIGHT, SO_NONE, 0 },
    { "attn_qkv.weight", "linear_attn.in_proj_qkv.weight", SR_WEIGHT, SO_NONE, 1 },
    { "attn_gate.weight", "linear_attn.in_proj_z.weight", SR_WEIGHT, SO_NONE, 2 },
    { "ssm_conv1d.weight", "linear_attn.conv1d.weight", SR_WEIGHT, SO_NONE, 1 },
    { "ssm_alpha.weight", "linear_attn.in_proj_a.weight", SR_WEIGHT, SO_NONE, 3 },
    { "ssm_beta.weight", "linear_attn.in_proj_b.weight", SR_WEIGHT, SO_NONE, 3 },
    { "ssm_a", "linear_attn.A_log", SR_A_LOG, SO_NEG_EXP, 4 },
    { "ssm_dt.bias", "linear_attn.dt_bias", SR_DT_BIAS, SO_NONE, 4 },
    { "ssm_norm.weight", "linear_attn.norm.weight", SR_NORM, SO_NONE, 0 },
    { "ssm_out.weight", "linear_attn.out_proj.weight", SR_WEIGHT, SO_NONE, 5 },
    /* the MTP layer's own tensors (mtp.<name>, no layer index) */
    { "nextn.eh_proj.weight", "fc.weight", SR_WEIGHT, SO_NONE, 0 },
    { "nextn.enorm.weight", "pre_fc_norm_embedding.weight", SR_NORM_OFFSET, SO_PLUS_ONE, 0 },
    { "nextn.hnorm.weight", "pre_fc_norm_hidden.weight", SR_NORM_OFFSET, SO_PLUS_ONE, 0 },
    { "nextn.shared_head_norm.weight", "norm.weight", SR_NORM_OFFSET, SO_PLUS_ONE, 0 },
};

static const rule top_rules[] = {
    { "token_embd.weight", "model.language_model.embed_tokens.weight", SR_WEIGHT, SO_NONE, 0 },
    { "output_norm.weight", "model.language_model.norm.weight", SR_NORM_OFFSET, SO_PLUS_ONE, 0 },
    { "output.weight", "lm_head.weight", SR_WEIGHT, SO_NONE, 0 },
};

/* A small vision tower (vision_config in synth_hf.c: hidden 64, patch 4,
 * temporal patch 2, 3 channels, spatial merge 2); the converter drops it. */
static const struct {
    const char *name;
    uint32_t dims;
    int64_t shape[5];
} vision[] = {
    { "model.visual.patch_embed.proj.weight", 5, { 64, 3, 2, 4, 4 } },
    { "model.visual.blocks.0.attn.qkv.weight", 2, { 192, 64 } },
    { "model.visual.merger.linear_fc1.weight", 2, { 256, 256 } },
};

void synth_plan_free(synth_plan *p)
{
    free(p->g);
    free(p->t);
    memset(p, 0, sizeof *p);
}

pn_status synth_plan_make(const pn_qwen38_config *c, int profile, bool with_vision, synth_plan *p,
                          pn_error *err)
{
    if (profile != PN_SYNTH_GAUSSIAN && profile != PN_SYNTH_TRAINED)
        return pn_error_set(err, PN_ERR_USAGE, "unknown pn-synth profile %d", profile);
    memset(p, 0, sizeof *p);
    pn_qwen38_hparams h;
    pn_status st = pn_qwen38_llama_hparams(c, &h, err);
    if (st != PN_OK)
        return st;
    st = pn_qwen38_tensors(c, &p->g, &p->n_gguf, err);
    if (st != PN_OK)
        return st;
    const size_t n_vision = with_vision ? sizeof vision / sizeof vision[0] : 0;
    p->n = p->n_gguf + n_vision;
    p->t = calloc(p->n, sizeof *p->t);
    if (!p->t) {
        synth_plan_free(p);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory for the tensor plan");
    }
    const int64_t nk = h.ssm_groups, nv = h.ssm_v_heads, hd = h.ssm_state;
    const bool reorder = nk != nv;
    for (size_t i = 0; i < p->n_gguf; i++) {
        const pn_tensor_desc *g = &p->g[i];
        synth_tensor *t = &p->t[i];
        t->g = g;
        t->hf_type = c->weight_type;
        t->row_len = g->ne[0];
        t->n_rows = g->ne[1] * g->ne[2] * g->ne[3];
        const rule *ru = NULL;
        int layer = -1;
        const char *role = g->name;
        if (strncmp(g->name, "blk.", 4) == 0) {
            layer = atoi(g->name + 4);
            role = strchr(g->name + 4, '.') + 1;
            for (size_t k = 0; k < sizeof block_rules / sizeof block_rules[0]; k++)
                if (strcmp(role, block_rules[k].gguf) == 0)
                    ru = &block_rules[k];
        } else {
            for (size_t k = 0; k < sizeof top_rules / sizeof top_rules[0]; k++)
                if (strcmp(role, top_rules[k].gguf) == 0)
                    ru = &top_rules[k];
        }
        if (!ru) {
            synth_plan_free(p);
            return pn_error_set(err, PN_ERR_USAGE, "no checkpoint name for tensor %s", g->name);
        }
        if (layer < 0)
            snprintf(t->hf_name, sizeof t->hf_name, "%s", ru->hf);
        else if (layer < c->n_layers)
            snprintf(t->hf_name, sizeof t->hf_name, "model.language_model.layers.%d.%s", layer,
                     ru->hf);
        else if (strncmp(role, "nextn.", 6) == 0)
            snprintf(t->hf_name, sizeof t->hf_name, "mtp.%s", ru->hf);
        else
            snprintf(t->hf_name, sizeof t->hf_name, "mtp.layers.%d.%s", layer - c->n_layers,
                     ru->hf);
        t->role = ru->role;
        t->op = ru->op;
        t->profile = profile;
        t->tail = strcmp(role, "attn_q.weight") == 0 || strcmp(role, "attn_k.weight") == 0 ||
                          strcmp(role, "attn_qkv.weight") == 0
                      ? ST_SELECTION
                      : ST_TRANSMISSION;
        /* the norms whose output a matrix takes: n_embd gains (not q/k_norm) */
        t->gain_outliers = profile == PN_SYNTH_TRAINED && ru->role == SR_NORM_OFFSET &&
                           g->n_dims == 1 && g->ne[0] == c->n_embd &&
                           strcmp(role, "attn_q_norm.weight") != 0 &&
                           strcmp(role, "attn_k_norm.weight") != 0;
        if (g->n_dims == 1) {
            t->hf_dims = 1;
            t->hf_shape[0] = g->ne[0];
        } else if (strcmp(role, "ssm_conv1d.weight") == 0) {
            t->hf_dims = 3;
            t->hf_shape[0] = g->ne[1];
            t->hf_shape[1] = 1;
            t->hf_shape[2] = g->ne[0];
        } else {
            t->hf_dims = 2;
            t->hf_shape[0] = g->ne[1];
            t->hf_shape[1] = g->ne[0];
        }
        if (!reorder)
            continue;
        synth_perm pm = { true, 0, nk, nv / nk, hd };
        switch (ru->perm) {
        case 1:
            pm.start = 2 * hd * nk;
            t->rows = pm;
            break;
        case 2: t->rows = pm; break;
        case 3:
            pm.hd = 1;
            t->rows = pm;
            break;
        case 4:
            pm.hd = 1;
            t->cols = pm;
            break;
        case 5: t->cols = pm; break;
        default: break;
        }
    }
    for (size_t v = 0; v < n_vision; v++) {
        synth_tensor *t = &p->t[p->n_gguf + v];
        snprintf(t->hf_name, sizeof t->hf_name, "%s", vision[v].name);
        t->hf_dims = vision[v].dims;
        t->n_rows = 1;
        for (uint32_t d = 0; d < t->hf_dims; d++) {
            t->hf_shape[d] = vision[v].shape[d];
            if (d + 1 < t->hf_dims)
                t->n_rows *= t->hf_shape[d];
        }
        t->row_len = t->hf_shape[t->hf_dims - 1];
        t->hf_type = c->weight_type;
        t->role = SR_WEIGHT;
    }
    return PN_OK;
}
