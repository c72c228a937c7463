/* cmd_daemon.c - sanbox daemon start|stop|status. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/home.h"
#include "engine/payload.h"

static int status(int json)
{
	struct cli_req r;
	struct sb_reply rep;
	sb_client *c;
	int rc;

	if ((rc = cli_connect(0, &c))) {
		if (json)
			cli_print_json(json_pack("{s:b, s:s}", "running", 0, "home", cli_home));
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

/* Waits up to ms for the daemon's pid file lock to be free: the daemon holds
 * it until its process ends (zombie or not). Returns 1 once free. */
static int pidfile_wait_free(int ms)
{
	char path[PATH_MAX];
	int fd, free = 0;

	sb_home_path(cli_home, "sanboxd.pid", path, sizeof path);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 1;
	for (int waited = 0; !free && waited <= ms; waited += 50) {
		free = flock(fd, LOCK_EX | LOCK_NB) == 0;
		if (!free)
			usleep(50000);
	}
	close(fd);
	return free;
}

/* The answer of daemon stop --json. */
static void print_stopped_json(uint64_t live)
{
	cli_print_json(json_pack("{s:b, s:s, s:I}", "running", 0, "home", cli_home, "runs_stopped",
				 (json_int_t)live));
}

static int stop(int json)
{
	struct cli_req r;
	struct sb_reply rep;
	sb_client *c;
	uint64_t live = 0;
	int rc;

	if (cli_connect(0, &c)) {
		if (json)
			print_stopped_json(0);
		else
			printf("sanboxd: not running\n");
		return 0;
	}
	cli_req_begin(&r, "daemon.stop", 0);
	rc = cli_call(c, &r, &rep);
	if (rc == SB_OK)
		live = sb_map_u64(&rep.map, "runs_stopped", 0);
	sb_reply_free(&rep);
	sb_client_close(c);
	if (rc && rc != SB_ERR_UNAVAIL) /* UNAVAIL: it is stopping already */
		return cli_fail(rc, "%s", sb_errmsg(rc));
	/* wait until it has exited, so a following start does not race it */
	if (!pidfile_wait_free(30000))
		return cli_fail(SB_ERR_TIMEOUT, "sanboxd still runs 30 s after it was asked to stop");
	if (json)
		print_stopped_json(live);
	else if (live)
		printf("sanboxd: stopped (%llu live run%s stopped, reason daemon-stop)\n",
		       (unsigned long long)live, live == 1 ? "" : "s");
	else
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
		return stop(json);
	if (!strcmp(argv[1], "start")) {
		if ((rc = cli_connect(1, &c)))
			return cli_fail(rc, "%s", sb_errmsg(rc));
		sb_client_close(c);
		return status(json) == 0 ? 0 : 1;
	}
	return cli_usage("daemon");
}
