/* test_merkle.c - SHA-256 against the FIPS 180-4 known answers and
 * libsodium's; RFC 9162 hashing against the Certificate Transparency
 * vectors; roots, inclusion and consistency proofs for every tree of 1..70
 * leaves against a from-scratch recursion; multi-leaf proofs. */
#include <setjmp.h>
#include <sodium.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/error.h"
#include "engine/log/merkle.h"
#include "engine/sha256.h"

#define N 70

typedef uint8_t hash_t[SB_MERKLE_HASH];

/* A tree in memory: leaf hashes; stored[l][i] the perfect subtrees. */
struct mem {
	hash_t leaf[N];
	hash_t stored[8][N];
	uint64_t n;
};

static void from_hex(const char *hex, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
		out[i] = (uint8_t)v;
	}
}

/* Appends a leaf hash, storing each perfect subtree it completes: the
 * incremental build. */
static void mem_append(struct mem *m, const uint8_t h[SB_MERKLE_HASH])
{
	uint64_t i = m->n++;

	memcpy(m->leaf[i], h, SB_MERKLE_HASH);
	memcpy(m->stored[0][i], h, SB_MERKLE_HASH);
	for (unsigned l = 1; ((i + 1) & ((1ull << l) - 1)) == 0; l++) {
		uint64_t j = i >> l;
		sb_merkle_node(m->stored[l - 1][2 * j], m->stored[l - 1][2 * j + 1], m->stored[l][j]);
	}
}

static int mem_read(void *ctx, unsigned level, uint64_t index, uint8_t out[SB_MERKLE_HASH])
{
	struct mem *m = ctx;

	assert_true(((index + 1) << level) <= m->n);
	memcpy(out, m->stored[level][index], SB_MERKLE_HASH);
	return SB_OK;
}

/* MTH(D[lo:hi]) straight from RFC 9162 2.1.1, from the leaves. */
static void mth(const struct mem *m, uint64_t lo, uint64_t hi, uint8_t out[SB_MERKLE_HASH])
{
	uint64_t k = 1;
	hash_t l, r;

	if (hi - lo == 1) {
		memcpy(out, m->leaf[lo], SB_MERKLE_HASH);
		return;
	}
	while (k * 2 < hi - lo)
		k *= 2;
	mth(m, lo, lo + k, l);
	mth(m, lo + k, hi, r);
	sb_merkle_node(l, r, out);
}

static void build(struct mem *m, uint64_t n)
{
	memset(m, 0, sizeof *m);
	for (uint64_t i = 0; i < n; i++) {
		uint8_t d[2] = {(uint8_t)i, (uint8_t)(i * 7)};
		hash_t h;
		sb_merkle_leaf(d, sizeof d, h);
		mem_append(m, h);
	}
}

static void test_vectors(void **state)
{
	static const char *entries[] = {"", "00", "10", "2021", "3031", "40414243",
					"5051525354555657",
					"606162636465666768696a6b6c6d6e6f"};
	static const char *roots[] = {
	    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
	    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
	    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
	    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
	    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
	    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
	    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
	    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"};
	static const char *incl5[] = {
	    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
	    "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
	    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"};
	struct mem *m = calloc(1, sizeof *m);
	hash_t want, got, proof[SB_MERKLE_PROOF_MAX];
	uint8_t data[16];
	size_t len;

	(void)state;
	assert_non_null(m);
	sb_merkle_root(mem_read, m, 0, got);
	from_hex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", want, 32);
	assert_memory_equal(got, want, 32);
	for (size_t i = 0; i < 8; i++) {
		size_t dl = strlen(entries[i]) / 2;
		from_hex(entries[i], data, dl);
		sb_merkle_leaf(data, dl, got);
		mem_append(m, got);
		assert_int_equal(sb_merkle_root(mem_read, m, i + 1, got), SB_OK);
		from_hex(roots[i], want, 32);
		assert_memory_equal(got, want, 32);
	}
	assert_int_equal(sb_merkle_inclusion(mem_read, m, 5, 8, proof, &len), SB_OK);
	assert_int_equal(len, 3);
	for (size_t i = 0; i < 3; i++) {
		from_hex(incl5[i], want, 32);
		assert_memory_equal(proof[i], want, 32);
	}
	free(m);
}

/* Every tree of 1..N leaves: the incremental root is the recursion's, every
 * leaf's inclusion proof checks (and fails for a wrong leaf, index or
 * root), and so does every consistency proof m -> n. */
static void test_all_sizes(void **state)
{
	struct mem *m = calloc(1, sizeof *m);
	hash_t root, want, proof[SB_MERKLE_PROOF_MAX], rm = {0}, bad;
	size_t len;

	(void)state;
	assert_non_null(m);
	build(m, N);
	for (uint64_t n = 1; n <= N; n++) {
		assert_int_equal(sb_merkle_root(mem_read, m, n, root), SB_OK);
		mth(m, 0, n, want);
		assert_memory_equal(root, want, 32);
		for (uint64_t i = 0; i < n; i++) {
			assert_int_equal(sb_merkle_inclusion(mem_read, m, i, n, proof, &len), SB_OK);
			assert_true(sb_merkle_inclusion_check(i, n, m->leaf[i], proof, len, root));
			assert_false(sb_merkle_inclusion_check(i, n, m->leaf[(i + 1) % N], proof,
							       len, root));
			if (n > 1)
				assert_false(sb_merkle_inclusion_check((i + 1) % n, n, m->leaf[i],
								       proof, len, root));
			if (len)
				assert_false(sb_merkle_inclusion_check(i, n, m->leaf[i], proof,
								       len - 1, root));
		}
		for (uint64_t k = 0; k <= n; k++) {
			if (k)
				mth(m, 0, k, rm);
			assert_int_equal(sb_merkle_consistency(mem_read, m, k, n, proof, &len), SB_OK);
			assert_true(sb_merkle_consistency_check(k, n, rm, root, proof, len));
			if (k && k < n) {
				memcpy(bad, rm, 32);
				bad[0] ^= 1;
				assert_false(sb_merkle_consistency_check(k, n, bad, root, proof, len));
				assert_false(sb_merkle_consistency_check(k, n, rm, bad, proof, len));
				if (len)
					assert_false(sb_merkle_consistency_check(k, n, rm, root,
										 proof, len - 1));
			}
		}
	}
	free(m);
}

struct gapctx {
	struct mem *m;
	struct sb_merkle_fold *f;
	unsigned hashes;
};

static int gap_push(void *ctx, uint64_t lo, uint64_t hi)
{
	struct gapctx *g = ctx;
	hash_t h;

	mth(g->m, lo, hi, h);
	g->hashes++;
	return sb_merkle_fold_push(g->f, lo, hi, h);
}

/* Multi-leaf proofs: for random subsets of every tree, the gaps' subtrees
 * and the subset's leaves fold into the root; a changed leaf does not. */
static void test_multi(void **state)
{
	struct mem *m = calloc(1, sizeof *m);
	struct sb_merkle_fold f;
	struct gapctx g = {m, &f, 0};
	hash_t root, got, h;

	(void)state;
	assert_non_null(m);
	build(m, N);
	srand(7);
	for (uint64_t n = 1; n <= N; n++) {
		mth(m, 0, n, root);
		for (int round = 0; round < 20; round++) {
			uint64_t prev = 0, bad = (uint64_t)rand() % n;
			int tamper = round % 2;
			sb_merkle_fold_init(&f, n);
			g.hashes = 0;
			for (uint64_t i = 0; i < n; i++) {
				if (rand() % 3 && i != bad)
					continue;
				assert_int_equal(sb_merkle_gap(prev, i, n, gap_push, &g), SB_OK);
				memcpy(h, m->leaf[i], 32);
				if (tamper && i == bad)
					h[5] ^= 0x40;
				assert_int_equal(sb_merkle_fold_push(&f, i, i + 1, h), SB_OK);
				prev = i + 1;
			}
			assert_int_equal(sb_merkle_gap(prev, n, n, gap_push, &g), SB_OK);
			assert_int_equal(sb_merkle_fold_root(&f, got), SB_OK);
			if (tamper)
				assert_memory_not_equal(got, root, 32);
			else
				assert_memory_equal(got, root, 32);
		}
	}
	/* ranges out of order or not nodes are refused */
	sb_merkle_fold_init(&f, 7);
	assert_int_equal(sb_merkle_fold_push(&f, 1, 2, root), SB_ERR_INVAL);
	assert_int_equal(sb_merkle_fold_push(&f, 0, 3, root), SB_ERR_INVAL);
	assert_int_equal(sb_merkle_fold_push(&f, 0, 4, root), SB_OK);
	assert_int_equal(sb_merkle_fold_push(&f, 4, 5, root), SB_OK);
	assert_int_equal(sb_merkle_fold_push(&f, 5, 7, root), SB_ERR_INVAL); /* [4,7) splits at 6 */
	assert_int_equal(sb_merkle_fold_push(&f, 5, 6, root), SB_OK);
	assert_int_equal(sb_merkle_fold_root(&f, got), SB_ERR_INVAL);
	assert_int_equal(sb_merkle_fold_push(&f, 6, 7, root), SB_OK);
	assert_int_equal(sb_merkle_fold_root(&f, got), SB_OK);
	sb_merkle_fold_init(&f, 7);
	assert_int_equal(sb_merkle_fold_push(&f, 0, 4, root), SB_OK);
	assert_int_equal(sb_merkle_fold_push(&f, 4, 7, root), SB_OK); /* the right edge */
	assert_int_equal(sb_merkle_fold_root(&f, got), SB_OK);
	free(m);
}

/* FIPS 180-4 (and its examples): "abc", the empty string, the two-block
 * message, a million 'a' one shot and in uneven pieces. */
static void test_sha256_vectors(void **state)
{
	static const char two_block[] =
	    "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	static const size_t pieces[] = {1, 63, 64, 65, 0, 127, 4096, 3};
	const size_t mb = 1000000;
	uint8_t want[SB_SHA256_BYTES], got[SB_SHA256_BYTES];
	uint8_t *a = malloc(mb);
	sb_sha256_state st;
	size_t off = 0, i = 0;

	(void)state;
	assert_non_null(a);
	from_hex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", want, 32);
	sb_sha256(got, "abc", 3);
	assert_memory_equal(got, want, 32);
	from_hex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", want, 32);
	sb_sha256(got, NULL, 0);
	assert_memory_equal(got, want, 32);
	from_hex("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1", want, 32);
	sb_sha256(got, two_block, sizeof two_block - 1);
	assert_memory_equal(got, want, 32);
	memset(a, 'a', mb);
	from_hex("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", want, 32);
	sb_sha256(got, a, mb);
	assert_memory_equal(got, want, 32);
	sb_sha256_init(&st);
	while (off < mb) {
		size_t n = pieces[i++ % (sizeof pieces / sizeof pieces[0])];

		n = n < mb - off ? n : mb - off;
		sb_sha256_update(&st, a + off, n);
		off += n;
	}
	sb_sha256_final(&st, got);
	assert_memory_equal(got, want, 32);
	free(a);
}

/* Every length from 0 to 300 bytes (each block boundary and padding case)
 * gives libsodium's digest. */
static void test_sha256_lengths(void **state)
{
	uint8_t in[300], want[SB_SHA256_BYTES], got[SB_SHA256_BYTES];

	(void)state;
	for (size_t i = 0; i < sizeof in; i++)
		in[i] = (uint8_t)(i * 131 + 7);
	for (size_t len = 0; len <= sizeof in; len++) {
		crypto_hash_sha256(want, in, len);
		sb_sha256(got, in, len);
		assert_memory_equal(got, want, 32);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sha256_vectors),
	    cmocka_unit_test(test_sha256_lengths),
	    cmocka_unit_test(test_vectors),
	    cmocka_unit_test(test_all_sizes),
	    cmocka_unit_test(test_multi),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
