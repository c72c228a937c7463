/* record.c - encode and decode stored events. */
#include "engine/log/record.h"

#include <string.h>

/* Inlined (the header carries the implementation): a record's checksum is
 * computed on every read, and a call into the shared library costs as much
 * as hashing a small record. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "engine/bytes.h"
#include "engine/error.h"

#define HEADER_FIELDS 7

/* Reads a w-byte (1, 2, 4 or 8) big-endian number at p. */
static uint64_t get_be(const uint8_t *p, unsigned w)
{
	uint16_t v2;
	uint32_t v4;

	switch (w) {
	case 1: return p[0];
	case 2: memcpy(&v2, p, 2); return be16toh(v2);
	case 4: memcpy(&v4, p, 4); return be32toh(v4);
	default: return sb_be64_get(p);
	}
}

/* --- writing: the encodings msgpack-c's packer chooses --- */

static size_t uint_size(uint64_t v)
{
	return v < 0x80 ? 1 : v < 0x100 ? 2 : v < 0x10000 ? 3 : v <= UINT32_MAX ? 5 : 9;
}

static size_t str_size(size_t n)
{
	return n < 32 ? 1 + n : n < 0x100 ? 2 + n : n < 0x10000 ? 3 + n : 5 + n;
}

/* Writes v in w big-endian bytes after the tag byte; returns the end. */
static uint8_t *put_tagged(uint8_t *p, uint8_t tag, uint64_t v, unsigned w)
{
	*p++ = tag;
	for (unsigned i = w; i > 0; i--, v >>= 8)
		p[i - 1] = (uint8_t)v;
	return p + w;
}

static uint8_t *put_uint(uint8_t *p, uint64_t v)
{
	if (v < 0x80) {
		*p = (uint8_t)v;
		return p + 1;
	}
	if (v < 0x100)
		return put_tagged(p, 0xcc, v, 1);
	if (v < 0x10000)
		return put_tagged(p, 0xcd, v, 2);
	if (v <= UINT32_MAX)
		return put_tagged(p, 0xce, v, 4);
	return put_tagged(p, 0xcf, v, 8);
}

static uint8_t *put_str(uint8_t *p, const char *s, size_t n)
{
	if (n < 32) {
		*p++ = (uint8_t)(0xa0 | n);
	} else if (n < 0x100) {
		p = put_tagged(p, 0xd9, n, 1);
	} else if (n < 0x10000) {
		p = put_tagged(p, 0xda, n, 2);
	} else {
		p = put_tagged(p, 0xdb, n, 4);
	}
	memcpy(p, s, n);
	return p + n;
}

/* The longest header: array and version bytes, three integers of 9 bytes,
 * the longest type (str8) and run (fixstr), the source. */
#define HEADER_MAX (2 + 3 * 9 + 2 + SB_TYPE_MAX + 1 + SB_RUN_MAX + 1)

/* Writes ev's header to out (HEADER_MAX bytes); returns its length. */
static size_t header_write(const struct sb_event *ev, uint8_t *out)
{
	uint8_t *p = out;

	*p++ = 0x90 | HEADER_FIELDS;
	*p++ = SB_RECORD_VERSION;
	p = put_uint(p, ev->offset);
	p = put_str(p, ev->type, strnlen(ev->type, sizeof ev->type - 1));
	p = put_str(p, ev->run, strnlen(ev->run, sizeof ev->run - 1));
	p = put_uint(p, ev->seq);
	p = put_uint(p, ev->ts_ns);
	p = put_uint(p, (uint8_t)ev->source);
	return (size_t)(p - out);
}

size_t sb_record_size(const struct sb_event *ev)
{
	size_t tl = strnlen(ev->type, sizeof ev->type - 1),
	       rl = strnlen(ev->run, sizeof ev->run - 1);

	if (!ev->payload || !ev->payload_len)
		return 0;
	return 2 + uint_size(ev->offset) + str_size(tl) + str_size(rl) +
	       uint_size(ev->seq) + uint_size(ev->ts_ns) +
	       uint_size((uint8_t)ev->source) + ev->payload_len + 8;
}

void sb_record_write(const struct sb_event *ev, uint8_t *out)
{
	size_t hl = header_write(ev, out);

	memcpy(out + hl, ev->payload, ev->payload_len);
	sb_be64_put(out + hl + ev->payload_len, XXH3_64bits(out, hl + ev->payload_len));
}

int sb_record_encode(const struct sb_event *ev, msgpack_sbuffer *out)
{
	uint8_t hdr[HEADER_MAX], sum[8];
	size_t start = out->size, hl;

	if (!ev->payload || !ev->payload_len)
		return sb_seterr(SB_ERR_INVAL, "event %s has no payload", ev->type);
	hl = header_write(ev, hdr);
	if (msgpack_sbuffer_write(out, (const char *)hdr, hl) ||
	    msgpack_sbuffer_write(out, (const char *)ev->payload, ev->payload_len))
		return SB_ERR_NOMEM;
	sb_be64_put(sum, XXH3_64bits(out->data + start, out->size - start));
	if (msgpack_sbuffer_write(out, (const char *)sum, sizeof sum))
		return SB_ERR_NOMEM;
	return SB_OK;
}

/* --- reading --- */

struct reader {
	const uint8_t *p;
	size_t at, end;
};

/* Reads the w-byte big-endian length or value after a tag byte. */
static int rd_be(struct reader *r, unsigned w, uint64_t *v)
{
	if (r->end - r->at < w)
		return -1;
	*v = get_be(r->p + r->at, w);
	r->at += w;
	return 0;
}

/* Reads a non-negative integer of any msgpack encoding. */
static int rd_uint(struct reader *r, uint64_t *v)
{
	uint8_t t;
	unsigned w;

	if (r->at >= r->end)
		return -1;
	t = r->p[r->at++];
	if (t <= 0x7f) {
		*v = t;
		return 0;
	}
	if (t >= 0xcc && t <= 0xcf) /* uint 8..64 */
		return rd_be(r, 1u << (t - 0xcc), v);
	if (t < 0xd0 || t > 0xd3) /* int 8..64: only when not negative */
		return -1;
	w = 1u << (t - 0xd0);
	if (rd_be(r, w, v))
		return -1;
	return *v >> (8 * w - 1) ? -1 : 0;
}

/* Reads a string into dst (cap bytes with its NUL): not empty, shorter than
 * cap, no NUL inside (they are C strings). */
static int rd_str(struct reader *r, char *dst, size_t cap)
{
	uint64_t n;
	uint8_t t;

	if (r->at >= r->end)
		return -1;
	t = r->p[r->at++];
	if ((t & 0xe0) == 0xa0)
		n = t & 0x1f;
	else if (t < 0xd9 || t > 0xdb || rd_be(r, 1u << (t - 0xd9), &n))
		return -1;
	if (n == 0 || n >= cap || n > r->end - r->at || memchr(r->p + r->at, 0, n))
		return -1;
	memcpy(dst, r->p + r->at, n);
	dst[n] = 0;
	r->at += n;
	return 0;
}

/* Reads an array header holding exactly n elements. */
static int rd_array(struct reader *r, uint64_t n)
{
	uint64_t got;
	uint8_t t;

	if (r->at >= r->end)
		return -1;
	t = r->p[r->at++];
	if ((t & 0xf0) == 0x90)
		got = t & 0x0f;
	else if (t < 0xdc || t > 0xdd || rd_be(r, t == 0xdc ? 2 : 4, &got))
		return -1;
	return got == n ? 0 : -1;
}

int sb_record_decode(const void *buf, size_t len, struct sb_event *ev)
{
	const uint8_t *p = buf;
	struct reader r = {p, 0, 0};
	uint64_t version, src;
	uint8_t t;

	if (len < 1 + 8)
		return sb_seterr(SB_ERR_CORRUPT, "record truncated (%zu bytes)", len);
	r.end = len - 8;
	if (XXH3_64bits(p, r.end) != get_be(p + r.end, 8))
		return sb_seterr(SB_ERR_CORRUPT, "record checksum mismatch");
	if (rd_array(&r, HEADER_FIELDS))
		return sb_seterr(SB_ERR_CORRUPT, "record header malformed");
	if (rd_uint(&r, &version) || version != SB_RECORD_VERSION)
		return sb_seterr(SB_ERR_CORRUPT, "record version unknown");
	if (rd_uint(&r, &ev->offset) || rd_str(&r, ev->type, sizeof ev->type) ||
	    rd_str(&r, ev->run, sizeof ev->run) || rd_uint(&r, &ev->seq) ||
	    rd_uint(&r, &ev->ts_ns) || rd_uint(&r, &src) || src > SB_SRC_LAST)
		return sb_seterr(SB_ERR_CORRUPT, "record header fields malformed");
	if (r.at >= r.end)
		return sb_seterr(SB_ERR_CORRUPT, "record header malformed: no payload");
	/* The payload is what follows the header: a map, checked when parsed. */
	t = p[r.at];
	if ((t & 0xf0) != 0x80 && t != 0xde && t != 0xdf)
		return sb_seterr(SB_ERR_CORRUPT, "record payload is not a map");
	ev->source = (enum sb_source)src;
	ev->payload = p + r.at;
	ev->payload_len = r.end - r.at;
	return SB_OK;
}
