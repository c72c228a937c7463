/* cmd_stop.c - sanbox stop: stop runs. */
#include <stdio.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"

int cmd_stop(int argc, char **argv)
{
	sb_client *c;
	int rc, status = 0;

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
