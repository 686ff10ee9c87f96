/* test_outfile.c - atomic output files (common/outfile.h): nothing is
 * replaced that was not meant to be, nothing half-written is ever at the
 * target, nothing is left behind by an abort or a SIGKILL, and the fallback
 * for filesystems without O_TMPFILE keeps the same promises.
 *
 * Tests that need O_TMPFILE make their folder with tu_mkdtemp_tmpfile and
 * check that the unnamed mode was used; every test of a promise runs in both
 * modes.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/outfile.h"
#include "common/outfile_testing.h"
#include "mix/measurement.h"
#include "test_util.h"

/* ------------------------------------------------------------------ */
/* Helpers                                                             */

/* The three ways a file is committed without force. */
typedef enum mode { UNNAMED, NAMED, NAMED_LINK, MODES_ } mode;
static const char *const mode_names[MODES_] = { "O_TMPFILE", "named temporary",
                                                "named temporary + link()" };

static pn_outfile_opts opts_of(mode m, bool force)
{
    static const pn_outfile_testing named = { .named_temp = true },
                                    linked = { .named_temp = true, .link_commit = true };
    pn_outfile_opts o = { .force = force,
                          .testing = m == UNNAMED ? NULL
                                     : m == NAMED ? &named
                                                  : &linked };
    return o;
}

static bool exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* The file's bytes equal s. */
static bool has_bytes(const char *path, const char *s)
{
    size_t n = 0;
    char *b = tu_read_file(path, &n);
    bool same = n == strlen(s) && memcmp(b, s, n) == 0;
    free(b);
    return same;
}

static pn_outfile *open_ok(const char *path, mode m, bool force)
{
    pn_outfile_opts o = opts_of(m, force);
    pn_outfile *f = NULL;
    pn_error e;
    cr_assert_eq(pn_outfile_open(path, &o, &f, &e), PN_OK, "%s: %s", mode_names[m], e.msg);
    cr_assert_eq(pn_outfile_unnamed(f), m == UNNAMED, "%s", mode_names[m]);
    return f;
}

static void write_ok(pn_outfile *f, const char *s)
{
    pn_error e;
    cr_assert_eq(pn_outfile_write(f, s, strlen(s), &e), PN_OK, "%s", e.msg);
}

/* A folder for mode m: one with O_TMPFILE for the unnamed mode. */
static char *dir_for(mode m)
{
    return m == UNNAMED ? tu_mkdtemp_tmpfile() : tu_mkdtemp();
}

/* ------------------------------------------------------------------ */
/* Creating, refusing, replacing                                       */

Test(outfile, commit_creates_the_file_with_the_written_bytes_and_mode_0644_less_the_umask)
{
    for (mode m = 0; m < MODES_; m++) {
        char *dir = dir_for(m);
        char *path = tu_join(dir, "out.json");
        mode_t old = umask(027);
        pn_outfile *f = open_ok(path, m, false);
        umask(old);
        write_ok(f, "hello ");
        write_ok(f, "world\n");
        cr_assert(!exists(path), "%s: nothing at the target before the commit", mode_names[m]);
        if (m == UNNAMED) {
            cr_assert_eq(tu_count_files(dir), 0, "the unnamed file has no name in the folder");
            cr_assert_null(pn_outfile_temp_path(f));
        } else {
            const char *tmp = pn_outfile_temp_path(f);
            cr_assert_not_null(tmp);
            cr_assert(exists(tmp));
            const char *base = strrchr(tmp, '/') + 1;
            cr_assert(strncmp(base, ".out.json.pn-", 13) == 0 && strlen(base) == 19, "%s", tmp);
        }
        pn_error e;
        cr_assert_eq(pn_outfile_commit(f, &e), PN_OK, "%s: %s", mode_names[m], e.msg);
        cr_assert_eq(pn_outfile_fd(f), -1, "the descriptor is closed after the commit");
        pn_outfile_free(f);
        cr_assert(has_bytes(path, "hello world\n"), "%s", mode_names[m]);
        struct stat sb;
        cr_assert_eq(stat(path, &sb), 0);
        cr_assert_eq(sb.st_mode & 07777, 0640, "%s: mode %o", mode_names[m],
                     (unsigned)(sb.st_mode & 07777));
        cr_assert_eq(tu_count_files(dir), 1, "%s: only the target", mode_names[m]);

        char *p2 = tu_join(dir, "out2.json");
        old = umask(022);
        f = open_ok(p2, m, false);
        umask(old);
        write_ok(f, "x");
        cr_assert_eq(pn_outfile_commit(f, &e), PN_OK, "%s", e.msg);
        pn_outfile_free(f);
        cr_assert_eq(stat(p2, &sb), 0);
        cr_assert_eq(sb.st_mode & 07777, 0644, "%s: mode %o", mode_names[m],
                     (unsigned)(sb.st_mode & 07777));
        free(p2);
        tu_rm_rf(dir);
        free(path);
        free(dir);
    }
}

Test(outfile, an_existing_target_is_refused_at_open_without_force)
{
    for (mode m = 0; m < MODES_; m++) {
        char *dir = dir_for(m);
        char *path = tu_join(dir, "report.json");
        cr_assert_eq(tu_write_file(path, "theirs", 6), 0);
        pn_outfile_opts o = opts_of(m, false);
        pn_outfile *f = (pn_outfile *)1;
        pn_error e;
        cr_assert_eq(pn_outfile_open(path, &o, &f, &e), PN_ERR_EXISTS);
        cr_assert_null(f);
        cr_assert(strncmp(e.msg, path, strlen(path)) == 0, "%s", e.msg);
        cr_assert(strstr(e.msg, "use --force"), "%s", e.msg);
        cr_assert(has_bytes(path, "theirs"));
        cr_assert_eq(tu_count_files(dir), 1);

        /* A dangling symbolic link is something at the target too. */
        char *link = tu_join(dir, "dangling");
        cr_assert_eq(symlink("/nonexistent/pn-target", link), 0);
        cr_assert_eq(pn_outfile_open(link, &o, &f, &e), PN_ERR_EXISTS, "%s", e.msg);
        free(link);
        tu_rm_rf(dir);
        free(path);
        free(dir);
    }
}

Test(outfile, a_target_created_between_open_and_commit_is_refused_and_left_intact)
{
    for (mode m = 0; m < MODES_; m++) {
        char *dir = dir_for(m);
        char *path = tu_join(dir, "out.gguf");
        pn_outfile *f = open_ok(path, m, false);
        write_ok(f, "ours");
        /* another run finished first */
        cr_assert_eq(tu_write_file(path, "the other run's", 15), 0);
        pn_error e;
        cr_assert_eq(pn_outfile_commit(f, &e), PN_ERR_EXISTS, "%s: %s", mode_names[m], e.msg);
        cr_assert(strncmp(e.msg, path, strlen(path)) == 0, "%s", e.msg);
        cr_assert(strstr(e.msg, "nothing was replaced"), "%s", e.msg);
        cr_assert(has_bytes(path, "the other run's"), "%s", mode_names[m]);
        cr_assert_eq(pn_outfile_fd(f), -1, "a failed commit discards the file");
        pn_outfile_free(f);
        cr_assert_eq(tu_count_files(dir), 1, "%s: no temporary file is left", mode_names[m]);
        tu_rm_rf(dir);
        free(path);
        free(dir);
    }
}

Test(outfile, force_replaces_an_existing_target_in_one_rename)
{
    for (mode m = 0; m < NAMED_LINK; m++) {
        char *dir = dir_for(m);
        char *path = tu_join(dir, "out.gguf");
        cr_assert_eq(tu_write_file(path, "old", 3), 0);
        /* A reader of the old file keeps its bytes: the new file is a new
         * inode, never the old one rewritten. */
        int old_fd = open(path, O_RDONLY);
        cr_assert_geq(old_fd, 0);
        pn_outfile *f = open_ok(path, m, true);
        write_ok(f, "new bytes");
        cr_assert(has_bytes(path, "old"), "the old file stays until the commit");
        pn_error e;
        cr_assert_eq(pn_outfile_commit(f, &e), PN_OK, "%s: %s", mode_names[m], e.msg);
        pn_outfile_free(f);
        cr_assert(has_bytes(path, "new bytes"), "%s", mode_names[m]);
        char b[4] = { 0 };
        cr_assert_eq(pread(old_fd, b, 3, 0), 3);
        cr_assert_str_eq(b, "old");
        close(old_fd);
        cr_assert_eq(tu_count_files(dir), 1, "%s: no temporary name is left", mode_names[m]);
        tu_rm_rf(dir);
        free(path);
        free(dir);
    }
}

Test(outfile, a_directory_a_fifo_or_a_trailing_slash_is_refused_even_with_force)
{
    char *dir = tu_mkdtemp();
    char *sub = tu_join(dir, "sub");
    char *fifo = tu_join(dir, "fifo");
    cr_assert_eq(mkdir(sub, 0755), 0);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    char slash[4200];
    snprintf(slash, sizeof slash, "%s/new/", dir);
    const struct {
        const char *path, *kind;
    } cases[] = { { sub, "a directory" }, { fifo, "a FIFO" }, { slash, "names a directory" } };
    for (int force = 0; force < 2; force++)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            pn_outfile_opts o = { .force = force };
            pn_outfile *f = NULL;
            pn_error e;
            cr_assert_eq(pn_outfile_open(cases[i].path, &o, &f, &e), PN_ERR_IO, "%s",
                         cases[i].path);
            cr_assert_null(f);
            cr_assert(strncmp(e.msg, cases[i].path, strlen(cases[i].path)) == 0, "%s", e.msg);
            cr_assert(strstr(e.msg, cases[i].kind), "%s", e.msg);
        }
    cr_assert_eq(tu_count_files(dir), 2, "only the folder and the FIFO");
    struct stat sb;
    cr_assert_eq(stat(fifo, &sb), 0);
    cr_assert(S_ISFIFO(sb.st_mode));
    free(sub);
    free(fifo);
    tu_rm_rf(dir);
    free(dir);
}

Test(outfile, a_missing_folder_is_refused_naming_the_target_and_the_folder)
{
    pn_outfile *f = NULL;
    pn_error e;
    cr_assert_eq(pn_outfile_open("/nonexistent-pn-dir/out.gguf", NULL, &f, &e), PN_ERR_IO);
    cr_assert(strstr(e.msg, "/nonexistent-pn-dir/out.gguf: cannot create a temporary file in "
                            "its folder /nonexistent-pn-dir"),
              "%s", e.msg);
    cr_assert_eq(pn_outfile_open("", NULL, &f, &e), PN_ERR_USAGE);
}

Test(outfile, a_target_name_of_exactly_name_max_bytes_works_in_both_modes)
{
    /* The name ends in a multi-byte character, so a cut of it for the
     * temporary name must not split the character. */
    char name[NAME_MAX + 1];
    memset(name, 'n', NAME_MAX);
    memcpy(name + 243, "\xc3\xa9", 2); /* bytes 243-244: a cut at 244 falls inside it */
    name[NAME_MAX] = '\0';
    cr_assert_eq(strlen(name), NAME_MAX);
    for (mode m = 0; m < MODES_; m++)
        for (int force = 0; force < 2; force++) {
            char *dir = dir_for(m);
            char *path = tu_join(dir, name);
            if (force)
                cr_assert_eq(tu_write_file(path, "old", 3), 0);
            pn_outfile *f = open_ok(path, m, force);
            if (m != UNNAMED) {
                const char *base = strrchr(pn_outfile_temp_path(f), '/') + 1;
                cr_assert_leq(strlen(base), NAME_MAX, "%s", base);
                cr_assert_eq(strlen(base), 1 + 243 + 10, "cut before the character: %zu",
                             strlen(base));
            }
            write_ok(f, "long");
            pn_error e;
            cr_assert_eq(pn_outfile_commit(f, &e), PN_OK, "%s force %d: %s", mode_names[m], force,
                         e.msg);
            pn_outfile_free(f);
            cr_assert(has_bytes(path, "long"));
            cr_assert_eq(tu_count_files(dir), 1);
            tu_rm_rf(dir);
            free(path);
            free(dir);
        }
}

/* ------------------------------------------------------------------ */
/* Nothing left behind                                                 */

Test(outfile, abort_and_free_leave_nothing_in_either_mode)
{
    for (mode m = 0; m < MODES_; m++) {
        char *dir = dir_for(m);
        char *path = tu_join(dir, "out.gguf");
        pn_outfile *f = open_ok(path, m, false);
        write_ok(f, "partial");
        pn_outfile_abort(f);
        pn_outfile_abort(f);
        cr_assert_eq(pn_outfile_fd(f), -1);
        pn_error e;
        cr_assert_eq(pn_outfile_write(f, "x", 1, &e), PN_ERR_USAGE);
        cr_assert_eq(pn_outfile_commit(f, &e), PN_ERR_USAGE);
        cr_assert(strstr(e.msg, "discarded"), "%s", e.msg);
        pn_outfile_free(f);
        cr_assert_eq(tu_count_files(dir), 0, "%s", mode_names[m]);

        f = open_ok(path, m, false);
        FILE *s = pn_outfile_stream(f, &e);
        cr_assert_not_null(s, "%s", e.msg);
        fprintf(s, "buffered text");
        cr_assert_eq(pn_outfile_finish(f, &e), PN_OK, "%s", e.msg);
        pn_outfile_free(f); /* finished, never committed */
        cr_assert_eq(tu_count_files(dir), 0, "%s", mode_names[m]);
        tu_rm_rf(dir);
        free(path);
        free(dir);
    }
}

/* Forks a child that opens path in mode m, writes 1 MiB and waits; kills it
 * with SIGKILL once it has written. */
/* A child that runs body (which _exits on failure), says so on a pipe and
 * waits to be killed; returns its pid once body is done. */
static pid_t start_writer(void (*body)(const char *, int), const char *path, int arg)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(p[0]);
        body(path, arg);
        if (write(p[1], "w", 1) != 1)
            _exit(5);
        for (;;)
            pause();
    }
    close(p[1]);
    char c = 0;
    cr_assert_eq(read(p[0], &c, 1), 1, "the child did not get to write");
    close(p[0]);
    return pid;
}

static void kill_child(pid_t pid)
{
    cr_assert_eq(kill(pid, SIGKILL), 0);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

/* Opens an outfile of mode m and writes 1 MiB to it. */
static void file_writer(const char *path, int m)
{
    pn_outfile_opts o = opts_of((mode)m, false);
    pn_outfile *f = NULL;
    pn_error e;
    if (pn_outfile_open(path, &o, &f, &e) != PN_OK || pn_outfile_unnamed(f) != (m == UNNAMED))
        _exit(3);
    static char buf[1 << 20];
    memset(buf, 'k', sizeof buf);
    if (pn_outfile_write(f, buf, sizeof buf, &e) != PN_OK)
        _exit(4);
}

static void kill_a_writer(const char *path, mode m)
{
    kill_child(start_writer(file_writer, path, (int)m));
}

Test(outfile, a_writer_killed_by_sigkill_leaves_nothing_with_o_tmpfile)
{
    char *dir = tu_mkdtemp_tmpfile();
    char *path = tu_join(dir, "out.gguf");
    kill_a_writer(path, UNNAMED);
    cr_assert_eq(tu_count_files(dir), 0, "a killed run leaves no file");
    pn_outfile *f = open_ok(path, UNNAMED, false);
    cr_assert_null(pn_outfile_note(f));
    pn_outfile_free(f);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(outfile, a_killed_fallback_writers_temp_file_is_reported_as_stale_by_the_next_open)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "out.gguf");
    kill_a_writer(path, NAMED);
    cr_assert_eq(tu_count_files(dir), 1, "the named temporary file outlives the kill");
    DIR *d = opendir(dir);
    struct dirent *de;
    char stale[NAME_MAX + 1] = "";
    while ((de = readdir(d)))
        if (de->d_name[0] == '.' && strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            snprintf(stale, sizeof stale, "%s", de->d_name);
    closedir(d);
    cr_assert(strncmp(stale, ".out.gguf.pn-", 13) == 0, "%s", stale);
    /* Also one of the versions before this module, and temporary files of
     * other targets, which are not this target's. */
    char *legacy = tu_join(dir, "out.gguf.tmp.Ab12Cd");
    char *other = tu_join(dir, ".other.gguf.pn-Ab12Cd");
    char *lookalike = tu_join(dir, ".out.gguf.pn-Ab12Cd.bak");
    cr_assert_eq(tu_write_file(legacy, "", 0), 0);
    cr_assert_eq(tu_write_file(other, "", 0), 0);
    cr_assert_eq(tu_write_file(lookalike, "", 0), 0);

    for (mode m = 0; m < MODES_; m++) {
        pn_outfile *f = open_ok(path, m, false);
        const char *note = pn_outfile_note(f);
        cr_assert_not_null(note, "%s", mode_names[m]);
        char *stale_path = tu_join(dir, stale);
        cr_assert(strncmp(note, path, strlen(path)) == 0, "%s", note);
        cr_assert(strstr(note, "stale temporary files from an earlier run"), "%s", note);
        cr_assert(strstr(note, stale_path), "%s", note);
        cr_assert(strstr(note, legacy), "%s", note);
        cr_assert(!strstr(note, "other.gguf"), "%s", note);
        cr_assert(!strstr(note, ".bak"), "%s", note);
        cr_assert(strstr(note, "remove them"), "%s", note);
        cr_assert(exists(stale_path), "stale files are reported, never removed");
        free(stale_path);
        pn_outfile_free(f);
    }
    cr_assert_eq(tu_count_files(dir), 4);
    free(legacy);
    free(other);
    free(lookalike);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

/* ------------------------------------------------------------------ */
/* Errors                                                              */

Test(outfile, a_file_size_limit_is_reported_as_a_full_disk_naming_the_file_and_offset)
{
    struct rlimit old, lim;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_IGN);
    static char chunk[1 << 19];
    for (mode m = 0; m < NAMED_LINK; m++)
        for (int stream = 0; stream < 2; stream++) {
            char *dir = dir_for(m);
            char *path = tu_join(dir, "big.gguf");
            pn_outfile *f = open_ok(path, m, false);
            lim = old;
            lim.rlim_cur = 1 << 20;
            cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
            pn_error e;
            pn_status st = PN_OK;
            if (stream) {
                FILE *s = pn_outfile_stream(f, &e);
                cr_assert_not_null(s, "%s", e.msg);
                for (int i = 0; i < 3; i++)
                    fwrite(chunk, 1, sizeof chunk, s);
                st = pn_outfile_finish(f, &e);
            } else {
                for (int i = 0; i < 3 && st == PN_OK; i++)
                    st = pn_outfile_write(f, chunk, sizeof chunk, &e);
            }
            setrlimit(RLIMIT_FSIZE, &old);
            cr_assert_eq(st, PN_ERR_NOSPACE, "%s stream %d: %s", mode_names[m], stream, e.msg);
            cr_assert(strncmp(e.msg, path, strlen(path)) == 0, "%s", e.msg);
            cr_assert(strstr(e.msg, "at byte offset 1048576"), "%s", e.msg);
            cr_assert(strstr(e.msg, "file size limit (ulimit -f)"), "%s", e.msg);
            pn_outfile_free(f);
            cr_assert_eq(tu_count_files(dir), 0);
            tu_rm_rf(dir);
            free(path);
            free(dir);
        }
}

Test(outfile, the_data_can_be_patched_and_read_back_through_the_descriptor_before_the_commit)
{
    for (mode m = 0; m < NAMED_LINK; m++) {
        char *dir = dir_for(m);
        char *path = tu_join(dir, "v.bin");
        pn_outfile *f = open_ok(path, m, false);
        write_ok(f, "header:????;data");
        pn_error e;
        cr_assert_eq(pn_outfile_pwrite(f, "CRC!", 4, 7, &e), PN_OK, "%s", e.msg);
        write_ok(f, ";tail");
        cr_assert_eq(pn_outfile_finish(f, &e), PN_OK, "%s", e.msg);
        cr_assert_eq(pn_outfile_finish(f, &e), PN_OK, "finish is idempotent");
        cr_assert_eq(pn_outfile_write(f, "x", 1, &e), PN_ERR_USAGE, "no writes after finish");
        char b[32] = { 0 };
        cr_assert_eq(pread(pn_outfile_fd(f), b, sizeof b - 1, 0), 21);
        cr_assert_str_eq(b, "header:CRC!;data;tail");
        cr_assert(!exists(path));
        cr_assert_eq(pn_outfile_commit(f, &e), PN_OK, "%s", e.msg);
        cr_assert_eq(pn_outfile_commit(f, &e), PN_ERR_USAGE, "one commit");
        pn_outfile_free(f);
        cr_assert(has_bytes(path, "header:CRC!;data;tail"));
        tu_rm_rf(dir);
        free(path);
        free(dir);
    }
}

/* ------------------------------------------------------------------ */
/* Sets                                                                */

#define SET_N 3

typedef struct set {
    char *dir;
    char *path[SET_N];
    pn_outfile *f[SET_N];
} set;

static set open_set(mode m)
{
    set s;
    s.dir = dir_for(m);
    for (int i = 0; i < SET_N; i++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.gguf", i + 1, SET_N);
        s.path[i] = tu_join(s.dir, name);
    }
    return s;
}

static void set_write(set *s, mode m, bool force, const char *what)
{
    for (int i = 0; i < SET_N; i++) {
        s->f[i] = open_ok(s->path[i], m, force);
        char text[64];
        snprintf(text, sizeof text, "%s %d", what, i);
        write_ok(s->f[i], text);
    }
}

static void set_free(set *s)
{
    for (int i = 0; i < SET_N; i++) {
        pn_outfile_free(s->f[i]);
        free(s->path[i]);
    }
    tu_rm_rf(s->dir);
    free(s->dir);
}

/* The names that appeared in the watched folder (created or moved in), in
 * order, as indices of the set (-1 for other names), and how many of the
 * set's names were deleted. */
static int read_events(int ino, const set *s, int *order, int max, int *deleted)
{
    char buf[1 << 16] __attribute__((aligned(__alignof__(struct inotify_event))));
    int n = 0;
    *deleted = 0;
    for (;;) {
        ssize_t len = read(ino, buf, sizeof buf);
        if (len <= 0)
            break;
        for (char *p = buf; p < buf + len;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            int idx = -1;
            for (int i = 0; i < SET_N && ev->len; i++)
                if (strcmp(strrchr(s->path[i], '/') + 1, ev->name) == 0)
                    idx = i;
            if (idx >= 0 && (ev->mask & (IN_CREATE | IN_MOVED_TO)) && n < max)
                order[n++] = idx;
            if (idx >= 0 && (ev->mask & IN_DELETE))
                (*deleted)++;
            p += sizeof *ev + ev->len;
        }
    }
    return n;
}

Test(outfile, a_set_commit_puts_the_first_file_in_place_last)
{
    for (mode m = 0; m < MODES_; m++)
        for (int force = 0; force < 2; force++) {
            set s = open_set(m);
            if (force)
                for (int i = 0; i < SET_N; i++)
                    cr_assert_eq(tu_write_file(s.path[i], "old", 3), 0);
            set_write(&s, m, force, "new");
            int ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
            cr_assert_geq(ino, 0);
            cr_assert_geq(inotify_add_watch(ino, s.dir, IN_CREATE | IN_MOVED_TO | IN_DELETE), 0);
            pn_error e;
            cr_assert_eq(pn_outfile_commit_set(s.f, SET_N, &e), PN_OK, "%s: %s", mode_names[m],
                         e.msg);
            int order[8], deleted = 0;
            int n = read_events(ino, &s, order, 8, &deleted);
            close(ino);
            cr_assert_eq(n, SET_N, "%s force %d: %d names appeared", mode_names[m], force, n);
            for (int i = 0; i < SET_N; i++)
                cr_assert_eq(order[i], SET_N - 1 - i, "%s force %d: step %d put file %d",
                             mode_names[m], force, i, order[i]);
            /* With force, the old first file goes before any new file comes,
             * so an old first file never meets new shards. */
            cr_assert_eq(deleted, force ? 1 : 0);
            for (int i = 0; i < SET_N; i++) {
                char text[64];
                snprintf(text, sizeof text, "new %d", i);
                cr_assert(has_bytes(s.path[i], text));
            }
            cr_assert_eq(tu_count_files(s.dir), SET_N, "no temporary names are left");
            set_free(&s);
        }
}

Test(outfile, a_set_commit_with_a_target_existing_midway_leaves_nothing_of_the_set)
{
    for (mode m = 0; m < MODES_; m++) {
        set s = open_set(m);
        set_write(&s, m, false, "ours");
        /* Another run made the second file meanwhile: the third is put in
         * place first, then the second is refused. */
        cr_assert_eq(tu_write_file(s.path[1], "theirs", 6), 0);
        int ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        cr_assert_geq(ino, 0);
        cr_assert_geq(inotify_add_watch(ino, s.dir, IN_CREATE | IN_MOVED_TO | IN_DELETE), 0);
        pn_error e;
        cr_assert_eq(pn_outfile_commit_set(s.f, SET_N, &e), PN_ERR_EXISTS, "%s: %s", mode_names[m],
                     e.msg);
        cr_assert(strncmp(e.msg, s.path[1], strlen(s.path[1])) == 0, "%s", e.msg);
        int order[8], deleted = 0;
        int n = read_events(ino, &s, order, 8, &deleted);
        close(ino);
        cr_assert_eq(n, 1, "%s: only the third file was put in place", mode_names[m]);
        cr_assert_eq(order[0], 2);
        cr_assert_eq(deleted, 1, "%s: and taken away again", mode_names[m]);
        cr_assert(!exists(s.path[0]) && !exists(s.path[2]), "%s", mode_names[m]);
        cr_assert(has_bytes(s.path[1], "theirs"));
        cr_assert_eq(tu_count_files(s.dir), 1, "%s: no temporary file is left", mode_names[m]);
        for (int i = 0; i < SET_N; i++)
            cr_assert_eq(pn_outfile_fd(s.f[i]), -1, "every file of the set is discarded");
        set_free(&s);
    }
}

Test(outfile, a_set_whose_files_disagree_on_force_is_refused_before_anything_moves)
{
    set s = open_set(NAMED);
    for (int i = 0; i < SET_N; i++) {
        s.f[i] = open_ok(s.path[i], NAMED, i == 1);
        write_ok(s.f[i], "x");
    }
    pn_error e;
    cr_assert_eq(pn_outfile_commit_set(s.f, SET_N, &e), PN_ERR_USAGE);
    cr_assert(strstr(e.msg, "must all replace or all not replace"), "%s", e.msg);
    cr_assert_eq(tu_count_files(s.dir), 0);
    set_free(&s);
}

/* ------------------------------------------------------------------ */
/* Users of the module                                                 */

Test(outfile_users, a_measurement_replaces_its_own_file_atomically_and_refuses_a_fifo)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "m.txt");
    char name[] = "blk.0.ffn_down.weight";
    pn_measure_entry entry = { name, 0.25, 0.125, 0x1234abcdu, 0.0 };
    pn_measurement m = { .params = { .quantizer = "pn-quantize test", .sample_max_rows = 8 },
                         .n = 1,
                         .entries = &entry };
    pn_error e;
    cr_assert_eq(pn_measurement_save(&m, path, &e), PN_OK, "%s", e.msg);
    int old_fd = open(path, O_RDONLY);
    cr_assert_geq(old_fd, 0);
    entry.e3 = 0.5;
    cr_assert_eq(pn_measurement_save(&m, path, &e), PN_OK, "saving again replaces: %s", e.msg);
    cr_assert_eq(tu_count_files(dir), 1, "no temporary file is left");
    pn_measurement *l = NULL;
    cr_assert_eq(pn_measurement_load(path, &l, NULL, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(l->entries[0].e3, 0.5);
    pn_measurement_free(l);
    char b[16] = { 0 };
    cr_assert_eq(pread(old_fd, b, 10, 0), 10);
    cr_assert_str_eq(b, "pn-measure", "the old file was replaced, not rewritten in place");
    close(old_fd);

    /* the file size limit: refused as a full disk, the saved file kept */
    struct rlimit old, lim;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 16;
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    entry.e3 = 0.75;
    pn_status st = pn_measurement_save(&m, path, &e);
    setrlimit(RLIMIT_FSIZE, &old);
    cr_assert_eq(st, PN_ERR_NOSPACE, "%s", e.msg);
    cr_assert(strstr(e.msg, path) && strstr(e.msg, "ulimit -f"), "%s", e.msg);
    cr_assert_eq(pn_measurement_load(path, &l, NULL, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(l->entries[0].e3, 0.5);
    pn_measurement_free(l);
    cr_assert_eq(tu_count_files(dir), 1);

    char *fifo = tu_join(dir, "fifo.txt");
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    cr_assert_eq(pn_measurement_save(&m, fifo, &e), PN_ERR_IO);
    cr_assert(strstr(e.msg, fifo) && strstr(e.msg, "a FIFO"), "%s", e.msg);
    free(fifo);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

/* ------------------------------------------------------------------ */
/* Folders                                                             */

/* Renames by renameat2 (NOREPLACE, EXCHANGE), or as where it is missing. */
static const char *const dir_mode_names[2] = { "renameat2", "plain rename" };

static pn_outdir_opts dir_opts(int plain, bool force)
{
    static const pn_outdir_testing plain_rename = { .plain_rename = true };
    pn_outdir_opts o = { .force = force,
                         .tag = "pn-test",
                         .writer = "the test",
                         .testing = plain ? &plain_rename : NULL };
    return o;
}

static pn_outdir *dir_open_ok(const char *target, int plain, bool force)
{
    pn_outdir_opts o = dir_opts(plain, force);
    pn_outdir *d = NULL;
    pn_error e;
    cr_assert_eq(pn_outdir_open(target, &o, &d, &e), PN_OK, "%s: %s", dir_mode_names[plain], e.msg);
    return d;
}

/* NAME with content s in the folder being written. */
static void dir_file_ok(pn_outdir *d, const char *name, const char *s)
{
    pn_outfile *f = NULL;
    pn_error e;
    cr_assert_eq(pn_outdir_file(d, name, &f, &e), PN_OK, "%s", e.msg);
    write_ok(f, s);
    cr_assert_eq(pn_outfile_commit(f, &e), PN_OK, "%s", e.msg);
    pn_outfile_free(f);
}

/* The folder holds exactly the names of want (NULL-ended), each file
 * holding its own name followed by tag. */
static bool folder_is(const char *dir, const char *const *want, const char *tag)
{
    int n = 0;
    for (; want[n]; n++) {
        char *p = tu_join(dir, want[n]), s[256];
        snprintf(s, sizeof s, "%s%s", want[n], tag);
        bool ok = exists(p) && has_bytes(p, s);
        free(p);
        if (!ok)
            return false;
    }
    return tu_count_files(dir) == n;
}

static void fill(pn_outdir *d, const char *const *names, const char *tag)
{
    for (size_t i = 0; names[i]; i++) {
        char s[256];
        snprintf(s, sizeof s, "%s%s", names[i], tag);
        dir_file_ok(d, names[i], s);
    }
}

static const char *const three[] = { "config.json", "model-00001-of-00002.safetensors",
                                     "model-00002-of-00002.safetensors", NULL };

Test(outdir, commit_puts_the_whole_folder_in_place_and_nothing_beside_it)
{
    for (int plain = 0; plain < 2; plain++) {
        char *top = tu_mkdtemp(), *target = tu_join(top, "ckpt");
        char slashed[4200];
        snprintf(slashed, sizeof slashed, "%s//", target);
        pn_outdir *d = dir_open_ok(slashed, plain, false);
        cr_assert_str_eq(pn_outdir_target(d), target, "trailing slashes are dropped");
        const char *tmp = pn_outdir_temp_path(d);
        cr_assert_not_null(tmp);
        const char *base = strrchr(tmp, '/') + 1;
        cr_assert(strncmp(base, ".ckpt.pn-test-", 14) == 0 && strlen(base) == 20, "%s", tmp);
        fill(d, three, "-new");
        cr_assert(!exists(target), "%s: nothing at the target before the commit",
                  dir_mode_names[plain]);
        cr_assert(folder_is(tmp, three, "-new"), "the files are in the temporary folder");
        pn_error e;
        cr_assert_eq(pn_outdir_commit(d, &e), PN_OK, "%s: %s", dir_mode_names[plain], e.msg);
        cr_assert_null(pn_outdir_temp_path(d));
        pn_outdir_free(d);
        cr_assert(folder_is(target, three, "-new"), "%s", dir_mode_names[plain]);
        cr_assert_eq(tu_count_files(top), 1, "%s: only the target is left", dir_mode_names[plain]);
        tu_rm_rf(top);
        free(target);
        free(top);
    }
}

Test(outdir, abort_and_free_leave_nothing)
{
    char *top = tu_mkdtemp(), *target = tu_join(top, "ckpt");
    pn_outdir *d = dir_open_ok(target, 0, false);
    fill(d, three, "");
    /* a file still being written when the folder is dropped */
    pn_outfile *f = NULL;
    pn_error e;
    const pn_outfile_testing t = { .named_temp = true };
    pn_outfile_opts named = { .testing = &t };
    char *p = tu_join(pn_outdir_temp_path(d), "tokenizer.json");
    cr_assert_eq(pn_outfile_open(p, &named, &f, &e), PN_OK, "%s", e.msg);
    write_ok(f, "half");
    pn_outdir_abort(d);
    cr_assert_eq(tu_count_files(top), 0, "abort leaves nothing");
    cr_assert_neq(pn_outdir_commit(d, &e), PN_OK, "an aborted folder is not committed");
    cr_assert_eq(tu_count_files(top), 0);
    pn_outfile_free(f);
    pn_outdir_free(d);
    /* free without commit is an abort */
    d = dir_open_ok(target, 0, false);
    fill(d, three, "");
    pn_outdir_free(d);
    cr_assert_eq(tu_count_files(top), 0, "free without commit leaves nothing");
    tu_rm_rf(top);
    free(p);
    free(target);
    free(top);
}

static bool accept_config_and_shards(const char *name)
{
    return strcmp(name, "config.json") == 0 || strstr(name, ".safetensors") != NULL;
}

Test(outdir, an_existing_folder_is_replaced_only_with_force_and_whole_until_the_commit)
{
    static const char *const old[] = { "config.json", "model-00001-of-00001.safetensors", NULL };
    for (int plain = 0; plain < 2; plain++) {
        char *top = tu_mkdtemp(), *target = tu_join(top, "ckpt");
        pn_outdir *d = dir_open_ok(target, plain, false);
        fill(d, old, "-old");
        pn_error e;
        cr_assert_eq(pn_outdir_commit(d, &e), PN_OK, "%s", e.msg);
        pn_outdir_free(d);

        pn_outdir_opts o = dir_opts(plain, false);
        d = NULL;
        cr_assert_eq(pn_outdir_open(target, &o, &d, &e), PN_ERR_EXISTS);
        cr_assert_null(d);
        cr_assert(strstr(e.msg, target) && strstr(e.msg, "use --force"), "%s", e.msg);
        cr_assert_eq(tu_count_files(top), 1, "a refused open makes nothing");

        o = dir_opts(plain, true);
        o.ours = accept_config_and_shards;
        cr_assert_eq(pn_outdir_open(target, &o, &d, &e), PN_OK, "%s", e.msg);
        fill(d, three, "-new");
        cr_assert(folder_is(target, old, "-old"), "%s: the old folder is whole until the commit",
                  dir_mode_names[plain]);
        cr_assert_eq(pn_outdir_commit(d, &e), PN_OK, "%s: %s", dir_mode_names[plain], e.msg);
        pn_outdir_free(d);
        cr_assert(folder_is(target, three, "-new"), "%s: the new folder, nothing of the old",
                  dir_mode_names[plain]);
        cr_assert_eq(tu_count_files(top), 1, "%s: the replaced folder is removed",
                     dir_mode_names[plain]);
        tu_rm_rf(top);
        free(target);
        free(top);
    }
}

Test(outdir, a_target_made_between_open_and_commit_is_refused_and_left_intact)
{
    for (int plain = 0; plain < 2; plain++) {
        for (int full = 0; full < 2; full++) {
            char *top = tu_mkdtemp(), *target = tu_join(top, "ckpt");
            pn_outdir *d = dir_open_ok(target, plain, false);
            fill(d, three, "");
            /* another run's folder (or, where full = 0, a plain file) */
            char *mine = tu_join(target, "mine.txt");
            if (full) {
                cr_assert_eq(mkdir(target, 0755), 0);
                cr_assert_eq(tu_write_file(mine, "mine", 4), 0);
            } else {
                cr_assert_eq(tu_write_file(target, "file", 4), 0);
            }
            pn_error e;
            cr_assert_eq(pn_outdir_commit(d, &e), PN_ERR_EXISTS, "%s", dir_mode_names[plain]);
            cr_assert(strstr(e.msg, target) && strstr(e.msg, "nothing was replaced"), "%s", e.msg);
            pn_outdir_free(d);
            cr_assert(has_bytes(full ? mine : target, full ? "mine" : "file"),
                      "%s: what appeared is untouched", dir_mode_names[plain]);
            cr_assert_eq(tu_count_files(top), 1, "%s: the temporary folder is gone",
                         dir_mode_names[plain]);
            tu_rm_rf(top);
            free(mine);
            free(target);
            free(top);
        }
    }
}

Test(outdir, a_file_that_took_the_replaced_folders_place_is_never_swapped_away)
{
    for (int plain = 0; plain < 2; plain++) {
        char *top = tu_mkdtemp(), *target = tu_join(top, "ckpt");
        cr_assert_eq(mkdir(target, 0755), 0);
        pn_outdir *d = dir_open_ok(target, plain, true);
        fill(d, three, "");
        cr_assert_eq(rmdir(target), 0);
        cr_assert_eq(tu_write_file(target, "file", 4), 0);
        pn_error e;
        cr_assert_eq(pn_outdir_commit(d, &e), PN_ERR_EXISTS, "%s", dir_mode_names[plain]);
        pn_outdir_free(d);
        cr_assert(has_bytes(target, "file"), "%s: the file is at the target still",
                  dir_mode_names[plain]);
        cr_assert_eq(tu_count_files(top), 1, "%s", dir_mode_names[plain]);
        tu_rm_rf(top);
        free(target);
        free(top);
    }
}

Test(outdir, a_file_a_link_or_a_foreign_folder_is_refused_even_with_force)
{
    char *top = tu_mkdtemp(), *target = tu_join(top, "ckpt");
    pn_outdir_opts o = dir_opts(0, true);
    o.ours = accept_config_and_shards;
    pn_outdir *d = NULL;
    pn_error e;
    /* a file */
    cr_assert_eq(tu_write_file(target, "x", 1), 0);
    cr_assert_neq(pn_outdir_open(target, &o, &d, &e), PN_OK);
    cr_assert(strstr(e.msg, "is not a folder (a file); the test writes a folder"), "%s", e.msg);
    cr_assert(has_bytes(target, "x"));
    unlink(target);
    /* a link to a folder */
    char *real = tu_join(top, "real");
    cr_assert_eq(mkdir(real, 0755), 0);
    cr_assert_eq(symlink("real", target), 0);
    cr_assert_neq(pn_outdir_open(target, &o, &d, &e), PN_OK);
    cr_assert(strstr(e.msg, "a symbolic link"), "%s", e.msg);
    unlink(target);
    /* a folder holding what the writer does not write, or a folder */
    cr_assert_eq(mkdir(target, 0755), 0);
    char *cfg = tu_join(target, "config.json"), *notes = tu_join(target, "notes.txt");
    cr_assert_eq(tu_write_file(cfg, "{}", 2), 0);
    cr_assert_eq(tu_write_file(notes, "mine", 4), 0);
    cr_assert_eq(pn_outdir_open(target, &o, &d, &e), PN_ERR_EXISTS);
    cr_assert(strstr(e.msg, "holds notes.txt"), "%s", e.msg);
    unlink(notes);
    char *sub = tu_join(target, "model.safetensors");
    cr_assert_eq(mkdir(sub, 0755), 0);
    cr_assert_eq(pn_outdir_open(target, &o, &d, &e), PN_ERR_EXISTS);
    cr_assert(strstr(e.msg, "holds model.safetensors"), "a folder is not a file: %s", e.msg);
    cr_assert_null(d);
    cr_assert(has_bytes(cfg, "{}"), "a refused --force removes nothing");
    cr_assert_eq(tu_count_files(top), 2, "nothing made beside them: ckpt and real");
    tu_rm_rf(top);
    free(sub);
    free(notes);
    free(cfg);
    free(real);
    free(target);
    free(top);
}

/* Opens the folder and writes a file in it. */
static void folder_writer(const char *target, int unused)
{
    (void)unused;
    pn_outdir_opts o = dir_opts(0, false);
    pn_outdir *d = NULL;
    pn_outfile *f = NULL;
    pn_error e;
    if (pn_outdir_open(target, &o, &d, &e) != PN_OK ||
        pn_outdir_file(d, "config.json", &f, &e) != PN_OK ||
        pn_outfile_write(f, "{}", 2, &e) != PN_OK || pn_outfile_commit(f, &e) != PN_OK)
        _exit(3);
}

/* The entries of top whose names start with prefix. */
static int count_prefix(const char *top, const char *prefix)
{
    DIR *dir = opendir(top);
    cr_assert_not_null(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(dir));)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(dir);
    return n;
}

Test(outdir, a_killed_writers_folder_is_removed_by_the_next_open_and_a_live_ones_left)
{
    char *top = tu_mkdtemp(), *target = tu_join(top, "ckpt");
    pid_t live = start_writer(folder_writer, target, 0);
    pid_t dead = start_writer(folder_writer, target, 0);
    kill_child(dead);
    cr_assert(!exists(target), "a killed writer puts nothing at the target");
    cr_assert_eq(count_prefix(top, ".ckpt.pn-test-"), 2, "both writers' folders");
    /* a stale name that is a link to a folder elsewhere: not followed */
    char *elsewhere = tu_join(top, "elsewhere"), *kept = tu_join(elsewhere, "kept");
    char *link = tu_join(top, ".ckpt.pn-test-LINKED");
    cr_assert_eq(mkdir(elsewhere, 0755), 0);
    cr_assert_eq(tu_write_file(kept, "k", 1), 0);
    cr_assert_eq(symlink("elsewhere", link), 0);
    /* a temporary of another target is not this one's */
    char *other = tu_join(top, ".ckpu.pn-test-ABCDEF");
    cr_assert_eq(mkdir(other, 0755), 0);

    pn_outdir *d = dir_open_ok(target, 0, false);
    cr_assert_eq(count_prefix(top, ".ckpt.pn-test-"), 3,
                 "the killed writer's folder is removed; the live one's, this one's and the "
                 "link are left");
    cr_assert(exists(link) && has_bytes(kept, "k"), "the link and what it names are left");
    cr_assert(exists(other), "another target's temporary is left");
    pn_outdir_free(d);
    kill_child(live);
    d = dir_open_ok(target, 0, false);
    pn_outdir_free(d);
    cr_assert_eq(count_prefix(top, ".ckpt.pn-test-"), 1,
                 "once its writer is gone, its folder goes too (the link stays)");
    cr_assert(!exists(target));
    tu_rm_rf(top);
    free(other);
    free(link);
    free(kept);
    free(elsewhere);
    free(target);
    free(top);
}

Test(outdir, a_reader_never_sees_a_half_folder_while_it_is_replaced_again_and_again, .timeout = 60)
{
    for (int plain = 0; plain < 2; plain++) {
        char *top = tu_mkdtemp(), *target = tu_join(top, "ckpt");
        pn_outdir *d = dir_open_ok(target, plain, false);
        fill(d, three, "-0");
        pn_error e;
        cr_assert_eq(pn_outdir_commit(d, &e), PN_OK, "%s", e.msg);
        pn_outdir_free(d);
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
            for (int gen = 1; gen <= 200; gen++) {
                pn_outdir_opts o = dir_opts(plain, true);
                char tag[16];
                snprintf(tag, sizeof tag, "-%d", gen);
                if (pn_outdir_open(target, &o, &d, &e) != PN_OK)
                    _exit(3);
                for (size_t i = 0; three[i]; i++) {
                    pn_outfile *f = NULL;
                    char s[256];
                    snprintf(s, sizeof s, "%s%s", three[i], tag);
                    if (pn_outdir_file(d, three[i], &f, &e) != PN_OK ||
                        pn_outfile_write(f, s, strlen(s), &e) != PN_OK ||
                        pn_outfile_commit(f, &e) != PN_OK)
                        _exit(4);
                    pn_outfile_free(f);
                }
                if (pn_outdir_commit(d, &e) != PN_OK)
                    _exit(5);
                pn_outdir_free(d);
            }
            _exit(0);
        }
        int status = 0, looks = 0;
        while (waitpid(pid, &status, WNOHANG) == 0) {
            DIR *dir = opendir(target);
            if (!dir)
                continue; /* missing a moment (plain rename): never half there */
            int n = 0;
            for (struct dirent *ent; (ent = readdir(dir));)
                n += ent->d_name[0] != '.';
            /* counted while at the target only if it is there still (a
             * replaced folder never comes back; it is emptied once away) */
            struct stat a, b;
            bool there = fstat(dirfd(dir), &a) == 0 && lstat(target, &b) == 0 &&
                         a.st_ino == b.st_ino && a.st_dev == b.st_dev;
            closedir(dir);
            if (!there)
                continue;
            looks++;
            cr_assert_eq(n, 3, "%s: a folder of %d files at the target", dir_mode_names[plain], n);
        }
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: the writer failed (%d)",
                  dir_mode_names[plain], status);
        cr_assert_gt(looks, 0);
        cr_assert(folder_is(target, three, "-200"), "%s", dir_mode_names[plain]);
        cr_assert_eq(tu_count_files(top), 1);
        tu_rm_rf(top);
        free(target);
        free(top);
    }
}
