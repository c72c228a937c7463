/* gateway.c - the model gateway (see gateway.h).
 *
 * Threads: libmicrohttpd runs a thread per client connection; a request's
 * whole life (reading, forwarding with libcurl, streaming back, recording)
 * runs on it. A watchdog thread closes connections past their deadline.
 * Shared state (runs, budgets, connections) is under gw->mu, held only for
 * short bookkeeping, never across I/O. A run entry is reference counted: a
 * call in flight or an open connection keeps it alive after its removal.
 *
 * Connections: there is no listening socket. sb_gateway_connect makes a
 * socket pair and gives one end to libmicrohttpd (MHD_add_connection) with
 * an address that carries the connection's number; libmicrohttpd copies
 * that address into the connection, and the start notification (on its
 * own thread, later) reads the number back to find the gw_conn, which
 * becomes the connection's socket context. So the tie of a connection to
 * its run is made before libmicrohttpd sees a byte and travels with the
 * connection itself: no table keyed by a port or a descriptor that a new
 * connection could reuse.
 *
 * Deadlines: libmicrohttpd's own timeout restarts at every byte, which a
 * client sending one byte every few seconds defeats. The gateway keeps
 * each connection's phase (waiting for headers, reading a body, answering)
 * and a deadline for the first two, and the watchdog shuts down the socket
 * of a connection past it; libmicrohttpd then sees EOF and closes it.
 * libmicrohttpd closes a socket only after the close notification, which
 * takes gw->mu: so while the watchdog holds gw->mu and the connection is
 * started and not closed, its descriptor is still that connection's.
 */
#include "engine/gateway/gateway.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <msgpack.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/gateway/rerun.h"
#include "engine/gateway/upstream.h"
#include "engine/mpack.h"

#define BODY_MAX	   (16u << 20) /* largest request body */
#define ANSWER_MAX	   (64u << 20) /* largest answer held or recorded */
#define SHARE_MIN	   8	       /* a run's share of the connections: at least */
#define SHARE_MAX	   64	       /* and at most (the tunnel's streams) */
#define CONN_MARGIN	   64 /* libmicrohttpd's limit above ours: it never refuses first */
#define CONNECT_TIMEOUT_MS 10000
#define STALL_TIMEOUT_S	   300		 /* an answer that sends nothing for this long */
#define CUT_SLACK(t)	   ((t) / 4 + 8) /* estimate above the grant before a cut */

struct gw_model {
	struct sb_model m;
	char base_url[SB_URL_MAX];
	unsigned apis;
	char *key; /* sodium_malloc, or NULL */
};

/* A group's budget, shared by its registered runs (under gw->mu). */
#define GW_GROUP_MAX 64 /* a group name and its NUL */

struct gw_group {
	char name[GW_GROUP_MAX];
	struct sb_budget budget;
	int exceeded;
	unsigned refs; /* its registered runs (and calls in flight of them) */
	struct gw_group *next;
};

struct gw_run {
	char id[SB_RUN_MAX];
	struct gw_group *group; /* NULL: no group budget */
	pthread_mutex_t record_mu; /* a call's settling and recording, one at a
				    * time, so its usage events' total_nusd
				    * grow in the log's order */
	char key[SB_VKEY_MAX];
	char alias[SB_VKEY_MAX]; /* see sb_gateway_run.alias; "" when none */
	struct sb_budget budget;
	int stop_on_budget, exceeded;
	struct gw_model *models;
	size_t nmodels;
	unsigned refs;
	int removed;
	unsigned conns; /* connections open */
	unsigned trims; /* of them, being closed for being above the share */
	sb_rerun *rerun; /* a re-run's recorded calls (owned), or NULL */
	struct gw_run *next;
};

/* Where a connection is, for its deadline. */
enum phase {
	PH_HEADERS, /* waiting for a request's headers */
	PH_BODY,    /* reading a request's body */
	PH_CALL,    /* answering: no deadline */
};

/* One connection, from sb_gateway_connect until libmicrohttpd closes it,
 * and then its socket context. The fields above curl are under gw->mu. */
struct gw_conn {
	uint64_t id;	    /* the number in the address libmicrohttpd got */
	struct gw_run *run; /* the run it is tied to; a reference is held */
	int fd;		    /* libmicrohttpd's end */
	int added;	    /* given to libmicrohttpd */
	int started;	    /* libmicrohttpd announced it */
	int cut;	    /* shut down by the watchdog */
	int trimmed;	    /* cut for being above its run's share */
	enum phase phase;
	uint64_t deadline; /* ms, monotonic; not in PH_CALL */
	struct gw_conn *next;
	CURL *curl; /* upstream handles, reused by its requests */
	CURLM *multi;
};

struct sb_gateway {
	struct MHD_Daemon *mhd;
	sb_log *log;
	void (*on_budget)(void *ctx, const char *run);
	void (*on_call)(void *ctx, const char *run);
	void (*on_diverged)(void *ctx, const char *run);
	void *ctx;
	unsigned max_conns;
	uint64_t header_ms, body_ms;
	pthread_mutex_t mu;
	pthread_cond_t wake; /* the watchdog's */
	pthread_t watchdog;
	int watching, stopping;
	uint64_t wake_at; /* when the watchdog wakes next (ms, monotonic) */
	struct gw_run *runs;
	unsigned nruns;
	struct gw_group *groups;
	struct gw_conn *conns;
	unsigned nconns;
	uint64_t next_id;
};

enum route { R_NONE, R_CHAT, R_MESSAGES, R_RESPONSES, R_COUNT_TOKENS, R_MODELS };

/* The dialect of a model call's route. */
static unsigned api_of(enum route r)
{
	return r == R_MESSAGES || r == R_COUNT_TOKENS ? SB_API_ANTHROPIC
	       : r == R_RESPONSES		      ? SB_API_RESPONSES
						      : SB_API_OPENAI;
}

/* The name of dialect api in the record and in messages. */
static const char *api_name(unsigned api)
{
	return api == SB_API_ANTHROPIC	 ? "anthropic"
	       : api == SB_API_RESPONSES ? "responses"
					 : "openai";
}

/* A msgpack_sbuffer (used as a plain growing byte buffer) with a cap. */
struct gbuf {
	msgpack_sbuffer b; /* b.data, b.size: the bytes so far */
	size_t max;
	int over; /* bytes past max were dropped */
};

/* One HTTP request. */
struct gw_req {
	enum route route;
	struct gbuf body;
};

/* One forwarded call, from reservation to record. */
struct gw_call {
	sb_gateway *gw;
	struct gw_run *run; /* a reference is held */
	const struct gw_model *model;
	struct gw_conn *conn;
	unsigned api;
	const char *path; /* upstream, after the base URL: "/messages" (static) */
	int stream;
	char *req; /* the body as sent upstream */
	size_t req_len;
	const struct sb_upstream_ops *up; /* where its answer comes from */
	void *upcall;			  /* its handle there, or NULL */
	struct sb_upstream_req upreq;
	char version[72], beta[264]; /* its anthropic headers */
	unsigned choices;	       /* completions asked for (OpenAI n) */
	uint64_t granted, reservation; /* granted: max_tokens of each choice */
	struct gbuf answer;	       /* the answer as received */
	struct gbuf pend;	       /* stream bytes not yet given to the client */
	struct sb_sse_meter meter;
	long status;
	int up_done, cut, settled;
	int replayed; /* answered from the record of the run it re-runs */
	struct timespec t0;
};

/* --- small helpers --- */

static int gbuf_add(struct gbuf *g, const void *data, size_t n)
{
	if (g->b.size + n > g->max) {
		g->over = 1;
		n = g->max - g->b.size;
	}
	return n && msgpack_sbuffer_write(&g->b, data, n) ? SB_ERR_NOMEM : SB_OK;
}

/* Drops the first n bytes. */
static void gbuf_consume(struct gbuf *g, size_t n)
{
	memmove(g->b.data, g->b.data + n, g->b.size - n);
	g->b.size -= n;
}

static void gbuf_free(struct gbuf *g)
{
	msgpack_sbuffer_destroy(&g->b);
	memset(g, 0, sizeof *g);
}

static uint64_t ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)((t.tv_sec - t0->tv_sec) * 1000 +
			  (t.tv_nsec - t0->tv_nsec) / 1000000);
}

static uint64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* Drops a reference to g (gw->mu held); the last frees it. */
static void group_unref_locked(sb_gateway *gw, struct gw_group *g)
{
	if (--g->refs)
		return;
	for (struct gw_group **p = &gw->groups; *p; p = &(*p)->next) {
		if (*p == g) {
			*p = g->next;
			break;
		}
	}
	free(g);
}

/* The group name of spec, its budget held by every run of it registered
 * (gw->mu held): the one registered, else a new one with spec's budget
 * and spent. NULL when out of memory. */
static struct gw_group *group_ref_locked(sb_gateway *gw, const struct sb_gateway_run *spec)
{
	struct gw_group *g;

	for (g = gw->groups; g; g = g->next) {
		if (!strcmp(g->name, spec->group)) {
			g->refs++;
			return g;
		}
	}
	if (!(g = calloc(1, sizeof *g)))
		return NULL;
	snprintf(g->name, sizeof g->name, "%s", spec->group);
	g->budget.limit = spec->group_budget_nusd;
	g->budget.spent = spec->group_spent_nusd;
	g->exceeded = g->budget.spent >= g->budget.limit;
	g->refs = 1;
	g->next = gw->groups;
	gw->groups = g;
	return g;
}

static void run_unref(sb_gateway *gw, struct gw_run *r)
{
	int last;

	pthread_mutex_lock(&gw->mu);
	last = --r->refs == 0 && r->removed;
	if (last && r->group)
		group_unref_locked(gw, r->group);
	pthread_mutex_unlock(&gw->mu);
	if (!last)
		return;
	for (size_t i = 0; i < r->nmodels; i++)
		sodium_free(r->models[i].key);
	free(r->models);
	sb_rerun_free(r->rerun);
	sodium_memzero(r->key, sizeof r->key);
	sodium_memzero(r->alias, sizeof r->alias);
	pthread_mutex_destroy(&r->record_mu);
	free(r);
}

/* --- answers of the gateway itself --- */

static enum MHD_Result send_body(struct MHD_Connection *c, unsigned status,
				 const char *ctype, char *body, size_t len)
{
	struct MHD_Response *resp =
	    MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	enum MHD_Result ret;

	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	if (status == 429)
		MHD_add_response_header(resp, "Retry-After", "1");
	ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* An error in the dialect of the route: OpenAI {"error": {...}} or
 * Anthropic {"type": "error", "error": {...}}. */
static enum MHD_Result send_error(struct MHD_Connection *c, enum route route,
				  unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static enum MHD_Result send_error(struct MHD_Connection *c, enum route route,
				  unsigned status, const char *fmt, ...)
{
	char msg[512];
	json_t *j;
	char *s;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (api_of(route) == SB_API_ANTHROPIC)
		j = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
			      sb_api_error_type(SB_API_ANTHROPIC, status), "message",
			      msg);
	else
		j = json_pack("{s:{s:s, s:s, s:i}}", "error", "message", msg, "type",
			      sb_api_error_type(SB_API_OPENAI, status), "code",
			      (int)status);
	s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s)
		return MHD_NO;
	return send_body(c, status, "application/json", s, strlen(s));
}

static enum MHD_Result send_too_large(struct MHD_Connection *c, enum route route)
{
	return send_error(c, route, 413, "request body above %u MiB", BODY_MAX >> 20);
}

/* --- recording --- */

/* Fills blob b with data and writes its key in hex. */
static void blob_of(struct sb_blob *b, const char *data, size_t len,
		    char hex[SB_HASH_HEX])
{
	uint8_t h[SB_HASH_LEN];

	b->data = data ? data : "";
	b->len = len;
	sb_blob_hash(b->data, len, h);
	sb_hash_hex(h, hex);
}

/* Appends the gateway's events (and blobs) in one unit; a failure is
 * reported in the daemon's log: the call itself already happened. */
static int append_events(sb_gateway *gw, const struct sb_blob *blobs, size_t nblobs,
			 struct sb_event *evs, size_t n)
{
	int rc = sb_log_append_blobs(gw->log, blobs, nblobs, evs, n);

	if (rc)
		fprintf(stderr, "sanboxd: gateway: run %s: cannot record %s: %s\n",
			evs[0].run, evs[0].type, sb_errmsg(rc));
	return rc;
}

static int pack_call_message(msgpack_packer *pk, const struct gw_call *k,
			     const char *rq_hex, const char *an_hex,
			     const struct sb_usage *u)
{
	sb_mapw m;

	sb_mapw_begin(&m, pk);
	sb_mapw_str(&m, "role", "assistant");
	sb_mapw_str(&m, "model", k->model->m.name);
	sb_mapw_str(&m, "api", api_name(k->api));
	sb_mapw_u64(&m, "status", (uint64_t)k->status);
	sb_mapw_bool(&m, "stream", k->stream);
	sb_mapw_str(&m, "request", rq_hex);
	sb_mapw_str(&m, "response", an_hex);
	sb_mapw_u64(&m, "max_tokens", k->granted);
	if (k->choices > 1)
		sb_mapw_u64(&m, "n", k->choices);
	sb_mapw_u64(&m, "duration_ms", ms_since(&k->t0));
	sb_mapw_u64(&m, "input_tokens", u->input);
	sb_mapw_u64(&m, "output_tokens", u->output);
	if (k->cut)
		sb_mapw_bool(&m, "cut", 1);
	if (k->answer.over)
		sb_mapw_bool(&m, "response_truncated", 1);
	if (k->replayed)
		sb_mapw_bool(&m, "replayed", 1);
	return sb_mapw_end(&m);
}

/* Packs agent.usage.updated. */
static int pack_usage(msgpack_packer *pk, const struct gw_call *k,
		      const struct sb_usage *u, uint64_t cost, uint64_t total, int estimated)
{
	sb_mapw m;

	sb_mapw_begin(&m, pk);
	sb_mapw_str(&m, "model", k->model->m.name);
	sb_mapw_u64(&m, "input_tokens", u->input);
	sb_mapw_u64(&m, "output_tokens", u->output);
	sb_mapw_u64(&m, "cached_tokens", u->cached);
	sb_mapw_u64(&m, "cost_nusd", cost);
	sb_mapw_u64(&m, "total_nusd", total);
	if (estimated)
		sb_mapw_bool(&m, "estimated", 1);
	return sb_mapw_end(&m);
}

/* Settles the call's reservation and records it: the bodies as blobs,
 * agent.message and (when it cost anything or reported usage)
 * agent.usage.updated, all in one commit. */
static void call_record(struct gw_call *k, const struct sb_usage *u, uint64_t cost,
			int estimated)
{
	sb_gateway *gw = k->gw;
	struct gw_run *r = k->run;
	char rq_hex[SB_HASH_HEX], an_hex[SB_HASH_HEX];
	struct sb_blob blobs[2];
	msgpack_sbuffer b1, b2;
	msgpack_packer p1, p2;
	struct sb_event evs[2];
	uint64_t total;
	size_t n = 1;
	int rc;

	if (k->settled)
		return;
	k->settled = 1;
	pthread_mutex_lock(&r->record_mu);
	pthread_mutex_lock(&gw->mu);
	sb_budget_settle(&r->budget, k->reservation, cost);
	if (r->group)
		sb_budget_settle(&r->group->budget, k->reservation, cost);
	total = r->budget.spent;
	pthread_mutex_unlock(&gw->mu);

	blob_of(&blobs[0], k->req, k->req_len, rq_hex);
	blob_of(&blobs[1], k->answer.b.data, k->answer.b.size, an_hex);
	msgpack_sbuffer_init(&b1);
	msgpack_sbuffer_init(&b2);
	msgpack_packer_init(&p1, &b1, msgpack_sbuffer_write);
	msgpack_packer_init(&p2, &b2, msgpack_sbuffer_write);
	rc = pack_call_message(&p1, k, rq_hex, an_hex, u);
	sb_event_init(&evs[0], "agent.message", r->id, SB_SRC_GATEWAY, b1.data, b1.size);
	if (rc == SB_OK && (cost || u->known)) {
		rc = pack_usage(&p2, k, u, cost, total, estimated);
		sb_event_init(&evs[1], "agent.usage.updated", r->id, SB_SRC_GATEWAY,
			      b2.data, b2.size);
		n = 2;
	}
	if (rc == SB_OK)
		append_events(gw, blobs, 2, evs, n);
	else
		fprintf(stderr, "sanboxd: gateway: run %s: cannot record a call: %s\n",
			r->id, sb_errmsg(rc));
	pthread_mutex_unlock(&r->record_mu);
	msgpack_sbuffer_destroy(&b1);
	msgpack_sbuffer_destroy(&b2);
	if (gw->on_call)
		gw->on_call(gw->ctx, r->id);
}

/* 1 when r's group budget is spent (and r's own is not). */
static int group_spent(sb_gateway *gw, struct gw_run *r)
{
	int spent;

	pthread_mutex_lock(&gw->mu);
	spent = r->group && r->group->budget.spent >= r->group->budget.limit &&
		r->budget.spent < r->budget.limit;
	pthread_mutex_unlock(&gw->mu);
	return spent;
}

/* The run cannot pay for calls any more (by_group: its group's budget is
 * spent): budget.exceeded once, then the run's policy. */
static void budget_spent(sb_gateway *gw, struct gw_run *r, int by_group)
{
	const struct sb_budget *bd = by_group ? &r->group->budget : &r->budget;
	char group[GW_GROUP_MAX] = "";
	msgpack_sbuffer b;
	msgpack_packer pk;
	struct sb_event ev;
	uint64_t limit, spent;
	sb_mapw m;
	int first;

	pthread_mutex_lock(&gw->mu);
	first = !r->exceeded;
	r->exceeded = 1;
	limit = bd->limit;
	spent = bd->spent;
	if (by_group)
		snprintf(group, sizeof group, "%s", r->group->name);
	pthread_mutex_unlock(&gw->mu);
	if (!first)
		return;
	msgpack_sbuffer_init(&b);
	msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	sb_mapw_u64(&m, "budget_nusd", limit);
	sb_mapw_u64(&m, "spent_nusd", spent);
	if (by_group) {
		sb_mapw_str(&m, "scope", "group");
		sb_mapw_str(&m, "group", group);
	}
	if (!sb_mapw_end(&m) &&
	    !sb_event_init(&ev, "budget.exceeded", r->id, SB_SRC_GATEWAY, b.data, b.size))
		append_events(gw, NULL, 0, &ev, 1);
	msgpack_sbuffer_destroy(&b);
	if (r->stop_on_budget && gw->on_budget)
		gw->on_budget(gw->ctx, r->id);
}

/* --- the provider over libcurl (sb_upstream_provider) --- */

/* A call to the provider, on its connection's handles. */
struct prov_call {
	struct gw_conn *cn;
	const struct sb_upstream_req *rq;
	struct curl_slist *headers;
	int in_multi, wrote;
	CURLcode result;
	long status;
	char error[CURL_ERROR_SIZE];
};

static size_t prov_header(char *p, size_t size, size_t n, void *ctx)
{
	(void)p;
	(void)ctx;
	return size * n;
}

static size_t prov_write(char *p, size_t size, size_t n, void *ctx)
{
	struct prov_call *pc = ctx;

	pc->wrote = 1;
	return pc->rq->write(pc->rq->ctx, p, size * n);
}

static int conn_handles(struct gw_conn *cn)
{
	if (!cn->curl && !(cn->curl = curl_easy_init()))
		return SB_ERR_NOMEM;
	if (!cn->multi && !(cn->multi = curl_multi_init()))
		return SB_ERR_NOMEM;
	curl_easy_reset(cn->curl);
	return SB_OK;
}

/* The provider's headers for rq: its API's and its key. */
static struct curl_slist *prov_headers(const struct sb_upstream_req *rq)
{
	struct curl_slist *l = NULL;
	char hdr[SB_SECRET_VALUE_MAX + 64];

	l = curl_slist_append(l, "Content-Type: application/json");
	l = curl_slist_append(l, "Expect:");
	if (rq->api == SB_API_ANTHROPIC) {
		snprintf(hdr, sizeof hdr, "anthropic-version: %.64s",
			 rq->version ? rq->version : "2023-06-01");
		l = curl_slist_append(l, hdr);
		if (rq->beta) {
			snprintf(hdr, sizeof hdr, "anthropic-beta: %.256s", rq->beta);
			l = curl_slist_append(l, hdr);
		}
		if (rq->key) {
			snprintf(hdr, sizeof hdr, "x-api-key: %s", rq->key);
			l = curl_slist_append(l, hdr);
		}
	} else if (rq->key) {
		snprintf(hdr, sizeof hdr, "Authorization: Bearer %s", rq->key);
		l = curl_slist_append(l, hdr);
	}
	sodium_memzero(hdr, sizeof hdr);
	return l;
}

static void prov_end(void *call);

/* src: the gw_conn whose handles carry the call. */
static int prov_start(void *src, const struct sb_upstream_req *rq, void **call)
{
	struct prov_call *pc = calloc(1, sizeof *pc);
	char url[SB_URL_MAX + 32];
	CURL *h;
	int rc;

	if (!pc)
		return SB_ERR_NOMEM;
	pc->cn = src;
	pc->rq = rq;
	if ((rc = conn_handles(pc->cn)) || !(pc->headers = prov_headers(rq))) {
		free(pc);
		return rc ? rc : SB_ERR_NOMEM;
	}
	h = pc->cn->curl;
	snprintf(url, sizeof url, "%s%s", rq->base_url, rq->path);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, pc->headers);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, rq->body);
	curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->len);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)CONNECT_TIMEOUT_MS);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)STALL_TIMEOUT_S);
	curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, pc->error);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, prov_header);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, prov_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, pc);
	if (rq->stream) {
		if (curl_multi_add_handle(pc->cn->multi, h) != CURLM_OK) {
			prov_end(pc);
			return sb_seterr(SB_ERR_IO, "cannot start the call");
		}
		pc->in_multi = 1;
	}
	*call = pc;
	return SB_OK;
}

/* A whole answer in one go; a stream until it has bytes or ends. */
static void prov_pump(void *call, int *done)
{
	struct prov_call *pc = call;
	CURLM *mh = pc->cn->multi;
	CURLMsg *msg;
	int running = 1, left;

	if (!pc->in_multi) {
		pc->result = curl_easy_perform(pc->cn->curl);
		*done = 1;
		return;
	}
	pc->wrote = 0;
	while (!pc->wrote) {
		curl_multi_perform(mh, &running);
		while ((msg = curl_multi_info_read(mh, &left)))
			if (msg->msg == CURLMSG_DONE)
				pc->result = msg->data.result;
		if (!running) {
			*done = 1;
			return;
		}
		if (!pc->wrote)
			curl_multi_poll(mh, NULL, 0, 1000, NULL);
	}
}

static long prov_status(void *call)
{
	struct prov_call *pc = call;

	if (!pc->status)
		curl_easy_getinfo(pc->cn->curl, CURLINFO_RESPONSE_CODE, &pc->status);
	return pc->status;
}

static const char *prov_content_type(void *call)
{
	struct prov_call *pc = call;
	char *ct = NULL;

	curl_easy_getinfo(pc->cn->curl, CURLINFO_CONTENT_TYPE, &ct);
	return ct ? ct : pc->rq->stream ? "text/event-stream" : "application/json";
}

static const char *prov_failure(void *call)
{
	struct prov_call *pc = call;

	if (pc->result == CURLE_OK)
		return NULL;
	return pc->error[0] ? pc->error : curl_easy_strerror(pc->result);
}

static void prov_end(void *call)
{
	struct prov_call *pc = call;

	if (pc->in_multi)
		curl_multi_remove_handle(pc->cn->multi, pc->cn->curl);
	curl_easy_reset(pc->cn->curl); /* the handle must not keep pointers into pc */
	curl_slist_free_all(pc->headers);
	free(pc);
}

const struct sb_upstream_ops sb_upstream_provider = {
    .name = "provider",
    .start = prov_start,
    .pump = prov_pump,
    .status = prov_status,
    .content_type = prov_content_type,
    .failure = prov_failure,
    .end = prov_end,
};

/* --- forwarding --- */

/* Non-stream answers: held whole. */
static size_t on_answer(struct gw_call *k, const char *p, size_t len)
{
	if (gbuf_add(&k->answer, p, len) || k->answer.over)
		return 0; /* too large: abort */
	return len;
}

static void cut_notice(struct gw_call *k)
{
	static const char openai[] =
	    "data: {\"error\":{\"message\":\"the run's LLM budget is spent: the answer "
	    "was "
	    "cut\",\"type\":\"budget_exceeded\",\"code\":402}}\n\ndata: [DONE]\n\n";
	static const char anthropic[] =
	    "event: error\ndata: "
	    "{\"type\":\"error\",\"error\":{\"type\":\"budget_exceeded\","
	    "\"message\":\"the run's LLM budget is spent: the answer was cut\"}}\n\n";

	static const char responses[] =
	    "event: error\ndata: "
	    "{\"type\":\"error\",\"code\":\"budget_exceeded\",\"message\":\"the "
	    "run's LLM budget is spent: the answer was cut\",\"param\":null}\n\n";

	if (k->api == SB_API_ANTHROPIC)
		gbuf_add(&k->pend, anthropic, sizeof anthropic - 1);
	else if (k->api == SB_API_RESPONSES)
		gbuf_add(&k->pend, responses, sizeof responses - 1);
	else
		gbuf_add(&k->pend, openai, sizeof openai - 1);
}

/* Stream answers: passed on as they come, metered, cut when they run past
 * what was granted. */
static size_t on_stream(struct gw_call *k, const char *p, size_t len)
{
	uint64_t all = k->granted * k->choices; /* output granted, all choices */

	if (!k->status)
		k->status = k->up->status(k->upcall);
	gbuf_add(&k->answer, p, len);
	if (gbuf_add(&k->pend, p, len))
		return 0;
	if (k->status == 200) {
		if (sb_sse_meter_feed(&k->meter, p, len))
			return 0;
		if (sb_sse_meter_output(&k->meter) > all + CUT_SLACK(all)) {
			k->cut = 1;
			cut_notice(k);
			return 0; /* aborts the transfer */
		}
	}
	return len;
}

/* The sink of k's answer (sb_upstream_req.write). */
static size_t call_write(void *ctx, const char *p, size_t len)
{
	struct gw_call *k = ctx;

	return k->stream ? on_stream(k, p, len) : on_answer(k, p, len);
}

/* Records that a re-run departed from its record: rerun.diverged {call,
 * path}. */
static void record_diverged(struct gw_call *k, const struct sb_rerun_divergence *d)
{
	msgpack_sbuffer b;
	msgpack_packer pk;
	struct sb_event ev;
	sb_mapw m;

	msgpack_sbuffer_init(&b);
	msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	sb_mapw_u64(&m, "call", d->call);
	sb_mapw_str(&m, "path", d->path);
	if (!sb_mapw_end(&m) && !sb_event_init(&ev, "rerun.diverged", k->run->id,
					       SB_SRC_GATEWAY, b.data, b.size))
		append_events(k->gw, NULL, 0, &ev, 1);
	msgpack_sbuffer_destroy(&b);
	if (!sb_rerun_live(k->run->rerun) && k->gw->on_diverged)
		k->gw->on_diverged(k->gw->ctx, k->run->id);
}

/* Fills k's upstream request, for the provider by default. */
static void call_upreq(struct gw_call *k, struct MHD_Connection *c)
{
	struct sb_upstream_req *q = &k->upreq;
	const char *v;

	q->api = k->api;
	q->stream = k->stream;
	q->path = k->path;
	q->body = k->req;
	q->len = k->req_len;
	q->base_url = k->model->base_url;
	q->key = k->model->key;
	if ((v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "anthropic-version")))
		q->version = strncpy(k->version, v, sizeof k->version - 1);
	if ((v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "anthropic-beta")))
		q->beta = strncpy(k->beta, v, sizeof k->beta - 1);
	q->write = call_write;
	q->ctx = k;
	k->up = &sb_upstream_provider;
}

/* Chooses where k's answer comes from and starts it there: the provider,
 * or for a re-run its record's call, as long as it keeps to it. Errors:
 * SB_ERR_STATE (a re-run departed from its record and stops), the
 * upstream's. */
static int call_start(struct gw_call *k, struct MHD_Connection *c)
{
	const struct sb_rerun_call *rec = NULL;
	struct sb_rerun_divergence d;
	void *src = k->conn;
	int rc;

	call_upreq(k, c);
	if (k->run->rerun) {
		rc = sb_rerun_take(k->run->rerun, k->api, k->req, k->req_len, &rec, &d);
		if (rc == SB_OK) {
			k->up = &sb_upstream_record;
			k->replayed = 1;
			src = (void *)rec;
		} else if (rc != SB_ERR_STATE) {
			return rc;
		} else {
			if (d.call)
				record_diverged(k, &d);
			if (!sb_rerun_live(k->run->rerun))
				return sb_seterr(SB_ERR_STATE,
						 "the re-run departed from its record");
		}
	}
	return k->up->start(src, &k->upreq, &k->upcall);
}

static void call_free(struct gw_call *k)
{
	if (!k)
		return;
	if (k->upcall)
		k->up->end(k->upcall);
	free(k->req);
	gbuf_free(&k->answer);
	gbuf_free(&k->pend);
	sb_sse_meter_free(&k->meter);
	run_unref(k->gw, k->run);
	free(k);
}

/* A call that ended without usage we can trust is charged its whole
 * reservation. */
static void call_end_unmetered(struct gw_call *k)
{
	struct sb_usage u = {0};

	u.output = sb_sse_meter_output(&k->meter);
	call_record(k, &u, k->replayed ? 0 : k->reservation, 1);
}

/* A call the provider answered (200): charged from the usage it reported,
 * else its whole reservation; an answer from the record costs nothing. */
static void call_end_answered(struct gw_call *k, const struct sb_usage *u)
{
	if (u->known)
		call_record(k, u,
			    k->replayed ? 0
					: sb_model_cost(&k->model->m, u->input, u->cached,
							u->output),
			    0);
	else
		call_end_unmetered(k);
}

/* The provider could not be reached (why: what broke off): 502,
 * recorded, not billed. Frees k. */
static enum MHD_Result send_unreachable(struct gw_call *k, struct MHD_Connection *c,
					enum route route, const char *why)
{
	struct sb_usage u = {0};
	enum MHD_Result ret;

	k->status = 502;
	call_record(k, &u, 0, 0);
	ret = send_error(c, route, 502, "provider for %s unreachable: %s",
			 k->model->m.name, k->answer.over ? "answer above 64 MiB" : why);
	call_free(k);
	return ret;
}

/* Passes the provider's whole answer on with its status. Frees k. */
static enum MHD_Result send_answer(struct gw_call *k, struct MHD_Connection *c)
{
	size_t len = k->answer.b.size;
	char *body = len ? msgpack_sbuffer_release(&k->answer.b) : strdup("");
	enum MHD_Result ret =
	    body ? send_body(c, (unsigned)k->status, k->up->content_type(k->upcall),
			     body, len)
		 : MHD_NO;

	call_free(k);
	return ret;
}

/* Forwards a non-stream call and answers with what the provider said. */
static enum MHD_Result call_whole(struct gw_call *k, struct MHD_Connection *c,
				  enum route route)
{
	struct sb_usage u = {0};
	const char *why;
	int done = 0;

	while (!done)
		k->up->pump(k->upcall, &done);
	k->status = k->up->status(k->upcall);
	if ((why = k->up->failure(k->upcall)))
		return send_unreachable(k, c, route, why);
	if (k->status == 200) {
		sb_usage_from_body(k->api, k->answer.b.size ? k->answer.b.data : "",
				   k->answer.b.size, &u);
		call_end_answered(k, &u);
	} else {
		call_record(k, &u, 0, 0); /* refused by the provider: not billed */
	}
	return send_answer(k, c);
}

/* Drives the streamed transfer until it has bytes for the client or ends. */
static void stream_pump(struct gw_call *k)
{
	while (!k->up_done && k->pend.b.size == 0)
		k->up->pump(k->upcall, &k->up_done);
}

/* At the end of a stream: settle from the usage the stream reported. */
static void stream_finish(struct gw_call *k)
{
	struct sb_usage u = k->meter.usage;

	if (k->cut) {
		call_end_unmetered(k);
		budget_spent(k->gw, k->run, group_spent(k->gw, k->run));
	} else if (k->status == 200) {
		/* broken off: not trusted */
		u.known = u.known && !k->up->failure(k->upcall);
		call_end_answered(k, &u);
	} else {
		call_record(k, &u, 0, 0);
	}
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct gw_call *k = cls;
	size_t n;

	(void)pos;
	for (;;) {
		if (k->pend.b.size) {
			n = k->pend.b.size < max ? k->pend.b.size : max;
			memcpy(buf, k->pend.b.data, n);
			gbuf_consume(&k->pend, n);
			return (ssize_t)n;
		}
		if (k->up_done) {
			stream_finish(k);
			return MHD_CONTENT_READER_END_OF_STREAM;
		}
		stream_pump(k);
	}
}

static void stream_free(void *cls)
{
	struct gw_call *k = cls;

	if (!k->settled) { /* the client went away mid-stream */
		k->status = k->status ? k->status : 499;
		call_end_unmetered(k);
	}
	call_free(k);
}

/* Forwards a stream call: waits for the provider's status, then streams. */
static enum MHD_Result call_stream(struct gw_call *k, struct MHD_Connection *c,
				   enum route route)
{
	struct MHD_Response *resp;
	const char *why;
	enum MHD_Result ret;

	sb_sse_meter_init(&k->meter, k->api);
	stream_pump(k);
	if (!k->status)
		k->status = k->up->status(k->upcall);
	why = k->up->failure(k->upcall);
	if (k->up_done && why && !k->cut && k->answer.b.size == 0)
		return send_unreachable(k, c, route, why);
	if (k->status != 200) { /* an error answer: pass it on whole */
		while (!k->up_done) {
			k->pend.b.size = 0;
			stream_pump(k);
		}
		stream_finish(k);
		return send_answer(k, c);
	}
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024, stream_read,
						 k, stream_free);
	if (!resp) {
		stream_free(k);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				k->up->content_type(k->upcall));
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	ret = MHD_queue_response(c, 200, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* --- connections --- */

/* How many connections one run may hold: max_conns over the registered
 * runs, within [SHARE_MIN, SHARE_MAX] (and never above max_conns). Under
 * gw->mu. */
static unsigned run_share(const sb_gateway *gw)
{
	unsigned s = gw->max_conns / (gw->nruns ? gw->nruns : 1);
	unsigned lo = gw->max_conns < SHARE_MIN ? gw->max_conns : SHARE_MIN;

	return s < lo ? lo : s > SHARE_MAX ? SHARE_MAX : s;
}

/* Puts cn in phase p, its deadline counted from now, and wakes the
 * watchdog when that is sooner than it would wake. Under gw->mu. */
static void conn_set_phase(sb_gateway *gw, struct gw_conn *cn, enum phase p)
{
	cn->phase = p;
	if (p == PH_CALL)
		return;
	cn->deadline = now_ms() + (p == PH_HEADERS ? gw->header_ms : gw->body_ms);
	if (cn->deadline < gw->wake_at)
		pthread_cond_signal(&gw->wake);
}

static void conn_phase(sb_gateway *gw, struct gw_conn *cn, enum phase p)
{
	pthread_mutex_lock(&gw->mu);
	conn_set_phase(gw, cn, p);
	pthread_mutex_unlock(&gw->mu);
}

/* Gives cn's place back to its run and the gateway (cn is unlinked
 * already). Under gw->mu. */
static void conn_uncount(sb_gateway *gw, struct gw_conn *cn)
{
	cn->run->conns--;
	if (cn->trimmed)
		cn->run->trims--;
	gw->nconns--;
}

/* Unlinks cn and uncounts it. Under gw->mu. */
static void conn_unlink(sb_gateway *gw, struct gw_conn *cn)
{
	for (struct gw_conn **p = &gw->conns; *p; p = &(*p)->next) {
		if (*p == cn) {
			*p = cn->next;
			break;
		}
	}
	conn_uncount(gw, cn);
}

/* Frees an unlinked cn: its upstream handles and its run reference. */
static void conn_free(sb_gateway *gw, struct gw_conn *cn)
{
	if (cn->multi)
		curl_multi_cleanup(cn->multi);
	if (cn->curl)
		curl_easy_cleanup(cn->curl);
	run_unref(gw, cn->run);
	free(cn);
}

/* Shuts down cn's socket both ways: libmicrohttpd reads EOF and closes the
 * connection. Under gw->mu, cn started (so cn->fd is still cn's). */
static void conn_cut(struct gw_conn *cn)
{
	shutdown(cn->fd, SHUT_RDWR);
	cn->cut = 1;
}

/* One round of the watchdog at now: cuts the connections past their
 * deadline, and those waiting for a request whose run holds more than its
 * share (it shrinks when a run registers) or is removed; moves those that
 * libmicrohttpd never started by their first deadline (it dropped them
 * without a word) to *dead. Returns when the next deadline is. Under
 * gw->mu. */
static uint64_t watchdog_round(sb_gateway *gw, uint64_t now, struct gw_conn **dead)
{
	unsigned share = run_share(gw);
	uint64_t next = UINT64_MAX;
	struct gw_conn **p = &gw->conns;

	while (*p) {
		struct gw_conn *cn = *p;
		struct gw_run *r = cn->run;
		if (!cn->started && cn->added && now >= cn->deadline) {
			*p = cn->next;
			conn_uncount(gw, cn);
			cn->next = *dead;
			*dead = cn;
			continue;
		}
		if (cn->started && !cn->cut && cn->phase != PH_CALL &&
		    now >= cn->deadline) {
			conn_cut(cn);
		} else if (cn->started && !cn->cut && cn->phase == PH_HEADERS &&
			   (r->removed || r->conns - r->trims > share)) {
			conn_cut(cn);
			cn->trimmed = 1;
			r->trims++;
		}
		if (!cn->cut && cn->phase != PH_CALL && cn->deadline < next)
			next = cn->deadline;
		p = &cn->next;
	}
	return next;
}

static void *watchdog_main(void *arg)
{
	sb_gateway *gw = arg;
	struct gw_conn *dead, *cn;
	struct timespec ts;

	pthread_mutex_lock(&gw->mu);
	while (!gw->stopping) {
		dead = NULL;
		gw->wake_at = watchdog_round(gw, now_ms(), &dead);
		if (dead) {
			pthread_mutex_unlock(&gw->mu);
			while ((cn = dead)) {
				dead = cn->next;
				conn_free(gw, cn);
			}
			pthread_mutex_lock(&gw->mu);
			continue;
		}
		if (gw->wake_at == UINT64_MAX) {
			pthread_cond_wait(&gw->wake, &gw->mu);
		} else {
			ts.tv_sec = (time_t)(gw->wake_at / 1000);
			ts.tv_nsec = (long)(gw->wake_at % 1000) * 1000000;
			pthread_cond_timedwait(&gw->wake, &gw->mu, &ts);
		}
	}
	pthread_mutex_unlock(&gw->mu);
	return NULL;
}

/* The number sb_gateway_connect put in the connection's address, or 0. */
static uint64_t conn_number(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr_un *sa =
	    ci ? (const struct sockaddr_un *)(const void *)ci->client_addr : NULL;
	uint64_t id = 0;

	if (sa && sa->sun_family == AF_UNIX)
		memcpy(&id, sa->sun_path, sizeof id);
	return id;
}

/* libmicrohttpd's start and close of a connection: at the start the
 * gw_conn of its number becomes its socket context (a connection without
 * one, dropped by the watchdog as never started, is shut down at once); at
 * the close, before libmicrohttpd closes the socket, the connection is
 * uncounted and freed. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	sb_gateway *gw = cls;
	struct gw_conn *cn = *socket_context;
	const union MHD_ConnectionInfo *ci;
	uint64_t id;

	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		id = conn_number(c);
		pthread_mutex_lock(&gw->mu);
		for (cn = gw->conns; cn && (cn->id != id || cn->started); cn = cn->next)
			;
		if (cn) {
			cn->started = 1;
			pthread_cond_signal(
			    &gw->wake); /* its run may be above its share */
		}
		pthread_mutex_unlock(&gw->mu);
		*socket_context = cn;
		if (!cn &&
		    (ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD)))
			shutdown(ci->connect_fd, SHUT_RDWR);
		return;
	}
	if (!cn)
		return;
	*socket_context = NULL;
	pthread_mutex_lock(&gw->mu);
	conn_unlink(gw, cn);
	pthread_mutex_unlock(&gw->mu);
	conn_free(gw, cn);
}

/* --- requests --- */

/* Finds the run of key and takes a reference, or NULL. */
static struct gw_run *run_by_key(sb_gateway *gw, const char *key)
{
	size_t n = key ? strlen(key) : 0;
	struct gw_run *found = NULL;

	if (n == 0 || n >= SB_VKEY_MAX)
		return NULL;
	pthread_mutex_lock(&gw->mu);
	for (struct gw_run *r = gw->runs; r; r = r->next)
		if (strlen(r->key) == n && sodium_memcmp(r->key, key, n) == 0)
			found = r;
	if (found)
		found->refs++;
	pthread_mutex_unlock(&gw->mu);
	return found;
}

/* The run a request's key names: the connection's own run when the key
 * is its alias, else run_by_key's. A reference is taken. */
static struct gw_run *run_of_request(sb_gateway *gw, struct gw_conn *cn, const char *key)
{
	size_t n = key ? strlen(key) : 0;
	struct gw_run *r = cn->run;
	int alias;

	pthread_mutex_lock(&gw->mu);
	alias =
	    n && r->alias[0] && strlen(r->alias) == n && !sodium_memcmp(r->alias, key, n);
	if (alias)
		r->refs++;
	pthread_mutex_unlock(&gw->mu);
	return alias ? r : run_by_key(gw, key);
}

/* The key of a request: "Authorization: Bearer K", else "x-api-key: K". */
static const char *request_key(struct MHD_Connection *c)
{
	const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						    MHD_HTTP_HEADER_AUTHORIZATION);

	if (a && !strncasecmp(a, "Bearer ", 7))
		return a + 7;
	return MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
}

static enum MHD_Result send_models(struct MHD_Connection *c, const struct gw_run *r)
{
	json_t *data = json_array(), *j;
	char *s;

	for (size_t i = 0; data && i < r->nmodels; i++)
		json_array_append_new(data, json_pack("{s:s, s:s, s:i, s:s}", "id",
						      r->models[i].m.name, "object",
						      "model", "created", 0, "owned_by",
						      r->models[i].m.provider));
	j = json_pack("{s:s, s:o}", "object", "list", "data", data);
	s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	return s ? send_body(c, 200, "application/json", s, strlen(s)) : MHD_NO;
}

static const struct gw_model *model_of(const struct gw_run *r, const char *name)
{
	for (size_t i = 0; i < r->nmodels; i++)
		if (!strcmp(r->models[i].m.name, name))
			return &r->models[i];
	return NULL;
}

static void allowed_list(const struct gw_run *r, char *buf, size_t cap)
{
	size_t at = 0;

	buf[0] = 0;
	for (size_t i = 0; i < r->nmodels && at < cap; i++)
		at += (size_t)snprintf(buf + at, cap - at, "%s%s", i ? ", " : "",
				       r->models[i].m.name);
}

/* A model call of run r (a reference the call takes over). */
static enum MHD_Result handle_call(sb_gateway *gw, struct MHD_Connection *c,
				   struct gw_conn *cn, struct gw_req *rq,
				   struct gw_run *r)
{
	unsigned api = api_of(rq->route);
	struct gw_call *k = NULL;
	const struct gw_model *m;
	struct sb_mreq mr;
	enum sb_grant g;
	int by_group = 0;
	const char *whose;
	char allowed[512];
	enum MHD_Result ret;
	int rc;

	if (rq->body.over) { /* a chunked body: its size was not declared */
		ret = send_too_large(c, rq->route);
		goto out;
	}
	if ((rc = sb_mreq_parse(api, rq->body.b.size ? rq->body.b.data : "",
				rq->body.b.size, &mr))) {
		ret = send_error(c, rq->route, 400, "%s", sb_errmsg(rc));
		goto out;
	}
	if (api == SB_API_ANTHROPIC && (rc = sb_betas_check(MHD_lookup_connection_value(
					    c, MHD_HEADER_KIND, "anthropic-beta")))) {
		ret = send_error(c, rq->route, 400, "%s", sb_errmsg(rc));
		goto out_mreq;
	}
	if (!(m = model_of(r, mr.model))) {
		allowed_list(r, allowed, sizeof allowed);
		ret = send_error(c, rq->route, 403,
				 "model '%s' is not allowed for this run (allowed: %s)",
				 mr.model, allowed);
		goto out_mreq;
	}
	if (!(m->apis & api)) {
		ret = send_error(
		    c, rq->route, 400,
		    "model '%s' is not served by the %s API here (its provider's "
		    "api does not list it)",
		    mr.model, api_name(api));
		goto out_mreq;
	}
	if ((rc = sb_mreq_bind(api, &mr, &m->m, rq->body.b.size))) {
		ret = send_error(c, rq->route, 500, "gateway: %s", sb_errmsg(rc));
		goto out_mreq;
	}
	if (!(k = calloc(1, sizeof *k))) {
		ret = MHD_NO;
		goto out_mreq;
	}
	clock_gettime(CLOCK_MONOTONIC, &k->t0);
	k->gw = gw;
	k->model = m;
	k->conn = cn;
	k->api = api;
	k->path = api == SB_API_ANTHROPIC   ? "/messages"
		  : api == SB_API_RESPONSES ? "/responses"
					    : "/chat/completions";
	k->stream = mr.stream;
	k->choices = mr.choices;
	k->answer.max = ANSWER_MAX;
	k->pend.max = SIZE_MAX;
	pthread_mutex_lock(&gw->mu);
	g = sb_mreq_reserve(&r->budget, r->group ? &r->group->budget : NULL, &m->m, &mr,
			    &k->granted, &k->reservation, &by_group);
	pthread_mutex_unlock(&gw->mu);
	whose = by_group ? "group's" : "run's";
	if (g == SB_GRANT_SPENT) {
		budget_spent(gw, r, by_group);
		ret = send_error(c, rq->route, 402, "the %s LLM budget is spent", whose);
		goto out_call;
	}
	if (g == SB_GRANT_CHOICES) {
		ret = send_error(c, rq->route, 400,
				 "the %s LLM budget left cannot pay for n=%u "
				 "choices: ask for fewer",
				 whose, mr.choices);
		goto out_call;
	}
	if (g == SB_GRANT_BUSY) {
		ret = send_error(
		    c, rq->route, 429,
		    "the rest of the %s budget is held by calls in flight: retry", whose);
		goto out_call;
	}
	k->run = r; /* the call owns the reference now */
	r = NULL;
	if ((rc = sb_mreq_finish(api, &mr, m->m.upstream, k->granted, &k->req,
				 &k->req_len)) ||
	    (rc = call_start(k, c))) {
		struct sb_usage u = {0};
		k->status = rc == SB_ERR_STATE ? 409 : 500;
		call_record(k, &u, 0, 0);
		ret = send_error(c, rq->route, (unsigned)k->status, "gateway: %s",
				 sb_errmsg(rc));
		call_free(k);
		goto out_mreq;
	}
	sb_mreq_free(&mr);
	return k->stream ? call_stream(k, c, rq->route) : call_whole(k, c, rq->route);
out_call:
	free(k);
out_mreq:
	sb_mreq_free(&mr);
out:
	if (r)
		run_unref(gw, r);
	return ret;
}

/* A token count (Anthropic count_tokens) of run r (a reference it takes
 * over): its allow-listed fields forwarded with the model's key, the
 * provider's answer passed on. The provider does not bill a count, so
 * nothing is reserved or recorded. */
static enum MHD_Result handle_count(sb_gateway *gw, struct MHD_Connection *c,
				    struct gw_conn *cn, struct gw_req *rq,
				    struct gw_run *r)
{
	struct gw_call *k = NULL;
	const struct gw_model *m;
	struct sb_mreq mr;
	enum MHD_Result ret;
	const char *why;
	int rc, done = 0;

	if (rq->body.over) {
		ret = send_too_large(c, rq->route);
		goto out;
	}
	if ((rc = sb_mreq_parse(SB_API_COUNT, rq->body.b.size ? rq->body.b.data : "",
				rq->body.b.size, &mr))) {
		ret = send_error(c, rq->route, 400, "%s", sb_errmsg(rc));
		goto out;
	}
	if (!(m = model_of(r, mr.model)) || !(m->apis & SB_API_ANTHROPIC)) {
		ret = send_error(
		    c, rq->route, m ? 400 : 403, "model '%s' is not %s", mr.model,
		    m ? "served by the anthropic API here" : "allowed for this run");
		goto out_mreq;
	}
	if (!(k = calloc(1, sizeof *k))) {
		ret = MHD_NO;
		goto out_mreq;
	}
	*k = (struct gw_call){.gw = gw,
			      .run = r,
			      .model = m,
			      .conn = cn,
			      .api = SB_API_ANTHROPIC,
			      .path = "/messages/count_tokens"};
	r = NULL; /* k holds the reference */
	k->answer.max = ANSWER_MAX;
	if (sb_mreq_finish(SB_API_COUNT, &mr, m->m.upstream, 0, &k->req, &k->req_len) ||
	    (call_upreq(k, c), k->up->start(k->conn, &k->upreq, &k->upcall))) {
		ret = send_error(c, rq->route, 500, "gateway: cannot start the call");
		call_free(k);
		goto out_mreq;
	}
	while (!done)
		k->up->pump(k->upcall, &done);
	if ((why = k->up->failure(k->upcall))) {
		ret = send_error(c, rq->route, 502, "provider for %s unreachable: %s",
				 m->m.name, why);
		call_free(k);
	} else {
		k->status = k->up->status(k->upcall);
		ret = send_answer(k, c);
	}
out_mreq:
	sb_mreq_free(&mr);
out:
	if (r)
		run_unref(gw, r);
	return ret;
}

static enum route route_of(const char *method, const char *url)
{
	int post = !strcmp(method, "POST"), get = !strcmp(method, "GET");

	if (post && !strcmp(url, "/v1/chat/completions"))
		return R_CHAT;
	if (post && !strcmp(url, "/v1/messages"))
		return R_MESSAGES;
	if (post && !strcmp(url, "/v1/responses"))
		return R_RESPONSES;
	if (post && !strcmp(url, "/v1/messages/count_tokens"))
		return R_COUNT_TOKENS;
	if (get && !strcmp(url, "/v1/models"))
		return R_MODELS;
	return R_NONE;
}

/* The body length the request's headers declare (0 when chunked). */
static uint64_t declared_length(struct MHD_Connection *c)
{
	const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						    MHD_HTTP_HEADER_CONTENT_LENGTH);

	return v ? strtoull(v, NULL, 10) : 0; /* libmicrohttpd checked its form */
}

/* libmicrohttpd calls this once the request's headers are in (*con_cls
 * NULL), then for each piece of its body, then with *upload_size 0 when
 * the body is complete: only then may a request be answered, except at
 * the first call. */
static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
				 const char *method, const char *version,
				 const char *upload, size_t *upload_size, void **con_cls)
{
	sb_gateway *gw = cls;
	struct gw_req *rq = *con_cls;
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct gw_conn *cn = ci ? ci->socket_context : NULL;
	struct gw_run *r;

	(void)version;
	if (!cn)
		return MHD_NO; /* not made by sb_gateway_connect: closed */
	if (!rq) {
		if (!(rq = calloc(1, sizeof *rq)))
			return MHD_NO;
		rq->route = route_of(method, url);
		rq->body.max = BODY_MAX;
		*con_cls = rq;
		if (declared_length(c) > BODY_MAX) {
			/* Refused before the body: no 100 Continue goes out,
			 * libmicrohttpd drops what body still comes and closes
			 * the connection after the answer. Answering after
			 * the upload would have invited a 16 MiB upload (100
			 * Continue) only to refuse it (413). */
			conn_phase(gw, cn, PH_CALL);
			return send_too_large(c, rq->route);
		}
		conn_phase(gw, cn, PH_BODY);
		return MHD_YES;
	}
	if (*upload_size) {
		if (gbuf_add(&rq->body, upload, *upload_size))
			return MHD_NO;
		*upload_size = 0;
		return MHD_YES;
	}
	conn_phase(gw, cn, PH_CALL);
	if (rq->route == R_NONE)
		return send_error(c,
				  strncmp(url, "/v1/messages", 12) ? R_CHAT : R_MESSAGES,
				  404, "no such endpoint: %s %s", method, url);
	if (!(r = run_of_request(gw, cn, request_key(c))))
		return send_error(c, rq->route, 401,
				  "unknown API key: use the key Sanbox gave this run");
	if (r != cn->run) {
		run_unref(gw, r);
		return send_error(c, rq->route, 403, "this key belongs to another run");
	}
	if (rq->route == R_MODELS) {
		enum MHD_Result ret = send_models(c, r);
		run_unref(gw, r);
		return ret;
	}
	if (rq->route == R_COUNT_TOKENS)
		return handle_count(gw, c, cn, rq, r);
	return handle_call(gw, c, cn, rq, r);
}

/* The end of a request (answered, or the connection closing): the
 * connection waits for the next request's headers. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	sb_gateway *gw = cls;
	struct gw_req *rq = *con_cls;
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	(void)toe;
	if (ci && ci->socket_context)
		conn_phase(gw, ci->socket_context, PH_HEADERS);
	if (!rq)
		return;
	gbuf_free(&rq->body);
	free(rq);
	*con_cls = NULL;
}

/* --- the gateway's life --- */

int sb_gateway_open(const struct sb_gateway_opts *o, sb_gateway **out)
{
	pthread_condattr_t ca;
	sb_gateway *gw;
	int rc, e;

	if (sodium_init() < 0)
		return sb_seterr(SB_ERR_IO, "libsodium failed to initialise");
	if (curl_global_init(CURL_GLOBAL_DEFAULT))
		return sb_seterr(SB_ERR_IO, "libcurl failed to initialise");
	if (!(gw = calloc(1, sizeof *gw)))
		return SB_ERR_NOMEM;
	gw->log = o->log;
	gw->on_budget = o->on_budget;
	gw->on_call = o->on_call;
	gw->on_diverged = o->on_diverged;
	gw->ctx = o->ctx;
	gw->max_conns = o->max_conns ? o->max_conns : SB_GATEWAY_MAX_CONNS;
	gw->header_ms = 1000ull * (o->header_timeout_s ? o->header_timeout_s
						       : SB_GATEWAY_HEADER_TIMEOUT);
	gw->body_ms =
	    1000ull * (o->body_timeout_s ? o->body_timeout_s : SB_GATEWAY_BODY_TIMEOUT);
	gw->wake_at = UINT64_MAX;
	pthread_mutex_init(&gw->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&gw->wake, &ca);
	pthread_condattr_destroy(&ca);
	/* No listening socket: connections come from sb_gateway_connect
	 * (MHD_add_connection, which needs the ITC to wake the daemon's
	 * thread). poll, not select: descriptors above FD_SETSIZE are fine.
	 * libmicrohttpd's own timeout only drops a client that takes nothing
	 * of an answer for STALL_TIMEOUT_S; the deadlines of headers and
	 * bodies are the watchdog's. No MHD_USE_ERROR_LOG: its messages are
	 * about single connections, which a guest makes as it likes (and on
	 * our AF_UNIX sockets it would complain of every TCP option); a
	 * connection it refuses is an error of sb_gateway_connect. */
	gw->mhd = MHD_start_daemon(
	    MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
		MHD_USE_POLL | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC,
	    0, NULL, NULL, on_access, gw, MHD_OPTION_CONNECTION_LIMIT,
	    gw->max_conns + CONN_MARGIN, MHD_OPTION_CONNECTION_TIMEOUT,
	    (unsigned)STALL_TIMEOUT_S, MHD_OPTION_NOTIFY_COMPLETED, on_completed, gw,
	    MHD_OPTION_NOTIFY_CONNECTION, on_connection, gw, MHD_OPTION_END);
	if (!gw->mhd) {
		rc = sb_seterr(SB_ERR_IO, "gateway: libmicrohttpd would not start: %s",
			       strerror(errno));
		goto fail;
	}
	if ((e = pthread_create(&gw->watchdog, NULL, watchdog_main, gw))) {
		rc = sb_seterr(SB_ERR_IO, "gateway: cannot start its watchdog: %s",
			       strerror(e));
		goto fail;
	}
	gw->watching = 1;
	*out = gw;
	return SB_OK;
fail:
	sb_gateway_close(gw);
	return rc;
}

void sb_gateway_close(sb_gateway *gw)
{
	struct gw_conn *cn;

	if (!gw)
		return;
	pthread_mutex_lock(&gw->mu);
	gw->stopping = 1;
	pthread_cond_signal(&gw->wake);
	pthread_mutex_unlock(&gw->mu);
	if (gw->watching)
		pthread_join(gw->watchdog, NULL);
	if (gw->mhd)
		MHD_stop_daemon(
		    gw->mhd);	   /* closes its connections, joins their threads */
	while ((cn = gw->conns)) { /* those it never started */
		conn_unlink(gw, cn);
		conn_free(gw, cn);
	}
	while (gw->runs) {
		struct gw_run *r = gw->runs;
		gw->runs = r->next;
		r->removed = 1;
		run_unref(gw, r); /* the list's reference */
	}
	pthread_cond_destroy(&gw->wake);
	pthread_mutex_destroy(&gw->mu);
	free(gw);
}

/* Finds run, checks its share and the gateway's cap, and counts and links
 * cn as run's. Under gw->mu. */
static int conn_admit(sb_gateway *gw, const char *run, struct gw_conn *cn)
{
	unsigned share = run_share(gw);
	struct gw_run *r;

	for (r = gw->runs; r && strcmp(r->id, run); r = r->next)
		;
	if (!r)
		return sb_seterr(SB_ERR_NOTFOUND,
				 "run %s is not registered with the gateway", run);
	if (r->conns >= share)
		return sb_seterr(SB_ERR_FULL,
				 "run %s holds its share of %u gateway connections", run,
				 share);
	if (gw->nconns >= gw->max_conns)
		return sb_seterr(SB_ERR_FULL, "the gateway holds its %u connections",
				 gw->max_conns);
	cn->id = ++gw->next_id;
	cn->run = r;
	r->refs++;
	r->conns++;
	gw->nconns++;
	cn->next = gw->conns;
	gw->conns = cn;
	conn_set_phase(gw, cn, PH_HEADERS);
	return SB_OK;
}

int sb_gateway_connect(sb_gateway *gw, const char *run, int *fd)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct gw_conn *cn = calloc(1, sizeof *cn);
	int sv[2] = {-1, -1}, rc;

	if (!cn)
		return SB_ERR_NOMEM;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv)) {
		rc = sb_seterr(SB_ERR_IO, "gateway: socketpair: %s", strerror(errno));
		goto fail;
	}
	/* Under the lock, so the start notification (on libmicrohttpd's
	 * thread, which takes it too) finds cn linked and added. */
	pthread_mutex_lock(&gw->mu);
	if ((rc = conn_admit(gw, run, cn)) == SB_OK) {
		cn->fd = sv[0];
		memcpy(sa.sun_path, &cn->id, sizeof cn->id);
		if (MHD_add_connection(gw->mhd, sv[0], (const struct sockaddr *)&sa,
				       sizeof sa) == MHD_YES) {
			cn->added = 1;
		} else {
			rc = sb_seterr(SB_ERR_IO,
				       "gateway: libmicrohttpd refused a connection: %s",
				       strerror(errno));
			sv[0] = -1; /* it closed its end */
			conn_unlink(gw, cn);
		}
	}
	pthread_mutex_unlock(&gw->mu);
	if (rc)
		goto fail;
	*fd = sv[1];
	return SB_OK;
fail:
	if (cn->run)
		run_unref(gw, cn->run);
	if (sv[0] >= 0)
		close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
	free(cn);
	return rc;
}

int sb_gateway_run_add(sb_gateway *gw, const struct sb_gateway_run *spec,
		       char key[SB_VKEY_MAX])
{
	unsigned char raw[20];
	struct gw_run *r;
	int rc = SB_ERR_NOMEM;

	if (!spec->nmodels)
		return sb_seterr(SB_ERR_INVAL, "a run needs at least one model");
	if (!(r = calloc(1, sizeof *r)) ||
	    !(r->models = calloc(spec->nmodels, sizeof *r->models)))
		goto fail;
	snprintf(r->id, sizeof r->id, "%s", spec->run);
	pthread_mutex_init(&r->record_mu, NULL);
	r->budget.limit = spec->budget_nusd;
	r->budget.spent = spec->spent_nusd;
	r->exceeded = spec->spent_nusd && spec->spent_nusd >= spec->budget_nusd;
	r->stop_on_budget = spec->stop_on_budget;
	r->nmodels = spec->nmodels;
	for (size_t i = 0; i < spec->nmodels; i++) {
		const struct sb_gateway_model *sm = &spec->models[i];
		r->models[i].m = sm->model;
		snprintf(r->models[i].base_url, sizeof r->models[i].base_url, "%s",
			 sm->base_url);
		r->models[i].apis = sm->apis;
		if (sm->key) {
			size_t n = strlen(sm->key);
			if (!(r->models[i].key = sodium_malloc(n + 1)))
				goto fail;
			memcpy(r->models[i].key, sm->key, n + 1);
		}
	}
	if (spec->alias && strlen(spec->alias) < sizeof r->alias)
		snprintf(r->alias, sizeof r->alias, "%s", spec->alias);
	if (spec->key && strlen(spec->key) < sizeof r->key) {
		snprintf(r->key, sizeof r->key, "%s", spec->key);
	} else {
		randombytes_buf(raw, sizeof raw);
		memcpy(r->key, "sk-sb-", 6);
		sodium_bin2hex(r->key + 6, sizeof r->key - 6, raw, sizeof raw);
		sodium_memzero(raw, sizeof raw);
	}
	pthread_mutex_lock(&gw->mu);
	for (struct gw_run *o = gw->runs; o; o = o->next) {
		if (!strcmp(o->id, r->id)) {
			pthread_mutex_unlock(&gw->mu);
			rc = sb_seterr(SB_ERR_EXISTS, "run %s is already registered",
				       r->id);
			goto fail;
		}
	}
	if (spec->group && spec->group[0] && spec->group_budget_nusd &&
	    strlen(spec->group) >= GW_GROUP_MAX) {
		pthread_mutex_unlock(&gw->mu);
		rc = sb_seterr(SB_ERR_INVAL, "group name of %zu bytes: at most %d",
			       strlen(spec->group), GW_GROUP_MAX - 1);
		goto fail;
	}
	if (spec->group && spec->group[0] && spec->group_budget_nusd &&
	    !(r->group = group_ref_locked(gw, spec))) {
		pthread_mutex_unlock(&gw->mu);
		goto fail;
	}
	r->rerun = spec->rerun; /* the gateway's from here on */
	r->refs = 1;		/* the list's reference */
	r->next = gw->runs;
	gw->runs = r;
	gw->nruns++;
	pthread_cond_signal(&gw->wake); /* the shares shrank */
	pthread_mutex_unlock(&gw->mu);
	memcpy(key, r->key, SB_VKEY_MAX);
	return SB_OK;
fail:
	if (r) {
		for (size_t i = 0; r->models && i < r->nmodels; i++)
			sodium_free(r->models[i].key);
		free(r->models);
		pthread_mutex_destroy(&r->record_mu); /* zeroed, or initialised */
		free(r);
	}
	return rc;
}

void sb_gateway_run_remove(sb_gateway *gw, const char *run)
{
	struct gw_run *r = NULL;

	pthread_mutex_lock(&gw->mu);
	for (struct gw_run **p = &gw->runs; *p; p = &(*p)->next) {
		if (!strcmp((*p)->id, run)) {
			r = *p;
			*p = r->next;
			r->removed = 1;
			gw->nruns--;
			pthread_cond_signal(&gw->wake); /* its connections close */
			break;
		}
	}
	pthread_mutex_unlock(&gw->mu);
	if (r)
		run_unref(gw, r);
}

int sb_gateway_run_budget(sb_gateway *gw, const char *run, struct sb_budget *b)
{
	int rc = SB_ERR_NOTFOUND;

	pthread_mutex_lock(&gw->mu);
	for (struct gw_run *r = gw->runs; r; r = r->next) {
		if (!strcmp(r->id, run)) {
			*b = r->budget;
			rc = SB_OK;
			break;
		}
	}
	pthread_mutex_unlock(&gw->mu);
	return rc == SB_OK
		   ? rc
		   : sb_seterr(rc, "run %s is not registered with the gateway", run);
}
