/* cmd_export.c - sanbox export: a run's or a group's audit bundle. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/audit.h"
#include "cli/cli.h"
#include "engine/error.h"

#define REDACT_MAX 64

struct export_opts {
	const char *group, *out, *prior;
	const char *redact[REDACT_MAX];
	size_t nredact;
	int dir, json;
};

static int export_parse(int argc, char **argv, struct export_opts *o)
{
	static const struct option opts[] = {
		CLI_OPT_HELP,
		{"group", required_argument, NULL, 'g'}, {"redact", required_argument, NULL, 'r'},
		{"dir", no_argument, NULL, 'd'},         {"prior", required_argument, NULL, 'p'},
		{"json", no_argument, NULL, 'j'},        {"output", required_argument, NULL, 'o'},
		{NULL, 0, NULL, 0},
	};
	int ch;

	while ((ch = getopt_long(argc, argv, ":ho:", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help(argv[0]);
		case 'g': o->group = optarg; break;
		case 'r':
			if (o->nredact == REDACT_MAX)
				return cli_fail_code(CLI_EXIT_USAGE, "at most %d --redact options", REDACT_MAX);
			o->redact[o->nredact++] = optarg;
			break;
		case 'd': o->dir = 1; break;
		case 'p': o->prior = optarg; break;
		case 'j': o->json = 1; break;
		case 'o': o->out = optarg; break;
		default: return cli_badopt(argv[0], argv, ch);
		}
	}
	if (!o->out || (!!o->group == (optind < argc)) || argc - optind > 1)
		return cli_usage(argv[0]);
	return CLI_GO_ON;
}

/* Prints what the bundle holds. */
static void export_report(const char *out, const struct sb_bundle_info *in, int json)
{
	char root[2 * SB_MERKLE_HASH + 1];

	for (int i = 0; i < SB_MERKLE_HASH; i++)
		snprintf(root + 2 * i, 3, "%02x", in->root[i]);
	if (json) {
		cli_print_json(json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:s}", "bundle", out, "runs",
					 (json_int_t)in->runs, "events", (json_int_t)in->events,
					 "redacted", (json_int_t)in->redacted, "blobs",
					 (json_int_t)in->blobs, "tree_size", (json_int_t)in->tree_size,
					 "root", root));
		return;
	}
	printf("%s: %llu events of %llu run%s (%llu redacted), %llu blobs; tree %llu, root %s\n",
	       out, (unsigned long long)in->events, (unsigned long long)in->runs,
	       in->runs == 1 ? "" : "s", (unsigned long long)in->redacted,
	       (unsigned long long)in->blobs, (unsigned long long)in->tree_size, root);
	if (in->prior_differs)
		cli_note("the prior checkpoint's root is not this log's at its size %llu: verify will refuse it",
			 (unsigned long long)in->prior_size);
}

/* Exports the runs the options name (only: a one-event proof of that
 * offset); shared with prove. */
int cli_export_run(const char *want, const char *group, const char *const *redact,
		   size_t nredact, uint64_t only, const char *prior, const char *out, int dir,
		   int json)
{
	static char ids[SB_BUNDLE_RUNS_MAX][SB_RUN_MAX];
	static const char *ptrs[SB_BUNDLE_RUNS_MAX];
	struct sb_export x = {.group = group, .redact = redact, .nredact = nredact,
			      .only = only, .wait_ms = 5000};
	struct sb_bundle_info info;
	struct sb_note_key key;
	char *note = NULL;
	sb_client *c;
	int rc;

	if ((rc = cli_local_only("export")))
		return rc;
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	rc = cli_audit_runs(c, want, group, ids, ptrs, &x);
	sb_client_close(c);
	if (rc)
		goto out;
	if ((rc = sb_key_load(cli_home, 1, &key))) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
		goto out;
	}
	x.key = &key;
	if (prior && (rc = cli_audit_checkpoint(prior, &note, &x.prior_len))) {
		rc = cli_fail(rc, "--prior: %s", sb_errmsg(rc));
		goto out;
	}
	x.prior = note;
	if (!(rc = cli_audit_write(&x, out, dir, &info)))
		export_report(out, &info, json);
out:
	free(note);
	json_decref(x.runinfo);
	return rc;
}

int cmd_export(int argc, char **argv)
{
	struct export_opts o = {0};
	int rc;

	if ((rc = export_parse(argc, argv, &o)) != CLI_GO_ON)
		return rc;
	return cli_export_run(o.group ? NULL : argv[optind], o.group, o.redact, o.nredact, 0,
			      o.prior, o.out, o.dir, o.json);
}
