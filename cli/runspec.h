/* runspec.h - the run.create spec of one run (SPEC.md "Control API"), as
 * `sanbox run` makes it from its options and a group file (cli/groupfile.h)
 * from a run's fields: one struct and one packer, so that the same options
 * send the same map whichever way they were written. Nothing here prints,
 * connects or exits.
 */
#ifndef SB_CLI_RUNSPEC_H
#define SB_CLI_RUNSPEC_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/chan.h" /* SB_CHAN_INPUTS_MAX: the daemon and the agent check it too */

#define CLI_SPEC_LIST_MAX   64		 /* entries of each list (--env, --input, ...) */
#define CLI_SPEC_CPUS_MAX   64		 /* --cpu: 1 to this */
#define CLI_SPEC_QUOTA_MAX  (1ull << 40) /* --record-quota; the daemon's limit too */
#define CLI_SPEC_INPUTS_MAX SB_CHAN_INPUTS_MAX /* bytes of all inputs of a run */

/* A list of borrowed strings. */
struct cli_strs {
	const char *v[CLI_SPEC_LIST_MAX];
	int n;
};

/* What one run asks for; every string is borrowed (the caller keeps it
 * alive while the spec is used). NULL or 0: not given (the daemon's or the
 * template's default). */
struct cli_run_spec {
	const char *tmpl; /* never NULL: "shell" unless given */
	const char *name, *group, *accel, *on_budget, *net, *snapshots;
	const char *runner; /* the daemon's runner to run on (NULL: local) */
	uint64_t cpus, quota;	/* quota: record_quota's bytes */
	uint64_t mem, timeout;	/* MiB, seconds */
	uint64_t budget;	/* nano-USD of the run's own budget */
	uint64_t group_budget;	/* nano-USD the whole group shares (needs group) */
	struct cli_strs inputs; /* host paths; a run sees each under its base name */
	struct cli_strs env;	/* "K=V" */
	struct cli_strs secrets, allow;
	struct cli_strs models;	 /* the first is the run's model, the others it may use */
	const char *const *argv; /* the command (argc words), or argc 0: the prompt */
	int argc;
	const char *prompt; /* for the template's harness, when argc is 0 */
};

/* The checks of values the options take as they are: on_budget (stop or
 * continue), snapshots (turn, stop or off), an env entry ("K=V", K not
 * empty). Errors: SB_ERR_INVAL, the detail quoting the value. */
int cli_spec_check_on_budget(const char *s);
int cli_spec_check_snapshots(const char *s);
int cli_spec_check_env(const char *kv);

/* An input file, opened and checked (cli_input_open), or content held in
 * memory (data set, fd -1: an MCP client's). */
struct cli_input {
	const char *path; /* borrowed */
	const char *dest; /* its path in the run, under /workspace (borrowed);
			   * NULL: path's base name */
	const char *data; /* its content (borrowed), or NULL: read from fd */
	int fd;
	size_t size;
	unsigned mode;
};

/* Appends s (borrowed) to l. Errors: SB_ERR_TOOBIG (l holds
 * CLI_SPEC_LIST_MAX already). */
int cli_strs_add(struct cli_strs *l, const char *s);

/* Opens the input file at path into *in without blocking (a FIFO, a
 * terminal or a device never holds the caller up) and checks it is a
 * regular file; the caller closes in->fd. Errors: SB_ERR_NOTFOUND (no such
 * file), SB_ERR_INVAL (not a regular file: the detail says what it is),
 * SB_ERR_IO; the detail names path. */
int cli_input_open(const char *path, struct cli_input *in);

/* Opens the n inputs of paths into in (room for CLI_SPEC_LIST_MAX), every
 * one checked before the caller sends anything; the caller closes them
 * with cli_inputs_close(in, paths->n). On an error none is left open and
 * *at is the index of the path at fault. Errors: those of cli_input_open,
 * SB_ERR_TOOBIG (more than CLI_SPEC_INPUTS_MAX bytes in all). */
int cli_inputs_open(const struct cli_strs *paths, struct cli_input *in, int *at);

/* Closes the first n inputs of in (those read from a file). */
void cli_inputs_close(struct cli_input *in, int n);

/* Packs the spec map of s (the value of run.create's "spec") with pk (as
 * sb_mapw_begin's, engine/mpack.h), reading the contents of its inputs from
 * in (s->inputs.n of them, opened by cli_inputs_open). Errors: SB_ERR_IO
 * (an input shrank or failed to read), SB_ERR_NOMEM, those of sb_mapw_end;
 * pk's buffer then holds a partial map. */
int cli_spec_pack(msgpack_packer *pk, const struct cli_run_spec *s,
		  const struct cli_input *in);

#endif
