/* blob.c - blob keys (BLAKE2b-256) and the blob table, with the re-keying
 * of format-2 tables (XXH3-128 keys). */
#include "engine/log/blob.h"

#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine/error.h"
#include "engine/log/mdb.h"

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;

/* Lets libsodium pick its fastest BLAKE2b for this CPU. */
static void sodium_start(void)
{
	if (sodium_init() < 0)
		return; /* the portable code it starts with gives the same hashes */
}

void sb_blob_hash(const void *data, size_t len, uint8_t hash[SB_HASH_LEN])
{
	pthread_once(&sodium_once, sodium_start);
	crypto_generichash(hash, SB_HASH_LEN, data, len, NULL, 0);
}

/* The XXH3-128 key format 2 gave data, in legacy form. */
static void legacy_hash(const void *data, size_t len, uint8_t hash[SB_HASH_LEN])
{
	XXH128_canonical_t c;

	XXH128_canonicalFromHash(&c, XXH3_128bits(data, len));
	memcpy(hash, c.digest, SB_HASH_LEGACY_LEN);
	memset(hash + SB_HASH_LEGACY_LEN, 0, SB_HASH_LEN - SB_HASH_LEGACY_LEN);
}

int sb_hash_is_legacy(const uint8_t hash[SB_HASH_LEN])
{
	static const uint8_t zero[SB_HASH_LEN - SB_HASH_LEGACY_LEN];

	return !memcmp(hash + SB_HASH_LEGACY_LEN, zero, sizeof zero);
}

void sb_hash_hex(const uint8_t hash[SB_HASH_LEN], char out[SB_HASH_HEX])
{
	sodium_bin2hex(out, SB_HASH_HEX, hash,
		       sb_hash_is_legacy(hash) ? SB_HASH_LEGACY_LEN : SB_HASH_LEN);
}

int sb_hash_parse(const char *hex, uint8_t hash[SB_HASH_LEN])
{
	size_t n = strnlen(hex, 2 * SB_HASH_LEN + 1);

	if (n != 2 * SB_HASH_LEN && n != 2 * SB_HASH_LEGACY_LEN)
		goto bad;
	memset(hash, 0, SB_HASH_LEN);
	for (size_t i = 0; i < n; i++) {
		char c = hex[i];
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (d < 0)
			goto bad;
		hash[i / 2] = (uint8_t)(i % 2 ? hash[i / 2] << 4 | d : d);
	}
	if (n == 2 * SB_HASH_LEN && sb_hash_is_legacy(hash))
		goto bad; /* would read as the legacy key of its first half */
	return SB_OK;
bad:
	return sb_seterr(SB_ERR_INVAL, "'%.70s' is not a blob key", hex);
}

int sb_blob_table_open(MDB_txn *txn, unsigned create, struct sb_blob_table *t)
{
	int rc;

	if ((rc = mdb_dbi_open(txn, "blobs", create, &t->blobs)) ||
	    (rc = mdb_dbi_open(txn, "blobmap", create, &t->map)))
		return sb_log_mdb_err(rc, "blob table: open");
	return SB_OK;
}

int sb_blob_table_put(MDB_txn *txn, const struct sb_blob_table *t,
		      const uint8_t key[SB_HASH_LEN], const void *data, size_t len)
{
	MDB_val k = {SB_HASH_LEN, (void *)key}, v = {len, (void *)data};
	int rc = mdb_put(txn, t->blobs, &k, &v, MDB_NOOVERWRITE);

	if (rc == MDB_KEYEXIST)
		return SB_OK;
	return sb_log_mdb_err(rc, "blob table: put");
}

int sb_blob_table_get(MDB_txn *txn, const struct sb_blob_table *t,
		      const uint8_t key[SB_HASH_LEN], const void **data, size_t *len)
{
	MDB_val k = {SB_HASH_LEN, (void *)key}, v;
	uint8_t got[SB_HASH_LEN];
	char hex[SB_HASH_HEX];
	int rc;

	sb_hash_hex(key, hex);
	if (sb_hash_is_legacy(key)) {
		k.mv_size = SB_HASH_LEGACY_LEN;
		rc = mdb_get(txn, t->map, &k, &v);
		if (rc == MDB_NOTFOUND)
			return sb_seterr(SB_ERR_NOTFOUND, "blob %s not found", hex);
		if (rc)
			return sb_log_mdb_err(rc, "blob table: read map");
		if (v.mv_size != SB_HASH_LEN || sb_hash_is_legacy(v.mv_data))
			return sb_seterr(SB_ERR_CORRUPT, "blob %s: map entry malformed", hex);
		k = v;
	}
	rc = mdb_get(txn, t->blobs, &k, &v);
	if (rc == MDB_NOTFOUND)
		return sb_seterr(SB_ERR_NOTFOUND, "blob %s not found", hex);
	if (rc)
		return sb_log_mdb_err(rc, "blob table: read");
	sb_blob_hash(v.mv_data, v.mv_size, got);
	if (memcmp(got, k.mv_data, SB_HASH_LEN))
		return sb_seterr(SB_ERR_CORRUPT, "blob %s fails its checksum", hex);
	*data = v.mv_data;
	*len = v.mv_size;
	return SB_OK;
}

/* Re-keys the blob under legacy key old (16 bytes): checks it, stores it
 * under its BLAKE2b-256 key, maps old to that key and removes old. The
 * content is copied to *buf (grown as needed) first: a write to the table
 * may move it. */
static int rekey_one(MDB_txn *txn, const struct sb_blob_table *t, const uint8_t *old,
		     uint8_t **buf, size_t *cap)
{
	uint8_t want[SB_HASH_LEN], key[SB_HASH_LEN];
	MDB_val k = {SB_HASH_LEGACY_LEN, (void *)old}, v;
	char hex[SB_HASH_HEX];
	size_t len;
	int rc;

	memcpy(want, old, SB_HASH_LEGACY_LEN);
	memset(want + SB_HASH_LEGACY_LEN, 0, SB_HASH_LEN - SB_HASH_LEGACY_LEN);
	sb_hash_hex(want, hex);
	if ((rc = mdb_get(txn, t->blobs, &k, &v)))
		return sb_log_mdb_err(rc, "log upgrade: read blob");
	len = v.mv_size;
	if (len > *cap) {
		uint8_t *nb = realloc(*buf, len);
		if (!nb)
			return SB_ERR_NOMEM;
		*buf = nb;
		*cap = len;
	}
	if (len)
		memcpy(*buf, v.mv_data, len);
	legacy_hash(*buf, len, key);
	if (memcmp(key, want, SB_HASH_LEN))
		return sb_seterr(SB_ERR_CORRUPT,
				 "log upgrade: blob %s does not match its XXH3-128 key", hex);
	sb_blob_hash(*buf, len, key);
	if ((rc = sb_blob_table_put(txn, t, key, *buf, len)))
		return rc;
	v.mv_size = SB_HASH_LEN;
	v.mv_data = key;
	if ((rc = mdb_put(txn, t->map, &k, &v, 0)) || (rc = mdb_del(txn, t->blobs, &k, NULL)))
		return sb_log_mdb_err(rc, "log upgrade: map blob");
	return SB_OK;
}

int sb_blob_table_upgrade(MDB_txn *txn, const struct sb_blob_table *t, uint64_t *rekeyed)
{
	uint8_t *olds = NULL, *buf = NULL;
	size_t n = 0, cap = 0;
	MDB_cursor *cur = NULL;
	MDB_stat st;
	MDB_val k, v;
	int rc;

	*rekeyed = 0;
	if ((rc = mdb_stat(txn, t->blobs, &st)) || (rc = mdb_cursor_open(txn, t->blobs, &cur))) {
		cur = NULL;
		rc = sb_log_mdb_err(rc, "log upgrade: blob table");
		goto out;
	}
	/* The old keys first, then the writes: the table changes under them. */
	if (st.ms_entries && !(olds = malloc(st.ms_entries * SB_HASH_LEGACY_LEN))) {
		rc = SB_ERR_NOMEM;
		goto out;
	}
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (k.mv_size != SB_HASH_LEGACY_LEN || n == st.ms_entries) {
			rc = sb_seterr(SB_ERR_CORRUPT,
				       "log upgrade: a format-2 blob table holds a key of %zu bytes",
				       k.mv_size);
			goto out;
		}
		memcpy(olds + n++ * SB_HASH_LEGACY_LEN, k.mv_data, SB_HASH_LEGACY_LEN);
	}
	if (rc != MDB_NOTFOUND) {
		rc = sb_log_mdb_err(rc, "log upgrade: blob table");
		goto out;
	}
	mdb_cursor_close(cur);
	cur = NULL;
	for (size_t i = 0; i < n; i++)
		if ((rc = rekey_one(txn, t, olds + i * SB_HASH_LEGACY_LEN, &buf, &cap)))
			goto out;
	*rekeyed = n;
	rc = SB_OK;
out:
	if (cur)
		mdb_cursor_close(cur);
	free(buf);
	free(olds);
	return rc;
}
