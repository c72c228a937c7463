/* test_text.c - terminal escaping, name checks, UTF-8 cuts and the spec's
 * name reader: every class of character, each boundary of UTF-8, random
 * bytes and long inputs. Validity of the output is judged by jansson's
 * UTF-8 check (tu_utf8_valid), not by the code under test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "engine/spec.h"
#include "engine/text.h"
#include "tests/unit/testutil.h"

/* Escapes s[0..len) into a buffer large enough for anything. */
static char *esc(const char *s, size_t len)
{
	size_t cap = len * 8 + 1;
	char *buf = malloc(cap);

	assert_non_null(buf);
	assert_int_equal(sb_text_escape(s, len, buf, cap), len);
	return buf;
}

static void assert_esc(const char *s, size_t len, const char *want)
{
	char *got = esc(s, len);

	if (strcmp(got, want))
		fail_msg("escape gave '%s', want '%s'", got, want);
	free(got);
}
#define ESC(lit, want) assert_esc(lit, sizeof lit - 1, want)

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Undoes the escaping (the test's own decoder); returns the length, or
 * -1 when out is not a well-formed escaping. */
static long unescape(const char *out, char *dst)
{
	long n = 0;

	for (const char *p = out; *p; p++) {
		if (*p != '\\') {
			dst[n++] = *p;
			continue;
		}
		switch (*++p) {
		case '\\': dst[n++] = '\\'; break;
		case 'n': dst[n++] = '\n'; break;
		case 'r': dst[n++] = '\r'; break;
		case 't': dst[n++] = '\t'; break;
		case 'x':
			if (hexval(p[1]) < 0 || hexval(p[2]) < 0)
				return -1;
			dst[n++] = (char)(hexval(p[1]) << 4 | hexval(p[2]));
			p += 2;
			break;
		case 'u': {
			unsigned cp = 0;
			if (p[1] != '{' || p[6] != '}')
				return -1;
			for (int i = 2; i < 6; i++) {
				if (hexval(p[i]) < 0)
					return -1;
				cp = cp << 4 | (unsigned)hexval(p[i]);
			}
			if (cp < 0x800) { /* C1 */
				dst[n++] = (char)(0xc0 | cp >> 6);
				dst[n++] = (char)(0x80 | (cp & 0x3f));
			} else {
				dst[n++] = (char)(0xe0 | cp >> 12);
				dst[n++] = (char)(0x80 | (cp >> 6 & 0x3f));
				dst[n++] = (char)(0x80 | (cp & 0x3f));
			}
			p += 6;
			break;
		}
		default: return -1;
		}
	}
	return n;
}

static void assert_roundtrip(const char *s, size_t len)
{
	char *out = esc(s, len), *back = malloc(len + 1);
	long n;

	assert_non_null(back);
	n = unescape(out, back);
	assert_int_equal(n, (long)len);
	assert_memory_equal(back, s, len);
	free(back);
	free(out);
}

static void test_ascii_and_backslash(void **st)
{
	(void)st;
	ESC("", "");
	ESC("hello, world ~!@#$%^&*()_+{}|:\"<>?`-=[];',./", "hello, world ~!@#$%^&*()_+{}|:\"<>?`-=[];',./");
	ESC("a\\b", "a\\\\b");
	ESC("\\x1b", "\\\\x1b"); /* an escape-looking text stays told apart */
	ESC("line\nnext\r\ttab", "line\\nnext\\r\\ttab");
}

static void test_c0_and_del(void **st)
{
	char in[1], want[8];

	(void)st;
	for (int c = 0; c < 0x20; c++) {
		in[0] = (char)c;
		if (c == '\n' || c == '\r' || c == '\t')
			continue;
		snprintf(want, sizeof want, "\\x%02x", c);
		assert_esc(in, 1, want);
	}
	ESC("\x7f", "\\x7f");
	ESC("a\0b", "a\\x00b");
	ESC("\x1b[2J\x1b]0;pwned\x07", "\\x1b[2J\\x1b]0;pwned\\x07");
}

static void test_c1(void **st)
{
	char in[2], want[16];

	(void)st;
	for (unsigned cp = 0x80; cp <= 0x9f; cp++) {
		in[0] = (char)(0xc0 | cp >> 6);
		in[1] = (char)(0x80 | (cp & 0x3f));
		snprintf(want, sizeof want, "\\u{%04x}", cp);
		assert_esc(in, 2, want);
	}
	ESC("\xc2\xa0", "\xc2\xa0"); /* U+00A0, the first after C1, is printable */
	ESC("\xc2\x9b" "31m", "\\u{009b}31m"); /* CSI as one character */
}

static void test_bidi(void **st)
{
	static const unsigned bidi[] = {0x200e, 0x200f, 0x202a, 0x202b, 0x202c, 0x202d,
					0x202e, 0x2066, 0x2067, 0x2068, 0x2069};
	static const unsigned near[] = {0x200d, 0x2010, 0x2029, 0x202f, 0x2065, 0x206a};
	char in[3], want[16];

	(void)st;
	for (size_t i = 0; i < sizeof bidi / sizeof bidi[0]; i++) {
		in[0] = (char)(0xe0 | bidi[i] >> 12);
		in[1] = (char)(0x80 | (bidi[i] >> 6 & 0x3f));
		in[2] = (char)(0x80 | (bidi[i] & 0x3f));
		snprintf(want, sizeof want, "\\u{%04x}", bidi[i]);
		assert_esc(in, 3, want);
	}
	for (size_t i = 0; i < sizeof near / sizeof near[0]; i++) {
		in[0] = (char)(0xe0 | near[i] >> 12);
		in[1] = (char)(0x80 | (near[i] >> 6 & 0x3f));
		in[2] = (char)(0x80 | (near[i] & 0x3f));
		memcpy(want, in, 3);
		want[3] = 0;
		assert_esc(in, 3, want);
	}
}

static void test_invalid_utf8(void **st)
{
	(void)st;
	ESC("\x80", "\\x80");               /* a stray continuation byte */
	ESC("\xbf\xbf", "\\xbf\\xbf");
	ESC("\xc0\xaf", "\\xc0\\xaf");       /* overlong '/' */
	ESC("\xc1\xbf", "\\xc1\\xbf");       /* overlong U+007F */
	ESC("\xe0\x80\xaf", "\\xe0\\x80\\xaf"); /* overlong, 3 bytes */
	ESC("\xe0\x9f\xbf", "\\xe0\\x9f\\xbf"); /* overlong U+07FF */
	ESC("\xed\xa0\x80", "\\xed\\xa0\\x80"); /* surrogate U+D800 */
	ESC("\xed\xbf\xbf", "\\xed\\xbf\\xbf"); /* surrogate U+DFFF */
	ESC("\xf0\x8f\xbf\xbf", "\\xf0\\x8f\\xbf\\xbf"); /* overlong U+FFFF */
	ESC("\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"); /* U+110000 */
	ESC("\xf5\x80\x80\x80", "\\xf5\\x80\\x80\\x80");
	ESC("\xfe\xff", "\\xfe\\xff");
	ESC("\xe2\x82", "\\xe2\\x82");       /* truncated at the end */
	ESC("\xe2\x82" "A", "\\xe2\\x82A");  /* truncated before ASCII */
	ESC("\xf0\x9f\x98", "\\xf0\\x9f\\x98");
	ESC("\xc3" "\xc3\xa9", "\\xc3\xc3\xa9"); /* a bad lead, then a good é */
}

static void test_valid_boundaries(void **st)
{
	static const char *const ok[] = {
		"\xc2\xa0",         /* U+00A0 */
		"\xdf\xbf",         /* U+07FF */
		"\xe0\xa0\x80",     /* U+0800 */
		"\xed\x9f\xbf",     /* U+D7FF */
		"\xee\x80\x80",     /* U+E000 */
		"\xef\xbf\xbf",     /* U+FFFF */
		"\xf0\x90\x80\x80", /* U+10000 */
		"\xf4\x8f\xbf\xbf", /* U+10FFFF */
		"caf\xc3\xa9 \xe5\x90\x8d\xe5\x89\x8d \xf0\x9f\x98\x80",
	};

	(void)st;
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		assert_esc(ok[i], strlen(ok[i]), ok[i]);
}

/* Every cap from 1 to past the end: a NUL-terminated prefix of the full
 * escaping that is the escaping of exactly the consumed input. */
static void test_cut_never_splits(void **st)
{
	static const char in[] = "a\x1b[1m\xc3\xa9\\\xe2\x80\xae\xf0\x9f\x98\x80\n\xff" "end";
	size_t len = sizeof in - 1;
	char *full = esc(in, len), buf[128];

	(void)st;
	for (size_t cap = 1; cap <= strlen(full) + 2; cap++) {
		size_t used = sb_text_escape(in, len, buf, cap);
		char *part = esc(in, used);

		assert_true(strlen(buf) < cap);
		assert_string_equal(buf, part); /* never half an escape or character */
		assert_int_equal(strncmp(full, buf, strlen(buf)), 0);
		assert_true(used <= len);
		if (cap > strlen(full))
			assert_int_equal(used, len);
		else
			assert_true(used < len);
		tu_assert_printable(buf);
		free(part);
	}
	assert_int_equal(sb_text_escape(in, len, buf, 0), 0); /* nothing fits */
	free(full);
}

static void test_random_bytes(void **st)
{
	uint64_t seed = 0x5eed5eed;
	char in[300];

	(void)st;
	for (int round = 0; round < 20000; round++) {
		size_t len = tu_rand(&seed) % sizeof in;
		for (size_t i = 0; i < len; i++) {
			uint64_t r = tu_rand(&seed);
			/* bias towards the interesting bytes */
			in[i] = (char)(r % 4 == 0 ? 0x80 + (r >> 8) % 0x40 : r % 4 == 1 ? 0xc0 + (r >> 8) % 0x40 : r >> 8);
		}
		char *out = esc(in, len);
		tu_assert_printable(out);
		assert_roundtrip(in, len);
		free(out);
		/* and cut to a random size */
		char small[40];
		size_t cap = 1 + tu_rand(&seed) % sizeof small;
		size_t used = sb_text_escape(in, len, small, cap);
		assert_true(used <= len && strlen(small) < cap);
		tu_assert_printable(small);
	}
}

static void test_long_input(void **st)
{
	size_t len = 4u << 20;
	char *in = malloc(len), buf[101];
	uint64_t seed = 7;

	(void)st;
	assert_non_null(in);
	for (size_t i = 0; i < len; i++)
		in[i] = (char)tu_rand(&seed);
	size_t used = sb_text_escape(in, len, buf, sizeof buf);
	assert_true(used > 0 && used < len);
	assert_true(strlen(buf) <= 100);
	tu_assert_printable(buf);
	assert_roundtrip(in, len); /* the whole of it, escaped and back */
	free(in);
}

static void test_check(void **st)
{
	static const struct {
		const char *s;
		size_t len;
		const char *want; /* in the detail; NULL: accepted */
	} cases[] = {
		{"build-7", 7, NULL},
		{"caf\xc3\xa9 \xe5\x90\x8d\xe5\x89\x8d", 12, NULL},
		{"back\\slash", 10, NULL},
		{"", 0, NULL},
		{"a\nb", 3, "control character U+000A at byte 1"},
		{"ab\tc", 4, "control character U+0009 at byte 2"},
		{"\x1b[2J", 4, "control character U+001B at byte 0"},
		{"x\x7f", 2, "control character U+007F at byte 1"},
		{"a\0b", 3, "control character U+0000 at byte 1"},
		{"ok\xc2\x85", 4, "control character U+0085 at byte 2"},
		{"abc\xe2\x80\xae", 6, "bidirectional control U+202E at byte 3"},
		{"\xe2\x81\xa6x", 4, "bidirectional control U+2066 at byte 0"},
		{"ab\xff", 3, "not valid UTF-8 (byte 0xFF at byte 2)"},
		{"ab\xed\xa0\x80", 5, "not valid UTF-8 (byte 0xED at byte 2)"},
		{"\xc0\xaf", 2, "not valid UTF-8 (byte 0xC0 at byte 0)"},
		{"abc\xe2\x82", 5, "not valid UTF-8 (byte 0xE2 at byte 3)"},
		{"caf\xc3\xa9\n", 6, "control character U+000A at byte 5"},
	};

	(void)st;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int rc = sb_text_check(cases[i].s, cases[i].len, "the name");
		if (!cases[i].want) {
			assert_int_equal(rc, SB_OK);
			continue;
		}
		assert_int_equal(rc, SB_ERR_INVAL);
		tu_errmsg_has(rc, "the name", cases[i].want);
		tu_assert_printable(sb_errmsg(rc)); /* the detail itself is printable */
		assert_null(strchr(sb_errmsg(rc), '\\')); /* and escapes to itself */
	}
}

static void test_utf8_cut(void **st)
{
	/* a é € 😀 : characters end at 1, 3, 6, 10 */
	static const char s[] = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
	static const size_t want[] = {0, 1, 1, 3, 3, 3, 6, 6, 6, 6, 10, 10};

	(void)st;
	for (size_t max = 0; max < sizeof want / sizeof want[0]; max++)
		assert_int_equal(sb_utf8_cut(s, 10, max), want[max]);
	/* an unfinished character at the end of the bytes is left out */
	assert_int_equal(sb_utf8_cut(s, 9, 9), 6);
	assert_int_equal(sb_utf8_cut(s, 8, 100), 6);
	assert_int_equal(sb_utf8_cut(s, 2, 2), 1);
	assert_int_equal(sb_utf8_cut("ab\xe2\x82", 4, 4), 2);
	/* invalid bytes are characters of their own */
	assert_int_equal(sb_utf8_cut("ab\xff\xfe", 4, 3), 3);
	assert_int_equal(sb_utf8_cut("\x80\x80\x80\x80\x80", 5, 4), 4);
	assert_int_equal(sb_utf8_cut("a\xe2\x28\xa1", 4, 2), 2); /* E2 then '(': no character */
	assert_int_equal(sb_utf8_cut("", 0, 5), 0);
}

static void test_utf8_cut_random(void **st)
{
	uint64_t seed = 99;
	char in[64];

	(void)st;
	for (int round = 0; round < 20000; round++) {
		size_t len = 1 + tu_rand(&seed) % sizeof in;
		for (size_t i = 0; i < len; i++)
			in[i] = (char)(0x80 + tu_rand(&seed) % 0x80);
		/* valid UTF-8 from random code points, to cut anywhere */
		size_t vlen = 0;
		char v[256];
		for (size_t i = 0; i < len && vlen + 4 < sizeof v; i++) {
			unsigned cp = (unsigned)(tu_rand(&seed) % 0x110000);
			if (cp >= 0xd800 && cp <= 0xdfff)
				cp = 'x';
			if (cp < 0x80) {
				v[vlen++] = (char)cp;
			} else if (cp < 0x800) {
				v[vlen++] = (char)(0xc0 | cp >> 6);
				v[vlen++] = (char)(0x80 | (cp & 0x3f));
			} else if (cp < 0x10000) {
				v[vlen++] = (char)(0xe0 | cp >> 12);
				v[vlen++] = (char)(0x80 | (cp >> 6 & 0x3f));
				v[vlen++] = (char)(0x80 | (cp & 0x3f));
			} else {
				v[vlen++] = (char)(0xf0 | cp >> 18);
				v[vlen++] = (char)(0x80 | (cp >> 12 & 0x3f));
				v[vlen++] = (char)(0x80 | (cp >> 6 & 0x3f));
				v[vlen++] = (char)(0x80 | (cp & 0x3f));
			}
		}
		size_t max = tu_rand(&seed) % (vlen + 2);
		size_t cut = sb_utf8_cut(v, vlen, max);
		assert_true(cut <= max && cut <= vlen);
		assert_true(max > vlen ? cut == vlen : max - cut <= 3);
		assert_true(tu_utf8_valid(v, cut));     /* a whole prefix */
		assert_true(tu_utf8_valid(v + cut, vlen - cut));
		/* any bytes: never more than max, never more than 3 left out */
		max = tu_rand(&seed) % (len + 1);
		cut = sb_utf8_cut(in, len, max);
		assert_true(cut <= max && max - cut <= 3);
	}
}

static void test_spec_name(void **st)
{
	msgpack_sbuffer sb;
	msgpack_zone zone;
	msgpack_object spec;
	msgpack_packer pk;
	char buf[16];
	int rc;

	(void)st;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 6);
	sb_pack_kstr(&pk, "name", "r\xc3\xa9sum\xc3\xa9");
	sb_pack_kstr(&pk, "group", "team\nforged row");
	sb_pack_kstr(&pk, "bidi", "abc\xe2\x80\xae" "fdp.exe");
	sb_pack_kstrn(&pk, "bad", "ab\xff", 3);
	sb_pack_kstr(&pk, "long", "a name of more than sixteen bytes");
	sb_pack_ku64(&pk, "num", 5);
	assert_true(msgpack_zone_init(&zone, 1024));
	assert_int_equal(sb_payload_parse(sb.data, sb.size, &zone, &spec), 0);

	assert_int_equal(sb_spec_name(&spec, "name", buf, sizeof buf), SB_OK);
	assert_string_equal(buf, "r\xc3\xa9sum\xc3\xa9");
	strcpy(buf, "kept");
	rc = sb_spec_name(&spec, "group", buf, sizeof buf);
	assert_int_equal(rc, SB_ERR_INVAL);
	tu_errmsg_has(rc, "'group'", "control character U+000A at byte 4");
	assert_string_equal(buf, "kept"); /* an error leaves buf alone */
	rc = sb_spec_name(&spec, "bidi", buf, sizeof buf);
	assert_int_equal(rc, SB_ERR_INVAL);
	tu_errmsg_has(rc, "'bidi'", "bidirectional control U+202E at byte 3");
	rc = sb_spec_name(&spec, "bad", buf, sizeof buf);
	assert_int_equal(rc, SB_ERR_INVAL);
	tu_errmsg_has(rc, "'bad'", "not valid UTF-8");
	rc = sb_spec_name(&spec, "long", buf, sizeof buf);
	assert_int_equal(rc, SB_ERR_INVAL);
	tu_errmsg_has(rc, "'long'", "at most 15 bytes");
	rc = sb_spec_name(&spec, "num", buf, sizeof buf);
	assert_int_equal(rc, SB_ERR_INVAL);
	tu_errmsg_has(rc, "'num'", "must be a string");
	strcpy(buf, "default");
	assert_int_equal(sb_spec_name(&spec, "absent", buf, sizeof buf), SB_OK);
	assert_string_equal(buf, "default");
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&sb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ascii_and_backslash),
		cmocka_unit_test(test_c0_and_del),
		cmocka_unit_test(test_c1),
		cmocka_unit_test(test_bidi),
		cmocka_unit_test(test_invalid_utf8),
		cmocka_unit_test(test_valid_boundaries),
		cmocka_unit_test(test_cut_never_splits),
		cmocka_unit_test(test_random_bytes),
		cmocka_unit_test(test_long_input),
		cmocka_unit_test(test_check),
		cmocka_unit_test(test_utf8_cut),
		cmocka_unit_test(test_utf8_cut_random),
		cmocka_unit_test(test_spec_name),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
