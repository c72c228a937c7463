#!/bin/sh
# sanbox-model-stub speaks both model APIs: OpenAI chat completions and
# Anthropic messages, stream and non-stream, with scripted text, tool calls,
# usage, max_tokens truncation, errors, slow streams and a request log.
BUILD=${BUILD:-build}
STUB=$BUILD/sanbox-model-stub
tmp=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL stub: $*"; exit 1; }
[ -x "$STUB" ] || fail "$STUB not built"

"$STUB" --script-dir tools/stub --log "$tmp/log" >"$tmp/out" 2>"$tmp/err" &
pid=$!
i=0
until grep -qs '^listening ' "$tmp/out"; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "stub did not start: $(cat "$tmp/err")"
	sleep 0.05
done
grep -Eq '^listening 127\.0\.0\.1:[0-9]+$' "$tmp/out" || fail "bad banner: $(cat "$tmp/out")"
URL=http://$(sed 's/^listening //' "$tmp/out")

# post PATH JSON [curl args]: body in $tmp/body, HTTP status in $code.
post() {
	p=$1
	d=$2
	shift 2
	code=$(curl -sS -o "$tmp/body" -w '%{http_code}' "$@" "$URL$p" \
		-H 'Content-Type: application/json' -d "$d") || fail "curl $p"
}
# expect JQ-EXPR WHAT: the last body must satisfy the expression.
expect() { jq -e "$1" "$tmp/body" >/dev/null 2>&1 || fail "$2: $(head -c 400 "$tmp/body")"; }
# sse: the JSON data lines of the last (streamed) body as one array.
sse() { sed -n 's/^data: //p' "$tmp/body" | grep -v '^\[DONE\]$' | jq -s "$1"; }
sse_expect() { [ "$(sse "$1")" = true ] || fail "$2: $(head -c 600 "$tmp/body")"; }

USER='{"role":"user","content":"abcdefghi"}'    # 9 bytes
A1='{"role":"assistant","content":"xy"}'          # 2 bytes
A2='{"role":"assistant","content":null}'

# -- models
code=$(curl -sS -o "$tmp/body" -w '%{http_code}' "$URL/v1/models")
[ "$code" = 200 ] || fail "/v1/models status $code"
expect '[.data[].id] | index("stub/scripted") != null and index("stub/echo") != null' \
	"/v1/models lists the scripts"

# -- OpenAI non-stream: text, fixed usage, key logged
post /v1/chat/completions "{\"model\":\"stub/echo\",\"messages\":[$USER]}" \
	-H 'Authorization: Bearer sk-openai-one'
[ "$code" = 200 ] || fail "openai echo status $code"
expect '.object == "chat.completion" and .choices[0].finish_reason == "stop" and
	(.choices[0].message.content | startswith("echo:")) and
	.usage.prompt_tokens == 100 and .usage.completion_tokens == 20 and
	.usage.total_tokens == 120' "openai echo"

# -- OpenAI turns: k = number of assistant messages; tool calls; counted usage
post /v1/chat/completions "{\"model\":\"stub/scripted\",\"messages\":[$USER]}"
expect '.choices[0].finish_reason == "tool_calls" and
	.choices[0].message.tool_calls[0].type == "function" and
	.choices[0].message.tool_calls[0].function.name == "shell" and
	(.choices[0].message.tool_calls[0].function.arguments | fromjson |
	 .command | contains("hello.txt"))' "openai turn 0 shell call"
post /v1/chat/completions "{\"model\":\"stub/scripted\",\"messages\":[$USER,$A1]}"
expect '.choices[0].message.tool_calls[0].function.name == "write_file" and
	(.choices[0].message.tool_calls[0].function.arguments | fromjson | .path) ==
	"notes/result.md"' "openai turn 1 write_file call"
post /v1/chat/completions "{\"model\":\"stub/scripted\",\"messages\":[$USER,$A1,$A2]}"
# input: 9 + 2 bytes -> 3 tokens; output: "done" -> 1 token
expect '.choices[0].message.content == "done" and .choices[0].finish_reason == "stop" and
	.usage.prompt_tokens == 3 and .usage.completion_tokens == 1' "openai turn 2 final"
post /v1/chat/completions "{\"model\":\"stub/scripted\",\"messages\":[$A1,$A1,$A1,$A1,$A1]}"
expect '.choices[0].message.content == "done"' "past the end the last turn repeats"

# -- OpenAI stream with usage
post /v1/chat/completions "{\"model\":\"stub/echo\",\"messages\":[$USER],\"stream\":true,
	\"stream_options\":{\"include_usage\":true}}"
[ "$(sed -n 's/^data: //p' "$tmp/body" | tail -1)" = "[DONE]" ] || fail "openai stream: no [DONE]"
sse_expect '([.[].choices[0].delta.content // empty] | add | startswith("echo:")) and
	(map(select(.choices[0].finish_reason == "stop")) | length) == 1 and
	(last | .choices == [] and .usage.prompt_tokens == 100 and
	 .usage.completion_tokens == 20)' "openai stream text and usage chunk"
post /v1/chat/completions "{\"model\":\"stub/echo\",\"messages\":[$USER],\"stream\":true}"
sse_expect 'map(select(.usage)) | length == 0' "openai stream without include_usage has no usage"
post /v1/chat/completions "{\"model\":\"stub/scripted\",\"messages\":[$USER],\"stream\":true}"
sse_expect '([.[].choices[0].delta.tool_calls // empty | .[] | .function.name // empty] ==
	["shell"]) and ([.[].choices[0].delta.tool_calls // empty | .[] |
	.function.arguments] | add | fromjson | .command | contains("hello.txt")) and
	(last.choices[0].finish_reason == "tool_calls")' "openai stream tool call"

# -- Anthropic non-stream
post /v1/messages "{\"model\":\"stub/echo\",\"max_tokens\":1000,\"messages\":[$USER]}" \
	-H 'x-api-key: sk-anthropic-two'
[ "$code" = 200 ] || fail "anthropic echo status $code"
expect '.type == "message" and .role == "assistant" and .stop_reason == "end_turn" and
	(.content[0].type == "text") and (.content[0].text | startswith("echo:")) and
	.usage.input_tokens == 100 and .usage.output_tokens == 20' "anthropic echo"
post /v1/messages "{\"model\":\"stub/scripted\",\"max_tokens\":1000,\"messages\":[$USER]}"
expect '.stop_reason == "tool_use" and
	(.content | map(select(.type == "tool_use")) | .[0].name == "shell" and
	 (.[0].input.command | contains("hello.txt")))' "anthropic tool_use"

# -- Anthropic stream
post /v1/messages "{\"model\":\"stub/echo\",\"max_tokens\":1000,\"messages\":[$USER],\"stream\":true}"
[ "$(sed -n 's/^event: //p' "$tmp/body" | tr '\n' ' ')" = "message_start \
content_block_start content_block_delta content_block_stop message_delta message_stop " ] ||
	fail "anthropic stream event order: $(sed -n 's/^event: //p' "$tmp/body" | tr '\n' ' ')"
sse_expect '(.[0].message.usage.input_tokens == 100) and
	([.[] | select(.type == "content_block_delta") | .delta.text] | add | startswith("echo:")) and
	(map(select(.type == "message_delta")) | .[0].usage.output_tokens == 20 and
	 .[0].delta.stop_reason == "end_turn")' "anthropic stream text and usage"
post /v1/messages "{\"model\":\"stub/scripted\",\"max_tokens\":1000,\"messages\":[$USER],\"stream\":true}"
sse_expect '(map(select(.type == "content_block_start" and .content_block.type == "tool_use")) |
	.[0].content_block.name == "shell") and
	([.[] | select(.delta.type? == "input_json_delta") | .delta.partial_json] | add |
	 fromjson | .command | contains("hello.txt")) and
	(map(select(.type == "message_delta")) | .[0].delta.stop_reason == "tool_use")' \
	"anthropic stream tool_use"

# -- max_tokens truncation
post /v1/chat/completions "{\"model\":\"stub/echo\",\"max_tokens\":5,\"messages\":[$USER]}"
expect '.choices[0].finish_reason == "length" and .usage.completion_tokens == 5 and
	(.choices[0].message.content | length) <= 20' "openai max_tokens"
post /v1/chat/completions "{\"model\":\"stub/echo\",\"max_completion_tokens\":7,\"messages\":[$USER]}"
expect '.choices[0].finish_reason == "length" and .usage.completion_tokens == 7' \
	"openai max_completion_tokens"
post /v1/chat/completions "{\"model\":\"stub/echo\",\"max_tokens\":50,\"messages\":[$USER]}"
expect '.choices[0].finish_reason == "stop" and .usage.completion_tokens == 20' \
	"max_tokens above the output changes nothing"
post /v1/messages "{\"model\":\"stub/echo\",\"max_tokens\":5,\"messages\":[$USER]}"
expect '.stop_reason == "max_tokens" and .usage.output_tokens == 5' "anthropic max_tokens"
post /v1/messages "{\"model\":\"stub/scripted\",\"max_tokens\":3,\"messages\":[$USER],\"stream\":true}"
sse_expect 'map(select(.type == "message_delta")) | .[0].delta.stop_reason == "max_tokens" and
	.[0].usage.output_tokens == 3' "anthropic stream max_tokens"

# -- errors: bad JSON, missing fields, scripted status, unknown model
post /v1/chat/completions '{"model": "stub/echo", "messages": ['
[ "$code" = 400 ] || fail "openai bad JSON gave $code"
expect '.error.type == "invalid_request_error" and (.error.message | length > 0)' \
	"openai error shape"
post /v1/chat/completions '{"model": "stub/echo"}'
[ "$code" = 400 ] || fail "openai without messages gave $code"
post /v1/messages 'not json'
[ "$code" = 400 ] || fail "anthropic bad JSON gave $code"
expect '.type == "error" and .error.type == "invalid_request_error"' "anthropic error shape"
post /v1/messages "{\"model\":\"stub/echo\",\"messages\":[$USER]}"
[ "$code" = 400 ] || fail "anthropic without max_tokens gave $code"
expect '.error.message | contains("max_tokens")' "anthropic missing field named"
post /v1/chat/completions "{\"model\":\"stub/error\",\"messages\":[$USER]}"
[ "$code" = 500 ] || fail "error script gave $code"
expect '.error.message | contains("on purpose")' "scripted error message"
post /v1/chat/completions "{\"model\":\"stub/../etc\",\"messages\":[$USER]}"
[ "$code" = 404 ] || fail "unknown model gave $code"

# -- slow stream: 20 text chunks 50 ms apart; concurrent streams overlap
t0=$(date +%s%N)
post /v1/chat/completions '{"model":"stub/slow","messages":[],"stream":true}'
t1=$(date +%s%N)
[ "$(sse '[.[].choices[0].delta.content // empty | select(. != "")] | length')" = 20 ] ||
	fail "slow stream is not 20 chunks"
[ $(((t1 - t0) / 1000000)) -ge 900 ] || fail "slow stream took only $(((t1 - t0) / 1000000)) ms"
t0=$(date +%s%N)
n=0
curls=""
while [ $n -lt 20 ]; do
	curl -sS -o "$tmp/slow.$n" "$URL/v1/messages" -d \
		'{"model":"stub/slow","max_tokens":1000,"messages":[],"stream":true}' &
	curls="$curls $!"
	n=$((n + 1))
done
for c in $curls; do wait "$c"; done
t1=$(date +%s%N)
[ "$(grep -l '^event: message_stop' "$tmp"/slow.* | wc -l)" = 20 ] || fail "concurrent streams incomplete"
[ $(((t1 - t0) / 1000000)) -lt 5000 ] || fail "20 slow streams took $(((t1 - t0) / 1000000)) ms"

# -- OpenAI Responses: turn k = runs of the model's own items; whole and streamed
RU='{"role":"user","content":"abcdefghi"}'
RC='{"type":"function_call","call_id":"c1","name":"shell","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"}'
post /v1/responses "{\"model\":\"stub/scripted\",\"input\":[$RU]}"
expect '.object == "response" and .status == "completed" and
	(.output | map(select(.type == "function_call")) | .[0].name == "shell" and
	 (.[0].arguments | fromjson | .command | contains("hello.txt"))) and
	.usage.input_tokens == 3 and (.usage.output_tokens > 0) and
	.usage.input_tokens_details.cached_tokens == 0' "responses turn 0 function_call"
post /v1/responses "{\"model\":\"stub/scripted\",\"input\":[$RU,$RC]}"
expect '.output[0].type == "function_call" and .output[0].name == "write_file"' \
	"responses turn 1: a call and its output make one turn"
post /v1/responses "{\"model\":\"stub/scripted\",\"input\":[$RU,$RC,$RC],\"stream\":true}"
[ "$(sed -n 's/^event: //p' "$tmp/body" | tr '\n' ' ')" = "response.created \
response.output_item.added response.content_part.added response.output_text.delta \
response.output_text.done response.content_part.done response.output_item.done \
response.completed " ] || fail "responses stream event order: $(sed -n 's/^event: //p' "$tmp/body" | tr '\n' ' ')"
sse_expect '(map(.sequence_number) == [range(0; length)]) and
	(last.response.output[0].content[0].text == "done") and
	(last.response.usage.output_tokens == 1)' "responses stream text and usage"
post /v1/responses "{\"model\":\"stub/scripted\",\"input\":\"hi\",\"max_output_tokens\":2}"
expect '.status == "incomplete" and .incomplete_details.reason == "max_output_tokens" and
	.usage.output_tokens == 2' "responses cut at max_output_tokens"
post /v1/messages/count_tokens "{\"model\":\"stub/scripted\",\"messages\":[$USER]}"
expect '.input_tokens == 3' "count_tokens"

# -- the log names the key each request carried
jq -se 'map(select(.auth == "Bearer sk-openai-one" and .path == "/v1/chat/completions" and
	.model == "stub/echo" and .input_tokens == 100 and .output_tokens == 20 and
	.status == 200)) | length == 1' "$tmp/log" >/dev/null || fail "log: OpenAI key line"
jq -se 'map(select(.auth == "sk-anthropic-two" and .path == "/v1/messages")) | length == 1' \
	"$tmp/log" >/dev/null || fail "log: Anthropic key line"
jq -se 'map(select(.status == 400)) | length == 4' "$tmp/log" >/dev/null || fail "log: 400 lines"

# -- only loopback addresses
if "$STUB" --listen 0.0.0.0:0 >/dev/null 2>"$tmp/err2"; then fail "listened on 0.0.0.0"; fi
grep -q 'not a loopback' "$tmp/err2" || fail "no clear error for 0.0.0.0: $(cat "$tmp/err2")"

# -- SIGTERM stops it
kill "$pid"
i=0
while kill -0 "$pid" 2>/dev/null; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "stub ignored SIGTERM"
	sleep 0.05
done
pid=""
echo "PASS stub"
