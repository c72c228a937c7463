/* runs.c - the run manager: spec -> events -> microVM -> events.
 *
 * Everything here runs on the daemon's loop thread. Each live run has a
 * QEMU child, a channel socket to its guest agent, a QMP socket, and
 * timers (boot deadline, run timeout, stop grace).
 */
#include "engine/runs/runs.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/gateway/access.h"
#include "engine/daemon/daemon.h"
#include "engine/error.h"
#include "engine/home.h"
#include "engine/payload.h"
#include "engine/runs/spec.h"
#include "engine/runs/template.h"
#include "engine/gateway/tunnel.h"
#include "netpolicy/netpolicy.h"
#include "projections/views.h"
#include "vmm/accel.h"
#include "vmm/chan.h"
#include "vmm/disk.h"
#include "vmm/qemu.h"

#define BOOT_DEADLINE_S 120.0 /* HELLO from the agent, under TCG; SANBOX_BOOT_TIMEOUT */
#define STOP_GRACE_S 5.0      /* SIGTERM to the harness, then the VM ends */
#define KILL_GRACE_S 5.0      /* SIGTERM to QEMU, then SIGKILL */
#define READ_BUDGET (256u << 10) /* bytes read from one guest per wake-up */
#define GUEST_RATE 200.0      /* guest events per second, sustained */
#define GUEST_BURST 2000.0
#define GUEST_TUNNEL_PORT 4000 /* the gateway, as the harness sees it */

struct run {
	struct sb_runs *owner;
	char id[SB_RUN_MAX];
	char dir[PATH_MAX];
	pid_t pid;
	int chan_lfd, chan_fd, qmp_lfd, qmp_fd;
	sb_watch *chan_lw, *chan_w, *qmp_lw, *child_w, *timeout_w, *boot_w, *grace_w;
	sb_chan_reader *reader;
	msgpack_sbuffer out;  /* bytes waiting to go to the guest */
	size_t out_off;
	msgpack_sbuffer spec; /* the SPEC frame, sent on HELLO */
	int hello, done, exited, killing;
	char stop_reason[32];
	char setup_error[256];	  /* why the agent could not set the run up (DONE) */
	double tokens, tokens_ts; /* guest event rate limiter */
	uint64_t dropped;
	double warned_ts;
	struct sb_access acc;     /* models, budget, secrets: resolved */
	char vkey[SB_VKEY_MAX];   /* the run's virtual key at the gateway */
	int registered;           /* known to the gateway */
	sb_tunnel *tunnel;        /* guest streams to the gateway */
	uint64_t gw_refused;      /* tunnel connections the gateway refused */
	double gw_warned_ts;
	struct run *next;
};

struct sb_runs {
	struct sb_daemon *d;
	struct run *live;
	unsigned active;
	double boot_deadline; /* seconds from QEMU start to the agent's HELLO */
};

static int emit_map(struct sb_daemon *d, const char *run, const char *type, enum sb_source src,
		    const msgpack_sbuffer *buf)
{
	return buf->data ? sb_daemon_emit(d, run, type, src, buf->data, buf->size, NULL)
			 : SB_ERR_NOMEM;
}

/* Emits a host event whose payload is alternating key/value C strings. */
static int emit_strs(struct sb_daemon *d, const char *run, const char *type, ...)
{
	msgpack_sbuffer buf;
	msgpack_packer pk;
	va_list ap;
	const char *k;
	size_t n = 0;
	int rc;

	va_start(ap, type);
	while (va_arg(ap, const char *))
		n++;
	va_end(ap);
	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, n / 2);
	va_start(ap, type);
	while ((k = va_arg(ap, const char *)))
		sb_pack_kstr(&pk, k, va_arg(ap, const char *));
	va_end(ap);
	rc = emit_map(d, run, type, SB_SRC_HOST, &buf);
	msgpack_sbuffer_destroy(&buf);
	return rc;
}

static void warn(struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Writes a run.warning (host) for r. */
static void warn(struct run *r, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	emit_strs(r->owner->d, r->id, "run.warning", "message", msg, NULL);
}

/* --- reconciliation at start-up --- */

/* Ends the QEMU a previous daemon left for run, if its pid file names a
 * process that is really that run's QEMU. */
static void kill_orphan_vm(struct sb_runs *rs, const char *run)
{
	char path[PATH_MAX], cmd[8192];
	FILE *f;
	int pid = 0;
	ssize_t n;
	int fd;

	if (snprintf(path, sizeof path, "%s/runs/%s/qemu.pid", rs->d->home, run) >= (int)sizeof path)
		return;
	f = fopen(path, "re");
	if (!f)
		return;
	if (fscanf(f, "%d", &pid) != 1)
		pid = 0;
	fclose(f);
	if (pid <= 1)
		return;
	snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, cmd, sizeof cmd - 1);
	close(fd);
	if (n <= 0)
		return;
	for (ssize_t i = 0; i < n; i++)
		if (!cmd[i])
			cmd[i] = ' ';
	cmd[n] = 0;
	snprintf(path, sizeof path, "/runs/%s/", run);
	if (strstr(cmd, path))
		sb_vm_kill(pid, SIGKILL);
}

static int reconcile(struct sb_runs *rs)
{
	char(*runs)[SB_RUN_MAX];
	size_t n;
	int rc = sb_runstate_live(rs->d->proj, NULL, &runs, &n);

	for (size_t i = 0; rc == SB_OK && i < n; i++) {
		kill_orphan_vm(rs, runs[i]);
		rc = emit_strs(rs->d, runs[i], "run.failed", "reason", "daemon-restart", NULL);
		if (rc == SB_OK)
			rc = emit_strs(rs->d, runs[i], "run.stopped", "reason", "failed", NULL);
	}
	free(runs);
	if (rc == SB_OK)
		rc = sb_daemon_catch_up(rs->d);
	return rc;
}

/* The boot deadline: $SANBOX_BOOT_TIMEOUT (seconds, or with s or m), else
 * BOOT_DEADLINE_S. */
static int boot_deadline(double *out)
{
	const char *s = getenv("SANBOX_BOOT_TIMEOUT");
	char *end;
	double v;

	*out = BOOT_DEADLINE_S;
	if (!s || !*s)
		return SB_OK;
	v = strtod(s, &end);
	if (end != s && !strcmp(end, "m"))
		v *= 60, end++;
	else if (end != s && !strcmp(end, "s"))
		end++;
	if (end == s || *end || !(v >= 1 && v <= 86400))
		return sb_seterr(
		    SB_ERR_INVAL,
		    "SANBOX_BOOT_TIMEOUT must be 1 to 86400 seconds (e.g. 120, 90s, 3m), "
		    "not '%.40s'",
		    s);
	*out = v;
	return SB_OK;
}

int sb_runs_open(struct sb_daemon *d, struct sb_runs **out)
{
	struct sb_runs *rs = calloc(1, sizeof *rs);
	int rc;

	if (!rs)
		return SB_ERR_NOMEM;
	rs->d = d;
	if ((rc = boot_deadline(&rs->boot_deadline)) || (rc = reconcile(rs))) {
		free(rs);
		return rc;
	}
	*out = rs;
	return SB_OK;
}

unsigned sb_runs_active(struct sb_runs *rs)
{
	return rs->active;
}

/* --- one run's resources --- */

static void run_close_fds(struct run *r)
{
	sb_watch_stop(r->chan_lw);
	sb_watch_stop(r->chan_w);
	sb_watch_stop(r->qmp_lw);
	r->chan_lw = r->chan_w = r->qmp_lw = NULL;
	if (r->chan_lfd >= 0)
		close(r->chan_lfd);
	if (r->chan_fd >= 0)
		close(r->chan_fd);
	if (r->qmp_lfd >= 0)
		close(r->qmp_lfd);
	if (r->qmp_fd >= 0)
		close(r->qmp_fd);
	r->chan_lfd = r->chan_fd = r->qmp_lfd = r->qmp_fd = -1;
}

/* Drops the SPEC frame, wiping it first: it holds env-scoped secrets. */
static void spec_wipe(struct run *r)
{
	if (r->spec.data)
		sodium_memzero(r->spec.data, r->spec.alloc);
	msgpack_sbuffer_destroy(&r->spec);
	msgpack_sbuffer_init(&r->spec);
}

static void run_free(struct run *r)
{
	if (!r)
		return;
	run_close_fds(r);
	sb_watch_stop(r->child_w);
	sb_watch_stop(r->timeout_w);
	sb_watch_stop(r->boot_w);
	sb_watch_stop(r->grace_w);
	sb_chan_reader_free(r->reader);
	sb_tunnel_close(r->tunnel); /* closes its gateway connections */
	if (r->registered)
		sb_gateway_run_remove(r->owner->d->gateway, r->id);
	sb_access_free(&r->acc);
	spec_wipe(r);
	msgpack_sbuffer_destroy(&r->out);
	sodium_memzero(r->vkey, sizeof r->vkey);
	free(r);
}

static void run_unlink(struct run *r)
{
	for (struct run **p = &r->owner->live; *p; p = &(*p)->next) {
		if (*p == r) {
			*p = r->next;
			r->owner->active--;
			return;
		}
	}
}

void sb_runs_close(struct sb_runs *rs)
{
	if (!rs)
		return;
	while (rs->live) {
		struct run *r = rs->live;
		rs->live = r->next;
		run_free(r); /* the VM keeps running; the next daemon reconciles */
	}
	free(rs);
}

static struct run *run_find(struct sb_runs *rs, const char *id)
{
	for (struct run *r = rs->live; r; r = r->next)
		if (!strcmp(r->id, id))
			return r;
	return NULL;
}

/* --- the channel to the guest --- */

static void chan_flush(struct run *r)
{
	while (r->chan_fd >= 0 && r->out_off < r->out.size) {
		ssize_t n = write(r->chan_fd, r->out.data + r->out_off, r->out.size - r->out_off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		r->out_off += (size_t)n;
	}
	if (r->out_off == r->out.size) {
		r->out.size = r->out_off = 0;
	}
	if (r->chan_w)
		sb_watch_io_set(r->chan_w, SB_READ | (r->out.size ? SB_WRITE : 0));
	if (r->tunnel && r->out.size - r->out_off < SB_TUNNEL_BACKLOG)
		sb_tunnel_drained(r->tunnel);
}

static void chan_send(struct run *r, const void *frame, size_t len)
{
	msgpack_sbuffer_write(&r->out, frame, len);
	chan_flush(r);
}

static void chan_signal(struct run *r, int sig)
{
	msgpack_sbuffer buf;
	msgpack_packer pk;
	size_t start;

	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	if (sb_chan_begin(&buf, &pk, SB_CHAN_SIGNAL, 0, &start) == SB_OK) {
		msgpack_pack_map(&pk, 1);
		sb_pack_ku64(&pk, "signal", (uint64_t)sig);
		if (sb_chan_end(&buf, start) == SB_OK)
			chan_send(r, buf.data, buf.size);
	}
	msgpack_sbuffer_destroy(&buf);
}

/* Token bucket: a guest may emit GUEST_RATE events/s with GUEST_BURST. */
static int guest_allowed(struct run *r)
{
	double now = sb_loop_now(r->owner->d->loop);

	r->tokens += (now - r->tokens_ts) * GUEST_RATE;
	if (r->tokens > GUEST_BURST)
		r->tokens = GUEST_BURST;
	r->tokens_ts = now;
	if (r->tokens < 1) {
		r->dropped++;
		if (now - r->warned_ts >= 1.0) {
			r->warned_ts = now;
			warn(r, "guest event rate limit: %llu events dropped so far",
			     (unsigned long long)r->dropped);
		}
		return 0;
	}
	r->tokens -= 1;
	return 1;
}

/* Appends an event the guest sent, as src (SB_SRC_GUEST for the agent's
 * own frames, SB_SRC_HARNESS for lines of $SANBOX_EVENTS); refusals become
 * a (rate-limited) warning, never an error of the run. */
static void guest_event(struct run *r, const char *type, enum sb_source src,
			const msgpack_object *payload)
{
	msgpack_sbuffer buf;
	msgpack_packer pk;
	double now;
	int rc;

	if (!guest_allowed(r))
		return;
	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	msgpack_pack_object(&pk, *payload);
	rc = emit_map(r->owner->d, r->id, type, src, &buf);
	msgpack_sbuffer_destroy(&buf);
	if (rc) {
		now = sb_loop_now(r->owner->d->loop);
		if (now - r->warned_ts >= 0.2) {
			r->warned_ts = now;
			warn(r, "dropped a guest event: %s", sb_errmsg(rc));
		}
		return;
	}
	if (!strcmp(type, "run.exited"))
		r->exited = 1;
}

static void guest_event_json(struct run *r, const msgpack_object *body)
{
	json_error_t jerr;
	json_t *j, *type, *payload;
	msgpack_sbuffer buf;
	msgpack_packer pk;
	msgpack_zone zone;
	msgpack_object obj;

	if (body->type != MSGPACK_OBJECT_BIN && body->type != MSGPACK_OBJECT_STR)
		return;
	j = json_loadb(body->via.bin.ptr, body->via.bin.size, JSON_REJECT_DUPLICATES, &jerr);
	type = json_object_get(j, "type");
	payload = json_object_get(j, "payload");
	if (!j || !json_is_string(type) || !json_is_object(payload)) {
		if (guest_allowed(r))
			warn(r, "dropped a harness event line: %s",
			     j ? "needs {\"type\": ..., \"payload\": {...}}" : jerr.text);
		json_decref(j);
		return;
	}
	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	if (msgpack_zone_init(&zone, 2048)) {
		if (sb_json_to_msgpack(payload, &pk) == SB_OK && buf.data &&
		    sb_payload_parse(buf.data, buf.size, &zone, &obj) == SB_OK)
			guest_event(r, json_string_value(type), SB_SRC_HARNESS, &obj);
		msgpack_zone_destroy(&zone);
	}
	msgpack_sbuffer_destroy(&buf);
	json_decref(j);
}

static void send_close(struct run *r, uint64_t stream)
{
	msgpack_sbuffer buf;
	msgpack_packer pk;
	size_t start;

	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	if (sb_chan_begin(&buf, &pk, SB_CHAN_CLOSE, stream, &start) == SB_OK) {
		msgpack_pack_nil(&pk);
		if (sb_chan_end(&buf, start) == SB_OK)
			chan_send(r, buf.data, buf.size);
	}
	msgpack_sbuffer_destroy(&buf);
}

/* --- the tunnel's view of the run (engine/tunnel.h) --- */

static void tun_send(void *ctx, int kind, uint64_t stream, const void *data, size_t len)
{
	struct run *r = ctx;
	msgpack_sbuffer buf;
	msgpack_packer pk;
	size_t start;

	if (kind == SB_CHAN_CLOSE) {
		send_close(r, stream);
		return;
	}
	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	if (sb_chan_begin(&buf, &pk, SB_CHAN_DATA, stream, &start) == SB_OK) {
		msgpack_pack_bin_with_body(&pk, data, len);
		if (sb_chan_end(&buf, start) == SB_OK)
			chan_send(r, buf.data, buf.size);
	}
	msgpack_sbuffer_destroy(&buf);
}

static size_t tun_backlog(void *ctx)
{
	struct run *r = ctx;

	return r->out.size - r->out_off;
}

/* A connection to the gateway, tied to the run; a refusal (the run holds
 * its share, say) is a run.warning at most once a second. */
static int tun_connect(void *ctx, int *fd)
{
	struct run *r = ctx;
	int rc = sb_gateway_connect(r->owner->d->gateway, r->id, fd);
	double now;

	if (rc) {
		r->gw_refused++;
		now = sb_loop_now(r->owner->d->loop);
		if (now - r->gw_warned_ts >= 1.0) {
			r->gw_warned_ts = now;
			warn(r, "gateway: tunnel connection refused (%llu so far): %s",
			     (unsigned long long)r->gw_refused, sb_errmsg(rc));
		}
	}
	return rc;
}

static const struct sb_tunnel_ops tunnel_ops = {
	.send = tun_send,
	.backlog = tun_backlog,
	.connect = tun_connect,
};

static void on_frame(struct run *r, const struct sb_chan_frame *f)
{
	const msgpack_object *type, *payload;
	char t[SB_TYPE_MAX];

	switch (f->kind) {
	case SB_CHAN_HELLO:
		if (!r->hello) {
			r->hello = 1;
			sb_watch_stop(r->boot_w);
			r->boot_w = NULL;
			chan_send(r, r->spec.data, r->spec.size);
			spec_wipe(r); /* the inputs: keep one copy */
		}
		break;
	case SB_CHAN_EVENT:
		type = sb_map_get(&f->body, "type");
		payload = sb_map_get(&f->body, "payload");
		if (!type || type->type != MSGPACK_OBJECT_STR || type->via.str.size >= sizeof t ||
		    !payload || payload->type != MSGPACK_OBJECT_MAP) {
			if (guest_allowed(r))
				warn(r, "dropped a malformed guest event frame");
			break;
		}
		memcpy(t, type->via.str.ptr, type->via.str.size);
		t[type->via.str.size] = 0;
		guest_event(r, t, SB_SRC_GUEST, payload);
		break;
	case SB_CHAN_EVENT_JSON:
		guest_event_json(r, &f->body);
		break;
	case SB_CHAN_OPEN:
	case SB_CHAN_DATA:
	case SB_CHAN_CLOSE:
		if (r->tunnel)
			sb_tunnel_frame(r->tunnel, f->kind, f->stream, &f->body);
		else if (f->kind == SB_CHAN_OPEN)
			send_close(r, f->stream);
		break;
	case SB_CHAN_DONE:
		r->done = 1;
		sb_map_str(&f->body, "error", r->setup_error, sizeof r->setup_error);
		for (char *p = r->setup_error; *p; p++)
			if ((unsigned char)*p < 0x20)
				*p = ' '; /* guest text: keep the reason one line */
		break;
	default:
		break; /* LOG: ignored */
	}
}

static void on_chan_io(void *ctx, int revents)
{
	struct run *r = ctx;
	struct sb_chan_frame f;
	char buf[65536];
	size_t budget = READ_BUDGET;
	int rc;

	if (revents & SB_WRITE)
		chan_flush(r);
	if (!(revents & SB_READ))
		return;
	while (budget > 0) {
		ssize_t n = read(r->chan_fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			/* the guest side closed: QEMU is ending */
			sb_watch_stop(r->chan_w);
			r->chan_w = NULL;
			close(r->chan_fd);
			r->chan_fd = -1;
			return;
		}
		budget -= (size_t)n > budget ? budget : (size_t)n;
		if ((rc = sb_chan_reader_feed(r->reader, buf, (size_t)n)))
			break;
		while ((rc = sb_chan_reader_next(r->reader, &f)) != SB_END) {
			if (rc == SB_OK)
				on_frame(r, &f);
			else if (rc == SB_ERR_PROTO && sb_chan_reader_pending(r->reader) > 0)
				continue; /* a bad frame, skipped */
			else
				break;
		}
		if (rc != SB_END && rc != SB_OK && rc != SB_ERR_PROTO)
			break;
	}
	if (budget == 0)
		return; /* fairness: come back on the next loop turn */
	warn(r, "guest channel broke its framing (%s); closing it", sb_errmsg(rc));
	sb_watch_stop(r->chan_w);
	r->chan_w = NULL;
	close(r->chan_fd);
	r->chan_fd = -1;
}

static void on_chan_accept(void *ctx, int revents)
{
	struct run *r = ctx;
	int fd;

	if (sb_unix_accept(r->chan_lfd, 0, &fd))
		return;
	if (r->chan_fd >= 0) {
		close(fd); /* one connection per run */
		return;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	r->chan_fd = fd;
	r->chan_w = sb_loop_io(r->owner->d->loop, fd, SB_READ, on_chan_io, r);
}

static void on_qmp_accept(void *ctx, int revents)
{
	struct run *r = ctx;
	int fd;

	if (sb_unix_accept(r->qmp_lfd, 0, &fd))
		return;
	if (r->qmp_fd >= 0)
		close(r->qmp_fd);
	r->qmp_fd = fd; /* kept open: QEMU waits on its monitor otherwise */
}

/* --- ending a run --- */

static void on_kill_grace(void *ctx)
{
	struct run *r = ctx;

	sb_watch_stop(r->grace_w);
	r->grace_w = NULL;
	sb_vm_kill(r->pid, SIGKILL);
}

/* Ends the VM: SIGTERM to QEMU now, SIGKILL after KILL_GRACE_S. */
static void vm_end(struct run *r)
{
	if (r->killing)
		return;
	r->killing = 1;
	sb_vm_kill(r->pid, SIGTERM);
	sb_watch_stop(r->grace_w);
	r->grace_w = sb_loop_timer(r->owner->d->loop, KILL_GRACE_S, 0, on_kill_grace, r);
}

static void on_stop_grace(void *ctx)
{
	struct run *r = ctx;

	sb_watch_stop(r->grace_w);
	r->grace_w = NULL;
	vm_end(r);
}

static void run_stop(struct run *r, const char *reason)
{
	if (r->stop_reason[0])
		return;
	snprintf(r->stop_reason, sizeof r->stop_reason, "%s", reason);
	if (r->hello && r->chan_fd >= 0) {
		chan_signal(r, SIGTERM);
		r->grace_w = sb_loop_timer(r->owner->d->loop, STOP_GRACE_S, 0, on_stop_grace, r);
	} else {
		vm_end(r);
	}
}

static void on_timeout(void *ctx)
{
	struct run *r = ctx;

	sb_watch_stop(r->timeout_w);
	r->timeout_w = NULL;
	run_stop(r, "timeout");
}

static void on_boot_deadline(void *ctx)
{
	struct run *r = ctx;
	char reason[160];

	sb_watch_stop(r->boot_w);
	r->boot_w = NULL;
	if (r->hello)
		return;
	snprintf(reason, sizeof reason,
		 "the guest agent did not answer within its %g s boot deadline "
		 "(SANBOX_BOOT_TIMEOUT; see console.log)",
		 r->owner->boot_deadline);
	emit_strs(r->owner->d, r->id, "run.failed", "reason", reason, NULL);
	snprintf(r->stop_reason, sizeof r->stop_reason, "failed");
	vm_end(r);
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

/* Explains a VM that ended without a report from the harness: the agent's
 * setup error, a kernel panic on the console, or how QEMU ended. */
static void crash_reason(struct run *r, int status, char *buf, size_t cap)
{
	char path[PATH_MAX + 16], line[512];
	FILE *f;

	if (r->setup_error[0]) {
		snprintf(buf, cap, "the guest agent could not set the run up: %s",
			 r->setup_error);
		return;
	}
	if (WIFSIGNALED(status)) {
		snprintf(buf, cap,
			 "QEMU was killed by signal %d (%s) before the harness reported",
			 WTERMSIG(status), strsignal(WTERMSIG(status)));
	} else if (WIFEXITED(status) && WEXITSTATUS(status)) {
		snprintf(path, sizeof path, "%s/qemu.log", r->dir);
		last_line(path, line, sizeof line);
		snprintf(buf, cap,
			 "QEMU exited with status %d before the harness reported%s%.300s",
			 WEXITSTATUS(status), line[0] ? ": " : "", line);
	} else {
		snprintf(
		    buf, cap,
		    "the VM powered off before the harness reported (see console.log)");
	}
	snprintf(path, sizeof path, "%s/console.log", r->dir);
	if (!(f = fopen(path, "re")))
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
	struct run *r = ctx;
	struct sb_runs *rs = r->owner;
	struct sb_daemon *d = rs->d;
	char reason[512];

	/* child_w is stopped; run_free frees it (safe inside its callback) */
	/* drain what the guest sent before it went away */
	if (r->chan_fd >= 0)
		on_chan_io(r, SB_READ);
	if (r->stop_reason[0]) {
		emit_strs(d, r->id, "run.stopped", "reason", r->stop_reason, NULL);
	} else if (r->exited) {
		emit_strs(d, r->id, "run.stopped", "reason", "exited", NULL);
	} else {
		crash_reason(r, status, reason, sizeof reason);
		emit_strs(d, r->id, "run.failed", "reason", reason, NULL);
		emit_strs(d, r->id, "run.stopped", "reason", "failed", NULL);
	}
	run_unlink(r);
	run_free(r);
	if (d->stopping && !rs->active)
		sb_loop_break(d->loop);
}

/* --- creating and starting --- */

struct spec {
	char name[64], group[64], tmpl[64], accel[8], prompt[8192];
	uint64_t cpus, memory_mib, timeout_s;
	const msgpack_object *argv, *env, *inputs;
	size_t input_bytes;
	struct sb_netpolicy net;
};

/* Checks an input file path: relative, no "..", no empty parts. */
static int input_path_ok(const msgpack_object *p)
{
	const char *s = p->via.str.ptr;
	uint32_t n = p->via.str.size;

	if (p->type != MSGPACK_OBJECT_STR || n == 0 || n > 255 || s[0] == '/' || memchr(s, 0, n))
		return 0;
	for (uint32_t i = 0; i < n; i++)
		if (s[i] == '.' && (i == 0 || s[i - 1] == '/') && i + 1 < n && s[i + 1] == '.')
			return 0;
	return 1;
}

static int spec_parse(const msgpack_object *m, struct spec *s)
{
	int rc;

	memset(s, 0, sizeof *s);
	strcpy(s->tmpl, "shell");
	strcpy(s->accel, "auto");
	if ((rc = sb_spec_str(m, "name", s->name, sizeof s->name)) ||
	    (rc = sb_spec_str(m, "group", s->group, sizeof s->group)) ||
	    (rc = sb_spec_str(m, "template", s->tmpl, sizeof s->tmpl)) ||
	    (rc = sb_spec_str(m, "accel", s->accel, sizeof s->accel)) ||
	    (rc = sb_spec_str(m, "prompt", s->prompt, sizeof s->prompt)) ||
	    (rc = sb_spec_strs(m, "argv", 4096, &s->argv)) ||
	    (rc = sb_spec_strs(m, "env", 4096, &s->env)) ||
	    (rc = sb_spec_u64(m, "cpus", 64, &s->cpus)) ||
	    (rc = sb_spec_u64(m, "memory_mib", 1u << 20, &s->memory_mib)) ||
	    (rc = sb_spec_u64(m, "timeout_s", 366ull * 86400, &s->timeout_s)) ||
	    (rc = sb_netpolicy_resolve(m, &s->net)))
		return rc;
	if (strcmp(s->accel, "auto") && strcmp(s->accel, "kvm") && strcmp(s->accel, "tcg"))
		return sb_seterr(SB_ERR_INVAL, "spec: accel must be auto, kvm or tcg");
	if ((!s->argv || s->argv->via.array.size == 0) && !s->prompt[0])
		return sb_seterr(SB_ERR_INVAL, "spec: give a command (argv) or a prompt");
	if (s->memory_mib && s->memory_mib < 64)
		return sb_seterr(SB_ERR_INVAL, "spec: memory below the 64 MiB minimum");
	for (uint32_t i = 0; s->env && i < s->env->via.array.size; i++) {
		const msgpack_object *e = &s->env->via.array.ptr[i];
		const char *eq = memchr(e->via.str.ptr, '=', e->via.str.size);
		if (!eq || eq == e->via.str.ptr)
			return sb_seterr(SB_ERR_INVAL, "spec: env entry %u is not K=V", i);
	}
	s->inputs = sb_map_get(m, "inputs");
	if (s->inputs && s->inputs->type != MSGPACK_OBJECT_ARRAY)
		return sb_seterr(SB_ERR_INVAL, "spec: inputs must be a list");
	if (s->inputs && s->inputs->via.array.size > SB_CHAN_INPUT_FILES)
		return sb_seterr(SB_ERR_TOOBIG, "spec: more than %u input files",
				 SB_CHAN_INPUT_FILES);
	for (uint32_t i = 0; s->inputs && i < s->inputs->via.array.size; i++) {
		const msgpack_object *in = &s->inputs->via.array.ptr[i];
		const msgpack_object *p = sb_map_get(in, "path"), *d = sb_map_get(in, "data");
		if (!p || !input_path_ok(p) || !d || d->type != MSGPACK_OBJECT_BIN)
			return sb_seterr(SB_ERR_INVAL, "spec: input %u needs a relative path and data", i);
		s->input_bytes += d->via.bin.size;
	}
	if (s->input_bytes > SB_CHAN_INPUTS_MAX)
		return sb_seterr(SB_ERR_TOOBIG,
				 "inputs total %zu bytes, above the %u MiB limit",
				 s->input_bytes, SB_CHAN_INPUTS_MAX >> 20);
	return SB_OK;
}

static void pack_env_names(msgpack_packer *pk, const msgpack_object *env)
{
	uint32_t n = env ? env->via.array.size : 0;

	sb_pack_str(pk, "env");
	msgpack_pack_array(pk, n);
	for (uint32_t i = 0; i < n; i++) {
		const msgpack_object *e = &env->via.array.ptr[i];
		const char *eq = memchr(e->via.str.ptr, '=', e->via.str.size);
		msgpack_pack_str_with_body(pk, e->via.str.ptr, (size_t)(eq - e->via.str.ptr));
	}
}

/* Packs the SPEC frame the guest agent receives on HELLO, then the INPUT
 * frames of the inputs. */
static int pack_guest_spec(struct run *r, const struct spec *s, const struct sb_template *t)
{
	msgpack_packer pk;
	size_t start;
	uint32_t nenv = s->env ? s->env->via.array.size : 0;
	uint32_t nin = s->inputs ? s->inputs->via.array.size : 0;
	int rc;

	msgpack_packer_init(&pk, &r->spec, msgpack_sbuffer_write);
	if ((rc = sb_chan_begin(&r->spec, &pk, SB_CHAN_SPEC, 0, &start)))
		return rc;
	msgpack_pack_map(&pk, 5);
	sb_pack_str(&pk, "argv");
	if (s->argv && s->argv->via.array.size) {
		msgpack_pack_object(&pk, *s->argv);
	} else {
		msgpack_pack_array(&pk, 2);
		sb_pack_str(&pk, t->harness);
		sb_pack_str(&pk, s->prompt);
	}
	sb_pack_str(&pk, "env");
	msgpack_pack_array(&pk, nenv + 2 + sb_access_env_count(&r->acc));
	for (uint32_t i = 0; i < nenv; i++)
		msgpack_pack_object(&pk, s->env->via.array.ptr[i]);
	char kv[256];
	snprintf(kv, sizeof kv, "SANBOX_RUN=%s", r->id);
	sb_pack_str(&pk, kv);
	sb_pack_str(&pk, "HOME=/root");
	sb_access_pack_env(&r->acc, r->vkey, &pk);
	sb_pack_kstr(&pk, "cwd", "/workspace");
	sb_pack_str(&pk, "inputs");
	msgpack_pack_array(&pk, nin);
	for (uint32_t i = 0; i < nin; i++) {
		const msgpack_object *in = &s->inputs->via.array.ptr[i];
		const msgpack_object *mode = sb_map_get(in, "mode");
		msgpack_pack_map(&pk, 3);
		sb_pack_str(&pk, "path");
		msgpack_pack_object(&pk, *sb_map_get(in, "path"));
		sb_pack_ku64(&pk, "size", sb_map_get(in, "data")->via.bin.size);
		sb_pack_ku64(&pk, "mode",
			     mode && mode->type == MSGPACK_OBJECT_POSITIVE_INTEGER
				 ? mode->via.u64 & 07777
				 : 0644);
	}
	sb_pack_ku64(&pk, "tunnel_port", GUEST_TUNNEL_PORT);
	if ((rc = sb_chan_end(&r->spec, start)))
		return rc;
	/* the contents follow the SPEC in INPUT frames (vmm/chan.h) */
	for (uint32_t i = 0; i < nin && rc == SB_OK; i++) {
		const msgpack_object *d =
		    sb_map_get(&s->inputs->via.array.ptr[i], "data");
		rc = sb_chan_pack_input(&r->spec, i, d->via.bin.ptr, d->via.bin.size);
	}
	return rc;
}

/* Writes run.created, run.policy.resolved and a secret.granted per grant
 * in one atomic append. */
static int emit_resolved(struct sb_runs *rs, const char *id, const struct spec *s,
			 const struct sb_template *t, const struct sb_access *acc, uint64_t cpus,
			 uint64_t mem, uint64_t timeout)
{
	msgpack_sbuffer a, b, g;
	msgpack_packer pa, pb, pg;
	struct sb_event evs[2 + SB_ACCESS_SECRETS];
	size_t gat[SB_ACCESS_SECRETS + 1];
	uint32_t nin = s->inputs ? s->inputs->via.array.size : 0;
	int rc;

	msgpack_sbuffer_init(&a);
	msgpack_sbuffer_init(&b);
	msgpack_sbuffer_init(&g);
	msgpack_packer_init(&pa, &a, msgpack_sbuffer_write);
	msgpack_packer_init(&pb, &b, msgpack_sbuffer_write);
	msgpack_packer_init(&pg, &g, msgpack_sbuffer_write);
	msgpack_pack_map(&pa, 4);
	sb_pack_kstr(&pa, "name", s->name[0] ? s->name : id);
	sb_pack_kstr(&pa, "group", s->group);
	sb_pack_kstr(&pa, "template", s->tmpl);
	sb_pack_kstr(&pa, "model", acc->model);
	msgpack_pack_map(&pb, 17);
	sb_pack_kstr(&pb, "template_hash", t->hash);
	sb_pack_kstr(&pb, "kernel", t->kernel_version);
	sb_pack_ku64(&pb, "cpus", cpus);
	sb_pack_ku64(&pb, "memory_mib", mem);
	sb_pack_ku64(&pb, "timeout_s", timeout);
	sb_netpolicy_pack(&s->net, &pb); /* 2 pairs */
	sb_access_pack_policy(acc, &pb); /* 6 pairs */
	sb_pack_kstr(&pb, "accel", s->accel);
	sb_pack_str(&pb, "argv");
	if (s->argv && s->argv->via.array.size)
		msgpack_pack_object(&pb, *s->argv);
	else {
		msgpack_pack_array(&pb, 1);
		sb_pack_str(&pb, t->harness);
	}
	pack_env_names(&pb, s->env);
	sb_pack_str(&pb, "inputs");
	msgpack_pack_array(&pb, nin);
	for (uint32_t i = 0; i < nin; i++) {
		const msgpack_object *in = &s->inputs->via.array.ptr[i];
		msgpack_pack_map(&pb, 2);
		sb_pack_str(&pb, "path");
		msgpack_pack_object(&pb, *sb_map_get(in, "path"));
		sb_pack_ku64(&pb, "size", sb_map_get(in, "data")->via.bin.size);
	}
	for (size_t i = 0; i < acc->ngrants; i++) {
		gat[i] = g.size;
		sb_access_pack_grant(acc, i, &pg);
	}
	gat[acc->ngrants] = g.size;
	rc = !a.data || !b.data || (acc->ngrants && !g.data) ? SB_ERR_NOMEM : SB_OK;
	if (rc == SB_OK && (rc = sb_event_init(&evs[0], "run.created", id, SB_SRC_HOST, a.data, a.size)) == SB_OK)
		rc = sb_event_init(&evs[1], "run.policy.resolved", id, SB_SRC_HOST, b.data, b.size);
	for (size_t i = 0; rc == SB_OK && i < acc->ngrants; i++)
		rc = sb_event_init(&evs[2 + i], "secret.granted", id, SB_SRC_HOST, g.data + gat[i],
				   gat[i + 1] - gat[i]);
	if (rc == SB_OK)
		rc = sb_log_append(rs->d->log, evs, 2 + acc->ngrants);
	msgpack_sbuffer_destroy(&a);
	msgpack_sbuffer_destroy(&b);
	msgpack_sbuffer_destroy(&g);
	return rc;
}

static int run_start(struct run *r, const struct sb_template *t, const struct spec *s,
		     uint64_t cpus, uint64_t mem, uint64_t timeout)
{
	struct sb_daemon *d = r->owner->d;
	char disk[PATH_MAX + 16], chan[PATH_MAX + 16], qmp[PATH_MAX + 16], console[PATH_MAX + 16];
	char cache[PATH_MAX + 16], why[256] = "", pidbuf[32];
	struct sb_vm_config vc = {0};
	sb_accel want, accel;
	int rc, fd;

	snprintf(disk, sizeof disk, "%s/disk.qcow2", r->dir);
	snprintf(chan, sizeof chan, "%s/chan.sock", r->dir);
	snprintf(qmp, sizeof qmp, "%s/qmp.sock", r->dir);
	snprintf(console, sizeof console, "%s/console.log", r->dir);
	snprintf(cache, sizeof cache, "%s/cache", d->home);
	if ((rc = sb_mkdirs(r->dir, 0700)) || (rc = sb_mkdirs(cache, 0700)))
		return rc;
	if ((rc = sb_disk_layer_create(t->rootfs, "raw", disk)))
		return rc;
	want = !strcmp(s->accel, "kvm") ? SB_ACCEL_KVM : !strcmp(s->accel, "tcg") ? SB_ACCEL_TCG
										    : SB_ACCEL_AUTO;
	if ((rc = sb_accel_resolve(want, t->kernel, t->initrd, cache, &accel, why, sizeof why)))
		return rc;
	if ((rc = sb_unix_listen(chan, &r->chan_lfd)) || (rc = sb_unix_listen(qmp, &r->qmp_lfd)))
		return rc;
	vc.kernel = t->kernel;
	vc.initrd = t->initrd;
	vc.disk = disk;
	vc.chan_socket = chan;
	vc.qmp_socket = qmp;
	vc.console_log = console;
	vc.cpus = (unsigned)cpus;
	vc.memory_mib = (unsigned)mem;
	vc.accel = accel;
	if ((rc = sb_vm_spawn(&vc, &r->pid)))
		return rc;
	snprintf(chan, sizeof chan, "%s/qemu.pid", r->dir);
	if ((fd = open(chan, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) >= 0) {
		int n = snprintf(pidbuf, sizeof pidbuf, "%d\n", (int)r->pid);
		if (write(fd, pidbuf, (size_t)n) != n)
			warn(r, "cannot write qemu.pid");
		close(fd);
	}
	r->child_w = sb_loop_child(d->loop, r->pid, on_child, r);
	r->chan_lw = sb_loop_io(d->loop, r->chan_lfd, SB_READ, on_chan_accept, r);
	r->qmp_lw = sb_loop_io(d->loop, r->qmp_lfd, SB_READ, on_qmp_accept, r);
	r->boot_w =
	    sb_loop_timer(d->loop, r->owner->boot_deadline, 0, on_boot_deadline, r);
	r->timeout_w = sb_loop_timer(d->loop, (double)timeout, 0, on_timeout, r);
	if (why[0])
		warn(r, "%s", why);
	emit_strs(d, r->id, "run.started", "accel", accel == SB_ACCEL_KVM ? "kvm" : "tcg", NULL);
	return SB_OK;
}

/* Resolves the run's model access, registers it with the gateway and
 * opens its tunnel. */
static int run_access(struct run *r, const msgpack_object *specmap, const struct sb_template *t)
{
	struct sb_daemon *d = r->owner->d;
	struct sb_gateway_run gr;
	int rc;

	if ((rc = sb_access_resolve(d, specmap, t, &r->acc)))
		return rc;
	gr.run = r->id;
	gr.budget_nusd = r->acc.budget_nusd;
	gr.stop_on_budget = r->acc.stop_on_budget;
	gr.models = r->acc.models;
	gr.nmodels = r->acc.nmodels;
	if ((rc = sb_gateway_run_add(d->gateway, &gr, r->vkey)))
		return rc;
	r->registered = 1;
	return sb_tunnel_open(d->loop, &tunnel_ops, r, &r->tunnel);
}

static void new_run_id(char run[SB_RUN_MAX])
{
	unsigned char raw[SB_RUN_ID_LEN / 2];

	randombytes_buf(raw, sizeof raw);
	sodium_bin2hex(run, SB_RUN_MAX, raw, sizeof raw);
}

int sb_runs_create(struct sb_runs *rs, const msgpack_object *specmap, char id[SB_RUN_MAX])
{
	struct sb_template t;
	struct spec s;
	struct run *r;
	uint64_t cpus, mem, timeout;
	int rc;

	if ((rc = spec_parse(specmap, &s)) || (rc = sb_template_load(rs->d->home, s.tmpl, &t)))
		return rc;
	cpus = s.cpus ? s.cpus : t.cpus;
	mem = s.memory_mib ? s.memory_mib : t.memory_mib;
	timeout = s.timeout_s ? s.timeout_s : t.timeout_s;
	if (!(r = calloc(1, sizeof *r)))
		return SB_ERR_NOMEM;
	r->owner = rs;
	r->chan_lfd = r->chan_fd = r->qmp_lfd = r->qmp_fd = -1;
	r->tokens = GUEST_BURST;
	r->tokens_ts = sb_loop_now(rs->d->loop);
	msgpack_sbuffer_init(&r->out);
	msgpack_sbuffer_init(&r->spec);
	new_run_id(r->id);
	if (snprintf(r->dir, sizeof r->dir, "%s/runs/%s", rs->d->home, r->id) >= (int)sizeof r->dir)
		rc = sb_seterr(SB_ERR_TOOBIG, "state directory path too long");
	if (rc || (rc = sb_chan_reader_new(&r->reader)) || (rc = run_access(r, specmap, &t)) ||
	    (rc = pack_guest_spec(r, &s, &t)) ||
	    (rc = emit_resolved(rs, r->id, &s, &t, &r->acc, cpus, mem, timeout)))
		goto out;
	memcpy(id, r->id, SB_RUN_MAX);
	if ((rc = run_start(r, &t, &s, cpus, mem, timeout))) {
		/* resolved but could not start: the record says why */
		char reason[600];

		snprintf(reason, sizeof reason, "cannot start the VM: %s", sb_errmsg(rc));
		if (r->pid > 0)
			sb_vm_kill(r->pid, SIGKILL);
		if ((rc = emit_strs(rs->d, r->id, "run.failed", "reason", reason,
				    NULL)) == SB_OK)
			rc = emit_strs(rs->d, r->id, "run.stopped", "reason", "failed",
				       NULL);
		goto out; /* SB_OK: the run exists; its events tell the story */
	}
	r->next = rs->live;
	rs->live = r;
	rs->active++;
	return SB_OK;
out:
	run_free(r);
	if (rc == SB_ERR_FULL)
		rc = sb_seterr(rc, "cannot record the run in %s: %s", rs->d->home,
			       sb_errmsg(rc));
	return rc;
}

int sb_runs_stop(struct sb_runs *rs, const char *id, const char *reason)
{
	struct run *r = run_find(rs, id);
	struct sb_runstate st;
	int rc;

	if (r) {
		run_stop(r, reason);
		return SB_OK;
	}
	sb_daemon_catch_up(rs->d);
	if ((rc = sb_runstate_get(rs->d->proj, id, &st)))
		return rc;
	if (!sb_runstate_is_live(&st))
		return sb_seterr(SB_ERR_STATE, "run %s is not running (%s)", id, st.status);
	/* a record without a VM (e.g. it never started): close it */
	return emit_strs(rs->d, id, "run.stopped", "reason", reason, NULL);
}

void sb_runs_stop_all(struct sb_runs *rs, const char *reason)
{
	for (struct run *r = rs->live; r; r = r->next)
		run_stop(r, reason);
}
