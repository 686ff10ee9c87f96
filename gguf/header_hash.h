/* header_hash.h - a file that proves its own key-value section
 * (docs/format.md#the-header-hash).
 *
 * A writer with the header hash on (gguf_writer_set_header_hash) ends its
 * keys with four of its own (gguf/pn_keys.h, PN_KEY_HEADER_*): the names of
 * the hashed keys in file order, one FNV-1a 64 per hashed key of its value
 * type and value as stored, one FNV-1a 64 of its tensor infos (which file
 * the record is for), and one FNV-1a 64 of every hashed key as stored.
 * Hashed is every key but the header-hash keys (PN_KEY_HEADER_PREFIX) and
 * llama.cpp's split keys (split.no, split.count, split.tensors.count, which
 * say where a file sits in its set and which the split reader checks
 * against the set). Each split of a set records its own keys and tensors:
 * the model's keys on the first, its share of the per-tensor arrays on
 * every one.
 *
 * The check recomputes the record from the file. A record written for other
 * tensors (a tool copied the keys into a file of its own, as llama-quantize
 * does) proves nothing: the file is unproven, as one without a record. Else
 * it names the first key it cannot account for, walking the file's hashed
 * keys and the record in step: a key whose value differs (changed), a key
 * in the record's place with another name and the recorded key absent
 * (renamed), a key the record lacks (added), a recorded key the file lacks
 * (removed), a key out of the recorded order (moved), or a record that is
 * itself malformed (record). O(keys + tensors) time and no allocation: a
 * hostile file with many keys costs one pass, and the few name searches of
 * the first mismatch one pass each.
 */
#ifndef PN_GGUF_HEADER_HASH_H
#define PN_GGUF_HEADER_HASH_H

#include <stdbool.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "gguf/gguf.h"

/* Whether a key is one of the header hash's record (PN_KEY_HEADER_PREFIX):
 * a writer that copies another file's keys leaves these out, as its own
 * writer records its own. */
bool gguf_header_hash_is_record_key(gguf_str key);
/* Whether a key is left out of the hash (a record key or a split key). */
bool gguf_header_hash_excludes(gguf_str key);

typedef enum gguf_header_proof {
    GGUF_HEADER_UNPROVEN, /* no record: a third-party file, or an older build of ours */
    GGUF_HEADER_PROVEN,   /* the record accounts for every key */
    GGUF_HEADER_MISMATCH, /* a key the record does not account for */
} gguf_header_proof;

typedef struct gguf_header_verdict {
    gguf_header_proof proof;
    const char *kind; /* MISMATCH: "changed", "renamed", "added", "removed", "moved",
                       * "record"; else NULL */
    char key[200];    /* MISMATCH: the key named (cut to fit, made printable) */
    int64_t index;    /* MISMATCH: its place in the record, or -1 */
    char message[700];
} gguf_header_verdict;

/* Checks one file's record (r a single file, or one split of a set:
 * gguf_reader_split). Always fills *v; never fails. */
void gguf_header_hash_verify(const gguf_reader *r, gguf_header_verdict *v);

#endif
