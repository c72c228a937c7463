#!/bin/sh
# sanbox mcp through the official MCP TypeScript SDK's client, against a
# real daemon and microVMs (tests/e2e/lib/mcp_sdk.mjs says what it checks).
# The SDK is installed once, pinned, into $BUILD/npm; without node or npm,
# or offline with no copy there, the test is skipped.
. "$(dirname "$0")/lib/vm.sh"

SDK_VERSION=1.32.2
sdk=$BUILD/npm/mcp-sdk-$SDK_VERSION
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	echo "SKIP vm_mcp: no node or npm"
	exit 0
fi
if [ ! -f "$sdk/node_modules/@modelcontextprotocol/sdk/package.json" ]; then
	mkdir -p "$sdk" && printf '{"private": true}\n' >"$sdk/package.json"
	if ! npm install --prefix "$sdk" --no-audit --no-fund --silent \
		"@modelcontextprotocol/sdk@$SDK_VERSION" >"$SANBOX_HOME/npm.log" 2>&1; then
		echo "SKIP vm_mcp: cannot install the SDK: $(tail -n 1 "$SANBOX_HOME/npm.log")"
		exit 0
	fi
fi
node "$REPO/tests/e2e/lib/mcp_sdk.mjs" "$sdk" "$SB" "$REPO" 2>"$SANBOX_HOME/mcp.err" ||
	{ tail -n 5 "$SANBOX_HOME/mcp.err"; failures=$((failures + 1)); }
exit $((failures > 0))
