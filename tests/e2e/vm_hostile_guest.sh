#!/bin/sh
# A hostile harness attacks its run's record. Run A: forged lines on
# $SANBOX_EVENTS (run.exited 77, agent.file.changed of /etc/passwd, a second
# harness.input.ready, agent.output, usage) are refused and a valid
# agent.turn.started is recorded as source harness; malformed lines (not
# JSON, an array, a payload that is no object, a 200-character type, deep
# nesting, duplicate keys) and lines over 64 KiB are each counted in the
# "dropped guest events" warnings; terminal escapes reach the record as
# written and `events` text prints them escaped; an env secret printed over two writes, in a line's
# payload, in a key, as a type and in a file name is masked everywhere; a
# flood of thousands of lines a second is paced (the harness waits for the
# run's event rate) and recorded whole, in order, while the daemon answers,
# and the run.exited right after it is still recorded.
# Run B: --record-quota 64K and 5 MB of output: the run ends with its exit
# status, at most 64 KiB are recorded, the quota is said once and summed up.
. "$(dirname "$0")/lib/vm.sh"

tmp=$SANBOX_HOME/t
mkdir -p "$tmp"
KEY=Hs3cr3t$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n') # 23 characters, a valid type length
printf '%s' "$KEY" | "$SB" secret set HOSTILE_KEY 2>/dev/null || bad "secret set" "failed"

# lines the schema refuses (the harness may not emit these), and one it takes
cat >"$tmp/forged.txt" <<'EOF'
{"type":"run.exited","payload":{"status":77}}
{"type":"agent.file.changed","payload":{"path":"/etc/passwd","kind":"modified","size":1,"xxh3":"0123456789abcdef"}}
{"type":"harness.input.ready","payload":{"files":9,"bytes":9}}
{"type":"agent.output","payload":{"stream":"stdout","data":"forged output"}}
{"type":"agent.usage.updated","payload":{"model":"x","input_tokens":1,"output_tokens":1,"cost_nusd":9,"total_nusd":9}}
{"type":"agent.turn.started","payload":{"turn":"one"}}
{"type":"agent.turn.started","payload":{"turn":1}}
EOF
refused=6 # and the line whose type is the secret: 7
# malformed lines, one per line
python3 - "$tmp/malformed.txt" <<'EOF'
import sys
deep = lambda n: '{"type":"agent.turn.started","payload":{"turn":2,"d":' + '[' * n + ']' * n + '}}'
lines = [
    'not json {{{',
    '[1,2,3]',
    '"just a string"',
    '{"type":"agent.turn.started","payload":[1]}',
    '{"type":"agent.turn.started","payload":"x"}',
    '{"type":"agent.turn.started"}',
    '{"payload":{"turn":1}}',
    '{"type":"' + 't' * 200 + '","payload":{}}',
    deep(40),     # deeper than a payload may nest
    deep(20000),  # deeper than the JSON parser goes
    '{"type":"agent.turn.started","type":"agent.turn.started","payload":{"turn":3}}',
    '{"type":"agent.turn.started","payload":{"turn":4}',
]
open(sys.argv[1], "w").write("".join(l + "\n" for l in lines))
EOF
malformed=$(wc -l <"$tmp/malformed.txt")

cat >"$tmp/attack.sh" <<'EOF'
E=$SANBOX_EVENTS
K=$HOSTILE_KEY
cat forged.txt >"$E"
cat malformed.txt >"$E"
printf 'esc:\033[31mred\033[0m\007bell\n'
# the secret over two writes, in a payload string, in a key, as a type, in a file name
printf 'split:%.10s' "$K"
sleep 1
printf '%s:end\n' "${K#??????????}"
printf '{"type":"agent.message","payload":{"role":"user","text":"the key is %s"}}\n' "$K" >"$E"
printf '{"type":"agent.tool.started","payload":{"tool":"sh","args":"x","%s":1}}\n' "$K" >"$E"
printf '{"type":"%s","payload":{}}\n' "$K" >"$E"
# two lines over 64 KiB, the secret across the cut of what the host is told
sleep 2
{ printf '{"type":"agent.message","payload":{"text":"%s ' "$K"; head -c 70000 /dev/zero | tr '\0' x; printf '"}}\n'; } >"$E"
{ printf '{"type":"agent.message","payload":{"text":"%s ' "$K"; head -c 200000 /dev/zero | tr '\0' y; printf '"}}\n'; } >"$E"
echo leaked >"/workspace/leak-$K.txt"
sleep 2
# the flood: thousands of valid lines a second for 4 s, then exit at once
echo "flood begins"
n=0
end=$(($(date +%s) + 4))
while [ "$(date +%s)" -lt "$end" ]; do
	seq $((n + 1)) $((n + 1000)) | sed 's/.*/{"type":"agent.turn.started","payload":{"turn":&,"flood":true}}/' >"$E"
	n=$((n + 1000))
done
echo "$n" >/flood.count
exit 0
EOF

A=$("$SB" run --detach --name attacker --timeout 300s --secret HOSTILE_KEY \
	--input "$tmp/forged.txt" --input "$tmp/malformed.txt" --input "$tmp/attack.sh" \
	-- /bin/sh attack.sh)
B=$("$SB" run --detach --name quota --timeout 300s --memory 192M --record-quota 64K -- /bin/sh -c \
	'yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c 5000000; echo printed >&2; exit 3')

# the daemon answers during the flood
if wait_event "$A" "e['type']=='agent.output' and 'flood begins' in e['payload']['data']" 240; then
	sleep 1
	slow=0
	for i in 1 2 3; do
		t0=$(date +%s%N)
		"$SB" daemon status >/dev/null || slow=1
		[ $((($(date +%s%N) - t0) / 1000000)) -lt 1500 ] || slow=1
		"$SB" events "$A" --json >/dev/null || slow=1
		sleep 0.5
	done
	[ $slow = 0 ] && ok "the daemon answers within 1.5 s during the flood" || bad "flood" "the daemon was slow or failed"
else
	bad "flood" "the flood did not begin: $("$SB" events "$A" | tail -n 3)"
fi

"$SB" attach "$A" >/dev/null 2>&1
"$SB" events "$A" --json >"$tmp/a.json"
"$SB" events "$A" >"$tmp/a.txt"
count=$("$SB" fs cat "$A" /flood.count)
python3 - "$tmp/a.json" "$KEY" "$refused" "$malformed" "$count" <<'EOF'
import json, re, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
key, refused, malformed, flood = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
fails = 0
def check(cond, what, detail=""):
    global fails
    print(("PASS " if cond else "FAIL ") + what + ("" if cond else ": " + str(detail)[:600]))
    fails += not cond
of = lambda t: [e for e in evs if e["type"] == t]
ex = of("run.exited")
check(len(ex) == 1 and ex[0]["source"] == "guest" and ex[0]["payload"]["status"] == 0,
      "the only run.exited is the agent's, status 0", ex)
st = of("run.stopped")
check(len(st) == 1 and st[0]["payload"]["reason"] == "exited" and not of("run.failed"),
      "the run stopped as exited", st + of("run.failed"))
ready = of("harness.input.ready")
check(len(ready) == 1 and ready[0]["source"] == "guest" and ready[0]["payload"]["files"] == 3,
      "exactly one harness.input.ready, the agent's", ready)
check(not [e for e in of("agent.file.changed") if "passwd" in e["payload"]["path"] or e["source"] != "guest"],
      "no forged agent.file.changed", of("agent.file.changed"))
check(all(e["source"] == "guest" for e in of("agent.output")) and
      not [e for e in of("agent.output") if "forged" in e["payload"]["data"]], "no forged agent.output")
check(not of("agent.usage.updated"), "no forged usage")
turns = of("agent.turn.started")
valid = [e["payload"] for e in turns if "flood" not in e["payload"]]
check(all(e["source"] == "harness" for e in turns) and len(valid) == 1 and
      valid[0]["turn"] == 1 and sorted(valid[0]) == ["guest_seq", "turn"],
      "the valid agent.turn.started recorded with source harness (and its guest_seq)", valid)
# the drop warnings add up to what was sent
sums = {}
for e in of("run.warning"):
    m = e["payload"]["message"]
    if m.startswith("dropped guest events: "):
        for n, why in re.findall(r"(\d+) ([a-z ]+?)(?:, |$)", m[22:].split(" (last: ")[0]):
            sums[why] = sums.get(why, 0) + int(n)
check(sums.get("malformed") == malformed, "%d malformed lines counted" % malformed, sums)
check(sums.get("refused by the schema") == refused + 1, "%d refused lines counted" % (refused + 1), sums)
check(sums.get("too long") == 2, "2 lines over 64 KiB counted", sums)
check([e for e in of("run.warning") if '(last: a harness line over 65536 bytes: {"type":"agent.message"'
       in e["payload"]["message"]], "a line over 64 KiB is named by its head", of("run.warning"))
flooded = [e for e in turns if "flood" in e["payload"]]
check(flood >= 2000 and [e["payload"]["turn"] for e in flooded] == list(range(1, flood + 1)),
      "flood of %d lines: %d recorded, in order" % (flood, len(flooded)), sums)
# escapes as written
check([e for e in of("agent.output") if "esc:\x1b[31mred\x1b[0m\x07bell" in e["payload"]["data"]],
      "terminal escapes recorded as written")
# the secret: masked across the two writes, in the payload, the key, the type, the file name
masked = "[masked HOSTILE_KEY]"
out = "".join(e["payload"]["data"] for e in of("agent.output"))
check("split:" + masked + ":end" in out, "a value split over two writes is masked", out[-300:])
check([e for e in of("agent.output") if e["payload"]["data"].endswith("split:")],
      "the two writes were two outputs")
check([e for e in of("agent.message") if e["payload"].get("text") == "the key is " + masked],
      "masked in a harness line's payload", of("agent.message"))
check([e for e in of("agent.tool.started") if masked in e["payload"]], "masked in a payload key",
      of("agent.tool.started"))
check([e for e in of("agent.file.changed") if e["payload"]["path"] == "/workspace/leak-%s.txt" % masked],
      "masked in a file name", [e["payload"]["path"] for e in of("agent.file.changed")])
check([e for e in of("run.warning") if masked in e["payload"]["message"]],
      "masked in a warning naming a refused type")
raw = open(sys.argv[1]).read()
check(key[:10] not in raw and key[10:] not in raw, "the raw value appears nowhere in the events")
sys.exit(fails > 0)
EOF
[ $? = 0 ] || failures=$((failures + 1))
python3 - "$tmp/a.txt" <<'EOF' && ok "events text: escapes printed escaped, no ESC or BEL byte" || bad "events text" "$(grep esc: "$tmp/a.txt")"
import sys
b = open(sys.argv[1], "rb").read()
sys.exit(0 if b"\x1b" not in b and b"\x07" not in b and b"esc:\\x1b[31mred\\x1b[0m\\x07bell" in b else 1)
EOF
grep -qaF -e "$(printf '%.10s' "$KEY")" -e "${KEY#??????????}" "$SANBOX_HOME"/log/* "$SANBOX_HOME/sanboxd.log" &&
	bad "secret" "(part of) the raw value is in the log's files" || ok "the raw value is in none of the log's files"

# run B: the record quota
"$SB" attach "$B" >/dev/null 2>&1
"$SB" events "$B" --json >"$tmp/b.json"
python3 - "$tmp/b.json" <<'EOF'
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
fails = 0
def check(cond, what, detail=""):
    global fails
    print(("PASS " if cond else "FAIL ") + what + ("" if cond else ": " + str(detail)[:600]))
    fails += not cond
of = lambda t: [e for e in evs if e["type"] == t]
pol = of("run.policy.resolved")
check(pol and pol[0]["payload"]["record_quota"] == 65536 and pol[0]["payload"]["memory_mib"] == 192,
      "--record-quota 64K is recorded as 65536 bytes (and --memory 192M as 192 MiB)",
      pol and (pol[0]["payload"].get("record_quota"), pol[0]["payload"].get("memory_mib")))
ex = of("run.exited")
check(len(ex) == 1 and ex[0]["payload"]["status"] == 3 and of("run.stopped")[0]["payload"]["reason"] == "exited",
      "past the quota the run ends with its exit status 3", ex)
n = sum(len(e["payload"]["data"]) for e in of("agent.output"))
check(0 < n <= 65536, "%d bytes of output recorded, at most 64 KiB" % n)
warn = [e["payload"]["message"] for e in of("run.warning")]
said = [w for w in warn if "record quota of 65536 bytes is reached" in w]
check(len(said) == 1, "the quota is said once", warn)
summ = [w for w in warn if w.startswith("not recorded past the record quota of 65536 bytes: ")]
check(len(summ) == 1 and int(summ[0].split(": ")[1].split()[0]) > 1000, "the end summary counts what was not recorded", warn)
sys.exit(fails > 0)
EOF
[ $? = 0 ] || failures=$((failures + 1))
"$SB" daemon status >/dev/null && ok "the daemon is fine afterwards" || bad "daemon" "not answering"
exit $((failures > 0))
