/* home.h - the state directory ($SANBOX_HOME, default
 * ~/.local/share/sanbox) and paths inside it.
 *
 *   log/            the LMDB event log and projections
 *   api.sock        control API (mode 0600)
 *   events.sock     live event feed (mode 0600)
 *   sanboxd.pid     the daemon's pid, locked while it runs
 *   sanboxd.log     the embedded daemon's log
 *   runs/RUN/       per-run files: disk layers, console log, sockets
 *   templates/NAME/ built templates
 *   secrets/        encrypted secrets and their key
 */
#ifndef SB_HOME_H
#define SB_HOME_H

#include <stddef.h>

/* Resolves the state directory into buf: explicit (may be NULL), else
 * $SANBOX_HOME, else ~/.local/share/sanbox; a relative path is made
 * absolute against the current directory. Errors: SB_ERR_INVAL (path too
 * long or no home). */
int sb_home_resolve(const char *explicit_dir, char *buf, size_t cap);

/* Creates the state directory and its subdirectories with mode 0700.
 * Errors: SB_ERR_IO (detail names the path), SB_ERR_DENIED. */
int sb_home_init(const char *home);

/* Writes home/rel into buf. Errors: SB_ERR_TOOBIG. */
int sb_home_path(const char *home, const char *rel, char *buf, size_t cap);

/* Creates dir and its parents with mode. Errors: SB_ERR_IO. */
int sb_mkdirs(const char *dir, unsigned mode);

/* The disk space the regular files under path take (allocated blocks, so
 * a sparse file counts what it holds), never following a symlink; a
 * missing path takes none. */
unsigned long long sb_du(const char *path);

#endif
