/* tree.c - the tree projection: RFC 9162 hashes of every record in C2SP
 * tiles. */
#include "projections/tree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/bytes.h"
#include "engine/error.h"
#include "engine/log/mdb.h"
#include "engine/sha256.h"

#define LEAF_VERSION 1
#define TILE_BYTES (SB_TREE_TILE * SB_MERKLE_HASH)
#define KEY_MAX 64

void sb_tree_commit(const uint8_t salt[SB_SALT_LEN], const void *payload, size_t len,
		    uint8_t out[SB_MERKLE_HASH])
{
	sb_sha256_state st;

	sb_sha256_init(&st);
	sb_sha256_update(&st, salt, SB_SALT_LEN);
	sb_sha256_update(&st, payload, len);
	sb_sha256_final(&st, out);
}

size_t sb_tree_leaf(const struct sb_event *ev, const uint8_t commit[SB_MERKLE_HASH],
		    uint8_t out[SB_TREE_LEAF_MAX])
{
	size_t tl = strnlen(ev->type, SB_TYPE_MAX - 1), rl = strnlen(ev->run, SB_RUN_MAX - 1);
	uint8_t *p = out;

	*p++ = LEAF_VERSION;
	sb_be64_put(p, ev->offset);
	sb_be64_put(p + 8, ev->seq);
	sb_be64_put(p + 16, ev->ts_ns);
	p += 24;
	*p++ = (uint8_t)ev->source;
	*p++ = (uint8_t)tl;
	memcpy(p, ev->type, tl);
	p += tl;
	*p++ = (uint8_t)rl;
	memcpy(p, ev->run, rl);
	p += rl;
	memcpy(p, commit, SB_MERKLE_HASH);
	return (size_t)(p + SB_MERKLE_HASH - out);
}

void sb_tree_leaf_hash(const struct sb_event *ev, const uint8_t salt[SB_SALT_LEN],
		       uint8_t out[SB_MERKLE_HASH])
{
	uint8_t commit[SB_MERKLE_HASH], leaf[SB_TREE_LEAF_MAX];

	sb_tree_commit(salt, ev->payload, ev->payload_len, commit);
	sb_merkle_leaf(leaf, sb_tree_leaf(ev, commit, leaf), out);
}

/* Writes the key of tile (level, n): "tile/L/" and n in C2SP's path form,
 * groups of three digits, all but the last with an 'x' before them. */
static MDB_val tile_key(unsigned level, uint64_t n, char buf[KEY_MAX])
{
	char digits[32];
	int len = snprintf(buf, KEY_MAX, "tile/%u/", level);
	int nd = snprintf(digits, sizeof digits, "%llu", (unsigned long long)n);
	int pad = (3 - nd % 3) % 3;
	char grouped[48];
	int g = 0;

	for (int i = 0; i < pad + nd; i++) {
		if (i % 3 == 0 && i + 3 < pad + nd)
			grouped[g++] = 'x';
		grouped[g++] = i < pad ? '0' : digits[i - pad];
		if (i % 3 == 2 && i + 1 < pad + nd)
			grouped[g++] = '/';
	}
	grouped[g] = 0;
	len += snprintf(buf + len, KEY_MAX - (size_t)len, "%s", grouped);
	return (MDB_val){(size_t)len, buf};
}

int sb_tree_size(struct sb_proj_txn *t, uint64_t *n)
{
	MDB_val v;
	int rc = sb_proj_get(t, "size", 4, &v);

	*n = 0;
	if (rc == SB_ERR_NOTFOUND)
		return SB_OK;
	if (rc)
		return rc;
	if (v.mv_size != 8)
		return sb_seterr(SB_ERR_CORRUPT, "tree: size malformed");
	*n = sb_be64_get(v.mv_data);
	return SB_OK;
}

/* Hashes the w (a power of two) hashes at h up to one, in place. */
static void hash_up(uint8_t (*h)[SB_MERKLE_HASH], size_t w)
{
	for (; w > 1; w /= 2)
		for (size_t i = 0; i < w / 2; i++)
			sb_merkle_node(h[2 * i], h[2 * i + 1], h[i]);
}

int sb_tree_read(void *ctx, unsigned level, uint64_t index, uint8_t out[SB_MERKLE_HASH])
{
	struct sb_proj_txn *t = ctx;
	unsigned tl = level / 8, r = level % 8;
	uint64_t first = index << r, w = 1ull << r;
	uint8_t h[SB_TREE_TILE][SB_MERKLE_HASH];
	char kb[KEY_MAX];
	MDB_val k = tile_key(tl, first / SB_TREE_TILE, kb), v;
	int rc = sb_proj_get(t, k.mv_data, k.mv_size, &v);

	if (rc == SB_ERR_NOTFOUND || (!rc && v.mv_size < (first % SB_TREE_TILE + w) * SB_MERKLE_HASH))
		return sb_seterr(SB_ERR_CORRUPT, "tree: %.*s lacks the hashes of level %u, index %llu",
				 (int)k.mv_size, kb, level, (unsigned long long)index);
	if (rc)
		return rc;
	memcpy(h, (const uint8_t *)v.mv_data + first % SB_TREE_TILE * SB_MERKLE_HASH,
	       w * SB_MERKLE_HASH);
	hash_up(h, w);
	memcpy(out, h[0], SB_MERKLE_HASH);
	return SB_OK;
}

/* Appends hash h as entry i of the tree's tiles of level `level`, and each
 * tile it fills as an entry of the tiles a level up. */
static int tiles_append(struct sb_proj_txn *t, unsigned level, uint64_t i,
			const uint8_t h[SB_MERKLE_HASH])
{
	static __thread uint8_t tile[SB_TREE_TILE][SB_MERKLE_HASH];
	uint8_t up[SB_MERKLE_HASH];
	char kb[KEY_MAX];
	int rc;

	memcpy(up, h, SB_MERKLE_HASH);
	for (;;) {
		MDB_val k = tile_key(level, i / SB_TREE_TILE, kb), v;
		size_t pos = i % SB_TREE_TILE;
		rc = sb_proj_get(t, k.mv_data, k.mv_size, &v);
		if (rc && rc != SB_ERR_NOTFOUND)
			return rc;
		if ((rc ? 0 : v.mv_size) != pos * SB_MERKLE_HASH)
			return sb_seterr(SB_ERR_CORRUPT, "tree: %s holds %zu bytes, not %zu", kb,
					 rc ? 0 : v.mv_size, pos * SB_MERKLE_HASH);
		if (pos)
			memcpy(tile, v.mv_data, pos * SB_MERKLE_HASH);
		memcpy(tile[pos], up, SB_MERKLE_HASH);
		if ((rc = sb_proj_put(t, k.mv_data, k.mv_size, tile, (pos + 1) * SB_MERKLE_HASH)))
			return rc;
		if (pos != SB_TREE_TILE - 1)
			return SB_OK;
		hash_up(tile, SB_TREE_TILE);
		memcpy(up, tile[0], SB_MERKLE_HASH);
		i /= SB_TREE_TILE;
		level++;
	}
}

/* A transaction's fold: the tree's size and its open level-0 tile, kept
 * here and written once at the transaction's end (tree_end), instead of
 * read and rewritten for every leaf. */
struct tree_state {
	uint64_t n;    /* leaves, this batch's included */
	size_t fill;   /* hashes in tile: leaves n - fill to n - 1 */
	uint8_t tile[SB_TREE_TILE][SB_MERKLE_HASH];
};

/* Reads the size and the open tile into a new state. */
static int tree_load(struct sb_proj_txn *t, struct tree_state **out)
{
	struct tree_state *st = malloc(sizeof *st);
	char kb[KEY_MAX];
	MDB_val k, v;
	int rc;

	if (!st)
		return SB_ERR_NOMEM;
	if ((rc = sb_tree_size(t, &st->n))) {
		free(st);
		return rc;
	}
	st->fill = st->n % SB_TREE_TILE;
	k = tile_key(0, st->n / SB_TREE_TILE, kb);
	rc = st->fill ? sb_proj_get(t, k.mv_data, k.mv_size, &v) : SB_OK;
	if (!rc && st->fill && v.mv_size != st->fill * SB_MERKLE_HASH)
		rc = sb_seterr(SB_ERR_CORRUPT, "tree: %s holds %zu bytes, not %zu", kb,
			       v.mv_size, st->fill * SB_MERKLE_HASH);
	if (rc) {
		free(st);
		return rc == SB_ERR_NOTFOUND ? sb_seterr(SB_ERR_CORRUPT, "tree: %s is missing", kb)
					     : rc;
	}
	if (st->fill)
		memcpy(st->tile, v.mv_data, v.mv_size);
	*out = st;
	return SB_OK;
}

static int tree_apply(struct sb_proj_txn *t, const struct sb_event *ev, const void *rec,
		      size_t len)
{
	struct tree_state *st = t->state;
	uint8_t salt[SB_SALT_LEN], up[SB_MERKLE_HASH];
	char kb[KEY_MAX];
	MDB_val k;
	int rc;

	if (!st) {
		if ((rc = tree_load(t, &st)))
			return rc;
		t->state = st;
	}
	if (ev->offset != st->n + 1)
		return sb_seterr(SB_ERR_CORRUPT, "tree: offset %llu follows leaf %llu",
				 (unsigned long long)ev->offset, (unsigned long long)st->n);
	if ((rc = sb_log_salt(t->log, t->txn, ev->offset, 1, salt)))
		return rc;
	sb_tree_leaf_hash(ev, salt, st->tile[st->fill++]);
	st->n++;
	if (st->fill < SB_TREE_TILE)
		return SB_OK;
	/* a full tile: written, and its hash an entry of the level above */
	k = tile_key(0, (st->n - 1) / SB_TREE_TILE, kb);
	if ((rc = sb_proj_put(t, k.mv_data, k.mv_size, st->tile, sizeof st->tile)))
		return rc;
	hash_up(st->tile, SB_TREE_TILE);
	memcpy(up, st->tile[0], SB_MERKLE_HASH);
	st->fill = 0;
	return tiles_append(t, 1, (st->n - 1) / SB_TREE_TILE, up);
}

/* Writes the open tile and the size the batch reached. */
static int tree_end(struct sb_proj_txn *t, int keep)
{
	struct tree_state *st = t->state;
	uint8_t b[8];
	char kb[KEY_MAX];
	MDB_val k;
	int rc = SB_OK;

	if (!st)
		return SB_OK;
	t->state = NULL;
	if (keep && st->fill) {
		k = tile_key(0, st->n / SB_TREE_TILE, kb);
		rc = sb_proj_put(t, k.mv_data, k.mv_size, st->tile, st->fill * SB_MERKLE_HASH);
	}
	if (keep && !rc) {
		sb_be64_put(b, st->n);
		rc = sb_proj_put(t, "size", 4, b, 8);
	}
	free(st);
	return rc;
}

const struct sb_projection sb_proj_tree = {
	.name = "tree",
	.version = 1,
	.apply_record = tree_apply,
	.end = tree_end,
};

int sb_tree_open(sb_log *log, MDB_txn *txn, struct sb_proj_txn *t)
{
	int rc = mdb_dbi_open(txn, "p.tree", 0, &t->dbi);

	t->txn = txn;
	t->log = log;
	if (rc == MDB_NOTFOUND)
		return sb_seterr(SB_ERR_NOTFOUND, "the log has no tree yet (the daemon makes it)");
	return sb_log_mdb_err(rc, "tree: open");
}

int sb_tree_checkpoint(struct sb_proj_txn *t, const struct sb_note_key *k, struct sb_ckpt *c,
		       char note[SB_CKPT_MAX])
{
	int rc;

	memset(c, 0, sizeof *c);
	snprintf(c->origin, sizeof c->origin, "%s", k->name);
	if ((rc = sb_tree_size(t, &c->size)) || (rc = sb_merkle_root(sb_tree_read, t, c->size, c->root)))
		return rc;
	sb_ckpt_sign(c, k, note);
	return SB_OK;
}
