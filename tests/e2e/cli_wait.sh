#!/bin/sh
# sanbox wait without microVMs (lib/bootless.sh): a run that failed to boot
# returns at once with 125 and its reason; Ctrl-C exits 130 and leaves the
# run live; --json at a timeout gives the live run's status and exit null;
# a wait goes on across a kill -9 and a restart of the daemon and returns
# once its run ends, with the line and the exit attach --exit-status gives.
. "$(dirname "$0")/lib/bootless.sh"

F=$("$SB" run --detach --name failing -- true) || fail "run"
"$SB" wait "$F" >"$tmp/f.out" 2>"$tmp/f.err"
rc=$?
[ $rc = 125 ] && grep -qx "$F failing failed" "$tmp/f.out" && grep -q "run $F failed: " "$tmp/f.err" ||
	fail "a failed run: exit $rc: $(cat "$tmp/f.out" "$tmp/f.err")"

runs_hang
H=$("$SB" run --detach --name hanging -- true) || fail "run"
i=0
until [ "$("$SB" ps --format status --filter name=hanging)" = running ]; do
	i=$((i + 1))
	[ $i -lt 200 ] || fail "the hanging run is not running: $("$SB" ps)"
	sleep 0.05
done

# -- Ctrl-C: 130, the run goes on
"$SB" wait "$H" >"$tmp/i.out" 2>"$tmp/i.err" &
p=$!
bg="$bg $p"
sleep 1
kill -INT $p
wait $p
rc=$?
[ $rc = 130 ] && [ ! -s "$tmp/i.out" ] && grep -q "interrupted; the runs go on" "$tmp/i.err" &&
	[ "$("$SB" ps --format status --filter name=hanging)" = running ] ||
	fail "Ctrl-C: exit $rc: $(cat "$tmp/i.out" "$tmp/i.err")"

# -- --timeout with --json: both runs, the live one with exit null
"$SB" wait --json --timeout 1s "$F" "$H" >"$tmp/t.json" 2>"$tmp/t.err"
rc=$?
[ $rc = 122 ] && grep -q "wait: 1s passed; still live: $H (hanging)" "$tmp/t.err" ||
	fail "--timeout: exit $rc: $(cat "$tmp/t.err")"
python3 - "$tmp/t.json" "$F" "$H" <<'EOF' || fail "--timeout --json: $(cat "$tmp/t.json")"
import json, sys
js = [json.loads(l) for l in open(sys.argv[1])]
assert [j["run"] for j in js] == sys.argv[2:4], js
assert js[0]["status"] == "failed" and js[0]["exit"] == 125 and js[0]["exit_status"] is None, js
assert js[1]["status"] == "running" and js[1]["exit"] is None, js
EOF

# -- across a kill -9 and a restart of the daemon: the feed's gap is read
# from the log, and the run's end is seen
"$SB" wait "$H" >"$tmp/r.out" 2>"$tmp/r.err" &
p=$!
bg="$bg $p"
sleep 1
pid1=$(daemon_pid)
kill -9 "$pid1"
proc_wait_gone "$pid1" || fail "kill -9 did not end the daemon"
"$SB" daemon start >/dev/null || fail "daemon start: $(tail -3 "$SANBOX_HOME/sanboxd.log")"
"$SB" stop "$H" >/dev/null 2>&1
i=0
while kill -0 $p 2>/dev/null; do
	i=$((i + 1))
	[ $i -lt 600 ] || fail "the wait did not return after the restart: $(cat "$tmp/r.err")"
	sleep 0.05
done
wait $p
rc=$?
"$SB" attach --exit-status "$H" >/dev/null 2>&1
want=$?
st=$("$SB" ps --format status --filter name=hanging)
[ $rc = "$want" ] && [ "$(cat "$tmp/r.out")" = "$H hanging $st" ] ||
	fail "after a restart: exit $rc (attach says $want): $(cat "$tmp/r.out" "$tmp/r.err")"
echo "PASS cli_wait"
