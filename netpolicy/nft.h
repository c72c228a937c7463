/* nft.h - what Sanbox keeps in nftables: the table `inet sanbox` and each
 * run's part of it (SPEC.md, "Network policy"). All libnftables use is in
 * nft.c.
 *
 * The table holds the hooks (forward, input, NAT prerouting and
 * postrouting), the set of the runs' taps, verdict maps from a tap to its
 * run's chains (runs_f, runs_i, runs_p, runs_o), the chain judge (to the
 * judge's queue, nfq.h: the only rule not made through libnftables, but
 * libnftnl, in sb_nft_judge_set), the constant sets the runs' rules name
 * (l4, tls, http, nd) and masquerading of the runs' subnets. A
 * run's part is named after its id: chains f_ID (what its guest sends
 * through the host; a hostname grant's TLS and HTTP ports to the judge),
 * o_ID (what comes back), i_ID (what it sends to the host: its DNS stub
 * only) and p_ID (NAT: DNS to the stub); sets g4_ID/g6_ID (address
 * grants), n4_ID/n6_ID (addresses of granted names, with timeouts),
 * d4_ID/d6_ID and e4_ID/e6_ID (denied destinations with counters),
 * b4_ID/b6_ID (HTTP bodies that go past the judge) and counter c_ID
 * (every packet dropped). The table's chain acks passes an HTTP guest's
 * segments that carry nothing the judge reads.
 *
 * Threads: a handle serialises its own calls; every call is a netlink
 * round trip, so call it off the daemon's loop.
 */
#ifndef SB_NFT_H
#define SB_NFT_H

#include <stddef.h>
#include <stdint.h>

#include "netpolicy/netpolicy.h"

typedef struct sb_nft sb_nft;

/* The host's part: the runs' subnets. */
struct sb_nft_host {
	char subnet4[20]; /* "10.87.0.0/16" */
	char subnet6[48]; /* "fd53:616e:626f::/48", or "" when IPv6 is off */
	int fence;	  /* 1: drop forwarded packets that are no run's (the
			   * daemon turned the host's forwarding on itself) */
};

/* A run's part. */
struct sb_nft_run {
	char id[16];		    /* the run id (12 hex digits) */
	char tap[16];		    /* its tap */
	char host4[16], guest4[16]; /* the tap's and the guest's IPv4 addresses */
	char host6[48], guest6[48]; /* ... IPv6, or "" */
	uint16_t dns_port;	    /* the DNS stub's port on host4 (and host6) */
	uint32_t mark;		    /* conntrack mark of connections its grants let
				     * through: a new mark re-checks them all */
};

/* One address of a granted name, for a run's n4/n6 set. */
struct sb_nft_elem {
	int family;	  /* 4 or 6 */
	uint8_t addr[16]; /* 4 or 16 bytes */
	int udp;	  /* 1: udp, 0: tcp */
	uint16_t port_lo, port_hi;
	uint32_t timeout_s; /* 1 or more */
};

/* A denied destination and how many packets went to it (cumulative). */
struct sb_nft_denial {
	char dst[48];	/* the address */
	char proto[12]; /* tcp, udp, icmp, ipv6-icmp, or the protocol's number */
	uint16_t port;	/* 0 when the protocol has none */
	uint64_t packets;
};

/* Opens a libnftables context. Errors: SB_ERR_UNAVAIL, SB_ERR_NOMEM. */
int sb_nft_open(sb_nft **out);

/* Frees n (NULL is fine). */
void sb_nft_close(sb_nft *n);

/* Runs script (nft syntax) as one transaction; *out (may be NULL) gets
 * what it printed, the caller frees it. Errors: SB_ERR_IO (the detail is
 * nft's first error line), SB_ERR_NOMEM. */
int sb_nft_run(sb_nft *n, const char *script, char **out);

/* Creates the table as h describes when it is not there (an existing
 * table is left as it is). Errors: those of sb_nft_run. */
int sb_nft_table_add(sb_nft *n, const struct sb_nft_host *h);

/* Makes chain judge queue every packet it sees to NFQUEUE number queue
 * (the enforcer's, nfq.h), in place of what it did before, in one
 * transaction. Errors: SB_ERR_UNAVAIL (the kernel has no xt_NFQUEUE
 * through nft_compat), SB_ERR_IO, SB_ERR_NOMEM. */
int sb_nft_judge_set(sb_nft *n, uint16_t queue);

/* Deletes the table and all it holds (none is fine). Errors: those of
 * sb_nft_run. */
int sb_nft_table_del(sb_nft *n);

/* Adds run r with the grants of p, in one transaction: its sets, counter,
 * chains and map entries; any part of an earlier r is replaced. Errors:
 * those of sb_nft_run. */
int sb_nft_run_add(sb_nft *n, const struct sb_nft_run *r, const struct sb_netpolicy *p);

/* Replaces r's rules, address grants and granted names' addresses with
 * those of p, r->mark and the count elements e, in one transaction (a live
 * change of grants). Errors: those of sb_nft_run. */
int sb_nft_run_update(sb_nft *n, const struct sb_nft_run *r, const struct sb_netpolicy *p,
		      const struct sb_nft_elem *e, size_t count);

/* Deletes everything of run id (tap its tap) in one transaction, each
 * object by its name through libnftnl (its cost does not grow with the
 * table); when a part is missing, what the table holds of the run is
 * listed and deleted: what is not there is not an error. Errors: those
 * of sb_nft_run. */
int sb_nft_run_del(sb_nft *n, const char *id, const char *tap);

/* 1 when run id has its chain f_ID in the table, 0 when not (nor the
 * table), asked for by name: the cost does not grow with the table.
 * Errors (negative): SB_ERR_IO, SB_ERR_NOMEM. */
int sb_nft_run_there(sb_nft *n, const char *id);

/* Adds the count elements e to run id's n4/n6 sets, each with its
 * timeout (an element there already gets the new one). Errors: those of
 * sb_nft_run. */
int sb_nft_names_add(sb_nft *n, const char *id, const struct sb_nft_elem *e,
		     size_t count);

/* A body of an HTTP connection the judge need not read (judge.h): the
 * guest's segments from its port gport to addr:port whose sequence
 * numbers are first to last go past the judge. With first > last, the
 * numbers wrap: first to 2^32 - 1, then 0 to last. */
struct sb_nft_body {
	int family;	  /* 4 or 6 */
	uint8_t addr[16]; /* the server's, 4 or 16 bytes */
	uint16_t port, gport;
	uint32_t first, last;
};

/* Puts b in run id's set b4/b6 for timeout_s (add 1), or takes it out
 * (add 0). Errors: those of sb_nft_run (also: not there, for add 0; there
 * already, for add 1). */
int sb_nft_body_set(sb_nft *n, const char *id, const struct sb_nft_body *b, int add,
		    uint32_t timeout_s);

/* Reads run id's denied destinations (its sets d4, d6, e4, e6): calls fn
 * for each. Errors: SB_ERR_NOTFOUND (no such run), those of sb_nft_run,
 * SB_ERR_CORRUPT (nft's JSON). */
int sb_nft_denials(sb_nft *n, const char *id,
		   void (*fn)(void *ctx, const struct sb_nft_denial *d), void *ctx);

/* Calls fn with the id of each run of the table and every packet its
 * chains dropped (its counter), all from one listing: a run whose count
 * did not change has no new denial. Errors: SB_ERR_NOTFOUND (no table),
 * those of sb_nft_run, SB_ERR_CORRUPT (nft's JSON). */
int sb_nft_drops(sb_nft *n, void (*fn)(void *ctx, const char *id, uint64_t packets),
		 void *ctx);

/* Calls fn with the id of each run that has chains in the table. Errors:
 * those of sb_nft_run (no table: SB_OK, no call). */
int sb_nft_runs(sb_nft *n, void (*fn)(void *ctx, const char *id), void *ctx);

/* A run's new connections: through the host at most SB_NFT_NEW_RATE a
 * second (twice at once) and SB_NFT_CONNS_OUT open; to the host (its stub)
 * at most SB_NFT_NEW_RATE_HOST a second (twice at once) and
 * SB_NFT_CONNS_HOST open. */
#define SB_NFT_NEW_RATE	     500
#define SB_NFT_NEW_RATE_HOST 200
#define SB_NFT_CONNS_OUT     4096
#define SB_NFT_CONNS_HOST    2048

/* The ports whose connections to a granted name's addresses are checked
 * by name before they go through, by the judge (judge.h): those of HTTP
 * (each request's Host), those of TLS (the ClientHello's server name). */
#define SB_NFT_NAMED_PORTS "80, 443, 8080, 8443"
#define SB_NFT_HTTP_PORTS  "80, 8080"
#define SB_NFT_TLS_PORTS   "443, 8443"

/* 1 when port is one of SB_NFT_HTTP_PORTS. */
static inline int sb_nft_port_http(uint16_t port)
{
	return port == 80 || port == 8080;
}

/* A connection the judge reads has a conntrack mark made of its run's
 * mark: SB_NFT_JUDGING(mark) while the judge reads its packets both ways
 * (TLS, and HTTP while an Upgrade awaits its answer), SB_NFT_JUDGING_HTTP
 * (mark) while it reads the guest's segments that carry data or flags
 * other than ACK and PSH (HTTP). The same for every mark of the run, never
 * a run's mark (their low 12 bits count 1 to 0xffd), never 0 (a
 * connection no rule marked). The judge sends a packet through the hook
 * again with packet mark SB_NFT_PASS (the connection gets the run's mark:
 * the kernel forwards it from then on), SB_NFT_KILL (reset) or
 * SB_NFT_BOTH (the connection gets SB_NFT_JUDGING(mark)). */
#define SB_NFT_JUDGING(mark)	  ((mark) | 0xfffu)
#define SB_NFT_JUDGING_HTTP(mark) (((mark) & ~0xfffu) | 0xffeu)
#define SB_NFT_PASS		  0x53420a55u
#define SB_NFT_KILL		  0x53420d1eu
#define SB_NFT_BOTH		  0x53420b07u

/* Builds the script of sb_nft_run_add (update 0) or sb_nft_run_update
 * (update 1, with the count elements e) into *out (the caller frees it).
 * Errors: SB_ERR_NOMEM. */
int sb_nft_run_script(const struct sb_nft_run *r, const struct sb_netpolicy *p,
		      int update, const struct sb_nft_elem *e, size_t count, char **out);

#endif
