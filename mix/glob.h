/* glob.h - tensor-name patterns of the recipe language.
 *
 * A pattern matches the WHOLE name. '*' matches any run of characters
 * (including '.', so "*.attn_k.weight" matches "blk.12.attn_k.weight"), '?'
 * matches exactly one character, every other character matches itself
 * (case-sensitive; there are no classes and no escapes, since GGUF tensor
 * names never need them).
 */
#ifndef PN_MIX_GLOB_H
#define PN_MIX_GLOB_H

#include <stdbool.h>

bool pn_glob_match(const char *pattern, const char *name);

#endif
