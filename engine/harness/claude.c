/* claude.c - the Claude Code adapter: `claude -p --output-format
 * stream-json --verbose`, its model endpoint the gateway (the Anthropic
 * messages API, ANTHROPIC_BASE_URL and the virtual key as
 * ANTHROPIC_API_KEY, which every run gets), and a translator of the JSON
 * lines it prints (system, assistant, user, result). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "engine/harness/adapter.h"
#include "engine/harness/common.h"

#define TEXT_MAX    2048 /* bytes of a message's text in an event */
#define SUMMARY_MAX 200	 /* bytes of a tool input's summary */
#define RESULT_MAX  1024 /* bytes of a tool's result */
#define PENDING_MAX 16	 /* tool calls awaiting their results */
#define ID_MAX	    64

static int cc_argv(const struct sb_harness_ctx *c, struct sb_harness_args *out)
{
	const char *fixed[] = {
	    SB_ADAPT_PATH, "claude-code", "--",
	    c->harness,	   "-p",	  "--output-format",
	    "stream-json", "--verbose",	  "--dangerously-skip-permissions",
	    "--model",	   c->model};
	int rc;

	for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
		if ((rc = sb_harness_args_add(out, fixed[i])))
			return rc;
	if ((c->resume && (rc = sb_harness_args_add(out, "--continue"))) ||
	    (rc = sb_harness_args_add(out, "--")) ||
	    (rc = sb_harness_args_add(out, c->prompt)))
		return rc;
	return SB_OK;
}

static int cc_env(const struct sb_harness_ctx *c, struct sb_harness_args *out)
{
	static const char *const env[] = {
	    "IS_SANDBOX=1", /* the microVM is the sandbox: root may skip permissions */
	    "DISABLE_AUTOUPDATER=1",
	    "DISABLE_TELEMETRY=1",
	    "DISABLE_ERROR_REPORTING=1",
	    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	};
	int rc;

	(void)c;
	for (size_t i = 0; i < sizeof env / sizeof env[0]; i++)
		if ((rc = sb_harness_args_add(out, env[i])))
			return rc;
	return SB_OK;
}

/* --- the translator --- */

struct cc_pending {
	char id[ID_MAX];
	json_t *tool, *args; /* references held */
};

struct cc_reader {
	unsigned turn;	  /* turns (assistant messages) started */
	int open;	  /* a turn started and not ended */
	char msg[ID_MAX]; /* the id of the turn's message */
	struct cc_pending pending[PENDING_MAX];
};

static void *cc_new(void)
{
	return calloc(1, sizeof(struct cc_reader));
}

static void cc_drop(struct cc_pending *p)
{
	json_decref(p->tool);
	json_decref(p->args);
	memset(p, 0, sizeof *p);
}

static void cc_free(void *st)
{
	struct cc_reader *r = st;

	for (size_t i = 0; r && i < PENDING_MAX; i++)
		cc_drop(&r->pending[i]);
	free(r);
}

static json_t *cc_str(const char *s, size_t max)
{
	return sb_harness_text(s ? s : "", s ? strlen(s) : 0, max);
}

/* Ends the open turn, with claim (a reference taken) or without. */
static void cc_turn_end(struct cc_reader *r, json_t *claim, sb_harness_emit_fn emit,
			void *ctx)
{
	if (!r->open) {
		json_decref(claim);
		return;
	}
	r->open = 0;
	emit(ctx, "agent.turn.completed",
	     claim ? json_pack("{s:i, s:o}", "turn", r->turn, "claim", claim)
		   : json_pack("{s:i}", "turn", r->turn));
	emit(ctx, "agent.progress",
	     json_pack("{s:s, s:i}", "label", "turns", "count", r->turn));
}

/* A tool_use block: started now, completed when its result comes. */
static void cc_tool_use(struct cc_reader *r, json_t *b, sb_harness_emit_fn emit,
			void *ctx)
{
	const char *id = json_string_value(json_object_get(b, "id"));
	const char *name = json_string_value(json_object_get(b, "name"));
	struct cc_pending *p = NULL;

	for (size_t i = 0; !p && i < PENDING_MAX; i++)
		if (!r->pending[i].id[0])
			p = &r->pending[i];
	if (!p)
		p = &r->pending[0]; /* the oldest slot: its result is lost */
	cc_drop(p);
	snprintf(p->id, sizeof p->id, "%s", id ? id : "?");
	p->tool = cc_str(name ? name : "tool", 64);
	p->args = sb_harness_summary(json_object_get(b, "input"), SUMMARY_MAX);
	emit(ctx, "agent.tool.started",
	     json_pack("{s:O, s:O}", "tool", p->tool, "args", p->args));
}

/* The text of a tool_result's content: a string or text blocks. */
static json_t *cc_result_text(json_t *content)
{
	json_t *b;
	size_t i, n = 0;
	char buf[RESULT_MAX + 1];

	if (json_is_string(content))
		return cc_str(json_string_value(content), RESULT_MAX);
	json_array_foreach(content, i, b)
	{
		const char *t = json_string_value(json_object_get(b, "text"));
		n += (size_t)snprintf(buf + n, sizeof buf - n, "%s", t ? t : "");
		if (n >= sizeof buf - 1)
			break;
	}
	buf[n < sizeof buf ? n : sizeof buf - 1] = 0;
	return cc_str(buf, RESULT_MAX);
}

static void cc_tool_result(struct cc_reader *r, json_t *b, sb_harness_emit_fn emit,
			   void *ctx)
{
	const char *id = json_string_value(json_object_get(b, "tool_use_id"));

	for (size_t i = 0; id && i < PENDING_MAX; i++) {
		struct cc_pending *p = &r->pending[i];
		if (!p->id[0] || strcmp(p->id, id))
			continue;
		emit(ctx, "agent.tool.completed",
		     json_pack("{s:O, s:O, s:i, s:i, s:o}", "tool", p->tool, "args",
			       p->args, "exit",
			       json_is_true(json_object_get(b, "is_error")),
			       "duration_ms", 0, "result",
			       cc_result_text(json_object_get(b, "content"))));
		cc_drop(p);
		return;
	}
}

/* An assistant line: one content block of a message; a new message id
 * is a new turn. */
static void cc_assistant(struct cc_reader *r, json_t *msg, sb_harness_emit_fn emit,
			 void *ctx)
{
	const char *id = json_string_value(json_object_get(msg, "id"));
	json_t *b;
	size_t i;

	if (!r->open || !id || strcmp(id, r->msg)) {
		cc_turn_end(r, NULL, emit, ctx);
		r->open = 1;
		snprintf(r->msg, sizeof r->msg, "%s", id ? id : "");
		emit(ctx, "agent.turn.started", json_pack("{s:i}", "turn", ++r->turn));
	}
	json_array_foreach(json_object_get(msg, "content"), i, b)
	{
		const char *type = json_string_value(json_object_get(b, "type"));
		if (type && !strcmp(type, "text"))
			emit(ctx, "agent.message",
			     json_pack(
				 "{s:s, s:o}", "role", "assistant", "text",
				 cc_str(json_string_value(json_object_get(b, "text")),
					TEXT_MAX)));
		else if (type && !strcmp(type, "tool_use"))
			cc_tool_use(r, b, emit, ctx);
	}
}

/* The result line: the last turn ends with what Claude Code says it spent
 * (a claim); an error result is an error message. */
static void cc_result(struct cc_reader *r, json_t *j, sb_harness_emit_fn emit, void *ctx)
{
	json_t *u = json_object_get(j, "usage"),
	       *cost = json_object_get(j, "total_cost_usd");
	json_t *claim = json_object();
	const char *res = json_string_value(json_object_get(j, "result"));

	if (claim && json_is_integer(json_object_get(u, "input_tokens")))
		json_object_set(claim, "input_tokens",
				json_object_get(u, "input_tokens"));
	if (claim && json_is_integer(json_object_get(u, "output_tokens")))
		json_object_set(claim, "output_tokens",
				json_object_get(u, "output_tokens"));
	if (claim && json_is_number(cost))
		json_object_set_new(claim, "cost_usd",
				    json_real(json_number_value(cost)));
	if (json_is_true(json_object_get(j, "is_error")))
		emit(ctx, "agent.message",
		     json_pack(
			 "{s:s, s:o}", "role", "error", "text",
			 cc_str(res ? res
				    : json_string_value(json_object_get(j, "subtype")),
				TEXT_MAX)));
	cc_turn_end(r, claim, emit, ctx);
}

static void cc_line(void *st, const char *line, size_t n, sb_harness_emit_fn emit,
		    void *ctx)
{
	struct cc_reader *r = st;
	json_t *j = json_loadb(line, n, JSON_REJECT_DUPLICATES, NULL);
	const char *type = json_string_value(json_object_get(j, "type"));
	json_t *b;
	size_t i;

	if (!type) {
		json_decref(j);
		return;
	}
	if (!strcmp(type, "assistant")) {
		cc_assistant(r, json_object_get(j, "message"), emit, ctx);
	} else if (!strcmp(type, "user")) {
		json_array_foreach(
		    json_object_get(json_object_get(j, "message"), "content"), i, b)
		{
			const char *bt = json_string_value(json_object_get(b, "type"));
			if (bt && !strcmp(bt, "tool_result"))
				cc_tool_result(r, b, emit, ctx);
		}
	} else if (!strcmp(type, "result")) {
		cc_result(r, j, emit, ctx);
	}
	json_decref(j);
}

static void cc_end(void *st, int status, sb_harness_emit_fn emit, void *ctx)
{
	struct cc_reader *r = st;

	(void)status;
	sb_harness_turn_cut(&r->open, r->turn, emit, ctx);
}

const struct sb_harness_ops sb_harness_claude_code = {
    .name = "claude-code",
    .argv = cc_argv,
    .env = cc_env,
    .reader_new = cc_new,
    .read_line = cc_line,
    .read_end = cc_end,
    .reader_free = cc_free,
};
