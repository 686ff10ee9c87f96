/* gguf_internal.h - what gguf_reader.c, gguf_header.c, gguf_tensors.c, gguf_data.c and
 * gguf_split.c share;
 * not for callers outside gguf/.
 *
 * A reader is either one file (splits == NULL) or a split set: then it owns
 * one single-file reader per split (splits[0] the first, whose keys are the
 * set's) and only the set-wide tensor view is its own: n_tensors over all
 * splits, split_first (where each split's tensors start in the set's order)
 * and set_by_name (every tensor info of every split, sorted by name). The
 * tensor infos stay in their split's reader; their `split` field is their
 * split's index. File-level accessors of a set answer for splits[0].
 */
#ifndef PN_GGUF_INTERNAL_H
#define PN_GGUF_INTERNAL_H

#include <sys/types.h>

#include "gguf/gguf.h"

struct gguf_reader {
    char *name;
    const uint8_t *base; /* bytes [0, avail) of the file */
    uint64_t size;       /* the file's size when it was opened */
    uint64_t avail;      /* bytes in base: size for a memory reader */
    uint8_t *owned;      /* base when it is our buffer (a file), else NULL */
    int fd;              /* the open file, or -1 for a memory reader or a set */
    bool virt;           /* a virtual reader: tensor data from prov */
    gguf_provider prov;

    bool lenient;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;

    size_t n_kv;
    gguf_kv *kvs;
    const gguf_kv **kv_by_key;

    size_t n_tensors;          /* of a set: over all its splits */
    gguf_tensor_info *tensors; /* NULL for a set */
    const gguf_tensor_info **tensor_by_name;

    /* A split set (see above); NULL / 0 for one file. */
    gguf_reader **splits;
    size_t n_splits;
    size_t *split_first; /* n_splits + 1 entries */
    const gguf_tensor_info **set_by_name;
};

/* How many bytes a reader reads first: the whole header of most files in one
 * read for a file opened alone; little for the other splits of a set, so
 * that memory follows the headers' size however many splits there are (the
 * buffer grows to what the header needs). */
#define GGUF_READ_FIRST_FILE ((uint64_t)16 << 20)
#define GGUF_READ_FIRST_SPLIT ((uint64_t)4 << 10)

/* Opens exactly one file (never a set), reading first_read bytes first. */
pn_status gguf_reader_open_one_(const char *path, bool lenient, uint64_t first_read,
                                gguf_reader **out, pn_error *err);

/* Takes the reader of the file a caller named: returns it as it is when its
 * keys make it no split of a set of several, else opens the rest of its set
 * and returns the set (see gguf_reader_open). On failure `given` is closed
 * and *out is NULL. */
pn_status gguf_split_open_set_(gguf_reader *given, bool lenient, gguf_reader **out, pn_error *err);

/* The reader whose file holds the set's file-level data: the first split of
 * a set, else the reader itself. */
static inline const gguf_reader *gguf_file_of_(const gguf_reader *r)
{
    return r->splits ? r->splits[0] : r;
}

/* The reader of the file that holds tensor info ti (of reader r). */
static inline const gguf_reader *gguf_file_of_tensor_(const gguf_reader *r,
                                                      const gguf_tensor_info *ti)
{
    return r->splits ? r->splits[ti->split] : r;
}

/* pread until n bytes are in or the file ends; returns the bytes read, or -1
 * with errno set (gguf_reader.c; the header and the data are read with it). */
ssize_t gguf_pread_full_(int fd, void *dst, size_t n, uint64_t at);

/* The file offset of key kv's length field in r's file. */
uint64_t gguf_reader_key_offset_(const gguf_reader *r, const gguf_kv *kv);

/* gguf_header.c: parses and validates the header in r->base[0, r->avail)
 * of a file of r->size bytes, filling r's keys and tensor infos. Returns
 * GGUF_NEED_MORE_, not an error, when the header runs past the bytes held:
 * *want (may be NULL) is then how many the parse needs; the caller resets
 * what the parse built and parses again with more. GGUF_NEED_MORE_ never
 * leaves gguf/. */
#define GGUF_NEED_MORE_ ((pn_status)(PN_ERR_COUNT_ + 100))
pn_status gguf_parse_header_(gguf_reader *r, uint64_t *want, pn_error *err);

#endif
