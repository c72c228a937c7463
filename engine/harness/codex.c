/* codex.c - the Codex adapter: `codex exec --json`, its one model provider
 * the gateway (the OpenAI Responses API), and a translator of the JSON
 * lines it prints (thread.started, turn.started, item.started,
 * item.completed, turn.completed, turn.failed, error). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "engine/harness/adapter.h"
#include "engine/harness/common.h"

#define TEXT_MAX    2048 /* bytes of a message's text in an event */
#define SUMMARY_MAX 200	 /* bytes of a tool input's summary */
#define RESULT_MAX  1024 /* bytes of a tool's result */

/* The -c overrides: the gateway as the one provider, nothing fetched. */
static int cx_config(const struct sb_harness_ctx *c, struct sb_harness_args *out)
{
	static const char *const fixed[] = {
	    "model_provider=\"sanbox\"",
	    "model_providers.sanbox.name=\"Sanbox gateway\"",
	    "model_providers.sanbox.env_key=\"OPENAI_API_KEY\"",
	    "model_providers.sanbox.wire_api=\"responses\"",
	    "check_for_update_on_startup=false",
	    "analytics.enabled=false",
	    "web_search=\"disabled\"",
	};
	int rc;

	for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
		if ((rc = sb_harness_args_add(out, "-c")) ||
		    (rc = sb_harness_args_add(out, fixed[i])))
			return rc;
	if ((rc = sb_harness_args_add(out, "-c")) ||
	    (rc = sb_harness_args_addf(out, "model_providers.sanbox.base_url=\"%s\"",
				       c->base_url)))
		return rc;
	return SB_OK;
}

static int cx_argv(const struct sb_harness_ctx *c, struct sb_harness_args *out)
{
	const char *fixed[] = {SB_ADAPT_PATH,
			       "codex",
			       "--",
			       c->harness,
			       "exec",
			       "--json",
			       "--skip-git-repo-check",
			       "--dangerously-bypass-approvals-and-sandbox",
			       "--cd",
			       "/workspace"};
	int rc;

	for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
		if ((rc = sb_harness_args_add(out, fixed[i])))
			return rc;
	if ((rc = cx_config(c, out)) || (rc = sb_harness_args_add(out, "--model")) ||
	    (rc = sb_harness_args_add(out, c->model)))
		return rc;
	if (c->resume && ((rc = sb_harness_args_add(out, "resume")) ||
			  (rc = sb_harness_args_add(out, "--last"))))
		return rc;
	if ((rc = sb_harness_args_add(out, "--")) ||
	    (rc = sb_harness_args_add(out, c->prompt)))
		return rc;
	return SB_OK;
}

static int cx_env(const struct sb_harness_ctx *c, struct sb_harness_args *out)
{
	static const char *const env[] = {"NO_COLOR=1", "CODEX_DISABLE_TELEMETRY=1",
					  "RUST_LOG=error"};
	int rc;

	(void)c;
	for (size_t i = 0; i < sizeof env / sizeof env[0]; i++)
		if ((rc = sb_harness_args_add(out, env[i])))
			return rc;
	return SB_OK;
}

/* --- the translator --- */

struct cx_reader {
	unsigned turn; /* turns started */
	int open;      /* a turn started and not ended */
};

static void *cx_new(void)
{
	return calloc(1, sizeof(struct cx_reader));
}

static void cx_free(void *st)
{
	free(st);
}

static json_t *cx_str(json_t *o, const char *key, size_t max)
{
	const char *s = json_string_value(json_object_get(o, key));

	return sb_harness_text(s ? s : "", s ? strlen(s) : 0, max);
}

/* turn.completed's usage: what Codex says it spent (a claim). */
static json_t *cx_claim(json_t *usage)
{
	static const char *const keys[] = {"input_tokens", "cached_input_tokens",
					   "output_tokens"};
	json_t *claim = json_object();

	for (size_t i = 0; claim && i < sizeof keys / sizeof keys[0]; i++)
		if (json_is_integer(json_object_get(usage, keys[i])))
			json_object_set(claim, keys[i], json_object_get(usage, keys[i]));
	return claim;
}

/* The tool an item is, and a summary of its input; NULL: not a tool. */
static const char *cx_tool(json_t *item, json_t **args)
{
	const char *type = json_string_value(json_object_get(item, "type"));
	json_t *in;

	if (!type)
		return NULL;
	if (!strcmp(type, "command_execution")) {
		*args = cx_str(item, "command", SUMMARY_MAX);
		return "shell";
	}
	if (!strcmp(type, "file_change")) {
		in = json_pack("{s:O?}", "changes", json_object_get(item, "changes"));
		*args = sb_harness_summary(in, SUMMARY_MAX);
		json_decref(in);
		return "apply_patch";
	}
	if (!strcmp(type, "mcp_tool_call")) {
		in = json_object_get(item, "arguments");
		*args = json_is_object(in) ? sb_harness_summary(in, SUMMARY_MAX)
					   : cx_str(item, "arguments", SUMMARY_MAX);
		type = json_string_value(json_object_get(item, "tool"));
		return type ? type : "mcp";
	}
	if (!strcmp(type, "web_search")) {
		*args = cx_str(item, "query", SUMMARY_MAX);
		return "web_search";
	}
	return NULL;
}

/* An item that ended: a message, or a tool's start and end. */
static void cx_item(json_t *item, sb_harness_emit_fn emit, void *ctx)
{
	const char *type = json_string_value(json_object_get(item, "type"));
	const char *status = json_string_value(json_object_get(item, "status"));
	json_t *args = NULL, *code = json_object_get(item, "exit_code");
	const char *tool = cx_tool(item, &args);
	json_t *name;
	long long exit;

	if (type && !strcmp(type, "agent_message")) {
		emit(ctx, "agent.message",
		     json_pack("{s:s, s:o}", "role", "assistant", "text",
			       cx_str(item, "text", TEXT_MAX)));
		return;
	}
	if (type && !strcmp(type, "error")) {
		emit(ctx, "agent.message",
		     json_pack("{s:s, s:o}", "role", "error", "text",
			       cx_str(item, "message", TEXT_MAX)));
		return;
	}
	if (!tool)
		return; /* reasoning, a to-do list: not a tool */
	name = sb_harness_text(tool, strlen(tool), 64);
	exit = json_is_integer(code)		       ? json_integer_value(code)
	       : status && strcmp(status, "completed") ? 1
						       : 0;
	emit(ctx, "agent.tool.started",
	     json_pack("{s:O, s:O}", "tool", name, "args", args));
	emit(ctx, "agent.tool.completed",
	     json_pack("{s:o, s:o, s:I, s:i, s:o}", "tool", name, "args", args, "exit",
		       (json_int_t)exit, "duration_ms", 0, "result",
		       cx_str(item, "aggregated_output", RESULT_MAX)));
}

static void cx_turn_end(struct cx_reader *r, json_t *j, sb_harness_emit_fn emit,
			void *ctx)
{
	if (!r->open)
		return;
	r->open = 0;
	emit(ctx, "agent.turn.completed",
	     json_pack("{s:i, s:o}", "turn", r->turn, "claim",
		       cx_claim(json_object_get(j, "usage"))));
	emit(ctx, "agent.progress",
	     json_pack("{s:s, s:i}", "label", "turns", "count", r->turn));
}

static void cx_line(void *st, const char *line, size_t n, sb_harness_emit_fn emit,
		    void *ctx)
{
	struct cx_reader *r = st;
	json_t *j = json_loadb(line, n, JSON_REJECT_DUPLICATES, NULL);
	const char *type = json_string_value(json_object_get(j, "type"));
	json_t *err;

	if (!type) {
		json_decref(j);
		return;
	}
	if (!strcmp(type, "turn.started")) {
		r->open = 1;
		emit(ctx, "agent.turn.started", json_pack("{s:i}", "turn", ++r->turn));
	} else if (!strcmp(type, "turn.completed")) {
		cx_turn_end(r, j, emit, ctx);
	} else if (!strcmp(type, "item.completed")) {
		cx_item(json_object_get(j, "item"), emit, ctx);
	} else if (!strcmp(type, "turn.failed") || !strcmp(type, "error")) {
		err = json_object_get(j, "error");
		emit(ctx, "agent.message",
		     json_pack(
			 "{s:s, s:o}", "role", "error", "text",
			 cx_str(json_is_object(err) ? err : j, "message", TEXT_MAX)));
		if (!strcmp(type, "turn.failed"))
			cx_turn_end(r, j, emit, ctx);
	}
	json_decref(j);
}

static void cx_end(void *st, int status, sb_harness_emit_fn emit, void *ctx)
{
	struct cx_reader *r = st;

	(void)status;
	sb_harness_turn_cut(&r->open, r->turn, emit, ctx);
}

const struct sb_harness_ops sb_harness_codex = {
    .name = "codex",
    .argv = cx_argv,
    .env = cx_env,
    .reader_new = cx_new,
    .read_line = cx_line,
    .read_end = cx_end,
    .reader_free = cx_free,
};
