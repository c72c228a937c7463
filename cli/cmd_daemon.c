/* cmd_daemon.c - sanbox daemon start|stop|status. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"

static int status(int json)
{
	struct cli_req r;
	struct sb_reply rep;
	sb_client *c;
	int rc;

	if ((rc = cli_connect(0, &c))) {
		if (json)
			printf("{\"running\":false,\"home\":\"%s\"}\n", cli_home);
		else
			printf("sanboxd: not running for %s\n", cli_home);
		return EXIT_UNAVAIL;
	}
	cli_req_begin(&r, "health", 0);
	if ((rc = cli_call(c, &r, &rep)) == SB_OK) {
		if (json) {
			json_t *j = sb_msgpack_to_json(&rep.map);
			json_object_del(j, "ok");
			json_object_set_new(j, "running", json_true());
			json_object_set_new(j, "home", json_string(cli_home));
			cli_print_json(j);
		} else {
			printf("sanboxd: running for %s (pid %llu, up %llus, %llu events)\n", cli_home,
			       (unsigned long long)sb_map_u64(&rep.map, "pid", 0),
			       (unsigned long long)sb_map_u64(&rep.map, "uptime_s", 0),
			       (unsigned long long)sb_map_u64(&rep.map, "last_offset", 0));
		}
	} else {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
	}
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

static int stop(void)
{
	struct cli_req r;
	struct sb_reply rep;
	sb_client *c;
	int rc;

	if (cli_connect(0, &c)) {
		printf("sanboxd: not running\n");
		return 0;
	}
	cli_req_begin(&r, "daemon.stop", 0);
	rc = cli_call(c, &r, &rep);
	sb_reply_free(&rep);
	sb_client_close(c);
	if (rc)
		return cli_fail(rc, "%s", sb_errmsg(rc));
	/* wait until it is gone, so a following start does not race it */
	for (int i = 0; i < 100 && cli_connect(0, &c) == SB_OK; i++) {
		sb_client_close(c);
		usleep(100000);
	}
	printf("sanboxd: stopped\n");
	return 0;
}

int cmd_daemon(int argc, char **argv)
{
	int json = argc > 2 && !strcmp(argv[2], "--json");
	sb_client *c;
	int rc;

	if (argc < 2 || argc > 3 || (argc == 3 && !json))
		return cli_usage("daemon");
	if (!strcmp(argv[1], "status"))
		return status(json);
	if (!strcmp(argv[1], "stop"))
		return stop();
	if (!strcmp(argv[1], "start")) {
		if ((rc = cli_connect(1, &c)))
			return cli_fail(rc, "%s", sb_errmsg(rc));
		sb_client_close(c);
		return status(json) == 0 ? 0 : 1;
	}
	return cli_usage("daemon");
}
