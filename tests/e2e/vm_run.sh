#!/bin/sh
# A run in a real microVM: events, exit status, persistent files, console.
. "$(dirname "$0")/lib/vm.sh"

out=$("$SB" run --name files --timeout 120s -- /bin/sh -c \
	'echo hello; mkdir -p d; printf abc > d/f.txt; echo other > g.txt; rm g.txt; exit 3' 2>&1)
rc=$?
[ "$rc" = 3 ] && ok "exit status of the harness" || bad "exit status" "got $rc: $out"
R=$("$SB" ps --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["run"])')
has_event "$R" "e['type']=='agent.output' and 'hello' in e['payload']['data']" &&
	ok "stdout as agent.output" || bad "agent.output" "no hello"
# xxh3 of "abc" (XXH3_64bits) is 78af5f94892f3950
has_event "$R" "e['type']=='agent.file.changed' and e['payload']['path']=='/workspace/d/f.txt' and e['payload']['size']==3 and e['payload']['xxh3']=='78af5f94892f3950' and e['source']=='guest'" &&
	ok "agent.file.changed with size and xxh3" || bad "file.changed" "$(events_json "$R" | grep file.changed)"
has_event "$R" "e['type']=='agent.file.changed' and e['payload']['path']=='/workspace/g.txt' and e['payload']['kind']=='deleted'" &&
	ok "deletion seen" || bad "deleted" "no deleted event for g.txt"
order=$(events_json "$R" | python3 -c '
import json,sys
want=["run.created","run.policy.resolved","run.started","harness.input.ready","run.exited","run.stopped"]
got=[json.loads(l)["type"] for l in sys.stdin]
got=[t for t in got if t in want]
print("ok" if got==want else got)')
[ "$order" = ok ] && ok "lifecycle events in order" || bad "lifecycle order" "$order"
[ "$("$SB" fs cat "$R" d/f.txt)" = abc ] && ok "fs cat after the run" || bad "fs cat" "content differs"
"$SB" cp "$R:/workspace/d/f.txt" "$SANBOX_HOME/copy.txt" && [ "$(cat "$SANBOX_HOME/copy.txt")" = abc ] &&
	ok "cp out of the disk" || bad "cp" "copy failed"
"$SB" fs ls "$R" d | grep -q 'f.txt' && ok "fs ls" || bad "fs ls" "f.txt not listed"
"$SB" fs cat "$R" nope.txt 2>/dev/null; [ $? = 3 ] && ok "missing file: exit 3" || bad "missing file" "wrong exit"
[ -s "$SANBOX_HOME/runs/$R/console.log" ] && ok "console log kept" || bad "console" "empty"
st=$("$SB" inspect "$R" --json | python3 -c 'import json,sys; r=json.load(sys.stdin)["run"]; print(r["status"], r["exit_status"])')
[ "$st" = "exited 3" ] && ok "projection: exited 3" || bad "projection" "$st"
human=$("$SB" events "$R")
# the watcher may see d/f.txt before its write: created (0 bytes), then
# modified (3 bytes); or after it: created (3 bytes)
printf '%s\n' "$human" | grep -Eq ' run\.started +accel (tcg|kvm)$' &&
	printf '%s\n' "$human" | grep -Eq ' harness\.input\.ready +0 input files, 0 bytes$' &&
	printf '%s\n' "$human" | grep -Eq ' agent\.output +stdout: hello$' &&
	printf '%s\n' "$human" | grep -Eq ' agent\.file\.changed +created /workspace/d/f\.txt \([03] bytes\)$' &&
	printf '%s\n' "$human" | grep -Eq ' agent\.file\.changed +(created|modified) /workspace/d/f\.txt \(3 bytes\)$' &&
	ok "events: one-line summaries" || bad "summaries" "$human"
has_event "$R" "e['type']=='run.policy.resolved' and e['payload']['network']=='none' and e['payload']['allow']==[]" &&
	ok "policy: network none, no grants" || bad "policy network" "$(events_json "$R" | grep policy.resolved)"

# grants are checked before anything is recorded or set up (network acl
# itself is tested in its own namespaces: vm_net.sh)
n0=$("$SB" events --all --json | wc -l)
out=$("$SB" run --net acl --allow 10.0.0.1/8:80 -- true 2>&1)
echo "$out" | grep -q "host bits set" && ok "bad grant named" || bad "bad grant" "$out"
out=$("$SB" run --allow api.example.com:443 -- true 2>&1)
echo "$out" | grep -q "need network acl" && ok "grants without acl refused" || bad "allow without acl" "$out"
[ "$("$SB" events --all --json | wc -l)" = "$n0" ] && ok "refused runs write nothing" ||
	bad "refused runs" "events were written"
exit $((failures > 0))
