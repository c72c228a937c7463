/* test_payload.c - payload access helpers and msgpack <-> JSON conversion. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>

#include "engine/payload.h"
#include "tests/unit/testutil.h"

static void parse(const msgpack_sbuffer *sb, msgpack_zone *z, msgpack_object *o)
{
	assert_int_equal(sb_payload_parse(sb->data, sb->size, z, o), SB_OK);
}

/* Converts o to JSON text (compact, keys in their order); the caller frees. */
static char *to_json_text(const msgpack_object *o)
{
	json_t *j = sb_msgpack_to_json(o);
	char *s;

	assert_non_null(j);
	s = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
	json_decref(j);
	assert_non_null(s);
	return s;
}

/* msgpack -> JSON -> msgpack gives the same bytes for every JSON-shaped
 * kind, and JSON holds the expected values. */
static void test_msgpack_json_roundtrip(void **state)
{
	msgpack_sbuffer sb, back;
	msgpack_packer pk;
	msgpack_zone z;
	msgpack_object o;
	json_t *j, *v;

	msgpack_zone_init(&z, 1024);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 9);
	sb_pack_kstr(&pk, "s", "héllo");
	sb_pack_ku64(&pk, "u", 300000);
	sb_pack_ku64(&pk, "big", (uint64_t)INT64_MAX);
	sb_pack_ki64(&pk, "neg", -42);
	sb_pack_kbool(&pk, "t", 1);
	sb_pack_kbool(&pk, "f", 0);
	sb_pack_str(&pk, "nil");
	msgpack_pack_nil(&pk);
	sb_pack_str(&pk, "d");
	msgpack_pack_double(&pk, 2.5);
	sb_pack_str(&pk, "nest");
	msgpack_pack_map(&pk, 2);
	sb_pack_str(&pk, "arr");
	msgpack_pack_array(&pk, 3);
	msgpack_pack_uint8(&pk, 1);
	sb_pack_str(&pk, "two");
	msgpack_pack_map(&pk, 0);
	sb_pack_kstrn(&pk, "nul", "a\0b", 3);
	parse(&sb, &z, &o);

	j = sb_msgpack_to_json(&o);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "s")), "héllo");
	assert_int_equal(json_integer_value(json_object_get(j, "u")), 300000);
	assert_true(json_integer_value(json_object_get(j, "big")) == INT64_MAX);
	assert_int_equal(json_integer_value(json_object_get(j, "neg")), -42);
	assert_true(json_is_true(json_object_get(j, "t")));
	assert_true(json_is_false(json_object_get(j, "f")));
	assert_true(json_is_null(json_object_get(j, "nil")));
	assert_true(json_real_value(json_object_get(j, "d")) == 2.5);
	v = json_object_get(json_object_get(j, "nest"), "arr");
	assert_int_equal(json_array_size(v), 3);
	assert_string_equal(json_string_value(json_array_get(v, 1)), "two");
	assert_true(json_is_object(json_array_get(v, 2)));
	v = json_object_get(json_object_get(j, "nest"), "nul");
	assert_int_equal(json_string_length(v), 3);
	assert_memory_equal(json_string_value(v), "a\0b", 3);

	msgpack_sbuffer_init(&back);
	msgpack_packer_init(&pk, &back, msgpack_sbuffer_write);
	assert_int_equal(sb_json_to_msgpack(j, &pk), SB_OK);
	assert_int_equal(back.size, sb.size);
	assert_memory_equal(back.data, sb.data, sb.size);
	json_decref(j);
	msgpack_sbuffer_destroy(&back);
	msgpack_sbuffer_destroy(&sb);
	msgpack_zone_destroy(&z);
}

/* JSON -> msgpack -> JSON gives an equal document. */
static void test_json_msgpack_roundtrip(void **state)
{
	static const char *const docs[] = {
		"{}",
		"{\"a\":1,\"b\":[true,false,null,-7,1.25,\"x\"],\"c\":{\"d\":{\"e\":[]}}}",
		"{\"unicode\":\"\\u00e9\\u20ac\\ud83d\\ude00\",\"esc\":\"a\\nb\\u0000c\"}",
		"{\"max\":9223372036854775807,\"min\":-9223372036854775808}",
	};
	for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
		json_t *in = json_loads(docs[i], JSON_ALLOW_NUL, NULL), *out;
		msgpack_sbuffer sb;
		msgpack_packer pk;
		msgpack_zone z;
		msgpack_object o;

		assert_non_null(in);
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		assert_int_equal(sb_json_to_msgpack(in, &pk), SB_OK);
		msgpack_zone_init(&z, 1024);
		parse(&sb, &z, &o);
		out = sb_msgpack_to_json(&o);
		assert_non_null(out);
		if (!json_equal(in, out))
			fail_msg("document %zu changed in the round trip", i);
		json_decref(in);
		json_decref(out);
		msgpack_zone_destroy(&z);
		msgpack_sbuffer_destroy(&sb);
	}
}

/* Integers beyond int64 become reals; float32 becomes a real; NaN and
 * infinities, which JSON lacks, become null. */
static void test_numbers(void **state)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_zone z;
	msgpack_object o;
	json_t *j;

	msgpack_zone_init(&z, 256);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 5);
	sb_pack_ku64(&pk, "u", UINT64_MAX);
	sb_pack_str(&pk, "f");
	msgpack_pack_float(&pk, 0.5f);
	sb_pack_str(&pk, "nan");
	msgpack_pack_double(&pk, NAN);
	sb_pack_str(&pk, "inf");
	msgpack_pack_double(&pk, -INFINITY);
	sb_pack_str(&pk, "inf32");
	msgpack_pack_float(&pk, INFINITY);
	parse(&sb, &z, &o);
	j = sb_msgpack_to_json(&o);
	assert_non_null(j); /* JSON has no NaN or infinity: they become null */
	assert_true(json_is_null(json_object_get(j, "nan")));
	assert_true(json_is_null(json_object_get(j, "inf")));
	assert_true(json_is_null(json_object_get(j, "inf32")));
	assert_true(json_is_real(json_object_get(j, "u")));
	assert_true(json_real_value(json_object_get(j, "u")) == 18446744073709551615.0);
	assert_true(json_real_value(json_object_get(j, "f")) == 0.5);
	json_decref(j);
	msgpack_sbuffer_destroy(&sb);
	msgpack_zone_destroy(&z);
}

/* Each byte that is not part of valid UTF-8 becomes U+FFFD, in values and
 * in keys; valid multi-byte characters and NULs stay. */
static void test_invalid_utf8(void **state)
{
#define R "\xef\xbf\xbd"
	static const struct {
		const char *in;
		size_t n;
		const char *out;
		size_t outn;
	} cases[] = {
		{"a\xff" "b", 3, "a" R "b", 5},
		{"\x80", 1, R, 3},
		{"\xc0\xaf", 2, R R, 6},                 /* overlong '/' */
		{"\xe0\x80\xaf", 3, R R R, 9},           /* overlong, 3 bytes */
		{"\xed\xa0\x80", 3, R R R, 9},           /* surrogate */
		{"\xf4\x90\x80\x80", 4, R R R R, 12},    /* beyond U+10FFFF */
		{"\xf0\x9f\x98", 3, R R R, 9},           /* cut at the end */
		{"ok\xe2\x82x", 5, "ok" R R "x", 9},     /* cut in the middle */
		{"\xf8\x88\x80\x80\x80", 5, R R R R R, 15}, /* 5-byte form */
		{"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9},
		{"a\0\xff", 3, "a\0" R, 5},
	};
#undef R
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		msgpack_sbuffer sb;
		msgpack_packer pk;
		msgpack_zone z;
		msgpack_object o;
		json_t *j, *v;
		const char *key;

		msgpack_zone_init(&z, 256);
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		msgpack_pack_map(&pk, 2);
		sb_pack_kstrn(&pk, "v", cases[i].in, cases[i].n);
		msgpack_pack_str_with_body(&pk, cases[i].in, cases[i].n); /* as a key */
		msgpack_pack_uint8(&pk, 1);
		parse(&sb, &z, &o);
		j = sb_msgpack_to_json(&o);
		assert_non_null(j);
		v = json_object_get(j, "v");
		if (json_string_length(v) != cases[i].outn ||
		    memcmp(json_string_value(v), cases[i].out, cases[i].outn))
			fail_msg("case %zu: wrong replacement", i);
		json_object_foreach(j, key, v) {
			if (strcmp(key, "v"))
				assert_memory_equal(key, cases[i].out, strlen(key));
		}
		assert_int_equal(json_object_size(j), 2);
		json_decref(j);
		msgpack_sbuffer_destroy(&sb);
		msgpack_zone_destroy(&z);
	}
}

/* Binary and ext data become base64 strings. */
static void test_binary_base64(void **state)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_zone z;
	msgpack_object o;
	char *s;

	msgpack_zone_init(&z, 256);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 4);
	sb_pack_str(&pk, "b");
	msgpack_pack_bin(&pk, 3);
	msgpack_pack_bin_body(&pk, "\x00\x01\xff", 3);
	sb_pack_str(&pk, "e");
	msgpack_pack_bin(&pk, 0);
	sb_pack_str(&pk, "m");
	msgpack_pack_bin(&pk, 5);
	msgpack_pack_bin_body(&pk, "hello", 5);
	sb_pack_str(&pk, "x");
	msgpack_pack_ext(&pk, 4, 7);
	msgpack_pack_ext_body(&pk, "\xde\xad\xbe\xef", 4);
	parse(&sb, &z, &o);
	s = to_json_text(&o);
	assert_string_equal(s, "{\"b\":\"AAH/\",\"e\":\"\",\"m\":\"aGVsbG8=\",\"x\":\"3q2+7w==\"}");
	free(s);
	msgpack_sbuffer_destroy(&sb);
	msgpack_zone_destroy(&z);
}

/* Keys of nested maps that are not strings still convert (as their JSON
 * text), rather than failing the whole payload. */
static void test_nested_non_string_keys(void **state)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_zone z;
	msgpack_object o;
	char *s;

	msgpack_zone_init(&z, 256);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 1);
	sb_pack_str(&pk, "m");
	msgpack_pack_map(&pk, 3);
	msgpack_pack_uint8(&pk, 1);
	sb_pack_str(&pk, "one");
	msgpack_pack_int8(&pk, -2);
	msgpack_pack_true(&pk);
	sb_pack_kstr(&pk, "s", "x");
	parse(&sb, &z, &o);
	s = to_json_text(&o);
	assert_string_equal(s, "{\"m\":{\"1\":\"one\",\"-2\":true,\"s\":\"x\"}}");
	free(s);
	msgpack_sbuffer_destroy(&sb);
	msgpack_zone_destroy(&z);
}

/* Builds {"a": [[...]]} with `arrays` nested arrays, the innermost holding
 * inner (NULL: empty). */
static json_t *nested(int arrays, json_t *inner)
{
	json_t *j = json_array(), *m = json_object();

	if (inner)
		json_array_append_new(j, inner);
	for (int i = 1; i < arrays; i++) {
		json_t *a = json_array();
		json_array_append_new(a, j);
		j = a;
	}
	json_object_set_new(m, "a", j);
	return m;
}

/* Nesting up to 32 containers packs and parses back; deeper is refused
 * before anything that msgpack could not read is produced. */
static void test_depth_limit(void **state)
{
	for (int arrays = 20; arrays <= 40; arrays++) {
		for (int with_int = 0; with_int < 2; with_int++) {
			json_t *in = nested(arrays, with_int ? json_integer(5) : NULL), *out;
			msgpack_sbuffer sb;
			msgpack_packer pk;
			msgpack_zone z;
			msgpack_object o;
			int rc;

			msgpack_sbuffer_init(&sb);
			msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
			sb_clearerr();
			rc = sb_json_to_msgpack(in, &pk);
			if (arrays + 1 <= 32) {
				if (rc)
					fail_msg("%d nested containers refused", arrays + 1);
				msgpack_zone_init(&z, 4096);
				if (sb_payload_parse(sb.data, sb.size, &z, &o))
					fail_msg("%d nested containers packed but do not parse", arrays + 1);
				out = sb_msgpack_to_json(&o);
				assert_true(json_equal(in, out));
				json_decref(out);
				msgpack_zone_destroy(&z);
			} else {
				if (rc != SB_ERR_INVAL)
					fail_msg("%d nested containers accepted", arrays + 1);
				tu_errmsg_has(rc, "deeper");
			}
			json_decref(in);
			msgpack_sbuffer_destroy(&sb);
		}
	}
}

/* sb_payload_parse accepts exactly one map. */
static void test_payload_parse(void **state)
{
	static const struct {
		const char *b;
		size_t n;
		int ok;
	} cases[] = {
		{"\x80", 1, 1},
		{"\x81\xa1k\x01", 4, 1},
		{"\x81\xa1k\x01\x01", 5, 0},
		{"\x81\xa1k", 3, 0},
		{"\x91\x01", 2, 0},
		{"\xa1k", 2, 0},
		{"", 0, 0},
		{"\xc1", 1, 0},
		{"\x81\xa1k\xdd\xff\xff\xff\xff", 8, 0}, /* 4 G elements declared */
		{"\xdf\x7f\xff\xff\xff", 5, 0},
	};
	msgpack_zone z;
	msgpack_object o;

	msgpack_zone_init(&z, 256);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int rc = sb_payload_parse(cases[i].b, cases[i].n, &z, &o);
		if (cases[i].ok ? rc != SB_OK : rc != SB_ERR_CORRUPT)
			fail_msg("case %zu: got %d", i, rc);
		if (cases[i].ok)
			assert_int_equal(o.type, MSGPACK_OBJECT_MAP);
	}
	assert_int_equal(sb_payload_parse(NULL, 4, &z, &o), SB_ERR_CORRUPT);
	msgpack_zone_destroy(&z);
}

/* Field getters: present, absent, of the wrong type, at the edges. */
static void test_accessors(void **state)
{
	msgpack_sbuffer sb;
	msgpack_zone z;
	msgpack_object o, notmap = {.type = MSGPACK_OBJECT_NIL};
	char buf[8];

	tu_json(&sb, "{'s':'hello world','n':-5,'u':18,'b':true,'max':9223372036854775807}");
	msgpack_zone_init(&z, 256);
	parse(&sb, &z, &o);
	assert_non_null(sb_map_get(&o, "s"));
	assert_null(sb_map_get(&o, "hello"));
	assert_null(sb_map_get(&o, "")); /* no prefix matches */
	assert_null(sb_map_get(&notmap, "s"));
	assert_null(sb_map_get(NULL, "s"));
	assert_int_equal(sb_map_str(&o, "s", buf, sizeof buf), 11);
	assert_string_equal(buf, "hello w");
	assert_int_equal(sb_map_str(&o, "n", buf, sizeof buf), -1);
	assert_int_equal(sb_map_str(&o, "zz", buf, sizeof buf), -1);
	assert_true(sb_map_u64(&o, "u", 9) == 18);
	assert_true(sb_map_u64(&o, "n", 9) == 9);
	assert_true(sb_map_u64(&o, "s", 9) == 9);
	assert_true(sb_map_u64(&o, "zz", 9) == 9);
	assert_true(sb_map_i64(&o, "n", 9) == -5);
	assert_true(sb_map_i64(&o, "u", 9) == 18);
	assert_true(sb_map_i64(&o, "max", 9) == INT64_MAX);
	assert_true(sb_map_i64(&o, "b", 9) == 9);
	msgpack_sbuffer_destroy(&sb);

	/* u64 beyond int64 is not a signed value. */
	{
		msgpack_packer pk;
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		msgpack_pack_map(&pk, 1);
		sb_pack_ku64(&pk, "x", (uint64_t)INT64_MAX + 1);
		parse(&sb, &z, &o);
		assert_true(sb_map_i64(&o, "x", -1) == -1);
		assert_true(sb_map_u64(&o, "x", 0) == (uint64_t)INT64_MAX + 1);
		msgpack_sbuffer_destroy(&sb);
	}
	msgpack_zone_destroy(&z);
}

/* The key/value packers write what the getters read. */
static void test_packers(void **state)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_zone z;
	msgpack_object o;
	char buf[16];

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 6);
	sb_pack_kstr(&pk, "a", "alpha");
	sb_pack_kstrn(&pk, "b", "be\0ta", 5);
	sb_pack_ku64(&pk, "c", UINT64_MAX);
	sb_pack_ki64(&pk, "d", INT64_MIN);
	sb_pack_kbool(&pk, "e", 1);
	sb_pack_kbool(&pk, "f", 0);
	msgpack_zone_init(&z, 256);
	parse(&sb, &z, &o);
	assert_int_equal(sb_map_str(&o, "a", buf, sizeof buf), 5);
	assert_string_equal(buf, "alpha");
	assert_int_equal(sb_map_get(&o, "b")->via.str.size, 5);
	assert_memory_equal(sb_map_get(&o, "b")->via.str.ptr, "be\0ta", 5);
	assert_true(sb_map_u64(&o, "c", 0) == UINT64_MAX);
	assert_true(sb_map_i64(&o, "d", 0) == INT64_MIN);
	assert_true(sb_map_get(&o, "e")->type == MSGPACK_OBJECT_BOOLEAN && sb_map_get(&o, "e")->via.boolean);
	assert_true(sb_map_get(&o, "f")->type == MSGPACK_OBJECT_BOOLEAN && !sb_map_get(&o, "f")->via.boolean);
	msgpack_zone_destroy(&z);
	msgpack_sbuffer_destroy(&sb);
}

/* Packs one value of every msgpack format, one per call (i from 0);
 * returns 0 past the last. */
static int pack_format(msgpack_packer *pk, int i)
{
	static char big[70000];
	uint32_t n;

	switch (i) {
	case 0: msgpack_pack_nil(pk); break;
	case 1: msgpack_pack_true(pk); break;
	case 2: msgpack_pack_false(pk); break;
	case 3: msgpack_pack_uint8(pk, 5); break;
	case 4: msgpack_pack_int8(pk, -5); break;
	case 5: msgpack_pack_uint8(pk, 200); break;
	case 6: msgpack_pack_uint16(pk, 60000); break;
	case 7: msgpack_pack_uint32(pk, 4000000000u); break;
	case 8: msgpack_pack_uint64(pk, UINT64_MAX); break;
	case 9: msgpack_pack_int8(pk, -100); break;
	case 10: msgpack_pack_int16(pk, -30000); break;
	case 11: msgpack_pack_int32(pk, -2000000000); break;
	case 12: msgpack_pack_int64(pk, INT64_MIN); break;
	case 13: msgpack_pack_float(pk, 1.5f); break;
	case 14: msgpack_pack_double(pk, 1.5); break;
	case 15: case 16: case 17: case 18:
		n = i == 15 ? 5 : i == 16 ? 200 : i == 17 ? 1000 : 70000;
		msgpack_pack_str_with_body(pk, big, n);
		break;
	case 19: case 20: case 21:
		n = i == 19 ? 5 : i == 20 ? 1000 : 70000;
		msgpack_pack_bin_with_body(pk, big, n);
		break;
	case 22: case 23: case 24: case 25: case 26: case 27: case 28: case 29:
		n = (uint32_t[]){1, 2, 4, 8, 16, 3, 1000, 70000}[i - 22];
		msgpack_pack_ext_with_body(pk, big, n, 9);
		break;
	case 30: case 31: case 32:
		n = i == 30 ? 3 : i == 31 ? 20 : 70000;
		msgpack_pack_array(pk, n);
		for (uint32_t k = 0; k < n; k++)
			msgpack_pack_uint8(pk, (uint8_t)k);
		break;
	case 33: case 34: case 35:
		n = i == 33 ? 3 : i == 34 ? 20 : 70000;
		msgpack_pack_map(pk, n);
		for (uint32_t k = 0; k < n; k++) {
			msgpack_pack_uint32(pk, k);
			msgpack_pack_array(pk, 1);
			msgpack_pack_nil(pk);
		}
		break;
	default: return 0;
	}
	return 1;
}

/* sb_msgpack_check measures every format exactly and refuses every cut. */
static void test_msgpack_check_formats(void **state)
{
	for (int i = 0;; i++) {
		msgpack_sbuffer sb;
		msgpack_packer pk;
		size_t n = 0;

		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		if (!pack_format(&pk, i)) {
			msgpack_sbuffer_destroy(&sb);
			break;
		}
		msgpack_pack_nil(&pk); /* a following object is not part of it */
		if (sb_msgpack_check(sb.data, sb.size, &n) || n != sb.size - 1)
			fail_msg("format %d: measured %zu of %zu", i, n, sb.size - 1);
		for (size_t cut = 0; cut < sb.size - 1; cut += cut < 64 ? 1 : 997)
			if (sb_msgpack_check(sb.data, cut, &n) != SB_ERR_CORRUPT)
				fail_msg("format %d cut at %zu accepted", i, cut);
		msgpack_sbuffer_destroy(&sb);
	}
	assert_int_equal(sb_msgpack_check("\xc1", 1, &(size_t){0}), SB_ERR_CORRUPT);
	assert_int_equal(sb_msgpack_check(NULL, 0, &(size_t){0}), SB_ERR_CORRUPT);
}

/* On random short inputs the check agrees with msgpack_unpack: whatever
 * msgpack reads, the check measures the same; whatever the check passes,
 * msgpack reads whole (nesting beyond msgpack's 32 levels aside). */
static void test_msgpack_check_differential(void **state)
{
	static const uint8_t common[] = {0x80, 0x81, 0x82, 0x90, 0x91, 0x93, 0xa1, 0xa3, 0xc0,
					 0xc4, 0xc7, 0xcc, 0xd4, 0xd8, 0xd9, 0xdc, 0xde, 0x01};
	uint64_t seed = 42;
	msgpack_zone z;
	uint8_t buf[24];
	unsigned agreed = 0;

	msgpack_zone_init(&z, 4096);
	for (int round = 0; round < 300000; round++) {
		size_t len = 1 + tu_rand(&seed) % sizeof buf, off = 0, n = 0;
		msgpack_object o;
		int urc, crc;

		for (size_t i = 0; i < len; i++) {
			uint64_t r = tu_rand(&seed);
			buf[i] = r % 3 ? common[(r >> 8) % sizeof common] : (uint8_t)(r >> 16);
			if (r % 7 == 0)
				buf[i] = (uint8_t)(r >> 24) & 0x0f; /* small counts */
			/* No 32-bit array or map counts: msgpack_unpack, unguarded here,
			 * would allocate for them (see test_payload_parse). */
			if (buf[i] == 0xdd || buf[i] == 0xdf)
				buf[i]--;
			/* 16-bit counts stay below 256 so ASan builds run fast. */
			if (i > 0 && (buf[i - 1] == 0xdc || buf[i - 1] == 0xde))
				buf[i] = 0;
		}
		msgpack_zone_clear(&z);
		crc = sb_msgpack_check(buf, len, &n);
		urc = msgpack_unpack((const char *)buf, len, &off, &z, &o);
		if (urc == MSGPACK_UNPACK_SUCCESS || urc == MSGPACK_UNPACK_EXTRA_BYTES) {
			if (crc || n != off)
				fail_msg("round %d: msgpack read %zu bytes, check says %d/%zu", round, off,
					 crc, n);
			agreed++;
		} else if (crc == SB_OK && urc != MSGPACK_UNPACK_NOMEM_ERROR) {
			fail_msg("round %d: check passed %zu bytes msgpack refuses (%d)", round, n, urc);
		}
	}
	assert_true(agreed > 10000);
	msgpack_zone_destroy(&z);
}

/* Keys that are not strings become their JSON text, cut at 256 bytes, so
 * keys nested in keys (each level escaping the one inside) stay small. */
static void test_nested_keys_bounded(void **state)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_zone zone;
	msgpack_object o;
	json_t *j;
	const char *key;
	json_t *v;
	size_t len;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	for (int i = 0; i < 24; i++) /* {{{..."\"q\"": 1 ...}: 1}: 1} */
		msgpack_pack_map(&pk, 1);
	sb_pack_str(&pk, "\"quoted\" and \\ slashed");
	for (int i = 0; i < 24; i++)
		msgpack_pack_uint8(&pk, 1);
	assert_true(msgpack_zone_init(&zone, 1024));
	assert_int_equal(sb_payload_parse(sb.data, sb.size, &zone, &o), SB_OK);
	assert_non_null(j = sb_msgpack_to_json(&o));
	json_object_foreach(j, key, v)
	{
		len = strlen(key);
		assert_true(len <= 256);
		assert_string_equal(key + len - 3, "...");
	}
	json_decref(j);
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&sb);
}

/* A key's JSON text cut at 256 bytes ends on a character boundary: a
 * two-byte character the cut would split is left out whole. */
static void test_key_cut_utf8(void **state)
{
	char text[600], want[300];
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_zone zone;
	msgpack_object o;
	const char *key;
	json_t *j, *v;
	size_t n = 0;

	text[n++] = 'a';
	while (n < 400) {
		memcpy(text + n, "\xc3\xa9", 2); /* U+00E9 */
		n += 2;
	}
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 1);
	msgpack_pack_array(&pk, 1); /* the key: ["a\u00e9\u00e9..."] */
	msgpack_pack_str_with_body(&pk, text, n);
	msgpack_pack_uint8(&pk, 1);
	assert_true(msgpack_zone_init(&zone, 1024));
	assert_int_equal(sb_payload_parse(sb.data, sb.size, &zone, &o), SB_OK);
	assert_non_null(j = sb_msgpack_to_json(&o));
	/* byte 252 is inside a character: the text keeps 251 bytes, ["a and
	 * 124 whole characters, then "..." */
	memcpy(want, "[\"", 2);
	memcpy(want + 2, text, 249);
	memcpy(want + 251, "...", 4);
	json_object_foreach(j, key, v)
	    assert_string_equal(key, want);
	json_decref(j);
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&sb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_msgpack_json_roundtrip),
		cmocka_unit_test(test_json_msgpack_roundtrip),
		cmocka_unit_test(test_numbers),
		cmocka_unit_test(test_invalid_utf8),
		cmocka_unit_test(test_binary_base64),
		cmocka_unit_test(test_nested_non_string_keys),
		cmocka_unit_test(test_depth_limit),
		cmocka_unit_test(test_payload_parse),
		cmocka_unit_test(test_accessors),
		cmocka_unit_test(test_packers),
		cmocka_unit_test(test_msgpack_check_formats),
		cmocka_unit_test(test_msgpack_check_differential),
		cmocka_unit_test(test_nested_keys_bounded),
		cmocka_unit_test(test_key_cut_utf8),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
