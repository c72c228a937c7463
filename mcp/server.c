/* server.c - the MCP server's loop: reads lines from the input, answers
 * what is quick on the reading thread (initialize, ping, lists,
 * subscriptions, errors) and serves each tools/call and resources read on
 * a thread of its own, at most SERVE_MAX at once (the reader waits for a
 * free one: back-pressure on the client, never an unbounded queue).
 * Responses and notifications go out whole, one line each, under one lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/proc.h"
#include "engine/daemon/wire.h"
#include "mcp/jsonrpc.h"
#include "mcp/mcp.h"

#define SERVE_MAX	  32	/* calls served at once */
#define READ_CHUNK	  65536 /* bytes read from the input at a time */
#define DRAIN_WAIT_S	  10	/* how long the end waits for calls in flight */
#define ID_BUSY "invalid request: this id is in use by a request not yet answered"


/* The protocol revisions spoken, newest first: the TypeScript SDK's
 * client's list (LATEST_PROTOCOL_VERSION and SUPPORTED_PROTOCOL_VERSIONS). */
static const char *const versions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
				       "2024-11-05", "2024-10-07"};

struct sb_mcp {
	int out;
	pthread_mutex_t out_mu; /* one line at a time */
	int dead;		/* a write failed: the client is gone */
	pthread_mutex_t mu;	/* the fields below */
	pthread_cond_t cv;	/* a call ended */
	struct sb_mcp_call *calls; /* in flight */
	int ncalls;
	int initialized;
	char version[16]; /* the revision agreed */
	struct sb_mcp_subs *subs;
};

struct sb_mcp_subs **sb_mcp_subs_of(struct sb_mcp *s)
{
	return &s->subs;
}

void sb_mcp_send(struct sb_mcp *s, json_t *msg)
{
	char *line;
	size_t n;

	if (!msg)
		return;
	line = json_dumps(msg, JSON_COMPACT | JSON_ENSURE_ASCII);
	json_decref(msg);
	if (!line) {
		fprintf(stderr, "sanbox mcp: out of memory for a reply\n");
		return;
	}
	n = strlen(line);
	line[n] = '\n'; /* json_dumps's NUL: the line's end instead */
	pthread_mutex_lock(&s->out_mu);
	if (!s->dead && sb_write_full(s->out, line, n + 1))
		s->dead = 1;
	pthread_mutex_unlock(&s->out_mu);
	free(line);
}

static void send_error(struct sb_mcp *s, const json_t *id, int code, const char *msg)
{
	sb_mcp_send(s, sb_mcp_error_new(id, code, msg));
}

void sb_mcp_progress(struct sb_mcp_call *call, double progress, double total, const char *msg)
{
	json_t *p;

	if (!call->token || (call->sent && progress <= call->progress))
		return;
	call->progress = progress;
	call->sent = 1;
	p = json_pack("{s:O, s:f}", "progressToken", call->token, "progress", progress);
	if (p && total > 0)
		json_object_set_new(p, "total", json_real(total));
	if (p && msg)
		json_object_set_new(p, "message", json_string(msg));
	sb_mcp_send(call->srv, sb_mcp_notification_new("notifications/progress", p));
}

/* ---- the lifecycle ---- */

static json_t *do_initialize(struct sb_mcp *s, const json_t *params, int *code, char *err,
			     size_t cap)
{
	const json_t *v = json_object_get(params, "protocolVersion");
	const char *use = versions[0];

	if (!json_is_string(v)) {
		*code = SB_RPC_PARAMS;
		snprintf(err, cap, "invalid params: protocolVersion must be a string");
		return NULL;
	}
	/* the client's revision when it is one of ours, else our newest: the
	 * client then decides whether it speaks it */
	for (size_t i = 0; i < sizeof versions / sizeof *versions; i++)
		if (!strcmp(versions[i], json_string_value(v)))
			use = versions[i];
	pthread_mutex_lock(&s->mu);
	s->initialized = 1;
	snprintf(s->version, sizeof s->version, "%s", use);
	pthread_mutex_unlock(&s->mu);
	fprintf(stderr, "sanbox mcp: protocol %s (the client asked for %.40s)\n", use,
		json_string_value(v));
	return json_pack(
	    "{s:s, s:{s:{s:b}, s:{s:b, s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion",
	    use, "capabilities", "tools", "listChanged", 0, "resources", "subscribe", 1,
	    "listChanged", 0, "serverInfo", "name", "sanbox", "title", "Sanbox", "version",
	    SB_VERSION, "instructions",
	    "Sanbox runs AI agents and commands in microVMs. Start runs with run_start or "
	    "group_start, follow them with wait (bounded by timeout_s; call it again to "
	    "go on) and events_read, read their files with fs_list and fs_read.");
}

/* ---- calls on threads of their own ---- */

static void call_free(struct sb_mcp_call *c)
{
	json_decref(c->id);
	json_decref(c->token);
	json_decref(c->params);
	free(c);
}

/* What a call's thread answers with: a result, or a JSON-RPC error. */
static json_t *call_serve(struct sb_mcp_call *c)
{
	const json_t *p = c->params;
	const char *uri = json_string_value(json_object_get(p, "uri"));
	json_t *res = NULL;
	int code = SB_RPC_INTERNAL;
	char err[512] = "";

	if (!strcmp(c->method, "tools/call")) {
		const char *name = json_string_value(json_object_get(p, "name"));
		const json_t *args = json_object_get(p, "arguments");
		if (!name)
			return sb_mcp_error_new(c->id, SB_RPC_PARAMS,
						"invalid params: name must be a string");
		if (args && !json_is_object(args) && !json_is_null(args))
			return sb_mcp_error_new(c->id, SB_RPC_PARAMS,
						"invalid params: arguments must be an object");
		if (!(res = sb_mcp_tool_call(c, name, json_is_null(args) ? NULL : args))) {
			char msg[160];
			snprintf(msg, sizeof msg, "unknown tool: %.100s", name);
			return sb_mcp_error_new(c->id, SB_RPC_PARAMS, msg);
		}
	} else if (!strcmp(c->method, "resources/read")) {
		if (!uri)
			return sb_mcp_error_new(c->id, SB_RPC_PARAMS,
						"invalid params: uri must be a string");
		res = sb_mcp_resource_read(uri, &code, err, sizeof err);
	} else {
		res = sb_mcp_resources_list(&code, err, sizeof err);
	}
	if (!res)
		return sb_mcp_error_new(c->id, code, err);
	return sb_mcp_result_new(c->id, res);
}

static void *call_main(void *arg)
{
	struct sb_mcp_call *c = arg, **pp;
	struct sb_mcp *s = c->srv;
	json_t *reply = call_serve(c);

	pthread_mutex_lock(&s->mu);
	for (pp = &s->calls; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	pthread_mutex_unlock(&s->mu);
	if (c->stop) /* cancelled: the spec wants no response */
		json_decref(reply);
	else
		sb_mcp_send(s, reply);
	pthread_mutex_lock(&s->mu);
	s->ncalls--;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	call_free(c);
	return NULL;
}

/* Is a call with id in flight? Called with s->mu held. */
static struct sb_mcp_call *call_find(struct sb_mcp *s, const json_t *id)
{
	for (struct sb_mcp_call *c = s->calls; c; c = c->next)
		if (json_equal(c->id, (json_t *)id))
			return c;
	return NULL;
}

/* Starts m's request on a thread of its own, once fewer than SERVE_MAX
 * run; an id in flight already is refused. */
static void call_start(struct sb_mcp *s, const struct sb_mcp_msg *m)
{
	struct sb_mcp_call *c = calloc(1, sizeof *c);
	pthread_attr_t at;
	pthread_t th;
	int rc = -1;

	if (!c)
		return send_error(s, m->id, SB_RPC_INTERNAL, "out of memory");
	c->srv = s;
	c->id = json_incref(m->id);
	c->params = json_incref(m->params);
	c->token = json_incref(json_object_get(json_object_get(m->params, "_meta"),
					       "progressToken"));
	snprintf(c->method, sizeof c->method, "%s", m->method);
	pthread_mutex_lock(&s->mu);
	while (s->ncalls >= SERVE_MAX)
		pthread_cond_wait(&s->cv, &s->mu);
	if (call_find(s, m->id)) {
		pthread_mutex_unlock(&s->mu);
		call_free(c);
		return send_error(s, m->id, SB_RPC_INVALID, ID_BUSY);
	}
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 1u << 20);
	c->next = s->calls;
	s->calls = c;
	s->ncalls++;
	if ((rc = pthread_create(&th, &at, call_main, c))) {
		s->calls = c->next;
		s->ncalls--;
	}
	pthread_attr_destroy(&at);
	pthread_mutex_unlock(&s->mu);
	if (rc) {
		send_error(s, m->id, SB_RPC_INTERNAL, "cannot start a thread for the request");
		call_free(c);
	}
}

/* notifications/cancelled: the call goes on to its end (a wait ends at
 * once) and its response is dropped. */
static void call_cancel(struct sb_mcp *s, const json_t *params)
{
	const json_t *id = json_object_get(params, "requestId");
	struct sb_mcp_call *c;

	if (!id)
		return;
	pthread_mutex_lock(&s->mu);
	if ((c = call_find(s, id)))
		c->stop = 1;
	pthread_mutex_unlock(&s->mu);
}

/* ---- dispatch ---- */

/* Answers a request that needs the server's state only, or starts it on a
 * thread. */
static void on_request(struct sb_mcp *s, const struct sb_mcp_msg *m)
{
	const char *meth = m->method;
	char err[160];
	json_t *res;
	int code = SB_RPC_INTERNAL, init, busy;

	pthread_mutex_lock(&s->mu);
	busy = call_find(s, m->id) != NULL;
	pthread_mutex_unlock(&s->mu);
	if (busy)
		return send_error(s, m->id, SB_RPC_INVALID, ID_BUSY);
	if (!strcmp(meth, "ping"))
		return sb_mcp_send(s, sb_mcp_result_new(m->id, json_object()));
	pthread_mutex_lock(&s->mu);
	init = s->initialized;
	pthread_mutex_unlock(&s->mu);
	if (!strcmp(meth, "initialize")) {
		if (init)
			return send_error(s, m->id, SB_RPC_INVALID,
					  "invalid request: already initialized");
		if (!(res = do_initialize(s, m->params, &code, err, sizeof err)))
			return send_error(s, m->id, code, err);
		return sb_mcp_send(s, sb_mcp_result_new(m->id, res));
	}
	if (!init)
		return send_error(s, m->id, SB_RPC_INVALID,
				  "invalid request: not initialized (send initialize first)");
	if (!strcmp(meth, "tools/list"))
		return sb_mcp_send(s, sb_mcp_result_new(m->id, sb_mcp_tools_list()));
	if (!strcmp(meth, "resources/templates/list"))
		return sb_mcp_send(s, sb_mcp_result_new(m->id, sb_mcp_resource_templates()));
	if (!strcmp(meth, "resources/subscribe") || !strcmp(meth, "resources/unsubscribe")) {
		const char *uri = json_string_value(json_object_get(m->params, "uri"));
		int rc = SB_OK;
		if (!uri)
			return send_error(s, m->id, SB_RPC_PARAMS,
					  "invalid params: uri must be a string");
		if (meth[10] == 's')
			rc = sb_mcp_subscribe(s, uri);
		else
			sb_mcp_unsubscribe(s, uri);
		if (rc)
			return send_error(s, m->id,
					  rc == SB_ERR_INVAL || rc == SB_ERR_NOTFOUND ||
						  rc == SB_ERR_AMBIGUOUS
					      ? SB_RPC_NO_RESOURCE
					      : SB_RPC_INTERNAL,
					  sb_errmsg(rc));
		return sb_mcp_send(s, sb_mcp_result_new(m->id, json_object()));
	}
	if (!strcmp(meth, "tools/call") || !strcmp(meth, "resources/read") ||
	    !strcmp(meth, "resources/list"))
		return call_start(s, m);
	snprintf(err, sizeof err, "method not found: %.100s", meth);
	send_error(s, m->id, SB_RPC_NO_METHOD, err);
}

static void on_line(struct sb_mcp *s, const char *line, size_t len)
{
	struct sb_mcp_msg m;

	sb_mcp_msg_parse(line, len, &m);
	switch (m.kind) {
	case SB_MCP_MSG_ERROR: send_error(s, m.id, m.code, m.message); break;
	case SB_MCP_MSG_REQUEST: on_request(s, &m); break;
	case SB_MCP_MSG_NOTIFICATION:
		if (!strcmp(m.method, "notifications/cancelled"))
			call_cancel(s, m.params);
		break; /* initialized and the others: nothing to do */
	default: break;
	}
	sb_mcp_msg_free(&m);
}

/* Reads the input to its end (or until the output fails). */
static void serve_input(struct sb_mcp *s, int in)
{
	static char buf[READ_CHUNK];
	struct sb_mcp_lines l;
	enum sb_mcp_line_kind k;
	char *line;
	size_t len;
	int eof = 0;

	sb_mcp_lines_init(&l, SB_MCP_LINE_MAX);
	while (!eof && !s->dead) {
		ssize_t n = read(in, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		eof = n <= 0;
		if (n > 0 && sb_mcp_lines_push(&l, buf, (size_t)n)) {
			fprintf(stderr, "sanbox mcp: out of memory reading a line\n");
			break;
		}
		while ((k = sb_mcp_lines_next(&l, eof, &line, &len)) != SB_MCP_LINE_NONE) {
			if (k == SB_MCP_LINE_OK)
				on_line(s, line, len);
			else
				send_error(s, NULL, SB_RPC_PARSE,
					   "parse error: a line over 8 MiB; dropped up to its "
					   "newline");
		}
	}
	sb_mcp_lines_free(&l);
}

/* Stops the calls in flight and waits up to DRAIN_WAIT_S for them. */
static void serve_drain(struct sb_mcp *s)
{
	struct timespec dl;

	sb_mcp_subs_stop(s);
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += DRAIN_WAIT_S;
	pthread_mutex_lock(&s->mu);
	for (struct sb_mcp_call *c = s->calls; c; c = c->next)
		c->stop = 1;
	while (s->ncalls && pthread_cond_timedwait(&s->cv, &s->mu, &dl) == 0)
		;
	if (s->ncalls)
		fprintf(stderr, "sanbox mcp: %d calls still going at the end\n", s->ncalls);
	pthread_mutex_unlock(&s->mu);
}

int sb_mcp_serve(int in, int out)
{
	static struct sb_mcp s; /* calls left going at the end may still use it */

	if (sb_mcp_tools_init())
		return 1;
	s.out = out;
	pthread_mutex_init(&s.out_mu, NULL);
	pthread_mutex_init(&s.mu, NULL);
	pthread_cond_init(&s.cv, NULL);
	signal(SIGPIPE, SIG_IGN);
	serve_input(&s, in);
	serve_drain(&s);
	return 0;
}
