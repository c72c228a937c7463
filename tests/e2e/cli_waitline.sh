#!/bin/sh
# The waiting line: a call the daemon is slow to answer shows, on a
# terminal, "OP: waiting for sanboxd, Ns" on stderr, counting up, cleared
# when the answer comes; piped, nothing extra is printed. The daemon is
# held with SIGSTOP during the call, so the answer is slow for certain.
. "$(dirname "$0")/lib/bootless.sh"

"$SB" daemon start >/dev/null || fail "daemon start"
d=$(daemon_pid)
"$SB" run --detach --name held -- true >/dev/null || fail "run"

# -- on a terminal (script(1) gives the command a pty): gdb holds the
# daemon with SIGSTOP once the CLI has found it and makes its call, and
# lets it go 3.5 s later; the line counts up meanwhile
cat >"$tmp/gdb.cmd" <<GDB
set pagination off
set print thread-events off
set print inferior-events off
break cli_call
run
shell kill -STOP $d
shell (sleep 3.5; kill -CONT $d) >/dev/null 2>&1 &
delete
continue
GDB
script -q -e -c "gdb -q -batch -x $tmp/gdb.cmd --args $SB ps --format name" "$tmp/tty.out" \
	>/dev/null 2>&1 &
p=$!
bg="$bg $p"
wait $p || fail "ps on a terminal: exit $?: $(cat "$tmp/tty.out")"
kill -CONT "$d"
grep -aq 'waiting for sanboxd, 1s' "$tmp/tty.out" &&
	grep -aq 'waiting for sanboxd, 3s' "$tmp/tty.out" ||
	fail "no counting line on a terminal: $(cat "$tmp/tty.out")"
# cleared: the line is overwritten with spaces before the answer is printed
cr=$(printf '\r')
grep -aq "waiting for sanboxd, 3s $cr *${cr}held" "$tmp/tty.out" ||
	fail "the answer does not follow a cleared line: $(cat -A "$tmp/tty.out" | grep held)"

# -- piped: the same slow call prints the answer only
sed "s|^run\$|run ps --format name >$tmp/p.out 2>$tmp/p.err|; s/sleep 3.5/sleep 2.5/" "$tmp/gdb.cmd" >"$tmp/gdb2.cmd"
gdb -q -batch -x "$tmp/gdb2.cmd" --args "$SB" ps --format name >"$tmp/gdb.out" 2>&1
rc=$?
kill -CONT "$d"
[ $rc = 0 ] || fail "ps piped: exit $rc: $(cat "$tmp/p.err")"
grep -q 'hit Breakpoint' "$tmp/gdb.out" || fail "gdb: $(cat "$tmp/gdb.out")"
[ "$(cat "$tmp/p.out")" = held ] && ! grep -q waiting "$tmp/p.err" ||
	fail "piped: stdout '$(cat "$tmp/p.out")' stderr '$(cat "$tmp/p.err")'"
echo "ok $test_name"
