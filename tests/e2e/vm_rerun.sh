#!/bin/sh
# sanbox rerun in real microVMs (the shell template, the reference harness,
# a model stub this test starts as the provider): a recorded conversation
# re-run from its record reaches the same files and exit status with no
# call reaching the provider, at no cost; a conversation whose tool output
# is random departs from its record at its second call, named by the first
# differing field, and stops (diverged: its harness ends on SIGTERM); with
# --live-after-divergence it goes on to the provider, metered. Each re-run
# ends with rerun.compared (before its run.stopped), which the CLI prints
# and exits by: 0 the same outcome, 120 another (a command that writes a
# file named by its run id is reported with both paths). A command's
# re-run starts with its original's clock and seed (SANBOX_SEED). A
# re-run --at an offset between a command's two model calls makes only
# the second, answered with the second recorded answer, and compares the
# same as what the original did after the offset.
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
echo '{"turns": [{"text": "done"}]}' >"$work/scripts/once.json"
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
  "acme/rand": {"provider": "acme", "upstream": "rand", "input": 1, "output": 2},
  "acme/once": {"provider": "acme", "upstream": "once", "input": 1, "output": 2}}}
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
grep -qx "rerun $R: the same outcome as $O" "$work/re.out" &&
	grep -qx '  files that differ: none' "$work/re.out" && grep -qx '  exit status: 0 (original 0)' "$work/re.out" &&
	grep -qx '  tool calls: 2 (original 2)' "$work/re.out" && ok "the CLI's comparison: the same" ||
	bad "CLI comparison" "$(tail -n 5 "$work/re.out")"
"$SB" events "$R" --json | python3 -c '
import json, sys
evs = [json.loads(l) for l in sys.stdin if l.strip()]
t = [e["type"] for e in evs]
c = [e["payload"] for e in evs if e["type"] == "rerun.compared"]
assert len(c) == 1 and t.index("rerun.compared") == t.index("run.stopped") - 1, t[-3:]
c = c[0]
assert c["same"] is True and c["files"] == [] and c["files_differ"] == 0, c
assert (c["status"], c["original_status"], c["tools"], c["original_tools"], c["tools_differ_at"]) == (0, 0, 2, 2, 0), c
assert c["original"] == sys.argv[1], c' "$O" 2>"$work/cmp.err" &&
	ok "rerun.compared recorded just before run.stopped: the same" || bad "rerun.compared" "$(tail -n 2 "$work/cmp.err")"
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
[ $rc = 120 ] && grep -qx "rerun $R2: its outcome differs from $(rid dice)'s" "$work/re2.out" &&
	grep -qx '  exit status: 143 (original 0)' "$work/re2.out" &&
	ok "the comparison: the stopped harness's exit (SIGTERM), exit 120" ||
	bad "CLI comparison 2" "exit $rc: $(tail -n 5 "$work/re2.out")"
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

# --- 4. a command that writes a file named by its run: the paths differ
"$SB" run --name writer -- sh -c 'echo same >/workspace/same.txt; echo "$SANBOX_RUN" >"/workspace/out-$SANBOX_RUN.txt"' \
	>"$work/w.out" 2>&1 || bad "writer" "$(tail -n 5 "$work/w.out")"
W=$(rid writer)
"$SB" rerun writer >"$work/re4.out" 2>&1
rc=$?
R4=$(sed -n 's/^rerun \([0-9a-f]*\): .*/\1/p' "$work/re4.out" | head -n 1)
[ $rc = 120 ] && grep -qx "rerun $R4: its outcome differs from $W's" "$work/re4.out" &&
	grep -qx '  files that differ: 2' "$work/re4.out" &&
	grep -Eqx "    added +/workspace/out-$R4.txt" "$work/re4.out" &&
	grep -Eqx "    removed +/workspace/out-$W.txt" "$work/re4.out" &&
	grep -qx '  exit status: 0 (original 0)' "$work/re4.out" &&
	ok "a file written under another name: exit 120, both paths named" ||
	bad "files differ" "exit $rc: $(tail -n 6 "$work/re4.out")"
"$SB" rerun writer --json >"$work/re4.json" 2>&1
rc=$?
tail -n 1 "$work/re4.json" | python3 -c '
import json, sys
o = json.loads(sys.stdin.read())
c = o["compared"]
assert o["original"] == sys.argv[1] and o["diverged"] is None, o
assert c["same"] is False and c["files_differ"] == 2, c
ch = {f["path"]: f["change"] for f in c["files"]}
assert ch == {"/workspace/out-%s.txt" % o["rerun"]: "added", "/workspace/out-%s.txt" % sys.argv[1]: "removed"}, ch
added = [f for f in c["files"] if f["change"] == "added"][0]
assert len(added["xxh3"]) == 16 and added["original_xxh3"] == "", added' "$W" 2>"$work/j.err" && [ $rc = 120 ] &&
	ok "rerun --json: its last line holds the comparison" || bad "rerun --json" "exit $rc: $(tail -n 2 "$work/j.err")"
# --- 5. a cold re-run's harness starts with its original's clock and seed
# out RUN: the run's standard output
out() { "$SB" events "$1" --json | python3 -c '
import json, sys
print("".join(e["payload"]["data"] for e in map(json.loads, sys.stdin) if e["type"] == "agent.output" and e["payload"]["stream"] == "stdout"), end="")'; }
# ready RUN: the seed and clock its harness.input.ready says
ready() { "$SB" events "$1" --json | python3 -c '
import json, sys
p = [e["payload"] for e in map(json.loads, sys.stdin) if e["type"] == "harness.input.ready"][0]
print(p["seed"], p["clock_s"])'; }
"$SB" run --name clock -- sh -c 'date +%s; echo "seed $SANBOX_SEED"; head -c 16 /dev/urandom | od -An -tx1 | tr -d " \n"; echo' \
	>"$work/c.out" 2>&1 || bad "clock" "$(tail -n 5 "$work/c.out")"
C=$(rid clock)
"$SB" rerun clock >"$work/re5.out" 2>&1
rc=$?
R5=$(sed -n 's/^rerun \([0-9a-f]*\): .*/\1/p' "$work/re5.out" | head -n 1)
oc=$(out "$C")
orr=$(out "$R5")
set -- $(ready "$C")
seed=$1 clock=$2
[ $rc = 0 ] && [ "$(echo "$oc" | sed -n 1p)" = "$clock" ] && [ "$(echo "$orr" | sed -n 1p)" = "$clock" ] &&
	ok "the re-run's date +%s at its start is the original's ($clock)" ||
	bad "clock" "exit $rc; original '$(echo "$oc" | sed -n 1p)', re-run '$(echo "$orr" | sed -n 1p)', recorded $clock"
[ ${#seed} = 64 ] && [ "$(ready "$R5")" = "$seed $clock" ] && [ "$(echo "$oc" | sed -n 2p)" = "seed $seed" ] &&
	[ "$(echo "$orr" | sed -n 2p)" = "seed $seed" ] &&
	ok "SANBOX_SEED and the seed the kernel got are the original's (/dev/urandom: $(echo "$oc" | sed -n 3p) then $(echo "$orr" | sed -n 3p))" ||
	bad "seed" "recorded $seed / $(ready "$R5"); outputs: $oc / $orr"
# --- 6. --at an offset between two model calls: the second answers
# the re-run's first; the outcome after the offset is the same
Q='SANBOX_CONVERSATION= sanbox-harness --model acme/once'
"$SB" run --name two -m acme/once -- sh -c "if [ ! -e one ]; then $Q 'a first question'; echo 1 >one; sleep 2; fi
$Q 'the second question, a good deal longer than the first one was'" >"$work/two.out" 2>&1 ||
	bad "two calls" "$(tail -n 5 "$work/two.out")"
T=$(rid two)
X=$("$SB" events "$T" --json | python3 -c '
import json, sys
print([e["offset"] for e in map(json.loads, sys.stdin) if e["type"] == "agent.file.changed" and e["payload"]["path"] == "/workspace/one"][0])')
"$SB" rerun two --at "$X" --json >"$work/re6.json" 2>&1
rc=$?
R6=$(tail -n 1 "$work/re6.json" | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["rerun"])')
# responses RUN: its gateway calls' response blobs, whether replayed, offsets
responses() { "$SB" events "$1" --json | python3 -c '
import json, sys
for e in map(json.loads, sys.stdin):
    if e["type"] == "agent.message" and e["source"] == "gateway":
        print(e["payload"]["response"], e["payload"].get("replayed", False), e["offset"])'; }
responses "$T" >"$work/t.resp"
responses "$R6" >"$work/r6.resp"
tail -n 1 "$work/re6.json" | python3 -c '
import json, sys
c = json.loads(sys.stdin.read())["compared"]
assert c["same"] is True and c["tools"] == 0 and c["files_differ"] == 0, c
assert (c["status"], c["original_status"]) == (0, 0), c' 2>"$work/c6.err" && [ $rc = 0 ] &&
	ok "rerun --at $X: the same outcome as after the offset" ||
	bad "rerun --at" "exit $rc: $(tail -n 2 "$work/c6.err") $(tail -n 3 "$work/re6.json")"
[ "$(wc -l <"$work/t.resp")" = 2 ] && [ "$(wc -l <"$work/r6.resp")" = 1 ] &&
	[ "$(sed -n 2p "$work/t.resp" | cut -d' ' -f1)" = "$(cut -d' ' -f1 "$work/r6.resp")" ] &&
	[ "$(cut -d' ' -f2 "$work/r6.resp")" = True ] &&
	[ "$(sed -n 1p "$work/t.resp" | cut -d' ' -f3)" -lt "$X" ] &&
	[ "$(sed -n 2p "$work/t.resp" | cut -d' ' -f3)" -gt "$X" ] &&
	ok "its one call ($R6) was answered with the second recorded answer" ||
	bad "rerun --at calls" "original: $(cat "$work/t.resp") / re-run: $(cat "$work/r6.resp"); at $X"
exit $((failures > 0))
