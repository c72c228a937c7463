/* judged.c - the TLS connections of hostname grants, read by the judge
 * (judge.h) on the net loop.
 *
 * nftables queues (nft.h's chain judge) every packet of a connection to a
 * granted name's address on a TLS port, both ways, while its conntrack
 * mark says it is judged. One queue serves all runs of the enforcer: a
 * packet's run is the one whose tap it came in on (the guest's), or whose
 * guest it goes to (the server's). Each connection's verdicts come from
 * its judge; a connection let go is remembered (its key and name) so that
 * after a change of grants, which gives the run a new mark and so brings
 * its connections back here, it goes on only while its name is granted.
 */
#include <arpa/inet.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/error.h"
#include "netpolicy/judge.h"
#include "netpolicy/netrun.h"
#include "netpolicy/nfq.h"

#define QUEUE_LEN 16384 /* packets the kernel holds for it: 16 runs' most */

/* A connection: the guest's end and the server's. */
struct conn_key {
	int family;
	uint8_t guest[16], server[16];
	uint16_t gport, sport;
};

struct judged {
	struct conn_key k;
	double since;
	uint32_t guest_next, srv_next; /* the next sequence number of each */
	int srv_seen;
	uint32_t held[NET_JUDGE_HELD];
	size_t nheld;
	struct sb_judge j;
};

struct passed {
	struct conn_key k;
	char name[SB_NET_HOST_MAX];
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

static int is_guest(const struct net_run *r, int family, const uint8_t *a)
{
	return family == 4 ? r->has4 && !memcmp(a, r->guest4, 4)
			   : r->has6 && !memcmp(a, r->guest6, 16);
}

/* A failed verdict needs nothing: the kernel drops the packet in time. */
static void verdict(sb_net *n, uint32_t id, enum sb_nfq_verdict v, uint32_t mark)
{
	(void)sb_nfq_verdict(n->nfq, id, v, mark);
}

static void report(struct net_run *r, const struct conn_key *k, const char *name,
		   const char *why)
{
	char dst[INET6_ADDRSTRLEN];

	inet_ntop(k->family == 4 ? AF_INET : AF_INET6, k->server, dst, sizeof dst);
	net_agg_add(r, SB_NET_DENIED, dst, k->sport, "tcp", name, why, NULL, 1);
}

/* Forgets c: its waiting packets are dropped. */
static void judged_free(struct net_run *r, size_t i)
{
	struct judged *c = r->judging[i];

	for (size_t h = 0; h < c->nheld; h++)
		verdict(r->n, c->held[h], SB_NFQ_DROP, 0);
	free(c);
	r->judging[i] = r->judging[--r->njudging];
}

/* Refuses connection i (and resets it, through packet id); reports why. */
static void kill_conn(struct net_run *r, size_t i, uint32_t id, const char *why)
{
	struct judged *c = r->judging[i];

	report(r, &c->k, c->j.name, why); /* before anything may set sb_errmsg */
	verdict(r->n, id, SB_NFQ_REPEAT, SB_NFT_KILL);
	judged_free(r, i);
}

static void passed_add(struct net_run *r, const struct judged *c)
{
	struct passed *p = &r->passed[r->passed_next];

	p->k = c->k;
	snprintf(p->name, sizeof p->name, "%s", c->j.name);
	r->passed_next = (r->passed_next + 1) % NET_PASSED_MAX;
	if (r->npassed < NET_PASSED_MAX)
		r->npassed++;
}

/* A packet of no connection being judged: one let go before (the run's
 * grants changed since), or one the judge never saw. */
static void unknown(struct net_run *r, const struct packet *pk, uint32_t id)
{
	for (size_t i = 0; i < r->npassed; i++) {
		struct passed *p = &r->passed[i];
		if (!key_eq(&p->k, &pk->k))
			continue;
		if (net_name_granted(r, p->name, 0, p->k.sport)) {
			verdict(r->n, id, SB_NFQ_REPEAT, SB_NFT_PASS);
			return;
		}
		report(r, &p->k, p->name, "its grant was removed");
		p->k.family = 0; /* forgotten */
		break;
	}
	verdict(r->n, id, SB_NFQ_REPEAT, SB_NFT_KILL);
}

/* Keeps the next sequence number of each end, for a reset (rst_guest). */
static void seq_seen(struct judged *c, const struct sb_judge_seg *s)
{
	uint32_t next = s->seq + (uint32_t)s->len + !!(s->flags & SB_TCP_SYN) +
			!!(s->flags & SB_TCP_FIN);

	if (s->from_guest && (int32_t)(next - c->guest_next) > 0)
		c->guest_next = next;
	if (!s->from_guest && (!c->srv_seen || (int32_t)(next - c->srv_next) > 0)) {
		c->srv_next = next;
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

/* Sends the guest of c an RST from the server, in the sequence the guest
 * expects: a connection given up on before any packet of it came to be
 * refused. Nothing when the server never answered (the guest's SYN then
 * meets nothing: it gives up itself). */
static void rst_guest(sb_net *n, const struct judged *c)
{
	uint8_t pkt[60] = {0}, *t;
	size_t alen = c->k.family == 4 ? 4 : 16, ih = c->k.family == 4 ? 20 : 40;
	struct sockaddr_storage to = {0};
	int fd = c->k.family == 4 ? n->raw4 : n->raw6;
	uint16_t sum;

	if (!c->srv_seen || fd < 0)
		return;
	if (c->k.family == 4) {
		struct sockaddr_in *a = (struct sockaddr_in *)&to;
		pkt[0] = 0x45;
		pkt[3] = 40;
		pkt[8] = 64;
		pkt[9] = 6;
		memcpy(pkt + 12, c->k.server, 4);
		memcpy(pkt + 16, c->k.guest, 4);
		a->sin_family = AF_INET;
		memcpy(&a->sin_addr, c->k.guest, 4);
	} else {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&to;
		pkt[0] = 0x60;
		pkt[5] = 20;
		pkt[6] = 6;
		pkt[7] = 64;
		memcpy(pkt + 8, c->k.server, 16);
		memcpy(pkt + 24, c->k.guest, 16);
		a->sin6_family = AF_INET6;
		memcpy(&a->sin6_addr, c->k.guest, 16);
	}
	t = pkt + ih;
	t[0] = (uint8_t)(c->k.sport >> 8);
	t[1] = (uint8_t)c->k.sport;
	t[2] = (uint8_t)(c->k.gport >> 8);
	t[3] = (uint8_t)c->k.gport;
	for (int i = 0; i < 4; i++) {
		t[4 + i] = (uint8_t)(c->srv_next >> (24 - 8 * i));
		t[8 + i] = (uint8_t)(c->guest_next >> (24 - 8 * i));
	}
	t[12] = 5 << 4;
	t[13] = SB_TCP_RST | SB_TCP_ACK;
	sum = tcp_sum(c->k.server, c->k.guest, alen, t, 20);
	t[16] = (uint8_t)(sum >> 8);
	t[17] = (uint8_t)sum;
	sendto(fd, pkt, ih + 20, 0, (struct sockaddr *)&to,
	       c->k.family == 4 ? sizeof(struct sockaddr_in)
				: sizeof(struct sockaddr_in6));
}

static void judge_packet(struct net_run *r, const struct packet *pk, uint32_t id)
{
	struct judged *c = NULL;
	size_t i;
	int rc;

	for (i = 0; i < r->njudging; i++)
		if (key_eq(&r->judging[i]->k, &pk->k))
			break;
	if (i < r->njudging) {
		c = r->judging[i];
	} else {
		if (!pk->s.from_guest || (pk->s.flags & (SB_TCP_SYN | SB_TCP_ACK |
							 SB_TCP_RST)) != SB_TCP_SYN) {
			unknown(r, pk, id);
			return;
		}
		if (r->njudging == NET_JUDGE_MAX || !(c = malloc(sizeof *c))) {
			report(r, &pk->k, "", "too many connections");
			verdict(r->n, id, SB_NFQ_REPEAT, SB_NFT_KILL);
			return;
		}
		c->k = pk->k;
		c->since = sb_loop_now(r->n->loop);
		c->guest_next = pk->s.seq;
		c->srv_seen = 0;
		c->nheld = 0;
		sb_judge_init(&c->j);
		r->judging[r->njudging++] = c; /* at i */
	}
	seq_seen(c, &pk->s);
	switch ((rc = sb_judge_seg(&c->j, &pk->s))) {
	case SB_JUDGE_ACCEPT: verdict(r->n, id, SB_NFQ_ACCEPT, 0); break;
	case SB_JUDGE_DROP: verdict(r->n, id, SB_NFQ_DROP, 0); break;
	case SB_JUDGE_HOLD:
		if (c->nheld == NET_JUDGE_HELD) {
			kill_conn(r, i, id, "its ClientHello came in too many pieces");
			break;
		}
		c->held[c->nheld++] = id;
		break;
	case SB_JUDGE_NAME:
		if (!c->j.name[0]) {
			kill_conn(r, i, id,
				  "names no host (TLS without SNI, HTTP without Host)");
			break;
		}
		if (!net_name_granted(r, c->j.name, 0, c->k.sport)) {
			kill_conn(r, i, id, "name not granted");
			break;
		}
		sb_judge_allow(&c->j);
		for (size_t h = 0; h < c->nheld; h++)
			verdict(r->n, c->held[h], SB_NFQ_ACCEPT, 0);
		c->nheld = 0;
		verdict(r->n, id, SB_NFQ_ACCEPT, 0);
		break;
	case SB_JUDGE_PASS:
		passed_add(r, c);
		verdict(r->n, id, SB_NFQ_REPEAT, SB_NFT_PASS);
		judged_free(r, i);
		break;
	default: kill_conn(r, i, id, sb_errmsg(rc)); break;
	}
}

static void on_packet(void *ctx, const struct sb_nfq_pkt *p)
{
	sb_net *n = ctx;
	struct packet pk;
	struct net_run *r;

	if (!packet_read(p->data, p->len, &pk)) {
		verdict(n, p->id, SB_NFQ_DROP, 0);
		return;
	}
	/* the guest's, by the link it came in on; else the server's */
	for (r = n->runs; r; r = r->next) {
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
		verdict(n, p->id, SB_NFQ_DROP, 0);
		return;
	}
	judge_packet(r, &pk, p->id);
}

static void on_queue(void *ctx, int revents)
{
	sb_net *n = ctx;

	(void)revents;
	sb_nfq_read(n->nfq, on_packet, n); /* ENOBUFS: the kernel dropped some */
}

static void queue_watch(void *ctx)
{
	sb_net *n = ctx;

	n->nfq_w = sb_loop_io(n->loop, sb_nfq_fd(n->nfq), SB_READ, on_queue, n);
}

int judge_open(sb_net *n)
{
	int rc;

	if (!n->nfq) {
		if (n->raw4 < 0)
			n->raw4 = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
		if (n->raw6 < 0)
			n->raw6 = socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
		if ((rc = sb_nfq_open(SB_NFQ_ENFORCER_FIRST, SB_NFQ_ENFORCER_COUNT,
				      QUEUE_LEN, &n->nfq, &n->nfq_num)))
			return sb_seterr(SB_ERR_UNAVAIL, "network acl needs NFQUEUE: %s",
					 sb_errmsg(rc));
		if ((rc = sb_loop_post(n->loop, queue_watch, n))) {
			sb_nfq_close(n->nfq);
			n->nfq = NULL;
			return rc;
		}
	}
	/* again each time: the table may be new */
	return sb_nft_judge_set(n->nft, n->nfq_num);
}

void judge_close(sb_net *n)
{
	if (n->raw4 >= 0)
		close(n->raw4);
	if (n->raw6 >= 0)
		close(n->raw6);
	n->raw4 = n->raw6 = -1;
	sb_watch_stop(n->nfq_w);
	n->nfq_w = NULL;
	sb_nfq_close(n->nfq);
	n->nfq = NULL;
}

int judge_start(struct net_run *r)
{
	r->tap_index = if_nametoindex(r->nr.tap);
	r->has4 = r->nr.guest4[0] && inet_pton(AF_INET, r->nr.guest4, r->guest4) == 1;
	r->has6 = r->nr.guest6[0] && inet_pton(AF_INET6, r->nr.guest6, r->guest6) == 1;
	if (!(r->passed = calloc(NET_PASSED_MAX, sizeof *r->passed)))
		return SB_ERR_NOMEM;
	return SB_OK;
}

void judge_stop(struct net_run *r)
{
	while (r->njudging)
		judged_free(r, 0);
	free(r->passed);
	r->passed = NULL;
	r->npassed = 0;
}

void judge_recheck(struct net_run *r)
{
	for (size_t i = 0; i < r->njudging;) {
		struct judged *c = r->judging[i];
		if (c->j.state == SB_JUDGE_ALLOWED &&
		    !net_name_granted(r, c->j.name, 0, c->k.sport)) {
			report(r, &c->k, c->j.name, "its grant was removed");
			judged_free(r, i);
		} else {
			i++;
		}
	}
}

void judge_sweep(struct net_run *r, double now)
{
	for (size_t i = 0; i < r->njudging;) {
		struct judged *c = r->judging[i];
		if (now - c->since > NET_HEAD_S && c->j.state != SB_JUDGE_ALLOWED) {
			report(r, &c->k, "", "named no server in time");
			rst_guest(r->n, c);
			judged_free(r, i);
		} else if (now - c->since > 6 * NET_HEAD_S) {
			rst_guest(r->n, c); /* the server never acknowledged it */
			judged_free(r, i);
		} else {
			i++;
		}
	}
}
