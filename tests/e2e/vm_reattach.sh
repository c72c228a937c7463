#!/bin/sh
# A daemon killed with SIGKILL while microVMs run: the next daemon takes
# the runs up, they go on and end normally (exit status, output after the
# kill, files, model access with the same virtual key), every event
# acknowledged before the kill is still there, a VM that died meanwhile is
# the only one marked failed, and nothing is left behind (no model stub of
# the killed daemon, no QEMU once the runs are over). A daemon killed
# between QEMU's new layer and the move of disk.qcow2 (played here by the
# test, as QEMU's monitor while no daemon runs) loses nothing: the next
# daemon points the link at the layer QEMU writes, and later snapshots work.
. "$(dirname "$0")/lib/vm.sh"

daemon_pid() { cat "$SANBOX_HOME/sanboxd.pid" 2>/dev/null; }
status_of() { "$SB" inspect "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["status"])'; }
stub_pids() { # the model stubs whose parent is pid $1
	for c in /proc/[0-9]*/cmdline; do
		p=${c#/proc/}; p=${p%/cmdline}
		tr '\0' ' ' 2>/dev/null <"$c" | grep -q sanbox-model-stub || continue
		[ "$(sed 's/.*) . \([0-9]*\).*/\1/' "/proc/$p/stat" 2>/dev/null)" = "$1" ] && echo "$p"
	done
}

# a prompt run first: its harness talks to the model stub, which the
# daemon starts
"$SB" run --timeout 120s "fix the failing test" >"$SANBOX_HOME/p.out" 2>&1 ||
	bad "prompt run" "$(tail -n 3 "$SANBOX_HOME/p.out")"
pid1=$(daemon_pid)
stubs=$(stub_pids "$pid1")
[ -n "$stubs" ] && ok "the daemon runs a model stub" || bad "stub" "no model stub child of $pid1"

# long runs: ticks before and after the kill; one reaches the gateway after it
A=$("$SB" run --detach --name ticker --timeout 300s -- /bin/sh -c \
	'for i in $(seq 1 24); do echo tick $i; sleep 0.5; done; echo done > out.txt; exit 7')
B=$("$SB" run --detach --name caller --timeout 300s -- /bin/sh -c \
	'sleep 8; wget -q -O- --header "Authorization: Bearer $OPENAI_API_KEY" $OPENAI_BASE_URL/models; echo; echo called')
C=$("$SB" run --detach --name victim --timeout 300s -- /bin/sh -c 'sleep 600')
D=$("$SB" run --detach --name writer --snapshots off --timeout 300s -- /bin/sh -c \
	'for i in $(seq 1 120); do echo $i >> n.txt; sync; sleep 0.5; done; echo end >> n.txt')
for i in $(seq 1 180); do
	has_event "$A" "e['type']=='agent.output' and 'tick 3' in e['payload']['data']" &&
		has_event "$C" "e['type']=='harness.input.ready'" &&
		has_event "$B" "e['type']=='harness.input.ready'" &&
		has_event "$D" "e['type']=='harness.input.ready'" && break
	sleep 1
done
has_event "$A" "e['type']=='agent.output' and 'tick 3' in e['payload']['data']" ||
	bad "setup" "the runs did not start"
before=$("$SB" events --all --json | python3 -c '
import json, sys
print(" ".join(str(json.loads(l)["offset"]) for l in sys.stdin if l.strip()))')

kill -9 "$pid1"
proc_wait_gone "$pid1" || bad "kill" "the daemon did not die"
gone=1
for i in $(seq 1 50); do
	gone=1
	for s in $stubs; do proc_alive "$s" && gone=0; done
	[ $gone = 1 ] && break
	sleep 0.1
done
[ $gone = 1 ] && ok "the killed daemon's model stub died with it" || bad "orphan" "model stub $stubs still runs"
# while no daemon runs, run D's QEMU makes a new layer, as a snapshot the
# daemon was killed in would have left it: QEMU writes layers/1.qcow2,
# disk.qcow2 still names layers/0.qcow2
python3 - "$SANBOX_HOME/runs/$D" <<'PY' || bad "setup" "could not play QEMU's half-made snapshot"
import json, os, socket, sys
d = sys.argv[1]
path = d + "/qmp.sock"
os.unlink(path)
srv = socket.socket(socket.AF_UNIX)
srv.bind(path)
srv.listen(1)
srv.settimeout(10)
conn, _ = srv.accept()  # QEMU reconnects within a second
f = conn.makefile("rw")
def cmd(name, **args):
    f.write(json.dumps({"execute": name, "arguments": args}) + "\n")
    f.flush()
    while True:
        r = json.loads(f.readline())
        if "error" in r:
            sys.exit("QMP %s: %s" % (name, r["error"]))
        if "return" in r:
            return r["return"]
json.loads(f.readline())  # the greeting
cmd("qmp_capabilities")
node = cmd("query-block")[0]["inserted"]["node-name"]
top = os.path.realpath(d + "/layers") + "/1.qcow2"
cmd("blockdev-snapshot-sync", **{"node-name": node, "snapshot-file": top,
    "snapshot-node-name": "layer1", "format": "qcow2", "mode": "absolute-paths"})
conn.close()
srv.close()
os.unlink(path)
PY
[ "$(readlink "$SANBOX_HOME/runs/$D/disk.qcow2")" = layers/0.qcow2 ] || bad "setup" "disk.qcow2 moved"
# while no daemon runs, one VM dies
cpid=$(cat "$SANBOX_HOME/runs/$C/qemu.pid")
kill -9 "$cpid"
proc_wait_gone "$cpid" 50 || bad "setup" "QEMU of $C did not die"

"$SB" daemon start >/dev/null || bad "restart" "$(tail -n 3 "$SANBOX_HOME/sanboxd.log")"
timeout 200 "$SB" attach "$A" >"$SANBOX_HOME/a.out" 2>&1
rc=$?
[ "$(status_of "$A")" = exited ] && has_event "$A" "e['type']=='run.exited' and e['payload']['status']==7" &&
	ok "a run taken up again ends normally (exit 7)" || bad "reattach" "status $(status_of "$A") (attach $rc)"
has_event "$A" "e['type']=='agent.output' and 'tick 24' in e['payload']['data']" &&
	ok "output after the kill is recorded" || bad "output" "no tick 24"
has_event "$A" "e['type']=='run.failed'" && bad "reattach" "run.failed: $("$SB" events "$A" --type run.failed)"
[ "$("$SB" fs cat "$A" out.txt)" = done ] && ok "its files are there" || bad "files" "out.txt"
timeout 200 "$SB" attach "$B" >/dev/null 2>&1
has_event "$B" "e['type']=='agent.output' and 'stub/scripted' in e['payload']['data']" &&
	[ "$(status_of "$B")" = exited ] &&
	ok "the gateway knows the run's virtual key after the restart" ||
	bad "gateway after restart" "$("$SB" events "$B" --type agent.output | tail -n 3)"
has_event "$C" "e['type']=='run.failed' and 'ended while sanboxd was not running' in e['payload']['reason']" &&
	[ "$(status_of "$C")" = failed ] && ok "only the VM that died is marked failed" ||
	bad "gone VM" "$("$SB" events "$C" --type run | tail -n 2)"
"$SB" events --all --json | python3 -c '
import json, sys
have = {json.loads(l)["offset"] for l in sys.stdin if l.strip()}
want = {int(x) for x in sys.argv[1].split()}
sys.exit(0 if want <= have else 1)' "$before" &&
	ok "every event acknowledged before the kill is there" || bad "events" "some were lost"
for i in $(seq 1 100); do
	[ "$(readlink "$SANBOX_HOME/runs/$D/disk.qcow2")" = layers/1.qcow2 ] && break
	sleep 0.1
done
[ "$(readlink "$SANBOX_HOME/runs/$D/disk.qcow2")" = layers/1.qcow2 ] &&
	ok "the next daemon points disk.qcow2 at the layer QEMU writes" ||
	bad "half-made snapshot" "disk.qcow2 -> $(readlink "$SANBOX_HOME/runs/$D/disk.qcow2")"
"$SB" snapshot "$D" >"$SANBOX_HOME/d.snap" 2>&1 &&
	"$SB" snapshots "$D" --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
sys.exit(0 if [x["snapshot"] for x in s["snapshots"]] == ["s1"] else 1)' &&
	ok "a snapshot after it freezes that layer" || bad "snapshot after" "$(cat "$SANBOX_HOME/d.snap")"
timeout 200 "$SB" attach "$D" >/dev/null 2>&1
[ "$("$SB" fs cat "$D" n.txt | wc -l)" = 121 ] && [ "$("$SB" fs cat "$D" n.txt | tail -n 1)" = end ] &&
	ok "nothing it wrote after the half-made snapshot is lost" ||
	bad "half-made snapshot" "n.txt: $("$SB" fs cat "$D" n.txt 2>&1 | tail -n 2)"
"$SB" daemon stop >/dev/null
left=""
for p in "$SANBOX_HOME"/runs/*/qemu.pid; do
	[ -f "$p" ] && proc_alive "$(cat "$p")" && left="$left $(cat "$p")"
done
[ -z "$left" ] && ok "no QEMU left behind" || bad "orphans" "QEMU$left still runs"
exit $((failures > 0))
