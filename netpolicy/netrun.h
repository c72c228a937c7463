/* netrun.h - what net.c, stub.c and judged.c share inside netpolicy/: the
 * enforcer and a run's network. Not for use outside netpolicy/.
 *
 * A run's network is two structs: its handle (struct sb_net_run, net.c),
 * which the daemon's loop holds, and struct net_run, which the enforcer's
 * thread works on. Fields marked (net) are touched on that thread only,
 * (const) never change after sb_net_run_open or _reattach returns.
 */
#ifndef SB_NETRUN_H
#define SB_NETRUN_H

#include <ares.h>
#include <pthread.h>
#include <sys/socket.h>

#include "engine/bucket.h"
#include "netpolicy/net.h"
#include "netpolicy/nft.h"

#define NET_AGG_MAX	 64  /* distinct report keys a run gathers between reports */
#define NET_FDS		 4   /* a run's stub's sockets */
#define NET_RESOLVED_MAX 256 /* addresses of granted names a run keeps */
#define NET_DNS_TCP_MAX	 8   /* DNS connections of a run */
#define NET_DNS_PENDING	 64  /* lookups of a run under way */
#define NET_DNS_RATE	 200 /* queries a second a run may ask */
#define NET_DNS_BURST	 400
#define NET_HEAD_S	 10.0 /* a judged connection names its host within this */
#define NET_TTL_GRACE_S	 30   /* a name's addresses outlive its answer's TTL by this */
#define NET_DNS_CACHE	 64   /* answers a run's stub keeps, for their TTL */
#define NET_JUDGE_MAX	 64   /* connections of a run the judge reads at once */
#define NET_JUDGE_HELD	 16   /* packets of one it keeps waiting */
#define NET_PASSED_MAX	 1024 /* connections of a run it let go, remembered */

struct stub_conn;
struct judged;
struct passed;
struct bypass;
typedef struct sb_nfq sb_nfq;

/* Reports gathered between two reports. */
struct net_agg {
	struct sb_net_report items[NET_AGG_MAX];
	size_t n;
	uint64_t overflow; /* denials that found no room */
};

/* An answer the stub keeps (a lookup of a granted name), until expires. */
struct dns_cached {
	char name[254];
	uint16_t type;
	int rcode;
	uint8_t addrs[16][16];
	size_t n;
	double expires; /* the net loop's clock; 0: a free place */
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
			       * closing */
	uint8_t *slots;	      /* 1: taken */
	size_t nruns;	      /* runs with chains, this daemon's */
	size_t ending;	      /* runs asked to end whose end is not done */
	pthread_cond_t ended; /* ending or polling went down */
	int checked;	      /* sb_net_check succeeded once */
	int fence;	      /* forwarding was off: fenced (see nft.h) */
	int lock_fd;	      /* this network namespace's enforcer lock */
	char lock_path[128];  /* ... its file */
	sb_nft *nft;
	/* the enforcer's thread */
	sb_loop *loop;
	pthread_t thread;
	int started;
	ares_channel ares;
	struct ares_watch {
		struct sb_net *n;
		int fd;
		sb_watch *w;
	} aw[16]; /* the resolver's sockets */
	sb_watch *ares_timer;
	struct net_run *runs; /* (net) the runs being served */
	int polling;	      /* (lock) a count of the runs' denials is under way */
	int closing;	      /* (lock) sb_net_close began: no count begins */
	sb_watch *tick;	      /* (net) reports, expiry */
	sb_nfq *nfq;	      /* the judge's queue (judged.c) */
	uint16_t nfq_num;     /* its number */
	int raw4, raw6;	      /* raw sockets: the judge's resets (-1: none) */
	sb_watch *nfq_w;      /* (net) */
};

struct net_run {
	sb_net *n;		   /* (const) */
	char id[16];		   /* (const) */
	unsigned slot;		   /* (const) */
	struct sb_net_iface iface; /* (const) */
	struct sb_nft_run nr;	   /* its part of nftables; mark (net) */
	struct sb_netpolicy pol;   /* (net) its grants as they are now */
	struct sb_netpolicy want;  /* (net) grants being put in place */
	int fds[NET_FDS];	   /* dns udp4/udp6, dns tcp4/tcp6 */
	sb_watch *fw[NET_FDS];	   /* (net) */
	struct net_fd {
		struct net_run *r;
		int i; /* of fds */
	} fctx[NET_FDS];
	struct sb_net_run *h; /* (const) its handle, what the daemon's loop holds */
	/* (net) */
	struct net_run *next;
	int serving, leaving, ending;
	unsigned busy; /* lookups, jobs and answers under way */
	struct sb_bucket dns_bucket;
	struct stub_conn *dns_conns;
	size_t ndns_conns;
	unsigned tap_index; /* its tap's ifindex */
	int has4, has6;	    /* its guest's addresses: */
	uint8_t guest4[4], guest6[16];
	struct judged *judging[NET_JUDGE_MAX]; /* its connections read now */
	size_t njudging;
	struct bypass *bypasses; /* the bodies that go past the judge */
	struct passed *passed;	 /* NET_PASSED_MAX of those let go, a ring */
	size_t npassed, passed_next;
	struct dns_cached cache[NET_DNS_CACHE];
	struct net_resolved resolved[NET_RESOLVED_MAX];
	size_t nresolved;
	struct net_agg agg;
	int polling;		      /* a count of denials is under way */
	int changing;		      /* a change of grants is under way */
	struct grant_change *changes; /* changes waiting for it */
	uint64_t dropped;	      /* packets its chains dropped, last count */
	struct denial_seen {
		char key[80];
		uint64_t packets;
	} seen[2 * 256 + 2 * 64]; /* per-destination counts, last count */
	size_t nseen;
};

/* (net) Adds count of a report of kind to r's gathered reports. */
void net_agg_add(struct net_run *r, enum sb_net_report_kind kind, const char *dst,
		 uint16_t port, const char *proto, const char *name, const char *reason,
		 const char *addrs, uint64_t count);

/* (net) 1 when name is granted to r for proto (udp 1, tcp 0) and port
 * (0: any port). */
int net_name_granted(const struct net_run *r, const char *name, int udp, uint16_t port);

/* (net) 1 when addr (family 4 or 6) is an address r resolved for a
 * granted name that is still valid. */
int net_addr_resolved(const struct net_run *r, int family, const uint8_t *addr);

/* 1 when addr (family 4 or 6), answered for a granted name, may go into
 * r's sets: not loopback, unspecified, link-local, multicast or
 * broadcast, not in the runs' subnets, not one of the host's addresses or
 * in a network the host is on, and (unless net.private_answers) not
 * private (RFC 1918, 100.64/10, fc00::/7), unless an address grant of r
 * covers it. Else 0, and why (cap bytes) says which. */
int net_answer_ok(const struct net_run *r, int family, const uint8_t *addr, char *why,
		  size_t cap);

/* 1 when addr (family 4 or 6) is one of this host's own addresses. */
int net_addr_local(int family, const uint8_t *addr);

/* (net) Takes a task of r: it is not freed while busy. */
void net_busy(struct net_run *r);

/* (net) Ends a task of r; the last one of an ending run frees it. */
void net_idle(struct net_run *r);

/* (net) Adds the addresses of name (answered with ttl_s) to r's sets and
 * then calls done(ctx, rc) on the net loop. Errors (done not called):
 * SB_ERR_NOMEM. */
int net_names_add(struct net_run *r, const char *name, int family,
		  const uint8_t (*addrs)[16], size_t naddrs, uint32_t ttl_s,
		  void (*done)(void *ctx, int rc), void *ctx);

/* (net) Watches r's sockets fds[from..to) that are open for reading,
 * calling cb with &r->fctx[i]. Errors: SB_ERR_NOMEM. */
int net_fds_watch(struct net_run *r, int from, int to,
		  void (*cb)(void *ctx, int revents));

/* (net) Stops watching r's sockets fds[from..to). */
void net_fds_unwatch(struct net_run *r, int from, int to);

/* The DNS stub (stub.c), on the net loop. */
int stub_start(struct net_run *r);
void stub_stop(struct net_run *r);
int ares_begin(sb_net *n);
void ares_end(sb_net *n);

/* The judge (judged.c). judge_open binds the enforcer's queue and points
 * the table's chain judge at it (off the net loop, the table there);
 * judge_close on the net loop or after it ended. The rest on the net
 * loop: a run's start and end, a change of its grants, its tick. */
int judge_open(sb_net *n);
void judge_close(sb_net *n);
int judge_start(struct net_run *r);
void judge_stop(struct net_run *r);
void judge_recheck(struct net_run *r);
void judge_sweep(struct net_run *r, double now);

/* Takes the enforcer lock of this network namespace: the file
 * dir/net-cCOOKIE.lock (the namespace's cookie; net-INODE.lock where the
 * kernel has none), flock'ed, its path into path. *fd gets it, *fence
 * what its last holder recorded (0 with no file). A file its holder
 * removed as it let go is not taken: the one its path names then is.
 * Errors: SB_ERR_UNAVAIL (another process holds it: the detail names its
 * pid and home; the file cannot be opened). */
int sb_net_lock_take(const char *dir, int *fd, int *fence, char *path, size_t cap);

/* Lets the lock go: its file is removed first (still held, so no one
 * takes it meanwhile) unless it records a fence, which the next holder
 * must know. fd < 0: nothing. */
void sb_net_lock_drop(int fd, const char *path, int fence);

#endif
