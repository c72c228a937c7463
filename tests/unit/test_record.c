/* test_record.c - the stored record codec, and the event helpers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "engine/log/event.h"
#include "engine/log/record.h"
#include "tests/unit/testutil.h"

/* Encodes ev into a fresh sb (the caller destroys it). */
static void encode(const struct sb_event *ev, msgpack_sbuffer *sb)
{
	msgpack_sbuffer_init(sb);
	assert_int_equal(sb_record_encode(ev, sb), SB_OK);
}

static void assert_event_equal(const struct sb_event *a, const struct sb_event *b)
{
	assert_true(a->offset == b->offset);
	assert_true(a->seq == b->seq);
	assert_true(a->ts_ns == b->ts_ns);
	assert_int_equal(a->source, b->source);
	assert_string_equal(a->type, b->type);
	assert_string_equal(a->run, b->run);
	assert_int_equal(a->payload_len, b->payload_len);
	assert_memory_equal(a->payload, b->payload, a->payload_len);
}

/* Every schema type from every source, with header numbers of every width,
 * decodes to exactly what was encoded; the payload points into the record. */
static void test_roundtrip_all_types(void **state)
{
	static const uint64_t nums[] = {0, 1, 127, 128, 65535, 65536, 1ull << 32, UINT64_MAX};
	const struct sb_event_schema *s = NULL;
	size_t n, k = 0;

	s = sb_schema_all(&n);
	assert_true(n >= 20);
	for (size_t i = 0; i < n; i++) {
		for (unsigned src = 0; src <= SB_SRC_LAST; src++, k++) {
			struct sb_event ev, out;
			msgpack_sbuffer pl, rec;
			tu_schema_payload(&pl, &s[i], NULL, (unsigned)k);
			assert_int_equal(sb_event_init(&ev, s[i].type, k % 2 ? "0123456789ab" : "r",
						       (enum sb_source)src, pl.data, pl.size),
					 SB_OK);
			ev.offset = nums[k % 8];
			ev.seq = nums[(k + 3) % 8];
			ev.ts_ns = nums[(k + 5) % 8];
			encode(&ev, &rec);
			memset(&out, 0x5a, sizeof out);
			assert_int_equal(sb_record_decode(rec.data, rec.size, &out), SB_OK);
			assert_event_equal(&ev, &out);
			assert_true(out.payload > (const uint8_t *)rec.data);
			assert_true(out.payload + out.payload_len ==
				    (const uint8_t *)rec.data + rec.size - 8);
			msgpack_sbuffer_destroy(&rec);
			msgpack_sbuffer_destroy(&pl);
		}
	}
}

/* Longest type and run ids survive; payloads of every str width and of
 * several MiB survive; a record appended after other bytes is sealed over
 * its own bytes only. */
static void test_roundtrip_big(void **state)
{
	static const size_t sizes[] = {0, 31, 32, 255, 256, 65535, 65536, 256 << 10, 3 << 20};
	char type[SB_TYPE_MAX], run[SB_RUN_MAX];
	struct sb_event ev, out;

	memset(type, 't', sizeof type - 1);
	type[sizeof type - 1] = 0;
	memset(run, 'r', sizeof run - 1);
	run[sizeof run - 1] = 0;
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		msgpack_sbuffer pl, rec;
		msgpack_packer pk;
		char *body = malloc(sizes[i] + 1);
		size_t start;

		assert_non_null(body);
		for (size_t j = 0; j < sizes[i]; j++)
			body[j] = (char)('a' + j % 26);
		msgpack_sbuffer_init(&pl);
		msgpack_packer_init(&pk, &pl, msgpack_sbuffer_write);
		msgpack_pack_map(&pk, 2);
		sb_pack_kstrn(&pk, "data", body, sizes[i]);
		sb_pack_kstr(&pk, "stream", "stdout");
		assert_int_equal(sb_event_init(&ev, type, run, SB_SRC_GUEST, pl.data, pl.size), 0);
		ev.offset = 1000 + i;
		ev.seq = i + 1;
		ev.ts_ns = 1700000000000000000ull;

		msgpack_sbuffer_init(&rec);
		msgpack_sbuffer_write(&rec, "prefix", 6);
		start = rec.size;
		assert_int_equal(sb_record_encode(&ev, &rec), SB_OK);
		assert_int_equal(sb_record_decode(rec.data + start, rec.size - start, &out), SB_OK);
		assert_event_equal(&ev, &out);
		assert_true(rec.size - start > sizes[i] + 8);

		msgpack_sbuffer_destroy(&rec);
		msgpack_sbuffer_destroy(&pl);
		free(body);
	}
}

/* The record as msgpack-c's packer writes it (the format as it always
 * was): the hand-written encoder must give the same bytes. */
static void packer_record(const struct sb_event *ev, msgpack_sbuffer *sb)
{
	msgpack_packer pk;
	uint64_t h;
	uint8_t sum[8];

	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 7);
	msgpack_pack_uint8(&pk, 1);
	msgpack_pack_uint64(&pk, ev->offset);
	msgpack_pack_str_with_body(&pk, ev->type, strlen(ev->type));
	msgpack_pack_str_with_body(&pk, ev->run, strlen(ev->run));
	msgpack_pack_uint64(&pk, ev->seq);
	msgpack_pack_uint64(&pk, ev->ts_ns);
	msgpack_pack_uint8(&pk, (uint8_t)ev->source);
	msgpack_sbuffer_write(sb, (const char *)ev->payload, ev->payload_len);
	h = XXH3_64bits(sb->data, sb->size);
	for (int i = 7; i >= 0; i--, h >>= 8)
		sum[i] = (uint8_t)h;
	msgpack_sbuffer_write(sb, (const char *)sum, 8);
}

/* Header numbers of every width and type and run ids of every length give
 * the bytes msgpack-c gives, through sb_record_encode and through
 * sb_record_size and sb_record_write. */
static void test_same_bytes_as_packer(void **state)
{
	static const uint64_t nums[] = {0,          1,           127,        128,         255,
					256,        65535,       65536,      UINT32_MAX, 1ull << 32,
					UINT64_MAX};
	char type[SB_TYPE_MAX], run[SB_RUN_MAX];
	size_t k = 0;

	for (size_t tl = 1; tl < SB_TYPE_MAX; tl += 3) {
		for (size_t rl = 1; rl < SB_RUN_MAX; rl += 2, k++) {
			struct sb_event ev;
			msgpack_sbuffer want, got;
			uint8_t *buf;
			size_t len;

			memset(type, 'a' + (int)(k % 26), tl);
			type[tl] = 0;
			memset(run, '0' + (int)(k % 10), rl);
			run[rl] = 0;
			assert_int_equal(sb_event_init(&ev, type, run, (enum sb_source)(k % 3),
						       "\x81\xa1k\x05", 4),
					 SB_OK);
			ev.offset = nums[k % 11];
			ev.seq = nums[(k + 4) % 11];
			ev.ts_ns = nums[(k + 7) % 11];
			packer_record(&ev, &want);
			encode(&ev, &got);
			assert_int_equal(got.size, want.size);
			assert_memory_equal(got.data, want.data, want.size);
			len = sb_record_size(&ev);
			assert_int_equal(len, want.size);
			buf = malloc(len);
			assert_non_null(buf);
			sb_record_write(&ev, buf);
			assert_memory_equal(buf, want.data, len);
			free(buf);
			msgpack_sbuffer_destroy(&want);
			msgpack_sbuffer_destroy(&got);
		}
	}
}

/* The reader takes any msgpack encoding of the header's values, as
 * msgpack-c did: array16, integers wider than needed or signed but not
 * negative, str8 for a short string; a negative signed one is refused. */
#define H(s, ok) {s, sizeof s - 1, ok}
static void test_other_encodings(void **state)
{
	static const struct {
		const char *b;
		size_t n;
		int ok;
	} hdrs[] = {
		H("\x97\x01\x0c\xa3" "r.s\xa1r\x03\x63\x02", 1),                          /* canonical */
		H("\xdc\x00\x07\x01\x0c\xa3" "r.s\xa1r\x03\x63\x02", 1),                  /* array16 */
		H("\xdd\x00\x00\x00\x07\x01\x0c\xa3" "r.s\xa1r\x03\x63\x02", 1),          /* array32 */
		H("\x97\xcc\x01\xcf\0\0\0\0\0\0\0\x0c\xa3" "r.s\xa1r\x03\x63\x02", 1),    /* wide */
		H("\x97\xd0\x01\xd3\0\0\0\0\0\0\0\x0c\xa3" "r.s\xa1r\xd1\0\x03\x63\x02", 1), /* signed */
		H("\x97\x01\x0c\xd9\x03r.s\xda\x00\x01r\x03\x63\x02", 1),                 /* str8/16 */
		H("\x97\x01\x0c\xdb\0\0\0\x03r.s\xa1r\x03\x63\x02", 1),                   /* str32 */
		H("\x97\x01\x0c\xa3" "r.s\xa1r\xd0\xfd\x63\x02", 0),                      /* seq -3 */
		H("\x97\x01\xd3\xff\xff\xff\xff\xff\xff\xff\xf4\xa3" "r.s\xa1r\x03\x63\x02", 0),
		H("\x96\x01\x0c\xa3" "r.s\xa1r\x03\x63", 0),                              /* 6 fields */
		H("\xdc\x00\x08\x01\x0c\xa3" "r.s\xa1r\x03\x63\x02\xc0", 0),              /* 8 */
	};
	uint8_t buf[64];
	struct sb_event ev;

	for (size_t i = 0; i < sizeof hdrs / sizeof hdrs[0]; i++) {
		size_t n = hdrs[i].n;
		memcpy(buf, hdrs[i].b, n);
		memcpy(buf + n, "\x81\xa1k\x05", 4);
		tu_reseal(buf, n + 4 + 8);
		memset(&ev, 0, sizeof ev);
		if (!hdrs[i].ok) {
			assert_int_equal(sb_record_decode(buf, n + 12, &ev), SB_ERR_CORRUPT);
			continue;
		}
		if (sb_record_decode(buf, n + 12, &ev) != SB_OK)
			fail_msg("header %zu refused: %s", i, sb_errmsg(SB_ERR_CORRUPT));
		assert_true(ev.offset == 12 && ev.seq == 3 && ev.ts_ns == 99);
		assert_string_equal(ev.type, "r.s");
		assert_string_equal(ev.run, "r");
		assert_int_equal(ev.source, SB_SRC_GATEWAY);
		assert_true(ev.payload == buf + n && ev.payload_len == 4);
	}
}
#undef H

/* An event without a payload cannot be encoded. */
static void test_encode_needs_payload(void **state)
{
	struct sb_event ev;
	msgpack_sbuffer sb;

	assert_int_equal(sb_event_init(&ev, "run.started", "r1", SB_SRC_HOST, NULL, 0), 0);
	msgpack_sbuffer_init(&sb);
	assert_int_equal(sb_record_encode(&ev, &sb), SB_ERR_INVAL);
	ev.payload = (const uint8_t *)"\x80";
	assert_int_equal(sb_record_encode(&ev, &sb), SB_ERR_INVAL); /* length 0 */
	msgpack_sbuffer_destroy(&sb);
}

/* Builds a record for the flip and truncation tests. */
static void sample_record(msgpack_sbuffer *rec, msgpack_sbuffer *pl)
{
	struct sb_event ev;

	tu_json(pl, "{'tool':'bash','args':'ls -la /work','exit':0,'duration_ms':12}");
	assert_int_equal(sb_event_init(&ev, "agent.tool.completed", "a1b2c3d4e5f6", SB_SRC_GUEST,
				       pl->data, pl->size),
			 0);
	ev.offset = 77;
	ev.seq = 5;
	ev.ts_ns = 1234567890123456789ull;
	encode(&ev, rec);
}

/* Each single-bit flip and each whole-byte flip anywhere in a record, the
 * checksum included, is detected. */
static void test_every_flip_detected(void **state)
{
	msgpack_sbuffer rec, pl;
	struct sb_event ev;
	uint8_t *buf;

	sample_record(&rec, &pl);
	buf = malloc(rec.size);
	assert_non_null(buf);
	for (size_t i = 0; i < rec.size; i++) {
		for (int bit = 0; bit <= 8; bit++) {
			memcpy(buf, rec.data, rec.size);
			buf[i] ^= bit == 8 ? 0xff : (uint8_t)(1u << bit);
			sb_clearerr();
			if (sb_record_decode(buf, rec.size, &ev) != SB_ERR_CORRUPT)
				fail_msg("flip of bit %d at byte %zu not detected", bit, i);
			tu_errmsg_has(SB_ERR_CORRUPT, "checksum");
		}
	}
	memcpy(buf, rec.data, rec.size);
	assert_int_equal(sb_record_decode(buf, rec.size, &ev), SB_OK);
	free(buf);
	msgpack_sbuffer_destroy(&rec);
	msgpack_sbuffer_destroy(&pl);
}

/* Every truncation, and the record with bytes added, fails. Each cut is
 * copied to a buffer of exactly its size so an overread shows under ASan. */
static void test_truncation(void **state)
{
	msgpack_sbuffer rec, pl;
	struct sb_event ev;

	sample_record(&rec, &pl);
	for (size_t len = 0; len < rec.size; len++) {
		uint8_t *cut = malloc(len ? len : 1);
		assert_non_null(cut);
		memcpy(cut, rec.data, len);
		assert_int_equal(sb_record_decode(cut, len, &ev), SB_ERR_CORRUPT);
		free(cut);
	}
	msgpack_sbuffer_write(&rec, "\x00", 1);
	assert_int_equal(sb_record_decode(rec.data, rec.size, &ev), SB_ERR_CORRUPT);
	msgpack_sbuffer_destroy(&rec);
	msgpack_sbuffer_destroy(&pl);
}

/* Empty input and random garbage, with and without a matching checksum. */
static void test_garbage(void **state)
{
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	struct sb_event ev;
	uint8_t buf[512] = {0};

	assert_int_equal(sb_record_decode(buf, 0, &ev), SB_ERR_CORRUPT);
	tu_errmsg_has(SB_ERR_CORRUPT, "truncated");
	assert_int_equal(sb_record_decode("", 0, &ev), SB_ERR_CORRUPT);
	for (int round = 0; round < 4000; round++) {
		size_t len = 9 + tu_rand(&seed) % (sizeof buf - 9);
		for (size_t i = 0; i < len; i++)
			buf[i] = (uint8_t)tu_rand(&seed);
		/* Half of them start like a record header to get further. */
		if (round % 2)
			memcpy(buf, "\x97\x01", 2);
		assert_int_equal(sb_record_decode(buf, len, &ev), SB_ERR_CORRUPT);
		tu_reseal(buf, len);
		assert_int_equal(sb_record_decode(buf, len, &ev), SB_ERR_CORRUPT);
	}
}

/* Header fields a test record is built from; each test damages one. */
enum hdr_damage {
	H_NONE,
	H_VERSION_2,
	H_VERSION_0,
	H_VERSION_STR,
	H_ARRAY_6,
	H_ARRAY_8,
	H_MAP,
	H_OFFSET_NEG,
	H_OFFSET_STR,
	H_TYPE_INT,
	H_TYPE_EMPTY,
	H_TYPE_LONG,
	H_TYPE_BIN,
	H_RUN_EMPTY,
	H_RUN_LONG,
	H_RUN_NUL,
	H_SEQ_NEG,
	H_TS_FLOAT,
	H_SOURCE_PAST,
	H_SOURCE_NEG,
	H_NO_PAYLOAD,
	H_PAYLOAD_ARRAY,
	H_PAYLOAD_STR,
	H_COUNT,
};

static void pack_hdr_str(msgpack_packer *pk, const char *s, int bin)
{
	if (bin) {
		msgpack_pack_bin(pk, strlen(s));
		msgpack_pack_bin_body(pk, s, strlen(s));
	} else {
		sb_pack_str(pk, s);
	}
}

/* Builds a record by hand with one damage and a valid checksum. */
static void damaged_record(msgpack_sbuffer *sb, enum hdr_damage d)
{
	msgpack_packer pk;
	char longstr[64];

	memset(longstr, 'x', sizeof longstr - 1);
	longstr[sizeof longstr - 1] = 0;
	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	if (d == H_MAP) {
		msgpack_pack_map(&pk, 1);
		sb_pack_ku64(&pk, "version", 1);
	} else {
		msgpack_pack_array(&pk, d == H_ARRAY_6 ? 6 : d == H_ARRAY_8 ? 8 : 7);
		if (d == H_VERSION_STR)
			sb_pack_str(&pk, "1");
		else
			msgpack_pack_uint8(&pk, d == H_VERSION_2 ? 2 : d == H_VERSION_0 ? 0 : 1);
		if (d == H_OFFSET_NEG)
			msgpack_pack_int64(&pk, -1);
		else if (d == H_OFFSET_STR)
			sb_pack_str(&pk, "12");
		else
			msgpack_pack_uint64(&pk, 12);
		if (d == H_TYPE_INT)
			msgpack_pack_uint8(&pk, 3);
		else
			pack_hdr_str(&pk, d == H_TYPE_EMPTY ? "" : d == H_TYPE_LONG ? longstr : "run.started",
				     d == H_TYPE_BIN);
		if (d == H_RUN_NUL)
			msgpack_pack_str_with_body(&pk, "\0bc", 3);
		else
			pack_hdr_str(&pk, d == H_RUN_EMPTY ? "" : d == H_RUN_LONG ? longstr + 39 : "abc", 0);
		if (d == H_SEQ_NEG)
			msgpack_pack_int64(&pk, -5);
		else
			msgpack_pack_uint64(&pk, 3);
		if (d == H_TS_FLOAT)
			msgpack_pack_double(&pk, 1.5);
		else
			msgpack_pack_uint64(&pk, 99);
		if (d == H_SOURCE_NEG)
			msgpack_pack_int8(&pk, -1);
		else
			msgpack_pack_uint8(&pk, d == H_SOURCE_PAST ? SB_SRC_LAST + 1 : 2);
		if (d == H_ARRAY_8)
			msgpack_pack_nil(&pk);
	}
	if (d == H_PAYLOAD_ARRAY) {
		msgpack_pack_array(&pk, 1);
		msgpack_pack_nil(&pk);
	} else if (d == H_PAYLOAD_STR) {
		sb_pack_str(&pk, "accel");
	} else if (d != H_NO_PAYLOAD) {
		msgpack_pack_map(&pk, 1);
		sb_pack_kstr(&pk, "accel", "tcg");
	}
	tu_seal(sb);
}

/* A header of the wrong shape is refused even though its checksum matches;
 * the undamaged hand-made record decodes, so the builder is right. */
static void test_bad_header(void **state)
{
	struct sb_event ev;
	msgpack_sbuffer sb;

	damaged_record(&sb, H_NONE);
	assert_int_equal(sb_record_decode(sb.data, sb.size, &ev), SB_OK);
	assert_string_equal(ev.type, "run.started");
	assert_string_equal(ev.run, "abc");
	assert_true(ev.offset == 12 && ev.seq == 3 && ev.ts_ns == 99);
	assert_int_equal(ev.source, SB_SRC_GATEWAY);
	assert_int_equal(ev.payload_len, 11);
	msgpack_sbuffer_destroy(&sb);

	for (int d = H_NONE + 1; d < H_COUNT; d++) {
		damaged_record(&sb, (enum hdr_damage)d);
		sb_clearerr();
		if (sb_record_decode(sb.data, sb.size, &ev) != SB_ERR_CORRUPT)
			fail_msg("header damage %d accepted", d);
		if (d == H_VERSION_2 || d == H_VERSION_0 || d == H_VERSION_STR)
			tu_errmsg_has(SB_ERR_CORRUPT, "version");
		else if (d == H_PAYLOAD_ARRAY || d == H_PAYLOAD_STR)
			tu_errmsg_has(SB_ERR_CORRUPT, "payload");
		else
			tu_errmsg_has(SB_ERR_CORRUPT, "header");
		msgpack_sbuffer_destroy(&sb);
	}
}

/* Container sizes in the header far beyond the record's length are refused
 * without trying to allocate for them. */
static void test_header_huge_counts(void **state)
{
	static const struct {
		const char *b;
		size_t n;
	} recs[] = {
		{"\xdd\x7f\xff\xff\xff", 5},                 /* header: array of 2^31-1 */
		{"\x97\x01\x0c\xdd\xff\xff\xff\xff", 8}, /* type: array of 2^32-1 */
		{"\x97\x01\x0c\xdf\x10\x00\x00\x00", 8}, /* type: map of 2^28 */
		{"\x97\x01\x0c\xdb\xff\xff\xff\xf0", 8}, /* type: str of 4 GiB */
	};
	struct sb_event ev;
	uint8_t buf[64];

	for (size_t i = 0; i < sizeof recs / sizeof recs[0]; i++) {
		size_t n = recs[i].n + 8;
		memset(buf, 0x81, sizeof buf);
		memcpy(buf, recs[i].b, recs[i].n);
		tu_reseal(buf, n);
		assert_int_equal(sb_record_decode(buf, n, &ev), SB_ERR_CORRUPT);
		tu_reseal(buf, n + 16); /* with some bytes after it */
		assert_int_equal(sb_record_decode(buf, n + 16, &ev), SB_ERR_CORRUPT);
	}
}

/* sb_event_init checks lengths; source names parse and print. */
static void test_event_helpers(void **state)
{
	char longer[64];
	struct sb_event ev;
	enum sb_source src;

	memset(longer, 'a', sizeof longer);
	longer[SB_TYPE_MAX - 1] = 0;
	assert_int_equal(sb_event_init(&ev, longer, "r", SB_SRC_HOST, "\x80", 1), SB_OK);
	longer[SB_TYPE_MAX - 1] = 'a';
	longer[SB_TYPE_MAX] = 0;
	assert_int_equal(sb_event_init(&ev, longer, "r", SB_SRC_HOST, "\x80", 1), SB_ERR_INVAL);
	assert_int_equal(sb_event_init(&ev, "", "r", SB_SRC_HOST, "\x80", 1), SB_ERR_INVAL);
	longer[SB_RUN_MAX - 1] = 0;
	assert_int_equal(sb_event_init(&ev, "run.started", longer, SB_SRC_HOST, "\x80", 1), SB_OK);
	assert_string_equal(ev.run, longer);
	assert_int_equal(ev.payload_len, 1);
	longer[SB_RUN_MAX - 1] = 'a';
	longer[SB_RUN_MAX] = 0;
	assert_int_equal(sb_event_init(&ev, "run.started", longer, SB_SRC_HOST, "\x80", 1),
			 SB_ERR_INVAL);
	assert_int_equal(sb_event_init(&ev, "run.started", "", SB_SRC_HOST, "\x80", 1), SB_ERR_INVAL);

	for (unsigned i = 0; i <= SB_SRC_LAST; i++) {
		assert_int_equal(sb_source_parse(sb_source_name((enum sb_source)i), &src), SB_OK);
		assert_int_equal(src, i);
	}
	assert_string_equal(sb_source_name(SB_SRC_GATEWAY), "gateway");
	assert_string_equal(sb_source_name((enum sb_source)7), "?");
	assert_int_equal(sb_source_parse("root", &src), SB_ERR_INVAL);
	tu_errmsg_has(SB_ERR_INVAL, "root");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_all_types),
		cmocka_unit_test(test_roundtrip_big),
		cmocka_unit_test(test_same_bytes_as_packer),
		cmocka_unit_test(test_other_encodings),
		cmocka_unit_test(test_encode_needs_payload),
		cmocka_unit_test(test_every_flip_detected),
		cmocka_unit_test(test_truncation),
		cmocka_unit_test(test_garbage),
		cmocka_unit_test(test_bad_header),
		cmocka_unit_test(test_header_huge_counts),
		cmocka_unit_test(test_event_helpers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
