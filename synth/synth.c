/* synth.c - pn-synth's GGUF form: the writer, its keys and the generated
 * tensors streamed into it (see synth.h). */
#include "synth/synth.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "io/outset.h"
#include "quant/fp16.h"
#include "quant/types.h"
#include "synth/synth_internal.h"

pn_qwen38_config pn_synth_default_config(void)
{
    pn_qwen38_config c = pn_qwen38_config_narrow(4, 6, 8192);
    c.weight_type = PN_TYPE_BF16;
    return c;
}

static pn_status build_writer(const pn_synth_opts *o, const pn_tensor_desc *t, size_t n,
                              gguf_writer **out, pn_error *err)
{
    const pn_qwen38_config *c = &o->config;
    pn_qwen38_hparams h;
    pn_status st = pn_qwen38_llama_hparams(c, &h, err);
    if (st != PN_OK)
        return st;
    if (c->n_vocab > UINT32_MAX - 1)
        return pn_error_set(err, PN_ERR_USAGE, "vocabulary of %lld tokens: at most %u",
                            (long long)c->n_vocab, UINT32_MAX - 1);
    synth_vocab v;
    st = synth_vocab_build((uint64_t)c->n_vocab, &v, err);
    if (st != PN_OK)
        return st;
    gguf_writer *w = gguf_writer_new();
    if (!w) {
        synth_vocab_free(&v);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    uint32_t file_type = c->weight_type == PN_TYPE_F32 ? 0 : c->weight_type == PN_TYPE_F16 ? 1 : 32;
#define SET(call)                                                                                  \
    do {                                                                                           \
        if (st == PN_OK)                                                                           \
            st = (call);                                                                           \
    } while (0)
    gguf_writer_set_header_hash(w, !o->no_header_hash); /* docs/format.md#the-header-hash */
    SET(gguf_writer_set_str(w, "general.architecture", "qwen35"));
    SET(gguf_writer_set_str(w, "general.name", "pn-synth Qwen3.8-shaped test model"));
    SET(gguf_writer_set_u32(w, "general.file_type", file_type));
    SET(gguf_writer_set_u32(w, "qwen35.block_count", (uint32_t)(c->n_layers + c->n_mtp)));
    if (c->n_mtp)
        SET(gguf_writer_set_u32(w, "qwen35.nextn_predict_layers", (uint32_t)c->n_mtp));
    SET(gguf_writer_set_u32(w, "qwen35.context_length", 262144));
    SET(gguf_writer_set_u32(w, "qwen35.embedding_length", (uint32_t)c->n_embd));
    SET(gguf_writer_set_u32(w, "qwen35.feed_forward_length", (uint32_t)c->n_ff));
    SET(gguf_writer_set_u32(w, "qwen35.attention.head_count", (uint32_t)h.n_head));
    SET(gguf_writer_set_u32(w, "qwen35.attention.head_count_kv", (uint32_t)h.n_head_kv));
    SET(gguf_writer_set_u32(w, "qwen35.attention.key_length", (uint32_t)h.head_dim));
    SET(gguf_writer_set_u32(w, "qwen35.attention.value_length", (uint32_t)h.head_dim));
    SET(gguf_writer_set_f32(w, "qwen35.attention.layer_norm_rms_epsilon", 1e-6f));
    SET(gguf_writer_set_f32(w, "qwen35.rope.freq_base", 10000000.0f));
    SET(gguf_writer_set_u32(w, "qwen35.rope.dimension_count", (uint32_t)h.rope_dims));
    SET(gguf_writer_set_arr(w, "qwen35.rope.dimension_sections", GGUF_TYPE_INT32, h.rope_sections,
                            4));
    SET(gguf_writer_set_u32(w, "qwen35.full_attention_interval", (uint32_t)c->full_attn_interval));
    SET(gguf_writer_set_u32(w, "qwen35.ssm.conv_kernel", (uint32_t)h.conv_kernel));
    SET(gguf_writer_set_u32(w, "qwen35.ssm.state_size", (uint32_t)h.ssm_state));
    SET(gguf_writer_set_u32(w, "qwen35.ssm.group_count", (uint32_t)h.ssm_groups));
    SET(gguf_writer_set_u32(w, "qwen35.ssm.time_step_rank", (uint32_t)h.ssm_v_heads));
    SET(gguf_writer_set_u32(w, "qwen35.ssm.inner_size", (uint32_t)h.ssm_inner));
    SET(gguf_writer_set_u32(w, "qwen35.vocab_size", (uint32_t)c->n_vocab));
    SET(gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"));
    SET(gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2"));
    SET(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tokens,
                                v.n_tokens));
    SET(gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v.types, v.n_tokens));
    SET(gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merges,
                                v.n_merges));
    SET(gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", v.bos));
    SET(gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", v.eos));
    SET(gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", v.pad));
    SET(gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false));
    SET(gguf_writer_set_u64(w, "pn_synth.seed", o->seed));
#undef SET
    synth_vocab_free(&v);
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

/* The model writer and the files it is written as. */
static pn_status build_output(const pn_synth_opts *o, const pn_tensor_desc *t, size_t n,
                              gguf_writer **w, pn_outset **os, pn_error *err)
{
    *os = NULL;
    pn_status st = build_writer(o, t, n, w, err);
    if (st != PN_OK)
        return st;
    pn_outset_opts oo;
    pn_outset_opts_init(&oo);
    oo.limit = o->split;
    oo.force = o->force;
    st = pn_outset_make(*w, o->path, &oo, os, err);
    if (st != PN_OK) {
        gguf_writer_free(*w);
        *w = NULL;
    }
    return st;
}

pn_status pn_synth_files(const pn_synth_opts *o, uint64_t *bytes, size_t *n_splits, pn_error *err)
{
    pn_tensor_desc *t = NULL;
    size_t n = 0;
    pn_status st = pn_qwen38_tensors(&o->config, &t, &n, err);
    if (st != PN_OK)
        return st;
    gguf_writer *w = NULL;
    pn_outset *os = NULL;
    st = build_output(o, t, n, &w, &os, err);
    if (st == PN_OK) {
        *bytes = pn_outset_total_bytes(os);
        if (n_splits)
            *n_splits = pn_outset_n_splits(os);
        pn_outset_free(os);
        gguf_writer_free(w);
    }
    free(t);
    return st;
}

pn_status pn_synth_write(const pn_synth_opts *o, pn_error *err)
{
    synth_plan p;
    pn_status st = synth_plan_make(&o->config, o->profile, false, &p, err);
    if (st != PN_OK)
        return st;
    const pn_tensor_desc *t = p.g;
    const size_t n = p.n_gguf;
    gguf_writer *w = NULL;
    pn_outset *os = NULL;
    st = build_output(o, t, n, &w, &os, err);
    if (st != PN_OK) {
        synth_plan_free(&p);
        return st;
    }
    const int threads = o->threads > 0 ? o->threads : omp_get_num_procs();
    const int64_t chunk_weights = (int64_t)4 << 20;
    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < n; i++)
        total += (uint64_t)(t[i].ne[0] * t[i].ne[1] * t[i].ne[2] * t[i].ne[3]);
    float *x = NULL;
    uint8_t *buf = NULL;
    st = pn_outset_check_targets(os, NULL, err);
    if (st == PN_OK)
        st = pn_outset_begin(os, err);
    for (size_t ti = 0; ti < n && st == PN_OK; ti++) {
        const synth_tensor *sp = &p.t[ti];
        const int64_t K = sp->row_len;
        const int64_t rows = sp->n_rows;
        const int64_t row_bytes = pn_type_row_bytes(t[ti].src_type, K);
        int64_t per = chunk_weights / K > 0 ? chunk_weights / K : 1;
        if (per > rows)
            per = rows;
        free(x);
        free(buf);
        x = malloc((size_t)(2 * per * K) * sizeof(float));
        buf = malloc((size_t)(per * row_bytes));
        if (!x || !buf) {
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
            break;
        }
        int64_t cols[4];
        synth_outlier_cols(o->seed, ti, K, cols);
        for (int64_t r0 = 0; r0 < rows && st == PN_OK; r0 += per) {
            if (o->cancel && *o->cancel) {
                st = pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
                break;
            }
            int64_t m = rows - r0 < per ? rows - r0 : per;
#pragma omp parallel for schedule(static) num_threads(threads)
            for (int64_t r = 0; r < m; r++)
                synth_gguf_row(sp, ti, o->seed, cols, r0 + r, x + 2 * r * K, x + (2 * r + 1) * K,
                               buf + r * row_bytes);
            st = pn_outset_write(os, ti, buf, (size_t)(m * row_bytes), err);
            done += (uint64_t)(m * K);
            if (o->progress)
                o->progress(done, total, o->user);
        }
    }
    free(x);
    free(buf);
    synth_plan_free(&p);
    if (st == PN_OK)
        st = pn_outset_close(os, err);
    if (st == PN_OK)
        st = pn_outset_commit(os, err);
    pn_outset_free(os); /* aborts what is not committed */
    gguf_writer_free(w);
    return st;
}
