#!/bin/sh
# The CLI against its daemon: autostart, status, run records, events (JSON,
# type filters), errors and exit codes, help, attach to a run stopped
# mid-way, detach with SIGINT, daemon stop. Runs use a template whose files
# are empty: QEMU cannot boot it, so each run fails at once and leaves its
# record (created, policy, failed, stopped) without a microVM.
. "$(dirname "$0")/lib/bootless.sh"

# json_lines FILE PYTHON-EXPR: every line of FILE parses as JSON and the
# expression (over the list `evs`) holds
json_lines() {
	python3 -c "
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sys.exit(0 if ($2) else 1)" "$1"
}
# wait_for FILE TEXT: until FILE contains TEXT (at most 10 s)
wait_for() {
	i=0
	until grep -q "$2" "$1" 2>/dev/null; do
		i=$((i + 1))
		[ $i -lt 200 ] || return 1
		sleep 0.05
	done
}

# -- ps in a fresh home starts the daemon
"$SB" ps >"$tmp/ps" 2>"$tmp/err" || fail "ps in a fresh home: $(cat "$tmp/err")"
grep -q '^RUN ' "$tmp/ps" || fail "ps prints no header: $(cat "$tmp/ps")"
pid=$(daemon_pid)
[ -n "$pid" ] && proc_alive "$pid" || fail "no daemon after ps"
"$SB" daemon status --json >"$tmp/st" || fail "daemon status exit $?"
json_lines "$tmp/st" "evs[0]['running'] is True and evs[0]['pid'] == $pid" ||
	fail "daemon status --json: $(cat "$tmp/st")"

# -- run records
R=$("$SB" run --detach --name first -- true) || fail "run --detach exit $?"
echo "$R" | grep -Eq '^[0-9a-f]{12}$' || fail "run --detach printed '$R'"
R2=$("$SB" run --detach --json --name second -- true) || fail "run --detach --json"
R2=$(echo "$R2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"])') ||
	fail "run --detach --json is not JSON"
wait_stopped "$R" && wait_stopped "$R2" || fail "the runs did not stop"
"$SB" ps --json >"$tmp/ps.json" || fail "ps --json"
python3 -c "
import json, sys
runs = {r['run']: r for r in json.load(open(sys.argv[1]))}
sys.exit(0 if runs['$R']['name'] == 'first' and runs['$R2']['name'] == 'second' else 1)" \
	"$tmp/ps.json" || fail "ps --json lacks the runs: $(cat "$tmp/ps.json")"

# -- events --json: every line parses, one run, offsets and seqs in order
"$SB" events "$R" --json >"$tmp/ev" || fail "events exit $?"
json_lines "$tmp/ev" "len(evs) >= 2 and evs[0]['type'] == 'run.created' and
	all(e['run'] == '$R' and set(e) >= {'offset','seq','ts','type','source','payload'} for e in evs) and
	[e['seq'] for e in evs] == list(range(1, len(evs) + 1)) and
	all(a['offset'] < b['offset'] for a, b in zip(evs, evs[1:]))" ||
	fail "events --json: $(head -c 600 "$tmp/ev")"
"$SB" events "$R" --json --type run.created >"$tmp/ev1" || fail "events --type"
json_lines "$tmp/ev1" "len(evs) == 1 and evs[0]['type'] == 'run.created' and
	evs[0]['payload']['name'] == 'first'" || fail "--type run.created: $(cat "$tmp/ev1")"
"$SB" events "$R" --json --type run >"$tmp/ev2" || fail "events --type run"
n_all=$(grep -c '"type":"run\.' "$tmp/ev") # and the end's snapshot.saved
[ "$(wc -l <"$tmp/ev2")" = "$n_all" ] || fail "--type run (a prefix) should match all $n_all run.* events"
"$SB" events "$R" --json --type agent >"$tmp/ev3" || fail "events --type agent"
[ ! -s "$tmp/ev3" ] || fail "--type agent matched: $(cat "$tmp/ev3")"
"$SB" events --all --json >"$tmp/all" || fail "events --all"
json_lines "$tmp/all" "{e['run'] for e in evs} == {'$R', '$R2'} and
	[e['offset'] for e in evs] == list(range(1, len(evs) + 1))" || fail "events --all"
"$SB" events "$R" >"$tmp/human" || fail "events (text)"
[ "$(wc -l <"$tmp/human")" = "$(wc -l <"$tmp/ev")" ] || fail "text events: $(cat "$tmp/human")"

# -- errors: unknown run exits 3 with one line; bad options exit 2
"$SB" events ffffffffffff >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 3 ] || fail "unknown run: exit $rc, want 3"
[ "$(wc -l <"$tmp/err")" = 1 ] && grep -q '^sanbox: ' "$tmp/err" ||
	fail "unknown run: stderr is not one 'sanbox: ' line: $(cat "$tmp/err")"
[ ! -s "$tmp/out" ] || fail "unknown run printed on stdout"
"$SB" attach ffffffffffff 2>/dev/null
rc=$?
[ $rc = 3 ] || fail "attach to an unknown run: exit $rc"
"$SB" inspect ffffffffffff 2>/dev/null
rc=$?
[ $rc = 3 ] || fail "inspect an unknown run: exit $rc"
"$SB" events "$R" --bogus 2>"$tmp/err"
rc=$?
[ $rc = 2 ] || fail "events --bogus: exit $rc, want 2"
grep -q 'usage: sanbox events' "$tmp/err" || fail "events --bogus prints no usage"
"$SB" ps --nope 2>/dev/null
rc=$?
[ $rc = 2 ] || fail "ps --nope: exit $rc"
"$SB" --nope ps 2>/dev/null
rc=$?
[ $rc = 2 ] || fail "sanbox --nope: exit $rc"
"$SB" nosuchcommand 2>/dev/null
rc=$?
[ $rc = 2 ] || fail "unknown command: exit $rc"
"$SB" admin append "$R" operator.note 'not json' 2>/dev/null
[ $? != 0 ] || fail "admin append with bad JSON succeeded"

# -- help
"$SB" help attach >"$tmp/help" || fail "help attach exit $?"
grep -q '^usage: sanbox attach RUN' "$tmp/help" || fail "help attach: $(cat "$tmp/help")"
"$SB" attach --help | grep -q '^usage: sanbox attach' || fail "attach --help"
"$SB" help >"$tmp/help" && grep -q 'attach' "$tmp/help" || fail "help lists no commands"
# every command help lists is one main runs: its --help prints its usage
for c in $("$SB" __complete commands); do
	"$SB" "$c" --help >"$tmp/help" || fail "$c --help: exit $?"
	grep -q "^usage: sanbox $c\b" "$tmp/help" || fail "$c --help: $(head -1 "$tmp/help")"
	"$SB" help | grep -q "^  $c " || fail "help does not list $c"
done
"$SB" version --json >"$tmp/ver" && json_lines "$tmp/ver" "evs[0]['version'] == '$("$SB" version | sed 's/^sanbox //')'" ||
	fail "version --json: $(cat "$tmp/ver")"
"$SB" daemon status --json >"$tmp/st" && json_lines "$tmp/st" "evs[0]['version'] == '$("$SB" version | sed 's/^sanbox //')'" ||
	fail "the daemon's version differs from the CLI's: $(cat "$tmp/st")"

# -- attach from an offset to a live run, then stopped: exits 0 after run.stopped
runs_hang
R3=$("$SB" run --detach --name live -- true) || fail "run --detach (live)"
i=0
until "$SB" events "$R3" --json --type run.started | grep -q started; do
	i=$((i + 1))
	[ $i -lt 200 ] || fail "the live run did not start"
	sleep 0.05
done
last=$("$SB" events --all --json | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["offset"])')
from=$((last + 1))
"$SB" attach "$R3" --from "$from" --json >"$tmp/att" 2>"$tmp/att.err" &
apid=$!
bg="$bg $apid"
o1=$("$SB" admin append "$R3" operator.note '{"text":"one"}') || fail "admin append"
[ "$o1" = "$from" ] || fail "admin append printed offset $o1, want $from"
wait_for "$tmp/att" '"one"' || fail "attach did not print a live event"
"$SB" admin append "$R2" operator.note '{"text":"other run"}' >/dev/null || fail "append R2"
"$SB" admin append "$R3" operator.note '{"text":"two"}' >/dev/null || fail "append two"
# operators annotate; they cannot write what the host records
"$SB" admin append "$R3" run.stopped '{"reason":"test"}' 2>"$tmp/err" && fail "an operator wrote run.stopped"
grep -q 'may not emit' "$tmp/err" || fail "forged run.stopped: $(cat "$tmp/err")"
"$SB" stop "$R3" >/dev/null || fail "stop the live run"
i=0
while kill -0 "$apid" 2>/dev/null; do
	i=$((i + 1))
	[ $i -lt 400 ] || fail "attach did not end after run.stopped"
	sleep 0.05
done
wait "$apid"
rc=$?
[ $rc = 0 ] || fail "attach exit $rc after run.stopped: $(cat "$tmp/att.err")"
json_lines "$tmp/att" "[(e['type'], e['payload'].get('text') or e['payload'].get('reason'))
	for e in evs] == [('operator.note','one'), ('operator.note','two'), ('run.stopped','stopped')] and
	evs[0]['offset'] == $from and all(e['run'] == '$R3' for e in evs) and
	evs[0]['source'] == 'operator' and evs[0]['payload']['by'] == 'local'" ||
	fail "attach printed: $(cat "$tmp/att")"
runs_fail
# attach from the start replays the backlog first, then stops at the first run.stopped
"$SB" attach "$R" --json >"$tmp/att0" || fail "attach from the start"
json_lines "$tmp/att0" "evs[-1]['type'] == 'run.stopped' and evs[0]['type'] == 'run.created'" ||
	fail "attach from the start: $(cat "$tmp/att0")"

# -- SIGINT detaches from a live run; the daemon keeps running
runs_hang
R4=$("$SB" run --detach -- true) || fail "run --detach (live, to detach from)"
o=$("$SB" admin append "$R4" operator.note '{"text":"before"}') || fail "append before"
"$SB" attach "$R4" --from $((o + 1)) >"$tmp/att2" 2>"$tmp/att2.err" &
apid=$!
bg="$bg $apid"
"$SB" admin append "$R4" operator.note '{"text":"live"}' >/dev/null
wait_for "$tmp/att2" 'live' || fail "attach did not follow R4: $(cat "$tmp/att2.err")"
kill -INT "$apid"
i=0
while kill -0 "$apid" 2>/dev/null; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "attach ignored SIGINT"
	sleep 0.05
done
wait "$apid"
rc=$?
[ $rc = 0 ] || fail "attach detached with exit $rc"
grep -q 'detached' "$tmp/att2.err" || fail "no detach message: $(cat "$tmp/att2.err")"
! grep -q 'before' "$tmp/att2" || fail "attach --from printed an earlier event"
[ "$(daemon_pid)" = "$pid" ] && proc_alive "$pid" || fail "daemon gone after detach"
"$SB" daemon status >/dev/null || fail "daemon status after detach"
"$SB" stop "$R4" >/dev/null || fail "stop the run detached from"
runs_fail
wait_stopped "$R4" || fail "$R4 did not stop"

# -- daemon stop
"$SB" daemon stop --json >"$tmp/stop" || fail "daemon stop exit $?"
json_lines "$tmp/stop" "evs[0]['running'] is False and evs[0]['runs_stopped'] == 0" ||
	fail "daemon stop --json: $(cat "$tmp/stop")"
proc_alive "$pid" && fail "daemon still runs after daemon stop returned"
"$SB" daemon status --json >"$tmp/st" 2>/dev/null
rc=$?
[ $rc = 4 ] || fail "status of a stopped daemon: exit $rc, want 4"
json_lines "$tmp/st" "evs[0]['running'] is False" || fail "status --json: $(cat "$tmp/st")"
"$SB" daemon stop >/dev/null || fail "daemon stop with none running"

echo "PASS cli_basic"
