/* cmd_prune.c - sanbox prune: remove the runs that ended, or those that
 * ended more than a while ago. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/parse.h"
#include "engine/error.h"
#include "engine/payload.h"
#include "projections/views.h"

/* Parses argv into *older_s (0: any), *dry and *json. Returns CLI_GO_ON,
 * or the exit code (printed). */
static int prune_parse(int argc, char **argv, uint64_t *older_s, int *dry, int *json)
{
	static const struct option opts[] = {
		CLI_OPT_HELP,
		{"older-than", required_argument, NULL, 'o'},
		{"dry-run", no_argument, NULL, 'n'},
		{"json", no_argument, NULL, 'j'},
		{NULL, 0, NULL, 0},
	};
	int ch, rc;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("prune");
		case 'o':
			if ((rc = cli_parse_duration(optarg, older_s)))
				return cli_fail_code(CLI_EXIT_USAGE, "--older-than: %s",
						     sb_errmsg(rc));
			break;
		case 'n': *dry = 1; break;
		case 'j': *json = 1; break;
		default: return cli_badopt("prune", argv, ch);
		}
	}
	return optind == argc ? CLI_GO_ON : cli_usage("prune");
}

/* Lists into *ids (the caller frees it) the runs that ended before
 * before_ns and are not removed, *n of them. */
static int prune_list(sb_client *c, uint64_t before_ns, char (**ids)[SB_RUN_MAX], size_t *n)
{
	struct cli_req r;
	struct sb_reply rep;
	const msgpack_object *list;
	struct sb_runstate rs;
	int rc;

	*ids = NULL;
	*n = 0;
	cli_req_begin(&r, "runs.list");
	rc = cli_call(c, &r, &rep);
	list = sb_map_get(&rep.map, "runs");
	if (rc == SB_OK && (!list || list->type != MSGPACK_OBJECT_ARRAY))
		rc = sb_seterr(SB_ERR_PROTO, "malformed reply");
	if (rc == SB_OK && !(*ids = calloc(list->via.array.size + 1, sizeof **ids)))
		rc = SB_ERR_NOMEM;
	for (uint32_t i = 0; list && rc == SB_OK && i < list->via.array.size; i++) {
		if (sb_runstate_unpack(&list->via.array.ptr[i], &rs) || rs.removed ||
		    sb_runstate_is_live(&rs) || !rs.ended_ns || rs.ended_ns > before_ns)
			continue;
		memcpy((*ids)[(*n)++], rs.run, SB_RUN_MAX);
	}
	sb_reply_free(&rep);
	return rc;
}

int cmd_prune(int argc, char **argv)
{
	char (*ids)[SB_RUN_MAX] = NULL, size[32];
	unsigned long long total = 0;
	uint64_t older_s = 0, before_ns;
	struct timespec now;
	json_t *list = NULL;
	sb_client *c;
	size_t n = 0;
	int dry = 0, json = 0, rc, status = CLI_EXIT_OK;

	if ((rc = prune_parse(argc, argv, &older_s, &dry, &json)) != CLI_GO_ON)
		return rc;
	clock_gettime(CLOCK_REALTIME, &now);
	before_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
	before_ns = before_ns > older_s * 1000000000u ? before_ns - older_s * 1000000000u : 0;
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if ((rc = prune_list(c, before_ns, &ids, &n)) || (json && !(list = json_array()))) {
		status = cli_fail(rc ? rc : SB_ERR_NOMEM, "%s", sb_errmsg(rc ? rc : SB_ERR_NOMEM));
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if ((rc = cli_rm_one(c, ids[i], dry, 1, list, &total)))
			status = rc; /* the others are still removed */
	if (list) {
		cli_print_json(json_pack("{s:o, s:I, s:b}", "runs", list, "bytes",
					 (json_int_t)total, "dry_run", dry));
		list = NULL;
	} else {
		cli_size(total, size, sizeof size);
		printf(dry ? "%zu run%s would be removed, %s freed\n"
			   : "%zu run%s removed, %s freed\n",
		       n, n == 1 ? "" : "s", size);
	}
out:
	json_decref(list);
	free(ids);
	sb_client_close(c);
	return status;
}
