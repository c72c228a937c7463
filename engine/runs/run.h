/* run.h - one run of the run manager, and what runs.c (its lifecycle)
 * shares with from.c (reattach, forks and resumes). Private to
 * engine/runs/: nothing outside includes it.
 *
 * Threads: a struct run is the loop's, except during its creation, when
 * the worker doing the create (or from) job has it alone until it posts
 * sb_run_create_done to the loop.
 */
#ifndef SB_RUN_H
#define SB_RUN_H

#include <msgpack.h>
#include <pthread.h>

#include "engine/runs/guest.h"
#include "engine/runs/plan.h"
#include "engine/runs/roll.h"
#include "engine/runs/runs.h"

enum sb_run_state { SB_RUN_CREATING, SB_RUN_RUNNING };

/* What a fork or resume continues (from.on 0: a new run). */
struct sb_run_from {
	int on, resume;
	int exact;	     /* what it continues is exactly the run's state at at */
	struct sb_roll roll; /* what its roll-forward did */
	char run[SB_RUN_MAX], snap[72];
	unsigned layer;
	int start; /* no snapshot at or before at: from the run's start */
	uint64_t offset, at;
	uint64_t spent;	       /* a resume: what its budget had spent */
	uint64_t memory_bytes; /* > 0: the machine continues a memory snapshot */
	char *prompt;	       /* a new prompt (owned), or NULL */
	char name[SB_PLAN_NAME_MAX];
};

/* A run's creation, handed from the loop to a worker and back. */
struct sb_run_create {
	const msgpack_object *spec; /* the caller's, until cb */
	sb_runs_created_fn cb;
	void *ctx;
	int rc, recorded, start_failed;
	char err[1024], accel[8], accel_warning[256];
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

struct job;

struct sb_runs {
	struct sb_runs_env env;
	struct run *live;
	unsigned active;
	sb_watch *flush_w;
	msgpack_sbuffer batch, blobs; /* the items' payloads, and their blobs */
	struct sb_batch_item *items;
	size_t nitems, capitems;
	struct job *jobs;	 /* sent to a worker, not back yet */
	int unrecorded;		 /* a batch failed since the guests' last ACK */
	pthread_mutex_t stop_mu; /* one record closed by a stop at a time */
};

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
 * extra (a fork's run.forked; NULL: none). On a worker. Errors: the
 * log's, SB_ERR_NOMEM. */
int sb_runs_record_plan(struct sb_runs *rs, const struct sb_plan *p,
			const struct sb_event *extra);
/* The live run id, or NULL. */
struct run *sb_runs_find(struct sb_runs *rs, const char *id);

/* A line for the run's run.warning. */
void sb_run_warn(struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
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
/* Timer callbacks (ctx: the run): its timeout, its boot's deadline. */
void sb_run_on_timeout(void *ctx);
void sb_run_on_boot_deadline(void *ctx);
/* Posted by a create or from job when done (ctx: the run): the run
 * starts, or its creation is answered with its error. */
void sb_run_create_done(void *ctx);

/* --- from.c --- */

/* Takes up run, which its record says is live (at sb_runs_open). */
void sb_runs_reattach(struct sb_runs *rs, const char *run);

#endif
