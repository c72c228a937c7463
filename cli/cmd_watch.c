/* cmd_watch.c - sanbox watch: a live view of runs, fed by the daemon's
 * events. The rows are read once here (runs.list, group.get or run.get),
 * then every event that follows is folded into them (cli/watchfeed.c,
 * cli/watchrows.h); a terminal gets the view of cli/watchview.c, anything
 * else a plain line per change. */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/watch.h"
#include "engine/error.h"
#include "engine/log/summary.h"
#include "engine/payload.h"

/* ---- loading the rows ---- */

/* Sets *end to the log's last offset (health): the rows read after it
 * hold every event up to it. Errors: those of the call. */
static int log_end(sb_client *c, uint64_t *end)
{
	struct cli_req r;
	struct sb_reply rep;
	int rc;

	cli_req_begin(&r, "health");
	if ((rc = cli_call(c, &r, &rep)) == SB_OK)
		*end = sb_map_u64(&rep.map, "last_offset", 0);
	sb_reply_free(&rep);
	return rc;
}

/* Adds a row for each run state map of list (an array). Errors:
 * SB_ERR_PROTO, SB_ERR_NOMEM. */
static int rows_add_list(struct cli_watch *w, const msgpack_object *list)
{
	struct sb_runstate rs;
	int rc;

	if (!list || list->type != MSGPACK_OBJECT_ARRAY)
		return sb_seterr(SB_ERR_PROTO, "malformed reply");
	for (uint32_t i = 0; i < list->via.array.size; i++) {
		memset(&rs, 0, sizeof rs);
		if (sb_runstate_unpack(&list->via.array.ptr[i], &rs) == SB_OK && rs.run[0] &&
		    (rc = cli_wrows_add(&w->rows, &rs, NULL)))
			return rc;
	}
	return SB_OK;
}

/* The group name's runs and what it is (group.get). Errors:
 * SB_ERR_NOTFOUND (no such group), those of the call. */
static int load_group(sb_client *c, struct cli_watch *w, const char *name)
{
	const msgpack_object *g;
	struct cli_req r;
	struct sb_reply rep;
	int rc;

	cli_req_begin(&r, "group.get");
	sb_mapw_str(&r.m, "group", name);
	if ((rc = cli_call(c, &r, &rep)) == SB_OK) {
		g = sb_map_get(sb_map_get(&rep.map, "group"), "group");
		cli_wrows_init(&w->rows, CLI_WSCOPE_GROUP, name);
		w->rows.planned = sb_map_u64(g, "planned", 0);
		w->group_budget = sb_map_u64(g, "budget_nusd", 0);
		sb_map_str(g, "goal", w->goal, sizeof w->goal);
		rc = rows_add_list(w, sb_map_get(&rep.map, "runs"));
	}
	sb_reply_free(&rep);
	return rc;
}

static int older_first(const void *a, const void *b)
{
	const struct sb_runstate *x = &((const struct cli_wrow *)a)->rs,
				 *y = &((const struct cli_wrow *)b)->rs;

	return x->created_ns < y->created_ns ? -1 : x->created_ns > y->created_ns ? 1
										  : strcmp(x->run, y->run);
}

/* Every run (runs.list), oldest first. Errors: those of the call. */
static int load_all(sb_client *c, struct cli_watch *w)
{
	struct cli_req r;
	struct sb_reply rep;
	int rc;

	cli_req_begin(&r, "runs.list");
	cli_wrows_init(&w->rows, CLI_WSCOPE_ALL, NULL);
	if ((rc = cli_call(c, &r, &rep)) == SB_OK &&
	    (rc = rows_add_list(w, sb_map_get(&rep.map, "runs"))) == SB_OK && w->rows.n)
		qsort(w->rows.v, w->rows.n, sizeof w->rows.v[0], older_first);
	sb_reply_free(&rep);
	return rc;
}

/* The runs names name (ids, prefixes or names). Errors: those of the
 * calls. */
static int load_runs(sb_client *c, struct cli_watch *w, char **names, int n)
{
	char run[SB_RUN_MAX];
	int rc = SB_OK;

	cli_wrows_init(&w->rows, CLI_WSCOPE_RUNS, NULL);
	for (int i = 0; i < n && rc == SB_OK; i++) {
		if ((rc = cli_resolve(c, names[i], run)) == SB_OK)
			rc = cli_watch_add_run(c, w, run);
	}
	return rc;
}

/* Row r's tokens (costs.get, when tokens is set) and the time of its
 * newest snapshot (snapshots.list), which its state does not hold.
 * Errors: those of the calls. */
static int load_extras(sb_client *c, struct cli_wrow *r, int tokens)
{
	const msgpack_object *snaps;
	struct cli_req q;
	struct sb_reply rep = {0};
	int rc = SB_OK;

	if (tokens) {
		cli_req_begin(&q, "costs.get");
		sb_mapw_str(&q.m, "scope", "run");
		sb_mapw_str(&q.m, "id", r->rs.run);
		if ((rc = cli_call(c, &q, &rep)) == SB_OK) {
			r->in_tokens = sb_map_u64(sb_map_get(&rep.map, "cost"), "input_tokens", 0);
			r->out_tokens = sb_map_u64(sb_map_get(&rep.map, "cost"), "output_tokens", 0);
		}
		sb_reply_free(&rep);
	}
	if (rc || !r->rs.snapshots)
		return rc;
	cli_req_begin(&q, "snapshots.list");
	sb_mapw_str(&q.m, "run", r->rs.run);
	if ((rc = cli_call(c, &q, &rep)) == SB_OK) {
		snaps = sb_map_get(&rep.map, "snapshots");
		if (snaps && snaps->type == MSGPACK_OBJECT_ARRAY && snaps->via.array.size)
			r->snap_ns = sb_map_u64(&snaps->via.array.ptr[snaps->via.array.size - 1],
						"ts_ns", 0);
	}
	sb_reply_free(&rep);
	return rc;
}

/* Reads the rows the operands name into w: none, every run; one, the
 * group of that name, else the run; more, those runs. Prints the error
 * and returns its exit code, else CLI_EXIT_OK. */
static int watch_load(sb_client *c, struct cli_watch *w, char **names, int n)
{
	uint64_t end = 0;
	int rc;

	if ((rc = log_end(c, &end)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	w->from = end + 1;
	if (n == 0)
		rc = load_all(c, w);
	else if (n > 1 || (rc = load_group(c, w, names[0])) == SB_ERR_NOTFOUND)
		rc = load_runs(c, w, names, n);
	if (rc == SB_ERR_NOTFOUND && n == 1)
		return cli_fail(rc, "no group or run '%s'", names[0]);
	/* run.get gave the runs named their tokens */
	for (size_t i = 0; i < w->rows.n && rc == SB_OK; i++)
		rc = load_extras(c, &w->rows.v[i], w->rows.scope != CLI_WSCOPE_RUNS);
	return rc ? cli_fail_request(rc) : CLI_EXIT_OK;
}

/* ---- the row's text ---- */

void cli_watch_plain_text(const struct cli_wrow *r, char *buf, size_t cap)
{
	char name[256], status[32], prog[256], progress[512], cost[32], budget[32];

	cli_cell(r->rs.name[0] ? r->rs.name : r->rs.run, 0, name, sizeof name);
	cli_status(&r->rs, status, sizeof status);
	cli_progress(&r->rs, prog, sizeof prog);
	cli_cell(prog, 0, progress, sizeof progress);
	sb_usd_format(r->rs.cost_nusd, cost, sizeof cost);
	sb_usd_format(r->rs.budget_nusd, budget, sizeof budget);
	snprintf(buf, cap, "%s %s %s %s/%s", name, status, progress, cost, budget);
}

/* ---- plain lines ---- */

/* Prints "HH:MM:SS text" with the local time of ts_ns (0: now). */
static void plain_line(uint64_t ts_ns, const char *text)
{
	time_t secs = ts_ns ? (time_t)(ts_ns / 1000000000u) : time(NULL);
	char when[16];
	struct tm tm;

	localtime_r(&secs, &tm);
	strftime(when, sizeof when, "%H:%M:%S", &tm);
	printf("%s %s\n", when, text);
	fflush(stdout);
}

/* Prints row r when its text is not the one printed last. */
static void plain_row(struct cli_wrow *r, uint64_t ts_ns)
{
	char text[sizeof r->shown];

	cli_watch_plain_text(r, text, sizeof text);
	if (strcmp(text, r->shown)) {
		memcpy(r->shown, text, sizeof text);
		plain_line(ts_ns, text);
	}
}

/* Prints the totals of every row: "total: N runs, D done, F failed,
 * COST/BUDGET" (the group's budget, else the runs' together). */
static void plain_totals(const struct cli_watch *w, uint64_t ts_ns)
{
	struct cli_wtotals t;
	char cost[32], budget[32], text[256];

	cli_wrows_totals(&w->rows, &t);
	sb_usd_format(t.cost_nusd, cost, sizeof cost);
	sb_usd_format(w->group_budget ? w->group_budget : t.budget_nusd, budget, sizeof budget);
	snprintf(text, sizeof text, "total: %zu run%s, %zu done, %zu failed, %s/%s", t.runs,
		 t.runs == 1 ? "" : "s", t.done, t.failed, cost, budget);
	plain_line(ts_ns, text);
}

static int plain_event(struct cli_watch *w, const struct sb_event *ev,
		       const msgpack_object *payload, struct cli_wrow *r)
{
	if (!ev) {
		if (w->lost[0])
			cli_note("watch: lost the daemon (%s); connecting again", w->lost);
		else
			cli_note("watch: connected again, from offset %llu",
				 (unsigned long long)w->from);
		return 0;
	}
	if (!r)
		return 0;
	plain_row(r, ev->ts_ns);
	if (!cli_wrows_ended(&w->rows))
		return 0;
	plain_totals(w, ev->ts_ns);
	return 1;
}

static volatile sig_atomic_t plain_interrupted;
static struct cli_watch *plain_watch; /* what Ctrl-C stops */

static void on_sigint(int sig)
{
	(void)sig;
	plain_interrupted = 1;
	plain_watch->stop = 1;
}

/* Prints every row, then a line per change until every watched run has
 * ended (then the totals) or Ctrl-C. Returns the exit code. */
static int watch_plain(struct cli_watch *w)
{
	struct sigaction sa;
	int rc;

	for (size_t i = 0; i < w->rows.n; i++)
		plain_row(&w->rows.v[i], 0);
	if (cli_wrows_ended(&w->rows)) {
		plain_totals(w, 0);
		return CLI_EXIT_OK;
	}
	plain_watch = w;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigint;
	sigaction(SIGINT, &sa, NULL);
	w->on_event = plain_event;
	rc = cli_watch_follow(w);
	if (rc < 0)
		return cli_fail(rc, "%s", sb_errmsg(rc));
	return plain_interrupted ? CLI_EXIT_DETACHED : CLI_EXIT_OK;
}

int cmd_watch(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_OPT_HELP,
		{"plain", no_argument, NULL, 'p'},
		{NULL, 0, NULL, 0},
	};
	static struct cli_watch w; /* large: the pane's lines */
	sb_client *c = NULL;
	int plain = 0, ch, rc;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("watch");
		case 'p': plain = 1; break;
		default: return cli_badopt("watch", argv, ch);
		}
	}
	pthread_mutex_init(&w.mu, NULL);
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if ((rc = watch_load(c, &w, argv + optind, argc - optind)))
		goto out;
	rc = plain || !isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO) ? CLI_GO_ON
									: cli_watch_view(&w, c);
	if (rc == CLI_GO_ON)
		rc = watch_plain(&w);
out:
	sb_client_close(c);
	if (!w.follow_left)
		cli_wrows_free(&w.rows);
	return rc;
}
