/* hf_rows.c - the conversion rules that act on one tensor: its name, shape,
 * type and the transform of its rows (docs/hf.md states them). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hf/hf.h"
#include "quant/fp16.h"
#include "quant/types.h"

size_t pn_hf_type_size(int type)
{
    return type == PN_TYPE_F32 ? 4 : 2;
}

static bool ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && memcmp(s + n - m, suf, m) == 0;
}
static bool starts_with(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

/* Tensors of other modalities, which the text model drops (the converter's
 * list of prefixes and parts). */
static bool is_multimodal(const char *n)
{
    static const char *const prefixes[] = {
        "mlp",     "vit.",       "vpm.",           "siglip2.",          "conformer.",
        "merger.", "resampler.", "sound_encoder.", "sound_projection.", "speech_embeddings.",
    };
    static const char *const parts[] = {
        "visual.",          "vision.",
        "audio.",           "talker.",
        "vision_",          "audio_",
        "token2wav.",       "code2wav.",
        "projector.",       "pre_mm_projector_norm",
        "image_newline",    "view_seperator",
        "patch_embed",      "patch_embedding",
        "patch_merger.",    "patch_merge_mlp.",
        "model.connector.",
    };
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (starts_with(n, prefixes[i]))
            return true;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        if (strstr(n, parts[i]))
            return true;
    return false;
}

/* Per-layer names: HF suffix (without .weight/.bias) to GGUF suffix. */
static const struct {
    const char *hf, *gguf;
} layer_map[] = {
    { "input_layernorm", "attn_norm" },
    { "post_attention_layernorm", "post_attention_norm" },
    { "mlp.gate_proj", "ffn_gate" },
    { "mlp.up_proj", "ffn_up" },
    { "mlp.down_proj", "ffn_down" },
    { "self_attn.q_proj", "attn_q" },
    { "self_attn.k_proj", "attn_k" },
    { "self_attn.v_proj", "attn_v" },
    { "self_attn.o_proj", "attn_output" },
    { "self_attn.q_norm", "attn_q_norm" },
    { "self_attn.k_norm", "attn_k_norm" },
    { "linear_attn.in_proj_qkv", "attn_qkv" },
    { "linear_attn.in_proj_z", "attn_gate" },
    { "linear_attn.in_proj_a", "ssm_alpha" },
    { "linear_attn.in_proj_b", "ssm_beta" },
    { "linear_attn.A_log", "ssm_a" },
    { "linear_attn.dt_proj", "ssm_dt" },
    { "linear_attn.conv1d", "ssm_conv1d" },
    { "linear_attn.norm", "ssm_norm" },
    { "linear_attn.out_proj", "ssm_out" },
    { "eh_proj", "nextn.eh_proj" },
    { "enorm", "nextn.enorm" },
    { "hnorm", "nextn.hnorm" },
    { "shared_head.norm", "nextn.shared_head_norm" },
};

/* Parses a decimal layer index (digits only, no sign, below 2^31). */
static int parse_index(const char *s, size_t n, uint64_t *out)
{
    if (n == 0 || n > 9)
        return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return 1;
}

/* The name as the converter sees it after its filters, in `buf`: returns 0
 * when dropped. */
static int filter_name(const char *src, const pn_hf_config *cfg, bool no_mtp, char *buf, size_t len)
{
    if (is_multimodal(src))
        return 0;
    /* every "language_model." removed */
    size_t o = 0;
    for (const char *p = src; *p;) {
        if (starts_with(p, "language_model.")) {
            p += strlen("language_model.");
            continue;
        }
        if (o + 1 >= len)
            return -1;
        buf[o++] = *p++;
    }
    buf[o] = '\0';
    if (starts_with(buf, "model.mtp."))
        memmove(buf, buf + 6, strlen(buf + 6) + 1);
    if (starts_with(buf, "mtp.")) {
        if (no_mtp)
            return 0;
        const char *rest = buf + 4;
        char tmp[320];
        if (starts_with(rest, "layers.")) {
            const char *num = rest + 7;
            const char *dot = strchr(num, '.');
            uint64_t idx;
            if (!dot || !parse_index(num, (size_t)(dot - num), &idx))
                return -1;
            snprintf(tmp, sizeof tmp, "model.layers.%llu.%s",
                     (unsigned long long)(cfg->n_layer + idx), dot + 1);
        } else {
            static const struct {
                const char *from, *to;
            } remap[] = {
                { "fc.", "eh_proj." },
                { "pre_fc_norm_embedding.", "enorm." },
                { "pre_fc_norm_hidden.", "hnorm." },
                { "norm.", "shared_head.norm." },
            };
            size_t k;
            for (k = 0; k < 4; k++)
                if (starts_with(rest, remap[k].from) && !strchr(rest + strlen(remap[k].from), '.'))
                    break;
            if (k == 4)
                return -1;
            snprintf(tmp, sizeof tmp, "model.layers.%llu.%s%s", (unsigned long long)cfg->n_layer,
                     remap[k].to, rest + strlen(remap[k].from));
        }
        if (strlen(tmp) + 1 > len)
            return -1;
        strcpy(buf, tmp);
    }
    if (ends_with(buf, ".attention.masked_bias") || ends_with(buf, ".attention.bias") ||
        ends_with(buf, ".rotary_emb.inv_freq"))
        return 0;
    /* dt_bias is renamed before the mapping */
    if (ends_with(buf, ".dt_bias")) {
        size_t n = strlen(buf) - strlen(".dt_bias");
        if (n + strlen(".dt_proj.bias") + 1 > len)
            return -1;
        strcpy(buf + n, ".dt_proj.bias");
    }
    return 1;
}

int pn_hf_map_name(const char *src, const pn_hf_config *cfg, bool no_mtp, char *out, size_t out_len,
                   pn_error *err)
{
    char buf[320];
    int f = filter_name(src, cfg, no_mtp, buf, sizeof buf);
    if (f == 0)
        return 0;
    uint64_t n_blocks = cfg->n_layer + (no_mtp ? 0 : cfg->n_mtp);
    if (f > 0) {
        const char *whole = NULL;
        if (strcmp(buf, "model.embed_tokens.weight") == 0)
            whole = "token_embd.weight";
        else if (strcmp(buf, "lm_head.weight") == 0)
            whole = "output.weight";
        else if (strcmp(buf, "model.norm.weight") == 0)
            whole = "output_norm.weight";
        if (whole) {
            if (strlen(whole) + 1 > out_len)
                goto bad;
            strcpy(out, whole);
            return 1;
        }
        if (starts_with(buf, "model.layers.")) {
            const char *num = buf + 13;
            const char *dot = strchr(num, '.');
            uint64_t bid;
            if (dot && parse_index(num, (size_t)(dot - num), &bid) && bid < n_blocks) {
                char base[256];
                const char *rest = dot + 1;
                const char *suffix = "";
                size_t bl = strlen(rest);
                if (ends_with(rest, ".weight")) {
                    suffix = ".weight";
                    bl -= 7;
                } else if (ends_with(rest, ".bias")) {
                    suffix = ".bias";
                    bl -= 5;
                }
                if (bl < sizeof base) {
                    memcpy(base, rest, bl);
                    base[bl] = '\0';
                    for (size_t k = 0; k < sizeof layer_map / sizeof *layer_map; k++)
                        if (strcmp(base, layer_map[k].hf) == 0) {
                            int w = snprintf(out, out_len, "blk.%llu.%s%s", (unsigned long long)bid,
                                             layer_map[k].gguf, suffix);
                            if (w < 0 || (size_t)w >= out_len)
                                goto bad;
                            return 1;
                        }
                }
            }
        }
    }
bad:
    pn_error_set(err, PN_ERR_TENSOR, "tensor %s: can not map it to a GGUF name (qwen35)", src);
    return -1;
}

/* Elements of dims [0, n) of a source shape: the product. */
static uint64_t prod(const uint64_t *s, uint32_t n)
{
    uint64_t p = 1;
    for (uint32_t i = 0; i < n; i++)
        p *= s[i];
    return p;
}

pn_status pn_hf_plan_tensor(const pn_hf_config *cfg, const char *src_name,
                            const pn_hf_st_tensor *src, const char *gguf_name, int out_type,
                            pn_hf_tensor *t, pn_error *err)
{
    memset(t, 0, sizeof *t);
    if (strlen(gguf_name) >= sizeof t->name)
        return pn_error_set(err, PN_ERR_TENSOR, "tensor %s: GGUF name too long", src_name);
    strcpy(t->name, gguf_name);
    t->src_name = src_name;
    t->src_dtype = src->dtype;
    t->src_n_dims = src->n_dims;
    memcpy(t->src_shape, src->shape, sizeof t->src_shape);
    /* shape: the conv1d weight is squeezed (every dimension of 1 dropped) */
    uint64_t shape[8];
    uint32_t nd = 0;
    bool conv = strstr(src_name, "conv1d") != NULL;
    for (uint32_t d = 0; d < src->n_dims; d++)
        if (!conv || src->shape[d] != 1)
            shape[nd++] = src->shape[d];
    if (nd > GGUF_MAX_DIMS)
        return pn_error_set(err, PN_ERR_TENSOR, "tensor %s: %u dimensions (at most %d)", src_name,
                            nd, GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < nd; d++)
        if (shape[d] == 0 || shape[d] > INT64_MAX)
            return pn_error_set(err, PN_ERR_TENSOR, "tensor %s: dimension %u is %llu", src_name, d,
                                (unsigned long long)shape[d]);
    t->n_dims = nd ? nd : 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < nd; d++)
        t->ne[d] = (int64_t)shape[nd - 1 - d];
    t->row_elems = nd ? shape[nd - 1] : 1;
    t->n_rows = nd ? prod(shape, nd - 1) : 1;

    /* type: F32 for 1-D tensors, norms, ssm_conv1d, names not ending .weight */
    if (nd <= 1 || ends_with(gguf_name, "_norm.weight") || strstr(gguf_name, ".ssm_conv1d.") ||
        !ends_with(gguf_name, ".weight"))
        t->type = PN_TYPE_F32;
    else
        t->type = out_type;

    /* elementwise op, on the name the converter tests (after its renames) */
    if (ends_with(src_name, ".A_log"))
        t->tf.op = PN_HF_OP_NEG_EXP;
    else if (ends_with(src_name, ".dt_bias") || conv)
        t->tf.op = PN_HF_OP_NONE;
    else if (ends_with(src_name, "norm.weight") && !ends_with(src_name, "linear_attn.norm.weight"))
        t->tf.op = PN_HF_OP_PLUS_ONE;
    else {
        /* mtp.norm / mtp.pre_fc_norm_* are renamed to ...norm.weight too */
        const char *m = strstr(src_name, "mtp.");
        if (m && (ends_with(src_name, "mtp.norm.weight") ||
                  ends_with(src_name, "mtp.pre_fc_norm_embedding.weight") ||
                  ends_with(src_name, "mtp.pre_fc_norm_hidden.weight")))
            t->tf.op = PN_HF_OP_PLUS_ONE;
    }

    /* V-head reorder, when key and value head counts differ */
    uint64_t nk = cfg->lin_nk, nv = cfg->lin_nv;
    if (nk > 0 && nv > 0 && nk != nv && strstr(src_name, "linear_attn.")) {
        uint64_t vpk = nv / nk, hk = cfg->lin_hk, hv = cfg->lin_hv;
        uint64_t start = 0, hd = 0;
        bool rows = false, cols = false;
        if (strstr(src_name, ".in_proj_qkv.")) {
            rows = true;
            start = 2 * hk * nk;
            hd = hv;
        } else if (strstr(src_name, ".in_proj_z.")) {
            rows = true;
            hd = hv;
        } else if (strstr(src_name, ".in_proj_b.") || strstr(src_name, ".in_proj_a.")) {
            rows = true;
            hd = 1;
        } else if (strstr(src_name, ".A_log") || strstr(src_name, ".dt_bias") ||
                   strstr(src_name, ".dt_proj")) {
            if (nd <= 1) {
                cols = true;
                hd = 1;
            } else {
                cols = true;
                hd = 1;
            }
        } else if (strstr(src_name, ".conv1d")) {
            if (nd != 2)
                return pn_error_set(err, PN_ERR_TENSOR,
                                    "tensor %s: conv1d weight is not 2-D once squeezed", src_name);
            rows = true;
            start = 2 * hk * nk;
            hd = hv;
        } else if (strstr(src_name, ".out_proj.")) {
            cols = true;
            hd = hv;
        }
        if (rows) {
            if (nd < 2 && !(nd == 1 && hd == 1))
                return pn_error_set(err, PN_ERR_TENSOR, "tensor %s: expected 2 dimensions",
                                    src_name);
            uint64_t r = t->n_rows;
            if (nd == 1)
                r = t->row_elems; /* cannot happen for rows: guarded above */
            if (start > r || r - start != nk * vpk * hd)
                return pn_error_set(err, PN_ERR_TENSOR,
                                    "tensor %s: %llu rows do not fit the V-head reorder "
                                    "(%llu + %llu key heads x %llu values per key x %llu)",
                                    src_name, (unsigned long long)r, (unsigned long long)start,
                                    (unsigned long long)nk, (unsigned long long)vpk,
                                    (unsigned long long)hd);
            t->tf.row_perm = true;
            t->tf.row_perm_start = start;
            t->tf.row_nk = nk;
            t->tf.row_vpk = vpk;
            t->tf.row_hd = hd;
        }
        if (cols) {
            if (t->row_elems != nk * vpk * hd)
                return pn_error_set(err, PN_ERR_TENSOR,
                                    "tensor %s: %llu columns do not fit the V-head reorder "
                                    "(%llu key heads x %llu values per key x %llu)",
                                    src_name, (unsigned long long)t->row_elems,
                                    (unsigned long long)nk, (unsigned long long)vpk,
                                    (unsigned long long)hd);
            t->tf.col_perm = true;
            t->tf.col_nk = nk;
            t->tf.col_vpk = vpk;
            t->tf.col_hd = hd;
        }
    }
    return PN_OK;
}

static inline uint64_t perm_src(uint64_t x, uint64_t nk, uint64_t vpk, uint64_t hd)
{
    uint64_t d = x % hd, tt = x / hd;
    uint64_t j = tt / nk, k = tt % nk;
    return (k * vpk + j) * hd + d;
}

uint64_t pn_hf_src_row(const pn_hf_tensor *t, uint64_t r)
{
    if (!t->tf.row_perm || r < t->tf.row_perm_start)
        return r;
    return t->tf.row_perm_start +
           perm_src(r - t->tf.row_perm_start, t->tf.row_nk, t->tf.row_vpk, t->tf.row_hd);
}

static inline float load_src(pn_hf_dtype d, const uint8_t *p, uint64_t i)
{
    if (d == PN_HF_BF16)
        return pn_bf16_to_float(pn_load_u16le(p + 2 * i));
    if (d == PN_HF_F16)
        return pn_fp16_to_float(pn_load_u16le(p + 2 * i));
    uint32_t u = pn_load_u32le(p + 4 * i);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* float -> half as numpy's astype(float16): round to nearest even; a NaN
 * keeps its top payload bits and stays a NaN. */
static uint16_t f16_numpy(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) {
        uint16_t h = (uint16_t)(0x7c00u + ((u & 0x007fffffu) >> 13));
        if (h == 0x7c00u)
            h++;
        return (uint16_t)(((u >> 16) & 0x8000u) | h);
    }
    return pn_fp16_from_float(x);
}

void pn_hf_convert_row(const pn_hf_tensor *t, const uint8_t *src, uint8_t *dst)
{
    const uint64_t n = t->row_elems;
    if (t->src_dtype == PN_HF_BF16 && t->type == PN_TYPE_BF16 && t->tf.op == PN_HF_OP_NONE &&
        !t->tf.col_perm) {
        /* bf16 -> f32 -> bf16 is the identity, but for a NaN, made quiet */
        memcpy(dst, src, (size_t)n * 2);
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = pn_load_u16le(dst + 2 * i);
            if ((h & 0x7fffu) > 0x7f80u && !(h & 0x40u))
                pn_store_u16le(dst + 2 * i, (uint16_t)(h | 0x40u));
        }
        return;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint64_t si = t->tf.col_perm ? perm_src(i, t->tf.col_nk, t->tf.col_vpk, t->tf.col_hd) : i;
        float x = load_src(t->src_dtype, src, si);
        if (t->tf.op == PN_HF_OP_NEG_EXP)
            x = (float)(-exp((double)x));
        else if (t->tf.op == PN_HF_OP_PLUS_ONE)
            x = x + 1.0f;
        if (t->type == PN_TYPE_F32) {
            uint32_t u;
            memcpy(&u, &x, 4);
            dst[4 * i] = (uint8_t)u;
            dst[4 * i + 1] = (uint8_t)(u >> 8);
            dst[4 * i + 2] = (uint8_t)(u >> 16);
            dst[4 * i + 3] = (uint8_t)(u >> 24);
        } else if (t->type == PN_TYPE_BF16) {
            pn_store_u16le(dst + 2 * i, pn_bf16_from_float(x));
        } else {
            pn_store_u16le(dst + 2 * i, f16_numpy(x));
        }
    }
}
