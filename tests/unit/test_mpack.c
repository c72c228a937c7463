/* test_mpack.c - sb_mapw, the map that counts its own pairs: the bytes it
 * packs are msgpack-c's own for the same map (header sizes, nesting,
 * conditional pairs), and misuse fails instead of packing a corrupt map. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/error.h"
#include "engine/mpack.h"

struct buf {
	msgpack_sbuffer sb;
	msgpack_packer pk;
};

static void buf_init(struct buf *b)
{
	msgpack_sbuffer_init(&b->sb);
	msgpack_packer_init(&b->pk, &b->sb, msgpack_sbuffer_write);
}

static void assert_same(const struct buf *got, const struct buf *want)
{
	assert_int_equal(got->sb.size, want->sb.size);
	assert_memory_equal(got->sb.data, want->sb.data, want->sb.size);
}

/* Every helper, each pair there or not: the bytes of msgpack-c with the
 * count made by hand. */
static void test_helpers_conditional(void **state)
{
	for (unsigned mask = 0; mask < 1u << 7; mask++) {
		struct buf got, want;
		sb_mapw m;
		unsigned n = (unsigned)__builtin_popcount(mask);

		buf_init(&got);
		buf_init(&want);
		sb_mapw_begin(&m, &got.pk);
		msgpack_pack_map(&want.pk, n + 1);
		sb_mapw_str(&m, "always", "here");
		sb_pack_kstr(&want.pk, "always", "here");
		if (mask & 1) {
			sb_mapw_str(&m, "s", "héllo");
			sb_pack_kstr(&want.pk, "s", "héllo");
		}
		if (mask & 2) {
			sb_mapw_strn(&m, "sn", "a\0b", 3);
			sb_pack_kstrn(&want.pk, "sn", "a\0b", 3);
		}
		if (mask & 4) {
			sb_mapw_bin(&m, "b", "\xff\0", 2);
			sb_pack_str(&want.pk, "b");
			msgpack_pack_bin_with_body(&want.pk, "\xff\0", 2);
		}
		if (mask & 8) {
			sb_mapw_u64(&m, "u", UINT64_MAX);
			sb_pack_ku64(&want.pk, "u", UINT64_MAX);
		}
		if (mask & 16) {
			sb_mapw_i64(&m, "i", -70000);
			sb_pack_ki64(&want.pk, "i", -70000);
		}
		if (mask & 32) {
			sb_mapw_bool(&m, "t", 7);
			sb_pack_kbool(&want.pk, "t", 1);
		}
		if (mask & 64) {
			sb_mapw_nil(&m, "nil");
			sb_pack_str(&want.pk, "nil");
			msgpack_pack_nil(&want.pk);
		}
		assert_int_equal(sb_mapw_end(&m), SB_OK);
		assert_int_equal(m.n, n + 1);
		assert_same(&got, &want);
		msgpack_sbuffer_destroy(&got.sb);
		msgpack_sbuffer_destroy(&want.sb);
	}
}

/* Packs n pairs "kI": I with msgpack-c. */
static void pack_pairs(msgpack_packer *pk, uint32_t n)
{
	char k[16];

	for (uint32_t i = 0; i < n; i++) {
		snprintf(k, sizeof k, "k%u", i);
		sb_pack_ku64(pk, k, i);
	}
}

/* Packs the map of n pairs "kI": I with the builder m and with msgpack-c
 * into want, counted by hand. */
static void pack_n(sb_mapw *m, msgpack_packer *want, uint32_t n)
{
	char k[16];

	msgpack_pack_map(want, n);
	pack_pairs(want, n);
	for (uint32_t i = 0; i < n; i++) {
		snprintf(k, sizeof k, "k%u", i);
		sb_mapw_u64(m, k, i);
	}
}

/* 0, 15, 16, 65535, 65536 and more pairs: fixmap, map16 and map32, each
 * the smallest header, as msgpack-c packs it, alone and nested. */
static void test_header_sizes(void **state)
{
	static const struct {
		uint32_t n;
		size_t head;
		unsigned char first;
	} cases[] = {{0, 1, 0x80},     {1, 1, 0x81},	 {15, 1, 0x8f},	  {16, 3, 0xde},
		     {65535, 3, 0xde}, {65536, 5, 0xdf}, {70000, 5, 0xdf}};

	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		struct buf got, want;
		sb_mapw outer, m;

		buf_init(&got);
		buf_init(&want);
		sb_mapw_begin(&m, &got.pk);
		pack_n(&m, &want.pk, cases[c].n);
		assert_int_equal(sb_mapw_end(&m), SB_OK);
		assert_same(&got, &want);
		assert_int_equal((unsigned char)got.sb.data[0], cases[c].first);
		if (cases[c].n)
			assert_memory_equal(got.sb.data + cases[c].head, "\xa2k0", 3);

		/* nested, after bytes that are not the map's */
		msgpack_pack_array(&got.pk, 1);
		msgpack_pack_array(&want.pk, 1);
		sb_mapw_begin(&outer, &got.pk);
		msgpack_pack_map(&want.pk, 2);
		sb_mapw_begin(&m, sb_mapw_key(&outer, "inner"));
		sb_pack_str(&want.pk, "inner");
		pack_n(&m, &want.pk, cases[c].n);
		assert_int_equal(sb_mapw_end(&m), SB_OK);
		sb_mapw_bool(&outer, "after", 1);
		sb_pack_kbool(&want.pk, "after", 1);
		assert_int_equal(sb_mapw_end(&outer), SB_OK);
		assert_same(&got, &want);
		msgpack_sbuffer_destroy(&got.sb);
		msgpack_sbuffer_destroy(&want.sb);
	}
}

/* A small random generator, the same for every run. */
static uint32_t rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(*s >> 33);
}

/* Packs a random tree of maps and arrays: each pair is there or not at
 * random (as the product's conditional pairs are), so msgpack-c's side
 * counts first and the builder's never does. Both draw the same numbers. */
static void pack_tree(sb_mapw *m, msgpack_packer *want, uint64_t seed, int depth)
{
	uint64_t s = seed, s2 = seed;
	uint32_t slots = rnd(&s) % 40, n = 0;
	char k[16];

	for (uint32_t i = 0; i < slots; i++)
		n += rnd(&s) % 3 != 0;
	msgpack_pack_map(want, n);
	rnd(&s2);
	for (uint32_t i = 0; i < slots; i++) {
		uint32_t r = rnd(&s2), kind = r >> 8 & 3;
		if (r % 3 == 0)
			continue;
		snprintf(k, sizeof k, "p%u", i);
		sb_pack_str(want, k);
		if (depth < 3 && kind == 0) {
			sb_mapw inner;
			sb_mapw_begin(&inner, sb_mapw_key(m, k));
			pack_tree(&inner, want, seed * 31 + i, depth + 1);
			assert_int_equal(sb_mapw_end(&inner), SB_OK);
		} else if (depth < 3 && kind == 1) {
			/* an array of maps */
			msgpack_pack_array(sb_mapw_key(m, k), 2);
			msgpack_pack_array(want, 2);
			for (int j = 0; j < 2; j++) {
				sb_mapw el;
				sb_mapw_begin(&el, &m->pk);
				pack_tree(&el, want, seed * 37 + i * 2 + j, depth + 1);
				assert_int_equal(sb_mapw_end(&el), SB_OK);
			}
		} else {
			sb_mapw_u64(m, k, r);
			msgpack_pack_uint64(want, r);
		}
	}
}

static void test_nested_random(void **state)
{
	for (uint64_t seed = 1; seed <= 300; seed++) {
		struct buf got, want;
		sb_mapw m;
		msgpack_zone z;
		msgpack_object o;

		buf_init(&got);
		buf_init(&want);
		sb_mapw_begin(&m, &got.pk);
		pack_tree(&m, &want.pk, seed, 0);
		assert_int_equal(sb_mapw_end(&m), SB_OK);
		assert_same(&got, &want);
		msgpack_zone_init(&z, 1024);
		assert_int_equal(sb_payload_parse(got.sb.data, got.sb.size, &z, &o),
				 SB_OK);
		msgpack_zone_destroy(&z);
		msgpack_sbuffer_destroy(&got.sb);
		msgpack_sbuffer_destroy(&want.sb);
	}
}

/* sb_mapw_begin_from takes a packed map's pairs and adds to them, whatever
 * its header's size; bytes that are no map fail it and its outer map. */
static void test_begin_from(void **state)
{
	static const uint32_t sizes[] = {0, 3, 15, 16, 65535, 65536};

	for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
		struct buf src, got, want;
		sb_mapw m;

		buf_init(&src);
		buf_init(&got);
		buf_init(&want);
		msgpack_pack_map(&src.pk, sizes[c]);
		pack_pairs(&src.pk, sizes[c]);
		msgpack_pack_nil(&got.pk); /* before the map */
		assert_int_equal(
		    sb_mapw_begin_from(&m, &got.pk, src.sb.data, src.sb.size), SB_OK);
		sb_mapw_u64(&m, "seq", 9);
		assert_int_equal(sb_mapw_end(&m), SB_OK);
		msgpack_pack_nil(&want.pk);
		msgpack_pack_map(&want.pk, sizes[c] + 1);
		pack_pairs(&want.pk, sizes[c]);
		sb_pack_ku64(&want.pk, "seq", 9);
		assert_same(&got, &want);
		msgpack_sbuffer_destroy(&src.sb);
		msgpack_sbuffer_destroy(&got.sb);
		msgpack_sbuffer_destroy(&want.sb);
	}
}

static void test_begin_from_garbage(void **state)
{
	static const char *bad[] = {"", "\x90", "\xde\x00", "\xdf\x00\x00\x00", "\xc0"};
	static const size_t len[] = {0, 1, 2, 4, 1};
	struct buf got;
	sb_mapw outer, m;

	buf_init(&got);
	for (size_t i = 0; i < sizeof len / sizeof len[0]; i++) {
		got.sb.size = 0;
		msgpack_pack_nil(&got.pk); /* before the map: stays */
		assert_int_equal(sb_mapw_begin_from(&m, &got.pk, bad[i], len[i]),
				 SB_ERR_CORRUPT);
		sb_mapw_u64(&m, "x", 1);
		assert_int_equal(sb_mapw_end(&m), SB_ERR_CORRUPT);
		assert_int_equal(got.sb.size, 1);

		sb_mapw_begin(&outer, &got.pk);
		sb_mapw_u64(&outer, "a", 1);
		assert_int_equal(
		    sb_mapw_begin_from(&m, sb_mapw_key(&outer, "in"), bad[i], len[i]),
		    SB_ERR_CORRUPT);
		assert_int_equal(sb_mapw_end(&m), SB_ERR_CORRUPT);
		sb_mapw_u64(&outer, "b", 2);
		assert_int_equal(sb_mapw_end(&outer), SB_ERR_CORRUPT);
		assert_int_equal(got.sb.size, 1);
	}
	msgpack_sbuffer_destroy(&got.sb);
}

/* A nested map left open, a pair packed into the outer map while a nested
 * one is open, two nested maps open at once, a map ended twice: each is an
 * error, and no half map stays in the buffer. */
static void test_misuse(void **state)
{
	struct buf got;
	sb_mapw outer, a, b;
	size_t size;

	buf_init(&got);
	msgpack_pack_true(&got.pk);

	sb_mapw_begin(&outer, &got.pk);
	sb_mapw_begin(&a, sb_mapw_key(&outer, "a"));
	sb_mapw_u64(&a, "x", 1);
	assert_int_equal(sb_mapw_end(&outer), SB_ERR_STATE);
	assert_int_equal(got.sb.size, 1);
	assert_int_equal(sb_mapw_end(&a), SB_ERR_STATE); /* cut with its outer map */
	assert_int_equal(got.sb.size, 1);

	sb_mapw_begin(&outer, &got.pk);
	sb_mapw_begin(&a, sb_mapw_key(&outer, "a"));
	sb_mapw_u64(&outer, "y", 2);
	assert_int_equal(sb_mapw_end(&a), SB_OK);
	assert_int_equal(sb_mapw_end(&outer), SB_ERR_STATE);
	assert_int_equal(got.sb.size, 1);

	sb_mapw_begin(&outer, &got.pk);
	msgpack_pack_array(sb_mapw_key(&outer, "v"), 2);
	sb_mapw_begin(&a, &outer.pk);
	sb_mapw_begin(&b, &outer.pk);
	assert_int_equal(sb_mapw_end(&b), SB_ERR_STATE);
	assert_int_equal(sb_mapw_end(&a), SB_OK); /* a map itself, in a failed one */
	assert_int_equal(sb_mapw_end(&outer), SB_ERR_STATE);
	assert_int_equal(got.sb.size, 1);

	sb_mapw_begin(&outer, &got.pk);
	sb_mapw_str(&outer, "k", "v");
	assert_int_equal(sb_mapw_end(&outer), SB_OK);
	size = got.sb.size;
	assert_int_equal(sb_mapw_end(&outer), SB_ERR_STATE);
	assert_int_equal(got.sb.size, size); /* the map ended once stays */
	assert_memory_equal(got.sb.data, "\xc3\x81\xa1k\xa1v", size);
	msgpack_sbuffer_destroy(&got.sb);
}

/* sb_pack_raw puts packed bytes as a value, counted as one. */
static void test_raw(void **state)
{
	struct buf got, want;
	sb_mapw m;

	buf_init(&got);
	buf_init(&want);
	sb_mapw_begin(&m, &got.pk);
	assert_int_equal(sb_pack_raw(sb_mapw_key(&m, "r"), "\x92\x01\x02", 3), SB_OK);
	assert_int_equal(sb_mapw_end(&m), SB_OK);
	msgpack_pack_map(&want.pk, 1);
	sb_pack_str(&want.pk, "r");
	msgpack_pack_array(&want.pk, 2);
	msgpack_pack_uint8(&want.pk, 1);
	msgpack_pack_uint8(&want.pk, 2);
	assert_same(&got, &want);
	msgpack_sbuffer_destroy(&got.sb);
	msgpack_sbuffer_destroy(&want.sb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_helpers_conditional),
	    cmocka_unit_test(test_header_sizes),
	    cmocka_unit_test(test_nested_random),
	    cmocka_unit_test(test_begin_from),
	    cmocka_unit_test(test_begin_from_garbage),
	    cmocka_unit_test(test_misuse),
	    cmocka_unit_test(test_raw),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
