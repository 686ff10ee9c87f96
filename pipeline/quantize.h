/* quantize.h - the pn-quantize job: float GGUF in, PN GGUF out.
 *
 * Steps: open the source (read with pread, never mapped), build the plan
 * from the recipe (types, rotation, promotions by measurement, list or
 * target size), then stream every tensor in source order through three
 * stages that run at the same time (pipeline/stream.h): a reader thread
 * reads and widens the next chunk, the compute team (OpenMP) rotates and
 * quantizes this one (error sums fused into the search, CRC-32 per piece),
 * a writer thread writes the previous one into a temporary file beside DST.
 * Chunks are whole blocks of the output type, never more than about
 * opts.chunk_weights weights, so memory stays a few chunk buffers whatever
 * the model or the row length. The temporary file is then read once, in
 * parallel, and validated (structure, every PN row, every CRC); the caller's
 * result hook runs (the report is made ready there); only then is the file
 * committed onto DST. On any error, or when *cancel becomes non-zero,
 * nothing is left at DST (nor the temporary file) and the source is never
 * written.
 *
 * Split sets (docs/split.md): the source may be any file of a split set
 * (gguf_reader_open reads the set as one model; its split keys are not
 * copied). The output is one file, or with opts.split / keep_split a set
 * planned by gguf-split's rules (io/outset.h): each split records the
 * CRC-32 of its own tensors, every split is validated, and the set is
 * committed with its first split last. split_index writes one split of that
 * plan alone, byte for byte the file of a full run given the same options
 * and measurement, streaming only that split's tensors.
 *
 * Output bytes and every reported figure (relative errors, CRCs) depend only
 * on the source, the recipe and the options that select types and rotation:
 * never on the thread count, the chunk size, the CPU path or the backend.
 *
 * Every output records who its source is (pn.source.*, io/source_id.h;
 * the CRCs of each tensor's sampled rows and of all its bytes are computed
 * from the bytes the reader reads anyway). With opts.reuse_path (--reuse
 * PREV, pipeline/reuse.h, docs/reuse.md) the sampled rows of every source
 * tensor are read first, and a tensor PREV holds from the same source, type,
 * rotation and quantizer is copied from PREV (after its bytes are checked
 * against PREV's pn.tensor_crc32) instead of being quantized: the output is
 * byte for byte the one a run without reuse writes, and is validated the
 * same way. PREV may be DST (with force): it is read until the new file is
 * committed over it.
 *
 * The library reads no environment variable and prints nothing: cmd/
 * resolves PN_CPU_PATH, PN_CHUNK_WEIGHTS and PN_CUDA_EMULATE into the
 * options, and formats the plan, the totals and the report from the result
 * (pn_quantize_result) it is handed.
 */
#ifndef PN_PIPELINE_QUANTIZE_H
#define PN_PIPELINE_QUANTIZE_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/pn_error.h"
#include "gguf/gguf_split.h"
#include "mix/imatrix.h"
#include "mix/plan.h"

typedef enum pn_backend { PN_BACKEND_AUTO = 0, PN_BACKEND_CPU, PN_BACKEND_CUDA } pn_backend;

/* What the progress callback sees. */
typedef struct pn_progress {
    int phase; /* PN_PHASE_* below */
    size_t tensor_index, n_tensors;
    const char *tensor_name; /* bytes from the file: print with pn_fput_safe */
    uint64_t weights_done, weights_total;
    double elapsed_s; /* since the start of the phase */
} pn_progress;

enum {
    PN_PHASE_MEASURE = 1,
    PN_PHASE_QUANTIZE = 2,
    PN_PHASE_VALIDATE = 3,
    PN_PHASE_IDENTITY = 4,    /* --reuse: reading every tensor's sampled rows */
    PN_PHASE_REUSE_CHECK = 5, /* --reuse: checking PREV's bytes (and the source's with verify) */
};

/* Both callbacks run on the calling thread (never on a helper thread), so a
 * test may use them as hooks into a running job. */
typedef void (*pn_progress_fn)(const pn_progress *p, void *user);
/* Free-form notes for the user ("measurement read from X", a stale
 * temporary file); they may hold names from the file and line breaks. */
typedef void (*pn_note_fn)(const char *msg, void *user);

/* Default chunk: 4 M weights (16 MiB of floats per chunk buffer). */
#define PN_CHUNK_WEIGHTS_DEFAULT ((int64_t)4 << 20)
/* The smallest chunk the options accept (tests use tiny chunks). */
#define PN_CHUNK_WEIGHTS_MIN ((int64_t)256)
#define PN_CHUNK_WEIGHTS_MAX ((int64_t)1 << 26)

/* Per-phase times of a run, in seconds. The stages overlap, so the phases
 * do not add up to the total: each is the time its stage spent on that
 * work. read/widen: the reader thread; rotate/quantize/error/crc: the
 * compute team (thread-seconds divided by the team size, i.e. the stage's
 * wall time); write: the writer thread; wait_input: the compute team idle
 * because no chunk was read yet (the disk is the bottleneck when it is
 * large); wait_output: the reader waiting for a free buffer (the compute or
 * the writer is the bottleneck); flush: the final fsync; validate: reading
 * the written file back and checking it after the stream; validate_behind:
 * the writer thread reading back, during the stream, what was already on
 * the device (validated_behind_bytes of it; pipeline/readback.h). */
typedef struct pn_quantize_stats {
    double t_total, t_plan, t_measure, t_read, t_widen, t_rotate, t_quantize, t_error, t_write,
        t_crc, t_flush, t_validate, t_wait_input, t_wait_output, t_validate_behind;
    uint64_t validated_behind_bytes;
    /* of the measurement, the same way (its share of t_measure) */
    double t_measure_read, t_measure_compute, t_measure_wait_input;
    /* the source identity: the reader's CRC-32 of the source bytes (part of
     * the stream); with --reuse the sampled rows read before the plan
     * (wall), the source tensors read for --reuse-verify and PREV's bytes
     * checked (wall) */
    double t_source_crc, t_identity, t_verify, t_reuse_check;
    size_t n_reused; /* tensors copied from --reuse PREV */
    uint64_t reused_bytes;
    uint64_t weights, file_bytes;
    int n_promoted;
    int threads;
    char mix_name[96];
    char backend[160];
    /* --backend auto in a CUDA build that found no usable GPU: why, in a
     * short phrase (the run used the CPU); empty otherwise. A figure of the
     * run for the program to show with the plan, not a note: it is no error. */
    char no_gpu_why[256];
} pn_quantize_stats;

/* Everything a program needs to print the plan, the totals and the report:
 * handed to the result hook. Pointers live until the hook returns. */
typedef struct pn_quantize_result {
    const pn_plan *plan; /* types, shapes, source types, promotions */
    const char *src_path, *dst_path;
    const char *mix_label; /* "P0k+19" */
    uint64_t header_bytes, file_bytes, weights, alignment;
    bool dry_run;
    const double *rel_error; /* per tensor: sum (w-dq)^2 / sum w^2; NULL on a dry run */
    const double *seconds;   /* per tensor, compute stage; NULL on a dry run */
    const uint32_t *crc32;   /* per tensor; NULL on a dry run */
    const pn_quantize_stats *stats;
    /* The files: one (n_splits 1, DST itself) or a split set. file_bytes
     * above is the sum of their sizes. With split_index >= 0 only that split
     * is written, and the figures of the other splits' tensors (rel_error,
     * seconds, crc32) are 0. */
    size_t n_splits;
    const char *const *split_paths; /* targets; NULL entries on a dry run without DST */
    const size_t *split_first;      /* n_splits + 1: split s holds [first[s], first[s + 1]) */
    const uint64_t *split_bytes;    /* each file's size, header included */
    long split_index;               /* -1: every split */
    /* --reuse: per tensor, copied from PREV (its relative error and seconds
     * are then not computed: NaN and 0), and when not copied why not (a
     * short phrase); NULL without --reuse. On a dry run they say what
     * would be copied before PREV's bytes are checked. */
    const char *reuse_path;
    const bool *reused;
    const char *const *reuse_why;
    const char *reuse_none_why; /* why nothing is reused, or NULL */
    /* --imatrix: the file read (pn_imatrix_find says which tensors have an
     * entry); NULL without --imatrix */
    const pn_imatrix *imatrix;
    bool imatrix_promotion; /* the promotion measurement was weighted by it */
} pn_quantize_result;

/* Called once the figures are final: for a real run after the written file
 * was validated and before it is committed onto DST (so that whatever the
 * hook prepares, e.g. a report under a temporary name, is ready before the
 * output appears); for a dry run once the plan is made. A status other than
 * PN_OK aborts the job (nothing is committed) with the hook's error. */
typedef pn_status (*pn_result_fn)(const pn_quantize_result *r, void *user, pn_error *err);

typedef struct pn_quantize_opts {
    const char *src_path; /* a GGUF, or a Hugging Face folder (io/source_open.h) */
    /* The source's MTP layer (a folder's, or a GGUF's blk.L.* with nextn.*):
     * dropped with no_mtp (the converter's --no-mtp), kept with keep_mtp,
     * else as the recipe's 'mtp keep|drop' says (kept when it says
     * nothing); both set is PN_ERR_USAGE. */
    bool no_mtp;
    bool keep_mtp;
    const char *tokenizer_pre; /* a folder: tokenizer.ggml.pre for an unknown pattern */
    const char *dst_path;
    const char *recipe_path; /* NULL: the built-in P0k+19 recipe */
    /* --tensor-type, --output-tensor-type, --token-embedding-type: rules
     * before the recipe's (mix/recipe.h), recorded in pn.mix.overrides */
    const pn_recipe_override *overrides;
    size_t n_overrides;
    int promote;                   /* -1: the recipe's `promote` */
    const char *promote_list_path; /* NULL or a file of tensor names */
    const char *measurement_path;  /* NULL or a file to read/write */
    /* A measurement made elsewhere (the KL measurement of compare/kl_measure.h,
     * its entries' gains ordering the promotions): used as it is, instead of
     * measurement_path or measuring; NULL: none. */
    const struct pn_measurement *measurement;
    /* --measure forward: the error measurement's candidates ordered by
     * mix/promote_score.h (the forward position first, E3 - E4 within one
     * position) instead of E3 - E4 alone */
    bool forward_order;
    uint64_t target_size; /* 0: none */
    int rotation_cap;     /* -1: the recipe's; 0: none; else cap */
    int threads;          /* 0: all cores (pn_threads_resolve) */
    pn_backend backend;
    int device;
    bool cuda_emulate;     /* the CUDA backend's host emulator (tests) */
    int cpu_path;          /* PN_PATH_* (quant/pn_fast.h); -1: the best available */
    int64_t chunk_weights; /* 0: PN_CHUNK_WEIGHTS_DEFAULT */
    bool dry_run;
    bool force;
    uint64_t measure_rows; /* rows sampled per tensor; 0: default */
    /* A split output (docs/split.md), gguf-split's rules and names: DST
     * NAME.gguf becomes NAME-00001-of-0000N.gguf ... beside it. */
    gguf_split_limit split; /* --split-max-size / --split-max-tensors; NONE: one file */
    bool keep_split;        /* --keep-split: the source's splits */
    long split_index;       /* --split-index: write only this split (from 0); -1: all */
    const char *reuse_path; /* --reuse PREV: copy what PREV holds; NULL: none */
    bool reuse_verify;      /* --reuse-verify: the whole source tensor must match too */
    /* --imatrix FILE: llama.cpp's importance matrix (mix/imatrix.h, either
     * form). The q3_K/q4_K tensors with an entry are searched for the least
     * weighted error, and the output records it (quantize.imatrix.*,
     * pn.mix.imatrix.*). NULL: none. */
    const char *imatrix_path;
    /* --imatrix-promotion weighted: the promotion measurement is weighted by
     * the imatrix too, through the rotation (mix/measurement.h). false (the
     * default): it is the unweighted E3 - E4 of docs/format.md#promotion, so
     * an imatrix never changes which tensors are promoted (measured: the
     * weighted choice is farther from the source, docs/usage.md#imatrix). */
    bool imatrix_promotion;
    /* --imatrix-missing unweighted: with imatrix_promotion, a candidate
     * without an entry is measured unweighted; false: such a candidate is an
     * error naming it. */
    bool imatrix_missing_unweighted;
    /* NULL: the tests' settings (pipeline/quantize_testing.h) */
    const struct pn_quantize_testing *testing;
    pn_progress_fn progress;
    pn_note_fn note;
    pn_result_fn result; /* may be NULL */
    void *user;
    volatile sig_atomic_t *cancel; /* checked between chunks and in every long loop */
} pn_quantize_opts;

/* Defaults: promote -1, rotation_cap -1, cpu_path -1, split_index -1, the
 * rest 0. */
void pn_quantize_opts_init(pn_quantize_opts *o);

pn_status pn_quantize_file(const pn_quantize_opts *o, pn_quantize_stats *stats, pn_error *err);

/* The recipe compiled into the binary (recipes/qwen3.8-27b-pn3.mix). */
extern const char pn_default_recipe_text[];
extern const char pn_default_recipe_name[];

#endif
