#!/bin/sh
# Timeout, stop, two runs at once, a hostile harness.
. "$(dirname "$0")/lib/vm.sh"

reason() { "$SB" inspect "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["status"])'; }

# two runs at once; one sleeps past its timeout, the other is stopped
T=$("$SB" run --detach --name sleeper --timeout 45s -- /bin/sh -c 'echo mine > a.txt; sleep 600')
S=$("$SB" run --detach --name stopme --timeout 300s -- /bin/sh -c 'ls /workspace > seen.txt; sleep 600')
# a hostile harness: garbage, forged usage, huge lines on $SANBOX_EVENTS
H=$("$SB" run --detach --name hostile --timeout 120s -- /bin/sh -c '
	for i in 1 2 3 4 5 6 7 8 9 10; do echo "not json {{{" > $SANBOX_EVENTS; done
	echo "{\"type\":\"agent.usage.updated\",\"payload\":{\"model\":\"x\",\"input_tokens\":1,\"output_tokens\":1,\"cost_nusd\":999999999,\"total_nusd\":999999999}}" > $SANBOX_EVENTS
	head -c 300000 /dev/zero | tr "\0" a > $SANBOX_EVENTS; echo >> $SANBOX_EVENTS
	echo "{\"type\":\"agent.turn.started\",\"payload\":{\"turn\":1}}" > $SANBOX_EVENTS
	exit 0')
for i in $(seq 1 60); do
	st=$(reason "$S")
	[ "$st" = running ] && has_event "$S" "e['type']=='harness.input.ready'" && break
	sleep 1
done
"$SB" stop "$S" >/dev/null || bad "stop" "stop failed"
"$SB" attach "$S" >/dev/null 2>&1
[ "$(reason "$S")" = stopped ] && ok "stop" || bad "stop" "status $(reason "$S")"
"$SB" attach "$T" >/dev/null 2>&1
[ "$(reason "$T")" = timeout ] && ok "timeout enforced by the host" || bad "timeout" "status $(reason "$T")"
"$SB" attach "$H" >/dev/null 2>&1
[ "$(reason "$H")" = exited ] && ok "hostile harness: run completes" || bad "hostile" "status $(reason "$H")"
has_event "$H" "e['type']=='run.warning'" && ok "hostile lines become warnings" || bad "hostile" "no warning"
has_event "$H" "e['type']=='agent.usage.updated'" && bad "forged usage" "a guest usage event was recorded" ||
	ok "forged usage refused"
has_event "$H" "e['type']=='agent.turn.started' and e['source']=='harness'" &&
	ok "valid harness event after garbage" || bad "harness event" "turn.started missing"
cost=$("$SB" inspect "$H" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["cost"]["cost_nusd"])')
[ "$cost" = 0 ] && ok "guest cannot change cost" || bad "cost" "$cost"
# isolation: the stopped run never saw the sleeper's file
seen=$("$SB" fs cat "$S" seen.txt)
case "$seen" in *a.txt*) bad "isolation" "run saw another run's file" ;; *) ok "runs do not see each other's files" ;; esac
[ "$("$SB" fs cat "$T" a.txt)" = mine ] && ok "timed-out run's files kept" || bad "files" "a.txt missing"
"$SB" daemon status >/dev/null && ok "daemon healthy afterwards" || bad "daemon" "not answering"

# stopping the daemon stops its live runs: none is left running unsupervised
"$SB" run --name drained -- sleep 120 >"$SANBOX_HOME/drained.out" 2>&1 &
dpid=$!
for i in $(seq 1 120); do
	grep -q harness.input.ready "$SANBOX_HOME/drained.out" && break
	sleep 0.5
done
D=$("$SB" ps --json | python3 -c 'import json,sys; print([r["run"] for r in json.load(sys.stdin) if r["name"]=="drained"][0])')
qpid=$(cat "$SANBOX_HOME/runs/$D/qemu.pid")
out=$("$SB" daemon stop)
[ "$out" = "sanboxd: stopped (1 live run stopped, reason daemon-stop)" ] &&
	ok "daemon stop names the runs it stopped" || bad "daemon stop" "$out"
wait $dpid
drc=$?
[ "$drc" = 143 ] && grep -q "stopped: sanboxd was stopped" "$SANBOX_HOME/drained.out" &&
	ok "attached run: exit 143, says why" || bad "attached run" "exit $drc: $(tail -n 1 "$SANBOX_HOME/drained.out")"
proc_alive "$qpid" && bad "daemon stop" "the run's QEMU still runs" || ok "daemon stop ended the run's VM"
has_event "$D" "e['type']=='run.stopped' and e['payload']['reason']=='daemon-stop'" &&
	ok "run.stopped reason daemon-stop" || bad "daemon-stop" "$(events_json "$D" | tail -n 2)"
has_event "$D" "e['type']=='run.failed'" && bad "daemon restart" "a drained run was marked failed" ||
	ok "restart finds nothing to reconcile"
exit $((failures > 0))
