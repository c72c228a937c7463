/* stub.c - a run's DNS stub, and the resolver behind it (see stub.h).
 *
 * A granted name's addresses are let through for the answer's TTL,
 * clamped. Nothing is forwarded, so a granted name carries no data out
 * either (a wildcard grant's subdomains are resolved, and are as open as
 * the grant says).
 */
#include "netpolicy/stub.h"

#include <ares.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/bucket.h"
#include "engine/error.h"
#include "netpolicy/dns.h"

#define TCP_IDLE_S   10.0 /* a DNS connection with no query in this long is closed */
#define UDP_PER_WAKE 64	  /* datagrams read from a socket per wake-up */
#define QUESTION_MAX 300  /* a query's header and question, kept for its answer */
#define TCP_MAX	     8	  /* DNS connections of a stub */
#define LOOKUPS_MAX  64	  /* lookups of a stub under way */
#define QUERY_RATE   200  /* queries a second a stub answers */
#define QUERY_BURST  400
#define CACHE_LEN    64 /* answers a stub keeps, for their TTL */

/* c-ares driven by the enforcer's loop. */
struct sb_resolver {
	sb_loop *loop;
	ares_channel ares;
	struct ares_watch {
		sb_resolver *rs;
		int fd;
		sb_watch *w;
	} aw[16]; /* its sockets */
	sb_watch *timer;
};

/* An answer the stub keeps (a lookup of a granted name), until expires. */
struct cached {
	char name[254];
	uint16_t type;
	int rcode;
	uint8_t addrs[16][16];
	size_t n;
	double expires; /* the loop's clock; 0: a free place */
};

struct sb_dns_stub {
	struct sb_dns_stub_config c;
	const struct sb_dns_stub_ops *ops;
	void *ctx;
	sb_watch *fw[SB_DNS_STUB_FDS];
	struct stub_fd {
		sb_dns_stub *s;
		int i; /* of c.fds */
	} fctx[SB_DNS_STUB_FDS];
	struct sb_bucket bucket;
	struct stub_conn *conns;
	size_t nconns;
	unsigned pending; /* lookups under way */
	int stopped;
	struct cached cache[CACHE_LEN];
};

/* A DNS connection over TCP. */
struct stub_conn {
	sb_dns_stub *s;
	int fd;
	sb_watch *w, *idle;
	uint8_t in[2 + 65535];
	size_t inlen;
	uint8_t *out; /* the answer being written (with its length), or NULL */
	size_t outlen, outoff;
	int waiting; /* its query is being looked up */
	int in_more; /* conn_more is taking its queries */
	int closed;
	int holds; /* a lookup, conn_more: it is freed once closed and not held */
	struct stub_conn *next;
};

/* A query being looked up, and where its answer goes. */
struct lookup {
	sb_dns_stub *s;
	struct sb_dns_query q;
	uint8_t msg[QUESTION_MAX];
	int fd; /* the UDP socket, or -1 for conn */
	struct sockaddr_storage from;
	socklen_t fromlen;
	struct stub_conn *conn;
	size_t max; /* the largest answer the asker takes */
	int family;
	uint8_t addrs[16][16];
	size_t naddrs;
	uint32_t ttl;
};

static void conn_close(struct stub_conn *c);
static void conn_more(struct stub_conn *c);

static void conn_release(struct stub_conn *c)
{
	if (--c->holds == 0 && c->closed)
		free(c);
}

/* A lookup of c's ended without an answer to send. */
static void conn_unwait(struct stub_conn *c, int close_it)
{
	c->waiting = 0;
	if (close_it)
		conn_close(c);
	else if (!c->in_more && !c->closed)
		conn_more(c);
	conn_release(c);
}

/* --- answers --- */

static void conn_write(struct stub_conn *c)
{
	while (c->out && c->outoff < c->outlen) {
		ssize_t k = send(c->fd, c->out + c->outoff, c->outlen - c->outoff,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
			sb_watch_io_set(c->w, SB_WRITE);
			return;
		}
		if (k <= 0) {
			conn_close(c);
			return;
		}
		c->outoff += (size_t)k;
	}
	free(c->out);
	c->out = NULL;
	if (!c->in_more)
		conn_more(c);
}

/* Sends the answer to lk's query and ends lk. */
static void answer(struct lookup *lk, int rcode, const struct sb_dns_rr *rrs, size_t n)
{
	sb_dns_stub *s = lk->s;
	uint8_t buf[2 + 4096];
	size_t len = sb_dns_answer(&lk->q, lk->msg, rcode, rrs, n, lk->max, buf + 2,
				   sizeof buf - 2);

	if (lk->conn) {
		struct stub_conn *c = lk->conn;
		c->waiting = 0;
		if (c->closed) {
			/* nobody to answer */
		} else if (!len || !(c->out = malloc(len + 2))) {
			conn_close(c);
		} else {
			buf[0] = (uint8_t)(len >> 8);
			buf[1] = (uint8_t)len;
			memcpy(c->out, buf, len + 2);
			c->outlen = len + 2;
			c->outoff = 0;
			conn_write(c);
		}
		conn_release(c);
	} else if (len && !s->stopped) {
		sendto(lk->fd, buf + 2, len, MSG_DONTWAIT, (struct sockaddr *)&lk->from,
		       lk->fromlen);
	}
	free(lk);
	s->pending--;
	s->ops->release(s->ctx); /* the last: it may free s */
}

static const char *type_name(uint16_t t)
{
	return t == SB_DNS_A ? "A" : t == SB_DNS_AAAA ? "AAAA" : "other";
}

/* Keeps lk's answer (rcode, its addresses) in its run's cache for ttl_s:
 * the name's servers see one lookup a TTL, however often the guest asks. */
static void cache_put(const struct lookup *lk, int rcode, uint32_t ttl_s)
{
	sb_dns_stub *s = lk->s;
	struct cached *c = &s->cache[0];
	double now = sb_loop_now(s->c.loop);

	if (strlen(lk->q.name) >= sizeof c->name || !ttl_s)
		return;
	for (size_t i = 0; i < CACHE_LEN; i++) {
		struct cached *x = &s->cache[i];
		if (x->expires > now && x->type == lk->q.qtype &&
		    !strcmp(x->name, lk->q.name)) {
			c = x; /* the same question: replaced */
			break;
		}
		if (x->expires < c->expires)
			c = x; /* else the soonest to expire makes room */
	}
	snprintf(c->name, sizeof c->name, "%.*s", (int)sizeof c->name - 1, lk->q.name);
	c->type = lk->q.qtype;
	c->rcode = rcode;
	c->n = lk->naddrs;
	memcpy(c->addrs, lk->addrs, lk->naddrs * sizeof lk->addrs[0]);
	c->expires = now + ttl_s;
}

/* Answers lk from its run's cache; 0 when the question is not there. */
static int cache_answer(struct lookup *lk)
{
	sb_dns_stub *s = lk->s;
	double now = sb_loop_now(s->c.loop);
	struct sb_dns_rr rrs[16];

	for (size_t i = 0; i < CACHE_LEN; i++) {
		struct cached *x = &s->cache[i];
		if (x->expires <= now || x->type != lk->q.qtype ||
		    strcmp(x->name, lk->q.name))
			continue;
		for (size_t k = 0; k < x->n; k++) {
			rrs[k].type = x->type;
			rrs[k].ttl = (uint32_t)(x->expires - now) + 1;
			memcpy(rrs[k].addr, x->addrs[k], 16);
		}
		s->ops->resolved(s->ctx, type_name(x->type), x->name, NULL);
		answer(lk, x->rcode, rrs, x->n);
		return 1;
	}
	return 0;
}

/* The addresses are in the run's sets: the guest may use them now. */
static void on_names(void *ctx, int rc)
{
	struct lookup *lk = ctx;
	sb_dns_stub *s = lk->s;
	struct sb_dns_rr rrs[16];
	char list[400] = "", a[INET6_ADDRSTRLEN];

	if (s->stopped) {
		answer(lk, SB_DNS_SERVFAIL, NULL, 0);
		return;
	}
	if (rc) {
		s->ops->denied(s->ctx, s->c.host4, 53, "dns", lk->q.name,
			       "the name's addresses could not be granted");
		answer(lk, SB_DNS_SERVFAIL, NULL, 0);
		return;
	}
	for (size_t i = 0; i < lk->naddrs; i++) {
		rrs[i].type = lk->q.qtype;
		rrs[i].ttl = lk->ttl;
		memcpy(rrs[i].addr, lk->addrs[i], 16);
		inet_ntop(lk->family == 4 ? AF_INET : AF_INET6, lk->addrs[i], a,
			  sizeof a);
		if (strlen(list) + strlen(a) + 2 < sizeof list)
			strcat(strcat(list, list[0] ? "," : ""), a);
	}
	s->ops->resolved(s->ctx, type_name(lk->q.qtype), lk->q.name, list);
	cache_put(lk, SB_DNS_NOERROR, lk->ttl);
	answer(lk, SB_DNS_NOERROR, rrs, lk->naddrs);
}

static void on_resolved(void *arg, int status, int timeouts, unsigned char *abuf,
			int alen)
{
	struct lookup *lk = arg;
	sb_dns_stub *s = lk->s;
	struct ares_addrttl a4[16];
	struct ares_addr6ttl a6[16];
	int n = 16, prc;
	uint32_t ttl = s->c.ttl_max_s;

	if (s->stopped || status == ARES_EDESTRUCTION || status == ARES_ECANCELLED) {
		answer(lk, SB_DNS_SERVFAIL, NULL, 0);
		return;
	}
	if (status == ARES_ENOTFOUND || status == ARES_ENODATA) {
		int rcode = status == ARES_ENOTFOUND ? SB_DNS_NXDOMAIN : SB_DNS_NOERROR;
		lk->naddrs = 0;
		cache_put(lk, rcode, s->c.ttl_min_s > 5 ? s->c.ttl_min_s : 5);
		answer(lk, rcode, NULL, 0);
		return;
	}
	if (status != ARES_SUCCESS) {
		answer(lk, SB_DNS_SERVFAIL, NULL, 0);
		return;
	}
	if (lk->family == 4)
		prc = ares_parse_a_reply(abuf, alen, NULL, a4, &n);
	else
		prc = ares_parse_aaaa_reply(abuf, alen, NULL, a6, &n);
	if (prc == ARES_ENODATA || (prc == ARES_SUCCESS && n == 0)) {
		answer(lk, SB_DNS_NOERROR, NULL, 0);
		return;
	}
	if (prc != ARES_SUCCESS) {
		answer(lk, SB_DNS_SERVFAIL, NULL, 0);
		return;
	}
	lk->naddrs = 0;
	for (int i = 0; i < n; i++) {
		int t = lk->family == 4 ? a4[i].ttl : a6[i].ttl;
		uint8_t *a = lk->addrs[lk->naddrs];
		char why[64], text[INET6_ADDRSTRLEN];
		memset(a, 0, 16);
		if (lk->family == 4)
			memcpy(a, &a4[i].ipaddr, 4);
		else
			memcpy(a, &a6[i].ip6addr, 16);
		/* a granted name may not lead to the host, its networks or
		 * other runs (an answer the name's servers choose) */
		if (!s->ops->answer_ok(s->ctx, lk->family, a, why, sizeof why)) {
			inet_ntop(lk->family == 4 ? AF_INET : AF_INET6, a, text,
				  sizeof text);
			s->ops->denied(s->ctx, text, 0, "dns", lk->q.name, why);
			continue;
		}
		lk->naddrs++;
		if (t >= 0 && (uint32_t)t < ttl)
			ttl = (uint32_t)t;
	}
	if (!lk->naddrs) {
		answer(lk, SB_DNS_NOERROR, NULL, 0);
		return;
	}
	lk->ttl = ttl < s->c.ttl_min_s ? s->c.ttl_min_s : ttl;
	if (s->ops->names_add(s->ctx, lk->q.name, lk->family,
			      (const uint8_t(*)[16])lk->addrs, lk->naddrs, lk->ttl,
			      on_names, lk))
		answer(lk, SB_DNS_SERVFAIL, NULL, 0);
}

static void resolver_query(sb_resolver *rs, const char *name, int type, ares_callback cb,
			   void *arg);

/* Answers query q (msg, len bytes) of stub s; lk says where the answer
 * goes (and is the stub's, freed by answer()). */
static void query(struct lookup *lk, const uint8_t *msg, size_t len)
{
	sb_dns_stub *s = lk->s;
	const struct sb_dns_query *q = &lk->q;
	size_t keep = 12 + q->question_len;

	s->pending++;
	s->ops->hold(s->ctx);
	memcpy(lk->msg, msg, keep < sizeof lk->msg ? keep : sizeof lk->msg);
	lk->max = lk->conn	       ? 65535
		  : !q->edns	       ? 512
		  : q->udp_size > 1232 ? 1232
				       : q->udp_size;
	if (q->qclass != 1) { /* IN */
		answer(lk, SB_DNS_REFUSED, NULL, 0);
		return;
	}
	if (!s->ops->granted(s->ctx, q->name, 0, 0) &&
	    !s->ops->granted(s->ctx, q->name, 1, 0)) {
		s->ops->denied(s->ctx, s->c.host4, 53, "dns", q->name,
			       "name not granted");
		answer(lk, SB_DNS_NXDOMAIN, NULL, 0);
		return;
	}
	if ((q->qtype != SB_DNS_A && q->qtype != SB_DNS_AAAA) ||
	    (q->qtype == SB_DNS_AAAA && !s->c.ipv6)) {
		answer(lk, SB_DNS_NOERROR, NULL, 0); /* nothing is forwarded */
		return;
	}
	if (s->pending > LOOKUPS_MAX) {
		answer(lk, SB_DNS_SERVFAIL, NULL, 0);
		return;
	}
	if (cache_answer(lk))
		return;
	lk->family = q->qtype == SB_DNS_A ? 4 : 6;
	resolver_query(s->c.resolver, q->name, q->qtype, on_resolved, lk);
}

/* Parses a query of s and looks it up; lk is filled but for q. */
static void query_in(struct lookup *lk, const uint8_t *msg, size_t len)
{
	sb_dns_stub *s = lk->s;
	uint8_t buf[64];
	uint16_t id;
	size_t n;

	if (!sb_bucket_take(&s->bucket, sb_loop_now(s->c.loop))) {
		s->ops->denied(s->ctx, s->c.host4, 53, "dns", NULL,
			       "too many queries (rate limited)");
		if (lk->conn)
			conn_unwait(lk->conn, 0);
		free(lk);
		return;
	}
	if (sb_dns_parse_query(msg, len, &lk->q) == SB_OK) {
		query(lk, msg, len);
		return;
	}
	s->ops->denied(s->ctx, s->c.host4, 53, "dns", NULL, "malformed query");
	if (sb_dns_header_id(msg, len, &id) == SB_OK &&
	    (n = sb_dns_formerr(id, buf, sizeof buf)) && !lk->conn)
		sendto(lk->fd, buf, n, MSG_DONTWAIT, (struct sockaddr *)&lk->from,
		       lk->fromlen);
	if (lk->conn) /* a malformed query ends its connection */
		conn_unwait(lk->conn, 1);
	free(lk);
}

/* --- UDP --- */

static void on_udp(void *ctx, int revents)
{
	struct stub_fd *f = ctx;
	sb_dns_stub *s = f->s;
	uint8_t msg[4096];

	for (int i = 0; i < UDP_PER_WAKE; i++) {
		struct lookup *lk = calloc(1, sizeof *lk);
		ssize_t k;
		if (!lk)
			return;
		lk->s = s;
		lk->fd = s->c.fds[f->i];
		lk->fromlen = sizeof lk->from;
		k = recvfrom(lk->fd, msg, sizeof msg, MSG_DONTWAIT,
			     (struct sockaddr *)&lk->from, &lk->fromlen);
		if (k < 0) {
			free(lk);
			return;
		}
		query_in(lk, msg, (size_t)k);
	}
}

/* --- TCP --- */

static void conn_close(struct stub_conn *c)
{
	sb_dns_stub *s = c->s;
	struct stub_conn **p;

	if (c->closed)
		return;
	for (p = &s->conns; *p && *p != c; p = &(*p)->next)
		;
	if (*p) {
		*p = c->next;
		s->nconns--;
	}
	sb_watch_stop(c->w);
	sb_watch_stop(c->idle);
	c->w = c->idle = NULL;
	close(c->fd);
	free(c->out);
	c->out = NULL;
	c->closed = 1;
	if (!c->holds)
		free(c);
}

static void on_conn_idle(void *ctx)
{
	conn_close(ctx);
}

/* Takes c's whole queries one at a time, then reads on. */
static void conn_more(struct stub_conn *c)
{
	c->holds++;
	c->in_more = 1;
	while (!c->closed && !c->waiting && !c->out) {
		size_t need =
		    c->inlen >= 2 ? 2 + ((size_t)c->in[0] << 8 | c->in[1]) : SIZE_MAX;
		struct lookup *lk;
		if (c->inlen < need) {
			sb_watch_io_set(c->w, SB_READ);
			break;
		}
		sb_watch_io_set(c->w, 0); /* one query at a time */
		if (!(lk = calloc(1, sizeof *lk))) {
			conn_close(c);
			break;
		}
		lk->s = c->s;
		lk->fd = -1;
		lk->conn = c;
		c->waiting = 1;
		c->holds++;
		query_in(lk, c->in + 2, need - 2); /* may answer at once */
		if (c->closed)
			break;
		memmove(c->in, c->in + need, c->inlen - need);
		c->inlen -= need;
	}
	c->in_more = 0;
	conn_release(c);
}

static void on_conn(void *ctx, int revents)
{
	struct stub_conn *c = ctx;
	ssize_t k;

	if (revents & SB_WRITE) {
		conn_write(c);
		return;
	}
	k = recv(c->fd, c->in + c->inlen, sizeof c->in - c->inlen, MSG_DONTWAIT);
	if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
		conn_close(c);
		return;
	}
	if (k > 0) {
		c->inlen += (size_t)k;
		sb_watch_stop(c->idle);
		c->idle = sb_loop_timer(c->s->c.loop, TCP_IDLE_S, 0, on_conn_idle, c);
		if (!c->idle) { /* out of memory: no deadline, no connection */
			conn_close(c);
			return;
		}
		conn_more(c);
	}
}

static void on_accept(void *ctx, int revents)
{
	struct stub_fd *f = ctx;
	sb_dns_stub *s = f->s;
	struct stub_conn *c;
	int fd = accept4(s->c.fds[f->i], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

	if (fd < 0)
		return;
	if (s->nconns >= TCP_MAX || !(c = calloc(1, sizeof *c))) {
		close(fd);
		return;
	}
	c->s = s;
	c->fd = fd;
	c->w = sb_loop_io(s->c.loop, fd, SB_READ, on_conn, c);
	c->idle = sb_loop_timer(s->c.loop, TCP_IDLE_S, 0, on_conn_idle, c);
	c->next = s->conns;
	s->conns = c;
	s->nconns++;
	if (!c->w || !c->idle)
		conn_close(c);
}

int sb_dns_stub_open(const struct sb_dns_stub_config *c,
		     const struct sb_dns_stub_ops *ops, void *ctx, sb_dns_stub **out)
{
	sb_dns_stub *s = calloc(1, sizeof *s);

	if (!s)
		return SB_ERR_NOMEM;
	s->c = *c;
	s->ops = ops;
	s->ctx = ctx;
	sb_bucket_init(&s->bucket, QUERY_RATE, QUERY_BURST, sb_loop_now(c->loop));
	for (int i = 0; i < SB_DNS_STUB_FDS; i++) {
		if (c->fds[i] < 0)
			continue;
		s->fctx[i].s = s;
		s->fctx[i].i = i;
		/* 0, 1: UDP; 2, 3: TCP */
		if (!(s->fw[i] = sb_loop_io(c->loop, c->fds[i], SB_READ,
					    i < 2 ? on_udp : on_accept, &s->fctx[i]))) {
			sb_dns_stub_stop(s);
			free(s);
			return SB_ERR_NOMEM;
		}
	}
	*out = s;
	return SB_OK;
}

void sb_dns_stub_stop(sb_dns_stub *s)
{
	s->stopped = 1;
	for (int i = 0; i < SB_DNS_STUB_FDS; i++) {
		sb_watch_stop(s->fw[i]);
		s->fw[i] = NULL;
	}
	while (s->conns)
		conn_close(s->conns);
}

void sb_dns_stub_close(sb_dns_stub *s)
{
	free(s);
}

/* --- the resolver: c-ares driven by the enforcer's loop --- */

static pthread_once_t ares_once = PTHREAD_ONCE_INIT;
static int ares_lib_rc;

static void ares_lib(void)
{
	ares_lib_rc = ares_library_init(ARES_LIB_INIT_ALL);
}

static void resolver_rearm(sb_resolver *rs);

static void on_resolver_timer(void *ctx)
{
	sb_resolver *rs = ctx;

	sb_watch_stop(rs->timer);
	rs->timer = NULL;
	ares_process_fd(rs->ares, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
	resolver_rearm(rs);
}

/* Arms the timer of the resolver's next timeout. */
static void resolver_rearm(sb_resolver *rs)
{
	struct timeval tv, *t = ares_timeout(rs->ares, NULL, &tv);

	sb_watch_stop(rs->timer);
	/* NULL with t (out of memory): the timeouts are seen at the next
	 * event of the resolver's sockets */
	rs->timer = t ? sb_loop_timer(rs->loop, (double)t->tv_sec + t->tv_usec / 1e6, 0,
				      on_resolver_timer, rs)
		      : NULL;
}

/* Looks name up (class IN, type); cb(arg, ...) gets the answer, on the
 * loop (or with ARES_EDESTRUCTION once the resolver closes). */
static void resolver_query(sb_resolver *rs, const char *name, int type, ares_callback cb,
			   void *arg)
{
	ares_query(rs->ares, name, 1, type, cb, arg);
	resolver_rearm(rs);
}

static void on_resolver_io(void *ctx, int revents)
{
	struct ares_watch *a = ctx;
	sb_resolver *rs = a->rs;
	int fd = a->fd;

	ares_process_fd(rs->ares, revents & SB_READ ? fd : ARES_SOCKET_BAD,
			revents & SB_WRITE ? fd : ARES_SOCKET_BAD);
	resolver_rearm(rs);
}

/* c-ares says which of its sockets it waits on. */
static void on_ares_sock(void *data, ares_socket_t fd, int readable, int writable)
{
	sb_resolver *rs = data;
	int ev = (readable ? SB_READ : 0) | (writable ? SB_WRITE : 0);
	struct ares_watch *a = NULL, *free_slot = NULL;

	for (size_t i = 0; i < sizeof rs->aw / sizeof rs->aw[0]; i++) {
		if (rs->aw[i].w && rs->aw[i].fd == fd)
			a = &rs->aw[i];
		else if (!rs->aw[i].w && !free_slot)
			free_slot = &rs->aw[i];
	}
	if (a && !ev) {
		sb_watch_stop(a->w);
		a->w = NULL;
	} else if (a) {
		sb_watch_io_set(a->w, ev);
	} else if (ev && free_slot) {
		free_slot->rs = rs;
		free_slot->fd = fd;
		/* NULL (out of memory): the socket is not watched; its queries
		 * end at their timeouts */
		free_slot->w = sb_loop_io(rs->loop, fd, ev, on_resolver_io, free_slot);
	}
}

int sb_resolver_open(sb_loop *loop, const char *servers, sb_resolver **out)
{
	struct ares_options o = {0};
	sb_resolver *rs;
	int rc;

	pthread_once(&ares_once, ares_lib);
	if (ares_lib_rc != ARES_SUCCESS)
		return sb_seterr(SB_ERR_UNAVAIL, "c-ares: %s",
				 ares_strerror(ares_lib_rc));
	if (!(rs = calloc(1, sizeof *rs)))
		return SB_ERR_NOMEM;
	rs->loop = loop;
	o.sock_state_cb = on_ares_sock;
	o.sock_state_cb_data = rs;
	o.timeout = 2000;
	o.tries = 2;
	o.flags = ARES_FLAG_NOSEARCH;
	rc = ares_init_options(&rs->ares, &o,
			       ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS |
				   ARES_OPT_TRIES | ARES_OPT_FLAGS);
	if (rc != ARES_SUCCESS) {
		free(rs);
		return sb_seterr(SB_ERR_UNAVAIL, "c-ares: %s", ares_strerror(rc));
	}
	if (servers[0] &&
	    (rc = ares_set_servers_ports_csv(rs->ares, servers)) != ARES_SUCCESS) {
		rc = sb_seterr(SB_ERR_INVAL, "net.resolver: %s: %s", servers,
			       ares_strerror(rc));
		sb_resolver_close(rs);
		return rc;
	}
	*out = rs;
	return SB_OK;
}

void sb_resolver_close(sb_resolver *rs)
{
	if (!rs)
		return;
	ares_destroy(rs->ares); /* lookups under way end (their stubs closed first) */
	sb_watch_stop(rs->timer);
	for (size_t i = 0; i < sizeof rs->aw / sizeof rs->aw[0]; i++)
		sb_watch_stop(rs->aw[i].w);
	free(rs);
}
