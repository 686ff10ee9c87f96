/* plan.h - the conversion plan: every tensor's output type, rotation and size.
 *
 * pn_plan_build applies a recipe (mix/recipe.h) to the source's tensor list:
 *   - each tensor gets the first matching rule, and from its chain the first
 *     type whose block divides K = ne[0];
 *   - a tensor is rotated exactly when it is stored as pn3t/pn4t and the
 *     recipe's rotation is hadamard, with block pn_hadamard_block_size(K, cap);
 *   - a promotion candidate is a tensor a recipe's rule assigns pn3t whose
 *     K is also a multiple of 64 (so pn4t can hold it); a tensor an option
 *     the user typed assigns (--tensor-type, a rule of line 0) is none: its
 *     type is final;
 *   - a --tensor-type that names no tensor of the model is PN_ERR_USAGE
 *     naming it;
 *   - its output size is pn_type_row_bytes(type, K) * rows,
 *     rows = ne[1] * ne[2] * ne[3].
 * Every tensor no rule matches is collected and reported in one error
 * (PN_ERR_UNMATCHED); a chain none of whose types divides K is PN_ERR_RECIPE
 * naming the tensor, K, the chain and the rule's line. Sources must be float
 * (f32, f16, bf16): PN_ERR_TYPE otherwise.
 *
 * Promotions turn candidates into pn4t. Each promote call first undoes the
 * previous promotions, so the plan always holds exactly one set. The mix name
 * written to pn.mix is "<recipe mix name>+<number promoted>", e.g. "P0k+19".
 *
 * Sizes: GGUF places every tensor at an offset that is a multiple of the
 * alignment and pads after each tensor's bytes, the last one included (as
 * ggml's writer does), so
 *   file size = header bytes (up to the data section, itself padded to the
 *               alignment) + pn_plan_data_bytes(plan, alignment).
 *
 * Ownership: the plan copies every name and everything it needs from the
 * recipe; free it with pn_plan_free. Nothing here prints.
 */
#ifndef PN_MIX_PLAN_H
#define PN_MIX_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "mix/recipe.h"

/* A source tensor as the plan needs it. name is borrowed (copied by build). */
typedef struct pn_tensor_desc {
    const char *name;
    uint32_t n_dims; /* 1..4 */
    int64_t ne[4];   /* unused dims are 1 */
    int src_type;    /* ggml type id of the source data */
} pn_tensor_desc;

typedef struct pn_plan_tensor {
    char *name; /* owned copy */
    uint32_t n_dims;
    int64_t ne[4];
    int src_type;
    int64_t rows;      /* ne[1] * ne[2] * ne[3] */
    int64_t n_weights; /* ne[0] * rows */
    int rule_line;     /* the recipe line of the rule that chose the type */
    int chain_index;   /* position of the chosen type in the rule's chain (0: first) */
    int base_type;     /* type from the rule, before promotion */
    int type;          /* type written: base_type, or pn4t when promoted */
    bool rotated;
    int rotation_block; /* B when rotated, else 0 */
    bool candidate;     /* base_type pn3t from a recipe's rule and K % 64 == 0 */
    bool promoted;
    int promote_rank; /* order of promotion (0 first), -1 when not promoted */
    uint64_t bytes;   /* output data bytes (no padding) */
} pn_plan_tensor;

typedef struct pn_plan {
    char mix_name[PN_MIX_NAME_MAX]; /* the recipe's name, without "+N" */
    pn_rotation_kind rotation;
    int rotation_cap;        /* 0 when rotation is none */
    int64_t promote_default; /* the recipe's 'promote' count */
    bool has_file_type;
    uint32_t file_type;
    size_t n_tensors;
    pn_plan_tensor *tensors; /* in source order */
    size_t n_candidates;
    size_t n_promoted;
} pn_plan;

typedef struct pn_plan_totals {
    uint64_t payload_bytes; /* sum of tensor bytes, no padding */
    uint64_t pn_bytes;      /* of the pn3t/pn4t tensors */
    uint64_t other_bytes;   /* of every other tensor */
    uint64_t n_weights;     /* every tensor */
    uint64_t pn_weights;    /* of the pn3t/pn4t tensors */
    double bpw_pn;          /* 8 * pn_bytes / pn_weights (0 without PN tensors) */
    double bpw_all;         /* 8 * payload_bytes / n_weights */
    size_t n_pn3t, n_pn4t, n_candidates, n_promoted;
} pn_plan_totals;

/* Builds the plan. On PN_ERR_UNMATCHED the message lists as many unmatched
 * names as fit and how many more there are; when details is not NULL,
 * *details then receives the complete list, one name per line (caller frees;
 * NULL on any other outcome). */
pn_status pn_plan_build(const pn_recipe *recipe, const pn_tensor_desc *tensors, size_t n,
                        pn_plan **out, char **details, pn_error *err);
void pn_plan_free(pn_plan *plan);

/* Index of the named tensor, or -1. */
long pn_plan_find(const pn_plan *plan, const char *name);

/* Undoes every promotion. */
void pn_plan_clear_promotions(pn_plan *plan);
/* Promotes one candidate by index, as the next in rank (used by the
 * measurement-driven promotion). PN_ERR_USAGE if not a candidate or already
 * promoted. */
pn_status pn_plan_promote_index(pn_plan *plan, size_t index, pn_error *err);

/* Names of the promoted tensors in tensor order (the order pn.mix.promoted
 * uses), at most cap of them; returns how many there are. The pointers live
 * as long as the plan. */
size_t pn_plan_promoted_names(const pn_plan *plan, const char **names, size_t cap);

/* "<mix name>+<n promoted>" into buf (always terminated); returns the length
 * snprintf would have written. */
int pn_plan_mix_label(const pn_plan *plan, char *buf, size_t size);

/* A rotation as messages spell it: "hadamard:<cap>" for cap > 0, else
 * "none"; into buf (always terminated). */
void pn_rotation_text(int cap, char *buf, size_t size);

void pn_plan_totals_get(const pn_plan *plan, pn_plan_totals *t);

/* Bytes of the data section: each tensor's bytes padded up to the alignment
 * (alignment 0 means 32; must be a power of two otherwise). */
uint64_t pn_plan_data_bytes(const pn_plan *plan, uint64_t alignment);

#endif
