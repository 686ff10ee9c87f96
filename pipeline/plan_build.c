#include "pipeline/plan_build.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/file.h"
#include "mix/promote.h"
#include "pipeline/measure.h"
#include "pipeline/tensor_job.h"
#include "quant/types.h"

#define PN_QUANTIZER_NAME "pn-quantize " PN_VERSION

void pn_job_plan_free(pn_job_plan *p)
{
    if (!p)
        return;
    pn_plan_free(p->plan);
    pn_recipe_free(p->recipe);
    free(p->rel_error);
    free(p->seconds);
    free(p);
}

static pn_status load_recipe(const pn_quantize_opts *o, pn_recipe **out, pn_error *err)
{
    if (o->recipe_path)
        return pn_recipe_load(o->recipe_path, out, err);
    char source[128];
    snprintf(source, sizeof source, "built-in recipe %s", pn_default_recipe_name);
    return pn_recipe_parse(pn_default_recipe_text, strlen(pn_default_recipe_text), source, out,
                           err);
}

/* Reads a promote list: one tensor name per line; blank lines and lines
 * starting with '#' are skipped, surrounding blanks trimmed. */
#define PN_PROMOTE_LIST_MAX_BYTES ((size_t)64 << 20)
static pn_status read_name_list(const char *path, char ***names_out, size_t *n_out,
                                pn_error *err)
{
    char *text = NULL;
    size_t len = 0;
    pn_status st =
        pn_read_small_file(path, PN_PROMOTE_LIST_MAX_BYTES, "promote list", &text, &len, err);
    if (st != PN_OK)
        return st;
    if (memchr(text, '\0', len)) {
        free(text);
        return pn_error_set(err, PN_ERR_FORMAT, "%s: the promote list holds a NUL byte", path);
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (char *line = text; st == PN_OK && line < text + len;) {
        char *nl = memchr(line, '\n', (size_t)(text + len - line));
        char *s = line, *e = nl ? nl : text + len;
        line = nl ? nl + 1 : text + len;
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        while (e > s && (e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (e == s || *s == '#')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn) {
                st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
                break;
            }
            names = nn;
        }
        names[n] = strndup(s, (size_t)(e - s));
        if (!names[n]) {
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
            break;
        }
        n++;
    }
    free(text);
    if (st != PN_OK) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        return st;
    }
    *names_out = names;
    *n_out = n;
    return PN_OK;
}

/* Exact output file size for the plan's current promotions. */
static pn_status measure_file_size(pn_job_plan *p, const gguf_reader *src, pn_error *err)
{
    gguf_writer *w = NULL;
    pn_status st = pn_job_plan_writer(p, src, &w, err);
    if (st != PN_OK)
        return st;
    p->alignment = gguf_writer_alignment(w);
    p->header_bytes = gguf_writer_data_offset(w);
    p->file_bytes = gguf_writer_file_bytes(w);
    pn_plan_mix_label(p->plan, p->mix_label, sizeof p->mix_label);
    gguf_writer_free(w);
    return PN_OK;
}

/* The header size for a plan's current promotions, for the size search. */
typedef struct header_ctx {
    pn_job_plan *p;
    const gguf_reader *src;
} header_ctx;

static pn_status header_bytes_cb(const pn_plan *plan, void *ctx, uint64_t *bytes, pn_error *err)
{
    (void)plan;
    header_ctx *h = ctx;
    pn_status st = measure_file_size(h->p, h->src, err);
    *bytes = h->p->header_bytes;
    return st;
}

pn_status pn_job_plan_make(const pn_quantize_opts *o, gguf_reader *src, int threads,
                           pn_job_plan **out, pn_quantize_stats *stats, pn_error *err)
{
    *out = NULL;
    pn_job_plan *p = calloc(1, sizeof *p);
    if (!p)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    pn_status st = load_recipe(o, &p->recipe, err);
    if (st != PN_OK)
        goto fail;
    if (o->rotation_cap == 0) {
        p->recipe->rotation = PN_ROTATION_NONE;
        p->recipe->rotation_cap = 0;
    } else if (o->rotation_cap > 0) {
        p->recipe->rotation = PN_ROTATION_HADAMARD;
        p->recipe->rotation_cap = o->rotation_cap;
    }

    size_t n = gguf_reader_n_tensors(src);
    pn_tensor_desc *descs = calloc(n ? n : 1, sizeof *descs);
    if (!descs) {
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor_info *ti = gguf_reader_tensor(src, i);
        descs[i].name = ti->name;
        descs[i].n_dims = ti->n_dims;
        memcpy(descs[i].ne, ti->ne, sizeof descs[i].ne);
        descs[i].src_type = ti->type;
    }
    char *details = NULL;
    st = pn_plan_build(p->recipe, descs, n, &p->plan, &details, err);
    free(descs);
    if (st == PN_ERR_UNMATCHED && details && o->note) {
        size_t len = strlen(details) + 64;
        char *msg = malloc(len);
        if (msg) {
            snprintf(msg, len, "tensors that no rule of the recipe matches:\n%s", details);
            o->note(msg, o->user);
            free(msg);
        }
    }
    free(details);
    if (st != PN_OK) {
        pn_error_prefix(err, "%s", o->src_path);
        goto fail;
    }
    p->n = p->plan->n_tensors;
    p->t = p->plan->tensors;
    p->rel_error = calloc(p->n ? p->n : 1, sizeof *p->rel_error);
    p->seconds = calloc(p->n ? p->n : 1, sizeof *p->seconds);
    if (!p->rel_error || !p->seconds) {
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < p->n; i++)
        p->weights += (uint64_t)p->t[i].n_weights;

    st = measure_file_size(p, src, err); /* the alignment, and the size with no promotion */
    if (st != PN_OK)
        goto fail;

    /* promotions */
    if (o->promote_list_path) {
        char **names = NULL;
        size_t nn = 0;
        st = read_name_list(o->promote_list_path, &names, &nn, err);
        if (st != PN_OK)
            goto fail;
        st = pn_plan_promote_by_names(p->plan, (const char *const *)names, nn, err);
        for (size_t i = 0; i < nn; i++)
            free(names[i]);
        free(names);
        if (st != PN_OK) {
            pn_error_prefix(err, "%s", o->promote_list_path);
            goto fail;
        }
    } else {
        int64_t want = o->promote >= 0 ? o->promote : p->recipe->promote;
        if (want > 0 || o->target_size) {
            if (!o->target_size && o->promote < 0 && (size_t)want > p->plan->n_candidates) {
                /* the recipe's default is for the full model; a smaller one
                 * gets every candidate it has, and is told so */
                if (o->note) {
                    char msg[256];
                    snprintf(msg, sizeof msg,
                             "the recipe promotes %" PRId64 " tensors but this model has %zu "
                             "candidates: promoting all %zu",
                             want, p->plan->n_candidates, p->plan->n_candidates);
                    o->note(msg, o->user);
                }
                want = (int64_t)p->plan->n_candidates;
            }
            if (!o->target_size && (size_t)want > p->plan->n_candidates) {
                st = pn_error_set(err, PN_ERR_USAGE,
                                  "%" PRId64 " promotions asked for, but %s has only %zu pn3t "
                                  "tensors that pn4t can hold",
                                  want, o->src_path, p->plan->n_candidates);
                goto fail;
            }
            pn_measurement *m = NULL;
            double t0 = pn_now_seconds();
            st = pn_job_measure_obtain(o, src, p->plan, threads, &m, err);
            stats->t_measure += pn_now_seconds() - t0;
            if (st != PN_OK)
                goto fail;
            size_t n_promote = (size_t)want;
            if (o->target_size) {
                header_ctx hc = {p, src};
                st = pn_plan_choose_n_for_size(p->plan, m, header_bytes_cb, &hc,
                                               p->alignment, o->target_size, &n_promote, NULL,
                                               err);
                if (st == PN_OK)
                    st = measure_file_size(p, src, err);
                if (st == PN_OK && o->note) {
                    char msg[256];
                    snprintf(msg, sizeof msg,
                             "--target-size: %zu promotions fit; the file is %" PRIu64
                             " bytes (%.3f GiB)",
                             n_promote, p->file_bytes, (double)p->file_bytes / 1073741824.0);
                    o->note(msg, o->user);
                }
            } else {
                st = pn_plan_promote_top(p->plan, m, n_promote, err);
            }
            pn_measurement_free(m);
            if (st != PN_OK)
                goto fail;
        }
    }
    st = measure_file_size(p, src, err);
    if (st != PN_OK)
        goto fail;
    *out = p;
    return PN_OK;
fail:
    pn_job_plan_free(p);
    return st;
}

pn_status pn_job_plan_writer(const pn_job_plan *p, const gguf_reader *src, gguf_writer **out,
                             pn_error *err)
{
    *out = NULL;
    gguf_writer *w = gguf_writer_new();
    if (!w)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    pn_status st = PN_OK;
    for (size_t i = 0; i < gguf_reader_n_kv(src) && st == PN_OK; i++) {
        const gguf_kv *kv = gguf_reader_kv(src, i);
        if (gguf_str_eq(kv->key, "general.file_type"))
            continue;
        st = gguf_writer_copy_kv(w, kv);
    }
    if (st != PN_OK) {
        pn_error_set(err, st, "copying the source's keys: %s", pn_strerror(st));
        goto fail;
    }
    const pn_plan *plan = p->plan;
    char label[96];
    pn_plan_mix_label(plan, label, sizeof label);
    const char **promoted = calloc(plan->n_promoted ? plan->n_promoted : 1, sizeof *promoted);
    uint32_t *zeros = calloc(p->n ? p->n : 1, sizeof *zeros);
    if (!promoted || !zeros) {
        free(promoted);
        free(zeros);
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    size_t np = pn_plan_promoted_names(plan, promoted, plan->n_promoted);
    if (st == PN_OK) st = gguf_writer_set_u32(w, "general.quantization_version", 2);
    if (st == PN_OK && plan->has_file_type)
        st = gguf_writer_set_u32(w, "general.file_type", plan->file_type);
    if (st == PN_OK) st = gguf_writer_set_str(w, "pn.format", "PNX-FORMAT-v0");
    if (st == PN_OK) st = gguf_writer_set_str(w, "pn.mix", label);
    if (st == PN_OK) st = gguf_writer_set_arr_str(w, "pn.mix.promoted", promoted, np);
    if (plan->rotation == PN_ROTATION_HADAMARD) {
        if (st == PN_OK) st = gguf_writer_set_str(w, "pn.rotation.type", "hadamard");
        if (st == PN_OK)
            st = gguf_writer_set_u32(w, "pn.rotation.block_size", (uint32_t)plan->rotation_cap);
    } else {
        if (st == PN_OK) st = gguf_writer_set_str(w, "pn.rotation.type", "none");
        gguf_writer_remove_kv(w, "pn.rotation.block_size");
    }
    if (st == PN_OK)
        st = gguf_writer_set_arr(w, "pn.tensor_crc32", GGUF_TYPE_UINT32, zeros, p->n);
    if (st == PN_OK) st = gguf_writer_set_str(w, "pn.quantizer", PN_QUANTIZER_NAME);
    free(promoted);
    free(zeros);
    if (st != PN_OK) {
        pn_error_set(err, st, "setting the output's keys: %s", pn_strerror(st));
        goto fail;
    }
    for (size_t i = 0; i < p->n && st == PN_OK; i++)
        st = gguf_writer_add_tensor(w, p->t[i].name, p->t[i].n_dims, p->t[i].ne, p->t[i].type,
                                    err);
    if (st != PN_OK)
        goto fail;
    *out = w;
    return PN_OK;
fail:
    gguf_writer_free(w);
    return st;
}
