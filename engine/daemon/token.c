/* token.c - remote bearer tokens, stored hashed. */
#include "engine/daemon/token.h"

#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/home.h"
#include "engine/mpack.h"
#include "engine/sha256.h"

#define HASH_HEX (2 * SB_SHA256_BYTES + 1)

static void token_hash(const char *token, size_t len, char hex[HASH_HEX])
{
	unsigned char h[SB_SHA256_BYTES];

	sb_sha256(h, (const unsigned char *)token, len);
	sodium_bin2hex(hex, HASH_HEX, h, sizeof h);
}

static int name_ok(const char *s)
{
	size_t n = strlen(s);

	return n > 0 && n < SB_TOKEN_NAME_MAX &&
	       strspn(
		   s,
		   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
		   n;
}

/* Reads one line of the tokens file into its hash and name ("token-" and
 * 8 digits for a line without a name). Returns 0, or -1 for a bad line. */
static int line_parse(const char *line, char hash[HASH_HEX], char *name, size_t cap)
{
	size_t n = strcspn(line, " \n");

	if (n != HASH_HEX - 1)
		return -1;
	memcpy(hash, line, n);
	hash[n] = 0;
	line += n;
	if (*line == ' ' && line[1] != '\n' && line[1]) {
		snprintf(name, cap, "%.*s", (int)strcspn(line + 1, "\n"), line + 1);
		if (name_ok(name))
			return 0;
	}
	snprintf(name, cap, "token-%.8s", hash);
	return 0;
}

int sb_token_create(const char *home, const char *name, char out[SB_TOKEN_HEX])
{
	unsigned char raw[32];
	char path[4096], hex[HASH_HEX], line[160], h[HASH_HEX],
	    other[SB_TOKEN_NAME_MAX + 16];
	char nm[SB_TOKEN_NAME_MAX + 16];
	FILE *f;
	int fd, n;

	if (sodium_init() < 0)
		return sb_seterr(SB_ERR_IO, "libsodium failed to initialise");
	if (name && !name_ok(name))
		return sb_seterr(
		    SB_ERR_INVAL,
		    "a token name is 1 to %d letters, digits, '.', '_' or '-'",
		    SB_TOKEN_NAME_MAX - 1);
	sb_home_path(home, "tokens", path, sizeof path);
	if (name && (f = fopen(path, "re"))) {
		while (fgets(line, sizeof line, f)) {
			if (line_parse(line, h, other, sizeof other) == 0 &&
			    !strcmp(other, name)) {
				fclose(f);
				return sb_seterr(SB_ERR_EXISTS, "a token named %s exists",
						 name);
			}
		}
		fclose(f);
	}
	randombytes_buf(raw, sizeof raw);
	sodium_bin2hex(out, SB_TOKEN_HEX, raw, sizeof raw);
	sodium_memzero(raw, sizeof raw);
	token_hash(out, SB_TOKEN_HEX - 1, hex);
	snprintf(nm, sizeof nm, "%s", name ? name : "");
	if (!name)
		snprintf(nm, sizeof nm, "token-%.8s", hex);
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	n = snprintf(line, sizeof line, "%s %s\n", hex, nm);
	if (write(fd, line, (size_t)n) != n || fsync(fd)) {
		close(fd);
		return sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	}
	close(fd);
	return SB_OK;
}

static int denied(void)
{
	return sb_seterr(SB_ERR_DENIED, "remote requests need a valid token");
}

int sb_token_check(const char *home, const char *token, size_t len, char *name,
		   size_t cap)
{
	char want[HASH_HEX], line[160], hash[HASH_HEX], path[4096];
	FILE *f;
	int ok = 0;

	if (len != SB_TOKEN_HEX - 1)
		return denied();
	token_hash(token, len, want);
	sb_home_path(home, "tokens", path, sizeof path);
	if (!(f = fopen(path, "re")))
		return denied();
	while (!ok && fgets(line, sizeof line, f))
		ok = line_parse(line, hash, name, cap) == 0 &&
		     sodium_memcmp(hash, want, HASH_HEX - 1) == 0;
	fclose(f);
	return ok ? SB_OK : denied();
}

/* The length of the map header at p (n bytes) and its entry count, or 0
 * when it is not a map header or not all there. */
static size_t map_header(const uint8_t *p, size_t n, uint32_t *count)
{
	if (n >= 1 && (p[0] & 0xf0) == 0x80) {
		*count = p[0] & 0x0f;
		return 1;
	}
	if (n >= 3 && p[0] == 0xde) {
		*count = (uint32_t)p[1] << 8 | p[2];
		return 3;
	}
	if (n >= 5 && p[0] == 0xdf) {
		*count = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 |
			 (uint32_t)p[3] << 8 | p[4];
		return 5;
	}
	return 0;
}

int sb_token_check_request(const char *home, const void *req, size_t len, int complete,
			   char *name, size_t cap)
{
	const uint8_t *p = req;
	size_t at, klen, vlen;
	uint32_t count;
	msgpack_zone zone;
	msgpack_object k, v;
	int rc = SB_END;

	if (!(at = map_header(p, len, &count)))
		return len < 5 && !complete ? SB_END : denied();
	if (!msgpack_zone_init(&zone, 256))
		return SB_ERR_NOMEM;
	uint32_t i;

	for (i = 0; i < count && rc == SB_END; i++) {
		/* a key and its value must each be whole within the bytes given */
		if (sb_msgpack_check(p + at, len - at, &klen) ||
		    sb_msgpack_check(p + at + klen, len - at - klen, &vlen)) {
			rc = complete ? denied() : SB_END;
			break;
		}
		if (msgpack_unpack((const char *)p + at, klen, NULL, &zone, &k) !=
		    MSGPACK_UNPACK_SUCCESS) {
			rc = denied();
		} else if (sb_obj_is_str(&k, "token")) {
			if (msgpack_unpack((const char *)p + at + klen, vlen, NULL, &zone,
					   &v) != MSGPACK_UNPACK_SUCCESS ||
			    v.type != MSGPACK_OBJECT_STR)
				rc = denied();
			else
				rc = sb_token_check(home, v.via.str.ptr, v.via.str.size,
						    name, cap);
		}
		at += klen + vlen;
	}
	if (rc == SB_END && i == count)
		rc = denied(); /* the whole map, and no token */
	msgpack_zone_destroy(&zone);
	return rc;
}
