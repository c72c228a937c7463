/* nft.c - the table inet sanbox through libnftables (see nft.h). */
#include "netpolicy/nft.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/expr.h>
#include <libnftnl/object.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/xt_NFQUEUE.h>
#include <net/if.h>
#include <nftables/libnftables.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "engine/error.h"

struct sb_nft {
	struct nft_ctx *ctx;
	pthread_mutex_t lock;
};

int sb_nft_open(sb_nft **out)
{
	sb_nft *n = calloc(1, sizeof *n);

	if (!n)
		return SB_ERR_NOMEM;
	if (!(n->ctx = nft_ctx_new(NFT_CTX_DEFAULT))) {
		free(n);
		return sb_seterr(SB_ERR_UNAVAIL, "libnftables: cannot make a context");
	}
	if (nft_ctx_buffer_output(n->ctx) || nft_ctx_buffer_error(n->ctx)) {
		nft_ctx_free(n->ctx);
		free(n);
		return SB_ERR_NOMEM;
	}
	pthread_mutex_init(&n->lock, NULL);
	*out = n;
	return SB_OK;
}

void sb_nft_close(sb_nft *n)
{
	if (!n)
		return;
	nft_ctx_free(n->ctx);
	pthread_mutex_destroy(&n->lock);
	free(n);
}

/* Runs script with JSON output on or off. */
static int nft_exec(sb_nft *n, const char *script, int json, char **out)
{
	const char *err, *text;
	int rc = SB_OK, failed;

	if (out)
		*out = NULL;
	pthread_mutex_lock(&n->lock);
	nft_ctx_output_set_flags(n->ctx, json ? NFT_CTX_OUTPUT_JSON : 0);
	failed = nft_run_cmd_from_buffer(n->ctx, script);
	/* fetching a buffer empties it: both are fetched every time */
	text = nft_ctx_get_output_buffer(n->ctx);
	err = nft_ctx_get_error_buffer(n->ctx);
	if (failed) {
		size_t len = strcspn(err, "\n");
		rc = sb_seterr(SB_ERR_IO, "nftables: %.*s", (int)(len > 300 ? 300 : len),
			       len ? err : "failed");
	} else if (out && !(*out = strdup(text))) {
		rc = SB_ERR_NOMEM;
	}
	pthread_mutex_unlock(&n->lock);
	return rc;
}

int sb_nft_run(sb_nft *n, const char *script, char **out)
{
	return nft_exec(n, script, 0, out);
}

/* A script being written: open_memstream underneath. */
struct script {
	FILE *f;
	char *buf;
	size_t len;
};

static int script_open(struct script *s)
{
	s->buf = NULL;
	s->f = open_memstream(&s->buf, &s->len);
	return s->f ? SB_OK : SB_ERR_NOMEM;
}

/* Ends s: *out gets the text (the caller frees it). */
static int script_close(struct script *s, char **out)
{
	int bad = ferror(s->f);

	if (fclose(s->f) || bad) {
		free(s->buf);
		return SB_ERR_NOMEM;
	}
	*out = s->buf;
	return SB_OK;
}

/* Makes the table's chain acks (again: a table an older daemon made may
 * have none): an HTTP guest's segments the judge need not read, with no
 * data and no flag but ACK, PSH, ECE, CWR (the IP header's length is its
 * TCP header's: no IPv4 options, no IPv6 extension headers). */
static int acks_set(sb_nft *n)
{
	struct script s;
	char *text;
	int rc;

	if ((rc = script_open(&s)))
		return rc;
	/* the constant sets the runs' rules name (an anonymous set in each
	 * rule would be a set of the table per rule) */
	fprintf(s.f,
		"add set inet sanbox l4 { type inet_proto; }\n"
		"add set inet sanbox tls { type inet_service; }\n"
		"add set inet sanbox http { type inet_service; }\n"
		"add set inet sanbox nd { type icmpv6_type; }\n"
		"add element inet sanbox l4 { tcp, udp }\n"
		"add element inet sanbox tls { " SB_NFT_TLS_PORTS " }\n"
		"add element inet sanbox http { " SB_NFT_HTTP_PORTS " }\n"
		"add element inet sanbox nd { nd-neighbor-solicit, nd-neighbor-advert, "
		"nd-router-solicit }\n");
	fprintf(s.f, "add chain inet sanbox acks\nflush chain inet sanbox acks\n");
	for (int doff = 5; doff <= 15; doff++)
		fprintf(
		    s.f,
		    "add rule inet sanbox acks meta nfproto ipv4 ip hdrlength 5 tcp "
		    "flags & (fin|syn|rst|urg) == 0 tcp doff %d ip length %d accept\n"
		    "add rule inet sanbox acks meta nfproto ipv6 ip6 nexthdr tcp tcp "
		    "flags & (fin|syn|rst|urg) == 0 tcp doff %d ip6 length %d accept\n",
		    doff, 20 + 4 * doff, doff, 4 * doff);
	if ((rc = script_close(&s, &text)))
		return rc;
	rc = nft_exec(n, text, 0, NULL);
	free(text);
	return rc;
}

int sb_nft_table_add(sb_nft *n, const struct sb_nft_host *h)
{
	struct script s;
	char *text;
	int rc;

	if ((rc = script_open(&s)))
		return rc;
	fprintf(s.f,
		"table inet sanbox {\n"
		" set taps { type ifname; }\n"
		" map runs_f { type ifname : verdict; }\n"
		" map runs_i { type ifname : verdict; }\n"
		" map runs_p { type ifname : verdict; }\n"
		" map runs_o { type ifname : verdict; }\n"
		/* what the judge reads goes to its queue (sb_nft_judge_set);
		 * nothing goes on while it has none */
		" chain judge { drop; }\n"
		/* a guest's DNS flows last seconds in conntrack, not 30 s: a
		 * flood of them from many ports fills no table */
		" ct timeout dns4 { protocol udp; l3proto ip; policy = { unreplied : 5, "
		"replied : 1 }; }\n"
		" ct timeout dns6 { protocol udp; l3proto ip6; policy = { unreplied : 5, "
		"replied : 1 }; }\n"
		" chain raw {\n"
		"  type filter hook prerouting priority raw; policy accept;\n"
		"  iifname @taps meta nfproto ipv4 udp dport 53 ct timeout set \"dns4\"\n"
		"  iifname @taps meta nfproto ipv6 udp dport 53 ct timeout set \"dns6\"\n"
		" }\n"
		" chain forward {\n"
		"  type filter hook forward priority filter; policy accept;\n"
		"  iifname vmap @runs_f\n"
		"  iifname @taps drop\n"
		"  oifname vmap @runs_o\n"
		"  oifname @taps drop\n"
		"%s"
		" }\n"
		" chain input {\n"
		"  type filter hook input priority filter; policy accept;\n"
		"  iifname vmap @runs_i\n"
		"  iifname @taps drop\n"
		"  iifname != \"lo\" ip daddr %s drop\n",
		h->fence ? "  drop\n" : "", h->subnet4);
	if (h->subnet6[0])
		fprintf(s.f, "  iifname != \"lo\" ip6 daddr %s drop\n", h->subnet6);
	fprintf(s.f,
		" }\n"
		" chain prerouting {\n"
		"  type nat hook prerouting priority dstnat; policy accept;\n"
		"  iifname vmap @runs_p\n"
		" }\n"
		" chain postrouting {\n"
		"  type nat hook postrouting priority srcnat; policy accept;\n"
		"  ip saddr %s oifname != @taps masquerade\n",
		h->subnet4);
	if (h->subnet6[0])
		fprintf(s.f, "  ip6 saddr %s oifname != @taps masquerade\n", h->subnet6);
	fprintf(s.f, " }\n}\n");
	if ((rc = script_close(&s, &text)))
		return rc;
	/* only when missing: an existing table holds the runs' map entries */
	rc = nft_exec(n, "list set inet sanbox taps", 0, NULL) == SB_OK
		 ? SB_OK
		 : nft_exec(n, text, 0, NULL);
	free(text);
	return rc ? rc : acks_set(n);
}

/* One transaction of netlink messages built with libnftnl: no listing
 * of the table before it, so its cost does not grow with the table. */
struct batch {
	char *buf;
	struct mnl_nlmsg_batch *b;
	uint32_t seq;
	unsigned msgs; /* messages between begin and end: each gets an ACK */
	int full;      /* a message did not fit */
};

/* Starts t with its begin message. Errors: SB_ERR_NOMEM. */
static int batch_open(struct batch *t)
{
	memset(t, 0, sizeof *t);
	/* twice the batch's size: the message that overflows it still fits */
	if (!(t->buf = malloc(2 * MNL_SOCKET_BUFFER_SIZE)) ||
	    !(t->b = mnl_nlmsg_batch_start(t->buf, MNL_SOCKET_BUFFER_SIZE))) {
		free(t->buf);
		return SB_ERR_NOMEM;
	}
	nftnl_batch_begin(mnl_nlmsg_batch_current(t->b), t->seq++);
	mnl_nlmsg_batch_next(t->b);
	return SB_OK;
}

static void batch_close(struct batch *t)
{
	mnl_nlmsg_batch_stop(t->b);
	free(t->buf);
}

/* The header of t's next message, of type, with an ACK asked for; the
 * caller builds its payload, then calls batch_next. */
static struct nlmsghdr *batch_hdr(struct batch *t, uint16_t type, uint16_t flags)
{
	t->msgs++;
	return nftnl_nlmsg_build_hdr(mnl_nlmsg_batch_current(t->b), type, NFPROTO_INET,
				     flags | NLM_F_ACK, t->seq++);
}

static void batch_next(struct batch *t)
{
	if (!mnl_nlmsg_batch_next(t->b))
		t->full = 1;
}

/* Appends to t a message of type for the rule r. */
static void batch_rule(struct batch *t, struct nftnl_rule *r, uint16_t type,
		       uint16_t flags)
{
	nftnl_rule_nlmsg_build_payload(batch_hdr(t, type, flags), r);
	batch_next(t);
}

/* Ends t and sends it as one transaction: 0 when the kernel applied all
 * of it, else the errno of its first refused message (EMSGSIZE: t did not
 * fit its buffer; ETIMEDOUT: no answer in 5 s). */
static int batch_commit(struct batch *t)
{
	struct mnl_socket *nl;
	char *ans = t->buf; /* the messages are sent: their buffer is free */
	int err = 0, len;
	ssize_t k;

	nftnl_batch_end(mnl_nlmsg_batch_current(t->b), t->seq++);
	batch_next(t);
	if (t->full)
		return EMSGSIZE;
	if (!(nl = mnl_socket_open(NETLINK_NETFILTER)))
		return errno;
	if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0 ||
	    mnl_socket_sendto(nl, mnl_nlmsg_batch_head(t->b),
			      mnl_nlmsg_batch_size(t->b)) < 0) {
		err = errno;
		goto out;
	}
	/* one answer per message, an error or an ACK; after an error the
	 * kernel may send no more, hence the timeout */
	setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVTIMEO,
		   &(struct timeval){.tv_sec = 5}, sizeof(struct timeval));
	for (unsigned got = 0; got < t->msgs && !err;) {
		if ((k = mnl_socket_recvfrom(nl, ans, MNL_SOCKET_BUFFER_SIZE)) < 0) {
			err = errno == EAGAIN ? ETIMEDOUT : errno;
			break;
		}
		len = (int)k;
		for (struct nlmsghdr *h = (struct nlmsghdr *)ans; mnl_nlmsg_ok(h, len);
		     h = mnl_nlmsg_next(h, &len), got++)
			if (h->nlmsg_type == NLMSG_ERROR &&
			    ((struct nlmsgerr *)mnl_nlmsg_get_payload(h))->error && !err)
				err =
				    -((struct nlmsgerr *)mnl_nlmsg_get_payload(h))->error;
	}
out:
	mnl_socket_close(nl);
	return err;
}

/* A rule of chain judge: no expression, or the xt target NFQUEUE to queue
 * (an nft `queue` statement needs nft_queue, which not every kernel has;
 * xt_NFQUEUE through nft_compat is in all that have NFQUEUE). */
static struct nftnl_rule *judge_rule(int with_queue, uint16_t queue)
{
	struct nftnl_rule *r = nftnl_rule_alloc();
	struct xt_NFQ_info_v3 *info;
	struct nftnl_expr *e;

	if (!r)
		return NULL;
	nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
	nftnl_rule_set_str(r, NFTNL_RULE_TABLE, "sanbox");
	nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, "judge");
	if (!with_queue)
		return r;
	if (!(e = nftnl_expr_alloc("target")) || !(info = calloc(1, sizeof *info))) {
		nftnl_expr_free(e);
		nftnl_rule_free(r);
		return NULL;
	}
	info->queuenum = queue;
	info->queues_total = 1;
	nftnl_expr_set_str(e, NFTNL_EXPR_TG_NAME, "NFQUEUE");
	nftnl_expr_set_u32(e, NFTNL_EXPR_TG_REV, 3);
	nftnl_expr_set(e, NFTNL_EXPR_TG_INFO, info, sizeof *info); /* e owns info */
	nftnl_rule_add_expr(r, e);
	return r;
}

int sb_nft_judge_set(sb_nft *n, uint16_t queue)
{
	struct nftnl_rule *flush = judge_rule(0, 0), *add = judge_rule(1, queue);
	struct batch t;
	int rc = SB_ERR_NOMEM, err;

	if (!flush || !add || batch_open(&t))
		goto out;
	if ((rc = nft_exec(n, "add chain inet sanbox judge", 0, NULL)) == SB_OK) {
		batch_rule(&t, flush, NFT_MSG_DELRULE, 0);
		batch_rule(&t, add, NFT_MSG_NEWRULE, NLM_F_APPEND | NLM_F_CREATE);
		if ((err = batch_commit(&t)))
			rc = sb_seterr(SB_ERR_UNAVAIL,
				       "nftables: cannot queue to the judge (xt_NFQUEUE "
				       "through nft_compat): %s",
				       strerror(err));
	}
	batch_close(&t);
out:
	nftnl_rule_free(flush);
	nftnl_rule_free(add);
	return rc;
}

int sb_nft_table_del(sb_nft *n)
{
	if (nft_exec(n, "list set inet sanbox taps", 0, NULL))
		return SB_OK; /* none */
	return nft_exec(n, "delete table inet sanbox", 0, NULL);
}

/* Writes a grant's element: "ADDR[/LEN] . PROTO . LO[-HI]". */
static void grant_elem(FILE *f, const struct sb_net_grant *g)
{
	fprintf(f, "%s", g->host);
	if (g->prefix != (g->family == 4 ? 32 : 128))
		fprintf(f, "/%u", g->prefix);
	fprintf(f, " . %s . %u", g->udp ? "udp" : "tcp", g->port_lo);
	if (g->port_hi != g->port_lo)
		fprintf(f, "-%u", g->port_hi);
}

static void grants_add(FILE *f, const char *id, const struct sb_netpolicy *p, int family)
{
	int any = 0;

	for (size_t i = 0; i < p->ngrants; i++) {
		if (p->grants[i].family != family)
			continue;
		fprintf(f, "%s", any ? ", " : "");
		if (!any)
			fprintf(f, "add element inet sanbox g%d_%s { ", family, id);
		grant_elem(f, &p->grants[i]);
		any = 1;
	}
	if (any)
		fprintf(f, " }\n");
}

/* The rules of chain c (f or o) of r, in one family's part (v6: IPv6),
 * for the connections the judge reads: its verdicts, then its queue. An
 * HTTP connection's guest segments go to the queue unless they carry no
 * data (chain acks) or lie in a body the judge need not read (set b4/b6);
 * the server's come back unread but for its SYN-ACK. */
static void judging_rules(FILE *f, char c, const struct sb_nft_run *r, int v6)
{
	const char *fam = v6 ? "ipv6" : "ipv4", *ip = v6 ? "ip6" : "ip";
	uint32_t j = SB_NFT_JUDGING(r->mark), h = SB_NFT_JUDGING_HTTP(r->mark);
	int n = v6 ? 6 : 4;

	fprintf(f,
		"add rule inet sanbox %c_%s meta nfproto %s ct mark 0x%08x meta mark "
		"0x%08x meta mark set 0 ct mark set 0x%08x accept\n"
		"add rule inet sanbox %c_%s meta nfproto %s ct mark 0x%08x meta mark "
		"0x%08x meta mark set 0 reject with tcp reset\n"
		"add rule inet sanbox %c_%s meta nfproto %s ct mark 0x%08x jump judge\n",
		c, r->id, fam, j, SB_NFT_PASS, r->mark, c, r->id, fam, j, SB_NFT_KILL, c,
		r->id, fam, j);
	if (c == 'o') { /* the server's SYN-ACK says where its stream starts */
		fprintf(
		    f,
		    "add rule inet sanbox o_%s meta nfproto %s ct mark 0x%08x tcp flags "
		    "& (syn|ack) == syn|ack jump judge\n"
		    "add rule inet sanbox o_%s meta nfproto %s ct mark 0x%08x accept\n",
		    r->id, fam, h, r->id, fam, h);
		return;
	}
	fprintf(f,
		"add rule inet sanbox f_%s meta nfproto %s ct mark 0x%08x meta mark "
		"0x%08x meta mark set 0 ct mark set 0x%08x accept\n"
		"add rule inet sanbox f_%s meta nfproto %s ct mark 0x%08x meta mark "
		"0x%08x meta mark set 0 reject with tcp reset\n"
		"add rule inet sanbox f_%s meta nfproto %s ct mark 0x%08x meta mark "
		"0x%08x meta mark set 0 ct mark set 0x%08x accept\n"
		"add rule inet sanbox f_%s meta nfproto %s ct mark 0x%08x jump acks\n"
		"add rule inet sanbox f_%s meta nfproto %s ct mark 0x%08x meta length < "
		"65536 tcp flags & (fin|syn|rst|urg) == 0 %s daddr . tcp dport . tcp "
		"sport . tcp sequence @b%d_%s accept\n"
		"add rule inet sanbox f_%s meta nfproto %s ct mark 0x%08x jump judge\n",
		r->id, fam, h, SB_NFT_PASS, r->mark, r->id, fam, h, SB_NFT_KILL, r->id,
		fam, h, SB_NFT_BOTH, j, r->id, fam, h, r->id, fam, h, ip, n, r->id, r->id,
		fam, h);
}

/* The rules of one family (ip or ip6) in r's chains. */
static void family_rules(FILE *f, const struct sb_nft_run *r, int v6)
{
	const char *ip = v6 ? "ip6" : "ip", *id = r->id;
	const char *guest = v6 ? r->guest6 : r->guest4, *host = v6 ? r->host6 : r->host4;
	int n = v6 ? 6 : 4;

	if (!guest[0]) { /* no address of this family: nothing of it goes */
		fprintf(
		    f,
		    "add rule inet sanbox f_%s meta nfproto %s counter name c_%s drop\n",
		    id, v6 ? "ipv6" : "ipv4", id);
		return;
	}
	/* f: what the guest sends through the host */
	fprintf(f, "add rule inet sanbox f_%s %s saddr != %s counter name c_%s drop\n",
		id, ip, guest, id);
	judging_rules(f, 'f', r, v6);
	judging_rules(f, 'o', r, v6);
	fprintf(f,
		"add rule inet sanbox f_%s tcp dport @tls %s daddr . meta l4proto . th "
		"dport @n%d_%s ct mark set 0x%08x jump judge\n"
		"add rule inet sanbox f_%s tcp dport @http %s daddr . meta l4proto . th "
		"dport @n%d_%s ct mark set 0x%08x jump judge\n",
		id, ip, n, id, SB_NFT_JUDGING(r->mark), id, ip, n, id,
		SB_NFT_JUDGING_HTTP(r->mark));
	fprintf(f,
		"add rule inet sanbox f_%s %s daddr . meta l4proto . th dport @g%d_%s ct "
		"mark "
		"set 0x%08x accept\n",
		id, ip, n, id, r->mark);
	fprintf(f,
		"add rule inet sanbox f_%s %s daddr . meta l4proto . th dport @n%d_%s ct "
		"mark "
		"set 0x%08x accept\n",
		id, ip, n, id, r->mark);
	fprintf(f,
		"add rule inet sanbox f_%s meta l4proto @l4 add @d%d_%s { %s "
		"daddr . "
		"meta l4proto . th dport }\n",
		id, n, id, ip);
	fprintf(f,
		"add rule inet sanbox f_%s meta l4proto != @l4 add @e%d_%s { %s "
		"daddr "
		". meta l4proto }\n",
		id, n, id, ip);
	/* i: what it sends to the host: its stub, neighbour discovery */
	fprintf(f,
		"add rule inet sanbox i_%s %s saddr %s %s daddr %s meta l4proto @l4 "
		"th dport %u accept\n",
		id, ip, guest, ip, host, r->dns_port);
	if (v6)
		fprintf(f, "add rule inet sanbox i_%s icmpv6 type @nd accept\n", id);
	fprintf(f,
		"add rule inet sanbox i_%s meta l4proto @l4 add @d%d_%s { %s "
		"daddr . "
		"meta l4proto . th dport }\n",
		id, n, id, ip);
	/* p: DNS to the stub (a redirect needs its protocol matched alone) */
	for (int udp = 0; udp <= 1; udp++)
		fprintf(f,
			"add rule inet sanbox p_%s %s daddr %s %s dport 53 redirect to "
			":%u\n",
			id, ip, host, udp ? "udp" : "tcp", r->dns_port);
}

static void elem_write(FILE *f, const struct sb_nft_elem *e);

/* The letters of a run's sets, each of both families (g4_ID, g6_ID, ...),
 * and of its chains (f_ID, ...): what sb_nft_run_script makes and
 * run_objs names. */
static const char run_sets[] = "gndeb", run_chains[] = "fipo";

/* The maps from a run's tap to its chains f, i, p, o. */
static const char *const run_maps[] = {"runs_f", "runs_i", "runs_p", "runs_o"};

int sb_nft_run_script(const struct sb_nft_run *r, const struct sb_netpolicy *p,
		      int update, const struct sb_nft_elem *e, size_t count, char **out)
{
	const char *id = r->id;
	struct script s;
	int rc;

	if ((rc = script_open(&s)))
		return rc;
	for (int v = 4; v <= 6; v += 2) {
		const char *addr = v == 4 ? "ipv4_addr" : "ipv6_addr";
		fprintf(
		    s.f,
		    "add set inet sanbox g%d_%s { type %s . inet_proto . inet_service; "
		    "flags interval; }\n"
		    "add set inet sanbox n%d_%s { type %s . inet_proto . inet_service; "
		    "flags interval, timeout; }\n"
		    "add set inet sanbox d%d_%s { type %s . inet_proto . inet_service; "
		    "size 256; flags dynamic; counter; }\n"
		    "add set inet sanbox e%d_%s { type %s . inet_proto; size 64; "
		    "flags dynamic; counter; }\n"
		    "add set inet sanbox b%d_%s { typeof %s daddr . tcp dport . tcp "
		    "sport . tcp sequence; flags interval, timeout; }\n",
		    v, id, addr, v, id, addr, v, id, addr, v, id, addr, v, id,
		    v == 4 ? "ip" : "ip6");
		for (size_t k = 0; run_sets[k]; k++)
			if (!update || k < 2) /* an update keeps the counts (d, e) */
				fprintf(s.f, "flush set inet sanbox %c%d_%s\n",
					run_sets[k], v, id);
	}
	fprintf(s.f,
		"add counter inet sanbox c_%s\n"
		"add chain inet sanbox f_%s\nflush chain inet sanbox f_%s\n"
		"add chain inet sanbox i_%s\nflush chain inet sanbox i_%s\n"
		"add chain inet sanbox p_%s\nflush chain inet sanbox p_%s\n"
		"add chain inet sanbox o_%s\nflush chain inet sanbox o_%s\n",
		id, id, id, id, id, id, id, id, id);
	grants_add(s.f, id, p, 4);
	grants_add(s.f, id, p, 6);
	for (size_t i = 0; i < count; i++) {
		fprintf(s.f, "add element inet sanbox n%d_%s { ", e[i].family, id);
		elem_write(s.f, &e[i]);
		fprintf(s.f, " timeout %us }\n", e[i].timeout_s);
	}
	/* connections its grants let through go on while they are granted,
	 * both ways (a change of grants changes the mark); new connections
	 * are bounded, so no run fills the host's conntrack table */
	fprintf(
	    s.f,
	    "add rule inet sanbox f_%s oifname @taps counter name c_%s drop\n"
	    "add rule inet sanbox f_%s ct state established,related ct mark 0x%08x "
	    "accept\n"
	    "add rule inet sanbox f_%s ct state new limit rate over %u/second burst %u "
	    "packets counter name c_%s drop\n"
	    "add rule inet sanbox f_%s ct state new ct count over %u counter name c_%s "
	    "drop\n"
	    "add rule inet sanbox o_%s ct state established,related ct mark 0x%08x "
	    "accept\n"
	    "add rule inet sanbox i_%s ct state new limit rate over %u/second burst %u "
	    "packets counter name c_%s drop\n"
	    "add rule inet sanbox i_%s ct state new ct count over %u counter name c_%s "
	    "drop\n",
	    id, id, id, r->mark, id, SB_NFT_NEW_RATE, 2 * SB_NFT_NEW_RATE, id, id,
	    SB_NFT_CONNS_OUT, id, id, r->mark, id, SB_NFT_NEW_RATE_HOST,
	    2 * SB_NFT_NEW_RATE_HOST, id, id, SB_NFT_CONNS_HOST, id);
	family_rules(s.f, r, 0);
	family_rules(s.f, r, 1);
	fprintf(s.f,
		"add rule inet sanbox f_%s counter name c_%s drop\n"
		"add rule inet sanbox i_%s counter name c_%s drop\n"
		"add rule inet sanbox o_%s counter name c_%s drop\n"
		"add element inet sanbox taps { \"%s\" }\n"
		"add element inet sanbox runs_f { \"%s\" : jump f_%s }\n"
		"add element inet sanbox runs_i { \"%s\" : jump i_%s }\n"
		"add element inet sanbox runs_p { \"%s\" : jump p_%s }\n"
		"add element inet sanbox runs_o { \"%s\" : jump o_%s }\n",
		id, id, id, id, id, id, r->tap, r->tap, id, r->tap, id, r->tap, id,
		r->tap, id);
	return script_close(&s, out);
}

static int run_script(sb_nft *n, const struct sb_nft_run *r, const struct sb_netpolicy *p,
		      int update, const struct sb_nft_elem *e, size_t count)
{
	char *text;
	int rc;

	if ((rc = sb_nft_run_script(r, p, update, e, count, &text)))
		return rc;
	rc = nft_exec(n, text, 0, NULL);
	free(text);
	return rc;
}

int sb_nft_run_add(sb_nft *n, const struct sb_nft_run *r, const struct sb_netpolicy *p)
{
	return run_script(n, r, p, 0, NULL, 0);
}

int sb_nft_run_update(sb_nft *n, const struct sb_nft_run *r, const struct sb_netpolicy *p,
		      const struct sb_nft_elem *e, size_t count)
{
	return run_script(n, r, p, 1, e, count);
}

/* Lists cmd's object (nft 1.0.6 lists only the first of several a
 * command) as JSON into *out; missing names what is not there. */
static int object_json(sb_nft *n, const char *cmd, const char *missing, json_t **out)
{
	json_error_t je;
	char *text;

	if (nft_exec(n, cmd, 1, &text))
		return sb_seterr(SB_ERR_NOTFOUND, "%s", missing);
	*out = json_loads(text, 0, &je);
	free(text);
	return *out ? SB_OK : sb_seterr(SB_ERR_CORRUPT, "nftables: JSON: %s", je.text);
}

/* The table as JSON (NULL when there is none). */
static json_t *table_json(sb_nft *n, int *rc)
{
	json_t *j = NULL;

	*rc = object_json(n, "list table inet sanbox", "no table inet sanbox", &j);
	if (*rc == SB_ERR_NOTFOUND)
		*rc = SB_OK; /* no table */
	return j;
}

/* Calls fn for each object of the table: its kind ("set", "map", "chain",
 * "counter") and name. */
static void objects_each(json_t *table,
			 void (*fn)(void *ctx, const char *kind, json_t *o), void *ctx)
{
	json_t *items = json_object_get(table, "nftables"), *it;
	size_t i;

	json_array_foreach(items, i, it)
	{
		const char *kind;
		json_t *o;
		json_object_foreach(it, kind, o) fn(ctx, kind, o);
	}
}

/* A run's object, of the table: an element keyed by its tap in set or
 * map name (ELEM), the rules of chain name (RULES), chain name (CHAIN),
 * set name (SET), counter name (COUNTER). */
enum obj_kind { OBJ_ELEM, OBJ_RULES, OBJ_CHAIN, OBJ_SET, OBJ_COUNTER };

struct run_obj {
	enum obj_kind kind;
	char name[32];
};

/* The most objects a run has: 5 elements, 4 chains twice, 10 sets, 1
 * counter. */
#define RUN_OBJS 24

/* Fills o with run id's objects in the order of their deletion; returns
 * their number. */
static size_t run_objs(const char *id, struct run_obj o[RUN_OBJS])
{
	size_t k = 0;

	for (size_t i = 0; i <= sizeof run_maps / sizeof run_maps[0]; i++, k++) {
		o[k].kind = OBJ_ELEM;
		snprintf(o[k].name, sizeof o[k].name, "%s",
			 i < sizeof run_maps / sizeof run_maps[0] ? run_maps[i] : "taps");
	}
	for (int pass = 0; pass < 2; pass++)
		for (const char *c = run_chains; *c; c++, k++) {
			o[k].kind = pass ? OBJ_CHAIN : OBJ_RULES;
			snprintf(o[k].name, sizeof o[k].name, "%c_%s", *c, id);
		}
	for (int v = 4; v <= 6; v += 2)
		for (const char *c = run_sets; *c; c++, k++) {
			o[k].kind = OBJ_SET;
			snprintf(o[k].name, sizeof o[k].name, "%c%d_%s", *c, v, id);
		}
	o[k].kind = OBJ_COUNTER;
	snprintf(o[k].name, sizeof o[k].name, "c_%s", id);
	return k + 1;
}

/* Builds into h the payload naming element tap (an ifname key: its name,
 * zero-padded to 16 bytes) of set or map name. */
static int elem_payload(struct nlmsghdr *h, const char *name, const char *tap)
{
	struct nftnl_set *s = nftnl_set_alloc();
	struct nftnl_set_elem *e = s ? nftnl_set_elem_alloc() : NULL;
	char key[IFNAMSIZ] = {0};

	if (!e) {
		if (s)
			nftnl_set_free(s);
		return SB_ERR_NOMEM;
	}
	strncpy(key, tap, sizeof key - 1);
	nftnl_set_set_str(s, NFTNL_SET_TABLE, "sanbox");
	nftnl_set_set_str(s, NFTNL_SET_NAME, name);
	nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, sizeof key);
	nftnl_set_elem_add(s, e); /* s owns e */
	nftnl_set_elems_nlmsg_build_payload(h, s);
	nftnl_set_free(s);
	return SB_OK;
}

/* Builds into h the payload naming o (not an element). */
static int named_payload(struct nlmsghdr *h, const struct run_obj *o)
{
	struct nftnl_rule *r;
	struct nftnl_chain *c;
	struct nftnl_set *s;
	struct nftnl_obj *ob;

	if (o->kind == OBJ_RULES && (r = nftnl_rule_alloc())) {
		nftnl_rule_set_str(r, NFTNL_RULE_TABLE, "sanbox");
		nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, o->name);
		nftnl_rule_nlmsg_build_payload(h, r);
		nftnl_rule_free(r);
	} else if (o->kind == OBJ_CHAIN && (c = nftnl_chain_alloc())) {
		nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, "sanbox");
		nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, o->name);
		nftnl_chain_nlmsg_build_payload(h, c);
		nftnl_chain_free(c);
	} else if (o->kind == OBJ_SET && (s = nftnl_set_alloc())) {
		nftnl_set_set_str(s, NFTNL_SET_TABLE, "sanbox");
		nftnl_set_set_str(s, NFTNL_SET_NAME, o->name);
		nftnl_set_nlmsg_build_payload(h, s);
		nftnl_set_free(s);
	} else if (o->kind == OBJ_COUNTER && (ob = nftnl_obj_alloc())) {
		nftnl_obj_set_str(ob, NFTNL_OBJ_TABLE, "sanbox");
		nftnl_obj_set_str(ob, NFTNL_OBJ_NAME, o->name);
		nftnl_obj_set_u32(ob, NFTNL_OBJ_TYPE, NFT_OBJECT_COUNTER);
		nftnl_obj_nlmsg_build_payload(h, ob);
		nftnl_obj_free(ob);
	} else {
		return SB_ERR_NOMEM;
	}
	return SB_OK;
}

/* The type of a message on o: its deletion (del 1; the rules': their
 * flush) or the request for it (del 0; the rules': their chain's). */
static uint16_t obj_type(const struct run_obj *o, int del)
{
	static const uint16_t types[][2] = {
	    [OBJ_ELEM] = {NFT_MSG_GETSETELEM, NFT_MSG_DELSETELEM},
	    [OBJ_RULES] = {NFT_MSG_GETCHAIN, NFT_MSG_DELRULE},
	    [OBJ_CHAIN] = {NFT_MSG_GETCHAIN, NFT_MSG_DELCHAIN},
	    [OBJ_SET] = {NFT_MSG_GETSET, NFT_MSG_DELSET},
	    [OBJ_COUNTER] = {NFT_MSG_GETOBJ, NFT_MSG_DELOBJ},
	};

	return types[o->kind][del];
}

/* Builds into h (of type obj_type(o, del)) the payload naming o, tap the
 * key of an element. */
static int obj_payload(struct nlmsghdr *h, const struct run_obj *o, const char *tap,
		       int del)
{
	struct run_obj chain = *o;

	if (o->kind == OBJ_ELEM)
		return elem_payload(h, o->name, tap);
	if (!del && o->kind == OBJ_RULES)
		chain.kind = OBJ_CHAIN;
	return named_payload(h, &chain);
}

/* 1 when the table holds o, 0 when not, else a negative errno: one
 * request and its answer on nl (buf holds MNL_SOCKET_BUFFER_SIZE). */
static int obj_there(struct mnl_socket *nl, char *buf, const struct run_obj *o,
		     const char *tap)
{
	struct nlmsghdr *h = (struct nlmsghdr *)buf;
	ssize_t k;

	if (obj_payload(nftnl_nlmsg_build_hdr(buf, obj_type(o, 0), NFPROTO_INET, 0, 1), o,
			tap, 0))
		return -ENOMEM;
	if (mnl_socket_sendto(nl, buf, h->nlmsg_len) < 0 ||
	    (k = mnl_socket_recvfrom(nl, buf, MNL_SOCKET_BUFFER_SIZE)) < 0)
		return -errno;
	if (!mnl_nlmsg_ok(h, (int)k))
		return -EPROTO;
	if (h->nlmsg_type != NLMSG_ERROR)
		return 1;
	k = ((struct nlmsgerr *)mnl_nlmsg_get_payload(h))->error;
	return k == -ENOENT ? 0 : (int)k;
}

/* Marks in there[] which of the count objects o the table holds. Errors:
 * SB_ERR_IO, SB_ERR_NOMEM. */
static int objs_there(const struct run_obj *o, size_t count, const char *tap, int *there)
{
	char *buf = malloc(MNL_SOCKET_BUFFER_SIZE);
	struct mnl_socket *nl = mnl_socket_open(NETLINK_NETFILTER);
	int rc = SB_ERR_NOMEM;

	if (!buf || !nl)
		goto out;
	rc = SB_OK;
	setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVTIMEO,
		   &(struct timeval){.tv_sec = 5}, sizeof(struct timeval));
	if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0)
		rc = sb_seterr(SB_ERR_IO, "nftables: netlink: %s", strerror(errno));
	for (size_t i = 0; i < count && rc == SB_OK; i++)
		if ((there[i] = obj_there(nl, buf, &o[i], tap)) < 0)
			rc = sb_seterr(SB_ERR_IO, "nftables: %s: %s", o[i].name,
				       strerror(-there[i]));
out:
	if (nl)
		mnl_socket_close(nl);
	free(buf);
	return rc;
}

/* Deletes those of the count objects o that there[] marks (NULL: all) in
 * one batch; *err gets the errno of the kernel's refusal, or 0. */
static int objs_del(const struct run_obj *o, size_t count, const char *tap,
		    const int *there, int *err)
{
	struct batch t;
	int rc;

	*err = 0;
	if ((rc = batch_open(&t)))
		return rc;
	for (size_t i = 0; i < count && rc == SB_OK; i++)
		if (!there || there[i]) {
			rc = obj_payload(batch_hdr(&t, obj_type(&o[i], 1), 0), &o[i], tap,
					 1);
			batch_next(&t);
		}
	if (rc == SB_OK && t.msgs)
		*err = batch_commit(&t);
	batch_close(&t);
	return rc;
}

int sb_nft_run_del(sb_nft *n, const char *id, const char *tap)
{
	struct run_obj o[RUN_OBJS];
	size_t count = run_objs(id, o);
	int there[RUN_OBJS], rc, err;

	pthread_mutex_lock(&n->lock);
	/* each object by its name, no listing first: one batch; when a part
	 * is missing (a run half made, or half deleted, or none), what the
	 * table holds of it, each part asked for by its name */
	if ((rc = objs_del(o, count, tap, NULL, &err)) == SB_OK && err == ENOENT &&
	    (rc = objs_there(o, count, tap, there)) == SB_OK)
		rc = objs_del(o, count, tap, there, &err);
	if (rc == SB_OK && err)
		rc = sb_seterr(SB_ERR_IO, "nftables: run %s: %s", id, strerror(err));
	pthread_mutex_unlock(&n->lock);
	return rc;
}

int sb_nft_run_there(sb_nft *n, const char *id)
{
	struct run_obj o = {OBJ_CHAIN, ""};
	int there, rc;

	snprintf(o.name, sizeof o.name, "f_%s", id);
	pthread_mutex_lock(&n->lock);
	rc = objs_there(&o, 1, "", &there);
	pthread_mutex_unlock(&n->lock);
	return rc ? rc : there;
}

static void elem_write(FILE *f, const struct sb_nft_elem *e)
{
	char a[INET6_ADDRSTRLEN];

	inet_ntop(e->family == 4 ? AF_INET : AF_INET6, e->addr, a, sizeof a);
	fprintf(f, "%s . %s . %u", a, e->udp ? "udp" : "tcp", e->port_lo);
	if (e->port_hi != e->port_lo)
		fprintf(f, "-%u", e->port_hi);
}

int sb_nft_body_set(sb_nft *n, const char *id, const struct sb_nft_body *b, int add,
		    uint32_t timeout_s)
{
	char a[INET6_ADDRSTRLEN], text[512], *p = text;
	uint32_t ends[2][2] = {{b->first, b->last}, {0, b->last}};
	size_t parts = 1;

	if (b->first > b->last) { /* wraps */
		ends[0][1] = UINT32_MAX;
		parts = 2;
	}
	inet_ntop(b->family == 4 ? AF_INET : AF_INET6, b->addr, a, sizeof a);
	for (size_t i = 0; i < parts; i++) {
		char t[32] = "";
		if (add)
			snprintf(t, sizeof t, " timeout %us", timeout_s);
		p +=
		    snprintf(p, sizeof text - (size_t)(p - text),
			     "%s element inet sanbox b%d_%s { %s . %u . %u . %u-%u%s }\n",
			     add ? "add" : "delete", b->family, id, a, b->port, b->gport,
			     ends[i][0], ends[i][1], t);
	}
	return nft_exec(n, text, 0, NULL);
}

int sb_nft_names_add(sb_nft *n, const char *id, const struct sb_nft_elem *e, size_t count)
{
	struct script s;
	char *text = NULL;
	int rc;

	for (int pass = 0; pass < 2; pass++) {
		if ((rc = script_open(&s)))
			return rc;
		for (size_t i = 0; i < count; i++) {
			/* delete first, so an element there already gets its new
			 * timeout; the second pass adds only (it was not there) */
			if (pass == 0) {
				fprintf(s.f, "delete element inet sanbox n%d_%s { ",
					e[i].family, id);
				elem_write(s.f, &e[i]);
				fprintf(s.f, " }\n");
			}
			fprintf(s.f, "add element inet sanbox n%d_%s { ", e[i].family,
				id);
			elem_write(s.f, &e[i]);
			fprintf(s.f, " timeout %us }\n", e[i].timeout_s);
		}
		if ((rc = script_close(&s, &text)))
			return rc;
		rc = nft_exec(n, text, 0, NULL);
		free(text);
		if (rc == SB_OK)
			return SB_OK;
	}
	return rc;
}

/* Reads one element of a d/e set into *d: {"elem": {"val": {"concat":
 * [addr, proto, port?]}, "counter": {"packets": N}}}. */
static int denial_read(json_t *e, struct sb_nft_denial *d)
{
	json_t *el = json_object_get(e, "elem");
	json_t *c = json_object_get(json_object_get(el, "val"), "concat");
	json_t *pk = json_object_get(json_object_get(el, "counter"), "packets");
	json_t *proto = json_array_get(c, 1);

	if (!json_is_string(json_array_get(c, 0)) || !json_is_integer(pk))
		return -1;
	memset(d, 0, sizeof *d);
	snprintf(d->dst, sizeof d->dst, "%s", json_string_value(json_array_get(c, 0)));
	if (json_is_string(proto))
		snprintf(d->proto, sizeof d->proto, "%s", json_string_value(proto));
	else
		snprintf(d->proto, sizeof d->proto, "%lld",
			 (long long)json_integer_value(proto));
	d->port = (uint16_t)json_integer_value(json_array_get(c, 2));
	d->packets = (uint64_t)json_integer_value(pk);
	return 0;
}

int sb_nft_denials(sb_nft *n, const char *id,
		   void (*fn)(void *ctx, const struct sb_nft_denial *d), void *ctx)
{
	static const char *const sets[] = {"d4", "d6", "e4", "e6"};
	char cmd[128], missing[64];
	json_t *j, *it, *e;
	size_t i, k;
	int rc;

	snprintf(missing, sizeof missing, "run %s has no chains", id);
	for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
		/* a set by name is cheap: nft fetches that set alone */
		snprintf(cmd, sizeof cmd, "list set inet sanbox %s_%s", sets[s], id);
		if ((rc = object_json(n, cmd, missing, &j)))
			return rc;
		json_array_foreach(json_object_get(j, "nftables"), i, it)
		{
			json_array_foreach(
			    json_object_get(json_object_get(it, "set"), "elem"), k, e)
			{
				struct sb_nft_denial d;
				if (denial_read(e, &d) == 0)
					fn(ctx, &d);
			}
		}
		json_decref(j);
	}
	return SB_OK;
}

int sb_nft_drops(sb_nft *n, void (*fn)(void *ctx, const char *id, uint64_t packets),
		 void *ctx)
{
	json_t *j, *it;
	size_t i;
	int rc;

	/* one listing for all: a counter by name costs as much as all */
	if ((rc = object_json(n, "list counters table inet sanbox",
			      "no table inet sanbox", &j)))
		return rc;
	json_array_foreach(json_object_get(j, "nftables"), i, it)
	{
		json_t *c = json_object_get(it, "counter");
		const char *name = json_string_value(json_object_get(c, "name"));
		if (name && !strncmp(name, "c_", 2))
			fn(ctx, name + 2,
			   (uint64_t)json_integer_value(json_object_get(c, "packets")));
	}
	json_decref(j);
	return SB_OK;
}

struct runs_ctx {
	void (*fn)(void *ctx, const char *id);
	void *ctx;
};

static void runs_one(void *ctx, const char *kind, json_t *o)
{
	struct runs_ctx *r = ctx;
	const char *name = json_string_value(json_object_get(o, "name"));

	if (!strcmp(kind, "chain") && name && !strncmp(name, "f_", 2))
		r->fn(r->ctx, name + 2);
}

int sb_nft_runs(sb_nft *n, void (*fn)(void *ctx, const char *id), void *ctx)
{
	struct runs_ctx r = {fn, ctx};
	json_t *t;
	int rc;

	if (!(t = table_json(n, &rc)))
		return rc;
	objects_each(t, runs_one, &r);
	json_decref(t);
	return SB_OK;
}
