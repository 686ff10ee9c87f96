/* recipe.h - the mix recipe language: which type each tensor is stored as.
 *
 * A recipe is UTF-8/ASCII text, one statement per line (recipes/README.md is
 * the user's reference; this is the contract the code keeps):
 *
 *   # comment                 '#' to the end of the line is ignored, anywhere
 *   mix <name>                required, once; name = [A-Za-z0-9._-]{1,63}.
 *                             The output's pn.mix is "<name>+<N promoted>".
 *   rotation hadamard [cap]   required, once (or "rotation none"); cap is a
 *                             power of two in 1..4096, default 1024
 *   promote <N>               optional, once: default count of pn3t -> pn4t
 *                             promotions (default 0)
 *   file_type <N>             optional, once: general.file_type to write (u32);
 *                             without it the output has no general.file_type
 *   mtp keep | mtp drop       optional, once: whether the source's MTP layer
 *                             (the converter's blk.L.* with nextn.*) is
 *                             written; without it, kept (as the converter
 *                             keeps it). pn-quantize's --keep-mtp / --no-mtp
 *                             override it.
 *   rule <selector>... => <type>[|<type>...]
 *
 * Rules are tried in file order and the first that matches a tensor wins.
 * A selector is either a name pattern (mix/glob.h: whole name, '*' and '?')
 * or a shape condition, told apart by the characters "=<>!%", which tensor
 * names never contain. A rule matches when ANY of its patterns matches the
 * name (no pattern: every name) AND ALL its conditions hold. A condition is
 *   <var>[%<m>]<op><value>[,<value>...]
 *   var  K (ne[0], the row length), rows (ne[1]*ne[2]*ne[3]), dims (n_dims)
 *   %m   compare var mod m (m >= 1) instead of var
 *   op   = or == (var equals one of the values), != (equals none of them),
 *        < <= > >= (one value)
 * values are non-negative decimal integers.
 * The type chain lists up to 8 types; a tensor gets the first whose block
 * divides K. The types a recipe may name are those the toolchain writes:
 * f32 f16 bf16 q8_0 q4_K q3_K pn3t pn4t (case-insensitive).
 *
 * Errors: PN_ERR_RECIPE with "<source>:<line>: <what was expected>, found
 * '<what was there>'". Ownership: a parsed recipe owns all its strings;
 * free it with pn_recipe_free. Nothing here prints; parsing allocates only
 * from the text's own size.
 */
#ifndef PN_MIX_RECIPE_H
#define PN_MIX_RECIPE_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "gguf/pn_keys.h"

#define PN_MIX_NAME_MAX 64 /* bytes, with the terminator */
#define PN_RECIPE_MAX_CHAIN 8
#define PN_RECIPE_MAX_VALUES 8
#define PN_RECIPE_MAX_BYTES (1u << 20) /* a recipe file larger than this is refused */

typedef enum pn_rotation_kind {
    PN_ROTATION_NONE = 0,
    PN_ROTATION_HADAMARD = 1,
} pn_rotation_kind;

typedef enum pn_recipe_mtp {
    PN_RECIPE_MTP_UNSTATED = 0, /* no mtp statement: kept */
    PN_RECIPE_MTP_KEEP,
    PN_RECIPE_MTP_DROP,
} pn_recipe_mtp;

typedef enum pn_shape_var {
    PN_SHAPE_K = 0,    /* ne[0] */
    PN_SHAPE_ROWS = 1, /* ne[1] * ne[2] * ne[3] */
    PN_SHAPE_DIMS = 2, /* n_dims */
} pn_shape_var;

typedef enum pn_cmp {
    PN_CMP_EQ = 0, /* one of values[] */
    PN_CMP_NE,     /* none of values[] */
    PN_CMP_LT,
    PN_CMP_LE,
    PN_CMP_GT,
    PN_CMP_GE,
} pn_cmp;

typedef struct pn_recipe_cond {
    pn_shape_var var;
    int64_t modulus; /* 0: the variable itself; m >= 1: var % m */
    pn_cmp cmp;
    int n_values; /* >= 1; exactly 1 unless EQ/NE */
    int64_t values[PN_RECIPE_MAX_VALUES];
} pn_recipe_cond;

typedef struct pn_recipe_rule {
    int line;   /* 1-based line in the recipe; 0: an option the user typed (an override) */
    char *text; /* the statement as written, comment and edges trimmed */
    size_t n_patterns;
    char **patterns;
    /* --tensor-type's PATTERN as a POSIX extended regular expression,
     * searched in the name (NULL for a recipe's rules): the rule selects a
     * name either pattern matches */
    regex_t *regex;
    size_t n_conds;
    pn_recipe_cond *conds;
    int n_types;                    /* 1..PN_RECIPE_MAX_CHAIN */
    int types[PN_RECIPE_MAX_CHAIN]; /* ggml type ids, in preference order */
} pn_recipe_rule;

typedef struct pn_recipe {
    char *source; /* file path or the name given to parse (messages) */
    char name[PN_MIX_NAME_MAX];
    pn_rotation_kind rotation;
    int rotation_cap; /* the block cap when hadamard, else 0 */
    int64_t promote;  /* default promotion count */
    bool has_file_type;
    uint32_t file_type;
    pn_recipe_mtp mtp; /* the mtp statement */
    int mtp_line;      /* its line, 0 when there is none */
    size_t n_rules;
    pn_recipe_rule *rules;
} pn_recipe;

/* Parses len bytes of recipe text. source names the text in messages. */
pn_status pn_recipe_parse(const char *text, size_t len, const char *source, pn_recipe **out,
                          pn_error *err);
/* Reads and parses a recipe file (PN_ERR_IO when it cannot be read). */
pn_status pn_recipe_load(const char *path, pn_recipe **out, pn_error *err);
void pn_recipe_free(pn_recipe *r);

/* True when the rule selects this tensor (see the matching rules above). */
bool pn_recipe_rule_matches(const pn_recipe_rule *rule, const char *name, uint32_t n_dims,
                            const int64_t ne[4]);
/* True when one of the rule's patterns (or its regular expression) matches
 * the name, whatever its shape conditions say. */
bool pn_recipe_rule_names(const pn_recipe_rule *rule, const char *name);
/* The first rule that selects the tensor, or NULL. */
const pn_recipe_rule *pn_recipe_match(const pn_recipe *r, const char *name, uint32_t n_dims,
                                      const int64_t ne[4]);
/* The first type of the rule's chain whose block divides K, with its position
 * in the chain in *chain_index (may be NULL); -1 when none divides. */
int pn_recipe_rule_pick_type(const pn_recipe_rule *rule, int64_t K, int *chain_index);

/* The overrides of llama-quantize's options, in front of a recipe's rules
 * (recipe_override.c): every --tensor-type in the order given (PATTERN is a
 * POSIX extended regular expression searched in the name, as llama-quantize
 * searches it with std::regex_search: "attn_v", "ffn_(up|gate)",
 * "blk\.[0-9]+\.ffn_down"; one that holds * or ? also selects every name it
 * matches as a glob of the whole name, as recipes write patterns, so
 * "*.attn_k.weight" and "blk.?.attn_v.weight" select what they always did),
 * then --output-tensor-type (output.weight), then --token-embedding-type
 * (token_embd.weight); the first match wins. A tensor an override types is
 * never a promotion candidate (mix/plan.h): the user's type is final. */
typedef enum pn_override_kind {
    PN_OVERRIDE_TENSOR_TYPE = 0, /* value "PATTERN=TYPE" */
    PN_OVERRIDE_OUTPUT,          /* value "TYPE" */
    PN_OVERRIDE_TOKEN_EMBD,      /* value "TYPE" */
} pn_override_kind;

/* The output key that records them, in the order given, is
 * PN_KEY_MIX_OVERRIDES (gguf/pn_keys.h). */
typedef struct pn_recipe_override {
    pn_override_kind kind;
    const char *value;
} pn_recipe_override;

/* Puts the overrides' rules before r's (each rule's text is the option as
 * typed, its line 0). PN_ERR_USAGE naming the option for a malformed value,
 * a PATTERN that is neither a regular expression nor a glob, or a type the
 * toolchain does not write. */
pn_status pn_recipe_apply_overrides(pn_recipe *r, const pn_recipe_override *ov, size_t n,
                                    pn_error *err);
/* The option as typed: "--tensor-type attn_v=q8_0" (what the output
 * records in pn.mix.overrides). */
void pn_recipe_override_text(const pn_recipe_override *ov, char *buf, size_t size);

/* True for the types a recipe may name (the ones the toolchain writes). */
bool pn_recipe_type_supported(int type);

#endif
