/* cmd_rerun.c - sanbox rerun: a new run from a run's start whose model
 * calls are answered from the run's record (SPEC.md, "Re-runs"). */
#include <stdio.h>
#include <stdlib.h>
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

/* What a run did, as the comparison of a re-run reads it from its record:
 * each path's last change (its kind and xxh3), its exit status, its tool
 * calls. */
struct side {
	struct change {
		char path[256], state[96];
	} * files;
	size_t n, cap;
	int64_t exit;
	int exited;
	uint64_t tools;
};

/* Notes path's latest state in s. */
static int side_file(struct side *s, const char *path, const char *state)
{
	struct change *more;
	size_t i;

	for (i = 0; i < s->n && strcmp(s->files[i].path, path); i++)
		;
	if (i == s->n) {
		if (s->n == s->cap) {
			s->cap = s->cap ? 2 * s->cap : 64;
			if (!(more = realloc(s->files, s->cap * sizeof *more)))
				return SB_ERR_NOMEM;
			s->files = more;
		}
		snprintf(s->files[s->n++].path, sizeof more->path, "%s", path);
	}
	snprintf(s->files[i].state, sizeof s->files[i].state, "%s", state);
	return SB_OK;
}

/* One event of the record into s. */
static int side_event(struct side *s, const msgpack_object *e)
{
	const msgpack_object *p = sb_map_get(e, "payload");
	char type[32] = "", path[256] = "", kind[16] = "", xxh[64] = "", state[96];

	sb_map_str(e, "type", type, sizeof type);
	if (!strcmp(type, "agent.tool.completed"))
		s->tools++;
	if (!strcmp(type, "run.exited")) {
		const msgpack_object *v = sb_map_get(p, "status");
		s->exited = v && (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
				  v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER);
		s->exit = s->exited ? v->via.i64 : 0;
	}
	if (strcmp(type, "agent.file.changed") ||
	    sb_map_str(p, "path", path, sizeof path) <= 0)
		return SB_OK;
	sb_map_str(p, "kind", kind, sizeof kind);
	sb_map_str(p, "xxh3", xxh, sizeof xxh);
	snprintf(state, sizeof state, "%s %s", kind, xxh);
	return side_file(s, path, state);
}

/* Reads run's record into s. */
static int side_read(sb_client *c, const char *run, struct side *s)
{
	static const char *const types[] = {"agent.file.changed", "run.exited",
					    "agent.tool.completed"};
	uint64_t next = 1;
	uint32_t n;
	int rc;

	do {
		struct cli_req r;
		struct sb_reply rep = {0};
		const msgpack_object *evs;

		cli_req_begin(&r, "events.read");
		sb_mapw_str(&r.m, "run", run);
		sb_mapw_u64(&r.m, "from", next);
		sb_mapw_u64(&r.m, "limit", 1000);
		msgpack_pack_array(sb_mapw_key(&r.m, "types"), 3);
		for (size_t i = 0; i < 3; i++)
			sb_pack_str(&r.m.pk, types[i]);
		if ((rc = cli_call(c, &r, &rep)))
			return rc;
		evs = sb_map_get(&rep.map, "events");
		n = evs && evs->type == MSGPACK_OBJECT_ARRAY ? evs->via.array.size : 0;
		for (uint32_t i = 0; i < n && rc == SB_OK; i++) {
			rc = side_event(s, &evs->via.array.ptr[i]);
			next = sb_map_u64(&evs->via.array.ptr[i], "offset", next) + 1;
		}
		sb_reply_free(&rep);
	} while (rc == SB_OK && n);
	return rc;
}

/* The state s gives path, or "" when s never changed it. */
static const char *side_state(const struct side *s, const char *path)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->files[i].path, path))
			return s->files[i].state;
	return "";
}

/* Prints the files whose last state differs between a and b. */
static void print_differ(const struct side *a, const struct side *b)
{
	char esc[4 * 256];
	int any = 0;

	for (int pass = 0; pass < 2; pass++) {
		const struct side *x = pass ? b : a, *y = pass ? a : b;
		for (size_t i = 0; i < x->n; i++) {
			const char *p = x->files[i].path;
			if (!strcmp(x->files[i].state, side_state(y, p)) ||
			    (pass && side_state(y, p)[0]))
				continue; /* the same, or named in the first pass */
			sb_text_escape(p, strlen(p), esc, sizeof esc);
			printf("%s%s", any++ ? ", " : "", esc);
		}
	}
	printf("%s\n", any ? "" : "none");
}

/* Prints the comparison of the re-run run with orig, from their records. */
static int rerun_compare(sb_client *c, const char *run, const char *orig)
{
	struct side a = {0}, b = {0};
	int rc;

	if ((rc = side_read(c, orig, &a)) == SB_OK &&
	    (rc = side_read(c, run, &b)) == SB_OK) {
		printf("  files that differ: ");
		print_differ(&a, &b);
		char ea[24] = "none", eb[24] = "none";
		if (a.exited)
			snprintf(ea, sizeof ea, "%lld", (long long)a.exit);
		if (b.exited)
			snprintf(eb, sizeof eb, "%lld", (long long)b.exit);
		printf("  exit status: %s (original %s)\n", eb, ea);
		printf("  tool calls: %llu (original %llu)\n",
		       (unsigned long long)b.tools, (unsigned long long)a.tools);
	}
	free(a.files);
	free(b.files);
	return rc;
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
	if (!json && (rerun_report(c, one, run) || rerun_compare(c, one, run)))
		cli_note("rerun %s: its record cannot be compared", one);
out:
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}
