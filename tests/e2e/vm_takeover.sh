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
# (it is cancelled).
#
# The kill's point is made deterministic by a `cat` first in PATH: QEMU
# saves memory through `exec:cat > layers/N.mem`; this cat writes the
# first MiB of a memory file and waits while the file $GATE exists.
. "$(dirname "$0")/lib/vm.sh"

daemon_pid() { cat "$SANBOX_HOME/sanboxd.pid" 2>/dev/null; }
realcat=$(command -v cat)
wrap=$SANBOX_HOME/bin
mkdir -p "$wrap"
cat >"$wrap/cat" <<EOF
#!/bin/sh
case \$(readlink /proc/\$\$/fd/1) in
*/layers/*.mem)
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

timeout 300 "$SB" attach "$R" >/dev/null 2>&1
"$SB" inspect "$R" --json | python3 -c '
import json, sys
sys.exit(0 if json.load(sys.stdin)["run"]["status"] == "exited" else 1)' &&
	[ "$("$SB" fs cat "$R" out.txt)" = done ] && [ "$(ticks "$R")" = 400 ] &&
	ok "the run ends normally, every tick there" ||
	bad "end" "$("$SB" events "$R" --type run | tail -n 2); ticks $(ticks "$R")"
has_event "$R" "e['type']=='run.failed'" && bad "end" "run.failed"
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
"$SB" daemon stop >/dev/null
exit $((failures > 0))
