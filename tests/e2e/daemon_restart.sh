#!/bin/sh
# kill -9 of the daemon while the CLI appends events and events --follow follows
# the run: the next command starts a new daemon (over the stale pid file and
# sockets), every acknowledged append is in the log, the follow carries on
# across the restart and prints every event from its offset exactly once,
# and the projections equal a rebuild. Runs use a template whose files are
# empty (lib/bootless.sh): their records exist, no microVM boots.
. "$(dirname "$0")/lib/bootless.sh"

R=$("$SB" run --detach --name victim -- true) || fail "run --detach exit $?"
wait_stopped "$R" || fail "run $R did not stop"
pid1=$(daemon_pid)
[ -n "$pid1" ] || fail "no daemon pid"
last=$("$SB" events --all --json | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["offset"])') ||
	fail "events --all"
from=$((last + 1))

# a follow of the run's events across the restart (the run has ended: attach would end)
"$SB" events "$R" --from "$from" --json --follow >"$tmp/att" 2>"$tmp/att.err" &
apid=$!
bg="$bg $apid"

# appends, one CLI process each; "i offset" for each acknowledged one
N=150
: >"$tmp/acked"
(
	i=1
	while [ $i -le $N ]; do
		if o=$("$SB" admin append "$R" operator.note "{\"text\":\"m$i\"}" 2>>"$tmp/app.err"); then
			echo "$i $o" >>"$tmp/acked"
		fi
		i=$((i + 1))
	done
) &
wpid=$!
bg="$bg $wpid"

i=0
until [ "$(wc -l <"$tmp/acked")" -ge 50 ]; do
	i=$((i + 1))
	[ $i -lt 600 ] || fail "appends too slow: $(cat "$tmp/app.err")"
	sleep 0.05
done
kill -9 "$pid1"
proc_wait_gone "$pid1" || fail "kill -9 did not end the daemon"
[ -S "$SANBOX_HOME/api.sock" ] || fail "expected a stale api.sock after kill -9"
# the next command starts a new daemon (the appends may beat it to it)
"$SB" daemon start >/dev/null || fail "daemon start after kill -9: $(tail -3 "$SANBOX_HOME/sanboxd.log")"
pid2=$(daemon_pid)
[ -n "$pid2" ] && [ "$pid2" != "$pid1" ] && proc_alive "$pid2" || fail "no new daemon ($pid1 -> $pid2)"

i=0
while kill -0 "$wpid" 2>/dev/null; do
	i=$((i + 1))
	[ $i -lt 1200 ] || fail "appends did not finish after the restart"
	sleep 0.05
done
acked=$(wc -l <"$tmp/acked")
[ "$acked" -ge $((N - 2)) ] || fail "only $acked of $N appends acknowledged: $(tail -3 "$tmp/app.err")"
# the attach has caught up with the log once it printed the last append;
# Ctrl-C then detaches it (exit 0)
lastoff=$(tail -1 "$tmp/acked" | cut -d' ' -f2)
i=0
until grep -q "\"offset\": *$lastoff[,}]" "$tmp/att"; do
	i=$((i + 1))
	[ $i -lt 600 ] || fail "attach did not print offset $lastoff across the restart: $(cat "$tmp/att.err")"
	sleep 0.05
done
kill -INT "$apid"
wait "$apid"
rc=$?
[ $rc = 0 ] || fail "attach exit $rc across the restart: $(cat "$tmp/att.err")"

# every acknowledged append is in the log, at its offset
"$SB" events "$R" --json >"$tmp/ev" || fail "events after restart"
python3 - "$tmp/ev" "$tmp/acked" <<'EOF' || fail "$(cat "$tmp/check")"
import json, sys
evs = {e["offset"]: e for e in map(json.loads, open(sys.argv[1]))}
for line in open(sys.argv[2]):
    i, off = line.split()
    e = evs.get(int(off))
    if not e or e["type"] != "operator.note" or e["payload"]["text"] != "m" + i or e["source"] != "operator":
        print("acknowledged append m%s at offset %s is not in the log" % (i, off))
        sys.exit(1)
EOF
# the attach printed exactly the log from its offset, once each, in order
python3 - "$tmp/ev" "$tmp/att" "$from" <<'EOF' >"$tmp/check" || fail "$(cat "$tmp/check")"
import json, sys
log = [e["offset"] for e in map(json.loads, open(sys.argv[1])) if e["offset"] >= int(sys.argv[3])]
got = [e["offset"] for e in map(json.loads, open(sys.argv[2]))]
if got != log:
    print("attach got %d events, the log has %d from %s; first difference at %s" % (
        len(got), len(log), sys.argv[3],
        next((i for i, (a, b) in enumerate(zip(got, log)) if a != b), min(len(got), len(log)))))
    sys.exit(1)
EOF

# projections equal a rebuild from offset 0
"$SB" ps --json >"$tmp/ps1" && "$SB" inspect "$R" --json >"$tmp/in1" || fail "ps/inspect"
"$SB" admin reproject >/dev/null || fail "admin reproject"
"$SB" ps --json >"$tmp/ps2" && "$SB" inspect "$R" --json >"$tmp/in2" || fail "ps/inspect after reproject"
cmp -s "$tmp/ps1" "$tmp/ps2" || fail "ps --json differs after reproject"
cmp -s "$tmp/in1" "$tmp/in2" || fail "inspect --json differs after reproject"
python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))['run']
sys.exit(0 if r['last_type'] == 'operator.note' and r['events'] == r['last_seq'] else 1)" "$tmp/in2" ||
	fail "run state after the restart: $(cat "$tmp/in2")"

# an attach whose feed went quiet before the kill sees the new daemon's
# events live (its feed reconnects, and what it missed comes from the log)
R2=$("$SB" run --detach --name quiet -- true) || fail "run --detach exit $?"
wait_stopped "$R2" || fail "run $R2 did not stop"
o2=$("$SB" admin append "$R2" operator.note '{"text":"before the quiet restart"}') ||
	fail "append before the quiet restart"
"$SB" events "$R2" --from "$o2" --json --follow >"$tmp/att2" 2>"$tmp/att2.err" &
apid=$!
bg="$bg $apid"
# it subscribes before it reads the log: once it printed that event, its
# feed is connected, and quiet
i=0
until grep -q 'before the quiet restart' "$tmp/att2"; do
	i=$((i + 1))
	[ $i -lt 200 ] || fail "the quiet follower did not print its backlog: $(cat "$tmp/att2.err")"
	sleep 0.05
done
kill -9 "$(daemon_pid)"
"$SB" daemon start >/dev/null || fail "second daemon start after kill -9"
"$SB" admin append "$R2" operator.note '{"text":"after the quiet restart"}' >/dev/null ||
	fail "append after the quiet restart"
i=0
until grep -q 'after the quiet restart' "$tmp/att2"; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "quiet attach missed the event after the restart: $(cat "$tmp/att2.err")"
	sleep 0.05
done
# a run directory no record knows (a fork a killed daemon was making) is
# deleted when the next daemon starts; a recorded run's, and what does not
# name a run, stay
mkdir -p "$SANBOX_HOME/runs/0123456789ab/layers" "$SANBOX_HOME/runs/not-a-run"
: >"$SANBOX_HOME/runs/0123456789ab/layers/0.qcow2"
ln -s layers/0.qcow2 "$SANBOX_HOME/runs/0123456789ab/disk.qcow2"
mkdir -p "$SANBOX_HOME/runs/$R"
kill -9 "$(daemon_pid)"
"$SB" daemon start >/dev/null || fail "daemon start after the orphan"
[ ! -e "$SANBOX_HOME/runs/0123456789ab" ] || fail "an unrecorded run's directory was left"
[ -d "$SANBOX_HOME/runs/not-a-run" ] && [ -d "$SANBOX_HOME/runs/$R" ] ||
	fail "the sweep deleted what is not an unrecorded run's"
echo "PASS daemon_restart"
