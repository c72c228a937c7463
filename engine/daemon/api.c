/* api.c - the control API: one handler per request op (see SPEC.md). */
#include "engine/daemon/api.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/daemon/token.h"
#include "engine/error.h"
#include "engine/gateway/secrets.h"
#include "engine/home.h"
#include "engine/payload.h"
#include "engine/runs/runs.h"
#include "engine/spec.h"
#include "engine/template.h"
#include "engine/text.h"
#include "engine/units.h"
#include "engine/daemon/wire.h"
#include "projections/views.h"
#include "vmm/fsread.h"

#include <time.h>

#define READ_LIMIT_DEFAULT 1000
#define READ_LIMIT_MAX	   10000
#define OP_LATER	   2 /* an op's return: it answers later (req_finish) */

struct sb_api {
	struct sb_api_env env;
};

/* One request, from its arrival to its reply. */
struct req {
	const struct sb_api_env *e;
	sb_sp_req *sp;
	struct sb_post post; /* an ON_LOOP op's way to the loop */
	void *body;
	size_t len;
	const struct op *op;
	const char *who; /* the client, as operator events name it */
	msgpack_zone zone;
	const msgpack_object *args;
	msgpack_object argv;
	msgpack_sbuffer *out, outbuf;
	sb_mapw reply; /* {ok: true, ...}: the op packs its fields into it */
	int caught_up;	      /* the projections caught up for it */
	char run[SB_RUN_MAX]; /* the run it stops */
};

/* Brings the projections up to the newest event before r reads them, once
 * per request, never on the loop (it waits for a rebuild, and commits): an
 * op of the loop that reads them has them caught up on its worker first
 * (READS_PROJ). An error (a corrupt record) leaves them where they are,
 * still consistent. */
static void catch_up(struct req *r)
{
	if (r->caught_up)
		return;
	sb_projector_catch_up(r->e->proj, NULL);
	r->caught_up = 1;
}

/* Copies the string argument key into buf; errors name the argument. */
static int arg_str(struct req *r, const char *key, char *buf, size_t cap, int required)
{
	int n = sb_map_str(r->args, key, buf, cap);

	if (n < 0) {
		buf[0] = 0;
		if (sb_map_get(r->args, key))
			return sb_seterr(SB_ERR_INVAL, "argument '%s' must be a string",
					 key);
		return required ? sb_seterr(SB_ERR_INVAL, "argument '%s' missing", key)
				: SB_OK;
	}
	if ((size_t)n >= cap)
		return sb_seterr(SB_ERR_INVAL, "argument '%s' too long", key);
	if (strlen(buf) != (size_t)n)
		return sb_seterr(SB_ERR_INVAL, "argument '%s' contains a NUL byte", key);
	return SB_OK;
}

/* Reads the optional unsigned argument key into *out (dflt when absent). */
static int arg_u64(struct req *r, const char *key, uint64_t dflt, uint64_t *out)
{
	const msgpack_object *v = sb_map_get(r->args, key);

	*out = dflt;
	if (!v)
		return SB_OK;
	if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return sb_seterr(SB_ERR_INVAL,
				 "argument '%s' must be a non-negative integer", key);
	*out = v->via.u64;
	return SB_OK;
}

static void pack_sp_stats(sb_mapw *reply, const char *key, sb_sp *s)
{
	struct sb_sp_stats st;
	sb_mapw m;

	if (!s) {
		sb_mapw_nil(reply, key);
		return;
	}
	sb_sp_stats(s, &st);
	sb_mapw_begin(&m, sb_mapw_key(reply, key));
	sb_mapw_u64(&m, "conns", st.conns);
	sb_mapw_u64(&m, "accepted", st.accepted);
	sb_mapw_u64(&m, "refused_conns", st.refused_conns);
	sb_mapw_u64(&m, "dropped_conns", st.dropped_conns);
	sb_mapw_u64(&m, "requests", st.requests);
	sb_mapw_u64(&m, "denied", st.denied);
	sb_mapw_u64(&m, "pub_dropped", st.pub_dropped);
	sb_mapw_end(&m);
}

/* health's runners: each runner's capacity, what its runs hold and how
 * many wait (none without a run manager). Errors: SB_ERR_NOMEM. */
static int pack_runners(sb_mapw *reply, struct sb_runs *rs)
{
	size_t n = rs ? sb_runs_capacity_read(rs, NULL, 0) : 0;
	struct sb_runs_capacity *c = n ? calloc(n, sizeof *c) : NULL;
	msgpack_packer *pk;

	if (n && !c)
		return SB_ERR_NOMEM;
	if (n)
		sb_runs_capacity_read(rs, c, n);
	pk = sb_mapw_key(reply, "runners");
	msgpack_pack_array(pk, n);
	for (size_t i = 0; i < n; i++) {
		sb_mapw m;

		sb_mapw_begin(&m, pk);
		sb_mapw_str(&m, "name", c[i].name);
		sb_mapw_u64(&m, "cpus", c[i].cpus);
		sb_mapw_u64(&m, "memory_mib", c[i].memory_mib);
		sb_mapw_u64(&m, "used_cpus", c[i].used_cpus);
		sb_mapw_u64(&m, "used_memory_mib", c[i].used_memory_mib);
		sb_mapw_u64(&m, "queued", c[i].queued);
		sb_mapw_end(&m);
	}
	free(c);
	return SB_OK;
}

static int op_health(struct req *r)
{
	uint64_t last;
	int lrc = sb_log_last_offset(r->e->log, &last);

	/* a live daemon answers health: a log it cannot read is a nil
	 * last_offset and log_error, never 0 events */
	if (lrc)
		sb_mapw_str(&r->reply, "log_error", sb_errmsg(lrc));
	sb_mapw_str(&r->reply, "version", SB_VERSION);
	sb_mapw_u64(&r->reply, "pid", (uint64_t)getpid());
	if (lrc)
		sb_mapw_nil(&r->reply, "last_offset");
	else
		sb_mapw_u64(&r->reply, "last_offset", last);
	sb_mapw_u64(&r->reply, "checkpoint", sb_projector_checkpoint(r->e->proj));
	sb_mapw_u64(&r->reply, "uptime_s",
		     (uint64_t)((double)sb_now_ms() / 1000 - r->e->started));
	pack_sp_stats(&r->reply, "local", r->e->local);
	pack_sp_stats(&r->reply, "remote", r->e->remote);
	return pack_runners(&r->reply, r->e->runs);
}

struct resolve_ctx {
	const char *want;
	size_t wl;
	char found[SB_RUN_MAX];
	uint64_t newest;
	int matches;
};

static int resolve_cb(void *vctx, const struct sb_runstate *rs)
{
	struct resolve_ctx *c = vctx;

	if (!strcmp(rs->run, c->want)) {
		snprintf(c->found, sizeof c->found, "%s", rs->run);
		c->matches = 1;
		return 1;
	}
	if (!strcmp(rs->name, c->want)) {
		/* a name names its newest run */
		if (rs->created_ns >= c->newest) {
			c->newest = rs->created_ns;
			snprintf(c->found, sizeof c->found, "%s", rs->run);
		}
		c->matches = c->matches < 1 ? 1 : c->matches;
		return 0;
	}
	if (c->wl >= 4 && !strncmp(rs->run, c->want, c->wl)) {
		snprintf(c->found, sizeof c->found, "%s", rs->run);
		c->matches++;
	}
	return 0;
}

/* Resolves want as resolve_run does; with log_only (the caller reads the
 * log, not the projections) a run's whole id of a run projected already
 * is taken without catching up, which waits for the log's writer. */
static int resolve(struct req *r, const char *want, int log_only, char out[SB_RUN_MAX])
{
	struct resolve_ctx c = {want, strlen(want), "", 0, 0};
	int rc;

	if (log_only) {
		/* a whole id wins over every other match */
		if ((rc = sb_runstate_each(r->e->proj, resolve_cb, &c)) < 0)
			return rc;
		if (c.matches == 1 && !strcmp(c.found, want)) {
			memcpy(out, c.found, SB_RUN_MAX);
			return SB_OK;
		}
		c = (struct resolve_ctx){want, strlen(want), "", 0, 0};
	}
	catch_up(r);
	if ((rc = sb_runstate_each(r->e->proj, resolve_cb, &c)) < 0)
		return rc;
	if (c.matches == 0)
		return sb_seterr(SB_ERR_NOTFOUND, "no run '%s'", want);
	if (c.matches > 1)
		return sb_seterr(SB_ERR_AMBIGUOUS,
				 "run '%s' is ambiguous: give more characters", want);
	memcpy(out, c.found, SB_RUN_MAX);
	return SB_OK;
}

/* Resolves a run id, a unique id prefix of 4+ characters, or a run name,
 * with the projections caught up (so the caller reads them fresh). */
static int resolve_run(struct req *r, const char *want, char out[SB_RUN_MAX])
{
	return resolve(r, want, 0, out);
}

static int arg_run(struct req *r, char run[SB_RUN_MAX])
{
	char want[96];
	int rc;

	if ((rc = arg_str(r, "run", want, sizeof want, 1)))
		return rc;
	return resolve_run(r, want, run);
}

static int op_run_resolve(struct req *r)
{
	char run[SB_RUN_MAX];
	int rc = arg_run(r, run);

	if (rc)
		return rc;
	sb_mapw_str(&r->reply, "run", run);
	return SB_OK;
}

static int type_wanted(const msgpack_object *types, const char *type)
{
	if (!types || types->type != MSGPACK_OBJECT_ARRAY || types->via.array.size == 0)
		return 1;
	for (uint32_t i = 0; i < types->via.array.size; i++) {
		const msgpack_object *t = &types->via.array.ptr[i];
		size_t n = t->type == MSGPACK_OBJECT_STR ? t->via.str.size : 0;
		/* "agent.tool" matches agent.tool.started and agent.tool.completed */
		if (n && !strncmp(type, t->via.str.ptr, n) &&
		    (type[n] == 0 || type[n] == '.'))
			return 1;
	}
	return 0;
}

/* Finds the first sequence number of run whose event has an offset >= from.
 * A run's offsets grow with its sequence numbers, so a binary search over
 * the sequence finds it without reading the run from its start. */
static int run_seq_at(sb_log *log, const char *run, uint64_t from, uint64_t *seq)
{
	uint64_t lo = 1, hi;
	sb_log_iter *it;
	struct sb_event ev;
	int rc;

	if ((rc = sb_log_last_seq(log, run, &hi)))
		return rc;
	hi++;
	while (from > 1 && lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if ((rc = sb_log_iter_open_run(log, run, mid, &it)))
			return rc;
		rc = sb_log_iter_next(it, &ev);
		sb_log_iter_close(it);
		if (rc < 0)
			return rc;
		if (rc == SB_END || ev.offset >= from)
			hi = mid;
		else
			lo = mid + 1;
	}
	*seq = lo;
	return SB_OK;
}

/* Reads the optional boolean argument key into *out (0 when absent). */
static int arg_bool(struct req *r, const char *key, int *out)
{
	const msgpack_object *v = sb_map_get(r->args, key);

	*out = 0;
	if (!v)
		return SB_OK;
	if (v->type != MSGPACK_OBJECT_BOOLEAN)
		return sb_seterr(SB_ERR_INVAL, "argument '%s' must be a boolean", key);
	*out = v->via.boolean;
	return SB_OK;
}

/* events.read {run?, from, limit, types?, records?}: events with offset >=
 * from, as wire event maps ("events"), or with records: true as their
 * stored records, sent as they are ("records", each a bin; the client
 * decodes and checks them with sb_record_decode). */
static int op_events_read(struct req *r)
{
	char want[96], run[SB_RUN_MAX] = "";
	uint64_t from, limit, seq, next, last, n = 0, scanned = 0;
	const msgpack_object *types = sb_map_get(r->args, "types");
	sb_log_iter *it;
	struct sb_event ev;
	const void *rec;
	msgpack_packer *pk;
	uint8_t *count;
	size_t at, len;
	int rc, records;

	if ((rc = sb_log_last_offset(r->e->log, &last)) ||
	    (rc = arg_str(r, "run", want, sizeof want, 0)) ||
	    (rc = arg_u64(r, "from", 0, &from)) ||
	    (rc = arg_u64(r, "limit", READ_LIMIT_DEFAULT, &limit)) ||
	    (rc = arg_bool(r, "records", &records)))
		return rc;
	if (types && types->type != MSGPACK_OBJECT_ARRAY)
		return sb_seterr(SB_ERR_INVAL,
				 "argument 'types' must be an array of strings");
	for (uint32_t i = 0; types && i < types->via.array.size; i++)
		if (types->via.array.ptr[i].type != MSGPACK_OBJECT_STR)
			return sb_seterr(SB_ERR_INVAL,
					 "argument 'types' must be an array of strings");
	if (want[0] && (rc = resolve(r, want, 1, run)))
		return rc;
	if (!limit)
		limit = READ_LIMIT_DEFAULT;
	if (limit > READ_LIMIT_MAX)
		limit = READ_LIMIT_MAX;
	next = from;
	if (run[0] && (rc = run_seq_at(r->e->log, run, from, &seq)))
		return rc;
	rc = run[0] ? sb_log_iter_open_run(r->e->log, run, seq, &it)
		    : sb_log_iter_open(r->e->log, from, &it);
	if (rc)
		return rc;
	/* The events go straight into the reply, after an array32 header
	 * whose count is filled in at the end; the other fields follow. */
	pk = sb_mapw_key(&r->reply, records ? "records" : "events");
	at = r->out->size;
	if (sb_pack_raw(pk, "\xdd\0\0\0\0", 5)) {
		sb_log_iter_close(it);
		return SB_ERR_NOMEM;
	}
	while (n < limit && scanned < 16 * READ_LIMIT_MAX &&
	       (rc = sb_log_iter_next_record(it, &ev, &rec, &len)) == SB_OK) {
		if (ev.offset < from)
			continue;
		scanned++;
		next = ev.offset + 1;
		if (!type_wanted(types, ev.type))
			continue;
		rc = records ? sb_wire_pack_record(pk, rec, len)
			     : sb_wire_pack_event(pk, &ev);
		if (rc)
			break;
		n++;
	}
	sb_log_iter_close(it);
	if (rc < 0)
		return rc;
	count = (uint8_t *)r->out->data + at + 1;
	for (int i = 3; i >= 0; i--, n >>= 8)
		count[i] = (uint8_t)n;
	sb_mapw_u64(&r->reply, "next", next);
	sb_mapw_u64(&r->reply, "last_offset", last);
	sb_mapw_bool(&r->reply, "end", rc == SB_END);
	return SB_OK;
}

static void pack_cost(msgpack_packer *pk, const struct sb_cost *c)
{
	sb_mapw m;

	sb_mapw_begin(&m, pk);
	sb_mapw_u64(&m, "input_tokens", c->input_tokens);
	sb_mapw_u64(&m, "output_tokens", c->output_tokens);
	sb_mapw_u64(&m, "cached_tokens", c->cached_tokens);
	sb_mapw_u64(&m, "cost_nusd", c->cost_nusd);
	sb_mapw_u64(&m, "calls", c->calls);
	sb_mapw_end(&m);
}

/* Items packed into a buffer of their own while they are counted, then
 * put into the reply as one array (msgpack gives the count first). */
struct items {
	msgpack_sbuffer buf;
	msgpack_packer pk;
	size_t n;
};

static void items_init(struct items *it)
{
	msgpack_sbuffer_init(&it->buf);
	msgpack_packer_init(&it->pk, &it->buf, msgpack_sbuffer_write);
	it->n = 0;
}

/* Puts key: [the items] into the reply; the caller frees it->buf. */
static void items_reply(struct req *r, const char *key, struct items *it)
{
	msgpack_packer *pk = sb_mapw_key(&r->reply, key);

	msgpack_pack_array(pk, it->n);
	if (it->n)
		sb_pack_raw(pk, it->buf.data, it->buf.size);
}

struct list_ctx {
	char group[64];
	struct items items;
};

static int list_cb(void *vctx, const struct sb_runstate *rs)
{
	struct list_ctx *c = vctx;

	if (c->group[0] && strcmp(c->group, rs->group))
		return 0;
	sb_runstate_pack(rs, &c->items.pk);
	c->items.n++;
	return 0;
}

static int op_runs_list(struct req *r)
{
	struct list_ctx c;
	int rc;

	memset(&c, 0, sizeof c);
	if ((rc = arg_str(r, "group", c.group, sizeof c.group, 0)))
		return rc;
	catch_up(r);
	items_init(&c.items);
	if ((rc = sb_runstate_each(r->e->proj, list_cb, &c)) == SB_OK)
		items_reply(r, "runs", &c.items);
	msgpack_sbuffer_destroy(&c.items.buf);
	return rc;
}

/* Packs the payload of run's first event of type as key (nil if none). */
static int pack_first_payload(struct req *r, const char *run, const char *type,
			      const char *key)
{
	sb_log_iter *it;
	struct sb_event ev;
	int rc;

	if ((rc = sb_log_iter_open_run(r->e->log, run, 1, &it)))
		return rc;
	while ((rc = sb_log_iter_next(it, &ev)) == SB_OK && strcmp(ev.type, type))
		;
	if (rc == SB_OK)
		sb_pack_raw(sb_mapw_key(&r->reply, key), ev.payload, ev.payload_len);
	else
		sb_mapw_nil(&r->reply, key);
	sb_log_iter_close(it);
	return rc == SB_END ? SB_OK : rc;
}

static int op_run_get(struct req *r)
{
	char run[SB_RUN_MAX];
	struct sb_runstate rs;
	struct sb_cost cost;
	int rc;

	if ((rc = arg_run(r, run)) || (rc = sb_runstate_get(r->e->proj, run, &rs)) ||
	    (rc = sb_costs_get(r->e->proj, "run", run, &cost)))
		return rc;
	sb_runstate_pack(&rs, sb_mapw_key(&r->reply, "run"));
	pack_cost(sb_mapw_key(&r->reply, "cost"), &cost);
	if ((rc = pack_first_payload(r, run, "run.created", "created")) ||
	    (rc = pack_first_payload(r, run, "run.policy.resolved", "policy")))
		return rc;
	return SB_OK;
}

static int op_costs(struct req *r)
{
	char scope[16], id[96];
	struct sb_cost c;
	int rc;

	if ((rc = arg_str(r, "scope", scope, sizeof scope, 1)) ||
	    (rc = arg_str(r, "id", id, sizeof id, 1)))
		return rc;
	if (strcmp(scope, "run") && strcmp(scope, "group") && strcmp(scope, "model"))
		return sb_seterr(SB_ERR_INVAL, "scope must be run, group or model");
	catch_up(r);
	if ((rc = sb_costs_get(r->e->proj, scope, id, &c)))
		return rc;
	pack_cost(sb_mapw_key(&r->reply, "cost"), &c);
	return SB_OK;
}

/* events.append {run, type, payload}: an event from an operator (a person
 * or a tool), recorded as source operator with the client's name in "by"
 * (a "by" the payload carries is replaced): only types the schema allows
 * operators, never the host's own. */
static int op_events_append(struct req *r)
{
	char run[SB_RUN_MAX], type[SB_TYPE_MAX];
	const msgpack_object *payload = sb_map_get(r->args, "payload");
	msgpack_sbuffer buf;
	msgpack_packer pk;
	struct sb_event ev;
	sb_mapw m;
	int rc;

	if ((rc = arg_run(r, run)) || (rc = arg_str(r, "type", type, sizeof type, 1)))
		return rc;
	if (!payload || payload->type != MSGPACK_OBJECT_MAP)
		return sb_seterr(SB_ERR_INVAL, "argument 'payload' must be a map");
	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	for (uint32_t i = 0; i < payload->via.map.size; i++) {
		const msgpack_object_kv *kv = &payload->via.map.ptr[i];
		if (sb_obj_is_str(&kv->key, "by"))
			continue;
		msgpack_pack_object(sb_mapw_pair(&m), kv->key);
		msgpack_pack_object(&m.pk, kv->val);
	}
	sb_mapw_str(&m, "by", r->who);
	if ((rc = sb_mapw_end(&m)) == SB_OK)
		rc = sb_event_init(&ev, type, run, SB_SRC_OPERATOR, buf.data, buf.size);
	if (rc == SB_OK)
		rc = sb_log_append(r->e->log, &ev, 1);
	msgpack_sbuffer_destroy(&buf);
	if (rc)
		return rc;
	sb_mapw_u64(&r->reply, "offset", ev.offset);
	return SB_OK;
}

static void req_finish(struct req *r, int rc);

/* On the loop: the run manager is done with a run.create. */
static void reply_one(struct req *r, int rc, const char *key, const char *val);

static void run_created(void *ctx, int rc, const char *run)
{
	reply_one(ctx, rc, "run", run);
}

/* run.create {spec}: answered once the run is recorded and its machine
 * started (or failed to), meanwhile other requests are served. */
static int op_run_create(struct req *r)
{
	const msgpack_object *spec = sb_map_get(r->args, "spec");
	int rc;

	if (!spec || spec->type != MSGPACK_OBJECT_MAP)
		return sb_seterr(SB_ERR_INVAL, "argument 'spec' must be a map");
	if ((rc = sb_runs_create(r->e->runs, spec, run_created, r)))
		return rc;
	return OP_LATER;
}

static void run_stopped(void *ctx, int rc)
{
	struct req *r = ctx;

	reply_one(r, rc, "run", r->run);
}

/* run.stop {run}: answered once the run is stopping (or, when its record
 * alone says it is live, once its run.stopped is recorded). */
static int op_run_stop(struct req *r)
{
	int rc;

	if ((rc = arg_run(r, r->run)) ||
	    (rc = sb_runs_stop(r->e->runs, r->run, "stopped", run_stopped, r)))
		return rc;
	return OP_LATER;
}

/* --- snapshots, forks and resumes --- */

/* Answers r: {key: val} when rc is SB_OK, else the error. */
static void reply_one(struct req *r, int rc, const char *key, const char *val)
{
	if (rc == SB_OK) {
		sb_mapw_str(&r->reply, key, val);
	}
	req_finish(r, rc);
}

static void snapshot_taken(void *ctx, int rc, const char *snapshot)
{
	reply_one(ctx, rc, "snapshot", snapshot);
}

/* run.snapshot {run, memory}: answered once the snapshot is recorded. */
static int op_run_snapshot(struct req *r)
{
	char run[SB_RUN_MAX];
	const msgpack_object *mem = sb_map_get(r->args, "memory");
	int rc;

	if (mem && mem->type != MSGPACK_OBJECT_BOOLEAN)
		return sb_seterr(SB_ERR_INVAL, "argument 'memory' must be a boolean");
	if ((rc = arg_run(r, run)) ||
	    (rc = sb_runs_snapshot(r->e->runs, run, mem && mem->via.boolean,
				   snapshot_taken, r)))
		return rc;
	return OP_LATER;
}

static void run_synced(void *ctx, int rc)
{
	struct req *r = ctx;

	if (rc == SB_OK) {
		sb_mapw_bool(&r->reply, "synced", 1);
	}
	req_finish(r, rc);
}

/* space {}: the space the state directory takes, by kind (SPEC "Control
 * API"). */
static int op_space(struct req *r)
{
	struct sb_layers_usage u;
	unsigned long long blobs, log, tmpl = 0, cache = 0;
	char path[4096];
	int rc;

	if ((rc = sb_runs_usage(r->e->runs, &u)) || (rc = sb_log_usage(r->e->log, &blobs, &log)))
		return rc;
	if (sb_template_store(r->e->home, path, sizeof path) == SB_OK)
		tmpl = sb_du(path);
	if (sb_home_path(r->e->home, "cache", path, sizeof path) == SB_OK)
		cache = sb_du(path);
	sb_mapw_u64(&r->reply, "runs", u.nruns);
	sb_mapw_u64(&r->reply, "runs_bytes", u.runs);
	sb_mapw_u64(&r->reply, "snapshots", u.nsnapshots);
	sb_mapw_u64(&r->reply, "snapshots_bytes", u.snapshots);
	sb_mapw_u64(&r->reply, "memory_snapshots", u.nmemory);
	sb_mapw_u64(&r->reply, "memory_bytes", u.memory);
	sb_mapw_u64(&r->reply, "templates_bytes", tmpl);
	sb_mapw_u64(&r->reply, "cache_bytes", cache);
	sb_mapw_u64(&r->reply, "blobs_bytes", blobs);
	sb_mapw_u64(&r->reply, "log_bytes", log);
	return SB_OK;
}

/* run.sync {run}: a running run's guest writes its files out to its disk
 * (so that a read of the disk sees them); answered {synced: true} once it
 * did, at once {synced: false} for a run not running, or an error
 * (SB_ERR_TIMEOUT when the guest did not answer in time). */
static int op_run_sync(struct req *r)
{
	char run[SB_RUN_MAX];
	int rc;

	if ((rc = arg_run(r, run)))
		return rc;
	if ((rc = sb_runs_sync(r->e->runs, run, run_synced, r)) == SB_ERR_STATE) {
		sb_mapw_bool(&r->reply, "synced", 0); /* nothing runs that could write */
		return SB_OK;
	}
	return rc ? rc : OP_LATER;
}

/* Answers a run.exec or run.put: the guest's answer's fields, the
 * record's offset and, for an exec, its output. */
static void live_done(void *ctx, const struct sb_live_result *res)
{
	static const char *const names[2] = {"stdout", "stderr"};
	const msgpack_object *a = res->answer;
	struct req *r = ctx;

	if (res->rc == SB_OK) {
		for (uint32_t i = 0; i < a->via.map.size; i++) {
			const msgpack_object_kv *kv = &a->via.map.ptr[i];
			if (kv->key.type != MSGPACK_OBJECT_STR)
				continue;
			msgpack_pack_object(sb_mapw_pair(&r->reply), kv->key);
			msgpack_pack_object(&r->reply.pk, kv->val);
		}
		sb_mapw_u64(&r->reply, "offset", res->offset);
		if (res->exec) {
			for (int i = 0; i < 2; i++)
				sb_mapw_bin(&r->reply, names[i], res->out[i] ? res->out[i] : "",
					    res->out_len[i]);
			sb_mapw_bool(&r->reply, "truncated", res->truncated);
		}
	}
	req_finish(r, res->rc);
}

/* run.exec {run, argv, stdin?, timeout_ms?, output_max?}: runs a command
 * in a live run's guest; answered once it ended and is recorded. */
static int op_run_exec(struct req *r)
{
	const msgpack_object *in = sb_map_get(r->args, "stdin");
	char run[SB_RUN_MAX];
	struct sb_exec_req q = {.run = run, .argv = sb_map_get(r->args, "argv"), .by = r->who};
	int rc;

	if (in && in->type != MSGPACK_OBJECT_BIN)
		return sb_seterr(SB_ERR_INVAL, "argument 'stdin' must be bytes");
	if (in) {
		q.stdin_data = in->via.bin.size ? in->via.bin.ptr : "";
		q.stdin_len = in->via.bin.size;
	}
	q.timeout_ms = sb_map_u64(r->args, "timeout_ms", 60000);
	q.output_max = sb_map_u64(r->args, "output_max", 1u << 20);
	if ((rc = arg_run(r, run)) || (rc = sb_runs_exec(r->e->runs, &q, live_done, r)))
		return rc;
	return OP_LATER;
}

/* run.put {run, files}: writes files into a live run's guest under
 * /workspace; answered once they are written and recorded. */
static int op_run_put(struct req *r)
{
	char run[SB_RUN_MAX];
	struct sb_put_req q = {.run = run, .files = sb_map_get(r->args, "files"), .by = r->who};
	int rc;

	if ((rc = arg_run(r, run)) || (rc = sb_runs_put(r->e->runs, &q, live_done, r)))
		return rc;
	return OP_LATER;
}

static void grant_changed(void *ctx, int rc, const char *grant)
{
	reply_one(ctx, rc, "grant", grant);
}

/* net.grant {run, grant, allow}: a live run's grants changed; answered
 * once the change is in effect and recorded. */
static int op_net_grant(struct req *r)
{
	char run[SB_RUN_MAX], grant[SB_NET_HOST_MAX + 32];
	const msgpack_object *allow = sb_map_get(r->args, "allow");
	int rc;

	if (!allow || allow->type != MSGPACK_OBJECT_BOOLEAN)
		return sb_seterr(SB_ERR_INVAL, "argument 'allow' must be a boolean");
	if ((rc = arg_run(r, run)) ||
	    (rc = arg_str(r, "grant", grant, sizeof grant, 1)) ||
	    (rc = sb_runs_grant(r->e->runs, run, grant, allow->via.boolean, r->who,
				grant_changed, r)))
		return rc;
	return OP_LATER;
}

#define FORKS_MAX 64

/* The forks of one run.fork, answered when the last is made. */
struct forks {
	struct req *r;
	unsigned want, done;
	int rc;
	char err[300];
	char runs[FORKS_MAX][SB_RUN_MAX];
	unsigned n;
};

static void fork_made(void *ctx, int rc, const char *run)
{
	struct forks *f = ctx;
	msgpack_packer *pk;

	if (rc == SB_OK)
		snprintf(f->runs[f->n++], SB_RUN_MAX, "%s", run);
	else if (!f->rc) {
		f->rc = rc;
		snprintf(f->err, sizeof f->err, "%s", sb_errmsg(rc));
	}
	if (++f->done < f->want)
		return;
	rc = f->n ? SB_OK : sb_seterr(f->rc, "%s", f->err);
	if (rc == SB_OK) {
		pk = sb_mapw_key(&f->r->reply, "runs");
		msgpack_pack_array(pk, f->n);
		for (unsigned i = 0; i < f->n; i++)
			sb_pack_str(pk, f->runs[i]);
		if (f->rc) /* some were made, not all */
			sb_mapw_str(&f->r->reply, "error", f->err);
	}
	req_finish(f->r, rc);
	free(f);
}

/* The arguments a fork and a resume share: {run, snapshot, at, prompt,
 * runner, budget_nusd}. */
static int arg_from(struct req *r, struct sb_runs_from *f, char run[SB_RUN_MAX],
		    char snap[72], char runner[SB_PLAN_RUNNER_MAX], char **prompt)
{
	const msgpack_object *p = sb_map_get(r->args, "prompt");
	int rc;

	memset(f, 0, sizeof *f);
	*prompt = NULL;
	if ((rc = arg_run(r, run)) || (rc = arg_str(r, "snapshot", snap, 72, 0)) ||
	    (rc = arg_str(r, "runner", runner, SB_PLAN_RUNNER_MAX, 0)) ||
	    (rc = arg_u64(r, "at", UINT64_MAX, &f->at)) ||
	    (rc = sb_spec_u64(r->args, "budget_nusd", UINT64_MAX / 4, &f->budget_nusd)))
		return rc;
	if (snap[0] && sb_map_get(r->args, "at"))
		return sb_seterr(SB_ERR_INVAL, "give 'snapshot' or 'at', not both");
	if (!snap[0] && sb_map_get(r->args, "snapshot"))
		return sb_seterr(SB_ERR_INVAL, "argument 'snapshot' is empty");
	if (p &&
	    (p->type != MSGPACK_OBJECT_STR || memchr(p->via.str.ptr, 0, p->via.str.size)))
		return sb_seterr(SB_ERR_INVAL, "argument 'prompt' must be a string");
	if (p && !(*prompt = strndup(p->via.str.ptr, p->via.str.size)))
		return SB_ERR_NOMEM;
	f->run = run;
	f->snapshot = snap[0] ? snap : NULL;
	f->runner = runner[0] ? runner : NULL;
	f->prompt = *prompt;
	return SB_OK;
}

/* run.fork {run, snapshot | at, count, name, prompt, runner, budget_nusd}: new runs from a
 * snapshot; answered with their ids once all are made. */
static int op_run_fork(struct req *r)
{
	char run[SB_RUN_MAX], snap[72], name[SB_PLAN_NAME_MAX], runner[SB_PLAN_RUNNER_MAX];
	struct sb_runs_from f;
	struct forks *fk;
	uint64_t count;
	char *prompt;
	int rc;

	if ((rc = arg_from(r, &f, run, snap, runner, &prompt)))
		return rc;
	name[0] = 0;
	if ((rc = arg_u64(r, "count", 1, &count)) ||
	    (rc = sb_spec_name(r->args, "name", name, sizeof name))) /* as run.create's */
		goto out;
	if (count < 1 || count > FORKS_MAX) {
		rc = sb_seterr(SB_ERR_INVAL, "argument 'count' must be 1 to %d",
			       FORKS_MAX);
		goto out;
	}
	if (!(fk = calloc(1, sizeof *fk))) {
		rc = SB_ERR_NOMEM;
		goto out;
	}
	fk->r = r;
	fk->want = (unsigned)count;
	f.name = name[0] ? name : NULL;
	for (unsigned i = 0; i < fk->want; i++) {
		if ((rc = sb_runs_from(r->e->runs, &f, fork_made, fk))) {
			if (i == 0) { /* nothing under way: this call's error */
				free(fk);
				goto out;
			}
			fk->want = i; /* the ones under way answer */
			fk->rc = rc;
			snprintf(fk->err, sizeof fk->err, "%s", sb_errmsg(rc));
			break;
		}
	}
	rc = OP_LATER;
out:
	free(prompt);
	return rc;
}

/* run.rerun {run, live_after_divergence?, at?}: a new run from run's
 * start (or its state at offset at) whose model calls are answered from
 * run's record; answered as run.fork is, with its id. */
static int op_run_rerun(struct req *r)
{
	char run[SB_RUN_MAX];
	struct sb_runs_from f = {0};
	struct forks *fk;
	int live, rc;

	if ((rc = arg_run(r, run)) ||
	    (rc = arg_bool(r, "live_after_divergence", &live)) ||
	    (rc = arg_u64(r, "at", 0, &f.at)))
		return rc;
	if (sb_map_get(r->args, "at") && f.at == 0)
		return sb_seterr(SB_ERR_INVAL, "argument 'at' must be an offset, from 1");
	if (!(fk = calloc(1, sizeof *fk)))
		return SB_ERR_NOMEM;
	fk->r = r;
	fk->want = 1;
	f.run = run;
	f.rerun = live ? 2 : 1;
	if ((rc = sb_runs_from(r->e->runs, &f, fork_made, fk))) {
		free(fk);
		return rc;
	}
	return OP_LATER;
}

/* run.resume {run, snapshot | at, prompt, runner, budget_nusd}: the run goes
 * on from a snapshot. */
static int op_run_resume(struct req *r)
{
	char run[SB_RUN_MAX], snap[72], runner[SB_PLAN_RUNNER_MAX];
	struct sb_runs_from f;
	char *prompt;
	int rc;

	if ((rc = arg_from(r, &f, run, snap, runner, &prompt)))
		return rc;
	f.resume = 1;
	rc = sb_runs_from(r->e->runs, &f, run_created, r); /* answered as a run.create */
	free(prompt);
	return rc ? rc : OP_LATER;
}

struct snaps_ctx {
	struct req *r;
	const struct sb_runstate *st; /* the run's */
	msgpack_sbuffer items;
	msgpack_packer pk;
	uint32_t n;
};

static int snaps_cb(void *vctx, const struct sb_resume_point *rp)
{
	struct snaps_ctx *c = vctx;
	char users[8][SB_RUN_MAX];
	size_t nu = 0;
	unsigned layer;
	msgpack_packer *pk;
	sb_mapw m;

	if (sscanf(rp->snapshot, "s%u", &layer) != 1 ||
	    sb_runs_readers(c->r->e->runs, c->st, layer, users, 8, &nu))
		nu = 0;
	sb_mapw_begin(&m, &c->pk);
	sb_mapw_str(&m, "snapshot", rp->snapshot);
	sb_mapw_str(&m, "kind", rp->kind);
	sb_mapw_str(&m, "trigger", rp->trigger);
	sb_mapw_u64(&m, "offset", rp->offset);
	sb_mapw_u64(&m, "ts_ns", rp->ts_ns);
	sb_mapw_u64(&m, "bytes", rp->bytes);
	sb_mapw_str(&m, "layer", rp->layer);
	sb_mapw_str(&m, "memory", rp->memory);
	sb_mapw_bool(&m, "synced", rp->synced != 0);
	pk = sb_mapw_key(&m, "used_by");
	msgpack_pack_array(pk, nu < 8 ? nu : 8);
	for (size_t i = 0; i < nu && i < 8; i++)
		sb_pack_str(pk, users[i]);
	c->n++;
	return sb_mapw_end(&m);
}

/* snapshots.list {run}: the run's snapshots, oldest first. */
static int op_snapshots_list(struct req *r)
{
	char run[SB_RUN_MAX];
	struct sb_runstate st;
	struct snaps_ctx c = {.r = r, .st = &st};
	msgpack_packer *pk;
	int rc;

	if ((rc = arg_run(r, run)))
		return rc;
	catch_up(r);
	if ((rc = sb_runstate_get(r->e->proj, run, &st)))
		return rc;
	msgpack_sbuffer_init(&c.items);
	msgpack_packer_init(&c.pk, &c.items, msgpack_sbuffer_write);
	if ((rc = sb_resume_each(r->e->proj, run, snaps_cb, &c)) == SB_OK) {
		sb_mapw_str(&r->reply, "run", run);
		pk = sb_mapw_key(&r->reply, "snapshots");
		msgpack_pack_array(pk, c.n);
		if (c.items.size)
			sb_pack_raw(pk, c.items.data, c.items.size);
	}
	msgpack_sbuffer_destroy(&c.items);
	return rc;
}

/* 1 (the walk stops) at the point of snapshot id ctx. */
static int has_snap_cb(void *ctx, const struct sb_resume_point *rp)
{
	return !strcmp(rp->snapshot, ctx);
}

/* snapshot.rm {run, snapshot}: deletes a stopped run's snapshot that no
 * other run reads; records snapshot.removed. */
static int op_snapshot_rm(struct req *r)
{
	char run[SB_RUN_MAX], snap[72], hold[72];
	struct sb_runstate st;
	msgpack_sbuffer buf;
	msgpack_packer pk;
	struct sb_event ev;
	unsigned layer;
	int rc;

	if ((rc = arg_run(r, run)) || (rc = arg_str(r, "snapshot", snap, sizeof snap, 1)))
		return rc;
	catch_up(r);
	if ((rc = sb_runstate_get(r->e->proj, run, &st)))
		return rc;
	if ((rc = sb_resume_each(r->e->proj, run, has_snap_cb, snap)) < 0)
		return rc;
	if (rc != 1 || sscanf(snap, "s%u%71s", &layer, hold) != 1)
		return sb_seterr(SB_ERR_NOTFOUND, "run %s has no snapshot %s", run, snap);
	if (sb_runstate_is_live(&st))
		return sb_seterr(SB_ERR_STATE,
				 "run %s is running: stop it before removing its "
				 "snapshots",
				 run);
	if ((rc = sb_runs_layer_remove(r->e->runs, &st, layer)))
		return sb_seterr(rc, "cannot remove snapshot %s of run %s: %s", snap, run,
				 sb_errmsg(rc));
	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 2);
	sb_pack_kstr(&pk, "snapshot", snap);
	sb_pack_kstr(&pk, "by", r->who);
	rc = buf.data ? sb_event_init(&ev, "snapshot.removed", run, SB_SRC_HOST, buf.data,
				      buf.size)
		      : SB_ERR_NOMEM;
	if (rc == SB_OK)
		rc = sb_log_append(r->e->log, &ev, 1);
	msgpack_sbuffer_destroy(&buf);
	if (rc)
		return rc;
	sb_mapw_str(&r->reply, "run", run);
	sb_mapw_str(&r->reply, "snapshot", snap);
	return SB_OK;
}

/* Records run.removed {by, bytes, kept} of run. */
static int removed_record(struct req *r, const char *run, const struct sb_layers_freed *f)
{
	msgpack_sbuffer buf;
	msgpack_packer pk;
	struct sb_event ev;
	int rc;

	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 3);
	sb_pack_kstr(&pk, "by", r->who);
	sb_pack_str(&pk, "bytes");
	msgpack_pack_uint64(&pk, f->bytes);
	sb_pack_str(&pk, "kept");
	msgpack_pack_uint64(&pk, f->kept);
	rc = buf.data ? sb_event_init(&ev, "run.removed", run, SB_SRC_HOST, buf.data, buf.size)
		      : SB_ERR_NOMEM;
	if (rc == SB_OK)
		rc = sb_log_append(r->e->log, &ev, 1);
	msgpack_sbuffer_destroy(&buf);
	return rc;
}

/* Releases the layers the removed runs run continues from kept only for
 * their readers (its parent, that one's, ... from the record), now that
 * run's own are gone; adds what it freed to *bytes. */
static void removed_parents(struct req *r, const char *run, unsigned long long *bytes)
{
	struct sb_runstate st;
	struct sb_layers_freed f;
	char cur[SB_RUN_MAX];

	snprintf(cur, sizeof cur, "%s", run);
	for (int depth = 0; depth < 64; depth++) {
		if (sb_runstate_get(r->e->proj, cur, &st) || !st.parent[0] ||
		    !strcmp(st.parent, cur))
			return;
		snprintf(cur, sizeof cur, "%s", st.parent);
		if (sb_runstate_get(r->e->proj, cur, &st) == SB_OK && st.removed &&
		    sb_runs_release(r->e->runs, &st, 0, &f) == SB_OK)
			*bytes += f.bytes;
	}
}

/* SB_ERR_STATE when a live run (created, queued or running) continues run,
 * itself or through its parents: a fork or resume still queued has no disk
 * yet, so no layer file says that it will read run's snapshots. */
static int rm_check_readers(struct req *r, const char *run)
{
	char(*live)[SB_RUN_MAX] = NULL, cur[SB_RUN_MAX];
	struct sb_runstate st;
	size_t n = 0;
	int rc = sb_runstate_live(r->e->proj, NULL, &live, &n);

	for (size_t i = 0; rc == SB_OK && i < n; i++) {
		snprintf(cur, sizeof cur, "%s", live[i]);
		for (int depth = 0; rc == SB_OK && depth < 64; depth++) {
			if (sb_runstate_get(r->e->proj, cur, &st) || !st.parent[0] ||
			    !strcmp(st.parent, cur))
				break;
			if (!strcmp(st.parent, run))
				rc = sb_seterr(SB_ERR_STATE,
					       "run %s is continued by %s, which has not ended: "
					       "remove it once that run ends",
					       run, live[i]);
			snprintf(cur, sizeof cur, "%s", st.parent);
		}
	}
	free(live);
	return rc;
}

/* run.rm {run, dry_run?}: removes a run that ended: records run.removed,
 * then frees its disk layers, snapshots and files but the layers other
 * runs read (freed with the last of them). Answers run, bytes (freed),
 * kept, dry_run. */
static int op_run_rm(struct req *r)
{
	const msgpack_object *dry = sb_map_get(r->args, "dry_run");
	char run[SB_RUN_MAX];
	struct sb_runstate st;
	struct sb_layers_freed f;
	int rc;

	if (dry && dry->type != MSGPACK_OBJECT_BOOLEAN)
		return sb_seterr(SB_ERR_INVAL, "argument 'dry_run' must be a boolean");
	if ((rc = arg_run(r, run)) || (rc = sb_runstate_get(r->e->proj, run, &st)))
		return rc;
	if (sb_runstate_is_live(&st))
		return sb_seterr(SB_ERR_STATE, "run %s is %s: stop it before removing it", run,
				 st.status);
	if (st.removed)
		return sb_seterr(SB_ERR_STATE, "run %s was removed already", run);
	if ((rc = rm_check_readers(r, run)))
		return rc;
	/* what it frees is counted first: the record says it before the
	 * files go, so a daemon killed half-way finishes the job (sweep) */
	if ((rc = sb_runs_release(r->e->runs, &st, 1, &f)))
		return rc;
	if (!(dry && dry->via.boolean)) {
		if ((rc = removed_record(r, run, &f)))
			return rc;
		if ((rc = sb_runs_release(r->e->runs, &st, 0, &f)))
			return sb_seterr(rc, "run %s is removed, but not all of its files could "
					     "be deleted: %s", run, sb_errmsg(rc));
		removed_parents(r, run, &f.bytes);
	}
	sb_mapw_str(&r->reply, "run", run);
	sb_mapw_u64(&r->reply, "bytes", f.bytes);
	sb_mapw_u64(&r->reply, "kept", f.kept);
	sb_mapw_bool(&r->reply, "dry_run", dry && dry->via.boolean);
	return SB_OK;
}

/* The stops of one group.stop, answered when the last is done. */
struct group_stop {
	struct req *r;
	char group[64];
	char (*runs)[SB_RUN_MAX];
	size_t n, left;
	int rc;
	char err[300];
};

static void group_one_stopped(void *ctx, int rc)
{
	struct group_stop *g = ctx;
	msgpack_packer *pk;

	/* one that ended meanwhile is fine */
	if (rc != SB_OK && rc != SB_ERR_STATE && !g->rc) {
		g->rc = rc;
		snprintf(g->err, sizeof g->err, "%s", sb_errmsg(rc));
	}
	if (--g->left)
		return;
	if (g->rc == SB_OK) {
		sb_mapw_str(&g->r->reply, "group", g->group);
		pk = sb_mapw_key(&g->r->reply, "runs");
		msgpack_pack_array(pk, g->n);
		for (size_t i = 0; i < g->n; i++)
			sb_pack_str(pk, g->runs[i]);
	}
	req_finish(g->r, g->rc ? sb_seterr(g->rc, "%s", g->err) : SB_OK);
	free(g->runs);
	free(g);
}

/* group.stop {group}: stops every live run of the group; answered once
 * each is stopping. */
static int op_group_stop(struct req *r)
{
	struct group_stop *g = calloc(1, sizeof *g);
	int rc;

	if (!g)
		return SB_ERR_NOMEM;
	if ((rc = arg_str(r, "group", g->group, sizeof g->group, 1)) == SB_OK &&
	    !g->group[0])
		rc = sb_seterr(SB_ERR_INVAL, "argument 'group' is empty");
	if (rc) {
		free(g);
		return rc;
	}
	catch_up(r);
	/* collected before any is stopped, as stopping changes the state */
	if ((rc = sb_runstate_live(r->e->proj, g->group, &g->runs, &g->n))) {
		free(g->runs);
		free(g);
		return rc;
	}
	g->r = r;
	g->left = g->n + 1; /* and one for this call, so none answers early */
	for (size_t i = 0; i < g->n; i++)
		if ((rc = sb_runs_stop(r->e->runs, g->runs[i], "stopped",
				       group_one_stopped, g)))
			group_one_stopped(g, rc);
	group_one_stopped(g, SB_OK);
	return OP_LATER;
}

/* A group.create under way: its name and goal, kept until it answers. */
struct group_create {
	struct req *r;
	char name[64];
	char goal[4096];
};

static void group_created(void *ctx, int rc, const char *id, char (*runs)[SB_RUN_MAX],
			  size_t n)
{
	struct group_create *g = ctx;
	struct req *r = g->r;
	msgpack_packer *pk;

	if (rc == SB_OK) {
		sb_mapw_str(&r->reply, "group", g->name);
		sb_mapw_str(&r->reply, "id", id);
		pk = sb_mapw_key(&r->reply, "runs");
		msgpack_pack_array(pk, n);
		for (size_t i = 0; i < n; i++)
			sb_pack_str(pk, runs[i]);
	}
	free(g);
	req_finish(r, rc);
}

/* group.create {name, goal?, budget_nusd?, runs: [spec]}: answered once
 * every run of the group is created (or queued), or with the first error,
 * which names the run ("runs[2]: ..."). */
static int op_group_create(struct req *r)
{
	struct group_create *g = calloc(1, sizeof *g);
	struct sb_group_req q = {0};
	int rc;

	if (!g)
		return SB_ERR_NOMEM;
	q.specs = sb_map_get(r->args, "runs");
	if ((rc = sb_spec_name(r->args, "name", g->name, sizeof g->name)) ||
	    (rc = sb_spec_str(r->args, "goal", g->goal, sizeof g->goal)) ||
	    (rc = sb_text_check(g->goal, strlen(g->goal), "the group's goal")) ||
	    (rc = sb_spec_u64(r->args, "budget_nusd", UINT64_MAX / 4, &q.budget_nusd))) {
		free(g);
		return rc;
	}
	g->r = r;
	q.name = g->name;
	q.goal = g->goal;
	if ((rc = sb_runs_group_create(r->e->runs, &q, group_created, g))) {
		free(g);
		return rc;
	}
	return OP_LATER;
}

/* group.fork {group, name}: every run of group forked from its newest
 * snapshot into a new group name; answered as group.create is. */
static int op_group_fork(struct req *r)
{
	struct group_create *g = calloc(1, sizeof *g);
	char src[64];
	int rc;

	if (!g)
		return SB_ERR_NOMEM;
	if ((rc = arg_str(r, "group", src, sizeof src, 1)) ||
	    (rc = sb_spec_name(r->args, "name", g->name, sizeof g->name)) ||
	    (rc = sb_runs_group_fork(r->e->runs, src, g->name, group_created, g))) {
		free(g);
		return rc;
	}
	g->r = r;
	return OP_LATER;
}

/* Packs group g with its totals: its runs by status, its cost. */
static int pack_group(struct req *r, msgpack_packer *pk, const struct sb_group *g)
{
	char(*runs)[SB_RUN_MAX] = NULL;
	struct sb_cost cost = {0};
	struct sb_runstate st;
	uint64_t live = 0, queued = 0, done = 0, failed = 0;
	sb_mapw m, counts;
	size_t n;
	int rc;

	if ((rc = sb_group_runs(r->e->proj, g->name, &runs, &n)) ||
	    (rc = sb_costs_get(r->e->proj, "group", g->name, &cost))) {
		free(runs);
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		if (sb_runstate_get(r->e->proj, runs[i], &st))
			continue;
		if (!strcmp(st.status, "queued"))
			queued++;
		else if (sb_runstate_is_live(&st))
			live++;
		else if (!strcmp(st.status, "exited") && st.has_exit && st.exit_status == 0)
			done++;
		else
			failed++;
	}
	free(runs);
	sb_mapw_begin(&m, pk);
	sb_group_pack(g, sb_mapw_key(&m, "group"));
	pack_cost(sb_mapw_key(&m, "cost"), &cost);
	sb_mapw_begin(&counts, sb_mapw_key(&m, "counts"));
	sb_mapw_u64(&counts, "live", live);
	sb_mapw_u64(&counts, "queued", queued);
	sb_mapw_u64(&counts, "done", done);
	sb_mapw_u64(&counts, "failed", failed);
	sb_mapw_end(&counts);
	return sb_mapw_end(&m);
}

struct groups_ctx {
	struct req *r;
	struct items items;
	int rc;
};

static int groups_cb(void *vctx, const struct sb_group *g)
{
	struct groups_ctx *c = vctx;

	if ((c->rc = pack_group(c->r, &c->items.pk, g)))
		return 1;
	c->items.n++;
	return 0;
}

/* groups.list {}: every group with its totals, by name. */
static int op_groups_list(struct req *r)
{
	struct groups_ctx c;
	int rc;

	memset(&c, 0, sizeof c);
	c.r = r;
	catch_up(r);
	items_init(&c.items);
	if ((rc = sb_group_each(r->e->proj, groups_cb, &c)) == SB_OK && (rc = c.rc) == SB_OK)
		items_reply(r, "groups", &c.items);
	msgpack_sbuffer_destroy(&c.items.buf);
	return rc;
}

/* group.get {group}: the group with its totals, and its runs' states in
 * the order they were created. */
static int op_group_get(struct req *r)
{
	char name[64];
	char(*runs)[SB_RUN_MAX] = NULL;
	struct sb_group g;
	struct sb_runstate st;
	msgpack_packer *pk;
	struct items it;
	size_t n = 0;
	int rc;

	if ((rc = arg_str(r, "group", name, sizeof name, 1)))
		return rc;
	catch_up(r);
	items_init(&it);
	if ((rc = sb_group_get(r->e->proj, name, &g)) ||
	    (rc = sb_group_runs(r->e->proj, name, &runs, &n)) ||
	    (rc = pack_group(r, &it.pk, &g)))
		goto out;
	if (!it.buf.data) {
		rc = SB_ERR_NOMEM;
		goto out;
	}
	sb_pack_raw(sb_mapw_key(&r->reply, "group"), it.buf.data, it.buf.size);
	pk = sb_mapw_key(&r->reply, "runs");
	msgpack_pack_array(pk, n);
	for (size_t i = 0; i < n; i++) {
		memset(&st, 0, sizeof st);
		if (sb_runstate_get(r->e->proj, runs[i], &st))
			snprintf(st.run, sizeof st.run, "%s", runs[i]);
		sb_runstate_pack(&st, pk);
	}
out:
	msgpack_sbuffer_destroy(&it.buf);
	free(runs);
	return rc;
}

static int op_daemon_stop(struct req *r)
{
	unsigned live = sb_runs_active(r->e->runs);

	r->e->stop(r->e->ctx);
	sb_mapw_u64(&r->reply, "runs_stopped", live);
	return SB_OK;
}

static int op_reproject(struct req *r)
{
	int rc = sb_projector_rebuild(r->e->proj);

	if (rc)
		return rc;
	sb_mapw_u64(&r->reply, "checkpoint", sb_projector_checkpoint(r->e->proj));
	return SB_OK;
}

/* secret.set {name, value (bin)}: the value is wiped from the request. */
static int op_secret_set(struct req *r)
{
	char name[SB_SECRET_NAME_MAX];
	const msgpack_object *v = sb_map_get(r->args, "value");
	int rc;

	if ((rc = arg_str(r, "name", name, sizeof name, 1)))
		return rc;
	if (!v || (v->type != MSGPACK_OBJECT_BIN && v->type != MSGPACK_OBJECT_STR))
		return sb_seterr(SB_ERR_INVAL, "argument 'value' must be bytes");
	rc = sb_secret_set(r->e->home, name, v->via.bin.ptr, v->via.bin.size);
	sodium_memzero((void *)v->via.bin.ptr, v->via.bin.size);
	if (rc)
		return rc;
	sb_mapw_str(&r->reply, "name", name);
	return SB_OK;
}

static int op_secret_rm(struct req *r)
{
	char name[SB_SECRET_NAME_MAX];
	int rc;

	if ((rc = arg_str(r, "name", name, sizeof name, 1)) ||
	    (rc = sb_secret_rm(r->e->home, name)))
		return rc;
	sb_mapw_str(&r->reply, "name", name);
	return SB_OK;
}

static int secret_cb(void *ctx, const char *name, uint64_t set_s)
{
	struct items *l = ctx;

	sb_mapw m;

	sb_mapw_begin(&m, &l->pk);
	sb_mapw_str(&m, "name", name);
	sb_mapw_u64(&m, "set_s", set_s);
	l->n++;
	return sb_mapw_end(&m);
}

/* secret.list: names and when each was set, never values. */
static int op_secret_list(struct req *r)
{
	struct items l;
	int rc;

	items_init(&l);
	if ((rc = sb_secret_each(r->e->home, secret_cb, &l)) == SB_OK)
		items_reply(r, "secrets", &l);
	msgpack_sbuffer_destroy(&l.buf);
	return rc;
}

#define BLOB_REPLY_MAX (256u << 20) /* larger blobs are not sent whole */

/* blob.get {blob}: a blob of the record (a file's content, a model call's
 * request or response), by its key; its content is checked against it. */
static int op_blob_get(struct req *r)
{
	char hex[2 * SB_HASH_LEN + 8];
	uint8_t key[SB_HASH_LEN];
	void *data;
	size_t len;
	int rc;

	if ((rc = arg_str(r, "blob", hex, sizeof hex, 1)))
		return rc;
	if ((rc = sb_hash_parse(hex, key))) /* its detail names the argument */
		return rc;
	if ((rc = sb_blob_get(r->e->log, key, &data, &len)))
		return rc;
	if (len > BLOB_REPLY_MAX) {
		free(data);
		return sb_seterr(SB_ERR_TOOBIG,
				 "blob %.16s...: %zu bytes, too large to send", hex, len);
	}
	sb_mapw_bin(&r->reply, "data", data, len);
	free(data);
	return SB_OK;
}

/* --- a run's disk, read-only (vmm/fsread.h confines every path) --- */

#define FS_LIST_MAX  1000      /* entries in one fs.list reply */
#define FS_READ_MAX  (1u << 20) /* bytes in one fs.read reply */
#define FS_READ_DFLT (64u << 10)

struct layer_ctx {
	const char *snapshot;
	char layer[160];
};

static int layer_cb(void *ctx, const struct sb_resume_point *rp)
{
	struct layer_ctx *c = ctx;

	if (strcmp(rp->snapshot, c->snapshot))
		return 0;
	snprintf(c->layer, sizeof c->layer, "%s", rp->layer);
	return 1;
}

/* Opens the root file system run (state st) started on: its template's,
 * as recorded, from its runner. Errors: SB_ERR_STATE (a fork of a
 * snapshot), those of sb_runs_template_open. */
static int start_open(struct req *r, const char *run, const struct sb_runstate *st,
		      sb_fsread **f)
{
	if (st->parent_snapshot[0] && strcmp(st->parent, run))
		return sb_seterr(SB_ERR_STATE,
				 "run %s began from run %s's snapshot %s, not from its "
				 "template: read that snapshot",
				 run, st->parent, st->parent_snapshot);
	return sb_runs_template_open(r->e->runs, st, f);
}

/* Opens the disk of r's run (into run), its snapshot argument's frozen
 * layer ("start": the template's root file system it started on) or its
 * current disk, and copies its path argument (absolute in the guest) into
 * path. Errors: of the arguments, SB_ERR_NOTFOUND, SB_ERR_STATE (the run
 * was removed), those of start_open and sb_runs_disk_open. */
static int disk_open(struct req *r, char run[SB_RUN_MAX], char *path, size_t cap,
		     sb_fsread **f)
{
	char snap[72];
	struct layer_ctx c = {.snapshot = snap};
	struct sb_runstate st;
	int rc;

	if ((rc = arg_run(r, run)) || (rc = arg_str(r, "snapshot", snap, sizeof snap, 0)) ||
	    (rc = arg_str(r, "path", path, cap, 1)) ||
	    (rc = sb_runstate_get(r->e->proj, run, &st)))
		return rc;
	if (st.removed)
		return sb_seterr(SB_ERR_STATE,
				 "run %s was removed: its disk and snapshots are gone", run);
	if (!strcmp(snap, "start"))
		return start_open(r, run, &st, f);
	if (!snap[0])
		return sb_runs_disk_open(r->e->runs, &st, NULL, f);
	catch_up(r);
	if ((rc = sb_resume_each(r->e->proj, run, layer_cb, &c)) < 0)
		return rc;
	if (rc != 1 || !c.layer[0])
		return sb_seterr(SB_ERR_NOTFOUND, "run %s has no snapshot %s", run, snap);
	return sb_runs_disk_open(r->e->runs, &st, c.layer, f);
}

/* Packs entry e: {name (bin), type, mode, uid, gid, size, mtime, target
 * (bin; nil when unreadable) for a symlink}. */
static void pack_fs_entry(msgpack_packer *pk, const struct sb_fs_entry *e)
{
	sb_mapw m;

	sb_mapw_begin(&m, pk);
	sb_mapw_bin(&m, "name", e->name, e->name_len);
	sb_mapw_str(&m, "type", sb_fs_type_name(e->type));
	sb_mapw_u64(&m, "mode", e->mode);
	sb_mapw_u64(&m, "uid", e->uid);
	sb_mapw_u64(&m, "gid", e->gid);
	sb_mapw_u64(&m, "size", e->size);
	sb_mapw_i64(&m, "mtime", e->mtime);
	if (e->type == SB_FS_SYMLINK && e->target)
		sb_mapw_bin(&m, "target", e->target, e->target_len);
	else if (e->type == SB_FS_SYMLINK)
		sb_mapw_nil(&m, "target");
	sb_mapw_end(&m);
}

/* The entries of one fs.list reply: those from skip on, at most limit. */
struct fs_items {
	msgpack_sbuffer buf;
	msgpack_packer pk;
	uint64_t skip, limit, total, n;
};

static int fs_item(const struct sb_fs_entry *e, void *ctx)
{
	struct fs_items *c = ctx;

	if (c->total++ >= c->skip && c->n < c->limit) {
		pack_fs_entry(&c->pk, e);
		c->n++;
	}
	return SB_OK;
}

/* fs.list {run, path, snapshot?, offset?, limit?}: the entries of a
 * directory of the run's disk in its own order (the entry itself when
 * path is not one), from offset on. */
static int op_fs_list(struct req *r)
{
	char run[SB_RUN_MAX], path[SB_FS_PATH_MAX];
	struct fs_items c = {0};
	struct sb_fs_entry e;
	sb_fsread *f = NULL;
	msgpack_packer *pk;
	int rc;

	if ((rc = arg_u64(r, "offset", 0, &c.skip)) ||
	    (rc = arg_u64(r, "limit", FS_LIST_MAX, &c.limit)))
		return rc;
	if (!c.limit || c.limit > FS_LIST_MAX)
		return sb_seterr(SB_ERR_INVAL, "argument 'limit' must be 1-%d", FS_LIST_MAX);
	msgpack_sbuffer_init(&c.buf);
	msgpack_packer_init(&c.pk, &c.buf, msgpack_sbuffer_write);
	if ((rc = disk_open(r, run, path, sizeof path, &f)) == SB_OK &&
	    (rc = sb_fsread_stat(f, path, &e)) == SB_OK)
		rc = e.type == SB_FS_DIR ? sb_fsread_list(f, path, fs_item, &c)
					 : fs_item(&e, &c);
	sb_fsread_close(f);
	if (rc == SB_OK) {
		sb_mapw_str(&r->reply, "run", run);
		sb_mapw_bool(&r->reply, "dir", e.type == SB_FS_DIR);
		sb_mapw_u64(&r->reply, "total", c.total);
		if (c.skip + c.n < c.total)
			sb_mapw_u64(&r->reply, "next", c.skip + c.n);
		pk = sb_mapw_key(&r->reply, "entries");
		msgpack_pack_array(pk, (uint32_t)c.n);
		if (c.buf.size)
			sb_pack_raw(pk, c.buf.data, c.buf.size);
	}
	msgpack_sbuffer_destroy(&c.buf);
	return rc;
}

/* fs.stat {run, path, snapshot?}: the entry at path (not followed). */
static int op_fs_stat(struct req *r)
{
	char run[SB_RUN_MAX], path[SB_FS_PATH_MAX];
	struct sb_fs_entry e;
	sb_fsread *f = NULL;
	int rc;

	if ((rc = disk_open(r, run, path, sizeof path, &f)) == SB_OK &&
	    (rc = sb_fsread_stat(f, path, &e)) == SB_OK)
		pack_fs_entry(sb_mapw_key(&r->reply, "entry"), &e);
	sb_fsread_close(f);
	return rc;
}

/* fs.read {run, path, snapshot?, offset?, length?}: bytes of a regular
 * file from offset, at most length (FS_READ_MAX). */
static int op_fs_read(struct req *r)
{
	char run[SB_RUN_MAX], path[SB_FS_PATH_MAX];
	uint64_t off, len, size = 0;
	sb_fsread *f = NULL;
	size_t got = 0;
	void *buf = NULL;
	int rc;

	if ((rc = arg_u64(r, "offset", 0, &off)) ||
	    (rc = arg_u64(r, "length", FS_READ_DFLT, &len)))
		return rc;
	if (!len || len > FS_READ_MAX)
		return sb_seterr(SB_ERR_INVAL, "argument 'length' must be 1-%u", FS_READ_MAX);
	if (!(buf = malloc(len)))
		return SB_ERR_NOMEM;
	if ((rc = disk_open(r, run, path, sizeof path, &f)) == SB_OK &&
	    (rc = sb_fsread_pread(f, path, off, buf, len, &got, &size)) == SB_OK) {
		sb_mapw_u64(&r->reply, "size", size);
		sb_mapw_u64(&r->reply, "offset", off);
		sb_mapw_bool(&r->reply, "eof", off + got >= size);
		sb_mapw_bin(&r->reply, "data", buf, got);
	}
	sb_fsread_close(f);
	free(buf);
	return rc;
}

#define LOCAL_ONLY 1 /* refused on the remote listener */
#define ON_LOOP	   2 /* runs on the daemon's loop (the run manager's state) */
#define READS_PROJ 4 /* ... and reads the projections: caught up before */
#define READ_ONLY  8 /* changes nothing: still served while the daemon stops,
		      * so a client reads how its runs ended */
#define ON_SERVER 16 /* reads only what is in memory and takes no lock for
		      * long: served on the socket server's thread, so its
		      * reply waits for no hand-off between threads */

/* Requests up to this size are parsed on the server's thread, to find the
 * ON_SERVER ones; a larger one is parsed by a worker. */
#define SERVER_PARSE_MAX 1024

static const struct op {
	const char *name;
	int (*fn)(struct req *r);
	unsigned flags;
} ops[] = {
    {"health", op_health, READ_ONLY | ON_SERVER},
    {"events.read", op_events_read, READ_ONLY},
    {"events.append", op_events_append, 0},
    {"runs.list", op_runs_list, READ_ONLY},
    {"run.get", op_run_get, READ_ONLY},
    {"run.resolve", op_run_resolve, READ_ONLY},
    {"run.create", op_run_create, ON_LOOP},
    {"run.stop", op_run_stop, ON_LOOP | READS_PROJ},
    {"group.stop", op_group_stop, ON_LOOP | READS_PROJ},
    {"group.create", op_group_create, ON_LOOP},
    {"group.fork", op_group_fork, ON_LOOP},
    {"groups.list", op_groups_list, READ_ONLY},
    {"group.get", op_group_get, READ_ONLY},
    {"run.snapshot", op_run_snapshot, ON_LOOP | READS_PROJ},
    {"run.sync", op_run_sync, ON_LOOP | READS_PROJ},
    {"space", op_space, READ_ONLY},
    {"net.grant", op_net_grant, ON_LOOP | READS_PROJ},
    {"run.exec", op_run_exec, ON_LOOP | READS_PROJ},
    {"run.put", op_run_put, ON_LOOP | READS_PROJ},
    {"run.fork", op_run_fork, ON_LOOP | READS_PROJ},
    {"run.resume", op_run_resume, ON_LOOP | READS_PROJ},
    {"run.rerun", op_run_rerun, ON_LOOP | READS_PROJ},
    {"snapshots.list", op_snapshots_list, READ_ONLY},
    {"snapshot.rm", op_snapshot_rm, 0},
    {"run.rm", op_run_rm, 0},
    {"blob.get", op_blob_get, READ_ONLY},
    {"fs.list", op_fs_list, READ_ONLY},
    {"fs.stat", op_fs_stat, READ_ONLY},
    {"fs.read", op_fs_read, READ_ONLY},
    {"costs.get", op_costs, READ_ONLY},
    {"secret.set", op_secret_set, 0},
    {"secret.rm", op_secret_rm, 0},
    {"secret.list", op_secret_list, READ_ONLY},
    {"admin.reproject", op_reproject, LOCAL_ONLY},
    {"daemon.stop", op_daemon_stop, LOCAL_ONLY | ON_LOOP},
};

/* Sends r's reply (an error reply for rc) and frees r; OP_LATER: not yet
 * (the op answers by itself). */
static void req_finish(struct req *r, int rc)
{
	if (rc == OP_LATER)
		return;
	if (rc == SB_OK)
		rc = sb_mapw_end(&r->reply);
	if (rc) {
		r->out->size = 0;
		sb_wire_error(r->out, rc, sb_errmsg(rc));
	}
	if (!r->out->data)
		sb_wire_error(r->out, SB_ERR_NOMEM, "out of memory");
	sb_sp_reply(r->sp, r->out->data, r->out->size);
	msgpack_sbuffer_destroy(&r->outbuf);
	msgpack_zone_destroy(&r->zone);
	if (r->body)
		sodium_memzero(r->body, r->len); /* it may hold a secret's value */
	free(r->body);
	free(r);
}

/* On the loop: an op that changes the run manager's state. */
static void req_run_on_loop(void *ctx)
{
	struct req *r = ctx;

	sb_clearerr();
	req_finish(r, r->e->stopping(r->e->ctx)
			  ? sb_seterr(SB_ERR_UNAVAIL, "sanboxd is stopping")
			  : r->op->fn(r));
}

/* Parses r's body and finds its op. Returns SB_OK, else an error to send. */
static int req_parse(struct req *r)
{
	char op[32];
	int n;

	if (sb_payload_parse(r->body, r->len, &r->zone, &r->argv))
		return sb_seterr(SB_ERR_INVAL, "request is not a msgpack map");
	r->args = &r->argv;
	if ((n = sb_map_str(r->args, "op", op, sizeof op)) < 0)
		return sb_seterr(SB_ERR_INVAL, "request has no 'op'");
	if ((size_t)n < sizeof op && strlen(op) == (size_t)n)
		for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
			if (!strcmp(ops[i].name, op))
				r->op = &ops[i];
	if (!r->op)
		return sb_seterr(SB_ERR_INVAL, "unknown request '%s'", op);
	if (!(r->op->flags & READ_ONLY) && r->e->stopping(r->e->ctx))
		return sb_seterr(SB_ERR_UNAVAIL, "sanboxd is stopping");
	if (sb_sp_req_remote(r->sp) && (r->op->flags & LOCAL_ONLY))
		return sb_seterr(SB_ERR_DENIED, "'%s' is only allowed on the local socket",
				 op);
	return SB_OK;
}

/* Serves r, parsed, or sends it to the loop. */
static void req_serve(struct req *r)
{
	if (r->op->flags & ON_LOOP) {
		if (r->op->flags & READS_PROJ)
			catch_up(r);
		sb_loop_post(r->e->loop, &r->post, req_run_on_loop, r);
		return;
	}
	req_finish(r, r->op->fn(r));
}

/* On a worker: parses the request when the server did not, and serves it. */
static void req_run(void *ctx)
{
	struct req *r = ctx;
	int rc;

	sb_clearerr();
	if (!r->op && (rc = req_parse(r))) {
		req_finish(r, rc);
		return;
	}
	req_serve(r);
}

/* On the server's thread: a small request is parsed here; one whose op is
 * ON_SERVER, or that is refused, is answered here. Returns 1 when r is
 * answered, 0 when it goes to a worker. */
static int req_on_server(struct req *r)
{
	int rc;

	if (r->len > SERVER_PARSE_MAX)
		return 0;
	sb_clearerr();
	if ((rc = req_parse(r))) {
		req_finish(r, rc);
		return 1;
	}
	if (!(r->op->flags & ON_SERVER))
		return 0;
	req_serve(r);
	return 1;
}

void sb_api_request(void *ctx, sb_sp_req *sp, void *body, size_t len)
{
	sb_api *a = ctx;
	struct req *r = calloc(1, sizeof *r);
	msgpack_packer pk;
	int rc = SB_ERR_NOMEM;

	if (r && msgpack_zone_init(&r->zone, 4096)) {
		r->e = &a->env;
		r->sp = sp;
		r->body = body;
		r->len = len;
		r->who = sb_sp_req_who(sp);
		r->out = &r->outbuf;
		msgpack_sbuffer_init(&r->outbuf);
		msgpack_packer_init(&pk, r->out, msgpack_sbuffer_write);
		sb_mapw_begin(&r->reply, &pk);
		sb_mapw_bool(&r->reply, "ok", 1);
		if (req_on_server(r))
			return;
		if ((rc = sb_work_submit(a->env.work, req_run, r)) == SB_OK)
			return;
		msgpack_zone_destroy(&r->zone);
	}
	free(r);
	free(body);
	{
		msgpack_sbuffer out;
		msgpack_sbuffer_init(&out);
		sb_wire_error(&out, rc, sb_errmsg(rc));
		sb_sp_reply(sp, out.data ? out.data : "", out.size);
		msgpack_sbuffer_destroy(&out);
	}
}

int sb_api_authenticate(void *ctx, const void *body, size_t len, int complete, char *who,
			size_t cap)
{
	sb_api *a = ctx;

	return sb_token_check_request(a->env.home, body, len, complete, who, cap);
}

void sb_api_pack_denied(msgpack_sbuffer *out)
{
	sb_wire_error(out, SB_ERR_DENIED, "remote requests need a valid token");
}

int sb_api_open(const struct sb_api_env *env, sb_api **out)
{
	sb_api *a = calloc(1, sizeof *a);

	if (!a)
		return SB_ERR_NOMEM;
	a->env = *env;
	*out = a;
	return SB_OK;
}

void sb_api_set_servers(sb_api *a, sb_sp *local, sb_sp *remote)
{
	a->env.local = local;
	a->env.remote = remote;
}

void sb_api_close(sb_api *a)
{
	free(a);
}
