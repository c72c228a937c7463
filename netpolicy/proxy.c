/* proxy.c - a run's proxy: the TLS and HTTP connections of its hostname
 * grants, checked by name before they go through.
 *
 * nftables redirects a guest's TCP connection to a granted name's address
 * on an HTTP port (SB_NFT_PROXY_PORTS; TLS on them is read too) here; the
 * TLS ports go to the judge (judged.c). The proxy reads what the
 * guest sends first (netpolicy/sniff.h: a TLS ClientHello's server name,
 * each HTTP request's Host), lets it through only when a grant of the run
 * names that host for that port, connects to the address the guest asked
 * for and passes bytes both ways. A connection that names another host,
 * none, or speaks neither TLS nor HTTP is closed and reported; nothing of
 * it reaches the server.
 *
 * Each direction's bytes are copied through a buffer while they must be
 * looked at (the guest's until its stream is opaque, the server's first
 * few) and spliced through a pipe after that, not copied to user space.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6/ip6_tables.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/error.h"
#include "netpolicy/netrun.h"
#include "netpolicy/sniff.h"

#define BUF_CAP	 (64 * 1024)   /* bytes copied in flight each way */
#define PIPE_CAP (1024 * 1024) /* bytes spliced in flight each way (asked) */

/* One direction's bytes in flight: those copied through buf, then those
 * spliced through pipe. A flow splices once it may (the caller says) and
 * buf is empty; nothing is copied into buf after that, so buf's bytes
 * always go out before the pipe's. */
struct flow {
	uint8_t buf[BUF_CAP];
	size_t n;	/* bytes in buf */
	int pipe[2];	/* read end, write end; -1: none (yet, or to be had) */
	size_t npipe;	/* bytes in the pipe */
	size_t pipecap; /* the pipe's size */
	int full;	/* the pipe took no more though npipe < pipecap (its
			 * slots, one a packet at least, are taken): no
			 * room until some of it went out */
};

struct proxy_conn {
	struct net_run *r;
	int cfd, sfd; /* the guest's end, the server's (-1: not yet) */
	int family;
	struct sockaddr_storage dst;
	socklen_t dstlen;
	char dsttext[INET6_ADDRSTRLEN];
	uint16_t port;
	struct sb_sniff sn;
	uint8_t hold[SB_SNIFF_HOLD]; /* the guest's bytes not judged yet */
	size_t nhold;
	int opaque;	   /* nothing more to judge: bytes go straight through */
	int tls;	   /* the stream is TLS (else HTTP) */
	unsigned requests; /* HTTP requests let through */
	int await101;	   /* an HTTP Upgrade was sent: the server says if it took it */
	int declined;	   /* ... and it did not: the guest may send nothing more */
	uint8_t first[12]; /* the server's first bytes */
	size_t nfirst;
	char name[SB_NET_HOST_MAX]; /* the last name let through */
	struct flow cs, sc;	    /* to the server, to the guest */
	int connected;
	int c_eof, s_eof; /* each side said it sends no more */
	sb_watch *cw, *sw, *head_w;
	struct proxy_conn *next;
};

static void flow_init(struct flow *f)
{
	f->pipe[0] = f->pipe[1] = -1;
}

static void flow_close(struct flow *f)
{
	if (f->pipe[0] >= 0) {
		close(f->pipe[0]);
		close(f->pipe[1]);
	}
}

static size_t flow_pending(const struct flow *f)
{
	return f->n + f->npipe;
}

/* 1 when what comes next goes to the pipe. */
static int flow_spliced(const struct flow *f)
{
	return f->pipe[0] >= 0 && !f->n;
}

/* 1 when there is room for what comes next. */
static int flow_room(const struct flow *f)
{
	return flow_spliced(f) ? f->npipe < f->pipecap && !f->full : f->n < BUF_CAP;
}

/* Reads at most max bytes of what fd has into f: spliced when may_splice
 * and buf is empty (a pipe is made then; without one, buf goes on).
 * recv(2)'s results. */
static ssize_t flow_fill(struct flow *f, int fd, int may_splice, uint64_t max)
{
	size_t room;
	ssize_t k;

	if (may_splice && !f->n && f->pipe[0] < 0 &&
	    pipe2(f->pipe, O_NONBLOCK | O_CLOEXEC) == 0) {
		int sz = fcntl(f->pipe[1], F_SETPIPE_SZ, PIPE_CAP);
		if (sz < 0)
			sz = fcntl(f->pipe[1], F_GETPIPE_SZ);
		if (sz > 0) {
			f->pipecap = (size_t)sz;
		} else {
			flow_close(f);
			flow_init(f);
		}
	}
	if (!flow_room(f)) {
		errno = EAGAIN;
		return -1;
	}
	room = flow_spliced(f) ? f->pipecap - f->npipe : BUF_CAP - f->n;
	if (room > max)
		room = (size_t)max;
	if (flow_spliced(f)) {
		k = splice(fd, NULL, f->pipe[1], NULL, room,
			   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (k > 0)
			f->npipe += (size_t)k;
		else if (k < 0 && errno == EAGAIN && f->npipe)
			f->full = 1; /* (or fd had nothing: it waits all the same) */
		return k;
	}
	k = recv(fd, f->buf + f->n, room, MSG_DONTWAIT);
	if (k > 0)
		f->n += (size_t)k;
	return k;
}

/* Sends what f holds to fd, as much as fd takes now. The bytes sent, or
 * -1 on an error of fd other than EAGAIN. */
static ssize_t flow_drain(struct flow *f, int fd)
{
	ssize_t k, sent = 0;

	if (f->n) {
		k = send(fd, f->buf, f->n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -1;
		memmove(f->buf, f->buf + k, f->n - (size_t)k);
		f->n -= (size_t)k;
		sent = k;
	}
	if (!f->n && f->npipe) {
		/* SIGPIPE is the daemon's to ignore: splice has no MSG_NOSIGNAL */
		k = splice(f->pipe[0], NULL, fd, NULL, f->npipe,
			   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (k < 0)
			return errno == EAGAIN || errno == EINTR ? sent : -1;
		f->npipe -= (size_t)k;
		f->full = f->full && !k;
		sent += k;
	}
	return sent;
}

static void conn_free(struct proxy_conn *c)
{
	struct net_run *r = c->r;
	struct proxy_conn **p;

	for (p = &r->proxies; *p && *p != c; p = &(*p)->next)
		;
	if (*p) {
		*p = c->next;
		r->nproxies--;
	}
	sb_watch_stop(c->cw);
	sb_watch_stop(c->sw);
	sb_watch_stop(c->head_w);
	close(c->cfd);
	if (c->sfd >= 0)
		close(c->sfd);
	flow_close(&c->cs);
	flow_close(&c->sc);
	free(c);
}

/* Reports c's refusal and closes it. */
static void deny(struct proxy_conn *c, const char *name, const char *reason)
{
	net_agg_add(c->r, SB_NET_DENIED, c->dsttext, c->port, "tcp", name, reason, NULL,
		    1);
	conn_free(c);
}

/* 1 when what the guest sends goes straight to the server's flow: all
 * of it once the stream is opaque, else a request body's bytes (only the
 * parser's count of them) once none are held. */
static int direct(const struct proxy_conn *c)
{
	return !c->nhold && (c->opaque || (c->sfd >= 0 && sb_sniff_unread(&c->sn)));
}

/* 1 when the server's flow takes n held bytes now: after what waits in
 * its pipe, never before. */
static int takes(const struct proxy_conn *c, size_t n)
{
	return !c->cs.npipe && BUF_CAP - c->cs.n >= n;
}

/* 1 when the server's bytes need no more looking at. */
static int server_seen(const struct proxy_conn *c)
{
	return c->nfirst == sizeof c->first;
}

/* Sets the events each side waits for, from what the flows hold. */
static void arm(struct proxy_conn *c)
{
	int ce = 0, se = 0;

	/* read the guest while there is room for what it sends (held bytes
	 * go first, so straight to the server only once none are held) */
	if (!c->c_eof && (direct(c) ? flow_room(&c->cs) : c->nhold < sizeof c->hold))
		ce |= SB_READ;
	if (flow_pending(&c->sc))
		ce |= SB_WRITE;
	if (c->sfd >= 0) {
		if (!c->connected)
			se = SB_WRITE;
		else
			se = (flow_pending(&c->cs) ? SB_WRITE : 0) |
			     (!c->s_eof && flow_room(&c->sc) ? SB_READ : 0);
	}
	sb_watch_io_set(c->cw, ce);
	if (c->sw)
		sb_watch_io_set(c->sw, se);
}

static void on_server(void *ctx, int revents);

/* Connects to where the guest meant to go. */
static int server_open(struct proxy_conn *c)
{
	c->sfd = socket(c->family == 4 ? AF_INET : AF_INET6,
			SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->sfd < 0)
		return -1;
	if (connect(c->sfd, (struct sockaddr *)&c->dst, c->dstlen) &&
	    errno != EINPROGRESS)
		return -1;
	c->sw = sb_loop_io(c->r->n->loop, c->sfd, SB_WRITE, on_server, c);
	return c->sw ? 0 : -1;
}

/* Moves n judged bytes from hold to the server's buffer, which takes all
 * of hold (judge feeds the parser only then). */
static void hold_pass(struct proxy_conn *c, size_t n)
{
	memcpy(c->cs.buf + c->cs.n, c->hold, n);
	c->cs.n += n;
	memmove(c->hold, c->hold + n, c->nhold - n);
	c->nhold -= n;
}

static int upgrade_answered(struct proxy_conn *c);

/* Judges what the guest sent so far. Returns -1 when c was closed. */
static int judge(struct proxy_conn *c)
{
	char name[SB_NET_HOST_MAX];
	size_t pass;

	if (c->declined && c->nhold) {
		deny(c, c->name, "a request after a declined Upgrade");
		return -1;
	}
	if (!c->requests && c->nhold && !c->opaque)
		c->tls = c->hold[0] == 0x16;
	if (c->opaque && c->nhold && takes(c, c->nhold))
		hold_pass(c, c->nhold); /* what waited for the server's 101 */
	/* the parser goes on only when whatever it passes fits: a verdict is
	 * acted on at once, never fed again */
	while (c->nhold && !c->opaque && !c->await101 && takes(c, c->nhold)) {
		int rc =
		    sb_sniff_feed(&c->sn, c->hold, c->nhold, &pass, name, sizeof name);
		switch (rc) {
		case SB_SNIFF_MORE:
			if (c->c_eof) { /* what is held never becomes a request */
				deny(c, c->name, "closed before it named its host");
				return -1;
			}
			return 0;
		case SB_SNIFF_PASS: hold_pass(c, pass); break;
		case SB_SNIFF_NAME:
			if (!name[0]) {
				deny(
				    c, "",
				    "names no host (TLS without SNI, HTTP without Host)");
				return -1;
			}
			if (!net_name_granted(c->r, name, 0, c->port)) {
				deny(c, name, "name not granted");
				return -1;
			}
			snprintf(c->name, sizeof c->name, "%s", name);
			sb_watch_stop(c->head_w);
			c->head_w = NULL;
			if (c->sfd < 0 && server_open(c)) {
				deny(c, name, "the server cannot be reached");
				return -1;
			}
			hold_pass(c, pass);
			c->requests++;
			break;
		case SB_SNIFF_OPAQUE:
			/* TLS after its ClientHello; HTTP after an Upgrade, which is
			 * opaque only once the server took it (101): meanwhile the
			 * guest's bytes wait, and only a connection's first request
			 * may ask, so the server's first answer is that one's */
			if (!c->tls) {
				if (c->requests != 1) {
					deny(c, c->name,
					     "an Upgrade after other requests on its "
					     "connection");
					return -1;
				}
				c->await101 = 1;
				/* the answer may be in already */
				return upgrade_answered(c) ? -1 : 0;
			}
			hold_pass(c, c->nhold);
			c->opaque = 1;
			break;
		default:
			deny(c, c->name[0] ? c->name : "", sb_errmsg(SB_SNIFF_BAD));
			return -1;
		}
	}
	return 0;
}

/* Moves what each side holds on to the other, as far as the other takes
 * it now, and ends each direction whose sender ended once it is through.
 * Returns -1 when c was closed. */
static int pump(struct proxy_conn *c)
{
	ssize_t k;

	if (c->connected && flow_pending(&c->cs)) {
		if ((k = flow_drain(&c->cs, c->sfd)) < 0) {
			conn_free(c);
			return -1;
		}
		if (k > 0 && judge(c)) /* room again for what waited */
			return -1;
	}
	if (c->connected && c->c_eof && !flow_pending(&c->cs) && !c->nhold)
		shutdown(c->sfd, SHUT_WR);
	if (flow_pending(&c->sc) && flow_drain(&c->sc, c->cfd) < 0) {
		conn_free(c);
		return -1;
	}
	if (c->s_eof && !flow_pending(&c->sc))
		shutdown(c->cfd, SHUT_WR);
	return 0;
}

/* Both sides are done: the connection ends. Else waits for what each
 * side can do next. */
static void settle(struct proxy_conn *c)
{
	if (c->c_eof && c->s_eof && !flow_pending(&c->cs) && !flow_pending(&c->sc) &&
	    !c->nhold)
		conn_free(c);
	else
		arm(c);
}

static void on_client(void *ctx, int revents)
{
	struct proxy_conn *c = ctx;
	ssize_t k;

	if (revents & SB_READ) {
		int straight = direct(c);
		if (straight) {
			uint64_t body = c->opaque ? UINT64_MAX : sb_sniff_unread(&c->sn);
			if ((k = flow_fill(&c->cs, c->cfd, 1, body)) > 0 && !c->opaque)
				sb_sniff_skip(&c->sn, (uint64_t)k);
		} else {
			size_t room = sizeof c->hold - c->nhold;
			k = room ? recv(c->cfd, c->hold + c->nhold, room, MSG_DONTWAIT)
				 : -1;
			if (k < 0 && !room)
				errno = EAGAIN;
			if (k > 0)
				c->nhold += (size_t)k;
		}
		if (k == 0) {
			/* what it holds is still judged, as room is made for it */
			c->c_eof = 1;
			if (c->nhold && judge(c))
				return;
		} else if (k < 0 && errno != EAGAIN && errno != EINTR) {
			conn_free(c);
			return;
		} else if (k > 0 && !straight && judge(c)) {
			return;
		}
	}
	if (c->c_eof && c->sfd < 0) { /* nothing was let through */
		conn_free(c);
		return;
	}
	if (!pump(c))
		settle(c);
}

/* The server's first answer to an Upgrade is in: 101 makes the stream
 * opaque, anything else ends the guest's requests. Returns 1 when c was
 * closed. */
static int upgrade_answered(struct proxy_conn *c)
{
	if (!server_seen(c) && !c->s_eof)
		return 0;
	c->await101 = 0; /* a server that ended without answering declined */
	if (server_seen(c) && (!memcmp(c->first, "HTTP/1.1 101", 12) ||
			       !memcmp(c->first, "HTTP/1.0 101", 12))) {
		c->opaque = 1;
		return judge(c) < 0; /* what waited goes on as the buffer allows */
	}
	c->declined = 1;
	return judge(c) < 0;
}

static void on_server(void *ctx, int revents)
{
	struct proxy_conn *c = ctx;
	ssize_t k;

	if (!c->connected) {
		int err = 0;
		socklen_t len = sizeof err;
		getsockopt(c->sfd, SOL_SOCKET, SO_ERROR, &err, &len);
		if (err) {
			deny(c, c->name, "the server cannot be reached");
			return;
		}
		c->connected = 1;
	}
	if (revents & SB_READ) {
		size_t before = c->sc.n;
		int seen = server_seen(c);
		k = flow_fill(&c->sc, c->sfd, seen, UINT64_MAX);
		if (k == 0) {
			c->s_eof = 1;
			if (c->await101 && upgrade_answered(c))
				return;
		} else if (k < 0 && errno != EAGAIN && errno != EINTR) {
			conn_free(c);
			return;
		} else if (k > 0 && !seen) { /* copied, not spliced */
			size_t take = sizeof c->first - c->nfirst;
			if (take > (size_t)k)
				take = (size_t)k;
			memcpy(c->first + c->nfirst, c->sc.buf + before, take);
			c->nfirst += take;
			if (c->await101 && upgrade_answered(c))
				return;
		}
	}
	if (!pump(c))
		settle(c);
}

static void on_head_timeout(void *ctx)
{
	struct proxy_conn *c = ctx;

	deny(c, "", "named no host in time"); /* stops its own timer */
}

/* The address the guest connected to, before nftables redirected it. */
static int original_dst(struct proxy_conn *c, int v6)
{
	c->dstlen = sizeof c->dst;
	if (v6 ? getsockopt(c->cfd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &c->dst, &c->dstlen)
	       : getsockopt(c->cfd, SOL_IP, SO_ORIGINAL_DST, &c->dst, &c->dstlen))
		return -1;
	c->family = v6 ? 6 : 4;
	if (v6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)&c->dst;
		inet_ntop(AF_INET6, &s->sin6_addr, c->dsttext, sizeof c->dsttext);
		c->port = ntohs(s->sin6_port);
	} else {
		struct sockaddr_in *s = (struct sockaddr_in *)&c->dst;
		inet_ntop(AF_INET, &s->sin_addr, c->dsttext, sizeof c->dsttext);
		c->port = ntohs(s->sin_port);
	}
	return 0;
}

static void on_accept(void *ctx, int revents)
{
	struct net_fd *f = ctx;
	struct net_run *r = f->r;
	struct proxy_conn *c;
	int fd = accept4(r->fds[f->i], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	const char *own;

	if (fd < 0)
		return;
	if (!(c = calloc(1, sizeof *c))) {
		close(fd);
		return;
	}
	c->r = r;
	c->cfd = fd;
	c->sfd = -1;
	flow_init(&c->cs);
	flow_init(&c->sc);
	sb_sniff_init(&c->sn);
	c->next = r->proxies;
	r->proxies = c;
	r->nproxies++;
	if (original_dst(c, f->i == 5)) {
		conn_free(c);
		return;
	}
	/* straight to the proxy's own address: nothing was redirected */
	own = f->i == 5 ? r->iface.host6 : r->iface.host4;
	if (!strcmp(c->dsttext, own)) {
		deny(c, "", "not a connection to a granted name");
		return;
	}
	/* never to the host itself (an address a name's answer gave) */
	if (net_addr_local(
		c->family,
		c->family == 4
		    ? (const uint8_t *)&((struct sockaddr_in *)&c->dst)->sin_addr
		    : (const uint8_t *)&((struct sockaddr_in6 *)&c->dst)->sin6_addr)) {
		deny(c, "", "a connection to the host itself");
		return;
	}
	if (r->nproxies > NET_PROXY_MAX) {
		deny(c, "", "too many connections");
		return;
	}
	c->cw = sb_loop_io(r->n->loop, fd, SB_READ, on_client, c);
	c->head_w = sb_loop_timer(r->n->loop, NET_HEAD_S, 0, on_head_timeout, c);
	if (!c->cw || !c->head_w)
		conn_free(c);
}

int proxy_start(struct net_run *r)
{
	return net_fds_watch(r, 4, 6, on_accept);
}

void proxy_stop(struct net_run *r)
{
	net_fds_unwatch(r, 4, 6);
	while (r->proxies)
		conn_free(r->proxies);
}

void proxy_recheck(struct net_run *r)
{
	struct proxy_conn *c = r->proxies, *next;

	for (; c; c = next) {
		next = c->next;
		if (c->name[0] && !net_name_granted(r, c->name, 0, c->port))
			deny(c, c->name, "its grant was removed");
	}
}
