/* group.c - creating a group of runs at once (see runs.h).
 *
 * The whole group is checked before anything is recorded: its name is no
 * other group's, its runs' names are distinct and no live run's, and each
 * run's plan resolves and fits its runner's capacity. Then group.created is
 * recorded on the group's own stream, and its runs are created one after
 * the other, in the file's order, so they queue in that order.
 */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "engine/mpack.h"
#include "engine/runs/run.h"
#include "engine/spec.h"
#include "projections/views.h"

#define GROUP_RUNS_MAX 256

struct gjob {
	struct sb_runs *rs;
	struct sb_group_req q; /* the caller's, until cb */
	char id[SB_RUN_MAX];
	char (*runs)[SB_RUN_MAX];
	size_t n, done;
	int rc;
	char err[600];
	sb_runs_group_fn cb;
	void *ctx;
	struct sb_post post; /* the check's way back to the loop */
};

static void gjob_finish(struct gjob *g)
{
	int rc = g->rc ? sb_seterr(g->rc, "%s", g->err) : SB_OK;

	g->cb(g->ctx, rc, g->id, g->runs, g->done);
	free(g->runs);
	free(g);
}

/* Fails g with rc and its detail, prefixed (a run of it: "runs[3]: "). */
static void gjob_fail(struct gjob *g, int rc, const char *prefix)
{
	g->rc = rc;
	snprintf(g->err, sizeof g->err, "%s%s", prefix, sb_errmsg(rc));
}

/* Checks a spec of g on a worker: its group and budget are the group's,
 * its plan resolves, its runner is one the daemon has, and it fits that
 * runner's capacity. */
static int spec_check(struct gjob *g, const msgpack_object *spec)
{
	struct sb_runs *rs = g->rs;
	struct sb_plan_ctx pc = {rs->env.home, rs->env.stubs,
				 rs->env.settings->run_record_quota, rs->env.net};
	char group[SB_PLAN_NAME_MAX] = "";
	uint64_t budget = 0;
	const struct sb_runner *runner;
	struct sb_plan p;
	int rc;

	if ((rc = sb_spec_str(spec, "group", group, sizeof group)) ||
	    (rc = sb_spec_u64(spec, "group_budget_nusd", UINT64_MAX / 4, &budget)))
		return rc;
	if (strcmp(group, g->q.name) || budget != g->q.budget_nusd)
		return sb_seterr(SB_ERR_INVAL,
				 "its group and group budget must be the group's");
	memset(&p, 0, sizeof p);
	rc = sb_plan_resolve(&pc, "000000000000", spec, &p);
	if (rc == SB_OK)
		rc = sb_runs_runner(rs, p.runner, &runner);
	if (rc == SB_OK)
		rc = sb_runs_fits_ever(rs, &p);
	sb_plan_free(&p);
	return rc;
}

/* Records group.created of g. */
static int record_created(struct gjob *g)
{
	const msgpack_object *a = g->q.specs;
	msgpack_sbuffer b;
	msgpack_packer pk, *v;
	sb_mapw m;
	struct sb_event ev;
	char name[SB_PLAN_NAME_MAX];
	int rc;

	msgpack_sbuffer_init(&b);
	msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	sb_mapw_str(&m, "name", g->q.name);
	sb_mapw_str(&m, "goal", g->q.goal ? g->q.goal : "");
	sb_mapw_u64(&m, "budget_nusd", g->q.budget_nusd);
	sb_mapw_u64(&m, "planned", a->via.array.size);
	v = sb_mapw_key(&m, "runs");
	msgpack_pack_array(v, a->via.array.size);
	for (uint32_t i = 0; i < a->via.array.size; i++) {
		name[0] = 0;
		sb_spec_str(&a->via.array.ptr[i], "name", name, sizeof name);
		sb_pack_str(v, name);
	}
	rc = sb_mapw_end(&m);
	if (rc == SB_OK)
		rc = sb_event_init(&ev, "group.created", g->id, SB_SRC_HOST, b.data, b.size);
	if (rc == SB_OK)
		rc = sb_log_append(g->rs->env.log, &ev, 1);
	msgpack_sbuffer_destroy(&b);
	return rc;
}

static void group_next(struct gjob *g);

static void group_next_cb(void *ctx)
{
	group_next(ctx);
}

/* On a worker: the whole group checked, then recorded. */
static void check_job(void *ctx)
{
	struct gjob *g = ctx;
	struct sb_group old;
	char prefix[96];
	int rc;

	sb_clearerr();
	if ((rc = sb_projector_catch_up(g->rs->env.proj, NULL))) {
		gjob_fail(g, rc, "");
		goto out;
	}
	if (sb_group_get(g->rs->env.proj, g->q.name, &old) == SB_OK) {
		gjob_fail(g, sb_seterr(SB_ERR_EXISTS,
				       "group %s exists (%llu runs): give this one another "
				       "name",
				       g->q.name, (unsigned long long)old.runs),
			  "");
		goto out;
	}
	for (uint32_t i = 0; i < g->q.specs->via.array.size; i++) {
		if ((rc = spec_check(g, &g->q.specs->via.array.ptr[i]))) {
			snprintf(prefix, sizeof prefix, "runs[%u]: ", i);
			gjob_fail(g, rc, prefix);
			goto out;
		}
	}
	if ((rc = record_created(g)))
		gjob_fail(g, rc, "cannot record the group: ");
out:
	sb_loop_post(g->rs->env.loop, &g->post, group_next_cb, g);
}

static void one_created(void *ctx, int rc, const char *run)
{
	struct gjob *g = ctx;
	char prefix[96];

	if (rc) {
		snprintf(prefix, sizeof prefix, "runs[%zu]: ", g->done);
		gjob_fail(g, rc, prefix);
		gjob_finish(g);
		return;
	}
	snprintf(g->runs[g->done++], SB_RUN_MAX, "%s", run);
	group_next(g);
}

/* On the loop: creates the group's next run, or answers. */
static void group_next(struct gjob *g)
{
	int rc;

	if (g->rc || g->done == g->n) {
		gjob_finish(g);
		return;
	}
	if ((rc = sb_runs_create(g->rs, &g->q.specs->via.array.ptr[g->done], one_created,
				 g)))
		one_created(g, rc, NULL);
}

/* The names of specs: each given, distinct, and no live run's. */
static int names_check(struct sb_runs *rs, const msgpack_object *a)
{
	char name[SB_PLAN_NAME_MAX], other[SB_PLAN_NAME_MAX];
	int rc;

	for (uint32_t i = 0; i < a->via.array.size; i++) {
		const msgpack_object *s = &a->via.array.ptr[i];
		struct run *holder;
		name[0] = 0;
		if (s->type != MSGPACK_OBJECT_MAP)
			return sb_seterr(SB_ERR_INVAL, "runs[%u]: not a map", i);
		if ((rc = sb_spec_name(s, "name", name, sizeof name)))
			return sb_seterr(rc, "runs[%u]: %s", i, sb_errmsg(rc));
		if (!name[0])
			return sb_seterr(SB_ERR_INVAL, "runs[%u]: a run of a group needs a name", i);
		for (uint32_t k = 0; k < i; k++) {
			other[0] = 0;
			sb_spec_str(&a->via.array.ptr[k], "name", other, sizeof other);
			if (!strcmp(name, other))
				return sb_seterr(SB_ERR_INVAL, "runs[%u]: the name %s is runs[%u]'s too",
						 i, name, k);
		}
		for (holder = rs->live; holder; holder = holder->next)
			if (!strcmp(holder->plan.name, name))
				return sb_seterr(SB_ERR_EXISTS,
						 "runs[%u]: the name %s is taken by run %s, which is live",
						 i, name, holder->id);
	}
	return SB_OK;
}

int sb_runs_group_create(struct sb_runs *rs, const struct sb_group_req *q,
			 sb_runs_group_fn cb, void *ctx)
{
	const msgpack_object *a = q->specs;
	unsigned char raw[5];
	struct gjob *g;
	int rc;

	if (!q->name || !q->name[0] || strlen(q->name) >= SB_PLAN_NAME_MAX)
		return sb_seterr(SB_ERR_INVAL, "a group needs a name of 1 to %d bytes",
				 SB_PLAN_NAME_MAX - 1);
	if (!a || a->type != MSGPACK_OBJECT_ARRAY || !a->via.array.size ||
	    a->via.array.size > GROUP_RUNS_MAX)
		return sb_seterr(SB_ERR_INVAL, "a group has 1 to %d runs", GROUP_RUNS_MAX);
	if ((rc = names_check(rs, a)))
		return rc;
	if (!(g = calloc(1, sizeof *g)) || !(g->runs = calloc(a->via.array.size, SB_RUN_MAX))) {
		free(g);
		return SB_ERR_NOMEM;
	}
	g->rs = rs;
	g->q = *q;
	g->n = a->via.array.size;
	g->cb = cb;
	g->ctx = ctx;
	randombytes_buf(raw, sizeof raw);
	memcpy(g->id, "g-", 2);
	sodium_bin2hex(g->id + 2, sizeof g->id - 2, raw, sizeof raw);
	if ((rc = sb_work_submit(rs->env.jobs, check_job, g))) {
		free(g->runs);
		free(g);
	}
	return rc;
}

/* --- a group forked: every run of one group, as a new group --- */

struct fjob {
	struct sb_runs *rs;
	char src[SB_PLAN_NAME_MAX], name[SB_PLAN_NAME_MAX];
	struct sb_group from;		/* src, as its projection has it */
	char (*runs)[SB_RUN_MAX];	/* src's runs, in order */
	char (*names)[SB_PLAN_NAME_MAX]; /* their names */
	char (*forks)[SB_RUN_MAX];	/* the forks made */
	size_t n, done;
	char id[SB_RUN_MAX];
	int rc;
	char err[600];
	sb_runs_group_fn cb;
	void *ctx;
	struct sb_post post; /* the read's way back to the loop */
};

static void fjob_finish(struct fjob *f)
{
	int rc = f->rc ? sb_seterr(f->rc, "%s", f->err) : SB_OK;

	f->cb(f->ctx, rc, f->id, f->forks, f->done);
	free(f->runs);
	free(f->names);
	free(f->forks);
	free(f);
}

static void fjob_fail(struct fjob *f, int rc, const char *prefix)
{
	f->rc = rc;
	snprintf(f->err, sizeof f->err, "%s%s", prefix, sb_errmsg(rc));
}

/* Records group.created of the fork f. */
static int fork_record(struct fjob *f)
{
	msgpack_sbuffer b;
	msgpack_packer pk, *v;
	sb_mapw m;
	struct sb_event ev;
	int rc;

	msgpack_sbuffer_init(&b);
	msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	sb_mapw_str(&m, "name", f->name);
	sb_mapw_str(&m, "goal", f->from.goal);
	sb_mapw_u64(&m, "budget_nusd", f->from.budget_nusd);
	sb_mapw_u64(&m, "planned", f->n);
	sb_mapw_str(&m, "forked_from", f->src);
	v = sb_mapw_key(&m, "runs");
	msgpack_pack_array(v, f->n);
	for (size_t i = 0; i < f->n; i++)
		sb_pack_str(v, f->names[i]);
	rc = sb_mapw_end(&m);
	if (rc == SB_OK)
		rc = sb_event_init(&ev, "group.created", f->id, SB_SRC_HOST, b.data, b.size);
	if (rc == SB_OK)
		rc = sb_log_append(f->rs->env.log, &ev, 1);
	msgpack_sbuffer_destroy(&b);
	return rc;
}

/* On a worker: src's runs read, and reads as they end, then recorded. */
static int fork_read(struct fjob *f)
{
	struct sb_group other;
	struct sb_runstate st;
	int rc;

	if ((rc = sb_projector_catch_up(f->rs->env.proj, NULL)) ||
	    (rc = sb_group_get(f->rs->env.proj, f->src, &f->from)))
		return rc;
	if (sb_group_get(f->rs->env.proj, f->name, &other) == SB_OK)
		return sb_seterr(SB_ERR_EXISTS, "group %s exists (%llu runs): give the fork "
						"another name",
				 f->name, (unsigned long long)other.runs);
	if ((rc = sb_group_runs(f->rs->env.proj, f->src, &f->runs, &f->n)))
		return rc;
	if (!f->n)
		return sb_seterr(SB_ERR_INVAL, "group %s has no runs", f->src);
	if (!(f->names = calloc(f->n, sizeof *f->names)) ||
	    !(f->forks = calloc(f->n, sizeof *f->forks)))
		return SB_ERR_NOMEM;
	for (size_t i = 0; i < f->n; i++)
		if (sb_runstate_get(f->rs->env.proj, f->runs[i], &st) == SB_OK)
			snprintf(f->names[i], sizeof f->names[i], "%s", st.name);
	return fork_record(f);
}

static void fork_next(struct fjob *f);

static void fork_next_cb(void *ctx)
{
	fork_next(ctx);
}

static void fork_job(void *ctx)
{
	struct fjob *f = ctx;
	int rc;

	sb_clearerr();
	if ((rc = fork_read(f)))
		fjob_fail(f, rc, "");
	sb_loop_post(f->rs->env.loop, &f->post, fork_next_cb, f);
}

static void fork_one(void *ctx, int rc, const char *run)
{
	struct fjob *f = ctx;
	char prefix[96];

	if (rc) {
		snprintf(prefix, sizeof prefix, "runs[%zu]: ", f->done);
		fjob_fail(f, rc, prefix);
		fjob_finish(f);
		return;
	}
	snprintf(f->forks[f->done++], SB_RUN_MAX, "%s", run);
	fork_next(f);
}

/* On the loop: forks src's next run into the new group, or answers. */
static void fork_next(struct fjob *f)
{
	struct sb_runs_from from = {0};
	const char *name = f->names ? f->names[f->done] : "";
	int rc;

	if (f->rc || f->done == f->n) {
		fjob_finish(f);
		return;
	}
	for (struct run *r = f->rs->live; r && name[0]; r = r->next)
		if (!strcmp(r->plan.name, name))
			name = ""; /* held by a live run: the fork goes by its id */
	from.run = f->runs[f->done];
	from.at = UINT64_MAX;
	from.name = name[0] ? name : NULL;
	from.group = f->name;
	if ((rc = sb_runs_from(f->rs, &from, fork_one, f)))
		fork_one(f, rc, NULL);
}

int sb_runs_group_fork(struct sb_runs *rs, const char *src, const char *name,
		       sb_runs_group_fn cb, void *ctx)
{
	unsigned char raw[5];
	struct fjob *f;
	int rc;

	if (!src[0] || strlen(src) >= SB_PLAN_NAME_MAX || !name[0] ||
	    strlen(name) >= SB_PLAN_NAME_MAX)
		return sb_seterr(SB_ERR_INVAL, "a group's name has 1 to %d bytes",
				 SB_PLAN_NAME_MAX - 1);
	if (!(f = calloc(1, sizeof *f)))
		return SB_ERR_NOMEM;
	f->rs = rs;
	snprintf(f->src, sizeof f->src, "%s", src);
	snprintf(f->name, sizeof f->name, "%s", name);
	f->cb = cb;
	f->ctx = ctx;
	randombytes_buf(raw, sizeof raw);
	memcpy(f->id, "g-", 2);
	sodium_bin2hex(f->id + 2, sizeof f->id - 2, raw, sizeof raw);
	if ((rc = sb_work_submit(rs->env.jobs, fork_job, f)))
		free(f);
	return rc;
}
