/* toolkit.h - what the MCP tools' handlers (mcp/tools_*.c) and the run
 * resources (mcp/resources.c) share: reaching the daemon, reading a tool's
 * arguments, naming a field in an error and showing a run as JSON. It
 * calls nothing of the tool table (mcp/tools.c) or its handlers.
 */
#ifndef SB_MCP_TOOLKIT_H
#define SB_MCP_TOOLKIT_H

#include <jansson.h>
#include <stdint.h>

#include "cli/cli.h"
#include "projections/views.h"

/* Connects to the daemon as the CLI does (one is started when none runs).
 * Errors: those of cli_connect. */
int mcp_connect(sb_client **c);

/* Resolves want (an id, a unique prefix or a name) of the argument field
 * into run. Errors: SB_ERR_NOTFOUND ("FIELD: no run 'X'"),
 * SB_ERR_AMBIGUOUS, those of the call, each detail starting "FIELD: ". */
int mcp_resolve(sb_client *c, const char *field, const char *want, char run[SB_RUN_MAX]);

/* Sends r and parses the reply into rep (freed by the caller, also after
 * an error). Errors: as cli_call. */
int mcp_call(sb_client *c, struct cli_req *r, struct sb_reply *rep);

/* The reply map as JSON without its "ok": a new reference, or NULL. */
json_t *mcp_reply_json(const struct sb_reply *rep);

/* A run's state as a tool shows it: id, name, group, template, model,
 * status, reason, exit_status (null unless its harness exited), cost and
 * budget (USD), times (ns since the epoch), progress and its last event.
 * A new reference, or NULL. */
json_t *mcp_run_json(const struct sb_runstate *rs);

/* s as a JSON string; bytes that are not UTF-8 become U+FFFD. */
json_t *mcp_str(const char *s);

/* The argument key of args: its string (NULL when absent), its integer
 * (dflt when absent). */
const char *mcp_arg_str(const json_t *args, const char *key);
uint64_t mcp_arg_u64(const json_t *args, const char *key, uint64_t dflt);

/* Errors that name the field and say why ("FIELD: detail"): rc's detail
 * prefixed. Returns rc. */
int mcp_field_err(int rc, const char *field);

#endif
