/* tools_runs.c - the MCP tools that start, list, stop, snapshot, fork and
 * resume runs and groups, through the daemon ops the CLI uses. */
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/groupfile.h"
#include "cli/runspec.h"
#include "engine/error.h"
#include "engine/runs/plan.h"
#include "mcp/toolkit.h"
#include "mcp/tools.h"

/* Adds the strings of args' array key to l. */
static int strs_add(const json_t *args, const char *key, struct cli_strs *l)
{
	const json_t *e;
	size_t i;
	int rc;

	json_array_foreach(json_object_get(args, key), i, e)
		if ((rc = cli_strs_add(l, json_string_value(e))))
			return sb_seterr(rc, "%s: over %d items", key, CLI_SPEC_LIST_MAX);
	return SB_OK;
}

/* The "K=V" strings of args' env, kept in kv (freed by the caller). */
static int env_add(const json_t *args, struct cli_run_spec *s, char **kv)
{
	const json_t *v;
	const char *k;
	char field[96];
	int rc, n = 0;

	json_object_foreach((json_t *)json_object_get(args, "env"), k, v) {
		snprintf(field, sizeof field, "env.%.80s", k);
		if (n == CLI_SPEC_LIST_MAX)
			return sb_seterr(SB_ERR_TOOBIG, "env: over %d variables", CLI_SPEC_LIST_MAX);
		if (asprintf(&kv[n], "%s=%s", k, json_string_value(v)) < 0)
			return SB_ERR_NOMEM;
		if ((rc = cli_spec_check_env(kv[n++])) || (rc = cli_strs_add(&s->env, kv[n - 1])))
			return mcp_field_err(rc, field);
	}
	return SB_OK;
}

/* Fills s from run_start's args (borrowed strings). */
static int spec_fill(const json_t *args, struct cli_run_spec *s, const char **argv, char **kv)
{
	const json_t *cmd = json_object_get(args, "command"), *e;
	const char *model = mcp_arg_str(args, "model");
	size_t i;
	int rc;

	s->tmpl = mcp_arg_str(args, "template") ? mcp_arg_str(args, "template") : "shell";
	s->prompt = mcp_arg_str(args, "prompt");
	if (cmd && s->prompt)
		return sb_seterr(SB_ERR_INVAL, "command: give a prompt or a command, not both");
	if (!cmd && !s->prompt)
		return sb_seterr(SB_ERR_INVAL, "prompt: missing (give a prompt or a command)");
	json_array_foreach(cmd, i, e)
		argv[i] = json_string_value(e);
	s->argv = argv;
	s->argc = (int)json_array_size(cmd);
	s->name = mcp_arg_str(args, "name");
	s->group = mcp_arg_str(args, "group");
	s->on_budget = mcp_arg_str(args, "on_budget");
	s->net = mcp_arg_str(args, "network");
	s->snapshots = mcp_arg_str(args, "snapshots");
	s->accel = mcp_arg_str(args, "accel");
	s->runner = mcp_arg_str(args, "runner");
	s->cpus = mcp_arg_u64(args, "cpus", 0);
	s->mem = mcp_arg_u64(args, "memory_mib", 0);
	s->timeout = mcp_arg_u64(args, "timeout_s", 0);
	if (json_object_get(args, "budget_usd"))
		s->budget = (uint64_t)llround(json_number_value(json_object_get(args, "budget_usd")) * 1e9);
	if (model && (rc = cli_strs_add(&s->models, model)))
		return rc;
	if ((rc = strs_add(args, "models", &s->models)) || (rc = strs_add(args, "secrets", &s->secrets)) ||
	    (rc = strs_add(args, "allow", &s->allow)))
		return rc;
	return env_add(args, s, kv);
}

/* The run's path of an input's path: relative to /workspace, or under
 * it written whole; no empty, "." or ".." component. Errors:
 * SB_ERR_INVAL naming field. */
static int input_dest(const char *path, const char *field, const char **dest)
{
	static const char ws[] = "/workspace/";

	if (!strncmp(path, ws, sizeof ws - 1))
		path += sizeof ws - 1;
	else if (path[0] == '/')
		return sb_seterr(SB_ERR_INVAL, "%s: %.200s is not under /workspace", field, path);
	if (!sb_plan_path_ok(path, strlen(path)))
		return sb_seterr(SB_ERR_INVAL,
				 "%s: %.200s has an empty, . or .. component (or ends in /)",
				 field, path);
	*dest = path;
	return SB_OK;
}

/* One input of run_start's inputs, item e, into in; base64 content is
 * decoded into *buf (freed by the caller). */
static int input_fill(const json_t *e, size_t i, struct cli_input *in, char **buf)
{
	const char *text = mcp_arg_str(e, "content"), *b64 = mcp_arg_str(e, "content_base64");
	char field[48];
	size_t n;
	int rc;

	snprintf(field, sizeof field, "inputs[%zu].path", i);
	memset(in, 0, sizeof *in);
	in->fd = -1;
	in->path = mcp_arg_str(e, "path");
	in->mode = (unsigned)mcp_arg_u64(e, "mode", 0644);
	if ((rc = input_dest(in->path, field, &in->dest)))
		return rc;
	snprintf(field, sizeof field, "inputs[%zu].content", i);
	if (!text == !b64)
		return sb_seterr(SB_ERR_INVAL, "%s: give content or content_base64, one of them",
				 field);
	if (text) {
		in->data = text;
		in->size = strlen(text);
		return SB_OK;
	}
	n = strlen(b64);
	if (!(*buf = malloc(n / 4 * 3 + 3)))
		return SB_ERR_NOMEM;
	if (sodium_base642bin((unsigned char *)*buf, n / 4 * 3 + 3, b64, n, " \n", &in->size,
			      NULL, sodium_base64_VARIANT_ORIGINAL))
		return sb_seterr(SB_ERR_INVAL, "%s_base64: not base64", field);
	in->data = *buf;
	return SB_OK;
}

/* run_start's inputs into in (room for CLI_SPEC_LIST_MAX), listed in
 * s->inputs; decoded contents in bufs (freed by the caller). As sanbox
 * run --input bounds them: CLI_SPEC_INPUTS_MAX bytes in all. */
static int inputs_fill(const json_t *args, struct cli_run_spec *s, struct cli_input *in,
		       char **bufs)
{
	const json_t *e;
	size_t i, total = 0;
	int rc;

	json_array_foreach(json_object_get(args, "inputs"), i, e) {
		if ((rc = input_fill(e, i, &in[i], &bufs[i])))
			return rc;
		if ((rc = cli_strs_add(&s->inputs, in[i].dest)))
			return sb_seterr(rc, "inputs: over %d files", CLI_SPEC_LIST_MAX);
		if ((total += in[i].size) > CLI_SPEC_INPUTS_MAX)
			return sb_seterr(SB_ERR_TOOBIG, "inputs: over %u MiB in all",
					 CLI_SPEC_INPUTS_MAX >> 20);
	}
	return SB_OK;
}

/* The daemon's error about a run.create spec, named by the field it is
 * about when its text shows it. */
static int spec_err(int rc)
{
	const char *m = sb_errmsg(rc);
	static const char *const fields[] = {"runner", "template", "model", "secret", "allow", "network",
					     "name", "group", "memory", "timeout", "budget"};

	for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
		size_t n = strlen(fields[i]);
		if (!strstr(m, fields[i]))
			continue;
		if (!strncmp(m, fields[i], n) && m[n] == ':')
			return rc; /* named already */
		return mcp_field_err(rc, fields[i]);
	}
	return rc;
}

int mcp_tool_run_start(struct sb_mcp_call *call, const json_t *args, json_t **out)
{
	struct cli_run_spec spec = {0};
	struct cli_input in[CLI_SPEC_LIST_MAX];
	const char *argv[CLI_SPEC_LIST_MAX];
	char *kv[CLI_SPEC_LIST_MAX] = {0}, *bufs[CLI_SPEC_LIST_MAX] = {0}, run[SB_RUN_MAX];
	struct sb_reply rep = {0};
	struct cli_req r;
	sb_client *c = NULL;
	int rc;

	if ((rc = spec_fill(args, &spec, argv, kv)) || (rc = inputs_fill(args, &spec, in, bufs)) ||
	    (rc = mcp_connect(&c)))
		goto done;
	cli_req_begin(&r, "run.create");
	if ((rc = cli_spec_pack(sb_mapw_key(&r.m, "spec"), &spec, in))) {
		msgpack_sbuffer_destroy(&r.buf);
		goto done;
	}
	if ((rc = mcp_call(c, &r, &rep))) {
		rc = spec_err(rc);
		goto done;
	}
	if (sb_map_str(&rep.map, "run", run, sizeof run) <= 0)
		rc = sb_seterr(SB_ERR_PROTO, "sanboxd: malformed reply");
	else
		*out = json_pack("{s:s, s:s, s:s}", "run", run, "name", spec.name ? spec.name : "",
				 "next", "wait {runs: [run]} until it ends; events_read for what it did");
done:
	for (int i = 0; i < CLI_SPEC_LIST_MAX; i++) {
		free(kv[i]);
		free(bufs[i]);
	}
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

/* The daemon's error about run N ("runs[2]: ...") at its line in the yaml. */
static int group_err(const struct cli_group *g, int rc)
{
	char line[1200];

	if (cli_group_run_error(g, sb_errmsg(rc), line, sizeof line))
		return sb_seterr(rc, "yaml: %s", line);
	return rc;
}

static json_t *group_json(const struct cli_group *g, const struct sb_reply *rep)
{
	const msgpack_object *runs = sb_map_get(&rep->map, "runs");
	json_t *j = mcp_reply_json(rep), *list = json_array();

	for (uint32_t i = 0; runs && runs->type == MSGPACK_OBJECT_ARRAY && i < runs->via.array.size &&
			     i < g->nruns;
	     i++) {
		const msgpack_object *o = &runs->via.array.ptr[i];
		json_array_append_new(list, json_pack("{s:s#, s:o}", "run", o->via.str.ptr,
						      (int)o->via.str.size, "name",
						      mcp_str(g->runs[i].spec.name)));
	}
	json_object_set_new(j, "runs", list);
	json_object_set_new(j, "next", json_string("wait {group} until its runs end"));
	return j;
}

int mcp_tool_group_start(struct sb_mcp_call *call, const json_t *args, json_t **out)
{
	const json_t *y = json_object_get(args, "yaml");
	const char *name = mcp_arg_str(args, "name");
	struct cli_group *g = NULL;
	struct sb_reply rep = {0};
	sb_client *c = NULL;
	int rc;

	if ((rc = cli_group_parse("group.yaml", json_string_value(y), json_string_length(y), &g)))
		return mcp_field_err(rc, "yaml");
	if ((rc = mcp_connect(&c)) == SB_OK) {
		if ((rc = cli_group_create(c, g, name ? name : g->name, &rep)))
			rc = group_err(g, rc);
		else if (!(*out = group_json(g, &rep)))
			rc = SB_ERR_NOMEM;
	}
	sb_reply_free(&rep);
	sb_client_close(c);
	cli_group_free(g);
	return rc;
}

/* Does rs pass runs_list's filters? */
static int run_wanted(const struct sb_runstate *rs, const json_t *args)
{
	const char *st = mcp_arg_str(args, "status"), *name = mcp_arg_str(args, "name");

	if (st && (!strcmp(st, "live") ? !sb_runstate_is_live(rs) : strcmp(st, rs->status) != 0))
		return 0;
	return !name || strstr(rs->name, name);
}

static int created_cmp(const void *a, const void *b)
{
	const struct sb_runstate *x = a, *y = b;

	if (x->created_ns != y->created_ns)
		return x->created_ns < y->created_ns ? 1 : -1;
	return strcmp(y->run, x->run);
}

int mcp_tool_runs_list(struct sb_mcp_call *call, const json_t *args, json_t **out)
{
	uint64_t limit = mcp_arg_u64(args, "limit", 100), total = 0;
	const char *group = mcp_arg_str(args, "group");
	struct sb_runstate *v = NULL;
	const msgpack_object *runs;
	struct sb_reply rep = {0};
	struct cli_req r;
	sb_client *c = NULL;
	json_t *list;
	uint32_t n = 0;
	int rc;

	if ((rc = mcp_connect(&c)))
		return rc;
	cli_req_begin(&r, "runs.list");
	if (group)
		sb_mapw_str(&r.m, "group", group);
	if ((rc = mcp_call(c, &r, &rep)))
		goto done;
	runs = sb_map_get(&rep.map, "runs");
	if (runs && runs->type == MSGPACK_OBJECT_ARRAY && runs->via.array.size &&
	    !(v = calloc(runs->via.array.size, sizeof *v))) {
		rc = SB_ERR_NOMEM;
		goto done;
	}
	for (uint32_t i = 0; v && i < runs->via.array.size; i++)
		if (sb_runstate_unpack(&runs->via.array.ptr[i], &v[n]) == SB_OK && run_wanted(&v[n], args))
			n++;
	qsort(v, n, sizeof *v, created_cmp);
	list = json_array();
	for (uint32_t i = 0; i < n && i < limit; i++)
		json_array_append_new(list, mcp_run_json(&v[i]));
	total = n;
	*out = json_pack("{s:o, s:I}", "runs", list, "matching", (json_int_t)total);
done:
	free(v);
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

/* Sends the request r (begun, its arguments packed) and puts its reply as
 * JSON into *out. */
static int simple_call(struct cli_req *r, json_t **out)
{
	struct sb_reply rep = {0};
	sb_client *c = NULL;
	int rc;

	if ((rc = mcp_connect(&c))) {
		msgpack_sbuffer_destroy(&r->buf);
		return rc;
	}
	if ((rc = mcp_call(c, r, &rep)) == SB_OK && !(*out = mcp_reply_json(&rep)))
		rc = SB_ERR_NOMEM;
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

int mcp_tool_groups_list(struct sb_mcp_call *call, const json_t *args, json_t **out)
{
	struct cli_req r;

	cli_req_begin(&r, "groups.list");
	return simple_call(&r, out);
}

/* Resolves args' run into run on a new connection *c. */
static int run_arg(const json_t *args, sb_client **c, char run[SB_RUN_MAX])
{
	int rc;

	*c = NULL;
	if ((rc = mcp_connect(c)))
		return rc;
	if ((rc = mcp_resolve(*c, "run", mcp_arg_str(args, "run"), run))) {
		sb_client_close(*c);
		*c = NULL;
	}
	return rc;
}

/* Sends r (begun, arguments packed) on c and closes c; *out its reply. */
static int run_call(sb_client *c, struct cli_req *r, json_t **out)
{
	struct sb_reply rep = {0};
	int rc;

	if ((rc = mcp_call(c, r, &rep)) == SB_OK && !(*out = mcp_reply_json(&rep)))
		rc = SB_ERR_NOMEM;
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

int mcp_tool_stop(struct sb_mcp_call *call, const json_t *args, json_t **out)
{
	const char *group = mcp_arg_str(args, "group");
	char run[SB_RUN_MAX];
	struct cli_req r;
	sb_client *c;
	int rc;

	if (!group == !json_object_get(args, "run"))
		return sb_seterr(SB_ERR_INVAL, "run: give a run or a group, one of them");
	if (group) {
		cli_req_begin(&r, "group.stop");
		sb_mapw_str(&r.m, "group", group);
		return (rc = simple_call(&r, out)) == SB_ERR_NOTFOUND ? mcp_field_err(rc, "group") : rc;
	}
	if ((rc = run_arg(args, &c, run)))
		return rc;
	cli_req_begin(&r, "run.stop");
	sb_mapw_str(&r.m, "run", run);
	return run_call(c, &r, out);
}

int mcp_tool_snapshot(struct sb_mcp_call *call, const json_t *args, json_t **out)
{
	char run[SB_RUN_MAX];
	struct cli_req r;
	sb_client *c;
	int rc;

	if ((rc = run_arg(args, &c, run)))
		return rc;
	cli_req_begin(&r, "run.snapshot");
	sb_mapw_str(&r.m, "run", run);
	if (json_is_true(json_object_get(args, "memory")))
		sb_mapw_bool(&r.m, "memory", 1);
	if ((rc = run_call(c, &r, out)) == SB_OK)
		json_object_set_new(*out, "run", json_string(run));
	return rc;
}

/* Packs fork's and resume's snapshot, at, prompt and runner. */
static void pack_from(struct cli_req *r, const json_t *args)
{
	if (mcp_arg_str(args, "snapshot"))
		sb_mapw_str(&r->m, "snapshot", mcp_arg_str(args, "snapshot"));
	if (json_object_get(args, "at"))
		sb_mapw_u64(&r->m, "at", mcp_arg_u64(args, "at", 0));
	if (mcp_arg_str(args, "prompt"))
		sb_mapw_str(&r->m, "prompt", mcp_arg_str(args, "prompt"));
	if (mcp_arg_str(args, "runner"))
		sb_mapw_str(&r->m, "runner", mcp_arg_str(args, "runner"));
}

int mcp_tool_fork(struct sb_mcp_call *call, const json_t *args, json_t **out)
{
	char run[SB_RUN_MAX];
	struct cli_req r;
	sb_client *c;
	int rc;

	if (mcp_arg_str(args, "snapshot") && json_object_get(args, "at"))
		return sb_seterr(SB_ERR_INVAL, "at: give a snapshot or an offset, not both");
	if ((rc = run_arg(args, &c, run)))
		return rc;
	cli_req_begin(&r, "run.fork");
	sb_mapw_str(&r.m, "run", run);
	pack_from(&r, args);
	sb_mapw_u64(&r.m, "count", mcp_arg_u64(args, "count", 1));
	if (mcp_arg_str(args, "name"))
		sb_mapw_str(&r.m, "name", mcp_arg_str(args, "name"));
	return run_call(c, &r, out);
}

int mcp_tool_resume(struct sb_mcp_call *call, const json_t *args, json_t **out)
{
	char run[SB_RUN_MAX];
	struct cli_req r;
	sb_client *c;
	int rc;

	if (mcp_arg_str(args, "snapshot") && json_object_get(args, "at"))
		return sb_seterr(SB_ERR_INVAL, "at: give a snapshot or an offset, not both");
	if ((rc = run_arg(args, &c, run)))
		return rc;
	cli_req_begin(&r, "run.resume");
	sb_mapw_str(&r.m, "run", run);
	pack_from(&r, args);
	return run_call(c, &r, out);
}
