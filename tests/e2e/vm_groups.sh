#!/bin/sh
# Groups: a group file's runs start together, each with its own files and
# events; the group's totals are its runs' sums; a bad file or a run the
# daemon refuses is named by its line and column and nothing starts; a
# second group of the same file gets the next name.
. "$(dirname "$0")/lib/vm.sh"

tmp=$SANBOX_HOME/t
mkdir -p "$tmp"
cat >"$tmp/deal.yaml" <<'EOF'
name: deal
goal: check the group machinery
budget: 2.00
defaults:
  memory: 128M
  timeout: 5m
  snapshots: off
runs:
  - name: numbers
    harness: echo 42 > numbers.txt
  - name: words
    harness: [/bin/sh, -c, "echo forty-two > words.txt; exit 3"]
  - name: agent
    model: stub/scripted
    budget: 0.50
    prompt: write the notes
EOF
out=$("$SB" group run "$tmp/deal.yaml" --detach --json) || bad "group run" "$out"
ids=$(echo "$out" | python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)["runs"]))')
set -- $ids
[ $# = 3 ] && ok "group run starts three runs" || bad "group run" "$out"
N=$1 W=$2 A=$3
for r in $N $W $A; do "$SB" attach "$r" >/dev/null 2>&1; done
[ "$("$SB" fs cat "$N" /workspace/numbers.txt)" = 42 ] && ok "each run makes its own files" ||
	bad "numbers" "$("$SB" fs cat "$N" /workspace/numbers.txt 2>&1)"
[ "$("$SB" fs cat "$W" /workspace/words.txt)" = forty-two ] || bad "words" "$("$SB" fs cat "$W" /workspace/words.txt 2>&1)"
"$SB" fs cat "$A" /workspace/notes/result.md | grep -q "scripted agent" && ok "the agent run called its model" ||
	bad "agent" "$("$SB" events "$A" | tail -5)"
"$SB" group inspect deal --json >"$tmp/g.json"
python3 - "$tmp/g.json" <<'EOF' && ok "group totals are the runs' sums" || bad "totals" "$(cat "$tmp/g.json")"
import json, sys
g = json.load(open(sys.argv[1]))
runs = g["runs"]
assert [r["name"] for r in runs] == ["numbers", "words", "agent"], runs
total = sum(r["cost_nusd"] for r in runs)
assert total > 0 and g["group"]["cost"]["cost_nusd"] == total, (total, g["group"]["cost"])
assert g["group"]["group"]["goal"] == "check the group machinery"
assert g["group"]["group"]["budget_nusd"] == 2000000000
c = g["group"]["counts"]
assert (c["done"], c["failed"], c["live"], c["queued"]) == (2, 1, 0, 0), c
EOF
"$SB" group ls | grep -q "^deal .* 3 .*2 done, 1 failed" && ok "group ls" || bad "group ls" "$("$SB" group ls)"
"$SB" group inspect deal | grep -q "words .*exited 3" && ok "group inspect" || bad "inspect" "$("$SB" group inspect deal)"

# --watch without a terminal: a line per change, then the totals
out=$("$SB" group run "$tmp/deal.yaml" --name watched --watch 2>&1)
echo "$out" | grep -q "numbers exited 0" && echo "$out" | grep -q "words exited 3" &&
	echo "$out" | tail -1 | grep -q "^[0-9:]* total: 3 runs, 2 done, 1 failed" &&
	ok "group run --watch prints the changes and the totals" || bad "--watch" "$out"

# a group forked: each run from its newest snapshot, as a new group
cat >"$tmp/small.yaml" <<'EOF'
name: small
budget: 1
defaults: {memory: 128M, timeout: 5m, snapshots: stop}
runs:
  - {name: one, harness: "cat seen.txt 2>/dev/null; echo one > seen.txt"}
  - {name: two, harness: "cat seen.txt 2>/dev/null; echo two > seen.txt"}
EOF
"$SB" group run "$tmp/small.yaml" >/dev/null || bad "small" "group run"
out=$("$SB" group fork small 2>&1) && case "$out" in "group small-fork "*) true ;; *) false ;; esac &&
	ok "group fork makes small-fork and waits for it" || bad "group fork" "$out"
"$SB" group inspect small-fork --json >"$tmp/f.json"
python3 - "$tmp/f.json" <<'EOF' && ok "the forks are the group's runs, named as theirs" || bad "fork runs" "$(cat "$tmp/f.json")"
import json, sys
g = json.load(open(sys.argv[1]))
assert [r["name"] for r in g["runs"]] == ["one", "two"], g["runs"]
assert all(r["parent"] and r["status"] == "exited" for r in g["runs"]), g["runs"]
assert g["group"]["group"]["budget_nusd"] == 1000000000
EOF
for r in $(python3 -c 'import json,sys; print(" ".join(r["run"] for r in json.load(open(sys.argv[1]))["runs"]))' "$tmp/f.json"); do
	"$SB" logs "$r" | grep -qE '^(one|two)$' || bad "fork disk" "$r: $("$SB" logs "$r")"
done
ok "each fork read its parent's file"

# the same file again: the next name
out=$("$SB" group run "$tmp/deal.yaml" --detach 2>&1) && case "$out" in *"group deal-2 "*) true ;; *) false ;; esac &&
	ok "a taken name gets the next one" || bad "deal-2" "$out"
"$SB" group stop deal-2 >/dev/null
out=$("$SB" group run "$tmp/deal.yaml" --name deal --detach 2>&1)
[ $? = 1 ] && case "$out" in *"group deal exists"*) true ;; *) false ;; esac && ok "--name taken is an error" ||
	bad "--name taken" "$out"

# a file the reader refuses, and a run the daemon refuses: line, column, nothing starts
before=$("$SB" ps --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
sed 's/budget: 0.50/budget: -1/' "$tmp/deal.yaml" >"$tmp/bad.yaml"
out=$("$SB" group run "$tmp/bad.yaml" --detach 2>&1)
[ $? = 2 ] && case "$out" in *"bad.yaml:15:13: runs[2].budget:"*) true ;; *) false ;; esac &&
	ok "a bad value names its line and column" || bad "bad value" "$out"
sed 's/  - name: words/  - name: words\n    template: nosuch/' "$tmp/deal.yaml" >"$tmp/tpl.yaml"
out=$("$SB" group run "$tmp/tpl.yaml" --name other --detach 2>&1)
rc=$?
case "$out" in *"tpl.yaml:11:5: runs[1]: template nosuch is not built"*) ok "a run the daemon refuses is named in the file (exit $rc)" ;;
*) bad "daemon refusal" "$rc: $out" ;; esac
after=$("$SB" ps --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
[ "$before" = "$after" ] && ok "nothing starts" || bad "nothing starts" "$before -> $after"
"$SB" group inspect other >/dev/null 2>&1 && bad "refused group recorded" "other" || ok "the refused group is not recorded"
exit $((failures > 0))
