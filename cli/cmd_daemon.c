/* cmd_daemon.c - sanbox daemon start|stop|status. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"

#define STATUS_WAIT_MS 2000 /* how long health may take before "not answering" */

/* Prints the answer of a daemon that answered health: rep is its reply. */
static void print_running(const struct sb_reply *rep, int json)
{
	const char *where = cli_remote ? cli_remote : cli_home;
	const msgpack_object *last = sb_map_get(&rep->map, "last_offset");
	char events[4 * 256 + 32], err[256], cell[4 * 256 + 1];

	if (json) {
		json_t *j = sb_msgpack_to_json(&rep->map);
		json_object_del(j, "ok");
		json_object_set_new(j, "state", json_string("running"));
		json_object_set_new(j, "running", json_true());
		/* "url", not "remote": health's "remote" holds the counters */
		json_object_set_new(j, cli_remote ? "url" : "home", json_string(where));
		cli_print_json(j);
		return;
	}
	if (last && last->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
		snprintf(events, sizeof events, "%llu events", (unsigned long long)last->via.u64);
	} else { /* not 0 events: the daemon cannot read its log */
		if (sb_map_str(&rep->map, "log_error", err, sizeof err) < 0)
			err[0] = 0;
		cli_cell(err, 0, cell, sizeof cell);
		snprintf(events, sizeof events, "log unreadable: %s", cell);
	}
	printf("sanboxd: running %s %s (pid %llu%s, up %llus, %s)\n", cli_remote ? "at" : "for",
	       where, (unsigned long long)sb_map_u64(&rep->map, "pid", 0),
	       cli_remote ? " on its host" : "", (unsigned long long)sb_map_u64(&rep->map, "uptime_s", 0),
	       events);
}

/* Prints a daemon that is not running, or (silent) one that does not
 * answer: pid holds the lock (0: not known), detail says why (or NULL). */
static void print_down(int silent, int pid, const char *detail, int json)
{
	const char *where = cli_remote ? cli_remote : cli_home;
	char w[4 * 4096 + 1], d[4 * 4096 + 1];

	if (json) {
		/* running: a process holds the lock here; of a remote one nothing is known */
		json_t *j = json_pack("{s:s, s:b, s:s}", "state", silent ? "not-answering" : "not-running",
				      "running", silent && !cli_remote, cli_remote ? "url" : "home",
				      where);
		if (pid)
			json_object_set_new(j, "pid", json_integer(pid));
		if (detail)
			json_object_set_new(j, "error", json_string(detail));
		cli_print_json(j);
		return;
	}
	cli_cell(where, 0, w, sizeof w); /* a url or home may hold anything */
	cli_cell(detail ? detail : "", 0, d, sizeof d);
	if (!silent)
		printf("sanboxd: not running for %s\n", w);
	else if (cli_remote)
		printf("sanboxd: not answering: %s\n", d); /* the detail names the url */
	else
		printf("sanboxd: running but not answering for %s (pid %d); see %s/sanboxd.log\n", w,
		       pid, w);
}

/* Asks c for health and prints it; returns the exit code. */
static int status_of(sb_client *c, int json)
{
	struct cli_req r;
	struct sb_reply rep;
	int rc;

	cli_req_begin(&r, "health");
	if ((rc = cli_call(c, &r, &rep)) == SB_OK)
		print_running(&rep, json);
	else
		print_down(1, 0, sb_errmsg(rc), json);
	sb_reply_free(&rep);
	return rc ? CLI_EXIT_UNAVAIL : CLI_EXIT_OK;
}

static int daemon_status(char **args, int json)
{
	sb_client *c;
	int pid, rc;

	if (cli_remote) {
		if ((rc = cli_connect(0, &c))) {
			print_down(1, 0, sb_errmsg(rc), json);
			return CLI_EXIT_UNAVAIL;
		}
	} else {
		switch (cli_daemon_find(STATUS_WAIT_MS, &c, &pid)) {
		case CLI_DAEMON_ANSWERS: break;
		case CLI_DAEMON_SILENT: print_down(1, pid, NULL, json); return CLI_EXIT_UNAVAIL;
		case CLI_DAEMON_ABSENT: print_down(0, 0, NULL, json); return CLI_EXIT_UNAVAIL;
		}
	}
	rc = status_of(c, json);
	sb_client_close(c);
	return rc;
}

static int daemon_start(char **args, int json)
{
	sb_client *c;
	int rc;

	if (cli_remote)
		return cli_fail_code(CLI_EXIT_USAGE, "a remote daemon is started on its host");
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	rc = status_of(c, json);
	sb_client_close(c);
	return rc;
}

/* The answer of daemon stop --json. */
static void print_stopped_json(uint64_t live)
{
	cli_print_json(json_pack("{s:s, s:b, s:s, s:I}", "state", "not-running", "running", 0, "home",
				 cli_home, "runs_stopped", (json_int_t)live));
}

static int daemon_stop(char **args, int json)
{
	struct cli_req r;
	struct sb_reply rep;
	sb_client *c;
	uint64_t live = 0;
	int pid, rc;

	if (cli_remote)
		return cli_fail_code(CLI_EXIT_USAGE, "a remote daemon is stopped on its host");
	switch (cli_daemon_find(CLI_START_WAIT_MS, &c, &pid)) {
	case CLI_DAEMON_ANSWERS: break;
	case CLI_DAEMON_SILENT: /* there, but it cannot be asked to stop */
		rc = cli_daemon_silent(pid);
		return cli_fail(rc, "%s", sb_errmsg(rc));
	case CLI_DAEMON_ABSENT:
		if (json)
			print_stopped_json(0);
		else
			printf("sanboxd: not running\n");
		return CLI_EXIT_OK;
	}
	cli_req_begin(&r, "daemon.stop");
	rc = cli_call(c, &r, &rep);
	if (rc == SB_OK)
		live = sb_map_u64(&rep.map, "runs_stopped", 0);
	sb_reply_free(&rep);
	sb_client_close(c);
	/* wait until it has exited, so a following start does not race it; a
	 * failed call (it is stopping already, or it ended before its reply
	 * was sent) counts as asked when the process ends */
	if (!cli_daemon_wait_gone(30000))
		return rc ? cli_fail(rc, "%s", sb_errmsg(rc))
			  : cli_fail(SB_ERR_TIMEOUT, "sanboxd still runs 30 s after it was asked to stop");
	if (json)
		print_stopped_json(live);
	else if (live)
		printf("sanboxd: stopped (%llu live run%s stopped, reason daemon-stop)\n",
		       (unsigned long long)live, live == 1 ? "" : "s");
	else
		printf("sanboxd: stopped\n");
	return CLI_EXIT_OK;
}

int cmd_daemon(int argc, char **argv)
{
	static const struct cli_sub subs[] = {
		{"start", 0, 0, 1, daemon_start},
		{"stop", 0, 0, 1, daemon_stop},
		{"status", 0, 0, 1, daemon_status},
	};

	return cli_sub_run(argc, argv, "daemon", subs, sizeof subs / sizeof subs[0]);
}
