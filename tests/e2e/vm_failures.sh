#!/bin/sh
# Failures are events, not hangs: each ends the run with run.failed (a
# one-line reason) and run.stopped reason failed, `sanbox run` exits 125,
# and the daemon keeps serving.
#   a QEMU missing, not executable, or exiting at once (SANBOX_QEMU)
#   b QEMU killed mid-run (by the pid in runs/RUN/qemu.pid)
#   c a guest agent that never answers (an init that sleeps), against a
#     short SANBOX_BOOT_TIMEOUT; a bad SANBOX_BOOT_TIMEOUT; a broken init
#     (kernel panic)
#   d the guest's workspace filling up (template "tiny", disk = 48M): the
#     run still ends with its exit status and events; an input larger than
#     that disk: the agent's setup error is the reason; the host state
#     directory full when runs are created (SANBOX_HOME on a 48 MiB tmpfs):
#     one-line errors, the events already written survive, the daemon serves
# Test templates live in a store of this test: shell (the shared build),
# tiny (built here), hang and panic (shell with another initrd).
. "$(dirname "$0")/lib/vm.sh"

tmp=$SANBOX_HOME/t
full=$SANBOX_HOME/full
mkdir -p "$tmp" "$full"

cleanup_full() {
	vm_stop_home "$full"
	if mountpoint -q "$full"; then
		umount "$full" 2>/dev/null || umount -l "$full"
	fi
}
vm_extra_cleanup=cleanup_full

# ---- the test's template store ----
store=$SANBOX_HOME/tpl
mkdir -p "$store"
ln -s "$SANBOX_TEMPLATES/shell" "$store/shell"
sed 's/^name = .*/name = tiny/; s/^disk = .*/disk = 48M/' "$REPO/templates/shell/template.conf" \
	>"$tmp/tiny.conf"
mkdir -p "$tmp/tiny-src"
mv "$tmp/tiny.conf" "$tmp/tiny-src/template.conf"
BUILD=$BUILD sh "$REPO/tools/mkimage.sh" "$tmp/tiny-src" "$store/tiny" >"$tmp/mkimage.log" 2>&1 ||
	{ echo "FAIL setup: tiny template: $(tail -n 1 "$tmp/mkimage.log")"; exit 1; }
# like_shell NAME INITRD-DIR: template NAME = shell with an initrd of that tree
like_shell() {
	mkdir -p "$store/$1"
	ln -s "$SANBOX_TEMPLATES/shell/vmlinux" "$store/$1/vmlinux"
	ln -s "$SANBOX_TEMPLATES/shell/rootfs.img" "$store/$1/rootfs.img"
	(cd "$2" && find . -mindepth 1 | sort | cpio -o -H newc -R 0:0 --quiet) >"$store/$1/initrd.img"
	sed "s/\"name\": \"shell\"/\"name\": \"$1\"/" "$SANBOX_TEMPLATES/shell/template.json" \
		>"$store/$1/template.json"
}
mkdir -p "$tmp/hang/bin" "$tmp/panic"
cp "$(command -v busybox)" "$tmp/hang/bin/busybox"
printf '#!/bin/busybox sh\nexec /bin/busybox sleep 3600\n' >"$tmp/hang/init"
chmod 0755 "$tmp/hang/init"
like_shell hang "$tmp/hang"     # never sends HELLO
echo "no init here" >"$tmp/panic/README"
like_shell panic "$tmp/panic"   # no /init: the kernel panics
export SANBOX_TEMPLATES=$store

status() { "$SB" inspect "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["status"])'; }
# failed_with RUN TEXT: run.failed holds TEXT in a one-line reason, then
# run.stopped reason failed
failed_with() {
	events_json "$1" | python3 -c "
import json, sys
evs = [json.loads(l) for l in sys.stdin if l.strip()]
f = [e for e in evs if e['type'] == 'run.failed']
s = [e for e in evs if e['type'] == 'run.stopped']
ok = len(f) == 1 and sys.argv[1] in f[0]['payload']['reason'] and '\n' not in f[0]['payload']['reason'] \
	and len(s) == 1 and s[0]['payload']['reason'] == 'failed' and s[0]['offset'] > f[0]['offset']
sys.exit(0 if ok else 1)" "$2"
}
reason_of() { events_json "$1" | grep -m 1 run.failed; }
only_run() { "$SB" ps --json | python3 -c 'import json,sys; r=json.load(sys.stdin); assert len(r)==1; print(r[0]["run"])'; }
# run_of OUTPUT: the run id in the run.created line of `sanbox run`'s output
run_of() { printf '%s\n' "$1" | sed -n 's/.*run\.created  *\([0-9a-f]\{12\}\) .*/\1/p'; }
# one_failed_line OUTPUT TEXT: the run's output has one run.failed line, with TEXT
one_failed_line() {
	[ "$(printf '%s\n' "$1" | grep -c 'run\.failed')" = 1 ] &&
		printf '%s\n' "$1" | grep 'run\.failed' | grep -qF -- "$2"
}
restart_daemon() { # restart_daemon [VAR=VALUE]...: a daemon with that environment
	"$SB" daemon stop >/dev/null 2>&1 # (it may report a reset connection)
	env "$@" "$SB" daemon start >/dev/null
}

# ---- a: QEMU missing, or not a program ----
restart_daemon SANBOX_QEMU="$tmp/no-such-qemu"
out=$("$SB" run -- true 2>&1) # accel auto: the KVM probe needs QEMU too
rc=$?
R=$(run_of "$out")
[ "$rc" = 125 ] && one_failed_line "$out" "QEMU binary $tmp/no-such-qemu: No such file or directory" &&
	failed_with "$R" "QEMU binary $tmp/no-such-qemu" && [ "$(status "$R")" = failed ] &&
	ok "QEMU missing: run.failed, exit 125, one line" || bad "QEMU missing" "exit $rc: $out"
head -c 64 /dev/zero >"$tmp/garbage-qemu"
chmod 0755 "$tmp/garbage-qemu"
restart_daemon SANBOX_QEMU="$tmp/garbage-qemu"
out=$("$SB" run --accel tcg -- true 2>&1)
rc=$?
[ "$rc" = 125 ] && one_failed_line "$out" "cannot execute $tmp/garbage-qemu: Exec format error" &&
	failed_with "$(run_of "$out")" "Exec format error" &&
	ok "QEMU not executable: run.failed, exit 125" || bad "QEMU not executable" "exit $rc: $out"
printf '#!/bin/sh\necho "qemu-system-x86_64: -M microvm: unsupported machine type" >&2\nexit 1\n' \
	>"$tmp/failing-qemu"
chmod 0755 "$tmp/failing-qemu"
restart_daemon SANBOX_QEMU="$tmp/failing-qemu"
out=$("$SB" run --accel tcg -- true 2>&1)
rc=$?
[ "$rc" = 125 ] && failed_with "$(run_of "$out")" \
	"QEMU exited with status 1 before the harness reported: qemu-system-x86_64: -M microvm: unsupported machine type" &&
	ok "QEMU exits at once: its error is the reason" || bad "QEMU exits at once" "exit $rc: $out"

# ---- c: the boot deadline ----
"$SB" daemon stop >/dev/null 2>&1
if SANBOX_BOOT_TIMEOUT=soon "$SB" daemon start >/dev/null 2>&1; then
	bad "bad SANBOX_BOOT_TIMEOUT" "the daemon started"
else
	grep -q "SANBOX_BOOT_TIMEOUT must be 1 to 86400 seconds (e.g. 120, 90s, 3m), not 'soon'" \
		"$SANBOX_HOME/sanboxd.log" && ok "bad SANBOX_BOOT_TIMEOUT refused with one line" ||
		bad "bad SANBOX_BOOT_TIMEOUT" "$(tail -n 2 "$SANBOX_HOME/sanboxd.log")"
fi
restart_daemon SANBOX_BOOT_TIMEOUT=3s
t0=$(date +%s)
out=$("$SB" run --template hang --accel tcg --timeout 300s -- true 2>&1)
rc=$?
R=$(run_of "$out")
[ "$rc" = 125 ] && [ $(($(date +%s) - t0)) -lt 60 ] &&
	one_failed_line "$out" "did not answer within its 3 s boot deadline" &&
	failed_with "$R" "boot deadline (SANBOX_BOOT_TIMEOUT; see console.log)" &&
	ok "silent guest: failed at its boot deadline" || bad "boot deadline" "exit $rc: $out"
[ -s "$SANBOX_HOME/runs/$R/qemu.pid" ] && ! kill -0 "$(cat "$SANBOX_HOME/runs/$R/qemu.pid")" 2>/dev/null &&
	ok "silent guest's QEMU ended" || bad "boot deadline" "QEMU still running, or no qemu.pid"

# ---- b and d: QEMU killed, workspace full, kernel panic (default daemon) ----
restart_daemon
K=$("$SB" run --detach --accel tcg --name victim --timeout 300s -- sleep 600)
F=$("$SB" run --detach --accel tcg --template tiny --name filler --timeout 300s -- /bin/sh -c \
	'dd if=/dev/zero of=fill bs=64k 2>&1; echo "dd-done"; df -k .; exit 7')
P=$("$SB" run --detach --accel tcg --template panic --name panic --timeout 300s -- true)
head -c 31457280 /dev/zero >"$tmp/big-input.bin" # 30 MiB: more than the tiny disk holds
G=$("$SB" run --detach --accel tcg --template tiny --input "$tmp/big-input.bin" --timeout 300s -- true)
# attach returns once a run has stopped; the checks read the events
if wait_event "$K" "e['type']=='harness.input.ready'" 120; then
	kill -9 "$(cat "$SANBOX_HOME/runs/$K/qemu.pid")"
	"$SB" attach "$K" >/dev/null 2>&1
	failed_with "$K" "QEMU was killed by signal 9 (Killed) before the harness reported" &&
		[ "$(status "$K")" = failed ] && ok "QEMU killed mid-run: run.failed" ||
		bad "QEMU killed" "$(reason_of "$K")"
else
	bad "QEMU killed" "the harness never started"
fi
"$SB" attach "$F" >/dev/null 2>&1
has_event "$F" "e['type']=='run.exited' and e['payload']['status']==7" &&
	has_event "$F" "e['type']=='agent.output' and 'No space left on device' in e['payload']['data']" &&
	has_event "$F" "e['type']=='agent.output' and 'dd-done' in e['payload']['data']" &&
	[ "$(status "$F")" = exited ] && ok "workspace full: the run ends with its status and events" ||
	bad "workspace full" "status $(status "$F"): $(events_json "$F" | grep -m 3 'output\|failed')"
has_event "$F" "e['type']=='agent.file.changed' and e['payload']['path']=='/workspace/fill' and e['payload']['size'] > (1 << 20)" &&
	ok "workspace full: the big file reported" || bad "workspace full" "no agent.file.changed for fill"
"$SB" attach "$P" >/dev/null 2>&1
failed_with "$P" "guest kernel panic: Kernel panic - not syncing" &&
	ok "broken init: kernel panic is the reason" || bad "kernel panic" "$(reason_of "$P")"
"$SB" attach "$G" >/dev/null 2>&1
failed_with "$G" "the guest agent could not set the run up: input /workspace/big-input.bin: No space left on device" &&
	ok "input larger than the guest's disk: the agent's reason" || bad "input too big for the disk" "$(reason_of "$G")"
out=$("$SB" run --accel tcg --timeout 120s -- echo still-serving 2>&1)
[ $? = 0 ] && case $out in *still-serving*) true ;; *) false ;; esac && "$SB" daemon status >/dev/null &&
	ok "daemon healthy after the failures" || bad "daemon health" "$out"
"$SB" daemon stop >/dev/null 2>&1

# ---- d: the host state directory full ----
if mount -t tmpfs -o size=48m,mode=0700 sanbox-test "$full"; then
	(
		export SANBOX_HOME=$full
		fails=0
		fail() { echo "FAIL host full: $*"; fails=$((fails + 1)); }
		"$SB" run --accel tcg --name before -- echo written-before >/dev/null 2>&1 || fail "first run failed"
		A=$(only_run)
		dd if=/dev/zero of="$full/filler" bs=1M >/dev/null 2>&1 # until ENOSPC
		seen_log=0 seen_start=0
		i=0
		while [ $i -lt 40 ] && [ $seen_log = 0 ]; do
			err=$("$SB" run --accel tcg -- echo never 2>&1 >"$tmp/full.out")
			rc=$?
			case $rc in
			125)
				one_failed_line "$(cat "$tmp/full.out")" "No space left on device" ||
					fail "run.failed without the reason: $(cat "$tmp/full.out")"
				seen_start=1 ;;
			0) fail "a run succeeded on a full disk" ;;
			*)
				[ "$(printf '%s\n' "$err" | wc -l)" = 1 ] &&
					case $err in "sanbox: cannot record the run in $full: "*"No space left on device") true ;; *) false ;; esac ||
					fail "exit $rc: unclear error: $err"
				seen_log=1 ;;
			esac
			"$SB" daemon status >/dev/null || fail "daemon not answering while the disk is full"
			i=$((i + 1))
		done
		[ $seen_log = 1 ] || fail "the log never filled up in $i tries"
		check_before() {
			events_json "$A" | python3 -c "
import json, sys
t = [json.loads(l)['type'] for l in sys.stdin if l.strip()]
sys.exit(0 if t[:3] == ['run.created', 'run.policy.resolved', 'run.started'] and t[-3:] == ['run.exited', 'snapshot.saved', 'run.stopped'] else 1)"
		}
		check_before || fail "events of the run before the disk filled up are damaged"
		rm -f "$full/filler"
		out=$("$SB" run --accel tcg --timeout 120s -- echo after 2>&1)
		[ $? = 0 ] && case $out in *"stdout: after"*) true ;; *) false ;; esac ||
			fail "no run once space is back: $out"
		"$SB" daemon stop >/dev/null 2>&1
		check_before || fail "events of the run before lost after a daemon restart"
		"$SB" daemon stop >/dev/null 2>&1
		[ $fails = 0 ] && echo "PASS host state directory full: one-line errors (log full$([ $seen_start = 1 ] && echo ', disk layer'))," \
			"events kept, daemon serving, recovers"
		exit $fails
	) || failures=$((failures + 1))
	cleanup_full
else
	bad "host full" "cannot mount a tmpfs (needs root)"
fi
exit $((failures > 0))
