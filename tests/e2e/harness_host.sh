#!/bin/sh
# sanbox-harness runs natively against sanbox-model-stub: the scripted tools
# write their files, the JSON event lines come out in order, and the exit
# status tells success (0), HTTP errors and unreachable models (2), an
# exhausted budget (3, HTTP 402) and the turn limit (4).
BUILD=${BUILD:-build}
STUB=$(realpath "$BUILD/sanbox-model-stub")
HARNESS=$(realpath "$BUILD/sanbox-harness")
SCRIPTS=$(realpath tools/stub)
tmp=$(mktemp -d)
pids=""
trap 'for p in $pids; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
fail() { echo "FAIL harness_host: $*"; exit 1; }
[ -x "$STUB" ] && [ -x "$HARNESS" ] || fail "stub or harness not built"

# start_stub NAME ARGS...: starts a stub, sets $url to its base URL.
start_stub() {
	name=$1
	shift
	"$STUB" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
	pids="$pids $!"
	i=0
	until grep -qs '^listening ' "$tmp/$name.out"; do
		i=$((i + 1))
		[ $i -lt 100 ] || fail "stub $name did not start: $(cat "$tmp/$name.err")"
		sleep 0.05
	done
	url=http://$(sed 's/^listening //' "$tmp/$name.out")/v1
}
# run_in WORKDIR COMMAND...: runs the command there; sets $rc.
run_in() {
	(cd "$1" && shift && "$@" >"$tmp/stdout" 2>"$tmp/stderr")
	rc=$?
}
ev() { jq -sc "$1" "$tmp/events"; }

start_stub main --script-dir "$SCRIPTS" --log "$tmp/log"
export OPENAI_BASE_URL="$url" OPENAI_API_KEY=vk-run-1 SANBOX_EVENTS="$tmp/events"
unset SANBOX_MODEL SANBOX_PROMPT SANBOX_CONVERSATION

# -- the scripted run: shell, write_file, final "done"
mkdir "$tmp/ws"
run_in "$tmp/ws" "$HARNESS" --model stub/scripted make some files
[ "$rc" = 0 ] || fail "scripted run exited $rc: $(cat "$tmp/stderr")"
[ "$(cat "$tmp/stdout")" = done ] || fail "final answer: $(cat "$tmp/stdout")"
[ "$(cat "$tmp/ws/hello.txt")" = "hello from the stub" ] || fail "shell tool did not write hello.txt"
printf '# Result\nThe scripted agent wrote this file.\n' | cmp -s - "$tmp/ws/notes/result.md" ||
	fail "write_file did not write notes/result.md"
[ "$(wc -l <"$tmp/events")" = "$(ev length)" ] || fail "events are not one JSON value a line"
[ "$(ev '[.[].type]')" = '["agent.turn.started","agent.tool.started","agent.tool.completed",'\
'"agent.turn.completed","agent.turn.started","agent.tool.started","agent.tool.completed",'\
'"agent.turn.completed","agent.turn.started","agent.message","agent.turn.completed"]' ] ||
	fail "event order: $(ev '[.[].type]')"
[ "$(ev '[.[] | select(.type == "agent.turn.started") | .payload.turn]')" = "[1,2,3]" ] ||
	fail "turn.started numbers: $(ev '[.[] | select(.type == "agent.turn.started")]')"
[ "$(ev '[.[] | select(.type == "agent.turn.completed") | .payload.turn]')" = "[1,2,3]" ] ||
	fail "turn.completed numbers"
[ "$(ev '[.[] | select(.type == "agent.tool.completed") | [.payload.tool, .payload.exit]]')" = \
	'[["shell",0],["write_file",0]]' ] || fail "tools and exit codes: $(ev '.')"
ev '.[] | select(.type == "agent.tool.started" and .payload.tool == "shell") |
	.payload.args | contains("> hello.txt")' | grep -qx true || fail "shell args summary"
ev '[.[] | select(.type == "agent.tool.completed") | .payload.duration_ms | type] |
	all(. == "number")' | grep -qx true || fail "duration_ms"
[ "$(ev '.[] | select(.type == "agent.message") | .payload')" = \
	'{"role":"assistant","text":"done"}' ] || fail "agent.message"
# the virtual key reached the provider on all three calls
[ "$(jq -sc '[.[] | .auth] | unique' "$tmp/log")" = '["Bearer vk-run-1"]' ] ||
	fail "auth header: $(cat "$tmp/log")"
[ "$(wc -l <"$tmp/log")" = 3 ] || fail "expected 3 model calls, log has $(wc -l <"$tmp/log")"

# -- report_progress: agent.progress in place of the tool's events; a label the
# host would refuse is escaped and cut to 64 bytes, a bad count is a tool error
rm -f "$tmp/events"
mkdir "$tmp/wsp"
run_in "$tmp/wsp" "$HARNESS" --model stub/progress check the reports
[ "$rc" = 0 ] || fail "progress run exited $rc: $(cat "$tmp/stderr")"
[ "$(ev '[.[] | select(.type == "agent.progress") | .payload]')" = \
'[{"label":"reports checked","count":0,"total":2},{"label":"reports checked","count":1,"total":2},'\
'{"label":"reports checked","count":2,"total":2}]' ] || fail "progress events: $(ev '.')"
[ "$(ev '[.[] | select(.type == "agent.tool.completed") | .payload.tool]')" = '["shell","shell"]' ] ||
	fail "report_progress made tool events: $(ev '.')"
long=$(printf 'x%.0s' $(seq 1 80))
printf '{"turns": [{"tool_calls": [{"name": "report_progress", "arguments": {"label": "a\\u001b[2J\\nb%s", "count": 3}},
 {"name": "report_progress", "arguments": {"label": "x", "count": -1}}]}, {"text": "done"}]}\n' "$long" >"$tmp/hostile.json"
start_stub hostile --script "$tmp/hostile.json"
rm -f "$tmp/events"
run_in "$tmp/wsp" env OPENAI_BASE_URL="$url" "$HARNESS" go
[ "$rc" = 0 ] || fail "hostile progress run exited $rc: $(cat "$tmp/stderr")"
[ "$(ev '[.[] | select(.type == "agent.progress") | .payload] | length')" = 1 ] ||
	fail "a count of -1 was reported: $(ev '.')"
label=$(jq -rs '.[] | select(.type == "agent.progress") | .payload.label' "$tmp/events")
[ "$label" = "$(printf 'a\\x1b[2J\\nb%s' "$long" | cut -c1-64)" ] && [ ${#label} = 64 ] ||
	fail "hostile label: '$label'"

# -- prompt and model from the environment; events into a FIFO
rm -f "$tmp/events"
mkfifo "$tmp/fifo"
cat "$tmp/fifo" >"$tmp/events" &
reader=$!
run_in "$tmp/ws" env SANBOX_EVENTS="$tmp/fifo" SANBOX_PROMPT="say something" \
	SANBOX_MODEL=stub/echo "$HARNESS"
wait "$reader"
[ "$rc" = 0 ] || fail "echo run exited $rc"
grep -q '^echo: ' "$tmp/stdout" || fail "echo answer: $(cat "$tmp/stdout")"
[ "$(ev '[.[].type] | join(" ")')" = '"agent.turn.started agent.message agent.turn.completed"' ] ||
	fail "FIFO events: $(cat "$tmp/events")"

# -- no $SANBOX_CONVERSATION: nothing kept anywhere; with it, kept and continued
[ ! -e /var/lib/sanbox/conversation.json ] || [ "$(stat -c %Y /var/lib/sanbox/conversation.json)" -lt "$(stat -c %Y "$tmp")" ] ||
	fail "a harness without SANBOX_CONVERSATION wrote /var/lib/sanbox/conversation.json"
conv="$tmp/state/conversation.json"
run_in "$tmp/ws" env SANBOX_CONVERSATION="$conv" SANBOX_MODEL=stub/echo "$HARNESS" first question
[ "$rc" = 0 ] && [ "$(jq length "$conv")" = 3 ] || fail "conversation after one turn: $(cat "$conv")"
run_in "$tmp/ws" env SANBOX_CONVERSATION="$conv" SANBOX_MODEL=stub/echo "$HARNESS" second question
[ "$rc" = 0 ] && grep -q 'continuing a conversation of 3 messages' "$tmp/stderr" ||
	fail "second run did not continue: $(cat "$tmp/stderr")"
[ "$(jq -c '[.[] | .role]' "$conv")" = '["system","user","assistant","user","assistant"]' ] &&
	[ "$(jq -r '.[3].content' "$conv")" = "second question" ] || fail "continued conversation: $(cat "$conv")"
[ ! -e "$conv.new" ] || fail "the conversation's temporary file was left"

# -- the turn limit
rm -rf "$tmp/ws2" "$tmp/events"
mkdir "$tmp/ws2"
run_in "$tmp/ws2" "$HARNESS" --max-turns 1 --model stub/scripted go
[ "$rc" = 4 ] || fail "--max-turns 1 exited $rc"
[ -f "$tmp/ws2/hello.txt" ] && [ ! -e "$tmp/ws2/notes" ] || fail "--max-turns 1 ran past turn 1"
[ "$(ev '[.[] | select(.type == "agent.turn.started") | .payload.turn]')" = "[1]" ] ||
	fail "--max-turns 1 events"

# -- a provider error: exit 2, one line with the status and message
run_in "$tmp/ws" "$HARNESS" --model stub/error go
[ "$rc" = 2 ] || fail "error script exited $rc"
[ "$(wc -l <"$tmp/stderr")" = 1 ] && grep -q 'HTTP 500: the stub model failed on purpose' "$tmp/stderr" ||
	fail "error line: $(cat "$tmp/stderr")"

# -- budget exhausted (HTTP 402): exit 3
printf '{"turns": [{"status": 402, "error": "budget exceeded"}]}\n' >"$tmp/budget.json"
start_stub budget --script "$tmp/budget.json"
run_in "$tmp/ws" env OPENAI_BASE_URL="$url" "$HARNESS" go
[ "$rc" = 3 ] || fail "402 exited $rc"
[ "$(cat "$tmp/stderr")" = "sanbox-harness: budget exhausted" ] || fail "402 message: $(cat "$tmp/stderr")"

# -- nothing listening: 3 retries with backoff, then exit 2
run_in "$tmp/ws" env OPENAI_BASE_URL=http://127.0.0.1:1/v1 "$HARNESS" go
[ "$rc" = 2 ] || fail "unreachable model exited $rc"
grep -q 'retries' "$tmp/stderr" || fail "unreachable message: $(cat "$tmp/stderr")"

# -- no prompt: usage error
run_in "$tmp/ws" "$HARNESS"
[ "$rc" = 2 ] && grep -q usage "$tmp/stderr" || fail "no prompt exited $rc"

echo "PASS harness_host"
