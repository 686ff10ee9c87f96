/* gguf_writer_internal.h - a writer's insides, shared by gguf_writer.c (keys,
 * tensors), gguf_writer_file.c (output) and gguf_writer_split.c (the
 * writers of a split set);
 * not for callers outside gguf/.
 */
#ifndef PN_GGUF_WRITER_INTERNAL_H
#define PN_GGUF_WRITER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/outfile.h"
#include "common/pn_error.h"
#include "gguf/gguf.h"

typedef struct writer_kv {
    char *key; /* NULL once removed (the slot keeps the order) */
    gguf_value_type type;
    uint8_t *val; /* serialized value, as on disk after the type */
    uint64_t val_len;
    uint64_t val_offset; /* file offset of val once the header is written */
} writer_kv;

typedef struct writer_tensor {
    char *name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    int type;
    uint64_t size;
    uint64_t offset; /* in the data section, assigned by begin */
} writer_tensor;

typedef enum writer_state {
    W_COLLECTING,
    W_OPEN,
    W_CLOSED,
    W_COMMITTED,
    W_ABORTED,
} writer_state;

/* Open addressing with linear probing over item indices; the names live
 * in the items. The hash is seeded per writer, so names crafted to collide
 * cannot make the table quadratic. */
typedef struct index_slot {
    uint64_t hash;
    size_t item; /* item index + 1; 0 = empty */
} index_slot;

typedef struct name_index {
    index_slot *slots;
    size_t cap; /* a power of two, or 0 */
    size_t used;
} name_index;

/* The header hash's keys (header_hash.h), in the order they are written. */
enum {
    GGUF_HH_KEYS,    /* the hashed keys' names */
    GGUF_HH_VALUES,  /* their value hashes */
    GGUF_HH_TENSORS, /* the tensor infos' hash */
    GGUF_HH_WHOLE,   /* the keys' hash */
    GGUF_HEADER_HASH_KEYS
};

struct gguf_writer {
    writer_kv *kvs; /* in order of insertion, removed ones included */
    size_t n_kv_slots, cap_kv, n_kv;
    writer_tensor *tensors;
    size_t n_tensors, cap_tensors;
    name_index kv_index, tensor_index;
    uint64_t seed;
    pn_error last_error; /* of the last refused set/copy */
    /* gguf_writer_set_header_hash: the record follows the keys; hh is built
     * from them when the header is made (begin, gguf_writer_header) and
     * refreshed when a hashed array is patched */
    bool header_hash;
    writer_kv hh[GGUF_HEADER_HASH_KEYS];

    writer_state state;
    char *target;
    pn_outfile_opts out_opts;
    pn_outfile *out; /* from begin until free */
    uint64_t alignment;

    uint8_t *buf;
    size_t buf_len;
    uint64_t flushed; /* bytes already in the file = file offset of buf[0] */
    uint64_t data_start;
    size_t cur;        /* tensor being streamed */
    uint64_t cur_done; /* its bytes received so far */
};

/* The key `key` of w, or NULL. */
writer_kv *gguf_writer_find_kv_(const gguf_writer *w, const char *key);
/* Sets key to a serialized value val of len bytes (taken: freed on error). */
pn_status gguf_writer_put_kv_(gguf_writer *w, const char *key, gguf_value_type type, uint8_t *val,
                              uint64_t len);
/* Sets key to an array of count elements of type et, `bytes` bytes. */
pn_status gguf_writer_put_array_(gguf_writer *w, const char *key, gguf_value_type et,
                                 uint64_t count, const void *elems, uint64_t bytes);
/* The model's general.alignment, GGUF_DEFAULT_ALIGNMENT when absent, 0 when
 * it is not an unsigned power of two. */
uint64_t gguf_writer_alignment_of_(const gguf_writer *w);

/* The header hash (header_hash.c). The bytes its four keys take in the
 * header (0 when off; known from the keys' names alone). */
uint64_t gguf_writer_header_hash_bytes_(const gguf_writer *w);
/* Builds hh from the keys now set; PN_ERR_USAGE when one of them is under
 * PN_KEY_HEADER_PREFIX (the record is the writer's own). */
pn_status gguf_writer_header_hash_build_(gguf_writer *w, pn_error *err);
/* Recomputes hh's hashes in place (after a patch: sizes unchanged). */
void gguf_writer_header_hash_update_(gguf_writer *w);
void gguf_writer_header_hash_clear_(gguf_writer *w);
/* Whether key is one the header hash of w covers. */
bool gguf_writer_hashes_key_(const gguf_writer *w, const char *key);

#endif
