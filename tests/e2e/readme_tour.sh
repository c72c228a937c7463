#!/bin/sh
# The README's short tour, command by command, in its order, as a new user
# pastes it, in a folder with the project's examples: each succeeds, but
# the one its comment says is refused. Only after the run named audit starts
# does the test wait (for it to write its file), as a reader would before
# the next line.
. "$(dirname "$0")/lib/vm.sh"

work=$SANBOX_HOME/tour
mkdir -p "$work"
awk '/^## A short tour/ { t = 1 } t && /^```sh/ { b = 1; next } b && /^```/ { exit } b' \
	"$REPO/README.md" >"$work/tour"
[ "$(grep -c '^sanbox ' "$work/tour")" -ge 20 ] || { bad "tour" "no tour found in README.md"; exit 1; }
grep -v '^sanbox ' "$work/tour" && { bad "tour" "a line of the tour is not a sanbox command"; exit 1; }

cp -r "$REPO/examples" "$work/" && cd "$work" || exit 1
n=0
while IFS= read -r line; do
	n=$((n + 1))
	cmd=${line%%  #*}
	case "$line" in *"  #"*refused*) want=fail ;; *) want=ok ;; esac
	eval "\"\$SB\" ${cmd#sanbox }" >"$work/out.$n" 2>"$work/err.$n" </dev/null
	rc=$?
	if [ $want = ok ] && [ $rc != 0 ]; then
		bad "tour line $n" "$cmd: exit $rc: $(head -3 "$work/err.$n")"
	elif [ $want = fail ] && [ $rc = 0 ]; then
		bad "tour line $n" "$cmd: succeeded, the README says it is refused"
	else
		ok "tour line $n: $cmd"
	fi
	# a reader reads on while the run writes its first file
	case "$cmd" in
	*"--name audit"*)
		wait_event audit "e['type'] == 'agent.file.changed'" 120 ||
			bad "tour" "the run wrote no file"
		;;
	esac
done <"$work/tour"

# what the tour shows is what the run did (out.N: the output of line N)
line_of() { grep -n -m1 -F -- "$1" "$work/tour" | cut -d: -f1; }
grep -q 'out.txt' "$work/out.$(line_of 'sanbox fs ls audit')" && ok "fs ls showed out.txt" ||
	bad "fs ls" "$(cat "$work/out.$(line_of 'sanbox fs ls audit')")"
[ "$(wc -l <"$work/out.txt")" = 2 ] && ok "cp copied the file the run wrote twice" ||
	bad "cp" "$(cat "$work/out.txt")"
[ "$(cat "$work/out.$(line_of 'sanbox snapshot audit  ')")" = s0 ] &&
	[ "$(cat "$work/out.$(line_of 'sanbox snapshot audit --memory')")" = s1 ] &&
	ok "snapshots s0 and s1" || bad "snapshot ids" "not s0 and s1"
grep -q '^A /workspace/out.txt' "$work/out.$(line_of 'sanbox diff audit')" && ok "diff lists out.txt" ||
	bad "diff" "$(cat "$work/out.$(line_of 'sanbox diff audit')")"
grep -q '^total ' "$work/out.$(line_of 'sanbox df')" && ok "df shows the total" || bad "df" "no total"
out=$(cat "$work/out.$(line_of 'sanbox group inspect deal')")
for r in Financials "Contract risks" "Market scan" "Security posture"; do
	echo "$out" | grep -q "$r .*exited 0" || bad "group inspect" "$r: $out"
done
echo "$out" | grep -q "4 done" && ok "the group's four runs exited 0" || bad "group" "$out"

[ "$failures" = 0 ] || exit 1
echo "PASS readme_tour"
