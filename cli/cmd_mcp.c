/* cmd_mcp.c - sanbox mcp: a Model Context Protocol server on stdin and
 * stdout, or with --http on MCP's Streamable HTTP transport (mcp/mcp.h),
 * for Claude Code, Codex or any MCP client. */
#include <stdio.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "mcp/mcp.h"

/* Parses --http ADDR, --cert PEM and --key PEM. Returns CLI_GO_ON or the
 * exit code. */
static int mcp_parse(int argc, char **argv, const char **http, const char **cert,
		     const char **key)
{
	static const struct option opts[] = {
		CLI_OPT_HELP,
		{"http", required_argument, NULL, 'H'},
		{"cert", required_argument, NULL, 'c'},
		{"key", required_argument, NULL, 'k'},
		{NULL, 0, NULL, 0},
	};
	int ch;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("mcp");
		case 'H': *http = optarg; break;
		case 'c': *cert = optarg; break;
		case 'k': *key = optarg; break;
		default: return cli_badopt("mcp", argv, ch);
		}
	}
	if (optind != argc)
		return cli_usage("mcp");
	if ((*cert || *key) && !*http)
		return cli_fail_code(CLI_EXIT_USAGE, "mcp: --cert and --key go with --http");
	if (!*cert != !*key)
		return cli_fail_code(CLI_EXIT_USAGE, "mcp: give both --cert and --key, or neither");
	return CLI_GO_ON;
}

int cmd_mcp(int argc, char **argv)
{
	const char *http = NULL, *cert = NULL, *key = NULL;
	int rc, out;

	if ((rc = mcp_parse(argc, argv, &http, &cert, &key)) != CLI_GO_ON)
		return rc;
	if (http) { /* its tokens are those of this host's daemon */
		if ((rc = cli_local_only("mcp --http")) != CLI_EXIT_OK)
			return rc;
		return sb_mcp_serve_http(http, cert, key) ? CLI_EXIT_ERROR : CLI_EXIT_OK;
	}
	/* Only JSON-RPC goes to the client: the server writes to a copy of
	 * stdout, and whatever else would print there goes to stderr. */
	fflush(stdout);
	if ((out = dup(1)) < 0 || dup2(2, 1) < 0)
		return cli_fail(SB_ERR_IO, "mcp: cannot set up stdout");
	rc = sb_mcp_serve(0, out);
	close(out);
	return rc ? CLI_EXIT_ERROR : CLI_EXIT_OK;
}
