/* test_chan.c - host <-> guest frame codec. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/error.h"
#include "engine/mpack.h"
#include "vmm/chan.h"

/* Packs {"n": kind} (or nil / bin for CLOSE / DATA) as the body of a frame. */
static void pack_frame(msgpack_sbuffer *sb, int kind, uint64_t stream)
{
	msgpack_packer pk;
	size_t start;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	assert_int_equal(sb_chan_begin(sb, &pk, kind, stream, &start), 0);
	if (kind == SB_CHAN_CLOSE) {
		msgpack_pack_nil(&pk);
	} else if (kind == SB_CHAN_DATA || kind == SB_CHAN_EVENT_JSON) {
		msgpack_pack_bin(&pk, 3);
		msgpack_pack_bin_body(&pk, "a\0b", 3);
	} else {
		msgpack_pack_map(&pk, 1);
		msgpack_pack_str_with_body(&pk, "n", 1);
		msgpack_pack_int(&pk, kind);
	}
	assert_int_equal(sb_chan_end(sb, start), 0);
}

static void check_frame(const struct sb_chan_frame *f, int kind, uint64_t stream)
{
	const msgpack_object *n;

	assert_int_equal(f->kind, kind);
	assert_true(f->stream == stream);
	if (kind == SB_CHAN_CLOSE) {
		assert_int_equal(f->body.type, MSGPACK_OBJECT_NIL);
	} else if (kind == SB_CHAN_DATA || kind == SB_CHAN_EVENT_JSON) {
		assert_int_equal(f->body.type, MSGPACK_OBJECT_BIN);
		assert_int_equal(f->body.via.bin.size, 3);
		assert_memory_equal(f->body.via.bin.ptr, "a\0b", 3);
	} else {
		n = sb_map_get(&f->body, "n");
		assert_non_null(n);
		assert_int_equal(n->via.u64, (uint64_t)kind);
		assert_null(sb_map_get(&f->body, "m"));
	}
}

/* Every kind round-trips; streams of every msgpack width survive. */
static void test_roundtrip(void **state)
{
	static const uint64_t streams[] = {0, 1, 255, 65537, UINT64_MAX};
	msgpack_sbuffer sb;
	sb_chan_reader *r;
	struct sb_chan_frame f;
	int kind;
	size_t s;

	msgpack_sbuffer_init(&sb);
	for (kind = SB_CHAN_HELLO; kind <= SB_CHAN_KIND_MAX; kind++)
		for (s = 0; s < 5; s++)
			pack_frame(&sb, kind, streams[s]);
	assert_int_equal(sb_chan_reader_new(&r), 0);
	assert_int_equal(sb_chan_reader_feed(r, sb.data, sb.size), 0);
	for (kind = SB_CHAN_HELLO; kind <= SB_CHAN_KIND_MAX; kind++) {
		for (s = 0; s < 5; s++) {
			assert_int_equal(sb_chan_reader_next(r, &f), 0);
			check_frame(&f, kind, streams[s]);
		}
	}
	assert_int_equal(sb_chan_reader_next(r, &f), SB_END);
	assert_int_equal(sb_chan_reader_pending(r), 0);
	assert_string_equal(sb_chan_kind_name(SB_CHAN_EVENT_JSON), "EVENT_JSON");
	assert_string_equal(sb_chan_kind_name(99), "?");
	sb_chan_reader_free(r);
	msgpack_sbuffer_destroy(&sb);
}

/* Frames arrive byte by byte: each comes out exactly when complete. */
static void test_split_feed(void **state)
{
	msgpack_sbuffer sb;
	sb_chan_reader *r;
	struct sb_chan_frame f;
	size_t i, ends[SB_CHAN_KIND_MAX + 1];
	int kind, got = 0, ret;

	msgpack_sbuffer_init(&sb);
	for (kind = SB_CHAN_HELLO; kind <= SB_CHAN_KIND_MAX; kind++) {
		pack_frame(&sb, kind, (uint64_t)kind * 2 + 1);
		ends[kind] = sb.size;
	}
	assert_int_equal(sb_chan_reader_new(&r), 0);
	for (i = 0; i < sb.size; i++) {
		assert_int_equal(sb_chan_reader_feed(r, sb.data + i, 1), 0);
		ret = sb_chan_reader_next(r, &f);
		if (i + 1 == ends[got + 1]) {
			assert_int_equal(ret, 0);
			got++;
			check_frame(&f, got, (uint64_t)got * 2 + 1);
		} else {
			assert_int_equal(ret, SB_END);
		}
	}
	assert_int_equal(got, SB_CHAN_KIND_MAX);
	sb_chan_reader_free(r);
	msgpack_sbuffer_destroy(&sb);
}

/* A DATA body of 1 MiB - small header fits; one byte more is refused both by
 * the encoder and, as a sticky error, by the reader. */
static void test_oversize(void **state)
{
	msgpack_sbuffer sb, body;
	msgpack_packer pk;
	sb_chan_reader *r;
	struct sb_chan_frame f;
	char *big = calloc(1, SB_CHAN_MAX);
	unsigned char hdr[4] = {(SB_CHAN_MAX + 1) >> 24, (SB_CHAN_MAX + 1) >> 16 & 0xff,
				(SB_CHAN_MAX + 1) >> 8 & 0xff, (SB_CHAN_MAX + 1) & 0xff};

	assert_non_null(big);
	msgpack_sbuffer_init(&sb);
	msgpack_sbuffer_init(&body);
	msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
	msgpack_pack_bin(&pk, SB_CHAN_MAX - 16);
	msgpack_pack_bin_body(&pk, big, SB_CHAN_MAX - 16);
	assert_int_equal(sb_chan_encode(SB_CHAN_DATA, 1, body.data, body.size, &sb), 0);
	assert_int_equal(sb_chan_encode(SB_CHAN_DATA, 1, big, SB_CHAN_MAX, &sb),
			 SB_ERR_TOOBIG);
	assert_int_equal(sb_chan_encode(SB_CHAN_DATA, 1, big, SB_CHAN_MAX + 1, &sb),
			 SB_ERR_TOOBIG);

	assert_int_equal(sb_chan_reader_new(&r), 0);
	assert_int_equal(sb_chan_reader_feed(r, sb.data, sb.size), 0);
	assert_int_equal(sb_chan_reader_next(r, &f), 0);
	assert_int_equal(f.body.via.bin.size, SB_CHAN_MAX - 16);
	assert_int_equal(sb_chan_reader_feed(r, hdr, sizeof hdr), 0);
	assert_int_equal(sb_chan_reader_error(r), 0);
	assert_int_equal(sb_chan_reader_next(r, &f), SB_ERR_TOOBIG);
	assert_int_equal(sb_chan_reader_next(r, &f), SB_ERR_TOOBIG);
	assert_int_equal(sb_chan_reader_error(r), SB_ERR_TOOBIG);
	assert_int_equal(sb_chan_reader_pending(r), 0);
	assert_int_equal(sb_chan_reader_feed(r, "x", 1), SB_ERR_TOOBIG);
	sb_chan_reader_free(r);
	msgpack_sbuffer_destroy(&body);
	msgpack_sbuffer_destroy(&sb);
	free(big);
}

static void test_zero_length(void **state)
{
	static const unsigned char zero[8] = {0};
	msgpack_sbuffer sb;
	msgpack_packer pk;
	sb_chan_reader *r;
	struct sb_chan_frame f;
	size_t start;

	msgpack_sbuffer_init(&sb);
	assert_int_equal(sb_chan_encode(SB_CHAN_DONE, 0, "", 0, &sb), SB_ERR_INVAL);
	assert_int_equal(sb_chan_encode(0, 0, "\xc0", 1, &sb), SB_ERR_INVAL);
	assert_int_equal(sb_chan_encode(SB_CHAN_KIND_MAX + 1, 0, "\xc0", 1, &sb),
			 SB_ERR_INVAL);
	/* begin + end with no body packed is refused and leaves nothing */
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	assert_int_equal(sb_chan_begin(&sb, &pk, SB_CHAN_DONE, 300, &start), 0);
	assert_int_equal(sb_chan_end(&sb, start), SB_ERR_PROTO);
	assert_int_equal(sb.size, 0);

	assert_int_equal(sb_chan_reader_new(&r), 0);
	assert_int_equal(sb_chan_reader_feed(r, zero, sizeof zero), 0);
	assert_int_equal(sb_chan_reader_next(r, &f), SB_ERR_PROTO);
	assert_int_equal(sb_chan_reader_next(r, &f), SB_ERR_PROTO);
	assert_int_equal(sb_chan_reader_error(r), SB_ERR_PROTO);
	assert_int_equal(sb_chan_reader_pending(r), 0);
	sb_chan_reader_free(r);
	msgpack_sbuffer_destroy(&sb);
}

/* Feeds len bytes framed with a correct length and expects SB_ERR_PROTO for
 * that frame, then a good frame after it. */
static void expect_bad_frame(const void *payload, uint32_t len)
{
	unsigned char hdr[4] = {len >> 24, len >> 16, len >> 8, len};
	msgpack_sbuffer sb;
	sb_chan_reader *r;
	struct sb_chan_frame f;

	msgpack_sbuffer_init(&sb);
	pack_frame(&sb, SB_CHAN_LOG, 0);
	assert_int_equal(sb_chan_reader_new(&r), 0);
	assert_int_equal(sb_chan_reader_feed(r, hdr, 4), 0);
	assert_int_equal(sb_chan_reader_feed(r, payload, len), 0);
	assert_int_equal(sb_chan_reader_feed(r, sb.data, sb.size), 0);
	assert_int_equal(sb_chan_reader_next(r, &f), SB_ERR_PROTO);
	assert_int_equal(sb_chan_reader_error(r), 0); /* skipped, still sound */
	assert_int_equal(sb_chan_reader_next(r, &f), 0);
	check_frame(&f, SB_CHAN_LOG, 0);
	assert_int_equal(sb_chan_reader_next(r, &f), SB_END);
	sb_chan_reader_free(r);
	msgpack_sbuffer_destroy(&sb);
}

/* Well-framed garbage is skipped frame by frame. */
static void test_garbage(void **state)
{
	expect_bad_frame("\x92\x01\x00", 3);			 /* array of 2 */
	expect_bad_frame("\x93\x00\x00\xc0", 4);		 /* kind 0 */
	expect_bad_frame("\x93\x17\x00\xc0", 4);		 /* kind 23: past PUT_DONE */
	expect_bad_frame("\x93\xff\x00\xc0", 4);		 /* kind -1 */
	expect_bad_frame("\x93\x01\xa1x\xc0", 5);		 /* stream is a str */
	expect_bad_frame("\x93\x01\x00\xc0\xc0", 5);		 /* trailing byte */
	expect_bad_frame("\xc1", 1);				 /* never-used byte */
	expect_bad_frame("\x93\x01\x00\xdb\xff\xff\xff\xff", 8); /* str of 4 GiB */
	expect_bad_frame("\xdd\xff\xff\xff\xff", 5);		 /* array of 4 G items */
	expect_bad_frame("\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91"
			 "\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91"
			 "\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\xc0",
			 37); /* deep */
}

/* Random bytes never crash the reader nor make it read past its input. */
static void test_random(void **state)
{
	unsigned char buf[512];
	sb_chan_reader *r;
	struct sb_chan_frame f;
	int round, ret;
	size_t i;

	srand(7);
	for (round = 0; round < 2000; round++) {
		for (i = 0; i < sizeof buf; i++)
			buf[i] = rand();
		buf[0] = buf[1] = 0; /* plausible lengths */
		buf[2] &= 1;
		assert_int_equal(sb_chan_reader_new(&r), 0);
		assert_int_equal(sb_chan_reader_feed(r, buf, sizeof buf), 0);
		for (i = 0; i < 64; i++) {
			ret = sb_chan_reader_next(r, &f);
			if (ret == SB_END || sb_chan_reader_error(r))
				break;
			assert_true(ret == 0 || ret == SB_ERR_PROTO);
		}
		sb_chan_reader_free(r);
	}
}

/* A frame cut short waits for its end; it never comes out half. */
static void test_truncated(void **state)
{
	msgpack_sbuffer sb;
	sb_chan_reader *r;
	struct sb_chan_frame f;

	msgpack_sbuffer_init(&sb);
	pack_frame(&sb, SB_CHAN_SPEC, 0);
	assert_int_equal(sb_chan_reader_new(&r), 0);
	assert_int_equal(sb_chan_reader_feed(r, sb.data, 2), 0);
	assert_int_equal(sb_chan_reader_next(r, &f), SB_END);
	assert_int_equal(sb_chan_reader_feed(r, sb.data + 2, sb.size - 3), 0);
	assert_int_equal(sb_chan_reader_next(r, &f), SB_END);
	assert_int_equal(sb_chan_reader_pending(r), sb.size - 1);
	assert_int_equal(sb_chan_reader_feed(r, sb.data + sb.size - 1, 1), 0);
	assert_int_equal(sb_chan_reader_next(r, &f), 0);
	check_frame(&f, SB_CHAN_SPEC, 0);
	sb_chan_reader_free(r);
	msgpack_sbuffer_destroy(&sb);
}

/* Bodies using every msgpack type and width decode to what was packed. */
static void test_types(void **state)
{
	static char big[70000];
	msgpack_sbuffer sb;
	msgpack_packer pk;
	sb_chan_reader *r;
	struct sb_chan_frame f;
	const msgpack_object *a;
	size_t start;
	int i;

	memset(big, 'z', sizeof big);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	assert_int_equal(sb_chan_begin(&sb, &pk, SB_CHAN_EVENT, 0, &start), 0);
	msgpack_pack_array(&pk, 16);
	msgpack_pack_str_with_body(&pk, big, 40);    /* str8 */
	msgpack_pack_str_with_body(&pk, big, 300);   /* str16 */
	msgpack_pack_str_with_body(&pk, big, 70000); /* str32 */
	msgpack_pack_bin_with_body(&pk, big, 200);   /* bin8 */
	msgpack_pack_bin_with_body(&pk, big, 300);   /* bin16 */
	msgpack_pack_bin_with_body(&pk, big, 70000); /* bin32 */
	msgpack_pack_int64(&pk, -5000000000LL);
	msgpack_pack_uint64(&pk, 5000000000ULL);
	msgpack_pack_int8(&pk, -100);
	msgpack_pack_double(&pk, 1.5);
	msgpack_pack_float(&pk, 2.5f);
	msgpack_pack_true(&pk);
	msgpack_pack_ext_with_body(&pk, "abcd", 4, 7); /* fixext4 */
	msgpack_pack_ext_with_body(&pk, big, 300, 7);  /* ext16 */
	msgpack_pack_array(&pk, 20);		       /* array16 */
	for (i = 0; i < 20; i++)
		msgpack_pack_nil(&pk);
	msgpack_pack_map(&pk, 17); /* map16 */
	for (i = 0; i < 17; i++) {
		msgpack_pack_int(&pk, i);
		msgpack_pack_int(&pk, -i);
	}
	assert_int_equal(sb_chan_end(&sb, start), 0);
	assert_int_equal(sb_chan_reader_new(&r), 0);
	assert_int_equal(sb_chan_reader_feed(r, sb.data, sb.size), 0);
	assert_int_equal(sb_chan_reader_next(r, &f), 0);
	assert_int_equal(f.body.type, MSGPACK_OBJECT_ARRAY);
	assert_int_equal(f.body.via.array.size, 16);
	a = f.body.via.array.ptr;
	assert_int_equal(a[2].via.str.size, 70000);
	assert_int_equal(a[5].via.bin.size, 70000);
	assert_true(a[6].via.i64 == -5000000000LL);
	assert_true(a[7].via.u64 == 5000000000ULL);
	assert_true(a[9].via.f64 == 1.5);
	assert_int_equal(a[13].via.ext.size, 300);
	assert_int_equal(a[14].via.array.size, 20);
	assert_int_equal(a[15].via.map.size, 17);
	assert_int_equal(sb_chan_reader_next(r, &f), SB_END);
	sb_chan_reader_free(r);
	msgpack_sbuffer_destroy(&sb);
}

/* An input file becomes INPUT frames of at most SB_CHAN_DATA_MAX bytes on
 * its index, in order, that add up to its content; an empty file gives none;
 * a frame the reader accepts is never above the limit the agent checks. */
static void test_input_chunks(void **state)
{
	static const size_t sizes[] = {0, 1, SB_CHAN_DATA_MAX, SB_CHAN_DATA_MAX + 1,
				       3 * SB_CHAN_DATA_MAX + 17};
	size_t max = 3 * SB_CHAN_DATA_MAX + 17, i, got, frames;
	unsigned char *data = malloc(max), *back = malloc(max);
	msgpack_sbuffer sb;
	sb_chan_reader *r;
	struct sb_chan_frame f;

	assert_non_null(data);
	assert_non_null(back);
	for (i = 0; i < max; i++)
		data[i] = (unsigned char)(i * 131 + i / 977);
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		msgpack_sbuffer_init(&sb);
		pack_frame(&sb, SB_CHAN_SPEC, 0);
		assert_int_equal(sb_chan_pack_input(&sb, 7, data, sizes[k]), 0);
		pack_frame(&sb, SB_CHAN_LOG, 0);
		assert_int_equal(sb_chan_reader_new(&r), 0);
		assert_int_equal(sb_chan_reader_feed(r, sb.data, sb.size), 0);
		assert_int_equal(sb_chan_reader_next(r, &f), 0);
		check_frame(&f, SB_CHAN_SPEC, 0);
		got = frames = 0;
		while (sb_chan_reader_next(r, &f) == 0 && f.kind == SB_CHAN_INPUT) {
			assert_true(f.stream == 7);
			assert_int_equal(f.body.type, MSGPACK_OBJECT_BIN);
			assert_true(f.body.via.bin.size >= 1);
			assert_true(f.body.via.bin.size <= SB_CHAN_DATA_MAX);
			assert_true(got + f.body.via.bin.size <= sizes[k]);
			memcpy(back + got, f.body.via.bin.ptr, f.body.via.bin.size);
			got += f.body.via.bin.size;
			frames++;
		}
		check_frame(&f, SB_CHAN_LOG, 0); /* the frame after the input */
		assert_int_equal(got, sizes[k]);
		assert_int_equal(frames,
				 (sizes[k] + SB_CHAN_DATA_MAX - 1) / SB_CHAN_DATA_MAX);
		if (got)
			assert_memory_equal(back, data, got);
		assert_int_equal(sb_chan_reader_next(r, &f), SB_END);
		sb_chan_reader_free(r);
		msgpack_sbuffer_destroy(&sb);
	}
	assert_string_equal(sb_chan_kind_name(SB_CHAN_INPUT), "INPUT");
	free(data);
	free(back);
}

/* sb_map_get only matches string keys of maps. */
static void test_map_get(void **state)
{
	msgpack_object o = {.type = MSGPACK_OBJECT_NIL};

	assert_null(sb_map_get(&o, "x"));
	assert_null(sb_map_get(NULL, "x"));
}


/* Decodes kept frame k: its kind, stream and the n of its body {"n": n}. */
static void check_kept(const struct sb_chan_kept *k, int kind, uint64_t seq)
{
	sb_chan_reader *r;
	struct sb_chan_frame f;

	assert_non_null(k);
	assert_int_equal(k->seq, seq);
	assert_int_equal(sb_chan_reader_new(&r), 0);
	assert_int_equal(sb_chan_reader_feed(r, k->frame, k->len), 0);
	assert_int_equal(sb_chan_reader_next(r, &f), 0);
	assert_int_equal(f.kind, kind);
	assert_int_equal(f.stream, seq);
	assert_int_equal(sb_map_u64(&f.body, "n", 0), seq);
	assert_int_equal(sb_chan_reader_next(r, &f), SB_END);
	sb_chan_reader_free(r);
}

/* Adds a numbered frame whose body is {"n": n}. */
static void ring_add(struct sb_chan_ring *ring, int kind, uint64_t n)
{
	const struct sb_chan_kept *k;
	msgpack_sbuffer sb;
	msgpack_packer pk;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 1);
	sb_pack_ku64(&pk, "n", n);
	assert_int_equal(sb_chan_ring_add(ring, kind, sb.data, sb.size, &k), 0);
	check_kept(k, kind, n);
	msgpack_sbuffer_destroy(&sb);
}

/* The agent's ring: numbers from 1, keeps in order until an ACK, an ACK
 * behind or far past what it holds, many frames (it grows and moves),
 * a reset numbers from 1 again; kinds that are not numbered are refused. */
static void test_ring(void **state)
{
	struct sb_chan_ring ring = {0};
	const struct sb_chan_kept *k;
	size_t bytes = 0;

	assert_int_equal(sb_chan_ring_next(&ring), 1);
	assert_int_equal(sb_chan_ring_add(&ring, SB_CHAN_HELLO, "\x80", 1, &k), SB_ERR_INVAL);
	assert_int_equal(sb_chan_ring_add(&ring, SB_CHAN_EVENT, "", 0, &k), SB_ERR_INVAL);
	assert_int_equal(ring.seq, 0);
	assert_true(sb_chan_numbered(SB_CHAN_EVENT) && sb_chan_numbered(SB_CHAN_EVENT_JSON));
	assert_false(sb_chan_numbered(SB_CHAN_DATA) || sb_chan_numbered(SB_CHAN_ACK));
	for (uint64_t i = 1; i <= 5; i++)
		ring_add(&ring, i % 2 ? SB_CHAN_EVENT : SB_CHAN_EVENT_JSON, i);
	for (size_t i = 0; i < 5; i++)
		bytes += sb_chan_ring_at(&ring, i)->len;
	assert_int_equal(ring.bytes, bytes);
	assert_null(sb_chan_ring_at(&ring, 5));
	assert_int_equal(sb_chan_ring_ack(&ring, 0), 0);
	assert_int_equal(sb_chan_ring_ack(&ring, 3), 3);
	assert_int_equal(sb_chan_ring_ack(&ring, 2), 0); /* behind: nothing */
	assert_int_equal(sb_chan_ring_next(&ring), 4);
	check_kept(sb_chan_ring_at(&ring, 0), SB_CHAN_EVENT_JSON, 4);
	check_kept(sb_chan_ring_at(&ring, 1), SB_CHAN_EVENT, 5);
	/* many: the array grows and its front is reused */
	for (uint64_t i = 6; i <= 300; i++) {
		ring_add(&ring, SB_CHAN_EVENT, i);
		if (i % 7 == 0)
			sb_chan_ring_ack(&ring, i - 20);
	}
	assert_int_equal(sb_chan_ring_next(&ring), 300 - 20 - 6 + 1);
	for (size_t i = 0; (k = sb_chan_ring_at(&ring, i)); i++)
		check_kept(k, SB_CHAN_EVENT, sb_chan_ring_next(&ring) + i);
	assert_int_equal(sb_chan_ring_ack(&ring, UINT64_MAX), ring.seq - 274);
	assert_int_equal(ring.n, 0);
	assert_int_equal(ring.bytes, 0);
	assert_int_equal(sb_chan_ring_next(&ring), 301);
	ring_add(&ring, SB_CHAN_EVENT, 301);
	sb_chan_ring_reset(&ring);
	assert_int_equal(ring.n, 0);
	assert_int_equal(sb_chan_ring_next(&ring), 1);
	ring_add(&ring, SB_CHAN_EVENT, 1);
	sb_chan_ring_free(&ring);
	assert_int_equal(ring.seq, 0);
	assert_string_equal(sb_chan_kind_name(SB_CHAN_ACK), "ACK");
	assert_string_equal(sb_chan_kind_name(SB_CHAN_RESEND), "RESEND");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_roundtrip), cmocka_unit_test(test_split_feed),
	    cmocka_unit_test(test_oversize),  cmocka_unit_test(test_zero_length),
	    cmocka_unit_test(test_garbage),   cmocka_unit_test(test_random),
	    cmocka_unit_test(test_truncated), cmocka_unit_test(test_types),
	    cmocka_unit_test(test_map_get),   cmocka_unit_test(test_input_chunks),
	    cmocka_unit_test(test_ring),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
