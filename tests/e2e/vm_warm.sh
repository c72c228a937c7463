#!/bin/sh
# Warm starts: the first run of a template boots cold and has the
# template's warm image built beside it; the next runs restore it (boot
# warm), each with its own randomness and the host's clock; a run with
# other vCPUs or memory boots cold; a warm image that does not load is
# dropped and the run boots cold, with a run.warning, and succeeds.
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
exit $((failures > 0))
