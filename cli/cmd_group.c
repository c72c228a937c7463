/* cmd_group.c - sanbox group: run a group file, list groups, inspect one,
 * stop, resume or fork one. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/groupfile.h"
#include "engine/error.h"
#include "engine/log/summary.h"
#include "engine/payload.h"
#include "projections/views.h"

#define GROUP_NAME_TRIES 99 /* name-2 ... name-99 when a file's name is taken */

int cli_group_create(sb_client *c, const struct cli_group *g, const char *name,
		     struct sb_reply *rep)
{
	struct cli_req r;
	int rc;

	cli_req_begin(&r, "group.create");
	if ((rc = cli_group_pack_create(g, name, &r.m))) {
		msgpack_sbuffer_destroy(&r.buf);
		memset(rep, 0, sizeof *rep);
		return rc;
	}
	return cli_call(c, &r, rep);
}

/* The daemon's error about the group's run i ("runs[2]: ...") at its
 * place in the file; any other as it is. */
static int group_fail(const struct cli_group *g, int rc)
{
	char line[1200];

	if (cli_group_run_error(g, sb_errmsg(rc), line, sizeof line))
		return cli_fail_code(cli_exit_for_request(rc), "%s", line);
	return cli_fail_request(rc);
}

/* Prints the group a group.create or group.fork made (rep: its answer):
 * its name and id, then a line per run, with its name from g (the group
 * file it was run from) when g is not NULL. */
static void group_print(const struct cli_group *g, const struct sb_reply *rep, int json)
{
	const msgpack_object *runs = sb_map_get(&rep->map, "runs");
	uint32_t n = runs && runs->type == MSGPACK_OBJECT_ARRAY ? runs->via.array.size : 0;
	char name[64] = "", id[SB_RUN_MAX] = "", cell[4 * 64 + 1];

	if (json) {
		cli_print_reply(&rep->map);
		return;
	}
	sb_map_str(&rep->map, "group", name, sizeof name);
	sb_map_str(&rep->map, "id", id, sizeof id);
	cli_cell(name, 0, cell, sizeof cell);
	printf("group %s (%s): %zu runs\n", cell, id, g ? g->nruns : n);
	for (uint32_t i = 0; i < n && (!g || i < g->nruns); i++) {
		const msgpack_object *o = &runs->via.array.ptr[i];
		if (o->type != MSGPACK_OBJECT_STR)
			continue;
		if (!g) {
			printf("  %.*s\n", (int)o->via.str.size, o->via.str.ptr);
			continue;
		}
		cli_cell(g->runs[i].spec.name, 0, cell, sizeof cell);
		printf("  %.*s  %s\n", (int)o->via.str.size, o->via.str.ptr, cell);
	}
}

/* Creates g, as name, else (taken, and the name the file's) as name-2,
 * name-3, ... */
static int group_create_named(sb_client *c, struct cli_group *g, const char *name,
			      int chosen, struct sb_reply *rep, char *used, size_t cap)
{
	int rc;

	snprintf(used, cap, "%s", name);
	for (int k = 2; (rc = cli_group_create(c, g, used, rep)) == SB_ERR_EXISTS &&
			!chosen && k <= GROUP_NAME_TRIES &&
			!strncmp(sb_errmsg(rc), "group ", 6);
	     k++) {
		sb_reply_free(rep);
		snprintf(used, cap, "%.55s-%u", name, (unsigned)k % 100u); /* k <= 99 */
	}
	if (rc == SB_OK && strcmp(used, name))
		cli_note("group %s exists: this one is %s", name, used);
	return rc;
}

static int group_run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"name", required_argument, NULL, 'n'},
		{"detach", no_argument, NULL, 'd'},
		{"watch", no_argument, NULL, 'w'},
		{"json", no_argument, NULL, 'j'},
		CLI_OPT_HELP,
		{NULL, 0, NULL, 0},
	};
	const char *name = NULL;
	struct cli_group *g = NULL;
	struct sb_reply rep;
	char used[64];
	sb_client *c;
	int json = 0, detach = 0, watch = 0, ch, rc;

	optind = 0;
	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'n': name = optarg; break;
		case 'd': detach = 1; break;
		case 'w': watch = 1; break;
		case 'j': json = 1; break;
		case 'h': return cli_help("group");
		default: return cli_badopt("group", argv, ch);
		}
	}
	if (optind != argc - 1 || (watch && (detach || json)))
		return cli_usage("group");
	if (name && (rc = cli_check_name("--name", name)))
		return rc;
	if ((rc = cli_group_load(argv[optind], &g)))
		return cli_fail_code(rc == SB_ERR_NOTFOUND ? CLI_EXIT_NOTFOUND : CLI_EXIT_USAGE,
				     "%s", sb_errmsg(rc));
	if ((rc = cli_connect(1, &c))) {
		cli_group_free(g);
		return cli_fail(rc, "%s", sb_errmsg(rc));
	}
	rc = group_create_named(c, g, name ? name : g->name, name != NULL, &rep, used,
				sizeof used);
	if (rc == SB_OK) {
		group_print(g, &rep, json);
		sb_reply_free(&rep);
		if (watch) { /* the live view of the group */
			char *wargv[] = {"watch", used, NULL};
			optind = 0;
			rc = cmd_watch(2, wargv);
		} else if (!detach) { /* as sanbox wait --group does */
			char *wargv[] = {"wait", "--group", used, json ? "--json" : NULL, NULL};
			optind = 0;
			rc = cmd_wait(json ? 4 : 3, wargv);
		}
	} else {
		rc = group_fail(g, rc);
	}
	sb_client_close(c);
	cli_group_free(g);
	return rc;
}

/* Sends group.fork of src as name; *rep holds the answer. */
static int group_fork_as(sb_client *c, const char *src, const char *name,
			 struct sb_reply *rep)
{
	struct cli_req r;

	cli_req_begin(&r, "group.fork");
	sb_mapw_str(&r.m, "group", src);
	sb_mapw_str(&r.m, "name", name);
	return cli_call(c, &r, rep);
}

/* group fork SRC [--name NAME] [--detach] [--json]: every run of SRC from
 * its newest snapshot, as a new group (default SRC-fork, then -fork-2...). */
static int group_fork(int argc, char **argv)
{
	static const struct option opts[] = {
		{"name", required_argument, NULL, 'n'},
		{"detach", no_argument, NULL, 'd'},
		{"json", no_argument, NULL, 'j'},
		CLI_OPT_HELP,
		{NULL, 0, NULL, 0},
	};
	const char *name = NULL;
	struct sb_reply rep;
	char used[64];
	sb_client *c;
	int json = 0, detach = 0, ch, rc;

	optind = 0;
	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'n': name = optarg; break;
		case 'd': detach = 1; break;
		case 'j': json = 1; break;
		case 'h': return cli_help("group");
		default: return cli_badopt("group", argv, ch);
		}
	}
	if (optind != argc - 1)
		return cli_usage("group");
	if (name && (rc = cli_check_name("--name", name)))
		return rc;
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	snprintf(used, sizeof used, "%s", name ? name : "");
	if (!name)
		snprintf(used, sizeof used, "%.50s-fork", argv[optind]);
	for (unsigned k = 2; (rc = group_fork_as(c, argv[optind], used, &rep)) == SB_ERR_EXISTS &&
			     !name && k <= GROUP_NAME_TRIES && !strncmp(sb_errmsg(rc), "group ", 6);
	     k++) {
		sb_reply_free(&rep);
		snprintf(used, sizeof used, "%.50s-fork-%u", argv[optind], k % 100u);
	}
	if (rc == SB_OK) {
		group_print(NULL, &rep, json);
		if (!detach && !json) {
			char *wargv[] = {"wait", "--group", used, NULL};
			optind = 0;
			rc = cmd_wait(3, wargv);
		}
	} else {
		rc = cli_fail_request(rc);
	}
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

/* "3 live, 1 queued, 2 done, 1 failed" of a group.get/groups.list item. */
static void counts_text(const msgpack_object *item, char *buf, size_t cap)
{
	const msgpack_object *n = sb_map_get(item, "counts");

	snprintf(buf, cap, "%llu live, %llu queued, %llu done, %llu failed",
		 (unsigned long long)sb_map_u64(n, "live", 0),
		 (unsigned long long)sb_map_u64(n, "queued", 0),
		 (unsigned long long)sb_map_u64(n, "done", 0),
		 (unsigned long long)sb_map_u64(n, "failed", 0));
}

/* "$0.0123 of $2.00" (no budget: the cost alone). */
static void cost_text(const msgpack_object *item, char *buf, size_t cap)
{
	const msgpack_object *gr = sb_map_get(item, "group");
	uint64_t budget = sb_map_u64(gr, "budget_nusd", 0);
	char a[32], b[32];

	sb_usd_format(sb_map_u64(sb_map_get(item, "cost"), "cost_nusd", 0), a, sizeof a);
	sb_usd_format(budget, b, sizeof b);
	if (budget)
		snprintf(buf, cap, "%s of %s", a, b);
	else
		snprintf(buf, cap, "%s", a);
}

static int group_ls(char **args, int json)
{
	const msgpack_object *list;
	struct cli_req r;
	struct sb_reply rep;
	char name[64], cell[4 * 24 + 1], counts[128], cost[80];
	sb_client *c;
	int rc;

	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	cli_req_begin(&r, "groups.list");
	if ((rc = cli_call(c, &r, &rep))) {
		rc = cli_fail_request(rc);
		goto out;
	}
	list = sb_map_get(&rep.map, "groups");
	if (json) {
		cli_print_json(list ? sb_msgpack_to_json(list) : json_array());
		goto out;
	}
	printf("%-24s %5s  %-44s %s\n", "GROUP", "RUNS", "STATUS", "COST");
	for (uint32_t i = 0; list && list->type == MSGPACK_OBJECT_ARRAY &&
			     i < list->via.array.size;
	     i++) {
		const msgpack_object *it = &list->via.array.ptr[i];
		const msgpack_object *gr = sb_map_get(it, "group");
		name[0] = 0;
		sb_map_str(gr, "name", name, sizeof name);
		cli_cell(name, 24, cell, sizeof cell);
		counts_text(it, counts, sizeof counts);
		cost_text(it, cost, sizeof cost);
		printf("%s %5llu  %-44s %s\n", cell, (unsigned long long)sb_map_u64(gr, "runs", 0),
		       counts, cost);
	}
out:
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

/* One run's row of group inspect: status, progress, cost against its
 * budget, elapsed time, last event. */
static void run_row(const msgpack_object *map)
{
	struct sb_runstate rs;
	char status[32], progress[96], elapsed[32], cname[4 * 22 + 1], cstatus[4 * 10 + 1];
	char cprog[4 * 24 + 1], clast[4 * 22 + 1], cost[32], budget[32];

	if (sb_runstate_unpack(map, &rs))
		return;
	snprintf(status, sizeof status, "%s", rs.status);
	if (!strcmp(rs.status, "exited"))
		snprintf(status, sizeof status, "exited %lld", (long long)rs.exit_status);
	cli_progress(&rs, progress, sizeof progress);
	cli_duration(cli_run_elapsed(&rs), elapsed, sizeof elapsed);
	cli_cell(rs.name, 22, cname, sizeof cname);
	cli_cell(status, 10, cstatus, sizeof cstatus);
	cli_cell(progress, 24, cprog, sizeof cprog);
	cli_cell(rs.last_type, 22, clast, sizeof clast);
	sb_usd_format(rs.cost_nusd, cost, sizeof cost);
	sb_usd_format(rs.budget_nusd, budget, sizeof budget);
	printf("  %-12s %s %s %s %9s of %-8s %7s  %s\n", rs.run, cname, cstatus, cprog, cost,
	       budget, elapsed, clast);
}

static int group_inspect(char **args, int json)
{
	const msgpack_object *item, *gr, *runs;
	struct cli_req r;
	struct sb_reply rep;
	char name[64] = "", id[SB_RUN_MAX] = "", goal[4096] = "", when[32] = "";
	char cell[4 * 4096 + 1], counts[128], cost[80];
	sb_client *c;
	time_t t;
	int rc;

	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	cli_req_begin(&r, "group.get");
	sb_mapw_str(&r.m, "group", args[0]);
	if ((rc = cli_call(c, &r, &rep))) {
		rc = cli_fail_request(rc);
		goto out;
	}
	if (json) {
		cli_print_reply(&rep.map);
		goto out;
	}
	item = sb_map_get(&rep.map, "group");
	gr = sb_map_get(item, "group");
	runs = sb_map_get(&rep.map, "runs");
	sb_map_str(gr, "name", name, sizeof name);
	sb_map_str(gr, "id", id, sizeof id);
	sb_map_str(gr, "goal", goal, sizeof goal);
	t = (time_t)(sb_map_u64(gr, "created_ns", 0) / 1000000000u);
	strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&t));
	cli_cell(name, 0, cell, sizeof cell);
	printf("group    %s%s%s\n", cell, id[0] ? "  " : "", id);
	if (goal[0]) {
		cli_cell(goal, 0, cell, sizeof cell);
		printf("goal     %s\n", cell);
	}
	printf("created  %s\n", when);
	counts_text(item, counts, sizeof counts);
	cost_text(item, cost, sizeof cost);
	printf("runs     %s\ncost     %s\n", counts, cost);
	printf("tokens   %llu input, %llu output, %llu cached, in %llu calls\n\n",
	       (unsigned long long)sb_map_u64(sb_map_get(item, "cost"), "input_tokens", 0),
	       (unsigned long long)sb_map_u64(sb_map_get(item, "cost"), "output_tokens", 0),
	       (unsigned long long)sb_map_u64(sb_map_get(item, "cost"), "cached_tokens", 0),
	       (unsigned long long)sb_map_u64(sb_map_get(item, "cost"), "calls", 0));
	for (uint32_t i = 0; runs && runs->type == MSGPACK_OBJECT_ARRAY &&
			     i < runs->via.array.size;
	     i++)
		run_row(&runs->via.array.ptr[i]);
out:
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

/* Resumes every ended run of group name from its last snapshot (a run
 * with none is told and left). */
static int group_resume(char **args, int json)
{
	const msgpack_object *runs;
	struct cli_req r;
	struct sb_reply rep, one;
	sb_client *c;
	unsigned resumed = 0, failed = 0;
	int rc;

	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	cli_req_begin(&r, "group.get");
	sb_mapw_str(&r.m, "group", args[0]);
	if ((rc = cli_call(c, &r, &rep))) {
		rc = cli_fail_request(rc);
		goto out;
	}
	runs = sb_map_get(&rep.map, "runs");
	for (uint32_t i = 0; runs && runs->type == MSGPACK_OBJECT_ARRAY &&
			     i < runs->via.array.size;
	     i++) {
		const msgpack_object *st = &runs->via.array.ptr[i];
		char id[SB_RUN_MAX] = "", status[16] = "";
		sb_map_str(st, "run", id, sizeof id);
		sb_map_str(st, "status", status, sizeof status);
		if (!strcmp(status, "created") || !strcmp(status, "queued") ||
		    !strcmp(status, "running"))
			continue;
		cli_req_begin(&r, "run.resume");
		sb_mapw_str(&r.m, "run", id);
		if ((rc = cli_call(c, &r, &one))) {
			cli_note("run %s not resumed: %s", id, sb_errmsg(rc));
			failed++;
		} else {
			printf("%s resumed\n", id);
			resumed++;
		}
		sb_reply_free(&one);
	}
	rc = failed ? CLI_EXIT_ERROR : CLI_EXIT_OK;
	if (!resumed && !failed)
		printf("group %s has no ended runs\n", args[0]);
out:
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

static int group_stop(char **args, int json)
{
	char *argv[] = {"stop", "--group", args[0], NULL};

	return cmd_stop(3, argv);
}

int cmd_group(int argc, char **argv)
{
	static const struct cli_sub subs[] = {
		{"ls", 0, 0, 1, group_ls},
		{"inspect", 1, 0, 1, group_inspect},
		{"stop", 1, 0, 0, group_stop},
		{"resume", 1, 0, 0, group_resume},
	};

	if (argc >= 2 && !strcmp(argv[1], "run"))
		return group_run(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "fork"))
		return group_fork(argc - 1, argv + 1);
	return cli_sub_run(argc, argv, "group", subs, sizeof subs / sizeof subs[0]);
}
