/* outfile.c - atomic output files (see outfile.h for the contract).
 *
 * Life of an outfile:
 *   OPEN       the temporary file exists (unnamed, or named beside the
 *              target) and takes writes;
 *   FINISHED   flushed and fsynced, the descriptor still open for reading;
 *   COMMITTED  in place at the target, the descriptor closed;
 *   ABORTED    nothing is left.
 *
 * All names are resolved against a descriptor of the target's folder opened
 * once, so the file lands in the folder that was checked.
 */
#include "common/outfile.h"

#include "common/file.h"
#include "common/mem.h"
#include "common/outfile_internal.h"
#include "common/outfile_testing.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<sys/random.h>)
#include <sys/random.h>
#define PN_HAVE_GETRANDOM 1
#endif
#endif

/* ".pn-" and six random characters after the cut target name. */
#define TEMP_SUFFIX ".pn-"
#define TEMP_PREFIX_MAX (NAME_MAX - 1 - (int)(sizeof TEMP_SUFFIX - 1) - TEMP_RANDOM)
/* Stale names listed in the note; the rest are counted. */
#define NOTE_NAMES_MAX 8

typedef enum outfile_state {
    OF_OPEN,
    OF_FINISHED,
    OF_COMMITTED,
    OF_ABORTED,
} outfile_state;

struct pn_outfile {
    char *target;      /* as given */
    char *dir;         /* the target's folder, for messages */
    char *base;        /* the target's last name component */
    size_t prefix_len; /* bytes of base in temporary names */
    int dirfd;         /* O_PATH descriptor of the folder */
    int fd;
    bool unnamed;
    char *tmp_name; /* named temporary file in the folder, or NULL */
    char *tmp_path; /* dir + tmp_name, for display */
    char *note;
    FILE *stream;
    int stream_errno; /* first write error of the stream, and where */
    uint64_t stream_error_at;
    uint64_t pos; /* bytes appended (pn_outfile_write, the stream) */
    uint64_t rng;
    outfile_state state;
    pn_outfile_opts opts;       /* testing: NULL, its settings copied below */
    pn_outfile_testing testing; /* all false but in tests */
};

/* ------------------------------------------------------------------ */
/* Names                                                               */

uint64_t pn_outfile_splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A seed for temporary names; they need only differ between runs. */
uint64_t pn_outfile_seed(const void *p)
{
    uint64_t s = 0;
#ifdef PN_HAVE_GETRANDOM
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) == (ssize_t)sizeof s)
        return s;
#endif
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 40) ^
        (uint64_t)(uintptr_t)p;
    return s;
}

static const char name_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

static bool is_name_char(char c)
{
    return c && strchr(name_chars, c) != NULL;
}

/* "." + the first prefix_len bytes of the target's name + ".pn-XXXXXX". */
static char *new_temp_name(pn_outfile *f)
{
    size_t n = 1 + f->prefix_len + sizeof TEMP_SUFFIX - 1 + TEMP_RANDOM + 1;
    char *s = malloc(n);
    if (!s)
        return NULL;
    char *p = s;
    *p++ = '.';
    memcpy(p, f->base, f->prefix_len);
    p += f->prefix_len;
    memcpy(p, TEMP_SUFFIX, sizeof TEMP_SUFFIX - 1);
    p += sizeof TEMP_SUFFIX - 1;
    pn_outfile_random_chars(&f->rng, p, TEMP_RANDOM);
    return s;
}

void pn_outfile_random_chars(uint64_t *rng, char *out, int n)
{
    uint64_t r = pn_outfile_splitmix(rng);
    for (int i = 0; i < n; i++, r /= sizeof name_chars - 1)
        out[i] = name_chars[r % (sizeof name_chars - 1)];
    out[n] = '\0';
}

bool pn_outfile_random_tail(const char *s, size_t n)
{
    if (strlen(s) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_name_char(s[i]))
            return false;
    return true;
}

/* A temporary name of this target: ours, or "<target>.tmp.XXXXXX" of the
 * versions before this module. */
static bool is_temp_of(const pn_outfile *f, const char *name)
{
    if (name[0] == '.' && strncmp(name + 1, f->base, f->prefix_len) == 0) {
        const char *rest = name + 1 + f->prefix_len;
        if (strncmp(rest, TEMP_SUFFIX, sizeof TEMP_SUFFIX - 1) == 0 &&
            pn_outfile_random_tail(rest + sizeof TEMP_SUFFIX - 1, TEMP_RANDOM))
            return true;
    }
    size_t bl = strlen(f->base);
    return strncmp(name, f->base, bl) == 0 && strncmp(name + bl, ".tmp.", 5) == 0 &&
           pn_outfile_random_tail(name + bl + 5, 6);
}

static char *join_dir(const pn_outfile *f, const char *name)
{
    bool here = strcmp(f->dir, ".") == 0 && strchr(f->target, '/') == NULL;
    bool root = strcmp(f->dir, "/") == 0;
    size_t n = strlen(f->dir) + strlen(name) + 2;
    char *s = malloc(n);
    if (!s)
        return NULL;
    if (here)
        snprintf(s, n, "%s", name);
    else
        snprintf(s, n, "%s%s%s", f->dir, root ? "" : "/", name);
    return s;
}

static void note_add(char **note, size_t *len, size_t *cap, const char *s)
{
    size_t n = strlen(s);
    if (!*note && *cap == (size_t)-1)
        return; /* an earlier allocation failed: no note */
    if (*len + n + 1 > *cap) {
        size_t nc = (*len + n + 1) * 2;
        char *p = realloc(*note, nc);
        if (!p) {
            free(*note);
            *note = NULL;
            *cap = (size_t)-1;
            return;
        }
        *note = p;
        *cap = nc;
    }
    memcpy(*note + *len, s, n + 1);
    *len += n;
}

DIR *pn_outfile_opendir_at(int at, const char *name)
{
    int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d && fd >= 0) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return d;
}

/* Lists the temporary files of this target left in its folder. Best effort:
 * a folder that cannot be listed gives no note. */
static void find_stale(pn_outfile *f)
{
    DIR *d = pn_outfile_opendir_at(f->dirfd, ".");
    if (!d)
        return;
    char *note = NULL;
    size_t len = 0, cap = 0, found = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_temp_of(f, e->d_name))
            continue;
        found++;
        if (found > NOTE_NAMES_MAX)
            continue;
        if (found == 1) {
            note_add(&note, &len, &cap, f->target);
            note_add(&note, &len, &cap, ": stale temporary files from an earlier run: ");
        } else {
            note_add(&note, &len, &cap, ", ");
        }
        char *p = join_dir(f, e->d_name);
        note_add(&note, &len, &cap, p ? p : e->d_name);
        free(p);
    }
    closedir(d);
    if (!found)
        return;
    char tail[160];
    if (found > NOTE_NAMES_MAX)
        snprintf(tail, sizeof tail, " and %zu more", found - NOTE_NAMES_MAX);
    else
        tail[0] = '\0';
    note_add(&note, &len, &cap, tail);
    note_add(&note, &len, &cap, "; remove them (unless another run is writing this file now)");
    f->note = note;
}

/* ------------------------------------------------------------------ */
/* Errors                                                              */

const char *pn_outfile_reason(int e)
{
    switch (e) {
    case ENOSPC: return "no space left on the device (disk full)";
    case EDQUOT: return "disk quota exceeded (disk full for this user)";
    case EFBIG: return "the file size limit (ulimit -f) was reached";
    default: return strerror(e);
    }
}

static pn_status io_fail(const pn_outfile *f, pn_error *err, int e, const char *what, uint64_t at)
{
    pn_status code = (e == ENOSPC || e == EDQUOT || e == EFBIG) ? PN_ERR_NOSPACE : PN_ERR_IO;
    return pn_error_set(err, code, "%s: %s at byte offset %llu: %s", f->target, what,
                        (unsigned long long)at, pn_outfile_reason(e));
}

/* ------------------------------------------------------------------ */
/* Open                                                                */

static pn_status split_target(pn_outfile *f, pn_error *err)
{
    const char *slash = strrchr(f->target, '/');
    const char *base = slash ? slash + 1 : f->target;
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return pn_error_set(err, PN_ERR_IO, "%s: the output names a directory, not a file",
                            f->target);
    if (!slash)
        f->dir = strdup(".");
    else if (slash == f->target)
        f->dir = strdup("/");
    else
        f->dir = strndup(f->target, (size_t)(slash - f->target));
    f->base = strdup(base);
    if (!f->dir || !f->base)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", f->target);
    size_t cut = strlen(base);
    if (cut > (size_t)TEMP_PREFIX_MAX) {
        cut = (size_t)TEMP_PREFIX_MAX;
        while (cut > 0 && ((unsigned char)base[cut] & 0xC0) == 0x80)
            cut--; /* not inside a UTF-8 sequence */
    }
    f->prefix_len = cut;
    return PN_OK;
}

static pn_status check_target(pn_outfile *f, pn_error *err)
{
    struct stat sb;
    if (fstatat(f->dirfd, f->base, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT)
            return PN_OK;
        return pn_error_set(err, PN_ERR_IO, "%s: cannot use the output path: %s", f->target,
                            strerror(errno));
    }
    const char *kind = pn_not_regular_kind(f->target);
    if (kind)
        return pn_error_set(err, PN_ERR_IO,
                            "%s: the output is %s, not a regular file; refusing to write there",
                            f->target, kind);
    if (!f->opts.force)
        return pn_error_set(err, PN_ERR_EXISTS, "%s: exists; use --force to replace it", f->target);
    return PN_OK;
}

static pn_status create_named(pn_outfile *f, pn_error *err)
{
    for (int attempt = 0; attempt < 100; attempt++) {
        char *name = new_temp_name(f);
        if (!name)
            return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", f->target);
        int fd = openat(f->dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) {
            f->fd = fd;
            f->tmp_name = name;
            f->tmp_path = join_dir(f, name);
            if (!f->tmp_path)
                return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", f->target);
            return PN_OK;
        }
        int e = errno;
        free(name);
        if (e != EEXIST)
            return pn_error_set(err, e == ENOSPC || e == EDQUOT ? PN_ERR_NOSPACE : PN_ERR_IO,
                                "%s: cannot create a temporary file in its folder %s: %s",
                                f->target, f->dir, pn_outfile_reason(e));
    }
    return pn_error_set(err, PN_ERR_IO,
                        "%s: cannot create a temporary file in its folder %s: every name tried "
                        "exists",
                        f->target, f->dir);
}

/* An unnamed file, or -1 with errno. It is kept only if it can be linked
 * later, which takes /proc (AT_EMPTY_PATH needs a capability). */
static int create_unnamed(const pn_outfile *f)
{
    int fd = openat(f->dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    struct stat sb;
    if (stat(proc, &sb) != 0) {
        close(fd);
        errno = EOPNOTSUPP;
        return -1;
    }
    return fd;
}

pn_status pn_outfile_open(const char *target, const pn_outfile_opts *opts, pn_outfile **out,
                          pn_error *err)
{
    *out = NULL;
    if (!target || !*target)
        return pn_error_set(err, PN_ERR_USAGE, "an output file needs a path");
    pn_outfile *f = calloc(1, sizeof *f);
    if (!f)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", target);
    f->fd = -1;
    f->dirfd = -1;
    f->state = OF_OPEN; /* so that a failure below discards what was made */
    if (opts) {
        f->opts = *opts;
        f->opts.testing = NULL;
        if (opts->testing)
            f->testing = *opts->testing;
    }
    f->rng = pn_outfile_seed(f);
    f->target = strdup(target);
    pn_status st = f->target ? split_target(f, err)
                             : pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", target);
    if (st)
        goto fail;
    f->dirfd = open(f->dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (f->dirfd < 0) {
        st = pn_error_set(err, PN_ERR_IO, "%s: cannot create a temporary file in its folder %s: %s",
                          target, f->dir, strerror(errno));
        goto fail;
    }
    if ((st = check_target(f, err)))
        goto fail;
    find_stale(f);
    if (!f->testing.named_temp) {
        f->fd = create_unnamed(f);
        if (f->fd >= 0) {
            f->unnamed = true;
        } else if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
            int e = errno;
            st = pn_error_set(err, e == ENOSPC || e == EDQUOT ? PN_ERR_NOSPACE : PN_ERR_IO,
                              "%s: cannot create a temporary file in its folder %s: %s", target,
                              f->dir, pn_outfile_reason(e));
            goto fail;
        }
    }
    if (f->fd < 0 && (st = create_named(f, err)))
        goto fail;
    *out = f;
    return PN_OK;

fail:
    pn_outfile_free(f);
    return st;
}

/* ------------------------------------------------------------------ */
/* Accessors                                                           */

int pn_outfile_fd(const pn_outfile *f)
{
    return f && (f->state == OF_OPEN || f->state == OF_FINISHED) ? f->fd : -1;
}
bool pn_outfile_unnamed(const pn_outfile *f)
{
    return f && f->unnamed;
}
const char *pn_outfile_temp_path(const pn_outfile *f)
{
    return f && f->tmp_name ? f->tmp_path : NULL;
}
const char *pn_outfile_note(const pn_outfile *f)
{
    return f ? f->note : NULL;
}

/* ------------------------------------------------------------------ */
/* Writing                                                             */

static pn_status not_open(const pn_outfile *f, pn_error *err)
{
    return pn_error_set(err, PN_ERR_USAGE, "%s: write to an output that is %s",
                        f ? f->target : "(null)",
                        !f                         ? "missing"
                        : f->state == OF_FINISHED  ? "finished already"
                        : f->state == OF_COMMITTED ? "committed"
                                                   : "discarded");
}

/* Writes all n bytes at `at`, or at the current position (advancing it)
 * when `append`. */
static pn_status write_loop(pn_outfile *f, const void *data, size_t n, bool append, uint64_t at,
                            pn_error *err)
{
    if (!f || f->state != OF_OPEN)
        return not_open(f, err);
    if (n && !data)
        return pn_error_set(err, PN_ERR_USAGE, "%s: write of %zu bytes from NULL", f->target, n);
    if (!append && at > (uint64_t)INT64_MAX - n)
        return pn_error_set(err, PN_ERR_USAGE, "%s: write at byte offset %llu overflows", f->target,
                            (unsigned long long)at);
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t r = append ? write(f->fd, p, n) : pwrite(f->fd, p, n, (off_t)at);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            char what[64];
            snprintf(what, sizeof what, "cannot write %zu bytes", n);
            return io_fail(f, err, r < 0 ? errno : ENOSPC, what, append ? f->pos : at);
        }
        p += r;
        n -= (size_t)r;
        if (append)
            f->pos += (uint64_t)r;
        else
            at += (uint64_t)r;
    }
    return PN_OK;
}

pn_status pn_outfile_write(pn_outfile *f, const void *data, size_t n, pn_error *err)
{
    return write_loop(f, data, n, true, 0, err);
}

pn_status pn_outfile_pwrite(pn_outfile *f, const void *data, size_t n, uint64_t at, pn_error *err)
{
    return write_loop(f, data, n, false, at, err);
}

/* Bytes per pread/write step of pn_outfile_copy_from's fallback, and the
 * most copy_file_range is asked for at once (so a signal is seen soon). */
#define COPY_STEP ((size_t)1 << 20)
#define COPY_KERNEL_STEP ((uint64_t)64 << 20)

static pn_status copy_by_read(pn_outfile *f, int fd, uint64_t off, uint64_t n, const char *src_name,
                              pn_error *err)
{
    uint8_t *buf = malloc(n < COPY_STEP ? (size_t)(n ? n : 1) : COPY_STEP);
    if (!buf)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory copying from %s", f->target,
                            src_name);
    pn_status st = PN_OK;
    while (n > 0 && st == PN_OK) {
        size_t want = n < COPY_STEP ? (size_t)n : COPY_STEP;
        ssize_t r = pread(fd, buf, want, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            st = pn_error_set(err, PN_ERR_IO, "%s: cannot read at byte offset %llu: %s", src_name,
                              (unsigned long long)off, strerror(errno));
            break;
        }
        if (r == 0) {
            st = pn_error_set(err, PN_ERR_TRUNCATED,
                              "%s: the file ends at byte offset %llu, %llu bytes before what "
                              "was to be copied (it changed or shrank)",
                              src_name, (unsigned long long)off, (unsigned long long)n);
            break;
        }
        st = write_loop(f, buf, (size_t)r, true, 0, err);
        off += (uint64_t)r;
        n -= (uint64_t)r;
    }
    free(buf);
    return st;
}

pn_status pn_outfile_copy_from(pn_outfile *f, int fd, uint64_t off, uint64_t n,
                               const char *src_name, pn_error *err)
{
    if (!f || f->state != OF_OPEN)
        return not_open(f, err);
    if (!src_name)
        src_name = "(input)";
    if (off > (uint64_t)INT64_MAX - n)
        return pn_error_set(err, PN_ERR_USAGE, "%s: copy from byte offset %llu overflows", src_name,
                            (unsigned long long)off);
    while (n > 0 && !f->testing.copy_by_read) {
        loff_t in = (loff_t)off;
        size_t want = n < COPY_KERNEL_STEP ? (size_t)n : (size_t)COPY_KERNEL_STEP;
        ssize_t r = copy_file_range(fd, &in, f->fd, NULL, want, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == ENOSPC || errno == EDQUOT || errno == EFBIG))
            return io_fail(f, err, errno, "cannot copy into the file", f->pos);
        if (r <= 0)
            break; /* the kernel cannot (or the input ended): the reads say which */
        off += (uint64_t)r;
        n -= (uint64_t)r;
        f->pos += (uint64_t)r;
    }
    return n > 0 ? copy_by_read(f, fd, off, n, src_name, err) : PN_OK;
}

/* The stream writes through here, so that its first error (ENOSPC, EFBIG)
 * and offset are known at finish, whatever stdio made of them. */
static ssize_t stream_write(void *cookie, const char *buf, size_t n)
{
    pn_outfile *f = cookie;
    if (f->stream_errno) {
        errno = f->stream_errno;
        return -1;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t r = write(f->fd, buf + done, n - done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            f->stream_errno = r < 0 ? errno : ENOSPC;
            f->stream_error_at = f->pos;
            errno = f->stream_errno;
            return done ? (ssize_t)done : -1;
        }
        done += (size_t)r;
        f->pos += (uint64_t)r;
    }
    return (ssize_t)n;
}

FILE *pn_outfile_stream(pn_outfile *f, pn_error *err)
{
    if (!f || f->state != OF_OPEN) {
        not_open(f, err);
        return NULL;
    }
    if (f->stream)
        return f->stream;
    cookie_io_functions_t io = { .write = stream_write };
    f->stream = fopencookie(f, "w", io);
    if (!f->stream)
        pn_error_set(err, PN_ERR_IO, "%s: cannot make a stream on the output: %s", f->target,
                     strerror(errno));
    return f->stream;
}

pn_status pn_outfile_save_text(const char *path, const char *what,
                               void (*print)(FILE *f, const void *ctx), const void *ctx,
                               pn_error *err)
{
    pn_outfile_opts oo = { .force = true };
    pn_outfile *out = NULL;
    pn_status st = pn_outfile_open(path, &oo, &out, err);
    if (st)
        return pn_error_prefix(err, "saving the %s", what);
    FILE *f = pn_outfile_stream(out, err);
    if (f) {
        print(f, ctx);
        st = pn_outfile_commit(out, err);
    } else {
        st = err ? err->code : PN_ERR_IO;
    }
    pn_outfile_free(out);
    if (st)
        pn_error_prefix(err, "saving the %s", what);
    return st;
}

pn_status pn_outfile_finish(pn_outfile *f, pn_error *err)
{
    if (f && f->state == OF_FINISHED)
        return PN_OK;
    if (!f || f->state != OF_OPEN)
        return not_open(f, err);
    if (f->stream) {
        FILE *s = f->stream;
        f->stream = NULL;
        int bad = ferror(s);
        bad |= fflush(s) != 0;
        bad |= fclose(s) != 0;
        if (f->stream_errno)
            return io_fail(f, err, f->stream_errno, "cannot write the text", f->stream_error_at);
        if (bad)
            return io_fail(f, err, EIO, "cannot write the text", f->pos);
    }
    if (fsync(f->fd) != 0)
        return io_fail(f, err, errno, "fsync failed", f->pos);
    f->state = OF_FINISHED;
    return PN_OK;
}

/* ------------------------------------------------------------------ */
/* Commit                                                              */

/* Links the unnamed file at `name` in the folder; 0 or an errno. */
static int link_unnamed(const pn_outfile *f, const char *name)
{
    if (linkat(f->fd, "", f->dirfd, name, AT_EMPTY_PATH) == 0)
        return 0;
    if (errno == EEXIST)
        return EEXIST;
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", f->fd);
    if (linkat(AT_FDCWD, proc, f->dirfd, name, AT_SYMLINK_FOLLOW) == 0)
        return 0;
    return errno;
}

int pn_outfile_rename_noreplace(int dirfd, const char *from, const char *to)
{
#ifdef SYS_renameat2
    if (syscall(SYS_renameat2, dirfd, from, dirfd, to, RENAME_NOREPLACE) == 0)
        return 0;
    return errno;
#else
    (void)dirfd, (void)from, (void)to;
    return ENOSYS;
#endif
}

/* Puts f at its target unless something is there; 0 or an errno. */
static int place_noreplace(pn_outfile *f)
{
    if (f->unnamed)
        return link_unnamed(f, f->base);
    if (!f->testing.link_commit) {
        int e = pn_outfile_rename_noreplace(f->dirfd, f->tmp_name, f->base);
        if (e == 0) {
            free(f->tmp_name);
            f->tmp_name = NULL;
            return 0;
        }
        if (e != EINVAL && e != ENOSYS && e != EOPNOTSUPP)
            return e;
    }
    /* No RENAME_NOREPLACE here: link() fails on an existing name too. */
    if (linkat(f->dirfd, f->tmp_name, f->dirfd, f->base, 0) != 0)
        return errno;
    /* In place; a temporary name that cannot be removed is reported as stale
     * by the next run. */
    (void)unlinkat(f->dirfd, f->tmp_name, 0);
    free(f->tmp_name);
    f->tmp_name = NULL;
    return 0;
}

/* Puts f at its target, replacing what is there, in one rename. */
static int place_replace(pn_outfile *f)
{
    if (f->unnamed) {
        /* The unnamed file gets a temporary name first: rename() needs one. */
        for (int attempt = 0; attempt < 100; attempt++) {
            char *name = new_temp_name(f);
            if (!name)
                return ENOMEM;
            int e = link_unnamed(f, name);
            if (e == EEXIST) {
                free(name);
                continue;
            }
            if (e == 0 && renameat(f->dirfd, name, f->dirfd, f->base) != 0) {
                e = errno;
                (void)unlinkat(f->dirfd, name, 0);
            }
            free(name);
            return e;
        }
        return EEXIST;
    }
    if (renameat(f->dirfd, f->tmp_name, f->dirfd, f->base) != 0)
        return errno;
    free(f->tmp_name);
    f->tmp_name = NULL;
    return 0;
}

/* Removes the target name that this commit made, if it is still our file. */
static void unplace(pn_outfile *f)
{
    struct stat a, b;
    if (fstat(f->fd, &a) == 0 && fstatat(f->dirfd, f->base, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
        a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        (void)unlinkat(f->dirfd, f->base, 0);
}

static void sync_folder(const pn_outfile *f)
{
    /* Makes the new name durable. Best effort: the file is in place already,
     * and some filesystems refuse fsync on folders. */
    int d = openat(f->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d >= 0) {
        (void)fsync(d);
        close(d);
    }
}

pn_status pn_outfile_place_failure(const char *target, bool folder, int e, pn_error *err)
{
    if (folder && (e == ENOTEMPTY || e == ENOTDIR))
        e = EEXIST; /* a folder with something in it, or a file, is there */
    if (e == EEXIST)
        return pn_error_set(err, PN_ERR_EXISTS,
                            "%s: exists (it was created while this run was writing); nothing "
                            "was replaced; use --force to replace it",
                            target);
    if (e == EISDIR || e == ENOTEMPTY)
        return pn_error_set(err, PN_ERR_IO,
                            "%s: became a directory while this run was writing; nothing was "
                            "written there",
                            target);
    return pn_error_set(err, e == ENOSPC || e == EDQUOT ? PN_ERR_NOSPACE : PN_ERR_IO,
                        "%s: cannot put the written %s in place: %s", target,
                        folder ? "folder" : "file", pn_outfile_reason(e));
}

static void abort_all(pn_outfile *const *files, size_t n)
{
    for (size_t i = 0; i < n; i++)
        pn_outfile_abort(files[i]);
}

pn_status pn_outfile_commit_set(pn_outfile *const *files, size_t n, pn_error *err)
{
    if (!files || n == 0)
        return pn_error_set(err, PN_ERR_USAGE, "commit of no output files");
    for (size_t i = 0; i < n; i++) {
        if (!files[i] || (files[i]->state != OF_OPEN && files[i]->state != OF_FINISHED)) {
            pn_status st = pn_error_set(err, PN_ERR_USAGE, "%s: commit of an output that is %s",
                                        files[i] ? files[i]->target : "(null)",
                                        !files[i]                         ? "missing"
                                        : files[i]->state == OF_COMMITTED ? "committed already"
                                                                          : "discarded");
            abort_all(files, n);
            return st;
        }
        if (files[i]->opts.force != files[0]->opts.force) {
            pn_status st = pn_error_set(err, PN_ERR_USAGE,
                                        "%s: the files of one set must all replace or all not "
                                        "replace (%s differs)",
                                        files[0]->target, files[i]->target);
            abort_all(files, n);
            return st;
        }
    }
    for (size_t i = 0; i < n; i++) {
        pn_status st = pn_outfile_finish(files[i], err);
        if (st) {
            abort_all(files, n);
            return st;
        }
    }

    const bool force = files[0]->opts.force;
    if (force && n > 1) {
        pn_outfile *first = files[0];
        if (unlinkat(first->dirfd, first->base, 0) != 0 && errno != ENOENT) {
            pn_status st = pn_error_set(err, PN_ERR_IO,
                                        "%s: cannot remove the earlier first file of the set: "
                                        "%s; nothing was replaced",
                                        first->target, strerror(errno));
            abort_all(files, n);
            return st;
        }
    }
    for (size_t k = n; k-- > 0;) {
        pn_outfile *f = files[k];
        int e = force ? place_replace(f) : place_noreplace(f);
        if (e == 0) {
            f->state = OF_COMMITTED;
            continue;
        }
        pn_status st = pn_outfile_place_failure(f->target, false, e, err);
        if (!force)
            for (size_t j = k + 1; j < n; j++) {
                unplace(files[j]);
                files[j]->state = OF_FINISHED; /* so that the abort below closes it */
            }
        abort_all(files, n);
        return st;
    }
    for (size_t i = 0; i < n; i++) {
        pn_outfile *f = files[i];
        sync_folder(f);
        if (f->fd >= 0) {
            close(f->fd);
            f->fd = -1;
        }
    }
    return PN_OK;
}

pn_status pn_outfile_commit(pn_outfile *f, pn_error *err)
{
    return pn_outfile_commit_set(&f, 1, err);
}

void pn_outfile_abort(pn_outfile *f)
{
    if (!f || f->state == OF_COMMITTED || f->state == OF_ABORTED)
        return;
    if (f->stream) {
        fclose(f->stream);
        f->stream = NULL;
    }
    if (f->fd >= 0) {
        close(f->fd);
        f->fd = -1;
    }
    if (f->tmp_name) {
        (void)unlinkat(f->dirfd, f->tmp_name, 0);
        free(f->tmp_name);
        f->tmp_name = NULL;
    }
    f->state = OF_ABORTED;
}

void pn_outfile_free(pn_outfile *f)
{
    if (!f)
        return;
    pn_outfile_abort(f);
    if (f->fd >= 0)
        close(f->fd);
    if (f->dirfd >= 0)
        close(f->dirfd);
    PN_FREE_ALL(f->tmp_name, f->tmp_path, f->note, f->target, f->dir, f->base, f);
}
