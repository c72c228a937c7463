#!/bin/sh
# Network mode acl, in network namespaces this test makes (lib/netlab.sh):
# the daemon runs in one, the test hosts (TCP, UDP, HTTP and TLS servers
# and a DNS server that logs every query) in another; no other address is
# used. A run granted one host:port and two names reaches them and nothing
# else: not another port, another host, UDP, ICMP, IPv6, QUIC, DNS to
# another server, or a granted name's neighbour address; an ungranted
# name's lookup fails and the DNS server sees no query for it at all (data
# in the labels reaches nobody); a connection to a granted name's address
# with the TLS SNI or HTTP Host of another name is closed before the server
# sees it, and recorded. A live grant change takes effect both ways without
# a restart; two runs see neither each other's grants nor each other; every
# nft table, tap and file is gone after the runs end, also after the daemon
# is killed with SIGKILL under a live run and started again.
. "$(dirname "$0")/lib/vm.sh"
NETLAB_LIB=$REPO/tests/e2e/lib
. "$NETLAB_LIB/netlab.sh"

vm_extra_cleanup=netlab_down
netlab_up || { echo "FAIL setup: the test network could not be made"; exit 1; }
NP=$BUILD/tests/netprobe
[ -x "$NP" ] || { echo "FAIL setup: $NP is missing (make test builds it)"; exit 1; }
cat >"$SANBOX_HOME/sanboxd.json" <<'EOF'
{"net": {"resolver": "198.51.100.53", "ipv6": 1, "report_interval_s": 0.5}}
EOF
# the daemon (started by the CLI) lives in the daemon's namespace: every
# command that may start it runs there
sbx() { netlab_in_d "$SB" "$@"; }
events_json() { sbx events "$1" --json; }
tmp=$SANBOX_HOME/t
mkdir -p "$tmp"
cp "$NP" "$tmp/netprobe"

# a policy file that is not one is refused before anything is sent
for p in '{"network": "acl", "budget": 1}' '[1]' '{"allow": "a.test:80"}' '{"allow": [1]}' 'x'; do
	printf '%s' "$p" >"$tmp/bad.json"
	out=$("$SB" run --policy "$tmp/bad.json" -- true 2>&1)
	rc=$?
	[ "$rc" = 2 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && ok "bad policy file: $out" ||
		bad "policy file $p" "rc $rc: $out"
done

# a daemon without CAP_NET_ADMIN refuses network acl in one line, before
# anything is recorded; it runs plain runs
setpriv --inh-caps=-net_admin --bounding-set=-net_admin -- ip netns exec "$NETLAB_D" \
	"$SB" run --accel tcg -- true >"$tmp/plain.out" 2>&1 &&
	ok "a daemon without CAP_NET_ADMIN runs network none" ||
	bad "no CAP_NET_ADMIN" "plain run: $(tail -n 2 "$tmp/plain.out")"
n0=$(sbx events --all --json | wc -l)
out=$(sbx run --net acl --allow 198.51.100.10:8080 -- true 2>&1)
rc=$?
[ "$rc" = 4 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] &&
	echo "$out" | grep -q "CAP_NET_ADMIN" && ok "network acl refused: $out" ||
	bad "acl without CAP_NET_ADMIN" "rc $rc: $out"
[ "$(sbx events --all --json | wc -l)" = "$n0" ] && ok "the refused run wrote nothing" ||
	bad "refused run" "events were written"
netlab_in_d nft list tables 2>/dev/null | grep -q sanbox && bad "refused run" "a table was made" ||
	ok "and set nothing up"
sbx daemon stop >/dev/null 2>&1

# addr4_of RUN: the guest's IPv4 address, from its last run.started
addr4_of() {
	events_json "$1" | python3 -c "
import json,sys
for l in sys.stdin:
    e = json.loads(l)
    if e['type'] == 'run.started': print(e['payload']['net']['addr4'])" | tail -n 1
}
# out_has RUN TEXT: the run's output holds TEXT
out_has() { events_json "$1" | grep -F -q -- "$2"; }
# line RUN LABEL: the probe's result line "LABEL: ..." from the run's output
line() {
	events_json "$1" | python3 -c "
import json, sys
out = ''.join(json.loads(l)['payload'].get('data', '') for l in sys.stdin
              if json.loads(l)['type'] == 'agent.output' and json.loads(l)['payload'].get('stream') == 'stdout')
for l in out.split('\n'):
    if l.startswith('$2: '):
        print(l[len('$2: '):]); break"
}
expect() { # expect RUN LABEL WANT: the line starts with WANT
	got=$(line "$1" "$2")
	case $got in "$3"*) ok "$2: $3" ;; *) bad "$2" "want '$3', got '$got'" ;; esac
}

# --- run A: one address grant, two names, one IPv6 address ---
cat >"$tmp/probe.sh" <<'EOF'
p=./netprobe
r() { echo "$1: $(shift; "$@" --timeout 2 2>/dev/null | tr '\n' ' ')"; }
r granted $p tcp 198.51.100.10 8080
r granted6 $p tcp 2001:db8:100::10 8080
r otherport $p tcp 198.51.100.10 8081
r neighbour $p tcp 198.51.100.11 8080
r neighbour6 $p tcp 2001:db8:100::11 8080
r udp $p udp 198.51.100.10 9999 --send x
r icmp $p icmp 198.51.100.10
r icmp6 $p icmp 2001:db8:100::10
r quic $p quic 198.51.100.10 443
r dns $p dns a.test
r exfil $p dns c2VjcmV0.exfil.x.test
r exfiltxt $p dns c2VjcmV0.a.test --type TXT
r dnstcp $p dns a.test --tcp
r dnsdirect $p dns a.test --server 198.51.100.53
r dot $p tcp 198.51.100.53 853
r tls $p tls a.test 443 --sni a.test
r fronttls $p tls 198.51.100.10 443 --sni b.test
r nosni $p tls 198.51.100.10 443 --sni ""
r http $p http a.test 80
r fronthttp $p http 198.51.100.10 80 --host b.test
r neighbourtls $p tls 198.51.100.11 443 --sni a.test
echo "resolv: $(cat /etc/resolv.conf | tr '\n' ' ')"
EOF
# a policy file gives the mode and two grants, --allow the rest
printf '{"network": "acl", "allow": ["a.test:80", "a.test:443"]}' >"$tmp/policy.json"
A=$(sbx run --detach --accel tcg --name nettest --timeout 300s --policy "$tmp/policy.json" \
	--allow 198.51.100.10:8080 --allow a.test:443 --allow '[2001:db8:100::10]:8080' \
	--input "$tmp/netprobe" --input "$tmp/probe.sh" -- /bin/sh probe.sh 2>"$tmp/a.err") ||
	bad "run --net acl" "$(cat "$tmp/a.err")"
has_event "$A" "e['type']=='run.policy.resolved' and e['payload']['network']=='acl' and e['payload']['allow']==['a.test:80','a.test:443','198.51.100.10:8080','[2001:db8:100::10]:8080']" &&
	ok "the policy file's grants, then --allow's, each once" ||
	bad "policy" "$(events_json "$A" | grep policy.resolved)"
wait_event "$A" "e['type']=='run.stopped'" 180 || bad "run A" "did not end"
expect "$A" granted "hello from 198.51.100.10:8080"
expect "$A" granted6 "hello from [2001:db8:100::10]:8080"
for l in otherport neighbour neighbour6 udp icmp icmp6 quic dnsdirect dot neighbourtls; do
	expect "$A" $l timeout
done
expect "$A" dns "NOERROR 198.51.100.10"
expect "$A" dnstcp "NOERROR 198.51.100.10"
expect "$A" exfil NXDOMAIN
expect "$A" exfiltxt NXDOMAIN
expect "$A" tls serverhello
expect "$A" http "HTTP/1.1 200"
# the judge resets a connection that names an ungranted host
for l in fronttls nosni fronthttp; do
	expect "$A" $l reset
done
expect "$A" resolv "nameserver 10.87."
# the DNS server never saw the ungranted names; the servers never saw b.test
netlab_log_has 'e["kind"] == "dns" and ("exfil" in e["name"] or "c2vjcmv0" in e["name"])' &&
	bad "exfiltration" "the test's DNS server saw the query" ||
	ok "no query of an ungranted name reached any DNS server"
netlab_log_has 'e["kind"] == "dns" and e["name"] == "a.test"' &&
	ok "granted names resolve through the host's resolver" ||
	bad "resolver" "a.test never asked"
netlab_log_has 'e.get("sni") == "b.test" or e.get("host") == "b.test"' &&
	bad "fronting" "a server saw b.test" ||
	ok "no byte of a fronted connection reached the server"
netlab_log_has 'e.get("sni") == "a.test"' && ok "the granted SNI went through" ||
	bad "tls" "the TLS server saw no a.test"
has_event "$A" "e['type']=='net.denied' and e['payload'].get('name')=='b.test' and e['payload']['port']==443" &&
	ok "net.denied for the TLS SNI b.test" || bad "net.denied" "no SNI denial"
has_event "$A" "e['type']=='net.denied' and e['payload'].get('name')=='b.test' and e['payload']['port']==80" &&
	ok "net.denied for the HTTP Host b.test" || bad "net.denied" "no Host denial"
has_event "$A" "e['type']=='net.denied' and e['payload']['dst']=='198.51.100.11' and e['payload']['port']==8080 and e['payload']['proto']=='tcp'" &&
	ok "net.denied for the neighbour address" || bad "net.denied" "no neighbour denial"
has_event "$A" "e['type']=='net.denied' and e['payload']['proto']=='dns' and 'exfil' in e['payload'].get('name','')" &&
	ok "net.denied for the ungranted name" || bad "net.denied" "no DNS denial"
has_event "$A" "e['type']=='net.resolved' and e['payload']['name']=='a.test' and '198.51.100.10' in e['payload']['addrs']" &&
	ok "net.resolved counts the granted lookups" || bad "net.resolved" "none for a.test"
has_event "$A" "e['type']=='run.started' and e['payload']['net']['addr4'].startswith('10.87.')" &&
	ok "run.started names the NIC" || bad "run.started" "no net"
sbx events "$A" | grep -q 'net.denied .*tcp 198.51.100.11:8080: not granted' &&
	ok "events prints denials" || bad "events" "no denial summary"

# --- runs B and C at once: live changes; neither sees the other ---
cat >"$tmp/loop.sh" <<'EOF'
i=0
while [ $i -lt 400 ]; do
	echo "try $i $1: $(./netprobe tcp $1 8080 --timeout 1 2>/dev/null)"
	[ -n "$2" ] && echo "peer $i: $(./netprobe tcp $2 8080 --timeout 1 2>/dev/null)"
	i=$((i + 1)); sleep 0.2
done
EOF
B=$(sbx run --detach --accel tcg --name live --timeout 300s --net acl \
	--allow 198.51.100.10:8080 --input "$tmp/netprobe" --input "$tmp/loop.sh" -- \
	/bin/sh loop.sh 198.51.100.11) || bad "run B" "not started"
C=$(sbx run --detach --accel tcg --name other --timeout 300s --net acl \
	--allow 198.51.100.11:8080 --input "$tmp/netprobe" --input "$tmp/loop.sh" -- \
	/bin/sh loop.sh 198.51.100.10) || bad "run C" "not started"
wait_event "$B" "e['type']=='agent.output' and 'try 2 ' in e['payload']['data']" 120 ||
	bad "run B" "no output"
wait_event "$C" "e['type']=='agent.output' and 'try 2 ' in e['payload']['data']" 120 ||
	bad "run C" "no output"
out_has "$B" "hello from 198.51.100.11" && bad "B" "reached .11 before its grant" ||
	ok "B: 198.51.100.11 not granted yet"
out_has "$C" "try 1 198.51.100.10: hello" && bad "C" "reached B's grant" ||
	ok "C does not get B's grant"
out_has "$C" "try 2 198.51.100.10: timeout" && ok "C: 198.51.100.10 dropped" ||
	bad "C" "$(line "$C" 'try 2 198.51.100.10')"
b4=$(addr4_of "$B")
c4=$(addr4_of "$C")
[ -n "$b4" ] && [ -n "$c4" ] && [ "$b4" != "$c4" ] && ok "each run has its own address ($b4, $c4)" ||
	bad "addresses" "B $b4 C $c4"
sbx net allow "$B" 198.51.100.11:8080 >"$tmp/allow.out" 2>&1 && grep -q 'allowed 198.51.100.11:8080' "$tmp/allow.out" &&
	ok "net allow" || bad "net allow" "$(cat "$tmp/allow.out")"
wait_event "$B" "e['type']=='agent.output' and 'hello from 198.51.100.11' in e['payload']['data']" 30 &&
	ok "the new grant works without a restart" || bad "live allow" "never reached .11"
has_event "$B" "e['type']=='net.grant.added' and e['payload']['grant']=='198.51.100.11:8080'" &&
	ok "net.grant.added recorded" || bad "net.grant.added" "missing"
out_has "$C" "hello from 198.51.100.10" && bad "C" "B's new grant reached C" ||
	ok "C still does not get B's grants"
sbx net allow "$B" 198.51.100.11:8080 >"$tmp/twice.out" 2>&1 &&
	bad "allow twice" "accepted" || ok "a grant the run has is refused: $(cat "$tmp/twice.out")"
sbx net allow "$B" '10.0.0.0/33:80' >"$tmp/badg.out" 2>&1 &&
	bad "bad grant" "accepted" || ok "a bad grant is refused: $(cat "$tmp/badg.out")"

# SIGKILL the daemon under the live runs; the next one takes them up
dpid=$(cat "$SANBOX_HOME/sanboxd.pid")
kill -9 "$dpid"
proc_wait_gone "$dpid" 50 || bad "kill" "daemon $dpid still there"
sbx ps >/dev/null 2>&1 # starts a new daemon
netlab_in_d nft list table inet sanbox >/dev/null 2>&1 && ok "the chains outlive the daemon" ||
	bad "chains" "gone with the daemon"
mark=$(events_json "$B" | grep -c 'hello from 198.51.100.11')
sleep 3
[ "$(events_json "$B" | grep -c 'hello from 198.51.100.11')" -gt "$mark" ] &&
	ok "B goes on reaching its live grant after the restart" ||
	bad "reattach" "B's output stopped"
sbx net deny "$B" 198.51.100.11:8080 >"$tmp/deny.out" 2>&1 && grep -q 'denied 198.51.100.11:8080' "$tmp/deny.out" &&
	ok "net deny after the restart" || bad "net deny" "$(cat "$tmp/deny.out")"
has_event "$B" "e['type']=='net.grant.removed'" && ok "net.grant.removed recorded" ||
	bad "net.grant.removed" "missing"
n0=$(events_json "$B" | grep -c 'hello from 198.51.100.11')
sleep 3
n1=$(events_json "$B" | grep -c 'hello from 198.51.100.11')
[ "$n1" -le "$((n0 + 1))" ] && ok "the removed grant no longer works" ||
	bad "live deny" "$n0 -> $n1 connections after the deny"
sbx stop "$B" >/dev/null 2>&1
sbx stop "$C" >/dev/null 2>&1
wait_event "$B" "e['type']=='run.stopped'" 60 || bad "B" "did not stop"
wait_event "$C" "e['type']=='run.stopped'" 60 || bad "C" "did not stop"

# --- a fork of a memory snapshot: its processes go on, on its own address ---
cat >"$tmp/addr.sh" <<'EOF'
i=0
while [ $i -lt 300 ]; do
	echo "n=$i $(ip -4 addr show eth0 | grep -o 'inet [0-9.]*') $(./netprobe tcp 198.51.100.10 8080 --timeout 1 2>/dev/null)"
	i=$((i + 1)); sleep 0.5
done
EOF
E=$(sbx run --detach --accel tcg --name mem --timeout 300s --net acl \
	--allow 198.51.100.10:8080 --input "$tmp/netprobe" --input "$tmp/addr.sh" -- \
	/bin/sh addr.sh) || bad "run E" "not started"
wait_event "$E" "e['type']=='agent.output' and 'n=3 ' in e['payload']['data']" 120 ||
	bad "run E" "no output"
S=$(sbx snapshot "$E" --memory) || bad "memory snapshot" "$S"
F=$(sbx fork "$E" --snapshot "$S" --detach) || bad "memory fork" "$F"
e4=$(addr4_of "$E")
f4=$(addr4_of "$F")
wait_event "$F" "e['type']=='agent.output' and 'inet $f4 ' in e['payload']['data'] and 'hello from' in e['payload']['data']" 60 &&
	ok "a memory fork goes on at its own address $f4 (its parent's: $e4) and reaches the grant" ||
	bad "memory fork" "$(events_json "$F" | grep agent.output | tail -n 2)"
sleep 2
events_json "$E" | grep agent.output | tail -n 2 | grep -q "inet $e4 .*hello from" &&
	ok "its parent goes on unchanged" ||
	bad "memory fork" "the parent: $(events_json "$E" | grep agent.output | tail -n 1)"
sbx stop "$E" >/dev/null 2>&1
sbx stop "$F" >/dev/null 2>&1
wait_event "$F" "e['type']=='run.stopped'" 60 || bad "F" "did not stop"

# --- a run whose VM dies while no daemon runs: its leftovers go ---
D=$(sbx run --detach --accel tcg --name gone --timeout 300s --net acl \
	--allow 198.51.100.10:8080 -- /bin/sh -c 'sleep 300') || bad "run D" "not started"
wait_event "$D" "e['type']=='harness.input.ready'" 120 || bad "run D" "not ready"
dpid=$(cat "$SANBOX_HOME/sanboxd.pid")
kill -9 "$dpid"
proc_wait_gone "$dpid" 50
kill -9 "$(cat "$SANBOX_HOME/runs/$D/qemu.pid")"
sleep 0.5
netlab_in_d ip link show "sb$D" >/dev/null 2>&1 && ok "its tap outlives the daemon and the VM" ||
	bad "tap" "gone before the restart"
sbx ps >/dev/null 2>&1
wait_event "$D" "e['type']=='run.stopped'" 30 && ok "the dead VM's run ends at the restart" ||
	bad "run D" "not ended"

# nothing is left: no table, no tap, no run's network file
sleep 1
netlab_in_d nft list tables 2>/dev/null | grep -q sanbox &&
	bad "cleanup" "table inet sanbox left: $(netlab_in_d nft list ruleset | head -5)" ||
	ok "no nft table left"
netlab_in_d ip -o link | grep -q ': sb[0-9a-f]\{12\}' &&
	bad "cleanup" "taps left: $(netlab_in_d ip -o link | grep ': sb')" || ok "no tap left"
ls "$SANBOX_HOME"/runs/*/net.json >/dev/null 2>&1 && bad "cleanup" "net.json left" ||
	ok "no network file left"

[ "$failures" = 0 ]
