/* main.c - sanbox: the command table and global options. */
#include <getopt.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/home.h"

char cli_home[4096];
const char *cli_remote, *cli_token, *cli_ca;

static const struct cli_cmd commands[] = {
	{"run", cmd_run, "start a run in a new microVM",
	 "usage: sanbox run [-t TEMPLATE] [--cpu N] [--memory SIZE] [--timeout DURATION]\n"
	 "                  [--input PATH]... [--env K=V]... [--name NAME] [--group GROUP]\n"
	 "                  [-m MODEL]... [--budget USD] [--on-budget stop|continue]\n"
	 "                  [--secret NAME[:env|:model]]... [--net none|acl [--allow GRANT]...]\n"
	 "                  [--policy FILE]\n"
	 "                  [--record-quota SIZE] [--accel auto|kvm|tcg]\n"
	 "                  [--snapshots turn|stop|off] [--runner NAME] [--detach]\n"
	 "                  [--json] [-- COMMAND... | PROMPT]\n"
	 "\n"
	 "Resolves the run's template, limits, inputs, env, secrets, model and budget,\n"
	 "then starts it in its own microVM. With a COMMAND after --, runs it as the\n"
	 "harness; with a PROMPT (no --), runs the template's agent harness on it.\n"
	 "Without --detach, prints the run's events until it ends and exits with the\n"
	 "harness's status, or 123 if its budget stopped it, 124 on timeout, 125 if\n"
	 "the run failed, 143 if it was stopped first; Ctrl-C detaches (exit 130)\n"
	 "and the run goes on. With --detach, prints the run id and returns.\n"
	 "  -t, --template NAME   template (default: shell)\n"
	 "  --cpu N               vCPUs (default: the template's)\n"
	 "  --memory SIZE         guest memory, e.g. 256M, 1G\n"
	 "  --timeout DURATION    e.g. 90s, 10m, 8h; enforced by the host\n"
	 "  --input PATH          copy a regular file into /workspace (repeatable; 48 MiB\n"
	 "                        in all)\n"
	 "  --env K=V             environment for the harness (repeatable)\n"
	 "  -m, --model MODEL     the run's model (SANBOX_MODEL; default: the settings'\n"
	 "                        default_model); repeat to allow more models\n"
	 "  --budget USD          hard LLM budget, e.g. 0.50 (default: the settings')\n"
	 "  --on-budget POLICY    when it is spent: stop the run (default) or continue\n"
	 "                        without model access\n"
	 "  --secret NAME[:SCOPE] grant a secret: scope env (default: the harness gets\n"
	 "                        it as $NAME) or model (the gateway only)\n"
	 "  --net MODE            network: none (default: no network device; the model\n"
	 "                        is reached through the gateway only) or acl (a tap\n"
	 "                        that drops all but the grants; names resolve through\n"
	 "                        the host's stub, for granted names only)\n"
	 "  --allow GRANT         with --net acl: [tcp/|udp/]HOST:PORT[-PORT], HOST a\n"
	 "                        name (*.name: its subdomains), an address or CIDR\n"
	 "                        block, [IPv6] in brackets (repeatable; sanbox net\n"
	 "                        changes them while the run goes on)\n"
	 "  --policy FILE         a JSON file {\"network\": MODE, \"allow\": [GRANT...]}: its\n"
	 "                        network unless --net says one, its grants before\n"
	 "                        --allow's (the template's come first)\n"
	 "  --record-quota SIZE   bytes of output and events the guest may put in the\n"
	 "                        record, e.g. 64K, 10M (default: the settings'\n"
	 "                        runs.record_quota_mib); past it they are counted only\n"
	 "  --snapshots WHEN      disk snapshots: after each agent turn and when the run\n"
	 "                        ends (turn, the default), when it ends only (stop), or\n"
	 "                        none (off); 'sanbox snapshot' takes one any time\n"
	 "  --runner NAME         where its microVM runs: one of the daemon's runners\n"
	 "                        (default: local, this host); its forks and resumes\n"
	 "                        run there too\n"
	 "  --name NAME, --group GROUP   label the run (printable text: no control or\n"
	 "                        bidirectional characters, valid UTF-8)\n"
	 "  --detach              print the run id and return\n"},
	{"attach", cmd_attach, "print a run's events and follow it live",
	 "usage: sanbox attach RUN [--from OFFSET] [--exit-status] [--json]\n"
	 "\n"
	 "Prints the run's events from OFFSET (default: the start), then follows\n"
	 "live events with no gap and no duplicate. Ctrl-C detaches; the run goes\n"
	 "on. Ends when the run stops (at once for a run that has ended, whatever\n"
	 "OFFSET), with exit 0.\n"
	 "  --exit-status   exit as 'sanbox run' does: the harness's status, or\n"
	 "                  123, 124, 125 or 143 for a run the harness did not end,\n"
	 "                  130 when Ctrl-C detached\n"},
	{"replay", cmd_replay, "play a run's record again, with its timing",
	 "usage: sanbox replay RUN [--from OFFSET] [--speed N | --instant] [--json]\n"
	 "\n"
	 "Plays the run's record (its events up to now) as attach showed it live,\n"
	 "with the time between events as it was: a model call with its messages\n"
	 "(from the request and answer the gateway recorded; > the request's new\n"
	 "messages, < the answer), a changed file with a short unified diff of its\n"
	 "recorded content before and after (when both are in the record). A wait\n"
	 "longer than 2s is cut to 2s, and a line says so. On a terminal keys\n"
	 "steer it: space pauses and plays, n shows the next event (and pauses),\n"
	 "t jumps to the next turn, f to the next file change, q quits; the\n"
	 "terminal is restored however it ends. Piped: plain lines at once, no\n"
	 "keys, no waits unless --speed is given. Exits 0 at the record's end or\n"
	 "q, 130 on Ctrl-C, 3 when there is no such run.\n"
	 "  --from OFFSET   start at this offset (earlier file contents still\n"
	 "                  serve the diffs)\n"
	 "  --speed N       N times as fast (0.01 to 10000; waits also piped)\n"
	 "  --instant       no waits\n"
	 "  --json          a JSON line per event, as events --json, with\n"
	 "                  \"conversation\" ([{side, role, text}]) and \"diff\"\n"},
	{"exec", cmd_exec, "run a command in a live run's guest",
	 "usage: sanbox exec RUN [-i] [--timeout DURATION] [--output-max BYTES] [--json]\n"
	 "                  [--] COMMAND [ARG...]\n"
	 "\n"
	 "Runs COMMAND in RUN's guest beside its harness, through the guest agent:\n"
	 "in /workspace, with the harness's environment, its own session. Its\n"
	 "output is printed when it ends (not as it comes): stdout on stdout,\n"
	 "stderr on stderr, exact when piped, each line escaped on a terminal.\n"
	 "Recorded as operator.exec (argv, status, the output as blobs). Exits\n"
	 "with the command's status; 124 when --timeout ended it (its processes\n"
	 "killed), 1 when it could not start or RUN is not running, 3 when there\n"
	 "is no such run, 2 for bad options (also -t: no terminal is given).\n"
	 "  -i, --interactive     pass standard input (read whole first, at most\n"
	 "                        1 MiB); else the command's stdin is /dev/null\n"
	 "  --timeout DURATION    kill it after DURATION (default 10m, at most 24h)\n"
	 "  --output-max BYTES    keep at most BYTES of each stream (default 1 MiB,\n"
	 "                        at most 16 MiB); the rest is counted, not kept\n"
	 "  --json                the daemon's reply: status, signal, timed_out,\n"
	 "                        stdout and stderr (base64), their *_bytes, offset\n"},
	{"logs", cmd_logs, "print a run's output as lines",
	 "usage: sanbox logs RUN [-f] [--since DURATION] [--tail N] [--json]\n"
	 "\n"
	 "Prints what the run's harness wrote, reassembled into lines from the\n"
	 "record: its stdout on stdout, its stderr on stderr, each line escaped\n"
	 "(a line over 64 KiB in pieces; a last line without a newline too).\n"
	 "  -f, --follow          then print its lines as they come, until it ends\n"
	 "  --since DURATION      only what it wrote in the last DURATION (90s, 10m)\n"
	 "  --tail N              only its last N lines (before following)\n"
	 "  --json                one {ts, stream, line} per line, exact, on stdout\n"},
	{"events", cmd_events, "print events without following",
	 "usage: sanbox events RUN [--from OFFSET] [--to OFFSET] [--type TYPE]...\n"
	 "                         [--source SOURCE]... [--since WHEN] [--until WHEN]\n"
	 "                         [--tail N] [--follow] [--json]\n"
	 "       sanbox events --all [...the same options]\n"
	 "\n"
	 "Prints a run's events (or the whole log with --all, with a run column)\n"
	 "from OFFSET; an event of another day than today shows its date.\n"
	 "--type takes a type or a prefix (agent.tool matches agent.tool.*);\n"
	 "--source (host, guest, gateway, operator, harness) keeps those of the\n"
	 "sources named; --since and --until keep those recorded from and up to\n"
	 "WHEN: a DURATION ago (90s, 2h) or a time (2026-05-01T14:30[:00], local;\n"
	 "Z after it: UTC); --from and --to keep offsets in that range (both\n"
	 "included); --tail N the last N of those kept.\n"
	 "--follow then prints new events as they are recorded, with no gap and no\n"
	 "duplicate, until Ctrl-C (also after the run ends: see 'sanbox attach').\n"},
	{"ps", cmd_ps, "list runs",
	 "usage: sanbox ps [--group GROUP] [--filter KEY=VALUE]... [-q] [--no-trunc]\n"
	 "                 [--format FIELDS] [-a] [--json]\n"
	 "\n"
	 "Lists runs, newest first: id, name, status (exited N, running, budget,\n"
	 "timeout, failed, stopped, ...), age, elapsed time, cost, and the last\n"
	 "event (a failed run's reason instead); from 120 columns on also group,\n"
	 "template and model. The table fits the terminal's width (or $COLUMNS,\n"
	 "else 80): longer cells end in an ellipsis. Removed runs (sanbox rm) are\n"
	 "left out unless --all; their status reads removed.\n"
	 "  -a, --all            also the removed runs\n"
	 "  --filter KEY=VALUE   only runs with status=S, name=TEXT (a part of the\n"
	 "                       name), template=T or group=G (repeatable; all hold)\n"
	 "  -q, --quiet          print the ids only\n"
	 "  --no-trunc           cells whole, tab-separated\n"
	 "  --format FIELDS      print FIELDS (a comma-separated list of id, name,\n"
	 "                       group, template, model, status, age, elapsed, cost,\n"
	 "                       budget, last, offset, reason, progress: the latest\n"
	 "                       agent.progress, else turns and tools), tab-separated,\n"
	 "                       no header\n"
	 "  --json               the runs' state as the daemon keeps it\n"},
	{"watch", cmd_watch, "a live view of runs: a group, some runs or all",
	 "usage: sanbox watch [GROUP | RUN...] [--plain]\n"
	 "\n"
	 "Shows runs live: one row each with name, template/model, status, progress\n"
	 "(the agent's latest report, else its turns and tool calls), cost against\n"
	 "budget, tokens, elapsed time, network denials, the age of its newest\n"
	 "snapshot and its last offset; the totals above (a group's name, goal and\n"
	 "budget), the selected run's latest events below. GROUP: a group's runs,\n"
	 "also those created in it later; RUN...: those runs (ids, prefixes or\n"
	 "names); none: every run. The rows are read once, then kept up to date\n"
	 "from the daemon's live events (after a lost connection, from where they\n"
	 "stopped).\n"
	 "Keys: arrows or j/k move, / filters by name, Enter attaches (Ctrl-C comes\n"
	 "back), s stops (asks y/n), S takes a snapshot, f forks, r resumes a run\n"
	 "that ended, ? help, q quits; the runs go on.\n"
	 "Without a terminal (or with --plain) it prints a line per change instead,\n"
	 "'HH:MM:SS NAME STATUS PROGRESS COST/BUDGET', and when every run watched\n"
	 "has ended a totals line, then exits 0; Ctrl-C exits 130.\n"
	 "  --plain   lines, also on a terminal\n"},
	{"mcp", cmd_mcp, "serve the Model Context Protocol on stdio or HTTP (for MCP clients)",
	 "usage: sanbox mcp [--http HOST:PORT [--cert PEM --key PEM]]\n"
	 "\n"
	 "Serves the Model Context Protocol (JSON-RPC 2.0, one message a line) on\n"
	 "stdin and stdout, so an MCP client (Claude Code, Codex, an SDK) starts,\n"
	 "waits for and reads runs through tools: run_start, group_start,\n"
	 "runs_list, groups_list, events_read, wait, fs_read, fs_list, diff, stop,\n"
	 "snapshot, fork, resume; and resources sanbox://run/ID and\n"
	 "sanbox://run/ID/events (subscribable). Only protocol messages go to\n"
	 "stdout; logs go to stderr. With --remote, talks to that daemon (fs_read\n"
	 "and fs_list then refuse: a disk is read on its host).\n"
	 "  --http HOST:PORT  serve MCP's Streamable HTTP transport at /mcp\n"
	 "                    instead, until SIGINT or SIGTERM; each request\n"
	 "                    needs a daemon token (Authorization: Bearer T,\n"
	 "                    from 'sanbox admin token create'); plain HTTP on a\n"
	 "                    loopback address only\n"
	 "  --cert PEM --key PEM  TLS for --http (any address)\n"
	 "  claude mcp add sanbox -- sanbox mcp\n"
	 "  claude mcp add --transport http sanbox http://127.0.0.1:8080/mcp \\\n"
	 "      --header 'Authorization: Bearer T'\n"},
	{"inspect", cmd_inspect, "show a run's resolved settings and state",
	 "usage: sanbox inspect RUN [--json]\n"},
	{"group", cmd_group, "run a group file; list, inspect and stop groups",
	 "usage: sanbox group run FILE [--name NAME] [--watch | --detach | --json]\n"
	 "       sanbox group ls [--json]\n"
	 "       sanbox group inspect GROUP [--json]\n"
	 "       sanbox group stop GROUP\n"
	 "       sanbox group resume GROUP\n"
	 "       sanbox group fork GROUP [--name NAME] [--detach] [--json]\n"
	 "\n"
	 "run starts every run of a group file (YAML: the group's name, goal and\n"
	 "budget, defaults, and its runs with the options of 'sanbox run'; see\n"
	 "examples/acquisition.yaml). The whole file is checked first: an error\n"
	 "names its FILE:LINE:COL and field, and nothing starts. Runs that do not\n"
	 "fit their runner's capacity wait, queued, and start in the file's order. The\n"
	 "group's budget is shared: no call of its runs takes the group past it.\n"
	 "When the file's name is taken, the group is NAME-2 (NAME-3, ...); --name\n"
	 "gives it one (taken: an error). Then it waits for every run to end, a\n"
	 "line each, and exits as 'sanbox wait --group' does; --watch shows the\n"
	 "group live instead (sanbox watch GROUP; q leaves the runs running).\n"
	 "ls lists groups with their runs by status and their cost against their\n"
	 "budget; inspect shows one with its runs; stop stops its live runs;\n"
	 "resume resumes each of its ended runs from its last snapshot; fork forks\n"
	 "each of its runs from its newest snapshot into a new group (GROUP-fork,\n"
	 "else --name), with the same goal and budget, and waits as run does.\n"
	 "  --name NAME   the group's name instead of the file's\n"
	 "  --watch       the live view of the group ('sanbox watch GROUP')\n"
	 "  --detach      print the group and its runs' ids and return\n"},
	{"stop", cmd_stop, "stop a run",
	 "usage: sanbox stop [--wait] [--json] RUN...\n"
	 "       sanbox stop [--wait] [--json] --group GROUP\n"
	 "\n"
	 "Asks the harness to end (SIGTERM), then ends the VM after a grace period.\n"
	 "--group stops every live run of the group. Prints the runs it stops (with\n"
	 "--json: {\"runs\": [...]}, and \"group\" with --group). A run that has\n"
	 "ended already, like a group with no live run, is told and is no error.\n"
	 "  --wait   return once every run it stops has ended\n"},
	{"rm", cmd_rm, "remove runs that ended: free their disks and snapshots",
	 "usage: sanbox rm [--json] RUN...\n"
	 "\n"
	 "Removes each RUN (an id, a unique prefix or a name) that has ended: its\n"
	 "disk layers, snapshots (disk and memory) and other files are freed; its\n"
	 "record stays (events, inspect, diff and ps --all still read it), with a\n"
	 "run.removed event. A snapshot another run's disk is layered on (a fork's,\n"
	 "a resume's) is kept until the last such run is removed too. Prints what\n"
	 "each run freed (--json: {\"runs\": [{run, bytes, kept}], \"bytes\"}). A live\n"
	 "or queued run is refused (stop it first): exit 1; an unknown run exits 3.\n"
	 "Reading a removed run's disk (fs, cp), forking or resuming it is refused.\n"},
	{"prune", cmd_prune, "remove the runs that ended (or ended a while ago)",
	 "usage: sanbox prune [--older-than DURATION] [--dry-run] [--json]\n"
	 "\n"
	 "Removes, as 'sanbox rm' does, every run that has ended (with --older-than,\n"
	 "only those that ended more than DURATION ago: 90s, 2h, 7d), printing each\n"
	 "and the total freed. Live and queued runs are never touched.\n"
	 "  --older-than DURATION   only runs that ended more than DURATION ago\n"
	 "  --dry-run               print what would be removed and freed; remove\n"
	 "                          nothing (a snapshot kept for a fork that is\n"
	 "                          pruned too is not counted)\n"
	 "  --json                  {\"runs\": [{run, bytes, kept}], \"bytes\", \"dry_run\"}\n"},
	{"wait", cmd_wait, "wait until runs have ended",
	 "usage: sanbox wait [--timeout DURATION] [--json] RUN...\n"
	 "       sanbox wait [--timeout DURATION] [--json] --group GROUP\n"
	 "\n"
	 "Waits until every RUN (an id, a unique prefix or a name), or every run of\n"
	 "GROUP (those it has when wait starts), has ended, following the daemon's\n"
	 "live events (queued and resumed runs count as live). Prints 'RUN NAME\n"
	 "STATUS' for each run as it ends (at once for one that has ended); --json\n"
	 "instead prints at the end one {run, name, status, reason, exit_status,\n"
	 "exit} a line, in order. Exits 0 when every run exited 0, else with what\n"
	 "'sanbox run' would exit with for the first of them (in the order given;\n"
	 "a group's in the order they were created) that did not: its harness's\n"
	 "status, 123 budget, 124 timeout, 125 failed, 143 stopped. A run or group\n"
	 "that does not exist exits 3; Ctrl-C exits 130, the runs go on.\n"
	 "  --timeout DURATION   give up after DURATION (90s, 10m): one line names\n"
	 "                       the runs still live, exit 122 (the runs go on)\n"},
	{"snapshot", cmd_snapshot, "take or remove a snapshot of a run",
	 "usage: sanbox snapshot RUN [--memory] [--json]\n"
	 "       sanbox snapshot rm RUN ID [--json]\n"
	 "\n"
	 "Takes a snapshot of a running run: the guest writes its files out, then\n"
	 "its disk layer is frozen (constant time) and the run goes on in a new\n"
	 "one; --memory also saves the guest's memory and device state. Prints the\n"
	 "snapshot's id (sN). rm deletes a snapshot of a run that has ended, unless\n"
	 "another run (a fork) reads it: that is refused, naming the run.\n"},
	{"net", cmd_net, "change a live run's network grants",
	 "usage: sanbox net allow RUN GRANT... [--json]\n"
	 "       sanbox net deny RUN GRANT... [--json]\n"
	 "\n"
	 "Adds (allow) or removes (deny) grants of a running run with network acl, in\n"
	 "order, without a restart; each change is in effect when it is printed, and\n"
	 "recorded (net.grant.added, net.grant.removed). A grant is\n"
	 "[tcp/|udp/]HOST:PORT[-PORT] as for 'sanbox run --allow'; deny takes one\n"
	 "the run has, as it was given or in canonical form. Removing a grant also\n"
	 "ends the connections it let through. The first change refused stops the\n"
	 "command (exit 1, or 2 for a malformed grant); the ones before it stay made.\n"},
	{"snapshots", cmd_snapshots, "list a run's snapshots",
	 "usage: sanbox snapshots RUN [--json]\n"
	 "\n"
	 "Lists the run's snapshots, oldest first: id, kind (disk or memory), what\n"
	 "took it (demand, turn or end), the offset in the run's record it was\n"
	 "taken at, its time and size, and the runs that read it.\n"},
	{"fork", cmd_fork, "start new runs from a run's snapshot",
	 "usage: sanbox fork RUN [--snapshot ID | --at OFFSET] [-n COUNT] [--name NAME]\n"
	 "                  [--prompt TEXT] [--runner NAME] [--detach] [--json]\n"
	 "\n"
	 "Starts COUNT (default 1, at most 64) new runs with RUN's settings, each on\n"
	 "a new disk layer over the snapshot (constant time and space; over a copy\n"
	 "of it when it reads more than 16 layers), from the snapshot ID or the\n"
	 "newest one at or before OFFSET (default: RUN's newest; none: RUN's start),\n"
	 "with the files changed after it up to OFFSET rolled forward from the record.\n"
	 "RUN itself is left as it is. The harness starts again, on the snapshot's\n"
	 "files, with RUN's command or prompt (or --prompt); from a memory snapshot\n"
	 "(--snapshot ID) the guest's processes go on instead, in each fork with its\n"
	 "own machine id and randomness. With one fork and no\n"
	 "--detach, prints its events as 'sanbox run' does; else prints the ids.\n"
	 "The forks run on RUN's runner, which holds its snapshots; --runner NAME\n"
	 "naming another (or one the daemon has not) is refused.\n"},
	{"rerun", cmd_rerun, "run a run again, its model answered from its record",
	 "usage: sanbox rerun RUN [--at OFFSET] [--live-after-divergence] [--detach]\n"
	 "                    [--json]\n"
	 "\n"
	 "Starts a new run from RUN's start (its template, which must not have\n"
	 "changed, its inputs, env and command or prompt) whose k-th model call is\n"
	 "answered with RUN's k-th recorded answer, at no cost, as long as its\n"
	 "request is RUN's k-th (model, system, messages, tools). With --at, it\n"
	 "starts from RUN's state at OFFSET as 'fork --at' does, its calls are\n"
	 "answered by those RUN made after OFFSET, and its outcome is compared\n"
	 "with what RUN did after OFFSET (one past RUN's last event is refused).\n"
	 "The first call that differs is recorded as rerun.diverged with the first\n"
	 "differing field (e.g. messages[3].content); the re-run then stops (reason\n"
	 "diverged) or, with --live-after-divergence, goes on to the live model,\n"
	 "metered. Prints its events as 'sanbox run' does, then where it diverged,\n"
	 "if it did, and its outcome against RUN's (rerun.compared): exit statuses,\n"
	 "the files whose last recorded state differs, the tool calls. With --json,\n"
	 "a last line {\"rerun\", \"original\", \"diverged\", \"compared\"}. Exits\n"
	 "0 when the outcome is the same, 120 when it differs (else as 'sanbox\n"
	 "run').\n"},
	{"resume", cmd_resume, "continue a run that ended, from a snapshot",
	 "usage: sanbox resume RUN [--snapshot ID | --at OFFSET] [--prompt TEXT]\n"
	 "                    [--runner NAME] [--detach] [--json]\n"
	 "\n"
	 "Continues RUN (it keeps its id, its record and its budget) on a new disk\n"
	 "layer over the snapshot ID or the newest one at or before OFFSET (none:\n"
	 "its start; default: its last, taken when it ended). The harness starts\n"
	 "again with the run's command or prompt, or --prompt; from a memory snapshot\n"
	 "(--snapshot ID of one taken with 'snapshot --memory') the guest's\n"
	 "processes go on where they were instead. A run still running is refused\n"
	 "(fork it instead). With --at, the files changed after the snapshot and\n"
	 "up to OFFSET are rolled forward from the record first, never through a\n"
	 "link; what it lacks (a content over a cap) is named in run.resumed\n"
	 "(exact false). It runs on RUN's runner again; --runner NAME naming\n"
	 "another is refused.\n"},
	{"diff", cmd_diff, "list the files a run changed between two offsets",
	 "usage: sanbox diff RUN [--from OFFSET] [--to OFFSET] [--json]\n"
	 "\n"
	 "Lists the files RUN changed after offset --from (default 0) up to --to\n"
	 "(default the end), from the agent.file.changed events of its record, one\n"
	 "line each, sorted: A PATH (made), M PATH (changed), D PATH (deleted); a\n"
	 "file made and deleted in the range is not listed. A file whose content\n"
	 "is not in the record (over a cap) says so. --json: an array of {path,\n"
	 "status, offset (its last change), size, content (its blob key),\n"
	 "omitted}. 'sanbox fs cat RUN PATH --at OFFSET' prints a file as of then.\n"},
	{"daemon", cmd_daemon, "control the daemon",
	 "usage: sanbox daemon start|stop|status [--json]\n"
	 "\n"
	 "The CLI starts an embedded daemon by itself when none runs; these\n"
	 "commands control it explicitly. Its log is STATE_DIR/sanboxd.log.\n"
	 "stop first stops the live runs (reason daemon-stop), then the daemon.\n"
	 "status tells 'running' (it answers; exit 0) from 'not running' and\n"
	 "'running but not answering (pid N)' (a process holds STATE_DIR/sanboxd.pid\n"
	 "but health does not answer within 2 s; exit 4 for both). With --remote it\n"
	 "asks the remote daemon. --json: state, running, health's fields, and home\n"
	 "(the state directory) or, with --remote, url.\n"},
	{"admin", cmd_admin, "maintenance: reproject, tokens, append",
	 "usage: sanbox admin reproject [--json]\n"
	 "       sanbox admin token create [NAME] [--json]\n"
	 "       sanbox admin append [--json] RUN TYPE JSON\n"
	 "       sanbox admin key show|rotate [--json]\n"
	 "       sanbox admin checkpoint\n"
	 "\n"
	 "reproject     rebuild every projection from offset 0 (prints the checkpoint)\n"
	 "token create  make a bearer token for remote clients (printed once); NAME\n"
	 "              (letters, digits, . _ -) is who its requests are recorded as\n"
	 "append        append an operator event, e.g. operator.note {\"text\": \"...\"}\n"
	 "              (prints its offset)\n"
	 "key show      print the signing key of checkpoints as a verifier key (made on\n"
	 "              first use); rotate makes a new one (the old one is kept in\n"
	 "              audit.keys.old)\n"
	 "checkpoint    print a signed checkpoint of the log's Merkle tree\n"},
	{"export", cmd_export, "write a run's or a group's audit bundle",
	 "usage: sanbox export (RUN | --group G) [--redact TYPE|OFFSET]... [--prior OLDER]\n"
	 "                     -o FILE [--dir] [--json]\n"
	 "\n"
	 "A bundle (a tar, or with --dir a directory) of the runs' events, the blobs\n"
	 "they name, their plans, a signed checkpoint and one inclusion proof for all\n"
	 "the events (SPEC.md, Audit). --redact leaves out the payload of the events\n"
	 "of a type (or a prefix of types at a dot) or at an offset; their proofs still\n"
	 "check. --prior OLDER (an older bundle or checkpoint) adds a proof that this\n"
	 "checkpoint extends OLDER's. Reads this host's state directory.\n"},
	{"prove", cmd_prove, "write the proof of one event",
	 "usage: sanbox prove RUN OFFSET -o FILE [--dir] [--json]\n"
	 "\n"
	 "A bundle of one event that sanbox verify checks alone.\n"},
	{"verify", cmd_verify, "check an audit bundle offline",
	 "usage: sanbox verify BUNDLE [--key PUBKEY] [--prior OLDER] [--json]\n"
	 "\n"
	 "Checks the checkpoint's signature (by PUBKEY, as sanbox admin key show prints\n"
	 "it; else by the bundle's own key), every event line, the blobs, the proof,\n"
	 "that each run's events run from seq 1 without a gap, the counts and the\n"
	 "redactions; with --prior, that the checkpoint extends OLDER's. Names the\n"
	 "first file, line or proof that fails (exit 1).\n"},
	{"template", cmd_template, "build and list templates",
	 "usage: sanbox template build [--json] NAME\n"
	 "       sanbox template ls [--json]\n"
	 "\n"
	 "build  makes the guest kernel, initramfs and root file system of\n"
	 "       templates/NAME (fetching Debian's kernel into the cache once) and\n"
	 "       puts them, read-only and hashed, into the template store\n"
	 "       ($SANBOX_TEMPLATES or STATE_DIR/templates)\n"},
	{"fs", cmd_fs, "list or read files of a run's disk",
	 "usage: sanbox fs ls RUN [PATH] [--snapshot ID | --at OFFSET] [--json]\n"
	 "       sanbox fs cat RUN PATH [--snapshot ID | --at OFFSET]\n"
	 "\n"
	 "Reads the run's persistent disk offline (never modifying it; a running\n"
	 "run's guest writes its files out first, so its disk is read as the\n"
	 "guest has it at that moment). PATH is absolute in the\n"
	 "guest or relative to /workspace; symlinks on its way are followed inside\n"
	 "the guest, a symlink PATH itself never.\n"
	 "ls     lists every entry of a directory (or the entry PATH names), like\n"
	 "       ls -l, names and symlink targets escaped (\\\\, \\n, \\xNN, \\u{XXXX});\n"
	 "       --json gives exact names (name_base64 when not UTF-8)\n"
	 "cat    writes a regular file to standard output; a symlink, directory or\n"
	 "       special file is refused, saying what it is\n"
	 "--snapshot ID reads the run's snapshot ID instead of its current disk;\n"
	 "--at OFFSET its newest snapshot at or before that offset of its record\n"
	 "(none: the run's start, its template's disk with its own inputs);\n"
	 "cat then gives the file as the record has it at OFFSET (its content\n"
	 "recorded by a later change, or 'deleted'), ls lists /workspace as a\n"
	 "fork --at OFFSET would have it (the changes recorded after the snapshot\n"
	 "rolled forward); a file whose content the record lacks is marked\n"
	 "'(content not in the record)', \"content\": \"missing\" with --json\n"},
	{"cp", cmd_cp, "copy files out of a run's disk, or into a live run",
	 "usage: sanbox cp [--force] [--at OFFSET] RUN:PATH LOCAL\n"
	 "       sanbox cp -r RUN:DIR LOCAL\n"
	 "       sanbox cp [--at OFFSET] RUN:PATH -\n"
	 "       sanbox cp [-r] [--json] LOCAL RUN:PATH\n"
	 "\n"
	 "Out of a run: copies the regular file PATH of the run's disk (read as by\n"
	 "'sanbox fs') to LOCAL, or makes LOCAL a symlink with the same target as\n"
	 "the guest's symlink PATH (never following it). LOCAL is the path created:\n"
	 "if it exists, cp fails unless --force, which replaces it by a rename\n"
	 "(never writing through a symlink there). '-' writes the file to standard\n"
	 "output. -r copies the directory DIR with all in it to LOCAL, which must\n"
	 "not exist: files, symlinks (as links) and directories with their\n"
	 "permission bits; devices, FIFOs, sockets and names no local file can\n"
	 "have are left out (a note counts them), and what is copied before an\n"
	 "error stays. Works with --remote (the daemon reads the disk).\n"
	 "Into a live run: writes LOCAL (a file, a symlink as one, or with -r a\n"
	 "directory and all in it; at most 1024 entries and 48 MiB) at PATH of\n"
	 "the running guest through its agent, under /workspace only (PATH\n"
	 "absolute under /workspace or relative to it; '.' and '..' parts are\n"
	 "refused, exit 2), never through a link the guest has (such a path is\n"
	 "skipped: exit 1). PATH is the path created. Recorded as operator.cp with\n"
	 "each file's hash (its content as a blob); works with --remote.\n"
	 "A RUN:PATH operand has a ':' with no '/' before it (./a:b is local).\n"
	 "Exit: 0, 1 (not running, skipped, an error), 2 (usage), 3 (no such run\n"
	 "or LOCAL).\n"
	 "  -f, --force       replace an existing LOCAL\n"
	 "  -r, --recursive   copy a directory (out of a run, or into one)\n"
	 "  --at OFFSET       out of a run: its regular file PATH as the record has\n"
	 "                    it at OFFSET (as 'fs cat --at'), made mode 0666 less\n"
	 "                    the umask\n"
	 "  --json            the daemon's reply (files, bytes, offset)\n"},
	{"df", cmd_df, "show the space runs, snapshots, templates and the log take",
	 "usage: sanbox df [--json]\n"
	 "\n"
	 "Shows the disk space of the state directory by kind: runs (their\n"
	 "current disks and logs), snapshots (frozen disk layers), memory\n"
	 "snapshots, templates, the cache (warm images), blobs (recorded file\n"
	 "contents and model bodies) and the log (events, indexes, projections),\n"
	 "as allocated on disk. --json: the daemon's space reply (counts and\n"
	 "*_bytes).\n"},
	{"doctor", cmd_doctor, "check this host",
	 "usage: sanbox doctor [--json]\n"
	 "\n"
	 "Checks QEMU, the guest kernel and templates, KVM (or the TCG fallback),\n"
	 "nftables and CAP_NET_ADMIN, the model settings and the model stub, disk\n"
	 "space and the state directory, and says\n"
	 "in one line each what is wrong and how to fix it.\n"},
	{"secret", cmd_secret, "store secrets for runs (encrypted at rest)",
	 "usage: sanbox secret set NAME     (the value on standard input)\n"
	 "       sanbox secret ls [--json]\n"
	 "       sanbox secret rm NAME\n"
	 "\n"
	 "Secrets are kept encrypted in STATE_DIR/secrets; their values are never\n"
	 "printed, logged or written into a run's record, only their names. A run\n"
	 "gets a secret only when it names it: 'sanbox run --secret NAME' gives it to\n"
	 "the harness as the environment variable NAME (scope env); NAME:model lets\n"
	 "only the model gateway use it, as a provider key (it never enters the\n"
	 "guest). A provider's key (key_secret in models.json) is granted with scope\n"
	 "model to every run of its models. Names: letters, digits and _.\n"},
	{"help", cmd_help, "show help for a command",
	 "usage: sanbox help [COMMAND]\n"
	 "\n"
	 "Lists the commands and the exit codes, or shows a command's options\n"
	 "(as 'sanbox COMMAND --help' does).\n"},
	{"completion", cmd_completion, "print shell completion for bash or zsh",
	 "usage: sanbox completion bash|zsh\n"
	 "\n"
	 "Prints a script that completes sanbox's commands, options, run ids and\n"
	 "names, snapshot ids and templates (asking a running daemon; none is\n"
	 "started for it). Load it with:\n"
	 "  bash: source <(sanbox completion bash)   (or put it in\n"
	 "        /etc/bash_completion.d/sanbox)\n"
	 "  zsh:  source <(sanbox completion zsh)    (in ~/.zshrc)\n"},
	{"version", cmd_version, "print the version", "usage: sanbox version [--json]\n"},
};

const struct cli_cmd *cli_find(const char *name)
{
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (!strcmp(commands[i].name, name))
			return &commands[i];
	return NULL;
}

const struct cli_cmd *cli_commands(size_t *n)
{
	*n = sizeof commands / sizeof commands[0];
	return commands;
}

/* Prints that there is no command name, with the nearest one, and returns
 * CLI_EXIT_USAGE. */
static int no_command(const char *name)
{
	struct cli_suggest s;
	char hint[96];

	cli_suggest_init(&s, name);
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		cli_suggest_add(&s, commands[i].name, strlen(commands[i].name));
	return cli_fail_code(CLI_EXIT_USAGE, "no command '%s'%s (see 'sanbox help')", name,
			     cli_suggest_hint(&s, hint, sizeof hint));
}

static const char global_usage[] =
	"usage: sanbox [--home DIR] [--remote tls+tcp://HOST:PORT --token T --ca PEM]\n"
	"              COMMAND [ARGS]\n";

int cmd_help(int argc, char **argv)
{
	const struct cli_cmd *c;
	int rc;

	if ((rc = cli_parse_opts(argc, argv, "help", NULL)) != CLI_GO_ON)
		return rc;
	if (argc - optind > 1)
		return cli_usage("help");
	if (argc - optind == 1) {
		if (!(c = cli_find(argv[optind])))
			return no_command(argv[optind]);
		fputs(c->usage, stdout);
		return CLI_EXIT_OK;
	}
	printf("%s\n"
	       "Runs AI agents in isolated microVMs with budgets, policies and a full\n"
	       "event record. State lives in --home, $SANBOX_HOME or ~/.local/share/sanbox.\n\n"
	       "Commands:\n",
	       global_usage);
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		printf("  %-10s %s\n", commands[i].name, commands[i].summary);
	printf("\nExit codes ('run' without --detach exits with the harness's status,\n"
	       "0-255, unless one of its own codes below applies):\n");
	for (size_t i = 0; i < cli_nexits; i++)
		printf("  %3d  %-12s %s\n", cli_exits[i].code, cli_exits[i].name, cli_exits[i].meaning);
	printf("\nText output escapes control characters, bidirectional controls and\n"
	       "invalid UTF-8 (\\x1b, \\n, \\u{202e}, ...); --json output is exact.\n"
	       "--remote talks to a daemon started with --listen (token from 'sanbox admin\n"
	       "token create' there; env SANBOX_REMOTE, SANBOX_TOKEN, SANBOX_CA). doctor,\n"
	       "template and admin token work on this host only and refuse --remote\n"
	       "(exit 2); the other commands work remotely.\n"
	       "'sanbox help COMMAND' or 'sanbox COMMAND --help' shows a command's options.\n");
	return CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"home", required_argument, NULL, 'H'}, {"remote", required_argument, NULL, 'r'},
		{"token", required_argument, NULL, 'T'}, {"ca", required_argument, NULL, 'C'},
		CLI_OPT_HELP,                           {"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	const char *home = NULL;
	const struct cli_cmd *c;
	char *help_argv[] = {"help", NULL};
	int ch, rc;

	opterr = 0; /* the commands say what was wrong, in one line */
	/* cells are measured in terminal columns: wcwidth needs UTF-8 */
	setlocale(LC_CTYPE, "C.UTF-8");
	while ((ch = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'H': home = optarg; break;
		case 'r': cli_remote = optarg; break;
		case 'T': cli_token = optarg; break;
		case 'C': cli_ca = optarg; break;
		case 'h': optind = 0; return cmd_help(1, help_argv);
		case 'V': optind = 0; return cmd_version(1, (char *[]){"version", NULL});
		default:
			cli_note("%s '%s'%s (see 'sanbox help')", ch == ':' ? "option" : "unknown option",
				 argv[optind - 1], ch == ':' ? " needs a value" : "");
			fputs(global_usage, stderr);
			return CLI_EXIT_USAGE;
		}
	}
	if (!cli_remote && getenv("SANBOX_REMOTE") && *getenv("SANBOX_REMOTE"))
		cli_remote = getenv("SANBOX_REMOTE");
	if (!cli_token && getenv("SANBOX_TOKEN") && *getenv("SANBOX_TOKEN"))
		cli_token = getenv("SANBOX_TOKEN");
	if (!cli_ca && getenv("SANBOX_CA") && *getenv("SANBOX_CA"))
		cli_ca = getenv("SANBOX_CA");
	if (cli_remote && (!cli_token || !cli_ca))
		return cli_fail_code(CLI_EXIT_USAGE,
				     "--remote needs --token and --ca (or SANBOX_TOKEN, SANBOX_CA)");
	if (optind >= argc) {
		fputs(global_usage, stderr);
		fputs("(see 'sanbox help')\n", stderr);
		return CLI_EXIT_USAGE;
	}
	if ((rc = sb_home_resolve(home, cli_home, sizeof cli_home)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if (!strcmp(argv[optind], "__complete"))
		return cmd_complete(argc - optind, argv + optind);
	if (!(c = cli_find(argv[optind])))
		return no_command(argv[optind]);
	argc -= optind;
	argv += optind;
	optind = 0; /* each command parses its own options from its argv[1] */
	/* 'sanbox COMMAND --help' first: also for a command that parses no options */
	if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
		return cli_help(c->name);
	return c->fn(argc, argv);
}
