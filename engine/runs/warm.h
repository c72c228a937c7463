/* warm.h - warm images: a template's guest booted to the point where its
 * agent waits for its SPEC, with its memory and device state saved; the
 * local runner restores one instead of booting (a warm start).
 *
 * An image is two read-only files in home/cache/warm: KEY.ram, the guest's
 * RAM (the file its QEMU ran on, mapped shared), and KEY.mem, its device
 * state (QMP migrate with the capability x-ignore-shared: the RAM is not in
 * it). A warm start maps KEY.ram private (copy on write), so the pages its
 * guest does not write stay page cache shared by every guest restored from
 * it, and loads KEY.mem. KEY is a hash of everything the saved state
 * depends on: the template (its hash), the QEMU binary (path, size, time),
 * the accelerator, vCPUs, memory, the agent's version and the image's
 * format. Another QEMU or a changed template is another KEY: an image is
 * never restored into a machine it does not fit. It is built in the
 * background (a thread of its own, one build per KEY at a time: the
 * directory KEY.build is its lock) by booting the template once; runs boot
 * cold until it is there.
 */
#ifndef SB_WARM_H
#define SB_WARM_H

#include <stddef.h>

#include "vmm/qemu.h"

#define SB_WARM_KEY_LEN 32 /* hex digits */

/* What a warm image is of: the machine a run of it would get. */
struct sb_warm_spec {
	const char *template_hash;
	const char *kernel, *initrd, *rootfs; /* the template's files */
	sb_accel accel;			      /* resolved */
	unsigned cpus, memory_mib;
};

/* Writes the image's KEY (SB_WARM_KEY_LEN hex digits and a NUL) into key.
 * Errors: SB_ERR_UNAVAIL (the QEMU binary is not found). */
int sb_warm_key(const struct sb_warm_spec *w, char key[SB_WARM_KEY_LEN + 1]);

/* The migration capability a warm image is saved and loaded with: the
 * stream leaves out RAM that is mapped shared (the image's KEY.ram). */
#define SB_WARM_MIGRATE_CAP "x-ignore-shared"

/* Writes the paths of the image of key into state (KEY.mem) and ram
 * (KEY.ram), each of cap bytes; SB_OK when both are there (ram readable
 * and writable: QEMU opens it so), SB_ERR_NOTFOUND when not (yet). */
int sb_warm_find(const char *home, const char *key, char *state, char *ram, size_t cap);

/* Starts building the image of key for w in a thread of its own, unless
 * one is being built (or it exists). Returns at once; the build takes a
 * boot (it gives up after 120 s) and leaves nothing but the image behind.
 * Errors: SB_ERR_NOMEM, SB_ERR_IO (the thread). */
int sb_warm_build_async(const char *home, const char *key, const struct sb_warm_spec *w);

/* Builds the image of key for w now (blocking, as the thread does).
 * Errors: SB_ERR_EXISTS (another build holds the lock), SB_ERR_TIMEOUT
 * (the guest did not say HELLO, or its state was not saved, in time),
 * those of sb_vm_spawn and the QMP client. */
int sb_warm_build(const char *home, const char *key, const struct sb_warm_spec *w);

/* Deletes the image of key (it failed to load); guests running on its RAM
 * keep their mapping. */
void sb_warm_drop(const char *home, const char *key);

#endif
