/* testutil.h - helpers shared by the unit tests: temporary directories,
 * payloads built from JSON text or from the schema table, record sealing.
 * Header-only; include after <cmocka.h>. */
#ifndef SB_TESTUTIL_H
#define SB_TESTUTIL_H

#include <ftw.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/error.h"
#include "engine/payload.h"
#include "engine/log/schema.h"

/* Makes a new directory under /tmp; the caller frees the path. */
static inline char *tu_tmpdir(void)
{
	char *d = strdup("/tmp/sb-test-XXXXXX");

	assert_non_null(d);
	assert_non_null(mkdtemp(d));
	return d;
}

static inline int tu_rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(path);
}

/* Removes dir and everything in it, and frees the path. */
static inline void tu_rmrf(char *dir)
{
	if (!dir)
		return;
	nftw(dir, tu_rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(dir);
}

/* Packs the JSON text js (single quotes stand for double quotes) as msgpack
 * into a fresh sb (the caller destroys it). */
static inline void tu_json(msgpack_sbuffer *sb, const char *js)
{
	char *t = strdup(js);
	json_error_t err;
	msgpack_packer pk;
	json_t *j;

	assert_non_null(t);
	for (char *c = t; *c; c++)
		if (*c == '\'')
			*c = '"';
	j = json_loads(t, JSON_DECODE_ANY, &err);
	if (!j)
		fail_msg("bad test JSON %s: %s", t, err.text);
	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	assert_int_equal(sb_json_to_msgpack(j, &pk), 0);
	json_decref(j);
	free(t);
}

/* Packs a value of kind t that the schema accepts. */
static inline void tu_pack_good(msgpack_packer *pk, enum sb_ftype t, unsigned salt)
{
	char hex[64];

	switch (t) {
	case SB_F_STR: sb_pack_str(pk, salt % 2 ? "value" : "another value"); break;
	case SB_F_UINT: msgpack_pack_uint64(pk, 7 + salt); break;
	case SB_F_INT: msgpack_pack_int64(pk, salt % 2 ? -3 : 3); break;
	case SB_F_BOOL: msgpack_pack_true(pk); break;
	case SB_F_MAP:
		msgpack_pack_map(pk, 1);
		sb_pack_ku64(pk, "k", 1);
		break;
	case SB_F_ARRAY:
		msgpack_pack_array(pk, 2);
		msgpack_pack_uint8(pk, 1);
		msgpack_pack_uint8(pk, 2);
		break;
	case SB_F_HASH:
		for (int i = 0; i < 64; i++)
			hex[i] = "0123456789abcdef"[(i + salt) % 16];
		msgpack_pack_str_with_body(pk, hex, 64);
		break;
	case SB_F_LABEL: sb_pack_str(pk, salt % 2 ? "files" : "reports checked"); break;
	}
}

/* Packs a valid payload for schema s into a fresh sb: every required field,
 * skipping the field named skip (may be NULL), plus an extra field. */
static inline void tu_schema_payload(msgpack_sbuffer *sb, const struct sb_event_schema *s,
				     const char *skip, unsigned salt)
{
	msgpack_packer pk;
	sb_mapw m;

	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	for (const struct sb_field *f = s->fields; f < s->fields + SB_FIELDS_MAX && f->name; f++) {
		if (skip && !strcmp(f->name, skip))
			continue;
		tu_pack_good(sb_mapw_key(&m, f->name), sb_field_kind(f), salt);
	}
	sb_mapw_str(&m, "extra", "not required");
	assert_int_equal(sb_mapw_end(&m), SB_OK);
}

/* Returns the first source the schema entry allows. */
static inline enum sb_source tu_allowed_source(const struct sb_event_schema *s)
{
	for (unsigned i = 0; i <= SB_SRC_LAST; i++)
		if (s->sources & (1u << i))
			return (enum sb_source)i;
	fail_msg("type %s allows no source", s->type);
	return SB_SRC_HOST;
}

/* Appends the XXH3-64 of sb's bytes (big-endian), as the record codec does. */
static inline void tu_seal(msgpack_sbuffer *sb)
{
	uint64_t h = XXH3_64bits(sb->data, sb->size);
	uint8_t b[8];

	for (int i = 7; i >= 0; i--, h >>= 8)
		b[i] = (uint8_t)h;
	msgpack_sbuffer_write(sb, (const char *)b, 8);
}

/* Recomputes the checksum at the end of a record in place. */
static inline void tu_reseal(uint8_t *rec, size_t len)
{
	uint64_t h = XXH3_64bits(rec, len - 8);

	for (int i = 7; i >= 0; i--, h >>= 8)
		rec[len - 8 + i] = (uint8_t)h;
}

/* Deterministic pseudo-random numbers (xorshift64*). */
static inline uint64_t tu_rand(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

/* Asserts that the thread's error detail for rc contains every NULL-ended
 * string given. */
#define tu_errmsg_has(rc, ...) tu_errmsg_has_((rc), (const char *[]){__VA_ARGS__, NULL})
static inline void tu_errmsg_has_(int rc, const char **want)
{
	const char *m = sb_errmsg(rc);

	for (; *want; want++)
		if (!strstr(m, *want))
			fail_msg("error detail '%s' lacks '%s'", m, *want);
}

/* 1 when s[0..len) is valid UTF-8, by jansson's own check (not the
 * project's decoder). */
static inline int tu_utf8_valid(const char *s, size_t len)
{
	json_t *j = json_stringn(s, len);

	json_decref(j);
	return j != NULL;
}

/* Asserts that the text out (escaped for a terminal) holds no raw control
 * byte, no C1 and no bidirectional control, and is valid UTF-8. */
static inline void tu_assert_printable(const char *out)
{
	size_t n = strlen(out);
	const unsigned char *u = (const unsigned char *)out;

	for (size_t i = 0; i < n; i++) {
		if (u[i] < 0x20 || u[i] == 0x7f)
			fail_msg("raw control byte 0x%02x at %zu of '%s'", u[i], i, out);
		if (u[i] == 0xc2 && i + 1 < n && u[i + 1] >= 0x80 && u[i + 1] <= 0x9f)
			fail_msg("raw C1 control at %zu", i);
		if (u[i] == 0xe2 && i + 2 < n &&
		    ((u[i + 1] == 0x80 && (u[i + 2] == 0x8e || u[i + 2] == 0x8f ||
					   (u[i + 2] >= 0xaa && u[i + 2] <= 0xae))) ||
		     (u[i + 1] == 0x81 && u[i + 2] >= 0xa6 && u[i + 2] <= 0xa9)))
			fail_msg("raw bidirectional control at %zu", i);
	}
	if (!tu_utf8_valid(out, n))
		fail_msg("output is not valid UTF-8: '%s'", out);
}

#endif
