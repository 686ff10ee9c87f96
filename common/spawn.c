/* spawn.c - a child's signals as a shell would give them (see spawn.h). */
#include "common/spawn.h"

#include <signal.h>

void pn_spawnattr_init_child(posix_spawnattr_t *at, short flags)
{
    posix_spawnattr_init(at);
    sigset_t def, none;
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    sigaddset(&def, SIGINT);
    sigaddset(&def, SIGTERM);
    sigaddset(&def, SIGHUP);
    sigaddset(&def, SIGXFSZ);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(at, &def);
    posix_spawnattr_setsigmask(at, &none);
    posix_spawnattr_setflags(at, (short)(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | flags));
}
