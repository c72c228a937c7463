/* cmd_wait.c - sanbox wait: wait until runs, or a group's runs, have ended.
 *
 * Each run's state is read once (run.get, or group.get for a group) after
 * the log's last offset L (health); from there its state is folded forward
 * (sb_runstate_fold) with the ends of runs the whole log's live feed
 * carries from L + 1 (sb_follow: no gap, also past a reconnect). An event
 * at or below a run's last_offset is in its state already and is skipped,
 * so each end counts once.
 */
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"
#include "projections/views.h"

enum { WAIT_ON, WAIT_INTERRUPTED, WAIT_TIMEOUT };

/* Why the follow stops early: Ctrl-C or --timeout (set by their signals). */
static volatile sig_atomic_t stop_why;

struct waiter {
	struct sb_runstate *runs; /* in argument (or creation) order */
	size_t n, cap;
	size_t live; /* runs not ended */
	int json;
};

static void on_signal(int sig)
{
	stop_why = sig == SIGALRM ? WAIT_TIMEOUT : WAIT_INTERRUPTED;
}

/* Prints "RUN NAME STATUS" for rs (text mode), escaped. */
static void print_line(const struct waiter *w, const struct sb_runstate *rs)
{
	char id[256], name[512], status[128], st[64];

	if (w->json)
		return;
	cli_status(rs, st, sizeof st);
	cli_cell(rs->run, 0, id, sizeof id);
	cli_cell(rs->name[0] ? rs->name : "-", 0, name, sizeof name);
	cli_cell(st, 0, status, sizeof status);
	printf("%s %s %s\n", id, name, status);
	fflush(stdout);
}

/* Adds the run whose state map is map (once, however often it is named).
 * Errors: SB_ERR_PROTO, SB_ERR_NOMEM. */
static int wait_add(struct waiter *w, const msgpack_object *map)
{
	struct sb_runstate rs;

	if (!map || sb_runstate_unpack(map, &rs) || !rs.run[0])
		return sb_seterr(SB_ERR_PROTO, "malformed reply");
	for (size_t i = 0; i < w->n; i++)
		if (!strcmp(w->runs[i].run, rs.run))
			return SB_OK;
	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 8;
		void *p = realloc(w->runs, cap * sizeof *w->runs);
		if (!p)
			return SB_ERR_NOMEM;
		w->runs = p;
		w->cap = cap;
	}
	w->runs[w->n++] = rs;
	w->live += sb_runstate_is_live(&rs);
	return SB_OK;
}

/* Adds run want (an id, a prefix or a name). Errors: those of the calls
 * (SB_ERR_NOTFOUND for no such run). */
static int add_run(sb_client *c, struct waiter *w, const char *want)
{
	struct sb_reply rep = {0};
	char run[SB_RUN_MAX];
	int live, rc;

	if ((rc = cli_resolve(c, want, run)) == SB_OK &&
	    (rc = cli_run_get(c, run, &rep, &live)) == SB_OK)
		rc = wait_add(w, sb_map_get(&rep.map, "run"));
	sb_reply_free(&rep);
	return rc;
}

/* Adds the runs of group, in the order they were created. Errors: those
 * of group.get (SB_ERR_NOTFOUND for no such group), SB_ERR_PROTO. */
static int add_group(sb_client *c, struct waiter *w, const char *group)
{
	struct sb_reply rep = {0};
	const msgpack_object *runs;
	struct cli_req r;
	int rc;

	cli_req_begin(&r, "group.get");
	sb_mapw_str(&r.m, "group", group);
	if ((rc = cli_call(c, &r, &rep)) == SB_OK) {
		runs = sb_map_get(&rep.map, "runs");
		if (!runs || runs->type != MSGPACK_OBJECT_ARRAY)
			rc = sb_seterr(SB_ERR_PROTO, "malformed reply");
		for (uint32_t i = 0; rc == SB_OK && i < runs->via.array.size; i++)
			rc = wait_add(w, &runs->via.array.ptr[i]);
	}
	sb_reply_free(&rep);
	return rc;
}

/* The log's last offset (health). Errors: those of the call, SB_ERR_IO
 * when the daemon cannot read its log. */
static int last_offset(sb_client *c, uint64_t *last)
{
	struct sb_reply rep = {0};
	struct cli_req r;
	const msgpack_object *v;
	int rc;

	cli_req_begin(&r, "health");
	if ((rc = cli_call(c, &r, &rep)) == SB_OK) {
		v = sb_map_get(&rep.map, "last_offset");
		if (v && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
			*last = v->via.u64;
		else
			rc = sb_seterr(SB_ERR_IO, "the daemon cannot read its log");
	}
	sb_reply_free(&rep);
	return rc;
}

struct sb_runstate *cli_wait_fold(struct sb_runstate *runs, size_t n, size_t *live,
				  const struct sb_event *ev, const msgpack_object *p)
{
	struct sb_runstate *rs = NULL;
	int was;

	for (size_t i = 0; i < n && !rs; i++)
		if (!strcmp(runs[i].run, ev->run))
			rs = &runs[i];
	if (!rs || ev->offset <= rs->last_offset)
		return NULL; /* another run's, or in its state already */
	was = sb_runstate_is_live(rs);
	sb_runstate_fold(rs, ev, p);
	if (was && !sb_runstate_is_live(rs)) {
		--*live;
		return rs;
	}
	if (!was && sb_runstate_is_live(rs))
		++*live; /* resumed: it has to end again */
	return NULL;
}

/* An end, a failure or a resume of a run waited for: folded into its
 * state; returns 1 once no run is live. */
static int on_event(void *ctx, const struct sb_event *ev, const msgpack_object *p)
{
	struct waiter *w = ctx;
	struct sb_runstate *rs = cli_wait_fold(w->runs, w->n, &w->live, ev, p);

	if (rs)
		print_line(w, rs);
	return w->live == 0;
}

/* Follows the whole log from offset from until every run has ended, Ctrl-C
 * or the alarm. Errors: those of sb_follow. */
static int follow(sb_client *c, struct waiter *w, uint64_t from, uint64_t timeout)
{
	static const char *const types[] = {"run.stopped", "run.exited", "run.failed",
					    "run.resumed", NULL};
	struct sb_follow_opts fo = {0};
	struct sigaction sa;
	int rc;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGALRM, &sa, NULL);
	if (timeout)
		alarm(timeout < UINT_MAX ? (unsigned)timeout : UINT_MAX);
	cli_follow_init(&fo);
	fo.run = "";
	fo.from = from;
	fo.follow = 1;
	fo.types = types;
	fo.stop = &stop_why;
	rc = w->live ? sb_follow(c, &fo, on_event, w) : SB_OK;
	alarm(0);
	return rc < 0 ? rc : SB_OK;
}

/* Prints each run as a JSON object (--json), in order. */
static void print_json(const struct waiter *w)
{
	for (size_t i = 0; i < w->n; i++) {
		const struct sb_runstate *rs = &w->runs[i];
		int live = sb_runstate_is_live(rs);
		json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:o, s:o}", "run", rs->run, "name",
				      rs->name, "status", rs->status, "reason", rs->reason,
				      "exit_status",
				      rs->has_exit ? json_integer(rs->exit_status) : json_null(),
				      "exit", live ? json_null()
						   : json_integer(cli_run_exit_state(rs, 0)));
		cli_print_json(j);
	}
}

/* The exit code once following stopped: every run ended (the first that
 * did not exit 0 decides), the timeout, or Ctrl-C. */
static int wait_result(const struct waiter *w, const char *timeout)
{
	char list[4096] = "";
	size_t len = 0;

	if (w->json)
		print_json(w);
	if (w->live && stop_why == WAIT_INTERRUPTED) {
		cli_note("wait interrupted; the runs go on");
		return CLI_EXIT_DETACHED;
	}
	if (w->live) { /* the timeout */
		for (size_t i = 0; i < w->n && len < sizeof list; i++)
			if (sb_runstate_is_live(&w->runs[i]))
				len += (size_t)snprintf(list + len, sizeof list - len, "%s%s%s%s%s",
							len ? ", " : "", w->runs[i].run,
							w->runs[i].name[0] ? " (" : "", w->runs[i].name,
							w->runs[i].name[0] ? ")" : "");
		return cli_fail_code(CLI_EXIT_WAIT_TIMEOUT, "wait: %s passed; still live: %s",
				     timeout, list);
	}
	for (size_t i = 0; i < w->n; i++)
		if (cli_run_exit_state(&w->runs[i], 0) != CLI_EXIT_OK)
			return cli_run_exit_state(&w->runs[i], 1);
	return CLI_EXIT_OK;
}

/* Parses argv; returns CLI_GO_ON (optind at the runs), or an exit code. */
static int wait_parse(int argc, char **argv, struct waiter *w, const char **group,
		      const char **timeout_s, uint64_t *timeout)
{
	static const struct option opts[] = {
		CLI_OPT_HELP,
		{"group", required_argument, NULL, 'g'},
		{"timeout", required_argument, NULL, 't'},
		{"json", no_argument, NULL, 'j'},
		{NULL, 0, NULL, 0},
	};
	int ch, rc;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("wait");
		case 'g':
			if ((rc = cli_check_name("--group", optarg)))
				return rc;
			*group = optarg;
			break;
		case 't':
			if ((rc = cli_parse_duration(optarg, timeout)))
				return cli_fail_code(CLI_EXIT_USAGE, "--timeout: %s", sb_errmsg(rc));
			*timeout_s = optarg;
			break;
		case 'j': w->json = 1; break;
		default: return cli_badopt("wait", argv, ch);
		}
	}
	if (*group ? optind != argc : optind == argc)
		return cli_usage("wait");
	return CLI_GO_ON;
}

int cmd_wait(int argc, char **argv)
{
	struct waiter w = {0};
	const char *group = NULL, *timeout_s = NULL;
	uint64_t timeout = 0, last = 0;
	sb_client *c;
	int rc;

	if ((rc = wait_parse(argc, argv, &w, &group, &timeout_s, &timeout)) != CLI_GO_ON)
		return rc;
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	/* the log's end first, the states second: what ends after a state was
	 * read is recorded past last, and the feed carries it */
	rc = last_offset(c, &last);
	if (rc == SB_OK && group)
		rc = add_group(c, &w, group);
	for (int i = optind; rc == SB_OK && i < argc; i++)
		rc = add_run(c, &w, argv[i]);
	for (size_t i = 0; rc == SB_OK && i < w.n; i++)
		if (!sb_runstate_is_live(&w.runs[i]))
			print_line(&w, &w.runs[i]); /* ended already */
	if (rc == SB_OK)
		rc = follow(c, &w, last + 1, timeout);
	rc = rc ? cli_fail(rc, "%s", sb_errmsg(rc)) : wait_result(&w, timeout_s);
	sb_client_close(c);
	free(w.runs);
	return rc;
}
