/* sha256.c - SHA-256 through nettle (SHA-NI where the CPU has it). */
#include "engine/sha256.h"

_Static_assert(SB_SHA256_BYTES == SHA256_DIGEST_SIZE, "SHA-256 digest size");

void sb_sha256(uint8_t out[SB_SHA256_BYTES], const void *data, size_t len)
{
	sb_sha256_state st;

	sb_sha256_init(&st);
	sb_sha256_update(&st, data, len);
	sb_sha256_final(&st, out);
}

void sb_sha256_init(sb_sha256_state *st)
{
	sha256_init(&st->ctx);
}

void sb_sha256_update(sb_sha256_state *st, const void *data, size_t len)
{
	if (len)
		sha256_update(&st->ctx, len, data);
}

void sb_sha256_final(sb_sha256_state *st, uint8_t out[SB_SHA256_BYTES])
{
	sha256_digest(&st->ctx, SB_SHA256_BYTES, out);
}
