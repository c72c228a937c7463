# lib/mcp_sdk_install.sh - installs the official MCP TypeScript SDK, pinned,
# once into $BUILD/npm, and sets $sdk to it (sourced, after $SANBOX_HOME is
# set). Without node or npm, or offline with no copy there, the test is
# skipped (exit 0 with a SKIP line naming $1).
SDK_VERSION=1.32.2
sdk=$BUILD/npm/mcp-sdk-$SDK_VERSION
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	echo "SKIP $1: no node or npm"
	exit 0
fi
if [ ! -f "$sdk/node_modules/@modelcontextprotocol/sdk/package.json" ]; then
	mkdir -p "$sdk" && printf '{"private": true}\n' >"$sdk/package.json"
	if ! npm install --prefix "$sdk" --no-audit --no-fund --silent \
		"@modelcontextprotocol/sdk@$SDK_VERSION" >"$SANBOX_HOME/npm.log" 2>&1; then
		echo "SKIP $1: cannot install the SDK: $(tail -n 1 "$SANBOX_HOME/npm.log")"
		exit 0
	fi
fi
