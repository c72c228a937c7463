/* costs.c - token and cost totals per run, per group and per model.
 *
 * Keys: "run/<id>", "group/<name>", "model/<name>" -> totals, and
 * "rungroup/<id>" -> the run's group (from run.created), so usage events,
 * which name only the run, also count for its group. Only usage written by
 * the gateway counts: a guest can never change a cost.
 */
#include <stdio.h>
#include <string.h>

#include "engine/error.h"
#include "engine/log/mdb.h"
#include "engine/payload.h"
#include "projections/fields.h"
#include "projections/views.h"

#define C struct sb_cost
static const struct sb_fdesc cost_fields[] = {
	SB_FU64(C, input_tokens), SB_FU64(C, output_tokens), SB_FU64(C, cached_tokens),
	SB_FU64(C, cost_nusd),    SB_FU64(C, calls),
};
#define NF (sizeof cost_fields / sizeof cost_fields[0])

struct group_rec {
	char group[64];
};
static const struct sb_fdesc group_fields[] = {SB_FSTR(struct group_rec, group)};

static int add_usage(struct sb_proj_txn *t, const char *key, const struct sb_cost *u)
{
	struct sb_cost c;
	int rc = sb_fields_load(t, key, strlen(key), cost_fields, NF, &c, sizeof c);

	if (rc && rc != SB_ERR_NOTFOUND)
		return rc;
	c.input_tokens += u->input_tokens;
	c.output_tokens += u->output_tokens;
	c.cached_tokens += u->cached_tokens;
	c.cost_nusd += u->cost_nusd;
	c.calls += u->calls;
	return sb_fields_store(t, key, strlen(key), cost_fields, NF, &c);
}

static int costs_apply(struct sb_proj_txn *t, const struct sb_event *ev, const msgpack_object *map)
{
	char key[192], model[96];
	struct group_rec g;
	struct sb_cost u;
	int rc;

	if (!strcmp(ev->type, "run.created")) {
		memset(&g, 0, sizeof g);
		sb_map_str(map, "group", g.group, sizeof g.group);
		if (!g.group[0])
			return SB_OK;
		snprintf(key, sizeof key, "rungroup/%s", ev->run);
		return sb_fields_store(t, key, strlen(key), group_fields, 1, &g);
	}
	if (strcmp(ev->type, "agent.usage.updated") || ev->source != SB_SRC_GATEWAY)
		return SB_OK;
	u.input_tokens = sb_map_u64(map, "input_tokens", 0);
	u.output_tokens = sb_map_u64(map, "output_tokens", 0);
	u.cached_tokens = sb_map_u64(map, "cached_tokens", 0);
	u.cost_nusd = sb_map_u64(map, "cost_nusd", 0);
	u.calls = 1;
	snprintf(key, sizeof key, "run/%s", ev->run);
	if ((rc = add_usage(t, key, &u)))
		return rc;
	sb_map_str(map, "model", model, sizeof model);
	snprintf(key, sizeof key, "model/%s", model);
	if ((rc = add_usage(t, key, &u)))
		return rc;
	snprintf(key, sizeof key, "rungroup/%s", ev->run);
	rc = sb_fields_load(t, key, strlen(key), group_fields, 1, &g, sizeof g);
	if (rc == SB_ERR_NOTFOUND)
		return SB_OK;
	if (rc)
		return rc;
	snprintf(key, sizeof key, "group/%s", g.group);
	return add_usage(t, key, &u);
}

const struct sb_projection sb_proj_costs = {
	.name = "costs",
	.init = NULL,
	.apply = costs_apply,
};

int sb_costs_get(sb_projector *p, const char *scope, const char *id, struct sb_cost *c)
{
	struct sb_proj_txn t;
	char key[192];
	int rc;

	snprintf(key, sizeof key, "%s/%s", scope, id);
	if ((rc = sb_projector_read(p, "costs", &t)))
		return rc;
	rc = sb_fields_load(&t, key, strlen(key), cost_fields, NF, c, sizeof *c);
	mdb_txn_abort(t.txn);
	return rc == SB_ERR_NOTFOUND ? SB_OK : rc;
}

int sb_costs_each(sb_projector *p, const char *scope,
		  int (*fn)(void *ctx, const char *id, const struct sb_cost *c), void *ctx)
{
	struct sb_proj_txn t;
	struct sb_cost c;
	MDB_cursor *cur;
	MDB_val k, v;
	char prefix[72], id[192];
	size_t pl;
	int rc;

	pl = (size_t)snprintf(prefix, sizeof prefix, "%s/", scope);
	if ((rc = sb_projector_read(p, "costs", &t)))
		return rc;
	if ((rc = mdb_cursor_open(t.txn, t.dbi, &cur))) {
		mdb_txn_abort(t.txn);
		return sb_log_mdb_err(rc, "costs: read");
	}
	k.mv_size = pl;
	k.mv_data = prefix;
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (k.mv_size < pl || memcmp(k.mv_data, prefix, pl) || k.mv_size - pl >= sizeof id)
			break;
		memcpy(id, (char *)k.mv_data + pl, k.mv_size - pl);
		id[k.mv_size - pl] = 0;
		if ((rc = sb_fields_load(&t, k.mv_data, k.mv_size, cost_fields, NF, &c, sizeof c)) ||
		    (rc = fn(ctx, id, &c)))
			break;
	}
	if (rc == MDB_NOTFOUND || (rc == 0))
		rc = SB_OK;
	mdb_cursor_close(cur);
	mdb_txn_abort(t.txn);
	return rc;
}
