/* source_id_testing.h - what only the tests ask of the source's identity
 * (source_id.h): the programs never include this. */
#ifndef PN_IO_SOURCE_ID_TESTING_H
#define PN_IO_SOURCE_ID_TESTING_H

#include <stdint.h>

#include "io/source_id.h"

/* Continues crc over the bytes of elements [elem_at, elem_at + n_elems) of a
 * tensor of n_rows rows of K elements of elem_bytes each (row-major; bytes
 * holds exactly those elements) that belong to the rows sampled with M
 * rows. Pieces given in increasing element order give the sampled-rows
 * CRC-32 of the whole tensor. */
uint32_t pn_sample_crc_update(uint32_t crc, int64_t n_rows, int64_t M, int64_t K,
                              int64_t elem_bytes, int64_t elem_at, const uint8_t *bytes,
                              int64_t n_elems);

#endif
