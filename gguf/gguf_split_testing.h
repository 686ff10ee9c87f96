/* gguf_split_testing.h - what only the tests ask of the split sets
 * (gguf_split.h): the programs never include this. */
#ifndef PN_GGUF_GGUF_SPLIT_TESTING_H
#define PN_GGUF_GGUF_SPLIT_TESTING_H

#include <stdint.h>

#include "common/pn_error.h"
#include "gguf/gguf_split.h"

/* gguf-split's --split-max-size argument: a positive whole number followed
 * by M (10^6 bytes) or G (10^9 bytes), "50G"; PN_ERR_USAGE otherwise (a
 * fraction, another unit, zero, overflow), quoting the text. */
pn_status gguf_split_parse_size(const char *text, uint64_t *bytes, pn_error *err);

#endif
