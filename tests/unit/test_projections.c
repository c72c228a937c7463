/* test_projections.c - run state, costs and resume points over a real log;
 * exactly-once catch-up; rebuild gives byte-identical state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "engine/log/log.h"
#include "engine/log/merkle.h"
#include "projections/projection.h"
#include "projections/tree.h"
#include "projections/views.h"
#include "tests/unit/testutil.h"

struct fix {
	char *dir;
	sb_log *log;
	sb_projector *p;
	uint64_t ts; /* timestamp of the next event */
};

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof *f);

	assert_non_null(f);
	f->dir = tu_tmpdir();
	assert_int_equal(sb_log_open(f->dir, SB_LOG_NOSYNC, &f->log), SB_OK);
	assert_int_equal(sb_projector_open(f->log, &f->p), SB_OK);
	f->ts = 1000;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	sb_projector_close(f->p);
	sb_log_close(f->log);
	tu_rmrf(f->dir);
	free(f);
	return 0;
}

/* Appends one event with the payload given as JSON text (single quotes);
 * its timestamp is f->ts, which then grows by 1000. Returns its offset. */
static uint64_t app(struct fix *f, const char *run, enum sb_source src, const char *type,
		    const char *json)
{
	msgpack_sbuffer sb;
	struct sb_event ev;
	int rc;

	tu_json(&sb, json);
	assert_int_equal(sb_event_init(&ev, type, run, src, sb.data, sb.size), SB_OK);
	ev.ts_ns = f->ts;
	f->ts += 1000;
	rc = sb_log_append(f->log, &ev, 1);
	if (rc)
		fail_msg("append %s: %s", type, sb_errmsg(rc));
	msgpack_sbuffer_destroy(&sb);
	return ev.offset;
}

static void catch_up(struct fix *f, uint64_t want_applied)
{
	uint64_t n = 12345, last;
	int rc = sb_projector_catch_up(f->p, &n);

	if (rc)
		fail_msg("catch up: %s", sb_errmsg(rc));
	assert_true(n == want_applied);
	assert_int_equal(sb_log_last_offset(f->log, &last), SB_OK);
	assert_true(sb_projector_checkpoint(f->p) == last);
}

static struct sb_runstate rs_get(struct fix *f, const char *run)
{
	struct sb_runstate rs;
	int rc = sb_runstate_get(f->p, run, &rs);

	if (rc)
		fail_msg("runstate %s: %s", run, sb_errmsg(rc));
	return rs;
}

#define USAGE(model, in, out, cost) \
	"{'model':'" model "','input_tokens':" #in ",'output_tokens':" #out \
	",'cost_nusd':" #cost ",'total_nusd':0}"

/* A run's life: each event moves the record as it should. */
static void test_runstate_lifecycle(void **state)
{
	struct fix *f = *state;
	struct sb_runstate rs;
	uint64_t off;

	app(f, "r1", SB_SRC_HOST, "run.created",
	    "{'name':'review','template':'debian','group':'g1','model':'gpt-x'}");
	catch_up(f, 1);
	rs = rs_get(f, "r1");
	assert_string_equal(rs.run, "r1");
	assert_string_equal(rs.status, "created");
	assert_string_equal(rs.name, "review");
	assert_string_equal(rs.group, "g1");
	assert_string_equal(rs.template, "debian");
	assert_string_equal(rs.model, "gpt-x");
	assert_string_equal(rs.runner, "local"); /* a record from before runners */
	assert_true(rs.created_ns == 1000 && rs.started_ns == 0 && rs.ended_ns == 0);
	assert_true(rs.events == 1 && rs.last_seq == 1 && rs.last_offset == 1);
	assert_string_equal(rs.last_type, "run.created");

	app(f, "r1", SB_SRC_HOST, "run.policy.resolved",
	    "{'template_hash':'abc123','cpus':2,'memory_mib':512,'timeout_s':600,"
	    "'network':'acl','budget_nusd':5000000000,'model':'gpt-y'}");
	catch_up(f, 1);
	rs = rs_get(f, "r1");
	assert_string_equal(rs.template_hash, "abc123");
	assert_true(rs.cpus == 2 && rs.memory_mib == 512 && rs.timeout_s == 600);
	assert_true(rs.budget_nusd == 5000000000ull);
	assert_string_equal(rs.network, "acl");
	assert_string_equal(rs.model, "gpt-y");
	assert_string_equal(rs.status, "created");

	app(f, "r1", SB_SRC_HOST, "run.started", "{'accel':'tcg'}");
	catch_up(f, 1);
	rs = rs_get(f, "r1");
	assert_string_equal(rs.status, "running");
	assert_true(rs.started_ns == 3000);

	app(f, "r1", SB_SRC_HARNESS, "agent.turn.started", "{'turn':1}");
	app(f, "r1", SB_SRC_GATEWAY, "agent.usage.updated", USAGE("gpt-y", 10, 20, 300));
	app(f, "r1", SB_SRC_GATEWAY, "agent.usage.updated", USAGE("gpt-y", 1, 2, 45));
	app(f, "r1", SB_SRC_GUEST, "run.exited", "{'status':3}");
	catch_up(f, 4);
	rs = rs_get(f, "r1");
	assert_string_equal(rs.status, "running"); /* the host's stop decides */
	assert_true(rs.has_exit == 1 && rs.exit_status == 3);
	assert_true(rs.cost_nusd == 345);

	off = app(f, "r1", SB_SRC_HOST, "run.stopped", "{'reason':'exited'}");
	catch_up(f, 1);
	rs = rs_get(f, "r1");
	assert_string_equal(rs.status, "exited");
	assert_true(rs.ended_ns == 8000);
	assert_true(rs.events == 8 && rs.last_seq == 8 && rs.last_offset == off);
	assert_string_equal(rs.last_type, "run.stopped");
	assert_string_equal(rs.reason, "");

	/* Started again after the end: the verdict stays. */
	app(f, "r1", SB_SRC_HOST, "run.started", "{'accel':'tcg'}");
	catch_up(f, 1);
	assert_string_equal(rs_get(f, "r1").status, "exited");
	assert_int_equal(sb_runstate_get(f->p, "r2", &rs), SB_ERR_NOTFOUND);

	/* its network's counts: lookups, denials (summed), grant changes */
	app(f, "r1", SB_SRC_HOST, "net.resolved",
	    "{'name':'a.test','type':'A','addrs':['192.0.2.1'],'count':3}");
	app(f, "r1", SB_SRC_HOST, "net.denied",
	    "{'dst':'192.0.2.9','port':22,'proto':'tcp','reason':'not granted','count':2}");
	app(f, "r1", SB_SRC_HOST, "net.denied",
	    "{'dst':'10.87.0.1','port':53,'proto':'dns','name':'x.test','reason':'name not "
	    "granted','count':5}");
	app(f, "r1", SB_SRC_HOST, "net.grant.added", "{'grant':'b.test:443','by':'local'}");
	catch_up(f, 4);
	rs = rs_get(f, "r1");
	assert_true(rs.net_lookups == 3 && rs.net_denied == 7 && rs.net_changes == 1);
}

/* Every way a run ends, with its reason. */
static void test_runstate_endings(void **state)
{
	static const char long_reason[] =
		"stopped by operator alice from the CLI because the review went off track";
	struct fix *f = *state;
	struct sb_runstate rs;
	char js[256];

	for (int i = 1; i <= 5; i++) {
		char run[SB_RUN_MAX];
		snprintf(run, sizeof run, "e%d", i);
		app(f, run, SB_SRC_HOST, "run.created", "{'name':'n','template':'t','group':''}");
		app(f, run, SB_SRC_HOST, "run.started", "{'accel':'kvm'}");
	}
	snprintf(js, sizeof js, "{'reason':'%s'}", long_reason);
	app(f, "e1", SB_SRC_HOST, "run.stopped", js);
	app(f, "e2", SB_SRC_HOST, "run.stopped", "{'reason':'timeout'}");
	app(f, "e3", SB_SRC_HOST, "run.failed", "{'reason':'qemu exited with 1'}");
	app(f, "e3", SB_SRC_HOST, "run.stopped", "{'reason':'exited'}");
	app(f, "e4", SB_SRC_HOST, "run.exited", "{'status':-9}");
	app(f, "e4", SB_SRC_HOST, "run.stopped", "{'reason':'failed'}");
	app(f, "e5", SB_SRC_GATEWAY, "budget.exceeded", "{'budget_nusd':10,'spent_nusd':11}");
	app(f, "e5", SB_SRC_HOST, "run.stopped", "{'reason':'budget'}");
	catch_up(f, 18);

	rs = rs_get(f, "e1");
	assert_string_equal(rs.status, "stopped");
	assert_string_equal(rs.reason, long_reason);
	assert_true(rs.ended_ns > rs.started_ns && rs.has_exit == 0);
	rs = rs_get(f, "e2");
	assert_string_equal(rs.status, "timeout");
	rs = rs_get(f, "e3");
	assert_string_equal(rs.status, "failed");
	assert_string_equal(rs.reason, "qemu exited with 1");
	assert_true(rs.ended_ns == 14000); /* the stop after the failure sets the end */
	rs = rs_get(f, "e4");
	assert_string_equal(rs.status, "failed");
	assert_true(rs.exit_status == -9 && rs.has_exit == 1);
	rs = rs_get(f, "e5");
	assert_string_equal(rs.status, "budget");
}

/* A state folded by an older version of a projection (its version key
 * says so, or is missing) is made again from offset 0 when the projector
 * opens; one folded by the current version is kept as it is. */
static void test_version_rebuilds(void **state)
{
	struct fix *f = *state;
	MDB_txn *txn;
	MDB_dbi ck, st;
	MDB_val k = {16, "runstate.version"}, sk = {2, "r1"};
	uint8_t d1[32], d2[32];
	uint64_t n = 0;

	app(f, "r1", SB_SRC_HOST, "run.created",
	    "{'name':'a','template':'shell','group':'','model':'m'}");
	app(f, "r1", SB_SRC_HOST, "run.stopped", "{'reason':'budget'}");
	catch_up(f, 2);
	assert_string_equal(rs_get(f, "r1").status, "budget");
	assert_int_equal(sb_projector_digest(f->p, "runstate", d1), SB_OK);

	/* reopened as it is: nothing is applied again */
	sb_projector_close(f->p);
	assert_int_equal(sb_projector_open(f->log, &f->p), SB_OK);
	assert_int_equal(sb_projector_catch_up(f->p, &n), SB_OK);
	assert_true(n == 0);

	/* an older fold's state: a wrong status, and no version key */
	assert_int_equal(mdb_txn_begin(sb_log_env(f->log), NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "p.checkpoints", 0, &ck), 0);
	assert_int_equal(mdb_dbi_open(txn, "p.runstate", 0, &st), 0);
	assert_int_equal(mdb_del(txn, ck, &k, NULL), 0);
	assert_int_equal(mdb_del(txn, st, &sk, NULL), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	sb_projector_close(f->p);
	assert_int_equal(sb_projector_open(f->log, &f->p), SB_OK);
	assert_int_equal(sb_projector_catch_up(f->p, &n), SB_OK);
	assert_true(n == 2); /* runstate folded both events again */
	assert_string_equal(rs_get(f, "r1").status, "budget");
	assert_int_equal(sb_projector_digest(f->p, "runstate", d2), SB_OK);
	assert_memory_equal(d1, d2, 32);
}

static int collect_runs(void *ctx, const struct sb_runstate *rs)
{
	char *out = ctx;

	strcat(out, rs->run);
	strcat(out, ",");
	return 0;
}

static int stop_at_two(void *ctx, const struct sb_runstate *rs)
{
	return ++*(int *)ctx == 2 ? 77 : 0;
}

/* Parents of resumed and forked runs; runs listed in id order. */
static void test_runstate_parent_each(void **state)
{
	struct fix *f = *state;
	struct sb_runstate rs;
	char list[256] = "";
	int n = 0;

	app(f, "bb", SB_SRC_HOST, "run.created",
	    "{'name':'n','template':'t','group':'g','runner':'far'}");
	app(f, "cc", SB_SRC_HOST, "run.resumed", "{'from_run':'bb','from_offset':1}");
	app(f, "aa", SB_SRC_HOST, "run.forked", "{'from_run':'cc','snapshot':'s1'}");
	catch_up(f, 3);
	assert_string_equal(rs_get(f, "bb").runner, "far");
	rs = rs_get(f, "cc");
	assert_string_equal(rs.parent, "bb");
	assert_true(rs.parent_offset == 1);
	assert_string_equal(rs.status, "created");
	rs = rs_get(f, "aa");
	assert_string_equal(rs.parent, "cc");
	assert_true(rs.parent_offset == 0);
	assert_int_equal(sb_runstate_each(f->p, collect_runs, list), SB_OK);
	assert_string_equal(list, "aa,bb,cc,");
	assert_int_equal(sb_runstate_each(f->p, stop_at_two, &n), 77);
	assert_int_equal(n, 2);
}

/* A run resumed from its own snapshot is not its own parent: a fork keeps
 * its parent; its elapsed time adds up its segments. */
static void test_runstate_resumed_self(void **state)
{
	struct fix *f = *state;
	struct sb_runstate rs;

	app(f, "pp", SB_SRC_HOST, "run.created", "{'name':'p','template':'t','group':''}");
	app(f, "ff", SB_SRC_HOST, "run.forked", "{'from_run':'pp','snapshot':'s0','from_offset':1}");
	app(f, "ff", SB_SRC_HOST, "run.started", "{'accel':'tcg'}"); /* at 3000 */
	app(f, "ff", SB_SRC_HOST, "run.stopped", "{'reason':'exited'}"); /* at 4000 */
	app(f, "ff", SB_SRC_HOST, "run.resumed",
	    "{'from_run':'ff','snapshot':'s1','from_offset':4}");
	catch_up(f, 5);
	rs = rs_get(f, "ff");
	assert_string_equal(rs.parent, "pp");
	assert_string_equal(rs.parent_snapshot, "s0");
	assert_true(rs.parent_offset == 1 && rs.resumed_offset == 5);
	assert_true(rs.active_ns == 1000 && rs.started_ns == 0 && rs.ended_ns == 0);
	app(f, "ff", SB_SRC_HOST, "run.started", "{'accel':'tcg'}");  /* at 6000 */
	app(f, "ff", SB_SRC_HOST, "run.stopped", "{'reason':'exited'}"); /* at 7000 */
	catch_up(f, 2);
	rs = rs_get(f, "ff");
	assert_true(rs.active_ns == 2000 && rs.ended_ns == 7000);
}

/* Appends one event as app does; returns the log's verdict. */
static int app_rc(struct fix *f, const char *run, enum sb_source src, const char *type,
		  const char *json)
{
	msgpack_sbuffer sb;
	struct sb_event ev;
	int rc;

	tu_json(&sb, json);
	assert_int_equal(sb_event_init(&ev, type, run, src, sb.data, sb.size), SB_OK);
	ev.ts_ns = f->ts;
	f->ts += 1000;
	rc = sb_log_append(f->log, &ev, 1);
	msgpack_sbuffer_destroy(&sb);
	return rc;
}

/* The state sb_runstate_fold makes of run's events, read from the log, as a
 * client that follows the run does. */
static struct sb_runstate fold_events(struct fix *f, const char *run)
{
	struct sb_runstate rs;
	struct sb_event ev;
	sb_log_iter *it;
	msgpack_zone z;
	msgpack_object map;
	int rc;

	memset(&rs, 0, sizeof rs);
	assert_true(msgpack_zone_init(&z, 1024));
	assert_int_equal(sb_log_iter_open_run(f->log, run, 1, &it), SB_OK);
	while ((rc = sb_log_iter_next(it, &ev)) == SB_OK) {
		if (!rs.run[0]) { /* as the projection starts a run's record */
			snprintf(rs.run, sizeof rs.run, "%s", run);
			strcpy(rs.status, "created");
			rs.created_ns = ev.ts_ns;
		}
		msgpack_zone_clear(&z);
		assert_int_equal(sb_payload_parse(ev.payload, ev.payload_len, &z, &map), SB_OK);
		sb_runstate_fold(&rs, &ev, &map);
	}
	assert_int_equal(rc, SB_END);
	sb_log_iter_close(it);
	msgpack_zone_destroy(&z);
	return rs;
}

/* Two states packed are the same bytes. */
static void assert_same_state(const struct sb_runstate *a, const struct sb_runstate *b)
{
	msgpack_sbuffer x, y;
	msgpack_packer px, py;

	msgpack_sbuffer_init(&x);
	msgpack_sbuffer_init(&y);
	msgpack_packer_init(&px, &x, msgpack_sbuffer_write);
	msgpack_packer_init(&py, &y, msgpack_sbuffer_write);
	sb_runstate_pack(a, &px);
	sb_runstate_pack(b, &py);
	assert_int_equal(x.size, y.size);
	assert_memory_equal(x.data, y.data, x.size);
	msgpack_sbuffer_destroy(&x);
	msgpack_sbuffer_destroy(&y);
}

#define LABEL16 "xxxxxxxxxxxxxxxx"
#define LABEL64 LABEL16 LABEL16 LABEL16 LABEL16
#define LABEL65 LABEL64 "x"

/* A run's latest agent.progress, its completed turns and tool calls; a
 * label that is not printable text of 1 to 64 bytes is refused and leaves
 * the state as it was; a client's fold of the events is the projection's
 * state. */
static void test_runstate_progress(void **state)
{
	static const char *const bad[] = {
		"{'label':'a\\u001b[2Jb','count':1}", "{'label':'two\\nlines','count':1}",
		"{'label':'','count':1}", "{'label':'files','count':-1}",
		"{'label':'files','count':1,'total':-5}", "{'label':'files'}",
		"{'count':3,'total':4}", "{'label':'\\u202ereversed','count':1}",
		"{'label':'" LABEL65 "','count':1}",
	};
	static const char label64[] = LABEL64;
	struct fix *f = *state;
	struct sb_runstate rs, folded;
	char js[256];

	app(f, "p1", SB_SRC_HOST, "run.created", "{'name':'n','template':'t','group':''}");
	app(f, "p1", SB_SRC_HOST, "run.started", "{'accel':'tcg'}");
	catch_up(f, 2);
	rs = rs_get(f, "p1");
	assert_true(rs.turns == 0 && rs.tool_calls == 0 && rs.progress_count == 0);
	assert_string_equal(rs.progress_label, "");
	for (int t = 1; t <= 2; t++) {
		snprintf(js, sizeof js, "{'turn':%d}", t);
		app(f, "p1", SB_SRC_HARNESS, "agent.turn.started", js);
		app(f, "p1", SB_SRC_HARNESS, "agent.tool.started", "{'tool':'shell','args':'ls'}");
		app(f, "p1", SB_SRC_HARNESS, "agent.tool.completed",
		    "{'tool':'shell','args':'ls','exit':0,'duration_ms':4}");
		app(f, "p1", SB_SRC_HOST, "agent.tool.completed",
		    "{'tool':'read','args':'a','exit':1,'duration_ms':1}");
		app(f, "p1", SB_SRC_HARNESS, "agent.turn.completed", js);
	}
	app(f, "p1", SB_SRC_HARNESS, "agent.progress",
	    "{'label':'reports checked','count':18,'total':40}");
	catch_up(f, 11);
	rs = rs_get(f, "p1");
	assert_true(rs.turns == 2 && rs.tool_calls == 4);
	assert_string_equal(rs.progress_label, "reports checked");
	assert_true(rs.progress_count == 18 && rs.progress_total == 40);

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc = app_rc(f, "p1", SB_SRC_HARNESS, "agent.progress", bad[i]);
		if (rc != SB_ERR_SCHEMA)
			fail_msg("progress %zu accepted: %s", i, bad[i]);
	}
	/* the guest's own frames and operators may not report it */
	assert_int_equal(app_rc(f, "p1", SB_SRC_GUEST, "agent.progress",
				"{'label':'files','count':1}"),
			 SB_ERR_SCHEMA);
	assert_int_equal(app_rc(f, "p1", SB_SRC_OPERATOR, "agent.progress",
				"{'label':'files','count':1}"),
			 SB_ERR_SCHEMA);
	catch_up(f, 0);
	rs = rs_get(f, "p1");
	assert_string_equal(rs.progress_label, "reports checked");
	assert_true(rs.progress_count == 18 && rs.progress_total == 40);

	/* the latest wins; one without a total has none */
	snprintf(js, sizeof js, "{'label':'%s','count':3}", label64);
	app(f, "p1", SB_SRC_HOST, "agent.progress", js);
	catch_up(f, 1);
	rs = rs_get(f, "p1");
	assert_string_equal(rs.progress_label, label64);
	assert_true(rs.progress_count == 3 && rs.progress_total == 0);
	app(f, "p1", SB_SRC_HARNESS, "agent.progress",
	    "{'label':'fichiers \u00e9crits','count':5,'total':5}");
	app(f, "p1", SB_SRC_HOST, "run.stopped", "{'reason':'exited'}");
	catch_up(f, 2);
	rs = rs_get(f, "p1");
	assert_string_equal(rs.progress_label, "fichiers \u00e9crits");
	assert_true(rs.progress_count == 5 && rs.progress_total == 5 && rs.turns == 2);
	folded = fold_events(f, "p1");
	assert_same_state(&rs, &folded);
}

struct cost_list {
	char ids[256];
	uint64_t total;
};

static int collect_costs(void *ctx, const char *id, const struct sb_cost *c)
{
	struct cost_list *l = ctx;

	strcat(l->ids, id);
	strcat(l->ids, ",");
	l->total += c->cost_nusd;
	return 0;
}

static void assert_cost(struct fix *f, const char *scope, const char *id, uint64_t in,
			uint64_t out, uint64_t cached, uint64_t cost, uint64_t calls)
{
	struct sb_cost c;

	memset(&c, 0xee, sizeof c);
	assert_int_equal(sb_costs_get(f->p, scope, id, &c), SB_OK);
	if (c.input_tokens != in || c.output_tokens != out || c.cached_tokens != cached ||
	    c.cost_nusd != cost || c.calls != calls)
		fail_msg("%s/%s: %llu %llu %llu %llu %llu", scope, id,
			 (unsigned long long)c.input_tokens, (unsigned long long)c.output_tokens,
			 (unsigned long long)c.cached_tokens, (unsigned long long)c.cost_nusd,
			 (unsigned long long)c.calls);
}

/* Totals per run, group and model; only gateway usage counts, and the
 * guest cannot even write usage. */
static void test_costs(void **state)
{
	struct fix *f = *state;
	struct cost_list l;
	msgpack_sbuffer sb;
	struct sb_event ev;

	app(f, "r1", SB_SRC_HOST, "run.created", "{'name':'a','template':'t','group':'team'}");
	app(f, "r2", SB_SRC_HOST, "run.created", "{'name':'b','template':'t','group':'team'}");
	app(f, "r3", SB_SRC_HOST, "run.created", "{'name':'c','template':'t','group':'solo'}");
	app(f, "r1", SB_SRC_GATEWAY, "agent.usage.updated", USAGE("m1", 100, 10, 1000));
	app(f, "r1", SB_SRC_GATEWAY, "agent.usage.updated",
	    "{'model':'m2','input_tokens':5,'output_tokens':6,'cost_nusd':7,'total_nusd':0,"
	    "'cached_tokens':4}");
	app(f, "r2", SB_SRC_GATEWAY, "agent.usage.updated", USAGE("m1", 200, 20, 2000));
	app(f, "r3", SB_SRC_GATEWAY, "agent.usage.updated", USAGE("m2", 1, 1, 1));
	app(f, "r4", SB_SRC_GATEWAY, "agent.usage.updated", USAGE("m1", 3, 3, 3)); /* no group */
	app(f, "r1", SB_SRC_HARNESS, "agent.message", "{'role':'assistant','cost_nusd':999999}");
	catch_up(f, 9);

	assert_cost(f, "run", "r1", 105, 16, 4, 1007, 2);
	assert_cost(f, "run", "r2", 200, 20, 0, 2000, 1);
	assert_cost(f, "run", "r4", 3, 3, 0, 3, 1);
	assert_cost(f, "group", "team", 305, 36, 4, 3007, 3);
	assert_cost(f, "group", "solo", 1, 1, 0, 1, 1);
	assert_cost(f, "model", "m1", 303, 33, 0, 3003, 3);
	assert_cost(f, "model", "m2", 6, 7, 4, 8, 2);
	assert_cost(f, "run", "nobody", 0, 0, 0, 0, 0);
	assert_cost(f, "group", "", 0, 0, 0, 0, 0);
	assert_true(rs_get(f, "r1").cost_nusd == 1007);
	assert_true(rs_get(f, "r4").cost_nusd == 3);

	memset(&l, 0, sizeof l);
	assert_int_equal(sb_costs_each(f->p, "run", collect_costs, &l), SB_OK);
	assert_string_equal(l.ids, "r1,r2,r3,r4,");
	assert_true(l.total == 3011);
	memset(&l, 0, sizeof l);
	assert_int_equal(sb_costs_each(f->p, "group", collect_costs, &l), SB_OK);
	assert_string_equal(l.ids, "solo,team,");
	memset(&l, 0, sizeof l);
	assert_int_equal(sb_costs_each(f->p, "model", collect_costs, &l), SB_OK);
	assert_string_equal(l.ids, "m1,m2,");
	assert_true(l.total == 3011);

	/* The guest and the host cannot write usage at all. */
	tu_json(&sb, USAGE("m1", 1, 1, 1000000));
	assert_int_equal(sb_event_init(&ev, "agent.usage.updated", "r1", SB_SRC_GUEST, sb.data,
				       sb.size),
			 0);
	assert_int_equal(sb_log_append(f->log, &ev, 1), SB_ERR_SCHEMA);
	ev.source = SB_SRC_HOST;
	assert_int_equal(sb_log_append(f->log, &ev, 1), SB_ERR_SCHEMA);
	msgpack_sbuffer_destroy(&sb);
	catch_up(f, 0);
	assert_cost(f, "run", "r1", 105, 16, 4, 1007, 2);
}

/* Applies one event straight to a projection, in a scratch database. */
static int apply_direct(struct fix *f, const struct sb_projection *proj, MDB_dbi dbi,
			const struct sb_event *ev)
{
	struct sb_proj_txn t;
	msgpack_zone z;
	msgpack_object o;
	int rc;

	assert_int_equal(mdb_txn_begin(sb_log_env(f->log), NULL, 0, &t.txn), 0);
	t.dbi = dbi;
	msgpack_zone_init(&z, 512);
	assert_int_equal(sb_payload_parse(ev->payload, ev->payload_len, &z, &o), 0);
	rc = proj->apply(&t, ev, &o);
	assert_int_equal(mdb_txn_commit(t.txn), 0);
	msgpack_zone_destroy(&z);
	return rc;
}

/* Even if a usage event from the guest or host were in the log (an older
 * schema, a bug), the projections would not count it. */
static void test_costs_only_gateway(void **state)
{
	struct fix *f = *state;
	struct sb_proj_txn t;
	msgpack_sbuffer sb;
	struct sb_event ev;
	struct sb_runstate rs;
	MDB_txn *txn;
	MDB_dbi dbi, dbi2;
	MDB_stat st;
	MDB_val v;
	msgpack_zone z;
	msgpack_object o;

	assert_int_equal(mdb_txn_begin(sb_log_env(f->log), NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "test.costs", MDB_CREATE, &dbi), 0);
	assert_int_equal(mdb_dbi_open(txn, "test.runstate", MDB_CREATE, &dbi2), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);

	tu_json(&sb, USAGE("m1", 1, 1, 500));
	assert_int_equal(sb_event_init(&ev, "agent.usage.updated", "r9", SB_SRC_GUEST, sb.data,
				       sb.size),
			 0);
	ev.offset = ev.seq = 1;
	for (int src = SB_SRC_HOST; src <= SB_SRC_LAST; src++) {
		ev.source = (enum sb_source)src;
		assert_int_equal(apply_direct(f, &sb_proj_costs, dbi, &ev), 0);
		assert_int_equal(apply_direct(f, &sb_proj_runstate, dbi2, &ev), 0);
	}
	assert_int_equal(mdb_txn_begin(sb_log_env(f->log), NULL, MDB_RDONLY, &txn), 0);
	assert_int_equal(mdb_stat(txn, dbi, &st), 0);
	assert_int_equal(st.ms_entries, 2); /* run/r9 and model/m1 */
	t.txn = txn;
	t.dbi = dbi;
	for (int i = 0; i < 2; i++) {
		struct sb_cost c;
		const char *key = i ? "model/m1" : "run/r9";
		assert_int_equal(sb_proj_get(&t, key, strlen(key), &v), 0);
		msgpack_zone_init(&z, 1024);
		assert_int_equal(sb_payload_parse(v.mv_data, v.mv_size, &z, &o), 0);
		c.cost_nusd = sb_map_u64(&o, "cost_nusd", 0);
		c.calls = sb_map_u64(&o, "calls", 0);
		assert_true(c.cost_nusd == 500 && c.calls == 1); /* the gateway's event only */
		msgpack_zone_destroy(&z);
	}
	t.dbi = dbi2;
	assert_int_equal(sb_proj_get(&t, "r9", 2, &v), 0);
	msgpack_zone_init(&z, 1024);
	assert_int_equal(sb_payload_parse(v.mv_data, v.mv_size, &z, &o), 0);
	assert_int_equal(sb_runstate_unpack(&o, &rs), 0);
	assert_true(rs.cost_nusd == 500 && rs.events == SB_SRC_LAST + 1);
	msgpack_zone_destroy(&z);
	mdb_txn_abort(txn);
	msgpack_sbuffer_destroy(&sb);
}

struct rp_list {
	int n;
	uint64_t offs[8];
	char snaps[8][72];
};

static int collect_rp(void *ctx, const struct sb_resume_point *rp)
{
	struct rp_list *l = ctx;

	l->offs[l->n] = rp->offset;
	strcpy(l->snaps[l->n], rp->snapshot);
	l->n++;
	return 0;
}

/* Resume points: listed oldest first, per run only; the newest at or
 * before an offset is found. */
static void test_resume_points(void **state)
{
	struct fix *f = *state;
	struct sb_resume_point rp;
	struct rp_list l = {0};
	uint64_t s1, s2, s3, other, mid;

	app(f, "ab", SB_SRC_HOST, "run.created", "{'name':'n','template':'t','group':'g'}");
	s1 = app(f, "ab", SB_SRC_HOST, "snapshot.saved", "{'snapshot':'snap-1','kind':'disk'}");
	other = app(f, "abc", SB_SRC_HOST, "snapshot.saved", "{'snapshot':'x-1','kind':'full'}");
	mid = app(f, "ab", SB_SRC_HARNESS, "agent.turn.started", "{'turn':1}");
	s2 = app(f, "ab", SB_SRC_HOST, "snapshot.saved", "{'snapshot':'snap-2','kind':'full'}");
	app(f, "a", SB_SRC_HOST, "snapshot.saved", "{'snapshot':'y-1','kind':'full'}");
	s3 = app(f, "ab", SB_SRC_HOST, "snapshot.saved", "{'snapshot':'snap-3','kind':'disk'}");
	catch_up(f, 7);

	assert_int_equal(sb_resume_each(f->p, "ab", collect_rp, &l), SB_OK);
	assert_int_equal(l.n, 3);
	assert_true(l.offs[0] == s1 && l.offs[1] == s2 && l.offs[2] == s3);
	assert_string_equal(l.snaps[2], "snap-3");

	assert_int_equal(sb_resume_find(f->p, "ab", s1 - 1, &rp), SB_ERR_NOTFOUND);
	assert_int_equal(sb_resume_find(f->p, "ab", s1, &rp), SB_OK);
	assert_true(rp.offset == s1);
	assert_string_equal(rp.snapshot, "snap-1");
	assert_string_equal(rp.kind, "disk");
	assert_true(rp.seq == 2 && rp.ts_ns == 2000);
	assert_int_equal(sb_resume_find(f->p, "ab", mid, &rp), SB_OK);
	assert_true(rp.offset == s1);
	assert_int_equal(sb_resume_find(f->p, "ab", other, &rp), SB_OK);
	assert_true(rp.offset == s1);
	assert_int_equal(sb_resume_find(f->p, "ab", s2, &rp), SB_OK);
	assert_string_equal(rp.snapshot, "snap-2");
	assert_int_equal(sb_resume_find(f->p, "ab", s3 - 1, &rp), SB_OK);
	assert_string_equal(rp.snapshot, "snap-2");
	assert_int_equal(sb_resume_find(f->p, "ab", UINT64_MAX, &rp), SB_OK);
	assert_string_equal(rp.snapshot, "snap-3");
	assert_int_equal(sb_resume_find(f->p, "abc", UINT64_MAX, &rp), SB_OK);
	assert_string_equal(rp.snapshot, "x-1");
	assert_int_equal(sb_resume_find(f->p, "a", UINT64_MAX, &rp), SB_OK);
	assert_string_equal(rp.snapshot, "y-1");
	assert_int_equal(sb_resume_find(f->p, "zz", UINT64_MAX, &rp), SB_ERR_NOTFOUND);
	memset(&l, 0, sizeof l);
	assert_int_equal(sb_resume_each(f->p, "b", collect_rp, &l), SB_OK);
	assert_int_equal(l.n, 0);
}

/* Catch-up applies only what is new; a second call applies nothing and
 * counts nothing twice; the checkpoint survives reopening. */
static void test_catch_up_exactly_once(void **state)
{
	struct fix *f = *state;
	char run[8];

	assert_true(sb_projector_checkpoint(f->p) == 0);
	catch_up(f, 0);
	for (int i = 0; i < 100; i++) {
		snprintf(run, sizeof run, "x%d", i % 5);
		app(f, run, SB_SRC_GATEWAY, "agent.usage.updated", USAGE("m", 1, 2, 10));
	}
	catch_up(f, 100);
	assert_true(sb_projector_checkpoint(f->p) == 100);
	catch_up(f, 0);
	catch_up(f, 0);
	assert_cost(f, "run", "x0", 20, 40, 0, 200, 20);
	assert_cost(f, "model", "m", 100, 200, 0, 1000, 100);

	for (int i = 0; i < 50; i++)
		app(f, "x0", SB_SRC_GATEWAY, "agent.usage.updated", USAGE("m", 1, 2, 10));
	catch_up(f, 50);
	assert_true(sb_projector_checkpoint(f->p) == 150);
	assert_cost(f, "run", "x0", 70, 140, 0, 700, 70);
	assert_true(rs_get(f, "x0").events == 70);

	sb_projector_close(f->p);
	assert_int_equal(sb_projector_open(f->log, &f->p), SB_OK);
	assert_true(sb_projector_checkpoint(f->p) == 150);
	catch_up(f, 0);
	assert_cost(f, "model", "m", 150, 300, 0, 1500, 150);
}

/* A generated history of many runs, with the state it must produce. */
#define GEN_RUNS 200
#define GEN_GROUPS 7
#define GEN_MODELS 3

struct gen_run {
	char id[SB_RUN_MAX];
	int phase;   /* 0 new, 1 created, 2 resolved, 3 running, 4 ended */
	int ending;  /* 0 exited, 1 stopped, 2 timeout, 3 failed, 4 never ends */
	int body;    /* body events left before it ends */
	int64_t exit_status;
	uint64_t cost, events, snaps;
	uint64_t turns, tools, pcount, ptotal; /* completed; the latest progress */
	char plabel[16];
	char parent[SB_RUN_MAX];
};

struct gen {
	struct gen_run runs[GEN_RUNS];
	uint64_t group_cost[GEN_GROUPS], model_cost[GEN_MODELS];
	uint64_t seed, events;
};

/* Packs the next event of run r into sb and names its type and source. */
static void gen_event(struct gen *g, int r, msgpack_sbuffer *sb, const char **type,
		      enum sb_source *src)
{
	static const char *const models[] = {"claude", "gpt", "local"};
	struct gen_run *x = &g->runs[r];
	uint64_t rnd = tu_rand(&g->seed);
	char js[512];

	*src = SB_SRC_HOST;
	switch (x->phase) {
	case 0:
		*type = "run.created";
		snprintf(js, sizeof js, "{'name':'run %d','template':'t%d','group':'grp%d'}", r,
			 r % 4, r % GEN_GROUPS);
		x->phase = 1;
		break;
	case 1:
		if (r % 10 == 3 && !x->parent[0]) {
			*type = "run.resumed";
			memcpy(x->parent, g->runs[r - 1].id, sizeof x->parent);
			snprintf(js, sizeof js, "{'from_run':'%s','from_offset':%d}", x->parent, r);
			break;
		}
		*type = "run.policy.resolved";
		snprintf(js, sizeof js,
			 "{'template_hash':'h%d','cpus':%d,'memory_mib':256,'timeout_s':60,"
			 "'network':'none','budget_nusd':1000000}",
			 r, 1 + r % 4);
		x->phase = 2;
		break;
	case 2:
		*type = "run.started";
		snprintf(js, sizeof js, "{'accel':'tcg'}");
		x->phase = 3;
		break;
	default:
		if (x->body-- > 0 || x->ending == 4) {
			switch (rnd % 10) {
			case 0:
			case 1: {
				int m = (int)((rnd >> 8) % GEN_MODELS);
				uint64_t c = (rnd >> 16) % 100000;
				*type = "agent.usage.updated";
				*src = SB_SRC_GATEWAY;
				snprintf(js, sizeof js,
					 "{'model':'%s','input_tokens':%llu,'output_tokens':7,"
					 "'cost_nusd':%llu,'total_nusd':0}",
					 models[m], (unsigned long long)(rnd >> 40) % 5000,
					 (unsigned long long)c);
				x->cost += c;
				g->group_cost[r % GEN_GROUPS] += c;
				g->model_cost[m] += c;
				break;
			}
			case 2:
				*type = "snapshot.saved";
				snprintf(js, sizeof js, "{'snapshot':'s-%d-%llu','kind':'full'}", r,
					 (unsigned long long)x->snaps++);
				break;
			case 3:
				*type = "agent.tool.completed";
				*src = SB_SRC_HARNESS;
				x->tools++;
				snprintf(js, sizeof js,
					 "{'tool':'bash','args':'grep -rn TODO src/ | head -%llu',"
					 "'exit':%d,'duration_ms':%llu}",
					 (unsigned long long)rnd % 50, (int)(rnd % 3) - 1,
					 (unsigned long long)(rnd >> 20) % 9000);
				break;
			case 4:
				*type = "agent.file.changed";
				*src = SB_SRC_GUEST;
				snprintf(js, sizeof js,
					 "{'path':'/work/f%llu.c','kind':'modified','size':%llu,"
					 "'xxh3':'0123456789abcdef'}",
					 (unsigned long long)rnd % 20, (unsigned long long)(rnd >> 30) % 100000);
				break;
			case 5:
				*type = "agent.message";
				*src = SB_SRC_HARNESS;
				snprintf(js, sizeof js, "{'role':'assistant','text':'step %llu'}",
					 (unsigned long long)rnd % 1000);
				break;
			case 6:
				*type = "agent.output";
				*src = SB_SRC_GUEST;
				snprintf(js, sizeof js, "{'stream':'stdout','data':'line %llu'}",
					 (unsigned long long)rnd % 1000);
				break;
			case 7:
				*type = (rnd >> 9) % 2 ? "net.denied" : "net.resolved";
				if ((rnd >> 9) % 2)
					snprintf(js, sizeof js,
						 "{'dst':'10.0.0.%llu','port':443,'proto':'tcp',"
						 "'reason':'not granted','count':%llu}",
						 (unsigned long long)rnd % 250,
						 (unsigned long long)(rnd >> 40) % 9 + 1);
				else
					snprintf(js, sizeof js,
						 "{'name':'a.test','type':'A','addrs':['192.0.2.%llu'],"
						 "'count':%llu}",
						 (unsigned long long)rnd % 250,
						 (unsigned long long)(rnd >> 40) % 9 + 1);
				break;
			case 8:
				if ((rnd >> 9) % 2) {
					*type = "run.warning";
					*src = SB_SRC_GATEWAY;
					snprintf(js, sizeof js, "{'message':'slow upstream'}");
					break;
				}
				/* progress, with a total or (every third) without */
				*type = "agent.progress";
				*src = (rnd >> 10) % 2 ? SB_SRC_HARNESS : SB_SRC_HOST;
				snprintf(x->plabel, sizeof x->plabel, "step %llu",
					 (unsigned long long)(rnd >> 12) % 7);
				x->pcount = (rnd >> 16) % 100;
				x->ptotal = (rnd >> 24) % 3 ? 100 + (rnd >> 32) % 50 : 0;
				if (x->ptotal)
					snprintf(js, sizeof js, "{'label':'%s','count':%llu,'total':%llu}",
						 x->plabel, (unsigned long long)x->pcount,
						 (unsigned long long)x->ptotal);
				else
					snprintf(js, sizeof js, "{'label':'%s','count':%llu}", x->plabel,
						 (unsigned long long)x->pcount);
				break;
			default:
				*type = (rnd >> 8) % 2 ? "agent.turn.started" : "agent.turn.completed";
				*src = SB_SRC_HARNESS;
				x->turns += !((rnd >> 8) % 2);
				snprintf(js, sizeof js, "{'turn':%llu}", (unsigned long long)rnd % 100);
				break;
			}
			break;
		}
		/* The run ends. */
		switch (x->ending) {
		case 0:
			if (!x->exit_status) {
				x->exit_status = (int64_t)(rnd % 5) - 2;
				if (!x->exit_status)
					x->exit_status = 1;
				*type = "run.exited";
				*src = SB_SRC_GUEST;
				snprintf(js, sizeof js, "{'status':%lld}", (long long)x->exit_status);
				x->body = 0;
				break;
			}
			*type = "run.stopped";
			snprintf(js, sizeof js, "{'reason':'exited'}");
			x->phase = 4;
			break;
		case 1:
			*type = "run.stopped";
			snprintf(js, sizeof js, "{'reason':'cancelled by user %d'}", r);
			x->phase = 4;
			break;
		case 2:
			*type = "run.stopped";
			snprintf(js, sizeof js, "{'reason':'timeout'}");
			x->phase = 4;
			break;
		default:
			*type = "run.failed";
			snprintf(js, sizeof js, "{'reason':'vm crashed %d'}", r);
			x->phase = 4;
			break;
		}
		break;
	}
	x->events++;
	g->events++;
	tu_json(sb, js);
}

static void gen_init(struct gen *g)
{
	memset(g, 0, sizeof *g);
	g->seed = 0x5eed5eed12345ull;
	for (int r = 0; r < GEN_RUNS; r++) {
		struct gen_run *x = &g->runs[r];
		snprintf(x->id, sizeof x->id, "%012llx",
			 (unsigned long long)(tu_rand(&g->seed) & 0xffffffffffffull));
		x->ending = (int)(tu_rand(&g->seed) % 5);
		x->body = 30 + (int)(tu_rand(&g->seed) % 60);
	}
}

/* Appends up to n more events, in batches of up to 50; returns how many. */
static int gen_append(struct fix *f, struct gen *g, int n)
{
	struct sb_event evs[50];
	msgpack_sbuffer pl[50];
	int done = 0;

	while (done < n) {
		int k = 0;
		while (k < 50 && done + k < n) {
			const char *type;
			enum sb_source src;
			int r = (int)(tu_rand(&g->seed) % GEN_RUNS), tries = 0;
			while (g->runs[r].phase == 4 && tries++ < GEN_RUNS)
				r = (r + 1) % GEN_RUNS;
			if (g->runs[r].phase == 4)
				break;
			gen_event(g, r, &pl[k], &type, &src);
			assert_int_equal(sb_event_init(&evs[k], type, g->runs[r].id, src, pl[k].data,
						       pl[k].size),
					 0);
			evs[k].ts_ns = 1700000000000000000ull + g->events * 1000;
			k++;
		}
		if (!k)
			break;
		int rc = sb_log_append(f->log, evs, (size_t)k);
		if (rc)
			fail_msg("generated append: %s", sb_errmsg(rc));
		for (int i = 0; i < k; i++)
			msgpack_sbuffer_destroy(&pl[i]);
		done += k;
	}
	return done;
}

static int count_rp(void *ctx, const struct sb_resume_point *rp)
{
	(*(uint64_t *)ctx)++;
	return 0;
}

/* Checks every projection against what the generator says it must hold. */
static void gen_verify(struct fix *f, struct gen *g)
{
	static const char *const models[] = {"claude", "gpt", "local"};
	static const char *const status[] = {"exited", "stopped", "timeout", "failed", "running"};

	for (int r = 0; r < GEN_RUNS; r++) {
		struct gen_run *x = &g->runs[r];
		struct sb_runstate rs = rs_get(f, x->id);
		struct sb_cost c;
		uint64_t snaps = 0;

		if (rs.events != x->events || rs.cost_nusd != x->cost)
			fail_msg("run %s: %llu events, cost %llu", x->id,
				 (unsigned long long)rs.events, (unsigned long long)rs.cost_nusd);
		assert_true(rs.last_seq == x->events);
		if (x->phase == 4)
			assert_string_equal(rs.status, status[x->ending]);
		if (x->phase == 4 && x->ending == 0)
			assert_true(rs.has_exit && rs.exit_status == x->exit_status);
		if (x->phase == 4 && x->ending == 1) {
			char want[64];
			snprintf(want, sizeof want, "cancelled by user %d", r);
			assert_string_equal(rs.reason, want);
		}
		assert_true(rs.cpus == (uint64_t)(1 + r % 4));
		assert_true(rs.turns == x->turns && rs.tool_calls == x->tools);
		assert_string_equal(rs.progress_label, x->plabel);
		assert_true(rs.progress_count == x->pcount && rs.progress_total == x->ptotal);
		assert_string_equal(rs.parent, x->parent);
		assert_true(rs.parent_offset == (x->parent[0] ? (uint64_t)r : 0));
		assert_int_equal(sb_costs_get(f->p, "run", x->id, &c), 0);
		assert_true(c.cost_nusd == x->cost);
		assert_int_equal(sb_resume_each(f->p, x->id, count_rp, &snaps), 0);
		assert_true(snaps == x->snaps);
	}
	for (int i = 0; i < GEN_GROUPS; i++) {
		char grp[16];
		struct sb_cost c;
		snprintf(grp, sizeof grp, "grp%d", i);
		assert_int_equal(sb_costs_get(f->p, "group", grp, &c), 0);
		assert_true(c.cost_nusd == g->group_cost[i]);
	}
	for (int i = 0; i < GEN_MODELS; i++) {
		struct sb_cost c;
		assert_int_equal(sb_costs_get(f->p, "model", models[i], &c), 0);
		assert_true(c.cost_nusd == g->model_cost[i]);
	}
}

static const char *const proj_names[] = {"runstate", "costs", "resume", "tree"};
#define NPROJ_NAMES (sizeof proj_names / sizeof proj_names[0])

/* A history of 200 runs and ~20k events of every kind: state caught up in
 * uneven chunks is right, and equals, byte for byte, the state rebuilt
 * from offset 0. */
static void test_rebuild_equality(void **state)
{
	static const int chunks[] = {1, 999, 4000, 10000, 3, 6000};
	struct fix *f = *state;
	struct gen *g = malloc(sizeof *g);
	uint8_t before[NPROJ_NAMES][32], after[NPROJ_NAMES][32], empty[32];
	uint64_t total = 0;
	int ended = 0, progressed = 0;

	assert_non_null(g);
	gen_init(g);
	assert_int_equal(sb_projector_digest(f->p, "runstate", empty), SB_OK);
	for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
		int n = gen_append(f, g, chunks[i]);
		total += (uint64_t)n;
		catch_up(f, (uint64_t)n);
		if (i == 2)
			catch_up(f, 0);
	}
	assert_true(total == g->events);
	assert_true(total == 21003);
	assert_true(sb_projector_checkpoint(f->p) == total);
	for (int r = 0; r < GEN_RUNS; r++) {
		ended += g->runs[r].phase == 4;
		progressed += g->runs[r].plabel[0] && g->runs[r].turns && g->runs[r].tools;
	}
	assert_true(ended >= 140);	/* most runs reached their end */
	assert_true(progressed >= 100); /* and reported progress, turns and tools */
	gen_verify(f, g);

	for (size_t i = 0; i < NPROJ_NAMES; i++)
		assert_int_equal(sb_projector_digest(f->p, proj_names[i], before[i]), SB_OK);
	assert_memory_not_equal(before[0], empty, 32);
	assert_int_equal(sb_projector_rebuild(f->p), SB_OK);
	assert_true(sb_projector_checkpoint(f->p) == total);
	for (size_t i = 0; i < NPROJ_NAMES; i++) {
		assert_int_equal(sb_projector_digest(f->p, proj_names[i], after[i]), SB_OK);
		if (memcmp(before[i], after[i], 32))
			fail_msg("projection %s differs after rebuild", proj_names[i]);
	}
	gen_verify(f, g);
	free(g);
}

/* A corrupt record stops catch-up before it, with its offset in the
 * detail; nothing after it is applied. */
static void test_corrupt_stops(void **state)
{
	struct fix *f = *state;
	uint8_t key[8] = {0, 0, 0, 0, 0, 0, 0, 3};
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_val k = {8, key}, v = {5, "junk!"};
	uint64_t n;
	int rc;

	for (int i = 0; i < 5; i++)
		app(f, "c1", SB_SRC_GATEWAY, "agent.usage.updated", USAGE("m", 1, 1, 1));
	assert_int_equal(mdb_txn_begin(sb_log_env(f->log), NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "events", 0, &dbi), 0);
	assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	rc = sb_projector_catch_up(f->p, &n);
	assert_int_equal(rc, SB_ERR_CORRUPT);
	tu_errmsg_has(rc, "offset 3");
	assert_true(sb_projector_checkpoint(f->p) < 3);
	{
		struct sb_cost c;
		assert_int_equal(sb_costs_get(f->p, "run", "c1", &c), 0);
		assert_true(c.calls == sb_projector_checkpoint(f->p));
	}
}

/* The roots of the first m leaves, folded from the log's records and
 * salts leaf by leaf (no tiles), for each m in want[] (ascending). */
static void tree_roots_by_fold(struct fix *f, const uint64_t *want, size_t nwant,
			       uint8_t (*roots)[SB_MERKLE_HASH])
{
	struct sb_merkle_fold fold;
	sb_log_iter *it;
	struct sb_event ev;
	uint8_t salt[SB_SALT_LEN], h[SB_MERKLE_HASH];

	for (size_t w = 0; w < nwant; w++) {
		sb_merkle_fold_init(&fold, want[w]);
		assert_int_equal(sb_log_iter_open(f->log, 1, &it), SB_OK);
		for (uint64_t i = 0; i < want[w]; i++) {
			assert_int_equal(sb_log_iter_next(it, &ev), SB_OK);
			int rc = sb_log_salt(f->log, NULL, ev.offset, 0, salt);
			if (rc)
				fail_msg("salt of %llu: %s", (unsigned long long)ev.offset, sb_errmsg(rc));
			sb_tree_leaf_hash(&ev, salt, h);
			assert_int_equal(sb_merkle_fold_push(&fold, i, i + 1, h), SB_OK);
		}
		sb_log_iter_close(it);
		assert_int_equal(sb_merkle_fold_root(&fold, roots[w]), SB_OK);
	}
}

/* The tree projection over 66000 records (a full level-1 tile, so one
 * level-2 hash): its roots at several sizes are those folded from the
 * records; inclusion and consistency proofs read from its tiles check;
 * salts are kept, so a rebuild makes the same root. */
static void test_tree(void **state)
{
	static const uint64_t sizes[] = {1, 255, 256, 257, 4097, 65535, 65536, 66000};
	enum { NS = sizeof sizes / sizeof sizes[0] };
	struct fix *f = *state;
	uint8_t roots[NS][SB_MERKLE_HASH], got[SB_MERKLE_HASH];
	uint8_t proof[SB_MERKLE_PROOF_MAX][SB_MERKLE_HASH], salt[SB_SALT_LEN], h[SB_MERKLE_HASH];
	struct sb_proj_txn t;
	struct sb_event ev;
	sb_log_iter *it;
	size_t len;
	uint64_t n;

	for (int i = 0; i < 66000; i++)
		app(f, i % 3 ? "t1" : "t2", SB_SRC_GATEWAY, "agent.usage.updated",
		    USAGE("m", 1, 1, 1));
	assert_int_equal(sb_projector_catch_up(f->p, NULL), SB_OK);
	tree_roots_by_fold(f, sizes, NS, roots);
	assert_int_equal(sb_projector_read(f->p, "tree", &t), SB_OK);
	assert_int_equal(sb_tree_size(&t, &n), SB_OK);
	assert_true(n == 66000);
	for (size_t s = 0; s < NS; s++) {
		assert_int_equal(sb_merkle_root(sb_tree_read, &t, sizes[s], got), SB_OK);
		assert_memory_equal(got, roots[s], SB_MERKLE_HASH);
		for (size_t r = 0; r < s; r++) {
			assert_int_equal(sb_merkle_consistency(sb_tree_read, &t, sizes[r], sizes[s],
							       proof, &len), SB_OK);
			assert_true(sb_merkle_consistency_check(sizes[r], sizes[s], roots[r],
								roots[s], proof, len));
		}
	}
	assert_int_equal(sb_log_iter_open(f->log, 65000, &it), SB_OK);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_OK);
	assert_int_equal(sb_log_salt(f->log, NULL, ev.offset, 0, salt), SB_OK);
	sb_tree_leaf_hash(&ev, salt, h);
	assert_int_equal(sb_merkle_inclusion(sb_tree_read, &t, 64999, n, proof, &len), SB_OK);
	assert_true(sb_merkle_inclusion_check(64999, n, h, proof, len, roots[NS - 1]));
	salt[0] ^= 1; /* another salt makes another leaf */
	sb_tree_leaf_hash(&ev, salt, h);
	assert_false(sb_merkle_inclusion_check(64999, n, h, proof, len, roots[NS - 1]));
	sb_log_iter_close(it);
	mdb_txn_abort(t.txn);

	assert_int_equal(sb_projector_rebuild(f->p), SB_OK);
	assert_int_equal(sb_projector_read(f->p, "tree", &t), SB_OK);
	assert_int_equal(sb_merkle_root(sb_tree_read, &t, 66000, got), SB_OK);
	assert_memory_equal(got, roots[NS - 1], SB_MERKLE_HASH);
	mdb_txn_abort(t.txn);
}

/* Unknown projection names are refused. */
static void test_unknown_projection(void **state)
{
	struct fix *f = *state;
	struct sb_proj_txn t;
	uint8_t d[32];

	assert_int_equal(sb_projector_digest(f->p, "nope", d), SB_ERR_NOTFOUND);
	assert_int_equal(sb_projector_read(f->p, "nope", &t), SB_ERR_NOTFOUND);
	assert_int_equal(sb_projector_read(f->p, "costs", &t), SB_OK);
	mdb_txn_abort(t.txn);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_runstate_lifecycle, setup, teardown),
		cmocka_unit_test_setup_teardown(test_runstate_endings, setup, teardown),
		cmocka_unit_test_setup_teardown(test_runstate_parent_each, setup, teardown),
		cmocka_unit_test_setup_teardown(test_costs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_costs_only_gateway, setup, teardown),
		cmocka_unit_test_setup_teardown(test_resume_points, setup, teardown),
		cmocka_unit_test_setup_teardown(test_catch_up_exactly_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rebuild_equality, setup, teardown),
		cmocka_unit_test_setup_teardown(test_version_rebuilds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_runstate_resumed_self, setup, teardown),
		cmocka_unit_test_setup_teardown(test_runstate_progress, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_stops, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_projection, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tree, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
