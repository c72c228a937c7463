/* cmd_ps.c - sanbox ps: list runs. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "engine/error.h"
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

int cmd_ps(int argc, char **argv)
{
	static const struct option opts[] = {
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

	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 'g': group = optarg; break;
		case 'j': json = 1; break;
		default: return cli_usage("ps");
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
	for (uint32_t i = 0; i < runs->via.array.size; i++) {
		struct sb_runstate rs;
		char el[16], cost[24], status[24];
		if (sb_runstate_unpack(&runs->via.array.ptr[i], &rs))
			continue;
		cli_duration(elapsed(&rs), el, sizeof el);
		cli_usd(rs.cost_nusd, cost, sizeof cost);
		if (rs.has_exit && !strcmp(rs.status, "exited"))
			snprintf(status, sizeof status, "exited %lld", (long long)rs.exit_status);
		else
			snprintf(status, sizeof status, "%s", rs.status);
		printf("%-12.12s %-16.16s %-10.10s %-10.10s %-16.16s %-9s %7s %9s  %s\n", rs.run,
		       rs.name, rs.group[0] ? rs.group : "-", rs.tmpl, rs.model[0] ? rs.model : "-",
		       status, el, cost, rs.last_type);
	}
out:
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}
