/* qemu.h - the QEMU microvm command line, spawning and reaping QEMU, and the
 * unix sockets QEMU connects to.
 *
 * The daemon is the server of both unix sockets of a VM (QMP and the
 * sanbox.0 channel): it listens with sb_unix_listen() (engine/sock.h)
 * before sb_vm_spawn(),
 * and QEMU connects to them as a client at start-up, and again within a
 * second whenever the connection drops (reconnect=1), so a restarted daemon
 * that listens on the same paths gets both back. QEMU runs in its own
 * session and process group and outlives the daemon.
 */
#ifndef SB_VMM_QEMU_H
#define SB_VMM_QEMU_H

#include <stddef.h>
#include <sys/types.h>

typedef enum { SB_ACCEL_AUTO, SB_ACCEL_KVM, SB_ACCEL_TCG } sb_accel;

#define SB_VM_QEMU_DEFAULT   "qemu-system-x86_64"
#define SB_VM_DISK_FILE_NODE "file0"	      /* QMP node-name of the disk's file node */
#define SB_VM_DISK_NODE	     "root0"	      /* QMP node-name of the disk's qcow2 node */
#define SB_VM_CHAN_NAME	     "sanbox.0"	      /* virtserialport name of the channel */
#define SB_VM_PROBE_ARG	     "sanbox.probe=1" /* kernel argument of the KVM probe */
#define SB_VM_PROBE_OK	     "sanbox-probe-ok" /* what the guest prints on it */
/* The id of the RAM's memory backend, and so the name of its RAM block in a
 * migration stream: the microvm machine's default (what plain -m names it),
 * so every stream, whatever backs the RAM, loads into every machine. */
#define SB_VM_RAM_ID "microvm.ram"

/* Every QEMU runs this much nicer than the daemon that starts it: busy
 * guests take what CPU the daemon leaves, so its API, record and tunnels
 * answer in time however many guests are busy. */
#define SB_VM_NICE 5

struct sb_vm_config {
	const char *qemu;	  /* binary, NULL = sb_vm_qemu() */
	const char *kernel;	  /* required: PVH vmlinux or bzImage */
	const char *initrd;	  /* NULL = none */
	const char *append_extra; /* added to the kernel command line, or NULL */
	const char *disk;	  /* qcow2 root layer (virtio-blk), or NULL */
	const char *chan_socket;  /* socket the daemon listens on, or NULL */
	const char *qmp_socket;	  /* socket the daemon listens on, or NULL */
	const char *console_log;  /* required: serial output, appended to;
				   * QEMU's own output goes to qemu.log beside it */
	const char *incoming;	  /* NULL, or a memory state file written by
				   * QMP migrate "exec:cat > FILE": the VM loads it
				   * and stays paused (-S) until QMP "cont" */
	int incoming_defer;	  /* 1 (incoming NULL): -S -incoming defer: the
				   * VM waits, paused, for QMP migrate-incoming */
	const char *ram_file;	  /* NULL: the RAM is anonymous memory; else the
				   * file (memory_mib MiB) that holds it */
	int ram_shared;		  /* with ram_file: 1, the guest writes into the
				   * file; 0, it is mapped private: pages the
				   * guest does not write stay the file's page
				   * cache, shared by every VM mapping it, and the
				   * file is never written (QEMU 7.2 opens it
				   * read-write all the same) */
	const char *tap;	  /* a tap device for a virtio-net NIC, or NULL: none */
	const char *mac;	  /* the NIC's MAC, "02:xx:xx:xx:xx:xx" */
	unsigned cpus;		  /* 1..64 */
	unsigned memory_mib;	  /* 64..1048576 */
	sb_accel accel;		  /* SB_ACCEL_KVM or SB_ACCEL_TCG (resolved) */
	unsigned tsc_khz;	  /* TCG only: guest TSC rate for tsc_early_khz=,
				   * 0 = the host's (sb_host_tsc_khz) */
	int die_with_parent;	  /* 1: killed when the starting thread ends (a
				   * helper VM, not a run's, which outlives the
				   * daemon) */
};

/* The QEMU binary of a config without one: $SANBOX_QEMU when set and not
 * empty (a path, or a name searched in PATH), else SB_VM_QEMU_DEFAULT.
 * The string is static or the environment's. */
const char *sb_vm_qemu(void);

/* Gives the host's TSC rate in kHz, measured once per process (20 ms).
 * Under TCG the guest's TSC is the host's, and a guest kernel told this
 * rate (tsc_early_khz=) skips its PIT calibration, which under TCG fails
 * when the host is busy and then hangs the boot.
 * Errors: SB_ERR_UNAVAIL (not an x86 host, or no usable TSC). */
int sb_host_tsc_khz(unsigned *khz);

/* Builds QEMU's argv for c into *out, a NULL-terminated array; the caller
 * frees it with sb_argv_free(). Under TCG the kernel gets tsc_early_khz= so
 * it does not calibrate the TSC against the emulated PIT (which fails under
 * host load and hangs the boot). The RAM is a memory backend of id
 * SB_VM_RAM_ID: memory-backend-ram, or memory-backend-file of ram_file.
 * Errors: SB_ERR_INVAL (missing kernel or console_log, accel not resolved,
 * cpus or memory out of range, a newline in a string), SB_ERR_NOMEM. */
int sb_vm_argv(const struct sb_vm_config *c, char ***out);

/* Quotes s for /bin/sh between single quotes (for a migration's "exec:"
 * URI). The caller frees it; NULL when out of memory. */
char *sb_vm_shquote(const char *s);

/* The QMP migrate URI that saves a migration stream into the file path.
 * The stream is written to path + SB_VM_SAVE_PART and renamed to path once
 * whole, by a writer that outlives the command QEMU spawns: QEMU signals
 * its "exec:" command the moment the stream is sent, which would cut off
 * what the pipe still held. So path exists only with every byte in it,
 * and a migration that "completed" is saved once path appears. The caller
 * frees the URI; NULL when out of memory. */
#define SB_VM_SAVE_PART ".part"
char *sb_vm_save_uri(const char *path);

/* Frees an argv from sb_vm_argv(); NULL is allowed. */
void sb_argv_free(char **argv);

/* Starts QEMU for c: stdin from /dev/null, stdout and stderr appended to
 * qemu.log in the console log's directory, a new session and process group
 * (pgid = *pid), no other descriptors, default signal state. Returns once
 * QEMU has been exec'd; *pid is a child of the caller, reap it with
 * sb_proc_wait() (engine/proc.h). Errors: SB_ERR_UNAVAIL (QEMU binary missing, or exec of
 * it failed; the detail names it), SB_ERR_NOTFOUND (kernel, initrd, disk, incoming file
 * or a private ram_file missing), SB_ERR_INVAL, SB_ERR_IO (fork, log file; errno kept),
 * SB_ERR_NOMEM. */
int sb_vm_spawn(const struct sb_vm_config *c, pid_t *pid);

/* Calls fn(ctx, pid, qmp) for every process of this user whose command
 * line is a QEMU's of sb_vm_argv with a QMP socket whose path starts with
 * prefix; qmp is that path (valid during the call). So a QEMU is found
 * whatever became of its pid file: its identity is in its argv from its
 * exec on. A process whose parent names the same socket (QEMU's child
 * between its fork and its exec) is left out, and so is one that cannot
 * be read. Reads /proc. */
void sb_vm_each(const char *prefix, void (*fn)(void *ctx, pid_t pid, const char *qmp),
		void *ctx);

#endif
