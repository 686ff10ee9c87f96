/* free_space.c - the output's folder and its free space, checked before any
 * work (free_space.h). */
#include "io/free_space.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

/* The folder that holds path, into buf ("." for a bare name). */
static const char *parent_of(const char *path, char *buf, size_t size)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    while (n > 0 && path[n - 1] != '/')
        n--;
    while (n > 1 && path[n - 1] == '/')
        n--;
    if (n == 0)
        return ".";
    if (n >= size)
        n = size - 1;
    memcpy(buf, path, n);
    buf[n] = 0;
    return buf;
}

pn_status pn_check_parent_folder(const char *path, const char *what, pn_error *err)
{
    char buf[4096];
    const char *dir = parent_of(path, buf, sizeof buf);
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return pn_error_set(err, PN_ERR_IO, "%s: %s cannot be written: its folder %s: %s", path,
                            what, dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return pn_error_set(err, PN_ERR_IO, "%s: %s cannot be written: %s is not a folder", path,
                            what, dir);
    return PN_OK;
}

pn_status pn_check_free_space(const char *path, uint64_t bytes, pn_error *err)
{
    char buf[4096];
    const char *dir = parent_of(path, buf, sizeof buf);
    struct statvfs vfs;
    if (statvfs(dir, &vfs) != 0)
        return PN_OK;
    const uint64_t avail = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
    if (avail >= bytes)
        return PN_OK;
    return pn_error_set(err, PN_ERR_NOSPACE,
                        "%s: the output needs %llu bytes (%.3f GB) and the file system of %s has "
                        "%llu bytes (%.3f GB) free",
                        path, (unsigned long long)bytes, (double)bytes / 1e9, dir,
                        (unsigned long long)avail, (double)avail / 1e9);
}
