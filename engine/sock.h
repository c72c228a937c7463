/* sock.h - unix stream sockets the daemon listens on (its API sockets,
 * the sockets QEMU connects to).
 */
#ifndef SB_SOCK_H
#define SB_SOCK_H

/* Listens on a unix stream socket at path (mode 0600, close-on-exec,
 * non-blocking; backlog 128), replacing a stale socket left there (one
 * nobody accepts on). *fd is the caller's to close. Errors: SB_ERR_INVAL
 * (path too long), SB_ERR_EXISTS (path is not a socket, or one in use),
 * SB_ERR_IO. */
int sb_unix_listen(const char *path, int *fd);

/* Accepts one connection on lfd, waiting up to timeout_ms (-1 = forever).
 * *fd is blocking and close-on-exec; the caller closes it.
 * Errors: SB_ERR_TIMEOUT, SB_ERR_IO. */
int sb_unix_accept(int lfd, int timeout_ms, int *fd);

#endif
