#!/bin/sh
# bench_vm.sh - microVM figures (make bench BENCH=vm). Prints only lines
# "bench NAME VALUE UNIT":
#   vm.run_to_harness       s from `sanbox run` to harness.input.ready
#   vm.plain_to_harness     s for the same guest booted by a plain QEMU
#                           command line and a minimal host (tests/guest/driver)
#   vm.run_vs_plain         ratio of the two (target <= 1.15)
#   vm.idle_rss_per_sandbox MiB of memory (PSS) per idle 128 MiB sandbox with
#                           10 running: QEMU's plus a tenth of the daemon's
#   vm.concurrent_128m      how many of 20 128 MiB sandboxes ran at once
set -u
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$(pwd)/$BUILD ;; esac
repo=$(cd "$(dirname "$0")/../.." && pwd)
[ -f "$repo/tools/mkimage.sh" ] || repo=$(pwd)
SB=$BUILD/sanbox
export SANBOX_TEMPLATES=$BUILD/templates
export SANBOX_HOME=$(mktemp -d /tmp/sbbench.XXXXXX)
tmp=$SANBOX_HOME/plain
mkdir -p "$tmp"
qpid=""

cleanup() {
	[ -n "$qpid" ] && kill -9 "$qpid" 2>/dev/null
	for p in "$SANBOX_HOME"/runs/*/qemu.pid; do
		[ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null
	done
	[ -f "$SANBOX_HOME/sanboxd.pid" ] && kill "$(cat "$SANBOX_HOME/sanboxd.pid")" 2>/dev/null
	sleep 0.3
	rm -rf "$SANBOX_HOME"
}
trap cleanup EXIT INT TERM
die() { echo "bench_vm: $*" >&2; exit 1; }
now() { date +%s%N; }

REPO=$repo
. "$repo/tests/e2e/lib/template.sh"
template_fresh shell || die "$template_error"
img=$SANBOX_TEMPLATES/shell
cc -std=gnu11 -O2 -D_GNU_SOURCE -I"$repo" -o "$tmp/driver" "$repo/tests/guest/driver.c" \
	"$repo/vmm/chan.c" "$repo/engine/mpack.c" "$repo/engine/error.c" -lmsgpackc -lxxhash || die "driver build"

# ts of an event type of run, in ns
event_ts() {
	"$SB" events "$1" --type "$2" --json | python3 -c 'import json,sys
for l in sys.stdin: print(json.loads(l)["ts"]); break'
}

# --- sanbox run to harness start (daemon warm), best of 3 ---
"$SB" run --memory 256M -- true >/dev/null 2>&1 || die "warm-up run failed"
best=""
for i in 1 2 3; do
	t0=$(now)
	"$SB" run --memory 256M -- true >/dev/null 2>&1 || die "run failed"
	r=$("$SB" ps --json | python3 -c 'import json,sys; print(max(json.load(sys.stdin), key=lambda r: r["created_ns"])["run"])')
	t1=$(event_ts "$r" harness.input.ready)
	d=$(( (t1 - t0) / 1000000 ))
	[ -z "$best" ] || [ "$d" -lt "$best" ] && best=$d
done
run_ms=$best

# --- the same guest under a plain QEMU command line, best of 3 ---
khz=$(awk -F: '/^cpu MHz/ { printf "%d", $2 * 1000; exit }' /proc/cpuinfo)
best=""
for i in 1 2 3; do
	rm -f "$tmp/layer.qcow2" "$tmp/chan.sock"
	qemu-img create -q -f qcow2 -b "$img/rootfs.img" -F raw "$tmp/layer.qcow2"
	t0=$(now)
	"$tmp/driver" -s "$tmp/chan.sock" -T 60 -a /bin/true -- qemu-system-x86_64 \
		-M microvm,x-option-roms=off,rtc=on -accel tcg -cpu max -m 256 -smp 1 -nodefaults \
		-no-user-config -nographic -no-reboot -kernel "$img/vmlinux" -initrd "$img/initrd.img" \
		-append "console=ttyS0 quiet panic=-1 tsc_early_khz=$khz" -serial "file:$tmp/console.log" \
		-blockdev "driver=file,filename=$tmp/layer.qcow2,node-name=f0" \
		-blockdev driver=qcow2,file=f0,node-name=root -device virtio-blk-device,drive=root \
		-device virtio-serial-device -chardev "socket,id=chan,path=$tmp/chan.sock" \
		-device virtserialport,chardev=chan,name=sanbox.0 >"$tmp/out" 2>&1 &
	qpid=$!
	t1=""
	for j in $(seq 1 600); do
		if grep -q 'harness.input.ready' "$tmp/out" 2>/dev/null; then t1=$(now); break; fi
		sleep 0.01
	done
	wait "$qpid"
	qpid=""
	[ -n "$t1" ] || die "plain boot did not reach the harness"
	d=$(( (t1 - t0) / 1000000 ))
	[ -z "$best" ] || [ "$d" -lt "$best" ] && best=$d
done
plain_ms=$best
echo "bench vm.run_to_harness $(echo "scale=3; $run_ms/1000" | bc) s"
echo "bench vm.plain_to_harness $(echo "scale=3; $plain_ms/1000" | bc) s"
echo "bench vm.run_vs_plain $(echo "scale=2; $run_ms/$plain_ms" | bc) ratio"

# --- idle sandboxes: 10, then 20, of 128 MiB ---
start_idle() {
	for i in $(seq 1 "$1"); do
		"$SB" run --detach --memory 128M --timeout 20m -- sleep 1200 >>"$SANBOX_HOME/idle.ids" ||
			die "could not start an idle sandbox"
	done
}
# waits until every idle sandbox started its harness; prints how many did
wait_idle() {
	n=0
	for t in $(seq 1 240); do
		n=0
		for r in $(cat "$SANBOX_HOME/idle.ids"); do
			"$SB" events "$r" --type harness.input.ready --json | grep -q . && n=$((n + 1))
		done
		[ "$n" -ge "$1" ] && break
		sleep 1
	done
	echo "$n"
}
# proportional set size: pages shared by all VMs (the kernel file, QEMU's
# own code) count once, split between them
rss_kib() { awk '/^Pss:/ { print $2 }' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0; }

: >"$SANBOX_HOME/idle.ids"
start_idle 10
n=$(wait_idle 10)
[ "$n" = 10 ] || die "only $n of 10 idle sandboxes started"
sleep 3
total=0
for p in "$SANBOX_HOME"/runs/*/qemu.pid; do
	pid=$(cat "$p")
	[ -d "/proc/$pid" ] && total=$((total + $(rss_kib "$pid")))
done
daemon=$(rss_kib "$(cat "$SANBOX_HOME/sanboxd.pid")")
echo "bench vm.idle_rss_per_sandbox $(echo "scale=1; ($total + $daemon) / 10 / 1024" | bc) MiB"
start_idle 10
n=$(wait_idle 20)
echo "bench vm.concurrent_128m $n sandboxes"
exit 0
