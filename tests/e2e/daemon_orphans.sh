#!/bin/sh
# No QEMU of the home outlives the daemon's knowledge of it: a QEMU is
# found by the QMP socket its command line names, whatever became of its
# pid file. A daemon killed after starting a run's QEMU but before writing
# its qemu.pid (played here by deleting the file) leaves a machine the
# next daemon takes up again (the run goes on, and `sanbox stop` ends
# that QEMU); a QEMU whose run has ended, or whose run directory no record
# knows, is ended when the next daemon starts; a process naming a socket
# under runs/ that is no run's (runs/../t/other/...) is left alone. The
# QEMU is a stand-in that keeps its arguments (lib/bootless.sh: no
# microVM boots).
. "$(dirname "$0")/lib/bootless.sh"

cat >"$tmp/keep-qemu" <<'EOF'
#!/bin/sh
case " $* " in
*" -version "*) echo "QEMU emulator version 7.2.0 (stand-in)"; exit 0 ;;
*sanbox.probe=1*) exit 1 ;;
esac
while :; do sleep 1; done
EOF
chmod +x "$tmp/keep-qemu"
export SANBOX_QEMU=$tmp/keep-qemu

qmp_arg() { echo "socket,id=qmp0,path=$1/qmp.sock,reconnect=1"; }
# qemu_of DIR [prefix]: the pids of processes whose arguments name
# DIR/qmp.sock as QEMU's (with prefix: any QMP socket under DIR)
qemu_of() {
	QMP_ARG=$(qmp_arg "$1") QMP_DIR=$1 PREFIX=${2:-} python3 - <<'PY'
import os
want = os.environ["QMP_ARG"].encode()
pre = b"socket,id=qmp0,path=" + os.environ["QMP_DIR"].encode()
for p in os.listdir("/proc"):
    try:
        args = open("/proc/%s/cmdline" % p, "rb").read().split(b"\0") if p.isdigit() else []
    except OSError:
        continue
    if any(a == want or (os.environ["PREFIX"] and a.startswith(pre)) for a in args):
        print(p)
PY
}
# fake DIR: a process that names DIR's QMP socket as QEMU's, not the daemon's child
fake() {
	setsid "$tmp/keep-qemu" -chardev "$(qmp_arg "$1")" </dev/null >/dev/null 2>&1 &
	bg="$bg $!"
}
# every stand-in of this test, found by its arguments (their pid files are
# not all there), goes at the end
orphans_cleanup() {
	for p in $(qemu_of "$SANBOX_HOME/runs/" prefix); do kill -9 "$p" 2>/dev/null; done
	bootless_cleanup
}
trap orphans_cleanup EXIT
status_of() { "$SB" inspect "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["status"])'; }
gone_in() { # gone_in DIR: waits for no process naming DIR
	i=0
	while [ -n "$(qemu_of "$1")" ]; do
		i=$((i + 1))
		[ $i -lt 100 ] || return 1
		sleep 0.05
	done
}

# a live run whose qemu.pid is lost
A=$("$SB" run --detach --name nopid --timeout 600s -- true) || fail "run A"
i=0
until [ -n "$(qemu_of "$SANBOX_HOME/runs/$A")" ] && [ "$(status_of "$A")" = running ]; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "run A's stand-in QEMU never ran"
	sleep 0.05
done
qa=$(qemu_of "$SANBOX_HOME/runs/$A")
# an ended run, and a QEMU that still names it
B=$("$SB" run --detach --name ended -- true) || fail "run B"
"$SB" stop "$B" >/dev/null 2>&1
[ "$(status_of "$B")" = stopped ] || fail "run B: $(status_of "$B")"
gone_in "$SANBOX_HOME/runs/$B" || fail "run B's QEMU outlived its stop"
fake "$SANBOX_HOME/runs/$B"
# a run directory no record knows, with its QEMU
mkdir -p "$SANBOX_HOME/runs/0123456789ab"
fake "$SANBOX_HOME/runs/0123456789ab"
# a socket under runs/ that is no run's
fake "$SANBOX_HOME/runs/../t/other/runs/0123456789ab"
i=0
until [ -n "$(qemu_of "$SANBOX_HOME/runs/$B")" ] && [ -n "$(qemu_of "$SANBOX_HOME/runs/0123456789ab")" ] &&
	[ -n "$(qemu_of "$SANBOX_HOME/runs/../t/other/runs/0123456789ab")" ]; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "the stand-ins did not start"
	sleep 0.05
done

pid=$(daemon_pid)
kill -9 "$pid"
proc_wait_gone "$pid" || fail "the daemon did not die"
rm -f "$SANBOX_HOME/runs/$A/qemu.pid"
"$SB" daemon start >/dev/null || fail "daemon start: $(tail -n 3 "$SANBOX_HOME/sanboxd.log")"

[ "$(status_of "$A")" = running ] && [ "$(qemu_of "$SANBOX_HOME/runs/$A")" = "$qa" ] ||
	fail "a run whose pid file was lost: $(status_of "$A"), QEMU $(qemu_of "$SANBOX_HOME/runs/$A") (was $qa)"
"$SB" events "$A" --json | grep -q "taken up again" || fail "run A was not taken up again"
gone_in "$SANBOX_HOME/runs/$B" || fail "the QEMU of an ended run was left"
gone_in "$SANBOX_HOME/runs/0123456789ab" || fail "the QEMU of an unrecorded run was left"
[ ! -e "$SANBOX_HOME/runs/0123456789ab" ] || fail "an unrecorded run's directory was left"
[ -n "$(qemu_of "$SANBOX_HOME/runs/../t/other/runs/0123456789ab")" ] || fail "another home's process was ended"
"$SB" stop "$A" >/dev/null 2>&1
gone_in "$SANBOX_HOME/runs/$A" || fail "stop left run A's QEMU (found without its pid file)"
[ "$(status_of "$A")" = stopped ] || fail "run A: $(status_of "$A")"
echo "PASS daemon_orphans"
