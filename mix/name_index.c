/* name_index.c - the name-to-index hash table (see name_index.h). */
#include "mix/name_index.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"

typedef struct slot {
    const char *name; /* NULL: empty */
    size_t value;
} slot;

struct pn_name_index {
    slot *slots;
    size_t cap; /* a power of two */
    size_t n;
    uint64_t seed; /* names come from files: crafted collisions
                               must not make the table quadratic */
};

pn_name_index *pn_name_index_new(size_t expected)
{
    pn_name_index *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->seed = pn_hash_seed(x);
    x->cap = 16;
    while (x->cap < 2 * expected + 2)
        x->cap *= 2;
    x->slots = calloc(x->cap, sizeof *x->slots);
    if (!x->slots) {
        free(x);
        return NULL;
    }
    return x;
}

void pn_name_index_free(pn_name_index *x)
{
    if (!x)
        return;
    free(x->slots);
    free(x);
}

static size_t find(const slot *slots, size_t cap, uint64_t seed, const char *name)
{
    size_t i = (size_t)pn_hash_seeded(name, strlen(name), seed) & (cap - 1);
    while (slots[i].name && strcmp(slots[i].name, name) != 0)
        i = (i + 1) & (cap - 1);
    return i;
}

static bool grow(pn_name_index *x)
{
    size_t cap = x->cap * 2;
    slot *s = calloc(cap, sizeof *s);
    if (!s)
        return false;
    for (size_t i = 0; i < x->cap; i++)
        if (x->slots[i].name)
            s[find(s, cap, x->seed, x->slots[i].name)] = x->slots[i];
    free(x->slots);
    x->slots = s;
    x->cap = cap;
    return true;
}

bool pn_name_index_put(pn_name_index *x, const char *name, size_t value, size_t *old)
{
    if (2 * (x->n + 1) > x->cap && !grow(x))
        return false;
    size_t i = find(x->slots, x->cap, x->seed, name);
    if (x->slots[i].name) {
        if (old)
            *old = x->slots[i].value;
        return false;
    }
    x->slots[i].name = name;
    x->slots[i].value = value;
    x->n++;
    return true;
}

long pn_name_index_get(const pn_name_index *x, const char *name)
{
    size_t i = find(x->slots, x->cap, x->seed, name);
    return x->slots[i].name ? (long)x->slots[i].value : -1;
}
