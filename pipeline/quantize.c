/* The pn-quantize job. Order of work:
 *   1. open the source, refuse what cannot be quantized (already quantized
 *      tensors, DST == SRC, DST present without --force);
 *   2. plan: recipe -> types, rotation, promotions (measurement, list or
 *      target size), header and file size;
 *   3. stream every tensor in source order into a temporary file;
 *   4. re-open the temporary file, validate it, rename it onto DST.
 */
#include "pipeline/quantize.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "gguf/gguf.h"
#include "hadamard/hadamard.h"
#include "pipeline/plan_build.h"
#include "pipeline/tensor_job.h"
#include "quant/pn.h"
#include "quant/pn_cuda.h"
#include "quant/types.h"

/* Rows are processed in chunks of about this many weights (16 MiB of
 * floats): large enough to keep both cores busy, small enough that memory
 * stays a few chunk buffers whatever the model size. PN_CHUNK_WEIGHTS in the
 * environment overrides it (tests use tiny chunks to exercise chunking; the
 * bytes written never depend on it). */
#define PN_CHUNK_WEIGHTS_DEFAULT ((int64_t)4 << 20)

static int64_t chunk_weights(void)
{
    const char *v = getenv("PN_CHUNK_WEIGHTS");
    long long n = v ? atoll(v) : 0;
    return n > 0 ? (int64_t)n : PN_CHUNK_WEIGHTS_DEFAULT;
}

void pn_quantize_opts_init(pn_quantize_opts *o)
{
    memset(o, 0, sizeof *o);
    o->promote = -1;
    o->rotation_cap = -1;
    o->backend = PN_BACKEND_AUTO;
}

static void note(const pn_quantize_opts *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void note(const pn_quantize_opts *o, const char *fmt, ...)
{
    if (!o->note)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    o->note(buf, o->user);
}

static bool cancelled(const pn_quantize_opts *o) { return o->cancel && *o->cancel; }

/* Asks the kernel to start reading the source bytes that follow file offset
 * `from`, so the disk works while the cores search (the source is read in
 * file order). */
#define PN_READAHEAD_BYTES ((uint64_t)96 << 20)
static void prefetch_after(const gguf_reader *r, uint64_t from)
{
    gguf_reader_advise(r, from, PN_READAHEAD_BYTES, true);
}

static pn_status check_paths(const pn_quantize_opts *o, pn_error *err)
{
    struct stat ss, ds;
    if (stat(o->src_path, &ss) != 0)
        return pn_error_set(err, PN_ERR_IO, "%s: cannot open source: %s", o->src_path,
                            strerror(errno));
    if (!o->dst_path)
        return o->dry_run ? PN_OK : pn_error_set(err, PN_ERR_USAGE, "no output file given");
    if (strcmp(o->src_path, o->dst_path) == 0 ||
        (stat(o->dst_path, &ds) == 0 && ds.st_dev == ss.st_dev && ds.st_ino == ss.st_ino))
        return pn_error_set(err, PN_ERR_USAGE,
                            "%s: the output is the source file; choose another output path",
                            o->dst_path);
    if (o->dry_run)
        return PN_OK;
    if (stat(o->dst_path, &ds) == 0) {
        if (!o->force)
            return pn_error_set(err, PN_ERR_EXISTS,
                                "%s: output exists; use --force to replace it", o->dst_path);
        if (S_ISDIR(ds.st_mode))
            return pn_error_set(err, PN_ERR_IO, "%s: output is a directory", o->dst_path);
    }
    return PN_OK;
}

/* ---- the streaming pass ---------------------------------------------- */

typedef struct run_ctx {
    const pn_quantize_opts *o;
    gguf_reader *src;
    pn_job_plan *plan;
    gguf_writer *w;
    int threads;
    pn_cuda_ctx *cuda;       /* NULL: CPU */
    uint32_t *crcs;
    pn_phase_times times;
    double t_write, t_crc;
    uint64_t weights_done, weights_total;
    double t_start;
} run_ctx;

static void progress(run_ctx *c, int phase, size_t i, const char *name)
{
    if (!c->o->progress)
        return;
    pn_progress p = {phase, i, c->plan->n, name, c->weights_done, c->weights_total,
                     pn_now_seconds() - c->t_start};
    c->o->progress(&p, c->o->user);
}

static pn_status emit(run_ctx *c, size_t ti, const uint8_t *data, size_t n, pn_error *err)
{
    double t0 = pn_now_seconds();
    c->crcs[ti] = (uint32_t)crc32_z(c->crcs[ti], data, n);
    double t1 = pn_now_seconds();
    pn_status st = gguf_writer_write(c->w, data, n, err);
    c->t_crc += t1 - t0;
    c->t_write += pn_now_seconds() - t1;
    return st;
}

static pn_status row_error(pn_status st, const char *file, const char *tensor, int64_t row,
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

/* One tensor's place in the source and in the output. */
typedef struct tensor_io {
    size_t index;
    pn_plan_tensor *t;
    const gguf_tensor_info *info;
    uint64_t src_at;             /* file offset of the tensor's data */
    uint8_t *raw;                /* a chunk of source rows as read */
    int64_t K, rows, src_row, out_row;
    double t0;
} tensor_io;

static pn_status tensor_io_begin(run_ctx *c, size_t ti, tensor_io *io, pn_row_chunk *ch,
                                 pn_error *err)
{
    io->index = ti;
    io->t = &c->plan->t[ti];
    io->info = gguf_reader_tensor(c->src, ti);
    io->src_at = gguf_reader_tensor_file_offset(c->src, ti);
    io->K = io->info->ne[0];
    io->rows = (int64_t)((uint64_t)io->t->n_weights / (uint64_t)io->K);
    io->src_row = pn_type_row_bytes(io->info->type, io->K);
    io->out_row = pn_type_row_bytes(io->t->type, io->K);
    io->t0 = pn_now_seconds();
    pn_status st = pn_row_chunk_init(ch, io->K, chunk_weights(), c->threads);
    if (st != PN_OK)
        return pn_error_set(err, st, "out of memory for rows of %lld weights", (long long)io->K);
    io->raw = malloc((size_t)(ch->max_rows * io->src_row));
    if (!io->raw) {
        pn_row_chunk_free(ch);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory for rows of %lld weights",
                            (long long)io->K);
    }
    return PN_OK;
}

/* Rows [r0, r0+n) into ch->rows: widened and checked, dropped from the
 * mapping, the next ones read ahead, rotated when the tensor is PN. */
static pn_status load_rows(run_ctx *c, const tensor_io *io, pn_row_chunk *ch, int64_t r0,
                           int64_t n, pn_error *err)
{
    int64_t br = 0, bc = 0;
    double t0 = pn_now_seconds();
    pn_status st = gguf_reader_read_tensor(c->src, io->index, (uint64_t)(r0 * io->src_row),
                                           io->raw, (size_t)(n * io->src_row), err);
    c->times.read += pn_now_seconds() - t0;
    if (st != PN_OK)
        return st;
    prefetch_after(c->src, io->src_at + (uint64_t)((r0 + n) * io->src_row));
    st = pn_chunk_widen(ch, io->info->type, io->raw, n, &br, &bc, &c->times);
    if (st != PN_OK)
        return row_error(st, c->o->src_path, io->t->name, r0 + br, bc, err);
    if (io->t->rotation_block > 1)
        pn_chunk_rotate(ch, n, io->t->rotation_block, &c->times);
    return PN_OK;
}

/* The CUDA form of process_tensor for PN tensors: chunk i is widened and
 * rotated straight into the pinned buffer of slot i%2 and submitted; while
 * the GPU searches it, the host collects chunk i-1 from the other slot,
 * measures its error and writes it out, then prepares chunk i+1 there. */
static pn_status process_tensor_cuda(run_ctx *c, size_t ti, pn_error *err)
{
    tensor_io io;
    pn_row_chunk ch;
    pn_status st = tensor_io_begin(c, ti, &io, &ch, err);
    if (st != PN_OK)
        return st;
    pn_plan_tensor *t = io.t;
    const int64_t K = io.K, rows = io.rows, out_row = io.out_row;
    int64_t per = pn_cuda_max_rows(c->cuda, K);
    if (per > ch.max_rows)
        per = ch.max_rows;
    float *own_rows = ch.rows;
    int64_t pending_n[PN_CUDA_SLOTS];
    for (int s = 0; s < PN_CUDA_SLOTS; s++)
        pending_n[s] = 0;
    double num = 0.0, den = 0.0;
    int64_t br = 0, bc = 0;
    int slot = 0;
    for (int64_t r0 = 0; st == PN_OK && (r0 < rows || pending_n[0] || pending_n[1]);) {
        if (cancelled(c->o)) {
            st = pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
            break;
        }
        /* prepare and submit the next chunk on `slot` */
        if (r0 < rows) {
            int64_t n = rows - r0 < per ? rows - r0 : per;
            ch.rows = pn_cuda_slot_input(c->cuda, slot);
            st = load_rows(c, &io, &ch, r0, n, err);
            if (st != PN_OK)
                break;
            st = pn_cuda_submit(c->cuda, slot, t->type, ch.rows, n, K, r0, err);
            if (st != PN_OK)
                break;
            pending_n[slot] = n;
            r0 += n;
        }
        /* collect the other slot's chunk (submitted before this one) */
        int other = (slot + 1) % PN_CUDA_SLOTS;
        int take = pending_n[other] ? other : (r0 >= rows && pending_n[slot] ? slot : -1);
        if (take >= 0) {
            double tq = pn_now_seconds();
            st = pn_cuda_collect(c->cuda, take, NULL, &br, &bc, err);
            c->times.quantize += pn_now_seconds() - tq;
            int64_t n = pending_n[take];
            pending_n[take] = 0;
            if (st == PN_ERR_NONFINITE || st == PN_ERR_SCALE_OVERFLOW) {
                row_error(st, c->o->src_path, t->name, br, bc, err);
                break;
            }
            if (st != PN_OK)
                break;
            const uint8_t *blocks = pn_cuda_slot_output(c->cuda, take);
            pn_row_chunk view = ch;
            view.rows = pn_cuda_slot_input(c->cuda, take);
            pn_chunk_error(&view, t->type, n, blocks, &num, &den, &c->times);
            st = emit(c, ti, blocks, (size_t)(n * out_row), err);
            c->weights_done += (uint64_t)(n * K);
            progress(c, PN_PHASE_QUANTIZE, ti, t->name);
        }
        slot = other;
    }
    /* leave no slot busy, whatever happened */
    for (int s = 0; s < PN_CUDA_SLOTS; s++)
        if (pending_n[s])
            pn_cuda_collect(c->cuda, s, NULL, NULL, NULL, NULL);
    ch.rows = own_rows;
    pn_row_chunk_free(&ch);
    free(io.raw);
    c->plan->rel_error[ti] = den > 0.0 ? num / den : 0.0;
    c->plan->seconds[ti] = pn_now_seconds() - io.t0;
    return st;
}

static pn_status process_tensor(run_ctx *c, size_t ti, pn_error *err)
{
    if (c->cuda && pn_type_is_pn(c->plan->t[ti].type))
        return process_tensor_cuda(c, ti, err);

    tensor_io io;
    pn_row_chunk ch;
    pn_status st = tensor_io_begin(c, ti, &io, &ch, err);
    if (st != PN_OK)
        return st;
    pn_plan_tensor *t = io.t;
    const int64_t K = io.K, rows = io.rows, out_row = io.out_row;
    uint8_t *out = malloc((size_t)(ch.max_rows * out_row));
    if (!out) {
        pn_row_chunk_free(&ch);
        free(io.raw);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory for output rows");
    }
    double num = 0.0, den = 0.0;
    for (int64_t r0 = 0; r0 < rows && st == PN_OK; r0 += ch.max_rows) {
        if (cancelled(c->o)) {
            st = pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
            break;
        }
        int64_t n = rows - r0 < ch.max_rows ? rows - r0 : ch.max_rows;
        int64_t br = 0, bc = 0;
        st = load_rows(c, &io, &ch, r0, n, err);
        if (st != PN_OK)
            break;
        st = pn_chunk_quantize(&ch, t->type, n, out, &num, &den, &br, &bc, &c->times);
        if (st != PN_OK) {
            row_error(st, c->o->src_path, t->name, r0 + br, bc, err);
            break;
        }
        st = emit(c, ti, out, (size_t)(n * out_row), err);
        c->weights_done += (uint64_t)(n * K);
        progress(c, PN_PHASE_QUANTIZE, ti, t->name);
    }
    free(out);
    free(io.raw);
    pn_row_chunk_free(&ch);
    c->plan->rel_error[ti] = den > 0.0 ? num / den : 0.0;
    c->plan->seconds[ti] = pn_now_seconds() - io.t0;
    return st;
}

/* ---- validation of the written file ------------------------------------ */

static pn_status validate_output(run_ctx *c, const char *path, pn_error *err)
{
    gguf_reader *r = NULL;
    pn_status st = gguf_reader_open_fd(gguf_writer_fd(c->w), path, &r, err);
    if (st != PN_OK)
        return pn_error_prefix(err, "validating the written file");
    uint8_t *buf = malloc((size_t)PN_BLOCK_BYTES << 18);
    if (!buf) {
        gguf_reader_close(r);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory validating %s", path);
    }
    if (gguf_reader_n_tensors(r) != c->plan->n) {
        st = pn_error_set(err, PN_ERR_MISMATCH, "%s: %zu tensors written, %zu expected", path,
                          gguf_reader_n_tensors(r), c->plan->n);
        goto done;
    }
    for (size_t i = 0; i < c->plan->n && st == PN_OK; i++) {
        const pn_plan_tensor *t = &c->plan->t[i];
        const gguf_tensor_info *info = gguf_reader_tensor(r, i);
        if (strcmp(info->name, t->name) != 0 || info->type != t->type ||
            info->size != t->bytes) {
            st = pn_error_set(err, PN_ERR_MISMATCH,
                              "%s: tensor %zu is %s (type %d, %llu bytes), expected %s (type "
                              "%d, %llu bytes)",
                              path, i, info->name, info->type, (unsigned long long)info->size,
                              t->name, t->type, (unsigned long long)t->bytes);
            break;
        }
        /* CRC and PN blocks are checked in slices read with pread, so memory
         * stays one slice whatever the tensor's size. */
        const uint64_t slice = (uint64_t)PN_BLOCK_BYTES << 18;   /* 8.5 MiB, whole blocks */
        uint32_t crc = (uint32_t)crc32_z(0, NULL, 0);
        const int64_t K = info->ne[0];
        const bool pn = pn_type_is_pn(t->type);
        const int64_t blocks_per_row = pn ? K / pn_params_get(t->type)->group : 1;
        int64_t bad_row = -1, bad_block = 0;
        pn_status bad_st = PN_OK;
        for (uint64_t off = 0; off < info->size && st == PN_OK && bad_row < 0; off += slice) {
            uint64_t n = info->size - off < slice ? info->size - off : slice;
            st = gguf_reader_read_tensor(r, i, off, buf, (size_t)n, err);
            if (st != PN_OK)
                break;
            crc = (uint32_t)crc32_z(crc, buf, n);
            if (pn) {
                int64_t bb = 0;
                pn_status rs = pn_validate_row(t->type, buf,
                                               (int64_t)(n / PN_BLOCK_BYTES) *
                                                   pn_params_get(t->type)->group,
                                               &bb);
                if (rs != PN_OK) {
                    int64_t gb = (int64_t)(off / PN_BLOCK_BYTES) + bb;
                    bad_row = gb / blocks_per_row;
                    bad_block = gb % blocks_per_row;
                    bad_st = rs;
                }
            }
        }
        if (st != PN_OK)
            break;
        if (bad_row >= 0)
            st = pn_error_set(err, bad_st, "%s: tensor %s, row %lld, block %lld: %s", path,
                              t->name, (long long)bad_row, (long long)bad_block,
                              pn_strerror(bad_st));
        else if (crc != c->crcs[i])
            st = pn_error_set(err, PN_ERR_CRC,
                              "%s: tensor %s: CRC-32 of the written data is %08x, computed "
                              "%08x while writing",
                              path, t->name, crc, c->crcs[i]);
    }
done:
    free(buf);
    gguf_reader_close(r);
    return st;
}

/* ---- report ------------------------------------------------------------ */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static pn_status write_report(const pn_quantize_opts *o, const pn_job_plan *p,
                              const gguf_reader *src, const pn_quantize_stats *s,
                              pn_error *err)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp", o->report_path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return pn_error_set(err, PN_ERR_IO, "%s: cannot write the report: %s", tmp,
                            strerror(errno));
    fprintf(f, "{\n  \"source\": ");
    json_str(f, o->src_path);
    fprintf(f, ",\n  \"output\": ");
    json_str(f, o->dst_path ? o->dst_path : "");
    fprintf(f, ",\n  \"mix\": ");
    json_str(f, s->mix_name);
    fprintf(f, ",\n  \"backend\": ");
    json_str(f, s->backend);
    fprintf(f, ",\n  \"dry_run\": %s,\n  \"file_bytes\": %llu,\n  \"weights\": %llu,\n",
            o->dry_run ? "true" : "false", (unsigned long long)s->file_bytes,
            (unsigned long long)s->weights);
    fprintf(f,
            "  \"seconds\": {\"total\": %.3f, \"plan\": %.3f, \"measure\": %.3f, \"read\": %.3f, "
            "\"rotate\": %.3f, \"quantize\": %.3f, \"error\": %.3f, \"write\": %.3f, "
            "\"crc\": %.3f, \"validate\": %.3f},\n",
            s->t_total, s->t_plan, s->t_measure, s->t_read, s->t_rotate, s->t_quantize,
            s->t_error, s->t_write, s->t_crc, s->t_validate);
    fprintf(f, "  \"promoted\": [");
    int k = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->t[i].promoted) {
            fprintf(f, "%s", k++ ? ", " : "");
            json_str(f, p->t[i].name);
        }
    fprintf(f, "],\n  \"tensors\": [\n");
    for (size_t i = 0; i < p->n; i++) {
        const pn_plan_tensor *t = &p->t[i];
        const gguf_tensor_info *info = gguf_reader_tensor(src, i);
        fprintf(f, "    {\"name\": ");
        json_str(f, t->name);
        fprintf(f, ", \"shape\": [");
        for (uint32_t d = 0; d < info->n_dims; d++)
            fprintf(f, "%s%lld", d ? ", " : "", (long long)info->ne[d]);
        const pn_type_traits *st = pn_type_traits_get(info->type);
        const pn_type_traits *dt = pn_type_traits_get(t->type);
        fprintf(f, "], \"source_type\": \"%s\", \"type\": \"%s\", \"bytes\": %llu, ",
                st ? st->name : "?", dt ? dt->name : "?", (unsigned long long)t->bytes);
        fprintf(f, "\"rotation_block\": %d, \"promoted\": %s, ", t->rotation_block,
                t->promoted ? "true" : "false");
        if (o->dry_run)
            fprintf(f, "\"relative_error\": null, \"seconds\": null}");
        else
            fprintf(f, "\"relative_error\": %.6e, \"seconds\": %.3f}", p->rel_error[i], p->seconds[i]);
        fprintf(f, "%s\n", i + 1 < p->n ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    if (fclose(f) != 0 || rename(tmp, o->report_path) != 0) {
        unlink(tmp);
        return pn_error_set(err, PN_ERR_IO, "%s: cannot write the report: %s", o->report_path,
                            strerror(errno));
    }
    return PN_OK;
}

/* ---- the job ------------------------------------------------------------ */

static pn_status setup_backend(run_ctx *c, pn_quantize_stats *stats, pn_error *err)
{
    const pn_quantize_opts *o = c->o;
    snprintf(stats->backend, sizeof stats->backend, "cpu (%d threads)", c->threads);
    if (o->backend == PN_BACKEND_CPU)
        return PN_OK;
    pn_error cerr;
    pn_error_clear(&cerr);
    /* PN_CUDA_EMULATE=1 runs the kernel's code on the host (tests of this
     * pipeline's GPU path on machines without a GPU; slow) */
    const char *emulate = getenv("PN_CUDA_EMULATE");
    pn_status st = emulate && strcmp(emulate, "1") == 0 ? pn_cuda_open_emulator(&c->cuda, &cerr)
                                                        : pn_cuda_open(o->device, &c->cuda, &cerr);
    if (st == PN_OK) {
        snprintf(stats->backend, sizeof stats->backend, "cuda %s", pn_cuda_device_name(c->cuda));
        return PN_OK;
    }
    c->cuda = NULL;
    if (o->backend == PN_BACKEND_CUDA)
        return pn_error_set(err, st, "--backend cuda: %s", cerr.msg);
    if (pn_cuda_build_enabled())
        note(o, "no usable GPU (%s); using the CPU backend", cerr.msg);
    return PN_OK;
}

pn_status pn_quantize_file(const pn_quantize_opts *o, pn_quantize_stats *stats, pn_error *err)
{
    pn_quantize_stats local;
    if (!stats)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    run_ctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.threads = o->threads > 0 ? o->threads : omp_get_num_procs();
    double t_begin = pn_now_seconds();

    pn_status st = check_paths(o, err);
    if (st != PN_OK)
        return st;
    st = gguf_reader_open(o->src_path, &c.src, err);
    if (st != PN_OK)
        return st;
    for (size_t i = 0; i < gguf_reader_n_tensors(c.src); i++) {
        const gguf_tensor_info *info = gguf_reader_tensor(c.src, i);
        if (!pn_type_is_float(info->type)) {
            const pn_type_traits *tt = pn_type_traits_get(info->type);
            st = pn_error_set(err, PN_ERR_TYPE,
                              "%s: tensor %s is already quantized (%s); pn-quantize needs a "
                              "F32, F16 or BF16 source",
                              o->src_path, info->name, tt ? tt->name : "unknown type");
            goto out;
        }
    }

    /* plan */
    double t0 = pn_now_seconds();
    st = pn_job_plan_make(o, c.src, c.threads, &c.plan, stats, err);
    stats->t_plan = pn_now_seconds() - t0 - stats->t_measure;
    if (st != PN_OK)
        goto out;
    snprintf(stats->mix_name, sizeof stats->mix_name, "%s", c.plan->mix_label);
    stats->file_bytes = c.plan->file_bytes;
    stats->weights = c.plan->weights;
    if (o->plan_out && o->dry_run)
        pn_job_plan_print(c.plan, o->plan_out, o->plan_table);
    if (o->dry_run) {
        stats->t_total = pn_now_seconds() - t_begin;
        snprintf(stats->backend, sizeof stats->backend, "none (dry run)");
        if (o->report_path)
            st = write_report(o, c.plan, c.src, stats, err);
        goto out;
    }

    st = setup_backend(&c, stats, err);
    if (st != PN_OK)
        goto out;

    /* write */
    c.crcs = calloc(c.plan->n ? c.plan->n : 1, sizeof *c.crcs);
    if (!c.crcs) {
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        goto out;
    }
    st = pn_job_plan_writer(c.plan, c.src, &c.w, err);
    if (st != PN_OK)
        goto out;
    gguf_writer_set_replace(c.w, o->force);
    st = gguf_writer_begin(c.w, o->dst_path, err);
    if (st != PN_OK)
        goto out;
    c.weights_total = c.plan->weights;
    c.t_start = pn_now_seconds();
    for (size_t i = 0; i < c.plan->n && st == PN_OK; i++)
        st = process_tensor(&c, i, err);
    if (st != PN_OK)
        goto out;
    st = gguf_writer_patch_arr(c.w, "pn.tensor_crc32", c.crcs, c.plan->n, err);
    if (st == PN_OK)
        st = gguf_writer_close(c.w, err);
    if (st != PN_OK)
        goto out;
    if (cancelled(o)) {
        st = pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
        goto out;
    }

    /* validate, then put in place */
    double tv = pn_now_seconds();
    progress(&c, PN_PHASE_VALIDATE, c.plan->n, "validating");
    st = validate_output(&c, o->dst_path, err);
    stats->t_validate = pn_now_seconds() - tv;
    if (st != PN_OK)
        goto out;
    if (cancelled(o)) {
        st = pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
        goto out;
    }
    st = gguf_writer_commit(c.w, err);
    if (st != PN_OK)
        goto out;
    stats->t_read = c.times.read;
    stats->t_rotate = c.times.rotate;
    stats->t_quantize = c.times.quantize;
    stats->t_error = c.times.error;
    stats->t_write = c.t_write;
    stats->t_crc = c.t_crc;
    stats->n_promoted = (int)c.plan->plan->n_promoted;
    stats->t_total = pn_now_seconds() - t_begin;
    if (o->report_path)
        st = write_report(o, c.plan, c.src, stats, err);
    if (o->plan_out && st == PN_OK)
        pn_job_plan_print(c.plan, o->plan_out, false);

out:
    if (c.w) {
        gguf_writer_abort(c.w);
        gguf_writer_free(c.w);
    }
    if (c.cuda)
        pn_cuda_close(c.cuda);
    free(c.crcs);
    pn_job_plan_free(c.plan);
    gguf_reader_close(c.src);
    return st;
}
