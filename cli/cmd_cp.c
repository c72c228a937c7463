/* cmd_cp.c - sanbox cp RUN:PATH LOCAL: copy a file out of a run's disk. */
#include <string.h>

#include "cli/cli.h"

int cmd_cp(int argc, char **argv)
{
	char want[128];
	const char *colon;

	if (argc != 3 || !(colon = strchr(argv[1], ':')) || colon == argv[1] ||
	    (size_t)(colon - argv[1]) >= sizeof want || !colon[1])
		return cli_usage("cp");
	memcpy(want, argv[1], (size_t)(colon - argv[1]));
	want[colon - argv[1]] = 0;
	return cli_copy_out(want, colon + 1, argv[2]);
}
