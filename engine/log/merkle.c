/* merkle.c - RFC 9162 Merkle tree hashing and proofs. */
#include "engine/log/merkle.h"

#include <string.h>

#include "engine/error.h"
#include "engine/sha256.h"

typedef uint8_t hash_t[SB_MERKLE_HASH];

void sb_merkle_leaf(const void *data, size_t len, uint8_t out[SB_MERKLE_HASH])
{
	sb_sha256_state st;
	uint8_t z = 0;

	sb_sha256_init(&st);
	sb_sha256_update(&st, &z, 1);
	sb_sha256_update(&st, data, len);
	sb_sha256_final(&st, out);
}

void sb_merkle_node(const uint8_t left[SB_MERKLE_HASH], const uint8_t right[SB_MERKLE_HASH],
		    uint8_t out[SB_MERKLE_HASH])
{
	uint8_t buf[1 + 2 * SB_MERKLE_HASH];

	buf[0] = 1;
	memcpy(buf + 1, left, SB_MERKLE_HASH);
	memcpy(buf + 1 + SB_MERKLE_HASH, right, SB_MERKLE_HASH);
	sb_sha256(out, buf, sizeof buf);
}

/* The largest power of two below x (x > 1). */
static uint64_t split(uint64_t x)
{
	return 1ull << (63 - __builtin_clzll(x - 1));
}

static int is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

int sb_merkle_range(sb_merkle_reader rd, void *ctx, uint64_t lo, uint64_t hi,
		    uint8_t out[SB_MERKLE_HASH])
{
	uint64_t size = hi - lo, k;
	hash_t l, r;
	int rc;

	if (is_pow2(size) && lo % size == 0)
		return rd(ctx, (unsigned)__builtin_ctzll(size), lo / size, out);
	k = split(size);
	if ((rc = sb_merkle_range(rd, ctx, lo, lo + k, l)) ||
	    (rc = sb_merkle_range(rd, ctx, lo + k, hi, r)))
		return rc;
	sb_merkle_node(l, r, out);
	return SB_OK;
}

int sb_merkle_root(sb_merkle_reader rd, void *ctx, uint64_t n, uint8_t out[SB_MERKLE_HASH])
{
	if (!n) {
		sb_sha256(out, NULL, 0);
		return SB_OK;
	}
	return sb_merkle_range(rd, ctx, 0, n, out);
}

/* Reverses the first n hashes of p. */
static void reverse(uint8_t p[][SB_MERKLE_HASH], size_t n)
{
	hash_t t;

	for (size_t a = 0, b = n ? n - 1 : 0; a < b; a++, b--) {
		memcpy(t, p[a], SB_MERKLE_HASH);
		memcpy(p[a], p[b], SB_MERKLE_HASH);
		memcpy(p[b], t, SB_MERKLE_HASH);
	}
}

int sb_merkle_inclusion(sb_merkle_reader rd, void *ctx, uint64_t i, uint64_t n,
			uint8_t proof[][SB_MERKLE_HASH], size_t *len)
{
	uint64_t lo = 0, hi = n, k;
	int rc = SB_OK;

	*len = 0;
	if (i >= n)
		return sb_seterr(SB_ERR_INVAL, "leaf %llu is not in a tree of %llu",
				 (unsigned long long)i, (unsigned long long)n);
	while (hi - lo > 1 && !rc) {
		k = split(hi - lo);
		if (i < lo + k) {
			rc = sb_merkle_range(rd, ctx, lo + k, hi, proof[(*len)++]);
			hi = lo + k;
		} else {
			rc = sb_merkle_range(rd, ctx, lo, lo + k, proof[(*len)++]);
			lo += k;
		}
	}
	reverse(proof, *len);
	return rc;
}

int sb_merkle_consistency(sb_merkle_reader rd, void *ctx, uint64_t m, uint64_t n,
			  uint8_t proof[][SB_MERKLE_HASH], size_t *len)
{
	uint64_t lo = 0, hi = n, k;
	int whole = 1, rc = SB_OK;

	*len = 0;
	if (m > n)
		return sb_seterr(SB_ERR_INVAL, "a tree of %llu cannot extend one of %llu",
				 (unsigned long long)n, (unsigned long long)m);
	if (!m)
		return SB_OK;
	while (!rc) {
		if (m == hi - lo) {
			if (!whole)
				rc = sb_merkle_range(rd, ctx, lo, hi, proof[(*len)++]);
			break;
		}
		k = split(hi - lo);
		if (m <= k) {
			rc = sb_merkle_range(rd, ctx, lo + k, hi, proof[(*len)++]);
			hi = lo + k;
		} else {
			rc = sb_merkle_range(rd, ctx, lo, lo + k, proof[(*len)++]);
			lo += k;
			m -= k;
			whole = 0;
		}
	}
	reverse(proof, *len);
	return rc;
}

/* Shifts fn and sn right until fn's lowest bit is set or fn is 0. */
static void shift_even(uint64_t *fn, uint64_t *sn)
{
	while (*fn && !(*fn & 1)) {
		*fn >>= 1;
		*sn >>= 1;
	}
}

int sb_merkle_inclusion_check(uint64_t i, uint64_t n, const uint8_t leaf[SB_MERKLE_HASH],
			      const uint8_t proof[][SB_MERKLE_HASH], size_t len,
			      const uint8_t root[SB_MERKLE_HASH])
{
	uint64_t fn = i, sn = n - 1;
	hash_t r;

	if (i >= n)
		return 0;
	memcpy(r, leaf, SB_MERKLE_HASH);
	for (size_t p = 0; p < len; p++) {
		if (!sn)
			return 0;
		if ((fn & 1) || fn == sn) {
			sb_merkle_node(proof[p], r, r);
			if (!(fn & 1))
				shift_even(&fn, &sn);
		} else {
			sb_merkle_node(r, proof[p], r);
		}
		fn >>= 1;
		sn >>= 1;
	}
	return sn == 0 && !memcmp(r, root, SB_MERKLE_HASH);
}

int sb_merkle_consistency_check(uint64_t m, uint64_t n, const uint8_t rm[SB_MERKLE_HASH],
				const uint8_t rn[SB_MERKLE_HASH],
				const uint8_t proof[][SB_MERKLE_HASH], size_t len)
{
	uint64_t fn, sn;
	const uint8_t *first;
	size_t p = 0;
	hash_t fr, sr;

	if (m > n)
		return 0;
	if (m == 0 || m == n)
		return len == 0 && (m == 0 || !memcmp(rm, rn, SB_MERKLE_HASH));
	if (is_pow2(m)) {
		first = rm; /* the proof starts with the old root, left out */
	} else {
		if (!len)
			return 0;
		first = proof[p++];
	}
	fn = m - 1;
	sn = n - 1;
	while (fn & 1) {
		fn >>= 1;
		sn >>= 1;
	}
	memcpy(fr, first, SB_MERKLE_HASH);
	memcpy(sr, first, SB_MERKLE_HASH);
	for (; p < len; p++) {
		if (!sn)
			return 0;
		if ((fn & 1) || fn == sn) {
			sb_merkle_node(proof[p], fr, fr);
			sb_merkle_node(proof[p], sr, sr);
			if (!(fn & 1))
				shift_even(&fn, &sn);
		} else {
			sb_merkle_node(sr, proof[p], sr);
		}
		fn >>= 1;
		sn >>= 1;
	}
	return sn == 0 && !memcmp(fr, rm, SB_MERKLE_HASH) && !memcmp(sr, rn, SB_MERKLE_HASH);
}

/* The gap's walk down node [lo, hi): emits it when it lies in [x, y). */
static int gap_walk(uint64_t lo, uint64_t hi, uint64_t x, uint64_t y,
		    int (*fn)(void *ctx, uint64_t lo, uint64_t hi), void *ctx)
{
	uint64_t k;
	int rc;

	if (hi <= x || lo >= y)
		return 0;
	if (lo >= x && hi <= y)
		return fn(ctx, lo, hi);
	k = split(hi - lo);
	if ((rc = gap_walk(lo, lo + k, x, y, fn, ctx)))
		return rc;
	return gap_walk(lo + k, hi, x, y, fn, ctx);
}

int sb_merkle_gap(uint64_t x, uint64_t y, uint64_t n,
		  int (*fn)(void *ctx, uint64_t lo, uint64_t hi), void *ctx)
{
	if (x >= y || y > n)
		return 0;
	return gap_walk(0, n, x, y, fn, ctx);
}

void sb_merkle_fold_init(struct sb_merkle_fold *f, uint64_t n)
{
	f->n = n;
	f->next = 0;
	f->depth = 0;
}

/* 1 when [lo, hi) is a node of the tree of n leaves. */
static int is_node(uint64_t lo, uint64_t hi, uint64_t n)
{
	uint64_t s = 0;

	if (hi <= lo || hi > n)
		return 0;
	if (is_pow2(hi - lo) && lo % (hi - lo) == 0)
		return 1;
	if (hi != n)
		return 0;
	while (s < lo && n - s > 1) /* walk the right edge of the tree */
		s += split(n - s);
	return s == lo;
}

/* 1 when entries a and a + 1 are both perfect, of one size, and make one
 * aligned perfect subtree. */
static int mergeable(const struct sb_merkle_fold *f, unsigned a)
{
	uint64_t s = f->hi[a] - f->lo[a];

	return is_pow2(s) && f->hi[a + 1] - f->lo[a + 1] == s && f->lo[a] % (2 * s) == 0;
}

int sb_merkle_fold_push(struct sb_merkle_fold *f, uint64_t lo, uint64_t hi,
			const uint8_t h[SB_MERKLE_HASH])
{
	unsigned d;

	if (lo != f->next || !is_node(lo, hi, f->n))
		return sb_seterr(SB_ERR_INVAL, "leaves [%llu, %llu) do not come next in a tree of %llu",
				 (unsigned long long)lo, (unsigned long long)hi,
				 (unsigned long long)f->n);
	if (f->depth == sizeof f->lo / sizeof f->lo[0])
		return sb_seterr(SB_ERR_INVAL, "fold too deep");
	d = f->depth++;
	f->lo[d] = lo;
	f->hi[d] = hi;
	memcpy(f->h[d], h, SB_MERKLE_HASH);
	f->next = hi;
	while (f->depth >= 2 && mergeable(f, f->depth - 2)) {
		d = f->depth - 2;
		sb_merkle_node(f->h[d], f->h[d + 1], f->h[d]);
		f->hi[d] = f->hi[d + 1];
		f->depth--;
	}
	return SB_OK;
}

int sb_merkle_fold_root(struct sb_merkle_fold *f, uint8_t out[SB_MERKLE_HASH])
{
	hash_t r;

	if (f->next != f->n)
		return sb_seterr(SB_ERR_INVAL, "the ranges end at leaf %llu of %llu",
				 (unsigned long long)f->next, (unsigned long long)f->n);
	if (!f->n) {
		sb_sha256(out, NULL, 0);
		return SB_OK;
	}
	memcpy(r, f->h[f->depth - 1], SB_MERKLE_HASH);
	for (unsigned d = f->depth - 1; d-- > 0;)
		sb_merkle_node(f->h[d], r, r);
	memcpy(out, r, SB_MERKLE_HASH);
	return SB_OK;
}
