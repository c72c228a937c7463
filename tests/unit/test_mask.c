/* test_mask.c - masking secret values (engine/runs/mask.c): a value split
 * over two chunks at every position, overlapping values (the longest at the
 * leftmost start wins), a stream's held-back end flushed at its end, values
 * too short to mask, UTF-8 never cut by the hold-back, random chunkings of
 * random text with planted values against the test's own whole-text
 * masking, and sb_mask_object over nested maps, arrays, keys, bin and ext.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sodium.h>

#include "engine/runs/mask.h"
#include "tests/unit/testutil.h"

/* The test's own masking of a whole text: from left to right, at each
 * position the longest value that starts there, else the byte itself. */
struct ref {
	const char *v[SB_MASK_VALUES];
	size_t n[SB_MASK_VALUES];
	const char *label[SB_MASK_VALUES];
	size_t count;
};

static size_t ref_mask(const struct ref *r, const char *in, size_t n, char *out)
{
	size_t o = 0, masked = 0;

	for (size_t i = 0; i < n;) {
		size_t best = SIZE_MAX;
		for (size_t k = 0; k < r->count; k++)
			if (r->n[k] >= SB_MASK_MIN && r->n[k] <= n - i &&
			    !memcmp(in + i, r->v[k], r->n[k]) &&
			    (best == SIZE_MAX || r->n[k] > r->n[best]))
				best = k;
		if (best == SIZE_MAX) {
			out[o++] = in[i++];
			continue;
		}
		o += (size_t)sprintf(out + o, "[masked %s]", r->label[best]);
		i += r->n[best];
		masked++;
	}
	out[o] = 0;
	return masked;
}

/* A masker of r's values. */
static sb_mask *mask_of(const struct ref *r)
{
	sb_mask *m;

	assert_int_equal(sb_mask_new(&m), SB_OK);
	for (size_t k = 0; k < r->count; k++)
		assert_int_equal(sb_mask_add(m, r->v[k], r->n[k], r->label[k]), SB_OK);
	return m;
}

/* Streams in as the chunks cut at cuts[0..ncuts) (ascending), then the
 * end; checks the result against ref_mask, and after each chunk that the
 * output so far is valid UTF-8 when utf8 is set (the input is). */
static void stream_check(const sb_mask *m, const struct ref *r, const char *in, size_t n,
			 const size_t *cuts, size_t ncuts, int utf8)
{
	struct sb_mask_stream *st = calloc(1, sizeof *st);
	msgpack_sbuffer out;
	char *want = malloc(n * 40 + 1);
	size_t from = 0, count = 0, want_count;

	assert_non_null(st);
	assert_non_null(want);
	msgpack_sbuffer_init(&out);
	for (size_t c = 0; c <= ncuts; c++) {
		size_t to = c < ncuts ? cuts[c] : n;
		count += sb_mask_stream(m, st, in + from, to - from, 0, &out);
		if (utf8 && out.size && !tu_utf8_valid(out.data, out.size))
			fail_msg("output after a chunk ending at %zu is not valid UTF-8",
				 to);
		from = to;
	}
	count += sb_mask_stream(m, st, "", 0, 1, &out);
	assert_int_equal(st->nhold, 0);
	want_count = ref_mask(r, in, n, want);
	if (out.size != strlen(want) || memcmp(out.data, want, out.size))
		fail_msg("streamed '%.*s', want '%s'", (int)out.size,
			 out.data ? out.data : "", want);
	assert_int_equal(count, want_count);
	msgpack_sbuffer_destroy(&out);
	free(want);
	free(st);
}

/* Streams in with one cut at every position, and with two at every pair. */
static void every_split(const struct ref *r, const char *in)
{
	sb_mask *m = mask_of(r);
	size_t n = strlen(in), cuts[2];

	for (cuts[0] = 0; cuts[0] <= n; cuts[0]++) {
		stream_check(m, r, in, n, cuts, 1, 0);
		for (cuts[1] = cuts[0]; cuts[1] <= n; cuts[1]++)
			stream_check(m, r, in, n, cuts, 2, 0);
	}
	sb_mask_free(m);
}

static void test_every_split(void **state)
{
	struct ref r = {{"s3cr3t-value-42"}, {15}, {"KEY"}, 1};

	every_split(&r, "before s3cr3t-value-42 after");
	every_split(&r, "s3cr3t-value-42");
	every_split(
	    &r,
	    "s3cr3t-value-4s3cr3t-value-42s3cr3t-value-42x"); /* a false start first */
	every_split(&r, "s3cr3t-value-4"); /* a prefix at the end, never completed */
}

static void test_overlapping(void **state)
{
	struct ref r = {{"abcd", "abcdefgh", "cdefXY", "ghij"},
			{4, 8, 6, 4},
			{"A", "B", "C", "D"},
			4};

	every_split(&r, "xxabcdefghyy"); /* B, the longer, wins over A */
	every_split(&r, "xxabcdefzz");	 /* B never completes: A */
	every_split(&r, "abcdefXY");	 /* leftmost first: A, then efXY is left */
	every_split(&r, "abcdefghij");	 /* B consumes the g of D */
	every_split(&r, "ababcdabcdefgh");
}

/* A value at the end is held until the end; a complete one is not. */
static void test_hold_at_end(void **state)
{
	struct ref r = {{"abcdefgh"}, {8}, {"K"}, 1};
	sb_mask *m = mask_of(&r);
	struct sb_mask_stream st = {0};
	msgpack_sbuffer out;

	msgpack_sbuffer_init(&out);
	assert_int_equal(sb_mask_stream(m, &st, "data abcdef", 11, 0, &out), 0);
	assert_int_equal(out.size, 5);
	assert_memory_equal(out.data, "data ", 5);
	assert_int_equal(st.nhold, 6);
	assert_int_equal(sb_mask_stream(m, &st, "", 0, 1, &out),
			 0); /* the end: shown as it is */
	assert_int_equal(out.size, 11);
	assert_memory_equal(out.data, "data abcdef", 11);
	assert_int_equal(st.nhold, 0);

	out.size = 0;
	assert_int_equal(sb_mask_stream(m, &st, "data abcdefgh", 13, 0, &out), 1);
	assert_int_equal(st.nhold, 0); /* complete: nothing is held */
	assert_int_equal(out.size, strlen("data [masked K]"));
	assert_memory_equal(out.data, "data [masked K]", out.size);

	/* a held prefix that the next chunk contradicts comes out as it was */
	out.size = 0;
	sb_mask_stream(m, &st, "abc", 3, 0, &out);
	assert_int_equal(out.size, 0);
	sb_mask_stream(m, &st, "Xabc", 4, 0, &out);
	assert_int_equal(out.size, 4);
	assert_memory_equal(out.data, "abcX", 4);
	assert_int_equal(st.nhold, 3);
	msgpack_sbuffer_destroy(&out);
	sb_mask_free(m);
}

static void test_short_and_limits(void **state)
{
	sb_mask *m;
	msgpack_sbuffer out;
	char big[SB_MASK_HOLD_MAX + 1];

	assert_int_equal(sb_mask_new(&m), SB_OK);
	assert_int_equal(sb_mask_add(m, "abc", 3, "SHORT"), SB_OK); /* ignored */
	assert_true(sb_mask_empty(m));
	msgpack_sbuffer_init(&out);
	assert_int_equal(sb_mask_apply(m, "abc abc", 7, &out), 0);
	assert_int_equal(out.size, 7);
	assert_memory_equal(out.data, "abc abc", 7);
	assert_int_equal(sb_mask_add(m, "abcd", SB_MASK_MIN, "FOUR"), SB_OK);
	assert_false(sb_mask_empty(m));
	out.size = 0;
	assert_int_equal(sb_mask_apply(m, "abc abcd", 8, &out), 1);
	assert_int_equal(out.size, strlen("abc [masked FOUR]"));
	assert_memory_equal(out.data, "abc [masked FOUR]", out.size);

	memset(big, 'z', sizeof big);
	assert_int_equal(sb_mask_add(m, big, sizeof big, "BIG"), SB_ERR_TOOBIG);
	for (int i = 1; i < SB_MASK_VALUES; i++) /* "abcd" is the first */
		assert_int_equal(sb_mask_add(m, "wxyz", 4, "W"), SB_OK);
	assert_int_equal(sb_mask_add(m, "wxyz", 4, "W"), SB_ERR_FULL);
	msgpack_sbuffer_destroy(&out);
	sb_mask_free(m);
	sb_mask_free(NULL);
}

/* The longest value there is, split in the middle and near its ends. */
static void test_longest_value(void **state)
{
	static char v[SB_MASK_HOLD_MAX], text[SB_MASK_HOLD_MAX + 8];
	struct ref r = {{v}, {sizeof v}, {"LONG"}, 1};
	sb_mask *m;
	size_t cuts[] = {
	    1, 4, 2048, SB_MASK_HOLD_MAX - 1, SB_MASK_HOLD_MAX, SB_MASK_HOLD_MAX + 3};
	uint64_t seed = 7;

	for (size_t i = 0; i < sizeof v; i++)
		v[i] = (char)('a' + tu_rand(&seed) % 26);
	m = mask_of(&r);
	memcpy(text, "<<<", 3);
	memcpy(text + 3, v, sizeof v);
	memcpy(text + 3 + sizeof v, ">>>", 3);
	for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++)
		stream_check(m, &r, text, sizeof v + 6, &cuts[c], 1, 0);
	sb_mask_free(m);
}

/* The hold-back never ends the output inside a character, also for a
 * value that begins in the middle of one. */
static void test_utf8_hold(void **state)
{
	/* "été-clé", and a value starting with é's continuation byte */
	static const struct ref refs[] = {
	    {{"\xc3\xa9t\xc3\xa9-cl\xc3\xa9"}, {11}, {"E"}, 1},
	    {{"\xa9t\xc3\xa9xyz"}, {7}, {"MID"}, 1},
	};
	static const struct {
		int ref, utf8; /* utf8: the masked whole text is valid UTF-8 */
		const char *text;
	} cases[] = {
	    {0, 1, "\xe2\x82\xac \xc3\xa9t\xc3\xa9-cl\xc3\xa9 \xe2\x82\xac"},
	    {0, 1, "\xc3\xa9t\xc3\xa9-cl\xc3\xa8"},
	    {1, 1, "caf\xc3\xa9t\xc3\xa9 end"}, /* MID begins inside é, never completes */
	    {1, 0,
	     "caf\xc3\xa9t\xc3\xa9xyz end"}, /* ... and completes: é is cut by the mask */
	};

	for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
		const struct ref *r = &refs[cases[t].ref];
		sb_mask *m = mask_of(r);
		size_t n = strlen(cases[t].text), cut;
		for (cut = 0; cut <= n; cut++) {
			if (cut < n && ((unsigned char)cases[t].text[cut] & 0xc0) == 0x80)
				continue; /* chunks end on characters, as the agent sends
					     them */
			stream_check(m, r, cases[t].text, n, &cut, 1, cases[t].utf8);
		}
		sb_mask_free(m);
	}
}

/* Random texts over an alphabet that makes prefixes and overlaps common,
 * with planted values, cut at random character boundaries. */
static void test_random(void **state)
{
	static const char *const alpha[] = {
	    "a", "b", "c", "-", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x99\x82"};
	static char vals[8][512], text[8192];
	static const char *const labels[] = {"V0", "V1", "V2", "V3",
					     "V4", "V5", "V6", "V7"};
	uint64_t seed = 0x5eed;
	size_t cuts[512];

	for (int round = 0; round < 400; round++) {
		struct ref r = {.count = 1 + tu_rand(&seed) % 8};
		sb_mask *m;
		size_t n = 0, ncuts = 0;

		for (size_t k = 0; k < r.count; k++) {
			size_t len = 0, want = 1 + tu_rand(&seed) % 12;
			if (k &&
			    tu_rand(&seed) % 3 == 0) { /* a value that extends another */
				len = r.n[k - 1];
				memcpy(vals[k], vals[k - 1], len);
			}
			for (size_t j = 0; j < want; j++) {
				const char *ch = alpha[tu_rand(&seed) % 7];
				memcpy(vals[k] + len, ch, strlen(ch));
				len += strlen(ch);
			}
			r.v[k] = vals[k];
			r.n[k] = len; /* some under SB_MASK_MIN: not masked */
			r.label[k] = labels[k];
		}
		m = mask_of(&r);
		while (n < 4000) {
			if (tu_rand(&seed) % 10 == 0) {
				size_t k = tu_rand(&seed) % r.count;
				memcpy(text + n, r.v[k], r.n[k]);
				n += r.n[k];
			} else {
				const char *ch = alpha[tu_rand(&seed) % 7];
				memcpy(text + n, ch, strlen(ch));
				n += strlen(ch);
			}
		}
		for (size_t at = 0; ncuts < sizeof cuts / sizeof cuts[0];) {
			at += tu_rand(&seed) % 48;
			while (at < n && ((unsigned char)text[at] & 0xc0) == 0x80)
				at++;
			if (at >= n)
				break;
			cuts[ncuts++] = at;
		}
		stream_check(m, &r, text, n, cuts, ncuts, 1);
		sb_mask_free(m);
	}
}

/* Packs {"k-SECRET": ["x SECRET y", {"n": SECRET, "i": 5}], "bin": bin,
 * "ext": ext, SECRET: true, 7: nil} with s for the value. */
static void pack_doc(msgpack_sbuffer *sb, const char *s)
{
	msgpack_packer pk;
	char key[64], text[64];

	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	snprintf(key, sizeof key, "k-%s", s);
	snprintf(text, sizeof text, "x %s y", s);
	msgpack_pack_map(&pk, 5);
	msgpack_pack_str_with_body(&pk, key, strlen(key));
	msgpack_pack_array(&pk, 2);
	msgpack_pack_str_with_body(&pk, text, strlen(text));
	msgpack_pack_map(&pk, 2);
	msgpack_pack_str_with_body(&pk, "n", 1);
	msgpack_pack_str_with_body(&pk, s, strlen(s));
	msgpack_pack_str_with_body(&pk, "i", 1);
	msgpack_pack_int(&pk, 5);
	msgpack_pack_str_with_body(&pk, "bin", 3);
	msgpack_pack_bin_with_body(&pk, s, strlen(s));
	msgpack_pack_str_with_body(&pk, "ext", 3);
	msgpack_pack_ext_with_body(&pk, s, strlen(s), 9);
	msgpack_pack_str_with_body(&pk, s, strlen(s));
	msgpack_pack_true(&pk);
	msgpack_pack_int(&pk, 7);
	msgpack_pack_nil(&pk);
}

static void test_object(void **state)
{
	struct ref r = {{"hunter2-secret"}, {14}, {"PW"}, 1};
	sb_mask *m = mask_of(&r);
	msgpack_sbuffer doc, want, got;
	msgpack_packer pk;
	msgpack_zone zone;
	msgpack_object o;

	pack_doc(&doc, "hunter2-secret");
	pack_doc(&want, "[masked PW]");
	assert_true(msgpack_zone_init(&zone, 1024));
	assert_int_equal(sb_payload_parse(doc.data, doc.size, &zone, &o), SB_OK);
	msgpack_sbuffer_init(&got);
	msgpack_packer_init(&pk, &got, msgpack_sbuffer_write);
	assert_int_equal(sb_mask_object(m, &o, &pk), 6);
	assert_int_equal(got.size, want.size);
	assert_memory_equal(got.data, want.data, want.size);

	/* without a value, the object comes out byte for byte */
	sb_mask_free(m);
	assert_int_equal(sb_mask_new(&m), SB_OK);
	got.size = 0;
	assert_int_equal(sb_mask_object(m, &o, &pk), 0);
	assert_int_equal(got.size, doc.size);
	assert_memory_equal(got.data, doc.data, doc.size);
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&doc);
	msgpack_sbuffer_destroy(&want);
	msgpack_sbuffer_destroy(&got);
	sb_mask_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_split),	  cmocka_unit_test(test_overlapping),
	    cmocka_unit_test(test_hold_at_end),	  cmocka_unit_test(test_short_and_limits),
	    cmocka_unit_test(test_longest_value), cmocka_unit_test(test_utf8_hold),
	    cmocka_unit_test(test_random),	  cmocka_unit_test(test_object),
	};
	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
