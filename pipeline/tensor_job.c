/* tensor_job.c - one tensor cut into chunks, and the rotate, quantize and
 * CRC work on a chunk (see tensor_job.h). */
#include "pipeline/tensor_job.h"

#include "common/mem.h"
#include "quant/kquants_weighted.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/crc32.h"
#include "hadamard/hadamard_fast.h"
#include "quant/quant_row.h"
#include "quant/kquants.h"
#include "quant/pn.h"
#include "quant/pn_fast.h"
#include "quant/types.h"

/* An item of work: about this many weights (a few rows or a column range). */
#define ITEM_WEIGHTS ((int64_t)1 << 16)

/* ---- chunking --------------------------------------------------------- */

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int64_t lcm64(int64_t a, int64_t b)
{
    return a / gcd64(a, b) * b;
}

int pn_job_best_cpu_path(void)
{
    return pn_cpu_path_best();
}

pn_status pn_job_tensor_init(pn_job_tensor *t, size_t index, const char *name, int64_t K,
                             int64_t rows, int src_type, int type, int rot_block,
                             int64_t chunk_weights, int64_t max_blocks, pn_error *err)
{
    memset(t, 0, sizeof *t);
    t->index = index;
    t->name = name;
    t->K = K;
    t->rows = rows;
    t->src_type = src_type;
    t->type = type;
    t->rot_block = rot_block > 1 ? rot_block : 0;
    const pn_type_traits *tt = pn_type_traits_get(type);
    t->sum_block = pn_sum_block_weights(type);
    if (!tt || t->sum_block < 1 || K < 1 || rows < 1 || pn_type_row_bytes(type, K) < 0 ||
        (t->rot_block && K % t->rot_block != 0))
        return pn_error_set(err, PN_ERR_USAGE,
                            "tensor %s: type %s cannot hold rows of %lld weights", name,
                            tt ? tt->name : "?", (long long)K);
    t->blocks_per_row = (K + t->sum_block - 1) / t->sum_block;
    t->unit = lcm64(lcm64(tt->block_weights, t->rot_block ? t->rot_block : 1), t->sum_block);
    if (K <= chunk_weights) {
        int64_t n = chunk_weights / K;
        if (n > max_blocks / t->blocks_per_row)
            n = max_blocks / t->blocks_per_row;
        t->rows_per_chunk = n < 1 ? 1 : n;
        t->cols_per_chunk = K;
    } else {
        int64_t n = chunk_weights / t->unit * t->unit;
        t->rows_per_chunk = 1;
        t->cols_per_chunk = n < t->unit ? t->unit : n;
        if (t->cols_per_chunk >= K)
            t->cols_per_chunk = K;
    }
    return PN_OK;
}

void pn_job_tensor_needs(const pn_job_tensor *t, int64_t *weights, uint64_t *out_bytes,
                         int64_t *blocks)
{
    int64_t rows = t->rows_per_chunk < t->rows ? t->rows_per_chunk : t->rows;
    *weights = rows * t->cols_per_chunk;
    *out_bytes = (uint64_t)rows * (uint64_t)pn_type_row_bytes(t->type, t->cols_per_chunk);
    *blocks = t->cols_per_chunk == t->K ? rows * t->blocks_per_row
                                        : (t->cols_per_chunk + t->sum_block - 1) / t->sum_block;
}

bool pn_job_cursor_next(pn_job_cursor *cur, const pn_job_tensor *tensors, size_t n, pn_chunk *c)
{
    if (cur->i >= n)
        return false;
    const pn_job_tensor *t = &tensors[cur->i];
    c->tensor = t->index;
    c->K = t->K;
    c->src_type = t->src_type;
    c->tag = (int64_t)cur->i;
    c->first_of_tensor = cur->row == 0 && cur->col == 0;
    c->row0 = cur->row;
    if (t->cols_per_chunk == t->K) {
        int64_t k = t->rows - cur->row < t->rows_per_chunk ? t->rows - cur->row : t->rows_per_chunk;
        c->n_rows = k;
        c->col0 = 0;
        c->n_cols = t->K;
        cur->row += k;
    } else {
        int64_t k = t->K - cur->col < t->cols_per_chunk ? t->K - cur->col : t->cols_per_chunk;
        c->n_rows = 1;
        c->col0 = cur->col;
        c->n_cols = k;
        cur->col += k;
        if (cur->col == t->K) {
            cur->col = 0;
            cur->row++;
        }
    }
    c->last_of_tensor = cur->row == t->rows;
    if (c->last_of_tensor) {
        cur->i++;
        cur->row = 0;
        cur->col = 0;
    }
    return true;
}

int64_t pn_job_chunk_blocks(const pn_job_tensor *t, const pn_chunk *c)
{
    if (c->n_cols == t->K)
        return c->n_rows * t->blocks_per_row;
    return (c->n_cols + t->sum_block - 1) / t->sum_block;
}

uint64_t pn_job_chunk_out_bytes(const pn_job_tensor *t, const pn_chunk *c)
{
    return (uint64_t)c->n_rows * (uint64_t)pn_type_row_bytes(t->type, c->n_cols);
}

/* ---- the kernels -------------------------------------------------------- */

#define TIMES_STRIDE 8 /* doubles per thread: a cache line, no false sharing */

pn_status pn_job_kernels_init(pn_job_kernels *k, int threads, int path)
{
    memset(k, 0, sizeof *k);
    k->threads = threads < 1 ? 1 : threads;
    k->path = path;
    k->thread_times = calloc((size_t)k->threads * TIMES_STRIDE, sizeof(double));
    return k->thread_times ? PN_OK : PN_ERR_NOMEM;
}

void pn_job_kernels_free(pn_job_kernels *k)
{
    PN_FREE_ALL(k->item_st, k->item_row, k->item_col, k->item_crc, k->item_len, k->thread_times);
    memset(k, 0, sizeof *k);
}

static pn_status grow_items(pn_job_kernels *k, int64_t n)
{
    if (n <= k->cap_items)
        return PN_OK;
    int64_t cap = n < 64 ? 64 : n;
    pn_status *st = realloc(k->item_st, (size_t)cap * sizeof *st);
    if (st)
        k->item_st = st;
    int64_t *r = realloc(k->item_row, (size_t)cap * sizeof *r);
    if (r)
        k->item_row = r;
    int64_t *col = realloc(k->item_col, (size_t)cap * sizeof *col);
    if (col)
        k->item_col = col;
    uint32_t *crc = realloc(k->item_crc, (size_t)cap * sizeof *crc);
    if (crc)
        k->item_crc = crc;
    uint64_t *len = realloc(k->item_len, (size_t)cap * sizeof *len);
    if (len)
        k->item_len = len;
    if (!st || !r || !col || !crc || !len)
        return PN_ERR_NOMEM;
    k->cap_items = cap;
    return PN_OK;
}

pn_status pn_job_row_error(pn_status st, const char *file, const char *tensor, int64_t row,
                           int64_t col, pn_error *err)
{
    if (st == PN_ERR_NONFINITE)
        return pn_error_set(err, st, "%s: tensor %s, row %lld, column %lld: %s weight", file,
                            tensor, (long long)row, (long long)col, "NaN or infinite");
    if (st == PN_ERR_SCALE_OVERFLOW)
        return pn_error_set(err, st,
                            "%s: tensor %s, row %lld, columns %lld..: group too large for an "
                            "fp16 scale",
                            file, tensor, (long long)row, (long long)col);
    return pn_error_set(err, st, "%s: tensor %s, row %lld: %s", file, tensor, (long long)row,
                        pn_strerror(st));
}

pn_status pn_job_chunk_work(pn_job_kernels *k, const pn_job_tensor *t, pn_chunk *c, int what,
                            uint32_t *crc, const char *file, pn_error *err)
{
    const bool whole_rows = c->n_cols == t->K;
    const int64_t out_row = pn_type_row_bytes(t->type, t->K);
    int64_t per, n_items;
    if (whole_rows) {
        per = ITEM_WEIGHTS / t->K;
        if (per < 1)
            per = 1;
        n_items = (c->n_rows + per - 1) / per;
    } else {
        per = ITEM_WEIGHTS / t->unit * t->unit;
        if (per < t->unit)
            per = t->unit;
        n_items = (c->n_cols + per - 1) / per;
    }
    if (grow_items(k, n_items) != PN_OK)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory for the work items of a chunk");
    const int path = k->path;
    const bool rotate = (what & PN_JOB_ROTATE) && t->rot_block > 1;
    /* dynamic: items cost the same, but a core may be busy with the reader
     * or the writer thread for a while */
#pragma omp parallel for schedule(dynamic, 1) num_threads(k->threads)
    for (int64_t it = 0; it < n_items; it++) {
        double *tt = k->thread_times + (size_t)omp_get_thread_num() * TIMES_STRIDE;
        int64_t a = it * per;
        int64_t b = whole_rows ? (a + per < c->n_rows ? a + per : c->n_rows)
                               : (a + per < c->n_cols ? a + per : c->n_cols);
        /* the item's segments: rows [a, b), or columns [a, b) of the one row */
        int64_t n_seg = whole_rows ? b - a : 1;
        uint64_t out0 =
            whole_rows ? (uint64_t)(a * out_row) : (uint64_t)pn_type_row_bytes(t->type, a);
        pn_status ist = PN_OK;
        int64_t bad_row = 0, bad_col = 0;
        for (int64_t sgi = 0; sgi < n_seg && ist == PN_OK; sgi++) {
            float *x;
            int64_t len, blk, col_base, row;
            uint8_t *out;
            if (whole_rows) {
                int64_t r = a + sgi;
                x = c->x + r * t->K;
                len = t->K;
                out = c->out + r * out_row;
                blk = r * t->blocks_per_row;
                col_base = 0;
                row = c->row0 + r;
            } else {
                x = c->x + a;
                len = b - a;
                out = c->out + out0;
                blk = a / t->sum_block;
                col_base = c->col0 + a;
                row = c->row0;
            }
            double t0 = omp_get_wtime();
            if (rotate)
                pn_hadamard_rotate_row_path(path, x, len, t->rot_block);
            double t1 = omp_get_wtime();
            tt[0] += t1 - t0;
            if (what & PN_JOB_QUANTIZE) {
                int64_t col = 0;
                if (t->qweights) {
                    /* weighted: its own encoder, then the sums by the
                     * reference's separate pass (the same definition) */
                    /* an expert tensor's row takes its expert's weights */
                    const float *v = t->qweights + (row / t->qweights_rows) * t->K + col_base;
                    ist = pn_quantize_row_kquant_weighted(t->type, x, len, v, out, &col);
                    if (ist == PN_OK)
                        ist = pn_row_sums_ref(t->type, x, out, len, c->blk_err + blk,
                                              c->blk_norm + blk);
                } else {
                    ist = pn_quantize_row_sums(t->type, path, x, len, out, &col, c->blk_err + blk,
                                               c->blk_norm + blk);
                }
                if (ist != PN_OK) {
                    bad_row = row;
                    bad_col = col_base + (col > 0 ? col : 0);
                }
                double t2 = omp_get_wtime();
                tt[1] += t2 - t1;
                t1 = t2;
            }
            if ((what & PN_JOB_SUMS_REF) && ist == PN_OK) {
                pn_row_sums_ref(t->type, x, out, len, c->blk_err + blk, c->blk_norm + blk);
                tt[2] += omp_get_wtime() - t1;
            }
        }
        k->item_st[it] = ist;
        k->item_row[it] = bad_row;
        k->item_col[it] = bad_col;
        if ((what & PN_JOB_CRC) && ist == PN_OK) {
            double t0 = omp_get_wtime();
            uint64_t out1 =
                whole_rows ? (uint64_t)(b * out_row) : (uint64_t)pn_type_row_bytes(t->type, b);
            k->item_len[it] = out1 - out0;
            k->item_crc[it] = pn_crc32(0, c->out + out0, (size_t)(out1 - out0));
            tt[3] += omp_get_wtime() - t0;
        }
    }
    for (int64_t it = 0; it < n_items; it++)
        if (k->item_st[it] != PN_OK)
            return pn_job_row_error(k->item_st[it], file, t->name, k->item_row[it], k->item_col[it],
                                    err);
    if (what & PN_JOB_CRC) {
        uLong v = 0;
        for (int64_t it = 0; it < n_items; it++)
            v = crc32_combine(v, k->item_crc[it], (z_off_t)k->item_len[it]);
        *crc = (uint32_t)v;
    }
    c->out_len = (size_t)pn_job_chunk_out_bytes(t, c);
    return PN_OK;
}

void pn_job_kernels_times(const pn_job_kernels *k, double *rotate, double *quantize, double *error,
                          double *crc)
{
    double s[4] = { 0, 0, 0, 0 };
    for (int i = 0; i < k->threads; i++)
        for (int j = 0; j < 4; j++)
            s[j] += k->thread_times[(size_t)i * TIMES_STRIDE + j];
    *rotate = s[0] / k->threads;
    *quantize = s[1] / k->threads;
    *error = s[2] / k->threads;
    *crc = s[3] / k->threads;
}
