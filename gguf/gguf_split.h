/* gguf_split.h - a model written as several GGUF files, the way llama.cpp's
 * gguf-split and llama-quantize --keep-split write it (docs/split.md).
 *
 * Reading a set is gguf_reader_open's (gguf/gguf.h); this header has the
 * pieces for writing one and the rules both sides share:
 *
 *   - Names: split i (from 0) of n of the output DST is PREFIX-%05d-of-
 *     %05d.gguf with i + 1 and n, PREFIX being DST without a final ".gguf"
 *     (DST itself when it has none, as gguf-split takes its output name).
 *   - Keys: every split of a set of n >= 2 ends with split.no (uint16, its
 *     index from 0), split.count (uint16, n) and split.tensors.count (int32,
 *     the tensors of the whole set), in that order, as llama-quantize writes
 *     them. The first split holds every other key of the model. The others
 *     hold only general.alignment (when the model's alignment is not the
 *     default 32, so that each file reads alone) and the per-tensor arrays
 *     the caller names (pn.tensor_crc32: each split records the CRCs of its
 *     own tensors), before the split keys. A set of one is a plain file:
 *     no split keys at all.
 *   - The plan: which tensors go to which split, in order, from a limit
 *     (gguf_split_plan_make). The same inputs always give the same plan.
 *   - Commit: gguf_writer_commit_set (gguf/gguf.h) puts the first split in
 *     place last, so an interrupted run never leaves a loadable partial set.
 *
 * No printing, no global state.
 */
#ifndef PN_GGUF_SPLIT_H
#define PN_GGUF_SPLIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "gguf/gguf.h"
#include "gguf/pn_keys.h"

#define GGUF_SPLIT_KEY_NO "split.no"
#define GGUF_SPLIT_KEY_COUNT "split.count"
#define GGUF_SPLIT_KEY_TENSORS_COUNT "split.tensors.count"
/* The identity of a split set (ours; llama.cpp ignores it), a uint64 in
 * every split of a set of two or more that gguf_writer_new_split makes:
 * FNV-1a 64 of what the set is, so that two runs that would write other
 * files have other identities: every key of the model but the split keys,
 * this key and the per-tensor keys (their values are data, known only as it
 * is written), every tensor's name, shape and type, in order, and the plan
 * (the number of splits, where each starts). The same options and source
 * give the same identity in every process (--split-index). The reader
 * refuses a set whose splits disagree (gguf_split_check_set_ids). */
#define GGUF_SPLIT_KEY_SET_ID PN_KEY_SPLIT_SET_ID
/* split.count is a uint16; split.tensors.count an int32. */
#define GGUF_SPLIT_MAX_COUNT 65535u
#define GGUF_SPLIT_MAX_SET_TENSORS 2147483647ull

/* ---- names ---- */

/* The path of split `index` (from 0) of `count` for the output `dst`:
 * "dir/NAME.gguf" gives "dir/NAME-00001-of-00003.gguf" for index 0 of 3;
 * "out" gives "out-00001-of-00003.gguf". Malloc'd; NULL when index >= count,
 * count is 0 or above GGUF_SPLIT_MAX_COUNT, dst is empty, or out of memory. */
char *gguf_split_path(const char *dst, uint32_t index, uint32_t count);
/* The same from a prefix, as llama.cpp's llama_split_path: PREFIX-%05d-of-
 * %05d.gguf, the prefix taken as it is. */
char *gguf_split_path_of_prefix(const char *prefix, uint32_t index, uint32_t count);
/* The prefix of `path` when its name is that of split `index` of `count`
 * (it ends in "-%05d-of-%05d.gguf" with index + 1 and count, after at
 * least one byte), as llama.cpp's llama_split_prefix; malloc'd. NULL when
 * it is not (or out of memory, or bad arguments as above). */
char *gguf_split_prefix(const char *path, uint32_t index, uint32_t count);

/* The first splits of the sets an output named dst was written as, when dst
 * itself is not a file: every "NAME-00001-of-NNNNN.gguf" beside it, NAME
 * dst's name without ".gguf" (the names gguf_split_path gives), in name
 * order; malloc'd paths in a malloc'd array (*n 0 and NULL when there are
 * none or dst's folder cannot be read). PN_ERR_NOMEM only. */
pn_status gguf_split_find_sets(const char *dst, char ***firsts, size_t *n, pn_error *err);

/* ---- the split keys of a file ---- */

/* The set identity of one file (GGUF_SPLIT_KEY_SET_ID): *has false when it
 * has none; PN_ERR_FORMAT, naming the file and the key's byte offset, when
 * the key is not a uint64. */
pn_status gguf_split_read_set_id(const gguf_reader *one_file, bool *has, uint64_t *id,
                                 pn_error *err);
/* The splits of one set (splits[s] is split s, a reader of that file alone;
 * a NULL entry is skipped) must come from one run: the identity most of them
 * have (on a tie, the first split's) is the set's, and the first split that
 * differs is refused (PN_ERR_FORMAT, the message starting with its path,
 * *odd its index when odd is not NULL). A set where no split has an identity
 * (gguf-split's, an older pn-quantize's) passes, and so does one where only
 * the first split has one (gguf-split copies the first file's keys, an
 * identity of an earlier set included, to the first split only). */
pn_status gguf_split_check_set_ids(const gguf_reader *const *splits, size_t n, size_t *odd,
                                   pn_error *err);

typedef struct gguf_split_keys {
    bool has_no, has_count, has_tensors_count;
    uint16_t no;           /* split.no: this file's index in its set, from 0 */
    uint16_t count;        /* split.count */
    int32_t tensors_count; /* split.tensors.count: the set's tensors */
} gguf_split_keys;

/* Reads a file's split keys (a set's reader: its first split's). A present
 * key of another type than llama.cpp writes is PN_ERR_FORMAT, naming the
 * file, the key's byte offset, its type and the expected one. */
pn_status gguf_split_read_keys(const gguf_reader *r, gguf_split_keys *keys, pn_error *err);
/* True when the keys make the file one split of a set of two or more. */
bool gguf_split_keys_in_set(const gguf_split_keys *keys);

/* The checks gguf_reader_open makes of a set, one file at a time, for a
 * checker that names every bad split rather than the first (pn-check; each
 * file opened with GGUF_OPEN_ONE_FILE). check_named: what the named file's
 * keys (in a set) say before any other split is opened: split.no and
 * split.tensors.count present, split.no below split.count, split.tensors.count
 * not negative. check_member: `member`, opened as split `index` of the set
 * of `given`, has that set's split.count and split.tensors.count and says it
 * is split `index`. PN_ERR_FORMAT naming the file that is wrong. */
pn_status gguf_split_check_named(const gguf_reader *given, const gguf_split_keys *keys,
                                 pn_error *err);
pn_status gguf_split_check_member(const gguf_reader *given, const gguf_split_keys *given_keys,
                                  const gguf_reader *member, uint32_t index, pn_error *err);

/* ---- the plan ---- */

typedef enum gguf_split_mode {
    GGUF_SPLIT_NONE = 0,    /* one file */
    GGUF_SPLIT_MAX_SIZE,    /* --split-max-size: bytes of tensor data per split */
    GGUF_SPLIT_MAX_TENSORS, /* --split-max-tensors: tensors per split */
} gguf_split_mode;

typedef struct gguf_split_limit {
    gguf_split_mode mode;
    uint64_t max; /* bytes or tensors, at least 1 */
} gguf_split_limit;

typedef struct gguf_split_plan {
    size_t n_splits;      /* at least 1 */
    size_t *first;        /* n_splits + 1: split s holds tensors [first[s], first[s+1]) */
    uint64_t *data_bytes; /* n_splits: its tensors' bytes, each padded to 32 (what
                                  * --split-max-size counts; the header is not counted) */
} gguf_split_plan;

/* The plan for n_tensors tensors of tensor_bytes[i] bytes each, in order
 * (tensor_bytes may be NULL for GGUF_SPLIT_NONE and GGUF_SPLIT_MAX_TENSORS;
 * data_bytes are then 0). gguf-split's rules:
 *   MAX_TENSORS: a new split every `max` tensors.
 *   MAX_SIZE: each tensor counts its bytes rounded up to a multiple of 32;
 *     a new split starts before the tensor that would take the split's count
 *     past `max`. A tensor larger than `max` is alone in its split (where
 *     gguf-split refuses a first tensor larger than the limit, this plan
 *     puts it alone in the first split; otherwise the plans are the same).
 * No split is empty; no tensors give one empty split. PN_ERR_USAGE for a
 * limit of 0 or an unknown mode, a plan of more than GGUF_SPLIT_MAX_COUNT
 * splits, or a set of more than GGUF_SPLIT_MAX_SET_TENSORS tensors (what
 * split.tensors.count holds), each naming the option and the figures. */
pn_status gguf_split_plan_make(const uint64_t *tensor_bytes, size_t n_tensors,
                               gguf_split_limit limit, gguf_split_plan *plan, pn_error *err);
/* The same for the tensors added to a writer so far. */
pn_status gguf_split_plan_of_writer(const gguf_writer *w, gguf_split_limit limit,
                                    gguf_split_plan *plan, pn_error *err);
/* --keep-split: the splits of a source set (a plain file: one split), with
 * the byte counts of tensor_bytes (the output's sizes, n_tensors of the
 * source's; NULL: the source's own). */
pn_status gguf_split_plan_of_reader(const gguf_reader *src, const uint64_t *tensor_bytes,
                                    gguf_split_plan *plan, pn_error *err);
/* The split that tensor i goes to (i < first[n_splits]). */
size_t gguf_split_plan_split_of(const gguf_split_plan *plan, size_t i);
void gguf_split_plan_free(gguf_split_plan *plan);

/* ---- writing ---- */

/* Removes split.no, split.count, split.tensors.count and the set identity
 * (keys copied from a split source must not reach an output that is not
 * that set). */
void gguf_split_remove_keys(gguf_writer *w);
/* Sets the split keys of split `index` of `count` in a set of n_tensors
 * tensors, after every other key (earlier split keys are removed first).
 * PN_ERR_USAGE when index >= count, count is 0 or above
 * GGUF_SPLIT_MAX_COUNT, or n_tensors above GGUF_SPLIT_MAX_SET_TENSORS. */
pn_status gguf_split_set_keys(gguf_writer *w, uint32_t index, uint32_t count, uint64_t n_tensors,
                              pn_error *err);

/* A new writer for split `index` of the plan, from `model`, a writer that
 * holds the whole model's keys and tensors (not begun; it is only read):
 * split 0 gets the model's keys in their order, the others general.alignment
 * (when it is not 32); each gets, in the model's order, the keys named in
 * per_tensor_keys that the model has, cut to its own tensors' elements (each
 * must be an array of fixed-size elements with one per model tensor); then,
 * when the plan has two or more splits, the set identity
 * (GGUF_SPLIT_KEY_SET_ID, the same in every split) and the split keys; then
 * its tensors. Split keys and a set identity of the model are never
 * copied. The output options (force) are
 * the model's. The caller begins it at gguf_split_path(dst, index, n_splits)
 * (or dst itself for a plan of one), writes its tensors, patches its
 * per-tensor keys, closes and validates it, and commits all splits with
 * gguf_writer_commit_set. PN_ERR_USAGE when the plan is not the model's
 * (another tensor count) or index is out of range, or a per-tensor key has
 * another shape; PN_ERR_ALIGNMENT for a bad general.alignment. */
pn_status gguf_writer_new_split(const gguf_writer *model, const gguf_split_plan *plan, size_t index,
                                const char *const *per_tensor_keys, size_t n_per_tensor_keys,
                                gguf_writer **out, pn_error *err);
/* Bytes of tensor i of a writer (its data, without padding); 0 when out of
 * range. */
uint64_t gguf_writer_tensor_bytes(const gguf_writer *w, size_t i);

#endif
