#!/bin/sh
# Snapshots, forks and resumes of real microVMs:
#   a run writes a.txt and is snapshotted on demand (s0); stopped, its
#   harness writes b.txt, and the run's end is snapshotted (s1). A fork of
#   s0 sees only a.txt, a fork of s1 both; 5 forks of s1 run at once,
#   diverge (each its own random bytes) and leave the parent unchanged;
#   removing a snapshot a fork reads is refused, naming the fork, and one
#   nobody reads goes; a fork of a snapshot whose layer is gone fails in one
#   line naming the file and records nothing; a live run cannot be resumed;
#   an ended run resumes from its end snapshot and keeps its id; agent
#   turns give automatic snapshots, rate-limited (a guest reporting 300
#   turns causes no storm); --snapshots off takes none. A memory snapshot
#   of a live run, resumed, continues a counter in the guest's running
#   process where it was; with its memory file truncated, the resume fails
#   in one line naming the file and records nothing; it is taken with the
#   harness frozen, and two forks of a 2-vCPU guest reading the kernel's
#   randomness as fast as they go share no read made after the snapshot
#   (the file the snapshot's own layer holds, read offline, is the prefix
#   of both forks' files: the journal was written out first). With
#   runs.snapshots_keep 2, a live run's older automatic snapshots are merged
#   away (QMP block-stream) as it goes, and its files all stay readable.
. "$(dirname "$0")/lib/vm.sh"

# What every run here runs: the first time (no a.txt) it writes a.txt and
# waits; SIGTERM (sanbox stop) makes it write b.txt and exit. Run again on a
# disk that has a.txt (a fork, a resume) it records what it sees and eight
# random bytes, and exits.
CMD='if [ -e a.txt ]; then echo $(ls) > seen.txt; od -An -N8 -tx1 /dev/urandom > rand.txt; exit 0; fi
trap "echo two > b.txt; exit 0" TERM
echo one > a.txt; sleep 600 & wait'

status() { "$SB" inspect "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["status"])'; }
# snaps RUN [FILTER]: the ids of RUN's snapshots (FILTER: a python condition on s)
snaps() {
	"$SB" snapshots "$1" --json | python3 -c "
import json, sys
print(' '.join(s['snapshot'] for s in json.load(sys.stdin)['snapshots'] if ${2:-True}))"
}
# seen_of RUN: waits for RUN to end, prints its seen.txt
seen_of() {
	"$SB" attach "$1" >/dev/null 2>&1
	"$SB" fs cat "$1" seen.txt 2>&1
}
nruns() { "$SB" ps --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'; }

# ---- a snapshot of a live run, and the one of its end ----
P=$("$SB" run --detach --accel tcg --name parent --snapshots stop --timeout 600s -- /bin/sh -c "$CMD")
wait_event "$P" "e['type']=='agent.file.changed' and e['payload']['path']=='/workspace/a.txt'" 120 ||
	bad "setup" "the parent never wrote a.txt"
S0=$("$SB" snapshot "$P" 2>&1)
[ "$S0" = s0 ] && ok "snapshot of a live run: s0" || bad "snapshot" "$S0"
has_event "$P" "e['type']=='snapshot.saved' and e['payload']['snapshot']=='s0' and e['payload']['synced'] and e['payload']['trigger']=='demand' and e['payload']['kind']=='disk'" &&
	ok "snapshot.saved s0: disk, on demand, the guest synced first" ||
	bad "snapshot.saved" "$(events_json "$P" | grep snapshot)"
[ "$(readlink "$SANBOX_HOME/runs/$P/disk.qcow2")" = layers/1.qcow2 ] &&
	[ -z "$(find "$SANBOX_HOME/runs/$P/layers/0.qcow2" -perm /222)" ] &&
	ok "s0's layer frozen, the run writes a new one" || bad "layers" "$(ls -l "$SANBOX_HOME/runs/$P/layers")"
out=$("$SB" resume "$P" 2>&1)
[ $? = 1 ] && [ "$out" = "sanbox: run $P is still running: fork it instead" ] &&
	ok "a live run cannot be resumed" || bad "resume live" "$out"
"$SB" stop "$P" >/dev/null
"$SB" attach "$P" >/dev/null 2>&1
[ "$(snaps "$P")" = "s0 s1" ] && has_event "$P" "e['type']=='snapshot.saved' and e['payload']['snapshot']=='s1' and e['payload']['trigger']=='end'" &&
	ok "the run's end is snapshot s1" || bad "end snapshot" "$(snaps "$P")"
[ "$(status "$P")" = stopped ] && ok "the parent stopped" || bad "parent" "$(status "$P")"

# ---- reading a snapshot's files ----
[ "$("$SB" fs ls "$P" --snapshot s0 | awk '{print $NF}' | tr '\n' ' ')" = "a.txt " ] &&
	[ "$("$SB" fs cat "$P" b.txt --snapshot s1)" = two ] &&
	ok "fs ls/cat --snapshot read the snapshot's files" || bad "fs --snapshot" "$("$SB" fs ls "$P" --snapshot s0 2>&1)"
s0at=$(events_json "$P" | python3 -c "
import json, sys
print([json.loads(l) for l in sys.stdin if '\"snapshot.saved\"' in l][0]['offset'])")
[ "$("$SB" fs ls "$P" --at "$s0at" 2>/dev/null | awk '{print $NF}' | tr '\n' ' ')" = "a.txt " ] &&
	ok "fs ls --at the offset of s0 reads s0" || bad "fs --at" "$("$SB" fs ls "$P" --at "$s0at" 2>&1)"
# the record holds each file's content: b.txt, written after s0, is read
# at its offset from s0 plus the record; diff lists what changed when
bat=$(events_json "$P" | python3 -c "
import json, sys
print([e for e in map(json.loads, sys.stdin) if e['type'] == 'agent.file.changed' and
       e['payload']['path'] == '/workspace/b.txt'][0]['offset'])")
has_event "$P" "e['type']=='agent.file.changed' and e['payload']['path']=='/workspace/a.txt' and len(e['payload']['content'])==64" &&
	ok "agent.file.changed names its content's blob" || bad "content" "$(events_json "$P" | grep file.changed)"
[ "$("$SB" fs cat "$P" b.txt --at "$bat")" = two ] &&
	ok "fs cat --at a later offset than the snapshot: the recorded content" ||
	bad "fs cat --at" "$("$SB" fs cat "$P" b.txt --at "$bat" 2>&1)"
out=$("$SB" fs cat "$P" b.txt --at "$s0at" 2>&1)
[ $? = 3 ] && ok "... and before it was written, there is none" || bad "fs cat --at before" "$out"
[ "$("$SB" diff "$P" --from "$s0at")" = "A /workspace/b.txt" ] &&
	[ "$("$SB" diff "$P" | tr '\n' ' ')" = "A /workspace/a.txt A /workspace/b.txt " ] &&
	[ "$("$SB" diff "$P" --from "$s0at" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["status"])')" = A ] &&
	ok "diff lists the files changed between two offsets" || bad "diff" "$("$SB" diff "$P" --from "$s0at" 2>&1)"

# ---- forks ----
F0=$("$SB" fork "$P" --snapshot s0 --detach)
F1=$("$SB" fork "$P" --detach) # the newest: s1
[ "$(seen_of "$F0")" = a.txt ] && ok "a fork of s0 sees only a.txt" || bad "fork s0" "$(seen_of "$F0")"
[ "$(seen_of "$F1")" = "a.txt b.txt" ] && ok "a fork of s1 sees a.txt and b.txt" || bad "fork s1" "$(seen_of "$F1")"
[ "$(status "$F0")" = exited ] && has_event "$F0" "e['type']=='run.forked' and e['payload']['from_run']=='$P' and e['payload']['snapshot']=='s0'" &&
	ok "the fork's record says where it came from" || bad "run.forked" "$(events_json "$F0" | head -n 3)"
parent=$("$SB" inspect "$F0" --json | python3 -c 'import json,sys; r=json.load(sys.stdin)["run"]; print(r["parent"], r["parent_snapshot"])')
[ "$parent" = "$P s0" ] && ok "lineage: the fork's parent and snapshot" || bad "lineage" "$parent"

# a fork --at b.txt's offset: s0 (a.txt), then b.txt rolled forward from
# the record before its harness starts
FB=$("$SB" fork "$P" --at "$bat" --detach)
[ "$(seen_of "$FB")" = "a.txt b.txt" ] && [ "$("$SB" fs cat "$FB" b.txt)" = two ] &&
	has_event "$FB" "e['type']=='run.forked' and e['payload']['snapshot']=='s0' and e['payload']['rolled']==1 and e['payload']['exact']" &&
	ok "a fork --at an offset past s0: s0 and the recorded changes after it" ||
	bad "roll-forward" "saw $(seen_of "$FB"); $(events_json "$FB" | grep run.forked)"

t0=$(date +%s)
FORKS=$("$SB" fork "$P" --snapshot s1 -n 5 --detach)
[ "$(echo "$FORKS" | wc -l)" = 5 ] && ok "5 forks of one snapshot at once" || bad "fork -n 5" "$FORKS"
rands=""
for F in $FORKS; do
	s=$(seen_of "$F")
	[ "$s" = "a.txt b.txt" ] || bad "fork $F" "saw $s"
	rands="$rands$("$SB" fs cat "$F" rand.txt)
"
done
[ "$(printf '%s' "$rands" | sort -u | grep -c .)" = 5 ] && ok "the 5 forks diverged (5 different random streams)" ||
	bad "divergence" "$rands"
# booted, each has a machine id of its own, not its parent's (on its disk)
ids="$("$SB" fs cat "$P" /etc/machine-id)
"
for F in $FORKS; do ids="$ids$("$SB" fs cat "$F" /etc/machine-id)
"; done
[ "$(printf '%s' "$ids" | grep -cxE '[0-9a-f]{32}')" = 6 ] && [ "$(printf '%s' "$ids" | sort -u | grep -c .)" = 6 ] &&
	ok "a booted run has a machine id, each fork its own" || bad "machine ids" "$ids"
echo "bench-ish: 5 forks ran in $(($(date +%s) - t0)) s" >&2
out=$("$SB" fs ls "$P" 2>&1)
case $out in *seen.txt* | *rand.txt*) bad "parent unchanged" "$out" ;; *a.txt*b.txt*) ok "the parent is unchanged" ;; *) bad "parent" "$out" ;; esac
forks=$("$SB" inspect "$P" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["forks"])')
[ "$forks" = 8 ] && ok "the parent counts its 8 forks" || bad "forks count" "$forks"

# ---- removing snapshots ----
out=$("$SB" snapshot rm "$P" s0 2>&1)
[ $? = 1 ] && case $out in "sanbox: cannot remove snapshot s0 of run $P: run "*" reads it") true ;; *) false ;; esac &&
	ok "a snapshot a fork reads is not removed" || bad "rm refused" "$out"
[ -f "$SANBOX_HOME/runs/$P/layers/0.qcow2" ] && ok "its layer is still there" || bad "rm refused" "layer gone"
used=$("$SB" snapshots "$P" --json | python3 -c 'import json,sys; print(len([s for s in json.load(sys.stdin)["snapshots"] if s["snapshot"]=="s0"][0]["used_by"]))')
[ "$used" -ge 1 ] && ok "snapshots lists who reads s0" || bad "used_by" "$used"

# a run of its own, whose middle snapshot nobody reads
L=$("$SB" run --detach --accel tcg --name lonely --snapshots stop --timeout 600s -- /bin/sh -c "$CMD")
wait_event "$L" "e['type']=='agent.file.changed' and e['payload']['path']=='/workspace/a.txt'" 120
"$SB" snapshot "$L" >/dev/null
"$SB" stop "$L" >/dev/null
"$SB" attach "$L" >/dev/null 2>&1
out=$("$SB" snapshot rm "$L" s0 2>&1)
[ "$out" = "$L s0 removed" ] && [ ! -e "$SANBOX_HOME/runs/$L/layers/0.qcow2" ] && [ "$(snaps "$L")" = s1 ] &&
	has_event "$L" "e['type']=='snapshot.removed' and e['payload']['snapshot']=='s0'" &&
	ok "a snapshot nobody reads is removed (snapshot.removed)" || bad "rm" "$out: $(snaps "$L")"
[ "$("$SB" fs cat "$L" a.txt)" = one ] && [ "$("$SB" fs cat "$L" b.txt)" = two ] &&
	ok "the run's disk reads the same after the removal" || bad "rebase" "$("$SB" fs ls "$L" 2>&1)"

# ---- a snapshot whose file is gone ----
n=$(nruns)
mv "$SANBOX_HOME/runs/$L/layers/1.qcow2" "$SANBOX_HOME/runs/$L/layers/1.gone"
out=$("$SB" fork "$L" --snapshot s1 --detach 2>&1)
rc=$?
[ $rc = 3 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && case $out in *"/runs/$L/layers/1.qcow2"*) true ;; *) false ;; esac &&
	ok "a fork of a missing snapshot file: one line naming it" || bad "missing layer" "exit $rc: $out"
[ "$(nruns)" = "$n" ] && ok "and nothing recorded" || bad "missing layer" "runs $n -> $(nruns)"
mv "$SANBOX_HOME/runs/$L/layers/1.gone" "$SANBOX_HOME/runs/$L/layers/1.qcow2"

# ---- resume ----
out=$("$SB" resume "$P" --detach 2>&1)
[ "$out" = "$P" ] && ok "resume keeps the run's id" || bad "resume" "$out"
[ "$(seen_of "$P")" = "a.txt b.txt" ] && [ "$(status "$P")" = exited ] &&
	ok "the resumed run continued from its end snapshot and exited" || bad "resume" "$(status "$P"): $(seen_of "$P")"
has_event "$P" "e['type']=='run.resumed' and e['payload']['snapshot']=='s1' and e['payload']['exact']" &&
	ok "run.resumed: from s1, exact" || bad "run.resumed" "$(events_json "$P" | grep resumed)"

# ---- automatic snapshots after turns ----
T=$("$SB" run --detach --accel tcg --name turns --timeout 300s -- /bin/sh -c '
	i=0; while [ $i -lt 300 ]; do i=$((i + 1)); echo "{\"type\":\"agent.turn.completed\",\"payload\":{\"turn\":$i}}"; done > $SANBOX_EVENTS
	sleep 2; exit 0')
"$SB" attach "$T" >/dev/null 2>&1
turns=$(snaps "$T" "s['trigger']=='turn'" | wc -w)
ends=$(snaps "$T" "s['trigger']=='end'" | wc -w)
nturn=$(events_json "$T" | grep -c '"agent.turn.completed"')
[ "$nturn" = 300 ] && [ "$turns" -ge 1 ] && [ "$turns" -le 2 ] && [ "$ends" = 1 ] &&
	ok "300 turns: $turns automatic snapshots (rate-limited) and the end's" ||
	bad "turn snapshots" "$nturn turns, $turns turn snapshots, $ends end"
O=$("$SB" run --detach --accel tcg --snapshots off --timeout 300s -- true)
"$SB" attach "$O" >/dev/null 2>&1
[ -z "$(snaps "$O")" ] && ok "--snapshots off: none" || bad "snapshots off" "$(snaps "$O")"
# ---- a memory snapshot: the guest's processes go on ----
M=$("$SB" run --detach --accel tcg --snapshots stop --timeout 300s -- /bin/sh -c \
	'i=0; while true; do i=$((i + 1))
	wget -q -O /dev/null --header "Authorization: Bearer $OPENAI_API_KEY" $OPENAI_BASE_URL/models && m=ok || m=no
	echo "n=$i r=$(od -An -N4 -tx1 /dev/urandom | tr -d " ") m=$m"; sleep 1; done')
wait_event "$M" "e['type']=='agent.output' and 'n=3' in e['payload']['data']" 120 || bad "setup" "no counter"
MS=$("$SB" snapshot "$M" --memory 2>&1)
at=$(events_json "$M" | python3 -c "
import json, sys
evs = [json.loads(l) for l in sys.stdin if l.strip()]
snap = [e for e in evs if e['type'] == 'snapshot.saved'][0]
lines = [ln for e in evs if e['type'] == 'agent.output' and e['offset'] < snap['offset']
         for ln in e['payload']['data'].splitlines() if ln.startswith('n=')]
print(lines[-1].split()[0][2:], snap['payload']['kind'], snap['payload']['memory_bytes'] > 0, snap['payload']['frozen'])")
case $at in *" memory True True") ok "memory snapshot $MS taken at n=${at%% *}, the harness frozen" ;; *) bad "memory snapshot" "$MS: $at" ;; esac
wait_event "$M" "e['type']=='agent.output' and 'n=$((${at%% *} + 3))' in e['payload']['data']" 60
"$SB" stop "$M" >/dev/null
"$SB" attach "$M" >/dev/null 2>&1
"$SB" resume "$M" --snapshot "$MS" --detach >/dev/null
first=$(for i in $(seq 1 60); do
	v=$(events_json "$M" | python3 -c "
import json, sys
evs = [json.loads(l) for l in sys.stdin if l.strip()]
res = [e['offset'] for e in evs if e['type'] == 'run.resumed']
lines = [ln for e in evs if res and e['type'] == 'agent.output' and e['offset'] > res[-1]
         for ln in e['payload']['data'].splitlines() if ln.startswith('n=')]
print(lines[0].split()[0][2:] if lines else '')")
	[ -n "$v" ] && { echo "$v"; break; }
	sleep 1
done)
# n=at+1, or at+2 when the guest's last line before the freeze was still on
# its way to the host (recorded after the snapshot); never a fresh start
[ -n "$first" ] && { [ "$first" = $((${at%% *} + 1)) ] || [ "$first" = $((${at%% *} + 2)) ]; } &&
	ok "resumed from memory, the counter goes on at n=$first" || bad "memory resume" "snapshot at n=${at%% *}, resumed at n=$first"
has_event "$M" "e['type']=='run.resumed' and e['payload']['memory']" && ok "run.resumed says memory" ||
	bad "run.resumed memory" "$(events_json "$M" | grep resumed)"
# two forks of the memory snapshot: the counter goes on in each, each with
# its own randomness and machine id, and the parent's key its process holds
# works on the fork's own connections
FM=$("$SB" fork "$M" --snapshot "$MS" -n 2 --detach)
fork_line() { # after run.forked: "N R M" (first count, its randomness, model access)
	for i in $(seq 1 90); do
		v=$(events_json "$1" | python3 -c "
import json, sys
evs = [json.loads(l) for l in sys.stdin if l.strip()]
fk = [e['offset'] for e in evs if e['type'] == 'run.forked']
lines = [ln for e in evs if fk and e['type'] == 'agent.output' and e['offset'] > fk[0]
         for ln in e['payload']['data'].splitlines() if ln.startswith('n=')]
kv = lambda ln: dict(x.split('=', 1) for x in ln.split() if '=' in x)
# the first line's count and randomness; the third's model access (a call
# under way at the freeze may fail: the agent closes its old streams)
print('%s %s %s' % (kv(lines[0]).get('n'), kv(lines[0]).get('r'), kv(lines[2]).get('m')) if len(lines) >= 3 else '')")
		[ -n "$v" ] && { echo "$v"; return; }
		sleep 1
	done
}
l1=$(fork_line "$(echo "$FM" | sed -n 1p)")
l2=$(fork_line "$(echo "$FM" | sed -n 2p)")
n1=${l1%% *}; n2=${l2%% *}
[ -n "$n1" ] && [ -n "$n2" ] && [ "$n1" -gt "${at%% *}" ] && [ "$n2" -gt "${at%% *}" ] &&
	[ "$n1" -le $((${at%% *} + 3)) ] && [ "$n2" -le $((${at%% *} + 3)) ] &&
	ok "two forks of a memory snapshot go on counting (n=$n1, n=$n2)" || bad "memory forks" "at n=${at%% *}: '$l1' '$l2'"
r1=$(echo "$l1" | cut -d' ' -f2); r2=$(echo "$l2" | cut -d' ' -f2)
[ -n "$r1" ] && [ "$r1" != "$r2" ] && ok "... with their own random streams" || bad "memory fork randomness" "$r1 $r2"
[ "$(echo "$l1" | cut -d' ' -f3)" = ok ] && [ "$(echo "$l2" | cut -d' ' -f3)" = ok ] &&
	ok "... and model access with the key their processes hold" || bad "memory fork key" "'$l1' '$l2'"
for F in $FM; do "$SB" stop "$F" >/dev/null; "$SB" attach "$F" >/dev/null 2>&1; done
id1=$("$SB" fs cat "$(echo "$FM" | sed -n 1p)" /etc/machine-id)
id2=$("$SB" fs cat "$(echo "$FM" | sed -n 2p)" /etc/machine-id)
[ ${#id1} = 32 ] && [ ${#id2} = 32 ] && [ "$id1" != "$id2" ] &&
	ok "... and their own machine ids" || bad "memory fork machine ids" "'$id1' '$id2'"
"$SB" stop "$M" >/dev/null
"$SB" attach "$M" >/dev/null 2>&1
nev=$(events_json "$M" | wc -l)
mem=$SANBOX_HOME/runs/$M/layers/${MS#s}.mem
truncate -s 100000 "$mem"
out=$("$SB" resume "$M" --snapshot "$MS" 2>&1)
rc=$?
[ $rc != 0 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && case $out in *"$mem holds 100000 bytes"*) true ;; *) false ;; esac &&
	ok "a truncated memory file: one line naming it" || bad "truncated memory" "exit $rc: $out"
[ "$(events_json "$M" | wc -l)" = "$nev" ] && [ "$(status "$M")" = stopped ] &&
	ok "and nothing recorded" || bad "truncated memory" "events $nev -> $(events_json "$M" | wc -l)"
# ---- no process of a copy runs before RESTORED reseeded it ----
# A reader of the kernel's randomness, as fast as it goes, on the second of
# 2 vCPUs while the agent handles RESTORED on the first: the lines its two
# forks add after the file the snapshot holds must differ from the first
# (the one read under way at the freeze may be in both).
Q=$("$SB" run --detach --accel tcg --cpu 2 --snapshots off --timeout 300s -- /bin/sh -c \
	'while :; do od -An -N8 -tx1 /dev/urandom >>q.txt; done')
wait_event "$Q" "e['type']=='harness.input.ready'" 120 || bad "reader" "did not start"
sleep 2
QS=$("$SB" snapshot "$Q" --memory 2>&1)
QF=$("$SB" fork "$Q" --snapshot "$QS" -n 2 --detach)
sleep 4
for F in $QF; do "$SB" stop "$F" >/dev/null; "$SB" attach "$F" >/dev/null 2>&1; done
q=$SANBOX_HOME/q
"$SB" fs cat "$Q" q.txt --snapshot "$QS" >"$q.0" 2>&1
i=1
for F in $QF; do "$SB" fs cat "$F" q.txt >"$q.$i" 2>&1; i=$((i + 1)); done
"$SB" stop "$Q" >/dev/null
got=$(python3 - "$q.0" "$q.1" "$q.2" <<'PY'
import sys
p, a, b = (open(f).read().splitlines() for f in sys.argv[1:])
if not p or a[:len(p)] != p or b[:len(p)] != p:
    print("bad: the forks' files do not start with the snapshot's (%d lines)" % len(p))
    sys.exit()
a, b = a[len(p):], b[len(p):]
same = 0
while same < min(len(a), len(b)) and a[same] == b[same]:
    same += 1
print("%s: %d of %d and %d reads the same after the snapshot's %d" %
      ("ok" if same <= 1 and min(len(a), len(b)) >= 5 else "bad", same, len(a), len(b), len(p)))
PY
)
case $got in
ok:*) ok "a fork's processes read no random byte before it was reseeded (${got#ok: })" ;;
*) bad "memory fork reseed (reads before RESTORED)" "${got#bad: }" ;;
esac
# ---- the reference harness continues its conversation ----
H=$("$SB" run --detach --accel tcg --timeout 300s "fix the failing test")
"$SB" attach "$H" >/dev/null 2>&1
out=$("$SB" resume "$H" --prompt "now add a test" 2>&1)
[ $? = 0 ] && ok "a harness run resumed with a new prompt" || bad "harness resume" "$(printf '%s' "$out" | tail -n 3)"
roles=$("$SB" fs cat "$H" /var/lib/sanbox/conversation.json | python3 -c "
import json, sys
m = json.load(sys.stdin)
print(m[0]['role'], [x['content'] for x in m if x['role'] == 'user'], m[-1]['role'])")
[ "$roles" = "system ['fix the failing test', 'now add a test'] assistant" ] &&
	ok "the conversation on the disk goes on from the first prompt" || bad "conversation" "$roles"
grow=$(events_json "$H" | python3 -c "
import json, sys
evs = [json.loads(l) for l in sys.stdin]
res = [e['offset'] for e in evs if e['type'] == 'run.resumed'][-1]
calls = [(e['offset'], e['payload']['input_tokens']) for e in evs
         if e['type'] == 'agent.message' and e['source'] == 'gateway']
before = [t for o, t in calls if o < res]
after = [t for o, t in calls if o > res]
print(bool(before and after and after[0] > before[-1]))")
[ "$grow" = True ] && ok "the model saw the earlier turns after the resume (more input tokens)" ||
	bad "conversation" "$(events_json "$H" | grep -c agent.message) messages"
"$SB" daemon status >/dev/null && ok "daemon healthy afterwards" || bad "daemon" "not answering"

# ---- retention: the chain of a live run stays short ----
"$SB" daemon stop >/dev/null 2>&1
echo '{"runs": {"snapshots_keep": 2, "snapshot_interval_s": 0}}' >"$SANBOX_HOME/sanboxd.json"
K=$("$SB" run --detach --accel tcg --timeout 300s -- /bin/sh -c '
	for i in 1 2 3 4 5 6; do
		echo $i > f$i.txt
		echo "{\"type\":\"agent.turn.completed\",\"payload\":{\"turn\":$i}}" > $SANBOX_EVENTS
		sleep 2
	done')
"$SB" attach "$K" >/dev/null 2>&1
turns=$(snaps "$K" "s['trigger']=='turn'" | wc -w)
removed=$(events_json "$K" | grep -c '"snapshot.removed".*"retention"')
layers=$(ls "$SANBOX_HOME/runs/$K/layers" | wc -l)
files=$(for i in 1 2 3 4 5 6; do "$SB" fs cat "$K" "f$i.txt"; done | tr '\n' ' ')
[ "$turns" = 2 ] && [ "$removed" -ge 3 ] && [ "$layers" = 3 ] && [ "$files" = "1 2 3 4 5 6 " ] &&
	ok "retention: 2 turn snapshots kept, $removed merged away live, every file readable" ||
	bad "retention" "$turns turn snapshots, $removed removed, $layers layers, files '$files'"
rm -f "$SANBOX_HOME/sanboxd.json"
exit $((failures > 0))
