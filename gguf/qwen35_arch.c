/* qwen35_arch.c - the qwen35 architecture as one table, and a GGUF's header
 * checked against its tensors with it (model_check.h).
 *
 * The table holds every tensor a Qwen3.5 text model has, per kind of block,
 * with its shape as a product of sizes; hf/hf_arch.c reads it with the sizes
 * from config.json, the check below with the sizes from the GGUF keys that
 * llama.cpp's qwen35 loader reads (src/llama-model.cpp load_hparams,
 * src/models/qwen35.cpp, tag v0.5.0): the keys of one type each (uint32 for
 * the sizes, as the loader's typed reader refuses any other), per-layer
 * arrays where the loader takes them. A problem names the key, its value and
 * the first tensor that disagrees; the tensors sharing it are counted, so
 * one changed key gives one finding, not one per block. */
#include "gguf/model_check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARCH "qwen35"
#define MAX_BLOCKS 512 /* LLAMA_MAX_LAYERS */

const gguf_q35_tensor gguf_q35_tensors[] = {
    { GGUF_Q35_MODEL, "token_embd.weight", "embed_tokens.weight", 2, { GGUF_Q35_V, GGUF_Q35_E } },
    { GGUF_Q35_MODEL, "output_norm.weight", "norm.weight", 1, { GGUF_Q35_E } },
    { GGUF_Q35_MODEL, "output.weight", "lm_head.weight", 2, { GGUF_Q35_V, GGUF_Q35_E } },
    { GGUF_Q35_BLOCK, "attn_norm.weight", "input_layernorm.weight", 1, { GGUF_Q35_E } },
    { GGUF_Q35_BLOCK,
      "post_attention_norm.weight",
      "post_attention_layernorm.weight",
      1,
      { GGUF_Q35_E } },
    { GGUF_Q35_BLOCK, "ffn_gate.weight", "mlp.gate_proj.weight", 2, { GGUF_Q35_F, GGUF_Q35_E } },
    { GGUF_Q35_BLOCK, "ffn_up.weight", "mlp.up_proj.weight", 2, { GGUF_Q35_F, GGUF_Q35_E } },
    { GGUF_Q35_BLOCK, "ffn_down.weight", "mlp.down_proj.weight", 2, { GGUF_Q35_E, GGUF_Q35_F } },
    { GGUF_Q35_LINEAR,
      "attn_qkv.weight",
      "linear_attn.in_proj_qkv.weight",
      2,
      { GGUF_Q35_CONV, GGUF_Q35_E } },
    { GGUF_Q35_LINEAR,
      "attn_gate.weight",
      "linear_attn.in_proj_z.weight",
      2,
      { GGUF_Q35_VL, GGUF_Q35_E } },
    { GGUF_Q35_LINEAR,
      "ssm_alpha.weight",
      "linear_attn.in_proj_a.weight",
      2,
      { GGUF_Q35_NV, GGUF_Q35_E } },
    { GGUF_Q35_LINEAR,
      "ssm_beta.weight",
      "linear_attn.in_proj_b.weight",
      2,
      { GGUF_Q35_NV, GGUF_Q35_E } },
    { GGUF_Q35_LINEAR, "ssm_a", "linear_attn.A_log", 1, { GGUF_Q35_NV } },
    { GGUF_Q35_LINEAR, "ssm_dt.bias", "linear_attn.dt_bias", 1, { GGUF_Q35_NV } },
    { GGUF_Q35_LINEAR,
      "ssm_conv1d.weight",
      "linear_attn.conv1d.weight",
      3,
      { GGUF_Q35_CONV, GGUF_Q35_ONE, GGUF_Q35_K } },
    { GGUF_Q35_LINEAR, "ssm_norm.weight", "linear_attn.norm.weight", 1, { GGUF_Q35_HV } },
    { GGUF_Q35_LINEAR,
      "ssm_out.weight",
      "linear_attn.out_proj.weight",
      2,
      { GGUF_Q35_E, GGUF_Q35_VL } },
    { GGUF_Q35_FULL, "attn_q.weight", "self_attn.q_proj.weight", 2, { GGUF_Q35_Q2, GGUF_Q35_E } },
    { GGUF_Q35_FULL, "attn_k.weight", "self_attn.k_proj.weight", 2, { GGUF_Q35_KVK, GGUF_Q35_E } },
    { GGUF_Q35_FULL, "attn_v.weight", "self_attn.v_proj.weight", 2, { GGUF_Q35_KVV, GGUF_Q35_E } },
    { GGUF_Q35_FULL,
      "attn_output.weight",
      "self_attn.o_proj.weight",
      2,
      { GGUF_Q35_E, GGUF_Q35_QO } },
    { GGUF_Q35_FULL, "attn_q_norm.weight", "self_attn.q_norm.weight", 1, { GGUF_Q35_HK } },
    { GGUF_Q35_FULL, "attn_k_norm.weight", "self_attn.k_norm.weight", 1, { GGUF_Q35_HK } },
    { GGUF_Q35_MTP_FIRST, "nextn.eh_proj.weight", "fc.weight", 2, { GGUF_Q35_E, GGUF_Q35_E2 } },
    { GGUF_Q35_MTP_FIRST, "nextn.enorm.weight", "pre_fc_norm_embedding.weight", 1, { GGUF_Q35_E } },
    { GGUF_Q35_MTP_FIRST, "nextn.hnorm.weight", "pre_fc_norm_hidden.weight", 1, { GGUF_Q35_E } },
    { GGUF_Q35_MTP_FIRST, "nextn.shared_head_norm.weight", "norm.weight", 1, { GGUF_Q35_E } },
};
const size_t gguf_q35_n_tensors = sizeof gguf_q35_tensors / sizeof *gguf_q35_tensors;

uint64_t gguf_q35_dim_value(gguf_q35_dim d, const gguf_q35_sizes *s)
{
    switch (d) {
    case GGUF_Q35_E: return s->n_embd;
    case GGUF_Q35_E2: return 2 * s->n_embd;
    case GGUF_Q35_F: return s->n_ff;
    case GGUF_Q35_V: return s->n_vocab;
    case GGUF_Q35_Q2: return 2 * s->n_head * s->head_k;
    case GGUF_Q35_QO: return s->n_head * s->head_k;
    case GGUF_Q35_KVK: return s->n_head_kv * s->head_k;
    case GGUF_Q35_KVV: return s->n_head_kv * s->head_v;
    case GGUF_Q35_HK: return s->head_k;
    case GGUF_Q35_CONV: return 2 * s->lin_nk * s->lin_hk + s->lin_nv * s->lin_hv;
    case GGUF_Q35_VL: return s->lin_nv * s->lin_hv;
    case GGUF_Q35_NV: return s->lin_nv;
    case GGUF_Q35_HV: return s->lin_hv;
    case GGUF_Q35_K: return s->conv_kernel;
    case GGUF_Q35_ONE:
    case GGUF_Q35_N_DIMS: return 1;
    }
    return 1;
}

/* Each dimension as config.json states it, as the GGUF keys state it, and
 * the key a finding about it names (the first of its keys; none for 1). */
static const struct {
    const char *config, *keys, *key;
} dims[GGUF_Q35_N_DIMS] = {
    [GGUF_Q35_E] = { "hidden_size", ARCH ".embedding_length", ARCH ".embedding_length" },
    [GGUF_Q35_E2] = { "2 x hidden_size", "2 x " ARCH ".embedding_length",
                      ARCH ".embedding_length" },
    [GGUF_Q35_F] = { "intermediate_size", ARCH ".feed_forward_length",
                     ARCH ".feed_forward_length" },
    [GGUF_Q35_V] = { "vocab_size", "the length of tokenizer.ggml.tokens", "tokenizer.ggml.tokens" },
    [GGUF_Q35_Q2] = { "2 x num_attention_heads x head_dim",
                      "2 x " ARCH ".attention.head_count x " ARCH ".attention.key_length",
                      ARCH ".attention.head_count" },
    [GGUF_Q35_QO] = { "num_attention_heads x head_dim",
                      ARCH ".attention.head_count x " ARCH ".attention.key_length",
                      ARCH ".attention.head_count" },
    [GGUF_Q35_KVK] = { "num_key_value_heads x head_dim",
                       ARCH ".attention.head_count_kv x " ARCH ".attention.key_length",
                       ARCH ".attention.head_count_kv" },
    [GGUF_Q35_KVV] = { "num_key_value_heads x head_dim",
                       ARCH ".attention.head_count_kv x " ARCH ".attention.value_length",
                       ARCH ".attention.head_count_kv" },
    [GGUF_Q35_HK] = { "head_dim", ARCH ".attention.key_length", ARCH ".attention.key_length" },
    [GGUF_Q35_CONV] = { "2 x linear_num_key_heads x linear_key_head_dim + linear_num_value_heads x "
                        "linear_value_head_dim",
                        "2 x " ARCH ".ssm.group_count x " ARCH ".ssm.state_size + " ARCH
                        ".ssm.time_step_rank x " ARCH ".ssm.state_size",
                        ARCH ".ssm.group_count" },
    [GGUF_Q35_VL] = { "linear_num_value_heads x linear_value_head_dim",
                      ARCH ".ssm.time_step_rank x " ARCH ".ssm.state_size",
                      ARCH ".ssm.time_step_rank" },
    [GGUF_Q35_NV] = { "linear_num_value_heads", ARCH ".ssm.time_step_rank",
                      ARCH ".ssm.time_step_rank" },
    [GGUF_Q35_HV] = { "linear_value_head_dim", ARCH ".ssm.state_size", ARCH ".ssm.state_size" },
    [GGUF_Q35_K] = { "linear_conv_kernel_dim", ARCH ".ssm.conv_kernel", ARCH ".ssm.conv_kernel" },
    [GGUF_Q35_ONE] = { "1", "1", NULL },
};

bool gguf_has_mtp_layer(const gguf_reader *r)
{
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++)
        if (strncmp(gguf_reader_tensor(r, i)->name, "blk.", 4) == 0 &&
            strstr(gguf_reader_tensor(r, i)->name, ".nextn."))
            return true;
    return false;
}

const char *gguf_q35_dim_config(gguf_q35_dim d)
{
    return d < GGUF_Q35_N_DIMS ? dims[d].config : "?";
}

void gguf_q35_gguf_ne(const gguf_q35_tensor *t, gguf_q35_dim ne[4])
{
    uint32_t n = 0;
    for (uint32_t d = t->n_dims; d-- > 0;)
        if (t->shape[d] != GGUF_Q35_ONE)
            ne[n++] = t->shape[d];
    while (n < 4)
        ne[n++] = GGUF_Q35_ONE;
}

/* ---- the check ---- */

/* The sizes a dimension needs known (bits of `known`). */
enum {
    K_EMBD = 1 << 0,
    K_FF = 1 << 1,
    K_VOCAB = 1 << 2,
    K_HEAD = 1 << 3,
    K_HEADKV = 1 << 4,
    K_HK = 1 << 5,
    K_HV = 1 << 6,
    K_NG = 1 << 7,
    K_DT = 1 << 8,
    K_DS = 1 << 9,
    K_CONV = 1 << 10,
};

static unsigned dim_needs(gguf_q35_dim d)
{
    switch (d) {
    case GGUF_Q35_E:
    case GGUF_Q35_E2: return K_EMBD;
    case GGUF_Q35_F: return K_FF;
    case GGUF_Q35_V: return K_VOCAB;
    case GGUF_Q35_Q2:
    case GGUF_Q35_QO: return K_HEAD | K_HK;
    case GGUF_Q35_KVK: return K_HEADKV | K_HK;
    case GGUF_Q35_KVV: return K_HEADKV | K_HV;
    case GGUF_Q35_HK: return K_HK;
    case GGUF_Q35_CONV: return K_NG | K_DT | K_DS;
    case GGUF_Q35_VL: return K_DT | K_DS;
    case GGUF_Q35_NV: return K_DT;
    case GGUF_Q35_HV: return K_DS;
    case GGUF_Q35_K: return K_CONV;
    default: return 0;
    }
}

/* The first tensor that disagrees with a dimension, and how many do. */
typedef struct dim_miss {
    char tensor[96];
    int axis;
    int64_t got;
    uint64_t want;
    int64_t count;
} dim_miss;

typedef struct q35 {
    const gguf_reader *r;
    gguf_model_problem_fn fn;
    void *ctx;
    unsigned known;
    gguf_q35_sizes s;               /* the sizes of block 0 (and of the model) */
    uint32_t n_all, n_mtp, n_trunk; /* block_count, nextn_predict_layers */
    bool blocks_known;
    uint32_t ff[MAX_BLOCKS], head[MAX_BLOCKS], head_kv[MAX_BLOCKS];
    bool full[MAX_BLOCKS];
    const char *kind_key; /* what makes a trunk block full attention */
    dim_miss miss[GGUF_Q35_N_DIMS];
} q35;

static void report(q35 *q, bool warning, const char *code, const char *key, const char *tensor,
                   int64_t index, int64_t count, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));

static void report(q35 *q, bool warning, const char *code, const char *key, const char *tensor,
                   int64_t index, int64_t count, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    gguf_model_problem p = { warning, code, key, tensor, index, count, msg, NULL };
    q->fn(q->ctx, &p);
}

/* A uint32 key of the architecture: true with *v when present and typed so;
 * reported when missing (required) or of another type. */
static bool key_u32(q35 *q, const char *key, bool required, uint32_t *v)
{
    const gguf_kv *kv = gguf_reader_find_kv(q->r, key);
    if (!kv) {
        if (required)
            report(q, false, "ARCH-KEY-MISSING", key, NULL, -1, -1,
                   "key %s is missing: llama.cpp's qwen35 loader requires it", key);
        return false;
    }
    if (kv->type != GGUF_TYPE_UINT32) {
        report(q, false, "ARCH-KEY-TYPE", key, NULL, -1, -1,
               "key %s is %s, but llama.cpp's qwen35 loader reads it as uint32", key,
               gguf_value_type_name(kv->type));
        return false;
    }
    *v = (uint32_t)kv->v.u64;
    return true;
}

/* A per-layer key (one uint32 for every block, or an array of n_all of
 * uint32, int32 or bool, as the loader's get_key_or_arr takes it) into
 * out[0..n_all). */
static bool key_layers(q35 *q, const char *key, bool required, uint32_t *out)
{
    const gguf_kv *kv = gguf_reader_find_kv(q->r, key);
    if (kv && kv->type == GGUF_TYPE_ARRAY) {
        if (kv->arr_type != GGUF_TYPE_UINT32 && kv->arr_type != GGUF_TYPE_INT32 &&
            kv->arr_type != GGUF_TYPE_BOOL) {
            report(q, false, "ARCH-KEY-TYPE", key, NULL, -1, -1,
                   "key %s is an array of %s, but llama.cpp reads one of uint32, int32 or bool",
                   key, gguf_value_type_name(kv->arr_type));
            return false;
        }
        if (!q->blocks_known)
            return false;
        if (kv->arr_count != q->n_all) {
            report(q, false, "ARCH-KEY-TYPE", key, NULL, -1, -1,
                   "key %s has %llu elements, but " ARCH ".block_count = %u", key,
                   (unsigned long long)kv->arr_count, q->n_all);
            return false;
        }
        for (uint32_t b = 0; b < q->n_all; b++)
            out[b] = (uint32_t)(kv->arr_type == GGUF_TYPE_INT32 ? (uint64_t)gguf_kv_arr_i64(kv, b)
                                                                : gguf_kv_arr_u64(kv, b));
        return true;
    }
    uint32_t v = 0;
    if (!key_u32(q, key, required, &v))
        return false;
    for (uint32_t b = 0; b < MAX_BLOCKS; b++)
        out[b] = v;
    return true;
}

/* A key that must not be 0 (a size, a divisor). */
static bool nonzero(q35 *q, const char *key, uint32_t v)
{
    if (v == 0)
        report(q, false, "ARCH-KEY-RANGE", key, NULL, -1, -1,
               "key %s = 0: a qwen35 model has no such size", key);
    return v != 0;
}

static void read_block_keys(q35 *q)
{
    uint32_t v = 0;
    if (key_u32(q, ARCH ".block_count", true, &v)) {
        if (v == 0 || v > MAX_BLOCKS)
            report(q, false, "ARCH-KEY-RANGE", ARCH ".block_count", NULL, -1, -1,
                   "key " ARCH ".block_count = %u, outside [1, %d] (llama.cpp's limit)", v,
                   MAX_BLOCKS);
        else {
            q->n_all = v;
            q->blocks_known = true;
        }
    }
    uint32_t mtp = 0;
    if (key_u32(q, ARCH ".nextn_predict_layers", false, &mtp) && q->blocks_known &&
        mtp >= q->n_all) {
        report(q, false, "ARCH-KEY-RANGE", ARCH ".nextn_predict_layers", NULL, -1, -1,
               "key " ARCH ".nextn_predict_layers = %u, but " ARCH
               ".block_count = %u leaves no trunk block",
               mtp, q->n_all);
        q->blocks_known = false;
    }
    q->n_mtp = mtp;
    q->n_trunk = q->n_all - q->n_mtp;
}

/* The attention keys: heads per block, head sizes, rope. */
static void read_attention_keys(q35 *q)
{
    bool ok = key_layers(q, ARCH ".attention.head_count", true, q->head);
    for (uint32_t b = 0; ok && b < (q->blocks_known ? q->n_all : 1); b++)
        ok = nonzero(q, ARCH ".attention.head_count", q->head[b]);
    if (ok) {
        q->known |= K_HEAD;
        q->s.n_head = q->head[0];
    }
    bool kv_ok = true;
    if (gguf_reader_find_kv(q->r, ARCH ".attention.head_count_kv")) {
        kv_ok = key_layers(q, ARCH ".attention.head_count_kv", false, q->head_kv);
        for (uint32_t b = 0; kv_ok && b < (q->blocks_known ? q->n_all : 1); b++)
            kv_ok = nonzero(q, ARCH ".attention.head_count_kv", q->head_kv[b]);
    } else {
        memcpy(q->head_kv, q->head, sizeof q->head);
        kv_ok = ok;
    }
    if (kv_ok) {
        q->known |= K_HEADKV;
        q->s.n_head_kv = q->head_kv[0];
    }
    /* the head sizes default to embedding_length / head_count */
    uint32_t hk = 0, hv = 0;
    bool hk_ok = key_u32(q, ARCH ".attention.key_length", false, &hk);
    bool hv_ok = key_u32(q, ARCH ".attention.value_length", false, &hv);
    if (!gguf_reader_find_kv(q->r, ARCH ".attention.key_length") && (q->known & K_EMBD) && ok) {
        hk = (uint32_t)(q->s.n_embd / q->head[0]);
        hk_ok = true;
    }
    if (!gguf_reader_find_kv(q->r, ARCH ".attention.value_length") && (q->known & K_EMBD) && ok) {
        hv = (uint32_t)(q->s.n_embd / q->head[0]);
        hv_ok = true;
    }
    if (hk_ok && hv_ok && hk != hv)
        report(q, false, "ARCH-KEY-RANGE", ARCH ".attention.value_length", NULL, -1, -1,
               "key " ARCH ".attention.value_length = %u, but " ARCH
               ".attention.key_length = %u: the qwen35 graph needs one head size",
               hv, hk);
    if (hk_ok && nonzero(q, ARCH ".attention.key_length", hk)) {
        q->known |= K_HK;
        q->s.head_k = hk;
    }
    if (hv_ok && nonzero(q, ARCH ".attention.value_length", hv)) {
        q->known |= K_HV;
        q->s.head_v = hv;
    }
    uint32_t rot = 0;
    if (key_u32(q, ARCH ".rope.dimension_count", false, &rot) && hk_ok && rot > hk)
        report(q, false, "ARCH-KEY-RANGE", ARCH ".rope.dimension_count", NULL, -1, -1,
               "key " ARCH ".rope.dimension_count = %u, more than " ARCH
               ".attention.key_length = %u: a head has no more dimensions to rotate",
               rot, hk);
    const char *sec_key = ARCH ".rope.dimension_sections";
    const gguf_kv *sec = gguf_reader_find_kv(q->r, sec_key);
    if (!sec)
        report(q, false, "ARCH-KEY-MISSING", sec_key, NULL, -1, -1,
               "key %s is missing: llama.cpp's qwen35 loader requires it", sec_key);
    else if (sec->type == GGUF_TYPE_ARRAY
                 ? (sec->arr_count != 4 ||
                    (sec->arr_type != GGUF_TYPE_INT32 && sec->arr_type != GGUF_TYPE_UINT32))
                 : sec->type != GGUF_TYPE_INT32)
        report(q, false, "ARCH-KEY-TYPE", sec_key, NULL, -1, -1,
               "key %s is not 4 int32 (or one int32), as llama.cpp's qwen35 loader reads it",
               sec_key);
}

/* The linear attention's keys. */
static void read_ssm_keys(q35 *q)
{
    uint32_t conv = 0, inner = 0, state = 0, dt = 0, ng = 0;
    bool c_ok = key_u32(q, ARCH ".ssm.conv_kernel", true, &conv) &&
                nonzero(q, ARCH ".ssm.conv_kernel", conv);
    bool i_ok = key_u32(q, ARCH ".ssm.inner_size", true, &inner);
    bool s_ok = key_u32(q, ARCH ".ssm.state_size", true, &state) &&
                nonzero(q, ARCH ".ssm.state_size", state);
    bool d_ok = key_u32(q, ARCH ".ssm.time_step_rank", true, &dt) &&
                nonzero(q, ARCH ".ssm.time_step_rank", dt);
    bool g_ok =
        key_u32(q, ARCH ".ssm.group_count", true, &ng) && nonzero(q, ARCH ".ssm.group_count", ng);
    if (c_ok) {
        q->known |= K_CONV;
        q->s.conv_kernel = conv;
    }
    if (s_ok) {
        q->known |= K_DS;
        q->s.lin_hk = q->s.lin_hv = state; /* the loader's head_k_dim and head_v_dim */
    }
    if (d_ok) {
        q->known |= K_DT;
        q->s.lin_nv = dt;
    }
    if (g_ok) {
        q->known |= K_NG;
        q->s.lin_nk = ng;
    }
    /* the graph takes the value head size as inner_size / time_step_rank,
     * the tensors as state_size */
    if (i_ok && s_ok && d_ok && (uint64_t)inner != (uint64_t)dt * state)
        report(q, false, "ARCH-KEY-RANGE", ARCH ".ssm.inner_size", NULL, -1, -1,
               "key " ARCH ".ssm.inner_size = %u, but " ARCH ".ssm.time_step_rank x " ARCH
               ".ssm.state_size = %u x %u = %llu",
               inner, dt, state, (unsigned long long)dt * state);
    if (d_ok && g_ok && dt % ng != 0)
        report(q, false, "ARCH-KEY-RANGE", ARCH ".ssm.group_count", NULL, -1, -1,
               "key " ARCH ".ssm.group_count = %u does not divide " ARCH
               ".ssm.time_step_rank = %u (the value heads are shared by the key heads)",
               ng, dt);
}

/* Which trunk blocks are full attention: attention.recurrent_layers when
 * present, else every full_attention_interval-th (4 when absent); MTP
 * blocks are full attention. */
static void read_layer_kinds(q35 *q)
{
    const char *rec_key = ARCH ".attention.recurrent_layers";
    const char *fai_key = ARCH ".full_attention_interval";
    uint32_t rec[MAX_BLOCKS];
    if (gguf_reader_find_kv(q->r, rec_key) && key_layers(q, rec_key, false, rec)) {
        q->kind_key = rec_key;
        for (uint32_t b = 0; b < q->n_all; b++)
            q->full[b] = b >= q->n_trunk || !rec[b];
        return;
    }
    q->kind_key = fai_key;
    uint32_t every = 4;
    if (key_u32(q, fai_key, false, &every) && every == 0) {
        report(q, false, "ARCH-KEY-RANGE", fai_key, NULL, -1, -1,
               "key %s = 0: llama.cpp takes every block modulo it", fai_key);
        every = 4;
    }
    for (uint32_t b = 0; b < q->n_all; b++)
        q->full[b] = b >= q->n_trunk || (b + 1) % every == 0;
}

/* Keys the loader reads when present: of another type, it stops (its typed
 * reader throws whether or not the key is required). */
static const struct {
    const char *key;
    gguf_value_type type;
} optional_keys[] = {
    { "general.name", GGUF_TYPE_STRING },
    { ARCH ".embedding_length_out", GGUF_TYPE_UINT32 },
    { ARCH ".attention.causal", GGUF_TYPE_BOOL },
    { ARCH ".expert_count", GGUF_TYPE_UINT32 },
    { ARCH ".rope.freq_base", GGUF_TYPE_FLOAT32 },
    { ARCH ".rope.scale_linear", GGUF_TYPE_FLOAT32 },
    { ARCH ".rope.scaling.type", GGUF_TYPE_STRING },
    { ARCH ".rope.scaling.factor", GGUF_TYPE_FLOAT32 },
    { ARCH ".rope.scaling.alpha", GGUF_TYPE_FLOAT32 },
    { ARCH ".rope.scaling.attn_factor", GGUF_TYPE_FLOAT32 },
    { ARCH ".rope.scaling.original_context_length", GGUF_TYPE_UINT32 },
    { ARCH ".rope.scaling.finetuned", GGUF_TYPE_BOOL },
};

static void check_optional_keys(q35 *q)
{
    for (size_t i = 0; i < sizeof optional_keys / sizeof *optional_keys; i++) {
        const gguf_kv *kv = gguf_reader_find_kv(q->r, optional_keys[i].key);
        if (kv && kv->type != optional_keys[i].type)
            report(q, false, "ARCH-KEY-TYPE", optional_keys[i].key, NULL, -1, -1,
                   "key %s is %s, but llama.cpp reads it as %s", optional_keys[i].key,
                   gguf_value_type_name(kv->type), gguf_value_type_name(optional_keys[i].type));
    }
    /* the loader asserts the scaling type is one it knows */
    const gguf_kv *st = gguf_reader_find_kv(q->r, ARCH ".rope.scaling.type");
    if (st && st->type == GGUF_TYPE_STRING && !gguf_str_eq(st->v.str, "none") &&
        !gguf_str_eq(st->v.str, "linear") && !gguf_str_eq(st->v.str, "yarn") &&
        !gguf_str_eq(st->v.str, "longrope"))
        report(q, false, "ARCH-KEY-RANGE", ARCH ".rope.scaling.type", NULL, -1, -1,
               "key " ARCH ".rope.scaling.type = \"%.*s\": not none, linear, yarn or longrope, "
               "the scalings llama.cpp knows",
               (int)(st->v.str.len > 40 ? 40 : st->v.str.len), st->v.str.data);
}

static void read_keys(q35 *q)
{
    uint32_t v = 0;
    (void)key_u32(q, ARCH ".context_length", true, &v);
    if (key_u32(q, ARCH ".embedding_length", true, &v) && nonzero(q, ARCH ".embedding_length", v)) {
        q->known |= K_EMBD;
        q->s.n_embd = v;
    }
    const gguf_kv *eps = gguf_reader_find_kv(q->r, ARCH ".attention.layer_norm_rms_epsilon");
    if (!eps)
        report(q, false, "ARCH-KEY-MISSING", ARCH ".attention.layer_norm_rms_epsilon", NULL, -1, -1,
               "key " ARCH ".attention.layer_norm_rms_epsilon is missing: llama.cpp's qwen35 "
               "loader requires it");
    else if (eps->type != GGUF_TYPE_FLOAT32)
        report(q, false, "ARCH-KEY-TYPE", ARCH ".attention.layer_norm_rms_epsilon", NULL, -1, -1,
               "key " ARCH ".attention.layer_norm_rms_epsilon is %s, but llama.cpp reads it as "
               "float32",
               gguf_value_type_name(eps->type));
    check_optional_keys(q);
    read_block_keys(q);
    if (key_layers(q, ARCH ".feed_forward_length", true, q->ff)) {
        q->known |= K_FF;
        q->s.n_ff = q->ff[0];
    }
    read_attention_keys(q);
    read_ssm_keys(q);
    if (q->blocks_known)
        read_layer_kinds(q);
}

/* The block of a tensor name "blk.N.rest": N, with *rest; -1 if none. */
static long block_of(const char *name, const char **rest)
{
    if (strncmp(name, "blk.", 4) != 0 || name[4] < '0' || name[4] > '9')
        return -1;
    char *end = NULL;
    unsigned long b = strtoul(name + 4, &end, 10);
    if (*end != '.' || b > 1000000)
        return -1;
    *rest = end + 1;
    return (long)b;
}

/* Whether entry e belongs in block b (b == -1: the model's own tensors). */
static bool entry_in(const q35 *q, const gguf_q35_tensor *e, long b, bool as_full)
{
    if (b < 0)
        return e->at == GGUF_Q35_MODEL;
    const bool mtp = (uint32_t)b >= q->n_trunk;
    switch (e->at) {
    case GGUF_Q35_MODEL: return false;
    case GGUF_Q35_BLOCK: return true;
    case GGUF_Q35_LINEAR: return !as_full;
    case GGUF_Q35_FULL: return as_full;
    case GGUF_Q35_MTP_FIRST: return mtp && (uint32_t)b == q->n_trunk;
    }
    return false;
}

/* The sizes of block b. */
static gguf_q35_sizes sizes_of(const q35 *q, long b)
{
    gguf_q35_sizes s = q->s;
    if (b >= 0) {
        s.n_ff = q->ff[b];
        s.n_head = q->head[b];
        s.n_head_kv = q->head_kv[b];
    }
    return s;
}

/* Tensor t against entry e: each dimension it disagrees with is recorded. */
static void match_shape(q35 *q, const gguf_q35_tensor *e, const gguf_tensor_info *t, long b)
{
    gguf_q35_dim ne[4];
    gguf_q35_gguf_ne(e, ne);
    const gguf_q35_sizes s = sizes_of(q, b);
    for (int a = 0; a < 4; a++) {
        if ((dim_needs(ne[a]) & q->known) != dim_needs(ne[a]))
            continue;
        const uint64_t want = gguf_q35_dim_value(ne[a], &s);
        if ((uint64_t)t->ne[a] == want)
            continue;
        dim_miss *m = &q->miss[ne[a]];
        if (m->count++ == 0) {
            snprintf(m->tensor, sizeof m->tensor, "%s", t->name);
            m->axis = a;
            m->got = t->ne[a];
            m->want = want;
        }
    }
}

static void report_shapes(q35 *q)
{
    for (int d = 0; d < GGUF_Q35_N_DIMS; d++) {
        const dim_miss *m = &q->miss[d];
        if (m->count == 0)
            continue;
        char more[96] = "";
        if (m->count > 1)
            snprintf(more, sizeof more, " (and %lld more tensors disagree with it)",
                     (long long)(m->count - 1));
        if (d == GGUF_Q35_ONE)
            report(q, false, "ARCH-SHAPE", NULL, m->tensor, -1, m->count,
                   "%s has ne[%d] = %lld, but llama.cpp's qwen35 loader makes it %d-dimensional%s",
                   m->tensor, m->axis, (long long)m->got, m->axis, more);
        else
            report(q, false, "ARCH-SHAPE", dims[d].key, m->tensor, -1, m->count,
                   "%s = %llu, but %s has ne[%d] = %lld%s", dims[d].keys,
                   (unsigned long long)m->want, m->tensor, m->axis, (long long)m->got, more);
    }
}

/* Per block, whether its tensors are those of the other kind than the keys
 * make it (a full-attention block holding a linear one's, or the reverse). */
static bool kind_flipped(const q35 *q, uint32_t b)
{
    bool has_full = false, has_lin = false;
    char name[160];
    for (size_t k = 0; k < gguf_q35_n_tensors; k++) {
        const gguf_q35_tensor *e = &gguf_q35_tensors[k];
        if (e->at != GGUF_Q35_FULL && e->at != GGUF_Q35_LINEAR)
            continue;
        snprintf(name, sizeof name, "blk.%u.%s", b, e->gguf);
        if (gguf_reader_find_tensor(q->r, name) >= 0)
            *(e->at == GGUF_Q35_FULL ? &has_full : &has_lin) = true;
    }
    return q->full[b] ? !has_full && has_lin : !has_lin && has_full;
}

typedef struct census {
    uint32_t *per_block; /* tensors per block, [0, n_all) */
    bool *seen;          /* per tensor of the file */
} census;

/* The table's tensors, block by block: missing ones, shapes. */
static void walk_table(q35 *q, census *cs)
{
    uint32_t empty = 0, first_empty = 0, flipped = 0, first_flipped = 0;
    char name[160];
    for (long b = -1; b < (long)q->n_all; b++) {
        if (b >= 0 && cs->per_block[b] == 0) {
            if (empty++ == 0)
                first_empty = (uint32_t)b;
            continue;
        }
        bool as_full = b >= 0 && q->full[b];
        if (b >= 0 && (uint32_t)b < q->n_trunk && kind_flipped(q, (uint32_t)b)) {
            if (flipped++ == 0)
                first_flipped = (uint32_t)b;
            as_full = !as_full; /* its tensors are checked as what they are */
        }
        for (size_t k = 0; k < gguf_q35_n_tensors; k++) {
            const gguf_q35_tensor *e = &gguf_q35_tensors[k];
            if (!entry_in(q, e, b, as_full))
                continue;
            if (b < 0)
                snprintf(name, sizeof name, "%s", e->gguf);
            else
                snprintf(name, sizeof name, "blk.%ld.%s", b, e->gguf);
            long i = gguf_reader_find_tensor(q->r, name);
            if (i < 0) {
                if (b < 0 && strcmp(e->gguf, "output.weight") == 0)
                    continue; /* tied: the loader takes token_embd's */
                const bool mtp = b >= 0 && (uint32_t)b >= q->n_trunk;
                report(q, false, "ARCH-TENSOR-MISSING", mtp ? ARCH ".nextn_predict_layers" : NULL,
                       name, b, -1, "%s is missing: a qwen35 %s has it", name,
                       b < 0     ? "model"
                       : mtp     ? "MTP block"
                       : as_full ? "full-attention block"
                                 : "linear-attention block");
                continue;
            }
            cs->seen[i] = true;
            match_shape(q, e, gguf_reader_tensor(q->r, (size_t)i), b);
        }
    }
    if (empty)
        report(q, false, "ARCH-TENSOR-MISSING", ARCH ".block_count", NULL, first_empty, empty,
               "key " ARCH ".block_count = %u, but blk.%u holds no tensor%s", q->n_all, first_empty,
               empty > 1 ? " (nor do the blocks after it)" : "");
    if (flipped) {
        char more[64] = "";
        if (flipped > 1)
            snprintf(more, sizeof more, " (and %u more blocks)", flipped - 1);
        report(q, false, "ARCH-LAYER-KIND", q->kind_key, NULL, first_flipped, flipped,
               "key %s makes blk.%u a %s block, but it holds a %s block's tensors%s", q->kind_key,
               first_flipped, q->full[first_flipped] ? "full-attention" : "linear-attention",
               q->full[first_flipped] ? "linear-attention" : "full-attention", more);
    }
}

/* Tensors the table does not hold: past block_count (one finding), an MTP
 * block's in a trunk block, anything else by name. */
static void report_unexpected(q35 *q, census *cs)
{
    const size_t n = gguf_reader_n_tensors(q->r);
    size_t past = 0, past_first = 0;
    for (size_t i = 0; i < n; i++) {
        if (cs->seen[i])
            continue;
        const char *name = gguf_reader_tensor(q->r, i)->name, *rest = NULL;
        long b = block_of(name, &rest);
        if (b >= (long)q->n_all) {
            if (past++ == 0)
                past_first = i;
            continue;
        }
        if (b >= 0 && strncmp(rest, "nextn.", 6) == 0)
            report(q, false, "ARCH-TENSOR-UNEXPECTED", ARCH ".nextn_predict_layers", name, b, -1,
                   "key " ARCH ".nextn_predict_layers = %u makes blk.%ld a %s block, but it "
                   "holds %s",
                   q->n_mtp, b, (uint32_t)b < q->n_trunk ? "trunk" : "later MTP", name);
        else
            report(q, false, "ARCH-TENSOR-UNEXPECTED", NULL, name, b, -1,
                   "%s is not a tensor of a qwen35 %s", name,
                   b < 0                       ? "model"
                   : (uint32_t)b >= q->n_trunk ? "MTP block"
                   : q->full[b]                ? "full-attention block"
                                               : "linear-attention block");
    }
    if (past)
        report(q, false, "ARCH-TENSOR-UNEXPECTED", ARCH ".block_count",
               gguf_reader_tensor(q->r, past_first)->name, -1, (int64_t)past,
               "key " ARCH ".block_count = %u, but %s is of a block past it (%zu tensor%s)",
               q->n_all, gguf_reader_tensor(q->r, past_first)->name, past, past > 1 ? "s" : "");
}

/* An optional vocab_size key agrees with the vocabulary. */
static void check_vocab_size(q35 *q)
{
    uint32_t vs = 0;
    if (!key_u32(q, ARCH ".vocab_size", false, &vs))
        return;
    long e = gguf_reader_find_tensor(q->r, "token_embd.weight");
    if (e >= 0 && (uint64_t)gguf_reader_tensor(q->r, (size_t)e)->ne[1] != vs)
        report(q, false, "ARCH-SHAPE", ARCH ".vocab_size", "token_embd.weight", -1, -1,
               ARCH ".vocab_size = %u, but token_embd.weight has ne[1] = %lld", vs,
               (long long)gguf_reader_tensor(q->r, (size_t)e)->ne[1]);
    else if ((q->known & K_VOCAB) && vs != q->s.n_vocab)
        report(q, false, "ARCH-SHAPE", ARCH ".vocab_size", NULL, -1, -1,
               ARCH ".vocab_size = %u, but tokenizer.ggml.tokens has %llu tokens", vs,
               (unsigned long long)q->s.n_vocab);
}

static pn_status check_qwen35(const gguf_reader *r, gguf_model_problem_fn fn, void *ctx,
                              uint64_t n_vocab, pn_error *err)
{
    q35 *q = calloc(1, sizeof *q);
    const size_t n = gguf_reader_n_tensors(r);
    census cs = { calloc(MAX_BLOCKS, sizeof *cs.per_block), calloc(n ? n : 1, sizeof *cs.seen) };
    if (!q || !cs.per_block || !cs.seen) {
        free(q);
        free(cs.per_block);
        free(cs.seen);
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", gguf_reader_name(r));
    }
    q->r = r;
    q->fn = fn;
    q->ctx = ctx;
    if (n_vocab) {
        q->s.n_vocab = n_vocab;
        q->known |= K_VOCAB;
    }
    read_keys(q);
    check_vocab_size(q);
    if (q->blocks_known) {
        for (size_t i = 0; i < n; i++) {
            const char *rest = NULL;
            long b = block_of(gguf_reader_tensor(r, i)->name, &rest);
            if (b >= 0 && b < (long)q->n_all)
                cs.per_block[b]++;
        }
        walk_table(q, &cs);
        report_shapes(q);
        report_unexpected(q, &cs);
    }
    free(q);
    free(cs.per_block);
    free(cs.seen);
    return PN_OK;
}

pn_status gguf_model_check(const gguf_reader *r, gguf_model_problem_fn fn, void *ctx, pn_error *err)
{
    const gguf_kv *arch = gguf_reader_find_kv(r, "general.architecture");
    const bool qwen35 = arch && arch->type == GGUF_TYPE_STRING && gguf_str_eq(arch->v.str, ARCH);
    uint64_t n_vocab = 0;
    if (qwen35 || gguf_reader_find_kv(r, "tokenizer.ggml.model")) {
        pn_status st = gguf_vocab_check(r, fn, ctx, &n_vocab, err);
        if (st)
            return st;
    }
    if (qwen35) {
        pn_status st = check_qwen35(r, fn, ctx, n_vocab, err);
        if (st)
            return st;
    }
    /* whatever the architecture: a file that records its keys proves them */
    return gguf_header_hash_check(r, fn, ctx, NULL);
}

typedef struct first_error {
    bool found;
    char msg[900];
} first_error;

static void keep_first(void *ctx, const gguf_model_problem *p)
{
    first_error *f = ctx;
    if (p->warning || f->found)
        return;
    f->found = true;
    snprintf(f->msg, sizeof f->msg, "%s: %s%s%s", p->code, p->file ? p->file : "",
             p->file ? ": " : "", p->message);
}

pn_status gguf_model_check_first(const gguf_reader *r, pn_error *err)
{
    first_error f = { 0 };
    pn_status st = gguf_model_check(r, keep_first, &f, err);
    if (st)
        return st;
    if (f.found)
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: not a model stock llama.cpp loads as its header says, or a "
                            "header changed since it was written (pn-check lists every "
                            "problem): %s",
                            gguf_reader_name(r), f.msg);
    return PN_OK;
}
