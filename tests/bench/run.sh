#!/bin/sh
# Runs the benchmark programs $BUILD/bench/bench_<group> whose group is named
# in $BENCH (groups separated by spaces or commas; empty: every group). Each
# program prints only lines "bench NAME VALUE UNIT". Exits non-zero when a
# program fails or no program matches.
BUILD=${BUILD:-build}
groups=$(printf '%s' "${BENCH:-}" | tr ',' ' ')
rc=0
ran=0
for b in "$BUILD"/bench/bench_*; do
	[ -x "$b" ] || continue
	group=${b##*/bench_}
	if [ -n "$groups" ]; then
		case " $groups " in
		*" $group "*) ;;
		*) continue ;;
		esac
	fi
	ran=$((ran + 1))
	if ! "$b"; then
		echo "bench_$group failed" >&2
		rc=1
	fi
done
if [ "$ran" = 0 ]; then
	echo "no benchmark program for '${BENCH:-}' in $BUILD/bench" >&2
	rc=1
fi
exit $rc
