/* gguf_data.c - reading a reader's tensor data: copied out with pread
 * (gguf_reader_read_at, gguf_reader_read_tensor), advised to the page cache,
 * and read around it with O_DIRECT through a gguf_direct handle (gguf.h).
 * The header parsing that decides where each tensor lies is gguf_header.c's;
 * every read here is checked against that, so a file that shrank is an
 * error naming it, never a short copy.
 */
#include "gguf/gguf.h"
#include "common/file.h"
#include "gguf/gguf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* Reading tensor data                                                 */

pn_status gguf_reader_read_at(const gguf_reader *r, uint64_t at, void *dst, size_t n, pn_error *err)
{
    r = gguf_file_of_(r);
    uint64_t end;
    if (r->virt && !__builtin_add_overflow(at, (uint64_t)n, &end) && end > r->avail)
        return pn_error_set(err, PN_ERR_USAGE,
                            "%s: bytes [%llu, %llu) are tensor data of a virtual reader: read "
                            "them by tensor",
                            r->name, (unsigned long long)at, (unsigned long long)end);
    if (__builtin_add_overflow(at, (uint64_t)n, &end) || end > r->size)
        return pn_error_set(err, PN_ERR_TRUNCATED,
                            "%s: bytes [%llu, %llu) lie past the end of the file (%llu bytes)",
                            r->name, (unsigned long long)at, (unsigned long long)at + n,
                            (unsigned long long)r->size);
    if (r->fd < 0) {
        if (n)
            memcpy(dst, r->base + at, n);
        return PN_OK;
    }
    ssize_t k = gguf_pread_full_(r->fd, dst, n, at);
    if (k < 0)
        return pn_error_set(err, PN_ERR_IO, "%s: cannot read %zu bytes at byte %llu: %s", r->name,
                            n, (unsigned long long)at, strerror(errno));
    if ((size_t)k < n) {
        struct stat sb;
        long long now = fstat(r->fd, &sb) == 0 ? (long long)sb.st_size : -1;
        return pn_error_set(err, PN_ERR_TRUNCATED,
                            "%s: the file changed or shrank during the run: it was %llu bytes "
                            "when opened and is now %lld; reading %zu bytes at byte %llu got "
                            "only %zd",
                            r->name, (unsigned long long)r->size, now, n, (unsigned long long)at,
                            k);
    }
    return PN_OK;
}

/* The file offset of tensor i's bytes [off, off + n), checked to lie in the
 * tensor (PN_ERR_USAGE) and not to overflow (PN_ERR_TRUNCATED), and the
 * reader of the file (the split) that holds them. */
static pn_status tensor_range(const gguf_reader *r, size_t i, uint64_t off, size_t n,
                              uint64_t *at_out, const gguf_reader **file_out, pn_error *err)
{
    const gguf_tensor_info *ti = gguf_reader_tensor(r, i);
    if (!ti)
        return pn_error_set(err, PN_ERR_USAGE, "%s: no tensor %zu", gguf_file_of_(r)->name, i);
    const gguf_reader *f = gguf_file_of_tensor_(r, ti);
    uint64_t end;
    if (__builtin_add_overflow(off, (uint64_t)n, &end) || end > ti->size)
        return pn_error_set(err, PN_ERR_USAGE,
                            "%s: tensor %s: bytes [%llu, %llu) are outside its %llu bytes", f->name,
                            ti->name, (unsigned long long)off, (unsigned long long)off + n,
                            (unsigned long long)ti->size);
    uint64_t at;
    if (__builtin_add_overflow(f->data_offset, ti->offset, &at) ||
        __builtin_add_overflow(at, off, &at))
        return pn_error_set(err, PN_ERR_TRUNCATED, "%s: tensor %s lies past the end of the file",
                            f->name, ti->name);
    *at_out = at;
    *file_out = f;
    return PN_OK;
}

pn_status gguf_reader_read_tensor(const gguf_reader *r, size_t i, uint64_t off, void *dst, size_t n,
                                  pn_error *err)
{
    uint64_t at = 0;
    const gguf_reader *f = NULL;
    pn_status st = tensor_range(r, i, off, n, &at, &f, err);
    if (st != PN_OK)
        return st;
    if (f->virt)
        return f->prov.read(f->prov.ctx, i, off, dst, n, err);
    st = gguf_reader_read_at(f, at, dst, n, err);
    if (st != PN_OK)
        pn_error_prefix(err, "tensor %s", gguf_reader_tensor(r, i)->name);
    return st;
}

void gguf_reader_advise(const gguf_reader *r, uint64_t at, uint64_t n, bool willneed)
{
    r = gguf_file_of_(r);
    if (r->fd < 0 || at >= r->size)
        return;
    if (n > r->size - at)
        n = r->size - at;
    (void)posix_fadvise(r->fd, (off_t)at, (off_t)n,
                        willneed ? POSIX_FADV_WILLNEED : POSIX_FADV_DONTNEED);
}

void gguf_reader_advise_tensor(const gguf_reader *r, size_t i, uint64_t off, uint64_t n,
                               bool willneed)
{
    const gguf_tensor_info *ti = gguf_reader_tensor(r, i);
    if (!ti || off >= ti->size)
        return;
    const gguf_reader *f = gguf_file_of_tensor_(r, ti);
    uint64_t at;
    if (n > ti->size - off)
        n = ti->size - off;
    if (__builtin_add_overflow(f->data_offset, ti->offset, &at) ||
        __builtin_add_overflow(at, off, &at))
        return;
    gguf_reader_advise(f, at, n, willneed);
}

uint64_t gguf_reader_tensor_file_offset(const gguf_reader *r, size_t i)
{
    const gguf_tensor_info *ti = gguf_reader_tensor(r, i);
    if (!ti)
        return 0;
    uint64_t at;
    if (__builtin_add_overflow(gguf_file_of_tensor_(r, ti)->data_offset, ti->offset, &at))
        return UINT64_MAX;
    return at;
}

/* ------------------------------------------------------------------ */
/* Direct reads (O_DIRECT)                                             */

/* Offsets, lengths and the buffer of a direct read are multiples of this:
 * the logical block size of every common device (512 or 4096). A device
 * that wants more refuses the read (EINVAL), and the handle falls back. */
#define DIRECT_ALIGN ((uint64_t)4096)

struct gguf_direct {
    const gguf_reader *r;    /* the reader (a set's, or one file's) */
    const gguf_reader *file; /* the file the descriptor and window are of */
    int fd;                  /* that file opened with O_DIRECT, or -1: buffered */
    uint8_t *buf;            /* DIRECT_ALIGN-aligned, cap bytes; made at the first
                              * gguf_direct_read_tensor (reads into a caller's
                              * buffer never need it) */
    size_t cap, max_bytes;
    /* direct reads: buf holds bytes [win_at, win_at + win_len) of `file` */
    uint64_t win_at, win_len;
};

/* File f opened again with O_DIRECT (common/file.h); -1 for a memory
 * reader (fd -1) or where O_DIRECT is refused: reads then stay buffered. */
static int open_direct(const gguf_reader *f)
{
    return pn_open_direct(f->fd);
}

pn_status gguf_direct_open(const gguf_reader *r, size_t max_bytes, gguf_direct **out, pn_error *err)
{
    *out = NULL;
    gguf_direct *d = max_bytes > SIZE_MAX / 2 ? NULL : calloc(1, sizeof *d);
    if (!d)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory for a read buffer of %zu bytes",
                            gguf_file_of_(r)->name, max_bytes);
    d->r = r;
    d->cap = (max_bytes + 2 * DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN + DIRECT_ALIGN;
    d->max_bytes = max_bytes;
    d->file = gguf_file_of_(r); /* a set's reads start in its first file */
    d->fd = open_direct(d->file);
    *out = d;
    return PN_OK;
}

void gguf_direct_close(gguf_direct *d)
{
    if (!d)
        return;
    if (d->fd >= 0)
        close(d->fd);
    free(d->buf);
    free(d);
}

bool gguf_direct_is_direct(const gguf_direct *d)
{
    return d && d->fd >= 0;
}

/* Reads bytes [a0, a0 + len) of fd (opened with O_DIRECT; a0, len and dst
 * aligned) into dst until at least `need` are in; the count read, or -1
 * when it could not (an error, EINVAL included, or the file ends first),
 * errno set where there was one. */
static ssize_t direct_pread_to(int fd, uint8_t *dst, uint64_t a0, size_t len, size_t need)
{
    size_t done = 0;
    errno = 0;
    while (done < need) {
        ssize_t k = pread(fd, dst + done, len - done, (off_t)(a0 + done));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        done += (size_t)k;
        if (done < need && done % DIRECT_ALIGN != 0)
            return -1; /* a short read inside the file: the next would be unaligned */
    }
    return (ssize_t)done;
}

/* The same into d->buf, made the window (empty when it fails). */
static bool direct_pread(gguf_direct *d, uint64_t a0, size_t len, size_t need)
{
    d->win_len = 0;
    ssize_t k = direct_pread_to(d->fd, d->buf, a0, len, need);
    if (k < 0)
        return false;
    d->win_at = a0;
    d->win_len = (uint64_t)k;
    return true;
}

/* The handle reads file f from now on: a set's next split has its own
 * descriptor and window (reads in order change files once per split). A
 * file system that refused O_DIRECT for the last file is asked again for
 * this one. */
static void use_file(gguf_direct *d, const gguf_reader *f)
{
    if (f == d->file)
        return;
    if (d->fd >= 0)
        close(d->fd);
    d->file = f;
    d->fd = open_direct(f);
    d->win_len = 0;
}

/* A failed direct read with errno EINVAL: the file system (or this range)
 * refuses O_DIRECT, so the rest of this file is read buffered. */
static void maybe_give_up_direct(gguf_direct *d)
{
    if (errno == EINVAL) {
        close(d->fd);
        d->fd = -1;
    }
}

/* Tensor i's bytes [off, off + n), at file offset `at` of its file f, read
 * buffered into dst: the reader's pread, or a virtual reader's provider. */
static pn_status buffered_read(gguf_direct *d, const gguf_reader *f, size_t i, uint64_t off,
                               uint64_t at, uint8_t *dst, size_t n, pn_error *err)
{
    if (f->virt)
        return f->prov.read(f->prov.ctx, i, off, dst, n, err);
    pn_status st = gguf_reader_read_at(f, at, dst, n, err);
    if (st != PN_OK)
        pn_error_prefix(err, "tensor %s", gguf_reader_tensor(d->r, i)->name);
    return st;
}

pn_status gguf_direct_read_tensor(gguf_direct *d, size_t i, uint64_t off, size_t n,
                                  const uint8_t **data, pn_error *err)
{
    if (n > d->max_bytes)
        return pn_error_set(err, PN_ERR_USAGE, "%s: a direct read of %zu bytes, at most %zu",
                            gguf_file_of_(d->r)->name, n, d->max_bytes);
    uint64_t at = 0;
    const gguf_reader *f = NULL;
    pn_status st = tensor_range(d->r, i, off, n, &at, &f, err);
    if (st != PN_OK)
        return st;
    if (!d->buf) {
        void *buf = NULL;
        if (posix_memalign(&buf, DIRECT_ALIGN, d->cap) != 0)
            return pn_error_set(err, PN_ERR_NOMEM,
                                "%s: out of memory for a read buffer of %zu bytes",
                                gguf_file_of_(d->r)->name, d->max_bytes);
        d->buf = buf;
    }
    use_file(d, f);
    if (d->fd >= 0 && n > 0 && at + n <= f->size) {
        if (at >= d->win_at && at + n <= d->win_at + d->win_len) {
            *data = d->buf + (at - d->win_at); /* read with an earlier request */
            return PN_OK;
        }
        /* a whole buffer from the aligned offset at or below `at` (small
         * tensors read in order then take one read for many), its end
         * past the end of the file when that is not aligned (the read
         * stops there) */
        const uint64_t a0 = at / DIRECT_ALIGN * DIRECT_ALIGN;
        const uint64_t file_end = (f->size + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
        const size_t len = file_end - a0 < d->cap ? (size_t)(file_end - a0) : d->cap;
        if (direct_pread(d, a0, len, (size_t)(at + n - a0))) {
            *data = d->buf + (at - a0);
            return PN_OK;
        }
        maybe_give_up_direct(d);
        /* otherwise (an error, or the file ended early) the buffered read
         * below says what happened, in the reader's words */
    }
    d->win_len = 0;
    st = buffered_read(d, f, i, off, at, d->buf, n, err);
    if (st == PN_OK)
        *data = d->buf;
    return st;
}

size_t gguf_direct_into_cap(size_t n)
{
    return n > SIZE_MAX - 3 * DIRECT_ALIGN ? SIZE_MAX : (n + 2 * DIRECT_ALIGN);
}

/* The cover of a range read into a caller's buffer is cut into pieces of
 * one size, aligned, dealt round-robin to the parts: at most the handle's
 * max_bytes, and small enough that every part gets one. */
static uint64_t piece_bytes(const gguf_direct *d, uint64_t cover, int n_parts)
{
    uint64_t most = d->max_bytes / DIRECT_ALIGN * DIRECT_ALIGN;
    if (most < DIRECT_ALIGN)
        most = DIRECT_ALIGN;
    uint64_t share = (cover / (uint64_t)n_parts + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
    if (share < DIRECT_ALIGN)
        share = DIRECT_ALIGN;
    return share < most ? share : most;
}

pn_status gguf_direct_read_tensor_into(gguf_direct *d, size_t i, uint64_t off, size_t n,
                                       uint8_t *buf, size_t cap, int part, int n_parts,
                                       const uint8_t **data, pn_error *err)
{
    const char *name = gguf_file_of_(d->r)->name;
    if (n_parts < 1 || part < 0 || part >= n_parts)
        return pn_error_set(err, PN_ERR_USAGE, "%s: part %d of a read in %d parts", name, part,
                            n_parts);
    if ((uintptr_t)buf % DIRECT_ALIGN != 0 || cap < gguf_direct_into_cap(n))
        return pn_error_set(err, PN_ERR_USAGE,
                            "%s: a read of %zu bytes into a buffer of %zu bytes at %p (it must be "
                            "aligned to %llu bytes and hold %zu)",
                            name, n, cap, (void *)buf, (unsigned long long)DIRECT_ALIGN,
                            gguf_direct_into_cap(n));
    uint64_t at = 0;
    const gguf_reader *f = NULL;
    pn_status st = tensor_range(d->r, i, off, n, &at, &f, err);
    if (st != PN_OK)
        return st;
    uint64_t end;
    /* past 2^63 no file reaches (off_t), and the pieces' offsets below
     * cannot wrap */
    if (__builtin_add_overflow(at, (uint64_t)n, &end) || end > (UINT64_MAX >> 1))
        return pn_error_set(err, PN_ERR_TRUNCATED, "%s: tensor %s lies past the end of the file",
                            f->name, gguf_reader_tensor(d->r, i)->name);
    use_file(d, f);
    /* the aligned cover [a0, a1) of [at, end) lands at buf: the bytes asked
     * for start at buf + (at - a0), whichever way they are read */
    const uint64_t a0 = at / DIRECT_ALIGN * DIRECT_ALIGN;
    const uint64_t a1 = (end + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
    const uint64_t piece = piece_bytes(d, a1 - a0, n_parts);
    const bool in_file = end <= f->size;
    for (uint64_t p0 = a0 + (uint64_t)part * piece; n > 0 && p0 < a1;
         p0 += (uint64_t)n_parts * piece) {
        const uint64_t p1 = a1 - p0 < piece ? a1 : p0 + piece;
        /* this piece's share of the bytes asked for */
        const uint64_t x0 = p0 > at ? p0 : at, x1 = p1 < end ? p1 : end;
        if (d->fd >= 0 && in_file) {
            if (direct_pread_to(d->fd, buf + (p0 - a0), p0, (size_t)(p1 - p0), (size_t)(x1 - p0)) >=
                0)
                continue;
            maybe_give_up_direct(d);
            /* otherwise the buffered read says what happened */
        }
        st = buffered_read(d, f, i, off + (x0 - at), x0, buf + (x0 - a0), (size_t)(x1 - x0), err);
        if (st != PN_OK)
            return st;
    }
    *data = buf + (at - a0);
    return PN_OK;
}
