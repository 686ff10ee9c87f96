/* qwen38_shapes.c - the tensor list of a Qwen3.8-shaped model for a
 * configuration (see qwen38_shapes.h). */
#include "synth/qwen38_shapes.h"
#include "synth/qwen38_shapes_testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/types.h"

#define NAME_BYTES 48 /* "blk.<i>.post_attention_norm.weight" and the like */

pn_qwen38_config pn_qwen38_config_full(void)
{
    pn_qwen38_config c = {
        .n_layers = 64,
        .full_attn_interval = 4,
        .n_embd = 5120,
        .n_inner = 6144,
        .n_qkv = 10240,
        .n_q = 12288,
        .n_kv = 1024,
        .n_ff = 17408,
        .n_vocab = 248320,
        .n_ssm_heads = 48,
        .conv_kernel = 4,
        .ssm_norm = 128,
        .head_dim = 256,
        .weight_type = PN_TYPE_BF16,
        .norm_type = PN_TYPE_F32,
    };
    return c;
}

/* round(x / (scale * g)) * g with halves up, at least g. */
static int64_t scaled(int64_t x, int scale, int64_t g)
{
    int64_t unit = (int64_t)scale * g;
    int64_t v = (2 * x + unit) / (2 * unit) * g;
    return v < g ? g : v;
}

pn_qwen38_config pn_qwen38_config_scaled(int width_scale, int n_layers, int64_t n_vocab)
{
    pn_qwen38_config c = pn_qwen38_config_full();
    if (width_scale < 1 || n_layers < 1 || n_vocab < 1) {
        c.n_layers = 0;
        return c;
    }
    c.n_layers = n_layers;
    c.n_vocab = n_vocab;
    c.n_embd = scaled(c.n_embd, width_scale, 1280);
    c.n_inner = scaled(c.n_inner, width_scale, 64);
    c.n_qkv = scaled(c.n_qkv, width_scale, 64);
    c.n_q = scaled(c.n_q, width_scale, 64);
    c.n_kv = scaled(c.n_kv, width_scale, 64);
    c.n_ff = scaled(c.n_ff, width_scale, 64);
    c.weight_type = PN_TYPE_F32;
    c.norm_type = PN_TYPE_F32;
    return c;
}

/* The largest divisor of n that is at most cap (at least 1). */
static int64_t divisor_at_most(int64_t n, int64_t cap)
{
    for (int64_t d = cap < n ? cap : n; d > 1; d--)
        if (n % d == 0)
            return d;
    return 1;
}

pn_qwen38_config pn_qwen38_config_narrow(int width_scale, int n_layers, int64_t n_vocab)
{
    pn_qwen38_config c = pn_qwen38_config_full();
    c.weight_type = PN_TYPE_F32;
    c.norm_type = PN_TYPE_F32;
    if (width_scale < 1 || width_scale > 16 || n_layers < 1 || n_vocab < 1) {
        c.n_layers = 0;
        return c;
    }
    c.n_layers = n_layers;
    c.n_vocab = n_vocab;
    c.full_attn_interval = n_layers < 4 ? n_layers : 4;
    const int64_t heads = 24 / width_scale > 0 ? 24 / width_scale : 1;
    const int64_t kv_heads = divisor_at_most(heads, heads / 6);
    const int64_t v_heads = 2 * heads;
    const int64_t groups = divisor_at_most(v_heads, v_heads / 3);
    c.n_inner = c.head_dim * heads;
    c.n_q = 2 * c.head_dim * heads;
    c.n_kv = c.head_dim * kv_heads;
    c.n_ssm_heads = v_heads;
    c.n_qkv = 2 * c.ssm_norm * groups + c.ssm_norm * v_heads;
    c.n_embd = scaled(c.n_embd, width_scale, width_scale <= 4 ? 1280 : 320);
    c.n_ff = scaled(c.n_ff, width_scale, 64);
    return c;
}

static bool config_ok(const pn_qwen38_config *c)
{
    return c->n_layers >= 1 && c->n_layers <= 100000 && c->full_attn_interval >= 1 &&
           c->n_embd >= 1 && c->n_inner >= 1 && c->n_qkv >= 1 && c->n_q >= 1 && c->n_kv >= 1 &&
           c->n_ff >= 1 && c->n_vocab >= 1 && c->n_ssm_heads >= 1 && c->conv_kernel >= 1 &&
           c->ssm_norm >= 1 && c->head_dim >= 1 && pn_type_is_float(c->weight_type) &&
           pn_type_is_float(c->norm_type) && (c->n_mtp == 0 || c->n_mtp == 1);
}

static bool is_full(const pn_qwen38_config *c, int i)
{
    return (i + 1) % c->full_attn_interval == 0;
}

pn_status pn_qwen38_llama_runnable(const pn_qwen38_config *c, pn_error *err)
{
    if (!config_ok(c))
        return pn_error_set(err, PN_ERR_USAGE,
                            "qwen3.8 shapes: every width, count and the interval must be >= 1");
    if (c->n_layers < c->full_attn_interval)
        return pn_error_set(err, PN_ERR_USAGE,
                            "%d layers with a full-attention interval of %d have no "
                            "full-attention block; llama.cpp cannot run such a model (its KV "
                            "cache would hold no layer)",
                            c->n_layers, c->full_attn_interval);
    if (c->full_attn_interval == 1)
        return pn_error_set(err, PN_ERR_USAGE,
                            "%d layer%s: all full attention, no linear-attention block; "
                            "llama.cpp cannot run such a model (its recurrent state would hold "
                            "no layer): use 2 layers or more",
                            c->n_layers, c->n_layers == 1 ? "" : "s");
    return PN_OK;
}

pn_status pn_qwen38_llama_hparams(const pn_qwen38_config *c, pn_qwen38_hparams *out, pn_error *err)
{
    memset(out, 0, sizeof *out);
    if (!config_ok(c))
        return pn_error_set(err, PN_ERR_USAGE,
                            "qwen3.8 shapes: every width, count and the interval must be >= 1");
    const int64_t hd = c->head_dim, st = c->ssm_norm;
    if (hd % 8 != 0)
        return pn_error_set(err, PN_ERR_USAGE,
                            "qwen3.8 shapes: head_dim %lld is not a multiple of 8 (rope needs "
                            "head_dim / 4 even)",
                            (long long)hd);
    if (c->n_inner % hd != 0 || c->n_q != 2 * c->n_inner)
        return pn_error_set(err, PN_ERR_USAGE,
                            "qwen3.8 shapes: attention widths disagree: n_inner %lld must be "
                            "head_dim %lld times the head count and n_q %lld twice n_inner",
                            (long long)c->n_inner, (long long)hd, (long long)c->n_q);
    if (c->n_kv % hd != 0 || (c->n_inner / hd) % (c->n_kv / hd) != 0)
        return pn_error_set(err, PN_ERR_USAGE,
                            "qwen3.8 shapes: n_kv %lld must be head_dim %lld times a divisor of "
                            "the head count %lld",
                            (long long)c->n_kv, (long long)hd, (long long)(c->n_inner / hd));
    if (c->n_inner != st * c->n_ssm_heads)
        return pn_error_set(err, PN_ERR_USAGE,
                            "qwen3.8 shapes: n_inner %lld must be the ssm state %lld times the "
                            "ssm heads %lld",
                            (long long)c->n_inner, (long long)st, (long long)c->n_ssm_heads);
    const int64_t key2 = c->n_qkv - c->n_inner;
    if (key2 <= 0 || key2 % (2 * st) != 0 || c->n_ssm_heads % (key2 / (2 * st)) != 0)
        return pn_error_set(err, PN_ERR_USAGE,
                            "qwen3.8 shapes: n_qkv %lld must be n_inner %lld plus twice the ssm "
                            "state %lld times a divisor of the ssm heads %lld",
                            (long long)c->n_qkv, (long long)c->n_inner, (long long)st,
                            (long long)c->n_ssm_heads);
    out->head_dim = hd;
    out->n_head = c->n_inner / hd;
    out->n_head_kv = c->n_kv / hd;
    out->rope_dims = hd / 4;
    /* rope_dims / 2 frequency pairs split into (time, height, width) sections
     * the way Qwen's mrope_section [11, 11, 10] splits 32 */
    const int32_t pairs = (int32_t)(hd / 8);
    out->rope_sections[0] = (pairs + 2) / 3;
    out->rope_sections[1] = (pairs - out->rope_sections[0] + 1) / 2;
    out->rope_sections[2] = pairs - out->rope_sections[0] - out->rope_sections[1];
    out->rope_sections[3] = 0;
    out->ssm_state = st;
    out->ssm_groups = key2 / (2 * st);
    out->ssm_v_heads = c->n_ssm_heads;
    out->ssm_inner = c->n_inner;
    out->conv_kernel = c->conv_kernel;
    return PN_OK;
}

size_t pn_qwen38_tensor_count(const pn_qwen38_config *c)
{
    if (!config_ok(c))
        return 0;
    size_t n = 3;
    for (int i = 0; i < c->n_layers; i++)
        n += is_full(c, i) ? 11 : 14;
    return n + (c->n_mtp ? 15 : 0);
}

typedef struct builder {
    pn_tensor_desc *d;
    char *names;
    size_t n;
    const pn_qwen38_config *c;
} builder;

static void add(builder *b, int layer, const char *role, int64_t ne0, int64_t ne1)
{
    char *name = b->names + b->n * NAME_BYTES;
    if (layer < 0)
        snprintf(name, NAME_BYTES, "%s", role);
    else
        snprintf(name, NAME_BYTES, "blk.%d.%s", layer, role);
    pn_tensor_desc *t = &b->d[b->n++];
    t->name = name;
    t->n_dims = ne1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1 ? ne1 : 1;
    t->ne[2] = 1;
    t->ne[3] = 1;
    t->src_type = ne1 ? b->c->weight_type : b->c->norm_type;
}

pn_status pn_qwen38_tensors(const pn_qwen38_config *c, pn_tensor_desc **out, size_t *count,
                            pn_error *err)
{
    *out = NULL;
    *count = 0;
    size_t n = pn_qwen38_tensor_count(c);
    if (n == 0)
        return pn_error_set(err, PN_ERR_USAGE,
                            "qwen3.8 shapes: every width, count and the interval must be >= 1 and "
                            "the source types float (n_layers %d, n_embd %lld, interval %d)",
                            c->n_layers, (long long)c->n_embd, c->full_attn_interval);
    pn_tensor_desc *d = malloc(n * (sizeof *d + NAME_BYTES));
    if (!d)
        return pn_error_set(err, PN_ERR_NOMEM, "qwen3.8 shapes: out of memory for %zu tensors", n);
    builder b = { .d = d, .names = (char *)(d + n), .c = c };
    const int64_t E = c->n_embd;
    add(&b, -1, "token_embd.weight", E, c->n_vocab);
    for (int i = 0; i < c->n_layers + c->n_mtp; i++) {
        const bool mtp = i == c->n_layers;
        if (mtp) {
            add(&b, -1, "output_norm.weight", E, 0);
            add(&b, -1, "output.weight", E, c->n_vocab);
        }
        add(&b, i, "attn_norm.weight", E, 0);
        if (mtp || is_full(c, i)) {
            add(&b, i, "attn_q.weight", E, c->n_q);
            add(&b, i, "attn_k.weight", E, c->n_kv);
            add(&b, i, "attn_v.weight", E, c->n_kv);
            add(&b, i, "attn_q_norm.weight", c->head_dim, 0);
            add(&b, i, "attn_k_norm.weight", c->head_dim, 0);
            add(&b, i, "attn_output.weight", c->n_inner, E);
        } else {
            add(&b, i, "attn_qkv.weight", E, c->n_qkv);
            add(&b, i, "attn_gate.weight", E, c->n_inner);
            add(&b, i, "ssm_conv1d.weight", c->conv_kernel, c->n_qkv);
            b.d[b.n - 1].src_type = c->norm_type;
            add(&b, i, "ssm_alpha.weight", E, c->n_ssm_heads);
            add(&b, i, "ssm_beta.weight", E, c->n_ssm_heads);
            add(&b, i, "ssm_a", c->n_ssm_heads, 0);
            add(&b, i, "ssm_dt.bias", c->n_ssm_heads, 0);
            add(&b, i, "ssm_norm.weight", c->ssm_norm, 0);
            add(&b, i, "ssm_out.weight", c->n_inner, E);
        }
        add(&b, i, "post_attention_norm.weight", E, 0);
        add(&b, i, "ffn_gate.weight", E, c->n_ff);
        add(&b, i, "ffn_up.weight", E, c->n_ff);
        add(&b, i, "ffn_down.weight", c->n_ff, E);
        if (mtp) {
            add(&b, i, "nextn.eh_proj.weight", 2 * E, E);
            add(&b, i, "nextn.enorm.weight", E, 0);
            add(&b, i, "nextn.hnorm.weight", E, 0);
            add(&b, i, "nextn.shared_head_norm.weight", E, 0);
        }
    }
    if (!c->n_mtp) {
        add(&b, -1, "output_norm.weight", E, 0);
        add(&b, -1, "output.weight", E, c->n_vocab);
    }
    *out = d;
    *count = b.n;
    return PN_OK;
}
