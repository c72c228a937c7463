#!/bin/sh
# mkimage.sh - build a Sanbox template image without root-only tricks.
#
# Usage: tools/mkimage.sh [--agent PATH] TEMPLATE_DIR OUT_DIR
#        tools/mkimage.sh    (every templates/NAME into $BUILD/templates/NAME)
#
# Reads TEMPLATE_DIR/template.conf (`key = value` lines, # comments):
#   name, description, harness, cpus (1), memory (256M), timeout (10m),
#   disk (512M, size of the sparse rootfs), module = NAME (extra kernel
#   modules), bin = HOST:GUEST (an executable plus its shared libraries and
#   loader found by ldd), file = HOST:GUEST (one file), model = NAME (the
#   runs' default model), secret = NAME[:env|:model] (a secret every run of
#   the template is granted; repeatable), network = none|acl (its runs'
#   default network), allow = GRANT (a network grant of every run of the
#   template; repeatable, at most 16; checked by the daemon), adapter = NAME
#   (how the harness is started and read: reference, command, opencode,
#   claude-code or codex; default reference), env = K=V (the harness's
#   environment; repeatable, at most 32), base = busybox|debian (the root
#   file system's userland, default busybox), and for base debian: suite
#   (bookworm), mirror (http://deb.debian.org/debian), packages = P...
#   (Debian packages beside tools/debian.sh's base list; repeatable),
#   npm = PACKAGE@VERSION (installed with the host's npm under /usr/local,
#   cached by the list; repeatable). HOST may use $BUILD and is relative to
#   the repository root. TEMPLATE_DIR/root/, if present, is copied into the
#   root file system as it is.
# Writes into OUT_DIR (read-only, 0444):
#   vmlinux     the uncompressed kernel from the cache (tools/kernel.sh)
#   initrd.img  cpio newc: /init (the static agent), the modules it loads in
#               the order of /etc/sanbox/modules
#   rootfs.img  ext4 from busybox-static with its applets, /workspace, /tmp,
#               /etc/passwd, /etc/group and the template's files; base
#               debian: from tools/debian.sh's tar instead of busybox (its
#               own /etc/passwd and /etc/group), then the npm packages
#   template.json {name, description, kernel_version, files: {name: sha256},
#               hash, cpus, memory_mib, timeout_s, harness, model,
#               secrets: [NAME[:SCOPE]], network, allow: [GRANT], adapter,
#               env: [K=V], base}; hash is the
#               sha256 of the lines "vmlinux <h>", "initrd.img <h>",
#               "rootfs.img <h>" (newline-terminated).
# Environment: BUILD (build dir, default build), SANBOX_AGENT (default
# $BUILD/sanbox-agent), SANBOX_KERNEL_DIR (default: tools/kernel.sh's),
# SOURCE_DATE_EPOCH (timestamps inside the images, default 2024-01-01).
# The same inputs give the same bytes: fixed times, owners, sort order,
# file system UUID and hash seed.
set -eu
export LC_ALL=C

die() { echo "mkimage: $*" >&2; exit 1; }
json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

repo=$(cd "$(dirname "$0")/.." && pwd)
agent=""
while [ $# -gt 0 ]; do
	case $1 in
	--agent) [ $# -ge 2 ] || die "--agent needs a path"; agent=$2; shift 2 ;;
	--) shift; break ;;
	-*) die "unknown option $1" ;;
	*) break ;;
	esac
done
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$repo/$BUILD ;; esac
if [ $# -eq 0 ]; then # `make images`: every template into $BUILD/templates/NAME
	for t in "$repo"/templates/*/template.conf; do
		[ -f "$t" ] || continue
		t=$(dirname "$t")
		BUILD=$BUILD sh "$0" ${agent:+--agent "$agent"} "$t" \
			"$BUILD/templates/$(basename "$t")" || exit 1
	done
	exit 0
fi
[ $# -eq 2 ] || die "usage: mkimage.sh [--agent PATH] [TEMPLATE_DIR OUT_DIR]"
tdir=$1
out=$2
conf=$tdir/template.conf
[ -f "$conf" ] || die "$conf: no such file"

agent=${agent:-${SANBOX_AGENT:-$BUILD/sanbox-agent}}
epoch=${SOURCE_DATE_EPOCH:-1704067200}

# Resolves a HOST path of the template: $BUILD expanded, relative to the repo.
host_path() {
	p=$(printf '%s' "$1" | sed "s|\${BUILD}|$BUILD|g; s|\$BUILD|$BUILD|g")
	case $p in /*) ;; *) p=$repo/$p ;; esac
	printf '%s' "$p"
}

# ---- template.conf ----
name="" description="" harness="" cpus=1 memory=256M timeout=10m disk=512M
modules="" bins="" files="" model="" secrets="" network="" allows="" nallow=0
adapter=reference envs="" nenv=0 base=busybox suite=bookworm mirror=http://deb.debian.org/debian
packages="" npms=""
nl='
'
while IFS= read -r line || [ -n "$line" ]; do
	case $line in '' | '#'*) continue ;; esac
	key=$(printf '%s' "${line%%=*}" | tr -d ' \t')
	val=$(printf '%s' "${line#*=}" | sed 's/^[ \t]*//; s/[ \t]*$//')
	[ "$key" != "$line" ] || die "$conf: not a key = value line: $line"
	case $key in
	name) name=$val ;;
	description) description=$val ;;
	harness) harness=$val ;;
	cpus) cpus=$val ;;
	memory) memory=$val ;;
	timeout) timeout=$val ;;
	disk) disk=$val ;;
	module) modules="$modules $val" ;;
	bin) bins="$bins$val$nl" ;;
	file) files="$files$val$nl" ;;
	model) model=$val ;;
	secret)
		printf '%s' "$val" | grep -qE '^[A-Za-z_][A-Za-z0-9_]{0,62}(:env|:model)?$' ||
			die "$conf: bad secret '$val' (NAME, NAME:env or NAME:model)"
		secrets="$secrets${secrets:+, }$(json_str "$val")" ;;
	network)
		case $val in none | acl) network=$val ;; *) die "$conf: network must be none or acl" ;; esac ;;
	allow)
		printf '%s' "$val" | grep -qE '^[][A-Za-z0-9_.:/*-]+$' ||
			die "$conf: bad grant '$val'"
		nallow=$((nallow + 1))
		[ $nallow -le 16 ] || die "$conf: at most 16 grants"
		allows="$allows${allows:+, }$(json_str "$val")" ;;
	adapter)
		case $val in reference | command | opencode | claude-code | codex) adapter=$val ;;
		*) die "$conf: adapter must be reference, command, opencode, claude-code or codex" ;;
		esac ;;
	env)
		printf '%s' "$val" | grep -qE '^[A-Za-z_][A-Za-z0-9_]*=' || die "$conf: bad env '$val' (K=V)"
		nenv=$((nenv + 1))
		[ $nenv -le 32 ] || die "$conf: at most 32 env entries"
		envs="$envs${envs:+, }$(json_str "$val")" ;;
	base)
		case $val in busybox | debian) base=$val ;; *) die "$conf: base must be busybox or debian" ;; esac ;;
	suite) suite=$val ;;
	mirror) mirror=$val ;;
	packages) packages="$packages $val" ;;
	npm)
		printf '%s' "$val" | grep -qE '^(@[a-z0-9._-]+/)?[a-z0-9._-]+@[0-9][0-9A-Za-z.+-]*$' ||
			die "$conf: npm needs PACKAGE@VERSION (pinned), got '$val'"
		npms="$npms $val" ;;
	*) die "$conf: unknown key '$key'" ;;
	esac
done <"$conf"
[ -n "$name" ] || die "$conf: name is required"
printf '%s' "$name" | grep -qE '^[a-z0-9][a-z0-9._-]*$' || die "$conf: bad name '$name'"
printf '%s' "$cpus" | grep -qE '^[1-9][0-9]*$' || die "$conf: bad cpus '$cpus'"

# Sizes: 256M, 1G, 512 (MiB). Durations: 90s, 10m, 1h, 30 (seconds).
memory_mib=$(printf '%s' "$memory" | sed -nE 's/^([0-9]+)[mM]?$/\1/p')
[ -n "$memory_mib" ] || memory_mib=$(printf '%s' "$memory" | sed -n 's/^\([0-9][0-9]*\)[gG]$/\1/p')
[ -n "$memory_mib" ] || die "$conf: bad memory '$memory' (e.g. 256M or 1G)"
case $memory in *[gG]) memory_mib=$((memory_mib * 1024)) ;; esac
timeout_s=$(printf '%s' "$timeout" | sed -n 's/^\([0-9][0-9]*\)[smh]\{0,1\}$/\1/p')
[ -n "$timeout_s" ] || die "$conf: bad timeout '$timeout' (e.g. 90s, 10m, 1h)"
case $timeout in *m) timeout_s=$((timeout_s * 60)) ;; *h) timeout_s=$((timeout_s * 3600)) ;; esac
printf '%s' "$disk" | grep -qE '^[1-9][0-9]*[MG]$' || die "$conf: bad disk '$disk' (e.g. 512M)"

# ---- inputs ----
[ -f "$agent" ] || die "agent $agent not found (build it: make BUILD=... sanbox-agent, or set SANBOX_AGENT)"
file -L "$agent" | grep -q 'statically linked' || die "agent $agent is not a static executable"
if [ "$base" = busybox ]; then
	busybox=$(command -v busybox || true)
	[ -n "$busybox" ] && file -L "$busybox" | grep -q 'statically linked' ||
		die "no static busybox (install busybox-static)"
else
	[ -z "$npms" ] || command -v npm >/dev/null || die "npm not found (the template installs npm packages)"
	[ "$(id -u)" = 0 ] || die "a debian template is built as root (its files keep their owners)"
	debian_tar=$(sh "$repo/tools/debian.sh" "$suite" "$mirror" $packages | tail -n 1) ||
		die "the Debian userland failed"
fi
[ -n "$npms" ] && [ "$base" != debian ] && die "$conf: npm needs base = debian"
if [ -z "${SANBOX_KERNEL_DIR:-}" ]; then
	SANBOX_KERNEL_DIR=$(sh "$repo/tools/kernel.sh" | tail -n 1) || die "kernel fetch failed"
fi
kdir=$SANBOX_KERNEL_DIR
[ -f "$kdir/vmlinux" ] && [ -d "$kdir/modules" ] || die "$kdir is not a kernel cache dir"
kversion=$(cat "$kdir/version" 2>/dev/null || basename "$kdir")

work=$(mktemp -d /tmp/sanbox-mkimage.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM

# ---- initrd: /init and the modules in dependency order ----
find "$kdir/modules" -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst' >"$work/ko.list"
ko_path() { # module name -> file ("" when builtin or unknown)
	local n
	n=$(printf '%s' "$1" | tr - _)
	awk -v n="$n" '{ b = $0; sub(/.*\//, "", b); sub(/\.ko(\.xz|\.zst)?$/, "", b);
		gsub(/-/, "_", b); if (b == n) { print; exit } }' "$work/ko.list"
}
ordered=" "
add_module() { # depth-first: dependencies first
	local p deps soft d
	case $ordered in *" $1 "*) return 0 ;; esac
	p=$(ko_path "$1")
	if [ -z "$p" ]; then
		grep -qE "/$1\.ko\$" "$kdir/modules/modules.builtin" 2>/dev/null && return 0
		die "kernel module $1 not found in $kdir"
	fi
	deps=$(modinfo -F depends "$p" | tr ',' ' ')
	soft=$(modinfo -F softdep "$p" | sed -n 's/.*pre:[ ]*\([^:]*\)\( post:.*\)\{0,1\}$/\1/p')
	for d in $deps; do add_module "$d"; done
	for d in $soft; do [ -n "$(ko_path "$d")" ] && add_module "$d"; done
	ordered="$ordered$1 "
}
for m in virtio_ring virtio virtio_mmio virtio_blk virtio_net virtio_console \
	crc32c_generic ext4 $modules; do
	add_module "$(printf '%s' "$m" | tr - _)"
done

ird=$work/initrd
mkdir -p "$ird/etc/sanbox" "$ird/lib/modules" "$ird/proc" "$ird/sys" "$ird/dev" "$ird/newroot"
cp "$agent" "$ird/init"
chmod 0755 "$ird/init"
: >"$ird/etc/sanbox/modules"
for m in $ordered; do
	p=$(ko_path "$m")
	case $p in
	*.xz) xz -dc "$p" >"$ird/lib/modules/$m.ko" ;;
	*.zst) zstd -qdc "$p" >"$ird/lib/modules/$m.ko" ;;
	*) cp "$p" "$ird/lib/modules/$m.ko" ;;
	esac
	echo "/lib/modules/$m.ko" >>"$ird/etc/sanbox/modules"
done

# The template's npm packages into $root/usr/local, from the cache (a tar
# of usr/local keyed by the sorted list and the host's npm version) or
# with the host's npm, whose bin links are relative.
npm_install() {
	local list key tar
	[ -n "$npms" ] || return 0
	list=$(printf '%s\n' $npms | sort -u)
	key=$({ printf '%s\n' "$list"; npm --version; } | sha256sum | cut -d' ' -f1)
	tar=${SANBOX_CACHE:-$HOME/.cache/sanbox}/npm/$key.tar
	if [ ! -f "$tar" ]; then
		echo "mkimage: npm install" $list >&2
		mkdir -p "$work/npm/usr/local" "$(dirname "$tar")"
		npm install -g --prefix "$work/npm/usr/local" --no-audit --no-fund \
			--no-update-notifier --loglevel=error $list >&2 ||
			die "npm install $(echo $list) failed"
		tar -cf "$tar.part" -C "$work/npm" usr/local && mv "$tar.part" "$tar" ||
			die "cannot write $tar"
		rm -rf "$work/npm"
	else
		echo "mkimage: npm packages from the cache" >&2
	fi
	tar -xf "$tar" -C "$root" --no-same-owner || die "cannot unpack $tar"
}

# Makes a staging tree reproducible: fixed times and permissions bits kept.
fix_times() { find "$1" -exec touch -h -d "@$epoch" {} +; }

fix_times "$ird"
(cd "$ird" && find . -mindepth 1 | sort |
	cpio -o -H newc -R 0:0 --reproducible --quiet) >"$work/initrd.img" ||
	die "cpio failed"

# ---- rootfs ----
root=$work/root
mkdir -p "$root"
if [ "$base" = debian ]; then
	echo "mkimage: unpacking the Debian userland" >&2
	tar -xf "$debian_tar" -C "$root" --numeric-owner || die "cannot unpack $debian_tar"
	npm_install
fi
for d in bin sbin usr/bin usr/sbin etc etc/sanbox proc sys dev run tmp var/tmp \
	root workspace lib; do
	[ -e "$root/$d" ] || mkdir -p "$root/$d"
done
chmod 1777 "$root/tmp" "$root/var/tmp"
chmod 0700 "$root/root"
if [ "$base" = busybox ]; then
	cp "$busybox" "$root/bin/busybox"
	chmod 0755 "$root/bin/busybox"
	"$busybox" --list-full | while IFS= read -r applet; do
		[ "$applet" = bin/busybox ] && continue
		mkdir -p "$root/$(dirname "$applet")"
		[ -e "$root/$applet" ] || ln -s /bin/busybox "$root/$applet"
	done
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' \
		>"$root/etc/passwd"
	printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
fi
printf 'sanbox\n' >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost sanbox\n::1\tlocalhost\n' >"$root/etc/hosts"
printf '%s\n' "$name" >"$root/etc/sanbox/template"

if [ -d "$tdir/root" ]; then
	cp -a "$tdir/root/." "$root/"
fi

# Copies src to the guest path dst inside the rootfs (following links).
put() {
	mkdir -p "$root$(dirname "$2")"
	cp -L --preserve=mode "$1" "$root$2"
}
printf '%s' "$bins" | while IFS= read -r b; do
	[ -n "$b" ] || continue
	src=$(host_path "${b%%:*}")
	dst=${b#*:}
	[ "$dst" != "$b" ] && [ "${dst#/}" != "$dst" ] || die "$conf: bin needs HOST:/GUEST, got '$b'"
	[ -f "$src" ] || die "$conf: bin $src not found (build it first, or drop the line)"
	[ -x "$src" ] || die "$conf: bin $src is not executable"
	put "$src" "$dst"
	chmod 0755 "$root$dst"
	# Shared libraries and the loader, as ldd lists them.
	ldd "$src" 2>/dev/null | sed -n 's/.*=> \(\/[^ ]*\) (.*/\1/p; s/^[ \t]*\(\/[^ ]*\) (.*/\1/p' |
	while IFS= read -r lib; do
		[ -e "$root$lib" ] || put "$lib" "$lib"
	done
done
printf '%s' "$files" | while IFS= read -r f; do
	[ -n "$f" ] || continue
	src=$(host_path "${f%%:*}")
	dst=${f#*:}
	[ "$dst" != "$f" ] && [ "${dst#/}" != "$dst" ] || die "$conf: file needs HOST:/GUEST, got '$f'"
	[ -f "$src" ] || die "$conf: file $src not found"
	put "$src" "$dst"
done

fix_times "$root"
# Fixed UUID and directory hash seed, derived from the template's name.
uuid=$(printf 'sanbox-template-%s' "$name" | sha256sum |
	sed 's/^\(.\{8\}\)\(.\{4\}\)\(.\{4\}\)\(.\{4\}\)\(.\{12\}\).*/\1-\2-\3-\4-\5/')
E2FSPROGS_FAKE_TIME=$epoch mkfs.ext4 -q -F -t ext4 -b 4096 -I 256 -m 0 -L sanbox-root \
	-U "$uuid" -E "root_owner=0:0,hash_seed=$uuid" -d "$root" "$work/rootfs.img" "$disk" \
	>"$work/mkfs.log" 2>&1 || die "mkfs.ext4 failed: $(tail -n 1 "$work/mkfs.log")"
# mke2fs 1.47.0 copies each file's ctime (which touch cannot set): fix them.
(echo "sif / ctime @$epoch"
 cd "$root" && find . -mindepth 1 | sort | sed "s|^\.\(.*\)|sif \"\1\" ctime @$epoch|") \
	>"$work/ctime.cmds"
E2FSPROGS_FAKE_TIME=$epoch debugfs -w -f "$work/ctime.cmds" "$work/rootfs.img" \
	>"$work/debugfs.log" 2>&1 || die "debugfs failed: $(tail -n 1 "$work/debugfs.log")"

cp "$kdir/vmlinux" "$work/vmlinux"

# ---- OUT_DIR ----
mkdir -p "$out"
for f in vmlinux initrd.img rootfs.img template.json; do
	rm -f "$out/$f"
done
for f in vmlinux initrd.img rootfs.img; do
	mv "$work/$f" "$out/$f"
	chmod 0444 "$out/$f"
done
h_vmlinux=$(sha256sum "$out/vmlinux" | cut -d' ' -f1)
h_initrd=$(sha256sum "$out/initrd.img" | cut -d' ' -f1)
h_rootfs=$(sha256sum "$out/rootfs.img" | cut -d' ' -f1)
hash=$(printf 'vmlinux %s\ninitrd.img %s\nrootfs.img %s\n' "$h_vmlinux" "$h_initrd" "$h_rootfs" |
	sha256sum | cut -d' ' -f1)
cat >"$out/template.json" <<EOF
{
  "name": $(json_str "$name"),
  "description": $(json_str "$description"),
  "kernel_version": $(json_str "$kversion"),
  "files": {
    "vmlinux": "$h_vmlinux",
    "initrd.img": "$h_initrd",
    "rootfs.img": "$h_rootfs"
  },
  "hash": "$hash",
  "cpus": $cpus,
  "memory_mib": $memory_mib,
  "timeout_s": $timeout_s,
  "harness": $(json_str "$harness"),
  "model": $(json_str "$model"),
  "secrets": [$secrets],
  "network": $(json_str "$network"),
  "allow": [$allows],
  "adapter": $(json_str "$adapter"),
  "env": [$envs],
  "base": $(json_str "$base")
}
EOF
chmod 0444 "$out/template.json"
echo "$out"
