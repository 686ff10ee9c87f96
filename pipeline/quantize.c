/* The pn-quantize job. Order of work:
 *   1. open the source, refuse what cannot be quantized (already quantized
 *      tensors, DST == SRC, DST present without --force); with --reuse,
 *      open PREV (refused unless it is a PN file) and read the sampled rows
 *      of every source tensor;
 *   2. plan: recipe -> types, rotation, promotions (measurement, list or
 *      target size), header and file size; with --reuse, which tensors are
 *      copied from PREV (pipeline/reuse.h);
 *   3. stream every tensor in source order into a temporary file: reader
 *      thread, compute team, writer thread at once (pipeline/stream.h);
 *      the output is one file or a split set (io/outset.h): the
 *      writer stage writes each chunk to the file of its tensor, and with
 *      --split-index only the tensors of that split are streamed; a copied
 *      tensor (--reuse) is one chunk that reads nothing and that the writer
 *      copies from PREV;
 *   4. check the source did not change, read the temporary files back in
 *      parallel and validate them, hand the result to the caller's hook, and
 *      commit onto DST (a set: its first split last).
 */
#include "pipeline/quantize.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/crc32.h"
#include "common/file.h"
#include "common/threads.h"
#include "gguf/gguf.h"
#include "hadamard/hadamard_fast.h"
#include "gguf/gguf_split.h"
#include "gguf/pn_keys.h"
#include "io/source_open.h"
#include "io/outset.h"
#include "io/free_space.h"
#include "pipeline/plan_build.h"
#include "pipeline/quantize_paths.h"
#include "pipeline/quantize_testing.h"
#include "pipeline/readback.h"
#include "pipeline/reuse.h"
#include "io/source_id.h"
#include "pipeline/stream.h"
#include "pipeline/tensor_job.h"
#include "quant/pn.h"
#include "quant/pn_cuda.h"
#include "quant/pn_fast.h"
#include "quant/types.h"

/* Chunk buffers in the ring: one being read, one computed, one deferred on
 * the GPU, one being written. */
#define PN_STREAM_SLOTS 4
/* Read-ahead advice ahead of the reader (the source is read in file
 * order). */
#define PN_READAHEAD_BYTES ((uint64_t)64 << 20)
/* The writer asks the kernel to start writing back every this many bytes,
 * so the final fsync has little left to do. */
#define PN_WRITEBACK_BYTES ((uint64_t)32 << 20)
/* The writer keeps about this much of the output in the page cache (the
 * rest is dropped once on the device: pn_outset_opts.drop_behind_bytes). */
#define PN_DROP_BEHIND_BYTES ((uint64_t)128 << 20)

void pn_quantize_opts_init(pn_quantize_opts *o)
{
    memset(o, 0, sizeof *o);
    o->promote = -1;
    o->rotation_cap = -1;
    o->backend = PN_BACKEND_AUTO;
    o->cpu_path = -1;
    o->split_index = -1;
}

static bool cancelled(const pn_quantize_opts *o)
{
    return o->cancel && *o->cancel;
}

static pn_status interrupted(pn_error *err)
{
    return pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
}

/* ---- the run ------------------------------------------------------------ */

typedef struct run_ctx {
    const pn_quantize_opts *o;
    gguf_reader *src;
    gguf_reader *src_set;     /* --keep-split of a set read without its MTP layer: the set */
    struct stat *split_stats; /* of the source's splits after open (a set), for the end */
    pn_job_plan *job;         /* the plan of the run; job->plan is its mix plan */
    gguf_writer *model;       /* the output's keys and tensors, as one file */
    pn_outset *out;           /* the files written: one, or a split set */
    pn_job_env env;
    pn_cuda_ctx *cuda; /* NULL: CPU */
    uint32_t *crcs;
    uint64_t weights_done, weights_total;
    double t_start;
    pn_source_id sid;    /* the source's identity, for pn.source.*: its tensor_crc
                              * filled by the stream (in order, quant_job_finish) */
    uint32_t *rd_sample; /* per tensor: the sampled rows' CRC-32 as the stream read
                              * them (compared with sid's when read before the run) */
    pn_reuse *ru;        /* --reuse PREV, or NULL */
    bool *reused;        /* per tensor, with --reuse */
    pn_readback rb;      /* the output read back: behind the writer, then the rest */
} run_ctx;

/* Tensor i is copied from PREV. */
static bool copied(const run_ctx *c, size_t i)
{
    return c->ru && c->ru->from[i] >= 0;
}

static void progress(run_ctx *c, int phase, size_t i, const char *name)
{
    if (!c->o->progress)
        return;
    pn_progress p = { phase,
                      i,
                      c->job->plan->n_tensors,
                      name,
                      c->weights_done,
                      c->weights_total,
                      pn_now_seconds() - c->t_start };
    c->o->progress(&p, c->o->user);
}

/* The streaming pass: the state of the three stages. */
typedef struct quant_job {
    run_ctx *c;
    pn_job_tensor *jt;
    size_t n;
    pn_job_cursor cur; /* reader thread */
    pn_job_kernels k;  /* compute team */
    const char **names;
    /* in order (finish): the tensor being finished */
    double num, den, t_first;
    uint32_t crc;
    int gpu_next;
    double t_gpu;
} quant_job;

static bool quant_job_next(void *ctx, pn_chunk *ch)
{
    quant_job *q = ctx;
    if (q->cur.i < q->n && copied(q->c, q->jt[q->cur.i].index)) {
        /* a copied tensor: one chunk of no rows, its bytes from PREV */
        const pn_job_tensor *t = &q->jt[q->cur.i];
        ch->tensor = t->index;
        ch->K = t->K;
        ch->src_type = t->src_type;
        ch->tag = (int64_t)q->cur.i;
        ch->n_rows = 0;
        ch->n_cols = t->K;
        ch->first_of_tensor = ch->last_of_tensor = true;
        q->cur.i++;
        q->cur.row = q->cur.col = 0;
        return true;
    }
    return pn_job_cursor_next(&q->cur, q->jt, q->n, ch);
}

/* A slice's source CRCs (the team's): part[0] of all its bytes, part[1]
 * of those of the sampled rows; quant_job_finish joins them in order. */
static void quant_job_source_crcs(void *ctx, const pn_chunk *ch, int64_t elem_at,
                                  const uint8_t *bytes, int64_t n_elems,
                                  pn_crc_part part[PN_STREAM_CRCS])
{
    quant_job *q = ctx;
    const pn_job_tensor *t = &q->jt[ch->tag];
    const int64_t es = pn_type_row_bytes(t->src_type, 1);
    part[0].len = (uint64_t)(n_elems * es);
    part[0].crc = pn_crc32(0, bytes, (size_t)part[0].len);
    part[1].crc = pn_sample_crc_piece(t->rows, PN_SOURCE_SAMPLE_ROWS, t->K, es, elem_at, bytes,
                                      n_elems, &part[1].len);
}

static bool on_gpu(const quant_job *q, const pn_job_tensor *t)
{
    return q->c->cuda && pn_type_is_pn(t->type);
}

static pn_status quant_job_compute(void *ctx, pn_chunk *ch, pn_error *err)
{
    quant_job *q = ctx;
    const pn_job_tensor *t = &q->jt[ch->tag];
    const char *file = q->c->o->src_path;
    ch->t0 = pn_now_seconds();
    if (copied(q->c, t->index)) {
        /* checked against PREV's pn.tensor_crc32 before the run */
        ch->out_len = (size_t)q->c->job->plan->tensors[t->index].bytes;
        ch->crc = q->c->ru->crc32[t->index];
        return PN_OK;
    }
    if (!on_gpu(q, t))
        return pn_job_chunk_work(&q->k, t, ch, PN_JOB_ROTATE | PN_JOB_QUANTIZE | PN_JOB_CRC,
                                 &ch->crc, file, err);
    /* GPU: rotated here, searched there while the CPU goes on with the next
     * chunk; finished (collected, summed, CRC) in quant_job_finish */
    pn_status st = pn_job_chunk_work(&q->k, t, ch, PN_JOB_ROTATE, NULL, file, err);
    if (st != PN_OK)
        return st;
    ch->gpu_slot = q->gpu_next;
    q->gpu_next = (q->gpu_next + 1) % PN_CUDA_SLOTS;
    double t0 = pn_now_seconds();
    st = pn_cuda_submit(q->c->cuda, ch->gpu_slot, t->type, ch->x, ch->n_rows, ch->n_cols, 0, err);
    q->t_gpu += pn_now_seconds() - t0;
    if (st != PN_OK)
        return st;
    ch->deferred = true;
    return PN_OK;
}

static pn_status quant_job_finish(void *ctx, pn_chunk *ch, pn_error *err)
{
    quant_job *q = ctx;
    run_ctx *c = q->c;
    const pn_job_tensor *t = &q->jt[ch->tag];
    if (ch->deferred) {
        int64_t br = 0, bc = 0;
        double t0 = pn_now_seconds();
        pn_status st =
            pn_cuda_collect(c->cuda, ch->gpu_slot, ch->abandoned ? NULL : ch->out, &br, &bc, err);
        q->t_gpu += pn_now_seconds() - t0;
        if (ch->abandoned)
            return PN_OK;
        if (st == PN_ERR_NONFINITE || st == PN_ERR_SCALE_OVERFLOW)
            return pn_job_row_error(st, c->o->src_path, t->name, ch->row0 + br, ch->col0 + bc, err);
        if (st != PN_OK)
            return st;
        st = pn_job_chunk_work(&q->k, t, ch, PN_JOB_SUMS_REF | PN_JOB_CRC, &ch->crc, c->o->src_path,
                               err);
        if (st != PN_OK)
            return st;
    }
    /* in data order: the error sums block by block, the CRC piece by piece */
    const int64_t nb = pn_job_chunk_blocks(t, ch);
    double num = q->num, den = q->den;
    for (int64_t b = 0; b < nb; b++) {
        num += ch->blk_err[b];
        den += ch->blk_norm[b];
    }
    q->num = num;
    q->den = den;
    if (ch->first_of_tensor) {
        q->t_first = ch->t0;
        q->crc = 0;
    }
    q->crc = (uint32_t)crc32_combine(q->crc, ch->crc, (z_off_t)ch->out_len);
    /* the source's CRCs, in plan-indexed arrays, final once the tensor is
     * finished: a split of the output patches them in when it closes
     * (io/outset.h) */
    uint32_t *src_crc[PN_STREAM_CRCS] = { &c->sid.tensor_crc[t->index], &c->rd_sample[t->index] };
    for (int j = 0; j < PN_STREAM_CRCS; j++)
        if (ch->src_crc[j].len > 0)
            *src_crc[j] = (uint32_t)crc32_combine(*src_crc[j], ch->src_crc[j].crc,
                                                  (z_off_t)ch->src_crc[j].len);
    if (ch->last_of_tensor) {
        c->job->rel_error[t->index] = copied(c, t->index) ? NAN
                                      : q->den > 0.0      ? q->num / q->den
                                                          : 0.0;
        c->job->seconds[t->index] = pn_now_seconds() - q->t_first;
        c->crcs[t->index] = q->crc;
        q->num = q->den = 0.0;
    }
    c->weights_done += copied(c, t->index) ? (uint64_t)c->job->plan->tensors[t->index].n_weights
                                           : (uint64_t)(ch->n_rows * ch->n_cols);
    progress(c, PN_PHASE_QUANTIZE, t->index, t->name);
    return PN_OK;
}

/* The writer stage: the chunk goes to the file of its tensor (which also
 * starts the writeback of what is written, pn_outset_opts), then what has
 * settled on the device since is read back (pipeline/readback.h). */
static pn_status quant_job_write(void *ctx, pn_chunk *ch, pn_error *err)
{
    quant_job *q = ctx;
    const pn_reuse *ru = q->c->ru;
    const size_t i = ch->tensor;
    pn_status st = copied(q->c, i) ? pn_outset_copy_from(q->c->out, i, ru->fd[i], ru->offset[i],
                                                         ch->out_len, ru->path, err)
                                   : pn_outset_write(q->c->out, i, ch->out, ch->out_len, err);
    if (st == PN_OK)
        pn_readback_behind(&q->c->rb);
    return st;
}

/* The identity of every streamed tensor, from the sampled rows the reader
 * read: with --reuse they were read before the run, and must not have
 * changed since. (With --split-index the other splits' tensors are not
 * streamed, and their entries, which this run does not write, stay as they
 * are.) */
static pn_status check_identity(run_ctx *c, const pn_job_tensor *jt, size_t n, pn_error *err)
{
    for (size_t k = 0; k < n; k++) {
        const size_t i = jt[k].index;
        if (copied(c, i))
            continue;
        if (c->sid.samples_known && c->sid.sample_crc[i] != c->rd_sample[i])
            return pn_error_set(err, PN_ERR_TRUNCATED,
                                "%s: the file changed during the run: the sampled rows of tensor "
                                "%s are not the ones read before it",
                                c->o->src_path, c->job->plan->tensors[i].name);
        c->sid.sample_crc[i] = c->rd_sample[i];
    }
    return PN_OK;
}

static pn_status stream_tensors(run_ctx *c, pn_quantize_stats *stats, pn_error *err)
{
    quant_job q;
    memset(&q, 0, sizeof q);
    q.c = c;
    /* the tensors this run writes: all, or one split's (consecutive) */
    size_t lo = 0, hi = c->job->plan->n_tensors;
    while (lo < hi && !pn_outset_writes_tensor(c->out, lo))
        lo++;
    while (hi > lo && !pn_outset_writes_tensor(c->out, hi - 1))
        hi--;
    q.n = hi - lo;
    pn_status st = PN_OK;
    q.jt = calloc(q.n ? q.n : 1, sizeof *q.jt);
    q.names = calloc(c->job->plan->n_tensors ? c->job->plan->n_tensors : 1, sizeof *q.names);
    if (!q.jt || !q.names || pn_job_kernels_init(&q.k, c->env.threads, c->env.cpu_path) != PN_OK) {
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        goto done;
    }
    int64_t cw = c->env.chunk_weights;
    if (c->cuda && cw > (int64_t)(PN_CUDA_SLOT_INPUT_BYTES / sizeof(float)))
        cw = (int64_t)(PN_CUDA_SLOT_INPUT_BYTES / sizeof(float));
    const int64_t max_blocks = cw / 16 + 64;
    int64_t slot_w = 1, slot_blocks = 1;
    uint64_t slot_out = 1;
    for (size_t i = 0; i < c->job->plan->n_tensors; i++)
        q.names[i] = c->job->plan->tensors[i].name;
    for (size_t k = 0; k < q.n; k++) {
        const size_t i = lo + k;
        const pn_plan_tensor *t = &c->job->plan->tensors[i];
        /* the reader accumulates these CRCs of what it reads; a copied
         * tensor reads nothing and takes PREV's record of its source */
        c->sid.tensor_crc[i] = copied(c, i) ? c->ru->source_crc32[i] : 0;
        c->rd_sample[i] = 0;
        st = pn_job_tensor_init(&q.jt[k], i, t->name, t->ne[0], t->rows, t->src_type, t->type,
                                t->rotation_block, cw, max_blocks, err);
        if (st != PN_OK) {
            pn_error_prefix(err, "%s", c->o->src_path);
            goto done;
        }
        /* dense or expert (the imatrix holds ne[2] matrices, checked) */
        if ((t->type == PN_TYPE_Q3_K || t->type == PN_TYPE_Q4_K) && t->ne[3] == 1) {
            q.jt[k].qweights = pn_imatrix_weights_for(c->job->imatrix, t->name);
            q.jt[k].qweights_rows = t->ne[1];
        }
        int64_t w, b;
        uint64_t ob;
        pn_job_tensor_needs(&q.jt[k], &w, &ob, &b);
        if (w > slot_w)
            slot_w = w;
        if (ob > slot_out)
            slot_out = ob;
        if (b > slot_blocks)
            slot_blocks = b;
        if (c->cuda && on_gpu(&q, &q.jt[k]) &&
            pn_cuda_max_rows(c->cuda, q.jt[k].cols_per_chunk) < q.jt[k].rows_per_chunk) {
            st = pn_error_set(err, PN_ERR_INTERNAL, "tensor %s: a chunk does not fit the GPU",
                              t->name);
            goto done;
        }
    }

    pn_stream_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.src = c->src;
    cfg.n_slots = PN_STREAM_SLOTS;
    cfg.slot_weights = slot_w;
    cfg.slot_rows = 1;
    cfg.slot_out_bytes = (size_t)slot_out;
    cfg.slot_blocks = slot_blocks;
    cfg.readahead_bytes = PN_READAHEAD_BYTES;
    cfg.cpu_path = c->env.cpu_path;
    cfg.threads = c->env.threads;
    cfg.direct_io = true; /* read once, in order: around the page cache */
    cfg.src_path = c->o->src_path;
    cfg.tensor_names = q.names;
    cfg.cancel = c->o->cancel;
    pn_stream_ops ops = { &q,
                          quant_job_next,
                          quant_job_compute,
                          quant_job_finish,
                          quant_job_write,
                          quant_job_source_crcs };
    pn_stream_times t;
    c->t_start = pn_now_seconds();
    st = pn_stream_run(&cfg, &ops, &t, err);
    stats->t_source_crc = t.source_crcs;
    if (st == PN_OK)
        st = check_identity(c, q.jt, q.n, err);
    stats->t_read = t.read;
    stats->t_widen = t.widen;
    stats->t_wait_input = t.wait_input;
    stats->t_wait_output = t.wait_output;
    stats->t_write = t.write - c->rb.seconds; /* the writer's read-back is its own figure */
    pn_job_kernels_times(&q.k, &stats->t_rotate, &stats->t_quantize, &stats->t_error,
                         &stats->t_crc);
    stats->t_quantize += q.t_gpu;
done:
    pn_job_kernels_free(&q.k);
    free(q.jt);
    free(q.names);
    return st;
}

/* Every file this run wrote. */
static pn_status validate_output(run_ctx *c, pn_quantize_stats *stats, pn_error *err)
{
    const double t0 = pn_now_seconds();
    progress(c, PN_PHASE_VALIDATE, c->job->plan->n_tensors, "validating");
    pn_status st = PN_OK;
    for (size_t s = 0; s < pn_outset_n_splits(c->out) && st == PN_OK; s++)
        if (pn_outset_writes(c->out, s))
            st = pn_readback_split(&c->rb, s, err);
    stats->t_validate = pn_now_seconds() - t0;
    stats->t_validate_behind = c->rb.seconds;
    stats->validated_behind_bytes = c->rb.bytes;
    return st;
}

/* ---- the result ----------------------------------------------------- */

/* The plan and the figures, as data for the caller's hook (cmd/ formats). */
static pn_status hand_result(run_ctx *c, const pn_quantize_stats *stats, pn_error *err)
{
    const pn_quantize_opts *o = c->o;
    if (!o->result)
        return PN_OK;
    pn_quantize_result r;
    memset(&r, 0, sizeof r);
    r.plan = c->job->plan;
    r.src_path = o->src_path;
    r.dst_path = o->dst_path;
    r.mix_label = c->job->mix_label;
    r.header_bytes = c->job->header_bytes;
    r.file_bytes = pn_outset_total_bytes(c->out);
    r.weights = c->job->weights;
    r.alignment = c->job->alignment;
    r.dry_run = o->dry_run;
    if (!o->dry_run) {
        r.rel_error = c->job->rel_error;
        r.seconds = c->job->seconds;
        r.crc32 = c->crcs;
    }
    r.stats = stats;
    /* the files */
    const size_t ns = pn_outset_n_splits(c->out);
    const char **paths = calloc(ns, sizeof *paths);
    uint64_t *bytes = calloc(ns, sizeof *bytes);
    if (!paths || !bytes) {
        free(paths);
        free(bytes);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    for (size_t s = 0; s < ns; s++) {
        paths[s] = pn_outset_path(c->out, s);
        bytes[s] = pn_outset_split_bytes(c->out, s);
    }
    r.n_splits = ns;
    r.split_paths = paths;
    r.split_first = pn_outset_plan(c->out)->first;
    r.split_bytes = bytes;
    r.split_index = o->split_index;
    if (c->ru) {
        r.reuse_path = c->ru->path;
        r.reused = c->reused;
        r.reuse_why = c->ru->why;
        r.reuse_none_why = c->ru->none_why[0] ? c->ru->none_why : NULL;
    }
    r.imatrix = c->job->imatrix;
    r.imatrix_promotion = c->job->imatrix && o->imatrix_promotion;
    pn_error local;
    pn_error_clear(&local);
    pn_status st = o->result(&r, o->user, &local);
    free(paths);
    free(bytes);
    if (st != PN_OK)
        pn_error_set(err, st, "%s", local.msg[0] ? local.msg : pn_strerror(st));
    return st;
}

/* ---- --reuse ------------------------------------------------------------ */

/* A phase that is one step (reading, checking): said once at its start. */
static void progress_phase(run_ctx *c, int phase, const char *what)
{
    if (!c->o->progress)
        return;
    pn_progress p = { phase, 0, c->job ? c->job->plan->n_tensors : 0, what, 0, 0, 0.0 };
    c->o->progress(&p, c->o->user);
}

/* Which tensors are copied from PREV: matched on the keys and the sampled
 * rows, with --reuse-verify on the whole source tensors, then PREV's bytes
 * checked (not on a dry run, which says what would be copied). */
static pn_status decide_reuse(run_ctx *c, pn_quantize_stats *stats, pn_error *err)
{
    const pn_quantize_opts *o = c->o;
    pn_status st = pn_reuse_match(c->ru, c->job->plan, &c->sid, c->job->quantizer, o, err);
    if (st == PN_OK)
        pn_reuse_drop_imatrix(c->ru, c->job->plan, c->job->imatrix, c->job->imatrix_hash, o);
    if (st == PN_OK && o->reuse_verify && !o->dry_run) {
        double t0 = pn_now_seconds();
        progress_phase(c, PN_PHASE_REUSE_CHECK, "reading the source tensors to copy");
        st = pn_reuse_verify(c->ru, c->job->plan, c->src, &c->sid, c->env.threads, o, err);
        stats->t_verify = pn_now_seconds() - t0;
    }
    if (st == PN_OK && !o->dry_run) {
        double t0 = pn_now_seconds();
        progress_phase(c, PN_PHASE_REUSE_CHECK, "checking PREV's bytes");
        st = pn_reuse_check_prev(c->ru, c->job->plan, c->env.threads, o, err);
        stats->t_reuse_check = pn_now_seconds() - t0;
    }
    if (st != PN_OK)
        return st;
    c->reused = calloc(c->job->plan->n_tensors ? c->job->plan->n_tensors : 1, sizeof *c->reused);
    if (!c->reused)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < c->job->plan->n_tensors; i++) {
        c->reused[i] = copied(c, i);
        if (c->reused[i])
            c->job->rel_error[i] = NAN; /* not computed: the bytes were not made here */
    }
    stats->n_reused = c->ru->n_copy;
    stats->reused_bytes = c->ru->copy_bytes;
    return PN_OK;
}

/* ---- the job ------------------------------------------------------------ */

/* The first line of a reason, without the driver's hint in parentheses. */
static void short_reason(const char *msg, char *buf, size_t size)
{
    const char *s = msg;
    if (strncmp(s, "no CUDA device: ", 16) == 0)
        s += 16;
    size_t n = strcspn(s, "\n(");
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == ';'))
        n--;
    snprintf(buf, size, "%.*s", (int)n, s);
}

static pn_status setup_backend(run_ctx *c, pn_quantize_stats *stats, pn_error *err)
{
    const pn_quantize_opts *o = c->o;
    snprintf(stats->backend, sizeof stats->backend, "cpu (%d thread%s, %s)", c->env.threads,
             c->env.threads == 1 ? "" : "s", pn_path_name(c->env.cpu_path));
    if (o->backend == PN_BACKEND_CPU)
        return PN_OK;
    pn_error cerr;
    pn_error_clear(&cerr);
    pn_status st = o->cuda_emulate ? pn_cuda_open_emulator(&c->cuda, &cerr)
                                   : pn_cuda_open(o->device, &c->cuda, &cerr);
    if (st == PN_OK) {
        snprintf(stats->backend, sizeof stats->backend, "cuda %s", pn_cuda_device_name(c->cuda));
        return PN_OK;
    }
    c->cuda = NULL;
    if (o->backend == PN_BACKEND_CUDA)
        return pn_error_set(err, st, "--backend cuda: %s", cerr.msg);
    if (pn_cuda_build_enabled())
        short_reason(cerr.msg, stats->no_gpu_why, sizeof stats->no_gpu_why);
    return PN_OK;
}

static pn_status resolve_env(const pn_quantize_opts *o, pn_job_env *env, pn_error *err)
{
    env->threads = pn_threads_resolve(o->threads);
    env->cpu_path = o->cpu_path >= 0 ? o->cpu_path : pn_job_best_cpu_path();
    if (!pn_path_available(env->cpu_path) || !pn_hadamard_path_available(env->cpu_path))
        return pn_error_set(err, PN_ERR_USAGE, "CPU path %s is not available on this machine",
                            pn_path_name(env->cpu_path));
    env->chunk_weights = o->chunk_weights > 0 ? o->chunk_weights : PN_CHUNK_WEIGHTS_DEFAULT;
    if (env->chunk_weights < PN_CHUNK_WEIGHTS_MIN || env->chunk_weights > PN_CHUNK_WEIGHTS_MAX)
        return pn_error_set(err, PN_ERR_USAGE, "chunk of %lld weights: expected %lld to %lld",
                            (long long)env->chunk_weights, (long long)PN_CHUNK_WEIGHTS_MIN,
                            (long long)PN_CHUNK_WEIGHTS_MAX);
    return PN_OK;
}

/* The source must be the file it was when opened: same file, size and
 * modification time (a file that shrank while it was read is also caught by
 * the reads themselves). */
static pn_status check_source_unchanged(const char *path, const struct stat *before, pn_error *err)
{
    struct stat now;
    if (stat(path, &now) != 0)
        return pn_error_set(err, PN_ERR_TRUNCATED,
                            "%s: the file changed or shrank during the run: it is gone (%s)", path,
                            strerror(errno));
    if (now.st_dev != before->st_dev || now.st_ino != before->st_ino ||
        now.st_size != before->st_size || now.st_mtim.tv_sec != before->st_mtim.tv_sec ||
        now.st_mtim.tv_nsec != before->st_mtim.tv_nsec)
        return pn_error_set(err, PN_ERR_TRUNCATED,
                            "%s: the file changed or shrank during the run: it was %lld bytes "
                            "when opened and is now %lld%s",
                            path, (long long)before->st_size, (long long)now.st_size,
                            now.st_size == before->st_size ? ", modified" : "");
    return PN_OK;
}

/* A split source: every split's file as it is once the set is open, to be
 * checked the same way at the end (the named file's is taken before). */
static pn_status stat_source_splits(run_ctx *c, pn_error *err)
{
    const size_t n = gguf_reader_n_splits(c->src);
    if (n < 2)
        return PN_OK;
    c->split_stats = calloc(n, sizeof *c->split_stats);
    if (!c->split_stats)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    for (size_t s = 0; s < n; s++) {
        const char *path = gguf_reader_name(gguf_reader_split(c->src, s));
        if (stat(path, &c->split_stats[s]) != 0)
            return pn_error_set(err, PN_ERR_TRUNCATED,
                                "%s: the file changed or shrank during the run: it is gone (%s)",
                                path, strerror(errno));
    }
    return PN_OK;
}

/* The output's model writer (keys and tensors as one file) and the set of
 * files it is written as. */
static pn_status make_output(run_ctx *c, pn_error *err)
{
    const pn_quantize_opts *o = c->o;
    if (o->split_index >= 0 && !pn_quantize_split_output(o))
        return pn_error_set(err, PN_ERR_USAGE,
                            "--split-index needs a split output: --split-max-size, "
                            "--split-max-tensors or --keep-split");
    pn_status st = pn_job_plan_writer(c->job, c->src, o->cancel, &c->model, err);
    if (st != PN_OK)
        return st;
    pn_outset_opts oo;
    pn_outset_opts_init(&oo);
    oo.limit = o->split;
    oo.keep_split = o->keep_split ? (c->src_set ? c->src_set : c->src) : NULL;
    oo.keep_split_view = o->keep_split && c->src_set ? c->src : NULL;
    oo.only = o->split_index;
    oo.force = o->force;
    /* every split records its own tensors' entries: the CRCs of what is
     * written, and of the source (patched as each split closes) */
    oo.n_per_tensor = 4;
    oo.per_tensor_key[0] = PN_KEY_TENSOR_CRC;
    oo.per_tensor_values[0] = c->crcs;
    oo.per_tensor_key[1] = PN_KEY_SOURCE_SAMPLE_CRC;
    oo.per_tensor_values[1] = c->sid.samples_known ? c->sid.sample_crc : c->rd_sample;
    oo.per_tensor_key[2] = PN_KEY_SOURCE_TENSOR_CRC;
    oo.per_tensor_values[2] = c->sid.tensor_crc;
    oo.per_tensor_key[3] = PN_KEY_SOURCE_TYPE; /* known from the start: the model's values */
    oo.per_tensor_values[3] = NULL;
    const uint64_t drop = o->testing && o->testing->drop_behind_bytes
                              ? o->testing->drop_behind_bytes
                              : PN_DROP_BEHIND_BYTES;
    oo.writeback_bytes = drop < 4 * PN_WRITEBACK_BYTES ? drop / 4 + 1 : PN_WRITEBACK_BYTES;
    oo.drop_behind_bytes = drop;
    st = pn_outset_make(c->model, o->dst_path, &oo, &c->out, err);
    if (st == PN_OK && pn_outset_plan_note(c->out))
        pn_quantize_note(o, "%s", pn_outset_plan_note(c->out));
    return st;
}

/* DST a folder, the plan made: named->dst_path becomes the file in it
 * (*dst_auto, owned by the caller), checked as any DST. */
static pn_status name_dst_in_folder(run_ctx *c, pn_quantize_opts *named, char **dst_auto,
                                    struct stat *src_stat, pn_error *err)
{
    pn_status st = pn_quantize_dst_in_folder(named->dst_path, c->src, named->src_path,
                                             c->job->mix_label, dst_auto, err);
    if (st != PN_OK)
        return st;
    named->dst_path = *dst_auto;
    return pn_quantize_check_paths(named, src_stat, err);
}

/* The source opened (MTP dropped if asked) and checked: the measurement
 * path, every tensor a float one; its identity made, its sampled rows
 * read when --reuse decides on them, its splits' stat kept for the end. */
static pn_status open_source(run_ctx *c, pn_quantize_stats *stats, pn_error *err)
{
    const pn_quantize_opts *o = c->o;
    bool drop_mtp = false;
    pn_status st = pn_job_drop_mtp(o, &drop_mtp, err);
    pn_source_opts so = { drop_mtp, o->tokenizer_pre };
    if (st == PN_OK)
        st = pn_source_open(o->src_path, &so, &c->src, err);
    /* --keep-split of a split set read without its MTP layer: the view is
     * one file; the set itself says where each tensor goes */
    if (st == PN_OK && o->keep_split && drop_mtp && !pn_source_is_hf(o->src_path) &&
        gguf_reader_n_splits(c->src) < 2 && gguf_reader_n_tensors(c->src) > 0 &&
        (st = gguf_reader_open(o->src_path, &c->src_set, err)) == PN_OK &&
        gguf_reader_n_splits(c->src_set) < 2) {
        gguf_reader_close(c->src_set);
        c->src_set = NULL;
    }
    if (st != PN_OK)
        return st;
    st = pn_quantize_check_measurement_path(o, c->src, err);
    if (st != PN_OK)
        return st;
    for (size_t i = 0; i < gguf_reader_n_tensors(c->src); i++) {
        const gguf_tensor_info *info = gguf_reader_tensor(c->src, i);
        if (!pn_type_is_float(info->type)) {
            const pn_type_traits *tt = pn_type_traits_get(info->type);
            return pn_error_set(err, PN_ERR_TYPE,
                                "%s: tensor %s is already quantized (%s); pn-quantize needs a "
                                "F32, F16 or BF16 source",
                                o->src_path, info->name, tt ? tt->name : "unknown type");
        }
    }
    st = pn_source_id_init(&c->sid, c->src, err);
    if (st != PN_OK)
        return st;
    if (c->ru) {
        /* what to copy is decided on the sampled rows: read them first */
        double ti = pn_now_seconds();
        progress_phase(c, PN_PHASE_IDENTITY, "reading the sampled rows");
        st = pn_source_id_read_samples(&c->sid, c->src, c->env.threads, o->cancel, err);
        stats->t_identity = pn_now_seconds() - ti;
        if (st != PN_OK)
            return st;
    }
    return stat_source_splits(c, err);
}

/* The output written: begun, every tensor streamed into it, closed (the
 * splits closed during the stream had their per-tensor keys patched then;
 * the last one here). The writer's notes are said as they come. */
static pn_status write_output(run_ctx *c, pn_quantize_stats *stats, pn_error *err)
{
    const pn_quantize_opts *o = c->o;
    pn_status st = pn_outset_begin(c->out, err);
    if (st != PN_OK)
        return st;
    if (pn_outset_notes(c->out))
        pn_quantize_note(o, "%s", pn_outset_notes(c->out));
    for (size_t i = 0; i < c->job->plan->n_tensors; i++)
        if (pn_outset_writes_tensor(c->out, i))
            c->weights_total += (uint64_t)c->job->plan->tensors[i].n_weights;
    st = stream_tensors(c, stats, err);
    if (st != PN_OK)
        return st;
    double tf = pn_now_seconds();
    const char *had_notes = pn_outset_notes(c->out);
    st = pn_outset_close(c->out, err);
    stats->t_flush = pn_now_seconds() - tf;
    if (st != PN_OK)
        return st;
    if (pn_outset_notes(c->out) && pn_outset_notes(c->out) != had_notes)
        pn_quantize_note(o, "%s", pn_outset_notes(c->out));
    return PN_OK;
}

/* The source, and each split of a set, as it was when opened (src_stat:
 * the path's). */
static pn_status check_sources_unchanged(const run_ctx *c, const struct stat *src_stat,
                                         pn_error *err)
{
    pn_status st = check_source_unchanged(c->o->src_path, src_stat, err);
    for (size_t s = 0; st == PN_OK && c->split_stats && s < gguf_reader_n_splits(c->src); s++)
        st = check_source_unchanged(gguf_reader_name(gguf_reader_split(c->src, s)),
                                    &c->split_stats[s], err);
    return st;
}

/* What is asked, before any work: the threads, the paths (SRC's stat into
 * src_stat), the options that need others. */
static pn_status check_request(run_ctx *c, pn_quantize_stats *stats, struct stat *src_stat,
                               pn_error *err)
{
    const pn_quantize_opts *o = c->o;
    pn_status st = resolve_env(o, &c->env, err);
    if (st != PN_OK)
        return st;
    stats->threads = c->env.threads;
    st = pn_quantize_check_paths(o, src_stat, err);
    if (st == PN_OK && o->reuse_verify && !o->reuse_path)
        st = pn_error_set(err, PN_ERR_USAGE, "--reuse-verify needs --reuse PREV");
    return st;
}

pn_status pn_quantize_file(const pn_quantize_opts *given, pn_quantize_stats *stats, pn_error *err)
{
    pn_quantize_stats local;
    if (!stats)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    /* the options, with DST a folder made a file in it once the plan names the mix */
    pn_quantize_opts named = *given;
    const pn_quantize_opts *o = &named;
    char *dst_auto = NULL;
    const bool dst_folder = pn_quantize_is_folder(given->dst_path);
    run_ctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    double t_begin = pn_now_seconds();

    /* one exit path, at out: every failure goes there, so that what is
     * open (the CUDA context, PREV, the source, the output's temporary
     * files) is closed whichever step fails */
    struct stat src_stat;
    pn_status st = check_request(&c, stats, &src_stat, err);
    if (st != PN_OK)
        goto out;
    /* --backend cuda asked for: a GPU that cannot be used is said before
     * any work, not after the measurement and the plan */
    bool backend_ready = false;
    if (o->backend == PN_BACKEND_CUDA && !o->dry_run) {
        st = setup_backend(&c, stats, err);
        if (st != PN_OK)
            goto out;
        backend_ready = true;
    }
    if (o->reuse_path) {
        /* PREV is refused at once when it cannot be one */
        st = pn_reuse_open(o->reuse_path, &c.ru, err);
        if (st != PN_OK)
            goto out; /* the CUDA context opened above is closed there */
    }
    st = open_source(&c, stats, err);
    if (st != PN_OK)
        goto out;

    /* plan */
    double t0 = pn_now_seconds();
    st = pn_job_plan_make(o, c.src, &c.env, &c.sid, &c.job, stats, err);
    stats->t_plan = pn_now_seconds() - t0 - stats->t_measure;
    if (st != PN_OK)
        goto out;
    snprintf(stats->mix_name, sizeof stats->mix_name, "%s", c.job->mix_label);
    if (dst_folder && (st = name_dst_in_folder(&c, &named, &dst_auto, &src_stat, err)) != PN_OK)
        goto out;
    stats->weights = c.job->weights;
    stats->n_promoted = (int)c.job->plan->n_promoted;
    /* the output: one file or a split set, planned on the dry run too */
    c.crcs = calloc(c.job->plan->n_tensors ? c.job->plan->n_tensors : 1, sizeof *c.crcs);
    c.rd_sample = calloc(c.job->plan->n_tensors ? c.job->plan->n_tensors : 1, sizeof *c.rd_sample);
    if (!c.crcs || !c.rd_sample) {
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        goto out;
    }
    st = make_output(&c, err);
    if (st == PN_OK)
        st = pn_readback_init(&c.rb, c.out, c.job->plan->tensors, c.crcs, c.job->plan->n_tensors,
                              c.env.threads, o->cancel, err);
    if (st != PN_OK)
        goto out;
    stats->file_bytes = pn_outset_written_bytes(c.out);
    if (c.ru) {
        st = decide_reuse(&c, stats, err);
        if (st != PN_OK)
            goto out;
    }
    /* the files the output set would write: a dry run that names DST
     * refuses what the real run would (an existing file, a source's) */
    if (o->dst_path && (st = pn_outset_check_targets(c.out, c.src, err)) != PN_OK)
        goto out;
    if (o->dry_run) {
        stats->t_total = pn_now_seconds() - t_begin;
        snprintf(stats->backend, sizeof stats->backend, "none (dry run)");
        st = hand_result(&c, stats, err);
        goto out;
    }
    /* the plan's exact bytes, before the first one is written */
    if ((st = pn_check_free_space(o->dst_path, pn_outset_written_bytes(c.out), err)) != PN_OK)
        goto out;
    if (cancelled(o)) {
        st = interrupted(err);
        goto out;
    }

    if (!backend_ready)
        st = setup_backend(&c, stats, err);
    if (st != PN_OK)
        goto out;

    st = write_output(&c, stats, err);
    if (st != PN_OK)
        goto out;
    if (cancelled(o)) {
        st = interrupted(err);
        goto out;
    }
    st = check_sources_unchanged(&c, &src_stat, err);
    if (st != PN_OK)
        goto out;
    /* the source is read: its buffers go before the output's are made */
    gguf_reader_close(c.src);
    c.src = NULL;
    gguf_reader_close(c.src_set);
    c.src_set = NULL;

    /* validate, then put in place */
    st = validate_output(&c, stats, err);
    if (st != PN_OK)
        goto out;
    if (cancelled(o)) {
        st = interrupted(err);
        goto out;
    }
    stats->t_total = pn_now_seconds() - t_begin;
    st = hand_result(&c, stats, err);
    if (st != PN_OK)
        goto out;
    /* without --force, an output that appeared meanwhile is refused and left
     * as it is (the writer commits by linking, never by replacing); a set
     * is committed whole, its first split last */
    st = pn_outset_commit(c.out, err);
    stats->t_total = pn_now_seconds() - t_begin;

out:
    pn_readback_free(&c.rb);
    pn_outset_free(c.out); /* aborts what is not committed */
    gguf_writer_free(c.model);
    free(c.split_stats);
    if (c.cuda)
        pn_cuda_close(c.cuda);
    free(c.crcs);
    free(c.rd_sample);
    free(c.reused);
    pn_job_plan_free(c.job);
    gguf_reader_close(c.src);
    gguf_reader_close(c.src_set);
    pn_source_id_free(&c.sid);
    /* PREV is read until the output is committed (it may be DST) */
    pn_reuse_free(c.ru);
    free(dst_auto);
    return st;
}
