/* cmd_fork.c - sanbox fork and sanbox resume: runs that continue a run's
 * snapshot (new runs, or the run itself). One file: they take the same
 * options and differ in one flag. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"

struct from_opts {
	const char *snapshot, *name, *prompt;
	const char *runner; /* NULL: the run's own, as not naming one */
	uint64_t at, count;
	uint64_t budget; /* nano-USD, or 0: the run's */
	int has_at, detach, json;
};

static int from_parse(int argc, char **argv, const char *cmd, int fork,
		      struct from_opts *o)
{
	static const struct option opts[] = {
	    CLI_OPT_HELP,
	    {"snapshot", required_argument, NULL, 's'},
	    {"at", required_argument, NULL, 'a'},
	    {"count", required_argument, NULL, 'n'},
	    {"name", required_argument, NULL, 'N'},
	    {"prompt", required_argument, NULL, 'p'},
	    {"runner", required_argument, NULL, 'R'},
	    {"budget", required_argument, NULL, 'b'},
	    {"detach", no_argument, NULL, 'd'},
	    {"json", no_argument, NULL, 'j'},
	    {NULL, 0, NULL, 0},
	};
	int ch, rc;

	memset(o, 0, sizeof *o);
	o->count = 1;
	while ((ch = getopt_long(argc, argv, fork ? ":hn:" : ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help(cmd);
		case 's': o->snapshot = optarg; break;
		case 'a':
			if ((rc = cli_parse_u64("--at", optarg, 1, UINT64_MAX - 1,
						&o->at)))
				return rc;
			o->has_at = 1;
			break;
		case 'n':
			if (!fork)
				return cli_badopt(cmd, argv, ch);
			if ((rc = cli_parse_u64("--count", optarg, 1, 64, &o->count)))
				return rc;
			break;
		case 'N':
			if (!fork)
				return cli_badopt(cmd, argv, ch);
			if ((rc = cli_check_name("--name", optarg)))
				return rc;
			o->name = optarg;
			break;
		case 'p': o->prompt = optarg; break;
		case 'R':
			if ((rc = cli_check_name("--runner", optarg)))
				return rc;
			o->runner = optarg;
			break;
		case 'b':
			if ((rc = cli_parse_usd(optarg, &o->budget)))
				return cli_fail_code(CLI_EXIT_USAGE, "--budget: %s",
						     sb_errmsg(rc));
			break;
		case 'd': o->detach = 1; break;
		case 'j': o->json = 1; break;
		default: return cli_badopt(cmd, argv, ch);
		}
	}
	if (o->snapshot && o->has_at)
		return cli_fail_code(CLI_EXIT_USAGE, "give --snapshot or --at, not both");
	if (argc - optind != 1)
		return cli_usage(cmd);
	return CLI_GO_ON;
}

/* Packs the request's arguments but run's. */
static void from_pack(struct cli_req *r, const struct from_opts *o, int fork)
{
	if (o->snapshot)
		sb_mapw_str(&r->m, "snapshot", o->snapshot);
	if (o->has_at)
		sb_mapw_u64(&r->m, "at", o->at);
	if (o->prompt)
		sb_mapw_str(&r->m, "prompt", o->prompt);
	if (o->runner)
		sb_mapw_str(&r->m, "runner", o->runner);
	if (o->budget)
		sb_mapw_u64(&r->m, "budget_nusd", o->budget);
	if (fork)
		sb_mapw_u64(&r->m, "count", o->count);
	if (fork && o->name)
		sb_mapw_str(&r->m, "name", o->name);
}

/* The offset of run's newest event, to follow a resume from after it. */
static int last_offset(sb_client *c, const char *run, uint64_t *off)
{
	struct cli_req r;
	struct sb_reply rep = {0};
	int rc;

	cli_req_begin(&r, "run.get");
	sb_mapw_str(&r.m, "run", run);
	if ((rc = cli_call(c, &r, &rep)) == SB_OK)
		*off = sb_map_u64(sb_map_get(&rep.map, "run"), "last_offset", 0);
	sb_reply_free(&rep);
	return rc;
}

static int from_run(int argc, char **argv, int fork)
{
	const char *cmd = fork ? "fork" : "resume";
	struct from_opts o;
	struct cli_req r;
	struct sb_reply rep = {0};
	const msgpack_object *runs;
	char run[SB_RUN_MAX], one[SB_RUN_MAX], err[300];
	uint64_t from = 0;
	sb_client *c;
	int rc;

	if ((rc = from_parse(argc, argv, cmd, fork, &o)) != CLI_GO_ON)
		return rc;
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if ((rc = cli_resolve(c, argv[optind], run)) ||
	    (!fork && (rc = last_offset(c, run, &from)))) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
		goto out;
	}
	cli_req_begin(&r, fork ? "run.fork" : "run.resume");
	sb_mapw_str(&r.m, "run", run);
	from_pack(&r, &o, fork);
	if ((rc = cli_call(c, &r, &rep))) {
		rc = cli_fail_request(rc);
		goto out;
	}
	runs = sb_map_get(&rep.map, "runs");
	if (fork ? !runs || runs->type != MSGPACK_OBJECT_ARRAY || !runs->via.array.size
		 : sb_map_str(&rep.map, "run", one, sizeof one) <= 0) {
		rc = cli_fail(SB_ERR_PROTO, "malformed reply");
		goto out;
	}
	if (fork && sb_map_str(&rep.map, "error", err, sizeof err) > 0)
		cli_note("only %u of %llu forks started: %s", runs->via.array.size,
			 (unsigned long long)o.count, err);
	if (fork && runs->via.array.size == 1 &&
	    runs->via.array.ptr[0].type == MSGPACK_OBJECT_STR)
		snprintf(one, sizeof one, "%.*s",
			 (int)runs->via.array.ptr[0].via.str.size,
			 runs->via.array.ptr[0].via.str.ptr);
	if (o.detach || (fork && runs->via.array.size > 1)) {
		if (o.json) {
			cli_print_reply(&rep.map);
		} else if (fork) {
			for (uint32_t i = 0; i < runs->via.array.size; i++)
				if (runs->via.array.ptr[i].type == MSGPACK_OBJECT_STR)
					printf("%.*s\n",
					       (int)runs->via.array.ptr[i].via.str.size,
					       runs->via.array.ptr[i].via.str.ptr);
		} else {
			printf("%s\n", one);
		}
		goto out;
	}
	rc = cli_run_follow(c, one, fork ? 0 : from + 1, 0, o.json, 1);
out:
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

int cmd_fork(int argc, char **argv)
{
	return from_run(argc, argv, 1);
}

int cmd_resume(int argc, char **argv)
{
	return from_run(argc, argv, 0);
}
