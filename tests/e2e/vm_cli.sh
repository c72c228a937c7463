#!/bin/sh
# What a docker user reaches for, on a real microVM: sanbox logs (lines
# reassembled from the record's output chunks, stdout and stderr apart,
# escaped; --tail, --since, --json, -f to the run's end), and fs of a live
# run showing what its guest wrote (it writes its files out first).
. "$(dirname "$0")/lib/vm.sh"

work=$SANBOX_HOME/work
mkdir -p "$work"

R=$("$SB" run --detach --name logs -- /bin/sh -c '
	echo first; printf "half" >&2; sleep 1; echo " done" >&2
	i=1; while [ $i -le 300 ]; do echo "line $i"; i=$((i + 1)); done
	printf "esc\033[2Jx\n"; sleep 2; printf "no newline at the end"') || { bad "run" "exit $?"; exit 1; }
"$SB" logs -f "$R" >"$work/follow.out" 2>"$work/follow.err" &
fpid=$!
"$SB" attach "$R" >/dev/null 2>&1
i=0
while kill -0 "$fpid" 2>/dev/null; do
	i=$((i + 1))
	[ $i -lt 100 ] || { bad "logs -f" "did not end with the run"; kill "$fpid"; break; }
	sleep 0.1
done
wait "$fpid" && ok "logs -f ends with the run" || bad "logs -f" "exit $?"

"$SB" logs "$R" >"$work/out" 2>"$work/err" || bad "logs" "exit $?"
python3 - "$work/out" "$work/err" <<'EOF' && ok "logs: lines reassembled, stdout and stderr apart, escaped" || bad "logs" "see above"
import sys
out = open(sys.argv[1], "rb").read().decode().split("\n")
err = open(sys.argv[2], "rb").read().decode().split("\n")
want = ["first"] + ["line %d" % i for i in range(1, 301)] + ["esc\\x1b[2Jx", "no newline at the end", ""]
if out != want:
    print("stdout:", out[:3], out[-4:], len(out))
    sys.exit(1)
if err != ["half done", ""]:
    print("stderr:", err)
    sys.exit(1)
EOF
cmp -s "$work/out" "$work/follow.out" && cmp -s "$work/err" "$work/follow.err" &&
	ok "logs -f printed what logs prints" || bad "logs -f" "$(diff "$work/out" "$work/follow.out" | head -5)"
[ "$("$SB" logs "$R" --tail 3 2>/dev/null)" = "$(printf 'line 300\nesc\\x1b[2Jx\nno newline at the end')" ] &&
	ok "logs --tail 3" || bad "logs --tail" "$("$SB" logs "$R" --tail 3 2>&1)"
[ -z "$("$SB" logs "$R" --tail 0 2>&1)" ] && ok "logs --tail 0" || bad "logs --tail 0" "printed something"
[ "$("$SB" logs "$R" --since 100d 2>/dev/null | wc -l)" = 303 ] && ok "logs --since 100d" ||
	bad "logs --since" "$("$SB" logs "$R" --since 100d 2>/dev/null | wc -l) lines"
sleep 3 # the run ended over 3 s ago: nothing of it is from the last 2 s
[ -z "$("$SB" logs "$R" --since 2s 2>&1)" ] && ok "logs --since 2s" || bad "logs --since 2s" "printed something"
"$SB" logs "$R" --json --tail 2 >"$work/json" || bad "logs --json" "exit $?"
python3 - "$work/json" <<'EOF' && ok "logs --json exact" || bad "logs --json" "$(cat "$work/json")"
import json, sys
ls = [json.loads(l) for l in open(sys.argv[1])]
assert [(l["stream"], l["line"]) for l in ls] == [("stdout", "esc\x1b[2Jx"), ("stdout", "no newline at the end")], ls
assert all(isinstance(l["ts"], int) and l["ts"] > 0 for l in ls)
EOF
"$SB" logs "$R" --tail x 2>/dev/null
[ $? = 2 ] && ok "logs --tail x: exit 2" || bad "logs --tail x" "exit $?"
"$SB" logs ffffffffffff 2>/dev/null
[ $? = 3 ] && ok "logs of no run: exit 3" || bad "logs of no run" "exit $?"

# -- a live run's disk as its guest sees it: what it wrote before a read
# (its own output says so) is what fs cat and fs ls show, ten times
L=$("$SB" run --detach --name live -- /bin/sh -c '
	i=0; while [ $i -lt 3000 ]; do i=$((i + 1)); echo $i >c.new; mv c.new count.txt; echo $i >"f$i"; echo "wrote $i"; sleep 0.1; done') ||
	bad "run live" "exit $?"
wait_event "$L" "e['type'] == 'agent.output' and 'wrote 5' in e['payload']['data']" 120 || bad "live" "no output"
fresh=0
for t in 1 2 3 4 5 6 7 8 9 10; do
	k=$("$SB" logs "$L" --tail 1 2>/dev/null | sed -n 's/^wrote //p')
	v=$("$SB" fs cat "$L" count.txt 2>"$work/fs.err")
	"$SB" fs ls "$L" >"$work/ls" 2>>"$work/fs.err"
	if [ -n "$k" ] && [ -n "$v" ] && [ "$v" -ge "$k" ] && grep -q " f$k\$" "$work/ls"; then
		fresh=$((fresh + 1))
	else
		echo "read $t: the guest had written $k, fs cat gave '$v': $(cat "$work/fs.err")"
	fi
done
[ $fresh = 10 ] && ok "fs cat and fs ls of a live run: what the guest wrote, 10 of 10" ||
	bad "live reads" "$fresh of 10 fresh"
"$SB" stop "$L" >/dev/null

# -- df: the space by kind, what the runs wrote counted
"$SB" df --json >"$work/df" || bad "df --json" "exit $?"
python3 - "$work/df" <<'EOF' && ok "df --json" || bad "df --json" "$(cat "$work/df")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["runs"] == 2 and d["runs_bytes"] > 0 and d["log_bytes"] > 0, d
assert all(isinstance(d[k], int) and d[k] >= 0 for k in d), d
EOF
"$SB" df >"$work/df.txt" && grep -q '^total ' "$work/df.txt" && grep -q '^runs .* 2 runs$' "$work/df.txt" &&
	ok "df" || bad "df" "$(cat "$work/df.txt")"

[ "$failures" = 0 ] || exit 1
echo "PASS vm_cli"
