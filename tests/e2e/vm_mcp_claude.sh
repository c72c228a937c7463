#!/bin/sh
# Claude Code itself as the MCP client: Claude Code (npm
# @anthropic-ai/claude-code, pinned, installed once into $BUILD/npm) runs
# non-interactively on the host with its model endpoint at the built-in
# model stub and `sanbox mcp` as its MCP server. The stub answers with a
# call of Sanbox's run_start tool, then of its wait tool, then with text;
# the run starts and ends in a microVM, and Claude Code gets its results.
# Without node or npm, or offline with no copy in $BUILD/npm, it is skipped.
. "$(dirname "$0")/lib/vm.sh"

CC_VERSION=2.1.332
cc=$BUILD/npm/claude-code-$CC_VERSION
. "$(dirname "$0")/lib/npm_pin.sh"
npm_pin vm_mcp_claude "$cc" "@anthropic-ai/claude-code@$CC_VERSION" node_modules/.bin/claude

work=$SANBOX_HOME/cc
mkdir -p "$work/home"
stub_pid=
cc_cleanup() { [ -n "$stub_pid" ] && kill "$stub_pid" 2>/dev/null; }
vm_extra_cleanup=cc_cleanup

cat >"$work/script.json" <<'JSON'
{"turns": [
 {"text": "I will start a run in a sandbox.", "tool_calls": [
   {"name": "mcp__sanbox__run_start", "arguments": {"name": "from-claude", "command":
     ["sh", "-c", "echo made-by-claude > /workspace/claude.txt; echo ok"]}}]},
 {"tool_calls": [{"name": "mcp__sanbox__wait", "arguments": {"runs": ["from-claude"], "timeout_s": 600}}]},
 {"text": "The sandbox run finished."}
]}
JSON
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$BUILD/sanbox-model-stub" --listen "127.0.0.1:$port" --script "$work/script.json" \
	--log "$work/stub.log" >"$work/stub.out" 2>&1 &
stub_pid=$!
i=0
until curl -s "http://127.0.0.1:$port/v1/models" >/dev/null; do
	i=$((i + 1))
	[ $i -lt 100 ] || { bad "the stub did not start" "$(cat "$work/stub.out")"; exit 1; }
	sleep 0.1
done
printf '{"mcpServers": {"sanbox": {"command": "%s", "args": ["--home", "%s", "mcp"]}}}\n' \
	"$SB" "$SANBOX_HOME" >"$work/mcp.json"

HOME=$work/home ANTHROPIC_BASE_URL=http://127.0.0.1:$port ANTHROPIC_API_KEY=sk-stub \
	CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 \
	timeout 600 "$cc/node_modules/.bin/claude" -p "Start a sandbox run" \
	--output-format stream-json --verbose --model claude-sonnet-4-5 \
	--mcp-config "$work/mcp.json" --strict-mcp-config \
	--allowedTools mcp__sanbox__run_start,mcp__sanbox__wait \
	>"$work/out.jsonl" 2>"$work/err.txt"
rc=$?
[ $rc = 0 ] && ok "Claude Code ran to its end" ||
	bad "claude" "exit $rc: $(tail -n 3 "$work/err.txt") $(tail -c 400 "$work/out.jsonl")"

# what Claude Code got back from Sanbox's tools, and its final answer
python3 - "$work/out.jsonl" >"$work/run_id" <<'PY' && ok "Claude Code got the run's id and its end from Sanbox" || bad "Claude Code's results" "$(cat "$work/run_id")"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
results = [c for e in evs if e.get("type") == "user"
           for c in e["message"]["content"] if c.get("type") == "tool_result"]
def text(c):
    v = c.get("content")
    return v if isinstance(v, str) else "".join(x.get("text", "") for x in v)
assert len(results) == 2, results
assert not any(c.get("is_error") for c in results), results
started = json.loads(text(results[0]))
waited = json.loads(text(results[1]))
assert waited["done"] is True, waited
assert waited["runs"][0]["run"] == started["run"], (started, waited)
assert waited["runs"][0]["status"] == "exited" and waited["runs"][0]["exit_status"] == 0, waited
final = [e for e in evs if e.get("type") == "result"][-1]
assert final["subtype"] == "success" and final["result"] == "The sandbox run finished.", final
print(started["run"])
PY
R=$(cat "$work/run_id")
[ "$("$SB" inspect "$R" --json 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin)["run"]; print(r["name"], r["status"], r["exit_status"])')" = "from-claude exited 0" ] &&
	ok "the run it started ran in a microVM and exited 0" || bad "inspect" "$("$SB" inspect "$R" 2>&1 | head -5)"
[ "$("$SB" fs cat "$R" /workspace/claude.txt 2>&1)" = made-by-claude ] &&
	ok "the run's disk has the file its command wrote" || bad "fs cat" "$("$SB" fs cat "$R" /workspace/claude.txt 2>&1)"
[ "$(grep -c '"path":"/v1/messages"' "$work/stub.log")" -ge 3 ] &&
	ok "Claude Code asked the stub three times" || bad "stub log" "$(cat "$work/stub.log")"
exit $((failures > 0))
