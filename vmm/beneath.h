/* beneath.h - writing and deleting paths under a directory without ever
 * following a symbolic link: each component is opened with O_NOFOLLOW from
 * the directory above it (the equivalent of openat2's RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS, on any kernel). The guest agent writes a run's
 * inputs and a roll-forward's files with these, so that a link on the
 * guest's disk never leads a write elsewhere.
 *
 * rel is a relative path: components separated by one '/', none empty,
 * "." or "..", none longer than NAME_MAX, at most PATH_MAX bytes in all.
 * Errors set errno and return -1: EINVAL (rel breaks those rules),
 * ENAMETOOLONG, ELOOP (a component of rel's prefix is a symbolic link),
 * ENOTDIR (one is another non-directory), and those of the system calls.
 */
#ifndef SB_BENEATH_H
#define SB_BENEATH_H

#include <sys/types.h>

/* Opens the directory holding rel's last component, under root (an open
 * directory), each component of rel's prefix a directory (made, mode
 * 0755, when missing and create is set). *last gets rel's last component
 * (a pointer into rel). Returns a descriptor the caller closes, or -1. */
int sb_beneath_parent(int root, const char *rel, int create, const char **last);

/* Creates rel under root as an empty regular file of mode (or truncates
 * the one there) and opens it for writing; what else is at rel (a link, a
 * FIFO, a socket, a device, a directory with all in it) is deleted first,
 * never followed. Returns a descriptor the caller closes, or -1. */
int sb_beneath_create(int root, const char *rel, mode_t mode);

/* Makes rel under root a symbolic link to target, replacing what is there
 * (as sb_beneath_create does). Returns 0 or -1. */
int sb_beneath_symlink(int root, const char *rel, const char *target);

/* Deletes rel under root: a file, a link (not what it names), or a
 * directory with all in it (at most 64 levels deep: deeper is ELOOP). A rel
 * that does not exist (or whose prefix does not) is 0. Returns 0 or -1. */
int sb_beneath_remove(int root, const char *rel);

#endif
