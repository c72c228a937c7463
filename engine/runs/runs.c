/* runs.c - the run manager: its runs' lifecycles (see runs.h).
 *
 * A run is created in three steps: on a worker its plan is resolved, it is
 * recorded (run.created, run.policy.resolved with the inputs as blobs,
 * secret.granted) and its machine prepared; then on the loop the machine
 * starts (run.started) and the guest channel takes over: HELLO, then the
 * SPEC, then the guest's events until DONE and the machine's end.
 */
#include "engine/runs/runs.h"

#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/error.h"
#include "engine/mpack.h"
#include "engine/runs/guest.h"
#include "engine/runs/plan.h"
#include "engine/runs/roll.h"
#include "engine/runs/snapper.h"
#include "projections/views.h"
#include "vmm/chan.h"
#include "vmm/fsread.h"

#define STOP_GRACE_S	  5.0  /* SIGTERM to the harness, then the machine ends */
#define KILL_GRACE_S	  5.0  /* the machine ends gracefully, then by force */
#define GUEST_TUNNEL_PORT 4000 /* the gateway, as the harness sees it */

enum rstate { R_CREATING, R_RUNNING };

struct run {
	struct sb_runs *rs;
	char id[SB_RUN_MAX];
	enum rstate st;
	struct sb_plan plan;
	sb_machine *m;
	sb_guest *g;
	sb_snapper *snap;
	int end_status; /* the machine's, kept for the end's record */
	char end_why[600];
	char vkey[SB_VKEY_MAX];
	char alias_key[SB_VKEY_MAX]; /* a memory fork: its parent's key, which its
				      * continued processes hold; or "" */
	int registered;		     /* known to the gateway */
	msgpack_sbuffer spec;	     /* the SPEC frames, until sent (they hold secrets) */
	int hello, done, exited, reattached;
	char stop_reason[32];
	char setup_error[256];
	sb_watch *timeout_w, *boot_w, *grace_w;
	uint64_t gw_refused; /* tunnel connections the gateway refused */
	double gw_warned_at;
	/* a fork or resume: what it continues */
	int from, resume, exact;
	struct sb_roll roll; /* what its roll-forward did */
	char from_run[SB_RUN_MAX], from_snap[72];
	unsigned from_layer;
	int from_start; /* no snapshot at or before at: from the run's start */
	uint64_t from_offset, at, spent;
	uint64_t memory_bytes; /* > 0: the machine continues a memory snapshot */
	int restored_sent;
	int thaw_due; /* a snapshot was under way when a daemon died: THAW */
	int turns; /* the harness reports its turns (else its model calls count) */
	char *new_prompt, new_name[SB_PLAN_NAME_MAX];
	/* creation, across the worker */
	const msgpack_object *spec_obj;
	sb_runs_created_fn cb;
	void *cb_ctx;
	int create_rc, recorded, start_failed;
	int asked_twice; /* a stop's grace passed: SIGTERM again, and SYNC */
	char create_err[1024], accel[8], accel_warning[256];
	struct run *next;
};

#define BATCH_BLOBS_MAX (16u << 20) /* blob bytes a batch holds before it is recorded */

/* Events gathered during a loop iteration, recorded in one append. */
struct batch_item {
	char run[SB_RUN_MAX], type[SB_TYPE_MAX];
	enum sb_source src;
	size_t off, len;
	size_t blob_off, blob_len; /* its blob in the batch's blobs, or len 0 */
	int has_blob;
};

struct sb_runs {
	struct sb_runs_env env;
	struct run *live;
	unsigned active;
	sb_watch *flush_w;
	msgpack_sbuffer batch, blobs; /* the items' payloads, and their blobs */
	struct batch_item *items;
	size_t nitems, capitems;
	struct job *jobs;	 /* sent to a worker, not back yet */
	int unrecorded;		 /* a batch failed since the guests' last ACK */
	pthread_mutex_t stop_mu; /* one record closed by a stop at a time */
};

static void runs_log(struct sb_runs *rs, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void runs_log(struct sb_runs *rs, const char *fmt, ...)
{
	char line[600];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (rs->env.log_line)
		rs->env.log_line(rs->env.ctx, line);
}

/* --- work off the loop ---
 *
 * What reads the projections (catching them up first waits for a rebuild
 * and commits) or many files runs on the jobs pool as a job, which reports
 * back on the loop. A job is in rs->jobs until then, so a manager closed
 * first frees it. */

struct job {
	struct sb_runs *rs;
	struct job *next;
	void (*work)(struct job *j); /* on a worker; NULL: none */
	void (*done)(struct job *j); /* then on the loop */
	char run[SB_RUN_MAX];
	int rc;
	char err[300]; /* rc's detail */
	/* a stop */
	char reason[32];
	sb_runs_stopped_fn cb;
	void *ctx;
	/* retention */
	uint64_t keep;
	unsigned layer; /* the snapshot to merge away, when found */
	int found;
};

static struct job *job_new(struct sb_runs *rs, const char *run)
{
	struct job *j = calloc(1, sizeof *j);

	if (j) {
		j->rs = rs;
		snprintf(j->run, sizeof j->run, "%s", run);
	}
	return j;
}

static void job_done(void *ctx)
{
	struct job *j = ctx;

	for (struct job **p = &j->rs->jobs; *p; p = &(*p)->next) {
		if (*p == j) {
			*p = j->next;
			break;
		}
	}
	j->done(j);
	free(j);
}

static void job_work(void *ctx)
{
	struct job *j = ctx;

	sb_clearerr();
	j->work(j);
	if (j->rc)
		snprintf(j->err, sizeof j->err, "%s", sb_errmsg(j->rc));
	/* out of memory: the job stays in rs->jobs, its answer is lost */
	sb_loop_post(j->rs->env.loop, job_done, j);
}

/* Runs j's work on a worker (then its done on the loop), or with no work
 * its done on the loop, later. On error j is freed. */
static int job_submit(struct job *j)
{
	struct sb_runs *rs = j->rs;
	int rc = j->work ? sb_work_submit(rs->env.jobs, job_work, j)
			 : sb_loop_post(rs->env.loop, job_done, j);

	if (rc) {
		free(j);
		return rc;
	}
	j->next = rs->jobs; /* before job_done, which runs on this thread */
	rs->jobs = j;
	return SB_OK;
}

/* --- recording --- */

/* Records what the batch holds, in one append. */
static void batch_flush(struct sb_runs *rs)
{
	struct sb_event *evs;
	struct sb_blob *blobs;
	size_t nblobs = 0;
	int rc;

	if (!rs->nitems)
		return;
	evs = calloc(rs->nitems, sizeof *evs);
	blobs = calloc(rs->nitems, sizeof *blobs);
	if (!evs || !blobs) {
		rc = SB_ERR_NOMEM;
	} else {
		rc = SB_OK;
		for (size_t i = 0; rc == SB_OK && i < rs->nitems; i++) {
			const struct batch_item *it = &rs->items[i];
			rc = sb_event_init(&evs[i], it->type, it->run, it->src,
					   rs->batch.data + it->off, it->len);
			if (it->has_blob) {
				blobs[nblobs].data =
				    it->blob_len ? rs->blobs.data + it->blob_off : "";
				blobs[nblobs++].len = it->blob_len;
			}
		}
		/* the events and the contents they name: durable together */
		if (rc == SB_OK)
			rc = sb_log_append_blobs(rs->env.log, blobs, nblobs, evs,
						 rs->nitems);
	}
	free(evs);
	free(blobs);
	if (rc) {
		runs_log(rs, "cannot record %zu events of the runs: %s", rs->nitems,
			 sb_errmsg(rc));
		rs->unrecorded = 1; /* the guests keep theirs: no ACK */
	}
	rs->nitems = 0;
	rs->batch.size = 0;
	if (rs->blobs.data)
		sodium_memzero(rs->blobs.data, rs->blobs.size);
	rs->blobs.size = 0;
}

/* At the end of each loop turn: the batch is recorded, then each guest
 * hears that what it sent is committed (ACK), unless a batch failed: it
 * keeps its frames, sent again to the next daemon. */
static void on_flush(void *ctx)
{
	struct sb_runs *rs = ctx;

	batch_flush(rs);
	if (!rs->unrecorded)
		for (struct run *r = rs->live; r; r = r->next)
			if (r->g)
				sb_guest_ack(r->g);
}

/* Adds an event (payload: one msgpack map) and its blob (or NULL) to the
 * batch. */
static void batch_add_blob(struct sb_runs *rs, const char *run, const char *type,
			   enum sb_source src, const void *payload, size_t len,
			   const void *blob, size_t blob_len)
{
	struct batch_item *it;

	if (rs->nitems == rs->capitems) {
		size_t cap = rs->capitems ? 2 * rs->capitems : 64;
		struct batch_item *n = realloc(rs->items, cap * sizeof *n);
		if (!n) {
			runs_log(rs, "run %s: out of memory: an event %s is lost", run,
				 type);
			return;
		}
		rs->items = n;
		rs->capitems = cap;
	}
	it = &rs->items[rs->nitems];
	snprintf(it->run, sizeof it->run, "%s", run);
	snprintf(it->type, sizeof it->type, "%s", type);
	it->src = src;
	it->off = rs->batch.size;
	it->len = len;
	it->has_blob = blob != NULL;
	it->blob_off = rs->blobs.size;
	it->blob_len = blob ? blob_len : 0;
	if (msgpack_sbuffer_write(&rs->batch, payload, len) ||
	    (blob_len && msgpack_sbuffer_write(&rs->blobs, blob, blob_len))) {
		runs_log(rs, "run %s: out of memory: an event %s is lost", run, type);
		rs->batch.size = it->off;
		rs->blobs.size = it->blob_off;
		return;
	}
	rs->nitems++;
	if (rs->blobs.size > BATCH_BLOBS_MAX)
		batch_flush(rs); /* a batch of big files: not all in memory */
}

static void batch_add(struct sb_runs *rs, const char *run, const char *type,
		      enum sb_source src, const void *payload, size_t len)
{
	batch_add_blob(rs, run, type, src, payload, len, NULL, 0);
}

/* Records a host event of run whose payload is alternating key/value C
 * strings, at once (after the batch, which keeps the run's order). */
static int host_event(struct sb_runs *rs, const char *run, const char *type, ...)
{
	msgpack_sbuffer buf;
	msgpack_packer pk;
	struct sb_event ev;
	va_list ap;
	const char *k;
	size_t n = 0;
	int rc;

	va_start(ap, type);
	while (va_arg(ap, const char *))
		n++;
	va_end(ap);
	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, n / 2);
	va_start(ap, type);
	while ((k = va_arg(ap, const char *)))
		sb_pack_kstr(&pk, k, va_arg(ap, const char *));
	va_end(ap);
	batch_flush(rs);
	rc = buf.data ? sb_event_init(&ev, type, run, SB_SRC_HOST, buf.data, buf.size)
		      : SB_ERR_NOMEM;
	if (rc == SB_OK)
		rc = sb_log_append(rs->env.log, &ev, 1);
	if (rc)
		runs_log(rs, "run %s: cannot record %s: %s", run, type, sb_errmsg(rc));
	msgpack_sbuffer_destroy(&buf);
	return rc;
}

static void warn(struct run *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Records a run.warning of r (with the guest's events, in order). */
static void warn(struct run *r, const char *fmt, ...)
{
	char msg[512];
	msgpack_sbuffer buf;
	msgpack_packer pk;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 1);
	sb_pack_kstr(&pk, "message", msg);
	if (buf.data)
		batch_add(r->rs, r->id, "run.warning", SB_SRC_HOST, buf.data, buf.size);
	msgpack_sbuffer_destroy(&buf);
}

/* run.failed with reason, then run.stopped (failed). Errors: the log's. */
static int record_failed(struct sb_runs *rs, const char *run, const char *reason)
{
	int rc = host_event(rs, run, "run.failed", "reason", reason, NULL);

	return rc ? rc : host_event(rs, run, "run.stopped", "reason", "failed", NULL);
}

/* --- one run --- */

static void spec_wipe(struct run *r)
{
	if (r->spec.data)
		sodium_memzero(r->spec.data, r->spec.alloc);
	msgpack_sbuffer_destroy(&r->spec);
	msgpack_sbuffer_init(&r->spec);
}

static void run_free(struct run *r)
{
	if (!r)
		return;
	sb_watch_stop(r->timeout_w);
	sb_watch_stop(r->boot_w);
	sb_watch_stop(r->grace_w);
	sb_guest_close(r->g);
	if (r->m)
		r->rs->env.runner->free(r->m); /* before the snapper: no callback after */
	sb_snapper_close(r->snap);
	if (r->registered)
		sb_gateway_run_remove(r->rs->env.gateway, r->id);
	sb_plan_free(&r->plan);
	free(r->new_prompt);
	spec_wipe(r);
	sodium_memzero(r->vkey, sizeof r->vkey);
	sodium_memzero(r->alias_key, sizeof r->alias_key);
	free(r);
}

static void run_link(struct run *r)
{
	r->next = r->rs->live;
	r->rs->live = r;
	r->rs->active++;
}

/* Unlinks and frees r; the daemon hears when no run is left. */
static void run_end(struct run *r)
{
	struct sb_runs *rs = r->rs;

	for (struct run **p = &rs->live; *p; p = &(*p)->next) {
		if (*p == r) {
			*p = r->next;
			rs->active--;
			break;
		}
	}
	run_free(r);
	if (!rs->active && rs->env.idle)
		rs->env.idle(rs->env.ctx);
}

static struct run *run_find(struct sb_runs *rs, const char *id)
{
	for (struct run *r = rs->live; r; r = r->next)
		if (!strcmp(r->id, id))
			return r;
	return NULL;
}

/* The run's virtual key: derived from the secret store's key and the run
 * id, so a restarted daemon knows it again. */
static int vkey_derive(const char *home, const char *run, char vkey[SB_VKEY_MAX])
{
	unsigned char raw[20];
	int rc = sb_secret_derive(home, "virtual key", run, raw, sizeof raw);

	if (rc)
		return rc;
	memcpy(vkey, "sk-sb-", 6);
	sodium_bin2hex(vkey + 6, SB_VKEY_MAX - 6, raw, sizeof raw);
	sodium_memzero(raw, sizeof raw);
	return SB_OK;
}

/* --- ending a run --- */

/* A stop's grace passed: the guest is asked once more (SIGTERM again, a
 * frame lost across a daemon's restart included, and SYNC, so that what
 * it wrote reaches its disk), then, SB_SNAP_SYNC_S later, its machine is
 * ended. */
static void on_kill_grace(void *ctx)
{
	struct run *r = ctx;

	sb_watch_stop(r->grace_w);
	r->grace_w = NULL;
	if (!r->asked_twice && r->snap && r->g && sb_guest_connected(r->g)) {
		r->asked_twice = 1;
		sb_guest_signal(r->g, SIGTERM);
		sb_snapper_flush(r->snap);
		r->grace_w = sb_loop_timer(r->rs->env.loop, SB_SNAP_SYNC_S, 0, on_kill_grace, r);
		if (r->grace_w)
			return;
	}
	r->rs->env.runner->stop(r->m, KILL_GRACE_S);
}

static void run_stop(struct run *r, const char *reason)
{
	if (r->stop_reason[0])
		return;
	snprintf(r->stop_reason, sizeof r->stop_reason, "%s", reason);
	if (r->st == R_CREATING)
		return; /* the creation sees it when it is done */
	if (r->hello) {
		/* a guest not connected yet (a restarted daemon's) gets SIGTERM
		 * with its HELLO: ended by the harness, its files are written
		 * out; only past the grace is the machine ended by force */
		if (sb_guest_connected(r->g))
			sb_guest_signal(r->g, SIGTERM);
		r->grace_w =
		    sb_loop_timer(r->rs->env.loop, STOP_GRACE_S, 0, on_kill_grace, r);
	} else {
		r->rs->env.runner->stop(r->m, KILL_GRACE_S);
	}
}

static void on_timeout(void *ctx)
{
	struct run *r = ctx;

	sb_watch_stop(r->timeout_w);
	r->timeout_w = NULL;
	run_stop(r, "timeout");
}

/* Fails a live run: run.failed now, run.stopped (failed) when its
 * machine has ended. */
static void run_fail(struct run *r, const char *reason)
{
	if (r->stop_reason[0])
		return;
	host_event(r->rs, r->id, "run.failed", "reason", reason, NULL);
	snprintf(r->stop_reason, sizeof r->stop_reason, "failed");
	r->rs->env.runner->stop(r->m, KILL_GRACE_S);
}

static void on_boot_deadline(void *ctx)
{
	struct run *r = ctx;
	char reason[200];

	sb_watch_stop(r->boot_w);
	r->boot_w = NULL;
	if (r->hello)
		return;
	snprintf(reason, sizeof reason,
		 "the guest agent did not answer within its %g s boot deadline "
		 "(SANBOX_BOOT_TIMEOUT; see console.log)",
		 r->rs->env.settings->boot_timeout_s);
	run_fail(r, reason);
}

/* The run's last events, and the run ends. */
static void run_finish(struct run *r)
{
	struct sb_runs *rs = r->rs;
	char reason[700];

	if (r->stop_reason[0]) {
		host_event(rs, r->id, "run.stopped", "reason", r->stop_reason, NULL);
	} else if (r->exited) {
		host_event(rs, r->id, "run.stopped", "reason", "exited", NULL);
	} else {
		if (r->setup_error[0])
			snprintf(reason, sizeof reason,
				 "the guest agent could not set the run up: %s",
				 r->setup_error);
		else
			snprintf(reason, sizeof reason, "%s", r->end_why);
		record_failed(rs, r->id, reason);
	}
	run_end(r);
}

static void on_final_snapshot(void *ctx, int rc, const char *snapshot)
{
	struct run *r = ctx;

	if (rc)
		warn(r, "no snapshot of the run's end: %s", sb_errmsg(rc));
	run_finish(r);
}

/* The machine is gone: its disk is the run's last snapshot (unless the
 * run has snapshots off), then the run's last events. */
static void m_ended(void *ctx, int status, const char *why)
{
	struct run *r = ctx;

	sb_guest_finish(r->g); /* what the guest sent before it went away */
	r->end_status = status;
	snprintf(r->end_why, sizeof r->end_why, "%s", why);
	/* a guest that never said HELLO never touched its disk: no snapshot */
	if (r->snap && r->hello && strcmp(r->plan.snapshots, "off") &&
	    sb_snapper_final(r->snap, on_final_snapshot, r) == SB_OK)
		return;
	run_finish(r);
}

static void m_channel(void *ctx, int fd, int again)
{
	struct run *r = ctx;

	sb_guest_attach(r->g, fd, again);
	if (r->rs->env.runner->restored(r->m) && !r->restored_sent) {
		/* a copy of a snapshot's guest: its clock, randomness and NIC */
		const struct sb_runner_ops *ops = r->rs->env.runner;
		struct sb_net_iface f;
		int nic = ops->iface && ops->iface(r->m, &f) == SB_OK;
		sb_guest_restored(r->g, nic ? &f : NULL);
		r->restored_sent = 1;
	}
	if (r->thaw_due) { /* the dead daemon froze it for a snapshot */
		sb_guest_thaw(r->g);
		r->thaw_due = 0;
	}
}

static void m_warning(void *ctx, const char *line)
{
	warn(ctx, "%s", line);
}

/* A denial or a granted lookup of the machine's network: net.denied or
 * net.resolved, with the guest's events. */
static void m_net(void *ctx, const struct sb_net_report *n)
{
	struct run *r = ctx;
	msgpack_sbuffer buf;
	msgpack_packer pk;
	char addrs[sizeof n->addrs], *a, *save = NULL;
	size_t count = 0;

	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	if (n->kind == SB_NET_DENIED) {
		msgpack_pack_map(&pk, n->name[0] ? 6 : 5);
		sb_pack_kstr(&pk, "dst", n->dst);
		sb_pack_ku64(&pk, "port", n->port);
		sb_pack_kstr(&pk, "proto", n->proto);
		if (n->name[0]) /* a name (escaped) is cut at 256 bytes */
			sb_pack_kstrn(&pk, "name", n->name, strnlen(n->name, 256));
		sb_pack_kstr(&pk, "reason", n->reason);
		sb_pack_ku64(&pk, "count", n->count);
	} else {
		msgpack_pack_map(&pk, 4);
		sb_pack_kstr(&pk, "name", n->name);
		sb_pack_kstr(&pk, "type", n->proto);
		for (const char *c = n->addrs; *c; c++)
			count += *c == ',';
		sb_pack_str(&pk, "addrs");
		msgpack_pack_array(&pk, n->addrs[0] ? count + 1 : 0);
		snprintf(addrs, sizeof addrs, "%s", n->addrs);
		for (a = strtok_r(addrs, ",", &save); a; a = strtok_r(NULL, ",", &save))
			sb_pack_str(&pk, a);
		sb_pack_ku64(&pk, "count", n->count);
	}
	if (buf.data)
		batch_add(r->rs, r->id,
			  n->kind == SB_NET_DENIED ? "net.denied" : "net.resolved",
			  SB_SRC_HOST, buf.data, buf.size);
	msgpack_sbuffer_destroy(&buf);
}

static const struct sb_machine_events machine_events = {
    .channel = m_channel,
    .ended = m_ended,
    .warning = m_warning,
    .net = m_net,
};

/* --- the guest's channel --- */

/* Packs the guest's SPEC of r into r->spec: its plan, its virtual key and
 * its machine's NIC (network acl). */
static int spec_pack(struct run *r)
{
	const struct sb_runner_ops *ops = r->rs->env.runner;
	struct sb_net_iface f;
	int nic = r->m && ops->iface && ops->iface(r->m, &f) == SB_OK;

	return sb_plan_pack_guest(&r->plan, r->vkey, GUEST_TUNNEL_PORT, nic ? &f : NULL,
				  r->rs->env.log, &r->spec);
}

static void g_hello(void *ctx, const char *version, int resume)
{
	struct run *r = ctx;
	int rc;

	if (strcmp(version, SB_CHAN_VERSION)) {
		char reason[300];
		snprintf(
		    reason, sizeof reason,
		    "the guest agent is version %.40s, this daemon needs %s: rebuild the "
		    "template (sanbox template build %s)",
		    version, SB_CHAN_VERSION, r->plan.t.name);
		run_fail(r, reason);
		return;
	}
	r->hello = 1;
	sb_watch_stop(r->boot_w);
	r->boot_w = NULL;
	if (resume && r->stop_reason[0] && r->grace_w)
		sb_guest_signal(r->g, SIGTERM); /* the stop that waited for it */
	if (resume)
		return; /* it is past its set-up: a restarted daemon met it again */
	if (!r->spec.size && (rc = spec_pack(r))) {
		char reason[300];
		snprintf(reason, sizeof reason, "cannot make the guest's SPEC again: %s",
			 sb_errmsg(rc));
		run_fail(r, reason);
		return;
	}
	sb_guest_send(r->g, r->spec.data, r->spec.size);
	spec_wipe(r); /* the inputs and secrets: not kept */
}

static void g_event(void *ctx, const char *type, enum sb_source src, const void *payload,
		    size_t len, const void *blob, size_t blob_len)
{
	struct run *r = ctx;

	batch_add_blob(r->rs, r->id, type, src, payload, len, blob, blob_len);
	if (src == SB_SRC_GUEST && !strcmp(type, "run.exited"))
		r->exited = 1;
	if (!strcmp(type, "agent.turn.completed")) {
		r->turns = 1;
		if (r->snap && !strcmp(r->plan.snapshots, "turn"))
			sb_snapper_turn(r->snap);
	}
}

static void g_synced(void *ctx, uint64_t id, int frozen)
{
	struct run *r = ctx;

	if (r->snap)
		sb_snapper_synced(r->snap, id, frozen);
}

static void g_warn(void *ctx, const char *line)
{
	warn(ctx, "%s", line);
}

static void g_done(void *ctx, const char *error)
{
	struct run *r = ctx;

	r->done = 1;
	snprintf(r->setup_error, sizeof r->setup_error, "%s", error);
}

static void g_closed(void *ctx)
{
	(void)ctx; /* the machine's end follows */
}

/* A connection to the gateway, tied to the run; a refusal (the run holds
 * its share, say) is a run.warning at most once a second. */
static int g_connect(void *ctx, int *fd)
{
	struct run *r = ctx;
	int rc = sb_gateway_connect(r->rs->env.gateway, r->id, fd);
	double now;

	if (rc) {
		r->gw_refused++;
		now = sb_loop_now(r->rs->env.loop);
		if (now - r->gw_warned_at >= 1.0) {
			r->gw_warned_at = now;
			warn(r, "gateway: tunnel connection refused (%llu so far): %s",
			     (unsigned long long)r->gw_refused, sb_errmsg(rc));
		}
	}
	return rc;
}

static const struct sb_guest_ops guest_ops = {
    .hello = g_hello,
    .event = g_event,
    .warn = g_warn,
    .done = g_done,
    .closed = g_closed,
    .connect = g_connect,
    .synced = g_synced,
};

/* --- snapshots --- */

static void retention(struct run *r);

/* Records snapshot.saved (after the events before it, in order). */
static int snap_saved(void *ctx, const struct sb_snap_done *d)
{
	struct run *r = ctx;
	struct sb_runs *rs = r->rs;
	const struct sb_snapshot_info *in = d->info;
	size_t hl = strlen(rs->env.home) + 1;
	msgpack_sbuffer buf;
	msgpack_packer pk;
	struct sb_event ev;
	char id[16];
	int rc;

	snprintf(id, sizeof id, "s%u", in->layer);
	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 13);
	sb_pack_kstr(&pk, "snapshot", id);
	sb_pack_kstr(&pk, "kind", d->kind);
	sb_pack_kstr(&pk, "trigger", d->trigger);
	/* paths relative to the state directory */
	sb_pack_kstr(&pk, "layer",
		     strlen(in->layer_path) > hl ? in->layer_path + hl : in->layer_path);
	sb_pack_kstr(&pk, "memory",
		     strlen(in->memory_path) > hl ? in->memory_path + hl
						  : in->memory_path);
	sb_pack_ku64(&pk, "layer_no", in->layer);
	sb_pack_ku64(&pk, "bytes", in->bytes);
	sb_pack_ku64(&pk, "memory_bytes", in->memory_bytes);
	sb_pack_str(&pk, "paused_ms");
	msgpack_pack_double(&pk, in->paused_ms);
	sb_pack_str(&pk, "duration_ms");
	msgpack_pack_double(&pk, d->sync_ms + in->duration_ms); /* asked to made */
	sb_pack_str(&pk, "sync_ms");
	msgpack_pack_double(&pk, d->sync_ms);
	sb_pack_kbool(&pk, "synced", d->synced);
	sb_pack_kbool(&pk, "frozen", d->frozen);
	batch_flush(rs);
	rc = buf.data ? sb_event_init(&ev, "snapshot.saved", r->id, SB_SRC_HOST, buf.data,
				      buf.size)
		      : SB_ERR_NOMEM;
	if (rc == SB_OK)
		rc = sb_log_append(rs->env.log, &ev, 1);
	msgpack_sbuffer_destroy(&buf);
	if (rc == SB_OK && !strcmp(d->trigger, "turn"))
		retention(r);
	return rc;
}

/* --- retention: a live run keeps its newest automatic snapshots --- */

struct turn_points {
	unsigned layers[64];
	size_t n, total;
};

static int turn_cb(void *ctx, const struct sb_resume_point *rp)
{
	struct turn_points *t = ctx;
	unsigned n;

	if (strcmp(rp->trigger, "turn") || sscanf(rp->snapshot, "s%u", &n) != 1)
		return 0;
	if (t->n < sizeof t->layers / sizeof t->layers[0])
		t->layers[t->n++] = n;
	t->total++;
	return 0;
}

static void on_retired(void *ctx, int rc, const char *snapshot)
{
	struct run *r = ctx;

	if (rc == SB_OK)
		host_event(r->rs, r->id, "snapshot.removed", "snapshot", snapshot, "by",
			   "retention", NULL);
	else if (rc != SB_ERR_NOTFOUND && rc != SB_ERR_STATE)
		warn(r, "cannot merge snapshot %s away: %s", snapshot ? snapshot : "?",
		     sb_errmsg(rc));
}

/* On a worker: the oldest of the run's automatic snapshots past keep that
 * no other run reads (its record caught up first, with the snapshot.saved
 * that asked). */
static void retire_work(struct job *j)
{
	struct sb_runs *rs = j->rs;
	struct turn_points t = {0};
	size_t readers;

	if (sb_projector_catch_up(rs->env.proj, NULL) ||
	    sb_resume_each(rs->env.proj, j->run, turn_cb, &t) < 0 || t.total <= j->keep)
		return;
	for (size_t i = 0; i < t.n && i < t.total - j->keep; i++) {
		if (rs->env.runner->readers(rs->env.runner_ctx, j->run, t.layers[i],
					    &readers) ||
		    readers)
			continue;
		j->layer = t.layers[i];
		j->found = 1;
		return;
	}
}

/* On the loop: the snapshot found is merged away, if its run still runs. */
static void retire_done(struct job *j)
{
	struct run *r = run_find(j->rs, j->run);

	if (j->found && r && r->st == R_RUNNING && r->snap)
		sb_snapper_merge(r->snap, j->layer, on_retired, r);
}

/* Past runs.snapshots_keep automatic snapshots, the oldest that no other
 * run reads is merged into the layer above it (the run's chain stays
 * short) and its record says snapshot.removed (by retention). Which one is
 * found on a worker. */
static void retention(struct run *r)
{
	struct sb_runs *rs = r->rs;
	uint64_t keep = (uint64_t)rs->env.settings->snapshots_keep;
	struct job *j;

	if (!keep || !(j = job_new(rs, r->id)))
		return;
	j->keep = keep;
	j->work = retire_work;
	j->done = retire_done;
	job_submit(j); /* a pool that is closing: none this time */
}

static void snap_warn(void *ctx, const char *line)
{
	warn(ctx, "%s", line);
}

static int run_snapper(struct run *r)
{
	struct sb_snapper_env se = {
	    .loop = r->rs->env.loop,
	    .runner = r->rs->env.runner,
	    .min_interval_s = r->rs->env.settings->snapshot_interval_s,
	    .saved = snap_saved,
	    .warn = snap_warn,
	    .ctx = r,
	};
	int rc = sb_snapper_open(&se, &r->snap);

	if (rc == SB_OK)
		sb_snapper_set(r->snap, r->m, r->g);
	return rc;
}

/* Registers r with the gateway (spent: what the run spent already) and
 * opens its guest channel, masking its env-scope secrets and its key. */
static int run_connect(struct run *r, uint64_t spent)
{
	struct sb_runs *rs = r->rs;
	const struct sb_access *a = &r->plan.access;
	struct sb_guest_limits lim;
	struct sb_gateway_run gr = {0};
	int rc;

	gr.run = r->id;
	gr.key = r->vkey;
	gr.alias = r->alias_key[0] ? r->alias_key : NULL;
	gr.budget_nusd = a->budget_nusd;
	gr.spent_nusd = spent;
	gr.stop_on_budget = a->stop_on_budget;
	gr.models = a->models;
	gr.nmodels = a->nmodels;
	if ((rc = sb_gateway_run_add(rs->env.gateway, &gr, r->vkey)))
		return rc;
	r->registered = 1;
	lim.rate = rs->env.settings->guest_events_rate;
	lim.burst = rs->env.settings->guest_events_burst;
	lim.quota = r->plan.record_quota ? r->plan.record_quota
					 : rs->env.settings->run_record_quota;
	lim.file_max = rs->env.settings->run_file_max;
	lim.files_quota = rs->env.settings->run_files_quota;
	if ((rc = sb_guest_open(rs->env.loop, &lim, &guest_ops, r, &r->g)) ||
	    (rc = sb_guest_mask(r->g, r->vkey, strlen(r->vkey), "virtual key")) ||
	    (r->alias_key[0] &&
	     (rc = sb_guest_mask(r->g, r->alias_key, strlen(r->alias_key),
				 "virtual key"))))
		return rc;
	for (size_t i = 0; i < a->ngrants; i++)
		if (!a->grants[i].model_scope && a->grants[i].value &&
		    (rc = sb_guest_mask(r->g, a->grants[i].value->value,
					a->grants[i].value->len, a->grants[i].name)))
			return rc;
	return run_snapper(r);
}

/* --- creating --- */

static void create_done(void *ctx);

/* Packs and records run.created, run.policy.resolved (inputs as blobs),
 * one secret.granted per grant and extra (NULL: none), in one append. */
static int record_plan(struct sb_runs *rs, const struct sb_plan *p,
		       const struct sb_event *extra)
{
	msgpack_sbuffer a, b, g;
	msgpack_packer pa, pb, pg;
	struct sb_event evs[3 + SB_ACCESS_SECRETS];
	size_t gat[SB_ACCESS_SECRETS + 1], n;
	struct sb_blob *blobs = calloc(p->ninputs + 1, sizeof *blobs);
	int rc;

	if (!blobs)
		return SB_ERR_NOMEM;
	msgpack_sbuffer_init(&a);
	msgpack_sbuffer_init(&b);
	msgpack_sbuffer_init(&g);
	msgpack_packer_init(&pa, &a, msgpack_sbuffer_write);
	msgpack_packer_init(&pb, &b, msgpack_sbuffer_write);
	msgpack_packer_init(&pg, &g, msgpack_sbuffer_write);
	sb_plan_pack_created(p, &pa);
	sb_plan_pack_policy(p, &pb);
	for (size_t i = 0; i < p->access.ngrants; i++) {
		gat[i] = g.size;
		sb_access_pack_grant(&p->access, i, &pg);
	}
	gat[p->access.ngrants] = g.size;
	rc = !a.data || !b.data || (p->access.ngrants && !g.data) ? SB_ERR_NOMEM : SB_OK;
	if (rc == SB_OK)
		rc = sb_event_init(&evs[0], "run.created", p->run, SB_SRC_HOST, a.data,
				   a.size);
	if (rc == SB_OK)
		rc = sb_event_init(&evs[1], "run.policy.resolved", p->run, SB_SRC_HOST,
				   b.data, b.size);
	for (size_t i = 0; rc == SB_OK && i < p->access.ngrants; i++)
		rc = sb_event_init(&evs[2 + i], "secret.granted", p->run, SB_SRC_HOST,
				   g.data + gat[i], gat[i + 1] - gat[i]);
	n = sb_plan_blobs(p, blobs);
	if (extra)
		evs[2 + p->access.ngrants] = *extra;
	if (rc == SB_OK)
		rc = sb_log_append_blobs(rs->env.log, blobs, n, evs,
					 2 + p->access.ngrants + !!extra);
	free(blobs);
	msgpack_sbuffer_destroy(&a);
	msgpack_sbuffer_destroy(&b);
	msgpack_sbuffer_destroy(&g);
	return rc;
}

/* On a worker: resolve, record, prepare the machine. */
static void create_job(void *ctx)
{
	struct run *r = ctx;
	struct sb_runs *rs = r->rs;
	struct sb_plan_ctx pc = {rs->env.home, rs->env.stubs,
				 rs->env.settings->run_record_quota, rs->env.net};
	int rc;

	sb_clearerr();
	if ((rc = sb_plan_resolve(&pc, r->id, r->spec_obj, &r->plan)) ||
	    (rc = vkey_derive(rs->env.home, r->id, r->vkey))) {
		r->create_rc = rc;
		goto out;
	}
	if ((rc = record_plan(rs, &r->plan, NULL))) {
		r->create_rc = rc;
		if (rc == SB_ERR_FULL)
			snprintf(r->create_err, sizeof r->create_err,
				 "cannot record the run in %s: %s", rs->env.home,
				 sb_errmsg(rc));
		goto out;
	}
	r->recorded = 1;
	/* the machine, then the guest's SPEC (its NIC is the machine's) */
	if ((rc = rs->env.runner->create(rs->env.runner_ctx, &r->plan, &r->m, r->accel,
					 r->accel_warning, sizeof r->accel_warning)) ||
	    (rc = spec_pack(r))) {
		char reason[700];
		snprintf(reason, sizeof reason, "cannot start the VM: %s", sb_errmsg(rc));
		rs->env.runner->discard(r->m);
		r->m = NULL;
		r->start_failed = 1;
		if ((rc = record_failed(rs, r->id, reason))) {
			/* its end is not in the record: the request says it */
			r->create_rc = rc;
			snprintf(r->create_err, sizeof r->create_err,
				 "cannot record the run in %.100s: it could not start "
				 "(%.400s), "
				 "and then: %.300s",
				 rs->env.home, reason, sb_errmsg(rc));
		}
	}
	for (size_t i = 0; i < r->plan.ninputs; i++)
		r->plan.inputs[i].data = NULL; /* they were the request's: blobs now */
out:
	if (r->create_rc && !r->create_err[0])
		snprintf(r->create_err, sizeof r->create_err, "%s",
			 sb_errmsg(r->create_rc));
	if (sb_loop_post(rs->env.loop, create_done, r))
		abort(); /* the loop cannot hear of the run: nothing sane is left */
}

/* Records run.started of r: its accelerator, how it boots and its NIC. */
static void started_event(struct run *r)
{
	const struct sb_runner_ops *ops = r->rs->env.runner;
	struct sb_net_iface f;
	int nic = ops->iface && ops->iface(r->m, &f) == SB_OK;
	msgpack_sbuffer buf;
	msgpack_packer pk;
	struct sb_event ev;
	char mac[18];

	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 2 + nic);
	sb_pack_kstr(&pk, "accel", r->accel);
	sb_pack_kstr(&pk, "boot",
		     !ops->restored(r->m) ? "cold"
		     : ops->warm(r->m)	  ? "warm"
					  : "memory");
	if (nic) {
		snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", f.mac[0],
			 f.mac[1], f.mac[2], f.mac[3], f.mac[4], f.mac[5]);
		sb_pack_str(&pk, "net");
		msgpack_pack_map(&pk, f.guest6[0] ? 4 : 3);
		sb_pack_kstr(&pk, "tap", f.tap);
		sb_pack_kstr(&pk, "mac", mac);
		sb_pack_kstr(&pk, "addr4", f.guest4);
		if (f.guest6[0])
			sb_pack_kstr(&pk, "addr6", f.guest6);
	}
	if (buf.data && sb_event_init(&ev, "run.started", r->id, SB_SRC_HOST, buf.data,
				      buf.size) == SB_OK)
		sb_log_append(r->rs->env.log, &ev, 1);
	msgpack_sbuffer_destroy(&buf);
}

/* On the loop: start what the worker prepared, and answer run.create. */
static void create_done(void *ctx)
{
	struct run *r = ctx;
	struct sb_runs *rs = r->rs;
	sb_runs_created_fn cb = r->cb;
	void *cb_ctx = r->cb_ctx;
	char id[SB_RUN_MAX], reason[700];
	int rc;

	memcpy(id, r->id, sizeof id);
	r->spec_obj = NULL;
	if (!r->recorded) {
		/* a resume stopped meanwhile, refused: its record, which may say
		 * live, is for the stop to close */
		int stop = r->resume && r->stop_reason[0];
		snprintf(reason, sizeof reason, "%s", r->stop_reason);
		rc = sb_seterr(r->create_rc, "%s", r->create_err);
		run_end(r);
		cb(cb_ctx, rc, NULL);
		if (stop)
			sb_runs_stop(rs, id, reason, NULL, NULL);
		return;
	}
	if (r->start_failed) {
		rc = r->create_rc ? sb_seterr(r->create_rc, "%s", r->create_err) : SB_OK;
		run_end(r);
		cb(cb_ctx, rc, rc ? NULL : id);
		return;
	}
	if (r->stop_reason[0]) { /* stopped while it was being made */
		host_event(rs, id, "run.stopped", "reason", r->stop_reason, NULL);
		run_end(r);
		cb(cb_ctx, SB_OK, id);
		return;
	}
	r->st = R_RUNNING;
	if ((rc = run_connect(r, r->spent)) ||
	    (rc = rs->env.runner->start(r->m, &machine_events, r))) {
		snprintf(reason, sizeof reason, "cannot start the VM: %s", sb_errmsg(rc));
		rs->env.runner->signal(r->m, SIGKILL);
		record_failed(rs, id, reason);
		run_end(r);
		cb(cb_ctx, SB_OK, id);
		return;
	}
	r->boot_w = sb_loop_timer(rs->env.loop, rs->env.settings->boot_timeout_s, 0,
				  on_boot_deadline, r);
	r->timeout_w =
	    sb_loop_timer(rs->env.loop, (double)r->plan.timeout_s, 0, on_timeout, r);
	if (r->accel_warning[0])
		warn(r, "%s", r->accel_warning);
	batch_flush(rs);
	started_event(r);
	cb(cb_ctx, SB_OK, id);
}

/* The live run (being made, running or stopping) named name, or NULL. */
static struct run *run_named(struct sb_runs *rs, const char *name)
{
	for (struct run *r = rs->live; r && *name; r = r->next)
		if (!strcmp(r->plan.name, name))
			return r;
	return NULL;
}

int sb_runs_create(struct sb_runs *rs, const msgpack_object *spec, sb_runs_created_fn cb,
		   void *ctx)
{
	struct run *r = calloc(1, sizeof *r), *holder;
	unsigned char raw[SB_RUN_ID_LEN / 2];
	int rc;

	if (!r)
		return SB_ERR_NOMEM;
	/* a name is one live run's: the plan resolved later keeps it */
	sb_map_str(spec, "name", r->plan.name, sizeof r->plan.name);
	if ((holder = run_named(rs, r->plan.name))) {
		free(r);
		return sb_seterr(SB_ERR_EXISTS, "the name %s is taken by run %s, which is live",
				 holder->plan.name, holder->id);
	}
	r->rs = rs;
	r->st = R_CREATING;
	r->spec_obj = spec;
	r->cb = cb;
	r->cb_ctx = ctx;
	msgpack_sbuffer_init(&r->spec);
	randombytes_buf(raw, sizeof raw);
	sodium_bin2hex(r->id, sizeof r->id, raw, sizeof raw);
	if ((rc = sb_work_submit(rs->env.jobs, create_job, r))) {
		free(r);
		return rc;
	}
	run_link(r);
	return SB_OK;
}

/* On a worker: a run without a machine here gets its run.stopped if its
 * record (caught up, with the end of a run that just ended on the loop)
 * says it is live; one such close at a time, so none is recorded twice. */
static void stop_work(struct job *j)
{
	struct sb_runs *rs = j->rs;
	struct sb_runstate st;
	msgpack_sbuffer buf;
	msgpack_packer pk;
	struct sb_event ev;

	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 1);
	sb_pack_kstr(&pk, "reason", j->reason);
	pthread_mutex_lock(&rs->stop_mu);
	sb_projector_catch_up(rs->env.proj, NULL);
	if ((j->rc = sb_runstate_get(rs->env.proj, j->run, &st)) == SB_OK) {
		if (!sb_runstate_is_live(&st))
			j->rc = sb_seterr(SB_ERR_STATE, "run %s is not running (%s)",
					  j->run, st.status);
		else if (!buf.data)
			j->rc = SB_ERR_NOMEM;
		else if ((j->rc = sb_event_init(&ev, "run.stopped", j->run, SB_SRC_HOST,
						buf.data, buf.size)) == SB_OK)
			j->rc = sb_log_append(rs->env.log, &ev, 1);
	}
	pthread_mutex_unlock(&rs->stop_mu);
	msgpack_sbuffer_destroy(&buf);
}

static void stop_done(struct job *j)
{
	if (j->cb)
		j->cb(j->ctx, j->rc ? sb_seterr(j->rc, "%s", j->err) : SB_OK);
}

int sb_runs_stop(struct sb_runs *rs, const char *id, const char *reason,
		 sb_runs_stopped_fn cb, void *ctx)
{
	struct run *r = run_find(rs, id);
	struct job *j;
	int rc;

	if (r && !cb) {
		run_stop(r, reason);
		return SB_OK;
	}
	if (!(j = job_new(rs, id)))
		return SB_ERR_NOMEM;
	snprintf(j->reason, sizeof j->reason, "%s", reason);
	j->cb = cb;
	j->ctx = ctx;
	j->work = r ? NULL : stop_work; /* a record without a machine: close it */
	j->done = stop_done;
	if ((rc = job_submit(j)))
		return rc;
	if (r)
		run_stop(r, reason);
	return SB_OK;
}

void sb_runs_stop_all(struct sb_runs *rs, const char *reason)
{
	for (struct run *r = rs->live; r; r = r->next)
		run_stop(r, reason);
}

unsigned sb_runs_active(struct sb_runs *rs)
{
	return rs->active;
}

/* --- a daemon's start: the runs a previous one left --- */

/* What a run's record says, read once for its reattach. */

#define ROLL_FILES_MAX SB_CHAN_INPUT_FILES /* paths a roll-forward follows */

struct record {
	msgpack_sbuffer created, policy;
	uint64_t started_ns;
	int exited, ready;
	char forked_from[SB_RUN_MAX]; /* run.forked of a memory snapshot: its parent */
	int resumed;		      /* a run.resumed is in it */
	uint64_t guest_seq;	      /* the largest guest_seq of its current start */
	long saved;		      /* the newest layer a snapshot.saved names, or -1 */
	/* asked for: files changed in (from_offset, offset_at] (0: not asked),
	 * and each one's last state there */
	uint64_t from_offset, offset_at, changed_after;
	struct sb_roll_file *files;
	size_t nfiles;
	int files_over; /* more paths than ROLL_FILES_MAX, or one unreadable */
	/* the live changes of its grants (net.grant.added/removed), in order */
	struct grant_change {
		struct sb_net_grant g;
		int allow;
		uint64_t offset;
	} * grants;
	size_t ngrants;
};

/* Notes the layer of a snapshot.saved ev: the newest so far. */
static void record_saved(struct record *rec, const struct sb_event *ev)
{
	msgpack_zone zone;
	msgpack_object p;
	uint64_t n;

	if (!msgpack_zone_init(&zone, 512))
		return;
	if (!sb_payload_parse(ev->payload, ev->payload_len, &zone, &p) &&
	    (n = sb_map_u64(&p, "layer_no", UINT32_MAX + 1ull)) <= UINT32_MAX &&
	    (long)n > rec->saved)
		rec->saved = (long)n;
	msgpack_zone_destroy(&zone);
}

/* Notes a change of the run's grants (ev: net.grant.added or .removed). */
static void record_grant(struct record *rec, const struct sb_event *ev)
{
	struct grant_change *n;
	msgpack_zone zone;
	msgpack_object p;
	char text[SB_NET_HOST_MAX + 32];
	struct sb_net_grant g = {0};

	if (!msgpack_zone_init(&zone, 512))
		return;
	if (!sb_payload_parse(ev->payload, ev->payload_len, &zone, &p) &&
	    sb_map_str(&p, "grant", text, sizeof text) > 0 &&
	    sb_net_grant_parse(text, strlen(text), &g) == SB_OK &&
	    (n = realloc(rec->grants, (rec->ngrants + 1) * sizeof *n))) {
		rec->grants = n;
		n[rec->ngrants].g = g;
		n[rec->ngrants].allow = !strcmp(ev->type, "net.grant.added");
		n[rec->ngrants++].offset = ev->offset;
	}
	msgpack_zone_destroy(&zone);
}

/* Applies to p the recorded changes of grants at offsets up to upto (0:
 * all): the grants the run had then. */
static void record_grants_apply(const struct record *rec, uint64_t upto,
				struct sb_netpolicy *p)
{
	for (size_t i = 0; i < rec->ngrants; i++) {
		const struct grant_change *c = &rec->grants[i];
		size_t k;
		if (upto && c->offset > upto)
			break;
		for (k = 0; k < p->ngrants && !sb_net_grant_equal(&p->grants[k], &c->g);
		     k++)
			;
		if (c->allow && k == p->ngrants && k < SB_NET_GRANTS)
			p->grants[p->ngrants++] = c->g;
		else if (!c->allow && k < p->ngrants)
			memmove(&p->grants[k], &p->grants[k + 1],
				(--p->ngrants - k) * sizeof p->grants[0]);
	}
}

/* Notes the parent of a memory fork (run.forked ev, memory true). */
static void record_forked(struct record *rec, const struct sb_event *ev)
{
	msgpack_zone zone;
	msgpack_object p;
	const msgpack_object *mem;

	if (!msgpack_zone_init(&zone, 512))
		return;
	if (!sb_payload_parse(ev->payload, ev->payload_len, &zone, &p) &&
	    (mem = sb_map_get(&p, "memory")) && mem->type == MSGPACK_OBJECT_BOOLEAN &&
	    mem->via.boolean)
		sb_map_str(&p, "from_run", rec->forked_from, sizeof rec->forked_from);
	msgpack_zone_destroy(&zone);
}

/* Notes the change ev (agent.file.changed) in rec's files. */
static void record_file(struct record *rec, const struct sb_event *ev)
{
	char path[PATH_MAX], kind[16], type[16], key[2 * SB_HASH_LEN + 8];
	msgpack_zone zone;
	msgpack_object p;
	struct sb_roll_file *f = NULL;
	const char *rel;

	if (!msgpack_zone_init(&zone, 1024)) {
		rec->files_over = 1;
		return;
	}
	if (sb_payload_parse(ev->payload, ev->payload_len, &zone, &p) ||
	    sb_map_str(&p, "path", path, sizeof path) <= 0 ||
	    sb_map_str(&p, "kind", kind, sizeof kind) <= 0 ||
	    strncmp(path, "/workspace/", 11)) {
		rec->files_over = 1; /* a change the roll-forward cannot follow */
		goto out;
	}
	rel = path + 11; /* one too long for an input is kept cut, and omitted */
	for (size_t i = 0; i < rec->nfiles && !f; i++)
		if (!strncmp(rec->files[i].path, rel, sizeof f->path - 1) &&
		    rec->files[i].toolong == (strlen(rel) >= sizeof f->path))
			f = &rec->files[i];
	if (!f) {
		if (rec->nfiles == ROLL_FILES_MAX ||
		    (!rec->files &&
		     !(rec->files = calloc(ROLL_FILES_MAX, sizeof *rec->files)))) {
			rec->files_over = 1;
			goto out;
		}
		f = &rec->files[rec->nfiles++];
		snprintf(f->path, sizeof f->path, "%.*s", (int)sizeof f->path - 1, rel);
	}
	f->toolong = strlen(rel) >= sizeof f->path;
	f->deleted = !strcmp(kind, "deleted");
	f->link = !f->deleted && sb_map_str(&p, "type", type, sizeof type) > 0 &&
		  !strcmp(type, "symlink");
	f->offset = ev->offset;
	f->size = sb_map_u64(&p, "size", 0);
	f->content = !f->deleted &&
		     sb_map_str(&p, "content", key, sizeof key) == 2 * SB_HASH_LEN &&
		     sb_hash_parse(key, f->blob) == SB_OK;
out:
	msgpack_zone_destroy(&zone);
}

/* Notes the guest_seq of a guest's event (the agent numbers its frames). */
static void record_guest_seq(struct record *rec, const struct sb_event *ev)
{
	msgpack_unpacked u;
	uint64_t seq;

	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, (const char *)ev->payload, ev->payload_len, NULL) ==
		MSGPACK_UNPACK_SUCCESS &&
	    (seq = sb_map_u64(&u.data, "guest_seq", 0)) > rec->guest_seq)
		rec->guest_seq = seq;
	msgpack_unpacked_destroy(&u);
}

static int record_read(struct sb_runs *rs, const char *run, struct record *rec)
{
	sb_log_iter *it;
	struct sb_event ev;
	int rc;

	uint64_t from = rec->from_offset, at = rec->offset_at;

	memset(rec, 0, sizeof *rec);
	rec->from_offset = from;
	rec->offset_at = at;
	rec->saved = -1;
	msgpack_sbuffer_init(&rec->created);
	msgpack_sbuffer_init(&rec->policy);
	if ((rc = sb_log_iter_open_run(rs->env.log, run, 1, &it)))
		return rc;
	while ((rc = sb_log_iter_next(it, &ev)) != SB_END) {
		if (rc == SB_ERR_CORRUPT)
			continue;
		if (rc)
			break;
		if (ev.source == SB_SRC_GUEST || ev.source == SB_SRC_HARNESS)
			record_guest_seq(rec, &ev);
		if (!strcmp(ev.type, "run.created") && !rec->created.size)
			msgpack_sbuffer_write(&rec->created, (const char *)ev.payload,
					      ev.payload_len);
		else if (!strcmp(ev.type, "run.policy.resolved") && !rec->policy.size)
			msgpack_sbuffer_write(&rec->policy, (const char *)ev.payload,
					      ev.payload_len);
		else if (!strcmp(ev.type, "run.started"))
			rec->started_ns = ev.ts_ns;
		else if (!strcmp(ev.type, "run.exited"))
			rec->exited = 1;
		else if (!strcmp(ev.type, "harness.input.ready"))
			rec->ready = 1;
		else if (!strcmp(ev.type, "run.resumed")) {
			rec->started_ns = rec->exited = rec->ready = 0; /* a new start */
			rec->guest_seq = 0;
			rec->resumed = 1;
		} else if (!strcmp(ev.type, "run.forked"))
			record_forked(rec, &ev);
		else if (!strcmp(ev.type, "snapshot.saved"))
			record_saved(rec, &ev);
		else if (!strncmp(ev.type, "net.grant.", 10))
			record_grant(rec, &ev);
		else if (rec->offset_at && ev.offset > rec->from_offset &&
			 ev.offset <= rec->offset_at &&
			 !strcmp(ev.type, "agent.file.changed")) {
			rec->changed_after++;
			record_file(rec, &ev);
		}
	}
	sb_log_iter_close(it);
	return rc == SB_END ? SB_OK : rc;
}

static void record_free(struct record *rec)
{
	msgpack_sbuffer_destroy(&rec->created);
	msgpack_sbuffer_destroy(&rec->policy);
	free(rec->files);
	free(rec->grants);
}

/* sb_roll_probe_fn on the snapshot's disk (ctx: its sb_fsread). */
static int roll_probe(void *ctx, const char *prefix)
{
	char path[SB_FS_PATH_MAX];
	struct sb_fs_entry e;
	int rc;

	snprintf(path, sizeof path, "/workspace%s%s", prefix[0] ? "/" : "", prefix);
	rc = sb_fsread_stat(ctx, path, &e);
	/* unreadable: the agent finds out (and names what it skips) */
	return rc || e.type == SB_FS_DIR;
}

/* The roll-forward of a fork or resume --at an offset past its snapshot
 * (or from its run's start: its own inputs kept): the files changed after
 * it, up to the offset, as the record has them, become the plan's inputs
 * and removes, which the agent writes before the harness starts
 * (engine/runs/roll.c); the snapshot's disk is read for links on their
 * way the record does not know of. */
static int roll_forward(struct run *r, const struct record *rec)
{
	const struct sb_runner_ops *ops = r->rs->env.runner;
	char layer[PATH_MAX + 64];
	sb_fsread *fs = NULL;
	int rc;

	if (rec->nfiles && !r->from_start && ops->layer_file &&
	    (ops->layer_file(r->rs->env.runner_ctx, r->from_run, r->from_layer, layer,
			     sizeof layer) ||
	     sb_fsread_open(layer, &fs)))
		fs = NULL; /* unread: the agent finds out */
	rc = sb_roll_plan(rec->files, rec->nfiles, r->from_start, fs ? roll_probe : NULL,
			  fs, &r->plan, &r->roll);
	sb_fsread_close(fs);
	sb_clearerr();
	return rc;
}

/* Takes up run, which its record says is live. */
static void reattach(struct sb_runs *rs, const char *run)
{
	struct run *r = calloc(1, sizeof *r);
	struct record rec = {0};
	msgpack_zone zone;
	msgpack_object created, policy;
	struct sb_cost cost = {0};
	struct timespec now;
	char reason[700];
	double left;
	int rc;

	if (!r || !msgpack_zone_init(&zone, 4096)) {
		free(r);
		rs->env.runner->reap(rs->env.runner_ctx, run);
		record_failed(rs, run, "daemon-restart");
		return;
	}
	r->rs = rs;
	r->st = R_RUNNING;
	r->reattached = 1;
	snprintf(r->id, sizeof r->id, "%s", run);
	msgpack_sbuffer_init(&r->spec);
	if ((rc = record_read(rs, run, &rec)) || !rec.started_ns || !rec.created.size ||
	    !rec.policy.size ||
	    sb_payload_parse(rec.created.data, rec.created.size, &zone, &created) ||
	    sb_payload_parse(rec.policy.data, rec.policy.size, &zone, &policy) ||
	    (rc = sb_plan_from_record(run, &created, &policy, &r->plan))) {
		/* it never started, or its record cannot be read back */
		rs->env.runner->reap(rs->env.runner_ctx, run);
		record_failed(rs, run, "daemon-restart");
		goto out_free;
	}
	if (rec.resumed)
		r->plan.ninputs = 0; /* its disk has them: a SPEC made again must not
				      * write the first start's inputs over it */
	record_grants_apply(&rec, 0, &r->plan.net); /* its grants as they are now */
	if ((rc = rs->env.runner->reattach(rs->env.runner_ctx, &r->plan, &machine_events,
					   r, &r->m))) {
		rs->env.runner->reap(rs->env.runner_ctx, run); /* what it left */
		if (rec.exited)
			host_event(rs, run, "run.stopped", "reason", "exited", NULL);
		else
			record_failed(rs, run,
				      "its VM ended while sanboxd was not running");
		goto out_free;
	}
	if (rs->env.runner->interrupted)
		r->thaw_due = rs->env.runner->interrupted(r->m, rec.saved);
	sb_costs_get(rs->env.proj, "run", run, &cost);
	if ((rec.forked_from[0] &&
	     (rc = vkey_derive(rs->env.home, rec.forked_from, r->alias_key))) ||
	    (rc = vkey_derive(rs->env.home, run, r->vkey)) ||
	    (rc = sb_access_arm(rs->env.home, rs->env.stubs, &r->plan.access)) ||
	    (rc = run_connect(r, cost.cost_nusd))) {
		snprintf(reason, sizeof reason, "cannot take the run up again: %s",
			 sb_errmsg(rc));
		rs->env.runner->signal(r->m, SIGKILL);
		record_failed(rs, run, reason);
		goto out_free;
	}
	r->exited = rec.exited;
	r->hello = rec.ready;
	sb_guest_committed(r->g, rec.guest_seq); /* sent again: not recorded twice */
	if (rec.exited)
		sb_guest_recorded(r->g, "run.exited");
	if (rec.ready)
		sb_guest_recorded(r->g,
				  "harness.input.ready"); /* an agent past its set-up
							     takes SIGNAL frames */
	clock_gettime(CLOCK_REALTIME, &now);
	left = (double)r->plan.timeout_s -
	       ((double)now.tv_sec + now.tv_nsec / 1e9 - (double)rec.started_ns / 1e9);
	r->timeout_w = sb_loop_timer(rs->env.loop, left > 0 ? left : 0, 0, on_timeout, r);
	if (!rec.ready)
		r->boot_w = sb_loop_timer(rs->env.loop, rs->env.settings->boot_timeout_s,
					  0, on_boot_deadline, r);
	run_link(r);
	warn(r, "taken up again by a restarted daemon");
	r = NULL;
out_free:
	run_free(r);
	record_free(&rec);
	msgpack_zone_destroy(&zone);
}

/* --- forks and resumes --- */

/* Packs the from event: run.forked of a fork, run.resumed of a resume. */
static int pack_from(const struct run *r, msgpack_sbuffer *buf, struct sb_event *ev)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, (r->resume ? 9 : 8) + (r->roll.nnamed ? 2 : 0));
	sb_pack_kstr(&pk, "from_run", r->from_run);
	sb_pack_ku64(&pk, "from_offset", r->from_offset);
	sb_pack_ku64(&pk, "at", r->at);
	sb_pack_kstr(&pk, "snapshot", r->from_snap);
	sb_pack_kbool(&pk, "exact", r->exact);
	sb_pack_kbool(&pk, "memory", r->memory_bytes > 0);
	sb_pack_ku64(&pk, "rolled", r->roll.rolled);
	sb_pack_ku64(&pk, "removed", r->plan.nremoves);
	if (r->roll.nnamed) {
		sb_pack_ku64(&pk, "omitted_count", r->roll.omitted);
		sb_pack_str(&pk, "omitted");
		msgpack_pack_array(&pk, r->roll.nnamed);
		for (size_t i = 0; i < r->roll.nnamed; i++)
			sb_pack_str(&pk, r->roll.named[i]);
	}
	if (r->resume)
		sb_pack_kstr(&pk, "prompt", r->new_prompt ? r->new_prompt : "");
	if (!buf->data)
		return SB_ERR_NOMEM;
	return sb_event_init(ev, r->resume ? "run.resumed" : "run.forked", r->id,
			     SB_SRC_HOST, buf->data, buf->size);
}

static int from_point(struct run *r);

/* On a worker: the snapshot continued, the plan from the record of the run
 * continued, its record, and a machine on a new layer over the snapshot. */
static void from_job(void *ctx)
{
	struct run *r = ctx;
	struct sb_runs *rs = r->rs;
	struct record rec = {0};
	msgpack_zone zone;
	msgpack_object created, policy;
	msgpack_sbuffer fb;
	struct sb_event fev;
	int rc;

	sb_clearerr();
	msgpack_sbuffer_init(&fb);
	if (!msgpack_zone_init(&zone, 4096)) {
		r->create_rc = SB_ERR_NOMEM;
		goto out;
	}
	if ((rc = from_point(r))) {
		r->create_rc = rc;
		goto out;
	}
	rec.from_offset = r->from_offset;
	rec.offset_at = r->at;
	if ((rc = record_read(rs, r->from_run, &rec)) == SB_OK &&
	    (!rec.created.size || !rec.policy.size ||
	     sb_payload_parse(rec.created.data, rec.created.size, &zone, &created) ||
	     sb_payload_parse(rec.policy.data, rec.policy.size, &zone, &policy)))
		rc = sb_seterr(SB_ERR_CORRUPT,
			       "run %s: its plan cannot be read back from its record",
			       r->from_run);
	if (rc || (rc = sb_plan_from_record(r->id, &created, &policy, &r->plan)) ||
	    (rc = sb_plan_load_template(rs->env.home, &r->plan)) ||
	    (rc = sb_access_arm(rs->env.home, rs->env.stubs, &r->plan.access)) ||
	    (rc = vkey_derive(rs->env.home, r->id, r->vkey)) ||
	    (!r->resume && r->memory_bytes &&
	     (rc = vkey_derive(rs->env.home, r->from_run, r->alias_key)))) {
		r->create_rc = rc;
		goto out;
	}
	if (!r->from_start)
		r->plan.ninputs = 0; /* its own inputs are on the disk already */
	/* its grants as they were at the point it continues from */
	record_grants_apply(&rec, rec.offset_at ? rec.offset_at : rec.from_offset,
			    &r->plan.net);
	if (r->memory_bytes) {
		r->exact =
		    rec.changed_after == 0; /* its processes go on: nothing rolled */
	} else {
		if ((rc = roll_forward(r, &rec))) {
			r->create_rc = rc;
			goto out;
		}
		r->exact = !r->roll.omitted && !rec.files_over;
	}
	if (r->new_prompt) {
		free(r->plan.prompt);
		if (!(r->plan.prompt = strdup(r->new_prompt))) {
			r->create_rc = SB_ERR_NOMEM;
			goto out;
		}
	}
	if (!r->resume) /* its own name, else its id as a new run's */
		snprintf(r->plan.name, sizeof r->plan.name, "%s",
			 r->new_name[0] ? r->new_name : r->id);
	if ((rc = pack_from(r, &fb, &fev))) {
		r->create_rc = rc;
		goto out;
	}
	/* the machine first: a snapshot that is gone or broken changes no
	 * record; then the guest's SPEC (its NIC is the machine's) */
	rc = r->from_start
		 ? rs->env.runner->create(rs->env.runner_ctx, &r->plan, &r->m, r->accel,
					  r->accel_warning, sizeof r->accel_warning)
		 : rs->env.runner->create_from(rs->env.runner_ctx, &r->plan, r->from_run,
					       r->from_layer, r->memory_bytes, &r->m,
					       r->accel, r->accel_warning,
					       sizeof r->accel_warning);
	if (rc) {
		r->create_rc = rc;
		goto out;
	}
	if ((rc = spec_pack(r))) {
		r->create_rc = rc;
		snprintf(r->create_err, sizeof r->create_err, "%s", sb_errmsg(rc));
		rs->env.runner->discard(r->m);
		r->m = NULL;
		goto out;
	}
	rc = r->resume ? sb_log_append(rs->env.log, &fev, 1)
		       : record_plan(rs, &r->plan, &fev);
	if (rc) {
		r->create_rc = rc;
		snprintf(r->create_err, sizeof r->create_err, "%s", sb_errmsg(rc));
		rs->env.runner->discard(r->m); /* its own errors are not this one */
		r->m = NULL;
		goto out;
	}
	r->recorded = 1;
out:
	if (r->create_rc && !r->create_err[0])
		snprintf(r->create_err, sizeof r->create_err, "%s",
			 sb_errmsg(r->create_rc));
	record_free(&rec);
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&fb);
	if (sb_loop_post(rs->env.loop, create_done, r))
		abort();
}

struct point_ctx {
	const char *snapshot;
	uint64_t at;
	struct sb_resume_point *out;
	int found;
};

static int point_cb(void *vctx, const struct sb_resume_point *rp)
{
	struct point_ctx *c = vctx;

	if (c->snapshot ? !strcmp(rp->snapshot, c->snapshot) : rp->offset <= c->at) {
		*c->out = *rp;
		c->found = 1;
		if (c->snapshot)
			return 1;
	}
	return 0;
}

/* Parses "sN" into *n. */
static int snapshot_layer(const char *id, unsigned *n)
{
	char *end;
	unsigned long v;

	if (id[0] != 's' || id[1] < '0' || id[1] > '9')
		return 0;
	v = strtoul(id + 1, &end, 10);
	if (*end || v > 1u << 30)
		return 0;
	*n = (unsigned)v;
	return 1;
}

/* On a worker: the snapshot a fork or resume continues, from the
 * projections caught up: r->from_snap as asked, or ("") the newest at or
 * before r->at; then r->from_snap, from_layer, from_offset, at,
 * memory_bytes and (a resume) spent are the snapshot's. Errors:
 * SB_ERR_NOTFOUND (no such run or snapshot), SB_ERR_STATE (a resume of a
 * run its record says is live), SB_ERR_CORRUPT, the projections'. */
/* Sets r's point from rp, the snapshot found (snapshot: the id asked
 * for, or NULL; at: the offset asked for, UINT64_MAX: none; last: the
 * run's last offset). */
static int point_set(struct run *r, const struct sb_resume_point *rp,
		     const char *snapshot, uint64_t at, uint64_t last)
{
	snprintf(r->from_snap, sizeof r->from_snap, "%s", rp->snapshot);
	if (!snapshot_layer(rp->snapshot, &r->from_layer))
		return sb_seterr(SB_ERR_CORRUPT, "run %s: snapshot id '%s' is malformed",
				 r->from_run, rp->snapshot);
	r->from_offset = rp->offset;
	/* a memory snapshot asked for by id (or at its very offset) is
	 * continued with its processes, by a resume or a fork */
	if (!strcmp(rp->kind, "memory") && (snapshot || at == rp->offset))
		r->memory_bytes = rp->memory_bytes;
	/* the offset continued from: the one asked for, else the snapshot's */
	r->at = snapshot || at == UINT64_MAX ? rp->offset : at;
	if (at == UINT64_MAX && !snapshot)
		r->at = last;
	return SB_OK;
}

static int from_point(struct run *r)
{
	struct sb_runs *rs = r->rs;
	char want[sizeof r->from_snap];
	const char *snapshot;
	uint64_t at = r->at;
	struct sb_runstate st;
	struct sb_resume_point rp;
	struct point_ctx pc = {NULL, at, &rp, 0};
	struct sb_cost cost = {0};
	int rc;

	memcpy(want, r->from_snap, sizeof want);
	pc.snapshot = snapshot = want[0] ? want : NULL;
	sb_projector_catch_up(rs->env.proj, NULL);
	if ((rc = sb_runstate_get(rs->env.proj, r->from_run, &st)))
		return rc;
	if (r->resume && sb_runstate_is_live(&st))
		return sb_seterr(SB_ERR_STATE, "run %s is still running: fork it instead",
				 r->from_run);
	if ((rc = sb_resume_each(rs->env.proj, r->from_run, point_cb, &pc)) < 0)
		return rc;
	if (pc.found) {
		if ((rc = point_set(r, &rp, snapshot, at, st.last_offset)))
			return rc;
	} else if (!snapshot && at != UINT64_MAX) {
		/* before its first snapshot: its start (the template and its
		 * inputs) and the record from there; r->at stays at */
		r->from_start = 1;
		r->from_snap[0] = 0;
		r->from_offset = 0;
	} else {
		return snapshot ? sb_seterr(SB_ERR_NOTFOUND, "run %s has no snapshot %s",
					    r->from_run, snapshot)
				: sb_seterr(SB_ERR_NOTFOUND, "run %s has no snapshot",
					    r->from_run);
	}
	if (r->resume) {
		sb_costs_get(rs->env.proj, "run", r->from_run, &cost);
		r->spent = cost.cost_nusd; /* the budget goes on */
	}
	return SB_OK;
}

int sb_runs_from(struct sb_runs *rs, const struct sb_runs_from *f, sb_runs_created_fn cb,
		 void *ctx)
{
	struct run *r;
	unsigned char raw[SB_RUN_ID_LEN / 2];
	int rc;

	if (f->resume && run_find(rs, f->run))
		return sb_seterr(SB_ERR_STATE, "run %s is still running: fork it instead",
				 f->run);
	if (!(r = calloc(1, sizeof *r)))
		return SB_ERR_NOMEM;
	r->rs = rs;
	r->st = R_CREATING;
	r->from = 1;
	r->resume = f->resume;
	snprintf(r->from_run, sizeof r->from_run, "%s", f->run);
	/* what is asked for, until from_point finds it */
	snprintf(r->from_snap, sizeof r->from_snap, "%s", f->snapshot ? f->snapshot : "");
	r->at = f->at;
	if (f->prompt && !(r->new_prompt = strdup(f->prompt))) {
		free(r);
		return SB_ERR_NOMEM;
	}
	snprintf(r->new_name, sizeof r->new_name, "%s", f->name ? f->name : "");
	if (f->resume) {
		snprintf(r->id, sizeof r->id, "%s", f->run);
	} else {
		randombytes_buf(raw, sizeof raw);
		sodium_bin2hex(r->id, sizeof r->id, raw, sizeof raw);
	}
	r->cb = cb;
	r->cb_ctx = ctx;
	msgpack_sbuffer_init(&r->spec);
	if ((rc = sb_work_submit(rs->env.jobs, from_job, r))) {
		free(r->new_prompt);
		free(r);
		return rc;
	}
	run_link(r);
	return SB_OK;
}

void sb_runs_model_call(struct sb_runs *rs, const char *run)
{
	struct run *r = run_find(rs, run);

	if (r && r->st == R_RUNNING && r->snap && !r->turns &&
	    !strcmp(r->plan.snapshots, "turn"))
		sb_snapper_turn(r->snap);
}

int sb_runs_snapshot(struct sb_runs *rs, const char *run, int memory, sb_snap_fn cb,
		     void *ctx)
{
	struct run *r = run_find(rs, run);

	if (!r || r->st != R_RUNNING || !r->snap)
		return sb_seterr(SB_ERR_STATE,
				 "run %s is not running: its last snapshot is "
				 "taken when it stops",
				 run);
	return sb_snapper_take(r->snap, memory, cb, ctx);
}

int sb_runs_sync(struct sb_runs *rs, const char *run, sb_sync_fn cb, void *ctx)
{
	struct run *r = run_find(rs, run);

	if (!r || r->st != R_RUNNING || !r->snap)
		return sb_seterr(SB_ERR_STATE, "run %s is not running", run);
	return sb_snapper_sync(r->snap, cb, ctx);
}

/* A change of a run's grants under way. */
struct grant_req {
	struct run *r;
	struct sb_net_grant g;
	int allow;
	char by[128];
	sb_grant_fn cb;
	void *ctx;
};

static void grant_done(void *ctx, int rc)
{
	struct grant_req *q = ctx;
	char text[SB_NET_HOST_MAX + 32];

	sb_net_grant_format(&q->g, text, sizeof text);
	if (rc == SB_OK)
		rc = host_event(q->r->rs, q->r->id,
				q->allow ? "net.grant.added" : "net.grant.removed",
				"grant", text, "by", q->by, NULL);
	q->cb(q->ctx, rc, text);
	free(q);
}

int sb_runs_grant(struct sb_runs *rs, const char *run, const char *grant, int allow,
		  const char *by, sb_grant_fn cb, void *ctx)
{
	struct run *r = run_find(rs, run);
	struct grant_req *q;
	int rc;

	if (!r || r->st != R_RUNNING || !r->m)
		return sb_seterr(SB_ERR_STATE, "run %s is not running", run);
	if (!rs->env.runner->grant)
		return sb_seterr(SB_ERR_STATE, "runner %s changes no grants",
				 rs->env.runner->name);
	if (!(q = calloc(1, sizeof *q)))
		return SB_ERR_NOMEM;
	if ((rc = sb_net_grant_parse(grant, strlen(grant), &q->g))) {
		free(q);
		return rc;
	}
	q->r = r;
	q->allow = allow;
	snprintf(q->by, sizeof q->by, "%s", by);
	q->cb = cb;
	q->ctx = ctx;
	if ((rc = rs->env.runner->grant(r->m, &q->g, allow, grant_done, q)))
		free(q);
	return rc;
}

/* What the record knows of run, as the runner's sweep asks: 0 nothing,
 * 1 it ended, 2 it is live (an error reading it counts as live). */
static int run_known(void *ctx, const char *run)
{
	struct sb_runstate st;
	int rc = sb_runstate_get(ctx, run, &st);

	if (rc == SB_ERR_NOTFOUND)
		return 0;
	return rc || sb_runstate_is_live(&st) ? 2 : 1;
}

int sb_runs_open(const struct sb_runs_env *env, struct sb_runs **out)
{
	struct sb_runs *rs = calloc(1, sizeof *rs);
	char(*runs)[SB_RUN_MAX] = NULL;
	size_t n = 0;
	int rc;

	if (!rs)
		return SB_ERR_NOMEM;
	rs->env = *env;
	pthread_mutex_init(&rs->stop_mu, NULL);
	msgpack_sbuffer_init(&rs->batch);
	msgpack_sbuffer_init(&rs->blobs);
	if (!(rs->flush_w = sb_loop_idle_end(env->loop, on_flush, rs))) {
		pthread_mutex_destroy(&rs->stop_mu);
		free(rs);
		return SB_ERR_NOMEM;
	}
	if ((rc = sb_projector_catch_up(env->proj, NULL)) ||
	    (rc = sb_runstate_live(env->proj, NULL, &runs, &n))) {
		sb_runs_close(rs);
		return rc;
	}
	if (env->runner->sweep)
		env->runner->sweep(env->runner_ctx, run_known, env->proj);
	for (size_t i = 0; i < n; i++)
		reattach(rs, runs[i]);
	free(runs);
	batch_flush(rs);
	*out = rs;
	return SB_OK;
}

void sb_runs_close(struct sb_runs *rs)
{
	if (!rs)
		return;
	batch_flush(rs);
	rs->env.idle = NULL;
	while (rs->live) {
		struct run *r = rs->live;
		rs->live = r->next;
		run_free(r); /* the machine keeps running; the next daemon takes it up */
	}
	while (rs->jobs) { /* done on a worker, never back on the loop */
		struct job *j = rs->jobs;
		rs->jobs = j->next;
		free(j);
	}
	pthread_mutex_destroy(&rs->stop_mu);
	sb_watch_stop(rs->flush_w);
	msgpack_sbuffer_destroy(&rs->batch);
	msgpack_sbuffer_destroy(&rs->blobs);
	free(rs->items);
	free(rs);
}
