/* cmd_run.c - sanbox run: resolve a run, start it, and follow it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"
#include "netpolicy/netpolicy.h"
#include "vmm/chan.h" /* SB_CHAN_INPUTS_MAX: the daemon and the agent check it too */

#define MAX_LIST 64
#define INPUTS_MAX SB_CHAN_INPUTS_MAX
#define RECORD_QUOTA_MAX (1ull << 40) /* the daemon's limit too (engine/runs/plan.c) */

struct list {
	const char *v[MAX_LIST];
	int n;
};

/* An --input file, opened and checked before anything is sent. */
struct input {
	const char *path;
	int fd;
	size_t size;
	unsigned mode;
};

/* What the options say. */
struct run_opts {
	const char *tmpl, *name, *group, *accel, *on_budget, *net, *snapshots;
	uint64_t cpus, mem, timeout, budget, quota;
	struct list inputs, env, secrets, models, allow;
	char **words; /* the prompt's words, in argv order (an array the caller frees) */
	int nwords;
	char **cmd; /* the command after --, in argv, or NULL */
	int ncmd;
	int detach, json;
	json_t *policy; /* --policy FILE, whose strings the lists point into */
};

static int list_add(struct list *l, const char *s, const char *what)
{
	if (l->n == MAX_LIST)
		return cli_fail_code(CLI_EXIT_USAGE, "at most %d %s options", MAX_LIST, what);
	l->v[l->n++] = s;
	return CLI_EXIT_OK;
}

static void pack_strs(msgpack_packer *pk, const char *key, const char *const *v, int n)
{
	sb_pack_str(pk, key);
	msgpack_pack_array(pk, (size_t)n);
	for (int i = 0; i < n; i++)
		sb_pack_str(pk, v[i]);
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
	struct list all = {{0}, 0};
	size_t i, from;
	int rc = CLI_EXIT_OK;

	if (!o->net && json_object_get(o->policy, "network"))
		o->net = json_string_value(json_object_get(o->policy, "network"));
	json_array_foreach(grants, i, g)
	{
		if ((rc = list_add(&all, json_string_value(g), "grants")))
			return rc;
	}
	from = (size_t)all.n;
	for (int k = 0; k < o->allow.n && rc == CLI_EXIT_OK; k++) {
		size_t j;
		for (j = 0; j < from && !grants_same(all.v[j], o->allow.v[k]); j++)
			;
		if (j == from)
			rc = list_add(&all, o->allow.v[k], "grants");
	}
	o->allow = all;
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
		{"policy", required_argument, NULL, 'P'},
		{NULL, 0, NULL, 0},
	};
	int ch, rc = CLI_EXIT_OK;

	o->tmpl = "shell";
	if (!(o->words = calloc((size_t)argc, sizeof *o->words)))
		return cli_fail(SB_ERR_NOMEM, "out of memory");
	/* '-': options anywhere before --, each word of a prompt returned in
	 * order (as 1); -- ends the options, and a command follows it */
	while (rc == CLI_EXIT_OK && (ch = getopt_long(argc, argv, "-:ht:m:", opts, NULL)) != -1) {
		switch (ch) {
		case 1: o->words[o->nwords++] = optarg; break;
		case 'h': return cli_help("run");
		case 't': o->tmpl = optarg; break;
		case 'c':
			rc = cli_parse_u64("--cpu", optarg, 1, 64, &o->cpus);
			break;
		case 'M':
			if ((rc = cli_parse_size_mib(optarg, &o->mem)))
				rc = cli_fail_code(CLI_EXIT_USAGE, "%s", sb_errmsg(rc));
			break;
		case 'Q':
			if ((rc = cli_parse_size(optarg, 1, RECORD_QUOTA_MAX, &o->quota)))
				rc = cli_fail_code(CLI_EXIT_USAGE, "--record-quota: %s", sb_errmsg(rc));
			break;
		case 'T':
			if ((rc = cli_parse_duration(optarg, &o->timeout)))
				rc = cli_fail_code(CLI_EXIT_USAGE, "%s", sb_errmsg(rc));
			break;
		case 'b':
			if ((rc = cli_parse_usd(optarg, &o->budget)))
				rc = cli_fail_code(CLI_EXIT_USAGE, "%s", sb_errmsg(rc));
			break;
		case 'o':
			if (strcmp(optarg, "stop") && strcmp(optarg, "continue"))
				rc = cli_fail_code(CLI_EXIT_USAGE, "--on-budget takes stop or continue");
			o->on_budget = optarg;
			break;
		case 'i': rc = list_add(&o->inputs, optarg, "--input"); break;
		case 'e':
			if (!strchr(optarg, '=') || optarg[0] == '=')
				rc = cli_fail_code(CLI_EXIT_USAGE, "--env takes K=V, not '%s'", optarg);
			else
				rc = list_add(&o->env, optarg, "--env");
			break;
		case 's': rc = list_add(&o->secrets, optarg, "--secret"); break;
		case 'n':
			if (!(rc = cli_check_name("--name", optarg)))
				o->name = optarg;
			break;
		case 'g':
			if (!(rc = cli_check_name("--group", optarg)))
				o->group = optarg;
			break;
		case 'm': rc = list_add(&o->models, optarg, "--model"); break;
		case 'a': o->accel = optarg; break;
		case 'S':
			if (strcmp(optarg, "turn") && strcmp(optarg, "stop") && strcmp(optarg, "off"))
				return cli_fail_code(CLI_EXIT_USAGE,
						     "--snapshots takes turn, stop or off, not '%s'",
						     optarg);
			o->snapshots = optarg;
			break;
		case 'N': o->net = optarg; break;
		case 'A': rc = list_add(&o->allow, optarg, "--allow"); break;
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

static const char *file_kind(mode_t m)
{
	return S_ISDIR(m)    ? "a directory"
	       : S_ISFIFO(m) ? "a FIFO"
	       : S_ISSOCK(m) ? "a socket"
	       : S_ISCHR(m)  ? "a character device"
	       : S_ISBLK(m)  ? "a block device"
			     : "not a regular file";
}

/* Opens input path into *in without blocking (a FIFO, a terminal or a
 * device never holds the CLI up) and checks that it is a regular file.
 * Returns an exit code: CLI_EXIT_USAGE for what is not a regular file,
 * CLI_EXIT_NOTFOUND for a missing one. */
static int input_open(const char *path, struct input *in)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);

	if (fd < 0) {
		int err = errno;
		if (err != ENOENT && stat(path, &st) == 0 && !S_ISREG(st.st_mode)) /* a socket */
			return cli_fail_code(CLI_EXIT_USAGE, "input %s is %s, not a regular file", path,
					     file_kind(st.st_mode));
		return cli_fail(err == ENOENT ? SB_ERR_NOTFOUND : SB_ERR_IO, "input %s: %s", path,
				strerror(err));
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return cli_fail_code(CLI_EXIT_USAGE, "input %s is %s, not a regular file", path,
				     file_kind(st.st_mode));
	}
	in->path = path;
	in->fd = fd;
	in->size = (size_t)st.st_size;
	in->mode = st.st_mode & 0777;
	return CLI_EXIT_OK;
}

/* Reads in whole (its size as opened) into data. Errors: SB_ERR_IO. */
static int input_read(const struct input *in, char *data)
{
	size_t got = 0;
	ssize_t n;

	while (got < in->size) {
		n = read(in->fd, data + got, in->size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return sb_seterr(SB_ERR_IO, "input %s: %s", in->path,
					 n < 0 ? strerror(errno) : "it shrank while it was read");
		got += (size_t)n;
	}
	return SB_OK;
}

/* Packs the inputs as [{path, data, mode}]; paths are the base names.
 * Errors: SB_ERR_IO, SB_ERR_NOMEM. */
static int pack_inputs(msgpack_packer *pk, const struct input *in, int n)
{
	sb_pack_str(pk, "inputs");
	msgpack_pack_array(pk, (size_t)n);
	for (int i = 0; i < n; i++) {
		const char *base = strrchr(in[i].path, '/');
		char *data = malloc(in[i].size + 1);
		int rc;

		if (!data)
			return sb_seterr(SB_ERR_NOMEM, "input %s: out of memory", in[i].path);
		if ((rc = input_read(&in[i], data))) {
			free(data);
			return rc;
		}
		msgpack_pack_map(pk, 3);
		sb_pack_kstr(pk, "path", base ? base + 1 : in[i].path);
		sb_pack_str(pk, "data");
		msgpack_pack_bin_with_body(pk, data, in[i].size);
		sb_pack_ku64(pk, "mode", in[i].mode);
		free(data);
	}
	return SB_OK;
}

/* Packs the run.create request for o, with the command or prompt in
 * argv[first..argc) (a command when has_cmd). Errors: as pack_inputs. */
static int pack_spec(struct cli_req *r, const struct run_opts *o, const struct input *in)
{
	size_t nspec = 10 + !!o->name + !!o->group + !!o->models.n * 2 + !!o->accel +
		       !!o->on_budget + !!o->net + !!o->allow.n + !!o->quota + !!o->snapshots;

	cli_req_begin(r, "run.create", 1);
	sb_pack_str(&r->pk, "spec");
	msgpack_pack_map(&r->pk, nspec);
	sb_pack_kstr(&r->pk, "template", o->tmpl);
	if (o->name)
		sb_pack_kstr(&r->pk, "name", o->name);
	if (o->group)
		sb_pack_kstr(&r->pk, "group", o->group);
	if (o->models.n) {
		/* the first is the run's model; the others it may use too */
		sb_pack_kstr(&r->pk, "model", o->models.v[0]);
		pack_strs(&r->pk, "models", o->models.v + 1, o->models.n - 1);
	}
	if (o->on_budget)
		sb_pack_kstr(&r->pk, "on_budget", o->on_budget);
	if (o->accel)
		sb_pack_kstr(&r->pk, "accel", o->accel);
	if (o->snapshots)
		sb_pack_kstr(&r->pk, "snapshots", o->snapshots);
	if (o->net)
		sb_pack_kstr(&r->pk, "network", o->net);
	if (o->allow.n)
		pack_strs(&r->pk, "allow", o->allow.v, o->allow.n);
	if (o->cmd) {
		pack_strs(&r->pk, "argv", (const char *const *)o->cmd, o->ncmd);
		sb_pack_kstr(&r->pk, "prompt", "");
	} else {
		/* a prompt: its words joined by spaces, for the template's harness */
		size_t len = 0;
		for (int i = 0; i < o->nwords; i++)
			len += strlen(o->words[i]) + 1;
		char *prompt = calloc(1, len + 1);
		for (int i = 0; prompt && i < o->nwords; i++) {
			strcat(prompt, o->words[i]);
			if (i + 1 < o->nwords)
				strcat(prompt, " ");
		}
		pack_strs(&r->pk, "argv", NULL, 0);
		sb_pack_kstr(&r->pk, "prompt", prompt ? prompt : "");
		free(prompt);
	}
	pack_strs(&r->pk, "env", o->env.v, o->env.n);
	pack_strs(&r->pk, "secrets", o->secrets.v, o->secrets.n);
	sb_pack_ku64(&r->pk, "cpus", o->cpus);
	sb_pack_ku64(&r->pk, "memory_mib", o->mem);
	sb_pack_ku64(&r->pk, "timeout_s", o->timeout);
	sb_pack_ku64(&r->pk, "budget_nusd", o->budget);
	if (o->quota)
		sb_pack_ku64(&r->pk, "record_quota", o->quota);
	return pack_inputs(&r->pk, in, o->inputs.n);
}

struct run_ctx {
	int json;
	uint64_t resumed; /* the run's last run.resumed: stops before it do not end it */
	int64_t exit_status;
	int has_exit;
	char reason[32];
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

/* The exit code of a run that ended as c says. */
static int run_exit(const char *run, const struct run_ctx *c)
{
	if (!strcmp(c->reason, "timeout"))
		return CLI_EXIT_TIMEOUT;
	if (!strcmp(c->reason, "failed"))
		return cli_fail_code(CLI_EXIT_RUNFAIL, "run %s failed: %s", run,
				     c->failure[0] ? c->failure : "see its events");
	if (!strcmp(c->reason, "budget"))
		return cli_fail_code(CLI_EXIT_BUDGET, "run %s stopped: its LLM budget is spent", run);
	if (!strcmp(c->reason, "daemon-stop"))
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
	return status ? run_exit(run, &ctx) : CLI_EXIT_OK;
}

int cli_run_exit_of(const char *run, const msgpack_object *rs)
{
	struct run_ctx ctx = {0};
	char status[32] = "";

	sb_map_str(rs, "status", status, sizeof status);
	if (!strcmp(status, "failed"))
		sb_map_str(rs, "reason", ctx.failure, sizeof ctx.failure);
	if (!strcmp(status, "timeout") || !strcmp(status, "budget") || !strcmp(status, "failed"))
		snprintf(ctx.reason, sizeof ctx.reason, "%s", status);
	else
		sb_map_str(rs, "reason", ctx.reason, sizeof ctx.reason);
	ctx.has_exit = sb_map_u64(rs, "has_exit", 0) != 0;
	ctx.exit_status = sb_map_i64(rs, "exit_status", 0);
	return run_exit(run, &ctx);
}

int cmd_run(int argc, char **argv)
{
	struct run_opts o = {0};
	struct input in[MAX_LIST];
	struct cli_req r;
	struct sb_reply rep = {0};
	char run[SB_RUN_MAX];
	sb_client *c = NULL;
	size_t total = 0;
	int nin = 0, rc;

	if ((rc = parse_opts(argc, argv, &o)) != CLI_GO_ON)
		goto out;
	/* every input is checked before anything starts */
	for (; nin < o.inputs.n; nin++) {
		if ((rc = input_open(o.inputs.v[nin], &in[nin])))
			goto out;
		total += in[nin].size;
		if (total > INPUTS_MAX) {
			nin++;
			rc = cli_fail_code(CLI_EXIT_USAGE, "inputs exceed %u MiB", INPUTS_MAX >> 20);
			goto out;
		}
	}
	if ((rc = cli_connect(1, &c))) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
		goto out;
	}
	if ((rc = pack_spec(&r, &o, in))) {
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
	while (nin-- > 0)
		close(in[nin].fd);
	json_decref(o.policy);
	free(o.words);
	return rc;
}
