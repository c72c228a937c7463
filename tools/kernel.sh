#!/bin/sh
# kernel.sh - fetch Debian's guest kernel into the Sanbox cache without
# installing it on the host, and extract the PVH-bootable vmlinux.
#
# Usage: tools/kernel.sh [PACKAGE]   (default: linux-image-amd64)
# Result: ${SANBOX_CACHE:-$HOME/.cache/sanbox}/kernel/<version>/ holding
#   vmlinux (uncompressed ELF, boots with -M microvm -kernel directly),
#   modules/ (the lib/modules/<version> tree) and version.
# The kernel directory is printed on stdout as the last line. A second run
# finds the cache and only prints the path.
set -eu
export LC_ALL=C

meta=${1:-linux-image-amd64}
explicit=$#
cache=${SANBOX_CACHE:-$HOME/.cache/sanbox}/kernel
die() { echo "kernel.sh: $*" >&2; exit 1; }

# The metapackage depends on exactly one versioned image package.
pkg=$(apt-cache depends "$meta" 2>/dev/null |
	sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\).*/\1/p' | head -n 1)
if [ -z "$pkg" ] && [ "$explicit" = 0 ]; then
	# No package lists (e.g. before apt-get update): the cached kernel will do.
	dir=$(ls -1d "$cache"/*/vmlinux 2>/dev/null | sort -V | tail -n 1)
	if [ -n "$dir" ]; then
		echo "kernel.sh: cannot resolve $meta; using the cached $(dirname "$dir")" >&2
		dirname "$dir"
		exit 0
	fi
fi
[ -n "$pkg" ] || die "cannot resolve $meta to a kernel package (apt-cache depends failed; run 'apt-get update')"
version=${pkg#linux-image-}
dir=$cache/$version

if [ -f "$dir/vmlinux" ] && [ -d "$dir/modules" ]; then
	echo "$dir"
	exit 0
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

(cd "$work" && apt-get download -q "$pkg" >/dev/null 2>"$work/apt.err") ||
	die "apt-get download $pkg failed: $(tail -n 1 "$work/apt.err")"
deb=$(ls "$work"/*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || die "apt-get download $pkg produced no .deb"
dpkg-deb -x "$deb" "$work/root" || die "dpkg-deb -x $deb failed"

vmlinuz=$work/root/boot/vmlinuz-$version
[ -f "$vmlinuz" ] || die "$pkg has no boot/vmlinuz-$version"
[ -d "$work/root/lib/modules/$version" ] || die "$pkg has no lib/modules/$version"

# bzImage carries an xz stream: find its magic FD 37 7A 58 5A 00 and
# decompress from there; xz complains about the trailing bytes, which is fine.
off=$(grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | head -n 1 | cut -d: -f1)
[ -n "$off" ] || die "no xz stream in $vmlinuz"
tail -c +$((off + 1)) "$vmlinuz" | xz -dc 2>/dev/null >"$work/vmlinux" || true
[ "$(head -c 4 "$work/vmlinux" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] ||
	die "decompressed kernel from $vmlinuz is not an ELF"

mkdir -p "$work/out"
mv "$work/vmlinux" "$work/out/vmlinux"
mv "$work/root/lib/modules/$version" "$work/out/modules"
echo "$version" >"$work/out/version"
# Atomic: a concurrent run that got there first keeps its copy.
mv -T "$work/out" "$dir" 2>/dev/null || [ -f "$dir/vmlinux" ] || die "cannot create $dir"
echo "$dir"
