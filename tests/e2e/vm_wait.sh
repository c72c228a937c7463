#!/bin/sh
# sanbox wait in real microVMs: it returns once every run named (or every run
# of a group) has ended, one line per run as it ends, exit 0 when all exited
# 0, else the code 'run' gives for the first that did not; at once for runs
# that have ended; 122 at --timeout with the run still live (and a stop then
# ends a second wait with 143). A harness's agent.progress lines show in
# inspect --json and ps --format progress; a label with control bytes is
# refused and counted, the progress stays as it was; the reference harness
# reports progress on the built-in stub/progress model.
. "$(dirname "$0")/lib/vm.sh"

M="--memory 128M --timeout 300s"
# field RUN KEY: a field of the run's state (inspect --json)
field() { "$SB" inspect "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"][sys.argv[1]])' "$2"; }
now_ms() { date +%s%3N; }

# -- two runs that exit 0: exit 0, a line for each as it ends
A=$("$SB" run --detach --name wa $M -- sh -c 'sleep 2; exit 0')
B=$("$SB" run --detach --name wb $M -- true)
out=$("$SB" wait "$A" wb 2>&1)
rc=$?
[ $rc = 0 ] && echo "$out" | grep -qx "$A wa exited 0" && echo "$out" | grep -qx "$B wb exited 0" &&
	[ "$(echo "$out" | wc -l)" = 2 ] && ok "two runs exit 0: wait exits 0" ||
	bad "two runs exit 0" "exit $rc: $out"

# -- runs that have ended: at once, and the first that did not exit 0 decides
C=$("$SB" run --detach --name wc $M -- sh -c 'sleep 1; exit 3')
"$SB" wait "$C" >"$SANBOX_HOME/c.out" 2>&1
rc=$?
[ $rc = 3 ] && grep -qx "$C wc exited 3" "$SANBOX_HOME/c.out" && ok "a run exiting 3: wait exits 3" ||
	bad "a run exiting 3" "exit $rc: $(cat "$SANBOX_HOME/c.out")"
t0=$(now_ms)
"$SB" wait "$A" "$C" "$B" >/dev/null 2>&1
rc=$?
t1=$(now_ms)
[ $rc = 3 ] && [ $((t1 - t0)) -lt 3000 ] && ok "ended runs: at once ($((t1 - t0)) ms), exit 3" ||
	bad "ended runs" "exit $rc after $((t1 - t0)) ms"
"$SB" wait --json "$C" "$A" "$C" >"$SANBOX_HOME/j.out"
rc=$?
python3 - "$SANBOX_HOME/j.out" "$C" "$A" <<'EOF' && [ $rc = 3 ] && ok "wait --json: one object a run, in order" ||
import json, sys
js = [json.loads(l) for l in open(sys.argv[1])]
assert [j["run"] for j in js] == sys.argv[2:4], js
assert js[0]["status"] == "exited" and js[0]["exit_status"] == 3 and js[0]["exit"] == 3, js
assert js[1]["name"] == "wa" and js[1]["exit"] == 0, js
EOF
	bad "wait --json" "exit $rc: $(cat "$SANBOX_HOME/j.out")"
"$SB" wait "$A" no-such-run >/dev/null 2>&1
rc=$?
[ $rc = 3 ] && ok "an unknown run: exit 3" || bad "an unknown run" "exit $rc"

# -- a group: its runs in the order they were created; the first (g1) exits
# 0 after g2 exited 5, so 5
G1=$("$SB" run --detach --group wgrp --name g1 $M -- sh -c 'sleep 3; exit 0')
G2=$("$SB" run --detach --group wgrp --name g2 $M -- sh -c 'exit 5')
out=$("$SB" wait --group wgrp 2>&1)
rc=$?
[ $rc = 5 ] && [ "$(echo "$out" | sed -n 2p)" = "$G1 g1 exited 0" ] &&
	echo "$out" | grep -qx "$G2 g2 exited 5" && ok "wait --group: both, exit 5" ||
	bad "wait --group" "exit $rc: $out"
"$SB" wait --group no-such-group >/dev/null 2>&1
rc=$?
[ $rc = 3 ] && ok "an unknown group: exit 3" || bad "an unknown group" "exit $rc"

# -- --timeout: 122 naming the live run, which goes on; a stop ends the next wait
S=$("$SB" run --detach --name wsleep $M -- sleep 600)
"$SB" wait --timeout 3s "$A" "$S" >"$SANBOX_HOME/s.out" 2>"$SANBOX_HOME/s.err"
rc=$?
st=$(field "$S" status)
[ $rc = 122 ] && grep -q "still live: $S (wsleep)" "$SANBOX_HOME/s.err" &&
	grep -qx "$A wa exited 0" "$SANBOX_HOME/s.out" &&
	case $st in created | queued | running) true ;; *) false ;; esac &&
	ok "wait --timeout: 122, the run still $st" ||
	bad "wait --timeout" "exit $rc, status $st: $(cat "$SANBOX_HOME/s.err")"
"$SB" wait "$S" >"$SANBOX_HOME/w.out" 2>&1 &
wpid=$!
sleep 1
"$SB" stop "$S" >/dev/null
wait $wpid
rc=$?
[ $rc = 143 ] && grep -qx "$S wsleep stopped" "$SANBOX_HOME/w.out" && ok "a stop ends a wait: 143" ||
	bad "stopped while waited for" "exit $rc: $(cat "$SANBOX_HOME/w.out")"

# -- progress from a harness's lines; a label with control bytes is refused
P=$("$SB" run --detach --name wprog $M -- sh -c '
printf "{\"type\":\"agent.progress\",\"payload\":{\"label\":\"files\",\"count\":1}}\n" >$SANBOX_EVENTS
printf "{\"type\":\"agent.progress\",\"payload\":{\"label\":\"files\",\"count\":2,\"total\":5}}\n" >$SANBOX_EVENTS
printf "{\"type\":\"agent.progress\",\"payload\":{\"label\":\"x\\\\u001b[2Jy\",\"count\":4}}\n" >$SANBOX_EVENTS
printf "{\"type\":\"agent.turn.completed\",\"payload\":{\"turn\":1}}\n" >$SANBOX_EVENTS')
"$SB" wait "$P" >/dev/null || bad "progress run" "did not exit 0"
"$SB" inspect "$P" --json >"$SANBOX_HOME/p.json"
python3 - "$SANBOX_HOME/p.json" <<'EOF' && ok "inspect --json: progress 2/5 files, 1 turn" ||
import json, sys
r = json.load(open(sys.argv[1]))["run"]
assert (r["progress_label"], r["progress_count"], r["progress_total"]) == ("files", 2, 5), r
assert r["turns"] == 1 and r["tool_calls"] == 0, r
EOF
	bad "inspect --json progress" "$(cat "$SANBOX_HOME/p.json")"
line=$("$SB" ps --format id,progress | grep "^$P")
[ "$line" = "$P	2/5 files" ] && ok "ps --format progress" || bad "ps --format progress" "'$line'"
"$SB" inspect "$P" | grep -q "^progress  *2/5 files (1 turn, 0 tool calls)$" &&
	ok "inspect: the progress row" || bad "inspect progress row" "$("$SB" inspect "$P" | grep progress)"
has_event "$P" "e['type'] == 'agent.progress' and e['payload']['count'] == 4" &&
	bad "control bytes in a label" "recorded" ||
	ok "a label with control bytes is not recorded"
has_event "$P" "e['type'] == 'run.warning' and 'refused by the schema' in e['payload']['message'] and 'U+001B' in e['payload']['message']" &&
	ok "the refused label is counted, its character named" ||
	bad "refused label warning" "$("$SB" events "$P" --type run.warning)"
"$SB" events "$P" --type agent.progress | grep -q "agent.progress  *2/5 files$" &&
	ok "events: the progress summary" || bad "progress summary" "$("$SB" events "$P" --type agent.progress)"

# -- the reference harness on stub/progress: report_progress calls
D=$("$SB" run --detach --name wdemo -m stub/progress $M check the reports)
"$SB" wait "$D" >/dev/null 2>&1
rc=$?
line=$("$SB" ps --format id,progress | grep "^$D")
[ $rc = 0 ] && [ "$line" = "$D	2/2 reports checked" ] && ok "the harness reports progress" ||
	bad "harness progress" "exit $rc, '$line'"
exit $((failures > 0))
