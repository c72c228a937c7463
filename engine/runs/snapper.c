/* snapper.c - when a run's snapshots are taken, and how (see snapper.h). */
#include "engine/runs/snapper.h"

#include <stdio.h>
#include <stdlib.h>

#include "engine/error.h"

enum snap_kind { K_DEMAND, K_TURN, K_FINAL, K_MERGE };

struct req {
	enum snap_kind kind;
	int memory;
	unsigned layer; /* K_MERGE: the layer that goes */
	sb_snap_fn cb;
	void *ctx;
	struct req *next;
};

enum snap_state { S_IDLE, S_SYNCING, S_TAKING };

/* A read of the run's disk waiting for the guest to write its files out:
 * SYNC id (READ_SYNC set: never a snapshot's), answered by SYNCED or by
 * its timer. */
#define READ_SYNC (1ull << 62)
struct read_sync {
	uint64_t id;
	sb_watch *timer;
	sb_sync_fn cb;
	void *ctx;
	struct read_sync *next;
	struct sb_snapper *s;
};

struct sb_snapper {
	struct sb_snapper_env env;
	sb_machine *m;
	sb_guest *g;
	struct req *head, *cur;
	enum snap_state st;
	uint64_t sync_id;
	int synced, frozen;
	int thaw; /* the guest was asked to freeze: THAW once the snapshot is over */
	double t_sync, sync_ms; /* SYNC sent (loop time), and the wait for it */
	int ended; /* the final snapshot is asked for: no more automatic ones */
	double last_auto;
	sb_watch *kick_w; /* wakes kick on the loop, made with s */
	sb_watch *sync_w, *turn_w;
	struct read_sync *reads; /* reads waiting for their SYNCED */
	uint64_t read_id;
};

static void kick(sb_snapper *s);

static void on_kick(void *ctx)
{
	kick(ctx);
}

int sb_snapper_open(const struct sb_snapper_env *env, sb_snapper **out)
{
	sb_snapper *s = calloc(1, sizeof *s);

	if (!s)
		return SB_ERR_NOMEM;
	s->env = *env;
	s->last_auto = -1e9;
	if (!(s->kick_w = sb_loop_async(env->loop, on_kick, s))) {
		free(s);
		return SB_ERR_NOMEM;
	}
	*out = s;
	return SB_OK;
}

void sb_snapper_set(sb_snapper *s, sb_machine *m, sb_guest *g)
{
	s->m = m;
	s->g = g;
}

/* Runs kick from the loop soon (callbacks never run inside a caller's
 * call); calls before it runs make one. */
static void kick_later(sb_snapper *s)
{
	sb_watch_wake(s->kick_w);
}

static void enqueue(sb_snapper *s, struct req *r)
{
	struct req **p = &s->head;

	while (*p)
		p = &(*p)->next;
	*p = r;
	kick_later(s);
}

/* The current snapshot ended with rc (id valid when rc is SB_OK). The
 * callback comes last: it may free s (a run's end frees its snapper). */
static void finish(sb_snapper *s, int rc, const char *id)
{
	struct req *r = s->cur;
	sb_snap_fn cb = r->cb;
	void *ctx = r->ctx;
	char line[600], copy[16] = "";

	s->cur = NULL;
	s->st = S_IDLE;
	if (s->thaw && s->g) /* the original goes on, whether the copy was made */
		sb_guest_thaw(s->g);
	s->thaw = 0;
	if (id)
		snprintf(copy, sizeof copy, "%s", id);
	free(r);
	if (s->head)
		kick_later(s);
	if (cb) {
		cb(ctx, rc, id ? copy : NULL);
	} else if (rc && s->env.warn) {
		snprintf(line, sizeof line, "automatic snapshot failed: %s",
			 sb_errmsg(rc));
		s->env.warn(s->env.ctx, line);
	}
}

static void on_taken(void *ctx, int rc, const struct sb_snapshot_info *info)
{
	sb_snapper *s = ctx;
	struct sb_snap_done d;
	char id[16] = "";

	if (rc == SB_OK) {
		d.info = info;
		d.kind = info->memory_bytes ? "memory" : "disk";
		d.trigger = s->cur->kind == K_DEMAND ? "demand"
			    : s->cur->kind == K_TURN ? "turn"
						     : "end";
		d.synced = s->synced;
		d.frozen = s->frozen;
		d.sync_ms = s->sync_ms;
		snprintf(id, sizeof id, "s%u", info->layer);
		rc = s->env.saved(s->env.ctx, &d);
	}
	finish(s, rc, id);
}

/* The guest answered (synced 1) or its time is up: the snapshot itself. */
static void take(sb_snapper *s, int synced, int frozen)
{
	struct sb_snapshot_req q = {.memory = s->cur->memory};
	int rc;

	s->sync_ms =
	    s->st == S_SYNCING ? (sb_loop_now(s->env.loop) - s->t_sync) * 1000 : 0;
	sb_watch_stop(s->sync_w);
	s->sync_w = NULL;
	s->synced = synced;
	s->frozen = frozen;
	s->st = S_TAKING;
	if (!s->m)
		rc = sb_seterr(SB_ERR_STATE, "the run has no machine");
	else
		rc = s->env.runner->snapshot(s->m, &q, on_taken, s);
	if (rc)
		finish(s, rc, NULL);
}

static void on_merged(void *ctx, int rc, const struct sb_snapshot_info *info)
{
	sb_snapper *s = ctx;
	char id[16] = "";

	(void)info;
	snprintf(id, sizeof id, "s%u", s->cur->layer);
	finish(s, rc, id);
}

static void on_sync_timeout(void *ctx)
{
	take(ctx, 0, 0); /* the guest did not answer: its disk as it is */
}

static void kick(sb_snapper *s)
{
	if (s->st != S_IDLE || !s->head)
		return;
	s->cur = s->head;
	s->head = s->cur->next;
	if (s->cur->kind == K_TURN)
		s->last_auto = sb_loop_now(s->env.loop);
	if (s->cur->kind == K_MERGE) {
		int rc;
		s->st = S_TAKING;
		rc = s->m ? s->env.runner->merge(s->m, s->cur->layer, on_merged, s)
			  : sb_seterr(SB_ERR_STATE, "the run has no machine");
		if (rc)
			finish(s, rc, NULL);
		return;
	}
	if (s->cur->kind == K_FINAL || !s->g || !sb_guest_connected(s->g)) {
		take(s, s->cur->kind == K_FINAL, 0);
		return;
	}
	s->st = S_SYNCING;
	s->t_sync = sb_loop_now(s->env.loop);
	s->thaw = s->cur->memory;
	sb_guest_sync(s->g, ++s->sync_id, s->cur->memory);
	s->sync_w = sb_loop_timer(s->env.loop, SB_SNAP_SYNC_S, 0, on_sync_timeout, s);
	if (!s->sync_w)
		take(s, 0, 0);
}

/* Answers the read waiting for SYNC id (if one does) with rc. */
static void read_done(sb_snapper *s, uint64_t id, int rc)
{
	struct read_sync **p = &s->reads, *q;

	while (*p && (*p)->id != id)
		p = &(*p)->next;
	if (!(q = *p))
		return;
	*p = q->next;
	sb_watch_stop(q->timer);
	q->cb(q->ctx, rc);
	free(q);
}

static void on_read_timeout(void *ctx)
{
	struct read_sync *q = ctx;

	read_done(q->s, q->id,
		  sb_seterr(SB_ERR_TIMEOUT, "the guest did not write its files out within %.0f s",
			    SB_SNAP_SYNC_S));
}

int sb_snapper_sync(sb_snapper *s, sb_sync_fn cb, void *ctx)
{
	struct read_sync *q;

	if (!s->g || !sb_guest_connected(s->g))
		return sb_seterr(SB_ERR_STATE, "the run's guest is not connected");
	if (!(q = calloc(1, sizeof *q)))
		return SB_ERR_NOMEM;
	q->id = READ_SYNC | ++s->read_id;
	q->cb = cb;
	q->ctx = ctx;
	q->s = s;
	if (!(q->timer = sb_loop_timer(s->env.loop, SB_SNAP_SYNC_S, 0, on_read_timeout, q))) {
		free(q);
		return SB_ERR_NOMEM;
	}
	q->next = s->reads;
	s->reads = q;
	sb_guest_sync(s->g, q->id, 0);
	return SB_OK;
}

void sb_snapper_flush(sb_snapper *s)
{
	if (s->g && sb_guest_connected(s->g))
		sb_guest_sync(s->g, READ_SYNC | ++s->read_id, 0); /* its SYNCED: no waiter */
}

void sb_snapper_synced(sb_snapper *s, uint64_t id, int frozen)
{
	if (id & READ_SYNC)
		read_done(s, id, SB_OK);
	else if (s->st == S_SYNCING && id == s->sync_id)
		take(s, 1, frozen && s->cur->memory);
}

static struct req *req_new(enum snap_kind kind, int memory, sb_snap_fn cb, void *ctx)
{
	struct req *r = calloc(1, sizeof *r);

	if (r) {
		r->kind = kind;
		r->memory = memory;
		r->cb = cb;
		r->ctx = ctx;
	}
	return r;
}

int sb_snapper_take(sb_snapper *s, int memory, sb_snap_fn cb, void *ctx)
{
	struct req *r;

	if (!s->m || s->ended)
		return sb_seterr(SB_ERR_STATE, "the run is not running");
	if (!(r = req_new(K_DEMAND, memory, cb, ctx)))
		return SB_ERR_NOMEM;
	enqueue(s, r);
	return SB_OK;
}

int sb_snapper_merge(sb_snapper *s, unsigned layer, sb_snap_fn cb, void *ctx)
{
	struct req *r;

	if (!s->m || s->ended)
		return sb_seterr(SB_ERR_STATE, "the run is not running");
	for (r = s->head; r; r = r->next)
		if (r->kind == K_MERGE)
			return sb_seterr(SB_ERR_STATE, "a merge waits already");
	if (s->cur && s->cur->kind == K_MERGE)
		return sb_seterr(SB_ERR_STATE, "a merge is under way");
	if (!(r = req_new(K_MERGE, 0, cb, ctx)))
		return SB_ERR_NOMEM;
	r->layer = layer;
	enqueue(s, r);
	return SB_OK;
}

/* 1 when an automatic snapshot waits in the queue. */
static int turn_queued(const sb_snapper *s)
{
	for (const struct req *r = s->head; r; r = r->next)
		if (r->kind == K_TURN)
			return 1;
	return 0;
}

static void on_turn_due(void *ctx)
{
	sb_snapper *s = ctx;
	struct req *r;

	sb_watch_stop(s->turn_w);
	s->turn_w = NULL;
	if (!s->ended && !turn_queued(s) && (r = req_new(K_TURN, 0, NULL, NULL)))
		enqueue(s, r);
}

void sb_snapper_turn(sb_snapper *s)
{
	double wait;

	if (s->ended || s->turn_w || turn_queued(s))
		return; /* one is coming: this turn is in it */
	wait = s->last_auto + s->env.min_interval_s - sb_loop_now(s->env.loop);
	if (s->cur && s->cur->kind == K_TURN && wait < s->env.min_interval_s)
		wait =
		    s->env.min_interval_s; /* the one being taken may predate the turn */
	/* out of memory (NULL): this turn gets no automatic snapshot */
	s->turn_w = sb_loop_timer(s->env.loop, wait > 0 ? wait : 0, 0, on_turn_due, s);
}

int sb_snapper_busy(const sb_snapper *s)
{
	return s->st != S_IDLE || s->head || s->turn_w;
}

/* Answers and frees every waiting demand (and merge) with rc; drops
 * automatic ones, and the final one unanswered when closing (its run is
 * being freed). */
static void drain(sb_snapper *s, int rc, const char *why, int closing)
{
	struct req *r;

	while ((r = s->head)) {
		s->head = r->next;
		if (r->cb && !(closing && r->kind == K_FINAL))
			r->cb(r->ctx, sb_seterr(rc, "%s", why), NULL);
		free(r);
	}
}

int sb_snapper_final(sb_snapper *s, sb_snap_fn cb, void *ctx)
{
	struct req *r = req_new(K_FINAL, 0, cb, ctx);

	if (!r)
		return SB_ERR_NOMEM;
	s->ended = 1;
	sb_watch_stop(s->turn_w);
	s->turn_w = NULL;
	if (s->st == S_SYNCING) {
		/* the guest is gone: no live snapshot of it */
		sb_watch_stop(s->sync_w);
		s->sync_w = NULL;
		finish(s,
		       sb_seterr(SB_ERR_STATE,
				 "the run ended before its snapshot was taken"),
		       NULL);
	}
	drain(s, SB_ERR_STATE, "the run ended before its snapshot was taken", 0);
	s->head = r;
	kick_later(s);
	return SB_OK;
}

void sb_snapper_close(sb_snapper *s)
{
	if (!s)
		return;
	sb_watch_stop(s->kick_w);
	sb_watch_stop(s->sync_w);
	sb_watch_stop(s->turn_w);
	if (s->cur) {
		s->cur->next = s->head;
		s->head = s->cur;
		s->cur = NULL;
	}
	drain(s, SB_ERR_STATE, "the run ended before its snapshot was taken", 1);
	while (s->reads) /* its disk is as the guest left it: read it */
		read_done(s, s->reads->id, SB_OK);
	free(s);
}
