/* cli.h - what the sanbox subcommands share: the command table, option
 * parsing, the connection to the daemon (started on demand), requests and
 * printing. Exit codes are in cli/exit.h.
 *
 * Every text view prints untrusted text (guest output, paths, names,
 * groups, notes, the daemon's error details) through sb_text_escape, here
 * by cli_fail, cli_note, cli_cell and cli_print_event; --json output is
 * JSON-escaped only, and exact.
 */
#ifndef SB_CLI_H
#define SB_CLI_H

#include <getopt.h>
#include <jansson.h>
#include <msgpack.h>
#include <signal.h>
#include <stdint.h>

#include "cli/exit.h"
#include "cli/parse.h"
#include "engine/daemon/client.h"
#include "engine/daemon/bus.h"
#include "engine/log/event.h"
#include "engine/mpack.h"
#include "vmm/fsread.h"

/* A command as help, usage errors and completion describe it (cli/commands.c;
 * which function runs it is cli/main.c's). */
struct cli_cmd {
	const char *name;
	const char *summary;
	const char *usage; /* full help text */
};

/* The command named name, or NULL; static, valid as long as the program. */
const struct cli_cmd *cli_find(const char *name);

/* The whole command table (static), its length in *n. */
const struct cli_cmd *cli_commands(size_t *n);

/* The usage of the global options, before any command (static). */
extern const char cli_global_usage[];

/* Global options, set by main before a command runs (cli/globals.c): the
 * state directory, and for a remote daemon its tls+tcp:// url, token and
 * CA file (else NULL); the strings are main's argv's or the environment's. */
extern char cli_home[4096];
extern const char *cli_remote, *cli_token, *cli_ca;

/* Sets each of cli_remote, cli_token and cli_ca still NULL from
 * SANBOX_REMOTE, SANBOX_TOKEN and SANBOX_CA when those are set and not
 * empty. */
void cli_globals_from_env(void);

/* Points fo at the daemon in use (local or remote) with its token. */
void cli_follow_init(struct sb_follow_opts *fo);

/* Set when Ctrl-C ends a cli_follow_live follow; the run keeps going. */
extern volatile sig_atomic_t cli_detached;

/* Sets fo up (cli_follow_init) to follow run live until Ctrl-C, whose
 * handler it installs: Ctrl-C sets cli_detached and stops the follow. */
void cli_follow_live(struct sb_follow_opts *fo, const char *run);

/* Prints "sanbox: <msg>" on stderr, escaped (one line whatever the
 * message quotes), and returns the exit code for err (cli_exit_for). */
int cli_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* With --remote, prints that what (a command) works on this host's state
 * directory only and returns CLI_EXIT_USAGE; else CLI_EXIT_OK. */
int cli_local_only(const char *what);

/* The exit code for the error err of a request made from the user's
 * options: CLI_EXIT_USAGE for SB_ERR_INVAL and SB_ERR_SCHEMA (a value the
 * daemon refused), else cli_exit_for's. */
int cli_exit_for_request(int err);

/* Prints err's detail (escaped) and returns cli_exit_for_request(err). */
int cli_fail_request(int err);

/* As cli_fail, but returns code: cli_fail_code(CLI_EXIT_USAGE, ...) for a
 * bad option value. */
int cli_fail_code(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "sanbox: <msg>" on stderr, escaped, for what is not an error. */
void cli_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints the usage of cmd on stderr and returns CLI_EXIT_USAGE. */
int cli_usage(const char *cmd);

/* Prints the usage of cmd on stdout (its --help) and returns CLI_EXIT_OK. */
int cli_help(const char *cmd);

/* Prints that there is no command name, with the nearest one ("did you
 * mean"), and returns CLI_EXIT_USAGE. */
int cli_no_command(const char *name);

/* After getopt_long returned ch ('?' or ':') for argv of cmd: prints one line
 * naming the option ("sanbox: run: option '--cpu' needs a value"), then
 * the usage, and returns CLI_EXIT_USAGE. Option strings start with ':'
 * so that a missing value is told apart. */
int cli_badopt(const char *cmd, char **argv, int ch);

/* The options every command takes: --help (-h). */
#define CLI_OPT_HELP                                                                     \
	{                                                                                \
		"help", no_argument, NULL, 'h'                                           \
	}

/* What cli_parse_opts returns when the command goes on. */
#define CLI_GO_ON (-1)

/* Parses argv of cmd (argv[0] is cmd) for a command whose only options
 * are --help and, when json is not NULL, --json (sets *json). Returns
 * CLI_GO_ON with optind at the first operand, or the exit code to end
 * with: CLI_EXIT_OK after printing the help, CLI_EXIT_USAGE after a bad
 * option (both printed). */
int cli_parse_opts(int argc, char **argv, const char *cmd, int *json);

/* A subcommand ("daemon status"): its operands after the name, whether it
 * takes --json, and the function that does it (operands in args). */
struct cli_sub {
	const char *name;
	int nargs; /* operands it takes */
	int more;  /* ... and up to this many more, optional */
	int json;
	int (*fn)(char **args, int json);
};

/* Runs the subcommand argv names (argv[0] is cmd) from the table subs of
 * n entries, after parsing --help and --json with cli_parse_opts; a
 * missing or unknown subcommand, a wrong number of operands or --json
 * where it is not taken prints the usage. Returns the exit code. */
int cli_sub_run(int argc, char **argv, const char *cmd, const struct cli_sub *subs,
		size_t n);

/* Parses the value s of option opt as a decimal number from min to max
 * into *out; else prints one line and returns CLI_EXIT_USAGE. Returns
 * CLI_EXIT_OK when it is one. */
int cli_parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max,
		  uint64_t *out);

/* Checks the value s of option opt ("--name") is a printable name
 * (sb_text_check); else prints one line and returns CLI_EXIT_USAGE.
 * Returns CLI_EXIT_OK when it is. */
int cli_check_name(const char *opt, const char *s);

/* Writes text esc, escaped already (sb_text_escape's output, an event
 * summary), into buf as cli_cell does, without escaping it again. */
void cli_fit(const char *esc, int width, char *buf, size_t cap);

/* Writes s escaped (sb_text_escape) into buf as a table cell of width
 * terminal columns (wide characters take two): cut with an ellipsis when
 * longer (never in an escape or a character), padded with spaces when
 * shorter; width 0: neither cut nor padded (but for cap). */
void cli_cell(const char *s, int width, char *buf, size_t cap);

/* The terminal's width: stdout's, else $COLUMNS (over 20), else 80. */
int cli_term_width(void);

/* The terminal columns s takes once escaped, as cli_cell counts them. */
size_t cli_text_cols(const char *s);

/* ---- the daemon: finding, starting, connecting (cli/connect.c) ---- */

/* Connects to the daemon in use: the remote one, else that of cli_home,
 * starting an embedded one when none runs (unless autostart is 0). A
 * process that holds STATE_DIR/sanboxd.pid but does not answer is never
 * joined by a second daemon. Errors: SB_ERR_UNAVAIL (detail names the pid
 * of a daemon that does not answer, and the log), SB_ERR_DENIED. */
int cli_connect(int autostart, sb_client **out);

/* The local daemon as cli_daemon_find sees it. */
enum cli_daemon {
	CLI_DAEMON_ABSENT,  /* no live process holds the pid file lock */
	CLI_DAEMON_ANSWERS, /* health answered */
	CLI_DAEMON_SILENT,  /* a live process holds the lock; health did not answer */
};

/* Looks for the daemon of cli_home: asks health, for up to wait_ms while a
 * live process holds the pid file lock (a stopped one, SIGSTOP, is not
 * waited for); a holder that is exiting (a zombie, or its threads ending
 * after SIGKILL) is waited for up to 2 s, then counts as absent. Sets *out
 * to the connection (the caller closes it) when it answers, and *pid to
 * the holder's pid when one was found (else 0). */
enum cli_daemon cli_daemon_find(int wait_ms, sb_client **out, int *pid);

/* How long cli_connect waits for a daemon that is starting to answer. */
#define CLI_START_WAIT_MS 10000

/* Records the error for a daemon, pid (0: not known), that holds the pid
 * file lock but does not answer, naming its pid and its log, and returns
 * SB_ERR_UNAVAIL. */
int cli_daemon_silent(int pid);

/* Waits up to ms for no process to hold the pid file lock of cli_home (a
 * daemon holds it until its process has ended). Returns 1 once it is
 * free, 0 when it is still held. */
int cli_daemon_wait_gone(int ms);

/* A request under construction: call cli_req_begin(&r, op), pack its
 * arguments into r.m (engine/mpack.h), then cli_call. r must not move in
 * between; a request given up is freed with msgpack_sbuffer_destroy(&r.buf). */
struct cli_req {
	msgpack_sbuffer buf;
	sb_mapw m;   /* the request map, "op" and "token" packed */
	char op[32]; /* for the wait line of a slow call */
};
void cli_req_begin(struct cli_req *r, const char *op);

/* Ends r's map, sends r (and frees it) and parses the reply into rep
 * (freed by the caller with sb_reply_free). Errors: those of sb_mapw_end,
 * sb_request's. */
int cli_call(sb_client *c, struct cli_req *r, struct sb_reply *rep);

/* As cli_call, waiting up to timeout_ms for the reply, with no waiting
 * line (a call that is slow by nature: a command that runs). */
int cli_call_ms(sb_client *c, struct cli_req *r, int timeout_ms, struct sb_reply *rep);

/* Reads run's first event of type into *rep (freed by the caller with
 * sb_reply_free, on error too); *ev points at it (its map: offset, ts,
 * payload, ...), or is NULL when run has none. Errors: those of cli_call. */
int cli_first_event(sb_client *c, const char *run, const char *type, struct sb_reply *rep,
		    const msgpack_object **ev);

/* Resolves a run id prefix or name into run. */
int cli_resolve(sb_client *c, const char *want, char run[SB_RUN_MAX]);

/* How cli_print_event prints. */
#define CLI_EV_JSON 1 /* a JSON line */
#define CLI_EV_RUN 2  /* the run's id after the offset (text) */

/* Prints one event: a JSON line with CLI_EV_JSON, else its text line
 * (cli_event_line). */
void cli_print_event(const struct sb_event *ev, const msgpack_object *payload, int flags);

/* Writes the text line of one event into buf, with no newline: "time
 * offset [run] type summary" with the summary of engine/log/summary.h
 * (the time as HH:MM:SS.mmm, with the date before it when it is not
 * today's; the run with CLI_EV_RUN), every part escaped. */
void cli_event_line(const struct sb_event *ev, const msgpack_object *payload, int flags,
		    char *buf, size_t cap);

/* Formats a duration in seconds as "4m08s" / "1h02m" / "12s". */
void cli_duration(double secs, char *buf, size_t cap);

/* Formats an age as docker shows it, in one unit: "45s", "12m", "3h",
 * "5d". */
void cli_age(double secs, char *buf, size_t cap);

/* Prints a JSON value on stdout with a newline and decrefs it. */
void cli_print_json(json_t *j);

/* Prints a daemon's reply map as JSON, without its "ok" (for --json). */
void cli_print_reply(const msgpack_object *reply);

/* Parses option opt's value s into a time (ns since the epoch): a
 * DURATION (90s, 2h) is that long ago, YYYY-MM-DD[THH:MM[:SS]] that local
 * time (with Z after it: UTC). Returns an exit code: CLI_EXIT_USAGE
 * (printed) for a bad one. */
int cli_parse_when(const char *opt, const char *s, uint64_t *ns);

/* cli_parse_when for --since. */
int cli_parse_since(const char *s, uint64_t *since_ns);

/* Reads run's state (run.get) into rep (freed by the caller with
 * sb_reply_free); *live is 1 while the run is created, queued or running.
 * Errors: those of the call. */
int cli_run_get(sb_client *c, const char *run, struct sb_reply *rep, int *live);

struct sb_runstate;

/* Writes what rs's agent did on one line into buf, not escaped: its latest
 * progress ("18/40 reports checked"), else its completed turns and tool
 * calls ("3 turns, 7 tools"), else "-". */
void cli_progress(const struct sb_runstate *rs, char *buf, size_t cap);

/* Writes a size of b bytes into buf: "512 B", "1.5 KiB", "3.2 GiB". */
void cli_size(unsigned long long b, char *buf, size_t cap);

/* Writes rs's status into buf as ps shows it: "removed" for a run
 * removed, "exited N" for a run whose harness exited, else the status
 * ("running", "timeout", ...). */
void cli_status(const struct sb_runstate *rs, char *buf, size_t cap);

/* Seconds run rs has been (or was) going: its ended segments, and the one
 * going on since its last run.started. */
double cli_run_elapsed(const struct sb_runstate *rs);

/* What fs and cp share (cli/cmd_fs.c). */

/* Writes the guest path of p into buf: absolute as given, else under
 * /workspace. */
void cli_guest_path(const char *p, char *buf, size_t cap);

/* Which disk of a run fs reads: its current one (both unset), its
 * snapshot sN, or its newest snapshot at or before offset at. */
struct cli_fs_at {
	const char *snapshot;
	uint64_t at;
	/* set by cli_fs_open when it opens a snapshot: */
	char run[SB_RUN_MAX];
	char snap_id[72];     /* the snapshot's id, "sN" ("start": see start) */
	uint64_t snap_offset; /* the offset the snapshot was taken at (0: start) */
	int start; /* no snapshot at or before at: the run's start is read, its
		    * template's root file system with its own inputs */
};

/* A run's recorded file changes and blobs, read through the daemon
 * (cli/record.c). */

/* One recorded agent.file.changed (borrowed during the callback). */
struct cli_file_change {
	uint64_t offset;
	const char *path, *kind; /* kind: created, modified, deleted */
	uint64_t size;
	const char *content; /* the content's blob key, "omitted" or NULL */
	const char *omitted; /* why it was left out, or NULL */
	int link;	     /* a symbolic link (content: its target) */
	uint64_t ts_ns;	     /* when it was recorded */
};

/* Calls cb for each agent.file.changed of run in (from, to], in order,
 * until cb returns non-zero (returned). Errors: those of the call. */
int cli_file_changes(sb_client *c, const char *run, uint64_t from, uint64_t to,
		     int (*cb)(void *ctx, const struct cli_file_change *ch), void *ctx);

/* Writes the content of blob key (64 hex digits) to fd. Errors: those of
 * blob.get, SB_ERR_IO. */
int cli_blob_write(sb_client *c, const char *key, int fd);

/* Reads the content of blob key into *data (NUL-terminated besides, the
 * caller frees) and its length into *len. Errors: those of blob.get,
 * SB_ERR_NOMEM. */
int cli_blob_read(sb_client *c, const char *key, char **data, size_t *len);

/* The files run changed in (from, to], as `diff --json` prints them: an
 * array of {path, status (A, M, D), offset, size, content?, omitted?} by
 * path (*out, the caller's; cli/cmd_diff.c). Errors: those of the calls,
 * SB_ERR_NOMEM. */
int cli_diff_json(sb_client *c, const char *run, uint64_t from, uint64_t to, json_t **out);

/* A run's disk read through the daemon (cli/disk.c): fs.stat, fs.list,
 * fs.read, so that it reads alike with --remote. */
typedef struct cli_disk cli_disk;

/* A handle on run's disk (snapshot sN, or NULL: its current disk) over
 * connection c, which it takes (cli_disk_close closes it). Errors:
 * SB_ERR_NOMEM (c then still the caller's). */
int cli_disk_open(sb_client *c, const char *run, const char *snapshot, cli_disk **out);

/* Closes d and its connection (NULL is fine). */
void cli_disk_close(cli_disk *d);

/* d's connection, for other calls while d is open. */
sb_client *cli_disk_client(cli_disk *d);

/* As sb_fsread_stat: the entry at guest path path, its strings valid
 * until the next call on d. Errors: those of fs.stat (sb_fsread_stat's),
 * of the call, SB_ERR_PROTO. */
int cli_disk_stat(cli_disk *d, const char *path, struct sb_fs_entry *out);

/* As sb_fsread_list: fn for every entry of the directory path, in pages
 * of fs.list. Errors: those of fs.list, SB_ERR_INVAL (not a directory),
 * fn's. */
int cli_disk_list(cli_disk *d, const char *path, sb_fsread_entry_fn fn, void *ctx);

/* As sb_fsread_read: the regular file path's bytes to fn, in fs.read
 * chunks. Errors: those of fs.read, fn's, SB_ERR_PROTO. */
int cli_disk_read(cli_disk *d, const char *path, sb_fsread_chunk_fn fn, void *ctx);

/* cli_disk_read into fd. Errors: those of cli_disk_read, SB_ERR_IO. */
int cli_disk_read_fd(cli_disk *d, const char *path, int fd);

/* Picks run's snapshot sel->snapshot, or its newest one at or before
 * sel->at (none: its start, sel->start set), into sel (snap_id,
 * snap_offset, run), through snapshots.list on c. Errors: the call's,
 * SB_ERR_NOTFOUND (no snapshot sel->snapshot). */
int cli_fs_pick(sb_client *c, const char *run, struct cli_fs_at *sel);

/* Opens the disk of run want (an id prefix or a name) chosen by sel (NULL:
 * its current one; a running run's guest syncs first) into *out, which the
 * caller closes with cli_disk_close; returns 0, or prints the error and
 * returns its exit code. */
int cli_fs_open(const char *want, struct cli_fs_at *sel, cli_disk **out);

/* Prints the error rc of a disk read (its detail, escaped) and returns
 * its exit code: 3 for not found, else 1. */
int cli_fs_fail(int rc);

/* Prints why the entry at guest path is refused ("PATH is a directory",
 * "PATH is a symlink to TARGET", escaped, then why if not NULL) and
 * returns 1. */
int cli_fs_refuse(const char *path, const struct sb_fs_entry *e, const char *why);

/* An entry as `fs ls --json` prints it: {name, type, mode, uid, gid, size,
 * mtime, target (symlinks)}, a name or target that is not UTF-8 also as
 * name_base64 / target_base64. A new reference, or NULL. */
json_t *cli_fs_json(const struct sb_fs_entry *e);

struct sb_roll;

/* A listing fs ls prints: each entry with its name and target owned. */
struct cli_fs_ent {
	struct sb_fs_entry e; /* name and target: the two below */
	char *name, *target;
	int missing; /* the record lacks the content it had at the offset */
};

struct cli_fs_list {
	struct cli_fs_ent *v;
	size_t n, cap;
};

/* Puts a copy of e in l, replacing an entry of the same name. Errors:
 * SB_ERR_NOMEM (l unchanged). */
int cli_fs_list_put(struct cli_fs_list *l, const struct sb_fs_entry *e);

/* cli_fs_list_put as an sb_fsread_entry_fn (ctx: the listing). */
int cli_fs_list_add(const struct sb_fs_entry *e, void *ctx);

/* Sorts l by the names' raw bytes. */
void cli_fs_list_sort(struct cli_fs_list *l);

/* Frees what l holds and empties it. */
void cli_fs_list_free(struct cli_fs_list *l);

/* Puts the inputs run was started with (its run.policy.resolved) in p's
 * inputs (p->ninputs of them; the caller frees p->inputs), and when they
 * were recorded (seconds since the epoch) in *ts. Errors: those of the
 * call, SB_ERR_CORRUPT (no such event, or a malformed input),
 * SB_ERR_NOMEM. */
struct sb_plan;
int cli_run_inputs(sb_client *c, const char *run, struct sb_plan *p, int64_t *ts);

/* Lists guest path gp (under /workspace: a directory's entries, else the
 * entry itself) as it was at sel->at into l: snapshot f's (the one
 * cli_fs_open opened for sel), with the file changes of sel->run recorded
 * after sel->snap_offset, up to sel->at, rolled forward as a fork --at
 * would have them (engine/runs/roll.c); a file whose content the record
 * lacks there is listed with missing set. roll gets what the roll-forward
 * omits. The caller frees l, also on error. Errors: SB_ERR_INVAL (gp not
 * under /workspace), SB_ERR_NOTFOUND, those of the calls and reads,
 * SB_ERR_NOMEM (cli/fsroll.c). */
int cli_fs_list_at(cli_disk *f, const struct cli_fs_at *sel, const char *gp,
		   struct cli_fs_list *l, struct sb_roll *roll);

/* Where the content of guest path gp at sel->at is, sel chosen and opened
 * as cli_fs_open does (cli/fsroll.c). */
enum cli_at_kind {
	CLI_AT_DISK,	/* on the disk opened for sel (nothing after it says more) */
	CLI_AT_BLOB,	/* a regular file whose content is blob key */
	CLI_AT_LINK,	/* a symbolic link whose target is blob key */
	CLI_AT_DELETED, /* deleted at offset */
	CLI_AT_OMITTED	/* changed at offset, its content not in the record (why):
			 * the nearest there is is blob key when key is set (one
			 * of the run's inputs), else the disk's */
};
struct cli_at_file {
	enum cli_at_kind kind;
	uint64_t offset; /* the recorded change's (0: one of the run's inputs) */
	char key[72];	 /* BLOB, LINK: 64 hex digits */
	char why[64];	 /* OMITTED */
};

/* Finds in out what gp held at sel->at, when sel->at is past the opened
 * snapshot (else CLI_AT_DISK): its last change recorded after the snapshot
 * and up to sel->at, else, when sel reads the run's start, the input the
 * run started with at that path. Errors: those of the calls (through c),
 * SB_ERR_CORRUPT, SB_ERR_NOMEM. */
int cli_fs_at_file(sb_client *c, const struct cli_fs_at *sel, const char *gp,
		   struct cli_at_file *out);

/* Copies local (a file, a symlink, or with recurse a directory and all in
 * it, never following a link) into live run run as guest (under
 * /workspace: the path created), through run.put; prints the reply with
 * json. Returns an exit code (cli/cpin.c). */
int cli_cp_in(const char *local, const char *run, const char *guest, int recurse, int json);

/* Writes the regular file at path (relative: under /workspace) of run
 * want to fd (standard output for fs cat) as sel chooses (NULL: its
 * current disk; at: rolled forward from the record); returns an exit
 * code. */
int cli_fs_cat(const char *want, struct cli_fs_at *sel, const char *path, int fd);

/* Prints run's events from offset from until it stops (a run.stopped
 * after offset resumed, its last run.resumed); Ctrl-C detaches. Returns,
 * when status is set, the exit code its end means as 'sanbox run' does
 * (CLI_EXIT_DETACHED when detached), else 0; an error's code either way
 * (cli/cmd_run.c). */
int cli_run_follow(sb_client *c, const char *run, uint64_t from, uint64_t resumed, int json,
		   int status);

/* The exit code the end of run means, as cli_run_follow's, from its
 * run.get map rs (status, reason, exit_status, has_exit) of a run that has
 * ended; prints the line a failure or a budget stop gets. */
int cli_run_exit_of(const char *run, const msgpack_object *rs);

/* The exit code the end of rs (the state of a run that has ended) means,
 * as cli_run_exit_of's; with say, prints the line cli_run_exit_of does. */
int cli_run_exit_state(const struct sb_runstate *rs, int say);

/* The commands, one per file cli/cmd_<name>.c. */
int cmd_attach(int argc, char **argv);
int cmd_events(int argc, char **argv);
int cmd_ps(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_stop(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_daemon(int argc, char **argv);
int cmd_admin(int argc, char **argv);
int cmd_help(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_fs(int argc, char **argv);
int cmd_cp(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_secret(int argc, char **argv);
int cmd_version(int argc, char **argv);
int cmd_snapshot(int argc, char **argv);
int cmd_snapshots(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_fork(int argc, char **argv);
int cmd_rerun(int argc, char **argv);
int cmd_resume(int argc, char **argv);
int cmd_net(int argc, char **argv);
int cmd_logs(int argc, char **argv);
int cmd_completion(int argc, char **argv);
int cmd_df(int argc, char **argv);
int cmd_group(int argc, char **argv);
struct cli_group;
/* Sends group.create for group file g under the name name (cmd_group.c;
 * also the MCP server's group_start); *rep holds the answer, to free with
 * sb_reply_free. Errors: those of cli_group_pack_create and cli_call. */
int cli_group_create(sb_client *c, const struct cli_group *g, const char *name,
		     struct sb_reply *rep);
int cmd_wait(int argc, char **argv);
/* For waiters (cmd_wait.c; the MCP server's wait): folds ev (p: its
 * payload) into the state among runs[0..n) of the run it belongs to, when
 * it is past that state's last_offset, keeping *live (how many are live)
 * true. Returns that state when ev ended the run, else NULL. */
struct sb_runstate *cli_wait_fold(struct sb_runstate *runs, size_t n, size_t *live,
				  const struct sb_event *ev, const msgpack_object *p);
int cmd_watch(int argc, char **argv);
/* Removes run want (run.rm; dry: only says what it would free), adds
 * what it freed to *total and prints it: a line, or an item of list when
 * list is not NULL. With keep_busy, a run the daemon may not remove now
 * (STATE: it is live again, or a live run continues it) is kept with a
 * note, not an error. Returns 0, or the exit code of its error (printed). */
int cli_rm_one(sb_client *c, const char *want, int dry, int keep_busy, json_t *list,
	       unsigned long long *total);

int cmd_rm(int argc, char **argv);
int cmd_prune(int argc, char **argv);
int cmd_mcp(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_prove(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_exec(int argc, char **argv);
int cmd_replay(int argc, char **argv);
/* sanbox __complete WHAT [ARG]: the candidates the completion script asks
 * for (commands, options CMD, runs, templates, snapshots RUN), one a line;
 * not listed in help. */
int cmd_complete(int argc, char **argv);

#endif
