/* hf_read.c - converted tensor bytes, read from the shards row by row: the
 * source rows an output range needs are read in runs (consecutive source
 * rows in one read, at most the handle's buffer), converted into the
 * caller's buffer. Memory: the handle's buffer and one output row, whatever
 * the tensor's size.
 *
 * Reads go around the page cache (O_DIRECT, as gguf_direct reads a GGUF):
 * each shard is opened again with O_DIRECT by its descriptor's /proc link
 * (checked to be the same file), and a read takes the aligned window that
 * covers the bytes asked for. Where the file system refuses (at open, or a
 * read with EINVAL) the shard is read with pread for the rest of the run;
 * a direct read that fails otherwise is done again with pread, so errors
 * are pread's. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "hf/hf.h"

#define DIRECT_ALIGN ((size_t)4096)

struct pn_hf_reader {
    const pn_hf_model *m;
    uint8_t *buf; /* source rows: DIRECT_ALIGN-aligned, buf_bytes + 2 * DIRECT_ALIGN */
    size_t buf_bytes;
    uint8_t *row; /* one output row, for a range that cuts a row */
    size_t row_bytes;
    int *dfd; /* per shard: O_DIRECT descriptor, -1 not opened yet, -2 refused */
};

static int open_direct(int fd)
{
    int d = pn_open_direct(fd); /* common/file.h */
    return d >= 0 ? d : -2;
}

static size_t src_size(pn_hf_dtype d)
{
    return d == PN_HF_F32 ? 4 : 2;
}

pn_status pn_hf_reader_open(const pn_hf_model *m, size_t buf_bytes, pn_hf_reader **out,
                            pn_error *err)
{
    *out = NULL;
    size_t max_src_row = 0, max_out_row = 0;
    for (size_t i = 0; i < pn_hf_n_tensors(m); i++) {
        const pn_hf_tensor *t = pn_hf_tensor_at(m, i);
        size_t s = (size_t)t->row_elems * src_size(t->src_dtype);
        size_t o = (size_t)t->row_elems * pn_hf_type_size(t->type);
        max_src_row = s > max_src_row ? s : max_src_row;
        max_out_row = o > max_out_row ? o : max_out_row;
    }
    if (buf_bytes < max_src_row)
        buf_bytes = max_src_row;
    if (buf_bytes == 0)
        buf_bytes = 1;
    pn_hf_reader *rd = calloc(1, sizeof *rd);
    void *abuf = NULL;
    if (rd) {
        if (posix_memalign(&abuf, DIRECT_ALIGN, buf_bytes + 2 * DIRECT_ALIGN) != 0)
            abuf = NULL;
        rd->buf = abuf;
        rd->row = malloc(max_out_row ? max_out_row : 1);
        rd->dfd = malloc((pn_hf_n_shards(m) ? pn_hf_n_shards(m) : 1) * sizeof *rd->dfd);
        for (size_t s = 0; rd->dfd && s < pn_hf_n_shards(m); s++)
            rd->dfd[s] = -1;
    }
    if (!rd || !rd->buf || !rd->row || !rd->dfd) {
        if (rd) {
            free(rd->buf);
            free(rd->row);
            free(rd->dfd);
            free(rd);
        }
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory for a %zu-byte read buffer",
                            buf_bytes);
    }
    rd->m = m;
    rd->buf_bytes = buf_bytes;
    rd->row_bytes = max_out_row;
    *out = rd;
    return PN_OK;
}

void pn_hf_reader_close(pn_hf_reader *rd)
{
    if (!rd)
        return;
    for (size_t s = 0; s < pn_hf_n_shards(rd->m); s++)
        if (rd->dfd[s] >= 0)
            close(rd->dfd[s]);
    free(rd->dfd);
    free(rd->buf);
    free(rd->row);
    free(rd);
}

/* n bytes of the tensor's shard at `at`, around the page cache: *out points
 * at them inside rd->buf. False when this could not be done (the caller
 * reads with pread). */
static bool read_direct(pn_hf_reader *rd, const pn_hf_tensor *t, uint64_t at, size_t n,
                        const uint8_t **out)
{
    int *dfd = &rd->dfd[t->shard];
    if (*dfd == -1)
        *dfd = open_direct(pn_hf_shard_fd(rd->m, t->shard));
    if (*dfd < 0 || n == 0)
        return false;
    const uint64_t a0 = at / DIRECT_ALIGN * DIRECT_ALIGN;
    const uint64_t need = at + n - a0;
    const uint64_t size = pn_hf_shard_size(rd->m, t->shard);
    const uint64_t file_end = (size + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
    uint64_t len = (need + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
    if (a0 + len > file_end)
        len = file_end - a0;
    if (len > rd->buf_bytes + 2 * DIRECT_ALIGN || at + n > size)
        return false;
    size_t done = 0;
    while (done < need) {
        ssize_t k = pread(*dfd, rd->buf + done, (size_t)len - done, (off_t)(a0 + done));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && errno == EINVAL) {
            close(*dfd);
            *dfd = -2; /* refused: pread for the rest of the run */
            return false;
        }
        if (k <= 0)
            return false;
        done += (size_t)k;
        if (done < need && done % DIRECT_ALIGN != 0)
            return false;
    }
    *out = rd->buf + (at - a0);
    return true;
}

static pn_status read_full(const pn_hf_model *m, const pn_hf_tensor *t, uint64_t at, uint8_t *dst,
                           size_t n, pn_error *err)
{
    int fd = pn_hf_shard_fd(m, t->shard);
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, dst + got, n - got, (off_t)(at + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return pn_error_set(err, PN_ERR_IO, "%s: tensor %s: at byte %llu: %s",
                                pn_hf_shard_path(m, t->shard), t->src_name,
                                (unsigned long long)(at + got), strerror(errno));
        if (r == 0)
            return pn_error_set(err, PN_ERR_TRUNCATED,
                                "%s: tensor %s: at byte %llu: the file ends early (it changed "
                                "or shrank since it was opened)",
                                pn_hf_shard_path(m, t->shard), t->src_name,
                                (unsigned long long)(at + got));
        got += (size_t)r;
    }
    return PN_OK;
}

pn_status pn_hf_read(pn_hf_reader *rd, size_t i, uint64_t off, void *dst_v, size_t n, pn_error *err)
{
    const pn_hf_model *m = rd->m;
    const pn_hf_tensor *t = pn_hf_tensor_at(m, i);
    if (!t)
        return pn_error_set(err, PN_ERR_USAGE, "tensor index %zu out of range", i);
    const uint64_t orow = t->row_elems * pn_hf_type_size(t->type);
    const uint64_t srow = t->row_elems * src_size(t->src_dtype);
    const uint64_t total = orow * t->n_rows;
    if (off > total || n > total - off)
        return pn_error_set(err, PN_ERR_USAGE, "tensor %s: bytes [%llu, +%zu) outside its %llu",
                            t->name, (unsigned long long)off, n, (unsigned long long)total);
    uint8_t *dst = dst_v;
    uint64_t r = off / orow;
    const uint64_t end = off + n;
    const uint64_t rows_per_buf = rd->buf_bytes / srow;
    while (r * orow < end) {
        /* a run of output rows whose source rows are consecutive */
        uint64_t s0 = pn_hf_src_row(t, r);
        uint64_t k = 1;
        while (k < rows_per_buf && (r + k) * orow < end && r + k < t->n_rows &&
               pn_hf_src_row(t, r + k) == s0 + k)
            k++;
        const uint64_t at = t->src_begin + s0 * srow;
        const uint8_t *src = NULL;
        if (!read_direct(rd, t, at, (size_t)(k * srow), &src)) {
            pn_status st = read_full(m, t, at, rd->buf, (size_t)(k * srow), err);
            if (st != PN_OK)
                return st;
            src = rd->buf;
        }
        for (uint64_t j = 0; j < k; j++) {
            uint64_t ro = (r + j) * orow;         /* byte of this row in the tensor */
            uint64_t a = ro < off ? off - ro : 0; /* part of the row wanted */
            uint64_t b = ro + orow > end ? end - ro : orow;
            if (a == 0 && b == orow) {
                pn_hf_convert_row(t, src + j * srow, dst + (ro - off));
            } else {
                pn_hf_convert_row(t, src + j * srow, rd->row);
                memcpy(dst + (ro + a - off), rd->row + a, (size_t)(b - a));
            }
        }
        r += k;
    }
    return PN_OK;
}
