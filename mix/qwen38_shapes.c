#include "mix/qwen38_shapes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/types.h"

#define NAME_BYTES 48   /* "blk.<i>.post_attention_norm.weight" and the like */

pn_qwen38_config pn_qwen38_config_full(void)
{
    pn_qwen38_config c = {
        .n_layers = 64, .full_attn_interval = 4,
        .n_embd = 5120, .n_inner = 6144, .n_qkv = 10240, .n_q = 12288, .n_kv = 1024,
        .n_ff = 17408, .n_vocab = 248320,
        .n_ssm_heads = 48, .conv_kernel = 4, .ssm_norm = 128, .head_dim = 256,
        .weight_type = PN_TYPE_BF16, .norm_type = PN_TYPE_F32,
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

static bool config_ok(const pn_qwen38_config *c)
{
    return c->n_layers >= 1 && c->n_layers <= 100000 && c->full_attn_interval >= 1 &&
           c->n_embd >= 1 && c->n_inner >= 1 && c->n_qkv >= 1 && c->n_q >= 1 && c->n_kv >= 1 &&
           c->n_ff >= 1 && c->n_vocab >= 1 && c->n_ssm_heads >= 1 && c->conv_kernel >= 1 &&
           c->ssm_norm >= 1 && c->head_dim >= 1 && pn_type_is_float(c->weight_type) &&
           pn_type_is_float(c->norm_type);
}

static bool is_full(const pn_qwen38_config *c, int i) { return (i + 1) % c->full_attn_interval == 0; }

size_t pn_qwen38_tensor_count(const pn_qwen38_config *c)
{
    if (!config_ok(c))
        return 0;
    size_t n = 3;
    for (int i = 0; i < c->n_layers; i++)
        n += is_full(c, i) ? 11 : 14;
    return n;
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
    builder b = {.d = d, .names = (char *)(d + n), .c = c};
    const int64_t E = c->n_embd;
    add(&b, -1, "token_embd.weight", E, c->n_vocab);
    for (int i = 0; i < c->n_layers; i++) {
        add(&b, i, "attn_norm.weight", E, 0);
        if (is_full(c, i)) {
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
    }
    add(&b, -1, "output_norm.weight", E, 0);
    add(&b, -1, "output.weight", E, c->n_vocab);
    *out = d;
    *count = b.n;
    return PN_OK;
}
