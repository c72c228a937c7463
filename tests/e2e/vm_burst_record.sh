#!/bin/sh
# A burst far past the run's event rate (runs.guest_events_per_s 20, burst
# 50 here): the harness prints 3,000 lines as fast as it can, writes a file
# every 10th and a tool call every 5th to $SANBOX_EVENTS. The guest is
# paced, nothing is dropped: the record holds every line in order, every
# file change and every tool call once and in order, no drop warning.
. "$(dirname "$0")/lib/vm.sh"

tmp=$SANBOX_HOME/t
mkdir -p "$tmp"
"$SB" daemon stop >/dev/null 2>&1
echo '{"runs": {"guest_events_per_s": 20, "guest_events_burst": 50}}' >"$SANBOX_HOME/sanboxd.json"

R=$("$SB" run --detach --name burst --timeout 600s -- /bin/sh -c '
	i=1
	while [ $i -le 3000 ]; do
		echo "line $i"
		[ $((i % 10)) = 0 ] && echo $i >f$i.txt
		[ $((i % 5)) = 0 ] &&
			printf "{\"type\":\"agent.tool.started\",\"payload\":{\"tool\":\"t\",\"args\":\"%d\"}}\n" $i >"$SANBOX_EVENTS"
		i=$((i + 1))
	done
	echo done') || bad "run" "could not start"
timeout 600 "$SB" attach "$R" >/dev/null 2>&1
events_json "$R" >"$tmp/ev.json"
python3 - "$tmp/ev.json" <<'EOF' >"$tmp/check" 2>&1 && ok "every line, file change and tool call of the burst, in order" || bad "burst" "$(cat "$tmp/check")"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
fails = []
out = "".join(e["payload"]["data"] for e in evs if e["type"] == "agent.output")
want = "".join("line %d\n" % i for i in range(1, 3001)) + "done\n"
if out != want:
    fails.append("output: %d of %d lines" % (out.count("\n"), 3001))
files = [e["payload"]["path"] for e in evs if e["type"] == "agent.file.changed"]
if files != ["/workspace/f%d.txt" % i for i in range(10, 3001, 10)]:
    fails.append("file changes: %d of 300" % len(files))
tools = [e["payload"]["args"] for e in evs if e["type"] == "agent.tool.started"]
if tools != [str(i) for i in range(5, 3001, 5)]:
    fails.append("tool calls: %d of 600" % len(tools))
drops = [e["payload"]["message"] for e in evs if e["type"] == "run.warning"
         and "dropped" in e["payload"]["message"]]
if drops:
    fails.append("drops: %s" % drops[:3])
ex = [e for e in evs if e["type"] == "run.exited"]
if len(ex) != 1 or ex[0]["payload"]["status"] != 0:
    fails.append("run.exited: %s" % ex)
print("; ".join(fails))
sys.exit(1 if fails else 0)
EOF
[ $failures = 0 ]
