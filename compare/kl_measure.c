/* kl_measure.c - the promotion measurement by KL (kl_measure.h): the base
 * and the all-promoted mix made and decoded once, then each candidate's
 * tensor swapped into the decoded base in place and judged by llama.cpp. */
#include "compare/kl_measure.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/file.h"
#include "common/hash.h"
#include "common/text.h"
#include "common/threads.h"
#include "compare/judge.h"
#include "dequant/dequant.h"
#include "gguf/gguf.h"
#include "io/source_id.h"
#include "io/source_open.h"
#include "pipeline/plan_build.h"
#include "pipeline/quantize_paths.h"
#include "quant/types.h"

#define TEXT_MAX_BYTES ((size_t)64 << 20)
#define COPY_BYTES ((size_t)4 << 20)

/* The candidates of the base plan and what the measurement depends on. */
typedef struct base_plan {
    pn_kl_params want;
    size_t n;        /* candidates */
    char **names;    /* n, tensor order */
    uint64_t *extra; /* n: data bytes promoting each adds */
    uint32_t *crc;   /* n: the source's sampled rows */
    uint32_t n_vocab;
} base_plan;

static void base_plan_free(base_plan *b)
{
    for (size_t i = 0; i < b->n; i++)
        free(b->names[i]);
    free(b->names);
    free(b->extra);
    free(b->crc);
}

static bool cancelled(const pn_kl_opts *o)
{
    return o->c.cancel && *o->c.cancel;
}

/* The dry run's result hook: the plan's candidates, its label and hash. */
static pn_status take_plan(const pn_quantize_result *r, void *user, pn_error *err)
{
    base_plan *b = user;
    const pn_plan *plan = r->plan;
    b->names = calloc(plan->n_candidates ? plan->n_candidates : 1, sizeof *b->names);
    b->extra = calloc(plan->n_candidates ? plan->n_candidates : 1, sizeof *b->extra);
    b->crc = calloc(plan->n_candidates ? plan->n_candidates : 1, sizeof *b->crc);
    if (!b->names || !b->extra || !b->crc)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    uint64_t h = PN_FNV1A64_BASIS;
    for (size_t i = 0; i < plan->n_tensors; i++) {
        const pn_plan_tensor *t = &plan->tensors[i];
        h = pn_fnv1a64(h, t->name, strlen(t->name) + 1);
        h = pn_fnv1a64_le(h, (uint32_t)t->type, 4);
        h = pn_fnv1a64_le(h, (uint32_t)t->rotation_block, 4);
        if (!t->candidate)
            continue;
        if (!(b->names[b->n] = strdup(t->name)))
            return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        /* a pn3t block holds 80 weights in 34 bytes, a pn4t block 64 */
        b->extra[b->n] = (uint64_t)(t->n_weights / 64 * 34 - t->n_weights / 80 * 34);
        b->n++;
    }
    b->want.base_hash = h;
    snprintf(b->want.base_label, sizeof b->want.base_label, "%s", r->mix_label);
    return PN_OK;
}

/* The options of a quantize run of the base plan (promote n, to dst). */
static pn_quantize_opts base_opts(const pn_kl_opts *o, int promote, const char *dst,
                                  const char *reuse)
{
    pn_quantize_opts q = o->q;
    q.promote = promote;
    q.promote_list_path = NULL;
    q.measurement_path = NULL;
    q.target_size = 0;
    q.dst_path = dst;
    q.reuse_path = reuse;
    q.reuse_verify = false;
    q.dry_run = dst == NULL;
    q.force = false;
    q.split = (gguf_split_limit){ GGUF_SPLIT_NONE, 0 };
    q.keep_split = false;
    q.split_index = -1;
    q.progress = NULL;
    q.note = NULL;
    q.result = NULL;
    q.user = NULL;
    return q;
}

/* The byte offset of the first byte that does not start valid UTF-8, or n. */
static size_t utf8_bad_at(const char *s, size_t n)
{
    size_t at = 0;
    while (at < n) {
        unsigned cp;
        size_t k = pn_utf8_char((const unsigned char *)s + at, n - at, &cp);
        if (k == 0)
            return at;
        at += k;
    }
    return n;
}

/* The calibration text: a regular file of UTF-8, not empty, at most 64 MiB;
 * its hash and size. */
static pn_status read_text(const char *path, pn_kl_params *p, pn_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    pn_status st = pn_read_small_file(path, TEXT_MAX_BYTES, "calibration text", &buf, &len, err);
    if (st != PN_OK)
        return st;
    size_t bad = utf8_bad_at(buf, len);
    if (len == 0)
        st = pn_error_set(err, PN_ERR_FORMAT, "%s: the calibration text is empty", path);
    else if (bad < len)
        st = pn_error_set(err, PN_ERR_FORMAT,
                          "%s: the calibration text is not UTF-8 (byte offset %zu)", path, bad);
    p->text_hash = pn_fnv1a64(PN_FNV1A64_BASIS, buf, len);
    p->text_bytes = len;
    free(buf);
    return st;
}

/* The source's own precision: bf16 or f16 when every 2-D tensor is, else f32. */
static int source_precision(const gguf_reader *r)
{
    int type = -1;
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        if (t->n_dims < 2 || t->type == PN_TYPE_F32)
            continue;
        if (type >= 0 && t->type != type)
            return PN_TYPE_F32;
        type = t->type;
    }
    return type == PN_TYPE_BF16 || type == PN_TYPE_F16 ? type : PN_TYPE_F32;
}

/* Everything the measurement depends on but the judge's version: the base
 * plan (a dry run), the source's header hash, its candidates' sampled rows,
 * the text. */
static pn_status plan_base(const pn_kl_opts *o, base_plan *b, int *decode_type, pn_error *err)
{
    pn_quantize_opts q = base_opts(o, 0, NULL, NULL);
    q.result = take_plan;
    q.user = b;
    pn_quantize_stats qs;
    pn_status st = pn_quantize_file(&q, &qs, err);
    if (st != PN_OK)
        return st;
    snprintf(b->want.quantizer, sizeof b->want.quantizer, "%s", pn_job_quantizer_name(&q));
    gguf_reader *r = NULL;
    pn_source_opts so = { .no_mtp = false, .tokenizer_pre = o->q.tokenizer_pre };
    st = pn_source_open(o->q.src_path, &so, &r, err);
    /* the measurement file may not take the place of the source, DST, the
     * recipe or the --reuse file: the quantize job's own rule */
    if (st == PN_OK)
        st = pn_quantize_check_measurement_path(&o->q, r, err);
    if (st == PN_OK)
        st = pn_source_header_hash(r, &b->want.source_header_hash, err);
    if (st == PN_OK && (b->n_vocab = pn_judge_vocab_of(r)) == 0)
        st = pn_error_set(err, PN_ERR_FORMAT,
                          "%s: no usable vocabulary (tokenizer.ggml.tokens or token_embd.weight)",
                          o->q.src_path);
    size_t *idx = calloc(b->n ? b->n : 1, sizeof *idx);
    if (st == PN_OK && !idx)
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == PN_OK && i < b->n; i++) {
        long k = gguf_reader_find_tensor(r, b->names[i]);
        if (k < 0)
            st = pn_error_set(err, PN_ERR_MISMATCH, "%s: candidate %s is not in the source",
                              o->q.src_path, b->names[i]);
        idx[i] = (size_t)k;
    }
    if (st == PN_OK)
        st = pn_tensor_crcs(r, idx, b->n, PN_SOURCE_SAMPLE_ROWS, pn_threads_resolve(o->q.threads),
                            o->c.cancel, b->crc, err);
    *decode_type = o->c.decode_type ? o->c.decode_type : r ? source_precision(r) : PN_TYPE_F32;
    free(idx);
    gguf_reader_close(r);
    if (st != PN_OK)
        return st;
    b->want.weighted = o->q.imatrix_path != NULL;
    if (b->want.weighted) {
        /* the imatrix's identity as the base file records it comes later;
         * until then the hash of its bytes stands for it */
        char *buf = NULL;
        size_t len = 0;
        st = pn_read_small_file(o->q.imatrix_path, (size_t)1 << 30, "imatrix", &buf, &len, err);
        if (st != PN_OK)
            return st;
        b->want.imatrix_hash = pn_fnv1a64(PN_FNV1A64_BASIS, buf, len);
        free(buf);
    }
    b->want.seq_len = o->c.seq_len;
    b->want.max_seqs = o->c.max_seqs;
    b->want.decode_type = *decode_type;
    return read_text(o->c.text_path, &b->want, err);
}

/* ---- measuring ---- */

typedef struct swap {
    int base_fd, all_fd, undo_fd;
    uint64_t *base_at, *all_at, *bytes; /* per candidate */
    uint8_t *buf;                       /* COPY_BYTES */
} swap;

static pn_status copy_range(int from, uint64_t from_at, int to, uint64_t to_at, uint64_t n,
                            uint8_t *buf, const char *dir, pn_error *err)
{
    while (n > 0) {
        size_t k = n < COPY_BYTES ? (size_t)n : COPY_BYTES;
        ssize_t r = pread(from, buf, k, (off_t)from_at);
        if (r != (ssize_t)k || pwrite(to, buf, k, (off_t)to_at) != (ssize_t)k) {
            int e = errno;
            return pn_error_set(err, e == ENOSPC ? PN_ERR_NOSPACE : PN_ERR_IO,
                                "%s: cannot copy a decoded tensor: %s", dir,
                                r == (ssize_t)k ? strerror(e) : "short read");
        }
        from_at += k;
        to_at += k;
        n -= k;
    }
    return PN_OK;
}

/* Makes the base (promote 0) and the all-promoted mix in the judge's folder,
 * decodes both, and finds every candidate's bytes in the two decodings. */
static pn_status prepare(const pn_kl_opts *o, pn_judge *J, const base_plan *b, int decode_type,
                         swap *sw, char **base_dec, pn_error *err)
{
    const char *dir = pn_judge_dir(J);
    char *pn[2] = { pn_path_join(dir, "base.gguf"), pn_path_join(dir, "all.gguf") };
    char *dec[2] = { pn_path_join(dir, "base-decoded.gguf"),
                     pn_path_join(dir, "all-decoded.gguf") };
    char *undo = pn_path_join(dir, "undo");
    pn_status st = pn[0] && pn[1] && dec[0] && dec[1] && undo
                       ? PN_OK
                       : pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < 2 && st == PN_OK; k++) {
        pn_judge_step(J, k ? "making the all-promoted mix" : "making the base mix", 1,
                      o->q.src_path);
        pn_quantize_opts q = base_opts(o, k ? (int)b->n : 0, pn[k], k ? pn[0] : NULL);
        pn_quantize_stats qs;
        st = pn_quantize_file(&q, &qs, err);
    }
    for (int k = 0; k < 2 && st == PN_OK; k++) {
        pn_judge_step(J, "decoding", 1, pn[k]);
        pn_dequant_opts d;
        pn_dequant_opts_init(&d);
        d.out_type = decode_type;
        d.threads = o->q.threads;
        d.cancel = o->c.cancel;
        pn_dequant_stats ds;
        st = pn_dequant_file(pn[k], dec[k], &d, &ds, err);
    }
    for (int k = 0; k < 2; k++)
        if (pn[k])
            unlink(pn[k]);
    gguf_reader *r[2] = { NULL, NULL };
    for (int k = 0; k < 2 && st == PN_OK; k++)
        st = gguf_reader_open_flags(dec[k], GGUF_OPEN_HEADER_ONLY, &r[k], err);
    sw->base_at = calloc(b->n ? b->n : 1, sizeof *sw->base_at);
    sw->all_at = calloc(b->n ? b->n : 1, sizeof *sw->all_at);
    sw->bytes = calloc(b->n ? b->n : 1, sizeof *sw->bytes);
    sw->buf = malloc(COPY_BYTES);
    if (st == PN_OK && (!sw->base_at || !sw->all_at || !sw->bytes || !sw->buf))
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < b->n && st == PN_OK; i++) {
        long x = gguf_reader_find_tensor(r[0], b->names[i]);
        long y = gguf_reader_find_tensor(r[1], b->names[i]);
        if (x < 0 || y < 0 ||
            gguf_reader_tensor(r[0], (size_t)x)->size !=
                gguf_reader_tensor(r[1], (size_t)y)->size) {
            st = pn_error_set(err, PN_ERR_MISMATCH,
                              "%s: the decodings of the base and the all-promoted mix disagree on "
                              "candidate %s",
                              dir, b->names[i]);
            break;
        }
        sw->base_at[i] = gguf_reader_tensor_file_offset(r[0], (size_t)x);
        sw->all_at[i] = gguf_reader_tensor_file_offset(r[1], (size_t)y);
        sw->bytes[i] = gguf_reader_tensor(r[0], (size_t)x)->size;
    }
    gguf_reader_close(r[0]);
    gguf_reader_close(r[1]);
    if (st == PN_OK) {
        sw->base_fd = open(dec[0], O_RDWR | O_CLOEXEC);
        sw->all_fd = open(dec[1], O_RDONLY | O_CLOEXEC);
        sw->undo_fd = open(undo, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (sw->base_fd < 0 || sw->all_fd < 0 || sw->undo_fd < 0)
            st = pn_error_set(err, PN_ERR_IO, "%s: cannot open the decoded models: %s", dir,
                              strerror(errno));
    }
    free(pn[0]);
    free(pn[1]);
    free(dec[1]);
    free(undo);
    *base_dec = dec[0];
    return st;
}

static void swap_close(swap *sw)
{
    if (sw->base_fd >= 0)
        close(sw->base_fd);
    if (sw->all_fd >= 0)
        close(sw->all_fd);
    if (sw->undo_fd >= 0)
        close(sw->undo_fd);
    free(sw->base_at);
    free(sw->all_at);
    free(sw->bytes);
    free(sw->buf);
}

/* Candidate i swapped into the base decoding, judged, and put back: its KL,
 * and its gain over the base with the standard error of the paired
 * differences. */
static pn_status judge_candidate(pn_judge *J, swap *sw, const char *base_dec, const char *name,
                                 size_t i, const double *kl_base, double *kl, pn_kl_entry *e,
                                 pn_error *err)
{
    const char *dir = pn_judge_dir(J);
    pn_status st =
        copy_range(sw->base_fd, sw->base_at[i], sw->undo_fd, 0, sw->bytes[i], sw->buf, dir, err);
    if (st == PN_OK)
        st = copy_range(sw->all_fd, sw->all_at[i], sw->base_fd, sw->base_at[i], sw->bytes[i],
                        sw->buf, dir, err);
    pn_judge_figures f;
    if (st == PN_OK)
        st = pn_judge_eval(J, 2 + i, base_dec, name, true, false, &f, kl, err);
    /* put back whatever happened, so that the base is the base again */
    pn_status back = copy_range(sw->undo_fd, 0, sw->base_fd, sw->base_at[i], sw->bytes[i], sw->buf,
                                dir, st == PN_OK ? err : NULL);
    if (st == PN_OK)
        st = back;
    if (st != PN_OK)
        return st;
    size_t n = pn_judge_n_positions(J);
    double sb = 0.0, sc = 0.0;
    for (size_t p = 0; p < n; p++) {
        sb += kl_base[p];
        sc += kl[p];
    }
    double mean_d = (sb - sc) / (double)n, ss = 0.0;
    for (size_t p = 0; p < n; p++) {
        double d = kl_base[p] - kl[p] - mean_d;
        ss += d * d;
    }
    e->kl = sc / (double)n;
    e->gain = sb / (double)n - e->kl;
    e->se = n > 1 ? sqrt(ss / (double)(n - 1) / (double)n) : 0.0;
    return PN_OK;
}

static void progress(const pn_kl_opts *o, const char *step, const char *name, size_t done,
                     size_t total, double t0, size_t done_here, double t_first)
{
    if (!o->progress)
        return;
    double now = pn_now_seconds();
    pn_kl_progress p = { step, name, done, total, now - t0, -1.0 };
    if (done_here > 0)
        p.eta_s = (now - t_first) / (double)done_here * (double)(total - done);
    o->progress(&p, o->user);
}

/* A file at path of this run's params and share, as far as it goes: each
 * entry the candidate it should be, with the source's rows as they were. */
static pn_status check_file(const pn_kl_measurement *m, const base_plan *b, size_t first,
                            size_t count, const char *path, pn_error *err)
{
    pn_status st = pn_kl_params_check(&m->params, &b->want, path, err);
    if (st != PN_OK)
        return st;
    if (m->first != first || m->count != count || m->total != b->n)
        return pn_error_set(err, PN_ERR_MISMATCH,
                            "%s: holds candidates %zu..%zu of %zu, this run measures %zu..%zu of "
                            "%zu",
                            path, m->first, m->first + m->count, m->total, first, first + count,
                            b->n);
    for (size_t i = 0; i < m->n; i++) {
        const pn_kl_entry *e = &m->entries[i];
        if (strcmp(e->name, b->names[first + i]) != 0)
            return pn_error_set(err, PN_ERR_MISMATCH, "%s: candidate %zu is %s, this run's is %s",
                                path, first + i, e->name, b->names[first + i]);
        if (e->sample_crc != b->crc[first + i])
            return pn_error_set(err, PN_ERR_MISMATCH,
                                "%s: %s was measured on other bytes of the source (sampled rows "
                                "CRC-32 %08x, now %08x)",
                                path, e->name, e->sample_crc, b->crc[first + i]);
    }
    return PN_OK;
}

/* The file at path: NULL when there is none; refused when it is of
 * another run (without force: then NULL too, to be replaced). */
static pn_status existing(const pn_kl_opts *o, const base_plan *b, const char *path, size_t first,
                          size_t count, pn_kl_measurement **out, pn_error *err)
{
    *out = NULL;
    struct stat sb;
    if (!path || (lstat(path, &sb) != 0 && errno == ENOENT))
        return PN_OK;
    pn_kl_measurement *m = NULL;
    pn_status st = pn_kl_load(path, &m, err);
    if (st == PN_OK)
        st = check_file(m, b, first, count, path, err);
    if (st == PN_ERR_MISMATCH && o->force) {
        if (o->note) {
            char msg[PN_ERROR_MSG_MAX + 40];
            snprintf(msg, sizeof msg, "%s; measuring again (--force)", err->msg);
            o->note(msg, o->user);
        }
        pn_kl_measurement_free(m);
        return PN_OK;
    }
    if (st == PN_ERR_MISMATCH) {
        char why[PN_ERROR_MSG_MAX];
        snprintf(why, sizeof why, "%s", err->msg);
        pn_error_set(err, PN_ERR_EXISTS, "%s; give --force to measure again and replace it", why);
    }
    if (st != PN_OK) {
        pn_kl_measurement_free(m);
        return err->code;
    }
    *out = m;
    return PN_OK;
}

/* The number of parts of a divided measurement whose part 1 is beside
 * path (PATH.part-00001-of-NNNNN), or 0. */
static int parts_beside(const char *path)
{
    char *dirc = strdup(path);
    if (!dirc)
        return 0;
    char *slash = strrchr(dirc, '/');
    char prefix[4096];
    snprintf(prefix, sizeof prefix, "%s.part-00001-of-", slash ? slash + 1 : dirc);
    const char *folder = !slash ? "." : slash == dirc ? "/" : dirc;
    if (slash && slash != dirc)
        *slash = '\0';
    int found = 0;
    DIR *d = opendir(folder);
    if (d) {
        struct dirent *e;
        size_t pl = strlen(prefix);
        while ((e = readdir(d)) != NULL && !found)
            if (strncmp(e->d_name, prefix, pl) == 0 && strlen(e->d_name + pl) == 5) {
                int n = atoi(e->d_name + pl);
                found = n >= 1 ? n : 0;
            }
        closedir(d);
    }
    free(dirc);
    return found;
}

/* Measures the share's candidates that m does not hold yet, saving m at
 * path after each. */
static pn_status measure(const pn_kl_opts *o, const base_plan *b, pn_kl_measurement *m,
                         const char *path, pn_error *err)
{
    double t0 = pn_now_seconds();
    pn_compare_opts c = o->c;
    c.decode_type = b->want.decode_type;
    c.progress = NULL;
    pn_judge *J = NULL;
    char *base_dec = NULL;
    double *kl_base = NULL, *kl = NULL;
    swap sw = { -1, -1, -1, NULL, NULL, NULL, NULL };
    char llama[64], node[64];
    progress(o, "judging the source", NULL, m->n, m->count, t0, 0, t0);
    pn_status st = pn_judge_open(&c, b->n_vocab, 2, &J, llama, node, err);
    if (st == PN_OK &&
        (strcmp(llama, b->want.llama_cpp) != 0 || strcmp(node, b->want.node_llama_cpp) != 0))
        st = pn_error_set(err, PN_ERR_MISMATCH, "llama.cpp changed during the run: %s, then %s",
                          b->want.llama_cpp, llama);
    size_t n_pos = J ? pn_judge_n_positions(J) : 0;
    if (st == PN_OK && n_pos < (size_t)c.seq_len)
        st = pn_error_set(err, PN_ERR_FORMAT,
                          "%s: the calibration text is shorter than one sequence: %zu tokens, "
                          "--seq-len %d",
                          c.text_path, n_pos, c.seq_len);
    if (st == PN_OK && m->n > 0 && n_pos != m->n_positions)
        st = pn_error_set(err, PN_ERR_MISMATCH,
                          "%s: measured on %zu positions, the text gives %zu now", path,
                          m->n_positions, n_pos);
    m->n_positions = n_pos;
    if (st == PN_OK) {
        progress(o, "making and decoding the base and all-promoted mixes", NULL, m->n, m->count, t0,
                 0, t0);
        st = prepare(o, J, b, c.decode_type, &sw, &base_dec, err);
    }
    if (st == PN_OK) {
        kl_base = malloc(n_pos * sizeof *kl_base);
        kl = malloc(n_pos * sizeof *kl);
        if (!kl_base || !kl)
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    pn_judge_figures fb;
    if (st == PN_OK) {
        progress(o, "judging the base mix", NULL, m->n, m->count, t0, 0, t0);
        st = pn_judge_eval(J, 1, base_dec, "the base mix", true, false, &fb, kl_base, err);
    }
    if (st == PN_OK && m->n > 0 && fb.kl_mean != m->kl_base)
        st = pn_error_set(err, PN_ERR_MISMATCH,
                          "%s: the base mix's KL is %.17g now, %.17g when the file was begun: "
                          "llama.cpp does not give the same logits again",
                          path, fb.kl_mean, m->kl_base);
    m->kl_base = fb.kl_mean;
    m->kl_base_se = fb.kl_se;
    size_t done_here = 0;
    double t_first = pn_now_seconds();
    while (st == PN_OK && m->n < m->count) {
        size_t i = m->first + m->n;
        progress(o, "judging", b->names[i], m->n, m->count, t0, done_here, t_first);
        if (cancelled(o)) {
            st = pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
            break;
        }
        pn_kl_entry *e = &m->entries[m->n];
        st = judge_candidate(J, &sw, base_dec, b->names[i], i, kl_base, kl, e, err);
        if (st != PN_OK)
            break;
        e->extra_bytes = b->extra[i];
        e->sample_crc = b->crc[i];
        if (!(e->name = strdup(b->names[i]))) {
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
            break;
        }
        m->n++;
        done_here++;
        if (path)
            st = pn_kl_save(m, path, err);
    }
    if (st == PN_OK) {
        progress(o, "done", NULL, m->n, m->count, t0, done_here, t_first);
        if (path && m->count == 0)
            st = pn_kl_save(m, path, err);
    }
    swap_close(&sw);
    free(base_dec);
    free(kl_base);
    free(kl);
    pn_judge_close(J);
    return st;
}

pn_status pn_kl_measure(const pn_kl_opts *o, pn_kl_measurement **out, pn_error *err)
{
    *out = NULL;
    if (!o->c.text_path || o->c.seq_len < 1 || o->c.max_seqs < 1 ||
        (o->n_parts && (o->part < 1 || o->part > o->n_parts)))
        return pn_error_set(err, PN_ERR_USAGE,
                            "--measure kl: a calibration text, --seq-len and --max-seqs of at "
                            "least 1, and a part I/N with 1 <= I <= N are needed");
    base_plan b = { 0 };
    int decode_type = 0;
    pn_status st = plan_base(o, &b, &decode_type, err);
    if (st == PN_OK)
        st = pn_judge_versions(&o->c, b.want.llama_cpp, b.want.node_llama_cpp, err);
    int part = o->n_parts ? o->part : 1, n_parts = o->n_parts ? o->n_parts : 1;
    size_t first = b.n * (size_t)(part - 1) / (size_t)n_parts;
    size_t count = b.n * (size_t)part / (size_t)n_parts - first;
    char *path = NULL;
    if (st == PN_OK && o->path)
        path = o->n_parts ? pn_kl_part_path(o->path, part, n_parts) : strdup(o->path);
    if (st == PN_OK && o->path && !path)
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    pn_kl_measurement *m = NULL;
    if (st == PN_OK)
        st = existing(o, &b, path, first, count, &m, err);
    int beside = st == PN_OK && !m && path && !o->n_parts ? parts_beside(path) : 0;
    if (beside > 0) {
        /* the parts of a divided measurement, joined into the whole */
        st = pn_kl_assemble(path, beside, &m, err);
        if (st == PN_OK)
            st = check_file(m, &b, 0, b.n, path, err);
        if (st == PN_OK)
            st = pn_kl_save(m, path, err);
    }
    if (st == PN_OK && !m) {
        m = calloc(1, sizeof *m);
        if (m)
            m->entries = calloc(count ? count : 1, sizeof *m->entries);
        if (!m || !m->entries)
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        else {
            m->params = b.want;
            m->part = part;
            m->n_parts = n_parts;
            m->first = first;
            m->count = count;
            m->total = b.n;
        }
    } else if (st == PN_OK && m->n < m->count && o->note) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s: resuming the KL measurement: %zu of %zu candidates done",
                 path, m->n, m->count);
        o->note(msg, o->user);
    }
    if (st == PN_OK && m->n < m->count)
        st = measure(o, &b, m, path, err);
    base_plan_free(&b);
    free(path);
    if (st != PN_OK) {
        pn_kl_measurement_free(m);
        return st;
    }
    *out = m;
    return PN_OK;
}
