#!/bin/sh
# Run groups: ps --group lists a group's runs; stop --group stops them all
# and nothing else.
. "$(dirname "$0")/lib/vm.sh"

status() { "$SB" inspect "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["status"])'; }

A=$("$SB" run --detach --group deal --name financials --memory 128M --timeout 300s -- sleep 600)
B=$("$SB" run --detach --group deal --name contracts --memory 128M --timeout 300s -- sleep 600)
C=$("$SB" run --detach --group other --memory 128M --timeout 300s -- sleep 600)
n=$("$SB" ps --group deal --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
[ "$n" = 2 ] && ok "ps --group" || bad "ps --group" "$n runs"
out=$("$SB" stop --group deal)
case "$out" in *"$A"*"$B"* | *"$B"*"$A"*) ok "stop --group names its runs" ;; *) bad "stop --group" "$out" ;; esac
"$SB" attach "$A" >/dev/null 2>&1
"$SB" attach "$B" >/dev/null 2>&1
[ "$(status "$A")" = stopped ] && [ "$(status "$B")" = stopped ] && ok "group stopped" ||
	bad "group stopped" "$(status "$A") $(status "$B")"
[ "$(status "$C")" = running ] || [ "$(status "$C")" = created ] && ok "other group untouched" ||
	bad "other group" "$(status "$C")"
"$SB" stop --group nope | grep -q "no live runs" && ok "empty group" || bad "empty group" "no message"
"$SB" stop "$C" >/dev/null
"$SB" attach "$C" >/dev/null 2>&1
exit $((failures > 0))
