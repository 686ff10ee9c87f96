/* file.h - reading small input files (recipes, name lists, measurements)
 * the hostile way, telling whether two paths are one file, joining a
 * folder and a name, and opening a file again for reads around the page
 * cache.
 *
 * pn_read_small_file opens without blocking (a FIFO with no writer must not
 * hang the program), refuses anything that is not a regular file, and
 * refuses a file larger than max_bytes before reading it, and a file that
 * gives fewer bytes than its size said (it shrank while read, or is not
 * what its size claims: PN_ERR_TRUNCATED). One that grew while read is
 * read to its end, up to max_bytes. The data is
 * NUL-terminated (data[len] == 0) and may itself hold NUL bytes; free() it.
 * Messages name the path and `what` it is ("recipe", "promote list").
 */
#ifndef PN_COMMON_FILE_H
#define PN_COMMON_FILE_H

#include <stdbool.h>
#include <sys/types.h>
#include <stddef.h>

#include "common/pn_error.h"

pn_status pn_read_small_file(const char *path, size_t max_bytes, const char *what, char **data,
                             size_t *len, pn_error *err);

/* True when both paths name one existing file (same device and inode), or
 * are the same string. */
bool pn_same_file(const char *a, const char *b);

/* True when a and b name one place a file is or will be: pn_same_file, or
 * the same name (after the last '/') in one existing folder, for a file not
 * there yet ("out.gguf" and "./out.gguf"; a folder reached through a link).
 * False for NULL or a folder name longer than PATH_MAX. */
bool pn_same_place(const char *a, const char *b);

/* folder/name, malloc'd (NULL when out of memory); free() it. */
char *pn_path_join(const char *folder, const char *name);

/* Removes the files in the folder path (each by name within it, never
 * through a link; a folder inside is left), then the folder itself: best
 * effort, for a private temporary folder that holds nothing else. */
void pn_remove_folder(const char *path);

/* What a file of mode m is when it is not a regular file ("a FIFO (named
 * pipe)", "a directory", ..., "not a regular file"); NULL for a regular file. */
const char *pn_file_kind(mode_t m);

/* A description of what a path is when it is not a regular file ("a FIFO
 * (named pipe)", "a directory", ...), or NULL for a regular file or a path
 * that does not exist. Does not follow a FIFO open. */
const char *pn_not_regular_kind(const char *path);

/* The regular file open on fd, opened again with O_DIRECT (reads around the
 * page cache) through its /proc/self/fd link: a new open file description,
 * so O_DIRECT never reaches fd itself, which stays buffered. Checked to be
 * the same device and inode as fd. -1 where /proc or O_DIRECT is missing,
 * fd is not a regular file, or the file system refuses O_DIRECT: the caller
 * then reads buffered through fd. The caller closes what it gets. */
int pn_open_direct(int fd);

#endif
