#!/bin/sh
# sanbox exec and sanbox cp into a live run, through the real CLI and a
# real microVM: a command's output, exit status and stdin; its record
# (operator.exec with its output as blobs); a command that prints 100 MB
# is capped and one that never ends is killed at its --timeout; -t is
# refused; a run that is not running (1) or does not exist (3). cp of a
# file and (-r) a directory into /workspace, recorded as operator.cp
# with each file's hash, refusing '..' and absolute paths outside
# /workspace and never writing through a link the guest made.
. "$(dirname "$0")/lib/vm.sh"

# events of type T of RUN as JSON lines
typed() { "$SB" events "$1" --type "$2" --json; }

R=$("$SB" run --detach --name live --timeout 900s -- /bin/sh -c 'echo ready > ready.txt; sleep 800')
wait_event "$R" "e['type']=='agent.file.changed' and e['payload']['path']=='/workspace/ready.txt'" 180 ||
	bad "setup" "the run never started: $("$SB" events "$R" 2>&1 | tail -3)"

# ---- exec ----
out=$("$SB" exec "$R" -- /bin/sh -c 'echo hello; echo oops >&2; cat ready.txt; exit 7' 2>"$SANBOX_HOME/err")
rc=$?
[ "$rc" = 7 ] && [ "$out" = "hello
ready" ] && [ "$(cat "$SANBOX_HOME/err")" = oops ] &&
	ok "exec: stdout, stderr, in /workspace, its exit status is sanbox's" ||
	bad "exec" "rc=$rc out=$out err=$(cat "$SANBOX_HOME/err")"

typed "$R" operator.exec | tail -1 | python3 -c "
import json, sys
e = json.loads(sys.stdin.read())
p = e['payload']
assert e['source'] == 'host', e
assert p['argv'] == ['/bin/sh', '-c', 'echo hello; echo oops >&2; cat ready.txt; exit 7'], p
assert p['status'] == 7 and not p['timed_out'] and p['by'] == 'local', p
assert p['stdout_bytes'] == 12 and p['stderr_bytes'] == 5, p
assert len(p['stdout']) == 64 and len(p['stderr']) == 64, p
print(p['stdout'])" >"$SANBOX_HOME/key" 2>&1 &&
	ok "operator.exec records argv, status, by and the output as blobs" ||
	bad "operator.exec" "$(cat "$SANBOX_HOME/key")"

out=$(printf 'one\ntwo\n' | "$SB" exec "$R" -i -- wc -l)
[ "$(echo $out)" = 2 ] && ok "exec -i passes stdin" || bad "exec -i" "$out"
out=$("$SB" exec "$R" -- cat </dev/null)
[ -z "$out" ] && ok "without -i the command's stdin is empty" || bad "stdin" "$out"

out=$("$SB" exec "$R" --json -- /bin/sh -c 'echo hi' | python3 -c "
import json, sys, base64
j = json.load(sys.stdin)
print(j['status'], base64.b64decode(j['stdout']).decode().strip(), j['offset'] > 0)")
[ "$out" = "0 hi True" ] && ok "exec --json: status, stdout (base64), offset" || bad "exec --json" "$out"

# hostile: 100 MB of output is capped, the command still ends
start=$(date +%s)
"$SB" exec "$R" --output-max 4096 -- /bin/sh -c 'head -c 100000000 /dev/zero; echo done >&2' \
	>"$SANBOX_HOME/big" 2>"$SANBOX_HOME/bigerr"
rc=$?
[ "$rc" = 0 ] && [ "$(wc -c <"$SANBOX_HOME/big")" = 4096 ] &&
	grep -q 'done' "$SANBOX_HOME/bigerr" && grep -q '100000000' "$SANBOX_HOME/bigerr" &&
	ok "100 MB of output: 4096 bytes kept, all counted ($(($(date +%s) - start)) s)" ||
	bad "big output" "rc=$rc $(wc -c <"$SANBOX_HOME/big") $(cat "$SANBOX_HOME/bigerr")"

# hostile: a command that never ends is killed at its timeout
start=$(date +%s)
out=$("$SB" exec "$R" --timeout 2s -- /bin/sh -c 'sleep 1000 & sleep 1000' 2>&1)
rc=$?
[ "$rc" = 124 ] && [ $(($(date +%s) - start)) -lt 30 ] &&
	typed "$R" operator.exec | tail -1 | grep -q '"timed_out": *true' &&
	ok "a command past --timeout is killed: exit 124, timed_out recorded" ||
	bad "timeout" "rc=$rc $out"
out=$("$SB" exec "$R" -- /bin/sh -c 'ps -o pid,args 2>/dev/null | grep -c "[s]leep 1000" || true')
[ "$out" = 0 ] && ok "its processes went with it" || bad "timeout kill" "$out"

out=$("$SB" exec "$R" -- /no/such/command 2>&1)
[ $? = 127 ] && ok "a command that does not exist: 127" || bad "no command" "$out"
out=$("$SB" exec "$R" -t -- true 2>&1)
[ $? = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ] && ok "-t is refused in one line (2)" || bad "-t" "$out"
out=$("$SB" exec nosuchrun -- true 2>&1)
[ $? = 3 ] && ok "no such run: 3" || bad "no run" "$out"
"$SB" exec "$R" 2>/dev/null
[ $? = 2 ] && ok "no command: usage (2)" || bad "usage" "exec without a command"

# ---- cp into the live run ----
L=$SANBOX_HOME/local
mkdir -p "$L/tree/sub" "$L/tree/empty"
printf 'payload\n' >"$L/f.txt"
printf 'deep\n' >"$L/tree/sub/d.txt"
ln -s sub/d.txt "$L/tree/link"
"$SB" cp "$L/f.txt" "$R:/workspace/in/f.txt" &&
	[ "$("$SB" exec "$R" -- cat in/f.txt)" = payload ] &&
	ok "cp FILE RUN:/workspace/PATH writes it into the live guest" || bad "cp in" "$("$SB" exec "$R" -- ls -R 2>&1)"
typed "$R" operator.cp | tail -1 | python3 -c "
import json, sys, hashlib
p = json.loads(sys.stdin.read())['payload']
f = p['files'][0]
assert f['path'] == 'in/f.txt' and f['kind'] == 'file' and f['size'] == 8, p
assert f['content'] == hashlib.blake2b(b'payload\n', digest_size=32).hexdigest(), p
assert p['written'] == 1 and p['by'] == 'local', p" 2>&1 &&
	ok "operator.cp records the file with its hash (its content a blob)" || bad "operator.cp" "$(typed "$R" operator.cp)"
"$SB" cp -r "$L/tree" "$R:copied" &&
	out=$("$SB" exec "$R" -- /bin/sh -c 'cat copied/sub/d.txt; readlink copied/link; [ -d copied/empty ] && echo empty') &&
	[ "$out" = "deep
sub/d.txt
empty" ] && ok "cp -r copies a tree: files, links, empty directories" || bad "cp -r" "$out"
out=$("$SB" cp "$L/tree" "$R:x" 2>&1)
[ $? = 2 ] && ok "a directory without -r is refused (2)" || bad "cp dir" "$out"
for dst in ../x /etc/passwd /workspace/../etc/x a/./b; do
	out=$("$SB" cp "$L/f.txt" "$R:$dst" 2>&1)
	[ $? = 2 ] || bad "cp to $dst" "$out"
done
ok "cp refuses '..', '.' and paths outside /workspace (2)"
"$SB" exec "$R" -- ln -s /etc /workspace/esc
out=$("$SB" cp "$L/f.txt" "$R:esc/passwd" 2>&1)
rc=$?
[ "$rc" = 1 ] && ! "$SB" exec "$R" -- grep -q payload /etc/passwd &&
	ok "cp never writes through a link the guest made (skipped, exit 1)" || bad "cp link escape" "rc=$rc $out"
out=$("$SB" cp "$L/f.txt" "nosuchrun:f" 2>&1)
[ $? = 3 ] && ok "cp into no such run: 3" || bad "cp no run" "$out"

# ---- cp out --at: the file as the record has it at an offset ----
"$SB" snapshot "$R" >/dev/null
"$SB" exec "$R" -- /bin/sh -c 'echo v2 > in/f.txt'
wait_event "$R" "e['type']=='agent.file.changed' and e['payload']['path']=='/workspace/in/f.txt' and e['payload']['size']==3" 30
o2=$(typed "$R" agent.file.changed | python3 -c "
import json, sys
print([json.loads(l) for l in sys.stdin if '\"/workspace/in/f.txt\"' in l][-1]['offset'])")
"$SB" exec "$R" -- /bin/sh -c 'echo v3 > in/f.txt'
"$SB" cp --at "$o2" "$R:in/f.txt" "$L/at.txt" && [ "$(cat "$L/at.txt")" = v2 ] &&
	ok "cp RUN:PATH LOCAL --at OFFSET: the file as it was then" || bad "cp --at" "$(cat "$L/at.txt" 2>&1)"
out=$("$SB" cp --at "$o2" "$R:in/f.txt" "$L/at.txt" 2>&1)
[ $? = 1 ] && "$SB" cp --force --at "$o2" "$R:in/f.txt" "$L/at.txt" &&
	ok "cp --at keeps an existing LOCAL unless --force" || bad "cp --at exists" "$out"

# ---- a run that is not running ----
D=$("$SB" run --detach --name done -- true)
"$SB" wait "$D" >/dev/null 2>&1
out=$("$SB" exec "$D" -- true 2>&1)
[ $? = 1 ] && [ "$out" = "sanbox: run $D is not running" ] &&
	ok "a run that ended: 'not running', exit 1" || bad "ended" "$out"
out=$("$SB" cp "$L/f.txt" "$D:f" 2>&1)
[ $? = 1 ] && [ "$out" = "sanbox: run $D is not running" ] &&
	ok "cp into a run that ended: 'not running', exit 1" || bad "cp ended" "$out"

[ "$failures" = 0 ]
