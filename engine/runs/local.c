/* local.c - the local runner: QEMU microVMs on this host (see runner.h).
 *
 * A machine's files live in home/runs/RUN/: its disk layer (disk.qcow2
 * over the template's read-only root file system), the sockets QEMU
 * connects to (chan.sock: the guest channel; qmp.sock: QMP), console.log,
 * qemu.log and qemu.pid. QEMU runs in its own session and process group
 * and outlives the daemon; it reconnects to both sockets within a second
 * when they drop (reconnect=1), so a restarted daemon that listens on the
 * same paths gets the machine back.
 */
#include "engine/runs/runner.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/daemon/loop.h"
#include "engine/error.h"
#include "engine/home.h"
#include "engine/proc.h"
#include "engine/sock.h"
#include "vmm/accel.h"
#include "vmm/disk.h"
#include "vmm/qemu.h"
#include "vmm/qmp.h"

#define PATH_CAP (PATH_MAX + 32)

struct sb_machine {
	struct sb_local_runner *lr;
	char run[SB_RUN_MAX];
	char dir[PATH_MAX], disk[PATH_CAP], chan[PATH_CAP], qmp_path[PATH_CAP],
	    console[PATH_CAP];
	char kernel[PATH_MAX], initrd[PATH_MAX];
	unsigned cpus, memory_mib;
	sb_accel accel;
	pid_t pid;
	int chan_lfd, qmp_lfd;
	sb_qmp *qmp;        /* QEMU's monitor, driven on the loop */
	int qmp_ready;      /* its greeting and capabilities are done */
	sb_watch *chan_lw, *qmp_lw, *qmp_w, *qmp_timer, *child_w, *grace_w;
	const struct sb_machine_events *ev;
	void *ctx;
	int again; /* the next channel is a reconnection */
	int ended;
};

static int machine_paths(struct sb_machine *m, const char *home, const char *run)
{
	snprintf(m->run, sizeof m->run, "%s", run);
	if (snprintf(m->dir, sizeof m->dir, "%s/runs/%s", home, run) >= PATH_MAX)
		return sb_seterr(SB_ERR_TOOBIG, "state directory path too long");
	snprintf(m->disk, sizeof m->disk, "%s/disk.qcow2", m->dir);
	snprintf(m->chan, sizeof m->chan, "%s/chan.sock", m->dir);
	snprintf(m->qmp_path, sizeof m->qmp_path, "%s/qmp.sock", m->dir);
	snprintf(m->console, sizeof m->console, "%s/console.log", m->dir);
	return SB_OK;
}

static struct sb_machine *machine_new(struct sb_local_runner *lr)
{
	struct sb_machine *m = calloc(1, sizeof *m);

	if (m) {
		m->lr = lr;
		m->chan_lfd = m->qmp_lfd = -1;
	}
	return m;
}

static void qmp_drop(struct sb_machine *m)
{
	sb_watch_stop(m->qmp_w);
	sb_watch_stop(m->qmp_timer);
	m->qmp_w = m->qmp_timer = NULL;
	sb_qmp_close(m->qmp);
	m->qmp = NULL;
	m->qmp_ready = 0;
}

static void local_free(struct sb_machine *m)
{
	if (!m)
		return;
	qmp_drop(m);
	sb_watch_stop(m->chan_lw);
	sb_watch_stop(m->qmp_lw);
	sb_watch_stop(m->child_w);
	sb_watch_stop(m->grace_w);
	if (m->chan_lfd >= 0)
		close(m->chan_lfd);
	if (m->qmp_lfd >= 0)
		close(m->qmp_lfd);
	free(m);
}

static int local_create(void *runner, const struct sb_plan *p, sb_machine **out,
			char *accel, char *warning, size_t cap)
{
	struct sb_local_runner *lr = runner;
	struct sb_machine *m = machine_new(lr);
	char cache[PATH_CAP];
	sb_accel want;
	int rc;

	if (!m)
		return SB_ERR_NOMEM;
	warning[0] = 0;
	snprintf(cache, sizeof cache, "%s/cache", lr->home);
	if ((rc = machine_paths(m, lr->home, p->run)) || (rc = sb_mkdirs(m->dir, 0700)) ||
	    (rc = sb_mkdirs(cache, 0700)) ||
	    (rc = sb_disk_layer_create(p->t.rootfs, "raw", m->disk)))
		goto fail;
	want = !strcmp(p->accel, "kvm")	  ? SB_ACCEL_KVM
	       : !strcmp(p->accel, "tcg") ? SB_ACCEL_TCG
					  : SB_ACCEL_AUTO;
	if ((rc = sb_accel_resolve(want, p->t.kernel, p->t.initrd, cache, &m->accel,
				   warning, cap)))
		goto fail;
	snprintf(m->kernel, sizeof m->kernel, "%s", p->t.kernel);
	snprintf(m->initrd, sizeof m->initrd, "%s", p->t.initrd);
	m->cpus = (unsigned)p->cpus;
	m->memory_mib = (unsigned)p->memory_mib;
	snprintf(accel, 8, "%s", m->accel == SB_ACCEL_KVM ? "kvm" : "tcg");
	*out = m;
	return SB_OK;
fail:
	local_free(m);
	return rc;
}

/* Copies the last non-empty line of file into buf ("" when none). */
static void last_line(const char *file, char *buf, size_t cap)
{
	char line[512];
	FILE *f = fopen(file, "re");

	buf[0] = 0;
	while (f && fgets(line, sizeof line, f)) {
		line[strcspn(line, "\r\n")] = 0;
		if (line[0])
			snprintf(buf, cap, "%s", line);
	}
	if (f)
		fclose(f);
}

/* How the machine ended, for a run that has no report of its harness: a
 * kernel panic on the console, else how QEMU ended. */
static void end_reason(struct sb_machine *m, int status, char *buf, size_t cap)
{
	char path[PATH_CAP], line[512];
	FILE *f;

	if (status == -1) {
		snprintf(buf, cap,
			 "the VM ended while no daemon watched it (its exit status is "
			 "unknown; see console.log)");
	} else if (WIFSIGNALED(status)) {
		snprintf(buf, cap,
			 "QEMU was killed by signal %d (%s) before the harness reported",
			 WTERMSIG(status), strsignal(WTERMSIG(status)));
	} else if (WIFEXITED(status) && WEXITSTATUS(status)) {
		snprintf(path, sizeof path, "%s/qemu.log", m->dir);
		last_line(path, line, sizeof line);
		snprintf(buf, cap,
			 "QEMU exited with status %d before the harness reported%s%.300s",
			 WEXITSTATUS(status), line[0] ? ": " : "", line);
	} else {
		snprintf(
		    buf, cap,
		    "the VM powered off before the harness reported (see console.log)");
	}
	if (!(f = fopen(m->console, "re")))
		return;
	while (fgets(line, sizeof line, f)) {
		char *p = strstr(line, "Kernel panic");
		if (p) {
			p[strcspn(p, "\r\n")] = 0;
			snprintf(buf, cap, "guest kernel panic: %.200s", p);
			break;
		}
	}
	fclose(f);
}

static void on_child(void *ctx, int status)
{
	struct sb_machine *m = ctx;
	char why[600];

	sb_watch_stop(m->child_w); /* safe inside its callback */
	m->child_w = NULL;
	sb_watch_stop(m->grace_w);
	m->grace_w = NULL;
	m->ended = 1;
	end_reason(m, status, why, sizeof why);
	m->ev->ended(m->ctx, status, why); /* may free m */
}

static void on_chan_accept(void *ctx, int revents)
{
	struct sb_machine *m = ctx;
	int fd, again = m->again;

	if (sb_unix_accept(m->chan_lfd, 0, &fd))
		return;
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	m->again = 1;
	m->ev->channel(m->ctx, fd, again);
}

static int64_t loop_ms(struct sb_machine *m)
{
	return (int64_t)(sb_loop_now(m->lr->loop) * 1000);
}

static void qmp_arm(struct sb_machine *m);

static void on_qmp_io(void *ctx, int revents)
{
	struct sb_machine *m = ctx;

	sb_qmp_io(m->qmp, (revents & SB_READ ? SB_QMP_READ : 0) |
			      (revents & SB_WRITE ? SB_QMP_WRITE : 0));
	if (m->qmp)
		qmp_arm(m);
}

static void on_qmp_timer(void *ctx)
{
	struct sb_machine *m = ctx;

	sb_watch_stop(m->qmp_timer);
	m->qmp_timer = NULL;
	sb_qmp_tick(m->qmp, loop_ms(m));
	if (m->qmp)
		qmp_arm(m);
}

/* Watches the monitor's socket for what the client wants, and its next
 * deadline. */
static void qmp_arm(struct sb_machine *m)
{
	unsigned w = sb_qmp_wants(m->qmp);
	int64_t dl = sb_qmp_deadline(m->qmp);

	sb_watch_io_set(m->qmp_w, (w & SB_QMP_READ ? SB_READ : 0) | (w & SB_QMP_WRITE ? SB_WRITE : 0));
	sb_watch_stop(m->qmp_timer);
	m->qmp_timer = NULL;
	if (dl >= 0) {
		double after = (double)(dl - loop_ms(m)) / 1000;
		m->qmp_timer = sb_loop_timer(m->lr->loop, after > 0 ? after : 0, 0, on_qmp_timer, m);
	}
}

/* The monitor went away (QEMU ends, or reconnects): it is taken again on
 * the next connection. */
static void qmp_down(void *ctx, int err)
{
	struct sb_machine *m = ctx;

	(void)err;
	qmp_drop(m);
}

static const struct sb_qmp_ops qmp_ops = {
	.down = qmp_down,
};

static void on_qmp_ready(void *ctx, int rc, json_t *ret)
{
	struct sb_machine *m = ctx;

	(void)ret;
	m->qmp_ready = rc == SB_OK;
}

static void on_qmp_accept(void *ctx, int revents)
{
	struct sb_machine *m = ctx;
	int fd;

	if (sb_unix_accept(m->qmp_lfd, 0, &fd))
		return;
	qmp_drop(m); /* one monitor connection at a time */
	if (sb_qmp_open_async(fd, loop_ms(m), 10000, &qmp_ops, m, &m->qmp))
		return;
	if (!(m->qmp_w = sb_loop_io(m->lr->loop, sb_qmp_fd(m->qmp), SB_READ, on_qmp_io, m))) {
		qmp_drop(m);
		return;
	}
	/* a first command: ready once the greeting and capabilities are done */
	if (sb_qmp_send(m->qmp, loop_ms(m), "query-status", NULL, 10000, on_qmp_ready, m))
		qmp_drop(m);
	else
		qmp_arm(m);
}

/* Listens on the machine's sockets and watches its QEMU (pid set). */
static int machine_watch(struct sb_machine *m, const struct sb_machine_events *ev,
			 void *ctx)
{
	sb_loop *l = m->lr->loop;
	int rc;

	m->ev = ev;
	m->ctx = ctx;
	if ((rc = sb_unix_listen(m->chan, &m->chan_lfd)) ||
	    (rc = sb_unix_listen(m->qmp_path, &m->qmp_lfd)))
		return rc;
	m->chan_lw = sb_loop_io(l, m->chan_lfd, SB_READ, on_chan_accept, m);
	m->qmp_lw = sb_loop_io(l, m->qmp_lfd, SB_READ, on_qmp_accept, m);
	return m->chan_lw && m->qmp_lw ? SB_OK : SB_ERR_NOMEM;
}

static int local_start(struct sb_machine *m, const struct sb_machine_events *ev,
		       void *ctx)
{
	struct sb_vm_config vc = {0};
	char path[PATH_CAP], pidbuf[32];
	int rc, fd, n;

	if ((rc = machine_watch(m, ev, ctx)))
		return rc;
	vc.kernel = m->kernel;
	vc.initrd = m->initrd;
	vc.disk = m->disk;
	vc.chan_socket = m->chan;
	vc.qmp_socket = m->qmp_path;
	vc.console_log = m->console;
	vc.cpus = m->cpus;
	vc.memory_mib = m->memory_mib;
	vc.accel = m->accel;
	if ((rc = sb_vm_spawn(&vc, &m->pid)))
		return rc;
	snprintf(path, sizeof path, "%s/qemu.pid", m->dir);
	if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) >= 0) {
		n = snprintf(pidbuf, sizeof pidbuf, "%d\n", (int)m->pid);
		if (write(fd, pidbuf, (size_t)n) != n)
			rc = sb_seterr(SB_ERR_IO, "cannot write %s", path);
		close(fd);
	}
	if (!(m->child_w = sb_loop_child(m->lr->loop, m->pid, on_child, m)))
		rc = SB_ERR_NOMEM;
	if (rc) {
		sb_proc_kill(m->pid, SIGKILL);
		return rc;
	}
	return SB_OK;
}

static int local_signal(struct sb_machine *m, int sig)
{
	if (m->ended || m->pid <= 1)
		return sb_seterr(SB_ERR_STATE, "the VM of run %s has ended", m->run);
	return sb_proc_kill(m->pid, sig);
}

static void on_kill_grace(void *ctx)
{
	struct sb_machine *m = ctx;

	sb_watch_stop(m->grace_w);
	m->grace_w = NULL;
	if (!m->ended)
		sb_proc_kill(m->pid, SIGKILL);
}

static void on_quit(void *ctx, int rc, json_t *ret)
{
	struct sb_machine *m = ctx;

	(void)ret;
	/* the connection's end is QEMU going: the quit was taken */
	if (rc && rc != SB_ERR_IO && !m->ended)
		sb_proc_kill(m->pid, SIGTERM);
}

/* Ends the machine: QMP quit when the monitor is there (QEMU exits at
 * once, cleanly), else SIGTERM; SIGKILL after grace_s either way. */
static void local_stop(struct sb_machine *m, double grace_s)
{
	if (m->ended || m->grace_w)
		return;
	if (!m->qmp_ready ||
	    sb_qmp_send(m->qmp, loop_ms(m), "quit", NULL, (int)(grace_s * 500), on_quit, m))
		sb_proc_kill(m->pid, SIGTERM);
	else
		qmp_arm(m);
	m->grace_w = sb_loop_timer(m->lr->loop, grace_s, 0, on_kill_grace, m);
}

static int local_snapshot(struct sb_machine *m, const struct sb_snapshot_req *req)
{
	return sb_seterr(SB_ERR_UNAVAIL, "snapshots are not in this version");
}

static int local_restore(void *runner, const struct sb_plan *plan, const char *snapshot,
			 sb_machine **out)
{
	return sb_seterr(SB_ERR_UNAVAIL, "snapshots are not in this version");
}

/* The pid in dir/qemu.pid when that process is QEMU for this run (its
 * command line names the run's directory), else 0. */
static pid_t machine_pid(const char *dir, const char *run)
{
	char path[PATH_CAP], cmd[8192], want[SB_RUN_MAX + 16];
	FILE *f;
	int pid = 0, fd;
	ssize_t n;

	snprintf(path, sizeof path, "%s/qemu.pid", dir);
	if (!(f = fopen(path, "re")))
		return 0;
	if (fscanf(f, "%d", &pid) != 1)
		pid = 0;
	fclose(f);
	if (pid <= 1)
		return 0;
	snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	n = read(fd, cmd, sizeof cmd - 1);
	close(fd);
	if (n <= 0)
		return 0;
	for (ssize_t i = 0; i < n; i++)
		if (!cmd[i])
			cmd[i] = ' ';
	cmd[n] = 0;
	snprintf(want, sizeof want, "/runs/%s/", run);
	return strstr(cmd, want) ? (pid_t)pid : 0;
}

static int local_reattach(void *runner, const struct sb_plan *p,
			  const struct sb_machine_events *ev, void *ctx, sb_machine **out)
{
	struct sb_local_runner *lr = runner;
	struct sb_machine *m = machine_new(lr);
	int rc;

	if (!m)
		return SB_ERR_NOMEM;
	if ((rc = machine_paths(m, lr->home, p->run)))
		goto fail;
	if (!(m->pid = machine_pid(m->dir, p->run))) {
		rc = sb_seterr(SB_ERR_NOTFOUND, "the VM of run %s is gone", p->run);
		goto fail;
	}
	m->again = 1;
	if ((rc = machine_watch(m, ev, ctx)))
		goto fail;
	if (!(m->child_w = sb_loop_child(lr->loop, m->pid, on_child, m))) {
		rc = SB_ERR_NOMEM;
		goto fail;
	}
	*out = m;
	return SB_OK;
fail:
	local_free(m);
	return rc;
}

pid_t sb_local_qemu_pid(const char *home, const char *run)
{
	char dir[PATH_CAP];

	snprintf(dir, sizeof dir, "%s/runs/%s", home, run);
	return machine_pid(dir, run);
}

static void local_reap(void *runner, const char *run)
{
	struct sb_local_runner *lr = runner;
	pid_t pid;

	if ((pid = sb_local_qemu_pid(lr->home, run)))
		sb_proc_kill(pid, SIGKILL);
}

const struct sb_runner_ops sb_local_runner_ops = {
    .name = "local",
    .create = local_create,
    .start = local_start,
    .signal = local_signal,
    .stop = local_stop,
    .snapshot = local_snapshot,
    .restore = local_restore,
    .reattach = local_reattach,
    .reap = local_reap,
    .free = local_free,
};
