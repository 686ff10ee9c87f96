/* source_open.h - opening a job's SRC: a GGUF file (or split set), or a
 * Hugging Face model folder (its config.json, its index, a single
 * model.safetensors), which is read as the GGUF that llama.cpp's converter
 * writes from it at --outtype bf16 (hf/hf.h: a virtual reader, converted
 * on the fly). Every job that takes SRC opens it here. */
#ifndef PN_IO_SOURCE_OPEN_H
#define PN_IO_SOURCE_OPEN_H

#include <stdbool.h>

#include "common/pn_error.h"
#include "gguf/gguf.h"

typedef struct pn_source_opts {
    /* Drop the MTP layer, as the converter's --no-mtp: a folder is converted
     * without it; a GGUF is read without the blocks from block_count -
     * nextn_predict_layers on, nextn_predict_layers removed, block_count and
     * attention.recurrent_layers cut (a GGUF without an MTP layer is read as
     * it is). */
    bool no_mtp;
    const char *tokenizer_pre; /* a folder: tokenizer.ggml.pre when its pattern is unknown */
} pn_source_opts;

/* True when path is a Hugging Face source rather than a GGUF: what
 * pn_hf_is_source takes, or any folder (one without config.json is refused
 * at open as a folder that lacks it). */
bool pn_source_is_hf(const char *path);

/* Refuses a path a program would write (`what`: "the output", "--report")
 * when writing it could change a file SRC is read from, whatever --force
 * says: for a Hugging Face source every file of pn_hf_input_files (its
 * config.json, index, shards, tokenizer files, chat template), for a GGUF
 * SRC itself. A target is refused when it is one of them (one file by device
 * and inode: a link to one, a hard link, another spelling), or takes one's
 * place (the same folder and name, whether or not that file exists, so an
 * absent chat_template.jinja is not created), and the same for what a
 * target that is a symbolic link points at. PN_ERR_USAGE with a message
 * that starts with the target and names the input:
 *   "DIR/config.json: the output is a file of the input (DIR/config.json,
 *    of the source DIR); choose another path". */
pn_status pn_source_check_target(const char *src, const char *target, const char *what,
                                 pn_error *err);

/* Opens SRC; opts may be NULL. */
pn_status pn_source_open(const char *path, const pn_source_opts *opts, gguf_reader **out,
                         pn_error *err);

#endif
