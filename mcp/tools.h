/* tools.h - the handlers the MCP tool table (mcp/tools.c) lists, defined
 * in mcp/tools_runs.c, tools_wait.c and tools_disk.c; what they share is in
 * mcp/toolkit.h. Every handler is an sb_mcp_tool fn (mcp/mcp.h): its
 * arguments were checked against its schema before it runs; it returns
 * SB_OK with *out (an object the caller owns), or an error whose detail
 * (sb_seterr) names the field at fault.
 */
#ifndef SB_MCP_TOOLS_H
#define SB_MCP_TOOLS_H

#include <jansson.h>

#include "mcp/mcp.h"

/* The handlers. */
int mcp_tool_run_start(struct sb_mcp_call *call, const json_t *args, json_t **out);
int mcp_tool_group_start(struct sb_mcp_call *call, const json_t *args, json_t **out);
int mcp_tool_runs_list(struct sb_mcp_call *call, const json_t *args, json_t **out);
int mcp_tool_groups_list(struct sb_mcp_call *call, const json_t *args, json_t **out);
int mcp_tool_events_read(struct sb_mcp_call *call, const json_t *args, json_t **out);
int mcp_tool_wait(struct sb_mcp_call *call, const json_t *args, json_t **out);
int mcp_tool_stop(struct sb_mcp_call *call, const json_t *args, json_t **out);
int mcp_tool_snapshot(struct sb_mcp_call *call, const json_t *args, json_t **out);
int mcp_tool_fork(struct sb_mcp_call *call, const json_t *args, json_t **out);
int mcp_tool_resume(struct sb_mcp_call *call, const json_t *args, json_t **out);
int mcp_tool_fs_read(struct sb_mcp_call *call, const json_t *args, json_t **out);
int mcp_tool_fs_list(struct sb_mcp_call *call, const json_t *args, json_t **out);
int mcp_tool_diff(struct sb_mcp_call *call, const json_t *args, json_t **out);

#endif
