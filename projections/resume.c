/* resume.c - resume points: the snapshots of each run, by offset.
 *
 * Key: run id, a NUL, the offset as 8 big-endian bytes -> the point. Keys
 * of one run sort by offset, so "newest at or before N" is one seek.
 */
#include <string.h>

#include "engine/bytes.h"
#include "engine/error.h"
#include "engine/log/mdb.h"
#include "engine/payload.h"
#include "projections/fields.h"
#include "projections/views.h"

#define RP struct sb_resume_point
static const struct sb_fdesc rp_fields[] = {
	SB_FU64(RP, offset),     SB_FU64(RP, seq),  SB_FU64(RP, ts_ns),
	SB_FSTR(RP, snapshot),   SB_FSTR(RP, kind), SB_FSTR(RP, trigger),
	SB_FSTR(RP, layer),      SB_FSTR(RP, memory), SB_FU64(RP, bytes),
	SB_FU64(RP, synced),     SB_FU64(RP, memory_bytes),
};
#define NF (sizeof rp_fields / sizeof rp_fields[0])

static size_t rp_key(uint8_t *key, const char *run, uint64_t offset)
{
	size_t rl = strlen(run);

	memcpy(key, run, rl);
	key[rl] = 0;
	sb_be64_put(key + rl + 1, offset);
	return rl + 9;
}

/* Drops run's point of snapshot id (snapshot.removed), or every point
 * of run when id is NULL (run.removed). */
static int rp_remove(struct sb_proj_txn *t, const char *run, const char *id)
{
	struct sb_resume_point rp;
	uint8_t key[SB_RUN_MAX + 9];
	size_t kl = rp_key(key, run, 0), pl = strlen(run) + 1;
	MDB_cursor *c;
	MDB_val k = {kl, key}, v;
	int rc;

	if ((rc = mdb_cursor_open(t->txn, t->dbi, &c)))
		return sb_log_mdb_err(rc, "resume: remove");
	for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); rc == 0;
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		if (k.mv_size != kl || memcmp(k.mv_data, key, pl))
			break;
		if ((rc = sb_fields_load(t, k.mv_data, k.mv_size, rp_fields, NF, &rp, sizeof rp)))
			break;
		if (!id) {
			if ((rc = mdb_cursor_del(c, 0)))
				break;
		} else if (!strcmp(rp.snapshot, id)) {
			rc = mdb_cursor_del(c, 0);
			break;
		}
	}
	mdb_cursor_close(c);
	if (rc == MDB_NOTFOUND)
		return SB_OK;
	return rc > 0 ? sb_log_mdb_err(rc, "resume: remove") : rc;
}

static int rp_apply(struct sb_proj_txn *t, const struct sb_event *ev, const msgpack_object *map)
{
	struct sb_resume_point rp;
	uint8_t key[SB_RUN_MAX + 9];
	size_t kl;

	if (!strcmp(ev->type, "run.removed"))
		return rp_remove(t, ev->run, NULL);
	if (!strcmp(ev->type, "snapshot.removed")) {
		char id[sizeof rp.snapshot];
		if (sb_map_str(map, "snapshot", id, sizeof id) <= 0)
			return SB_OK;
		return rp_remove(t, ev->run, id);
	}
	if (strcmp(ev->type, "snapshot.saved"))
		return SB_OK;
	memset(&rp, 0, sizeof rp);
	rp.offset = ev->offset;
	rp.seq = ev->seq;
	rp.ts_ns = ev->ts_ns;
	sb_map_str(map, "snapshot", rp.snapshot, sizeof rp.snapshot);
	sb_map_str(map, "kind", rp.kind, sizeof rp.kind);
	sb_map_str(map, "trigger", rp.trigger, sizeof rp.trigger);
	sb_map_str(map, "layer", rp.layer, sizeof rp.layer);
	sb_map_str(map, "memory", rp.memory, sizeof rp.memory);
	rp.bytes = sb_map_u64(map, "bytes", 0);
	rp.memory_bytes = sb_map_u64(map, "memory_bytes", 0);
	{
		const msgpack_object *sy = sb_map_get(map, "synced");
		rp.synced = sy && sy->type == MSGPACK_OBJECT_BOOLEAN && sy->via.boolean;
	}
	kl = rp_key(key, ev->run, ev->offset);
	return sb_fields_store(t, key, kl, rp_fields, NF, &rp);
}

const struct sb_projection sb_proj_resume = {
	.name = "resume",
	/* 1: a run.removed drops the run's points */
	.version = 1,
	.init = NULL,
	.apply = rp_apply,
};

/* Walks run's points from the first; stops at fn's non-zero answer. */
int sb_resume_each(sb_projector *p, const char *run,
		   int (*fn)(void *ctx, const struct sb_resume_point *rp), void *ctx)
{
	struct sb_proj_txn t;
	struct sb_resume_point rp;
	uint8_t key[SB_RUN_MAX + 9];
	size_t kl = rp_key(key, run, 0), pl = strlen(run) + 1;
	MDB_cursor *c;
	MDB_val k = {kl, key}, v;
	int rc;

	if ((rc = sb_projector_read(p, "resume", &t)))
		return rc;
	if ((rc = mdb_cursor_open(t.txn, t.dbi, &c))) {
		mdb_txn_abort(t.txn);
		return sb_log_mdb_err(rc, "resume: read");
	}
	for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); rc == 0;
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		if (k.mv_size != kl || memcmp(k.mv_data, key, pl))
			break;
		if ((rc = sb_fields_load(&t, k.mv_data, k.mv_size, rp_fields, NF, &rp, sizeof rp)) ||
		    (rc = fn(ctx, &rp)))
			break;
	}
	if (rc == MDB_NOTFOUND)
		rc = SB_OK;
	mdb_cursor_close(c);
	mdb_txn_abort(t.txn);
	return rc;
}

struct find_ctx {
	uint64_t at;
	struct sb_resume_point *out;
	int found;
};

static int find_cb(void *vctx, const struct sb_resume_point *rp)
{
	struct find_ctx *f = vctx;

	if (rp->offset > f->at)
		return 1;
	*f->out = *rp;
	f->found = 1;
	return 0;
}

int sb_resume_find(sb_projector *p, const char *run, uint64_t offset, struct sb_resume_point *rp)
{
	struct find_ctx f = {offset, rp, 0};
	int rc = sb_resume_each(p, run, find_cb, &f);

	if (rc < 0)
		return rc;
	if (!f.found && offset == UINT64_MAX)
		return sb_seterr(SB_ERR_NOTFOUND, "run %s has no snapshot", run);
	if (!f.found)
		return sb_seterr(SB_ERR_NOTFOUND, "run %s has no snapshot at or before offset %llu",
				 run, (unsigned long long)offset);
	return SB_OK;
}
