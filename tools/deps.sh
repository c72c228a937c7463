#!/bin/sh
# Install the Debian packages Sanbox needs (idempotent: skips what is there).
# The guest kernel is unpacked into the cache by tools/kernel.sh, not installed.
set -eu
PKGS="build-essential pkg-config clang libclang-rt-14-dev xz-utils
liblmdb-dev libmsgpack-dev libev-dev libnng-dev libnftables-dev libnftnl-dev libmnl-dev libnetfilter-queue-dev libxxhash-dev
libjansson-dev libsodium-dev nettle-dev libssl-dev libmbedtls-dev libcurl4-openssl-dev libmicrohttpd-dev libcmocka-dev libyaml-dev
libext2fs-dev libnbd-dev libc-ares-dev libncurses-dev python3 python3-nacl openssl gdb mmdebstrap
qemu-system-x86 qemu-utils busybox-static nftables e2fsprogs iproute2 kmod cpio bc curl jq tmux"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
# npm installs the harness templates' packages (any nodejs that has it will do)
command -v npm >/dev/null || missing="$missing npm"
[ -z "$missing" ] && { echo "deps: all packages present"; exit 0; }
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing packages:$missing (run 'make deps' as root)" >&2
	exit 1
fi
echo "deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $missing
