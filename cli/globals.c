/* globals.c - the global options every command reads: the state directory
 * and the daemon to talk to. */
#include <stdlib.h>

#include "cli/cli.h"

char cli_home[4096];
const char *cli_remote, *cli_token, *cli_ca;

/* The value of the environment variable name, or NULL when it is unset or
 * empty. */
static const char *env_value(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

void cli_globals_from_env(void)
{
	if (!cli_remote)
		cli_remote = env_value("SANBOX_REMOTE");
	if (!cli_token)
		cli_token = env_value("SANBOX_TOKEN");
	if (!cli_ca)
		cli_ca = env_value("SANBOX_CA");
}
