/* log.h - the append-only event log (LMDB).
 *
 * One LMDB environment in the state directory holds:
 *   events   key: 8-byte big-endian global offset -> record (engine/log/record.h)
 *   runtail  key: run id -> its open index block (block no., offsets)
 *   runidx   key: run id, NUL, block no. -> 64 offsets (full blocks)
 *   blobs, blobmap   the blob table (engine/log/blob.h)
 *   meta     small named values: "version", the format (3)
 *   salts    key: 8-byte big-endian offset -> the record's 32-byte leaf
 *            salt (projections/tree.h), made when the record first enters
 *            the tree and kept across rebuilds
 * Projections keep their own databases in the same environment
 * (projections/projection.h), so their state and checkpoints commit with
 * the same guarantees.
 *
 * Appends are durable when they return: each commit is synced. Appenders in
 * several threads are grouped into one commit (group commit): one thread,
 * the leader, commits for everyone waiting, so durable throughput grows
 * with writers. A leader that starts right after a commit waits briefly (at
 * most about one commit's time) for the writers that commit just released,
 * so groups stay whole; a lone writer never waits.
 * Offsets start at 1 and grow by one per event; per-run sequences start at 1.
 *
 * A log of format 2 (blobs keyed by XXH3-128) is upgraded when it is opened
 * for writing, in one transaction: its blobs are re-keyed (blob.h); no
 * event is rewritten.
 */
#ifndef SB_LOG_H
#define SB_LOG_H

#include <lmdb.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/log/blob.h"
#include "engine/log/event.h"

typedef struct sb_log sb_log;
typedef struct sb_log_iter sb_log_iter;

#define SB_LOG_RDONLY 0x1 /* open for reading only */
#define SB_LOG_NOSYNC 0x2 /* commits are not synced: benchmarks and tests only */

/* Opens (creating if needed) the log in directory dir, which must exist.
 * Opened for writing, a log of format 2 is upgraded to format 3 first, in
 * one transaction (sb_log_upgrade_get reports it); when that fails nothing
 * is changed. Errors: SB_ERR_IO (LMDB or file error; detail says which),
 * SB_ERR_NOMEM, SB_ERR_CORRUPT (not a Sanbox log, a format newer or older
 * than this build reads, or a format-2 blob that does not match its key:
 * the detail names the version or the blob), SB_ERR_STATE (a format-2 log
 * opened read-only: the daemon upgrades it on its next start), SB_ERR_FULL
 * (no room for the upgrade). */
int sb_log_open(const char *dir, unsigned flags, sb_log **out);

/* What sb_log_open did to bring the log to the current format. */
struct sb_log_upgrade {
	unsigned from, to; /* format versions */
	uint64_t blobs;    /* blobs re-keyed */
};

/* Fills *u with the upgrade this handle's open made and returns 1, or
 * returns 0 (and leaves *u alone) when the log already had the current
 * format. */
int sb_log_upgrade_get(sb_log *log, struct sb_log_upgrade *u);

/* Closes the log. No appends or iterators may be in progress. */
void sb_log_close(sb_log *log);

/* Called after each commit, by the committing thread, with the events of
 * the commit in offset order; calls never overlap and come in offset
 * order. The events and their payloads are valid only during the call. */
typedef void (*sb_log_hook)(void *ctx, const struct sb_event *evs, size_t n);

/* Sets the commit hook (NULL to remove). Set it before appending. */
void sb_log_set_hook(sb_log *log, sb_log_hook hook, void *ctx);

/* Appends n events as one atomic, durable unit, after checking each with the
 * schema. On success each event's offset, seq (and ts_ns if it was 0) are
 * set. Safe to call from many threads at once. On error nothing of the n
 * events is written. Errors: SB_ERR_SCHEMA (detail names the event and
 * field), SB_ERR_INVAL (bad type or run id), SB_ERR_FULL (map or disk full),
 * SB_ERR_IO, SB_ERR_NOMEM, SB_ERR_DENIED (log opened read-only). */
int sb_log_append(sb_log *log, struct sb_event *evs, size_t n);

/* Returns the appends (calls of sb_log_append or sb_log_append_blobs)
 * queued now for the next commit, behind the one being committed. From any
 * thread; for tests and diagnostics. */
size_t sb_log_queued(sb_log *log);

/* Reads the offset of the newest event into *out (0 when the log is
 * empty), as of a fresh read; on an error *out is 0, but an error is never
 * an empty log. Errors: SB_ERR_IO (LMDB, e.g. no reader slot left; detail
 * says which), SB_ERR_CORRUPT (a malformed key), SB_ERR_NOMEM. */
int sb_log_last_offset(sb_log *log, uint64_t *out);

/* Reads the newest sequence number of run into *out (0 when the run has no
 * events); on an error *out is 0. Errors: as sb_log_last_offset
 * (SB_ERR_CORRUPT: a malformed run index). */
int sb_log_last_seq(sb_log *log, const char *run, uint64_t *out);

/* Opens an iterator over the whole log from offset `from` (inclusive) on a
 * consistent snapshot. The caller closes it. Errors: SB_ERR_IO, SB_ERR_NOMEM. */
int sb_log_iter_open(sb_log *log, uint64_t from, sb_log_iter **out);

/* Like sb_log_iter_open, but reads inside the caller's transaction txn (read
 * or write; it must outlive the iterator), so a projection sees the log and
 * its own state in one transaction. */
int sb_log_iter_open_txn(sb_log *log, MDB_txn *txn, uint64_t from, sb_log_iter **out);

/* Opens an iterator over one run's events from sequence from_seq
 * (inclusive). Errors: as sb_log_iter_open. */
int sb_log_iter_open_run(sb_log *log, const char *run, uint64_t from_seq,
			 sb_log_iter **out);

/* Reads the next event into ev; its payload stays valid until the next call
 * or the iterator is closed. Returns SB_OK, SB_END at the end, or
 * SB_ERR_CORRUPT for a record that fails its checksum or decoding: then
 * ev->offset holds the bad record's offset and the next call goes on past
 * it. */
int sb_log_iter_next(sb_log_iter *it, struct sb_event *ev);

/* Like sb_log_iter_next, and also points *rec at the event's stored record
 * (*len bytes, the format of engine/record.h), already verified; it stays
 * valid as ev->payload does. On an error or SB_END *rec is NULL. */
int sb_log_iter_next_record(sb_log_iter *it, struct sb_event *ev, const void **rec,
			    size_t *len);

/* Closes an iterator (NULL is fine). */
void sb_log_iter_close(sb_log_iter *it);

/* Stores data in the blob table (durably, in a group commit; a blob
 * already there is not written again) and writes its key to hash.
 * Errors: SB_ERR_FULL, SB_ERR_IO, SB_ERR_NOMEM, SB_ERR_DENIED. */
int sb_blob_put(sb_log *log, const void *data, size_t len, uint8_t hash[SB_HASH_LEN]);

/* Reads blob hash (a legacy key through the map, blob.h) into a new buffer
 * (*data, the caller frees) after checking its content against its
 * BLAKE2b-256 key. Errors: SB_ERR_NOTFOUND, SB_ERR_CORRUPT, SB_ERR_NOMEM,
 * SB_ERR_IO. */
int sb_blob_get(sb_log *log, const uint8_t hash[SB_HASH_LEN], void **data, size_t *len);

/* Like sb_log_append, and stores the nblobs blobs (keyed by sb_blob_hash,
 * computed by the calling thread before it queues; one already there is
 * kept) in the same commit: durable together, or nothing is written. n may
 * be 0. Errors: as sb_log_append. */
int sb_log_append_blobs(sb_log *log, const struct sb_blob *blobs, size_t nblobs,
			struct sb_event *evs, size_t n);

/* The LMDB environment, for projections that keep state beside the log. */
MDB_env *sb_log_env(sb_log *log);

/* The space the log's file uses, in bytes: *blobs for the blob tables
 * (their pages), *rest for the events, their indexes and the
 * projections. Errors: SB_ERR_IO. */
int sb_log_usage(sb_log *log, unsigned long long *blobs, unsigned long long *rest);

#define SB_SALT_LEN 32

/* Reads the leaf salt of the record at offset into out, inside txn (NULL:
 * in a read transaction of its own). With create and a write txn, a
 * record that has none gets one (random, libsodium), stored in txn.
 * Errors: SB_ERR_NOTFOUND (none, and not created), SB_ERR_CORRUPT (a salt
 * of another length), SB_ERR_FULL, SB_ERR_IO. */
int sb_log_salt(sb_log *log, MDB_txn *txn, uint64_t offset, int create,
		uint8_t out[SB_SALT_LEN]);

#endif
