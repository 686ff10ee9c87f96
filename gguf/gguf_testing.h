/* gguf_testing.h - what only the tests and the fuzz targets ask of the
 * GGUF reader and writer (gguf.h): the programs never include this. They
 * read tensors with gguf_reader_read_tensor, write keys of the types the
 * format's files hold, and commit through an output set (io/outset.h). */
#ifndef PN_GGUF_GGUF_TESTING_H
#define PN_GGUF_GGUF_TESTING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/outfile.h"
#include "gguf/gguf.h"

/* gguf_reader_open_lenient on a buffer (as gguf_reader_open_memory). */
pn_status gguf_reader_open_memory_lenient(const void *data, size_t size, const char *name,
                                          gguf_reader **out, pn_error *err);

/* Pointer to the tensor's bytes when they lie in the reader's buffer: always
 * for a memory reader; for a file, only within its first
 * gguf_reader_bytes_len() bytes (the header, and all of a file under 16 MiB;
 * of a set's splits other than the named one, all of a file under 4 KiB).
 * NULL otherwise, for an index out of range, and, opened leniently, for bytes
 * not in the file. */
const uint8_t *gguf_reader_tensor_data(const gguf_reader *r, size_t i);

/* The reader's buffer: the file's first gguf_reader_bytes_len() bytes (the
 * caller's whole buffer for a memory reader; at least the header for a
 * file). Key and string pointers point into it, so pointer - bytes is a file
 * offset. */
const uint8_t *gguf_reader_bytes(const gguf_reader *r);
uint64_t gguf_reader_bytes_len(const gguf_reader *r);

/* Array element access as gguf.h's (bounds are the caller's): a float
 * element; element i of an array of arrays, as a gguf_kv with an empty key
 * and type ARRAY (O(i) walk), a zeroed gguf_kv if kv is not an array of
 * arrays. */
double gguf_kv_arr_f64(const gguf_kv *kv, uint64_t i);
gguf_kv gguf_kv_arr_arr(const gguf_kv *kv, uint64_t i);

/* Keys of the integer types no file of the programs holds. */
pn_status gguf_writer_set_u8(gguf_writer *w, const char *key, uint8_t v);
pn_status gguf_writer_set_i8(gguf_writer *w, const char *key, int8_t v);
pn_status gguf_writer_set_i16(gguf_writer *w, const char *key, int16_t v);
pn_status gguf_writer_set_i64(gguf_writer *w, const char *key, int64_t v);
size_t gguf_writer_n_kv(const gguf_writer *w);

/* Before begin: every option of the output file (the tests of the
 * named-temporary fallback, common/outfile_testing.h). */
void gguf_writer_set_output_opts(gguf_writer *w, const pn_outfile_opts *opts);

/* Puts the closed file at the target (and fsyncs the folder). Without
 * replace, a target that appeared since begin is refused (PN_ERR_EXISTS) and
 * left untouched. Any failure aborts. */
pn_status gguf_writer_commit(gguf_writer *w, pn_error *err);

#endif
