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

int agent_frame_send(struct agent_port *p, struct agent_frame *f)
{
	const struct sb_chan_kept *k;
	int ret = -1;

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
	msgpack_pack_map(&f.pk, 1);
	agent_pack_kv_uint(&f, "next", sb_chan_ring_next(&p->ring));
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

void agent_pack_str(struct agent_frame *f, const char *s)
{
	msgpack_pack_str_with_body(&f->pk, s, strlen(s));
}

void agent_pack_kv_strn(struct agent_frame *f, const char *k, const char *v, size_t n)
{
	agent_pack_str(f, k);
	msgpack_pack_str_with_body(&f->pk, v, n);
}

void agent_pack_kv_str(struct agent_frame *f, const char *k, const char *v)
{
	agent_pack_kv_strn(f, k, v, strlen(v));
}

void agent_pack_kv_bin(struct agent_frame *f, const char *k, const void *v, size_t n)
{
	agent_pack_str(f, k);
	msgpack_pack_bin_with_body(&f->pk, v, n);
}

void agent_pack_kv_uint(struct agent_frame *f, const char *k, uint64_t v)
{
	agent_pack_str(f, k);
	msgpack_pack_uint64(&f->pk, v);
}

void agent_pack_kv_bool(struct agent_frame *f, const char *k, int v)
{
	agent_pack_str(f, k);
	if (v)
		msgpack_pack_true(&f->pk);
	else
		msgpack_pack_false(&f->pk);
}

void agent_pack_kv_int(struct agent_frame *f, const char *k, int64_t v)
{
	agent_pack_str(f, k);
	msgpack_pack_int64(&f->pk, v);
}

void agent_event_begin(struct agent_frame *f, const char *type, uint32_t nfields)
{
	agent_frame_begin(f, SB_CHAN_EVENT, 0);
	msgpack_pack_map(&f->pk, 2);
	agent_pack_kv_str(f, "type", type);
	agent_pack_str(f, "payload");
	msgpack_pack_map(&f->pk, nfields);
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
	msgpack_pack_map(&f.pk, 1);
	agent_pack_kv_strn(&f, "message", line, (size_t)n);
	agent_frame_send(p, &f);
}
