/* exit.c - the table of exit codes (see exit.h). */
#include "cli/exit.h"

#include "engine/error.h"

const struct cli_exit_info cli_exits[] = {
	{CLI_EXIT_OK, "ok", "success"},
	{CLI_EXIT_ERROR, "error", "the command failed"},
	{CLI_EXIT_USAGE, "usage", "bad options, operands or option values"},
	{CLI_EXIT_NOTFOUND, "not-found", "no such run, template, secret or file"},
	{CLI_EXIT_UNAVAIL, "unavailable",
	 "the daemon is not running or does not answer, or its host lacks what the "
	 "request needs"},
	{CLI_EXIT_DIFFERS, "differs",
	 "rerun: the re-run's outcome differs from its original's (rerun.compared)"},
	{CLI_EXIT_WAIT_TIMEOUT, "wait-timeout", "wait: its --timeout passed with runs still live"},
	{CLI_EXIT_BUDGET, "budget", "run: its LLM budget stopped the run"},
	{CLI_EXIT_TIMEOUT, "timeout", "run: its timeout stopped the run"},
	{CLI_EXIT_RUNFAIL, "run-failed", "run: the run failed (see its run.failed)"},
	{CLI_EXIT_DETACHED, "detached", "run, attach, wait, watch: Ctrl-C detached; the run goes on"},
	{CLI_EXIT_STOPPED, "stopped", "run: stopped before the harness exited"},
};
const size_t cli_nexits = sizeof cli_exits / sizeof cli_exits[0];

int cli_exit_for(int err)
{
	switch (err) {
	case SB_OK: return CLI_EXIT_OK;
	case SB_ERR_NOTFOUND: return CLI_EXIT_NOTFOUND;
	case SB_ERR_UNAVAIL: return CLI_EXIT_UNAVAIL;
	}
	return CLI_EXIT_ERROR;
}
