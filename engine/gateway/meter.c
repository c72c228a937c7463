/* meter.c - model requests, usage and budgets (pure; see meter.h). */
#include "engine/gateway/meter.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"

#define LINE_MAX_BYTES (1u << 20)

void sb_mreq_free(struct sb_mreq *rq)
{
	json_decref(rq->json);
	rq->json = NULL;
}

/* What the gateway does with a top-level field of a request. A field in
 * no table is dropped: it never reaches the provider. */
enum field_rule {
	FIELD_PASS,	/* forwarded as sent */
	FIELD_MODEL,	/* a string: the run's model, replaced by the upstream name */
	FIELD_MESSAGES, /* an array */
	FIELD_INPUT,	/* Responses input: a string or an array of items */
	FIELD_STREAM,	/* a boolean */
	FIELD_BOUND,	/* the output's bound: set to the grant */
	FIELD_CHOICES,	/* n: completions, each up to the bound */
	FIELD_THINKING, /* its budget_tokens kept below the bound */
	FIELD_TOOLS,	/* each tool's type must be in the API's list */
	FIELD_USAGE,	/* stream_options: replaced (include_usage on streams) */
	FIELD_REFUSE,	/* refused (400) unless null or false */
	FIELD_STORE,	/* store: refused unless false; false is always sent */
};

struct field {
	const char *name;
	enum field_rule rule;
	const char *why; /* FIELD_REFUSE: the reason given */
};

static const struct field openai_fields[] = {
    {"model", FIELD_MODEL, NULL},
    {"messages", FIELD_MESSAGES, NULL},
    {"stream", FIELD_STREAM, NULL},
    {"stream_options", FIELD_USAGE, NULL},
    {"max_completion_tokens", FIELD_BOUND, NULL},
    {"max_tokens", FIELD_BOUND, NULL},
    {"n", FIELD_CHOICES, NULL},
    {"tools", FIELD_TOOLS, NULL},
    {"tool_choice", FIELD_PASS, NULL},
    {"parallel_tool_calls", FIELD_PASS, NULL},
    {"functions", FIELD_PASS, NULL},
    {"function_call", FIELD_PASS, NULL},
    {"response_format", FIELD_PASS, NULL},
    {"temperature", FIELD_PASS, NULL},
    {"top_p", FIELD_PASS, NULL},
    {"frequency_penalty", FIELD_PASS, NULL},
    {"presence_penalty", FIELD_PASS, NULL},
    {"logit_bias", FIELD_PASS, NULL},
    {"logprobs", FIELD_PASS, NULL},
    {"top_logprobs", FIELD_PASS, NULL},
    {"stop", FIELD_PASS, NULL},
    {"seed", FIELD_PASS, NULL},
    {"reasoning_effort", FIELD_PASS, NULL},
    {"verbosity", FIELD_PASS, NULL},
    {"user", FIELD_PASS, NULL},
    {"safety_identifier", FIELD_PASS, NULL},
    {"prompt_cache_key", FIELD_PASS, NULL},
    {"metadata", FIELD_PASS, NULL},
    {"best_of", FIELD_REFUSE, "it multiplies the output"},
    {"audio", FIELD_REFUSE, "audio output is priced apart"},
    {"modalities", FIELD_REFUSE, "audio output is priced apart"},
    {"prediction", FIELD_REFUSE, "rejected predicted tokens are billed past the bound"},
    {"service_tier", FIELD_REFUSE, "it changes the price"},
    {"web_search_options", FIELD_REFUSE, "the provider's searches are priced apart"},
    {"store", FIELD_REFUSE, "it keeps the call at the provider"},
    {NULL, FIELD_PASS, NULL},
};

static const struct field responses_fields[] = {
    {"model", FIELD_MODEL, NULL},
    {"input", FIELD_INPUT, NULL},
    {"instructions", FIELD_PASS, NULL},
    {"stream", FIELD_STREAM, NULL},
    {"max_output_tokens", FIELD_BOUND, NULL},
    {"tools", FIELD_TOOLS, NULL},
    {"tool_choice", FIELD_PASS, NULL},
    {"parallel_tool_calls", FIELD_PASS, NULL},
    {"max_tool_calls", FIELD_PASS, NULL},
    {"reasoning", FIELD_PASS, NULL},
    {"text", FIELD_PASS, NULL},
    {"include", FIELD_PASS, NULL},
    {"temperature", FIELD_PASS, NULL},
    {"top_p", FIELD_PASS, NULL},
    {"top_logprobs", FIELD_PASS, NULL},
    {"truncation", FIELD_PASS, NULL},
    {"user", FIELD_PASS, NULL},
    {"safety_identifier", FIELD_PASS, NULL},
    {"prompt_cache_key", FIELD_PASS, NULL},
    {"metadata", FIELD_PASS, NULL},
    {"store", FIELD_STORE, "it keeps the call at the provider"},
    {"previous_response_id", FIELD_REFUSE,
     "the provider would add stored input past the body"},
    {"conversation", FIELD_REFUSE, "the provider would add stored input past the body"},
    {"prompt", FIELD_REFUSE, "a stored prompt adds input past the body"},
    {"background", FIELD_REFUSE, "it keeps the call at the provider"},
    {"service_tier", FIELD_REFUSE, "it changes the price"},
    {NULL, FIELD_PASS, NULL},
};

static const struct field anthropic_fields[] = {
    {"model", FIELD_MODEL, NULL},
    {"messages", FIELD_MESSAGES, NULL},
    {"stream", FIELD_STREAM, NULL},
    {"max_tokens", FIELD_BOUND, NULL},
    {"thinking", FIELD_THINKING, NULL},
    {"tools", FIELD_TOOLS, NULL},
    {"tool_choice", FIELD_PASS, NULL},
    {"system", FIELD_PASS, NULL},
    {"metadata", FIELD_PASS, NULL},
    {"stop_sequences", FIELD_PASS, NULL},
    {"temperature", FIELD_PASS, NULL},
    {"top_p", FIELD_PASS, NULL},
    {"top_k", FIELD_PASS, NULL},
    {"context_management", FIELD_PASS, NULL},
    {"output_format", FIELD_PASS, NULL},
    {"service_tier", FIELD_REFUSE, "it changes the price"},
    {"container", FIELD_REFUSE, "the provider's code execution is priced apart"},
    {"mcp_servers", FIELD_REFUSE, "the provider would call out on its own"},
    {NULL, FIELD_PASS, NULL},
};

static const struct field count_fields[] = {
    {"model", FIELD_MODEL, NULL},      {"messages", FIELD_MESSAGES, NULL},
    {"system", FIELD_PASS, NULL},      {"tools", FIELD_TOOLS, NULL},
    {"tool_choice", FIELD_PASS, NULL}, {"thinking", FIELD_THINKING, NULL},
    {NULL, FIELD_PASS, NULL},
};

/* Tool types a call may declare, by prefix: tools the client runs. Tools
 * the provider runs (web search, code execution, MCP) take several rounds
 * of output within one call and are priced apart. */
static const char *const openai_tools[] = {"function", "custom", NULL};
static const char *const responses_tools[] = {"function", "custom", "local_shell", NULL};
static const char *const anthropic_tools[] = {"custom",	   "bash_",   "text_editor_",
					      "computer_", "memory_", NULL};

static const struct field *field_of(unsigned api, const char *name)
{
	const struct field *f = api == SB_API_ANTHROPIC	  ? anthropic_fields
				: api == SB_API_RESPONSES ? responses_fields
				: api == SB_API_COUNT	  ? count_fields
							  : openai_fields;

	for (; f->name; f++)
		if (!strcmp(f->name, name))
			return f;
	return NULL;
}

/* Checks that each tool of the array v has a type of the API's list (a
 * tool without a type is the client's own; a Responses namespace, at the
 * top only, is a group of them, each checked). */
static int tools_check_at(unsigned api, json_t *v, int depth)
{
	const char *const *ok = api == SB_API_ANTHROPIC || api == SB_API_COUNT
				    ? anthropic_tools
				: api == SB_API_RESPONSES ? responses_tools
							  : openai_tools;
	const char *const *p;
	const char *type;
	json_t *t;
	size_t i;

	if (!json_is_array(v))
		return sb_seterr(SB_ERR_INVAL, "tools must be an array");
	json_array_foreach(v, i, t)
	{
		if (!json_is_object(t))
			return sb_seterr(SB_ERR_INVAL, "tools[%zu] must be an object", i);
		if (!(type = json_string_value(json_object_get(t, "type"))))
			continue;
		if (api == SB_API_RESPONSES && !strcmp(type, "namespace")) {
			/* a group of the client's tools: each is checked */
			if (depth > 0 ||
			    tools_check_at(api, json_object_get(t, "tools"), 1))
				return sb_seterr(
				    SB_ERR_INVAL,
				    "tools[%zu]: a namespace is refused by the "
				    "gateway when it holds a tool the provider "
				    "would run, or another namespace",
				    i);
			continue;
		}
		for (p = ok; *p && strncmp(type, *p, strlen(*p)); p++)
			;
		if (!*p)
			return sb_seterr(SB_ERR_INVAL,
					 "tools[%zu]: type '%.64s' is refused by the "
					 "gateway: the provider would run it",
					 i, type);
	}
	return SB_OK;
}

static int tools_check(unsigned api, json_t *v)
{
	return tools_check_at(api, v, 0);
}

/* Content parts whose input the body's bytes do not bound, refused:
 * {part type or NULL for any, its source's type or NULL for any}. */
static const struct part_rule {
	const char *type, *source, *why;
} refused_parts[] = {
    {NULL, "url", "the provider would fetch it"},
    {NULL, "file", "it names a file stored at the provider"},
    {"document", "base64", "a PDF is counted by the provider past its bytes"},
    {"file", NULL, "a file is counted by the provider past its bytes"},
    {"input_file", NULL, "a file is counted by the provider past its bytes"},
    {"input_audio", NULL, "audio input is priced apart"},
    {NULL, NULL, NULL},
};

/* The type of part p's source: Anthropic's source.type, or "url" for an
 * OpenAI image_url that is not a data: URL; NULL when it has none. */
static const char *source_of(json_t *p)
{
	json_t *img = json_object_get(p, "image_url");
	const char *url =
	    json_string_value(json_is_object(img) ? json_object_get(img, "url") : img);

	if (img)
		return url && !strncmp(url, "data:", 5) ? "data" : "url";
	if (json_object_get(p, "file_id"))
		return "file";
	return json_string_value(json_object_get(json_object_get(p, "source"), "type"));
}

/* Checks the content parts of the array v, and those within them (a
 * tool result's, a document's), against refused_parts; counts images
 * into rq->images. */
static int parts_check(json_t *v, struct sb_mreq *rq)
{
	const struct part_rule *r;
	const char *type, *src;
	json_t *p;
	size_t i;
	int rc;

	json_array_foreach(v, i, p)
	{
		type = json_string_value(json_object_get(p, "type"));
		src = source_of(p);
		for (r = refused_parts; r->why; r++)
			if ((!r->type || (type && !strcmp(type, r->type))) &&
			    (!r->source || (src && !strcmp(src, r->source))))
				return sb_seterr(SB_ERR_INVAL,
						 "a content part of type '%.32s' (source "
						 "'%.32s') is refused by the gateway: %s",
						 type ? type : "", src ? src : "",
						 r->why);
		rq->images += src && (!strcmp(src, "data") || !strcmp(src, "base64"));
		if ((rc = parts_check(json_object_get(p, "content"), rq)) ||
		    (rc = parts_check(
			 json_object_get(json_object_get(p, "source"), "content"), rq)))
			return rc;
	}
	return SB_OK;
}

/* Checks messages, an array, and the content parts of each. */
static int messages_check(json_t *v, struct sb_mreq *rq)
{
	json_t *m;
	size_t i;
	int rc;

	if (!json_is_array(v))
		return sb_seterr(SB_ERR_INVAL, "messages must be an array");
	json_array_foreach(v, i, m)
	{
		if ((rc = parts_check(json_object_get(m, "content"), rq)))
			return rc;
	}
	return SB_OK;
}

/* Checks a Responses input: a string, or an array of items, each of them
 * no reference to an item stored at the provider, the content parts of
 * its content (a message's) and output (a tool's result) checked. */
static int input_check(json_t *v, struct sb_mreq *rq)
{
	const char *type;
	json_t *it;
	size_t i;
	int rc;

	if (json_is_string(v))
		return SB_OK;
	if (!json_is_array(v))
		return sb_seterr(SB_ERR_INVAL, "input must be a string or an array");
	json_array_foreach(v, i, it)
	{
		if (!json_is_object(it))
			return sb_seterr(SB_ERR_INVAL, "input[%zu] must be an object", i);
		type = json_string_value(json_object_get(it, "type"));
		if (type && !strcmp(type, "item_reference"))
			return sb_seterr(
			    SB_ERR_INVAL,
			    "input[%zu]: an item_reference is refused by the "
			    "gateway: the provider would add stored input",
			    i);
		if ((rc = parts_check(json_object_get(it, "content"), rq)) ||
		    (rc = parts_check(json_object_get(it, "output"), rq)))
			return rc;
	}
	return SB_OK;
}

/* Anthropic betas refused, by name within the anthropic-beta header:
 * they change the price of the tokens. */
static const struct beta_rule {
	const char *name, *why;
} refused_betas[] = {
    {"context-1m", "long context is priced apart"},
    {NULL, NULL},
};

int sb_betas_check(const char *betas)
{
	for (const struct beta_rule *r = refused_betas; betas && r->name; r++)
		if (strcasestr(betas, r->name))
			return sb_seterr(
			    SB_ERR_INVAL,
			    "anthropic-beta %s is refused by the gateway: %s", r->name,
			    r->why);
	return SB_OK;
}

/* Reads the integer v into *out: from 1 to max. */
static int count_of(json_t *v, const char *key, uint64_t max, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 1 ||
	    (uint64_t)json_integer_value(v) > max)
		return sb_seterr(SB_ERR_INVAL, "%s must be an integer from 1 to %" PRIu64,
				 key, max);
	*out = (uint64_t)json_integer_value(v);
	return SB_OK;
}

/* Checks the field key (value v, not null) by its rule, notes in rq what
 * the gateway needs of it, and forwards it when the rule says so. */
static int field_take(unsigned api, struct sb_mreq *rq, const char *key, json_t *v)
{
	const struct field *f = field_of(api, key);
	uint64_t n;
	int rc = SB_OK;

	if (!f || f->rule == FIELD_USAGE)
		return SB_OK;
	switch (f->rule) {
	case FIELD_MODEL:
		if (!json_is_string(v) || json_string_length(v) == 0 ||
		    json_string_length(v) >= sizeof rq->model)
			return sb_seterr(SB_ERR_INVAL,
					 "model must be a string of 1 to %zu bytes",
					 sizeof rq->model - 1);
		memcpy(rq->model, json_string_value(v), json_string_length(v) + 1);
		break;
	case FIELD_MESSAGES: rc = messages_check(v, rq); break;
	case FIELD_INPUT: rc = input_check(v, rq); break;
	case FIELD_STREAM:
		if (!json_is_boolean(v))
			return sb_seterr(SB_ERR_INVAL, "stream must be a boolean");
		rq->stream = json_is_true(v);
		break;
	case FIELD_BOUND:
		if (rq->bound)
			return sb_seterr(SB_ERR_INVAL,
					 "%s and %s: give one of them, not both",
					 rq->bound, f->name);
		rc = count_of(v, f->name, SB_MAX_TOKENS_LIMIT, &rq->max_tokens);
		rq->bound = f->name;
		break;
	case FIELD_CHOICES:
		rc = count_of(v, f->name, SB_CHOICES_MAX, &n);
		rq->choices = (unsigned)n;
		break;
	case FIELD_THINKING:
		if (!json_is_object(v))
			return sb_seterr(SB_ERR_INVAL, "thinking must be an object");
		break;
	case FIELD_TOOLS: rc = tools_check(api, v); break;
	case FIELD_STORE:
	case FIELD_REFUSE:
		if (json_is_false(v))
			return SB_OK;
		return sb_seterr(SB_ERR_INVAL, "%s is refused by the gateway: %s",
				 f->name, f->why);
	default: break;
	}
	if (rc == SB_OK && json_object_set(rq->json, key, v))
		rc = SB_ERR_NOMEM;
	return rc;
}

int sb_mreq_parse(unsigned api, const char *body, size_t len, struct sb_mreq *rq)
{
	json_error_t jerr;
	json_t *j;
	const char *key;
	json_t *v;
	int rc = SB_OK;

	memset(rq, 0, sizeof *rq);
	rq->choices = 1;
	if (!(j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr)))
		return sb_seterr(SB_ERR_INVAL, "request body is not JSON: %s", jerr.text);
	if (!json_is_object(j)) {
		rc = sb_seterr(SB_ERR_INVAL, "request body must be a JSON object");
		goto out;
	}
	if (!(rq->json = json_object())) {
		rc = SB_ERR_NOMEM;
		goto out;
	}
	json_object_foreach(j, key, v)
	{
		if (!json_is_null(v) && (rc = field_take(api, rq, key, v)))
			goto out;
	}
	if (!rq->model[0])
		rc = sb_seterr(SB_ERR_INVAL, "model must be a string of 1 to %zu bytes",
			       sizeof rq->model - 1);
	else if (api == SB_API_RESPONSES && !json_object_get(rq->json, "input"))
		rc = sb_seterr(SB_ERR_INVAL, "input must be a string or an array");
	else if (api != SB_API_RESPONSES && !json_object_get(rq->json, "messages"))
		rc = sb_seterr(SB_ERR_INVAL, "messages must be an array");
	else if (api == SB_API_ANTHROPIC && !rq->bound)
		rc = sb_seterr(SB_ERR_INVAL, "max_tokens is required");
out:
	json_decref(j);
	if (rc)
		sb_mreq_free(rq);
	return rc;
}

/* Sets every bound of rq's output to max_tokens: its bound field (the one
 * the client gave, else max_tokens), and a thinking budget, which counts
 * within it, below it. */
static int bounds_cap(unsigned api, struct sb_mreq *rq, uint64_t max_tokens)
{
	json_t *think = json_object_get(rq->json, "thinking");
	json_t *budget = json_object_get(think, "budget_tokens");
	const char *dflt = api == SB_API_RESPONSES ? "max_output_tokens" : "max_tokens";

	if (json_object_set_new(rq->json, rq->bound ? rq->bound : dflt,
				json_integer((json_int_t)max_tokens)))
		return SB_ERR_NOMEM;
	if (json_is_integer(budget) &&
	    json_integer_value(budget) >= (json_int_t)max_tokens &&
	    json_object_set_new(think, "budget_tokens",
				json_integer((json_int_t)max_tokens - 1)))
		return SB_ERR_NOMEM;
	return SB_OK;
}

/* The gateway's edits of rq for the provider (see sb_mreq_finish). */
static int mreq_rewrite(unsigned api, struct sb_mreq *rq, const char *upstream,
			uint64_t max_tokens)
{
	json_t *j = rq->json;

	if (json_object_set_new(j, "model", json_string(upstream)))
		return SB_ERR_NOMEM;
	if (api == SB_API_COUNT)
		return SB_OK; /* no output: nothing to bound */
	if (bounds_cap(api, rq, max_tokens))
		return SB_ERR_NOMEM;
	if (api == SB_API_RESPONSES && json_object_set_new(j, "store", json_false()))
		return SB_ERR_NOMEM;
	if (api == SB_API_OPENAI && rq->stream &&
	    json_object_set_new(j, "stream_options",
				json_pack("{s:b}", "include_usage", 1)))
		return SB_ERR_NOMEM;
	return SB_OK;
}

int sb_mreq_bind(unsigned api, struct sb_mreq *rq, const struct sb_model *m,
		 size_t body_len)
{
	size_t n;

	/* a smaller grant later writes no more digits */
	if (mreq_rewrite(api, rq, m->upstream,
			 rq->max_tokens ? rq->max_tokens : m->max_output) ||
	    !(n = json_dumpb(rq->json, NULL, 0, JSON_COMPACT)))
		return SB_ERR_NOMEM;
	rq->in_bytes = (n > body_len ? n : body_len) + rq->images * SB_IMAGE_TOKENS;
	return SB_OK;
}

int sb_mreq_finish(unsigned api, struct sb_mreq *rq, const char *upstream,
		   uint64_t max_tokens, char **out, size_t *len)
{
	if (mreq_rewrite(api, rq, upstream, max_tokens))
		return SB_ERR_NOMEM;
	if (!(*out = json_dumps(rq->json, JSON_COMPACT)))
		return SB_ERR_NOMEM;
	*len = strlen(*out);
	return SB_OK;
}

static uint64_t u64_of(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_integer(v) && json_integer_value(v) > 0
		   ? (uint64_t)json_integer_value(v)
		   : 0;
}

/* a + b, or UINT64_MAX when that is more. */
static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

/* Reads a usage object of the dialect into u; returns 1 when it is one. */
static int usage_read(unsigned api, json_t *usage, struct sb_usage *u)
{
	if (!json_is_object(usage))
		return 0;
	if (api == SB_API_ANTHROPIC) {
		u->cached = u64_of(usage, "cache_read_input_tokens");
		u->input = add_sat(add_sat(u64_of(usage, "input_tokens"), u->cached),
				   u64_of(usage, "cache_creation_input_tokens"));
		u->output = u64_of(usage, "output_tokens");
	} else if (api == SB_API_RESPONSES) {
		u->input = u64_of(usage, "input_tokens");
		u->cached = u64_of(json_object_get(usage, "input_tokens_details"),
				   "cached_tokens");
		u->output = u64_of(usage, "output_tokens");
	} else {
		u->input = u64_of(usage, "prompt_tokens");
		u->cached = u64_of(json_object_get(usage, "prompt_tokens_details"),
				   "cached_tokens");
		u->output = u64_of(usage, "completion_tokens");
	}
	return 1;
}

void sb_usage_from_body(unsigned api, const char *body, size_t len, struct sb_usage *u)
{
	json_t *j = json_loadb(body, len, 0, NULL);

	memset(u, 0, sizeof *u);
	u->known = usage_read(api, json_object_get(j, "usage"), u);
	json_decref(j);
}

void sb_sse_meter_init(struct sb_sse_meter *m, unsigned api)
{
	memset(m, 0, sizeof *m);
	m->api = api;
}

void sb_sse_meter_free(struct sb_sse_meter *m)
{
	msgpack_sbuffer_destroy(&m->line);
	msgpack_sbuffer_init(&m->line);
	msgpack_sbuffer_destroy(&m->data);
	msgpack_sbuffer_init(&m->data);
}

static size_t str_bytes(json_t *v)
{
	return json_is_string(v) ? json_string_length(v) : 0;
}

/* Counts a usage report of the stream (the object usage) into m: each
 * kind of token (uncached input, cached input, output) at the most any
 * report gave, so a later report never lowers an earlier one's count (a
 * message_delta that reports output only keeps message_start's input).
 * settles: the report makes the usage known. */
static void meter_report(struct sb_sse_meter *m, json_t *usage, int settles)
{
	struct sb_usage r = {0}, *u = &m->usage;
	uint64_t un = u->input - u->cached, rn;

	if (!usage_read(m->api, usage, &r))
		return;
	rn = r.input > r.cached ? r.input - r.cached : 0;
	u->cached = r.cached > u->cached ? r.cached : u->cached;
	u->input = add_sat(rn > un ? rn : un, u->cached);
	u->output = r.output > u->output ? r.output : u->output;
	u->known |= settles;
}

/* The text bytes of an OpenAI chunk j: its choices' content and tool
 * arguments. */
static uint64_t openai_text(json_t *j)
{
	json_t *c, *call;
	uint64_t n = 0;
	size_t i, k;

	json_array_foreach(json_object_get(j, "choices"), i, c)
	{
		json_t *delta = json_object_get(c, "delta");
		n += str_bytes(json_object_get(delta, "content"));
		json_array_foreach(json_object_get(delta, "tool_calls"), k, call)
		{
			json_t *f = json_object_get(call, "function");
			n += str_bytes(json_object_get(f, "arguments"));
		}
	}
	return n;
}

/* One event of a Responses stream, of type t: the delta of any text,
 * tool input or reasoning is output; the response's end (completed,
 * incomplete or failed) reports its usage and finishes the stream. */
static void responses_event(struct sb_sse_meter *m, const char *t, json_t *j)
{
	size_t n = strlen(t);

	if (n > 6 && !strcmp(t + n - 6, ".delta"))
		m->out_bytes += str_bytes(json_object_get(j, "delta"));
	if (!strcmp(t, "response.completed") || !strcmp(t, "response.incomplete") ||
	    !strcmp(t, "response.failed")) {
		meter_report(m, json_object_get(json_object_get(j, "response"), "usage"),
			     1);
		m->finished = 1;
	}
}

/* The data of one event of the stream. */
static void meter_event(struct sb_sse_meter *m, const char *data, size_t len)
{
	const char *t;
	json_t *j, *d;

	if (len == 6 && !memcmp(data, "[DONE]", 6)) {
		m->finished = 1;
		return;
	}
	if (!(j = json_loadb(data, len, 0, NULL)))
		return;
	t = json_string_value(json_object_get(j, "type"));
	t = t ? t : "";
	if (m->api == SB_API_OPENAI) {
		m->out_bytes += openai_text(j);
		meter_report(m, json_object_get(j, "usage"), 1);
	} else if (m->api == SB_API_RESPONSES) {
		responses_event(m, t, j);
	} else if (!strcmp(t, "message_start")) {
		d = json_object_get(j, "message");
		meter_report(m, json_object_get(d, "usage"), 0);
	} else if (!strcmp(t, "content_block_delta")) {
		d = json_object_get(j, "delta");
		m->out_bytes += str_bytes(json_object_get(d, "text")) +
				str_bytes(json_object_get(d, "partial_json")) +
				str_bytes(json_object_get(d, "thinking"));
	} else if (!strcmp(t, "message_delta")) {
		meter_report(m, json_object_get(j, "usage"), 1);
	} else if (!strcmp(t, "message_stop")) {
		m->finished = 1;
	}
	json_decref(j);
}

/* One line of the stream, its end taken off: a field (only data is
 * read: its value joins the event's data), a comment (":...") or, blank,
 * the end of an event, which is then metered. */
static int meter_line(struct sb_sse_meter *m, const char *line, size_t len)
{
	const char *colon, *v;
	size_t vlen;

	if (!m->begun && len >= 3 && !memcmp(line, "\xef\xbb\xbf", 3)) {
		line += 3; /* a byte order mark */
		len -= 3;
	}
	m->begun = 1;
	if (!len) {
		if (m->data.size) /* its last LF off */
			meter_event(m, m->data.data, m->data.size - 1);
		m->data.size = 0;
		return SB_OK;
	}
	colon = memchr(line, ':', len);
	if ((colon ? (size_t)(colon - line) : len) != 4 || memcmp(line, "data", 4))
		return SB_OK;
	v = colon ? colon + 1 : line + len;
	vlen = (size_t)(line + len - v);
	if (vlen && *v == ' ') {
		v++;
		vlen--;
	}
	if (m->data.size + vlen + 1 > LINE_MAX_BYTES)
		return sb_seterr(SB_ERR_TOOBIG, "a streamed event is above 1 MiB");
	if ((vlen && msgpack_sbuffer_write(&m->data, v, vlen)) ||
	    msgpack_sbuffer_write(&m->data, "\n", 1))
		return SB_ERR_NOMEM;
	return SB_OK;
}

/* Ends the line whose last take bytes are at data (the rest, if any, in
 * m->line). */
static int line_end(struct sb_sse_meter *m, const char *data, size_t take)
{
	int rc;

	if (m->line.size == 0)
		return meter_line(m, data, take); /* whole: no copy */
	if (msgpack_sbuffer_write(&m->line, data, take))
		return SB_ERR_NOMEM;
	rc = meter_line(m, m->line.data, m->line.size);
	m->line.size = 0;
	return rc;
}

int sb_sse_meter_feed(struct sb_sse_meter *m, const char *data, size_t len)
{
	size_t take;
	int rc;

	for (; len; data += take + 1, len -= take + 1) {
		take = 0;
		if (m->cr && *data == '\n') { /* the LF of a CRLF */
			m->cr = 0;
			continue;
		}
		while (take < len && data[take] != '\n' && data[take] != '\r')
			take++;
		if (m->line.size + take > LINE_MAX_BYTES)
			return sb_seterr(SB_ERR_TOOBIG, "a streamed line is above 1 MiB");
		m->cr = take < len && data[take] == '\r';
		if (take == len) /* the line goes on in the next bytes */
			return msgpack_sbuffer_write(&m->line, data, take) ? SB_ERR_NOMEM
									   : SB_OK;
		if ((rc = line_end(m, data, take)))
			return rc;
	}
	return SB_OK;
}

uint64_t sb_sse_meter_output(const struct sb_sse_meter *m)
{
	if (m->usage.known)
		return m->usage.output;
	return (m->out_bytes + 3) / 4;
}

/* The grant of one call from what is left to pay: total (the limit less
 * what is spent) and avail (total less what calls in flight hold). */
static enum sb_grant grant_of(uint64_t total, uint64_t avail, const struct sb_model *m,
			      uint64_t in_bytes, uint64_t want_out, unsigned choices,
			      uint64_t *out_tokens, uint64_t *reservation)
{
	uint64_t in_cost = sb_model_cost(m, in_bytes, 0, 0);
	uint64_t in_cached = sb_model_cost(m, in_bytes, in_bytes, 0);
	uint64_t want = want_out ? want_out : m->max_output;
	uint64_t min_out = want < SB_MIN_OUTPUT ? want : SB_MIN_OUTPUT;
	uint64_t need1, need, grant = want;

	choices = choices < 1 ? 1 : choices > SB_CHOICES_MAX ? SB_CHOICES_MAX : choices;
	in_cost = in_cached > in_cost ? in_cached : in_cost; /* a dearer cache */
	need1 = in_cost + sb_model_cost(m, 0, 0, min_out);
	need = in_cost + sb_model_cost(m, 0, 0, min_out * choices);

	if (need1 < in_cost || total < need1)
		return SB_GRANT_SPENT;
	if (need < in_cost || total < need)
		return SB_GRANT_CHOICES;
	if (avail < need)
		return SB_GRANT_BUSY;
	if (m->out_price) {
		unsigned __int128 can = (unsigned __int128)(avail - in_cost) * 1000000 /
					m->out_price / choices;
		if (can < grant)
			grant = (uint64_t)can;
	}
	*out_tokens = grant;
	*reservation = in_cost + sb_model_cost(m, 0, 0, grant * choices);
	return SB_GRANT_OK;
}

static uint64_t budget_total(const struct sb_budget *b)
{
	return b->limit > b->spent ? b->limit - b->spent : 0;
}

static uint64_t budget_avail(const struct sb_budget *b)
{
	uint64_t total = budget_total(b);

	return total > b->reserved ? total - b->reserved : 0;
}

enum sb_grant sb_budget_reserve(struct sb_budget *b, const struct sb_model *m,
				uint64_t in_bytes, uint64_t want_out, unsigned choices,
				uint64_t *out_tokens, uint64_t *reservation)
{
	return sb_budget_reserve_pair(b, NULL, m, in_bytes, want_out, choices, out_tokens,
				      reservation, NULL);
}

enum sb_grant sb_budget_reserve_pair(struct sb_budget *a, struct sb_budget *b,
				     const struct sb_model *m, uint64_t in_bytes,
				     uint64_t want_out, unsigned choices,
				     uint64_t *out_tokens, uint64_t *reservation, int *by_b)
{
	uint64_t total = budget_total(a), avail = budget_avail(a);
	enum sb_grant g;
	int tight_total = 0, tight_avail = 0;

	if (b && budget_total(b) < total) {
		total = budget_total(b);
		tight_total = 1;
	}
	if (b && budget_avail(b) < avail) {
		avail = budget_avail(b);
		tight_avail = 1;
	}
	g = grant_of(total, avail, m, in_bytes, want_out, choices, out_tokens, reservation);
	if (by_b)
		*by_b = g == SB_GRANT_BUSY ? tight_avail : tight_total;
	if (g != SB_GRANT_OK)
		return g;
	a->reserved += *reservation;
	if (b)
		b->reserved += *reservation;
	return SB_GRANT_OK;
}

enum sb_grant sb_mreq_reserve(struct sb_budget *a, struct sb_budget *b,
			      const struct sb_model *m, const struct sb_mreq *rq,
			      uint64_t *granted, uint64_t *reservation, int *by_b)
{
	return sb_budget_reserve_pair(a, b, m, rq->in_bytes, rq->max_tokens, rq->choices,
				      granted, reservation, by_b);
}

void sb_budget_settle(struct sb_budget *b, uint64_t reservation, uint64_t cost)
{
	b->reserved -= reservation < b->reserved ? reservation : b->reserved;
	b->spent = b->spent + cost < b->spent ? UINT64_MAX : b->spent + cost;
}

const char *sb_api_error_type(unsigned api, unsigned status)
{
	switch (status) {
	case 400: return "invalid_request_error";
	case 401: return "authentication_error";
	case 402: return "budget_exceeded";
	case 403: return "permission_error";
	case 404: return "not_found_error";
	case 413: return "request_too_large";
	case 429: return "rate_limit_error";
	case 529: return "overloaded_error";
	}
	return api == SB_API_ANTHROPIC ? "api_error" : "server_error";
}
