/* file.c - small input files read the hostile way, file identity, and the
 * O_DIRECT reopen of an open file (see file.h). */
#include "common/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void pn_remove_folder(const char *path)
{
    DIR *d = opendir(path);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            unlinkat(dirfd(d), e->d_name, 0);
    if (d)
        closedir(d);
    rmdir(path);
}

const char *pn_file_kind(mode_t m)
{
    if (S_ISREG(m))
        return NULL;
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a FIFO (named pipe)";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a regular file";
}

const char *pn_not_regular_kind(const char *path)
{
    struct stat sb;
    if (!path || stat(path, &sb) != 0)
        return NULL;
    return pn_file_kind(sb.st_mode);
}

bool pn_same_file(const char *a, const char *b)
{
    if (!a || !b)
        return false;
    if (strcmp(a, b) == 0)
        return true;
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* The folder part of path p, whose name starts at p + name_at ("." when
 * it has none, "/" for a name in the root); false when it is too long. */
static bool folder_of(const char *p, size_t name_at, char *dir, size_t dir_len)
{
    size_t n = name_at == 0 ? 0 : name_at == 1 ? 1 : name_at - 1;
    int w = snprintf(dir, dir_len, "%.*s", n ? (int)n : 1, n ? p : ".");
    return w >= 0 && (size_t)w < dir_len;
}

bool pn_same_place(const char *a, const char *b)
{
    if (pn_same_file(a, b))
        return true;
    if (!a || !b)
        return false;
    const char *sa = strrchr(a, '/'), *sb = strrchr(b, '/');
    size_t na = sa ? (size_t)(sa - a) + 1 : 0, nb = sb ? (size_t)(sb - b) + 1 : 0;
    if (strcmp(a + na, b + nb) != 0)
        return false;
    char da[PATH_MAX], db[PATH_MAX];
    struct stat ta, tb;
    return folder_of(a, na, da, sizeof da) && folder_of(b, nb, db, sizeof db) &&
           stat(da, &ta) == 0 && stat(db, &tb) == 0 && ta.st_dev == tb.st_dev &&
           ta.st_ino == tb.st_ino;
}

pn_status pn_read_small_file(const char *path, size_t max_bytes, const char *what, char **data,
                             size_t *len, pn_error *err)
{
    *data = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return pn_error_set(err, PN_ERR_IO, "%s: cannot open the %s: %s", path, what,
                            strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return pn_error_set(err, PN_ERR_IO, "%s: cannot stat the %s: %s", path, what, strerror(e));
    }
    const char *kind = pn_file_kind(sb.st_mode);
    if (kind) {
        close(fd);
        return pn_error_set(err, PN_ERR_IO, "%s: the %s is %s, not a regular file", path, what,
                            kind);
    }
    if ((uint64_t)sb.st_size > max_bytes) {
        close(fd);
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: the %s is %lld bytes, more than the %zu this program reads", path,
                            what, (long long)sb.st_size, max_bytes);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    size_t cap = (size_t)sb.st_size + 1, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory for the %s", path, what);
    }
    for (;;) {
        if (n + 1 >= cap) {
            /* full: either the end of the file, or it grew since fstat */
            char probe;
            ssize_t k = read(fd, &probe, 1);
            if (k < 0 && errno == EINTR)
                continue;
            if (k == 0)
                break;
            if (k < 0 || n + 1 > max_bytes) {
                int e = errno;
                free(buf);
                close(fd);
                if (k < 0)
                    return pn_error_set(err, PN_ERR_IO, "%s: cannot read the %s: %s", path, what,
                                        strerror(e));
                return pn_error_set(err, PN_ERR_FORMAT,
                                    "%s: the %s grew past the %zu bytes this program reads", path,
                                    what, max_bytes);
            }
            size_t nc = cap * 2 > max_bytes + 1 ? max_bytes + 1 : cap * 2;
            char *nb = realloc(buf, nc);
            if (!nb) {
                free(buf);
                close(fd);
                return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory for the %s", path, what);
            }
            buf = nb;
            cap = nc;
            buf[n++] = probe;
            continue;
        }
        ssize_t k = read(fd, buf + n, cap - 1 - n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            free(buf);
            close(fd);
            return pn_error_set(err, PN_ERR_IO, "%s: cannot read the %s: %s", path, what,
                                strerror(e));
        }
        if (k == 0)
            break;
        n += (size_t)k;
    }
    close(fd);
    if ((uint64_t)n < (uint64_t)sb.st_size) {
        free(buf);
        return pn_error_set(err, PN_ERR_TRUNCATED,
                            "%s: the %s is %lld bytes but %zu were read (it changed while read)",
                            path, what, (long long)sb.st_size, n);
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return PN_OK;
}

int pn_open_direct(int fd)
{
    if (fd < 0)
        return -1;
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    int d = open(link, O_RDONLY | O_DIRECT | O_CLOEXEC);
    struct stat a, b;
    if (d >= 0 && fstat(d, &a) == 0 && fstat(fd, &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino && S_ISREG(a.st_mode))
        return d;
    if (d >= 0)
        close(d);
    return -1;
}

char *pn_path_join(const char *folder, const char *name)
{
    size_t n = strlen(folder) + strlen(name) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s/%s", folder, name);
    return s;
}
