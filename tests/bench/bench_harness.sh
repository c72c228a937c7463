#!/bin/sh
# bench_harness.sh - how long a harness takes to make its first model call
# (make bench BENCH=harness). Prints only lines "bench NAME VALUE UNIT"
# (diagnostics go to stderr):
#   harness_first_call_<template>_cold  s from starting `sanbox run -m
#                                       stub/harness PROMPT` to the gateway's
#                                       record of the harness's first call,
#                                       the guest booted (no warm image)
#   harness_first_call_<template>_warm  the same, the guest restored from the
#                                       template's warm image (built first,
#                                       not timed; left out, said on stderr,
#                                       when it cannot be)
#   harness_warm_vs_cold_<template>     warm over cold
# for the templates shell, opencode-runner, codex and claude-code, each
# built first when it is not (from the caches after the first time; a
# template that cannot be built or has no such template.conf is left out,
# said on stderr), on this host's accelerator: figures of a TCG host are
# minutes where KVM's are seconds.
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$(pwd)/$BUILD ;; esac
REPO=$(cd "$(dirname "$0")/../.." && pwd)
SB=$BUILD/sanbox
export SANBOX_TEMPLATES=${SANBOX_TEMPLATES:-$BUILD/templates}
. "$REPO/tests/e2e/lib/template.sh"
export SANBOX_HOME=$(mktemp -d /tmp/sb-bench-harness.XXXXXX)
daemon_stop() {
	for p in "$SANBOX_HOME"/runs/*/qemu.pid; do
		[ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null
	done
	p=$(cat "$SANBOX_HOME/sanboxd.pid" 2>/dev/null)
	[ -n "$p" ] && kill "$p" 2>/dev/null && sleep 0.3 && kill -9 "$p" 2>/dev/null
	rm -f "$SANBOX_HOME/sanboxd.pid"
}
cleanup() {
	daemon_stop
	rm -rf "$SANBOX_HOME"
}
trap cleanup EXIT

# first_call TEMPLATE NAME BOOT: runs NAME and prints the seconds to its
# first model call; fails when it made none or did not boot as BOOT says
first_call() {
	python3 - "$SB" "$1" "$2" "$3" <<'PY'
import json, subprocess, sys, time
sb, t, name, boot = sys.argv[1:5]
t0 = time.time_ns()
subprocess.run([sb, "run", "-t", t, "-m", "stub/harness", "--timeout", "20m", "--name", name,
                "write hello.txt, then run a command"],
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
out = subprocess.run([sb, "events", name, "--json"], capture_output=True, text=True).stdout
evs = [json.loads(l) for l in out.splitlines() if l.strip()]
started = [e for e in evs if e["type"] == "run.started"]
calls = [e for e in evs if e["type"] == "agent.message" and e["source"] == "gateway"]
if not calls or not started or started[0]["payload"].get("boot", "cold") != boot:
    sys.exit(1)
print("%.1f" % ((calls[0]["ts"] - t0) / 1e9))
PY
}

# warm_image TEMPLATE: has the daemon build TEMPLATE's warm image (a run
# starts its build) and waits for it, at most 15 minutes
warm_image() {
	n=$(ls "$SANBOX_HOME"/cache/warm/*.mem 2>/dev/null | wc -l)
	"$SB" run -t "$1" --name "warmup-$1" --detach -- /bin/true >/dev/null 2>&1 || return 1
	i=0
	while [ "$(ls "$SANBOX_HOME"/cache/warm/*.mem 2>/dev/null | wc -l)" -le "$n" ]; do
		i=$((i + 1))
		[ $i -le 900 ] || return 1
		sleep 1
	done
}

templates=
for t in shell opencode-runner codex claude-code; do
	[ -f "$REPO/templates/$t/template.conf" ] || { echo "bench_harness: no template $t" >&2; continue; }
	if ! template_fresh "$t"; then
		echo "bench_harness: $template_error" >&2
		continue
	fi
	templates="$templates $t"
done

SANBOX_WARM_START=0 # the daemon the CLI starts reads it
export SANBOX_WARM_START
for t in $templates; do
	if s=$(first_call "$t" "cold-$t" cold); then
		eval "cold_$(echo "$t" | tr - _)=$s"
		echo "bench harness_first_call_$(echo "$t" | tr - _)_cold $s s"
	else
		echo "bench_harness: $t made no model call (cold)" >&2
	fi
done
daemon_stop
SANBOX_WARM_START=1
for t in $templates; do
	v=$(echo "$t" | tr - _)
	if ! warm_image "$t"; then
		echo "bench_harness: $t: no warm image within 15 minutes" >&2
		continue
	fi
	if ! s=$(first_call "$t" "warm-$t" warm); then
		echo "bench_harness: $t made no model call (warm)" >&2
		continue
	fi
	echo "bench harness_first_call_${v}_warm $s s"
	eval "c=\${cold_$v:-}"
	[ -n "$c" ] && python3 -c "print('bench harness_warm_vs_cold_$v %.2f ratio' % ($s / $c))"
done
exit 0
