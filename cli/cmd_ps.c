/* cmd_ps.c - sanbox ps: list runs, newest first. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/log/summary.h"
#include "engine/payload.h"
#include "projections/views.h"

#define FILTERS_MAX 16

/* A run's row: each field as text (not yet escaped), by field. */
enum field {
	F_ID, F_NAME, F_GROUP, F_TEMPLATE, F_MODEL, F_STATUS, F_AGE, F_ELAPSED,
	F_COST, F_BUDGET, F_LAST, F_OFFSET, F_REASON, F_PROGRESS, F_RUNNER, NFIELDS
};

/* Each field: its --format name, its column's header and width (0: it
 * shares what the fixed columns leave). */
static const struct {
	const char *name, *header;
	int width;
} fields[NFIELDS] = {
	[F_ID] = {"id", "RUN", 12},
	[F_NAME] = {"name", "NAME", 0},
	[F_GROUP] = {"group", "GROUP", 10},
	[F_TEMPLATE] = {"template", "TEMPLATE", 10},
	[F_MODEL] = {"model", "MODEL", 16},
	[F_STATUS] = {"status", "STATUS", 10},
	[F_AGE] = {"age", "AGE", 4},
	[F_ELAPSED] = {"elapsed", "ELAPSED", 7},
	[F_COST] = {"cost", "COST", 9},
	[F_BUDGET] = {"budget", "BUDGET", 9},
	[F_LAST] = {"last", "LAST EVENT", 0},
	[F_OFFSET] = {"offset", "OFFSET", 8},
	[F_REASON] = {"reason", "REASON", 0},
	[F_PROGRESS] = {"progress", "PROGRESS", 0},
	[F_RUNNER] = {"runner", "RUNNER", 10},
};

/* The columns of the table: up to 120 terminal columns, and from there;
 * RUNNER goes before STATUS when a run listed is on another runner than
 * the local one. */
static const enum field narrow[] = {F_ID, F_NAME, F_STATUS, F_AGE, F_ELAPSED, F_COST, F_LAST};
static const enum field wide[] = {F_ID,	  F_NAME,    F_GROUP, F_TEMPLATE, F_MODEL,
				  F_STATUS, F_AGE, F_ELAPSED, F_COST, F_LAST};

/* A run as listed: its state, and the reply's map it was read from. */
struct ps_run {
	struct sb_runstate rs;
	const msgpack_object *obj;
};

struct ps_opts {
	const char *filter[FILTERS_MAX]; /* KEY=VALUE */
	int nfilter;
	enum field format[NFIELDS];
	int nformat; /* 0: the table */
	int quiet, no_trunc, json;
	int all; /* removed runs too */
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Writes field f of rs as text into buf. */
static void field_text(const struct sb_runstate *rs, enum field f, char *buf, size_t cap)
{
	switch (f) {
	case F_ID: snprintf(buf, cap, "%s", rs->run); break;
	case F_NAME: snprintf(buf, cap, "%s", rs->name); break;
	case F_GROUP: snprintf(buf, cap, "%s", rs->group[0] ? rs->group : "-"); break;
	case F_TEMPLATE: snprintf(buf, cap, "%s", rs->template); break;
	case F_MODEL: snprintf(buf, cap, "%s", rs->model[0] ? rs->model : "-"); break;
	case F_STATUS: cli_status(rs, buf, cap); break;
	case F_AGE: cli_age(now_s() - rs->created_ns / 1e9, buf, cap); break;
	case F_ELAPSED: cli_duration(cli_run_elapsed(rs), buf, cap); break;
	case F_COST: sb_usd_format(rs->cost_nusd, buf, cap); break;
	case F_BUDGET: sb_usd_format(rs->budget_nusd, buf, cap); break;
	case F_LAST:
		/* what a failed run's last event cannot say: why */
		snprintf(buf, cap, "%s", !strcmp(rs->status, "failed") && rs->reason[0]
						 ? rs->reason
						 : rs->last_type);
		break;
	case F_OFFSET: snprintf(buf, cap, "%llu", (unsigned long long)rs->last_offset); break;
	case F_REASON: snprintf(buf, cap, "%s", rs->reason); break;
	case F_PROGRESS: cli_progress(rs, buf, cap); break;
	case F_RUNNER:
		snprintf(buf, cap, "%s", rs->runner[0] ? rs->runner : "local");
		break;
	case NFIELDS: buf[0] = 0; break;
	}
}

/* 1 when rs passes every filter of o (checked by ps_parse). */
static int ps_match(const struct ps_opts *o, const struct sb_runstate *rs)
{
	if (rs->removed && !o->all)
		return 0;
	for (int i = 0; i < o->nfilter; i++) {
		const char *f = o->filter[i], *v = strchr(f, '=') + 1;
		size_t k = (size_t)(v - 1 - f);
		if (!strncmp(f, "name", k) ? !strstr(rs->name, v)
		    : !strncmp(f, "status", k) ? strcmp(rs->status, v) &&
						     (!rs->removed || strcmp(v, "removed"))
		    : !strncmp(f, "template", k) ? strcmp(rs->template, v)
						  : strcmp(rs->group, v))
			return 0;
	}
	return 1;
}

/* Prints one row of the columns cols (n): every cell escaped and fit to
 * its column (NAME name_w wide, the last what is left of width), so no
 * name can end the row or forge another; --no-trunc: cells whole. */
static void print_row(const struct ps_opts *o, const enum field *cols, size_t n, int width,
		      int name_w, char text[][512])
{
	int left = width, w;
	char cell[2048];

	for (size_t i = 0; i < n; i++) {
		w = fields[cols[i]].width ? fields[cols[i]].width
		    : cols[i] == F_NAME	  ? name_w
					  : left;
		if (w < 4)
			w = 4;
		left -= w + 1;
		cli_cell(text[i], o->no_trunc ? 0 : w, cell, sizeof cell);
		for (size_t l = strlen(cell); i + 1 == n && l && cell[l - 1] == ' '; l--)
			cell[l - 1] = 0; /* the last is not padded */
		fputs(cell, stdout);
		fputs(i + 1 == n ? "\n" : o->no_trunc ? "\t" : " ", stdout);
	}
}

/* The width of the NAME column of the table cols (n) in width: what the
 * longest name needs, as long as the last column keeps half of what the
 * fixed columns leave (from 10 to 40 columns). */
static int name_width(const struct ps_run *runs, size_t nruns, const enum field *cols, size_t n,
		      int width)
{
	int need = 4, flex = width, keep;

	for (size_t i = 0; i < n; i++)
		flex -= fields[cols[i]].width + 1;
	for (size_t i = 0; i < nruns; i++)
		if ((int)cli_text_cols(runs[i].rs.name) > need)
			need = (int)cli_text_cols(runs[i].rs.name);
	keep = flex / 2 < 10 ? 10 : flex / 2 > 40 ? 40 : flex / 2;
	return need < flex - keep ? need : flex - keep;
}

/* Fills cols with the columns of the runs' table in width (its first n
 * runs listed as o asks); returns how many. */
static size_t table_cols(const struct ps_opts *o, const struct ps_run *runs, size_t n,
			 int width, enum field cols[NFIELDS])
{
	const enum field *base = width >= 120 ? wide : narrow;
	size_t nbase = width >= 120 ? sizeof wide / sizeof wide[0]
				    : sizeof narrow / sizeof narrow[0],
	       k = 0;
	int remote = 0;

	for (size_t i = 0; i < n && !remote; i++)
		remote = ps_match(o, &runs[i].rs) && runs[i].rs.runner[0] &&
			 strcmp(runs[i].rs.runner, "local");
	for (size_t i = 0; i < nbase; i++) {
		if (base[i] == F_STATUS && remote)
			cols[k++] = F_RUNNER;
		cols[k++] = base[i];
	}
	return k;
}

/* Prints the runs (newest first) as o asks. */
static void ps_print(const struct ps_opts *o, const struct ps_run *runs, size_t n)
{
	int width = cli_term_width(), table = !o->nformat, name_w;
	enum field tcols[NFIELDS];
	const enum field *cols = o->nformat ? o->format : tcols;
	size_t ncols =
	    o->nformat ? (size_t)o->nformat : table_cols(o, runs, n, width, tcols);
	char text[NFIELDS][512];

	name_w = name_width(runs, n, cols, ncols, width);
	if (table && !o->quiet) {
		for (size_t c = 0; c < ncols; c++)
			snprintf(text[c], sizeof text[c], "%s", fields[cols[c]].header);
		print_row(o, cols, ncols, width, name_w, text);
	}
	for (size_t i = 0; i < n; i++) {
		const struct sb_runstate *rs = &runs[i].rs;
		if (!ps_match(o, rs))
			continue;
		if (o->quiet) {
			printf("%s\n", rs->run);
			continue;
		}
		for (size_t c = 0; c < ncols; c++)
			field_text(rs, cols[c], text[c], sizeof text[c]);
		if (table) {
			print_row(o, cols, ncols, width, name_w, text);
			continue;
		}
		for (size_t c = 0; c < ncols; c++) {
			char cell[2048];
			cli_cell(text[c], 0, cell, sizeof cell);
			printf("%s%s", cell, c + 1 == ncols ? "\n" : "\t");
		}
	}
}

static int newest_first(const void *a, const void *b)
{
	const struct sb_runstate *x = &((const struct ps_run *)a)->rs,
				 *y = &((const struct ps_run *)b)->rs;

	return x->created_ns < y->created_ns ? 1 : x->created_ns > y->created_ns ? -1
										 : strcmp(x->run, y->run);
}

/* Parses --format's list of field names into o. Returns an exit code. */
static int format_parse(struct ps_opts *o, const char *list)
{
	char name[32];

	for (const char *p = list; *p;) {
		size_t k = strcspn(p, ","), f;
		snprintf(name, sizeof name, "%.*s", (int)(k < 31 ? k : 31), p);
		for (f = 0; f < NFIELDS && strcmp(fields[f].name, name); f++)
			;
		if (f == NFIELDS || o->nformat == NFIELDS)
			return cli_fail_code(CLI_EXIT_USAGE,
					     "--format: no field '%s' (id, name, group, template, "
					     "model, status, age, elapsed, cost, budget, last, "
					     "offset, reason, progress, runner)",
					     name);
		o->format[o->nformat++] = (enum field)f;
		p += k + (p[k] == ',');
	}
	return o->nformat ? CLI_EXIT_OK
			  : cli_fail_code(CLI_EXIT_USAGE, "--format takes a list of fields");
}

/* Checks one --filter KEY=VALUE. Returns an exit code. */
static int filter_add(struct ps_opts *o, const char *f)
{
	static const char *const keys[] = {"status=", "name=", "template=", "group="};
	size_t i;

	for (i = 0; i < 4 && strncmp(f, keys[i], strlen(keys[i])); i++)
		;
	if (i == 4)
		return cli_fail_code(CLI_EXIT_USAGE,
				     "--filter takes status=, name=, template= or group=, not '%s'",
				     f);
	if (o->nfilter == FILTERS_MAX)
		return cli_fail_code(CLI_EXIT_USAGE, "at most %d --filter options", FILTERS_MAX);
	o->filter[o->nfilter++] = f;
	return CLI_EXIT_OK;
}

/* Parses argv into o. Returns CLI_GO_ON, or the exit code (printed). */
static int ps_parse(int argc, char **argv, struct ps_opts *o, const char **group)
{
	static const struct option opts[] = {
		CLI_OPT_HELP,
		{"group", required_argument, NULL, 'g'},
		{"filter", required_argument, NULL, 'f'},
		{"quiet", no_argument, NULL, 'q'},
		{"no-trunc", no_argument, NULL, 'n'},
		{"format", required_argument, NULL, 'F'},
		{"json", no_argument, NULL, 'j'},
		{"all", no_argument, NULL, 'a'},
		{NULL, 0, NULL, 0},
	};
	int ch, rc = CLI_EXIT_OK;

	while (rc == CLI_EXIT_OK && (ch = getopt_long(argc, argv, ":hqaf:", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("ps");
		case 'a': o->all = 1; break;
		case 'g':
			if (!(rc = cli_check_name("--group", optarg)))
				*group = optarg;
			break;
		case 'f': rc = filter_add(o, optarg); break;
		case 'q': o->quiet = 1; break;
		case 'n': o->no_trunc = 1; break;
		case 'F': rc = format_parse(o, optarg); break;
		case 'j': o->json = 1; break;
		default: return cli_badopt("ps", argv, ch);
		}
	}
	if (rc == CLI_EXIT_OK && optind != argc)
		return cli_usage("ps");
	return rc == CLI_EXIT_OK ? CLI_GO_ON : rc;
}

/* Prints runs as JSON: those that pass the filters, newest first, each
 * exact as the daemon sent it. */
static void ps_json(const struct ps_opts *o, const struct ps_run *runs, size_t n)
{
	json_t *list = json_array();

	for (size_t i = 0; list && i < n; i++)
		if (ps_match(o, &runs[i].rs))
			json_array_append_new(list, sb_msgpack_to_json(runs[i].obj));
	cli_print_json(list);
}

int cmd_ps(int argc, char **argv)
{
	struct ps_opts o = {0};
	const char *group = NULL;
	struct cli_req r;
	struct sb_reply rep = {0};
	const msgpack_object *list;
	struct ps_run *runs = NULL;
	size_t n = 0;
	sb_client *c;
	int rc;

	if ((rc = ps_parse(argc, argv, &o, &group)) != CLI_GO_ON)
		return rc;
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	cli_req_begin(&r, "runs.list");
	if (group)
		sb_mapw_str(&r.m, "group", group);
	rc = cli_call(c, &r, &rep);
	list = sb_map_get(&rep.map, "runs");
	if (rc == SB_OK && (!list || list->type != MSGPACK_OBJECT_ARRAY))
		rc = sb_seterr(SB_ERR_PROTO, "malformed reply");
	if (rc == SB_OK && list->via.array.size &&
	    !(runs = calloc(list->via.array.size, sizeof *runs)))
		rc = SB_ERR_NOMEM;
	for (uint32_t i = 0; rc == SB_OK && i < list->via.array.size; i++) {
		runs[n].obj = &list->via.array.ptr[i];
		n += sb_runstate_unpack(runs[n].obj, &runs[n].rs) == SB_OK;
	}
	if (rc) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
		goto out;
	}
	qsort(runs, n, sizeof *runs, newest_first);
	if (o.json)
		ps_json(&o, runs, n);
	else
		ps_print(&o, runs, n);
out:
	free(runs);
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}
