/* sweep.c - pn-compare --sweep (sweep.h): the mixes of one source made in a
 * work folder, the stock types by stock llama.cpp's quantizer in a child,
 * one comparison of all of them, and what is kept. */
#include "compare/sweep.h"
#include "common/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io/source_open.h"
#include "pipeline/quantize.h"

#define MEASUREMENT_NAME "measurement.pnm"

static const char *const k_stock_types[] = { "Q8_0",   "Q3_K_S", "Q3_K_M", "Q3_K_L",
                                             "Q4_K_S", "Q4_K_M", "Q5_K_M", "Q6_K" };

bool pn_sweep_stock_type_known(const char *name)
{
    for (size_t i = 0; i < sizeof k_stock_types / sizeof k_stock_types[0]; i++)
        if (strcmp(name, k_stock_types[i]) == 0)
            return true;
    return false;
}

void pn_sweep_opts_init(pn_sweep_opts *o)
{
    memset(o, 0, sizeof *o);
    pn_compare_opts_init(&o->compare);
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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool cancelled(const pn_sweep_opts *o)
{
    return o->compare.cancel && *o->compare.cancel;
}

/* ---- the work folder ---- */

typedef struct work {
    char *dir;      /* the private folder */
    bool made_keep; /* keep_dir was made by this run */
} work;

/* Removes the files this run put in the folder (it holds nothing else),
 * then the folder. */
static void work_remove(work *w)
{
    if (!w->dir)
        return;
    DIR *d = opendir(w->dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            unlinkat(dirfd(d), e->d_name, 0);
        }
        closedir(d);
    }
    rmdir(w->dir);
    free(w->dir);
    w->dir = NULL;
}

/* ---- a stock type: pn-llama-quantize in a child ---- */

static pn_status run_stock(const pn_sweep_opts *o, const char *lib, const char *src,
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
    posix_spawnattr_init(&at);
    sigset_t def, none;
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    sigaddset(&def, SIGINT);
    sigaddset(&def, SIGTERM);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setsigmask(&at, &none);
    /* its own process group: a ^C at the terminal reaches us, and we stop it */
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETPGROUP);
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
        if (cancelled(o) && !killed) {
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
    char tail[400] = "";
    off_t size = lseek(log_fd, 0, SEEK_END);
    if (size > 0) {
        size_t want = (size_t)size < sizeof tail - 1 ? (size_t)size : sizeof tail - 1;
        ssize_t n = pread(log_fd, tail, want, size - (off_t)want);
        size_t k = n > 0 ? (size_t)n : 0;
        while (k > 0 && (tail[k - 1] == '\n' || tail[k - 1] == ' '))
            k--;
        for (size_t i = 0; i < k; i++) {
            unsigned char ch = (unsigned char)tail[i];
            tail[i] = ch == '\n' ? '|' : (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
        }
        tail[k] = 0;
    }
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

/* ---- the report ---- */

void pn_sweep_report_free(pn_sweep_report *rep)
{
    for (size_t i = 0; i < rep->n_mixes; i++)
        free(rep->mixes[i].kept);
    free(rep->mixes);
    free(rep->kept_measurement);
    pn_compare_report_free(&rep->compare);
    memset(rep, 0, sizeof *rep);
}

/* Moves name from the work folder into keep_dir without replacing anything;
 * the kept path in *kept. */
static pn_status keep_file(const char *work_dir, const char *keep_dir, const char *name,
                           char **kept, pn_error *err)
{
    char *from = pn_path_join(work_dir, name), *to = pn_path_join(keep_dir, name);
    pn_status st = PN_OK;
    if (!from || !to)
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    else if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) != 0)
        st =
            pn_error_set(err, PN_ERR_IO, "%s: cannot keep it as %s: %s", from, to, strerror(errno));
    free(from);
    if (st == PN_OK)
        *kept = to;
    else
        free(to);
    return st;
}

/* With keep_dir, every mix made and the measurement are moved there. */
static pn_status keep_all(const pn_sweep_opts *o, const work *w, pn_sweep_report *rep,
                          pn_error *err)
{
    if (!o->keep_dir)
        return PN_OK;
    pn_status st = PN_OK;
    for (size_t i = 0; i < rep->n_mixes && st == PN_OK; i++)
        if (rep->mixes[i].status == PN_OK)
            st = keep_file(w->dir, o->keep_dir, rep->mixes[i].file, &rep->mixes[i].kept, err);
    char *meas = pn_path_join(w->dir, MEASUREMENT_NAME);
    if (st == PN_OK && meas && access(meas, F_OK) == 0)
        st = keep_file(w->dir, o->keep_dir, MEASUREMENT_NAME, &rep->kept_measurement, err);
    free(meas);
    return st;
}

/* The mixes asked for, named and checked before anything runs. */
static pn_status plan_mixes(const pn_sweep_opts *o, pn_sweep_report *rep, pn_error *err)
{
    size_t n = o->n_promote + (o->target_size ? 1 : 0) + o->n_stock;
    if (n == 0)
        return pn_error_set(err, PN_ERR_USAGE,
                            "--sweep: no mix to make (give --promote, "
                            "--target-size or --stock)");
    if (n > PN_SWEEP_MAX_MIXES)
        return pn_error_set(err, PN_ERR_USAGE, "--sweep: %zu mixes, at most %d", n,
                            PN_SWEEP_MAX_MIXES);
    rep->mixes = calloc(n, sizeof *rep->mixes);
    if (!rep->mixes)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    rep->n_mixes = n;
    size_t k = 0;
    for (size_t i = 0; i < o->n_promote; i++, k++) {
        pn_sweep_mix *m = &rep->mixes[k];
        if (o->promote[i] < 0)
            return pn_error_set(err, PN_ERR_USAGE, "--promote: %d is not a count", o->promote[i]);
        snprintf(m->name, sizeof m->name, "promote %d", o->promote[i]);
        snprintf(m->file, sizeof m->file, "promote-%d.gguf", o->promote[i]);
    }
    if (o->target_size) {
        pn_sweep_mix *m = &rep->mixes[k++];
        snprintf(m->name, sizeof m->name, "target %llu B", (unsigned long long)o->target_size);
        snprintf(m->file, sizeof m->file, "target-%llu.gguf", (unsigned long long)o->target_size);
    }
    for (size_t i = 0; i < o->n_stock; i++, k++) {
        pn_sweep_mix *m = &rep->mixes[k];
        m->kind = PN_SWEEP_STOCK;
        if (!pn_sweep_stock_type_known(o->stock[i]))
            return pn_error_set(err, PN_ERR_USAGE,
                                "--stock: not a type the stock quantizer takes: '%.40s' (Q3_K_S "
                                "Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_M Q6_K Q8_0)",
                                o->stock[i]);
        snprintf(m->name, sizeof m->name, "stock %s", o->stock[i]);
        snprintf(m->file, sizeof m->file, "stock-%s.gguf", o->stock[i]);
    }
    for (size_t i = 0; i < n; i++) {
        rep->mixes[i].file_index = -1;
        /* until its job says otherwise: what an interrupt leaves */
        rep->mixes[i].status = PN_ERR_INTERRUPTED;
        snprintf(rep->mixes[i].error, sizeof rep->mixes[i].error, "not made (interrupted)");
        for (size_t j = 0; j < i; j++)
            if (strcmp(rep->mixes[i].file, rep->mixes[j].file) == 0)
                return pn_error_set(err, PN_ERR_USAGE, "--sweep: %s is asked for twice",
                                    rep->mixes[i].name);
    }
    return PN_OK;
}

/* keep_dir: a folder (made when absent) where none of the names exists. */
static pn_status check_keep(const pn_sweep_opts *o, const pn_sweep_report *rep, work *w,
                            pn_error *err)
{
    if (!o->keep_dir)
        return PN_OK;
    struct stat sb;
    if (stat(o->keep_dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return pn_error_set(err, PN_ERR_USAGE, "--keep %s: not a folder", o->keep_dir);
    } else if (errno != ENOENT) {
        return pn_error_set(err, PN_ERR_IO, "--keep %s: %s", o->keep_dir, strerror(errno));
    }
    for (size_t i = 0; i <= rep->n_mixes; i++) {
        const char *name = i < rep->n_mixes ? rep->mixes[i].file : MEASUREMENT_NAME;
        char *p = pn_path_join(o->keep_dir, name);
        if (!p)
            return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        bool there = lstat(p, &sb) == 0;
        free(p);
        if (there)
            return pn_error_set(err, PN_ERR_EXISTS,
                                "--keep %s: %s is there already; the sweep "
                                "replaces nothing (another folder, or remove it)",
                                o->keep_dir, name);
    }
    if (stat(o->keep_dir, &sb) != 0) {
        if (mkdir(o->keep_dir, 0777) != 0)
            return pn_error_set(err, PN_ERR_IO, "--keep %s: cannot make it: %s", o->keep_dir,
                                strerror(errno));
        w->made_keep = true;
    }
    return PN_OK;
}

/* Where the sweep stands, for the progress callback: step `step` of mix k
 * of n (named name). */
typedef struct sweep_at {
    const pn_sweep_opts *o;
    const char *step, *name;
    size_t k, n;
} sweep_at;

/* The callback, `part` (0 to 1) of mix k made. */
static void progress_at(const sweep_at *a, double part)
{
    if (!a->o->compare.progress)
        return;
    pn_compare_progress p = { a->step,      a->name, "mix", a->k, a->n, (double)a->k + part,
                              (double)a->n, "mixes" };
    a->o->compare.progress(&p, a->o->compare.user);
}

/* pn-quantize's progress as the making's: the share of the weights
 * quantized (the other phases say nothing of how far it is). */
static void on_quantized(const pn_progress *p, void *user)
{
    if (p->phase == PN_PHASE_QUANTIZE && p->weights_total)
        progress_at(user, (double)p->weights_done / (double)p->weights_total);
}

static pn_status make_pn(const pn_sweep_opts *o, const work *w, pn_sweep_mix *m, int promote,
                         uint64_t target, const char *prev, const sweep_at *at, pn_error *err)
{
    char *dst = pn_path_join(w->dir, m->file), *meas = pn_path_join(w->dir, MEASUREMENT_NAME);
    if (!dst || !meas) {
        free(dst);
        free(meas);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    pn_quantize_opts q;
    pn_quantize_opts_init(&q);
    q.src_path = o->compare.source_path;
    q.dst_path = dst;
    q.recipe_path = o->recipe_path;
    q.promote = promote;
    q.target_size = target;
    q.measurement_path = meas;
    q.reuse_path = prev;
    q.threads = o->quantize_threads > 0 ? o->quantize_threads : 0;
    q.backend = PN_BACKEND_CPU;
    q.cancel = o->compare.cancel;
    q.imatrix_path = o->imatrix_path;
    if (o->compare.progress) {
        q.progress = on_quantized;
        q.user = (void *)at;
    }
    pn_quantize_stats stats;
    memset(&stats, 0, sizeof stats);
    pn_error qe;
    pn_error_clear(&qe);
    pn_status st = pn_quantize_file(&q, &stats, &qe);
    free(dst);
    free(meas);
    if (st == PN_ERR_INTERRUPTED || cancelled(o))
        return pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted while making %s", m->name);
    m->status = st;
    m->error[0] = 0;
    if (st == PN_OK && stats.mix_name[0])
        snprintf(m->name, sizeof m->name, "%s", stats.mix_name);
    else if (st != PN_OK)
        snprintf(m->error, sizeof m->error, "%s", qe.msg[0] ? qe.msg : pn_strerror(st));
    return PN_OK;
}

pn_status pn_sweep_run(const pn_sweep_opts *o, pn_sweep_report *rep, pn_error *err)
{
    memset(rep, 0, sizeof *rep);
    const double t0 = now_s();
    const char *src = o->compare.source_path;
    if (!src || !o->compare.tmp_dir || !o->compare.script)
        return pn_error_set(err, PN_ERR_USAGE,
                            "sweep: a source, a folder and the harness are "
                            "needed");
    pn_status st = plan_mixes(o, rep, err);
    if (st == PN_OK && o->n_stock && pn_source_is_hf(src))
        st = pn_error_set(err, PN_ERR_USAGE,
                          "%s: --stock needs a GGUF source (llama.cpp's "
                          "quantizer reads GGUF): convert it first with pn-convert",
                          src);
    if (st == PN_OK && o->n_stock && (!o->quantizer || access(o->quantizer, X_OK) != 0))
        st = pn_error_set(err, PN_ERR_IO,
                          "%s: the stock quantizer pn-llama-quantize is not "
                          "there: build it (cmake --build build --target pn-llama-quantize)",
                          o->quantizer ? o->quantizer : "(none)");
    char *lib = NULL;
    if (st == PN_OK && o->n_stock) {
        lib = o->libllama ? strdup(o->libllama) : pn_sweep_default_libllama(o->compare.script);
        if (!lib)
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        else if (access(lib, R_OK) != 0) {
            /* the harness's folder: the checkout's tools/llama or a prefix's */
            const char *script = o->compare.script, *slash = strrchr(script, '/');
            st = pn_error_set(err, PN_ERR_IO,
                              "%s: the libllama that judges is missing (%s): run 'cd %.*s && "
                              "NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --ignore-scripts "
                              "--omit=optional' (in a checkout, scripts/install-deps does the "
                              "same)",
                              lib, strerror(errno), slash ? (int)(slash - script) : 1,
                              slash ? script : ".");
        }
    }
    work w = { 0 };
    if (st == PN_OK)
        st = check_keep(o, rep, &w, err);
    if (st == PN_OK) {
        char *tmpl =
            pn_path_join(o->keep_dir ? o->keep_dir : o->compare.tmp_dir, ".pn-sweep.XXXXXX");
        if (tmpl && mkdtemp(tmpl)) {
            w.dir = tmpl;
        } else {
            st = pn_error_set(err, PN_ERR_IO, "%s: cannot make the work folder: %s",
                              o->keep_dir ? o->keep_dir : o->compare.tmp_dir, strerror(errno));
            free(tmpl);
        }
    }
    /* the PN mixes, each reusing the last one made */
    const char *prev = NULL;
    char *prev_path = NULL;
    size_t k = 0;
    for (; st == PN_OK && k < o->n_promote + (o->target_size ? 1 : 0); k++) {
        pn_sweep_mix *m = &rep->mixes[k];
        sweep_at at = { o, "making", m->name, k, rep->n_mixes };
        progress_at(&at, 0);
        double t = now_s();
        bool target = k >= o->n_promote;
        st = make_pn(o, &w, m, target ? -1 : o->promote[k], target ? o->target_size : 0, prev, &at,
                     err);
        m->make_seconds = now_s() - t;
        if (st == PN_OK && m->status == PN_OK) {
            free(prev_path);
            prev_path = pn_path_join(w.dir, m->file);
            prev = prev_path;
        }
    }
    free(prev_path);
    for (size_t i = 0; st == PN_OK && i < o->n_stock; i++, k++) {
        pn_sweep_mix *m = &rep->mixes[k];
        progress_at(&(sweep_at){ o, "quantizing with llama.cpp", m->name, k, rep->n_mixes }, 0);
        char *dst = pn_path_join(w.dir, m->file);
        if (!dst) {
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
            break;
        }
        double t = now_s();
        st = run_stock(o, lib, src, dst, o->stock[i], m, err);
        m->make_seconds = now_s() - t;
        free(dst);
    }
    free(lib);
    /* one comparison of every mix made */
    const char **paths = NULL;
    size_t n_made = 0;
    if (st == PN_OK) {
        paths = calloc(rep->n_mixes, sizeof *paths);
        if (!paths)
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; st == PN_OK && i < rep->n_mixes; i++) {
        pn_sweep_mix *m = &rep->mixes[i];
        if (m->status != PN_OK) {
            rep->n_failed++;
            continue;
        }
        paths[n_made] = pn_path_join(w.dir, m->file);
        if (!paths[n_made])
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        m->file_index = (long)n_made++;
    }
    if (st == PN_OK && n_made > 0) {
        pn_compare_opts c = o->compare;
        c.pn_paths = paths;
        c.n_pn = n_made;
        c.tmp_dir = w.dir;
        st = pn_compare_run(&c, &rep->compare, err);
        rep->compared = st == PN_OK;
    }
    if (paths)
        for (size_t i = 0; i < n_made; i++)
            free((void *)paths[i]);
    free(paths);
    /* what is kept (an interrupt keeps the mixes finished before it) */
    if (w.dir && (st == PN_OK || st == PN_ERR_INTERRUPTED) && o->keep_dir) {
        pn_error ke;
        pn_error_clear(&ke);
        pn_status kst = keep_all(o, &w, rep, &ke);
        if (kst != PN_OK && st == PN_OK) {
            st = kst;
            *err = ke;
        }
    }
    if (st == PN_OK && rep->compared) {
        for (size_t i = 0; i < rep->n_mixes; i++) {
            pn_sweep_mix *m = &rep->mixes[i];
            if (m->file_index < 0)
                continue;
            pn_compare_file *f = &rep->compare.files[m->file_index];
            free(f->path);
            f->path = strdup(m->kept ? m->kept : m->file);
            if (!f->path)
                st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        }
    }
    work_remove(&w);
    if (st != PN_OK) {
        /* nothing but what --keep asked for */
        if (w.made_keep)
            rmdir(o->keep_dir); /* fails, as it should, when an interrupt kept mixes in it */
        pn_sweep_report_free(rep);
        return st;
    }
    rep->seconds = now_s() - t0;
    return PN_OK;
}
