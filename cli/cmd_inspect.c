/* cmd_inspect.c - sanbox inspect: a run's resolved settings and state. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/log/summary.h"
#include "engine/payload.h"
#include "projections/views.h"

#define LABEL 11 /* the width of a row's label */

/* Prints one row: its label, then its text escaped and cut to what the
 * terminal's width leaves (so no value can end the row or forge another). */
static void row(const char *label, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void row(const char *label, const char *fmt, ...)
{
	char text[8192], cell[16384];
	int room = cli_term_width() - LABEL - 1;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	cli_cell(text, room < 20 ? 20 : room, cell, sizeof cell);
	for (size_t l = strlen(cell); l && cell[l - 1] == ' '; l--)
		cell[l - 1] = 0;
	printf("%-*s %s\n", LABEL, label, cell);
}

/* A time as "2026-12-05 12:43:37 (3m ago)", or "-" for none. */
static void when(uint64_t ns, char *buf, size_t cap)
{
	time_t secs = (time_t)(ns / 1000000000u);
	char date[32], ago[16];
	struct tm tm;

	if (!ns) {
		snprintf(buf, cap, "-");
		return;
	}
	localtime_r(&secs, &tm);
	strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S", &tm);
	cli_duration((double)time(NULL) - (double)secs, ago, sizeof ago);
	snprintf(buf, cap, "%s (%s ago)", date, ago);
}

/* Appends v to buf (len bytes of cap used): a string as it is (row
 * escapes it, once), a list as [a, b], anything else as
 * sb_summary_value writes it. */
static size_t value_put(const msgpack_object *v, char *buf, size_t len, size_t cap)
{
	int n = 0;

	if (len + 1 >= cap)
		return len;
	if (v->type == MSGPACK_OBJECT_STR) {
		n = snprintf(buf + len, cap - len, "%.*s", (int)v->via.str.size, v->via.str.ptr);
	} else if (v->type == MSGPACK_OBJECT_ARRAY) {
		len += (size_t)snprintf(buf + len, cap - len, "[");
		for (uint32_t i = 0; i < v->via.array.size && len + 1 < cap; i++) {
			if (i)
				len += (size_t)snprintf(buf + len, cap - len, ", ");
			len = value_put(&v->via.array.ptr[i], buf, len, cap);
		}
		n = len + 1 < cap ? snprintf(buf + len, cap - len, "]") : 0;
	} else {
		sb_summary_value(v, buf + len, cap - len);
		n = (int)strlen(buf + len);
	}
	len += n > 0 ? (size_t)n : 0;
	return len < cap ? len : cap - 1;
}

/* The value of key in map m on one line, not escaped, or "-". */
static const char *value(const msgpack_object *m, const char *key, char *buf, size_t cap)
{
	const msgpack_object *v = sb_map_get(m, key);

	if (!v)
		return "-";
	buf[0] = 0;
	value_put(v, buf, 0, cap);
	return buf;
}

/* The run's state, as a person reads it. */
static void print_state(const struct sb_runstate *rs, const msgpack_object *cost)
{
	char a[64], b[64], t[128];

	row("run", "%s  %s%s%s", rs->run, rs->name, rs->group[0] ? "  group " : "", rs->group);
	row("template", "%s  %.12s", rs->template, rs->template_hash);
	row("runner", "%s", rs->runner);
	if (rs->has_exit && !strcmp(rs->status, "exited"))
		row("status", "exited %lld", (long long)rs->exit_status);
	else
		row("status", "%s%s%s", rs->status, rs->reason[0] ? ": " : "", rs->reason);
	if (rs->removed)
		row("removed", "yes: its disk and snapshots are freed (sanbox rm)");
	when(rs->created_ns, t, sizeof t);
	row("created", "%s", t);
	when(rs->ended_ns, t, sizeof t);
	row("ended", "%s", t);
	cli_duration(cli_run_elapsed(rs), a, sizeof a);
	row("elapsed", "%s", a);
	sb_usd_format(rs->cost_nusd, a, sizeof a);
	sb_usd_format(rs->budget_nusd, b, sizeof b);
	row("cost", "%s of a %s budget; %llu tokens in, %llu out, %llu cached, %llu calls", a, b,
	    (unsigned long long)sb_map_u64(cost, "input_tokens", 0),
	    (unsigned long long)sb_map_u64(cost, "output_tokens", 0),
	    (unsigned long long)sb_map_u64(cost, "cached_tokens", 0),
	    (unsigned long long)sb_map_u64(cost, "calls", 0));
	if (rs->parent[0])
		row("forked", "from %s at %s (offset %llu)", rs->parent, rs->parent_snapshot,
		    (unsigned long long)rs->parent_offset);
	if (rs->resumed_offset)
		row("resumed", "at offset %llu", (unsigned long long)rs->resumed_offset);
	snprintf(a, sizeof a, "%llu turn%s, %llu tool call%s", (unsigned long long)rs->turns,
		 rs->turns == 1 ? "" : "s", (unsigned long long)rs->tool_calls,
		 rs->tool_calls == 1 ? "" : "s");
	cli_progress(rs, t, sizeof t);
	if (rs->progress_label[0])
		row("progress", "%s (%s)", t, a);
	else
		row("progress", "%s", a);
	row("record", "%llu events, last %s at offset %llu; %llu snapshots, %llu forks",
	    (unsigned long long)rs->events, rs->last_type, (unsigned long long)rs->last_offset,
	    (unsigned long long)rs->snapshots, (unsigned long long)rs->forks);
	row("network", "%s; %llu names resolved, %llu denials, %llu grant changes", rs->network,
	    (unsigned long long)rs->net_lookups, (unsigned long long)rs->net_denied,
	    (unsigned long long)rs->net_changes);
}

/* The resolved plan (run.policy.resolved), as a person reads it. */
static void print_plan(const msgpack_object *p)
{
	char a[4096], b[4096], c[64];
	uint64_t mem = sb_map_u64(p, "memory_mib", 0), quota = sb_map_u64(p, "record_quota", 0);

	cli_duration((double)sb_map_u64(p, "timeout_s", 0), c, sizeof c);
	row("limits", "%llu CPU, %llu MiB, timeout %s, record quota %llu MiB, accel %s",
	    (unsigned long long)sb_map_u64(p, "cpus", 0), (unsigned long long)mem, c,
	    (unsigned long long)(quota >> 20), value(p, "accel", a, sizeof a));
	row("model", "%s (may use %s), on budget: %s", value(p, "model", a, sizeof a),
	    value(p, "models", b, sizeof b), value(p, "on_budget", c, sizeof c));
	row("harness", "%s", value(p, "harness", a, sizeof a));
	if (sb_map_get(p, "argv") && sb_map_get(p, "argv")->type == MSGPACK_OBJECT_ARRAY &&
	    sb_map_get(p, "argv")->via.array.size)
		row("command", "%s", value(p, "argv", a, sizeof a));
	else
		row("prompt", "%s", value(p, "prompt", a, sizeof a));
	row("grants", "%s (as resolved at the start; 'sanbox events RUN --type net' has "
		      "changes)",
	    value(p, "allow", a, sizeof a));
	row("secrets", "%s", value(p, "secrets", a, sizeof a));
	row("inputs", "%s, %llu bytes", value(p, "inputs", a, sizeof a),
	    (unsigned long long)sb_map_u64(p, "input_bytes", 0));
	row("snapshots", "%s", value(p, "snapshots", a, sizeof a));
}

int cmd_inspect(int argc, char **argv)
{
	struct cli_req r;
	struct sb_reply rep;
	struct sb_runstate rs;
	sb_client *c;
	int json = 0, rc;

	if ((rc = cli_parse_opts(argc, argv, "inspect", &json)) != CLI_GO_ON)
		return rc;
	if (argc - optind != 1)
		return cli_usage("inspect");
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	cli_req_begin(&r, "run.get");
	sb_mapw_str(&r.m, "run", argv[optind]);
	if ((rc = cli_call(c, &r, &rep)) == SB_OK &&
	    sb_runstate_unpack(sb_map_get(&rep.map, "run"), &rs))
		rc = sb_seterr(SB_ERR_PROTO, "malformed reply");
	if (rc) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
	} else if (json) {
		cli_print_reply(&rep.map);
	} else {
		print_state(&rs, sb_map_get(&rep.map, "cost"));
		print_plan(sb_map_get(&rep.map, "policy"));
	}
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}
