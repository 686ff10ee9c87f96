/* outfile_internal.h - what the file writer (outfile.c) and the folder
 * writer (outdir.c) share: temporary names and the rename that never
 * replaces. Not for other rooms: their door is outfile.h. */
#ifndef PN_COMMON_OUTFILE_INTERNAL_H
#define PN_COMMON_OUTFILE_INTERNAL_H

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"

/* renameat2's flags, for C libraries whose headers lack them. */
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

/* The folder name of folder descriptor at, opened for listing, never
 * through a link (O_NOFOLLOW); NULL with errno. */
DIR *pn_outfile_opendir_at(int at, const char *name);

/* The error of a commit that could not put the file (folder) at target:
 * PN_ERR_EXISTS where something appeared there meanwhile. */
pn_status pn_outfile_place_failure(const char *target, bool folder, int e, pn_error *err);

/* Random characters closing a temporary name. */
#define TEMP_RANDOM 6

/* A seed for temporary names (getrandom, else the clock and the pid). */
uint64_t pn_outfile_seed(const void *p);
uint64_t pn_outfile_splitmix(uint64_t *s);
/* n random letters and digits, then a NUL, into out[0..n]. */
void pn_outfile_random_chars(uint64_t *rng, char *out, int n);
/* True when s is exactly n letters and digits. */
bool pn_outfile_random_tail(const char *s, size_t n);
/* strerror, with disk full and the file size limit said plainly. */
const char *pn_outfile_reason(int e);
/* renameat2(RENAME_NOREPLACE) within one folder: 0 or an errno (ENOSYS,
 * EINVAL where the kernel or the filesystem has none). */
int pn_outfile_rename_noreplace(int dirfd, const char *from, const char *to);
/* The folder name of folder descriptor at, opened for listing, never
 * through a link (O_NOFOLLOW); NULL with errno. */
DIR *pn_outfile_opendir_at(int at, const char *name);

/* The error of a commit that could not put the file (folder) at target:
 * PN_ERR_EXISTS where something appeared there meanwhile. */
pn_status pn_outfile_place_failure(const char *target, bool folder, int e, pn_error *err);

#endif
