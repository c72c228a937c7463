/* cmd_help.c - sanbox help: the commands and exit codes, or one command's
 * usage. */
#include <stdio.h>

#include "cli/cli.h"

int cmd_help(int argc, char **argv)
{
	const struct cli_cmd *c, *cmds;
	size_t n;
	int rc;

	if ((rc = cli_parse_opts(argc, argv, "help", NULL)) != CLI_GO_ON)
		return rc;
	if (argc - optind > 1)
		return cli_usage("help");
	if (argc - optind == 1) {
		if (!(c = cli_find(argv[optind])))
			return cli_no_command(argv[optind]);
		fputs(c->usage, stdout);
		return CLI_EXIT_OK;
	}
	printf("%s\n"
	       "Runs AI agents in isolated microVMs with budgets, policies and a full\n"
	       "event record. State lives in --home, $SANBOX_HOME or ~/.local/share/sanbox.\n\n"
	       "Commands:\n",
	       cli_global_usage);
	cmds = cli_commands(&n);
	for (size_t i = 0; i < n; i++)
		printf("  %-10s %s\n", cmds[i].name, cmds[i].summary);
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
