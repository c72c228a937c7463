/* daemon.h - sanboxd: the loop, the log, the projections, the sockets and
 * the runs, wired together. One daemon per state directory.
 */
#ifndef SB_DAEMON_H
#define SB_DAEMON_H

#include <limits.h>
#include <msgpack.h>
#include <stdint.h>

#include <pthread.h>
#include <sys/types.h>

#include "engine/daemon/bus.h"
#include "engine/gateway/gateway.h"
#include "engine/log/log.h"
#include "engine/daemon/loop.h"
#include "projections/projection.h"

struct sb_runs;
struct sb_daemon;

/* The built-in model stub runs once per script directory in use. */
#define SB_STUBS_MAX 4
struct sb_stub_proc {
	struct sb_daemon *d;
	pid_t pid;                     /* 0 when not running */
	char script_dir[SB_URL_MAX];   /* "" for its own scripts */
	char url[SB_URL_MAX];
	sb_watch *child;
};

struct sb_daemon_opts {
	const char *home;        /* state directory (resolved) */
	const char *listen;      /* NULL or tls+tcp://HOST:PORT */
	const char *cert, *key;  /* PEM files for listen */
};

#define SB_DAEMON_DRAIN_S 20.0 /* how long stopping waits for runs to end */

struct sb_daemon {
	char home[PATH_MAX];
	sb_loop *loop;
	sb_log *log;
	sb_projector *proj;
	sb_bus *bus;
	struct sb_runs *runs;
	sb_gateway *gateway;
	sb_watch *req_watch, *proj_wake, *sig_term, *sig_int, *budget_wake, *stop_w;
	pthread_mutex_t budget_mu; /* guards budget_runs, filled by gateway threads */
	char (*budget_runs)[SB_RUN_MAX];
	size_t nbudget;
	struct sb_stub_proc stubs[SB_STUBS_MAX];
	int pid_fd;
	double started;
	int stopping;
};

/* Opens everything and reconciles state left by a previous daemon.
 * Errors: SB_ERR_EXISTS (another daemon runs here; detail has its pid),
 * SB_ERR_IO, SB_ERR_NOMEM, and the errors of the parts. */
int sb_daemon_open(const struct sb_daemon_opts *o, struct sb_daemon **out);

/* Runs the loop until a stop request or SIGTERM/SIGINT. */
void sb_daemon_run(struct sb_daemon *d);

/* Begins stopping (a stop request, SIGTERM or SIGINT): requests from now on
 * are refused, every live run is stopped (reason "daemon-stop": SIGTERM to
 * its harness, then its VM is ended), and the loop ends once they all have,
 * or after SB_DAEMON_DRAIN_S. */
void sb_daemon_stop(struct sb_daemon *d);

/* Closes everything (NULL is fine). A VM still running (the drain ran out)
 * is left to the next daemon, which ends it. */
void sb_daemon_close(struct sb_daemon *d);

/* Appends one host event for run and returns its offset in *offset (may be
 * NULL). payload is one msgpack map. Errors: those of sb_log_append. */
int sb_daemon_emit(struct sb_daemon *d, const char *run, const char *type,
		   enum sb_source src, const void *payload, size_t len, uint64_t *offset);

/* Writes the base URL of the built-in model stub with scripts from
 * script_dir ("" for its own) into url, starting that stub when it does not
 * run. Errors: SB_ERR_UNAVAIL (it cannot start: the detail says why),
 * SB_ERR_FULL (SB_STUBS_MAX script directories are in use). */
int sb_daemon_stub_url(struct sb_daemon *d, const char *script_dir, char url[SB_URL_MAX]);

/* Brings the projections up to the newest event. */
int sb_daemon_catch_up(struct sb_daemon *d);

/* Handles one control request and writes the reply into out.
 * remote: the request came over a remote listener (needs a token). */
void sb_api_handle(struct sb_daemon *d, const void *req, size_t len, int remote,
		   msgpack_sbuffer *out);

#endif
