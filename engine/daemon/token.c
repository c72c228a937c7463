/* token.c - remote bearer tokens, stored hashed. */
#include "engine/daemon/token.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/home.h"
#include "engine/payload.h"

static void token_hash(const char *token, char hex[2 * crypto_hash_sha256_BYTES + 1])
{
	unsigned char h[crypto_hash_sha256_BYTES];

	crypto_hash_sha256(h, (const unsigned char *)token, strlen(token));
	sodium_bin2hex(hex, 2 * crypto_hash_sha256_BYTES + 1, h, sizeof h);
}

int sb_token_create(const char *home, char out[SB_TOKEN_HEX])
{
	unsigned char raw[32];
	char path[4096], hex[2 * crypto_hash_sha256_BYTES + 1], line[80];
	int fd, n;

	if (sodium_init() < 0)
		return sb_seterr(SB_ERR_IO, "libsodium failed to initialise");
	randombytes_buf(raw, sizeof raw);
	sodium_bin2hex(out, SB_TOKEN_HEX, raw, sizeof raw);
	token_hash(out, hex);
	sb_home_path(home, "tokens", path, sizeof path);
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	n = snprintf(line, sizeof line, "%s\n", hex);
	if (write(fd, line, (size_t)n) != n || fsync(fd)) {
		close(fd);
		return sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	}
	close(fd);
	return SB_OK;
}

int sb_token_check(const char *home, const msgpack_object *args)
{
	char token[128], want[2 * crypto_hash_sha256_BYTES + 1], line[128], path[4096];
	FILE *f;
	int ok = 0;

	if (sb_map_str(args, "token", token, sizeof token) != SB_TOKEN_HEX - 1)
		return sb_seterr(SB_ERR_DENIED, "remote requests need a valid token");
	token_hash(token, want);
	sb_home_path(home, "tokens", path, sizeof path);
	f = fopen(path, "re");
	if (!f)
		return sb_seterr(SB_ERR_DENIED, "remote requests need a valid token");
	while (!ok && fgets(line, sizeof line, f))
		ok = strlen(line) > 64 && sodium_memcmp(line, want, 64) == 0;
	fclose(f);
	return ok ? SB_OK : sb_seterr(SB_ERR_DENIED, "remote requests need a valid token");
}
