/* payload.c - msgpack <-> JSON conversion of payloads. */
#include "engine/payload.h"

#include <math.h>
#include <sodium.h>
#include <string.h>

#include "engine/error.h"
#include "engine/text.h"

/* Returns s as a JSON string; jansson refuses invalid UTF-8, so such strings
 * are cleaned first. */
static json_t *str_to_json(const char *s, size_t n)
{
	json_t *j = json_stringn(s, n);
	size_t len;
	char *clean;

	if (j)
		return j;
	clean = sb_utf8_lossy(s, n, &len);
	if (!clean)
		return NULL;
	j = json_stringn(clean, len);
	free(clean);
	return j;
}

#define KEY_TEXT_MAX 256 /* a non-string key's text is cut here */

/* Returns a key that is not a string as a JSON string of its JSON text
 * (1 -> "1"), since JSON keys are strings. The text is cut at KEY_TEXT_MAX
 * bytes (on a UTF-8 boundary), so keys nested in keys cannot grow it: each
 * level would escape the quotes of the one inside. */
static json_t *key_to_json(const msgpack_object *k)
{
	json_t *j = sb_msgpack_to_json(k), *s = NULL;
	char *text = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;

	if (text && strlen(text) > KEY_TEXT_MAX)
		memcpy(text + sb_utf8_cut(text, strlen(text), KEY_TEXT_MAX - 4), "...", 4);
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
		const void *p = o->type == MSGPACK_OBJECT_BIN
				    ? (const void *)o->via.bin.ptr
				    : (const void *)o->via.ext.ptr;
		size_t n =
		    o->type == MSGPACK_OBJECT_BIN ? o->via.bin.size : o->via.ext.size;
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
			json_t *ks = k->type == MSGPACK_OBJECT_STR
					 ? str_to_json(k->via.str.ptr, k->via.str.size)
					 : key_to_json(k);
			/* json_object_set_new takes v even when it fails. */
			if (!v || !ks ||
			    json_object_set_new(j, json_string_value(ks), v)) {
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
		json_object_foreach((json_t *)j, key, v)
		{
			sb_pack_str(pk, key);
			if (pack_json(v, pk, depth + 1))
				return SB_ERR_INVAL;
		}
		return SB_OK;
	case JSON_ARRAY:
		msgpack_pack_array(pk, json_array_size(j));
		json_array_foreach(j, i, v)
		{
			if (pack_json(v, pk, depth + 1))
				return SB_ERR_INVAL;
		}
		return SB_OK;
	case JSON_STRING:
		msgpack_pack_str_with_body(pk, json_string_value(j),
					   json_string_length(j));
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
