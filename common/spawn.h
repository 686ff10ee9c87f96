/* spawn.h - what a child program (llama.cpp's harness, gnuplot, the stock
 * quantizer) starts with: the signal dispositions of a program started from
 * a shell, whatever the parent catches or ignores; and the end of what it
 * logged, for the message when it fails.
 *
 * The programs catch SIGINT, SIGTERM and SIGHUP and ignore SIGPIPE and
 * SIGXFSZ (cmd/cli.h). A caught signal is reset by exec, an ignored one is
 * not: without this a child would write into a closed pipe forever, or
 * past a file-size limit, instead of being stopped. */
#ifndef PN_COMMON_SPAWN_H
#define PN_COMMON_SPAWN_H

#include <spawn.h>
#include <stddef.h>

/* Initializes *at: those five signals at their defaults, no signal
 * blocked, and flags (POSIX_SPAWN_SETPGROUP, ... or 0) added to the two
 * this needs. posix_spawnattr_destroy it after the spawn. */
void pn_spawnattr_init_child(posix_spawnattr_t *at, short flags);

/* The end of what a child wrote to its log (fd, a file), for a message:
 * at most cap - 1 bytes, trailing newlines and spaces dropped, the other
 * newlines shown as '|' and any byte outside printable ASCII as '?'. buf is
 * "" when the log is empty or fd is -1. */
void pn_child_log_tail(int fd, char *buf, size_t cap);

#endif
