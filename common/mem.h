/* mem.h - freeing the allocations a structure owns in one statement: the
 * pointers to free, and the arrays whose every element is freed too; a
 * pointer closed and forgotten at once. */
#ifndef PN_COMMON_MEM_H
#define PN_COMMON_MEM_H

#include <stddef.h>
#include <stdlib.h>

/* free() of p[0..n) (NULLs are fine). */
void pn_free_array(void *const *p, size_t n);

/* PN_FREE_ALL(a, b, c): free(a); free(b); free(c). */
#define PN_FREE_ALL(...)                                                                           \
    pn_free_array((void *const[]){ __VA_ARGS__ },                                                  \
                  sizeof((void *const[]){ __VA_ARGS__ }) / sizeof(void *))

/* free() of v[0..n), then of v itself; v may be NULL (then n is not read). */
#define PN_FREE_EACH(v, n)                                                                         \
    do {                                                                                           \
        if (v)                                                                                     \
            for (size_t pn_i_ = 0; pn_i_ < (size_t)(n); pn_i_++)                                   \
                free((v)[pn_i_]);                                                                  \
        free(v);                                                                                   \
    } while (0)

/* free() of arr[i].field for i in [0, n), then of arr itself (an array
 * of structures, each owning one string). */
#define PN_FREE_EACH_FIELD(arr, n, field)                                                          \
    do {                                                                                           \
        if (arr)                                                                                   \
            for (size_t pn_i_ = 0; pn_i_ < (size_t)(n); pn_i_++)                                   \
                free((arr)[pn_i_].field);                                                          \
        free(arr);                                                                                 \
    } while (0)

/* PN_CLOSE(fn, p): fn(p), then p = NULL, so that a second close is a no-op
 * (fn is free or a destructor that takes NULL). */
#define PN_CLOSE(fn, p)                                                                            \
    do {                                                                                           \
        fn(p);                                                                                     \
        (p) = NULL;                                                                                \
    } while (0)

#endif
