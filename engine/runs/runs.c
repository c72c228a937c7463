/* runs.c - the run manager: its runs' lifecycles (see runs.h; runs that
 * continue others, after a daemon's restart, a fork or a resume, are
 * taken up in from.c).
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
#include "engine/runs/compare.h"
#include "engine/runs/guest.h"
#include "engine/runs/plan.h"
#include "engine/runs/run.h"
#include "engine/runs/snapper.h"
#include "projections/views.h"
#include "vmm/chan.h"

#define STOP_GRACE_S	  5.0  /* SIGTERM to the harness, then the machine ends */
#define KILL_GRACE_S	  5.0  /* the machine ends gracefully, then by force */
#define WIND_DOWN_S	  15.0 /* a run its budget stopped: its harness, refused
				* every call, may end itself (its last reports
				* written) before SIGTERM */
#define GUEST_TUNNEL_PORT 4000 /* the gateway, as the harness sees it */

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
	struct sb_post post;	     /* the hand-off to the loop */
	char run[SB_RUN_MAX];
	int rc;
	char err[300]; /* rc's detail */
	/* a stop */
	char reason[32];
	sb_runs_stopped_fn cb;
	void *ctx;
	/* a re-run's comparison */
	char orig[SB_RUN_MAX];
	uint64_t at;   /* the original's offset the re-run started from */
	int never_ran; /* the re-run was stopped while queued */
	/* retention */
	const struct sb_runner *runner; /* the run's */
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
	sb_loop_post(j->rs->env.loop, &j->post, job_done, j);
}

/* Runs j's work on a worker (then its done on the loop), or with no work
 * its done on the loop, later. On error j is freed. */
static int job_submit(struct job *j)
{
	struct sb_runs *rs = j->rs;
	int rc = SB_OK;

	if (j->work)
		rc = sb_work_submit(rs->env.jobs, job_work, j);
	else
		sb_loop_post(rs->env.loop, &j->post, job_done, j);

	if (rc) {
		free(j);
		return rc;
	}
	j->next = rs->jobs; /* before job_done, which runs on this thread */
	rs->jobs = j;
	return SB_OK;
}

/* --- recording (batch.c) --- */

static void batch_add(struct sb_runs *rs, const char *run, const char *type,
		      enum sb_source src, const void *payload, size_t len)
{
	sb_runs_batch_add(rs, run, type, src, payload, len, NULL, 0);
}

/* Records a host event of run whose payload is alternating key/value C
 * strings, at once (after the batch, which keeps the run's order). */
int sb_runs_host_event(struct sb_runs *rs, const char *run, const char *type, ...)
{
	msgpack_sbuffer buf;
	msgpack_packer pk;
	struct sb_event ev;
	va_list ap;
	const char *k;
	sb_mapw m;
	int rc;

	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	va_start(ap, type);
	while ((k = va_arg(ap, const char *)))
		sb_mapw_str(&m, k, va_arg(ap, const char *));
	va_end(ap);
	rc = sb_mapw_end(&m);
	if (rc == SB_OK)
		rc = buf.data ? sb_event_init(&ev, type, run, SB_SRC_HOST, buf.data, buf.size)
			      : SB_ERR_NOMEM;
	if (rc == SB_OK)
		rc = sb_runs_record(rs, &ev, 1);
	if (rc)
		runs_log(rs, "run %s: cannot record %s: %s", run, type, sb_errmsg(rc));
	msgpack_sbuffer_destroy(&buf);
	return rc;
}

int sb_runs_append(struct sb_runs *rs, struct sb_event *ev, const struct sb_blob *blobs,
		   size_t nblobs)
{
	int rc;

	if ((rc = sb_runs_record_blobs(rs, blobs, nblobs, ev, 1)))
		runs_log(rs, "run %s: cannot record %s: %s", ev->run, ev->type, sb_errmsg(rc));
	return rc;
}

/* Records a run.warning of r (with the guest's events, in order). */
void sb_run_warn(struct run *r, const char *fmt, ...)
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
int sb_runs_record_failed(struct sb_runs *rs, const char *run, const char *reason)
{
	int rc = sb_runs_host_event(rs, run, "run.failed", "reason", reason, NULL);

	return rc ? rc : sb_runs_host_event(rs, run, "run.stopped", "reason", "failed", NULL);
}

/* --- one run --- */

static void spec_wipe(struct run *r)
{
	if (r->spec.data)
		sodium_memzero(r->spec.data, r->spec.alloc);
	msgpack_sbuffer_destroy(&r->spec);
	msgpack_sbuffer_init(&r->spec);
}

void sb_run_free(struct run *r)
{
	if (!r)
		return;
	sb_watch_stop(r->timeout_w);
	sb_watch_stop(r->boot_w);
	sb_watch_stop(r->grace_w);
	r->rs->live_ops->fail(r); /* before the guest: what waits for it is answered */
	sb_guest_close(r->g);
	if (r->m)
		r->runner->ops->free(r->m); /* before the snapper: no callback after */
	sb_snapper_close(r->snap);
	if (r->key.registered)
		sb_gateway_run_remove(r->rs->env.gateway, r->id);
	sb_plan_free(&r->plan);
	free(r->from.prompt);
	sb_rerun_free(r->from.calls);
	spec_wipe(r);
	sodium_memzero(r->key.vkey, sizeof r->key.vkey);
	sodium_memzero(r->key.alias, sizeof r->key.alias);
	free(r);
}

void sb_run_link(struct run *r)
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
	sb_runs_dequeue(r);
	sb_run_release(r); /* what waits for its share may start */
	sb_run_free(r);
	if (!rs->active && rs->env.idle)
		rs->env.idle(rs->env.ctx);
}

struct run *sb_runs_find(struct sb_runs *rs, const char *id)
{
	for (struct run *r = rs->live; r; r = r->next)
		if (!strcmp(r->id, id))
			return r;
	return NULL;
}

/* The run's virtual key: derived from the secret store's key and the run
 * id, so a restarted daemon knows it again. */
int sb_run_vkey_derive(const char *home, const char *run, char vkey[SB_VKEY_MAX])
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
	r->runner->ops->stop(r->m, KILL_GRACE_S);
}

static void run_finish(struct run *r);

/* Asks the harness to end (SIGTERM), then the machine after the grace. */
static void stop_ask(struct run *r)
{
	/* a guest not connected yet (a restarted daemon's) gets SIGTERM with
	 * its HELLO: ended by the harness, its files are written out; only
	 * past the grace is the machine ended by force */
	if (sb_guest_connected(r->g))
		sb_guest_signal(r->g, SIGTERM);
	r->grace_w = sb_loop_timer(r->rs->env.loop, STOP_GRACE_S, 0, on_kill_grace, r);
	if (!r->grace_w) /* out of memory: no grace */
		r->runner->ops->stop(r->m, KILL_GRACE_S);
}

/* The wind-down of a run its budget stopped is over: it is asked now. */
static void on_wound_down(void *ctx)
{
	struct run *r = ctx;

	sb_watch_stop(r->grace_w);
	r->grace_w = NULL;
	r->winding_down = 0;
	stop_ask(r);
}

static void run_stop(struct run *r, const char *reason)
{
	if (r->stop_reason[0] && r->winding_down)
		on_wound_down(r); /* another stop does not wait for it */
	if (r->stop_reason[0])
		return;
	snprintf(r->stop_reason, sizeof r->stop_reason, "%s", reason);
	if (r->st == SB_RUN_CREATING)
		return; /* the creation sees it when it is done */
	if (r->st == SB_RUN_QUEUED) { /* it never starts */
		sb_runs_dequeue(r);
		r->from.never_ran = 1; /* a re-run's comparison says so */
		run_finish(r);
		return;
	}
	if (r->hello) {
		/* its budget spent, the gateway refuses every call: a harness
		 * that ends on its own then writes its last reports first */
		if (!strcmp(reason, "budget") && r->ready && sb_guest_connected(r->g) &&
		    (r->grace_w = sb_loop_timer(r->rs->env.loop, WIND_DOWN_S, 0,
						on_wound_down, r))) {
			r->winding_down = 1;
			return;
		}
		stop_ask(r);
	} else {
		r->runner->ops->stop(r->m, KILL_GRACE_S);
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
	sb_runs_host_event(r->rs, r->id, "run.failed", "reason", reason, NULL);
	snprintf(r->stop_reason, sizeof r->stop_reason, "failed");
	r->runner->ops->stop(r->m, KILL_GRACE_S);
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

int sb_run_deadlines_watch(struct run *r, double left, int boot)
{
	sb_loop *l = r->rs->env.loop;

	r->timeout_w = sb_loop_timer(l, left > 0 ? left : 0, 0, on_timeout, r);
	if (boot)
		r->boot_w = sb_loop_timer(l, r->rs->env.settings->boot_timeout_s, 0,
					  on_boot_deadline, r);
	if (r->timeout_w && (r->boot_w || !boot))
		return SB_OK;
	sb_watch_stop(r->timeout_w);
	sb_watch_stop(r->boot_w);
	r->timeout_w = r->boot_w = NULL;
	return SB_ERR_NOMEM;
}

/* On a worker: the re-run's record (all it gathered settled first) and
 * its original's compared, as rerun.compared. */
static void compare_work(struct job *j)
{
	struct sb_compare_side a = {0}, b = {0};
	msgpack_sbuffer buf;
	msgpack_packer pk;
	struct sb_event ev;
	int same;

	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	sb_runs_settle(j->rs);
	if (!(j->rc = sb_compare_side_read(j->rs->env.log, j->orig, j->at, &a)) &&
	    (j->never_ran || !(j->rc = sb_compare_side_read(j->rs->env.log, j->run, 0, &b))) &&
	    !(j->rc = sb_compare_pack(&a, &b, j->orig,
				      j->never_ran ? "it never ran: stopped while queued" : NULL,
				      &pk, &same)) &&
	    !(j->rc = sb_event_init(&ev, "rerun.compared", j->run, SB_SRC_HOST, buf.data,
				    buf.size)))
		j->rc = sb_runs_record(j->rs, &ev, 1);
	sb_compare_side_free(&a);
	sb_compare_side_free(&b);
	msgpack_sbuffer_destroy(&buf);
}

/* On the loop: the re-run's end goes on, its comparison recorded. */
static void compare_done(struct job *j)
{
	struct run *r = sb_runs_find(j->rs, j->run);

	if (!r)
		return;
	if (j->rc)
		sb_run_warn(r, "no comparison with run %s: %s", j->orig, j->err);
	run_finish(r);
}

/* Has a re-run's comparison made on a worker, its end then finished by
 * compare_done. Returns 0 when it is, else nothing is asked. */
static int compare_submit(struct run *r)
{
	struct job *j;

	r->from.compared = 1;
	if (!(j = job_new(r->rs, r->id)))
		return SB_ERR_NOMEM;
	snprintf(j->orig, sizeof j->orig, "%s", r->from.run);
	j->at = r->from.at;
	j->never_ran = r->from.never_ran;
	j->work = compare_work;
	j->done = compare_done;
	return job_submit(j);
}

/* The run's last events, and the run ends: a re-run's comparison first. */
static void run_finish(struct run *r)
{
	struct sb_runs *rs = r->rs;
	char reason[700];

	if (r->from.rerun && !r->from.compared && compare_submit(r) == SB_OK)
		return;
	if (r->stop_reason[0]) {
		sb_runs_host_event(rs, r->id, "run.stopped", "reason", r->stop_reason, NULL);
	} else if (r->exited) {
		sb_runs_host_event(rs, r->id, "run.stopped", "reason", "exited", NULL);
	} else {
		if (r->setup_error[0])
			snprintf(reason, sizeof reason,
				 "the guest agent could not set the run up: %s",
				 r->setup_error);
		else
			snprintf(reason, sizeof reason, "%s", r->end_why);
		sb_runs_record_failed(rs, r->id, reason);
	}
	run_end(r);
}

static void on_final_snapshot(void *ctx, int rc, const char *snapshot)
{
	struct run *r = ctx;

	if (rc)
		sb_run_warn(r, "no snapshot of the run's end: %s", sb_errmsg(rc));
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

	if (sb_guest_attach(r->g, fd, again)) {
		run_fail(r, "out of memory: its guest channel cannot be watched");
		return;
	}
	if (r->runner->ops->restored(r->m) && !r->restored_sent) {
		/* a copy of a snapshot's guest: its clock, randomness and NIC */
		const struct sb_runner_ops *ops = r->runner->ops;
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
	sb_run_warn(ctx, "%s", line);
}

/* A denial or a granted lookup of the machine's network: net.denied or
 * net.resolved, with the guest's events. */
static void m_net(void *ctx, const struct sb_net_report *n)
{
	struct run *r = ctx;
	msgpack_sbuffer buf;
	msgpack_packer pk;
	char addrs[sizeof n->addrs], *a, *save = NULL, *addr[sizeof n->addrs / 2 + 1];
	msgpack_packer *v;
	size_t count = 0;
	sb_mapw m;

	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	if (n->kind == SB_NET_DENIED) {
		sb_mapw_str(&m, "dst", n->dst);
		sb_mapw_u64(&m, "port", n->port);
		sb_mapw_str(&m, "proto", n->proto);
		if (n->name[0]) /* a name (escaped) is cut at 256 bytes */
			sb_mapw_strn(&m, "name", n->name, strnlen(n->name, 256));
		sb_mapw_str(&m, "reason", n->reason);
	} else {
		sb_mapw_str(&m, "name", n->name);
		sb_mapw_str(&m, "type", n->proto);
		snprintf(addrs, sizeof addrs, "%s", n->addrs);
		for (a = strtok_r(addrs, ",", &save); a; a = strtok_r(NULL, ",", &save))
			addr[count++] = a; /* each at least one byte and a comma */
		v = sb_mapw_key(&m, "addrs");
		msgpack_pack_array(v, count);
		for (size_t i = 0; i < count; i++)
			sb_pack_str(v, addr[i]);
	}
	sb_mapw_u64(&m, "count", n->count);
	if (sb_mapw_end(&m)) {
		msgpack_sbuffer_destroy(&buf);
		return;
	}
	if (buf.data)
		batch_add(r->rs, r->id,
			  n->kind == SB_NET_DENIED ? "net.denied" : "net.resolved",
			  SB_SRC_HOST, buf.data, buf.size);
	msgpack_sbuffer_destroy(&buf);
}

const struct sb_machine_events sb_run_machine_events = {
    .channel = m_channel,
    .ended = m_ended,
    .warning = m_warning,
    .net = m_net,
};

/* --- the guest's channel --- */

/* Packs the guest's SPEC of r into r->spec: its plan, its virtual key and
 * its machine's NIC (network acl). */
int sb_run_spec_pack(struct run *r)
{
	const struct sb_runner_ops *ops = r->runner->ops;
	struct sb_net_iface f;
	int nic = r->m && ops->iface && ops->iface(r->m, &f) == SB_OK;

	return sb_plan_pack_guest(&r->plan, r->key.vkey, GUEST_TUNNEL_PORT, nic ? &f : NULL,
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
	if (resume) {
		r->ready = 1;
		return; /* it is past its set-up: a restarted daemon met it again */
	}
	if (!r->spec.size && (rc = sb_run_spec_pack(r))) {
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

	sb_runs_batch_add(r->rs, r->id, type, src, payload, len, blob, blob_len);
	if (src == SB_SRC_GUEST && !strcmp(type, "run.exited"))
		r->exited = 1;
	if (!strcmp(type, "harness.input.ready"))
		r->ready = 1;
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
	sb_run_warn(ctx, "%s", line);
}

static void g_done(void *ctx, const char *error)
{
	struct run *r = ctx;

	r->done = 1;
	snprintf(r->setup_error, sizeof r->setup_error, "%s", error);
}

static void g_closed(void *ctx)
{
	struct run *r = ctx;

	r->rs->live_ops->fail(r); /* no answer comes any more; the machine's end follows */
}

static void g_answer(void *ctx, int kind, uint64_t stream, const msgpack_object *body)
{
	struct run *r = ctx;

	r->rs->live_ops->answer(r, kind, stream, body);
}

/* A connection to the gateway, tied to the run; a refusal (the run holds
 * its share, say) is a run.warning at most once a second. */
static int g_connect(void *ctx, int *fd)
{
	struct run *r = ctx;
	int rc = sb_gateway_connect(r->rs->env.gateway, r->id, fd);
	double now;

	if (rc) {
		r->key.refused++;
		now = sb_loop_now(r->rs->env.loop);
		if (now - r->key.warned_at >= 1.0) {
			r->key.warned_at = now;
			sb_run_warn(r, "gateway: tunnel connection refused (%llu so far): %s",
			     (unsigned long long)r->key.refused, sb_errmsg(rc));
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
    .answer = g_answer,
};

/* --- snapshots --- */

static void retention(struct run *r);

/* Records snapshot.saved (after the events before it, in order). */
static int snap_saved(void *ctx, const struct sb_snap_done *d)
{
	struct run *r = ctx;
	struct sb_runs *rs = r->rs;
	const struct sb_snapshot_info *in = d->info;
	msgpack_sbuffer buf;
	msgpack_packer pk;
	sb_mapw m;
	struct sb_event ev;
	char id[16];
	int rc;

	snprintf(id, sizeof id, "s%u", in->layer);
	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	sb_mapw_str(&m, "snapshot", id);
	sb_mapw_str(&m, "kind", d->kind);
	sb_mapw_str(&m, "trigger", d->trigger);
	/* the runner's names (the local runner's: relative to its home) */
	sb_mapw_str(&m, "layer", in->layer_name);
	sb_mapw_str(&m, "memory", in->memory_name);
	sb_mapw_u64(&m, "layer_no", in->layer);
	sb_mapw_u64(&m, "bytes", in->bytes);
	sb_mapw_u64(&m, "memory_bytes", in->memory_bytes);
	msgpack_pack_double(sb_mapw_key(&m, "paused_ms"), in->paused_ms);
	msgpack_pack_double(sb_mapw_key(&m, "duration_ms"),
			    d->sync_ms + in->duration_ms); /* asked to made */
	msgpack_pack_double(sb_mapw_key(&m, "sync_ms"), d->sync_ms);
	sb_mapw_bool(&m, "synced", d->synced);
	sb_mapw_bool(&m, "frozen", d->frozen);
	rc = sb_mapw_end(&m);
	if (rc == SB_OK)
		rc = sb_event_init(&ev, "snapshot.saved", r->id, SB_SRC_HOST, buf.data,
				   buf.size);
	if (rc == SB_OK)
		rc = sb_runs_record(rs, &ev, 1);
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
		sb_runs_host_event(r->rs, r->id, "snapshot.removed", "snapshot", snapshot, "by",
			   "retention", NULL);
	else if (rc != SB_ERR_NOTFOUND && rc != SB_ERR_STATE)
		sb_run_warn(r, "cannot merge snapshot %s away: %s", snapshot ? snapshot : "?",
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
		if (j->runner->ops->readers(j->runner->ctx, j->run, t.layers[i], NULL, 0,
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
	struct run *r = sb_runs_find(j->rs, j->run);

	if (j->found && r && r->st == SB_RUN_RUNNING && r->snap)
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
	j->runner = r->runner;
	j->work = retire_work;
	j->done = retire_done;
	job_submit(j); /* a pool that is closing: none this time */
}

static void snap_warn(void *ctx, const char *line)
{
	sb_run_warn(ctx, "%s", line);
}

static int run_snapper(struct run *r)
{
	struct sb_snapper_env se = {
	    .loop = r->rs->env.loop,
	    .runner = r->runner->ops,
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

int sb_run_group_spent(struct run *r)
{
	struct sb_cost cost = {0};
	int rc;

	if (!r->plan.access.group_budget_nusd)
		return SB_OK;
	if ((rc = sb_projector_catch_up(r->rs->env.proj, NULL)) ||
	    (rc = sb_costs_get(r->rs->env.proj, "group", r->plan.group, &cost)))
		return rc;
	r->key.group_spent = cost.cost_nusd;
	return SB_OK;
}

/* Registers r with the gateway (spent: what the run spent already) and
 * opens its guest channel, masking its env-scope secrets and its key. */
int sb_run_connect(struct run *r, uint64_t spent)
{
	struct sb_runs *rs = r->rs;
	const struct sb_access *a = &r->plan.access;
	struct sb_guest_limits lim;
	struct sb_gateway_run gr = {0};
	int rc;

	gr.run = r->id;
	gr.key = r->key.vkey;
	gr.alias = r->key.alias[0] ? r->key.alias : NULL;
	gr.budget_nusd = a->budget_nusd;
	gr.spent_nusd = spent;
	gr.stop_on_budget = a->stop_on_budget;
	gr.group = r->plan.group;
	gr.group_budget_nusd = a->group_budget_nusd;
	gr.group_spent_nusd = r->key.group_spent;
	gr.models = a->models;
	gr.nmodels = a->nmodels;
	gr.rerun = r->from.calls;
	if ((rc = sb_gateway_run_add(rs->env.gateway, &gr, r->key.vkey)))
		return rc;
	r->from.calls = NULL; /* the gateway's now */
	r->key.registered = 1;
	lim.rate = rs->env.settings->guest_events_rate;
	lim.burst = rs->env.settings->guest_events_burst;
	lim.quota = r->plan.record_quota ? r->plan.record_quota
					 : rs->env.settings->run_record_quota;
	lim.file_max = rs->env.settings->run_file_max;
	lim.files_quota = rs->env.settings->run_files_quota;
	if ((rc = sb_guest_open(rs->env.loop, &lim, &guest_ops, r, &r->g)) ||
	    (rc = sb_guest_mask(r->g, r->key.vkey, strlen(r->key.vkey), "virtual key")) ||
	    (r->key.alias[0] &&
	     (rc = sb_guest_mask(r->g, r->key.alias, strlen(r->key.alias),
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

void sb_run_create_done(void *ctx);

/* Packs and records run.created, run.policy.resolved (inputs as blobs),
 * one secret.granted per grant and extra (NULL: none), in one append. */
int sb_runs_record_plan(struct sb_runs *rs, const struct sb_plan *p,
			struct sb_event *extra, size_t nextra)
{
	msgpack_sbuffer a, b, g;
	msgpack_packer pa, pb, pg;
	struct sb_event evs[2 + SB_ACCESS_SECRETS + 2];
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
	nextra = nextra < 2 ? nextra : 2;
	for (size_t i = 0; i < nextra; i++)
		evs[2 + p->access.ngrants + i] = extra[i];
	if (rc == SB_OK)
		rc = sb_log_append_blobs(rs->env.log, blobs, n, evs,
					 2 + p->access.ngrants + nextra);
	for (size_t i = 0; rc == SB_OK && i < nextra; i++)
		extra[i].offset = evs[2 + p->access.ngrants + i].offset;
	free(blobs);
	msgpack_sbuffer_destroy(&a);
	msgpack_sbuffer_destroy(&b);
	msgpack_sbuffer_destroy(&g);
	return rc;
}

int sb_run_record_queued(struct run *r, const struct sb_event *first)
{
	msgpack_sbuffer qb;
	struct sb_event evs[2];
	size_t n = 0;
	int rc;

	msgpack_sbuffer_init(&qb);
	if (first)
		evs[n++] = *first;
	if ((rc = sb_run_pack_queued(r, &qb, &evs[n])) == SB_OK)
		rc = first && r->from.resume ? sb_log_append(r->rs->env.log, evs, 2)
					     : sb_runs_record_plan(r->rs, &r->plan, evs, n + 1);
	if (rc == SB_OK)
		r->queued_offset = evs[n].offset;
	msgpack_sbuffer_destroy(&qb);
	return rc;
}

/* Its failure to start recorded (on a worker): rc and its detail are the
 * request's when even that cannot be recorded. */
static void start_failed(struct run *r, int why)
{
	char reason[700];
	int rc;

	snprintf(reason, sizeof reason, "cannot start the VM: %s", sb_errmsg(why));
	r->create.start_failed = 1;
	if ((rc = sb_runs_record_failed(r->rs, r->id, reason))) {
		/* its end is not in the record: the request says it */
		r->create.rc = rc;
		snprintf(r->create.err, sizeof r->create.err,
			 "cannot record the run in %.100s: it could not start "
			 "(%.400s), and then: %.300s",
			 r->rs->env.home, reason, sb_errmsg(rc));
	}
}

int sb_run_machine_make(struct run *r)
{
	const struct sb_runner_ops *ops = r->runner->ops;
	int rc = r->from.on && !r->from.start
		     ? ops->create_from(r->runner->ctx, &r->plan, r->from.run,
					r->from.layer, r->from.memory_bytes, &r->m,
					r->create.accel, r->create.accel_warning,
					sizeof r->create.accel_warning)
		     : ops->create(r->runner->ctx, &r->plan, &r->m, r->create.accel,
				   r->create.accel_warning,
				   sizeof r->create.accel_warning);

	if (rc == SB_OK && (rc = sb_run_spec_pack(r))) {
		ops->discard(r->m);
		r->m = NULL;
	}
	return rc;
}

/* On a worker: makes r's machine and its SPEC; on failure records its
 * end (run.failed). Then posts sb_run_create_done. */
static void make_machine(void *ctx)
{
	struct run *r = ctx;
	int rc;

	sb_clearerr();
	if ((rc = sb_run_machine_make(r)))
		start_failed(r, rc);
	sb_loop_post(r->rs->env.loop, &r->create.post, sb_run_create_done, r);
}

/* On a worker: resolve, record, and the machine when the run fits now;
 * else it waits in the queue. */
static void create_job(void *ctx)
{
	struct run *r = ctx;
	struct sb_runs *rs = r->rs;
	struct sb_plan_ctx pc = {rs->env.home, rs->env.stubs,
				 rs->env.settings->run_record_quota, rs->env.net};
	void (*next)(void *) = sb_run_create_done;
	int rc;

	sb_clearerr();
	if ((rc = sb_plan_resolve(&pc, r->id, r->create.spec, &r->plan)) ||
	    (rc = sb_runs_runner(rs, r->plan.runner, &r->runner)) ||
	    (rc = sb_runs_fits_ever(rs, &r->plan)) ||
	    (rc = sb_run_vkey_derive(rs->env.home, r->id, r->key.vkey)) ||
	    (rc = sb_run_group_spent(r))) {
		r->create.rc = rc;
		goto out;
	}
	rc = sb_run_admit(r) ? sb_runs_record_plan(rs, &r->plan, NULL, 0)
			     : sb_run_record_queued(r, NULL);
	if (rc) {
		r->create.rc = rc;
		if (rc == SB_ERR_FULL)
			snprintf(r->create.err, sizeof r->create.err,
				 "cannot record the run in %s: %s", rs->env.home,
				 sb_errmsg(rc));
		goto out;
	}
	r->create.recorded = 1;
	if (!r->admitted)
		next = sb_run_queued_done;
	else if ((rc = sb_run_machine_make(r)))
		start_failed(r, rc);
	for (size_t i = 0; i < r->plan.ninputs; i++)
		r->plan.inputs[i].data = NULL; /* they were the request's: blobs now */
out:
	if (r->create.rc && !r->create.err[0])
		snprintf(r->create.err, sizeof r->create.err, "%s",
			 sb_errmsg(r->create.rc));
	sb_loop_post(rs->env.loop, &r->create.post, next, r);
}

void sb_run_queued_done(void *ctx)
{
	struct run *r = ctx;
	sb_runs_created_fn cb = r->create.cb;
	void *cb_ctx = r->create.ctx;
	char id[SB_RUN_MAX];

	memcpy(id, r->id, sizeof id);
	r->create.spec = NULL;
	r->create.cb = NULL;
	if (r->stop_reason[0]) { /* stopped while it was being made */
		sb_runs_host_event(r->rs, id, "run.stopped", "reason", r->stop_reason, NULL);
		run_end(r);
	} else {
		sb_runs_enqueue(r);
	}
	if (cb)
		cb(cb_ctx, SB_OK, id);
}

/* Records run.started of r: its accelerator, how it boots and its NIC. */
static void started_event(struct run *r)
{
	const struct sb_runner_ops *ops = r->runner->ops;
	struct sb_net_iface f;
	int nic = ops->iface && ops->iface(r->m, &f) == SB_OK;
	msgpack_sbuffer buf;
	msgpack_packer pk;
	struct sb_event ev;
	char mac[18];
	sb_mapw m, net;

	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	sb_mapw_str(&m, "accel", r->create.accel);
	sb_mapw_str(&m, "boot",
		    !ops->restored(r->m) ? "cold"
		    : ops->warm(r->m)	 ? "warm"
					 : "memory");
	if (nic) {
		snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", f.mac[0],
			 f.mac[1], f.mac[2], f.mac[3], f.mac[4], f.mac[5]);
		sb_mapw_begin(&net, sb_mapw_key(&m, "net"));
		sb_mapw_str(&net, "tap", f.tap);
		sb_mapw_str(&net, "mac", mac);
		sb_mapw_str(&net, "addr4", f.guest4);
		if (f.guest6[0])
			sb_mapw_str(&net, "addr6", f.guest6);
		sb_mapw_end(&net);
	}
	if (sb_mapw_end(&m) == SB_OK && buf.data &&
	    sb_event_init(&ev, "run.started", r->id, SB_SRC_HOST, buf.data, buf.size) == SB_OK)
		sb_runs_record(r->rs, &ev, 1);
	msgpack_sbuffer_destroy(&buf);
}

static void created_nobody(void *ctx, int rc, const char *run)
{
}

/* On the loop: start what the worker prepared, and answer run.create. */
void sb_run_create_done(void *ctx)
{
	struct run *r = ctx;
	struct sb_runs *rs = r->rs;
	sb_runs_created_fn cb = r->create.cb;
	void *cb_ctx = r->create.ctx;
	char id[SB_RUN_MAX], reason[700];
	int rc;

	memcpy(id, r->id, sizeof id);
	r->create.spec = NULL;
	r->create.cb = NULL;
	if (!cb)
		cb = created_nobody; /* a queued run's request was answered */
	if (!r->create.recorded) {
		/* a resume stopped meanwhile, refused: its record, which may say
		 * live, is for the stop to close */
		int stop = r->from.resume && r->stop_reason[0];
		snprintf(reason, sizeof reason, "%s", r->stop_reason);
		rc = sb_seterr(r->create.rc, "%s", r->create.err);
		run_end(r);
		cb(cb_ctx, rc, NULL);
		if (stop)
			sb_runs_stop(rs, id, reason, NULL, NULL);
		return;
	}
	if (r->create.start_failed) {
		rc = r->create.rc ? sb_seterr(r->create.rc, "%s", r->create.err) : SB_OK;
		run_end(r);
		cb(cb_ctx, rc, rc ? NULL : id);
		return;
	}
	if (r->stop_reason[0]) { /* stopped while it was being made */
		r->runner->ops->discard(r->m); /* never started: its layer goes */
		r->m = NULL;
		sb_runs_host_event(rs, id, "run.stopped", "reason", r->stop_reason, NULL);
		run_end(r);
		cb(cb_ctx, SB_OK, id);
		return;
	}
	r->st = SB_RUN_RUNNING;
	if ((rc = sb_run_connect(r, r->from.spent)) ||
	    (rc = r->runner->ops->start(r->m, &sb_run_machine_events, r)) ||
	    (rc = sb_run_deadlines_watch(r, (double)r->plan.timeout_s, 1))) {
		snprintf(reason, sizeof reason, "cannot start the VM: %s", sb_errmsg(rc));
		r->runner->ops->signal(r->m, SIGKILL);
		sb_runs_record_failed(rs, id, reason);
		run_end(r);
		cb(cb_ctx, SB_OK, id);
		return;
	}
	if (r->create.accel_warning[0])
		sb_run_warn(r, "%s", r->create.accel_warning);
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
	r->st = SB_RUN_CREATING;
	r->create.spec = spec;
	r->create.cb = cb;
	r->create.ctx = ctx;
	msgpack_sbuffer_init(&r->spec);
	randombytes_buf(raw, sizeof raw);
	sodium_bin2hex(r->id, sizeof r->id, raw, sizeof raw);
	if ((rc = sb_work_submit(rs->env.jobs, create_job, r))) {
		free(r);
		return rc;
	}
	sb_run_link(r);
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
			j->rc = sb_runs_record(rs, &ev, 1); /* after the run's gathered events */
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
	struct run *r = sb_runs_find(rs, id);
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

int sb_runs_runner(struct sb_runs *rs, const char *name, const struct sb_runner **out)
{
	char names[256] = "";
	size_t at = 0;

	for (size_t i = 0; i < rs->env.nrunners; i++) {
		if (!strcmp(rs->env.runners[i].name, name)) {
			*out = &rs->env.runners[i];
			return SB_OK;
		}
		at += (size_t)snprintf(names + at, at < sizeof names ? sizeof names - at : 0,
				       "%s%s", i ? ", " : "", rs->env.runners[i].name);
	}
	return sb_seterr(SB_ERR_INVAL, "no runner '%s' here: this daemon has %s", name,
			 names);
}

/* Points *out at the runner of the run st describes, the one its record
 * names ("local" when it names none). Errors: those of sb_runs_runner. */
static int runner_of(struct sb_runs *rs, const struct sb_runstate *st,
		     const struct sb_runner **out)
{
	return sb_runs_runner(rs, st->runner[0] ? st->runner : "local", out);
}

int sb_runs_disk_open(struct sb_runs *rs, const struct sb_runstate *st, const char *layer,
		      sb_fsread **out)
{
	const struct sb_runner *rn;
	int rc;

	if ((rc = runner_of(rs, st, &rn)))
		return rc;
	if (!rn->ops->disk_open)
		return sb_seterr(SB_ERR_UNAVAIL,
				 "runner %s serves no reads of run %s's disk", rn->name,
				 st->run);
	return rn->ops->disk_open(rn->ctx, st->run, layer, out);
}

int sb_runs_template_open(struct sb_runs *rs, const struct sb_runstate *st, sb_fsread **out)
{
	const struct sb_runner *rn;
	int rc;

	if ((rc = runner_of(rs, st, &rn)))
		return rc;
	if (!rn->ops->template_open)
		return sb_seterr(SB_ERR_UNAVAIL, "runner %s serves no reads of its templates",
				 rn->name);
	rc = rn->ops->template_open(rn->ctx, st->template, st->template_hash, out);
	if (rc == SB_ERR_STATE)
		return sb_seterr(SB_ERR_STATE,
				 "template %s was built again since run %s started: the "
				 "disk it started on is gone",
				 st->template, st->run);
	return rc;
}

int sb_runs_readers(struct sb_runs *rs, const struct sb_runstate *st, unsigned layer,
		    char (*users)[SB_RUN_MAX], size_t max, size_t *count)
{
	const struct sb_runner *rn;
	int rc;

	if ((rc = runner_of(rs, st, &rn)))
		return rc;
	return rn->ops->readers(rn->ctx, st->run, layer, users, max, count);
}

int sb_runs_layer_remove(struct sb_runs *rs, const struct sb_runstate *st, unsigned layer)
{
	const struct sb_runner *rn;
	int rc;

	if ((rc = runner_of(rs, st, &rn)))
		return rc;
	if (!rn->ops->remove_layer)
		return sb_seterr(SB_ERR_UNAVAIL, "runner %s removes no snapshots",
				 rn->name);
	return rn->ops->remove_layer(rn->ctx, st->run, layer);
}

int sb_runs_release(struct sb_runs *rs, const struct sb_runstate *st, int dry,
		    struct sb_layers_freed *out)
{
	const struct sb_runner *rn;
	int rc;

	memset(out, 0, sizeof *out);
	if ((rc = runner_of(rs, st, &rn)))
		return rc;
	return rn->ops->release ? rn->ops->release(rn->ctx, st->run, dry, out) : SB_OK;
}

int sb_runs_usage(struct sb_runs *rs, struct sb_layers_usage *u)
{
	struct sb_layers_usage one;
	int rc;

	memset(u, 0, sizeof *u);
	for (size_t i = 0; i < rs->env.nrunners; i++) {
		const struct sb_runner *rn = &rs->env.runners[i];
		if (!rn->ops->usage)
			continue;
		if ((rc = rn->ops->usage(rn->ctx, &one)))
			return rc;
		u->runs += one.runs;
		u->snapshots += one.snapshots;
		u->memory += one.memory;
		u->nruns += one.nruns;
		u->nsnapshots += one.nsnapshots;
		u->nmemory += one.nmemory;
	}
	return SB_OK;
}

void sb_runs_model_call(struct sb_runs *rs, const char *run)
{
	struct run *r = sb_runs_find(rs, run);

	if (r && r->st == SB_RUN_RUNNING && r->snap && !r->turns &&
	    !strcmp(r->plan.snapshots, "turn"))
		sb_snapper_turn(r->snap);
}

int sb_runs_snapshot(struct sb_runs *rs, const char *run, int memory, sb_snap_fn cb,
		     void *ctx)
{
	struct run *r = sb_runs_find(rs, run);

	if (!r || r->st != SB_RUN_RUNNING || !r->snap)
		return sb_seterr(SB_ERR_STATE,
				 "run %s is not running: its last snapshot is "
				 "taken when it stops",
				 run);
	return sb_snapper_take(r->snap, memory, cb, ctx);
}

int sb_runs_sync(struct sb_runs *rs, const char *run, sb_sync_fn cb, void *ctx)
{
	struct run *r = sb_runs_find(rs, run);

	if (!r || r->st != SB_RUN_RUNNING || !r->snap)
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
		rc = sb_runs_host_event(q->r->rs, q->r->id,
				q->allow ? "net.grant.added" : "net.grant.removed",
				"grant", text, "by", q->by, NULL);
	q->cb(q->ctx, rc, text);
	free(q);
}

int sb_runs_grant(struct sb_runs *rs, const char *run, const char *grant, int allow,
		  const char *by, sb_grant_fn cb, void *ctx)
{
	struct run *r = sb_runs_find(rs, run);
	struct grant_req *q;
	int rc;

	if (!r || r->st != SB_RUN_RUNNING || !r->m)
		return sb_seterr(SB_ERR_STATE, "run %s is not running", run);
	if (!r->runner->ops->grant)
		return sb_seterr(SB_ERR_STATE, "runner %s changes no grants",
				 r->runner->name);
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
	if ((rc = r->runner->ops->grant(r->m, &q->g, allow, grant_done, q)))
		free(q);
	return rc;
}

void sb_run_start_admitted(struct run *r)
{
	r->st = SB_RUN_CREATING;
	if (sb_work_submit(r->rs->env.jobs, make_machine, r)) {
		r->create.start_failed = 1;
		r->create.rc = SB_ERR_NOMEM;
		sb_run_create_done(r); /* records nothing: it says why */
	}
}

void sb_runs_lifecycle_close(struct sb_runs *rs)
{
	rs->env.idle = NULL;
	while (rs->live) {
		struct run *r = rs->live;
		rs->live = r->next;
		sb_run_free(r); /* the machine keeps running; the next daemon takes it up */
	}
	while (rs->jobs) { /* done on a worker, never back on the loop */
		struct job *j = rs->jobs;
		rs->jobs = j->next;
		free(j);
	}
}
