/* cmd_stop.c - sanbox stop: stop runs, or every live run of a group. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"

/* What stop did: the runs it stops, and whether it prints JSON. */
struct stopped {
	json_t *runs;
	int json;
};

/* Adds run to the runs stopping, and prints that it is (text). */
static void stopping(const char *run, size_t len, struct stopped *st)
{
	char id[64], cell[256];

	json_array_append_new(st->runs, json_stringn(run, len));
	if (st->json)
		return;
	snprintf(id, sizeof id, "%.*s", (int)(len < sizeof id ? len : sizeof id - 1), run);
	cli_cell(id, 0, cell, sizeof cell);
	printf("%s stopping\n", cell);
}

static int stop_group(sb_client *c, const char *group, struct stopped *st)
{
	struct cli_req r;
	struct sb_reply rep;
	const msgpack_object *runs;
	char cell[1024];
	int rc;

	cli_req_begin(&r, "group.stop");
	sb_mapw_str(&r.m, "group", group);
	rc = cli_call(c, &r, &rep);
	runs = sb_map_get(&rep.map, "runs");
	if (rc == SB_OK && runs && runs->type == MSGPACK_OBJECT_ARRAY) {
		for (uint32_t i = 0; i < runs->via.array.size; i++)
			if (runs->via.array.ptr[i].type == MSGPACK_OBJECT_STR)
				stopping(runs->via.array.ptr[i].via.str.ptr,
					 runs->via.array.ptr[i].via.str.size, st);
		if (!runs->via.array.size && !st->json) {
			cli_cell(group, 0, cell, sizeof cell);
			printf("group %s has no live runs\n", cell);
		}
	} else {
		rc = cli_fail(rc ? rc : SB_ERR_PROTO, "%s", rc ? sb_errmsg(rc) : "malformed reply");
	}
	sb_reply_free(&rep);
	return rc;
}

/* Stops run want; one that has ended already is told on stderr and is
 * no error (as a group with no live run is not). */
static int stop_run(sb_client *c, const char *want, struct stopped *st)
{
	struct cli_req r;
	struct sb_reply rep;
	char run[SB_RUN_MAX];
	int rc;

	cli_req_begin(&r, "run.stop");
	sb_mapw_str(&r.m, "run", want);
	rc = cli_call(c, &r, &rep);
	if (rc == SB_OK && sb_map_str(&rep.map, "run", run, sizeof run) > 0)
		stopping(run, strlen(run), st);
	else if (rc == SB_ERR_STATE)
		cli_note("%s: nothing to stop", sb_errmsg(rc));
	else
		rc = cli_fail(rc ? rc : SB_ERR_PROTO, "%s", rc ? sb_errmsg(rc) : "malformed reply");
	sb_reply_free(&rep);
	return rc == SB_ERR_STATE ? CLI_EXIT_OK : rc;
}

static int on_stopped(void *ctx, const struct sb_event *ev, const msgpack_object *p)
{
	return 1;
}

/* Waits for run's run.stopped after its last run.resumed (Ctrl-C ends
 * the wait). Errors: those of the calls. */
static int wait_stopped(sb_client *c, const char *run)
{
	static const char *const types[] = {"run.stopped", NULL};
	struct sb_follow_opts fo = {0};
	struct sb_reply rep;
	int live, rc;

	if ((rc = cli_run_get(c, run, &rep, &live)))
		return rc;
	cli_follow_live(&fo, run);
	fo.from = sb_map_u64(sb_map_get(&rep.map, "run"), "resumed_offset", 0) + 1;
	fo.types = types;
	sb_reply_free(&rep);
	rc = sb_follow(c, &fo, on_stopped, NULL);
	return rc < 0 ? rc : SB_OK;
}

int cmd_stop(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_OPT_HELP,
		{"group", required_argument, NULL, 'g'},
		{"json", no_argument, NULL, 'j'},
		{"wait", no_argument, NULL, 'w'},
		{NULL, 0, NULL, 0},
	};
	struct stopped st = {0};
	const char *group = NULL;
	sb_client *c;
	int wait = 0, ch, rc, status = 0;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("stop");
		case 'g':
			if ((rc = cli_check_name("--group", optarg)))
				return rc;
			group = optarg;
			break;
		case 'j': st.json = 1; break;
		case 'w': wait = 1; break;
		default: return cli_badopt("stop", argv, ch);
		}
	}
	if (group ? optind != argc : optind == argc)
		return cli_usage("stop");
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if (!(st.runs = json_array())) {
		sb_client_close(c);
		return cli_fail(SB_ERR_NOMEM, "out of memory");
	}
	if (group)
		status = stop_group(c, group, &st);
	for (int i = optind; i < argc; i++)
		if ((rc = stop_run(c, argv[i], &st)))
			status = rc; /* the others are still stopped */
	for (size_t i = 0; wait && i < json_array_size(st.runs) && !cli_detached; i++) {
		const char *run = json_string_value(json_array_get(st.runs, i));
		if ((rc = wait_stopped(c, run)))
			status = cli_fail(rc, "run %s: %s", run, sb_errmsg(rc));
	}
	sb_client_close(c);
	if (st.json && group)
		cli_print_json(json_pack("{s:s, s:o}", "group", group, "runs", st.runs));
	else if (st.json)
		cli_print_json(json_pack("{s:o}", "runs", st.runs));
	else
		json_decref(st.runs);
	return status;
}
