/* schema.c - a tool's arguments checked against its JSON Schema subset. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/error.h"
#include "mcp/schema.h"

#define PATH_CAP 256

static const char *type_of(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a number";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	default: return "null";
	}
}

/* Does v have the JSON Schema type name t? */
static int type_is(const json_t *v, const char *t)
{
	if (!strcmp(t, "object"))
		return json_is_object(v);
	if (!strcmp(t, "array"))
		return json_is_array(v);
	if (!strcmp(t, "string"))
		return json_is_string(v);
	if (!strcmp(t, "integer"))
		return json_is_integer(v) ||
		       (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
			fabs(json_real_value(v)) < 9007199254740992.0);
	if (!strcmp(t, "number"))
		return json_is_number(v);
	if (!strcmp(t, "boolean"))
		return json_is_boolean(v);
	return !strcmp(t, "null") && json_is_null(v);
}

static int check_type(const json_t *s, const json_t *v, const char *path)
{
	const json_t *t = json_object_get(s, "type"), *e;
	char want[128] = "";
	size_t i, n = 0;

	if (json_is_string(t)) {
		if (type_is(v, json_string_value(t)))
			return SB_OK;
		return sb_seterr(SB_ERR_INVAL, "%s: expected %s %s, got %s", path,
				 strchr("aeiou", json_string_value(t)[0]) ? "an" : "a",
				 json_string_value(t), type_of(v));
	}
	if (!json_is_array(t))
		return SB_OK;
	json_array_foreach(t, i, e) {
		if (json_is_string(e) && type_is(v, json_string_value(e)))
			return SB_OK;
		if (json_is_string(e))
			n += (size_t)snprintf(want + n, n < sizeof want ? sizeof want - n : 0,
					      "%s%s", i ? " or " : "", json_string_value(e));
	}
	return sb_seterr(SB_ERR_INVAL, "%s: expected %s, got %s", path, want, type_of(v));
}

/* Characters of UTF-8 s (jansson's strings are valid UTF-8). */
static size_t utf8_chars(const char *s, size_t n)
{
	size_t c = 0;

	for (size_t i = 0; i < n; i++)
		c += ((unsigned char)s[i] & 0xc0) != 0x80;
	return c;
}

static int check_string(const json_t *s, const json_t *v, const char *path)
{
	const json_t *e, *en = json_object_get(s, "enum");
	size_t chars = utf8_chars(json_string_value(v), json_string_length(v)), i;
	json_int_t max = json_integer_value(json_object_get(s, "maxLength"));
	json_int_t min = json_integer_value(json_object_get(s, "minLength"));

	if (json_object_get(s, "maxLength") && chars > (size_t)max)
		return sb_seterr(SB_ERR_INVAL, "%s: %zu characters, over the limit of %lld",
				 path, chars, (long long)max);
	if (chars < (size_t)(min > 0 ? min : 0))
		return sb_seterr(SB_ERR_INVAL, "%s: %s (at least %lld characters)", path,
				 chars ? "too short" : "empty", (long long)min);
	if (!json_is_array(en))
		return SB_OK;
	json_array_foreach(en, i, e)
		if (json_equal(e, v))
			return SB_OK;
	{
		char list[256] = "";
		size_t n = 0;
		json_array_foreach(en, i, e)
			n += (size_t)snprintf(list + n, n < sizeof list ? sizeof list - n : 0,
					      "%s%s", i ? ", " : "",
					      json_is_string(e) ? json_string_value(e) : "?");
		return sb_seterr(SB_ERR_INVAL, "%s: '%.64s' is not one of %s", path,
				 json_string_value(v), list);
	}
}

static int check_number(const json_t *s, const json_t *v, const char *path)
{
	const json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
	const json_t *xmn = json_object_get(s, "exclusiveMinimum");
	double d = json_number_value(v);

	if (mn && d < json_number_value(mn))
		return sb_seterr(SB_ERR_INVAL, "%s: %g is below the minimum, %g", path, d,
				 json_number_value(mn));
	if (xmn && d <= json_number_value(xmn))
		return sb_seterr(SB_ERR_INVAL, "%s: %g must be above %g", path, d,
				 json_number_value(xmn));
	if (mx && d > json_number_value(mx))
		return sb_seterr(SB_ERR_INVAL, "%s: %g is over the maximum, %g", path, d,
				 json_number_value(mx));
	return SB_OK;
}

static int check(const json_t *s, const json_t *v, const char *path, int depth);

static int check_array(const json_t *s, const json_t *v, const char *path, int depth)
{
	const json_t *items = json_object_get(s, "items"), *e;
	const json_t *mx = json_object_get(s, "maxItems"), *mn = json_object_get(s, "minItems");
	char sub[PATH_CAP];
	size_t i, n = json_array_size(v);
	int rc;

	if (mx && n > (size_t)json_integer_value(mx))
		return sb_seterr(SB_ERR_INVAL, "%s: %zu items, over the limit of %lld", path, n,
				 (long long)json_integer_value(mx));
	if (mn && n < (size_t)json_integer_value(mn))
		return sb_seterr(SB_ERR_INVAL, "%s: %zu items, at least %lld wanted", path, n,
				 (long long)json_integer_value(mn));
	if (!json_is_object(items))
		return SB_OK;
	json_array_foreach(v, i, e) {
		snprintf(sub, sizeof sub, "%s[%zu]", path, i);
		if ((rc = check(items, e, sub, depth + 1)))
			return rc;
	}
	return SB_OK;
}

/* The path of key under path ("arguments" itself is left out). */
static void key_path(char *out, const char *path, const char *key)
{
	if (!strcmp(path, "arguments"))
		snprintf(out, PATH_CAP, "%.200s", key);
	else
		snprintf(out, PATH_CAP, "%s.%.200s", path, key);
}

static int check_object(const json_t *s, const json_t *v, const char *path, int depth)
{
	const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
	const json_t *more = json_object_get(s, "additionalProperties"), *e, *ps;
	const char *key;
	char sub[PATH_CAP];
	size_t i;
	int rc;

	json_array_foreach(req, i, e) {
		if (json_is_string(e) && !json_object_get(v, json_string_value(e))) {
			key_path(sub, path, json_string_value(e));
			return sb_seterr(SB_ERR_INVAL, "%s: missing (a required field)", sub);
		}
	}
	json_object_foreach((json_t *)v, key, e) {
		key_path(sub, path, key);
		if ((ps = json_object_get(props, key)))
			rc = check(ps, e, sub, depth + 1);
		else if (json_is_false(more))
			rc = sb_seterr(SB_ERR_INVAL, "%s: not a known field", sub);
		else
			rc = json_is_object(more) ? check(more, e, sub, depth + 1) : SB_OK;
		if (rc)
			return rc;
	}
	return SB_OK;
}

static int check(const json_t *s, const json_t *v, const char *path, int depth)
{
	int rc;

	if (depth > 16)
		return sb_seterr(SB_ERR_INVAL, "%s: nested too deep", path);
	if ((rc = check_type(s, v, path)))
		return rc;
	if (json_is_string(v))
		return check_string(s, v, path);
	if (json_is_number(v))
		return check_number(s, v, path);
	if (json_is_array(v))
		return check_array(s, v, path, depth);
	if (json_is_object(v))
		return check_object(s, v, path, depth);
	return SB_OK;
}

int sb_mcp_schema_check(const json_t *schema, const json_t *value)
{
	return check(schema, value, "arguments", 0);
}
