#!/bin/sh
# export, verify and prove: a round trip, as a tar and a directory; each
# kind of tampering fails naming where; a redacted export verifies and
# lists its redactions; --prior refuses another history; a one-event proof;
# a secret granted to the run is nowhere in the bundle; reproject keeps the
# root. No microVM: runs use the bootless template.
. "$(dirname "$0")/lib/bootless.sh"

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
"$SB" verify "$tmp/a.tar" --key "$key" >"$tmp/out" || fail "verify the tar: $(cat "$tmp/out")"
grep -q "verified: .* events of 1 run" "$tmp/out" || fail "verify said: $(cat "$tmp/out")"
"$SB" export "$A" -o "$tmp/a" --dir >/dev/null || fail "export --dir"
"$SB" verify "$tmp/a" --key "$key" >/dev/null || fail "verify the directory"
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
	"$SB" verify "$tmp/t" --key "$key" >"$tmp/out" 2>&1 && fail "$1: verified"
	grep -q "$2" "$tmp/out" || fail "$1: said $(cat "$tmp/out"), not $2"
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
"$SB" verify "$tmp/a" --key "$other" >"$tmp/out" 2>&1 && fail "verified with another key"
grep -q "no signature by key" "$tmp/out" || fail "another key: $(cat "$tmp/out")"

# redaction: the notes' payloads are withheld, the proof still holds
"$SB" export "$A" --redact operator.note -o "$tmp/r" --dir >/dev/null || fail "export --redact"
"$SB" verify "$tmp/r" --key "$key" --json >"$tmp/out" || fail "verify redacted: $(cat "$tmp/out")"
grep -q '"redacted":3' "$tmp/out" || fail "redactions not counted: $(cat "$tmp/out")"
grep -q "note 1" "$tmp/r/events.jsonl" && fail "a redacted payload is in the bundle"
[ "$(grep -c '"offset"' "$tmp/r/manifest.json")" -ge 3 ] || fail "manifest lists no redactions"

# a one-event proof
off=$(sed -n '9s/.*"offset":\([0-9]*\).*/\1/p' "$tmp/a/events.jsonl")
"$SB" prove "$A" "$off" -o "$tmp/p" --dir >/dev/null || fail "prove"
[ "$(wc -l <"$tmp/p/events.jsonl")" = 1 ] || fail "prove wrote more than one event"
"$SB" verify "$tmp/p" --key "$key" >/dev/null || fail "verify the one-event proof"
sed -i 's/note 2/note 9/' "$tmp/p/events.jsonl"
"$SB" verify "$tmp/p" --key "$key" >"$tmp/out" 2>&1 && fail "an edited one-event proof verified"

# --prior: a later export extends the earlier; reproject keeps the root
root1=$(sed -n 3p "$tmp/a/checkpoint")
"$SB" admin reproject >/dev/null || fail "reproject"
"$SB" admin append "$A" operator.note '{"text": "later"}' >/dev/null || fail "append later"
"$SB" export "$A" --prior "$tmp/a.tar" -o "$tmp/b" --dir >/dev/null || fail "export --prior"
"$SB" verify "$tmp/b" --key "$key" --prior "$tmp/a.tar" >"$tmp/out" || fail "verify --prior: $(cat "$tmp/out")"
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
"$SB" verify "$tmp/c" --key "$key" --prior "$tmp/a.tar" >"$tmp/out" 2>&1 &&
	fail "a rewritten history verified against the prior"
grep -q "consistency: .*does not extend" "$tmp/out" || fail "rewritten history: $(cat "$tmp/out")"
kill "$(cat "$H2/sanboxd.pid")" 2>/dev/null
echo "ok cli_audit"
