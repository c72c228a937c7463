/* queue.c - each runner's capacity for runs, and the queue of runs
 * waiting for it (see run.h).
 *
 * A run holds its plan's vCPUs and memory on its runner from its
 * admission to its end. Each runner says what its runs may hold at once
 * (its capacity op, asked as the manager opens; the local runner's is the
 * settings' or the host's). A run that does not fit its runner waits in
 * that runner's queue (run.queued) and starts, oldest first, as the
 * runner's runs end; none passes another on its runner, so a big run is
 * not starved by small ones, and a run never waits for another runner's
 * capacity. The queue keeps the accounts only: a run admitted from it is
 * started by the lifecycle (rs->start_admitted), which this file does not
 * call otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "engine/mpack.h"
#include "engine/runs/run.h"

int sb_runs_capacity_init(struct sb_runs *rs)
{
	if (!(rs->caps = calloc(rs->env.nrunners, sizeof *rs->caps)))
		return SB_ERR_NOMEM;
	for (size_t i = 0; i < rs->env.nrunners; i++) {
		const struct sb_runner *rn = &rs->env.runners[i];
		struct sb_runs_cap *c = &rs->caps[i];

		c->cpus = c->memory_mib = UINT64_MAX; /* no op: no limit of its own */
		if (rn->ops->capacity)
			rn->ops->capacity(rn->ctx, &c->cpus, &c->memory_mib);
	}
	return SB_OK;
}

void sb_runs_capacity_free(struct sb_runs *rs)
{
	free(rs->caps);
	rs->caps = NULL;
}

/* The capacity of r's runner (r->runner is set: r has a plan). */
static struct sb_runs_cap *cap_of(const struct run *r)
{
	return &r->rs->caps[r->runner - r->rs->env.runners];
}

int sb_runs_fits_ever(struct sb_runs *rs, const struct sb_plan *p)
{
	const struct sb_runs_cap *c = NULL;
	int local = !strcmp(p->runner, "local"); /* its settings raise it */

	for (size_t i = 0; i < rs->env.nrunners && !c; i++)
		if (!strcmp(rs->env.runners[i].name, p->runner))
			c = &rs->caps[i];
	if (!c)
		return sb_seterr(SB_ERR_INVAL, "no runner '%s' here", p->runner);
	if (p->cpus > c->cpus)
		return sb_seterr(SB_ERR_INVAL,
				 "the run asks for %llu vCPUs; runner %s gives runs %llu%s",
				 (unsigned long long)p->cpus, p->runner,
				 (unsigned long long)c->cpus,
				 local ? " (runs.capacity_cpus)" : "");
	if (p->memory_mib > c->memory_mib)
		return sb_seterr(SB_ERR_INVAL,
				 "the run asks for %llu MiB of memory; runner %s gives runs "
				 "%llu MiB%s",
				 (unsigned long long)p->memory_mib, p->runner,
				 (unsigned long long)c->memory_mib,
				 local ? " (runs.capacity_memory_mib)" : "");
	return SB_OK;
}

/* 1 when p fits what c has left (cap_mu held). */
static int fits_locked(const struct sb_runs_cap *c, const struct sb_plan *p)
{
	return c->used_cpus + p->cpus <= c->cpus &&
	       c->used_memory_mib + p->memory_mib <= c->memory_mib;
}

/* r takes its share of its runner's capacity (cap_mu held). */
static void take_locked(struct run *r)
{
	struct sb_runs_cap *c = cap_of(r);

	c->used_cpus += r->plan.cpus;
	c->used_memory_mib += r->plan.memory_mib;
	r->admitted = 1;
}

int sb_run_admit(struct run *r)
{
	struct sb_runs *rs = r->rs;
	const struct sb_runs_cap *c = cap_of(r);
	int ok;

	pthread_mutex_lock(&rs->cap_mu);
	ok = !c->queue && fits_locked(c, &r->plan);
	if (ok)
		take_locked(r);
	pthread_mutex_unlock(&rs->cap_mu);
	return ok;
}

/* Takes the oldest run of c's queue out when it fits now, admitted, or
 * returns NULL (cap_mu held). */
static struct run *pop_locked(struct sb_runs_cap *c)
{
	struct run *r = c->queue;

	if (!r || !fits_locked(c, &r->plan))
		return NULL;
	c->queue = r->qnext;
	c->nqueued--;
	r->qnext = NULL;
	take_locked(r);
	return r;
}

void sb_runs_pump(struct sb_runs *rs)
{
	for (size_t i = 0; i < rs->env.nrunners; i++) {
		while (!rs->pump_held) {
			struct run *r;

			pthread_mutex_lock(&rs->cap_mu);
			r = pop_locked(&rs->caps[i]);
			pthread_mutex_unlock(&rs->cap_mu);
			if (!r)
				break;
			rs->start_admitted(r);
		}
	}
}

void sb_run_hold(struct run *r)
{
	pthread_mutex_lock(&r->rs->cap_mu);
	if (!r->admitted)
		take_locked(r);
	pthread_mutex_unlock(&r->rs->cap_mu);
}

void sb_run_release(struct run *r)
{
	struct sb_runs *rs = r->rs;

	pthread_mutex_lock(&rs->cap_mu);
	if (r->admitted) {
		struct sb_runs_cap *c = cap_of(r);

		c->used_cpus -= r->plan.cpus;
		c->used_memory_mib -= r->plan.memory_mib;
		r->admitted = 0;
	}
	pthread_mutex_unlock(&rs->cap_mu);
	sb_runs_pump(rs);
}

void sb_runs_enqueue(struct run *r)
{
	struct sb_runs *rs = r->rs;
	struct sb_runs_cap *c = cap_of(r);
	struct run **p;

	pthread_mutex_lock(&rs->cap_mu);
	for (p = &c->queue; *p && (*p)->queued_offset <= r->queued_offset; p = &(*p)->qnext)
		;
	r->qnext = *p;
	*p = r;
	c->nqueued++;
	r->st = SB_RUN_QUEUED;
	pthread_mutex_unlock(&rs->cap_mu);
	sb_runs_pump(rs);
}

void sb_runs_dequeue(struct run *r)
{
	struct sb_runs *rs = r->rs;

	if (!r->runner)
		return; /* no plan: never queued */
	pthread_mutex_lock(&rs->cap_mu);
	for (struct run **p = &cap_of(r)->queue; *p; p = &(*p)->qnext) {
		if (*p == r) {
			*p = r->qnext;
			r->qnext = NULL;
			cap_of(r)->nqueued--;
			break;
		}
	}
	pthread_mutex_unlock(&rs->cap_mu);
}

size_t sb_runs_capacity_read(struct sb_runs *rs, struct sb_runs_capacity *out, size_t cap)
{
	pthread_mutex_lock(&rs->cap_mu);
	for (size_t i = 0; i < rs->env.nrunners && i < cap; i++) {
		const struct sb_runs_cap *c = &rs->caps[i];

		out[i] = (struct sb_runs_capacity){
		    .name = rs->env.runners[i].name,
		    .cpus = c->cpus,
		    .memory_mib = c->memory_mib,
		    .used_cpus = c->used_cpus,
		    .used_memory_mib = c->used_memory_mib,
		    .queued = c->nqueued,
		};
	}
	pthread_mutex_unlock(&rs->cap_mu);
	return rs->env.nrunners;
}

int sb_run_pack_queued(struct run *r, msgpack_sbuffer *buf, struct sb_event *ev)
{
	msgpack_packer pk;
	size_t ahead;
	sb_mapw m;
	int from = r->from.on, rc;

	pthread_mutex_lock(&r->rs->cap_mu);
	ahead = cap_of(r)->nqueued;
	pthread_mutex_unlock(&r->rs->cap_mu);
	msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	sb_mapw_u64(&m, "cpus", r->plan.cpus);
	sb_mapw_u64(&m, "memory_mib", r->plan.memory_mib);
	sb_mapw_u64(&m, "ahead", ahead);
	if (from) {
		sb_mapw_str(&m, "from_run", r->from.run);
		sb_mapw_u64(&m, "from_layer", r->from.layer);
		sb_mapw_u64(&m, "memory_bytes", r->from.memory_bytes);
		sb_mapw_bool(&m, "from_start", r->from.start);
	}
	if ((rc = sb_mapw_end(&m)))
		return rc;
	return sb_event_init(ev, "run.queued", r->id, SB_SRC_HOST, buf->data, buf->size);
}
