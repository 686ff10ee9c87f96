/* free_space.h - the checks a job makes of the places it will write before
 * it reads any tensor data: the output's folder exists, and its file system
 * has room for the bytes the plan will write (statvfs), so that a run that
 * cannot finish is refused at once rather than at byte 31457280. */
#ifndef PN_IO_FREE_SPACE_H
#define PN_IO_FREE_SPACE_H

#include <stdint.h>

#include "common/pn_error.h"

/* PN_OK when the folder that holds `path` (a file that may not exist yet)
 * exists and is a folder; else PN_ERR_IO naming `what` (e.g. "the output"),
 * the path and the folder. */
pn_status pn_check_parent_folder(const char *path, const char *what, pn_error *err);

/* PN_OK when the file system of the folder that holds `path` has at least
 * `bytes` bytes free for this user (f_bavail * f_frsize); else
 * PN_ERR_NOSPACE naming the path, the bytes needed and the bytes free. A
 * file system that statvfs cannot read is not refused (the write will
 * tell). */
pn_status pn_check_free_space(const char *path, uint64_t bytes, pn_error *err);

#endif
