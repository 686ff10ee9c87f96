/* compare.c - pn-compare: the KL and top-1 math, the child protocol with the
 * llama.cpp harness (tools/llama), and the run that decodes each mix and
 * compares its logits with the source's (see compare.h). */
#include "common/file.h"
#include "hf/hf.h"
#include "convert/convert.h"
#include "io/source_open.h"
#include "compare/compare.h"

#include <dirent.h>
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
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "gguf/gguf.h"
#include "gguf/pn_keys.h"
#include "dequant/dequant.h"
#include "quant/types.h"

/* Bounds on what the harness may announce (it is ours, but its output is
 * still input): keeps every allocation linear in what was asked for. */
#define MAX_VOCAB (1u << 26)
#define MAX_POSITIONS (1u << 22)
#define TEXT_MAX_BYTES ((off_t)64 << 20)

/* ---- the math ---- */

uint32_t pn_compare_fixed_token(uint32_t n_vocab, int s, int i)
{
    uint64_t z = 0x504E2D434F4D5041ull +
                 (uint64_t)(s * PN_COMPARE_FIXED_LEN + i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return n_vocab ? (uint32_t)(z % n_vocab) : 0;
}

/* log(sum exp(x - max)) and the first maximum, in double */
static void log_sum_exp(const float *x, size_t n, double *max, double *lse, uint32_t *arg)
{
    double m = x[0];
    uint32_t a = 0;
    for (size_t i = 1; i < n; i++)
        if ((double)x[i] > m) {
            m = x[i];
            a = (uint32_t)i;
        }
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += exp((double)x[i] - m);
    *max = m;
    *lse = log(s);
    *arg = a;
}

pn_status pn_compare_kl(const float *p, const float *q, size_t n, double *kl, uint32_t *argmax_p,
                        uint32_t *argmax_q, size_t *bad)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(p[i]) || !isfinite(q[i])) {
            if (bad)
                *bad = i;
            return PN_ERR_NONFINITE;
        }
    if (n == 0) {
        *kl = 0.0;
        return PN_OK;
    }
    double pm, pl, qm, ql;
    uint32_t pa, qa;
    log_sum_exp(p, n, &pm, &pl, &pa);
    log_sum_exp(q, n, &qm, &ql, &qa);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        double lp = (double)p[i] - pm - pl;
        double lq = (double)q[i] - qm - ql;
        sum += exp(lp) * (lp - lq);
    }
    *kl = sum > 0.0 ? sum : 0.0;
    if (argmax_p)
        *argmax_p = pa;
    if (argmax_q)
        *argmax_q = qa;
    return PN_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double pn_compare_quantile(double *v, size_t n, double q)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof *v, cmp_double);
    double r = ceil(q * (double)n);
    size_t k = r < 1.0 ? 1 : r > (double)n ? n : (size_t)r;
    return v[k - 1];
}

void pn_compare_opts_init(pn_compare_opts *o)
{
    memset(o, 0, sizeof *o);
    o->node = "node";
    o->tmp_dir = "/tmp";
    o->seq_len = 512;
    o->max_seqs = 16;
    o->threads = 1;
    o->decode_type = PN_TYPE_F32;
}

/* ---- small helpers ---- */

static bool cancelled(const pn_compare_opts *o)
{
    return o->cancel && *o->cancel;
}

/* A copy holding printable ASCII only (others as '?'), for names from files. */
static char *safe_dup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d)
        return NULL;
    for (size_t i = 0; i < n; i++)
        d[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    d[n] = 0;
    return d;
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

/* ---- what a file is ---- */

typedef struct file_info {
    uint64_t file_bytes, weights, tensor_bytes, pn_weights, pn_bytes;
    char *mix;
    bool stock; /* a stock quantization: llama.cpp loads it as it is */
    dev_t dev;
    ino_t ino;
} file_info;

static void account(const gguf_reader *r, file_info *fi)
{
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        uint64_t w = (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        fi->weights += w;
        fi->tensor_bytes += t->size;
        if (t->type == PN_TYPE_PN3T || t->type == PN_TYPE_PN4T) {
            fi->pn_weights += w;
            fi->pn_bytes += t->size;
        }
    }
    /* a split set's bytes are all its files' (gguf_reader_file_size is the first's) */
    fi->file_bytes = 0;
    for (size_t s = 0; s < gguf_reader_n_splits(r); s++)
        fi->file_bytes += gguf_reader_file_size(gguf_reader_split(r, s));
}

static pn_status stat_regular(const char *path, const char *what, file_info *fi, pn_error *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return pn_error_set(err, PN_ERR_IO, "%s: cannot open the %s: %s", path, what,
                            strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return pn_error_set(err, PN_ERR_IO, "%s: the %s is not a regular file", path, what);
    fi->dev = sb.st_dev;
    fi->ino = sb.st_ino;
    return PN_OK;
}

/* The source: float tensors only; its vocabulary size. */
static pn_status open_source(const char *path, gguf_reader **out, file_info *fi, uint32_t *n_vocab,
                             pn_error *err)
{
    pn_status st;
    if (pn_source_is_hf(path)) {
        /* a Hugging Face folder: read as the converter's bf16 GGUF */
        struct stat sb;
        if (stat(path, &sb) != 0)
            return pn_error_set(err, PN_ERR_IO, "%s: cannot open the source: %s", path,
                                strerror(errno));
        fi->dev = sb.st_dev;
        fi->ino = sb.st_ino;
    } else if ((st = stat_regular(path, "source", fi, err)) != PN_OK) {
        return st;
    }
    gguf_reader *r;
    st = pn_source_open(path, NULL, &r, err);
    if (st != PN_OK)
        return st;
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        if (!pn_type_is_float(t->type)) {
            char *name = safe_dup(t->name, strlen(t->name));
            const pn_type_traits *tt = pn_type_traits_get(t->type);
            pn_error_set(err, PN_ERR_TYPE,
                         "%s: the source must be a float model (f32, f16, bf16): tensor '%s' is "
                         "%s",
                         path, name ? name : "?", tt ? tt->name : "of an unknown type");
            free(name);
            gguf_reader_close(r);
            return PN_ERR_TYPE;
        }
    }
    const gguf_kv *tok = gguf_reader_find_kv(r, "tokenizer.ggml.tokens");
    long emb = gguf_reader_find_tensor(r, "token_embd.weight");
    uint64_t v = tok && tok->type == GGUF_TYPE_ARRAY ? tok->arr_count
                 : emb >= 0 ? (uint64_t)gguf_reader_tensor(r, (size_t)emb)->ne[1]
                            : 0;
    if (v == 0 || v > MAX_VOCAB) {
        gguf_reader_close(r);
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: no usable vocabulary (tokenizer.ggml.tokens or token_embd.weight: "
                            "%llu tokens)",
                            path, (unsigned long long)v);
    }
    *n_vocab = (uint32_t)v;
    account(r, fi);
    *out = r;
    return PN_OK;
}

/* llama.cpp's names of its ftypes (general.file_type), facts of
 * include/llama.h (v0.5.0), for the stock quantizations a table names. */
static const char *ftype_name(uint64_t ftype)
{
    static const char *const names[] = {
        [0] = "F32",     [1] = "F16",     [2] = "Q4_0",    [3] = "Q4_1",    [7] = "Q8_0",
        [8] = "Q5_0",    [9] = "Q5_1",    [10] = "Q2_K",   [11] = "Q3_K_S", [12] = "Q3_K_M",
        [13] = "Q3_K_L", [14] = "Q4_K_S", [15] = "Q4_K_M", [16] = "Q5_K_S", [17] = "Q5_K_M",
        [18] = "Q6_K",   [25] = "IQ4_NL", [30] = "IQ4_XS", [32] = "BF16",
    };
    return ftype < sizeof names / sizeof names[0] ? names[ftype] : NULL;
}

/* True when r holds an MTP layer: a tensor blk.N.nextn.* (how pn-check
 * tells a file's MTP layer). */
static bool has_mtp_layer(const gguf_reader *r)
{
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++)
        if (strncmp(gguf_reader_tensor(r, i)->name, "blk.", 4) == 0 &&
            strstr(gguf_reader_tensor(r, i)->name, ".nextn."))
            return true;
    return false;
}

/* The source as each file was made from it: as it is, or without its MTP
 * layer (pn-quantize's --no-mtp, or a recipe's 'mtp drop'), opened when a
 * file without the layer is checked against a source that has one. */
typedef struct source_views {
    const char *path;
    gguf_reader *full;
    gguf_reader *no_mtp;
    bool has_mtp;
} source_views;

/* A PN file of that source: pn.format, and the source's tensors by name and
 * shape, in any order. Or a stock quantization of it: no pn.format, some
 * tensor of a quantized type, the source's tensors likewise; llama.cpp
 * loads it as it is (no decoding), its mix is "stock" and its ftype. A file
 * without the MTP layer of a source that has one was made with the layer
 * dropped: it is checked against the source read so. */
static pn_status check_pn(const char *path, source_views *sv, file_info *fi, pn_error *err)
{
    pn_status st = stat_regular(path, "PN file", fi, err);
    if (st != PN_OK)
        return st;
    gguf_reader *r;
    st = gguf_reader_open(path, &r, err);
    if (st != PN_OK)
        return st;
    const gguf_reader *src = sv->full;
    const char *src_path = sv->path, *as_read = "";
    if (sv->has_mtp && !has_mtp_layer(r)) {
        if (!sv->no_mtp) {
            pn_source_opts so = { .no_mtp = true };
            st = pn_source_open(sv->path, &so, &sv->no_mtp, err);
            if (st != PN_OK) {
                gguf_reader_close(r);
                return st;
            }
        }
        src = sv->no_mtp;
        as_read = " without its MTP layer";
    }
    const gguf_kv *fmt = gguf_reader_find_kv(r, PN_KEY_FORMAT);
    if (!fmt || fmt->type != GGUF_TYPE_STRING) {
        for (size_t i = 0; i < gguf_reader_n_tensors(r) && !fi->stock; i++)
            fi->stock = !pn_type_is_float(gguf_reader_tensor(r, i)->type);
        if (!fi->stock) {
            gguf_reader_close(r);
            return pn_error_set(err, PN_ERR_FORMAT,
                                "%s: not a PN file (no pn.format key) nor a quantized model; "
                                "pn-compare compares PN files and stock quantizations with their "
                                "float source",
                                path);
        }
        const gguf_kv *ft = gguf_reader_find_kv(r, "general.file_type");
        const char *name = ft && ft->type == GGUF_TYPE_UINT32 ? ftype_name(ft->v.u64) : NULL;
        char label[32];
        snprintf(label, sizeof label, "stock %s", name ? name : "llama.cpp");
        fi->mix = strdup(label);
    } else {
        const gguf_kv *mix = gguf_reader_find_kv(r, PN_KEY_MIX);
        if (mix && mix->type == GGUF_TYPE_STRING)
            fi->mix = safe_dup(mix->v.str.data, mix->v.str.len > 64 ? 64 : (size_t)mix->v.str.len);
    }
    const char *what = fi->stock ? "a quantization" : "a PN file";
    size_t n = gguf_reader_n_tensors(r), ns = gguf_reader_n_tensors(src);
    for (size_t i = 0; i < n && st == PN_OK; i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        long k = gguf_reader_find_tensor(src, t->name);
        const gguf_tensor_info *s = k >= 0 ? gguf_reader_tensor(src, (size_t)k) : NULL;
        bool same = s && s->n_dims == t->n_dims;
        for (int d = 0; same && d < GGUF_MAX_DIMS; d++)
            same = s->ne[d] == t->ne[d];
        if (!same) {
            char *name = safe_dup(t->name, strlen(t->name));
            st = pn_error_set(err, PN_ERR_MISMATCH, "%s: not %s of %s%s: tensor '%s' %s", path,
                              what, src_path, as_read, name ? name : "?",
                              s ? "has another shape in the source" : "is not in the source");
            free(name);
        }
    }
    if (st == PN_OK && n != ns)
        st = pn_error_set(err, PN_ERR_MISMATCH,
                          "%s: not %s of %s%s: %zu tensors, the source has %zu", path, what,
                          src_path, as_read, n, ns);
    if (st == PN_OK)
        account(r, fi);
    gguf_reader_close(r);
    return st;
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

/* The end of what the child printed, on one line, printable ASCII. */
static void log_tail(int fd, char *buf, size_t cap)
{
    buf[0] = 0;
    off_t size = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;
    if (size <= 0)
        return;
    size_t want = cap - 1 < (size_t)size ? cap - 1 : (size_t)size;
    ssize_t r = pread(fd, buf, want, size - (off_t)want);
    size_t n = r > 0 ? (size_t)r : 0;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        n--;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)buf[i];
        buf[i] = ch == '\n' ? '|' : (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    buf[n] = 0;
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
    /* the child gets the default SIGPIPE and SIGINT whatever we ignore */
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t def;
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    sigaddset(&def, SIGINT);
    sigaddset(&def, SIGTERM);
    posix_spawnattr_setsigdefault(&at, &def);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
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
    log_tail(c->log_fd, tail, sizeof tail);
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

static uint32_t le32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
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
    *n_vocab = le32(h + 8);
    s->n = le32(h + 12);
    *why = "its header announces an empty or oversized vocabulary or sequence list";
    if (*n_vocab == 0 || *n_vocab > MAX_VOCAB || s->n == 0 || s->n > MAX_POSITIONS)
        return false;
    s->len = calloc(s->n, sizeof *s->len);
    size_t cap = 0;
    for (size_t k = 0; k < s->n; k++) {
        uint8_t b[4];
        *why = "its output ended inside the header";
        if (!s->len || !read_all(o, fd, b, 4))
            return false;
        s->len[k] = le32(b);
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
            s->ids[s->total + i] = le32((const uint8_t *)&s->ids[s->total + i]);
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

/* ---- the run ---- */

typedef struct run {
    const pn_compare_opts *o;
    char *dir;      /* the private folder */
    char *decoded;  /* dir/decoded.gguf */
    char *src_gguf; /* dir/source.gguf: a Hugging Face source converted; else NULL */
    int logits_fd;  /* the source's rows, unlinked */
    uint32_t n_vocab;
    seqs tokens; /* the source run's */
    float *row_p, *row_q;
    double *kl;
    /* progress: the step now, its model, positions evaluated so far */
    const char *step, *path;
    size_t model;
    size_t positions_done;
} run;

/* The progress callback with where the comparison stands: step `step` of
 * model `model` (its file `path`) begins, or goes on. */
static void report(run *R)
{
    const pn_compare_opts *o = R->o;
    if (!o->progress)
        return;
    pn_compare_progress p = { R->step,
                              R->path,
                              "model",
                              R->model,
                              1 + o->n_pn,
                              (double)R->positions_done,
                              (double)R->tokens.total * (double)(1 + o->n_pn),
                              "positions" };
    o->progress(&p, o->user);
}

static void step(run *R, const char *what, size_t model, const char *path)
{
    R->step = what;
    R->model = model;
    R->path = path;
    report(R);
}

/* The decoder's progress, as the decoding step's. */
static void on_decoded(void *ctx, uint64_t done, uint64_t total)
{
    (void)done;
    (void)total;
    report(ctx);
}

/* Removes the private folder and whatever is left in it (a decoded model,
 * the decoder's temporary file). */
static void remove_dir(run *R)
{
    if (!R->dir)
        return;
    DIR *d = opendir(R->dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char *p = pn_path_join(R->dir, e->d_name);
            if (p)
                unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(R->dir);
    free(R->dir);
    R->dir = NULL;
}

static pn_status make_logits_file(run *R, pn_error *err)
{
    int fd = open(R->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        char *p = pn_path_join(R->dir, "logits.XXXXXX");
        if (!p)
            return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        fd = mkostemp(p, O_CLOEXEC);
        if (fd >= 0)
            unlink(p);
        free(p);
    }
    if (fd < 0)
        return pn_error_set(err, PN_ERR_IO, "%s: cannot make a temporary file: %s", R->dir,
                            strerror(errno));
    R->logits_fd = high_fd(fd);
    return PN_OK;
}

/* The harness's --print-version line, {"llama_cpp":"...","node_llama_cpp":"..."},
 * from the start of the source run's log. */
static void parse_version(int log_fd, pn_compare_report *rep)
{
    char buf[4096];
    ssize_t n = log_fd >= 0 ? pread(log_fd, buf, sizeof buf - 1, 0) : -1;
    buf[n > 0 ? n : 0] = 0;
    const char *keys[2] = { "\"llama_cpp\":\"", "\"node_llama_cpp\":\"" };
    char *dst[2] = { rep->llama_cpp, rep->node_llama_cpp };
    for (int k = 0; k < 2; k++) {
        const char *p = strstr(buf, keys[k]);
        size_t len = 0;
        if (p) {
            p += strlen(keys[k]);
            while (p[len] && p[len] != '"' && len < 63)
                len++;
        }
        char *s = p ? safe_dup(p, len) : NULL;
        snprintf(dst[k], 64, "%s", s ? s : "unknown");
        free(s);
    }
}

/* The source run: its rows into the logits file. */
static pn_status run_source(run *R, pn_compare_report *rep, pn_error *err)
{
    const pn_compare_opts *o = R->o;
    char threads[16], seq_len[16], max_seqs[16];
    snprintf(threads, sizeof threads, "%d", o->threads);
    snprintf(seq_len, sizeof seq_len, "%d", o->seq_len);
    snprintf(max_seqs, sizeof max_seqs, "%d", o->max_seqs);
    char *argv[13] = {
        (char *)o->node, (char *)o->script, R->src_gguf ? R->src_gguf : (char *)o->source_path,
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
                fixed.ids[s * PN_COMPARE_FIXED_LEN + i] = pn_compare_fixed_token(R->n_vocab, s, i);
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
    bool ok = read_header(o, c.out_fd, &v, &R->tokens, &why);
    if (ok && v != R->n_vocab) {
        ok = false;
        why = "its vocabulary is not the one the file declares";
    }
    if (ok && !o->text_path) {
        ok = R->tokens.n == fixed.n && R->tokens.total == fixed.total &&
             memcmp(R->tokens.ids, fixed.ids, fixed.total * 4) == 0;
        why = "it evaluated other tokens than it was given";
    }
    seqs_free(&fixed);
    size_t row_bytes = (size_t)R->n_vocab * 4;
    if (ok) {
        R->row_p = malloc(row_bytes);
        R->row_q = malloc(row_bytes);
        R->kl = malloc(R->tokens.total * sizeof *R->kl);
        ok = R->row_p && R->row_q && R->kl;
        why = "out of memory";
    }
    size_t seq = 0, in_seq = 0;
    for (size_t pos = 0; ok && pos < R->tokens.total; pos++) {
        ok = read_all(o, c.out_fd, R->row_p, row_bytes);
        why = "its output ended before the last position";
        if (ok && pwrite(R->logits_fd, R->row_p, row_bytes, (off_t)(pos * row_bytes)) !=
                      (ssize_t)row_bytes) {
            int e = errno;
            child_kill(&c);
            return pn_error_set(err, e == ENOSPC ? PN_ERR_NOSPACE : PN_ERR_IO,
                                "%s: cannot keep the source's logits (%zu bytes): %s", R->dir,
                                R->tokens.total * row_bytes, strerror(e));
        }
        /* reported as each sequence ends: llama.cpp answers a sequence at once */
        R->positions_done += ok;
        if (ok && ++in_seq == R->tokens.len[seq]) {
            seq++;
            in_seq = 0;
            report(R);
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
    parse_version(c.log_fd, rep);
    return child_finish(&c, o->source_path, err);
}

/* A PN file is decoded first; a stock quantization (stock) is given to
 * llama.cpp as it is. */
static pn_status run_pn(run *R, size_t model, const char *path, bool stock, pn_compare_file *f,
                        pn_error *err)
{
    const pn_compare_opts *o = R->o;
    double t0 = pn_now_seconds();
    pn_status st = PN_OK;
    if (!stock) {
        step(R, "decoding", model, path);
        pn_dequant_opts d;
        pn_dequant_opts_init(&d);
        d.out_type = o->decode_type;
        d.keep_rotation = o->keep_rotation;
        d.threads = o->dequant_threads;
        d.cancel = o->cancel;
        d.progress = o->progress ? on_decoded : NULL;
        d.progress_ctx = R;
        pn_dequant_stats ds;
        st = pn_dequant_file(path, R->decoded, &d, &ds, err);
        if (st != PN_OK)
            return st == PN_ERR_INTERRUPTED ? st : pn_error_prefix(err, "decoding %s", path);
    }
    step(R, "llama.cpp", model, path);
    char threads[16];
    snprintf(threads, sizeof threads, "%d", o->threads);
    char *argv[] = { (char *)o->node, (char *)o->script, stock ? (char *)path : R->decoded,
                     "--threads",     threads,           NULL };
    child c;
    st = child_start(o, argv, &c, err);
    if (st != PN_OK)
        return st;
    send_seqs(&c, &R->tokens);
    uint32_t v = 0;
    seqs got;
    const char *why = NULL;
    bool ok = read_header(o, c.out_fd, &v, &got, &why);
    /* llama.cpp has the decoded file mapped once it answers: unlink it now,
     * so that nothing is left even if this process is killed */
    if (!stock)
        unlink(R->decoded);
    if (ok && v != R->n_vocab) {
        ok = false;
        why = "its vocabulary differs from the source's";
    }
    if (ok) {
        ok = got.n == R->tokens.n && got.total == R->tokens.total &&
             memcmp(got.len, R->tokens.len, got.n * 4) == 0 &&
             memcmp(got.ids, R->tokens.ids, got.total * 4) == 0;
        why = "it evaluated other tokens than the source's";
    }
    seqs_free(&got);
    size_t row_bytes = (size_t)R->n_vocab * 4, agree = 0, seq = 0, in_seq = 0;
    double sum = 0.0;
    f->kl_max = -1.0;
    for (size_t pos = 0; ok && pos < R->tokens.total; pos++) {
        ok = read_all(o, c.out_fd, R->row_q, row_bytes);
        why = "its output ended before the last position";
        if (!ok)
            break;
        if (pread(R->logits_fd, R->row_p, row_bytes, (off_t)(pos * row_bytes)) !=
            (ssize_t)row_bytes) {
            int e = errno;
            child_kill(&c);
            return pn_error_set(err, PN_ERR_IO, "%s: cannot read back the source's logits: %s",
                                R->dir, strerror(e));
        }
        double kl;
        uint32_t ap, aq;
        size_t bad = 0;
        if (pn_compare_kl(R->row_p, R->row_q, R->n_vocab, &kl, &ap, &aq, &bad) != PN_OK) {
            bool src = !isfinite(R->row_p[bad]);
            child_kill(&c);
            return pn_error_set(err, PN_ERR_NONFINITE,
                                "%s: sequence %zu position %zu: a non-finite logit (token %zu) "
                                "from llama.cpp on %s",
                                src ? o->source_path : path, seq, in_seq, bad,
                                src ? "the source" : "the decoded model");
        }
        R->kl[pos] = kl;
        R->positions_done++;
        sum += kl;
        agree += ap == aq;
        if (kl > f->kl_max) {
            f->kl_max = kl;
            f->kl_max_seq = seq;
            f->kl_max_pos = in_seq;
        }
        if (++in_seq == R->tokens.len[seq]) {
            seq++;
            in_seq = 0;
            report(R); /* as each sequence ends: llama.cpp answers a sequence at once */
        }
    }
    if (cancelled(o)) {
        child_kill(&c);
        return pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
    }
    if (!ok) {
        close_fd(&c.out_fd);
        st = child_finish(&c, path, err);
        if (st == PN_OK)
            st = pn_error_set(err, PN_ERR_IO, "llama.cpp on %s%s: %s",
                              stock ? "" : "the decoding of ", path, why);
        return st;
    }
    st = child_finish(&c, path, err);
    if (st != PN_OK)
        return st;
    size_t n = R->tokens.total;
    f->kl_mean = sum / (double)n;
    /* the standard error of the mean over the positions, as llama-perplexity's
     * "Mean KLD: x ± y": the sample standard deviation / sqrt(n), in two
     * passes (before the quantile sorts the values) */
    double ss = 0.0;
    for (size_t i = 0; i < n; i++)
        ss += (R->kl[i] - f->kl_mean) * (R->kl[i] - f->kl_mean);
    f->kl_se = n > 1 ? sqrt(ss / (double)(n - 1) / (double)n) : 0.0;
    f->kl_p99 = pn_compare_quantile(R->kl, n, 0.99);
    f->top1 = (double)agree / (double)n;
    f->seconds = pn_now_seconds() - t0;
    return PN_OK;
}

static void fill_file(pn_compare_file *f, const char *path, file_info *fi)
{
    f->path = strdup(path);
    f->mix = fi->mix;
    fi->mix = NULL;
    f->file_bytes = fi->file_bytes;
    f->weights = fi->weights;
    f->tensor_bytes = fi->tensor_bytes;
    f->pn_weights = fi->pn_weights;
    f->pn_bytes = fi->pn_bytes;
    f->bpw = fi->weights ? 8.0 * (double)fi->tensor_bytes / (double)fi->weights : 0.0;
    f->bpw_pn = fi->pn_weights ? 8.0 * (double)fi->pn_bytes / (double)fi->pn_weights : 0.0;
}

void pn_compare_report_free(pn_compare_report *rep)
{
    if (!rep)
        return;
    free(rep->source.path);
    free(rep->source.mix);
    for (size_t i = 0; i < rep->n_files; i++) {
        free(rep->files[i].path);
        free(rep->files[i].mix);
    }
    free(rep->files);
    memset(rep, 0, sizeof *rep);
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

pn_status pn_compare_run(const pn_compare_opts *o, pn_compare_report *rep, pn_error *err)
{
    memset(rep, 0, sizeof *rep);
    double t0 = pn_now_seconds();
    if (!o->source_path || !o->script || !o->node || !o->tmp_dir || o->n_pn == 0 || !o->pn_paths ||
        o->threads < 1 || (o->text_path && (o->seq_len < 1 || o->max_seqs < 1)) ||
        !(o->decode_type == PN_TYPE_F32 || o->decode_type == PN_TYPE_F16 ||
          o->decode_type == PN_TYPE_BF16))
        return pn_error_set(err, PN_ERR_USAGE,
                            "compare: a source, PN files, the node program, "
                            "the script, a folder and a thread count are needed");
    if (access(o->script, R_OK) != 0)
        return pn_error_set(err, PN_ERR_IO,
                            "%s: the llama.cpp harness is missing (%s): pn-compare looks for it "
                            "in ../share/pn-quantize/llama/ beside the program, or give "
                            "--llama-script",
                            o->script, strerror(errno));
    if (o->text_path) {
        file_info tf;
        pn_status st = stat_regular(o->text_path, "text", &tf, err);
        if (st != PN_OK)
            return st;
        struct stat sb;
        if (stat(o->text_path, &sb) == 0 && sb.st_size > TEXT_MAX_BYTES)
            return pn_error_set(err, PN_ERR_FORMAT, "%s: the text has %lld bytes, at most %lld",
                                o->text_path, (long long)sb.st_size, (long long)TEXT_MAX_BYTES);
    }
    /* every input is checked before anything runs */
    gguf_reader *src = NULL;
    file_info sfi = { 0 };
    uint32_t n_vocab = 0;
    pn_status st = open_source(o->source_path, &src, &sfi, &n_vocab, err);
    if (st != PN_OK)
        return st;
    file_info *fis = calloc(o->n_pn, sizeof *fis);
    if (!fis) {
        gguf_reader_close(src);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    source_views sv = { o->source_path, src, NULL, has_mtp_layer(src) };
    for (size_t i = 0; i < o->n_pn && st == PN_OK; i++) {
        st = check_pn(o->pn_paths[i], &sv, &fis[i], err);
        if (st == PN_OK && fis[i].dev == sfi.dev && fis[i].ino == sfi.ino)
            st = pn_error_set(err, PN_ERR_USAGE, "%s is the source itself", o->pn_paths[i]);
        for (size_t k = 0; st == PN_OK && k < i; k++)
            if (fis[k].dev == fis[i].dev && fis[k].ino == fis[i].ino)
                st = pn_error_set(err, PN_ERR_USAGE, "%s is given twice (also as %s)",
                                  o->pn_paths[i], o->pn_paths[k]);
    }
    gguf_reader_close(src);
    if (sv.no_mtp)
        gguf_reader_close(sv.no_mtp);
    run R = { .o = o, .logits_fd = -1, .n_vocab = n_vocab };
    if (st == PN_OK) {
        char *tmpl = pn_path_join(o->tmp_dir, "pn-compare.XXXXXX");
        if (tmpl && mkdtemp(tmpl)) {
            R.dir = tmpl;
            R.decoded = pn_path_join(R.dir, "decoded.gguf");
            st = R.decoded ? make_logits_file(&R, err)
                           : pn_error_set(err, PN_ERR_NOMEM, "out of memory");
            if (st == PN_OK && pn_source_is_hf(o->source_path)) {
                /* stock llama.cpp reads a GGUF: the folder converted first */
                R.src_gguf = pn_path_join(R.dir, "source.gguf");
                step(&R, "converting", 0, o->source_path);
                st = R.src_gguf ? convert_source(o->source_path, R.src_gguf, err)
                                : pn_error_set(err, PN_ERR_NOMEM, "out of memory");
            }
        } else {
            st = pn_error_set(err, PN_ERR_IO, "%s: cannot make a temporary folder: %s", o->tmp_dir,
                              strerror(errno));
            free(tmpl);
        }
    }
    if (st == PN_OK) {
        step(&R, "llama.cpp", 0, o->source_path);
        st = run_source(&R, rep, err);
    }
    if (st == PN_OK) {
        rep->files = calloc(o->n_pn, sizeof *rep->files);
        if (!rep->files)
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < o->n_pn && st == PN_OK; i++) {
        fill_file(&rep->files[i], o->pn_paths[i], &fis[i]);
        rep->n_files = i + 1;
        st = run_pn(&R, i + 1, o->pn_paths[i], fis[i].stock, &rep->files[i], err);
    }
    if (R.logits_fd >= 0)
        close(R.logits_fd);
    remove_dir(&R);
    free(R.decoded);
    free(R.src_gguf);
    free(R.row_p);
    free(R.row_q);
    free(R.kl);
    for (size_t i = 0; i < o->n_pn; i++)
        free(fis[i].mix);
    free(fis);
    if (st == PN_OK) {
        fill_file(&rep->source, o->source_path, &sfi);
        rep->n_vocab = n_vocab;
        rep->n_seqs = R.tokens.n;
        rep->n_positions = R.tokens.total;
        rep->from_text = o->text_path != NULL;
        rep->threads = o->threads;
        rep->seconds = pn_now_seconds() - t0;
    } else {
        pn_compare_report_free(rep);
    }
    seqs_free(&R.tokens);
    return st;
}
