#!/bin/sh
# Warm starts: the first run of a template boots cold and has the
# template's warm image built beside it; the next runs restore it (boot
# warm), each with its own randomness and the host's clock; a run with
# other vCPUs or memory boots cold; a warm image that does not load is
# dropped and the run boots cold, with a run.warning, and succeeds. The
# image is the guest's RAM in a file of its own and its device state alone,
# both read-only; warm guests map the RAM private and never write it; a
# memory snapshot of a warm-started run holds its whole memory and resumes.
SANBOX_WARM_START=1
. "$(dirname "$0")/lib/vm.sh"

boot_of() { events_json "$1" | python3 -c "
import json, sys
print([json.loads(l) for l in sys.stdin if '\"run.started\"' in l][0]['payload'].get('boot'))"; }
# to_harness RUN: seconds from run.started to harness.input.ready
to_harness() { events_json "$1" | python3 -c "
import json, sys
evs = {}
for l in sys.stdin:
    e = json.loads(l)
    evs.setdefault(e['type'], e['ts'])
print('%.2f' % ((evs['harness.input.ready'] - evs['run.started']) / 1e9))"; }
RANDCMD='od -An -N16 -tx1 /dev/urandom; date +%s'

C=$("$SB" run --detach --accel tcg -- /bin/sh -c "$RANDCMD")
"$SB" attach "$C" >/dev/null 2>&1
[ "$(boot_of "$C")" = cold ] && ok "the first run boots cold" || bad "first run" "boot $(boot_of "$C")"
i=0
while [ $i -lt 120 ] && ! ls "$SANBOX_HOME"/cache/warm/*.mem >/dev/null 2>&1; do
	sleep 1
	i=$((i + 1))
done
img=$(ls "$SANBOX_HOME"/cache/warm/*.mem 2>/dev/null | head -n 1)
[ -n "$img" ] && ok "the template's warm image was built beside it" || bad "warm image" "none after 120 s"
ls -d "$SANBOX_HOME"/cache/warm/*.build >/dev/null 2>&1 && bad "warm build" "its build directory is left" ||
	ok "the build left nothing else"
ram=${img%.mem}.ram
mib=$(python3 -c "import json; print(json.load(open('$SANBOX_TEMPLATES/shell/template.json'))['memory_mib'])")
[ "$(stat -c %s "$img")" -lt 1048576 ] && [ "$(stat -c %s "$ram")" = $((mib << 20)) ] &&
	[ "$(stat -c %a "$img")" = 444 ] && [ "$(stat -c %a "$ram")" = 444 ] &&
	ok "the image: the device state alone ($(stat -c %s "$img") bytes) and the RAM, read-only" ||
	bad "image files" "$(ls -l "$img" "$ram")"
ram_sum=$(sha256sum <"$ram")

W1=$("$SB" run --detach --accel tcg -- /bin/sh -c "$RANDCMD")
W2=$("$SB" run --detach --accel tcg -- /bin/sh -c "$RANDCMD")
"$SB" attach "$W1" >/dev/null 2>&1
"$SB" attach "$W2" >/dev/null 2>&1
[ "$(boot_of "$W1")" = warm ] && [ "$(boot_of "$W2")" = warm ] && ok "the next runs start warm" ||
	bad "warm start" "boot $(boot_of "$W1") $(boot_of "$W2")"
out1=$(events_json "$W1" | grep agent.output | head -n 1)
out2=$(events_json "$W2" | grep agent.output | head -n 1)
[ -n "$out1" ] && [ "${out1#*data}" != "${out2#*data}" ] && ok "two warm runs have their own randomness" ||
	bad "randomness" "$out1 / $out2"
gt=$(events_json "$W1" | python3 -c "
import json, sys
evs = [json.loads(l) for l in sys.stdin]
outs = [e for e in evs if e['type'] == 'agent.output']
t = int(outs[-1]['payload']['data'].split()[-1])
print(abs(t - evs[-1]['ts'] // 10**9) <= 5)")
[ "$gt" = True ] && ok "a warm guest's clock is the host's" || bad "clock" "$(events_json "$W1" | grep agent.output)"
[ "$(events_json "$W1" | grep -c '"run.exited"')" = 1 ] && [ "$("$SB" inspect "$W1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["status"])')" = exited ] &&
	ok "a warm run ends as any run does" || bad "warm run" "$(events_json "$W1" | tail -n 3)"
echo "to harness: cold $(to_harness "$C") s, warm $(to_harness "$W1") s" >&2

# a memory snapshot of a warm-started run: its processes go on in a resume
T=$("$SB" run --detach --accel tcg --snapshots off --timeout 300s -- /bin/sh -c \
	'i=0; while true; do i=$((i + 1)); echo "n=$i"; sleep 1; done')
wait_event "$T" "e['type']=='agent.output' and 'n=3' in e['payload']['data']" 60 || bad "ticker" "no counter"
TS=$("$SB" snapshot "$T" --memory 2>&1)
at=$(events_json "$T" | python3 -c "
import json, sys
evs = [json.loads(l) for l in sys.stdin if l.strip()]
snap = [e for e in evs if e['type'] == 'snapshot.saved'][0]
outs = [e for e in evs if e['type'] == 'agent.output' and e['offset'] < snap['offset']]
print(outs[-1]['payload']['data'].split('n=')[-1].split()[0])")
"$SB" stop "$T" >/dev/null
"$SB" attach "$T" >/dev/null 2>&1
"$SB" resume "$T" --snapshot "$TS" --detach >/dev/null
first=$(for i in $(seq 1 60); do
	v=$(events_json "$T" | python3 -c "
import json, sys
evs = [json.loads(l) for l in sys.stdin if l.strip()]
res = [e['offset'] for e in evs if e['type'] == 'run.resumed']
outs = [e for e in evs if res and e['type'] == 'agent.output' and e['offset'] > res[-1]]
print(outs[0]['payload']['data'].split('n=')[-1].split()[0] if outs else '')")
	[ -n "$v" ] && { echo "$v"; break; }
	sleep 1
done)
"$SB" stop "$T" >/dev/null
[ "$(boot_of "$T")" = warm ] && [ -n "$at" ] && [ -n "$first" ] &&
	{ [ "$first" = $((at + 1)) ] || [ "$first" = $((at + 2)) ]; } &&
	ok "a memory snapshot of a warm run resumes: its counter goes on at n=$first" ||
	bad "warm run's memory snapshot" "boot $(boot_of "$T"), $TS at n=$at, resumed at n=$first"
[ "$(sha256sum <"$ram")" = "$ram_sum" ] && ok "warm runs left the image's RAM file as it was" ||
	bad "RAM file" "its contents changed"

O=$("$SB" run --detach --accel tcg --memory 192M -- true)
"$SB" attach "$O" >/dev/null 2>&1
[ "$(boot_of "$O")" = cold ] && ok "a run with other memory boots cold" || bad "other memory" "boot $(boot_of "$O")"

# a warm image that does not load: dropped, the run boots cold and succeeds
head -c 4096 "$img" >"$img.cut" && mv "$img.cut" "$img"
B=$("$SB" run --detach --accel tcg -- echo fell-back)
"$SB" attach "$B" >/dev/null 2>&1
has_event "$B" "e['type']=='run.warning' and 'warm image did not load' in e['payload']['message']" &&
	has_event "$B" "e['type']=='agent.output' and 'fell-back' in e['payload']['data']" &&
	has_event "$B" "e['type']=='run.exited' and e['payload']['status']==0" &&
	ok "a broken warm image: a warning, a cold boot, the run succeeds" ||
	bad "broken warm image" "$(events_json "$B" | grep -E 'warning|output|exited|failed')"
[ ! -e "$img" ] || [ "$(stat -c %s "$img")" != 4096 ] && ok "the broken image was dropped" || bad "broken image" "still there"

# a RAM file that does not fit the machine (cut short): the same; the next
# run boots cold and has the image built again first
X=$("$SB" run --detach --accel tcg -- true)
"$SB" attach "$X" >/dev/null 2>&1
i=0
while [ $i -lt 120 ] && [ ! -e "$img" ]; do
	sleep 1
	i=$((i + 1))
done
rebuilt=$(ls "$img" 2>/dev/null)
truncate -s 4096 "$ram"
R=$("$SB" run --detach --accel tcg -- echo fell-back)
"$SB" attach "$R" >/dev/null 2>&1
[ "$(boot_of "$X")" = cold ] && [ -n "$rebuilt" ] &&
	has_event "$R" "e['type']=='run.warning' and 'warm image did not load' in e['payload']['message']" &&
	has_event "$R" "e['type']=='run.exited' and e['payload']['status']==0" &&
	[ ! -e "$img" ] && [ ! -e "$ram" ] &&
	ok "a RAM file cut short: a warning, a cold boot, the image dropped" ||
	bad "RAM file cut short" "boot $(boot_of "$X"), rebuilt '$rebuilt'; $(events_json "$R" | grep -E 'warning|exited|failed'); $(ls "$SANBOX_HOME"/cache/warm)"
exit $((failures > 0))
