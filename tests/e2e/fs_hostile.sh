#!/bin/sh
# sanbox fs ls|cat and cp on a disk a hostile guest wrote, without booting:
# the run's disk.qcow2 is replaced with a layer over an ext4 image made by
# mkfs.ext4 -d from a directory of odd names (newline, ESC sequences,
# control bytes, invalid UTF-8, C1 controls, bidi overrides), symlinks out
# of the guest (absolute, climbing, into the host's /tmp), a loop, a chain,
# a FIFO, a sparse file and nested directories. Also: a second qcow2 layer
# written with qemu-io (the chain is followed), a layer locked by a writer
# (force-share), a 4 GiB disk (no copy of it is made) and corrupt disks.
. "$(dirname "$0")/lib/bootless.sh"
command -v mkfs.ext4 >/dev/null && command -v qemu-img >/dev/null &&
	command -v qemu-nbd >/dev/null || fail "needs mkfs.ext4, qemu-img and qemu-nbd"

R=$("$SB" run --detach -- true) || fail "run --detach"
wait_stopped "$R" || fail "run $R did not stop"
disk=$SANBOX_HOME/runs/$R/disk.qcow2
[ -f "$disk" ] || fail "no disk.qcow2 for $R"
out=$tmp/out
mkdir -p "$out"
printf canary >"$tmp/canary"

# -- the guest's tree: root/ is its /, root/workspace its working directory
python3 - "$tmp" <<'EOF' || fail "cannot build the guest tree"
import os, sys
t = sys.argv[1].encode()
root = t + b"/root"
ws = root + b"/workspace"
for d in (root, ws, root + b"/etc", ws + b"/d1/d2/d3"):
    os.makedirs(d, exist_ok=True)
def put(path, data):
    with open(path, "wb") as f:
        f.write(data)
put(root + b"/etc/passwd", b"guest-passwd\n")
put(root + b"/etc/shadow", b"guest-shadow\n")
names = {
    b"new\nline": b"newline file\n",
    b"\x1b[31mred\x1b[0m": b"esc\n",
    b"\x1b]0;title\x07": b"osc\n",
    b"ctl\x01\x02\x7f\x08\r": b"ctl\n",
    b"bad\xff\xfe\xc3utf8": b"invalid\n",
    b"ovl\xc0\xafsur\xed\xa0\x80big\xf4\x90\x80\x80lone\x80cut\xe2\x80": b"not utf-8\n",
    b"c1\xc2\x85\xc2\x9bx": b"c1\n",
    b"bidi\xe2\x80\xaegpj.exe": b"bidi\n",
    b"iso\xe2\x81\xa6x\xe2\x81\xa9": b"isolate\n",
    b"back\\slash": b"backslash\n",
    b"tab\there": b"tab\n",
    b"caf\xc3\xa9 \xe2\x9c\x93": b"plain utf-8\n",
    b"small.txt": b"hello from the guest\n",
}
for n, data in names.items():
    put(ws + b"/" + n, data)
os.chmod(ws + b"/small.txt", 0o640)
os.utime(ws + b"/small.txt", (1700000000, 1700000000))
put(ws + b"/d1/d2/d3/deep.txt", b"deep\n")
os.symlink(b"/etc/passwd", ws + b"/link_passwd")
os.symlink(b"../../../../etc/shadow", ws + b"/link_shadow")
os.symlink(b"../../../../etc", ws + b"/climb")
os.symlink(b"/", ws + b"/rootlink")
os.symlink(t + b"/canary", ws + b"/canary_link")
os.symlink(b"loop2", ws + b"/loop1")
os.symlink(b"loop1", ws + b"/loop2")
os.symlink(b"c2", ws + b"/c1")
os.symlink(b"c3", ws + b"/c2")
os.symlink(b"d1/d2", ws + b"/c3")
os.symlink(b"\x1b[2Jgone\n", ws + b"/esc_target")
os.mkfifo(ws + b"/fifo")
with open(ws + b"/sparse", "wb") as f:
    f.truncate(1 << 30)
    f.seek(1 << 29)
    f.write(b"middle")
EOF
# the base is a template's root file system, in the template store: a
# layer chain may end nowhere else
base=$SANBOX_TEMPLATES/fsh/rootfs.img
mkdir -p "$SANBOX_TEMPLATES/fsh" "$SANBOX_TEMPLATES/trunc" "$SANBOX_HOME/runs/$R/layers"
layer1=$SANBOX_HOME/runs/$R/layers/0.qcow2
mkfs.ext4 -q -F -b 4096 -d "$tmp/root" "$base" 64M >"$tmp/mkfs.log" 2>&1 ||
	fail "mkfs.ext4: $(tail -n 1 "$tmp/mkfs.log")"
rm -f "$disk"
qemu-img create -q -f qcow2 -b "$base" -F raw "$disk" || fail "qemu-img create"
chmod a-w "$base"
sum0=$(sha256sum "$base" "$disk")

# -- fs ls: every entry once, escaped; nothing raw reaches the terminal
"$SB" fs ls "$R" >"$tmp/ls" 2>"$tmp/ls.err" || fail "fs ls exit $?: $(cat "$tmp/ls.err")"
python3 - "$tmp" "$tmp/ls" <<'EOF' || fail "fs ls: $(cat "$tmp/ls")"
import os, re, sys
ws = sys.argv[1].encode() + b"/root/workspace"
raw = open(sys.argv[2], "rb").read()
# the escaping, written again from SPEC.md
def esc(b):
    out, i = "", 0
    while i < len(b):
        c = b[i]
        if c == 0x5c: out += "\\\\"; i += 1; continue
        if c == 0x0a: out += "\\n"; i += 1; continue
        if c == 0x09: out += "\\t"; i += 1; continue
        if c == 0x0d: out += "\\r"; i += 1; continue
        if c < 0x20 or c == 0x7f: out += "\\x%02x" % c; i += 1; continue
        n = 1 if c < 0x80 else 2 if 0xc2 <= c <= 0xdf else 3 if 0xe0 <= c <= 0xef else 4 if 0xf0 <= c <= 0xf4 else 0
        try:
            ch = b[i:i + n].decode("utf-8") if n else None
        except UnicodeDecodeError:
            ch = None
        if ch is None or len(ch) != 1:
            out += "\\x%02x" % c; i += 1; continue
        cp = ord(ch)
        if 0x80 <= cp <= 0x9f or cp in (0x200e, 0x200f) or 0x202a <= cp <= 0x202e or 0x2066 <= cp <= 0x2069:
            out += "\\u{%04x}" % cp
        else: out += ch
        i += n
    return out
text = raw.decode("utf-8")  # valid UTF-8 as a whole
for ch in text:
    o = ord(ch)
    assert ch == "\n" or (o >= 0x20 and o != 0x7f and not 0x80 <= o <= 0x9f and o not in (0x200e, 0x200f) and
        not 0x202a <= o <= 0x202e and not 0x2066 <= o <= 0x2069), "raw %r in output" % ch
lines = text.split("\n")
assert lines[-1] == "", "no final newline"
got = {}
for l in lines[:-1]:
    m = re.match(r"^([-dlpscb?][-rwxsStT]{9}) +(\d+) +(\d+) +(\d+) (\d{4}-\d\d-\d\d \d\d:\d\d) (.*)$", l)
    assert m, "bad line %r" % l
    name, _, target = m.group(6).partition(" -> ")
    assert name not in got, "%r twice" % name
    got[name] = (m.group(1), int(m.group(4)), target)
want = {}
for n in os.listdir(ws):
    st = os.lstat(ws + b"/" + n)
    want[esc(n)] = esc(os.readlink(ws + b"/" + n)) if os.path.islink(ws + b"/" + n) else ""
assert set(got) == set(want), "names differ: extra %r missing %r" % (set(got) - set(want), set(want) - set(got))
for n, t in want.items():
    assert got[n][2] == t, "%r -> %r, want %r" % (n, got[n][2], t)
assert got["small.txt"][0] == "-rw-r-----" and got["small.txt"][1] == 21, got["small.txt"]
assert got["fifo"][0][0] == "p" and got["d1"][0][0] == "d" and got["loop1"][0][0] == "l"
assert got["sparse"][1] == 1 << 30, got["sparse"]
assert got["esc_target"][2] == "\\x1b[2Jgone\\n"
EOF

# -- --json: exact names (bytes compared with the source), types, targets
"$SB" fs ls "$R" --json >"$tmp/ls.json" || fail "fs ls --json exit $?"
python3 - "$tmp" "$tmp/ls.json" <<'EOF' || fail "fs ls --json: $(cat "$tmp/ls.json")"
import base64, json, os, stat, sys
ws = sys.argv[1].encode() + b"/root/workspace"
raw = open(sys.argv[2], "rb").read()
# ASCII only (jansson passes DEL through, as JSON allows), no control byte
assert all(b <= 0x7f and (b >= 0x20 or b == 0x0a) for b in raw), "JSON output not plain ASCII"
ents = json.loads(raw)
def lossy(b):  # one U+FFFD for each byte that is not part of valid UTF-8
    out, i = "", 0
    while i < len(b):
        c = b[i]
        n = 1 if c < 0x80 else 2 if 0xc2 <= c <= 0xdf else 3 if 0xe0 <= c <= 0xef else 4 if 0xf0 <= c <= 0xf4 else 0
        try:
            ch = b[i:i + n].decode("utf-8") if n else ""
        except UnicodeDecodeError:
            ch = ""
        if len(ch) == 1:
            out += ch; i += n
        else:
            out += "\ufffd"; i += 1
    return out
def raw_of(e, k):
    if k + "_base64" in e:
        b = base64.b64decode(e[k + "_base64"], validate=True)
        assert e[k] == lossy(b), e
        return b
    return e[k].encode("utf-8")
got = {}
for e in ents:
    n = raw_of(e, "name")
    assert n not in got, "%r twice" % n
    got[n] = e
src = set(os.listdir(ws))
assert set(got) == src, "names differ: extra %r missing %r" % (set(got) - src, src - set(got))
types = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink", stat.S_IFIFO: "fifo"}
for n, e in got.items():
    st = os.lstat(ws + b"/" + n)
    assert e["type"] == types[stat.S_IFMT(st.st_mode)], (n, e)
    assert e["mode"] == stat.S_IMODE(st.st_mode), (n, e)
    if e["type"] == "file":
        assert e["size"] == st.st_size and e["mtime"] == int(st.st_mtime), (n, e)
    if e["type"] == "symlink":
        assert raw_of(e, "target") == os.readlink(ws + b"/" + n), (n, e)
    else:
        assert "target" not in e, e
    try:
        n.decode("utf-8")
        assert "name_base64" not in e, e
    except UnicodeDecodeError:
        assert "name_base64" in e, e
bad = got[b"bad\xff\xfe\xc3utf8"]
assert bad["name"] == "bad\ufffd\ufffd\ufffdutf8", bad
assert got[b"new\nline"]["name"] == "new\nline"
assert got[b"small.txt"]["mtime"] == 1700000000 and got[b"small.txt"]["mode"] == 0o640
EOF

# -- ls of a symlink lists the link itself; ls of a nested directory
l=$("$SB" fs ls "$R" link_passwd) || fail "fs ls of a symlink"
[ "$(printf '%s\n' "$l" | wc -l)" = 1 ] && printf '%s\n' "$l" | grep -q '^l.* link_passwd -> /etc/passwd$' ||
	fail "fs ls link_passwd: $l"
"$SB" fs ls "$R" /workspace/d1/d2/d3 | grep -q ' deep\.txt$' || fail "fs ls of a nested directory"
"$SB" fs ls "$R" / | grep -q ' workspace$' || fail "fs ls /"

# -- cat: files (odd names too), paths through links stay in the guest
[ "$("$SB" fs cat "$R" small.txt)" = "hello from the guest" ] || fail "fs cat small.txt"
nl=$(printf 'new\nline')
[ "$("$SB" fs cat "$R" "$nl")" = "newline file" ] || fail "fs cat of the newline name"
[ "$("$SB" fs cat "$R" "$(printf '\033[31mred\033[0m')")" = esc ] || fail "fs cat of the ESC name"
[ "$("$SB" fs cat "$R" "$(printf 'bad\377\376\303utf8')")" = invalid ] || fail "fs cat of bad UTF-8"
[ "$("$SB" fs cat "$R" climb/passwd)" = guest-passwd ] || fail "a climbing link left the guest"
[ "$("$SB" fs cat "$R" rootlink/etc/shadow)" = guest-shadow ] || fail "an absolute link left the guest"
[ "$("$SB" fs cat "$R" /../../../etc/passwd)" = guest-passwd ] || fail ".. above the guest's root"
[ "$("$SB" fs cat "$R" c1/d3/deep.txt)" = deep ] || fail "a chain of links on the way"
[ "$("$SB" fs cat "$R" sparse | wc -c)" = $((1 << 30)) ] || fail "the sparse file's length"

# one_line FILE: exactly one line, "sanbox: ...", no byte below 0x20 but its newline
one_line() {
	[ "$(wc -l <"$1")" = 1 ] && grep -q '^sanbox: ' "$1" &&
		python3 -c 'import sys; b=open(sys.argv[1],"rb").read(); sys.exit(any(c < 32 or c == 127 for c in b[:-1]))' "$1"
}
# refused CMD...: exits $want with one line matching $pat, prints nothing on
# stdout (its files are outside $tmp, which cp must not touch; VERBOSE=1
# shows the line)
refused() {
	"$SB" "$@" >"$SANBOX_HOME/r.out" 2>"$SANBOX_HOME/r.err"
	rc=$?
	[ -z "${VERBOSE:-}" ] || cat "$SANBOX_HOME/r.err"
	[ "$rc" = "$want" ] && one_line "$SANBOX_HOME/r.err" && [ ! -s "$SANBOX_HOME/r.out" ] &&
		grep -q -- "$pat" "$SANBOX_HOME/r.err" || fail "$*: exit $rc, stderr $(cat "$SANBOX_HOME/r.err")"
}
want=1 pat="^sanbox: /workspace/link_passwd is a symlink to /etc/passwd$" refused fs cat "$R" link_passwd
want=1 pat="is a symlink to $tmp/canary\$" refused fs cat "$R" canary_link
want=1 pat='is a symlink to \\x1b\[2Jgone\\n$' refused fs cat "$R" esc_target
want=1 pat="^sanbox: /workspace/d1 is a directory$" refused fs cat "$R" d1
want=1 pat="^sanbox: /workspace/fifo is a FIFO$" refused fs cat "$R" fifo
want=1 pat="too many levels of symbolic links" refused fs cat "$R" loop1/x
want=1 pat="is a symlink to loop2$" refused fs cat "$R" loop1
want=3 pat='^sanbox: /workspace/nope\\x1b\]0;x\\x07: no such file or directory$' \
	refused fs cat "$R" "$(printf 'nope\033]0;x\007')"
want=3 pat="^sanbox: /workspace/small.txt/x: not a directory$" refused fs cat "$R" small.txt/x
want=3 pat="no such file" refused fs ls "$R" nothing-here
[ "$(cat "$tmp/canary")" = canary ] || fail "the canary changed"

# -- cp: files, symlinks as symlinks, nothing outside the destination
snap() { (cd "$tmp" && find . -path ./out -prune -o -print0 | sort -z | xargs -0 ls -ld --time-style=+%s.%N |
	awk '{$1=$1; print}'; sha256sum canary "$base") ; }
snap >"$SANBOX_HOME/snap0"
"$SB" cp "$R:small.txt" "$out/small" || fail "cp small.txt"
[ "$(cat "$out/small")" = "hello from the guest" ] || fail "cp: bytes differ"
[ "$(stat -c %a "$out/small")" = "$(printf '%o' $((0640 & ~$(umask))))" ] || fail "cp: mode $(stat -c %a "$out/small")"
"$SB" cp "$R:$nl" "$out/nl" && [ "$(cat "$out/nl")" = "newline file" ] || fail "cp of the newline name"
"$SB" cp "$R:/workspace/d1/d2/d3/deep.txt" "$out/deep" && [ "$(cat "$out/deep")" = deep ] ||
	fail "cp by absolute path"
"$SB" cp "$R:canary_link" "$out/canary_link" || fail "cp of a symlink exit $?"
[ -L "$out/canary_link" ] && [ "$(readlink "$out/canary_link")" = "$tmp/canary" ] ||
	fail "cp of a symlink: $(ls -l "$out/canary_link")"
"$SB" cp "$R:link_shadow" "$out/shadow" && [ "$(readlink "$out/shadow")" = ../../../../etc/shadow ] ||
	fail "cp of a climbing symlink"
"$SB" cp "$R:esc_target" "$out/esc" &&
	python3 -c 'import os,sys; sys.exit(os.readlink(sys.argv[1].encode()) != b"\x1b[2Jgone\n")' "$out/esc" ||
	fail "cp of a symlink with control bytes: $(readlink "$out/esc" | od -c)"
# an existing destination, even a symlink to the canary, is not written through
ln -s "$tmp/canary" "$out/victim"
want=1 pat="already exists (--force replaces it)" refused cp "$R:small.txt" "$out/victim"
want=1 pat="already exists" refused cp "$R:link_passwd" "$out/victim"
[ "$(readlink "$out/victim")" = "$tmp/canary" ] || fail "the refused cp changed the destination"
"$SB" cp --force "$R:small.txt" "$out/victim" || fail "cp --force"
[ ! -L "$out/victim" ] && [ "$(cat "$out/victim")" = "hello from the guest" ] || fail "cp --force: not replaced"
"$SB" cp -f "$R:link_passwd" "$out/small" && [ "$(readlink "$out/small")" = /etc/passwd ] ||
	fail "cp --force of a symlink over a file"
want=1 pat="^sanbox: /workspace/d1 is a directory (cp copies a file or a symlink)$" refused cp "$R:d1" "$out/d1"
want=1 pat="is a FIFO" refused cp "$R:fifo" "$out/fifo"
want=3 pat="no such file" refused cp "$R:nope" "$out/nope"
mkdir "$out/dir"
want=1 pat="Is a directory" refused cp --force "$R:small.txt" "$out/dir"
[ "$("$SB" cp "$R:c1/d3/deep.txt" -)" = deep ] || fail "cp to -"
want=1 pat="is a symlink to" refused cp "$R:c1" -
"$SB" cp "$R" "$out/x" 2>/dev/null; [ $? = 2 ] || fail "cp without RUN:PATH is not a usage error"
[ -e "$out/d1" ] || [ -e "$out/fifo" ] || [ -e "$out/nope" ] && fail "a refused cp left a file"
[ "$(ls -A "$out" | grep -c sanbox-)" = 0 ] || fail "cp left a temporary file: $(ls -A "$out")"
snap >"$SANBOX_HOME/snap1"
cmp -s "$SANBOX_HOME/snap0" "$SANBOX_HOME/snap1" ||
	fail "cp wrote outside its destination: $(diff "$SANBOX_HOME/snap0" "$SANBOX_HOME/snap1")"
[ "$(cat "$tmp/canary")" = canary ] || fail "the canary changed"
[ "$sum0" = "$(sha256sum "$base" "$disk")" ] || fail "reading modified the disk"

# -- a second layer, written with qemu-io: the chain is read through
blk=$(debugfs -R "bmap /workspace/small.txt 0" "$base" 2>/dev/null)
[ -n "$blk" ] && [ "$blk" -gt 0 ] || fail "debugfs bmap: $blk"
mv "$disk" "$layer1"
qemu-img create -q -f qcow2 -b "$layer1" -F qcow2 "$disk" || fail "second layer"
qemu-io -f qcow2 -c "write -P 0x41 $((blk * 4096)) 4096" "$disk" >/dev/null || fail "qemu-io write"
A21=$(printf 'A%.0s' $(seq 21))
[ "$("$SB" fs cat "$R" small.txt)" = "$A21" ] || fail "the top layer's write is not seen"
[ "$("$SB" fs cat "$R" "$nl")" = "newline file" ] || fail "the lower layers are not seen"

# -- a layer held by a writer (as by a running VM) is read with force-share
mkfifo "$tmp/qio"
qemu-io -f qcow2 "$disk" <"$tmp/qio" >/dev/null 2>"$tmp/qio.err" &
qio=$!
bg="$bg $qio"
exec 9>"$tmp/qio"
# until qemu-io holds its lock: looked for in /proc/locks (a probe that
# opens the image, qemu-img info, takes a lock itself and can make
# qemu-io's fail)
ino=$(stat -c %i "$disk")
i=0
while ! grep -q ":$ino " /proc/locks; do
	i=$((i + 1))
	[ $i -lt 200 ] || fail "qemu-io does not lock the layer ($(proc_alive "$qio" && echo running || echo gone): $(cat "$tmp/qio.err"))"
	sleep 0.05
done
qemu-img info "$disk" >/dev/null 2>&1 && fail "the layer is not locked against a second opener"
[ "$("$SB" fs cat "$R" small.txt)" = "$A21" ] || fail "a locked layer cannot be read"
exec 9>&-
proc_wait_gone "$qio" 50 || kill "$qio"

# -- a 4 GiB disk: a small file is read without a copy of the disk
mkdir -p "$tmp/big/workspace" "$tmp/tmpdir"
printf 'small on a big disk\n' >"$tmp/big/workspace/f"
mkdir -p "$SANBOX_TEMPLATES/big"
mkfs.ext4 -q -F -E lazy_itable_init=1,nodiscard -d "$tmp/big" "$SANBOX_TEMPLATES/big/rootfs.img" 4G >"$tmp/mkfs.log" 2>&1 ||
	fail "mkfs.ext4 4G: $(tail -n 1 "$tmp/mkfs.log")"
rm -f "$disk"
qemu-img create -q -f qcow2 -b "$SANBOX_TEMPLATES/big/rootfs.img" -F raw "$disk" ||
	fail "qemu-img create (4G)"
touch "$tmp/mark"
avail0=$(df -k --output=avail /tmp | tail -1)
[ "$(TMPDIR=$tmp/tmpdir "$SB" fs cat "$R" f)" = "small on a big disk" ] || fail "fs cat on a 4 GiB disk"
[ -z "$(ls -A "$tmp/tmpdir")" ] || fail "files in TMPDIR: $(ls -A "$tmp/tmpdir")"
big=$(find /tmp "$SANBOX_HOME" -xdev -newer "$tmp/mark" -type f -size +64M 2>/dev/null | head -3)
[ -z "$big" ] || fail "a large file was written: $big"
avail1=$(df -k --output=avail /tmp | tail -1)
[ $((avail0 - avail1)) -lt 65536 ] || fail "the read used $((avail0 - avail1)) KiB of /tmp"

# -- corrupt disks fail in one line, never crash
head -c 1048576 /dev/urandom >"$disk"
want=1 pat="^sanbox: .*/disk.qcow2: not a qcow2 file$" refused fs ls "$R"
qemu-img create -q -f qcow2 -b "$layer1" -F qcow2 "$disk" 64M &&
	qemu-io -f qcow2 -c "write -P 0x5a 0 16M" "$disk" >/dev/null || fail "garbage layer"
want=1 pat="^sanbox: no ext4 file system on the disk" refused fs ls "$R"
trunc=$SANBOX_TEMPLATES/trunc/rootfs.img
cp "$base" "$trunc" && chmod u+w "$trunc" && truncate -s 300K "$trunc"
rm -f "$disk"
qemu-img create -q -f qcow2 -b "$trunc" -F raw "$disk" 64M || fail "truncated base"
want=1 pat="^sanbox: " refused fs ls "$R"
# a layer whose header names a host file as its backing file, directly or
# further down, or as its data file: refused before qemu-nbd reads it
rm -f "$disk"
qemu-img create -q -f qcow2 -b "$tmp/canary" -F raw "$disk" 64M || fail "hostile backing"
want=1 pat="canary: not a layer of a run of" refused fs cat "$R" small.txt
qemu-img create -q -f qcow2 -b "$tmp/canary" -F raw "$tmp/outside.qcow2" 64M &&
	rm -f "$disk" && qemu-img create -q -f qcow2 -b "$tmp/outside.qcow2" -F qcow2 "$disk" ||
	fail "hostile chain"
want=1 pat="outside.qcow2: not a layer of a run of" refused fs ls "$R"
rm -f "$disk"
qemu-img create -q -f qcow2 -o data_file="$tmp/host.data",data_file_raw=on "$disk" 64M ||
	fail "hostile data file"
want=1 pat="its data is in another file" refused fs ls "$R"
[ "$(cat "$tmp/canary")" = canary ] || fail "the canary changed"
# a standalone qcow2 cut in half: what is gone reads as zeros or fails
qemu-img convert -O qcow2 "$base" "$tmp/whole.qcow2" || fail "qemu-img convert"
head -c $(($(stat -c %s "$tmp/whole.qcow2") / 2)) "$tmp/whole.qcow2" >"$disk"
"$SB" fs cat "$R" d1/d2/d3/deep.txt >/dev/null 2>"$SANBOX_HOME/r.err"
rc=$?
{ [ "$rc" = 0 ] && [ ! -s "$SANBOX_HOME/r.err" ]; } || { [ "$rc" != 0 ] && [ "$rc" -lt 4 ] &&
	one_line "$SANBOX_HOME/r.err"; } || fail "a truncated layer: exit $rc, $(cat "$SANBOX_HOME/r.err")"
rm -f "$disk"
want=3 pat="^sanbox: .*disk.qcow2: No such file or directory$" refused fs ls "$R"
echo "ok fs_hostile"
