#!/bin/sh
# sanbox ps and the runner a run's machine runs on, on made-up records
# (tests/tools/mkrecord; no microVM): runs all on the local runner print
# the table as ever, with no RUNNER column; one run on another runner adds
# RUNNER before STATUS, naming each run's; --format runner and ps --json's
# runner give it too ("local" for a record from before runners).
. "$(dirname "$0")/lib/bootless.sh"

command -v jq >/dev/null || fail "jq is missing (make deps)"
MK=$BUILD/tests/mkrecord
[ -x "$MK" ] || fail "$MK not built"
mkdir -p "$SANBOX_HOME/log"

# record RUN NAME RUNNER-JSON: an ended run (RUNNER-JSON "" leaves it out)
record() {
	extra=${3:+,runner:$3}
	jq -nc "
{type:\"run.created\",source:\"host\",t:0,payload:{name:\"$2\",template:\"shell\",group:\"\"$extra}},
{type:\"run.exited\",source:\"host\",t:10,payload:{status:0}},
{type:\"run.stopped\",source:\"host\",t:20,payload:{reason:\"exited\"}}" |
		"$MK" "$SANBOX_HOME/log" "$1" || fail "mkrecord $1"
}

record 0123456789abcdef old ""
record 1123456789abcdef here '"local"'
for cols in 80 140; do
	COLUMNS=$cols "$SB" ps >"$tmp/ps" 2>"$tmp/err" || fail "ps: $(cat "$tmp/err")"
	head -1 "$tmp/ps" | grep -q '^RUN  *NAME ' || fail "ps ($cols): $(cat "$tmp/ps")"
	grep -q 'RUNNER' "$tmp/ps" && fail "all local, yet a RUNNER column ($cols): $(cat "$tmp/ps")"
done
"$SB" ps --format name,runner >"$tmp/f" || fail "ps --format runner"
[ "$(sort "$tmp/f")" = "$(printf 'here\tlocal\nold\tlocal')" ] ||
	fail "--format runner: $(cat "$tmp/f")"

"$SB" daemon stop >/dev/null 2>&1 || fail "daemon stop"
i=0
while [ -f "$SANBOX_HOME/sanboxd.pid" ] && proc_alive "$(cat "$SANBOX_HOME/sanboxd.pid")"; do
	i=$((i + 1))
	[ $i -lt 200 ] || fail "the daemon did not stop"
	sleep 0.05
done
record 2123456789abcdef far '"far-host"'
for cols in 80 140; do
	COLUMNS=$cols "$SB" ps >"$tmp/ps" 2>"$tmp/err" || fail "ps: $(cat "$tmp/err")"
	head -1 "$tmp/ps" | grep -Eq ' RUNNER +STATUS ' ||
		fail "a run on another runner, no RUNNER before STATUS ($cols): $(cat "$tmp/ps")"
	grep -Eq '^212345678.* far .*far-host +exited 0 ' "$tmp/ps" ||
		fail "ps ($cols) does not name far-host: $(cat "$tmp/ps")"
	grep -Eq '^112345678.* here .*local +exited 0 ' "$tmp/ps" ||
		fail "ps ($cols) does not name local: $(cat "$tmp/ps")"
done
# a filter that leaves out the remote run leaves out the column
"$SB" ps --filter name=here >"$tmp/ps" || fail "ps --filter"
grep -q 'RUNNER' "$tmp/ps" && fail "RUNNER for local runs only: $(cat "$tmp/ps")"
"$SB" ps --json >"$tmp/ps.json" || fail "ps --json"
jq -e 'map({(.run): .runner}) | add == {"0123456789abcdef": "local",
	"1123456789abcdef": "local", "2123456789abcdef": "far-host"}' "$tmp/ps.json" >/dev/null ||
	fail "ps --json runner: $(cat "$tmp/ps.json")"
echo "PASS $test_name"
