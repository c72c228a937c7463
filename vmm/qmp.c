/* qmp.c - a blocking QMP client over a unix socket, one JSON object a line. */
#include "vmm/qmp.h"

#include "engine/error.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define QMP_LINE_MAX   (8u << 20) /* longest message accepted */
#define QMP_EVENTS_MAX 1024	  /* queued events; the oldest are dropped */

struct sb_qmp {
	int fd;
	char *buf; /* bytes read but not yet parsed */
	size_t len, cap;
	json_t *events; /* array of queued events */
	json_int_t next_id;
	int dead; /* sticky error once the stream is unusable */
};

static int64_t qmp_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t qmp_deadline(int timeout_ms)
{
	return timeout_ms < 0 ? -1 : qmp_now_ms() + timeout_ms;
}

static int qmp_left(int64_t deadline)
{
	int64_t left;

	if (deadline < 0)
		return -1;
	left = deadline - qmp_now_ms();
	return left < 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
}

static int qmp_fail(sb_qmp *q, int err, const char *what)
{
	q->dead = err;
	return sb_seterr(err, "QMP: %s", what);
}

static int qmp_dead(sb_qmp *q)
{
	return sb_seterr(q->dead, "QMP: connection unusable after an earlier %s",
			 q->dead == SB_ERR_IO ? "close" : "protocol error");
}

/* Waits until the socket is readable (or the deadline) and reads what is
 * there. Errors: SB_ERR_TIMEOUT, SB_ERR_IO (closed), SB_ERR_PROTO (a line
 * longer than QMP_LINE_MAX), SB_ERR_NOMEM. */
static int qmp_fill(sb_qmp *q, int64_t deadline)
{
	struct pollfd pfd = {.fd = q->fd, .events = POLLIN};
	size_t ncap;
	ssize_t n;
	char *nb;
	int rc;

	if (q->len >= QMP_LINE_MAX)
		return qmp_fail(q, SB_ERR_PROTO, "message longer than 8 MiB");
	if (q->cap - q->len < 4096) {
		ncap = q->cap ? q->cap * 2 : 16384;
		nb = realloc(q->buf, ncap);
		if (!nb)
			return sb_seterr(SB_ERR_NOMEM, "QMP buffer");
		q->buf = nb;
		q->cap = ncap;
	}
	for (;;) {
		n = read(q->fd, q->buf + q->len, q->cap - q->len);
		if (n > 0) {
			q->len += n;
			return 0;
		}
		if (n == 0)
			return qmp_fail(q, SB_ERR_IO, "connection closed by QEMU");
		if (errno != EAGAIN && errno != EINTR)
			return qmp_fail(q, SB_ERR_IO, strerror(errno));
		rc = poll(&pfd, 1, qmp_left(deadline));
		if (rc == 0)
			return sb_seterr(SB_ERR_TIMEOUT, "QMP: no message in time");
		if (rc < 0 && errno != EINTR)
			return qmp_fail(q, SB_ERR_IO, strerror(errno));
	}
}

static int qmp_blank(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!strchr(" \t\r\n", s[i]) || !s[i])
			return 0;
	return 1;
}

/* Takes the first complete line out of the buffer and parses it. Returns
 * SB_END when no complete line is buffered, SB_ERR_PROTO when the line is
 * not a JSON object (the line is dropped). Blank lines are skipped. */
static int qmp_line(sb_qmp *q, json_t **obj)
{
	json_error_t jerr;
	json_t *j = NULL;
	char *nl;
	size_t n;
	int blank;

	for (;;) {
		nl = q->len ? memchr(q->buf, '\n', q->len) : NULL;
		if (!nl)
			return SB_END;
		n = nl - q->buf + 1;
		blank = qmp_blank(q->buf, n);
		if (!blank)
			j = json_loadb(q->buf, n, 0, &jerr);
		memmove(q->buf, q->buf + n, q->len - n);
		q->len -= n;
		if (!blank)
			break;
	}
	if (!j)
		return sb_seterr(SB_ERR_PROTO, "QMP: bad JSON from QEMU: %s", jerr.text);
	if (!json_is_object(j)) {
		json_decref(j);
		return sb_seterr(SB_ERR_PROTO, "QMP: message is not a JSON object");
	}
	*obj = j;
	return 0;
}

/* Returns the next message, reading until the deadline. */
static int qmp_next(sb_qmp *q, int64_t deadline, json_t **obj)
{
	int rc;

	for (;;) {
		rc = qmp_line(q, obj);
		if (rc != SB_END)
			return rc;
		if (q->dead)
			return qmp_dead(q);
		rc = qmp_fill(q, deadline);
		if (rc)
			return rc;
	}
}

/* Queues event ev (stolen), dropping the oldest when full. */
static void qmp_queue(sb_qmp *q, json_t *ev)
{
	if (json_array_size(q->events) >= QMP_EVENTS_MAX)
		json_array_remove(q->events, 0);
	json_array_append_new(q->events, ev);
}

static int qmp_send(sb_qmp *q, const json_t *msg, int64_t deadline)
{
	struct pollfd pfd = {.fd = q->fd, .events = POLLOUT};
	size_t len, off = 0;
	char *s;
	ssize_t n;
	int rc = 0;

	s = json_dumps(msg, JSON_COMPACT);
	if (!s)
		return sb_seterr(SB_ERR_NOMEM, "QMP: encoding a command");
	len = strlen(s);
	s[len++] = '\n'; /* replaces the NUL; the length is explicit */
	while (off < len) {
		n = send(q->fd, s + off, len - off, MSG_NOSIGNAL);
		if (n > 0) {
			off += n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR) {
			rc = qmp_fail(q, SB_ERR_IO, strerror(errno));
			break;
		}
		n = poll(&pfd, 1, qmp_left(deadline));
		if (n == 0) {
			/* A partly sent command leaves the stream unusable. */
			rc = off ? qmp_fail(q, SB_ERR_IO, "command half sent")
				 : sb_seterr(SB_ERR_TIMEOUT, "QMP: QEMU does not read");
			break;
		}
	}
	free(s);
	return rc;
}

int sb_qmp_command(sb_qmp *q, const char *cmd, json_t *args, int timeout_ms, json_t **ret)
{
	int64_t deadline = qmp_deadline(timeout_ms);
	json_t *msg, *m = NULL, *id, *err;
	json_int_t myid;
	const char *desc;
	int rc;

	if (ret)
		*ret = NULL;
	if (q->dead)
		return qmp_dead(q);
	myid = ++q->next_id;
	msg = json_pack("{s:s, s:I}", "execute", cmd, "id", myid);
	if (!msg || (args && json_object_set(msg, "arguments", args) < 0)) {
		json_decref(msg);
		return sb_seterr(SB_ERR_NOMEM, "QMP: building %s", cmd);
	}
	rc = qmp_send(q, msg, deadline);
	json_decref(msg);
	if (rc)
		return rc;
	for (;;) {
		rc = qmp_next(q, deadline, &m);
		if (rc == SB_ERR_IO && !strcmp(cmd, "quit"))
			return 0;
		if (rc == SB_ERR_TIMEOUT)
			return sb_seterr(rc, "QMP %s: no reply within %d ms", cmd,
					 timeout_ms);
		if (rc)
			return rc;
		if (json_object_get(m, "event")) {
			qmp_queue(q, m);
			continue;
		}
		/* A reply to an earlier command that timed out: drop it. */
		id = json_object_get(m, "id");
		if (id && (!json_is_integer(id) || json_integer_value(id) != myid)) {
			json_decref(m);
			continue;
		}
		break;
	}
	err = json_object_get(m, "error");
	if (err) {
		desc = json_string_value(json_object_get(err, "desc"));
		rc = sb_seterr(SB_ERR_PROTO, "QMP %s: %s", cmd,
			       desc ? desc : "error without a description");
	} else if (!json_object_get(m, "return")) {
		rc = sb_seterr(SB_ERR_PROTO, "QMP %s: reply without a result", cmd);
	} else if (ret) {
		*ret = json_incref(json_object_get(m, "return"));
	}
	json_decref(m);
	return rc;
}

int sb_qmp_open(int fd, int timeout_ms, sb_qmp **out)
{
	int64_t deadline = qmp_deadline(timeout_ms);
	json_t *greet = NULL;
	sb_qmp *q;
	int rc, fl;

	*out = NULL;
	q = calloc(1, sizeof *q);
	if (!q) {
		close(fd);
		return sb_seterr(SB_ERR_NOMEM, "QMP handle");
	}
	q->fd = fd;
	q->events = json_array();
	if (!q->events) {
		rc = sb_seterr(SB_ERR_NOMEM, "QMP handle");
		goto fail;
	}
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		rc = sb_seterr(SB_ERR_IO, "QMP: fcntl: %s", strerror(errno));
		goto fail;
	}
	rc = qmp_next(q, deadline, &greet);
	if (rc == SB_ERR_TIMEOUT)
		rc = sb_seterr(rc, "QMP: no greeting within %d ms", timeout_ms);
	if (rc)
		goto fail;
	if (!json_is_object(json_object_get(greet, "QMP"))) {
		rc = sb_seterr(SB_ERR_PROTO, "QMP: the peer's first message is "
					     "not a QMP greeting");
		goto fail;
	}
	rc = sb_qmp_command(q, "qmp_capabilities", NULL, qmp_left(deadline), NULL);
	if (rc)
		goto fail;
	json_decref(greet);
	*out = q;
	return 0;
fail:
	json_decref(greet);
	sb_qmp_close(q);
	return rc;
}

/* Pops an event, reading until the deadline; with wait 0, SB_END instead
 * of a timeout. */
static int qmp_event_get(sb_qmp *q, int timeout_ms, json_t **ev)
{
	int64_t deadline = qmp_deadline(timeout_ms);
	json_t *m;
	int rc;

	*ev = NULL;
	for (;;) {
		if (json_array_size(q->events)) {
			*ev = json_incref(json_array_get(q->events, 0));
			json_array_remove(q->events, 0);
			return 0;
		}
		rc = qmp_next(q, deadline, &m);
		if (rc == SB_ERR_TIMEOUT && timeout_ms == 0)
			return SB_END;
		if (rc == SB_ERR_TIMEOUT)
			return sb_seterr(rc, "QMP: no event within %d ms", timeout_ms);
		if (rc)
			return rc;
		if (json_object_get(m, "event"))
			qmp_queue(q, m);
		else
			json_decref(m); /* a late reply: nobody waits for it */
	}
}

int sb_qmp_event_next(sb_qmp *q, json_t **ev)
{
	return qmp_event_get(q, 0, ev);
}

int sb_qmp_event_wait(sb_qmp *q, int timeout_ms, json_t **ev)
{
	return qmp_event_get(q, timeout_ms, ev);
}

int sb_qmp_fd(sb_qmp *q)
{
	return q->fd;
}

void sb_qmp_close(sb_qmp *q)
{
	if (!q)
		return;
	if (q->fd >= 0)
		close(q->fd);
	json_decref(q->events);
	free(q->buf);
	free(q);
}
