/* sanboxd - the Sanbox daemon. Usually started by the CLI on demand. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/daemon/daemon.h"
#include "engine/error.h"
#include "engine/home.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: sanboxd [--home DIR] [--listen tls+tcp://HOST:PORT --cert PEM --key PEM]\n"
		   "\n"
		   "Runs the Sanbox daemon for one state directory (default $SANBOX_HOME or\n"
		   "~/.local/share/sanbox). The CLI starts it by itself when none runs.\n"
		   "  --home DIR      state directory\n"
		   "  --listen URL    also accept remote clients over TLS (needs --cert, --key;\n"
		   "                  each request needs a token from 'sanbox admin token create')\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"home", required_argument, NULL, 'H'},  {"listen", required_argument, NULL, 'l'},
		{"cert", required_argument, NULL, 'c'},  {"key", required_argument, NULL, 'k'},
		{"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
	};
	struct sb_daemon_opts o = {0};
	struct sb_daemon *d;
	char home[4096], line[4200];
	const char *home_arg = NULL;
	int c, rc;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'H': home_arg = optarg; break;
		case 'l': o.listen = optarg; break;
		case 'c': o.cert = optarg; break;
		case 'k': o.key = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	if ((rc = sb_home_resolve(home_arg, home, sizeof home))) {
		fprintf(stderr, "sanboxd: %s\n", sb_errmsg(rc));
		return 1;
	}
	o.home = home;
	if ((rc = sb_daemon_open(&o, &d))) {
		fprintf(stderr, "sanboxd: %s\n", sb_errmsg(rc));
		return rc == SB_ERR_EXISTS ? 3 : 1;
	}
	sb_daemon_describe(d, line, sizeof line);
	fprintf(stderr, "sanboxd: %s\n", line);
	sb_daemon_run(d);
	sb_daemon_close(d);
	fprintf(stderr, "sanboxd: stopped\n");
	return 0;
}
