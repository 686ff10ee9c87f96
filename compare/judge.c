/* judge.c - stock llama.cpp as the judge (judge.h): the child protocol with
 * the harness tools/llama/pn-llama-logits.mjs, the source's run kept in a
 * logits file, and each model's run compared with it position by position. */
#include "compare/judge.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/spawn.h"
#include "common/byte_order.h"
#include "common/file.h"
#include "common/mem.h"
#include "convert/convert.h"
#include "hf/hf.h"
#include "io/source_open.h"

/* Bounds on what the harness may announce (it is ours, but its output is
 * still input): keeps every allocation linear in what was asked for. */
#define MAX_POSITIONS (1u << 22)

static bool cancelled(const pn_compare_opts *o)
{
    return o->cancel && *o->cancel;
}

/* fd moved to >= 10 with close-on-exec, so that dup2 onto 0..3 in the child
 * never meets the same number (dup2(3, 3) would keep close-on-exec). */
static int high_fd(int fd)
{
    if (fd < 0 || fd >= 10)
        return fd;
    int h = fcntl(fd, F_DUPFD_CLOEXEC, 10);
    close(fd);
    return h;
}

/* ---- the llama.cpp child ---- */

typedef struct child {
    pid_t pid;
    int in_fd;  /* our end of its stdin (a socket), -1 once closed */
    int out_fd; /* read end of its fd 3 */
    int log_fd; /* memory file holding its stdout and stderr */
} child;

static void child_init(child *c)
{
    c->pid = -1, c->in_fd = c->out_fd = c->log_fd = -1;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

static void child_kill(child *c)
{
    close_fd(&c->in_fd);
    close_fd(&c->out_fd);
    if (c->pid > 0) {
        kill(c->pid, SIGKILL);
        while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR) {
        }
        c->pid = -1;
    }
    close_fd(&c->log_fd);
}

static pn_status child_start(const pn_compare_opts *o, char *const argv[], child *c, pn_error *err)
{
    child_init(c);
    int sv[2] = { -1, -1 }, pp[2] = { -1, -1 };
    c->log_fd = high_fd(memfd_create("pn-compare-llama-log", MFD_CLOEXEC));
    if (c->log_fd < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 ||
        pipe2(pp, O_CLOEXEC) != 0) {
        int e = errno;
        close_fd(&sv[0]);
        close_fd(&sv[1]);
        close_fd(&c->log_fd);
        return pn_error_set(err, PN_ERR_IO, "cannot make the pipes to llama.cpp: %s", strerror(e));
    }
    sv[0] = high_fd(sv[0]);
    sv[1] = high_fd(sv[1]);
    pp[0] = high_fd(pp[0]);
    pp[1] = high_fd(pp[1]);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
    posix_spawn_file_actions_adddup2(&fa, c->log_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, c->log_fd, 2);
    posix_spawn_file_actions_adddup2(&fa, pp[1], 3);
    posix_spawnattr_t at;
    pn_spawnattr_init_child(&at, 0);
    static char *const no_env[] = { NULL };
    pid_t pid;
    int rc = posix_spawnp(&pid, o->node, &fa, &at, argv, o->envp ? o->envp : no_env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(sv[1]);
    close(pp[1]);
    if (rc != 0) {
        close(sv[0]);
        close(pp[0]);
        close_fd(&c->log_fd);
        return pn_error_set(err, PN_ERR_IO,
                            "cannot run '%s'%s: %s; pn-compare runs stock llama.cpp through "
                            "Node.js (node-llama-cpp): install Node.js 20, or name it with --node",
                            o->node, strchr(o->node, '/') ? "" : " (looked up in PATH)",
                            strerror(rc));
    }
    c->pid = pid;
    c->in_fd = sv[0];
    c->out_fd = pp[0];
    return PN_OK;
}

/* Waits for the child; an exit other than 0 is an error quoting its last
 * messages. */
static pn_status child_finish(child *c, const char *what, pn_error *err)
{
    close_fd(&c->in_fd);
    close_fd(&c->out_fd);
    int status = 0;
    pid_t r;
    while ((r = waitpid(c->pid, &status, 0)) < 0 && errno == EINTR) {
    }
    c->pid = -1;
    char tail[480];
    pn_child_log_tail(c->log_fd, tail, sizeof tail);
    close_fd(&c->log_fd);
    if (r < 0)
        return pn_error_set(err, PN_ERR_IO, "llama.cpp on %s: cannot wait for it: %s", what,
                            strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return PN_OK;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
        return pn_error_set(err, PN_ERR_IO, "llama.cpp (node-llama-cpp) is not available: %s",
                            tail[0] ? tail : "(no message)");
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        return pn_error_set(err, PN_ERR_IO,
                            "llama.cpp on %s: the node program could not start "
                            "the harness (exit 127): %s",
                            what, tail);
    if (WIFEXITED(status))
        return pn_error_set(err, PN_ERR_IO, "llama.cpp on %s failed (exit %d): %s", what,
                            WEXITSTATUS(status), tail[0] ? tail : "(no message)");
    return pn_error_set(err, PN_ERR_IO, "llama.cpp on %s was killed by signal %d (%s): %s", what,
                        WTERMSIG(status), strsignal(WTERMSIG(status)),
                        tail[0] ? tail : "(no message)");
}

static pn_status send_all(child *c, const void *data, size_t n)
{
    const uint8_t *p = data;
    while (n > 0 && c->in_fd >= 0) {
        ssize_t w = send(c->in_fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return PN_ERR_IO; /* the child is gone; its exit says why */
        p += w;
        n -= (size_t)w;
    }
    return PN_OK;
}

/* Reads exactly n bytes; false on end of stream, error or cancel. */
static bool read_all(const pn_compare_opts *o, int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n > 0) {
        if (cancelled(o))
            return false;
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

/* The token sequences: lengths and ids, as sent or as llama.cpp reports them. */
typedef struct seqs {
    size_t n;
    uint32_t *len; /* n */
    uint32_t *ids; /* sum of len */
    size_t total;
} seqs;

static void seqs_free(seqs *s)
{
    free(s->len);
    free(s->ids);
    memset(s, 0, sizeof *s);
}

/* Reads the harness's header; false (with *why) when it is cut short or out
 * of bounds. */
static bool read_header(const pn_compare_opts *o, int fd, uint32_t *n_vocab, seqs *s,
                        const char **why)
{
    uint8_t h[16];
    memset(s, 0, sizeof *s);
    *why = "its output ended before the header";
    if (!read_all(o, fd, h, sizeof h))
        return false;
    *why = "its output does not start with PNLOGIT1";
    if (memcmp(h, "PNLOGIT1", 8) != 0)
        return false;
    *n_vocab = pn_load_u32le(h + 8);
    s->n = pn_load_u32le(h + 12);
    *why = "its header announces an empty or oversized vocabulary or sequence list";
    if (*n_vocab == 0 || *n_vocab > PN_JUDGE_MAX_VOCAB || s->n == 0 || s->n > MAX_POSITIONS)
        return false;
    s->len = calloc(s->n, sizeof *s->len);
    size_t cap = 0;
    for (size_t k = 0; k < s->n; k++) {
        uint8_t b[4];
        *why = "its output ended inside the header";
        if (!s->len || !read_all(o, fd, b, 4))
            return false;
        s->len[k] = pn_load_u32le(b);
        *why = "its header announces an empty or oversized sequence";
        if (s->len[k] == 0 || s->len[k] > MAX_POSITIONS - s->total)
            return false;
        if (s->total + s->len[k] > cap) {
            cap = (s->total + s->len[k]) * 2;
            uint32_t *ids = realloc(s->ids, cap * sizeof *ids);
            *why = "out of memory for the token ids";
            if (!ids)
                return false;
            s->ids = ids;
        }
        *why = "its output ended inside the header";
        if (!read_all(o, fd, s->ids + s->total, (size_t)s->len[k] * 4))
            return false;
        for (uint32_t i = 0; i < s->len[k]; i++)
            s->ids[s->total + i] = pn_load_u32le((const uint8_t *)&s->ids[s->total + i]);
        s->total += s->len[k];
    }
    return true;
}

static pn_status send_seqs(child *c, const seqs *s)
{
    size_t bytes = 4 + 4 * s->n + 4 * s->total;
    uint8_t *b = malloc(bytes);
    if (!b)
        return PN_ERR_NOMEM;
    uint8_t *p = b;
#define PUT(v)                                                                                     \
    do {                                                                                           \
        uint32_t v_ = (v);                                                                         \
        p[0] = (uint8_t)v_;                                                                        \
        p[1] = (uint8_t)(v_ >> 8);                                                                 \
        p[2] = (uint8_t)(v_ >> 16);                                                                \
        p[3] = (uint8_t)(v_ >> 24);                                                                \
        p += 4;                                                                                    \
    } while (0)
    PUT((uint32_t)s->n);
    size_t at = 0;
    for (size_t k = 0; k < s->n; k++) {
        PUT(s->len[k]);
        for (uint32_t i = 0; i < s->len[k]; i++)
            PUT(s->ids[at + i]);
        at += s->len[k];
    }
#undef PUT
    pn_status st = send_all(c, b, bytes);
    free(b);
    close_fd(&c->in_fd);
    return st;
}

/* ---- the judge ---- */

struct pn_judge {
    const pn_compare_opts *o;
    char *dir;      /* the private folder */
    char *src_gguf; /* dir/source.gguf: a Hugging Face source converted; else NULL */
    int logits_fd;  /* the source's rows, unlinked */
    uint32_t n_vocab;
    seqs tokens; /* the source run's */
    float *row_p, *row_q;
    double *kl;
    /* progress: the step now, its model, positions evaluated so far */
    const char *step, *path;
    size_t model, n_models;
    size_t positions_done;
};

/* The progress callback with where the judging stands. */
static void report(pn_judge *J)
{
    const pn_compare_opts *o = J->o;
    if (!o->progress)
        return;
    pn_compare_progress p = { J->step,
                              J->path,
                              "model",
                              J->model,
                              J->n_models,
                              (double)J->positions_done,
                              (double)J->tokens.total * (double)J->n_models,
                              "positions" };
    o->progress(&p, o->user);
}

void pn_judge_step(pn_judge *J, const char *what, size_t model, const char *path)
{
    J->step = what;
    J->model = model;
    J->path = path;
    report(J);
}

void pn_judge_on_progress(void *ctx, uint64_t done, uint64_t total)
{
    (void)done;
    (void)total;
    report(ctx);
}

const char *pn_judge_dir(const pn_judge *J)
{
    return J->dir;
}

size_t pn_judge_n_seqs(const pn_judge *J)
{
    return J->tokens.n;
}

size_t pn_judge_n_positions(const pn_judge *J)
{
    return J->tokens.total;
}

static pn_status make_logits_file(pn_judge *J, pn_error *err)
{
    int fd = open(J->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        char *p = pn_path_join(J->dir, "logits.XXXXXX");
        if (!p)
            return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        fd = mkostemp(p, O_CLOEXEC);
        if (fd >= 0)
            unlink(p);
        free(p);
    }
    if (fd < 0)
        return pn_error_set(err, PN_ERR_IO, "%s: cannot make a temporary file: %s", J->dir,
                            strerror(errno));
    J->logits_fd = high_fd(fd);
    return PN_OK;
}

/* The harness's --print-version line, {"llama_cpp":"...","node_llama_cpp":"..."},
 * from the start of the source run's log: printable ASCII, at most 63 bytes. */
static void parse_version(int log_fd, char *llama_cpp, char *node_llama_cpp)
{
    char buf[4096];
    ssize_t n = log_fd >= 0 ? pread(log_fd, buf, sizeof buf - 1, 0) : -1;
    buf[n > 0 ? n : 0] = 0;
    const char *keys[2] = { "\"llama_cpp\":\"", "\"node_llama_cpp\":\"" };
    char *dst[2] = { llama_cpp, node_llama_cpp };
    for (int k = 0; k < 2; k++) {
        const char *p = strstr(buf, keys[k]);
        size_t len = 0;
        if (p) {
            p += strlen(keys[k]);
            while (p[len] && p[len] != '"' && len < 63)
                len++;
        }
        if (!p) {
            p = "unknown";
            len = strlen(p);
        }
        for (size_t i = 0; i < len; i++)
            dst[k][i] = p[i] >= 0x20 && p[i] < 0x7f ? p[i] : '?';
        dst[k][len] = 0;
    }
}
static pn_status run_source(pn_judge *J, char *llama_cpp, char *node_llama_cpp, pn_error *err)
{
    const pn_compare_opts *o = J->o;
    char threads[16], seq_len[16], max_seqs[16];
    snprintf(threads, sizeof threads, "%d", o->threads);
    snprintf(seq_len, sizeof seq_len, "%d", o->seq_len);
    snprintf(max_seqs, sizeof max_seqs, "%d", o->max_seqs);
    char *argv[13] = {
        (char *)o->node, (char *)o->script, J->src_gguf ? J->src_gguf : (char *)o->source_path,
        "--threads",     threads,           "--print-version"
    };
    if (o->text_path) {
        argv[6] = "--text";
        argv[7] = (char *)o->text_path;
        argv[8] = "--seq-len";
        argv[9] = seq_len;
        argv[10] = "--max-seqs";
        argv[11] = max_seqs;
    }
    seqs fixed = { 0 };
    if (!o->text_path) {
        fixed.n = PN_COMPARE_FIXED_SEQS;
        fixed.total = (size_t)PN_COMPARE_FIXED_SEQS * PN_COMPARE_FIXED_LEN;
        fixed.len = malloc(fixed.n * sizeof *fixed.len);
        fixed.ids = malloc(fixed.total * sizeof *fixed.ids);
        if (!fixed.len || !fixed.ids) {
            seqs_free(&fixed);
            return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        }
        for (int s = 0; s < PN_COMPARE_FIXED_SEQS; s++) {
            fixed.len[s] = PN_COMPARE_FIXED_LEN;
            for (int i = 0; i < PN_COMPARE_FIXED_LEN; i++)
                fixed.ids[s * PN_COMPARE_FIXED_LEN + i] = pn_compare_fixed_token(J->n_vocab, s, i);
        }
    }
    child c;
    pn_status st = child_start(o, argv, &c, err);
    if (st != PN_OK) {
        seqs_free(&fixed);
        return st;
    }
    if (o->text_path)
        close_fd(&c.in_fd);
    else
        send_seqs(&c, &fixed);
    uint32_t v = 0;
    const char *why = NULL;
    bool ok = read_header(o, c.out_fd, &v, &J->tokens, &why);
    if (ok && v != J->n_vocab) {
        ok = false;
        why = "its vocabulary is not the one the file declares";
    }
    if (ok && !o->text_path) {
        ok = J->tokens.n == fixed.n && J->tokens.total == fixed.total &&
             memcmp(J->tokens.ids, fixed.ids, fixed.total * 4) == 0;
        why = "it evaluated other tokens than it was given";
    }
    seqs_free(&fixed);
    size_t row_bytes = (size_t)J->n_vocab * 4;
    if (ok) {
        J->row_p = malloc(row_bytes);
        J->row_q = malloc(row_bytes);
        J->kl = malloc(J->tokens.total * sizeof *J->kl);
        ok = J->row_p && J->row_q && J->kl;
        why = "out of memory";
    }
    size_t seq = 0, in_seq = 0;
    for (size_t pos = 0; ok && pos < J->tokens.total; pos++) {
        ok = read_all(o, c.out_fd, J->row_p, row_bytes);
        why = "its output ended before the last position";
        if (ok && pwrite(J->logits_fd, J->row_p, row_bytes, (off_t)(pos * row_bytes)) !=
                      (ssize_t)row_bytes) {
            int e = errno;
            child_kill(&c);
            return pn_error_set(err, e == ENOSPC ? PN_ERR_NOSPACE : PN_ERR_IO,
                                "%s: cannot keep the source's logits (%zu bytes): %s", J->dir,
                                J->tokens.total * row_bytes, strerror(e));
        }
        /* reported as each sequence ends: llama.cpp answers a sequence at once */
        J->positions_done += ok;
        if (ok && ++in_seq == J->tokens.len[seq]) {
            seq++;
            in_seq = 0;
            report(J);
        }
    }
    if (cancelled(o)) {
        child_kill(&c);
        return pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
    }
    if (!ok) {
        /* the child's own message says more than ours: wait for it first */
        close_fd(&c.out_fd);
        st = child_finish(&c, o->source_path, err);
        if (st == PN_OK)
            st = pn_error_set(err, PN_ERR_IO, "llama.cpp on %s: %s", o->source_path, why);
        return st;
    }
    parse_version(c.log_fd, llama_cpp, node_llama_cpp);
    return child_finish(&c, o->source_path, err);
}

/* A PN file is decoded first; a stock quantization (stock) is given to
 * llama.cpp as it is. */

/* The figures of one model from its per-position KL (kl is sorted here). */
static void figures(double *kl, size_t n, size_t agree, pn_judge_figures *f)
{
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += kl[i];
    f->kl_mean = sum / (double)n;
    double ss = 0.0;
    for (size_t i = 0; i < n; i++)
        ss += (kl[i] - f->kl_mean) * (kl[i] - f->kl_mean);
    f->kl_se = n > 1 ? sqrt(ss / (double)(n - 1) / (double)n) : 0.0;
    f->top1 = (double)agree / (double)n;
    f->kl_p99 = pn_compare_quantile(kl, n, 0.99);
}

pn_status pn_judge_eval(pn_judge *J, size_t model, const char *path, const char *shown,
                        bool decoded, bool unlink_after, pn_judge_figures *f, double *kl_out,
                        pn_error *err)
{
    const pn_compare_opts *o = J->o;
    pn_judge_step(J, "llama.cpp", model, shown);
    char threads[16];
    snprintf(threads, sizeof threads, "%d", o->threads);
    char *argv[] = { (char *)o->node, (char *)o->script, (char *)path, "--threads", threads, NULL };
    child c;
    pn_status st = child_start(o, argv, &c, err);
    if (st != PN_OK)
        return st;
    send_seqs(&c, &J->tokens);
    uint32_t v = 0;
    seqs got;
    const char *why = NULL;
    bool ok = read_header(o, c.out_fd, &v, &got, &why);
    /* llama.cpp has the file mapped once it answers: unlink it now, so that
     * nothing is left even if this process is killed */
    if (unlink_after)
        unlink(path);
    if (ok && v != J->n_vocab) {
        ok = false;
        why = "its vocabulary differs from the source's";
    }
    if (ok) {
        ok = got.n == J->tokens.n && got.total == J->tokens.total &&
             memcmp(got.len, J->tokens.len, got.n * 4) == 0 &&
             memcmp(got.ids, J->tokens.ids, got.total * 4) == 0;
        why = "it evaluated other tokens than the source's";
    }
    seqs_free(&got);
    size_t row_bytes = (size_t)J->n_vocab * 4, agree = 0, seq = 0, in_seq = 0;
    f->kl_max = -1.0;
    for (size_t pos = 0; ok && pos < J->tokens.total; pos++) {
        ok = read_all(o, c.out_fd, J->row_q, row_bytes);
        why = "its output ended before the last position";
        if (!ok)
            break;
        if (pread(J->logits_fd, J->row_p, row_bytes, (off_t)(pos * row_bytes)) !=
            (ssize_t)row_bytes) {
            int e = errno;
            child_kill(&c);
            return pn_error_set(err, PN_ERR_IO, "%s: cannot read back the source's logits: %s",
                                J->dir, strerror(e));
        }
        double kl;
        uint32_t ap, aq;
        size_t bad = 0;
        if (pn_compare_kl(J->row_p, J->row_q, J->n_vocab, &kl, &ap, &aq, &bad) != PN_OK) {
            bool src = !isfinite(J->row_p[bad]);
            child_kill(&c);
            return pn_error_set(err, PN_ERR_NONFINITE,
                                "%s: sequence %zu position %zu: a non-finite logit (token %zu) "
                                "from llama.cpp on %s",
                                src ? o->source_path : shown, seq, in_seq, bad,
                                src       ? "the source"
                                : decoded ? "the decoded model"
                                          : "the model");
        }
        J->kl[pos] = kl;
        J->positions_done++;
        agree += ap == aq;
        if (kl > f->kl_max) {
            f->kl_max = kl;
            f->kl_max_seq = seq;
            f->kl_max_pos = in_seq;
        }
        if (++in_seq == J->tokens.len[seq]) {
            seq++;
            in_seq = 0;
            report(J); /* as each sequence ends: llama.cpp answers a sequence at once */
        }
    }
    if (cancelled(o)) {
        child_kill(&c);
        return pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
    }
    if (!ok) {
        close_fd(&c.out_fd);
        st = child_finish(&c, shown, err);
        if (st == PN_OK)
            st = pn_error_set(err, PN_ERR_IO, "llama.cpp on %s%s: %s",
                              decoded ? "the decoding of " : "", shown, why);
        return st;
    }
    st = child_finish(&c, shown, err);
    if (st != PN_OK)
        return st;
    if (kl_out)
        memcpy(kl_out, J->kl, J->tokens.total * sizeof *kl_out);
    figures(J->kl, J->tokens.total, agree, f);
    return PN_OK;
}

/* A Hugging Face source written as the converter's bf16 GGUF at path. */
static pn_status convert_source(const char *src, const char *path, pn_error *err)
{
    pn_hf_opts ho = { 0 };
    ho.outtype = PN_HF_OUT_BF16;
    pn_hf_model *m = NULL;
    pn_status st = pn_hf_open(src, &ho, &m, err);
    if (st == PN_OK) {
        pn_convert_opts co = { 0 };
        st = pn_convert(m, src, path, &co, NULL, err);
    }
    pn_hf_close(m);
    return st;
}

pn_status pn_judge_open(const pn_compare_opts *o, uint32_t n_vocab, size_t n_models, pn_judge **out,
                        char *llama_cpp, char *node_llama_cpp, pn_error *err)
{
    *out = NULL;
    pn_judge *J = calloc(1, sizeof *J);
    if (!J)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    J->o = o;
    J->logits_fd = -1;
    J->n_vocab = n_vocab;
    J->n_models = n_models;
    pn_status st = PN_OK;
    char *tmpl = pn_path_join(o->tmp_dir, "pn-compare.XXXXXX");
    if (tmpl && mkdtemp(tmpl)) {
        J->dir = tmpl;
        st = make_logits_file(J, err);
        if (st == PN_OK && pn_source_is_hf(o->source_path)) {
            /* stock llama.cpp reads a GGUF: the folder converted first */
            J->src_gguf = pn_path_join(J->dir, "source.gguf");
            pn_judge_step(J, "converting", 0, o->source_path);
            st = J->src_gguf ? convert_source(o->source_path, J->src_gguf, err)
                             : pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        }
    } else {
        st = tmpl ? pn_error_set(err, PN_ERR_IO, "%s: cannot make a temporary folder: %s",
                                 o->tmp_dir, strerror(errno))
                  : pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        free(tmpl);
    }
    if (st == PN_OK) {
        pn_judge_step(J, "llama.cpp", 0, o->source_path);
        st = run_source(J, llama_cpp, node_llama_cpp, err);
    }
    if (st == PN_OK)
        *out = J;
    else
        pn_judge_close(J);
    return st;
}

void pn_judge_close(pn_judge *J)
{
    if (!J)
        return;
    close_fd(&J->logits_fd);
    if (J->dir) /* the private folder and whatever is left in it */
        pn_remove_folder(J->dir);
    PN_FREE_ALL(J->dir, J->src_gguf, J->row_p, J->row_q, J->kl);
    seqs_free(&J->tokens);
    free(J);
}

pn_status pn_judge_versions(const pn_compare_opts *o, char *llama_cpp, char *node_llama_cpp,
                            pn_error *err)
{
    char *argv[] = { (char *)o->node, (char *)o->script, "--version", NULL };
    child c;
    pn_status st = child_start(o, argv, &c, err);
    if (st != PN_OK)
        return st;
    close_fd(&c.in_fd);
    int log_fd = dup(c.log_fd); /* child_finish closes its own */
    st = child_finish(&c, "--version", err);
    if (st == PN_OK)
        parse_version(log_fd, llama_cpp, node_llama_cpp);
    if (log_fd >= 0)
        close(log_fd);
    return st;
}

uint32_t pn_judge_vocab_of(const gguf_reader *r)
{
    const gguf_kv *tok = gguf_reader_find_kv(r, "tokenizer.ggml.tokens");
    long emb = gguf_reader_find_tensor(r, "token_embd.weight");
    uint64_t v = tok && tok->type == GGUF_TYPE_ARRAY ? tok->arr_count
                 : emb >= 0 ? (uint64_t)gguf_reader_tensor(r, (size_t)emb)->ne[1]
                            : 0;
    return v <= PN_JUDGE_MAX_VOCAB ? (uint32_t)v : 0;
}
