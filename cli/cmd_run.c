/* cmd_run.c - sanbox run: resolve a run, start it, and follow it. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"
#include "vmm/chan.h" /* SB_CHAN_INPUTS_MAX: the daemon and the agent check it too */

#define MAX_LIST 64
#define INPUTS_MAX SB_CHAN_INPUTS_MAX

struct list {
	const char *v[MAX_LIST];
	int n;
};

static int list_add(struct list *l, const char *s, const char *what)
{
	if (l->n == MAX_LIST)
		return cli_fail(SB_ERR_INVAL, "at most %d %s options", MAX_LIST, what);
	l->v[l->n++] = s;
	return 0;
}

static void pack_strs(msgpack_packer *pk, const char *key, const char *const *v, int n)
{
	sb_pack_str(pk, key);
	msgpack_pack_array(pk, (size_t)n);
	for (int i = 0; i < n; i++)
		sb_pack_str(pk, v[i]);
}

/* Packs the input files as [{path, data, mode}]; paths are the base names. */
static int pack_inputs(msgpack_packer *pk, const struct list *in)
{
	size_t total = 0;

	sb_pack_str(pk, "inputs");
	msgpack_pack_array(pk, (size_t)in->n);
	for (int i = 0; i < in->n; i++) {
		const char *base = strrchr(in->v[i], '/');
		struct stat st;
		FILE *f = fopen(in->v[i], "rb");
		char *data;

		if (!f || fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
			if (f)
				fclose(f);
			return sb_seterr(SB_ERR_NOTFOUND, "input %s: %s", in->v[i],
					 f ? "not a regular file" : strerror(errno));
		}
		total += (size_t)st.st_size;
		if (total > INPUTS_MAX) {
			fclose(f);
			return sb_seterr(SB_ERR_TOOBIG, "inputs exceed %u MiB", INPUTS_MAX >> 20);
		}
		data = malloc((size_t)st.st_size + 1);
		if (!data || fread(data, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
			free(data);
			fclose(f);
			return sb_seterr(SB_ERR_IO, "input %s: read failed", in->v[i]);
		}
		fclose(f);
		msgpack_pack_map(pk, 3);
		sb_pack_kstr(pk, "path", base ? base + 1 : in->v[i]);
		sb_pack_str(pk, "data");
		msgpack_pack_bin_with_body(pk, data, (size_t)st.st_size);
		sb_pack_ku64(pk, "mode", st.st_mode & 0777);
		free(data);
	}
	return SB_OK;
}

struct run_ctx {
	int json;
	int64_t exit_status;
	int has_exit;
	char reason[32];
	char failure[512]; /* run.failed's reason */
};

static int run_cb(void *vctx, const struct sb_event *ev, const msgpack_object *p)
{
	struct run_ctx *c = vctx;

	cli_print_event(ev, p, c->json);
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

int cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"template", required_argument, NULL, 't'}, {"cpu", required_argument, NULL, 'c'},
		{"memory", required_argument, NULL, 'M'},   {"timeout", required_argument, NULL, 'T'},
		{"input", required_argument, NULL, 'i'},    {"env", required_argument, NULL, 'e'},
		{"name", required_argument, NULL, 'n'},     {"group", required_argument, NULL, 'g'},
		{"model", required_argument, NULL, 'm'},    {"budget", required_argument, NULL, 'b'},
		{"secret", required_argument, NULL, 's'},   {"accel", required_argument, NULL, 'a'},
		{"on-budget", required_argument, NULL, 'o'}, {"net", required_argument, NULL, 'N'},
		{"allow", required_argument, NULL, 'A'},
		{"detach", no_argument, NULL, 'd'},         {"json", no_argument, NULL, 'j'},
		{NULL, 0, NULL, 0},
	};
	const char *tmpl = "shell", *name = NULL, *group = NULL, *accel = NULL, *on_budget = NULL,
		   *net = NULL;
	uint64_t cpus = 0, mem = 0, timeout = 0, budget = 0;
	struct list inputs = {0}, env = {0}, secrets = {0}, models = {0}, allow = {0};
	struct run_ctx rc_ctx = {0};
	struct sb_follow_opts fo = {0};
	struct cli_req r;
	struct sb_reply rep;
	char run[SB_RUN_MAX], *end;
	int detach_opt = 0, has_cmd = 0, ch, rc;
	size_t nspec;
	sb_client *c;

	while ((ch = getopt_long(argc, argv, "+t:m:", opts, NULL)) != -1) {
		switch (ch) {
		case 't': tmpl = optarg; break;
		case 'c':
			cpus = strtoull(optarg, &end, 10);
			if (*end || cpus < 1 || cpus > 64)
				return cli_fail(SB_ERR_INVAL, "--cpu must be between 1 and 64");
			break;
		case 'M':
			if ((rc = cli_parse_size_mib(optarg, &mem)))
				return cli_fail(rc, "%s", sb_errmsg(rc));
			break;
		case 'T':
			if ((rc = cli_parse_duration(optarg, &timeout)))
				return cli_fail(rc, "%s", sb_errmsg(rc));
			break;
		case 'b':
			if ((rc = cli_parse_usd(optarg, &budget)))
				return cli_fail(rc, "%s", sb_errmsg(rc));
			if (!budget)
				return cli_fail(SB_ERR_INVAL, "--budget must be positive");
			break;
		case 'o':
			if (strcmp(optarg, "stop") && strcmp(optarg, "continue"))
				return cli_fail(SB_ERR_INVAL, "--on-budget takes stop or continue");
			on_budget = optarg;
			break;
		case 'i': if (list_add(&inputs, optarg, "--input")) return 1; break;
		case 'e':
			if (!strchr(optarg, '=') || optarg[0] == '=')
				return cli_fail(SB_ERR_INVAL, "--env takes K=V, not '%s'", optarg);
			if (list_add(&env, optarg, "--env"))
				return 1;
			break;
		case 's': if (list_add(&secrets, optarg, "--secret")) return 1; break;
		case 'n': name = optarg; break;
		case 'g': group = optarg; break;
		case 'm': if (list_add(&models, optarg, "--model")) return 1; break;
		case 'a': accel = optarg; break;
		case 'N': net = optarg; break;
		case 'A': if (list_add(&allow, optarg, "--allow")) return 1; break;
		case 'd': detach_opt = 1; break;
		case 'j': rc_ctx.json = 1; break;
		default: return cli_usage("run");
		}
	}
	has_cmd = optind > 1 && !strcmp(argv[optind - 1], "--");
	if (optind >= argc)
		return cli_fail(SB_ERR_INVAL, "give a command after -- or a prompt (see 'sanbox help run')");
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));

	nspec = 10 + !!name + !!group + !!models.n * 2 + !!accel + !!on_budget + !!net + !!allow.n;
	cli_req_begin(&r, "run.create", 1);
	sb_pack_str(&r.pk, "spec");
	msgpack_pack_map(&r.pk, nspec);
	sb_pack_kstr(&r.pk, "template", tmpl);
	if (name)
		sb_pack_kstr(&r.pk, "name", name);
	if (group)
		sb_pack_kstr(&r.pk, "group", group);
	if (models.n) {
		/* the first is the run's model; the others it may use too */
		sb_pack_kstr(&r.pk, "model", models.v[0]);
		pack_strs(&r.pk, "models", models.v + 1, models.n - 1);
	}
	if (on_budget)
		sb_pack_kstr(&r.pk, "on_budget", on_budget);
	if (accel)
		sb_pack_kstr(&r.pk, "accel", accel);
	if (net)
		sb_pack_kstr(&r.pk, "network", net);
	if (allow.n)
		pack_strs(&r.pk, "allow", allow.v, allow.n);
	if (has_cmd) {
		pack_strs(&r.pk, "argv", (const char *const *)argv + optind, argc - optind);
		sb_pack_kstr(&r.pk, "prompt", "");
	} else {
		/* a prompt: the words after the options, for the template's harness */
		size_t len = 0;
		for (int i = optind; i < argc; i++)
			len += strlen(argv[i]) + 1;
		char *prompt = calloc(1, len + 1);
		for (int i = optind; prompt && i < argc; i++) {
			strcat(prompt, argv[i]);
			if (i + 1 < argc)
				strcat(prompt, " ");
		}
		pack_strs(&r.pk, "argv", NULL, 0);
		sb_pack_kstr(&r.pk, "prompt", prompt ? prompt : "");
		free(prompt);
	}
	pack_strs(&r.pk, "env", env.v, env.n);
	pack_strs(&r.pk, "secrets", secrets.v, secrets.n);
	sb_pack_ku64(&r.pk, "cpus", cpus);
	sb_pack_ku64(&r.pk, "memory_mib", mem);
	sb_pack_ku64(&r.pk, "timeout_s", timeout);
	sb_pack_ku64(&r.pk, "budget_nusd", budget);
	if ((rc = pack_inputs(&r.pk, &inputs))) {
		msgpack_sbuffer_destroy(&r.buf);
		sb_client_close(c);
		return cli_fail(rc, "%s", sb_errmsg(rc));
	}
	rc = cli_call(c, &r, &rep);
	if (rc == SB_OK && sb_map_str(&rep.map, "run", run, sizeof run) <= 0)
		rc = sb_seterr(SB_ERR_PROTO, "malformed reply");
	if (rc) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
		sb_reply_free(&rep);
		sb_client_close(c);
		return rc;
	}
	sb_reply_free(&rep);
	if (detach_opt) {
		if (rc_ctx.json)
			printf("{\"run\":\"%s\"}\n", run);
		else
			printf("%s\n", run);
		sb_client_close(c);
		return 0;
	}
	cli_follow_live(&fo, run);
	rc = sb_follow(c, &fo, run_cb, &rc_ctx);
	sb_client_close(c);
	if (rc < 0)
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if (cli_detached) {
		fprintf(stderr, "sanbox: detached from run %s; it keeps running ('sanbox attach %s')\n",
			run, run);
		return 0;
	}
	if (!strcmp(rc_ctx.reason, "timeout"))
		return EXIT_TIMEOUT;
	if (!strcmp(rc_ctx.reason, "failed")) {
		fprintf(stderr, "sanbox: run %s failed: %s\n", run,
			rc_ctx.failure[0] ? rc_ctx.failure : "see its events");
		return EXIT_RUNFAIL;
	}
	if (!strcmp(rc_ctx.reason, "budget")) {
		fprintf(stderr, "sanbox: run %s stopped: its LLM budget is spent\n", run);
		return EXIT_BUDGET;
	}
	if (!strcmp(rc_ctx.reason, "daemon-stop"))
		fprintf(stderr, "sanbox: run %s stopped: sanboxd was stopped\n", run);
	if (rc_ctx.has_exit)
		return (int)(rc_ctx.exit_status & 0xff);
	return 143; /* stopped before the harness exited */
}
