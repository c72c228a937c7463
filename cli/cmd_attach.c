/* cmd_attach.c - sanbox attach: print a run's events, then follow live. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"

static int print_cb(void *ctx, const struct sb_event *ev, const msgpack_object *payload)
{
	cli_print_event(ev, payload, *(int *)ctx ? CLI_EV_JSON : 0);
	return 0;
}

/* A run that has ended: its events from fo->from, then, when status is
 * set, the exit its end means (from its state, so also when from is past
 * its last event), else 0. */
static int attach_ended(sb_client *c, struct sb_follow_opts *fo, const char *run,
			const struct sb_reply *rep, int json, int status)
{
	int rc;

	cli_follow_init(fo);
	fo->run = run;
	if ((rc = sb_follow(c, fo, print_cb, &json)) < 0)
		return cli_fail(rc, "%s", sb_errmsg(rc));
	return status ? cli_run_exit_of(run, sb_map_get(&rep->map, "run")) : CLI_EXIT_OK;
}

int cmd_attach(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_OPT_HELP,
		{"from", required_argument, NULL, 'f'},
		{"json", no_argument, NULL, 'j'},
		{"exit-status", no_argument, NULL, 'x'},
		{NULL, 0, NULL, 0},
	};
	struct sb_follow_opts fo = {0};
	struct sb_reply rep = {0};
	char run[SB_RUN_MAX];
	sb_client *c;
	int json = 0, status = 0, live = 0, ch, rc;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("attach");
		case 'f':
			if ((rc = cli_parse_u64("--from", optarg, 0, UINT64_MAX, &fo.from)))
				return rc;
			break;
		case 'j': json = 1; break;
		case 'x': status = 1; break;
		default: return cli_badopt("attach", argv, ch);
		}
	}
	if (argc - optind != 1)
		return cli_usage("attach");
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if ((rc = cli_resolve(c, argv[optind], run)) || (rc = cli_run_get(c, run, &rep, &live)))
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
	else if (live)
		rc = cli_run_follow(c, run, fo.from,
				    sb_map_u64(sb_map_get(&rep.map, "run"), "resumed_offset", 0),
				    json, status);
	else
		rc = attach_ended(c, &fo, run, &rep, json, status);
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}
