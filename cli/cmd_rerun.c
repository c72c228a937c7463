/* cmd_rerun.c - sanbox rerun: a new run from a run's start whose model
 * calls are answered from the run's record (SPEC.md, "Re-runs"). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"
#include "engine/text.h"

/* Prints where run departed from its record (rerun.diverged), or that it
 * kept to it. */
static int rerun_report(sb_client *c, const char *run, const char *orig)
{
	struct cli_req r;
	struct sb_reply rep = {0};
	const msgpack_object *evs, *p;
	char path[160] = "", esc[4 * sizeof path];
	int rc;

	cli_req_begin(&r, "events.read");
	sb_mapw_str(&r.m, "run", run);
	sb_mapw_u64(&r.m, "from", 1);
	sb_mapw_u64(&r.m, "limit", 1);
	msgpack_pack_array(sb_mapw_key(&r.m, "types"), 1);
	sb_pack_str(&r.m.pk, "rerun.diverged");
	if ((rc = cli_call(c, &r, &rep)))
		return rc;
	evs = sb_map_get(&rep.map, "events");
	if (evs && evs->type == MSGPACK_OBJECT_ARRAY && evs->via.array.size) {
		p = sb_map_get(&evs->via.array.ptr[0], "payload");
		sb_map_str(p, "path", path, sizeof path);
		sb_text_escape(path, strlen(path), esc, sizeof esc);
		printf("rerun %s: diverged from %s at call %llu: %s\n", run, orig,
		       (unsigned long long)sb_map_u64(p, "call", 0),
		       path[0] ? esc : "a call past the record");
	} else {
		printf("rerun %s: kept to the record of %s\n", run, orig);
	}
	sb_reply_free(&rep);
	return SB_OK;
}

int cmd_rerun(int argc, char **argv)
{
	static const struct option opts[] = {
	    CLI_OPT_HELP,
	    {"live-after-divergence", no_argument, NULL, 'l'},
	    {"detach", no_argument, NULL, 'd'},
	    {"json", no_argument, NULL, 'j'},
	    {NULL, 0, NULL, 0},
	};
	int ch, rc, live = 0, detach = 0, json = 0;
	char run[SB_RUN_MAX], one[SB_RUN_MAX];
	struct sb_reply rep = {0};
	const msgpack_object *runs;
	struct cli_req r;
	sb_client *c;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("rerun");
		case 'l': live = 1; break;
		case 'd': detach = 1; break;
		case 'j': json = 1; break;
		default: return cli_badopt("rerun", argv, ch);
		}
	}
	if (argc - optind != 1)
		return cli_usage("rerun");
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if ((rc = cli_resolve(c, argv[optind], run))) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
		goto out;
	}
	cli_req_begin(&r, "run.rerun");
	sb_mapw_str(&r.m, "run", run);
	if (live)
		sb_mapw_bool(&r.m, "live_after_divergence", 1);
	if ((rc = cli_call(c, &r, &rep))) {
		rc = cli_fail_request(rc);
		goto out;
	}
	runs = sb_map_get(&rep.map, "runs");
	if (!runs || runs->type != MSGPACK_OBJECT_ARRAY || runs->via.array.size != 1 ||
	    runs->via.array.ptr[0].type != MSGPACK_OBJECT_STR) {
		rc = cli_fail(SB_ERR_PROTO, "malformed reply");
		goto out;
	}
	snprintf(one, sizeof one, "%.*s", (int)runs->via.array.ptr[0].via.str.size,
		 runs->via.array.ptr[0].via.str.ptr);
	if (detach) {
		if (json)
			cli_print_reply(&rep.map);
		else
			printf("%s\n", one);
		goto out;
	}
	rc = cli_run_follow(c, one, 0, 0, json, 1);
	if (!json && rerun_report(c, one, run))
		cli_note("rerun %s: its divergence cannot be read", one);
out:
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}
