#!/bin/sh
# kill -9 of the daemon, again and again at random moments, under live runs
# whose guests print numbered lines, write numbered files and call the
# model: each time the CLI starts a new daemon and it takes the runs up.
# Then the runs are stopped, and each run's record holds what its guest
# did, as its disk shows it: every line once and in order, every file's
# creation once and in order up to the last file on the disk, no guest_seq
# twice, no drop, one run.exited. CRASH_RUNS (4) and CRASH_KILLS (12) size
# it; the soak script (tests/soak/crash_record.sh) runs it longer.
. "$(dirname "$0")/lib/vm.sh"

RUNS=${CRASH_RUNS:-4}
KILLS=${CRASH_KILLS:-12}
tmp=$SANBOX_HOME/t
mkdir -p "$tmp"

daemon_pid() { cat "$SANBOX_HOME/sanboxd.pid" 2>/dev/null; }
# live_runs: the ids of the runs whose record has no run.stopped yet
live_runs() {
	for r in $runs; do
		stopped "$r" || echo "$r"
	done
}
stopped() { [ -n "$("$SB" events "$1" --type run.stopped 2>/dev/null)" ]; }
# taken_up RUN N: the run's record says N times that a daemon took it up
taken_up() {
	[ "$("$SB" events "$1" --type run.warning 2>/dev/null | grep -c 'taken up again')" -ge "$2" ]
}

runs=
for n in $(seq 1 "$RUNS"); do
	r=$("$SB" run --detach --name "crash$n" --timeout 3600s -- /bin/sh -c "
		h=\"Authorization: Bearer \$OPENAI_API_KEY\"
		i=1
		while :; do
			echo \"line \$i\"
			echo \$i >f\$i.txt
			if [ \$((i % 25)) = 0 ]; then
				wget -q -O /dev/null --header \"\$h\" \$OPENAI_BASE_URL/models &&
					echo model-ok >>/model.txt || echo model-failed >>/model.txt
			fi
			sleep 0.05
			i=\$((i + 1))
		done") || bad "run $n" "could not start"
	runs="$runs $r"
done
for r in $runs; do
	wait_event "$r" "e['type']=='agent.output' and 'line 2' in e['payload']['data']" 300 ||
		bad "setup" "run $r did not start printing"
done

kills=0
while [ $kills -lt "$KILLS" ] && [ -n "$(live_runs)" ]; do
	# a random moment: 0.2 to 2.5 s into the daemon's life
	sleep "$(python3 -c 'import random; print(round(random.uniform(0.2, 2.5), 2))')"
	live=$(live_runs)
	pid=$(daemon_pid)
	kill -9 "$pid" 2>/dev/null
	proc_wait_gone "$pid" || { bad "kill" "the daemon $pid did not die"; break; }
	kills=$((kills + 1))
	t0=$(date +%s%N)
	"$SB" daemon start >/dev/null 2>&1 || { bad "restart" "$(tail -n 3 "$SANBOX_HOME/sanboxd.log")"; break; }
	# each run that was live is taken up (or its end is recorded)
	for r in $live; do
		i=0
		until taken_up "$r" "$kills" || stopped "$r"; do
			i=$((i + 1))
			[ $i -lt 600 ] || { bad "takeover" "run $r not taken up after kill $kills"; break 3; }
			sleep 0.1
		done
	done
	echo "# kill $kills: $(echo $live | wc -w) live runs taken up in $((($(date +%s%N) - t0) / 1000000)) ms"
done
echo "# $kills kills of the daemon under $RUNS runs"
[ $kills = "$KILLS" ] || bad "kills" "only $kills kills: the runs ended"

"$SB" stop $runs >/dev/null || bad "stop" "sanbox stop failed"
for r in $runs; do
	timeout 600 "$SB" attach "$r" >/dev/null 2>&1
	events_json "$r" >"$tmp/$r.json"
	"$SB" fs cat "$r" /model.txt >"$tmp/$r.model" 2>/dev/null
	# the last file the guest wrote, as its disk has it (empty when the
	# stop came between its creation and its write)
	set -- $(python3 -c '
import json, sys
p = [json.loads(l)["payload"] for l in open(sys.argv[1]) if "agent.file.changed" in l]
n = p[-1]["path"].split("/f")[1].split(".")[0] if p else "0"
print(n, n if p and p[-1]["size"] else "")' "$tmp/$r.json")
	last=$1
	disk=ok
	[ "$("$SB" fs cat "$r" "f$last.txt" 2>/dev/null)" = "${2:-}" ] ||
		disk="f$last.txt is not on the disk as recorded: $("$SB" fs cat "$r" "f$last.txt" 2>&1 | head -c 100)"
	"$SB" fs cat "$r" "f$((last + 1)).txt" >/dev/null 2>&1 && disk="f$((last + 1)).txt is on the disk, not in the record"
	python3 - "$tmp/$r.json" "$last" "$disk" <<'EOF' && ok "run $r: every line, file and event once, in order ($(cat "$tmp/$r.check"))" || bad "record of $r" "$(cat "$tmp/$r.check")"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
files, disk = int(sys.argv[2]), sys.argv[3]
fails = [] if disk == "ok" else [disk]
out = "".join(e["payload"]["data"] for e in evs
              if e["type"] == "agent.output" and e["payload"]["stream"] == "stdout")
lines = out.count("\n")
want = "".join("line %d\n" % i for i in range(1, lines + 1))
if out != want:
    got = out.splitlines()
    for i, (a, b) in enumerate(zip(got, want.splitlines())):
        if a != b:
            fails.append("output differs at line %d: %r, not %r" % (i + 1, a, b))
            break
if lines not in (files, files + 1):
    fails.append("%d lines printed, %d files written" % (lines, files))
paths = [e["payload"]["path"] for e in evs if e["type"] == "agent.file.changed"]
want_paths = ["/workspace/f%d.txt" % i for i in range(1, files + 1)]
if files < 10 or paths != want_paths:
    missing = sorted(set(want_paths) - set(paths))
    twice = sorted({p for p in paths if paths.count(p) > 1})
    fails.append("file changes: %d missing (%s), %d twice (%s), or out of order" %
                 (len(missing), missing[:5], len(twice), twice[:5]))
seqs = [e["payload"]["guest_seq"] for e in evs if e["source"] in ("guest", "harness")]
if seqs != sorted(set(seqs)):
    fails.append("guest_seq not strictly increasing: %s" % seqs[:50])
gaps = [e["payload"]["message"] for e in evs if e["type"] == "run.warning"
        and "dropped guest events" in e["payload"]["message"]]
if gaps:
    fails.append("drops: %s" % gaps[:3])
ex = [e for e in evs if e["type"] == "run.exited"]
if len(ex) != 1:
    fails.append("run.exited: %s" % ex)
open(sys.argv[1].replace(".json", ".check"), "w").write(
    "; ".join(fails) or "%d lines, %d files, %d events" % (lines, files, len(evs)))
sys.exit(1 if fails else 0)
EOF
done
grep -q model-ok "$tmp"/*.model && ok "the guests reached the model across the kills" ||
	bad "model" "no call reached the model: $(cat "$tmp"/*.model | sort | uniq -c)"
[ $failures = 0 ]
