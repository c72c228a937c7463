#!/bin/sh
# Rolling recorded file changes forward (fork --at) on a disk a hostile
# guest filled with links: the run makes /workspace/d a link to /etc, a
# link lf, a file f, and is snapshotted (s0); then it replaces d by a
# directory and writes d/evil, replaces the link lf by a file, the file f
# by a link to /etc/passwd, and makes a link loop. A fork --at the end of
# that (s0 plus the record) has d/evil under /workspace and no /etc/evil,
# lf as the file, f and loop as the links the record names (made, never
# written through), and its run.forked, diff and the summary agree on what
# was rolled and removed. Then a run of three turns,
# taken in quick succession (one turn snapshot at most every 5 s): a fork
# --at the offset of each turn has that turn's file, and a resume --at the
# first turn (before any snapshot) goes on from the run's start. A fork of a snapshot
# whose chain holds 17 layers gets its own base (over the template's root,
# none of its parent's layers) and reads the parent's files.
. "$(dirname "$0")/lib/vm.sh"

status() { "$SB" inspect "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["status"])'; }
forked() { events_json "$1" | python3 -c "
import json, sys
for l in sys.stdin:
    e = json.loads(l)
    if e['type'] == 'run.forked':
        p = e['payload']
        print(p['rolled'], p['removed'], ' '.join(sorted(p.get('omitted', []))), p['exact'])"
}

# ---- links replaced after the snapshot ----
CMD='if [ -e a.txt ]; then exit 0; fi
trap "rm d; mkdir d; echo evil > d/evil; rm lf; echo file > lf; rm f; ln -s /etc/passwd f; ln -s loop loop; exit 0" TERM
ln -s /etc d; ln -s /etc/hostname lf; echo base > f; echo one > a.txt; sleep 600 & wait'
P=$("$SB" run --detach --accel tcg --snapshots stop --timeout 600s -- /bin/sh -c "$CMD")
wait_event "$P" "e['type']=='agent.file.changed' and e['payload']['path']=='/workspace/a.txt'" 120 ||
	bad "setup" "the run never wrote a.txt"
has_event "$P" "e['type']=='agent.file.changed' and e['payload']['path']=='/workspace/d' and e['payload'].get('type')=='symlink' and e['payload']['kind']=='created'" &&
	ok "a link made is recorded (type symlink)" || bad "link recorded" "$(events_json "$P" | grep file.changed)"
S0=$("$SB" snapshot "$P" 2>&1)
[ "$S0" = s0 ] || bad "snapshot" "$S0"
"$SB" stop "$P" >/dev/null 2>&1
"$SB" attach "$P" >/dev/null 2>&1
s0at=$(events_json "$P" | python3 -c "
import json,sys
print([json.loads(l)['offset'] for l in sys.stdin if json.loads(l)['type']=='snapshot.saved'][0])")
last=$(events_json "$P" | python3 -c "
import json,sys
print([json.loads(l)['offset'] for l in sys.stdin if json.loads(l)['type']=='agent.file.changed'][-1])")
has_event "$P" "e['type']=='agent.file.changed' and e['payload']['path']=='/workspace/d' and e['payload']['kind']=='deleted' and e['offset']>$s0at" &&
	ok "a link deleted is recorded" || bad "link deletion" "$(events_json "$P" | grep file.changed)"

F=$("$SB" fork "$P" --at "$last" --detach 2>&1)
"$SB" attach "$F" >/dev/null 2>&1
[ "$(status "$F")" = exited ] && ok "the fork --at past the replaced links runs" ||
	bad "fork --at" "$F: $(status "$F"); $("$SB" events "$F" 2>&1 | tail -n 5)"
out=$("$SB" fs cat "$F" /etc/evil 2>&1)
[ $? = 3 ] && ok "the fork's /etc has no evil" || bad "/etc/evil" "$out"
[ "$("$SB" fs cat "$F" d/evil)" = evil ] && ok "d/evil is in the fork's /workspace/d" ||
	bad "d/evil" "$("$SB" fs ls "$F" d 2>&1)"
[ "$("$SB" fs cat "$F" lf)" = file ] && ok "a link replaced by a file: the file" ||
	bad "lf" "$("$SB" fs ls "$F" lf 2>&1)"
out=$("$SB" fs cat "$F" f 2>&1)
[ "$out" = "sanbox: /workspace/f is a symlink to /etc/passwd" ] &&
	[ "$("$SB" fs cat "$F" /etc/passwd | head -c 5)" = "root:" ] &&
	ok "a file replaced by a link: the link, /etc/passwd untouched" || bad "f" "$out"
out=$("$SB" fs cat "$F" loop 2>&1)
[ "$out" = "sanbox: /workspace/loop is a symlink to loop" ] && ok "a link loop: the link" ||
	bad "loop" "$out"
got=$(forked "$F")
[ "$got" = "4 1  True" ] && ok "run.forked: 4 rolled, 1 removed, exact" || bad "run.forked" "$got"
[ "$("$SB" diff "$P" --from "$s0at" --to "$last" | tr '\n' ' ')" = "D /workspace/d A /workspace/d/evil M /workspace/f M /workspace/lf A /workspace/loop " ] &&
	ok "diff says where the files went" || bad "diff" "$("$SB" diff "$P" --from "$s0at" --to "$last" 2>&1)"
fat=$(events_json "$P" | python3 -c "
import json,sys
print([json.loads(l)['offset'] for l in sys.stdin if json.loads(l)['type']=='agent.file.changed' and json.loads(l)['payload']['path']=='/workspace/f'][-1])")
out=$("$SB" fs cat "$P" f --at "$last" 2>&1); rc=$?
[ $rc = 1 ] && [ "$out" = "sanbox: /workspace/f is a symlink to /etc/passwd (at offset $fat)" ] &&
	ok "fs cat --at: the record's link is a link" || bad "fs cat --at a link" "$out (want offset $fat, exit $rc)"
summary=$("$SB" events "$F" 2>&1 | grep run.forked)
case $summary in
*"4 files rolled forward, 1 removed") ok "the summary says what was rolled and removed" ;;
*) bad "summary" "$summary" ;;
esac

# ---- a fork at every turn of a three-turn run ----
CMD='if [ -e turn.txt ]; then exit 0; fi
for t in 1 2 3; do echo $t > turn.txt; sleep 0.3; echo "{\"type\":\"agent.turn.completed\",\"payload\":{\"turn\":$t}}" > $SANBOX_EVENTS; sleep 0.5; done'
T=$("$SB" run --detach --accel tcg --timeout 600s -- /bin/sh -c "$CMD")
"$SB" attach "$T" >/dev/null 2>&1
nsnap=$("$SB" snapshots "$T" --json | python3 -c 'import json,sys; print(len([s for s in json.load(sys.stdin)["snapshots"] if s["trigger"]=="turn"]))')
[ "$nsnap" -lt 3 ] && ok "three turns in 2 s: $nsnap turn snapshot(s) (at most one every 5 s)" ||
	bad "turn snapshots" "$nsnap"
for t in 1 2 3; do
	at=$(events_json "$T" | python3 -c "
import json,sys
print([json.loads(l)['offset'] for l in sys.stdin if json.loads(l)['type']=='agent.turn.completed' and json.loads(l)['payload']['turn']==$t][0])")
	FT=$("$SB" fork "$T" --at "$at" --detach 2>&1)
	"$SB" attach "$FT" >/dev/null 2>&1
	[ "$("$SB" fs cat "$FT" turn.txt 2>&1)" = "$t" ] && ok "a fork --at turn $t has turn $t's file" ||
		bad "fork --at turn $t" "$FT: $("$SB" fs cat "$FT" turn.txt 2>&1)"
done
# a resume --at turn 1, before the run's first snapshot: from its start
at1=$(events_json "$T" | python3 -c "
import json,sys
print([json.loads(l)['offset'] for l in sys.stdin if json.loads(l)['type']=='agent.turn.completed'][0])")
out=$("$SB" resume "$T" --at "$at1" --detach 2>&1)
"$SB" attach "$T" >/dev/null 2>&1
[ "$("$SB" fs cat "$T" turn.txt 2>&1)" = 1 ] &&
	has_event "$T" "e['type']=='run.resumed' and e['payload']['snapshot']=='' and e['payload']['from_offset']==0 and e['payload']['at']==$at1" &&
	ok "a resume --at turn 1 (before any snapshot) goes on from the run's start" ||
	bad "resume --at turn 1" "$out; $("$SB" fs cat "$T" turn.txt 2>&1); $(events_json "$T" | grep run.resumed)"

# ---- a fork of a long chain ----
CMD='if [ -e c.txt ]; then cat c.txt > seen.txt; exit 0; fi
trap "exit 0" TERM
echo chain > c.txt; sleep 600 & wait'
L=$("$SB" run --detach --accel tcg --snapshots stop --timeout 600s -- /bin/sh -c "$CMD")
wait_event "$L" "e['type']=='agent.file.changed' and e['payload']['path']=='/workspace/c.txt'" 120 ||
	bad "setup" "the run never wrote c.txt"
i=0
while [ $i -lt 17 ]; do
	"$SB" snapshot "$L" >/dev/null 2>&1 || bad "snapshot $i" "$("$SB" snapshot "$L" 2>&1)"
	i=$((i + 1))
done
FL=$("$SB" fork "$L" --snapshot s16 --detach 2>&1)
"$SB" attach "$FL" >/dev/null 2>&1
backing=$(qemu-img info --output=json "$SANBOX_HOME/runs/$FL/layers/0.qcow2" 2>&1 |
	python3 -c 'import json,sys; print(json.load(sys.stdin).get("backing-filename",""))')
case $backing in
*/rootfs.img) ok "a fork of a 17-layer chain has its own base over the root" ;;
*) bad "fork's own base" "$backing" ;;
esac
[ "$("$SB" fs cat "$FL" seen.txt 2>&1)" = chain ] && [ "$(status "$FL")" = exited ] &&
	ok "... and runs on the parent's files" || bad "long-chain fork" "$("$SB" fs cat "$FL" seen.txt 2>&1); $(status "$FL")"
"$SB" stop "$L" >/dev/null 2>&1
"$SB" attach "$L" >/dev/null 2>&1
out=$("$SB" snapshot rm "$L" s3 2>&1)
[ $? = 0 ] && ok "the parent's snapshot under it can go: the fork reads none" || bad "snapshot rm" "$out"
[ "$("$SB" fs cat "$FL" seen.txt 2>&1)" = chain ] && ok "the fork's disk still reads" ||
	bad "fork after rm" "$("$SB" fs cat "$FL" seen.txt 2>&1)"
rm -f "$SANBOX_HOME/sanboxd.json"
exit $((failures > 0))
