/* cmd_stop.c - sanbox stop: stop runs, or every live run of a group. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"

/* Prints that run is stopping, or adds it to the --json list. */
static void stopping(const char *run, size_t len, json_t *list)
{
	char id[64], cell[256];

	snprintf(id, sizeof id, "%.*s", (int)(len < sizeof id ? len : sizeof id - 1), run);
	if (list) {
		json_array_append_new(list, json_stringn(run, len));
		return;
	}
	cli_cell(id, 0, cell, sizeof cell);
	printf("%s stopping\n", cell);
}

static int stop_group(sb_client *c, const char *group, json_t *list)
{
	struct cli_req r;
	struct sb_reply rep;
	const msgpack_object *runs;
	char cell[1024];
	int rc;

	cli_req_begin(&r, "group.stop", 1);
	sb_pack_kstr(&r.pk, "group", group);
	rc = cli_call(c, &r, &rep);
	runs = sb_map_get(&rep.map, "runs");
	if (rc == SB_OK && runs && runs->type == MSGPACK_OBJECT_ARRAY) {
		for (uint32_t i = 0; i < runs->via.array.size; i++)
			if (runs->via.array.ptr[i].type == MSGPACK_OBJECT_STR)
				stopping(runs->via.array.ptr[i].via.str.ptr,
					 runs->via.array.ptr[i].via.str.size, list);
		if (!runs->via.array.size && !list) {
			cli_cell(group, 0, cell, sizeof cell);
			printf("group %s has no live runs\n", cell);
		}
	} else {
		rc = cli_fail(rc ? rc : SB_ERR_PROTO, "%s", rc ? sb_errmsg(rc) : "malformed reply");
	}
	sb_reply_free(&rep);
	return rc;
}

static int stop_run(sb_client *c, const char *want, json_t *list)
{
	struct cli_req r;
	struct sb_reply rep;
	char run[SB_RUN_MAX];
	int rc;

	cli_req_begin(&r, "run.stop", 1);
	sb_pack_kstr(&r.pk, "run", want);
	rc = cli_call(c, &r, &rep);
	if (rc == SB_OK && sb_map_str(&rep.map, "run", run, sizeof run) > 0)
		stopping(run, strlen(run), list);
	else
		rc = cli_fail(rc ? rc : SB_ERR_PROTO, "%s", rc ? sb_errmsg(rc) : "malformed reply");
	sb_reply_free(&rep);
	return rc;
}

int cmd_stop(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_OPT_HELP,
		{"group", required_argument, NULL, 'g'},
		{"json", no_argument, NULL, 'j'},
		{NULL, 0, NULL, 0},
	};
	const char *group = NULL;
	json_t *list = NULL;
	sb_client *c;
	int json = 0, ch, rc, status = 0;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("stop");
		case 'g':
			if ((rc = cli_check_name("--group", optarg)))
				return rc;
			group = optarg;
			break;
		case 'j': json = 1; break;
		default: return cli_badopt("stop", argv, ch);
		}
	}
	if (group ? optind != argc : optind == argc)
		return cli_usage("stop");
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if (json)
		list = json_array();
	if (group)
		status = stop_group(c, group, list);
	for (int i = optind; i < argc; i++)
		if ((rc = stop_run(c, argv[i], list)))
			status = rc; /* the others are still stopped */
	sb_client_close(c);
	if (json && group)
		cli_print_json(json_pack("{s:s, s:o}", "group", group, "runs", list));
	else if (json)
		cli_print_json(json_pack("{s:o}", "runs", list));
	return status;
}
