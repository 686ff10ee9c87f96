/* test_util.h - small helpers shared by the Criterion suites. */
#ifndef PN_TEST_UTIL_H
#define PN_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Reads a whole file (test data: PN_TEST_DATA "/golden/..."); aborts the test
 * with a message when it cannot. Caller frees. */
/* The whole file, with a NUL after its *size bytes (text reads as a C string). */
void *tu_read_file(const char *path, size_t *size);
/* Writes a buffer to a file; returns 0 on success. */
int tu_write_file(const char *path, const void *data, size_t size);
/* A fresh empty directory under /tmp (or $TMPDIR); caller frees the string. */
char *tu_mkdtemp(void);
/* The same on a filesystem with O_TMPFILE (TMPDIR, else /dev/shm), for
 * tests of unnamed output files; the test fails when there is none. */
char *tu_mkdtemp_tmpfile(void);
/* "dir/name"; caller frees. */
char *tu_join(const char *dir, const char *name);
/* "dir/name" in static storage that the next 7 calls leave alone: for a
 * few paths at a time in one expression, nothing to free. */
const char *tu_join_static(const char *dir, const char *name);
/* Whether anything (a file, a folder) stands at path: stat succeeds. */
bool tu_exists(const char *path);
/* Entries of a folder, hidden ones included ("." and ".." not). */
int tu_count_files(const char *dir);
/* Entries of a folder that are an output's temporary files: names holding
 * ".tmp." (a file beside its target) or ".pn-" (a split set's). */
int tu_count_temporary_files(const char *dir);
/* The temporary output this process is writing in dir, as a path that
 * opens it (malloc'd): a named temporary file (".tmp.", ".pn-"), or an
 * unnamed one (O_TMPFILE) through the descriptor the process holds,
 * /proc/self/fd/N. Fails the test when there is none. */
char *tu_find_temporary_output(const char *dir);
/* Removes a directory tree made by tu_mkdtemp. */
void tu_rm_rf(const char *path);

/* In a forked child that runs a program: its stdout and stderr go to
 * /dev/null (the test watches its exit status, not its words). */
void tu_child_output_to_devnull(void);

/* Runs a command line through /bin/sh with stdout and stderr captured.
 * Returns the exit status (128+signal if killed). *out / *err (if not NULL)
 * receive NUL-terminated captured text; caller frees. */
int tu_run(const char *cmdline, char **out, char **err);
/* tu_run of the built program PN_BIN_DIR/<program> with the arguments
 * that fmt formats (shell words, quoted by the caller). */
int tu_run_program(char **out, char **err, const char *program, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The notes a job hands its note callback, one a line: pass tu_keep_note
 * as the callback and a tu_notes (zeroed) as its user pointer. */
typedef struct tu_notes {
    char text[16384];
} tu_notes;
void tu_keep_note(const char *msg, void *user);

/* The CPUs this process may run on (sched_getaffinity), as the tests
 * count them, to say what a program's --threads note must read. */
int tu_usable_cpus(void);

/* Deterministic random numbers for tests (splitmix64 + Box-Muller). */
typedef struct tu_rng {
    uint64_t s;
} tu_rng;
uint64_t tu_rng_u64(tu_rng *r);
double tu_rng_uniform(tu_rng *r); /* [0, 1) */
double tu_rng_gauss(tu_rng *r);   /* N(0, 1) */

/* The measurement's sampled rows, computed here as the format states them
 * (every row when n_rows <= max_rows, else floor(i * n_rows / max_rows) in
 * 128-bit arithmetic), independently of mix/measurement.c. out holds
 * min(n_rows, max_rows) entries; returns how many. */
int64_t tu_sample_rows(int64_t n_rows, int64_t max_rows, int64_t *out);

/* A regular file that gives fewer bytes than its size says (a sysfs
 * attribute: st_size 4096, a few bytes read), for the short-read tests.
 * Fails the test, naming what was tried, where there is none (/sys not
 * mounted): never a silent skip. */
const char *tu_short_read_file(void);

/* Is stock llama.cpp here? NULL when node runs SCRIPT (the harness,
 * tools/llama/pn-llama-logits.mjs) and it reports llama_cpp, and NEEDED (a
 * file the test also needs, such as libllama; NULL for none) is readable;
 * else why not (a static buffer, the last call's). */
const char *tu_llama_missing(const char *script, const char *needed);

/* The stock llama.cpp tests: skipped with the reason where llama.cpp is
 * missing, except where PN_REQUIRE_LLAMA=1 (CI), where they fail. */
#define TU_REQUIRE_LLAMA(script, needed)                                                           \
    do {                                                                                           \
        const char *why_ = tu_llama_missing(script, needed);                                       \
        const char *ci_ = getenv("PN_REQUIRE_LLAMA");                                              \
        if (why_ && ci_ && strcmp(ci_, "1") == 0)                                                  \
            cr_assert_fail("llama.cpp is required here (PN_REQUIRE_LLAMA=1): %s", why_);           \
        if (why_)                                                                                  \
            cr_skip_test("llama.cpp is not available: %s", why_);                                  \
    } while (0)

/* A pipe whose write end is full (filled with 'f' until a write would
 * block): a program given it as stderr stops in its first line, in the
 * middle of its work. Returns how many bytes fill it. */
size_t tu_full_pipe(int fds[2]);
/* Reads fd to its end (at most filled + 64 KiB), closes it, and returns
 * what came after the filled bytes (malloc'd). */
char *tu_drain_pipe(int fd, size_t filled);

#endif
