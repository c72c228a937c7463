#!/bin/sh
# debian.sh - a Debian userland for a template's root file system, made with
# mmdebstrap from Debian's packages and cached by its inputs.
#
# Usage: tools/debian.sh SUITE MIRROR [PACKAGE...]
# Result: the path of a tar of the root file system, printed on stdout as
#   the last line: ${SANBOX_CACHE:-$HOME/.cache/sanbox}/debian/<key>.tar,
#   key the sha256 of the lines "suite S", "mirror M", "epoch E",
#   "script <sha256 of this file>" and "package P" for each package of the
#   sorted, deduplicated list (the base list below and the arguments).
#   A second call with the same inputs finds the tar and only prints it.
# The base list is fixed: bash coreutils git python3 curl ca-certificates
#   ripgrep procps, and the build tools make gcc libc6-dev patch diffutils
#   file less xz-utils. The template adds its own (nodejs for a harness
#   that needs node).
# Progress lines ("debian: ...") go to stderr. A missing tool fails with
# one line naming it. SOURCE_DATE_EPOCH (default 2024-01-01) fixes the
# times inside the tar; the packages are whatever the suite holds on the
# mirror when the tar is first made.
set -eu
export LC_ALL=C

die() { echo "debian: $*" >&2; exit 1; }
say() { echo "debian: $*" >&2; }

[ $# -ge 2 ] || die "usage: debian.sh SUITE MIRROR [PACKAGE...]"
suite=$1
mirror=$2
shift 2
printf '%s' "$suite" | grep -qE '^[a-z][a-z0-9-]*$' || die "bad suite '$suite'"
printf '%s' "$mirror" | grep -qE '^https?://[A-Za-z0-9./_:-]+$' || die "bad mirror '$mirror'"

BASE="bash coreutils git python3 curl ca-certificates ripgrep procps
make gcc libc6-dev patch diffutils file less xz-utils"
for p in $BASE "$@"; do
	printf '%s' "$p" | grep -qE '^[a-z0-9][a-z0-9+.-]+$' || die "bad package name '$p'"
	echo "$p"
done | sort -u >"${TMPDIR:-/tmp}/sanbox-debian.$$"
pkgs=$(cat "${TMPDIR:-/tmp}/sanbox-debian.$$")
rm -f "${TMPDIR:-/tmp}/sanbox-debian.$$"

epoch=${SOURCE_DATE_EPOCH:-1704067200}
script=$(sha256sum "$0" | cut -d' ' -f1)
key=$({
	echo "suite $suite"
	echo "mirror $mirror"
	echo "epoch $epoch"
	echo "script $script"
	for p in $pkgs; do echo "package $p"; done
} | sha256sum | cut -d' ' -f1)
cache=${SANBOX_CACHE:-$HOME/.cache/sanbox}/debian
tar=$cache/$key.tar
if [ -f "$tar" ]; then
	say "cached $tar"
	echo "$tar"
	exit 0
fi

command -v mmdebstrap >/dev/null || die "mmdebstrap not found (run 'make deps')"
mkdir -p "$cache"
include=$(echo $pkgs | tr ' ' ',')
say "building $suite from $mirror: $(echo $pkgs | wc -w) packages and their dependencies"
start=$(date +%s)
# Lines of mmdebstrap's own progress are passed on, one per step.
rc=$cache/$key.rc
rm -f "$tar.part" "$rc"
{ SOURCE_DATE_EPOCH=$epoch mmdebstrap --variant=minbase --include="$include" \
	--aptopt='Acquire::Retries "3"' \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--customize-hook='rm -f "$1"/etc/hostname "$1"/etc/resolv.conf' \
	--format=tar "$suite" "$tar.part" "$mirror" 2>&1; echo $? >"$rc"; } |
	sed -un 's/^I: \(.*\)/debian: \1/p' >&2
[ "$(cat "$rc")" = 0 ] && [ -s "$tar.part" ] || { rm -f "$tar.part" "$rc"; die "mmdebstrap failed (run it by hand: mmdebstrap $suite /tmp/x.tar $mirror)"; }
rm -f "$rc"
mv "$tar.part" "$tar"
say "made $tar ($(du -m "$tar" | cut -f1) MiB) in $(($(date +%s) - start)) s"
echo "$tar"
