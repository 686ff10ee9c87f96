/* hf_testing.h - the parsers of a checkpoint's JSON files on a buffer, for
 * the fuzz targets and the tests (hf.h): the programs never include this. */
#ifndef PN_HF_HF_TESTING_H
#define PN_HF_HF_TESTING_H

#include <stdbool.h>
#include <stddef.h>

#include "common/pn_error.h"
#include "gguf/gguf.h"
#include "hf/hf.h"

/* Parses a config.json held in memory (for the fuzz target and tests). */
pn_status pn_hf_config_parse(const char *text, size_t len, const char *name, bool no_mtp,
                             pn_hf_config *out, pn_error *err);

/* Parses a model.safetensors.index.json held in memory (for the fuzz target
 * and tests): *n_shards gets the number of distinct shards its weight_map
 * names. Refused: weight_map missing or not an object, a shard name that is
 * not a string, empty, absolute or leaves the folder, no shard at all. */
pn_status pn_hf_index_parse(const char *text, size_t len, const char *name, size_t *n_shards,
                            pn_error *err);

/* Parses a tokenizer.json held in memory and writes its tokenizer keys (as
 * for a folder with no tokenizer_config.json) to w: for the fuzz target. */
pn_status pn_hf_tokenizer_parse(const char *text, size_t len, const char *name,
                                const pn_hf_config *cfg, gguf_writer *w, pn_error *err);

#endif
