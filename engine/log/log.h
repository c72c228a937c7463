/* log.h - the append-only event log and blob table (LMDB).
 *
 * One LMDB environment in the state directory holds:
 *   events   key: 8-byte big-endian global offset -> record (engine/record.h)
 *   runtail  key: run id -> its open index block (block no., offsets)
 *   runidx   key: run id, NUL, block no. -> 64 offsets (full blocks)
 *   blobs    key: 16-byte XXH3-128 of the content -> content
 *   meta     small named values (format version)
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
 */
#ifndef SB_LOG_H
#define SB_LOG_H

#include <lmdb.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/log/event.h"

typedef struct sb_log sb_log;
typedef struct sb_log_iter sb_log_iter;

#define SB_LOG_RDONLY 0x1 /* open for reading only */
#define SB_LOG_NOSYNC 0x2 /* commits are not synced: benchmarks and tests only */

/* Opens (creating if needed) the log in directory dir, which must exist.
 * Errors: SB_ERR_IO (LMDB or file error; detail says which), SB_ERR_NOMEM,
 * SB_ERR_CORRUPT (not a Sanbox log or a newer format). */
int sb_log_open(const char *dir, unsigned flags, sb_log **out);

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

/* Returns the offset of the newest event (0 when the log is empty) as of a
 * fresh read. Errors are reported as 0. */
uint64_t sb_log_last_offset(sb_log *log);

/* Returns the newest sequence number of run (0 if the run has no events). */
uint64_t sb_log_last_seq(sb_log *log, const char *run);

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

/* Blob keys: 16 bytes of XXH3-128, shown as 32 lowercase hex digits. */
#define SB_HASH_LEN 16
#define SB_HASH_HEX (2 * SB_HASH_LEN + 1)

/* Stores data in the blob table (durably; a blob already there is not
 * written again) and writes its key to hash. Errors: SB_ERR_FULL, SB_ERR_IO,
 * SB_ERR_DENIED. */
int sb_blob_put(sb_log *log, const void *data, size_t len, uint8_t hash[SB_HASH_LEN]);

/* Reads blob hash into a new buffer (*data, the caller frees) after checking
 * its content against the hash. Errors: SB_ERR_NOTFOUND, SB_ERR_CORRUPT,
 * SB_ERR_NOMEM, SB_ERR_IO. */
int sb_blob_get(sb_log *log, const uint8_t hash[SB_HASH_LEN], void **data, size_t *len);

/* A body for the blob table, stored with events by sb_log_append_blobs. */
struct sb_blob {
	const void *data;
	size_t len;
};

/* Writes the blob key of len bytes of data (XXH3-128) into hash. */
void sb_blob_hash(const void *data, size_t len, uint8_t hash[SB_HASH_LEN]);

/* Like sb_log_append, and stores the nblobs blobs (keyed by sb_blob_hash;
 * one already there is kept) in the same commit: durable together, or
 * nothing is written. n may be 0. Errors: as sb_log_append. */
int sb_log_append_blobs(sb_log *log, const struct sb_blob *blobs, size_t nblobs,
			struct sb_event *evs, size_t n);

/* Formats a hash as hex into out (SB_HASH_HEX bytes). */
void sb_hash_hex(const uint8_t hash[SB_HASH_LEN], char out[SB_HASH_HEX]);

/* Parses 32 hex digits into hash. Errors: SB_ERR_INVAL. */
int sb_hash_parse(const char *hex, uint8_t hash[SB_HASH_LEN]);

/* The LMDB environment, for projections that keep state beside the log. */
MDB_env *sb_log_env(sb_log *log);

/* Maps an LMDB error code to an sb_err, recording its text as the detail. */
int sb_log_mdb_err(int mdb_rc, const char *what);

#endif
