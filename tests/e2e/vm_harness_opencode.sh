#!/bin/sh
# The opencode adapter end to end (slow: a Debian template and OpenCode
# under TCG): the opencode-runner template is built (its Debian userland and
# npm package come from the cache after the first build), OpenCode calls the
# built-in stub/harness model through the gateway with the run's virtual
# key, writes /workspace/hello.txt with its write tool and runs a command
# with its bash tool; the record has its turns, tool calls, the file change
# and the gateway's usage, and its claims only as claims. A tiny budget
# stops a run with budget.exceeded.
. "$(dirname "$0")/lib/vm.sh"

work=$(mktemp -d /tmp/sboc.XXXXXX)
oc_cleanup() { rm -rf "$work"; }
vm_extra_cleanup=oc_cleanup
tpl=$SANBOX_TEMPLATES/opencode-runner/template.json
stale=
for f in "$BUILD/sanbox-agent" "$BUILD/sanbox-adapt" "$REPO/templates/opencode-runner/template.conf" \
	"$REPO/tools/mkimage.sh" "$REPO/tools/debian.sh"; do
	[ -f "$tpl" ] && [ "$f" -nt "$tpl" ] && stale=1
done
if [ ! -f "$tpl" ] || [ -n "$stale" ]; then
	start=$(date +%s)
	"$SB" template build opencode-runner >"$work/build.log" 2>&1 ||
		{ bad "template build" "$(tail -n 3 "$work/build.log")"; exit 1; }
	echo "opencode-runner built in $(($(date +%s) - start)) s"
fi

"$SB" run -t opencode-runner -m stub/harness --name oc "write hello.txt, then run a command" \
	>"$work/oc.out" 2>&1
rc=$?
[ $rc = 0 ] && ok "opencode ran to its end" || bad "run" "exit $rc: $(tail -n 5 "$work/oc.out")"
R=$("$SB" inspect oc --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["run"])')
events_json "$R" >"$work/oc.ev"
python3 - "$work/oc.ev" <<'EOF' && ok "turns, tool calls, the file change and the gateway's usage" || bad "record" "see above"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def need(c, what):
    if not c:
        print("record:", what); sys.exit(1)
t = lambda ty, src: [e for e in evs if e["type"] == ty and e["source"] == src]
need(len(t("agent.turn.started", "harness")) >= 3, "three turns")
tools = [e["payload"]["tool"] for e in t("agent.tool.completed", "harness")]
need(tools == ["write", "bash"], "tool calls %r" % tools)
w = t("agent.tool.completed", "harness")[0]["payload"]
need("hello.txt" in w["args"] and w["exit"] == 0, "the write's summary %r" % w)
files = {e["payload"]["path"] for e in t("agent.file.changed", "guest")}
need({"/workspace/hello.txt", "/workspace/ran.txt"} <= files or {"hello.txt", "ran.txt"} <= files,
     "file changes %r" % files)
use = t("agent.usage.updated", "gateway")
need(len(use) >= 3 and use[-1]["payload"]["total_nusd"] > 0, "gateway usage")
need(not any(e["type"] == "agent.usage.updated" and e["source"] != "gateway" for e in evs), "usage only from the gateway")
claims = [e["payload"].get("claim") for e in t("agent.turn.completed", "harness")]
need(claims and all(isinstance(c, dict) for c in claims), "claims %r" % claims)
need(any(e["payload"]["role"] == "assistant" and e["payload"].get("text") == "done"
         for e in t("agent.message", "harness")), "its last message")
EOF

"$SB" run -t opencode-runner -m stub/harness --budget 0.001 --name tight "write hello.txt" \
	>"$work/tight.out" 2>&1
rc=$?
[ $rc = 123 ] && has_event tight 'e["type"] == "budget.exceeded"' &&
	has_event tight 'e["type"] == "run.stopped" and e["payload"]["reason"] == "budget"' &&
	ok "a tiny budget stops it with budget.exceeded" || bad "budget" "exit $rc: $(tail -n 3 "$work/tight.out")"

[ "$failures" = 0 ]
