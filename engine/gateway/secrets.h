/* secrets.h - the secret store: named values, encrypted at rest.
 *
 * STATE_DIR/secrets/.key holds 32 random bytes (mode 0600, made on first
 * use); each secret is a file STATE_DIR/secrets/NAME (mode 0600): the magic
 * "SBS1", a 24-byte nonce, then the value sealed with XChaCha20-Poly1305
 * (libsodium) under that key, with the secret's name as associated data,
 * so a file copied under another name does not open. Values are written
 * atomically (temporary file, fsync, rename). Decrypted values live in
 * guarded memory (sodium_malloc) and are wiped when freed.
 *
 * Names are environment-variable names: [A-Za-z_][A-Za-z0-9_]*, at most
 * SB_SECRET_NAME_MAX - 1 bytes. Values are at most SB_SECRET_VALUE_MAX bytes.
 * Library code here never prints a value, and error details name only the
 * secret.
 */
#ifndef SB_SECRETS_H
#define SB_SECRETS_H

#include <stddef.h>
#include <stdint.h>

#define SB_SECRET_NAME_MAX  64
#define SB_SECRET_VALUE_MAX (64u << 10)

/* A decrypted value: len bytes, then a NUL. */
struct sb_secret {
	size_t len;
	char value[];
};

/* Returns 1 when name is a valid secret name, else 0. */
int sb_secret_name_ok(const char *name);

/* Stores (or replaces) secret name with len bytes of value.
 * Errors: SB_ERR_INVAL (bad name), SB_ERR_TOOBIG (value too long),
 * SB_ERR_IO (detail names the file), SB_ERR_FULL (disk full). */
int sb_secret_set(const char *home, const char *name, const void *value, size_t len);

/* Decrypts secret name into *out (the caller frees with sb_secret_free).
 * Errors: SB_ERR_NOTFOUND (no such secret), SB_ERR_CORRUPT (the file does
 * not open under the store's key), SB_ERR_INVAL, SB_ERR_IO, SB_ERR_NOMEM. */
int sb_secret_get(const char *home, const char *name, struct sb_secret **out);

/* Wipes and frees a value (NULL is fine). */
void sb_secret_free(struct sb_secret *s);

/* Removes secret name. Errors: SB_ERR_NOTFOUND, SB_ERR_INVAL, SB_ERR_IO. */
int sb_secret_rm(const char *home, const char *name);

/* Derives n (16..64) bytes for id under purpose from the store's key
 * (keyed BLAKE2b), the same on every call and in every daemon of home: a
 * run's virtual key, so a restarted daemon knows it again. Errors:
 * SB_ERR_INVAL, SB_ERR_IO, SB_ERR_CORRUPT (the store's key). */
int sb_secret_derive(const char *home, const char *purpose, const char *id,
		     unsigned char *out, size_t n);

/* Calls fn for each stored secret, in name order, with its name and the
 * time it was last set (seconds since the epoch), until fn returns non-zero
 * (which is returned). Errors: SB_ERR_IO. */
int sb_secret_each(const char *home,
		   int (*fn)(void *ctx, const char *name, uint64_t set_s), void *ctx);

#endif
