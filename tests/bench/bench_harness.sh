#!/bin/sh
# bench_harness.sh - how long a harness takes to make its first model call
# (make bench BENCH=harness). Prints only lines "bench NAME VALUE UNIT"
# (diagnostics go to stderr):
#   harness_first_call_<template>   s from starting `sanbox run -m
#                                   stub/harness PROMPT` to the gateway's
#                                   record of the harness's first call
# for the templates shell, opencode-runner, codex and claude-code, each
# built first when it is not (from the caches after the first time; a
# template that cannot be built or has no such template.conf is left out,
# said on stderr). One cold boot each (no warm image), on this host's
# accelerator: figures of a TCG host are minutes where KVM's are seconds.
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$(pwd)/$BUILD ;; esac
REPO=$(cd "$(dirname "$0")/../.." && pwd)
SB=$BUILD/sanbox
export SANBOX_TEMPLATES=${SANBOX_TEMPLATES:-$BUILD/templates}
export SANBOX_HOME=$(mktemp -d /tmp/sb-bench-harness.XXXXXX)
export SANBOX_WARM_START=0
cleanup() {
	for p in "$SANBOX_HOME"/runs/*/qemu.pid; do
		[ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null
	done
	p=$(cat "$SANBOX_HOME/sanboxd.pid" 2>/dev/null)
	[ -n "$p" ] && kill "$p" 2>/dev/null && sleep 0.3 && kill -9 "$p" 2>/dev/null
	rm -rf "$SANBOX_HOME"
}
trap cleanup EXIT
for t in shell opencode-runner codex claude-code; do
	[ -f "$REPO/templates/$t/template.conf" ] || { echo "bench_harness: no template $t" >&2; continue; }
	if [ ! -f "$SANBOX_TEMPLATES/$t/template.json" ] &&
		! "$SB" template build "$t" >"$SANBOX_HOME/build-$t.log" 2>&1; then
		echo "bench_harness: template $t: $(tail -n 1 "$SANBOX_HOME/build-$t.log")" >&2
		continue
	fi
	python3 - "$SB" "$t" <<'PY' || echo "bench_harness: $t made no model call" >&2
import json, subprocess, sys, time
sb, t = sys.argv[1], sys.argv[2]
name = "bench-" + t
t0 = time.time_ns()
subprocess.run([sb, "run", "-t", t, "-m", "stub/harness", "--timeout", "20m", "--name", name,
                "write hello.txt, then run a command"],
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
out = subprocess.run([sb, "events", name, "--json"], capture_output=True, text=True).stdout
calls = [json.loads(l) for l in out.splitlines() if l.strip()]
calls = [e for e in calls if e["type"] == "agent.message" and e["source"] == "gateway"]
if not calls:
    sys.exit(1)
print("bench harness_first_call_%s %.1f s" % (t.replace("-", "_"), (calls[0]["ts"] - t0) / 1e9))
PY
done
