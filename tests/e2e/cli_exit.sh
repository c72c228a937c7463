#!/bin/sh
# The CLI as one program: usage errors exit 2 with one 'sanbox: ' line and
# the usage for every command and subcommand, --help everywhere, the exit
# code table, --json of stop and admin, and the daemon's three states:
# not running, running, and running but not answering (a daemon stopped
# with SIGSTOP holds its lock): status tells them apart, autostart never
# starts a second daemon beside it, and a start right after kill -9 of the
# daemon goes on. No microVM: runs use the bootless template.
. "$(dirname "$0")/lib/bootless.sh"

stopped=""
trap '[ -n "$stopped" ] && kill -CONT "$stopped" 2>/dev/null; bootless_cleanup' EXIT

# usage_err CMD ARGS...: exit 2, the command's usage on stderr, nothing on
# stdout, and its first line a 'sanbox: ' line when the option was wrong
usage_err() {
	u=$1
	"$SB" "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ $rc = 2 ] || fail "sanbox $*: exit $rc, want 2: $(cat "$tmp/err")"
	grep -q "usage: sanbox $u" "$tmp/err" || fail "sanbox $*: no usage: $(cat "$tmp/err")"
	[ ! -s "$tmp/out" ] || fail "sanbox $*: printed on stdout: $(cat "$tmp/out")"
}
json_is() { python3 -c "import json, sys; j = json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$1"; }

# -- not running: exit 4, state not-running; nothing started by status
"$SB" daemon status --json >"$tmp/st" 2>&1
rc=$?
[ $rc = 4 ] || fail "status with no daemon: exit $rc, want 4"
json_is "$tmp/st" "j['state'] == 'not-running' and j['running'] is False and j['home'] == '$SANBOX_HOME'" ||
	fail "status --json with no daemon: $(cat "$tmp/st")"
"$SB" daemon status | grep -q "^sanboxd: not running for $SANBOX_HOME" || fail "status text, not running"
[ -z "$(daemon_pid)" ] || fail "daemon status started a daemon"

# -- usage errors, for every command and subcommand (the commands as help lists them)
cmds=$("$SB" help | sed -n '/^Commands:/,/^$/s/^  \([a-z]*\) .*/\1/p')
for c in run attach events ps inspect stop snapshot snapshots fork resume diff daemon admin \
	template fs cp doctor secret help version; do
	case " $(echo $cmds) " in *" $c "*) ;; *) fail "help does not list $c" ;; esac
done
for c in $cmds; do
	usage_err "$c" --bogus-option
	[ "$(head -1 "$tmp/err")" = "sanbox: $c: unknown option '--bogus-option'" ] ||
		fail "$c --bogus-option: no one-line error: $(cat "$tmp/err")"
	"$SB" "$c" --help >"$tmp/out" 2>&1 || fail "$c --help: exit $?"
	head -1 "$tmp/out" | grep -q "^usage: sanbox $c" || fail "$c --help: $(head -2 "$tmp/out")"
	"$SB" help "$c" | cmp -s - "$tmp/out" || fail "help $c differs from $c --help"
done
usage_err attach
usage_err attach a b
usage_err inspect
usage_err stop
usage_err stop --group g extra
usage_err wait
usage_err wait --group g extra
usage_err wait --timeout
usage_err events
usage_err events --all somerun
usage_err version extra
usage_err doctor extra
usage_err daemon
usage_err daemon bogus
usage_err daemon status extra
usage_err admin append onlyrun operator.note
usage_err admin token
usage_err admin token create name extra
usage_err cp
usage_err cp run:f
usage_err cp run:f a b
usage_err cp nocolon dest
usage_err cp :f dest
usage_err cp -x run:f dest
[ "$(head -1 "$tmp/err")" = "sanbox: cp: unknown option '-x'" ] || fail "cp -x: $(head -1 "$tmp/err")"
usage_err fs cat
usage_err fs ls run a b
usage_err secret set
usage_err secret rm a b
usage_err secret set NAME --json   # prints no data: takes no --json
usage_err template build
usage_err template ls extra
usage_err help run extra
usage_err run --cpu
grep -q "^sanbox: run: option '--cpu' needs a value" "$tmp/err" || fail "--cpu: $(cat "$tmp/err")"
usage_err events --from
for sub in "daemon status" "daemon start" "admin append" "admin reproject" "secret ls" "template ls"; do
	# shellcheck disable=SC2086
	"$SB" $sub --help >"$tmp/out" || fail "$sub --help: exit $?"
	head -1 "$tmp/out" | grep -q "^usage: sanbox ${sub% *}" || fail "$sub --help: $(head -1 "$tmp/out")"
done
[ -z "$(daemon_pid)" ] || fail "a usage error started a daemon"
# bad option values: one line, exit 2
for args in "--cpu 0" "--cpu 65" "--cpu x" "--memory 1" "--timeout soon" "--budget -1" \
	"--on-budget maybe" "--env novalue" "--record-quota 0" "--record-quota 12X" "--record-quota 2T"; do
	# shellcheck disable=SC2086
	"$SB" run $args -- true >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ $rc = 2 ] || fail "run $args: exit $rc, want 2"
	[ "$(wc -l <"$tmp/err")" = 1 ] && grep -q '^sanbox: ' "$tmp/err" || fail "run $args: $(cat "$tmp/err")"
done
"$SB" events --from 12x somerun 2>"$tmp/err"
[ $? = 2 ] || fail "events --from 12x: exit $?"
"$SB" help nosuchcommand 2>/dev/null
[ $? = 2 ] || fail "help nosuchcommand: exit $?"
"$SB" --home 2>"$tmp/err"
[ $? = 2 ] && grep -q "^sanbox: option '--home' needs a value" "$tmp/err" || fail "--home without a value"
"$SB" 2>/dev/null
[ $? = 2 ] || fail "no command: exit $?"

# -- the exit code table
"$SB" help >"$tmp/help" || fail "help exit $?"
for code in "0  ok" "1  error" "2  usage" "3  not-found" "4  unavailable" "122  wait-timeout" "123  budget" \
	"124  timeout" "125  run-failed" "143  stopped"; do
	grep -q "^ *$code " "$tmp/help" || fail "help lacks exit code '$code'"
done

# -- running: exit 0, state running
"$SB" daemon start --json >"$tmp/st" || fail "daemon start exit $?"
pid=$(daemon_pid)
json_is "$tmp/st" "j['state'] == 'running' and j['running'] is True and j['pid'] == $pid" ||
	fail "daemon start --json: $(cat "$tmp/st")"
"$SB" daemon status >"$tmp/st" || fail "daemon status exit $?"
grep -q "^sanboxd: running for $SANBOX_HOME (pid $pid," "$tmp/st" || fail "status text: $(cat "$tmp/st")"

# -- admin --json
"$SB" admin reproject --json >"$tmp/a" || fail "admin reproject --json"
json_is "$tmp/a" "list(j) == ['checkpoint'] and isinstance(j['checkpoint'], int)" ||
	fail "admin reproject --json: $(cat "$tmp/a")"
"$SB" admin token create --json >"$tmp/a" || fail "admin token create --json"
json_is "$tmp/a" "list(j) == ['token'] and len(j['token']) >= 32 and all(c in '0123456789abcdef' for c in j['token'])" ||
	fail "admin token create --json: $(cat "$tmp/a")"

# -- stop --json: what was stopped
runs_hang
R1=$("$SB" run --detach --group g1 -- true) || fail "run R1"
R2=$("$SB" run --detach --group g1 -- true) || fail "run R2"
R3=$("$SB" run --detach -- true) || fail "run R3"
"$SB" admin append --json "$R3" operator.note '{"text":"hi"}' >"$tmp/a" || fail "admin append --json"
off=$("$SB" events "$R3" --json --type operator.note | python3 -c 'import json,sys; print(json.load(sys.stdin)["offset"])')
json_is "$tmp/a" "j == {'offset': $off}" || fail "admin append --json: $(cat "$tmp/a"), want offset $off"
"$SB" stop --json "$R3" >"$tmp/s" || fail "stop --json exit $?"
json_is "$tmp/s" "j == {'runs': ['$R3']}" || fail "stop --json: $(cat "$tmp/s")"
"$SB" stop --group g1 --json >"$tmp/s" || fail "stop --group --json exit $?"
json_is "$tmp/s" "j['group'] == 'g1' and sorted(j['runs']) == sorted(['$R1', '$R2'])" ||
	fail "stop --group --json: $(cat "$tmp/s")"
"$SB" stop --group g1 --json >"$tmp/s" || fail "stop --group --json (none live)"
json_is "$tmp/s" "j == {'group': 'g1', 'runs': []}" || fail "stop of an ended group: $(cat "$tmp/s")"
"$SB" stop --json ffffffffffff >"$tmp/s" 2>"$tmp/err"
[ $? = 3 ] || fail "stop --json of an unknown run: exit $?, want 3"
json_is "$tmp/s" "j == {'runs': []}" || fail "stop --json of an unknown run: $(cat "$tmp/s")"
runs_fail
for r in "$R1" "$R2" "$R3"; do wait_stopped "$r" || fail "$r did not stop"; done

# -- running but not answering: SIGSTOP holds the lock and answers nothing
kill -STOP "$pid"
stopped=$pid
t0=$(date +%s)
"$SB" daemon status --json >"$tmp/st" 2>&1
rc=$?
[ $rc = 4 ] || fail "status of a stopped daemon: exit $rc, want 4"
json_is "$tmp/st" "j['state'] == 'not-answering' and j['running'] is True and j['pid'] == $pid" ||
	fail "status --json of a stopped daemon: $(cat "$tmp/st")"
"$SB" daemon status >"$tmp/st"
[ $? = 4 ] && grep -q "running but not answering .*(pid $pid)" "$tmp/st" ||
	fail "status text of a stopped daemon: $(cat "$tmp/st")"
# autostart does not start a second daemon: one line naming the pid and the log
"$SB" ps >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 4 ] || fail "ps beside a stopped daemon: exit $rc, want 4"
[ "$(wc -l <"$tmp/err")" = 1 ] && grep -q "pid $pid" "$tmp/err" && grep -q 'sanboxd.log' "$tmp/err" ||
	fail "ps beside a stopped daemon: $(cat "$tmp/err")"
"$SB" daemon start 2>"$tmp/err"
[ $? = 4 ] && grep -q "pid $pid" "$tmp/err" || fail "daemon start beside a stopped daemon: $(cat "$tmp/err")"
"$SB" daemon stop 2>"$tmp/err"
[ $? = 4 ] && grep -q "pid $pid" "$tmp/err" || fail "daemon stop of a stopped daemon: $(cat "$tmp/err")"
[ "$(daemon_pid)" = "$pid" ] || fail "the pid file changed: $(daemon_pid)"
[ "$(grep -c 'sanboxd: serving' "$SANBOX_HOME/sanboxd.log")" = 1 ] ||
	fail "a second daemon was started: $(cat "$SANBOX_HOME/sanboxd.log")"
[ $(($(date +%s) - t0)) -lt 30 ] || fail "telling a stopped daemon took $(($(date +%s) - t0)) s"
kill -CONT "$pid"
stopped=""
"$SB" daemon status >/dev/null || fail "status after SIGCONT: exit $?"

# -- a start right after kill -9 of the daemon goes on
for i in 1 2 3; do
	pid=$(daemon_pid)
	kill -9 "$pid"
	"$SB" daemon start >"$tmp/st" 2>"$tmp/err" || fail "start after kill -9 ($i): $(cat "$tmp/err")"
	[ "$(daemon_pid)" != "$pid" ] || fail "start after kill -9: the pid file still names $pid"
done
! grep -q 'another sanboxd' "$SANBOX_HOME/sanboxd.log" || fail "a start met the old lock: $(cat "$SANBOX_HOME/sanboxd.log")"

# -- --remote: status names the remote daemon, not the local home
"$SB" --remote tls+tcp://127.0.0.1:1 --token t --ca /dev/null daemon status --json >"$tmp/st" 2>&1
rc=$?
[ $rc = 4 ] || fail "remote status of nothing: exit $rc, want 4"
json_is "$tmp/st" "j['state'] == 'not-answering' and j['url'] == 'tls+tcp://127.0.0.1:1' and 'home' not in j and 'remote' not in j" ||
	fail "remote status --json: $(cat "$tmp/st")"
"$SB" --remote tls+tcp://127.0.0.1:1 --token t --ca /dev/null daemon status >"$tmp/st"
grep -q 'tls+tcp://127.0.0.1:1' "$tmp/st" && ! grep -q "$SANBOX_HOME" "$tmp/st" ||
	fail "remote status text: $(cat "$tmp/st")"

"$SB" daemon stop >/dev/null || fail "daemon stop"
echo "PASS cli_exit"
