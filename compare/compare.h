/* compare.h - pn-compare: how far PN mixes are from their float source, as
 * stock llama.cpp sees it.
 *
 * For a float source GGUF and one or more PN files of it, each PN file is
 * decoded (dequant/dequant.h) into a temporary float GGUF, stock llama.cpp
 * runs the forward pass on the source and on each decoded file over the same
 * token sequences (a stock quantization of the source, a GGUF without
 * pn.format with quantized tensors, e.g. llama-quantize's Q4_K_M, is given
 * to llama.cpp as it is, its mix named "stock " and its ftype), and the next-token distributions are compared position by
 * position:
 *   KL      sum_i p_i (log p_i - log q_i), p = softmax of the source's logits,
 *           q = the decoded model's, in double (log-softmax with the maximum
 *           subtracted, exp and log of libm); mean, 99th percentile
 *           (nearest rank: the ceil(0.99 n)-th smallest) and maximum over all
 *           positions; the mean's standard error over the positions, the
 *           sample standard deviation / sqrt(n) (llama-perplexity's
 *           "Mean KLD: x ± y");
 *   top-1   the share of positions where both give the same highest logit
 *           (the lowest token id among equal maxima);
 *   size    the PN file's bytes (a split set's: all its files'), and bits per weight: 8 x tensor data bytes /
 *           weights, over all tensors and over pn3t/pn4t tensors.
 *
 * Tokens: the fixed set (PN_COMPARE_FIXED_SEQS sequences of
 * PN_COMPARE_FIXED_LEN ids, pn_compare_fixed_token) unless a text file is
 * given; a text is cut by the source model's own tokenizer into sequences of
 * seq_len tokens (at most max_seqs), and the decoded models get those ids.
 * Every sequence starts from an empty context. Nothing is sampled.
 *
 * llama.cpp: node-llama-cpp's prebuilt CPU build, through the Node script
 * tools/llama/pn-llama-logits.mjs (its header documents the protocol),
 * started with posix_spawnp(node, script, ...): token ids on its stdin (a
 * socket, written with MSG_NOSIGNAL, so a child that dies never raises
 * SIGPIPE here), logits from its file descriptor 3, its stdout and stderr
 * into an anonymous memory file whose end is quoted in errors (the source
 * run's also names the llama.cpp build: --print-version). Every run uses
 * the same thread count. A child is always reaped; on error or cancel
 * it is killed first.
 *
 * Temporary files: one private folder made with mkdtemp in tmp_dir. The
 * source's logits go to an unlinked file there (positions x n_vocab x 4
 * bytes); each decoded model is unlinked as soon as llama.cpp has it open
 * (mapped), and the folder is removed before returning, on success, error
 * or cancel alike. Disk needed: one decoded model (4 bytes per weight for
 * f32) plus the logits.
 */
#ifndef PN_PIPELINE_COMPARE_H
#define PN_PIPELINE_COMPARE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "compare/kl_math.h"

/* What the progress callback sees: the step, its model, and the measure of
 * the whole comparison, the positions llama.cpp has evaluated over all its
 * runs (the source's, then each file's) of all it will evaluate. */
typedef struct pn_compare_progress {
    const char *step;       /* "converting", "decoding", "llama.cpp"; the sweep's
                               "making", "quantizing with llama.cpp" */
    const char *path;       /* the model's file (the sweep's steps: the mix's name) */
    const char *item;       /* what model counts: "model"; the sweep's steps: "mix" */
    size_t model, n_models; /* 0 the source, 1.. the files (the sweep's steps: the mix) */
    double done, total;     /* positions evaluated, of all (0 while unknown: a text
                               before the source's first answer); the sweep's steps:
                               mixes made (a part of one while it is quantized) */
    const char *unit;       /* "positions"; the sweep's steps: "mixes" */
} pn_compare_progress;

typedef struct pn_compare_opts {
    const char *source_path;     /* float GGUF (f32/f16/bf16 tensors) */
    const char *const *pn_paths; /* PN files of that source */
    size_t n_pn;
    const char *node;              /* the node program: a path, or a name looked up in PATH */
    const char *script;            /* tools/llama/pn-llama-logits.mjs */
    char *const *envp;             /* the child's environment (PATH is searched in it) */
    const char *tmp_dir;           /* where the private temporary folder goes */
    const char *text_path;         /* NULL: the fixed token set */
    int seq_len, max_seqs;         /* text mode: tokens per sequence, most sequences */
    int threads;                   /* llama.cpp threads (>= 1), the same for every model */
    int decode_type;               /* PN_TYPE_F32 (default), PN_TYPE_F16 or PN_TYPE_BF16 */
    bool keep_rotation;            /* decode with the rotation kept (an experiment) */
    int dequant_threads;           /* <= 0: all cores */
    volatile sig_atomic_t *cancel; /* checked while waiting; may be NULL */
    /* called at the start of each step, during a decoding after each chunk
     * and as llama.cpp's logits arrive, from the calling thread; may be NULL */
    void (*progress)(const pn_compare_progress *p, void *user);
    void *user;
} pn_compare_opts;

void pn_compare_opts_init(pn_compare_opts *o);

typedef struct pn_compare_file {
    char *path;
    char *mix; /* pn.mix, or NULL (terminal-safe copy) */
    uint64_t file_bytes;
    uint64_t weights, tensor_bytes; /* over all tensors */
    uint64_t pn_weights, pn_bytes;  /* over pn3t/pn4t tensors */
    double bpw, bpw_pn;             /* bits per weight; bpw_pn 0 without PN tensors */
    double kl_mean, kl_p99, kl_max;
    double kl_se;                  /* standard error of kl_mean over the positions:
                                      sample standard deviation / sqrt(n); 0 for n = 1 */
    double top1;                   /* share of positions, 0..1 */
    size_t kl_max_seq, kl_max_pos; /* where the maximum is */
    double seconds;                /* decode and llama.cpp run */
} pn_compare_file;

typedef struct pn_compare_report {
    pn_compare_file source; /* path, size and bits per weight (no KL) */
    pn_compare_file *files; /* n_files, in the order given */
    size_t n_files;
    uint32_t n_vocab;
    size_t n_seqs, n_positions;
    bool from_text;
    char llama_cpp[64];      /* llama.cpp release as node-llama-cpp names it */
    char node_llama_cpp[64]; /* node-llama-cpp's version */
    int threads;
    double seconds; /* the whole comparison */
} pn_compare_report;

/* Runs the comparison. Errors (each naming the file): PN_ERR_USAGE (options,
 * a PN file given twice or equal to the source), PN_ERR_IO (a file missing,
 * node or the script not runnable, llama.cpp failing: its last messages
 * quoted), PN_ERR_TYPE (the source is not float), PN_ERR_FORMAT (a file is
 * neither PN, with pn.format, nor quantized), PN_ERR_MISMATCH (a PN file whose tensors are not the
 * source's: the first differing tensor named; a file without the MTP layer
 * (blk.N.nextn.*) of a source that has one is held against the source read
 * without it, as pn-quantize read it for that file, io/source_open.h; llama.cpp's vocabulary or
 * tokens differ between runs), PN_ERR_NONFINITE (a non-finite logit, with
 * sequence and position), PN_ERR_INTERRUPTED, and pn_dequant_file's. On
 * error *rep is empty. */
pn_status pn_compare_run(const pn_compare_opts *o, pn_compare_report *rep, pn_error *err);

void pn_compare_report_free(pn_compare_report *rep);

#endif
