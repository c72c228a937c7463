/* from.c - runs that continue others: a live run a restarted daemon takes
 * up again (reattach), forks and resumes (see runs.h). A run's record is
 * read here through history.h; what a fork or resume continues is found
 * in the resume points projection.
 */
#include <limits.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/error.h"
#include "engine/mpack.h"
#include "engine/payload.h"
#include "engine/log/summary.h"
#include "engine/runs/history.h"
#include "engine/runs/run.h"
#include "projections/views.h"
#include "vmm/fsread.h"

/* --- a daemon's start: the runs a previous one left --- */

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
static int roll_forward(struct run *r, const struct sb_history *rec)
{
	const struct sb_runner_ops *ops = r->runner->ops;
	sb_fsread *fs = NULL;
	int rc;

	if (rec->nfiles && !r->from.start && ops->disk_open &&
	    ops->disk_open(r->runner->ctx, r->from.run, r->from.layer_name, &fs))
		fs = NULL; /* unread: the agent finds out */
	rc = sb_roll_plan(rec->files, rec->nfiles, r->from.start, fs ? roll_probe : NULL,
			  fs, &r->plan, &r->from.roll);
	sb_fsread_close(fs);
	sb_clearerr();
	return rc;
}

/* Takes up r, which waited for its runner's capacity when a daemon ended
 * (rec: its record, its plan read into r): it waits again, in its place.
 * Errors: SB_ERR_CORRUPT (its run.queued), the secret store's, access's. */
static int requeue(struct run *r, const struct sb_history *rec, msgpack_zone *zone)
{
	struct sb_runs *rs = r->rs;
	struct sb_cost cost = {0};
	const msgpack_object *start;
	msgpack_object q;
	int rc;

	if (sb_payload_parse(rec->queued.data, rec->queued.size, zone, &q))
		return sb_seterr(SB_ERR_CORRUPT, "its run.queued cannot be read back");
	if (sb_map_str(&q, "from_run", r->from.run, sizeof r->from.run) > 0) {
		r->from.on = 1;
		r->from.resume = rec->resumed;
		r->from.layer = (unsigned)sb_map_u64(&q, "from_layer", UINT32_MAX);
		r->from.memory_bytes = sb_map_u64(&q, "memory_bytes", 0);
		start = sb_map_get(&q, "from_start");
		r->from.start = start && start->type == MSGPACK_OBJECT_BOOLEAN &&
				start->via.boolean;
	}
	sb_costs_get(rs->env.proj, "run", r->id, &cost);
	r->from.spent = cost.cost_nusd; /* its budget goes on */
	if ((rec->forked_from[0] &&
	     (rc = sb_run_vkey_derive(rs->env.home, rec->forked_from, r->key.alias))) ||
	    (rc = sb_run_vkey_derive(rs->env.home, r->id, r->key.vkey)) ||
	    (rc = sb_plan_load_template(rs->env.home, &r->plan)) ||
	    (rc = sb_access_arm(rs->env.home, rs->env.stubs, &r->plan.access)))
		return rc;
	if (sb_run_group_spent(r)) /* unread: counted as spent */
		r->key.group_spent = r->plan.access.group_budget_nusd;
	r->reattached = 0;
	r->st = SB_RUN_QUEUED;
	r->queued_offset = rec->queued_offset;
	r->create.recorded = 1;
	sb_run_link(r);
	sb_runs_enqueue(r);
	return SB_OK;
}

static int rerun_load(struct run *r, uint64_t made);

/* Takes up what makes r (taken up by a restarted daemon) a re-run, as its
 * record says (rec; not once resumed, as a resume of it is not one): its
 * original, the offset it started from and its comparison at its end;
 * and the recorded calls after the ones it made, read on the loop as the
 * record is (a re-run that departed from its record gets none: calls go
 * live, or, not going on live, past the record). Errors: the log's,
 * SB_ERR_NOMEM. */
static int rerun_takeup(struct run *r, const struct sb_history *rec)
{
	if (!rec->rerun.mode || rec->resumed) /* a resumed one goes on live */
		return SB_OK;
	r->from.rerun = rec->rerun.mode;
	r->from.at = rec->rerun.at;
	snprintf(r->from.run, sizeof r->from.run, "%s", rec->rerun.of);
	if (rec->rerun.diverged && rec->rerun.mode == 2)
		return SB_OK;
	return rerun_load(r, rec->rerun.diverged ? UINT64_MAX : rec->rerun.calls);
}

/* Ends what a previous daemon left of run on any runner: its record, which
 * would name the runner, cannot be read. */
static void reap_all(struct sb_runs *rs, const char *run)
{
	for (size_t i = 0; i < rs->env.nrunners; i++)
		rs->env.runners[i].ops->reap(rs->env.runners[i].ctx, run);
}

/* Takes up run, which its record says is live. */
void sb_runs_reattach(struct sb_runs *rs, const char *run)
{
	struct run *r = calloc(1, sizeof *r);
	struct sb_history rec = {0};
	msgpack_zone zone;
	msgpack_object created, policy;
	struct sb_cost cost = {0};
	struct timespec now;
	char reason[700];
	double left;
	int rc;

	if (!r || !msgpack_zone_init(&zone, 4096)) {
		free(r);
		reap_all(rs, run);
		sb_runs_record_failed(rs, run, "daemon-restart");
		return;
	}
	r->rs = rs;
	r->st = SB_RUN_RUNNING;
	r->reattached = 1;
	snprintf(r->id, sizeof r->id, "%s", run);
	msgpack_sbuffer_init(&r->spec);
	if ((rc = sb_history_read(rs->env.log, run, &rec)) ||
	    (!rec.started_ns && !rec.queued.size) || !rec.created.size ||
	    !rec.policy.size ||
	    sb_payload_parse(rec.created.data, rec.created.size, &zone, &created) ||
	    sb_payload_parse(rec.policy.data, rec.policy.size, &zone, &policy) ||
	    (rc = sb_plan_from_record(run, &created, &policy, &r->plan))) {
		/* it never started, or its record cannot be read back */
		reap_all(rs, run);
		sb_runs_record_failed(rs, run, "daemon-restart");
		goto out_free;
	}
	if ((rc = sb_runs_runner(rs, r->plan.runner, &r->runner))) {
		snprintf(reason, sizeof reason, "cannot take the run up again: %s",
			 sb_errmsg(rc));
		sb_runs_record_failed(rs, run, reason);
		goto out_free;
	}
	if (rec.resumed)
		r->plan.ninputs = 0; /* its disk has them: a SPEC made again must not
				      * write the first start's inputs over it */
	sb_history_grants_apply(&rec, 0, &r->plan.net); /* its grants as they are now */
	if ((rc = rerun_takeup(r, &rec))) {
		snprintf(reason, sizeof reason, "cannot take the re-run up again: %s",
			 sb_errmsg(rc));
		reap_all(rs, run);
		sb_runs_record_failed(rs, run, reason);
		goto out_free;
	}
	if (rec.budget_nusd) /* a resume raised it */
		r->plan.access.budget_nusd = rec.budget_nusd;
	if (rec.queued.size) {
		if ((rc = requeue(r, &rec, &zone))) {
			snprintf(reason, sizeof reason,
				 "cannot take the queued run up again: %s", sb_errmsg(rc));
			sb_runs_record_failed(rs, run, reason);
			goto out_free;
		}
		r = NULL; /* the queue's */
		goto out_free;
	}
	if ((rc = r->runner->ops->reattach(r->runner->ctx, &r->plan, &sb_run_machine_events,
					   r, &r->m))) {
		r->runner->ops->reap(r->runner->ctx, run); /* what it left */
		if (rec.exited)
			sb_runs_host_event(rs, run, "run.stopped", "reason", "exited", NULL);
		else
			sb_runs_record_failed(rs, run,
				      "its VM ended while sanboxd was not running");
		goto out_free;
	}
	if (r->runner->ops->interrupted)
		r->thaw_due = r->runner->ops->interrupted(r->m, rec.saved);
	sb_costs_get(rs->env.proj, "run", run, &cost);
	if (sb_run_group_spent(r)) /* unread: counted as spent, so that no */
		r->key.group_spent = r->plan.access.group_budget_nusd; /* call passes it */
	if ((rec.forked_from[0] &&
	     (rc = sb_run_vkey_derive(rs->env.home, rec.forked_from, r->key.alias))) ||
	    (rc = sb_run_vkey_derive(rs->env.home, run, r->key.vkey)) ||
	    (rc = sb_access_arm(rs->env.home, rs->env.stubs, &r->plan.access)) ||
	    (rc = sb_run_connect(r, cost.cost_nusd))) {
		snprintf(reason, sizeof reason, "cannot take the run up again: %s",
			 sb_errmsg(rc));
		r->runner->ops->signal(r->m, SIGKILL);
		sb_runs_record_failed(rs, run, reason);
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
	if ((rc = sb_run_deadlines_watch(r, left, !rec.ready))) {
		r->runner->ops->signal(r->m, SIGKILL);
		sb_runs_record_failed(rs, run, "cannot take the run up again: out of memory");
		goto out_free;
	}
	sb_run_link(r);
	sb_run_hold(r); /* its machine runs: its share is taken */
	sb_run_warn(r, "taken up again by a restarted daemon");
	r = NULL;
out_free:
	sb_run_free(r);
	sb_history_free(&rec);
	msgpack_zone_destroy(&zone);
}

/* --- forks and resumes --- */

/* Packs the from event: run.forked of a fork, run.resumed of a resume. */
static int pack_from(const struct run *r, msgpack_sbuffer *buf, struct sb_event *ev)
{
	msgpack_packer pk, *v;
	sb_mapw m;
	int rc;

	msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	sb_mapw_str(&m, "from_run", r->from.run);
	sb_mapw_u64(&m, "from_offset", r->from.offset);
	sb_mapw_u64(&m, "at", r->from.at);
	sb_mapw_str(&m, "snapshot", r->from.snap);
	sb_mapw_bool(&m, "exact", r->from.exact);
	sb_mapw_bool(&m, "memory", r->from.memory_bytes > 0);
	sb_mapw_bool(&m, "session", r->from.session);
	if (r->from.rerun) {
		sb_mapw_bool(&m, "rerun", 1);
		sb_mapw_bool(&m, "live_after_divergence", r->from.rerun == 2);
	}
	sb_mapw_u64(&m, "rolled", r->from.roll.rolled);
	sb_mapw_u64(&m, "removed", r->plan.nremoves);
	if (r->from.roll.nnamed) {
		sb_mapw_u64(&m, "omitted_count", r->from.roll.omitted);
		v = sb_mapw_key(&m, "omitted");
		msgpack_pack_array(v, r->from.roll.nnamed);
		for (size_t i = 0; i < r->from.roll.nnamed; i++)
			sb_pack_str(v, r->from.roll.named[i]);
	}
	if (r->from.resume)
		sb_mapw_str(&m, "prompt", r->from.prompt ? r->from.prompt : "");
	if (r->from.resume && r->from.budget_nusd)
		sb_mapw_u64(&m, "budget_nusd", r->from.budget_nusd);
	if ((rc = sb_mapw_end(&m)))
		return rc;
	return sb_event_init(ev, r->from.resume ? "run.resumed" : "run.forked", r->id,
			     SB_SRC_HOST, buf->data, buf->size);
}

static int from_point(struct run *r);

/* Sets r's budget: the one a resume of the run it continues gave it last
 * (rec), else its plan's; then the one asked for, which a resume's must
 * exceed what the run has spent. Errors: SB_ERR_INVAL (that, or a resume
 * of a run its budget stopped with no budget asked for). */
static int from_budget(struct run *r, const struct sb_history *rec)
{
	char want[32], spent[32];

	if (rec->budget_nusd)
		r->plan.access.budget_nusd = rec->budget_nusd;
	if (r->from.resume && !r->from.budget_nusd && r->from.budget_stopped) {
		sb_usd_format(r->plan.access.budget_nusd, want, sizeof want);
		sb_usd_format(r->from.spent, spent, sizeof spent);
		return sb_seterr(SB_ERR_INVAL,
				 "run %s was stopped by its budget (%s of %s spent): resume "
				 "it with a larger one",
				 r->from.run, spent, want);
	}
	if (!r->from.budget_nusd)
		return SB_OK;
	if (r->from.resume && r->from.budget_nusd <= r->from.spent) {
		sb_usd_format(r->from.budget_nusd, want, sizeof want);
		sb_usd_format(r->from.spent, spent, sizeof spent);
		return sb_seterr(SB_ERR_INVAL,
				 "a budget of %s does not exceed the %s run %s has spent",
				 want, spent, r->from.run);
	}
	r->plan.access.budget_nusd = r->from.budget_nusd;
	return SB_OK;
}

/* Sets r's runner: the one holding the snapshots of the run it continues
 * (its plan read back names it). Errors: SB_ERR_INVAL (another runner was
 * asked for; the daemon has no such runner). */
static int from_runner(struct run *r)
{
	if (r->from.runner[0] && strcmp(r->from.runner, r->plan.runner))
		return sb_seterr(SB_ERR_INVAL,
				 "run %s's snapshots are on runner %s: a fork or resume of "
				 "it runs there, not on %s",
				 r->from.run, r->plan.runner, r->from.runner);
	return sb_runs_runner(r->rs, r->plan.runner, &r->runner);
}

/* The blob named by field key of a payload, read into *data (the caller
 * frees it). */
static int rerun_blob(sb_log *log, const msgpack_object *p, const char *key,
		      void **data, size_t *len)
{
	char hex[SB_HASH_HEX];
	uint8_t h[SB_HASH_LEN];

	if (sb_map_str(p, key, hex, sizeof hex) != 2 * SB_HASH_LEN ||
	    sb_hash_parse(hex, h))
		return sb_seterr(SB_ERR_CORRUPT, "a model call's %s is not a blob key", key);
	return sb_blob_get(log, h, data, len);
}

/* One gateway agent.message of the run re-run into c (its bodies are
 * the caller's to free). */
static int rerun_call(sb_log *log, const struct sb_event *e, struct sb_rerun_call *c)
{
	msgpack_zone zone;
	msgpack_object p;
	char api[16] = "";
	void *rq = NULL, *an = NULL;
	int rc = SB_ERR_NOMEM;

	if (!msgpack_zone_init(&zone, 1024))
		return rc;
	if ((rc = sb_payload_parse(e->payload, e->payload_len, &zone, &p)) ||
	    (rc = rerun_blob(log, &p, "request", &rq, &c->request_len)) ||
	    (rc = rerun_blob(log, &p, "response", &an, &c->answer_len))) {
		free(rq);
		goto out;
	}
	sb_map_str(&p, "api", api, sizeof api);
	c->api = !strcmp(api, "anthropic")   ? SB_API_ANTHROPIC
		 : !strcmp(api, "responses") ? SB_API_RESPONSES
					     : SB_API_OPENAI;
	c->stream = sb_map_bool(&p, "stream", 0);
	c->status = (long)sb_map_u64(&p, "status", 0);
	c->request = rq;
	c->answer = an;
out:
	msgpack_zone_destroy(&zone);
	return rc;
}

/* The seed and clock the re-run's original started its harness with
 * (its guest's first harness.input.ready: seed, 64 hex digits, and
 * clock_s) into p->start; a record without them leaves it unset. */
static void rerun_start(const struct sb_event *e, struct sb_plan *p)
{
	msgpack_zone zone;
	msgpack_object o;
	char hex[2 * sizeof p->start.seed + 1];
	size_t n = 0;

	if (p->start.given || !msgpack_zone_init(&zone, 512))
		return;
	if (sb_payload_parse(e->payload, e->payload_len, &zone, &o) == SB_OK &&
	    sb_map_str(&o, "seed", hex, sizeof hex) == 2 * sizeof p->start.seed &&
	    sodium_hex2bin(p->start.seed, sizeof p->start.seed, hex, sizeof hex - 1, NULL, &n,
			   NULL) == 0 &&
	    n == sizeof p->start.seed && sb_map_get(&o, "clock_s")) {
		p->start.clock_s = sb_map_u64(&o, "clock_s", 0);
		p->start.given = p->start.clock_s > 0;
	}
	msgpack_zone_destroy(&zone);
}

/* On a worker: the model calls of the run r re-runs recorded after
 * r->from.at (its gateway agent.message events, in the log's order; the
 * first made ones of them left out too) into r->from.calls, and the seed
 * and clock of its first harness start after r->from.at into
 * r->plan.start. */
static int rerun_load(struct run *r, uint64_t made)
{
	sb_log *log = r->rs->env.log;
	struct sb_rerun_call *calls = NULL, *more;
	size_t n = 0, cap = 0;
	uint64_t skipped = 0;
	sb_log_iter *it;
	struct sb_event e;
	int rc;

	if ((rc = sb_log_iter_open_run(log, r->from.run, 1, &it)))
		return rc;
	while ((rc = sb_log_iter_next(it, &e)) == SB_OK) {
		int call = e.source == SB_SRC_GATEWAY && !strcmp(e.type, "agent.message");
		if (e.offset <= r->from.at || (call && skipped < made)) {
			skipped += call; /* part of the state continued, or made */
			continue;
		}
		if (e.source == SB_SRC_GUEST && !strcmp(e.type, "harness.input.ready"))
			rerun_start(&e, &r->plan);
		if (!call)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			if (!(more = realloc(calls, cap * sizeof *calls))) {
				rc = SB_ERR_NOMEM;
				break;
			}
			calls = more;
		}
		if ((rc = rerun_call(log, &e, &calls[n])))
			break;
		n++;
	}
	sb_log_iter_close(it);
	if (rc == SB_END) /* the end of its events */
		rc = sb_rerun_new(calls, n, skipped, r->from.rerun == 2, &r->from.calls);
	for (size_t i = 0; i < n; i++) {
		free((void *)calls[i].request);
		free((void *)calls[i].answer);
	}
	free(calls);
	return rc;
}

/* On a worker: the snapshot continued, the plan from the record of the run
 * continued, its record, and a machine on a new layer over the snapshot. */
static void from_job(void *ctx)
{
	struct run *r = ctx;
	struct sb_runs *rs = r->rs;
	struct sb_history rec = {0};
	msgpack_zone zone;
	msgpack_object created, policy;
	msgpack_sbuffer fb;
	struct sb_event fev;
	void (*next)(void *) = sb_run_create_done;
	int rc;

	sb_clearerr();
	msgpack_sbuffer_init(&fb);
	if (!msgpack_zone_init(&zone, 4096)) {
		r->create.rc = SB_ERR_NOMEM;
		goto out;
	}
	if ((rc = from_point(r))) {
		r->create.rc = rc;
		goto out;
	}
	rec.from_offset = r->from.offset;
	rec.offset_at = r->from.at;
	if ((rc = sb_history_read(rs->env.log, r->from.run, &rec)) == SB_OK &&
	    (!rec.created.size || !rec.policy.size ||
	     sb_payload_parse(rec.created.data, rec.created.size, &zone, &created) ||
	     sb_payload_parse(rec.policy.data, rec.policy.size, &zone, &policy)))
		rc = sb_seterr(SB_ERR_CORRUPT,
			       "run %s: its plan cannot be read back from its record",
			       r->from.run);
	if (rc || (rc = sb_plan_from_record(r->id, &created, &policy, &r->plan)) ||
	    (rc = from_runner(r)) ||
	    (rc = sb_plan_load_template(rs->env.home, &r->plan)) ||
	    (rc = sb_access_arm(rs->env.home, rs->env.stubs, &r->plan.access)) ||
	    (rc = sb_run_vkey_derive(rs->env.home, r->id, r->key.vkey)) ||
	    (rc = sb_run_group_spent(r)) ||
	    (!r->from.resume && r->from.memory_bytes &&
	     (rc = sb_run_vkey_derive(rs->env.home, r->from.run, r->key.alias)))) {
		r->create.rc = rc;
		goto out;
	}
	if ((rc = from_budget(r, &rec)) || (r->from.rerun && (rc = rerun_load(r, 0)))) {
		r->create.rc = rc;
		goto out;
	}
	if (!r->from.start)
		r->plan.ninputs = 0; /* its own inputs are on the disk already */
	/* a harness started again on a disk that holds its own session
	 * continues it (one forked before its first turn starts afresh) */
	r->from.session = !r->from.start && rec.session_at &&
			  rec.session_at <= (r->from.at ? r->from.at : r->from.offset);
	r->plan.resume = r->from.session && !r->from.memory_bytes;
	/* its grants as they were at the point it continues from */
	sb_history_grants_apply(&rec, rec.offset_at ? rec.offset_at : rec.from_offset,
			    &r->plan.net);
	if (r->from.memory_bytes) {
		r->from.exact =
		    rec.changed_after == 0; /* its processes go on: nothing rolled */
	} else {
		if ((rc = roll_forward(r, &rec))) {
			r->create.rc = rc;
			goto out;
		}
		r->from.exact = !r->from.roll.omitted && !rec.files_over;
	}
	if (r->from.prompt) {
		free(r->plan.prompt);
		if (!(r->plan.prompt = strdup(r->from.prompt))) {
			r->create.rc = SB_ERR_NOMEM;
			goto out;
		}
	}
	if (!r->from.resume) /* its own name, else its id as a new run's */
		snprintf(r->plan.name, sizeof r->plan.name, "%s",
			 r->from.name[0] ? r->from.name : r->id);
	if (!r->from.resume && r->from.group[0])
		snprintf(r->plan.group, sizeof r->plan.group, "%s", r->from.group);
	if ((rc = pack_from(r, &fb, &fev))) {
		r->create.rc = rc;
		goto out;
	}
	if ((rc = sb_runs_fits_ever(rs, &r->plan))) {
		r->create.rc = rc;
		goto out;
	}
	if (!sb_run_admit(r)) {
		/* it waits: recorded now, its machine made in its turn */
		if ((rc = sb_run_record_queued(r, &fev))) {
			r->create.rc = rc;
			goto out;
		}
		r->create.recorded = 1;
		next = sb_run_queued_done;
		goto out;
	}
	/* the machine first: a snapshot that is gone or broken changes no
	 * record; then the guest's SPEC (its NIC is the machine's) */
	if ((rc = sb_run_machine_make(r))) {
		r->create.rc = rc;
		goto out;
	}
	rc = r->from.resume ? sb_log_append(rs->env.log, &fev, 1)
		       : sb_runs_record_plan(rs, &r->plan, &fev, 1);
	if (rc) {
		r->create.rc = rc;
		snprintf(r->create.err, sizeof r->create.err, "%s", sb_errmsg(rc));
		r->runner->ops->discard(r->m); /* its own errors are not this one */
		r->m = NULL;
		goto out;
	}
	r->create.recorded = 1;
out:
	if (r->create.rc && !r->create.err[0])
		snprintf(r->create.err, sizeof r->create.err, "%s",
			 sb_errmsg(r->create.rc));
	sb_history_free(&rec);
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&fb);
	sb_loop_post(rs->env.loop, &r->create.post, next, r);
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
 * projections caught up: r->from.snap as asked, or ("") the newest at or
 * before r->from.at; then r->from.snap, from_layer, from_offset, at,
 * memory_bytes and (a resume) spent are the snapshot's. Errors:
 * SB_ERR_NOTFOUND (no such run or snapshot), SB_ERR_STATE (a resume of a
 * run its record says is live, or a run removed), SB_ERR_CORRUPT, the
 * projections'. */
/* Sets r's point from rp, the snapshot found (snapshot: the id asked
 * for, or NULL; at: the offset asked for, UINT64_MAX: none; last: the
 * run's last offset). */
static int point_set(struct run *r, const struct sb_resume_point *rp,
		     const char *snapshot, uint64_t at, uint64_t last)
{
	snprintf(r->from.snap, sizeof r->from.snap, "%s", rp->snapshot);
	snprintf(r->from.layer_name, sizeof r->from.layer_name, "%s", rp->layer);
	if (!snapshot_layer(rp->snapshot, &r->from.layer))
		return sb_seterr(SB_ERR_CORRUPT, "run %s: snapshot id '%s' is malformed",
				 r->from.run, rp->snapshot);
	r->from.offset = rp->offset;
	/* a memory snapshot asked for by id (or at its very offset) is
	 * continued with its processes, by a resume or a fork */
	if (!strcmp(rp->kind, "memory") && (snapshot || at == rp->offset))
		r->from.memory_bytes = rp->memory_bytes;
	/* the offset continued from: the one asked for, else the snapshot's */
	r->from.at = snapshot || at == UINT64_MAX ? rp->offset : at;
	if (at == UINT64_MAX && !snapshot)
		r->from.at = last;
	return SB_OK;
}

static int from_point(struct run *r)
{
	struct sb_runs *rs = r->rs;
	char want[sizeof r->from.snap];
	const char *snapshot;
	uint64_t at = r->from.at;
	struct sb_runstate st;
	struct sb_resume_point rp;
	struct point_ctx pc = {NULL, at, &rp, 0};
	struct sb_cost cost = {0};
	int rc;

	memcpy(want, r->from.snap, sizeof want);
	pc.snapshot = snapshot = want[0] ? want : NULL;
	sb_projector_catch_up(rs->env.proj, NULL);
	if ((rc = sb_runstate_get(rs->env.proj, r->from.run, &st)))
		return rc;
	if (st.removed)
		return sb_seterr(SB_ERR_STATE,
				 "run %s was removed: its disk and snapshots are gone",
				 r->from.run);
	if (r->from.rerun && at > st.last_offset)
		return sb_seterr(SB_ERR_INVAL,
				 "offset %llu is past run %s's last event (at %llu)",
				 (unsigned long long)at, r->from.run,
				 (unsigned long long)st.last_offset);
	if (r->from.resume && sb_runstate_is_live(&st))
		return sb_seterr(SB_ERR_STATE, "run %s is still running: fork it instead",
				 r->from.run);
	if ((rc = sb_resume_each(rs->env.proj, r->from.run, point_cb, &pc)) < 0)
		return rc;
	if (pc.found) {
		if ((rc = point_set(r, &rp, snapshot, at, st.last_offset)))
			return rc;
	} else if (!snapshot && at != UINT64_MAX) {
		/* before its first snapshot: its start (the template and its
		 * inputs) and the record from there; r->from.at stays at */
		r->from.start = 1;
		r->from.snap[0] = 0;
		r->from.offset = 0;
	} else {
		return snapshot ? sb_seterr(SB_ERR_NOTFOUND, "run %s has no snapshot %s",
					    r->from.run, snapshot)
				: sb_seterr(SB_ERR_NOTFOUND, "run %s has no snapshot",
					    r->from.run);
	}
	if (r->from.resume) {
		sb_costs_get(rs->env.proj, "run", r->from.run, &cost);
		r->from.spent = cost.cost_nusd; /* the budget goes on */
		r->from.budget_stopped = !strcmp(st.status, "budget");
	}
	return SB_OK;
}

int sb_runs_from(struct sb_runs *rs, const struct sb_runs_from *f, sb_runs_created_fn cb,
		 void *ctx)
{
	struct run *r;
	unsigned char raw[SB_RUN_ID_LEN / 2];
	int rc;

	if (f->resume && sb_runs_find(rs, f->run))
		return sb_seterr(SB_ERR_STATE, "run %s is still running: fork it instead",
				 f->run);
	if (!(r = calloc(1, sizeof *r)))
		return SB_ERR_NOMEM;
	r->rs = rs;
	r->st = SB_RUN_CREATING;
	r->from.on = 1;
	r->from.resume = f->resume;
	snprintf(r->from.run, sizeof r->from.run, "%s", f->run);
	/* what is asked for, until from_point finds it */
	snprintf(r->from.snap, sizeof r->from.snap, "%s", f->snapshot ? f->snapshot : "");
	r->from.at = f->at; /* a re-run's 0: from the run's start */
	r->from.rerun = f->rerun;
	r->from.budget_nusd = f->budget_nusd;
	if (f->rerun)
		r->from.snap[0] = 0;
	if (f->prompt && !(r->from.prompt = strdup(f->prompt))) {
		free(r);
		return SB_ERR_NOMEM;
	}
	snprintf(r->from.name, sizeof r->from.name, "%s", f->name ? f->name : "");
	snprintf(r->from.group, sizeof r->from.group, "%s", f->group ? f->group : "");
	snprintf(r->from.runner, sizeof r->from.runner, "%s", f->runner ? f->runner : "");
	if (f->resume) {
		snprintf(r->id, sizeof r->id, "%s", f->run);
	} else {
		randombytes_buf(raw, sizeof raw);
		sodium_bin2hex(r->id, sizeof r->id, raw, sizeof raw);
	}
	r->create.cb = cb;
	r->create.ctx = ctx;
	msgpack_sbuffer_init(&r->spec);
	if ((rc = sb_work_submit(rs->env.jobs, from_job, r))) {
		free(r->from.prompt);
		free(r);
		return rc;
	}
	sb_run_link(r);
	return SB_OK;
}
