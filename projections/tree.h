/* tree.h - the tree projection: a Merkle tree over every record.
 *
 * Every record of the log is a leaf, in offset order (leaf i is offset
 * i + 1), hashed as RFC 9162 says (engine/log/merkle.h). A leaf is the
 * record's header fields and a commitment to its payload, SHA-256(salt ||
 * payload), with the record's salt (engine/log/log.h, sb_log_salt), so a
 * payload can be withheld and its leaf still checked; SPEC.md (Audit) gives
 * the bytes. The projection keeps the tree's hashes in the tiles of C2SP
 * tlog-tiles in its database p.tree:
 *   "size"                      the leaves folded (8 bytes big-endian)
 *   "tile/L/N" (N as C2SP's x001/x234/067 path)
 *                               the tile's hashes: 32 bytes each, 256 when
 *                               full, fewer while it grows (the partial
 *                               tile "tile/L/N.p/W")
 * An append writes one level-0 tile and, when a tile fills, one tile a
 * level up (O(log n) at worst); a rebuild from offset 0 finds the same
 * salts and so makes the same tiles.
 */
#ifndef SB_TREE_H
#define SB_TREE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/log/checkpoint.h"
#include "engine/log/event.h"
#include "engine/log/log.h"
#include "engine/log/merkle.h"
#include "projections/projection.h"

extern const struct sb_projection sb_proj_tree;

/* The longest leaf: version, offset, seq, ts_ns, source, type and run
 * with their lengths, commitment. */
#define SB_TREE_LEAF_MAX (1 + 3 * 8 + 1 + 1 + SB_TYPE_MAX + 1 + SB_RUN_MAX + SB_MERKLE_HASH)
#define SB_TREE_TILE 256 /* hashes a full tile holds */

/* Writes SHA-256(salt || payload) into out: the payload's commitment. */
void sb_tree_commit(const uint8_t salt[SB_SALT_LEN], const void *payload, size_t len,
		    uint8_t out[SB_MERKLE_HASH]);

/* Writes the leaf of ev (offset, seq, ts_ns, source, type, run) with the
 * payload commitment commit into out and returns its length. */
size_t sb_tree_leaf(const struct sb_event *ev, const uint8_t commit[SB_MERKLE_HASH],
		    uint8_t out[SB_TREE_LEAF_MAX]);

/* Writes the leaf hash of ev, its payload committed with salt, into out. */
void sb_tree_leaf_hash(const struct sb_event *ev, const uint8_t salt[SB_SALT_LEN],
		       uint8_t out[SB_MERKLE_HASH]);

/* Points t at the tree's state in txn, a transaction of log's environment
 * (read or write; the tree must have been made by a projector, in this or
 * an earlier process). Errors: SB_ERR_NOTFOUND (no tree yet), SB_ERR_IO. */
int sb_tree_open(sb_log *log, MDB_txn *txn, struct sb_proj_txn *t);

/* Reads the number of leaves folded into *n (0 for none). Errors:
 * SB_ERR_CORRUPT, SB_ERR_IO. */
int sb_tree_size(struct sb_proj_txn *t, uint64_t *n);

/* An sb_merkle_reader over the tiles; ctx is a struct sb_proj_txn * from
 * sb_tree_open. Errors: SB_ERR_CORRUPT (a tile missing or too short for
 * the subtree asked), SB_ERR_IO. */
int sb_tree_read(void *ctx, unsigned level, uint64_t index, uint8_t out[SB_MERKLE_HASH]);

/* Fills *c with the tree's size and root as of t's transaction (origin:
 * k's name) and writes it, signed by k, into note. Errors: those of
 * sb_tree_size and sb_tree_read. */
int sb_tree_checkpoint(struct sb_proj_txn *t, const struct sb_note_key *k, struct sb_ckpt *c,
		       char note[SB_CKPT_MAX]);

#endif
