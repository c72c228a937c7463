/* chan.c - frame codec of the host <-> guest channel. */
#include "vmm/chan.h"

#include <stdlib.h>
#include <string.h>

#include "engine/error.h"

struct sb_chan_reader {
	char *buf;
	size_t cap; /* bytes allocated */
	size_t off; /* first byte not yet returned as a frame */
	size_t len; /* bytes held */
	int err;    /* sticky framing error, 0 while the stream is sound */
	msgpack_unpacked unp;
};

/* Indexed by enum sb_chan_kind. */
static const char *const kind_names[] = {"?",	       "HELLO", "SPEC", "EVENT",
					 "EVENT_JSON", "OPEN",	"DATA", "CLOSE",
					 "SIGNAL",     "DONE",	"LOG"};

const char *sb_chan_kind_name(int kind)
{
	if (kind < SB_CHAN_HELLO || kind > SB_CHAN_KIND_MAX)
		return "?";
	return kind_names[kind];
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
	p[0] = len >> 24;
	p[1] = len >> 16;
	p[2] = len >> 8;
	p[3] = len;
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

/* Bytes of the header and payload of the msgpack object starting at p[0]
 * (avail bytes readable), and in *items how many objects it contains.
 * Returns 0 when the header is cut short. */
static size_t mp_head(const unsigned char *p, size_t avail, uint64_t *items,
		      uint64_t *payload)
{
	static const unsigned char widths[] = {1, 2, 4, 8};
	unsigned char b = p[0];
	size_t n = 0, w, i;

	*items = 0;
	*payload = 0;
	if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
		return 1;
	if ((b & 0xf0) == 0x80 || (b & 0xf0) == 0x90) {
		*items = (uint64_t)(b & 0x0f) << ((b & 0xf0) == 0x80);
		return 1;
	}
	if ((b & 0xe0) == 0xa0) {
		*payload = b & 0x1f;
		return 1;
	}
	switch (b) {
	case 0xc4:
	case 0xc5:
	case 0xc6: /* bin 8/16/32 */
	case 0xd9:
	case 0xda:
	case 0xdb: /* str 8/16/32 */ w = widths[b >= 0xd9 ? b - 0xd9 : b - 0xc4]; break;
	case 0xc7:
	case 0xc8:
	case 0xc9: /* ext 8/16/32: size, then type */
		w = widths[b - 0xc7];
		*payload = 1;
		break;
	case 0xdc:
	case 0xdd: /* array 16/32 */
	case 0xde:
	case 0xdf: /* map 16/32 */ w = (b & 1) ? 4 : 2; break;
	case 0xd4:
	case 0xd5:
	case 0xd6:
	case 0xd7:
	case 0xd8: /* fixext */ *payload = 1 + ((size_t)1 << (b - 0xd4)); return 1;
	case 0xcc:
	case 0xcd:
	case 0xce:
	case 0xcf: /* uint */
	case 0xd0:
	case 0xd1:
	case 0xd2:
	case 0xd3: /* int */ *payload = (size_t)1 << (b & 3); return 1;
	case 0xca: *payload = 4; return 1;
	case 0xcb: *payload = 8; return 1;
	default: /* 0xc1 is never used */ return 0;
	}
	if (avail < 1 + w)
		return 0;
	for (i = 0; i < w; i++)
		n = n << 8 | p[1 + i];
	if (b >= 0xdc)
		*items = (uint64_t)n << (b >= 0xde);
	else
		*payload += n;
	return 1 + w;
}

/* Checks that p[0..len) is exactly one msgpack object whose every length and
 * count fits in the bytes there, so that unpacking it never allocates more
 * than a small multiple of len (msgpack-c sizes arrays by their claim). */
static int mp_check(const unsigned char *p, size_t len)
{
	uint64_t todo = 1, items, payload;
	size_t pos = 0, head;

	while (todo) {
		if (pos >= len)
			return -1;
		head = mp_head(p + pos, len - pos, &items, &payload);
		if (!head || payload > len - pos - head || items > len - pos - head)
			return -1;
		pos += head + payload;
		todo += items - 1;
	}
	return pos == len ? 0 : -1;
}

int sb_chan_reader_next(sb_chan_reader *r, struct sb_chan_frame *f)
{
	const unsigned char *p;
	const msgpack_object *a;
	size_t avail, used = 0;
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
	len = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
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
	if (mp_check(p + 4, len))
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

const msgpack_object *sb_chan_map_get(const msgpack_object *m, const char *key)
{
	size_t klen = strlen(key);
	uint32_t i;

	if (!m || m->type != MSGPACK_OBJECT_MAP)
		return NULL;
	for (i = 0; i < m->via.map.size; i++) {
		const msgpack_object *k = &m->via.map.ptr[i].key;

		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == klen &&
		    memcmp(k->via.str.ptr, key, klen) == 0)
			return &m->via.map.ptr[i].val;
	}
	return NULL;
}
