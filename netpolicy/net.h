/* net.h - network mode acl, enforced on this host (SPEC.md, "Network
 * policy"): a run's tap and addresses, its part of the table inet sanbox
 * (nft.h), its DNS stub (answers granted names only, adding their
 * addresses to the run's sets) and the judge (checks the name a TLS or
 * HTTP connection to a granted name's address asks for; judge.h).
 *
 * Threads: one sb_net per daemon. It runs the stubs, the judge and the
 * resolver on a thread and loop of its own, and its nftables and tap calls
 * on the worker pool it is given. Functions marked "blocking" run on a
 * worker; the others on the daemon's loop, and never block it. Reports
 * and callbacks come on the daemon's loop.
 *
 * Lifetime: a run's network (sb_net_run) is made by sb_net_run_open or
 * sb_net_run_reattach and ended by sb_net_run_close (its tap and chains
 * deleted) or sb_net_run_leave (left for the next daemon); no report or
 * callback comes after either. sb_net_close comes after every run's end.
 */
#ifndef SB_NET_H
#define SB_NET_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/loop.h"
#include "engine/work.h"
#include "netpolicy/netpolicy.h"

typedef struct sb_net sb_net;
typedef struct sb_net_run sb_net_run;

struct sb_net_config {
	const char *home;  /* the state directory (runs/RUN/net.json) */
	sb_loop *loop;	   /* the daemon's */
	sb_work *work;	   /* for blocking calls */
	char resolver[64]; /* "IP" or "IP:PORT" to resolve granted
			    * names with, or "": /etc/resolv.conf */
	char subnet4[20];  /* the runs' IPv4 block ("10.87.0.0/16"), /30 each */
	char subnet6[48];  /* the runs' IPv6 block (a /48), a /64 each */
	int ipv6;	   /* 1: runs get IPv6 too */
	uint32_t ttl_min_s, ttl_max_s; /* a granted name's TTL is clamped to these */
	double report_s;	       /* how often denials are gathered and reported */
	int private_answers;	       /* 1: granted names may resolve to private
					* addresses (RFC 1918, 100.64/10, fc00::/7) */
	int links_given; /* 1: a run's link (named as its tap) is made and deleted
			  * by the caller, not a tap made here: a veth of a
			  * test or a benchmark; the enforcer gives it its
			  * addresses and rules only */
};

/* What a run's network did, for its record; counts are since the last
 * report of the same key. */
enum sb_net_report_kind { SB_NET_DENIED, SB_NET_RESOLVED };

struct sb_net_report {
	enum sb_net_report_kind kind;
	char dst[64];	 /* the address (or "" for a name refused by the stub) */
	uint16_t port;	 /* 0 when none */
	char proto[12];	 /* tcp, udp, icmp, ipv6-icmp, dns, or a protocol number */
	char name[1030]; /* the name asked for (DNS, TLS SNI, HTTP Host),
			  * escaped (netpolicy/dns.h), or "" */
	char reason[80]; /* for a denial: why, in a few words */
	char addrs[400]; /* for a lookup: the addresses answered, comma-separated */
	uint64_t count;
};

/* The NIC of a run: what its guest is told (SPEC.md, "Host/guest channel"). */
struct sb_net_iface {
	char tap[16];
	uint8_t mac[6];
	char host4[16], guest4[16];
	int prefix4;
	char host6[48], guest6[48]; /* "" when IPv6 is off */
	int prefix6;
};

/* Packs f as a map {mac, addr4, prefix4, gw4, and with IPv6 addr6,
 * prefix6, gw6}: the "net" of the guest's SPEC and RESTORED frames. pk is
 * as sb_mapw_begin's. Errors: as sb_mapw_end. */
int sb_net_iface_pack(const struct sb_net_iface *f, msgpack_packer *pk);

/* Makes the host's enforcer (nothing touches the host's network yet).
 * Errors: SB_ERR_INVAL (a bad subnet or resolver: the detail names it),
 * SB_ERR_NOMEM, SB_ERR_IO (the thread). */
int sb_net_open(const struct sb_net_config *c, sb_net **out);

/* Ends the enforcer's thread (NULL is fine), once the ends of the runs
 * closed or left before are done (they take c->work, which must still
 * run). Runs still live keep their taps and chains. */
void sb_net_close(sb_net *n);

/* Blocking. SB_OK when mode acl can be enforced on this host; the first
 * success turns the host's forwarding on (and fences off forwarding that
 * is no run's, when it was off). Errors: SB_ERR_UNAVAIL, with one line
 * naming what is missing (CAP_NET_ADMIN, /dev/net/tun, nftables, another
 * daemon enforcing in this network namespace). */
int sb_net_check(sb_net *n);

/* Blocking. Sets up the network of run for grants p: a free slot of the
 * subnets, its tap, its chains, its stub's sockets (serving
 * once started). Errors: those of sb_net_check, SB_ERR_FULL (no free
 * slot), SB_ERR_IO (the detail says which step). */
int sb_net_run_open(sb_net *n, const char *run, const struct sb_netpolicy *p,
		    sb_net_run **out);

/* Blocking. Takes up the network a previous daemon set up for run, with
 * grants p (the recorded ones, live changes applied). Errors:
 * SB_ERR_NOTFOUND (no record of it: home/runs/RUN/net.json), those of
 * sb_net_run_open. */
int sb_net_run_reattach(sb_net *n, const char *run, const struct sb_netpolicy *p,
			sb_net_run **out);

/* The run's NIC. */
void sb_net_run_iface(const sb_net_run *r, struct sb_net_iface *out);

/* Starts serving r's stub and judge, and gathering its denials: report(ctx,
 * ...) gets what happened, every config report_s at most. Once per run. */
void sb_net_run_start(sb_net_run *r,
		      void (*report)(void *ctx, const struct sb_net_report *), void *ctx);

/* Adds (allow 1) or removes (allow 0) grant g of r; cb(ctx, rc) once it
 * is in effect (rc SB_OK) or could not be (rc, with the detail; nothing
 * changed). Removing a grant closes the connections it let through.
 * Errors (cb not called): SB_ERR_NOTFOUND (a grant to remove that r does
 * not have), SB_ERR_EXISTS (one to add that it has), SB_ERR_FULL
 * (SB_NET_GRANTS already), SB_ERR_NOMEM. */
int sb_net_run_grant(sb_net_run *r, const struct sb_net_grant *g, int allow,
		     void (*cb)(void *ctx, int rc), void *ctx);

/* Ends r: stops serving and deletes its tap, chains and sockets (later,
 * on a worker). NULL is fine. */
void sb_net_run_close(sb_net_run *r);

/* Ends r but leaves its tap and chains for the next daemon (this one is
 * stopping; the run goes on). NULL is fine. */
void sb_net_run_leave(sb_net_run *r);

/* Blocking. Deletes the tap, chains and files of run's network (one that
 * ended while no daemon ran); nothing there is fine. */
void sb_net_run_remove(sb_net *n, const char *run);

/* Blocking. At the daemon's start: deletes the taps and chains of every
 * run of which live(ctx, run) says 0, and the table when no run is left. */
void sb_net_sweep(sb_net *n, int (*live)(void *ctx, const char *run), void *ctx);

#endif
