/* accel.h - choosing the accelerator (KVM or TCG) for the microVMs.
 *
 * /dev/kvm opening is not enough: on a nested host a KVM guest can hang
 * right after the kernel starts. So "auto" boots the guest kernel once under
 * KVM with SB_VM_PROBE_ARG on its command line (the guest agent then prints
 * SB_VM_PROBE_OK on the serial console and powers off) and falls back to TCG
 * when that does not happen within 3 s. The verdict is cached per host boot
 * and QEMU version.
 *
 * This builds on qemu.h (the probe boots a VM, and sb_accel is a VM
 * config's); qemu.c does not depend on it.
 */
#ifndef SB_VMM_ACCEL_H
#define SB_VMM_ACCEL_H

#include <stddef.h>

#include "vmm/qemu.h"

/* How long the probe waits for the guest, in milliseconds. */
#define SB_ACCEL_PROBE_MS 3000

/* Resolves want into *out (SB_ACCEL_KVM or SB_ACCEL_TCG). TCG gives TCG; KVM
 * gives KVM when /dev/kvm opens read-write; AUTO gives TCG when /dev/kvm is
 * unusable, else the verdict cached in cache_dir/accel for this host boot
 * and QEMU version, else runs the probe with kernel and initrd (at most
 * SB_ACCEL_PROBE_MS) and caches its verdict (cache_dir NULL = no cache;
 * failing to write the cache is not an error). When AUTO falls back to TCG,
 * why (may be NULL) gets the reason, else "". Errors: SB_ERR_UNAVAIL (KVM
 * wanted but /dev/kvm unusable; QEMU missing), SB_ERR_INVAL (AUTO without a
 * kernel), SB_ERR_NOTFOUND (kernel or initrd missing), SB_ERR_IO. */
int sb_accel_resolve(sb_accel want, const char *kernel, const char *initrd,
		     const char *cache_dir, sb_accel *out, char *why, size_t whylen);

/* The probe sb_accel_resolve runs: boots kernel and initrd under KVM (a
 * QEMU in a fresh directory under tmpdir, killed with the calling thread
 * should that end first) and sets *booted to 1 when the guest printed
 * SB_VM_PROBE_OK within SB_ACCEL_PROBE_MS, else to 0 with the reason in why.
 * Errors: SB_ERR_INVAL (tmpdir too long), SB_ERR_IO (its directory), those
 * of sb_vm_spawn. */
int sb_accel_probe(const char *kernel, const char *initrd, const char *tmpdir,
		   int *booted, char *why, size_t whylen);

/* Returns "auto", "kvm" or "tcg" (static). */
const char *sb_accel_name(sb_accel a);

/* Parses "auto", "kvm" or "tcg" into *out. Errors: SB_ERR_INVAL. */
int sb_accel_parse(const char *s, sb_accel *out);

#endif
