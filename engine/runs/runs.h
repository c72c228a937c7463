/* runs.h - the run manager: a run spec becomes a plan, events and a
 * machine; the manager watches the machine and ends the run (exit, stop,
 * timeout, budget, failure).
 *
 * Everything here runs on the daemon's loop; what may block (resolving the
 * plan, the disk layer, the accelerator probe, recording the run, catching
 * the projections up and reading them, looking for a layer's readers) runs
 * on the jobs pool, and the request is answered when that is done.
 * Machines are reached only through a runner (engine/runs/runner.h),
 * guests through their channel (engine/runs/guest.h). Events the guests
 * send during one loop iteration are recorded in one append at its end.
 */
#ifndef SB_RUNS_H
#define SB_RUNS_H

#include <msgpack.h>

#include "engine/loop.h"
#include "engine/settings.h"
#include "engine/work.h"
#include "engine/gateway/gateway.h"
#include "engine/gateway/stubs.h"
#include "engine/log/event.h"
#include "engine/log/log.h"
#include "engine/runs/runner.h"
#include "engine/runs/snapper.h"
#include "projections/projection.h"

struct sb_runs;

/* What the run manager works with; everything must outlive it. */
struct sb_runs_env {
	const char *home;
	const struct sb_settings *settings;
	sb_loop *loop;
	sb_log *log;
	sb_projector *proj;
	sb_gateway *gateway;
	sb_work *jobs;
	sb_stubs *stubs;
	/* The runners (nrunners, at least one, distinct names), for a run's
	 * plan to name one; a spec that names none gets "local". */
	const struct sb_runner *runners;
	size_t nrunners;
	sb_net *net; /* network acl on this host (what plans check), or NULL */
	/* On the loop: no run has a machine any more (sb_runs_active is 0). */
	void (*idle)(void *ctx);
	/* A line for the daemon's log (something that could not be recorded). */
	void (*log_line)(void *ctx, const char *line);
	void *ctx;
};

/* Opens the run manager and takes up the runs a previous daemon left
 * running: each whose machine still runs is reattached (its guest goes on
 * and its run ends normally), each whose machine is gone gets run.failed
 * (or, had it exited, its run.stopped), each that never started gets
 * run.failed (reason "daemon-restart"). May block (it arms the reattached
 * runs' model access): call it before serving. Errors: SB_ERR_NOMEM,
 * SB_ERR_IO, log errors. */
int sb_runs_open(const struct sb_runs_env *env, struct sb_runs **out);

/* Stops watching runs and frees (NULL is fine). Machines still running
 * keep running, for the next daemon to reattach. */
void sb_runs_close(struct sb_runs *r);

/* Called on the loop when a run.create is done: rc SB_OK with the new
 * run's id (the run may have failed to start: its run.failed says why), or
 * an error with its detail (sb_errmsg) and nothing recorded. */
typedef void (*sb_runs_created_fn)(void *ctx, int rc, const char *run);

/* Creates and starts a run from spec (which must stay valid until cb is
 * called) on the runner its plan names; cb is called once, later, on the
 * loop (with SB_ERR_INVAL and nothing recorded when the daemon has no
 * runner of that name: the detail lists those it has). Errors (then cb is
 * not called): SB_ERR_NOMEM, SB_ERR_UNAVAIL (the daemon is stopping),
 * SB_ERR_EXISTS (a live run has the spec's name; the detail names it). */
int sb_runs_create(struct sb_runs *r, const msgpack_object *spec, sb_runs_created_fn cb,
		   void *ctx);

/* A group of runs to create (group.create): the caller's, valid until the
 * answer. Every spec has "group" = name and "group_budget_nusd" =
 * budget_nusd (0 or absent: none), and a name. */
struct sb_group_req {
	const char *name; /* printable, 1 to 63 bytes */
	const char *goal; /* or NULL */
	uint64_t budget_nusd;
	const msgpack_object *specs; /* an array of 1 to 256 run specs */
};

/* Called on the loop when a group.create is done: rc SB_OK with the
 * group's id and its runs' ids (n: all of them), or an error with its
 * detail; the runs created before it (n of them) go on. */
typedef void (*sb_runs_group_fn)(void *ctx, int rc, const char *group_id,
				 char (*runs)[SB_RUN_MAX], size_t n);

/* Creates a group: checks it whole (no other group has its name; its
 * runs' names are distinct and no live run's; every plan resolves and can
 * fit its runner), records group.created, then creates its runs in order
 * (each queues when it does not fit). cb is called once, later, on the
 * loop; an error found before group.created is recorded leaves nothing
 * recorded, and its detail names the run ("runs[2]: ..."). Errors (then
 * cb is not called): SB_ERR_INVAL (no name, no runs or more than 256, a
 * run without a name or with another's), SB_ERR_EXISTS (a live run has a
 * run's name), SB_ERR_NOMEM. */
int sb_runs_group_create(struct sb_runs *rs, const struct sb_group_req *q,
			 sb_runs_group_fn cb, void *ctx);

/* Forks every run of group src, each from its newest snapshot, into a new
 * group name (its goal and budget src's): checks that src exists and name
 * is no group's, records group.created, then forks the runs in src's
 * order (each named as its run when no live run has that name, else by
 * its id; each queued when it does not fit). cb as for
 * sb_runs_group_create; a run that cannot be forked (no snapshot) ends it
 * with "runs[N]: ..." and the forks before it go on. Errors (cb not
 * called): SB_ERR_INVAL (a bad name), SB_ERR_NOMEM. */
int sb_runs_group_fork(struct sb_runs *rs, const char *src, const char *name,
		       sb_runs_group_fn cb, void *ctx);

/* What a fork or a resume continues. */
struct sb_runs_from {
	const char *run;      /* the run continued */
	const char *snapshot; /* its snapshot ("sN"), or NULL: the newest at or
			       * before at */
	uint64_t at;	      /* an offset of run's record; UINT64_MAX: its end */
	int resume;	      /* 1: run itself goes on (it must have ended);
			       * 0: a new run (a fork), run is left as it is */
	const char *name;     /* the fork's name (NULL: the run's) */
	const char *group;    /* the fork's group (NULL: the run's) */
	const char *prompt;   /* a new prompt for the harness, or NULL */
	int rerun;	      /* 1: a re-run of run from its state at at (0: its
			       * start), its model calls recorded after at
			       * answered from its record; 2: the same, going on
			       * to the live model after a divergence (snapshot
			       * is not used; an at past run's last event is
			       * SB_ERR_INVAL) */
	const char *runner;   /* the runner asked for, or NULL: it runs on
			       * run's runner, which holds its snapshots (another
			       * is refused) */
	uint64_t budget_nusd; /* its LLM budget from now on, or 0: run's; a
			       * resume's must exceed what run has spent */
};

/* Creates a fork of f->run, or resumes it, from a snapshot: the snapshot
 * is looked up in the projections and the plan read back from the record
 * (on a worker), the disk is a new layer over the snapshot's, and the
 * machine starts on f->run's runner as for sb_runs_create (cb the same
 * way, also with SB_ERR_NOTFOUND: no such run or snapshot, SB_ERR_STATE: a
 * resume of a run whose record says it is live, or a run removed, and
 * SB_ERR_INVAL: f->runner is not f->run's runner; for a resume the id is
 * f->run's). f is
 * copied. Errors (cb not called): SB_ERR_STATE (a resume of a run that has
 * a machine here), SB_ERR_NOMEM, SB_ERR_UNAVAIL. */
int sb_runs_from(struct sb_runs *r, const struct sb_runs_from *f, sb_runs_created_fn cb,
		 void *ctx);

/* How a change of a run's grants ended: rc SB_OK with the grant in
 * canonical form, or an error (the detail during the call). */
typedef void (*sb_grant_fn)(void *ctx, int rc, const char *grant);

/* Adds (allow 1) or removes (allow 0) the grant text of live run (network
 * acl) without a restart; once it is in effect net.grant.added or
 * net.grant.removed {grant, by} is recorded and cb(ctx, ...) called, once,
 * later. Errors (cb not called): SB_ERR_INVAL (a bad grant: the detail
 * quotes it), SB_ERR_STATE (not running, or not network acl),
 * SB_ERR_EXISTS, SB_ERR_NOTFOUND (the run has that grant already, or has
 * it not), SB_ERR_FULL, SB_ERR_NOMEM. */
int sb_runs_grant(struct sb_runs *r, const char *run, const char *grant, int allow,
		  const char *by, sb_grant_fn cb, void *ctx);

/* Takes a snapshot of live run (memory: with its memory), answered
 * through cb once, later. Errors (cb not called): SB_ERR_STATE (the run
 * is not running), SB_ERR_NOMEM. */
int sb_runs_snapshot(struct sb_runs *r, const char *run, int memory, sb_snap_fn cb,
		     void *ctx);

/* Has a running run's guest write its files out to its disk, for a read
 * of the disk to see what the guest sees; cb once on the loop, as
 * sb_snapper_sync's. Errors (cb not called): SB_ERR_STATE (the run is not
 * running, or its guest is not connected), SB_ERR_NOMEM. */
int sb_runs_sync(struct sb_runs *r, const char *run, sb_sync_fn cb, void *ctx);

/* Commands and files for a live run's guest (engine/runs/live.c). */

#define SB_EXEC_TIMEOUT_MAX_MS (24u * 3600 * 1000) /* timeout_ms's */

/* A command to run in a live run's guest, beside its harness. The
 * caller's, valid until the callback. */
struct sb_exec_req {
	const char *run;
	const msgpack_object *argv; /* 1 to 1024 strings */
	const void *stdin_data;	    /* or NULL: /dev/null */
	size_t stdin_len;	    /* <= SB_CHAN_EXEC_STDIN_MAX */
	uint64_t timeout_ms;	    /* 1 .. SB_EXEC_TIMEOUT_MAX_MS */
	uint64_t output_max;	    /* bytes of each stream kept, <= SB_CHAN_EXEC_OUTPUT_MAX */
	const char *by;		    /* who asked (the client) */
};

/* Files to write into a live run's guest under /workspace: an array of
 * {path (relative to /workspace, no "", "." or ".." part), mode (uint:
 * permission bits, with S_IFLNK for a link, whose data is its target, or
 * S_IFDIR for a directory, with no data), data (bin)}. The caller's,
 * valid until the callback. */
struct sb_put_req {
	const char *run;
	const msgpack_object *files; /* 1 to SB_CHAN_INPUT_FILES, data
				      * SB_CHAN_INPUTS_MAX bytes in all */
	const char *by;
};

/* How a command or a put ended: rc SB_OK with answer the guest's
 * EXEC_EXIT or PUT_DONE body (a map, valid during the call) and offset
 * the operator.exec or operator.cp event recorded; for an exec, out[i]
 * (out_len[i] bytes, masked as the record has them) what it wrote to
 * stdout and stderr, kept up to output_max each (truncated: more came).
 * Else an error (the detail during the call) and answer NULL. */
struct sb_live_result {
	int rc;
	int exec; /* 1: a command's, 0: a put's */
	const msgpack_object *answer;
	uint64_t offset;
	const void *out[2];
	size_t out_len[2];
	int truncated;
};
typedef void (*sb_live_fn)(void *ctx, const struct sb_live_result *res);

/* Runs q's command in live run q->run's guest; cb once, later, on the
 * loop, once it ended and operator.exec is recorded, or with an error:
 * SB_ERR_TIMEOUT (the guest did not answer within the command's timeout
 * and 10 s more), SB_ERR_STATE (the run ended first). Errors (cb not
 * called): SB_ERR_STATE (the run is not running, or its harness is not
 * started yet), SB_ERR_INVAL, SB_ERR_NOMEM. */
int sb_runs_exec(struct sb_runs *rs, const struct sb_exec_req *q, sb_live_fn cb,
		 void *ctx);

/* Writes q's files into live run q->run's guest (never through a link,
 * as its inputs are); cb once, later, on the loop, once the guest wrote
 * them and operator.cp is recorded, or with an error as sb_runs_exec's
 * (the guest has 60 s). Errors (cb not called): SB_ERR_STATE,
 * SB_ERR_INVAL (a path, a mode or a size refused: the detail names the
 * file), SB_ERR_TOOBIG, SB_ERR_NOMEM. */
int sb_runs_put(struct sb_runs *rs, const struct sb_put_req *q, sb_live_fn cb, void *ctx);

/* A model call of run was recorded: for a run whose harness reports no
 * turns, an automatic snapshot (as after a turn). On the loop. */
void sb_runs_model_call(struct sb_runs *r, const char *run);

/* Called on the loop when a stop is done: rc SB_OK, or an error with its
 * detail (sb_errmsg). */
typedef void (*sb_runs_stopped_fn)(void *ctx, int rc);

/* Stops run: asks the harness to end (SIGTERM), then ends the machine
 * after a grace period; reason goes into run.stopped. A run with no
 * machine here whose record says it is live (it never started) gets its
 * run.stopped at once, from a worker (the projections caught up first).
 * cb (NULL: nobody waits) is called once, later, on the loop, with SB_OK
 * or SB_ERR_NOTFOUND (no such run), SB_ERR_STATE (it is not running), a
 * log error. Errors (cb not called): SB_ERR_NOMEM, SB_ERR_STATE (the jobs
 * pool is closing). */
int sb_runs_stop(struct sb_runs *r, const char *run, const char *reason,
		 sb_runs_stopped_fn cb, void *ctx);

/* Stops every run with a machine (or being created) as sb_runs_stop does. */
void sb_runs_stop_all(struct sb_runs *r, const char *reason);

/* Runs with a machine, or being created. */
unsigned sb_runs_active(struct sb_runs *r);

/* One runner's capacity for runs and what its runs hold and wait for. */
struct sb_runs_capacity {
	const char *name;		     /* the runner's (valid while the
					      * manager is open) */
	uint64_t cpus, memory_mib;	     /* what its runs may hold at once
					      * (UINT64_MAX: no limit) */
	uint64_t used_cpus, used_memory_mib; /* what its admitted runs hold */
	size_t queued;			     /* its runs waiting for it */
};

/* Fills out[0 .. cap) with r's runners' capacities, in the order of its
 * env's runners (the first the one a spec that names none gets), and
 * returns how many runners r has (call with cap 0 to learn it). Any
 * thread. */
size_t sb_runs_capacity_read(struct sb_runs *r, struct sb_runs_capacity *out, size_t cap);

struct sb_runstate;

/* Opens the disk of the run st describes (its record's state) for reading
 * through the runner that holds it (st->runner; "local" when the record
 * names none): layer, the runner's name of one of its frozen layers (a
 * snapshot's, as the record keeps it), or NULL: its current disk. The
 * caller closes *out with sb_fsread_close. Any thread, but it may block:
 * call it on a worker. Errors: SB_ERR_INVAL (the daemon has no such
 * runner), SB_ERR_UNAVAIL (the runner serves no reads of its disks),
 * those of the runner's disk_open. */
int sb_runs_disk_open(struct sb_runs *r, const struct sb_runstate *st, const char *layer,
		      sb_fsread **out);

/* Opens the root file system the run st describes started on: its
 * template as recorded (st->template, st->template_hash), from the template
 * store of the runner that holds the run, as a raw image. The caller closes
 * *out with sb_fsread_close. Any thread, but it may block: call it on a
 * worker. Errors: SB_ERR_INVAL (the daemon has no such runner),
 * SB_ERR_UNAVAIL (the runner serves no reads of its templates),
 * SB_ERR_STATE (the template was built again since the run started),
 * those of the runner's template_open. */
int sb_runs_template_open(struct sb_runs *r, const struct sb_runstate *st, sb_fsread **out);

/* Lists the runs that read the frozen layer layer of the run st describes
 * as its runner's readers does (users, max, *count). Any thread, but it
 * may block: call it on a worker. Errors: SB_ERR_INVAL (the daemon has no
 * such runner), those of the runner's readers. */
int sb_runs_readers(struct sb_runs *r, const struct sb_runstate *st, unsigned layer,
		    char (*users)[SB_RUN_MAX], size_t max, size_t *count);

/* Deletes the frozen layer layer of the run st describes (its machine
 * ended) through its runner's remove_layer. Any thread, but it may
 * block: call it on a worker. Errors: SB_ERR_INVAL (the daemon has no
 * such runner), SB_ERR_UNAVAIL (the runner removes no snapshots), those
 * of the runner's remove_layer. */
int sb_runs_layer_remove(struct sb_runs *r, const struct sb_runstate *st, unsigned layer);

/* Deletes what the runner of the run st describes (removed: its machine
 * ended) holds of it that no other run reads, through that runner's
 * release: *out gets what it freed (dry: deletes nothing, *out says what
 * it would). A runner without release frees nothing (*out zeroed). Any
 * thread, but it may block: call it on a worker. Errors: SB_ERR_INVAL
 * (the daemon has no such runner), those of the runner's release. */
int sb_runs_release(struct sb_runs *r, const struct sb_runstate *st, int dry,
		    struct sb_layers_freed *out);

/* Sets *u to the space the runs of all of r's runners take, each
 * runner's usage added up (one without usage counts as none). Any
 * thread, but it may block: call it on a worker. Errors: those of a
 * runner's usage (the first that fails). */
int sb_runs_usage(struct sb_runs *r, struct sb_layers_usage *u);

/* Points *out at r's runner named name. Any thread. Errors: SB_ERR_INVAL
 * (no such runner: the detail names those r has). */
int sb_runs_runner(struct sb_runs *r, const char *name, const struct sb_runner **out);

#endif
