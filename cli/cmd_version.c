/* cmd_version.c - sanbox version: print the release. */
#include <stdio.h>

#include "cli/cli.h"
#include "engine/daemon/wire.h"

int cmd_version(int argc, char **argv)
{
	int json = 0, rc;

	if ((rc = cli_parse_opts(argc, argv, "version", &json)) != CLI_GO_ON)
		return rc;
	if (optind != argc)
		return cli_usage("version");
	if (json)
		cli_print_json(json_pack("{s:s}", "version", SB_VERSION));
	else
		printf("sanbox %s\n", SB_VERSION);
	return CLI_EXIT_OK;
}
