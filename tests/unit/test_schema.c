/* test_schema.c - the event schema table and payload validation.
 *
 * schema.c is included so that its static type check can be tested for the
 * field kinds no table entry uses yet (bool, map, array, hash). The test's
 * copy of the functions takes the place of the library's schema.o.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "engine/log/schema.c"
#include "tests/unit/testutil.h"

static const char *const kind_names[] = {"str",   "uint", "int",  "bool",
					 "map",   "array", "hash", "label"};

/* Packs wrong value number i for kind t; returns 0 when there is none. */
static int pack_wrong(msgpack_packer *pk, enum sb_ftype t, int i)
{
	/* blob keys: 64 lowercase hex digits, and near misses */
	static const char hex63[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde";
	static const char hex64up[] = "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef";
	static const char hex64g[] = "0123456789abcdeg0123456789abcdef0123456789abcdef0123456789abcdef";
	static const char hex65[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0";
	static const char hex64z[] = "0123456789abcdef0123456789abcdef00000000000000000000000000000000";
	static const char hex64nul[] = "0123456789abcdef0123456789abcdef\0" "123456789abcdef0123456789abcdef";
	static const char legacy32[] = "0123456789abcdef0123456789abcdef";

	switch (i) {
	case 0: /* nil is never any kind */
		msgpack_pack_nil(pk);
		return 1;
	case 1: /* a double is never any kind */
		msgpack_pack_double(pk, 1.0);
		return 1;
	case 2:
		if (t == SB_F_MAP || t == SB_F_ARRAY || t == SB_F_BOOL)
			msgpack_pack_uint8(pk, 1);
		else if (t == SB_F_STR || t == SB_F_HASH || t == SB_F_LABEL)
			msgpack_pack_uint64(pk, 12345);
		else
			sb_pack_str(pk, "7");
		return 1;
	case 3:
		if (t == SB_F_UINT)
			msgpack_pack_int64(pk, -1);
		else if (t == SB_F_MAP)
			msgpack_pack_array(pk, 0);
		else if (t == SB_F_ARRAY)
			msgpack_pack_map(pk, 0);
		else if (t == SB_F_BOOL)
			sb_pack_str(pk, "true");
		else if (t == SB_F_INT)
			msgpack_pack_true(pk);
		else {
			msgpack_pack_bin(pk, 64);
			msgpack_pack_bin_body(pk, hex65, 64); /* good digits, as bin */
		}
		return 1;
	case 4:
		if (t == SB_F_HASH)
			msgpack_pack_str_with_body(pk, hex63, 63);
		else if (t == SB_F_UINT || t == SB_F_INT)
			msgpack_pack_float(pk, 2.0f);
		else if (t == SB_F_STR || t == SB_F_LABEL)
			msgpack_pack_array(pk, 0);
		else
			return 0;
		return 1;
	case 5:
	case 6:
	case 7:
	case 8:
	case 9:
	case 10: {
		/* mixed case, a non-hex digit, 65 digits, a legacy key (read,
		 * never written), 64 ending in 32 zeros, a NUL inside */
		static const char *const bad[] = {hex64up, hex64g, hex65, legacy32, hex64z, hex64nul};
		static const size_t len[] = {64, 64, 65, 32, 64, 64};
		/* labels: empty, 65 bytes, an escape, a newline, invalid UTF-8,
		 * a bidirectional override */
		static const char *const lbad[] = {"", hex65, "a\x1b[2J", "two\nlines", "\xff",
						   "\xe2\x80\xae" "exe"};
		if (t == SB_F_LABEL) {
			msgpack_pack_str_with_body(pk, lbad[i - 5], i == 6 ? 65 : strlen(lbad[i - 5]));
			return 1;
		}
		if (t != SB_F_HASH)
			return 0;
		msgpack_pack_str_with_body(pk, bad[i - 5], len[i - 5]);
		return 1;
	}
	}
	return 0;
}

/* Packs the payload of s with field `which` replaced by wrong value i.
 * Returns 0 when kind of `which` has no wrong value i. */
static int wrong_payload(msgpack_sbuffer *sb, const struct sb_event_schema *s, const char *which,
			 int i)
{
	msgpack_packer pk;
	sb_mapw m;
	int ok = 1;

	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	for (const struct sb_field *f = s->fields; f < s->fields + SB_FIELDS_MAX && f->name; f++) {
		if (strcmp(f->name, which))
			tu_pack_good(sb_mapw_key(&m, f->name), sb_field_kind(f), 0);
		else
			ok = pack_wrong(sb_mapw_key(&m, f->name), sb_field_kind(f), i);
	}
	assert_int_equal(sb_mapw_end(&m), SB_OK);
	if (!ok)
		msgpack_sbuffer_destroy(sb);
	return ok;
}

/* The table itself: unique names that fit, some source, unique fields. */
static void test_table(void **state)
{
	const struct sb_event_schema *s;
	size_t n;

	s = sb_schema_all(&n);
	assert_true(n >= 20);
	for (size_t i = 0; i < n; i++) {
		assert_true(strlen(s[i].type) > 0 && strlen(s[i].type) < SB_TYPE_MAX);
		assert_true(s[i].sources != 0);
		assert_true((s[i].sources & ~((2u << SB_SRC_LAST) - 1)) == 0);
		assert_ptr_equal(sb_schema_find(s[i].type), &s[i]);
		for (size_t j = 0; j < i; j++)
			assert_string_not_equal(s[i].type, s[j].type);
		for (size_t f = 0; f < SB_FIELDS_MAX && s[i].fields[f].name; f++) {
			assert_true(sb_field_kind(&s[i].fields[f]) <= SB_F_LABEL);
			assert_true((s[i].fields[f].type & ~(SB_F_OPTIONAL | 0xffu)) == 0);
			for (size_t g = 0; g < f; g++)
				assert_string_not_equal(s[i].fields[f].name, s[i].fields[g].name);
		}
	}
	assert_null(sb_schema_find("run.exploded"));
	assert_null(sb_schema_find(""));
	assert_null(sb_schema_find("run.created "));
}

/* Every type accepts a payload with its fields from each allowed source and
 * refuses each other source, naming the type and the source. */
static void test_sources(void **state)
{
	const struct sb_event_schema *s;
	msgpack_sbuffer sb;
	size_t n;

	s = sb_schema_all(&n);
	for (size_t i = 0; i < n; i++) {
		tu_schema_payload(&sb, &s[i], NULL, (unsigned)i);
		for (unsigned src = 0; src <= SB_SRC_LAST; src++) {
			int rc = sb_schema_check(s[i].type, (enum sb_source)src, sb.data, sb.size);
			if (s[i].sources & (1u << src)) {
				if (rc != SB_OK)
					fail_msg("%s from %s: %s", s[i].type,
						 sb_source_name((enum sb_source)src), sb_errmsg(rc));
			} else {
				assert_int_equal(rc, SB_ERR_SCHEMA);
				tu_errmsg_has(rc, s[i].type, sb_source_name((enum sb_source)src));
			}
		}
		assert_int_equal(sb_schema_check(s[i].type, (enum sb_source)(SB_SRC_LAST + 1), sb.data, sb.size),
				 SB_ERR_SCHEMA);
		assert_int_equal(sb_schema_check(s[i].type, (enum sb_source)-1, sb.data, sb.size),
				 SB_ERR_SCHEMA);
		msgpack_sbuffer_destroy(&sb);
	}
}

/* The guest can never write usage or budget verdicts; the gateway can. */
static void test_guest_usage_refused(void **state)
{
	msgpack_sbuffer u, b;
	int rc;

	tu_json(&u, "{'model':'m','input_tokens':10,'output_tokens':5,'cost_nusd':100,"
		    "'total_nusd':100}");
	tu_json(&b, "{'budget_nusd':1000,'spent_nusd':1001}");
	rc = sb_schema_check("agent.usage.updated", SB_SRC_GUEST, u.data, u.size);
	assert_int_equal(rc, SB_ERR_SCHEMA);
	tu_errmsg_has(rc, "agent.usage.updated", "guest");
	rc = sb_schema_check("agent.usage.updated", SB_SRC_HOST, u.data, u.size);
	assert_int_equal(rc, SB_ERR_SCHEMA);
	rc = sb_schema_check("budget.exceeded", SB_SRC_GUEST, b.data, b.size);
	assert_int_equal(rc, SB_ERR_SCHEMA);
	tu_errmsg_has(rc, "budget.exceeded", "guest");
	assert_int_equal(sb_schema_check("agent.usage.updated", SB_SRC_GATEWAY, u.data, u.size), 0);
	assert_int_equal(sb_schema_check("budget.exceeded", SB_SRC_GATEWAY, b.data, b.size), 0);
	assert_int_equal(sb_schema_check("budget.exceeded", SB_SRC_HOST, b.data, b.size), 0);
	msgpack_sbuffer_destroy(&u);
	msgpack_sbuffer_destroy(&b);
}

static void test_unknown_type(void **state)
{
	int rc = sb_schema_check("run.exploded", SB_SRC_HOST, "\x80", 1);

	assert_int_equal(rc, SB_ERR_SCHEMA);
	tu_errmsg_has(rc, "unknown", "run.exploded");
	assert_int_equal(sb_schema_check("", SB_SRC_HOST, "\x80", 1), SB_ERR_SCHEMA);
}

/* Leaving out any one required field is refused, naming type and field. */
static void test_missing_field(void **state)
{
	const struct sb_event_schema *s;
	msgpack_sbuffer sb;
	size_t n, checked = 0;

	s = sb_schema_all(&n);
	for (size_t i = 0; i < n; i++) {
		enum sb_source src = tu_allowed_source(&s[i]);
		for (const struct sb_field *f = s[i].fields; f < s[i].fields + SB_FIELDS_MAX && f->name;
		     f++, checked++) {
			int rc;
			tu_schema_payload(&sb, &s[i], f->name, 0);
			rc = sb_schema_check(s[i].type, src, sb.data, sb.size);
			msgpack_sbuffer_destroy(&sb);
			if (f->type & SB_F_OPTIONAL) { /* may be left out */
				assert_int_equal(rc, SB_OK);
				continue;
			}
			assert_int_equal(rc, SB_ERR_SCHEMA);
			tu_errmsg_has(rc, s[i].type, f->name, "missing");
		}
	}
	assert_true(checked >= 40);
}

/* A field of the wrong kind is refused, naming type, field and kind; every
 * wrong value is tried for every field of the table. */
static void test_mistyped_field(void **state)
{
	const struct sb_event_schema *s;
	msgpack_sbuffer sb;
	size_t n, checked = 0;

	s = sb_schema_all(&n);
	for (size_t i = 0; i < n; i++) {
		enum sb_source src = tu_allowed_source(&s[i]);
		for (const struct sb_field *f = s[i].fields; f < s[i].fields + SB_FIELDS_MAX && f->name;
		     f++) {
			for (int w = 0; wrong_payload(&sb, &s[i], f->name, w); w++, checked++) {
				int rc = sb_schema_check(s[i].type, src, sb.data, sb.size);
				if (rc != SB_ERR_SCHEMA)
					fail_msg("%s.%s wrong value %d accepted", s[i].type, f->name, w);
				tu_errmsg_has(rc, s[i].type, f->name, kind_names[sb_field_kind(f)]);
				msgpack_sbuffer_destroy(&sb);
			}
		}
	}
	assert_true(checked >= 150);
}

/* Unpacks bytes into one object (for the direct kind checks). */
static void unpack1(msgpack_sbuffer *sb, msgpack_zone *z, msgpack_object *o)
{
	size_t off = 0;

	assert_int_equal(msgpack_unpack(sb->data, sb->size, &off, z, o), MSGPACK_UNPACK_SUCCESS);
}

/* Each of the eight kinds accepts its values and refuses every wrong one,
 * including the kinds no table entry uses yet. */
static void test_kinds(void **state)
{
	msgpack_zone z;
	msgpack_object o;
	msgpack_sbuffer sb;
	msgpack_packer pk;

	msgpack_zone_init(&z, 1024);
	for (int t = SB_F_STR; t <= SB_F_LABEL; t++) {
		for (unsigned salt = 0; salt < 2; salt++) {
			msgpack_sbuffer_init(&sb);
			msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
			tu_pack_good(&pk, (enum sb_ftype)t, salt);
			unpack1(&sb, &z, &o);
			if (!type_ok(&o, (enum sb_ftype)t))
				fail_msg("kind %s refuses its own value", kind_names[t]);
			msgpack_sbuffer_destroy(&sb);
		}
		for (int w = 0;; w++) {
			msgpack_sbuffer_init(&sb);
			msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
			if (!pack_wrong(&pk, (enum sb_ftype)t, w)) {
				msgpack_sbuffer_destroy(&sb);
				break;
			}
			unpack1(&sb, &z, &o);
			if (type_ok(&o, (enum sb_ftype)t))
				fail_msg("kind %s accepts wrong value %d", kind_names[t], w);
			msgpack_sbuffer_destroy(&sb);
		}
	}
	/* Integer edges. */
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_uint64(&pk, UINT64_MAX);
	unpack1(&sb, &z, &o);
	assert_true(type_ok(&o, SB_F_UINT) && type_ok(&o, SB_F_INT));
	msgpack_sbuffer_clear(&sb);
	msgpack_pack_int64(&pk, INT64_MIN);
	unpack1(&sb, &z, &o);
	assert_true(!type_ok(&o, SB_F_UINT) && type_ok(&o, SB_F_INT));
	msgpack_sbuffer_clear(&sb);
	msgpack_pack_uint8(&pk, 0);
	unpack1(&sb, &z, &o);
	assert_true(type_ok(&o, SB_F_UINT) && type_ok(&o, SB_F_INT) && !type_ok(&o, SB_F_BOOL));
	msgpack_sbuffer_destroy(&sb);
	msgpack_zone_destroy(&z);
}

/* A payload that is not exactly one map is refused. */
static void test_not_one_map(void **state)
{
	static const struct {
		const char *b;
		size_t n;
	} bad[] = {
		{"\x90", 1},                      /* [] */
		{"\xa3tcg", 4},                   /* "tcg" */
		{"\x07", 1},                      /* 7 */
		{"\xc0", 1},                      /* nil */
		{"\xc3", 1},                      /* true */
		{"\x81\xa5" "accel\xa3tcg\xc0", 12}, /* a map, then nil */
		{"\x81\xa5" "accel\xa3tcg\x80", 12}, /* two maps */
		{"\x81\xa5" "accel\xa3tc", 10},   /* cut short */
		{"\x82\xa5" "accel\xa3tcg", 11},  /* map of 2 with 1 pair */
		{"\xc1", 1},                      /* never-used byte */
	};
	assert_int_equal(sb_schema_check("run.started", SB_SRC_HOST, "\x81\xa5" "accel\xa3tcg", 11), 0);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc = sb_schema_check("run.started", SB_SRC_HOST, bad[i].b, bad[i].n);
		if (rc != SB_ERR_SCHEMA)
			fail_msg("bad payload %zu accepted", i);
		tu_errmsg_has(rc, "run.started", "map");
	}
	assert_int_equal(sb_schema_check("run.started", SB_SRC_HOST, NULL, 5), SB_ERR_SCHEMA);
	tu_errmsg_has(SB_ERR_SCHEMA, "run.started", "missing");
	assert_int_equal(sb_schema_check("run.started", SB_SRC_HOST, "\x80", 0), SB_ERR_SCHEMA);
}

/* Keys must be strings, wherever they are in the map. */
static void test_non_string_keys(void **state)
{
	static const struct {
		const char *b;
		size_t n;
	} bad[] = {
		{"\x82\xa5" "accel\xa3tcg\x01\x02", 13},   /* 1: 2 */
		{"\x82\x01\x02\xa5" "accel\xa3tcg", 13},   /* key first */
		{"\x82\xa5" "accel\xa3tcg\xc4\x01k\x02", 15}, /* bin key */
		{"\x82\xa5" "accel\xa3tcg\xc0\x02", 13},   /* nil key */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc = sb_schema_check("run.started", SB_SRC_HOST, bad[i].b, bad[i].n);
		if (rc != SB_ERR_SCHEMA)
			fail_msg("non-string key %zu accepted", i);
		tu_errmsg_has(rc, "run.started", "key");
	}
}

/* Packs an agent.output payload of exactly len bytes. */
static void sized_payload(msgpack_sbuffer *sb, size_t len)
{
	size_t pad = len - 64;

	for (;;) {
		msgpack_packer pk;
		char *body = calloc(1, pad + 1);
		assert_non_null(body);
		memset(body, 'x', pad);
		msgpack_sbuffer_init(sb);
		msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
		msgpack_pack_map(&pk, 2);
		sb_pack_kstr(&pk, "stream", "stdout");
		sb_pack_kstrn(&pk, "data", body, pad);
		free(body);
		if (sb->size == len)
			return;
		pad += len - sb->size;
		msgpack_sbuffer_destroy(sb);
	}
}

/* Payloads up to SB_PAYLOAD_MAX bytes pass; one byte more is refused. */
static void test_oversize(void **state)
{
	msgpack_sbuffer sb;
	int rc;

	sized_payload(&sb, SB_PAYLOAD_MAX);
	assert_int_equal(sb_schema_check("agent.output", SB_SRC_GUEST, sb.data, sb.size), SB_OK);
	msgpack_sbuffer_destroy(&sb);
	sized_payload(&sb, SB_PAYLOAD_MAX + 1);
	rc = sb_schema_check("agent.output", SB_SRC_GUEST, sb.data, sb.size);
	assert_int_equal(rc, SB_ERR_SCHEMA);
	tu_errmsg_has(rc, "agent.output", "exceeds");
	msgpack_sbuffer_destroy(&sb);
}

/* A few bytes declaring a container of billions of elements are refused
 * without allocating for them. */
static void test_huge_declared_counts(void **state)
{
	static const struct {
		const char *b;
		size_t n;
	} bad[] = {
		{"\x82\xa5" "accel\xa3tcg\xa1k\xdd\x7f\xff\xff\xff", 18},
		{"\x82\xa5" "accel\xa3tcg\xa1k\xdf\x7f\xff\xff\xff", 18},
		{"\xdf\x7f\xff\xff\xff", 5},
		{"\x82\xa5" "accel\xa3tcg\xa1k\xdb\x7f\xff\xff\xff", 18},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(sb_schema_check("run.started", SB_SRC_HOST,
						 bad[i].b, bad[i].n),
				 SB_ERR_SCHEMA);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_sources),
		cmocka_unit_test(test_guest_usage_refused),
		cmocka_unit_test(test_unknown_type),
		cmocka_unit_test(test_missing_field),
		cmocka_unit_test(test_mistyped_field),
		cmocka_unit_test(test_kinds),
		cmocka_unit_test(test_not_one_map),
		cmocka_unit_test(test_non_string_keys),
		cmocka_unit_test(test_oversize),
		cmocka_unit_test(test_huge_declared_counts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
