/* blob.h - blob keys and the blob table.
 *
 * A blob is a body kept beside the events (a model request or response, a
 * file's content), stored once under the BLAKE2b-256 of its content and
 * named in event payloads by that key as 64 lowercase hex digits. Guests
 * choose blob contents, so the key is a cryptographic hash: nobody can make
 * two contents share a key. (XXH3 remains the records' checksum only.)
 *
 * The tables live in the log's LMDB environment (engine/log/log.h):
 *   blobs    key: 32-byte BLAKE2b-256 of the content -> content
 *   blobmap  key: 16-byte XXH3-128 key of format 2 -> its 32-byte key
 *
 * Logs of format 2 keyed blobs by XXH3-128 (16 bytes, 32 hex digits), and
 * their events, which are never rewritten, still name blobs so. Such a
 * "legacy key" is held in a uint8_t[SB_HASH_LEN] as its 16 bytes followed
 * by 16 zero bytes (what sb_hash_parse makes of 32 digits); a reader of the
 * blob table resolves it through blobmap, then checks the content against
 * the BLAKE2b-256 key it maps to. A BLAKE2b-256 key ending in 16 zero bytes
 * cannot be found on purpose (2^128 work), so the two kinds never meet;
 * sb_hash_parse refuses 64 digits ending so.
 *
 * The sb_blob_table_* functions work inside a transaction the caller holds;
 * the log uses them for sb_blob_put, sb_blob_get, its commits and its
 * format upgrade.
 */
#ifndef SB_BLOB_H
#define SB_BLOB_H

#include <lmdb.h>
#include <stddef.h>
#include <stdint.h>

/* Blob keys: BLAKE2b-256, shown as 64 lowercase hex digits (a legacy key
 * as 32). */
#define SB_HASH_LEN 32
#define SB_HASH_HEX (2 * SB_HASH_LEN + 1)
#define SB_HASH_LEGACY_LEN 16 /* XXH3-128 keys of log format 2 */

/* A body for the blob table, stored with events by sb_log_append_blobs. */
struct sb_blob {
	const void *data;
	size_t len;
};

/* Writes the blob key of len bytes of data (BLAKE2b-256, unkeyed) into
 * hash. Safe to call from any thread. */
void sb_blob_hash(const void *data, size_t len, uint8_t hash[SB_HASH_LEN]);

/* Returns 1 when hash holds a legacy (format 2) key, 0 otherwise. */
int sb_hash_is_legacy(const uint8_t hash[SB_HASH_LEN]);

/* Formats hash into out (SB_HASH_HEX bytes): 64 hex digits, or 32 for a
 * legacy key, NUL-terminated. */
void sb_hash_hex(const uint8_t hash[SB_HASH_LEN], char out[SB_HASH_HEX]);

/* Parses a blob key: 64 lowercase hex digits, or 32 for a legacy key,
 * with nothing after them. Errors: SB_ERR_INVAL (another length, another
 * character, or 64 digits ending in 32 zeros). */
int sb_hash_parse(const char *hex, uint8_t hash[SB_HASH_LEN]);

/* The blob databases of one LMDB environment. */
struct sb_blob_table {
	MDB_dbi blobs; /* key -> content */
	MDB_dbi map;   /* legacy key -> key */
};

/* Opens the blob databases in txn into *t; with create MDB_CREATE they are
 * made when missing (txn must then be a write transaction), with 0 a
 * missing one is an error. Errors: SB_ERR_NOTFOUND, SB_ERR_IO. */
int sb_blob_table_open(MDB_txn *txn, unsigned create, struct sb_blob_table *t);

/* Stores len bytes of data under key, which must be their sb_blob_hash, in
 * the write transaction txn; a blob already there is kept. Errors:
 * SB_ERR_FULL, SB_ERR_IO. */
int sb_blob_table_put(MDB_txn *txn, const struct sb_blob_table *t,
		      const uint8_t key[SB_HASH_LEN], const void *data, size_t len);

/* Finds blob key in txn, a legacy key through the map, checks its content
 * against its BLAKE2b-256 key and points *data at it (*len bytes), valid
 * until the transaction ends or writes. Errors: SB_ERR_NOTFOUND,
 * SB_ERR_CORRUPT (content or map entry damaged; the detail names the key),
 * SB_ERR_IO. */
int sb_blob_table_get(MDB_txn *txn, const struct sb_blob_table *t,
		      const uint8_t key[SB_HASH_LEN], const void **data, size_t *len);

/* Re-keys a format-2 blob table in the write transaction txn: checks each
 * blob under a 16-byte key against its XXH3-128, stores it under its
 * BLAKE2b-256 key, maps the old key to the new one and removes the old
 * entry. Sets *rekeyed to the number of blobs re-keyed. On error the table
 * may be half done: the caller aborts txn. Errors: SB_ERR_CORRUPT (a blob
 * that does not match its key, or a key of another length; the detail
 * names it), SB_ERR_FULL, SB_ERR_NOMEM, SB_ERR_IO. */
int sb_blob_table_upgrade(MDB_txn *txn, const struct sb_blob_table *t, uint64_t *rekeyed);

#endif
