#include "test_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

void *tu_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        cr_assert_fail("cannot open test file %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(n > 0 ? (size_t)n + 1 : 1);
    cr_assert_not_null(buf);
    if (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)
        cr_assert_fail("short read of %s", path);
    fclose(f);
    buf[n > 0 ? n : 0] = '\0'; /* a NUL after the bytes: text files read as C strings */
    if (size)
        *size = (size_t)n;
    return buf;
}

int tu_write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, size, f);
    int rc = fclose(f);
    return (w == size && rc == 0) ? 0 : -1;
}

char *tu_mkdtemp(void)
{
    const char *base = getenv("TMPDIR");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s/pn-test-XXXXXX", base && *base ? base : "/tmp");
    char *d = mkdtemp(buf);
    cr_assert_not_null(d, "mkdtemp failed");
    return strdup(d);
}

/* True when an unnamed file can be made in dir. */
static int has_tmpfile(const char *dir)
{
    int fd = open(dir, O_TMPFILE | O_RDWR, 0600);
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

char *tu_mkdtemp_tmpfile(void)
{
    char *d = tu_mkdtemp();
    if (has_tmpfile(d))
        return d;
    tu_rm_rf(d);
    free(d);
    char buf[] = "/dev/shm/pn-test-XXXXXX";
    char *s = mkdtemp(buf);
    cr_assert_not_null(s, "TMPDIR has no O_TMPFILE and /dev/shm cannot be used");
    cr_assert(has_tmpfile(s), "neither TMPDIR nor /dev/shm supports O_TMPFILE");
    return strdup(s);
}

char *tu_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    cr_assert_not_null(p);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

const char *tu_join_static(const char *dir, const char *name)
{
    static char ring[8][4096];
    static unsigned next;
    char *p = ring[next++ % 8];
    snprintf(p, sizeof ring[0], "%s/%s", dir, name);
    return p;
}

bool tu_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

int tu_count_files(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot list %s", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

int tu_count_temporary_files(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot list %s", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strstr(e->d_name, ".tmp.") != NULL || strstr(e->d_name, ".pn-") != NULL;
    closedir(d);
    return n;
}

char *tu_find_temporary_output(const char *dir)
{
    char *p = NULL;
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot list %s", dir);
    for (struct dirent *e; !p && (e = readdir(d));)
        if (strstr(e->d_name, ".tmp.") || strstr(e->d_name, ".pn-")) {
            p = malloc(strlen(dir) + strlen(e->d_name) + 2);
            sprintf(p, "%s/%s", dir, e->d_name);
        }
    closedir(d);
    for (int fd = 3; fd < 1024 && !p; fd++) {
        char link[64], target[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = 0;
        if (strncmp(target, dir, strlen(dir)) == 0 && strstr(target, "(deleted)"))
            p = strdup(link);
    }
    cr_assert(p, "no temporary output in %s", dir);
    return p;
}

void tu_rm_rf(const char *path)
{
    if (!path || !*path || strcmp(path, "/") == 0)
        return;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) { /* best effort */
    }
}

static char *slurp_fd(FILE *f)
{
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    size_t r;
    while ((r = fread(s + len, 1, cap - len - 1, f)) > 0) {
        len += r;
        if (cap - len - 1 == 0) {
            cap *= 2;
            s = realloc(s, cap);
        }
    }
    s[len] = '\0';
    return s;
}

int tu_run(const char *cmdline, char **out, char **err)
{
    char outp[] = "/tmp/pn-tu-out-XXXXXX", errp[] = "/tmp/pn-tu-err-XXXXXX";
    int fo = mkstemp(outp), fe = mkstemp(errp);
    cr_assert(fo >= 0 && fe >= 0);
    close(fo);
    close(fe);
    size_t n = strlen(cmdline) + 2 * sizeof outp + 32;
    char *full = malloc(n);
    snprintf(full, n, "{ %s\n} >%s 2>%s </dev/null", cmdline, outp, errp);
    int st = system(full);
    free(full);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    FILE *f;
    if (out) {
        f = fopen(outp, "rb");
        *out = f ? slurp_fd(f) : strdup("");
        if (f)
            fclose(f);
    }
    if (err) {
        f = fopen(errp, "rb");
        *err = f ? slurp_fd(f) : strdup("");
        if (f)
            fclose(f);
    }
    unlink(outp);
    unlink(errp);
    return rc;
}

void tu_child_output_to_devnull(void)
{
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    dup2(devnull, 2);
    close(devnull);
}

int tu_run_program(char **out, char **err, const char *program, const char *fmt, ...)
{
    char args[8192], cmd[9000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s/%s %s", PN_BIN_DIR, program, args);
    return tu_run(cmd, out, err);
}

void tu_keep_note(const char *msg, void *user)
{
    tu_notes *n = user;
    size_t at = strlen(n->text);
    snprintf(n->text + at, sizeof n->text - at, "%s\n", msg);
}

uint64_t tu_rng_u64(tu_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double tu_rng_uniform(tu_rng *r)
{
    return (double)(tu_rng_u64(r) >> 11) * 0x1.0p-53;
}

double tu_rng_gauss(tu_rng *r)
{
    double u1 = tu_rng_uniform(r), u2 = tu_rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int64_t tu_sample_rows(int64_t n_rows, int64_t max_rows, int64_t *out)
{
    if (n_rows < 1 || max_rows < 1)
        return 0;
    int64_t n = n_rows < max_rows ? n_rows : max_rows;
    __extension__ typedef __int128 i128;
    for (int64_t i = 0; i < n; i++)
        out[i] = n_rows <= max_rows ? i : (int64_t)((i128)i * n_rows / max_rows);
    return n;
}

int tu_usable_cpus(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0, "sched_getaffinity");
    return CPU_COUNT(&set);
}

const char *tu_short_read_file(void)
{
    static const char *const tries[] = {
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "/sys/devices/system/cpu/online",
        "/sys/kernel/uevent_seqnum",
        "/sys/kernel/profiling",
    };
    for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
        struct stat sb;
        if (stat(tries[i], &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size <= 0)
            continue;
        int fd = open(tries[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        char buf[8192];
        ssize_t got = 0, k;
        while ((k = read(fd, buf, sizeof buf)) > 0)
            got += k;
        close(fd);
        if (k == 0 && got < (ssize_t)sb.st_size)
            return tries[i];
    }
    cr_assert_fail("no file here reads fewer bytes than its size says (tried %s, %s, %s, %s): "
                   "the short-read tests need sysfs mounted at /sys",
                   tries[0], tries[1], tries[2], tries[3]);
    return NULL;
}

const char *tu_llama_missing(const char *script, const char *needed)
{
    static char why[1200];
    char *out = NULL, *err = NULL;
    int rc = tu_run("node --version", &out, &err);
    if (rc != 0) {
        snprintf(why, sizeof why,
                 "node is not installed (exit %d); pn-compare runs llama.cpp through Node.js", rc);
    } else {
        free(out);
        free(err);
        out = err = NULL;
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "node '%s' --version", script);
        rc = tu_run(cmd, &out, &err);
        if (rc == 0 && out && strstr(out, "llama_cpp") && (!needed || access(needed, R_OK) == 0))
            why[0] = 0;
        else
            snprintf(why, sizeof why,
                     "node-llama-cpp is not installed (exit %d: %.900s); run "
                     "scripts/install-deps",
                     rc, err ? err : "");
    }
    free(out);
    free(err);
    return why[0] ? why : NULL;
}

size_t tu_full_pipe(int fds[2])
{
    cr_assert_eq(pipe(fds), 0);
    int fl = fcntl(fds[1], F_GETFL);
    fcntl(fds[1], F_SETFL, fl | O_NONBLOCK);
    char fill[4096];
    memset(fill, 'f', sizeof fill);
    size_t filled = 0;
    for (ssize_t k; (k = write(fds[1], fill, sizeof fill)) > 0;)
        filled += (size_t)k;
    for (ssize_t k; (k = write(fds[1], fill, 1)) > 0;)
        filled += (size_t)k;
    fcntl(fds[1], F_SETFL, fl);
    return filled;
}

char *tu_drain_pipe(int fd, size_t filled)
{
    size_t cap = filled + 65536, n = 0;
    char *all = malloc(cap + 1);
    cr_assert_not_null(all);
    for (ssize_t k; (k = read(fd, all + n, cap - n)) > 0 && n < cap;)
        n += (size_t)k;
    all[n] = 0;
    close(fd);
    cr_assert_geq(n, filled, "the filler was not read back whole");
    char *after = strdup(all + filled);
    free(all);
    return after;
}
