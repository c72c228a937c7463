/* projector.c - runs the projections over the log, exactly once. */
#include "projections/projection.h"

#include <endian.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/bytes.h"
#include "engine/error.h"
#include "engine/log/mdb.h"
#include "engine/payload.h"
#include "projections/projector_int.h"
#include "projections/tree.h"
#include "projections/views.h"

#define BATCH 10000

static const struct sb_projection *const builtin[] = {
    &sb_proj_runstate,
    &sb_proj_costs,
    &sb_proj_groups,
    &sb_proj_resume,
    &sb_proj_tree,
};
#define NPROJ (sizeof builtin / sizeof builtin[0])

/* The key of projection i's version in p.checkpoints: "NAME.version". */
static MDB_val version_key(size_t i, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "%s.version", builtin[i]->name);

	return (MDB_val){(size_t)n, buf};
}

/* 1 when projection i's state was folded by its current version (no
 * version stored counts as version 0). */
static int version_same(sb_projector *p, MDB_txn *txn, size_t i)
{
	char buf[64];
	MDB_val k = version_key(i, buf, sizeof buf), v;
	uint64_t have = 0;

	if (!mdb_get(txn, p->ckpt, &k, &v) && v.mv_size == 8)
		have = sb_be64_get(v.mv_data);
	return have == builtin[i]->version;
}

/* Empties projection i for a fold from offset 0 by its current version:
 * its state dropped, its init run, its checkpoint removed, its version
 * stored. */
static int reset(sb_projector *p, MDB_txn *txn, size_t i)
{
	struct sb_proj_txn t = {txn, p->dbi[i], p->log, NULL};
	MDB_val k = {strlen(builtin[i]->name), (void *)builtin[i]->name}, vk, v;
	char buf[64];
	uint8_t b[8];
	int rc;

	if ((rc = mdb_drop(txn, p->dbi[i], 0)) ||
	    ((rc = mdb_del(txn, p->ckpt, &k, NULL)) && rc != MDB_NOTFOUND))
		return sb_log_mdb_err(rc, "projector: reset");
	if (builtin[i]->init && (rc = builtin[i]->init(&t)))
		return rc;
	vk = version_key(i, buf, sizeof buf);
	sb_be64_put(b, builtin[i]->version);
	v = (MDB_val){8, b};
	return sb_log_mdb_err(mdb_put(txn, p->ckpt, &vk, &v, 0), "projector: version");
}

/* Opens the projections' databases and the checkpoints in txn; a state an
 * older fold made is emptied, to be made again from offset 0. */
static int dbis_open(sb_projector *p, MDB_txn *txn)
{
	char name[64];
	int rc = SB_OK;

	for (size_t i = 0; i < NPROJ && !rc; i++) {
		snprintf(name, sizeof name, "p.%s", builtin[i]->name);
		rc = mdb_dbi_open(txn, name, MDB_CREATE, &p->dbi[i]);
	}
	if (rc || (rc = mdb_dbi_open(txn, "p.checkpoints", MDB_CREATE, &p->ckpt)))
		return sb_log_mdb_err(rc, "projector: open");
	for (size_t i = 0; i < NPROJ && !rc; i++)
		if (!version_same(p, txn, i))
			rc = reset(p, txn, i);
	return rc;
}

int sb_projector_open(sb_log *log, sb_projector **out)
{
	sb_projector *p = calloc(1, sizeof *p + NPROJ * sizeof p->dbi[0]);
	MDB_txn *txn = NULL;
	int rc;

	if (!p)
		return SB_ERR_NOMEM;
	p->log = log;
	p->proj = builtin;
	p->n = NPROJ;
	pthread_mutex_init(&p->mu, NULL);
	if (!msgpack_zone_init(&p->zone, 4096)) {
		free(p);
		return SB_ERR_NOMEM;
	}
	if ((rc = mdb_txn_begin(sb_log_env(log), NULL, 0, &txn))) {
		txn = NULL;
		rc = sb_log_mdb_err(rc, "projector: open");
		goto fail;
	}
	if ((rc = dbis_open(p, txn)))
		goto fail;
	rc = mdb_txn_commit(txn);
	txn = NULL;
	if (rc) {
		rc = sb_log_mdb_err(rc, "projector: open");
		goto fail;
	}
	*out = p;
	return SB_OK;
fail:
	if (txn)
		mdb_txn_abort(txn);
	msgpack_zone_destroy(&p->zone);
	pthread_mutex_destroy(&p->mu);
	free(p);
	return rc;
}

void sb_projector_close(sb_projector *p)
{
	if (!p)
		return;
	msgpack_zone_destroy(&p->zone);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

static uint64_t ckpt_get(sb_projector *p, MDB_txn *txn, size_t i)
{
	MDB_val k = {strlen(builtin[i]->name), (void *)builtin[i]->name}, v;

	if (mdb_get(txn, p->ckpt, &k, &v) || v.mv_size != 8)
		return 0;
	return sb_be64_get(v.mv_data);
}

static int ckpt_put(sb_projector *p, MDB_txn *txn, size_t i, uint64_t off)
{
	MDB_val k = {strlen(builtin[i]->name), (void *)builtin[i]->name}, v;
	uint8_t b[8];

	sb_be64_put(b, off);
	v.mv_size = 8;
	v.mv_data = b;
	return sb_log_mdb_err(mdb_put(txn, p->ckpt, &k, &v, 0), "projector: checkpoint");
}

/* Folds one event into projection i, whose view of the batch is t. */
static int apply_one(size_t i, struct sb_proj_txn *t, const struct sb_event *ev,
		     const msgpack_object *map, const void *rec, size_t rlen)
{
	int rc = SB_OK;

	if (builtin[i]->apply)
		rc = builtin[i]->apply(t, ev, map);
	if (!rc && builtin[i]->apply_record)
		rc = builtin[i]->apply_record(t, ev, rec, rlen);
	return rc;
}

/* Ends every projection's view of the batch: keep 1 writes what they
 * hold (the first error is returned), keep 0 frees it. */
static int end_all(struct sb_proj_txn t[NPROJ], int keep)
{
	int rc = SB_OK, r;

	for (size_t i = 0; i < NPROJ; i++)
		if (builtin[i]->end && (r = builtin[i]->end(&t[i], keep && !rc)) && !rc)
			rc = r;
	return rc;
}

/* Applies up to BATCH events in one transaction. *n gets the number read. */
static int catch_up_batch(sb_projector *p, uint64_t *n)
{
	MDB_txn *txn;
	sb_log_iter *it = NULL;
	uint64_t ck[NPROJ], from = UINT64_MAX, last = 0;
	struct sb_proj_txn t[NPROJ];
	struct sb_event ev;
	const void *rec;
	size_t rlen;
	int rc;

	*n = 0;
	if ((rc = mdb_txn_begin(sb_log_env(p->log), NULL, 0, &txn)))
		return sb_log_mdb_err(rc, "projector: begin");
	for (size_t i = 0; i < NPROJ; i++) {
		ck[i] = ckpt_get(p, txn, i);
		if (ck[i] < from)
			from = ck[i];
		t[i] = (struct sb_proj_txn){txn, p->dbi[i], p->log, NULL};
	}
	if ((rc = sb_log_iter_open_txn(p->log, txn, from + 1, &it)))
		goto fail;
	while (*n < BATCH && (rc = sb_log_iter_next_record(it, &ev, &rec, &rlen)) == SB_OK) {
		msgpack_object map;
		msgpack_zone_clear(&p->zone);
		if ((rc = sb_payload_parse(ev.payload, ev.payload_len, &p->zone, &map))) {
			rc = sb_seterr(SB_ERR_CORRUPT, "offset %llu: %s",
				       (unsigned long long)ev.offset, sb_errmsg(rc));
			goto fail;
		}
		for (size_t i = 0; i < NPROJ; i++)
			if (ev.offset > ck[i] && (rc = apply_one(i, &t[i], &ev, &map, rec, rlen)))
				goto fail;
		last = ev.offset;
		(*n)++;
	}
	if (rc < 0)
		goto fail;
	sb_log_iter_close(it);
	it = NULL;
	if ((rc = end_all(t, 1)))
		goto fail;
	for (size_t i = 0; i < NPROJ && *n; i++)
		if (last > ck[i] && (rc = ckpt_put(p, txn, i, last)))
			goto fail;
	return sb_log_mdb_err(mdb_txn_commit(txn), "projector: commit");
fail:
	end_all(t, 0);
	sb_log_iter_close(it);
	mdb_txn_abort(txn);
	*n = 0;
	return rc;
}

/* Catches up with p->mu held. */
static int catch_up(sb_projector *p, uint64_t *applied)
{
	uint64_t n, total = 0;
	int rc;

	do {
		rc = catch_up_batch(p, &n);
		total += n;
	} while (rc == SB_OK && n == BATCH);
	if (applied)
		*applied = total;
	return rc;
}

int sb_projector_catch_up(sb_projector *p, uint64_t *applied)
{
	int rc;

	pthread_mutex_lock(&p->mu);
	rc = catch_up(p, applied);
	pthread_mutex_unlock(&p->mu);
	return rc;
}

int sb_projector_rebuild(sb_projector *p)
{
	MDB_txn *txn = NULL;
	int rc;

	pthread_mutex_lock(&p->mu);
	if ((rc = mdb_txn_begin(sb_log_env(p->log), NULL, 0, &txn))) {
		rc = sb_log_mdb_err(rc, "projector: begin");
		txn = NULL;
		goto out;
	}
	for (size_t i = 0; i < NPROJ; i++)
		if ((rc = reset(p, txn, i)))
			goto out;
	rc = sb_log_mdb_err(mdb_txn_commit(txn), "projector: commit");
	txn = NULL;
	if (rc == SB_OK)
		rc = catch_up(p, NULL);
out:
	if (txn)
		mdb_txn_abort(txn);
	pthread_mutex_unlock(&p->mu);
	return rc;
}

uint64_t sb_projector_checkpoint(sb_projector *p)
{
	MDB_txn *txn;
	uint64_t min = UINT64_MAX;

	if (mdb_txn_begin(sb_log_env(p->log), NULL, MDB_RDONLY, &txn))
		return 0;
	for (size_t i = 0; i < NPROJ; i++) {
		uint64_t c = ckpt_get(p, txn, i);
		if (c < min)
			min = c;
	}
	mdb_txn_abort(txn);
	return min;
}
