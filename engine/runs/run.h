/* run.h - one run of the run manager, and what runs.c (its lifecycle)
 * shares with from.c (reattach, forks and resumes). Private to
 * engine/runs/: nothing outside includes it.
 *
 * Calls go one way: from.c, live.c and queue.c call into runs.c (and
 * from.c into queue.c), runs.c into queue.c and none of the others back.
 * runs.c reaches what it hands on only through hooks in struct sb_runs:
 * queue.c starts an admitted run through rs->start_admitted, and runs.c
 * hands the guest's answers and a run's end to live.c through
 * rs->live_ops. manager.c puts the manager together (sb_runs_open: it
 * installs the hooks and takes up the runs a previous daemon left through
 * from.c) and calls into all of them; nothing calls into it.
 *
 * Threads: a struct run is the loop's, except during its creation, when
 * the worker doing the create (or from) job has it alone until it posts
 * sb_run_create_done to the loop.
 */
#ifndef SB_RUN_H
#define SB_RUN_H

#include <msgpack.h>
#include <pthread.h>

#include "engine/gateway/rerun.h"
#include "engine/runs/guest.h"
#include "engine/runs/plan.h"
#include "engine/runs/roll.h"
#include "engine/runs/runs.h"

/* A run is CREATING while a worker makes it (its plan, its record, its
 * machine), QUEUED while it waits for its runner's capacity (it holds none;
 * a worker makes its machine once it gets its share), RUNNING once its
 * machine started. */
enum sb_run_state { SB_RUN_CREATING, SB_RUN_QUEUED, SB_RUN_RUNNING };

/* What a fork or resume continues (from.on 0: a new run). */
struct sb_run_from {
	int on, resume;
	int exact;	     /* what it continues is exactly the run's state at at */
	struct sb_roll roll; /* what its roll-forward did */
	char run[SB_RUN_MAX], snap[72];
	unsigned layer;
	char layer_name[SB_SNAPSHOT_NAME_MAX]; /* its runner's name of it */
	int start; /* no snapshot at or before at: from the run's start */
	int session; /* its harness had begun its own session by then */
	uint64_t offset, at;
	uint64_t spent;	       /* a resume: what its budget had spent */
	uint64_t budget_nusd;  /* its budget from now on (run.resumed's), or 0 */
	int budget_stopped;    /* a resume: its budget stopped the run */
	uint64_t memory_bytes; /* > 0: the machine continues a memory snapshot */
	char *prompt;	       /* a new prompt (owned), or NULL */
	char name[SB_PLAN_NAME_MAX];
	char group[SB_PLAN_NAME_MAX]; /* a fork's own group, or "": the run's */
	char runner[SB_PLAN_RUNNER_MAX]; /* the runner asked for, or "": run's */
	int rerun;	  /* a re-run: 1, going on live after a divergence: 2 */
	int compared;	  /* a re-run's rerun.compared is asked for (at its end) */
	int never_ran;	  /* stopped while queued: its machine never started */
	sb_rerun *calls;  /* a re-run's recorded calls (owned until the
			   * gateway takes them) */
};

/* A run's creation, handed from the loop to a worker and back. */
struct sb_run_create {
	const msgpack_object *spec; /* the caller's, until cb */
	sb_runs_created_fn cb;
	void *ctx;
	int rc, recorded, start_failed;
	char err[1024], accel[8], accel_warning[256];
	struct sb_post post; /* a worker's way back to the loop: the create's,
			      * then the machine's once a queued run is let in */
};

/* The run's model access through the gateway. */
struct sb_run_key {
	char vkey[SB_VKEY_MAX];
	char alias[SB_VKEY_MAX]; /* a memory fork: its parent's key, which its
				  * continued processes hold; or "" */
	int registered;		 /* known to the gateway */
	uint64_t group_spent;	 /* what its group spent when it was created
				  * or taken up (a group budget only) */
	uint64_t refused;	 /* tunnel connections the gateway refused */
	double warned_at;
};

struct run {
	struct sb_runs *rs;
	char id[SB_RUN_MAX];
	enum sb_run_state st;
	struct sb_plan plan;
	const struct sb_runner *runner; /* the one plan.runner names, once the
					 * plan is known (always with m) */
	sb_machine *m;
	sb_guest *g;
	sb_snapper *snap;
	int end_status; /* the machine's, kept for the end's record */
	char end_why[600];
	msgpack_sbuffer spec; /* the SPEC frames, until sent (they hold secrets) */
	int hello, done, exited, reattached;
	char stop_reason[32];
	char setup_error[256];
	sb_watch *timeout_w, *boot_w, *grace_w;
	int restored_sent;
	int thaw_due;	 /* a snapshot was under way when a daemon died: THAW */
	int turns;	 /* the harness reports its turns (else its model calls count) */
	int asked_twice; /* a stop's grace passed: SIGTERM again, and SYNC */
	int winding_down; /* its budget stopped it: its harness may end itself
			   * until grace_w fires (then it is asked to) */
	int admitted;	 /* it holds its share of its runner's capacity
			  * (plan.cpus and plan.memory_mib) until it ends */
	uint64_t queued_offset; /* its run.queued, or 0 */
	uint64_t ack_at;	/* its guest's frames taken when the commit
				 * being made began (batch.c) */
	struct run *qnext;	/* in its runner's queue */
	int ready;		/* the guest is past its set-up: its harness runs */
	struct sb_live_op *ops; /* commands and puts waiting for the guest */
	struct sb_run_key key;
	struct sb_run_from from;
	struct sb_run_create create;
	struct run *next;
};

#define SB_RUNS_BATCH_BLOBS_MAX (16u << 20) /* blob bytes a batch holds
					     * before it is recorded */

/* An event gathered during a loop iteration, recorded in one append. */
struct sb_batch_item {
	char run[SB_RUN_MAX], type[SB_TYPE_MAX];
	enum sb_source src;
	size_t off, len;
	size_t blob_off, blob_len; /* its blob in the batch's blobs, or len 0 */
	int has_blob;
};

/* Events gathered to be recorded in one append (batch.c). */
struct sb_batch {
	msgpack_sbuffer payloads, blobs; /* the items' payloads, and their blobs */
	struct sb_batch_item *items;
	size_t n, cap;
};

struct job;

/* One runner's capacity for runs, what its runs hold, and the queue of
 * its runs waiting for it, oldest first (queue.c). */
struct sb_runs_cap {
	uint64_t cpus, memory_mib;	     /* what its runs may hold at once */
	uint64_t used_cpus, used_memory_mib; /* what its admitted runs hold */
	struct run *queue;
	size_t nqueued;
};

/* live.c's part of a run's guest channel, which runs.c calls through
 * rs->live_ops (live.c installs nothing; manager.c points rs->live_ops at
 * sb_run_live_ops). Both on the loop, with r valid during the call. */
struct sb_run_live_ops {
	/* The guest answered (EXEC_OUT, EXEC_EXIT, PUT_DONE) op stream of r;
	 * body is the guest's, valid during the call. An answer nobody
	 * waits for is dropped. */
	void (*answer)(struct run *r, int kind, uint64_t stream, const msgpack_object *body);
	/* r ends (or its guest channel closed): every op of r waiting for
	 * its guest is answered with SB_ERR_STATE and freed. Called before
	 * r's guest is closed and r freed. */
	void (*fail)(struct run *r);
};

struct sb_runs {
	struct sb_runs_env env;
	struct run *live;
	unsigned active;
	/* recording (batch.c): under rec_mu */
	pthread_mutex_t rec_mu;
	pthread_cond_t rec_cv;	 /* committing ended */
	struct sb_batch cur;	 /* gathered in this loop turn */
	struct sb_batch commit;	 /* being appended by the recorder */
	int committing;		 /* commit is being appended */
	int committed;		 /* commit is appended (commit_rc), not yet ACKed */
	int commit_rc;
	int unrecorded;		 /* a batch failed: no ACK from this daemon */
	sb_work *recorder;	 /* one thread: commits in order */
	sb_watch *flush_w;	 /* the end of each loop turn */
	sb_watch *committed_w;	 /* the recorder's commit is done */
	struct job *jobs;	 /* sent to a worker, not back yet */
	pthread_mutex_t stop_mu; /* one record closed by a stop at a time */
	/* each runner's capacity and queue: caps[i] is env.runners[i]'s,
	 * under cap_mu (a worker admits a run it makes) */
	pthread_mutex_t cap_mu;
	struct sb_runs_cap *caps;
	uint64_t live_id; /* the last id given to a command or put (live.c) */
	int pump_held; /* 1 while runs are taken up at the start: their order
			* is known once all are in the queue */
	/* runs.c's: a queued run, admitted now, is made and started; the
	 * queue (queue.c) calls nothing else of the lifecycle. On the loop;
	 * r is the lifecycle's from then on. */
	void (*start_admitted)(struct run *r);
	/* live.c's, for runs.c: set as the manager opens, static data that
	 * outlives it */
	const struct sb_run_live_ops *live_ops;
};

/* --- batch.c: recording the runs' events --- */

/* Sets up rs's recording: its batches, the recorder thread and the loop's
 * watchers. On error sb_runs_batch_close still frees what was made.
 * Errors: SB_ERR_NOMEM, SB_ERR_IO (no thread). */
int sb_runs_batch_open(struct sb_runs *rs);
/* Records what is gathered (synced), waits for the recorder and frees the
 * recording. Guests are not ACKed: they send it again to the next daemon. */
void sb_runs_batch_close(struct sb_runs *rs);
/* Gathers an event (payload: one msgpack map) and its blob (or NULL) to
 * be recorded after this loop turn, off the loop. Any thread. Out of
 * memory: the event is lost, and a line says so. */
void sb_runs_batch_add(struct sb_runs *rs, const char *run, const char *type,
		       enum sb_source src, const void *payload, size_t len,
		       const void *blob, size_t blob_len);
/* Records every event gathered so far (synced when it returns). Any
 * thread; it waits for a commit under way. A failed append is logged. */
void sb_runs_settle(struct sb_runs *rs);
/* Records n events at once (synced when it returns), after every event
 * gathered before. Any thread; it waits for a commit under way. Errors:
 * the log's. */
int sb_runs_record(struct sb_runs *rs, struct sb_event *evs, size_t n);
/* sb_runs_record with the nblobs contents the events name, durable with
 * them (sb_log_append_blobs). */
int sb_runs_record_blobs(struct sb_runs *rs, const struct sb_blob *blobs, size_t nblobs,
			 struct sb_event *evs, size_t n);

/* --- runs.c: on the loop unless said --- */

/* The events every machine reports with. */
extern const struct sb_machine_events sb_run_machine_events;

/* Records a host event of run whose payload is alternating key/value C
 * strings ending with NULL, at once (after the batch, which keeps the
 * run's order). Any thread. Errors: the log's, SB_ERR_NOMEM. */
int sb_runs_host_event(struct sb_runs *rs, const char *run, const char *type, ...);
/* run.failed with reason, then run.stopped (failed). Errors: the log's. */
int sb_runs_record_failed(struct sb_runs *rs, const char *run, const char *reason);
/* Records a new run's plan in one append: run.created,
 * run.policy.resolved (inputs as blobs), one secret.granted per grant and
 * the nextra events of extra (a fork's run.forked, run.queued). On a worker. Errors: the
 * log's, SB_ERR_NOMEM. */
int sb_runs_record_plan(struct sb_runs *rs, const struct sb_plan *p,
			struct sb_event *extra, size_t nextra);
/* The live run id, or NULL. */
struct run *sb_runs_find(struct sb_runs *rs, const char *id);

/* A line for the run's run.warning. */
void sb_run_warn(struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Records ev (its payload ready) with the nblobs blobs in one commit,
 * after the batch (which keeps the run's order), at once; sets
 * ev->offset. Errors: the log's. */
int sb_runs_append(struct sb_runs *rs, struct sb_event *ev, const struct sb_blob *blobs,
		   size_t nblobs);

/* --- live.c: commands and files for a live run's guest --- */

struct sb_live_op;

/* What live.c gives runs.c (through rs->live_ops). */
extern const struct sb_run_live_ops sb_run_live_ops;

/* --- runs.c, again --- */

/* Starts queued run r, admitted now (rs->start_admitted): its machine is
 * made on a worker, then it starts (or, the pool closing, its creation is
 * answered with why). On the loop. */
void sb_run_start_admitted(struct run *r);
/* Frees rs's live runs (their machines keep running, for the next daemon
 * to take up) and the jobs not back from a worker; rs->env.idle is not
 * called any more. On the loop, its recording closed first. */
void sb_runs_lifecycle_close(struct sb_runs *rs);

/* Frees r and what it holds (NULL is fine); its machine keeps running. */
void sb_run_free(struct run *r);
/* Adds r to its manager's live runs. */
void sb_run_link(struct run *r);
/* Derives the run's virtual key into vkey (any thread). Errors: the
 * secret store's. */
int sb_run_vkey_derive(const char *home, const char *run, char vkey[SB_VKEY_MAX]);
/* Packs r's SPEC frames into r->spec (on the worker that creates r).
 * Errors: SB_ERR_NOMEM, the plan's. */
int sb_run_spec_pack(struct run *r);
/* Registers r with the gateway (budget spent so far: spent) and opens its
 * guest channel. Errors: the gateway's, SB_ERR_NOMEM. */
int sb_run_connect(struct run *r, uint64_t spent);
/* Sets r->key.group_spent from the costs projection, caught up, when r's
 * plan has a group budget. On a worker (or before serving). Errors: the
 * projections'. */
int sb_run_group_spent(struct run *r);
/* Watches r's timeout, left seconds from now, and, when boot, its boot's
 * deadline. On the loop. Errors: SB_ERR_NOMEM (neither is watched). */
int sb_run_deadlines_watch(struct run *r, double left, int boot);
/* Posted by a create or from job when done (ctx: the run): the run
 * starts, or its creation is answered with its error. */
void sb_run_create_done(void *ctx);

/* On a worker: makes r's machine (create, or create_from for a fork or
 * resume that continues a snapshot), then the guest's SPEC (its NIC is
 * the machine's); on error nothing of it is left. Errors: the runner's,
 * the plan's. */
int sb_run_machine_make(struct run *r);
/* On a worker: records r's plan (first: a fork's run.forked, recorded
 * with it; a resume's run.resumed, recorded instead of it; or NULL) and
 * its run.queued, in one append, and sets r->queued_offset. Errors: the
 * log's, SB_ERR_NOMEM. */
int sb_run_record_queued(struct run *r, const struct sb_event *first);
/* On the loop: r, made and recorded by a worker, waits in the queue: the
 * request is answered, and r starts in its turn. */
void sb_run_queued_done(void *ctx);

/* --- queue.c: each runner's capacity and queue ---
 *
 * A run's runner is r->runner (set before any of these is called with r,
 * but for sb_runs_dequeue); what it holds and waits for is its runner's. */

/* Sets rs->caps, one per runner of rs->env, from each runner's capacity
 * op (a runner without one: no limit). As the manager opens (the ops may
 * block). Errors: SB_ERR_NOMEM. */
int sb_runs_capacity_init(struct sb_runs *rs);
/* Frees rs->caps (the queues' runs are the live list's). */
void sb_runs_capacity_free(struct sb_runs *rs);
/* Errors: SB_ERR_INVAL when plan p can never fit the capacity of the
 * runner p->runner names, or rs has no such runner (the detail says what
 * it asks and what the runner, by name, gives). Any thread. */
int sb_runs_fits_ever(struct sb_runs *rs, const struct sb_plan *p);
/* Admits r if it fits its runner now and no run waits before it there: it
 * then holds its share (r->admitted). Returns 1 when admitted, else 0.
 * Any thread. */
int sb_run_admit(struct run *r);
/* r takes its share whether it fits or not (a run taken up again: its
 * machine runs). Any thread. */
void sb_run_hold(struct run *r);
/* Gives r's share back (nothing when it holds none) and starts the
 * queued runs that fit now, each runner's in order. On the loop. */
void sb_run_release(struct run *r);
/* Adds r to its runner's queue, in the order of its queued_offset, and
 * starts what fits. On the loop. */
void sb_runs_enqueue(struct run *r);
/* Starts the queued runs that fit their runner now, each runner's oldest
 * first. On the loop. */
void sb_runs_pump(struct sb_runs *rs);
/* Takes r out of its runner's queue (nothing when it is not in it, or
 * has no runner yet). On the loop. */
void sb_runs_dequeue(struct run *r);
/* Packs the payload of run.queued of r into buf and points ev at it:
 * {cpus, memory_mib, ahead: the runs waiting in its runner's queue} and,
 * for a fork or resume, what it continues
 * {from_run, from_layer, memory_bytes, from_start}. Errors: SB_ERR_NOMEM. */
int sb_run_pack_queued(struct run *r, msgpack_sbuffer *buf, struct sb_event *ev);

/* --- from.c --- */

/* Takes up run, which its record says is live (manager.c, as the manager
 * opens). */
void sb_runs_reattach(struct sb_runs *rs, const char *run);

#endif
