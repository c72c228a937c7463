/* cmd_net.c - sanbox net: change a live run's network grants. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"

/* Adds (allow 1) or removes one grant of run; prints it in canonical form. */
static int grant_call(sb_client *c, const char *run, const char *grant, int allow,
		      int json)
{
	struct cli_req r;
	struct sb_reply rep = {0};
	char got[300];
	int rc;

	cli_req_begin(&r, "net.grant");
	sb_mapw_str(&r.m, "run", run);
	sb_mapw_str(&r.m, "grant", grant);
	sb_mapw_bool(&r.m, "allow", allow);
	rc = cli_call(c, &r, &rep);
	if (rc == SB_OK && sb_map_str(&rep.map, "grant", got, sizeof got) <= 0)
		rc = sb_seterr(SB_ERR_PROTO, "malformed reply");
	if (rc)
		rc = cli_fail_code(cli_exit_for_request(rc), "run %s: %s", run, sb_errmsg(rc));
	else if (json)
		cli_print_reply(&rep.map);
	else
		printf("%s %s\n", allow ? "allowed" : "denied", got);
	sb_reply_free(&rep);
	return rc;
}

int cmd_net(int argc, char **argv)
{
	static const struct option opts[] = {
	    CLI_OPT_HELP,
	    {"json", no_argument, NULL, 'j'},
	    {NULL, 0, NULL, 0},
	};
	int json = 0, allow, ch, rc = SB_OK;
	sb_client *c;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("net");
		case 'j': json = 1; break;
		default: return cli_badopt("net", argv, ch);
		}
	}
	if (argc - optind < 3 ||
	    (strcmp(argv[optind], "allow") && strcmp(argv[optind], "deny")))
		return cli_usage("net");
	allow = !strcmp(argv[optind], "allow");
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	/* one change at a time, in order: the first refused one stops here */
	for (int i = optind + 2; i < argc && rc == SB_OK; i++)
		rc = grant_call(c, argv[optind + 1], argv[i], allow, json);
	sb_client_close(c);
	return rc;
}
