/* check_internal.h - shared by the check/check*.c files only.
 *
 * The check runs in stages over one context: structure (check.c), pn.*
 * metadata (check_meta.c), recipe conformance (check_recipe.c), then one data
 * pass over every tensor's bytes (check_data.c: CRC-32, PN validation and the
 * comparison with the source in the same pass).
 */
#ifndef PN_PIPELINE_CHECK_INTERNAL_H
#define PN_PIPELINE_CHECK_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "gguf/gguf.h"
#include "check/check.h"

typedef struct pn_check_ctx {
    pn_check_report *rep;
    pn_check_options opt;
    gguf_reader *r;      /* the file checked */
    gguf_reader *src;    /* --source, or NULL */
    bool nomem;          /* a finding could not be recorded */
    size_t findings_cap; /* allocated entries of rep->findings */
    /* From the metadata stage, used by the data pass. */
    bool rotation_hadamard; /* PN tensors are rotated (pn.rotation.type) */
    bool rotation_known;    /* false: the rotation keys are unusable */
    int rotation_cap;       /* pn.rotation.block_size, or the default */
    const gguf_kv *crc_kv;  /* pn.tensor_crc32 when well-formed, else NULL */
    /* The file findings name when pn_check_add is given no tensor of the
     * file: NULL for the default, the first split's (the keys' file). */
    const char *finding_file;
} pn_check_ctx;

/* Records a finding; returns it (so the caller may set row, block, count) or
 * NULL when out of memory (ctx->nomem is then set). Its file is that of the
 * split holding `tensor` when the file has it, else c->finding_file, else
 * the first split's. */
pn_finding *pn_check_add(pn_check_ctx *c, pn_severity sev, const char *code, const char *tensor,
                         const char *key, int64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* A NUL-terminated copy of a GGUF string (NULL when out of memory). */
char *pn_check_strdup_gguf(gguf_str s);

/* Walks the elements of an array of strings in order, each step O(1)
 * (gguf_kv_arr_str walks from the first element on every call). */
typedef struct pn_str_walk {
    const uint8_t *p;
} pn_str_walk;
pn_str_walk pn_str_walk_start(const gguf_kv *kv);
gguf_str pn_str_walk_next(pn_str_walk *w);

/* check_model.c: the header against the tensors, the tokenizer (ARCH-*,
 * TOKENIZER-*: gguf/model_check.h). */
pn_status pn_check_model(pn_check_ctx *c, pn_error *err);
pn_status pn_check_metadata(pn_check_ctx *c, pn_error *err);
/* check_source.c: the pn.source.* keys' form (from pn_check_metadata), and
 * with --source whether it is the source the file was made from. */
void pn_check_source_keys(pn_check_ctx *c);
pn_status pn_check_source_identity(pn_check_ctx *c, pn_error *err);
pn_status pn_check_recipe(pn_check_ctx *c, pn_error *err);
/* check_recipe.c: the MTP layer of the file, the block that holds nextn.*
 * tensors as the converter writes it; -1 when the file has none. */
long pn_check_mtp_layer(const pn_check_report *rep);
/* check_source.c: whether --source is read without its MTP layer, as
 * pn-quantize read it: the file holds no MTP layer. */
pn_status pn_check_source_drops_mtp(const pn_check_ctx *c, bool *drop, pn_error *err);
/* check_imatrix.c: --imatrix (and with --source, the promotions it chooses). */
pn_status pn_check_imatrix(pn_check_ctx *c, pn_error *err);
pn_status pn_check_data(pn_check_ctx *c, pn_error *err);

#endif
