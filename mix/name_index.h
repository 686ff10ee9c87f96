/* name_index.h - finding a tensor name among many in constant time.
 *
 * An open-addressing hash table (common/hash.h's seeded hash, linear
 * probing, at most half full)
 * from NUL-terminated names to indices. The names are borrowed: they must
 * outlive the index and not change. Used where a list of n names is matched
 * against another (a measurement against a plan, duplicate lines), so the
 * work is O(n), not O(n^2). No printing, no global state.
 */
#ifndef PN_MIX_NAME_INDEX_H
#define PN_MIX_NAME_INDEX_H

#include <stdbool.h>
#include <stddef.h>

typedef struct pn_name_index pn_name_index;

/* An empty index sized for about `expected` names; NULL when out of memory. */
pn_name_index *pn_name_index_new(size_t expected);
void pn_name_index_free(pn_name_index *x);

/* Adds name -> value. false when out of memory, or when the name is there
 * already (*old, if not NULL, then receives its value; nothing changes). */
bool pn_name_index_put(pn_name_index *x, const char *name, size_t value, size_t *old);

/* The value of name, or -1 when absent. */
long pn_name_index_get(const pn_name_index *x, const char *name);

#endif
