/* meter.c - model requests, usage and budgets (pure; see meter.h). */
#include "engine/gateway/meter.h"

#include <stdlib.h>
#include <string.h>

#include "engine/error.h"

#define LINE_MAX_BYTES	 (1u << 20)
#define MAX_TOKENS_LIMIT 100000000ull

void sb_mreq_free(struct sb_mreq *rq)
{
	json_decref(rq->json);
	rq->json = NULL;
}

/* Reads the optional positive integer field key of o into *out. */
static int opt_tokens(json_t *o, const char *key, uint64_t *out)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v))
		return SB_OK;
	if (!json_is_integer(v) || json_integer_value(v) < 1 ||
	    (uint64_t)json_integer_value(v) > MAX_TOKENS_LIMIT)
		return sb_seterr(SB_ERR_INVAL, "%s must be a positive integer", key);
	*out = (uint64_t)json_integer_value(v);
	return SB_OK;
}

int sb_mreq_parse(unsigned api, const char *body, size_t len, struct sb_mreq *rq)
{
	json_error_t jerr;
	json_t *model, *stream;
	int rc;

	memset(rq, 0, sizeof *rq);
	if (!(rq->json = json_loadb(body, len, 0, &jerr)))
		return sb_seterr(SB_ERR_INVAL, "request body is not JSON: %s", jerr.text);
	if (!json_is_object(rq->json)) {
		rc = sb_seterr(SB_ERR_INVAL, "request body must be a JSON object");
		goto fail;
	}
	model = json_object_get(rq->json, "model");
	if (!json_is_string(model) || json_string_length(model) == 0 ||
	    json_string_length(model) >= sizeof rq->model) {
		rc = sb_seterr(SB_ERR_INVAL, "model must be a string of 1 to %zu bytes",
			       sizeof rq->model - 1);
		goto fail;
	}
	memcpy(rq->model, json_string_value(model), json_string_length(model) + 1);
	if (!json_is_array(json_object_get(rq->json, "messages"))) {
		rc = sb_seterr(SB_ERR_INVAL, "messages must be an array");
		goto fail;
	}
	stream = json_object_get(rq->json, "stream");
	if (stream && !json_is_boolean(stream) && !json_is_null(stream)) {
		rc = sb_seterr(SB_ERR_INVAL, "stream must be a boolean");
		goto fail;
	}
	rq->stream = json_is_true(stream);
	if (api == SB_API_ANTHROPIC) {
		if (!json_object_get(rq->json, "max_tokens")) {
			rc = sb_seterr(SB_ERR_INVAL, "max_tokens is required");
			goto fail;
		}
		rc = opt_tokens(rq->json, "max_tokens", &rq->max_tokens);
	} else {
		rc = opt_tokens(rq->json, "max_completion_tokens", &rq->max_tokens);
		if (rc == SB_OK && !rq->max_tokens)
			rc = opt_tokens(rq->json, "max_tokens", &rq->max_tokens);
	}
	if (rc)
		goto fail;
	return SB_OK;
fail:
	sb_mreq_free(rq);
	return rc;
}

int sb_mreq_finish(unsigned api, struct sb_mreq *rq, const char *upstream,
		   uint64_t max_tokens, char **out, size_t *len)
{
	json_t *j = rq->json, *opts;
	const char *field = "max_tokens";

	if (api == SB_API_OPENAI && json_object_get(j, "max_completion_tokens") &&
	    !json_is_null(json_object_get(j, "max_completion_tokens")))
		field = "max_completion_tokens";
	if (json_object_set_new(j, "model", json_string(upstream)) ||
	    json_object_set_new(j, field, json_integer((json_int_t)max_tokens)))
		return SB_ERR_NOMEM;
	if (api == SB_API_OPENAI && rq->stream) {
		opts = json_object_get(j, "stream_options");
		if (!json_is_object(opts)) {
			opts = json_object();
			if (json_object_set_new(j, "stream_options", opts))
				return SB_ERR_NOMEM;
		}
		if (json_object_set_new(opts, "include_usage", json_true()))
			return SB_ERR_NOMEM;
	}
	if (!(*out = json_dumps(j, JSON_COMPACT)))
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

/* Reads a usage object of the dialect; returns 1 when it is one. */
static int usage_read(unsigned api, json_t *usage, struct sb_usage *u)
{
	if (!json_is_object(usage))
		return 0;
	if (api == SB_API_ANTHROPIC) {
		uint64_t reads = u64_of(usage, "cache_read_input_tokens");
		uint64_t in = u64_of(usage, "input_tokens") + reads +
			      u64_of(usage, "cache_creation_input_tokens");
		/* message_delta reports output only; keep the input of message_start */
		if (in || json_object_get(usage, "input_tokens")) {
			u->input = in;
			u->cached = reads;
		}
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
}

static size_t str_bytes(json_t *v)
{
	return json_is_string(v) ? json_string_length(v) : 0;
}

/* One "data:" payload of the stream. */
static void meter_event(struct sb_sse_meter *m, const char *data, size_t len)
{
	json_t *j, *choices, *c, *calls, *call, *type;
	size_t i, k;

	if (len == 6 && !memcmp(data, "[DONE]", 6)) {
		m->finished = 1;
		return;
	}
	if (!(j = json_loadb(data, len, 0, NULL)))
		return;
	if (m->api == SB_API_OPENAI) {
		choices = json_object_get(j, "choices");
		json_array_foreach(choices, i, c)
		{
			json_t *delta = json_object_get(c, "delta");
			m->out_bytes += str_bytes(json_object_get(delta, "content"));
			calls = json_object_get(delta, "tool_calls");
			json_array_foreach(calls, k, call) m->out_bytes +=
			    str_bytes(json_object_get(json_object_get(call, "function"),
						      "arguments"));
		}
		if (usage_read(m->api, json_object_get(j, "usage"), &m->usage))
			m->usage.known = 1;
	} else {
		type = json_object_get(j, "type");
		const char *t = json_is_string(type) ? json_string_value(type) : "";
		if (!strcmp(t, "message_start")) {
			usage_read(
			    m->api,
			    json_object_get(json_object_get(j, "message"), "usage"),
			    &m->usage);
		} else if (!strcmp(t, "content_block_delta")) {
			json_t *d = json_object_get(j, "delta");
			m->out_bytes += str_bytes(json_object_get(d, "text")) +
					str_bytes(json_object_get(d, "partial_json"));
		} else if (!strcmp(t, "message_delta")) {
			if (usage_read(m->api, json_object_get(j, "usage"), &m->usage))
				m->usage.known = 1;
		} else if (!strcmp(t, "message_stop")) {
			m->finished = 1;
		}
	}
	json_decref(j);
}

static void meter_line(struct sb_sse_meter *m, const char *line, size_t len)
{
	if (len && line[len - 1] == '\r')
		len--;
	if (len < 5 || memcmp(line, "data:", 5))
		return;
	line += 5;
	len -= 5;
	if (len && *line == ' ') {
		line++;
		len--;
	}
	meter_event(m, line, len);
}

int sb_sse_meter_feed(struct sb_sse_meter *m, const char *data, size_t len)
{
	while (len) {
		const char *nl = memchr(data, '\n', len);
		size_t take = nl ? (size_t)(nl - data) : len;

		if (m->line.size + take > LINE_MAX_BYTES)
			return sb_seterr(SB_ERR_TOOBIG, "a streamed line is above 1 MiB");
		if (nl && m->line.size == 0) {
			meter_line(m, data, take); /* whole line: no copy */
		} else {
			if (take && msgpack_sbuffer_write(&m->line, data, take))
				return SB_ERR_NOMEM;
			if (nl) {
				meter_line(m, m->line.data, m->line.size);
				m->line.size = 0;
			}
		}
		if (!nl)
			break;
		data += take + 1;
		len -= take + 1;
	}
	return SB_OK;
}

uint64_t sb_sse_meter_output(const struct sb_sse_meter *m)
{
	if (m->usage.known)
		return m->usage.output;
	return (m->out_bytes + 3) / 4;
}

enum sb_grant sb_budget_reserve(struct sb_budget *b, const struct sb_model *m,
				uint64_t in_bytes, uint64_t want_out,
				uint64_t *out_tokens, uint64_t *reservation)
{
	uint64_t total = b->limit > b->spent ? b->limit - b->spent : 0;
	uint64_t avail = total > b->reserved ? total - b->reserved : 0;
	uint64_t in_cost = sb_model_cost(m, in_bytes, 0, 0);
	uint64_t want = want_out ? want_out : m->max_output;
	uint64_t min_out = want < SB_MIN_OUTPUT ? want : SB_MIN_OUTPUT;
	uint64_t need = in_cost + sb_model_cost(m, 0, 0, min_out);
	uint64_t grant = want;

	if (need < in_cost || total < need)
		return SB_GRANT_SPENT;
	if (avail < need)
		return SB_GRANT_BUSY;
	if (m->out_price) {
		unsigned __int128 can =
		    (unsigned __int128)(avail - in_cost) * 1000000 / m->out_price;
		if (can < grant)
			grant = (uint64_t)can;
	}
	*out_tokens = grant;
	*reservation = in_cost + sb_model_cost(m, 0, 0, grant);
	b->reserved += *reservation;
	return SB_GRANT_OK;
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
