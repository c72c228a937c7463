/* runstate.c - the run state projection: one record per run. */
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "engine/log/mdb.h"
#include "engine/payload.h"
#include "projections/fields.h"
#include "projections/views.h"

#define RS struct sb_runstate
static const struct sb_fdesc rs_fields[] = {
	SB_FSTR(RS, run),         SB_FSTR(RS, name),        SB_FSTR(RS, group),
	SB_FSTR(RS, template),    SB_FSTR(RS, template_hash),   SB_FSTR(RS, model),
	SB_FSTR(RS, network),     SB_FSTR(RS, status),      SB_FSTR(RS, reason),
	SB_FSTR(RS, parent),      SB_FSTR(RS, last_type),   SB_FU64(RS, parent_offset),
	SB_FU64(RS, cpus),        SB_FU64(RS, memory_mib),  SB_FU64(RS, timeout_s),
	SB_FU64(RS, budget_nusd), SB_FU64(RS, created_ns),  SB_FU64(RS, started_ns),
	SB_FU64(RS, ended_ns),    SB_FI64(RS, exit_status), SB_FU64(RS, has_exit),
	SB_FU64(RS, cost_nusd),   SB_FU64(RS, last_offset), SB_FU64(RS, last_seq),
	SB_FU64(RS, events),      SB_FU64(RS, forks),       SB_FU64(RS, snapshots),
	SB_FSTR(RS, parent_snapshot), SB_FU64(RS, resumed_offset),
	SB_FU64(RS, net_lookups), SB_FU64(RS, net_denied), SB_FU64(RS, net_changes),
	SB_FU64(RS, active_ns),   SB_FSTR(RS, progress_label), SB_FU64(RS, progress_count),
	SB_FU64(RS, progress_total), SB_FU64(RS, turns),    SB_FU64(RS, tool_calls),
	SB_FU64(RS, removed),     SB_FSTR(RS, runner),
};
#define NF (sizeof rs_fields / sizeof rs_fields[0])

int sb_runstate_pack(const struct sb_runstate *rs, msgpack_packer *pk)
{
	return sb_fields_pack(rs_fields, NF, rs, pk);
}

int sb_runstate_unpack(const msgpack_object *map, struct sb_runstate *rs)
{
	memset(rs, 0, sizeof *rs);
	return sb_fields_unpack(rs_fields, NF, map, rs);
}

static void set_str(char *dst, size_t cap, const msgpack_object *map, const char *key)
{
	if (sb_map_str(map, key, dst, cap) < 0)
		dst[0] = 0;
}

#define SET(field, key) set_str(rs->field, sizeof rs->field, map, key)

/* One more fork of parent (its record, when it has one). */
static int count_fork(struct sb_proj_txn *t, const char *parent)
{
	struct sb_runstate ps;
	size_t kl = strlen(parent);
	int rc = sb_fields_load(t, parent, kl, rs_fields, NF, &ps, sizeof ps);

	if (rc == SB_ERR_NOTFOUND)
		return SB_OK;
	if (rc)
		return rc;
	ps.forks++;
	return sb_fields_store(t, parent, kl, rs_fields, NF, &ps);
}

/* A run.policy.resolved: its settings. */
static void fold_policy(struct sb_runstate *rs, const msgpack_object *map)
{
	SET(template_hash, "template_hash");
	SET(network, "network");
	if (sb_map_get(map, "model"))
		SET(model, "model");
	rs->cpus = sb_map_u64(map, "cpus", 0);
	rs->memory_mib = sb_map_u64(map, "memory_mib", 0);
	rs->timeout_s = sb_map_u64(map, "timeout_s", 0);
	rs->budget_nusd = sb_map_u64(map, "budget_nusd", 0);
}

/* A run.resumed or run.forked: where the run continues from. */
static void fold_from(struct sb_runstate *rs, const struct sb_event *ev, const msgpack_object *map)
{
	char from[SB_RUN_MAX] = "";

	if (!strcmp(ev->type, "run.forked")) {
		SET(parent, "from_run");
		SET(parent_snapshot, "snapshot");
		rs->parent_offset = sb_map_u64(map, "from_offset", 0);
		return;
	}
	/* it goes on: live again, its end to come; resumed from its own
	 * snapshot it keeps its lineage (it is not its own parent) */
	sb_map_str(map, "from_run", from, sizeof from);
	if (strcmp(from, ev->run)) {
		SET(parent, "from_run");
		SET(parent_snapshot, "snapshot");
		rs->parent_offset = sb_map_u64(map, "from_offset", 0);
	}
	rs->resumed_offset = ev->offset;
	rs->budget_nusd = sb_map_u64(map, "budget_nusd", rs->budget_nusd); /* raised */
	rs->started_ns = 0;
	strcpy(rs->status, "created");
	rs->reason[0] = 0;
	rs->has_exit = 0;
	rs->exit_status = 0;
	rs->ended_ns = 0;
}

/* The events of a run's lifecycle (run.*). */
static void fold_run(struct sb_runstate *rs, const struct sb_event *ev, const msgpack_object *map)
{
	const char *ty = ev->type;
	char reason[sizeof rs->reason] = "";

	if (!strcmp(ty, "run.created")) {
		SET(name, "name");
		SET(group, "group");
		SET(template, "template");
		SET(model, "model");
		SET(runner, "runner");
		if (!rs->runner[0]) /* recorded before runners: the local one */
			strcpy(rs->runner, "local");
	} else if (!strcmp(ty, "run.policy.resolved")) {
		fold_policy(rs, map);
	} else if (!strcmp(ty, "run.queued")) {
		if (sb_runstate_is_live(rs))
			strcpy(rs->status, "queued");
	} else if (!strcmp(ty, "run.started")) {
		if (sb_runstate_is_live(rs))
			strcpy(rs->status, "running");
		rs->started_ns = ev->ts_ns;
	} else if (!strcmp(ty, "run.exited")) {
		rs->exit_status = sb_map_i64(map, "status", 0);
		rs->has_exit = 1;
	} else if (!strcmp(ty, "run.stopped")) {
		sb_map_str(map, "reason", reason, sizeof reason);
		if (!strcmp(rs->status, "failed")) {
			/* a failure stays the verdict */
		} else if (!strcmp(reason, "exited") || !strcmp(reason, "timeout") ||
			   !strcmp(reason, "failed") || !strcmp(reason, "budget")) {
			strcpy(rs->status, reason);
		} else {
			strcpy(rs->status, "stopped");
			snprintf(rs->reason, sizeof rs->reason, "%s", reason);
		}
		rs->ended_ns = ev->ts_ns;
		if (rs->started_ns && rs->ended_ns > rs->started_ns)
			rs->active_ns += rs->ended_ns - rs->started_ns;
	} else if (!strcmp(ty, "run.failed")) {
		strcpy(rs->status, "failed");
		SET(reason, "reason");
		if (!rs->ended_ns)
			rs->ended_ns = ev->ts_ns;
	} else if (!strcmp(ty, "run.resumed") || !strcmp(ty, "run.forked")) {
		fold_from(rs, ev, map);
	} else if (!strcmp(ty, "run.removed")) {
		rs->removed = 1; /* its files are freed; its snapshots with them */
		rs->snapshots = 0;
	}
}

/* What the agent did: its progress, turns and tools. */
static void fold_agent(struct sb_runstate *rs, const struct sb_event *ev,
		       const msgpack_object *map)
{
	const char *ty = ev->type;

	if (!strcmp(ty, "agent.progress")) {
		SET(progress_label, "label");
		rs->progress_count = sb_map_u64(map, "count", 0);
		rs->progress_total = sb_map_u64(map, "total", 0);
	} else if (!strcmp(ty, "agent.turn.completed")) {
		rs->turns++;
	} else if (!strcmp(ty, "agent.tool.completed")) {
		rs->tool_calls++;
	} else if (!strcmp(ty, "agent.usage.updated") && ev->source == SB_SRC_GATEWAY) {
		rs->cost_nusd += sb_map_u64(map, "cost_nusd", 0);
	}
}

void sb_runstate_fold(struct sb_runstate *rs, const struct sb_event *ev,
		      const msgpack_object *map)
{
	const char *ty = ev->type;

	if (!strncmp(ty, "run.", 4)) {
		fold_run(rs, ev, map);
	} else if (!strcmp(ty, "snapshot.saved")) {
		rs->snapshots++;
	} else if (!strcmp(ty, "snapshot.removed")) {
		rs->snapshots -= rs->snapshots > 0;
	} else if (!strncmp(ty, "agent.", 6)) {
		fold_agent(rs, ev, map);
	} else if (!strcmp(ty, "budget.exceeded")) {
		snprintf(rs->reason, sizeof rs->reason, "budget exceeded");
	} else if (!strcmp(ty, "net.resolved")) {
		rs->net_lookups += sb_map_u64(map, "count", 0);
	} else if (!strcmp(ty, "net.denied")) {
		rs->net_denied += sb_map_u64(map, "count", 0);
	} else if (!strncmp(ty, "net.grant.", 10)) {
		rs->net_changes++;
	}
	snprintf(rs->last_type, sizeof rs->last_type, "%s", ty);
	rs->last_offset = ev->offset;
	rs->last_seq = ev->seq;
	rs->events++;
}

static int rs_apply(struct sb_proj_txn *t, const struct sb_event *ev, const msgpack_object *map)
{
	struct sb_runstate rs;
	size_t kl = strlen(ev->run);
	int rc;

	if (!strncmp(ev->type, "group.", 6))
		return SB_OK; /* a group's stream, not a run's */
	rc = sb_fields_load(t, ev->run, kl, rs_fields, NF, &rs, sizeof rs);
	if (rc == SB_ERR_NOTFOUND) {
		memcpy(rs.run, ev->run, kl + 1);
		strcpy(rs.status, "created");
		rs.created_ns = ev->ts_ns;
	} else if (rc) {
		return rc;
	}
	sb_runstate_fold(&rs, ev, map);
	if (!strcmp(ev->type, "run.forked") && (rc = count_fork(t, rs.parent)))
		return rc;
	return sb_fields_store(t, ev->run, kl, rs_fields, NF, &rs);
}

const struct sb_projection sb_proj_runstate = {
	.name = "runstate",
	/* 1: a run its budget stopped has status budget;
	 * 2: its fields template and template_hash (were tmpl, tmpl_hash);
	 * 3: active_ns; a resume from the run's own snapshot leaves its
	 *    lineage as it was;
	 * 4: status queued;
	 * 5: progress_label, progress_count, progress_total (agent.progress),
	 *    turns and tool_calls (completed);
	 * 6: removed (run.removed) */
	.version = 8,
	.init = NULL,
	.apply = rs_apply,
};

int sb_runstate_get(sb_projector *p, const char *run, struct sb_runstate *rs)
{
	struct sb_proj_txn t;
	int rc;

	if ((rc = sb_projector_read(p, "runstate", &t)))
		return rc;
	rc = sb_fields_load(&t, run, strlen(run), rs_fields, NF, rs, sizeof *rs);
	mdb_txn_abort(t.txn);
	if (rc == SB_ERR_NOTFOUND)
		return sb_seterr(rc, "no run '%s'", run);
	return rc;
}

int sb_runstate_each(sb_projector *p, int (*fn)(void *ctx, const struct sb_runstate *rs), void *ctx)
{
	struct sb_proj_txn t;
	struct sb_runstate rs;
	MDB_cursor *c;
	MDB_val k, v;
	msgpack_zone zone;
	msgpack_object map;
	int rc;

	if ((rc = sb_projector_read(p, "runstate", &t)))
		return rc;
	if (!msgpack_zone_init(&zone, 2048)) {
		mdb_txn_abort(t.txn);
		return SB_ERR_NOMEM;
	}
	if ((rc = mdb_cursor_open(t.txn, t.dbi, &c))) {
		rc = sb_log_mdb_err(rc, "runstate: read");
		goto out;
	}
	while ((rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) == 0) {
		msgpack_zone_clear(&zone);
		if ((rc = sb_payload_parse(v.mv_data, v.mv_size, &zone, &map)) ||
		    (rc = sb_runstate_unpack(&map, &rs)) || (rc = fn(ctx, &rs)))
			break;
	}
	if (rc == MDB_NOTFOUND)
		rc = SB_OK;
	mdb_cursor_close(c);
out:
	msgpack_zone_destroy(&zone);
	mdb_txn_abort(t.txn);
	return rc;
}

int sb_runstate_is_live(const struct sb_runstate *rs)
{
	return !strcmp(rs->status, "created") || !strcmp(rs->status, "queued") ||
	       !strcmp(rs->status, "running");
}

struct live_ctx {
	const char *group;
	char (*runs)[SB_RUN_MAX];
	size_t n, cap;
};

static int live_cb(void *vctx, const struct sb_runstate *rs)
{
	struct live_ctx *c = vctx;

	if (!sb_runstate_is_live(rs) || (c->group && strcmp(rs->group, c->group)))
		return 0;
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 16;
		void *p = realloc(c->runs, cap * sizeof *c->runs);
		if (!p)
			return SB_ERR_NOMEM;
		c->runs = p;
		c->cap = cap;
	}
	memcpy(c->runs[c->n++], rs->run, SB_RUN_MAX);
	return 0;
}

int sb_runstate_live(sb_projector *p, const char *group, char (**runs)[SB_RUN_MAX], size_t *n)
{
	struct live_ctx c = {group, NULL, 0, 0};
	int rc = sb_runstate_each(p, live_cb, &c);

	if (rc) {
		free(c.runs);
		c.runs = NULL;
		c.n = 0;
	}
	*runs = c.runs;
	*n = c.n;
	return rc;
}
