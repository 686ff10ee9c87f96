/* compare.c - pn-compare's run: what each file is (the float source, a PN
 * mix, a stock quantization), each mix decoded and judged by stock llama.cpp
 * (judge.h), and the report (see compare.h). The arithmetic is in
 * kl_math.c. */
#include "common/file.h"
#include "hf/hf.h"
#include "convert/convert.h"
#include "io/source_open.h"
#include "compare/compare.h"
#include "compare/judge.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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
#include "gguf/model_check.h"
#include "gguf/pn_keys.h"
#include "dequant/dequant.h"
#include "quant/types.h"

/* Bounds on what the harness may announce (it is ours, but its output is
 * still input): keeps every allocation linear in what was asked for. */
#define TEXT_MAX_BYTES ((off_t)64 << 20)

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
    uint32_t v = pn_judge_vocab_of(r);
    if (v == 0) {
        gguf_reader_close(r);
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: no usable vocabulary (tokenizer.ggml.tokens or token_embd.weight: "
                            "none, or over %u tokens)",
                            path, PN_JUDGE_MAX_VOCAB);
    }
    *n_vocab = v;
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
    if (sv->has_mtp && !gguf_has_mtp_layer(r)) {
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

/* ---- the run ---- */

/* A PN file is decoded into the judge's folder first; a stock quantization
 * (stock) is given to llama.cpp as it is. */
static pn_status run_pn(const pn_compare_opts *o, pn_judge *J, size_t model, const char *path,
                        bool stock, pn_compare_file *f, pn_error *err)
{
    double t0 = pn_now_seconds();
    char *decoded = NULL;
    if (!stock) {
        decoded = pn_path_join(pn_judge_dir(J), "decoded.gguf");
        if (!decoded)
            return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        pn_judge_step(J, "decoding", model, path);
        pn_dequant_opts d;
        pn_dequant_opts_init(&d);
        d.out_type = o->decode_type;
        d.keep_rotation = o->keep_rotation;
        d.threads = o->dequant_threads;
        d.cancel = o->cancel;
        d.progress = o->progress ? pn_judge_on_progress : NULL;
        d.progress_ctx = J;
        pn_dequant_stats ds;
        pn_status st = pn_dequant_file(path, decoded, &d, &ds, err);
        if (st != PN_OK) {
            free(decoded);
            return st == PN_ERR_INTERRUPTED ? st : pn_error_prefix(err, "decoding %s", path);
        }
    }
    pn_judge_figures g;
    pn_status st =
        pn_judge_eval(J, model, stock ? path : decoded, path, !stock, !stock, &g, NULL, err);
    free(decoded);
    if (st != PN_OK)
        return st;
    f->kl_mean = g.kl_mean;
    f->kl_se = g.kl_se;
    f->kl_p99 = g.kl_p99;
    f->kl_max = g.kl_max;
    f->kl_max_seq = g.kl_max_seq;
    f->kl_max_pos = g.kl_max_pos;
    f->top1 = g.top1;
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
    source_views sv = { o->source_path, src, NULL, gguf_has_mtp_layer(src) };
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
    pn_judge *J = NULL;
    if (st == PN_OK)
        st = pn_judge_open(o, n_vocab, 1 + o->n_pn, &J, rep->llama_cpp, rep->node_llama_cpp, err);
    if (st == PN_OK) {
        rep->files = calloc(o->n_pn, sizeof *rep->files);
        if (!rep->files)
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < o->n_pn && st == PN_OK; i++) {
        fill_file(&rep->files[i], o->pn_paths[i], &fis[i]);
        rep->n_files = i + 1;
        st = run_pn(o, J, i + 1, o->pn_paths[i], fis[i].stock, &rep->files[i], err);
    }
    size_t n_seqs = J ? pn_judge_n_seqs(J) : 0, n_positions = J ? pn_judge_n_positions(J) : 0;
    pn_judge_close(J);
    for (size_t i = 0; i < o->n_pn; i++)
        free(fis[i].mix);
    free(fis);
    if (st == PN_OK) {
        fill_file(&rep->source, o->source_path, &sfi);
        rep->n_vocab = n_vocab;
        rep->n_seqs = n_seqs;
        rep->n_positions = n_positions;
        rep->from_text = o->text_path != NULL;
        rep->threads = o->threads;
        rep->seconds = pn_now_seconds() - t0;
    } else {
        pn_compare_report_free(rep);
    }
    return st;
}