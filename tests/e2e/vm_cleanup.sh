#!/bin/sh
# Removing runs of real microVMs: three runs and a fork of one. rm of the
# parent frees its own files (its end snapshot's layer, its disk link, its
# logs) but keeps the snapshot the fork's disk is layered on, and df
# shrinks by what rm says it freed; the fork still reads its files and
# resumes; rm of the fork frees the parent's kept snapshot with it. The
# removed runs' records stay (events, inspect, ps --all); their disks are
# refused in one line (fs, fork, resume). rm of a live run is refused, of
# an unknown run exits 3. cp -r copies a directory out of a run's disk.
# prune --dry-run changes nothing, prune
# --older-than 1h keeps runs that just ended, prune removes the rest. A
# daemon restart and a reproject keep the same state, and the restart
# frees what a removal left behind.
. "$(dirname "$0")/lib/vm.sh"

# First (no a.txt) it writes a.txt and waits; SIGTERM makes it write b.txt
# and exit. On a disk that has a.txt (a fork, a resume) it records what it
# sees and exits.
CMD='if [ -e a.txt ]; then echo $(ls) > seen.txt; exit 0; fi
trap "echo two > b.txt; exit 0" TERM
echo one > a.txt; sleep 600 & wait'

field() { "$SB" inspect "$1" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['run'].get('$2'))"; }
space() { "$SB" df --json | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['runs_bytes']+d['snapshots_bytes']+d['memory_bytes'])"; }
jget() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
state() { "$SB" ps --all --json | python3 -c "
import json, sys
print(sorted((r['run'], r['status'], r.get('removed', 0), r['snapshots']) for r in json.load(sys.stdin)))"; }

# ---- three runs and a fork ----
A=$("$SB" run --detach --accel tcg --name parent --snapshots stop --timeout 600s -- /bin/sh -c "$CMD")
wait_event "$A" "e['type']=='agent.file.changed' and e['payload']['path']=='/workspace/a.txt'" 120 ||
	bad "setup" "the parent never wrote a.txt"
[ "$("$SB" snapshot "$A")" = s0 ] || bad "setup" "no s0"
"$SB" stop --wait "$A" >/dev/null
B=$("$SB" run --detach --accel tcg --name b --snapshots stop -- /bin/sh -c 'echo b > b.txt
mkdir -p d/e && echo deep > d/e/f.txt && chmod 750 d/e && ln -s ../b.txt d/link && mkfifo d/fifo')
C=$("$SB" run --detach --accel tcg --name c --snapshots stop -- /bin/sh -c 'echo c > c.txt')
F=$("$SB" fork "$A" --snapshot s0 --detach)
"$SB" wait "$B" "$C" "$F" >/dev/null
[ "$(field "$F" status)" = exited ] && [ "$("$SB" fs cat "$F" seen.txt)" = a.txt ] ||
	bad "setup" "the fork: $(field "$F" status) $("$SB" fs cat "$F" seen.txt 2>&1)"

# ---- cp -r out of a run's disk ----
out=$("$SB" cp -r "$B:d" "$SANBOX_HOME/d" 2>&1)
[ $? = 0 ] && [ "$(cat "$SANBOX_HOME/d/e/f.txt")" = deep ] && [ "$(readlink "$SANBOX_HOME/d/link")" = ../b.txt ] &&
	[ "$(stat -c %a "$SANBOX_HOME/d/e")" = 750 ] && [ ! -e "$SANBOX_HOME/d/fifo" ] && case $out in *"1 entry not copied"*) true ;; *) false ;; esac &&
	ok "cp -r copies a directory out of a run (files, links, modes; a FIFO left out, counted)" ||
	bad "cp -r" "$out: $(ls -lR "$SANBOX_HOME/d" 2>&1)"
out=$("$SB" cp -r "$B:d" "$SANBOX_HOME/d" 2>&1)
[ $? = 1 ] && ok "cp -r into an existing LOCAL: refused" || bad "cp -r exists" "$out"
out=$("$SB" cp -r "$B:b.txt" "$SANBOX_HOME/x" 2>&1)
[ $? = 1 ] && case $out in *"cp -r copies a directory"*) true ;; *) false ;; esac && ok "cp -r of a file: refused" || bad "cp -r file" "$out"
rm -rf "$SANBOX_HOME/d"

# ---- refusals ----
L=$("$SB" run --detach --accel tcg --name live -- sleep 600)
out=$("$SB" rm "$L" 2>&1)
[ $? = 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && case $out in *"$L"*) true ;; *) false ;; esac &&
	ok "rm of a live run: refused in one line naming it, exit 1" || bad "rm live" "$out"
[ "$(field "$L" removed)" = 0 ] || bad "rm live" "it was removed"
out=$("$SB" rm nosuchrun 2>&1)
[ $? = 3 ] && ok "rm of an unknown run exits 3" || bad "rm unknown" "$out"
"$SB" stop --wait "$L" >/dev/null
# a run that a live fork continues is refused (a queued fork has no disk
# yet to say so), then removed once the fork has ended and is removed
L2=$("$SB" fork "$A" --snapshot s0 --detach)
out=$("$SB" rm "$A" 2>&1)
[ $? = 1 ] && case $out in *"continued by $L2"*) true ;; *) false ;; esac &&
	ok "rm of a run a live fork continues: refused, naming the fork" || bad "rm continued" "$out"
out=$("$SB" prune --dry-run 2>&1)
[ $? = 0 ] && case $out in *"$A kept: run $A is continued by $L2"*) true ;; *) false ;; esac &&
	ok "prune keeps it with a note, exit 0" || bad "prune continued" "$out"
"$SB" stop --wait "$L2" >/dev/null && "$SB" rm "$L2" >/dev/null || bad "rm continued" "cannot stop or rm $L2"

# ---- rm the parent: its own files go, the fork's snapshot stays ----
before=$(space)
out=$("$SB" rm "$A" --json)
freed=$(echo "$out" | jget "['bytes']")
kept=$(echo "$out" | jget "['runs'][0]['kept']")
after=$(space)
[ "$kept" = 1 ] && [ -f "$SANBOX_HOME/runs/$A/layers/0.qcow2" ] && [ ! -e "$SANBOX_HOME/runs/$A/layers/1.qcow2" ] &&
	[ ! -e "$SANBOX_HOME/runs/$A/disk.qcow2" ] && [ ! -e "$SANBOX_HOME/runs/$A/console.log" ] &&
	ok "rm of the parent: its end snapshot and files freed, the snapshot the fork reads kept" ||
	bad "rm parent" "$out: $(ls -R "$SANBOX_HOME/runs/$A")"
[ "$freed" -gt 0 ] && [ $((before - after)) = "$freed" ] &&
	ok "df shrank by what rm freed ($freed bytes)" || bad "df" "before $before after $after freed $freed"
[ "$(field "$A" removed)" = 1 ] && [ "$(field "$A" status)" = stopped ] &&
	ok "inspect: the record stays, removed" || bad "inspect" "$(field "$A" removed)"
has_event "$A" "e['type']=='run.removed' and e['payload']['bytes']==$freed and e['payload']['kept']==1 and e['payload']['by']=='local'" &&
	has_event "$A" "e['type']=='run.created'" &&
	ok "events of a removed run: all of them, and run.removed" || bad "events" "$(events_json "$A" | tail -n 2)"
"$SB" ps -q | grep -q "$A" && bad "ps" "shows the removed run"
"$SB" ps --all --format id,status | grep -q "^$A	removed$" &&
	ok "ps hides the removed run, ps --all shows it removed" || bad "ps --all" "$("$SB" ps --all --format id,status)"
for cmd in "fs ls $A" "fs cat $A a.txt --snapshot s0" "fork $A" "resume $A"; do
	out=$("$SB" $cmd 2>&1)
	rc=$?
	[ $rc = 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && case $out in *"was removed"*) true ;; *) false ;; esac &&
		ok "$(echo "$cmd" | cut -d' ' -f1-2 | sed "s/$A/RUN/") of a removed run: one line, exit 1" ||
		bad "$cmd" "exit $rc: $out"
done
[ "$("$SB" diff "$A" | tr '\n' ' ')" = "A /workspace/a.txt A /workspace/b.txt " ] &&
	ok "diff of a removed run reads its record" || bad "diff" "$("$SB" diff "$A" 2>&1)"
out=$("$SB" rm "$A" 2>&1)
[ $? = 1 ] && ok "rm of a removed run: refused" || bad "rm twice" "$out"

# ---- the fork still reads and resumes ----
[ "$("$SB" fs cat "$F" a.txt)" = one ] && ok "the fork still reads its files" || bad "fork reads" "$("$SB" fs cat "$F" a.txt 2>&1)"
"$SB" resume "$F" --detach >/dev/null && "$SB" wait "$F" >/dev/null
[ "$(field "$F" status)" = exited ] && [ "$("$SB" fs cat "$F" seen.txt)" = "a.txt seen.txt" ] &&
	ok "the fork resumes on the parent's kept snapshot" || bad "fork resume" "$(field "$F" status)"

# ---- rm the fork: the parent's snapshot goes with it ----
out=$("$SB" rm "$F")
case $out in "$F removed: "*" freed") true ;; *) false ;; esac && [ ! -e "$SANBOX_HOME/runs/$F" ] && [ ! -e "$SANBOX_HOME/runs/$A" ] &&
	ok "rm of the fork frees the parent's snapshot it read" || bad "rm fork" "$out: $(ls "$SANBOX_HOME/runs")"
events_json "$F" | grep -q run.removed && ok "events of the removed fork" || bad "events fork" ""

# ---- prune ----
du0=$(du -s --block-size=1 "$SANBOX_HOME/runs" | cut -f1)
out=$("$SB" prune --dry-run)
[ "$(echo "$out" | grep -c ' would be removed: ')" = 3 ] && [ "$(echo "$out" | tail -n 1 | cut -d' ' -f1-5)" = "3 runs would be removed," ] &&
	[ "$(du -s --block-size=1 "$SANBOX_HOME/runs" | cut -f1)" = "$du0" ] && [ "$(field "$B" removed)" = 0 ] &&
	ok "prune --dry-run lists the 3 ended runs and changes nothing" || bad "prune dry" "$out"
out=$("$SB" prune --older-than 1h --json)
[ "$(echo "$out" | jget "['runs']")" = "[]" ] && [ -d "$SANBOX_HOME/runs/$B" ] &&
	ok "prune --older-than 1h keeps runs that just ended" || bad "prune 1h" "$out"

# ---- a restart and a reproject keep the state; the restart finishes removals ----
"$SB" rm "$C" >/dev/null
mkdir -p "$SANBOX_HOME/runs/$C" && echo left > "$SANBOX_HOME/runs/$C/console.log"
s1=$(state)
"$SB" daemon stop >/dev/null
s2=$(state)
[ "$s1" = "$s2" ] && [ ! -e "$SANBOX_HOME/runs/$C" ] &&
	ok "a daemon restart keeps the state and frees what a removal left" || bad "restart" "$s1 / $s2"
"$SB" admin reproject >/dev/null
s3=$(state)
[ "$s3" = "$s1" ] && ok "reproject gives the same state" || bad "reproject" "$s1 / $s3"

out=$("$SB" prune)
[ "$(echo "$out" | tail -n 1 | cut -d' ' -f1-3)" = "2 runs removed," ] && [ -z "$(ls "$SANBOX_HOME/runs")" ] &&
	[ "$("$SB" df --json | jget "['runs']")" = 0 ] && [ "$(space)" = 0 ] &&
	ok "prune removes the rest; df: no runs left" || bad "prune" "$out: $(ls "$SANBOX_HOME/runs")"
[ -z "$("$SB" ps -q)" ] && [ "$("$SB" ps --all -q | wc -l)" = 6 ] || bad "ps" "$("$SB" ps --all)"

[ "$failures" = 0 ]
