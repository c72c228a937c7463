/* benchraw.h - the raw LMDB baseline the log's benchmarks compare with: the
 * log's stored record bytes put into a plain LMDB environment (one synced
 * transaction of MDB_APPEND puts a batch, no run index) on the same disk.
 * Header-only; every function returns 0 or an LMDB error code (or -1 for
 * one of its own, with the reason on stderr). */
#ifndef SB_BENCHRAW_H
#define SB_BENCHRAW_H

#include <lmdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCHRAW_BATCH 1000 /* records a batch */

/* The stored records of one batch, copied out of the log. */
struct bench_records {
	uint8_t key[BENCHRAW_BATCH][8];
	size_t off[BENCHRAW_BATCH], len[BENCHRAW_BATCH];
	uint8_t *data;
	size_t cap;
};

/* Opens a raw environment in dir (flags added to MDB_NOTLS |
 * MDB_NORDAHEAD) with its database "events" made. */
static inline int bench_raw_open(const char *dir, unsigned flags, MDB_env **env, MDB_dbi *dbi)
{
	MDB_txn *txn;
	int rc;

	if ((rc = mdb_env_create(env)))
		return rc;
	mdb_env_set_maxdbs(*env, 4);
	mdb_env_set_mapsize(*env, (size_t)16 << 30);
	if ((rc = mdb_env_open(*env, dir, MDB_NOTLS | MDB_NORDAHEAD | flags, 0600)) ||
	    (rc = mdb_txn_begin(*env, NULL, 0, &txn)))
		return rc;
	if ((rc = mdb_dbi_open(txn, "events", MDB_CREATE, dbi))) {
		mdb_txn_abort(txn);
		return rc;
	}
	return mdb_txn_commit(txn);
}

/* Copies the BENCHRAW_BATCH records from offset first of the log's
 * environment env into r. */
static inline int bench_raw_copy(MDB_env *env, uint64_t first, struct bench_records *r)
{
	MDB_txn *txn;
	MDB_cursor *c;
	MDB_dbi dbi;
	MDB_val k, v;
	size_t used = 0, n = 0;
	uint8_t key[8];
	int rc;

	for (int i = 7; i >= 0; i--, first >>= 8)
		key[i] = (uint8_t)first;
	k = (MDB_val){8, key};
	if ((rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)))
		return rc;
	if ((rc = mdb_dbi_open(txn, "events", 0, &dbi)) || (rc = mdb_cursor_open(txn, dbi, &c))) {
		mdb_txn_abort(txn);
		return rc;
	}
	for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_KEY); !rc && n < BENCHRAW_BATCH;
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		if (used + v.mv_size > r->cap)
			break;
		memcpy(r->key[n], k.mv_data, 8);
		memcpy(r->data + used, v.mv_data, v.mv_size);
		r->off[n] = used;
		r->len[n] = v.mv_size;
		used += v.mv_size;
		n++;
	}
	mdb_cursor_close(c);
	mdb_txn_abort(txn);
	if (n != BENCHRAW_BATCH) {
		fprintf(stderr, "raw baseline: %zu records copied, not %d\n", n, BENCHRAW_BATCH);
		return -1;
	}
	return 0;
}

/* Puts the batch r into dbi in one synced transaction. */
static inline int bench_raw_put(MDB_env *env, MDB_dbi dbi, const struct bench_records *r)
{
	MDB_txn *txn;
	MDB_cursor *c;
	int rc;

	if ((rc = mdb_txn_begin(env, NULL, 0, &txn)))
		return rc;
	if ((rc = mdb_cursor_open(txn, dbi, &c))) {
		mdb_txn_abort(txn);
		return rc;
	}
	for (size_t i = 0; i < BENCHRAW_BATCH && !rc; i++) {
		MDB_val k = {8, (void *)r->key[i]}, v = {r->len[i], r->data + r->off[i]};
		rc = mdb_cursor_put(c, &k, &v, MDB_APPEND);
	}
	mdb_cursor_close(c);
	if (rc) {
		mdb_txn_abort(txn);
		return rc;
	}
	return mdb_txn_commit(txn);
}

#endif
