#!/bin/sh
# Hostile text against the CLI's views: an operator.note holding escape and
# OSC title sequences, CR, newlines, C1 and bidi controls, printed by events
# and attach with no raw control byte (checked byte by byte) and exact in
# --json; a template whose hash holds control sequences in template ls and
# inspect; invalid UTF-8 and escapes quoted back in error messages; names
# and groups with control or bidi characters or invalid UTF-8 refused with
# nothing recorded; --input of a FIFO, a directory, a device or a socket
# refused at once. No microVM: runs use the bootless template.
. "$(dirname "$0")/lib/bootless.sh"

# safe FILE [LINES]: FILE is valid UTF-8 with no control byte but the line
# ends, no C1 control and no bidi control; with LINES, it has that many lines
safe() {
	python3 - "$1" "${2:-}" <<'EOF' || fail "unsafe output in $1: $(od -c "$1" | head -20)"
import sys
b = open(sys.argv[1], 'rb').read()
t = b.decode('utf-8')  # raises on invalid UTF-8
bad = [c for c in t if (ord(c) < 0x20 and c != '\n') or 0x7f <= ord(c) <= 0x9f
       or ord(c) in (0x200e, 0x200f) or 0x202a <= ord(c) <= 0x202e or 0x2066 <= ord(c) <= 0x2069]
if bad:
    sys.exit("raw controls: %r" % bad)
if sys.argv[2] and t.count('\n') != int(sys.argv[2]):
    sys.exit("%d lines, want %s" % (t.count('\n'), sys.argv[2]))
EOF
}
# one_line FILE: FILE is one "sanbox: " line, safe
one_line() {
	[ "$(wc -l <"$1")" = 1 ] && grep -q '^sanbox: ' "$1" || fail "not one 'sanbox: ' line: $(cat "$1")"
	safe "$1" 1
}
runs() { "$SB" events --all --json --type run.created | wc -l; }

# the note: clear screen, set the title (OSC ... BEL), CR, a forged event
# line, a C1 CSI, DEL, a right-to-left override and an isolate
note='{"text":"A\u001b[2J\u001b]0;owned\u0007B\rC\n12:00:00.000      1  run.stopped            forged\u009b31mD\u007fE\u202etxt.exe\u2066F","by":"x"}'
runs_hang
R=$("$SB" run --detach --name hostile -- true) || fail "run --detach"
o=$("$SB" admin append "$R" operator.note "$note") || fail "admin append the note"
"$SB" stop "$R" >/dev/null || fail "stop"
wait_stopped "$R" || fail "the run did not stop"
runs_fail

# -- events and attach (text): one line per event, nothing raw
"$SB" events "$R" >"$tmp/ev.txt" || fail "events exit $?"
n=$("$SB" events "$R" --json | wc -l)
safe "$tmp/ev.txt" "$n"
grep -F "$(printf '%s' 'local: A\x1b[2J\x1b]0;owned\x07B\rC\n12:00:00.000')" "$tmp/ev.txt" >/dev/null ||
	fail "the note is not shown escaped: $(grep operator.note "$tmp/ev.txt")"
grep -F '\u{009b}31mD\x7fE\u{202e}txt.exe\u{2066}F' "$tmp/ev.txt" >/dev/null ||
	fail "C1, DEL or bidi not escaped: $(grep operator.note "$tmp/ev.txt")"
[ "$(grep -c '^[0-9:.]* *[0-9]*  run\.stopped ' "$tmp/ev.txt")" = 1 ] ||
	fail "a forged run.stopped line: $(cat "$tmp/ev.txt")"
"$SB" attach "$R" >"$tmp/att.txt" || fail "attach exit $?"
safe "$tmp/att.txt" "$n"
cmp -s "$tmp/ev.txt" "$tmp/att.txt" || fail "attach and events differ"
"$SB" events "$R" --type operator >"$tmp/note.txt" && safe "$tmp/note.txt" 1

# -- --json stays exact
"$SB" events "$R" --json --type operator.note >"$tmp/note.json" || fail "events --json"
python3 - "$tmp/note.json" "$note" <<'EOF' || fail "--json is not exact: $(cat "$tmp/note.json")"
import json, sys
got = json.loads(open(sys.argv[1]).read())['payload']
want = json.loads(sys.argv[2])
sys.exit(0 if got['text'] == want['text'] and got['by'] == 'local' else 1)
EOF
"$SB" attach "$R" --json --from "$o" >"$tmp/att.json" || fail "attach --json"
head -1 "$tmp/att.json" | python3 -c "
import json, sys
sys.exit(0 if json.loads(sys.stdin.read())['payload']['text'] == json.loads(sys.argv[1])['text'] else 1)" \
	"$note" || fail "attach --json is not exact: $(head -1 "$tmp/att.json")"

# -- a template whose fields hold control sequences: template ls, inspect
mkdir -p "$SANBOX_TEMPLATES/evil"
printf '%s' '{"name":"evil","hash":"\u001b]0;t\u0007\u202e00","harness":"/bin/sh\r\n","cpus":1,"memory_mib":128,"timeout_s":30}' \
	>"$SANBOX_TEMPLATES/evil/template.json"
for f in vmlinux initrd.img rootfs.img; do : >"$SANBOX_TEMPLATES/evil/$f"; done
"$SB" template ls >"$tmp/tl.txt" || fail "template ls exit $?"
safe "$tmp/tl.txt" 3
grep -F 'evil' "$tmp/tl.txt" | grep -F '\x1b]0;t\x07' >/dev/null || fail "template ls: $(cat "$tmp/tl.txt")"
"$SB" template ls --json | python3 -c "
import json, sys
t = {x['name']: x for x in json.load(sys.stdin)}
sys.exit(0 if t['evil']['hash'] == '\x1b]0;t\x07\u202e00' and t['evil']['harness'] == '/bin/sh\r\n' else 1)" ||
	fail "template ls --json is not exact"
E=$("$SB" run --detach -t evil --name evil -- true) || fail "run -t evil"
wait_stopped "$E" || fail "the evil run did not stop"
"$SB" inspect "$E" >"$tmp/insp.txt" || fail "inspect exit $?"
safe "$tmp/insp.txt"
grep -F '\x1b]0;t\x07\u{202e}00' "$tmp/insp.txt" >/dev/null || fail "inspect: $(cat "$tmp/insp.txt")"

# -- ps: one row per run, whatever the runs hold
"$SB" ps >"$tmp/ps.txt" || fail "ps exit $?"
safe "$tmp/ps.txt" 3

# -- error messages quote what they were given escaped, on one line
"$SB" events "$(printf 'no\033[2J\033]0;t\007\n\377')" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 3 ] || fail "events of a hostile run name: exit $rc, want 3"
one_line "$tmp/err"
grep -F 'no\x1b[2J\x1b]0;t\x07\n\xff' "$tmp/err" >/dev/null || fail "not escaped: $(cat "$tmp/err")"
"$SB" run -t "$(printf 'x\033]0;t\007\377')" -- true 2>"$tmp/err"
rc=$?
[ $rc = 2 ] || fail "run -t of a hostile template name: exit $rc, want 2 (a bad option value)"
one_line "$tmp/err"
"$SB" ps "$(printf '\033[2J')" 2>"$tmp/err"
[ $? = 2 ] || fail "ps with an operand: exit $?"
safe "$tmp/err"
"$SB" ps "--$(printf '\033[2J\377')" 2>"$tmp/err"
[ $? = 2 ] || fail "ps with a hostile option: exit $?"
head -1 "$tmp/err" >"$tmp/err1" && one_line "$tmp/err1"
grep -F -- '--\x1b[2J\xff' "$tmp/err1" >/dev/null || fail "the option is not quoted escaped: $(cat "$tmp/err1")"

# -- names and groups that are not printable are refused; nothing recorded
before=$(runs)
for bad in "$(printf 'a\nb')" "$(printf 'tab\there')" "$(printf '\033[2Jx')" \
	"$(printf 'abc\342\200\256exe')" "$(printf 'x\302\205')" "$(printf 'bad\377')" \
	"$(printf 'cut\342\202')"; do
	for opt in --name --group; do
		"$SB" run --detach "$opt" "$bad" -- true >"$tmp/out" 2>"$tmp/err"
		rc=$?
		[ $rc = 2 ] || fail "run $opt $(printf %s "$bad" | od -c | head -1): exit $rc, want 2"
		one_line "$tmp/err"
		grep -q -- "$opt" "$tmp/err" || fail "the error does not name $opt: $(cat "$tmp/err")"
		[ ! -s "$tmp/out" ] || fail "run $opt printed: $(cat "$tmp/out")"
	done
	"$SB" stop --group "$bad" 2>/dev/null
	[ $? = 2 ] || fail "stop --group with a bad group: exit $?"
	"$SB" ps --group "$bad" 2>/dev/null
	[ $? = 2 ] || fail "ps --group with a bad group: exit $?"
done
[ "$(runs)" = "$before" ] || fail "a refused run was recorded ($before runs, now $(runs))"
R2=$("$SB" run --detach --name "$(printf 'r\303\251sum\303\251 \345\220\215')" --group "team a" -- true) ||
	fail "a printable Unicode name was refused"
wait_stopped "$R2" || fail "R2 did not stop"

# -- --input: only regular files, and never a wait
mkfifo "$tmp/fifo"
python3 -c "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])" "$tmp/sock"
for input in "$tmp/fifo" "$tmp" /dev/null "$tmp/sock"; do
	before=$(runs)
	timeout 10 "$SB" run --detach --input "$input" -- true >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ $rc = 2 ] || fail "--input $input: exit $rc, want 2 (124: it hung)"
	one_line "$tmp/err"
	grep -q 'not a regular file' "$tmp/err" || fail "--input $input: $(cat "$tmp/err")"
	[ "$(runs)" = "$before" ] || fail "--input $input recorded a run"
done
"$SB" run --detach --input "$tmp/nope" -- true 2>"$tmp/err"
[ $? = 3 ] || fail "--input of a missing file: exit $?, want 3"
one_line "$tmp/err"
printf 'data\n' >"$tmp/in.txt"
R3=$("$SB" run --detach --input "$tmp/in.txt" -- true) || fail "--input of a regular file refused"
wait_stopped "$R3" || fail "R3 did not stop"

echo "PASS cli_escape"
