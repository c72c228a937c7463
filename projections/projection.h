/* projection.h - projections: pure folds over the event log.
 *
 * A projection is an ops table. Its state is a set of key/value pairs in its
 * own LMDB database ("p.<name>") beside the log; the projector applies each
 * event after the projection's checkpoint and writes the new checkpoint in
 * the same transaction as the state, so every event is applied exactly once,
 * also across a crash. State must depend on the events only (never on the
 * clock or the host), so rebuilding from offset 0 gives identical bytes.
 *
 * projector.c holds the table of projections and folds the log into them;
 * store.c reads and writes their state (sb_proj_get, sb_proj_put,
 * sb_projector_read, sb_projector_digest) and calls no projection.
 */
#ifndef SB_PROJECTION_H
#define SB_PROJECTION_H

#include <lmdb.h>
#include <msgpack.h>
#include <stdint.h>

#include "engine/log/event.h"
#include "engine/log/log.h"

/* A projection's view of one transaction: its database in txn, and the
 * log it folds (to read what the log keeps beside a record, such as its
 * salt, in the same transaction). */
struct sb_proj_txn {
	MDB_txn *txn;
	MDB_dbi dbi;
	sb_log *log;
	void *state; /* the projection's own, for this transaction: NULL at its
		      * start; what it holds is written and freed by end */
};

struct sb_projection {
	const char *name;
	/* The version of its fold: raised whenever apply changes what it makes
	 * of the same events, so that a state folded by an older one is
	 * rebuilt from offset 0 when the projector opens. */
	uint64_t version;
	/* Called on empty state, before the first event (may be NULL). */
	int (*init)(struct sb_proj_txn *t);
	/* Folds one event into the state; payload is the parsed payload map.
	 * An error aborts the whole batch; nothing of it is kept. */
	int (*apply)(struct sb_proj_txn *t, const struct sb_event *ev,
		     const msgpack_object *payload);
	/* Folds one event given its stored record, rec (len bytes, the format
	 * of engine/log/record.h, checksum verified), which ev was decoded
	 * from (ev->payload points into it); valid during the call. A
	 * projection sets apply, apply_record or both (called in that order).
	 * An error aborts the whole batch. */
	int (*apply_record)(struct sb_proj_txn *t, const struct sb_event *ev, const void *rec,
			    size_t len);
	/* May be NULL. Called once at a transaction's end, after its last
	 * apply: keep 1, before the commit: writes what t->state holds
	 * (an error aborts the whole batch); keep 0, the batch is given up:
	 * frees it only. Either way t->state is freed and NULL after. */
	int (*end)(struct sb_proj_txn *t, int keep);
};

/* Reads key into *val (valid until the transaction ends).
 * Errors: SB_ERR_NOTFOUND, SB_ERR_IO. */
int sb_proj_get(struct sb_proj_txn *t, const void *key, size_t klen, MDB_val *val);

/* Writes key = val. Errors: SB_ERR_FULL, SB_ERR_IO. */
int sb_proj_put(struct sb_proj_txn *t, const void *key, size_t klen, const void *val,
		size_t vlen);

typedef struct sb_projector sb_projector;

/* Opens the projector over log with the built-in projections (run state,
 * costs, resume points). log must outlive it. Errors: SB_ERR_IO, SB_ERR_NOMEM. */
int sb_projector_open(sb_log *log, sb_projector **out);

/* Closes the projector (NULL is fine). */
void sb_projector_close(sb_projector *p);

/* Applies every event after each projection's checkpoint, in transactions of
 * at most 10000 events. *applied (may be NULL) gets the number of events
 * read. Safe against concurrent appends and from any thread (catch-ups and
 * rebuilds take turns). Errors: SB_ERR_CORRUPT (a record fails its checksum; detail names
 * its offset; the projections stop before it), SB_ERR_IO, SB_ERR_FULL. */
int sb_projector_catch_up(sb_projector *p, uint64_t *applied);

/* Empties every projection's state and checkpoint, then catches up from
 * offset 0. Errors: as sb_projector_catch_up. */
int sb_projector_rebuild(sb_projector *p);

/* Returns the lowest checkpoint of all projections (the offset all of them
 * have applied). */
uint64_t sb_projector_checkpoint(sb_projector *p);

/* Writes the SHA-256 of projection name's whole state (every key and value
 * in order) into out. Errors: SB_ERR_NOTFOUND (no such projection), SB_ERR_IO. */
int sb_projector_digest(sb_projector *p, const char *name, uint8_t out[32]);

/* Opens a read transaction for the projection named name and fills *t.
 * The caller ends it with mdb_txn_abort(t->txn). Errors: SB_ERR_NOTFOUND,
 * SB_ERR_IO. */
int sb_projector_read(sb_projector *p, const char *name, struct sb_proj_txn *t);

#endif
