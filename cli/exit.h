/* exit.h - the exit codes of sanbox, defined once: the enum the commands
 * return, and a table of their names and meanings that 'sanbox help'
 * prints and SPEC.md ("CLI") lists.
 */
#ifndef SB_CLI_EXIT_H
#define SB_CLI_EXIT_H

#include <stddef.h>

enum cli_exit {
	CLI_EXIT_OK = 0,
	CLI_EXIT_ERROR = 1,    /* anything else that failed */
	CLI_EXIT_USAGE = 2,    /* bad options, operands or option values */
	CLI_EXIT_NOTFOUND = 3, /* no such run, template, secret or file */
	CLI_EXIT_UNAVAIL = 4,  /* the daemon is not running or does not answer, or
				* its host lacks what the request needs */
	/* sanbox run (without --detach) exits with the harness's status,
	 * 0-255, or with one of these when the harness did not end it (wait
	 * too, for the first run that did not exit 0): */
	CLI_EXIT_DIFFERS = 120, /* rerun: its outcome differs from the original's */
	CLI_EXIT_WAIT_TIMEOUT = 122, /* wait: its --timeout passed, runs still live */
	CLI_EXIT_BUDGET = 123,  /* the run's LLM budget stopped it */
	CLI_EXIT_TIMEOUT = 124, /* its timeout stopped it */
	CLI_EXIT_RUNFAIL = 125, /* it failed (run.failed) */
	CLI_EXIT_DETACHED = 130, /* Ctrl-C detached; the run goes on */
	CLI_EXIT_STOPPED = 143, /* it was stopped before the harness exited */
};

struct cli_exit_info {
	int code;
	const char *name;    /* "usage" */
	const char *meaning; /* "bad options, operands or option values" */
};

/* The table of every exit code, in increasing order, and its length. */
extern const struct cli_exit_info cli_exits[];
extern const size_t cli_nexits;

/* Returns the exit code for an SB_ERR_* error: CLI_EXIT_NOTFOUND,
 * CLI_EXIT_UNAVAIL, else CLI_EXIT_ERROR. */
int cli_exit_for(int err);

#endif
