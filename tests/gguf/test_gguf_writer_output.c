/* The GGUF writer's output (gguf/gguf.h, common/outfile.h): a target that
 * exists, appears meanwhile or is not a file is refused; a killed run
 * leaves nothing; a set of writers is committed all or nothing. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/outfile_testing.h"
#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "fixtures/gguf_bytes.h"
#include "fixtures/gguf_files.h"
#include "fixtures/scratch.h"
#include "quant/types.h"
#include "test_util.h"

/* ------------------------------------------------------------------ */
/* The output file (common/outfile.h through the writer)              */

/* A one-tensor model of 64 pattern bytes at path, left closed (not
 * committed) in *out, or committed when out is NULL. */
static pn_status write_small(const char *path, const pn_outfile_opts *o, gguf_writer **out,
                             pn_error *e)
{
    gguf_writer *w = gguf_writer_new();
    if (o)
        gguf_writer_set_output_opts(w, o);
    cr_assert_eq(gguf_writer_set_str(w, "general.name", "small"), PN_OK);
    cr_assert_eq(gguf_writer_add_tensor(w, "t", 1, (int64_t[]){ 16 }, PN_TYPE_F32, e), PN_OK);
    pn_status st = gguf_writer_begin(w, path, e);
    if (st) {
        cr_assert_eq(gguf_writer_fd(w), -1);
        gguf_writer_free(w);
        return st;
    }
    gf_write_pattern(w, 64, 64);
    cr_assert_eq(gguf_writer_close(w, e), PN_OK, "%s", e->msg);
    if (out) {
        *out = w;
        return PN_OK;
    }
    st = gguf_writer_commit(w, e);
    gguf_writer_free(w);
    return st;
}

static bool same_bytes(const char *a, const char *b)
{
    size_t na, nb;
    void *da = tu_read_file(a, &na), *db = tu_read_file(b, &nb);
    bool same = na == nb && memcmp(da, db, na) == 0;
    free(da);
    free(db);
    return same;
}

/* No output replaces a file without --force. */
Test(gguf_writer_output, an_existing_target_is_refused_at_begin_unless_replace_is_set)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "out.gguf");
    cr_assert_eq(tu_write_file(path, "precious", 8), 0);
    pn_error e;
    cr_assert_eq(write_small(path, NULL, NULL, &e), PN_ERR_EXISTS);
    cr_assert(strncmp(e.msg, path, strlen(path)) == 0 && strstr(e.msg, "use --force"), "%s", e.msg);
    size_t n;
    char *b = tu_read_file(path, &n);
    cr_assert(n == 8 && memcmp(b, "precious", 8) == 0, "the existing file is untouched");
    free(b);
    cr_assert_eq(tu_count_files(dir), 1);

    pn_outfile_opts force = { .force = true };
    cr_assert_eq(write_small(path, &force, NULL, &e), PN_OK, "%s", e.msg);
    gguf_reader *r = gf_open_file(path);
    cr_assert_eq(gguf_reader_n_tensors(r), 1);
    gguf_reader_close(r);

    /* set_replace is the same switch */
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_replace(w, true);
    cr_assert_eq(gguf_writer_add_tensor(w, "u", 1, (int64_t[]){ 8 }, PN_TYPE_F32, &e), PN_OK);
    gf_finish(w, path);
    gf_write_pattern(w, 32, 32);
    gf_close_and_commit(w);
    gguf_writer_free(w);
    r = gf_open_file(path);
    cr_assert_str_eq(gguf_reader_tensor(r, 0)->name, "u");
    gguf_reader_close(r);
    cr_assert_eq(tu_count_files(dir), 1);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

/* Two runs writing one DST: the one that finishes second
 * is refused and the first one's file stays. */
Test(gguf_writer_output, a_target_made_by_another_run_during_this_one_is_refused_at_commit)
{
    for (int named = 0; named < 2; named++) {
        char *dir = tu_mkdtemp();
        char *path = tu_join(dir, "out.gguf");
        char *first = tu_join(dir, "first.gguf");
        const pn_outfile_testing t = { .named_temp = named };
        pn_outfile_opts o = { .testing = &t };
        gguf_writer *w = NULL;
        pn_error e;
        cr_assert_eq(write_small(path, &o, &w, &e), PN_OK, "%s", e.msg);
        /* the other run: another model, committed at the same path */
        gguf_writer *v = gguf_writer_new();
        cr_assert_eq(gguf_writer_add_tensor(v, "other", 1, (int64_t[]){ 8 }, PN_TYPE_F32, &e),
                     PN_OK);
        gf_finish(v, path);
        gf_write_pattern(v, 32, 32);
        gf_close_and_commit(v);
        gguf_writer_free(v);
        cr_assert_eq(tu_write_file(first, "", 0), 0);

        cr_assert_eq(gguf_writer_commit(w, &e), PN_ERR_EXISTS, "named %d: %s", named, e.msg);
        cr_assert(strncmp(e.msg, path, strlen(path)) == 0, "%s", e.msg);
        cr_assert(strstr(e.msg, "nothing was replaced"), "%s", e.msg);
        cr_assert_eq(gguf_writer_fd(w), -1, "a refused commit aborts");
        gguf_writer_free(w);
        gguf_reader *r = gf_open_file(path);
        cr_assert_str_eq(gguf_reader_tensor(r, 0)->name, "other", "the other run's file stays");
        gguf_reader_close(r);
        cr_assert_eq(tu_count_files(dir), 2, "named %d: no temporary file is left", named);
        free(first);
        tu_rm_rf(dir);
        free(path);
        free(dir);
    }
}

Test(gguf_writer_output, a_directory_or_a_fifo_target_is_refused_at_begin_even_with_replace)
{
    char *dir = tu_mkdtemp();
    char *sub = tu_join(dir, "sub.gguf");
    char *fifo = tu_join(dir, "fifo.gguf");
    cr_assert_eq(mkdir(sub, 0755), 0);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    pn_outfile_opts force = { .force = true };
    pn_error e;
    cr_assert_eq(write_small(sub, &force, NULL, &e), PN_ERR_IO);
    cr_assert(strstr(e.msg, "sub.gguf: the output is a directory"), "%s", e.msg);
    cr_assert_eq(write_small(fifo, &force, NULL, &e), PN_ERR_IO);
    cr_assert(strstr(e.msg, "fifo.gguf: the output is a FIFO"), "%s", e.msg);
    cr_assert_eq(tu_count_files(dir), 2);
    free(sub);
    free(fifo);
    tu_rm_rf(dir);
    free(dir);
}

/* A DST name at NAME_MAX is legal, so it is written. */
Test(gguf_writer_output, the_named_fallback_writes_the_same_bytes_even_for_a_name_max_target)
{
    char *dir = tu_mkdtemp();
    char name[NAME_MAX + 1];
    memset(name, 'm', NAME_MAX - 5);
    memcpy(name + NAME_MAX - 5, ".gguf", 6);
    cr_assert_eq(strlen(name), NAME_MAX);
    char *a = tu_join(dir, "unnamed.gguf");
    char *b = tu_join(dir, name);
    pn_error e;
    cr_assert_eq(write_small(a, NULL, NULL, &e), PN_OK, "%s", e.msg);
    const pn_outfile_testing t = { .named_temp = true };
    pn_outfile_opts named = { .testing = &t };
    cr_assert_eq(write_small(b, &named, NULL, &e), PN_OK, "%s", e.msg);
    cr_assert(same_bytes(a, b));
    char *c = tu_join(dir, "c.gguf");
    cr_assert_eq(write_small(c, NULL, NULL, &e), PN_OK, "%s", e.msg);
    pn_outfile_opts force = { .force = true };
    cr_assert_eq(write_small(b, &force, NULL, &e), PN_OK, "%s", e.msg);
    cr_assert(same_bytes(a, b));
    cr_assert_eq(tu_count_files(dir), 3);
    free(a);
    free(b);
    free(c);
    tu_rm_rf(dir);
    free(dir);
}

/* A killed run's temporary file is named by the next run. */
Test(gguf_writer_output, begin_names_the_stale_temporary_files_of_the_target)
{
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "out.gguf");
    char *stale = tu_join(dir, ".out.gguf.pn-Zz09Yy");
    char *legacy = tu_join(dir, "out.gguf.tmp.q1W2e3");
    cr_assert_eq(tu_write_file(stale, "x", 1), 0);
    cr_assert_eq(tu_write_file(legacy, "y", 1), 0);
    gguf_writer *w = NULL;
    pn_error e;
    cr_assert_null(gguf_writer_note(NULL));
    cr_assert_eq(write_small(path, NULL, &w, &e), PN_OK, "%s", e.msg);
    const char *note = gguf_writer_note(w);
    cr_assert_not_null(note);
    cr_assert(strstr(note, stale) && strstr(note, legacy) && strstr(note, "remove them"), "%s",
              note);
    cr_assert_eq(gguf_writer_commit(w, &e), PN_OK, "%s", e.msg);
    cr_assert_not_null(gguf_writer_note(w), "the note lives until free");
    gguf_writer_free(w);
    cr_assert(exists(stale) && exists(legacy), "never removed by the writer");

    char *other = tu_join(dir, "other.gguf");
    cr_assert_eq(write_small(other, NULL, &w, &e), PN_OK, "%s", e.msg);
    cr_assert_null(gguf_writer_note(w), "another target's folder mates are not its own");
    gguf_writer_free(w);
    free(other);
    free(stale);
    free(legacy);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

/* SIGKILL leaves nothing where O_TMPFILE works. */
Test(gguf_writer_output, a_run_killed_while_writing_leaves_nothing)
{
    char *dir = tu_mkdtemp_tmpfile();
    char *path = tu_join(dir, "out.gguf");
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        gguf_writer *w = gguf_writer_new();
        pn_error e;
        if (gguf_writer_add_tensor(w, "t", 1, (int64_t[]){ 1 << 20 }, PN_TYPE_F32, &e) ||
            gguf_writer_begin(w, path, &e))
            _exit(3);
        static uint8_t buf[1 << 21];
        if (gguf_writer_write(w, buf, sizeof buf, &e) || write(p[1], "w", 1) != 1)
            _exit(4);
        for (;;)
            pause();
    }
    close(p[1]);
    char c;
    cr_assert_eq(read(p[0], &c, 1), 1, "the child did not get to write");
    close(p[0]);
    kill(pid, SIGKILL);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status));
    cr_assert_eq(tu_count_files(dir), 0);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

Test(gguf_writer_output, a_set_of_writers_is_committed_all_or_nothing)
{
    char *dir = tu_mkdtemp();
    char *paths[3];
    gguf_writer *ws[3];
    pn_error e;
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "m-%05d-of-00003.gguf", i + 1);
        paths[i] = tu_join(dir, name);
        cr_assert_eq(write_small(paths[i], NULL, &ws[i], &e), PN_OK, "%s", e.msg);
    }
    cr_assert_eq(tu_write_file(paths[1], "theirs", 6), 0);
    cr_assert_eq(gguf_writer_commit_set(ws, 3, &e), PN_ERR_EXISTS, "%s", e.msg);
    cr_assert(strstr(e.msg, "m-00002-of-00003.gguf"), "%s", e.msg);
    cr_assert(!exists(paths[0]) && !exists(paths[2]));
    cr_assert_eq(tu_count_files(dir), 1);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(gguf_writer_fd(ws[i]), -1);
        gguf_writer_free(ws[i]);
    }
    cr_assert_eq(unlink(paths[1]), 0);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(write_small(paths[i], NULL, &ws[i], &e), PN_OK, "%s", e.msg);
    cr_assert_eq(gguf_writer_commit_set(ws, 3, &e), PN_OK, "%s", e.msg);
    for (int i = 0; i < 3; i++) {
        gguf_writer_free(ws[i]);
        gguf_reader *r = gf_open_file(paths[i]);
        gguf_reader_close(r);
        free(paths[i]);
    }
    tu_rm_rf(dir);
    free(dir);
}
