#!/bin/sh
# sanbox replay on a made-up record (tests/tools/mkrecord: model calls with
# their request and answer bodies, file changes with their contents; no
# microVM). Piped: every line at once, the conversation (the request's new
# messages, a whole answer's text and tool call, a stream's pieces joined),
# the diff of a modified file, guest text escaped; --speed waits (scaled,
# a gap over 2 s cut and said), --json's conversation and diff, --from
# (an earlier content still serves the diff), bad options. In tmux: the
# waits, space pauses, n steps, f jumps to the next file change, q quits
# with the terminal restored, Ctrl-C exits 130.
. "$(dirname "$0")/lib/bootless.sh"

command -v tmux >/dev/null || fail "tmux is missing (make deps)"
command -v jq >/dev/null || fail "jq is missing (make deps)"
MK=$BUILD/tests/mkrecord
[ -x "$MK" ] || fail "$MK not built"
tm() { tmux -S "$tmp/tmux.sock" "$@"; }
replay_cleanup() {
	tm kill-server 2>/dev/null
	bootless_cleanup
}
trap replay_cleanup EXIT

RUN=0123456789abcdef
mkdir -p "$SANBOX_HOME/log"
req1='{"model":"stub","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"write hello.txt"}]}'
ans1='{"choices":[{"message":{"role":"assistant","content":"Writing it.","tool_calls":[{"type":"function","function":{"name":"write_file","arguments":"{\"path\":\"hello.txt\"}"}}]}}]}'
req2='{"model":"stub","messages":[{"role":"user","content":"write hello.txt"},{"role":"assistant","content":"Writing it."},{"role":"tool","content":"written"}]}'
ans2='data: {"choices":[{"delta":{"content":"Do"}}]}\n\ndata: {"choices":[{"delta":{"content":"ne."}}]}\n\ndata: [DONE]\n\n'
call='"role":"assistant","model":"stub","api":"openai","status":200,"max_tokens":100,"duration_ms":5,"input_tokens":10,"output_tokens":3'
fc='"size":1,"xxh3":"0000000000000000"'
jq -nc --arg r1 "$req1" --arg a1 "$ans1" --arg r2 "$req2" --arg a2 "$(printf "$ans2")" \
	--arg esc "$(printf 'a\033[2Jb\n')" --arg esc2 "$(printf 'a\033[31mc\n')" "
{type:\"run.created\",source:\"host\",t:0,payload:{name:\"rp\",template:\"shell\",group:\"\"}},
{type:\"run.started\",source:\"host\",t:10,payload:{accel:\"tcg\"}},
{type:\"agent.turn.started\",source:\"harness\",t:20,payload:{turn:1}},
{type:\"agent.message\",source:\"gateway\",t:30,payload:{$call,stream:false},blobs:{request:\$r1,response:\$a1}},
{type:\"agent.tool.started\",source:\"harness\",t:40,payload:{tool:\"write_file\",args:\"hello.txt\"}},
{type:\"agent.file.changed\",source:\"guest\",t:50,payload:{path:\"hello.txt\",kind:\"created\",$fc},blobs:{content:\"line one\nline two\nline three\n\"}},
{type:\"agent.file.changed\",source:\"guest\",t:3050,payload:{path:\"hello.txt\",kind:\"modified\",$fc},blobs:{content:\"line one\nline 2\nline three\n\"}},
{type:\"agent.tool.completed\",source:\"harness\",t:3060,payload:{tool:\"write_file\",args:\"hello.txt\",exit:0,duration_ms:3000}},
{type:\"agent.turn.completed\",source:\"harness\",t:3070,payload:{turn:1}},
{type:\"agent.turn.started\",source:\"harness\",t:3080,payload:{turn:2}},
{type:\"agent.message\",source:\"gateway\",t:3090,payload:{$call,stream:true},blobs:{request:\$r2,response:\$a2}},
{type:\"agent.file.changed\",source:\"guest\",t:3100,payload:{path:\"e.txt\",kind:\"created\",$fc},blobs:{content:\$esc}},
{type:\"agent.file.changed\",source:\"guest\",t:3110,payload:{path:\"e.txt\",kind:\"modified\",$fc},blobs:{content:\$esc2}},
{type:\"run.exited\",source:\"host\",t:3200,payload:{status:0}},
{type:\"run.stopped\",source:\"host\",t:3210,payload:{reason:\"exited\"}}" |
	"$MK" "$SANBOX_HOME/log" $RUN || fail "mkrecord"

ms() { date +%s%3N; }

# -- piped: at once, the conversation and the diffs
t0=$(ms)
"$SB" replay rp >"$tmp/out" 2>"$tmp/err" || fail "replay piped: exit $?: $(cat "$tmp/err")"
[ $(($(ms) - t0)) -lt 1500 ] || fail "replay piped waited"
[ -s "$tmp/err" ] && fail "replay piped said: $(cat "$tmp/err")"
for want in ' run\.created ' '^    > system: be brief$' '^    > user: write hello\.txt$' \
	'^    < assistant: Writing it\. \[call write_file \{"path":"hello\.txt"\}\]$' \
	'^    @@ -1,3 \+1,3 @@$' '^    -line two$' '^    \+line 2$' '^     line three$' \
	'^    > tool: written$' '^    < assistant: Done\.$' '^    -a\\x1b\[2Jb$' '^    \+a\\x1b\[31mc$' \
	' run\.stopped '; do
	grep -qE -- "$want" "$tmp/out" || fail "replay piped: no /$want/: $(cat "$tmp/out")"
done
grep -q "$(printf '\033')" "$tmp/out" && fail "replay printed a raw escape"
grep -q 'user: write' "$tmp/out" && [ "$(grep -c '> user: write' "$tmp/out")" = 1 ] ||
	fail "the second call shows messages the model answered already: $(cat "$tmp/out")"
[ "$(grep -c ' agent\.' "$tmp/out")" = 11 ] || fail "not every event: $(cat "$tmp/out")"
grep -q 'shortened' "$tmp/out" && fail "piped without --speed cut a wait it does not make"

# --speed: waits also piped, the 3 s gap scaled; at 1x cut to 2 s, and said
t0=$(ms)
"$SB" replay rp --speed 2 >"$tmp/s2" || fail "--speed 2"
d=$(($(ms) - t0))
[ $d -ge 1400 ] && [ $d -lt 3000 ] || fail "--speed 2 took ${d}ms, not about 1.5 s"
grep -q shortened "$tmp/s2" && fail "--speed 2 cut a 1.5 s wait"
t0=$(ms)
"$SB" replay rp --speed 1 >"$tmp/s1" || fail "--speed 1"
d=$(($(ms) - t0))
[ $d -ge 1900 ] && [ $d -lt 3500 ] || fail "--speed 1 took ${d}ms, not about 2 s"
grep -qE '^    \(3s without events, shortened to 2s\)$' "$tmp/s1" || fail "the cut wait: $(cat "$tmp/s1")"

# --json: a line per event, the conversation and the diff exact
"$SB" replay rp --json >"$tmp/j" || fail "--json"
[ "$(jq -s length "$tmp/j")" = 15 ] || fail "--json: not 15 events"
[ "$(jq -rs '[.[] | select(.type == "agent.message")][0].conversation[1].text' "$tmp/j")" = "write hello.txt" ] ||
	fail "--json conversation: $(cat "$tmp/j")"
jq -rs '[.[] | select(.type == "agent.file.changed")][3].diff' "$tmp/j" | grep -qx "$(printf '+a\033\\[31mc')" ||
	fail "--json diff is not exact: $(cat "$tmp/j")"

# --from: the modified file's diff from a content before it
off=$(jq -rs '[.[] | select(.type == "agent.file.changed")][1].offset' "$tmp/j")
"$SB" replay rp --from "$off" >"$tmp/from" || fail "--from"
grep -q 'run.created' "$tmp/from" && fail "--from printed what is before it"
grep -qx '    +line 2' "$tmp/from" || fail "--from lost the diff: $(cat "$tmp/from")"

# bad options, no such run
"$SB" replay rp --speed 0 2>"$tmp/e"; [ $? = 2 ] && grep -q -- '--speed' "$tmp/e" || fail "--speed 0"
"$SB" replay rp --speed 2 --instant 2>/dev/null; [ $? = 2 ] || fail "--speed with --instant"
"$SB" replay 2>/dev/null; [ $? = 2 ] || fail "replay without RUN"
"$SB" replay nothing-here 2>"$tmp/e"; [ $? = 3 ] || fail "replay of nothing: $(cat "$tmp/e")"

# -- the terminal: waits, keys, the terminal restored
pane_wait() {
	i=0
	until tm capture-pane -p -J -S -200 -t w >"$tmp/pane" 2>/dev/null && grep -qE -- "$1" "$tmp/pane"; do
		i=$((i + 1))
		[ $i -lt 100 ] || fail "no /$1/ on the screen: $(cat "$tmp/pane")"
		sleep 0.1
	done
}
tm new-session -d -s w -x 160 -y 60 "env PS1='$ ' sh" || fail "tmux"
tm send-keys -t w "clear; $SB replay rp; echo replay-rc=\$?" Enter
pane_wait 'sanbox: keys \(space'
pane_wait ' agent\.file\.changed .*hello\.txt'
tm send-keys -t w ' '
pane_wait 'sanbox: paused'
sleep 2.5
grep -q -- '+line 2' "$tmp/pane" && fail "a pause went on: $(cat "$tmp/pane")"
tm capture-pane -p -J -S -200 -t w | grep -q -- '+line 2' && fail "a pause went on"
tm send-keys -t w n
pane_wait '^    \+line 2$'
tm capture-pane -p -J -S -200 -t w | grep -q 'tool\.completed' && fail "n showed more than one event"
tm send-keys -t w f
pane_wait ' agent\.file\.changed .*e\.txt'
grep -q 'run\.exited' "$tmp/pane" && fail "f went past the file change"
tm send-keys -t w q
pane_wait '^replay-rc=0$'
tm send-keys -t w "stty -a | tr ' ' '\\n' | grep -xE -- '-?(icanon|echo)' | tr '\\n' ' '; echo" Enter
pane_wait '^icanon echo ?$'
# Ctrl-C while it waits: 130, the terminal restored
tm send-keys -t w "clear; $SB replay rp --speed 0.1; echo replay-rc=\$?" Enter
pane_wait 'agent\.turn\.started'
tm send-keys -t w C-c
pane_wait '^replay-rc=130$'
tm send-keys -t w "stty -a | tr ' ' '\\n' | grep -xE -- '-?(icanon|echo)' | tr '\\n' ' '; echo" Enter
pane_wait '^icanon echo ?$'
echo "PASS cli_replay"
