/* gguf.h - reading and writing GGUF files (v2/v3, little-endian).
 *
 * On-disk layout (all integers little-endian):
 *   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x { string key | u32 value_type | value }
 *   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
 *   padding to general.alignment (default 32)
 *   tensor data; each tensor at data_start + offset, offset a multiple of the alignment
 * string = u64 length + bytes (no terminator). array = u32 elem_type + u64 count + elems.
 *
 * Reader: the header is read into memory (pread, never mmap); every count,
 * length and offset is checked against the file size before use, and nothing
 * is allocated from an unchecked count. Strings returned by the reader point
 * into its buffer (not NUL-terminated: use the length) and live until
 * gguf_reader_close. Tensor names are copied and NUL-terminated. Tensor data
 * is copied out with gguf_reader_read_tensor (pread): a file that is cut
 * short or shrinks while it is read gives PN_ERR_TRUNCATED naming it, never
 * a fault. Only regular files are opened (a FIFO is refused at once, never
 * waited on). The reader is read-only after open: several threads may read
 * tensor data through it at once.
 *
 * Writer: collects keys and tensor infos (indexed by name: setting, copying
 * and adding cost O(1) each, whatever their number), then writes the header
 * and streams tensor data in order through an atomic output file
 * (common/outfile.h): an unnamed temporary file in the target's folder where
 * the filesystem allows, else a short-named one beside the target. Memory
 * does not grow with the data. The caller finishes with gguf_writer_close
 * (flush, fsync; the descriptor stays open), may validate the data through
 * gguf_writer_fd (gguf_reader_open_fd), then gguf_writer_commit (into place;
 * an existing target is refused unless gguf_writer_set_replace) or
 * gguf_writer_abort. Every failure path of the writer discards the file.
 *
 * Split models (docs/split.md): a model written as several files by
 * llama.cpp's gguf-split or llama-quantize --keep-split, or by our own
 * writer with gguf/gguf_split.h, is opened from any of its files by
 * gguf_reader_open and read as one model: the tensors of every split in
 * order, the keys of the first split. File-level accessors (name, version,
 * file size, alignment, data offset, bytes, read_at, advise) of such a set
 * answer for its first split; the tensor accessors span the set.
 *
 * Error codes of the reader: PN_ERR_TRUNCATED whenever the file ends before
 * something it declares (a count of keys, tensors or array elements that the
 * remaining bytes cannot hold, a string, the padding before the data, a
 * tensor's bytes); PN_ERR_BAD_MAGIC; PN_ERR_VERSION (v1, big-endian, unknown);
 * PN_ERR_FORMAT (unknown value type, bool other than 0/1, an empty key or one
 * holding a NUL, duplicate key,
 * arrays nested deeper than GGUF_MAX_ARRAY_DEPTH); PN_ERR_ALIGNMENT
 * (general.alignment not an unsigned integer power of two, a tensor offset not
 * a multiple of it); PN_ERR_TENSOR (empty name or one holding a NUL, duplicate
 * name, n_dims outside 1..4, ne < 1, ne[0] not a multiple of the type's block,
 * size or end overflowing 64 bits, overlap); PN_ERR_TYPE (unknown ggml type).
 * Their messages start with "<file>: at byte <offset>: " and name the key or
 * tensor. PN_ERR_IO when the file cannot be opened or mapped.
 *
 * Error codes of the writer: PN_ERR_USAGE for a call out of order or bytes
 * that do not match the tensors (too many, too few at close, a patch of the
 * wrong count); PN_ERR_FORMAT for a key the reader would refuse (empty, or
 * holding a NUL byte); PN_ERR_TENSOR / PN_ERR_TYPE / PN_ERR_ALIGNMENT as for
 * the reader; PN_ERR_EXISTS for an existing target without replace (at begin,
 * and at commit for a target that appeared meanwhile); PN_ERR_NOSPACE (ENOSPC,
 * EDQUOT, EFBIG: the file size limit, a write of 0 bytes) and PN_ERR_IO,
 * whose messages start with the target path and give the byte offset.
 * Like ggml's writer, it pads the data of every tensor, the last one too, to
 * the alignment with zero bytes.
 */
#ifndef PN_GGUF_H
#define PN_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/outfile.h"
#include "common/pn_error.h"
#include "quant/types.h"

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef enum gguf_value_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT_
} gguf_value_type;

const char *gguf_value_type_name(gguf_value_type t);
/* Bytes of one element of a fixed-size type; 0 for STRING, ARRAY and ids
 * outside the enum. */
size_t gguf_value_type_size(gguf_value_type t);

/* Arrays may nest at most this deep (an array of arrays is depth 2). */
#define GGUF_MAX_ARRAY_DEPTH 8

typedef struct gguf_str {
    uint64_t len;
    const char *data; /* not NUL-terminated */
} gguf_str;

/* A key/value as read. For arrays, `arr_type`/`arr_count` describe the
 * elements and `arr_data` points at the first element's bytes in the file;
 * use gguf_kv_arr_* to read elements. Nested arrays are supported. */
typedef struct gguf_kv {
    gguf_str key;
    gguf_value_type type;
    union {
        uint64_t u64; /* UINT8..UINT64 and BOOL, zero-extended */
        int64_t i64;  /* INT8..INT64, sign-extended */
        double f64;   /* FLOAT32 / FLOAT64 */
        gguf_str str;
    } v;
    gguf_value_type arr_type;
    uint64_t arr_count;
    const uint8_t *arr_data; /* raw little-endian element bytes */
    uint64_t arr_bytes;      /* total bytes of the array's elements */
} gguf_kv;

typedef struct gguf_tensor_info {
    char *name; /* NUL-terminated copy */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* unused dims are 1 */
    int type;                  /* ggml type id */
    uint64_t offset;           /* relative to the data section */
    uint64_t size;             /* bytes, from type and shape */
    uint64_t info_offset;      /* file offset of this tensor info (for messages) */
    uint32_t split;            /* the split of a set holding it (gguf_reader_split); 0
                                  * in a reader of one file. `offset` and `info_offset`
                                  * are in that split's file. */
} gguf_tensor_info;

/* ---- reader ---- */

typedef struct gguf_reader gguf_reader;

/* Opens and fully validates the header (not the tensor data). On error *out is
 * NULL and err names the file, offset and what was expected.
 *
 * A file whose split.count is 2 or more is one split of a set: the other
 * splits are found beside it by llama.cpp's naming rule (PREFIX-%05d-of-
 * %05d.gguf, the prefix taken from this file's name and its split.no), all
 * are opened and validated, and the reader is the whole set. Refused
 * (PN_ERR_FORMAT unless an open error says more), naming the file and what
 * is wrong: a split key of another type than llama.cpp writes (split.no and
 * split.count uint16, split.tensors.count int32), split.no or
 * split.tensors.count missing, split.no not below split.count, a name that
 * is not the one split.no and split.count give, a missing split, a split
 * whose split.count or split.tensors.count differs from the given file's
 * (another set's), a split whose split.no is not its place, tensors of all
 * splits that do not add up to split.tensors.count, and a tensor name in
 * two splits (PN_ERR_TENSOR). A file without split.count, or with
 * split.count 0 (gguf-split --merge writes that) or 1, is a set of one: a
 * plain reader (split.count 1 needs split.no 0 and split.tensors.count, when
 * present, equal to its tensor count). Only regular files are opened, none
 * is waited on; memory is linear in the headers' total size. */
pn_status gguf_reader_open(const char *path, gguf_reader **out, pn_error *err);
/* Flags of gguf_reader_open_flags. */
enum {
    GGUF_OPEN_LENIENT = 1u << 0,     /* as gguf_reader_open_lenient, for every split */
    GGUF_OPEN_ONE_FILE = 1u << 1,    /* this file alone, even a split of a set; its split
                                    * keys are not checked (gguf_split_read_keys does) */
    GGUF_OPEN_HEADER_ONLY = 1u << 2, /* hold only the header in memory (a few KiB read
                                       * first, more as it needs), not the first 16 MiB
                                       * of the file: for a reader that reads its
                                       * tensors around the cache (gguf_direct) */
};
/* gguf_reader_open with flags; 0 is gguf_reader_open itself. */
pn_status gguf_reader_open_flags(const char *path, unsigned flags, gguf_reader **out,
                                 pn_error *err);
/* The same on an open descriptor (duplicated: the caller keeps fd), e.g. a
 * temporary file that has no name yet; `name` is used in messages. Always
 * that one file, never a set (like the memory readers). */
pn_status gguf_reader_open_fd(int fd, const char *name, gguf_reader **out, pn_error *err);
/* gguf_reader_open_fd with GGUF_OPEN_HEADER_ONLY or 0 (the other flags do
 * not apply to one descriptor). */
pn_status gguf_reader_open_fd_flags(int fd, const char *name, unsigned flags, gguf_reader **out,
                                    pn_error *err);
/* Same on a caller-owned buffer (for fuzzing and tests); the buffer must
 * outlive the reader. `name` is used in messages. */
pn_status gguf_reader_open_memory(const void *data, size_t size, const char *name,
                                  gguf_reader **out, pn_error *err);
void gguf_reader_close(gguf_reader *r);

/* A virtual reader: a GGUF whose header is given in memory (e.g. by
 * gguf_writer_header) and whose tensor data is computed on demand by a
 * provider, e.g. a Hugging Face checkpoint converted on the fly (hf/).
 * The header is copied and validated as a file's; the file size is the end
 * of the last tensor's data. Tensor reads (gguf_reader_read_tensor,
 * gguf_direct_read_tensor) call provider.read with the tensor's index;
 * gguf_reader_read_at serves the header's bytes only; gguf_reader_fd is -1
 * and gguf_reader_advise does nothing (as for a memory reader);
 * gguf_reader_tensor_data is NULL. provider.read may be called from several
 * threads at once. provider.close (if not NULL) is called with ctx when the
 * reader is closed, also when the open fails. */
typedef struct gguf_provider {
    void *ctx;
    pn_status (*read)(void *ctx, size_t tensor, uint64_t off, void *dst, size_t n, pn_error *err);
    void (*close)(void *ctx);
} gguf_provider;
pn_status gguf_reader_open_virtual(const void *header, size_t len, const char *name,
                                   const gguf_provider *provider, gguf_reader **out, pn_error *err);
/* For a checker that names every bad tensor itself: like gguf_reader_open,
 * except that a tensor offset that is not a multiple of the alignment,
 * tensors whose bytes overlap, tensor bytes that end past the end of the file
 * (or whose end overflows), and padding before the data section that runs
 * past the end of the file do not refuse the file. Everything else is checked
 * as usual. gguf_reader_tensor_data returns NULL for a tensor whose bytes are
 * not all inside the file; gguf_reader_data_offset may then exceed the file
 * size. */
pn_status gguf_reader_open_lenient(const char *path, gguf_reader **out, pn_error *err);

uint32_t gguf_reader_version(const gguf_reader *r);
uint64_t gguf_reader_file_size(const gguf_reader *r);
uint64_t gguf_reader_alignment(const gguf_reader *r);
uint64_t gguf_reader_data_offset(const gguf_reader *r); /* file offset of the data section */

size_t gguf_reader_n_kv(const gguf_reader *r);
const gguf_kv *gguf_reader_kv(const gguf_reader *r, size_t i);
/* NULL if absent. */
const gguf_kv *gguf_reader_find_kv(const gguf_reader *r, const char *key);

size_t gguf_reader_n_tensors(const gguf_reader *r);
const gguf_tensor_info *gguf_reader_tensor(const gguf_reader *r, size_t i);
/* Index of the named tensor, or -1. */
long gguf_reader_find_tensor(const gguf_reader *r, const char *name);
/* Copies n bytes of tensor i, from byte `off` of its data, into dst.
 * PN_ERR_USAGE for a range outside the tensor; PN_ERR_TRUNCATED when the
 * file has fewer bytes than it had at open (it changed or shrank during the
 * run) or, opened leniently, the tensor is not inside the file; PN_ERR_IO
 * for a read error. Messages name the file, the tensor and the offset. */
pn_status gguf_reader_read_tensor(const gguf_reader *r, size_t i, uint64_t off, void *dst, size_t n,
                                  pn_error *err);
/* The same for n bytes at file offset `at`. */
pn_status gguf_reader_read_at(const gguf_reader *r, uint64_t at, void *dst, size_t n,
                              pn_error *err);
/* Advice for the kernel about file bytes [at, at+n): willneed starts reading
 * them ahead; otherwise their page cache may be dropped. Never fails. */
void gguf_reader_advise(const gguf_reader *r, uint64_t at, uint64_t n, bool willneed);
/* The same for bytes [off, off+n) of tensor i's data (cut at its end), in
 * whichever split's file holds it. */
void gguf_reader_advise_tensor(const gguf_reader *r, size_t i, uint64_t off, uint64_t n,
                               bool willneed);
/* Direct reads: a reader's tensor data read around the page cache
 * (O_DIRECT), for one thread reading a large file once in order (the
 * quantizer's stream): the kernel copies nothing out of its cache, and the
 * file does not push other files' pages out of it. A read fills the
 * handle's whole buffer from the aligned offset at or below the bytes asked
 * for (so small tensors read in order cost one read for many) and hands back
 * a pointer into it; a request inside what the last read brought is served
 * from the buffer. Where the file system refuses O_DIRECT (at open, or a
 * read with EINVAL: from then on, for that file), /proc is not mounted, or
 * r is a memory reader, the handle reads with pread into its buffer instead: same bytes,
 * same errors. A direct read that fails or ends early is done again with
 * pread, so errors are gguf_reader_read_tensor's, word for word (a file that
 * shrank during the run is PN_ERR_TRUNCATED naming it). A direct read still
 * sees data that was written and not yet flushed (the kernel writes the
 * range back first). There is no read-ahead: the caller reads ahead itself
 * if it needs to. A split set's reader reads each tensor in its split's
 * file (the handle moves to the next file when a tensor lies there). One
 * handle per thread; r must outlive it. */
typedef struct gguf_direct gguf_direct;
/* A handle for reads of at most max_bytes; PN_ERR_NOMEM only. Its buffer
 * of about max_bytes is made at its first gguf_direct_read_tensor (which
 * may then say PN_ERR_NOMEM): a handle that only reads into its caller's
 * buffers (gguf_direct_read_tensor_into) never holds one. */
pn_status gguf_direct_open(const gguf_reader *r, size_t max_bytes, gguf_direct **out,
                           pn_error *err);
void gguf_direct_close(gguf_direct *d);
/* True while reads go around the page cache (false after a fallback). */
bool gguf_direct_is_direct(const gguf_direct *d);
/* Tensor i's bytes [off, off + n), n <= max_bytes: *data points at them,
 * inside the handle's buffer, until the next call. The errors of
 * gguf_reader_read_tensor; PN_ERR_USAGE when n > max_bytes; PN_ERR_NOMEM
 * when the buffer cannot be made. */
pn_status gguf_direct_read_tensor(gguf_direct *d, size_t i, uint64_t off, size_t n,
                                  const uint8_t **data, pn_error *err);
/* The buffer gguf_direct_read_tensor_into needs for n bytes: n and a block
 * of slack on each side (SIZE_MAX when that overflows). */
size_t gguf_direct_into_cap(size_t n);
/* Tensor i's bytes [off, off + n) read straight into the caller's buffer,
 * with no copy: buf is aligned to 4096 bytes and holds at least
 * gguf_direct_into_cap(n); the aligned cover of the range is read into it,
 * and *data points where the bytes asked for start (within buf's first
 * 4096 bytes: the same place however they were read). n has no limit: the
 * cover is cut into aligned pieces of at most max_bytes, so that one big
 * read does not hold the device alone. Several threads read one range
 * together, each with its own handle (all opened with the same max_bytes)
 * and the same i, off, n and buf: the pieces are dealt round-robin, and the
 * call of part `part` of n_parts reads pieces part, part + n_parts, ...
 * (part 0 of 1 reads them all); the range is whole when every part has
 * returned PN_OK, and two reads in flight take more of a fast device than
 * one. A handle that reads buffered (as above) reads its pieces' bytes with
 * pread into the same places. The errors of gguf_reader_read_tensor;
 * PN_ERR_USAGE for a buffer that is unaligned or too small, or a bad part. */
pn_status gguf_direct_read_tensor_into(gguf_direct *d, size_t i, uint64_t off, size_t n,
                                       uint8_t *buf, size_t cap, int part, int n_parts,
                                       const uint8_t **data, pn_error *err);
/* File offset of tensor i's data (data section + its offset; UINT64_MAX on
 * overflow, possible only for a lenient reader), in the file of its split
 * (gguf_reader_tensor(r, i)->split): use it with that split's reader. */
uint64_t gguf_reader_tensor_file_offset(const gguf_reader *r, size_t i);

/* The splits of a set: 1 for a plain file. gguf_reader_split(r, s) is split
 * s's own reader (for a plain file, s = 0: r itself), owned by r: its path
 * (gguf_reader_name), size, keys and tensors are that file's, for findings
 * per split; NULL when s is out of range. gguf_reader_split_first(r, s) is
 * the index in r of split s's first tensor (s = n_splits: n_tensors); split
 * s holds tensors [first(s), first(s + 1)). gguf_reader_tensor_index_in_split
 * is tensor i's index in its split's reader (SIZE_MAX when out of range). */
size_t gguf_reader_n_splits(const gguf_reader *r);
/* The descriptor a file reader reads (read-only; the reader's: do not close
 * it); -1 for a memory reader; a set's: its first file's. */
int gguf_reader_fd(const gguf_reader *r);
const gguf_reader *gguf_reader_split(const gguf_reader *r, size_t s);
size_t gguf_reader_split_first(const gguf_reader *r, size_t s);
size_t gguf_reader_tensor_index_in_split(const gguf_reader *r, size_t i);
/* A per-tensor array key that each split records for its own tensors (as
 * pn.tensor_crc32): fills out[0..n_tensors) with the set's values in tensor
 * order, taken from every split's key. Plain files: the file's key. Refused
 * (PN_ERR_FORMAT, naming the split's file and the key) when a split lacks
 * the key, or it is not an array of uint32 with one element per tensor of
 * that split. */
pn_status gguf_reader_per_tensor_u32(const gguf_reader *r, const char *key, uint32_t *out,
                                     pn_error *err);

/* Array element access (bounds are the caller's: i < kv->arr_count). */
uint64_t gguf_kv_arr_u64(const gguf_kv *kv, uint64_t i); /* unsigned ints and bool */
int64_t gguf_kv_arr_i64(const gguf_kv *kv, uint64_t i);  /* signed ints */
gguf_str gguf_kv_arr_str(const gguf_kv *kv, uint64_t i); /* strings (O(i) walk) */
/* Compares a gguf_str with a C string. */
bool gguf_str_eq(gguf_str s, const char *c);

/* The name given at open (the path, or `name` for gguf_reader_open_memory). */
const char *gguf_reader_name(const gguf_reader *r);

/* ---- writer ---- */

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w); /* also aborts if still open */

/* Keys keep insertion order; setting an existing key replaces its value in
 * place. Strings and arrays are copied. An empty key (or, copied, one holding
 * a NUL byte) is refused with PN_ERR_FORMAT; every refusal is explained by
 * gguf_writer_last_error. */
pn_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
pn_status gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
pn_status gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
pn_status gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
pn_status gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
pn_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
pn_status gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v);
pn_status gguf_writer_set_f64(gguf_writer *w, const char *key, double v);
/* A string of `len` bytes that may hold any byte, NUL included. */
pn_status gguf_writer_set_str_n(gguf_writer *w, const char *key, const char *v, uint64_t len);
/* Array of fixed-size elements (not strings or arrays): `data` holds count
 * little-endian elements of elem_type. */
pn_status gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_value_type elem_type,
                              const void *data, uint64_t count);
pn_status gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *v,
                                  uint64_t count);
/* Copies a key/value read by a gguf_reader (any type, nested arrays too). */
pn_status gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv);
/* Why the last refused set or copy was refused ("gguf writer: key 3 is
 * empty"; keys are numbered in order of setting from 0), or NULL if none
 * was. Lives until the next refusal or gguf_writer_free. */
const char *gguf_writer_last_error(const gguf_writer *w);
void gguf_writer_remove_kv(gguf_writer *w, const char *key);
bool gguf_writer_has_kv(const gguf_writer *w, const char *key);
size_t gguf_writer_n_tensors(const gguf_writer *w);
/* The layout the writer's current keys and tensors give, known before begin
 * (e.g. to size an output): the alignment; the file offset of the data
 * section (the padded header size); the size of the whole file, the data of
 * each tensor padded to the alignment. All three are 0 when
 * general.alignment is not an unsigned power of two (begin refuses it). */
uint64_t gguf_writer_alignment(const gguf_writer *w);
uint64_t gguf_writer_data_offset(const gguf_writer *w);
uint64_t gguf_writer_file_bytes(const gguf_writer *w);

/* The header that begin would write (keys, tensor infos, padding to the
 * alignment), in a malloc'd buffer (caller frees): what a virtual reader
 * (gguf_reader_open_virtual) reads. The writer stays collecting. */
pn_status gguf_writer_header(gguf_writer *w, uint8_t **out, size_t *len, pn_error *err);

/* Adds a tensor; its offset is assigned in order of addition. A duplicate
 * name is refused (PN_ERR_TENSOR naming both indices). */
pn_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t n_dims,
                                 const int64_t *ne, int type, pn_error *err);

/* Before begin (or gguf_writer_header): whether the writer records the
 * header hash (gguf/header_hash.h, docs/format.md#the-header-hash): four
 * keys pn.header.* after every other key (before split keys that end the
 * section), computed when the header is made
 * and again when a hashed array is patched after begin. Default: off (the
 * bytes of a file are then exactly its keys and tensors; pn-convert
 * --no-header-hash). With it on, begin refuses a key of the writer's own
 * under pn.header. (a copy of another file's record). The derived writers
 * of a split set take it from the model's. */
void gguf_writer_set_header_hash(gguf_writer *w, bool on);
/* Before begin: whether commit may replace an existing target (default: no;
 * begin then refuses an existing target with PN_ERR_EXISTS, "use --force").
 * gguf_writer_set_output_opts (gguf_testing.h) sets every option of the
 * output file; set_replace sets only `force`. */
void gguf_writer_set_replace(gguf_writer *w, bool force);

/* Opens the output for the target (refusing a directory, a FIFO or other
 * non-regular file, and an existing target without replace), writes the
 * header and positions for tensor data. The alignment is general.alignment
 * when that key is set (an unsigned integer, a power of two), else 32. */
pn_status gguf_writer_begin(gguf_writer *w, const char *target_path, pn_error *err);
/* From begin on: stale temporary files of this target left by a killed run
 * ("TARGET: stale temporary files from an earlier run: X, Y; remove them
 * ..."), for the program to show (with pn_fput_safe); NULL if none. */
const char *gguf_writer_note(const gguf_writer *w);
/* Streams bytes of tensors in order; a tensor may be written in several
 * calls. Padding between tensors is inserted automatically. */
pn_status gguf_writer_write(gguf_writer *w, const void *data, size_t n, pn_error *err);
/* Like gguf_writer_write for n bytes of tensor data that lie in another
 * file: descriptor fd from byte offset off (pn_outfile_copy_from:
 * copy_file_range, else pread and write), padding inserted the same way.
 * The bytes are not looked at here: the caller checks them before (e.g. a
 * CRC) and validates the written file after. src_name names fd in
 * messages. */
pn_status gguf_writer_copy_from(gguf_writer *w, int fd, uint64_t off, uint64_t n,
                                const char *src_name, pn_error *err);
/* Overwrites the elements of an existing fixed-size array key in the already
 * written header (e.g. CRCs known only after the data); count must match. */
pn_status gguf_writer_patch_arr(gguf_writer *w, const char *key, const void *data, uint64_t count,
                                pn_error *err);
/* Checks every tensor got exactly its bytes, flushes and fsyncs. The file
 * stays open for validation. */
pn_status gguf_writer_close(gguf_writer *w, pn_error *err);
/* The written file's descriptor (read-write; it may have no name yet), from
 * begin until commit or abort, else -1. Validate with
 * gguf_reader_open_fd(gguf_writer_fd(w), target, ...); do not close it. */
int gguf_writer_fd(const gguf_writer *w);
/* From begin on: how many bytes of the file (header included) have been
 * handed to the file, in order; what the writer still buffers (at most a
 * few MiB) is not counted. 0 before begin. */
uint64_t gguf_writer_bytes_flushed(const gguf_writer *w);
/* Commits closed writers as one set (a split model, ws[0] its first file):
 * ws[0] last, all or nothing without replace (pn_outfile_commit_set). Any
 * failure aborts every writer of the set that is not in place. */
pn_status gguf_writer_commit_set(gguf_writer *const *ws, size_t n, pn_error *err);
/* Discards the output (safe to call at any stage, idempotent). */
void gguf_writer_abort(gguf_writer *w);

#endif
