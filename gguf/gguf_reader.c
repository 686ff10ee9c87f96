/* gguf_reader.c - opens a GGUF file: its header read and validated
 * (gguf_header.c), from memory, a file or a virtual provider; the reader's
 * file-level accessors.
 *
 * Tensor data is not read at open: callers copy it out with
 * gguf_reader_read_tensor (pread; gguf_data.c, with the direct reads), so a
 * file that shrinks while it is being read gives an error naming it, never a
 * SIGBUS from a mapping.
 *
 * A file's header is read into memory with pread, never mapped: the buffer
 * starts with the first min(file size, 16 MiB) bytes and, when the parser
 * walks past its end, grows (twice as large, or as large as the parser
 * needs) and the parse starts over. Work stays linear in the header size.
 *
 * Opened leniently (for pn-check, which names every bad tensor itself), the
 * checks of where tensor data lies are skipped (gguf_header.c);
 * gguf_reader_tensor_data then answers NULL for a tensor not wholly inside
 * the file.
 *
 * A path names one file or one split of a set (gguf_split.c opens the rest
 * and checks them); a set's reader keeps one reader per split and answers
 * tensor questions from the split that holds the tensor, file-level ones
 * from its first split (gguf_internal.h).
 */
#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "common/file.h"
#include "common/mem.h"
#include "gguf/gguf_internal.h"


#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


/* ------------------------------------------------------------------ */
/* Opening                                                             */

static gguf_reader *new_reader(const char *name, bool lenient)
{
    gguf_reader *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->lenient = lenient;
    r->fd = -1;
    r->name = strdup(name ? name : "(memory)");
    if (!r->name) {
        free(r);
        return NULL;
    }
    return r;
}

/* Forgets what a parse built, so the header can be parsed again. */
static void reset_parsed(gguf_reader *r)
{
    for (size_t i = 0; i < r->n_tensors; i++)
        free(r->tensors[i].name);
    PN_CLOSE(free, r->tensors);
    PN_CLOSE(free, r->tensor_by_name);
    PN_CLOSE(free, r->kvs);
    PN_CLOSE(free, r->kv_by_key);
    r->n_tensors = r->n_kv = 0;
    r->version = 0;
    r->alignment = 0;
    r->data_offset = 0;
}

static pn_status open_memory(const void *data, size_t size, const char *name, bool lenient,
                             gguf_reader **out, pn_error *err)
{
    *out = NULL;
    gguf_reader *r = new_reader(name, lenient);
    if (!r)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", name ? name : "(memory)");
    r->base = size ? data : (const uint8_t *)"";
    r->size = r->avail = size;
    pn_status st =
        gguf_parse_header_(r, NULL, err); /* never NEED_MORE: the buffer is the whole file */
    if (st) {
        gguf_reader_close(r);
        return st;
    }
    *out = r;
    return PN_OK;
}

ssize_t gguf_pread_full_(int fd, void *dst, size_t n, uint64_t at)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = pread(fd, (uint8_t *)dst + done, n - done, (off_t)(at + done));
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (k == 0)
            break;
        done += (size_t)k;
    }
    return (ssize_t)done;
}

/* Reads and parses the header of the open file fd (which the reader takes). */
static pn_status open_fd_owned(int fd, const char *name, bool lenient, uint64_t first_read,
                               gguf_reader **out, pn_error *err)
{
    *out = NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return pn_error_set(err, PN_ERR_IO, "%s: cannot stat: %s", name, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return pn_error_set(err, PN_ERR_IO, "%s: %s, not a regular file", name,
                            pn_file_kind(sb.st_mode));
    }
    gguf_reader *r = new_reader(name, lenient);
    if (!r) {
        close(fd);
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", name);
    }
    r->fd = fd;
    r->size = (uint64_t)sb.st_size;
    uint64_t want = r->size < first_read ? r->size : first_read;
    for (;;) {
        if (want > SIZE_MAX) {
            gguf_reader_close(r);
            return pn_error_set(err, PN_ERR_NOMEM, "%s: a header of %llu bytes is too large", name,
                                (unsigned long long)want);
        }
        uint8_t *buf = realloc(r->owned, want ? (size_t)want : 1);
        if (!buf) {
            gguf_reader_close(r);
            return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory for a header of %llu bytes",
                                name, (unsigned long long)want);
        }
        r->owned = buf;
        r->base = buf;
        if (want > r->avail) {
            ssize_t k = gguf_pread_full_(fd, buf + r->avail, (size_t)(want - r->avail), r->avail);
            if (k < 0) {
                int e = errno;
                gguf_reader_close(r);
                return pn_error_set(err, PN_ERR_IO, "%s: cannot read: %s", name, strerror(e));
            }
            if ((uint64_t)k < want - r->avail) {
                uint64_t got = r->avail + (uint64_t)k;
                gguf_reader_close(r);
                return pn_error_set(err, PN_ERR_TRUNCATED,
                                    "%s: the file changed or shrank while it was opened: it was "
                                    "%llu bytes, but reading ended at byte %llu",
                                    name, (unsigned long long)sb.st_size, (unsigned long long)got);
            }
            r->avail = want;
        }
        uint64_t need = 0;
        pn_status st = gguf_parse_header_(r, &need, err);
        if (st == PN_OK)
            break;
        if (st != GGUF_NEED_MORE_) {
            gguf_reader_close(r);
            return st;
        }
        reset_parsed(r);
        uint64_t next = r->avail * 2 > need ? r->avail * 2 : need;
        want = next < r->size ? next : r->size;
    }
    *out = r;
    return PN_OK;
}

pn_status gguf_reader_open_one_(const char *path, bool lenient, uint64_t first_read,
                                gguf_reader **out, pn_error *err)
{
    *out = NULL;
    /* O_NONBLOCK: opening a FIFO with no writer must not hang; what is not
     * a regular file is refused right after. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return pn_error_set(err, PN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return open_fd_owned(fd, path, lenient, first_read, out, err);
}

/* How much of the file an open reads at first: the first 16 MiB (the header
 * and, for a small file, its data), or a few KiB (the header alone, read
 * further as it needs) with GGUF_OPEN_HEADER_ONLY. */
static uint64_t first_read_of(unsigned flags)
{
    return (flags & GGUF_OPEN_HEADER_ONLY) ? GGUF_READ_FIRST_SPLIT : GGUF_READ_FIRST_FILE;
}

pn_status gguf_reader_open_flags(const char *path, unsigned flags, gguf_reader **out, pn_error *err)
{
    *out = NULL;
    if (!path)
        return pn_error_set(err, PN_ERR_USAGE, "gguf reader: open of no path");
    bool lenient = (flags & GGUF_OPEN_LENIENT) != 0;
    gguf_reader *r;
    pn_status st = gguf_reader_open_one_(path, lenient, first_read_of(flags), &r, err);
    if (st)
        return st;
    if (flags & GGUF_OPEN_ONE_FILE) {
        *out = r;
        return PN_OK;
    }
    return gguf_split_open_set_(r, lenient, out, err);
}

pn_status gguf_reader_open_memory(const void *data, size_t size, const char *name,
                                  gguf_reader **out, pn_error *err)
{
    return open_memory(data, size, name, false, out, err);
}

pn_status gguf_reader_open_memory_lenient(const void *data, size_t size, const char *name,
                                          gguf_reader **out, pn_error *err)
{
    return open_memory(data, size, name, true, out, err);
}

pn_status gguf_reader_open(const char *path, gguf_reader **out, pn_error *err)
{
    return gguf_reader_open_flags(path, 0, out, err);
}

pn_status gguf_reader_open_lenient(const char *path, gguf_reader **out, pn_error *err)
{
    return gguf_reader_open_flags(path, GGUF_OPEN_LENIENT, out, err);
}

pn_status gguf_reader_open_fd_flags(int fd, const char *name, unsigned flags, gguf_reader **out,
                                    pn_error *err)
{
    *out = NULL;
    if (flags & ~(unsigned)GGUF_OPEN_HEADER_ONLY)
        return pn_error_set(err, PN_ERR_USAGE,
                            "gguf reader: flags %#x do not apply to a descriptor", flags);
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0)
        return pn_error_set(err, PN_ERR_IO, "%s: cannot duplicate its descriptor: %s",
                            name ? name : "(fd)", strerror(errno));
    return open_fd_owned(own, name ? name : "(fd)", false, first_read_of(flags), out, err);
}

pn_status gguf_reader_open_fd(int fd, const char *name, gguf_reader **out, pn_error *err)
{
    return gguf_reader_open_fd_flags(fd, name, 0, out, err);
}

void gguf_reader_close(gguf_reader *r)
{
    if (!r)
        return;
    if (r->splits) {
        /* The tensor infos and names belong to the splits' readers. */
        for (size_t s = 0; s < r->n_splits; s++)
            gguf_reader_close(r->splits[s]);
        free(r->splits);
        free(r->split_first);
        free(r->set_by_name);
        free(r->name);
        free(r);
        return;
    }
    reset_parsed(r);
    free(r->owned);
    if (r->fd >= 0)
        close(r->fd);
    if (r->virt && r->prov.close)
        r->prov.close(r->prov.ctx);
    free(r->name);
    free(r);
}

pn_status gguf_reader_open_virtual(const void *header, size_t len, const char *name,
                                   const gguf_provider *provider, gguf_reader **out, pn_error *err)
{
    *out = NULL;
    gguf_reader *r = new_reader(name, false);
    uint8_t *copy = malloc(len ? len : 1);
    if (!r || !copy) {
        free(copy);
        gguf_reader_close(r);
        if (provider->close)
            provider->close(provider->ctx);
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", name);
    }
    if (len)
        memcpy(copy, header, len);
    r->owned = copy;
    r->base = copy;
    r->avail = len;
    r->virt = true;
    r->prov = *provider;
    /* the data lies past the header: any tensor end is inside "the file"
     * while the header is parsed; the size is then where the data ends */
    r->size = UINT64_MAX / 2;
    uint64_t need = 0;
    pn_status st = gguf_parse_header_(r, &need, err);
    if (st == GGUF_NEED_MORE_)
        st = pn_error_set(err, PN_ERR_TRUNCATED, "%s: the header ends before byte %llu", name,
                          (unsigned long long)need);
    if (st) {
        gguf_reader_close(r);
        return st;
    }
    uint64_t end = r->data_offset;
    for (size_t i = 0; i < r->n_tensors; i++) {
        uint64_t e = r->data_offset + r->tensors[i].offset + r->tensors[i].size;
        if (e > end)
            end = e;
    }
    r->size = end > len ? end : len;
    *out = r;
    return PN_OK;
}

/* ------------------------------------------------------------------ */
/* Accessors                                                           */

const char *gguf_reader_name(const gguf_reader *r)
{
    return gguf_file_of_(r)->name;
}
int gguf_reader_fd(const gguf_reader *r)
{
    return gguf_file_of_(r)->fd;
}
const uint8_t *gguf_reader_bytes(const gguf_reader *r)
{
    return gguf_file_of_(r)->base;
}
uint32_t gguf_reader_version(const gguf_reader *r)
{
    return gguf_file_of_(r)->version;
}
uint64_t gguf_reader_file_size(const gguf_reader *r)
{
    return gguf_file_of_(r)->size;
}
uint64_t gguf_reader_alignment(const gguf_reader *r)
{
    return gguf_file_of_(r)->alignment;
}
uint64_t gguf_reader_data_offset(const gguf_reader *r)
{
    return gguf_file_of_(r)->data_offset;
}
size_t gguf_reader_n_kv(const gguf_reader *r)
{
    return gguf_file_of_(r)->n_kv;
}
size_t gguf_reader_n_tensors(const gguf_reader *r)
{
    return r->n_tensors;
}
uint64_t gguf_reader_bytes_len(const gguf_reader *r)
{
    return gguf_file_of_(r)->avail;
}
