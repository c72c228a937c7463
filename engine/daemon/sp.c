/* sp.c - the daemon's end of nng's wire protocols (see sp.h).
 *
 * One thread per server runs its loop. A connection goes through its TLS
 * handshake (remote only), the exchange of SP headers, then messages. Every
 * state has a deadline, checked by a sweep every SWEEP_S; every buffer has
 * a bound; a peer that breaks the protocol loses its connection and
 * nothing else.
 */
#include "engine/daemon/sp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

#include "engine/bucket.h"
#include "engine/loop.h"
#include "engine/daemon/spwire.h"
#include "engine/error.h"
#include "engine/sock.h"

#define SWEEP_S	       0.25
#define READ_BUDGET    (256u << 10) /* bytes read from one connection per wake-up */
#define BODY_FIRST     (64u << 10)  /* a unix socket request's first buffer */
#define ACCEPT_BURST   64	    /* connections accepted per wake-up */
#define PEER_BUCKETS   256
#define PEER_FORGET_S  60.0 /* a peer with no connection is forgotten after */
#define LOG_EVERY_S    10.0
#define PENALTY_BASE_S 0.25
#define PENALTY_MAX_S  4.0
#define IOV_MAX_SP     64

/* An outgoing message, shared by the subscribers it goes to. */
struct frame {
	unsigned refs;
	size_t len;
	uint8_t data[];
};

struct out {
	struct frame *f;
	struct out *next;
};

/* A peer of the TLS listener: an IPv4 address or an IPv6 /64. */
struct peer {
	char key[48];
	unsigned conns;
	struct sb_bucket accepts;
	unsigned denied; /* refused requests while it is remembered */
	double penalty_until, last_seen;
	double log_at;	     /* last log line about it */
	uint64_t log_denied; /* refused since that line */
	struct peer *next;
};

struct listener {
	sb_sp *s;
	int fd, proto, tls;
	sb_watch *w;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct listener *next;
};

enum cstate { C_TLS, C_HEADER, C_OPEN };

struct conn {
	sb_sp *s;
	struct listener *l;
	int fd, tls, proto;
	sb_watch *w, *later; /* io; a zero timer when bytes wait to be fed (rest,
			      * or decrypted bytes TLS holds) */
	mbedtls_ssl_context ssl;
	enum cstate state;
	double t_start, t_last, resume_at;
	double t_msg; /* the first byte of the message being read */
	struct peer *peer;
	/* what the peer sends: its header, then messages (the backtrace and
	 * the body's length of the one being read are in dec) */
	struct sb_spwire_dec dec;
	uint8_t *body;
	size_t body_cap, body_got; /* buffer size (accounted), bytes in it */
	int dropping;		   /* the body being read was refused */
	uint8_t *rest;		   /* bytes read past a pause, fed first when it ends */
	size_t rest_off, rest_len;
	int authed; /* the current message is authenticated */
	int ever_authed;
	unsigned denied;
	char who[64];
	/* writing */
	struct out *out_head, **out_tail;
	size_t out_off; /* into the first frame */
	unsigned nout;
	int want_write; /* TLS: mbedtls wants the socket writable */
	unsigned inflight, refs;
	int closed, closing; /* closing: flush what is queued, then close */
	struct conn *prev, *next;
};

struct sb_sp_req {
	sb_sp *s;
	struct conn *c;
	uint8_t bt[4 * SB_SPWIRE_BT_MAX];
	size_t bt_len, bytes;
	char who[64];
	int remote;
	void *reply;
	size_t reply_len;
	int answered;		       /* sb_sp_reply was called (under req_mu) */
	struct sb_sp_req *prev, *next; /* the server's requests not yet delivered */
	struct sb_post post;	       /* the reply's way to the server's loop */
};

struct ratelimit {
	double last;
	uint64_t more;
};

struct sb_sp {
	struct sb_sp_opts o;
	struct sb_sp_limits lim;
	uint8_t *deny;
	size_t deny_len;
	sb_loop *loop;
	pthread_t thread;
	int started;
	struct sb_post stop_post; /* sb_sp_close's to the loop */
	sb_watch *sweep_w, *pub_w, *stop_w;
	struct listener *listeners;
	struct conn *conns;
	unsigned nconns;
	size_t buffered;
	struct peer *peers[PEER_BUCKETS];
	/* requests handed out and not yet delivered: the loop thread's, but
	 * after sb_sp_close (shut) the repliers' under req_mu; the last of
	 * them frees the server once its close is done */
	struct sb_sp_req *reqs;
	pthread_mutex_t req_mu;
	int shut, done;
	/* TLS */
	int has_tls;
	mbedtls_ssl_config conf;
	mbedtls_x509_crt cert;
	mbedtls_pk_context key;
	mbedtls_entropy_context entropy;
	mbedtls_ctr_drbg_context drbg;
	/* publishing, from any thread */
	pthread_mutex_t pub_mu;
	struct out *pub_head, **pub_tail;
	/* counters */
	pthread_mutex_t st_mu;
	struct sb_sp_stats st;
	struct ratelimit rl_limit, rl_proto, rl_accept;
};

static void conn_update(struct conn *c);
static void conn_write(struct conn *c);
static void conn_drop(struct conn *c, const char *why);
static int conn_paused(struct conn *c);

/* --- small helpers --- */

static void stat_add(sb_sp *s, uint64_t *field, int64_t d)
{
	pthread_mutex_lock(&s->st_mu);
	*field += (uint64_t)d;
	pthread_mutex_unlock(&s->st_mu);
}

static void sp_log(sb_sp *s, struct ratelimit *rl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Logs a line unless rl logged one in the last LOG_EVERY_S (then counts it). */
static void sp_log(sb_sp *s, struct ratelimit *rl, const char *fmt, ...)
{
	char line[512];
	double now = sb_loop_now(s->loop);
	va_list ap;
	int n;

	if (!s->o.ops->log)
		return;
	if (rl && rl->last && now - rl->last < LOG_EVERY_S) {
		rl->more++;
		return;
	}
	n = snprintf(line, sizeof line, "%s: ", s->o.name);
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
	va_end(ap);
	if (rl && rl->more) {
		n = (int)strlen(line);
		snprintf(line + n, sizeof line - (size_t)n,
			 " (and %llu more like it since)", (unsigned long long)rl->more);
	}
	if (rl) {
		rl->last = now;
		rl->more = 0;
	}
	s->o.ops->log(s->o.ctx, line);
}

static struct frame *frame_new(size_t len)
{
	struct frame *f = malloc(sizeof *f + len);

	if (f) {
		f->refs = 1;
		f->len = len;
	}
	return f;
}

static void frame_unref(struct frame *f)
{
	if (f && --f->refs == 0)
		free(f);
}

/* A reply of len bytes (body) to the request whose backtrace is bt
 * (bt_len bytes), framed for TLS or a unix socket; NULL without memory. */
static struct frame *reply_frame(int tls, const uint8_t *bt, size_t bt_len,
				 const void *body, size_t len)
{
	uint8_t h[SB_SPWIRE_REPLY_HEAD];
	size_t hl = sb_spwire_reply_put(h, tls, bt, bt_len, len);
	struct frame *f = frame_new(hl + len);

	if (f) {
		memcpy(f->data, h, hl);
		if (len)
			memcpy(f->data + hl, body, len);
	}
	return f;
}

static void conn_queue(struct conn *c, struct frame *f)
{
	struct out *o = malloc(sizeof *o);

	if (!o) {
		frame_unref(f);
		conn_drop(c, "out of memory");
		return;
	}
	o->f = f;
	o->next = NULL;
	*c->out_tail = o;
	c->out_tail = &o->next;
	c->nout++;
}

/* --- peers (TLS) --- */

static void peer_key(const struct sockaddr_storage *ss, char key[48])
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
	struct in6_addr a;

	if (ss->ss_family == AF_INET) {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, key, 48);
		return;
	}
	if (ss->ss_family != AF_INET6) {
		snprintf(key, 48, "?");
		return;
	}
	if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
		inet_ntop(AF_INET, &s6->sin6_addr.s6_addr[12], key, 48);
		return;
	}
	a = s6->sin6_addr;
	memset(&a.s6_addr[8], 0, 8); /* a /64 is one peer */
	inet_ntop(AF_INET6, &a, key, 40);
	strcat(key, "/64");
}

static unsigned peer_bucket(const char *key)
{
	unsigned h = 2166136261u;

	for (; *key; key++)
		h = (h ^ (unsigned char)*key) * 16777619u;
	return h % PEER_BUCKETS;
}

static struct peer *peer_get(sb_sp *s, const char *key, double now)
{
	struct peer **pp = &s->peers[peer_bucket(key)], *p;

	for (p = *pp; p; p = p->next)
		if (!strcmp(p->key, key))
			return p;
	if (!(p = calloc(1, sizeof *p)))
		return NULL;
	snprintf(p->key, sizeof p->key, "%s", key);
	sb_bucket_init(&p->accepts, s->lim.accept_rate, s->lim.accept_burst, now);
	p->last_seen = now;
	p->next = *pp;
	*pp = p;
	return p;
}

static void peers_forget(sb_sp *s, double now)
{
	for (int i = 0; i < PEER_BUCKETS; i++) {
		for (struct peer **pp = &s->peers[i]; *pp;) {
			struct peer *p = *pp;
			if (!p->conns && now - p->last_seen > PEER_FORGET_S &&
			    now >= p->penalty_until) {
				*pp = p->next;
				free(p);
			} else {
				pp = &p->next;
			}
		}
	}
}

/* How long a connection waits after its nth refusal (its peer's count too). */
static double penalty_s(unsigned conn_denied, unsigned peer_denied)
{
	unsigned n = conn_denied > peer_denied / 4 ? conn_denied : peer_denied / 4;
	double p = PENALTY_BASE_S;

	while (n-- > 1 && p < PENALTY_MAX_S)
		p *= 2;
	return p < PENALTY_MAX_S ? p : PENALTY_MAX_S;
}

/* --- requests --- */

static void req_unlink(struct sb_sp_req *r)
{
	sb_sp *s = r->s;

	if (r->prev)
		r->prev->next = r->next;
	else
		s->reqs = r->next;
	if (r->next)
		r->next->prev = r->prev;
}

static void conn_free(struct conn *c)
{
	while (c->out_head) {
		struct out *o = c->out_head;
		c->out_head = o->next;
		frame_unref(o->f);
		free(o);
	}
	free(c);
}

/* Keeps c allocated while a callback works on it: conn_drop frees a
 * connection no one holds, and the callback still reads it after. */
static void conn_hold(struct conn *c)
{
	c->refs++;
}

static void conn_release(struct conn *c)
{
	if (--c->refs == 0 && c->closed)
		conn_free(c);
}

/* On the server's thread: a reply to deliver. */
static void reply_deliver(void *arg)
{
	struct sb_sp_req *r = arg;
	struct conn *c = r->c;
	sb_sp *s = r->s;
	struct frame *f;

	req_unlink(r);
	s->buffered -= r->bytes;
	c->inflight--;
	if (!c->closed && r->reply) {
		if ((f = reply_frame(c->tls, r->bt, r->bt_len, r->reply, r->reply_len))) {
			c->t_last = sb_loop_now(s->loop);
			conn_queue(c, f);
			/* written now when the socket takes it: a wait for
			 * the io watcher costs the peer a loop iteration */
			if (c->state == C_OPEN)
				conn_write(c);
		} else {
			conn_drop(c, "out of memory");
		}
	}
	if (!c->closed)
		conn_update(c);
	conn_release(c); /* the request's hold */
	free(r->reply);
	free(r);
}

static void sp_free(sb_sp *s)
{
	pthread_mutex_destroy(&s->pub_mu);
	pthread_mutex_destroy(&s->st_mu);
	pthread_mutex_destroy(&s->req_mu);
	free(s);
}

void sb_sp_reply(sb_sp_req *r, const void *body, size_t len)
{
	sb_sp *s = r->s;
	int last;

	pthread_mutex_lock(&s->req_mu);
	if (s->shut) {
		/* the server is closed: the reply has nowhere to go */
		req_unlink(r);
		free(r);
		last = s->done && !s->reqs;
		pthread_mutex_unlock(&s->req_mu);
		if (last)
			sp_free(s);
		return;
	}
	r->answered = 1;
	r->reply = malloc(len ? len : 1);
	if (r->reply) {
		memcpy(r->reply, body, len);
		r->reply_len = len;
	}
	/* without memory for the reply, only the request's end is delivered:
	 * the client's call times out */
	sb_loop_post(s->loop, &r->post, reply_deliver, r);
	pthread_mutex_unlock(&s->req_mu);
}

const char *sb_sp_req_who(const sb_sp_req *r)
{
	return r->who;
}

int sb_sp_req_remote(const sb_sp_req *r)
{
	return r->remote;
}

/* Hands the whole message of c to the server's user. */
static void msg_deliver(struct conn *c)
{
	sb_sp *s = c->s;
	struct sb_sp_req *r = calloc(1, sizeof *r);
	void *body = c->body;

	if (!r) {
		conn_drop(c, "out of memory");
		return;
	}
	r->s = s;
	r->c = c;
	memcpy(r->bt, c->dec.bt, c->dec.bt_len);
	r->bt_len = c->dec.bt_len;
	r->bytes = c->body_cap;
	r->remote = c->tls;
	snprintf(r->who, sizeof r->who, "%s", c->tls ? c->who : "local");
	r->next = s->reqs;
	if (s->reqs)
		s->reqs->prev = r;
	s->reqs = r;
	c->inflight++;
	c->refs++;
	c->body = NULL; /* its bytes stay counted until the reply */
	c->body_cap = c->body_got = 0;
	c->authed = 0;
	c->t_last = sb_loop_now(s->loop);
	stat_add(s, &s->st.requests, 1);
	s->o.ops->request(s->o.ctx, r, body, (size_t)c->dec.body_len);
}

/* Refuses the current message of c: the deny reply, then the rest of the
 * message is dropped as it comes, and c and its peer are slowed down. */
static void msg_deny(struct conn *c)
{
	sb_sp *s = c->s;
	double now = sb_loop_now(s->loop);
	struct frame *f;

	if ((f = reply_frame(c->tls, c->dec.bt, c->dec.bt_len, s->deny, s->deny_len)))
		conn_queue(c, f);
	s->buffered -= c->body_cap;
	free(c->body);
	c->body = NULL;
	c->body_cap = c->body_got = 0;
	c->dropping = 1;
	c->denied++;
	stat_add(s, &s->st.denied, 1);
	if (c->peer) {
		c->peer->denied++;
		c->peer->log_denied++;
		c->resume_at = now + penalty_s(c->denied, c->peer->denied);
		c->peer->penalty_until = c->resume_at;
		if (now - c->peer->log_at >= LOG_EVERY_S) {
			sp_log(s, NULL,
			       "peer %s: %llu requests refused (no valid token) in the "
			       "last %.0f s",
			       c->peer->key, (unsigned long long)c->peer->log_denied,
			       c->peer->log_at ? now - c->peer->log_at : 0.0);
			c->peer->log_at = now;
			c->peer->log_denied = 0;
		}
	}
	if (c->denied >= s->lim.max_denied)
		c->closing = 1; /* after the reply is out */
}

/* Checks the credentials of c's message once enough of it is in.
 * Returns 0 when they are good, -1 when the message is refused. */
static int msg_authenticate(struct conn *c)
{
	sb_sp *s = c->s;
	int complete = c->body_got == c->dec.body_len;
	int rc = s->o.ops->authenticate(s->o.ctx, c->body, c->body_got, complete, c->who,
					sizeof c->who);

	if (rc == SB_OK) {
		c->authed = c->ever_authed = 1; /* the rest comes as it arrives */
		return 0;
	}
	/* SB_END too: the credentials were not in the first preauth_max bytes */
	msg_deny(c);
	return -1;
}

/* Closes c for a request of len bytes, over max_request. */
static void msg_too_large(struct conn *c, uint64_t len)
{
	sb_sp *s = c->s;

	sp_log(s, &s->rl_limit,
	       "a request of %llu bytes is above the %zu-byte limit: connection closed",
	       (unsigned long long)len, s->lim.max_request);
	stat_add(s, &s->st.dropped_conns, 1); /* logged here, on its own limit */
	conn_drop(c, NULL);
}

/* A request's header and backtrace are in: makes the body's first buffer,
 * of its first preauth_max bytes over TLS (until it is authenticated),
 * BODY_FIRST over a unix socket; it grows as the bytes come (body_grow). */
static void body_begin(struct conn *c)
{
	sb_sp *s = c->s;
	size_t cap, first = c->tls ? s->lim.preauth_max : BODY_FIRST;

	cap = c->dec.body_len < first ? (size_t)c->dec.body_len : first;
	c->body_cap = cap;
	c->body_got = 0;
	c->dropping = 0;
	c->body = malloc(cap ? cap : 1);
	if (!c->body) {
		conn_drop(c, "out of memory");
		return;
	}
	s->buffered += cap;
}

/* Doubles the body's buffer of c, to its declared length at most, and
 * counts what it adds as held. */
static void body_grow(struct conn *c)
{
	sb_sp *s = c->s;
	size_t len = (size_t)c->dec.body_len;
	size_t cap = c->body_cap < len - c->body_cap ? 2 * c->body_cap : len;
	uint8_t *b = realloc(c->body, cap);

	if (!b) {
		conn_drop(c, "out of memory");
		return;
	}
	s->buffered += cap - c->body_cap;
	c->body = b;
	c->body_cap = cap;
}

/* Takes n bytes of the body into c's buffer. A buffer full before the body
 * is whole is authenticated (TLS, its first bytes), then grown. */
static void body_take(struct conn *c, const uint8_t *p, size_t n)
{
	while (n && !c->closed && !c->dropping) {
		size_t k = c->body_cap - c->body_got < n ? c->body_cap - c->body_got : n;
		memcpy(c->body + c->body_got, p, k);
		c->body_got += k;
		p += k;
		n -= k;
		if (c->body_got < c->body_cap || c->body_got == c->dec.body_len)
			continue;
		if (c->tls && !c->authed && msg_authenticate(c))
			return;
		body_grow(c);
	}
}

/* The body's last n bytes: the request is whole; it is authenticated
 * (TLS, if it was not yet) and handed on, unless it was refused. */
static void body_end(struct conn *c, const uint8_t *p, size_t n)
{
	body_take(c, p, n);
	if (c->closed)
		return;
	if (!c->dropping && !(c->tls && !c->authed && msg_authenticate(c)))
		msg_deliver(c);
	c->dropping = 0;
}

/* Feeds n bytes read from c to its decoder. Returns the bytes used: all
 * of them, unless the connection was dropped or paused (a limit reached
 * at a message's end, a refusal's penalty, closing after max_denied),
 * where it stops; the caller keeps the rest for later. So a connection
 * goes past max_inflight by nothing, and past max_buffered by the one
 * message it had begun. */
static size_t msg_feed(struct conn *c, const uint8_t *p, size_t n)
{
	size_t used = 0, k, len;
	const uint8_t *piece;

	while (!c->closed && !conn_paused(c)) {
		if (!sb_spwire_dec_begun(&c->dec))
			c->t_msg = sb_loop_now(c->s->loop); /* a message's first byte */
		switch (sb_spwire_next(&c->dec, p + used, n - used, &k, &piece, &len)) {
		case SB_SPWIRE_MORE: return used + k;
		case SB_SPWIRE_HELLO:
			c->state = C_OPEN;
			c->t_last = sb_loop_now(c->s->loop);
			break;
		case SB_SPWIRE_HEAD: body_begin(c); break;
		case SB_SPWIRE_BODY: body_take(c, piece, len); break;
		case SB_SPWIRE_END: body_end(c, piece, len); break;
		case SB_SPWIRE_BAD: conn_drop(c, c->dec.err); break;
		case SB_SPWIRE_TOOBIG: msg_too_large(c, c->dec.body_len); break;
		}
		used += k;
	}
	return used;
}

/* --- connections --- */

/* 1 when c should not read now (too many requests in flight or replies
 * not yet taken by the peer, memory, a penalty, or it is closing). */
static int conn_paused(struct conn *c)
{
	sb_sp *s = c->s;

	if (c->closing)
		return 1;
	if (c->state != C_OPEN)
		return 0;
	if (c->proto == SB_SP_PROTO_PUB)
		return 0;
	/* a peer that does not read its replies stops being read: they are
	 * held here, so they count with the requests being served */
	if (!sb_spwire_dec_begun(&c->dec) &&
	    (c->inflight + c->nout >= s->lim.max_inflight ||
	     s->buffered >= s->lim.max_buffered))
		return 1;
	return c->resume_at > sb_loop_now(s->loop);
}

static void on_later(void *ctx);

static void conn_update(struct conn *c)
{
	int ev = 0;

	if (c->closed)
		return;
	if (c->closing && !c->out_head) {
		conn_drop(c, NULL);
		return;
	}
	if (!conn_paused(c))
		ev |= SB_READ;
	if (c->want_write ||
	    (c->out_head && (c->state == C_OPEN || c->state == C_HEADER)))
		ev |= SB_WRITE;
	if (c->tls && c->state == C_TLS)
		ev |= SB_READ; /* the handshake reads regardless */
	sb_watch_io_set(c->w, ev);
	/* bytes already read (or decrypted) wake no io watcher */
	if (!c->later && c->state != C_TLS && !conn_paused(c) &&
	    (c->rest_len || (c->tls && mbedtls_ssl_get_bytes_avail(&c->ssl)))) {
		c->later = sb_loop_timer(c->s->loop, 0, 0, on_later, c);
		if (!c->later) /* out of memory: its socket, writable, wakes it */
			sb_watch_io_set(c->w, ev | SB_WRITE);
	}
}

static void conn_drop(struct conn *c, const char *why)
{
	sb_sp *s = c->s;

	if (c->closed)
		return;
	if (why) {
		sp_log(s, &s->rl_proto, "%s%s%s: connection closed", why,
		       c->peer ? " from " : "", c->peer ? c->peer->key : "");
		stat_add(s, &s->st.dropped_conns, 1);
	}
	c->closed = 1;
	sb_watch_stop(c->w);
	sb_watch_stop(c->later);
	c->w = c->later = NULL;
	if (c->tls)
		mbedtls_ssl_free(&c->ssl);
	close(c->fd);
	c->fd = -1;
	if (c->peer)
		c->peer->conns--;
	s->buffered -= c->body_cap;
	free(c->body);
	c->body = NULL;
	c->body_cap = 0;
	free(c->rest);
	c->rest = NULL;
	c->rest_len = 0;
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->nconns--;
	stat_add(s, &s->st.conns, -1);
	if (c->refs == 0)
		conn_free(c);
}

/* mbedtls's socket callbacks. */
static int tls_send(void *ctx, const unsigned char *buf, size_t len)
{
	struct conn *c = ctx;
	ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);

	if (n >= 0)
		return (int)n;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return MBEDTLS_ERR_SSL_WANT_WRITE;
	return MBEDTLS_ERR_NET_SEND_FAILED;
}

static int tls_recv(void *ctx, unsigned char *buf, size_t len)
{
	struct conn *c = ctx;
	ssize_t n = recv(c->fd, buf, len, 0);

	if (n >= 0)
		return (int)n; /* 0: the peer closed */
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return MBEDTLS_ERR_SSL_WANT_READ;
	return MBEDTLS_ERR_NET_RECV_FAILED;
}

/* Reads up to cap bytes from c. Returns the count, 0 when nothing is
 * there now, -1 when the connection is over (dropped). */
static ssize_t conn_read(struct conn *c, uint8_t *buf, size_t cap)
{
	ssize_t n;

	if (c->tls) {
		int r = mbedtls_ssl_read(&c->ssl, buf, cap);
		if (r > 0)
			return r;
		if (r == MBEDTLS_ERR_SSL_WANT_READ)
			return 0;
		if (r == MBEDTLS_ERR_SSL_WANT_WRITE) {
			c->want_write = 1;
			return 0;
		}
		conn_drop(c, r == 0 || r == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY ||
				     r == MBEDTLS_ERR_SSL_CONN_EOF
				 ? NULL
				 : "TLS error");
		return -1;
	}
	n = read(c->fd, buf, cap);
	if (n > 0)
		return n;
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	conn_drop(c, NULL); /* closed by the peer */
	return -1;
}

static void conn_write(struct conn *c)
{
	while (c->out_head && !c->closed) {
		if (c->tls) {
			struct frame *f = c->out_head->f;
			int r = mbedtls_ssl_write(&c->ssl, f->data + c->out_off,
						  f->len - c->out_off);
			if (r == MBEDTLS_ERR_SSL_WANT_WRITE ||
			    r == MBEDTLS_ERR_SSL_WANT_READ) {
				c->want_write = r == MBEDTLS_ERR_SSL_WANT_WRITE;
				return;
			}
			if (r < 0) {
				conn_drop(c, "TLS error");
				return;
			}
			c->out_off += (size_t)r;
		} else {
			struct iovec iov[IOV_MAX_SP];
			struct msghdr mh = {.msg_iov = iov};
			int n = 0;
			size_t off = c->out_off;
			ssize_t w;
			for (struct out *o = c->out_head; o && n < IOV_MAX_SP;
			     o = o->next, n++) {
				iov[n].iov_base = o->f->data + off;
				iov[n].iov_len = o->f->len - off;
				off = 0;
			}
			mh.msg_iovlen = (size_t)n;
			/* not writev: a peer gone raises SIGPIPE, which would end
			 * a process that has not ignored it */
			w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
			if (w < 0 &&
			    (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
				return;
			if (w < 0) {
				conn_drop(c, NULL); /* the peer went away */
				return;
			}
			c->out_off += (size_t)w;
		}
		c->want_write = 0;
		c->t_last = sb_loop_now(c->s->loop); /* the peer takes its replies */
		while (c->out_head && c->out_off >= c->out_head->f->len) {
			struct out *o = c->out_head;
			c->out_off -= o->f->len;
			c->out_head = o->next;
			if (!c->out_head)
				c->out_tail = &c->out_head;
			c->nout--;
			frame_unref(o->f);
			free(o);
		}
	}
}

/* Feeds the bytes kept from an earlier read, as far as c goes now. */
static void conn_feed_rest(struct conn *c)
{
	size_t k = msg_feed(c, c->rest + c->rest_off, c->rest_len);

	if (c->closed)
		return;
	c->rest_off += k;
	c->rest_len -= k;
	if (!c->rest_len) {
		free(c->rest);
		c->rest = NULL;
		c->rest_off = 0;
	}
}

/* Feeds n bytes just read into c, and keeps what it does not take now. */
static void conn_feed(struct conn *c, const uint8_t *buf, size_t n)
{
	size_t k = msg_feed(c, buf, n);

	if (c->closed || k == n)
		return;
	if (!(c->rest = malloc(n - k))) {
		conn_drop(c, "out of memory");
		return;
	}
	memcpy(c->rest, buf + k, n - k);
	c->rest_off = 0;
	c->rest_len = n - k;
}

static void conn_io(struct conn *c, int revents)
{
	uint8_t buf[16384];
	size_t budget = READ_BUDGET;
	ssize_t n;

	if (c->state == C_TLS) {
		int r = mbedtls_ssl_handshake(&c->ssl);
		if (r == MBEDTLS_ERR_SSL_WANT_READ || r == MBEDTLS_ERR_SSL_WANT_WRITE) {
			c->want_write = r == MBEDTLS_ERR_SSL_WANT_WRITE;
			conn_update(c);
			return;
		}
		if (r) {
			char e[128];
			mbedtls_strerror(r, e, sizeof e);
			sp_log(c->s, &c->s->rl_proto, "TLS handshake with %s failed: %s",
			       c->peer ? c->peer->key : "?", e);
			stat_add(c->s, &c->s->st.dropped_conns, 1);
			conn_drop(c, NULL);
			return;
		}
		c->want_write = 0;
		c->state = C_HEADER;
	}
	if (revents & SB_WRITE || c->want_write || c->out_head)
		conn_write(c);
	while (!c->closed && budget > 0 && !conn_paused(c)) {
		if (c->rest_len) {
			conn_feed_rest(c);
			continue;
		}
		size_t want = sizeof buf < budget ? sizeof buf : budget;
		n = conn_read(c, buf, want);
		if (n <= 0)
			break;
		budget -= (size_t)n;
		conn_feed(c, buf, (size_t)n);
		/* a short read of a unix socket took all there was: the
		 * watcher is level-triggered, so more wakes it again */
		if (!c->tls && (size_t)n < want)
			break;
	}
	if (c->closed)
		return;
	if (c->out_head)
		conn_write(c);
	conn_update(c); /* and the zero timer when bytes wait */
}

static void on_conn_io(void *ctx, int revents)
{
	struct conn *c = ctx;

	conn_hold(c);
	conn_io(c, revents);
	conn_release(c);
}

static void on_later(void *ctx)
{
	struct conn *c = ctx;

	sb_watch_stop(c->later);
	c->later = NULL;
	conn_hold(c);
	conn_io(c, SB_READ);
	conn_release(c);
}

/* The unix socket connection to close for a new one when the server is
 * full: the one idle longest of those waiting for their header or for a
 * request, or else the subscriber idle longest; NULL when all are busy. */
static struct conn *conn_victim(sb_sp *s)
{
	struct conn *best = NULL, *sub = NULL;

	for (struct conn *c = s->conns; c; c = c->next) {
		if (c->tls || c->closing)
			continue;
		if (c->state == C_OPEN && c->proto == SB_SP_PROTO_PUB) {
			if (!sub || c->t_last < sub->t_last)
				sub = c;
		} else if (c->state != C_OPEN ||
			   (!c->inflight && !c->out_head &&
			    !sb_spwire_dec_begun(&c->dec) && !c->rest_len)) {
			if (!best || c->t_last < best->t_last)
				best = c;
		}
	}
	return best ? best : sub;
}

static void conn_new(struct listener *l, int fd, const struct sockaddr_storage *ss)
{
	sb_sp *s = l->s;
	double now = sb_loop_now(s->loop);
	struct conn *c = NULL, *v;
	struct peer *p = NULL;
	struct frame *f;
	char key[48];
	int peer = l->proto == SB_SP_PROTO_REP ? SB_SP_PROTO_REQ : SB_SP_PROTO_SUB;

	if (s->nconns >= s->lim.max_conns && !l->tls && (v = conn_victim(s))) {
		sp_log(s, &s->rl_limit,
		       "%u connections: the limit; the one idle longest (%.0f s) "
		       "was closed for a new one",
		       s->nconns, now - v->t_last);
		stat_add(s, &s->st.dropped_conns, 1);
		conn_drop(v, NULL);
	}
	if (s->nconns >= s->lim.max_conns) {
		sp_log(s, &s->rl_limit,
		       "%u connections: the limit; a new one was refused", s->nconns);
		goto refuse;
	}
	if (l->tls) {
		peer_key(ss, key);
		if (!(p = peer_get(s, key, now)))
			goto refuse;
		p->last_seen = now;
		if (p->conns >= s->lim.max_conns_per_peer) {
			sp_log(s, &s->rl_accept,
			       "peer %s: at its connection limit; a new "
			       "connection was refused",
			       key);
			goto refuse;
		}
		if (!sb_bucket_take(&p->accepts, now)) {
			sp_log(s, &s->rl_accept,
			       "peer %s: connecting too fast; a new connection "
			       "was refused",
			       key);
			goto refuse;
		}
	}
	if (!(c = calloc(1, sizeof *c)) || !(f = frame_new(SB_SPWIRE_HEADER)))
		goto refuse;
	c->s = s;
	c->l = l;
	c->fd = fd;
	c->tls = l->tls;
	c->proto = l->proto;
	c->t_start = c->t_last = now;
	c->out_tail = &c->out_head;
	c->state = l->tls ? C_TLS : C_HEADER;
	sb_spwire_header_put(f->data, l->proto);
	conn_queue(c, f);
	sb_spwire_dec_init(&c->dec, l->tls, peer, s->lim.max_request);
	if (l->tls) {
		mbedtls_ssl_init(&c->ssl);
		if (mbedtls_ssl_setup(&c->ssl, &s->conf)) {
			mbedtls_ssl_free(&c->ssl);
			conn_free(c);
			c = NULL;
			goto refuse;
		}
		mbedtls_ssl_set_bio(&c->ssl, c, tls_send, tls_recv, NULL);
		c->peer = p;
		p->conns++;
	}
	if (!(c->w = sb_loop_io(s->loop, fd, SB_READ | SB_WRITE, on_conn_io, c))) {
		if (c->tls) {
			mbedtls_ssl_free(&c->ssl);
			p->conns--;
		}
		conn_free(c);
		c = NULL;
		goto refuse;
	}
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	s->nconns++;
	pthread_mutex_lock(&s->st_mu);
	s->st.conns++;
	s->st.accepted++;
	pthread_mutex_unlock(&s->st_mu);
	return;
refuse:
	free(c);
	close(fd);
	stat_add(s, &s->st.refused_conns, 1);
}

static void on_accept(void *ctx, int revents)
{
	struct listener *l = ctx;
	sb_sp *s = l->s;

	for (int i = 0; i < ACCEPT_BURST; i++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;
		int fd = accept4(l->fd, (struct sockaddr *)&ss, &sl,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				/* no descriptor now: wait for the sweep to retry
				 * rather than spin on a readable listener */
				sp_log(s, &s->rl_limit, "cannot accept: %s",
				       strerror(errno));
				sb_watch_io_set(l->w, 0);
			}
			return;
		}
		if (l->tls) {
			int one = 1;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		}
		conn_new(l, fd, &ss);
	}
}

/* --- deadlines --- */

static void on_sweep(void *ctx)
{
	sb_sp *s = ctx;
	double now = sb_loop_now(s->loop);
	struct conn *c, *next;

	for (c = s->conns; c; c = next) {
		next = c->next;
		if (c->state != C_OPEN && now - c->t_start > s->lim.handshake_s)
			conn_drop(c, "handshake not done in time");
		else if (c->tls && !c->ever_authed &&
			 now - c->t_start > s->lim.unauth_idle_s)
			conn_drop(c, "no authenticated request in time");
		else if (!c->tls && c->proto == SB_SP_PROTO_REP &&
			 sb_spwire_dec_begun(&c->dec) &&
			 now - c->t_msg > s->lim.request_s)
			conn_drop(c, "request not whole in time");
		else if (c->proto == SB_SP_PROTO_REP && !c->inflight &&
			 now - c->t_last > s->lim.idle_s)
			/* idle, or its replies have not moved for as long */
			conn_drop(c, c->out_head ? "replies not read in time" : NULL);
		else
			conn_update(c);
	}
	for (struct listener *l = s->listeners; l; l = l->next)
		sb_watch_io_set(l->w, SB_READ); /* after a lack of descriptors */
	peers_forget(s, now);
}

/* --- publishing --- */

void sb_sp_publish(sb_sp *s, const void *msg, size_t len)
{
	struct out *o = malloc(sizeof *o);
	struct frame *f = frame_new(9 + len);

	if (!o || !f) {
		free(o);
		free(f);
		stat_add(s, &s->st.pub_dropped, 1);
		return;
	}
	sb_spwire_msg_put(f->data, 0, len);
	memcpy(f->data + 9, msg, len);
	o->f = f;
	o->next = NULL;
	pthread_mutex_lock(&s->pub_mu);
	*s->pub_tail = o;
	s->pub_tail = &o->next;
	pthread_mutex_unlock(&s->pub_mu);
	sb_watch_wake(s->pub_w);
}

static void on_publish(void *ctx)
{
	sb_sp *s = ctx;
	struct out *o, *next;
	uint64_t dropped = 0;

	pthread_mutex_lock(&s->pub_mu);
	o = s->pub_head;
	s->pub_head = NULL;
	s->pub_tail = &s->pub_head;
	pthread_mutex_unlock(&s->pub_mu);
	for (; o; o = next) {
		next = o->next;
		for (struct conn *c = s->conns, *cn; c; c = cn) {
			cn = c->next; /* without memory, conn_queue drops c */
			if (c->proto != SB_SP_PROTO_PUB || c->state != C_OPEN)
				continue;
			if (c->nout >= s->lim.pub_queue) {
				dropped++;
				continue;
			}
			o->f->refs++;
			conn_queue(c, o->f);
		}
		frame_unref(o->f);
		free(o);
	}
	if (dropped)
		stat_add(s, &s->st.pub_dropped, (int64_t)dropped);
	for (struct conn *c = s->conns, *cn; c; c = cn) {
		cn = c->next;
		if (c->proto == SB_SP_PROTO_PUB && c->out_head) {
			conn_hold(c);
			conn_write(c);
			if (!c->closed)
				conn_update(c);
			conn_release(c);
		}
	}
}

/* --- the server --- */

int sb_sp_open(const struct sb_sp_opts *o, sb_sp **out)
{
	sb_sp *s = calloc(1, sizeof *s);
	struct sb_sp_limits *l;
	int rc;

	if (!s)
		return SB_ERR_NOMEM;
	s->o = *o;
	l = &s->lim;
	*l = o->limits;
	if (!l->max_conns)
		l->max_conns = 1024;
	if (!l->max_conns_per_peer)
		l->max_conns_per_peer = 16;
	if (!(l->accept_rate > 0))
		l->accept_rate = 10;
	if (!(l->accept_burst >= 1))
		l->accept_burst = 20;
	if (!(l->handshake_s > 0))
		l->handshake_s = 10;
	if (!(l->unauth_idle_s > 0))
		l->unauth_idle_s = 10;
	if (!(l->idle_s > 0))
		l->idle_s = 300;
	if (!(l->request_s > 0))
		l->request_s = 30;
	if (!l->max_request)
		l->max_request = 64u << 20;
	if (!l->preauth_max)
		l->preauth_max = 4096;
	if (!l->max_inflight)
		l->max_inflight = 64;
	if (!l->max_buffered)
		l->max_buffered = 512u << 20;
	if (!l->pub_queue)
		l->pub_queue = 8192;
	if (!l->max_denied)
		l->max_denied = 8;
	pthread_mutex_init(&s->pub_mu, NULL);
	pthread_mutex_init(&s->st_mu, NULL);
	pthread_mutex_init(&s->req_mu, NULL);
	s->pub_tail = &s->pub_head;
	if (o->deny_len && !(s->deny = malloc(o->deny_len))) {
		sb_sp_close(s);
		return SB_ERR_NOMEM;
	}
	if (o->deny_len)
		memcpy(s->deny, o->deny_reply, o->deny_len);
	s->deny_len = o->deny_len;
	if ((rc = sb_loop_open(&s->loop))) {
		sb_sp_close(s);
		return rc;
	}
	s->sweep_w = sb_loop_timer(s->loop, SWEEP_S, SWEEP_S, on_sweep, s);
	s->pub_w = sb_loop_async(s->loop, on_publish, s);
	if (!s->sweep_w || !s->pub_w) {
		sb_sp_close(s);
		return SB_ERR_NOMEM;
	}
	*out = s;
	return SB_OK;
}

static int listener_add(sb_sp *s, int fd, int proto, int tls, const char *path)
{
	struct listener *l = calloc(1, sizeof *l);

	if (!l) {
		close(fd);
		return SB_ERR_NOMEM;
	}
	l->s = s;
	l->fd = fd;
	l->proto = proto;
	l->tls = tls;
	snprintf(l->path, sizeof l->path, "%s", path ? path : "");
	if (!(l->w = sb_loop_io(s->loop, fd, SB_READ, on_accept, l))) {
		close(fd);
		free(l);
		return SB_ERR_NOMEM;
	}
	l->next = s->listeners;
	s->listeners = l;
	return SB_OK;
}

int sb_sp_listen_ipc(sb_sp *s, const char *path, int proto)
{
	int fd, rc;

	if (proto != SB_SP_PROTO_REP && proto != SB_SP_PROTO_PUB)
		return sb_seterr(SB_ERR_INVAL, "a unix socket serves REP or PUB");
	if ((rc = sb_unix_listen(path, &fd)))
		return rc;
	return listener_add(s, fd, proto, 0, path);
}

static int tls_setup(sb_sp *s, const char *cert_pem, const char *key_pem)
{
	char e[160];
	int r;

	mbedtls_ssl_config_init(&s->conf);
	mbedtls_x509_crt_init(&s->cert);
	mbedtls_pk_init(&s->key);
	mbedtls_entropy_init(&s->entropy);
	mbedtls_ctr_drbg_init(&s->drbg);
	s->has_tls = 1;
	if ((r = mbedtls_ctr_drbg_seed(&s->drbg, mbedtls_entropy_func, &s->entropy,
				       (const unsigned char *)"sanboxd", 7)))
		goto fail;
	if ((r = mbedtls_x509_crt_parse_file(&s->cert, cert_pem))) {
		mbedtls_strerror(r, e, sizeof e);
		return sb_seterr(SB_ERR_INVAL, "certificate %s: %s", cert_pem, e);
	}
	if ((r = mbedtls_pk_parse_keyfile(&s->key, key_pem, NULL))) {
		mbedtls_strerror(r, e, sizeof e);
		return sb_seterr(SB_ERR_INVAL, "key %s: %s", key_pem, e);
	}
	if ((r = mbedtls_ssl_config_defaults(&s->conf, MBEDTLS_SSL_IS_SERVER,
					     MBEDTLS_SSL_TRANSPORT_STREAM,
					     MBEDTLS_SSL_PRESET_DEFAULT)))
		goto fail;
	mbedtls_ssl_conf_rng(&s->conf, mbedtls_ctr_drbg_random, &s->drbg);
	mbedtls_ssl_conf_min_version(&s->conf, MBEDTLS_SSL_MAJOR_VERSION_3,
				     MBEDTLS_SSL_MINOR_VERSION_3); /* TLS 1.2 and later */
	mbedtls_ssl_conf_authmode(&s->conf,
				  MBEDTLS_SSL_VERIFY_NONE); /* tokens, not certificates */
	if ((r = mbedtls_ssl_conf_own_cert(&s->conf, &s->cert, &s->key))) {
		mbedtls_strerror(r, e, sizeof e);
		return sb_seterr(SB_ERR_INVAL,
				 "certificate and key do not go together: %s", e);
	}
	return SB_OK;
fail:
	mbedtls_strerror(r, e, sizeof e);
	return sb_seterr(SB_ERR_IO, "TLS set-up: %s", e);
}

int sb_sp_listen_tls(sb_sp *s, const char *url, const char *cert_pem, const char *key_pem)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE},
			*ai = NULL;
	char host[256], port[16];
	const char *h, *colon;
	int fd = -1, one = 1, rc, g;

	if (strncmp(url, "tls+tcp://", 10))
		return sb_seterr(SB_ERR_INVAL,
				 "a remote listener is tls+tcp://HOST:PORT, not %.80s",
				 url);
	if (!s->o.ops->authenticate)
		return sb_seterr(SB_ERR_INVAL, "a remote listener needs authentication");
	h = url + 10;
	if (*h == '[') {
		const char *end = strchr(h, ']');
		if (!end || end[1] != ':')
			return sb_seterr(SB_ERR_INVAL, "bad address in %.80s", url);
		snprintf(host, sizeof host, "%.*s", (int)(end - h - 1), h + 1);
		colon = end + 1;
	} else {
		if (!(colon = strrchr(h, ':')))
			return sb_seterr(SB_ERR_INVAL, "no port in %.80s", url);
		snprintf(host, sizeof host, "%.*s", (int)(colon - h), h);
	}
	snprintf(port, sizeof port, "%s", colon + 1);
	if (!port[0] || strspn(port, "0123456789") != strlen(port))
		return sb_seterr(SB_ERR_INVAL, "bad port in %.80s", url);
	if (!cert_pem || !key_pem)
		return sb_seterr(SB_ERR_INVAL,
				 "a remote listener needs a certificate and a key");
	if (!s->has_tls && (rc = tls_setup(s, cert_pem, key_pem)))
		return rc;
	if ((g = getaddrinfo(host[0] && strcmp(host, "*") ? host : NULL, port, &hints,
			     &ai)))
		return sb_seterr(SB_ERR_INVAL, "%.80s: %s", url, gai_strerror(g));
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 512)) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return sb_seterr(e == EADDRINUSE ? SB_ERR_EXISTS : SB_ERR_IO, "%.80s: %s",
				 url, strerror(e));
	}
	freeaddrinfo(ai);
	return listener_add(s, fd, SB_SP_PROTO_REP, 1, NULL);
}

static void *sp_thread(void *arg)
{
	sb_sp *s = arg;

	sb_loop_run(s->loop);
	return NULL;
}

int sb_sp_start(sb_sp *s)
{
	char name[16];

	if (pthread_create(&s->thread, NULL, sp_thread, s))
		return sb_seterr(SB_ERR_IO, "cannot start the %s socket thread",
				 s->o.name);
	snprintf(name, sizeof name, "sb:%.12s", s->o.name);
	pthread_setname_np(s->thread, name);
	s->started = 1;
	return SB_OK;
}

void sb_sp_stats(sb_sp *s, struct sb_sp_stats *st)
{
	pthread_mutex_lock(&s->st_mu);
	*st = s->st;
	pthread_mutex_unlock(&s->st_mu);
}

static void on_stop(void *ctx)
{
	sb_loop_break(((sb_sp *)ctx)->loop);
}

void sb_sp_close(sb_sp *s)
{
	int last;

	if (!s)
		return;
	if (s->started) {
		sb_loop_post(s->loop, &s->stop_post, on_stop, s);
		pthread_join(s->thread, NULL);
	}
	while (s->conns)
		conn_drop(s->conns, NULL); /* kept while requests refer to it */
	while (s->listeners) {
		struct listener *l = s->listeners;
		s->listeners = l->next;
		sb_watch_stop(l->w);
		close(l->fd);
		if (l->path[0])
			unlink(l->path);
		free(l);
	}
	for (int i = 0; i < PEER_BUCKETS; i++) {
		while (s->peers[i]) {
			struct peer *p = s->peers[i];
			s->peers[i] = p->next;
			free(p);
		}
	}
	while (s->pub_head) {
		struct out *o = s->pub_head;
		s->pub_head = o->next;
		frame_unref(o->f);
		free(o);
	}
	sb_watch_stop(s->sweep_w);
	sb_watch_stop(s->pub_w);
	/* From here on, replies go nowhere (no more posts to the loop).
	 * Requests answered already, whose replies were posted and will not
	 * be delivered now, are freed; the others stay for their replies. */
	pthread_mutex_lock(&s->req_mu);
	s->shut = 1;
	for (struct sb_sp_req *r = s->reqs, *next; r; r = next) {
		next = r->next;
		if (--r->c->refs == 0)
			conn_free(r->c);
		r->c = NULL;
		free(r->reply);
		r->reply = NULL;
		if (r->answered) {
			req_unlink(r);
			free(r);
		}
	}
	pthread_mutex_unlock(&s->req_mu);
	sb_loop_close(s->loop);
	if (s->has_tls) {
		mbedtls_ssl_config_free(&s->conf);
		mbedtls_x509_crt_free(&s->cert);
		mbedtls_pk_free(&s->key);
		mbedtls_ctr_drbg_free(&s->drbg);
		mbedtls_entropy_free(&s->entropy);
	}
	free(s->deny);
	pthread_mutex_lock(&s->req_mu);
	s->done = 1;
	last = !s->reqs;
	pthread_mutex_unlock(&s->req_mu);
	if (last)
		sp_free(s); /* else the last reply does */
}
