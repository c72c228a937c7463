/* server.c - the MCP server: one message at a time (sb_mcp_message, for
 * both transports) answers what is quick on the caller's thread
 * (initialize, ping, lists, subscriptions, errors) and serves each
 * tools/call and resources read on a thread of its own, at most SERVE_MAX
 * at once (the caller waits for a free one: back-pressure on the client,
 * never an unbounded queue). Answers go to the sink the message came
 * with. The stdio transport is here too: it reads lines from the input and
 * writes each message whole, one line, under one lock.
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
const char *const sb_mcp_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
				       "2024-11-05", "2024-10-07", NULL};

struct sb_mcp {
	pthread_mutex_t mu;	/* the fields below */
	pthread_cond_t cv;	/* a call ended */
	struct sb_mcp_call *calls; /* in flight */
	int ncalls;
	int refs; /* the owner's and one per call in flight */
	int ended;
	int initialized;
	char version[16]; /* the revision agreed */
	struct sb_mcp_notify notify; /* where notifications go */
	pthread_mutex_t sub_mu; /* one subscribe or unsubscribe at a time */
	struct sb_mcp_subs *subs;
};

void sb_mcp_set_notify(struct sb_mcp *s, struct sb_mcp_sink *notify)
{
	sb_mcp_notify_set(&s->notify, notify);
}

static void send_error(struct sb_mcp_sink *k, const json_t *id, int code, const char *msg)
{
	k->send(k, sb_mcp_error_new(id, code, msg));
}

/* ---- the lifecycle ---- */

static json_t *do_initialize(struct sb_mcp *s, const json_t *params, int *code, char *err,
			     size_t cap)
{
	const json_t *v = json_object_get(params, "protocolVersion");
	const char *use = sb_mcp_versions[0];

	if (!json_is_string(v)) {
		*code = SB_RPC_PARAMS;
		snprintf(err, cap, "invalid params: protocolVersion must be a string");
		return NULL;
	}
	/* the client's revision when it is one of ours, else our newest: the
	 * client then decides whether it speaks it */
	for (size_t i = 0; sb_mcp_versions[i]; i++)
		if (!strcmp(sb_mcp_versions[i], json_string_value(v)))
			use = sb_mcp_versions[i];
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

/* Drops a reference to s; the last frees it. */
static void srv_unref(struct sb_mcp *s)
{
	int last;

	pthread_mutex_lock(&s->mu);
	last = --s->refs == 0;
	pthread_mutex_unlock(&s->mu);
	if (!last)
		return;
	sb_mcp_notify_free(&s->notify);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->sub_mu);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

static void call_free(struct sb_mcp_call *c)
{
	sb_mcp_sink_release(c->sink);
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
		c->sink->send(c->sink, reply);
	call_free(c);
	pthread_mutex_lock(&s->mu);
	s->ncalls--;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	srv_unref(s);
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

/* Starts the call c on a thread of its own, with s->mu held and room for
 * it. Returns 0, or -1 when no thread would start. */
static int call_launch(struct sb_mcp *s, struct sb_mcp_call *c)
{
	pthread_attr_t at;
	pthread_t th;
	int rc;

	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 1u << 20);
	c->next = s->calls;
	s->calls = c;
	s->ncalls++;
	s->refs++;
	if ((rc = pthread_create(&th, &at, call_main, c))) {
		s->calls = c->next;
		s->ncalls--;
		s->refs--;
	}
	pthread_attr_destroy(&at);
	return rc ? -1 : 0;
}

/* Starts m's request on a thread of its own, once fewer than SERVE_MAX
 * run; an id in flight already is refused. */
static void call_start(struct sb_mcp *s, const struct sb_mcp_msg *m, struct sb_mcp_sink *k)
{
	struct sb_mcp_call *c = calloc(1, sizeof *c);
	int rc = -1;

	if (!c)
		return send_error(k, m->id, SB_RPC_INTERNAL, "out of memory");
	c->srv = s;
	c->sink = k;
	sb_mcp_sink_hold(k);
	c->id = json_incref(m->id);
	c->params = json_incref(m->params);
	c->token = json_incref(json_object_get(json_object_get(m->params, "_meta"),
					       "progressToken"));
	snprintf(c->method, sizeof c->method, "%s", m->method);
	pthread_mutex_lock(&s->mu);
	while (s->ncalls >= SERVE_MAX && !s->ended)
		pthread_cond_wait(&s->cv, &s->mu);
	if (call_find(s, m->id)) {
		pthread_mutex_unlock(&s->mu);
		call_free(c);
		return send_error(k, m->id, SB_RPC_INVALID, ID_BUSY);
	}
	if (!s->ended)
		rc = call_launch(s, c);
	pthread_mutex_unlock(&s->mu);
	if (rc) {
		send_error(k, m->id, SB_RPC_INTERNAL, "cannot start a thread for the request");
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

/* resources/subscribe and resources/unsubscribe. */
static void on_subscribe(struct sb_mcp *s, const struct sb_mcp_msg *m, struct sb_mcp_sink *k)
{
	const char *uri = json_string_value(json_object_get(m->params, "uri"));
	int rc = SB_OK;

	if (!uri)
		return send_error(k, m->id, SB_RPC_PARAMS, "invalid params: uri must be a string");
	pthread_mutex_lock(&s->sub_mu);
	if (m->method[10] == 's')
		rc = sb_mcp_subscribe(&s->subs, &s->notify, uri);
	else
		sb_mcp_unsubscribe(s->subs, uri);
	pthread_mutex_unlock(&s->sub_mu);
	if (rc)
		return send_error(k, m->id,
				  rc == SB_ERR_INVAL || rc == SB_ERR_NOTFOUND ||
					  rc == SB_ERR_AMBIGUOUS
				      ? SB_RPC_NO_RESOURCE
				      : SB_RPC_INTERNAL,
				  sb_errmsg(rc));
	k->send(k, sb_mcp_result_new(m->id, json_object()));
}

/* Answers a request that needs the server's state only (*quick set), or
 * starts it on a thread. */
static void on_request(struct sb_mcp *s, const struct sb_mcp_msg *m, struct sb_mcp_sink *k,
		       int *quick)
{
	const char *meth = m->method;
	char err[160];
	json_t *res;
	int code = SB_RPC_INTERNAL, init, busy;

	*quick = 1;
	pthread_mutex_lock(&s->mu);
	busy = call_find(s, m->id) != NULL;
	init = s->initialized;
	pthread_mutex_unlock(&s->mu);
	if (busy)
		return send_error(k, m->id, SB_RPC_INVALID, ID_BUSY);
	if (!strcmp(meth, "ping"))
		return k->send(k, sb_mcp_result_new(m->id, json_object()));
	if (!strcmp(meth, "initialize")) {
		if (init)
			return send_error(k, m->id, SB_RPC_INVALID,
					  "invalid request: already initialized");
		if (!(res = do_initialize(s, m->params, &code, err, sizeof err)))
			return send_error(k, m->id, code, err);
		return k->send(k, sb_mcp_result_new(m->id, res));
	}
	if (!init)
		return send_error(k, m->id, SB_RPC_INVALID,
				  "invalid request: not initialized (send initialize first)");
	if (!strcmp(meth, "tools/list"))
		return k->send(k, sb_mcp_result_new(m->id, sb_mcp_tools_list()));
	if (!strcmp(meth, "resources/templates/list"))
		return k->send(k, sb_mcp_result_new(m->id, sb_mcp_resource_templates()));
	if (!strcmp(meth, "resources/subscribe") || !strcmp(meth, "resources/unsubscribe"))
		return on_subscribe(s, m, k);
	if (!strcmp(meth, "tools/call") || !strcmp(meth, "resources/read") ||
	    !strcmp(meth, "resources/list")) {
		*quick = 0;
		return call_start(s, m, k);
	}
	snprintf(err, sizeof err, "method not found: %.100s", meth);
	send_error(k, m->id, SB_RPC_NO_METHOD, err);
}

int sb_mcp_message(struct sb_mcp *s, const char *text, size_t len, struct sb_mcp_sink *reply,
		   int *quick)
{
	struct sb_mcp_msg m;
	int kind, q = 1;

	sb_mcp_msg_parse(text, len, &m);
	switch (m.kind) {
	case SB_MCP_MSG_ERROR: send_error(reply, m.id, m.code, m.message); break;
	case SB_MCP_MSG_REQUEST: on_request(s, &m, reply, &q); break;
	case SB_MCP_MSG_NOTIFICATION:
		if (!strcmp(m.method, "notifications/cancelled"))
			call_cancel(s, m.params);
		break; /* initialized and the others: nothing to do */
	default: break;
	}
	kind = m.kind;
	sb_mcp_msg_free(&m);
	if (quick)
		*quick = q;
	return kind;
}

/* ---- a server's life ---- */

struct sb_mcp *sb_mcp_new(struct sb_mcp_sink *notify)
{
	struct sb_mcp *s;

	if (sb_mcp_tools_init() || !(s = calloc(1, sizeof *s)))
		return NULL;
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->sub_mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->refs = 1;
	sb_mcp_notify_init(&s->notify, notify);
	return s;
}

int sb_mcp_initialized(struct sb_mcp *s, char *version)
{
	int init;

	pthread_mutex_lock(&s->mu);
	init = s->initialized;
	if (version)
		memcpy(version, s->version, sizeof s->version);
	pthread_mutex_unlock(&s->mu);
	return init;
}

int sb_mcp_busy(struct sb_mcp *s)
{
	int n;

	pthread_mutex_lock(&s->mu);
	n = s->ncalls;
	pthread_mutex_unlock(&s->mu);
	return n > 0;
}

void sb_mcp_end(struct sb_mcp *s, int wait_s)
{
	struct timespec dl;

	pthread_mutex_lock(&s->sub_mu);
	sb_mcp_subs_stop(&s->subs);
	pthread_mutex_unlock(&s->sub_mu);
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += wait_s;
	pthread_mutex_lock(&s->mu);
	s->ended = 1;
	for (struct sb_mcp_call *c = s->calls; c; c = c->next)
		c->stop = 1;
	pthread_cond_broadcast(&s->cv);
	while (s->ncalls && pthread_cond_timedwait(&s->cv, &s->mu, &dl) == 0)
		;
	if (s->ncalls && wait_s)
		fprintf(stderr, "sanbox mcp: %d calls still going at the end\n", s->ncalls);
	pthread_mutex_unlock(&s->mu);
	srv_unref(s);
}

/* ---- the stdio transport ---- */

/* stdio's one sink: each message one line on the output. */
struct stdio_sink {
	struct sb_mcp_sink k;
	int out;
	pthread_mutex_t mu; /* one line at a time */
	volatile int dead;  /* a write failed: the client is gone */
};

static void stdio_send(struct sb_mcp_sink *k, json_t *msg)
{
	struct stdio_sink *o = (struct stdio_sink *)k;
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
	pthread_mutex_lock(&o->mu);
	if (!o->dead && sb_write_full(o->out, line, n + 1))
		o->dead = 1;
	pthread_mutex_unlock(&o->mu);
	free(line);
}

/* Reads the input to its end (or until the output fails). */
static void serve_input(struct sb_mcp *s, struct stdio_sink *o, int in)
{
	static char buf[READ_CHUNK];
	struct sb_mcp_lines l;
	enum sb_mcp_line_kind k;
	char *line;
	size_t len;
	int eof = 0;

	sb_mcp_lines_init(&l, SB_MCP_LINE_MAX);
	while (!eof && !o->dead) {
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
				sb_mcp_message(s, line, len, &o->k, NULL);
			else
				send_error(&o->k, NULL, SB_RPC_PARSE,
					   "parse error: a line over 8 MiB; dropped up to its "
					   "newline");
		}
	}
	sb_mcp_lines_free(&l);
}

int sb_mcp_serve(int in, int out)
{
	/* calls left going at the end may still write to it */
	static struct stdio_sink o = {.k = {.send = stdio_send}, .mu = PTHREAD_MUTEX_INITIALIZER};
	struct sb_mcp *s;

	o.out = out;
	if (!(s = sb_mcp_new(&o.k)))
		return 1;
	signal(SIGPIPE, SIG_IGN);
	serve_input(s, &o, in);
	sb_mcp_end(s, DRAIN_WAIT_S);
	return 0;
}
