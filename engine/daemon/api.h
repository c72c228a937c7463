/* api.h - the control API (SPEC.md, "Control API"): a request is one
 * msgpack map {op, ...}, its reply {ok: true, ...} or {ok: false, error,
 * code}.
 *
 * Requests come from the socket servers (engine/daemon/sp.h) and are
 * answered out of order: each is parsed and served on a worker thread,
 * except the ops that change the run manager's state (run.create,
 * run.stop, group.stop, daemon.stop), which run on the daemon's loop. A
 * slow request never holds up the others. Nothing a client sends can stop
 * the daemon: a malformed, unknown or oversized request gets an error reply.
 */
#ifndef SB_API_H
#define SB_API_H

#include <msgpack.h>
#include <stddef.h>

#include "engine/loop.h"
#include "engine/daemon/sp.h"
#include "engine/work.h"
#include "engine/log/log.h"
#include "projections/projection.h"

struct sb_runs;
typedef struct sb_api sb_api;

/* What the API serves from; everything must outlive it. */
struct sb_api_env {
	const char *home;
	sb_log *log;
	sb_projector *proj;
	struct sb_runs *runs;  /* used on loop only (but the calls runs.h
				* allows on any thread: sb_runs_disk_open,
				* _readers, _layer_remove, _release, _usage) */
	sb_loop *loop;	       /* the daemon's loop */
	sb_work *work;	       /* the workers requests are served on */
	sb_sp *local, *remote; /* for health's counters (remote may be NULL) */
	double started;	       /* sb_loop_now(loop) at the daemon's start */
	/* Called on the loop for daemon.stop. */
	void (*stop)(void *ctx);
	/* 1 once the daemon is stopping: requests are refused. Any thread. */
	int (*stopping)(void *ctx);
	void *ctx;
};

/* Makes the API over env (copied). Errors: SB_ERR_NOMEM. */
int sb_api_open(const struct sb_api_env *env, sb_api **out);

/* Tells the API the socket servers whose counters health reports (they
 * are opened after it, as the API is their callback's context). */
void sb_api_set_servers(sb_api *a, sb_sp *local, sb_sp *remote);

/* Frees the API (NULL is fine). Requests still being served must be
 * finished first (close the workers before it). */
void sb_api_close(sb_api *a);

/* The socket servers' request callback (struct sb_sp_ops.request); ctx is
 * the sb_api. Takes body. */
void sb_api_request(void *ctx, sb_sp_req *req, void *body, size_t len);

/* The remote server's authenticate callback (struct sb_sp_ops.authenticate):
 * the request's token, checked against home/tokens. */
int sb_api_authenticate(void *ctx, const void *body, size_t len, int complete, char *who,
			size_t cap);

/* Packs the reply that answers a request refused for its token. */
void sb_api_pack_denied(msgpack_sbuffer *out);

#endif
