#!/bin/sh
# Runs the benchmark programs $BUILD/bench/bench_<group> whose group is named
# in $BENCH (groups separated by spaces or commas; empty: every group). Each
# program prints only lines "bench NAME VALUE UNIT". Exits non-zero when a
# program fails or no program matches. Before the api group (a program
# that builds the shell template only when it is missing), the shell
# template is built again when it is older than its inputs, as the tests
# do (tests/e2e/lib/template.sh); the vm, snapshot and harness groups do
# that themselves.
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$(pwd)/$BUILD ;; esac
groups=$(printf '%s' "${BENCH:-}" | tr ',' ' ')
case " ${groups:-api} " in
*" api "*)
	REPO=$(pwd)
	SB=$BUILD/sanbox
	SANBOX_TEMPLATES=${SANBOX_TEMPLATES:-$BUILD/templates}
	export SANBOX_TEMPLATES
	. tests/e2e/lib/template.sh
	template_fresh shell || echo "bench: $template_error" >&2
	;;
esac
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
