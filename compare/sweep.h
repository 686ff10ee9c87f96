/* sweep.h - pn-compare --sweep: many mixes of one source made and judged in
 * one command, and (compare/plot.h) drawn as size against KL.
 *
 * For a float GGUF source, the sweep
 *   1. makes each PN mix (one per --promote count, and one for a target
 *      size, each once per promotion order) with the quantize job
 *      (pipeline/quantize.h) into a private work folder, in the order
 *      given, order by order: one promotion measurement of each kind for
 *      all of them (the work folder's error measurement file, written by
 *      the first mix that measures and read by the others; the KL
 *      measurement made before the first mix), each mix reusing the last
 *      one made (--reuse), so a mix costs what it changes;
 *   2. makes each stock type with stock llama.cpp's own quantizer:
 *      llama_model_quantize of the libllama that node-llama-cpp loads to
 *      judge (the library beside the harness, node_modules/@node-llama-cpp/
 *      linux-x64/bins/linux-x64/), called by the helper pn-llama-quantize
 *      (tools/llama/pn_llama_quantize.c) in a child process: the child can
 *      be killed when the sweep is interrupted, which a call in this
 *      process could not be, and llama.cpp's log stays out of ours;
 *   3. compares every mix made with the source in one comparison
 *      (compare.h: the same tokens, the same llama.cpp, the same threads).
 * A mix that fails (its quantize job, the stock quantizer) is reported as
 * failed with its error, and the others are still compared. An interrupt
 * (*cancel) stops the step running, kills a child, and removes the work
 * folder; with keep_dir the mixes finished before it are kept there (each
 * complete: a mix appears in the work folder only once its job committed
 * it), and nothing else is left.
 *
 * Before anything runs, everything is checked: the mixes, the stock
 * quantizer and its libllama, the text, the recipe (read, and planned on
 * the source by a dry run of the quantize job with no promotion), keep_dir.
 *
 * Files: the work folder is mkdtemp'd in keep_dir (made when absent) or
 * else in tmp_dir. keep_dir is locked (flock) for the whole run: a second
 * sweep into it is refused at once (PN_ERR_EXISTS). A file there under a
 * mix's name that is that mix from an earlier run (a PN file of this source,
 * by its recorded header hash, with the label the recipe's name and the
 * count give; a stock quantization of the source of that type) is used as
 * it is (mix.kept, not made again): an interrupted sweep resumes; a
 * measurement there (measurement.pnm, measurement.kl) is copied into the
 * work folder and read (one of other parameters is measured again, as the
 * measurement's own checks say). At the end, with keep_dir, each mix made
 * and each measurement are moved into keep_dir under their names
 * (promote-19.gguf, promote-19-kl.gguf, target-12600000000.gguf,
 * stock-Q4_K_M.gguf, measurement.pnm, measurement.kl), also when the
 * comparison failed,
 * never replacing a file there; the work folder is always removed. An
 * error of the comparison names a mix by its kept path, or by its file name
 * when it was not kept, never by its path in the removed work folder.
 *
 * The imatrix (imatrix_path, either form of mix/imatrix.h) weights every
 * mix: the PN mixes' measurement and k-quants through the quantize job, and
 * the stock types through pn-llama-quantize --imatrix (llama_model_quantize
 * given the same per-column weights).
 */
#ifndef PN_COMPARE_SWEEP_H
#define PN_COMPARE_SWEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "compare/compare.h"

#define PN_SWEEP_MAX_MIXES 64

typedef enum pn_sweep_kind { PN_SWEEP_PN = 0, PN_SWEEP_STOCK = 1 } pn_sweep_kind;

/* How a PN mix's promotions are ordered (pn-quantize --measure): by the
 * error measurement's E3 - E4 (mix/measurement.h), by the forward position
 * first (mix/promote_score.h; the same error measurement), or by one KL
 * measurement (compare/kl_measure.h). */
typedef enum pn_sweep_order {
    PN_SWEEP_BY_ERROR = 0,
    PN_SWEEP_BY_FORWARD = 1,
    PN_SWEEP_BY_KL = 2
} pn_sweep_order;

#define PN_SWEEP_N_ORDERS 3

/* "error", "forward", "kl": the word --measure takes. */
const char *pn_sweep_order_name(pn_sweep_order order);

/* A --measure list ("error,kl") into orders (at most PN_SWEEP_N_ORDERS, in
 * the order given). PN_ERR_USAGE naming the word: an unknown order, one
 * given twice, an empty word. */
pn_status pn_sweep_orders_parse(const char *list, pn_sweep_order *out, size_t *n, pn_error *err);

typedef struct pn_sweep_opts {
    /* the comparison: source_path, text, threads, node, script, tmp_dir,
     * envp, cancel, progress (pn_paths and n_pn are the sweep's) */
    pn_compare_opts compare;
    const int *promote; /* PN mixes: promotion counts */
    size_t n_promote;
    uint64_t target_size;     /* one more PN mix: the most promotions within it; 0 none */
    const char *recipe_path;  /* NULL: the built-in recipe */
    const char *const *stock; /* stock types: Q4_K_M, ... (pn-llama-quantize's names, in
                                 either case) */
    size_t n_stock;
    const char *imatrix_path; /* NULL: none; else every mix is made with it */
    const char *keep_dir;     /* NULL: nothing kept */
    const char *quantizer;    /* the pn-llama-quantize program (needed with stock) */
    const char *libllama;     /* NULL: the one beside compare.script */
    int quantize_threads;     /* <= 0: all cores */
    /* --measure kl --calibration FILE: the kl order's promotions chosen by
     * one KL measurement (compare/kl_measure.h) on this text, at the
     * comparison's --seq-len and --max-seqs, in the source's precision; it
     * must not be the judging text. Its file is measurement.kl (kept with
     * keep_dir, and read again from there); the mixes promote-N-kl.gguf and
     * target-SIZE-kl.gguf. NULL: no kl order. */
    const char *calibration_path;
    /* The orders the PN mixes are made in, each mix once per order
     * (pn_sweep_orders_parse): the error order's mixes keep the names
     * above (promote-N.gguf); the others' files add the order
     * (promote-N-forward.gguf, promote-N-kl.gguf). The error and the KL
     * measurement are each made once for the sweep; kl needs
     * calibration_path, and calibration_path needs kl. NULL (n_orders 0):
     * by KL with calibration_path, else by error. */
    const pn_sweep_order *orders;
    size_t n_orders;
} pn_sweep_opts;

void pn_sweep_opts_init(pn_sweep_opts *o);

/* The libllama that the harness at script loads (malloc'd; NULL: no memory). */
char *pn_sweep_default_libllama(const char *script);

/* Is name a stock type pn-llama-quantize knows (Q4_K_M, ..., in either case
 * as llama-quantize takes it: q4_k_m)? */
bool pn_sweep_stock_type_known(const char *name);

typedef struct pn_sweep_mix {
    pn_sweep_kind kind;
    pn_sweep_order order; /* a PN mix's (PN_SWEEP_BY_ERROR for a stock type) */
    int promote;          /* a PN mix's promotion count; -1: the target size, a stock type */
    char name[96];        /* "P0k+19", "P0k+19 by KL", "P0k+19 by forward", "stock Q4_K_M",
                             "P0k+23 (--target-size 12.6 GB)"; "promote 19",
                             "promote 19 (kl)" if it failed */
    char file[64];        /* its file name: promote-19.gguf, promote-19-kl.gguf,
                             stock-Q4_K_M.gguf */
    char *kept;           /* keep_dir/file once kept (or found there), else NULL */
    pn_status status;     /* PN_OK: made (and compared when the sweep compared) */
    char error[800];      /* why it failed */
    double make_seconds;
    long file_index; /* its entry in report.compare.files, -1 if none */
} pn_sweep_mix;

typedef struct pn_sweep_report {
    pn_sweep_mix *mixes; /* PN mixes in the order given, then the stock types */
    size_t n_mixes, n_failed;
    bool compared;             /* false when no mix was made */
    pn_compare_report compare; /* the mixes made (files[].path: kept path or file name) */
    /* keep_dir/measurement.pnm (the error measurement's, for the error and
     * the forward order) and keep_dir/measurement.kl, when kept this run;
     * NULL where not */
    char *kept_measurement[2];
    double seconds;
} pn_sweep_report;

/* Runs the sweep. Errors: PN_ERR_USAGE (options, a mix given twice, a file
 * in keep_dir that would be replaced, an imatrix, stock types of a source
 * that is not a GGUF), PN_ERR_IO (folders, the quantizer missing), the
 * comparison's, PN_ERR_INTERRUPTED. A failed mix is no error: it is in the
 * report (n_failed). When no mix could be made the report holds the
 * failures and compared is false (status PN_OK). On error *rep is empty. */
pn_status pn_sweep_run(const pn_sweep_opts *o, pn_sweep_report *rep, pn_error *err);

void pn_sweep_report_free(pn_sweep_report *rep);

#endif
