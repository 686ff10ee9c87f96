/* outdir.c - atomic output folders (see outfile.h, "Folders", for the
 * contract): a temporary folder beside the target, filled through
 * pn_outdir_file (each file an outfile), then renamed into place.
 *
 * Life of an outdir:
 *   OPEN       the temporary folder exists, is locked (flock) and takes files;
 *   COMMITTED  in place at the target (the folder it replaced removed);
 *   ABORTED    nothing is left.
 *
 * The flock tells a later run for the same target that the folder is being
 * written: the kernel drops it when the process dies, however it dies, so a
 * folder of the pattern whose lock nobody holds was left by a killed run.
 * All names are resolved against a descriptor of the parent folder opened
 * once. */
#include "common/outfile.h"

#include "common/file.h"
#include "common/mem.h"
#include "common/outfile_internal.h"
#include "common/outfile_testing.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ".<start of the target's name>.<tag>-" and six random characters. */
#define DIR_TAG_DEFAULT "pn-dir"

typedef enum outdir_state { OD_OPEN, OD_COMMITTED, OD_ABORTED } outdir_state;

struct pn_outdir {
    char *target;   /* as given, without trailing slashes */
    char *base;     /* its last name component */
    char *prefix;   /* "." + the start of base + "." + tag + "-" */
    char *tmp_name; /* the temporary folder in the parent */
    char *parent;   /* the target's folder, as given ("." for none) */
    char *tmp_path; /* parent + tmp_name, for display and the files */
    const char *writer;
    int dirfd;   /* the parent folder */
    int lockfd;  /* the temporary folder, flocked while this run lives */
    bool exists; /* a folder to replace (force) */
    bool plain_rename;
    uint64_t rng;
    outdir_state state;
};

static char *dir_temp_name(pn_outdir *d)
{
    size_t pl = strlen(d->prefix);
    char *s = malloc(pl + TEMP_RANDOM + 1);
    if (!s)
        return NULL;
    memcpy(s, d->prefix, pl);
    pn_outfile_random_chars(&d->rng, s + pl, TEMP_RANDOM);
    return s;
}

static bool same_inode(int fd, int at, const char *name)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && fstatat(at, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
           a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Removes what the folder `name` of dirfd holds and the folder itself. Its
 * entries are removed by name within it, never through a link; a folder
 * inside (none of the writers makes one) is left, and so is the folder. */
static void remove_folder(int at, const char *name)
{
    DIR *d = pn_outfile_opendir_at(at, name);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            (void)unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
    (void)unlinkat(at, name, AT_REMOVEDIR);
}

/* Removes the temporary folders of this target that killed runs left:
 * those whose flock nobody holds (a live run holds its own until it ends,
 * however it ends). */
static void remove_stale_folders(pn_outdir *d)
{
    DIR *dir = pn_outfile_opendir_at(d->dirfd, ".");
    if (!dir)
        return;
    size_t pl = strlen(d->prefix);
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (strncmp(e->d_name, d->prefix, pl) != 0 ||
            !pn_outfile_random_tail(e->d_name + pl, TEMP_RANDOM) ||
            strcmp(e->d_name, d->tmp_name) == 0)
            continue;
        int fd = openat(d->dirfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue; /* not a folder (or a link): not a temporary of ours */
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && same_inode(fd, d->dirfd, e->d_name))
            remove_folder(d->dirfd, e->d_name); /* its run is gone */
        close(fd);
    }
    closedir(dir);
}

/* An existing target may be replaced only with force, only when it is a
 * folder (not a link), and only when all it holds are regular files the
 * caller's ours() accepts. */
static pn_status check_target_folder(pn_outdir *d, const pn_outdir_opts *o, pn_error *err)
{
    struct stat sb;
    if (fstatat(d->dirfd, d->base, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT)
            return PN_OK;
        return pn_error_set(err, PN_ERR_IO, "%s: %s", d->target, strerror(errno));
    }
    if (!S_ISDIR(sb.st_mode))
        return pn_error_set(err, PN_ERR_IO,
                            "%s exists and is not a folder (%s); %s writes a folder", d->target,
                            S_ISLNK(sb.st_mode) ? "a symbolic link" : "a file", d->writer);
    if (!o->force)
        return pn_error_set(err, PN_ERR_EXISTS, "%s exists; use --force to replace it", d->target);
    DIR *dir = pn_outfile_opendir_at(d->dirfd, d->base);
    if (!dir)
        return pn_error_set(err, PN_ERR_IO, "%s: %s", d->target, strerror(errno));
    pn_status st = PN_OK;
    struct dirent *e;
    while (st == PN_OK && (e = readdir(dir))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if ((o->ours && !o->ours(e->d_name)) ||
            fstatat(dirfd(dir), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
            st = pn_error_set(err, PN_ERR_EXISTS,
                              "%s: --force replaces only a folder that %s wrote, and it holds %s; "
                              "remove the folder yourself",
                              d->target, d->writer, e->d_name);
    }
    closedir(dir);
    d->exists = st == PN_OK;
    return st;
}

/* Makes the temporary folder and locks it. A run removing stale folders
 * may take a new folder in the moment before its lock: then another name. */
static pn_status make_temp_folder(pn_outdir *d, pn_error *err)
{
    for (int attempt = 0; attempt < 100; attempt++) {
        free(d->tmp_name);
        d->tmp_name = dir_temp_name(d);
        if (!d->tmp_name)
            return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", d->target);
        if (mkdirat(d->dirfd, d->tmp_name, 0755) != 0) {
            if (errno == EEXIST)
                continue;
            int e = errno;
            return pn_error_set(err, e == ENOSPC || e == EDQUOT ? PN_ERR_NOSPACE : PN_ERR_IO,
                                "%s: cannot make a temporary folder beside it: %s", d->target,
                                pn_outfile_reason(e));
        }
        int fd = openat(d->dirfd, d->tmp_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = fd < 0 ? errno : flock(fd, LOCK_EX | LOCK_NB) != 0 ? errno : 0;
        if (e == 0 && same_inode(fd, d->dirfd, d->tmp_name)) {
            d->lockfd = fd;
            return PN_OK;
        }
        if (fd >= 0)
            close(fd);
        if (e != 0 && e != ENOENT && e != EWOULDBLOCK) {
            (void)unlinkat(d->dirfd, d->tmp_name, AT_REMOVEDIR);
            return pn_error_set(err, PN_ERR_IO, "%s: cannot lock the temporary folder: %s",
                                d->target, strerror(e));
        }
        /* else a run removing stale folders took it (and removes it) */
    }
    return pn_error_set(err, PN_ERR_IO, "%s: cannot make a temporary folder beside it", d->target);
}

static pn_status outdir_names(pn_outdir *d, const char *target, const char *tag, pn_error *err)
{
    size_t len = strlen(target);
    while (len > 1 && target[len - 1] == '/')
        len--;
    d->target = strndup(target, len);
    if (!d->target)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", target);
    char *slash = strrchr(d->target, '/');
    const char *b = slash ? slash + 1 : d->target;
    if (!*b || strcmp(b, ".") == 0 || strcmp(b, "..") == 0)
        return pn_error_set(err, PN_ERR_USAGE, "%s: cannot be the output folder", target);
    d->base = strdup(b);
    d->parent = slash == d->target ? strdup("/")
                : slash            ? strndup(d->target, (size_t)(slash - d->target))
                                   : strdup(".");
    size_t cut = NAME_MAX - 3 - strlen(tag) - TEMP_RANDOM, bl = d->base ? strlen(d->base) : 0;
    d->prefix = malloc(NAME_MAX + 1);
    if (!d->base || !d->parent || !d->prefix)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", target);
    snprintf(d->prefix, NAME_MAX + 1, ".%.*s.%s-", (int)(bl < cut ? bl : cut), d->base, tag);
    d->dirfd = open(d->parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d->dirfd < 0)
        return pn_error_set(err, PN_ERR_IO, "%s: cannot open its folder %s: %s", target, d->parent,
                            strerror(errno));
    return PN_OK;
}

pn_status pn_outdir_open(const char *target, const pn_outdir_opts *opts, pn_outdir **out,
                         pn_error *err)
{
    *out = NULL;
    const pn_outdir_opts none = { 0 };
    const pn_outdir_opts *o = opts ? opts : &none;
    if (!target || !*target)
        return pn_error_set(err, PN_ERR_USAGE, "an output folder needs a path");
    const char *tag = o->tag ? o->tag : DIR_TAG_DEFAULT;
    if (strlen(tag) > 32 || strchr(tag, '/'))
        return pn_error_set(err, PN_ERR_USAGE, "%s: the tag '%s' cannot name a folder", target,
                            tag);
    pn_outdir *d = calloc(1, sizeof *d);
    if (!d)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", target);
    d->dirfd = d->lockfd = -1;
    d->state = OD_OPEN;
    d->writer = o->writer ? o->writer : "this program";
    d->plain_rename = o->testing && o->testing->plain_rename;
    d->rng = pn_outfile_seed(d);
    pn_status st = outdir_names(d, target, tag, err);
    if (st == PN_OK)
        st = check_target_folder(d, o, err);
    if (st == PN_OK)
        st = make_temp_folder(d, err);
    if (st == PN_OK) {
        d->tmp_path = pn_path_join(strcmp(d->parent, "/") == 0 ? "" : d->parent, d->tmp_name);
        if (!d->tmp_path)
            st = pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", target);
    }
    if (st != PN_OK) {
        pn_outdir_free(d);
        return st;
    }
    remove_stale_folders(d);
    *out = d;
    return PN_OK;
}

const char *pn_outdir_temp_path(const pn_outdir *d)
{
    return d && d->state == OD_OPEN ? d->tmp_path : NULL;
}

const char *pn_outdir_target(const pn_outdir *d)
{
    return d ? d->target : NULL;
}

pn_status pn_outdir_file(pn_outdir *d, const char *name, pn_outfile **out, pn_error *err)
{
    *out = NULL;
    if (!d || d->state != OD_OPEN)
        return pn_error_set(err, PN_ERR_USAGE, "%s: a file in an output folder that is %s",
                            d ? d->target : "(null)", d ? "done" : "missing");
    if (!name || !*name || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return pn_error_set(err, PN_ERR_USAGE, "%s: '%s' cannot name a file in it", d->target,
                            name ? name : "(null)");
    char *path = pn_path_join(d->tmp_path, name);
    if (!path)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", d->target);
    pn_status st = pn_outfile_open(path, NULL, out, err);
    free(path);
    return st;
}

/* Puts the temporary folder where nothing is; 0 or an errno. */
static int dir_place_new(pn_outdir *d)
{
    if (!d->plain_rename) {
        int e = pn_outfile_rename_noreplace(d->dirfd, d->tmp_name, d->base);
        if (e != EINVAL && e != ENOSYS && e != EOPNOTSUPP)
            return e;
    }
    /* No RENAME_NOREPLACE: rename() would replace an empty folder that
     * appeared meanwhile (nothing in it is lost), never a file or a folder
     * with something in it (ENOTDIR, ENOTEMPTY). */
    struct stat sb;
    if (fstatat(d->dirfd, d->base, &sb, AT_SYMLINK_NOFOLLOW) == 0)
        return EEXIST;
    return renameat(d->dirfd, d->tmp_name, d->dirfd, d->base) == 0 ? 0 : errno;
}

/* Swaps the temporary folder with the folder it replaces, which then
 * stands at the temporary name (to be removed); 0 or an errno. */
static int dir_place_swap(pn_outdir *d)
{
    struct stat sb;
    if (fstatat(d->dirfd, d->base, &sb, AT_SYMLINK_NOFOLLOW) != 0)
        return errno;
    if (!S_ISDIR(sb.st_mode))
        return ENOTDIR; /* a file took the folder's place meanwhile: never swapped */
#ifdef SYS_renameat2
    if (!d->plain_rename) {
        if (syscall(SYS_renameat2, d->dirfd, d->tmp_name, d->dirfd, d->base, RENAME_EXCHANGE) == 0)
            return 0;
        if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
            return errno;
    }
#endif
    /* No RENAME_EXCHANGE: the old folder is moved aside first, then the
     * new one put in its place (the target is missing in between, never
     * half there), then the old one takes the temporary name. */
    char *aside = dir_temp_name(d);
    if (!aside)
        return ENOMEM;
    int e = renameat(d->dirfd, d->base, d->dirfd, aside) == 0 ? 0 : errno;
    if (e == 0 && (e = dir_place_new(d)) != 0)
        (void)renameat(d->dirfd, aside, d->dirfd, d->base); /* the old one back */
    else if (e == 0 && renameat(d->dirfd, aside, d->dirfd, d->tmp_name) != 0)
        remove_folder(d->dirfd, aside);
    free(aside);
    return e;
}

pn_status pn_outdir_commit(pn_outdir *d, pn_error *err)
{
    if (!d || d->state != OD_OPEN)
        return pn_error_set(err, PN_ERR_USAGE, "%s: commit of an output folder that is %s",
                            d ? d->target : "(null)", d ? "done" : "missing");
    if (fsync(d->lockfd) != 0) {
        int e = errno;
        pn_outdir_abort(d);
        return pn_error_set(err, PN_ERR_IO, "%s: fsync of the written folder failed: %s", d->target,
                            pn_outfile_reason(e));
    }
    int e = 0;
    if (d->exists) {
        e = dir_place_swap(d);
        if (e == ENOENT) /* the folder to replace went away meanwhile */
            d->exists = false;
    }
    if (!d->exists)
        e = dir_place_new(d);
    if (e != 0) {
        pn_outdir_abort(d);
        return pn_outfile_place_failure(d->target, true, e, err);
    }
    if (d->exists)
        remove_folder(d->dirfd, d->tmp_name); /* the replaced folder */
    int pfd = openat(d->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd >= 0) {
        (void)fsync(pfd); /* best effort, as for files */
        close(pfd);
    }
    close(d->lockfd);
    close(d->dirfd);
    d->lockfd = d->dirfd = -1;
    d->state = OD_COMMITTED;
    return PN_OK;
}

void pn_outdir_abort(pn_outdir *d)
{
    if (!d || d->state != OD_OPEN)
        return;
    d->state = OD_ABORTED;
    if (d->lockfd >= 0) { /* else open failed before a folder was ours */
        remove_folder(d->dirfd, d->tmp_name);
        close(d->lockfd);
        d->lockfd = -1;
    }
    if (d->dirfd >= 0)
        close(d->dirfd);
    d->dirfd = -1;
}

void pn_outdir_free(pn_outdir *d)
{
    pn_outdir_abort(d); /* closes what is open */
    if (d)
        PN_FREE_ALL(d->target, d->base, d->parent, d->prefix, d->tmp_name, d->tmp_path, d);
}
