/* pn_keys.h - the name of every key the PN format and this project write.
 *
 * The single source of truth for key names, as quant/blocks.h is for block
 * layouts: code names a key with one of these macros, never with a string of
 * its own, so that a change to a key, or a search for every reader and writer
 * of one, starts here. tests/layout (scripts/check-keys) fails when a "pn.
 * string literal stands anywhere else in the product code.
 *
 * To add a key: define it below in its group (PN_KEY_<GROUP>_<NAME>), say in
 * its comment what it holds (type and meaning, as docs/format.md's table of
 * the output file does), add it to that table, and to pn-check's rules
 * (check/check_meta.c key_rules) so that pn-check knows it. Keys a feature
 * of its own writes (pn.mix.imatrix.*, ...) get a group of their own here.
 * Values are in docs/format.md#the-output-file; this header only names them.
 */
#ifndef PN_GGUF_PN_KEYS_H
#define PN_GGUF_PN_KEYS_H

/* The value of PN_KEY_FORMAT: the format this project writes and reads. */
#define PN_FORMAT_NAME "PNX-FORMAT-v0"

/* Every PN key starts with this; a key that does not is the model's. */
#define PN_KEY_PREFIX "pn."
#define PN_KEY_PREFIX_LEN (sizeof PN_KEY_PREFIX - 1)

/* ---- the format (docs/format.md#the-output-file) ---- */

/* string: PN_FORMAT_NAME. */
#define PN_KEY_FORMAT PN_KEY_PREFIX "format"
/* string: "<recipe mix name>+<number promoted>", e.g. "P0k+19". */
#define PN_KEY_MIX PN_KEY_PREFIX "mix"
/* array of string: the promoted tensors' names, in tensor order. */
#define PN_KEY_MIX_PROMOTED PN_KEY_PREFIX "mix.promoted"
/* string: "hadamard", or "none" when the weights are not rotated. */
#define PN_KEY_ROTATION_TYPE PN_KEY_PREFIX "rotation.type"
/* u32: the rotation's block cap (1024 by default); absent with "none". */
#define PN_KEY_ROTATION_BLOCK_SIZE PN_KEY_PREFIX "rotation.block_size"
/* array of u32, one per tensor in tensor order: zlib's CRC-32 of its data
 * bytes, padding excluded. */
#define PN_KEY_TENSOR_CRC PN_KEY_PREFIX "tensor_crc32"
/* string: the program and its version, the line `pn-quantize --version`
 * prints. */
#define PN_KEY_QUANTIZER PN_KEY_PREFIX "quantizer"

/* array of string: only when pn-quantize was given type overrides, each as
 * typed and in order ("--tensor-type attn_v=q8_0", "--output-tensor-type
 * bf16", "--token-embedding-type f16"): rules that stood before the
 * recipe's (mix/recipe.h); pn-check --recipe takes the same options. */
#define PN_KEY_MIX_OVERRIDES PN_KEY_PREFIX "mix.overrides"

/* ---- the source identity (docs/reuse.md#the-keys; io/source_id.h) ----
 * Arrays are in tensor order: element i is the source tensor of output
 * tensor i (same name, same position). */

/* Every source-identity key starts with this. */
#define PN_KEY_SOURCE_PREFIX PN_KEY_PREFIX "source."
#define PN_KEY_SOURCE_PREFIX_LEN (sizeof PN_KEY_SOURCE_PREFIX - 1)
/* u64: FNV-1a 64 of the model the source header describes (keys but split.*,
 * tensor names, shapes and types; not the layout). */
#define PN_KEY_SOURCE_HEADER PN_KEY_SOURCE_PREFIX "header_fnv1a64"
/* u32: the rows of each tensor PN_KEY_SOURCE_SAMPLE_CRC covers (M of the
 * rule: rows floor(i*R/M), every row when R <= M). */
#define PN_KEY_SOURCE_SAMPLE_ROWS PN_KEY_SOURCE_PREFIX "sample_rows"
/* array of u32: per tensor, the CRC-32 of the source bytes of the sampled
 * rows, concatenated in row order. */
#define PN_KEY_SOURCE_SAMPLE_CRC PN_KEY_SOURCE_PREFIX "sample_crc32"
/* array of u32: per tensor, the CRC-32 of the source tensor's whole data (for
 * a tensor copied with --reuse, PREV's record). */
#define PN_KEY_SOURCE_TENSOR_CRC PN_KEY_SOURCE_PREFIX "tensor_crc32"
/* array of u32: per tensor, the ggml type id of the source tensor. */
#define PN_KEY_SOURCE_TYPE PN_KEY_SOURCE_PREFIX "type"

/* ---- the importance matrix a file was made with (mix/imatrix.h;
 * docs/format.md#the-importance-matrix) ---- */

/* u64: FNV-1a 64 of the imatrix entries that name a tensor of the model
 * (pn_imatrix_hash_used). */
#define PN_KEY_MIX_IMATRIX_HASH PN_KEY_PREFIX "mix.imatrix.entries_fnv1a64"
/* u32: how many entries that hash covers. */
#define PN_KEY_MIX_IMATRIX_USED PN_KEY_PREFIX "mix.imatrix.entries_used"
/* string: how the promotions were measured with the imatrix: "unweighted"
 * (the default: the imatrix does not change the choice) or "weighted"
 * (--imatrix-promotion weighted). Absent in a file with the two keys above
 * made before it existed: "weighted", what those builds did. */
#define PN_KEY_MIX_IMATRIX_PROMOTION PN_KEY_PREFIX "mix.imatrix.promotion"
/* llama-quantize's own keys (not PN keys), written so that tools reading
 * them work: string, the imatrix file's base name; string, its first
 * dataset; u32, its entry count; u32, its chunk count (when above 0). */
#define PN_KEY_QUANTIZE_IMATRIX_FILE "quantize.imatrix.file"
#define PN_KEY_QUANTIZE_IMATRIX_DATASET "quantize.imatrix.dataset"
#define PN_KEY_QUANTIZE_IMATRIX_ENTRIES "quantize.imatrix.entries_count"
#define PN_KEY_QUANTIZE_IMATRIX_CHUNKS "quantize.imatrix.chunks_count"

/* ---- split sets (docs/split.md; gguf/gguf_split.h) ---- */

/* u64 in every split of a set of two or more: FNV-1a 64 of what the set is
 * (gguf_split.h says what goes in). Any split set's key, not a PN key. */
#define PN_KEY_SPLIT_SET_ID PN_KEY_PREFIX "split.set_fnv1a64"

/* ---- the header hash (docs/format.md#the-header-hash; gguf/header_hash.h) ----
 * The writer's own record of the key-value section it wrote: the four keys
 * come after every other key (before llama.cpp's split keys, which end a
 * split's section). Hashed: every key but these (every key under
 * PN_KEY_HEADER_PREFIX) and llama.cpp's split keys (split.no, split.count,
 * split.tensors.count). */

/* Every header-hash key starts with this; none of them is hashed. */
#define PN_KEY_HEADER_PREFIX PN_KEY_PREFIX "header."
#define PN_KEY_HEADER_PREFIX_LEN (sizeof PN_KEY_HEADER_PREFIX - 1)
/* array of string: the hashed keys' names, in file order. */
#define PN_KEY_HEADER_KEYS PN_KEY_HEADER_PREFIX "keys"
/* array of u64: per hashed key, in file order, FNV-1a 64 of its u32 value
 * type and its value as stored. */
#define PN_KEY_HEADER_VALUES PN_KEY_HEADER_PREFIX "value_fnv1a64"
/* u64: FNV-1a 64 of the file's tensor infos as stored but their offsets
 * (name length, name, n_dims, ne[], type), in file order: which tensors the
 * record was written with (a tool that copies the keys into a file of other
 * tensors, as llama-quantize does, leaves a record that is not the file's). */
#define PN_KEY_HEADER_TENSORS PN_KEY_HEADER_PREFIX "tensors_fnv1a64"
/* u64: FNV-1a 64 of every hashed key as stored (name length, name, value
 * type, value), in file order. */
#define PN_KEY_HEADER_HASH PN_KEY_HEADER_PREFIX "fnv1a64"

/* ---- pn-dequant's output (dequant/dequant.h) ---- */

/* A decoded file's keys: PN_KEY_PREFIX "X" is written as
 * PN_KEY_DECODED_PREFIX "X" (the weights are no longer PN). */
#define PN_KEY_DECODED_PREFIX "pn_decoded."
/* bool: whether pn-dequant undid the rotation. */
#define PN_KEY_DECODED_ROTATION_UNDONE PN_KEY_DECODED_PREFIX "rotation_undone"

#endif
