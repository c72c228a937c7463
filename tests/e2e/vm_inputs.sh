#!/bin/sh
# Input files larger than one channel frame: a 5 MiB file (and small and
# empty ones) go to the guest in INPUT frames after the SPEC and arrive
# intact, with their modes; 48 MiB (the CLI's limit) arrive; one byte more
# is refused before anything starts; and the agent itself refuses a host that sends more than
# an input's declared size, or declares more than the limit (driven by
# tests/guest/driver.c).
. "$(dirname "$0")/lib/vm.sh"

tmp=$SANBOX_HOME/t
mkdir -p "$tmp/in"
head -c 5242880 /dev/urandom >"$tmp/in/big.bin"
printf 'hello input\n' >"$tmp/in/note.txt"
printf '#!/bin/sh\necho script-ran\n' >"$tmp/in/run.sh"
chmod 0755 "$tmp/in/run.sh"
: >"$tmp/in/empty"
want_md5=$(md5sum <"$tmp/in/big.bin" | cut -d' ' -f1)
want_bytes=$((5242880 + 12 + $(wc -c <"$tmp/in/run.sh")))

out=$("$SB" run --accel tcg --name inputs --timeout 120s \
	--input "$tmp/in/big.bin" --input "$tmp/in/note.txt" --input "$tmp/in/run.sh" \
	--input "$tmp/in/empty" -- /bin/sh -c \
	'echo "md5=$(md5sum < big.bin | cut -d" " -f1) size=$(wc -c < big.bin) empty=$(wc -c < empty)"; cat note.txt; ./run.sh; stat -c "mode=%a" run.sh' 2>&1)
rc=$?
[ "$rc" = 0 ] && ok "run with a 5 MiB input" || bad "run with a 5 MiB input" "exit $rc: $(echo "$out" | tail -n 5)"
R=$("$SB" ps --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["run"])')
has_event "$R" "e['type']=='agent.output' and 'md5=$want_md5 size=5242880 empty=0' in e['payload']['data']" &&
	ok "5 MiB input intact in the guest (md5, size)" ||
	bad "input content" "$(events_json "$R" | grep -m 3 'md5=\|setup')"
has_event "$R" "e['type']=='agent.output' and 'hello input' in e['payload']['data']" &&
	ok "small input intact" || bad "small input" "note.txt not seen"
has_event "$R" "e['type']=='agent.output' and 'script-ran' in e['payload']['data']" &&
	has_event "$R" "e['type']=='agent.output' and 'mode=755' in e['payload']['data']" &&
	ok "input mode kept" || bad "input mode" "run.sh not executable with mode 755"
has_event "$R" "e['type']=='harness.input.ready' and e['source']=='guest' and e['payload']['files']==4 and e['payload']['bytes']==$want_bytes" &&
	ok "harness.input.ready: 4 files, $want_bytes bytes" ||
	bad "harness.input.ready" "$(events_json "$R" | grep input.ready)"
has_event "$R" "e['type']=='run.policy.resolved' and [(i['path'], i['size']) for i in e['payload']['inputs']]==[('big.bin', 5242880), ('note.txt', 12), ('run.sh', $((want_bytes - 5242880 - 12))), ('empty', 0)]" &&
	ok "run.policy.resolved lists the inputs and sizes" ||
	bad "policy inputs" "$(events_json "$R" | grep policy.resolved)"
[ "$("$SB" fs cat "$R" big.bin | md5sum | cut -d' ' -f1)" = "$want_md5" ] &&
	ok "input kept on the run's disk" || bad "input on disk" "fs cat differs"

# Exactly the limit (48 MiB in all) goes through; one byte more is refused
# before a run exists.
truncate -s 48M "$tmp/limit.bin"
out=$("$SB" run --accel tcg --timeout 120s --input "$tmp/limit.bin" -- /bin/sh -c 'wc -c < limit.bin' 2>&1)
rc=$?
[ "$rc" = 0 ] && case $out in *"stdout: 50331648"*) true ;; *) false ;; esac &&
	ok "48 MiB of inputs (the limit) arrive" || bad "48 MiB input" "exit $rc: $(echo "$out" | tail -n 4)"
truncate -s $((48 * 1048576 + 1)) "$tmp/huge.bin"
n0=$("$SB" ps --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
err=$("$SB" run --accel tcg --input "$tmp/huge.bin" -- true 2>&1 >/dev/null)
rc=$?
n1=$("$SB" ps --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
[ "$rc" != 0 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && case $err in *"48 MiB"*) true ;; *) false ;; esac &&
	[ "$n0" = "$n1" ] && ok "inputs over 48 MiB refused with one line, no run" ||
	bad "over the limit" "exit $rc, $n0 -> $n1 runs: $err"

# The agent checks sizes too: a host that lies about them is refused.
cc -std=gnu11 -O1 -Wall -Wextra -Werror -Wno-unused-parameter -D_GNU_SOURCE -I"$REPO" \
	-o "$tmp/driver" "$REPO/tests/guest/driver.c" "$REPO/vmm/chan.c" "$REPO/engine/mpack.c" \
	"$REPO/engine/error.c" -lmsgpackc -lxxhash 2>"$tmp/cc.log" ||
	{ bad "driver" "$(head -n 1 "$tmp/cc.log")"; exit 1; }
img=$SANBOX_TEMPLATES/shell
khz=$(awk -F: '/^cpu MHz/ { printf "%d", $2 * 1000; exit }' /proc/cpuinfo)
# guest NAME DRIVER-ARGS...: boots the shell template on a fresh layer,
# driven by the driver; its output goes to $tmp/NAME.out
guest() {
	g=$1
	shift
	rm -f "$tmp/layer.qcow2"
	qemu-img create -q -f qcow2 -b "$img/rootfs.img" -F raw "$tmp/layer.qcow2"
	"$tmp/driver" -s "$tmp/chan.sock" -T 60 "$@" -- qemu-system-x86_64 \
		-M microvm,x-option-roms=off,rtc=on -accel tcg -m 256 -smp 1 -nodefaults \
		-no-user-config -nographic -no-reboot -kernel "$img/vmlinux" -initrd "$img/initrd.img" \
		-append "console=ttyS0 quiet panic=-1${khz:+ tsc_early_khz=$khz}" \
		-serial "file:$tmp/$g.console" \
		-blockdev "driver=file,filename=$tmp/layer.qcow2,node-name=f0" \
		-blockdev driver=qcow2,file=f0,node-name=root -device virtio-blk-device,drive=root \
		-device virtio-serial-device -chardev "socket,id=chan,path=$tmp/chan.sock" \
		-device virtserialport,chardev=chan,name=sanbox.0 >"$tmp/$g.out" 2>&1
}
guest past -i 'ok.txt=fine' -i 'a.txt:3=more than three' -a /bin/true
grep -q 'DONE ms=.*"error"=>"input /workspace/a.txt: INPUT frame .*past the file' "$tmp/past.out" &&
	! grep -q 'run.exited' "$tmp/past.out" && ok "agent refuses data past an input's size" ||
	bad "past the size" "$(grep -E 'DONE|LOG|EVENT' "$tmp/past.out" | head -n 5)"
guest limit -i "a.txt:$((48 * 1048576 + 1))=x" -a /bin/true
grep -q 'DONE ms=.*"error"=>"SPEC input sizes are missing or above the inputs limit"' "$tmp/limit.out" &&
	ok "agent refuses inputs declared above 48 MiB" ||
	bad "declared limit" "$(grep -E 'DONE|LOG|EVENT' "$tmp/limit.out" | head -n 5)"
exit $((failures > 0))
