/* test_secrets.c - the encrypted secret store: round trip, encryption at
 * rest, names, tampering, listing, removal, the key made by many threads
 * at once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>

#include "engine/gateway/secrets.h"
#include "testutil.h"

static const char VALUE[] = "sk-live-0123456789abcdef-very-secret";

/* Reads a whole file into a new buffer of *len bytes. */
static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	assert_non_null(buf = malloc((size_t)n + 1));
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static void test_round_trip_encrypted(void **state)
{
	char *home = tu_tmpdir(), path[4096];
	struct sb_secret *s;
	struct stat st;
	size_t len;
	char *raw;

	assert_int_equal(sb_secret_set(home, "OPENAI_API_KEY", VALUE, strlen(VALUE)),
			 SB_OK);
	assert_int_equal(sb_secret_get(home, "OPENAI_API_KEY", &s), SB_OK);
	assert_int_equal(s->len, strlen(VALUE));
	assert_string_equal(s->value, VALUE);
	sb_secret_free(s);
	/* at rest: mode 0600 and no plaintext */
	snprintf(path, sizeof path, "%s/secrets/OPENAI_API_KEY", home);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	raw = slurp(path, &len);
	assert_null(memmem(raw, len, "very-secret", 11));
	assert_int_equal(len, 4 + 24 + strlen(VALUE) + 16);
	free(raw);
	snprintf(path, sizeof path, "%s/secrets/.key", home);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(st.st_size, 32);
	/* replacing keeps one file with the new value */
	assert_int_equal(sb_secret_set(home, "OPENAI_API_KEY", "v2", 2), SB_OK);
	assert_int_equal(sb_secret_get(home, "OPENAI_API_KEY", &s), SB_OK);
	assert_string_equal(s->value, "v2");
	sb_secret_free(s);
	tu_rmrf(home);
}

static void test_names(void **state)
{
	char *home = tu_tmpdir(), long_name[80];
	struct sb_secret *s;

	assert_true(sb_secret_name_ok("A"));
	assert_true(sb_secret_name_ok("_x9"));
	assert_false(sb_secret_name_ok(""));
	assert_false(sb_secret_name_ok("9A"));
	assert_false(sb_secret_name_ok("../key"));
	assert_false(sb_secret_name_ok(".key"));
	assert_false(sb_secret_name_ok("A-B"));
	memset(long_name, 'A', sizeof long_name - 1);
	long_name[sizeof long_name - 1] = 0;
	assert_false(sb_secret_name_ok(long_name));
	assert_int_equal(sb_secret_set(home, "../evil", "x", 1), SB_ERR_INVAL);
	assert_int_equal(sb_secret_get(home, ".key", &s), SB_ERR_INVAL);
	assert_int_equal(sb_secret_get(home, "MISSING", &s), SB_ERR_NOTFOUND);
	tu_errmsg_has(SB_ERR_NOTFOUND, "MISSING", "sanbox secret set");
	assert_null(s);
	tu_rmrf(home);
}

static void test_tampering_detected(void **state)
{
	char *home = tu_tmpdir(), path[4096], other[4096];
	struct sb_secret *s;
	size_t len;
	char *raw;
	FILE *f;

	assert_int_equal(sb_secret_set(home, "A", VALUE, strlen(VALUE)), SB_OK);
	snprintf(path, sizeof path, "%s/secrets/A", home);
	/* a file copied under another name does not open */
	snprintf(other, sizeof other, "%s/secrets/B", home);
	raw = slurp(path, &len);
	assert_non_null(f = fopen(other, "wb"));
	fwrite(raw, 1, len, f);
	fclose(f);
	assert_int_equal(sb_secret_get(home, "B", &s), SB_ERR_CORRUPT);
	tu_errmsg_has(SB_ERR_CORRUPT, "B");
	/* one flipped bit does not open, and the error never shows the value */
	raw[len - 1] ^= 1;
	assert_non_null(f = fopen(path, "wb"));
	fwrite(raw, 1, len, f);
	fclose(f);
	assert_int_equal(sb_secret_get(home, "A", &s), SB_ERR_CORRUPT);
	assert_null(strstr(sb_errmsg(SB_ERR_CORRUPT), "secret-"));
	/* truncated */
	assert_non_null(f = fopen(path, "wb"));
	fwrite(raw, 1, 10, f);
	fclose(f);
	assert_int_equal(sb_secret_get(home, "A", &s), SB_ERR_CORRUPT);
	free(raw);
	tu_rmrf(home);
}

static void test_too_big(void **state)
{
	char *home = tu_tmpdir();
	char *big = calloc(1, SB_SECRET_VALUE_MAX + 1);

	assert_non_null(big);
	assert_int_equal(sb_secret_set(home, "BIG", big, SB_SECRET_VALUE_MAX + 1),
			 SB_ERR_TOOBIG);
	assert_int_equal(sb_secret_set(home, "BIG", big, SB_SECRET_VALUE_MAX), SB_OK);
	free(big);
	tu_rmrf(home);
}

struct names {
	char got[8][SB_SECRET_NAME_MAX];
	int n;
};

static int collect(void *ctx, const char *name, uint64_t set_s)
{
	struct names *c = ctx;

	assert_true(set_s > 1600000000);
	snprintf(c->got[c->n++], SB_SECRET_NAME_MAX, "%s", name);
	return 0;
}

static void test_list_and_remove(void **state)
{
	char *home = tu_tmpdir();
	struct names c = {0};

	assert_int_equal(sb_secret_each(home, collect, &c), SB_OK); /* none yet */
	assert_int_equal(c.n, 0);
	assert_int_equal(sb_secret_set(home, "ZED", "1", 1), SB_OK);
	assert_int_equal(sb_secret_set(home, "ALPHA", "2", 1), SB_OK);
	assert_int_equal(sb_secret_each(home, collect, &c), SB_OK);
	assert_int_equal(c.n, 2); /* the key file is not a secret */
	assert_string_equal(c.got[0], "ALPHA");
	assert_string_equal(c.got[1], "ZED");
	assert_int_equal(sb_secret_rm(home, "ZED"), SB_OK);
	assert_int_equal(sb_secret_rm(home, "ZED"), SB_ERR_NOTFOUND);
	c.n = 0;
	assert_int_equal(sb_secret_each(home, collect, &c), SB_OK);
	assert_int_equal(c.n, 1);
	tu_rmrf(home);
}

#define RACERS 16

struct racer {
	const char *home;
	pthread_barrier_t *go;
	unsigned char out[32];
	int rc;
	pthread_t th;
};

static void *racer_main(void *arg)
{
	struct racer *r = arg;

	pthread_barrier_wait(r->go);
	r->rc = sb_secret_derive(r->home, "vkey", "run1", r->out, sizeof r->out);
	return NULL;
}

/* Runs created at once each derive their virtual key on a worker thread
 * of one daemon: the first use of a store makes its key once, and every
 * thread reads the whole key (not a file another thread is still
 * writing), so all derive the same bytes. */
static void test_key_made_by_threads_at_once(void **state)
{
	struct racer r[RACERS];
	pthread_barrier_t go;

	for (int round = 0; round < 20; round++) {
		char *home = tu_tmpdir();
		pthread_barrier_init(&go, NULL, RACERS);
		for (int i = 0; i < RACERS; i++) {
			r[i] = (struct racer){.home = home, .go = &go};
			assert_int_equal(pthread_create(&r[i].th, NULL, racer_main, &r[i]), 0);
		}
		for (int i = 0; i < RACERS; i++)
			pthread_join(r[i].th, NULL);
		pthread_barrier_destroy(&go);
		for (int i = 0; i < RACERS; i++) {
			assert_int_equal(r[i].rc, SB_OK);
			assert_memory_equal(r[i].out, r[0].out, sizeof r[0].out);
		}
		tu_rmrf(home);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip_encrypted), cmocka_unit_test(test_names),
	    cmocka_unit_test(test_tampering_detected),	 cmocka_unit_test(test_too_big),
	    cmocka_unit_test(test_list_and_remove),
	    cmocka_unit_test(test_key_made_by_threads_at_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
