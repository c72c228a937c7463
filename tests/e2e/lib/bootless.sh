# lib/bootless.sh - set-up of the CLI tests that need run records but no
# microVM (sourced). Gives: $SB (the CLI), a fresh SANBOX_HOME, $tmp for the
# test's files, a shell template whose files are empty (QEMU cannot boot
# it, so each run fails at once and leaves its created, policy, failed and
# stopped events), $bg (pids the test starts in the background), fail, and
# a trap that ends $bg and the daemon, by pid. KEEP=1 keeps the state
# directory and, for what is still running in $bg, its stacks.
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$(pwd)/$BUILD ;; esac
SB=$BUILD/sanbox
. "$(dirname "$0")/lib/proc.sh"
test_name=$(basename "$0" .sh)
export SANBOX_HOME=$(mktemp -d "/tmp/sb-$test_name.XXXXXX")
export SANBOX_TEMPLATES=$SANBOX_HOME/tpl
tmp=$SANBOX_HOME/t
mkdir -p "$tmp" "$SANBOX_TEMPLATES/shell"
bg=""
cat >"$tmp/fake-qemu" <<'EOF'
#!/bin/sh
case " $* " in
*" -version "*) echo "QEMU emulator version 7.2.0 (stand-in)"; exit 0 ;;
*sanbox.probe=1*) exit 1 ;;
esac
[ -e "$SANBOX_HOME/t/hang" ] && exec sleep 600
echo "qemu-system-x86_64: cannot load kernel: not a kernel image" >&2
exit 1
EOF
chmod +x "$tmp/fake-qemu"

# The daemon runs a stand-in for QEMU: it fails at once (as QEMU does on
# the empty kernel), or, while $tmp/hang exists (runs_hang), stays up
# without a guest until its run is stopped: a run that stays "running".
export SANBOX_QEMU=$tmp/fake-qemu
export SANBOX_BOOT_TIMEOUT=600
export SANBOX_WARM_START=0 # no warm image of a template that cannot boot
runs_hang() { : >"$tmp/hang"; }
runs_fail() { rm -f "$tmp/hang"; }

bootless_cleanup() {
	if [ -n "${KEEP:-}" ]; then
		for p in $bg; do
			proc_alive "$p" && gdb -p "$p" -batch -ex "thread apply all bt 12" \
				>"$tmp/gdb.$p" 2>&1
		done
	fi
	for p in $bg; do kill -9 "$p" 2>/dev/null; done
	if [ -f "$SANBOX_HOME/sanboxd.pid" ]; then
		p=$(cat "$SANBOX_HOME/sanboxd.pid")
		[ -n "$p" ] && kill "$p" 2>/dev/null && sleep 0.3 && kill -9 "$p" 2>/dev/null
	fi
	for f in "$SANBOX_HOME"/runs/*/qemu.pid; do
		[ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
	done
	[ -n "${KEEP:-}" ] && echo "kept $SANBOX_HOME" || rm -rf "$SANBOX_HOME"
}
trap bootless_cleanup EXIT
trap 'exit 1' INT TERM
fail() { echo "FAIL $test_name: $*"; exit 1; }
[ -x "$SB" ] || fail "$SB not built"

daemon_pid() { cat "$SANBOX_HOME/sanboxd.pid" 2>/dev/null; }
# wait_stopped RUN: until the run has its run.stopped (its VM failed to boot)
wait_stopped() {
	i=0
	until "$SB" events "$1" --json --type run.stopped | grep -q stopped; do
		i=$((i + 1))
		[ $i -lt 200 ] || return 1
		sleep 0.05
	done
}

printf '{"name":"shell","hash":"00","harness":"/bin/sh","cpus":1,"memory_mib":128,"timeout_s":30}' \
	>"$SANBOX_TEMPLATES/shell/template.json"
: >"$SANBOX_TEMPLATES/shell/vmlinux"
: >"$SANBOX_TEMPLATES/shell/initrd.img"
: >"$SANBOX_TEMPLATES/shell/rootfs.img"
