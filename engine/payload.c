/* payload.c - payload field access and msgpack <-> JSON conversion. */
#include "engine/payload.h"

#include <math.h>
#include <sodium.h>
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

const msgpack_object *sb_map_get(const msgpack_object *map, const char *key)
{
	size_t kl = strlen(key);

	if (!map || map->type != MSGPACK_OBJECT_MAP)
		return NULL;
	for (uint32_t i = 0; i < map->via.map.size; i++) {
		const msgpack_object *k = &map->via.map.ptr[i].key;
		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == kl &&
		    !memcmp(k->via.str.ptr, key, kl))
			return &map->via.map.ptr[i].val;
	}
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

/* Returns a copy of s with each byte that is not part of valid UTF-8
 * replaced by U+FFFD. The caller frees. */
static char *utf8_clean(const char *s, size_t n, size_t *outlen)
{
	char *out = malloc(n * 3 + 1), *o = out;
	size_t i = 0;

	if (!out)
		return NULL;
	while (i < n) {
		unsigned char c = (unsigned char)s[i];
		size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
		int ok = len > 0 && i + len <= n;
		uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
		for (size_t k = 1; ok && k < len; k++) {
			unsigned char cc = (unsigned char)s[i + k];
			ok = (cc >> 6) == 2;
			cp = cp << 6 | (cc & 0x3f);
		}
		if (ok && ((len == 2 && cp < 0x80) || (len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
			   (len == 4 && (cp < 0x10000 || cp > 0x10ffff))))
			ok = 0;
		if (ok) {
			memcpy(o, s + i, len);
			o += len;
			i += len;
		} else {
			memcpy(o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	*o = 0;
	*outlen = (size_t)(o - out);
	return out;
}

/* Returns s as a JSON string; jansson refuses invalid UTF-8, so such strings
 * are cleaned first. */
static json_t *str_to_json(const char *s, size_t n)
{
	json_t *j = json_stringn(s, n);
	size_t len;
	char *clean;

	if (j)
		return j;
	clean = utf8_clean(s, n, &len);
	if (!clean)
		return NULL;
	j = json_stringn(clean, len);
	free(clean);
	return j;
}

/* Returns a key that is not a string as a JSON string of its JSON text
 * (1 -> "1"), since JSON keys are strings. */
static json_t *key_to_json(const msgpack_object *k)
{
	json_t *j = sb_msgpack_to_json(k), *s = NULL;
	char *text = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;

	if (text)
		s = json_string(text);
	free(text);
	json_decref(j);
	return s;
}

json_t *sb_msgpack_to_json(const msgpack_object *o)
{
	json_t *j = NULL;

	switch (o->type) {
	case MSGPACK_OBJECT_NIL: return json_null();
	case MSGPACK_OBJECT_BOOLEAN: return json_boolean(o->via.boolean);
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		return o->via.u64 > INT64_MAX ? json_real((double)o->via.u64)
					      : json_integer((json_int_t)o->via.u64);
	case MSGPACK_OBJECT_NEGATIVE_INTEGER: return json_integer(o->via.i64);
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64: /* JSON has no NaN or infinity */
		return isfinite(o->via.f64) ? json_real(o->via.f64) : json_null();
	case MSGPACK_OBJECT_STR: return str_to_json(o->via.str.ptr, o->via.str.size);
	case MSGPACK_OBJECT_BIN:
	case MSGPACK_OBJECT_EXT: {
		const void *p = o->type == MSGPACK_OBJECT_BIN ? (const void *)o->via.bin.ptr
							      : (const void *)o->via.ext.ptr;
		size_t n = o->type == MSGPACK_OBJECT_BIN ? o->via.bin.size : o->via.ext.size;
		size_t cap = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
		char *b = malloc(cap);
		if (!b)
			return NULL;
		sodium_bin2base64(b, cap, p, n, sodium_base64_VARIANT_ORIGINAL);
		j = json_string(b);
		free(b);
		return j;
	}
	case MSGPACK_OBJECT_ARRAY:
		j = json_array();
		for (uint32_t i = 0; j && i < o->via.array.size; i++) {
			json_t *v = sb_msgpack_to_json(&o->via.array.ptr[i]);
			if (!v || json_array_append_new(j, v)) {
				json_decref(j);
				return NULL;
			}
		}
		return j;
	case MSGPACK_OBJECT_MAP:
		j = json_object();
		for (uint32_t i = 0; j && i < o->via.map.size; i++) {
			const msgpack_object *k = &o->via.map.ptr[i].key;
			json_t *v = sb_msgpack_to_json(&o->via.map.ptr[i].val);
			json_t *ks = k->type == MSGPACK_OBJECT_STR ? str_to_json(k->via.str.ptr, k->via.str.size)
								   : key_to_json(k);
			/* json_object_set_new takes v even when it fails. */
			if (!v || !ks || json_object_set_new(j, json_string_value(ks), v)) {
				if (!ks)
					json_decref(v);
				json_decref(ks);
				json_decref(j);
				return NULL;
			}
			json_decref(ks);
		}
		return j;
	}
	return NULL;
}

static int pack_json(const json_t *j, msgpack_packer *pk, int depth)
{
	const char *key;
	json_t *v;
	size_t i;

	/* msgpack_unpack reads at most 32 nested arrays and maps. */
	if (depth >= 32 && (json_is_object(j) || json_is_array(j)))
		return sb_seterr(SB_ERR_INVAL, "JSON nested deeper than 32 levels");
	switch (json_typeof(j)) {
	case JSON_OBJECT:
		msgpack_pack_map(pk, json_object_size(j));
		json_object_foreach((json_t *)j, key, v) {
			sb_pack_str(pk, key);
			if (pack_json(v, pk, depth + 1))
				return SB_ERR_INVAL;
		}
		return SB_OK;
	case JSON_ARRAY:
		msgpack_pack_array(pk, json_array_size(j));
		json_array_foreach(j, i, v) {
			if (pack_json(v, pk, depth + 1))
				return SB_ERR_INVAL;
		}
		return SB_OK;
	case JSON_STRING:
		msgpack_pack_str_with_body(pk, json_string_value(j), json_string_length(j));
		return SB_OK;
	case JSON_INTEGER: msgpack_pack_int64(pk, json_integer_value(j)); return SB_OK;
	case JSON_REAL: msgpack_pack_double(pk, json_real_value(j)); return SB_OK;
	case JSON_TRUE: msgpack_pack_true(pk); return SB_OK;
	case JSON_FALSE: msgpack_pack_false(pk); return SB_OK;
	case JSON_NULL: msgpack_pack_nil(pk); return SB_OK;
	}
	return SB_ERR_INVAL;
}

int sb_json_to_msgpack(const json_t *j, msgpack_packer *pk)
{
	return pack_json(j, pk, 0);
}
