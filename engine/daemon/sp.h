/* sp.h - the daemon's end of nng's wire protocols: request/reply and
 * publish/subscribe over unix sockets, request/reply over TLS.
 *
 * The clients are nng sockets (engine/daemon/bus.h); the daemon serves them
 * itself, because nng 1.5.2's listeners stop accepting for good after one
 * failed handshake (a peer that connects and closes at once makes the
 * server's header write fail with EPIPE, which nng reports to its listener
 * as NNG_ECLOSED, "no further action"; its poller then spins on the still
 * readable listening socket). Here a bad peer only ever costs its own
 * connection, and every limit below bounds what a peer can hold.
 *
 * The wire, as nng 1.5 speaks it, is read and written by spwire.h (SPEC.md,
 * "Sockets"); this server adds the sockets, TLS and every limit. Replies
 * may go in any order: the client matches them by id.
 *
 * A server is one thread with its own loop and its listeners; the daemon
 * runs one for its local sockets and another for the remote listener, so
 * nothing on the remote side can slow the local one. Everything of a
 * server runs on its thread except sb_sp_reply, sb_sp_publish and
 * sb_sp_stats, which any thread may call.
 */
#ifndef SB_SP_H
#define SB_SP_H

#include <stddef.h>
#include <stdint.h>

#include "engine/daemon/spwire.h" /* SB_SP_PROTO_* */

typedef struct sb_sp sb_sp;
typedef struct sb_sp_req sb_sp_req;

/* What a server bounds. A zero field takes the default in brackets.
 *
 * A request's buffer grows as its bytes arrive (to at most twice what has
 * arrived), never to its declared length at once: max_buffered counts the
 * bytes held, not the bytes promised. When a unix socket server holds
 * max_conns connections, a new one is still taken: the connection idle
 * longest (waiting for its header or for a request, a subscriber only when
 * there is none) is closed for it; only when all are busy is it refused. */
struct sb_sp_limits {
	unsigned max_conns;	     /* connections at once [1024] */
	unsigned max_conns_per_peer; /* TLS: per peer (IPv4 address, IPv6 /64) [16] */
	double accept_rate;	     /* TLS: new connections per second per peer [10] */
	double accept_burst;	     /* TLS: ... with this burst [20] */
	double handshake_s;	     /* accept to headers (and TLS) done [10] */
	double unauth_idle_s;	     /* TLS: to the first authenticated request [10] */
	double idle_s;		     /* request/reply connections: no request
				      * in flight, no reply taken by the peer
				      * [300] */
	double request_s;	     /* unix sockets: a request's first byte to
				      * its last [30] */
	size_t max_request;	     /* bytes of one request [64 MiB] */
	size_t preauth_max;	     /* TLS: bytes read before a request is
				      * authenticated [4096] */
	unsigned max_inflight; /* requests of one connection not yet answered,
				* with replies its peer has not taken yet;
				* past it the connection is not read [64] */
	size_t max_buffered;   /* bytes of requests held at once, all
				* connections; past it reading pauses [512 MiB] */
	unsigned pub_queue;    /* PUB: messages queued per subscriber; more
				* are dropped for it (it reads the log) [8192] */
	unsigned max_denied;   /* TLS: refused requests before a connection
				* is closed [8] */
};

struct sb_sp_ops {
	/* A whole request. body (len bytes, malloc'd) is the callee's to
	 * free(); req must be answered with sb_sp_reply exactly once, from any
	 * thread. Runs on the server's thread: anything that may take a while
	 * goes elsewhere. */
	void (*request)(void *ctx, sb_sp_req *req, void *body, size_t len);
	/* TLS only: checks the credentials of a request from the first len
	 * bytes of its body (all of it when complete is 1). Returns SB_OK with
	 * the client's name in who (cap bytes), SB_END when more bytes are
	 * needed, or SB_ERR_DENIED. A request not accepted within preauth_max
	 * bytes is refused: it gets deny_reply and the rest of it is read and
	 * dropped. Refusals slow the connection and its peer down. */
	int (*authenticate)(void *ctx, const void *body, size_t len, int complete,
			    char *who, size_t cap);
	/* One line for the daemon's log (peers refused, limits reached),
	 * rate-limited by the server. May be NULL. */
	void (*log)(void *ctx, const char *line);
};

struct sb_sp_opts {
	const char *name;	     /* for threads and log lines ("local") */
	const struct sb_sp_ops *ops; /* must outlive the server */
	void *ctx;
	struct sb_sp_limits limits;
	const void *deny_reply; /* TLS: the body answering a refused
				 * request (copied) */
	size_t deny_len;
};

/* Counters of a server, since it opened. */
struct sb_sp_stats {
	uint64_t conns;		/* connections now */
	uint64_t accepted;	/* connections accepted */
	uint64_t refused_conns; /* closed at once: a limit was reached */
	uint64_t dropped_conns; /* closed: protocol error, timeout, too large */
	uint64_t requests;	/* requests delivered */
	uint64_t denied;	/* requests refused by authenticate */
	uint64_t pub_dropped;	/* messages a slow subscriber did not get */
};

/* Creates a server (not yet started) with opts (copied).
 * Errors: SB_ERR_NOMEM, SB_ERR_IO. */
int sb_sp_open(const struct sb_sp_opts *opts, sb_sp **out);

/* Listens on the unix socket path (mode 0600; a stale socket there is
 * replaced) for protocol proto: SB_SP_PROTO_REP (requests) or
 * SB_SP_PROTO_PUB (subscribers). Before sb_sp_start.
 * Errors: SB_ERR_INVAL (path too long, proto), SB_ERR_EXISTS (path is not a
 * socket), SB_ERR_IO. */
int sb_sp_listen_ipc(sb_sp *s, const char *path, int proto);

/* Listens on url (tls+tcp://HOST:PORT; HOST an address or a name) for
 * requests over TLS with the PEM certificate and key files. Before
 * sb_sp_start. Needs ops->authenticate. Errors: SB_ERR_INVAL (url, files
 * that do not parse: the detail names them), SB_ERR_EXISTS (address in
 * use), SB_ERR_IO. */
int sb_sp_listen_tls(sb_sp *s, const char *url, const char *cert_pem,
		     const char *key_pem);

/* Starts the server's thread. Errors: SB_ERR_IO. */
int sb_sp_start(sb_sp *s);

/* Sends the reply body (len bytes, copied) to req and frees req. From any
 * thread. A reply to a connection that closed meanwhile is dropped. */
void sb_sp_reply(sb_sp_req *req, const void *body, size_t len);

/* The client's name: "local" on a unix socket, the name authenticate gave
 * on TLS. Valid until req is answered. */
const char *sb_sp_req_who(const sb_sp_req *req);

/* 1 when req came over TLS, else 0. */
int sb_sp_req_remote(const sb_sp_req *req);

/* Sends msg (len bytes, copied) to every subscriber, from any thread,
 * without waiting: a subscriber whose queue is full does not get it. */
void sb_sp_publish(sb_sp *s, const void *msg, size_t len);

/* Copies the server's counters into *st. From any thread. */
void sb_sp_stats(sb_sp *s, struct sb_sp_stats *st);

/* Stops the thread, closes every connection and listener (unix sockets
 * are removed) and frees the server (NULL is fine). Requests not yet
 * answered stay valid until they are: each must still get its one
 * sb_sp_reply, from any thread, during or after this call; those replies
 * are dropped, and the last of them frees what is left of the server.
 * Nothing else of the server may be called after this. */
void sb_sp_close(sb_sp *s);

#endif
