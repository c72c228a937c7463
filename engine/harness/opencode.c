/* opencode.c - the OpenCode adapter: `opencode run --format json`, its
 * provider the gateway (OpenAI chat completions), and a translator of the
 * JSON lines it prints (step_start, text, tool_use, step_finish, error). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "engine/harness/adapter.h"
#include "engine/harness/common.h"

#define TEXT_MAX    2048 /* bytes of a message's text in an event */
#define SUMMARY_MAX 200	 /* bytes of a tool input's summary */
#define RESULT_MAX  1024 /* bytes of a tool's result */

static int oc_argv(const struct sb_harness_ctx *c, struct sb_harness_args *out)
{
	const char *fixed[] = {SB_ADAPT_PATH, "opencode", "--", c->harness, "run",
			       "--format", "json"};
	int rc;

	for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
		if ((rc = sb_harness_args_add(out, fixed[i])))
			return rc;
	if ((c->resume && (rc = sb_harness_args_add(out, "--continue"))) ||
	    (rc = sb_harness_args_addf(out, "--model=sanbox/%s", c->model)) ||
	    (rc = sb_harness_args_add(out, "--")) ||
	    (rc = sb_harness_args_add(out, c->prompt)))
		return rc;
	return SB_OK;
}

/* OPENCODE_CONFIG_CONTENT: the one provider, the gateway, with the run's
 * model and the virtual key from the environment; nothing fetched. */
static json_t *oc_config(const struct sb_harness_ctx *c)
{
	json_t *cfg = json_pack(
	    "{s:b, s:s, s:b, s:b, s:s, s:{s:{s:b}},"
	    " s:{s:s, s:s, s:s, s:s},"
	    " s:{s:{s:s, s:s, s:{s:s, s:s}, s:{}}}}",
	    "autoupdate", 0, "share", "disabled", "lsp", 0, "formatter", 0, "small_model", "",
	    "agent", "title", "disable", 1,
	    "permission", "edit", "allow", "bash", "allow", "webfetch", "deny",
	    "external_directory", "allow", "provider", "sanbox", "npm",
	    "@ai-sdk/openai-compatible", "name", "Sanbox gateway", "options", "baseURL",
	    c->base_url, "apiKey", "{env:OPENAI_API_KEY}", "models");
	json_t *models = json_object_get(json_object_get(json_object_get(cfg, "provider"),
							 "sanbox"),
					 "models");
	char model[128];

	if (!models)
		return cfg;
	snprintf(model, sizeof model, "sanbox/%s", c->model);
	json_object_set_new(models, c->model, json_pack("{s:s}", "name", c->model));
	json_object_set_new(cfg, "model", json_string(model));
	json_object_set_new(cfg, "small_model", json_string(model));
	return cfg;
}

static int oc_env(const struct sb_harness_ctx *c, struct sb_harness_args *out)
{
	static const char *const off[] = {
	    "OPENCODE_DISABLE_AUTOUPDATE=true",	  "OPENCODE_DISABLE_DEFAULT_PLUGINS=true",
	    "OPENCODE_DISABLE_MODELS_FETCH=true", "OPENCODE_DISABLE_LSP_DOWNLOAD=true",
	    "OPENCODE_DISABLE_SHARE=true",	  "OPENCODE_DISABLE_CLAUDE_CODE=true",
	    "OPENCODE_DISABLE_TELEMETRY=true",
	};
	json_t *cfg = oc_config(c);
	char *s = cfg ? json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	int rc = s ? SB_OK : SB_ERR_NOMEM;

	for (size_t i = 0; rc == SB_OK && i < sizeof off / sizeof off[0]; i++)
		rc = sb_harness_args_add(out, off[i]);
	if (rc == SB_OK)
		rc = sb_harness_args_addf(out, "OPENCODE_CONFIG_CONTENT=%s", s);
	free(s);
	json_decref(cfg);
	return rc;
}

/* --- the translator --- */

struct oc_reader {
	unsigned turn;	 /* steps started */
	unsigned tools;	 /* tool calls seen */
	int open;	 /* a step started and not finished */
};

static void *oc_new(void)
{
	return calloc(1, sizeof(struct oc_reader));
}

static void oc_free(void *st)
{
	free(st);
}

/* step_finish's tokens and cost: what OpenCode says it spent (a claim). */
static json_t *oc_claim(json_t *part)
{
	json_t *tok = json_object_get(part, "tokens"), *cost = json_object_get(part, "cost");
	json_t *claim = json_object();

	if (!claim)
		return NULL;
	if (json_is_integer(json_object_get(tok, "input")))
		json_object_set(claim, "input_tokens", json_object_get(tok, "input"));
	if (json_is_integer(json_object_get(tok, "output")))
		json_object_set(claim, "output_tokens", json_object_get(tok, "output"));
	if (json_is_number(cost))
		json_object_set_new(claim, "cost_usd", json_real(json_number_value(cost)));
	return claim;
}

/* tool_use: a started and a completed call, with the input's summary. */
static void oc_tool(struct oc_reader *r, json_t *part, sb_harness_emit_fn emit, void *ctx)
{
	json_t *state = json_object_get(part, "state");
	json_t *tool = json_object_get(part, "tool"), *in = json_object_get(state, "input");
	json_t *t0 = json_object_get(json_object_get(state, "time"), "start");
	json_t *t1 = json_object_get(json_object_get(state, "time"), "end");
	const char *status = json_string_value(json_object_get(state, "status"));
	const char *out = json_string_value(json_object_get(state, "output"));
	const char *name = json_is_string(tool) ? json_string_value(tool) : "tool";
	long long ms = json_is_integer(t0) && json_is_integer(t1)
			   ? json_integer_value(t1) - json_integer_value(t0)
			   : 0;

	if (!status || (strcmp(status, "completed") && strcmp(status, "error")))
		return; /* pending, running: the completed one comes */
	r->tools++;
	emit(ctx, "agent.tool.started",
	     json_pack("{s:o, s:o}", "tool", sb_harness_text(name, strlen(name), 64), "args",
		       sb_harness_summary(in, SUMMARY_MAX)));
	if (!out)
		out = json_string_value(json_object_get(state, "error"));
	emit(ctx, "agent.tool.completed",
	     json_pack("{s:o, s:o, s:i, s:I, s:o}", "tool",
		       sb_harness_text(name, strlen(name), 64), "args",
		       sb_harness_summary(in, SUMMARY_MAX), "exit", strcmp(status, "completed") != 0,
		       "duration_ms", (json_int_t)(ms > 0 ? ms : 0), "result",
		       sb_harness_text(out ? out : "", out ? strlen(out) : 0, RESULT_MAX)));
}

static void oc_step(struct oc_reader *r, const char *type, json_t *part,
		    sb_harness_emit_fn emit, void *ctx)
{
	if (!strcmp(type, "step_start")) {
		r->open = 1;
		emit(ctx, "agent.turn.started", json_pack("{s:i}", "turn", ++r->turn));
	} else if (r->open) {
		r->open = 0;
		emit(ctx, "agent.turn.completed",
		     json_pack("{s:i, s:o}", "turn", r->turn, "claim", oc_claim(part)));
		emit(ctx, "agent.progress",
		     json_pack("{s:s, s:i}", "label", "steps", "count", r->turn));
	}
}

static void oc_line(void *st, const char *line, size_t n, sb_harness_emit_fn emit, void *ctx)
{
	struct oc_reader *r = st;
	json_t *j = json_loadb(line, n, JSON_REJECT_DUPLICATES, NULL);
	json_t *part = json_object_get(j, "part");
	const char *type = json_string_value(json_object_get(j, "type"));
	const char *text;

	if (!type) { /* not one of its lines: its output has it anyway */
		json_decref(j);
		return;
	}
	if (!strcmp(type, "step_start") || !strcmp(type, "step_finish")) {
		oc_step(r, type, part, emit, ctx);
	} else if (!strcmp(type, "tool_use")) {
		oc_tool(r, part, emit, ctx);
	} else if (!strcmp(type, "text") &&
		   (text = json_string_value(json_object_get(part, "text")))) {
		emit(ctx, "agent.message",
		     json_pack("{s:s, s:o}", "role", "assistant", "text",
			       sb_harness_text(text, strlen(text), TEXT_MAX)));
	} else if (!strcmp(type, "error")) {
		json_t *e = json_object_get(j, "error");
		char *s = json_dumps(e ? e : j, JSON_COMPACT | JSON_ENCODE_ANY);
		emit(ctx, "agent.message",
		     json_pack("{s:s, s:o}", "role", "error", "text",
			       sb_harness_text(s ? s : "", s ? strlen(s) : 0, TEXT_MAX)));
		free(s);
	}
	json_decref(j);
}

static void oc_end(void *st, int status, sb_harness_emit_fn emit, void *ctx)
{
	struct oc_reader *r = st;

	sb_harness_turn_cut(&r->open, r->turn, emit, ctx);
}

const struct sb_harness_ops sb_harness_opencode = {
    .name = "opencode",
    .argv = oc_argv,
    .env = oc_env,
    .reader_new = oc_new,
    .read_line = oc_line,
    .read_end = oc_end,
    .reader_free = oc_free,
};
