/* gateway.h - the model gateway: the only way a run reaches a model.
 *
 * An HTTP server on 127.0.0.1 (libmicrohttpd, a thread per connection)
 * that a guest reaches through its channel tunnel (engine/tunnel.h). It
 * speaks the OpenAI API (POST /v1/chat/completions, GET /v1/models) and
 * the Anthropic API (POST /v1/messages), stream and non-stream. Each run is
 * registered with its resolved models and budget and gets a virtual key,
 * worthless anywhere else; the gateway maps the key to the run, checks the
 * model, reserves the call's worst case against the budget (engine/meter.h)
 * and caps max_tokens to it, swaps in the provider's key, forwards the call
 * with libcurl, meters the answer, and records it: the request and answer
 * bodies as blobs, an agent.message and an agent.usage.updated event
 * (source gateway), appended in one unit before the answer's last byte
 * leaves. All libmicrohttpd and libcurl use is in gateway.c.
 *
 * Answers of the gateway itself: 400 bad request, 401 unknown key, 403
 * model not allowed (or the key of another run on this run's tunnel), 402
 * budget spent (then budget.exceeded is written once and, if the run's
 * policy says so, on_budget is called), 429 the rest of the budget is
 * held by calls in flight (retry), 502 the provider is unreachable.
 */
#ifndef SB_GATEWAY_H
#define SB_GATEWAY_H

#include <stddef.h>
#include <stdint.h>

#include "engine/log/event.h"
#include "engine/log/log.h"
#include "engine/gateway/meter.h"
#include "engine/gateway/models.h"

typedef struct sb_gateway sb_gateway;

#define SB_VKEY_MAX 48 /* a virtual key and its NUL */

struct sb_gateway_opts {
	sb_log *log;   /* calls are recorded here; must outlive the gateway */
	uint16_t port; /* 0: an ephemeral port */
	/* Called on a gateway thread when a run whose policy is to stop has
	 * spent its budget; run is valid during the call. May be NULL. */
	void (*on_budget)(void *ctx, const char *run);
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
	const char *key;     /* its virtual key ("sk-sb-..."), or NULL: a new one */
	uint64_t budget_nusd;
	uint64_t spent_nusd; /* spent already (a run registered again) */
	int stop_on_budget; /* 1: call on_budget once it is spent */
	const struct sb_gateway_model *models;
	size_t nmodels;
};

/* Starts the gateway on 127.0.0.1. Errors: SB_ERR_IO (cannot listen: the
 * detail says why), SB_ERR_NOMEM. */
int sb_gateway_open(const struct sb_gateway_opts *o, sb_gateway **out);

/* The port it listens on. */
uint16_t sb_gateway_port(const sb_gateway *gw);

/* Stops the gateway: waits for calls in flight to end (NULL is fine). */
void sb_gateway_close(sb_gateway *gw);

/* Registers run r (everything is copied; provider keys into guarded
 * memory) and writes its virtual key into key (r->key, or a new one). Errors: SB_ERR_EXISTS
 * (run already registered), SB_ERR_INVAL (no model), SB_ERR_NOMEM. */
int sb_gateway_run_add(sb_gateway *gw, const struct sb_gateway_run *r,
		       char key[SB_VKEY_MAX]);

/* Unregisters run: its key stops working at once; calls in flight finish
 * and are recorded. Unknown runs are ignored. */
void sb_gateway_run_remove(sb_gateway *gw, const char *run);

/* Copies run's budget (limit, spent, reserved) into *b.
 * Errors: SB_ERR_NOTFOUND. */
int sb_gateway_run_budget(sb_gateway *gw, const char *run, struct sb_budget *b);

/* Ties connections from 127.0.0.1:client_port to run: such a connection
 * may only use run's key (the run manager binds each tunnel connection it
 * makes). Errors: SB_ERR_NOMEM. */
int sb_gateway_bind(sb_gateway *gw, uint16_t client_port, const char *run);

/* Removes the tie of client_port. */
void sb_gateway_unbind(sb_gateway *gw, uint16_t client_port);

#endif
