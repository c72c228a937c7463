#!/bin/sh
# The guest agent's version in HELLO is checked. No microVM: the "QEMU" is
# a fake guest (Python) that connects to the run's channel socket as the
# agent does and says HELLO with the version in $tmp/version.
#   a version the daemon does not speak: the run fails with one line naming
#     both versions and the command that rebuilds the template, no SPEC is
#     sent, `sanbox run` exits 125 and prints that line
#   a hostile version (a newline, an escape sequence, 68 bytes): the same,
#     the version as one line of at most 31 bytes
#   the daemon's own version: the guest gets its SPEC and the run goes on
#     until it is stopped
. "$(dirname "$0")/lib/bootless.sh"

repo=$(cd "$(dirname "$0")/../.." && pwd)
want=$(sed -n 's/^#define SB_CHAN_VERSION[^"]*"\([^"]*\)".*/\1/p' "$repo/vmm/chan.h")
[ -n "$want" ] || fail "no SB_CHAN_VERSION in vmm/chan.h"

cat >"$tmp/guest.py" <<'EOF'
import os, socket, struct, sys, time

args = sys.argv[1:]
chan = None
for i, a in enumerate(args[:-1]):
    pre = "socket,id=chan0,path="
    if a == "-chardev" and args[i + 1].startswith(pre):
        v, out, j = args[i + 1][len(pre):], "", 0
        while j < len(v):  # QEMU's option escaping: ",," is ","
            if v[j] == ",":
                if v[j + 1:j + 2] != ",":
                    break
                j += 1
            out += v[j]
            j += 1
        chan = out
if not chan:
    sys.exit("fake guest: no channel socket in the command line")
run_dir = os.path.dirname(chan)
home = os.path.dirname(os.path.dirname(run_dir))
version = open(os.path.join(home, "t", "version"), "rb").read()

def s(b):  # a msgpack str of up to 255 bytes
    return (bytes([0xA0 | len(b)]) if len(b) < 32 else bytes([0xD9, len(b)])) + b

body = bytes([0x93, 1, 0, 0x82]) + s(b"version") + s(version) + s(b"kernel") + s(b"fake")
sock = socket.socket(socket.AF_UNIX)
for _ in range(200):
    try:
        sock.connect(chan)
        break
    except OSError:
        time.sleep(0.05)
sock.sendall(struct.pack(">I", len(body)) + body)
# note each frame kind the host sends (a frame is [kind, stream, body])
data = b""
while True:
    d = sock.recv(65536)
    if not d:
        break
    data += d
    while len(data) >= 4:
        n = struct.unpack(">I", data[:4])[0]
        if len(data) < 4 + n:
            break
        frame, data = data[4:4 + n], data[4 + n:]
        with open(os.path.join(home, "t", "got." + os.path.basename(run_dir)), "a") as f:
            f.write("kind=%d\n" % frame[1])
EOF
cat >"$tmp/guest-qemu" <<EOF
#!/bin/sh
case " \$* " in
*" -version "*) echo "QEMU emulator version 7.2.0 (stand-in)"; exit 0 ;;
*sanbox.probe=1*) exit 1 ;;
esac
exec python3 "$tmp/guest.py" "\$@"
EOF
chmod +x "$tmp/guest-qemu"
export SANBOX_QEMU=$tmp/guest-qemu

# field RUN TYPE KEY: KEY of the run's first TYPE event, as the record has it
field() {
	"$SB" events "$1" --json --type "$2" |
		python3 -c 'import json,sys; l=sys.stdin.readline(); print(json.loads(l)["payload"]["'"$3"'"] if l else "", end="")'
}

# mismatch VERSION SHOWN: a run whose guest says VERSION fails, its reason
# naming the version as SHOWN
mismatch() {
	printf '%s' "$1" >"$tmp/version"
	"$SB" run -- true >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ $rc = 125 ] || fail "version '$1': sanbox run exit $rc, want 125: $(cat "$tmp/err")"
	R=$("$SB" ps --json | python3 -c 'import json,sys; print(max(json.load(sys.stdin), key=lambda r: r["created_ns"])["run"])')
	reason="the guest agent is version $2, this daemon needs $want: rebuild the template (sanbox template build shell)"
	[ "$(field "$R" run.failed reason)" = "$reason" ] ||
		fail "version '$1': run.failed reason '$(field "$R" run.failed reason)', want '$reason'"
	[ "$(field "$R" run.stopped reason)" = failed ] || fail "version '$1': run.stopped is not 'failed'"
	[ "$(grep -c . "$tmp/err")" = 1 ] && grep -qF "sanbox: run $R failed: $reason" "$tmp/err" ||
		fail "version '$1': sanbox run's error is not one line with the reason: $(cat "$tmp/err")"
	! grep -q 'kind=2$' "$tmp/got.$R" 2>/dev/null || fail "version '$1': the guest got a SPEC"
}

mismatch 0.0.1 0.0.1
esc=$(printf '\033')
hostile=$(printf '9.9\n%s[2J' "$esc")AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA
mismatch "$hostile" "9.9  [2JAAAAAAAAAAAAAAAAAAAAAAA"
grep -q "$esc" "$tmp/err" && fail "an escape sequence of the guest reached the terminal"

# the daemon's own version: SPEC, and the run goes on until stopped
printf '%s' "$want" >"$tmp/version"
R=$("$SB" run --detach -- true) || fail "run --detach: exit $?"
i=0
until grep -qs 'kind=2$' "$tmp/got.$R"; do
	i=$((i + 1))
	[ $i -lt 200 ] || fail "version $want: the guest got no SPEC"
	sleep 0.05
done
"$SB" stop "$R" >/dev/null || fail "stop $R"
wait_stopped "$R" || fail "run $R did not stop"
[ -z "$(field "$R" run.failed reason)" ] || fail "version $want: run.failed: $(field "$R" run.failed reason)"
[ "$(field "$R" run.stopped reason)" = stopped ] || fail "version $want: run.stopped is '$(field "$R" run.stopped reason)'"
echo "PASS guest_version"
