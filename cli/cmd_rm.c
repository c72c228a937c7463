/* cmd_rm.c - sanbox rm: remove runs that ended, freeing their disks and
 * snapshots (their record stays). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"

/* Says what removing run freed: a line, or an item of list (--json). */
static void rm_said(const char *run, const msgpack_object *m, int dry, json_t *list)
{
	unsigned long long bytes = sb_map_u64(m, "bytes", 0), kept = sb_map_u64(m, "kept", 0);
	char size[32], cell[256];

	if (list) {
		json_array_append_new(list, json_pack("{s:s, s:I, s:I}", "run", run, "bytes",
						      (json_int_t)bytes, "kept",
						      (json_int_t)kept));
		return;
	}
	cli_size(bytes, size, sizeof size);
	cli_cell(run, 0, cell, sizeof cell);
	printf(dry ? "%s would be removed: %s freed" : "%s removed: %s freed", cell, size);
	if (kept)
		printf(" (%llu layer%s kept: other runs read %s)", kept, kept == 1 ? "" : "s",
		       kept == 1 ? "it" : "them");
	printf("\n");
}

int cli_rm_one(sb_client *c, const char *want, int dry, int keep_busy, json_t *list,
	       unsigned long long *total)
{
	struct cli_req r;
	struct sb_reply rep;
	char run[SB_RUN_MAX];
	int rc;

	cli_req_begin(&r, "run.rm");
	sb_mapw_str(&r.m, "run", want);
	if (dry)
		sb_mapw_bool(&r.m, "dry_run", 1);
	rc = cli_call(c, &r, &rep);
	if (rc == SB_OK && sb_map_str(&rep.map, "run", run, sizeof run) <= 0)
		rc = sb_seterr(SB_ERR_PROTO, "malformed reply");
	if (rc == SB_OK) {
		*total += sb_map_u64(&rep.map, "bytes", 0);
		rm_said(run, &rep.map, dry, list);
	} else if (rc == SB_ERR_STATE && keep_busy) {
		cli_note("%s kept: %s", want, sb_errmsg(rc));
		rc = CLI_EXIT_OK;
	} else {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
	}
	sb_reply_free(&rep);
	return rc;
}

int cmd_rm(int argc, char **argv)
{
	unsigned long long total = 0;
	json_t *list = NULL;
	sb_client *c;
	int json = 0, rc, status = CLI_EXIT_OK;

	if ((rc = cli_parse_opts(argc, argv, "rm", &json)) != CLI_GO_ON)
		return rc;
	if (optind == argc)
		return cli_usage("rm");
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if (json && !(list = json_array())) {
		sb_client_close(c);
		return cli_fail(SB_ERR_NOMEM, "out of memory");
	}
	for (int i = optind; i < argc; i++)
		if ((rc = cli_rm_one(c, argv[i], 0, 0, list, &total)))
			status = rc; /* the others are still removed */
	sb_client_close(c);
	if (list)
		cli_print_json(json_pack("{s:o, s:I}", "runs", list, "bytes", (json_int_t)total));
	return status;
}
