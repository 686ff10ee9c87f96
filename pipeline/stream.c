/* The three-stage chunk stream (see stream.h). One mutex and one condition
 * variable guard five counters; chunk k lives in slot k % n_slots, and its
 * raw f16/bf16 bytes (an f32 chunk is read into its floats) in raw buffer
 * k % N_RAW until the team has widened it:
 *   read_done   chunks 0..read_done-1 are read (or failed to read);
 *   widened     chunks 0..widened-1 are widened: their raw buffers may be
 *               filled again;
 *   finished    chunks 0..finished-1 went through finish;
 *   released    chunks 0..released-1 are written (or finished, without a
 *               writer): their slots may be filled again;
 *   end_seq     the number of chunks, once next has said there are no more.
 * Waits poll the cancel flag every 20 ms: a signal does not wake a
 * condition variable. */
#include "pipeline/stream.h"

#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "quant/pn_fast.h"
#include "quant/types.h"
#include "quant/widen.h"

/* Source bytes are read in pieces of at most this size. */
#define RAW_BYTES ((size_t)4 << 20)
/* Raw buffers of 2-byte chunks: the reader reads chunk k+1 while the team
 * widens chunk k (then chunk k+2 into k's buffer). */
#define N_RAW 2
/* The team widens and CRCs a chunk in slices of about this many weights
 * (each a call of pn_widen_row_checked, which asks the CPU's features). */
#define SLICE_WEIGHTS ((int64_t)1 << 18)
#define TIMES_STRIDE 8 /* doubles per thread: no false sharing */
/* A consecutive 2-byte chunk read directly is read by this many threads at
 * once (the reader and its helpers), each with its own handle: one read in
 * flight leaves a fast device about half idle. */
#define READ_PARTS 2

/* A helper of the reader: reads its part of the reader's current range
 * (gguf_direct_read_tensor_into) when asked, into the same buffer. */
typedef struct read_helper {
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    gguf_direct *direct; /* its own handle */
    int part;
    /* the job, under mu: asked while `busy`; quit when told */
    bool busy, quit;
    size_t tensor;
    uint64_t off;
    size_t n, cap;
    uint8_t *buf;
    pn_status st;
    pn_error err;
} read_helper;

/* One slice's result (calling thread's array, filled by the team). */
typedef struct slice_res {
    pn_status st;
    int64_t bad; /* first non-finite element of the slice */
    pn_crc_part part[PN_STREAM_CRCS];
} slice_res;

typedef struct stream {
    const pn_stream_cfg *cfg;
    const pn_stream_ops *ops;
    pn_chunk *slots;
    int n_slots;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t read_done, widened, finished, released, end_seq;
    bool stop;
    int64_t err_seq;
    pn_error err;

    uint8_t *raw[N_RAW];                 /* raw f16/bf16 bytes of chunks k % N_RAW */
    const uint8_t **slot_src;            /* per slot: where its chunk's source bytes are */
    gguf_direct *direct;                 /* the reader's (cfg.direct_io), or NULL */
    read_helper helpers[READ_PARTS - 1]; /* with direct: parts 1.. of its reads */
    size_t raw_cap;                      /* bytes of each raw buffer */
    int threads;                         /* the widening team */
    double *thread_times;                /* threads x TIMES_STRIDE: widen, source CRCs */
    slice_res *slices;                   /* calling thread's */
    int64_t cap_slices;
    uint64_t advised_end;   /* read-ahead advice given up to this file offset */
    uint32_t advised_split; /* ... of this split's file (a split source) */
    pn_stream_times t;
} stream;

static bool cancelled(const stream *s)
{
    return s->cfg->cancel && *s->cfg->cancel;
}

/* Records the error of chunk seq (kept when it is the earliest) and stops
 * every stage. Call without the lock. */
static void fail(stream *s, int64_t seq, const pn_error *e)
{
    pthread_mutex_lock(&s->mu);
    if (seq < s->err_seq) {
        s->err_seq = seq;
        s->err = *e;
    }
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void fail_interrupted(stream *s, int64_t seq)
{
    pn_error e;
    pn_error_set(&e, PN_ERR_INTERRUPTED, "interrupted by a signal");
    fail(s, seq, &e);
}

/* Waits on the condition for at most 20 ms (the caller re-checks). */
static void wait_a_little(stream *s)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

/* ---- the reader ------------------------------------------------------- */

/* File offsets [at, end) are those of the file of `split` (a split source
 * is several files: the advice follows the one being read). */
static void advise_ahead(stream *s, uint32_t split, uint64_t at, uint64_t end)
{
    uint64_t ra = s->cfg->readahead_bytes;
    if (split != s->advised_split) {
        s->advised_split = split;
        s->advised_end = 0;
    }
    /* direct reads bypass the page cache: advice would only fill it */
    if (!ra || gguf_direct_is_direct(s->direct) || end + ra / 2 <= s->advised_end)
        return;
    uint64_t from = s->advised_end > at ? s->advised_end : at;
    gguf_reader_advise(gguf_reader_split(s->cfg->src, split), from, end + ra - from, true);
    s->advised_end = end + ra;
}

/* Bytes per element of the types the stream widens; 0 for any other. */
static int64_t elem_bytes(int src_type)
{
    return src_type == PN_TYPE_F32                               ? 4
           : src_type == PN_TYPE_F16 || src_type == PN_TYPE_BF16 ? 2
                                                                 : 0;
}

/* Reads the bytes of n elements of tensor c->tensor from element `at` into
 * dst, as they are in the file. */
static pn_status read_range(stream *s, const pn_chunk *c, int64_t at, int64_t n, uint8_t *dst,
                            pn_error *err)
{
    const int64_t elem = elem_bytes(c->src_type);
    const uint64_t file_at = gguf_reader_tensor_file_offset(s->cfg->src, c->tensor);
    advise_ahead(s, gguf_reader_tensor(s->cfg->src, c->tensor)->split,
                 file_at + (uint64_t)(at * elem), file_at + (uint64_t)((at + n) * elem));
    const int64_t per = (int64_t)(RAW_BYTES / (size_t)elem);
    for (int64_t done = 0; done < n;) {
        int64_t k = n - done < per ? n - done : per;
        double t0 = pn_now_seconds();
        pn_status st;
        if (s->direct) {
            const uint8_t *raw = NULL;
            st = gguf_direct_read_tensor(s->direct, c->tensor, (uint64_t)((at + done) * elem),
                                         (size_t)(k * elem), &raw, err);
            if (st == PN_OK)
                memcpy(dst + done * elem, raw, (size_t)(k * elem));
        } else {
            st = gguf_reader_read_tensor(s->cfg->src, c->tensor, (uint64_t)((at + done) * elem),
                                         dst + done * elem, (size_t)(k * elem), err);
        }
        s->t.read += pn_now_seconds() - t0;
        if (st != PN_OK) {
            if (s->cfg->src_path)
                return pn_error_prefix(err, "%s", s->cfg->src_path);
            return st;
        }
        done += k;
    }
    return PN_OK;
}

static void *helper_main(void *arg)
{
    read_helper *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->busy && !h->quit)
            pthread_cond_wait(&h->cv, &h->mu);
        if (h->quit)
            break;
        pthread_mutex_unlock(&h->mu);
        const uint8_t *data = NULL;
        pn_error e;
        pn_error_clear(&e);
        pn_status st = gguf_direct_read_tensor_into(h->direct, h->tensor, h->off, h->n, h->buf,
                                                    h->cap, h->part, READ_PARTS, &data, &e);
        pthread_mutex_lock(&h->mu);
        h->st = st;
        h->err = e;
        h->busy = false;
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* Reads n elements of tensor c->tensor from element `at` with the direct
 * handles, straight into raw buffer `buf` (no copy): the reader reads part
 * 0, its helpers the others, all at once. *data: where the bytes start. A
 * failed part's error is kept, the lowest part's first. */
static pn_status read_range_into(stream *s, const pn_chunk *c, int64_t at, int64_t n, uint8_t *buf,
                                 const uint8_t **data, pn_error *err)
{
    const int64_t elem = elem_bytes(c->src_type);
    const uint64_t off = (uint64_t)(at * elem);
    const size_t bytes = (size_t)(n * elem);
    const uint64_t file_at = gguf_reader_tensor_file_offset(s->cfg->src, c->tensor);
    /* advice only where the reads fell back to the page cache */
    advise_ahead(s, gguf_reader_tensor(s->cfg->src, c->tensor)->split, file_at + off,
                 file_at + off + bytes);
    double t0 = pn_now_seconds();
    for (int h = 0; h < READ_PARTS - 1; h++) {
        read_helper *hp = &s->helpers[h];
        pthread_mutex_lock(&hp->mu);
        hp->tensor = c->tensor;
        hp->off = off;
        hp->n = bytes;
        hp->buf = buf;
        hp->cap = s->raw_cap;
        hp->busy = true;
        pthread_cond_broadcast(&hp->cv);
        pthread_mutex_unlock(&hp->mu);
    }
    pn_status st = gguf_direct_read_tensor_into(s->direct, c->tensor, off, bytes, buf, s->raw_cap,
                                                0, READ_PARTS, data, err);
    for (int h = 0; h < READ_PARTS - 1; h++) {
        read_helper *hp = &s->helpers[h];
        pthread_mutex_lock(&hp->mu);
        while (hp->busy)
            pthread_cond_wait(&hp->cv, &hp->mu);
        if (st == PN_OK && hp->st != PN_OK) {
            st = hp->st;
            if (err)
                *err = hp->err;
        }
        pthread_mutex_unlock(&hp->mu);
    }
    s->t.read += pn_now_seconds() - t0;
    if (st != PN_OK && s->cfg->src_path)
        return pn_error_prefix(err, "%s", s->cfg->src_path);
    return st;
}

/* Reads chunk c's source bytes into dst (row after row); *src: where they
 * are (dst, or inside raw buffer dst for a consecutive 2-byte chunk read
 * directly). */
static pn_status read_chunk(stream *s, pn_chunk *c, uint8_t *dst, const uint8_t **src,
                            pn_error *err)
{
    *src = dst;
    if (c->n_rows == 0)
        return PN_OK; /* bytes from elsewhere: nothing to read, no advice */
    const int64_t elem = elem_bytes(c->src_type);
    if (!c->use_rows && c->col0 == 0 && c->n_cols == c->K) {
        if (s->direct && elem == 2)
            return read_range_into(s, c, c->row0 * c->K, c->n_rows * c->K, dst, src, err);
        return read_range(s, c, c->row0 * c->K, c->n_rows * c->K, dst, err);
    }
    for (int64_t r = 0; r < c->n_rows; r++) {
        if (cancelled(s))
            return pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
        int64_t row = c->use_rows ? c->rows[r] : c->row0 + r;
        pn_status st =
            read_range(s, c, row * c->K + c->col0, c->n_cols, dst + r * c->n_cols * elem, err);
        if (st != PN_OK)
            return st;
    }
    return PN_OK;
}

/* The stream ends at chunk k with error e (kept when it is the earliest):
 * the chunks before k are still computed and written. */
static void end_at(stream *s, int64_t k, const pn_error *e)
{
    pthread_mutex_lock(&s->mu);
    if (e && k < s->err_seq) {
        s->err_seq = k;
        s->err = *e;
    }
    if (s->end_seq < 0 || k < s->end_seq)
        s->end_seq = k;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void *reader_main(void *arg)
{
    stream *s = arg;
    for (int64_t k = 0;; k++) {
        pthread_mutex_lock(&s->mu);
        double t0 = pn_now_seconds();
        /* end_seq set by another stage: the team found a bad weight */
        while (!s->stop && s->end_seq < 0 && k - s->released >= s->n_slots && !cancelled(s))
            wait_a_little(s);
        s->t.wait_output += pn_now_seconds() - t0;
        bool stop = s->stop || s->end_seq >= 0;
        pthread_mutex_unlock(&s->mu);
        if (stop)
            return NULL;
        if (cancelled(s)) {
            fail_interrupted(s, k);
            return NULL;
        }
        pn_chunk *c = &s->slots[k % s->n_slots];
        /* keep the slot's buffers, reset the description */
        float *x = c->x;
        int64_t *rows = c->rows;
        uint8_t *out = c->out;
        double *be = c->blk_err, *bn = c->blk_norm;
        memset(c, 0, sizeof *c);
        c->x = x;
        c->rows = rows;
        c->out = out;
        c->blk_err = be;
        c->blk_norm = bn;
        c->seq = k;
        if (!s->ops->next(s->ops->ctx, c)) {
            end_at(s, k, NULL);
            return NULL;
        }
        pn_error e;
        pn_error_clear(&e);
        pn_status st = PN_OK;
        uint8_t *dst = (uint8_t *)c->x;
        if (c->n_rows > 0 && elem_bytes(c->src_type) == 0) {
            st = pn_error_set(&e, PN_ERR_TYPE, "%s: tensor %s: source type %d cannot be widened",
                              s->cfg->src_path, s->cfg->tensor_names[c->tensor], c->src_type);
        } else if (c->n_rows > 0 && c->src_type != PN_TYPE_F32) {
            /* a raw buffer: free once chunk k - N_RAW is widened */
            pthread_mutex_lock(&s->mu);
            t0 = pn_now_seconds();
            while (!s->stop && s->end_seq < 0 && k - s->widened >= N_RAW && !cancelled(s))
                wait_a_little(s);
            s->t.wait_output += pn_now_seconds() - t0;
            stop = s->stop || s->end_seq >= 0;
            pthread_mutex_unlock(&s->mu);
            if (stop)
                return NULL;
            dst = s->raw[k % N_RAW];
        }
        const uint8_t *src = dst;
        if (st == PN_OK)
            st = read_chunk(s, c, dst, &src, &e);
        s->slot_src[k % s->n_slots] = src;
        if (st != PN_OK) {
            /* the chunks before this one are still computed and written, so
             * an error found in one of them comes first */
            end_at(s, k, &e);
            return NULL;
        }
        pthread_mutex_lock(&s->mu);
        s->read_done = k + 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

/* ---- the writer ------------------------------------------------------- */

static void *writer_main(void *arg)
{
    stream *s = arg;
    for (int64_t k = 0;; k++) {
        pthread_mutex_lock(&s->mu);
        double t0 = pn_now_seconds();
        while (!s->stop && k >= s->finished && !(s->end_seq >= 0 && k >= s->end_seq) &&
               !cancelled(s))
            wait_a_little(s);
        s->t.wait_write += pn_now_seconds() - t0;
        bool stop = s->stop || (s->end_seq >= 0 && k >= s->end_seq && k >= s->finished);
        pthread_mutex_unlock(&s->mu);
        if (stop)
            return NULL;
        if (cancelled(s)) {
            fail_interrupted(s, k);
            return NULL;
        }
        pn_chunk *c = &s->slots[k % s->n_slots];
        pn_error e;
        pn_error_clear(&e);
        double t1 = pn_now_seconds();
        pn_status st = s->ops->write(s->ops->ctx, c, &e);
        s->t.write += pn_now_seconds() - t1;
        if (st != PN_OK) {
            fail(s, k, &e);
            return NULL;
        }
        pthread_mutex_lock(&s->mu);
        s->released = k + 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

/* ---- the calling thread ------------------------------------------------- */

/* The team widens chunk c from its source bytes into c->x and checks every
 * weight, and computes ops.source_crcs of the bytes, in slices: a range of
 * whole consecutive rows is cut anywhere, otherwise each row on its own.
 * The slices' CRCs are joined in order into c->src_crc; a non-finite
 * weight is reported at the first one in the chunk's order. */
static pn_status widen_chunk(stream *s, pn_chunk *c, pn_error *err)
{
    memset(c->src_crc, 0, sizeof c->src_crc);
    if (c->n_rows == 0)
        return PN_OK;
    const uint8_t *raw = s->slot_src[c->seq % s->n_slots];
    const int64_t es = elem_bytes(c->src_type);
    const bool f32 = c->src_type == PN_TYPE_F32;
    const bool consecutive = !c->use_rows && c->col0 == 0 && c->n_cols == c->K;
    const int64_t total = c->n_rows * c->n_cols;
    const int64_t per_row = consecutive ? 0 : (c->n_cols + SLICE_WEIGHTS - 1) / SLICE_WEIGHTS;
    const int64_t n =
        consecutive ? (total + SLICE_WEIGHTS - 1) / SLICE_WEIGHTS : c->n_rows * per_row;
    if (n > s->cap_slices) {
        slice_res *p = realloc(s->slices, (size_t)n * sizeof *p);
        if (!p)
            return pn_error_set(err, PN_ERR_NOMEM, "out of memory for the slices of a chunk");
        s->slices = p;
        s->cap_slices = n;
    }
    const pn_stream_ops *ops = s->ops;
    const int path = s->cfg->cpu_path;
    slice_res *res = s->slices;
#pragma omp parallel for schedule(dynamic, 1) num_threads(s->threads)
    for (int64_t i = 0; i < n; i++) {
        double *tt = s->thread_times + (size_t)omp_get_thread_num() * TIMES_STRIDE;
        int64_t off, len, elem_at;
        if (consecutive) {
            off = i * SLICE_WEIGHTS;
            len = total - off < SLICE_WEIGHTS ? total - off : SLICE_WEIGHTS;
            elem_at = c->row0 * c->K + off;
        } else {
            int64_t r = i / per_row, j = (i % per_row) * SLICE_WEIGHTS;
            int64_t row = c->use_rows ? c->rows[r] : c->row0 + r;
            off = r * c->n_cols + j;
            len = c->n_cols - j < SLICE_WEIGHTS ? c->n_cols - j : SLICE_WEIGHTS;
            elem_at = row * c->K + c->col0 + j;
        }
        const uint8_t *src = raw + off * es;
        slice_res *sr = &res[i];
        double t0 = omp_get_wtime();
        if (f32) {
            /* read into place: the exact floats (little-endian) */
            sr->bad = pn_find_nonfinite(c->x + off, len);
            sr->st = sr->bad < 0 ? PN_OK : PN_ERR_NONFINITE;
        } else {
            sr->st = pn_widen_row_checked(path, c->src_type, src, c->x + off, len, &sr->bad);
        }
        double t1 = omp_get_wtime();
        tt[0] += t1 - t0;
        memset(sr->part, 0, sizeof sr->part);
        if (ops->source_crcs) {
            ops->source_crcs(ops->ctx, c, elem_at, src, len, sr->part);
            tt[1] += omp_get_wtime() - t1;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        const slice_res *sr = &res[i];
        if (sr->st == PN_ERR_NONFINITE) {
            int64_t row, col;
            if (consecutive) {
                int64_t e = i * SLICE_WEIGHTS + sr->bad; /* element of the chunk */
                row = c->row0 + e / c->K;
                col = e % c->K;
            } else {
                int64_t r = i / per_row;
                row = c->use_rows ? c->rows[r] : c->row0 + r;
                col = c->col0 + (i % per_row) * SLICE_WEIGHTS + sr->bad;
            }
            return pn_error_set(err, PN_ERR_NONFINITE,
                                "%s: tensor %s, row %lld, column %lld: NaN or infinite weight",
                                s->cfg->src_path, s->cfg->tensor_names[c->tensor], (long long)row,
                                (long long)col);
        }
        if (sr->st != PN_OK)
            return pn_error_set(err, sr->st, "%s: tensor %s: source type %d cannot be widened",
                                s->cfg->src_path, s->cfg->tensor_names[c->tensor], c->src_type);
        for (int j = 0; j < PN_STREAM_CRCS; j++) {
            if (sr->part[j].len == 0)
                continue;
            c->src_crc[j].crc = (uint32_t)crc32_combine(c->src_crc[j].crc, sr->part[j].crc,
                                                        (z_off_t)sr->part[j].len);
            c->src_crc[j].len += sr->part[j].len;
        }
    }
    return PN_OK;
}

/* Chunk c went through finish: hand it to the writer or release it. */
static void finished_one(stream *s, const pn_chunk *c)
{
    pthread_mutex_lock(&s->mu);
    s->finished = c->seq + 1;
    if (!s->ops->write)
        s->released = c->seq + 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static bool finish_one(stream *s, pn_chunk *c)
{
    pn_error e;
    pn_error_clear(&e);
    pn_status st = s->ops->finish ? s->ops->finish(s->ops->ctx, c, &e) : PN_OK;
    if (c->abandoned)
        return false;
    if (st != PN_OK) {
        fail(s, c->seq, &e);
        return false;
    }
    finished_one(s, c);
    return true;
}

static void compute_loop(stream *s)
{
    pn_chunk *pending = NULL;
    for (int64_t k = 0;; k++) {
        pthread_mutex_lock(&s->mu);
        double t0 = pn_now_seconds();
        while (!s->stop && k >= s->read_done && !(s->end_seq >= 0 && k >= s->end_seq) &&
               !cancelled(s))
            wait_a_little(s);
        s->t.wait_input += pn_now_seconds() - t0;
        bool stop = s->stop;
        bool end = !stop && k >= s->read_done && s->end_seq >= 0 && k >= s->end_seq;
        pthread_mutex_unlock(&s->mu);
        if (stop || end)
            break;
        if (cancelled(s)) {
            fail_interrupted(s, k);
            break;
        }
        pn_chunk *c = &s->slots[k % s->n_slots];
        pn_error e;
        pn_error_clear(&e);
        pn_status st = widen_chunk(s, c, &e);
        pthread_mutex_lock(&s->mu);
        s->widened = k + 1; /* its raw buffer may be filled again */
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        if (st != PN_OK) {
            /* as a read error: the stream ends at k, the chunks before it
             * (a deferred one too) are finished and written */
            if (pending) {
                pn_chunk *p = pending;
                pending = NULL;
                finish_one(s, p);
            }
            end_at(s, k, &e);
            break;
        }
        st = s->ops->compute(s->ops->ctx, c, &e);
        if (pending) {
            /* the deferred chunk comes first, whatever happened to this one */
            pn_chunk *p = pending;
            pending = NULL;
            if (!finish_one(s, p)) {
                if (c->deferred) {
                    c->abandoned = true;
                    s->ops->finish(s->ops->ctx, c, &e);
                }
                break;
            }
        }
        if (st != PN_OK) {
            fail(s, k, &e);
            break;
        }
        if (c->deferred)
            pending = c;
        else if (!finish_one(s, c))
            break;
    }
    if (pending) {
        pthread_mutex_lock(&s->mu);
        pending->abandoned = s->stop;
        pthread_mutex_unlock(&s->mu);
        finish_one(s, pending);
    }
}

pn_status pn_stream_run(const pn_stream_cfg *cfg, const pn_stream_ops *ops, pn_stream_times *t,
                        pn_error *err)
{
    stream s;
    memset(&s, 0, sizeof s);
    s.cfg = cfg;
    s.ops = ops;
    s.n_slots = cfg->n_slots < 2 ? 2 : cfg->n_slots;
    s.end_seq = -1;
    s.err_seq = INT64_MAX;
    pn_status st = PN_OK;
    if (!pn_path_available(cfg->cpu_path))
        return pn_error_set(err, PN_ERR_INTERNAL, "the stream's CPU path %s is not available",
                            pn_path_name(cfg->cpu_path));
    s.threads = cfg->threads < 1 ? 1 : cfg->threads;
    s.slots = calloc((size_t)s.n_slots, sizeof *s.slots);
    s.slot_src = calloc((size_t)s.n_slots, sizeof *s.slot_src);
    s.thread_times = calloc((size_t)s.threads * TIMES_STRIDE, sizeof(double));
    if (cfg->direct_io) {
        st = gguf_direct_open(cfg->src, RAW_BYTES, &s.direct, err);
        for (int h = 0; st == PN_OK && h < READ_PARTS - 1; h++) {
            s.helpers[h].part = h + 1;
            st = gguf_direct_open(cfg->src, RAW_BYTES, &s.helpers[h].direct, err);
        }
        if (st != PN_OK)
            goto done;
    }
    /* aligned, with the slack of a direct read into it */
    s.raw_cap = gguf_direct_into_cap((size_t)cfg->slot_weights * 2);
    bool raw_ok = true;
    for (int i = 0; i < N_RAW; i++) {
        void *p = NULL;
        raw_ok = raw_ok && posix_memalign(&p, 4096, s.raw_cap) == 0;
        s.raw[i] = p;
    }
    if (!s.slots || !s.slot_src || !s.thread_times || !raw_ok) {
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory for the chunk buffers");
        goto done;
    }
    for (int i = 0; i < s.n_slots; i++) {
        pn_chunk *c = &s.slots[i];
        c->x = malloc((size_t)cfg->slot_weights * sizeof(float));
        c->rows = malloc((size_t)(cfg->slot_rows > 0 ? cfg->slot_rows : 1) * sizeof(int64_t));
        c->out = malloc(cfg->slot_out_bytes ? cfg->slot_out_bytes : 1);
        c->blk_err = malloc((size_t)(cfg->slot_blocks > 0 ? cfg->slot_blocks : 1) * sizeof(double));
        c->blk_norm =
            malloc((size_t)(cfg->slot_blocks > 0 ? cfg->slot_blocks : 1) * sizeof(double));
        if (!c->x || !c->rows || !c->out || !c->blk_err || !c->blk_norm) {
            st = pn_error_set(err, PN_ERR_NOMEM,
                              "out of memory for %d chunk buffers of %lld weights", s.n_slots,
                              (long long)cfg->slot_weights);
            goto done;
        }
    }
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    pthread_t reader, writer;
    int rc = 0;
    for (int h = 0; h < READ_PARTS - 1; h++) {
        pthread_mutex_init(&s.helpers[h].mu, NULL);
        pthread_cond_init(&s.helpers[h].cv, NULL);
    }
    for (int h = 0; s.direct && h < READ_PARTS - 1; h++) {
        read_helper *hp = &s.helpers[h];
        rc = pthread_create(&hp->thread, NULL, helper_main, hp);
        if (rc != 0) {
            st = pn_error_set(err, PN_ERR_IO, "cannot start a reader's helper thread: %s",
                              strerror(rc));
            goto destroy;
        }
        hp->started = true;
    }
    rc = pthread_create(&reader, NULL, reader_main, &s);
    if (rc != 0) {
        st = pn_error_set(err, PN_ERR_IO, "cannot start the reader thread: %s", strerror(rc));
        goto destroy;
    }
    bool have_writer = false;
    if (ops->write) {
        rc = pthread_create(&writer, NULL, writer_main, &s);
        if (rc != 0) {
            pn_error e;
            pn_error_set(&e, PN_ERR_IO, "cannot start the writer thread: %s", strerror(rc));
            fail(&s, -1, &e);
        } else {
            have_writer = true;
        }
    }
    compute_loop(&s);
    if (have_writer)
        pthread_join(writer, NULL);
    pthread_mutex_lock(&s.mu);
    s.stop = true; /* the reader may be waiting for a slot nobody frees now */
    pthread_cond_broadcast(&s.cv);
    pthread_mutex_unlock(&s.mu);
    pthread_join(reader, NULL);
    if (s.err_seq != INT64_MAX) {
        st = s.err.code != PN_OK ? s.err.code : PN_ERR_INTERNAL;
        if (err)
            *err = s.err;
    }
destroy:
    for (int h = 0; h < READ_PARTS - 1; h++) {
        read_helper *hp = &s.helpers[h];
        if (!hp->started)
            continue;
        pthread_mutex_lock(&hp->mu);
        hp->quit = true;
        pthread_cond_broadcast(&hp->cv);
        pthread_mutex_unlock(&hp->mu);
        pthread_join(hp->thread, NULL);
    }
    for (int h = 0; h < READ_PARTS - 1; h++) {
        pthread_cond_destroy(&s.helpers[h].cv);
        pthread_mutex_destroy(&s.helpers[h].mu);
    }
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
done:
    if (s.slots)
        for (int i = 0; i < s.n_slots; i++) {
            free(s.slots[i].x);
            free(s.slots[i].rows);
            free(s.slots[i].out);
            free(s.slots[i].blk_err);
            free(s.slots[i].blk_norm);
        }
    free(s.slots);
    free(s.slot_src);
    for (int i = 0; i < N_RAW; i++)
        free(s.raw[i]);
    free(s.slices);
    gguf_direct_close(s.direct);
    for (int h = 0; h < READ_PARTS - 1; h++)
        gguf_direct_close(s.helpers[h].direct);
    if (s.thread_times)
        for (int i = 0; i < s.threads; i++) {
            s.t.widen += s.thread_times[(size_t)i * TIMES_STRIDE] / s.threads;
            s.t.source_crcs += s.thread_times[(size_t)i * TIMES_STRIDE + 1] / s.threads;
        }
    free(s.thread_times);
    if (t)
        *t = s.t;
    return st;
}
