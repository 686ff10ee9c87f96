/* source_id.h - who a source is: the identity pn-quantize records in every
 * output (the pn.source.* keys) and checks before it uses a saved
 * measurement (pipeline/measure_job.h) or copies an earlier output's tensors
 * (pipeline/reuse.h); pn-check --source compares it with a source.
 *
 * The parts (docs/reuse.md):
 *   header hash    FNV-1a 64 (offset basis 0xcbf29ce484222325, prime
 *                  0x100000001b3) of the model the header describes: its
 *                  keys but split.*, its tensors' names, shapes and types,
 *                  in order (pn_source_header_hash); not its layout, so a
 *                  split set and the same model unsplit are one source;
 *   sampled rows   per tensor, the CRC-32 (zlib's crc32) of the bytes of
 *                  rows floor(i * R / M), i = 0..M-1, of its R rows (every
 *                  row when R <= M), concatenated in row order. Outputs use
 *                  M = PN_SOURCE_SAMPLE_ROWS; a measurement uses its own M
 *                  (--measure-rows), the rows it measured;
 *   whole tensor   per tensor, the CRC-32 of all its bytes;
 *   source type    per tensor, the ggml type id of its source data.
 *
 * Everything here reads with pread (gguf_reader_read_tensor), in file
 * order, and computes figures that depend only on the bytes: never on the
 * thread count.
 */
#ifndef PN_PIPELINE_SOURCE_ID_H
#define PN_PIPELINE_SOURCE_ID_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/hash.h"
#include "common/pn_error.h"
#include "gguf/gguf.h"
#include "gguf/pn_keys.h"

/* Rows of the sampled-rows identity an output records. */
#define PN_SOURCE_SAMPLE_ROWS 256

/* The keys, PN_KEY_SOURCE_*, are named in gguf/pn_keys.h
 * (docs/reuse.md#the-keys). */

/* pn_fnv1a64, FNV-1a 64 of the header hash, is in common/hash.h. */

/* The header hash of the model r reads (source_id.c: its keys but the
 * split.* keys and the header hash's record, pn.header.*; its tensors'
 * names, shapes and types; not the layout, so a split set and the same
 * model unsplit hash alike, and a file with or without the record). Never
 * fails today. */
pn_status pn_source_header_hash(const gguf_reader *r, uint64_t *out, pn_error *err);


/* The same for one piece alone: the CRC-32 from 0 of the bytes of the
 * sampled rows among elements [elem_at, elem_at + n_elems), and in *len
 * their number. Pieces joined in element order with pn_crc32_combine give
 * pn_sample_crc_update's CRC of the whole tensor, however they are cut. */
uint32_t pn_sample_crc_piece(int64_t n_rows, int64_t M, int64_t K, int64_t elem_bytes,
                             int64_t elem_at, const uint8_t *bytes, int64_t n_elems, uint64_t *len);

/* The CRC-32 of tensors idx[0..n) of r into crcs[0..n): of their sampled
 * rows (sample_rows = M > 0) or of all their bytes (sample_rows = 0).
 * Reads in parallel (threads >= 1) but in file order: whole tensors in
 * pieces of a few MiB combined in order, sampled rows one tensor per
 * thread with read-ahead advice for its rows. An error names the file and
 * the tensor (the first in idx order that failed). */
pn_status pn_tensor_crcs(const gguf_reader *r, const size_t *idx, size_t n, int64_t sample_rows,
                         int threads, volatile sig_atomic_t *cancel, uint32_t *crcs, pn_error *err);

/* This run's source identity, filled as it becomes known. */
typedef struct pn_source_id {
    uint64_t header_hash;
    size_t n;             /* tensors */
    uint32_t *sample_crc; /* per tensor (PN_SOURCE_SAMPLE_ROWS rule) */
    uint32_t *tensor_crc; /* per tensor */
    bool samples_known;   /* sample_crc holds every tensor's */
} pn_source_id;

/* The header hash and zeroed arrays for r's tensors. */
pn_status pn_source_id_init(pn_source_id *id, const gguf_reader *r, pn_error *err);
void pn_source_id_free(pn_source_id *id);
/* Reads the sampled rows of every tensor (samples_known afterwards). */
pn_status pn_source_id_read_samples(pn_source_id *id, const gguf_reader *r, int threads,
                                    volatile sig_atomic_t *cancel, pn_error *err);

/* The identity a PN file records. */
typedef struct pn_recorded_source {
    bool present; /* some pn.source.* key is there */
    uint64_t header_hash;
    int64_t sample_rows;
    /* n_tensors values each, in tensor order (owned; pn_recorded_source_free).
     * A split set records each split's own cut of these arrays, as it does
     * pn.tensor_crc32; they are read from every split and joined. */
    uint32_t *sample_crc, *tensor_crc, *type;
} pn_recorded_source;

/* Reads the pn.source.* keys of r. PN_OK with present == false when the
 * file has none (made before they existed, or by another tool); PN_OK with
 * everything set when all are there and well-formed; PN_ERR_FORMAT naming
 * the key when one is absent, of another type or of another length. */
pn_status pn_recorded_source_read(const gguf_reader *r, pn_recorded_source *out, pn_error *err);

void pn_recorded_source_free(pn_recorded_source *rec);

#endif
