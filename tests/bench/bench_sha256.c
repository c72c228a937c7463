/* bench_sha256.c - SHA-256 of short inputs through each library at hand.
 *
 * The Merkle tree hashes 33- and 65-byte inputs (a leaf prefix and a
 * commitment, a node prefix and two children) and each leaf commitment a
 * salt and a payload of a few hundred bytes. This program times one-shot
 * SHA-256 of 32-, 64- and 250-byte inputs through libsodium, nettle,
 * OpenSSL's libcrypto and mbed TLS, all in this one process, checks that
 * every library gives the same digest, and prints the median over rounds
 * of the time of one hash. Prints only lines "bench NAME VALUE UNIT";
 * errors go to stderr with exit status 1.
 */
#include <mbedtls/sha256.h>
#include <nettle/sha2.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sha256.h"
#include "tests/bench/benchutil.h"

#define ROUNDS 9
#define HASHES 200000 /* per round */

typedef void (*sha_fn)(uint8_t out[32], const uint8_t *in, size_t len);

static void sha_sodium(uint8_t out[32], const uint8_t *in, size_t len)
{
	crypto_hash_sha256(out, in, len);
}

static void sha_nettle(uint8_t out[32], const uint8_t *in, size_t len)
{
	struct sha256_ctx c;

	sha256_init(&c);
	sha256_update(&c, len, in);
	sha256_digest(&c, SHA256_DIGEST_SIZE, out);
}

static void sha_openssl(uint8_t out[32], const uint8_t *in, size_t len)
{
	EVP_Digest(in, len, out, NULL, EVP_sha256(), NULL);
}

static void sha_mbedtls(uint8_t out[32], const uint8_t *in, size_t len)
{
	mbedtls_sha256_ret(in, len, out, 0);
}

static void sha_sb(uint8_t out[32], const uint8_t *in, size_t len)
{
	sb_sha256(out, in, len);
}

static const struct {
	const char *name;
	sha_fn fn;
} libs[] = {
	{ "sodium", sha_sodium },
	{ "nettle", sha_nettle },
	{ "openssl", sha_openssl },
	{ "mbedtls", sha_mbedtls },
	{ "sb", sha_sb },
};

static const size_t sizes[] = { 32, 64, 250 };

/* Median nanoseconds of one hash of len bytes through fn. Each hash takes
 * the previous digest as its first bytes, so none can be skipped. */
static double time_one(sha_fn fn, size_t len)
{
	uint8_t in[256] = { 0 }, out[32] = { 0 };
	double t[ROUNDS];

	for (int r = 0; r < ROUNDS; r++) {
		double t0 = bench_now();

		for (int i = 0; i < HASHES; i++) {
			memcpy(in, out, sizeof out);
			fn(out, in, len);
		}
		t[r] = (bench_now() - t0) / HASHES * 1e9;
	}
	return bench_median(t, ROUNDS);
}

/* Whether every library gives sodium's digest for len bytes. */
static int digests_agree(size_t len)
{
	uint8_t in[256], want[32], got[32];

	for (size_t i = 0; i < sizeof in; i++)
		in[i] = (uint8_t)(i * 7 + 1);
	sha_sodium(want, in, len);
	for (size_t l = 0; l < sizeof libs / sizeof libs[0]; l++) {
		libs[l].fn(got, in, len);
		if (memcmp(got, want, sizeof want)) {
			fprintf(stderr, "bench_sha256: %s differs at %zu bytes\n",
				libs[l].name, len);
			return 0;
		}
	}
	return 1;
}

int main(void)
{
	if (sodium_init() < 0) {
		fprintf(stderr, "bench_sha256: sodium_init failed\n");
		return 1;
	}
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
		if (!digests_agree(sizes[s]))
			return 1;
	for (size_t l = 0; l < sizeof libs / sizeof libs[0]; l++)
		for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
			printf("bench sha256.%s_%zub %.0f ns\n", libs[l].name, sizes[s],
			       time_one(libs[l].fn, sizes[s]));
	return 0;
}
