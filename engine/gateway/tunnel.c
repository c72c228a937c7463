/* tunnel.c - guest streams to the gateway (see tunnel.h). */
#include "engine/gateway/tunnel.h"

#include <errno.h>
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
	int fd; /* the gateway connection */
	sb_watch *w;
	int guest_done; /* the guest sent CLOSE: shut our write side once flushed */
	int gw_deaf;	/* the gateway stopped reading: the guest's bytes are dropped */
	int host_done;	/* the gateway ended: we sent CLOSE */
	msgpack_sbuffer out; /* bytes from the guest not yet taken by the gateway */
};

struct sb_tunnel {
	sb_loop *loop;
	const struct sb_tunnel_ops *ops;
	void *ctx;
	struct tstream *streams[SB_TUNNEL_STREAMS];
	size_t n;
};

int sb_tunnel_open(sb_loop *loop, const struct sb_tunnel_ops *ops, void *ctx,
		   sb_tunnel **out)
{
	sb_tunnel *t = calloc(1, sizeof *t);

	if (!t)
		return SB_ERR_NOMEM;
	t->loop = loop;
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

	if (s->out.size)
		ev |= SB_WRITE;
	if (!s->host_done && s->t->ops->backlog(s->t->ctx) < SB_TUNNEL_BACKLOG)
		ev |= SB_READ;
	sb_watch_io_set(s->w, ev);
}

/* Writes what the gateway takes. When it takes nothing more (it closed the
 * connection, say after answering early), the guest's bytes are dropped
 * from now on, and reading goes on: its answer still reaches the guest. */
static void stream_flush(struct tstream *s)
{
	size_t off = 0;

	while (off < s->out.size) {
		ssize_t n = send(s->fd, s->out.data + off, s->out.size - off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n < 0) {
			s->gw_deaf = 1;
			off = s->out.size;
			break;
		}
		off += (size_t)n;
	}
	if (off) {
		memmove(s->out.data, s->out.data + off, s->out.size - off);
		s->out.size -= off;
	}
	if (!s->out.size && s->guest_done && !s->gw_deaf)
		shutdown(s->fd, SHUT_WR);
}

/* Returns 1 when the stream is over and was freed. */
static int stream_over(struct tstream *s)
{
	if ((s->guest_done || s->gw_deaf) && s->host_done && !s->out.size) {
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

	if (revents & SB_WRITE)
		stream_flush(s);
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
	struct tstream *s = NULL;

	if (stream_slot(t, id) || t->n == SB_TUNNEL_STREAMS || !(id & 1) ||
	    !(s = calloc(1, sizeof *s)) || t->ops->connect(t->ctx, &s->fd)) {
		free(s);
		t->ops->send(t->ctx, SB_CHAN_CLOSE, id, NULL, 0);
		return;
	}
	s->t = t;
	s->id = id;
	t->streams[t->n++] = s;
	if (!(s->w = sb_loop_io(t->loop, s->fd, SB_READ, on_stream_io, s))) {
		stream_abort(s);
		return;
	}
	stream_watch(s);
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
		if (!s->out.size && !s->gw_deaf)
			shutdown(s->fd, SHUT_WR);
		if (!stream_over(s))
			stream_watch(s);
		return;
	}
	if (kind != SB_CHAN_DATA || s->guest_done || s->gw_deaf)
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
	stream_flush(s);
	if (!stream_over(s))
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
