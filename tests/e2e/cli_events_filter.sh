#!/bin/sh
# sanbox events' filters: --source, --since/--until (durations and times),
# --from/--to, with --type, --tail and --all; each filtered --json line is
# byte for byte the unfiltered one; bad values exit 2. No microVM: runs
# use the bootless template.
. "$(dirname "$0")/lib/bootless.sh"

A=$("$SB" run --detach --name filtered -- true) || fail "run A"
wait_stopped "$A" || fail "A did not stop"
"$SB" admin append "$A" operator.note '{"text": "early"}' >/dev/null || fail "append early"
sleep 1.1
mid=$(date -u +%Y-%m-%dT%H:%M:%SZ) # after every event so far, before every later one
sleep 1.1
for i in 1 2; do
	"$SB" admin append "$A" operator.note "{\"text\": \"late $i\"}" >/dev/null || fail "append $i"
done
B=$("$SB" run --detach --name other -- true) || fail "run B"
wait_stopped "$B" || fail "B did not stop"
"$SB" admin append "$B" operator.note '{"text": "of B"}' >/dev/null || fail "append B"

"$SB" events "$A" --json >"$tmp/all" || fail "events --json"
[ "$(wc -l <"$tmp/all")" -ge 7 ] || fail "only $(wc -l <"$tmp/all") events"

# same FILE ARGS...: events ARGS --json prints exactly the lines of FILE
same() {
	want=$1
	shift
	"$SB" events "$@" --json >"$tmp/got" || fail "events $*: exit $?"
	cmp -s "$want" "$tmp/got" || fail "events $*: $(cat "$tmp/got") not $(cat "$want")"
}
# pick JQ: the lines of all whose event JQ selects, as they are
pick() {
	while IFS= read -r l; do
		printf '%s\n' "$l" | jq -e "$1" >/dev/null && printf '%s\n' "$l"
	done <"$tmp/all" >"$tmp/want"
	[ -s "$tmp/want" ] || fail "nothing selected by $1"
}

pick 'select(.source == "operator")'
[ "$(wc -l <"$tmp/want")" = 3 ] || fail "3 notes expected: $(cat "$tmp/want")"
same "$tmp/want" "$A" --source operator
pick 'select(.source == "operator" or .source == "host")'
same "$tmp/want" "$A" --source host --source operator
pick 'select(.source == "host" and (.type | startswith("run.")))'
same "$tmp/want" "$A" --source host --type run
"$SB" events "$A" --source guest --json >"$tmp/got" && [ ! -s "$tmp/got" ] ||
	fail "guest events of a run that never booted: $(cat "$tmp/got")"

off2=$(sed -n 2p "$tmp/all" | jq .offset)
off4=$(sed -n 4p "$tmp/all" | jq .offset)
sed -n 2,4p "$tmp/all" >"$tmp/want"
same "$tmp/want" "$A" --from "$off2" --to "$off4"
sed -n 4,4p "$tmp/all" >"$tmp/want"
same "$tmp/want" "$A" --from "$off4" --to "$off4"

pick 'select((.payload.text // "") | startswith("late"))'
same "$tmp/want" "$A" --since "$mid"
sleep 1.1 # --until 1s: up to a second ago, which the late notes must be past
same "$tmp/want" "$A" --since "$mid" --until 1s --source operator
pick 'select((.payload.text // "") | startswith("late") | not)'
same "$tmp/want" "$A" --until "$mid"
same "$tmp/all" "$A" --since 1h
pick 'select(.payload.text == "early")'
same "$tmp/want" "$A" --until "$mid" --source operator --tail 5
pick 'select(.payload.text == "late 2")'
same "$tmp/want" "$A" --source operator --tail 1

# --all: the notes of both runs, with their run
"$SB" events --all --source operator --since "$mid" --json >"$tmp/got" || fail "events --all"
[ "$(jq -r .payload.text "$tmp/got" | tr '\n' ,)" = "late 1,late 2,of B," ] ||
	fail "events --all --source operator: $(cat "$tmp/got")"

# bad values
bad() {
	"$SB" events "$A" "$@" >"$tmp/out" 2>&1
	[ $? = 2 ] || fail "events $*: exit not 2: $(cat "$tmp/out")"
	grep -q -- "$1" "$tmp/out" || fail "events $*: $(cat "$tmp/out")"
}
bad --source nobody
bad --until 2020-01-01 --since 2021-01-01
bad --to 3 --from 5
bad --until yesterday
bad --to 0
echo "ok cli_events_filter"
