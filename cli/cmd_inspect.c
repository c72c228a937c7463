/* cmd_inspect.c - sanbox inspect: a run's resolved settings and state. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/log/summary.h"
#include "engine/payload.h"
#include "projections/views.h"

/* Prints map m under title, one "key value" line per field, both escaped
 * (values as sb_summary_value writes them). */
static void print_map(const char *title, const msgpack_object *m)
{
	char key[256], val[8192];

	printf("%s:\n", title);
	if (!m || m->type != MSGPACK_OBJECT_MAP) {
		printf("  (none)\n");
		return;
	}
	for (uint32_t i = 0; i < m->via.map.size; i++) {
		sb_summary_value(&m->via.map.ptr[i].key, key, sizeof key);
		sb_summary_value(&m->via.map.ptr[i].val, val, sizeof val);
		printf("  %-16s %s\n", key, val);
	}
}

int cmd_inspect(int argc, char **argv)
{
	struct cli_req r;
	struct sb_reply rep;
	sb_client *c;
	int json = 0, rc;

	if ((rc = cli_parse_opts(argc, argv, "inspect", &json)) != CLI_GO_ON)
		return rc;
	if (argc - optind != 1)
		return cli_usage("inspect");
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	cli_req_begin(&r, "run.get", 1);
	sb_pack_kstr(&r.pk, "run", argv[optind]);
	if ((rc = cli_call(c, &r, &rep))) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
	} else if (json) {
		cli_print_reply(&rep.map);
	} else {
		print_map("run", sb_map_get(&rep.map, "run"));
		print_map("policy", sb_map_get(&rep.map, "policy"));
		print_map("cost", sb_map_get(&rep.map, "cost"));
	}
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}
