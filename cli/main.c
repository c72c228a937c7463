/* main.c - sanbox: parses the global options and runs the command named.
 * The commands' texts are in commands.c; this table says which function
 * runs each (as git's git.c beside its command list), so that what prints
 * help and completion never calls the commands. */
#include <getopt.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/home.h"

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
} runs[] = {
	{"run", cmd_run},
	{"attach", cmd_attach},
	{"replay", cmd_replay},
	{"exec", cmd_exec},
	{"logs", cmd_logs},
	{"events", cmd_events},
	{"ps", cmd_ps},
	{"watch", cmd_watch},
	{"mcp", cmd_mcp},
	{"inspect", cmd_inspect},
	{"group", cmd_group},
	{"stop", cmd_stop},
	{"rm", cmd_rm},
	{"prune", cmd_prune},
	{"wait", cmd_wait},
	{"snapshot", cmd_snapshot},
	{"net", cmd_net},
	{"snapshots", cmd_snapshots},
	{"fork", cmd_fork},
	{"rerun", cmd_rerun},
	{"resume", cmd_resume},
	{"diff", cmd_diff},
	{"daemon", cmd_daemon},
	{"admin", cmd_admin},
	{"export", cmd_export},
	{"prove", cmd_prove},
	{"verify", cmd_verify},
	{"template", cmd_template},
	{"fs", cmd_fs},
	{"cp", cmd_cp},
	{"df", cmd_df},
	{"doctor", cmd_doctor},
	{"secret", cmd_secret},
	{"help", cmd_help},
	{"completion", cmd_completion},
	{"version", cmd_version},
};

/* The function that runs the command name (one of commands.c's), or NULL. */
static int (*command_fn(const char *name))(int, char **)
{
	for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++)
		if (!strcmp(runs[i].name, name))
			return runs[i].fn;
	return NULL;
}

/* Parses the global options before the command into cli_home, cli_remote,
 * cli_token and cli_ca (then the environment's); returns CLI_GO_ON, or the
 * exit code when main is done (help, version or an error, printed). */
static int parse_globals(int argc, char **argv)
{
	static const struct option opts[] = {
		{"home", required_argument, NULL, 'H'}, {"remote", required_argument, NULL, 'r'},
		{"token", required_argument, NULL, 'T'}, {"ca", required_argument, NULL, 'C'},
		CLI_OPT_HELP,                           {"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	const char *home = NULL;
	int ch, rc;

	while ((ch = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'H': home = optarg; break;
		case 'r': cli_remote = optarg; break;
		case 'T': cli_token = optarg; break;
		case 'C': cli_ca = optarg; break;
		case 'h': optind = 0; return cmd_help(1, (char *[]){"help", NULL});
		case 'V': optind = 0; return cmd_version(1, (char *[]){"version", NULL});
		default:
			cli_note("%s '%s'%s (see 'sanbox help')", ch == ':' ? "option" : "unknown option",
				 argv[optind - 1], ch == ':' ? " needs a value" : "");
			fputs(cli_global_usage, stderr);
			return CLI_EXIT_USAGE;
		}
	}
	cli_globals_from_env();
	if (cli_remote && (!cli_token || !cli_ca))
		return cli_fail_code(CLI_EXIT_USAGE,
				     "--remote needs --token and --ca (or SANBOX_TOKEN, SANBOX_CA)");
	if (optind >= argc) {
		fputs(cli_global_usage, stderr);
		fputs("(see 'sanbox help')\n", stderr);
		return CLI_EXIT_USAGE;
	}
	if ((rc = sb_home_resolve(home, cli_home, sizeof cli_home)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	return CLI_GO_ON;
}

int main(int argc, char **argv)
{
	const struct cli_cmd *c;
	int (*fn)(int, char **);
	int rc;

	opterr = 0; /* the commands say what was wrong, in one line */
	/* cells are measured in terminal columns: wcwidth needs UTF-8 */
	setlocale(LC_CTYPE, "C.UTF-8");
	if ((rc = parse_globals(argc, argv)) != CLI_GO_ON)
		return rc;
	if (!strcmp(argv[optind], "__complete"))
		return cmd_complete(argc - optind, argv + optind);
	if (!(c = cli_find(argv[optind])) || !(fn = command_fn(c->name)))
		return cli_no_command(argv[optind]);
	argc -= optind;
	argv += optind;
	optind = 0; /* each command parses its own options from its argv[1] */
	/* 'sanbox COMMAND --help' first: also for a command that parses no options */
	if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
		return cli_help(c->name);
	return fn(argc, argv);
}
