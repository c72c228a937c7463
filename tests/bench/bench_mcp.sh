#!/bin/sh
# bench_mcp.sh - the MCP server's cost per call (make bench BENCH=mcp).
# Prints only lines "bench NAME VALUE UNIT" (diagnostics go to stderr):
#   mcp_call_p50, mcp_call_p99   ms from writing a tools/call runs_list line
#                                to `sanbox mcp` to reading its answer, 500
#                                calls one after the other on one server
#   mcp_cli_p50, mcp_cli_p99     ms of the same request through the CLI:
#                                `sanbox ps --json`, a process each, 100 times
#   mcp_call_vs_cli_p50          the ratio of the two p50s
#   mcp.events_per_s             events read through the events_read tool,
#                                paged (limit 1000, from each answer's
#                                next), of a recorded run of 20,000 events
#   mcp.cli_events_per_s         the same events through one `sanbox events
#                                RUN --json`
#   mcp.events_vs_cli            the ratio of the two rates
# Against a daemon of a fresh state directory holding 21 runs: 20 (a stand-in
# QEMU that fails at once: no microVM) and the recorded one (written by
# tests/mkrecord before the daemon starts), started before the clock
# starts.
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$(pwd)/$BUILD ;; esac
SB=$BUILD/sanbox
export SANBOX_HOME=$(mktemp -d /tmp/sb-bench-mcp.XXXXXX)
export SANBOX_TEMPLATES=$SANBOX_HOME/tpl
cleanup() {
	p=$(cat "$SANBOX_HOME/sanboxd.pid" 2>/dev/null)
	[ -n "$p" ] && kill "$p" 2>/dev/null && sleep 0.3 && kill -9 "$p" 2>/dev/null
	rm -rf "$SANBOX_HOME"
}
trap cleanup EXIT
mkdir -p "$SANBOX_TEMPLATES/shell"
printf '#!/bin/sh\ncase " $* " in *" -version "*) echo "QEMU emulator version 7.2.0"; exit 0;; esac\nexit 1\n' \
	>"$SANBOX_HOME/qemu" && chmod +x "$SANBOX_HOME/qemu"
export SANBOX_QEMU=$SANBOX_HOME/qemu SANBOX_WARM_START=0
printf '{"name":"shell","hash":"00","harness":"/bin/sh","cpus":1,"memory_mib":128,"timeout_s":30}' \
	>"$SANBOX_TEMPLATES/shell/template.json"
for f in vmlinux initrd.img rootfs.img; do : >"$SANBOX_TEMPLATES/shell/$f"; done
EVRUN=00000000be7c
EVENTS=20000
mkdir -p "$SANBOX_HOME/log"
python3 - "$EVENTS" "$BUILD/tests/mkrecord" "$SANBOX_HOME/log" "$EVRUN" <<'PY' || exit 1
import json, subprocess, sys

n, mk, log, run = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
ev = [{"type": "run.created", "source": "host", "t": 0,
       "payload": {"name": "many", "template": "shell", "group": ""}},
      {"type": "run.started", "source": "host", "t": 1, "payload": {"accel": "tcg"}}]
ev += [{"type": "agent.output", "source": "guest", "t": 2 + i,
        "payload": {"stream": "stdout", "data": "line %d of the build log: ok\n" % i}}
       for i in range(n - 4)]
ev += [{"type": "run.exited", "source": "host", "t": n, "payload": {"status": 0}},
       {"type": "run.stopped", "source": "host", "t": n + 1, "payload": {"reason": "exited"}}]
for i in range(0, n, 256):  # mkrecord appends at most 256 in one commit
    lines = "".join(json.dumps(e) + "\n" for e in ev[i:i + 256])
    if subprocess.run([mk, log, run], input=lines.encode()).returncode:
        sys.exit("bench_mcp: mkrecord failed")
PY
"$SB" daemon start >/dev/null 2>&1 || { echo "bench_mcp: daemon start failed" >&2; exit 1; }
for i in $(seq 1 20); do "$SB" run --detach --name "r$i" -- true >/dev/null 2>&1; done
python3 - "$SB" "$EVRUN" "$EVENTS" <<'PY'
import json, subprocess, sys, time

sb, evrun, nevents = sys.argv[1], sys.argv[2], int(sys.argv[3])

def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]

p = subprocess.Popen([sb, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL)
def rpc(i, method, params):
    p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": i, "method": method,
                               "params": params}) + "\n").encode())
    p.stdin.flush()
    m = json.loads(p.stdout.readline())
    assert m.get("id") == i, m
    return m
rpc(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                      "clientInfo": {"name": "bench", "version": "0"}})
mcp = []
for i in range(1, 521):
    t = time.perf_counter()
    m = rpc(i, "tools/call", {"name": "runs_list", "arguments": {}})
    if i > 20:  # the first calls warm up
        mcp.append((time.perf_counter() - t) * 1000)
    assert len(m["result"]["structuredContent"]["runs"]) == 21, m
# the recorded run's events, paged through events_read
got, frm, i = 0, 1, 1000
t = time.perf_counter()
while True:
    i += 1
    r = rpc(i, "tools/call", {"name": "events_read",
                              "arguments": {"run": evrun, "from": frm, "limit": 1000}})
    sc = r["result"]["structuredContent"]
    got += len(sc["events"])
    frm = sc["next"]
    if sc["end"] or not sc["events"]:
        break
mcp_ev = time.perf_counter() - t
assert got == nevents, (got, nevents)
p.stdin.close()
p.wait()
cli = []
for i in range(105):
    t = time.perf_counter()
    out = subprocess.run([sb, "ps", "--json"], capture_output=True, check=True).stdout
    if i >= 5:
        cli.append((time.perf_counter() - t) * 1000)
    assert len(json.loads(out)) == 21
t = time.perf_counter()
out = subprocess.run([sb, "events", evrun, "--json"], capture_output=True, check=True).stdout
cli_ev = time.perf_counter() - t
assert len(out.splitlines()) == nevents, len(out.splitlines())
print("bench mcp_call_p50 %.2f ms" % pct(mcp, 0.5))
print("bench mcp_call_p99 %.2f ms" % pct(mcp, 0.99))
print("bench mcp_cli_p50 %.2f ms" % pct(cli, 0.5))
print("bench mcp_cli_p99 %.2f ms" % pct(cli, 0.99))
print("bench mcp_call_vs_cli_p50 %.2f ratio" % (pct(mcp, 0.5) / pct(cli, 0.5)))
print("bench mcp.events_per_s %.0f events/s" % (nevents / mcp_ev))
print("bench mcp.cli_events_per_s %.0f events/s" % (nevents / cli_ev))
print("bench mcp.events_vs_cli %.2f ratio" % (cli_ev / mcp_ev))
PY
