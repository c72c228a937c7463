#!/bin/sh
# Shell completion: the script bash (and zsh) loads completes commands,
# options, run ids and names, groups, templates and snapshot ids, the last
# asked of the daemon. No microVM: runs use the bootless template.
. "$(dirname "$0")/lib/bootless.sh"

R=$("$SB" run --detach --name finder --group findgroup -- true) || fail "run"
wait_stopped "$R" || fail "$R did not stop"
"$SB" completion bash >"$tmp/comp.bash" || fail "completion bash: exit $?"
bash -n "$tmp/comp.bash" || fail "the bash script does not parse"
# complete WORDS...: what the script offers for the last word
complete_words() {
	PATH=$BUILD:$PATH bash -c '
		. "$1"; shift
		COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
		_sanbox; printf "%s\n" "${COMPREPLY[@]}"' sh "$tmp/comp.bash" "$@"
}
[ "$(complete_words sanbox fo)" = fork ] || fail "command: $(complete_words sanbox fo)"
complete_words sanbox ps --f | grep -qx -- --filter && complete_words sanbox ps --f | grep -qx -- --format ||
	fail "options of ps: $(complete_words sanbox ps --f)"
complete_words sanbox inspect "" | grep -qx "$R" && complete_words sanbox inspect fi | grep -qx finder ||
	fail "runs: $(complete_words sanbox inspect "")"
[ "$(complete_words sanbox run -t sh)" = shell ] || fail "templates: $(complete_words sanbox run -t sh)"
[ "$(complete_words sanbox wait --group fi)" = findgroup ] ||
	fail "groups: $(complete_words sanbox wait --group fi)"
complete_words sanbox wait --t | grep -qx -- --timeout || fail "options of wait: $(complete_words sanbox wait --t)"
complete_words sanbox wait "" | grep -qx "$R" || fail "runs of wait: $(complete_words sanbox wait "")"
[ -z "$(complete_words sanbox fs cat "$R" --snapshot "")" ] || fail "snapshots of a run without any"
"$SB" completion fish 2>/dev/null
[ $? = 2 ] || fail "completion fish: not a usage error"
if command -v zsh >/dev/null; then
	zsh -c 'source <("$1" completion zsh) && (( $+_comps[sanbox] ))' sh "$SB" || fail "zsh does not load it"
fi
echo "PASS cli_completion"
