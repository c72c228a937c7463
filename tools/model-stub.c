/* model-stub.c - sanbox-model-stub: a scripted model provider for tests.
 *
 * A real HTTP server (libmicrohttpd, one thread per connection) that speaks
 * the OpenAI chat completions API, OpenAI's Responses API and the Anthropic
 * messages API, stream and non-stream (and Anthropic's count_tokens: the
 * input counted as below), and answers from a script instead of a model:
 *
 *   sanbox-model-stub [--listen HOST:PORT] [--script FILE]
 *                     [--script-dir DIR] [--log FILE]
 *
 * HOST must be a loopback address; the default 127.0.0.1:0 binds an
 * ephemeral port. Once bound the stub prints `listening HOST:PORT` on stdout
 * and serves until SIGTERM or SIGINT.
 *
 * Model `stub/NAME` (or plain `NAME`) answers from DIR/NAME.json; DIR is
 * --script-dir, else $SANBOX_STUB_DIR, else the first of EXE/../tools/stub
 * and EXE/../../tools/stub that exists (EXE = the binary's directory, so
 * build/ and build/<name>/ both find the source tree's scripts). --script
 * FILE answers every model from FILE.
 *
 * A script is {"turns": [turn...]}; a turn has the optional fields text,
 * tool_calls [{name, arguments} or {use, arguments}], usage {input_tokens,
 * output_tokens}, delay_ms, chunk_delay_ms, chunks, status, error, ignore_max_tokens. The
 * reply to a request is turns[k], k = the number of assistant messages in the request (in
 * a Responses input: the runs of the model's own items, assistant messages, function,
 * custom and local shell calls and reasoning; the last turn repeats), so the answer is
 * stateless and any number of runs can share one stub. Tokens not given by the turn are
 * counted as ceil(bytes / 4): the input from the string contents of the messages, the
 * output from the answer text plus the tool arguments as compact JSON. When the output
 * exceeds the request's max_tokens it is cut to max_tokens (text cut to 4 bytes a token,
 * tool calls dropped) and the finish reason is length / max_tokens, unless
 * the turn sets ignore_max_tokens (a provider that runs past the limit).
 * An OpenAI request that gives both max_completion_tokens and max_tokens is
 * held to the larger (where a real provider refuses it or honours either,
 * the stub is the worst a gateway can meet), and one with "n": N (1 to 128)
 * gets N choices, each the whole answer, and reports N times the output
 * tokens, as OpenAI does.
 *
 * A call {use: "write", arguments: {path, content}} or {use: "run",
 * arguments: {command}} is made from the tools the request offers (so one
 * script drives any harness): the first tool named write (else whose name
 * holds it; then create, edit) that has a property named like path/file,
 * or bash (then shell, exec, command); each of its schema's
 * properties named like path/file, content/text or command/cmd takes that
 * value (a command property of type array gets ["bash", "-lc", command]),
 * another required string property the words "scripted step". A write no
 * offered tool serves is made with the run tool, as the command
 * printf '%s' 'CONTENT' > 'PATH' (quoted for the shell); a use that no
 * offered tool serves is left out of the answer.
 *
 * --log FILE (else $SANBOX_STUB_LOG) appends one JSON line per request: {path, model,
 * auth, stream, input_tokens, output_tokens, status}; auth is the Authorization header,
 * or x-api-key when there is none, so tests can see which key arrived.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/gateway/meter.h"
#include "engine/text.h"

#define STUB_BODY_MAX (16u << 20) /* largest request body accepted */

enum dialect { DIALECT_OPENAI, DIALECT_ANTHROPIC, DIALECT_RESPONSES };

/* Settings fixed at start-up, read by every connection thread. */
static struct {
	const char *script_file; /* --script, or NULL */
	char script_dir[PATH_MAX];
	int log_fd; /* --log, or -1 */
} stub;

/* One request body being received. */
struct stub_req {
	char *body;
	size_t len;
	int too_big;
};

/* The scripted answer to one request, resolved from the script. */
struct answer {
	enum dialect dialect;
	const char *model; /* borrowed from the request */
	int turn;	   /* k: index into the script's turns */
	char *text;	   /* answer text (owned), possibly cut */
	size_t text_len;
	json_t *tools; /* tool_calls array (owned reference) or NULL */
	json_int_t in_tok, out_tok;
	int truncated; /* output cut at max_tokens */
	long chunks, chunk_delay_ms;
	int include_usage; /* OpenAI stream_options.include_usage */
	int n;		   /* OpenAI choices; each is the whole answer */
	int index;	   /* the choice a stream event is built for */
};

/* A streamed (SSE) response: all events are built before the first byte. */
struct sse {
	char **piece;
	unsigned char *delay; /* sleep chunk_delay_ms before this piece */
	size_t n, cap, i, off;
	long delay_ms;
	long seq; /* Responses: the next event's sequence_number */
};

/* ---- small helpers ---- */

static void stub_sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (ms > 0 && nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static json_int_t ceil4(size_t bytes)
{
	return (json_int_t)((bytes + 3) / 4);
}

/* Bytes of the string contents of a message's content: a string, an array
 * of parts, or a part object (its "text" and "content" fields). */
static size_t content_bytes(json_t *v)
{
	size_t i, n = 0;
	json_t *e;

	if (json_is_string(v))
		return json_string_length(v);
	if (json_is_array(v)) {
		json_array_foreach(v, i, e) n += content_bytes(e);
		return n;
	}
	if (json_is_object(v))
		return content_bytes(json_object_get(v, "text")) +
		       content_bytes(json_object_get(v, "content"));
	return 0;
}

/* The error body of dialect d (the caller owns the reference). */
static json_t *error_body(enum dialect d, int status, const char *msg)
{
	const char *type = sb_api_error_type(
	    d == DIALECT_ANTHROPIC ? SB_API_ANTHROPIC : SB_API_OPENAI, (unsigned)status);

	if (d == DIALECT_ANTHROPIC)
		return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
				 type, "message", msg);
	return json_pack("{s:{s:s, s:s, s:n, s:n}}", "error", "message", msg, "type",
			 type, "param", "code");
}

static void log_request(const char *path, const char *model, const char *auth, int stream,
			json_int_t in, json_int_t out, int status)
{
	json_t *o;
	char *s, *line;

	if (stub.log_fd < 0)
		return;
	o = json_pack("{s:s, s:s?, s:s?, s:b, s:I, s:I, s:i}", "path", path, "model",
		      model, "auth", auth, "stream", stream, "input_tokens", in,
		      "output_tokens", out, "status", status);
	s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	if (s && asprintf(&line, "%s\n", s) >= 0) {
		/* One write per line: O_APPEND keeps lines whole. */
		if (write(stub.log_fd, line, strlen(line)) < 0)
			perror("sanbox-model-stub: log");
		free(line);
	}
	free(s);
	json_decref(o);
}

/* Queues a JSON response (takes the reference to body). */
static enum MHD_Result send_json(struct MHD_Connection *c, int status, json_t *body)
{
	char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
	struct MHD_Response *r;
	enum MHD_Result ret;

	json_decref(body);
	if (!s)
		return MHD_NO;
	r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(s);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", "application/json");
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, enum dialect d, int status,
				  const char *msg)
{
	json_t *body = error_body(d, status, msg);

	/* msg may quote invalid UTF-8 from the request: jansson refuses it. */
	return send_json(c, status,
			 body ? body : error_body(d, status, "invalid request"));
}

/* ---- scripts ---- */

/* Loads the script for model into *out (the caller frees). Fails with
 * SB_ERR_NOTFOUND for an unknown model, SB_ERR_CORRUPT for a bad script. */
static int script_load(const char *model, json_t **out)
{
	char path[PATH_MAX];
	const char *name = model;
	json_error_t jerr;
	json_t *s, *turns;

	if (stub.script_file) {
		snprintf(path, sizeof(path), "%s", stub.script_file);
	} else {
		if (strncmp(name, "stub/", 5) == 0)
			name += 5;
		if (!*name || *name == '.' ||
		    strspn(name,
			   "abcdefghijklmnopqrstuvwxyz"
			   "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != strlen(name))
			return sb_seterr(SB_ERR_NOTFOUND, "model not found: %s", model);
		if (snprintf(path, sizeof(path), "%s/%s.json", stub.script_dir, name) >=
			(int)sizeof(path) ||
		    access(path, R_OK) < 0)
			return sb_seterr(SB_ERR_NOTFOUND, "model not found: %s", model);
	}
	s = json_load_file(path, 0, &jerr);
	if (!s)
		return sb_seterr(SB_ERR_CORRUPT, "script %s: %s", path, jerr.text);
	turns = json_object_get(s, "turns");
	if (!json_is_array(turns) || json_array_size(turns) == 0) {
		json_decref(s);
		return sb_seterr(SB_ERR_CORRUPT,
				 "script %s: \"turns\" must be a non-empty array", path);
	}
	*out = s;
	return 0;
}

static long turn_long(json_t *turn, const char *key, long dflt)
{
	json_t *v = json_object_get(turn, key);

	return json_is_integer(v) ? (long)json_integer_value(v) : dflt;
}

/* ---- tool calls chosen from the tools a request offers ---- */

/* Name and parameter schema of offered tool t: OpenAI's {type: function,
 * function: {name, parameters}} or Anthropic's {name, input_schema}. */
static const char *offered_tool(json_t *t, json_t **schema)
{
	json_t *f = json_object_get(t, "function");

	if (json_is_object(f)) {
		*schema = json_object_get(f, "parameters");
		return json_string_value(json_object_get(f, "name"));
	}
	*schema = json_object_get(t, "input_schema");
	if (!*schema) /* Responses: {type: function, name, parameters} */
		*schema = json_object_get(t, "parameters");
	return json_string_value(json_object_get(t, "name"));
}

static int name_has(const char *name, const char *const *words)
{
	for (; *words; words++)
		if (strcasestr(name, *words))
			return 1;
	return 0;
}

static const char *const path_w[] = {"path", "file", NULL};

/* Whether schema has a property named like a path. */
static int has_path(json_t *schema)
{
	const char *k;
	json_t *p;

	json_object_foreach(json_object_get(schema, "properties"), k, p)
	{
		if (name_has(k, path_w))
			return 1;
	}
	return 0;
}

/* The offered tool that does use ("write": writes a file, one with a path
 * property; "run": runs a command), or NULL. */
static json_t *tool_for(json_t *req, const char *use, json_t **schema)
{
	static const char *const write_words[] = {"write", "create", "edit", NULL};
	static const char *const run_words[] = {"bash", "shell", "exec", "command", NULL};
	const char *const *words = !strcmp(use, "write") ? write_words : run_words;
	json_t *t;
	size_t i;

	/* a tool named exactly so first, then one whose name holds it */
	for (int pass = 0; pass < 8 && words[pass / 2]; pass++)
		json_array_foreach(json_object_get(req, "tools"), i, t)
		{
			const char *name = offered_tool(t, schema);
			const char *const one[] = {words[pass / 2], NULL};
			if (name &&
			    (pass % 2 ? name_has(name, one)
				      : !strcasecmp(name, words[pass / 2])) &&
			    (words == run_words || has_path(*schema)))
				return t;
		}
	return NULL;
}

/* The arguments for the offered tool's schema from the script's abstract
 * ones ({path, content} or {command}): each property named like one of
 * them takes its value; another required string property gets a word. */
static json_t *tool_args_for(json_t *schema, json_t *abstract)
{
	static const char *const content_w[] = {"content", "text", NULL},
				 *const cmd_w[] = {"command", "cmd", NULL};
	json_t *props = json_object_get(schema, "properties"), *out = json_object(), *v,
	       *p;
	const char *k;
	size_t i;

	json_object_foreach(props, k, p)
	{
		const char *type = json_string_value(json_object_get(p, "type"));
		json_t *cmd = json_object_get(abstract, "command");
		v = name_has(k, cmd_w) && cmd ? json_incref(cmd)
		    : name_has(k, path_w) ? json_incref(json_object_get(abstract, "path"))
		    : name_has(k, content_w)
			? json_incref(json_object_get(abstract, "content"))
			: NULL;
		if (v && type && !strcmp(type, "array") && json_is_string(v)) {
			json_t *a = json_pack("[s, s, O]", "bash", "-lc", v);
			json_decref(v);
			v = a;
		}
		if (v)
			json_object_set_new(out, k, v);
	}
	json_array_foreach(json_object_get(schema, "required"), i, v)
	{ /* each required string property gets a word */
		const char *name = json_string_value(v);
		json_t *type =
		    json_object_get(json_object_get(props, name ? name : ""), "type");
		if (name && !json_object_get(out, name) && json_is_string(type) &&
		    !strcmp(json_string_value(type), "string"))
			json_object_set_new(out, name, json_string("scripted step"));
	}
	return out;
}

/* A write {path, content} as run arguments: {command: "printf '%s' C > P"},
 * C and P quoted for the shell. */
static json_t *write_as_run(json_t *args)
{
	const char *parts[] = {json_string_value(json_object_get(args, "content")),
			       json_string_value(json_object_get(args, "path"))};
	char *s = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&s, &n);
	json_t *out;

	if (!f)
		return NULL;
	fputs("printf '%s' ", f);
	for (int k = 0; k < 2; k++) {
		fputs(k ? " > '" : "'", f);
		for (const char *q = parts[k] ? parts[k] : ""; *q; q++)
			if (*q == '\'')
				fputs("'\\''", f);
			else
				fputc(*q, f);
		fputc('\'', f);
	}
	fclose(f);
	out = json_pack("{s:s}", "command", s);
	free(s);
	return out;
}

/* A copy of turn whose calls {use, arguments} are made concrete from the
 * tools req offers: a write no tool serves is made with the run tool, as a
 * shell command; a use no offered tool serves is left out. */
static json_t *turn_resolve(json_t *turn, json_t *req)
{
	json_t *out = json_deep_copy(turn), *calls = json_array(), *call, *schema, *t;
	size_t i;

	json_array_foreach(json_object_get(turn, "tool_calls"), i, call)
	{
		const char *use = json_string_value(json_object_get(call, "use"));
		if (!use) {
			json_array_append(calls, call);
		} else if ((t = tool_for(req, use, &schema))) {
			json_array_append_new(
			    calls,
			    json_pack("{s:s, s:o}", "name", offered_tool(t, &schema),
				      "arguments",
				      tool_args_for(schema,
						    json_object_get(call, "arguments"))));
		} else if (!strcmp(use, "write") && (t = tool_for(req, "run", &schema))) {
			json_t *run = write_as_run(json_object_get(call, "arguments"));
			json_array_append_new(calls,
					      json_pack("{s:s, s:o}", "name",
							offered_tool(t, &schema), "arguments",
							tool_args_for(schema, run)));
			json_decref(run);
		}
	}
	json_object_set_new(out, "tool_calls", calls);
	return out;
}

/* Fills a from the turn: text, tools, tokens, truncation at max_tokens
 * (0 = no limit). in_bytes is the request's content size. */
static int answer_fill(struct answer *a, json_t *turn, size_t in_bytes,
		       json_int_t max_tokens)
{
	json_t *usage = json_object_get(turn, "usage");
	json_t *text = json_object_get(turn, "text");
	json_t *tools = json_object_get(turn, "tool_calls");
	json_t *call, *v;
	size_t i, out_bytes;

	a->text_len = json_is_string(text) ? json_string_length(text) : 0;
	a->text = strndup(a->text_len ? json_string_value(text) : "", a->text_len);
	if (!a->text)
		return SB_ERR_NOMEM;
	out_bytes = a->text_len;
	if (json_is_array(tools) && json_array_size(tools) > 0) {
		json_array_foreach(tools, i, call)
		{
			json_t *args = json_object_get(call, "arguments");
			char *s;

			if (!json_is_string(json_object_get(call, "name")) ||
			    (args && !json_is_object(args)))
				return sb_seterr(SB_ERR_CORRUPT,
						 "script: tool call %zu needs "
						 "a name and object arguments",
						 i);
			s = args ? json_dumps(args, JSON_COMPACT) : NULL;
			out_bytes += s ? strlen(s) : 2;
			free(s);
		}
		a->tools = json_incref(tools);
	}
	v = json_object_get(usage, "input_tokens");
	a->in_tok = json_is_integer(v) ? json_integer_value(v) : ceil4(in_bytes);
	v = json_object_get(usage, "output_tokens");
	a->out_tok = json_is_integer(v) ? json_integer_value(v) : ceil4(out_bytes);
	if (max_tokens > 0 && a->out_tok > max_tokens &&
	    !json_is_true(json_object_get(turn, "ignore_max_tokens"))) {
		a->out_tok = max_tokens;
		a->truncated = 1;
		a->text_len = sb_utf8_cut(a->text, a->text_len, (size_t)max_tokens * 4);
		a->text[a->text_len] = '\0';
		json_decref(a->tools);
		a->tools = NULL;
	}
	a->chunks = turn_long(turn, "chunks", 1);
	if (a->chunks < 1)
		a->chunks = 1;
	a->chunk_delay_ms = turn_long(turn, "chunk_delay_ms", 0);
	return 0;
}

/* Whether item, of a Responses input, is the model's own output. */
static int responses_from_model(json_t *item)
{
	static const char *const types[] = {"function_call", "custom_tool_call",
					    "local_shell_call", "reasoning", NULL};
	const char *role = json_string_value(json_object_get(item, "role"));
	const char *type = json_string_value(json_object_get(item, "type"));

	if (role)
		return !strcmp(role, "assistant");
	for (const char *const *t = types; type && *t; t++)
		if (!strcmp(type, *t))
			return 1;
	return 0;
}

/* A Responses request's turn (the runs of the model's own items in its
 * input) and input bytes (instructions, contents and tool outputs). */
static void responses_input(json_t *req, struct answer *a, size_t *in_bytes)
{
	json_t *input = json_object_get(req, "input"), *it;
	int prev = 0, now;
	size_t i;

	*in_bytes = content_bytes(json_object_get(req, "instructions")) +
		    content_bytes(json_is_string(input) ? input : NULL);
	json_array_foreach(json_is_array(input) ? input : NULL, i, it)
	{
		now = responses_from_model(it);
		a->turn += now && !prev;
		prev = now;
		*in_bytes += content_bytes(it) +
			     content_bytes(json_object_get(it, "output")) +
			     content_bytes(json_object_get(it, "arguments"));
	}
}

static const char *finish_reason(const struct answer *a)
{
	if (a->dialect == DIALECT_ANTHROPIC)
		return a->truncated ? "max_tokens" : a->tools ? "tool_use" : "end_turn";
	return a->truncated ? "length" : a->tools ? "tool_calls" : "stop";
}

/* Tool arguments of a script call as a JSON string (the caller frees). */
static char *tool_args(json_t *call)
{
	json_t *args = json_object_get(call, "arguments");

	return args ? json_dumps(args, JSON_COMPACT) : strdup("{}");
}

/* ---- non-stream bodies ---- */

/* One choice of a non-stream OpenAI answer. */
static json_t *openai_choice(const struct answer *a, int index)
{
	json_t *msg, *calls, *call;
	size_t i;

	msg = json_pack("{s:s}", "role", "assistant");
	json_object_set_new(msg, "content",
			    a->text_len || !a->tools ? json_stringn(a->text, a->text_len)
						     : json_null());
	if (a->tools) {
		calls = json_array();
		json_array_foreach(a->tools, i, call)
		{
			char id[64], *args = tool_args(call);

			snprintf(id, sizeof(id), "call_%d_%zu", a->turn, i);
			json_array_append_new(
			    calls, json_pack("{s:s, s:s, s:{s:O, s:s}}", "id", id, "type",
					     "function", "function", "name",
					     json_object_get(call, "name"), "arguments",
					     args ? args : "{}"));
			free(args);
		}
		json_object_set_new(msg, "tool_calls", calls);
	}
	return json_pack("{s:i, s:o, s:s}", "index", index, "message", msg,
			 "finish_reason", finish_reason(a));
}

static json_t *openai_body(const struct answer *a)
{
	json_t *choices = json_array();

	for (int i = 0; choices && i < a->n; i++)
		json_array_append_new(choices, openai_choice(a, i));
	return json_pack("{s:s, s:s, s:I, s:s, s:o, s:{s:I, s:I, s:I}}", "id",
			 "chatcmpl-stub", "object", "chat.completion", "created",
			 (json_int_t)time(NULL), "model", a->model, "choices", choices,
			 "usage", "prompt_tokens", a->in_tok, "completion_tokens",
			 a->out_tok * a->n, "total_tokens",
			 a->in_tok + a->out_tok * a->n);
}

static json_t *anthropic_body(const struct answer *a)
{
	json_t *content = json_array(), *call;
	char msg_id[32];
	size_t i;

	if (a->text_len || !a->tools)
		json_array_append_new(content, json_pack("{s:s, s:s%}", "type", "text",
							 "text", a->text, a->text_len));
	if (a->tools) {
		json_array_foreach(a->tools, i, call)
		{
			char id[64];
			json_t *args = json_object_get(call, "arguments");

			snprintf(id, sizeof(id), "toolu_%d_%zu", a->turn, i);
			json_array_append_new(
			    content,
			    json_pack("{s:s, s:s, s:O, s:o}", "type", "tool_use", "id",
				      id, "name", json_object_get(call, "name"), "input",
				      args ? json_copy(args) : json_object()));
		}
	}
	snprintf(msg_id, sizeof msg_id, "msg_stub_%d", a->turn);
	return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:n, "
			 "s:{s:I, s:I}}",
			 "id", msg_id, "type", "message", "role", "assistant",
			 "model", a->model, "content", content, "stop_reason",
			 finish_reason(a), "stop_sequence", "usage", "input_tokens",
			 a->in_tok, "output_tokens", a->out_tok);
}

/* The output items of a Responses answer: its message (when it has
 * text, or nothing else), then its function calls. */
static json_t *responses_output(const struct answer *a)
{
	json_t *out = json_array(), *call;
	size_t i;

	if (a->text_len || !a->tools)
		json_array_append_new(
		    out, json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:s%, s:[]}]}", "type",
				   "message", "id", "msg_stub", "status", "completed",
				   "role", "assistant", "content", "type", "output_text",
				   "text", a->text, a->text_len, "annotations"));
	json_array_foreach(a->tools, i, call)
	{
		char id[64], cid[64], *args = tool_args(call);

		snprintf(id, sizeof id, "fc_%d_%zu", a->turn, i);
		snprintf(cid, sizeof cid, "call_%d_%zu", a->turn, i);
		json_array_append_new(
		    out, json_pack("{s:s, s:s, s:s, s:O, s:s, s:s}", "type",
				   "function_call", "id", id, "call_id", cid, "name",
				   json_object_get(call, "name"), "arguments",
				   args ? args : "{}", "status", "completed"));
		free(args);
	}
	return out;
}

/* A Responses response object, status "in_progress" (no output, no
 * usage yet) or complete. */
static json_t *responses_body(const struct answer *a, int done)
{
	json_t *r = json_pack(
	    "{s:s, s:s, s:I, s:s, s:s, s:o, s:n, s:n}", "id", "resp_stub", "object",
	    "response", "created_at", (json_int_t)time(NULL), "status",
	    !done	   ? "in_progress"
	    : a->truncated ? "incomplete"
			   : "completed",
	    "model", a->model, "output", done ? responses_output(a) : json_array(),
	    "usage", "incomplete_details");

	if (r && done) {
		json_object_set_new(r, "usage",
				    json_pack("{s:I, s:{s:i}, s:I, s:{s:i}, s:I}",
					      "input_tokens", a->in_tok,
					      "input_tokens_details", "cached_tokens", 0,
					      "output_tokens", a->out_tok,
					      "output_tokens_details", "reasoning_tokens",
					      0, "total_tokens", a->in_tok + a->out_tok));
		if (a->truncated)
			json_object_set_new(
			    r, "incomplete_details",
			    json_pack("{s:s}", "reason", "max_output_tokens"));
	}
	return r;
}

/* ---- streams ---- */

/* Appends piece to the stream (takes ownership; NULL means out of memory). */
static int sse_push(struct sse *s, int delay, char *piece)
{
	if (!piece)
		return SB_ERR_NOMEM;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		char **p = realloc(s->piece, cap * sizeof(*p));
		unsigned char *d = p ? realloc(s->delay, cap) : NULL;

		if (p)
			s->piece = p;
		if (!d) {
			free(piece);
			return SB_ERR_NOMEM;
		}
		s->delay = d;
		s->cap = cap;
	}
	s->piece[s->n] = piece;
	s->delay[s->n++] = (unsigned char)delay;
	return 0;
}

/* Appends one SSE event, with an `event:` line when event is set (takes
 * the reference to data). */
static int sse_add(struct sse *s, int delay, const char *event, json_t *data)
{
	char *json = data ? json_dumps(data, JSON_COMPACT) : NULL;
	char *piece = NULL;
	int n = -1;

	json_decref(data);
	if (json && event)
		n = asprintf(&piece, "event: %s\ndata: %s\n\n", event, json);
	else if (json)
		n = asprintf(&piece, "data: %s\n\n", json);
	free(json);
	return sse_push(s, delay, n < 0 ? NULL : piece);
}

static void sse_free(void *cls)
{
	struct sse *s = cls;
	size_t i;

	for (i = 0; i < s->n; i++)
		free(s->piece[i]);
	free(s->piece);
	free(s->delay);
	free(s);
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct sse *s = cls;
	size_t len;

	if (s->i == s->n)
		return MHD_CONTENT_READER_END_OF_STREAM;
	if (s->off == 0 && s->delay[s->i])
		stub_sleep_ms(s->delay_ms);
	len = strlen(s->piece[s->i]) - s->off;
	if (len > max)
		len = max;
	memcpy(buf, s->piece[s->i] + s->off, len);
	s->off += len;
	if (!s->piece[s->i][s->off]) {
		s->i++;
		s->off = 0;
	}
	return (ssize_t)len;
}

/* Calls emit(a, s, piece, len, delay) for each of the a->chunks pieces of
 * the text; delay is set on every piece but the first. */
static int text_pieces(const struct answer *a, struct sse *s,
		       int (*emit)(const struct answer *, struct sse *, const char *,
				   size_t, int))
{
	size_t start = 0, end;
	long i;
	int err, first = 1;

	for (i = 1; i <= a->chunks && start < a->text_len; i++) {
		end = sb_utf8_cut(a->text, a->text_len,
				  a->text_len * (size_t)i / (size_t)a->chunks);
		if (end <= start)
			continue;
		err = emit(a, s, a->text + start, end - start, !first);
		if (err)
			return err;
		first = 0;
		start = end;
	}
	return 0;
}

static json_t *openai_chunk(const struct answer *a, json_t *delta, const char *finish)
{
	return json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:s?}]}", "id",
			 "chatcmpl-stub", "object", "chat.completion.chunk", "created",
			 (json_int_t)time(NULL), "model", a->model, "choices", "index",
			 a->index, "delta", delta, "finish_reason", finish);
}

static int openai_text(const struct answer *a, struct sse *s, const char *p, size_t len,
		       int delay)
{
	return sse_add(s, delay, NULL,
		       openai_chunk(a, json_pack("{s:s%}", "content", p, len), NULL));
}

/* The events of one choice, a->index. */
static int openai_stream_choice(const struct answer *a, struct sse *s)
{
	json_t *call;
	size_t i;
	int err;

	err = sse_add(
	    s, 0, NULL,
	    openai_chunk(a, json_pack("{s:s, s:s}", "role", "assistant", "content", ""),
			 NULL));
	if (!err)
		err = text_pieces(a, s, openai_text);
	if (a->tools) {
		json_array_foreach(a->tools, i, call)
		{
			char id[64], *args = tool_args(call);

			snprintf(id, sizeof(id), "call_%d_%zu", a->turn, i);
			if (!err)
				err = sse_add(
				    s, 0, NULL,
				    openai_chunk(
					a,
					json_pack("{s:[{s:i, s:s, s:s, s:{s:O, s:s}}]}",
						  "tool_calls", "index", (int)i, "id", id,
						  "type", "function", "function", "name",
						  json_object_get(call, "name"),
						  "arguments", ""),
					NULL));
			if (!err)
				err = sse_add(
				    s, 0, NULL,
				    openai_chunk(a,
						 json_pack("{s:[{s:i, s:{s:s}}]}",
							   "tool_calls", "index", (int)i,
							   "function", "arguments",
							   args ? args : "{}"),
						 NULL));
			free(args);
		}
	}
	if (!err)
		err =
		    sse_add(s, 0, NULL, openai_chunk(a, json_object(), finish_reason(a)));
	return err;
}

static int openai_stream(const struct answer *a, struct sse *s)
{
	struct answer c = *a;
	int err = 0;

	for (c.index = 0; !err && c.index < a->n; c.index++)
		err = openai_stream_choice(&c, s);
	if (!err && a->include_usage)
		err = sse_add(s, 0, NULL,
			      json_pack("{s:s, s:s, s:I, s:s, s:[], s:{s:I, s:I, s:I}}",
					"id", "chatcmpl-stub", "object",
					"chat.completion.chunk", "created",
					(json_int_t)time(NULL), "model", a->model,
					"choices", "usage", "prompt_tokens", a->in_tok,
					"completion_tokens", a->out_tok * a->n,
					"total_tokens", a->in_tok + a->out_tok * a->n));
	if (!err)
		err = sse_push(s, 0, strdup("data: [DONE]\n\n"));
	return err;
}

static int anthropic_text(const struct answer *a, struct sse *s, const char *p,
			  size_t len, int delay)
{
	return sse_add(s, delay, "content_block_delta",
		       json_pack("{s:s, s:i, s:{s:s, s:s%}}", "type",
				 "content_block_delta", "index", 0, "delta", "type",
				 "text_delta", "text", p, len));
}

static int anthropic_block_stop(struct sse *s, int index)
{
	return sse_add(
	    s, 0, "content_block_stop",
	    json_pack("{s:s, s:i}", "type", "content_block_stop", "index", index));
}

static int anthropic_stream(const struct answer *a, struct sse *s)
{
	char msg_id[32];
	json_t *call;
	size_t i;
	int err, index = 0;

	/* Like the real API, message_start carries output_tokens 1; the
	 * cumulative count is in message_delta. Each turn's message has its
	 * own id: clients merge the parts of one message by its id. */
	snprintf(msg_id, sizeof msg_id, "msg_stub_%d", a->turn);
	err = sse_add(
	    s, 0, "message_start",
	    json_pack("{s:s, s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:{s:I, s:i}}}",
		      "type", "message_start", "message", "id", msg_id, "type",
		      "message", "role", "assistant", "model", a->model, "content",
		      "stop_reason", "stop_sequence", "usage", "input_tokens", a->in_tok,
		      "output_tokens", 1));
	if (!err && (a->text_len || !a->tools)) {
		err = sse_add(s, 0, "content_block_start",
			      json_pack("{s:s, s:i, s:{s:s, s:s}}", "type",
					"content_block_start", "index", 0,
					"content_block", "type", "text", "text", ""));
		if (!err)
			err = text_pieces(a, s, anthropic_text);
		if (!err)
			err = anthropic_block_stop(s, index++);
	}
	if (a->tools) {
		json_array_foreach(a->tools, i, call)
		{
			char id[64], *args = tool_args(call);

			snprintf(id, sizeof(id), "toolu_%d_%zu", a->turn, i);
			if (!err)
				err = sse_add(
				    s, 0, "content_block_start",
				    json_pack("{s:s, s:i, s:{s:s, s:s, s:O, s:{}}}",
					      "type", "content_block_start", "index",
					      index, "content_block", "type", "tool_use",
					      "id", id, "name",
					      json_object_get(call, "name"), "input"));
			if (!err)
				err = sse_add(
				    s, 0, "content_block_delta",
				    json_pack("{s:s, s:i, s:{s:s, s:s}}", "type",
					      "content_block_delta", "index", index,
					      "delta", "type", "input_json_delta",
					      "partial_json", args ? args : "{}"));
			if (!err)
				err = anthropic_block_stop(s, index++);
			free(args);
		}
	}
	if (!err)
		err = sse_add(s, 0, "message_delta",
			      json_pack("{s:s, s:{s:s, s:n}, s:{s:I}}", "type",
					"message_delta", "delta", "stop_reason",
					finish_reason(a), "stop_sequence", "usage",
					"output_tokens", a->out_tok));
	if (!err)
		err = sse_add(s, 0, "message_stop",
			      json_pack("{s:s}", "type", "message_stop"));
	return err;
}

/* Appends a Responses event: data gets its type and sequence_number. */
static int responses_add(struct sse *s, int delay, const char *type, json_t *data)
{
	if (data &&
	    (json_object_set_new(data, "type", json_string(type)) ||
	     json_object_set_new(data, "sequence_number", json_integer(s->seq++)))) {
		json_decref(data);
		data = NULL;
	}
	return sse_add(s, delay, type, data);
}

static int responses_text(const struct answer *a, struct sse *s, const char *p,
			  size_t len, int delay)
{
	return responses_add(s, delay, "response.output_text.delta",
			     json_pack("{s:s, s:i, s:i, s:s%}", "item_id", "msg_stub",
				       "output_index", 0, "content_index", 0, "delta", p,
				       len));
}

/* The events of the answer's message, output item 0. */
static int responses_message(const struct answer *a, struct sse *s, json_t *item)
{
	json_t *part = json_array_get(json_object_get(item, "content"), 0);
	int err;

	err = responses_add(s, 0, "response.output_item.added",
			    json_pack("{s:i, s:{s:s, s:s, s:s, s:s, s:[]}}",
				      "output_index", 0, "item", "type", "message", "id",
				      "msg_stub", "status", "in_progress", "role",
				      "assistant", "content"));
	if (!err)
		err = responses_add(s, 0, "response.content_part.added",
				    json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[]}}",
					      "item_id", "msg_stub", "output_index", 0,
					      "content_index", 0, "part", "type",
					      "output_text", "text", "", "annotations"));
	if (!err)
		err = text_pieces(a, s, responses_text);
	if (!err)
		err = responses_add(s, 0, "response.output_text.done",
				    json_pack("{s:s, s:i, s:i, s:s%}", "item_id",
					      "msg_stub", "output_index", 0,
					      "content_index", 0, "text", a->text,
					      a->text_len));
	if (!err)
		err = responses_add(s, 0, "response.content_part.done",
				    json_pack("{s:s, s:i, s:i, s:O}", "item_id",
					      "msg_stub", "output_index", 0,
					      "content_index", 0, "part", part));
	return err;
}

/* The events of function call item (output index i). */
static int responses_call(const struct answer *a, struct sse *s, json_t *item, int i)
{
	json_t *added = json_copy(item);
	const char *id = json_string_value(json_object_get(item, "id"));
	int err;

	if (added) {
		json_object_set_new(added, "arguments", json_string(""));
		json_object_set_new(added, "status", json_string("in_progress"));
	}
	err = responses_add(
	    s, 0, "response.output_item.added",
	    added ? json_pack("{s:i, s:o}", "output_index", i, "item", added) : NULL);
	if (!err)
		err = responses_add(s, 0, "response.function_call_arguments.delta",
				    json_pack("{s:s, s:i, s:O}", "item_id", id,
					      "output_index", i, "delta",
					      json_object_get(item, "arguments")));
	if (!err)
		err = responses_add(s, 0, "response.function_call_arguments.done",
				    json_pack("{s:s, s:i, s:O}", "item_id", id,
					      "output_index", i, "arguments",
					      json_object_get(item, "arguments")));
	return err;
}

/* response.created, each output item's events, response.completed (or
 * response.incomplete when the answer was cut at max_output_tokens). */
static int responses_stream(const struct answer *a, struct sse *s)
{
	json_t *out = responses_output(a), *item;
	size_t i;
	int err;

	err = responses_add(s, 0, "response.created",
			    json_pack("{s:o}", "response", responses_body(a, 0)));
	json_array_foreach(out, i, item)
	{
		const char *type = json_string_value(json_object_get(item, "type"));
		if (!err)
			err = !strcmp(type, "message")
				  ? responses_message(a, s, item)
				  : responses_call(a, s, item, (int)i);
		if (!err)
			err = responses_add(s, 0, "response.output_item.done",
					    json_pack("{s:i, s:O}", "output_index",
						      (int)i, "item", item));
	}
	json_decref(out);
	if (!err)
		err = responses_add(
		    s, 0, a->truncated ? "response.incomplete" : "response.completed",
		    json_pack("{s:o}", "response", responses_body(a, 1)));
	return err;
}

static enum MHD_Result send_stream(struct MHD_Connection *c, const struct answer *a)
{
	struct sse *s = calloc(1, sizeof(*s));
	struct MHD_Response *r;
	enum MHD_Result ret;
	int err;

	if (!s)
		return MHD_NO;
	s->delay_ms = a->chunk_delay_ms;
	err = a->dialect == DIALECT_ANTHROPIC	? anthropic_stream(a, s)
	      : a->dialect == DIALECT_RESPONSES ? responses_stream(a, s)
						: openai_stream(a, s);
	if (err) {
		sse_free(s);
		return send_error(c, a->dialect, 500, "stub: out of memory");
	}
	r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, s,
					      sse_free);
	if (!r) {
		sse_free(s);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", "text/event-stream");
	MHD_add_response_header(r, "Cache-Control", "no-cache");
	ret = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return ret;
}

/* ---- request handling ---- */

/* Reads an optional positive integer field; -1 when it is malformed. */
static json_int_t opt_tokens(json_t *req, const char *key)
{
	json_t *v = json_object_get(req, key);

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 1)
		return -1;
	return json_integer_value(v);
}

/* Checks the request shape and reads its max_tokens (0 = none) and its
 * choices; returns the message of a 400 reply, or NULL when the request is
 * well formed. */
static const char *check_request(enum dialect d, json_t *req, json_int_t *max_tokens,
				 int *n)
{
	json_int_t other;

	json_t *msgs = json_object_get(req, "messages"), *m, *stream;
	size_t i;

	if (!json_is_object(req))
		return "request body must be a JSON object";
	if (!json_is_string(json_object_get(req, "model")))
		return "missing field: model (a string)";
	if (d == DIALECT_RESPONSES) {
		m = json_object_get(req, "input");
		if (!json_is_string(m) && !json_is_array(m))
			return "missing field: input (a string or an array)";
		*max_tokens = opt_tokens(req, "max_output_tokens");
		return *max_tokens < 0 ? "max_output_tokens must be a positive integer"
				       : NULL;
	}
	if (!json_is_array(msgs))
		return "missing field: messages (an array)";
	json_array_foreach(msgs, i, m)
	{
		if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")))
			return "each message needs a role";
	}
	stream = json_object_get(req, "stream");
	if (stream && !json_is_boolean(stream) && !json_is_null(stream))
		return "stream must be a boolean";
	if (d == DIALECT_ANTHROPIC) {
		if (!json_object_get(req, "max_tokens"))
			return "missing field: max_tokens";
		*max_tokens = opt_tokens(req, "max_tokens");
	} else {
		*max_tokens = opt_tokens(req, "max_completion_tokens");
		other = opt_tokens(req, "max_tokens");
		if (*max_tokens >= 0 && (other < 0 || other > *max_tokens))
			*max_tokens = other;
		other = opt_tokens(req, "n");
		if (other < 0 || other > 128)
			return "n must be an integer from 1 to 128";
		*n = other ? (int)other : 1;
	}
	if (*max_tokens < 0)
		return "max_tokens must be a positive integer";
	return NULL;
}

static enum MHD_Result handle_completion(struct MHD_Connection *c, enum dialect d,
					 const char *url, const struct stub_req *rq)
{
	const char *auth, *msg, *model = NULL;
	struct answer a = {.dialect = d, .n = 1};
	json_t *req = NULL, *script = NULL, *turns, *turn, *m, *resolved = NULL;
	json_int_t max_tokens = 0;
	json_error_t jerr;
	enum MHD_Result ret;
	size_t i, in_bytes = 0;
	int stream = 0, status = 400, err;
	char buf[256];

	auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	if (!auth)
		auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
	if (rq->too_big) {
		status = 413;
		msg = "request body too large";
		goto refuse;
	}
	req = json_loadb(rq->body ? rq->body : "", rq->len, 0, &jerr);
	if (!req) {
		snprintf(buf, sizeof(buf), "invalid JSON: %s", jerr.text);
		msg = buf;
		goto refuse;
	}
	msg = check_request(d, req, &max_tokens, &a.n);
	if (json_is_string(json_object_get(req, "model")))
		model = json_string_value(json_object_get(req, "model"));
	stream = json_is_true(json_object_get(req, "stream"));
	if (msg)
		goto refuse;
	err = script_load(model, &script);
	if (err) {
		status = err == SB_ERR_NOTFOUND ? 404 : 500;
		msg = sb_errmsg(err);
		goto refuse;
	}
	if (d == DIALECT_RESPONSES)
		responses_input(req, &a, &in_bytes);
	json_array_foreach(json_object_get(req, "messages"), i, m)
	{
		if (strcmp(json_string_value(json_object_get(m, "role")), "assistant") ==
		    0)
			a.turn++;
		in_bytes += content_bytes(json_object_get(m, "content"));
	}
	turns = json_object_get(script, "turns");
	if ((size_t)a.turn >= json_array_size(turns))
		a.turn = (int)json_array_size(turns) - 1;
	turn = json_array_get(turns, (size_t)a.turn);
	stub_sleep_ms(turn_long(turn, "delay_ms", 0));
	status = (int)turn_long(turn, "status", 200);
	if (status != 200) {
		const char *e = json_string_value(json_object_get(turn, "error"));

		snprintf(buf, sizeof(buf), "%s", e ? e : "scripted error");
		msg = buf;
		goto refuse;
	}
	a.model = model;
	a.include_usage = json_is_true(
	    json_object_get(json_object_get(req, "stream_options"), "include_usage"));
	turn = resolved = turn_resolve(turn, req);
	err = turn ? answer_fill(&a, turn, in_bytes, max_tokens) : SB_ERR_NOMEM;
	if (err) {
		status = 500;
		msg = sb_errmsg(err);
		goto refuse;
	}
	log_request(url, model, auth, stream, a.in_tok, a.out_tok * a.n, 200);
	if (stream)
		ret = send_stream(c, &a);
	else
		ret = send_json(c, 200,
				d == DIALECT_ANTHROPIC	 ? anthropic_body(&a)
				: d == DIALECT_RESPONSES ? responses_body(&a, 1)
							 : openai_body(&a));
	goto done;
refuse:
	log_request(url, model, auth, stream, 0, 0, status);
	ret = send_error(c, d, status, msg);
done:
	free(a.text);
	json_decref(a.tools);
	json_decref(resolved);
	json_decref(script);
	json_decref(req);
	return ret;
}

/* POST /v1/messages/count_tokens: {"input_tokens": N}, N counted as the
 * stub counts a call's input (its messages' and system's bytes / 4). */
static enum MHD_Result handle_count(struct MHD_Connection *c, const char *url,
				    const struct stub_req *rq)
{
	json_t *req = json_loadb(rq->body ? rq->body : "", rq->len, 0, NULL);
	const char *model = json_string_value(json_object_get(req, "model"));
	json_int_t n;
	enum MHD_Result ret;

	if (!json_is_array(json_object_get(req, "messages")) || !model) {
		log_request(url, model, NULL, 0, 0, 0, 400);
		json_decref(req);
		return send_error(c, DIALECT_ANTHROPIC, 400,
				  "model and messages are required");
	}
	n = ceil4(content_bytes(json_object_get(req, "messages")) +
		  content_bytes(json_object_get(req, "system")));
	log_request(url, model, NULL, 0, n, 0, 200);
	ret = send_json(c, 200, json_pack("{s:I}", "input_tokens", n));
	json_decref(req);
	return ret;
}

static int name_filter(const struct dirent *e)
{
	size_t n = strlen(e->d_name);

	return e->d_name[0] != '.' && n > 5 && strcmp(e->d_name + n - 5, ".json") == 0;
}

/* GET /v1/models: one model per script in the script directory. */
static enum MHD_Result handle_models(struct MHD_Connection *c)
{
	json_t *data = json_array();
	struct dirent **ents = NULL;
	int i, n = 0;
	char id[NAME_MAX + 8];

	if (stub.script_file) {
		char *copy = strdup(stub.script_file);

		if (copy)
			snprintf(id, sizeof(id), "stub/%.*s",
				 (int)strcspn(basename(copy), "."), basename(copy));
		json_array_append_new(data,
				      json_pack("{s:s, s:s, s:i, s:s}", "id",
						copy ? id : "stub", "object", "model",
						"created", 0, "owned_by", "sanbox-stub"));
		free(copy);
	} else {
		n = scandir(stub.script_dir, &ents, name_filter, alphasort);
	}
	for (i = 0; i < n; i++) {
		snprintf(id, sizeof(id), "stub/%.*s", (int)strlen(ents[i]->d_name) - 5,
			 ents[i]->d_name);
		json_array_append_new(data, json_pack("{s:s, s:s, s:i, s:s}", "id", id,
						      "object", "model", "created", 0,
						      "owned_by", "sanbox-stub"));
		free(ents[i]);
	}
	free(ents);
	log_request("/v1/models", NULL, NULL, 0, 0, 0, 200);
	return send_json(c, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version,
				  const char *upload, size_t *upload_size, void **con_cls)
{
	struct stub_req *rq = *con_cls;
	int post = strcmp(method, "POST") == 0;

	if (!rq) {
		rq = calloc(1, sizeof(*rq));
		if (!rq)
			return MHD_NO;
		*con_cls = rq;
		return MHD_YES;
	}
	if (*upload_size) {
		if (!rq->too_big && rq->len + *upload_size <= STUB_BODY_MAX) {
			char *b = realloc(rq->body, rq->len + *upload_size);

			if (!b)
				return MHD_NO;
			rq->body = b;
			memcpy(rq->body + rq->len, upload, *upload_size);
			rq->len += *upload_size;
		} else {
			rq->too_big = 1;
		}
		*upload_size = 0;
		return MHD_YES;
	}
	if (strcmp(url, "/v1/models") == 0 && strcmp(method, "GET") == 0)
		return handle_models(c);
	if (strcmp(url, "/v1/chat/completions") == 0 && post)
		return handle_completion(c, DIALECT_OPENAI, url, rq);
	if (strcmp(url, "/v1/messages") == 0 && post)
		return handle_completion(c, DIALECT_ANTHROPIC, url, rq);
	if (strcmp(url, "/v1/responses") == 0 && post)
		return handle_completion(c, DIALECT_RESPONSES, url, rq);
	if (strcmp(url, "/v1/messages/count_tokens") == 0 && post)
		return handle_count(c, url, rq);
	log_request(url, NULL, NULL, 0, 0, 0, 404);
	return send_error(c, DIALECT_OPENAI, 404, "no such endpoint");
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct stub_req *rq = *con_cls;

	if (rq) {
		free(rq->body);
		free(rq);
		*con_cls = NULL;
	}
}

/* ---- start-up ---- */

/* Parses a loopback HOST:PORT ("[::1]:PORT" for IPv6) into ss. */
static int parse_listen(const char *arg, struct sockaddr_storage *ss)
{
	char host[256];
	const char *colon = strrchr(arg, ':');
	struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	char *end;
	long port;
	size_t hl;

	if (!colon)
		return sb_seterr(SB_ERR_INVAL, "--listen %s: expected HOST:PORT", arg);
	port = strtol(colon + 1, &end, 10);
	if (!colon[1] || *end || port < 0 || port > 65535)
		return sb_seterr(SB_ERR_INVAL, "--listen %s: bad port", arg);
	hl = (size_t)(colon - arg);
	if (hl >= 2 && arg[0] == '[' && arg[hl - 1] == ']') {
		arg++;
		hl -= 2;
	}
	if (hl >= sizeof(host))
		return sb_seterr(SB_ERR_INVAL, "--listen: host too long");
	memcpy(host, arg, hl);
	host[hl] = '\0';
	memset(ss, 0, sizeof(*ss));
	if (strcmp(host, "localhost") == 0)
		strcpy(host, "127.0.0.1");
	if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		if ((ntohl(in4->sin_addr.s_addr) >> 24) != 127)
			goto not_loopback;
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)port);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		if (!IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
			goto not_loopback;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		return 0;
	}
	return sb_seterr(SB_ERR_INVAL, "--listen: bad address '%s'", host);
not_loopback:
	return sb_seterr(SB_ERR_DENIED,
			 "--listen: %s is not a loopback address (the stub "
			 "only listens on 127.0.0.0/8 or ::1)",
			 host);
}

/* Picks the script directory: --script-dir, $SANBOX_STUB_DIR, or the
 * tools/stub of the source tree the binary was built in. */
static void find_script_dir(const char *opt)
{
	char exe[PATH_MAX], *dir;
	ssize_t n;

	if (!opt)
		opt = getenv("SANBOX_STUB_DIR");
	if (opt) {
		snprintf(stub.script_dir, sizeof(stub.script_dir), "%s", opt);
		return;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';
	dir = dirname(exe);
	snprintf(stub.script_dir, sizeof(stub.script_dir), "%s/../tools/stub", dir);
	if (access(stub.script_dir, R_OK) == 0)
		return;
	snprintf(stub.script_dir, sizeof(stub.script_dir), "%s/../../tools/stub", dir);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: sanbox-model-stub [--listen HOST:PORT] "
		"[--script FILE] [--script-dir DIR] [--log FILE] [--parent PID]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *listen = "127.0.0.1:0", *dir = NULL, *log = NULL;
	int parent = 0;
	struct sockaddr_storage ss;
	const union MHD_DaemonInfo *info;
	struct MHD_Daemon *d;
	char host[INET6_ADDRSTRLEN];
	sigset_t set;
	int i, sig, err;

	stub.log_fd = -1;
	for (i = 1; i < argc; i++) {
		if (i + 1 < argc && strcmp(argv[i], "--listen") == 0)
			listen = argv[++i];
		else if (i + 1 < argc && strcmp(argv[i], "--script") == 0)
			stub.script_file = argv[++i];
		else if (i + 1 < argc && strcmp(argv[i], "--script-dir") == 0)
			dir = argv[++i];
		else if (i + 1 < argc && strcmp(argv[i], "--log") == 0)
			log = argv[++i];
		else if (i + 1 < argc && strcmp(argv[i], "--parent") == 0)
			parent = atoi(argv[++i]);
		else
			usage();
	}
	/* With --parent: die with the daemon (even one killed with SIGKILL) */
	if (parent && (prctl(PR_SET_PDEATHSIG, SIGTERM) || getppid() != parent))
		return 0;
	err = parse_listen(listen, &ss);
	if (err) {
		fprintf(stderr, "sanbox-model-stub: %s\n", sb_errmsg(err));
		return 2;
	}
	find_script_dir(dir);
	if (!log && getenv("SANBOX_STUB_LOG") && *getenv("SANBOX_STUB_LOG"))
		log = getenv("SANBOX_STUB_LOG");
	if (log) {
		stub.log_fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (stub.log_fd < 0) {
			fprintf(stderr, "sanbox-model-stub: %s: %s\n", log,
				strerror(errno));
			return 2;
		}
	}
	/* Every thread inherits the blocked set; main waits for the signal. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	d = MHD_start_daemon(
	    MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD |
		MHD_USE_ERROR_LOG | (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
	    0, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
	    MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_CONNECTION_LIMIT,
	    4096u, MHD_OPTION_END);
	if (!d) {
		fprintf(stderr, "sanbox-model-stub: cannot listen on %s\n", listen);
		return 1;
	}
	info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	if (ss.ss_family == AF_INET6) {
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host,
			  sizeof(host));
		printf("listening [%s]:%u\n", host, info ? info->port : 0);
	} else {
		inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host,
			  sizeof(host));
		printf("listening %s:%u\n", host, info ? info->port : 0);
	}
	fflush(stdout);
	do {
		if (sigwait(&set, &sig) != 0)
			break;
	} while (sig != SIGTERM && sig != SIGINT);
	MHD_stop_daemon(d);
	if (stub.log_fd >= 0)
		close(stub.log_fd);
	return 0;
}
