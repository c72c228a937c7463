/* fuzz_token.c - libFuzzer target for sb_token_check_request, which reads
 * the first bytes of every remote request before anything else has
 * checked them.
 *
 * A tokens file in a temporary home holds one known token (named "fuzz";
 * the seeds carry it), so the fuzzer reaches the accepting path too. Each
 * input is checked whole (complete) and at a series of its prefixes (not
 * complete), and the answers must agree: a prefix answers SB_END (more
 * bytes needed), or the final answer early; the whole input never answers
 * SB_END; an accepted request names the token. When the input is one
 * msgpack map (msgpack-c's own parser says so), the answer must be what
 * its first "token" field says.
 */
#include <ftw.h>
#include <msgpack.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/daemon/token.h"
#include "engine/error.h"
#include "engine/mpack.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
#include "tests/fuzz/fuzz.h"

/* The token the seeds carry: 64 hex digits. */
static const char known[] = "0123456789abcdef0123456789abcdef"
			    "0123456789abcdef0123456789abcdef";
static char home[64];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(path);
}

static void cleanup(void)
{
	nftw(home, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	unsigned char h[crypto_hash_sha256_BYTES];
	char hex[2 * sizeof h + 1], path[128];
	FILE *f;

	(void)argc;
	(void)argv;
	CHECK(sodium_init() >= 0);
	snprintf(home, sizeof home, "/tmp/sb-fuzz-token-XXXXXX");
	CHECK(mkdtemp(home));
	atexit(cleanup);
	crypto_hash_sha256(h, (const unsigned char *)known, sizeof known - 1);
	sodium_bin2hex(hex, sizeof hex, h, sizeof h);
	snprintf(path, sizeof path, "%s/tokens", home);
	CHECK((f = fopen(path, "w")));
	fprintf(f, "%s fuzz\n", hex);
	CHECK(fclose(f) == 0);
	return 0;
}

static int check(const uint8_t *data, size_t len, int complete)
{
	char name[SB_TOKEN_NAME_MAX + 16];
	int rc;

	memset(name, 0, sizeof name);
	rc = sb_token_check_request(home, data, len, complete, name, sizeof name);
	CHECK(rc == SB_OK || rc == SB_END || rc == SB_ERR_DENIED || rc == SB_ERR_NOMEM);
	CHECK(rc != SB_END || !complete);
	CHECK(rc != SB_OK || !strcmp(name, "fuzz"));
	return rc;
}

/* What the first "token" field of a whole map says, or 0 when data is not
 * one msgpack map by msgpack-c's parser. */
static int oracle(const uint8_t *data, size_t size, int *want)
{
	msgpack_zone zone;
	msgpack_object map;
	int ok;

	CHECK(msgpack_zone_init(&zone, 1024));
	if (sb_payload_parse(data, size, &zone, &map) != SB_OK) {
		msgpack_zone_destroy(&zone);
		return 0;
	}
	*want = SB_ERR_DENIED;
	for (uint32_t i = 0; i < map.via.map.size; i++) {
		const msgpack_object *k = &map.via.map.ptr[i].key,
				     *v = &map.via.map.ptr[i].val;
		if (!sb_obj_is_str(k, "token"))
			continue;
		ok = v->type == MSGPACK_OBJECT_STR &&
		     v->via.str.size == sizeof known - 1 &&
		     !memcmp(v->via.str.ptr, known, sizeof known - 1);
		*want = ok ? SB_OK : SB_ERR_DENIED;
		break;
	}
	msgpack_zone_destroy(&zone);
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int whole = check(data, size, 1), first = SB_END, want;
	size_t step = size <= 64 ? 1 : size / 48;

	if (whole == SB_ERR_NOMEM)
		return 0;
	/* prefixes agree with the whole: SB_END until the answer, then it */
	for (size_t n = 0; n <= size; n += step) {
		int rc = check(data, n, 0);
		if (rc == SB_ERR_NOMEM)
			return 0;
		if (first == SB_END)
			first = rc;
		else
			CHECK(rc == first);
		CHECK(rc == SB_END || rc == whole);
	}
	if (oracle(data, size, &want))
		CHECK(whole == want);
	return 0;
}
