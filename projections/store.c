/* store.c - a projection's state: reading and writing it within a
 * transaction, and reading it through the projector's handle (see
 * projection.h). Calls no projection. */
#include <string.h>

#include "engine/bytes.h"
#include "engine/error.h"
#include "engine/log/mdb.h"
#include "engine/sha256.h"
#include "projections/projection.h"
#include "projections/projector_int.h"

int sb_proj_get(struct sb_proj_txn *t, const void *key, size_t klen, MDB_val *val)
{
	MDB_val k = {klen, (void *)key};
	int rc = mdb_get(t->txn, t->dbi, &k, val);

	if (rc == MDB_NOTFOUND)
		return SB_ERR_NOTFOUND;
	return sb_log_mdb_err(rc, "projection: get");
}

int sb_proj_put(struct sb_proj_txn *t, const void *key, size_t klen, const void *val,
		size_t vlen)
{
	MDB_val k = {klen, (void *)key}, v = {vlen, (void *)val};

	return sb_log_mdb_err(mdb_put(t->txn, t->dbi, &k, &v, 0), "projection: put");
}

/* The index of the projection called name in p. */
static int find(const sb_projector *p, const char *name)
{
	for (size_t i = 0; i < p->n; i++)
		if (!strcmp(p->proj[i]->name, name))
			return (int)i;
	return sb_seterr(SB_ERR_NOTFOUND, "no projection named '%s'", name);
}

int sb_projector_read(sb_projector *p, const char *name, struct sb_proj_txn *t)
{
	int i = find(p, name), rc;

	if (i < 0)
		return i;
	if ((rc = mdb_txn_begin(sb_log_env(p->log), NULL, MDB_RDONLY, &t->txn)))
		return sb_log_mdb_err(rc, "projection: read");
	t->dbi = p->dbi[i];
	t->log = p->log;
	return SB_OK;
}

int sb_projector_digest(sb_projector *p, const char *name, uint8_t out[32])
{
	struct sb_proj_txn t;
	sb_sha256_state st;
	MDB_cursor *c;
	MDB_val k, v;
	uint8_t len[8];
	int rc;

	if ((rc = sb_projector_read(p, name, &t)))
		return rc;
	if ((rc = mdb_cursor_open(t.txn, t.dbi, &c))) {
		mdb_txn_abort(t.txn);
		return sb_log_mdb_err(rc, "projection: digest");
	}
	sb_sha256_init(&st);
	while (!(rc = mdb_cursor_get(c, &k, &v, MDB_NEXT))) {
		sb_be64_put(len, k.mv_size);
		sb_sha256_update(&st, len, 8);
		sb_sha256_update(&st, k.mv_data, k.mv_size);
		sb_be64_put(len, v.mv_size);
		sb_sha256_update(&st, len, 8);
		sb_sha256_update(&st, v.mv_data, v.mv_size);
	}
	sb_sha256_final(&st, out);
	mdb_cursor_close(c);
	mdb_txn_abort(t.txn);
	return rc == MDB_NOTFOUND ? SB_OK : sb_log_mdb_err(rc, "projection: digest");
}
