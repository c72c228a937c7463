/* disk.h - qcow2 disk layers for the microVMs.
 *
 * A run's root disk is a qcow2 layer over a read-only template base; a
 * frozen layer (QMP blockdev-snapshot-sync) is the base of a fork's layer.
 * Creating a layer is constant time whatever the size of the base.
 */
#ifndef SB_VMM_DISK_H
#define SB_VMM_DISK_H

/* Creates the qcow2 file path on top of base (format base_fmt, "raw" or
 * "qcow2"), with `qemu-img create -f qcow2 -b BASE -F FMT PATH`. The
 * backing path is recorded absolute, so the layer works from any
 * directory. The base is not modified. Errors: SB_ERR_INVAL (format),
 * SB_ERR_NOTFOUND (base missing), SB_ERR_EXISTS (path exists),
 * SB_ERR_UNAVAIL (qemu-img missing), SB_ERR_IO (qemu-img failed: its last
 * line of output is the detail), SB_ERR_TIMEOUT. */
int sb_disk_layer_create(const char *base, const char *base_fmt, const char *path);

#endif
