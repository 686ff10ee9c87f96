/* readback.c - the written output read back and checked (see readback.h). */
#include "pipeline/readback.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/crc32.h"
#include "common/mem.h"
#include "common/threads.h"
#include "quant/pn.h"
#include "quant/types.h"

/* The output is read back in pieces of about this size, whole PN blocks. */
#define PIECE_BYTES ((((uint64_t)2 << 20) / PN_BLOCK_BYTES) * PN_BLOCK_BYTES)

pn_status pn_readback_init(pn_readback *b, pn_outset *out, const pn_plan_tensor *t,
                           const uint32_t *crcs, size_t n, int threads,
                           volatile sig_atomic_t *cancel, pn_error *err)
{
    memset(b, 0, sizeof *b);
    b->out = out;
    b->t = t;
    b->crcs = crcs;
    b->n = n;
    b->threads = threads < 1 ? 1 : threads;
    b->cancel = cancel;
    b->split = SIZE_MAX;
    b->verified = calloc(n ? n : 1, sizeof *b->verified);
    if (!b->verified)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    return PN_OK;
}

static void close_behind(pn_readback *b)
{
    PN_CLOSE(gguf_direct_close, b->d);
    PN_CLOSE(gguf_reader_close, b->r);
    PN_CLOSE(free, b->buf);
}

void pn_readback_free(pn_readback *b)
{
    close_behind(b);
    free(b->verified);
    memset(b, 0, sizeof *b);
}

/* One piece: tensor j's bytes [off, off + len) read into buf through d (the
 * read's status is returned), their CRC-32 into *crc and, for a PN type,
 * their blocks checked (*block_st, and *bad_block: the first bad one within
 * the piece, or -1). */
static pn_status check_piece(gguf_direct *d, uint8_t *buf, size_t j, uint64_t off, uint64_t len,
                             int type, uint32_t *crc, pn_status *block_st, int64_t *bad_block,
                             pn_error *err)
{
    const uint8_t *data = NULL;
    *block_st = PN_OK;
    *bad_block = -1;
    pn_status st = gguf_direct_read_tensor_into(
        d, j, off, (size_t)len, buf, gguf_direct_into_cap((size_t)PIECE_BYTES), 0, 1, &data, err);
    if (st != PN_OK)
        return st;
    *crc = pn_crc32(0, data, (size_t)len);
    if (pn_type_is_pn(type)) {
        const int64_t weights = (int64_t)(len / PN_BLOCK_BYTES) * pn_params_get(type)->group;
        *block_st = pn_validate_row(type, data, weights, bad_block);
    }
    return PN_OK;
}

/* A piece buffer and a direct handle of reader r. */
static pn_status open_piece_reader(const gguf_reader *r, const char *path, uint8_t **buf,
                                   gguf_direct **d, pn_error *err)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, gguf_direct_into_cap((size_t)PIECE_BYTES)) != 0)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory validating %s", path);
    *buf = p;
    return gguf_direct_open(r, (size_t)PIECE_BYTES, d, err);
}

/* Tensor j of reader r (plan tensor i) read back whole behind the writer:
 * true when every byte is as computed. */
static bool tensor_good(pn_readback *b, size_t i, size_t j)
{
    const pn_plan_tensor *t = &b->t[i];
    const gguf_tensor_info *info = gguf_reader_tensor(b->r, j);
    if (!info || strcmp(info->name, t->name) != 0 || info->type != t->type ||
        info->size != t->bytes)
        return false;
    uint32_t crc = 0;
    for (uint64_t off = 0; off < t->bytes; off += PIECE_BYTES) {
        const uint64_t len = t->bytes - off < PIECE_BYTES ? t->bytes - off : PIECE_BYTES;
        uint32_t piece_crc;
        pn_status block_st;
        int64_t bad;
        pn_error e;
        if (check_piece(b->d, b->buf, j, off, len, t->type, &piece_crc, &block_st, &bad, &e) !=
                PN_OK ||
            block_st != PN_OK)
            return false;
        crc = pn_crc32_combine(crc, piece_crc, len);
        b->bytes += len;
    }
    return crc == b->crcs[i];
}

void pn_readback_behind(pn_readback *b)
{
    if (b->stopped || (b->cancel && *b->cancel))
        return;
    uint64_t settled = 0;
    const size_t s = pn_outset_settled(b->out, &settled);
    if (s == SIZE_MAX)
        return;
    const double t0 = pn_now_seconds();
    const gguf_split_plan *sp = pn_outset_plan(b->out);
    if (s != b->split) {
        close_behind(b);
        b->split = s;
        b->next = sp->first[s];
    }
    const char *path = pn_outset_path(b->out, s);
    while (b->next < sp->first[s + 1] && !(b->cancel && *b->cancel)) {
        if (!b->r) {
            pn_error e;
            pn_status st = pn_outset_open_settled(b->out, s, &b->r, &e);
            if (st == PN_ERR_USAGE)
                break; /* the header is not settled yet */
            if (st == PN_OK)
                st = open_piece_reader(b->r, path, &b->buf, &b->d, &e);
            if (st != PN_OK) {
                b->stopped = true;
                break;
            }
        }
        const size_t j = b->next - sp->first[s];
        if (j >= gguf_reader_n_tensors(b->r)) {
            b->stopped = true;
            break;
        }
        const uint64_t at = gguf_reader_tensor_file_offset(b->r, j);
        if (at == UINT64_MAX || at + b->t[b->next].bytes > settled)
            break;
        if (!tensor_good(b, b->next, j)) {
            b->stopped = true;
            break;
        }
        b->verified[b->next++] = true;
    }
    b->seconds += pn_now_seconds() - t0;
}

/* A piece of the check at the end. */
typedef struct vpiece {
    size_t tensor; /* within the split */
    uint64_t off, len;
    uint32_t crc;
    pn_status st, block_st; /* of the read, of the blocks */
    int64_t bad_block;      /* within the piece */
} vpiece;

/* The pieces of the split's tensors [lo, lo + n) that were not read back
 * behind the writer, in file order; *count of them. */
static vpiece *make_pieces(const pn_readback *b, size_t lo, size_t n, size_t *count)
{
    size_t n_pc = 0;
    for (size_t i = 0; i < n; i++)
        if (!b->verified[lo + i])
            n_pc += (size_t)((b->t[lo + i].bytes + PIECE_BYTES - 1) / PIECE_BYTES);
    vpiece *pc = calloc(n_pc ? n_pc : 1, sizeof *pc);
    if (!pc)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        for (uint64_t off = 0; !b->verified[lo + i] && off < b->t[lo + i].bytes;
             off += PIECE_BYTES) {
            const uint64_t left = b->t[lo + i].bytes - off;
            pc[k].tensor = i;
            pc[k].off = off;
            pc[k].len = left < PIECE_BYTES ? left : PIECE_BYTES;
            pc[k].bad_block = -1;
            k++;
        }
    *count = n_pc;
    return pc;
}

/* What every piece of check_pieces shares. */
typedef struct pieces_job {
    pn_readback *b;
    const gguf_reader *r;
    vpiece *pc;
    size_t n_pc, lo;
    uint8_t **bufs;       /* one a thread */
    gguf_direct **direct; /* one a thread */
} pieces_job;

/* Piece j read and checked on thread t; the read's status is returned. */
static pn_status check_one_piece(void *ctx, size_t j, int t, void *fail)
{
    const pieces_job *c = ctx;
    if (c->b->cancel && *c->b->cancel)
        return PN_OK;
    vpiece *p = &c->pc[j];
    gguf_direct *d = c->direct[t];
    /* read buffered (the file system refuses O_DIRECT): the pieces a
     * little ahead are read by the kernel meanwhile */
    size_t ahead = j + 2 * (size_t)c->b->threads;
    if (ahead < c->n_pc && !gguf_direct_is_direct(d))
        gguf_reader_advise(
            c->r, gguf_reader_tensor_file_offset(c->r, c->pc[ahead].tensor) + c->pc[ahead].off,
            c->pc[ahead].len, true);
    p->st = check_piece(d, c->bufs[t], p->tensor, p->off, p->len, c->b->t[c->lo + p->tensor].type,
                        &p->crc, &p->block_st, &p->bad_block, fail);
    return p->st;
}

/* Every piece read and checked, in parallel, one handle and buffer a
 * thread; the first read error in file order into *first_io (its index in
 * *first_io_at, SIZE_MAX when none). */
static pn_status check_pieces(pn_readback *b, const gguf_reader *r, const char *path, vpiece *pc,
                              size_t n_pc, size_t lo, size_t *first_io_at, pn_error *first_io,
                              pn_error *err)
{
    const int threads = b->threads;
    uint8_t **bufs = calloc((size_t)threads, sizeof *bufs);
    gguf_direct **direct = calloc((size_t)threads, sizeof *direct);
    pn_status st = bufs && direct
                       ? PN_OK
                       : pn_error_set(err, PN_ERR_NOMEM, "out of memory validating %s", path);
    for (int i = 0; i < threads && st == PN_OK; i++)
        st = open_piece_reader(r, path, &bufs[i], &direct[i], err);
    *first_io_at = SIZE_MAX;
    if (st == PN_OK) {
        pieces_job job = { b, r, pc, n_pc, lo, bufs, direct };
        /* after a read error nothing else is worth checking */
        pn_each_first_failure(n_pc, threads, PN_EACH_SKIP_AFTER_FAILURE, check_one_piece, &job,
                              sizeof *first_io, first_io, first_io_at);
    }
    if (bufs)
        for (int i = 0; i < threads; i++)
            free(bufs[i]);
    free(bufs);
    if (direct)
        for (int i = 0; i < threads; i++)
            gguf_direct_close(direct[i]);
    free(direct);
    return st;
}

/* The first problem in file order among the split's tensors [lo, lo + n):
 * a bad block, or a CRC-32 that is not the one computed. */
static pn_status first_problem(const pn_readback *b, const char *path, const vpiece *pc,
                               size_t n_pc, size_t lo, size_t n, pn_error *err)
{
    for (size_t j = 0, i = 0; i < n; i++) {
        const pn_plan_tensor *t = &b->t[lo + i];
        if (b->verified[lo + i])
            continue;
        uint32_t crc = 0;
        for (; j < n_pc && pc[j].tensor == i; j++) {
            if (pc[j].block_st != PN_OK) {
                const int64_t bpr = t->ne[0] / pn_params_get(t->type)->group;
                int64_t gb = (int64_t)(pc[j].off / PN_BLOCK_BYTES) + pc[j].bad_block;
                return pn_error_set(err, pc[j].block_st, "%s: tensor %s, row %lld, block %lld: %s",
                                    path, t->name, (long long)(gb / bpr), (long long)(gb % bpr),
                                    pn_strerror(pc[j].block_st));
            }
            crc = pn_crc32_combine(crc, pc[j].crc, pc[j].len);
        }
        if (crc != b->crcs[lo + i])
            return pn_error_set(err, PN_ERR_CRC,
                                "%s: tensor %s: CRC-32 of the written data is %08x, computed "
                                "%08x while writing",
                                path, t->name, (unsigned)crc, b->crcs[lo + i]);
    }
    return PN_OK;
}

pn_status pn_readback_split(pn_readback *b, size_t s, pn_error *err)
{
    close_behind(b);
    const char *path = pn_outset_path(b->out, s);
    const gguf_split_plan *sp = pn_outset_plan(b->out);
    const size_t lo = sp->first[s], n = sp->first[s + 1] - lo;
    gguf_reader *r = NULL;
    pn_status st = pn_outset_open_written(b->out, s, &r, err);
    if (st != PN_OK)
        return pn_error_prefix(err, "validating the written file");
    for (size_t i = 0; i < n && st == PN_OK; i++) {
        const pn_plan_tensor *t = &b->t[lo + i];
        const gguf_tensor_info *info = gguf_reader_tensor(r, i);
        if (strcmp(info->name, t->name) != 0 || info->type != t->type || info->size != t->bytes)
            st = pn_error_set(err, PN_ERR_MISMATCH,
                              "%s: tensor %zu is %s (type %d, %llu bytes), expected %s (type "
                              "%d, %llu bytes)",
                              path, i, info->name, info->type, (unsigned long long)info->size,
                              t->name, t->type, (unsigned long long)t->bytes);
    }
    size_t n_pc = 0, first_io_at = SIZE_MAX;
    vpiece *pc = st == PN_OK ? make_pieces(b, lo, n, &n_pc) : NULL;
    if (st == PN_OK && !pc)
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory validating %s", path);
    pn_error first_io;
    pn_error_clear(&first_io);
    if (st == PN_OK)
        st = check_pieces(b, r, path, pc, n_pc, lo, &first_io_at, &first_io, err);
    if (st == PN_OK && b->cancel && *b->cancel)
        st = pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
    if (st == PN_OK && first_io_at != SIZE_MAX) {
        /* reading our own file back failed: nothing else is worth checking */
        if (err)
            *err = first_io;
        st = first_io.code;
        pn_error_prefix(err, "validating the written file");
    }
    if (st == PN_OK)
        st = first_problem(b, path, pc, n_pc, lo, n, err);
    free(pc);
    gguf_reader_close(r);
    return st;
}
