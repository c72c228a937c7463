#!/bin/sh
# Network mode acl against a hostile guest and hostile peers, in network
# namespaces this test makes (lib/netlab.sh, plus a hostile DNS server and
# a few more test hosts in the same two namespaces); no other address is
# used. One run (one boot) does every probe: tests/guest/nethostile.c
# crafts what busybox cannot (raw frames with made-up sources, floods, a
# request judged while the server's receive window is full) and netprobe
# the rest.
# What it checks:
#   - a made-up source address (IPv4 or IPv6, link-local too) gets nothing
#     through, not even to the run's own grants or its DNS stub;
#   - an answer of a granted name's DNS server (a hostile one) does not let
#     the guest reach the host itself (its loopback, its own addresses) or
#     the host's neighbours on ports no grant names; ARP on the tap shows
#     none of the host's other addresses;
#   - the judge checks the name of every request: not one reaches a server
#     for an ungranted name, also when the server's receive window is full;
#     a wildcard's parent, an IP literal, absolute-form and HTTP/1.0
#     requests are refused;
#   - a guest's floods (DNS, judged connections, conntrack entries) leave the
#     daemon answering and use a bounded share of the host; repeated
#     lookups of a granted name do not each reach its DNS server;
#   - the record: more than 64 denied destinations in a report give the
#     summary event and no other denial's count grows for them;
#   - after `sanbox net deny` nothing of the grant works: not a connection
#     made before, not a new one to the name's cached addresses, not UDP in
#     either direction;
#   - a run that takes a slot after another gets nothing of the other's
#     grants (its conntrack entries);
#   - nothing is left after the run: table, tap, net.json.
. "$(dirname "$0")/lib/vm.sh"
NETLAB_LIB=$REPO/tests/e2e/lib
. "$NETLAB_LIB/netlab.sh"

extra_pids=
# HOSTILE_KEEP=DIR keeps the servers' logs and the run's output there
hostile_down() {
	[ -z "${HOSTILE_KEEP:-}" ] || { mkdir -p "$HOSTILE_KEEP" && cp -r "$NETLAB_DIR" "$SANBOX_HOME/t" "$HOSTILE_KEEP/"; }
	for p in $extra_pids; do
		kill "$p" 2>/dev/null
		proc_wait_gone "$p" 30 || kill -9 "$p" 2>/dev/null
	done
	netlab_down
}
vm_extra_cleanup=hostile_down
netlab_up || { echo "FAIL setup: the test network could not be made"; exit 1; }
NP=$BUILD/tests/netprobe
NH=$BUILD/tests/nethostile
for b in "$NP" "$NH"; do
	[ -x "$b" ] || { echo "FAIL setup: $b is missing (make test builds it)"; exit 1; }
done
tmp=$SANBOX_HOME/t
mkdir -p "$tmp"
cp "$NP" "$tmp/netprobe"
cp "$NH" "$tmp/nethostile"
EVIL_LOG=$NETLAB_DIR/evil.jsonl
HOST_LOG=$NETLAB_DIR/host.jsonl
SLOW_LOG=$NETLAB_DIR/slow.jsonl

# --- more test hosts ---
# A hostile DNS server (the daemon's resolver): the granted names answer
# with the host's loopback, the host's own address and a neighbour of it.
netlab_in_r ip addr add 198.51.100.54/32 dev lo || { echo "FAIL setup: address"; exit 1; }
netlab_in_r python3 "$NETLAB_LIB/netsrv.py" --log "$EVIL_LOG" --dns 198.51.100.54:53 \
	--record a.test=A:198.51.100.10 --record a.test=AAAA:2001:db8:100::10 \
	--record b.test=A:198.51.100.10 --record n.test=A:198.51.100.11 \
	--record loop.test=A:127.0.0.1 \
	--record self.test=A:192.0.2.2 --record lan.test=A:192.0.2.1 \
	--record x.w.test=A:198.51.100.10 \
	--udp '[2001:db8:100::10]:9999' --tcp 192.0.2.1:9000 >"$NETLAB_DIR/evil.out" 2>&1 &
extra_pids="$extra_pids $!"
# Services of the daemon's host itself, which no guest may reach.
netlab_in_d python3 "$NETLAB_LIB/netsrv.py" --log "$HOST_LOG" --tcp 127.0.0.1:8080 \
	--tcp 192.0.2.2:8443 >"$NETLAB_DIR/host.out" 2>&1 &
extra_pids="$extra_pids $!"
# A front that reads slower than a guest sends (as one across the
# internet does; here 4 KB every 5 ms with a small receive window); it logs
# the Host headers of each connection.
netlab_in_r python3 -c '
import json, re, socket, sys, threading, time
log = open(sys.argv[1], "a")
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.bind(("198.51.100.11", 80))
s.listen(64)
def handle(c, peer):
    data, end = b"", time.time() + 60
    c.settimeout(10)
    try:
        while time.time() < end:
            d = c.recv(4096)
            if not d:
                break
            data += d
            time.sleep(0.005)
    except OSError:
        pass
    hosts = sorted(set(h.decode("latin-1") for h in re.findall(rb"\r\nHost: ([^\r]*)\r\n", data)))
    log.write(json.dumps({"from": "%s:%d" % peer, "bytes": len(data), "hosts": hosts,
                          "secrets": data.count(b"secret-"),
                          "posts": data.count(b"POST /body ")}) + "\n")
    log.flush()
    c.close()
log.write(json.dumps({"ready": 1}) + "\n"); log.flush()
while True:
    c, peer = s.accept()
    threading.Thread(target=handle, args=(c, peer), daemon=True).start()
' "$SLOW_LOG" &
extra_pids="$extra_pids $!"
# A UDP peer that, once a guest wrote to it, sends it a datagram every
# 200 ms for 40 s, each with the moment it was sent.
netlab_in_r python3 -c '
import socket, sys, threading, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("198.51.100.10", 9998))
def push(peer):
    end = time.time() + 40
    while time.time() < end:
        s.sendto(("push %.3f" % time.time()).encode(), peer)
        time.sleep(0.2)
while True:
    _, peer = s.recvfrom(512)
    threading.Thread(target=push, args=(peer,), daemon=True).start()
' &
extra_pids="$extra_pids $!"
i=0
until grep -q ready "$EVIL_LOG" 2>/dev/null && grep -q ready "$HOST_LOG" 2>/dev/null &&
	grep -q ready "$SLOW_LOG" 2>/dev/null; do
	i=$((i + 1))
	[ $i -lt 100 ] || { echo "FAIL setup: the extra servers did not start"; exit 1; }
	sleep 0.1
done

cat >"$SANBOX_HOME/sanboxd.json" <<'EOF'
{"net": {"resolver": "198.51.100.54", "ipv6": 1, "report_interval_s": 1}}
EOF
sbx() { netlab_in_d "$SB" "$@"; }
events_json() { sbx events "$1" --json; }
# stdout RUN: everything the run printed on stdout
stdout_of() {
	events_json "$1" | python3 -c "
import json, sys
print(''.join(json.loads(l)['payload'].get('data', '') for l in sys.stdin
      if json.loads(l)['type'] == 'agent.output' and json.loads(l)['payload'].get('stream') == 'stdout'))"
}
# line LABEL: the rest of the first stdout line "LABEL: ..." of run $A
line() { stdout_of "$A" | sed -n "s/^$1: //p" | head -n 1; }
expect() { # expect LABEL WANT [what it means]
	got=$(line "$1")
	# (echo reads backslashes: the probe's escapes are shown doubled)
	case $got in "$2"*) ok "$1: $2" ;;
	*) bad "$1${3:+ ($3)}" "want '$2', got '$(printf '%s' "$got" | sed 's/\\/\\\\/g')'" ;; esac
}
# log_count FILE PYEXPR: lines e of the JSON lines FILE satisfying PYEXPR
log_count() {
	python3 -c "
import json, sys
def match(e):
    try:
        return bool($2)
    except (KeyError, IndexError, TypeError):
        return False
print(sum(1 for l in open(sys.argv[1]) if l.strip() and match(json.loads(l))))" "$1"
}

# --- the guest's script ---
cat >"$tmp/probe.sh" <<'EOF'
p=./netprobe h=./nethostile
r() { l=$1; shift; printf '%s: %s\n' "$l" "$("$@" --timeout 3 2>/dev/null | tr '\n' ' ')"; }
gw4=$(sed -n 's/^nameserver \([0-9.]*\)$/\1/p' /etc/resolv.conf | head -n 1)
gw6=$(sed -n 's/^nameserver \(.*:.*\)$/\1/p' /etc/resolv.conf | head -n 1)
# the guest's own addresses, and another slot's guest (another run's)
me4=${gw4%.*}.$((${gw4##*.} + 1)) me6=${gw6%1}2
next4=${gw4%.*}.$((${gw4##*.} + 5)) next6=fd53:616e:626f:7::2
echo "addrs: $me4 $me6 gw $gw4 $gw6 next $next4 $next6"
for n in a.test n.test loop.test self.test lan.test x.w.test; do $p dns $n >/dev/null 2>&1; done

# made-up sources: to the run's own UDP grant and its DNS stub
$h spoof4 "$next4" 198.51.100.10 9999 spoof-next4 >/dev/null
$h spoof4 "$gw4" 198.51.100.10 9999 spoof-gw4 >/dev/null
$h spoof4 192.0.2.2 198.51.100.10 9999 spoof-host4 >/dev/null
$h spoof4 198.51.100.11 198.51.100.10 9999 spoof-server4 >/dev/null
$h spoof6 fe80::1 2001:db8:100::10 9999 spoof-ll6 >/dev/null
$h spoof6 "$next6" 2001:db8:100::10 9999 spoof-next6 >/dev/null
$h spoof4 "$next4" "$gw4" 53 spoof-dns >/dev/null
# controls: the guest's own addresses go through
$h spoof4 "$me4" 198.51.100.10 9999 spoof-own4 >/dev/null
$h spoof6 "$me6" 2001:db8:100::10 9999 spoof-own6 >/dev/null
echo "spoofed: done"
# the host's other addresses show through ARP
$h arp 192.0.2.2 | sed 's/^arp [^:]*/arp-host/'

# a hostile DNS server's answers for granted names
# (127.0.0.1 is the guest's own too: its stack keeps it, so raw frames)
$h rawtcp 127.0.0.1 8080 'GET / HTTP/1.1\r\nHost: loop.test\r\n\r\n' | sed 's/^rawtcp [^:]*:[0-9]*/loop/'
r self $p tcp self.test 8443 --send 'GET / HTTP/1.1\r\nHost: self.test\r\n\r\n'
r lan $p tcp lan.test 9000 --send x

# the judge's checks
r wildparent $p tls 198.51.100.10 443 --sni w.test
r wildchild $p tls 198.51.100.10 443 --sni x.w.test
r upperdot $p tls 198.51.100.10 443 --sni A.TEST.
r ipliteral $p http 198.51.100.10 80 --host 198.51.100.10
r absform $p tcp 198.51.100.10 80 --send 'GET http://b.test/ HTTP/1.0\r\n\r\n'
r http10 $p tcp 198.51.100.10 80 --send 'GET / HTTP/1.0\r\n\r\n'
r pipelined $p tcp 198.51.100.10 80 --send 'GET / HTTP/1.1\r\nHost: a.test\r\n\r\nGET / HTTP/1.1\r\nHost: b.test\r\n\r\n'
r upgrade $p tcp 198.51.100.10 80 --send 'GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nGET / HTTP/1.1\r\nHost: b.test\r\n\r\n'
# (each after a fresh lookup: n.test's address stays granted for its TTL)
$p dns n.test >/dev/null 2>&1; $h smuggle 198.51.100.11 80 n.test b.test
$p dns n.test >/dev/null 2>&1; $h bodysmuggle 198.51.100.11 80 n.test b.test length
$p dns n.test >/dev/null 2>&1; $h bodysmuggle 198.51.100.11 80 n.test b.test chunked

# floods
$h dnsflood 1500
$h dnsmany a.test 50
$h conns 198.51.100.10 443 150 12
r afterconns $p tls 198.51.100.10 443 --sni a.test
$h conns 198.51.100.10 80 150 12 | sed 's/^conns/conns80/'
r afterconns80 $p http 198.51.100.10 80 --host a.test
echo "ctflood-start: now"
sleep 3 # the host counts the entries before
$h ctflood "$gw4" 53 20000
sleep 2
echo "ctflood-end: now"
r afterflood $p dns a.test

# live deny: the host removes four grants once it sees "deny-ready"
$h hold 198.51.100.10 8081 40 &
$h hold 198.51.100.10 8080 40 &
$h uhold 198.51.100.10 9999 40 &
$h urecv 198.51.100.10 9998 40 &
i=0
while [ $i -lt 40 ]; do
	echo "left $i: $($p tcp 198.51.100.10 8081 --timeout 1 2>/dev/null)"
	[ $i = 4 ] && echo "deny-ready: now"
	i=$((i + 1)); sleep 0.4
done
wait
echo "probe: done"
EOF

A=$(sbx run --detach --accel tcg --name hostile --timeout 600s --net acl \
	--allow udp/198.51.100.10:9999 --allow 'udp/[2001:db8:100::10]:9999' \
	--allow udp/198.51.100.10:9998 --allow 198.51.100.10:8080 \
	--allow a.test:8081 --allow a.test:80 --allow a.test:443 --allow '*.w.test:443' \
	--allow loop.test:8080 --allow self.test:8443 \
	--allow lan.test:9000 --allow n.test:80 \
	--input "$tmp/netprobe" --input "$tmp/nethostile" --input "$tmp/probe.sh" -- \
	/bin/sh probe.sh 2>"$tmp/a.err") || { bad "run" "$(cat "$tmp/a.err")"; exit 1; }
dpid=$(cat "$SANBOX_HOME/sanboxd.pid")
fds0=$(ls "/proc/$dpid/fd" | wc -l)
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$dpid/status" 2>/dev/null; }
cpu() { awk '{print $14 + $15}' "/proc/$dpid/stat" 2>/dev/null; }
rss0=$(rss) cpu0=$(cpu)

# the conntrack flood: entries in the daemon's namespace while it lasts
wait_event "$A" "e['type']=='agent.output' and 'ctflood-start' in e['payload']['data']" 400 ||
	bad "run" "never reached the floods: $(stdout_of "$A" | tail -n 3)"
ct0=$(netlab_in_d cat /proc/sys/net/netfilter/nf_conntrack_count)
wait_event "$A" "e['type']=='agent.output' and 'ctflood-end' in e['payload']['data']" 120
ct1=$(netlab_in_d cat /proc/sys/net/netfilter/nf_conntrack_count)
fds1=$(ls "/proc/$dpid/fd" | wc -l)
rss1=$(rss) cpu1=$(cpu)

# the live deny
wait_event "$A" "e['type']=='agent.output' and 'deny-ready' in e['payload']['data']" 120 ||
	bad "run" "never reached the deny: $(stdout_of "$A" | tail -n 3)"
for g in a.test:8081 198.51.100.10:8080 udp/198.51.100.10:9999 udp/198.51.100.10:9998; do
	sbx net deny "$A" "$g" >"$tmp/deny.out" 2>&1 || bad "net deny $g" "$(cat "$tmp/deny.out")"
done
denied_at=$(python3 -c 'import time; print(time.time())')
sleep 3 # what was under way when the deny came is over
mark=$(stdout_of "$A")
wait_event "$A" "e['type']=='agent.output' and 'probe: done' in e['payload']['data']" 180 ||
	bad "run" "did not finish: $(stdout_of "$A" | tail -n 3)"
wait_event "$A" "e['type']=='run.stopped'" 60 || bad "run" "did not end"
out=$(stdout_of "$A")
printf '%s\n' "$out" >"$tmp/out.txt"

# --- made-up sources ---
spoofed() {
	echo $(($(netlab_log_count "e['kind'] == 'udp' and e['data'] == 'spoof-$1'") +
		$(log_count "$EVIL_LOG" "e['kind'] == 'udp' and e['data'] == 'spoof-$1'")))
}
for s in own4 own6; do
	[ "$(spoofed $s)" -gt 0 ] && ok "control: a raw datagram from the guest's own address ($s) arrives" ||
		bad "spoofing control $s" "the raw frames do not arrive: the spoofing checks prove nothing"
done
for s in next4 gw4 host4 server4 ll6 next6; do
	[ "$(spoofed $s)" = 0 ] && ok "a datagram from made-up source $s went nowhere" ||
		bad "spoofing ($s)" "the server got it $(spoofed $s) times"
done
has_event "$A" "e['type'] == 'net.denied' and e['payload']['reason'] == 'malformed query'" &&
	bad "spoofing (stub)" "the stub read a datagram from a made-up source" ||
	ok "the stub never saw a datagram from a made-up source"

# --- the host itself ---
n=$(log_count "$HOST_LOG" "e['kind'] == 'tcp' and e['event'] == 'connect'")
[ "$n" = 0 ] && ok "no connection reached the host's own services" ||
	bad "the host's services (a connection reached where a hostile DNS answer points)" \
		"$n connections to $(grep '"connect"' "$HOST_LOG" | sed 's/.*"server": "\([^"]*\)".*/\1/' | sort -u | tr '\n' ' ')"
case $(line loop) in *"hello from"*) bad "loop (a granted name answered with 127.0.0.1: the host's loopback)" "$(line loop)" ;;
*) ok "the host's loopback stays out of reach: $(line loop)" ;; esac
# a hostile answer is left out (the name does not resolve), or nothing
# of the connection gets through
for l in loop self lan; do
	case $(line $l) in unresolved* | closed* | timeout*) ok "$l: out of reach ($(line $l))" ;;
	*) bad "$l (a granted name answered with the host's or its LAN's address)" "$(line $l)" ;; esac
done
has_event "$A" "e['type'] == 'net.denied' and e['payload']['proto'] == 'dns' and e['payload'].get('name') == 'self.test' and 'host' in e['payload']['reason']" &&
	ok "the answer of the host's own address is recorded as refused" ||
	bad "self.test" "no net.denied for its answer"
case $(line arp-host) in *timeout) ok "ARP shows none of the host's other addresses" ;;
*) bad "ARP (the host answers for all its addresses on the tap)" "$(line arp-host)" ;; esac

# --- the judge ---
expect wildparent reset
expect wildchild serverhello
case $(line upperdot) in closed*) bad "upperdot" "A.TEST. refused" ;; *) ok "upperdot: A.TEST. is a.test" ;; esac
expect ipliteral reset
[ "$(netlab_log_count "e['kind'] == 'http' and (e['host'] is None or 'b.test' in e['path'])")" = 0 ] &&
	ok "absform and HTTP/1.0 without Host reached no server" ||
	bad "judge" "a request without Host or for http://b.test/ reached the server"
[ "$(netlab_log_count "e.get('host') == 'b.test' or e.get('sni') in ('b.test', 'w.test')")" = 0 ] &&
	ok "no request for an ungranted name reached the fronts" ||
	bad "fronting" "a server saw an ungranted name"
n=$(log_count "$SLOW_LOG" "'b.test' in e['hosts']")
tries=$(log_count "$SLOW_LOG" "'bytes' in e")
[ "$n" = 0 ] && ok "a full receive window let no request for b.test through ($tries tries)" ||
	bad "judge: a request judged while the server's window is full goes through unchecked" \
		"$n of $tries connections brought 'Host: b.test' and $(log_count "$SLOW_LOG" "e['secrets'] > 0 and 'b.test' in e['hosts']") its data to the server; guest: $(line smuggle)"

expect bodysmuggle-length closed "a request after a Content-Length body the judge let by unread"
expect bodysmuggle-chunked closed "a request after a chunked body the judge let by unread"
case $(line bodysmuggle-chunked)$(line bodysmuggle-length) in *"no connection"*)
	echo "note: denials on port 80: $(events_json "$A" | python3 -c "
import json, sys
for l in sys.stdin:
    e = json.loads(l)
    if e['type'] == 'net.denied' and e['payload'].get('port') == 80:
        print(e['payload'].get('dst'), e['payload'].get('name'), e['payload'].get('reason'), e['payload'].get('count'), end='; ')")" ;;
esac
[ "$(log_count "$SLOW_LOG" "e.get('posts') == 1 and e['hosts'] == ['n.test'] and e['bytes'] > 200000")" = 2 ] &&
	ok "both bodies reached the server whole, and no request after them" ||
	bad "judge: bodies" "a body let by unread did not reach the server: $(grep bytes "$SLOW_LOG" | tail -3)"

# --- floods ---
fds2=$(ls "/proc/$dpid/fd" 2>/dev/null | wc -l)
expect afterconns serverhello "the judge after 150 idle connections"
expect afterconns80 "HTTP/1.1 200" "the judge (HTTP) after 150 idle connections"
expect afterflood "NOERROR" "the stub after the floods"
# the judge reads 64 at once and refuses the rest at their SYN; each one it
# took is reset once it named no server in 10 s (or sent no TLS: every 16th)
for c in conns conns80; do
	made=$(line $c | sed -n 's/^\([0-9]*\) connected.*/\1/p')
	shut=$(line $c | sed -n 's/.* connected, \([0-9]*\) closed.*/\1/p')
	[ "${made:-0}" -ge 64 ] && [ "$made" -lt 150 ] && [ "$made" = "$shut" ] &&
		ok "idle judged connections ($c): 64 at once, each reset: $(line $c)" ||
		bad "idle judged connections ($c)" "$(line $c)"
done
[ "$fds1" -le "$((fds0 + 20))" ] && [ "$fds2" -le "$((fds0 + 20))" ] &&
	ok "the daemon's descriptors: $fds0, $fds1 after the floods, $fds2 at the end" ||
	bad "descriptors" "$fds0 -> $fds1 -> $fds2"
# the flood must have gone out for the count after it to mean anything;
# a NIC that stopped sending is shown with the guest kernel's last words
case $(line ctflood) in
"20000 sent"*) ok "the conntrack flood went out: $(line ctflood)" ;;
*) bad "ctflood (the guest's NIC stopped sending?)" "$(line ctflood); console: $(tail -n 5 "$SANBOX_HOME"/runs/*/console.log | tr '\n' '|')" ;;
esac
[ "$((ct1 - ct0))" -lt 4096 ] && ok "conntrack entries of one guest: $ct0 -> $ct1" ||
	bad "conntrack (a guest fills the host's table: nothing bounds a run's entries)" \
		"$ct0 -> $ct1 entries in the daemon's namespace from one flood of 20000 datagrams (nf_conntrack_max $(cat /proc/sys/net/netfilter/nf_conntrack_max))"
echo "note: the daemon's RSS $rss0 kB, $rss1 kB after the floods; $(awk "BEGIN {print ($cpu1 - $cpu0) / 100}") s of CPU meanwhile"
[ "$rss1" -le "$((rss0 + 102400))" ] && ok "the daemon's memory stays bounded" || bad "memory" "$rss0 -> $rss1 kB"
grep -q "dnsmany: 50 of 50" "$tmp/out.txt" || bad "dnsmany" "$(grep dnsmany "$tmp/out.txt")"
n=$(log_count "$EVIL_LOG" "e['kind'] == 'dns' and e['name'] == 'a.test' and e['type'] == 'A'")
[ "$n" -le 10 ] && ok "50 lookups of a granted name: $n reached its DNS server" ||
	bad "DNS: every lookup of a granted name reaches its DNS server (no cache: a count and timing channel)" \
		"$n queries of a.test A for the guest's 50"

# --- the record ---
events_json "$A" >"$tmp/events.jsonl"
python3 - "$tmp/events.jsonl" >"$tmp/record.txt" <<'PY'
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
den = [e for e in evs if e['type'] == 'net.denied']
size = sum(len(json.dumps(e)) for e in den)
dns = [e for e in den if e['payload'].get('proto') == 'dns' and '\\001' in e['payload'].get('name', '')]
summ = [e for e in den if 'more destinations' in e['payload']['reason']]
big = max((e['payload']['count'] for e in dns), default=0)
print(len(den), size, len(dns), len(summ), big)
PY
read nden size ndns nsum big <"$tmp/record.txt"
echo "note: $nden net.denied events, $size bytes; $ndns for the flood's names (1500 distinct, each asked once)"
[ "$nsum" -gt 0 ] && ok "denials past 64 a report are summed into one event" ||
	bad "record (agg_flush folds the overflow into another denial)" "no 'more destinations than reported' event for 1500 distinct names"
[ "$big" -le 1 ] && ok "each flooded name counted once" ||
	bad "record" "a name asked once is recorded with count $big"

# --- the live deny ---
after() { # the lines of LABEL printed after the deny's mark
	printf '%s\n' "$out" | grep "^$1 " | tail -n +"$(($(printf '%s\n' "$mark" | grep -c "^$1 ") + 1))"
}
for l in hold-8081 hold-8080 uhold-9999; do
	b=$(printf '%s\n' "$mark" | grep "^$l " | grep -c ' ok$')
	n=$(after $l | grep -c ' ok$')
	[ "$b" -gt 0 ] || bad "deny: $l" "never worked before the deny"
	[ "$n" = 0 ] && ok "$l: the connection made before the deny stops ($b echoes before)" ||
		bad "net deny ($l: a connection made before it goes on)" "$n echoes after the deny, $b before"
done
t=$(printf '%s\n' "$out" | grep -c '^left .*hello from 198.51.100.10:8081')
tl=$(after left | grep -c 'hello')
[ "$tl" = 0 ] && ok "no new connection to a denied name's address" ||
	bad "net deny (a denied name's addresses stay in the run's set until their TTL)" \
		"$tl new connections to a.test:8081 after the deny ($t in all)"
n=$(printf '%s\n' "$out" | sed -n 's/^urecv [0-9]*: push //p' |
	awk -v t="$denied_at" '$1 > t + 3' | wc -l)
[ "$n" = 0 ] && ok "a denied UDP peer reaches the guest no more" ||
	bad "net deny (a UDP peer goes on sending to the guest: replies pass on any conntrack entry)" \
		"$n datagrams more than 3 s after the deny"

# --- a run after another in the same slot: the first's conntrack entries ---
# A2 talks UDP to its grant from port 40404 and ends; B2, in the same slot
# (same addresses, same first conntrack mark), has no such grant.
A2=$(sbx run --detach --accel tcg --name stale-a --timeout 120s --net acl \
	--allow udp/198.51.100.10:443 --input "$tmp/nethostile" -- \
	./nethostile usend 198.51.100.10 443 40404 stale-A 5) || bad "run A2" "not started"
wait_event "$A2" "e['type']=='run.stopped'" 120 || bad "run A2" "did not end"
B2=$(sbx run --detach --accel tcg --name stale-b --timeout 120s --net acl \
	--allow 198.51.100.10:8080 --input "$tmp/nethostile" -- /bin/sh -c \
	'./nethostile usend 198.51.100.10 443 40405 fresh-B 3; ./nethostile usend 198.51.100.10 443 40404 stale-B 3') ||
	bad "run B2" "not started"
wait_event "$B2" "e['type']=='run.stopped'" 120 || bad "run B2" "did not end"
addr_of() {
	events_json "$1" | python3 -c "
import json, sys
for l in sys.stdin:
    e = json.loads(l)
    if e['type'] == 'run.started': print(e['payload']['net']['addr4'])"
}
[ "$(addr_of "$A2")" = "$(addr_of "$B2")" ] || bad "slots" "A2 $(addr_of "$A2"), B2 $(addr_of "$B2")"
[ "$(netlab_log_count "e['kind'] == 'udp' and e['data'] == 'stale-A'")" -gt 0 ] ||
	bad "stale control" "A2's own grant did not work"
[ "$(netlab_log_count "e['kind'] == 'udp' and e['data'] == 'fresh-B'")" = 0 ] ||
	bad "stale control" "B2 reached 198.51.100.10:443 without a grant"
n=$(netlab_log_count "e['kind'] == 'udp' and e['data'] == 'stale-B'")
[ "$n" = 0 ] && ok "a run gets nothing of the grants of the slot's previous run" ||
	bad "conntrack entries outlive their run (the next run in the slot has the same address and mark)" \
		"B2, without a grant, reached A2's udp/198.51.100.10:443 from A2's port: $n datagrams"

# --- nothing is left ---
sleep 1
netlab_in_d nft list tables 2>/dev/null | grep -q sanbox && bad "cleanup" "table inet sanbox left" ||
	ok "no nft table left"
netlab_in_d ip -o link | grep -q ': sb[0-9a-f]\{12\}' && bad "cleanup" "a tap left" || ok "no tap left"
ls "$SANBOX_HOME"/runs/*/net.json >/dev/null 2>&1 && bad "cleanup" "net.json left" ||
	ok "no network file left"

[ "$failures" = 0 ]
