/* http.c - MCP's Streamable HTTP transport (revision 2025-06-18 and
 * later) for the server of mcp/server.c: one endpoint, /mcp. A POST
 * carries one JSON-RPC message; a request answered at once gets
 * application/json, one served on a call thread (tools/call, resources
 * read and list) gets text/event-stream: its progress notifications, then
 * its response, then the stream's end. GET opens the session's stream for
 * resource updates; DELETE ends a session. Sessions are sb_mcp servers,
 * made by initialize, named by Mcp-Session-Id.
 *
 * Threads: libmicrohttpd runs a thread per connection; a request's
 * message is served on it (a call on a thread of its own, as on stdio),
 * and a streamed body is written by libmicrohttpd from that thread,
 * blocking in stream_read until a message, the stream's end or a
 * keep-alive is due. All libmicrohttpd use of the MCP server is here.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cli/cli.h"
#include "engine/daemon/token.h"
#include "engine/error.h"
#include "engine/settings.h"
#include "mcp/jsonrpc.h"
#include "mcp/mcp.h"

#define ENDPOINT    "/mcp"
#define SID_HEADER  "Mcp-Session-Id"
#define VER_HEADER  "MCP-Protocol-Version"
#define KEEPALIVE_S 15 /* an SSE comment on a silent stream */
#define PEM_MAX	    (1u << 20)

/* ---- a response body: messages queued by the server, read by MHD ---- */

struct item {
	char *text; /* one JSON-RPC message, compact */
	struct item *next;
};

struct stream {
	struct sb_mcp_sink k;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int refs;    /* the request's, the response's, and each writer's */
	int writers; /* sinks held by the server: none left ends the stream */
	int gone;    /* the client went away: messages are dropped */
	struct item *head, **tail;
	char *cur; /* the SSE event being written, and how far */
	size_t cur_len, cur_off;
};

static void stream_unref(struct stream *st)
{
	int last;

	pthread_mutex_lock(&st->mu);
	last = --st->refs == 0;
	pthread_mutex_unlock(&st->mu);
	if (!last)
		return;
	for (struct item *it = st->head, *nx; it; it = nx) {
		nx = it->next;
		free(it->text);
		free(it);
	}
	free(st->cur);
	pthread_cond_destroy(&st->cv);
	pthread_mutex_destroy(&st->mu);
	free(st);
}

static void stream_send(struct sb_mcp_sink *k, json_t *msg)
{
	struct stream *st = (struct stream *)k;
	struct item *it = NULL;
	char *text;

	if (!msg)
		return;
	text = json_dumps(msg, JSON_COMPACT | JSON_ENSURE_ASCII);
	json_decref(msg);
	if (!text || !(it = calloc(1, sizeof *it))) {
		free(text);
		fprintf(stderr, "sanbox mcp: out of memory for a reply\n");
		return;
	}
	it->text = text;
	pthread_mutex_lock(&st->mu);
	if (!st->gone) {
		*st->tail = it;
		st->tail = &it->next;
		it = NULL;
		pthread_cond_broadcast(&st->cv);
	}
	pthread_mutex_unlock(&st->mu);
	if (it) {
		free(it->text);
		free(it);
	}
}

static void stream_hold(struct sb_mcp_sink *k)
{
	struct stream *st = (struct stream *)k;

	pthread_mutex_lock(&st->mu);
	st->refs++;
	st->writers++;
	pthread_mutex_unlock(&st->mu);
}

static void stream_release(struct sb_mcp_sink *k)
{
	struct stream *st = (struct stream *)k;

	pthread_mutex_lock(&st->mu);
	if (!--st->writers)
		pthread_cond_broadcast(&st->cv);
	pthread_mutex_unlock(&st->mu);
	stream_unref(st);
}

/* A new stream, its one reference the caller's. NULL without memory. */
static struct stream *stream_new(void)
{
	struct stream *st = calloc(1, sizeof *st);

	if (!st)
		return NULL;
	st->k = (struct sb_mcp_sink){stream_send, stream_hold, stream_release};
	pthread_mutex_init(&st->mu, NULL);
	pthread_cond_init(&st->cv, NULL);
	st->refs = 1;
	st->tail = &st->head;
	return st;
}

/* Takes the first message queued (the caller frees it), or NULL. Called
 * with st->mu held. */
static char *stream_pop(struct stream *st)
{
	struct item *it = st->head;
	char *text;

	if (!it)
		return NULL;
	if (!(st->head = it->next))
		st->tail = &st->head;
	text = it->text;
	free(it);
	return text;
}

/* MHD's reader of an SSE body: the events queued, a keep-alive comment
 * after KEEPALIVE_S of silence, the end once no writer is left. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct stream *st = cls;
	struct timespec dl;
	ssize_t n = 0;
	char *text;

	pthread_mutex_lock(&st->mu);
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += KEEPALIVE_S;
	while (!st->cur && !st->head && st->writers)
		if (pthread_cond_timedwait(&st->cv, &st->mu, &dl) == ETIMEDOUT)
			break;
	if (!st->cur && (text = stream_pop(st))) {
		if (asprintf(&st->cur, "event: message\ndata: %s\n\n", text) < 0)
			st->cur = NULL;
		st->cur_len = st->cur ? strlen(st->cur) : 0;
		st->cur_off = 0;
		free(text);
	}
	if (st->cur) {
		n = (ssize_t)(st->cur_len - st->cur_off < max ? st->cur_len - st->cur_off
							      : max);
		memcpy(buf, st->cur + st->cur_off, (size_t)n);
		if ((st->cur_off += (size_t)n) == st->cur_len) {
			free(st->cur);
			st->cur = NULL;
		}
	} else if (!st->writers && !st->head) {
		n = MHD_CONTENT_READER_END_OF_STREAM;
	} else if (max >= 3) {
		memcpy(buf, ":\n\n", 3); /* keep-alive */
		n = 3;
	}
	pthread_mutex_unlock(&st->mu);
	return n;
}

/* The response is gone (sent, or its client left). */
static void stream_done(void *cls)
{
	struct stream *st = cls;

	pthread_mutex_lock(&st->mu);
	st->gone = 1;
	pthread_mutex_unlock(&st->mu);
	stream_unref(st);
}

/* ---- sessions ---- */

struct session {
	char id[33];		     /* 128 random bits, hex */
	char who[SB_TOKEN_NAME_MAX]; /* the token that made it: only it may use it */
	struct sb_mcp *srv;
	int refs;	      /* the table's, and each request's using it */
	struct timespec used; /* last request */
	struct session *next;
};

struct http {
	struct MHD_Daemon *mhd;
	int loopback;	   /* bound to a loopback address, plain HTTP */
	uint64_t max_body; /* bytes of a POST's message */
	size_t max_sessions;
	pthread_mutex_t mu; /* the sessions */
	struct session *sessions;
	size_t nsessions;
};

/* A request's state across MHD's calls of on_access. */
struct req {
	struct session *ses; /* held, or NULL */
	char who[SB_TOKEN_NAME_MAX];
	char *body;
	size_t len, cap;
	int toolarge;
};

/* Drops a reference to ses; the last ends its server. */
static void session_unref(struct http *h, struct session *ses)
{
	int last;

	pthread_mutex_lock(&h->mu);
	last = --ses->refs == 0;
	pthread_mutex_unlock(&h->mu);
	if (!last)
		return;
	sb_mcp_set_notify(ses->srv, NULL); /* ends its GET stream */
	sb_mcp_end(ses->srv, 0);
	free(ses);
}

/* Takes ses out of the table (held by the caller: ended at its unref).
 * Called with h->mu held. */
static void session_unlink(struct http *h, struct session *ses)
{
	for (struct session **pp = &h->sessions; *pp; pp = &(*pp)->next)
		if (*pp == ses) {
			*pp = ses->next;
			h->nsessions--;
			ses->refs--; /* the table's */
			return;
		}
}

/* The session named id for the token who, held; NULL when none. */
static struct session *session_get(struct http *h, const char *id, const char *who)
{
	struct session *ses;

	pthread_mutex_lock(&h->mu);
	for (ses = h->sessions; ses; ses = ses->next)
		if (!strcmp(ses->id, id) && !strcmp(ses->who, who)) {
			ses->refs++;
			clock_gettime(CLOCK_MONOTONIC, &ses->used);
			break;
		}
	pthread_mutex_unlock(&h->mu);
	return ses;
}

/* Makes room for one more session: at the limit, the one used longest
 * ago with nothing in flight (no request, no call) is ended (its GET
 * stream with it). Called with h->mu held. Returns 0, or -1 when every one is busy;
 * *evicted is the session to unref once h->mu is let go. */
static int session_room(struct http *h, struct session **evicted)
{
	struct session *old = NULL;

	*evicted = NULL;
	if (h->nsessions < h->max_sessions)
		return 0;
	for (struct session *s = h->sessions; s; s = s->next)
		if (s->refs == 1 && !sb_mcp_busy(s->srv) &&
		    (!old || s->used.tv_sec < old->used.tv_sec ||
		     (s->used.tv_sec == old->used.tv_sec &&
		      s->used.tv_nsec < old->used.tv_nsec)))
			old = s;
	if (!old)
		return -1;
	old->refs++;
	session_unlink(h, old);
	*evicted = old;
	return 0;
}

/* A new session for the token who, not yet in the table, held once by
 * the caller. NULL without memory. */
static struct session *session_new(const char *who)
{
	struct session *ses = calloc(1, sizeof *ses);
	unsigned char raw[16];

	if (!ses || !(ses->srv = sb_mcp_new(NULL))) {
		free(ses);
		return NULL;
	}
	randombytes_buf(raw, sizeof raw);
	sodium_bin2hex(ses->id, sizeof ses->id, raw, sizeof raw);
	snprintf(ses->who, sizeof ses->who, "%s", who);
	ses->refs = 1;
	clock_gettime(CLOCK_MONOTONIC, &ses->used);
	return ses;
}

/* Puts ses in the table (it takes a reference). Returns 0, or -1 when
 * every session is busy. */
static int session_add(struct http *h, struct session *ses)
{
	struct session *evicted;
	int rc;

	pthread_mutex_lock(&h->mu);
	if ((rc = session_room(h, &evicted)) == 0) {
		ses->next = h->sessions;
		h->sessions = ses;
		h->nsessions++;
		ses->refs++;
	}
	pthread_mutex_unlock(&h->mu);
	if (evicted)
		session_unref(h, evicted);
	return rc;
}

/* ---- checks of a request's headers ---- */

static const char *header(struct MHD_Connection *c, const char *name)
{
	return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

/* The bearer token's check, as the daemon's remote listener makes it
 * (sb_token_check against its tokens); the token's name into who.
 * Returns 0, or -1 when there is no valid token. */
static int check_token(struct MHD_Connection *c, char *who, size_t cap)
{
	const char *a = header(c, MHD_HTTP_HEADER_AUTHORIZATION);

	if (!a || strncasecmp(a, "Bearer ", 7))
		return -1;
	for (a += 7; *a == ' '; a++)
		;
	return sb_token_check(cli_home, a, strlen(a), who, cap) == SB_OK ? 0 : -1;
}

/* Whether the authority a (HOST[:PORT], or [V6][:PORT]) names a loopback
 * host: localhost, 127.0.0.0/8 or ::1. */
static int loopback_authority(const char *a)
{
	char host[64];
	size_t n;
	struct in_addr v4;

	if (*a == '[') {
		n = strcspn(a + 1, "]");
		return a[1 + n] == ']' && n == 3 && !strncmp(a + 1, "::1", 3) &&
		       (!a[n + 2] || a[n + 2] == ':');
	}
	n = strcspn(a, ":");
	if (!n || n >= sizeof host)
		return 0;
	memcpy(host, a, n);
	host[n] = 0;
	if (!strcasecmp(host, "localhost"))
		return 1;
	return inet_pton(AF_INET, host, &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

/* DNS rebinding: on a loopback address, Host must name a loopback host
 * and Origin, when sent, too; with TLS an Origin must be https://HOST of
 * the request's Host. Returns 1 when they pass. */
static int check_origin(const struct http *h, struct MHD_Connection *c)
{
	const char *o = header(c, "Origin"), *host = header(c, MHD_HTTP_HEADER_HOST);

	if (h->loopback) {
		if (!host || !loopback_authority(host))
			return 0;
		if (!o)
			return 1;
		if (!strncmp(o, "http://", 7))
			return loopback_authority(o + 7);
		return !strncmp(o, "https://", 8) && loopback_authority(o + 8);
	}
	return !o || (host && !strncmp(o, "https://", 8) && !strcasecmp(o + 8, host));
}

/* MCP-Protocol-Version, when sent, must be a revision spoken. */
static int check_version(struct MHD_Connection *c)
{
	const char *v = header(c, VER_HEADER);

	if (!v)
		return 1;
	for (size_t i = 0; sb_mcp_versions[i]; i++)
		if (!strcmp(v, sb_mcp_versions[i]))
			return 1;
	return 0;
}

/* ---- responses ---- */

/* Queues a response of status with body (owned: freed; NULL: none) of
 * type ctype, naming the session sid when not NULL. */
static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, char *body,
			       const char *ctype, const char *sid)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_buffer(
	    body ? strlen(body) : 0, body ? body : (char *)"",
	    body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	if (body)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	if (sid)
		MHD_add_response_header(resp, SID_HEADER, sid);
	if (status == MHD_HTTP_UNAUTHORIZED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, POST, DELETE");
	ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* A response of status whose body is the JSON-RPC error code, message. */
static enum MHD_Result respond_error(struct MHD_Connection *c, unsigned status, int code,
				     const char *msg)
{
	json_t *e = sb_mcp_error_new(NULL, code, msg);
	char *body = e ? json_dumps(e, JSON_COMPACT) : NULL;

	json_decref(e);
	return respond(c, status, body, "application/json", NULL);
}

/* The body of st as text/event-stream, written as its messages come. */
static enum MHD_Result respond_stream(struct MHD_Connection *c, struct stream *st,
				      const char *sid)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, st,
						 stream_done);
	if (!resp)
		return MHD_NO;
	pthread_mutex_lock(&st->mu);
	st->refs++; /* the response's, let go by stream_done */
	pthread_mutex_unlock(&st->mu);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	if (sid)
		MHD_add_response_header(resp, SID_HEADER, sid);
	ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* ---- the methods ---- */

/* Whether the body is an initialize request (a session's first message). */
static int is_initialize(const struct req *r)
{
	struct sb_mcp_msg m;
	int yes;

	sb_mcp_msg_parse(r->body ? r->body : "", r->len, &m);
	yes = m.kind == SB_MCP_MSG_REQUEST && !strcmp(m.method, "initialize");
	sb_mcp_msg_free(&m);
	return yes;
}

/* Answers st's one message as application/json with status. */
static enum MHD_Result respond_popped(struct MHD_Connection *c, unsigned status,
				      struct stream *st, const char *sid)
{
	char *text;

	pthread_mutex_lock(&st->mu);
	text = stream_pop(st);
	pthread_mutex_unlock(&st->mu);
	return respond(c, status, text, "application/json", sid);
}

/* Serves the message a POST carried, in r->ses's server (made by an
 * initialize without a session). */
static enum MHD_Result on_post(struct http *h, struct MHD_Connection *c, struct req *r)
{
	struct stream *st;
	const char *sid = NULL;
	enum MHD_Result ret;
	int kind, quick = 1, fresh = !r->ses;

	if (r->toolarge)
		return respond_error(
		    c, MHD_HTTP_CONTENT_TOO_LARGE, SB_RPC_INVALID,
		    "invalid request: the message is over the size limit");
	if (!r->ses && !is_initialize(r))
		return respond_error(c, MHD_HTTP_BAD_REQUEST, SB_RPC_INVALID,
				     "invalid request: no " SID_HEADER
				     " (send initialize first)");
	if (!r->ses && !(r->ses = session_new(r->who)))
		return respond_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, SB_RPC_INTERNAL,
				     "out of memory");
	if (!(st = stream_new()))
		return MHD_NO;
	kind =
	    sb_mcp_message(r->ses->srv, r->body ? r->body : "", r->len, &st->k, &quick);
	if (fresh && sb_mcp_initialized(r->ses->srv, NULL)) {
		if (session_add(h, r->ses)) {
			stream_unref(st);
			return respond_error(c, MHD_HTTP_SERVICE_UNAVAILABLE,
					     SB_RPC_INTERNAL,
					     "too many sessions, each busy");
		}
		sid = r->ses->id;
	}
	if (kind == SB_MCP_MSG_REQUEST)
		ret = quick ? respond_popped(c, MHD_HTTP_OK, st, sid)
			    : respond_stream(c, st, sid);
	else if (kind == SB_MCP_MSG_ERROR)
		ret = respond_popped(c, MHD_HTTP_BAD_REQUEST, st, NULL);
	else if (kind == SB_MCP_MSG_EMPTY)
		ret = respond_error(c, MHD_HTTP_BAD_REQUEST, SB_RPC_INVALID,
				    "invalid request: an empty body");
	else /* a notification or a response: nothing to answer */
		ret = respond(c, MHD_HTTP_ACCEPTED, NULL, NULL, NULL);
	stream_unref(st);
	return ret;
}

/* GET: the session's stream of messages that answer no request
 * (resource updates); a new one ends the one before. */
static enum MHD_Result on_get(struct MHD_Connection *c, struct req *r)
{
	struct stream *st = stream_new();
	enum MHD_Result ret;

	if (!st)
		return MHD_NO;
	sb_mcp_set_notify(r->ses->srv, &st->k);
	ret = respond_stream(c, st, NULL);
	stream_unref(st);
	return ret;
}

/* The first call for a request: its headers, before any of its body. */
static enum MHD_Result on_headers(struct http *h, struct MHD_Connection *c,
				  const char *url, const char *method, void **ctx)
{
	const char *sid = header(c, SID_HEADER), *len;
	int post = !strcmp(method, "POST");
	char who[SB_TOKEN_NAME_MAX];
	struct req *r;

	if (check_token(c, who, sizeof who) < 0) /* first: nothing tells one not let in */
		return respond(c, MHD_HTTP_UNAUTHORIZED, NULL, NULL, NULL);
	if (!check_origin(h, c))
		return respond(c, MHD_HTTP_FORBIDDEN, NULL, NULL, NULL);
	if (strcmp(url, ENDPOINT))
		return respond(c, MHD_HTTP_NOT_FOUND, NULL, NULL, NULL);
	if (!post && strcmp(method, "GET") && strcmp(method, "DELETE"))
		return respond(c, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, NULL, NULL);
	if (!check_version(c))
		return respond_error(c, MHD_HTTP_BAD_REQUEST, SB_RPC_INVALID,
				     "invalid request: unsupported " VER_HEADER);
	if (post && (len = header(c, MHD_HTTP_HEADER_CONTENT_LENGTH)) &&
	    strtoull(len, NULL, 10) > h->max_body)
		return respond_error(
		    c, MHD_HTTP_CONTENT_TOO_LARGE, SB_RPC_INVALID,
		    "invalid request: the message is over the size limit");
	if (!post && !sid)
		return respond_error(c, MHD_HTTP_BAD_REQUEST, SB_RPC_INVALID,
				     "invalid request: no " SID_HEADER);
	if (!(r = calloc(1, sizeof *r)))
		return MHD_NO;
	memcpy(r->who, who, sizeof who);
	if (sid && !(r->ses = session_get(h, sid, r->who))) {
		free(r);
		return respond_error(
		    c, MHD_HTTP_NOT_FOUND, SB_RPC_INVALID,
		    "invalid request: no such session (initialize again)");
	}
	*ctx = r;
	return MHD_YES;
}

/* Appends n bytes of a POST's body; past the limit they are dropped. */
static void body_append(struct http *h, struct req *r, const char *p, size_t n)
{
	char *nb;
	size_t cap;

	if (r->toolarge || r->len + n > h->max_body) {
		r->toolarge = 1;
		return;
	}
	if (r->len + n + 1 > r->cap) {
		for (cap = r->cap ? r->cap : 4096; cap < r->len + n + 1; cap *= 2)
			;
		if (!(nb = realloc(r->body, cap))) {
			r->toolarge = 1;
			return;
		}
		r->body = nb;
		r->cap = cap;
	}
	memcpy(r->body + r->len, p, n);
	r->len += n;
	r->body[r->len] = 0;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
				 const char *method, const char *version,
				 const char *upload_data, size_t *upload_data_size,
				 void **ctx)
{
	struct http *h = cls;
	struct req *r = *ctx;

	if (!r)
		return on_headers(h, c, url, method, ctx);
	if (*upload_data_size) {
		body_append(h, r, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (!strcmp(method, "POST"))
		return on_post(h, c, r);
	if (!strcmp(method, "GET"))
		return on_get(c, r);
	pthread_mutex_lock(&h->mu); /* DELETE */
	session_unlink(h, r->ses);
	pthread_mutex_unlock(&h->mu);
	return respond(c, MHD_HTTP_OK, NULL, NULL, NULL);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **ctx,
			 enum MHD_RequestTerminationCode toe)
{
	struct http *h = cls;
	struct req *r = *ctx;

	if (!r)
		return;
	if (r->ses)
		session_unref(h, r->ses);
	free(r->body);
	free(r);
	*ctx = NULL;
}

/* ---- the listener ---- */

/* Reads a PEM file whole into *out (NUL-terminated; the caller frees).
 * Errors: SB_ERR_IO, SB_ERR_TOO_BIG... as one line in the detail. */
static int pem_read(const char *path, char **out)
{
	FILE *f = fopen(path, "re");
	char *buf = NULL;
	size_t n = 0;
	int rc = SB_OK;

	*out = NULL;
	if (!f)
		return sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	if (!(buf = malloc(PEM_MAX + 1)))
		rc = SB_ERR_NOMEM;
	else if ((n = fread(buf, 1, PEM_MAX + 1, f)) > PEM_MAX || ferror(f) || !n)
		rc = sb_seterr(SB_ERR_INVAL, "%s: not a PEM file of at most 1 MiB", path);
	fclose(f);
	if (rc) {
		free(buf);
		return rc;
	}
	buf[n] = 0;
	*out = buf;
	return SB_OK;
}

/* Resolves addr (HOST:PORT, [V6]:PORT) into *ai (freed by the caller).
 * Errors: SB_ERR_INVAL. */
static int addr_parse(const char *addr, struct addrinfo **ai)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	char host[256];
	const char *port = strrchr(addr, ':');
	size_t n;

	if (!port || !port[1] || (size_t)(port - addr) >= sizeof host)
		return sb_seterr(SB_ERR_INVAL, "--http %s: give HOST:PORT", addr);
	n = (size_t)(port - addr);
	if (addr[0] == '[' && n >= 2 && addr[n - 1] == ']') {
		memcpy(host, addr + 1, n - 2);
		host[n - 2] = 0;
	} else {
		memcpy(host, addr, n);
		host[n] = 0;
	}
	if (getaddrinfo(host, port + 1, &hints, ai))
		return sb_seterr(SB_ERR_INVAL, "--http %s: not an address and port",
				 addr);
	return SB_OK;
}

static int sockaddr_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) ==
		       127;
	return sa->sa_family == AF_INET6 &&
	       IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

/* Starts h's libmicrohttpd on ai with the limits of the daemon's remote
 * listener, TLS when cert and key (PEM text) are given. Errors: SB_ERR_IO. */
static int http_start(struct http *h, const struct addrinfo *ai,
		      const struct sb_settings *st, const char *cert, const char *key)
{
	struct MHD_OptionItem o[] = {
	    {MHD_OPTION_SOCK_ADDR, 0, ai->ai_addr},
	    {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)st->remote_max_conns, NULL},
	    {MHD_OPTION_PER_IP_CONNECTION_LIMIT, (intptr_t)st->remote_max_conns_per_peer,
	     NULL},
	    {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)st->remote_idle_s, NULL},
	    {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, h},
	    {cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, (void *)cert},
	    {MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)key},
	    {MHD_OPTION_HTTPS_PRIORITIES, 0,
	     (void *)"NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"},
	    {MHD_OPTION_END, 0, NULL},
	};
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
			 MHD_USE_POLL | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0) |
			 (cert ? MHD_USE_TLS : 0);

	h->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_access, h, MHD_OPTION_ARRAY, o,
				  MHD_OPTION_END);
	if (!h->mhd)
		return sb_seterr(SB_ERR_IO, "libmicrohttpd would not start: %s",
				 strerror(errno));
	return SB_OK;
}

/* Ends every session and the listener. */
static void http_stop(struct http *h)
{
	struct session *ses;

	for (;;) {
		pthread_mutex_lock(&h->mu);
		if ((ses = h->sessions)) {
			ses->refs++;
			session_unlink(h, ses);
		}
		pthread_mutex_unlock(&h->mu);
		if (!ses)
			break;
		session_unref(h, ses);
	}
	MHD_stop_daemon(h->mhd);
}

/* Sets h up from the options and starts it; what goes wrong is told on
 * stderr in one line. Returns 0 or -1. */
static int http_open(struct http *h, const char *addr, const char *cert, const char *key)
{
	struct addrinfo *ai = NULL;
	struct sb_settings st;
	char *c = NULL, *k = NULL;
	int rc;

	if ((rc = addr_parse(addr, &ai)) || (rc = sb_settings_load(cli_home, &st)))
		goto out;
	h->loopback = sockaddr_loopback(ai->ai_addr) && !cert;
	if (!cert && !sockaddr_loopback(ai->ai_addr)) {
		rc = sb_seterr(SB_ERR_INVAL,
			       "--http %s: not a loopback address, so it needs "
			       "TLS: give --cert and --key",
			       addr);
		goto out;
	}
	if (cert && ((rc = pem_read(cert, &c)) || (rc = pem_read(key, &k))))
		goto out;
	h->max_body = st.remote_max_request < SB_MCP_LINE_MAX ? st.remote_max_request
							      : SB_MCP_LINE_MAX;
	h->max_sessions = st.remote_max_conns;
	pthread_mutex_init(&h->mu, NULL);
	rc = http_start(h, ai, &st, c, k);
out:
	if (rc)
		fprintf(stderr, "sanbox: mcp: %s\n", sb_errmsg(rc));
	if (ai)
		freeaddrinfo(ai);
	if (k)
		sodium_memzero(k, strlen(k));
	free(c);
	free(k);
	return rc ? -1 : 0;
}

int sb_mcp_serve_http(const char *addr, const char *cert, const char *key)
{
	static struct http h;
	const union MHD_DaemonInfo *di;
	sigset_t set;
	int sig;

	if (sb_mcp_tools_init())
		return 1;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set,
			NULL); /* for sigwait: MHD's threads inherit it */
	signal(SIGPIPE, SIG_IGN);
	if (http_open(&h, addr, cert, key))
		return 1;
	di = MHD_get_daemon_info(h.mhd, MHD_DAEMON_INFO_BIND_PORT);
	fprintf(stderr, "sanbox mcp: serving %s on port %u (--http %s)\n", ENDPOINT,
		di ? di->port : 0, addr);
	sigwait(&set, &sig);
	http_stop(&h);
	return 0;
}
