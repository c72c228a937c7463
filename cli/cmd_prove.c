/* cmd_prove.c - sanbox prove: one event's proof, a bundle of one event. */
#include <stdio.h>

#include "cli/audit.h"
#include "cli/cli.h"

int cmd_prove(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_OPT_HELP,
		{"dir", no_argument, NULL, 'd'},
		{"json", no_argument, NULL, 'j'},
		{"output", required_argument, NULL, 'o'},
		{NULL, 0, NULL, 0},
	};
	const char *out = NULL;
	uint64_t off;
	int ch, dir = 0, json = 0, rc;

	while ((ch = getopt_long(argc, argv, ":ho:", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("prove");
		case 'd': dir = 1; break;
		case 'j': json = 1; break;
		case 'o': out = optarg; break;
		default: return cli_badopt("prove", argv, ch);
		}
	}
	if (!out || argc - optind != 2)
		return cli_usage("prove");
	if ((rc = cli_parse_u64("OFFSET", argv[optind + 1], 1, UINT64_MAX, &off)))
		return rc;
	return cli_export_run(argv[optind], NULL, NULL, 0, off, NULL, out, dir, json);
}
