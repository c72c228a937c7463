/* disk.h - qcow2 disk layers for the microVMs.
 *
 * A run's root disk is a qcow2 layer over a read-only template base; a
 * frozen layer (QMP blockdev-snapshot-sync) is the base of a fork's layer.
 * Creating a layer is constant time whatever the size of the base.
 */
#ifndef SB_VMM_DISK_H
#define SB_VMM_DISK_H

#include <stddef.h>

/* Creates the qcow2 file path on top of base (format base_fmt, "raw" or
 * "qcow2"), as `qemu-img create -f qcow2 -b BASE -F FMT PATH` would, but
 * written here (see disk.c). The layer's size is the base's; the backing
 * path is recorded absolute, so the layer works from any directory. The
 * base is not modified. Errors: SB_ERR_INVAL (format, or a size over 1
 * PiB), SB_ERR_NOTFOUND (base missing), SB_ERR_EXISTS (path
 * exists), SB_ERR_IO (the base unreadable or not the format given, or the
 * layer not written: then nothing is left at path), SB_ERR_NOMEM. */
int sb_disk_layer_create(const char *base, const char *base_fmt, const char *path);

/* Reads the backing file named in the header of the qcow2 file path into
 * buf ("" when it has none). Reads the header only (no qemu-img).
 * Errors: SB_ERR_NOTFOUND, SB_ERR_IO (unreadable), SB_ERR_CORRUPT (not a
 * qcow2 file, a backing name out of the file or longer than cap - 1, or
 * an external data file: never made here, refused). */
int sb_disk_backing(const char *path, char *buf, size_t cap);

/* Makes the qcow2 layer path read from base (format base_fmt) instead of
 * its backing file, keeping what a reader of path sees: `qemu-img rebase`
 * copies into path what differs between the two (safe mode). No process
 * may have path open for writing. Errors: SB_ERR_INVAL (format),
 * SB_ERR_NOTFOUND (base missing), SB_ERR_UNAVAIL (qemu-img missing),
 * SB_ERR_IO (qemu-img failed: its last line of output is the detail),
 * SB_ERR_TIMEOUT. */
int sb_disk_layer_rebase(const char *path, const char *base, const char *base_fmt);

#endif
