/* check.h - checking a GGUF file that may hold PN tensors (pn-check).
 *
 * pn_check_file reads a file once and returns a report: a list of findings,
 * each with a severity and a stable code, and figures per tensor. It never
 * prints; cmd/pn-check.c formats the report (text or JSON).
 *
 * What is checked (docs/format.md#what-a-checker-checks; docs/usage.md lists every code):
 *   GGUF-*   structure: what the GGUF reader refuses, and where tensor data
 *            lies (aligned, inside the file, not overlapping); a shape of
 *            more than 2^63 - 1 weights;
 *   ARCH-*   a qwen35 file's keys against its tensors, as llama.cpp's loader
 *            reads them; TOKENIZER-* its vocabulary (gguf/model_check.h,
 *            check_model.c);
 *   TENSOR-* values that are not finite in any other tensor: f32/f16/bf16
 *            weights, the fp16 scales of q8_0/q4_K/q3_K blocks;
 *   PN-*     PN rows (scale finite, pn3t reserved bits clear), the pn.* keys
 *            (present, typed, consistent with the tensors), CRC-32 per tensor;
 *   RECIPE-* with a recipe: each tensor's type, the promotions, the mix name,
 *            the overrides the file records against those given
 *            (RECIPE-OVERRIDES),
 *            the MTP layer kept where the recipe drops it (RECIPE-MTP);
 *   SRC-*    with the source float GGUF: the relative error of each tensor
 *            after decoding (and un-rotating PN tensors) against the source,
 *            compared with what the type gives on that data.
 *   IMATRIX-* with --imatrix: the imatrix the file records, and with
 *            --source whether the promotions follow it (check_imatrix.c);
 *   SPLIT-*  a split set (docs/split.md) that does not open as one model: a
 *            finding per bad split, naming its file (missing, unreadable,
 *            another set's), or about the set as a whole.
 * Errors break the format or GGUF; warnings are departures from this
 * project's conventions that another tool may legitimately make.
 *
 * Split sets: a file of a set is checked as the whole set (gguf_reader_open
 * reads it from any of its files). Where tensor data lies is checked file
 * by file (each split has its own header, data section and size), each
 * split's pn.tensor_crc32 against its own tensors, the other pn.* keys in
 * the first split (the set's metadata). Every finding names its file
 * (pn_finding.file): the split holding its tensor, or the first split for
 * keys; byte offsets are in that file. A set that does not open is judged
 * invalid with its SPLIT-* findings, its tensors unchecked.
 *
 * Ownership: the report and everything it points to belong to the caller and
 * are released with pn_check_report_free. Codes are static strings.
 *
 * Threads: the data pass runs over chunks of rows with OpenMP; every figure in
 * the report (CRCs, counts, first locations, error sums) is the same for any
 * thread count because chunks are fixed by the data, not by the threads, and
 * are combined in file order.
 *
 * Bounds: work is O(n log n) in the tensors and linear in the keys and in
 * pn.mix.promoted; the data pass reads each byte of the file at most once
 * (a tensor whose bytes overlap an earlier one's is reported, not read), and
 * its memory is a few segments per thread whatever the row length.
 */
#ifndef PN_PIPELINE_CHECK_H
#define PN_PIPELINE_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "mix/recipe.h"

typedef enum pn_severity {
    PN_SEV_WARNING = 1,
    PN_SEV_ERROR = 2,
} pn_severity;

const char *pn_severity_name(pn_severity s); /* "warning" / "error" */

typedef struct pn_finding {
    pn_severity severity;
    const char *code; /* stable code, e.g. "PN-RESERVED-BITS" (static) */
    char *tensor;     /* tensor concerned, or NULL */
    char *key;        /* metadata key concerned, or NULL */
    int64_t offset;   /* file byte offset concerned, or -1 */
    int64_t row;      /* first bad row (tensor row index), or -1 */
    int64_t block;    /* first bad block within that row, or -1 */
    int64_t count;    /* how many things are bad (blocks...), or -1 */
    int64_t index;    /* the array element or block concerned, or -1 */
    char *message;    /* one line, no trailing newline */
    char *file;       /* the file concerned (a split of a set), or NULL */
} pn_finding;

/* What the check learned about one tensor (in tensor-info order). */
typedef struct pn_check_tensor {
    char *name;
    int type; /* ggml type id */
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t file_offset; /* absolute byte offset of the data, in its split's file */
    uint32_t split;       /* the split holding it (0 for one file) */
    uint64_t bytes;
    bool in_file;          /* all bytes lie inside the file */
    bool overlaps;         /* its bytes overlap an earlier tensor's: data not checked */
    bool too_many_weights; /* more than 2^63 - 1 weights: data not checked */
    bool crc_computed;
    uint32_t crc32; /* zlib CRC-32 of the data bytes (when computed) */
    bool crc_recorded;
    uint32_t crc32_recorded; /* pn.tensor_crc32 entry (when recorded) */
    int64_t bad_blocks;      /* PN tensors: blocks failing validation */
    int rotation_block;      /* PN tensors: rotation block B undone; 0 = none */
    /* --source (compared == false when not compared; `note` says why) */
    bool compared;
    double rel_error;      /* E = sum (w - dq)^2 / sum w^2 over the tensor */
    double expected_error; /* PN: E_ref on the sample; other types: NaN */
    double limit;          /* the error above which the tensor is flagged */
    char *note;            /* why not compared, or NULL */
} pn_check_tensor;

/* One file of what was checked: the file itself, or each split of a set. */
typedef struct pn_check_split {
    char *path;
    bool present; /* opened (a set that does not open: found and readable) */
    uint64_t file_size;
    size_t first_tensor, n_tensors; /* its tensors in the report (0, 0 when not read) */
} pn_check_split;

typedef struct pn_check_report {
    char *path;
    bool readable; /* false: not read (not GGUF, cut in its header...) */
    pn_finding *findings;
    size_t n_findings;
    size_t n_errors, n_warnings;
    pn_check_tensor *tensors;
    size_t n_tensors;
    uint64_t file_size;     /* of a set: all its splits' */
    uint64_t data_bytes;    /* tensor bytes read in the data pass */
    pn_check_split *splits; /* the files: 1 for a plain file, every split of a set */
    size_t n_splits;
    bool set_unopened; /* a split set that does not open: its tensors are not checked */
    double seconds;    /* wall time of the check */
    /* --recipe */
    bool recipe_checked;
    char *recipe_mix;   /* the recipe's mix name */
    char *expected_mix; /* "<recipe mix>+<promotions>" */
    char **promoted;    /* tensors whose type is the recipe's promotion */
    size_t n_promoted;
    long recipe_promote_n; /* the recipe's promotion count, -1 if none */
    /* --source */
    char *source_path;
    /* --imatrix (check_imatrix.c): checked, the file records FILE's hash,
     * that hash, and with --source whether the promotions follow it */
    bool imatrix_checked, imatrix_same;
    uint64_t imatrix_hash;
    bool imatrix_promotions_checked, imatrix_promotions_follow;
    /* the header hash (gguf/header_hash.h): "proven" (every key is the one
     * the file's record holds), "unproven" (no record: a file of another
     * tool or an older build, its keys checked against its tensors alone;
     * not a finding), "mismatch" (PN-HEADER-HASH-MISMATCH); NULL when the
     * keys were not read. header_note: a line that says so (owned). */
    const char *header_proof;
    char *header_note;
} pn_check_report;

typedef struct pn_check_options {
    const char *recipe_path; /* NULL: no recipe conformance */
    bool keep_mtp;           /* --keep-mtp: the recipe's 'mtp drop' taken as keep */
    /* --tensor-type, --output-tensor-type, --token-embedding-type as the
     * file was made with: before the recipe's rules (mix/recipe.h) */
    const pn_recipe_override *overrides;
    size_t n_overrides;
    const char *source_path;  /* NULL: no source comparison; read without its MTP
                               * layer when the file holds none, with it when the
                               * file holds it (check_source.c) */
    const char *imatrix_path; /* NULL: no imatrix check (IMATRIX-*, check_imatrix.c) */
    int threads;              /* <= 0: all cores (pn_threads_resolve) */
    /* A PN tensor is flagged when E > factor * E_ref + floor, E_ref being the
     * error of the reference quantizer on sample rows of the source. */
    double source_factor; /* default 4 */
    double source_floor;  /* default 1e-4 */
    double stock_limit;   /* other types: flagged when E > this; default 0.5 */
    int sample_rows;      /* source rows re-quantized per PN tensor; default 16 */
    int max_locations;    /* bad blocks located per finding; default 5 */
    size_t chunk_bytes;   /* data-pass work unit; default 8 MiB */
    /* Progress of the data pass, or NULL: called with done = 0 before the
     * first byte is read (from the calling thread), then after each work item
     * with the data bytes checked so far, from whichever thread finished it
     * but never two calls at once, done never decreasing, up to total. */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
} pn_check_options;

void pn_check_options_default(pn_check_options *o);

/* Checks the file. Returns PN_OK with *out set whenever the file itself was
 * examined, including when it is invalid or unreadable (report->readable is
 * then false and a finding says why). Returns an error (and *out NULL) only
 * for what is not a finding about the file: out of memory, an unreadable
 * recipe or source file, a source that is not a float model (PN_ERR_USAGE:
 * one of its tensors is not f32, f16 or bf16), bad options, and a file or
 * source that changed or shrank while it was read (PN_ERR_TRUNCATED, naming
 * it). */
pn_status pn_check_file(const char *path, const pn_check_options *opt, pn_check_report **out,
                        pn_error *err);

void pn_check_report_free(pn_check_report *r);

/* 0 valid, 1 invalid (errors, or warnings under strict) or not readable
 * (the verdict says which); 2 is left to the command line (cmd/cli.h). */
int pn_check_exit_code(const pn_check_report *r, bool strict);

#endif
