/* queue.c - the host's capacity for runs, and the queue of runs waiting
 * for it (see run.h).
 *
 * A run holds its plan's vCPUs and memory from its admission to its end.
 * The capacity is the settings' (runs.capacity_cpus,
 * runs.capacity_memory_mib), else the host's: vCPUs are overcommitted, as
 * a guest's vCPU is a thread that mostly waits, and memory keeps a reserve
 * for the host. A run that does not fit waits in the queue (run.queued)
 * and starts, oldest first, as runs end; none passes another, so a big
 * run is not starved by small ones. The queue keeps the accounts only: a
 * run admitted from it is started by the lifecycle (rs->start_admitted),
 * which this file does not call otherwise.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/mpack.h"
#include "engine/runs/run.h"

#define SB_RUNS_CPU_OVERCOMMIT	   4
#define SB_RUNS_MEMORY_RESERVE_MIB 1024

void sb_runs_capacity_init(struct sb_runs *rs)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t mib = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page >> 20 : 0;
	uint64_t reserve = mib / 10 > SB_RUNS_MEMORY_RESERVE_MIB ? mib / 10
								   : SB_RUNS_MEMORY_RESERVE_MIB;

	rs->cap_cpus = rs->env.settings->capacity_cpus
			   ? rs->env.settings->capacity_cpus
			   : (uint64_t)(cpus > 0 ? cpus : 1) * SB_RUNS_CPU_OVERCOMMIT;
	rs->cap_memory_mib = rs->env.settings->capacity_memory_mib
				 ? rs->env.settings->capacity_memory_mib
			     : mib > reserve ? mib - reserve
					     : mib;
}

int sb_runs_fits_ever(struct sb_runs *rs, const struct sb_plan *p)
{
	if (p->cpus > rs->cap_cpus)
		return sb_seterr(SB_ERR_INVAL,
				 "the run asks for %llu vCPUs; this host gives runs %llu "
				 "(runs.capacity_cpus)",
				 (unsigned long long)p->cpus, (unsigned long long)rs->cap_cpus);
	if (p->memory_mib > rs->cap_memory_mib)
		return sb_seterr(SB_ERR_INVAL,
				 "the run asks for %llu MiB of memory; this host gives runs "
				 "%llu MiB (runs.capacity_memory_mib)",
				 (unsigned long long)p->memory_mib,
				 (unsigned long long)rs->cap_memory_mib);
	return SB_OK;
}

/* 1 when p fits what rs has left (cap_mu held). */
static int fits_locked(const struct sb_runs *rs, const struct sb_plan *p)
{
	return rs->used_cpus + p->cpus <= rs->cap_cpus &&
	       rs->used_memory_mib + p->memory_mib <= rs->cap_memory_mib;
}

/* r takes its share (cap_mu held). */
static void take_locked(struct run *r)
{
	r->rs->used_cpus += r->plan.cpus;
	r->rs->used_memory_mib += r->plan.memory_mib;
	r->admitted = 1;
}

int sb_run_admit(struct run *r)
{
	struct sb_runs *rs = r->rs;
	int ok;

	pthread_mutex_lock(&rs->cap_mu);
	ok = !rs->queue && fits_locked(rs, &r->plan);
	if (ok)
		take_locked(r);
	pthread_mutex_unlock(&rs->cap_mu);
	return ok;
}

void sb_runs_pump(struct sb_runs *rs)
{
	while (!rs->pump_held) {
		struct run *r;
		pthread_mutex_lock(&rs->cap_mu);
		r = rs->queue;
		if (r && fits_locked(rs, &r->plan)) {
			rs->queue = r->qnext;
			rs->nqueued--;
			r->qnext = NULL;
			take_locked(r);
		} else {
			r = NULL;
		}
		pthread_mutex_unlock(&rs->cap_mu);
		if (!r)
			return;
		rs->start_admitted(r);
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
		rs->used_cpus -= r->plan.cpus;
		rs->used_memory_mib -= r->plan.memory_mib;
		r->admitted = 0;
	}
	pthread_mutex_unlock(&rs->cap_mu);
	sb_runs_pump(rs);
}

void sb_runs_enqueue(struct run *r)
{
	struct sb_runs *rs = r->rs;
	struct run **p;

	pthread_mutex_lock(&rs->cap_mu);
	for (p = &rs->queue; *p && (*p)->queued_offset <= r->queued_offset; p = &(*p)->qnext)
		;
	r->qnext = *p;
	*p = r;
	rs->nqueued++;
	r->st = SB_RUN_QUEUED;
	pthread_mutex_unlock(&rs->cap_mu);
	sb_runs_pump(rs);
}

void sb_runs_dequeue(struct run *r)
{
	struct sb_runs *rs = r->rs;

	pthread_mutex_lock(&rs->cap_mu);
	for (struct run **p = &rs->queue; *p; p = &(*p)->qnext) {
		if (*p == r) {
			*p = r->qnext;
			r->qnext = NULL;
			rs->nqueued--;
			break;
		}
	}
	pthread_mutex_unlock(&rs->cap_mu);
}

int sb_run_pack_queued(struct run *r, msgpack_sbuffer *buf, struct sb_event *ev)
{
	msgpack_packer pk;
	size_t ahead;
	sb_mapw m;
	int from = r->from.on, rc;

	pthread_mutex_lock(&r->rs->cap_mu);
	ahead = r->rs->nqueued;
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
