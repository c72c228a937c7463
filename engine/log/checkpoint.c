/* checkpoint.c - signed checkpoints (C2SP signed-note, tlog-checkpoint)
 * and the installation's Ed25519 key. */
#include "engine/log/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/home.h"
#include "engine/proc.h"
#include "engine/sha256.h"

#define KEY_FILE "audit.key"
#define OLD_KEYS "audit.keys.old"
#define ALG_ED25519 1
#define B64(n) sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL)
static const char em_dash[] = "\xe2\x80\x94 ";

static uint32_t key_hash(const char *name, const uint8_t pk[32])
{
	sb_sha256_state st;
	uint8_t sep[2] = {'\n', ALG_ED25519}, h[32];

	sb_sha256_init(&st);
	sb_sha256_update(&st, (const uint8_t *)name, strlen(name));
	sb_sha256_update(&st, sep, 2);
	sb_sha256_update(&st, pk, 32);
	sb_sha256_final(&st, h);
	return (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
}

/* Decodes base64 s (slen bytes) into exactly n bytes of out. */
static int b64_exact(const char *s, size_t slen, uint8_t *out, size_t n)
{
	size_t got = 0;

	if (sodium_base642bin(out, n, s, slen, NULL, &got, NULL, sodium_base64_VARIANT_ORIGINAL) ||
	    got != n)
		return -1;
	return 0;
}

/* A key name: printable ASCII, no '+' and no space. */
static int name_ok(const char *s, size_t n)
{
	if (!n || n >= SB_NOTE_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (s[i] <= ' ' || s[i] > '~' || s[i] == '+')
			return 0;
	return 1;
}

/* Splits "NAME+HASH+BASE64" at its first two '+' (a name has none; base64
 * may) into name, hash (8 hex digits) and the base64 tail, which must be
 * 0x01 || 32 bytes (into key). */
static int key_fields(const char *t, size_t len, struct sb_note_key *k, uint8_t key[32])
{
	const char *p1 = memchr(t, '+', len), *p2;
	uint8_t raw[33];
	char hex[9];
	unsigned long h;

	if (!p1 || !name_ok(t, (size_t)(p1 - t)) ||
	    !(p2 = memchr(p1 + 1, '+', len - (size_t)(p1 + 1 - t))) || p2 - p1 != 9)
		return -1;
	memcpy(k->name, t, (size_t)(p1 - t));
	k->name[p1 - t] = 0;
	memcpy(hex, p1 + 1, 8);
	hex[8] = 0;
	if (strspn(hex, "0123456789abcdef") != 8)
		return -1;
	h = strtoul(hex, NULL, 16);
	k->hash = (uint32_t)h;
	if (b64_exact(p2 + 1, len - (size_t)(p2 + 1 - t), raw, sizeof raw) || raw[0] != ALG_ED25519)
		return -1;
	memcpy(key, raw + 1, 32);
	return 0;
}

int sb_key_parse(const char *text, struct sb_note_key *k)
{
	size_t len;

	memset(k, 0, sizeof *k);
	text += strspn(text, " \t\r\n");
	len = strcspn(text, " \t\r\n");
	if (key_fields(text, len, k, k->pk) || key_hash(k->name, k->pk) != k->hash)
		return sb_seterr(SB_ERR_INVAL, "not a verifier key (NAME+HASH+BASE64)");
	return SB_OK;
}

void sb_key_verifier(const struct sb_note_key *k, char out[SB_VKEY_MAX])
{
	uint8_t raw[33] = {ALG_ED25519};
	char b[B64(33)];

	memcpy(raw + 1, k->pk, 32);
	sodium_bin2base64(b, sizeof b, raw, sizeof raw, sodium_base64_VARIANT_ORIGINAL);
	snprintf(out, SB_VKEY_MAX, "%s+%08" PRIx32 "+%s", k->name, k->hash, b);
}

/* Writes k (its seed) to home's key file, atomically, mode 0600. */
static int key_write(const char *home, const struct sb_note_key *k)
{
	char path[4096], tmp[4200], line[256], b[B64(33)];
	uint8_t raw[33] = {ALG_ED25519};
	int fd, rc, n;

	if ((rc = sb_home_path(home, KEY_FILE, path, sizeof path)))
		return rc;
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	memcpy(raw + 1, k->sk, 32); /* libsodium's secret key starts with the seed */
	sodium_bin2base64(b, sizeof b, raw, sizeof raw, sodium_base64_VARIANT_ORIGINAL);
	sodium_memzero(raw, sizeof raw);
	n = snprintf(line, sizeof line, "PRIVATE+KEY+%s+%08" PRIx32 "+%s\n", k->name, k->hash, b);
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
		return sb_seterr(SB_ERR_IO, "%s: %s", tmp, strerror(errno));
	rc = sb_write_full(fd, line, (size_t)n);
	sodium_memzero(line, sizeof line);
	if (!rc && fsync(fd))
		rc = sb_seterr(SB_ERR_IO, "%s: %s", tmp, strerror(errno));
	close(fd);
	if (!rc && rename(tmp, path))
		rc = sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	if (rc)
		unlink(tmp);
	return rc;
}

/* Makes a new key named name (a new origin when name is NULL). */
static void key_make(const char *name, struct sb_note_key *k)
{
	uint8_t id[8];
	char hex[17];

	memset(k, 0, sizeof *k);
	if (name) {
		snprintf(k->name, sizeof k->name, "%s", name);
	} else {
		randombytes_buf(id, sizeof id);
		sodium_bin2hex(hex, sizeof hex, id, sizeof id);
		snprintf(k->name, sizeof k->name, "sanbox/%s", hex);
	}
	crypto_sign_keypair(k->pk, k->sk);
	k->hash = key_hash(k->name, k->pk);
}

/* Reads the key file at path into k. */
static int key_read(const char *path, struct sb_note_key *k)
{
	char line[256] = "";
	uint8_t seed[32];
	FILE *f = fopen(path, "re");
	size_t len;

	if (!f)
		return errno == ENOENT ? SB_ERR_NOTFOUND
				       : sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	if (!fgets(line, sizeof line, f))
		line[0] = 0;
	fclose(f);
	len = strcspn(line, "\r\n");
	memset(k, 0, sizeof *k);
	if (strncmp(line, "PRIVATE+KEY+", 12) || key_fields(line + 12, len - 12, k, seed)) {
		sodium_memzero(line, sizeof line);
		return sb_seterr(SB_ERR_CORRUPT, "%s: not a signing key", path);
	}
	sodium_memzero(line, sizeof line);
	crypto_sign_seed_keypair(k->pk, k->sk, seed);
	sodium_memzero(seed, sizeof seed);
	if (key_hash(k->name, k->pk) != k->hash)
		return sb_seterr(SB_ERR_CORRUPT, "%s: the key's hash does not match it", path);
	return SB_OK;
}

int sb_key_load(const char *home, int create, struct sb_note_key *k)
{
	char path[4096];
	int rc;

	if (sodium_init() < 0)
		return sb_seterr(SB_ERR_UNAVAIL, "libsodium did not start");
	if ((rc = sb_home_path(home, KEY_FILE, path, sizeof path)))
		return rc;
	rc = key_read(path, k);
	if (rc != SB_ERR_NOTFOUND)
		return rc;
	if (!create)
		return sb_seterr(SB_ERR_NOTFOUND, "no signing key yet (%s)", path);
	key_make(NULL, k);
	return key_write(home, k);
}

int sb_key_rotate(const char *home, struct sb_note_key *k)
{
	struct sb_note_key old;
	char path[4096], vk[SB_VKEY_MAX];
	FILE *f;
	int rc;

	if ((rc = sb_key_load(home, 1, &old)) || (rc = sb_home_path(home, OLD_KEYS, path, sizeof path)))
		return rc;
	sb_key_verifier(&old, vk);
	sodium_memzero(&old.sk, sizeof old.sk);
	if (!(f = fopen(path, "ae")))
		return sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	fprintf(f, "%s\n", vk);
	if (fclose(f))
		return sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	key_make(old.name, k);
	return key_write(home, k);
}

/* Writes the note text of c into out; returns its length. */
static size_t ckpt_text(const struct sb_ckpt *c, char *out, size_t cap)
{
	char b[B64(SB_MERKLE_HASH)];

	sodium_bin2base64(b, sizeof b, c->root, SB_MERKLE_HASH, sodium_base64_VARIANT_ORIGINAL);
	return (size_t)snprintf(out, cap, "%s\n%" PRIu64 "\n%s\n", c->origin, c->size, b);
}

size_t sb_ckpt_sign(const struct sb_ckpt *c, const struct sb_note_key *k, char out[SB_CKPT_MAX])
{
	uint8_t sig[4 + crypto_sign_BYTES];
	char b[B64(sizeof sig)];
	size_t n = ckpt_text(c, out, SB_CKPT_MAX);

	sig[0] = (uint8_t)(k->hash >> 24);
	sig[1] = (uint8_t)(k->hash >> 16);
	sig[2] = (uint8_t)(k->hash >> 8);
	sig[3] = (uint8_t)k->hash;
	crypto_sign_detached(sig + 4, NULL, (const uint8_t *)out, n, k->sk);
	sodium_bin2base64(b, sizeof b, sig, sizeof sig, sodium_base64_VARIANT_ORIGINAL);
	return n + (size_t)snprintf(out + n, SB_CKPT_MAX - n, "\n%s%s %s\n", em_dash, k->name, b);
}

/* Parses the note text (up to and with its blank line) into c; *textlen
 * gets the signed text's length. */
static int ckpt_body(const char *note, size_t len, struct sb_ckpt *c, size_t *textlen)
{
	const char *end = memmem(note, len, "\n\n", 2), *l2, *l3;
	char num[24];
	size_t n;

	if (!end)
		return sb_seterr(SB_ERR_CORRUPT, "checkpoint: no blank line before the signatures");
	*textlen = (size_t)(end - note) + 1;
	if (!(l2 = memchr(note, '\n', *textlen)) || !name_ok(note, (size_t)(l2 - note)))
		return sb_seterr(SB_ERR_CORRUPT, "checkpoint: line 1: not an origin");
	memcpy(c->origin, note, (size_t)(l2 - note));
	c->origin[l2 - note] = 0;
	l2++;
	if (!(l3 = memchr(l2, '\n', *textlen - (size_t)(l2 - note))) || (n = (size_t)(l3 - l2)) == 0 ||
	    n >= sizeof num || strspn(l2, "0123456789") != n || (n > 1 && *l2 == '0'))
		return sb_seterr(SB_ERR_CORRUPT, "checkpoint: line 2: not a tree size");
	memcpy(num, l2, n);
	num[n] = 0;
	errno = 0;
	c->size = strtoull(num, NULL, 10);
	if (errno)
		return sb_seterr(SB_ERR_CORRUPT, "checkpoint: line 2: not a tree size");
	l3++;
	n = (size_t)(end - l3);
	if (memchr(l3, '\n', n) || b64_exact(l3, n, c->root, SB_MERKLE_HASH))
		return sb_seterr(SB_ERR_CORRUPT, "checkpoint: line 3: not a base64 root hash");
	return SB_OK;
}

int sb_ckpt_parse(const char *note, size_t len, struct sb_ckpt *c)
{
	size_t tl;

	return ckpt_body(note, len, c, &tl);
}

int sb_ckpt_verify(const char *note, size_t len, const struct sb_note_key *k,
		   struct sb_ckpt *c)
{
	const char *p, *end = note + len;
	size_t tl, nl = strlen(k->name);
	uint8_t sig[4 + crypto_sign_BYTES];
	int rc, line;

	if ((rc = ckpt_body(note, len, c, &tl)))
		return rc;
	for (p = note + tl + 1, line = 5; p < end; line++) {
		const char *e = memchr(p, '\n', (size_t)(end - p));
		if (!e || (size_t)(e - p) < sizeof em_dash || memcmp(p, em_dash, sizeof em_dash - 1))
			return sb_seterr(SB_ERR_CORRUPT, "checkpoint: line %d: not a signature line", line);
		p += sizeof em_dash - 1;
		if ((size_t)(e - p) > nl && !memcmp(p, k->name, nl) && p[nl] == ' ' &&
		    !b64_exact(p + nl + 1, (size_t)(e - p - (ptrdiff_t)nl - 1), sig, sizeof sig) &&
		    ((uint32_t)sig[0] << 24 | (uint32_t)sig[1] << 16 | (uint32_t)sig[2] << 8 | sig[3]) ==
			k->hash) {
			if (crypto_sign_verify_detached(sig + 4, (const uint8_t *)note, tl, k->pk))
				return sb_seterr(SB_ERR_DENIED, "checkpoint: line %d: the signature by %s does not verify",
						 line, k->name);
			return SB_OK;
		}
		p = e + 1;
	}
	return sb_seterr(SB_ERR_DENIED, "checkpoint: no signature by key %s+%08" PRIx32, k->name, k->hash);
}
