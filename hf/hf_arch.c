/* hf_arch.c - what a checkpoint of the architecture holds, as one table
 * (gguf/model_check.h's, which pn-check reads with the GGUF keys' sizes):
 * every tensor a Qwen3.5 text model has, per kind of block, with its shape
 * as the config makes it. Checked once, after the index and every header
 * are read and the names mapped, before any output is opened: each tensor
 * of the table is present (else it is named in the HF spelling and the GGUF
 * one), has the shape the config gives (else the tensor, its shape and the
 * config fields it contradicts are named), and no tensor is kept that the
 * table does not hold (the mapping drops vision and, under --no-mtp, MTP
 * tensors before this). The shapes are those llama.cpp's qwen35 loader
 * creates (src/models/qwen35.cpp, tag v0.5.0), in the checkpoint's order. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf/hf.h"
#include "hf/hf_internal.h"
#include "gguf/model_check.h"

/* The table and its dimensions are gguf/model_check.h's, shared with
 * pn-check's check of a GGUF's keys: the same facts under config names. */

static gguf_q35_sizes sizes_of(const pn_hf_config *c)
{
    return (gguf_q35_sizes){ .n_embd = c->n_embd,
                             .n_ff = c->n_ff,
                             .n_vocab = c->vocab_size,
                             .n_head = c->n_head,
                             .n_head_kv = c->n_head_kv,
                             .head_k = c->head_dim,
                             .head_v = c->head_dim,
                             .lin_nk = c->lin_nk,
                             .lin_nv = c->lin_nv,
                             .lin_hk = c->lin_hk,
                             .lin_hv = c->lin_hv,
                             .conv_kernel = c->conv_kernel };
}

/* Which trunk blocks are full attention: layer_types when given, else every
 * full_attention_interval-th block (default 4), as the converter does. */
static pn_status layer_kinds(const char *file, const json_t *hp, const pn_hf_config *c, bool *full,
                             pn_error *err)
{
    const json_t *lt = json_object_get(hp, "layer_types");
    if (json_is_array(lt)) {
        for (uint64_t i = 0; i < c->n_layer; i++) {
            const char *s = json_string_value(json_array_get(lt, i));
            if (!s || (strcmp(s, "full_attention") != 0 && strcmp(s, "linear_attention") != 0))
                return pn_error_set(err, PN_ERR_FORMAT,
                                    "%s: key layer_types: entry %llu is \"%.40s\", not "
                                    "full_attention or linear_attention",
                                    file, (unsigned long long)i, s ? s : "");
            full[i] = strcmp(s, "full_attention") == 0;
        }
        return PN_OK;
    }
    uint64_t every = 4;
    const json_t *fai = json_object_get(hp, "full_attention_interval");
    if (fai && !json_is_null(fai)) {
        if (!json_is_integer(fai) || json_integer_value(fai) < 1 || json_integer_value(fai) > 1024)
            return pn_error_set(err, PN_ERR_FORMAT,
                                "%s: key full_attention_interval is not an "
                                "integer in [1, 1024]",
                                file);
        every = (uint64_t)json_integer_value(fai);
    }
    for (uint64_t i = 0; i < c->n_layer; i++)
        full[i] = (i + 1) % every == 0;
    return PN_OK;
}

static int cmp_name(const void *a, const void *b)
{
    const pn_hf_tensor *x = *(const pn_hf_tensor *const *)a, *y = *(const pn_hf_tensor *const *)b;
    return strcmp(x->name, y->name);
}

static const pn_hf_tensor *find(const pn_hf_tensor *const *by, size_t n, const char *name,
                                size_t *at)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(by[mid]->name, name);
        if (c == 0) {
            *at = mid;
            return by[mid];
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The shape as "[a, b, c]". */
static void shape_text(char *out, size_t len, uint32_t n, const uint64_t *s)
{
    size_t o = (size_t)snprintf(out, len, "[");
    for (uint32_t d = 0; d < n && o < len; d++)
        o += (size_t)snprintf(out + o, len - o, "%s%llu", d ? ", " : "", (unsigned long long)s[d]);
    if (o < len)
        snprintf(out + o, len - o, "]");
}

/* Checks tensor t (entry e) against the config. */
static pn_status check_shape(const char *dir, const gguf_q35_tensor *e, const pn_hf_tensor *t,
                             const pn_hf_config *c, pn_error *err)
{
    uint64_t want[3];
    const gguf_q35_sizes sz = sizes_of(c);
    for (uint32_t d = 0; d < e->n_dims; d++)
        want[d] = gguf_q35_dim_value(e->shape[d], &sz);
    bool ok = t->src_n_dims == e->n_dims;
    for (uint32_t d = 0; ok && d < e->n_dims; d++)
        ok = t->src_shape[d] == want[d];
    if (ok)
        return PN_OK;
    char got_s[160], want_s[160], fields[512];
    shape_text(got_s, sizeof got_s, t->src_n_dims, t->src_shape);
    shape_text(want_s, sizeof want_s, e->n_dims, want);
    size_t o = 0;
    fields[0] = '\0';
    for (uint32_t d = 0; d < e->n_dims && o < sizeof fields; d++)
        if (d >= t->src_n_dims || t->src_shape[d] != want[d])
            o += (size_t)snprintf(fields + o, sizeof fields - o, "%sdimension %u: %s",
                                  o ? "; " : "", d, gguf_q35_dim_config(e->shape[d]));
    if (!fields[0])
        snprintf(fields, sizeof fields, "the number of dimensions");
    return pn_error_set(err, PN_ERR_TENSOR,
                        "%s: tensor %s (%s) has shape %s, but config.json makes it %s (%s)", dir,
                        t->src_name, t->name, got_s, want_s, fields);
}

pn_status pn_hf_check_arch(const char *dir, const json_t *hp, const pn_hf_config *c, bool no_mtp,
                           const pn_hf_tensor *tensors, size_t n, pn_error *err)
{
    char file[4096];
    snprintf(file, sizeof file, "%s/config.json", dir);
    bool *full = calloc(c->n_layer ? c->n_layer : 1, sizeof *full);
    const pn_hf_tensor **by = calloc(n ? n : 1, sizeof *by);
    bool *seen = calloc(n ? n : 1, sizeof *seen);
    pn_status st = full && by && seen ? PN_OK : pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    if (st == PN_OK)
        st = layer_kinds(file, hp, c, full, err);
    /* the HF spelling of the trunk's names: the prefix before "layers." of
     * a tensor that has one, else the converter's usual one */
    char prefix[128] = "model.language_model.";
    if (strcmp(c->arch, "Qwen3_5ForCausalLM") == 0)
        snprintf(prefix, sizeof prefix, "model.");
    for (size_t i = 0; i < n; i++) {
        by[i] = &tensors[i];
        const char *l = strstr(tensors[i].src_name, "layers.");
        if (l && strncmp(tensors[i].src_name, "mtp.", 4) != 0 &&
            (size_t)(l - tensors[i].src_name) < sizeof prefix)
            snprintf(prefix, sizeof prefix, "%.*s", (int)(l - tensors[i].src_name),
                     tensors[i].src_name);
    }
    if (st == PN_OK)
        qsort(by, n, sizeof *by, cmp_name);
    const json_t *tie = json_object_get(hp, "tie_word_embeddings");
    const uint64_t n_mtp = no_mtp ? 0 : c->n_mtp;
    for (uint64_t b = 0; st == PN_OK && b <= c->n_layer + n_mtp; b++) {
        const bool last = b == c->n_layer + n_mtp; /* the model's own tensors */
        const bool mtp = !last && b >= c->n_layer;
        for (size_t k = 0; st == PN_OK && k < gguf_q35_n_tensors; k++) {
            const gguf_q35_tensor *e = &gguf_q35_tensors[k];
            bool here = last                          ? e->at == GGUF_Q35_MODEL
                        : e->at == GGUF_Q35_BLOCK     ? true
                        : e->at == GGUF_Q35_LINEAR    ? !mtp && !full[b]
                        : e->at == GGUF_Q35_FULL      ? mtp || full[b]
                        : e->at == GGUF_Q35_MTP_FIRST ? mtp && b == c->n_layer
                                                      : false;
            if (!here)
                continue;
            char gname[128], hname[320];
            if (last) {
                snprintf(gname, sizeof gname, "%s", e->gguf);
                if (strcmp(e->hf, "lm_head.weight") == 0)
                    snprintf(hname, sizeof hname, "%s", e->hf);
                else
                    snprintf(hname, sizeof hname, "%s%s", prefix, e->hf);
            } else {
                snprintf(gname, sizeof gname, "blk.%llu.%s", (unsigned long long)b, e->gguf);
                if (e->at == GGUF_Q35_MTP_FIRST)
                    snprintf(hname, sizeof hname, "mtp.%s", e->hf);
                else if (mtp)
                    snprintf(hname, sizeof hname, "mtp.layers.%llu.%s",
                             (unsigned long long)(b - c->n_layer), e->hf);
                else
                    snprintf(hname, sizeof hname, "%slayers.%llu.%s", prefix, (unsigned long long)b,
                             e->hf);
            }
            size_t at = 0;
            const pn_hf_tensor *t = find(by, n, gname, &at);
            if (!t) {
                if (last && strcmp(e->gguf, "output.weight") == 0 && json_is_true(tie))
                    continue; /* tied: the output is the embedding */
                st = pn_error_set(err, PN_ERR_TENSOR,
                                  "%s: tensor %s (%s) is missing: config.json describes a "
                                  "checkpoint that has it (%s%s)%s",
                                  dir, hname, gname,
                                  last      ? "every qwen35 model"
                                  : mtp     ? "MTP layer, mtp_num_hidden_layers"
                                  : full[b] ? "a full_attention layer"
                                            : "a linear_attention layer",
                                  last || mtp ? "" : " per layer_types",
                                  mtp ? "; give --no-mtp to convert without the MTP layer" : "");
                break;
            }
            seen[at] = true;
            st = check_shape(dir, e, t, c, err);
        }
    }
    for (size_t i = 0; st == PN_OK && i < n; i++)
        if (!seen[i]) {
            const char *blk = strncmp(by[i]->name, "blk.", 4) == 0 ? by[i]->name + 4 : NULL;
            char *end = NULL;
            unsigned long long b = blk ? strtoull(blk, &end, 10) : 0;
            const char *kind = !blk || b >= c->n_layer + n_mtp ? NULL
                               : b >= c->n_layer               ? "an MTP layer"
                               : full[b]                       ? "a full_attention layer"
                                                               : "a linear_attention layer";
            if (kind)
                st = pn_error_set(err, PN_ERR_TENSOR,
                                  "%s: tensor %s (%s) is not one a qwen35 checkpoint has in %s "
                                  "(block %llu)",
                                  dir, by[i]->src_name, by[i]->name, kind, b);
            else
                st = pn_error_set(err, PN_ERR_TENSOR,
                                  "%s: tensor %s (%s) is not one a qwen35 checkpoint has", dir,
                                  by[i]->src_name, by[i]->name);
        }
    free(full);
    free(by);
    free(seen);
    return st;
}
