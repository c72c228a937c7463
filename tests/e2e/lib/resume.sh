# resume.sh - checks that a resume with a new prompt continues a harness's
# own session. Sourced after vm.sh by the harness tests; they set $work.

# resume_continues NAME FIRST_PROMPT [RESUME OPTION...]: resumes run NAME
# with the prompt "now say done" (and the options given), then checks that
# it ended (exit 0), that run.resumed says the harness had a session to
# continue, and that the first model call after it, as the gateway sent it
# upstream (its request blob, read back from an export of the run), holds
# both FIRST_PROMPT and the new prompt: the stub saw the earlier messages.
resume_continues() {
	rs_name=$1 rs_first=$2
	shift 2
	"$SB" resume "$rs_name" --prompt "now say done" "$@" >"$work/$rs_name.resume" 2>&1
	rs_rc=$?
	rm -rf "$work/$rs_name.bundle"
	"$SB" export "$rs_name" --dir -o "$work/$rs_name.bundle" >"$work/$rs_name.export" 2>&1 ||
		{ bad "resume $rs_name" "export: $(tail -n 2 "$work/$rs_name.export")"; return 1; }
	[ $rs_rc = 0 ] && python3 - "$work/$rs_name.bundle" "$rs_first" <<'EOF' &&
import json, os, sys
bundle, first = sys.argv[1], sys.argv[2]
evs = [json.loads(l) for l in open(os.path.join(bundle, "events.jsonl")) if l.strip()]
res = [e for e in evs if e["type"] == "run.resumed"]
def need(c, what):
    if not c:
        print("resume:", what); sys.exit(1)
need(len(res) == 1 and res[0]["payload"]["session"] is True, "run.resumed %r" % res)
calls = [e for e in evs if e["type"] == "agent.message" and e["source"] == "gateway"
         and e["offset"] > res[0]["offset"]]
need(calls, "no model call after the resume")
body = open(os.path.join(bundle, "blobs", calls[0]["payload"]["request"]), "rb").read()
need(first.encode() in body and b"now say done" in body,
     "its first request holds %s the first prompt, %s the new one (%d bytes)" %
     ("" if first.encode() in body else "not", "" if b"now say done" in body else "not", len(body)))
EOF
		ok "resume --prompt continues its session: the stub saw the earlier messages" ||
		bad "resume $rs_name" "exit $rs_rc: $(tail -n 3 "$work/$rs_name.resume")"
}
