/* runner.h - where a run's machine runs: an ops table with named fields.
 *
 * The run manager (engine/runs/runs.h) talks to machines only through a
 * runner. The local runner (engine/runs/local.c) runs QEMU microVMs on this
 * host; runners on other hosts are further tables with the same ops. A
 * daemon has several, each under a name (struct sb_runner); a run's plan
 * names the one its machine runs on, and a fork or a resume runs on the
 * runner that holds the snapshot it continues.
 *
 * Lifetime and threads: create and create_from run on a worker thread
 * (they may block: a disk layer, an accelerator probe, a network); reattach,
 * reap, sweep and capacity at the daemon's start, before it serves
 * anything (they may block too); every other op runs on the daemon's loop
 * and never blocks. A machine reports to its run through the events
 * it was started (or reattached) with, on the loop, until free; after
 * ended it reports nothing more. The run frees its machine once ended has
 * come (or when the daemon closes: the machine then keeps running, for
 * the next daemon to reattach).
 */
#ifndef SB_RUNNER_H
#define SB_RUNNER_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "engine/loop.h"
#include "engine/runs/plan.h"
#include "engine/runs/space.h"
#include "netpolicy/net.h"
#include "vmm/fsread.h"

typedef struct sb_machine sb_machine;

/* What a machine tells its run; ctx is the run's. */
struct sb_machine_events {
	/* The guest's channel is connected: fd (non-blocking) is the run's
	 * to read, write and close. again: 1 when the machine was already
	 * talking to a previous daemon (after a reattach), whose connection
	 * may have broken off in the middle of a frame. */
	void (*channel)(void *ctx, int fd, int again);
	/* The machine is gone. status: its wait status, or -1 when unknown
	 * (a reattached machine). why: how it ended, in one line ("QEMU was
	 * killed by signal 9 (Killed)", "guest kernel panic: ..."), for a
	 * run that ended without its harness's report. */
	void (*ended)(void *ctx, int status, const char *why);
	/* A line for run.warning (the machine went on another way than
	 * planned: a warm image that did not load, so it boots). */
	void (*warning)(void *ctx, const char *line);
	/* What the machine's network did (network mode acl): a denial or a
	 * granted name's lookup, for the record. */
	void (*net)(void *ctx, const struct sb_net_report *r);
};

/* A snapshot to take. */
struct sb_snapshot_req {
	int memory; /* 1: the guest's memory and device state too (a live
		     * machine only) */
};

#define SB_SNAPSHOT_NAME_MAX 256 /* a runner's name of a snapshot's file */

/* A snapshot taken: the machine's disk layer frozen (and its memory
 * saved), and the machine going on in a new layer. Its names are the
 * runner's own, which it makes itself: meaningful only to it, never a
 * path of the daemon's host (the local runner's are its files' paths
 * relative to its home, "runs/RUN/layers/N.qcow2"). The record keeps them
 * (snapshot.saved's layer and memory). */
struct sb_snapshot_info {
	unsigned layer; /* the frozen layer's number: the snapshot is "s<layer>" */
	char layer_name[SB_SNAPSHOT_NAME_MAX];	/* the frozen layer's name */
	char memory_name[SB_SNAPSHOT_NAME_MAX]; /* the memory state's name, or
						 * "" (memory_bytes 0) */
	uint64_t bytes;			 /* the frozen layer's and memory file's sizes */
	uint64_t memory_bytes;		 /* the memory state's size (0: a disk
					  * snapshot; > 0: a memory one) */
	double paused_ms;   /* the guest stood still (or its disk did) this long */
	double duration_ms; /* from the request to done */
};

/* How a snapshot ended: rc SB_OK with info, or an error (info NULL; the
 * detail during the call). Called once, on the loop, never inside the
 * snapshot op; not at all once the machine is freed. */
typedef void (*sb_snapshot_fn)(void *ctx, int rc, const struct sb_snapshot_info *info);

struct sb_runner_ops {
	const char *name; /* "local" */
	/* Prepares a machine for plan (on a worker: may block). *accel gets
	 * the accelerator it will use ("kvm", "tcg"), *warning (cap bytes) a
	 * line for run.warning or "". Errors: the runner's, with a detail. */
	int (*create)(void *runner, const struct sb_plan *plan, sb_machine **out,
		      char *accel, char *warning, size_t cap);
	/* Starts m; ev/ctx must outlive it. Errors: the runner's. */
	int (*start)(sb_machine *m, const struct sb_machine_events *ev, void *ctx);
	/* Sends sig to the machine as a whole (not to its harness: that goes
	 * through the guest channel). Errors: SB_ERR_STATE (it ended). */
	int (*signal)(sb_machine *m, int sig);
	/* Ends the machine: at once gracefully, by force after grace_s. */
	void (*stop)(sb_machine *m, double grace_s);
	/* Takes a snapshot of m; cb(ctx, ...) says how it went. A live
	 * machine's goes through its monitor without blocking the loop; an
	 * ended machine's disk is frozen as it is (req->memory must be 0).
	 * One at a time per machine. Errors (cb is then not called):
	 * SB_ERR_STATE (a snapshot is being taken; memory of an ended
	 * machine), SB_ERR_UNAVAIL (the monitor is not connected yet),
	 * SB_ERR_NOMEM. */
	int (*snapshot)(sb_machine *m, const struct sb_snapshot_req *req,
			sb_snapshot_fn cb, void *ctx);
	/* Deletes the frozen layer layer of live machine m, which no other
	 * run reads (the caller checks with readers, off the loop: merge
	 * runs on it and does not look): the layer above it in m's chain
	 * takes in its data (QMP block-stream down to the layer's own
	 * backing file) and then reads that instead; the file goes.
	 * cb(ctx, rc, NULL) once, later (info is NULL). One at a time, and
	 * not with a snapshot. Errors (cb not called): SB_ERR_STATE (busy,
	 * or m ended), SB_ERR_UNAVAIL (no monitor yet), SB_ERR_NOMEM. */
	int (*merge)(sb_machine *m, unsigned layer, sb_snapshot_fn cb, void *ctx);
	/* Sets *count to how many other runs read run's frozen layer layer
	 * (a fork's chain) and lists up to max of them into users (max 0:
	 * none; users may then be NULL). Reads a header of every layer of
	 * every run: call it on a worker (it is safe from any thread).
	 * Errors: SB_ERR_NOTFOUND, SB_ERR_IO. */
	int (*readers)(void *runner, const char *run, unsigned layer,
		       char (*users)[SB_RUN_MAX], size_t max, size_t *count);
	/* Deletes run's frozen layer layer (a snapshot removed), run's
	 * machine ended and no other run reading it: its layers made on it
	 * go on reading the same, and its memory state goes too. May block:
	 * call it on a worker (it is safe from any thread). NULL in a runner
	 * that removes no snapshots. Errors: SB_ERR_STATE (layer is the top,
	 * or another run reads it: the detail names one), SB_ERR_NOTFOUND,
	 * SB_ERR_IO. */
	int (*remove_layer)(void *runner, const char *run, unsigned layer);
	/* Deletes what the runner holds of run, removed (its machine ended),
	 * that no other run reads: its layers but those another run's read
	 * (directly or through run's later layers, and what those read
	 * below them), its memory states and its other files; *out
	 * (space.h) gets what that freed, in allocated bytes, and the
	 * layers kept. dry: deletes nothing, *out says what it would free.
	 * A run of which it holds nothing frees nothing. May block: call
	 * it on a worker (it is safe from any thread). NULL in a runner
	 * that keeps nothing of a run once its machine is freed (a removal
	 * then frees nothing). Errors: SB_ERR_IO (the detail names what;
	 * what was freed before stays freed), SB_ERR_TOOBIG, SB_ERR_NOMEM. */
	int (*release)(void *runner, const char *run, int dry, struct sb_layers_freed *out);
	/* Sets *u (space.h) to the space the runs of this runner take, by
	 * kind, in allocated bytes. May block: call it on a worker (it is
	 * safe from any thread). NULL in a runner that keeps nothing (it
	 * counts as none). Errors: SB_ERR_IO. */
	int (*usage)(void *runner, struct sb_layers_usage *u);
	/* Opens run's disk for reading into *out (vmm/fsread.h; the caller
	 * closes it with sb_fsread_close): layer, the name of one of its
	 * frozen layers (a snapshot's layer_name, as the record keeps it), or
	 * NULL: its current disk. The chain is checked for a reader first
	 * (sb_layers_check). Header reads and a qemu-nbd child: call it on a
	 * worker (it is safe from any thread). NULL in a runner that serves no
	 * reads of its disks (a fork's roll-forward then looks at no links,
	 * and the agent finds them). Errors: those of sb_layers_check and
	 * sb_fsread_open, SB_ERR_TOOBIG. */
	int (*disk_open)(void *runner, const char *run, const char *layer,
			 sb_fsread **out);
	/* Opens the root file system of this runner's template name for
	 * reading into *out, as a raw image (vmm/fsread.h), when it is still
	 * the build whose hash is hash (what a run that started on it
	 * recorded). Reads files: call it on a worker (it is safe from any
	 * thread). NULL in a runner that serves no reads of its templates.
	 * Errors: SB_ERR_STATE (the template was built again: another hash),
	 * those of sb_template_load and sb_fsread_open_raw. */
	int (*template_open)(void *runner, const char *name, const char *hash,
			     sb_fsread **out);
	/* Prepares a machine for plan (a fork or a resume) whose disk
	 * continues the frozen layer base_layer of run from_run (on a
	 * worker: may block). memory_bytes > 0: the machine also continues
	 * that snapshot's memory (its file must hold exactly memory_bytes):
	 * its guest's processes go on where they were, and its channel
	 * comes as a reconnection (again = 1). As create otherwise.
	 * Errors: those of create, SB_ERR_NOTFOUND (the layer or memory file
	 * is gone), SB_ERR_CORRUPT (the memory file is not the size
	 * recorded). */
	int (*create_from)(void *runner, const struct sb_plan *plan, const char *from_run,
			   unsigned base_layer, uint64_t memory_bytes, sb_machine **out,
			   char *accel, char *warning, size_t cap);
	/* Finds the machine of plan's run that a previous daemon started and
	 * watches it as start does (ev->channel with again = 1). Errors:
	 * SB_ERR_NOTFOUND (it is gone). */
	int (*reattach)(void *runner, const struct sb_plan *plan,
			const struct sb_machine_events *ev, void *ctx, sb_machine **out);
	/* After reattach: ends what the previous daemon left half done of a
	 * memory snapshot of m it was taking when it died: the memory file
	 * goes unless the record names it (saved: the newest layer number a
	 * snapshot.saved of the run names, -1 for none); the guest it
	 * paused goes on (whatever this returns). Returns 1 when such a
	 * snapshot was under way: its guest's harness may still be frozen,
	 * the caller sends THAW once the channel is back. NULL: never. */
	int (*interrupted)(sb_machine *m, long saved);
	/* Ends a machine of run id left by a previous daemon that is not to
	 * be reattached (NULL-safe on a machine that is gone). */
	void (*reap)(void *runner, const char *run);
	/* At the daemon's start, before anything is created: ends the
	 * machine and deletes the files of every run of this runner that
	 * known(ctx, run) says no record has (one a daemon died creating, a
	 * fork of `fork -n` say: left, its layer would hold its snapshot
	 * forever), and ends every machine of this runner whose run is not
	 * live (one a daemon died starting, whose run was then recorded
	 * failed). known returns 0 (no record has run), 1 (its record says
	 * it ended), 2 (it is live: to be reattached) or 3 (it was removed:
	 * what of its files no other run reads is deleted, as a removal
	 * killed half-way, or a reader removed since, leaves them). */
	void (*sweep)(void *runner, int (*known)(void *ctx, const char *run), void *ctx);
	/* Sets *cpus and *memory_mib (MiB) to what the runs on this runner
	 * may hold at once, their plans' cpus and memory_mib added up. Asked
	 * once, as the daemon starts (it may block, as sweep). NULL: no
	 * limit of its own (its runs never wait). */
	void (*capacity)(void *runner, uint64_t *cpus, uint64_t *memory_mib);
	/* Frees m (NULL is fine). A machine still running keeps running. */
	void (*free)(sb_machine *m);
	/* Frees m, made by create or create_from and never started, and
	 * deletes what was made for it (its disk layer). NULL is fine. */
	void (*discard)(sb_machine *m);
	/* 1 when m starts from saved memory (a memory snapshot, or a warm
	 * image) rather than booting: its guest is told so once its channel
	 * connects (RESTORED). */
	int (*restored)(sb_machine *m);
	/* 1 when that memory is the template's warm image. */
	int (*warm)(sb_machine *m);
	/* Fills *out with m's NIC, what its guest is told (network mode
	 * acl). Errors: SB_ERR_NOTFOUND (m has no NIC: network none). */
	int (*iface)(sb_machine *m, struct sb_net_iface *out);
	/* Adds (allow 1) or removes (allow 0) grant g of m's network, live;
	 * cb(ctx, rc) on the loop once it is in effect or could not be (not
	 * after free). Errors (cb not called): SB_ERR_STATE (m has no
	 * network, or ended), those of sb_net_run_grant. */
	int (*grant)(sb_machine *m, const struct sb_net_grant *g, int allow,
		     void (*cb)(void *ctx, int rc), void *ctx);
};

/* A runner a daemon has: the name a run's plan gives (its "runner"), the
 * ops and their runner argument. The daemon's, for as long as its run
 * manager is open. */
struct sb_runner {
	const char *name;
	const struct sb_runner_ops *ops;
	void *ctx;
};

/* The local runner: QEMU microVMs on this host, under home/runs/RUN/. */
struct sb_local_runner {
	const char *home;
	sb_loop *loop; /* the daemon's */
	int warm;      /* 1: runs start from their template's warm image */
	sb_net *net;   /* network mode acl on this host, or NULL: none */
	/* what its runs may hold at once (runs.capacity_cpus and
	 * runs.capacity_memory_mib); 0: the host's: its online CPUs times
	 * SB_LOCAL_CPU_OVERCOMMIT, its memory less a tenth or
	 * SB_LOCAL_MEMORY_RESERVE_MIB, whichever is larger */
	uint64_t capacity_cpus, capacity_memory_mib;
};

#define SB_LOCAL_CPU_OVERCOMMIT	    4 /* a guest's vCPU mostly waits */
#define SB_LOCAL_MEMORY_RESERVE_MIB 1024

extern const struct sb_runner_ops sb_local_runner_ops;

/* The pid of run's QEMU in home while it lives: the one
 * home/runs/RUN/qemu.pid names when its command line names the run's
 * directory, else the one whose command line names home/runs/RUN/qmp.sock
 * (sb_vm_each); 0 when none. */
pid_t sb_local_qemu_pid(const char *home, const char *run);

#endif
