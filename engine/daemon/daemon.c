/* daemon.c - sanboxd's wiring: open, loop, close.
 *
 * Threads: the loop (the run manager, guest channels, timers, children),
 * the local socket server and the remote one (engine/daemon/sp.h), the
 * API's workers, a worker for the projections, a pool for blocking jobs,
 * and the gateway's connection threads.
 */
#include "engine/daemon/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "engine/daemon/api.h"
#include "engine/loop.h"
#include "engine/settings.h"
#include "engine/daemon/sp.h"
#include "engine/work.h"
#include "engine/error.h"
#include "engine/gateway/gateway.h"
#include "engine/gateway/stubs.h"
#include "engine/home.h"
#include "engine/log/log.h"
#include "engine/runs/runner.h"
#include "engine/runs/runs.h"
#include "engine/units.h"
#include "engine/daemon/wire.h"
#include "projections/projection.h"

#define API_THREADS 4
#define JOB_THREADS 4

struct sb_daemon {
	char home[PATH_MAX];
	struct sb_settings settings;
	sb_loop *loop;
	sb_log *log;
	sb_projector *proj;
	sb_work *apiw, *projw, *jobs; /* API requests, projections, blocking jobs */
	sb_sp *local, *remote;	      /* the socket servers */
	sb_api *api;
	struct sb_runs *runs;
	struct sb_local_runner local_runner;
	struct sb_runner runners[1]; /* the runners a run's plan may name */
	sb_net *net;   /* network acl */
	sb_work *netw; /* its blocking calls */
	sb_gateway *gateway;
	sb_stubs *stubs;
	sb_watch *sig_term, *sig_int, *stop_w;
	atomic_int stopping, proj_pending;
	int pid_fd;
	double started;
};

static void daemon_stop(struct sb_daemon *d);

/* The projections catch up on their own worker, never on the loop (each
 * catch-up is a synced commit). A commit that lands while one runs asks for
 * another. */
static void proj_job(void *ctx)
{
	struct sb_daemon *d = ctx;
	int rc;

	atomic_store(&d->proj_pending, 0);
	if ((rc = sb_projector_catch_up(d->proj, NULL)))
		fprintf(stderr, "sanboxd: projections: %s\n", sb_errmsg(rc));
}

/* Commit hook: publish each event in offset order, then have the
 * projections catch up. Runs on the committing thread. */
static void on_commit(void *ctx, const struct sb_event *evs, size_t n)
{
	struct sb_daemon *d = ctx;
	msgpack_sbuffer buf;
	msgpack_packer pk;

	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	for (size_t i = 0; d->local && i < n; i++) {
		buf.size = 0;
		msgpack_sbuffer_write(&buf, evs[i].run, strlen(evs[i].run));
		msgpack_sbuffer_write(&buf, "\n", 1);
		if (buf.data && sb_wire_pack_event(&pk, &evs[i]) == SB_OK)
			sb_sp_publish(d->local, buf.data, buf.size);
	}
	msgpack_sbuffer_destroy(&buf);
	if (d->projw && !atomic_exchange(&d->proj_pending, 1) &&
	    sb_work_submit(d->projw, proj_job, d))
		atomic_store(&d->proj_pending, 0);
}

/* A note from a gateway thread to the loop: a model call of run was
 * recorded, or run is to stop (its budget is spent, or a re-run departed
 * from its record). A note that cannot be allocated is lost: the gateway
 * still refuses the run's calls past its budget or record; only the stop
 * (then the run's timeout ends it) or the call's automatic snapshot is
 * missed. */
struct gateway_note {
	struct sb_post post;
	struct sb_daemon *d;
	char run[SB_RUN_MAX];
	const char *reason; /* static; NULL: a model call */
};

static void gateway_note_run(void *ctx)
{
	struct gateway_note *n = ctx;

	if (n->reason)
		sb_runs_stop(n->d->runs, n->run, n->reason, NULL, NULL); /* one that ended: fine */
	else
		sb_runs_model_call(n->d->runs, n->run);
	free(n);
}

/* Gateway thread: posts a note of run to the loop. */
static void gateway_note(struct sb_daemon *d, const char *run, const char *reason)
{
	struct gateway_note *n = malloc(sizeof *n);

	if (!n) {
		fprintf(stderr, "sanboxd: out of memory: the gateway's %s of run %s is lost\n",
			reason ? "stop" : "model call", run);
		return;
	}
	n->d = d;
	n->reason = reason;
	snprintf(n->run, sizeof n->run, "%s", run);
	sb_loop_post(d->loop, &n->post, gateway_note_run, n);
}

/* Gateway thread: a model call of run was recorded (a harness that
 * reports no turns gets its automatic snapshots after its calls). */
static void on_call(void *ctx, const char *run)
{
	gateway_note(ctx, run, NULL);
}

/* Gateway thread: a run whose policy is to stop has spent its budget. */
static void on_budget(void *ctx, const char *run)
{
	gateway_note(ctx, run, "budget");
}

/* Gateway thread: a re-run departed from its record. */
static void on_diverged(void *ctx, const char *run)
{
	gateway_note(ctx, run, "diverged");
}

static void on_drain_timeout(void *ctx)
{
	struct sb_daemon *d = ctx;

	sb_loop_break(d->loop);
}

/* Begins stopping (a stop request, SIGTERM or SIGINT): requests from now
 * on are refused, every live run is stopped (reason "daemon-stop": SIGTERM
 * to its harness, then its machine ends), and the loop ends once they all
 * have, or after SB_DAEMON_DRAIN_S. */
static void daemon_stop(struct sb_daemon *d)
{
	if (atomic_load(&d->stopping))
		return;
	atomic_store(&d->stopping, 1);
	if (!sb_runs_active(d->runs)) {
		sb_loop_break(d->loop);
		return;
	}
	sb_runs_stop_all(d->runs, "daemon-stop");
	/* NULL (out of memory): no deadline; the daemon ends once its runs
	 * have, each ended by force past its own grace */
	d->stop_w = sb_loop_timer(d->loop, SB_DAEMON_DRAIN_S, 0, on_drain_timeout, d);
}

static void on_signal(void *ctx)
{
	daemon_stop(ctx);
}

static void api_stop(void *ctx)
{
	daemon_stop(ctx);
}

/* The run manager has no live run left: a stopping daemon is done. */
static void runs_idle(void *ctx)
{
	struct sb_daemon *d = ctx;

	if (atomic_load(&d->stopping))
		sb_loop_break(d->loop);
}

static void runs_log(void *ctx, const char *line)
{
	(void)ctx;
	fprintf(stderr, "sanboxd: %s\n", line);
}

static int api_stopping(void *ctx)
{
	struct sb_daemon *d = ctx;

	return atomic_load(&d->stopping);
}

static void sp_log(void *ctx, const char *line)
{
	(void)ctx;
	fprintf(stderr, "sanboxd: %s\n", line);
}

static const struct sb_sp_ops sp_ops = {
    .request = sb_api_request,
    .authenticate = sb_api_authenticate,
    .log = sp_log,
};

/* Takes the pid file lock, so one daemon runs per state directory. */
static int lock_pidfile(struct sb_daemon *d)
{
	char path[PATH_MAX], buf[32];
	ssize_t n;
	int fd;

	sb_home_path(d->home, "sanboxd.pid", path, sizeof path);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	if (flock(fd, LOCK_EX | LOCK_NB)) {
		n = read(fd, buf, sizeof buf - 1);
		buf[n > 0 ? n : 0] = 0;
		close(fd);
		return sb_seterr(SB_ERR_EXISTS, "another sanboxd runs for %s (pid %d)",
				 d->home, atoi(buf));
	}
	if (ftruncate(fd, 0) == 0) {
		n = snprintf(buf, sizeof buf, "%d\n", (int)getpid());
		if (pwrite(fd, buf, (size_t)n, 0) != n)
			fprintf(stderr, "sanboxd: cannot write the pid file\n");
	}
	d->pid_fd = fd;
	return SB_OK;
}

/* Lets the daemon hold as many descriptors as the system allows it: its
 * connection limits are what bounds them, not the default soft limit. */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* The socket servers: the local one (api.sock, events.sock) and, with
 * o->listen, the remote one, each on its own thread. */
static int open_servers(struct sb_daemon *d, const struct sb_daemon_opts *o)
{
	const struct sb_settings *st = &d->settings;
	struct sb_sp_opts so = {0};
	msgpack_sbuffer deny;
	char path[PATH_MAX];
	int rc;

	so.name = "local";
	so.ops = &sp_ops;
	so.ctx = d->api;
	so.limits.max_conns = (unsigned)st->local_max_conns;
	so.limits.max_request = st->local_max_request;
	so.limits.max_inflight = (unsigned)st->local_max_inflight;
	so.limits.max_buffered = st->local_max_buffered;
	so.limits.handshake_s = st->local_handshake_s;
	so.limits.request_s = st->local_request_s;
	so.limits.idle_s = st->local_idle_s;
	if ((rc = sb_sp_open(&so, &d->local)))
		return rc;
	sb_home_path(d->home, "api.sock", path, sizeof path);
	if ((rc = sb_sp_listen_ipc(d->local, path, SB_SP_PROTO_REP)))
		return rc;
	sb_home_path(d->home, "events.sock", path, sizeof path);
	if ((rc = sb_sp_listen_ipc(d->local, path, SB_SP_PROTO_PUB)))
		return rc;
	if (!o->listen)
		return SB_OK;
	msgpack_sbuffer_init(&deny);
	sb_api_pack_denied(&deny);
	so.name = "remote";
	so.deny_reply = deny.data;
	so.deny_len = deny.size;
	so.limits.max_conns = (unsigned)st->remote_max_conns;
	so.limits.max_conns_per_peer = (unsigned)st->remote_max_conns_per_peer;
	so.limits.accept_rate = st->remote_accept_rate;
	so.limits.accept_burst = st->remote_accept_burst;
	so.limits.handshake_s = st->remote_handshake_s;
	so.limits.unauth_idle_s = st->remote_unauth_s;
	so.limits.idle_s = st->remote_idle_s;
	so.limits.preauth_max = st->remote_preauth_bytes;
	so.limits.max_request = st->remote_max_request;
	so.limits.max_denied = (unsigned)st->remote_max_denied;
	rc = deny.data ? sb_sp_open(&so, &d->remote) : SB_ERR_NOMEM;
	msgpack_sbuffer_destroy(&deny);
	if (rc)
		return rc;
	return sb_sp_listen_tls(d->remote, o->listen, o->cert, o->key);
}

/* The enforcer of network acl, from the net settings. */
static int net_open(struct sb_daemon *d)
{
	struct sb_net_config c = {0};
	const struct sb_settings *st = &d->settings;
	int rc;

	if ((rc = sb_work_open("net", 2, &d->netw)))
		return rc;
	c.home = d->home;
	c.loop = d->loop;
	c.work = d->netw;
	snprintf(c.resolver, sizeof c.resolver, "%s", st->net_resolver);
	snprintf(c.subnet4, sizeof c.subnet4, "%s", st->net_subnet4);
	snprintf(c.subnet6, sizeof c.subnet6, "%s", st->net_subnet6);
	c.ipv6 = st->net_ipv6 >= 1;
	c.private_answers = st->net_private_answers >= 1;
	c.ttl_min_s = (uint32_t)st->net_ttl_min_s;
	c.ttl_max_s = (uint32_t)st->net_ttl_max_s;
	c.report_s = st->net_report_s;
	return sb_net_open(&c, &d->net);
}

int sb_daemon_open(const struct sb_daemon_opts *o, struct sb_daemon **out)
{
	struct sb_daemon *d = calloc(1, sizeof *d);
	struct sb_gateway_opts gw = {0};
	struct sb_api_env env = {0};
	struct sb_runs_env re = {0};
	struct sb_log_upgrade up;
	char path[PATH_MAX];
	int rc;

	if (!d)
		return SB_ERR_NOMEM;
	d->pid_fd = -1;
	snprintf(d->home, sizeof d->home, "%s", o->home);
	signal(SIGPIPE, SIG_IGN);
	raise_nofile();
	if ((rc = sb_home_init(d->home)) || (rc = lock_pidfile(d)) ||
	    (rc = sb_settings_load(d->home, &d->settings)))
		goto fail;
	sb_home_path(d->home, "log", path, sizeof path);
	if ((rc = sb_log_open(path, 0, &d->log)))
		goto fail;
	if (sb_log_upgrade_get(d->log, &up))
		fprintf(
		    stderr,
		    "sanboxd: log upgraded from format %u to %u: %llu blobs re-keyed\n",
		    up.from, up.to, (unsigned long long)up.blobs);
	if ((rc = sb_projector_open(d->log, &d->proj)))
		goto fail;
	if ((rc = sb_loop_open(&d->loop)))
		goto fail;
	d->started = (double)sb_now_ms() / 1000;
	if ((rc = sb_work_open("api", API_THREADS, &d->apiw)) ||
	    (rc = sb_work_open("proj", 1, &d->projw)) ||
	    (rc = sb_work_open("jobs", JOB_THREADS, &d->jobs)))
		goto fail;
	gw.log = d->log;
	gw.max_conns = (unsigned)d->settings.gateway_max_conns;
	/* the gateway counts whole seconds */
	gw.header_timeout_s = (unsigned)ceil(d->settings.gateway_header_s);
	gw.body_timeout_s = (unsigned)ceil(d->settings.gateway_body_s);
	gw.on_budget = on_budget;
	gw.on_call = on_call;
	gw.on_diverged = on_diverged;
	gw.ctx = d;
	if ((rc = sb_gateway_open(&gw, &d->gateway)))
		goto fail;
	if ((rc = sb_stubs_open(&d->stubs)))
		goto fail;
	if ((rc = sb_projector_catch_up(d->proj, NULL)))
		goto fail;
	if ((rc = net_open(d)))
		goto fail;
	d->local_runner.home = d->home;
	d->local_runner.loop = d->loop;
	d->local_runner.warm = d->settings.warm_start >= 1;
	d->local_runner.net = d->net;
	d->local_runner.capacity_cpus = d->settings.capacity_cpus;
	d->local_runner.capacity_memory_mib = d->settings.capacity_memory_mib;
	re.home = d->home;
	re.settings = &d->settings;
	re.loop = d->loop;
	re.log = d->log;
	re.proj = d->proj;
	re.gateway = d->gateway;
	re.jobs = d->jobs;
	re.stubs = d->stubs;
	d->runners[0] = (struct sb_runner){"local", &sb_local_runner_ops, &d->local_runner};
	re.runners = d->runners;
	re.nrunners = sizeof d->runners / sizeof d->runners[0];
	re.net = d->net;
	re.idle = runs_idle;
	re.log_line = runs_log;
	re.ctx = d;
	if ((rc = sb_runs_open(&re, &d->runs)))
		goto fail;
	env.home = d->home;
	env.log = d->log;
	env.proj = d->proj;
	env.runs = d->runs;
	env.loop = d->loop;
	env.work = d->apiw;
	env.started = d->started;
	env.stop = api_stop;
	env.stopping = api_stopping;
	env.ctx = d;
	if ((rc = sb_api_open(&env, &d->api)) || (rc = open_servers(d, o)))
		goto fail;
	sb_api_set_servers(d->api, d->local, d->remote);
	sb_log_set_hook(d->log, on_commit, d);
	d->sig_term = sb_loop_signal(d->loop, SIGTERM, on_signal, d);
	d->sig_int = sb_loop_signal(d->loop, SIGINT, on_signal, d);
	if (!d->sig_term || !d->sig_int) {
		rc = SB_ERR_NOMEM;
		goto fail;
	}
	if ((rc = sb_sp_start(d->local)) || (d->remote && (rc = sb_sp_start(d->remote))))
		goto fail;
	*out = d;
	return SB_OK;
fail:
	sb_daemon_close(d);
	return rc;
}

void sb_daemon_run(struct sb_daemon *d)
{
	sb_loop_run(d->loop);
}

void sb_daemon_describe(const struct sb_daemon *d, char *buf, size_t cap)
{
	snprintf(buf, cap, "serving %s%s", d->home,
		 d->remote ? " (and remote clients)" : "");
}

void sb_daemon_close(struct sb_daemon *d)
{
	if (!d)
		return;
	atomic_store(&d->stopping, 1);
	/* no new requests; those being served finish (replies to the loop's
	 * ops that never ran are dropped with the servers) */
	sb_work_close(d->apiw);
	sb_work_close(d->jobs); /* runs being created finish their worker part */
	sb_runs_close(d->runs);
	sb_net_close(d->net); /* after the runs: their networks are left or deleted */
	sb_work_close(d->netw);
	sb_gateway_close(d->gateway); /* waits for calls in flight */
	sb_sp_close(d->remote);
	sb_sp_close(d->local);
	d->local = NULL;
	sb_api_close(d->api);
	sb_stubs_close(d->stubs);
	sb_watch_stop(d->sig_term);
	sb_watch_stop(d->sig_int);
	sb_watch_stop(d->stop_w);
	if (d->log)
		sb_log_set_hook(d->log, NULL, NULL);
	sb_work_close(d->projw);
	sb_projector_close(d->proj);
	sb_log_close(d->log);
	sb_loop_close(d->loop);
	if (d->pid_fd >= 0)
		close(d->pid_fd);
	free(d);
}
