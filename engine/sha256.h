/* sha256.h - SHA-256 (FIPS 180-4), one shot or streamed.
 *
 * Every SHA-256 the engine computes (Merkle leaves and nodes, leaf
 * commitments, projection digests, checkpoint key hashes, token hashes)
 * goes through these functions. Whatever library backs them (nettle,
 * which uses the CPU's SHA instructions where it has them), the digest is
 * FIPS 180-4 SHA-256 of the bytes given. No function can fail; none keeps
 * state between calls beyond the sb_sha256_state the caller owns.
 */
#ifndef SB_SHA256_H
#define SB_SHA256_H

#include <nettle/sha2.h>
#include <stddef.h>
#include <stdint.h>

#define SB_SHA256_BYTES 32

/* A digest under way: sb_sha256_init it, sb_sha256_update it, then
 * sb_sha256_final it. The caller owns it (on the stack is fine); it holds
 * no resources, so there is nothing to free. */
typedef struct sb_sha256_state {
	struct sha256_ctx ctx;
} sb_sha256_state;

/* Writes SHA-256 of the len bytes at data (data may be NULL when len is
 * 0) into out. */
void sb_sha256(uint8_t out[SB_SHA256_BYTES], const void *data, size_t len);

/* Starts st as the digest of no bytes. */
void sb_sha256_init(sb_sha256_state *st);

/* Adds the len bytes at data (data may be NULL when len is 0) to st. */
void sb_sha256_update(sb_sha256_state *st, const void *data, size_t len);

/* Writes the digest of every byte added to st into out; st must be
 * started again before more use. */
void sb_sha256_final(sb_sha256_state *st, uint8_t out[SB_SHA256_BYTES]);

#endif
