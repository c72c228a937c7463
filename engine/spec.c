/* spec.c - run spec fields (see spec.h). */
#include "engine/spec.h"

#include <stdio.h>
#include <string.h>

#include "engine/error.h"
#include "engine/mpack.h"
#include "engine/text.h"

int sb_spec_str(const msgpack_object *spec, const char *key, char *buf, size_t cap)
{
	const msgpack_object *v = sb_map_get(spec, key);

	if (!v)
		return SB_OK;
	if (v->type != MSGPACK_OBJECT_STR || v->via.str.size >= cap ||
	    memchr(v->via.str.ptr, 0, v->via.str.size))
		return sb_seterr(SB_ERR_INVAL,
				 "'%s' must be a string of at most %zu bytes", key,
				 cap - 1);
	memcpy(buf, v->via.str.ptr, v->via.str.size);
	buf[v->via.str.size] = 0;
	return SB_OK;
}

int sb_spec_name(const msgpack_object *spec, const char *key, char *buf, size_t cap)
{
	const msgpack_object *v = sb_map_get(spec, key);
	char what[80];
	int rc;

	snprintf(what, sizeof what, "'%s'", key);
	if (v && v->type == MSGPACK_OBJECT_STR &&
	    (rc = sb_text_check(v->via.str.ptr, v->via.str.size, what)))
		return rc; /* buf is left as it is */
	return sb_spec_str(spec, key, buf, cap);
}

int sb_spec_strs(const msgpack_object *spec, const char *key, size_t max,
		 const msgpack_object **out)
{
	const msgpack_object *v = sb_map_get(spec, key);

	*out = NULL;
	if (!v || v->type == MSGPACK_OBJECT_NIL)
		return SB_OK;
	if (v->type != MSGPACK_OBJECT_ARRAY)
		return sb_seterr(SB_ERR_INVAL, "'%s' must be a list of strings",
				 key);
	for (uint32_t i = 0; i < v->via.array.size; i++)
		if (v->via.array.ptr[i].type != MSGPACK_OBJECT_STR)
			return sb_seterr(SB_ERR_INVAL,
					 "'%s' must be a list of strings", key);
	if (v->via.array.size > max)
		return sb_seterr(SB_ERR_INVAL, "at most %zu entries in '%s'", max,
				 key);
	*out = v;
	return SB_OK;
}

int sb_spec_u64(const msgpack_object *spec, const char *key, uint64_t max, uint64_t *out)
{
	const msgpack_object *v = sb_map_get(spec, key);

	*out = 0;
	if (!v)
		return SB_OK;
	if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 > max)
		return sb_seterr(SB_ERR_INVAL,
				 "'%s' must be an integer from 0 to %llu", key,
				 (unsigned long long)max);
	*out = v->via.u64;
	return SB_OK;
}
