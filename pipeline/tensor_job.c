#include "pipeline/tensor_job.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "hadamard/hadamard.h"
#include "quant/kquants.h"
#include "quant/pn.h"
#include "quant/pn_fast.h"
#include "quant/quant_row.h"
#include "quant/types.h"
#include "quant/widen.h"

double pn_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void pn_release_mapped(const uint8_t *p, uint64_t n)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t b = ((uintptr_t)p + n) & ~((uintptr_t)page - 1);
    if (b > a)
        madvise((void *)a, b - a, MADV_DONTNEED);
}

pn_status pn_row_chunk_init(pn_row_chunk *c, int64_t K, int64_t chunk_weights, int threads)
{
    memset(c, 0, sizeof *c);
    if (K < 1 || threads < 1)
        return PN_ERR_USAGE;
    c->K = K;
    c->threads = threads;
    c->max_rows = chunk_weights / K;
    if (c->max_rows < 1)
        c->max_rows = 1;
    c->rows = malloc((size_t)(c->max_rows * K) * sizeof(float));
    c->row_err = malloc((size_t)c->max_rows * sizeof(double));
    c->row_norm = malloc((size_t)c->max_rows * sizeof(double));
    c->bad_col = malloc((size_t)c->max_rows * sizeof(int64_t));
    c->row_status = malloc((size_t)c->max_rows * sizeof(int));
    c->scratch = malloc((size_t)(threads * K) * sizeof(float));
    if (!c->rows || !c->row_err || !c->row_norm || !c->bad_col || !c->row_status || !c->scratch) {
        pn_row_chunk_free(c);
        return PN_ERR_NOMEM;
    }
    return PN_OK;
}

void pn_row_chunk_free(pn_row_chunk *c)
{
    free(c->rows);
    free(c->row_err);
    free(c->row_norm);
    free(c->bad_col);
    free(c->row_status);
    free(c->scratch);
    memset(c, 0, sizeof *c);
}

pn_status pn_chunk_widen(pn_row_chunk *c, int src_type, const uint8_t *src, int64_t n,
                         int64_t *bad_row, int64_t *bad_col, pn_phase_times *t)
{
    const int64_t K = c->K;
    const int64_t src_row = pn_type_row_bytes(src_type, K);
    double t0 = pn_now_seconds();
    int type_ok = 1;
#pragma omp parallel for schedule(static) num_threads(c->threads)
    for (int64_t r = 0; r < n; r++) {
        if (pn_widen_row(src_type, src + r * src_row, c->rows + r * K, K) != PN_OK)
            type_ok = 0;
        c->bad_col[r] = pn_find_nonfinite(c->rows + r * K, K);
    }
    if (t)
        t->read += pn_now_seconds() - t0;
    if (!type_ok)
        return PN_ERR_TYPE;
    for (int64_t r = 0; r < n; r++) {
        if (c->bad_col[r] >= 0) {
            *bad_row = r;
            *bad_col = c->bad_col[r];
            return PN_ERR_NONFINITE;
        }
    }
    return PN_OK;
}

void pn_chunk_rotate(pn_row_chunk *c, int64_t n, int B, pn_phase_times *t)
{
    const int64_t K = c->K;
    double t0 = pn_now_seconds();
#pragma omp parallel for schedule(static) num_threads(c->threads)
    for (int64_t r = 0; r < n; r++)
        pn_hadamard_rotate_row(c->rows + r * K, K, B);
    if (t)
        t->rotate += pn_now_seconds() - t0;
}

/* Thin wrappers over quant/quant_row.h, kept until the pipeline calls it
 * with its own path and sums. */
pn_status pn_quantize_row_any(int type, const float *x, int64_t n, uint8_t *out,
                              int64_t *bad_col)
{
    return pn_quantize_row_sums(type, pn_cpu_path_best(), x, n, out, bad_col, NULL, NULL);
}

void pn_dequantize_row_any(int type, const uint8_t *in, float *y, int64_t n)
{
    pn_dequantize_row_type(type, in, y, n);
}

void pn_chunk_error(pn_row_chunk *c, int type, int64_t n, const uint8_t *blocks,
                    double *err_num, double *err_den, pn_phase_times *t)
{
    const int64_t K = c->K;
    double t0 = pn_now_seconds();
    const int64_t out_row = pn_type_row_bytes(type, K);
#pragma omp parallel for schedule(static) num_threads(c->threads)
    for (int64_t r = 0; r < n; r++) {
        const float *x = c->rows + r * K;
        float *y = c->scratch + (int64_t)omp_get_thread_num() * K;
        pn_dequantize_row_any(type, blocks + r * out_row, y, K);
        /* four interleaved partial sums, combined in a fixed order: the
         * report's figure is the same on every run and thread count, and
         * the loop is not one long dependency chain */
        double num[4] = {0, 0, 0, 0}, den[4] = {0, 0, 0, 0};
        int64_t i = 0;
        for (; i + 4 <= K; i += 4)
            for (int l = 0; l < 4; l++) {
                double d = (double)x[i + l] - (double)y[i + l];
                num[l] += d * d;
                den[l] += (double)x[i + l] * (double)x[i + l];
            }
        for (; i < K; i++) {
            double d = (double)x[i] - (double)y[i];
            num[0] += d * d;
            den[0] += (double)x[i] * (double)x[i];
        }
        c->row_err[r] = (num[0] + num[1]) + (num[2] + num[3]);
        c->row_norm[r] = (den[0] + den[1]) + (den[2] + den[3]);
    }
    for (int64_t r = 0; r < n; r++) {
        *err_num += c->row_err[r];
        *err_den += c->row_norm[r];
    }
    if (t)
        t->error += pn_now_seconds() - t0;
}

pn_status pn_chunk_quantize(pn_row_chunk *c, int type, int64_t n, uint8_t *out,
                            double *err_num, double *err_den, int64_t *bad_row,
                            int64_t *bad_col, pn_phase_times *t)
{
    const int64_t K = c->K;
    const int64_t out_row = pn_type_row_bytes(type, K);
    if (out_row < 0)
        return PN_ERR_USAGE;
    double t0 = pn_now_seconds();
    /* dynamic: rows cost the same, but the other core may be busy with I/O */
#pragma omp parallel for schedule(dynamic, 4) num_threads(c->threads)
    for (int64_t r = 0; r < n; r++) {
        int64_t col = -1;
        c->row_status[r] = pn_quantize_row_any(type, c->rows + r * K, K, out + r * out_row, &col);
        c->bad_col[r] = col;
    }
    if (t)
        t->quantize += pn_now_seconds() - t0;
    for (int64_t r = 0; r < n; r++) {
        if (c->row_status[r] != PN_OK) {
            *bad_row = r;
            *bad_col = c->bad_col[r];
            return (pn_status)c->row_status[r];
        }
    }
    if (err_num)
        pn_chunk_error(c, type, n, out, err_num, err_den, t);
    return PN_OK;
}
