#!/bin/sh
# sanbox mcp through the official MCP TypeScript SDK's client, against a
# real daemon and microVMs (tests/e2e/lib/mcp_sdk.mjs says what it checks).
# The SDK is installed once, pinned, into $BUILD/npm; without node or npm,
# or offline with no copy there, the test is skipped.
. "$(dirname "$0")/lib/vm.sh"
. "$(dirname "$0")/lib/mcp_sdk_install.sh" vm_mcp

node "$REPO/tests/e2e/lib/mcp_sdk.mjs" "$sdk" "$SB" "$REPO" 2>"$SANBOX_HOME/mcp.err" ||
	{ tail -n 5 "$SANBOX_HOME/mcp.err"; failures=$((failures + 1)); }
exit $((failures > 0))
