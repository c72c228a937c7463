/* cmd_mcp.c - sanbox mcp: a Model Context Protocol server on stdin and
 * stdout (mcp/mcp.h), for Claude Code, Codex or any MCP client. */
#include <stdio.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "mcp/mcp.h"

int cmd_mcp(int argc, char **argv)
{
	int rc, out;

	if ((rc = cli_parse_opts(argc, argv, "mcp", NULL)) != CLI_GO_ON)
		return rc;
	if (optind != argc)
		return cli_usage("mcp");
	/* Only JSON-RPC goes to the client: the server writes to a copy of
	 * stdout, and whatever else would print there goes to stderr. */
	fflush(stdout);
	if ((out = dup(1)) < 0 || dup2(2, 1) < 0)
		return cli_fail(SB_ERR_IO, "mcp: cannot set up stdout");
	rc = sb_mcp_serve(0, out);
	close(out);
	return rc ? CLI_EXIT_ERROR : CLI_EXIT_OK;
}
