#!/usr/bin/env python3
"""Hostile peers of sanboxd's sockets (tests/e2e/hostile_sockets.sh).

Each mode attacks one way and prints one line of figures; the shell test
checks the daemon's answers around it. Wire (SPEC.md, "Sockets"): header
00 'S' 'P' 00, protocol (REQ 0x30, SUB 0x21), 00 00; a message over a unix
socket: 01, 64-bit big-endian length, bytes; over TLS: the length, bytes.
"""
import os
import resource
import socket
import ssl
import struct
import sys
import time

REQ_HDR = b"\0SP\0\0\x30\0\0"
SUB_HDR = b"\0SP\0\0\x21\0\0"


def unix(path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    return s


def tls(port):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def recv_exact(s, n):
    d = b""
    while len(d) < n:
        x = s.recv(n - len(d))
        if not x:
            return None
        d += x
    return d


def mp_str(s):
    b = s.encode()
    return (bytes([0xA0 | len(b)]) if len(b) < 32 else b"\xd9" + bytes([len(b)])) + b


def closed_by_peer(s, wait):
    s.settimeout(wait)
    try:
        while True:
            x = s.recv(65536)
            if not x:
                return True
    except (socket.timeout, TimeoutError):
        return False
    except OSError:
        return True


def garbage(path, n):
    """Random bytes, truncated headers, connect-and-close: n times each."""
    for i in range(n):
        for what in range(4):
            try:
                s = unix(path)
                if what == 0:
                    s.send(os.urandom(1 + i % 64))
                elif what == 1:
                    s.send(REQ_HDR[: i % 8])
                elif what == 2:
                    # a good header, then a message of absurd length
                    s.send(REQ_HDR + b"\x01" + struct.pack(">Q", 2**63 + i) + os.urandom(32))
                else:
                    # a request of 9 hops (nng allows 8)
                    s.send(REQ_HDR + b"\x01" + struct.pack(">Q", 40) + b"\0\0\0\1" * 9 + b"\x80")
                s.close()
            except OSError:
                pass
    print("garbage: %d connections" % (4 * n))


def stall(path, n, secs):
    """n connections that send half a header and wait: closed by the daemon?"""
    conns = []
    for _ in range(n):
        s = unix(path)
        s.send(REQ_HDR[:3])
        conns.append(s)
    t0 = time.time()
    closed = sum(closed_by_peer(s, max(0.1, secs - (time.time() - t0))) for s in conns)
    print("stall: %d of %d closed by the daemon within %.1f s" % (closed, n, secs))


def raise_nofile(n):
    """Lets this process hold n more descriptors than it has."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 64), hard))


def idle_flood(path, n, hold):
    """n connections that finish the header and send no request, held for
    hold seconds: how many did the daemon close?"""
    raise_nofile(n)
    conns, refused = [], 0
    for _ in range(n):
        try:
            s = unix(path)
            s.sendall(REQ_HDR)
            conns.append(s)
        except OSError:
            refused += 1
    time.sleep(hold)
    closed = sum(closed_by_peer(s, 0.01) for s in conns)
    for s in conns:
        s.close()
    print("idle_flood: %d connected, %d refused, %d closed by the daemon within %.1f s" %
          (len(conns), refused, closed, hold))


def trickle(path, n, mib, secs):
    """n requests that each declare mib MiB and send a byte of it every
    half second for secs seconds: how many did the daemon close?"""
    conns, closed, t0 = [], 0, time.time()
    for _ in range(n):
        s = unix(path)
        s.sendall(REQ_HDR + b"\x01" + struct.pack(">Q", 4 + (mib << 20)) + b"\x80\0\0\1")
        conns.append(s)
    while conns and time.time() - t0 < secs:
        for s in list(conns):
            try:
                s.send(b"\x81")
            except OSError:
                conns.remove(s)
                closed += 1
        time.sleep(0.5)
    closed += sum(closed_by_peer(s, 0.01) for s in conns)
    for s in conns:
        s.close()
    print("trickle: %d of %d requests of %d MiB closed by the daemon within %.1f s" %
          (closed, n, mib, time.time() - t0))


def tcp_flood(port, n, hold):
    """n plain TCP connections (no TLS) held open for hold seconds. A first
    line when every connection is made (all open at once), the second at
    the end."""
    raise_nofile(n)
    conns, refused = [], 0
    for _ in range(n):
        try:
            conns.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        except OSError:
            refused += 1
    print("tcp_flood: %d connected, %d refused at once" % (len(conns), refused), flush=True)
    time.sleep(hold)
    closed = sum(closed_by_peer(s, 0.01) for s in conns)
    for s in conns:
        s.close()
    print("tcp_flood: %d closed by the daemon" % closed)


def preauth(port, n, mib):
    """n TLS connections, each declaring a request of mib MiB with no token
    and sending all but 1 MiB of it."""
    conns, sent = [], 0
    for _ in range(n):
        try:
            s = tls(port)
            s.sendall(REQ_HDR)
            recv_exact(s, 8)
            s.sendall(struct.pack(">Q", mib << 20) + b"\x80\0\0\1" + b"\x81" + mp_str("op"))
            conns.append(s)
        except OSError:
            pass
    opened = len(conns)
    chunk = b"x" * (1 << 20)
    for _ in range(mib - 1):
        for s in list(conns):
            try:
                s.settimeout(5)
                s.sendall(chunk)
                sent += len(chunk)
            except OSError:
                conns.remove(s)
    print("preauth: %d connections, %d MiB sent, %d still open at the end" %
          (opened, sent >> 20, len(conns)))


def wrong_tokens(port, n, secs):
    """n requests with a wrong token, pipelined on one TLS connection:
    how many answers in secs, and was the connection closed?"""
    s = tls(port)
    s.sendall(REQ_HDR)
    recv_exact(s, 8)
    body = b"\x82" + mp_str("op") + mp_str("health") + mp_str("token") + mp_str("0" * 64)
    for i in range(n):
        s.sendall(struct.pack(">Q", 4 + len(body)) + struct.pack(">I", 0x80000000 | i) + body)
    answers, closed, t0 = 0, False, time.time()
    s.settimeout(0.2)
    while time.time() - t0 < secs:
        try:
            h = s.recv(8)
        except (socket.timeout, TimeoutError):
            continue
        except OSError:
            closed = True
            break
        if not h:
            closed = True
            break
        h += recv_exact(s, 8 - len(h)) or b""
        n_ = struct.unpack(">Q", h)[0]
        if recv_exact(s, n_) is None:
            closed = True
            break
        answers += 1
    print("wrong_tokens: %d answers in %.1f s, closed %s" % (answers, time.time() - t0, closed))


def sub_garbage(path, n):
    """Subscribers that send bytes they should not, and never read."""
    conns = []
    for _ in range(n):
        s = unix(path)
        s.send(SUB_HDR + os.urandom(4096))
        conns.append(s)
    time.sleep(1)
    for s in conns:
        s.close()
    print("sub_garbage: %d" % n)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode in ("garbage", "sub_garbage"):
        globals()[mode](args[0], int(args[1]))
    elif mode == "stall":
        stall(args[0], int(args[1]), float(args[2]))
    elif mode == "idle_flood":
        idle_flood(args[0], int(args[1]), float(args[2]))
    elif mode == "trickle":
        trickle(args[0], int(args[1]), int(args[2]), float(args[3]))
    elif mode == "tcp_flood":
        tcp_flood(int(args[0]), int(args[1]), float(args[2]))
    elif mode == "preauth":
        preauth(int(args[0]), int(args[1]), int(args[2]))
    elif mode == "wrong_tokens":
        wrong_tokens(int(args[0]), int(args[1]), float(args[2]))
