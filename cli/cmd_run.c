/* cmd_run.c - sanbox run: resolve a run, start it, and follow it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/runspec.h"
#include "engine/error.h"
#include "engine/payload.h"
#include "netpolicy/netpolicy.h"
#include "projections/views.h"

/* What the options say. */
struct run_opts {
	struct cli_run_spec spec; /* its strings point into argv and policy */
	char *prompt;		  /* the prompt's words joined (the caller frees) */
	char **words; /* the prompt's words, in argv order (an array the caller frees) */
	int nwords;
	char **cmd; /* the command after --, in argv, or NULL */
	int ncmd;
	int detach, json;
	json_t *policy; /* --policy FILE, whose strings the lists point into */
};

static int list_add(struct cli_strs *l, const char *s, const char *what)
{
	if (cli_strs_add(l, s))
		return cli_fail_code(CLI_EXIT_USAGE, "at most %d %s options",
				     CLI_SPEC_LIST_MAX, what);
	return CLI_EXIT_OK;
}

/* Reads the policy file path ({"network": MODE, "allow": [GRANT...]})
 * into o->policy. Returns an exit code (a bad file: usage). */
static int policy_load(const char *path, struct run_opts *o)
{
	static const char *const keys[] = {"network", "allow"};
	json_error_t je;
	const char *k;
	json_t *v, *a;
	size_t i;

	if (!(o->policy = json_load_file(path, JSON_REJECT_DUPLICATES, &je)))
		return cli_fail_code(je.line < 0 ? CLI_EXIT_NOTFOUND : CLI_EXIT_USAGE,
				     "policy %s: %s", path, je.text);
	if (!json_is_object(o->policy))
		return cli_fail_code(CLI_EXIT_USAGE, "policy %s: not a JSON object", path);
	json_object_foreach(o->policy, k, v)
	{
		if (strcmp(k, keys[0]) && strcmp(k, keys[1]))
			return cli_fail_code(CLI_EXIT_USAGE,
					     "policy %s: unknown key '%s' (it takes network and "
					     "allow)",
					     path, k);
	}
	v = json_object_get(o->policy, "network");
	if (v && !json_is_string(v))
		return cli_fail_code(CLI_EXIT_USAGE, "policy %s: network must be a string", path);
	v = json_object_get(o->policy, "allow");
	if (v && !json_is_array(v))
		return cli_fail_code(CLI_EXIT_USAGE, "policy %s: allow must be an array", path);
	json_array_foreach(v, i, a)
	{
		if (!json_is_string(a))
			return cli_fail_code(CLI_EXIT_USAGE,
					     "policy %s: allow holds a grant that is not a string",
					     path);
	}
	return CLI_EXIT_OK;
}

/* 1 when grant text a and b parse to the same grant. */
static int grants_same(const char *a, const char *b)
{
	struct sb_net_grant x, y;

	return sb_net_grant_parse(a, strlen(a), &x) == SB_OK &&
	       sb_net_grant_parse(b, strlen(b), &y) == SB_OK && sb_net_grant_equal(&x, &y);
}

/* The policy file under the options: its network unless --net says one,
 * its grants before --allow's (a grant both give is sent once). */
static int policy_merge(struct run_opts *o)
{
	json_t *grants = json_object_get(o->policy, "allow"), *g;
	struct cli_strs all = {{0}, 0};
	size_t i, from;
	int rc = CLI_EXIT_OK;

	if (!o->spec.net && json_object_get(o->policy, "network"))
		o->spec.net = json_string_value(json_object_get(o->policy, "network"));
	json_array_foreach(grants, i, g)
	{
		if ((rc = list_add(&all, json_string_value(g), "grants")))
			return rc;
	}
	from = (size_t)all.n;
	for (int k = 0; k < o->spec.allow.n && rc == CLI_EXIT_OK; k++) {
		size_t j;
		for (j = 0; j < from && !grants_same(all.v[j], o->spec.allow.v[k]); j++)
			;
		if (j == from)
			rc = list_add(&all, o->spec.allow.v[k], "grants");
	}
	o->spec.allow = all;
	return rc;
}

/* 1 when a one-word prompt w reads as a command: a path, or the name of a
 * program on the host's PATH ("ls", "make"). */
static int looks_like_command(const char *w)
{
	const char *path = getenv("PATH");
	char buf[4096];

	if (strchr(w, '/'))
		return access(w, X_OK) == 0 || w[0] == '/' || !strncmp(w, "./", 2);
	if (!*w || strchr(w, ' '))
		return 0;
	for (const char *p = path ? path : ""; *p;) {
		size_t n = strcspn(p, ":");
		if (n && (size_t)snprintf(buf, sizeof buf, "%.*s/%s", (int)n, p, w) < sizeof buf &&
		    access(buf, X_OK) == 0)
			return 1;
		p += n + (p[n] == ':');
	}
	return 0;
}

/* The exit code for rc, the result of parsing the value of option opt:
 * CLI_EXIT_USAGE (printed, with the parser's detail) for an error. */
static int opt_value(const char *opt, int rc)
{
	return rc ? cli_fail_code(CLI_EXIT_USAGE, "%s: %s", opt, sb_errmsg(rc)) : CLI_EXIT_OK;
}

/* Parses the options of argv into o (its prompt's words, or the command
 * after --); returns CLI_GO_ON, or the exit code (help or a usage error,
 * printed). */
static int parse_opts(int argc, char **argv, struct run_opts *o)
{
	static const struct option opts[] = {
		CLI_OPT_HELP,
		{"template", required_argument, NULL, 't'}, {"cpu", required_argument, NULL, 'c'},
		{"memory", required_argument, NULL, 'M'},   {"timeout", required_argument, NULL, 'T'},
		{"input", required_argument, NULL, 'i'},    {"env", required_argument, NULL, 'e'},
		{"name", required_argument, NULL, 'n'},     {"group", required_argument, NULL, 'g'},
		{"model", required_argument, NULL, 'm'},    {"budget", required_argument, NULL, 'b'},
		{"secret", required_argument, NULL, 's'},   {"accel", required_argument, NULL, 'a'},
		{"on-budget", required_argument, NULL, 'o'}, {"net", required_argument, NULL, 'N'},
		{"allow", required_argument, NULL, 'A'},    {"record-quota", required_argument, NULL, 'Q'},
		{"detach", no_argument, NULL, 'd'},         {"json", no_argument, NULL, 'j'},
		{"snapshots", required_argument, NULL, 'S'},
		{"runner", required_argument, NULL, 'R'},
		{"policy", required_argument, NULL, 'P'},
		{NULL, 0, NULL, 0},
	};
	struct cli_run_spec *sp = &o->spec;
	int ch, rc = CLI_EXIT_OK;

	sp->tmpl = "shell";
	if (!(o->words = calloc((size_t)argc, sizeof *o->words)))
		return cli_fail(SB_ERR_NOMEM, "out of memory");
	/* '-': options anywhere before --, each word of a prompt returned in
	 * order (as 1); -- ends the options, and a command follows it */
	while (rc == CLI_EXIT_OK && (ch = getopt_long(argc, argv, "-:ht:m:", opts, NULL)) != -1) {
		switch (ch) {
		case 1: o->words[o->nwords++] = optarg; break;
		case 'h': return cli_help("run");
		case 't': sp->tmpl = optarg; break;
		case 'c':
			rc = cli_parse_u64("--cpu", optarg, 1, CLI_SPEC_CPUS_MAX, &sp->cpus);
			break;
		case 'M': rc = opt_value("--memory", cli_parse_size_mib(optarg, &sp->mem)); break;
		case 'Q':
			rc = opt_value("--record-quota",
				       cli_parse_size(optarg, 1, CLI_SPEC_QUOTA_MAX, &sp->quota));
			break;
		case 'T':
			rc = opt_value("--timeout", cli_parse_duration(optarg, &sp->timeout));
			break;
		case 'b': rc = opt_value("--budget", cli_parse_usd(optarg, &sp->budget)); break;
		case 'o':
			rc = opt_value("--on-budget", cli_spec_check_on_budget(optarg));
			sp->on_budget = optarg;
			break;
		case 'i': rc = list_add(&sp->inputs, optarg, "--input"); break;
		case 'e':
			if (!(rc = opt_value("--env", cli_spec_check_env(optarg))))
				rc = list_add(&sp->env, optarg, "--env");
			break;
		case 's': rc = list_add(&sp->secrets, optarg, "--secret"); break;
		case 'n':
			if (!(rc = cli_check_name("--name", optarg)))
				sp->name = optarg;
			break;
		case 'g':
			if (!(rc = cli_check_name("--group", optarg)))
				sp->group = optarg;
			break;
		case 'm': rc = list_add(&sp->models, optarg, "--model"); break;
		case 'a': sp->accel = optarg; break;
		case 'S':
			rc = opt_value("--snapshots", cli_spec_check_snapshots(optarg));
			sp->snapshots = optarg;
			break;
		case 'R':
			if (!(rc = cli_check_name("--runner", optarg)))
				sp->runner = optarg;
			break;
		case 'N': sp->net = optarg; break;
		case 'A': rc = list_add(&sp->allow, optarg, "--allow"); break;
		case 'P':
			if (o->policy)
				return cli_fail_code(CLI_EXIT_USAGE, "--policy is given once");
			rc = policy_load(optarg, o);
			break;
		case 'd': o->detach = 1; break;
		case 'j': o->json = 1; break;
		default: return cli_badopt("run", argv, ch);
		}
	}
	if (rc != CLI_EXIT_OK)
		return rc;
	if (o->policy && (rc = policy_merge(o)))
		return rc;
	o->cmd = optind < argc ? argv + optind : NULL;
	o->ncmd = argc - optind;
	if (o->cmd && o->nwords)
		return cli_fail_code(CLI_EXIT_USAGE, "give a prompt or a command after --, not "
						     "both ('%s' comes before --)",
				     o->words[0]);
	if (!o->cmd && !o->nwords)
		return cli_fail_code(CLI_EXIT_USAGE,
				     "give a command after -- or a prompt (see 'sanbox help run')");
	if (o->nwords == 1 && looks_like_command(o->words[0]))
		cli_note("'%s' is taken as a prompt for the agent; to run it as a command, "
			 "put it after --: sanbox run -- %s",
			 o->words[0], o->words[0]);
	return CLI_GO_ON;
}

/* Sets the spec's command, or its prompt: the prompt's words joined by
 * single spaces. Returns an exit code. */
static int spec_words(struct run_opts *o)
{
	size_t len = 1;

	o->spec.argv = (const char *const *)o->cmd;
	o->spec.argc = o->cmd ? o->ncmd : 0;
	for (int i = 0; i < o->nwords; i++)
		len += strlen(o->words[i]) + 1;
	if (!(o->prompt = calloc(1, len)))
		return cli_fail(SB_ERR_NOMEM, "out of memory");
	for (int i = 0; i < o->nwords; i++) {
		strcat(o->prompt, o->words[i]);
		if (i + 1 < o->nwords)
			strcat(o->prompt, " ");
	}
	o->spec.prompt = o->prompt;
	return CLI_EXIT_OK;
}

/* Packs the run.create request for the spec of o, with the contents of
 * the inputs in. Errors: as cli_spec_pack. */
static int pack_request(struct cli_req *r, const struct run_opts *o, const struct cli_input *in)
{
	cli_req_begin(r, "run.create");
	return cli_spec_pack(sb_mapw_key(&r->m, "spec"), &o->spec, in);
}

struct run_ctx {
	int json;
	uint64_t resumed; /* the run's last run.resumed: stops before it do not end it */
	int64_t exit_status;
	int has_exit;
	char reason[128]; /* run.stopped's */
	char failure[512]; /* run.failed's reason */
};

static int run_cb(void *vctx, const struct sb_event *ev, const msgpack_object *p)
{
	struct run_ctx *c = vctx;

	cli_print_event(ev, p, c->json ? CLI_EV_JSON : 0);
	if (ev->offset <= c->resumed)
		return 0; /* an end the run went on from */
	if (!strcmp(ev->type, "run.failed")) {
		sb_map_str(p, "reason", c->failure, sizeof c->failure);
	} else if (!strcmp(ev->type, "run.exited")) {
		c->exit_status = sb_map_i64(p, "status", 1);
		c->has_exit = 1;
	} else if (!strcmp(ev->type, "run.stopped")) {
		sb_map_str(p, "reason", c->reason, sizeof c->reason);
		return 1;
	}
	return 0;
}

/* The exit code of a run that ended as c says; with say, prints the line
 * a failure, a budget stop or a daemon's stop gets. */
static int run_exit(const char *run, const struct run_ctx *c, int say)
{
	if (!strcmp(c->reason, "timeout"))
		return CLI_EXIT_TIMEOUT;
	if (!strcmp(c->reason, "failed"))
		return !say ? CLI_EXIT_RUNFAIL
			    : cli_fail_code(CLI_EXIT_RUNFAIL, "run %s failed: %s", run,
					    c->failure[0] ? c->failure : "see its events");
	if (!strcmp(c->reason, "budget"))
		return !say ? CLI_EXIT_BUDGET
			    : cli_fail_code(CLI_EXIT_BUDGET,
					    "run %s stopped: its LLM budget is spent", run);
	if (say && !strcmp(c->reason, "daemon-stop"))
		cli_note("run %s stopped: sanboxd was stopped", run);
	if (c->has_exit)
		return (int)(c->exit_status & 0xff);
	return CLI_EXIT_STOPPED; /* stopped before the harness exited */
}

int cli_run_follow(sb_client *c, const char *run, uint64_t from, uint64_t resumed, int json,
		   int status)
{
	struct run_ctx ctx = {.json = json, .resumed = resumed};
	struct sb_follow_opts fo = {0};
	int rc;

	cli_follow_live(&fo, run);
	fo.from = from;
	if ((rc = sb_follow(c, &fo, run_cb, &ctx)) < 0)
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if (cli_detached) {
		cli_note("detached from run %s; it keeps running ('sanbox attach %s')", run, run);
		return status ? CLI_EXIT_DETACHED : CLI_EXIT_OK;
	}
	return status ? run_exit(run, &ctx, 1) : CLI_EXIT_OK;
}

int cli_run_exit_state(const struct sb_runstate *rs, int say)
{
	struct run_ctx ctx = {0};

	if (!strcmp(rs->status, "failed"))
		snprintf(ctx.failure, sizeof ctx.failure, "%s", rs->reason);
	if (!strcmp(rs->status, "timeout") || !strcmp(rs->status, "budget") ||
	    !strcmp(rs->status, "failed"))
		snprintf(ctx.reason, sizeof ctx.reason, "%s", rs->status);
	else
		snprintf(ctx.reason, sizeof ctx.reason, "%s", rs->reason);
	ctx.has_exit = rs->has_exit != 0;
	ctx.exit_status = rs->exit_status;
	return run_exit(rs->run, &ctx, say);
}

int cli_run_exit_of(const char *run, const msgpack_object *map)
{
	struct sb_runstate rs;

	if (!map || sb_runstate_unpack(map, &rs))
		return cli_fail(SB_ERR_PROTO, "run %s: malformed reply", run);
	snprintf(rs.run, sizeof rs.run, "%s", run);
	return cli_run_exit_state(&rs, 1);
}

int cmd_run(int argc, char **argv)
{
	struct run_opts o = {0};
	struct cli_input in[CLI_SPEC_LIST_MAX];
	struct cli_req r;
	struct sb_reply rep = {0};
	char run[SB_RUN_MAX];
	sb_client *c = NULL;
	int nin = 0, at, rc;

	if ((rc = parse_opts(argc, argv, &o)) != CLI_GO_ON || (rc = spec_words(&o)))
		goto out;
	/* every input is checked before anything starts */
	if ((rc = cli_inputs_open(&o.spec.inputs, in, &at))) {
		rc = cli_fail_code(rc == SB_ERR_NOTFOUND ? CLI_EXIT_NOTFOUND
				   : rc == SB_ERR_IO	 ? CLI_EXIT_ERROR
							 : CLI_EXIT_USAGE,
				   "%s", sb_errmsg(rc));
		goto out;
	}
	nin = o.spec.inputs.n;
	if ((rc = cli_connect(1, &c))) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
		goto out;
	}
	if ((rc = pack_request(&r, &o, in))) {
		msgpack_sbuffer_destroy(&r.buf);
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
		goto out;
	}
	rc = cli_call(c, &r, &rep);
	if (rc == SB_OK && sb_map_str(&rep.map, "run", run, sizeof run) <= 0)
		rc = sb_seterr(SB_ERR_PROTO, "malformed reply");
	if (rc) {
		rc = cli_fail_request(rc);
		goto out;
	}
	if (o.detach) {
		if (o.json)
			cli_print_json(json_pack("{s:s}", "run", run));
		else
			printf("%s\n", run);
		goto out;
	}
	rc = cli_run_follow(c, run, 0, 0, o.json, 1);
out:
	sb_reply_free(&rep);
	sb_client_close(c);
	cli_inputs_close(in, nin);
	json_decref(o.policy);
	free(o.words);
	free(o.prompt);
	return rc;
}
