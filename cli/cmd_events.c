/* cmd_events.c - sanbox events: print events without following. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/log/schema.h"
#include "engine/payload.h"

struct print_ctx {
	int flags;	   /* cli_print_event's */
	uint64_t since_ns; /* --since: events recorded from then on */
	uint64_t until_ns; /* --until: and up to then (0: no end) */
	uint64_t to;	   /* --to: offsets up to this one (0: no end) */
	unsigned sources;  /* --source: a bit per source kept (0: every one) */
	uint64_t *ring;	   /* --tail N: the offsets of the last N events seen */
	uint64_t ntail, seen;
};

/* 1 when ev passes the filters the server does not apply. */
static int event_kept(const struct print_ctx *pc, const struct sb_event *ev)
{
	return ev->ts_ns >= pc->since_ns && (!pc->until_ns || ev->ts_ns <= pc->until_ns) &&
	       (!pc->sources || (pc->sources & 1u << ev->source));
}

/* Prints ev when kept; ends the read (returns 1) past --to. */
static int print_cb(void *ctx, const struct sb_event *ev, const msgpack_object *payload)
{
	struct print_ctx *pc = ctx;

	if (pc->to && ev->offset > pc->to)
		return 1;
	if (event_kept(pc, ev))
		cli_print_event(ev, payload, pc->flags);
	return 0;
}

/* Keeps the offset of each event the filters keep in the ring. */
static int tail_cb(void *ctx, const struct sb_event *ev, const msgpack_object *payload)
{
	struct print_ctx *pc = ctx;

	if (pc->to && ev->offset > pc->to)
		return 1;
	if (event_kept(pc, ev))
		pc->ring[pc->seen++ % pc->ntail] = ev->offset;
	return 0;
}

/* --tail: the offset to print from, read once through the events
 * (keeping only the last N offsets). Errors: those of sb_follow. */
static int tail_from(sb_client *c, struct sb_follow_opts *fo, struct print_ctx *pc,
		     uint64_t *from)
{
	int rc;

	if (!pc->ntail) { /* nothing of the past */
		*from = UINT64_MAX;
		return SB_OK;
	}
	if (!(pc->ring = calloc(pc->ntail, sizeof *pc->ring)))
		return SB_ERR_NOMEM;
	if ((rc = sb_follow(c, fo, tail_cb, pc)) >= 0)
		*from = pc->seen <= pc->ntail ? fo->from : pc->ring[pc->seen % pc->ntail];
	free(pc->ring);
	return rc < 0 ? rc : SB_OK;
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

/* Parses argv's options into fo, pc and the type list. Returns CLI_GO_ON
 * (optind at the operands), or the exit code (printed). */
static int events_parse(int argc, char **argv, struct sb_follow_opts *fo, struct print_ctx *pc,
			const char **types, int *all, int *follow, int *tail)
{
	static const struct option opts[] = {
		CLI_OPT_HELP,
		{"from", required_argument, NULL, 'f'}, {"type", required_argument, NULL, 't'},
		{"json", no_argument, NULL, 'j'},       {"all", no_argument, NULL, 'a'},
		{"follow", no_argument, NULL, 'F'},     {"since", required_argument, NULL, 's'},
		{"tail", required_argument, NULL, 'T'}, {"until", required_argument, NULL, 'u'},
		{"to", required_argument, NULL, 'o'},   {"source", required_argument, NULL, 'S'},
		{NULL, 0, NULL, 0},
	};
	enum sb_source src;
	int ntypes = 0, ch, rc;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("events");
		case 'f':
			if ((rc = cli_parse_u64("--from", optarg, 0, UINT64_MAX, &fo->from)))
				return rc;
			break;
		case 't':
			if (ntypes == 32)
				return cli_fail_code(CLI_EXIT_USAGE, "at most 32 --type options");
			if ((rc = type_check(optarg)))
				return rc;
			types[ntypes++] = optarg;
			break;
		case 'j': pc->flags |= CLI_EV_JSON; break;
		case 'a': *all = 1; break;
		case 'F': *follow = 1; break;
		case 's':
			if ((rc = cli_parse_since(optarg, &pc->since_ns)))
				return rc;
			break;
		case 'u':
			if ((rc = cli_parse_when("--until", optarg, &pc->until_ns)))
				return rc;
			break;
		case 'o':
			if ((rc = cli_parse_u64("--to", optarg, 1, UINT64_MAX, &pc->to)))
				return rc;
			break;
		case 'S':
			if (sb_source_parse(optarg, &src))
				return cli_fail_code(CLI_EXIT_USAGE, "--source: no source '%s' (host, guest, gateway, operator or harness)",
						     optarg);
			pc->sources |= 1u << src;
			break;
		case 'T':
			if ((rc = cli_parse_u64("--tail", optarg, 0, 10000000, &pc->ntail)))
				return rc;
			*tail = 1;
			break;
		default: return cli_badopt("events", argv, ch);
		}
	}
	if (*all == (optind < argc) || argc - optind > 1)
		return cli_usage("events");
	if (pc->until_ns && pc->until_ns < pc->since_ns)
		return cli_fail_code(CLI_EXIT_USAGE, "--until is before --since");
	if (pc->to && pc->to < fo->from)
		return cli_fail_code(CLI_EXIT_USAGE, "--to is before --from");
	if (*all)
		pc->flags |= CLI_EV_RUN;
	return CLI_GO_ON;
}

int cmd_events(int argc, char **argv)
{
	struct sb_follow_opts fo = {0};
	struct print_ctx pc = {0};
	const char *types[33] = {0};
	char run[SB_RUN_MAX] = "";
	uint64_t from;
	sb_client *c;
	int all = 0, follow = 0, tail = 0, rc;

	if ((rc = events_parse(argc, argv, &fo, &pc, types, &all, &follow, &tail)) != CLI_GO_ON)
		return rc;
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if (!all && (rc = cli_resolve(c, argv[optind], run))) {
		sb_client_close(c);
		return cli_fail(rc, "%s", sb_errmsg(rc));
	}
	from = fo.from;
	cli_follow_init(&fo);
	fo.run = run;
	fo.from = from;
	fo.types = types[0] ? types : NULL;
	if (tail && (rc = tail_from(c, &fo, &pc, &from)) == SB_OK && from == UINT64_MAX) {
		/* --tail 0: from the end, which follow reads from the log's state */
		struct sb_reply rep;
		struct cli_req r;
		cli_req_begin(&r, "health");
		if ((rc = cli_call(c, &r, &rep)) == SB_OK)
			from = sb_map_u64(&rep.map, "last_offset", 0) + 1;
		sb_reply_free(&rep);
	}
	if (rc == SB_OK && follow)
		cli_follow_live(&fo, run);
	fo.from = from;
	fo.types = types[0] ? types : NULL;
	if (rc == SB_OK)
		rc = sb_follow(c, &fo, print_cb, &pc);
	sb_client_close(c);
	return rc < 0 ? cli_fail(rc, "%s", sb_errmsg(rc)) : 0;
}
