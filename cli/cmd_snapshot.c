/* cmd_snapshot.c - sanbox snapshot: take a snapshot of a live run, or
 * remove one of a run that ended. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"

/* Calls op with {run, key: val} (key NULL: none) plus memory when asked,
 * and prints the reply's snapshot. */
static int snapshot_call(const char *op, const char *run, const char *id, int memory,
			 int json)
{
	struct cli_req r;
	struct sb_reply rep = {0};
	char snap[72], got[SB_RUN_MAX];
	sb_client *c;
	int rc;

	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	cli_req_begin(&r, op);
	sb_mapw_str(&r.m, "run", run);
	if (id)
		sb_mapw_str(&r.m, "snapshot", id);
	else
		sb_mapw_bool(&r.m, "memory", memory);
	rc = cli_call(c, &r, &rep);
	if (rc == SB_OK && sb_map_str(&rep.map, "snapshot", snap, sizeof snap) <= 0)
		rc = sb_seterr(SB_ERR_PROTO, "malformed reply");
	if (rc) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
	} else if (json) {
		cli_print_reply(&rep.map);
	} else if (id) {
		if (sb_map_str(&rep.map, "run", got, sizeof got) <= 0)
			snprintf(got, sizeof got, "%s", run);
		printf("%s %s removed\n", got, snap);
	} else {
		printf("%s\n", snap);
	}
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

int cmd_snapshot(int argc, char **argv)
{
	static const struct option opts[] = {
	    CLI_OPT_HELP,
	    {"memory", no_argument, NULL, 'm'},
	    {"json", no_argument, NULL, 'j'},
	    {NULL, 0, NULL, 0},
	};
	int json = 0, memory = 0, ch;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("snapshot");
		case 'm': memory = 1; break;
		case 'j': json = 1; break;
		default: return cli_badopt("snapshot", argv, ch);
		}
	}
	if (argc - optind == 3 && !strcmp(argv[optind], "rm") && !memory)
		return snapshot_call("snapshot.rm", argv[optind + 1], argv[optind + 2], 0,
				     json);
	if (argc - optind != 1 || !strcmp(argv[optind], "rm"))
		return cli_usage("snapshot");
	return snapshot_call("run.snapshot", argv[optind], NULL, memory, json);
}
