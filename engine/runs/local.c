/* local.c - the local runner: QEMU microVMs on this host (see runner.h).
 *
 * A machine's files live in home/runs/RUN/: its disk layers (layers/N.qcow2,
 * see layers.h: the snapshot store), the sockets QEMU connects to
 * (chan.sock: the guest channel; qmp.sock: QMP), console.log, qemu.log and
 * qemu.pid, and with network mode acl its network (net.json, netpolicy/net.h:
 * a tap QEMU opens by name). QEMU runs in its own session and process group
 * and outlives the daemon; it reconnects to both sockets within a second
 * when they drop (reconnect=1), so a restarted daemon that listens on the
 * same paths gets the machine back.
 */
#include "engine/runs/runner.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/loop.h"
#include "engine/error.h"
#include "engine/home.h"
#include "engine/proc.h"
#include "engine/runs/layers.h"
#include "engine/runs/warm.h"
#include "engine/sock.h"
#include "engine/template.h"
#include "vmm/accel.h"
#include "vmm/disk.h"
#include "vmm/qemu.h"
#include "vmm/qmp.h"

#define PATH_CAP (PATH_MAX + 32)

#define SNAP_CMD_MS	30000  /* one monitor command of a snapshot */
#define SNAP_MIGRATE_MS 120000 /* saving the memory, in all */
#define SNAP_POLL_S	0.02   /* how often the migration's state is asked */
#define SNAP_SAVE_MS	30000  /* the memory file's writer finishing, once sent */

struct snap_op;

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
	sb_qmp *qmp;   /* QEMU's monitor, driven on the loop */
	int qmp_ready; /* its greeting and capabilities are done */
	sb_watch *chan_lw, *qmp_lw, *qmp_w, *qmp_timer, *child_w, *grace_w;
	const struct sb_machine_events *ev;
	void *ctx;
	int again; /* the next channel is a reconnection */
	/* found running by a daemon that started again: 1 until its state
	 * is found (query-migrate, query-status, cont), no snapshot meanwhile */
	int reattached;
	unsigned settle_polls; /* looks at a migration being cancelled */
	long pending;	       /* the layer of a memory snapshot a dead daemon was taking
				* (snapshot.pending), or -1 */
	unsigned layer;	       /* the number of the layer create made */
	char incoming[SB_LAYER_PATH_MAX + 8]; /* the memory state it starts from, or "" */
	char warm_ram[SB_LAYER_PATH_MAX + 8]; /* a warm start's RAM (the image's) */
	int incoming_asked;		      /* a warm start's load was asked for */
	int cont_sent;			    /* ... and QMP cont was sent once it loaded */
	sb_watch *incoming_w;		    /* the next look at the incoming migration */
	char fail_why[512];		    /* how it ended, when the runner ended it */
	char warm_key[SB_WARM_KEY_LEN + 1]; /* a warm start's image, or "" */
	int ended;
	char top_node[64];	/* QMP node-name of the disk's top layer */
	struct snap_op *snap;	/* the snapshot being taken, or NULL */
	struct merge_op *merge; /* the merge under way, or NULL */
	sb_net_run *net;	/* its network (mode acl), or NULL */
	char mac[18];		/* its NIC's MAC */
};

static int machine_paths(struct sb_machine *m, const char *home, const char *run)
{
	snprintf(m->run, sizeof m->run, "%s", run);
	if (snprintf(m->dir, sizeof m->dir, "%s/runs/%s", home, run) >= PATH_MAX)
		return sb_seterr(SB_ERR_TOOBIG, "state directory path too long");
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
		m->pending = -1;
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

static void snap_orphan(struct sb_machine *m);
static void merge_orphan(struct sb_machine *m);

static void local_free(struct sb_machine *m)
{
	if (!m)
		return;
	snap_orphan(m);
	merge_orphan(m);
	qmp_drop(m);
	sb_watch_stop(m->chan_lw);
	sb_watch_stop(m->qmp_lw);
	sb_watch_stop(m->child_w);
	sb_watch_stop(m->grace_w);
	sb_watch_stop(m->incoming_w);
	if (m->chan_lfd >= 0)
		close(m->chan_lfd);
	if (m->qmp_lfd >= 0)
		close(m->qmp_lfd);
	/* a machine that ended takes its network along; one that goes on
	 * (the daemon stops) leaves it to the next daemon */
	if (m->ended)
		sb_net_run_close(m->net);
	else
		sb_net_run_leave(m->net);
	free(m);
}

/* Sets up m's network for plan p (network mode acl). */
static int machine_net(struct sb_machine *m, const struct sb_plan *p)
{
	struct sb_net_iface f;
	int rc;

	if (p->net.mode != SB_NET_ACL)
		return SB_OK;
	if (!m->lr->net)
		return sb_seterr(SB_ERR_UNAVAIL,
				 "network acl is not enforced by this runner");
	if ((rc = sb_net_run_open(m->lr->net, p->run, &p->net, &m->net)))
		return rc;
	sb_net_run_iface(m->net, &f);
	snprintf(m->mac, sizeof m->mac, "%02x:%02x:%02x:%02x:%02x:%02x", f.mac[0],
		 f.mac[1], f.mac[2], f.mac[3], f.mac[4], f.mac[5]);
	return SB_OK;
}

/* A run of a template with the template's own machine (vCPUs, memory)
 * restores the template's warm image when there is one; else it boots,
 * and the image is built meanwhile for the next runs. */
static void warm_prepare(struct sb_machine *m, const struct sb_plan *p)
{
	struct sb_warm_spec w = {p->t.hash, p->t.kernel, p->t.initrd,  p->t.rootfs,
				 m->accel,  m->cpus,	 m->memory_mib};
	char key[SB_WARM_KEY_LEN + 1];

	if (p->cpus != p->t.cpus || p->memory_mib != p->t.memory_mib ||
	    sb_warm_key(&w, key))
		return; /* another machine than the template's: it boots */
	if (sb_warm_find(m->lr->home, key, m->incoming, m->warm_ram,
			 sizeof m->incoming) == SB_OK) {
		memcpy(m->warm_key, key, sizeof key);
		return;
	}
	m->incoming[0] = 0;
	sb_warm_build_async(m->lr->home, key, &w);
}

/* Prepares m for plan p with a disk layer over base (format base_fmt);
 * warm: it may start from the template's warm image; fork: base is
 * another run's layer (sb_layers_fork: a long chain gets its own base). */
static int machine_prepare(struct sb_local_runner *lr, const struct sb_plan *p,
			   const char *base, const char *base_fmt, int warm, int fork,
			   sb_machine **out, char *accel, char *warning, size_t cap)
{
	struct sb_machine *m = machine_new(lr);
	char cache[PATH_CAP], layer[SB_LAYER_PATH_MAX], detail[512];
	sb_accel want;
	unsigned n;
	int rc;

	if (!m)
		return SB_ERR_NOMEM;
	warning[0] = 0;
	snprintf(cache, sizeof cache, "%s/cache", lr->home);
	if ((rc = machine_paths(m, lr->home, p->run)) || (rc = sb_mkdirs(m->dir, 0700)) ||
	    (rc = sb_mkdirs(cache, 0700)) ||
	    (rc = fork ? sb_layers_fork(lr->home, p->run, base, SB_LAYERS_FORK_CHAIN, &n)
		       : sb_layers_create(lr->home, p->run, base, base_fmt, &n)))
		goto fail;
	m->layer = n;
	if ((rc = sb_layers_path(lr->home, p->run, n, layer, sizeof layer)))
		goto fail_layer;
	/* QEMU names the next layer's backing file after this path: absolute */
	if (!realpath(layer, m->disk)) {
		rc = sb_seterr(SB_ERR_IO, "%s: %s", layer, strerror(errno));
		goto fail_layer;
	}
	if ((rc = sb_accel_parse(p->accel, &want)) ||
	    (rc = sb_accel_resolve(want, p->t.kernel, p->t.initrd, cache, &m->accel,
				   warning, cap)))
		goto fail_layer;
	snprintf(m->kernel, sizeof m->kernel, "%s", p->t.kernel);
	snprintf(m->initrd, sizeof m->initrd, "%s", p->t.initrd);
	m->cpus = (unsigned)p->cpus;
	m->memory_mib = (unsigned)p->memory_mib;
	snprintf(accel, 8, "%s", sb_accel_name(m->accel));
	if ((rc = machine_net(m, p)))
		goto fail_layer;
	/* a warm image has no NIC: a run with one boots */
	if (warm && lr->warm && !m->net)
		warm_prepare(m, p);
	*out = m;
	return SB_OK;
fail_layer:
	snprintf(detail, sizeof detail, "%s", sb_errmsg(rc));
	sb_layers_drop(lr->home, p->run, n); /* keeps rc's detail */
	if (fork && n == 1)
		sb_layers_drop(lr->home, p->run, 0); /* its own base */
	rc = sb_seterr(rc, "%s", detail);
fail:
	local_free(m);
	return rc;
}

static int local_create(void *runner, const struct sb_plan *p, sb_machine **out,
			char *accel, char *warning, size_t cap)
{
	return machine_prepare(runner, p, p->t.rootfs, "raw", 1, 0, out, accel, warning,
			       cap);
}

/* 1 when the file at path starts as QEMU's migration stream does: the
 * magic "QEVM" and version 3 (big-endian). */
static int stream_ok(const char *path)
{
	static const unsigned char head[8] = {'Q', 'E', 'V', 'M', 0, 0, 0, 3};
	unsigned char buf[sizeof head];
	int fd = open(path, O_RDONLY | O_CLOEXEC), ok;

	ok = fd >= 0 && pread(fd, buf, sizeof buf, 0) == (ssize_t)sizeof buf &&
	     !memcmp(buf, head, sizeof head);
	if (fd >= 0)
		close(fd);
	return ok;
}

static int local_create_from(void *runner, const struct sb_plan *p, const char *from_run,
			     unsigned base_layer, uint64_t memory_bytes, sb_machine **out,
			     char *accel, char *warning, size_t cap)
{
	struct sb_local_runner *lr = runner;
	char base[SB_LAYER_PATH_MAX], mem[SB_LAYER_PATH_MAX + 8];
	struct stat st;
	int rc;

	if ((rc = sb_layers_path(lr->home, from_run, base_layer, base, sizeof base)))
		return rc;
	if (stat(base, &st))
		return sb_seterr(SB_ERR_NOTFOUND, "snapshot s%u of run %s: %s: %s",
				 base_layer, from_run, base, strerror(errno));
	if (st.st_mode & 0222)
		return sb_seterr(SB_ERR_STATE, "layer %s is not frozen: not a snapshot",
				 base);
	if ((rc = sb_layers_check(lr->home, base)))
		return rc; /* QEMU would follow its chain */
	if (memory_bytes) {
		snprintf(mem, sizeof mem, "%.*s.mem", (int)(strlen(base) - 6), base);
		if (stat(mem, &st))
			return sb_seterr(SB_ERR_NOTFOUND,
					 "snapshot s%u of run %s: %s: %s", base_layer,
					 from_run, mem, strerror(errno));
		if ((uint64_t)st.st_size != memory_bytes)
			return sb_seterr(SB_ERR_CORRUPT,
					 "snapshot s%u of run %s: %s holds %llu bytes, "
					 "%llu were saved",
					 base_layer, from_run, mem,
					 (unsigned long long)st.st_size,
					 (unsigned long long)memory_bytes);
		if (!stream_ok(mem))
			return sb_seterr(SB_ERR_CORRUPT,
					 "snapshot s%u of run %s: %s is damaged (no QEMU "
					 "migration stream header)",
					 base_layer, from_run, mem);
	}
	if ((rc = machine_prepare(lr, p, base, "qcow2", 0, strcmp(from_run, p->run) != 0,
				  out, accel, warning, cap)))
		return rc;
	if (memory_bytes)
		snprintf((*out)->incoming, sizeof(*out)->incoming, "%s", mem);
	return SB_OK;
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

static int machine_spawn(struct sb_machine *m);

static void on_child(void *ctx, int status)
{
	struct sb_machine *m = ctx;
	char why[600];

	sb_watch_stop(m->child_w); /* safe inside its callback */
	m->child_w = NULL;
	if (m->warm_key[0] && m->incoming[0] && !m->cont_sent && !m->grace_w) {
		/* the warm image did not load: it goes, and the machine boots */
		sb_warm_drop(m->lr->home, m->warm_key);
		snprintf(
		    why, sizeof why,
		    "the template's warm image did not load (QEMU %s %d): booting cold",
		    WIFSIGNALED(status) ? "signal" : "status",
		    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
		m->incoming[0] = 0;
		qmp_drop(m);
		if (machine_spawn(m) == SB_OK) {
			if (m->ev->warning)
				m->ev->warning(m->ctx, why);
			return;
		}
	}
	sb_watch_stop(m->grace_w);
	m->grace_w = NULL;
	m->ended = 1;
	sb_watch_stop(m->incoming_w);
	m->incoming_w = NULL;
	end_reason(m, status, why, sizeof why);
	if (m->incoming[0] && !m->warm_key[0] && !m->cont_sent && !m->fail_why[0] &&
	    WIFEXITED(status) && WEXITSTATUS(status)) {
		/* QEMU ended on its own as the memory did not load */
		char path[PATH_CAP], line[512];
		snprintf(path, sizeof path, "%s/qemu.log", m->dir);
		last_line(path, line, sizeof line);
		snprintf(m->fail_why, sizeof m->fail_why,
			 "loading the memory snapshot %.300s failed: %.150s", m->incoming,
			 line[0] ? line : "see qemu.log");
	}
	if (m->fail_why[0])
		memcpy(why, m->fail_why, sizeof m->fail_why);
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

	sb_watch_io_set(m->qmp_w, (w & SB_QMP_READ ? SB_READ : 0) |
				      (w & SB_QMP_WRITE ? SB_WRITE : 0));
	sb_watch_stop(m->qmp_timer);
	m->qmp_timer = NULL;
	if (dl >= 0) {
		double after = (double)(dl - loop_ms(m)) / 1000;
		/* NULL (out of memory): no deadline until the next qmp_arm;
		 * QEMU's end is still seen (child_w) */
		m->qmp_timer =
		    sb_loop_timer(m->lr->loop, after > 0 ? after : 0, 0, on_qmp_timer, m);
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

static void incoming_poll(struct sb_machine *m);

/* Calls cb(m) after `after` s on m's incoming_w; out of memory, the
 * machine is ended instead (it cannot be watched going on). */
static void incoming_later(struct sb_machine *m, double after, void (*cb)(void *ctx))
{
	if ((m->incoming_w = sb_loop_timer(m->lr->loop, after, 0, cb, m)))
		return;
	if (!m->fail_why[0])
		snprintf(m->fail_why, sizeof m->fail_why,
			 "out of memory: its QEMU could not be watched");
	sb_proc_kill(m->pid, SIGKILL);
}

static void on_incoming_timer(void *ctx)
{
	struct sb_machine *m = ctx;

	sb_watch_stop(m->incoming_w);
	m->incoming_w = NULL;
	incoming_poll(m);
}

static void on_cont(void *ctx, int rc, json_t *ret)
{
	(void)ctx;
	(void)rc;
	(void)ret; /* a guest that does not go on misses its boot deadline */
}

static void cont_send(struct sb_machine *m)
{
	if (!m->cont_sent && m->qmp &&
	    sb_qmp_send(m->qmp, loop_ms(m), "cont", NULL, 10000, on_cont, m) == SB_OK) {
		m->cont_sent = 1;
		qmp_arm(m);
	}
}

/* A warm start's command failed: QEMU ends, and the run boots cold
 * (on_child). A monitor that went away asks again when it is back. */
static void on_warm_step(void *ctx, int rc, json_t *ret)
{
	struct sb_machine *m = ctx;

	(void)ret;
	if (rc == SB_ERR_IO)
		m->incoming_asked = 0;
	else if (rc && !m->ended)
		sb_proc_kill(m->pid, SIGKILL);
}

static void on_warm_loaded(void *ctx, int rc, json_t *ret)
{
	struct sb_machine *m = ctx;

	if (rc)
		on_warm_step(ctx, rc, ret);
	else
		cont_send(m);
}

/* Sends QMP migrate-set-capabilities: the warm image's capability on or
 * off; reply to cb. */
static int warm_cap(struct sb_machine *m, int on, sb_qmp_reply_fn cb)
{
	json_t *caps = json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability",
				 SB_WARM_MIGRATE_CAP, "state", on);
	int rc = caps ? sb_qmp_send(m->qmp, loop_ms(m), "migrate-set-capabilities", caps,
				    10000, cb, m)
		      : SB_ERR_NOMEM;

	json_decref(caps);
	return rc;
}

/* A warm start (QEMU waits, -incoming defer, its RAM the image's file):
 * its state is loaded without RAM, as it was saved. */
static int warm_ask(struct sb_machine *m)
{
	char *q = sb_vm_shquote(m->incoming), uri[sizeof m->incoming * 4 + 16];
	json_t *args;
	int rc;

	if (!q)
		return SB_ERR_NOMEM;
	snprintf(uri, sizeof uri, "exec:cat %s", q);
	free(q);
	if (!(args = json_pack("{s:s}", "uri", uri)))
		return SB_ERR_NOMEM;
	if ((rc = warm_cap(m, 1, on_warm_step)) == SB_OK &&
	    (rc = sb_qmp_send(m->qmp, loop_ms(m), "migrate-incoming", args, 10000,
			      on_warm_step, m)) == SB_OK)
		m->incoming_asked = 1;
	json_decref(args);
	return rc;
}

/* The state of the incoming migration: once it is completed, cont (a warm
 * start's capability off first: a memory snapshot of the run holds its
 * RAM). */
static void on_incoming_state(void *ctx, int rc, json_t *ret)
{
	struct sb_machine *m = ctx;
	const char *st = rc ? NULL : json_string_value(json_object_get(ret, "status"));

	if (st && !strcmp(st, "completed")) {
		if (!m->warm_key[0])
			cont_send(m);
		else if (!m->cont_sent && m->qmp &&
			 warm_cap(m, 0, on_warm_loaded) == SB_OK)
			qmp_arm(m);
		return;
	}
	if (st && !strcmp(st, "failed")) {
		const char *why = json_string_value(json_object_get(ret, "error-desc"));
		if (!m->warm_key[0])
			snprintf(m->fail_why, sizeof m->fail_why,
				 "loading the memory snapshot %.300s failed: %.150s",
				 m->incoming, why ? why : "see qemu.log");
		sb_proc_kill(m->pid, SIGKILL); /* a warm start boots cold instead */
		return;
	}
	/* none yet, setup, active: again soon */
	incoming_later(m, 0.005, on_incoming_timer);
}

static void incoming_poll(struct sb_machine *m)
{
	if (!m->qmp || m->cont_sent || m->ended)
		return;
	if (m->warm_key[0] && !m->incoming_asked && warm_ask(m))
		return; /* the monitor went away: asked again when it is back */
	if (sb_qmp_send(m->qmp, loop_ms(m), "query-migrate", NULL, 10000,
			on_incoming_state, m) == SB_OK)
		qmp_arm(m);
}

/* A reattached machine's disk: disk.qcow2 names the layer QEMU writes. */
static void on_settle(void *ctx, int rc, json_t *ret)
{
	struct sb_machine *m = ctx;
	json_t *ins = json_object_get(json_array_get(ret, 0), "inserted");
	const char *file = json_string_value(json_object_get(ins, "file"));

	if (rc == SB_OK && file && (rc = sb_layers_settle(m->lr->home, m->run, file)) &&
	    m->ev->warning)
		m->ev->warning(m->ctx, sb_errmsg(rc));
}

/* --- a reattached machine: what the previous daemon left it doing --- */

/* The file that says a memory snapshot is under way: its layer's number.
 * Written before the guest is paused, removed once the snapshot is over
 * (recorded or failed); a daemon that finds it takes what the dead one
 * left half done (see local_interrupted). */
static void pending_path(const char *dir, char *buf, size_t cap)
{
	if (snprintf(buf, cap, "%s/snapshot.pending", dir) >= (int)cap)
		buf[0] = 0; /* no such path: nothing is found or removed */
}

static int pending_write(const char *dir, unsigned layer)
{
	char path[PATH_CAP], line[16];
	int fd, n = snprintf(line, sizeof line, "%u\n", layer), rc = SB_OK;

	pending_path(dir, path, sizeof path);
	if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 ||
	    write(fd, line, (size_t)n) != n)
		rc = sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	return rc;
}

/* The layer snapshot.pending names, or -1 (none, or not a number). */
static long pending_read(const char *dir)
{
	char path[PATH_CAP];
	unsigned layer;
	FILE *f;
	long n = -1;

	pending_path(dir, path, sizeof path);
	if ((f = fopen(path, "re"))) {
		if (fscanf(f, "%u", &layer) == 1)
			n = (long)layer;
		fclose(f);
	}
	return n;
}

static void pending_remove(const char *dir)
{
	char path[PATH_CAP];

	pending_path(dir, path, sizeof path);
	unlink(path);
}

static void settle_migration(struct sb_machine *m);

static void on_settle_timer(void *ctx)
{
	struct sb_machine *m = ctx;

	sb_watch_stop(m->incoming_w);
	m->incoming_w = NULL;
	settle_migration(m);
}

/* The machine's run state: a guest the dead daemon paused (QMP stop, and
 * postmigrate once its migration completed without it) goes on. The
 * machine is then the new daemon's to snapshot. */
static void on_settle_status(void *ctx, int rc, json_t *ret)
{
	struct sb_machine *m = ctx;
	const char *st = json_string_value(json_object_get(ret, "status"));

	if (rc == SB_ERR_IO)
		return; /* the monitor went away: asked again on its return */
	if (st && !strcmp(st, "finish-migrate")) { /* completed, not yet settled */
		incoming_later(m, SNAP_POLL_S, on_settle_timer);
		return;
	}
	if (st && (!strcmp(st, "paused") || !strcmp(st, "postmigrate")))
		cont_send(m);
	if (m->pending >= 0)
		pending_remove(m->dir);
	m->reattached = 0;
}

/* The migration a dead daemon started (a memory snapshot's) is cancelled
 * and waited out; then the run state. */
static void on_settle_migrate(void *ctx, int rc, json_t *ret)
{
	struct sb_machine *m = ctx;
	const char *st = json_string_value(json_object_get(ret, "status"));
	int idle = rc || !st || !strcmp(st, "none") || !strcmp(st, "completed") ||
		   !strcmp(st, "failed") || !strcmp(st, "cancelled") ||
		   ++m->settle_polls > SNAP_MIGRATE_MS / 1000 / SNAP_POLL_S;

	if (rc == SB_ERR_IO || m->ended)
		return;
	if (idle) {
		if (sb_qmp_send(m->qmp, loop_ms(m), "query-status", NULL, 10000,
				on_settle_status, m) == SB_OK)
			qmp_arm(m);
		return;
	}
	if (strcmp(st, "cancelling") &&
	    sb_qmp_send(m->qmp, loop_ms(m), "migrate_cancel", NULL, 10000, on_cont, m))
		return;
	qmp_arm(m);
	incoming_later(m, SNAP_POLL_S, on_settle_timer);
}

static void settle_migration(struct sb_machine *m)
{
	if (m->qmp && sb_qmp_send(m->qmp, loop_ms(m), "query-migrate", NULL, 10000,
				  on_settle_migrate, m) == SB_OK)
		qmp_arm(m);
}

static void on_qmp_ready(void *ctx, int rc, json_t *ret)
{
	struct sb_machine *m = ctx;

	(void)ret;
	m->qmp_ready = rc == SB_OK;
	if (m->qmp_ready && m->incoming[0] && !m->cont_sent)
		incoming_poll(m);
	if (m->qmp_ready && m->reattached) {
		if (sb_qmp_send(m->qmp, loop_ms(m), "query-block", NULL, 10000, on_settle,
				m) == SB_OK)
			qmp_arm(m);
		settle_migration(m);
	}
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
	if (!(m->qmp_w =
		  sb_loop_io(m->lr->loop, sb_qmp_fd(m->qmp), SB_READ, on_qmp_io, m))) {
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

/* Starts QEMU for m (its sockets listening) and watches it. */
static int machine_spawn(struct sb_machine *m)
{
	struct sb_vm_config vc = {0};
	struct sb_net_iface f;
	char path[PATH_CAP], pidbuf[32];
	int rc = SB_OK, fd, n;

	vc.kernel = m->kernel;
	vc.initrd = m->initrd;
	vc.disk = m->disk;
	vc.chan_socket = m->chan;
	vc.qmp_socket = m->qmp_path;
	vc.console_log = m->console;
	vc.cpus = m->cpus;
	vc.memory_mib = m->memory_mib;
	vc.accel = m->accel;
	if (m->net) {
		sb_net_run_iface(m->net, &f);
		vc.tap = f.tap;
		vc.mac = m->mac;
	}
	if (m->incoming[0]) {
		if (m->warm_key[0]) { /* the RAM is the image's, the state comes after */
			vc.incoming_defer = 1;
			vc.ram_file = m->warm_ram;
		} else {
			vc.incoming = m->incoming;
		}
		m->again = 1; /* the guest was talking to a host already */
	}
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

static void on_net_report(void *ctx, const struct sb_net_report *r)
{
	struct sb_machine *m = ctx;

	if (m->ev->net)
		m->ev->net(m->ctx, r);
}

static int local_start(struct sb_machine *m, const struct sb_machine_events *ev,
		       void *ctx)
{
	int rc;

	if ((rc = machine_watch(m, ev, ctx)) || (rc = machine_spawn(m)))
		return rc;
	if (m->net)
		sb_net_run_start(m->net, on_net_report, m);
	return SB_OK;
}

static int local_iface(struct sb_machine *m, struct sb_net_iface *out)
{
	if (!m->net)
		return sb_seterr(SB_ERR_NOTFOUND, "run %s has no network device", m->run);
	sb_net_run_iface(m->net, out);
	return SB_OK;
}

static int local_grant(struct sb_machine *m, const struct sb_net_grant *g, int allow,
		       void (*cb)(void *ctx, int rc), void *ctx)
{
	if (!m->net)
		return sb_seterr(SB_ERR_STATE,
				 "run %s has network none: grants need network acl",
				 m->run);
	if (m->ended)
		return sb_seterr(SB_ERR_STATE, "the VM of run %s has ended", m->run);
	return sb_net_run_grant(m->net, g, allow, cb, ctx);
}

static int local_restored(struct sb_machine *m)
{
	return m->incoming[0] != 0;
}

static int local_warm(struct sb_machine *m)
{
	return m->warm_key[0] && m->incoming[0];
}

static void local_discard(struct sb_machine *m)
{
	if (!m)
		return;
	sb_layers_drop(m->lr->home, m->run, m->layer);
	m->ended = 1; /* never started: what was made for it goes */
	local_free(m);
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
	if (!m->qmp_ready || sb_qmp_send(m->qmp, loop_ms(m), "quit", NULL,
					 (int)(grace_s * 500), on_quit, m))
		sb_proc_kill(m->pid, SIGTERM);
	else
		qmp_arm(m);
	m->grace_w = sb_loop_timer(m->lr->loop, grace_s, 0, on_kill_grace, m);
	if (!m->grace_w) /* out of memory: no grace */
		sb_proc_kill(m->pid, SIGKILL);
}

/* --- snapshots --- */

/* S_SETTLE waits out QEMU's finish-migrate: query-migrate says completed
 * before the run state leaves it, and cont is refused until it has. */
enum snap_stage {
	S_QUERY,
	S_STOP,
	S_SPEED,
	S_FREEZE,
	S_MIGRATE,
	S_POLL,
	S_SETTLE,
	S_CONT,
	S_DONE
};

/* The guest is paused while its memory is saved: as fast as the disk
 * takes it, not at QEMU's default 128 MiB/s. */
#define SNAP_MIGRATE_BPS (64ull << 30)

/* A snapshot being taken through the monitor, one command at a time. */
struct snap_op {
	struct sb_machine *m; /* NULL once the machine is freed */
	int memory;
	enum snap_stage stage;
	sb_snapshot_fn cb;
	void *ctx;
	struct sb_snapshot_info info;	     /* its names made at the end */
	char layer_path[SB_LAYER_PATH_MAX];  /* the frozen layer's file */
	char memory_path[SB_LAYER_PATH_MAX]; /* the memory state file, or "" */
	char next[SB_LAYER_PATH_MAX];	     /* the new top layer QEMU makes */
	double t_pause;
	double t_sent; /* when QEMU said the stream was sent */
	int rc;	       /* the first failure, kept while the guest is resumed */
	char why[512]; /* and its detail */
	sb_watch *w;   /* the migration poll's timer, or the done callback's */
};

static void snap_step(struct snap_op *op);

static double now_ms(struct sb_machine *m)
{
	return sb_loop_now(m->lr->loop) * 1000;
}

static uint64_t file_size(const char *path)
{
	struct stat st;

	return path[0] && stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Writes into buf (cap bytes) the local runner's name of path, a file
 * under home: path relative to home ("" for ""). Errors: SB_ERR_TOOBIG. */
static int home_name(const char *home, const char *path, char *buf, size_t cap)
{
	size_t n = strlen(home);

	if (!strncmp(path, home, n) && path[n] == '/')
		path += n + 1;
	if ((size_t)snprintf(buf, cap, "%s", path) >= cap)
		return sb_seterr(SB_ERR_TOOBIG, "the snapshot's name %s is too long", path);
	return SB_OK;
}

/* Reports op's end (from a timer or a monitor callback: never inside the
 * snapshot op's call) and frees it. */
static void snap_finish(struct snap_op *op)
{
	struct sb_machine *m = op->m;
	sb_snapshot_fn cb = op->cb;
	void *ctx = op->ctx;
	int rc = op->rc;
	struct sb_snapshot_info info = op->info;
	char why[sizeof op->why], layer[sizeof op->layer_path];
	char memory[sizeof op->memory_path], pending[PATH_CAP] = "";

	snprintf(why, sizeof why, "%s", op->why);
	memcpy(layer, op->layer_path, sizeof layer);
	memcpy(memory, op->memory_path, sizeof memory);
	sb_watch_stop(op->w);
	free(op);
	if (!m)
		return; /* the machine was freed: the next daemon ends it */
	m->snap = NULL;
	if (memory[0])
		pending_path(m->dir, pending, sizeof pending);
	if (rc == SB_OK && ((rc = home_name(m->lr->home, layer, info.layer_name,
					    sizeof info.layer_name)) ||
			    (rc = home_name(m->lr->home, memory, info.memory_name,
					    sizeof info.memory_name))))
		snprintf(why, sizeof why, "%s", sb_errmsg(rc));
	if (rc && memory[0]) { /* half made, and nothing names it */
		char part[sizeof memory + sizeof SB_VM_SAVE_PART];
		snprintf(part, sizeof part, "%s" SB_VM_SAVE_PART, memory);
		unlink(part); /* first: then no writer renames it after */
		unlink(memory);
	}
	if (rc) {
		sb_seterr(rc, "%s", why);
	}
	if (rc == SB_OK) {
		info.memory_bytes = memory[0] ? file_size(memory) : 0;
		info.bytes = file_size(layer) + info.memory_bytes;
		info.duration_ms = now_ms(m) - info.duration_ms;
	}
	cb(ctx, rc, rc == SB_OK ? &info : NULL); /* records it; may free m */
	if (pending[0])
		unlink(pending);
}

/* The machine is being freed: an op waiting on a timer goes now; one
 * waiting on a command goes when the closing monitor fails it. */
static void snap_orphan(struct sb_machine *m)
{
	struct snap_op *op = m->snap;

	if (!op)
		return;
	m->snap = NULL;
	op->m = NULL;
	if (op->w) {
		sb_watch_stop(op->w);
		free(op);
	}
}

/* Fails op with rc (detail kept); a guest paused for its memory is
 * resumed first (a disk snapshot never pauses it). */
static void snap_fail(struct snap_op *op, int rc)
{
	if (!op->rc) {
		op->rc = rc;
		snprintf(op->why, sizeof op->why, "%s", sb_errmsg(rc));
	}
	if (op->m && op->memory && op->t_pause > 0 && op->stage < S_CONT) {
		op->stage = S_CONT; /* the guest goes on, the snapshot failed */
		snap_step(op);
		return;
	}
	snap_finish(op);
}

static void on_snap_poll(void *ctx);

/* The files of op: the top is frozen as snapshot s<top>; QEMU makes layer
 * top + 1 (a file left there by a snapshot that failed is removed). */
static int snap_next(struct snap_op *op)
{
	struct sb_machine *m = op->m;
	unsigned n;
	int rc;

	if ((rc = sb_layers_next(m->lr->home, m->run, &n, op->next, sizeof op->next)) ||
	    (rc = sb_layers_path(m->lr->home, m->run, n - 1, op->layer_path,
				 sizeof op->layer_path)))
		return rc;
	op->info.layer = n - 1;
	if (op->memory)
		snprintf(op->memory_path, sizeof op->memory_path,
			 "%s/layers/%u.mem", m->dir, n - 1);
	return SB_OK;
}

/* Asks op's stage again after SNAP_POLL_S. */
static void snap_poll_later(struct snap_op *op)
{
	op->w = sb_loop_timer(op->m->lr->loop, SNAP_POLL_S, 0, on_snap_poll, op);
	if (!op->w)
		snap_fail(op, SB_ERR_NOMEM);
}

static void on_snap_reply(void *ctx, int rc, json_t *ret)
{
	struct snap_op *op = ctx;
	struct sb_machine *m = op->m;
	const char *st;

	if (!m) {
		free(op); /* the machine was freed while this command waited */
		return;
	}
	if (rc && op->stage == S_CONT) {
		op->stage = S_DONE;
		snap_fail(op, rc);
		return;
	}
	if (rc) {
		snap_fail(op, rc);
		return;
	}
	switch (op->stage) {
	case S_QUERY: {
		/* the disk's top node: the device's inserted node */
		json_t *dev = json_is_array(ret) ? json_array_get(ret, 0) : NULL;
		json_t *ins = json_object_get(dev, "inserted");
		const char *node = json_string_value(json_object_get(ins, "node-name"));
		if (!node || strlen(node) >= sizeof m->top_node) {
			snap_fail(op, sb_seterr(SB_ERR_PROTO, "QEMU names no disk node"));
			return;
		}
		snprintf(m->top_node, sizeof m->top_node, "%s", node);
		/* the layer QEMU writes is the top, whatever the link says;
		 * the one above it is QEMU's next */
		if ((rc = sb_layers_settle(m->lr->home, m->run,
					   json_string_value(json_object_get(ins, "file"))
					       ?: "")) ||
		    (rc = snap_next(op)) ||
		    (op->memory && (rc = pending_write(m->dir, op->info.layer)))) {
			snap_fail(op, rc);
			return;
		}
		op->stage = op->memory ? S_STOP : S_FREEZE;
		break;
	}
	case S_STOP: op->stage = S_SPEED; break;
	case S_SPEED: op->stage = S_FREEZE; break;
	case S_FREEZE:
		if ((rc = sb_layers_advance(m->lr->home, m->run, op->info.layer + 1))) {
			snap_fail(op, rc);
			return;
		}
		if (!op->memory) {
			op->info.paused_ms = now_ms(m) - op->t_pause;
			op->stage = S_DONE;
			snap_finish(op);
			return;
		}
		op->stage = S_MIGRATE;
		break;
	case S_MIGRATE: op->stage = S_POLL; break;
	case S_POLL:
		st = json_string_value(json_object_get(ret, "status"));
		if (st && !strcmp(st, "completed")) {
			op->t_sent = now_ms(m);
			op->stage = S_SETTLE;
			break;
		}
		if (st && (!strcmp(st, "failed") || !strcmp(st, "cancelled"))) {
			const char *why =
			    json_string_value(json_object_get(ret, "error-desc"));
			snap_fail(op, sb_seterr(SB_ERR_IO, "saving the memory failed: %s",
						why ? why : st));
			return;
		}
		snap_poll_later(op);
		return;
	case S_SETTLE:
		st = json_string_value(json_object_get(ret, "status"));
		if ((st && !strcmp(st, "finish-migrate")) ||
		    access(op->memory_path, F_OK)) {
			if (now_ms(m) - op->t_sent > SNAP_SAVE_MS)
				snap_fail(op, sb_seterr(SB_ERR_IO,
							"saving the memory failed: %s was "
							"not written in %d s",
							op->memory_path,
							SNAP_SAVE_MS / 1000));
			else
				snap_poll_later(op);
			return;
		}
		chmod(op->memory_path, 0444); /* frozen, as its layer */
		op->stage = S_CONT;
		break;
	case S_CONT:
		op->info.paused_ms = now_ms(m) - op->t_pause;
		op->stage = S_DONE;
		snap_finish(op);
		return;
	case S_DONE: return;
	}
	snap_step(op);
}

static void on_snap_poll(void *ctx)
{
	struct snap_op *op = ctx;

	sb_watch_stop(op->w);
	op->w = NULL;
	snap_step(op);
}

/* Sends the command of op's stage. */
static void snap_step(struct snap_op *op)
{
	struct sb_machine *m = op->m;
	json_t *args = NULL;
	const char *cmd = NULL;
	char node[24];
	int rc, ms = SNAP_CMD_MS;

	switch (op->stage) {
	case S_QUERY: cmd = "query-block"; break;
	case S_STOP:
		cmd = "stop";
		op->t_pause = now_ms(m);
		break;
	case S_SPEED:
		cmd = "migrate-set-parameters";
		args = json_pack("{s:I}", "max-bandwidth", (json_int_t)SNAP_MIGRATE_BPS);
		break;
	case S_FREEZE:
		snprintf(node, sizeof node, "layer%u", op->info.layer + 1);
		if (!op->memory)
			op->t_pause = now_ms(m); /* the disk's requests wait meanwhile */
		cmd = "blockdev-snapshot-sync";
		args = json_pack("{s:s, s:s, s:s, s:s, s:s}", "node-name", m->top_node,
				 "snapshot-file", op->next, "snapshot-node-name", node,
				 "format", "qcow2", "mode", "absolute-paths");
		break;
	case S_MIGRATE: {
		char *uri = sb_vm_save_uri(op->memory_path);
		cmd = "migrate";
		args = uri ? json_pack("{s:s}", "uri", uri) : NULL;
		free(uri);
		ms = SNAP_MIGRATE_MS;
		break;
	}
	case S_POLL: cmd = "query-migrate"; break;
	case S_SETTLE: cmd = "query-status"; break;
	case S_CONT: cmd = "cont"; break;
	case S_DONE: return;
	}
	if (op->stage == S_FREEZE || op->stage == S_MIGRATE || op->stage == S_SPEED) {
		if (!args) {
			snap_fail(op, SB_ERR_NOMEM);
			return;
		}
	}
	if (!m->qmp) {
		rc = sb_seterr(SB_ERR_IO, "QEMU's monitor went away during the snapshot");
	} else {
		rc = sb_qmp_send(m->qmp, loop_ms(m), cmd, args, ms, on_snap_reply, op);
		if (rc == SB_OK)
			qmp_arm(m);
	}
	json_decref(args);
	if (rc) {
		if (op->stage == S_CONT)
			op->stage = S_DONE; /* nothing more can be done */
		snap_fail(op, rc);
	}
}

/* --- merging a frozen layer into the one above it --- */

enum merge_stage { M_NODES, M_STREAM, M_POLL };

struct merge_op {
	struct sb_machine *m; /* NULL once the machine is freed */
	enum merge_stage stage;
	unsigned layer;
	char path[PATH_MAX], upper[PATH_MAX], base[PATH_MAX];
	char upper_node[64], base_node[64];
	sb_snapshot_fn cb;
	void *ctx;
	sb_watch *w;
};

static void merge_step(struct merge_op *op);

static void merge_finish(struct merge_op *op, int rc)
{
	struct sb_machine *m = op->m;
	sb_snapshot_fn cb = op->cb;
	void *ctx = op->ctx;

	sb_watch_stop(op->w);
	free(op);
	if (!m)
		return;
	m->merge = NULL;
	cb(ctx, rc, NULL);
}

/* The format node (not its file node) of the image file path, in a
 * query-named-block-nodes answer; NULL when none. */
static json_t *node_of(json_t *nodes, const char *path)
{
	size_t i;
	json_t *n;

	json_array_foreach(nodes, i, n)
	{
		const char *f = json_string_value(json_object_get(n, "file"));
		const char *drv = json_string_value(json_object_get(n, "drv"));
		if (f && drv && strcmp(drv, "file") && !strcmp(f, path))
			return n;
	}
	return NULL;
}

/* The node whose backing file is path. */
static json_t *node_above(json_t *nodes, const char *path)
{
	size_t i;
	json_t *n;

	json_array_foreach(nodes, i, n)
	{
		const char *b = json_string_value(json_object_get(n, "backing_file"));
		if (b && !strcmp(b, path))
			return n;
	}
	return NULL;
}

static void on_merge_timer(void *ctx)
{
	struct merge_op *op = ctx;

	sb_watch_stop(op->w);
	op->w = NULL;
	merge_step(op);
}

static void on_merge_reply(void *ctx, int rc, json_t *ret)
{
	struct merge_op *op = ctx;
	char backing[PATH_MAX];
	json_t *k, *u, *b;
	size_t i;
	json_t *job;
	int running = 0;

	if (!op->m) {
		free(op);
		return;
	}
	if (rc) {
		merge_finish(op, rc);
		return;
	}
	switch (op->stage) {
	case M_NODES:
		k = node_of(ret, op->path);
		u = node_above(ret, op->path);
		if (!k || !u) {
			merge_finish(op, sb_seterr(SB_ERR_NOTFOUND,
						   "layer %s is not in the VM's chain",
						   op->path));
			return;
		}
		snprintf(op->base, sizeof op->base, "%s",
			 json_string_value(json_object_get(k, "backing_file"))
			     ? json_string_value(json_object_get(k, "backing_file"))
			     : "");
		b = op->base[0] ? node_of(ret, op->base) : NULL;
		snprintf(op->upper, sizeof op->upper, "%s",
			 json_string_value(json_object_get(u, "file")));
		snprintf(op->upper_node, sizeof op->upper_node, "%s",
			 json_string_value(json_object_get(u, "node-name")));
		snprintf(op->base_node, sizeof op->base_node, "%s",
			 b ? json_string_value(json_object_get(b, "node-name")) : "");
		if (!b || !op->upper_node[0] || !op->base_node[0]) {
			merge_finish(op,
				     sb_seterr(SB_ERR_NOTFOUND,
					       "the nodes around layer %s are not named",
					       op->path));
			return;
		}
		op->stage = M_STREAM;
		break;
	case M_STREAM: op->stage = M_POLL; break;
	case M_POLL:
		json_array_foreach(ret, i, job)
		{
			const char *id =
			    json_string_value(json_object_get(job, "device"));
			running |= id && !strcmp(id, "sb-merge");
		}
		if (running) {
			if (!(op->w = sb_loop_timer(op->m->lr->loop, 0.05, 0,
						    on_merge_timer, op)))
				merge_finish(op, SB_ERR_NOMEM);
			return;
		}
		/* done: the layer above reads the base now, or the job failed */
		if (sb_disk_backing(op->upper, backing, sizeof backing) ||
		    strcmp(backing, op->base)) {
			merge_finish(op, sb_seterr(SB_ERR_IO,
						   "merging layer %s into %s failed "
						   "(see qemu.log)",
						   op->path, op->upper));
			return;
		}
		if (unlink(op->path))
			rc = sb_seterr(SB_ERR_IO, "%s: %s", op->path, strerror(errno));
		merge_finish(op, rc);
		return;
	}
	merge_step(op);
}

static void merge_step(struct merge_op *op)
{
	struct sb_machine *m = op->m;
	json_t *args = NULL;
	const char *cmd = "query-named-block-nodes";
	int rc;

	if (op->stage == M_STREAM) {
		cmd = "block-stream";
		args = json_pack("{s:s, s:s, s:s}", "job-id", "sb-merge", "device",
				 op->upper_node, "base-node", op->base_node);
		if (!args) {
			merge_finish(op, SB_ERR_NOMEM);
			return;
		}
	} else if (op->stage == M_POLL) {
		cmd = "query-block-jobs";
	}
	rc = m->qmp ? sb_qmp_send(m->qmp, loop_ms(m), cmd, args, SNAP_CMD_MS,
				  on_merge_reply, op)
		    : sb_seterr(SB_ERR_IO, "QEMU's monitor went away during a merge");
	json_decref(args);
	if (rc)
		merge_finish(op, rc);
	else
		qmp_arm(m);
}

/* As snap_orphan, for a merge. */
static void merge_orphan(struct sb_machine *m)
{
	if (!m->merge)
		return;
	m->merge->m = NULL;
	if (m->merge->w) {
		sb_watch_stop(m->merge->w);
		free(m->merge);
	}
	m->merge = NULL;
}

static int local_disk_open(void *runner, const char *run, const char *layer,
			   sb_fsread **out)
{
	struct sb_local_runner *lr = runner;
	char path[SB_LAYER_PATH_MAX];
	int n, rc;

	if (layer) /* a name it made: relative to its home */
		n = snprintf(path, sizeof path, "%s/%s", lr->home, layer);
	else
		n = snprintf(path, sizeof path, "%s/runs/%s/disk.qcow2", lr->home, run);
	if (n < 0 || (size_t)n >= sizeof path)
		return sb_seterr(SB_ERR_TOOBIG, "state directory path too long");
	if ((rc = sb_layers_check(lr->home, path))) /* qemu-nbd would follow it */
		return rc;
	return sb_fsread_open(path, out);
}

static int local_template_open(void *runner, const char *name, const char *hash,
			       sb_fsread **out)
{
	struct sb_local_runner *lr = runner;
	struct sb_template t;
	int rc;

	if ((rc = sb_template_load(lr->home, name, &t)))
		return rc;
	if (strcmp(t.hash, hash))
		return sb_seterr(SB_ERR_STATE, "template %s was built again", name);
	return sb_fsread_open_raw(t.rootfs, out);
}

static int local_readers(void *runner, const char *run, unsigned layer,
			 char (*users)[SB_RUN_MAX], size_t max, size_t *count)
{
	struct sb_local_runner *lr = runner;
	char one[1][SB_RUN_MAX];

	return max ? sb_layers_users(lr->home, run, layer, users, max, count)
		   : sb_layers_users(lr->home, run, layer, one, 1, count);
}

static int local_remove_layer(void *runner, const char *run, unsigned layer)
{
	struct sb_local_runner *lr = runner;

	return sb_layers_remove(lr->home, run, layer);
}

static int local_release(void *runner, const char *run, int dry,
			 struct sb_layers_freed *out)
{
	struct sb_local_runner *lr = runner;

	return sb_layers_release(lr->home, run, dry, out);
}

static int local_usage(void *runner, struct sb_layers_usage *u)
{
	struct sb_local_runner *lr = runner;

	return sb_layers_usage(lr->home, u);
}

static int local_merge(struct sb_machine *m, unsigned layer, sb_snapshot_fn cb, void *ctx)
{
	char path[SB_LAYER_PATH_MAX];
	struct merge_op *op;
	int rc;

	if (m->snap || m->merge || m->ended)
		return sb_seterr(SB_ERR_STATE,
				 "run %s: a snapshot or merge is under way, or it ended",
				 m->run);
	if (!m->qmp_ready || m->reattached)
		return sb_seterr(SB_ERR_UNAVAIL, "the VM's monitor is not connected yet");
	/* its readers: the caller's to check, off the loop (they are every
	 * layer of every run) */
	if ((rc = sb_layers_path(m->lr->home, m->run, layer, path, sizeof path)))
		return rc;
	if (!(op = calloc(1, sizeof *op)))
		return SB_ERR_NOMEM;
	if (!realpath(path, op->path)) {
		free(op);
		return sb_seterr(SB_ERR_NOTFOUND, "%s: %s", path, strerror(errno));
	}
	op->m = m;
	op->layer = layer;
	op->cb = cb;
	op->ctx = ctx;
	if ((rc = sb_qmp_send(m->qmp, loop_ms(m), "query-named-block-nodes", NULL,
			      SNAP_CMD_MS, on_merge_reply, op))) {
		free(op);
		return rc;
	}
	qmp_arm(m);
	m->merge = op;
	return SB_OK;
}

static void on_snap_ended(void *ctx)
{
	snap_finish(ctx);
}

static int local_snapshot(struct sb_machine *m, const struct sb_snapshot_req *req,
			  sb_snapshot_fn cb, void *ctx)
{
	struct snap_op *op;
	unsigned top;
	int rc;

	if (m->snap || m->merge)
		return sb_seterr(SB_ERR_STATE, "a snapshot of run %s is being taken",
				 m->run);
	if (m->ended && req->memory)
		return sb_seterr(SB_ERR_STATE, "run %s has ended: no memory to save",
				 m->run);
	if (!m->ended && (!m->qmp_ready || m->reattached))
		return sb_seterr(SB_ERR_UNAVAIL, "the VM's monitor is not connected yet");
	if (!(op = calloc(1, sizeof *op)))
		return SB_ERR_NOMEM;
	op->m = m;
	op->memory = req->memory;
	op->cb = cb;
	op->ctx = ctx;
	op->info.duration_ms = now_ms(m); /* made a duration at the end */
	if (m->ended) {
		/* the disk as the machine left it: its top, frozen */
		if ((rc = sb_layers_top(m->lr->home, m->run, &top)) ||
		    (rc = sb_layers_freeze(m->lr->home, m->run, top)) ||
		    (rc = sb_layers_path(m->lr->home, m->run, top, op->layer_path,
					 sizeof op->layer_path)))
			goto fail;
		op->info.layer = top;
		if (!(op->w = sb_loop_timer(m->lr->loop, 0, 0, on_snap_ended, op))) {
			rc = SB_ERR_NOMEM;
			goto fail;
		}
		m->snap = op;
		return SB_OK;
	}
	/* the first command is sent here: a failure is this call's */
	if ((rc = sb_qmp_send(m->qmp, loop_ms(m), "query-block", NULL, SNAP_CMD_MS,
			      on_snap_reply, op)))
		goto fail;
	qmp_arm(m);
	m->snap = op;
	return SB_OK;
fail:
	free(op);
	return rc;
}

static void on_found(void *ctx, pid_t pid, const char *qmp)
{
	(void)qmp;
	*(pid_t *)ctx = pid;
}

/* The pid of the QEMU of the run in dir: the one dir/qemu.pid names when
 * its command line names the run's directory, else the one whose command
 * line names dir/qmp.sock (a QEMU a daemon died starting, before its pid
 * file was written), else 0. */
static pid_t machine_pid(const char *dir, const char *run)
{
	char path[PATH_CAP], want[SB_RUN_MAX + 16];
	FILE *f;
	int pid = 0;
	pid_t found = 0;

	snprintf(path, sizeof path, "%s/qemu.pid", dir);
	if ((f = fopen(path, "re"))) {
		if (fscanf(f, "%d", &pid) != 1)
			pid = 0;
		fclose(f);
	}
	snprintf(want, sizeof want, "/runs/%s/", run);
	if (sb_proc_cmdline_has(pid, want))
		return (pid_t)pid;
	snprintf(path, sizeof path, "%s/qmp.sock", dir);
	sb_vm_each(path, on_found, &found);
	return found;
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
	m->reattached = 1;
	m->pending = pending_read(m->dir);
	if (p->net.mode == SB_NET_ACL) {
		if (!lr->net) {
			rc =
			    sb_seterr(SB_ERR_UNAVAIL, "network acl is not enforced here");
			goto fail;
		}
		if ((rc = sb_net_run_reattach(lr->net, p->run, &p->net, &m->net)))
			goto fail;
	}
	if ((rc = machine_watch(m, ev, ctx)))
		goto fail;
	if (!(m->child_w = sb_loop_child(lr->loop, m->pid, on_child, m))) {
		rc = SB_ERR_NOMEM;
		goto fail;
	}
	if (m->net)
		sb_net_run_start(m->net, on_net_report, m);
	*out = m;
	return SB_OK;
fail:
	local_free(m); /* its network is left: the caller reaps the machine */
	return rc;
}

/* A memory snapshot the dead daemon was taking: its memory file goes
 * unless the record names it (saved: the newest layer a snapshot.saved
 * names, or -1); its layer, frozen or not, stays in the chain as it is
 * (QEMU may write the one made on it). The guest it paused goes on once
 * the monitor is back (on_settle_status). */
static int local_interrupted(struct sb_machine *m, long saved)
{
	char path[PATH_CAP];

	if (m->pending < 0)
		return 0;
	if (m->pending > saved) {
		/* the part first: a writer still at it then has nothing to
		 * rename afterwards */
		if (snprintf(path, sizeof path, "%s/layers/%ld.mem" SB_VM_SAVE_PART,
			     m->dir, m->pending) < (int)sizeof path)
			unlink(path);
		snprintf(path, sizeof path, "%s/layers/%ld.mem", m->dir, m->pending);
		unlink(path);
	}
	return 1;
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
	char dir[PATH_CAP], mem[PATH_CAP + 32];
	struct stat st;
	pid_t pid;
	long n;

	if ((pid = sb_local_qemu_pid(lr->home, run)))
		sb_proc_kill(pid, SIGKILL);
	snprintf(dir, sizeof dir, "%s/runs/%s", lr->home, run);
	if ((n = pending_read(dir)) >= 0) {
		/* a memory snapshot its daemon died taking: a memory file not
		 * yet made read-only was never complete, so nothing names it */
		snprintf(mem, sizeof mem, "%s/layers/%ld.mem", dir, n);
		if (stat(mem, &st) == 0 && (st.st_mode & 0222))
			unlink(mem);
		pending_remove(dir);
	}
	if (lr->net)
		sb_net_run_remove(lr->net, run);
}

static int sweep_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		return rmdir(path) ? errno : 0;
	return unlink(path) ? errno : 0;
}

struct net_live {
	struct sb_local_runner *lr;
	int (*known)(void *ctx, const char *run);
	void *ctx;
};

/* A run whose network stays: it is live and its QEMU lives. */
static int net_live(void *ctx, const char *run)
{
	struct net_live *l = ctx;

	return l->known(l->ctx, run) == 2 && sb_local_qemu_pid(l->lr->home, run);
}

/* A QEMU of the home whose run is not live (its record ended it while it
 * ran on: a daemon died starting it) is ended. */
static void sweep_qemu(void *ctx, pid_t pid, const char *qmp)
{
	struct net_live *l = ctx;
	const char *run = qmp + strlen(l->lr->home) + sizeof "/runs/" - 1;
	char id[SB_RUN_MAX];

	if (strspn(run, "0123456789abcdef") != SB_RUN_ID_LEN ||
	    strcmp(run + SB_RUN_ID_LEN, "/qmp.sock"))
		return;
	snprintf(id, sizeof id, "%.*s", SB_RUN_ID_LEN, run);
	if (l->known(l->ctx, id) != 2)
		sb_proc_kill(pid, SIGKILL);
}

/* Releases the files of the removed runs of home (known 3) no other run
 * reads; again while a pass frees a layer, since a removed fork freed
 * lets its removed parent's layers go. */
static void sweep_removed(const char *home, int (*known)(void *ctx, const char *run),
			  void *ctx)
{
	char dir[PATH_CAP];
	struct sb_layers_freed f;
	struct dirent *e;
	unsigned freed = 1;
	DIR *d;

	snprintf(dir, sizeof dir, "%s/runs", home);
	for (int pass = 0; freed && pass < 16; pass++) {
		if (!(d = opendir(dir)))
			return;
		freed = 0;
		while ((e = readdir(d)))
			if (strlen(e->d_name) == SB_RUN_ID_LEN && known(ctx, e->d_name) == 3 &&
			    sb_layers_release(home, e->d_name, 0, &f) == SB_OK)
				freed += f.layers;
		closedir(d);
	}
}

static void local_sweep(void *runner, int (*known)(void *ctx, const char *run), void *ctx)
{
	struct sb_local_runner *lr = runner;
	struct net_live nl = {lr, known, ctx};
	char dir[PATH_CAP], path[PATH_CAP + SB_RUN_MAX];
	struct dirent *e;
	DIR *d;

	snprintf(dir, sizeof dir, "%s/runs", lr->home);
	if (!(d = opendir(dir)))
		return;
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		/* only what names a run the daemon made: 12 lowercase hex */
		if (n != SB_RUN_ID_LEN || strspn(e->d_name, "0123456789abcdef") != n ||
		    known(ctx, e->d_name))
			continue;
		local_reap(lr, e->d_name);
		snprintf(path, sizeof path, "%s/%.*s", dir, SB_RUN_ID_LEN, e->d_name);
		nftw(path, sweep_rm, 8, FTW_DEPTH | FTW_PHYS);
	}
	closedir(d);
	sweep_removed(lr->home, known, ctx);
	snprintf(dir, sizeof dir, "%s/runs/", lr->home);
	sb_vm_each(dir, sweep_qemu, &nl);
	if (lr->net)
		sb_net_sweep(lr->net, net_live, &nl);
}

/* The settings' capacity, else the host's (runner.h, sb_local_runner). */
static void local_capacity(void *runner, uint64_t *cpus, uint64_t *memory_mib)
{
	const struct sb_local_runner *lr = runner;
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t mib = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page >> 20 : 0;
	uint64_t reserve = mib / 10 > SB_LOCAL_MEMORY_RESERVE_MIB ? mib / 10
								   : SB_LOCAL_MEMORY_RESERVE_MIB;

	*cpus = lr->capacity_cpus ? lr->capacity_cpus
				  : (uint64_t)(n > 0 ? n : 1) * SB_LOCAL_CPU_OVERCOMMIT;
	*memory_mib = lr->capacity_memory_mib ? lr->capacity_memory_mib
		      : mib > reserve	      ? mib - reserve
					      : mib;
}

const struct sb_runner_ops sb_local_runner_ops = {
    .name = "local",
    .create = local_create,
    .start = local_start,
    .signal = local_signal,
    .stop = local_stop,
    .snapshot = local_snapshot,
    .create_from = local_create_from,
    .merge = local_merge,
    .readers = local_readers,
    .remove_layer = local_remove_layer,
    .release = local_release,
    .usage = local_usage,
    .disk_open = local_disk_open,
    .template_open = local_template_open,
    .reattach = local_reattach,
    .interrupted = local_interrupted,
    .reap = local_reap,
    .sweep = local_sweep,
    .capacity = local_capacity,
    .free = local_free,
    .discard = local_discard,
    .restored = local_restored,
    .warm = local_warm,
    .iface = local_iface,
    .grant = local_grant,
};
