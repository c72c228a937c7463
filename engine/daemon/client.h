/* client.h - client-side helpers over the bus: typed replies and following
 * a run's events from any offset with no gap and no duplicate.
 */
#ifndef SB_CLIENT_H
#define SB_CLIENT_H

#include <msgpack.h>
#include <signal.h>
#include <stdint.h>

#include "engine/daemon/bus.h"
#include "engine/log/event.h"

struct sb_reply {
	void *raw;          /* the reply bytes; map points into them */
	msgpack_zone zone;
	msgpack_object map; /* the reply map, {ok: true, ...} */
};

/* Sends the request in req and parses the reply into rep (the caller frees
 * it with sb_reply_free, also after an error). Errors: those of
 * sb_client_call, SB_ERR_PROTO, or the daemon's error code with its text as
 * the detail. */
int sb_request(sb_client *c, const msgpack_sbuffer *req, int timeout_ms, struct sb_reply *rep);

/* Frees what sb_request allocated (safe on a zeroed struct). */
void sb_reply_free(struct sb_reply *rep);

/* Called for each event in order; return non-zero to stop following (that
 * value is returned by sb_follow). */
typedef int (*sb_follow_fn)(void *ctx, const struct sb_event *ev, const msgpack_object *payload);

struct sb_follow_opts {
	const char *home;       /* state directory (or tls+tcp:// url) */
	const char *ca_pem;     /* CA for a remote daemon, or NULL */
	const char *token;      /* token for a remote daemon, or NULL */
	const char *run;        /* run id, or "" for the whole log */
	uint64_t from;          /* first offset wanted (0 or 1: the start) */
	int follow;             /* keep following live events */
	const char *const *types; /* NULL or NULL-terminated type prefixes */
	volatile sig_atomic_t *stop; /* set to end following (Ctrl-C) */
	uint64_t gaps;          /* out: times the live feed fell behind */
};

/* Delivers the events of o->run from o->from: first the backlog from the
 * log, then (if o->follow) the live feed. Live events already delivered are
 * dropped; a gap in the feed (a slow subscriber loses messages) is filled
 * from the log. Returns fn's non-zero value, SB_OK when the backlog is done
 * (no follow) or *o->stop was set, or an error. */
int sb_follow(sb_client *c, struct sb_follow_opts *o, sb_follow_fn fn, void *ctx);

#endif
