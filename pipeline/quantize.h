/* quantize.h - the pn-quantize job: float GGUF in, PN GGUF out.
 *
 * Steps: open the source (mmap), build the plan from the recipe (types,
 * rotation, promotions by measurement, list or target size), then stream
 * every tensor in source order: widen rows in chunks, rotate the PN-bound
 * ones, quantize (OpenMP over rows, or the CUDA backend), CRC-32 as the bytes
 * go out, into a temporary file beside DST. The temporary file is re-opened
 * and validated (structure, every PN row, every CRC) and only then renamed
 * onto DST. On any error, or when *cancel becomes non-zero, nothing is left
 * at DST (nor the temporary file) and the source is never written.
 *
 * Output bytes depend only on the source, the recipe and the options that
 * select types and rotation: never on the thread count or the backend.
 */
#ifndef PN_PIPELINE_QUANTIZE_H
#define PN_PIPELINE_QUANTIZE_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/pn_error.h"

typedef enum pn_backend { PN_BACKEND_AUTO = 0, PN_BACKEND_CPU, PN_BACKEND_CUDA } pn_backend;

/* What the progress callback sees; also the per-phase times of the run. */
typedef struct pn_progress {
    int phase;                  /* PN_PHASE_* below */
    size_t tensor_index, n_tensors;
    const char *tensor_name;
    uint64_t weights_done, weights_total;
    double elapsed_s;           /* since the start of the phase */
} pn_progress;

enum { PN_PHASE_MEASURE = 1, PN_PHASE_QUANTIZE = 2, PN_PHASE_VALIDATE = 3 };

typedef void (*pn_progress_fn)(const pn_progress *p, void *user);
/* Free-form notes for the user ("measurement read from X", "falling back to
 * the CPU backend: ..."). */
typedef void (*pn_note_fn)(const char *msg, void *user);

typedef struct pn_quantize_opts {
    const char *src_path;
    const char *dst_path;
    const char *recipe_path;        /* NULL: the built-in P0k+19 recipe */
    int promote;                    /* -1: the recipe's `promote` */
    const char *promote_list_path;  /* NULL or a file of tensor names */
    const char *measurement_path;   /* NULL or a file to read/write */
    uint64_t target_size;           /* 0: none */
    int rotation_cap;               /* -1: the recipe's; 0: none; else cap */
    int threads;                    /* 0: all cores */
    pn_backend backend;
    int device;
    bool dry_run;
    bool force;
    const char *report_path;        /* NULL or FILE.json */
    uint64_t measure_rows;          /* rows sampled per tensor; 0: default */
    FILE *plan_out;                 /* where the plan table / totals go (NULL: none) */
    bool plan_table;                /* print the per-tensor table (dry run) */
    pn_progress_fn progress;
    pn_note_fn note;
    void *user;
    volatile sig_atomic_t *cancel;  /* checked between chunks */
} pn_quantize_opts;

void pn_quantize_opts_init(pn_quantize_opts *o);

/* Per-phase wall time of a finished run (seconds). */
typedef struct pn_quantize_stats {
    double t_total, t_plan, t_measure, t_read, t_rotate, t_quantize, t_error, t_write, t_crc,
        t_validate;
    uint64_t weights, file_bytes;
    int n_promoted;
    char mix_name[96];
    char backend[160];
} pn_quantize_stats;

pn_status pn_quantize_file(const pn_quantize_opts *o, pn_quantize_stats *stats, pn_error *err);

/* The recipe compiled into the binary (recipes/qwen3.8-27b-pn3.mix). */
extern const char pn_default_recipe_text[];
extern const char pn_default_recipe_name[];

#endif
