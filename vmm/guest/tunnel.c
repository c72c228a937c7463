/* tunnel.c - TCP listener on 127.0.0.1:port inside the guest whose
 * connections are carried to the host as channel streams.
 *
 * Each accepted connection gets a new odd stream id and an OPEN frame; bytes
 * read become DATA frames (<= 64 KiB); end of file becomes CLOSE. DATA from
 * the host is written to the connection (buffered while the socket is full);
 * CLOSE from the host shuts the connection's write side once the buffer is
 * flushed. A stream ends when both sides have sent CLOSE, or on an error
 * (then the guest sends CLOSE if it had not yet).
 */
#include "vmm/guest/agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "vmm/chan.h"

#define TUNNEL_MAX_CONNS  256
#define TUNNEL_MAX_BUFFER (64u << 20) /* host data not yet taken by the client */

struct tconn {
	int fd;
	uint64_t id;
	int rd_done; /* we sent CLOSE: no more reading */
	int wr_done; /* host sent CLOSE: shut write side when flushed */
	char *out;
	size_t out_len, out_off, out_cap;
};

struct tunnel {
	int lfd;
	uint16_t port;
	uint64_t next_id;
	struct agent_port *chan;
	struct tconn *conns[TUNNEL_MAX_CONNS];
	size_t nconns;
	uint64_t polled[TUNNEL_MAX_CONNS + 1]; /* stream id per pollfd, 0 = listener */
};

static void send_simple(struct tunnel *t, int kind, uint64_t id, const void *data,
			size_t len)
{
	struct agent_frame f;

	agent_frame_begin(&f, kind, id);
	if (kind == SB_CHAN_DATA) {
		msgpack_pack_bin(&f.pk, len);
		msgpack_pack_bin_body(&f.pk, data, len);
	} else if (kind == SB_CHAN_OPEN) {
		sb_mapw_u64(agent_frame_map(&f), "port", t->port);
	} else {
		msgpack_pack_nil(&f.pk);
	}
	agent_frame_send(t->chan, &f);
}

static void conn_free(struct tunnel *t, size_t i)
{
	struct tconn *c = t->conns[i];

	close(c->fd);
	free(c->out);
	free(c);
	t->conns[i] = t->conns[--t->nconns];
}

/* Ends the stream after an error on its socket. */
static void conn_abort(struct tunnel *t, size_t i)
{
	if (!t->conns[i]->rd_done)
		send_simple(t, SB_CHAN_CLOSE, t->conns[i]->id, NULL, 0);
	conn_free(t, i);
}

/* Writes what the socket takes; returns -1 on a socket error. */
static int conn_flush(struct tconn *c)
{
	ssize_t n;

	while (c->out_off < c->out_len) {
		n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n < 0)
			return -1;
		c->out_off += (size_t)n;
	}
	c->out_off = c->out_len = 0;
	if (c->wr_done)
		shutdown(c->fd, SHUT_WR);
	return 0;
}

/* Frees the stream when both sides are done and nothing is left to write. */
static int conn_finished(const struct tconn *c)
{
	return c->rd_done && c->wr_done && c->out_len == 0;
}

int tunnel_open(uint16_t port, struct agent_port *p, struct tunnel **out)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	struct tunnel *t = calloc(1, sizeof *t);
	int one = 1;

	if (!t)
		return -1;
	t->port = port;
	t->chan = p;
	t->next_id = 1;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	t->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (t->lfd < 0)
		goto fail;
	setsockopt(t->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(t->lfd, (struct sockaddr *)&sa, sizeof sa) || listen(t->lfd, 64))
		goto fail;
	*out = t;
	return 0;
fail:
	if (t->lfd >= 0)
		close(t->lfd);
	free(t);
	return -1;
}

size_t tunnel_poll_count(const struct tunnel *t)
{
	return t->nconns + 1;
}

size_t tunnel_poll_fill(struct tunnel *t, struct pollfd *pfd)
{
	size_t i, n = 0;

	if (t->nconns < TUNNEL_MAX_CONNS) {
		pfd[n] = (struct pollfd){.fd = t->lfd, .events = POLLIN};
		t->polled[n++] = 0;
	}
	for (i = 0; i < t->nconns; i++) {
		struct tconn *c = t->conns[i];
		short ev = 0;

		if (!c->rd_done)
			ev |= POLLIN;
		if (c->out_len)
			ev |= POLLOUT;
		pfd[n] = (struct pollfd){.fd = c->fd, .events = ev};
		t->polled[n++] = c->id;
	}
	return n;
}

static void conn_accept(struct tunnel *t)
{
	struct tconn *c;
	int fd;

	while (t->nconns < TUNNEL_MAX_CONNS) {
		fd = accept4(t->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		c = calloc(1, sizeof *c);
		if (!c) {
			close(fd);
			return;
		}
		c->fd = fd;
		c->id = t->next_id;
		t->next_id += 2;
		t->conns[t->nconns++] = c;
		send_simple(t, SB_CHAN_OPEN, c->id, NULL, 0);
	}
}

/* Reads once from connection i; returns -1 when the connection is gone. */
static int conn_read(struct tunnel *t, size_t i)
{
	static char buf[SB_CHAN_DATA_MAX];
	struct tconn *c = t->conns[i];
	ssize_t n = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	if (n < 0)
		return -1;
	if (n == 0) {
		c->rd_done = 1;
		send_simple(t, SB_CHAN_CLOSE, c->id, NULL, 0);
		return 0;
	}
	send_simple(t, SB_CHAN_DATA, c->id, buf, (size_t)n);
	return 0;
}

/* Index of the connection of stream id, or t->nconns when it is gone. */
static size_t conn_find(const struct tunnel *t, uint64_t id)
{
	size_t i;

	for (i = 0; i < t->nconns && t->conns[i]->id != id; i++)
		;
	return i;
}

void tunnel_poll_handle(struct tunnel *t, const struct pollfd *pfd, size_t n)
{
	struct tconn *c;
	int accept_now = 0;
	size_t k, i;

	/* Connections may have ended since the fill: find them by stream id. */
	for (k = 0; k < n; k++) {
		if (!t->polled[k]) {
			accept_now = pfd[k].revents & POLLIN;
			continue;
		}
		i = conn_find(t, t->polled[k]);
		if (i == t->nconns)
			continue;
		c = t->conns[i];
		if (((pfd[k].revents & (POLLIN | POLLHUP | POLLERR)) && !c->rd_done &&
		     conn_read(t, i)) ||
		    ((pfd[k].revents & (POLLOUT | POLLERR)) && conn_flush(c))) {
			conn_abort(t, i);
			continue;
		}
		if (conn_finished(c))
			conn_free(t, i);
	}
	if (accept_now)
		conn_accept(t);
}

void tunnel_frame(struct tunnel *t, int kind, uint64_t stream, const msgpack_object *body)
{
	size_t i = conn_find(t, stream), len, cap;
	struct tconn *c;
	const char *data;
	char *nb;

	if (i == t->nconns)
		return; /* stream already gone: its frames are dropped */
	c = t->conns[i];
	if (kind == SB_CHAN_CLOSE) {
		c->wr_done = 1;
		if (!c->out_len)
			shutdown(c->fd, SHUT_WR);
		if (conn_finished(c))
			conn_free(t, i);
		return;
	}
	if (c->wr_done)
		return;
	if (body->type == MSGPACK_OBJECT_BIN) {
		data = body->via.bin.ptr;
		len = body->via.bin.size;
	} else if (body->type == MSGPACK_OBJECT_STR) {
		data = body->via.str.ptr;
		len = body->via.str.size;
	} else {
		agent_log(t->chan, "tunnel: stream %llu: DATA body is not bin",
			  (unsigned long long)stream);
		return;
	}
	if (c->out_off) {
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
	}
	if (c->out_len + len > TUNNEL_MAX_BUFFER) {
		agent_log(t->chan, "tunnel: stream %llu: client not reading, dropped",
			  (unsigned long long)stream);
		conn_abort(t, i);
		return;
	}
	if (c->out_len + len > c->out_cap) {
		cap = c->out_cap ? c->out_cap : 65536;
		while (cap < c->out_len + len)
			cap *= 2;
		nb = realloc(c->out, cap);
		if (!nb) {
			conn_abort(t, i);
			return;
		}
		c->out = nb;
		c->out_cap = cap;
	}
	memcpy(c->out + c->out_len, data, len);
	c->out_len += len;
	if (conn_flush(c))
		conn_abort(t, i);
}

void tunnel_close(struct tunnel *t)
{
	if (!t)
		return;
	while (t->nconns)
		conn_abort(t, t->nconns - 1);
	close(t->lfd);
	free(t);
}
