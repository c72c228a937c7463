#!/bin/sh
# A daemon killed with SIGKILL in the middle of a memory snapshot (its
# guest paused by QMP stop, its harness frozen, its memory being written):
# the next daemon takes the run up and the guest goes on (QMP cont, THAW:
# its output continues at once, not after the agent's 30 s of waiting for
# a THAW), the run ends normally, and nothing is left half done: no memory
# file that no snapshot.saved names, no snapshot.pending, every layer but
# the top frozen (0444), the chain sound (qemu-img check), and a memory
# snapshot taken afterwards is recorded with its file 0444. Twice: once
# with the migration completed while no daemon ran (QEMU left in
# postmigrate), once with it still under way when the next daemon came
# (it is cancelled). A daemon killed 30 ms, 300 ms or 1.5 s into `fork -n
# 3` of that snapshot leaves no QEMU of the home that no live run owns.
# A memory file whose stream header is damaged is refused in one line
# naming it; one damaged inside fails its fork's run, naming it.
#
# The kill's point is made deterministic by a `cat` first in PATH: QEMU
# saves memory through a `cat > layers/N.mem.part`; this cat writes the
# first MiB of a memory file and waits while the file $GATE exists.
. "$(dirname "$0")/lib/vm.sh"

daemon_pid() { cat "$SANBOX_HOME/sanboxd.pid" 2>/dev/null; }
realcat=$(command -v cat)
wrap=$SANBOX_HOME/bin
mkdir -p "$wrap"
cat >"$wrap/cat" <<EOF
#!/bin/sh
case \$(readlink /proc/\$\$/fd/1) in
*/layers/*.mem.part)
	if [ -e "\$GATE" ]; then
		dd bs=1048576 count=1 iflag=fullblock 2>/dev/null
		: >"\$GATE.reached"
		while [ -e "\$GATE" ]; do sleep 0.05; done
	fi ;;
esac
exec $realcat "\$@"
EOF
chmod +x "$wrap/cat"
export PATH="$wrap:$PATH" GATE=$SANBOX_HOME/gate

ticks() { "$SB" events "$1" --type agent.output --json | python3 -c '
import json, re, sys
n = 0
for l in sys.stdin:
    for m in re.findall(r"tick (\d+)", json.loads(l)["payload"].get("data", "")):
        n = max(n, int(m))
print(n)'; }
# wait_ticks RUN N SECONDS: waits for tick N
wait_ticks() {
	i=0
	while [ $i -lt $(($3 * 5)) ]; do
		[ "$(ticks "$1")" -ge "$2" ] && return 0
		sleep 0.2
		i=$((i + 1))
	done
	return 1
}

R=$("$SB" run --detach --accel tcg --name ticker --timeout 900s -- /bin/sh -c \
	'i=0; while [ $i -lt 400 ]; do i=$((i + 1)); echo tick $i; sleep 0.25; done; echo done > out.txt')
wait_ticks "$R" 3 180 || bad "setup" "the run never ticked"

# kill_in_snapshot ROUND: a memory snapshot, the daemon killed while its
# memory is being written
kill_in_snapshot() {
	: >"$GATE"
	rm -f "$GATE.reached"
	"$SB" snapshot --memory "$R" >"$SANBOX_HOME/snap$1.out" 2>&1 &
	i=0
	while [ ! -e "$GATE.reached" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
	[ -e "$GATE.reached" ] || bad "setup $1" "the memory was never written"
	pid=$(daemon_pid)
	kill -9 "$pid"
	proc_wait_gone "$pid" || bad "kill $1" "the daemon did not die"
	wait
	[ -e "$SANBOX_HOME/runs/$R/snapshot.pending" ] || bad "setup $1" "no snapshot.pending"
}

# after_takeover ROUND: the run goes on, at once, and nothing is left
after_takeover() {
	n=$(ticks "$R")
	wait_ticks "$R" $((n + 3)) 60 && ok "round $1: the guest goes on after the takeover" ||
		bad "round $1: paused" "no tick after $n"
	grep -q "no THAW came" "$SANBOX_HOME/runs/$R/console.log" &&
		bad "round $1: frozen" "the harness waited for its own THAW"
	i=0
	while [ -e "$SANBOX_HOME/runs/$R/snapshot.pending" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	[ ! -e "$SANBOX_HOME/runs/$R/snapshot.pending" ] && ok "round $1: snapshot.pending is gone" ||
		bad "round $1: pending" "snapshot.pending is left"
	named=$("$SB" snapshots "$R" --json | python3 -c '
import json, sys
print(" ".join(s.get("memory", "") for s in json.load(sys.stdin)["snapshots"] if s.get("memory")))')
	left=""
	for f in "$SANBOX_HOME/runs/$R"/layers/*.mem; do
		[ -e "$f" ] || continue
		case " $named " in *" runs/$R/layers/${f##*/} "*) ;; *) left="$left ${f##*/}" ;; esac
	done
	[ -z "$left" ] && ok "round $1: no memory file that no snapshot names" ||
		bad "round $1: memory file" "$left left (named: $named)"
}

# ---- round 1: the migration completes while no daemon runs ----
kill_in_snapshot 1
rm -f "$GATE" # QEMU finishes the save alone: postmigrate, paused
i=0
while [ $i -lt 300 ] && pgrep -f "$SANBOX_HOME/runs/$R/layers/.*mem" >/dev/null; do sleep 0.1; i=$((i + 1)); done
"$SB" daemon start >/dev/null || bad "restart 1" "$(tail -n 3 "$SANBOX_HOME/sanboxd.log")"
after_takeover 1

# ---- round 2: the migration is under way when the next daemon comes ----
kill_in_snapshot 2
"$SB" daemon start >/dev/null || bad "restart 2" "$(tail -n 3 "$SANBOX_HOME/sanboxd.log")"
rm -f "$GATE" # the cancelled save's cat ends
after_takeover 2

# a memory snapshot after the takeovers: recorded, its file frozen
S=$("$SB" snapshot --memory "$R" 2>&1)
mem=$("$SB" snapshots "$R" --json | python3 -c '
import json, sys
print([s for s in json.load(sys.stdin)["snapshots"] if s["snapshot"] == sys.argv[1]][0]["memory"])' "$S" 2>/dev/null)
[ -n "$mem" ] && [ -f "$SANBOX_HOME/$mem" ] && [ -z "$(find "$SANBOX_HOME/$mem" -perm /222)" ] &&
	ok "a memory snapshot after the takeover: $S, its file 0444" || bad "snapshot after" "$S: $mem"

# ---- kill -9 at several points of `fork -n 3`: no QEMU no run owns ----
# home_qemus: "RUN PID" of every QEMU whose arguments name a run of this home
home_qemus() {
	QMP_PRE="socket,id=qmp0,path=$SANBOX_HOME/runs/" python3 - <<'PY'
import os
pre = os.environ["QMP_PRE"].encode()
for p in os.listdir("/proc"):
    try:
        args = open("/proc/%s/cmdline" % p, "rb").read().split(b"\0") if p.isdigit() else []
    except OSError:
        continue
    for a in args:
        if a.startswith(pre):
            print(a[len(pre):].split(b"/")[0].decode(), p)
PY
}
live_runs() { "$SB" ps --json | python3 -c '
import json, sys
print(" ".join(r["run"] for r in json.load(sys.stdin) if r["status"] in ("created", "running")))'; }
for ms in 30 300 1500; do
	"$SB" fork "$R" --snapshot "$S" -n 3 --detach >/dev/null 2>&1 &
	sleep "$(echo "scale=3; $ms / 1000" | bc)"
	pid=$(daemon_pid)
	kill -9 "$pid"
	proc_wait_gone "$pid" || bad "fork kill $ms" "the daemon did not die"
	wait
	"$SB" daemon start >/dev/null || bad "restart after fork $ms" "$(tail -n 3 "$SANBOX_HOME/sanboxd.log")"
	live=" $(live_runs) "
	stray=""
	for i in $(seq 1 50); do
		stray=$(home_qemus | while read -r run p; do
			case $live in *" $run "*) ;; *) echo "$run:$p" ;; esac
		done)
		[ -z "$stray" ] && break
		sleep 0.1
	done
	[ -z "$stray" ] && ok "killed ${ms} ms into fork -n 3: every QEMU of the home is a live run's" ||
		bad "fork kill $ms" "QEMU no run owns: $stray"
	for F in $live; do [ "$F" = "$R" ] || "$SB" stop "$F" >/dev/null 2>&1; done
done

timeout 300 "$SB" attach "$R" >/dev/null 2>&1
"$SB" inspect "$R" --json | python3 -c '
import json, sys
sys.exit(0 if json.load(sys.stdin)["run"]["status"] == "exited" else 1)' &&
	[ "$("$SB" fs cat "$R" out.txt)" = done ] && [ "$(ticks "$R")" = 400 ] &&
	ok "the run ends normally, every tick there" ||
	bad "end" "$("$SB" events "$R" --type run | tail -n 2); ticks $(ticks "$R")"
has_event "$R" "e['type']=='run.failed'" && bad "end" "run.failed"
"$SB" fs cat "$R" /etc/machine-id | grep -qxE '[0-9a-f]{32}' &&
	ok "a booted run has a machine id" || bad "machine id" "$("$SB" fs cat "$R" /etc/machine-id 2>&1)"
layers=$SANBOX_HOME/runs/$R/layers
top=$(readlink "$SANBOX_HOME/runs/$R/disk.qcow2")
writable=""
for f in "$layers"/*.qcow2 "$layers"/*.mem; do
	[ -e "$f" ] && [ "layers/${f##*/}" != "$top" ] && [ -n "$(find "$f" -perm /222)" ] &&
		writable="$writable ${f##*/}"
done
[ -z "$writable" ] && ok "every layer and memory file but the top is 0444" || bad "modes" "$writable writable"
qemu-img check -f qcow2 "$SANBOX_HOME/runs/$R/disk.qcow2" >"$SANBOX_HOME/check.out" 2>&1 &&
	[ "$(qemu-img info --backing-chain "$SANBOX_HOME/runs/$R/disk.qcow2" | grep -c '^image:')" -ge 4 ] &&
	ok "the layer chain is sound (qemu-img check)" || bad "chain" "$(tail -n 3 "$SANBOX_HOME/check.out")"

# ---- a damaged memory file ----
mem=$SANBOX_HOME/$mem
cp "$mem" "$SANBOX_HOME/mem.orig"
nruns=$("$SB" ps --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
printf 'XXXX' | dd of="$mem" conv=notrunc 2>/dev/null
out=$("$SB" fork "$R" --snapshot "$S" --detach 2>&1)
rc=$?
[ $rc != 0 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && case $out in *"$mem is damaged"*) true ;; *) false ;; esac &&
	[ "$("$SB" ps --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = "$nruns" ] &&
	ok "a memory file without its stream header: refused in one line naming it, nothing recorded" ||
	bad "damaged header" "exit $rc: $out"
cp "$SANBOX_HOME/mem.orig" "$mem"
head -c 4096 /dev/urandom | dd of="$mem" bs=1 seek=8 conv=notrunc 2>/dev/null
F=$("$SB" fork "$R" --snapshot "$S" --detach 2>&1)
wait_event "$F" "e['type']=='run.failed'" 120
has_event "$F" "e['type']=='run.failed' and e['payload']['reason'].startswith('loading the memory snapshot $mem failed: ')" &&
	ok "a memory file damaged inside: its run fails naming it" ||
	bad "damaged memory" "$("$SB" events "$F" --type run.failed 2>&1)"
"$SB" daemon stop >/dev/null
left=$(home_qemus)
[ -z "$left" ] && ok "no QEMU of the home is left" || bad "orphans" "$left"
exit $((failures > 0))
