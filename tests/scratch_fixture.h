/* scratch_fixture.h - a folder of its own for each test of a suite that
 * writes files: `.init = setup` makes it (g_dir), `.fini = teardown`
 * removes it with whatever the test left there. path_in(name) is
 * "g_dir/name" (caller frees).
 *
 * Header-only: each test program is one file plus test_util.c, and the
 * suites name these in their Test() lines. */
#ifndef PN_SCRATCH_FIXTURE_H
#define PN_SCRATCH_FIXTURE_H

#include <stdbool.h>
#include <stdlib.h>

#include "test_util.h"

static char *g_dir;

static inline void setup(void)
{
    g_dir = tu_mkdtemp();
}

static inline void teardown(void)
{
    tu_rm_rf(g_dir);
    free(g_dir);
    g_dir = NULL;
}

static inline char *path_in(const char *name)
{
    return tu_join(g_dir, name);
}

static inline bool exists(const char *path)
{
    return tu_exists(path);
}

#endif
