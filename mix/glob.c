/* glob.c - matching tensor names against the recipe language's patterns
 * (see glob.h). */
#include "mix/glob.h"

#include <stddef.h>

/* Iterative matcher with one backtrack point (the last '*'): linear in
 * practice and never recursive, so a hostile pattern cannot blow the stack. */
bool pn_glob_match(const char *pattern, const char *name)
{
    const char *p = pattern, *n = name;
    const char *star = NULL, *resume = NULL;
    while (*n) {
        if (*p == '*') {
            star = p++;
            resume = n;
        } else if (*p == '?' || *p == *n) {
            p++;
            n++;
        } else if (star) {
            p = star + 1;
            n = ++resume;
        } else {
            return false;
        }
    }
    while (*p == '*')
        p++;
    return *p == '\0';
}
