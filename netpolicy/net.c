/* net.c - the enforcer of network mode acl: slots, a run's network from
 * its start to its end, changes of grants, reports (see net.h).
 *
 * Calls go one way: net.c drives a run's DNS stub (stub.h) and its judge
 * (judged.h), which ask and tell their run only through the ops tables
 * given here (stub_ops, judged_ops).
 *
 * A run's network is two structs: its handle (struct sb_net_run), which
 * the daemon's loop holds, and struct net_run, which the enforcer's
 * thread works on. Fields marked (net) are touched on that thread only,
 * (const) never change after sb_net_run_open or _reattach returns.
 */
#include "netpolicy/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <jansson.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/home.h"
#include "engine/mpack.h"
#include "netpolicy/dns.h"
#include "netpolicy/judged.h"
#include "netpolicy/nft.h"
#include "netpolicy/nslock.h"
#include "netpolicy/stub.h"
#include "netpolicy/tap.h"

#define LOCK_DIR	 "/run/sanbox"
#define NET_AGG_MAX	 64  /* distinct report keys a run gathers between reports */
#define NET_RESOLVED_MAX 256 /* addresses of granted names a run keeps */
#define NET_TTL_GRACE_S	 30  /* a name's addresses outlive its answer's TTL by this */

/* Reports gathered between two reports. */
struct net_agg {
	struct sb_net_report items[NET_AGG_MAX];
	size_t n;
	uint64_t overflow; /* denials that found no room */
};

/* An address a granted name resolved to, with the moment it expires. */
struct net_resolved {
	char name[254];
	int family;
	uint8_t addr[16];
	double expires; /* the net loop's clock */
};

struct sb_net {
	struct sb_net_config c;
	uint32_t net4; /* subnet4, host order */
	int len4;
	uint8_t net6[16];
	int len6;
	size_t nslots;
	pthread_mutex_t lock; /* slots, checked, fence, nruns, ending, polling,
			       * closing, judged */
	uint8_t *slots;	      /* 1: taken */
	size_t nruns;	      /* runs with chains, this daemon's */
	size_t ending;	      /* runs asked to end whose end is not done */
	pthread_cond_t ended; /* ending or polling went down */
	int checked;	      /* sb_net_check succeeded once */
	struct sb_post stop_post; /* sb_net_close's to the loop */
	int fence;	      /* forwarding was off: fenced (see nft.h) */
	int lock_fd;	      /* this network namespace's enforcer lock */
	char lock_path[128];  /* ... its file */
	sb_nft *nft;
	/* the enforcer's thread */
	sb_loop *loop;
	pthread_t thread;
	int started;
	sb_resolver *resolver; /* the stubs' */
	sb_judged *judged;     /* the judge's queue, from the first check on */
	struct net_run *runs;  /* (net) the runs being served */
	int polling;	       /* (lock) a count of the runs' denials is under way */
	int closing;	       /* (lock) sb_net_close began: no count begins */
	sb_watch *tick;	       /* (net) reports, expiry */
};

struct net_run {
	sb_net *n;		   /* (const) */
	char id[16];		   /* (const) */
	unsigned slot;		   /* (const) */
	struct sb_net_iface iface; /* (const) */
	struct sb_nft_run nr;	   /* its part of nftables; mark (net) */
	struct sb_netpolicy pol;   /* (net) its grants as they are now */
	int fds[SB_DNS_STUB_FDS];  /* its stub's sockets, in stub.h's order */
	struct sb_net_run *h;	   /* (const) its handle, what the daemon's loop holds */
	/* (net) */
	struct net_run *next;
	int serving, leaving, ending;
	unsigned busy;	      /* lookups, jobs and answers under way */
	sb_dns_stub *stub;    /* its DNS stub (NULL: none could be made) */
	sb_judged_run *judge; /* its judged connections (NULL: likewise) */
	struct net_resolved resolved[NET_RESOLVED_MAX];
	size_t nresolved;
	struct net_agg agg;
	int polling;		      /* a count of denials is under way */
	int changing;		      /* a change of grants is under way */
	struct grant_change *changes; /* changes waiting for it */
	uint64_t dropped;	      /* packets its chains dropped, last count */
	struct sb_post start_post, end_post; /* sb_net_run_start's and its end's
					      * to the loop */
	struct denial_seen {
		char key[80];
		uint64_t packets;
	} seen[2 * 256 + 2 * 64]; /* per-destination counts, last count */
	size_t nseen;
};

/* A run's handle, what the daemon's loop holds. It is
 * freed when its last reference goes: the caller's (until close or
 * leave), the enforcer's (until the run's end is done) and one for each
 * function posted to the daemon's loop and not yet run. */
struct sb_net_run {
	struct net_run *rn; /* the enforcer's side */
	void (*report)(void *ctx, const struct sb_net_report *r);
	void *ctx;
	int closed;		  /* no report or callback from now on */
	struct sb_netpolicy mpol; /* its grants once the changes asked for are made */
	atomic_int refs;
};

static void handle_release(struct sb_net_run *h)
{
	if (atomic_fetch_sub(&h->refs, 1) == 1)
		free(h);
}

/* Runs fn(ctx) on the daemon's loop through post, with a reference to h
 * held for it (fn releases it). */
static void handle_post(struct sb_net_run *h, struct sb_post *post, void (*fn)(void *ctx),
			void *ctx)
{
	atomic_fetch_add(&h->refs, 1);
	sb_loop_post(h->rn->n->c.loop, post, fn, ctx);
}

/* --- configuration and slots --- */

static int subnet4_parse(const char *s, uint32_t *net, int *len)
{
	char buf[20], *slash;
	struct in_addr a;

	snprintf(buf, sizeof buf, "%s", s);
	if (!(slash = strchr(buf, '/')))
		return -1;
	*slash = 0;
	*len = atoi(slash + 1);
	if (inet_pton(AF_INET, buf, &a) != 1 || *len < 8 || *len > 28)
		return -1;
	*net = ntohl(a.s_addr);
	return (*net & ((1u << (32 - *len)) - 1)) ? -1 : 0;
}

static int subnet6_parse(const char *s, uint8_t net[16], int *len)
{
	char buf[48], *slash;

	snprintf(buf, sizeof buf, "%s", s);
	if (!(slash = strchr(buf, '/')))
		return -1;
	*slash = 0;
	*len = atoi(slash + 1);
	if (inet_pton(AF_INET6, buf, net) != 1 || *len < 16 || *len > 56 || *len % 8)
		return -1;
	for (int i = *len / 8; i < 16; i++)
		if (net[i])
			return -1;
	return 0;
}

/* The addresses and names of slot k for run id. */
static void iface_of(const sb_net *n, unsigned k, const char *id, struct sb_net_iface *f)
{
	struct in_addr a;
	uint8_t v6[16];

	memset(f, 0, sizeof *f);
	snprintf(f->tap, sizeof f->tap, "sb%.12s", id);
	f->mac[0] = 0x02; /* locally administered, unicast */
	for (int i = 0; i < 5; i++) {
		unsigned b = 0;
		sscanf(id + 2 * i, "%2x", &b);
		f->mac[1 + i] = (uint8_t)b;
	}
	a.s_addr = htonl(n->net4 + 4 * k + 1);
	inet_ntop(AF_INET, &a, f->host4, sizeof f->host4);
	a.s_addr = htonl(n->net4 + 4 * k + 2);
	inet_ntop(AF_INET, &a, f->guest4, sizeof f->guest4);
	f->prefix4 = 30;
	if (!n->c.ipv6)
		return;
	memcpy(v6, n->net6, 16);
	for (int i = 7, b = 0; i >= n->len6 / 8; i--, b += 8)
		v6[i] = (uint8_t)(k >> b);
	v6[15] = 1;
	inet_ntop(AF_INET6, v6, f->host6, sizeof f->host6);
	v6[15] = 2;
	inet_ntop(AF_INET6, v6, f->guest6, sizeof f->guest6);
	f->prefix6 = 64;
}

/* Takes slot k (or any free one when k < 0); n->lock is held. Errors:
 * SB_ERR_FULL, SB_ERR_EXISTS (k is taken). */
static int slot_take(sb_net *n, long k, unsigned *out)
{
	if (k >= 0 && ((size_t)k >= n->nslots || n->slots[k]))
		return sb_seterr(SB_ERR_EXISTS,
				 "network acl: address slot %ld is another run's", k);
	for (size_t i = 0; k < 0 && i < n->nslots; i++)
		if (!n->slots[i])
			k = (long)i;
	if (k < 0)
		return sb_seterr(SB_ERR_FULL,
				 "network acl: all %zu addresses of %s are taken",
				 n->nslots, n->c.subnet4);
	n->slots[k] = 1;
	n->nruns++;
	*out = (unsigned)k;
	return SB_OK;
}

static void slot_give(sb_net *n, unsigned k)
{
	pthread_mutex_lock(&n->lock);
	if (k < n->nslots && n->slots[k]) {
		n->slots[k] = 0;
		n->nruns--;
	}
	pthread_mutex_unlock(&n->lock);
}

int sb_net_iface_pack(const struct sb_net_iface *f, msgpack_packer *pk)
{
	char mac[18];
	sb_mapw m;

	snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", f->mac[0], f->mac[1],
		 f->mac[2], f->mac[3], f->mac[4], f->mac[5]);
	sb_mapw_begin(&m, pk);
	sb_mapw_str(&m, "mac", mac);
	sb_mapw_str(&m, "addr4", f->guest4);
	sb_mapw_u64(&m, "prefix4", (uint64_t)f->prefix4);
	sb_mapw_str(&m, "gw4", f->host4);
	if (f->guest6[0]) {
		sb_mapw_str(&m, "addr6", f->guest6);
		sb_mapw_u64(&m, "prefix6", (uint64_t)f->prefix6);
		sb_mapw_str(&m, "gw6", f->host6);
	}
	return sb_mapw_end(&m);
}

/* --- the enforcer's thread --- */

static void *net_main(void *arg)
{
	sb_net *n = arg;

	sb_loop_run(n->loop);
	return NULL;
}

static void on_tick(void *ctx);

int sb_net_open(const struct sb_net_config *c, sb_net **out)
{
	sb_net *n = calloc(1, sizeof *n);
	size_t slots;
	int rc;

	if (!n)
		return SB_ERR_NOMEM;
	n->c = *c;
	n->lock_fd = -1;
	pthread_mutex_init(&n->lock, NULL);
	pthread_cond_init(&n->ended, NULL);
	if (subnet4_parse(c->subnet4, &n->net4, &n->len4)) {
		rc = sb_seterr(SB_ERR_INVAL,
			       "net.subnet4: not an IPv4 block of /8 to /28: %s",
			       c->subnet4);
		goto fail;
	}
	if (subnet6_parse(c->subnet6, n->net6, &n->len6)) {
		rc = sb_seterr(
		    SB_ERR_INVAL,
		    "net.subnet6: not an IPv6 block of /16 to /56 (whole bytes): %s",
		    c->subnet6);
		goto fail;
	}
	slots = (size_t)1 << (30 - n->len4);
	if (slots > ((size_t)1 << (64 - n->len6)))
		slots = (size_t)1 << (64 - n->len6);
	n->nslots = slots > 65536 ? 65536 : slots;
	if (!(n->slots = calloc(n->nslots, 1))) {
		rc = SB_ERR_NOMEM;
		goto fail;
	}
	if ((rc = sb_loop_open(&n->loop)) ||
	    (rc = sb_resolver_open(n->loop, c->resolver, &n->resolver)))
		goto fail;
	/* made before the thread that runs the loop starts */
	if (!(n->tick = sb_loop_timer(n->loop, c->report_s, c->report_s, on_tick, n))) {
		rc = SB_ERR_NOMEM;
		goto fail;
	}
	if (pthread_create(&n->thread, NULL, net_main, n)) {
		rc = sb_seterr(SB_ERR_IO, "network acl: cannot start its thread");
		goto fail;
	}
	n->started = 1;
	*out = n;
	return SB_OK;
fail:
	sb_net_close(n);
	return rc;
}

static void net_stop(void *ctx)
{
	sb_net *n = ctx;

	sb_watch_stop(n->tick);
	n->tick = NULL;
	sb_judged_close(n->judged);
	n->judged = NULL;
	sb_resolver_close(n->resolver);
	n->resolver = NULL;
	sb_loop_break(n->loop);
}

void sb_net_close(sb_net *n)
{
	if (!n)
		return;
	if (n->started) {
		/* the runs asked to end finish it first, and a count under
		 * way: their jobs use n */
		pthread_mutex_lock(&n->lock);
		n->closing = 1;
		while (n->ending || n->polling)
			pthread_cond_wait(&n->ended, &n->lock);
		pthread_mutex_unlock(&n->lock);
		sb_loop_post(n->loop, &n->stop_post, net_stop, n);
		pthread_join(n->thread, NULL);
	} else {
		sb_watch_stop(n->tick);
		sb_resolver_close(n->resolver);
		sb_judged_close(n->judged);
	}
	sb_loop_close(n->loop);
	sb_nft_close(n->nft);
	sb_net_lock_drop(n->lock_fd, n->lock_path, n->fence);
	free(n->slots);
	pthread_cond_destroy(&n->ended);
	pthread_mutex_destroy(&n->lock);
	free(n);
}

/* --- what the host must offer --- */

/* 1 when this process has CAP_NET_ADMIN in effect. */
static int cap_net_admin(void)
{
	char line[256];
	unsigned long long eff = 0;
	FILE *f = fopen("/proc/self/status", "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "CapEff: %llx", &eff) == 1)
			break;
	fclose(f);
	return (eff >> 12) & 1; /* CAP_NET_ADMIN */
}

/* Takes this network namespace's enforcer lock (one daemon enforces in a
 * namespace); *fence gets what the last holder recorded. */
static int ns_lock(sb_net *n, int *fence)
{
	return sb_net_lock_take(LOCK_DIR, &n->lock_fd, fence, n->lock_path,
				sizeof n->lock_path);
}

/* Records the lock's holder and whether forwarding is fenced. */
static void ns_lock_write(sb_net *n)
{
	char buf[PATH_MAX + 64];
	int len = snprintf(buf, sizeof buf, "pid %d fence %d home %s\n", (int)getpid(),
			   n->fence, n->c.home);

	if (ftruncate(n->lock_fd, 0) == 0 &&
	    pwrite(n->lock_fd, buf, (size_t)len, 0) != len)
		return; /* the lock holds anyway; the text is for people */
}

#define FWD4 "/proc/sys/net/ipv4/ip_forward"
#define FWD6 "/proc/sys/net/ipv6/conf/all/forwarding"

/* Opens the judge's queue (the first time) and points the table's chain
 * judge at it (every time: the table may be new); n->lock is held. */
static int judge_point(sb_net *n)
{
	struct sb_judged_config jc = {.loop = n->loop, .work = n->c.work, .nft = n->nft};
	int rc;

	if (!n->judged && (rc = sb_judged_open(&jc, &n->judged)))
		return rc;
	return sb_nft_judge_set(n->nft, sb_judged_queue(n->judged));
}

/* sb_net_check with n->lock held. */
static int check_locked(sb_net *n)
{
	struct sb_nft_host h;
	int rc = SB_OK, fwd = 1, fence = 0;

	memset(&h, 0, sizeof h);
	if (n->checked)
		goto out;
	if (access("/dev/net/tun", R_OK | W_OK)) {
		rc = sb_seterr(SB_ERR_UNAVAIL,
			       "network acl needs /dev/net/tun (%s): load the tun module",
			       strerror(errno));
		goto out;
	}
	if (!cap_net_admin()) {
		rc = sb_seterr(SB_ERR_UNAVAIL,
			       "network acl needs CAP_NET_ADMIN: run sanboxd as root");
		goto out;
	}
	if (!n->nft && (rc = sb_nft_open(&n->nft)))
		goto out;
	if ((rc = sb_nft_run(n->nft, "list tables", NULL))) {
		rc = sb_seterr(SB_ERR_UNAVAIL, "network acl needs nftables: %s",
			       sb_errmsg(rc));
		goto out;
	}
	if (n->lock_fd < 0 && (rc = ns_lock(n, &fence)))
		goto out;
	n->fence = fence;
	/* forwarding on; when it was off, what is no run's stays unforwarded */
	if (sb_sysctl_get(FWD4, &fwd) == SB_OK && !fwd) {
		if ((rc = sb_sysctl_set(FWD4, 1)))
			goto out;
		n->fence = 1;
	}
	if (n->c.ipv6 && sb_sysctl_get(FWD6, &fwd) == SB_OK && !fwd) {
		if ((rc = sb_sysctl_set(FWD6, 1)))
			goto out;
		n->fence = 1;
	}
	ns_lock_write(n);
	snprintf(h.subnet4, sizeof h.subnet4, "%s", n->c.subnet4);
	if (n->c.ipv6)
		snprintf(h.subnet6, sizeof h.subnet6, "%s", n->c.subnet6);
	h.fence = n->fence;
	if ((rc = sb_nft_table_add(n->nft, &h)) || (rc = judge_point(n)))
		goto out;
	n->checked = 1;
out:
	return rc;
}

int sb_net_check(sb_net *n)
{
	int rc;

	pthread_mutex_lock(&n->lock);
	rc = check_locked(n);
	pthread_mutex_unlock(&n->lock);
	return rc;
}

/* Checks the host and takes slot k (any when k < 0) at once, so the table
 * cannot go (the last run's end) between the two. */
static int check_and_take(sb_net *n, long k, unsigned *out)
{
	int rc;

	pthread_mutex_lock(&n->lock);
	if ((rc = check_locked(n)) == SB_OK)
		rc = slot_take(n, k, out);
	pthread_mutex_unlock(&n->lock);
	return rc;
}

/* Deletes the table when no run of this daemon has chains, and turns
 * forwarding off again when this daemon turned it on. Blocking. */
static void table_drop_if_idle(sb_net *n)
{
	pthread_mutex_lock(&n->lock);
	if (n->nruns == 0 && n->checked) {
		sb_nft_table_del(n->nft);
		if (n->fence) {
			sb_sysctl_set(FWD4, 0);
			if (n->c.ipv6)
				sb_sysctl_set(FWD6, 0);
			n->fence = 0;
			ns_lock_write(n);
		}
		n->checked = 0; /* the next run makes the table again */
	}
	pthread_mutex_unlock(&n->lock);
}

/* --- a run's files --- */

static void net_file(const sb_net *n, const char *run, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/runs/%s/net.json", n->c.home, run);
}

static int net_file_write(const struct net_run *r)
{
	char path[PATH_MAX + 64], tmp[PATH_MAX + 80];
	json_t *j = json_pack("{s:I, s:i, s:I}", "slot", (json_int_t)r->slot, "dns_port",
			      r->nr.dns_port, "mark", (json_int_t)r->nr.mark);
	int rc = SB_OK;

	if (!j)
		return SB_ERR_NOMEM;
	net_file(r->n, r->id, path, sizeof path);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	if (json_dump_file(j, tmp, JSON_COMPACT) || rename(tmp, path))
		rc = sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	json_decref(j);
	return rc;
}

/* --- sockets --- */

/* Binds a non-blocking socket of type to addr:*port (0: any; *port gets
 * the one bound). */
static int sock_bind(int family, int type, const char *addr, uint16_t *port, int *out)
{
	struct sockaddr_storage ss = {0};
	socklen_t len;
	int fd, one = 1;

	if ((fd = socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
		return sb_seterr(SB_ERR_IO, "socket: %s", strerror(errno));
	setsockopt(fd, family == AF_INET ? IPPROTO_IP : IPPROTO_IPV6,
		   family == AF_INET ? IP_FREEBIND : IPV6_FREEBIND, &one, sizeof one);
	if (family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
	if (family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)&ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(*port);
		inet_pton(AF_INET, addr, &s->sin_addr);
		len = sizeof *s;
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(*port);
		inet_pton(AF_INET6, addr, &s->sin6_addr);
		len = sizeof *s;
	}
	if (bind(fd, (struct sockaddr *)&ss, len) ||
	    (type == SOCK_STREAM && listen(fd, 64)) ||
	    getsockname(fd, (struct sockaddr *)&ss, &len)) {
		int e = errno;
		close(fd);
		return sb_seterr(e == EADDRINUSE ? SB_ERR_EXISTS : SB_ERR_IO,
				 "%s port %u: %s", addr, *port, strerror(e));
	}
	*port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
					: ((struct sockaddr_in6 *)&ss)->sin6_port);
	*out = fd;
	return SB_OK;
}

static void socks_close(struct net_run *r)
{
	for (int i = 0; i < SB_DNS_STUB_FDS; i++) {
		if (r->fds[i] >= 0)
			close(r->fds[i]);
		r->fds[i] = -1;
	}
}

/* Binds r's stub's sockets (udp and tcp), on the port of r->nr (0: a new
 * one). */
static int socks_bind(struct net_run *r)
{
	const struct sb_net_iface *f = &r->iface;
	uint16_t dns = r->nr.dns_port;
	int rc;

	if ((rc = sock_bind(AF_INET, SOCK_DGRAM, f->host4, &dns, &r->fds[0])) ||
	    (rc = sock_bind(AF_INET, SOCK_STREAM, f->host4, &dns, &r->fds[2])))
		goto fail;
	if (f->host6[0] &&
	    ((rc = sock_bind(AF_INET6, SOCK_DGRAM, f->host6, &dns, &r->fds[1])) ||
	     (rc = sock_bind(AF_INET6, SOCK_STREAM, f->host6, &dns, &r->fds[3]))))
		goto fail;
	r->nr.dns_port = dns;
	return SB_OK;
fail:
	socks_close(r);
	return rc;
}

/* --- a run's network --- */

/* A run's link: its tap, or the link the caller made (links_given). */
static int link_add(sb_net *n, const struct sb_net_iface *f)
{
	if (n->c.links_given)
		return sb_link_up(f->tap, f->host4, f->prefix4, f->host6, f->prefix6);
	return sb_tap_add(f->tap, f->host4, f->prefix4, f->host6, f->prefix6);
}

static void link_del(sb_net *n, const char *name)
{
	if (!n->c.links_given)
		sb_tap_del(name);
}

static struct net_run *run_new(sb_net *n, const char *run, const struct sb_netpolicy *p)
{
	struct net_run *r = calloc(1, sizeof *r);
	struct sb_net_run *h = calloc(1, sizeof *h);

	if (!r || !h) {
		free(r);
		free(h);
		return NULL;
	}
	r->n = n;
	r->h = h;
	h->rn = r;
	h->mpol = *p;
	atomic_init(&h->refs, 2); /* the caller's and the enforcer's */
	snprintf(r->id, sizeof r->id, "%s", run);
	r->pol = *p;
	for (int i = 0; i < SB_DNS_STUB_FDS; i++)
		r->fds[i] = -1;
	return r;
}

/* Frees r and its handle, neither of which anyone else has seen. */
static void run_drop(struct net_run *r)
{
	free(r->h);
	free(r);
}

/* Fills r->nr from r's slot and iface. */
static void run_names(struct net_run *r)
{
	iface_of(r->n, r->slot, r->id, &r->iface);
	snprintf(r->nr.id, sizeof r->nr.id, "%s", r->id);
	snprintf(r->nr.tap, sizeof r->nr.tap, "%s", r->iface.tap);
	snprintf(r->nr.host4, sizeof r->nr.host4, "%s", r->iface.host4);
	snprintf(r->nr.guest4, sizeof r->nr.guest4, "%s", r->iface.guest4);
	snprintf(r->nr.host6, sizeof r->nr.host6, "%s", r->iface.host6);
	snprintf(r->nr.guest6, sizeof r->nr.guest6, "%s", r->iface.guest6);
}

/* The conntrack mark of r's next grants: the run id's first 20 bits and
 * a count of its changes, 1 to 0xffd (0xffe and 0xfff are the judge's:
 * nft.h), so a
 * slot's next run never has the mark of the run before it (whose
 * connections conntrack may still hold). */
static uint32_t mark_next(const struct net_run *r)
{
	uint32_t id = 0, gen = (r->nr.mark & 0xfff) % 0xffd + 1;

	for (int i = 0; i < 5; i++) /* 20 bits of hex digits */
		id = id << 4 |
		     (uint32_t)(r->id[i] <= '9' ? r->id[i] - '0' : r->id[i] - 'a' + 10);

	return id << 12 | gen;
}

int sb_net_run_open(sb_net *n, const char *run, const struct sb_netpolicy *p,
		    sb_net_run **out)
{
	struct net_run *r;
	int rc;

	if (!(r = run_new(n, run, p)))
		return SB_ERR_NOMEM;
	if ((rc = check_and_take(n, -1, &r->slot)))
		goto fail;
	run_names(r);
	r->nr.mark = mark_next(r);
	sb_nft_run_del(n->nft, r->id, r->iface.tap); /* a leftover of the same id */
	if ((rc = link_add(n, &r->iface)) || (rc = socks_bind(r)))
		goto fail_slot;
	if ((rc = sb_nft_run_add(n->nft, &r->nr, p)) || (rc = net_file_write(r)))
		goto fail_nft;
	*out = r->h;
	return SB_OK;
fail_nft:
	sb_nft_run_del(n->nft, r->id, r->iface.tap);
	socks_close(r);
fail_slot:
	link_del(n, r->iface.tap);
	slot_give(n, r->slot);
fail:
	run_drop(r);
	return rc;
}

int sb_net_run_reattach(sb_net *n, const char *run, const struct sb_netpolicy *p,
			sb_net_run **out)
{
	char path[PATH_MAX + 64];
	struct net_run *r;
	json_error_t je;
	json_int_t slot = -1, mark = 0;
	int dns = 0, rc, have = 0;
	json_t *j;

	net_file(n, run, path, sizeof path);
	if (!(j = json_load_file(path, 0, &je)))
		return sb_seterr(SB_ERR_NOTFOUND, "%s: %s", path, je.text);
	rc = json_unpack(j, "{s:I, s:i, s:I}", "slot", &slot, "dns_port", &dns, "mark",
			 &mark);
	json_decref(j);
	if (rc || slot < 0 || dns <= 0 || dns > 65535)
		return sb_seterr(SB_ERR_CORRUPT, "%s: not a run's network", path);
	if (!(r = run_new(n, run, p)))
		return SB_ERR_NOMEM;
	if ((rc = check_and_take(n, (long)slot, &r->slot)))
		goto fail;
	run_names(r);
	r->nr.dns_port = (uint16_t)dns;
	r->nr.mark = (uint32_t)mark;
	if (!if_nametoindex(r->iface.tap)) {
		rc = sb_seterr(SB_ERR_NOTFOUND, "the tap of run %s is gone", run);
		goto fail_slot;
	}
	/* the same ports when they are free, else new ones and new rules */
	if (socks_bind(r) != SB_OK) {
		r->nr.dns_port = 0;
		if ((rc = socks_bind(r)))
			goto fail_slot;
		have = 0;
	} else {
		have = sb_nft_run_there(n->nft, r->id) == 1;
	}
	/* the chains a dead daemon left are kept as they are (connections
	 * go on); missing ones are made again */
	if (!have &&
	    ((rc = sb_nft_run_add(n->nft, &r->nr, p)) || (rc = net_file_write(r))))
		goto fail_socks;
	*out = r->h;
	return SB_OK;
fail_socks:
	socks_close(r);
fail_slot:
	slot_give(n, r->slot);
fail:
	run_drop(r);
	return rc;
}

void sb_net_run_iface(const sb_net_run *h, struct sb_net_iface *out)
{
	*out = h->rn->iface;
}

/* --- on the enforcer's loop --- */

/* What a run's stub and judge ask and tell it ("grants" below). */
static const struct sb_dns_stub_ops stub_ops;
static const struct sb_judged_ops judged_ops;

/* Starts r's stub and judge. One that cannot be made leaves r without it:
 * its guest's queries go unanswered, or its judged connections' packets
 * are dropped. */
static void serve(void *ctx)
{
	struct net_run *r = ctx;
	sb_net *n = r->n;
	struct sb_dns_stub_config sc = {
	    .loop = n->loop,
	    .resolver = n->resolver,
	    .ipv6 = r->iface.host6[0] != 0,
	    .ttl_min_s = n->c.ttl_min_s,
	    .ttl_max_s = n->c.ttl_max_s,
	};

	r->next = n->runs;
	n->runs = r;
	r->serving = 1;
	memcpy(sc.fds, r->fds, sizeof sc.fds);
	snprintf(sc.host4, sizeof sc.host4, "%s", r->iface.host4);
	if (sb_dns_stub_open(&sc, &stub_ops, r, &r->stub))
		r->stub = NULL;
	if (sb_judged_run_open(n->judged, &r->nr, &judged_ops, r, &r->judge))
		r->judge = NULL;
}

void sb_net_run_start(sb_net_run *h,
		      void (*report)(void *ctx, const struct sb_net_report *), void *ctx)
{
	h->report = report;
	h->ctx = ctx;
	sb_loop_post(h->rn->n->loop, &h->rn->start_post, serve, h->rn);
}

/* Takes a task of r: it is not freed while busy. */
static void net_busy(struct net_run *r)
{
	r->busy++;
}

static void end_job(void *ctx);

/* The run is off the loop and idle: its end goes on on a worker. */
static void end_when_idle(struct net_run *r)
{
	if (r->ending && !r->busy && !r->polling && !r->changing)
		if (sb_work_submit(r->n->c.work, end_job, r))
			end_job(r); /* no worker: here, late in a daemon's life */
}

/* Ends a task of r; the last one of an ending run frees it. */
static void net_idle(struct net_run *r)
{
	r->busy--;
	end_when_idle(r);
}

static void run_unlink(struct net_run *r)
{
	struct net_run **p = &r->n->runs;

	while (*p && *p != r)
		p = &(*p)->next;
	if (*p)
		*p = r->next;
	r->serving = 0;
}

/* On a worker: deletes what r made (unless it is left for the next
 * daemon), then frees it. */
static void end_job(void *ctx)
{
	struct net_run *r = ctx;
	sb_net *n = r->n;
	char path[PATH_MAX + 64];

	sb_dns_stub_close(r->stub);
	sb_judged_run_close(r->judge);
	socks_close(r);
	if (!r->leaving) {
		sb_nft_run_del(n->nft, r->id, r->iface.tap);
		link_del(n, r->iface.tap);
		net_file(n, r->id, path, sizeof path);
		unlink(path);
	}
	slot_give(n, r->slot);
	if (!r->leaving)
		table_drop_if_idle(n);
	handle_release(r->h);
	free(r);
	pthread_mutex_lock(&n->lock);
	n->ending--;
	pthread_cond_broadcast(&n->ended);
	pthread_mutex_unlock(&n->lock);
}

static void changes_drop(struct net_run *r);

static void end_on_loop(void *ctx)
{
	struct net_run *r = ctx;

	if (r->serving) {
		if (r->stub)
			sb_dns_stub_stop(r->stub);
		if (r->judge)
			sb_judged_run_stop(r->judge);
		run_unlink(r);
	}
	changes_drop(r); /* asked for, not begun: nobody waits for them now */
	r->ending = 1;
	end_when_idle(r);
}

static void run_end(sb_net_run *h, int leave)
{
	struct net_run *r;

	if (!h)
		return;
	r = h->rn;
	h->closed = 1;
	r->leaving = leave;
	pthread_mutex_lock(&r->n->lock);
	r->n->ending++;
	pthread_mutex_unlock(&r->n->lock);
	sb_loop_post(r->n->loop, &r->end_post, end_on_loop, r);
	handle_release(h);
}

void sb_net_run_close(sb_net_run *h)
{
	run_end(h, 0);
}

void sb_net_run_leave(sb_net_run *h)
{
	run_end(h, 1);
}

/* --- reports --- */

#define AGG_MORE "not granted (more destinations than reported)"

/* (net) Adds count of a report of kind to r's gathered reports. */
static void agg_add(struct net_run *r, enum sb_net_report_kind kind, const char *dst,
		    uint16_t port, const char *proto, const char *name,
		    const char *reason, const char *addrs, uint64_t count)
{
	struct net_agg *a = &r->agg;
	struct sb_net_report *it;
	int summary;

	for (size_t i = 0; i < a->n; i++) {
		it = &a->items[i];
		if (it->kind == kind && it->port == port && !strcmp(it->dst, dst) &&
		    !strcmp(it->proto, proto) && !strcmp(it->name, name ? name : "") &&
		    !strcmp(it->reason, reason ? reason : "")) {
			it->count += count;
			if (addrs)
				snprintf(it->addrs, sizeof it->addrs, "%s", addrs);
			return;
		}
	}
	/* the last slot is the summary's: what found no room */
	summary = reason && !strcmp(reason, AGG_MORE);
	if (a->n >= NET_AGG_MAX - !summary) {
		if (kind == SB_NET_DENIED && !summary)
			a->overflow += count;
		return;
	}
	it = &a->items[a->n++];
	memset(it, 0, sizeof *it);
	it->kind = kind;
	snprintf(it->dst, sizeof it->dst, "%s", dst);
	it->port = port;
	snprintf(it->proto, sizeof it->proto, "%s", proto);
	snprintf(it->name, sizeof it->name, "%s", name ? name : "");
	snprintf(it->reason, sizeof it->reason, "%s", reason ? reason : "");
	snprintf(it->addrs, sizeof it->addrs, "%s", addrs ? addrs : "");
	it->count = count;
}

struct report_batch {
	struct sb_post post;
	struct sb_net_run *h;
	size_t n;
	struct sb_net_report items[];
};

static void deliver(void *ctx)
{
	struct report_batch *b = ctx;
	struct sb_net_run *h = b->h;

	for (size_t i = 0; i < b->n && !h->closed; i++)
		h->report(h->ctx, &b->items[i]);
	free(b);
	handle_release(h);
}

/* Sends what r gathered to the daemon's loop. */
static void agg_flush(struct net_run *r)
{
	struct net_agg *a = &r->agg;
	struct report_batch *b;
	size_t n = a->n + !!a->overflow;

	if (!n)
		return;
	if (a->overflow)
		agg_add(r, SB_NET_DENIED, "", 0, "any", NULL, AGG_MORE, NULL,
			a->overflow);
	n = a->n;
	if ((b = malloc(sizeof *b + n * sizeof b->items[0]))) {
		b->h = r->h;
		b->n = n;
		memcpy(b->items, a->items, n * sizeof a->items[0]);
		handle_post(r->h, &b->post, deliver, b);
	}
	a->n = 0;
	a->overflow = 0;
}

/* A count of a run's denials from the kernel, on a worker, then on the
 * loop. */
struct poll_job {
	struct net_run *r;
	size_t n;
	struct sb_nft_denial d[2 * 256 + 2 * 64 + 1];
	uint64_t other;	  /* dropped, but not to a destination counted */
	uint64_t dropped; /* what its counter says now */
	int counted;	  /* dropped was read */
};

/* A tick's count of every run served: one listing of all runs' counters,
 * then the sets of each run whose counter moved. */
struct poll_round {
	struct sb_post post;
	sb_net *n;
	size_t count;
	struct poll_job *jobs[];
};

static void poll_seen(void *ctx, const struct sb_nft_denial *d)
{
	struct poll_job *j = ctx;
	struct net_run *r = j->r;
	char key[80];
	size_t i;
	uint64_t was = 0;

	snprintf(key, sizeof key, "%s %s %u", d->dst, d->proto, d->port);
	for (i = 0; i < r->nseen; i++)
		if (!strcmp(r->seen[i].key, key))
			break;
	if (i < r->nseen) {
		was = r->seen[i].packets;
	} else if (r->nseen < sizeof r->seen / sizeof r->seen[0]) {
		snprintf(r->seen[r->nseen].key, sizeof r->seen[0].key, "%s", key);
		i = r->nseen++;
	}
	if (i < r->nseen)
		r->seen[i].packets = d->packets;
	if (d->packets > was && j->n < sizeof j->d / sizeof j->d[0]) {
		j->d[j->n] = *d;
		j->d[j->n++].packets = d->packets - was;
	}
}

static void poll_done(struct poll_job *j)
{
	struct net_run *r = j->r;

	for (size_t i = 0; i < j->n; i++)
		agg_add(r, SB_NET_DENIED, j->d[i].dst, j->d[i].port, j->d[i].proto, NULL,
			"not granted", NULL, j->d[i].packets);
	if (j->other)
		agg_add(r, SB_NET_DENIED, "", 0, "any", NULL,
			"not granted (spoofed, to another run, or untracked)", NULL,
			j->other);
	free(j);
	r->polling = 0;
	if (!r->ending)
		agg_flush(r);
	end_when_idle(r);
}

/* Ends a count: nobody waits for it now. */
static void round_free(struct poll_round *p)
{
	sb_net *n = p->n;

	free(p);
	pthread_mutex_lock(&n->lock);
	n->polling = 0;
	pthread_cond_broadcast(&n->ended);
	pthread_mutex_unlock(&n->lock);
}

static void round_done(void *ctx)
{
	struct poll_round *p = ctx;

	for (size_t i = 0; i < p->count; i++)
		poll_done(p->jobs[i]);
	round_free(p);
}

static void round_drops(void *ctx, const char *id, uint64_t packets)
{
	struct poll_round *p = ctx;

	for (size_t i = 0; i < p->count; i++)
		if (!strcmp(p->jobs[i]->r->id, id)) {
			p->jobs[i]->dropped = packets;
			p->jobs[i]->counted = 1;
			return;
		}
}

static void round_job(void *ctx)
{
	struct poll_round *p = ctx;

	if (sb_nft_drops(p->n->nft, round_drops, p) == SB_OK)
		for (size_t i = 0; i < p->count; i++) {
			struct poll_job *j = p->jobs[i];
			struct net_run *r = j->r;
			uint64_t counted = 0;
			/* every drop of its chains counts: nothing new without */
			if (!j->counted || j->dropped == r->dropped ||
			    sb_nft_denials(p->n->nft, r->id, poll_seen, j) != SB_OK)
				continue;
			for (size_t k = 0; k < j->n; k++)
				counted += j->d[k].packets;
			if (j->dropped > r->dropped && j->dropped - r->dropped > counted)
				j->other = j->dropped - r->dropped - counted;
			r->dropped = j->dropped;
		}
	sb_loop_post(p->n->loop, &p->post, round_done, p);
}

static void on_tick(void *ctx)
{
	sb_net *n = ctx;
	double now = sb_loop_now(n->loop);
	struct poll_round *p = NULL;
	size_t count = 0;

	for (struct net_run *r = n->runs; r; r = r->next) {
		if (r->judge)
			sb_judged_run_sweep(r->judge, now);
		/* forget names' addresses past their time */
		for (size_t i = 0; i < r->nresolved;)
			if (r->resolved[i].expires < now)
				r->resolved[i] = r->resolved[--r->nresolved];
			else
				i++;
		count++;
	}
	pthread_mutex_lock(&n->lock);
	if (n->polling || n->closing || !count ||
	    !(p = calloc(1, sizeof *p + count * sizeof p->jobs[0]))) {
		pthread_mutex_unlock(&n->lock);
		return; /* the last count is not done yet: this one is skipped */
	}
	n->polling = 1;
	pthread_mutex_unlock(&n->lock);
	p->n = n;
	for (struct net_run *r = n->runs; r; r = r->next) {
		struct poll_job *j = calloc(1, sizeof *j);
		if (!j)
			break;
		j->r = r;
		r->polling = 1;
		p->jobs[p->count++] = j;
	}
	if (sb_work_submit(n->c.work, round_job, p)) {
		for (size_t i = 0; i < p->count; i++) {
			p->jobs[i]->r->polling = 0;
			free(p->jobs[i]);
		}
		round_free(p);
	}
}

/* --- grants --- */

/* 1 when name is granted to run ctx for proto (udp 1, tcp 0) and port
 * (0: any port). */
static int name_granted(void *ctx, const char *name, int udp, uint16_t port)
{
	const struct net_run *r = ctx;

	for (size_t i = 0; i < r->pol.ngrants; i++) {
		const struct sb_net_grant *g = &r->pol.grants[i];
		if (g->family == 0 && g->udp == udp && sb_dns_name_match(g->host, name) &&
		    (!port || (port >= g->port_lo && port <= g->port_hi)))
			return 1;
	}
	return 0;
}

/* 1 when the len-bit prefix of a (n bytes) equals that of b. */
static int prefix_eq(const uint8_t *a, const uint8_t *b, int len)
{
	int whole = len / 8, rest = len % 8;

	if (memcmp(a, b, (size_t)whole))
		return 0;
	return !rest || ((a[whole] ^ b[whole]) & (0xff << (8 - rest))) == 0;
}

/* Blocks of one family: {first bytes, prefix length}. */
struct block {
	uint8_t a[16];
	int len;
};

static const struct block special4[] = {
    {{0}, 8}, {{127}, 8}, {{169, 254}, 16}, {{224}, 4}, {{240}, 4},
};
static const struct block private4[] = {
    {{10}, 8}, {{172, 16}, 12}, {{192, 168}, 16}, {{100, 64}, 10}};
static const struct block special6[] = {
    {{0}, 96} /* ::, ::1, v4-compatible */,
    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, 96} /* v4-mapped */,
    {{0xfe, 0x80}, 10},
    {{0xff}, 8},
};
static const struct block private6[] = {{{0xfc}, 7}};

static int in_blocks(const struct block *b, size_t n, const uint8_t *addr)
{
	for (size_t i = 0; i < n; i++)
		if (prefix_eq(addr, b[i].a, b[i].len))
			return 1;
	return 0;
}

/* The bytes of sa's address (family 4 or 6). */
static const uint8_t *sa_bytes(const struct sockaddr *sa, int family)
{
	return family == 4
		   ? (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr
		   : (const uint8_t *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
}

/* Where addr is to this host, from one look at its interfaces: 2, one
 * of its own addresses; 1, in a network one of them is on; else 0. */
static int addr_host(int family, const uint8_t *addr)
{
	struct ifaddrs *all, *i;
	int n = family == 4 ? 4 : 16, where = 0;

	if (getifaddrs(&all))
		return 0;
	for (i = all; i && where < 2; i = i->ifa_next) {
		const uint8_t *a, *m;
		int len = 0;
		if (!i->ifa_addr ||
		    i->ifa_addr->sa_family != (family == 4 ? AF_INET : AF_INET6))
			continue;
		a = sa_bytes(i->ifa_addr, family);
		if (!memcmp(a, addr, (size_t)n)) {
			where = 2;
		} else if (i->ifa_netmask) {
			m = sa_bytes(i->ifa_netmask, family);
			for (int k = 0; k < n; k++)
				len += __builtin_popcount(m[k]);
			if (prefix_eq(addr, a, len))
				where = 1;
		}
	}
	freeifaddrs(all);
	return where;
}

/* 1 when an address grant of r covers addr. */
static int addr_granted(const struct net_run *r, int family, const uint8_t *addr)
{
	for (size_t i = 0; i < r->pol.ngrants; i++) {
		const struct sb_net_grant *g = &r->pol.grants[i];
		uint8_t a[16] = {0};
		if (g->family == family &&
		    inet_pton(family == 4 ? AF_INET : AF_INET6, g->host, a) == 1 &&
		    prefix_eq(addr, a, g->prefix))
			return 1;
	}
	return 0;
}

/* 1 when addr (family 4 or 6), answered for a granted name, may go into
 * the sets of run ctx: not loopback, unspecified, link-local, multicast or
 * broadcast, not in the runs' subnets, not one of the host's addresses or
 * in a network the host is on, and (unless net.private_answers) not
 * private (RFC 1918, 100.64/10, fc00::/7), unless an address grant of
 * the run covers it. Else 0, and why (cap bytes) says which. */
static int answer_ok(void *ctx, int family, const uint8_t *addr, char *why, size_t cap)
{
	const struct net_run *r = ctx;
	const sb_net *n = r->n;
	const char *no = NULL;
	uint32_t v4;

	if (addr_granted(r, family, addr))
		return 1;
	if (family == 4) {
		memcpy(&v4, addr, 4);
		if (in_blocks(special4, sizeof special4 / sizeof special4[0], addr))
			no = "a loopback, link-local, multicast or reserved address";
		else if ((ntohl(v4) & ~((1u << (32 - n->len4)) - 1)) == n->net4)
			no = "a run's address";
		else if (!n->c.private_answers &&
			 in_blocks(private4, sizeof private4 / sizeof private4[0], addr))
			no = "a private address";
	} else {
		if (in_blocks(special6, sizeof special6 / sizeof special6[0], addr))
			no = "a loopback, link-local, multicast or reserved address";
		else if (prefix_eq(addr, n->net6, n->len6))
			no = "a run's address";
		else if (!n->c.private_answers &&
			 in_blocks(private6, sizeof private6 / sizeof private6[0], addr))
			no = "a private address";
	}
	if (!no) {
		int where = addr_host(family, addr);
		no = where == 2	  ? "the host's own address"
		     : where == 1 ? "an address on the host's networks"
				  : NULL;
	}
	if (no)
		snprintf(why, cap, "the answer is %s", no);
	return !no;
}

/* The elements of address a under grants p: one per grant of its name. */
static size_t elems_of(const struct net_resolved *a, const struct sb_netpolicy *p,
		       struct sb_nft_elem *out, size_t cap, double now)
{
	size_t n = 0;

	for (size_t k = 0; k < p->ngrants && n < cap; k++) {
		const struct sb_net_grant *g = &p->grants[k];
		if (g->family || !sb_dns_name_match(g->host, a->name))
			continue;
		out[n].family = a->family;
		memcpy(out[n].addr, a->addr, 16);
		out[n].udp = g->udp;
		out[n].port_lo = g->port_lo;
		out[n].port_hi = g->port_hi;
		out[n].timeout_s =
		    a->expires > now ? (uint32_t)(a->expires - now) + 1 : 1;
		n++;
	}
	return n;
}

struct names_job {
	struct sb_post post;
	struct net_run *r;
	void (*done)(void *ctx, int rc);
	void *ctx;
	int rc;
	char err[300];
	size_t n;
	struct sb_nft_elem e[];
};

static void names_done(void *ctx)
{
	struct names_job *j = ctx;
	struct net_run *r = j->r;

	if (j->rc)
		sb_seterr(j->rc, "%s", j->err);
	j->done(j->ctx, j->rc);
	free(j);
	net_idle(r);
}

static void names_job(void *ctx)
{
	struct names_job *j = ctx;

	j->rc = j->n ? sb_nft_names_add(j->r->n->nft, j->r->id, j->e, j->n) : SB_OK;
	if (j->rc)
		snprintf(j->err, sizeof j->err, "%s", sb_errmsg(j->rc));
	sb_loop_post(j->r->n->loop, &j->post, names_done, j);
}

/* (net) Adds the addresses of name (answered with ttl_s) to the sets of
 * run rctx and then calls done(ctx, rc) on the net loop. Errors (done not
 * called): SB_ERR_NOMEM. */
static int names_add(void *rctx, const char *name, int family, const uint8_t (*addrs)[16],
		     size_t naddrs, uint32_t ttl_s, void (*done)(void *ctx, int rc),
		     void *ctx)
{
	struct net_run *r = rctx;
	double now = sb_loop_now(r->n->loop);
	struct names_job *j;
	size_t cap = naddrs * SB_NET_GRANTS;

	if (!(j = malloc(sizeof *j + cap * sizeof j->e[0])))
		return SB_ERR_NOMEM;
	j->r = r;
	j->done = done;
	j->ctx = ctx;
	j->n = 0;
	/* keep each address (the soonest to expire makes room), and put
	 * its elements in the sets */
	for (size_t i = 0; i < naddrs; i++) {
		struct net_resolved *a = NULL;
		for (size_t k = 0; k < r->nresolved && !a; k++)
			if (r->resolved[k].family == family &&
			    !strcmp(r->resolved[k].name, name) &&
			    !memcmp(r->resolved[k].addr, addrs[i], 16))
				a = &r->resolved[k];
		if (!a && r->nresolved < NET_RESOLVED_MAX)
			a = &r->resolved[r->nresolved++];
		for (size_t k = 0; !a && k < r->nresolved; k++)
			if (!a || r->resolved[k].expires < a->expires)
				a = &r->resolved[k];
		snprintf(a->name, sizeof a->name, "%s", name);
		a->family = family;
		memcpy(a->addr, addrs[i], 16);
		a->expires = now + ttl_s + NET_TTL_GRACE_S;
		j->n += elems_of(a, &r->pol, j->e + j->n, cap - j->n, now);
	}
	net_busy(r);
	if (sb_work_submit(r->n->c.work, names_job, j)) {
		net_idle(r);
		free(j);
		return SB_ERR_NOMEM;
	}
	return SB_OK;
}

/* What a run's stub and judge ask and tell it; ctx is the run (granted,
 * answer_ok and names_add are above). */

static void run_denied(void *ctx, const char *dst, uint16_t port, const char *proto,
		       const char *name, const char *why)
{
	agg_add(ctx, SB_NET_DENIED, dst, port, proto, name, why, NULL, 1);
}

static void run_resolved(void *ctx, const char *type, const char *name, const char *addrs)
{
	agg_add(ctx, SB_NET_RESOLVED, "", 0, type, name, NULL, addrs, 1);
}

static void run_hold(void *ctx)
{
	net_busy(ctx);
}

static void run_release(void *ctx)
{
	net_idle(ctx);
}

static const struct sb_dns_stub_ops stub_ops = {
    .granted = name_granted,
    .answer_ok = answer_ok,
    .names_add = names_add,
    .denied = run_denied,
    .resolved = run_resolved,
    .hold = run_hold,
    .release = run_release,
};

static const struct sb_judged_ops judged_ops = {
    .granted = name_granted,
    .denied = run_denied,
    .hold = run_hold,
    .release = run_release,
};

/* A change of a run's grants: asked on the daemon's loop, made on the
 * enforcer's (one at a time per run), its nftables part on a worker. */
struct grant_change {
	struct sb_post post; /* its way to the enforcer's loop, then the daemon's */
	struct net_run *r;
	struct sb_net_run *h;
	struct sb_net_grant g;
	int allow;
	void (*cb)(void *ctx, int rc);
	void *ctx;
	struct grant_change *next;
	struct sb_nft_run nr;	  /* with its new mark */
	struct sb_netpolicy want; /* the grants after it */
	int rc;
	char err[300];
	size_t n;
	struct sb_nft_elem *e;
};

/* Applies change c to the grants p. */
static void grants_apply(struct sb_netpolicy *p, const struct sb_net_grant *g, int allow)
{
	if (allow) {
		p->grants[p->ngrants++] = *g;
		return;
	}
	for (size_t i = 0; i < p->ngrants; i++)
		if (sb_net_grant_equal(&p->grants[i], g)) {
			memmove(&p->grants[i], &p->grants[i + 1],
				(p->ngrants - i - 1) * sizeof *g);
			p->ngrants--;
			return;
		}
}

static void change_free(struct grant_change *c)
{
	free(c->e);
	free(c);
}

static void changes_drop(struct net_run *r)
{
	while (r->changes) {
		struct grant_change *c = r->changes;
		r->changes = c->next;
		change_free(c);
	}
}

static void change_answer(void *ctx)
{
	struct grant_change *c = ctx;
	struct sb_net_run *h = c->h;

	if (c->rc) /* nothing changed: the grants are as they were */
		grants_apply(&h->mpol, &c->g, !c->allow);
	if (!h->closed) {
		if (c->rc)
			sb_seterr(c->rc, "%s", c->err);
		c->cb(c->ctx, c->rc);
	}
	change_free(c);
	handle_release(h);
}

/* Answers c on the daemon's loop. */
static void change_reply(struct grant_change *c)
{
	handle_post(c->h, &c->post, change_answer, c);
}

static void change_next(struct net_run *r);

static void change_done(void *ctx)
{
	struct grant_change *c = ctx;
	struct net_run *r = c->r;

	if (c->rc == SB_OK) {
		r->pol = c->want;
		r->nr.mark = c->nr.mark;
		if (r->judge)
			sb_judged_run_recheck(r->judge);
	}
	r->changing = 0;
	change_reply(c);
	change_next(r);
	end_when_idle(r);
}

static void change_job(void *ctx)
{
	struct grant_change *c = ctx;
	struct net_run *r = c->r;

	if ((c->rc = sb_nft_run_update(r->n->nft, &c->nr, &c->want, c->e, c->n)) ==
	    SB_OK) {
		struct net_run tmp = *r;
		tmp.nr.mark = c->nr.mark;
		net_file_write(&tmp); /* a new daemon keeps the mark */
	} else {
		snprintf(c->err, sizeof c->err, "%s", sb_errmsg(c->rc));
	}
	sb_loop_post(r->n->loop, &c->post, change_done, c);
}

static void change_next(struct net_run *r)
{
	struct grant_change *c = r->changes;
	double now = sb_loop_now(r->n->loop);
	size_t cap = NET_RESOLVED_MAX * 4;

	if (!c || r->changing || r->ending)
		return;
	r->changes = c->next;
	c->want = r->pol;
	grants_apply(&c->want, &c->g, c->allow);
	c->nr = r->nr;
	c->nr.mark = mark_next(r);
	if (!(c->e = calloc(cap, sizeof c->e[0]))) {
		c->rc = SB_ERR_NOMEM;
		snprintf(c->err, sizeof c->err, "out of memory");
		change_reply(c);
		change_next(r);
		return;
	}
	for (size_t i = 0; i < r->nresolved; i++)
		c->n += elems_of(&r->resolved[i], &c->want, c->e + c->n, cap - c->n, now);
	r->changing = 1;
	if (sb_work_submit(r->n->c.work, change_job, c)) {
		r->changing = 0;
		c->rc = SB_ERR_NOMEM;
		snprintf(c->err, sizeof c->err, "no worker to change the grants");
		change_reply(c);
	}
}

static void change_queue(void *ctx)
{
	struct grant_change *c = ctx, **p;
	struct net_run *r = c->r;

	if (r->ending) { /* closed meanwhile: nobody to answer */
		change_free(c);
		return;
	}
	for (p = &r->changes; *p; p = &(*p)->next)
		;
	*p = c;
	change_next(r);
}

int sb_net_run_grant(sb_net_run *h, const struct sb_net_grant *g, int allow,
		     void (*cb)(void *ctx, int rc), void *ctx)
{
	struct net_run *r = h->rn;
	struct grant_change *c;
	char text[SB_NET_HOST_MAX + 32];
	size_t i;

	sb_net_grant_format(g, text, sizeof text);
	for (i = 0; i < h->mpol.ngrants; i++)
		if (sb_net_grant_equal(&h->mpol.grants[i], g))
			break;
	if (allow && i < h->mpol.ngrants)
		return sb_seterr(SB_ERR_EXISTS, "run %s has grant %s already", r->id,
				 text);
	if (!allow && i == h->mpol.ngrants)
		return sb_seterr(SB_ERR_NOTFOUND, "run %s has no grant %s", r->id, text);
	if (allow && h->mpol.ngrants == SB_NET_GRANTS)
		return sb_seterr(SB_ERR_FULL,
				 "run %s has %d grants, the most a run may have", r->id,
				 SB_NET_GRANTS);
	if (!(c = calloc(1, sizeof *c)))
		return SB_ERR_NOMEM;
	c->r = r;
	c->h = h;
	c->g = *g;
	c->allow = allow;
	c->cb = cb;
	c->ctx = ctx;
	sb_loop_post(r->n->loop, &c->post, change_queue, c);
	grants_apply(&h->mpol, g, allow);
	return SB_OK;
}

/* --- what runs left --- */

void sb_net_run_remove(sb_net *n, const char *run)
{
	char tap[16], path[PATH_MAX + 64];

	/* nothing of the host changes for a run that left nothing */
	if (!cap_net_admin())
		return;
	pthread_mutex_lock(&n->lock);
	if (!n->nft && sb_nft_open(&n->nft)) {
		pthread_mutex_unlock(&n->lock);
		return;
	}
	pthread_mutex_unlock(&n->lock);
	snprintf(tap, sizeof tap, "sb%.12s", run);
	sb_nft_run_del(n->nft, run, tap);
	link_del(n, tap);
	net_file(n, run, path, sizeof path);
	unlink(path);
	table_drop_if_idle(n);
}

struct sweep_ctx {
	sb_net *n;
	int (*live)(void *ctx, const char *run);
	void *ctx;
};

/* 1 when s is a run id: 12 lowercase hex digits. */
static int run_id_ok(const char *s)
{
	return strlen(s) == 12 && strspn(s, "0123456789abcdef") == 12;
}

static void sweep_chain(void *ctx, const char *id)
{
	struct sweep_ctx *s = ctx;
	char tap[16];

	if (run_id_ok(id) && s->live(s->ctx, id))
		return;
	snprintf(tap, sizeof tap, "sb%.12s", id);
	sb_nft_run_del(s->n->nft, id, tap);
}

static void sweep_tap(void *ctx, const char *name)
{
	struct sweep_ctx *s = ctx;

	if (run_id_ok(name + 2) && (!s->live || !s->live(s->ctx, name + 2)))
		link_del(s->n, name);
}

/* Counts a run's tap (ctx: a size_t). */
static void tap_count(void *ctx, const char *name)
{
	if (run_id_ok(name + 2))
		++*(size_t *)ctx;
}

void sb_net_sweep(sb_net *n, int (*live)(void *ctx, const char *run), void *ctx)
{
	struct sweep_ctx s = {n, live, ctx};

	sb_nft *probe = NULL;
	size_t taps = 0;
	int table;

	/* nothing of any run's network here: nothing to do (and the host's
	 * forwarding is not touched) */
	if (!cap_net_admin() || sb_nft_open(&probe))
		return;
	table = sb_nft_run(probe, "list set inet sanbox taps", NULL) == SB_OK;
	sb_nft_close(probe);
	sb_tap_each("sb", tap_count, &taps);
	/* only a daemon that may enforce here sweeps: another one's runs
	 * are not this one's to end */
	if ((!table && !taps) || sb_net_check(n))
		return;
	sb_nft_runs(n->nft, sweep_chain, &s);
	sb_tap_each("sb", sweep_tap, &s);
	table_drop_if_idle(n);
}
