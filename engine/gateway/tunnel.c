/* tunnel.c - guest streams to the gateway (see tunnel.h). */
#include "engine/gateway/tunnel.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/error.h"
#include "vmm/chan.h"

#define READ_CHUNK  SB_CHAN_DATA_MAX
#define READ_BUDGET (256u << 10) /* bytes read from one stream per wake-up */

struct tstream {
	sb_tunnel *t;
	uint64_t id;
	int fd;
	sb_watch *w;
	uint16_t lport;
	int connected;
	int guest_done;	     /* the guest sent CLOSE: shut our write side once flushed */
	int host_done;	     /* the gateway ended: we sent CLOSE */
	msgpack_sbuffer out; /* bytes from the guest not yet taken by the gateway */
};

struct sb_tunnel {
	sb_loop *loop;
	uint16_t port;
	const struct sb_tunnel_ops *ops;
	void *ctx;
	struct tstream *streams[SB_TUNNEL_STREAMS];
	size_t n;
};

int sb_tunnel_open(sb_loop *loop, uint16_t port, const struct sb_tunnel_ops *ops,
		   void *ctx, sb_tunnel **out)
{
	sb_tunnel *t = calloc(1, sizeof *t);

	if (!t)
		return SB_ERR_NOMEM;
	t->loop = loop;
	t->port = port;
	t->ops = ops;
	t->ctx = ctx;
	*out = t;
	return SB_OK;
}

size_t sb_tunnel_streams(const sb_tunnel *t)
{
	return t->n;
}

static struct tstream **stream_slot(sb_tunnel *t, uint64_t id)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->streams[i]->id == id)
			return &t->streams[i];
	return NULL;
}

static void stream_free(struct tstream *s)
{
	sb_tunnel *t = s->t;
	struct tstream **slot = stream_slot(t, s->id);

	if (slot)
		*slot = t->streams[--t->n];
	if (s->lport)
		t->ops->tie(t->ctx, s->lport, 0);
	sb_watch_stop(s->w);
	if (s->fd >= 0)
		close(s->fd);
	msgpack_sbuffer_destroy(&s->out);
	free(s);
}

/* Ends a stream after an error: CLOSE to the guest unless sent already. */
static void stream_abort(struct tstream *s)
{
	if (!s->host_done)
		s->t->ops->send(s->t->ctx, SB_CHAN_CLOSE, s->id, NULL, 0);
	stream_free(s);
}

/* Sets what the stream's socket is watched for. */
static void stream_watch(struct tstream *s)
{
	int ev = 0;

	if (!s->connected || s->out.size)
		ev |= SB_WRITE;
	if (s->connected && !s->host_done &&
	    s->t->ops->backlog(s->t->ctx) < SB_TUNNEL_BACKLOG)
		ev |= SB_READ;
	sb_watch_io_set(s->w, ev);
}

/* Writes what the gateway takes; returns -1 on a socket error. */
static int stream_flush(struct tstream *s)
{
	size_t off = 0;

	while (off < s->out.size) {
		ssize_t n = send(s->fd, s->out.data + off, s->out.size - off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n < 0)
			return -1;
		off += (size_t)n;
	}
	if (off) {
		memmove(s->out.data, s->out.data + off, s->out.size - off);
		s->out.size -= off;
	}
	if (!s->out.size && s->guest_done)
		shutdown(s->fd, SHUT_WR);
	return 0;
}

/* Returns 1 when the stream is over and was freed. */
static int stream_over(struct tstream *s)
{
	if (s->guest_done && s->host_done && !s->out.size) {
		stream_free(s);
		return 1;
	}
	return 0;
}

static void stream_read(struct tstream *s)
{
	char buf[READ_CHUNK];
	size_t budget = READ_BUDGET;

	while (budget && s->t->ops->backlog(s->t->ctx) < SB_TUNNEL_BACKLOG) {
		ssize_t n = read(s->fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n < 0) {
			stream_abort(s);
			return;
		}
		if (n == 0) { /* the gateway is done sending */
			s->host_done = 1;
			s->t->ops->send(s->t->ctx, SB_CHAN_CLOSE, s->id, NULL, 0);
			if (!stream_over(s))
				stream_watch(s);
			return;
		}
		s->t->ops->send(s->t->ctx, SB_CHAN_DATA, s->id, buf, (size_t)n);
		budget -= (size_t)n < budget ? (size_t)n : budget;
	}
	stream_watch(s); /* paused on the backlog, or out of budget for now */
}

static void on_stream_io(void *ctx, int revents)
{
	struct tstream *s = ctx;
	int err = 0;
	socklen_t len = sizeof err;

	if ((revents & SB_WRITE) && !s->connected) {
		if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
			stream_abort(s);
			return;
		}
		s->connected = 1;
	}
	if ((revents & SB_WRITE) && stream_flush(s)) {
		stream_abort(s);
		return;
	}
	if (stream_over(s))
		return;
	if (revents & SB_READ) {
		stream_read(s); /* may free s */
		return;
	}
	stream_watch(s);
}

static void stream_open(sb_tunnel *t, uint64_t id)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(t->port)};
	struct sockaddr_in me;
	socklen_t len = sizeof me;
	struct tstream *s;
	int one = 1;

	if (stream_slot(t, id) || t->n == SB_TUNNEL_STREAMS || !(id & 1) ||
	    !(s = calloc(1, sizeof *s))) {
		t->ops->send(t->ctx, SB_CHAN_CLOSE, id, NULL, 0);
		return;
	}
	s->t = t;
	s->id = id;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	t->streams[t->n++] = s;
	if (s->fd < 0 ||
	    (connect(s->fd, (struct sockaddr *)&sa, sizeof sa) && errno != EINPROGRESS) ||
	    getsockname(s->fd, (struct sockaddr *)&me, &len)) {
		stream_abort(s);
		return;
	}
	setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	s->lport = ntohs(me.sin_port);
	t->ops->tie(t->ctx, s->lport, 1); /* before the gateway can see a request */
	if (!(s->w = sb_loop_io(t->loop, s->fd, SB_WRITE, on_stream_io, s)))
		stream_abort(s);
}

void sb_tunnel_frame(sb_tunnel *t, int kind, uint64_t stream, const msgpack_object *body)
{
	struct tstream **slot, *s;
	size_t len;

	if (kind == SB_CHAN_OPEN) {
		stream_open(t, stream);
		return;
	}
	if (!(slot = stream_slot(t, stream)))
		return; /* an ended stream: its late frames are dropped */
	s = *slot;
	if (kind == SB_CHAN_CLOSE) {
		s->guest_done = 1;
		if (s->connected && !s->out.size)
			shutdown(s->fd, SHUT_WR);
		if (!stream_over(s))
			stream_watch(s);
		return;
	}
	if (kind != SB_CHAN_DATA || s->guest_done)
		return;
	if (body->type != MSGPACK_OBJECT_BIN && body->type != MSGPACK_OBJECT_STR) {
		stream_abort(s);
		return;
	}
	len = body->via.bin.size;
	if (s->out.size + len > SB_TUNNEL_BUFFER) {
		stream_abort(s); /* the gateway is not taking what the guest sends */
		return;
	}
	if (len && msgpack_sbuffer_write(&s->out, body->via.bin.ptr, len)) {
		stream_abort(s);
		return;
	}
	if (s->connected && stream_flush(s)) {
		stream_abort(s);
		return;
	}
	stream_watch(s);
}

void sb_tunnel_drained(sb_tunnel *t)
{
	for (size_t i = 0; i < t->n; i++)
		stream_watch(t->streams[i]);
}

void sb_tunnel_close(sb_tunnel *t)
{
	if (!t)
		return;
	while (t->n)
		stream_free(t->streams[t->n - 1]);
	free(t);
}
