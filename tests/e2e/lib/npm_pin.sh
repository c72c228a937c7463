# lib/npm_pin.sh - npm_pin TEST DIR PACKAGE@VERSION FILE: installs a pinned
# npm package once into DIR (under $BUILD/npm), unless DIR/FILE is there
# already. Without npm, or when the install fails (offline, no copy
# there), the test is skipped: exit 0 with a SKIP line naming TEST and why.
npm_pin() {
	if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
		echo "SKIP $1: no node or npm"
		exit 0
	fi
	[ -e "$2/$4" ] && return 0
	mkdir -p "$2" && printf '{"private": true}\n' >"$2/package.json"
	if ! npm install --prefix "$2" --no-audit --no-fund --silent "$3" >"$2/npm.log" 2>&1; then
		echo "SKIP $1: cannot install $3: $(tail -n 1 "$2/npm.log")"
		exit 0
	fi
}
