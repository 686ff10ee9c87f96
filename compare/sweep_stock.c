/* sweep_stock.c - pn-compare --sweep's stock types: their names as
 * llama-quantize spells them and their ftypes, and each made by stock
 * llama.cpp's quantizer (pn-llama-quantize) in a child (see sweep_stock.h). */
#include "compare/sweep_stock.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/spawn.h"

static const char *const k_stock_types[] = { "Q8_0",   "Q3_K_S", "Q3_K_M", "Q3_K_L",
                                             "Q4_K_S", "Q4_K_M", "Q5_K_M", "Q6_K" };

/* llama.cpp's ftype (general.file_type) of each, in k_stock_types' order. */
static const unsigned k_stock_ftypes[] = { 7, 11, 12, 13, 14, 15, 17, 18 };

const char *pn_sweep_stock_canonical(const char *name, unsigned *ftype)
{
    for (size_t i = 0; i < sizeof k_stock_types / sizeof k_stock_types[0]; i++)
        if (strcasecmp(name, k_stock_types[i]) == 0) {
            if (ftype)
                *ftype = k_stock_ftypes[i];
            return k_stock_types[i];
        }
    return NULL;
}

bool pn_sweep_stock_type_known(const char *name)
{
    return pn_sweep_stock_canonical(name, NULL) != NULL;
}

char *pn_sweep_default_libllama(const char *script)
{
    const char *slash = strrchr(script, '/');
    size_t dir = slash ? (size_t)(slash - script) : 1;
    const char *base = slash ? script : ".";
    const char *rel = "/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libllama.v0.5.0.so";
    char *s = malloc(dir + strlen(rel) + 1);
    if (s) {
        memcpy(s, base, dir);
        strcpy(s + dir, rel);
    }
    return s;
}

pn_status pn_sweep_run_stock(const pn_sweep_opts *o, const char *lib, const char *src,
                             const char *dst, const char *type, pn_sweep_mix *m, pn_error *err)
{
    int log_fd = memfd_create("pn-sweep-quantize-log", MFD_CLOEXEC);
    if (log_fd < 0)
        return pn_error_set(err, PN_ERR_IO, "cannot make a log for the stock quantizer: %s",
                            strerror(errno));
    char threads[16];
    snprintf(threads, sizeof threads, "%d", o->quantize_threads > 0 ? o->quantize_threads : 0);
    /* the same importance matrix as the PN mixes', as llama-quantize --imatrix takes it */
    char *const argv_plain[] = { (char *)o->quantizer, "--lib",      (char *)lib,
                                 "--threads",          threads,      (char *)src,
                                 (char *)dst,          (char *)type, NULL };
    char *const argv_imatrix[] = {
        (char *)o->quantizer,    "--lib",     (char *)lib, "--threads",  threads, "--imatrix",
        (char *)o->imatrix_path, (char *)src, (char *)dst, (char *)type, NULL
    };
    char *const *argv = o->imatrix_path ? argv_imatrix : argv_plain;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, log_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
    posix_spawnattr_t at;
    pn_spawnattr_init_child(&at, POSIX_SPAWN_SETPGROUP);
    /* its own process group: a ^C at the terminal reaches us, and we stop it */
    posix_spawnattr_setpgroup(&at, 0);
    static char *const no_env[] = { NULL };
    pid_t pid;
    int rc =
        posix_spawn(&pid, o->quantizer, &fa, &at, argv, o->compare.envp ? o->compare.envp : no_env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc != 0) {
        close(log_fd);
        snprintf(m->error, sizeof m->error, "cannot run the stock quantizer %s: %s", o->quantizer,
                 strerror(rc));
        m->status = PN_ERR_IO;
        return PN_OK;
    }
    int status = 0;
    bool killed = false;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR)
            break;
        if ((o->compare.cancel && *o->compare.cancel) && !killed) {
            kill(pid, SIGKILL);
            killed = true;
        }
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    if (killed) {
        close(log_fd);
        unlink(dst);
        return pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted while llama.cpp quantized %s",
                            type);
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        close(log_fd);
        m->status = PN_OK;
        m->error[0] = 0;
        struct stat sb;
        if (stat(dst, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            snprintf(m->error, sizeof m->error, "the stock quantizer exited 0 but wrote no %s",
                     dst);
            m->status = PN_ERR_IO;
        }
        return PN_OK;
    }
    /* the end of its messages, on one line */
    char tail[400];
    pn_child_log_tail(log_fd, tail, sizeof tail);
    close(log_fd);
    unlink(dst);
    if (WIFEXITED(status))
        snprintf(m->error, sizeof m->error, "stock quantizer failed (exit %d): %s",
                 WEXITSTATUS(status), tail[0] ? tail : "(no message)");
    else
        snprintf(m->error, sizeof m->error, "stock quantizer killed by signal %d: %s",
                 WTERMSIG(status), tail[0] ? tail : "(no message)");
    m->status = PN_ERR_IO;
    return PN_OK;
}
