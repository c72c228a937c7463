/* groups.c - the groups projection: one record per group, and its runs in
 * the order they were created.
 *
 * Keys: "g/<name>" -> the group (from group.created, or from the first run
 * created with the label when no group.created names it), and
 * "m/<name>\0<offset>" (the offset 8 bytes big-endian) -> the run id of
 * each run.created with the label, so a group's runs read in order with
 * one cursor. Run state, costs and progress are the other projections':
 * a group's view reads its runs' records there.
 */
#include <stdio.h>
#include <string.h>

#include "engine/bytes.h"
#include "engine/error.h"
#include "engine/payload.h"
#include "projections/fields.h"
#include "projections/views.h"

#define G struct sb_group
static const struct sb_fdesc group_fields[] = {
	SB_FSTR(G, id),		 SB_FSTR(G, name),	  SB_FSTR(G, goal),
	SB_FU64(G, budget_nusd), SB_FU64(G, created_ns), SB_FU64(G, planned),
	SB_FU64(G, runs),
};
#define NF (sizeof group_fields / sizeof group_fields[0])

#define GROUP_KEY_MAX (2 + sizeof((G *)0)->name)

static size_t group_key(char key[GROUP_KEY_MAX], const char *name)
{
	return (size_t)snprintf(key, GROUP_KEY_MAX, "g/%s", name);
}

/* The member key of run at offset in group name. */
static size_t member_key(uint8_t *key, const char *name, uint64_t offset)
{
	size_t n = strlen(name);

	memcpy(key, "m/", 2);
	memcpy(key + 2, name, n);
	key[2 + n] = 0;
	sb_be64_put(key + 3 + n, offset);
	return 3 + n + 8;
}

static int on_group_created(struct sb_proj_txn *t, const struct sb_event *ev,
			    const msgpack_object *map)
{
	char key[GROUP_KEY_MAX];
	struct sb_group g;
	size_t kl;
	int rc;

	memset(&g, 0, sizeof g);
	if (sb_map_str(map, "name", g.name, sizeof g.name) <= 0)
		return SB_OK; /* the schema refuses it; nothing to fold */
	kl = group_key(key, g.name);
	rc = sb_fields_load(t, key, kl, group_fields, NF, &g, sizeof g);
	if (rc && rc != SB_ERR_NOTFOUND)
		return rc;
	snprintf(g.id, sizeof g.id, "%s", ev->run);
	sb_map_str(map, "name", g.name, sizeof g.name);
	if (sb_map_str(map, "goal", g.goal, sizeof g.goal) < 0)
		g.goal[0] = 0;
	g.budget_nusd = sb_map_u64(map, "budget_nusd", 0);
	g.planned = sb_map_u64(map, "planned", 0);
	g.created_ns = ev->ts_ns;
	return sb_fields_store(t, key, kl, group_fields, NF, &g);
}

static int on_run_created(struct sb_proj_txn *t, const struct sb_event *ev,
			  const msgpack_object *map)
{
	char key[GROUP_KEY_MAX];
	uint8_t mkey[GROUP_KEY_MAX + 9];
	struct sb_group g;
	char name[sizeof g.name];
	size_t kl;
	int rc;

	if (sb_map_str(map, "group", name, sizeof name) <= 0)
		return SB_OK;
	kl = group_key(key, name);
	rc = sb_fields_load(t, key, kl, group_fields, NF, &g, sizeof g);
	if (rc == SB_ERR_NOTFOUND) { /* a label no group.created named */
		memset(&g, 0, sizeof g);
		snprintf(g.name, sizeof g.name, "%s", name);
		g.created_ns = ev->ts_ns;
	} else if (rc) {
		return rc;
	}
	g.runs++;
	if ((rc = sb_fields_store(t, key, kl, group_fields, NF, &g)))
		return rc;
	return sb_proj_put(t, mkey, member_key(mkey, name, ev->offset), ev->run,
			   strlen(ev->run));
}

static int groups_apply(struct sb_proj_txn *t, const struct sb_event *ev,
			const msgpack_object *map)
{
	if (!strcmp(ev->type, "group.created"))
		return on_group_created(t, ev, map);
	if (!strcmp(ev->type, "run.created"))
		return on_run_created(t, ev, map);
	return SB_OK;
}

const struct sb_projection sb_proj_groups = {
	.name = "groups",
	.version = 1,
	.init = NULL,
	.apply = groups_apply,
};

int sb_group_get(sb_projector *p, const char *name, struct sb_group *g)
{
	char key[GROUP_KEY_MAX];
	struct sb_proj_txn t;
	int rc;

	if (strlen(name) >= sizeof g->name)
		return sb_seterr(SB_ERR_NOTFOUND, "no group '%.64s'", name);
	if ((rc = sb_projector_read(p, "groups", &t)))
		return rc;
	rc = sb_fields_load(&t, key, group_key(key, name), group_fields, NF, g, sizeof *g);
	mdb_txn_abort(t.txn);
	if (rc == SB_ERR_NOTFOUND)
		return sb_seterr(rc, "no group '%s'", name);
	return rc;
}

int sb_group_runs(sb_projector *p, const char *name, char (**runs)[SB_RUN_MAX], size_t *n)
{
	uint8_t key[GROUP_KEY_MAX + 9];
	size_t pl = member_key(key, name, 0) - 8, cap = 0;
	char(*v)[SB_RUN_MAX] = NULL;
	struct sb_proj_txn t;
	MDB_cursor *c;
	MDB_val k = {pl, key}, d;
	int rc, mrc;

	*runs = NULL;
	*n = 0;
	if ((rc = sb_projector_read(p, "groups", &t)))
		return rc;
	if (mdb_cursor_open(t.txn, t.dbi, &c)) {
		mdb_txn_abort(t.txn);
		return sb_seterr(SB_ERR_IO, "cannot read the groups projection");
	}
	for (mrc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
	     mrc == 0 && k.mv_size == pl + 8 && !memcmp(k.mv_data, key, pl);
	     mrc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
		if (*n == cap) {
			char(*m)[SB_RUN_MAX] = realloc(v, (cap = cap ? 2 * cap : 16) * sizeof *v);
			if (!m) {
				rc = SB_ERR_NOMEM;
				break;
			}
			v = m;
		}
		snprintf(v[*n], SB_RUN_MAX, "%.*s",
			 (int)(d.mv_size < SB_RUN_MAX ? d.mv_size : SB_RUN_MAX - 1),
			 (const char *)d.mv_data);
		(*n)++;
	}
	mdb_cursor_close(c);
	mdb_txn_abort(t.txn);
	if (rc) {
		free(v);
		*n = 0;
		return rc;
	}
	*runs = v;
	return SB_OK;
}

int sb_group_each(sb_projector *p, int (*fn)(void *ctx, const struct sb_group *g), void *ctx)
{
	struct sb_proj_txn t;
	struct sb_group g;
	MDB_cursor *c;
	MDB_val k = {2, "g/"}, d;
	msgpack_zone zone;
	msgpack_object map;
	int rc, mrc, stop = 0;

	if ((rc = sb_projector_read(p, "groups", &t)))
		return rc;
	if (!msgpack_zone_init(&zone, 8192)) {
		mdb_txn_abort(t.txn);
		return SB_ERR_NOMEM;
	}
	if (mdb_cursor_open(t.txn, t.dbi, &c)) {
		rc = sb_seterr(SB_ERR_IO, "cannot read the groups projection");
		goto out;
	}
	for (mrc = mdb_cursor_get(c, &k, &d, MDB_SET_RANGE);
	     mrc == 0 && !stop && k.mv_size > 2 && !memcmp(k.mv_data, "g/", 2);
	     mrc = mdb_cursor_get(c, &k, &d, MDB_NEXT)) {
		msgpack_zone_clear(&zone);
		memset(&g, 0, sizeof g);
		if (sb_payload_parse(d.mv_data, d.mv_size, &zone, &map) ||
		    sb_fields_unpack(group_fields, NF, &map, &g)) {
			rc = sb_seterr(SB_ERR_CORRUPT, "a group record does not read back");
			break;
		}
		stop = fn(ctx, &g);
	}
	mdb_cursor_close(c);
out:
	msgpack_zone_destroy(&zone);
	mdb_txn_abort(t.txn);
	return rc;
}

int sb_group_pack(const struct sb_group *g, msgpack_packer *pk)
{
	return sb_fields_pack(group_fields, NF, g, pk);
}
