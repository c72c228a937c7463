/* gateway.h - the model gateway: the only way a run reaches a model.
 *
 * An HTTP server (libmicrohttpd, a thread per connection) with no
 * listening socket: each connection is made by sb_gateway_connect for one
 * registered run, and the run manager makes one for each stream of the
 * run's channel tunnel (engine/gateway/tunnel.h). Nothing else on the host
 * can reach it. It speaks the OpenAI API (POST /v1/chat/completions,
 * GET /v1/models) and the Anthropic API (POST /v1/messages), stream and
 * non-stream. Each run is registered with its resolved models and budget
 * and gets a virtual key, worthless anywhere else and good only on the
 * run's own connections; the gateway maps the key to the run, checks the
 * model, reserves the call's worst case against the budget
 * (engine/gateway/meter.h), forwards only its API's allow-listed fields
 * with every bound of the output capped to it, swaps in the
 * provider's key, forwards the call with libcurl, meters the answer, and
 * records it: the request and answer bodies as blobs, an agent.message and
 * an agent.usage.updated event (source gateway), appended in one unit
 * before the answer's last byte leaves. All libmicrohttpd and libcurl use
 * is in gateway.c.
 *
 * Fair share: at most max_conns connections at once, and each run at most
 * its share of them, clamp(max_conns / registered runs, 8, 64). A
 * request's headers must be complete within header_timeout_s of the
 * connection's start or of the previous request's end (so an idle
 * keep-alive connection closes after that long too), and its body within
 * body_timeout_s of its headers; a connection past its deadline is closed.
 * A call in progress (forwarded upstream, streamed back) is never cut by
 * these.
 *
 * Answers of the gateway itself: 400 bad request (or a refused field, or
 * an n the budget left cannot pay for), 401 unknown key, 403
 * model not allowed (or the key of another run), 402 budget spent, the
 * run's or its group's (then budget.exceeded is written once and, if the
 * run's policy says so, on_budget is called), 413 body above 16 MiB, 429 the rest of the budget
 * is held by calls in flight (retry), 502 the provider is unreachable.
 */
#ifndef SB_GATEWAY_H
#define SB_GATEWAY_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gateway/meter.h"
#include "engine/gateway/models.h"
#include "engine/gateway/rerun.h"
#include "engine/log/event.h"
#include "engine/log/log.h"

typedef struct sb_gateway sb_gateway;

#define SB_VKEY_MAX 48 /* a virtual key and its NUL */

#define SB_GATEWAY_MAX_CONNS	  512 /* the defaults of sb_gateway_opts */
#define SB_GATEWAY_HEADER_TIMEOUT 10
#define SB_GATEWAY_BODY_TIMEOUT	  60

struct sb_gateway_opts {
	sb_log *log;		   /* calls are recorded here; must outlive the gateway */
	unsigned max_conns;	   /* connections at once, all runs (0: 512) */
	unsigned header_timeout_s; /* a request's headers (0: 10) */
	unsigned body_timeout_s;   /* a request's body, after its headers (0: 60) */
	/* Called on a gateway thread when a run whose policy is to stop has
	 * spent its budget; run is valid during the call. May be NULL. */
	void (*on_budget)(void *ctx, const char *run);
	/* Called on a gateway thread once a model call of run is recorded
	 * (run valid during the call). May be NULL. */
	void (*on_call)(void *ctx, const char *run);
	/* Called on a gateway thread when a re-run that stops there departed
	 * from its record (rerun.diverged is recorded); run is valid during
	 * the call. May be NULL. */
	void (*on_diverged)(void *ctx, const char *run);
	void *ctx;
};

/* One model a run may use, fully resolved. */
struct sb_gateway_model {
	struct sb_model model;
	char base_url[SB_URL_MAX]; /* the provider's, ending in /v1 */
	unsigned apis;		   /* SB_API_* the provider speaks */
	const char *key;	   /* the provider's API key, or NULL */
};

struct sb_gateway_run {
	const char *run;
	const char *key;   /* its virtual key ("sk-sb-..."), or NULL: a new one */
	const char *alias; /* another run's key its guest holds, or NULL: a fork
			    * of a memory snapshot continues processes given
			    * its parent's key; good on this run's connections
			    * only, as this run's own */
	uint64_t budget_nusd;
	uint64_t spent_nusd; /* spent already (a run registered again) */
	int stop_on_budget;  /* 1: call on_budget once it is spent */
	/* Its group (or NULL) and the group's budget (0: none): every call
	 * of the group's registered runs is reserved against both budgets,
	 * and the group's is kept while any of them is registered (a run
	 * registered later takes it as it is). group_spent_nusd: what the
	 * group spent already, when it is registered first. */
	const char *group;
	uint64_t group_budget_nusd, group_spent_nusd;
	const struct sb_gateway_model *models;
	size_t nmodels;
	/* A re-run's recorded calls (engine/gateway/rerun.h), or NULL: its
	 * k-th call is answered with the k-th recorded answer while its
	 * requests keep to the record. The gateway owns it once
	 * sb_gateway_run_add succeeded (the caller still does on an error). */
	sb_rerun *rerun;
};

/* Starts the gateway (it listens nowhere: see sb_gateway_connect). The
 * caller closes it. Errors: SB_ERR_IO (libmicrohttpd or a thread would not
 * start: the detail says why), SB_ERR_NOMEM. */
int sb_gateway_open(const struct sb_gateway_opts *o, sb_gateway **out);

/* Stops the gateway: closes its connections, waits for calls in flight to
 * end (NULL is fine). */
void sb_gateway_close(sb_gateway *gw);

/* Registers run r (everything is copied; provider keys into guarded
 * memory) and writes its virtual key into key (r->key, or a new one). Errors:
 * SB_ERR_EXISTS (run already registered), SB_ERR_INVAL (no model), SB_ERR_NOMEM. */
int sb_gateway_run_add(sb_gateway *gw, const struct sb_gateway_run *r,
		       char key[SB_VKEY_MAX]);

/* Unregisters run: its key stops working at once; calls in flight finish
 * and are recorded. Unknown runs are ignored. */
void sb_gateway_run_remove(sb_gateway *gw, const char *run);

/* Copies run's budget (limit, spent, reserved) into *b.
 * Errors: SB_ERR_NOTFOUND. */
int sb_gateway_run_budget(sb_gateway *gw, const char *run, struct sb_budget *b);

/* Opens a connection to the gateway for run and writes the caller's end,
 * a connected AF_UNIX stream socket (non-blocking, close-on-exec; the
 * caller closes it), into *fd. The connection is run's: a request on it
 * with another run's key gets 403. It counts against run's share until the
 * gateway closes its end (the caller then reads EOF). Errors:
 * SB_ERR_NOTFOUND (run is not registered), SB_ERR_FULL (run holds its
 * share, or the gateway max_conns), SB_ERR_IO (no socket pair, or
 * libmicrohttpd refused the connection), SB_ERR_NOMEM. */
int sb_gateway_connect(sb_gateway *gw, const char *run, int *fd);

#endif
