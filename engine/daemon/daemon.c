/* daemon.c - sanboxd's wiring: open, loop, close. */
#include "engine/daemon/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/home.h"
#include "engine/runs/runs.h"
#include "engine/wire.h"

/* Commit hook: publish each event in offset order, then ask the loop to
 * catch the projections up. Runs on the committing thread. */
static void on_commit(void *ctx, const struct sb_event *evs, size_t n)
{
	struct sb_daemon *d = ctx;
	msgpack_sbuffer buf;
	msgpack_packer pk;

	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	for (size_t i = 0; i < n; i++) {
		buf.size = 0;
		if (sb_wire_pack_event(&buf, &pk, &evs[i]) == SB_OK)
			sb_bus_publish(d->bus, evs[i].run, buf.data, buf.size);
	}
	msgpack_sbuffer_destroy(&buf);
	if (d->proj_wake)
		sb_watch_wake(d->proj_wake);
}

int sb_daemon_catch_up(struct sb_daemon *d)
{
	int rc = sb_projector_catch_up(d->proj, NULL);

	if (rc)
		fprintf(stderr, "sanboxd: projections: %s\n", sb_errmsg(rc));
	return rc;
}

static void on_proj_wake(void *ctx)
{
	sb_daemon_catch_up(ctx);
}

int sb_daemon_emit(struct sb_daemon *d, const char *run, const char *type, enum sb_source src,
		   const void *payload, size_t len, uint64_t *offset)
{
	struct sb_event ev;
	int rc;

	if ((rc = sb_event_init(&ev, type, run, src, payload, len)) ||
	    (rc = sb_log_append(d->log, &ev, 1)))
		return rc;
	if (offset)
		*offset = ev.offset;
	return SB_OK;
}

static void on_request(void *ctx, int revents)
{
	struct sb_daemon *d = ctx;
	msgpack_sbuffer out;
	void *req;
	size_t len;
	int remote, rc;

	msgpack_sbuffer_init(&out);
	while ((rc = sb_bus_request_next(d->bus, &req, &len, &remote)) != SB_END) {
		out.size = 0;
		if (rc == SB_OK && d->stopping)
			sb_wire_error(&out, SB_ERR_UNAVAIL, "sanboxd is stopping");
		else if (rc == SB_OK)
			sb_api_handle(d, req, len, remote, &out);
		else
			sb_wire_error(&out, rc, sb_errmsg(rc));
		sb_bus_free(rc == SB_OK ? req : NULL);
		if (!out.data)
			sb_wire_error(&out, SB_ERR_NOMEM, "out of memory");
		sb_bus_reply(d->bus, out.data, out.size);
	}
	msgpack_sbuffer_destroy(&out);
}

/* Gateway thread: a run whose policy is to stop has spent its budget. The
 * run manager lives on the loop, so the run is queued and the loop woken. */
static void on_budget(void *ctx, const char *run)
{
	struct sb_daemon *d = ctx;
	char(*q)[SB_RUN_MAX];

	pthread_mutex_lock(&d->budget_mu);
	q = realloc(d->budget_runs, (d->nbudget + 1) * sizeof *q);
	if (q) {
		d->budget_runs = q;
		snprintf(q[d->nbudget++], SB_RUN_MAX, "%s", run);
	}
	pthread_mutex_unlock(&d->budget_mu);
	sb_watch_wake(d->budget_wake);
}

static void on_budget_wake(void *ctx)
{
	struct sb_daemon *d = ctx;
	char(*q)[SB_RUN_MAX];
	size_t n;

	pthread_mutex_lock(&d->budget_mu);
	q = d->budget_runs;
	n = d->nbudget;
	d->budget_runs = NULL;
	d->nbudget = 0;
	pthread_mutex_unlock(&d->budget_mu);
	for (size_t i = 0; i < n; i++)
		sb_runs_stop(d->runs, q[i], "budget"); /* one that ended already is fine */
	free(q);
}

static void on_stub_child(void *ctx, int status)
{
	struct sb_stub_proc *sp = ctx;

	fprintf(stderr, "sanboxd: the model stub (pid %d) ended with status %d\n", (int)sp->pid,
		status);
	sp->pid = 0;
	sb_watch_stop(sp->child);
	sp->child = NULL;
}

int sb_daemon_stub_url(struct sb_daemon *d, const char *script_dir, char url[SB_URL_MAX])
{
	struct sb_stub_proc *sp = NULL;
	int rc;

	for (int i = 0; i < SB_STUBS_MAX; i++) {
		struct sb_stub_proc *s = &d->stubs[i];

		if (s->pid && !strcmp(s->script_dir, script_dir)) {
			memcpy(url, s->url, SB_URL_MAX);
			return SB_OK;
		}
		if (!s->pid && !sp)
			sp = s;
	}
	if (!sp)
		return sb_seterr(SB_ERR_FULL,
				 "the built-in model stub runs for %d script directories already",
				 SB_STUBS_MAX);
	if ((rc = sb_stub_start(script_dir, &sp->pid, sp->url)))
		return rc;
	sp->d = d;
	snprintf(sp->script_dir, sizeof sp->script_dir, "%s", script_dir);
	sp->child = sb_loop_child(d->loop, sp->pid, on_stub_child, sp);
	memcpy(url, sp->url, SB_URL_MAX);
	return SB_OK;
}

static void on_drain_timeout(void *ctx)
{
	struct sb_daemon *d = ctx;

	sb_loop_break(d->loop);
}

void sb_daemon_stop(struct sb_daemon *d)
{
	if (d->stopping)
		return;
	d->stopping = 1;
	if (!sb_runs_active(d->runs)) {
		sb_loop_break(d->loop);
		return;
	}
	sb_runs_stop_all(d->runs, "daemon-stop");
	d->stop_w = sb_loop_timer(d->loop, SB_DAEMON_DRAIN_S, 0, on_drain_timeout, d);
}

static void on_signal(void *ctx)
{
	sb_daemon_stop(ctx);
}

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
		return sb_seterr(SB_ERR_EXISTS, "another sanboxd runs for %s (pid %d)", d->home,
				 atoi(buf));
	}
	if (ftruncate(fd, 0) == 0) {
		n = snprintf(buf, sizeof buf, "%d\n", (int)getpid());
		if (write(fd, buf, (size_t)n) != n)
			fprintf(stderr, "sanboxd: cannot write the pid file\n");
	}
	d->pid_fd = fd;
	return SB_OK;
}

int sb_daemon_open(const struct sb_daemon_opts *o, struct sb_daemon **out)
{
	struct sb_daemon *d = calloc(1, sizeof *d);
	struct sb_gateway_opts gw = {0};
	char path[PATH_MAX];
	int rc;

	if (!d)
		return SB_ERR_NOMEM;
	d->pid_fd = -1;
	pthread_mutex_init(&d->budget_mu, NULL);
	snprintf(d->home, sizeof d->home, "%s", o->home);
	signal(SIGPIPE, SIG_IGN);
	if ((rc = sb_home_init(d->home)) || (rc = lock_pidfile(d)))
		goto fail;
	sb_home_path(d->home, "log", path, sizeof path);
	if ((rc = sb_log_open(path, 0, &d->log)) || (rc = sb_projector_open(d->log, &d->proj)))
		goto fail;
	if ((rc = sb_loop_open(&d->loop)))
		goto fail;
	d->started = sb_loop_now(d->loop);
	if ((rc = sb_bus_listen(d->home, &d->bus)))
		goto fail;
	if (o->listen && (rc = sb_bus_listen_remote(d->bus, o->listen, o->cert, o->key)))
		goto fail;
	sb_log_set_hook(d->log, on_commit, d);
	d->proj_wake = sb_loop_async(d->loop, on_proj_wake, d);
	d->req_watch = sb_loop_io(d->loop, sb_bus_request_fd(d->bus), SB_READ, on_request, d);
	d->sig_term = sb_loop_signal(d->loop, SIGTERM, on_signal, d);
	d->sig_int = sb_loop_signal(d->loop, SIGINT, on_signal, d);
	d->budget_wake = sb_loop_async(d->loop, on_budget_wake, d);
	if (!d->proj_wake || !d->req_watch || !d->sig_term || !d->sig_int || !d->budget_wake) {
		rc = SB_ERR_NOMEM;
		goto fail;
	}
	gw.log = d->log;
	gw.on_budget = on_budget;
	gw.ctx = d;
	if ((rc = sb_gateway_open(&gw, &d->gateway)))
		goto fail;
	if ((rc = sb_daemon_catch_up(d)) || (rc = sb_runs_open(d, &d->runs)))
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

void sb_daemon_close(struct sb_daemon *d)
{
	if (!d)
		return;
	sb_runs_close(d->runs);
	sb_gateway_close(d->gateway); /* waits for calls in flight */
	for (int i = 0; i < SB_STUBS_MAX; i++) {
		sb_watch_stop(d->stubs[i].child);
		sb_stub_stop(d->stubs[i].pid);
	}
	sb_watch_stop(d->budget_wake);
	free(d->budget_runs);
	pthread_mutex_destroy(&d->budget_mu);
	sb_watch_stop(d->req_watch);
	sb_watch_stop(d->proj_wake);
	sb_watch_stop(d->sig_term);
	sb_watch_stop(d->sig_int);
	sb_watch_stop(d->stop_w);
	if (d->log)
		sb_log_set_hook(d->log, NULL, NULL);
	sb_bus_close(d->bus);
	sb_projector_close(d->proj);
	sb_log_close(d->log);
	sb_loop_close(d->loop);
	if (d->pid_fd >= 0)
		close(d->pid_fd);
	free(d);
}
