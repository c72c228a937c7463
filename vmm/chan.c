/* chan.c - frame codec of the host <-> guest channel. */
#include "vmm/chan.h"

#include <endian.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "engine/mpack.h"

static int reader_next(struct sb_chan_reader *r, struct sb_chan_frame *f);

/* The 32-bit big-endian number at p. */
static uint32_t be32_at(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return be32toh(v);
}

struct sb_chan_reader {
	char *buf;
	size_t cap;  /* bytes allocated */
	size_t off;  /* first byte not yet returned as a frame */
	size_t len;  /* bytes held */
	int err;     /* sticky framing error, 0 while the stream is sound */
	int hunting; /* looking for the start of a frame (sb_chan_reader_resync) */
	msgpack_unpacked unp;
};

/* Indexed by enum sb_chan_kind. */
static const char *const kind_names[] = {"?",	       "HELLO", "SPEC", "EVENT",
					 "EVENT_JSON", "OPEN",	"DATA", "CLOSE",
					 "SIGNAL",     "DONE",	"LOG",	"INPUT",
					 "SYNC",       "SYNCED", "RESTORED",
					 "THAW",       "ACK",	"RESEND",
					 "EXEC",       "EXEC_OUT", "EXEC_EXIT",
					 "PUT",        "PUT_DONE"};
_Static_assert(sizeof kind_names / sizeof kind_names[0] == SB_CHAN_KIND_MAX + 1,
	       "a name for every frame kind");

const char *sb_chan_kind_name(int kind)
{
	if (kind < SB_CHAN_HELLO || kind > SB_CHAN_KIND_MAX)
		return "?";
	return kind_names[kind];
}

int sb_chan_numbered(int kind)
{
	return kind == SB_CHAN_EVENT || kind == SB_CHAN_EVENT_JSON;
}

int sb_chan_ring_add(struct sb_chan_ring *r, int kind, const void *body, size_t len,
		     const struct sb_chan_kept **kept)
{
	msgpack_sbuffer sb;
	struct sb_chan_kept *k;
	int err;

	if (!sb_chan_numbered(kind))
		return sb_seterr(SB_ERR_INVAL, "chan: %s frames are not numbered",
				 sb_chan_kind_name(kind));
	if (r->head + r->n == r->cap) {
		if (r->head) { /* room at the front: move the kept ones there */
			memmove(r->v, r->v + r->head, r->n * sizeof *r->v);
			r->head = 0;
		} else {
			size_t cap = r->cap ? 2 * r->cap : 64;
			struct sb_chan_kept *v = realloc(r->v, cap * sizeof *v);
			if (!v)
				return sb_seterr(SB_ERR_NOMEM, "chan: out of memory");
			r->v = v;
			r->cap = cap;
		}
	}
	msgpack_sbuffer_init(&sb);
	if ((err = sb_chan_encode(kind, r->seq + 1, body, len, &sb))) {
		msgpack_sbuffer_destroy(&sb);
		return err;
	}
	k = &r->v[r->head + r->n++];
	k->seq = ++r->seq;
	k->len = sb.size;
	k->frame = msgpack_sbuffer_release(&sb);
	r->bytes += k->len;
	*kept = k;
	return 0;
}

size_t sb_chan_ring_ack(struct sb_chan_ring *r, uint64_t seq)
{
	size_t dropped = 0;

	while (r->n && r->v[r->head].seq <= seq) {
		r->bytes -= r->v[r->head].len;
		free(r->v[r->head].frame);
		r->head++;
		r->n--;
		dropped++;
	}
	if (!r->n)
		r->head = 0;
	return dropped;
}

uint64_t sb_chan_ring_next(const struct sb_chan_ring *r)
{
	return r->n ? r->v[r->head].seq : r->seq + 1;
}

const struct sb_chan_kept *sb_chan_ring_at(const struct sb_chan_ring *r, size_t i)
{
	return i < r->n ? &r->v[r->head + i] : NULL;
}

void sb_chan_ring_reset(struct sb_chan_ring *r)
{
	sb_chan_ring_ack(r, UINT64_MAX);
	r->seq = 0;
}

void sb_chan_ring_free(struct sb_chan_ring *r)
{
	sb_chan_ring_reset(r);
	free(r->v);
	memset(r, 0, sizeof *r);
}

int sb_chan_begin(msgpack_sbuffer *out, msgpack_packer *pk, int kind, uint64_t stream,
		  size_t *start)
{
	static const char zero[4];
	size_t at = out->size;

	if (kind < SB_CHAN_HELLO || kind > SB_CHAN_KIND_MAX)
		return sb_seterr(SB_ERR_INVAL, "chan: unknown frame kind %d", kind);
	if (msgpack_sbuffer_write(out, zero, sizeof zero) || msgpack_pack_array(pk, 3) ||
	    msgpack_pack_uint64(pk, kind) || msgpack_pack_uint64(pk, stream))
		goto fail;
	*start = at;
	return 0;
fail:
	out->size = at;
	return sb_seterr(SB_ERR_NOMEM, "chan: out of memory packing a frame");
}

/* Size of the msgpack unsigned integer whose first byte is b. */
static size_t uint_size(unsigned char b)
{
	switch (b) {
	case 0xcc: return 2;
	case 0xcd: return 3;
	case 0xce: return 5;
	case 0xcf: return 9;
	}
	return 1;
}

int sb_chan_end(msgpack_sbuffer *out, size_t start)
{
	unsigned char *p = (unsigned char *)out->data + start;
	size_t len = out->size - start - 4;
	size_t head = 2 + uint_size(p[6]); /* array byte, kind byte, stream */
	uint32_t be;
	int err;

	if (len <= head) {
		err = sb_seterr(SB_ERR_PROTO, "chan: frame without a body");
		goto fail;
	}
	if (len > SB_CHAN_MAX) {
		err = sb_seterr(SB_ERR_TOOBIG, "chan: frame of %zu bytes exceeds %u", len,
				SB_CHAN_MAX);
		goto fail;
	}
	be = htobe32((uint32_t)len);
	memcpy(p, &be, 4);
	return 0;
fail:
	out->size = start;
	return err;
}

int sb_chan_encode(int kind, uint64_t stream, const void *body, size_t len,
		   msgpack_sbuffer *out)
{
	msgpack_packer pk;
	size_t start = 0;
	int err;

	if (len == 0)
		return sb_seterr(SB_ERR_INVAL, "chan: empty frame body");
	if (len > SB_CHAN_MAX)
		return sb_seterr(SB_ERR_TOOBIG, "chan: body of %zu bytes", len);
	msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
	err = sb_chan_begin(out, &pk, kind, stream, &start);
	if (err)
		return err;
	if (msgpack_sbuffer_write(out, body, len)) {
		out->size = start;
		return sb_seterr(SB_ERR_NOMEM, "chan: out of memory packing a frame");
	}
	return sb_chan_end(out, start);
}

int sb_chan_pack_input(msgpack_sbuffer *out, uint32_t index, const void *data, size_t len)
{
	const char *p = data;
	size_t at = out->size, off, n, start;
	msgpack_packer pk;
	int err;

	msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
	for (off = 0; off < len; off += n) {
		n = len - off < SB_CHAN_DATA_MAX ? len - off : SB_CHAN_DATA_MAX;
		if ((err = sb_chan_begin(out, &pk, SB_CHAN_INPUT, index, &start)))
			goto fail;
		if (msgpack_pack_bin_with_body(&pk, p + off, n)) {
			err = sb_seterr(SB_ERR_NOMEM,
					"chan: out of memory packing a frame");
			goto fail;
		}
		if ((err = sb_chan_end(out, start)))
			goto fail;
	}
	return 0;
fail:
	out->size = at;
	return err;
}

int sb_chan_reader_new(sb_chan_reader **out)
{
	sb_chan_reader *r = calloc(1, sizeof *r);

	if (!r)
		return sb_seterr(SB_ERR_NOMEM, "chan: out of memory");
	msgpack_unpacked_init(&r->unp);
	*out = r;
	return 0;
}

void sb_chan_reader_free(sb_chan_reader *r)
{
	if (!r)
		return;
	msgpack_unpacked_destroy(&r->unp);
	free(r->buf);
	free(r);
}

size_t sb_chan_reader_pending(const sb_chan_reader *r)
{
	return r->err ? 0 : r->len - r->off;
}

int sb_chan_reader_error(const sb_chan_reader *r)
{
	return r->err;
}

int sb_chan_reader_feed(sb_chan_reader *r, const void *buf, size_t len)
{
	size_t need, cap;
	char *nb;

	if (r->err)
		return r->err;
	/* The last frame's body may point into buf: it is invalid from now. */
	msgpack_unpacked_destroy(&r->unp);
	msgpack_unpacked_init(&r->unp);
	if (r->off) {
		memmove(r->buf, r->buf + r->off, r->len - r->off);
		r->len -= r->off;
		r->off = 0;
	}
	need = r->len + len;
	if (need > r->cap) {
		cap = r->cap ? r->cap : 4096;
		while (cap < need)
			cap *= 2;
		nb = realloc(r->buf, cap);
		if (!nb)
			return sb_seterr(SB_ERR_NOMEM, "chan: out of memory");
		r->buf = nb;
		r->cap = cap;
	}
	if (len)
		memcpy(r->buf + r->len, buf, len);
	r->len += len;
	return 0;
}

void sb_chan_reader_resync(sb_chan_reader *r)
{
	r->err = 0;
	r->hunting = 1;
}

/* Hunting: drops bytes up to the first place a frame may start (a length
 * of 1..SB_CHAN_MAX, then the array of three with a known kind). Returns 1
 * with r->off there, 0 when more bytes are needed. */
static int hunt(sb_chan_reader *r)
{
	while (r->len - r->off >= 6) {
		const unsigned char *p = (const unsigned char *)r->buf + r->off;
		uint32_t len = be32_at(p);
		if (len >= 3 && len <= SB_CHAN_MAX && p[4] == 0x93 &&
		    p[5] >= SB_CHAN_HELLO && p[5] <= SB_CHAN_KIND_MAX)
			return 1;
		r->off++;
	}
	return 0;
}

int sb_chan_reader_next(sb_chan_reader *r, struct sb_chan_frame *f)
{
	int ret;

	while (r->hunting) {
		size_t at;
		if (!hunt(r))
			return SB_END;
		at = r->off;
		ret = reader_next(r, f);
		if (ret == SB_END) {
			r->off = at;
			return SB_END; /* the candidate is not all there yet */
		}
		if (ret == 0) {
			r->hunting = 0;
			return 0;
		}
		r->err = 0;
		r->off = at + 1; /* not a frame: look further */
	}
	return reader_next(r, f);
}

/* Takes the next frame of a reader that is not hunting. */
static int reader_next(sb_chan_reader *r, struct sb_chan_frame *f)
{
	const unsigned char *p;
	const msgpack_object *a;
	size_t avail, used = 0, objlen;
	uint32_t len;
	int ret;

	msgpack_unpacked_destroy(&r->unp);
	msgpack_unpacked_init(&r->unp);
	if (r->err)
		return r->err;
	avail = r->len - r->off;
	if (avail < 4)
		return SB_END;
	p = (const unsigned char *)r->buf + r->off;
	len = be32_at(p);
	if (len == 0) {
		r->err = SB_ERR_PROTO;
		return sb_seterr(r->err, "chan: frame of length 0");
	}
	if (len > SB_CHAN_MAX) {
		r->err = SB_ERR_TOOBIG;
		return sb_seterr(r->err, "chan: frame of %u bytes exceeds %u", len,
				 SB_CHAN_MAX);
	}
	if (avail - 4 < len)
		return SB_END;
	r->off += 4 + (size_t)len;
	if (sb_msgpack_check(p + 4, len, &objlen) || objlen != len)
		return sb_seterr(SB_ERR_PROTO, "chan: frame is not one msgpack object");
	ret = msgpack_unpack_next(&r->unp, (const char *)p + 4, len, &used);
	if (ret != MSGPACK_UNPACK_SUCCESS || used != len)
		return sb_seterr(SB_ERR_PROTO, "chan: frame is not one msgpack object");
	if (r->unp.data.type != MSGPACK_OBJECT_ARRAY || r->unp.data.via.array.size != 3)
		return sb_seterr(SB_ERR_PROTO, "chan: frame is not [kind, stream, body]");
	a = r->unp.data.via.array.ptr;
	if (a[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
	    a[0].via.u64 < SB_CHAN_HELLO || a[0].via.u64 > SB_CHAN_KIND_MAX)
		return sb_seterr(SB_ERR_PROTO, "chan: bad frame kind");
	if (a[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return sb_seterr(SB_ERR_PROTO, "chan: bad frame stream");
	f->kind = (int)a[0].via.u64;
	f->stream = a[1].via.u64;
	f->body = a[2];
	return 0;
}
