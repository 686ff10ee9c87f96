#include "pipeline/synth.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "quant/fp16.h"
#include "quant/types.h"

pn_qwen38_config pn_synth_default_config(void)
{
    pn_qwen38_config c = pn_qwen38_config_scaled(4, 6, 8192);
    c.weight_type = PN_TYPE_BF16;
    return c;
}

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

typedef enum role { ROLE_WEIGHT, ROLE_NORM, ROLE_SSM_A, ROLE_DT_BIAS } role;

static role role_of(const char *name)
{
    size_t n = strlen(name);
    if (n >= 5 && strcmp(name + n - 5, "ssm_a") == 0)
        return ROLE_SSM_A;
    if (strstr(name, "ssm_dt.bias"))
        return ROLE_DT_BIAS;
    if (strstr(name, "_norm.weight"))
        return ROLE_NORM;
    return ROLE_WEIGHT;
}

static void fill_row(float *x, int64_t K, role ro, uint64_t seed, const int64_t outlier_cols[4])
{
    uint64_t s = seed;
    for (int64_t i = 0; i < K; i++) {
        uint64_t r = mix64(&s);
        float g = gauss_approx(r);
        switch (ro) {
        case ROLE_NORM: x[i] = 1.0f + 0.05f * g; break;
        case ROLE_SSM_A: x[i] = -(0.5f + 0.25f * (g < 0 ? -g : g)); break;
        case ROLE_DT_BIAS: x[i] = 0.1f * g; break;
        default: {
            float w = 0.02f * g;
            if ((mix64(&s) % 1000u) == 0)
                w *= 10.0f;
            x[i] = w;
        }
        }
    }
    if (ro == ROLE_WEIGHT)
        for (int k = 0; k < 4; k++)
            if (outlier_cols[k] < K)
                x[outlier_cols[k]] *= 8.0f;
}

static void encode_row(int type, const float *x, int64_t K, uint8_t *out)
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

static pn_status build_writer(const pn_synth_opts *o, const pn_tensor_desc *t, size_t n,
                              gguf_writer **out, pn_error *err)
{
    const pn_qwen38_config *c = &o->config;
    gguf_writer *w = gguf_writer_new();
    if (!w)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    uint32_t file_type = c->weight_type == PN_TYPE_F32 ? 0 : c->weight_type == PN_TYPE_F16 ? 1 : 32;
    int64_t heads = c->n_q / (2 * c->head_dim) > 0 ? c->n_q / (2 * c->head_dim) : 1;
    int64_t kv_heads = c->n_kv / c->head_dim > 0 ? c->n_kv / c->head_dim : 1;
    pn_status st = PN_OK;
#define SET(call) do { if (st == PN_OK) st = (call); } while (0)
    SET(gguf_writer_set_str(w, "general.architecture", "qwen35"));
    SET(gguf_writer_set_str(w, "general.name", "pn-synth Qwen3.8-shaped test model"));
    SET(gguf_writer_set_u32(w, "general.file_type", file_type));
    SET(gguf_writer_set_u32(w, "qwen35.block_count", (uint32_t)c->n_layers));
    SET(gguf_writer_set_u32(w, "qwen35.context_length", 262144));
    SET(gguf_writer_set_u32(w, "qwen35.embedding_length", (uint32_t)c->n_embd));
    SET(gguf_writer_set_u32(w, "qwen35.feed_forward_length", (uint32_t)c->n_ff));
    SET(gguf_writer_set_u32(w, "qwen35.attention.head_count", (uint32_t)heads));
    SET(gguf_writer_set_u32(w, "qwen35.attention.head_count_kv", (uint32_t)kv_heads));
    SET(gguf_writer_set_u32(w, "qwen35.attention.key_length", (uint32_t)c->head_dim));
    SET(gguf_writer_set_u32(w, "qwen35.attention.value_length", (uint32_t)c->head_dim));
    SET(gguf_writer_set_f32(w, "qwen35.attention.layer_norm_rms_epsilon", 1e-6f));
    SET(gguf_writer_set_f32(w, "qwen35.rope.freq_base", 10000000.0f));
    SET(gguf_writer_set_u32(w, "qwen35.full_attention_interval", (uint32_t)c->full_attn_interval));
    SET(gguf_writer_set_u32(w, "qwen35.ssm.conv_kernel", (uint32_t)c->conv_kernel));
    SET(gguf_writer_set_u32(w, "qwen35.ssm.state_size", (uint32_t)c->ssm_norm));
    SET(gguf_writer_set_u32(w, "qwen35.ssm.group_count", 16));
    SET(gguf_writer_set_u32(w, "qwen35.ssm.time_step_rank", (uint32_t)c->n_ssm_heads));
    SET(gguf_writer_set_u32(w, "qwen35.ssm.inner_size", (uint32_t)c->n_inner));
    SET(gguf_writer_set_u32(w, "qwen35.vocab_size", (uint32_t)c->n_vocab));
    SET(gguf_writer_set_u64(w, "pn_synth.seed", o->seed));
#undef SET
    if (st != PN_OK) {
        gguf_writer_free(w);
        return pn_error_set(err, st, "setting keys: %s", pn_strerror(st));
    }
    for (size_t i = 0; i < n && st == PN_OK; i++)
        st = gguf_writer_add_tensor(w, t[i].name, t[i].n_dims, t[i].ne, t[i].src_type, err);
    if (st != PN_OK) {
        gguf_writer_free(w);
        return st;
    }
    *out = w;
    return PN_OK;
}

pn_status pn_synth_file_bytes(const pn_synth_opts *o, uint64_t *bytes, pn_error *err)
{
    pn_tensor_desc *t = NULL;
    size_t n = 0;
    pn_status st = pn_qwen38_tensors(&o->config, &t, &n, err);
    if (st != PN_OK)
        return st;
    gguf_writer *w = NULL;
    st = build_writer(o, t, n, &w, err);
    if (st == PN_OK) {
        *bytes = gguf_writer_file_bytes(w);
        gguf_writer_free(w);
    }
    free(t);
    return st;
}

pn_status pn_synth_write(const pn_synth_opts *o, pn_error *err)
{
    pn_tensor_desc *t = NULL;
    size_t n = 0;
    pn_status st = pn_qwen38_tensors(&o->config, &t, &n, err);
    if (st != PN_OK)
        return st;
    gguf_writer *w = NULL;
    st = build_writer(o, t, n, &w, err);
    if (st != PN_OK) {
        free(t);
        return st;
    }
    const int threads = o->threads > 0 ? o->threads : omp_get_num_procs();
    const int64_t chunk_weights = (int64_t)4 << 20;
    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < n; i++)
        total += (uint64_t)(t[i].ne[0] * t[i].ne[1] * t[i].ne[2] * t[i].ne[3]);
    float *x = NULL;
    uint8_t *buf = NULL;
    gguf_writer_set_replace(w, o->force);
    st = gguf_writer_begin(w, o->path, err);
    for (size_t ti = 0; ti < n && st == PN_OK; ti++) {
        const int64_t K = t[ti].ne[0];
        const int64_t rows = t[ti].ne[1] * t[ti].ne[2] * t[ti].ne[3];
        const int type = t[ti].src_type;
        const int64_t row_bytes = pn_type_row_bytes(type, K);
        int64_t per = chunk_weights / K > 0 ? chunk_weights / K : 1;
        free(x);
        free(buf);
        x = malloc((size_t)(per * K) * sizeof(float));
        buf = malloc((size_t)(per * row_bytes));
        if (!x || !buf) {
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
            break;
        }
        role ro = role_of(t[ti].name);
        int64_t cols[4];
        uint64_t cs = row_seed(o->seed, ti, -1);
        for (int k = 0; k < 4; k++)
            cols[k] = (int64_t)(mix64(&cs) % (uint64_t)K);
        for (int64_t r0 = 0; r0 < rows && st == PN_OK; r0 += per) {
            if (o->cancel && *o->cancel) {
                st = pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
                break;
            }
            int64_t m = rows - r0 < per ? rows - r0 : per;
#pragma omp parallel for schedule(static) num_threads(threads)
            for (int64_t r = 0; r < m; r++) {
                fill_row(x + r * K, K, ro, row_seed(o->seed, ti, r0 + r), cols);
                encode_row(type, x + r * K, K, buf + r * row_bytes);
            }
            st = gguf_writer_write(w, buf, (size_t)(m * row_bytes), err);
            done += (uint64_t)(m * K);
            if (o->progress)
                o->progress(done, total, o->user);
        }
    }
    free(x);
    free(buf);
    free(t);
    if (st == PN_OK)
        st = gguf_writer_close(w, err);
    if (st == PN_OK)
        st = gguf_writer_commit(w, err);
    if (st != PN_OK)
        gguf_writer_abort(w);
    gguf_writer_free(w);
    return st;
}
