#!/bin/sh
# ps as a table at 80 and 200 columns: newest first, every row within the
# width (wide characters count two), long cells cut with an ellipsis, no
# raw control byte; -q, --filter, --format, --no-trunc and --json. No
# microVM: runs use the bootless template.
. "$(dirname "$0")/lib/bootless.sh"

long=$(printf 'n%.0s' $(seq 60))end # 63 bytes, the longest name
wide="数据分析报告数据分析报告数据分析报告"
runs_hang
A=$("$SB" run --detach --name "$long" --group g1 -- true) || fail "run A"
B=$("$SB" run --detach --name "$wide" -- true) || fail "run B"
C=$("$SB" run --detach --name plain -- true) || fail "run C"
"$SB" stop "$C" >/dev/null || fail "stop C"
runs_fail
wait_stopped "$C" || fail "C did not stop"

# fits FILE WIDTH FIRST...: each line at most WIDTH terminal columns (a
# wide character two), no control byte, and each FIRST the first word of
# some line
fits() {
	python3 - "$@" <<'EOF' || fail "$(basename "$1") at $2 columns: $(cat "$1")"
import sys, unicodedata
width = int(sys.argv[2])
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")[:-1]
for l in lines:
    cols = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in l)
    assert cols <= width, (cols, l)
    assert not any(ord(c) < 32 or 0x7f <= ord(c) < 0xa0 for c in l), l
firsts = [l.split()[0] for l in lines if l.split()]
for want in sys.argv[3:]:
    assert want in firsts, (want, firsts)
EOF
}
COLUMNS=80 "$SB" ps >"$tmp/ps80" || fail "ps at 80 columns: exit $?"
fits "$tmp/ps80" 80 RUN
head -1 "$tmp/ps80" | grep -q '^RUN  *NAME ' || fail "ps's header: $(head -1 "$tmp/ps80")"
# newest first
[ "$(sed -n '2s/ .*//p;3s/ .*//p;4s/ .*//p' "$tmp/ps80" | tr '\n' ' ')" = "$C $B $A " ] ||
	fail "ps is not newest first: $(cat "$tmp/ps80")"
grep -q "^$A nnnnn.*… " "$tmp/ps80" || fail "the long name is not cut with an ellipsis: $(cat "$tmp/ps80")"
grep -q "^$B 数据" "$tmp/ps80" || fail "the wide name: $(cat "$tmp/ps80")"
grep -q "^$C plain .*stopped " "$tmp/ps80" || fail "the stopped run: $(cat "$tmp/ps80")"
COLUMNS=200 "$SB" ps >"$tmp/ps200" || fail "ps at 200 columns: exit $?"
fits "$tmp/ps200" 200 RUN
grep -qF "$long" "$tmp/ps200" && grep -qF "$wide" "$tmp/ps200" || fail "ps at 200 columns cut a name: $(cat "$tmp/ps200")"
head -1 "$tmp/ps200" | grep -q 'GROUP *TEMPLATE *MODEL' || fail "ps at 200 columns: $(head -1 "$tmp/ps200")"
grep -q "^$A .* g1 " "$tmp/ps200" || fail "the group at 200 columns: $(cat "$tmp/ps200")"

# -q, --filter, --format, --no-trunc, --json
[ "$("$SB" ps -q | tr '\n' ' ')" = "$C $B $A " ] || fail "ps -q: $("$SB" ps -q)"
[ "$("$SB" ps -q --filter status=running | tr '\n' ' ')" = "$B $A " ] || fail "ps --filter status=running"
[ "$("$SB" ps -q --filter name=数据 | tr '\n' ' ')" = "$B " ] || fail "ps --filter name="
[ "$("$SB" ps -q --filter group=g1 --filter status=running)" = "$A" ] || fail "ps with two filters"
[ -z "$("$SB" ps -q --filter template=other)" ] || fail "ps --filter template="
"$SB" ps --format id,name,status >"$tmp/fmt" || fail "ps --format: exit $?"
printf '%s\tplain\tstopped\n%s\t%s\trunning\n%s\t%s\trunning\n' "$C" "$B" "$wide" "$A" "$long" |
	cmp -s - "$tmp/fmt" || fail "ps --format: $(cat "$tmp/fmt")"
"$SB" ps --format id,bogus 2>"$tmp/err"
[ $? = 2 ] && grep -q "no field 'bogus'" "$tmp/err" || fail "ps --format of a bad field: $(cat "$tmp/err")"
"$SB" ps --filter colour=red 2>/dev/null
[ $? = 2 ] || fail "ps --filter of a bad key"
COLUMNS=80 "$SB" ps --no-trunc | grep -qF "$long" || fail "ps --no-trunc cut the long name"
"$SB" ps --json --filter status=running | python3 -c "
import json, sys
runs = json.load(sys.stdin)
sys.exit(0 if [r['run'] for r in runs] == ['$B', '$A'] and runs[1]['name'] == '$long'
	and runs[1]['template'] == 'shell' else 1)" || fail "ps --json"
# -- events: --all has a run column; --tail N and --since D
"$SB" events --all >"$tmp/ev" || fail "events --all: exit $?"
n=$(wc -l <"$tmp/ev")
awk '{print $3}' "$tmp/ev" | grep -qx "$A" && awk '{print $3}' "$tmp/ev" | grep -qx "$C" ||
	fail "events --all has no run column: $(head -3 "$tmp/ev")"
"$SB" events --all --tail 3 >"$tmp/ev3" || fail "events --tail 3: exit $?"
tail -3 "$tmp/ev" | cmp -s - "$tmp/ev3" || fail "events --all --tail 3: $(cat "$tmp/ev3")"
[ "$("$SB" events --all --since 1h | wc -l)" = "$n" ] || fail "events --since 1h"
[ -z "$("$SB" events --all --tail 0)" ] || fail "events --tail 0 printed something"
"$SB" events "$C" --tail 1 --json | python3 -c "
import json, sys
e = [json.loads(l) for l in sys.stdin]
sys.exit(0 if len(e) == 1 and e[0]['type'] == 'run.stopped' and e[0]['run'] == '$C' else 1)" ||
	fail "events RUN --tail 1 --json"

# inspect as text at 80 and 200 columns: each row within the width, no raw
# control byte (a prompt holds escapes), the long and wide names shown
P=$("$SB" run --detach --name "${wide}二" --group "$long" "$(printf 'fix\033[2J\033]0;t\007 it')") || fail "run P"
for w in 80 200; do
	COLUMNS=$w "$SB" inspect "$P" >"$tmp/in$w" || fail "inspect at $w columns: exit $?"
	fits "$tmp/in$w" "$w" run template status created elapsed cost limits model prompt
done
grep -qF 'fix\x1b[2J\x1b]0;t\x07 it' "$tmp/in200" || fail "the prompt is not shown escaped: $(grep prompt "$tmp/in200")"
grep -qF "$long" "$tmp/in200" && grep -qF "$wide" "$tmp/in200" || fail "inspect at 200 columns cut a name"
grep -q '^run .*…$' "$tmp/in80" || fail "inspect at 80 columns did not cut the long row: $(head -1 "$tmp/in80")"
"$SB" inspect "$P" --json | python3 -c "
import json, sys
j = json.load(sys.stdin)
sys.exit(0 if j['run']['group'] == sys.argv[1] and j['policy']['prompt'] == 'fix\x1b[2J\x1b]0;t\x07 it' else 1)" "$long" ||
	fail "inspect --json is not exact"
"$SB" stop "$A" "$B" "$P" >/dev/null 2>&1
echo "PASS cli_views"
