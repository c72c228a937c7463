# lib/mcp_sdk_install.sh - installs the official MCP TypeScript SDK, pinned,
# once into $BUILD/npm, and sets $sdk to it (sourced, after $SANBOX_HOME is
# set). Without node or npm, or offline with no copy there, the test is
# skipped (exit 0 with a SKIP line naming $1).
SDK_VERSION=1.32.2
sdk=$BUILD/npm/mcp-sdk-$SDK_VERSION
. "$(dirname "$0")/lib/npm_pin.sh"
npm_pin "$1" "$sdk" "@modelcontextprotocol/sdk@$SDK_VERSION" node_modules/@modelcontextprotocol/sdk/package.json
