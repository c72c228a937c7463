/* upstream.h - where a gateway call's answer comes from: an ops table.
 *
 * Two implementations: the provider over libcurl (sb_upstream_provider,
 * gateway.c: all libcurl use stays there; the built-in model stub is such
 * a provider, an HTTP server the daemon starts) and answers from a record
 * (sb_upstream_record, rerun.c: a re-run's k-th call gets the k-th
 * recorded answer of the run it re-runs). The gateway reads, checks,
 * reserves, meters and records a call the same way whichever answers it.
 *
 * A call is started, pumped until it is done, and ended; the answer's
 * bytes go to the request's sink as they come.
 */
#ifndef SB_UPSTREAM_H
#define SB_UPSTREAM_H

#include <stddef.h>

/* One call as an upstream gets it. Its pointers are the caller's and must
 * stay valid until the call's end. */
struct sb_upstream_req {
	unsigned api;	  /* SB_API_OPENAI, SB_API_ANTHROPIC or SB_API_RESPONSES */
	int stream;	  /* 1: an SSE stream is asked for */
	const char *path; /* after the base URL: "/messages" */
	const char *body; /* the request as forwarded */
	size_t len;
	const char *base_url; /* the provider's, ending in /v1 */
	const char *key;      /* the provider's key, or NULL */
	const char *version;  /* anthropic-version to send, or NULL: 2023-06-01 */
	const char *beta;     /* anthropic-beta to send, or NULL */
	/* The sink: takes len bytes of the answer; returns len, anything
	 * else aborts the call. */
	size_t (*write)(void *ctx, const char *p, size_t len);
	void *ctx;
};

struct sb_upstream_ops {
	const char *name;
	/* Starts rq on src (the implementation's source: a connection's
	 * handles, a record) and writes the call's handle into *call.
	 * Errors: SB_ERR_NOMEM. */
	int (*start)(void *src, const struct sb_upstream_req *rq, void **call);
	/* Moves the call on: returns once the sink got bytes, or the call
	 * ended (*done set to 1). */
	void (*pump)(void *call, int *done);
	/* The answer's HTTP status, 0 until known. */
	long (*status)(void *call);
	/* The answer's content type (valid until end). */
	const char *(*content_type)(void *call);
	/* Why the call broke off (valid until end), or NULL: it did not. */
	const char *(*failure)(void *call);
	/* Ends the call: frees its handle; rq is no longer used. */
	void (*end)(void *call);
};

extern const struct sb_upstream_ops sb_upstream_provider;
extern const struct sb_upstream_ops sb_upstream_record;

#endif
