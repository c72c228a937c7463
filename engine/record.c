/* record.c - encode and decode stored events. */
#include "engine/record.h"

#include <string.h>
#include <xxhash.h>

#include "engine/error.h"
#include "engine/payload.h"

#define HEADER_FIELDS 7

static void put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static uint64_t get_be64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

int sb_record_encode(const struct sb_event *ev, msgpack_sbuffer *out)
{
	msgpack_packer pk;
	size_t start = out->size, tl = strlen(ev->type), rl = strlen(ev->run);
	uint8_t sum[8];

	if (!ev->payload || !ev->payload_len)
		return sb_seterr(SB_ERR_INVAL, "event %s has no payload", ev->type);
	msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
	if (msgpack_pack_array(&pk, HEADER_FIELDS) || msgpack_pack_uint8(&pk, SB_RECORD_VERSION) ||
	    msgpack_pack_uint64(&pk, ev->offset) || msgpack_pack_str_with_body(&pk, ev->type, tl) ||
	    msgpack_pack_str_with_body(&pk, ev->run, rl) || msgpack_pack_uint64(&pk, ev->seq) ||
	    msgpack_pack_uint64(&pk, ev->ts_ns) || msgpack_pack_uint8(&pk, (uint8_t)ev->source) ||
	    msgpack_sbuffer_write(out, (const char *)ev->payload, ev->payload_len))
		return SB_ERR_NOMEM;
	put_be64(sum, XXH3_64bits(out->data + start, out->size - start));
	if (msgpack_sbuffer_write(out, (const char *)sum, sizeof sum))
		return SB_ERR_NOMEM;
	return SB_OK;
}

static int copy_str(const msgpack_object *o, char *dst, size_t cap)
{
	if (o->type != MSGPACK_OBJECT_STR || o->via.str.size == 0 || o->via.str.size >= cap ||
	    memchr(o->via.str.ptr, 0, o->via.str.size)) /* C strings: no NUL inside */
		return -1;
	memcpy(dst, o->via.str.ptr, o->via.str.size);
	dst[o->via.str.size] = 0;
	return 0;
}

int sb_record_decode(const void *buf, size_t len, struct sb_event *ev)
{
	const uint8_t *p = buf;
	msgpack_zone zone;
	msgpack_object hdr;
	const msgpack_object *f;
	size_t off = 0, hlen, body;
	int rc = SB_ERR_CORRUPT;

	if (len < 1 + 8)
		return sb_seterr(SB_ERR_CORRUPT, "record truncated (%zu bytes)", len);
	body = len - 8;
	if (XXH3_64bits(p, body) != get_be64(p + body))
		return sb_seterr(SB_ERR_CORRUPT, "record checksum mismatch");
	if (!msgpack_zone_init(&zone, 256))
		return SB_ERR_NOMEM;
	if (sb_msgpack_check(p, body, &hlen) || hlen >= body ||
	    msgpack_unpack((const char *)p, hlen, &off, &zone, &hdr) != MSGPACK_UNPACK_SUCCESS ||
	    hdr.type != MSGPACK_OBJECT_ARRAY || hdr.via.array.size != HEADER_FIELDS) {
		sb_seterr(rc, "record header malformed");
		goto out;
	}
	f = hdr.via.array.ptr;
	if (f[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER || f[0].via.u64 != SB_RECORD_VERSION) {
		sb_seterr(rc, "record version unknown");
		goto out;
	}
	if (f[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER || f[4].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
	    f[5].type != MSGPACK_OBJECT_POSITIVE_INTEGER || f[6].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
	    f[6].via.u64 > SB_SRC_GATEWAY || copy_str(&f[2], ev->type, sizeof ev->type) ||
	    copy_str(&f[3], ev->run, sizeof ev->run)) {
		sb_seterr(rc, "record header fields malformed");
		goto out;
	}
	/* The payload is what follows the header: a map, checked when parsed. */
	if (off >= body || ((p[off] & 0xf0) != 0x80 && p[off] != 0xde && p[off] != 0xdf)) {
		sb_seterr(rc, "record payload is not a map");
		goto out;
	}
	ev->offset = f[1].via.u64;
	ev->seq = f[4].via.u64;
	ev->ts_ns = f[5].via.u64;
	ev->source = (enum sb_source)f[6].via.u64;
	ev->payload = p + off;
	ev->payload_len = body - off;
	rc = SB_OK;
out:
	msgpack_zone_destroy(&zone);
	return rc;
}
