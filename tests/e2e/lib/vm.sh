# lib/vm.sh - shared set-up of the microVM end-to-end tests (sourced).
# Gives: $SB (the CLI), a fresh SANBOX_HOME, the shell template built once
# into $BUILD/templates (shared by the tests), and a trap that stops the
# daemon and every QEMU of this home, by pid.
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$(pwd)/$BUILD ;; esac
SB=$BUILD/sanbox
export SANBOX_TEMPLATES=$BUILD/templates
export SANBOX_HOME=$(mktemp -d /tmp/sbvm.XXXXXX)
failures=0

vm_cleanup() {
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
trap vm_cleanup EXIT INT TERM

if [ ! -f "$SANBOX_TEMPLATES/shell/template.json" ]; then
	"$SB" template build shell >/dev/null || { echo "FAIL setup: template build"; exit 1; }
fi

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
