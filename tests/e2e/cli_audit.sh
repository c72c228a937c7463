#!/bin/sh
# export, verify and prove: a round trip, as a tar and a directory; each
# kind of tampering fails naming where; a redacted export verifies and
# lists its redactions; --prior refuses another history; a one-event proof;
# a secret granted to the run is nowhere in the bundle; reproject keeps the
# root. Each bundle, good or tampered, is also checked by
# tests/verify_bundle.py, written from SPEC alone: the same verdict, the
# same place named, the same report. No microVM: runs use the bootless
# template.
. "$(dirname "$0")/lib/bootless.sh"
PYV=$(cd "$(dirname "$0")/.." && pwd)/verify_bundle.py
/usr/bin/python3 -c 'import nacl.signing' || fail "python3-nacl is missing (make deps)"

# both ARGS...: sanbox verify and verify_bundle.py on the same bundle give
# one verdict (returned); their outputs are in $tmp/out and $tmp/pyout, and
# when they verify, their --json reports are the same
both() {
	"$SB" verify "$@" >"$tmp/out" 2>&1
	c=$?
	"$PYV" "$@" >"$tmp/pyout" 2>&1
	p=$?
	[ "$c" = "$p" ] ||
		fail "verify $*: sanbox exits $c ($(cat "$tmp/out")), verify_bundle.py $p ($(cat "$tmp/pyout"))"
	if [ "$c" = 0 ]; then
		"$SB" verify "$@" --json | jq -S -c . >"$tmp/cj"
		"$PYV" "$@" --json | jq -S -c . >"$tmp/pj"
		cmp -s "$tmp/cj" "$tmp/pj" || fail "verify $*: $(cat "$tmp/cj") but $(cat "$tmp/pj")"
	fi
	return "$c"
}

secret="s3cr3t-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')"
printf '%s' "$secret" | "$SB" secret set TOKEN >/dev/null || fail "secret set"
printf 'input of the audited run\n' >"$tmp/notes.txt"
A=$("$SB" run --detach --name audited --secret TOKEN --input "$tmp/notes.txt" -- true) ||
	fail "run A"
wait_stopped "$A" || fail "A did not stop"
B=$("$SB" run --detach --name other -- true) || fail "run B" # leaves the proof must cover
wait_stopped "$B" || fail "B did not stop"
for i in 1 2 3; do
	"$SB" admin append "$A" operator.note "{\"text\": \"note $i\"}" >/dev/null || fail "append $i"
done
key=$("$SB" admin key show) || fail "admin key show"
case $key in sanbox/*+????????+*) ;; *) fail "key show: $key" ;; esac
[ "$(stat -c %a "$SANBOX_HOME/audit.key")" = 600 ] || fail "the key file is not 0600"

"$SB" export "$A" -o "$tmp/a.tar" >"$tmp/out" || fail "export: $(cat "$tmp/out")"
both "$tmp/a.tar" --key "$key" || fail "verify the tar: $(cat "$tmp/out")"
grep -q "verified: .* events of 1 run" "$tmp/out" || fail "verify said: $(cat "$tmp/out")"
"$SB" export "$A" -o "$tmp/a" --dir >/dev/null || fail "export --dir"
both "$tmp/a" --key "$key" || fail "verify the directory"
both "$tmp/a" || fail "verify by the bundle's own key"
head -1 "$tmp/a/checkpoint" | grep -q '^sanbox/' || fail "checkpoint origin: $(cat "$tmp/a/checkpoint")"
grep -q "^— sanbox/" "$tmp/a/checkpoint" || fail "checkpoint signature line"
n=$(wc -l <"$tmp/a/events.jsonl")
[ "$n" -ge 7 ] || fail "only $n events exported"
grep -rqF "$secret" "$tmp/a" && fail "the secret's value is in the bundle"
tar -xOf "$tmp/a.tar" | grep -qF "$secret" && fail "the secret's value is in the tar"
grep -q TOKEN "$tmp/a/plan.json" || fail "plan.json does not name the secret"
# the manifest names the run as run.get does; the input is a blob
jq -e '.runs[0] | .name == "audited" and .template == "shell" and (.template_hash | length) > 0' \
	"$tmp/a/manifest.json" >/dev/null || fail "manifest's run: $(jq -c .runs "$tmp/a/manifest.json")"
b=$(jq -r '.blobs[0] // empty' "$tmp/a/manifest.json")
[ -n "$b" ] && cmp -s "$tmp/a/blobs/$b" "$tmp/notes.txt" || fail "the input is not blob $b"

# tamper CASE EXPECT: copy the bundle, run CASE on it, verify must fail
# with EXPECT in its message
tamper() {
	rm -rf "$tmp/t" && cp -r "$tmp/a" "$tmp/t"
	(cd "$tmp/t" && eval "$1")
	both "$tmp/t" --key "$key" && fail "$1: verified"
	grep -q "$2" "$tmp/out" || fail "$1: said $(cat "$tmp/out"), not $2"
	grep -q "$2" "$tmp/pyout" || fail "$1: verify_bundle.py said $(cat "$tmp/pyout"), not $2"
}
tamper "sed -i '3s/\"seq\":3/\"seq\":4/' events.jsonl" "events.jsonl line 3"
tamper "sed -i '9s/note 2/note X/' events.jsonl" "events.jsonl line 9"
tamper "sed -i '4d' events.jsonl" "events.jsonl line 4"
tamper "sed -i '\$d' events.jsonl" "proof: ends"
tamper "awk 'NR==2{l=\$0;next} NR==3{print;print l;next} 1' events.jsonl >x && mv x events.jsonl" "events.jsonl line 2"
tamper "sed -n '1p;1p;2,\$p' events.jsonl >x && mv x events.jsonl" "events.jsonl line 2"
zeros=$(printf '%064d' 0)
tamper "sed -i '2s/\"salt\":\"[0-9a-f]*\"/\"salt\":\"$zeros\"/' events.jsonl" "events.jsonl line 2"
tamper "head -c -1 proof >x && mv x proof" "proof"
tamper "printf x >>proof" "proof: bytes left"
tamper "sed -i '\$s/ [A-Za-z0-9+\/]*=*\$/ AAAA/' checkpoint" "checkpoint"
tamper "sed -i '2s/.*/999999/' checkpoint" "checkpoint"
# a hostile bundle's names never reach the verifier's own files
tamper "rm events.jsonl && ln -s /etc/passwd events.jsonl" "events.jsonl: a symbolic link"
tamper "rm manifest.json && ln -s /etc/passwd manifest.json" "manifest.json: a symbolic link"
tamper "rm proof && mkfifo proof" "proof: not a regular file"
tamper "rm -r blobs && ln -s /etc blobs" "blobs: not a directory"
tamper "printf x >>blobs/$b" "blobs/$b"
tamper "rm blobs/$b" "blobs/$b"
tamper "cp blobs/$b blobs/$zeros" "blobs: 2 files"
# a bundle signed by another key fails against the trusted one
other=$(SANBOX_HOME=$tmp/otherhome "$SB" admin key show)
both "$tmp/a" --key "$other" && fail "verified with another key"
cat "$tmp/pyout" >>"$tmp/out"
[ "$(grep -c "no signature by key" "$tmp/out")" = 2 ] || fail "another key: $(cat "$tmp/out")"

# redaction: the notes' payloads are withheld, the proof still holds
"$SB" export "$A" --redact operator.note -o "$tmp/r" --dir >/dev/null || fail "export --redact"
both "$tmp/r" --key "$key" --json || fail "verify redacted: $(cat "$tmp/out")"
grep -q '"redacted":3' "$tmp/out" || fail "redactions not counted: $(cat "$tmp/out")"
grep -q "note 1" "$tmp/r/events.jsonl" && fail "a redacted payload is in the bundle"
[ "$(grep -c '"offset"' "$tmp/r/manifest.json")" -ge 3 ] || fail "manifest lists no redactions"

# a one-event proof
off=$(sed -n '9s/.*"offset":\([0-9]*\).*/\1/p' "$tmp/a/events.jsonl")
"$SB" prove "$A" "$off" -o "$tmp/p" --dir >/dev/null || fail "prove"
[ "$(wc -l <"$tmp/p/events.jsonl")" = 1 ] || fail "prove wrote more than one event"
both "$tmp/p" --key "$key" || fail "verify the one-event proof"
sed -i 's/note 2/note 9/' "$tmp/p/events.jsonl"
both "$tmp/p" --key "$key" && fail "an edited one-event proof verified"

# --prior: a later export extends the earlier; reproject keeps the root
root1=$(sed -n 3p "$tmp/a/checkpoint")
"$SB" admin reproject >/dev/null || fail "reproject"
"$SB" admin append "$A" operator.note '{"text": "later"}' >/dev/null || fail "append later"
"$SB" export "$A" --prior "$tmp/a.tar" -o "$tmp/b" --dir >/dev/null || fail "export --prior"
both "$tmp/b" --key "$key" --prior "$tmp/a.tar" || fail "verify --prior: $(cat "$tmp/out")"
"$SB" admin checkpoint >"$tmp/ck" || fail "admin checkpoint"
[ "$(sed -n 3p "$tmp/ck")" != "$root1" ] || fail "the root did not move"
size1=$(sed -n 2p "$tmp/a/checkpoint")
# another history under the same key: its first size1 records differ
H2=$tmp/h2
mkdir -p "$H2"
cp "$SANBOX_HOME/audit.key" "$H2/"
R=$(SANBOX_HOME=$H2 "$SB" run --detach -- true) || fail "run in the other home"
bg="$bg $(cat "$H2/sanboxd.pid")"
i=0
while [ $i -lt "$size1" ]; do
	SANBOX_HOME=$H2 "$SB" admin append "$R" operator.note "{\"text\": \"o$i\"}" >/dev/null ||
		fail "append in the other home"
	i=$((i + 1))
done
SANBOX_HOME=$H2 "$SB" export "$R" --prior "$tmp/a.tar" -o "$tmp/c" --dir >"$tmp/out" 2>&1 ||
	fail "export in the other home: $(cat "$tmp/out")"
grep -q "verify will refuse it" "$tmp/out" || fail "export did not warn of the other history: $(cat "$tmp/out")"
both "$tmp/c" --key "$key" --prior "$tmp/a.tar" &&
	fail "a rewritten history verified against the prior"
grep -q "consistency: .*does not extend" "$tmp/out" || fail "rewritten history: $(cat "$tmp/out")"
grep -q "consistency: .*does not extend" "$tmp/pyout" || fail "rewritten history: $(cat "$tmp/pyout")"
kill "$(cat "$H2/sanboxd.pid")" 2>/dev/null
echo "ok cli_audit"
