# lib/netlab.sh - a small network for the network tests (sourced; root).
#
# netlab_up builds it; netlab_down takes it down, and is idempotent: call it
# from the test's EXIT trap (with lib/vm.sh: vm_extra_cleanup=netlab_down;
# without it: trap netlab_down EXIT; trap 'exit 130' INT TERM).
# Outside its own two namespaces it changes nothing but /etc/netns/$NETLAB_D/,
# the resolv.conf `ip netns exec` shows there; no veth end is ever in the
# host's namespace (each is made inside its namespace).
#
#   NETLAB_D  "sbd-PID": the daemon's host. eth0 192.0.2.2/24 fd00:db8:2::2/64,
#             default routes via NETLAB_R, forwarding on (for its guests),
#             /etc/resolv.conf: nameserver 198.51.100.53
#   NETLAB_R  "sbr-PID": the internet. eth0 192.0.2.1/24 fd00:db8:2::1/64 and,
#             on lo, the test hosts 198.51.100.10 + 2001:db8:100::10 (host A),
#             198.51.100.11 + 2001:db8:100::11 (its neighbour), 198.51.100.53
#             (DNS); packets to other addresses die there unanswered.
#   the servers, one lib/netsrv.py (pid NETLAB_PID) in NETLAB_R:
#     DNS   198.51.100.53:53 UDP+TCP: a.test A 198.51.100.10 AAAA
#           2001:db8:100::10; b.test A 198.51.100.10 (a front shared with
#           a.test); n.test A 198.51.100.11; v6.test AAAA 2001:db8:100::10;
#           t.test TXT "netlab"; NXDOMAIN for the rest
#     TCP   banner "hello from ADDR:PORT\n" + echo: 198.51.100.10:8080 and
#           :8081, 198.51.100.11:8080, [2001:db8:100::10]:8080,
#           [2001:db8:100::11]:8080
#     UDP   echo: 198.51.100.10:9999 and :443 (QUIC attempts)
#     HTTP  198.51.100.10:80, body "host=HOST\n"
#     TLS   198.51.100.10:443, certificates for a.test and b.test
#           ($NETLAB_DIR/a.test.pem, b.test.pem, self-signed), then HTTP
#           with body "sni=NAME host=HOST\n"
#   NETLAB_LOG  the servers' log, one JSON object a line (see netsrv.py):
#     {"t": 1700000000.123, "kind": "dns", "server": "198.51.100.53:53",
#      "from": "192.0.2.2:43120", "proto": "udp", "name": "a.test",
#      "type": "A", "rcode": "NOERROR", "answers": ["198.51.100.10"]}
#   NETLAB_DIR  a temporary directory (log, certificates, netsrv.out),
#     removed by netlab_down
#
# How to try it by hand, as root from the repository's top:
#   make build/tests/netprobe
#   NETLAB_LIB=tests/e2e/lib . tests/e2e/lib/netlab.sh   # in sh or bash
#   netlab_up && np=$PWD/build/tests/netprobe
#   netlab_in_d $np tcp 198.51.100.10 8080 --send ping --expect ping
#   netlab_in_d $np tcp 2001:db8:100::11 8080
#   netlab_in_d $np udp 198.51.100.10 9999 --send ping --expect ping
#   netlab_in_d $np dns a.test; netlab_in_d $np dns a.test --type AAAA
#   netlab_in_d $np dns n.test --tcp; netlab_in_d $np dns x.test   # exits 2
#   netlab_in_d $np tls 198.51.100.10 443 --sni a.test
#   netlab_in_d $np http a.test 80; netlab_in_d $np quic 198.51.100.10 443
#   netlab_in_d $np icmp 198.51.100.10; netlab_in_d $np icmp 2001:db8:100::10
#   netlab_log_has 'e["kind"] == "dns" and e["name"] == "x.test"' && echo logged
#   cat "$NETLAB_LOG"; netlab_down
#   ip netns list; ls /etc/netns; ps -e | grep python   # nothing of it left
netlab_lib=$(cd "${NETLAB_LIB:-$(dirname "$0")/lib}" && pwd)
. "$netlab_lib/proc.sh"
NETLAB_D=
NETLAB_R=
NETLAB_PID=
NETLAB_DIR=
NETLAB_LOG=
netlab_made=     # the namespaces netlab_up made, for netlab_down
netlab_etc=      # what of /etc/netns netlab_up made: "", "dir", "netns/dir"

# netlab_in_d CMD...: runs CMD in the daemon's namespace
netlab_in_d() { ip netns exec "$NETLAB_D" "$@"; }

# netlab_in_r CMD...: runs CMD in the internet's namespace
netlab_in_r() { ip netns exec "$NETLAB_R" "$@"; }

# netlab_do CMD...: runs CMD; on failure says which on stderr
netlab_do() {
	"$@" 2>"$NETLAB_DIR/err" && return 0
	echo "netlab: $*: $(head -n 2 "$NETLAB_DIR/err")" >&2
	return 1
}

# The two namespaces, the veth between them, addresses and routes.
netlab_topology() {
	for netlab_ns in "$NETLAB_D" "$NETLAB_R"; do
		netlab_do ip netns add "$netlab_ns" || return 1
		netlab_made="$netlab_made $netlab_ns"
	done
	netlab_do ip link add eth0 netns "$NETLAB_D" type veth peer name eth0 netns "$NETLAB_R" ||
		return 1
	for netlab_ns in "$NETLAB_D" "$NETLAB_R"; do
		# the link-local address usable at once, so neighbour discovery is
		netlab_do ip netns exec "$netlab_ns" sysctl -qw net.ipv6.conf.eth0.accept_dad=0 &&
			netlab_do ip -n "$netlab_ns" link set lo up &&
			netlab_do ip -n "$netlab_ns" link set eth0 up || return 1
	done
	netlab_do ip netns exec "$NETLAB_D" sysctl -qw net.ipv4.ip_forward=1 \
		net.ipv6.conf.all.forwarding=1 &&
		netlab_do ip -n "$NETLAB_D" addr add 192.0.2.2/24 dev eth0 &&
		netlab_do ip -n "$NETLAB_D" addr add fd00:db8:2::2/64 dev eth0 nodad &&
		netlab_do ip -n "$NETLAB_D" route add default via 192.0.2.1 &&
		netlab_do ip -n "$NETLAB_D" -6 route add default via fd00:db8:2::1 &&
		netlab_do ip -n "$NETLAB_R" addr add 192.0.2.1/24 dev eth0 &&
		netlab_do ip -n "$NETLAB_R" addr add fd00:db8:2::1/64 dev eth0 nodad || return 1
	# no dummy interfaces on every kernel (not on this project's CI): the
	# hosts are on lo, each address alone (/32, /128)
	for netlab_a in 198.51.100.10/32 198.51.100.11/32 198.51.100.53/32 \
		2001:db8:100::10/128 2001:db8:100::11/128; do
		netlab_do ip -n "$NETLAB_R" addr add "$netlab_a" dev lo || return 1
	done
	netlab_etc=dir
	[ -d /etc/netns ] || netlab_etc=netns/dir
	netlab_do mkdir -p "/etc/netns/$NETLAB_D" &&
		echo "nameserver 198.51.100.53" >"/etc/netns/$NETLAB_D/resolv.conf"
}

# Starts the servers and waits (10 s at most) until every one listens.
netlab_servers() {
	ip netns exec "$NETLAB_R" python3 "$netlab_lib/netsrv.py" --log "$NETLAB_LOG" \
		--cert-dir "$NETLAB_DIR" \
		--dns 198.51.100.53:53 \
		--record a.test=A:198.51.100.10 --record a.test=AAAA:2001:db8:100::10 \
		--record b.test=A:198.51.100.10 --record n.test=A:198.51.100.11 \
		--record v6.test=AAAA:2001:db8:100::10 --record t.test=TXT:netlab \
		--tcp 198.51.100.10:8080 --tcp 198.51.100.10:8081 --tcp 198.51.100.11:8080 \
		--tcp '[2001:db8:100::10]:8080' --tcp '[2001:db8:100::11]:8080' \
		--udp 198.51.100.10:9999 --udp 198.51.100.10:443 \
		--http 198.51.100.10:80 \
		--tls 198.51.100.10:443 --tls-name a.test --tls-name b.test \
		>"$NETLAB_DIR/netsrv.out" 2>&1 &
	NETLAB_PID=$!
	netlab_i=0
	until grep -q '"kind": "ready"' "$NETLAB_LOG" 2>/dev/null; do
		netlab_i=$((netlab_i + 1))
		if ! proc_alive "$NETLAB_PID" || [ $netlab_i -gt 100 ]; then
			echo "netlab: the servers did not start: $(tail -n 3 "$NETLAB_DIR/netsrv.out")" >&2
			return 1
		fi
		sleep 0.1
	done
}

# netlab_up: builds the network and starts the servers; 1 (with the
# reason on stderr, and nothing of it left) when something failed.
netlab_up() {
	NETLAB_D=sbd-$$
	NETLAB_R=sbr-$$
	NETLAB_DIR=$(mktemp -d /tmp/netlab.XXXXXX) || return 1
	NETLAB_LOG=$NETLAB_DIR/servers.jsonl
	if ! netlab_topology || ! netlab_servers; then
		netlab_down
		return 1
	fi
}

# netlab_down: stops the servers, then every process left in the two
# namespaces (a daemon, its QEMUs), by pid, and deletes the namespaces
# (their veth and taps go with them) and the files netlab_up made.
netlab_down() {
	if [ -n "$NETLAB_PID" ]; then
		kill "$NETLAB_PID" 2>/dev/null
		proc_wait_gone "$NETLAB_PID" 30 || kill -9 "$NETLAB_PID" 2>/dev/null
		NETLAB_PID=
	fi
	for netlab_ns in $netlab_made; do
		for netlab_p in $(ip netns pids "$netlab_ns" 2>/dev/null); do
			kill "$netlab_p" 2>/dev/null
		done
		for netlab_p in $(ip netns pids "$netlab_ns" 2>/dev/null); do
			proc_wait_gone "$netlab_p" 30 || kill -9 "$netlab_p" 2>/dev/null
		done
		ip netns del "$netlab_ns"
	done
	netlab_made=
	[ -z "$netlab_etc" ] || rm -rf "/etc/netns/$NETLAB_D"
	[ "$netlab_etc" != netns/dir ] || rmdir /etc/netns 2>/dev/null
	netlab_etc=
	[ -z "$NETLAB_DIR" ] || rm -rf "$NETLAB_DIR"
	NETLAB_DIR=
	return 0
}

# netlab_log_count PYEXPR: prints how many log lines e satisfy the
# expression (one raising KeyError, IndexError or TypeError is false)
netlab_log_count() {
	python3 -c "
import json, sys
def match(e):
    try:
        return bool($1)
    except (KeyError, IndexError, TypeError):
        return False
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(sum(1 for e in evs if match(e)))" "$NETLAB_LOG"
}

# netlab_log_has PYEXPR: true if some log line e satisfies the expression,
# e.g. 'e["kind"] == "dns" and e["name"] == "a.test"'
netlab_log_has() {
	[ "$(netlab_log_count "$1")" -gt 0 ] 2>/dev/null
}

# netlab_wait_log PYEXPR [SECONDS]: waits (default 10 s) for such a line
netlab_wait_log() {
	netlab_i=0
	until netlab_log_has "$1"; do
		netlab_i=$((netlab_i + 1))
		[ $netlab_i -lt $((${2:-10} * 10)) ] || return 1
		sleep 0.1
	done
}
