/* cmd_version.c - sanbox version: print the release. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/wire.h"

int cmd_version(int argc, char **argv)
{
	int json = argc == 2 && !strcmp(argv[1], "--json");

	if (argc > 1 && !json)
		return cli_usage("version");
	if (json)
		cli_print_json(json_pack("{s:s}", "version", SB_VERSION));
	else
		printf("sanbox %s\n", SB_VERSION);
	return 0;
}
