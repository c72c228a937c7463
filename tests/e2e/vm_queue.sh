#!/bin/sh
# Capacity and the queue: with a capacity of two vCPUs, five one-vCPU runs
# start two and queue three, which start in order as others end; a queued
# run that is stopped never starts; a run that can never fit is refused at
# once; daemon status --json shows the runner's capacity, use and queue;
# the queue survives a daemon killed with SIGKILL.
. "$(dirname "$0")/lib/vm.sh"

printf '{"runs": {"capacity_cpus": 2}}\n' >"$SANBOX_HOME/sanboxd.json"

status() { "$SB" inspect "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["status"])'; }
# offset RUN TYPE: the offset of RUN's first event of TYPE, or nothing
offset() {
	"$SB" events "$1" --json | python3 -c '
import json, sys
for line in sys.stdin:
    e = json.loads(line)
    if e["type"] == sys.argv[1]:
        print(e["offset"]); break' "$2"
}

out=$("$SB" run --detach --cpu 4 --memory 128M -- true 2>&1)
rc=$?
[ $rc = 2 ] && case "$out" in *"asks for 4 vCPUs"*"capacity_cpus"*) true ;; *) false ;; esac &&
	ok "a run that can never fit is refused at once" || bad "never fits" "rc=$rc: $out"
n=$("$SB" ps --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
[ "$n" = 0 ] && ok "the refused run is not recorded" || bad "refused run recorded" "$n runs"

for i in 1 2 3 4 5; do
	cmd="sleep 1"
	[ $i -le 2 ] && cmd="sleep 600" # they hold the capacity until stopped
	id=$("$SB" run --detach --cpu 1 --memory 128M --name "q$i" --timeout 300s -- $cmd) ||
		bad "run q$i" "$id"
	eval "R$i=\$id"
done
s="$(status "$R1") $(status "$R2") $(status "$R3") $(status "$R4") $(status "$R5")"
case "$s" in *" queued queued queued") ok "two start, three queue ($s)" ;; *) bad "queue" "$s" ;; esac
"$SB" ps | grep -q "queued" && ok "ps shows queued" || bad "ps" "$("$SB" ps)"
"$SB" daemon status --json | python3 -c '
import json, sys
r = json.load(sys.stdin)["runners"]
assert [x["name"] for x in r] == ["local"], r
l = r[0]
assert (l["cpus"], l["used_cpus"], l["used_memory_mib"], l["queued"]) == (2, 2, 256, 3), l' &&
	ok "daemon status --json shows the local runner's capacity, what it holds and its queue" ||
	bad "daemon status runners" "$("$SB" daemon status --json)"
"$SB" events "$R3" | grep -q "run.queued.*waits for 1 vCPUs" && ok "run.queued says what it waits for" ||
	bad "run.queued" "$("$SB" events "$R3")"

"$SB" stop "$R4" >/dev/null && [ "$(status "$R4")" = stopped ] && ok "a queued run stops at once" ||
	bad "stop queued" "$(status "$R4")"
"$SB" stop --wait "$R1" >/dev/null
"$SB" attach "$R3" >/dev/null 2>&1
"$SB" stop --wait "$R2" >/dev/null
"$SB" attach "$R5" >/dev/null 2>&1
s="$(status "$R3") $(status "$R5")"
[ "$s" = "exited exited" ] && ok "the queued runs ran" || bad "queued ran" "$s"
[ -z "$(offset "$R4" run.started)" ] && ok "the stopped queued run never started" ||
	bad "stopped queued run started" "$(offset "$R4" run.started)"
s3=$(offset "$R3" run.started) s5=$(offset "$R5" run.started) e1=$(offset "$R1" run.stopped)
[ "$s3" -gt "$e1" ] && [ "$s5" -gt "$s3" ] && ok "queued runs start in order as others end" ||
	bad "order" "end $e1, starts $s3 $s5"

# the queue survives a daemon killed with SIGKILL
A=$("$SB" run --detach --cpu 1 --memory 128M --name long-a --timeout 300s -- sleep 600)
B=$("$SB" run --detach --cpu 1 --memory 128M --name long-b --timeout 300s -- sleep 600)
C=$("$SB" run --detach --cpu 1 --memory 128M --name after -- echo done-after)
[ "$(status "$C")" = queued ] && ok "queued behind two long runs" || bad "queued" "$(status "$C")"
pid=$(cat "$SANBOX_HOME/sanboxd.pid")
kill -9 "$pid"
i=0
while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
[ "$(status "$C")" = queued ] && ok "still queued after the daemon's restart" ||
	bad "after restart" "$(status "$C")"
"$SB" stop --wait "$A" >/dev/null
out=$("$SB" attach "$C" 2>&1)
case "$out" in *done-after*) ok "it starts once capacity frees, after the restart" ;; *) bad "restart queue" "$out" ;; esac
"$SB" stop --wait "$B" >/dev/null
# forks queue as runs do: with the parent holding one vCPU of two, one
# fork of three starts and two wait
P=$("$SB" run --detach --cpu 1 --memory 128M --name parent --group fq --timeout 300s -- sleep 600)
i=0
until [ "$(status "$P")" = running ] || [ $i -ge 120 ]; do sleep 0.5; i=$((i + 1)); done
"$SB" snapshot "$P" >/dev/null || bad "snapshot" "of the parent"
forks=$("$SB" fork "$P" --snapshot s0 -n 3 --detach) || bad "fork -n 3" "$forks"
s=$(for f in $forks; do status "$f"; done | sort | tr '\n' ' ')
[ "$s" = "queued queued running " ] && ok "fork -n 3: one starts, two queue" || bad "fork queue" "$s"
"$SB" stop --wait --group fq >/dev/null
s=$(for f in $forks; do status "$f"; done | sort | tr '\n' ' ')
[ "$s" = "stopped stopped stopped " ] && ok "queued forks stop with their group" || bad "fork stop" "$s"
exit $((failures > 0))
