/* hf_internal.h - helpers shared by the files of hf/ (not for other rooms). */
#ifndef PN_HF_INTERNAL_H
#define PN_HF_INTERNAL_H

#include <jansson.h>
#include <stddef.h>

#include "common/pn_error.h"
#include "hf/hf.h"

/* Parses len bytes of JSON (duplicate keys refused) that must be an object.
 * `base` is the file offset of text[0], for the messages. */
pn_status pn_hf_json_parse(const char *text, size_t len, const char *name, size_t base,
                           json_t **out, pn_error *err);
/* Reads a whole JSON file (at most PN_HF_MAX_JSON bytes; symlinks followed,
 * only regular files) and parses it as above. */
pn_status pn_hf_json_load(const char *path, json_t **out, pn_error *err);

/* Key writing from a merged config (hf_keys.c). */
pn_status pn_hf_keys_write(const char *dir, const json_t *root, const json_t *hp,
                           const pn_hf_config *cfg, const pn_hf_opts *opts, int file_type,
                           gguf_writer *w, pn_error *err);

/* Completeness and consistency against the config (hf_arch.c): every tensor
 * a checkpoint of the architecture has is among the n kept tensors, with
 * the shape the config gives it, and no other is kept. */
pn_status pn_hf_check_arch(const char *dir, const json_t *hp, const pn_hf_config *cfg, bool no_mtp,
                           const pn_hf_tensor *tensors, size_t n, pn_error *err);

#endif
