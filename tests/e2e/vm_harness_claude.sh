#!/bin/sh
# The claude-code adapter end to end: the claude-code template is built
# (its Debian userland and npm package come from the cache after the first
# build), Claude Code calls the built-in stub/harness model through the
# gateway's Anthropic messages API with the run's virtual key, writes
# /workspace/hello.txt with its Write tool and copies it with its Bash
# tool; the record has its turns, the tool calls, the file changes, the
# gateway's usage and its claim only as a claim. A tiny budget stops a run
# with budget.exceeded. A resume with a new prompt continues its session. (Its native binary reaches its first model call in
# well under a minute under TCG.)
. "$(dirname "$0")/lib/vm.sh"
. "$(dirname "$0")/lib/resume.sh"

work=$(mktemp -d /tmp/sbcc.XXXXXX)
cc_cleanup() { rm -rf "$work"; }
vm_extra_cleanup=cc_cleanup
vm_template claude-code

start=$(date +%s)
"$SB" run -t claude-code -m stub/harness --name cc "write hello.txt, then run a command" \
	>"$work/cc.out" 2>&1
rc=$?
echo "claude-code ran in $(($(date +%s) - start)) s"
[ $rc = 0 ] && ok "claude code ran to its end" || bad "run" "exit $rc: $(tail -n 5 "$work/cc.out")"
R=$("$SB" inspect cc --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["run"])')
events_json "$R" >"$work/cc.ev"
python3 - "$work/cc.ev" <<'PY' && ok "turns, tool calls, the file changes and the gateway's usage" || bad "record" "see above"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def need(c, what):
    if not c:
        print("record:", what); sys.exit(1)
t = lambda ty, src: [e for e in evs if e["type"] == ty and e["source"] == src]
need(len(t("agent.turn.started", "harness")) == 3, "three turns")
done = [e["payload"] for e in t("agent.tool.completed", "harness")]
need([d["tool"] for d in done] == ["Write", "Bash"], "tool calls %r" % done)
need("hello.txt" in done[0]["args"] and done[0]["exit"] == 0 and done[1]["exit"] == 0,
     "the calls' summaries %r" % done)
files = {e["payload"]["path"] for e in t("agent.file.changed", "guest")}
need({"/workspace/hello.txt", "/workspace/ran.txt"} <= files or {"hello.txt", "ran.txt"} <= files,
     "file changes %r" % files)
msgs = t("agent.message", "gateway")
need(len(msgs) >= 3 and all(m["payload"]["api"] == "anthropic" for m in msgs),
     "its calls %r" % [m["payload"].get("api") for m in msgs])
use = t("agent.usage.updated", "gateway")
need(len(use) == len(msgs) and use[-1]["payload"]["total_nusd"] > 0, "gateway usage %r" % use)
need(not any(e["type"] == "agent.usage.updated" and e["source"] != "gateway" for e in evs), "usage only from the gateway")
claims = [e["payload"].get("claim") for e in t("agent.turn.completed", "harness")]
need(claims and isinstance(claims[-1], dict) and claims[-1].get("input_tokens", 0) > 0, "its claim %r" % claims)
need(any(e["payload"]["role"] == "assistant" and e["payload"].get("text") == "done"
         for e in t("agent.message", "harness")), "its last message")
PY

# a resume with a new prompt continues its session (`--continue`)
resume_continues cc "write hello.txt, then run a command"

"$SB" run -t claude-code -m stub/harness --budget 0.001 --name tight "write hello.txt" \
	>"$work/tight.out" 2>&1
rc=$?
[ $rc = 123 ] && has_event tight 'e["type"] == "budget.exceeded"' &&
	has_event tight 'e["type"] == "run.stopped" and e["payload"]["reason"] == "budget"' &&
	ok "a tiny budget stops it with budget.exceeded" || bad "budget" "exit $rc: $(tail -n 3 "$work/tight.out")"

[ "$failures" = 0 ]
