#!/bin/sh
# bench_snapshot.sh - snapshot and fork figures (make bench BENCH=snapshot).
# Prints only lines "bench NAME VALUE UNIT" (diagnostics go to stderr):
#   snapshot.disk_pause_256m     ms paused_ms of `sanbox snapshot` of a booted,
#                                idle 256 MiB guest (median of 5)
#   snapshot.memory_pause_256m   ms paused_ms of `sanbox snapshot --memory`,
#   snapshot.memory_pause_1g        256 MiB and 1 GiB guests (median of 3)
#   snapshot.memory_bytes_256m   MiB bytes of the 256 MiB guest's memory
#                                snapshot (layer and memory file; median)
#   snapshot.memory_resume_256m  ms from `sanbox resume RUN --snapshot sN` of a
#                                memory snapshot of a 256 MiB guest (printing
#                                every 20 ms) to its first output recorded
#                                after run.resumed (median of 7), and
#                                snapshot.memory_resume_vs_incoming its ratio to
#                                QEMU alone: the same command line (-incoming of
#                                the same file), run by the bench as its own
#                                monitor (cont once loaded) and channel (which
#                                sends RESTORED, as the daemon does), from
#                                spawn to the guest's first EVENT frame (median
#                                of 7, each right after a resume: QEMU's load
#                                alone varies by 2-3x from run to run here;
#                                each side starts 1 s after the QEMU before
#                                it ended)
#   snapshot.fork_64m            ms wall time of `sanbox fork RUN --detach` of a
#   snapshot.fork_4g                run that ended (its end snapshot), 64 MiB and
#                                4 GiB disks (median of 5; each fork is
#                                stopped before the next)
#   snapshot.fork_4g_vs_64m      ratio of the two (constant time: ~1)
#   snapshot.qcow2_layer_create  ms of `qemu-img create -f qcow2 -b LAYER` over
#                                the 4 GiB run's frozen end layer (median of 5):
#                                the primitive a fork is made of
#   snapshot.fork_8_at_once      ms wall time of `sanbox fork RUN --detach -n 8`
#   snapshot.fork_8_to_harness   s from that fork to the last of the 8 forks'
#                                harness.input.ready
#   snapshot.cold_run_to_harness s from one `sanbox run` (256 MiB, daemon warm)
#                                to its harness.input.ready, the baseline
#   snapshot.warm_to_harness     s from `sanbox run` to harness.input.ready of a
#                                run that restores the template's warm image
#                                (median of 3), and its ratio to the cold run
#                                (snapshot.warm_vs_cold_to_harness)
#   snapshot.warm_image_state    KiB the warm image's device state (KEY.mem;
#                                its RAM is the file KEY.ram beside it)
#   snapshot.pss_cold_idle,      MiB proportional set size of an idle cold-booted
#   snapshot.pss_warm_idle       and warm-started sandbox's QEMU, and their ratio
#                                (snapshot.pss_warm_vs_cold)
#   snapshot.warm_128m_at_once   count of idle warm-started 128 MiB sandboxes
#                                running at once (started one after another,
#                                up to $BENCH_WARM_MAX, default 24, each
#                                reaching its harness); snapshot.warm_128m_pss
#                                MiB the PSS of one of them then, and
#                                snapshot.warm_128m_fit the count this host's
#                                available memory holds at that PSS
# The 64 MiB and 4 GiB templates are built here (the shell template with
# another disk =) into a store of the bench's own, with shell linked in.
# Every guest is TCG and boots (SANBOX_WARM_START=0) but in the warm-start
# part, which restarts the daemon with warm starts on. A
# failing memory snapshot is reported on stderr and its lines are left out;
# the other figures are still printed.
set -u
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$(pwd)/$BUILD ;; esac
repo=$(cd "$(dirname "$0")/../.." && pwd)
[ -f "$repo/tools/mkimage.sh" ] || repo=$(pwd)
SB=$BUILD/sanbox
export SANBOX_TEMPLATES=$BUILD/templates
export SANBOX_HOME=$(mktemp -d /tmp/sbbench.XXXXXX)
# every run boots: the cold run is the baseline, forks boot anyway, and no
# warm image is built beside the runs measured
export SANBOX_WARM_START=0
tmp=$SANBOX_HOME/bench
mkdir -p "$tmp"

cleanup() {
	rc=$?
	# the home goes: a failure's traces go to stderr first
	[ "$rc" = 0 ] || tail -n 20 "$SANBOX_HOME/sanboxd.log" >&2 2>/dev/null
	for p in "$SANBOX_HOME"/runs/*/qemu.pid; do
		[ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null
	done
	if [ -f "$SANBOX_HOME/sanboxd.pid" ]; then
		kill "$(cat "$SANBOX_HOME/sanboxd.pid")" 2>/dev/null
		sleep 0.3
		kill -9 "$(cat "$SANBOX_HOME/sanboxd.pid")" 2>/dev/null
	fi
	rm -rf "$SANBOX_HOME"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
die() { echo "bench_snapshot: $*" >&2; exit 1; }
note() { echo "bench_snapshot: $*" >&2; }
now() { date +%s%N; }
# ms NS: nanoseconds as milliseconds, one decimal
ms() { awk -v n="$1" 'BEGIN { printf "%.1f", n / 1e6 }'; }
# median VALUE...
median() {
	printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 }
		END { if (NR % 2) print a[(NR + 1) / 2]; else printf "%.3f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
# f2 NUMBER: with two decimals
f2() { awk -v n="$1" 'BEGIN { printf "%.2f", n }'; }
# json EXPR: evaluates EXPR on the JSON document j read from stdin
json() { python3 -c "import json,sys; j=json.load(sys.stdin); print($1)"; }

REPO=$repo
. "$repo/tests/e2e/lib/template.sh"
template_fresh shell || die "$template_error"

# ---- the bench's template store: shell, d64m and d4g (disk = 64M, 4G), m128 ----
store=$SANBOX_HOME/tpl
mkdir -p "$store"
ln -s "$SANBOX_TEMPLATES/shell" "$store/shell"
for t in d64m:64M:256M d4g:4G:256M m128:512M:128M; do
	name=${t%%:*}
	rest=${t#*:}
	mkdir -p "$tmp/$name-src"
	sed "s/^name = .*/name = $name/; s/^disk = .*/disk = ${rest%%:*}/; s/^memory = .*/memory = ${rest#*:}/" \
		"$repo/templates/shell/template.conf" >"$tmp/$name-src/template.conf"
	BUILD=$BUILD sh "$repo/tools/mkimage.sh" "$tmp/$name-src" "$store/$name" \
		>"$tmp/mkimage-$name.log" 2>&1 ||
		die "template $name: $(tail -n 1 "$tmp/mkimage-$name.log")"
done
export SANBOX_TEMPLATES=$store

# status RUN: the run's status (created, running, exited, stopped, ...)
status() { "$SB" inspect "$1" --json 2>/dev/null | json 'j["run"]["status"]'; }
# ready_ts RUN: ts (ns) of the run's harness.input.ready, or nothing yet
ready_ts() {
	"$SB" events "$1" --type harness.input.ready --json 2>/dev/null | python3 -c 'import json,sys
for l in sys.stdin: print(json.loads(l)["ts"]); break'
}
# wait_ready RUN: waits (3 min at most) for harness.input.ready; prints its ts
wait_ready() {
	for i in $(seq 1 900); do
		t=$(ready_ts "$1")
		[ -n "$t" ] && { echo "$t"; return 0; }
		case $(status "$1") in created | running | "") ;; *) break ;; esac
		sleep 0.2
	done
	note "run $1 did not reach the harness (status $(status "$1")): $(tail -n 3 "$SANBOX_HOME/runs/$1/console.log" 2>/dev/null)"
	return 1
}
# wait_ended RUN...: waits (1 min at most each) until the runs are no longer live
wait_ended() {
	for r in "$@"; do
		for i in $(seq 1 300); do
			case $(status "$r") in created | running) sleep 0.2 ;; *) break ;; esac
		done
	done
}
# start_idle MEMORY: a detached idle run; prints its id
start_idle() {
	"$SB" run --detach --accel tcg --memory "$1" --timeout 600s -- sleep 600 2>"$tmp/err" ||
		die "run --memory $1: $(cat "$tmp/err")"
}
# saved RUN ID FIELD: FIELD of the payload of the run's snapshot.saved for ID
saved() {
	"$SB" events "$1" --type snapshot.saved --json | python3 -c 'import json,sys
for l in sys.stdin:
	p = json.loads(l)["payload"]
	if p["snapshot"] == sys.argv[1]: print(p[sys.argv[2]]); break' "$2" "$3"
}
# take RUN [--memory]: takes a snapshot; prints its id (error on stderr)
take() {
	out=$("$SB" snapshot "$@" --json 2>"$tmp/err") && [ -n "$out" ] &&
		echo "$out" | json 'j["snapshot"]' && return 0
	note "sanbox snapshot $*: failed: $(cat "$tmp/err") $out"
	return 1
}
# mem_pauses RUN: paused_ms of 3 memory snapshots (and bytes into $tmp/bytes);
# fails at the first that fails
mem_pauses() {
	: >"$tmp/bytes"
	p=""
	for i in 1 2 3; do
		id=$(take "$1" --memory) || return 1
		p="$p $(saved "$1" "$id" paused_ms)"
		saved "$1" "$id" bytes >>"$tmp/bytes"
		sleep 0.5
	done
	note "memory snapshot paused_ms ($1):$p"
	echo "$p"
}
# mem_failed RUN SIZE: what the daemon and QEMU said, on stderr
mem_failed() {
	note "memory snapshots of the $2 guest (run $1) failed; sanboxd.log and runs/$1/qemu.log end:"
	tail -n 10 "$SANBOX_HOME/sanboxd.log" "$SANBOX_HOME/runs/$1/qemu.log" >&2 2>/dev/null
}

"$SB" daemon start >/dev/null 2>&1 || die "daemon start: $("$SB" daemon start 2>&1)"

# ---- memory snapshots of a 1 GiB guest (its boot also warms QEMU up) ----
big=$(start_idle 1G)
wait_ready "$big" >/dev/null || die "the 1 GiB guest did not boot"
sleep 1
mem1g=""
p=$(mem_pauses "$big") && mem1g=$(median $p) ||
	mem_failed "$big" 1G
"$SB" stop "$big" >/dev/null 2>&1
wait_ended "$big"

# ---- one cold run to the harness; disk and memory snapshots of it ----
t0=$(now)
a=$(start_idle 256M)
t1=$(wait_ready "$a") || die "the 256 MiB guest did not boot"
cold_ns=$((t1 - t0))
sleep 1
p=""
for i in 1 2 3 4 5; do
	id=$(take "$a") || die "disk snapshot failed"
	[ "$i" = 1 ] && first=$id
	p="$p $(saved "$a" "$id" paused_ms)"
	sleep 0.3
done
note "disk snapshot paused_ms:$p"
disk=$(median $p)
mem256=""
p=$(mem_pauses "$a") && mem256=$(median $p) &&
	mem256_mib=$(awk -v b="$(median $(cat "$tmp/bytes"))" 'BEGIN { printf "%.1f", b / 1048576 }') ||
	mem_failed "$a" 256M
"$SB" stop "$a" >/dev/null 2>&1
wait_ended "$a"

echo "bench snapshot.disk_pause_256m $(f2 "$disk") ms"
if [ -n "$mem256" ]; then
	echo "bench snapshot.memory_pause_256m $(f2 "$mem256") ms"
	echo "bench snapshot.memory_bytes_256m $mem256_mib MiB"
fi
[ -n "$mem1g" ] && echo "bench snapshot.memory_pause_1g $(f2 "$mem1g") ms"

# ---- resume from a memory snapshot, against QEMU -incoming alone ----
ticker=$("$SB" run --detach --accel tcg --memory 256M --timeout 900s -- /bin/sh -c \
	'while :; do echo t; sleep 0.02; done' 2>"$tmp/err") || die "ticker run: $(cat "$tmp/err")"
wait_ready "$ticker" >/dev/null || die "the ticker did not boot"
sleep 1
if tid=$(take "$ticker" --memory); then
	p="" q=""
	for i in 1 2 3 4 5 6 7; do
		"$SB" stop "$ticker" >/dev/null 2>&1
		wait_ended "$ticker"
		# each timed start 1 s after the QEMU before it ended: one started
		# at once reuses the memory that one just freed, and clears its
		# pages faster (on this host a QEMU -incoming right after another
		# took 300 ms, after a pause 550 ms), an edge the side that came
		# sooner would get
		sleep 1
		t0=$(now)
		"$SB" resume "$ticker" --snapshot "$tid" --detach >/dev/null 2>"$tmp/err" ||
			die "resume from memory: $(cat "$tmp/err")"
		# QEMU's command line, for the same restore without Sanbox
		qpid=$(cat "$SANBOX_HOME/runs/$ticker/qemu.pid")
		tr '\0' '\n' <"/proc/$qpid/cmdline" >"$tmp/qemu.argv"
		# the first output's time is in the record: looked for after the
		# resume, so that no CLI or python of the bench competes with it
		# for the CPU (polling every 50 ms did: 250 ms more a resume)
		sleep 2
		t1=""
		for k in $(seq 1 120); do
			t1=$("$SB" events "$ticker" --json 2>/dev/null | python3 -c '
import json, sys
evs = [json.loads(l) for l in sys.stdin if l.strip()]
res = [e["offset"] for e in evs if e["type"] == "run.resumed"]
outs = [e["ts"] for e in evs if res and e["type"] == "agent.output" and e["offset"] > res[-1]]
print(outs[0] if outs else "")')
			[ -n "$t1" ] && break
			sleep 0.5
		done
		[ -n "$t1" ] || die "the resumed ticker printed nothing"
		p="$p $((t1 - t0))"
		"$SB" stop "$ticker" >/dev/null 2>&1
		wait_ended "$ticker"
		sleep 1
		q="$q $(python3 - "$tmp/qemu.argv" "$tmp" <<'PY'
import json, os, socket, subprocess, sys, time
argv = open(sys.argv[1]).read().split("\n")[:-1]
d = sys.argv[2]
chan, qmp = d + "/plain-chan.sock", d + "/plain-qmp.sock"
def swap(a):  # the chardevs connect to the bench's sockets, not the daemon's
    for name, path in (("chan0", chan), ("qmp0", qmp)):
        if a.startswith("socket,id=%s," % name):
            parts = [x for x in a.split(",") if not x.startswith("path=")]
            return ",".join(parts[:2] + ["path=" + path] + parts[2:])
    return a
argv = [swap(a) for a in argv]
if "-pidfile" in argv:
    i = argv.index("-pidfile"); del argv[i:i + 2]
if "-daemonize" in argv:
    argv.remove("-daemonize")
ls = []
for path in (chan, qmp):
    if os.path.exists(path): os.unlink(path)
    s = socket.socket(socket.AF_UNIX); s.bind(path); s.listen(1); s.settimeout(60); ls.append(s)
t0 = time.monotonic()
q = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    m, _ = ls[1].accept(); f = m.makefile("rw")
    def cmd(c):
        f.write(json.dumps({"execute": c}) + "\n"); f.flush()
        while True:
            r = json.loads(f.readline())
            if "return" in r or "error" in r: return r.get("return")
    json.loads(f.readline()); cmd("qmp_capabilities")
    while (cmd("query-migrate") or {}).get("status") != "completed": time.sleep(0.005)
    cmd("cont")
    c, _ = ls[0].accept(); c.settimeout(60); buf = b""
    # RESTORED {time_ns, seed, machine_id}, as the daemon sends it: the
    # guest's harness is frozen until its agent has handled it
    body = (b"\x83\xa7time_ns\xcf" + time.time_ns().to_bytes(8, "big") +
            b"\xa4seed\xc4\x20" + os.urandom(32) +
            b"\xaamachine_id\xd9\x20" + os.urandom(16).hex().encode())
    msg = b"\x93\x0e\x00" + body
    c.sendall(len(msg).to_bytes(4, "big") + msg)
    while True:  # frames: 4-byte length, then [kind, stream, body]; 3 = EVENT
        buf += c.recv(65536)
        while len(buf) >= 6:
            n = int.from_bytes(buf[:4], "big")
            if len(buf) < 4 + n: break
            if buf[5] == 3: raise StopIteration
            buf = buf[4 + n:]
except StopIteration:
    print(int((time.monotonic() - t0) * 1e9))
finally:
    q.kill(); q.wait()
PY
)"
	done
	note "memory resume ns:$p; QEMU -incoming alone ns:$q"
	mr=$(median $p)
	mq=$(median $q)
	echo "bench snapshot.memory_resume_256m $(ms "$mr") ms"
	[ -n "$mq" ] && echo "bench snapshot.memory_resume_vs_incoming $(awk -v a="$mr" -v b="$mq" 'BEGIN { printf "%.2f", a / b }') x"
else
	mem_failed "$ticker" 256M
fi
"$SB" stop "$ticker" >/dev/null 2>&1
wait_ended "$ticker"

# ---- 8 forks at once of the idle guest's first disk snapshot ----
t0=$(now)
ids=$("$SB" fork "$a" --snapshot "$first" --detach -n 8 2>"$tmp/err") || die "fork -n 8: $(cat "$tmp/err")"
t1=$(now)
[ "$(echo "$ids" | wc -w)" = 8 ] || die "fork -n 8 printed: $ids"
last=0
for r in $ids; do
	t=$(wait_ready "$r") || die "a fork did not reach the harness"
	[ "$t" -gt "$last" ] && last=$t
done
"$SB" stop $ids >/dev/null 2>&1
echo "bench snapshot.fork_8_at_once $(ms $((t1 - t0))) ms"
echo "bench snapshot.fork_8_to_harness $(awk -v n=$((last - t0)) 'BEGIN { printf "%.3f", n / 1e9 }') s"
echo "bench snapshot.cold_run_to_harness $(awk -v n=$cold_ns 'BEGIN { printf "%.3f", n / 1e9 }') s"
wait_ended $ids

# ---- forks of runs that ended, 64 MiB and 4 GiB disks ----
for t in d64m d4g; do
	r=$("$SB" run --detach --accel tcg --template "$t" --snapshots stop --timeout 600s -- true 2>"$tmp/err") ||
		die "run --template $t: $(cat "$tmp/err")"
	eval "run_$t=$r"
done
for t in d64m d4g; do
	eval "r=\$run_$t"
	layer=""
	for i in $(seq 1 900); do
		layer=$("$SB" snapshots "$r" --json 2>/dev/null | json '(j["snapshots"] or [{}])[-1].get("layer", "")')
		[ -n "$layer" ] && break
		sleep 0.2
	done
	[ -n "$layer" ] || die "run $r ($t) has no end snapshot (status $(status "$r"))"
	eval "layer_$t=\$SANBOX_HOME/\$layer"
done
# taken in turns, 64M then 4G, so that both see the same load
p_d64m="" p_d4g=""
for i in 1 2 3 4 5; do
	for t in d64m d4g; do
		eval "r=\$run_$t"
		t0=$(now)
		f=$("$SB" fork "$r" --detach 2>"$tmp/err") || die "fork $r ($t): $(cat "$tmp/err")"
		t1=$(now)
		"$SB" stop "$f" >/dev/null 2>&1
		eval "p_$t=\"\$p_$t $((t1 - t0))\""
		wait_ended "$f"
	done
done
note "fork ns, 64M:$p_d64m; 4G:$p_d4g"
fork_d64m=$(median $p_d64m)
fork_d4g=$(median $p_d4g)
echo "bench snapshot.fork_64m $(ms "$fork_d64m") ms"
echo "bench snapshot.fork_4g $(ms "$fork_d4g") ms"
echo "bench snapshot.fork_4g_vs_64m $(awk -v a="$fork_d4g" -v b="$fork_d64m" 'BEGIN { printf "%.2f", a / b }') x"

# ---- the primitive: a qcow2 layer over the same frozen (4 GiB) layer ----
p=""
for i in 1 2 3 4 5; do
	t0=$(now)
	qemu-img create -q -f qcow2 -b "$layer_d4g" -F qcow2 "$tmp/new$i.qcow2" || die "qemu-img create"
	t1=$(now)
	p="$p $((t1 - t0))"
done
echo "bench snapshot.qcow2_layer_create $(ms "$(median $p)") ms"

# ---- warm starts: a daemon with them on ----
# pss_kib RUN: the proportional set size of the run's QEMU, in KiB
pss_kib() { awk '/^Pss:/ { print $2 }' "/proc/$(cat "$SANBOX_HOME/runs/$1/qemu.pid")/smaps_rollup"; }
"$SB" daemon stop >/dev/null 2>&1
SANBOX_WARM_START=1 "$SB" daemon start >/dev/null || die "daemon start (warm starts on)"
c=$("$SB" run --detach --accel tcg --timeout 600s -- sleep 600) || die "first warm-daemon run"
wait_ready "$c" >/dev/null || die "the first run did not reach the harness"
for i in $(seq 1 600); do
	ls "$SANBOX_HOME"/cache/warm/*.mem >/dev/null 2>&1 && break
	sleep 0.2
done
ls "$SANBOX_HOME"/cache/warm/*.mem >/dev/null 2>&1 || die "no warm image was built"
sleep 3 # the cold guest settles before its memory is measured
pss_cold=$(pss_kib "$c")
p="" ws=""
for i in 1 2 3; do
	t0=$(now)
	w=$("$SB" run --detach --accel tcg --timeout 600s -- sleep 600) || die "warm run"
	t1=$(wait_ready "$w") || die "a warm run did not reach the harness"
	boot=$("$SB" events "$w" --type run.started --json | json 'j["payload"].get("boot")')
	[ "$boot" = warm ] || die "run $w booted $boot, not warm"
	p="$p $((t1 - t0))" # as cold_ns: from the CLI's call to the harness
	ws="$ws $w"
done
sleep 3
pss_warm=$(pss_kib "$(echo $ws | cut -d' ' -f1)")
note "warm to harness ns:$p; PSS cold $pss_cold KiB, warm $pss_warm KiB"
warm_ns=$(median $p)
echo "bench snapshot.warm_to_harness $(awk -v n="$warm_ns" 'BEGIN { printf "%.3f", n / 1e9 }') s"
echo "bench snapshot.warm_vs_cold_to_harness $(awk -v a="$warm_ns" -v b="$cold_ns" 'BEGIN { printf "%.3f", a / b }') x"
echo "bench snapshot.warm_image_state $(awk -v n="$(stat -c %s "$SANBOX_HOME"/cache/warm/*.mem)" 'BEGIN { printf "%.1f", n / 1024 }') KiB"
echo "bench snapshot.pss_cold_idle $(awk -v n="$pss_cold" 'BEGIN { printf "%.1f", n / 1024 }') MiB"
echo "bench snapshot.pss_warm_idle $(awk -v n="$pss_warm" 'BEGIN { printf "%.1f", n / 1024 }') MiB"
echo "bench snapshot.pss_warm_vs_cold $(awk -v a="$pss_warm" -v b="$pss_cold" 'BEGIN { printf "%.2f", a / b }') x"
"$SB" stop "$c" $ws >/dev/null 2>&1
wait_ended "$c" $ws

# ---- idle warm 128 MiB sandboxes at once ----
# the first m128 run boots and builds its warm image; then warm runs are
# started one after another while each reaches its harness in 60 s
c=$("$SB" run --detach -t m128 --accel tcg --timeout 3600s -- sleep 3600) || die "m128 run"
wait_ready "$c" >/dev/null || die "the first m128 run did not reach the harness"
for i in $(seq 1 600); do
	[ "$(ls "$SANBOX_HOME"/cache/warm/*.mem 2>/dev/null | wc -l)" -ge 2 ] && break
	sleep 0.2
done
"$SB" stop "$c" >/dev/null 2>&1
wait_ended "$c"
max=${BENCH_WARM_MAX:-24}
n=0 ms=""
while [ "$n" -lt "$max" ]; do
	w=$("$SB" run --detach -t m128 --accel tcg --timeout 3600s -- sleep 3600 2>"$tmp/err") ||
		{ note "warm run $((n + 1)): $(cat "$tmp/err")"; break; }
	ms="$ms $w"
	for i in $(seq 1 300); do [ -n "$(ready_ts "$w")" ] && break; sleep 0.2; done
	[ -n "$(ready_ts "$w")" ] || { note "warm run $((n + 1)) did not reach its harness in 60 s"; break; }
	n=$((n + 1))
done
sleep 3
pss=$(pss_kib "$(echo $ms | cut -d' ' -f1)")
avail=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
echo "bench snapshot.warm_128m_at_once $n count"
echo "bench snapshot.warm_128m_pss $(awk -v n="$pss" 'BEGIN { printf "%.1f", n / 1024 }') MiB"
echo "bench snapshot.warm_128m_fit $(awk -v a="$avail" -v p="$pss" -v n="$n" 'BEGIN { printf "%d", n + a / p }') count"
"$SB" stop $ms >/dev/null 2>&1
wait_ended $ms
exit 0
