/* measure_job.c - pn-quantize's promotion measurement as a job: read from a
 * saved file or measured on the source through the stream (see
 * measure_job.h). */
#include "pipeline/measure_job.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "common/crc32.h"
#include "common/mem.h"
#include "common/threads.h"
#include "hadamard/hadamard_fast.h"
#include "pipeline/stream.h"
#include "pipeline/tensor_job.h"
#include "quant/pn.h"
#include "quant/pn_fast.h"
#include "quant/types.h"

/* ---- the measurement as a stream --------------------------------------- */

/* pn3t and pn4t blocks are 80 and 64 weights: a row piece is a multiple of
 * both and of the rotation block. */
#define MEASURE_UNIT 320

typedef struct cand {
    size_t index; /* source tensor */
    const pn_plan_tensor *t;
    int64_t n_sample;       /* rows measured */
    int64_t rows_per_chunk; /* whole rows per chunk; 0: pieces of one row */
    int64_t piece;          /* columns per piece */
    const float *v;         /* imatrix column weights, or NULL: unweighted */
} cand;

typedef struct measure_job {
    const pn_quantize_opts *o;
    const gguf_reader *src;
    pn_measurement *m;
    cand *c;
    size_t n;
    int64_t max_rows;
    int threads, path;
    /* reader-side cursor */
    size_t cur_i;
    int64_t cur_s, cur_col;
    size_t advised;     /* candidates whose rows were advised */
    uint32_t *rows_crc; /* per candidate, in order (finish): the rows read */
    /* per-thread scratch: decoded floats, blocks, then (weighted) the row
     * before rotation and the error in double */
    uint8_t **scratch;
    size_t scratch_orig, scratch_err; /* offsets of those two */
    /* in-order state */
    double carry3, carry4, carry_n; /* sums of the row being measured in pieces */
    pn_measure_acc acc;
    uint64_t done, total;
    double t0, t_compute;
} measure_job;

/* Asks the kernel to read candidate j's sampled rows (scattered: one piece
 * of advice per row; a tensor measured whole is one range). */
static void advise_candidate(measure_job *j, size_t ci)
{
    if (ci >= j->n)
        return;
    const cand *c = &j->c[ci];
    /* in the file of the tensor's split (a split source) */
    const gguf_tensor_info *info = gguf_reader_tensor(j->src, c->index);
    const uint64_t row_bytes = (uint64_t)pn_type_row_bytes(info->type, info->ne[0]);
    if (c->n_sample == c->t->rows) {
        gguf_reader_advise_tensor(j->src, c->index, 0, info->size, true);
        return;
    }
    for (int64_t s = 0; s < c->n_sample; s++)
        gguf_reader_advise_tensor(j->src, c->index,
                                  (uint64_t)pn_sample_row(c->t->rows, j->max_rows, s) * row_bytes,
                                  row_bytes, true);
}

static bool measure_next(void *ctx, pn_chunk *ch)
{
    measure_job *j = ctx;
    if (j->cur_i >= j->n)
        return false;
    /* read-ahead: while this candidate is read, the next one's rows come in */
    while (j->advised <= j->cur_i + 1 && j->advised < j->n)
        advise_candidate(j, j->advised++);
    const cand *c = &j->c[j->cur_i];
    const int64_t K = c->t->ne[0];
    ch->tensor = c->index;
    ch->K = K;
    ch->src_type = c->t->src_type;
    ch->tag = (int64_t)j->cur_i;
    ch->use_rows = true;
    ch->first_of_tensor = j->cur_s == 0 && j->cur_col == 0;
    if (c->rows_per_chunk > 0) {
        int64_t k =
            c->n_sample - j->cur_s < c->rows_per_chunk ? c->n_sample - j->cur_s : c->rows_per_chunk;
        for (int64_t r = 0; r < k; r++)
            ch->rows[r] = pn_sample_row(c->t->rows, j->max_rows, j->cur_s + r);
        ch->n_rows = k;
        ch->col0 = 0;
        ch->n_cols = K;
        j->cur_s += k;
    } else {
        int64_t k = K - j->cur_col < c->piece ? K - j->cur_col : c->piece;
        ch->rows[0] = pn_sample_row(c->t->rows, j->max_rows, j->cur_s);
        ch->n_rows = 1;
        ch->col0 = j->cur_col;
        ch->n_cols = k;
        j->cur_col += k;
        if (j->cur_col == K) {
            j->cur_col = 0;
            j->cur_s++;
        }
    }
    ch->last_of_tensor = j->cur_s == c->n_sample;
    if (ch->last_of_tensor) {
        j->cur_i++;
        j->cur_s = 0;
        j->cur_col = 0;
    }
    return true;
}

/* The bytes of the rows measured, in the order they are read (rows in
 * order, a row's pieces in order): their CRC-32 identifies what was
 * measured. A slice's CRC here (the team's); joined in order in
 * measure_finish. */
static void measure_source_crcs(void *ctx, const pn_chunk *ch, int64_t elem_at,
                                const uint8_t *bytes, int64_t n_elems,
                                pn_crc_part part[PN_STREAM_CRCS])
{
    (void)ctx;
    (void)elem_at;
    const size_t len = (size_t)(n_elems * pn_type_row_bytes(ch->src_type, 1));
    part[0].crc = pn_crc32(0, bytes, len);
    part[0].len = len;
}

/* The sums pn_measure_row gives (mix/measurement.h), continued from *err and
 * *norm: quantize x, decode, then the error's sum and (when norm) the row's.
 * Without weights (v NULL): (w - dq)^2 and w^2 in element order. With them:
 * v_j e_j^2 with the error taken back through the rotation's butterflies in
 * double, and v_j x0_j^2 over the row before rotation. */
static pn_status piece_sums(int type, int path, const float *x, const float *x0, int64_t n, int B,
                            const float *v, uint8_t *scratch, double *tmp, double *err,
                            double *norm, int64_t *bad_col)
{
    float *y = (float *)scratch;
    uint8_t *q = scratch + (size_t)n * sizeof(float);
    pn_status st = pn_quantize_row_path(type, path, x, n, q, bad_col);
    if (st != PN_OK)
        return st;
    pn_dequantize_row(type, q, y, n);
    *err = v ? pn_weighted_error_sum(x, y, n, B, v, tmp, *err) : pn_error_sum(x, y, n, *err);
    if (norm)
        *norm = v ? pn_weighted_norm_sum(x0, n, v, *norm) : pn_norm_sum(x, n, *norm);
    return PN_OK;
}

/* What every row of measure_compute shares. */
typedef struct rows_job {
    measure_job *j;
    const cand *c;
    pn_chunk *ch;
    int B;
    bool piece;
} rows_job;

/* Where a row's sums failed: the column and the type being measured. */
typedef struct row_fail {
    int64_t col;
    int type;
} row_fail;

/* Row r's sums into blk_err[3r..3r+2], on thread t. */
static pn_status measure_row(void *ctx, size_t i, int t, void *fail)
{
    const rows_job *rj = ctx;
    measure_job *j = rj->j;
    const cand *c = rj->c;
    pn_chunk *ch = rj->ch;
    const int B = rj->B;
    const int64_t r = (int64_t)i;
    float *x = ch->x + r * ch->n_cols;
    uint8_t *scratch = j->scratch[t];
    float *x0 = (float *)(scratch + j->scratch_orig);
    double *tmp = (double *)(scratch + j->scratch_err);
    if (c->v)
        memcpy(x0, x, (size_t)ch->n_cols * sizeof(float));
    if (B > 1)
        pn_hadamard_rotate_row_path(j->path, x, ch->n_cols, B);
    double e3 = 0.0, e4 = 0.0, w2 = 0.0;
    if (rj->piece && ch->col0 > 0) {
        e3 = j->carry3;
        e4 = j->carry4;
        w2 = j->carry_n;
    }
    int64_t col = 0;
    /* an expert tensor's row takes its expert's weights (matrix after matrix) */
    const float *v = c->v ? c->v + (ch->rows[r] / c->t->ne[1]) * ch->K + ch->col0 : NULL;
    pn_status st =
        piece_sums(PN_TYPE_PN3T, j->path, x, x0, ch->n_cols, B, v, scratch, tmp, &e3, &w2, &col);
    int type = PN_TYPE_PN3T;
    if (st == PN_OK) {
        type = PN_TYPE_PN4T;
        st = piece_sums(PN_TYPE_PN4T, j->path, x, x0, ch->n_cols, B, v, scratch, tmp, &e4, NULL,
                        &col);
    }
    ch->blk_err[3 * r] = e3;
    ch->blk_err[3 * r + 1] = e4;
    ch->blk_err[3 * r + 2] = w2;
    if (st != PN_OK) {
        row_fail *f = fail;
        f->col = ch->col0 + (col > 0 ? col : 0);
        f->type = type;
    }
    return st;
}

/* Sums per row of the chunk into blk_err[3r..3r+2] (pn3t error, pn4t error,
 * norm), in parallel over rows; a piece continues the row's carried sums. */
static pn_status measure_compute(void *ctx, pn_chunk *ch, pn_error *err)
{
    measure_job *j = ctx;
    const cand *c = &j->c[ch->tag];
    const bool piece = ch->n_cols != ch->K;
    double t0 = pn_now_seconds();
    rows_job rj = { j, c, ch, c->t->rotation_block, piece };
    row_fail f = { 0, 0 };
    size_t bad_at = SIZE_MAX;
    const int bad_st = pn_each_first_failure((size_t)ch->n_rows, j->threads, PN_EACH_RUN_ALL,
                                             measure_row, &rj, sizeof f, &f, &bad_at);
    const int64_t bad_r = bad_at == SIZE_MAX ? -1 : (int64_t)bad_at;
    const int64_t bad_c = f.col, bad_type = f.type;
    j->t_compute += pn_now_seconds() - t0;
    if (bad_r >= 0) {
        const char *tn = pn_type_traits_get((int)bad_type)->name;
        if (bad_st == PN_ERR_SCALE_OVERFLOW)
            return pn_error_set(err, bad_st,
                                "tensor %s, row %lld, columns %lld..: group too large for an "
                                "fp16 scale (%s)",
                                c->t->name, (long long)ch->rows[bad_r], (long long)bad_c, tn);
        return pn_error_set(err, (pn_status)bad_st, "tensor %s, row %lld, column %lld: %s (%s)",
                            c->t->name, (long long)ch->rows[bad_r], (long long)bad_c,
                            pn_strerror((pn_status)bad_st), tn);
    }
    if (piece) {
        j->carry3 = ch->blk_err[0];
        j->carry4 = ch->blk_err[1];
        j->carry_n = ch->blk_err[2];
    }
    return PN_OK;
}

/* Row sums into the tensor's accumulator in sampled-row order; the result
 * when the tensor is done. */
static pn_status measure_finish(void *ctx, pn_chunk *ch, pn_error *err)
{
    (void)err;
    measure_job *j = ctx;
    const cand *c = &j->c[ch->tag];
    const bool piece = ch->n_cols != ch->K;
    if (ch->src_crc[0].len > 0)
        j->rows_crc[ch->tag] = (uint32_t)crc32_combine(j->rows_crc[ch->tag], ch->src_crc[0].crc,
                                                       (z_off_t)ch->src_crc[0].len);
    if (!piece || ch->col0 + ch->n_cols == ch->K)
        for (int64_t r = 0; r < ch->n_rows; r++)
            pn_measure_acc_add(&j->acc, ch->blk_err[3 * r], ch->blk_err[3 * r + 1],
                               ch->blk_err[3 * r + 2]);
    if (!ch->last_of_tensor)
        return PN_OK;
    pn_measure_entry *e = &j->m->entries[ch->tag];
    pn_measure_acc_result(&j->acc, &e->e3, &e->e4);
    memset(&j->acc, 0, sizeof j->acc);
    j->done += (uint64_t)c->t->n_weights;
    if (j->o->progress) {
        pn_progress p = { PN_PHASE_MEASURE, c->index, gguf_reader_n_tensors(j->src), c->t->name,
                          j->done,          j->total, pn_now_seconds() - j->t0 };
        j->o->progress(&p, j->o->user);
    }
    return PN_OK;
}

static pn_status measure_all(const pn_quantize_opts *o, const gguf_reader *src, const pn_plan *plan,
                             const pn_job_env *env, const pn_measure_params *params,
                             const pn_imatrix *im, pn_measurement **out, pn_measure_times *times,
                             pn_error *err)
{
    const int64_t max_rows = params->sample_max_rows;
    pn_measurement *m = NULL;
    pn_status st = pn_measurement_new(plan, params, &m, err);
    if (st != PN_OK)
        return st;
    measure_job j;
    memset(&j, 0, sizeof j);
    j.o = o;
    j.src = src;
    j.m = m;
    j.max_rows = max_rows;
    j.threads = env->threads;
    j.path = env->cpu_path;
    j.c = calloc(m->n ? m->n : 1, sizeof *j.c);
    j.rows_crc = calloc(m->n ? m->n : 1, sizeof *j.rows_crc);
    const char **names = calloc(plan->n_tensors ? plan->n_tensors : 1, sizeof *names);
    if (!j.c || !j.rows_crc || !names) {
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        goto done;
    }
    const int64_t cw = env->chunk_weights;
    int64_t slot_w = 0, slot_rows = 1, max_seg = 0;
    for (size_t i = 0; i < plan->n_tensors; i++) {
        const pn_plan_tensor *t = &plan->tensors[i];
        names[i] = t->name;
        if (!t->candidate)
            continue;
        if ((size_t)j.n >= m->n || strcmp(m->entries[j.n].name, t->name) != 0) {
            st = pn_error_set(err, PN_ERR_INTERNAL, "no measurement entry for %s", t->name);
            goto done;
        }
        cand *c = &j.c[j.n++];
        const int64_t K = t->ne[0];
        c->index = i;
        c->t = t;
        c->v = pn_imatrix_weights_for(im, t->name);
        c->n_sample = t->rows < max_rows ? t->rows : max_rows;
        if (K <= cw) {
            int64_t n = cw / K;
            c->rows_per_chunk = n < 1 ? 1 : n;
            if (c->rows_per_chunk > c->n_sample)
                c->rows_per_chunk = c->n_sample;
            c->piece = K;
        } else {
            /* lcm(320, B) for a power of two B */
            int64_t u = MEASURE_UNIT;
            while (t->rotation_block > 1 && u % t->rotation_block != 0)
                u *= 2;
            int64_t p = cw / u * u;
            c->piece = p < u ? u : p;
            if (c->piece > K)
                c->piece = K;
        }
        int64_t w = c->rows_per_chunk > 0 ? c->rows_per_chunk * K : c->piece;
        if (w > slot_w)
            slot_w = w;
        if (c->rows_per_chunk > slot_rows)
            slot_rows = c->rows_per_chunk;
        if (c->piece > max_seg)
            max_seg = c->piece;
        j.total += (uint64_t)t->n_weights;
    }
    if (j.n == 0)
        goto done;
    j.scratch = calloc((size_t)j.threads, sizeof *j.scratch);
    if (!j.scratch) {
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        goto done;
    }
    /* floats first: the scratch is float-aligned for any K; the weighted
     * parts after, each aligned for its type */
    const size_t al = _Alignof(max_align_t);
    j.scratch_orig =
        ((size_t)max_seg * sizeof(float) + (size_t)(max_seg / 64 + 1) * PN_BLOCK_BYTES + al - 1) /
        al * al;
    j.scratch_err = j.scratch_orig + ((size_t)max_seg * sizeof(float) + al - 1) / al * al;
    const size_t scratch_bytes =
        im ? j.scratch_err + (size_t)max_seg * sizeof(double) : j.scratch_orig;
    for (int i = 0; i < j.threads; i++) {
        j.scratch[i] = malloc(scratch_bytes);
        if (!j.scratch[i]) {
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory for the measurement");
            goto done;
        }
    }
    pn_stream_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.src = src;
    cfg.n_slots = 4;
    cfg.slot_weights = slot_w;
    cfg.slot_rows = slot_rows;
    cfg.slot_out_bytes = 1;
    cfg.slot_blocks = 3 * slot_rows;
    cfg.readahead_bytes = 0; /* scattered rows: advice per candidate instead */
    cfg.cpu_path = env->cpu_path;
    cfg.threads = env->threads;
    cfg.src_path = o->src_path;
    cfg.tensor_names = names;
    cfg.cancel = o->cancel;
    pn_stream_ops ops = { &j,   measure_next,       measure_compute, measure_finish,
                          NULL, measure_source_crcs };
    pn_stream_times t;
    j.t0 = pn_now_seconds();
    st = pn_stream_run(&cfg, &ops, &t, err);
    for (size_t i = 0; i < m->n; i++)
        m->entries[i].rows_crc32 = j.rows_crc[i];
    if (times) {
        times->read = t.read;
        times->compute = j.t_compute + t.widen + t.source_crcs;
        times->wait_input = t.wait_input;
    }
done:
    PN_FREE_EACH(j.scratch, j.threads);
    PN_FREE_ALL(j.c, j.rows_crc, names);
    if (st != PN_OK) {
        if (st != PN_ERR_INTERRUPTED)
            pn_error_prefix(err, "%s: measuring promotions", o->src_path);
        pn_measurement_free(m);
        return st;
    }
    *out = m;
    return PN_OK;
}

/* The CRC-32 of the rows m's rule samples, for every candidate of the plan
 * (per plan tensor): the source identity's when the rule is its own and
 * they are known, else read now. */
static pn_status candidate_rows_crc(const pn_quantize_opts *o, const gguf_reader *src,
                                    const pn_plan *plan, const pn_job_env *env,
                                    const pn_source_id *sid, int64_t max_rows, uint32_t *crc,
                                    pn_error *err)
{
    if (sid && sid->samples_known && max_rows == PN_SOURCE_SAMPLE_ROWS) {
        memcpy(crc, sid->sample_crc, plan->n_tensors * sizeof *crc);
        return PN_OK;
    }
    size_t *idx = malloc((plan->n_candidates ? plan->n_candidates : 1) * sizeof *idx);
    uint32_t *got = malloc((plan->n_candidates ? plan->n_candidates : 1) * sizeof *got);
    if (!idx || !got) {
        free(idx);
        free(got);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    size_t n = 0;
    for (size_t i = 0; i < plan->n_tensors; i++)
        if (plan->tensors[i].candidate)
            idx[n++] = i;
    pn_status st = pn_tensor_crcs(src, idx, n, max_rows, env->threads, o->cancel, got, err);
    for (size_t k = 0; k < n && st == PN_OK; k++)
        crc[idx[k]] = got[k];
    free(idx);
    free(got);
    return st;
}

static void note_msg(const pn_quantize_opts *o, const char *msg)
{
    if (o->note)
        o->note(msg, o->user);
}

pn_status pn_job_measure_obtain(const pn_quantize_opts *o, const gguf_reader *src,
                                const pn_plan *plan, const pn_job_env *env, const pn_source_id *sid,
                                const char *quantizer, const pn_imatrix *im, uint64_t im_hash,
                                pn_measurement **out, pn_measure_times *times, pn_error *err)
{
    *out = NULL;
    pn_measure_params want;
    memset(&want, 0, sizeof want);
    want.source_header_hash = sid->header_hash;
    snprintf(want.quantizer, sizeof want.quantizer, "%s", quantizer);
    want.rotation_cap = plan->rotation == PN_ROTATION_HADAMARD ? plan->rotation_cap : 0;
    want.sample_max_rows = o->measure_rows ? (int64_t)o->measure_rows : PN_SAMPLE_ROWS_DEFAULT;
    want.weighted = im != NULL;
    want.imatrix_hash = im ? im_hash : 0;
    want.missing_unweighted = im && o->imatrix_missing_unweighted;
    struct stat sb;
    const char *path = o->measurement_path;
    char msg[PN_ERROR_MSG_MAX + 128];
    pn_status st;
    bool stale = false, old_format = false, other_source = false;
    if (path && stat(path, &sb) == 0) {
        pn_measurement *m = NULL;
        int version = 0;
        pn_error why;
        pn_error_clear(&why);
        st = pn_measurement_load(path, &m, &version, &why);
        if (st == PN_ERR_VERSION && version >= 1 && version < PN_MEASURE_FORMAT_VERSION) {
            stale = old_format = true; /* a measurement file of ours: rewriting it is its use */
        } else if (st != PN_OK) {
            if (err)
                *err = why;
            return st;
        } else {
            st = pn_measurement_check_params(m, path, &want, plan, &why);
            other_source =
                st == PN_ERR_MISMATCH && m->params.source_header_hash != want.source_header_hash;
            if (st == PN_OK) {
                uint32_t *crc = calloc(plan->n_tensors ? plan->n_tensors : 1, sizeof *crc);
                if (!crc) {
                    pn_measurement_free(m);
                    return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
                }
                st = candidate_rows_crc(o, src, plan, env, sid, want.sample_max_rows, crc, err);
                if (st != PN_OK) {
                    free(crc);
                    pn_measurement_free(m);
                    return st;
                }
                st = pn_measurement_check_rows(m, path, plan, crc, &why);
                other_source = st == PN_ERR_MISMATCH; /* the rows measured are not these */
                free(crc);
            }
            if (st == PN_OK) {
                snprintf(msg, sizeof msg, "promotion measurement read from %s (%zu candidates)",
                         path, m->n);
                note_msg(o, msg);
                *out = m;
                return PN_OK;
            }
            pn_measurement_free(m);
            if (st != PN_ERR_MISMATCH) {
                if (err)
                    *err = why;
                return st;
            }
            stale = true;
        }
        /* the measurement of another source (or of this one's rows before
         * they changed) is the user's record of that source: replaced only
         * when asked, as an output is (a dry run refuses as the real run) */
        if (other_source && !o->force)
            return pn_error_set(err, PN_ERR_EXISTS,
                                "%s; it is not replaced without --force (--force measures again "
                                "and replaces it; or give another --measurement FILE)",
                                why.msg);
        snprintf(msg, sizeof msg,
                 old_format ? "%s (measuring again now)" : "%s; it is not used: measuring again",
                 why.msg);
        note_msg(o, msg);
    }
    st = measure_all(o, src, plan, env, &want, im, out, times, err);
    if (st == PN_OK && path) {
        st = pn_measurement_save(*out, path, err);
        if (st == PN_OK) {
            snprintf(msg, sizeof msg, "promotion measurement saved to %s%s", path,
                     stale ? " (replacing the one that was not used)" : "");
            note_msg(o, msg);
        }
    }
    if (st != PN_OK) {
        pn_measurement_free(*out);
        *out = NULL;
    }
    return st;
}
