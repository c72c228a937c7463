#!/bin/sh
# A remote client over TLS with a bearer token: runs, attach (polled), ps;
# refused without the right token or CA, and local-only operations stay local;
# fs ls, fs cat, cp out of a run's disk and diff give the same bytes
# remotely (fs.list, fs.stat, fs.read) as locally; exec, cp -r into a live
# run and rm of it once it ended work remotely.
. "$(dirname "$0")/lib/vm.sh"

certs=$SANBOX_HOME/certs
mkdir -p "$certs"
# The name is in the CN only: the mbedtls under nng does not match IP SANs.
mkcert() {
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=127.0.0.1" \
		-keyout "$certs/$1.key" -out "$certs/$1.pem" \
		>/dev/null 2>&1 || { echo "FAIL setup: openssl"; exit 1; }
}
mkcert server
mkcert other
port=$((20000 + $$ % 20000))
url=tls+tcp://127.0.0.1:$port
"$BUILD/sanboxd" --listen "$url" --cert "$certs/server.pem" --key "$certs/server.key" \
	>"$SANBOX_HOME/d.log" 2>&1 &
for i in $(seq 1 50); do "$SB" daemon status >/dev/null 2>&1 && break; sleep 0.1; done
"$SB" daemon status >/dev/null || { echo "FAIL setup: daemon: $(cat "$SANBOX_HOME/d.log")"; exit 1; }
token=$("$SB" admin token create ci-bot)
remote() { "$SB" --remote "$url" --token "$token" --ca "$certs/server.pem" "$@"; }

R=$(remote run --detach --timeout 120s -- /bin/sh -c 'mkdir d; echo one > d/one; ln -s d/one l
head -c 1500000 /dev/urandom > big; printf "a\tb\n" > "x y"; echo remote-hi; exit 5')
[ -n "$R" ] && ok "remote run" || bad "remote run" "no run id"
out=$(timeout 120 "$SB" --remote "$url" --token "$token" --ca "$certs/server.pem" attach "$R")
case "$out" in *remote-hi*run.stopped*) ok "remote attach follows to the end" ;;
*) bad "remote attach" "$out" ;; esac
remote ps --json | grep -q "\"$R\"" && ok "remote ps" || bad "remote ps" "run not listed"
# status of the remote daemon: its url under "url", health's counters under "remote"
remote daemon status --json >"$SANBOX_HOME/st.json"
python3 - "$SANBOX_HOME/st.json" "$url" <<'EOF' && ok "remote daemon status --json" || bad "remote status" "$(cat "$SANBOX_HOME/st.json")"
import json, sys
j = json.load(open(sys.argv[1]))
r = j.get("remote")
sys.exit(0 if j["state"] == "running" and j["url"] == sys.argv[2] and "home" not in j and
         isinstance(r, dict) and r["requests"] >= 3 and r["conns"] >= 1 else 1)
EOF
remote daemon status | grep -q "^sanboxd: running at $url (pid" && ok "remote daemon status" ||
	bad "remote status text" "$(remote daemon status)"
[ "$(remote inspect "$R" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["exit_status"])')" = 5 ] &&
	ok "remote inspect" || bad "remote inspect" "exit status"
# a run's disk, read remotely as locally
last=$(remote events "$R" --json | tail -n 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["offset"])')
nsame=0
for cmd in "fs ls $R" "fs ls $R --json" "fs ls $R d" "fs ls $R /" "fs cat $R big" "fs cat $R d/one" \
	"fs ls $R --at $last" "fs cat $R big --at $last" "diff $R" "diff $R --json" "cp $R:big -"; do
	want=$("$SB" $cmd 2>&1 | sha256sum)
	got=$(remote $cmd 2>&1 | sha256sum)
	if [ "$got" = "$want" ]; then nsame=$((nsame + 1)); else bad "remote $cmd" "differs from the local one"; fi
done
[ $nsame = 11 ] && ok "fs ls, fs cat, cp -, diff: the same bytes remotely ($nsame commands)"
[ "$("$SB" fs cat "$R" big | wc -c)" = 1500000 ] && ok "... a file over one fs.read chunk whole" ||
	bad "big" "$("$SB" fs cat "$R" big | wc -c) bytes"
remote cp "$R:big" "$SANBOX_HOME/big.r" && "$SB" cp "$R:big" "$SANBOX_HOME/big.l" &&
	cmp -s "$SANBOX_HOME/big.r" "$SANBOX_HOME/big.l" && remote cp "$R:l" "$SANBOX_HOME/l.r" &&
	[ "$(readlink "$SANBOX_HOME/l.r")" = d/one ] && ok "remote cp out: a file and a link" ||
	bad "remote cp" "$(remote cp "$R:big" "$SANBOX_HOME/big.x" 2>&1)"
out=$(remote fs cat "$R" /etc/../nope 2>&1); rc=$?
[ $rc = 3 ] && ok "remote fs cat of a missing path: exit 3" || bad "remote missing" "$rc $out"
off=$(remote admin append "$R" operator.note '{"text":"looked at it","by":"root"}' 2>&1)
remote events "$R" --json --type operator.note | python3 -c '
import json, sys
e = [json.loads(l) for l in sys.stdin if l.strip()]
sys.exit(0 if len(e) == 1 and e[0]["source"] == "operator" and e[0]["payload"]["by"] == "ci-bot" else 1)' &&
	ok "a remote note is recorded with the token's name" || bad "remote note" "$off"
remote admin append "$R" run.stopped '{"reason":"forged"}' >/dev/null 2>&1 &&
	bad "forged host event" "a token holder wrote run.stopped" || ok "a token holder cannot write the host's events"
"$SB" --remote "$url" --token "0000$token" --ca "$certs/server.pem" ps >/dev/null 2>"$SANBOX_HOME/e1"
grep -q "token" "$SANBOX_HOME/e1" && ok "wrong token refused" || bad "wrong token" "$(cat "$SANBOX_HOME/e1")"
"$SB" --remote "$url" --ca "$certs/server.pem" ps >/dev/null 2>&1
[ $? = 2 ] && ok "no token: usage error" || bad "no token" "wrong exit"
"$SB" --remote "$url" --token "$token" --ca "$certs/other.pem" ps >/dev/null 2>&1 &&
	bad "wrong CA" "connected to a server the CA did not sign" || ok "server not signed by the CA refused"
remote admin reproject >/dev/null 2>"$SANBOX_HOME/e2"
grep -q "local socket" "$SANBOX_HOME/e2" && ok "local-only operation refused remotely" ||
	bad "local-only" "$(cat "$SANBOX_HOME/e2")"

# exec and cp into a live run, and rm of it once ended, through the remote
# daemon: recorded with the token's name
X=$(remote run --detach --timeout 300s -- /bin/sh -c 'echo live > x.txt; sleep 300')
wait_event "$X" "e['type']=='agent.file.changed' and e['payload']['path']=='/workspace/x.txt'" 120 ||
	bad "remote live run" "it never wrote x.txt"
[ "$(remote exec "$X" -- cat x.txt 2>&1)" = live ] && ok "remote exec reads the live guest's file" ||
	bad "remote exec" "$(remote exec "$X" -- cat x.txt 2>&1)"
remote exec "$X" -- /bin/sh -c 'exit 7' >/dev/null 2>&1
[ $? = 7 ] && ok "remote exec exits with the command's status" || bad "remote exec status" "not 7"
mkdir -p "$SANBOX_HOME/in/sub" && echo from-afar >"$SANBOX_HOME/in/sub/f.txt"
remote cp -r "$SANBOX_HOME/in" "$X:in" >/dev/null 2>"$SANBOX_HOME/e3" &&
	[ "$(remote exec "$X" -- cat in/sub/f.txt 2>&1)" = from-afar ] &&
	ok "remote cp -r writes a directory into the live run" || bad "remote cp" "$(cat "$SANBOX_HOME/e3")"
has_event "$X" "e['type']=='operator.cp' and e['payload']['by']=='ci-bot'" &&
	has_event "$X" "e['type']=='operator.exec' and e['payload']['by']=='ci-bot'" &&
	ok "remote exec and cp are recorded with the token's name" || bad "remote records" "no operator.cp/exec by ci-bot"
out=$(remote rm "$X" 2>&1)
[ $? = 1 ] && ok "remote rm of the live run: refused" || bad "remote rm live" "$out"
remote stop --wait "$X" >/dev/null
case $(remote rm "$X" 2>&1) in "$X removed: "*) ok "remote rm of the ended run" ;; *) bad "remote rm" "$(remote rm "$X" 2>&1)" ;; esac
exit $((failures > 0))
