/* stub.c - a run's DNS stub, and the resolver behind it (c-ares on the
 * enforcer's loop).
 *
 * The stub answers a guest's queries over UDP and TCP. A name no grant of
 * the run names gets NXDOMAIN and is reported; nothing about it leaves the
 * host. A granted name's A or AAAA query is resolved with the host's
 * resolver; its addresses go into the run's sets (for the answer's TTL,
 * clamped) before the answer goes back. Other types of a granted name get
 * an empty answer: nothing is forwarded, so a granted name carries no
 * data out either (a wildcard grant's subdomains are resolved, and are as
 * open as the grant says).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/error.h"
#include "netpolicy/dns.h"
#include "netpolicy/netrun.h"

#define TCP_IDLE_S   10.0 /* a DNS connection with no query in this long is closed */
#define UDP_PER_WAKE 64	  /* datagrams read from a socket per wake-up */
#define QUESTION_MAX 300  /* a query's header and question, kept for its answer */

/* A DNS connection over TCP. */
struct stub_conn {
	struct net_run *r;
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
	struct net_run *r;
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
	struct net_run *r = lk->r;
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
	} else if (len && !r->ending) {
		sendto(lk->fd, buf + 2, len, MSG_DONTWAIT, (struct sockaddr *)&lk->from,
		       lk->fromlen);
	}
	free(lk);
	net_idle(r);
}

static const char *type_name(uint16_t t)
{
	return t == SB_DNS_A ? "A" : t == SB_DNS_AAAA ? "AAAA" : "other";
}

/* Keeps lk's answer (rcode, its addresses) in its run's cache for ttl_s:
 * the name's servers see one lookup a TTL, however often the guest asks. */
static void cache_put(const struct lookup *lk, int rcode, uint32_t ttl_s)
{
	struct net_run *r = lk->r;
	struct dns_cached *c = &r->cache[0];
	double now = sb_loop_now(r->n->loop);

	if (strlen(lk->q.name) >= sizeof c->name || !ttl_s)
		return;
	for (size_t i = 0; i < NET_DNS_CACHE; i++) {
		struct dns_cached *x = &r->cache[i];
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
	struct net_run *r = lk->r;
	double now = sb_loop_now(r->n->loop);
	struct sb_dns_rr rrs[16];

	for (size_t i = 0; i < NET_DNS_CACHE; i++) {
		struct dns_cached *x = &r->cache[i];
		if (x->expires <= now || x->type != lk->q.qtype ||
		    strcmp(x->name, lk->q.name))
			continue;
		for (size_t k = 0; k < x->n; k++) {
			rrs[k].type = x->type;
			rrs[k].ttl = (uint32_t)(x->expires - now) + 1;
			memcpy(rrs[k].addr, x->addrs[k], 16);
		}
		net_agg_add(r, SB_NET_RESOLVED, "", 0, type_name(x->type), x->name, NULL,
			    NULL, 1);
		answer(lk, x->rcode, rrs, x->n);
		return 1;
	}
	return 0;
}

/* The addresses are in the run's sets: the guest may use them now. */
static void on_names(void *ctx, int rc)
{
	struct lookup *lk = ctx;
	struct sb_dns_rr rrs[16];
	char list[400] = "", a[INET6_ADDRSTRLEN];

	if (rc) {
		net_agg_add(lk->r, SB_NET_DENIED, lk->r->iface.host4, 53, "dns",
			    lk->q.name, "the name's addresses could not be granted", NULL,
			    1);
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
	net_agg_add(lk->r, SB_NET_RESOLVED, "", 0, type_name(lk->q.qtype), lk->q.name,
		    NULL, list, 1);
	cache_put(lk, SB_DNS_NOERROR, lk->ttl);
	answer(lk, SB_DNS_NOERROR, rrs, lk->naddrs);
}

static void on_resolved(void *arg, int status, int timeouts, unsigned char *abuf,
			int alen)
{
	struct lookup *lk = arg;
	struct net_run *r = lk->r;
	struct ares_addrttl a4[16];
	struct ares_addr6ttl a6[16];
	int n = 16, prc;
	uint32_t ttl = r->n->c.ttl_max_s;

	if (r->ending || status == ARES_EDESTRUCTION || status == ARES_ECANCELLED) {
		answer(lk, SB_DNS_SERVFAIL, NULL, 0);
		return;
	}
	if (status == ARES_ENOTFOUND || status == ARES_ENODATA) {
		int rcode = status == ARES_ENOTFOUND ? SB_DNS_NXDOMAIN : SB_DNS_NOERROR;
		lk->naddrs = 0;
		cache_put(lk, rcode, r->n->c.ttl_min_s > 5 ? r->n->c.ttl_min_s : 5);
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
		if (!net_answer_ok(r, lk->family, a, why, sizeof why)) {
			inet_ntop(lk->family == 4 ? AF_INET : AF_INET6, a, text,
				  sizeof text);
			net_agg_add(r, SB_NET_DENIED, text, 0, "dns", lk->q.name, why,
				    NULL, 1);
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
	lk->ttl = ttl < r->n->c.ttl_min_s ? r->n->c.ttl_min_s : ttl;
	if (net_names_add(r, lk->q.name, lk->family, (const uint8_t(*)[16])lk->addrs,
			  lk->naddrs, lk->ttl, on_names, lk))
		answer(lk, SB_DNS_SERVFAIL, NULL, 0);
}

static void ares_rearm(sb_net *n);

/* Answers query q (msg, len bytes) of run r; lk says where the answer
 * goes (and is the run's, freed by answer()). */
static void query(struct lookup *lk, const uint8_t *msg, size_t len)
{
	struct net_run *r = lk->r;
	const struct sb_dns_query *q = &lk->q;
	size_t keep = 12 + q->question_len;

	net_busy(r);
	memcpy(lk->msg, msg, keep < sizeof lk->msg ? keep : sizeof lk->msg);
	lk->max = lk->conn	       ? 65535
		  : !q->edns	       ? 512
		  : q->udp_size > 1232 ? 1232
				       : q->udp_size;
	if (q->qclass != 1) { /* IN */
		answer(lk, SB_DNS_REFUSED, NULL, 0);
		return;
	}
	if (!net_name_granted(r, q->name, 0, 0) && !net_name_granted(r, q->name, 1, 0)) {
		net_agg_add(r, SB_NET_DENIED, r->iface.host4, 53, "dns", q->name,
			    "name not granted", NULL, 1);
		answer(lk, SB_DNS_NXDOMAIN, NULL, 0);
		return;
	}
	if ((q->qtype != SB_DNS_A && q->qtype != SB_DNS_AAAA) ||
	    (q->qtype == SB_DNS_AAAA && !r->iface.host6[0])) {
		answer(lk, SB_DNS_NOERROR, NULL, 0); /* nothing is forwarded */
		return;
	}
	if (r->busy > NET_DNS_PENDING) {
		answer(lk, SB_DNS_SERVFAIL, NULL, 0);
		return;
	}
	if (cache_answer(lk))
		return;
	lk->family = q->qtype == SB_DNS_A ? 4 : 6;
	ares_query(r->n->ares, q->name, 1, q->qtype, on_resolved, lk);
	ares_rearm(r->n);
}

/* Parses a query of r and looks it up; lk is filled but for q. */
static void query_in(struct lookup *lk, const uint8_t *msg, size_t len)
{
	struct net_run *r = lk->r;
	uint8_t buf[64];
	uint16_t id;
	size_t n;

	if (!sb_bucket_take(&r->dns_bucket, sb_loop_now(r->n->loop))) {
		net_agg_add(r, SB_NET_DENIED, r->iface.host4, 53, "dns", NULL,
			    "too many queries (rate limited)", NULL, 1);
		if (lk->conn)
			conn_unwait(lk->conn, 0);
		free(lk);
		return;
	}
	if (sb_dns_parse_query(msg, len, &lk->q) == SB_OK) {
		query(lk, msg, len);
		return;
	}
	net_agg_add(r, SB_NET_DENIED, r->iface.host4, 53, "dns", NULL, "malformed query",
		    NULL, 1);
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
	struct net_fd *f = ctx;
	struct net_run *r = f->r;
	uint8_t msg[4096];

	for (int i = 0; i < UDP_PER_WAKE; i++) {
		struct lookup *lk = calloc(1, sizeof *lk);
		ssize_t k;
		if (!lk)
			return;
		lk->r = r;
		lk->fd = r->fds[f->i];
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
	struct net_run *r = c->r;
	struct stub_conn **p;

	if (c->closed)
		return;
	for (p = &r->dns_conns; *p && *p != c; p = &(*p)->next)
		;
	if (*p) {
		*p = c->next;
		r->ndns_conns--;
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
		lk->r = c->r;
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
		c->idle = sb_loop_timer(c->r->n->loop, TCP_IDLE_S, 0, on_conn_idle, c);
		conn_more(c);
	}
}

static void on_accept(void *ctx, int revents)
{
	struct net_fd *f = ctx;
	struct net_run *r = f->r;
	struct stub_conn *c;
	int fd = accept4(r->fds[f->i], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

	if (fd < 0)
		return;
	if (r->ndns_conns >= NET_DNS_TCP_MAX || !(c = calloc(1, sizeof *c))) {
		close(fd);
		return;
	}
	c->r = r;
	c->fd = fd;
	c->w = sb_loop_io(r->n->loop, fd, SB_READ, on_conn, c);
	c->idle = sb_loop_timer(r->n->loop, TCP_IDLE_S, 0, on_conn_idle, c);
	c->next = r->dns_conns;
	r->dns_conns = c;
	r->ndns_conns++;
	if (!c->w || !c->idle)
		conn_close(c);
}

int stub_start(struct net_run *r)
{
	int rc = net_fds_watch(r, 0, 2, on_udp);

	return rc ? rc : net_fds_watch(r, 2, 4, on_accept);
}

void stub_stop(struct net_run *r)
{
	net_fds_unwatch(r, 0, 4);
	while (r->dns_conns)
		conn_close(r->dns_conns);
}

/* --- the resolver: c-ares driven by the enforcer's loop --- */

static pthread_once_t ares_once = PTHREAD_ONCE_INIT;
static int ares_lib_rc;

static void ares_lib(void)
{
	ares_lib_rc = ares_library_init(ARES_LIB_INIT_ALL);
}

static void on_ares_timer(void *ctx)
{
	sb_net *n = ctx;

	sb_watch_stop(n->ares_timer);
	n->ares_timer = NULL;
	ares_process_fd(n->ares, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
	ares_rearm(n);
}

/* Arms the timer of the resolver's next timeout. */
static void ares_rearm(sb_net *n)
{
	struct timeval tv, *t = ares_timeout(n->ares, NULL, &tv);

	sb_watch_stop(n->ares_timer);
	n->ares_timer = t ? sb_loop_timer(n->loop, (double)t->tv_sec + t->tv_usec / 1e6,
					  0, on_ares_timer, n)
			  : NULL;
}

static void on_ares_io(void *ctx, int revents)
{
	struct ares_watch *a = ctx;
	sb_net *n = a->n;
	int fd = a->fd;

	ares_process_fd(n->ares, revents & SB_READ ? fd : ARES_SOCKET_BAD,
			revents & SB_WRITE ? fd : ARES_SOCKET_BAD);
	ares_rearm(n);
}

/* c-ares says which of its sockets it waits on. */
static void on_ares_sock(void *data, ares_socket_t fd, int readable, int writable)
{
	sb_net *n = data;
	int ev = (readable ? SB_READ : 0) | (writable ? SB_WRITE : 0);
	struct ares_watch *a = NULL, *free_slot = NULL;

	for (size_t i = 0; i < sizeof n->aw / sizeof n->aw[0]; i++) {
		if (n->aw[i].w && n->aw[i].fd == fd)
			a = &n->aw[i];
		else if (!n->aw[i].w && !free_slot)
			free_slot = &n->aw[i];
	}
	if (a && !ev) {
		sb_watch_stop(a->w);
		a->w = NULL;
	} else if (a) {
		sb_watch_io_set(a->w, ev);
	} else if (ev && free_slot) {
		free_slot->n = n;
		free_slot->fd = fd;
		free_slot->w = sb_loop_io(n->loop, fd, ev, on_ares_io, free_slot);
	}
}

int ares_begin(sb_net *n)
{
	struct ares_options o = {0};
	int rc;

	pthread_once(&ares_once, ares_lib);
	if (ares_lib_rc != ARES_SUCCESS)
		return sb_seterr(SB_ERR_UNAVAIL, "c-ares: %s",
				 ares_strerror(ares_lib_rc));
	o.sock_state_cb = on_ares_sock;
	o.sock_state_cb_data = n;
	o.timeout = 2000;
	o.tries = 2;
	o.flags = ARES_FLAG_NOSEARCH;
	rc = ares_init_options(&n->ares, &o,
			       ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS |
				   ARES_OPT_TRIES | ARES_OPT_FLAGS);
	if (rc != ARES_SUCCESS)
		return sb_seterr(SB_ERR_UNAVAIL, "c-ares: %s", ares_strerror(rc));
	if (n->c.resolver[0] &&
	    (rc = ares_set_servers_ports_csv(n->ares, n->c.resolver)) != ARES_SUCCESS)
		return sb_seterr(SB_ERR_INVAL, "net.resolver: %s: %s", n->c.resolver,
				 ares_strerror(rc));
	return SB_OK;
}

void ares_end(sb_net *n)
{
	if (!n->ares)
		return;
	ares_destroy(n->ares); /* lookups under way end (their runs ended first) */
	n->ares = NULL;
	sb_watch_stop(n->ares_timer);
	n->ares_timer = NULL;
	for (size_t i = 0; i < sizeof n->aw / sizeof n->aw[0]; i++) {
		sb_watch_stop(n->aw[i].w);
		n->aw[i].w = NULL;
	}
}
