#!/bin/sh
# sanbox mcp against a hostile client (no microVM: runs fail at once, or
# stay running without a guest), on stdio then over HTTP (--http).
# stdio: garbage, a 100 MB line, unterminated JSON,
# a batch, a notification without a method, a request before initialize,
# a reused id, 10,000 requests, a cancelled wait; tool arguments that miss
# a field, have the wrong type, name an unknown template, run a field over
# its length, name no run or a runner the daemon has not. Every stdout line must be JSON-RPC, every
# request answered (or, cancelled, not), and the server must keep serving
# and exit 0 at the end of its input. HTTP: garbage bodies, a batch, an
# empty body, a 9 MiB body, a huge token, 40 sessions over a limit of 16,
# 40 idle connections from one peer; it must keep serving and exit 0 at
# SIGTERM.
. "$(dirname "$0")/lib/bootless.sh"

"$SB" daemon start >/dev/null 2>&1 || fail "daemon start"
runs_hang
python3 - "$SB" <<'EOF' || exit 1
import json, subprocess, sys, threading, time

sb = sys.argv[1]
p = subprocess.Popen([sb, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL)
got, lock = [], threading.Condition()

def reader():
    for line in p.stdout:
        try:
            m = json.loads(line)
        except ValueError:
            m = {"notjson": line[:200]}
        with lock:
            got.append(m)
            lock.notify_all()

threading.Thread(target=reader, daemon=True).start()

def fail(msg):
    print("FAIL mcp_hostile: " + msg)
    p.kill()
    sys.exit(1)

def send(obj):
    p.stdin.write((obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n")
    p.stdin.flush()

def answer(i, timeout=20):
    end = time.time() + timeout
    with lock:
        while True:
            for m in got:
                if m.get("id") == i and ("result" in m or "error" in m):
                    return m
            if time.time() > end:
                fail("no answer to id %r" % (i,))
            lock.wait(0.2)

def null_errors():
    with lock:
        return [m for m in got if m.get("id", 0) is None]

def call(i, name, args, meta=None):
    params = {"name": name, "arguments": args}
    if meta:
        params["_meta"] = meta
    send({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params})
    return answer(i, 60)

def tool_error(i, name, args, want):
    r = call(i, name, args)["result"]
    text = r["content"][0]["text"]
    if not r.get("isError") or want not in text:
        fail("%s %s: wanted an error with %r, got %r" % (name, args, want, text))

# before initialize: refused, the server goes on
send({"jsonrpc": "2.0", "id": "early", "method": "tools/list"})
if answer("early")["error"]["code"] != -32600:
    fail("tools/list before initialize not refused")
send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
      "params": {"protocolVersion": "1999-01-01", "capabilities": {},
                 "clientInfo": {"name": "hostile", "version": "0"}}})
if answer(1)["result"]["protocolVersion"] != "2025-11-25":
    fail("an unknown revision did not get the newest")
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
send({"jsonrpc": "2.0", "id": 2, "method": "initialize",
      "params": {"protocolVersion": "2025-03-26"}})
if answer(2)["error"]["code"] != -32600:
    fail("a second initialize was not refused")

# garbage, unterminated JSON, a batch, a notification without a method
n0 = len(null_errors())
send(b"\x00\xff garbage {{{")
send(b'{"jsonrpc":"2.0","id":5,"method":"ping"')
send([{"jsonrpc": "2.0", "id": 6, "method": "ping"}])
send({"jsonrpc": "2.0"})
send({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": [1]})
send({"jsonrpc": "1.0", "id": 8, "method": "ping"})
send({"jsonrpc": "2.0", "id": 9, "method": "no/such"})
send({"jsonrpc": "2.0", "id": 10, "result": {}})  # a response nobody asked for
if answer(7)["error"]["code"] != -32602:
    fail("params as an array not refused")
if answer(8)["error"]["code"] != -32600:
    fail("jsonrpc 1.0 not refused")
if answer(9)["error"]["code"] != -32601:
    fail("an unknown method not refused")
codes = sorted(m["error"]["code"] for m in null_errors()[n0:])
if codes != sorted([-32700, -32700, -32600, -32600]):
    fail("garbage, unterminated, batch, no method: got %r" % codes)

# a 100 MB line: one parse error, then the server reads on
n0 = len(null_errors())
chunk = b"a" * (1 << 20)
for _ in range(100):
    p.stdin.write(chunk)
p.stdin.write(b"\n")
p.stdin.flush()
send({"jsonrpc": "2.0", "id": 11, "method": "ping"})
answer(11, 60)
big = null_errors()[n0:]
if len(big) != 1 or "8 MiB" not in big[0]["error"]["message"]:
    fail("a 100 MB line: %r" % big)

# tool arguments checked against the schema, errors name the field
tool_error(20, "events_read", {}, "run: missing")
tool_error(21, "run_start", {"command": ["true"], "cpus": "2"}, "cpus: expected an integer")
tool_error(22, "run_start", {"command": ["true"], "template": "nope"}, "template")
tool_error(23, "run_start", {"command": ["true"], "name": "n" * 100}, "name: 100 characters")
tool_error(24, "fs_read", {"run": "nope", "path": "a"}, "run: no run 'nope'")
tool_error(25, "wait", {"runs": ["nope"], "timeout_s": 1}, "runs[0]: no run 'nope'")
tool_error(26, "run_start", {"command": ["true"], "colour": "red"}, "colour: not a known field")
tool_error(27, "run_start", {"prompt": "x", "command": ["true"]}, "not both")
tool_error(28, "runs_list", {"limit": 0}, "limit: 0 is below the minimum")
tool_error(29, "events_read", {"run": 7}, "run: expected a string, got an integer")
tool_error(31, "run_start", {"command": ["true"], "inputs": [{"path": "a/../../x", "content": ""}]},
           "inputs[0].path: a/../../x has an empty, . or .. component")
tool_error(32, "run_start", {"command": ["true"], "inputs": [{"path": "/etc/passwd", "content": ""}]},
           "inputs[0].path: /etc/passwd is not under /workspace")
tool_error(33, "run_start", {"command": ["true"], "inputs": [{"path": "a", "content_base64": "!!"}]},
           "inputs[0].content_base64: not base64")
tool_error(34, "run_start", {"command": ["true"], "inputs": [{"path": "a"}]},
           "inputs[0].content: give content or content_base64")
tool_error(35, "run_start", {"command": ["true"], "inputs": [{"path": "a", "content": "x"}] * 65},
           "inputs: 65 items, over the limit of 64")
send({"jsonrpc": "2.0", "id": 30, "method": "tools/call", "params": {"name": "nope"}})
if answer(30)["error"]["code"] != -32602:
    fail("an unknown tool not refused")

# a run that stays running, a wait on it, its id reused, then cancelled
r = call(40, "run_start", {"command": ["sleep", "600"], "name": "hang"})["result"]
run = r["structuredContent"]["run"]
# a subscription names its run as the CLI does (a prefix here), once resolved
send({"jsonrpc": "2.0", "id": 141, "method": "resources/subscribe",
      "params": {"uri": "sanbox://run/zzzzzz"}})
if answer(141)["error"]["code"] != -32002:
    fail("a subscription to no run not refused")
send({"jsonrpc": "2.0", "id": 142, "method": "resources/subscribe",
      "params": {"uri": "sanbox://run/" + run[:5]}})
if answer(142).get("result") != {}:
    fail("a subscription by a prefix of the run's id refused")
send({"jsonrpc": "2.0", "id": "w", "method": "tools/call",
      "params": {"name": "wait", "arguments": {"runs": [run], "timeout_s": 600},
                 "_meta": {"progressToken": "t"}}})
time.sleep(1)
send({"jsonrpc": "2.0", "id": "w", "method": "ping"})
if answer("w").get("error", {}).get("code") != -32600:
    fail("a reused id not refused")
send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "w"}})
time.sleep(1.5)
with lock:
    late = [m for m in got if m.get("id") == "w" and "result" in m]
if late:
    fail("a cancelled wait answered")
# a wait bounded by its timeout returns what it has and how to go on
w = call(41, "wait", {"runs": [run], "timeout_s": 1})["result"]["structuredContent"]
if w["done"] or w["still_live"] != [run] or "again" not in w["next"]:
    fail("a bounded wait: %r" % w)
call(42, "stop", {"run": run})

# run_start, fork and resume on a runner the daemon has not: a tool error
# naming it, and no run made
def nruns():
    return len(subprocess.run([sb, "ps", "--all", "-q"], stdout=subprocess.PIPE,
                              check=True).stdout.split())
call(43, "wait", {"runs": [run], "timeout_s": 30})
last = call(44, "events_read", {"run": run})["result"]["structuredContent"]["last_offset"]
before = nruns()
tool_error(45, "run_start", {"command": ["true"], "runner": "nosuch"},
           "runner: no runner 'nosuch' here: this daemon has local")
for i, tool in ((46, "fork"), (47, "resume")):
    tool_error(i, tool, {"run": run, "at": last, "runner": "nosuch"},
               "snapshots are on runner local: a fork or resume of it runs there, not on nosuch")
tool_error(48, "run_start", {"command": ["true"], "runner": "r" * 32}, "runner: 32 characters")
if nruns() != before:
    fail("a run on no runner was made: %d runs, were %d" % (nruns(), before))

# 10,000 requests, all answered, ids as given
for i in range(10000):
    send({"jsonrpc": "2.0", "id": 100000 + i, "method": "ping"})
for i in range(100):
    send({"jsonrpc": "2.0", "id": 200000 + i, "method": "tools/call",
          "params": {"name": "groups_list", "arguments": {}}})
want = set(range(100000, 110000)) | set(range(200000, 200100))
end = time.time() + 120
with lock:
    while time.time() < end:
        missing = want - set(m.get("id") for m in got if "result" in m)
        if not missing:
            break
        lock.wait(0.5)
if missing:
    fail("%d requests unanswered, first %r" % (len(missing), sorted(missing)[:3]))

p.stdin.close()
try:
    rc = p.wait(15)
except subprocess.TimeoutExpired:
    fail("no exit at the end of the input")
with lock:
    bad = [m for m in got if "notjson" in m or m.get("jsonrpc") != "2.0"]
if bad:
    fail("stdout held what is not JSON-RPC: %r" % bad[:2])
if rc != 0:
    fail("exit %d" % rc)
print("ok mcp_hostile: %d messages answered" % len(got))
EOF

# ---- the Streamable HTTP transport ----
printf '{"remote": {"max_conns": 16}}\n' >"$SANBOX_HOME/sanboxd.json"
token=$("$SB" admin token create hostile) || fail "token create"
"$SB" mcp --http 127.0.0.1:0 2>"$tmp/http.err" &
mcp_pid=$!
bg="$bg $mcp_pid"
for i in $(seq 1 50); do
	port=$(sed -n 's/.*on port \([0-9]*\).*/\1/p' "$tmp/http.err")
	[ -n "$port" ] && break
	sleep 0.1
done
[ -n "$port" ] || fail "mcp --http did not start: $(cat "$tmp/http.err")"
python3 - "$port" "$token" <<'EOF' || exit 1
import http.client, json, socket, sys, time

port, token = int(sys.argv[1]), sys.argv[2]
auth = {"Authorization": "Bearer " + token, "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream"}

def fail(msg):
    print("FAIL mcp_hostile http: " + msg)
    sys.exit(1)

def post(body, headers=None, chunked=False):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    h = dict(auth, **(headers or {}))
    if chunked:
        c.request("POST", "/mcp", body=iter(body), headers=h, encode_chunked=True)
    else:
        c.request("POST", "/mcp", body=body if isinstance(body, bytes) else
                  json.dumps(body).encode(), headers=h)
    r = c.getresponse()
    out = (r.status, r.getheader("Mcp-Session-Id"), r.read())
    c.close()
    return out

def initialize():
    st, sid, body = post({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                          "params": {"protocolVersion": "2025-06-18"}})
    if st != 200 or not sid:
        fail("initialize: %d %r" % (st, body[:200]))
    return sid

def ping(sid):
    return post({"jsonrpc": "2.0", "id": 2, "method": "ping"}, {"Mcp-Session-Id": sid})[0]

sid = initialize()
for body, code in ((b"\x00\xff garbage {{{", -32700), (b'{"jsonrpc":"2.0","id":5', -32700),
                   (b'[{"jsonrpc":"2.0","id":6,"method":"ping"}]', -32600), (b"", -32600)):
    st, _, out = post(body, {"Mcp-Session-Id": sid})
    if st != 400 or json.loads(out)["error"]["code"] != code:
        fail("body %r: %d %r" % (body[:20], st, out[:200]))
st, _, out = post([b"a" * (1 << 20)] * 9, {"Mcp-Session-Id": sid}, chunked=True)
if st != 413:
    fail("a 9 MiB body: %d" % st)
st, _, out = post({"jsonrpc": "2.0", "id": 3, "method": "ping"},
                  {"Authorization": "Bearer " + "a" * 20000, "Mcp-Session-Id": sid})
if st not in (401, 413, 431):
    fail("a 20000-byte token: %d" % st)
if ping(sid) != 200:
    fail("the session stopped serving after garbage")
# sessions over the limit: the one idle longest makes room
sids = [initialize() for _ in range(40)]
if ping(sids[-1]) != 200 or ping(sid) != 404:
    fail("40 sessions over a limit of 16: newest %d, first %d" % (ping(sids[-1]), ping(sid)))
# idle connections from one peer: at most max_conns_per_peer (16) held
socks = []
for _ in range(40):
    s = socket.create_connection(("127.0.0.1", port))
    socks.append(s)
time.sleep(0.5)
for s in socks:
    s.close()
time.sleep(0.5)
if ping(sids[-1]) != 200:
    fail("no longer serving after 40 idle connections")
print("ok mcp_hostile http: still serving")
EOF
kill "$mcp_pid"
wait "$mcp_pid" || fail "mcp --http: exit $? at SIGTERM"
