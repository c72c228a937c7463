/* cli.h - what the sanbox subcommands share: the command table, the
 * connection to the daemon (started on demand), requests and printing.
 *
 * Exit codes (SPEC.md): 0 success, 1 error, 2 usage, 3 not found,
 * 4 daemon unavailable; `sanbox run` exits with the harness's status, or 124
 * on timeout and 125 when the run failed.
 */
#ifndef SB_CLI_H
#define SB_CLI_H

#include <jansson.h>
#include <msgpack.h>
#include <signal.h>
#include <stdint.h>

#include "engine/daemon/bus.h"
#include "engine/client.h"
#include "engine/log/event.h"
#include "vmm/fsread.h"

#define EXIT_USAGE 2
#define EXIT_NOTFOUND 3
#define EXIT_UNAVAIL 4
#define EXIT_TIMEOUT 124
#define EXIT_RUNFAIL 125
#define EXIT_BUDGET 123

struct cli_cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
	const char *usage; /* full help text */
};

/* The command table (cli/main.c). */
const struct cli_cmd *cli_find(const char *name);

/* Global options, set by main before a command runs: the state directory,
 * and for a remote daemon its tls+tcp:// url, token and CA file (else NULL). */
extern char cli_home[4096];
extern const char *cli_remote, *cli_token, *cli_ca;

/* Points fo at the daemon in use (local or remote) with its token. */
void cli_follow_init(struct sb_follow_opts *fo);

/* Set when Ctrl-C ends a cli_follow_live follow; the run keeps going. */
extern volatile sig_atomic_t cli_detached;

/* Sets fo up (cli_follow_init) to follow run live until Ctrl-C, whose
 * handler it installs: Ctrl-C sets cli_detached and stops the follow. */
void cli_follow_live(struct sb_follow_opts *fo, const char *run);

/* Prints "sanbox: <msg>" on stderr and returns the exit code for err. */
int cli_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints the usage of cmd on stderr and returns EXIT_USAGE. */
int cli_usage(const char *cmd);

/* Returns 1 (and prints the command's help) when argv asks for --help. */
int cli_wants_help(int argc, char **argv, const char *cmd);

/* Connects to the daemon of cli_home, starting an embedded one when none
 * answers (unless autostart is 0). Errors: SB_ERR_UNAVAIL. */
int cli_connect(int autostart, sb_client **out);

/* A request under construction: call cli_req_begin(&r, op, nargs), pack
 * nargs key/value pairs with r.pk, then cli_call. */
struct cli_req {
	msgpack_sbuffer buf;
	msgpack_packer pk;
};
void cli_req_begin(struct cli_req *r, const char *op, size_t nargs);

/* Sends r (and frees it) and parses the reply into rep (freed by the
 * caller with sb_reply_free). */
int cli_call(sb_client *c, struct cli_req *r, struct sb_reply *rep);

/* Resolves a run id prefix or name into run. */
int cli_resolve(sb_client *c, const char *want, char run[SB_RUN_MAX]);

/* Prints one event: a JSON line when json, else "time type summary". */
void cli_print_event(const struct sb_event *ev, const msgpack_object *payload, int json);

/* Writes a one-line summary of an event into buf. */
void cli_event_summary(const struct sb_event *ev, const msgpack_object *payload, char *buf,
		       size_t cap);

/* Formats nano-USD as "$1.2345". */
void cli_usd(uint64_t nusd, char *buf, size_t cap);

/* Formats a duration in seconds as "4m08s" / "1h02m" / "12s". */
void cli_duration(double secs, char *buf, size_t cap);

/* Prints a JSON value on stdout with a newline and decrefs it. */
void cli_print_json(json_t *j);

/* Parses "10m", "90s", "2h", "1d" or a number of seconds.
 * Errors: SB_ERR_INVAL. */
int cli_parse_duration(const char *s, uint64_t *secs);

/* Parses "256M", "4G", "512" (MiB). Errors: SB_ERR_INVAL. */
int cli_parse_size_mib(const char *s, uint64_t *mib);

/* Parses "$1.50" or "1.5" into nano-USD. Errors: SB_ERR_INVAL. */
int cli_parse_usd(const char *s, uint64_t *nusd);

/* What fs and cp share (cli/cmd_fs.c). */

/* Writes the guest path of p into buf: absolute as given, else under
 * /workspace. */
void cli_guest_path(const char *p, char *buf, size_t cap);

/* Opens the disk of run want (an id prefix or a name) into *out, which
 * the caller closes with sb_fsread_close; returns 0, or prints the error
 * and returns its exit code. */
int cli_fs_open(const char *want, sb_fsread **out);

/* Prints the error rc of a disk read (its detail, escaped) and returns
 * its exit code: 3 for not found, else 1. */
int cli_fs_fail(int rc);

/* Prints why the entry at guest path is refused ("PATH is a directory",
 * "PATH is a symlink to TARGET", escaped, then why if not NULL) and
 * returns 1. */
int cli_fs_refuse(const char *path, const struct sb_fs_entry *e, const char *why);

/* Writes the regular file at path (relative: under /workspace) of run
 * want to standard output; returns an exit code. */
int cli_fs_cat(const char *want, const char *path);

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

#endif
