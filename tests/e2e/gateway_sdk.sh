#!/bin/sh
# The gateway's OpenAI Responses API through the official openai npm SDK
# (pinned, installed once into $BUILD/npm): tests/gwbridge puts the gateway
# on a loopback port for one run; tests/e2e/lib/openai_sdk.mjs makes whole
# and streamed calls, a refused one and a cut one; then the run's recorded
# usage must be what the stub reported, the cut call estimated. Without
# node or npm, or offline with no copy there, the test is skipped.
BUILD=${BUILD:-build}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
case $BUILD in /*) ;; *) BUILD=$REPO/$BUILD ;; esac
SDK_VERSION=6.9.1
sdk=$BUILD/npm/openai-$SDK_VERSION
tmp=$(mktemp -d /tmp/sbsdk.XXXXXX)
bpid=
trap '[ -n "$bpid" ] && kill "$bpid" 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL gateway_sdk: $*"; exit 1; }

. "$(dirname "$0")/lib/npm_pin.sh"
npm_pin gateway_sdk "$sdk" "openai@$SDK_VERSION" node_modules/openai/package.json

mkdir -p "$tmp/scripts" "$tmp/home/log"
cp "$REPO/tools/stub/harness.json" "$tmp/scripts/"
printf '{"turns": [{"ignore_max_tokens": true, "chunks": 40, "text": "%s"}]}\n' \
	"$(head -c 2000 /dev/zero | tr '\0' x)" >"$tmp/scripts/long.json"
mkfifo "$tmp/in"
"$BUILD/tests/gwbridge" "$tmp/scripts" "$tmp/home" 100000000 <"$tmp/in" >"$tmp/out" 2>"$tmp/err" &
bpid=$!
exec 3>"$tmp/in"
i=0
until grep -qs '^listening ' "$tmp/out"; do
	i=$((i + 1))
	[ $i -lt 200 ] || fail "gwbridge did not start: $(cat "$tmp/err")"
	sleep 0.05
done
set -- $(sed -n 's/^listening //p' "$tmp/out")
node "$REPO/tests/e2e/lib/openai_sdk.mjs" "$sdk" "$1" "$2" >"$tmp/sdk.out" 2>&1
rc=$?
cat "$tmp/sdk.out"
[ $rc = 0 ] || fail "the SDK's checks (exit $rc)"
exec 3>&-
wait "$bpid"
bpid=
# three answered calls metered from their usage, the cut one estimated
awk '/^usage/ { n++; if ($6 == "estimated") est++; else if ($2 > 0 && $3 > 0) ok++; cost += $5 }
	/^spent/ { spent = $2; reserved = $4 }
	END { exit !(n == 4 && ok == 3 && est == 1 && spent == cost && reserved == 0) }' "$tmp/out" ||
	fail "recorded usage: $(cat "$tmp/out")"
echo "PASS gateway_sdk: usage recorded from the Responses API, the cut stream estimated"
