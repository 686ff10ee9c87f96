/* hf.h - a Hugging Face checkpoint (Qwen3.5 family) read as the GGUF model
 * that llama.cpp's convert_hf_to_gguf.py (tag v0.5.0) writes from it.
 *
 * The conversion rules are a reusable API (docs/hf.md states them):
 *   - pn_hf_map_name: the tensor name mapping (vision tensors dropped,
 *     language_model. stripped, mtp.* to blk.L.* / nextn.*);
 *   - pn_hf_plan_tensor: for one source tensor, its GGUF name, shape, type
 *     and the transform applied to its rows;
 *   - pn_hf_convert_row: the transform applied to one row;
 *   - pn_hf_set_keys: config.json and the tokenizer to GGUF keys.
 * pn_hf_open puts them together for a folder; pn_hf_reader reads a tensor's
 * converted bytes with memory bounded by its buffer, whatever the tensor's
 * size. pn_hf_open_gguf opens the folder as a gguf_reader (gguf/'s virtual
 * reader): every tool that reads a GGUF reads the folder through it.
 *
 * Every input is hostile: each failure is PN_ERR_FORMAT / PN_ERR_TENSOR /
 * PN_ERR_TYPE / PN_ERR_IO / PN_ERR_TRUNCATED with a message naming the file
 * and the tensor, key or byte offset. Time and memory are linear in the
 * size of the headers and JSON files. No global mutable state.
 */
#ifndef PN_HF_H
#define PN_HF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "gguf/gguf.h"

/* The largest safetensors header: the format's own limit (the safetensors
 * crate refuses a header above 100,000,000 bytes); the largest JSON file. */
#define PN_HF_MAX_HEADER 100000000u
#define PN_HF_MAX_JSON (256u * 1024u * 1024u)

/* Source dtypes of safetensors that are read. */
typedef enum pn_hf_dtype {
    PN_HF_BF16 = 0,
    PN_HF_F16 = 1,
    PN_HF_F32 = 2,
} pn_hf_dtype;

/* --outtype: auto is bf16 for a bf16 checkpoint (the converter's heuristic:
 * the dtype of the first tensor of 2 or more dims), f16 otherwise. */
typedef enum pn_hf_outtype {
    PN_HF_OUT_AUTO = 0,
    PN_HF_OUT_BF16,
    PN_HF_OUT_F16,
    PN_HF_OUT_F32,
} pn_hf_outtype;

typedef struct pn_hf_opts {
    pn_hf_outtype outtype;
    bool no_mtp;               /* --no-mtp: drop the MTP layer */
    const char *tokenizer_pre; /* tokenizer.ggml.pre when the pattern is unknown; NULL */
} pn_hf_opts;

/* One tensor of a safetensors shard, as its header states it. */
typedef struct pn_hf_st_tensor {
    char *name; /* NUL-terminated */
    pn_hf_dtype dtype;
    uint32_t n_dims; /* 0..8 */
    uint64_t shape[8];
    uint64_t begin, end; /* byte range, relative to the data section */
} pn_hf_st_tensor;

/* A parsed safetensors header. */
typedef struct pn_hf_st_header {
    uint64_t data_offset; /* 8 + header length */
    size_t n_tensors;
    pn_hf_st_tensor *tensors; /* in header order */
} pn_hf_st_header;

/* Parses a safetensors header held in memory: `bytes` is the whole file or
 * at least its first 8 + header-length bytes, `file_size` the file's size.
 * Refused: a length above PN_HF_MAX_HEADER or past the file, JSON that is not
 * an object or has duplicate names, a tensor entry of the wrong types, a dtype
 * other than BF16/F16/F32 (named), shape x dtype size != byte range, offsets
 * out of order, overlapping or outside the data. `name` is used in messages. */
pn_status pn_hf_st_parse(const uint8_t *bytes, size_t n_bytes, uint64_t file_size, const char *name,
                         pn_hf_st_header *out, pn_error *err);
void pn_hf_st_free(pn_hf_st_header *h);

/* The transform applied to a tensor's rows. A GGUF row is ne[0] elements
 * (the source's last dimension). */
typedef enum pn_hf_op {
    PN_HF_OP_NONE = 0,
    PN_HF_OP_NEG_EXP,  /* -exp(x), in double, rounded once to f32 */
    PN_HF_OP_PLUS_ONE, /* x + 1 in f32 */
} pn_hf_op;

typedef struct pn_hf_transform {
    pn_hf_op op;
    /* V-head reorder of rows [row_perm_start, n_rows): row r takes source row
     * start + (k * vpk + j) * hd + d where r - start = (j * nk + k) * hd + d. */
    bool row_perm;
    uint64_t row_perm_start, row_nk, row_vpk, row_hd;
    /* The same reorder of the elements of every row (columns). */
    bool col_perm;
    uint64_t col_nk, col_vpk, col_hd;
} pn_hf_transform;

/* The config values the rules need (text_config merged into the root). */
typedef struct pn_hf_config {
    char arch[64]; /* architectures[0] */
    uint64_t n_layer, n_mtp, n_embd, n_ff, n_head, n_head_kv, head_dim, vocab_size;
    uint64_t lin_nk, lin_nv, lin_hk, lin_hv, conv_kernel;
    bool has_head_dim;
} pn_hf_config;

/* The tensor name mapping: a source name to its GGUF name (out, NUL-ended,
 * at most out_len bytes). Returns 1 when mapped, 0 when the converter drops
 * the tensor (vision, MTP under no_mtp, buffers it never writes), -1 when it
 * cannot be mapped (err names the tensor). */
int pn_hf_map_name(const char *src_name, const pn_hf_config *cfg, bool no_mtp, char *out,
                   size_t out_len, pn_error *err);

/* One tensor of the converted model. */
typedef struct pn_hf_tensor {
    char name[96];        /* GGUF name */
    const char *src_name; /* the safetensors name (owned by the model) */
    uint32_t shard;       /* index into the model's shards */
    pn_hf_dtype src_dtype;
    uint32_t src_n_dims; /* the shape the safetensors header states */
    uint64_t src_shape[8];
    uint64_t src_begin; /* file offset of the source bytes */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* GGUF order, unused dims 1 */
    int type;                  /* ggml type of the output: F32, F16 or BF16 */
    pn_hf_transform tf;
    uint64_t n_rows, row_elems; /* rows of ne[0] elements */
} pn_hf_tensor;

/* Plans tensor `src` (already mapped to `gguf_name`): output shape (after
 * the conv1d squeeze), type (F32 for 1-D, *_norm.weight, ssm_conv1d and
 * names not ending .weight; else out_type) and transform. Refused when the
 * shape does not fit the transform (PN_ERR_TENSOR naming the tensor). */
pn_status pn_hf_plan_tensor(const pn_hf_config *cfg, const char *src_name,
                            const pn_hf_st_tensor *src, const char *gguf_name, int out_type,
                            pn_hf_tensor *out, pn_error *err);

/* Converts one row: `src` holds every source row of the tensor the row needs
 * (source row `src_row`, row_elems elements of src_dtype), dst receives
 * row_elems elements of t->type. */
void pn_hf_convert_row(const pn_hf_tensor *t, const uint8_t *src_row, uint8_t *dst);
/* Source row of output row r. */
uint64_t pn_hf_src_row(const pn_hf_tensor *t, uint64_t r);

/* Bytes of one element of a ggml type among F32/F16/BF16. */
size_t pn_hf_type_size(int type);

/* ---- the folder ---- */
typedef struct pn_hf_model pn_hf_model;

/* Opens SRC: a model folder, its config.json, its model.safetensors.index.json
 * or a single-shard model.safetensors. Reads and checks every header and JSON
 * file; reads no tensor data. */
pn_status pn_hf_open(const char *src, const pn_hf_opts *opts, pn_hf_model **out, pn_error *err);
void pn_hf_close(pn_hf_model *m);

/* True when path names something pn_hf_open takes (a folder holding
 * config.json, or a file named config.json, *.safetensors.index.json or
 * *.safetensors). Looks only at names and the folder's entries. */
bool pn_hf_is_source(const char *path);

/* The files SRC (as pn_hf_open takes it) is read from, as paths in its
 * folder, whether or not each exists: config.json, the index, every shard
 * the index names (or model.safetensors), tokenizer.json,
 * tokenizer_config.json, chat_template.jinja, and the file SRC names.
 * Sorted, each once. No output may be any of them (io/source_open.h). */
typedef struct pn_hf_inputs {
    size_t n;
    char **path;
} pn_hf_inputs;
pn_status pn_hf_input_files(const char *src, pn_hf_inputs *out, pn_error *err);
void pn_hf_inputs_free(pn_hf_inputs *in);

const char *pn_hf_dir(const pn_hf_model *m);
size_t pn_hf_n_tensors(const pn_hf_model *m);
const pn_hf_tensor *pn_hf_tensor_at(const pn_hf_model *m, size_t i);
size_t pn_hf_n_shards(const pn_hf_model *m);
const char *pn_hf_shard_path(const pn_hf_model *m, size_t s);
int pn_hf_shard_fd(const pn_hf_model *m, size_t s);
uint64_t pn_hf_shard_size(const pn_hf_model *m, size_t s);

/* general.name of the model in folder dir: the folder's base name however
 * the path is typed (X, X/, ./X/, /abs/X: "X"; ".", "..": the resolved
 * folder's), and NAME for a hub-cache snapshot .../models--ORG--NAME/
 * snapshots/REV (hf_name.c). PN_ERR_FORMAT when it exceeds out_len - 1. */
pn_status pn_hf_model_name(const char *dir, char *out, size_t out_len, pn_error *err);

/* Writes every key the converter writes, in its order (general.architecture,
 * general.type and general.name first; general.name is pn_hf_model_name). */
pn_status pn_hf_set_keys(const pn_hf_model *m, gguf_writer *w, pn_error *err);
/* Adds every tensor info in the converter's order. */
pn_status pn_hf_add_tensors(const pn_hf_model *m, gguf_writer *w, pn_error *err);

/* Reads converted tensor bytes. One handle per thread; pn_hf_open_gguf's
 * reader keeps a pool of them. */
typedef struct pn_hf_reader pn_hf_reader;
/* buf_bytes bounds the source bytes read at once (at least one source row
 * is always held). */
pn_status pn_hf_reader_open(const pn_hf_model *m, size_t buf_bytes, pn_hf_reader **out,
                            pn_error *err);
void pn_hf_reader_close(pn_hf_reader *rd);
/* Bytes [off, off + n) of tensor i's converted data. */
pn_status pn_hf_read(pn_hf_reader *rd, size_t i, uint64_t off, void *dst, size_t n, pn_error *err);

/* The folder as a virtual gguf_reader (gguf_reader_open_virtual): its keys
 * and tensor infos are exactly the converted model's, built in memory, and
 * its tensor reads are converted from the shards on demand (several threads
 * may read at once; each read holds one pooled pn_hf_reader). The reader
 * owns m from here on (also when this fails): gguf_reader_close closes it.
 * Its name is the folder's. */
pn_status pn_hf_open_gguf(pn_hf_model *m, gguf_reader **out, pn_error *err);
/* pn_hf_open then pn_hf_open_gguf. */
pn_status pn_hf_open_source(const char *src, const pn_hf_opts *opts, gguf_reader **out,
                            pn_error *err);


#endif
