#!/bin/sh
# sanbox rerun in real microVMs (the shell template, the reference harness,
# a model stub this test starts as the provider): a recorded conversation
# re-run from its record reaches the same files and exit status with no
# call reaching the provider, at no cost; a conversation whose tool output
# is random departs from its record at its second call, named by the first
# differing field, and stops (diverged: its harness ends on SIGTERM); with
# --live-after-divergence it goes on to the provider, metered. The CLI's
# comparison of the two records says so.
. "$(dirname "$0")/lib/vm.sh"

work=$(mktemp -d /tmp/sbrerun.XXXXXX)
stub_pid=""
rr_cleanup() {
	[ -n "$stub_pid" ] && kill "$stub_pid" 2>/dev/null
	rm -rf "$work"
}
vm_extra_cleanup=rr_cleanup

mkdir "$work/scripts"
cp "$REPO/tools/stub/scripted.json" "$work/scripts/"
cat >"$work/scripts/rand.json" <<'EOF'
{"turns": [{"text": "a roll of the dice", "tool_calls": [{"name": "shell", "arguments": {"command": "head -c 8 /dev/urandom | od -An -tx1"}}]},
           {"text": "done"}]}
EOF
"$BUILD/sanbox-model-stub" --script-dir "$work/scripts" --log "$work/stub.log" >"$work/stub.out" 2>&1 &
stub_pid=$!
i=0
until grep -qs '^listening ' "$work/stub.out"; do
	i=$((i + 1))
	[ $i -lt 100 ] || { bad "setup" "stub did not start"; exit 1; }
	sleep 0.05
done
URL=http://$(sed -n 's/^listening //p' "$work/stub.out")/v1
cat >"$SANBOX_HOME/models.json" <<EOF
{"providers": {"acme": {"base_url": "$URL", "api": ["openai", "anthropic"]}},
 "models": {
  "acme/scripted": {"provider": "acme", "upstream": "scripted", "input": 1, "output": 2},
  "acme/rand": {"provider": "acme", "upstream": "rand", "input": 1, "output": 2}}}
EOF
calls() { wc -l <"$work/stub.log" | tr -d ' '; }
rid() { "$SB" inspect "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["run"])'; }
# summary RUN: exit status, tool calls, replayed calls, cost, files (path=xxh3)
summary() {
	"$SB" events "$1" --json | python3 -c '
import json, sys
evs = [json.loads(l) for l in sys.stdin if l.strip()]
ex = [e["payload"]["status"] for e in evs if e["type"] == "run.exited"]
tools = sum(1 for e in evs if e["type"] == "agent.tool.completed")
rep = sum(1 for e in evs if e["type"] == "agent.message" and e["payload"].get("replayed"))
cost = sum(e["payload"]["cost_nusd"] for e in evs if e["type"] == "agent.usage.updated")
files = {}
for e in evs:
    if e["type"] == "agent.file.changed":
        files[e["payload"]["path"]] = e["payload"]["xxh3"]
print(ex, tools, "replayed=%d" % rep, "cost=%s" % ("0" if cost == 0 else ">0"), sorted(files.items()))'
}

# --- 1. the same conversation from the record: same files and exit, no call
"$SB" run --name orig -m acme/scripted "fix the failing test" >"$work/orig.out" 2>&1
rc=$?
[ $rc = 0 ] && ok "the original run" || bad "original" "exit $rc: $(tail -n 5 "$work/orig.out")"
O=$(rid orig)
n0=$(calls)
"$SB" rerun orig >"$work/re.out" 2>&1
rc=$?
R=$(sed -n 's/^rerun \([0-9a-f]*\): .*/\1/p' "$work/re.out" | head -n 1)
[ $rc = 0 ] && grep -q "^rerun $R: kept to the record of $O" "$work/re.out" &&
	ok "rerun: exit 0, kept to the record" || bad "rerun" "exit $rc: $(tail -n 5 "$work/re.out")"
[ "$(calls)" = "$n0" ] && ok "no call reached the provider ($n0 calls, all the original's)" ||
	bad "provider calls" "$n0 before, $(calls) after"
so=$(summary "$O")
sr=$(summary "$R")
[ "$(echo "$so" | sed 's/replayed=[0-9]* cost=[^ ]*//')" = "$(echo "$sr" | sed 's/replayed=[0-9]* cost=[^ ]*//')" ] &&
	echo "$sr" | grep -q 'replayed=3 cost=0' &&
	ok "same exit status, tool calls and files; 3 calls replayed at no cost" ||
	bad "comparison" "original: $so / rerun: $sr"
grep -qx '  files that differ: none' "$work/re.out" && grep -qx '  exit status: 0 (original 0)' "$work/re.out" &&
	grep -qx '  tool calls: 2 (original 2)' "$work/re.out" && ok "the CLI's comparison: the same" ||
	bad "CLI comparison" "$(tail -n 4 "$work/re.out")"
"$SB" events "$R" --json | grep -q '"type":"run.forked".*"rerun":true' &&
	ok "recorded as a fork marked rerun" || bad "run.forked" "no rerun mark"

# --- 2. random tool output: diverged at call 2, stopped
"$SB" run --name dice -m acme/rand "roll" >"$work/dice.out" 2>&1 || bad "dice" "$(tail -n 5 "$work/dice.out")"
n0=$(calls)
"$SB" rerun dice >"$work/re2.out" 2>&1
rc=$?
R2=$(sed -n 's/^rerun \([0-9a-f]*\): .*/\1/p' "$work/re2.out" | head -n 1)
grep -Eq "^rerun $R2: diverged from $(rid dice) at call 2: messages\[[0-9]+\]\.content" "$work/re2.out" &&
	[ "$(calls)" = "$n0" ] && ok "diverged at call 2, named ($(grep '^rerun' "$work/re2.out"))" ||
	bad "divergence" "exit $rc: $(tail -n 5 "$work/re2.out")"
grep -qx '  exit status: 143 (original 0)' "$work/re2.out" && ok "the comparison: the stopped harness's exit (SIGTERM)" ||
	bad "CLI comparison 2" "$(tail -n 4 "$work/re2.out")"
"$SB" events "$R2" --json | grep -q '"type":"run.stopped".*"reason":"diverged"' &&
	ok "stopped, reason diverged" || bad "stop" "$("$SB" events "$R2" | tail -n 3)"

# --- 3. the same with --live-after-divergence: the provider answers, metered
"$SB" rerun --live-after-divergence dice >"$work/re3.out" 2>&1
rc=$?
R3=$(sed -n 's/^rerun \([0-9a-f]*\): .*/\1/p' "$work/re3.out" | head -n 1)
s3=$(summary "$R3")
[ $rc = 0 ] && [ "$(calls)" = "$((n0 + 1))" ] && echo "$s3" | grep -q 'replayed=1 cost=>0' &&
	grep -q "^rerun $R3: diverged .* at call 2" "$work/re3.out" &&
	ok "live after divergence: call 2 to the provider, metered ($s3)" ||
	bad "live" "exit $rc, calls $(calls) (was $n0): $s3 $(tail -n 3 "$work/re3.out")"
exit $((failures > 0))
