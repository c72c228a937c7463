/* cmd_attach.c - sanbox attach: print a run's events, then follow live. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"

struct attach_ctx {
	int json;
	uint64_t resumed; /* the run's last run.resumed: stops before it do not end it */
};

static int attach_cb(void *vctx, const struct sb_event *ev, const msgpack_object *payload)
{
	struct attach_ctx *c = vctx;

	cli_print_event(ev, payload, c->json);
	/* the run is over, unless it was resumed after this */
	return !strcmp(ev->type, "run.stopped") && ev->offset > c->resumed ? 1 : 0;
}

/* The offset of run's last run.resumed (0: none, or unknown). */
static uint64_t resumed_at(sb_client *c, const char *run)
{
	struct cli_req r;
	struct sb_reply rep = {0};
	uint64_t off = 0;

	cli_req_begin(&r, "run.get", 1);
	sb_pack_kstr(&r.pk, "run", run);
	if (cli_call(c, &r, &rep) == SB_OK)
		off = sb_map_u64(sb_map_get(&rep.map, "run"), "resumed_offset", 0);
	sb_reply_free(&rep);
	return off;
}

int cmd_attach(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_OPT_HELP,
		{"from", required_argument, NULL, 'f'},
		{"json", no_argument, NULL, 'j'},
		{NULL, 0, NULL, 0},
	};
	struct sb_follow_opts fo = {0};
	struct attach_ctx ac = {0};
	char run[SB_RUN_MAX];
	sb_client *c;
	int ch, rc;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("attach");
		case 'f':
			if ((rc = cli_parse_u64("--from", optarg, 0, UINT64_MAX, &fo.from)))
				return rc;
			break;
		case 'j': ac.json = 1; break;
		default: return cli_badopt("attach", argv, ch);
		}
	}
	if (argc - optind != 1)
		return cli_usage("attach");
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if ((rc = cli_resolve(c, argv[optind], run))) {
		sb_client_close(c);
		return cli_fail(rc, "%s", sb_errmsg(rc));
	}
	ac.resumed = resumed_at(c, run);
	cli_follow_live(&fo, run);
	rc = sb_follow(c, &fo, attach_cb, &ac);
	sb_client_close(c);
	if (cli_detached && !ac.json)
		cli_note("detached from run %s; it keeps running", run);
	return rc < 0 ? cli_fail(rc, "%s", sb_errmsg(rc)) : 0;
}
