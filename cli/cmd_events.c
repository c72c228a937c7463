/* cmd_events.c - sanbox events: print events without following. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/log/schema.h"
#include "engine/payload.h"

struct print_ctx {
	int json;
};

static int print_cb(void *ctx, const struct sb_event *ev, const msgpack_object *payload)
{
	cli_print_event(ev, payload, ((struct print_ctx *)ctx)->json);
	return 0;
}

/* Checks that t is an event type or a prefix of some at a dot ("agent.tool"
 * of agent.tool.started); else prints one line with the nearest type and
 * returns CLI_EXIT_USAGE. */
static int type_check(const char *t)
{
	size_t n, len = strlen(t);
	const struct sb_event_schema *all = sb_schema_all(&n);
	struct cli_suggest s;
	char hint[96];

	cli_suggest_init(&s, t);
	for (size_t i = 0; i < n; i++) {
		const char *ty = all[i].type;
		if (!strncmp(ty, t, len) && (ty[len] == 0 || ty[len] == '.'))
			return CLI_EXIT_OK;
		/* the type and each of its prefixes at a dot are candidates */
		for (const char *d = ty; (d = strchr(d, '.')); d++)
			cli_suggest_add(&s, ty, (size_t)(d - ty));
		cli_suggest_add(&s, ty, strlen(ty));
	}
	return cli_fail_code(CLI_EXIT_USAGE, "--type: no event type '%s'%s (see SPEC.md, Events)",
			     t, cli_suggest_hint(&s, hint, sizeof hint));
}

int cmd_events(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_OPT_HELP,
		{"from", required_argument, NULL, 'f'}, {"type", required_argument, NULL, 't'},
		{"json", no_argument, NULL, 'j'},       {"all", no_argument, NULL, 'a'},
		{"follow", no_argument, NULL, 'F'},
		{NULL, 0, NULL, 0},
	};
	struct sb_follow_opts fo = {0};
	struct print_ctx pc = {0};
	const char *types[33] = {0};
	char run[SB_RUN_MAX] = "";
	sb_client *c;
	int ntypes = 0, all = 0, follow = 0, ch, rc;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("events");
		case 'f':
			if ((rc = cli_parse_u64("--from", optarg, 0, UINT64_MAX, &fo.from)))
				return rc;
			break;
		case 't':
			if (ntypes == 32)
				return cli_fail_code(CLI_EXIT_USAGE, "at most 32 --type options");
			if ((rc = type_check(optarg)))
				return rc;
			types[ntypes++] = optarg;
			break;
		case 'j': pc.json = 1; break;
		case 'a': all = 1; break;
		case 'F': follow = 1; break;
		default: return cli_badopt("events", argv, ch);
		}
	}
	if (all == (optind < argc) || argc - optind > 1)
		return cli_usage("events");
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if (!all && (rc = cli_resolve(c, argv[optind], run))) {
		sb_client_close(c);
		return cli_fail(rc, "%s", sb_errmsg(rc));
	}
	if (follow) {
		uint64_t from = fo.from;
		cli_follow_live(&fo, run);
		fo.from = from;
	} else {
		cli_follow_init(&fo);
		fo.run = run;
	}
	fo.types = ntypes ? types : NULL;
	rc = sb_follow(c, &fo, print_cb, &pc);
	sb_client_close(c);
	return rc ? cli_fail(rc, "%s", sb_errmsg(rc)) : 0;
}
