#!/usr/bin/python3
"""verify_bundle.py - an independent verifier of Sanbox audit bundles.

Written from SPEC.md's "Audit" section alone (hashlib and PyNaCl, nothing
of Sanbox's own code): it checks what `sanbox verify` checks, in the same
order, and names the first failure the same way (file, line, blob).

    verify_bundle.py BUNDLE [--key VKEY] [--prior OLDER] [--json]

BUNDLE is a bundle directory or a tar of one; OLDER a checkpoint file or
a bundle. Exit 0: verified; 1: the bundle fails (one line on stderr
naming where); 2: bad usage.
"""
import base64
import hashlib
import json
import os
import struct
import stat
import sys
import tarfile
import tempfile

import nacl.exceptions
import nacl.signing

SOURCES = ["host", "guest", "gateway", "operator", "harness"]
EM_DASH = "\u2014 ".encode()
SMALL_MAX = 1 << 20  # checkpoint and key files are read up to this
PROOF_MAX = 64  # hashes a consistency proof holds at most
RUNS_MAX = 256  # runs a bundle holds at most
KEY_TEXT_MAX = 256  # a non-string map key's JSON text is cut here
DEPTH_MAX = 32  # nested msgpack arrays and maps


class Bad(Exception):
    """The bundle fails: the message names where."""


# ---- bytes, files, encodings ------------------------------------------

def sha256(*parts):
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.digest()


def node(left, right):
    return sha256(b"\x01", left, right)


def open_regular(d, name):
    """Opens d/name: a regular file, never through a symbolic link."""
    try:
        fd = os.open(os.path.join(d, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        why = "a symbolic link, not a file" if e.errno == 40 else e.strerror
        raise Bad(f"{name}: {why}")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Bad(f"{name}: not a regular file")
    return os.fdopen(fd, "rb")


def read_file(d, name, limit=None):
    with open_regular(d, name) as f:
        return f.read(limit) if limit else f.read()


def b64_exact(s, n):
    """Standard base64 with padding of exactly n bytes, else None."""
    try:
        b = base64.b64decode(s, validate=True)
    except (ValueError, TypeError):
        return None
    return b if len(b) == n else None


def hex_exact(s, n):
    """2n hex digits (either case) as n bytes, else None."""
    if not isinstance(s, str) or len(s) != 2 * n:
        return None
    if any(c not in "0123456789abcdefABCDEF" for c in s):
        return None
    return bytes.fromhex(s)


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


# ---- keys and checkpoints (C2SP signed note) --------------------------

def name_ok(b):
    return 0 < len(b) < 128 and all(0x20 < c <= 0x7E and c != 0x2B for c in b)


def key_hash(name, pk):
    return sha256(name, b"\n\x01", pk)[:4]


def key_parse(text):
    """NAME+HASH+BASE64(0x01 || public key) -> (name, hash, public key)."""
    words = text.split()
    t = words[0].encode() if words else b""
    parts = t.split(b"+", 2)
    if len(parts) == 3 and name_ok(parts[0]) and len(parts[1]) == 8 and \
            all(c in b"0123456789abcdef" for c in parts[1]):
        raw = b64_exact(parts[2], 33)
        if raw and raw[0] == 1 and key_hash(parts[0], raw[1:]) == bytes.fromhex(parts[1].decode()):
            return parts[0], bytes.fromhex(parts[1].decode()), raw[1:]
    raise Bad("not a verifier key (NAME+HASH+BASE64)")


def ckpt_body(note):
    """The checkpoint's (origin, size, root) and its signed text."""
    end = note.find(b"\n\n")
    if end < 0:
        raise Bad("checkpoint: no blank line before the signatures")
    lines = note[:end].split(b"\n")
    if not name_ok(lines[0]):
        raise Bad("checkpoint: line 1: not an origin")
    n = lines[1] if len(lines) > 1 else b""
    if not n or len(n) > 20 or not n.isdigit() or (len(n) > 1 and n[:1] == b"0") or \
            int(n) >= 1 << 64:
        raise Bad("checkpoint: line 2: not a tree size")
    root = b64_exact(lines[2], 32) if len(lines) == 3 else None
    if root is None:
        raise Bad("checkpoint: line 3: not a base64 root hash")
    return (lines[0], int(n), root), note[:end + 1]


def ckpt_verify(note, key):
    """Checks note's signature by key; returns (origin, size, root)."""
    ck, text = ckpt_body(note)
    name, khash, pk = key
    rest, line = note[len(text) + 1:], 5
    while rest:
        e = rest.find(b"\n")
        if e < 0 or e < len(EM_DASH) + 1 or not rest.startswith(EM_DASH):
            raise Bad(f"checkpoint: line {line}: not a signature line")
        sig_line, rest = rest[len(EM_DASH):e], rest[e + 1:]
        who, _, b64 = sig_line.partition(b" ")
        sig = b64_exact(b64, 68) if who == name else None
        if sig and sig[:4] == khash:
            try:
                nacl.signing.VerifyKey(pk).verify(text, sig[4:])
            except nacl.exceptions.BadSignatureError:
                raise Bad(f"checkpoint: line {line}: the signature by {name.decode()} does not verify")
            return ck
        line += 1
    raise Bad(f"checkpoint: no signature by key {name.decode()}+{khash.hex()}")


# ---- the tree (RFC 9162) and the multi-leaf proof ----------------------

def split(n):
    """The largest power of two below n (n > 1)."""
    k = 1
    while 2 * k < n:
        k *= 2
    return k


def gap(x, y, n, emit):
    """Emits the largest nodes of the tree of n leaves inside [x, y), left
    to right."""
    def walk(lo, hi):
        if hi <= x or lo >= y:
            return
        if lo >= x and hi <= y:
            emit(lo, hi)
            return
        k = split(hi - lo)
        walk(lo, lo + k)
        walk(lo + k, hi)
    if x < y <= n:
        walk(0, n)


class Fold:
    """Folds nodes [lo, hi) left to right into the root."""

    def __init__(self, n):
        self.n, self.stack = n, []

    def push(self, lo, hi, h):
        s = self.stack
        s.append((lo, hi, h))
        while len(s) >= 2:
            (l1, h1, a), (l2, h2, b) = s[-2], s[-1]
            size = h1 - l1
            if size & (size - 1) or h2 - l2 != size or l1 % (2 * size):
                break
            s[-2:] = [(l1, h2, node(a, b))]

    def root(self):
        if not self.n:
            return sha256()
        r = self.stack[-1][2]
        for _, _, h in reversed(self.stack[:-1]):
            r = node(h, r)
        return r


def consistency_ok(m, n, rm, rn, proof):
    """RFC 9162 2.1.4.2: the tree of n leaves (root rn) extends that of m."""
    if m > n:
        return False
    if m == 0 or m == n:
        return not proof and (m == 0 or rm == rn)
    if m & (m - 1) == 0:
        proof = [rm] + proof
    if not proof:
        return False
    fn, sn = m - 1, n - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = proof[0]
    for c in proof[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node(c, fr), node(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and fr == rm and sr == rn


# ---- payloads: msgpack and its JSON form -------------------------------

def utf8_lossy(b):
    """b as text, each byte of no valid UTF-8 sequence as U+FFFD."""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        pass
    out, i = [], 0
    while i < len(b):
        c = b[i]
        n = 1 if c < 0x80 else 2 if 0xC2 <= c < 0xE0 else 3 if 0xE0 <= c < 0xF0 else \
            4 if 0xF0 <= c <= 0xF4 else 0
        try:
            if n:
                out.append(b[i:i + n].decode("utf-8"))
                i += n
                continue
        except UnicodeDecodeError:
            pass
        out.append("\ufffd")
        i += 1
    return "".join(out)


def json_text(v):
    """v's compact JSON text as Sanbox writes it (reals as %.17g)."""
    if isinstance(v, float):
        t = "%.17g" % v
        return t if any(c in t for c in ".eE") else t + ".0"
    if isinstance(v, list):
        return "[" + ",".join(json_text(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + json_text(x)
                              for k, x in v.items()) + "}"
    return json.dumps(v, ensure_ascii=False)


def key_text(k):
    """A map key that is not a string: its JSON text, cut at KEY_TEXT_MAX
    bytes (on a character's boundary) with "..."."""
    t = json_text(k).encode()
    if len(t) > KEY_TEXT_MAX:
        cut = KEY_TEXT_MAX - 4
        while cut and (t[cut] & 0xC0) == 0x80:
            cut -= 1
        t = t[:cut] + b"..."
    return t.decode()


class Msgpack:
    """Reads msgpack bytes into their JSON form: bin and ext as base64 of
    their data, integers above 2^63 - 1 and floats as reals (NaN and
    infinities as null), a string key up to its first NUL, any other key
    as its JSON text; of a repeated key the last value."""
    NUMS = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
            0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
    CONSTS = {0xC0: None, 0xC2: False, 0xC3: True}

    def __init__(self, b):
        self.b, self.p = b, 0

    def take(self, n):
        if n > len(self.b) - self.p:
            raise ValueError("truncated")
        self.p += n
        return self.b[self.p - n:self.p]

    def uint(self, n):
        return int.from_bytes(self.take(n), "big")

    def number(self, t):
        v = struct.unpack(self.NUMS[t], self.take(struct.calcsize(self.NUMS[t])))[0]
        if isinstance(v, float):
            return v if v == v and abs(v) != float("inf") else None
        return float(v) if v > (1 << 63) - 1 else v

    def raw(self, t):
        """The data of a bin (0xc4-0xc6), ext (0xc7-0xc9) or fixext."""
        if t <= 0xC6:
            return self.take(self.uint(1 << (t - 0xC4)))
        n = self.uint(1 << (t - 0xC7)) if t <= 0xC9 else 1 << (t - 0xD4)
        self.take(1)  # the ext's type
        return self.take(n)

    def read(self, depth=0):
        t = self.uint(1)
        if t <= 0x7F or t >= 0xE0:
            return t if t <= 0x7F else t - 256
        if t in self.NUMS:
            return self.number(t)
        if t in self.CONSTS:
            return self.CONSTS[t]
        if 0xA0 <= t <= 0xBF or 0xD9 <= t <= 0xDB:
            return utf8_lossy(self.take(t & 0x1F if t <= 0xBF else self.uint(1 << (t - 0xD9))))
        if 0xC4 <= t <= 0xC9 or 0xD4 <= t <= 0xD8:
            return base64.b64encode(self.raw(t)).decode()
        if depth >= DEPTH_MAX:
            raise ValueError("nested too deep")
        if 0x90 <= t <= 0x9F or t in (0xDC, 0xDD):
            n = t & 0x0F if t <= 0x9F else self.uint(2 if t == 0xDC else 4)
            self.room(n)
            return [self.read(depth + 1) for _ in range(n)]
        if 0x80 <= t <= 0x8F or t in (0xDE, 0xDF):
            return self.map(t & 0x0F if t <= 0x8F else self.uint(2 if t == 0xDE else 4), depth)
        raise ValueError("no such type byte")

    def room(self, n):
        if n > len(self.b) - self.p:
            raise ValueError("more items than bytes")

    def map(self, n, depth):
        self.room(n)
        out = {}
        for _ in range(n):
            t = self.b[self.p] if self.p < len(self.b) else 0
            k = self.read(depth + 1)
            if 0xA0 <= t <= 0xBF or 0xD9 <= t <= 0xDB:
                k = k.split("\x00", 1)[0]
            else:
                k = key_text(k)
            out[k] = self.read(depth + 1)
        return out


def payload_json(b):
    """The JSON form of payload bytes b, which must be one msgpack map."""
    m = Msgpack(b)
    try:
        v = m.read()
    except (ValueError, struct.error, IndexError):
        return None
    return v if isinstance(v, dict) and m.p == len(b) else None


def same(a, b):
    """JSON equality that keeps integers, reals and booleans apart."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def _int64(text):
    v = int(text)
    if not -(1 << 63) <= v < 1 << 63:
        raise ValueError("integer out of range")
    return v


def _real(text):
    v = float(text)
    if abs(v) == float("inf"):
        raise ValueError("real out of range")
    return v


def _no_nul(v):
    if isinstance(v, str):
        return "\x00" not in v
    if isinstance(v, dict):
        return all(_no_nul(k) and _no_nul(x) for k, x in v.items())
    if isinstance(v, list):
        return all(_no_nul(x) for x in v)
    return True


def json_load(b):
    """b (UTF-8) as one JSON value: no NaN, no NUL in a string, integers
    within 64 bits. Raises ValueError."""
    v = json.loads(b.decode("utf-8"), parse_constant=_no_constant, parse_int=_int64,
                   parse_float=_real)
    if not _no_nul(v):
        raise ValueError("a string holds NUL")
    return v


# ---- the bundle --------------------------------------------------------

class Bundle:
    """Checks one bundle directory, in SPEC's order."""

    def __init__(self, d, key):
        self.d, self.key = d, key
        self.events, self.redacted, self.blobs = 0, [], 0

    def own_key(self):
        try:
            return key_parse(read_file(self.d, "key", SMALL_MAX).decode("utf-8", "replace"))
        except Bad as e:
            raise Bad(f"key: {e}")

    def checkpoint(self):
        self.ck = ckpt_verify(read_file(self.d, "checkpoint", SMALL_MAX), self.key or self.own_key())

    def manifest(self):
        try:
            m = json_load(read_file(self.d, "manifest.json"))
        except ValueError as e:
            raise Bad(f"manifest.json: {e}")
        runs = m.get("runs") if isinstance(m, dict) else None
        if not isinstance(runs, list) or not 0 < len(runs) <= RUNS_MAX:
            raise Bad("manifest.json: no list of runs")
        self.runs = {}
        for i, r in enumerate(runs):
            run = r.get("run") if isinstance(r, dict) else None
            if not isinstance(run, str):
                raise Bad(f"manifest.json: run {i + 1} has no id")
            self.runs.setdefault(run, {"m": r, "events": 0, "last_seq": 0})
        if not is_int(m.get("tree_size")) or m["tree_size"] != self.ck[1]:
            raise Bad(f"manifest.json: tree_size is not the checkpoint's ({self.ck[1]})")
        self.m, self.one = m, m.get("kind") == "event"

    def line_event(self, j):
        """The header fields of line j."""
        f = [j.get(k) for k in ("offset", "seq", "ts", "type", "run", "source")]
        if not all(isinstance(x, str) for x in f[3:]) or not all(is_int(x) for x in f[:3]) \
                or f[0] < 1 or f[1] < 1 or f[2] < 0:
            raise Bad("a field is missing or of the wrong type")
        t, r = f[3].encode().split(b"\x00")[0], f[4].encode().split(b"\x00")[0]
        if not 0 < len(t) < 40 or not 0 < len(r) < 24 or f[5] not in SOURCES:
            raise Bad("bad type, run or source")
        return f[0], f[1], f[2], t, r, SOURCES.index(f[5])

    def line_order(self, ev, prev):
        off, seq, run = ev[0], ev[1], ev[4].decode()
        if off <= prev:
            raise Bad(f"offset {off} does not follow offset {prev}")
        if off > self.ck[1]:
            raise Bad(f"offset {off} is past the checkpoint's tree")
        r = self.runs.get(run)
        if r is None:
            raise Bad(f"run {run} is not in the manifest")
        if not self.one and seq != r["last_seq"] + 1:
            raise Bad(f"run {run}: seq {seq} after seq {r['last_seq']} "
                      "(an event is missing or out of place)")
        r["events"] += 1
        r["last_seq"] = seq

    def line_commit(self, j):
        """The payload's commitment: given when redacted, else made."""
        if j.get("redacted") is True:
            c = hex_exact(j.get("commitment"), 32)
            if c is None:
                raise Bad("redacted, but no commitment")
            return c
        salt, mp = hex_exact(j.get("salt"), 32), j.get("payload_mp")
        if salt is None or not isinstance(mp, str):
            raise Bad("no payload_mp or salt")
        try:
            mp = base64.b64decode(mp, validate=True)
        except ValueError:
            raise Bad("payload_mp is not base64")
        shown = payload_json(mp)
        if shown is None:
            raise Bad("payload_mp is not a msgpack map")
        if "payload" not in j or not same(shown, j["payload"]):
            raise Bad("payload is not what payload_mp holds")
        return sha256(salt, mp)

    def line_leaf(self, text, prev):
        """Checks one line; returns its event's header and leaf hash."""
        try:
            j = json_load(text)
        except ValueError as e:
            raise Bad(f"not JSON: {e}")
        if not isinstance(j, dict):
            raise Bad("a field is missing or of the wrong type")
        ev = self.line_event(j)
        self.line_order(ev, prev)
        commit = self.line_commit(j)
        off, seq, ts, t, r, src = ev
        leaf = b"\x01" + off.to_bytes(8, "big") + seq.to_bytes(8, "big") + \
            ts.to_bytes(8, "big") + bytes([src, len(t)]) + t + bytes([len(r)]) + r + commit
        h = sha256(b"\x00", leaf)
        if hex_exact(j.get("leaf"), 32) != h:
            raise Bad("its fields do not hash to its leaf")
        if j.get("redacted") is True:
            self.redacted.append(off)
        return off, h

    def proof_gap(self, x, y):
        def take(lo, hi):
            h = self.proof.read(32)
            if len(h) != 32:
                raise Bad(f"proof: ends after {self.hashes} hashes; one is needed for "
                          f"leaves [{lo}, {hi})")
            self.hashes += 1
            self.fold.push(lo, hi, h)
        gap(x, y, self.ck[1], take)

    def lines(self):
        n = self.ck[1]
        with open_regular(self.d, "events.jsonl") as f, open_regular(self.d, "proof") as p:
            self.proof, self.hashes, self.fold, prev = p, 0, Fold(n), 0
            for no, text in enumerate(f, 1):
                try:
                    off, h = self.line_leaf(text, prev)
                except Bad as e:
                    raise Bad(f"events.jsonl line {no}: {e}")
                self.proof_gap(prev, off - 1)
                self.fold.push(off - 1, off, h)
                prev, self.events = off, self.events + 1
            if not self.events:
                raise Bad("events.jsonl: no events")
            self.proof_gap(prev, n)
            if p.read(1):
                raise Bad(f"proof: bytes left after the {self.hashes} hashes the events need")
        root = self.fold.root()
        if root != self.ck[2]:
            raise Bad(f"proof: the events and the proof make root {root.hex()}, "
                      f"the checkpoint's is {self.ck[2].hex()}")

    def blob_files(self):
        path = os.path.join(self.d, "blobs")
        if os.path.lexists(path) and not stat.S_ISDIR(os.lstat(path).st_mode):
            raise Bad("blobs: not a directory")
        listed = self.m.get("blobs") or []
        for i, key in enumerate(listed if isinstance(listed, list) else []):
            if not isinstance(key, str) or len(key) != 64 or \
                    any(c not in "0123456789abcdef" for c in key) or key.endswith("0" * 32):
                raise Bad(f"manifest.json: blob {i + 1} is not a key")
            if hashlib.blake2b(read_file(self.d, "blobs/" + key), digest_size=32).hexdigest() != key:
                raise Bad(f"blobs/{key}: its content does not hash to its name")
        files = [f for f in os.listdir(path) if not f.startswith(".")] if os.path.isdir(path) else []
        n = len(listed) if isinstance(listed, list) else 0
        if len(files) != n:
            raise Bad(f"blobs: {len(files)} files, the manifest lists {n}")
        self.blobs = n

    def counts(self):
        if self.m.get("events") != self.events:
            raise Bad(f"manifest.json: {self.m.get('events')} events listed, events.jsonl has {self.events}")
        for run, r in self.runs.items():
            if r["m"].get("events") != r["events"] or \
                    (not self.one and r["m"].get("last_seq") != r["last_seq"]):
                raise Bad(f"manifest.json: run {run}: {r['events']} events to seq {r['last_seq']} "
                          "in events.jsonl, not the counts listed")
        red = self.m.get("redactions")
        red = red if isinstance(red, list) else []
        if len(red) != len(self.redacted):
            raise Bad(f"manifest.json: {len(red)} redactions listed, events.jsonl has {len(self.redacted)}")
        for i, r in enumerate(red):
            if not isinstance(r, dict) or r.get("offset") != self.redacted[i]:
                raise Bad(f"manifest.json: redaction {i + 1} is not line's")

    def prior(self, note):
        try:
            old = ckpt_verify(note, self.key or self.own_key())
        except Bad as e:
            raise Bad(f"prior {e}")
        try:
            b = read_file(self.d, "consistency", (PROOF_MAX + 1) * 32)
        except Bad as e:
            raise Bad(f"{e} (export with --prior)")
        if len(b) % 32 or len(b) > PROOF_MAX * 32:
            raise Bad(f"consistency: {len(b)} bytes is not a list of hashes")
        proof = [b[i:i + 32] for i in range(0, len(b), 32)]
        if not consistency_ok(old[1], self.ck[1], old[2], self.ck[2], proof):
            raise Bad(f"consistency: the checkpoint (tree {self.ck[1]}) does not extend "
                      f"the prior one (tree {old[1]}): the history differs")
        self.prior_size = old[1]

    def verify(self, prior_note):
        self.prior_size = 0
        self.checkpoint()
        self.manifest()
        self.lines()
        self.blob_files()
        self.counts()
        if prior_note is not None:
            self.prior(prior_note)


# ---- directories, tars, the command ------------------------------------

def unpack(tar, into):
    """Unpacks tar's directories, regular files and symbolic links (which
    the checks refuse to follow) into directory into; skips any other
    member and any name leaving it."""
    with tarfile.open(tar) as t:
        for m in t.getmembers():
            name = os.path.normpath(m.name)
            if name.startswith(("/", "..")) or name == ".":
                continue
            path = os.path.join(into, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if m.isdir():
                os.makedirs(path, exist_ok=True)
            elif m.isfile():
                with open(path, "wb") as f:
                    f.write(t.extractfile(m).read())
            elif m.issym():
                os.symlink(m.linkname, path)


def with_dir(bundle, fn):
    """Calls fn(directory) on bundle: a directory, or a tar unpacked."""
    if os.path.isdir(bundle):
        return fn(bundle)
    with tempfile.TemporaryDirectory(prefix="verify-bundle.") as d:
        try:
            unpack(bundle, d)
        except (tarfile.TarError, OSError) as e:
            raise Bad(f"{bundle}: not a bundle: {e}")
        return fn(d)


def prior_note(path):
    """OLDER's checkpoint: the file itself when it is one, else the
    checkpoint of the bundle it is."""
    if os.path.isfile(path) and os.path.getsize(path) <= 4096:
        with open(path, "rb") as f:
            note = f.read()
        try:
            ckpt_body(note)
            return note
        except Bad:
            pass
    return with_dir(path, lambda d: read_file(d, "checkpoint", SMALL_MAX))


def report(bundle, b, trusted, as_json):
    if as_json:
        print(json.dumps({"ok": True, "runs": len(b.runs), "events": b.events,
                          "redacted": len(b.redacted), "blobs": b.blobs,
                          "tree_size": b.ck[1], "root": b.ck[2].hex(),
                          "trusted_key": trusted, "prior_tree_size": b.prior_size},
                         separators=(",", ":")))
        return
    n = len(b.runs)
    print(f"{bundle}: verified: {b.events} events of {n} run{'' if n == 1 else 's'}, "
          f"{len(b.redacted)} redacted, {b.blobs} blobs; tree {b.ck[1]}, root {b.ck[2].hex()}")


def main(argv):
    args, opts = [], {"--key": None, "--prior": None, "--json": False}
    it = iter(argv)
    for a in it:
        if a in ("--key", "--prior"):
            opts[a] = next(it, None)
            if opts[a] is None:
                return usage()
        elif a == "--json":
            opts[a] = True
        elif a.startswith("-"):
            return usage()
        else:
            args.append(a)
    if len(args) != 1:
        return usage()
    try:
        key = key_parse(opts["--key"]) if opts["--key"] else None
    except Bad:
        print("verify_bundle: --key: not a verifier key (NAME+HASH+BASE64)", file=sys.stderr)
        return 2
    try:
        note = prior_note(opts["--prior"]) if opts["--prior"] else None
        b = Bundle(None, key)

        def run(d):
            b.d = d
            b.verify(note)
        with_dir(args[0], run)
    except (Bad, OSError) as e:
        print(f"verify_bundle: verify: {e}", file=sys.stderr)
        return 1
    report(args[0], b, key is not None, opts["--json"])
    return 0


def usage():
    print("usage: verify_bundle.py BUNDLE [--key VKEY] [--prior OLDER] [--json]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
