#!/bin/sh
# The command adapter end to end, in a real microVM (the shell template's
# images under a template "cmd" whose adapter is command): the program gets
# the prompt as its last argument and $SANBOX_PROMPT, the template's env,
# and writes events to $SANBOX_EVENTS; the events it may send are recorded
# as source harness, and garbage, a huge line, forged run.exited and usage,
# and nothing at all are recorded safely. A resume tells it SANBOX_RESUME,
# unless it never began a turn (no session of its own to continue).
. "$(dirname "$0")/lib/vm.sh"

work=$(mktemp -d /tmp/sbcmd.XXXXXX)
cmd_cleanup() { rm -rf "$work"; }
vm_extra_cleanup=cmd_cleanup
mkdir -p "$work/store/cmd"
ln -s "$SANBOX_TEMPLATES/shell" "$work/store/shell"
for f in vmlinux initrd.img rootfs.img; do ln -s "$SANBOX_TEMPLATES/shell/$f" "$work/store/cmd/$f"; done
python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))
t.update(name="cmd", adapter="command", harness="/bin/sh /workspace/agent.sh", env=["GREETING=hi there"])
json.dump(t, open(sys.argv[2], "w"))' "$SANBOX_TEMPLATES/shell/template.json" "$work/store/cmd/template.json"
export SANBOX_TEMPLATES=$work/store

cat >"$work/agent.sh" <<'EOF'
ev() { printf '%s\n' "$1" >"$SANBOX_EVENTS"; }
echo "arg=$1 env=$SANBOX_PROMPT greeting=$GREETING resume=${SANBOX_RESUME:-0}" >>/workspace/out.txt
ev '{"type":"agent.turn.started","payload":{"turn":1}}'
ev 'garbage, not JSON'
head -c 70000 /dev/zero | tr '\0' a >"$SANBOX_EVENTS"; echo >"$SANBOX_EVENTS"
ev '{"type":"run.exited","payload":{"status":0}}'
ev '{"type":"agent.usage.updated","payload":{"model":"x","input_tokens":1,"output_tokens":1,"cost_nusd":1,"total_nusd":1}}'
ev '{"type":"agent.tool.completed","payload":{"tool":"shell","args":"ls","exit":0,"duration_ms":3}}'
ev '{"type":"agent.turn.completed","payload":{"turn":1,"claim":{"cost_usd":99}}}'
exit 3
EOF
"$SB" run -t cmd --name c1 --input "$work/agent.sh" "tidy up" >"$work/c1.out" 2>&1
rc=$?
[ $rc = 3 ] && ok "the command's exit status" || bad "exit" "$rc: $(tail -n 5 "$work/c1.out")"
R=$("$SB" inspect c1 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["run"])')
"$SB" fs cat "$R" out.txt >"$work/out.txt" 2>&1
grep -qx 'arg=tidy up env=tidy up greeting=hi there resume=0' "$work/out.txt" &&
	ok "prompt as argument and SANBOX_PROMPT, the template's env" || bad "argv/env" "$(cat "$work/out.txt")"
events_json "$R" >"$work/c1.ev"
python3 - "$work/c1.ev" <<'EOF' && ok "its events recorded, the forged and the garbage not" || bad "events" "see above"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def need(c, what):
    if not c:
        print("events:", what); sys.exit(1)
h = [e for e in evs if e["source"] == "harness"]
need([e["type"] for e in h] == ["agent.turn.started", "agent.tool.completed", "agent.turn.completed"],
     "harness events %r" % [e["type"] for e in h])
need(h[2]["payload"]["claim"] == {"cost_usd": 99}, "the claim kept as it was")
need(not any(e["type"] == "agent.usage.updated" for e in evs), "no usage from the harness")
ex = [e for e in evs if e["type"] == "run.exited"]
need(len(ex) == 1 and ex[0]["source"] == "guest" and ex[0]["payload"]["status"] == 3, "one run.exited, the guest's")
w = " ".join(e["payload"]["message"] for e in evs if e["type"] == "run.warning")
need("1 malformed" in w and "2 refused by the schema" in w and "1 too long" in w, "drop counts: %s" % w)
pol = [e for e in evs if e["type"] == "run.policy.resolved"][0]["payload"]
need(pol["adapter"] == "command" and pol["env"] == ["GREETING=hi there"], "the plan records adapter and env")
EOF

# a program that prints nothing and writes no event
printf 'echo "resume=${SANBOX_RESUME:-0}" >>/workspace/q.txt\nexit 0\n' >"$work/quiet.sh"
cp "$work/quiet.sh" "$work/agent.sh"
"$SB" run -t cmd --name c2 --input "$work/agent.sh" "nothing" >"$work/c2.out" 2>&1
rc=$?
[ $rc = 0 ] && has_event c2 'e["type"] == "run.stopped" and e["payload"]["reason"] == "exited"' &&
	! has_event c2 'e["source"] == "harness"' &&
	ok "a silent program ends its run cleanly" || bad "silent" "$rc: $(tail -n 3 "$work/c2.out")"

# a resume starts the program again on its disk with SANBOX_RESUME=1
"$SB" resume c1 --prompt again >"$work/c3.out" 2>&1
"$SB" fs cat "$R" out.txt >"$work/out2.txt" 2>&1
grep -qx 'arg=again env=again greeting=hi there resume=1' "$work/out2.txt" &&
	ok "a resume continues with SANBOX_RESUME=1" || bad "resume" "$(cat "$work/out2.txt"; tail -n 3 "$work/c3.out")"
has_event c1 'e["type"] == "run.resumed" and e["payload"]["session"] is True' &&
	ok "run.resumed: the session it continues" || bad "session" "$("$SB" events c1 --type run.resumed --json)"

# a program that never began a turn has no session to continue: it starts
# afresh on a resume
"$SB" resume c2 --prompt afresh >"$work/c4.out" 2>&1
R2=$("$SB" inspect c2 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["run"])')
[ "$("$SB" fs cat "$R2" q.txt 2>&1 | tr '\n' ' ')" = "resume=0 resume=0 " ] &&
	has_event c2 'e["type"] == "run.resumed" and e["payload"]["session"] is False' &&
	ok "no turn before: a resume starts afresh (session false)" ||
	bad "afresh" "$("$SB" fs cat "$R2" q.txt 2>&1; tail -n 3 "$work/c4.out")"

[ "$failures" = 0 ]
