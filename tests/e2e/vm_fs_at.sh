#!/bin/sh
# fs ls --at OFFSET: a run of three turns (a snapshot after each) writes,
# changes and deletes files, a link, a directory and a file over the
# record's content cap. At every offset from its first snapshot on, fs ls
# --at of /workspace and of /workspace/d equals the newest snapshot's
# listing with the recorded changes after it applied (a model here in
# Python), the big file is marked as lacking its content (text and
# --json), and at two offsets it equals what a fork --at that offset has
# on its disk. Before the first snapshot, fs ls --at lists the template's
# /workspace with the run's own input and the changes up to the offset,
# as a fork --at such an offset has them, and fs cat --at reads them.
. "$(dirname "$0")/lib/vm.sh"

CMD='if [ -e m ]; then exit 0; fi
turn() { sleep 0.5; echo "{\"type\":\"agent.turn.completed\",\"payload\":{\"turn\":$1}}" > $SANBOX_EVENTS; sleep 6; }
echo m > m; mkdir d; echo a > a.txt; echo x > d/x; ln -s a.txt l; turn 1
echo aa > a.txt; rm d/x; echo y > d/y; head -c 1300000 /dev/zero > big; echo b > b.txt; turn 2
rm a.txt; rm -r d; mkdir e; echo z > e/z; rm l; ln -s e l; echo bb > b.txt; turn 3'
printf 'given\n' >"$SANBOX_HOME/in.txt"
P=$("$SB" run --detach --accel tcg --timeout 600s --input "$SANBOX_HOME/in.txt" -- /bin/sh -c "$CMD")
"$SB" attach "$P" >/dev/null 2>&1
events_json "$P" >"$SANBOX_HOME/ev.json"
"$SB" snapshots "$P" --json >"$SANBOX_HOME/snaps.json"
nsnap=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["snapshots"]))' "$SANBOX_HOME/snaps.json")
[ "$nsnap" -ge 3 ] && ok "three turns: $nsnap snapshots" || bad "snapshots" "$(cat "$SANBOX_HOME/snaps.json")"

# names DIR [ARGS]: the sorted names fs ls --json gives, "!" before the
# ones whose content is missing; "ERR rc" when it fails
names() {
	out=$("$SB" fs ls "$P" "$@" --json 2>/dev/null) || { echo "ERR $?"; return; }
	printf '%s' "$out" | python3 -c '
import json,sys
print(" ".join(("!" if e.get("content") == "missing" else "") + e["name"] for e in json.load(sys.stdin)))'
}

# the model: for each offset, the snapshot it starts from and what
# /workspace and d hold then, from the snapshots' listings and the events
python3 - "$SANBOX_HOME/ev.json" "$SANBOX_HOME/snaps.json" >"$SANBOX_HOME/offsets" <<'EOF'
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
snaps = json.load(open(sys.argv[2]))["snapshots"]
first = min(s["offset"] for s in snaps)
for e in evs:
    o = e["offset"]
    if o >= first:
        s = max((s for s in snaps if s["offset"] <= o), key=lambda s: s["offset"])
        print(o, s["snapshot"], s["offset"])
EOF
model() { # OFFSET SNAP SNAPOFF DIR [BASE]: what DIR holds at OFFSET by the
	# model (SNAP start: from BASE, what the run's start holds)
	if [ "$2" = start ]; then base=$5; else base=$(names "$4" --snapshot "$2"); fi
	python3 - "$SANBOX_HOME/ev.json" "$1" "$3" "$4" "$base" <<'EOF'
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
at, snap, d, base = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
pre = "/workspace/" + (d + "/" if d else "")
last = {}
for e in evs:
    if e["type"] == "agent.file.changed" and snap < e["offset"] <= at:
        last[e["payload"]["path"]] = e["payload"]
gone = any(p["kind"] == "deleted" and pre.startswith(k + "/") for k, p in last.items())
made = any(p["kind"] != "deleted" and k.startswith(pre) for k, p in last.items())
if base.startswith("ERR") and not made:
    print(base); sys.exit()
have = set() if gone or base.startswith("ERR") else set(base.replace("!", "").split())
missing = set()
for k, p in last.items():
    if not k.startswith(pre):
        continue
    rest = k[len(pre):]
    top = rest.split("/")[0]
    if p["kind"] == "deleted":
        if "/" not in rest:
            have.discard(top)
    else:
        have.add(top)
        if "/" not in rest and len(p.get("content", "")) != 64:
            missing.add(top)
print(" ".join(("!" if n in missing else "") + n for n in sorted(have)))
EOF
}

n=0 nbad=0
while read -r off snap soff; do
	for d in "" d; do
		want=$(model "$off" "$snap" "$soff" "$d")
		got=$(names "$d" --at "$off")
		n=$((n + 1))
		if [ "$got" != "$want" ]; then
			nbad=$((nbad + 1))
			[ $nbad -le 5 ] && echo "  at $off ($snap at $soff) /workspace/$d: got '$got' want '$want'"
		fi
	done
done <"$SANBOX_HOME/offsets"
[ $n -gt 20 ] && [ $nbad = 0 ] && ok "fs ls --at equals the roll-forward at each of $n offsets and paths" ||
	bad "fs ls --at" "$nbad of $n differ"

# before the first snapshot: the run's start (the template's empty
# /workspace and the input) with the changes up to the offset
python3 - "$SANBOX_HOME/ev.json" "$SANBOX_HOME/snaps.json" >"$SANBOX_HOME/early" <<'EOF'
import json, sys
snaps = json.load(open(sys.argv[2]))["snapshots"]
first = min(s["offset"] for s in snaps)
for l in open(sys.argv[1]):
    if l.strip() and json.loads(l)["offset"] < first:
        print(json.loads(l)["offset"])
EOF
n=0 nbad=0
while read -r off; do
	for d in "" d; do
		[ -z "$d" ] && b=in.txt || b="ERR 3"
		want=$(model "$off" start 0 "$d" "$b")
		got=$(names "$d" --at "$off")
		n=$((n + 1))
		if [ "$got" != "$want" ]; then
			nbad=$((nbad + 1))
			[ $nbad -le 5 ] && echo "  at $off (start) /workspace/$d: got '$got' want '$want'"
		fi
	done
done <"$SANBOX_HOME/early"
[ $n -gt 6 ] && [ $nbad = 0 ] && ok "fs ls --at before the first snapshot: the start rolled forward, at each of $n offsets and paths" ||
	bad "fs ls --at start" "$nbad of $n differ"
aat=$(python3 -c '
import json,sys
print([json.loads(l)["offset"] for l in open(sys.argv[1]) if "/workspace/a.txt" in l and "agent.file.changed" in l][0])' "$SANBOX_HOME/ev.json")
[ "$("$SB" fs cat "$P" in.txt --at 1)" = given ] && [ "$("$SB" fs cat "$P" a.txt --at "$aat")" = a ] &&
	"$SB" fs ls "$P" / --at 1 | grep -q ' workspace$' &&
	ok "fs cat/ls --at before the first snapshot: the input, a recorded file, the template's /" ||
	bad "fs cat --at start" "$("$SB" fs cat "$P" in.txt --at 1 2>&1)"
F=$("$SB" fork "$P" --at "$aat" --detach 2>&1)
"$SB" attach "$F" >/dev/null 2>&1
want=$(names "" --at "$aat")
got=$("$SB" fs ls "$F" --json 2>/dev/null | python3 -c '
import json,sys
print(" ".join(sorted(e["name"] for e in json.load(sys.stdin))))' 2>/dev/null)
[ -n "$want" ] && [ "$got" = "$want" ] && ok "fork --at $aat (before the first snapshot): /workspace as fs ls --at lists it ($got)" ||
	bad "fork --at start" "fork '$got', fs ls --at '$want'"

# the big file: marked in the text listing too, once it is made
big=$(python3 -c '
import json,sys
print([json.loads(l)["offset"] for l in open(sys.argv[1]) if "/workspace/big" in l and "agent.file.changed" in l][0])' "$SANBOX_HOME/ev.json")
line=$("$SB" fs ls "$P" --at "$big" 2>/dev/null | grep ' big')
case $line in
*" big (content not in the record)") ok "a file over the content cap is marked" ;;
*) bad "big marked" "$line" ;;
esac

# forks at two offsets past a snapshot: the same names (but the files
# whose content the record lacks, which a fork cannot have)
for pick in mid last; do
	off=$(python3 - "$SANBOX_HOME/offsets" "$pick" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1])]
rows = [r for r in rows if int(r[0]) > int(r[2])]
print(rows[len(rows) // 2][0] if sys.argv[2] == "mid" else rows[-1][0])
EOF
)
	F=$("$SB" fork "$P" --at "$off" --detach 2>&1)
	"$SB" attach "$F" >/dev/null 2>&1
	for d in "" e d; do
		want=$(names "$d" --at "$off" | tr ' ' '\n' | grep -v '^!' | grep -v '^$' | tr '\n' ' ')
		got=$("$SB" fs ls "$F" $d --json 2>/dev/null | python3 -c '
import json,sys
print(" ".join(e["name"] for e in json.load(sys.stdin)))' 2>/dev/null | tr ' ' '\n' | grep -v '^$' | tr '\n' ' ')
		case $want in ERR*) want= ;; esac
		[ "$got" = "$want" ] && ok "fork --at $off ($pick): /workspace/$d as fs ls --at lists it" ||
			bad "fork --at $off /workspace/$d" "fork '$got', fs ls --at '$want'"
	done
done
exit $((failures > 0))
