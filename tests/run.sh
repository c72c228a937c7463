#!/bin/sh
# Runs the whole suite: cmocka unit programs, the fuzz smoke run, and the
# end-to-end scripts. Ends with the line "N passed, N failed".
# TESTS=pattern runs only the tests whose name contains pattern.
BUILD=${BUILD:-build}
export BUILD
pass=0
fail=0
failed=""
want() { [ -z "${TESTS:-}" ] || case "$1" in *"$TESTS"*) return 0 ;; *) return 1 ;; esac; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT

for t in "$BUILD"/tests/test_*; do
	[ -x "$t" ] || continue
	name=$(basename "$t")
	want "$name" || continue
	echo "== $name"
	CMOCKA_MESSAGE_OUTPUT=stdout timeout 900 "$t" >"$log" 2>&1
	rc=$?
	cat "$log"
	p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
	f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
	p=${p:-0}
	f=${f:-0}
	if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; fi # crashed before its summary
	pass=$((pass + p))
	fail=$((fail + f))
	[ "$f" = 0 ] || failed="$failed $name"
done

if [ -x "$BUILD/fuzz/fuzz_record" ] && want fuzz_record; then
	echo "== fuzz_record (smoke)"
	corpus=$(mktemp -d)
	if "$BUILD/fuzz/fuzz_record" -runs=200000 -max_len=4096 -seed=1 "$corpus" \
		tests/fuzz/corpus >"$log" 2>&1; then
		pass=$((pass + 1))
		tail -1 "$log"
	else
		cat "$log"
		fail=$((fail + 1))
		failed="$failed fuzz_record"
	fi
	rm -rf "$corpus"
fi

for t in tests/e2e/*.sh; do
	[ -f "$t" ] || continue
	name=$(basename "$t" .sh)
	want "$name" || continue
	echo "== $name"
	if timeout 900 sh "$t"; then
		pass=$((pass + 1))
	else
		fail=$((fail + 1))
		failed="$failed $name"
	fi
done

[ -z "$failed" ] || echo "failed:$failed"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ] && [ "$pass" -gt 0 ]
