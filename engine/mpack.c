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

int sb_pack_raw(msgpack_packer *pk, const void *bytes, size_t len)
{
	return pk->callback(pk->data, bytes, len) ? SB_ERR_NOMEM : SB_OK;
}

/* --- sb_mapw --- */

/* Records err in m and in every map m is nested in, unless they have one. */
static void mapw_fail(sb_mapw *m, int err)
{
	for (; m; m = m->up)
		if (!m->err)
			m->err = err;
}

/* m's packer writes here: straight into the buffer, while m is open, has
 * no error and no nested map open (whose bytes would be cut in two). */
static int mapw_write(void *data, const char *bytes, size_t len)
{
	sb_mapw *m = data;

	if (m->ended) {
		mapw_fail(m->up, SB_ERR_STATE);
		return -1;
	}
	if (m->child)
		mapw_fail(m, SB_ERR_STATE);
	else if (!m->err && msgpack_sbuffer_write(m->buf, bytes, len))
		mapw_fail(m, SB_ERR_NOMEM);
	return m->err ? -1 : 0;
}

void sb_mapw_begin(sb_mapw *m, msgpack_packer *pk)
{
	memset(m, 0, sizeof *m);
	msgpack_packer_init(&m->pk, m, mapw_write);
	if (pk->callback == mapw_write) {
		m->up = pk->data;
		m->buf = m->up->buf;
		if (m->up->child || m->up->ended)
			mapw_fail(m->up, SB_ERR_STATE);
		else
			m->up->child = m;
		m->err = m->up->err;
	} else {
		m->buf = pk->data;
	}
	m->start = m->buf->size;
}

int sb_mapw_begin_from(sb_mapw *m, msgpack_packer *pk, const void *map, size_t len)
{
	const uint8_t *p = map;
	size_t head;

	sb_mapw_begin(m, pk);
	if (len >= 1 && p[0] >= 0x80 && p[0] <= 0x8f) {
		head = 1;
		m->n = p[0] & 0x0f;
	} else if (len >= 3 && p[0] == 0xde) {
		head = 3;
		m->n = (uint32_t)p[1] << 8 | p[2];
	} else if (len >= 5 && p[0] == 0xdf) {
		head = 5;
		m->n = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 |
		       p[4];
	} else {
		mapw_fail(m, SB_ERR_CORRUPT);
		return sb_seterr(SB_ERR_CORRUPT, "not a packed msgpack map");
	}
	return sb_pack_raw(&m->pk, p + head, len - head) ? m->err : SB_OK;
}

msgpack_packer *sb_mapw_pair(sb_mapw *m)
{
	if (m->n == UINT32_MAX)
		mapw_fail(m, SB_ERR_TOOBIG);
	else
		m->n++;
	return &m->pk;
}

msgpack_packer *sb_mapw_keyn(sb_mapw *m, const char *key, size_t n)
{
	msgpack_pack_str_with_body(sb_mapw_pair(m), key, n);
	return &m->pk;
}

msgpack_packer *sb_mapw_key(sb_mapw *m, const char *key)
{
	return sb_mapw_keyn(m, key, strlen(key));
}

void sb_mapw_strn(sb_mapw *m, const char *key, const char *val, size_t n)
{
	msgpack_pack_str_with_body(sb_mapw_key(m, key), val, n);
}

void sb_mapw_str(sb_mapw *m, const char *key, const char *val)
{
	sb_mapw_strn(m, key, val, strlen(val));
}

void sb_mapw_bin(sb_mapw *m, const char *key, const void *val, size_t n)
{
	msgpack_pack_bin_with_body(sb_mapw_key(m, key), val, n);
}

void sb_mapw_u64(sb_mapw *m, const char *key, uint64_t val)
{
	msgpack_pack_uint64(sb_mapw_key(m, key), val);
}

void sb_mapw_i64(sb_mapw *m, const char *key, int64_t val)
{
	msgpack_pack_int64(sb_mapw_key(m, key), val);
}

void sb_mapw_bool(sb_mapw *m, const char *key, int val)
{
	msgpack_packer *pk = sb_mapw_key(m, key);

	if (val)
		msgpack_pack_true(pk);
	else
		msgpack_pack_false(pk);
}

void sb_mapw_nil(sb_mapw *m, const char *key)
{
	msgpack_pack_nil(sb_mapw_key(m, key));
}

/* The map header msgpack_pack_map packs, caught in a few bytes. */
struct mapw_head {
	char b[5];
	size_t n;
};

static int head_write(void *data, const char *bytes, size_t len)
{
	struct mapw_head *h = data;

	if (len > sizeof h->b - h->n)
		return -1;
	memcpy(h->b + h->n, bytes, len);
	h->n += len;
	return 0;
}

/* Puts m's header before its pairs. */
static void mapw_put_head(sb_mapw *m)
{
	struct mapw_head h = {.n = 0};
	msgpack_packer hp;
	size_t body = m->buf->size - m->start;

	msgpack_packer_init(&hp, &h, head_write);
	if (msgpack_pack_map(&hp, m->n) || msgpack_sbuffer_write(m->buf, h.b, h.n)) {
		mapw_fail(m, SB_ERR_NOMEM);
		return;
	}
	memmove(m->buf->data + m->start + h.n, m->buf->data + m->start, body);
	memcpy(m->buf->data + m->start, h.b, h.n);
}

int sb_mapw_end(sb_mapw *m)
{
	if (m->ended)
		return sb_seterr(SB_ERR_STATE, "a msgpack map ended twice");
	m->ended = 1;
	if (m->up && m->up->child == m)
		m->up->child = NULL;
	if (m->child || m->buf->size < m->start)
		mapw_fail(m, SB_ERR_STATE); /* a nested map left open */
	if (!m->err)
		mapw_put_head(m);
	if (!m->err)
		return SB_OK;
	if (m->buf->size > m->start) { /* zeroed: they may hold a secret */
		memset(m->buf->data + m->start, 0, m->buf->size - m->start);
		m->buf->size = m->start;
	}
	return sb_seterr(m->err, "cannot pack a msgpack map: %s", sb_strerror(m->err));
}
