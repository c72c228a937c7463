/* snapper.h - when a run's snapshots are taken, and how.
 *
 * A run has one snapper. A snapshot is asked for on demand (a user), after
 * an agent turn (automatic), or once the machine has ended (the disk as it
 * was left). For a live machine the guest agent is asked to write its
 * files out first (SYNC, answered by SYNCED within SB_SNAP_SYNC_S; a guest
 * that does not answer is snapshotted anyway and the snapshot says
 * synced: false), then the runner's snapshot op freezes the disk layer
 * (and saves the memory). Before a memory snapshot the agent also freezes
 * the harness's processes (SYNC's freeze), so that a copy runs none of
 * them before RESTORED gave it its own clock and randomness; the original
 * is sent THAW once the snapshot is over, taken or not. One snapshot at a time: a demand made meanwhile
 * waits its turn; turns are coalesced and rate-limited (at most one
 * automatic snapshot per min_interval_s, whatever the guest reports), so a
 * guest reporting turns in a loop causes no snapshot storm.
 *
 * Everything runs on the daemon's loop.
 */
#ifndef SB_SNAPPER_H
#define SB_SNAPPER_H

#include "engine/loop.h"
#include "engine/runs/guest.h"
#include "engine/runs/runner.h"

#define SB_SNAP_SYNC_S 2.0 /* how long the guest has to answer SYNC */

typedef struct sb_snapper sb_snapper;

/* A snapshot taken, for the record. */
struct sb_snap_done {
	const struct sb_snapshot_info *info;
	const char *kind;    /* "disk" or "memory" */
	const char *trigger; /* "demand", "turn" or "end" */
	int synced;	     /* the guest answered SYNC (always 1 at the end) */
	int frozen;	     /* ... and said its harness was frozen (memory) */
	double sync_ms;	     /* waiting for it, before the runner's part */
};

struct sb_snapper_env {
	sb_loop *loop;
	const struct sb_runner_ops *runner;
	double min_interval_s; /* between automatic snapshots */
	/* Records a snapshot taken; returns 0, or the error recording it
	 * (then the snapshot is not reported as taken). */
	int (*saved)(void *ctx, const struct sb_snap_done *done);
	/* A line for run.warning (an automatic snapshot that failed). */
	void (*warn)(void *ctx, const char *line);
	void *ctx;
};

/* How a snapshot asked for ended: rc SB_OK with the snapshot's id ("sN"),
 * or an error (its detail during the call). */
typedef void (*sb_snap_fn)(void *ctx, int rc, const char *snapshot);

/* Makes a run's snapper for machine m and guest g (both may change with
 * sb_snapper_set), on env->loop's thread. env and ctx must outlive it.
 * Errors: SB_ERR_NOMEM. */
int sb_snapper_open(const struct sb_snapper_env *env, sb_snapper **out);

/* The machine and guest channel snapshots go to (NULL: none now). */
void sb_snapper_set(sb_snapper *s, sb_machine *m, sb_guest *g);

/* Asks for a snapshot (memory: with the memory), answered once through cb
 * on the loop (never inside this call). Errors (cb is then not called):
 * SB_ERR_STATE (no machine), SB_ERR_NOMEM. */
int sb_snapper_take(sb_snapper *s, int memory, sb_snap_fn cb, void *ctx);

/* Merges snapshot s<layer> of the live machine away (the runner's merge
 * op), in turn with the snapshots; cb as for sb_snapper_take. Errors
 * (cb not called): SB_ERR_STATE (no machine, or a merge waits already),
 * SB_ERR_NOMEM. */
int sb_snapper_merge(sb_snapper *s, unsigned layer, sb_snap_fn cb, void *ctx);

/* An agent turn completed: an automatic disk snapshot, at most one per
 * min_interval_s (later turns are folded into the next one). */
void sb_snapper_turn(sb_snapper *s);

/* How a sb_snapper_sync ended: SB_OK once the guest wrote its files out
 * (or the run ended), SB_ERR_TIMEOUT when it did not answer in time. */
typedef void (*sb_sync_fn)(void *ctx, int rc);

/* Has the guest write its files out to its disk (SYNC, no freeze, no
 * snapshot), so that a read of the disk sees what the guest sees; cb is
 * called once on the loop (never inside this call), within
 * SB_SNAP_SYNC_S. Errors (cb not called): SB_ERR_STATE (no guest
 * connected), SB_ERR_NOMEM. */
int sb_snapper_sync(sb_snapper *s, sb_sync_fn cb, void *ctx);

/* Has the guest write its files out (SYNC, no freeze), waiting for no
 * answer: before its machine is ended by force. No guest: nothing. */
void sb_snapper_flush(sb_snapper *s);

/* The guest answered SYNC id (frozen: it froze its harness). */
void sb_snapper_synced(sb_snapper *s, uint64_t id, int frozen);

/* 1 while a snapshot is being taken or waits. */
int sb_snapper_busy(const sb_snapper *s);

/* The machine has ended: the last snapshot (its disk as it was left) is
 * taken once what is under way is done; then cb(ctx, rc, id) is called
 * (rc an error when even that failed). Any automatic snapshot still
 * pending is dropped. Errors (cb not called): SB_ERR_NOMEM. */
int sb_snapper_final(sb_snapper *s, sb_snap_fn cb, void *ctx);

/* Frees s; demands still waiting are answered SB_ERR_STATE ("the run
 * ended"), reads waiting for their SYNCED SB_OK, from inside this call.
 * NULL is fine. */
void sb_snapper_close(sb_snapper *s);

#endif
