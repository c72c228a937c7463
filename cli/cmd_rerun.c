/* cmd_rerun.c - sanbox rerun: a new run from a run's start (or its state
 * at an offset) whose model calls are answered from the run's record
 * (SPEC.md, "Re-runs"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/exit.h"
#include "engine/error.h"
#include "engine/payload.h"
#include "engine/text.h"

/* Prints where run departed from its record (d: its rerun.diverged, or
 * NULL), or that it kept to it. */
static void print_diverged(const char *run, const char *orig, const msgpack_object *d)
{
	char path[160] = "", esc[4 * sizeof path];

	if (!d) {
		printf("rerun %s: kept to the record of %s\n", run, orig);
		return;
	}
	sb_map_str(d, "path", path, sizeof path);
	sb_text_escape(path, strlen(path), esc, sizeof esc);
	printf("rerun %s: diverged from %s at call %llu: %s\n", run, orig,
	       (unsigned long long)sb_map_u64(d, "call", 0),
	       path[0] ? esc : "a call past the record");
}

/* An exit status as rerun.compared has it: "none" for -1. */
static const char *status_text(int64_t st, char buf[24])
{
	if (st < 0)
		return "none";
	snprintf(buf, 24, "%lld", (long long)st);
	return buf;
}

/* Prints rerun.compared's files: each one named on a line of at most 80
 * columns, then how many more differ. */
static void print_files(const msgpack_object *cmp)
{
	const msgpack_object *fs = sb_map_get(cmp, "files");
	uint64_t total = sb_map_u64(cmp, "files_differ", 0), shown = 0;
	char path[4096], what[16], esc[4 * 64 + 4];

	printf("  files that differ: ");
	if (!total) {
		printf("none\n");
		return;
	}
	printf("%llu\n", (unsigned long long)total);
	for (uint32_t i = 0; fs && fs->type == MSGPACK_OBJECT_ARRAY && i < fs->via.array.size;
	     i++, shown++) {
		size_t n = sb_map_str(&fs->via.array.ptr[i], "path", path, sizeof path) > 0
			       ? strlen(path)
			       : 0;
		size_t cut = sb_utf8_cut(path, n, 60);
		sb_map_str(&fs->via.array.ptr[i], "change", what, sizeof what);
		sb_text_escape(path, cut, esc, sizeof esc);
		printf("    %-9s %s%s\n", what, esc, cut < n ? "..." : "");
	}
	if (total > shown)
		printf("    and %llu more\n", (unsigned long long)(total - shown));
}

/* Prints the comparison cmp (rerun.compared) of run with orig. */
static void print_compared(const char *run, const char *orig, const msgpack_object *cmp)
{
	uint64_t at = sb_map_u64(cmp, "tools_differ_at", 0);
	char a[24], b[24];

	if (sb_map_bool(cmp, "same", 0))
		printf("rerun %s: the same outcome as %s\n", run, orig);
	else
		printf("rerun %s: its outcome differs from %s's\n", run, orig);
	printf("  exit status: %s (original %s)\n",
	       status_text(sb_map_i64(cmp, "status", -1), b),
	       status_text(sb_map_i64(cmp, "original_status", -1), a));
	printf("  tool calls: %llu (original %llu)",
	       (unsigned long long)sb_map_u64(cmp, "tools", 0),
	       (unsigned long long)sb_map_u64(cmp, "original_tools", 0));
	if (at)
		printf(", differing from call %llu", (unsigned long long)at);
	printf("\n");
	print_files(cmp);
}

/* Prints, once the re-run run of orig ended, where it diverged and its
 * comparison (a line of JSON with json); returns the exit code: 0 the
 * same outcome, CLI_EXIT_DIFFERS another, else code (no comparison
 * recorded: the run's). */
static int rerun_report(sb_client *c, const char *run, const char *orig, int json, int code)
{
	struct sb_reply dr = {0}, cr = {0};
	const msgpack_object *d = NULL, *cmp = NULL;
	int rc;

	if ((rc = cli_first_event(c, run, "rerun.diverged", &dr, &d)) ||
	    (rc = cli_first_event(c, run, "rerun.compared", &cr, &cmp))) {
		cli_note("rerun %s: its comparison cannot be read: %s", run, sb_errmsg(rc));
		goto out;
	}
	d = d ? sb_map_get(d, "payload") : NULL;
	cmp = cmp ? sb_map_get(cmp, "payload") : NULL;
	if (json) {
		cli_print_json(json_pack("{s:s, s:s, s:o, s:o}", "rerun", run, "original", orig,
					 "diverged", d ? sb_msgpack_to_json(d) : json_null(),
					 "compared", cmp ? sb_msgpack_to_json(cmp) : json_null()));
	} else {
		print_diverged(run, orig, d);
		if (cmp)
			print_compared(run, orig, cmp);
		else
			printf("rerun %s: no comparison with %s was recorded\n", run, orig);
	}
	if (cmp)
		code = sb_map_bool(cmp, "same", 0) ? CLI_EXIT_OK : CLI_EXIT_DIFFERS;
out:
	sb_reply_free(&dr);
	sb_reply_free(&cr);
	return code;
}

int cmd_rerun(int argc, char **argv)
{
	static const struct option opts[] = {
	    CLI_OPT_HELP,
	    {"live-after-divergence", no_argument, NULL, 'l'},
	    {"at", required_argument, NULL, 'a'},
	    {"detach", no_argument, NULL, 'd'},
	    {"json", no_argument, NULL, 'j'},
	    {NULL, 0, NULL, 0},
	};
	int ch, rc, live = 0, detach = 0, json = 0;
	uint64_t at = 0; /* 0: from the run's start */
	char run[SB_RUN_MAX], one[SB_RUN_MAX];
	struct sb_reply rep = {0};
	const msgpack_object *runs;
	struct cli_req r;
	sb_client *c;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("rerun");
		case 'l': live = 1; break;
		case 'a':
			if ((rc = cli_parse_u64("--at", optarg, 1, UINT64_MAX - 1, &at)))
				return rc;
			break;
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
	if (at)
		sb_mapw_u64(&r.m, "at", at);
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
	if (rc != CLI_EXIT_DETACHED && !cli_detached)
		rc = rerun_report(c, one, run, json, rc);
out:
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}
