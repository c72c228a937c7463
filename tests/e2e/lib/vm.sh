# lib/vm.sh - shared set-up of the microVM end-to-end tests (sourced).
# Gives: $SB (the CLI), $REPO, a fresh SANBOX_HOME, the shell template built
# into $BUILD/templates (shared by the tests; rebuilt when the agent, the
# harness, its template.conf or mkimage.sh is newer than it), and a trap
# that stops the daemon and every QEMU of this home, by pid. A test that
# needs more cleanup sets vm_extra_cleanup to a function name.
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$REPO/$BUILD ;; esac
SB=$BUILD/sanbox
. "$(dirname "$0")/lib/proc.sh"
. "$(dirname "$0")/lib/template.sh"
export SANBOX_TEMPLATES=$BUILD/templates
export SANBOX_HOME=$(mktemp -d /tmp/sbvm.XXXXXX)
# Runs boot cold, so each test's timing does not depend on a warm image
# being built beside it; tests/e2e/vm_warm.sh tests warm starts.
export SANBOX_WARM_START=${SANBOX_WARM_START:-0}
failures=0
vm_extra_cleanup=

# vm_stop_home HOME: ends every QEMU of HOME and its daemon, by pid.
vm_stop_home() {
	for p in "$1"/runs/*/qemu.pid "$1"/cache/warm/*.build/qemu.pid; do
		[ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null
	done
	if [ -f "$1/sanboxd.pid" ]; then
		kill "$(cat "$1/sanboxd.pid")" 2>/dev/null
		sleep 0.3
		kill -9 "$(cat "$1/sanboxd.pid")" 2>/dev/null
	fi
}

vm_cleanup() {
	vm_rc=$?
	[ -z "$vm_extra_cleanup" ] || "$vm_extra_cleanup"
	vm_stop_home "$SANBOX_HOME"
	# a sanitizer build's daemon reports what it found in its log
	if grep -qE 'runtime error|AddressSanitizer|LeakSanitizer' "$SANBOX_HOME/sanboxd.log" 2>/dev/null; then
		echo "FAIL sanitizer: $(grep -m 3 -E 'runtime error|Sanitizer' "$SANBOX_HOME/sanboxd.log")"
		vm_rc=1
	fi
	rm -rf "$SANBOX_HOME"
	exit $vm_rc
}
trap vm_cleanup EXIT
trap 'exit 130' INT TERM

# vm_template NAME: builds template NAME into $BUILD/templates when it is
# missing or older than one of its inputs (lib/template.sh), saying how
# long it took; a failed build fails the test.
vm_template() {
	template_fresh "$1" || { echo "FAIL setup: $template_error"; exit 1; }
	[ -z "$template_secs" ] || echo "$1 built in $template_secs s"
}
vm_template shell

ok() { echo "PASS $1"; }
bad() { echo "FAIL $1: $2"; failures=$((failures + 1)); }

# events_json RUN: the run's events as JSON lines
events_json() { "$SB" events "$1" --json; }

# has_event RUN PYTHON-EXPR: true if some event e satisfies the expression
has_event() {
	events_json "$1" | python3 -c "
import json, sys
evs = [json.loads(l) for l in sys.stdin if l.strip()]
sys.exit(0 if any($2 for e in evs) else 1)"
}

# wait_event RUN PYTHON-EXPR [SECONDS]: waits (default 60 s) for such an event
wait_event() {
	i=0
	while [ $i -lt "${3:-60}" ]; do
		has_event "$1" "$2" && return 0
		sleep 1
		i=$((i + 1))
	done
	return 1
}
