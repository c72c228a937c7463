/* merkle.h - RFC 9162 Merkle tree hashing and proofs.
 *
 * A tree of n leaves: a leaf's hash is SHA-256(0x00 || leaf), a node's
 * SHA-256(0x01 || left || right), the tree of n > 1 leaves splits at k, the
 * largest power of two below n (RFC 9162 2.1.1); the empty tree's hash is
 * SHA-256 of nothing. Leaves are numbered from 0.
 *
 * The functions that build hashes read the tree through a reader: the hash
 * of the perfect subtree at (level, index), covering leaves [index << level,
 * (index + 1) << level), which must lie inside the tree. The tree projection
 * (projections/tree.c) reads them from its tiles; tests from memory.
 *
 * A multi-leaf proof (SPEC.md, Audit) lists, left to right, the hashes of
 * the largest subtrees of the tree that hold none of the proven leaves;
 * sb_merkle_gap names them for the leaves between two proven ones, and a
 * sb_merkle_fold folds leaves and such subtrees, left to right, into the
 * root in O(log n) memory.
 */
#ifndef SB_MERKLE_H
#define SB_MERKLE_H

#include <stddef.h>
#include <stdint.h>

#define SB_MERKLE_HASH 32
#define SB_MERKLE_PROOF_MAX 64 /* hashes an inclusion or consistency proof holds at most */

/* Writes SHA-256(0x00 || data) into out. */
void sb_merkle_leaf(const void *data, size_t len, uint8_t out[SB_MERKLE_HASH]);

/* Writes SHA-256(0x01 || left || right) into out (out may be left or right). */
void sb_merkle_node(const uint8_t left[SB_MERKLE_HASH], const uint8_t right[SB_MERKLE_HASH],
		    uint8_t out[SB_MERKLE_HASH]);

/* Reads the hash of the perfect subtree at (level, index) into out. Returns
 * 0, or an error (engine/error.h) that the caller passes on. */
typedef int (*sb_merkle_reader)(void *ctx, unsigned level, uint64_t index,
				uint8_t out[SB_MERKLE_HASH]);

/* Writes the hash of leaves [lo, hi) (hi > lo) into out, as the RFC's
 * recursion makes it when that range is a node of some tree (a perfect
 * subtree, or [lo, n) of a tree of n leaves). Errors: the reader's. */
int sb_merkle_range(sb_merkle_reader rd, void *ctx, uint64_t lo, uint64_t hi,
		    uint8_t out[SB_MERKLE_HASH]);

/* Writes the root of the tree of n leaves (n may be 0) into out. Errors:
 * the reader's. */
int sb_merkle_root(sb_merkle_reader rd, void *ctx, uint64_t n, uint8_t out[SB_MERKLE_HASH]);

/* Writes the inclusion proof of leaf i in the tree of n leaves (RFC 9162
 * 2.1.3.1) into proof, *len hashes (at most SB_MERKLE_PROOF_MAX). Errors:
 * SB_ERR_INVAL (i >= n), the reader's. */
int sb_merkle_inclusion(sb_merkle_reader rd, void *ctx, uint64_t i, uint64_t n,
			uint8_t proof[][SB_MERKLE_HASH], size_t *len);

/* Writes the consistency proof from the tree of m leaves to that of n
 * (RFC 9162 2.1.4.1; empty for m == 0 or m == n) into proof, *len hashes.
 * Errors: SB_ERR_INVAL (m > n), the reader's. */
int sb_merkle_consistency(sb_merkle_reader rd, void *ctx, uint64_t m, uint64_t n,
			  uint8_t proof[][SB_MERKLE_HASH], size_t *len);

/* Returns 1 when proof (len hashes) proves leaf hash leaf at i in the tree
 * of n leaves with root (RFC 9162 2.1.3.2), else 0. */
int sb_merkle_inclusion_check(uint64_t i, uint64_t n, const uint8_t leaf[SB_MERKLE_HASH],
			      const uint8_t proof[][SB_MERKLE_HASH], size_t len,
			      const uint8_t root[SB_MERKLE_HASH]);

/* Returns 1 when proof (len hashes) proves that the tree of n leaves with
 * root rn extends the tree of m leaves with root rm (RFC 9162 2.1.4.2; for
 * m == n the proof is empty and the roots equal; m == 0 always holds with
 * an empty proof), else 0. */
int sb_merkle_consistency_check(uint64_t m, uint64_t n, const uint8_t rm[SB_MERKLE_HASH],
				const uint8_t rn[SB_MERKLE_HASH],
				const uint8_t proof[][SB_MERKLE_HASH], size_t len);

/* Calls fn for each of the largest nodes of the tree of n leaves lying
 * inside leaves [x, y) (x <= y <= n), left to right, until fn returns
 * non-zero (returned). These are the multi-leaf proof's subtrees between
 * two proven leaves (or before the first, or after the last). */
int sb_merkle_gap(uint64_t x, uint64_t y, uint64_t n,
		  int (*fn)(void *ctx, uint64_t lo, uint64_t hi), void *ctx);

/* A fold of consecutive ranges of a tree of n leaves into its root. */
struct sb_merkle_fold {
	uint64_t n, next; /* the tree's size; the first leaf not folded yet */
	unsigned depth;
	uint64_t lo[SB_MERKLE_PROOF_MAX + 2], hi[SB_MERKLE_PROOF_MAX + 2];
	uint8_t h[SB_MERKLE_PROOF_MAX + 2][SB_MERKLE_HASH];
};

/* Starts a fold of the tree of n leaves. */
void sb_merkle_fold_init(struct sb_merkle_fold *f, uint64_t n);

/* Folds in the hash of leaves [lo, hi), which must start where the last
 * range ended and be a node of the tree. Errors: SB_ERR_INVAL (a range out
 * of order, past n, or not a node). */
int sb_merkle_fold_push(struct sb_merkle_fold *f, uint64_t lo, uint64_t hi,
			const uint8_t h[SB_MERKLE_HASH]);

/* Writes the root of the folded tree into out. Errors: SB_ERR_INVAL (the
 * ranges pushed do not cover all n leaves). */
int sb_merkle_fold_root(struct sb_merkle_fold *f, uint8_t out[SB_MERKLE_HASH]);

#endif
