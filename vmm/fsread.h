/* fsread.h - reading a run's disk offline, without booting and without
 * modifying the disk: the qcow2 layer chain is flattened into a temporary
 * raw copy (qemu-img convert), which debugfs reads.
 */
#ifndef SB_FSREAD_H
#define SB_FSREAD_H

#include <stddef.h>

typedef struct sb_fsread sb_fsread;

/* Opens the disk at layer (a qcow2 file). Errors: SB_ERR_NOTFOUND,
 * SB_ERR_UNAVAIL (qemu-img or debugfs missing), SB_ERR_IO. */
int sb_fsread_open(const char *layer, sb_fsread **out);

/* Closes and removes the temporary copy (NULL is fine). */
void sb_fsread_close(sb_fsread *f);

/* Lists directory path: fills out (NUL-terminated, cut to cap) with lines
 * "MODE SIZE NAME". Errors: SB_ERR_NOTFOUND, SB_ERR_IO. */
int sb_fsread_ls(sb_fsread *f, const char *path, char *out, size_t cap);

/* Copies file path to the local file dest. Errors: SB_ERR_NOTFOUND, SB_ERR_IO. */
int sb_fsread_copy(sb_fsread *f, const char *path, const char *dest);

#endif
