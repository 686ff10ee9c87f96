/* dequant.h - pn-dequant: a PN GGUF back to a stock float GGUF.
 *
 * Every tensor that is not f32 is decoded and written as the output float
 * type (f32 by default, f16 or bf16 on request): pn3t/pn4t with the Hadamard
 * rotation undone (unless keep_rotation), q8_0/q4_K/q3_K and f16/bf16 via the
 * stock decoders. f32 tensors (norms) are copied byte for byte. Names, shapes
 * and tensor order are the input's, so stock llama.cpp tools load the result.
 *
 * Metadata: every key is copied, except
 *   - pn.X is written as pn_decoded.X (the weights are no longer PN),
 *     and pn_decoded.rotation_undone (bool) says whether the rotation was
 *     undone;
 *   - general.quantization_version is removed (nothing is quantized);
 *   - general.file_type is set (u32) to llama.cpp's id of the float type:
 *     ALL_F32 = 0, MOSTLY_F16 = 1, MOSTLY_BF16 = 32.
 * The rotation comes from pn.rotation.type ("hadamard" or "none"; absent
 * means none) and pn.rotation.block_size (the cap, default 1024): each PN
 * tensor's block is the largest power of two dividing K, at most the cap.
 *
 * Values: a NaN or infinite input value is refused whatever the output type:
 * a weight of an f32/f16/bf16 tensor (named by tensor, row and column), an
 * fp16 scale of a q8_0/q4_K/q3_K/PN block (tensor, row, block and field).
 *
 * Writing: streamed through the GGUF writer into a temporary file beside OUT,
 * in chunks decoded in parallel, one segment (quant/segments.h; whole
 * blocks) per step, so memory stays near 3 x chunk_bytes plus a segment per
 * thread whatever the row length; re-opened and checked, then renamed onto
 * OUT. An existing OUT is refused unless force; OUT may not be IN. On any
 * error or cancellation nothing is left at OUT and the input is untouched.
 * Output bytes do not depend on the thread count. Work is linear in the
 * tensors: a chunk of one segment is decoded without starting threads.
 *
 * Split sets (docs/split.md): IN may be any file of a split set, read as one
 * model (its split keys are not copied; pn.tensor_crc32, which each split
 * records for its own tensors, becomes pn_decoded.tensor_crc32 for all of
 * them, as from the unsplit file). With a split limit or keep_split, OUT is
 * written as a set by gguf-split's rules and names (NAME-00001-of-0000N.gguf
 * beside OUT), every split validated, the first one put in place last.
 */
#ifndef PN_PIPELINE_DEQUANT_H
#define PN_PIPELINE_DEQUANT_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "gguf/gguf_split.h"

/* llama.cpp's general.file_type ids for all-float models. */
enum {
    PN_FTYPE_ALL_F32 = 0,
    PN_FTYPE_MOSTLY_F16 = 1,
    PN_FTYPE_MOSTLY_BF16 = 32,
};

typedef struct pn_dequant_opts {
    int out_type;                  /* PN_TYPE_F32 (default), PN_TYPE_F16 or PN_TYPE_BF16 */
    bool keep_rotation;            /* leave PN tensors in the rotated domain */
    bool force;                    /* replace an existing OUT */
    gguf_split_limit split;        /* {GGUF_SPLIT_NONE}: one file */
    bool keep_split;               /* split OUT the way IN is split */
    int threads;                   /* <= 0: all cores (pn_threads_resolve) */
    size_t chunk_bytes;            /* output bytes per step; 0: 64 MiB */
    volatile sig_atomic_t *cancel; /* checked between chunks; may be NULL */
    /* Progress, or NULL: called from the calling thread with done = 0 before
     * the first tensor byte is read, then after each chunk written, with the
     * tensor data bytes written so far out of total (stats.bytes_out). */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
} pn_dequant_opts;

void pn_dequant_opts_init(pn_dequant_opts *o);

typedef struct pn_dequant_stats {
    size_t n_tensors;
    size_t n_pn;                  /* PN tensors decoded */
    size_t n_stock;               /* other non-f32 tensors decoded */
    size_t n_copied;              /* f32 tensors copied */
    bool rotation_undone;         /* at least one PN tensor was un-rotated */
    bool rotation_key_missing;    /* PN tensors but no pn.rotation.type: taken as none */
    int rotation_cap;             /* the cap used (0: no rotation) */
    uint64_t bytes_in, bytes_out; /* tensor data bytes */
    size_t n_files;               /* 1, or the splits of a split output */
    uint64_t file_bytes;          /* the size of every file written */
    double seconds;
} pn_dequant_stats;

/* Decodes in_path into out_path. Errors: PN_ERR_EXISTS (OUT exists, no
 * force), PN_ERR_USAGE (bad options, OUT is IN), the reader's errors for IN
 * (PN_ERR_TRUNCATED when it changed or shrank during the run),
 * PN_ERR_TYPE (a tensor type this build cannot decode, named), PN_ERR_TENSOR
 * (a shape of more than 2^63 - 1 weights), PN_ERR_FORMAT (unusable
 * pn.rotation keys, a malformed pn.tensor_crc32, a header or tokenizer
 * that pn-check calls invalid: gguf_model_check_first), PN_ERR_CRC (a tensor whose
 * bytes do not give its pn.tensor_crc32 entry, named: checked for every
 * tensor when the file has the key), PN_ERR_NONFINITE, PN_ERR_RESERVED_BITS,
 * PN_ERR_INTERRUPTED, the writer's errors. */
pn_status pn_dequant_file(const char *in_path, const char *out_path, const pn_dequant_opts *opts,
                          pn_dequant_stats *stats, pn_error *err);

#endif
