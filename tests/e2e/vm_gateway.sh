#!/bin/sh
# Model access end to end, in real microVMs: the reference harness talks to
# a configured provider (a model stub this test starts) through the guest's
# tunnel and the gateway; the provider key is swapped in and never enters
# the guest or the record; usage and cost are metered exactly; budgets stop
# a run on its third call, hold under 8 concurrent calls, and cut a stream.
# The gateway listens nowhere on the host, and a guest that trickles a
# header block is cut off at the header deadline while its run still
# reaches the model.
. "$(dirname "$0")/lib/vm.sh"

work=$(mktemp -d /tmp/sbgw.XXXXXX)
# a template store: shell, and "team" (shell's images) whose runs default to
# acme/scripted and are granted TEAM_TOKEN
mkdir -p "$work/store/team"
ln -s "$SANBOX_TEMPLATES/shell" "$work/store/shell"
for f in vmlinux initrd.img rootfs.img; do ln -s "$SANBOX_TEMPLATES/shell/$f" "$work/store/team/$f"; done
python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))
t.update(name="team", model="acme/scripted", secrets=["TEAM_TOKEN"])
json.dump(t, open(sys.argv[2], "w"))' "$SANBOX_TEMPLATES/shell/template.json" "$work/store/team/template.json"
export SANBOX_TEMPLATES=$work/store
stub_pid=""
gw_cleanup() {
	[ -n "$stub_pid" ] && kill "$stub_pid" 2>/dev/null
	rm -rf "$work"
}
vm_extra_cleanup=gw_cleanup

# --- a provider: the model stub with this test's scripts
mkdir "$work/scripts"
cp "$REPO/tools/stub/scripted.json" "$work/scripts/"
cat >"$work/scripts/budget.json" <<'EOF'
{"turns": [{"text": "one more look", "tool_calls": [{"name": "shell", "arguments": {"command": "echo turn >> turns.txt"}}],
            "usage": {"input_tokens": 100, "output_tokens": 80}}]}
EOF
cat >"$work/scripts/long.json" <<'EOF'
{"turns": [{"ignore_max_tokens": true, "chunks": 20, "chunk_delay_ms": 20,
 "text": "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"}]}
EOF
"$BUILD/sanbox-model-stub" --script-dir "$work/scripts" --log "$work/stub.log" >"$work/stub.out" 2>&1 &
stub_pid=$!
i=0
until grep -qs '^listening ' "$work/stub.out"; do
	i=$((i + 1))
	[ $i -lt 100 ] || { bad "setup" "stub did not start"; exit 1; }
	sleep 0.05
done
URL=http://$(sed -n 's/^listening //p' "$work/stub.out")/v1
cat >"$SANBOX_HOME/models.json" <<EOF
{"providers": {"acme": {"base_url": "$URL", "api": ["openai", "anthropic"], "key_secret": "ACME_KEY"}},
 "models": {
  "acme/scripted": {"provider": "acme", "upstream": "scripted", "input": 1, "output": 2},
  "acme/budget": {"provider": "acme", "upstream": "budget", "input": 0.01, "output": 100, "max_output": 100},
  "acme/long": {"provider": "acme", "upstream": "long", "input": 0.01, "output": 100, "max_output": 10}}}
EOF
rnd() { head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
KEY_A=sk-acme-$(rnd)
KEY_B=$(rnd)
KEY="$KEY_A$KEY_B" # the provider key; the guest only ever sees it split
TEAM=team-$(rnd)
printf '%s' "$KEY" | "$SB" secret set ACME_KEY 2>/dev/null || bad "secret set" "failed"
printf '%s\n' "$TEAM" | "$SB" secret set TEAM_TOKEN 2>/dev/null || bad "secret set" "failed"
"$SB" secret ls | grep -q '^ACME_KEY ' && ok "secret ls names the secret" || bad "secret ls" "$("$SB" secret ls)"

py() { python3 -c "$1" "$@"; }
evjson() { "$SB" events "$1" --json >"$work/$1.ev"; }

# --- 1. a scripted conversation with tool calls, metered exactly
"$SB" run --name conv -m acme/scripted "fix the failing test" >"$work/conv.out" 2>&1
rc=$?
[ $rc = 0 ] && ok "harness run through the gateway" || bad "conversation" "exit $rc: $(tail -n 5 "$work/conv.out")"
C=$("$SB" inspect conv --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["run"])')
evjson "$C"
python3 - "$work/$C.ev" "$work/stub.log" "$KEY" <<'EOF' && ok "events, files and exact cost of the conversation" || bad "conversation" "see above"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
calls = [json.loads(l) for l in open(sys.argv[2]) if l.strip() and '"scripted"' in l]
types = [e["type"] for e in evs]
def need(c, what):
    if not c:
        print("conversation:", what); sys.exit(1)
use = [e for e in evs if e["type"] == "agent.usage.updated"]
need(len(use) == 3 and all(e["source"] == "gateway" for e in use), "three gateway usage events")
need(len([e for e in evs if e["type"] == "agent.message" and e["source"] == "gateway"]) == 3, "three recorded calls")
tools = [e["payload"]["tool"] for e in evs if e["type"] == "agent.tool.completed"]
need(tools == ["shell", "write_file"], "tool calls %r" % tools)
need(types.count("agent.turn.started") == 3, "three turns")
files = {e["payload"]["path"].replace("/workspace/", "", 1) for e in evs if e["type"] == "agent.file.changed"}
need({"hello.txt", "notes/result.md"} <= files, "files %r" % files)
need(len(calls) == 3 and all(c["auth"] == "Bearer " + sys.argv[3] for c in calls), "provider got its own key")
want = sum(c["input_tokens"] * 1000 + c["output_tokens"] * 2000 for c in calls)
got = sum(e["payload"]["cost_nusd"] for e in use)
need(got == want and use[-1]["payload"]["total_nusd"] == want, "cost %d, stub counts say %d" % (got, want))
need([e["payload"]["input_tokens"] for e in use] == [c["input_tokens"] for c in calls], "input tokens")
EOF
cost=$("$SB" inspect conv --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["cost"]["cost_nusd"], d["cost"]["calls"])')
want=$(python3 -c "
import json
print(sum(c['input_tokens']*1000 + c['output_tokens']*2000 for c in map(json.loads, open('$work/stub.log')) if 'scripted' in c['model']), 3)")
[ "$cost" = "$want" ] && ok "cost projection matches the provider's counts" || bad "cost projection" "$cost vs $want"
"$SB" fs cat conv notes/result.md | grep -q 'scripted agent' && ok "the agent's file is on the disk" ||
	bad "files" "notes/result.md missing"

# --- 2. a budget that covers two calls: the third is refused, the run stops
"$SB" run --name bud -m acme/budget --budget 0.017 "keep looking" >"$work/bud.out" 2>&1
rc=$?
B=$("$SB" inspect bud --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["run"])')
evjson "$B"
[ $rc = 123 ] && ok "run exits 123 when its budget stops it" || bad "budget exit" "exit $rc: $(tail -n 3 "$work/bud.out")"
python3 - "$work/$B.ev" <<'EOF' && ok "third call refused: budget.exceeded, run stopped" || bad "budget" "see above"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
use = [e for e in evs if e["type"] == "agent.usage.updated"]
ex = [e for e in evs if e["type"] == "budget.exceeded"]
stop = [e for e in evs if e["type"] == "run.stopped"]
ok = len(use) == 2 and len(ex) == 1 and ex[0]["source"] == "gateway" and stop and stop[-1]["payload"]["reason"] == "budget"
spent = use[-1]["payload"]["total_nusd"] if use else -1
ok = ok and spent == 2 * 8001000 and spent <= 17000000 and ex[0]["payload"]["budget_nusd"] == 17000000
pol = [e for e in evs if e["type"] == "run.policy.resolved"][0]["payload"]
ok = ok and pol["budget_nusd"] == 17000000 and pol["on_budget"] == "stop" and pol["prices"]["acme/budget"]["output"] == 100 * 10**9
if not ok:
    print("budget: usage %d, exceeded %r, stopped %r, spent %d" % (len(use), ex, stop, spent))
sys.exit(0 if ok else 1)
EOF

# --- 2b. a resume of the run its budget stopped: refused without a larger
# budget, in one line and with nothing recorded; with one (--budget) it
# goes on, spends up to it and is stopped by it again
n_before=$("$SB" events bud --json | wc -l)
"$SB" resume bud >"$work/bud2.out" 2>&1
rc=$?
"$SB" resume bud --budget 0.01 >"$work/bud3.out" 2>&1
rc3=$?
[ $rc != 0 ] && grep -q "was stopped by its budget (\$0.016002 of \$0.0170 spent)" "$work/bud2.out" && [ "$(wc -l <"$work/bud2.out")" = 1 ] &&
	[ $rc3 != 0 ] && grep -q 'a budget of \$0.0100 does not exceed the \$0.016002 run' "$work/bud3.out" &&
	[ "$("$SB" events bud --json | wc -l)" = "$n_before" ] &&
	ok "a resume of a spent run needs a larger budget (refused, nothing recorded)" ||
	bad "resume refused" "$rc/$rc3: $(cat "$work/bud2.out" "$work/bud3.out")"
"$SB" resume bud --budget 0.033 >"$work/bud4.out" 2>&1
rc=$?
evjson "$B"
bud_inspect=$("$SB" inspect bud --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["budget_nusd"])')
[ $rc = 123 ] && [ "$bud_inspect" = 33000000 ] && python3 - "$work/$B.ev" <<'EOF' &&
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
use = [e["payload"]["total_nusd"] for e in evs if e["type"] == "agent.usage.updated"]
ex = [e["payload"]["budget_nusd"] for e in evs if e["type"] == "budget.exceeded"]
res = [e["payload"] for e in evs if e["type"] == "run.resumed"]
ok = use == [8001000 * k for k in (1, 2, 3, 4)] and ex == [17000000, 33000000] and \
    len(res) == 1 and res[0]["budget_nusd"] == 33000000
if not ok:
    print("resumed budget: usage %r, exceeded %r, resumed %r" % (use, ex, res))
sys.exit(0 if ok else 1)
EOF
	ok "resume --budget: it spends up to the larger budget, recorded in run.resumed" ||
	bad "resume --budget" "exit $rc, budget $bud_inspect: $(tail -n 3 "$work/bud4.out")"

# --- 3. secrets: the model key never enters the guest, an env secret does,
# and the env secret and the virtual key are masked in the record, also
# when the guest prints one in two pieces (two output chunks)
"$SB" run --name sec -t team --secret ACME_KEY:model -- /bin/sh -c "
	a='$KEY_A'; b='$KEY_B'; k=\"\$a\$b\"; n=0
	for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do grep -qF \"\$k\" \"\$f\" 2>/dev/null && n=\$((n+1)); done
	env | grep -qF \"\$k\" && n=\$((n+1))
	for f in \$(find / -xdev -type f 2>/dev/null); do
		grep -qF \"\$k\" \"\$f\" 2>/dev/null && n=\$((n+1))
	done
	echo model-secret-hits=\$n
	echo team=\$TEAM_TOKEN
	echo team-sha=\$(printf %s \"\$TEAM_TOKEN\" | sha256sum | cut -c1-16)
	h=\${TEAM_TOKEN%????}; printf 'split=%s' \"\$h\"; sleep 0.5; printf '%s|\\n' \"\${TEAM_TOKEN#\$h}\"
	echo vkey=\$OPENAI_API_KEY
	echo key=\${OPENAI_API_KEY%%-*}-\${#OPENAI_API_KEY} base=\$OPENAI_BASE_URL
	wget -q -O- --header \"Authorization: Bearer \$OPENAI_API_KEY\" \$OPENAI_BASE_URL/models
	echo
	wget -q -O- --header 'Authorization: Bearer sk-sb-not-a-key' \$OPENAI_BASE_URL/models 2>&1 | head -c 300
	echo" >"$work/sec.out" 2>&1
grep -q 'model-secret-hits=0' "$work/sec.out" && ok "model-scoped secret absent from the guest" ||
	bad "model secret" "$(grep model-secret "$work/sec.out")"
grep -qF "team-sha=$(printf %s "$TEAM" | sha256sum | cut -c1-16)" "$work/sec.out" &&
	ok "env-scoped secret given to the harness" || bad "env secret" "$(grep team- "$work/sec.out")"
S=$("$SB" inspect sec --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["run"])')
"$SB" events "$S" --json --type agent.output | python3 -c '
import json, sys
out = "".join(json.loads(l)["payload"]["data"] for l in sys.stdin if l.strip())
sys.exit(0 if "team=[masked TEAM_TOKEN]" in out and "split=[masked TEAM_TOKEN]|" in out and
         "vkey=[masked virtual key]" in out else 1)' &&
	! "$SB" events "$S" --json | grep -qF "$TEAM" && ! "$SB" events "$S" --json | grep -q 'sk-sb-[0-9a-f]' &&
	ok "env secret and virtual key masked in the record, also split over two chunks" ||
	bad "masking" "$(grep -E 'team=|split=|vkey=' "$work/sec.out")"
grep -q 'key=sk-46 base=http://127.0.0.1:4000/v1' "$work/sec.out" && ok "harness has a virtual key and the tunnel" ||
	bad "virtual key" "$(grep key= "$work/sec.out")"
grep -q '"acme/scripted"' "$work/sec.out" && ok "models listed through the tunnel" || bad "models" "$(cat "$work/sec.out")"
grep -q '401' "$work/sec.out" && ok "unknown virtual key gets 401" || bad "401" "$(cat "$work/sec.out")"
S=$("$SB" inspect sec --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["run"])')
python3 - "$SB" "$S" <<'EOF' && ok "grants (the template's too) recorded by name and scope" || bad "grants" "see above"
import json, subprocess, sys
evs = [json.loads(l) for l in subprocess.run([sys.argv[1], "events", sys.argv[2], "--json"], capture_output=True, text=True).stdout.splitlines()]
g = sorted((e["payload"]["name"], e["payload"]["scope"]) for e in evs if e["type"] == "secret.granted")
pol = [e for e in evs if e["type"] == "run.policy.resolved"][0]["payload"]
ok = g == [("ACME_KEY", "model"), ("TEAM_TOKEN", "env")] and pol["model"] == "acme/scripted"
if not ok: print("grants:", g)
sys.exit(0 if ok else 1)
EOF
if "$SB" events --all --json | grep -qF "$KEY"; then bad "record" "the provider key is in an event"; else ok "provider key in no event"; fi
if grep -rqaF "$KEY" "$SANBOX_HOME"; then
	bad "state" "the provider key is in $(grep -rlaF "$KEY" "$SANBOX_HOME" | head -3)"
else
	ok "provider key nowhere in the state directory (encrypted at rest)"
fi
"$SB" run --name nosec -m acme/scripted --secret MISSING -- true >"$work/nosec.out" 2>&1
rc=$?
[ $rc != 0 ] && grep -q 'MISSING' "$work/nosec.out" && ok "a secret that is not set refuses the run" ||
	bad "missing secret" "exit $rc: $(cat "$work/nosec.out")"
"$SB" run -m acme/none -- true >"$work/nomodel.out" 2>&1
rc=$?
[ $rc != 0 ] && grep -q "unknown model 'acme/none'" "$work/nomodel.out" && ok "a model without a price refuses the run" ||
	bad "unknown model" "exit $rc: $(cat "$work/nomodel.out")"

# --- 4. 8 concurrent calls against a budget for 3, and a stream cut, in a guest
body='{"model":"acme/budget","messages":[{"role":"user","content":"go"}]}'
sbody='{"model":"acme/long","stream":true,"messages":[{"role":"user","content":"go"}]}'
"$SB" run --name race -m acme/budget -m acme/long --budget 0.024003 --on-budget continue -- /bin/sh -c "
	h=\"Authorization: Bearer \$OPENAI_API_KEY\"
	wget -q -O- --header \"\$h\" --post-data '$sbody' \$OPENAI_BASE_URL/chat/completions > cut.txt 2>&1
	for i in 1 2 3 4 5 6 7 8; do
		( wget -q -O r\$i.json --header \"\$h\" --post-data '$body' \$OPENAI_BASE_URL/chat/completions && echo ok >> res.txt || echo no >> res.txt ) &
	done
	wait
	echo calls-ok=\$(grep -c ok res.txt)
	grep -c budget_exceeded cut.txt | sed 's/^/cut=/'" >"$work/race.out" 2>&1
R=$("$SB" inspect race --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["run"])')
evjson "$R"
grep -q 'cut=1' "$work/race.out" && ok "a stream past the budget is cut" || bad "cut" "$(cat "$work/race.out")"
nok=$(sed -n 's/.*calls-ok=\([0-9]*\).*/\1/p' "$work/race.out")
python3 - "$work/$R.ev" "${nok:-0}" <<'EOF' && ok "8 concurrent calls never overspend" || bad "concurrency" "see above"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
use = [e["payload"] for e in evs if e["type"] == "agent.usage.updated"]
budget_calls = [u for u in use if u["model"] == "acme/budget"]
spent = max(u["total_nusd"] for u in use) if use else 0
ok = spent <= 24003000 and sum(u["cost_nusd"] for u in use) == spent and len(budget_calls) == int(sys.argv[2]) and 1 <= len(budget_calls) < 8
if not ok: print("race: spent %d, %d budget calls, %s ok in the guest" % (spent, len(budget_calls), sys.argv[2]))
sys.exit(0 if ok else 1)
EOF
# --- 5. two built-in stub providers with their own script directories
for n in one two; do
	mkdir -p "$work/local-$n"
	printf '{"turns": [{"text": "answer from script dir %s"}]}\n' "$n" >"$work/local-$n/which.json"
done
python3 - "$SANBOX_HOME/models.json" "$work" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
for n in ("one", "two"):
    m["providers"]["local" + n] = {"builtin": "stub", "script_dir": "%s/local-%s" % (sys.argv[2], n)}
    m["models"]["local%s/which" % n] = {"provider": "local" + n, "upstream": "which", "input": 1, "output": 2}
json.dump(m, open(sys.argv[1], "w"))
EOF
"$SB" run --name local -m localone/which -m localtwo/which -- /bin/sh -c "
	for n in one two; do
		wget -q -O- --header \"Authorization: Bearer \$OPENAI_API_KEY\" \
			--post-data '{\"model\":\"local'\$n'/which\",\"messages\":[{\"role\":\"user\",\"content\":\"which\"}]}' \
			\$OPENAI_BASE_URL/chat/completions
		echo
	done" >"$work/local.out" 2>&1
grep -q 'answer from script dir one' "$work/local.out" && grep -q 'answer from script dir two' "$work/local.out" &&
	ok "each built-in stub provider answers from its own script directory" ||
	bad "built-in stubs" "$(tail -n 4 "$work/local.out")"

# --- 6. reachable only through a run's tunnel: the daemon listens on no TCP
# port and names none; a slowloris inside a guest is closed at the header
# deadline (10 s), and its run's next call is served
python3 - "$SANBOX_HOME/sanboxd.pid" <<'EOF' && ok "the daemon listens on no TCP port" || bad "listeners" "see above"
import os, sys
pid = open(sys.argv[1]).read().split()[0]
socks = set()
for fd in os.listdir("/proc/%s/fd" % pid):
    try:
        link = os.readlink("/proc/%s/fd/%s" % (pid, fd))
    except OSError:
        continue
    if link.startswith("socket:["):
        socks.add(link[8:-1])
listening = []
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).readlines()[1:]:
        f = line.split()
        if f[3] == "0A" and f[9] in socks:
            listening.append(f[1])
if not socks or listening:
    print("daemon sockets %d, listening on %r" % (len(socks), listening))
sys.exit(1 if listening or not socks else 0)
EOF
if "$SB" daemon status --json | grep -q gateway_port; then bad "health" "still names a gateway port"; else ok "health names no gateway port"; fi
"$SB" run --name slow -m acme/scripted -- /bin/sh -c '
	s=$(date +%s)
	(printf "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
	 while :; do printf "X-Slow: a\r\n" || exit; sleep 2; done) | timeout 60 nc 127.0.0.1 4000 >/dev/null 2>&1
	echo slow-closed-after=$(( $(date +%s) - s ))
	wget -q -O- --header "Authorization: Bearer $OPENAI_API_KEY" $OPENAI_BASE_URL/models
	echo' >"$work/slow.out" 2>&1
t=$(sed -n 's/.*slow-closed-after=\([0-9]*\).*/\1/p' "$work/slow.out")
[ -n "$t" ] && [ "$t" -ge 9 ] && [ "$t" -le 25 ] && ok "a trickled header block in the guest is closed at the deadline (${t}s)" ||
	bad "slowloris" "$(cat "$work/slow.out")"
grep -q '"acme/scripted"' "$work/slow.out" && ok "the run is served after it" || bad "after slowloris" "$(cat "$work/slow.out")"

"$SB" daemon status >/dev/null && ok "daemon healthy afterwards" || bad "daemon" "not answering"

# --- 7. the gateway's limits are the daemon's settings: with
# gateway.header_timeout_s 3 the same slowloris is closed after 3 s, not 10;
# with gateway.max_conns 16 a run's share is 16 (not 64), so 20 connections
# at once get refusals
"$SB" daemon stop >/dev/null || bad "daemon stop" "failed"
echo '{"gateway": {"header_timeout_s": 3, "max_conns": 16}}' >"$SANBOX_HOME/sanboxd.json"
"$SB" run --name slow3 -m acme/scripted -- /bin/sh -c '
	s=$(date +%s)
	(printf "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
	 while :; do printf "X-Slow: a\r\n" || exit; sleep 1; done) | timeout 60 nc 127.0.0.1 4000 >/dev/null 2>&1
	echo slow-closed-after=$(( $(date +%s) - s ))
	i=0
	while [ $i -lt 20 ]; do
		sleep 2 | nc 127.0.0.1 4000 >/dev/null 2>&1 &
		i=$((i + 1))
	done
	wait' >"$work/slow3.out" 2>&1
t=$(sed -n 's/.*slow-closed-after=\([0-9]*\).*/\1/p' "$work/slow3.out")
[ -n "$t" ] && [ "$t" -ge 2 ] && [ "$t" -le 7 ] && ok "gateway.header_timeout_s 3 closes a trickled header block after ${t}s" ||
	bad "gateway.header_timeout_s" "$(cat "$work/slow3.out")"
has_event slow3 "e['type'] == 'run.warning' and 'tunnel connection refused' in e['payload'].get('message', '')" &&
	ok "gateway.max_conns 16: 20 connections of one run are refused past its share" ||
	bad "gateway.max_conns" "$("$SB" events slow3 --type run.warning)"
rm -f "$SANBOX_HOME/sanboxd.json"
exit $((failures > 0))
