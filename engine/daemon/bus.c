/* bus.c - the clients' nng sockets: requests and the live event feed. */
#include "engine/daemon/bus.h"

#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <nng/protocol/pubsub0/sub.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <nng/transport/ipc/ipc.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/error.h"

struct sb_client {
	nng_socket req;
};

/* The subscriptions of a process to one daemon share one sub socket and one
 * context on it. nng 1.5.2 can hang for good in nng_close() when a message
 * arrives on an ipc pipe as the pipe closes: ipc_pipe_recv_cb() resubmits
 * its read on the closed pipe, the read is refused without a callback, the
 * protocol's receive never finishes, and the process's single reaper thread
 * waits for it forever (every later close then hangs too). A subscriber is
 * always receiving, so closing sub sockets while the daemon publishes hit it
 * within a few hundred closes: the shared socket stays open until the
 * process ends, and a subscription is closed in user space only.
 *
 * The context is subscribed to each topic some subscription wants, and a
 * receiver (an nng callback) files every message it gets in a ring of the
 * last RING messages and wakes all subscriptions with one broadcast. Each
 * subscription keeps its own position in the ring and skips messages of
 * other topics; one that falls more than RING behind loses the oldest (a gap
 * its follower fills from the log). nng's own way, a context per
 * subscription, has its receiving thread duplicate the message and wake each
 * subscriber in turn while it holds the socket: with 64 subscribers in a
 * process the last one waited for 63 wake-ups. */
#define RING 8192

struct sub_topic {
	char t[64];
	size_t len;
	unsigned refs; /* subscriptions to it */
	struct sub_topic *next;
};

struct sub_socket {
	char dir[512];
	nng_socket sock;
	nng_ctx ctx;
	nng_aio *aio;           /* the receiver's */
	pthread_mutex_t mu;     /* the ring and the topics */
	pthread_cond_t cv;      /* broadcast for each message */
	nng_msg *ring[RING];    /* message i is ring[i % RING] */
	uint64_t head;          /* messages received */
	uint64_t pipes;         /* connections made to the daemon */
	uint64_t resets;        /* of those, the ones after the first */
	struct sub_topic *topics;
	struct sub_socket *next;
};
static pthread_mutex_t sub_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sub_socket *sub_sockets;

struct sb_sub {
	struct sub_socket *ss;
	char topic[64];         /* "RUN\n", or "" for every run */
	size_t len;
	uint64_t pos;           /* the next message of the ring to look at */
	uint64_t resets;        /* ss->resets when last told */
};

static int nng_err(int rv, const char *what)
{
	switch (rv) {
	case 0: return SB_OK;
	case NNG_ENOMEM: return SB_ERR_NOMEM;
	case NNG_ETIMEDOUT: return sb_seterr(SB_ERR_TIMEOUT, "%s: timed out", what);
	case NNG_ECONNREFUSED:
	case NNG_ENOENT: return sb_seterr(SB_ERR_UNAVAIL, "%s: %s", what, nng_strerror(rv));
	case NNG_EADDRINUSE: return sb_seterr(SB_ERR_EXISTS, "%s: %s", what, nng_strerror(rv));
	case NNG_EMSGSIZE: return sb_seterr(SB_ERR_TOOBIG, "%s: %s", what, nng_strerror(rv));
	case NNG_EAGAIN: return SB_END;
	}
	return sb_seterr(SB_ERR_IO, "%s: %s", what, nng_strerror(rv));
}

static void ipc_url(char *url, size_t cap, const char *dir, const char *name)
{
	snprintf(url, cap, "ipc://%s/%s", dir, name);
}

void sb_bus_free(void *p)
{
	free(p);
}

static int dial(nng_socket s, const char *dir, const char *ca_pem, const char *name)
{
	nng_dialer d;
	nng_tls_config *cfg = NULL;
	char url[512];
	int rv;

	if (!strncmp(dir, "tls+tcp://", 10)) {
		/* Remote clients get the control API only: the event feed has
		 * no way to check a token, so they poll events.read. */
		if (strcmp(name, "api.sock"))
			return sb_seterr(SB_ERR_INVAL, "the live event feed is local only");
		if (!ca_pem)
			return sb_seterr(SB_ERR_INVAL, "a remote daemon needs a CA certificate");
		snprintf(url, sizeof url, "%s", dir);
	} else {
		ipc_url(url, sizeof url, dir, name);
	}
	if ((rv = nng_dialer_create(&d, s, url)))
		return nng_err(rv, url);
	/* a restarted daemon is found again within half a second */
	nng_dialer_set_ms(d, NNG_OPT_RECONNMINT, 50);
	nng_dialer_set_ms(d, NNG_OPT_RECONNMAXT, 500);
	if (!strncmp(url, "tls+tcp://", 10)) {
		char host[256];
		size_t hl = strcspn(url + 10, ":/");
		snprintf(host, sizeof host, "%.*s", (int)hl, url + 10);
		if ((rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT)) ||
		    (rv = nng_tls_config_ca_file(cfg, ca_pem)) ||
		    (rv = nng_tls_config_server_name(cfg, host)) ||
		    (rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED)) ||
		    (rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg))) {
			if (cfg)
				nng_tls_config_free(cfg);
			return nng_err(rv, url);
		}
		nng_tls_config_free(cfg);
	}
	return nng_err(nng_dialer_start(d, 0), url);
}

int sb_client_open(const char *dir, const char *ca_pem, sb_client **out)
{
	sb_client *c = calloc(1, sizeof *c);
	int rv, rc;

	if (!c)
		return SB_ERR_NOMEM;
	if ((rv = nng_req0_open(&c->req))) {
		free(c);
		return nng_err(rv, "api socket");
	}
	nng_socket_set_size(c->req, NNG_OPT_RECVMAXSZ, 0); /* replies may be large */
	nng_socket_set_ms(c->req, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	if ((rc = dial(c->req, dir, ca_pem, "api.sock"))) {
		sb_client_close(c);
		return rc;
	}
	*out = c;
	return SB_OK;
}

/* A call's aio completes through call_done, which a waiter watches with its
 * own deadline: the aio's timeout is nng's to keep, and nng 1.5.2 has been
 * seen not to keep it (its poll thread spinning, the expiry never run). A
 * waiter that sees neither the reply nor the timeout by CALL_GRACE_MS after
 * it gives the call up: it returns SB_ERR_TIMEOUT, and the call (its aio,
 * its context and any reply that still comes) is left to nng and never
 * freed. That costs a few hundred bytes once in a wedged process; waiting
 * forever would cost the process. */
#define CALL_GRACE_MS 2000

struct sb_call {
	nng_ctx ctx;
	nng_aio *aio;
	int timeout_ms;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int receiving; /* the operation under way is the reply's */
	int done;      /* the aio's operation is over */
	int abandoned; /* the waiter gave up: call_done drops a reply */
};

/* Sets *dl to timeout_ms from now on CLOCK_MONOTONIC. */
static void deadline_after(struct timespec *dl, int timeout_ms)
{
	clock_gettime(CLOCK_MONOTONIC, dl);
	dl->tv_sec += timeout_ms / 1000;
	dl->tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (dl->tv_nsec >= 1000000000) {
		dl->tv_sec++;
		dl->tv_nsec -= 1000000000;
	}
}

/* A lock and its condition, whose timed waits count on CLOCK_MONOTONIC
 * (deadline_after's clock). */
static void sync_init(pthread_mutex_t *mu, pthread_cond_t *cv)
{
	pthread_condattr_t ca;

	pthread_mutex_init(mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
}

static void sync_destroy(pthread_mutex_t *mu, pthread_cond_t *cv)
{
	pthread_cond_destroy(cv);
	pthread_mutex_destroy(mu);
}

/* With mu held, waits until *flag is set (by a thread that signals cv) or
 * timeout_ms passes (-1: never); returns *flag. */
static int wait_flag(pthread_mutex_t *mu, pthread_cond_t *cv, const int *flag,
		     int timeout_ms)
{
	struct timespec dl;
	int rv = 0;

	if (timeout_ms >= 0)
		deadline_after(&dl, timeout_ms);
	while (!*flag && rv != ETIMEDOUT)
		rv = timeout_ms < 0 ? pthread_cond_wait(cv, mu)
				    : pthread_cond_timedwait(cv, mu, &dl);
	return *flag;
}

static void call_done(void *arg)
{
	sb_call *call = arg;
	nng_msg *m;

	pthread_mutex_lock(&call->mu);
	call->done = 1;
	if (call->abandoned && call->receiving && !nng_aio_result(call->aio) &&
	    (m = nng_aio_get_msg(call->aio)))
		nng_msg_free(m);
	pthread_cond_signal(&call->cv);
	pthread_mutex_unlock(&call->mu);
}

#define CALL_ABANDONED (-1) /* call_step's: not one of nng's codes */

/* Starts the next operation of call (send or receive) and waits for it to
 * end. Returns nng's result, or CALL_ABANDONED: then nothing of call may
 * be touched again. */
static int call_step(sb_call *call, int send)
{
	int gave_up;

	call->done = 0;
	call->receiving = !send;
	if (send)
		nng_ctx_send(call->ctx, call->aio);
	else
		nng_ctx_recv(call->ctx, call->aio);
	pthread_mutex_lock(&call->mu);
	gave_up = call->abandoned =
	    !wait_flag(&call->mu, &call->cv, &call->done,
		       call->timeout_ms < 0 ? -1 : call->timeout_ms + CALL_GRACE_MS);
	pthread_mutex_unlock(&call->mu);
	if (gave_up)
		return CALL_ABANDONED;
	nng_aio_wait(call->aio); /* call_done has returned */
	return nng_aio_result(call->aio);
}

/* Frees call once its operation is over (not an abandoned one). */
static void call_free(sb_call *call)
{
	if (call->aio)
		nng_aio_free(call->aio);
	nng_ctx_close(call->ctx);
	sync_destroy(&call->mu, &call->cv);
	free(call);
}

/* Ends call: waits until its reply came, or it failed or timed out, then
 * frees it. Returns the reply (NULL if none; the caller frees it) and the
 * error in *rv. The wait matters: nng 1.5.2 can also hang closing a req
 * socket while a reply arrives (see struct sub_socket), so a dropped call
 * must not leave its reply on the way. */
static nng_msg *call_end(sb_call *call, int *rv)
{
	nng_msg *m = NULL;

	if ((*rv = call_step(call, 0)) == CALL_ABANDONED) {
		*rv = NNG_ETIMEDOUT;
		return NULL;
	}
	if (!*rv)
		m = nng_aio_get_msg(call->aio);
	call_free(call);
	return m;
}

void sb_client_cancel(sb_call *call)
{
	nng_msg *m;
	int rv;

	if (call && (m = call_end(call, &rv)))
		nng_msg_free(m);
}

int sb_client_send(sb_client *c, const void *req, size_t len, int timeout_ms,
		   sb_call **out)
{
	sb_call *call;
	nng_msg *m = NULL;
	int rv;

	/* refused here: the daemon drops the connection of a larger one, and
	 * nng 1.5.2, sending it again on each new connection until the call
	 * times out, was seen to wedge the socket for the calls after it */
	if (len > SB_REQ_MAX)
		return sb_seterr(SB_ERR_TOOBIG, "a request of %zu bytes is above the %u-byte limit",
				 len, SB_REQ_MAX);
	if (!(call = calloc(1, sizeof *call)))
		return SB_ERR_NOMEM;
	sync_init(&call->mu, &call->cv);
	call->timeout_ms = timeout_ms;
	if ((rv = nng_ctx_open(&call->ctx, c->req))) {
		sync_destroy(&call->mu, &call->cv);
		free(call);
		return nng_err(rv, "request");
	}
	if ((rv = nng_aio_alloc(&call->aio, call_done, call)) ||
	    (rv = nng_msg_alloc(&m, 0)) || (rv = nng_msg_append(m, req, len))) {
		if (m)
			nng_msg_free(m);
		call_free(call);
		return nng_err(rv, "request");
	}
	nng_ctx_set_ms(call->ctx, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	nng_aio_set_timeout(call->aio, timeout_ms);
	nng_aio_set_msg(call->aio, m);
	if ((rv = call_step(call, 1)) == CALL_ABANDONED)
		return nng_err(NNG_ETIMEDOUT, "request");
	if (rv) {
		nng_msg_free(m); /* not sent: still ours */
		call_free(call);
		return nng_err(rv, "request");
	}
	*out = call;
	return SB_OK;
}

int sb_client_wait(sb_call *call, void **rep, size_t *replen)
{
	int rv;
	nng_msg *m = call_end(call, &rv);

	if (!m)
		return nng_err(rv ? rv : NNG_EPROTO, "reply");
	*replen = nng_msg_len(m);
	*rep = malloc(*replen ? *replen : 1);
	if (!*rep) {
		nng_msg_free(m);
		return SB_ERR_NOMEM;
	}
	memcpy(*rep, nng_msg_body(m), *replen);
	nng_msg_free(m);
	return SB_OK;
}

int sb_client_call(sb_client *c, const void *req, size_t len, int timeout_ms, void **rep,
		   size_t *replen)
{
	sb_call *call;
	int rc = sb_client_send(c, req, len, timeout_ms, &call);

	return rc ? rc : sb_client_wait(call, rep, replen);
}

/* nng_close of a req socket, on a thread of its own that the caller waits
 * for at most CALL_GRACE_MS: nng 1.5.2 has been seen to wait forever in it
 * for a connection that never went (its socket's pipe list never empty).
 * The last of the two to finish frees the closer. */
struct closer {
	nng_socket sock;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done;
	int refs;
};

static void closer_rele(struct closer *k)
{
	int last;

	pthread_mutex_lock(&k->mu);
	last = --k->refs == 0;
	pthread_mutex_unlock(&k->mu);
	if (!last)
		return;
	sync_destroy(&k->mu, &k->cv);
	free(k);
}

static void *closer_main(void *arg)
{
	struct closer *k = arg;

	nng_close(k->sock);
	pthread_mutex_lock(&k->mu);
	k->done = 1;
	pthread_cond_signal(&k->cv);
	pthread_mutex_unlock(&k->mu);
	closer_rele(k);
	return NULL;
}

void sb_client_close(sb_client *c)
{
	struct closer *k;
	pthread_attr_t at;
	pthread_t t;

	if (!c)
		return;
	if (!(k = calloc(1, sizeof *k))) {
		nng_close(c->req);
		free(c);
		return;
	}
	k->sock = c->req;
	k->refs = 2;
	sync_init(&k->mu, &k->cv);
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &at, closer_main, k)) {
		k->refs = 1;
		closer_main(k); /* no thread: close here, unbounded */
	} else {
		pthread_mutex_lock(&k->mu);
		wait_flag(&k->mu, &k->cv, &k->done, CALL_GRACE_MS);
		pthread_mutex_unlock(&k->mu);
		closer_rele(k);
	}
	pthread_attr_destroy(&at);
	free(c);
}

static void sub_recv_cb(void *arg);
static void sub_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg);

/* Finds or makes the process's sub socket for the daemon at dir and starts
 * its receiver (see struct sub_socket). Called with sub_mu held. Errors: as
 * sb_client_open. */
static int sub_socket(const char *dir, const char *ca_pem, struct sub_socket **out)
{
	struct sub_socket *ss;
	int rv, rc;

	for (ss = sub_sockets; ss && strcmp(ss->dir, dir); ss = ss->next)
		;
	if (ss) {
		*out = ss;
		return SB_OK;
	}
	if (!(ss = calloc(1, sizeof *ss)))
		return SB_ERR_NOMEM;
	snprintf(ss->dir, sizeof ss->dir, "%s", dir);
	if ((rv = nng_sub0_open(&ss->sock))) {
		free(ss);
		return nng_err(rv, "event socket");
	}
	nng_socket_set_size(ss->sock, NNG_OPT_RECVMAXSZ, 0);
	sync_init(&ss->mu, &ss->cv);
	if ((rv = nng_pipe_notify(ss->sock, NNG_PIPE_EV_ADD_POST, sub_pipe_cb, ss)) ||
	    (rv = nng_ctx_open(&ss->ctx, ss->sock)) ||
	    (rv = nng_ctx_set_int(ss->ctx, NNG_OPT_RECVBUF, RING)) ||
	    (rv = nng_aio_alloc(&ss->aio, sub_recv_cb, ss))) {
		nng_close(ss->sock); /* not connected: no pipe to hang on */
		free(ss);
		return nng_err(rv, "event context");
	}
	if ((rc = dial(ss->sock, dir, ca_pem, "events.sock"))) {
		nng_aio_free(ss->aio);
		nng_close(ss->sock);
		free(ss);
		return rc;
	}
	nng_ctx_recv(ss->ctx, ss->aio);
	ss->next = sub_sockets;
	sub_sockets = ss;
	*out = ss;
	return SB_OK;
}

/* Does message m belong to topic t (tl bytes, "RUN\n", or "" for all)? */
static int topic_match(nng_msg *m, const char *t, size_t tl)
{
	return nng_msg_len(m) >= tl && !memcmp(nng_msg_body(m), t, tl);
}

/* The receiver, on an nng thread: files each message in the ring and wakes
 * the subscriptions. */
static void sub_recv_cb(void *arg)
{
	struct sub_socket *ss = arg;
	nng_msg *m, *old;
	int rv = nng_aio_result(ss->aio);

	if (rv == NNG_ECLOSED)
		return; /* the process is ending */
	if (rv == 0) {
		m = nng_aio_get_msg(ss->aio);
		pthread_mutex_lock(&ss->mu);
		old = ss->ring[ss->head % RING];
		ss->ring[ss->head % RING] = m;
		ss->head++;
		pthread_mutex_unlock(&ss->mu);
		/* after the unlock, so the woken do not queue on the mutex;
		 * ss->cv lives as long as the process */
		pthread_cond_broadcast(&ss->cv);
		if (old)
			nng_msg_free(old);
	}
	nng_ctx_recv(ss->ctx, ss->aio);
}

/* A connection to the daemon is up. One after the first (the daemon
 * restarted) wakes the subscriptions: they may have missed messages. */
static void sub_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	struct sub_socket *ss = arg;

	pthread_mutex_lock(&ss->mu);
	if (ss->pipes++)
		ss->resets++;
	pthread_mutex_unlock(&ss->mu);
	pthread_cond_broadcast(&ss->cv);
}

/* Adds (delta 1) or drops (-1) one subscription to topic on ss's context,
 * which is subscribed to each topic some subscription wants. Called with
 * ss->mu held. */
static int topic_ref(struct sub_socket *ss, const char *t, size_t tl, int delta)
{
	struct sub_topic **pp, *st;
	int rv = 0;

	for (pp = &ss->topics; *pp && ((*pp)->len != tl || memcmp((*pp)->t, t, tl)); pp = &(*pp)->next)
		;
	if (delta > 0) {
		if (!*pp) {
			if (!(st = calloc(1, sizeof *st)))
				return SB_ERR_NOMEM;
			memcpy(st->t, t, tl);
			st->len = tl;
			if ((rv = nng_ctx_set(ss->ctx, NNG_OPT_SUB_SUBSCRIBE, t, tl))) {
				free(st);
				return nng_err(rv, "subscribe");
			}
			*pp = st;
		}
		(*pp)->refs++;
	} else if (*pp && --(*pp)->refs == 0) {
		st = *pp;
		*pp = st->next;
		nng_ctx_set(ss->ctx, NNG_OPT_SUB_UNSUBSCRIBE, t, tl);
		free(st);
	}
	return SB_OK;
}

int sb_sub_open(const char *dir, const char *ca_pem, const char *topic, sb_sub **out)
{
	sb_sub *s = calloc(1, sizeof *s);
	int n, rc;

	if (!s)
		return SB_ERR_NOMEM;
	n = snprintf(s->topic, sizeof s->topic, "%s%s", topic, topic[0] ? "\n" : "");
	if (n < 0 || (size_t)n >= sizeof s->topic) {
		free(s);
		return sb_seterr(SB_ERR_INVAL, "topic '%.40s' too long", topic);
	}
	s->len = (size_t)n;
	pthread_mutex_lock(&sub_mu);
	rc = sub_socket(dir, ca_pem, &s->ss);
	pthread_mutex_unlock(&sub_mu);
	if (rc) {
		free(s);
		return rc;
	}
	pthread_mutex_lock(&s->ss->mu);
	rc = topic_ref(s->ss, s->topic, s->len, 1);
	s->pos = s->ss->head; /* what arrives from now on */
	s->resets = s->ss->resets;
	pthread_mutex_unlock(&s->ss->mu);
	if (rc) {
		free(s);
		return rc;
	}
	*out = s;
	return SB_OK;
}

int sb_sub_next(sb_sub *s, int timeout_ms, void **msg, size_t *len)
{
	struct sub_socket *ss = s->ss;
	struct timespec dl;
	nng_msg *m = NULL;
	int rc = SB_OK;

	if (timeout_ms > 0)
		deadline_after(&dl, timeout_ms);
	pthread_mutex_lock(&ss->mu);
	for (;;) {
		if (ss->head - s->pos > RING)
			s->pos = ss->head - RING; /* fell behind: those are lost */
		while (s->pos < ss->head && !m) {
			m = ss->ring[s->pos++ % RING];
			if (!topic_match(m, s->topic, s->len))
				m = NULL;
		}
		if (m)
			break;
		if (s->resets != ss->resets) {
			s->resets = ss->resets;
			rc = SB_ERR_RESET;
			break;
		}
		if (timeout_ms == 0 ||
		    (timeout_ms < 0 ? pthread_cond_wait(&ss->cv, &ss->mu)
				    : pthread_cond_timedwait(&ss->cv, &ss->mu, &dl)) == ETIMEDOUT) {
			rc = sb_seterr(SB_ERR_TIMEOUT, "event receive: timed out");
			break;
		}
	}
	if (m) {
		/* the body without the topic ("RUN\n"; a subscription to all
		 * finds the end of the topic itself) */
		const char *body = nng_msg_body(m), *nl = memchr(body, '\n', nng_msg_len(m));
		size_t n = nl ? nng_msg_len(m) - (size_t)(nl + 1 - body) : 0;
		if (!nl)
			rc = sb_seterr(SB_ERR_PROTO, "event message without topic");
		else if (!(*msg = malloc(n ? n : 1)))
			rc = SB_ERR_NOMEM;
		else {
			memcpy(*msg, nl + 1, n);
			*len = n;
		}
	}
	pthread_mutex_unlock(&ss->mu);
	return rc;
}

void sb_sub_close(sb_sub *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->ss->mu);
	topic_ref(s->ss, s->topic, s->len, -1);
	pthread_mutex_unlock(&s->ss->mu);
	free(s);
}
