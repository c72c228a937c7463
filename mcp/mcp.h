/* mcp.h - sanbox mcp: a Model Context Protocol server on stdio or over
 * Streamable HTTP, so that an MCP client (Claude Code, Codex, an SDK)
 * dispatches and follows runs.
 *
 * mcp/jsonrpc.c frames and checks messages, mcp/server.c serves them (the
 * lifecycle, one thread per tool call, progress, cancellation) and is the
 * stdio transport, mcp/http.c the HTTP one, mcp/tools.c the tool table and
 * its handlers, mcp/resources.c the run resources and their
 * subscriptions, mcp/sink.c where notifications and progress go (which the
 * others use and which uses none of them). The handlers reach the daemon as the CLI does
 * (cli/cli.h: cli_connect, cli_call), so --home and --remote apply. Only
 * JSON-RPC goes to the output; logs go to stderr. See SPEC.md, "MCP
 * server".
 */
#ifndef SB_MCP_H
#define SB_MCP_H

#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>

struct sb_mcp;

/* Where messages go. stdio: one line each on the output; HTTP: the body
 * of the POST that carried the request, or the session's GET stream.
 * send takes msg (stolen; NULL: nothing sent). hold and release count the
 * users of a sink (a call served on its own thread holds its request's
 * until its response is sent); NULL when the sink outlives its server. */
struct sb_mcp_sink {
	void (*send)(struct sb_mcp_sink *k, json_t *msg);
	void (*hold)(struct sb_mcp_sink *k);
	void (*release)(struct sb_mcp_sink *k);
};

/* One request being served on its own thread. */
struct sb_mcp_call {
	struct sb_mcp *srv;
	struct sb_mcp_sink *sink;   /* where its progress and response go (held) */
	json_t *id;		    /* the request's id (owned) */
	json_t *token;		    /* its params._meta.progressToken (owned), or NULL */
	json_t *params;		    /* its params (owned), or NULL */
	char method[32];
	volatile sig_atomic_t stop; /* set when cancelled or the server ends */
	double progress;	    /* the last progress sent */
	int sent;		    /* a progress notification went out */
	struct sb_mcp_call *next;   /* in the server's list of calls in flight */
};

/* Serves MCP on in (requests) and out (responses and notifications) until
 * in ends or out fails; then stops the calls in flight and waits for them
 * (up to 10 s). Returns 0, or 1 when it could not start. */
int sb_mcp_serve(int in, int out);

/* Serves MCP's Streamable HTTP transport on addr (HOST:PORT; mcp/http.c)
 * until SIGINT or SIGTERM: with TLS when cert and key (PEM files) are
 * given, else plain HTTP on a loopback address only. Every request needs
 * a bearer token of home's daemon (engine/daemon/token.h). Returns 0, or
 * 1 when it could not start (the reason on stderr, one line). */
int sb_mcp_serve_http(const char *addr, const char *cert, const char *key);

/* A server: the state of one client (its lifecycle, calls in flight,
 * subscriptions), for one stdio stream or one HTTP session. notify (NULL:
 * none) gets the messages that answer no request (resource updates);
 * sb_mcp_set_notify changes it. The caller ends it with sb_mcp_end.
 * Returns NULL without memory (or when the tools' schemas do not parse). */
struct sb_mcp *sb_mcp_new(struct sb_mcp_sink *notify);

/* Points s's notifications at notify (held until replaced; NULL: dropped). */
void sb_mcp_set_notify(struct sb_mcp *s, struct sb_mcp_sink *notify);

/* Serves one message (len bytes of JSON text): its answers, and the
 * progress of a call it starts, go to reply. Returns what the message was
 * (enum sb_mcp_msg_kind of mcp/jsonrpc.h); for a request, *quick (when not
 * NULL) says whether it was answered before the return. */
int sb_mcp_message(struct sb_mcp *s, const char *text, size_t len,
		   struct sb_mcp_sink *reply, int *quick);

/* Whether initialize was answered; its revision into version (when not
 * NULL, 16 bytes). */
int sb_mcp_initialized(struct sb_mcp *s, char *version);

/* Whether s has calls in flight. */
int sb_mcp_busy(struct sb_mcp *s);

/* Ends s: stops its subscriptions and its calls in flight (their
 * responses dropped), waits up to wait_s seconds for them, and frees s
 * once the last has ended. */
void sb_mcp_end(struct sb_mcp *s, int wait_s);

/* The protocol revisions spoken, newest first; NULL-terminated. */
extern const char *const sb_mcp_versions[];

/* ---- sinks (mcp/sink.c) ---- */

/* Counts a user of k, or drops one (k->hold, k->release; nothing when k or
 * that function is NULL). */
void sb_mcp_sink_hold(struct sb_mcp_sink *k);
void sb_mcp_sink_release(struct sb_mcp_sink *k);

/* Where a server's notifications go: a sink (held while it is set; NULL:
 * they are dropped) that may be replaced while they are sent. */
struct sb_mcp_notify {
	pthread_mutex_t mu; /* sink */
	struct sb_mcp_sink *sink;
};

/* Sets n up with sink (held); sb_mcp_notify_free releases it. */
void sb_mcp_notify_init(struct sb_mcp_notify *n, struct sb_mcp_sink *sink);
void sb_mcp_notify_free(struct sb_mcp_notify *n);

/* Points n at sink (held until replaced; NULL: dropped), releasing the
 * one it replaces. */
void sb_mcp_notify_set(struct sb_mcp_notify *n, struct sb_mcp_sink *sink);

/* Writes msg (stolen) to n's sink, or drops it when there is none. */
void sb_mcp_notify_send(struct sb_mcp_notify *n, json_t *msg);

/* Sends notifications/progress for call when its request carried a
 * progressToken and progress is above the last one sent (the spec wants
 * it to grow); total 0: not known; msg may be NULL. */
void sb_mcp_progress(struct sb_mcp_call *call, double progress, double total,
		     const char *msg);

/* ---- tools (mcp/tools.c) ---- */

/* A tool: handler fills *out with its result (an object, owned by the
 * caller) or returns an error whose sb_errmsg detail names the field at
 * fault ("model: ...", "run: no run 'x'"), shown to the model. */
struct sb_mcp_tool {
	const char *name;
	const char *description; /* one line a model can act on */
	const char *schema;	 /* its input's JSON Schema, as JSON text */
	int readonly;		 /* changes nothing (annotations.readOnlyHint) */
	int (*fn)(struct sb_mcp_call *call, const json_t *args, json_t **out);
};

/* Parses every tool's schema once. Returns 0, or -1 when one does not
 * parse (a bug: told on stderr). */
int sb_mcp_tools_init(void);

/* tools/list's result: {tools: [...]}, a new reference. */
json_t *sb_mcp_tools_list(void);

/* tools/call of name with args (NULL: none): the CallToolResult, a new
 * reference; an unknown tool: NULL (a JSON-RPC error to answer). Arguments
 * that do not fit the tool's schema, and a handler's error, give a result
 * with isError true whose text names the field. */
json_t *sb_mcp_tool_call(struct sb_mcp_call *call, const char *name, const json_t *args);

/* ---- resources (mcp/resources.c) ---- */

/* resources/templates/list's result, a new reference. */
json_t *sb_mcp_resource_templates(void);

/* resources/list's result (the newest runs); NULL with the JSON-RPC error
 * in *code and err (cap bytes) when the daemon cannot answer. */
json_t *sb_mcp_resources_list(int *code, char *err, size_t cap);

/* resources/read of uri; NULL with *code (SB_RPC_NO_RESOURCE for an unknown
 * uri or run, else SB_RPC_INTERNAL) and err set. */
json_t *sb_mcp_resource_read(const char *uri, int *code, char *err, size_t cap);

/* Checks uri names a run resource and writes its run id into run (cap
 * bytes). Returns 0, or -1 (detail set) when it does not. */
int sb_mcp_resource_run(const char *uri, char *run, size_t cap);

/* A client's subscriptions (NULL: none yet), one at a time (the caller
 * serializes subscribe, unsubscribe and stop). */
struct sb_mcp_subs;

/* Subscribes to uri: its run (an id, a unique prefix or a name) is
 * resolved once to its whole id, and that uri is told to notify
 * (notifications/resources/updated) each time the run's status changes.
 * The first subscription makes *subs (notify must outlive it) and starts
 * the thread that follows the daemon's events. Errors: SB_ERR_INVAL (not
 * a run resource), SB_ERR_NOTFOUND and SB_ERR_AMBIGUOUS (the run),
 * SB_ERR_FULL (too many), SB_ERR_NOMEM, those of reaching the daemon or of
 * starting the follower. */
int sb_mcp_subscribe(struct sb_mcp_subs **subs, struct sb_mcp_notify *notify,
		     const char *uri);

/* Unsubscribes from uri, resolved the same way (as given when its run is
 * gone); nothing when subs is NULL or holds no such uri. */
void sb_mcp_unsubscribe(struct sb_mcp_subs *subs, const char *uri);

/* Stops the follower (at the server's end), waits for it, frees *subs and
 * sets it NULL. */
void sb_mcp_subs_stop(struct sb_mcp_subs **subs);

#endif
