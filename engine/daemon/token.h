/* token.h - bearer tokens for remote clients.
 *
 * A token is 64 hex digits; the daemon keeps only its SHA-256, with the
 * token's name, in home/tokens (mode 0600, one "HASH NAME" line each). The
 * name is who the daemon says made a request (operator events carry it).
 */
#ifndef SB_TOKEN_H
#define SB_TOKEN_H

#include <stddef.h>

#define SB_TOKEN_HEX	  65 /* a token and its NUL */
#define SB_TOKEN_NAME_MAX 49 /* a name (letters, digits, . _ -) and its NUL */

/* Makes a new token named name (NULL: "token-" and the first 8 digits of
 * its hash), stores its hash, and writes the token into out.
 * Errors: SB_ERR_INVAL (a bad name), SB_ERR_EXISTS (the name is taken),
 * SB_ERR_IO. */
int sb_token_create(const char *home, const char *name, char out[SB_TOKEN_HEX]);

/* Checks token (len bytes, not NUL-terminated) against the stored hashes
 * and writes its name into name (cap bytes). Errors: SB_ERR_DENIED. */
int sb_token_check(const char *home, const char *token, size_t len, char *name,
		   size_t cap);

/* Finds the "token" field in the first len bytes of a msgpack request map
 * (all of it when complete is 1) and checks it as sb_token_check does.
 * Returns SB_OK with the token's name in name, SB_END when the field is
 * not within those bytes but may follow, or SB_ERR_DENIED (no map, no
 * token, a token that is not a string, an unknown token). */
int sb_token_check_request(const char *home, const void *req, size_t len, int complete,
			   char *name, size_t cap);

#endif
