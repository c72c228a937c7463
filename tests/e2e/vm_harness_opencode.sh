#!/bin/sh
# The opencode adapter end to end (slow: a Debian template and OpenCode
# under TCG): the opencode-runner template is built (its Debian userland and
# npm package come from the cache after the first build), OpenCode calls the
# built-in stub/harness model through the gateway with the run's virtual
# key and writes /workspace/hello.txt with its write tool; the record has
# its turn, the tool call, the file change and the gateway's usage, and its
# claims only as claims; its budget, enough for that first call only,
# refuses the second and stops the run with budget.exceeded. A resume with
# a larger budget and a new prompt continues OpenCode's own session.
. "$(dirname "$0")/lib/vm.sh"
. "$(dirname "$0")/lib/resume.sh"

work=$(mktemp -d /tmp/sboc.XXXXXX)
oc_cleanup() { rm -rf "$work"; }
vm_extra_cleanup=oc_cleanup
vm_template opencode-runner

# One run, its budget the first call's and not the second's: the stub/harness
# model costs $1 a million input tokens and $2 a million output tokens; the
# gateway reserves a call's input at a token a byte of its body (OpenCode
# 1.18's first request is about 29.4 kB, its second 29.8 kB) and its output
# at what the rest can pay. $0.031 grants the first call its input and some
# 780 output tokens (it uses 29); it costs $0.0025, and what is left cannot
# pay the second's input: that call is refused (402), budget.exceeded is
# recorded and the run is stopped. Each OpenCode start takes minutes under
# TCG: one run asserts it all.
"$SB" run -t opencode-runner -m stub/harness --budget 0.031 --name oc \
	"write hello.txt, then run a command" >"$work/oc.out" 2>&1
rc=$?
[ $rc = 123 ] && ok "the budget stopped it after its first call (exit 123)" ||
	bad "run" "exit $rc: $(tail -n 5 "$work/oc.out")"
R=$("$SB" inspect oc --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["run"])')
events_json "$R" >"$work/oc.ev"
python3 - "$work/oc.ev" <<'EOF2' && ok "its turn, the write, the file change, the gateway's usage, then budget.exceeded" || bad "record" "see above"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def need(c, what):
    if not c:
        print("record:", what); sys.exit(1)
t = lambda ty, src: [e for e in evs if e["type"] == ty and e["source"] == src]
need(len(t("agent.turn.started", "harness")) >= 1, "a turn")
# The write's own report (OpenCode's JSON line, translated) can be cut off
# by the budget's stop, which ends the harness right after its second call
# is refused: when it is there it is the write; the file change below is
# the guest's own record that the write happened.
tools = [e["payload"]["tool"] for e in t("agent.tool.completed", "harness")]
need(tools in (["write"], []), "tool calls %r" % tools)
if tools:
    w = t("agent.tool.completed", "harness")[0]["payload"]
    need("hello.txt" in w["args"] and w["exit"] == 0, "the write's summary %r" % w)
else:
    print("note: OpenCode's report of its write was cut off by the budget's stop")
files = {e["payload"]["path"] for e in t("agent.file.changed", "guest")}
need("/workspace/hello.txt" in files or "hello.txt" in files, "file changes %r" % files)
msgs = t("agent.message", "gateway")
need([m["payload"]["status"] for m in msgs] == [200], "one call answered %r" %
     [m["payload"].get("status") for m in msgs])
use = t("agent.usage.updated", "gateway")
need(len(use) == 1 and use[0]["payload"]["total_nusd"] > 0 and
     use[0]["payload"]["total_nusd"] < 31000000 and not use[0]["payload"].get("estimated"),
     "gateway usage %r" % use)
need(not any(e["type"] == "agent.usage.updated" and e["source"] != "gateway" for e in evs), "usage only from the gateway")
claims = [e["payload"].get("claim") for e in t("agent.turn.completed", "harness")]
# a turn's claim comes with OpenCode's report of its step: cut off with it
need(not tools or (claims and all(isinstance(c, dict) for c in claims)), "claims %r" % claims)
need(any(e["type"] == "budget.exceeded" for e in evs), "budget.exceeded")
need(any(e["type"] == "run.stopped" and e["payload"]["reason"] == "budget" for e in evs), "stopped for its budget")
EOF2

# its budget spent, a resume with a larger one and a new prompt continues
# OpenCode's own session (--continue): its first request holds the
# conversation so far
resume_continues oc "write hello.txt, then run a command" --budget 1

[ "$failures" = 0 ]
