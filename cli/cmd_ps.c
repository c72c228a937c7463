/* cmd_ps.c - sanbox ps: list runs. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/log/summary.h"
#include "engine/payload.h"
#include "projections/views.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Seconds a run has been (or was) going. */
static double elapsed(const struct sb_runstate *rs)
{
	uint64_t start = rs->started_ns ? rs->started_ns : rs->created_ns;
	double end = rs->ended_ns ? rs->ended_ns / 1e9 : now_s();

	return start ? end - start / 1e9 : 0;
}

/* Prints one run as a table row: every cell escaped and cut to its
 * column, so no name or group can end the row or forge another. */
static void print_row(const msgpack_object *m)
{
	struct sb_runstate rs;
	char el[16], cost[24], status[40];
	char run[64], name[96], group[64], tmpl[64], model[96], st[64], last[128];

	if (sb_runstate_unpack(m, &rs))
		return;
	cli_duration(elapsed(&rs), el, sizeof el);
	sb_usd_format(rs.cost_nusd, cost, sizeof cost);
	if (rs.has_exit && !strcmp(rs.status, "exited"))
		snprintf(status, sizeof status, "exited %lld", (long long)rs.exit_status);
	else
		snprintf(status, sizeof status, "%s", rs.status);
	cli_cell(rs.run, 12, run, sizeof run);
	cli_cell(rs.name, 16, name, sizeof name);
	cli_cell(rs.group[0] ? rs.group : "-", 10, group, sizeof group);
	cli_cell(rs.tmpl, 10, tmpl, sizeof tmpl);
	cli_cell(rs.model[0] ? rs.model : "-", 16, model, sizeof model);
	cli_cell(status, 0, st, sizeof st); /* never cut: "exited 127" */
	cli_cell(rs.last_type, 0, last, sizeof last);
	printf("%s %s %s %s %s %-9s %7s %9s  %s\n", run, name, group, tmpl, model, st, el, cost, last);
}

int cmd_ps(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_OPT_HELP,
		{"group", required_argument, NULL, 'g'},
		{"json", no_argument, NULL, 'j'},
		{NULL, 0, NULL, 0},
	};
	const char *group = NULL;
	struct cli_req r;
	struct sb_reply rep;
	const msgpack_object *runs;
	sb_client *c;
	int json = 0, ch, rc;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("ps");
		case 'g':
			if ((rc = cli_check_name("--group", optarg)))
				return rc;
			group = optarg;
			break;
		case 'j': json = 1; break;
		default: return cli_badopt("ps", argv, ch);
		}
	}
	if (optind != argc)
		return cli_usage("ps");
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	cli_req_begin(&r, "runs.list", group ? 1 : 0);
	if (group)
		sb_pack_kstr(&r.pk, "group", group);
	rc = cli_call(c, &r, &rep);
	runs = sb_map_get(&rep.map, "runs");
	if (rc == SB_OK && (!runs || runs->type != MSGPACK_OBJECT_ARRAY))
		rc = sb_seterr(SB_ERR_PROTO, "malformed reply");
	if (rc) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
		goto out;
	}
	if (json) {
		cli_print_json(sb_msgpack_to_json(runs));
		goto out;
	}
	printf("%-12s %-16s %-10s %-10s %-16s %-9s %7s %9s  %s\n", "RUN", "NAME", "GROUP", "TEMPLATE",
	       "MODEL", "STATUS", "ELAPSED", "COST", "LAST EVENT");
	for (uint32_t i = 0; i < runs->via.array.size; i++)
		print_row(&runs->via.array.ptr[i]);
out:
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}
