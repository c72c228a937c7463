# lib/template.sh - the templates the tests and benchmarks share, kept
# fresh (sourced; needs $SB, $REPO, $BUILD and $SANBOX_TEMPLATES).
#
# template_fresh NAME builds template NAME into $SANBOX_TEMPLATES when it is
# missing or older than one of its inputs (template_inputs). It sets
# template_secs to how long a build took (empty when none was needed) and,
# when the build fails, template_error to why and returns 1.

# template_inputs NAME: the files a build of NAME reads that this checkout
# makes: its template.conf, tools/mkimage.sh and the guest agent, with the
# reference harness (shell) or the adapter and tools/debian.sh (a Debian
# userland's harness templates).
template_inputs() {
	echo "$REPO/templates/$1/template.conf $REPO/tools/mkimage.sh $BUILD/sanbox-agent"
	case $1 in
	shell) echo "$BUILD/sanbox-harness" ;;
	*) echo "$BUILD/sanbox-adapt $REPO/tools/debian.sh" ;;
	esac
}

template_fresh() {
	tf_json=$SANBOX_TEMPLATES/$1/template.json
	tf_stale=
	template_secs=
	template_error=
	[ -f "$tf_json" ] || tf_stale=1
	for tf_in in $(template_inputs "$1"); do
		[ -f "$tf_json" ] && [ "$tf_in" -nt "$tf_json" ] && tf_stale=1
	done
	[ -n "$tf_stale" ] || return 0
	tf_log=$(mktemp)
	tf_start=$(date +%s)
	if ! "$SB" template build "$1" >"$tf_log" 2>&1; then
		template_error="template build $1: $(tail -n 3 "$tf_log")"
		rm -f "$tf_log"
		return 1
	fi
	rm -f "$tf_log"
	template_secs=$(($(date +%s) - tf_start))
}
