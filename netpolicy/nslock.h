/* nslock.h - the enforcer lock of a network namespace: one daemon
 * enforces network mode acl in a namespace (its table inet sanbox, the
 * host's forwarding), and the lock's file tells the next holder whether
 * forwarding was fenced (nft.h).
 *
 * A holder's file says "pid PID fence 0|1 home HOME"; its holder writes it
 * (net.c). Threads: any; the calls block on file I/O.
 */
#ifndef SB_NSLOCK_H
#define SB_NSLOCK_H

#include <stddef.h>

/* Takes the enforcer lock of this network namespace: the file
 * dir/net-cCOOKIE.lock (the namespace's cookie; net-INODE.lock where the
 * kernel has none), flock'ed, its path into path (cap bytes). *fd gets
 * it (the caller's, until sb_net_lock_drop), *fence what its last holder
 * recorded (0 with no file). A file its holder removed as it let go is
 * not taken: the one its path names then is. Errors: SB_ERR_UNAVAIL
 * (another process holds it: the detail names its pid and home; the file
 * cannot be opened). */
int sb_net_lock_take(const char *dir, int *fd, int *fence, char *path, size_t cap);

/* Lets the lock go: its file is removed first (still held, so no one
 * takes it meanwhile) unless it records a fence, which the next holder
 * must know. fd < 0: nothing. */
void sb_net_lock_drop(int fd, const char *path, int fence);

#endif
