/* spawn.c - a child's signals as a shell would give them, and the end of
 * its log (see spawn.h). */
#include "common/spawn.h"

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

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

void pn_child_log_tail(int fd, char *buf, size_t cap)
{
    buf[0] = 0;
    off_t size = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;
    if (size <= 0)
        return;
    size_t want = cap - 1 < (size_t)size ? cap - 1 : (size_t)size;
    ssize_t r = pread(fd, buf, want, size - (off_t)want);
    size_t n = r > 0 ? (size_t)r : 0;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        n--;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)buf[i];
        buf[i] = ch == '\n' ? '|' : (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    buf[n] = 0;
}
