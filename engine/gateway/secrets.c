/* secrets.c - the encrypted secret store. */
#include "engine/gateway/secrets.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/home.h"

#define MAGIC	  "SBS1"
#define MAGIC_LEN 4
#define KEY_LEN	  crypto_aead_xchacha20poly1305_ietf_KEYBYTES
#define NONCE_LEN crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
#define MAC_LEN	  crypto_aead_xchacha20poly1305_ietf_ABYTES
#define FILE_MAX  (MAGIC_LEN + NONCE_LEN + SB_SECRET_VALUE_MAX + MAC_LEN)

int sb_secret_name_ok(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n >= SB_SECRET_NAME_MAX || (name[0] >= '0' && name[0] <= '9'))
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9')))
			return 0;
	}
	return 1;
}

static int check_name(const char *name)
{
	if (!sb_secret_name_ok(name))
		return sb_seterr(
		    SB_ERR_INVAL,
		    "'%.64s' is not a secret name (letters, digits and _, not "
		    "starting with a digit, at most %d bytes)",
		    name, SB_SECRET_NAME_MAX - 1);
	return SB_OK;
}

static int io_err(const char *what, const char *path)
{
	int e = errno;

	return sb_seterr(e == ENOSPC || e == EDQUOT ? SB_ERR_FULL : SB_ERR_IO,
			 "%s %s: %s", what, path, strerror(e));
}

/* Writes len bytes to path atomically: a temporary file beside it (a name
 * of its own per call, as threads of one process may write the same path
 * at once), synced, then renamed over it (or, when exclusive, linked:
 * EEXIST if path exists). */
static int write_atomic(const char *path, const void *data, size_t len, int exclusive)
{
	char tmp[4096 + 16];
	int fd, rc = SB_OK;

	snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
	fd = mkostemp(tmp, O_CLOEXEC); /* mode 0600 */
	if (fd < 0)
		return io_err("create", tmp);
	if (write(fd, data, len) != (ssize_t)len || fsync(fd))
		rc = io_err("write", tmp);
	close(fd);
	if (rc == SB_OK && exclusive && link(tmp, path))
		rc = errno == EEXIST ? SB_ERR_EXISTS : io_err("link", path);
	else if (rc == SB_OK && !exclusive && rename(tmp, path))
		rc = io_err("rename", path);
	unlink(tmp);
	return rc;
}

/* Reads at most cap bytes of path into buf. Errors: SB_ERR_NOTFOUND, IO. */
static int read_file(const char *path, unsigned char *buf, size_t cap, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;
	size_t got = 0;

	if (fd < 0)
		return errno == ENOENT ? SB_ERR_NOTFOUND : io_err("open", path);
	while (got < cap && (n = read(fd, buf + got, cap - got)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			close(fd);
			return io_err("read", path);
		}
		got += (size_t)n;
	}
	close(fd);
	*len = got;
	return SB_OK;
}

/* Loads the store's key into key (guarded memory), creating it once. */
static int key_load(const char *home, unsigned char *key)
{
	char path[4096];
	unsigned char fresh[KEY_LEN];
	size_t len = 0;
	int rc;

	if (sodium_init() < 0)
		return sb_seterr(SB_ERR_IO, "libsodium failed to initialise");
	if ((rc = sb_home_path(home, "secrets/.key", path, sizeof path)))
		return rc;
	rc = read_file(path, key, KEY_LEN + 1, &len);
	if (rc == SB_ERR_NOTFOUND) {
		char dir[4096];
		sb_home_path(home, "secrets", dir, sizeof dir);
		if ((rc = sb_mkdirs(dir, 0700)))
			return rc;
		randombytes_buf(fresh, sizeof fresh);
		rc = write_atomic(path, fresh, sizeof fresh, 1);
		sodium_memzero(fresh, sizeof fresh);
		if (rc && rc != SB_ERR_EXISTS) /* EXISTS: another process made it first */
			return rc;
		rc = read_file(path, key, KEY_LEN + 1, &len);
	}
	if (rc)
		return rc;
	if (len != KEY_LEN)
		return sb_seterr(SB_ERR_CORRUPT,
				 "%s is not a secret store key (%zu bytes)", path, len);
	return SB_OK;
}

int sb_secret_derive(const char *home, const char *purpose, const char *id,
		     unsigned char *out, size_t n)
{
	unsigned char *key = sodium_malloc(KEY_LEN);
	crypto_generichash_state st;
	int rc;

	if (!key)
		return SB_ERR_NOMEM;
	if (n < crypto_generichash_BYTES_MIN || n > crypto_generichash_BYTES_MAX)
		rc =
		    sb_seterr(SB_ERR_INVAL, "a derived value is %d to %d bytes",
			      crypto_generichash_BYTES_MIN, crypto_generichash_BYTES_MAX);
	else if ((rc = key_load(home, key)) == SB_OK) {
		/* keyed BLAKE2b over "purpose", NUL, id: a PRF of the store's key */
		crypto_generichash_init(&st, key, KEY_LEN, n);
		crypto_generichash_update(&st, (const unsigned char *)purpose,
					  strlen(purpose) + 1);
		crypto_generichash_update(&st, (const unsigned char *)id, strlen(id));
		crypto_generichash_final(&st, out, n);
	}
	sodium_free(key);
	return rc;
}

static int secret_path(const char *home, const char *name, char *buf, size_t cap)
{
	char rel[SB_SECRET_NAME_MAX + 16];
	int rc;

	if ((rc = check_name(name)))
		return rc;
	snprintf(rel, sizeof rel, "secrets/%s", name);
	return sb_home_path(home, rel, buf, cap);
}

int sb_secret_set(const char *home, const char *name, const void *value, size_t len)
{
	unsigned char *key = NULL, *file = NULL;
	char path[4096];
	unsigned long long clen;
	int rc;

	if ((rc = secret_path(home, name, path, sizeof path)))
		return rc;
	if (len > SB_SECRET_VALUE_MAX)
		return sb_seterr(SB_ERR_TOOBIG, "secret %s: value above %u KiB", name,
				 SB_SECRET_VALUE_MAX >> 10);
	if (sodium_init() < 0 || !(key = sodium_malloc(KEY_LEN)) ||
	    !(file = malloc(MAGIC_LEN + NONCE_LEN + len + MAC_LEN))) {
		rc = SB_ERR_NOMEM;
		goto out;
	}
	if ((rc = key_load(home, key)))
		goto out;
	memcpy(file, MAGIC, MAGIC_LEN);
	randombytes_buf(file + MAGIC_LEN, NONCE_LEN);
	crypto_aead_xchacha20poly1305_ietf_encrypt(
	    file + MAGIC_LEN + NONCE_LEN, &clen, value, len, (const unsigned char *)name,
	    strlen(name), NULL, file + MAGIC_LEN, key);
	rc = write_atomic(path, file, MAGIC_LEN + NONCE_LEN + clen, 0);
out:
	sodium_free(key);
	free(file);
	return rc;
}

int sb_secret_get(const char *home, const char *name, struct sb_secret **out)
{
	unsigned char *key = NULL, *file = NULL;
	struct sb_secret *s = NULL;
	char path[4096];
	size_t len = 0;
	unsigned long long plen;
	int rc;

	*out = NULL;
	if ((rc = secret_path(home, name, path, sizeof path)))
		return rc;
	if (sodium_init() < 0 || !(key = sodium_malloc(KEY_LEN)) ||
	    !(file = malloc(FILE_MAX + 1))) {
		rc = SB_ERR_NOMEM;
		goto out;
	}
	if ((rc = read_file(path, file, FILE_MAX + 1, &len))) {
		if (rc == SB_ERR_NOTFOUND)
			sb_seterr(rc, "no secret %s (set it with 'sanbox secret set %s')",
				  name, name);
		goto out;
	}
	if (len < MAGIC_LEN + NONCE_LEN + MAC_LEN || len > FILE_MAX ||
	    memcmp(file, MAGIC, MAGIC_LEN)) {
		rc = sb_seterr(SB_ERR_CORRUPT, "secret %s: not a secret file", name);
		goto out;
	}
	if ((rc = key_load(home, key)))
		goto out;
	/* sodium_malloc puts the end at a guard page: round the size so the
	 * start stays aligned for the struct */
	s = sodium_malloc((sizeof *s + len + 1 + 15) & ~(size_t)15);
	if (!s) {
		rc = SB_ERR_NOMEM;
		goto out;
	}
	if (crypto_aead_xchacha20poly1305_ietf_decrypt(
		(unsigned char *)s->value, &plen, NULL, file + MAGIC_LEN + NONCE_LEN,
		len - MAGIC_LEN - NONCE_LEN, (const unsigned char *)name, strlen(name),
		file + MAGIC_LEN, key)) {
		rc = sb_seterr(
		    SB_ERR_CORRUPT,
		    "secret %s does not open under this store's key (tampered, or "
		    "copied from another store)",
		    name);
		goto out;
	}
	s->len = (size_t)plen;
	s->value[s->len] = 0;
	*out = s;
	s = NULL;
out:
	sb_secret_free(s);
	sodium_free(key);
	free(file);
	return rc;
}

void sb_secret_free(struct sb_secret *s)
{
	if (s)
		sodium_free(s); /* wipes the guarded pages */
}

int sb_secret_rm(const char *home, const char *name)
{
	char path[4096];
	int rc;

	if ((rc = secret_path(home, name, path, sizeof path)))
		return rc;
	if (unlink(path)) {
		if (errno == ENOENT)
			return sb_seterr(SB_ERR_NOTFOUND, "no secret %s", name);
		return io_err("remove", path);
	}
	return SB_OK;
}

static int name_filter(const struct dirent *e)
{
	return sb_secret_name_ok(e->d_name);
}

int sb_secret_each(const char *home,
		   int (*fn)(void *ctx, const char *name, uint64_t set_s), void *ctx)
{
	struct dirent **ents = NULL;
	char dir[4096], path[4096 + 260];
	struct stat st;
	int n, rc = SB_OK;

	sb_home_path(home, "secrets", dir, sizeof dir);
	n = scandir(dir, &ents, name_filter, alphasort);
	if (n < 0)
		return errno == ENOENT ? SB_OK : io_err("list", dir);
	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, ents[i]->d_name);
		if (rc == SB_OK && stat(path, &st) == 0 && S_ISREG(st.st_mode))
			rc = fn(ctx, ents[i]->d_name, (uint64_t)st.st_mtime);
		free(ents[i]);
	}
	free(ents);
	return rc;
}
