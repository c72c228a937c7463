#!/bin/sh
# guest_boot.sh - boots the shell template in a TCG microVM and drives the
# guest agent over the virtio-serial channel with tests/guest/driver.c.
#
# Builds the template (with a dummy harness when $BUILD/sanbox-harness is
# absent) into a temp dir, twice (the bytes must be the same), checks the
# error without a harness binary, then boots it on qcow2 layers:
#   1 run: HELLO, harness.input.ready, agent.output "hello", file change of
#     d/f.txt with its xxh3, run.exited 3, DONE, QEMU exits; d/f.txt persists
#     in the qcow2 layer.
#   2 events + tunnel: a JSON line on $SANBOX_EVENTS -> EVENT_JSON, a line
#     over 64 KiB is dropped with a LOG, an input file and env arrive, busybox
#     wget through 127.0.0.1:4000 gets the driver's answer; workspace
#     changes: modified, created in a new tree, moved, deleted.
#   3 signal + output + bad frames: garbage frames before the SPEC and a
#     frame of length 0 after it are logged and skipped; 400 kB of output
#     all arrive, no faster than the rate limit allows; SIGNAL 15 (sent
#     after the framing loss) ends the harness: run.exited 143 / 15.
#   4 bad spec: empty argv -> LOG, DONE without run.exited, power off.
#   5 probe: sanbox.probe=1 prints sanbox-probe-ok and powers off.
# Prints the time from QEMU start to HELLO.
set -u
name=guest_boot
repo=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$repo/$BUILD ;; esac

tmp=$(mktemp -d /tmp/sanbox-guest-boot.XXXXXX)
pid=""
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
	echo "FAIL $name: $*"
	exit 1
}

for t in qemu-system-x86_64 qemu-img debugfs mkfs.ext4 cpio cc; do
	command -v $t >/dev/null || fail "$t not installed (make deps)"
done

# ---- build: agent, template, driver ----
if [ ! -x "$BUILD/sanbox-agent" ]; then
	make -s -C "$repo" BUILD="$BUILD" "$BUILD/sanbox-agent" >"$tmp/make.log" 2>&1 ||
		fail "cannot build sanbox-agent: $(tail -n 1 "$tmp/make.log")"
fi
hbuild=$BUILD
if [ ! -x "$BUILD/sanbox-harness" ]; then
	hbuild=$tmp/build
	mkdir -p "$hbuild"
	printf '#!/bin/sh\necho dummy harness\n' >"$hbuild/sanbox-harness"
	chmod +x "$hbuild/sanbox-harness"
fi
agent=$BUILD/sanbox-agent
BUILD=$hbuild SANBOX_AGENT=$agent sh "$repo/tools/mkimage.sh" \
	"$repo/templates/shell" "$tmp/img" >"$tmp/mkimage.log" 2>&1 ||
	fail "mkimage: $(tail -n 1 "$tmp/mkimage.log")"
# Same inputs, same bytes; a missing harness is a one-line error.
BUILD=$hbuild SANBOX_AGENT=$agent sh "$repo/tools/mkimage.sh" \
	"$repo/templates/shell" "$tmp/img2" >"$tmp/mkimage2.log" 2>&1 ||
	fail "mkimage (second build): $(tail -n 1 "$tmp/mkimage2.log")"
cmp -s "$tmp/img/template.json" "$tmp/img2/template.json" ||
	fail "mkimage is not reproducible: $(diff "$tmp/img/template.json" "$tmp/img2/template.json" | head -n 4)"
rm -rf "$tmp/img2"
mkdir -p "$tmp/nobuild"
if BUILD=$tmp/nobuild SANBOX_AGENT=$agent sh "$repo/tools/mkimage.sh" \
	"$repo/templates/shell" "$tmp/img3" >"$tmp/mkimage3.log" 2>&1; then
	fail "mkimage succeeded without the harness binary"
fi
[ "$(wc -l <"$tmp/mkimage3.log")" = 1 ] && grep -q 'sanbox-harness not found' "$tmp/mkimage3.log" ||
	fail "mkimage without the harness: unclear error: $(head -n 2 "$tmp/mkimage3.log")"
rm -rf "$tmp/img3"
cc -std=gnu11 -O1 -Wall -Wextra -Werror -Wno-unused-parameter -D_GNU_SOURCE -I"$repo" \
	-o "$tmp/driver" "$repo/tests/guest/driver.c" "$repo/vmm/chan.c" "$repo/engine/mpack.c" "$repo/engine/error.c" \
	-lmsgpackc -lxxhash 2>"$tmp/cc.log" || fail "driver: $(head -n 1 "$tmp/cc.log")"

# Under TCG the guest TSC runs at the host's rate; telling the kernel skips
# its PIT calibration, which fails on a loaded host and then hangs the boot.
khz=$(awk -F: '/^cpu MHz/ { printf "%d", $2 * 1000; exit }' /proc/cpuinfo)
cmdline="console=ttyS0 quiet panic=-1 pci=off${khz:+ tsc_early_khz=$khz}"

# $tmp/qemu.sh EXTRA-KERNEL-ARGS CHARDEV: the QEMU of every boot.
cat >"$tmp/qemu.sh" <<EOF
#!/bin/sh
exec qemu-system-x86_64 -M microvm,x-option-roms=off,rtc=on -accel tcg -m 256 -smp 1 \\
	-nodefaults -no-user-config -nographic -no-reboot \\
	-kernel $tmp/img/vmlinux -initrd $tmp/img/initrd.img \\
	-append "$cmdline \$1" -serial file:$tmp/console.log \\
	-blockdev driver=file,filename=$tmp/layer.qcow2,node-name=f0 \\
	-blockdev driver=qcow2,file=f0,node-name=root -device virtio-blk-device,drive=root \\
	-device virtio-serial-device -chardev "\$2" \\
	-device virtserialport,chardev=chan,name=sanbox.0
EOF

new_layer() {
	rm -f "$tmp/layer.qcow2" "$tmp/console.log"
	qemu-img create -q -f qcow2 -b "$tmp/img/rootfs.img" -F raw "$tmp/layer.qcow2" ||
		fail "qemu-img create"
}

# boot NAME DRIVER-ARGS...: runs one VM on a fresh layer; output in $tmp/NAME.out
boot() {
	b=$1
	shift
	new_layer
	"$tmp/driver" -s "$tmp/chan.sock" -T 60 "$@" -- \
		sh "$tmp/qemu.sh" "" "socket,id=chan,path=$tmp/chan.sock" >"$tmp/$b.out" 2>&1 &
	pid=$!
	wait "$pid"
	rc=$?
	pid=""
	[ $rc = 0 ] && return 0
	sed 's/^/  | /' "$tmp/$b.out" | head -n 40
	sed 's/^/  console| /' "$tmp/console.log" 2>/dev/null | tail -n 10
	fail "$b: driver failed (no DONE, or QEMU did not exit by itself)"
}

expect() { # expect NAME PATTERN WHAT
	grep -qF -- "$2" "$tmp/$1.out" && return 0
	sed 's/^/  | /' "$tmp/$1.out" | head -n 40
	fail "$1: $3"
}

# ---- 1: the run ----
boot run -a /bin/sh -a -c -a 'echo hello; mkdir -p d; echo x > d/f.txt; exit 3'
printf 'x\n' >"$tmp/f.txt"
xxh=$("$tmp/driver" --xxh3 "$tmp/f.txt")
expect run 'HELLO ms=' "no HELLO"
expect run 'EVENT harness.input.ready {"files"=>0, "bytes"=>0, "seed"=>"' "no harness.input.ready"
# the harness's seed (none in the SPEC: 32 fresh bytes) and its clock
grep -qE '^EVENT harness.input.ready .*"seed"=>"[0-9a-f]{64}", "clock_s"=>[0-9]+\}' "$tmp/run.out" ||
	fail "run: harness.input.ready without its seed and clock_s"
expect run '"stream"=>"stdout", "data"=>"hello' "no agent.output hello"
# the watcher may see the file made before the shell wrote it (created,
# size 0, then modified): either way d/f.txt is created, and a change of it
# has its two bytes, their xxh3 and its content
expect run '{"path"=>"/workspace/d/f.txt", "kind"=>"created", "size"=>' \
	"no agent.file.changed created for d/f.txt"
grep -qE "^EVENT agent.file.changed \\{\"path\"=>\"/workspace/d/f.txt\", \"kind\"=>\"(created|modified)\", \"size\"=>2, \"xxh3\"=>\"$xxh\", \"content\"=>" "$tmp/run.out" ||
	fail "run: no agent.file.changed for d/f.txt with xxh3 $xxh and its content"
expect run 'EVENT run.exited {"status"=>3, "signal"=>0}' "no run.exited status 3"
expect run 'DONE ms=' "no DONE"
expect run 'QEMU_EXIT code=0' "QEMU did not exit by itself"
hello_ms=$(sed -n 's/^HELLO ms=\([0-9]*\).*/\1/p' "$tmp/run.out")
done_ms=$(sed -n 's/^DONE ms=\([0-9]*\).*/\1/p' "$tmp/run.out")
qemu-img convert -O raw "$tmp/layer.qcow2" "$tmp/raw.img" || fail "qemu-img convert"
got=$(debugfs -R 'cat /workspace/d/f.txt' "$tmp/raw.img" 2>/dev/null)
[ "$got" = x ] || fail "run: d/f.txt not persisted in the layer (got '$got')"
rm -f "$tmp/raw.img"

# ---- 2: events, inputs, env, tunnel ----
script='echo "{\"type\":\"agent.turn.started\",\"payload\":{\"turn\":1}}" > $SANBOX_EVENTS
head -c 70000 /dev/zero | tr "\0" a > $SANBOX_EVENTS; echo >> $SANBOX_EVENTS
echo "{\"type\":\"agent.turn.completed\",\"payload\":{\"turn\":1}}" > $SANBOX_EVENTS
echo "in=$(cat in/a.txt) foo=$FOO base=$OPENAI_BASE_URL"
wget -qO- http://127.0.0.1:4000/x; echo "wget=$?"
echo more >> in/a.txt; mkdir -p a/b/c; sleep 1; echo deep > a/b/c/f; sleep 1; mv a/b/c/f a/g; sleep 1; rm a/g'
boot events -t 4000 -e FOO=bar -i 'in/a.txt=input-data' -a /bin/sh -a -c -a "$script"
expect events 'EVENT harness.input.ready {"files"=>1, "bytes"=>10, ' "inputs not counted"
expect events 'EVENT_JSON {"type":"agent.turn.started","payload":{"turn":1}}' "no EVENT_JSON"
expect events 'DROPPED_LINE {"too_long"=>65536, "head"=>' "long line not reported as dropped"
expect events 'EVENT_JSON {"type":"agent.turn.completed","payload":{"turn":1}}' \
	"no EVENT_JSON after the long line"
[ "$(grep -c '^EVENT_JSON' "$tmp/events.out")" = 2 ] || fail "events: the long line was forwarded"
expect events 'in=input-data foo=bar base=http://127.0.0.1:4000/v1' "input file or env missing"
expect events 'OPEN 1 {"port"=>4000}' "no tunnel OPEN"
expect events 'REQUEST 1 GET /x HTTP/1.1' "no tunnelled request"
expect events 'tunnel-ok GET /x HTTP/1.1' "tunnel answer not seen by wget"
expect events 'wget=0' "wget failed"
expect events 'CLOSE 1' "no CLOSE from the guest"
expect events '{"path"=>"/workspace/in/a.txt", "kind"=>"modified", "size"=>15' "no modified input"
expect events '{"path"=>"/workspace/a/b/c/f", "kind"=>"created", "size"=>5' "no created in a new tree"
expect events '{"path"=>"/workspace/a/b/c/f", "kind"=>"deleted"' "moved file not deleted"
expect events '{"path"=>"/workspace/a/g", "kind"=>"created", "size"=>5' "moved file not created"
expect events '{"path"=>"/workspace/a/g", "kind"=>"deleted"' "removed file not deleted"
expect events 'EVENT run.exited {"status"=>0, "signal"=>0}' "no run.exited 0"

# ---- 3: bad frames, output volume and rate, SIGNAL ----
boot signal -G -k 15:4000 -a /bin/sh -a -c -a 'yes 0123456789abcdef | head -c 400000; exec sleep 60'
expect signal 'EVENT run.exited {"status"=>143, "signal"=>15}' "SIGNAL 15 did not end the harness"
expect signal 'OUTPUT stdout=400000 stderr=0' "output lost or duplicated"
events=$(sed -n 's/^OUTPUT .* events=\([0-9]*\) .*/\1/p' "$tmp/signal.out")
span=$(sed -n 's/^OUTPUT .* span_ms=\([0-9]*\).*/\1/p' "$tmp/signal.out")
[ "$events" -ge 98 ] || fail "signal: $events output events for 400000 bytes (> 4096 each?)"
[ "$span" -ge $(((events - 64) * 1000 / 64 - 150)) ] ||
	fail "signal: $events output events in $span ms: faster than 64/s"
[ "$(grep -c '^LOG bad frame from host' "$tmp/signal.out")" = 4 ] ||
	fail "signal: bad frames not all logged"
expect signal 'LOG bad frame from host: chan: frame of length 0' "framing loss not logged"
expect signal 'LOG ignored SIGNAL frame before SPEC' "early SIGNAL not ignored"

# ---- 4: a SPEC the agent refuses ----
boot badspec -e FOO=bar
expect badspec 'LOG run setup failed: SPEC argv must be a non-empty array of strings' \
	"bad SPEC not reported"
expect badspec 'DONE ms=' "no DONE after a bad SPEC"
grep -q 'run.exited' "$tmp/badspec.out" && fail "badspec: run.exited without a harness"

# ---- 5: probe ----
new_layer
timeout 30 sh "$tmp/qemu.sh" sanbox.probe=1 null,id=chan >/dev/null 2>&1 &
pid=$!
wait "$pid"
rc=$?
pid=""
[ $rc = 0 ] || fail "probe: QEMU did not power off by itself (rc $rc)"
grep -q sanbox-probe-ok "$tmp/console.log" || fail "probe: no sanbox-probe-ok on the console"

echo "$name: QEMU start to HELLO ${hello_ms} ms, to DONE ${done_ms} ms (TCG)"
echo "PASS $name"
