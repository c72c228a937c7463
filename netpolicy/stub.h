/* stub.h - a run's DNS stub, and the resolver behind it (c-ares, driven by
 * the enforcer's loop). All c-ares use is in stub.c.
 *
 * The stub answers its guest's queries over UDP and TCP (dns.h reads and
 * writes the messages). A name no grant of the run names gets NXDOMAIN and
 * is reported; nothing about it leaves the host. A granted name's A or
 * AAAA query is resolved with the resolver; the addresses that may be
 * given out are let through for the run (names_add) before the answer goes
 * back, and the answer is kept for its TTL. Other types of a granted name
 * get an empty answer: nothing is forwarded.
 *
 * The stub knows nothing of grants, nftables or reports: it asks and tells
 * its run through the ops it is opened with (net.c gives them).
 *
 * Threads: one loop, the enforcer's (the config's loop): every function
 * but sb_resolver_open and sb_dns_stub_close runs on it, and so does every
 * callback.
 */
#ifndef SB_STUB_H
#define SB_STUB_H

#include <stddef.h>
#include <stdint.h>

#include "engine/loop.h"

typedef struct sb_resolver sb_resolver;
typedef struct sb_dns_stub sb_dns_stub;

/* A stub's sockets: UDP on IPv4, UDP on IPv6, TCP (listening) on IPv4,
 * TCP on IPv6. */
#define SB_DNS_STUB_FDS 4

/* Makes the resolver granted names are looked up with, driven by loop
 * (it may be called before loop runs). servers: "IP" or "IP:PORT", comma
 * separated, or "" for /etc/resolv.conf. Errors: SB_ERR_UNAVAIL (c-ares
 * would not start), SB_ERR_INVAL (servers: the detail names it),
 * SB_ERR_NOMEM. */
int sb_resolver_open(sb_loop *loop, const char *servers, sb_resolver **out);

/* Frees rs (NULL is fine), on its loop or after the loop ended, once
 * every stub using it is closed. */
void sb_resolver_close(sb_resolver *rs);

struct sb_dns_stub_config {
	sb_loop *loop;		       /* the enforcer's */
	sb_resolver *resolver;	       /* must outlive the stub */
	int fds[SB_DNS_STUB_FDS];      /* bound non-blocking sockets, -1: none.
					* The caller's: it closes them once the
					* stub is stopped */
	char host4[16];		       /* the address it serves on, for reports */
	int ipv6;		       /* 1: AAAA queries are looked up too */
	uint32_t ttl_min_s, ttl_max_s; /* a granted name's TTL is clamped to
					* these */
};

/* What a stub asks and tells its run; ctx is the run's. Every callback
 * comes on the loop, from the stub's own handlers (never inside
 * sb_dns_stub_open or sb_dns_stub_stop). ops and ctx must stay valid
 * until sb_dns_stub_close. Once sb_dns_stub_stop has returned, release is
 * the only callback that comes (once for each hold not released yet). */
struct sb_dns_stub_ops {
	/* 1 when a grant of the run names name (a name from dns.h) for
	 * proto (udp 1, tcp 0) and port (0: any port), else 0. */
	int (*granted)(void *ctx, const char *name, int udp, uint16_t port);
	/* 1 when addr (family 4 or 6, 16 bytes), answered for a granted
	 * name, may be given to the guest; else 0, with why (cap bytes) in
	 * a few words. */
	int (*answer_ok)(void *ctx, int family, const uint8_t *addr, char *why,
			 size_t cap);
	/* Lets the guest reach the n addresses addrs (family 4 or 6) of name
	 * for ttl_s seconds; done(dctx, rc) comes later, on the loop, once
	 * they are let through (rc SB_OK) or could not be. Returns 0, or an
	 * error (done then never comes). */
	int (*names_add)(void *ctx, const char *name, int family,
			 const uint8_t (*addrs)[16], size_t n, uint32_t ttl_s,
			 void (*done)(void *dctx, int rc), void *dctx);
	/* A query refused or an answered address left out: dst (the stub's
	 * address, or the address left out), port (53, or 0), proto ("dns"),
	 * name (NULL when the query could not be read), why. The strings
	 * are valid during the call. */
	void (*denied)(void *ctx, const char *dst, uint16_t port, const char *proto,
		       const char *name, const char *why);
	/* A granted name was answered: type ("A", "AAAA"), name and the
	 * addresses given (comma-separated; NULL when answered from the
	 * stub's cache). Valid during the call. */
	void (*resolved)(void *ctx, const char *type, const char *name,
			 const char *addrs);
	/* A lookup begins: the run, ctx and ops must stay until its release. */
	void (*hold)(void *ctx);
	/* A lookup ended. It may free the stub (sb_dns_stub_close): the stub
	 * touches nothing of its own after calling it. */
	void (*release)(void *ctx);
};

/* Makes a stub and starts serving the sockets of c. The caller keeps
 * ownership of c's sockets. Errors: SB_ERR_NOMEM. */
int sb_dns_stub_open(const struct sb_dns_stub_config *c,
		     const struct sb_dns_stub_ops *ops, void *ctx, sb_dns_stub **out);

/* Stops serving: the sockets are no longer watched and TCP connections
 * are closed. Lookups under way end later, unanswered, each with its
 * release. */
void sb_dns_stub_stop(sb_dns_stub *s);

/* Frees s (NULL is fine), stopped, once release came for every hold; on
 * any thread. */
void sb_dns_stub_close(sb_dns_stub *s);

#endif
