#include "pipeline/measure.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hadamard/hadamard.h"
#include "pipeline/tensor_job.h"
#include "quant/types.h"
#include "quant/widen.h"

static void source_identity(const gguf_reader *src, char *buf, size_t size)
{
    size_t n = gguf_reader_n_tensors(src);
    pn_tensor_desc *d = calloc(n ? n : 1, sizeof *d);
    if (!d) {
        snprintf(buf, size, "unknown");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(src, i);
        d[i].name = t->name;
        d[i].n_dims = t->n_dims;
        memcpy(d[i].ne, t->ne, sizeof d[i].ne);
        d[i].src_type = t->type;
    }
    pn_source_identity(d, n, gguf_reader_file_size(src), buf, size);
    free(d);
}

/* Measures one candidate: its sampled rows, widened and rotated as they will
 * be stored, row sums in parallel, added in row order. */
static pn_status measure_tensor(const gguf_reader *src, size_t ti, const pn_plan_tensor *t,
                                int64_t max_rows, int threads, double *e3, double *e4,
                                pn_error *err)
{
    const gguf_tensor_info *info = gguf_reader_tensor(src, ti);
    const int64_t K = info->ne[0];
    const int64_t src_row = pn_type_row_bytes(info->type, K);
    int64_t cap = t->rows < max_rows ? t->rows : max_rows;
    int64_t *rows = malloc((size_t)cap * sizeof *rows);
    float *x = malloc((size_t)(cap * K) * sizeof(float));
    double *sums = malloc((size_t)cap * 3 * sizeof(double));
    size_t scratch_bytes = pn_measure_scratch_bytes(K);
    uint8_t *scratch = malloc(scratch_bytes * (size_t)threads);
    int *status = malloc((size_t)cap * sizeof *status);
    uint8_t *raw = malloc((size_t)src_row);
    pn_status st = PN_OK;
    if (!rows || !x || !sums || !scratch || !status || !raw) {
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory measuring %s", t->name);
        goto done;
    }
    int64_t n = pn_sample_rows(t->rows, max_rows, rows);
    for (int64_t i = 0; i < n; i++) {
        uint64_t at = (uint64_t)(rows[i] * src_row);
        st = gguf_reader_read_tensor(src, ti, at, raw, (size_t)src_row, err);
        if (st != PN_OK)
            goto done;
        pn_widen_row(info->type, raw, x + i * K, K);
        int64_t col = pn_find_nonfinite(x + i * K, K);
        if (col >= 0) {
            st = pn_error_set(err, PN_ERR_NONFINITE,
                              "tensor %s, row %lld, column %lld: NaN or infinite weight",
                              t->name, (long long)rows[i], (long long)col);
            goto done;
        }
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t i = 0; i < n; i++) {
        float *row = x + i * K;
        if (t->rotation_block > 1)
            pn_hadamard_rotate_row(row, K, t->rotation_block);
        status[i] = pn_measure_row(row, K, scratch + scratch_bytes * (size_t)omp_get_thread_num(),
                                   &sums[3 * i], &sums[3 * i + 1], &sums[3 * i + 2], NULL);
    }
    pn_measure_acc acc = {0};
    for (int64_t i = 0; i < n; i++) {
        if (status[i] != PN_OK) {
            st = pn_error_set(err, (pn_status)status[i], "tensor %s, row %lld: %s", t->name,
                              (long long)rows[i], pn_strerror((pn_status)status[i]));
            goto done;
        }
        pn_measure_acc_add(&acc, sums[3 * i], sums[3 * i + 1], sums[3 * i + 2]);
    }
    pn_measure_acc_result(&acc, e3, e4);
done:
    free(rows);
    free(x);
    free(sums);
    free(scratch);
    free(status);
    free(raw);
    return st;
}

static pn_status measure_all(const pn_quantize_opts *o, const gguf_reader *src,
                             const pn_plan *plan, int threads, const char *identity,
                             pn_measurement **out, pn_error *err)
{
    int64_t max_rows = o->measure_rows ? (int64_t)o->measure_rows : PN_SAMPLE_ROWS_DEFAULT;
    pn_measurement *m = NULL;
    pn_status st = pn_measurement_new(plan, identity, max_rows, &m, err);
    if (st != PN_OK)
        return st;
    double t0 = pn_now_seconds();
    uint64_t done = 0, total = 0;
    for (size_t i = 0; i < plan->n_tensors; i++)
        if (plan->tensors[i].candidate)
            total += (uint64_t)plan->tensors[i].n_weights;
    for (size_t i = 0; i < plan->n_tensors && st == PN_OK; i++) {
        const pn_plan_tensor *t = &plan->tensors[i];
        if (!t->candidate)
            continue;
        if (o->cancel && *o->cancel) {
            st = pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
            break;
        }
        long e = pn_measurement_find(m, t->name);
        if (e < 0) {
            st = pn_error_set(err, PN_ERR_INTERNAL, "no measurement entry for %s", t->name);
            break;
        }
        st = measure_tensor(src, i, t, max_rows, threads, &m->entries[e].e3, &m->entries[e].e4,
                            err);
        done += (uint64_t)t->n_weights;
        if (o->progress) {
            pn_progress p = {PN_PHASE_MEASURE, i, plan->n_tensors, t->name, done, total,
                             pn_now_seconds() - t0};
            o->progress(&p, o->user);
        }
    }
    if (st != PN_OK) {
        pn_error_prefix(err, "%s: measuring promotions", o->src_path);
        pn_measurement_free(m);
        return st;
    }
    *out = m;
    return PN_OK;
}

pn_status pn_job_measure_obtain(const pn_quantize_opts *o, const gguf_reader *src,
                                const pn_plan *plan, int threads, pn_measurement **out,
                                pn_error *err)
{
    *out = NULL;
    char identity[PN_MEASURE_IDENTITY_MAX];
    source_identity(src, identity, sizeof identity);
    struct stat sb;
    const char *path = o->measurement_path;
    char msg[1024];
    pn_status st;
    if (path && stat(path, &sb) == 0) {
        st = pn_measurement_load(path, identity, out, err);
        if (st == PN_OK && o->note) {
            snprintf(msg, sizeof msg, "promotion measurement read from %s (%zu candidates)",
                     path, (*out)->n);
            o->note(msg, o->user);
        }
        return st;
    }
    st = measure_all(o, src, plan, threads, identity, out, err);
    if (st == PN_OK && path) {
        st = pn_measurement_save(*out, path, err);
        if (st == PN_OK && o->note) {
            snprintf(msg, sizeof msg, "promotion measurement saved to %s", path);
            o->note(msg, o->user);
        }
    }
    if (st != PN_OK) {
        pn_measurement_free(*out);
        *out = NULL;
    }
    return st;
}
