#!/bin/sh
# Arguments a script can trust: options anywhere before -- (a prompt's
# words are gathered around them, a command follows --), "did you mean"
# for a mistyped command, subcommand, option or event type, and exit 2 for
# every value the daemon refuses, with its words, not the daemon's
# internal ones. No microVM: runs use the bootless template.
. "$(dirname "$0")/lib/bootless.sh"

# one_line CODE ARGS...: sanbox ARGS exits CODE, its first stderr line a
# 'sanbox: ' line, nothing on stdout; the line is left in $tmp/line
one_line() {
	want=$1
	shift
	"$SB" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
	rc=$?
	[ "$rc" = "$want" ] || fail "sanbox $*: exit $rc, want $want: $(cat "$tmp/err")"
	head -1 "$tmp/err" >"$tmp/line"
	grep -q '^sanbox: ' "$tmp/line" || fail "sanbox $*: $(cat "$tmp/err")"
	[ ! -s "$tmp/out" ] || fail "sanbox $*: printed on stdout: $(cat "$tmp/out")"
}
line_has() { grep -qF -- "$1" "$tmp/line" || fail "want '$1' in: $(cat "$tmp/line")"; }
line_lacks() { ! grep -qF -- "$1" "$tmp/line" || fail "'$1' in: $(cat "$tmp/line")"; }

# -- did you mean
one_line 2 frok
line_has "no command 'frok'; did you mean 'fork'?"
one_line 2 snapshto
line_has "did you mean 'snapshot'?"
one_line 2 xyzzy
line_lacks "did you mean"
one_line 2 ps --jsno
line_has "ps: unknown option '--jsno'; did you mean '--json'?"
one_line 2 run --detatch -- true
line_has "did you mean '--detach'?"
one_line 2 daemon stats
line_has "daemon: no subcommand 'stats'; did you mean 'status'?"
one_line 2 events --all --type agent.fil
line_has "no event type 'agent.fil'; did you mean 'agent.file'?"
"$SB" events --all --type agent.file --type run >/dev/null || fail "events --type of known prefixes: exit $?"

# -- options anywhere before --, a prompt's words around them
runs_hang
R=$("$SB" run fix it --detach --name late --snapshots off --timeout 1h) || fail "run with options after the prompt: exit $?"
echo "$R" | grep -qE '^[0-9a-f]{12}$' || fail "run --detach after the prompt printed: $R"
"$SB" events "$R" --json --type run.policy.resolved >"$tmp/pol" || fail "events of $R"
python3 - "$tmp/pol" <<'EOF' || fail "the prompt and options of 'run fix it --detach --name late': $(cat "$tmp/pol")"
import json, sys
e = json.loads(open(sys.argv[1]).readline())
plan = e["payload"]
assert plan.get("prompt") == "fix it", plan.get("prompt")
assert plan.get("argv") in ([], None), plan.get("argv")
EOF
"$SB" inspect late --json | python3 -c 'import json,sys; j=json.load(sys.stdin); sys.exit(0 if j["run"]["name"] == "late" else 1)' ||
	fail "--name after the prompt was not taken"
# a command after --: its own options are its own
C=$("$SB" run --detach -- /bin/echo --detach) || fail "run -- echo --detach: exit $?"
"$SB" events "$C" --json --type run.policy.resolved | python3 -c '
import json, sys
plan = json.loads(sys.stdin.readline())["payload"]
sys.exit(0 if plan.get("argv") == ["/bin/echo", "--detach"] else 1)' || fail "the command after -- lost its words"
one_line 2 run a prompt -- /bin/true
line_has "give a prompt or a command after --, not both"
one_line 2 run --detach --
line_has "give a command after -- or a prompt"
# a one-word prompt that names a program: a hint about --, and it still runs
L=$("$SB" run ls --detach 2>"$tmp/err") || fail "run ls --detach: exit $?"
grep -qF "'ls' is taken as a prompt for the agent; to run it as a command, put it after --: sanbox run -- ls" "$tmp/err" ||
	fail "run ls: no hint: $(cat "$tmp/err")"
[ "$(wc -l <"$tmp/err")" = 1 ] || fail "run ls: more than one line: $(cat "$tmp/err")"
"$SB" run "fix the bug" --detach 2>"$tmp/err" >/dev/null || fail "run 'fix the bug': exit $?"
[ ! -s "$tmp/err" ] || fail "a prompt of words got a hint: $(cat "$tmp/err")"

# -- values the daemon refuses: exit 2, in the user's words
long=$(printf 'a%.0s' $(seq 67))
one_line 2 run --net foo -- true
line_has "network must be none or acl"
line_lacks "spec:"
one_line 2 run --allow a.test:80 -- true
line_has "allow grants need network acl"
one_line 2 run --net acl --allow zz -- true
line_has "grant 'zz'"
one_line 2 run --name "$long" -- true
line_has "at most 63 bytes"
line_lacks "spec:"
one_line 2 run --secret 'a b' -- true
line_has "'a b' is not a secret name"
one_line 2 run -m nosuch/model -- true
line_has "unknown model 'nosuch/model'"
line_lacks "STATE_DIR"
# a runner the daemon has not: refused in one line naming its runners,
# nothing recorded; the one it has is every run's by default
before=$("$SB" ps --all -q | wc -l)
one_line 2 run --runner elsewhere -- true
line_has "no runner 'elsewhere' here: this daemon has local"
after=$("$SB" ps --all -q | wc -l)
[ "$before" = "$after" ] || fail "a run on no runner was recorded: $before runs, then $after"
"$SB" events "$R" --json --type run.created | python3 -c '
import json, sys
sys.exit(0 if json.loads(sys.stdin.readline())["payload"].get("runner") == "local" else 1)' ||
	fail "run.created of $R does not name runner local"
"$SB" inspect "$R" --json | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["run"]["runner"] == "local" else 1)' ||
	fail "inspect --json of $R does not name runner local"
"$SB" ps --all --json | python3 -c 'import json,sys; sys.exit(0 if {r["runner"] for r in json.load(sys.stdin)} == {"local"} else 1)' ||
	fail "ps --json does not name runner local: $("$SB" ps --all --json)"
"$SB" inspect "$R" | grep -q '^runner *local$' || fail "inspect of $R has no runner line: $("$SB" inspect "$R")"
# a group file naming a runner the daemon has not: the whole group is
# refused in one line at the runner's place, nothing recorded
printf 'name: far\nrunner: far\nruns:\n  - name: a\n    harness: "true"\n  - name: b\n    harness: "true"\n    runner: local\n' >"$tmp/far.yaml"
one_line 2 group run "$tmp/far.yaml" --detach
line_has "$tmp/far.yaml:2:9: runs[0].runner: no runner 'far' here: this daemon has local"
[ "$("$SB" ps --all -q | wc -l)" = "$after" ] || fail "a run of a group on no runner was recorded: $("$SB" ps --all)"
"$SB" group ls 2>/dev/null | grep -q far && fail "a group on no runner was recorded: $("$SB" group ls)"
# accel kvm where /dev/kvm does not open: exit 4, before any run is made
# (the open is tried as the daemon tries it: O_RDWR, never creating it)
if ! python3 -c 'import os; os.open("/dev/kvm", os.O_RDWR)' 2>/dev/null; then
	one_line 4 run --accel kvm -- true
	line_has "/dev/kvm"
fi
one_line 2 admin token create 'a b'
one_line 2 admin append "$R" agent.bogus '{}'
printf '' | "$SB" secret set EMPTY 2>"$tmp/err"
rc=$?
[ $rc = 2 ] || fail "secret set of an empty value: exit $rc, want 2: $(cat "$tmp/err")"
"$SB" secret ls | grep -q EMPTY && fail "an empty secret was stored"
one_line 2 net allow "$R" 'bad grant'
"$SB" ps --json | python3 -c 'import json,sys; j=json.load(sys.stdin); sys.exit(0 if len(j) == 4 else 1)' ||
	fail "a refused run was created: $("$SB" ps)"

# -- a name is one live run's; an ended run's name can be taken again
one_line 1 run --detach --name late -- true
line_has "the name late is taken by run $R, which is live"
[ "$("$SB" ps -q --filter name=late | wc -l)" = 1 ] || fail "a second run named late was made"

# -- doctor checks what it will use: SANBOX_QEMU, sanboxd.json by its line
printf '{\n "runs": {\n  "boot_timeout_z": 5\n }\n}\n' >"$SANBOX_HOME/sanboxd.json"
"$SB" doctor >"$tmp/doc" 2>&1
grep -q "^FAIL  settings .*sanboxd.json:3: unknown setting runs.boot_timeout_z" "$tmp/doc" ||
	fail "doctor of a bad sanboxd.json: $(grep settings "$tmp/doc")"
rm -f "$SANBOX_HOME/sanboxd.json"
"$SB" doctor >"$tmp/doc" 2>&1
grep -q "^ok    settings " "$tmp/doc" || fail "doctor without sanboxd.json: $(grep settings "$tmp/doc")"
SANBOX_QEMU=/nonexistent/qemu "$SB" doctor >"$tmp/doc" 2>&1
grep -q "^FAIL  qemu .*/nonexistent/qemu does not run (SANBOX_QEMU names it)" "$tmp/doc" ||
	fail "doctor with a bad SANBOX_QEMU: $(grep qemu "$tmp/doc")"

# -- what works on this host only refuses --remote, in one line
# (fs and cp out of a run read through the daemon: tests/e2e/remote_tls.sh)
for c in "doctor" "template ls" "template build shell" "admin token create n"; do
	# shellcheck disable=SC2086
	one_line 2 --remote tls+tcp://127.0.0.1:1 --token t --ca /dev/null $c
	line_has "not with --remote"
done

# -- attach's end and exit; Ctrl-C on a foreground run
# a foreground run detached by Ctrl-C: exit 130, the run goes on
"$SB" run -- true >"$tmp/fg" 2>"$tmp/fg.err" &
fg=$!
bg="$bg $fg"
i=0
until grep -q run.started "$tmp/fg"; do
	i=$((i + 1))
	[ $i -lt 200 ] || fail "the foreground run did not start: $(cat "$tmp/fg.err")"
	sleep 0.05
done
kill -INT "$fg"
wait "$fg"
rc=$?
[ $rc = 130 ] || fail "Ctrl-C on a foreground run: exit $rc, want 130: $(cat "$tmp/fg.err")"
grep -q "detached from run" "$tmp/fg.err" || fail "Ctrl-C: $(cat "$tmp/fg.err")"
F=$(sed -n 's/.*run.created *\([0-9a-f]\{12\}\) .*/\1/p' "$tmp/fg" | head -1)
"$SB" inspect "$F" --json | grep -q '"status": *"running"' || fail "the detached run $F is not running"
"$SB" stop "$R" "$C" "$L" "$F" >/dev/null 2>&1
runs_fail
wait_stopped "$R" || fail "$R did not stop"
last=$("$SB" events "$R" --json | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["offset"])')
timeout 20 "$SB" attach "$R" --from $((last + 100)) >"$tmp/att" 2>&1
rc=$?
[ $rc = 0 ] || fail "attach --from past a stopped run's end: exit $rc: $(cat "$tmp/att")"
[ ! -s "$tmp/att" ] || fail "attach --from past the end printed: $(cat "$tmp/att")"
timeout 20 "$SB" attach "$R" --from $((last + 100)) --exit-status 2>"$tmp/err"
rc=$?
[ $rc = 143 ] || fail "attach --exit-status of a stopped run: exit $rc, want 143: $(cat "$tmp/err")"
X=$("$SB" run --detach -- true) || fail "run (to fail)"
wait_stopped "$X" || fail "$X did not stop"
timeout 20 "$SB" attach "$X" --exit-status >/dev/null 2>"$tmp/err"
rc=$?
[ $rc = 125 ] || fail "attach --exit-status of a failed run: exit $rc, want 125"
grep -q "run $X failed: " "$tmp/err" || fail "attach --exit-status of a failed run: $(cat "$tmp/err")"
timeout 20 "$SB" attach "$X" >/dev/null || fail "attach of a failed run without --exit-status: exit $?"
# a fork or resume of X (from its start: it has no snapshot) on a runner
# the daemon has not: refused in one line (X's snapshots are on local),
# nothing recorded, X's record as it was
before=$("$SB" ps --all -q | wc -l)
xlast=$("$SB" events "$X" --json | wc -l)
xoff=$("$SB" events "$X" --json | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["offset"])')
for c in fork resume; do
	one_line 2 $c "$X" --at "$xoff" --runner nosuch --detach
	line_has "run $X's snapshots are on runner local: a fork or resume of it runs there, not on nosuch"
done
one_line 2 fork "$X" --runner "$(printf 'a\033b')"
line_has "--runner"
# a re-run from an offset before 1 or past the run's last event: refused
one_line 2 rerun "$X" --at 0
line_has "--at"
one_line 2 rerun "$X" --at $((xoff + 1000)) --detach
line_has "offset $((xoff + 1000)) is past run $X's last event (at $xoff)"
[ "$("$SB" ps --all -q | wc -l)" = "$before" ] || fail "a fork on no runner or a refused re-run was recorded: $("$SB" ps --all)"
[ "$("$SB" events "$X" --json | wc -l)" = "$xlast" ] || fail "a resume on no runner was recorded in $X"
# its own runner named: as not naming one
K=$("$SB" fork "$X" --at "$xoff" --runner local --detach) || fail "fork --runner local: exit $?"
"$SB" events "$K" --json --type run.created | python3 -c '
import json, sys
sys.exit(0 if json.loads(sys.stdin.readline())["payload"].get("runner") == "local" else 1)' ||
	fail "run.created of the fork $K does not name runner local"
wait_stopped "$K" || fail "$K did not stop"
N=$("$SB" run --detach --name late -- true) || fail "the name of a run that ended was not free again"
wait_stopped "$N" || fail "$N did not stop"

# -- stop: of an ended run, no error (as of a group with no live run); --wait
"$SB" stop "$X" >"$tmp/out" 2>"$tmp/err" || fail "stop of an ended run: exit $?: $(cat "$tmp/err")"
grep -q "nothing to stop" "$tmp/err" && [ ! -s "$tmp/out" ] || fail "stop of an ended run said: $(cat "$tmp/out" "$tmp/err")"
"$SB" stop --json "$X" >"$tmp/out" 2>/dev/null || fail "stop --json of an ended run: exit $?"
grep -qx '{"runs":\[\]}' "$tmp/out" || fail "stop --json of an ended run: $(cat "$tmp/out")"
runs_hang
W=$("$SB" run --detach -- true) || fail "run (to stop)"
timeout 60 "$SB" stop --wait "$W" >"$tmp/out" || fail "stop --wait: exit $?"
"$SB" events "$W" --json --type run.stopped | grep -q '"stopped"' || fail "stop --wait returned before run.stopped"
runs_fail
echo "PASS cli_args"
