/* imatrix.h - llama.cpp's importance matrix: per input column of a weight,
 * the mean square of the activations the model fed it.
 *
 * Two forms, told apart by content (a file that starts with the GGUF magic
 * is the GGUF form, anything else the legacy form):
 *   GGUF: general.type = "imatrix", imatrix.datasets (array of strings),
 *     imatrix.chunk_count and imatrix.chunk_size (u32), all four required;
 *     for each weight W two F32 tensors, W.in_sum2 (ne [K] or [K, n_mat]:
 *     the sum of x_j^2 over the tokens seen) and W.counts (ne [1] or
 *     [1, n_mat]: the token count, read rounded to the nearest integer).
 *     Weight of column j of matrix m: in_sum2[m][j] / (float)count[m] in
 *     float, 1 where the count is 0.
 *   legacy .dat (little-endian): int32 n_entries >= 1; per entry int32 name
 *     length, the name bytes (no NUL), int32 ncall, int32 nval >= 1, nval
 *     float32 values (the mean square times ncall); then optionally a
 *     trailer, int32 chunk count, int32 dataset length, the dataset bytes,
 *     which must end the file. Weight: value / (float)ncall in float, the
 *     value itself where ncall is 0 (llama-quantize's rule). A .dat entry
 *     is one matrix: n_mat = 1 (llama.cpp's legacy writer stores an MoE
 *     weight's experts one after the other; K is then nval / n_expert,
 *     known only against the model: pn_imatrix_check_model).
 * These are the rules of llama.cpp v0.5.0's loader (common/imatrix-loader,
 * tools/quantize); from one run the two forms give the same weights bit for
 * bit (value = (in_sum2 / count) * ncall, and ncall a power of two there).
 *
 * Hostile files: every count and length is checked against the bytes left
 * before anything is allocated from it, so time and memory are linear in
 * the file. Refused, naming the file and the entry (PN_ERR_TRUNCATED,
 * PN_ERR_FORMAT, PN_ERR_NONFINITE): a file that ends inside anything it
 * declares, bytes after the last structure, an empty name, a name holding
 * a control byte (a terminal escape) or over PN_IMATRIX_NAME_MAX bytes,
 * two entries of one name, a negative ncall, a non-finite or negative sum,
 * count or value, a GGUF file that is not an imatrix (general.type missing
 * or another), a GGUF imatrix missing a key, a W.in_sum2 without W.counts
 * or the reverse, a tensor of another name or type than F32, shapes that
 * do not agree. Names in messages go through common/text.h.
 *
 * Ownership: a pn_imatrix owns its strings and weights; pn_imatrix_free.
 */
#ifndef PN_MIX_IMATRIX_H
#define PN_MIX_IMATRIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "gguf/pn_keys.h"
#include "mix/plan.h"

#define PN_IMATRIX_NAME_MAX 1024                    /* bytes of an entry name */
#define PN_IMATRIX_MAX_FILE_BYTES ((size_t)4 << 30) /* 4 GiB */

/* The keys an output made with an imatrix carries (llama-quantize's
 * quantize.imatrix.* and the project's pn.mix.imatrix.*) are named in
 * gguf/pn_keys.h. */

typedef enum pn_imatrix_form { PN_IMATRIX_GGUF = 1, PN_IMATRIX_DAT = 2 } pn_imatrix_form;

typedef struct pn_imatrix_entry {
    char *name;     /* the weight's GGUF name, NUL-terminated */
    int64_t n_vals; /* values: K * n_mat */
    int64_t n_mat;  /* matrices (experts); 1 for a dense weight and every .dat entry */
    int64_t count;  /* GGUF: the first matrix's token count; .dat: ncall */
    float *weights; /* n_vals per-column weights, matrix after matrix */
} pn_imatrix_entry;

typedef struct pn_imatrix {
    pn_imatrix_form form;
    char *dataset; /* the first dataset name, or "" when there is none */
    size_t n_datasets;
    int64_t chunk_count; /* GGUF key or .dat trailer; 0 when absent */
    int64_t chunk_size;  /* GGUF key; 0 for .dat */
    size_t n;
    pn_imatrix_entry *entries; /* sorted by name, byte order */
} pn_imatrix;

/* Reads a file (a regular file of at most PN_IMATRIX_MAX_FILE_BYTES). */
pn_status pn_imatrix_load(const char *path, pn_imatrix **out, pn_error *err);
/* The same on bytes in memory; name is used in messages. */
pn_status pn_imatrix_parse(const void *data, size_t len, const char *name, pn_imatrix **out,
                           pn_error *err);
void pn_imatrix_free(pn_imatrix *im);

/* The entry of that name, or NULL (binary search). */
const pn_imatrix_entry *pn_imatrix_find(const pn_imatrix *im, const char *name);

/* The imatrix checked against a model's tensors (the plan's names, i.e. the
 * GGUF names, also for a converted folder). An entry whose name is a tensor
 * must fit it: K = ne[0] and n_mat = ne[2] for a 3-D weight (a .dat entry:
 * nval = ne[0] * ne[2]), n_mat 1 for a 2-D one; else PN_ERR_MISMATCH naming
 * the file, the entry, and both shapes. No entry naming any tensor of the
 * plan is PN_ERR_MISMATCH ("made for another model"). *n_unknown receives
 * how many entries name no tensor, and unknown (may be NULL; caller frees)
 * their names, one per line, made printable. path names the file in
 * messages. */
pn_status pn_imatrix_check_model(const pn_imatrix *im, const char *path, const pn_plan *plan,
                                 size_t *n_unknown, char **unknown, pn_error *err);

/* The per-column weights for plan tensor t, or NULL when the imatrix has no
 * entry for it (a 3-D weight's matrices follow one another). */
const float *pn_imatrix_weights_for(const pn_imatrix *im, const char *name);

/* The hash of the entries used: FNV-1a 64 over the entries that name a
 * tensor of the plan, in the imatrix's name order, each as its name bytes,
 * one 0 byte, n_vals as u64 little-endian, then its weights'
 * float32 bits little-endian. *n_used (may be NULL) receives their number.
 * Two files that give every tensor of the model the same weights hash
 * alike whatever their form. */
uint64_t pn_imatrix_hash_used(const pn_imatrix *im, const pn_plan *plan, size_t *n_used);

/* The same over a list of tensor names (a checked file's), whatever their
 * plan. */
uint64_t pn_imatrix_hash_names(const pn_imatrix *im, const char *const *names, size_t n_names,
                               size_t *n_used);

/* The base name of a path (the part after the last '/'), as
 * quantize.imatrix.file records it. */
const char *pn_imatrix_base_name(const char *path);

#endif
