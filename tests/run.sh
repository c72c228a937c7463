#!/bin/sh
# Runs the whole suite: cmocka unit programs, the fuzz smoke runs, and the
# end-to-end scripts. Ends with the line "N passed, N failed".
# TESTS=pattern runs only the tests whose name contains pattern. Each test's
# time is printed after it ("-- NAME: N s"), and the slowest five before the
# last line.
BUILD=${BUILD:-build}
export BUILD
pass=0
fail=0
failed=""
want() { [ -z "${TESTS:-}" ] || case "$1" in *"$TESTS"*) return 0 ;; *) return 1 ;; esac; }
log=$(mktemp)
times=$(mktemp)
trap 'rm -f "$log" "$times"' EXIT
start=0
began() { start=$(date +%s); }
took() {
	secs=$(($(date +%s) - start))
	echo "-- $1: $secs s"
	echo "$secs $1" >>"$times"
}

for t in "$BUILD"/tests/test_*; do
	[ -x "$t" ] || continue
	name=$(basename "$t")
	want "$name" || continue
	echo "== $name"
	began
	CMOCKA_MESSAGE_OUTPUT=stdout timeout 900 "$t" >"$log" 2>&1
	rc=$?
	cat "$log"
	took "$name"
	p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
	f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
	p=${p:-0}
	f=${f:-0}
	if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; fi # crashed before its summary
	pass=$((pass + p))
	fail=$((fail + f))
	[ "$f" = 0 ] || failed="$failed $name"
done

# Every fuzz target, a short run from its seeds (seed 1; 200000 inputs, or
# 10 s when they take longer): fuzz_record's are tests/fuzz/corpus (it came
# first), every other fuzz_NAME's are tests/fuzz/corpus_NAME.
for t in "$BUILD"/fuzz/fuzz_*; do
	[ -x "$t" ] || continue
	name=$(basename "$t")
	want "$name" || continue
	seeds=tests/fuzz/corpus_${name#fuzz_}
	[ "$name" = fuzz_record ] && seeds=tests/fuzz/corpus
	echo "== $name (smoke)"
	began
	corpus=$(mktemp -d)
	if "$t" -runs=200000 -max_total_time=10 -max_len=4096 -seed=1 "$corpus" "$seeds" >"$log" 2>&1; then
		pass=$((pass + 1))
		tail -1 "$log"
	else
		cat "$log"
		fail=$((fail + 1))
		failed="$failed $name"
	fi
	rm -rf "$corpus"
	took "$name"
done

for t in tests/e2e/*.sh; do
	[ -f "$t" ] || continue
	name=$(basename "$t" .sh)
	want "$name" || continue
	echo "== $name"
	began
	if timeout 900 sh "$t"; then
		pass=$((pass + 1))
	else
		fail=$((fail + 1))
		failed="$failed $name"
	fi
	took "$name"
done

echo "slowest: $(sort -rn "$times" | head -5 | awk '{printf "%s%s %s s", (NR > 1 ? ", " : ""), $2, $1}')"

[ -z "$failed" ] || echo "failed:$failed"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ] && [ "$pass" -gt 0 ]
