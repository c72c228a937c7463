/* cmd_stop.c - sanbox stop: stop runs, or every live run of a group. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"

static int stop_group(sb_client *c, const char *group)
{
	struct cli_req r;
	struct sb_reply rep;
	const msgpack_object *runs;
	int rc;

	cli_req_begin(&r, "group.stop", 1);
	sb_pack_kstr(&r.pk, "group", group);
	rc = cli_call(c, &r, &rep);
	runs = sb_map_get(&rep.map, "runs");
	if (rc == SB_OK && runs && runs->type == MSGPACK_OBJECT_ARRAY) {
		for (uint32_t i = 0; i < runs->via.array.size; i++)
			printf("%.*s stopping\n", (int)runs->via.array.ptr[i].via.str.size,
			       runs->via.array.ptr[i].via.str.ptr);
		if (!runs->via.array.size)
			printf("group %s has no live runs\n", group);
	} else {
		rc = cli_fail(rc ? rc : SB_ERR_PROTO, "%s", rc ? sb_errmsg(rc) : "malformed reply");
	}
	sb_reply_free(&rep);
	return rc;
}

int cmd_stop(int argc, char **argv)
{
	sb_client *c;
	int rc, status = 0;

	if (argc == 3 && !strcmp(argv[1], "--group")) {
		if ((rc = cli_connect(1, &c)))
			return cli_fail(rc, "%s", sb_errmsg(rc));
		status = stop_group(c, argv[2]);
		sb_client_close(c);
		return status;
	}
	if (argc < 2 || argv[1][0] == '-')
		return cli_usage("stop");
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	for (int i = 1; i < argc; i++) {
		struct cli_req r;
		struct sb_reply rep;
		char run[SB_RUN_MAX];

		cli_req_begin(&r, "run.stop", 1);
		sb_pack_kstr(&r.pk, "run", argv[i]);
		rc = cli_call(c, &r, &rep);
		if (rc == SB_OK && sb_map_str(&rep.map, "run", run, sizeof run) > 0)
			printf("%s stopping\n", run);
		else
			status = cli_fail(rc, "%s", sb_errmsg(rc));
		sb_reply_free(&rep);
	}
	sb_client_close(c);
	return status;
}
