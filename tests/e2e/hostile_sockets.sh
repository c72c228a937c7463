#!/bin/sh
# Hostile peers on both listeners (lib/sp_hostile.py speaks the wire): no
# bytes, flood or oversized request on api.sock, events.sock or the TLS
# listener stops the daemon or the local socket, buffers stay bounded
# before authentication, and refused tokens are slowed, counted and logged.
. "$(dirname "$0")/lib/bootless.sh"
H="python3 $(dirname "$0")/lib/sp_hostile.py"
. "$(dirname "$0")/lib/proc.sh"
pass() { echo "PASS $test_name: $*"; }

certs=$SANBOX_HOME/certs
mkdir -p "$certs"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=127.0.0.1" \
	-keyout "$certs/server.key" -out "$certs/server.pem" >/dev/null 2>&1 || fail "openssl"
cat >"$SANBOX_HOME/sanboxd.json" <<'J'
{"local": {"handshake_timeout_s": 2, "request_timeout_s": 3, "idle_timeout_s": 4},
 "remote": {"handshake_timeout_s": 2, "unauth_timeout_s": 3, "max_conns_per_peer": 16}}
J
port=$((20000 + $$ % 20000))
url=tls+tcp://127.0.0.1:$port
"$BUILD/sanboxd" --listen "$url" --cert "$certs/server.pem" --key "$certs/server.key" \
	>"$SANBOX_HOME/d.log" 2>&1 &
dpid=$!
bg="$bg $dpid"
i=0
until "$SB" daemon status >/dev/null 2>&1; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "daemon did not start: $(cat "$SANBOX_HOME/d.log")"
	sleep 0.1
done
token=$("$SB" admin token create) || fail "token create"
answers() { timeout 5 "$SB" daemon status >/dev/null 2>&1; }
# running_throughout PID WHAT: while PID lives, `daemon status` says running
running_throughout() {
	rt_n=0
	while kill -0 "$1" 2>/dev/null; do
		timeout 5 "$SB" daemon status >"$tmp/rt" 2>&1
		grep -q '^sanboxd: running for' "$tmp/rt" || fail "$2: daemon status says: $(cat "$tmp/rt")"
		rt_n=$((rt_n + 1))
		sleep 0.2
	done
	[ $rt_n -ge 3 ] || fail "$2: ended before daemon status was asked 3 times"
}
rss_kb() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$dpid/status"; }
nfds() { ls "/proc/$dpid/fd" | wc -l; }

# -- garbage on api.sock and events.sock: every later request is answered
$H garbage "$SANBOX_HOME/api.sock" 100 >"$tmp/g1" || fail "garbage api.sock: $(cat "$tmp/g1")"
answers || fail "api.sock does not answer after garbage"
"$SB" ps >/dev/null || fail "ps after garbage"
$H garbage "$SANBOX_HOME/events.sock" 100 >/dev/null && $H sub_garbage "$SANBOX_HOME/events.sock" 20 >/dev/null ||
	fail "garbage events.sock"
runs_hang
R=$("$SB" run --detach --name live -- true) || fail "run"
last=$("$SB" events --all --json | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["offset"])')
"$SB" attach "$R" --from $((last + 1)) --json >"$tmp/att" 2>"$tmp/att.err" &
apid=$!
bg="$bg $apid"
sleep 0.5
"$SB" admin append "$R" operator.note '{"text":"after the garbage"}' >/dev/null || fail "append"
i=0
until grep -q 'after the garbage' "$tmp/att"; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "the live feed is gone after garbage on events.sock: $(cat "$tmp/att.err")"
	sleep 0.05
done
kill -INT "$apid"
pass "garbage on both local sockets: the daemon answers, the live feed delivers"
proc_alive "$dpid" || fail "daemon died"

# -- connections that never finish their header are closed after the deadline
$H stall "$SANBOX_HOME/api.sock" 50 5 >"$tmp/st" &
spid=$!
sleep 0.3
answers || fail "api.sock does not answer while 50 connections stall"
wait "$spid"
grep -q 'stall: 50 of 50 closed' "$tmp/st" || fail "stalled connections: $(cat "$tmp/st")"
pass "stalled handshakes closed, the socket answered meanwhile"

# -- 1100 connections past the header that never send a request, above
# local.max_conns (1024): each new client still gets in (the one idle
# longest is closed for it), and all are closed at the idle deadline
$H idle_flood "$SANBOX_HOME/api.sock" 1100 7 >"$tmp/if" &
fpid=$!
bg="$bg $fpid"
running_throughout "$fpid" "idle flood past local.max_conns"
wait "$fpid"
grep -q '^idle_flood: 1100 connected, 0 refused, 1100 closed' "$tmp/if" || fail "idle flood: $(cat "$tmp/if")"
pass "idle flood past local.max_conns: daemon status answered throughout ($(cat "$tmp/if"))"

# -- requests that declare 60 MiB each (9 of them: above the 512 MiB of
# local.max_buffered_mib) and trickle their bodies: only the bytes that
# came are held, and each is closed at local.request_timeout_s
rss0=$(rss_kb)
$H trickle "$SANBOX_HOME/api.sock" 9 60 8 >"$tmp/tr" &
fpid=$!
bg="$bg $fpid"
running_throughout "$fpid" "declared large, body trickled"
wait "$fpid"
rss1=$(rss_kb)
grep -q '^trickle: 9 of 9 requests of 60 MiB closed' "$tmp/tr" || fail "trickled requests: $(cat "$tmp/tr")"
[ $((rss1 - rss0)) -lt 65536 ] || fail "the daemon grew from ${rss0} to ${rss1} KiB on trickled requests"
pass "declared large, body trickled: daemon status answered throughout ($(cat "$tmp/tr"))"

# -- 2000 plain TCP connections on the TLS port: capped, local socket fine.
# The flood ran: it made more connections than the cap on descriptors, and
# the daemon saw more than that many (accepted or refused at once; a
# connection the kernel completed while the daemon's queue was full may
# be closed by the flood before the daemon sees it).
seen() {
	"$SB" daemon status --json |
		python3 -c 'import json,sys; r = json.load(sys.stdin)["remote"]; print(r["accepted"] + r["refused_conns"])'
}
s0=$(seen) || fail "daemon status --json has no remote counters"
$H tcp_flood "$port" 2000 3 >"$tmp/tf" &
fpid=$!
bg="$bg $fpid"
i=0
until grep -q '^tcp_flood: [0-9]* connected' "$tmp/tf"; do
	i=$((i + 1))
	[ $i -lt 1200 ] || fail "the TCP flood did not connect: $(cat "$tmp/tf")"
	sleep 0.05
done
n=$(nfds) # every connection made, all held
answers || fail "local socket does not answer during the TCP flood"
[ "$n" -lt 300 ] || fail "the daemon holds $n descriptors during the flood"
wait "$fpid"
set -- $(sed -n 's/^tcp_flood: \([0-9]*\) connected, \([0-9]*\) refused at once$/\1 \2/p' "$tmp/tf")
[ $# = 2 ] && [ $(($1 + $2)) = 2000 ] && [ "$1" -ge 300 ] ||
	fail "the TCP flood made too few connections to test the cap: $(cat "$tmp/tf")"
i=0
until [ $(($(seen) - s0)) -ge 300 ]; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "the daemon saw $(($(seen) - s0)) of the flood's $1 connections"
	sleep 0.1
done
"$SB" --remote "$url" --token "$token" --ca "$certs/server.pem" ps >/dev/null ||
	fail "the remote listener does not serve after the flood"
pass "TCP flood: $(paste -sd" " "$tmp/tf"); $n descriptors at its height; remote serves after"

# -- requests declaring 63 MiB without a token: a few KiB each are read
sleep 2 # the peer's connection rate refills after the flood
rss0=$(rss_kb)
$H preauth "$port" 16 63 >"$tmp/pa" &
ppid=$!
max=$rss0
for i in $(seq 1 30); do
	r=$(rss_kb)
	[ "$r" -gt "$max" ] && max=$r
	kill -0 "$ppid" 2>/dev/null || break
	sleep 0.1
done
answers || fail "local socket does not answer during the unauthenticated upload"
wait "$ppid"
grep -q '^preauth: 16 connections' "$tmp/pa" || fail "unauthenticated uploads: $(cat "$tmp/pa")"
[ $((max - rss0)) -lt 65536 ] || fail "the daemon grew from ${rss0} to ${max} KiB on unauthenticated requests"
pass "16 unauthenticated 63 MiB requests: RSS ${rss0} -> at most ${max} KiB ($(cat "$tmp/pa"))"

# -- wrong tokens: slowed, the connection closed, counted and logged
denied() {
	"$SB" daemon status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["remote"]["denied"])'
}
d0=$(denied) || fail "daemon status --json has no remote.denied"
[ "$d0" -ge 16 ] || fail "remote.denied is $d0 after 16 requests refused before their token"
$H wrong_tokens "$port" 200 5 >"$tmp/wt" || fail "wrong tokens: $(cat "$tmp/wt")"
a=$(sed -n 's/^wrong_tokens: \([0-9]*\) answers.*/\1/p' "$tmp/wt")
[ -n "$a" ] && [ "$a" -ge 1 ] && [ "$a" -le 8 ] || fail "wrong tokens answered too fast: $(cat "$tmp/wt")"
grep -q 'closed True' "$tmp/wt" || fail "a connection sending wrong tokens stays open: $(cat "$tmp/wt")"
grep -q 'requests refused (no valid token)' "$SANBOX_HOME/d.log" || fail "refusals not logged"
d1=$(denied) || fail "daemon status --json has no remote.denied"
# each answer was a refusal, and at most max_denied (8) were read
[ $((d1 - d0)) -ge "$a" ] && [ $((d1 - d0)) -le 8 ] ||
	fail "remote.denied went from $d0 to $d1 for $a refused requests"
"$SB" --remote "$url" --token "$token" --ca "$certs/server.pem" ps >/dev/null ||
	fail "a good token is refused after the wrong ones"
pass "wrong tokens: $(cat "$tmp/wt")"

proc_alive "$dpid" || fail "daemon died"
answers || fail "the daemon does not answer at the end"
echo "PASS $test_name"
