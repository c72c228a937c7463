/* qmp.c - a QMP client over a unix socket, one JSON object a line: an
 * asynchronous core the caller drives, and a blocking API over it. */
#include "vmm/qmp.h"

#include "engine/error.h"
#include "engine/units.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define READ_CHUNK    65536u     /* bytes asked of one read() */
#define READ_PER_CALL (1u << 20) /* bytes one sb_qmp_io reads at most */
#define WHY_MAX       256

enum state { GREETING, CAPS, READY, DOWN };

/* A command sent (or waiting for the handshake) and not yet answered. */
struct cmd {
	json_int_t id;
	int64_t deadline; /* -1: none */
	int timeout_ms;
	int quit;         /* a closed connection answers it */
	sb_qmp_reply_fn cb;
	void *ctx;
	struct cmd *next;
	char name[64];    /* for details */
};

/* Bytes from p[off] to p[len] wait. */
struct buf {
	char *p;
	size_t off, len, cap;
};

struct sb_qmp {
	int fd;
	enum state state;
	int err;                 /* why it is DOWN */
	char why[WHY_MAX];       /* and the detail */
	struct buf in;           /* read, not yet parsed */
	size_t scanned;          /* bytes of in (from off) known to hold no newline */
	struct buf out;          /* commands to write */
	struct buf held;         /* commands sent before the handshake ended */
	struct cmd *head, *tail; /* waiting for replies, in id order */
	json_int_t next_id;
	json_int_t caps_id;
	int64_t hs_deadline;     /* the handshake's, -1: none */
	int hs_timeout_ms;
	const struct sb_qmp_ops *ops;
	void *ctx;
	int depth;               /* calls into the client running callbacks */
	int closed;              /* sb_qmp_close was called within one */
	json_t *events;          /* the blocking API's queue */
};

/* --- buffers --- */

/* Makes room for n more bytes at the end of b. */
static int buf_room(struct buf *b, size_t n)
{
	size_t ncap;
	char *np;

	if (b->off && b->cap - b->len < n) {
		memmove(b->p, b->p + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
	}
	if (b->cap - b->len >= n)
		return SB_OK;
	ncap = b->cap ? b->cap : 4096;
	while (ncap - b->len < n)
		ncap *= 2;
	if (!(np = realloc(b->p, ncap)))
		return sb_seterr(SB_ERR_NOMEM, "QMP buffer");
	b->p = np;
	b->cap = ncap;
	return SB_OK;
}

static int buf_add(struct buf *b, const char *s, size_t n)
{
	int rc = n ? buf_room(b, n) : SB_OK;

	if (rc || !n)
		return rc;
	memcpy(b->p + b->len, s, n);
	b->len += n;
	return SB_OK;
}

/* --- ending --- */

/* Calls cmd c's callback with rc (detail already set) and frees it. */
static void cmd_finish(struct cmd *c, int rc, json_t *ret)
{
	c->cb(c->ctx, rc, ret);
	free(c);
}

/* Takes every waiting command out of q and fails each with err (detail
 * "QMP <cmd>: why"); with quit_ok, a "quit" succeeds instead. Commands
 * sent by the callbacks are not among them. */
static void fail_all(sb_qmp *q, int err, const char *why, int quit_ok)
{
	struct cmd *c = q->head, *next;

	q->head = q->tail = NULL;
	for (; c; c = next) {
		next = c->next;
		if (quit_ok && c->quit) {
			sb_clearerr();
			cmd_finish(c, SB_OK, NULL);
		} else {
			cmd_finish(c, sb_seterr(err, "QMP %s: %s", c->name, why), NULL);
		}
	}
}

/* Ends the connection with err: shuts the socket down (the descriptor
 * stays until sb_qmp_close), fails every waiting command ("quit" succeeds
 * when QEMU closed), then tells the owner. Returns err. */
static int go_down(sb_qmp *q, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int go_down(sb_qmp *q, int err, const char *fmt, ...)
{
	va_list ap;

	if (q->state == DOWN)
		return err;
	va_start(ap, fmt);
	vsnprintf(q->why, sizeof q->why, fmt, ap);
	va_end(ap);
	q->state = DOWN;
	q->err = err;
	shutdown(q->fd, SHUT_RDWR);
	fail_all(q, err, q->why, err == SB_ERR_IO);
	if (q->ops && q->ops->down && !q->closed) {
		sb_seterr(err, "QMP: %s", q->why);
		q->ops->down(q->ctx, err);
	}
	return err;
}

/* err, with the detail of a handle that is down. */
static int down_err(sb_qmp *q, int err)
{
	return sb_seterr(err, "QMP: connection down: %s", q->why);
}

static void free_handle(sb_qmp *q)
{
	if (q->fd >= 0)
		close(q->fd);
	json_decref(q->events);
	free(q->in.p);
	free(q->out.p);
	free(q->held.p);
	free(q);
}

/* Every public call that may run callbacks goes between enter and leave:
 * a close from a callback frees the handle only when the outermost call
 * returns. leave returns 1 when q is gone. */
static void enter(sb_qmp *q)
{
	q->depth++;
}

static int leave(sb_qmp *q)
{
	if (--q->depth == 0 && q->closed) {
		free_handle(q);
		return 1;
	}
	return 0;
}

/* --- messages --- */

/* Writes the line of command (execute, id, arguments) into b. */
static int cmd_line(struct buf *b, const char *cmd, json_int_t id, json_t *args)
{
	json_t *msg = json_pack("{s:s, s:I}", "execute", cmd, "id", id);
	char *s = NULL;
	int rc;

	if (!msg || (args && json_object_set(msg, "arguments", args) < 0) ||
	    !(s = json_dumps(msg, JSON_COMPACT))) {
		rc = sb_seterr(SB_ERR_NOMEM, "QMP: building %s", cmd);
		goto out;
	}
	if (!(rc = buf_add(b, s, strlen(s))))
		rc = buf_add(b, "\n", 1);
out:
	free(s);
	json_decref(msg);
	return rc;
}

/* Takes the waiting command with id out of the list; NULL when none. */
static struct cmd *cmd_take(sb_qmp *q, json_int_t id)
{
	struct cmd **pp, *prev = NULL;

	for (pp = &q->head; *pp; prev = *pp, pp = &(*pp)->next) {
		struct cmd *c = *pp;
		if (c->id != id)
			continue;
		*pp = c->next;
		if (q->tail == c)
			q->tail = prev;
		return c;
	}
	return NULL;
}

/* Hands the reply m to command c. */
static void reply(struct cmd *c, json_t *m)
{
	json_t *err = json_object_get(m, "error"), *ret = json_object_get(m, "return");
	const char *desc;

	if (err) {
		desc = json_string_value(json_object_get(err, "desc"));
		cmd_finish(c, sb_seterr(SB_ERR_PROTO, "QMP %s: %s", c->name,
					desc ? desc : "error without a description"),
			   NULL);
	} else if (!ret) {
		cmd_finish(c, sb_seterr(SB_ERR_PROTO, "QMP %s: reply without a result", c->name),
			   NULL);
	} else {
		sb_clearerr();
		cmd_finish(c, SB_OK, ret);
	}
}

/* The greeting: an object with a "QMP" object. Answers with the
 * capabilities command, ahead of everything sent so far. */
static void on_greeting(sb_qmp *q, json_t *m)
{
	int rc;

	if (!json_is_object(json_object_get(m, "QMP"))) {
		go_down(q, SB_ERR_PROTO, "the peer's first message is not a QMP greeting");
		return;
	}
	q->caps_id = ++q->next_id;
	if ((rc = cmd_line(&q->out, "qmp_capabilities", q->caps_id, NULL))) {
		go_down(q, rc, "%s", sb_errmsg(rc));
		return;
	}
	q->state = CAPS;
}

/* The reply to qmp_capabilities: the commands held go out. */
static void on_caps(sb_qmp *q, json_t *m)
{
	json_t *err = json_object_get(m, "error");
	const char *desc = json_string_value(json_object_get(err, "desc"));
	int rc;

	if (err || !json_object_get(m, "return")) {
		go_down(q, SB_ERR_PROTO, "qmp_capabilities: %s",
			err ? desc ? desc : "error without a description" : "reply without a result");
		return;
	}
	if ((rc = buf_add(&q->out, q->held.p + q->held.off, q->held.len - q->held.off))) {
		go_down(q, rc, "%s", sb_errmsg(rc));
		return;
	}
	q->held.off = q->held.len = 0;
	q->state = READY;
	q->hs_deadline = -1;
}

/* Handles one message (an object). */
static void on_message(sb_qmp *q, json_t *m)
{
	json_t *id = json_object_get(m, "id");
	struct cmd *c;

	if (q->state == GREETING) {
		on_greeting(q, m);
		return;
	}
	if (json_object_get(m, "event")) {
		if (q->ops && q->ops->event)
			q->ops->event(q->ctx, m);
		return;
	}
	if (!json_is_integer(id))
		return; /* answers no command of ours */
	if (q->state != READY && json_integer_value(id) != q->caps_id)
		return; /* nothing but the capabilities has been sent */
	if (q->state == CAPS && json_integer_value(id) == q->caps_id) {
		on_caps(q, m);
		return;
	}
	if ((c = cmd_take(q, json_integer_value(id))))
		reply(c, m);
	/* else a late reply to a command that timed out: dropped */
}

static int is_blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!s[i] || !strchr(" \t\r\n", s[i]))
			return 0;
	return 1;
}

/* Handles every complete line in the input buffer, stopping when the
 * connection ends or the handle is closed. */
static void parse_lines(sb_qmp *q)
{
	json_error_t jerr;
	json_t *j;
	char *line, *nl, why[WHY_MAX];
	size_t n;

	while (q->state != DOWN && !q->closed) {
		line = q->in.p + q->in.off;
		nl = memchr(line + q->scanned, '\n', q->in.len - q->in.off - q->scanned);
		if (!nl) {
			q->scanned = q->in.len - q->in.off;
			break;
		}
		n = (size_t)(nl - line) + 1;
		q->in.off += n;
		q->scanned = 0;
		if (n > SB_QMP_LINE_MAX) {
			go_down(q, SB_ERR_PROTO, "message longer than %u KiB", SB_QMP_LINE_MAX >> 10);
			break;
		}
		if (is_blank(line, n))
			continue;
		j = json_loadb(line, n, 0, &jerr);
		if (j && json_is_object(j)) {
			on_message(q, j);
			json_decref(j);
			continue;
		}
		json_decref(j);
		if (j)
			snprintf(why, sizeof why, "message is not a JSON object");
		else
			snprintf(why, sizeof why, "bad JSON from QEMU: %s", jerr.text);
		if (q->state != READY) {
			go_down(q, SB_ERR_PROTO, "%s", why);
			break;
		}
		/* Any waiting command may have lost its reply in it. */
		fail_all(q, SB_ERR_PROTO, why, 0);
	}
	if (q->in.off == q->in.len)
		q->in.off = q->in.len = 0;
}

/* --- the core --- */

int sb_qmp_open_async(int fd, int64_t now_ms, int timeout_ms, const struct sb_qmp_ops *ops,
		      void *ctx, sb_qmp **out)
{
	sb_qmp *q;
	int fl;

	*out = NULL;
	if (!(q = calloc(1, sizeof *q))) {
		close(fd);
		return sb_seterr(SB_ERR_NOMEM, "QMP handle");
	}
	q->fd = fd;
	q->ops = ops;
	q->ctx = ctx;
	q->hs_timeout_ms = timeout_ms;
	q->hs_deadline = timeout_ms < 0 ? -1 : now_ms + timeout_ms;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		int rc = sb_seterr(SB_ERR_IO, "QMP: fcntl: %s", strerror(errno));
		free_handle(q);
		return rc;
	}
	*out = q;
	return SB_OK;
}

int sb_qmp_send(sb_qmp *q, int64_t now_ms, const char *cmd, json_t *args, int timeout_ms,
		sb_qmp_reply_fn cb, void *cb_ctx)
{
	struct buf *b = q->state == READY ? &q->out : &q->held;
	struct cmd *c;
	size_t before = b->len - b->off; /* buf_room may move the bytes */
	int rc;

	if (q->state == DOWN || q->closed)
		return q->closed ? sb_seterr(SB_ERR_IO, "QMP: handle closed") : down_err(q, SB_ERR_IO);
	if ((q->out.len - q->out.off) + (q->held.len - q->held.off) > SB_QMP_OUT_MAX)
		return sb_seterr(SB_ERR_FULL, "QMP %s: %u KiB of commands wait: QEMU does not read",
				 cmd, SB_QMP_OUT_MAX >> 10);
	if (!(c = calloc(1, sizeof *c)))
		return sb_seterr(SB_ERR_NOMEM, "QMP %s", cmd);
	c->id = ++q->next_id;
	if ((rc = cmd_line(b, cmd, c->id, args))) {
		b->len = b->off + before; /* nothing half queued */
		free(c);
		return rc;
	}
	c->deadline = timeout_ms < 0 ? -1 : now_ms + timeout_ms;
	c->timeout_ms = timeout_ms;
	c->quit = !strcmp(cmd, "quit");
	c->cb = cb;
	c->ctx = cb_ctx;
	snprintf(c->name, sizeof c->name, "%s", cmd);
	if (q->tail)
		q->tail->next = c;
	else
		q->head = c;
	q->tail = c;
	return SB_OK;
}

unsigned sb_qmp_wants(const sb_qmp *q)
{
	if (q->state == DOWN || q->closed)
		return 0;
	return SB_QMP_READ | (q->out.len > q->out.off ? SB_QMP_WRITE : 0);
}

/* Writes what waits, until the socket takes no more. */
static void write_out(sb_qmp *q)
{
	while (q->state != DOWN && q->out.len > q->out.off) {
		ssize_t n = send(q->fd, q->out.p + q->out.off, q->out.len - q->out.off,
				 MSG_NOSIGNAL);
		if (n > 0) {
			q->out.off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		go_down(q, SB_ERR_IO, "writing: %s", n < 0 ? strerror(errno) : "no progress");
		return;
	}
	if (q->out.off == q->out.len)
		q->out.off = q->out.len = 0;
}

/* Reads what is there (at most READ_PER_CALL) and handles it. */
static void read_in(sb_qmp *q)
{
	size_t total = 0;

	while (q->state != DOWN && !q->closed && total < READ_PER_CALL) {
		ssize_t n;
		int rc;

		if ((rc = buf_room(&q->in, READ_CHUNK))) {
			go_down(q, rc, "%s", sb_errmsg(rc));
			return;
		}
		n = read(q->fd, q->in.p + q->in.len, READ_CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			go_down(q, SB_ERR_IO, "%s", n ? strerror(errno) : "connection closed by QEMU");
			return;
		}
		q->in.len += (size_t)n;
		total += (size_t)n;
		parse_lines(q);
		if (q->state != DOWN && q->in.len - q->in.off >= SB_QMP_LINE_MAX)
			go_down(q, SB_ERR_PROTO, "message longer than %u KiB without an end",
				SB_QMP_LINE_MAX >> 10);
	}
}

void sb_qmp_io(sb_qmp *q, unsigned ready)
{
	enter(q);
	if (ready & SB_QMP_READ)
		read_in(q);
	if (!q->closed && (ready & SB_QMP_WRITE || q->out.len > q->out.off))
		write_out(q);
	leave(q);
}

int64_t sb_qmp_deadline(const sb_qmp *q)
{
	int64_t d = q->state == DOWN || q->state == READY ? -1 : q->hs_deadline;

	if (q->state == DOWN || q->closed)
		return -1;
	for (const struct cmd *c = q->head; c; c = c->next)
		if (c->deadline >= 0 && (d < 0 || c->deadline < d))
			d = c->deadline;
	return d;
}

void sb_qmp_tick(sb_qmp *q, int64_t now_ms)
{
	struct cmd **pp, *c;

	enter(q);
	if (q->state != DOWN && q->state != READY && q->hs_deadline >= 0 &&
	    now_ms >= q->hs_deadline)
		go_down(q, SB_ERR_TIMEOUT, "%s within %d ms",
			q->state == GREETING ? "no greeting" : "no reply to qmp_capabilities",
			q->hs_timeout_ms);
	/* One due command at a time: a callback may change the list. */
	while (q->state != DOWN && !q->closed) {
		for (pp = &q->head; *pp; pp = &(*pp)->next)
			if ((*pp)->deadline >= 0 && now_ms >= (*pp)->deadline)
				break;
		if (!(c = *pp))
			break;
		c = cmd_take(q, c->id);
		cmd_finish(c, sb_seterr(SB_ERR_TIMEOUT, "QMP %s: no reply within %d ms", c->name,
					c->timeout_ms),
			   NULL);
	}
	leave(q);
}

int sb_qmp_fd(sb_qmp *q)
{
	return q->fd;
}

void sb_qmp_close(sb_qmp *q)
{
	if (!q || q->closed)
		return;
	q->closed = 1;
	enter(q);
	fail_all(q, SB_ERR_IO, "closed by the client", 0);
	leave(q); /* frees q unless a call running callbacks is under way */
}

/* --- the blocking API: the core driven with poll() --- */

/* Queues an event for sb_qmp_event_next, dropping the oldest when full. */
static void queue_event(void *ctx, json_t *ev)
{
	sb_qmp *q = ctx;

	if (json_array_size(q->events) >= SB_QMP_EVENTS_MAX)
		json_array_remove(q->events, 0);
	json_array_append(q->events, ev);
}

static const struct sb_qmp_ops blocking_ops = {.event = queue_event};

/* Drives q until done(arg) holds, the connection is down, or deadline
 * (-1: none) passes: then SB_ERR_TIMEOUT. With deadline now, one pass. */
static int drive(sb_qmp *q, int64_t deadline, int (*done)(sb_qmp *, void *), void *arg)
{
	for (;;) {
		struct pollfd pfd = {.fd = q->fd};
		int64_t t = sb_now_ms(), d = sb_qmp_deadline(q);
		unsigned want = sb_qmp_wants(q), ready = 0;
		int wait, n;

		if (done(q, arg))
			return SB_OK;
		if (q->state == DOWN)
			return down_err(q, q->err);
		if (deadline >= 0 && (d < 0 || deadline < d))
			d = deadline;
		wait = d < 0 ? -1 : d <= t ? 0 : d - t > INT_MAX ? INT_MAX : (int)(d - t);
		pfd.events = (want & SB_QMP_READ ? POLLIN : 0) | (want & SB_QMP_WRITE ? POLLOUT : 0);
		n = poll(&pfd, 1, wait);
		if (n < 0 && errno != EINTR)
			return go_down(q, SB_ERR_IO, "poll: %s", strerror(errno));
		if (n > 0) {
			ready = (pfd.revents & (POLLIN | POLLHUP | POLLERR) ? SB_QMP_READ : 0) |
				(pfd.revents & POLLOUT ? SB_QMP_WRITE : 0);
			sb_qmp_io(q, ready);
		}
		sb_qmp_tick(q, sb_now_ms());
		if (done(q, arg))
			return SB_OK;
		if (deadline >= 0 && sb_now_ms() >= deadline)
			return SB_ERR_TIMEOUT;
	}
}

static int is_ready(sb_qmp *q, void *arg)
{
	(void)arg;
	return q->state == READY;
}

int sb_qmp_open(int fd, int timeout_ms, sb_qmp **out)
{
	sb_qmp *q;
	int rc;

	*out = NULL;
	if ((rc = sb_qmp_open_async(fd, sb_now_ms(), timeout_ms, &blocking_ops, NULL, &q)))
		return rc;
	q->ctx = q;
	if (!(q->events = json_array())) {
		rc = sb_seterr(SB_ERR_NOMEM, "QMP handle");
		goto fail;
	}
	if ((rc = drive(q, -1, is_ready, NULL)))
		goto fail;
	*out = q;
	return SB_OK;
fail:
	sb_qmp_close(q);
	return rc;
}

/* A blocking command's outcome, kept past its callback. */
struct waiter {
	int done, rc;
	json_t *ret;
	char detail[WHY_MAX];
};

static void wait_reply(void *ctx, int rc, json_t *ret)
{
	struct waiter *w = ctx;

	w->done = 1;
	w->rc = rc;
	w->ret = ret ? json_incref(ret) : NULL;
	if (rc)
		snprintf(w->detail, sizeof w->detail, "%s", sb_errmsg(rc));
}

static int is_answered(sb_qmp *q, void *arg)
{
	(void)q;
	return ((struct waiter *)arg)->done;
}

int sb_qmp_command(sb_qmp *q, const char *cmd, json_t *args, int timeout_ms, json_t **ret)
{
	struct waiter w = {0};
	int rc;

	if (ret)
		*ret = NULL;
	if ((rc = sb_qmp_send(q, sb_now_ms(), cmd, args, timeout_ms, wait_reply, &w)))
		return rc;
	drive(q, -1, is_answered, &w); /* the core ends the command in every case */
	if (w.rc) {
		json_decref(w.ret);
		return sb_seterr(w.rc, "%s", w.detail);
	}
	if (ret)
		*ret = w.ret;
	else
		json_decref(w.ret);
	return SB_OK;
}

static int has_event(sb_qmp *q, void *arg)
{
	(void)arg;
	return json_array_size(q->events) > 0;
}

int sb_qmp_event_wait(sb_qmp *q, int timeout_ms, json_t **ev)
{
	int64_t deadline = timeout_ms < 0 ? -1 : sb_now_ms() + timeout_ms;
	int rc;

	*ev = NULL;
	rc = has_event(q, NULL) ? SB_OK : drive(q, deadline, has_event, NULL);
	if (has_event(q, NULL)) {
		*ev = json_incref(json_array_get(q->events, 0));
		json_array_remove(q->events, 0);
		return SB_OK;
	}
	if (q->state == DOWN || rc != SB_ERR_TIMEOUT)
		return down_err(q, SB_ERR_IO);
	return timeout_ms == 0 ? SB_END : sb_seterr(rc, "QMP: no event within %d ms", timeout_ms);
}

int sb_qmp_event_next(sb_qmp *q, json_t **ev)
{
	return sb_qmp_event_wait(q, 0, ev);
}
