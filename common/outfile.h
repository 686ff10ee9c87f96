/* outfile.h - every file a program writes (GGUF outputs, reports, the
 * measurement) and every folder (pn-synth --hf's checkpoint), written so that no half-written file is ever at the target
 * path and no file is replaced unless the caller said so.
 *
 * Contract:
 *  - pn_outfile_open refuses a target that is a directory or not a regular
 *    file (a FIFO, a device), even with force, and an existing target
 *    without force (PN_ERR_EXISTS, "use --force"). A dangling symbolic link
 *    counts as existing.
 *  - The data goes to an unnamed temporary file (O_TMPFILE) in the target's
 *    folder, so a run killed by SIGKILL leaves nothing behind. Where the
 *    filesystem has no O_TMPFILE (or /proc is not mounted, which linking it
 *    needs), a named temporary file beside the target is used instead:
 *    ".<start of the target's name>.pn-XXXXXX", short enough for NAME_MAX
 *    whatever the target's name.
 *  - Opening looks in the target's folder for temporary files of that
 *    pattern (and the "<target>.tmp.XXXXXX" of earlier versions) left by a
 *    killed run, and reports them in pn_outfile_note; it never removes them.
 *  - pn_outfile_finish flushes and fsyncs; the descriptor stays open
 *    (read-write) so the caller can validate the data before the commit.
 *  - pn_outfile_commit without force links the file straight at the target,
 *    which fails if the target appeared meanwhile (another run): PN_ERR_EXISTS,
 *    nothing replaced. With force the new file replaces the target with one
 *    atomic rename. The folder is fsynced afterwards.
 *  - pn_outfile_commit_set commits several files (a split GGUF) with the
 *    first one last, so an interrupted commit never leaves a loadable
 *    partial set.
 *  - A failed write reports ENOSPC/EDQUOT/EFBIG as PN_ERR_NOSPACE ("disk
 *    full", "the file size limit (ulimit -f) was reached"), other errors as
 *    PN_ERR_IO; every message starts with the target path and gives the
 *    byte offset. Errors do not discard the file: the caller aborts (or
 *    frees) it. A failed commit discards it (see pn_outfile_commit).
 *  - No printing, no global state; a pn_outfile is used by one thread.
 */
#ifndef PN_COMMON_OUTFILE_H
#define PN_COMMON_OUTFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/pn_error.h"

typedef struct pn_outfile_opts {
    bool force; /* replace an existing target */
    /* NULL: the tests' fallbacks (common/outfile_testing.h), read at open */
    const struct pn_outfile_testing *testing;
} pn_outfile_opts;

typedef struct pn_outfile pn_outfile;

/* Checks the target and creates the temporary file (mode 0644 less the
 * umask). opts may be NULL (no force). On error *out is NULL. */
pn_status pn_outfile_open(const char *target, const pn_outfile_opts *opts, pn_outfile **out,
                          pn_error *err);

/* The descriptor of the temporary file (read-write), -1 after commit or
 * abort. For validation (pread) and for pn_outfile_write's callers only. */
int pn_outfile_fd(const pn_outfile *f);
/* "TARGET: stale temporary files from an earlier run: X, Y; remove them
 * ..." when open found some, else NULL. The names are raw bytes: print the
 * note with pn_fput_safe. Lives until pn_outfile_free. */
const char *pn_outfile_note(const pn_outfile *f);

/* Appends n bytes at the file's current position. */
pn_status pn_outfile_write(pn_outfile *f, const void *data, size_t n, pn_error *err);
/* Writes n bytes at byte offset `at` (e.g. a header patched after the
 * data); the current position does not move. */
pn_status pn_outfile_pwrite(pn_outfile *f, const void *data, size_t n, uint64_t at, pn_error *err);
/* Appends n bytes that lie in another file: descriptor fd (opened for
 * reading; its position does not move) from byte offset `off`. They go
 * with copy_file_range, which lets the kernel copy them without passing
 * through this process (or the filesystem share the blocks, a reflink,
 * where it can), and with pread and write where the kernel refuses
 * (EXDEV, EINVAL, ENOSYS, EOPNOTSUPP, ...). src_name names fd in messages;
 * PN_ERR_TRUNCATED when fd ends before off + n, PN_ERR_IO for a read
 * error of fd (both naming src_name and the offset), write errors as for
 * pn_outfile_write. */
pn_status pn_outfile_copy_from(pn_outfile *f, int fd, uint64_t off, uint64_t n,
                               const char *src_name, pn_error *err);
/* A stdio stream on the file, for text output (fprintf); owned by the
 * outfile, flushed and closed by pn_outfile_finish; its errors (ferror,
 * fflush) are reported there. Do not mix with pn_outfile_write. NULL (err
 * set) when it cannot be made. */
FILE *pn_outfile_stream(pn_outfile *f, pn_error *err);

/* A small text file the programs keep (a measurement) written whole at
 * path or not at all, replacing what is there (saving it is what the
 * caller asked for): print writes the text to the stream (ctx: its data).
 * Any failure is prefixed "saving the <what>: ". */
pn_status pn_outfile_save_text(const char *path, const char *what,
                               void (*print)(FILE *f, const void *ctx), const void *ctx,
                               pn_error *err);

/* Flushes the stream if any, fsyncs. Idempotent; no writes afterwards. */
pn_status pn_outfile_finish(pn_outfile *f, pn_error *err);

/* Finishes if not done, then puts the file at the target. On success the
 * descriptor is closed. On failure nothing is replaced (without force the
 * target that appeared meanwhile is untouched) and the file is discarded. */
pn_status pn_outfile_commit(pn_outfile *f, pn_error *err);

/* Commits files[0..n) in the order n-1, ..., 1, 0 (the first file last).
 * All files must have the same force (PN_ERR_USAGE before anything moves
 * otherwise). Without force, if one target exists at
 * commit time, the links this call made are removed and the call refuses
 * (PN_ERR_EXISTS, naming that target): nothing is left of the set. With
 * force and n > 1, an existing first target is removed before the others
 * are renamed into place, so an old first file never meets new shards; a
 * failure after it leaves the renamed ones (they replaced their old
 * versions) but no first file. On failure every file of the set not in
 * place is discarded. */
pn_status pn_outfile_commit_set(pn_outfile *const *files, size_t n, pn_error *err);

/* Discards the temporary file (closes it; the named one is unlinked).
 * Idempotent; a committed file is left alone. */
void pn_outfile_abort(pn_outfile *f);
/* Aborts unless committed, and frees. NULL is fine. */
void pn_outfile_free(pn_outfile *f);

/* ---- Folders ----
 * A folder a program writes (pn-synth --hf's checkpoint) is written the same
 * way: never half there at its target, and never put over an existing
 * target unless the caller said so.
 *
 * Contract:
 *  - pn_outdir_open refuses a target that exists and is not a folder (a
 *    file, a symbolic link), even with force; an existing folder without
 *    force (PN_ERR_EXISTS, "use --force"); and with force, a folder that
 *    holds anything but regular files that opts->ours accepts (any regular
 *    file where ours is NULL), naming the first such entry.
 *  - The files go into a temporary folder beside the target,
 *    ".<start of the target's name>.<tag>-XXXXXX" (mode 0755 less the
 *    umask), each written as an outfile (pn_outdir_file) and committed by
 *    the caller before the folder is.
 *  - The run holds an flock on its temporary folder until commit, abort or
 *    its end, however it ends. Opening removes the temporary folders of the
 *    same target's pattern whose lock nobody holds (killed runs'), by name
 *    within them, never through a link; one another live run holds is left.
 *  - pn_outdir_commit fsyncs the folder and renames it into place: with
 *    renameat2(RENAME_NOREPLACE) where nothing was, so a target that
 *    appeared meanwhile is never replaced (PN_ERR_EXISTS); with
 *    RENAME_EXCHANGE where force replaces a folder, which is then removed.
 *    Where the filesystem has neither, a plain rename after a check, and
 *    for a replacement the old folder moved aside first: the target is
 *    then missing for a moment, never half there. A failed commit discards
 *    the temporary folder; what was at the target is untouched.
 *  - No printing, no global state; a pn_outdir is used by one thread.
 */
typedef struct pn_outdir_opts {
    bool force;                     /* replace an existing folder */
    const char *tag;                /* in the temporary folder's name; NULL: "pn-dir" */
    const char *writer;             /* who writes it, for messages; NULL: "this program" */
    bool (*ours)(const char *name); /* with force: entries a replaced folder may hold */
    /* NULL: the tests' fallbacks (common/outfile_testing.h), read at open */
    const struct pn_outdir_testing *testing;
} pn_outdir_opts;

typedef struct pn_outdir pn_outdir;

/* Checks the target (trailing slashes are dropped), makes and locks the
 * temporary folder, removes stale ones. opts may be NULL. On error *out is
 * NULL and nothing was made. */
pn_status pn_outdir_open(const char *target, const pn_outdir_opts *opts, pn_outdir **out,
                         pn_error *err);
/* An outfile for the file NAME (a plain name, no '/') of the folder; the
 * caller writes it, commits it (or aborts it) and frees it. */
pn_status pn_outdir_file(pn_outdir *d, const char *name, pn_outfile **out, pn_error *err);
/* Puts the folder at the target (see the contract). On failure nothing is
 * replaced and the temporary folder is gone. */
pn_status pn_outdir_commit(pn_outdir *d, pn_error *err);
/* Removes the temporary folder. Idempotent; a committed folder is left. */
void pn_outdir_abort(pn_outdir *d);
/* Aborts unless committed, and frees. NULL is fine. */
void pn_outdir_free(pn_outdir *d);

#endif
