#!/usr/bin/env python3
"""netsrv.py - the test servers of the network tests, in one process.

Started by lib/netlab.sh in the namespace standing for the internet. Every
connection, datagram, request, ClientHello and DNS query is logged as one
JSON line to --log, flushed at once and before the server answers (a
client that got its answer finds its line there); a line {"kind": "ready"}
follows once every server listens. Addresses are ADDR:PORT or [ADDR6]:PORT.

  --tcp ADDR:PORT     banner "hello from ADDR:PORT\\n", then an echo
  --udp ADDR:PORT     echo of every datagram
  --http ADDR:PORT    200 OK with the body "host=HOST\\n" (HOST: the Host header)
  --tls ADDR:PORT     TLS with a self-signed certificate per --tls-name
                      (openssl CLI, into --cert-dir), then as --http with
                      the body "sni=NAME host=HOST\\n"
  --dns ADDR:PORT     DNS over UDP and TCP from the --record table
                      (authoritative, TTL 30; NXDOMAIN for other names)
  --record NAME=TYPE:VALUE   TYPE is A, AAAA or TXT; repeat for more
Log lines: {"t": UNIX_TIME, "kind": tcp|udp|http|tls|dns|error|ready, "server":
"ADDR:PORT", "from": "ADDR:PORT", ...}; see each handler for the rest.
"""
import argparse
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time

TYPES = {1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 15: "MX", 16: "TXT",
         28: "AAAA", 33: "SRV", 64: "SVCB", 65: "HTTPS", 255: "ANY"}
TYPE_CODES = {v: k for k, v in TYPES.items()}
RCODES = {0: "NOERROR", 1: "FORMERR", 3: "NXDOMAIN"}
IDLE = 30  # seconds a connection may stay silent

log_lock = threading.Lock()
log_file = None


def log(kind, **fields):
    line = json.dumps(dict(t=round(time.time(), 3), kind=kind, **fields))
    with log_lock:
        log_file.write(line + "\n")
        log_file.flush()


def parse_addr(text):
    """'1.2.3.4:80' or '[::1]:80' -> (family, host, port)."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    return family, host, int(port)


def fmt(sockaddr):
    host, port = sockaddr[0], sockaddr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def show(data):
    """Bytes as text for the log: at most 200, undecodable ones escaped."""
    return data[:200].decode("utf-8", "backslashreplace")


def listen(text, kind):
    family, host, port = parse_addr(text)
    s = socket.socket(family, kind)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind((host, port))
    if kind == socket.SOCK_STREAM:
        s.listen(64)
    return s


def spawn(fn, *args):
    threading.Thread(target=fn, args=args, daemon=True).start()


def serve_stream(sock, handler):
    """Accepts connections on sock forever, each handled on its own thread."""
    server = fmt(sock.getsockname())
    while True:
        conn, peer = sock.accept()
        conn.settimeout(IDLE)
        spawn(guarded, handler, conn, server, fmt(peer))


def guarded(handler, conn, server, peer):
    try:
        handler(conn, server, peer)
    except (OSError, ValueError) as e:
        log("error", server=server, **{"from": peer}, error=str(e))
    finally:
        conn.close()


# ---- TCP banner and echo ----

def tcp_handler(conn, server, peer):
    """Logs {"event": "connect"}, then {"event": "close", "bytes", "data"}."""
    log("tcp", event="connect", server=server, **{"from": peer})
    conn.sendall(f"hello from {server}\n".encode())
    got = b""
    try:
        while data := conn.recv(65536):
            got += data
            conn.sendall(data)
    finally:
        log("tcp", event="close", server=server, **{"from": peer},
            bytes=len(got), data=show(got))


def serve_udp(sock):
    """Echoes every datagram; logs {"bytes", "data"}."""
    server = fmt(sock.getsockname())
    while True:
        data, peer = sock.recvfrom(65536)
        log("udp", server=server, **{"from": fmt(peer)}, bytes=len(data), data=show(data))
        sock.sendto(data, peer)


# ---- HTTP, plain and over TLS ----

def read_request(conn):
    """(method, path, host) of the HTTP request on conn; None if there is none."""
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    if not data:
        return None
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    parts = head[0].strip().split(" ")
    host = next((h.split(":", 1)[1].strip() for h in head[1:]
                 if h.lower().startswith("host:")), None)
    return parts[0], parts[1] if len(parts) > 1 else "", host


def answer(conn, body):
    body = body.encode()
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                 b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))


def http_handler(conn, server, peer):
    """Logs {"method", "path", "host"} (host null without a Host header)."""
    req = read_request(conn)
    if req is None:
        log("http", event="empty", server=server, **{"from": peer})
        return
    method, path, host = req
    log("http", server=server, **{"from": peer}, method=method, path=path, host=host)
    answer(conn, f"host={host}\n")


def make_tls(names, cert_dir):
    """One server context per name, each with its self-signed certificate
    CERT_DIR/NAME.pem (key NAME.key); the first name's is the default."""
    contexts = {}
    for name in names:
        cert, key = os.path.join(cert_dir, name + ".pem"), os.path.join(cert_dir, name + ".key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                        "-subj", "/CN=" + name, "-addext", "subjectAltName=DNS:" + name,
                        "-keyout", key, "-out", cert],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        contexts[name] = ctx
    default = contexts[names[0]]

    def on_sni(tls, name, _ctx):
        # logs {"event": "clienthello", "sni"} (sni null when the client sent none)
        server, peer = tls.netlab
        tls.netlab_sni = name
        log("tls", event="clienthello", server=server, **{"from": peer}, sni=name)
        if name in contexts:
            tls.context = contexts[name]

    default.sni_callback = on_sni
    return default


def tls_handler(ctx):
    def handle(conn, server, peer):
        """Logs the ClientHello (in on_sni), then {"event": "request", "sni",
        "method", "path", "host"} or {"event": "failed", "error"}."""
        tls = ctx.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        tls.netlab = (server, peer)
        try:
            tls.do_handshake()
            req = read_request(tls)
        except (OSError, ssl.SSLError) as e:
            log("tls", event="failed", server=server, **{"from": peer}, error=str(e))
            return
        sni = getattr(tls, "netlab_sni", None)
        method, path, host = req or ("", "", None)
        log("tls", event="request", server=server, **{"from": peer}, sni=sni,
            method=method, path=path, host=host)
        answer(tls, f"sni={sni} host={host}\n")
        tls.close()
    return handle


# ---- DNS ----

def dns_name(msg, off):
    """(name, offset after it) of the uncompressed name at off."""
    labels = []
    while True:
        n = msg[off]
        if n == 0:
            return ".".join(labels).lower(), off + 1
        if n & 0xC0 or off + 1 + n > len(msg):
            raise ValueError("bad name")
        labels.append(msg[off + 1:off + 1 + n].decode("ascii", "backslashreplace"))
        off += 1 + n


def dns_answer(msg, table, server, peer, proto):
    """The reply to query msg from the table; logs {"proto", "name", "type",
    "rcode", "answers"} ({"error"} for a message it cannot read: no reply)."""
    try:
        qid, flags, qd = struct.unpack("!HHH", msg[:6])
        if flags & 0x8000 or qd != 1:
            raise ValueError("not one query")
        name, off = dns_name(msg, 12)
        qtype, qclass = struct.unpack("!HH", msg[off:off + 4])
    except (ValueError, IndexError, struct.error) as e:
        log("dns", server=server, **{"from": peer}, proto=proto, error=str(e),
            data=show(msg))
        return None
    question = msg[12:off + 4]
    records = table.get(name)
    found = [v for t, v in records or [] if TYPE_CODES[t] == qtype]
    rcode = 0 if records is not None else 3
    log("dns", server=server, **{"from": peer}, proto=proto, name=name,
        type=TYPES.get(qtype, f"TYPE{qtype}"), rcode=RCODES[rcode],
        answers=[str(v) for v in found])
    out = struct.pack("!HHHHHH", qid, 0x8400 | (flags & 0x0100) | 0x80 | rcode, 1,
                      len(found), 0, 0) + question
    for v in found:
        if qtype == 16:
            raw = v.encode()
            data = b"".join(bytes([len(raw[i:i + 255])]) + raw[i:i + 255]
                            for i in range(0, max(len(raw), 1), 255))
        else:
            data = ipaddress.ip_address(v).packed
        out += struct.pack("!HHHIH", 0xC00C, qtype, 1, 30, len(data)) + data
    return out


def serve_dns_udp(sock, table):
    server = fmt(sock.getsockname())
    while True:
        msg, peer = sock.recvfrom(65536)
        reply = dns_answer(msg, table, server, fmt(peer), "udp")
        if reply:
            sock.sendto(reply, peer)


def dns_tcp_handler(table):
    def handle(conn, server, peer):
        while True:
            head = conn.recv(2, socket.MSG_WAITALL)
            if len(head) < 2:
                return
            (n,) = struct.unpack("!H", head)
            msg = conn.recv(n, socket.MSG_WAITALL)
            reply = dns_answer(msg, table, server, peer, "tcp")
            if not reply:
                return
            conn.sendall(struct.pack("!H", len(reply)) + reply)
    return handle


def main():
    global log_file
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--log", required=True)
    for opt in ("--tcp", "--udp", "--http", "--tls", "--dns", "--tls-name", "--record"):
        ap.add_argument(opt, action="append", default=[])
    ap.add_argument("--cert-dir")
    args = ap.parse_args()
    log_file = open(args.log, "a", encoding="utf-8")
    table = {}
    for rec in args.record:
        name, _, value = rec.partition("=")
        rtype, _, data = value.partition(":")
        if rtype not in ("A", "AAAA", "TXT"):
            sys.exit(f"netsrv: --record {rec}: TYPE is A, AAAA or TXT")
        if rtype != "TXT":
            ipaddress.ip_address(data)
        table.setdefault(name.lower().rstrip("."), []).append((rtype, data))
    cert_dir = args.cert_dir or tempfile.mkdtemp(prefix="netsrv.")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        ctx = None
        if args.tls:
            if not args.tls_name:
                sys.exit("netsrv: --tls needs --tls-name")
            ctx = make_tls(args.tls_name, cert_dir)
        # bind everything first: an address that fails stops the start
        jobs = [(serve_stream, listen(a, socket.SOCK_STREAM), tcp_handler) for a in args.tcp]
        jobs += [(serve_udp, listen(a, socket.SOCK_DGRAM)) for a in args.udp]
        jobs += [(serve_stream, listen(a, socket.SOCK_STREAM), http_handler)
                 for a in args.http]
        jobs += [(serve_stream, listen(a, socket.SOCK_STREAM), tls_handler(ctx))
                 for a in args.tls]
        for a in args.dns:
            jobs.append((serve_dns_udp, listen(a, socket.SOCK_DGRAM), table))
            jobs.append((serve_stream, listen(a, socket.SOCK_STREAM), dns_tcp_handler(table)))
        for fn, *fargs in jobs:
            spawn(fn, *fargs)
        log("ready", pid=os.getpid(), servers=len(jobs))
        while True:
            signal.pause()
    finally:
        if not args.cert_dir:
            shutil.rmtree(cert_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
