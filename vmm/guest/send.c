/* send.c - frames from the agent to the host, and diagnostics. */
#include "vmm/guest/agent.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/mpack.h"
#include "vmm/chan.h"

void agent_frame_begin(struct agent_frame *f, int kind, uint64_t stream)
{
	msgpack_sbuffer_init(&f->sb);
	msgpack_packer_init(&f->pk, &f->sb, msgpack_sbuffer_write);
	f->kind = kind;
	f->mapped = 0;
	f->start = 0;
	if (sb_chan_numbered(kind))
		return; /* the body only: the ring numbers and frames it */
	if (sb_chan_begin(&f->sb, &f->pk, kind, stream, &f->start))
		f->start = SIZE_MAX; /* out of memory: agent_frame_send fails */
}

int agent_write_all(int fd, const char *buf, size_t len)
{
	ssize_t n;

	while (len) {
		n = write(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

sb_mapw *agent_frame_map(struct agent_frame *f)
{
	sb_mapw_begin(&f->map, &f->pk);
	f->mapped = 1;
	return &f->map;
}

int agent_frame_send(struct agent_port *p, struct agent_frame *f)
{
	const struct sb_chan_kept *k;
	int ret = -1;

	if (f->mapped && sb_mapw_end(&f->map))
		goto out; /* out of memory: not logged, a LOG frame would fail too */
	if (sb_chan_numbered(f->kind)) {
		if (!f->sb.data || sb_chan_ring_add(&p->ring, f->kind, f->sb.data,
						    f->sb.size, &k)) {
			agent_log(p, "cannot keep a frame: %s", sb_errmsg(SB_ERR_NOMEM));
			goto out;
		}
		if (p->fd >= 0)
			ret = agent_write_all(p->fd, k->frame, k->len);
		goto out; /* kept: sent again after a reconnection */
	}
	if (f->start == SIZE_MAX || sb_chan_end(&f->sb, f->start))
		goto out;
	if (p->fd < 0)
		goto out;
	ret = agent_write_all(p->fd, f->sb.data, f->sb.size);
out:
	msgpack_sbuffer_destroy(&f->sb);
	return ret;
}

void agent_ack(struct agent_port *p, const msgpack_object *body)
{
	const msgpack_object *seq = sb_map_get(body, "seq");
	const struct sb_chan_kept *k;
	struct agent_frame f;

	if (!seq || seq->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
		agent_log(p, "ACK without a seq");
		return;
	}
	sb_chan_ring_ack(&p->ring, seq->via.u64);
	if (!sb_map_bool(body, "resend", 0))
		return;
	agent_frame_begin(&f, SB_CHAN_RESEND, 0);
	sb_mapw_u64(agent_frame_map(&f), "next", sb_chan_ring_next(&p->ring));
	if (agent_frame_send(p, &f))
		return;
	for (size_t i = 0; (k = sb_chan_ring_at(&p->ring, i)); i++)
		if (agent_write_all(p->fd, k->frame, k->len))
			return;
}

int agent_port_full(const struct agent_port *p)
{
	return p->ring.bytes >= AGENT_KEEP_BYTES || p->ring.n >= AGENT_KEEP_FRAMES;
}

sb_mapw *agent_event_begin(struct agent_frame *f, const char *type)
{
	agent_frame_begin(f, SB_CHAN_EVENT, 0);
	msgpack_pack_map(&f->pk, 2);
	sb_pack_kstr(&f->pk, "type", type);
	sb_pack_str(&f->pk, "payload");
	return agent_frame_map(f);
}

void agent_log(struct agent_port *p, const char *fmt, ...)
{
	struct agent_frame f;
	char line[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof line)
		n = sizeof line - 1;
	if (p->console >= 0)
		dprintf(p->console, "sanbox-agent: %s\n", line);
	if (p->fd < 0)
		return;
	agent_frame_begin(&f, SB_CHAN_LOG, 0);
	sb_mapw_strn(agent_frame_map(&f), "message", line, (size_t)n);
	agent_frame_send(p, &f);
}
