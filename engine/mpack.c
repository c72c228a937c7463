/* mpack.c - msgpack helpers: bounds checks, map fields, packing. They
 * need only msgpack-c, so the static guest agent links them too. */
#include "engine/mpack.h"

#include <string.h>

#include "engine/error.h"

int sb_msgpack_check(const void *buf, size_t len, size_t *objlen)
{
	const uint8_t *p = buf;
	size_t i = 0;

	for (size_t todo = 1; todo > 0; todo--) {
		uint64_t n = 0, body = 0, v = 0; /* elements it holds, bytes it skips */
		unsigned w = 0, kind = 0;        /* length width; 1 str/bin 2 ext 3 array 4 map */
		uint8_t c;

		if (!p || i >= len)
			goto bad;
		c = p[i++];
		if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3)
			continue;
		if (c <= 0x8f)
			n = 2u * (c & 0x0f);
		else if (c <= 0x9f)
			n = c & 0x0f;
		else if (c <= 0xbf)
			body = c & 0x1f;
		else if (c >= 0xc4 && c <= 0xc6) /* bin 8/16/32 */
			kind = 1, w = 1u << (c - 0xc4);
		else if (c >= 0xd9 && c <= 0xdb) /* str 8/16/32 */
			kind = 1, w = 1u << (c - 0xd9);
		else if (c >= 0xc7 && c <= 0xc9) /* ext 8/16/32 */
			kind = 2, w = 1u << (c - 0xc7);
		else if (c == 0xca || c == 0xcb) /* float 32/64 */
			body = c == 0xca ? 4 : 8;
		else if (c >= 0xcc && c <= 0xd3) /* uint, int 8..64 */
			body = 1u << ((c - 0xcc) & 3);
		else if (c >= 0xd4 && c <= 0xd8) /* fixext: type byte and 1..16 */
			body = 1 + (1u << (c - 0xd4));
		else if (c == 0xdc || c == 0xdd) /* array 16/32 */
			kind = 3, w = c == 0xdc ? 2 : 4;
		else if (c == 0xde || c == 0xdf) /* map 16/32 */
			kind = 4, w = c == 0xde ? 2 : 4;
		else
			goto bad; /* 0xc1: never used */
		if (w) {
			if (len - i < w)
				goto bad;
			for (unsigned k = 0; k < w; k++)
				v = v << 8 | p[i++];
			if (kind <= 2)
				body = v + (kind == 2);
			else
				n = kind == 3 ? v : 2 * v;
		}
		/* Each element still to come takes at least one byte. */
		if (body > len - i || n > len - i - body || todo - 1 > len - i - body - n)
			goto bad;
		i += body;
		todo += n;
	}
	*objlen = i;
	return SB_OK;
bad:
	return sb_seterr(SB_ERR_CORRUPT, "msgpack data truncated or malformed");
}

int sb_payload_parse(const void *payload, size_t len, msgpack_zone *zone, msgpack_object *map)
{
	size_t off = 0, n;

	if (!payload || sb_msgpack_check(payload, len, &n) || n != len ||
	    msgpack_unpack(payload, len, &off, zone, map) != MSGPACK_UNPACK_SUCCESS ||
	    map->type != MSGPACK_OBJECT_MAP)
		return sb_seterr(SB_ERR_CORRUPT, "payload is not one msgpack map");
	return SB_OK;
}

int sb_obj_is_str(const msgpack_object *o, const char *s)
{
	size_t n = strlen(s);

	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n && !memcmp(o->via.str.ptr, s, n);
}

const msgpack_object *sb_map_get(const msgpack_object *map, const char *key)
{
	if (!map || map->type != MSGPACK_OBJECT_MAP)
		return NULL;
	for (uint32_t i = 0; i < map->via.map.size; i++)
		if (sb_obj_is_str(&map->via.map.ptr[i].key, key))
			return &map->via.map.ptr[i].val;
	return NULL;
}

int sb_map_str(const msgpack_object *map, const char *key, char *buf, size_t cap)
{
	const msgpack_object *v = sb_map_get(map, key);
	size_t n;

	if (!v || v->type != MSGPACK_OBJECT_STR)
		return -1;
	n = v->via.str.size < cap ? v->via.str.size : cap - 1;
	memcpy(buf, v->via.str.ptr, n);
	buf[n] = 0;
	return (int)v->via.str.size;
}

uint64_t sb_map_u64(const msgpack_object *map, const char *key, uint64_t dflt)
{
	const msgpack_object *v = sb_map_get(map, key);

	return v && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? v->via.u64 : dflt;
}

int sb_map_bool(const msgpack_object *map, const char *key, int dflt)
{
	const msgpack_object *v = sb_map_get(map, key);

	return v && v->type == MSGPACK_OBJECT_BOOLEAN ? v->via.boolean : dflt;
}

int64_t sb_map_i64(const msgpack_object *map, const char *key, int64_t dflt)
{
	const msgpack_object *v = sb_map_get(map, key);

	if (v && v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
		return v->via.i64;
	if (v && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER && v->via.u64 <= INT64_MAX)
		return (int64_t)v->via.u64;
	return dflt;
}

void sb_pack_str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str_with_body(pk, s, strlen(s));
}

void sb_pack_kstrn(msgpack_packer *pk, const char *key, const char *val, size_t n)
{
	sb_pack_str(pk, key);
	msgpack_pack_str_with_body(pk, val, n);
}

void sb_pack_kstr(msgpack_packer *pk, const char *key, const char *val)
{
	sb_pack_kstrn(pk, key, val, strlen(val));
}

void sb_pack_ku64(msgpack_packer *pk, const char *key, uint64_t val)
{
	sb_pack_str(pk, key);
	msgpack_pack_uint64(pk, val);
}

void sb_pack_ki64(msgpack_packer *pk, const char *key, int64_t val)
{
	sb_pack_str(pk, key);
	msgpack_pack_int64(pk, val);
}

void sb_pack_kbool(msgpack_packer *pk, const char *key, int val)
{
	sb_pack_str(pk, key);
	if (val)
		msgpack_pack_true(pk);
	else
		msgpack_pack_false(pk);
}
