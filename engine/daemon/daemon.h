/* daemon.h - sanboxd: the loop, the log, the projections, the socket
 * servers, the API, the run manager and the model gateway, wired together.
 * One daemon per state directory (a pid file lock keeps it so).
 */
#ifndef SB_DAEMON_H
#define SB_DAEMON_H

#include <stddef.h>
#include <stdint.h>

struct sb_daemon;

struct sb_daemon_opts {
	const char *home;	/* state directory (resolved) */
	const char *listen;	/* NULL or tls+tcp://HOST:PORT */
	const char *cert, *key; /* PEM files for listen */
};

#define SB_DAEMON_DRAIN_S 20.0 /* how long stopping waits for runs to end */

/* Opens everything and takes up the runs a previous daemon left.
 * Errors: SB_ERR_EXISTS (another daemon runs here; detail has its pid),
 * SB_ERR_INVAL (a bad setting), SB_ERR_IO, SB_ERR_NOMEM, and the errors of
 * the parts. */
int sb_daemon_open(const struct sb_daemon_opts *o, struct sb_daemon **out);

/* Writes a one-line description of what d serves into buf. */
void sb_daemon_describe(const struct sb_daemon *d, char *buf, size_t cap);

/* Runs the loop until the daemon has stopped (a stop request, SIGTERM or
 * SIGINT, and its live runs ended). */
void sb_daemon_run(struct sb_daemon *d);

/* Closes everything (NULL is fine). A VM still running (the drain ran out)
 * is left to the next daemon, which takes it up. */
void sb_daemon_close(struct sb_daemon *d);

#endif
