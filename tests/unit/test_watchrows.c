/* test_watchrows.c - the rows of sanbox watch: events folded into the rows
 * of the runs watched (status, cost and tokens from the gateway only,
 * progress, turns and tools, snapshots, denials), new runs of the group
 * taken in and others left out, events the state holds already skipped,
 * totals and the end of a group, the name filter, and the pane of one
 * run's latest events in offset order, full or not.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/watchrows.h"
#include "engine/error.h"
#include "engine/payload.h"
#include "tests/unit/testutil.h"

#define RUN_A "aaaaaaaaaaaa"
#define RUN_B "bbbbbbbbbbbb"
#define RUN_C "cccccccccccc"

/* Folds the event (type, run, offset, source, payload as JSON) into w and
 * returns the row it changed (NULL: none). */
static struct cli_wrow *fold(struct cli_wrows *w, const char *type, const char *run,
			     uint64_t offset, enum sb_source src, const char *json)
{
	struct cli_wrow *changed = (struct cli_wrow *)1;
	msgpack_sbuffer sb;
	msgpack_zone zone;
	msgpack_object map;
	struct sb_event ev;

	tu_json(&sb, json);
	assert_true(msgpack_zone_init(&zone, 1024));
	assert_int_equal(sb_payload_parse(sb.data, sb.size, &zone, &map), SB_OK);
	assert_int_equal(sb_event_init(&ev, type, run, src, sb.data, sb.size), SB_OK);
	ev.offset = offset;
	ev.seq = offset;
	ev.ts_ns = offset * 1000000000ull;
	assert_int_equal(cli_wrows_apply(w, &ev, &map, &changed), SB_OK);
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&sb);
	return changed;
}

/* A run's state as runs.list gives it: running since offset last. */
static struct sb_runstate state(const char *run, const char *name, const char *status,
				uint64_t last)
{
	struct sb_runstate rs;

	memset(&rs, 0, sizeof rs);
	snprintf(rs.run, sizeof rs.run, "%s", run);
	snprintf(rs.name, sizeof rs.name, "%s", name);
	snprintf(rs.group, sizeof rs.group, "g");
	snprintf(rs.status, sizeof rs.status, "%s", status);
	rs.budget_nusd = 1000000000;
	rs.cost_nusd = 5;
	rs.last_offset = last;
	rs.started_ns = 1;
	return rs;
}

/* A group's rows: what is folded into them, and what is not. */
static void test_group_fold(void **st)
{
	struct cli_wrows w;
	struct sb_runstate a = state(RUN_A, "alpha", "running", 10);
	struct cli_wrow *r;

	(void)st;
	cli_wrows_init(&w, CLI_WSCOPE_GROUP, "g");
	assert_int_equal(cli_wrows_add(&w, &a, &r), SB_OK);
	assert_int_equal(cli_wrows_add(&w, &a, NULL), SB_OK); /* once */
	assert_int_equal(w.n, 1);
	/* in the state already: skipped, whatever it says */
	assert_null(fold(&w, "agent.usage.updated", RUN_A, 10, SB_SRC_GATEWAY,
			 "{'model':'m','input_tokens':1,'output_tokens':1,'cost_nusd':7,"
			 "'total_nusd':12}"));
	assert_int_equal(w.v[0].rs.cost_nusd, 5);
	/* cost and tokens from the gateway; a harness claiming usage counts nothing */
	r = fold(&w, "agent.usage.updated", RUN_A, 11, SB_SRC_GATEWAY,
		 "{'model':'m','input_tokens':100,'output_tokens':40,'cost_nusd':7,"
		 "'total_nusd':12}");
	assert_ptr_equal(r, &w.v[0]);
	assert_int_equal(r->rs.cost_nusd, 12);
	assert_int_equal(r->in_tokens, 100);
	assert_int_equal(r->out_tokens, 40);
	fold(&w, "agent.usage.updated", RUN_A, 12, SB_SRC_HARNESS,
	     "{'model':'m','input_tokens':9,'output_tokens':9,'cost_nusd':9,'total_nusd':9}");
	assert_int_equal(w.v[0].rs.cost_nusd, 12);
	assert_int_equal(w.v[0].in_tokens, 100);
	/* progress, turns, tools, snapshots, denials */
	fold(&w, "agent.turn.completed", RUN_A, 13, SB_SRC_HARNESS, "{'turn':1}");
	fold(&w, "agent.tool.completed", RUN_A, 14, SB_SRC_HARNESS,
	     "{'tool':'sh','args':'ls','exit':0,'duration_ms':3}");
	assert_int_equal(w.v[0].rs.turns, 1);
	assert_int_equal(w.v[0].rs.tool_calls, 1);
	fold(&w, "agent.progress", RUN_A, 15, SB_SRC_HARNESS,
	     "{'label':'reports checked','count':18,'total':40}");
	assert_string_equal(w.v[0].rs.progress_label, "reports checked");
	assert_int_equal(w.v[0].rs.progress_count, 18);
	assert_int_equal(w.v[0].rs.progress_total, 40);
	fold(&w, "snapshot.saved", RUN_A, 16, SB_SRC_HOST, "{'snapshot':'s1','kind':'disk'}");
	assert_int_equal(w.v[0].snap_ns, 16000000000ull);
	assert_int_equal(w.v[0].rs.snapshots, 1);
	fold(&w, "net.denied", RUN_A, 17, SB_SRC_HOST,
	     "{'dst':'1.2.3.4','port':443,'proto':'tcp','reason':'no grant','count':3}");
	assert_int_equal(w.v[0].rs.net_denied, 3);
	r = fold(&w, "run.stopped", RUN_A, 18, SB_SRC_HOST, "{'reason':'stopped'}");
	assert_string_equal(r->rs.status, "stopped");
	assert_int_equal(r->rs.last_offset, 18);
	assert_string_equal(r->rs.last_type, "run.stopped");
	cli_wrows_free(&w);
}

/* New runs: a group takes its own, not another's; a group's stream and
 * unknown runs change nothing; every-run scope takes all; named runs
 * none. */
static void test_new_runs(void **st)
{
	struct cli_wrows w;
	struct cli_wrow *r;

	(void)st;
	cli_wrows_init(&w, CLI_WSCOPE_GROUP, "g");
	assert_null(fold(&w, "run.created", RUN_B, 20, SB_SRC_HOST,
			 "{'name':'other','template':'shell','group':'h'}"));
	assert_null(fold(&w, "run.started", RUN_B, 21, SB_SRC_HOST, "{'accel':'tcg'}"));
	assert_null(fold(&w, "group.created", "g-0123456789", 22, SB_SRC_HOST,
			 "{'name':'g','goal':'','budget_nusd':0,'planned':1,'runs':['x']}"));
	r = fold(&w, "run.created", RUN_C, 23, SB_SRC_HOST,
		 "{'name':'new','template':'shell','group':'g'}");
	assert_non_null(r);
	assert_int_equal(w.n, 1);
	assert_string_equal(r->rs.run, RUN_C);
	assert_string_equal(r->rs.name, "new");
	assert_string_equal(r->rs.status, "created");
	assert_int_equal(r->rs.created_ns, 23000000000ull);
	fold(&w, "run.started", RUN_C, 24, SB_SRC_HOST, "{'accel':'tcg'}");
	assert_string_equal(w.v[0].rs.status, "running");
	cli_wrows_free(&w);

	cli_wrows_init(&w, CLI_WSCOPE_ALL, NULL);
	assert_non_null(fold(&w, "run.created", RUN_B, 20, SB_SRC_HOST,
			     "{'name':'other','template':'shell','group':''}"));
	assert_int_equal(w.n, 1);
	cli_wrows_free(&w);

	cli_wrows_init(&w, CLI_WSCOPE_RUNS, NULL);
	assert_null(fold(&w, "run.created", RUN_B, 20, SB_SRC_HOST,
			 "{'name':'other','template':'shell','group':''}"));
	assert_int_equal(w.n, 0);
	cli_wrows_free(&w);
}

/* Totals as group.get counts, the group's end (all ended and all its
 * planned runs there), and the filter. */
static void test_totals_end_filter(void **st)
{
	struct cli_wrows w;
	struct sb_runstate s[4] = {state(RUN_A, "Alpha-1", "running", 1),
				   state(RUN_B, "beta", "queued", 2),
				   state(RUN_C, "gamma", "exited", 3),
				   state("dddddddddddd", "delta", "budget", 4)};
	struct cli_wtotals t;

	(void)st;
	s[2].has_exit = 1;
	cli_wrows_init(&w, CLI_WSCOPE_GROUP, "g");
	w.planned = 5;
	for (int i = 0; i < 4; i++)
		assert_int_equal(cli_wrows_add(&w, &s[i], NULL), SB_OK);
	cli_wrows_totals(&w, &t);
	assert_int_equal(t.runs, 4);
	assert_int_equal(t.live, 1);
	assert_int_equal(t.queued, 1);
	assert_int_equal(t.done, 1);
	assert_int_equal(t.failed, 1);
	assert_int_equal(t.cost_nusd, 20);
	assert_int_equal(t.budget_nusd, 4000000000ull);
	assert_false(cli_wrows_ended(&w));
	fold(&w, "run.stopped", RUN_A, 5, SB_SRC_HOST, "{'reason':'stopped'}");
	fold(&w, "run.stopped", RUN_B, 6, SB_SRC_HOST, "{'reason':'stopped'}");
	assert_false(cli_wrows_ended(&w)); /* one planned run is not there yet */
	fold(&w, "run.created", "eeeeeeeeeeee", 7, SB_SRC_HOST,
	     "{'name':'eps','template':'shell','group':'g'}");
	assert_false(cli_wrows_ended(&w));
	fold(&w, "run.failed", "eeeeeeeeeeee", 8, SB_SRC_HOST, "{'reason':'no kernel'}");
	assert_true(cli_wrows_ended(&w));
	cli_wrows_totals(&w, &t);
	assert_int_equal(t.failed, 4);

	assert_true(cli_wrow_match(&w.v[0], ""));
	assert_true(cli_wrow_match(&w.v[0], "alpha"));
	assert_true(cli_wrow_match(&w.v[0], "A-1"));
	assert_false(cli_wrow_match(&w.v[0], "aaaa")); /* the id of a run with a name */
	assert_false(cli_wrow_match(&w.v[0], "beta"));
	cli_wrows_free(&w);
}

/* The pane: one run's lines in offset order, each once; the oldest go when
 * it is full; another run's are not taken; lines cut at a character. */
static void test_pane(void **st)
{
	static struct cli_wpane p;
	char line[32], big[CLI_WPANE_LINE + 8];

	(void)st;
	memset(&p, 0, sizeof p);
	cli_wpane_select(&p, RUN_A);
	cli_wpane_put(&p, RUN_A, 100, "live 100");
	cli_wpane_put(&p, RUN_A, 101, "live 101");
	cli_wpane_put(&p, RUN_B, 102, "another run's");
	/* the past comes after the live lines: it goes before them */
	cli_wpane_put(&p, RUN_A, 50, "past 50");
	cli_wpane_put(&p, RUN_A, 100, "live 100 again");
	assert_int_equal(p.n, 3);
	assert_string_equal(cli_wpane_line(&p, 0), "past 50");
	assert_string_equal(cli_wpane_line(&p, 1), "live 100");
	assert_string_equal(cli_wpane_line(&p, 2), "live 101");
	/* full: the newest CLI_WPANE_LINES stay */
	for (uint64_t o = 200; o < 200 + 2 * CLI_WPANE_LINES; o++) {
		snprintf(line, sizeof line, "line %llu", (unsigned long long)o);
		cli_wpane_put(&p, RUN_A, o, line);
	}
	assert_int_equal(p.n, CLI_WPANE_LINES);
	assert_int_equal(p.offset[0], 200 + CLI_WPANE_LINES);
	snprintf(line, sizeof line, "line %d", 200 + 2 * CLI_WPANE_LINES - 1);
	assert_string_equal(cli_wpane_line(&p, CLI_WPANE_LINES - 1), line);
	/* older than all of a full pane: not kept; between two: kept */
	cli_wpane_put(&p, RUN_A, 60, "too old");
	assert_int_equal(p.offset[0], 200 + CLI_WPANE_LINES);
	cli_wpane_put(&p, RUN_A, 1000, "newest");
	assert_string_equal(cli_wpane_line(&p, CLI_WPANE_LINES - 1), "newest");
	for (size_t i = 1; i < p.n; i++)
		assert_true(p.offset[i - 1] < p.offset[i]);
	/* the same run again keeps it; another empties it */
	cli_wpane_select(&p, RUN_A);
	assert_int_equal(p.n, CLI_WPANE_LINES);
	cli_wpane_select(&p, RUN_B);
	assert_int_equal(p.n, 0);
	/* a line longer than kept is cut before a character, never inside */
	memset(big, 'x', sizeof big);
	memcpy(big + CLI_WPANE_LINE - 2, "\u00e9\u00e9", 4);
	big[sizeof big - 1] = 0;
	cli_wpane_put(&p, RUN_B, 1, big);
	assert_int_equal(strlen(cli_wpane_line(&p, 0)), CLI_WPANE_LINE - 2);
	cli_wrows_free(&(struct cli_wrows){0});
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_group_fold),
		cmocka_unit_test(test_new_runs),
		cmocka_unit_test(test_totals_end_filter),
		cmocka_unit_test(test_pane),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
