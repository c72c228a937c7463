/* cmd_snapshots.c - sanbox snapshots: list a run's snapshots. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"

/* Prints one snapshot of the list as a table row. */
static void print_row(const msgpack_object *s)
{
	char id[24], kind[16], trig[16], when[32], users[256] = "", cell[64];
	const msgpack_object *u = sb_map_get(s, "used_by");
	time_t t = (time_t)(sb_map_u64(s, "ts_ns", 0) / 1000000000u);
	struct tm tm;
	size_t n = 0;

	if (sb_map_str(s, "snapshot", id, sizeof id) <= 0)
		return;
	sb_map_str(s, "kind", kind, sizeof kind);
	sb_map_str(s, "trigger", trig, sizeof trig);
	strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tm));
	for (uint32_t i = 0;
	     u && u->type == MSGPACK_OBJECT_ARRAY && i < u->via.array.size; i++) {
		const msgpack_object *e = &u->via.array.ptr[i];
		if (e->type != MSGPACK_OBJECT_STR)
			continue;
		snprintf(cell, sizeof cell, "%.*s",
			 (int)(e->via.str.size < 40 ? e->via.str.size : 40),
			 e->via.str.ptr);
		n += (size_t)snprintf(users + n, n < sizeof users ? sizeof users - n : 0,
				      "%s%s", n ? "," : "", cell);
		if (n >= sizeof users)
			break;
	}
	printf("%-6s %-6s %-7s %10llu %s %8.1f MiB %s\n", id, kind, trig,
	       (unsigned long long)sb_map_u64(s, "offset", 0), when,
	       (double)sb_map_u64(s, "bytes", 0) / (1 << 20), users[0] ? users : "-");
}

int cmd_snapshots(int argc, char **argv)
{
	struct cli_req r;
	struct sb_reply rep = {0};
	const msgpack_object *list;
	sb_client *c;
	int json = 0, rc;

	if ((rc = cli_parse_opts(argc, argv, "snapshots", &json)) != CLI_GO_ON)
		return rc;
	if (argc - optind != 1)
		return cli_usage("snapshots");
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	cli_req_begin(&r, "snapshots.list");
	sb_mapw_str(&r.m, "run", argv[optind]);
	rc = cli_call(c, &r, &rep);
	list = sb_map_get(&rep.map, "snapshots");
	if (rc == SB_OK && (!list || list->type != MSGPACK_OBJECT_ARRAY))
		rc = sb_seterr(SB_ERR_PROTO, "malformed reply");
	if (rc) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
	} else if (json) {
		cli_print_reply(&rep.map);
	} else {
		printf("%-6s %-6s %-7s %10s %-19s %12s %s\n", "ID", "KIND", "TRIGGER",
		       "OFFSET", "TIME", "SIZE", "USED BY");
		for (uint32_t i = 0; i < list->via.array.size; i++)
			print_row(&list->via.array.ptr[i]);
	}
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}
