#!/bin/sh
# bench_mcp.sh - the MCP server's cost per call (make bench BENCH=mcp).
# Prints only lines "bench NAME VALUE UNIT" (diagnostics go to stderr):
#   mcp_call_p50, mcp_call_p99   ms from writing a tools/call runs_list line
#                                to `sanbox mcp` to reading its answer, 500
#                                calls one after the other on one server
#   mcp_cli_p50, mcp_cli_p99     ms of the same request through the CLI:
#                                `sanbox ps --json`, a process each, 100 times
#   mcp_call_vs_cli_p50          the ratio of the two p50s
# Against a daemon of a fresh state directory holding 20 runs (a stand-in
# QEMU that fails at once: no microVM), started before the clock starts.
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
"$SB" daemon start >/dev/null 2>&1 || { echo "bench_mcp: daemon start failed" >&2; exit 1; }
for i in $(seq 1 20); do "$SB" run --detach --name "r$i" -- true >/dev/null 2>&1; done
python3 - "$SB" <<'PY'
import json, subprocess, sys, time

sb = sys.argv[1]

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
    assert len(m["result"]["structuredContent"]["runs"]) == 20, m
p.stdin.close()
p.wait()
cli = []
for i in range(105):
    t = time.perf_counter()
    out = subprocess.run([sb, "ps", "--json"], capture_output=True, check=True).stdout
    if i >= 5:
        cli.append((time.perf_counter() - t) * 1000)
    assert len(json.loads(out)) == 20
print("bench mcp_call_p50 %.2f ms" % pct(mcp, 0.5))
print("bench mcp_call_p99 %.2f ms" % pct(mcp, 0.99))
print("bench mcp_cli_p50 %.2f ms" % pct(cli, 0.5))
print("bench mcp_cli_p99 %.2f ms" % pct(cli, 0.99))
print("bench mcp_call_vs_cli_p50 %.2f ratio" % (pct(mcp, 0.5) / pct(cli, 0.5)))
PY
