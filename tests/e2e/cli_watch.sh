#!/bin/sh
# sanbox watch. Plain lines (stdout not a terminal): a line per run (a
# name's backslash escaped), a line per change (a new run of the group, a
# stop; a note changes no line), the totals and exit 0 once every run of
# the group has ended, at once for runs that have ended, 130 on Ctrl-C, 3
# for no such group or run; across a daemon killed and started again. The
# terminal view in tmux at 80 and 200 columns: every row within the width
# (a wide name too), the totals, the selected run's events (a note's
# control bytes escaped), the filter, stop asking y/n, attach and back with
# Ctrl-C, the help, S, f and r refused with the daemon's reason, a resize,
# q and SIGTERM leaving the runs running and the terminal as it was (the
# shell's prompt and cooked mode back). No microVM: runs use the bootless
# template.
. "$(dirname "$0")/lib/bootless.sh"

command -v tmux >/dev/null || fail "tmux is missing (make deps)"
# tmux servers of this test's own, one for each width
tm() { tmux -S "$tmp/tmux-$width.sock" "$@"; }
watch_cleanup() {
	for width in 80 200; do tm kill-server 2>/dev/null; done
	bootless_cleanup
}
trap watch_cleanup EXIT

# wait_for FILE PATTERN: until a line of FILE matches (grep -E), 10 s
wait_for() {
	i=0
	until grep -qE -- "$2" "$1" 2>/dev/null; do
		i=$((i + 1))
		[ $i -lt 100 ] || fail "no line /$2/ in $(basename "$1"): $(cat "$1")"
		sleep 0.1
	done
}
status_of() { "$SB" ps --format status --filter "name=$1"; }

runs_hang
T='[0-2][0-9]:[0-5][0-9]:[0-5][0-9]'
A=$("$SB" run --detach --timeout 1h --name alpha --group wg -- true) || fail "run alpha"
B=$("$SB" run --detach --timeout 1h --name 'be\ta' --group wg -- true) || fail "run be\\ta"

# -- plain: the rows, then a line per change, the totals at the end
"$SB" watch wg >"$tmp/plain" 2>"$tmp/plain.err" &
wpid=$!
bg="$bg $wpid"
wait_for "$tmp/plain" "^$T be\\\\\\\\ta running - \\\$0\\.0000/\\\$1\\.0000\$"
wait_for "$tmp/plain" "^$T alpha running - \\\$0\\.0000/\\\$1\\.0000\$"
"$SB" admin append alpha operator.note '{"text":"no change to a row"}' >/dev/null || fail "note"
C=$("$SB" run --detach --timeout 1h --name gamma --group wg -- true) || fail "run gamma"
wait_for "$tmp/plain" "^$T gamma running "
"$SB" stop "$A" >/dev/null || fail "stop alpha"
wait_for "$tmp/plain" "^$T alpha stopped - "
[ "$(grep -c ' alpha ' "$tmp/plain")" = 2 ] || fail "alpha's lines are not its start and its stop: $(cat "$tmp/plain")"
proc_alive "$wpid" || fail "watch ended before the group: $(cat "$tmp/plain" "$tmp/plain.err")"
"$SB" stop "$B" "$C" >/dev/null || fail "stop the others"
wait_for "$tmp/plain" "^$T total: 3 runs, 0 done, 3 failed, \\\$0\\.0000/\\\$3\\.0000\$"
proc_wait_gone "$wpid" || fail "watch goes on after the group ended"
wait "$wpid"
[ $? = 0 ] || fail "watch of a group that ended: exit not 0"
grep -vqE "^$T " "$tmp/plain" && fail "a line without its time: $(cat "$tmp/plain")"
[ -s "$tmp/plain.err" ] && fail "watch said something on stderr: $(cat "$tmp/plain.err")"
# runs that have ended: their lines and the totals, at once
"$SB" watch --plain "$A" gamma >"$tmp/ended" || fail "watch of runs that ended: exit $?"
[ "$(wc -l <"$tmp/ended")" = 3 ] && tail -1 "$tmp/ended" | grep -q " total: 2 runs, " ||
	fail "watch of runs that ended: $(cat "$tmp/ended")"
"$SB" watch nothing-here 2>"$tmp/err"
[ $? = 3 ] && grep -q "no group or run 'nothing-here'" "$tmp/err" || fail "watch of nothing: $(cat "$tmp/err")"
# Ctrl-C: exit 130, the run goes on
D=$("$SB" run --detach --timeout 1h --name delta -- true) || fail "run delta"
"$SB" watch delta >"$tmp/int" &
wpid=$!
bg="$bg $wpid"
wait_for "$tmp/int" " delta running "
kill -INT "$wpid"
wait "$wpid"
[ $? = 130 ] || fail "watch after Ctrl-C: exit not 130"
[ "$(status_of delta)" = running ] || fail "Ctrl-C on watch stopped the run"

# -- the terminal view
wide="数据分析报告数据分析报告"
for R in a1 a2 a3; do "$SB" run --detach --timeout 1h --name "$R" --group tv -- true >/dev/null || fail "run $R"; done
"$SB" run --detach --timeout 1h --name "$wide" --group tv -- true >/dev/null || fail "run the wide one"
"$SB" admin append a1 operator.note "$(printf '{"text":"A\\u001b[2J\\u001b]0;owned\\u0007B"}')" >/dev/null ||
	fail "the hostile note"
note_off=$("$SB" admin append a1 operator.note '{"text":"newest"}') || fail "note"

# pane_wait PATTERN: until the pane shows a line matching PATTERN (grep -E), 10 s
pane_wait() {
	i=0
	until tm capture-pane -p -t w >"$tmp/pane" 2>/dev/null && grep -qE -- "$1" "$tmp/pane"; do
		i=$((i + 1))
		[ $i -lt 100 ] || fail "at $width columns, no /$1/ on the screen: $(cat "$tmp/pane")"
		sleep 0.1
	done
}
# pane_fits WIDTH NAME...: no screen line over WIDTH columns (a wide
# character two), and each NAME the first word of a line, or at 80 columns
# its start (cut with an ellipsis)
pane_fits() {
	python3 - "$tmp/pane" "$@" <<'EOF' || fail "the screen at $1 columns: $(cat "$tmp/pane")"
import sys, unicodedata
width = int(sys.argv[2])
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")
for l in lines:
    assert sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in l) <= width, l
firsts = [l.split()[0] for l in lines if l.split()]
for want in sys.argv[3:]:
    assert want in firsts or (width == 80 and
        any(f.startswith(want[:6]) and f.endswith("\u2026") for f in firsts)), (want, firsts)
EOF
}

for width in 80 200; do
	tm new-session -d -s w -x $width -y 30 "env PS1='$ ' sh" || fail "tmux at $width"
	tm send-keys -t w "clear; sh -c 'echo \$\$ >$tmp/wpid; exec $SB watch tv'; echo watch-rc=\$?" Enter
	pane_wait '^NAME +'
	pane_fits $width a1 a2 a3 "$wide"
	grep -q '^sanbox watch  group tv' "$tmp/pane" || fail "the group's line: $(cat "$tmp/pane")"
	if [ $width = 80 ]; then S=a2 totals='4 live, 0 queued, 0 done, 0 failed'; else
		S=a3 totals='3 live, 0 queued, 0 done, 1 failed'; fi
	grep -qE "^4 runs: $totals +cost \\\$0\.0000/\\\$4\.0000" "$tmp/pane" ||
		fail "the totals at $width columns: $(cat "$tmp/pane")"
	budget=/\\\$1\\.0000
	[ $width = 80 ] && budget= # the cost alone, and its bar
	grep -qE "^a1 +(shell/[^ ]+ +)?running +- +\\\$0\\.0000$budget ░+ .* $note_off\$" "$tmp/pane" ||
		fail "a1's row at $width columns: $(cat "$tmp/pane")"
	if [ $width = 200 ]; then
		grep -qE '^NAME .*TEMPLATE/MODEL .*TOKENS IN/OUT .*DENY +SNAP +OFFSET' "$tmp/pane" ||
			fail "not every column at 200: $(head -3 "$tmp/pane")"
	else
		grep -q 'TOKENS' "$tmp/pane" && fail "80 columns hold no TOKENS column: $(head -3 "$tmp/pane")"
	fi
	# the selected run's events: the note escaped, the newest last
	pane_wait "operator.note +local: A\\\\x1b\\[2J\\\\x1b\\]0;owned\\\\x07B\$"
	pane_wait " $note_off +operator\\.note +local: newest\$"
	# the filter keeps the rows it matches; Esc drops it
	tm send-keys -t w / "$S"
	pane_wait "^/$S"
	pane_fits $width "$S"
	grep -q '^a1 ' "$tmp/pane" && fail "the filter $S shows a1: $(cat "$tmp/pane")"
	tm send-keys -t w Escape
	pane_wait '^a1 '
	# stop asks; n leaves the run, y stops it
	tm send-keys -t w / "$S" Enter
	pane_wait "^\\[/$S\\]"
	tm send-keys -t w s
	pane_wait "^stop $S \\([0-9a-f]{12}\\)\\? y/n"
	tm send-keys -t w n
	sleep 0.3
	[ "$(status_of $S)" = running ] || fail "n stopped the run"
	tm send-keys -t w s
	pane_wait "^stop $S "
	tm send-keys -t w y
	pane_wait "^$S +(shell/[^ ]+ +)?stopped "
	[ "$(status_of $S)" = stopped ] || fail "y did not stop the run"
	tm send-keys -t w / BSpace BSpace Enter
	pane_wait '^a1 '
	# Enter attaches; Ctrl-C comes back, the run goes on
	tm send-keys -t w g Enter
	pane_wait '^sanbox watch: attached to a1 '
	pane_wait 'run\.started'
	tm send-keys -t w C-c
	pane_wait '^NAME +'
	[ "$(status_of a1)" = running ] || fail "attach and Ctrl-C stopped a1"
	# the help, then any key back
	tm send-keys -t w '?'
	pane_wait '^sanbox watch: keys'
	tm send-keys -t w x
	pane_wait '^NAME +'
	# S, f and r ask the daemon: a run with no machine or snapshot says why
	tm send-keys -t w g S
	pane_wait "^a1: the VM.s monitor is not connected"
	tm send-keys -t w f
	pane_wait "^fork a1: run [0-9a-f]{12} has no snapshot"
	tm send-keys -t w r
	pane_wait "^a1 has not ended: f forks it"
	# a resize: the table fits the new width
	other=$((width == 80 ? 200 : 80))
	tm resize-window -t w -x $other -y 30
	pane_wait "^a1 "
	sleep 0.3
	tm capture-pane -p -t w >"$tmp/pane"
	pane_fits $other a1 a2 a3 "$wide"
	if [ $other = 200 ]; then
		pane_wait '^NAME .*TEMPLATE/MODEL'
	else
		tm capture-pane -p -t w | grep -q 'TEMPLATE/MODEL' && fail "80 columns after a resize"
	fi
	# q (or SIGTERM): the shell again, in cooked mode; the runs go on
	if [ $width = 80 ]; then
		tm send-keys -t w q
		pane_wait '^watch-rc=0$'
	else
		kill -TERM "$(cat "$tmp/wpid")"
		pane_wait '^watch-rc=130$'
	fi
	grep -q '^NAME ' "$tmp/pane" && fail "the view is still on the screen after it ended: $(cat "$tmp/pane")"
	tm send-keys -t w "stty -a | tr ' ' '\\n' | grep -xE -- '-?(icanon|echo)' | tr '\\n' ' '; echo" Enter
	pane_wait '^icanon echo ?$'
	[ "$(status_of a1)" = running ] || fail "quitting watch stopped a1"
done
"$SB" stop --group tv >/dev/null
"$SB" stop delta >/dev/null

# -- the daemon killed and started again: the watch goes on, each line once
runs_hang
"$SB" run --detach --timeout 1h --name eps --group rg -- true >/dev/null || fail "run eps"
"$SB" run --detach --timeout 1h --name phi --group rg -- true >/dev/null || fail "run phi"
"$SB" watch rg >"$tmp/restart" 2>"$tmp/restart.err" &
wpid=$!
bg="$bg $wpid"
wait_for "$tmp/restart" "^$T phi running "
dpid=$(daemon_pid)
kill -9 "$dpid"
proc_wait_gone "$dpid" || fail "the daemon did not die"
"$SB" daemon start >/dev/null || fail "daemon start"
# the new daemon finds the runs' machines gone: each fails, which the watch
# reads from the new daemon, then it ends with the totals
wait_for "$tmp/restart" "^$T total: 2 runs, 0 done, 2 failed, "
wait "$wpid"
[ $? = 0 ] || fail "watch across a restart: exit not 0"
[ "$(grep -c ' eps ' "$tmp/restart")" = 2 ] && [ "$(grep -c ' phi ' "$tmp/restart")" = 2 ] &&
	grep -q "^$T eps failed " "$tmp/restart" ||
	fail "across a restart: $(cat "$tmp/restart" "$tmp/restart.err")"
echo "PASS cli_watch"
