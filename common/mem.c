/* mem.c - freeing many allocations at once (see mem.h). */
#include "common/mem.h"

void pn_free_array(void *const *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(p[i]);
}
