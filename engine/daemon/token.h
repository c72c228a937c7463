/* token.h - bearer tokens for remote clients. Tokens are 64 hex digits;
 * only their SHA-256 is stored (home/tokens, mode 0600, one per line).
 */
#ifndef SB_TOKEN_H
#define SB_TOKEN_H

#include <msgpack.h>

#define SB_TOKEN_HEX 65

/* Makes a new token, stores its hash, and writes it into out.
 * Errors: SB_ERR_IO. */
int sb_token_create(const char *home, char out[SB_TOKEN_HEX]);

/* Checks the request's "token" argument against the stored hashes.
 * Errors: SB_ERR_DENIED (missing or unknown token). */
int sb_token_check(const char *home, const msgpack_object *args);

#endif
