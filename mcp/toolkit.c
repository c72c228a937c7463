/* toolkit.c - what the MCP tools' handlers share (mcp/toolkit.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "engine/payload.h"
#include "engine/text.h"
#include "mcp/toolkit.h"

int mcp_connect(sb_client **c)
{
	int rc = cli_connect(1, c);

	return rc ? sb_seterr(rc, "sanboxd: %s", sb_errmsg(rc)) : SB_OK;
}

int mcp_field_err(int rc, const char *field)
{
	char d[1024];

	snprintf(d, sizeof d, "%s", sb_errmsg(rc));
	return sb_seterr(rc, "%s: %s", field, d);
}

int mcp_resolve(sb_client *c, const char *field, const char *want, char run[SB_RUN_MAX])
{
	int rc = cli_resolve(c, want, run);

	if (rc == SB_ERR_NOTFOUND)
		return sb_seterr(rc, "%s: no run '%.63s'", field, want);
	return rc ? mcp_field_err(rc, field) : SB_OK;
}

int mcp_call(sb_client *c, struct cli_req *r, struct sb_reply *rep)
{
	return cli_call(c, r, rep);
}

json_t *mcp_reply_json(const struct sb_reply *rep)
{
	json_t *j = sb_msgpack_to_json(&rep->map);

	if (j)
		json_object_del(j, "ok");
	return j;
}

const char *mcp_arg_str(const json_t *args, const char *key)
{
	return json_string_value(json_object_get(args, key));
}

uint64_t mcp_arg_u64(const json_t *args, const char *key, uint64_t dflt)
{
	const json_t *v = json_object_get(args, key);

	if (json_is_integer(v) && json_integer_value(v) >= 0)
		return (uint64_t)json_integer_value(v);
	if (json_is_real(v) && json_real_value(v) >= 0)
		return (uint64_t)json_real_value(v);
	return dflt;
}

static json_t *usd(uint64_t nusd)
{
	return json_real((double)nusd / 1e9);
}

json_t *mcp_str(const char *s)
{
	size_t n;
	char *lossy;
	json_t *j;

	if (sb_utf8_valid(s, strlen(s)))
		return json_string(s);
	lossy = sb_utf8_lossy(s, strlen(s), &n);
	j = lossy ? json_stringn(lossy, n) : json_string("");
	free(lossy);
	return j;
}

json_t *mcp_run_json(const struct sb_runstate *rs)
{
	char status[32], progress[160];
	json_t *j;

	cli_status(rs, status, sizeof status);
	cli_progress(rs, progress, sizeof progress);
	j = json_pack("{s:o, s:o, s:o, s:o, s:o, s:s, s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:I, "
		      "s:o, s:o, s:I}",
		      "run", mcp_str(rs->run), "name", mcp_str(rs->name), "group",
		      mcp_str(rs->group), "template", mcp_str(rs->template), "model",
		      mcp_str(rs->model), "status", rs->status, "shown", mcp_str(status),
		      "reason", mcp_str(rs->reason), "exit_status",
		      rs->has_exit ? json_integer(rs->exit_status) : json_null(), "cost_usd",
		      usd(rs->cost_nusd), "budget_usd", usd(rs->budget_nusd), "created_ns",
		      (json_int_t)rs->created_ns, "ended_ns", (json_int_t)rs->ended_ns,
		      "events", (json_int_t)rs->events, "progress", mcp_str(progress),
		      "last_type", mcp_str(rs->last_type), "last_offset",
		      (json_int_t)rs->last_offset);
	return j;
}
