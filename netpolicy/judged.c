/* judged.c - the TLS and HTTP connections of hostname grants, read by the
 * judge on the enforcer's loop (see judged.h).
 *
 * nftables queues the packets of a connection to a granted name's address
 * on a TLS port, both ways, while its conntrack mark says it is judged; on
 * an HTTP port, the guest's that carry data or flags, for as long as the
 * connection lasts, but for a long body's: the judge puts its sequence
 * numbers in the run's set b4/b6 (a bypass) and they go past. A TLS
 * connection let go is remembered (its key and name) so that after a
 * change of grants, which gives the run a new mark and so brings its
 * connections back here, it goes on only while its name is granted.
 */
#include "netpolicy/judged.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/error.h"
#include "netpolicy/judge.h"
#include "netpolicy/nfq.h"

#define HEAD_S	     10.0	  /* a judged connection names its host within this */
#define CONNS_MAX    64		  /* connections of a run the judge reads at once */
#define HELD_MAX     16		  /* packets of one it keeps waiting */
#define PASSED_MAX   1024	  /* connections of a run it let go, remembered */
#define QUEUE_LEN    16384	  /* packets the kernel holds for it: 16 runs' most */
#define BYPASS_MIN   (256 * 1024) /* a body this long goes past the judge */
#define BYPASS_SPAN  (1u << 30)	  /* ... this much of it at a time */
#define BYPASS_S     60		  /* its element's timeout */
#define HTTP_IDLE_S  900.0	  /* an HTTP connection silent this long is forgotten */
#define HTTP_CLOSE_S 60.0	  /* ... one whose guest closed it, after this */

/* A connection: the guest's end and the server's. */
struct conn_key {
	int family;
	uint8_t guest[16], server[16];
	uint16_t gport, sport;
};

struct bypass;

/* A connection being judged. */
struct conn {
	struct conn_key k;
	double since, last;	       /* its first packet, its last */
	double closed;		       /* the guest's FIN (0: none yet) */
	double held_since;	       /* the first of the packets held now */
	struct bypass *by;	       /* its body's bypass, if any */
	int nobypass;		       /* one could not be made: no more */
	uint32_t guest_next, srv_next; /* the next sequence number of each */
	int srv_seen;
	uint32_t held[HELD_MAX];
	size_t nheld;
	struct sb_judge j;
};

struct passed {
	struct conn_key k;
	char name[SB_NET_HOST_MAX];
};

/* The enforcer's queue. */
struct sb_judged {
	struct sb_judged_config c;
	sb_nfq *nfq;
	uint16_t num;	     /* its number */
	int raw4, raw6;	     /* raw sockets for resets (-1: none) */
	sb_watch *w;	     /* (loop) */
	struct sb_post watch_post; /* sb_judged_open's to the loop */
	sb_judged_run *runs; /* (loop) the runs being judged */
};

/* A run's connections. */
struct sb_judged_run {
	sb_judged *q; /* its queue */
	const struct sb_judged_ops *ops;
	void *ctx;
	char id[16];
	unsigned tap_index; /* its tap's ifindex */
	int has4, has6;	    /* its guest's addresses: */
	uint8_t guest4[4], guest6[16];
	struct conn *judging[CONNS_MAX]; /* its connections read now */
	size_t njudging;
	struct bypass *bypasses; /* the bodies that go past the judge */
	struct passed *passed;	 /* PASSED_MAX of those let go, a ring */
	size_t npassed, passed_next;
	sb_judged_run *next; /* its queue's runs */
};

/* A body's bypass: its element in the run's set b4/b6, from the job that
 * adds it to the one that takes it out (or its timeout). While it may be
 * there, its connection's judge is fenced (sb_judge_fence). */
struct bypass {
	struct sb_post post; /* its job's way back to the loop */
	struct bypass *next; /* the run's list */
	sb_judged_run *r;
	struct conn *c; /* NULL once the connection is forgotten */
	struct sb_nft_body b;
	uint32_t span;	/* bytes from b.first the element is for */
	double expires; /* its element is gone by then, whatever happened */
	int add, rc;	/* the job under way (1: add, 0: delete), its result */
	int busy;	/* a job is under way */
	int in;		/* the element is in the set */
	int unwanted;	/* take it out once it is in */
	int orphan;	/* its run's set is gone: free it once its job is done */
};

/* A packet read: its connection and its TCP segment. */
struct packet {
	struct conn_key k;
	struct sb_judge_seg s;
	const uint8_t *src, *dst, *tcp;
};

static int key_eq(const struct conn_key *a, const struct conn_key *b)
{
	return !memcmp(a, b, sizeof *a);
}

/* Reads an IPv4 or IPv6 packet holding a TCP segment (no IPv6 extension
 * headers). 0 when it is none. */
static int packet_read(const uint8_t *p, size_t n, struct packet *out)
{
	size_t ih, total, th;

	memset(out, 0, sizeof *out);
	if (n >= 20 && p[0] >> 4 == 4) {
		ih = (size_t)(p[0] & 15) * 4;
		total = (size_t)p[2] << 8 | p[3];
		if (ih < 20 || p[9] != 6 || (p[6] & 0x3f) || p[7])
			return 0; /* not TCP, or a fragment */
		out->k.family = 4;
		out->src = p + 12;
		out->dst = p + 16;
	} else if (n >= 40 && p[0] >> 4 == 6) {
		ih = 40;
		total = 40 + ((size_t)p[4] << 8 | p[5]);
		if (p[6] != 6)
			return 0;
		out->k.family = 6;
		out->src = p + 8;
		out->dst = p + 24;
	} else {
		return 0;
	}
	if (total > n || total < ih)
		total = n; /* a GSO packet's length field may not say */
	if (total < ih + 20 || (th = (size_t)(p[ih + 12] >> 4) * 4) < 20 ||
	    ih + th > total)
		return 0;
	out->tcp = p + ih;
	out->s.seq = (uint32_t)p[ih + 4] << 24 | (uint32_t)p[ih + 5] << 16 |
		     (uint32_t)p[ih + 6] << 8 | p[ih + 7];
	out->s.ack = (uint32_t)p[ih + 8] << 24 | (uint32_t)p[ih + 9] << 16 |
		     (uint32_t)p[ih + 10] << 8 | p[ih + 11];
	out->s.flags = p[ih + 13];
	out->s.data = p + ih + th;
	out->s.len = total - ih - th;
	return 1;
}

/* Fills in the key of pk as sent by the guest (1) or the server (0). */
static void key_fill(struct packet *pk, int from_guest)
{
	const uint8_t *tcp = pk->tcp;
	size_t alen = pk->k.family == 4 ? 4 : 16;
	uint16_t sp = (uint16_t)(tcp[0] << 8 | tcp[1]),
		 dp = (uint16_t)(tcp[2] << 8 | tcp[3]);

	memcpy(pk->k.guest, from_guest ? pk->src : pk->dst, alen);
	memcpy(pk->k.server, from_guest ? pk->dst : pk->src, alen);
	pk->k.gport = from_guest ? sp : dp;
	pk->k.sport = from_guest ? dp : sp;
	pk->s.from_guest = from_guest;
}

static int is_guest(const sb_judged_run *r, int family, const uint8_t *a)
{
	return family == 4 ? r->has4 && !memcmp(a, r->guest4, 4)
			   : r->has6 && !memcmp(a, r->guest6, 16);
}

/* A failed verdict needs nothing: the kernel drops the packet in time. */
static void verdict(sb_judged *q, uint32_t id, enum sb_nfq_verdict v, uint32_t mark)
{
	(void)sb_nfq_verdict(q->nfq, id, v, mark);
}

static void report(sb_judged_run *r, const struct conn_key *k, const char *name,
		   const char *why)
{
	char dst[INET6_ADDRSTRLEN];

	inet_ntop(k->family == 4 ? AF_INET : AF_INET6, k->server, dst, sizeof dst);
	r->ops->denied(r->ctx, dst, k->sport, "tcp", name, why);
}

/* 1 when name is granted to r on TCP port. */
static int granted(const sb_judged_run *r, const char *name, uint16_t port)
{
	return r->ops->granted(r->ctx, name, 0, port);
}

static void bypass_job(void *ctx);
static void bypass_free(struct bypass *by);

/* Starts by's job: adding its element (add 1) or taking it out. */
static void bypass_submit(struct bypass *by, int add)
{
	sb_judged_run *r = by->r;

	by->add = add;
	by->busy = 1;
	r->ops->hold(r->ctx);
	if (sb_work_submit(r->q->c.work, bypass_job, by)) {
		by->busy = 0;
		if (add)
			bypass_free(by); /* never in; else it goes at its timeout */
		r->ops->release(r->ctx);
	}
}

/* Frees by: its element is not in the set (any more). */
static void bypass_free(struct bypass *by)
{
	struct bypass **p = &by->r->bypasses;

	while (*p != by)
		p = &(*p)->next;
	*p = by->next;
	if (by->c) {
		sb_judge_fence(&by->c->j, 0);
		by->c->by = NULL;
	}
	free(by);
}

static void bypass_done(void *ctx)
{
	struct bypass *by = ctx;
	sb_judged_run *r = by->r;

	by->busy = 0;
	if (by->orphan) {
		bypass_free(by);
	} else if (by->add && by->rc == SB_OK) {
		by->in = 1;
		by->expires = sb_loop_now(r->q->c.loop) + BYPASS_S + 1;
		if (by->unwanted || !by->c)
			bypass_submit(by, 0);
	} else if (by->add || by->rc == SB_OK) {
		if (by->add && by->c)
			by->c->nobypass = 1; /* the judge reads it all */
		bypass_free(by);	     /* never in, or taken out */
	} /* else it goes at its timeout (sb_judged_run_sweep) */
	r->ops->release(r->ctx);
}

static void bypass_job(void *ctx)
{
	struct bypass *by = ctx;
	sb_judged *q = by->r->q;

	by->rc = sb_nft_body_set(q->c.nft, by->r->id, &by->b, by->add, BYPASS_S);
	sb_loop_post(q->c.loop, &by->post, bypass_done, by);
}

/* After c's guest segment went through: a long body the judge need not
 * read gets a bypass; one the judge read past loses it. */
static void bypass_check(sb_judged_run *r, struct conn *c)
{
	struct bypass *by = c->by;
	uint32_t seq;
	uint64_t len;

	if (by) {
		if (!by->unwanted &&
		    (uint32_t)(c->guest_next - by->b.first) >= by->span - 65536) {
			by->unwanted = 1;
			if (by->in && !by->busy)
				bypass_submit(by, 0);
		}
		return;
	}
	if (c->nobypass || !sb_judge_body(&c->j, &seq, &len) || len < BYPASS_MIN ||
	    !(by = calloc(1, sizeof *by)))
		return;
	by->r = r;
	by->c = c;
	by->b.family = c->k.family;
	memcpy(by->b.addr, c->k.server, sizeof by->b.addr);
	by->b.port = c->k.sport;
	by->b.gport = c->k.gport;
	by->span = len < BYPASS_SPAN ? (uint32_t)len : BYPASS_SPAN;
	by->b.first = seq;
	by->b.last = seq + by->span - 65536; /* a segment from it on ends past
					      * the span: the judge reads it */
	by->next = r->bypasses;
	r->bypasses = by;
	c->by = by;
	sb_judge_fence(&c->j, 1);
	bypass_submit(by, 1);
}

/* Forgets connection i: its waiting packets are dropped, its bypass taken
 * out. */
static void conn_free(sb_judged_run *r, size_t i)
{
	struct conn *c = r->judging[i];

	for (size_t h = 0; h < c->nheld; h++)
		verdict(r->q, c->held[h], SB_NFQ_DROP, 0);
	if (c->by) {
		c->by->c = NULL;
		if (c->by->in && !c->by->busy)
			bypass_submit(c->by, 0);
	}
	free(c);
	r->judging[i] = r->judging[--r->njudging];
}

static void rst_send(sb_judged *q, const struct conn *c, int to_server, uint32_t seq);

/* Refuses connection i: resets its guest (through packet id, segment s)
 * and, when s is the guest's, its server; reports why. */
static void kill_conn(sb_judged_run *r, size_t i, uint32_t id,
		      const struct sb_judge_seg *s, const char *why)
{
	struct conn *c = r->judging[i];

	report(r, &c->k, c->j.name, why); /* before anything may set sb_errmsg */
	if (s->from_guest)
		rst_send(r->q, c, 1, s->seq);
	verdict(r->q, id, SB_NFQ_REPEAT, SB_NFT_KILL);
	conn_free(r, i);
}

static void passed_add(sb_judged_run *r, const struct conn *c)
{
	struct passed *p = &r->passed[r->passed_next];

	p->k = c->k;
	snprintf(p->name, sizeof p->name, "%s", c->j.name);
	r->passed_next = (r->passed_next + 1) % PASSED_MAX;
	if (r->npassed < PASSED_MAX)
		r->npassed++;
}

/* A packet of no connection being judged: one let go before (the run's
 * grants changed since), or one the judge never saw. */
static void unknown(sb_judged_run *r, const struct packet *pk, uint32_t id)
{
	for (size_t i = 0; i < r->npassed; i++) {
		struct passed *p = &r->passed[i];
		if (!key_eq(&p->k, &pk->k))
			continue;
		if (granted(r, p->name, p->k.sport)) {
			verdict(r->q, id, SB_NFQ_REPEAT, SB_NFT_PASS);
			return;
		}
		report(r, &p->k, p->name, "its grant was removed");
		p->k.family = 0; /* forgotten */
		break;
	}
	verdict(r->q, id, SB_NFQ_REPEAT, SB_NFT_KILL);
}

/* Keeps the next sequence number of each end, for a reset (rst_send). */
static void seq_seen(struct conn *c, const struct sb_judge_seg *s)
{
	uint32_t next = s->seq + (uint32_t)s->len + !!(s->flags & SB_TCP_SYN) +
			!!(s->flags & SB_TCP_FIN);

	if (s->from_guest && (int32_t)(next - c->guest_next) > 0)
		c->guest_next = next;
	if (!s->from_guest && (!c->srv_seen || (int32_t)(next - c->srv_next) > 0)) {
		c->srv_next = next;
		c->srv_seen = 1;
	}
	/* HTTP: the server's segments are not seen; the guest's ACK says
	 * what it expects next */
	if (s->from_guest && c->j.http && (s->flags & SB_TCP_ACK) &&
	    (!c->srv_seen || (int32_t)(s->ack - c->srv_next) > 0)) {
		c->srv_next = s->ack;
		c->srv_seen = 1;
	}
}

/* The TCP checksum of seg (n bytes, its checksum field 0) from src to dst
 * (alen bytes each). */
static uint16_t tcp_sum(const uint8_t *src, const uint8_t *dst, size_t alen,
			const uint8_t *seg, size_t n)
{
	uint32_t sum = 6 + (uint32_t)n;

	for (size_t i = 0; i < alen; i += 2)
		sum += (uint32_t)(src[i] << 8 | src[i + 1]) +
		       (uint32_t)(dst[i] << 8 | dst[i + 1]);
	for (size_t i = 0; i + 1 < n; i += 2)
		sum += (uint32_t)(seg[i] << 8 | seg[i + 1]);
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

/* Sends an RST of c's connection: to its guest, as from the server, in
 * the sequence the guest expects (to_server 0), or to its server, as from
 * the guest, at sequence number seq (to_server 1; the kernel's NAT of the
 * connection applies to it). The guest's: nothing when the server's next
 * sequence number is not known (the guest's SYN then meets nothing: it
 * gives up itself). */
static void rst_send(sb_judged *q, const struct conn *c, int to_server, uint32_t seq)
{
	uint8_t pkt[60] = {0}, *t;
	size_t alen = c->k.family == 4 ? 4 : 16, ih = c->k.family == 4 ? 20 : 40;
	const uint8_t *src = to_server ? c->k.guest : c->k.server;
	const uint8_t *dst = to_server ? c->k.server : c->k.guest;
	uint16_t sport = to_server ? c->k.gport : c->k.sport;
	uint16_t dport = to_server ? c->k.sport : c->k.gport;
	uint32_t ack = to_server ? c->srv_next : c->guest_next;
	struct sockaddr_storage to = {0};
	int fd = c->k.family == 4 ? q->raw4 : q->raw6;
	uint16_t sum;

	if (!c->srv_seen || fd < 0)
		return;
	if (!to_server)
		seq = c->srv_next;
	if (c->k.family == 4) {
		struct sockaddr_in *a = (struct sockaddr_in *)&to;
		pkt[0] = 0x45;
		pkt[3] = 40;
		pkt[8] = 64;
		pkt[9] = 6;
		memcpy(pkt + 12, src, 4);
		memcpy(pkt + 16, dst, 4);
		a->sin_family = AF_INET;
		memcpy(&a->sin_addr, dst, 4);
	} else {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&to;
		pkt[0] = 0x60;
		pkt[5] = 20;
		pkt[6] = 6;
		pkt[7] = 64;
		memcpy(pkt + 8, src, 16);
		memcpy(pkt + 24, dst, 16);
		a->sin6_family = AF_INET6;
		memcpy(&a->sin6_addr, dst, 16);
	}
	t = pkt + ih;
	t[0] = (uint8_t)(sport >> 8);
	t[1] = (uint8_t)sport;
	t[2] = (uint8_t)(dport >> 8);
	t[3] = (uint8_t)dport;
	for (int i = 0; i < 4; i++) {
		t[4 + i] = (uint8_t)(seq >> (24 - 8 * i));
		t[8 + i] = (uint8_t)(ack >> (24 - 8 * i));
	}
	t[12] = 5 << 4;
	t[13] = SB_TCP_RST | SB_TCP_ACK;
	sum = tcp_sum(src, dst, alen, t, 20);
	t[16] = (uint8_t)(sum >> 8);
	t[17] = (uint8_t)sum;
	sendto(fd, pkt, ih + 20, 0, (struct sockaddr *)&to,
	       c->k.family == 4 ? sizeof(struct sockaddr_in)
				: sizeof(struct sockaddr_in6));
}

/* A new connection of r, from the guest's SYN pk: NULL when there is no
 * room (reported). */
static struct conn *conn_new(sb_judged_run *r, const struct packet *pk)
{
	struct conn *c;

	if (r->njudging == CONNS_MAX || !(c = malloc(sizeof *c))) {
		report(r, &pk->k, "", "too many connections");
		return NULL;
	}
	c->k = pk->k;
	c->since = c->last = sb_loop_now(r->q->c.loop);
	c->closed = c->held_since = 0;
	c->by = NULL;
	c->nobypass = 0;
	c->guest_next = pk->s.seq;
	c->srv_seen = 0;
	c->nheld = 0;
	sb_judge_init(&c->j, sb_nft_port_http(pk->k.sport));
	r->judging[r->njudging++] = c;
	return c;
}

/* Judges packet id of connection i (segment s); 1 when i is gone. */
static int judge_seg(sb_judged_run *r, size_t i, const struct sb_judge_seg *s,
		     uint32_t id)
{
	struct conn *c = r->judging[i];
	int rc = sb_judge_seg(&c->j, s);

	while (rc == SB_JUDGE_NAME) {
		if (!c->j.name[0]) {
			kill_conn(r, i, id, s,
				  "names no host (TLS without SNI, HTTP without Host)");
			return 1;
		}
		if (!granted(r, c->j.name, c->k.sport)) {
			kill_conn(r, i, id, s, "name not granted");
			return 1;
		}
		for (size_t h = 0; h < c->nheld; h++) /* all of granted names */
			verdict(r->q, c->held[h], SB_NFQ_ACCEPT, 0);
		c->nheld = 0;
		rc = sb_judge_allow(&c->j, s);
	}
	switch (rc) {
	case SB_JUDGE_ACCEPT:
		verdict(r->q, id, SB_NFQ_ACCEPT, 0);
		if (c->j.http && s->from_guest)
			bypass_check(r, c);
		break;
	case SB_JUDGE_DROP: verdict(r->q, id, SB_NFQ_DROP, 0); break;
	case SB_JUDGE_HOLD:
		if (c->nheld == HELD_MAX) {
			kill_conn(r, i, id, s,
				  c->j.http ? "its request head came in too many pieces"
					    : "its ClientHello came in too many pieces");
			return 1;
		}
		if (!c->nheld)
			c->held_since = sb_loop_now(r->q->c.loop);
		c->held[c->nheld++] = id;
		break;
	case SB_JUDGE_AWAIT: /* the server's answer comes here too */
		verdict(r->q, id, SB_NFQ_REPEAT, SB_NFT_BOTH);
		break;
	case SB_JUDGE_PASS:
		passed_add(r, c);
		verdict(r->q, id, SB_NFQ_REPEAT, SB_NFT_PASS);
		conn_free(r, i);
		return 1;
	default: kill_conn(r, i, id, s, sb_errmsg(rc)); return 1;
	}
	return 0;
}

static void judge_packet(sb_judged_run *r, const struct packet *pk, uint32_t id)
{
	struct conn *c;
	size_t i;

	for (i = 0; i < r->njudging; i++)
		if (key_eq(&r->judging[i]->k, &pk->k))
			break;
	if (i == r->njudging) {
		if (!pk->s.from_guest || (pk->s.flags & (SB_TCP_SYN | SB_TCP_ACK |
							 SB_TCP_RST)) != SB_TCP_SYN) {
			unknown(r, pk, id);
			return;
		}
		if (!conn_new(r, pk)) {
			verdict(r->q, id, SB_NFQ_REPEAT, SB_NFT_KILL);
			return;
		}
	}
	c = r->judging[i];
	c->last = sb_loop_now(r->q->c.loop);
	seq_seen(c, &pk->s);
	if (judge_seg(r, i, &pk->s, id) || !c->j.http || !pk->s.from_guest)
		return;
	if (pk->s.flags & SB_TCP_RST)
		conn_free(r, i); /* it ends here */
	else if ((pk->s.flags & SB_TCP_FIN) && !c->closed)
		c->closed = c->last;
}

static void on_packet(void *ctx, const struct sb_nfq_pkt *p)
{
	sb_judged *q = ctx;
	struct packet pk;
	sb_judged_run *r;

	if (!packet_read(p->data, p->len, &pk)) {
		verdict(q, p->id, SB_NFQ_DROP, 0);
		return;
	}
	/* the guest's, by the link it came in on; else the server's */
	for (r = q->runs; r; r = r->next) {
		if (p->indev && p->indev == r->tap_index &&
		    is_guest(r, pk.k.family, pk.src)) {
			key_fill(&pk, 1);
			break;
		}
		if (p->indev != r->tap_index && is_guest(r, pk.k.family, pk.dst)) {
			key_fill(&pk, 0);
			break;
		}
	}
	if (!r) {
		verdict(q, p->id, SB_NFQ_DROP, 0);
		return;
	}
	judge_packet(r, &pk, p->id);
}

static void on_queue(void *ctx, int revents)
{
	sb_judged *q = ctx;

	(void)revents;
	sb_nfq_read(q->nfq, on_packet, q); /* ENOBUFS: the kernel dropped some */
}

static void queue_watch(void *ctx)
{
	sb_judged *q = ctx;

	q->w = sb_loop_io(q->c.loop, sb_nfq_fd(q->nfq), SB_READ, on_queue, q);
	if (!q->w) /* nothing judged passes: the kernel drops what waits */
		fprintf(stderr, "sanboxd: network acl: out of memory: the judge's queue "
				"is not read\n");
}

int sb_judged_open(const struct sb_judged_config *c, sb_judged **out)
{
	sb_judged *q = calloc(1, sizeof *q);
	int rc;

	if (!q)
		return SB_ERR_NOMEM;
	q->c = *c;
	q->raw4 = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
	q->raw6 = socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
	if ((rc = sb_nfq_open(SB_NFQ_ENFORCER_FIRST, SB_NFQ_ENFORCER_COUNT, QUEUE_LEN,
			      &q->nfq, &q->num))) {
		rc = sb_seterr(SB_ERR_UNAVAIL, "network acl needs NFQUEUE: %s",
			       sb_errmsg(rc));
		goto fail;
	}
	sb_loop_post(c->loop, &q->watch_post, queue_watch, q);
	*out = q;
	return SB_OK;
fail:
	sb_judged_close(q);
	return rc;
}

uint16_t sb_judged_queue(const sb_judged *q)
{
	return q->num;
}

void sb_judged_close(sb_judged *q)
{
	if (!q)
		return;
	if (q->raw4 >= 0)
		close(q->raw4);
	if (q->raw6 >= 0)
		close(q->raw6);
	sb_watch_stop(q->w);
	sb_nfq_close(q->nfq);
	free(q);
}

int sb_judged_run_open(sb_judged *q, const struct sb_nft_run *nr,
		       const struct sb_judged_ops *ops, void *ctx, sb_judged_run **out)
{
	sb_judged_run *r = calloc(1, sizeof *r);

	if (!r || !(r->passed = calloc(PASSED_MAX, sizeof *r->passed))) {
		free(r);
		return SB_ERR_NOMEM;
	}
	r->q = q;
	r->ops = ops;
	r->ctx = ctx;
	snprintf(r->id, sizeof r->id, "%s", nr->id);
	r->tap_index = if_nametoindex(nr->tap);
	r->has4 = nr->guest4[0] && inet_pton(AF_INET, nr->guest4, r->guest4) == 1;
	r->has6 = nr->guest6[0] && inet_pton(AF_INET6, nr->guest6, r->guest6) == 1;
	r->next = q->runs;
	q->runs = r;
	*out = r;
	return SB_OK;
}

void sb_judged_run_stop(sb_judged_run *r)
{
	sb_judged_run **p = &r->q->runs;

	while (*p && *p != r)
		p = &(*p)->next;
	if (*p)
		*p = r->next;
	while (r->njudging)
		conn_free(r, 0);
	/* the run's set goes with it: a bypass with a job under way goes
	 * when the job is done */
	for (struct bypass *by = r->bypasses, *next; by; by = next) {
		next = by->next;
		by->orphan = 1;
		if (!by->busy)
			bypass_free(by);
	}
	r->npassed = 0;
}

void sb_judged_run_close(sb_judged_run *r)
{
	if (!r)
		return;
	free(r->passed);
	free(r);
}

void sb_judged_run_recheck(sb_judged_run *r)
{
	for (size_t i = 0; i < r->njudging;) {
		struct conn *c = r->judging[i];
		if ((c->j.state == SB_JUDGE_ALLOWED || (c->j.http && c->j.requests)) &&
		    !granted(r, c->j.name, c->k.sport)) {
			report(r, &c->k, c->j.name, "its grant was removed");
			conn_free(r, i);
		} else {
			i++;
		}
	}
}

/* 1 when connection c is to be given up on at now; why says if the guest
 * is to hear of it (a reset, a report) or not (NULL). */
static int expired(const struct conn *c, double now, const char **why)
{
	*why = NULL;
	if (!c->j.http) {
		if (now - c->since > HEAD_S && c->j.state != SB_JUDGE_ALLOWED) {
			*why = "named no server in time";
			return 1;
		}
		return now - c->since > 6 * HEAD_S; /* never acknowledged */
	}
	if ((!c->j.requests && now - c->since > HEAD_S) ||
	    (c->nheld && now - c->held_since > HEAD_S)) {
		*why = "named no host in time";
		return 1;
	}
	if (c->j.state == SB_JUDGE_ANSWER && now - c->last > 6 * HEAD_S) {
		*why = "its Upgrade was not answered in time";
		return 1;
	}
	return now - c->last > HTTP_IDLE_S ||
	       (c->closed && now - c->closed > HTTP_CLOSE_S);
}

void sb_judged_run_sweep(sb_judged_run *r, double now)
{
	const char *why;

	for (size_t i = 0; i < r->njudging;) {
		struct conn *c = r->judging[i];
		if (!expired(c, now, &why)) {
			i++;
			continue;
		}
		if (why) {
			report(r, &c->k, "", why);
			rst_send(r->q, c, 0, 0);
		}
		conn_free(r, i);
	}
	for (struct bypass *by = r->bypasses, *next; by; by = next) {
		next = by->next;
		if (by->in && !by->busy && now > by->expires)
			bypass_free(by); /* its element timed out */
	}
}
