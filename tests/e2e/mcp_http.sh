#!/bin/sh
# sanbox mcp --http (MCP's Streamable HTTP transport) through the official
# TypeScript SDK's client, with no microVM (a run stays up without a guest):
# tests/e2e/lib/mcp_http.mjs says what it checks. Then --http refuses a
# non-loopback address without TLS, and serves over TLS with --cert/--key.
. "$(dirname "$0")/lib/bootless.sh"
REPO=$(cd "$(dirname "$0")/../.." && pwd)
. "$(dirname "$0")/lib/mcp_sdk_install.sh" mcp_http

"$SB" daemon start >/dev/null 2>&1 || fail "daemon start"
runs_hang
token=$("$SB" admin token create mcp-http) || fail "token create"
# serve: starts sanbox mcp ARGS... in the background, sets $port.
serve() {
	"$SB" mcp "$@" 2>"$tmp/mcp.err" &
	mcp_pid=$!
	bg="$bg $mcp_pid"
	port=""
	for i in $(seq 1 50); do
		port=$(sed -n 's/.*on port \([0-9]*\).*/\1/p' "$tmp/mcp.err")
		[ -n "$port" ] && return 0
		sleep 0.1
	done
	fail "mcp --http did not start: $(cat "$tmp/mcp.err")"
}
serve --http 127.0.0.1:0
node "$REPO/tests/e2e/lib/mcp_http.mjs" "$sdk" "http://127.0.0.1:$port/mcp" "$token" \
	2>"$tmp/node.err" || fail "$(tail -n 5 "$tmp/node.err")"
kill "$mcp_pid"
wait "$mcp_pid" || fail "mcp --http: exit $? at SIGTERM"

out=$("$SB" mcp --http 0.0.0.0:0 2>&1) && fail "a non-loopback address without TLS served"
case $out in "sanbox: mcp: --http 0.0.0.0:0: not a loopback address"*) echo "PASS no TLS off loopback" ;;
*) fail "no TLS off loopback: $out" ;; esac

openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=localhost" \
	-keyout "$tmp/k.pem" -out "$tmp/c.pem" >/dev/null 2>&1 || fail "openssl"
serve --http 0.0.0.0:0 --cert "$tmp/c.pem" --key "$tmp/k.pem"
got=$(curl -s --cacert "$tmp/c.pem" -H "Authorization: Bearer $token" \
	-H "Accept: application/json, text/event-stream" --resolve "localhost:$port:127.0.0.1" \
	-d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}' \
	"https://localhost:$port/mcp")
case $got in *'"serverInfo":{"name":"sanbox"'*) echo "PASS initialize over TLS" ;;
*) fail "initialize over TLS: $got" ;; esac
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$tmp/c.pem" \
	--resolve "localhost:$port:127.0.0.1" -d '{}' "https://localhost:$port/mcp")
[ "$code" = 401 ] && echo "PASS TLS without a token: 401" || fail "TLS without a token: $code"
kill "$mcp_pid"
